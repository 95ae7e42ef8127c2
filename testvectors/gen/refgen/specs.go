package refgen

import "fmt"

func boolp(b bool) *bool { return &b }

// base returns typical parameters for a format.
func base(format, guard string, interval, blocks int) params {
	return params{Format: format, Guard: guard, Type: 1, Interval: interval, Blocks: blocks,
		RefTag: 0x1000, AppTag: 0x2222, AppMask: 0xFFFF, Check: 0xFF, Escape: "app"}
}

// specs lists the generated cases. Append only: ids are positions.
func specs() []spec {
	var l []spec
	add := func(s spec) { l = append(l, s) }
	seed := uint64(1000)
	next := func() uint64 { seed++; return seed }

	formats := []struct{ f, g string }{{"pi8", "crc16"}, {"pi8", "ipcsum"}, {"pi16", "crc64"}}

	// 1. DIX: metadata in its own buffer, every op, with and without errors.
	for _, fg := range formats {
		for _, op := range []string{"generate", "verify", "strip", "pass"} {
			p := base(fg.f, fg.g, 512, 4)
			p.Layout = "dix"
			add(spec{op: op, desc: fmt.Sprintf("DIX %s/%s %s, 4 x 512", fg.f, fg.g, op), p: p, seed: next()})
		}
		p := base(fg.f, fg.g, 4096, 3)
		p.Layout = "dix"
		add(spec{op: "verify", desc: fmt.Sprintf("DIX %s/%s data corrupted in block 2 -> guard", fg.f, fg.g),
			p: p, seed: next(), mutate: []int{2*4096 + 17}})
		wrongRef := p
		wrongRef.RefTag = 0x1001
		add(spec{op: "strip", desc: fmt.Sprintf("DIX %s/%s PI generated with ref+1 -> reftag at block 0", fg.f, fg.g),
			p: p, seed: next(), genWith: &wrongRef})
		wrongApp := p
		wrongApp.AppTag = 0x2223
		add(spec{op: "pass", desc: fmt.Sprintf("DIX %s/%s app tag 0x2223 stored, 0x2222 expected -> apptag", fg.f, fg.g),
			p: p, seed: next(), genWith: &wrongApp})
	}
	p := base("pi8", "crc16", 512, 4)
	p.Layout, p.DstGuard = "dix", "ipcsum"
	add(spec{op: "translate-guard", desc: "DIX crc16 -> ipcsum", p: p, seed: next()})

	// 2. The other mlx5 block sizes and small intervals.
	for _, iv := range []int{8, 16, 520, 1024, 4048, 4160} {
		for _, fg := range formats {
			blocks := 3
			if iv <= 16 {
				blocks = 40
			}
			p := base(fg.f, fg.g, iv, blocks)
			add(spec{op: "generate", desc: fmt.Sprintf("interval %d, %s/%s generate", iv, fg.f, fg.g), p: p, seed: next()})
			add(spec{op: "verify", desc: fmt.Sprintf("interval %d, %s/%s data corrupted in the last block -> guard", iv, fg.f, fg.g),
				p: p, seed: next(), mutate: []int{blocks*iv - 1}})
		}
		p := base("pi8", "ipcsum", iv, 3)
		p.DstGuard = "crc16"
		add(spec{op: "translate-guard", desc: fmt.Sprintf("interval %d ipcsum -> crc16 (iSER memory to wire)", iv), p: p, seed: next()})
	}

	// 3. Partial check masks: one tuple byte corrupted, each single-byte mask.
	for k := range 8 {
		for _, m := range []uint8{0x80 >> k, ^uint8(0x80 >> k)} {
			p := base("pi8", "crc16", 512, 2)
			p.Check = m
			add(spec{op: "verify", desc: fmt.Sprintf("pi8 tuple byte %d of block 1 corrupted, check mask %#02x", k, m),
				p: p, seed: next(), piPatch: map[int]byte{8 + k: 0x10}})
		}
	}
	for _, m := range []uint8{0x40, 0x20, 0x03, 0x05} {
		p := base("pi8", "crc16", 512, 3)
		p.Check = m
		p.AppMask = 0x00F0
		add(spec{op: "strip", desc: fmt.Sprintf("pi8 app tag mask 0x00f0, all tag bytes of block 2 corrupted, check mask %#02x", m),
			p: p, seed: next(), piPatch: map[int]byte{16 + 2: 0xFF, 16 + 3: 0xFF, 16 + 4: 1, 16 + 5: 1, 16 + 6: 1, 16 + 7: 1}})
	}

	// 4. Metadata larger than the tuple, tuple first or last (guard covers
	// the metadata before a last tuple).
	for _, fg := range []struct{ f, g string }{{"pi8", "crc16"}, {"pi16", "crc64"}} {
		for _, ms := range []int{16, 64, 128} {
			for _, first := range []bool{true, false} {
				if fg.f == "pi16" && ms == 16 {
					continue
				}
				p := base(fg.f, fg.g, 4096, 2)
				p.MetaSize, p.PIFirst = ms, boolp(first)
				where := "last"
				if first {
					where = "first"
				}
				add(spec{op: "generate", desc: fmt.Sprintf("%s metadata %d, PI %s", fg.f, ms, where), p: p, seed: next()})
				add(spec{op: "pass", desc: fmt.Sprintf("%s metadata %d, PI %s, first and last metadata bytes of block 1 corrupted", fg.f, ms, where),
					p: p, seed: next(), piPatch: map[int]byte{ms: 0x01, ms + ms - 1: 0x80}})
			}
		}
	}

	// 5. Streaming splits: the same results whatever the piece sizes.
	for i, sp := range [][]int{{1}, {7}, {3, 5, 11}, {513}, {520}, {4103, 1}, {2, 4096, 9}} {
		fg := formats[i%3]
		p := base(fg.f, fg.g, 512, 5)
		if fg.f == "pi16" {
			p.Interval = 4096
			p.Blocks = 2
		}
		p.Splits = sp
		ops := []string{"generate", "verify", "strip", "pass"}
		op := ops[i%4]
		add(spec{op: op, desc: fmt.Sprintf("%s/%s %s in pieces of %v", fg.f, fg.g, op, sp), p: p, seed: next(),
			mutate: []int{p.Interval*(p.Blocks-1) + 3}})
		q := p
		q.Layout = "dix"
		add(spec{op: "strip", desc: fmt.Sprintf("DIX %s/%s strip, data in pieces of %v", fg.f, fg.g, sp), p: q, seed: next()})
	}
	p = base("pi8", "crc16", 512, 3)
	p.DstGuard, p.Splits = "ipcsum", []int{6}
	add(spec{op: "translate-guard", desc: "crc16 -> ipcsum in pieces of 6 (every tuple split)", p: p, seed: next()})

	// 6. Edges: ref tag wrap, type 3 escapes, escapes off.
	p = base("pi8", "crc16", 512, 4)
	p.RefTag = 0xFFFFFFFE
	add(spec{op: "generate", desc: "pi8 ref tag wraps from 0xfffffffe to 0x1", p: p, seed: next()})
	p = base("pi16", "crc64", 512, 4)
	p.RefTag = 0xFFFFFFFFFFFE
	add(spec{op: "verify", desc: "pi16 48-bit ref tag wraps", p: p, seed: next()})
	p = base("pi8", "crc16", 512, 2)
	p.Type, p.Escape, p.RefTag = 3, "app_ref", 0xFFFFFFFF
	esc := p
	esc.AppTag = 0xFFFF
	add(spec{op: "verify", desc: "type 3 app 0xffff ref 0xffffffff escapes corrupted data", p: p, seed: next(),
		genWith: &esc, mutate: []int{5}})
	p.Escape = "none"
	add(spec{op: "verify", desc: "type 3 same tuple with escapes off -> guard", p: p, seed: next(),
		genWith: &esc, mutate: []int{5}})

	// 7. mlx5dv CRC block signatures (EXTENSIONS.md): crc32 with the CRC-32
	// and CRC-32C guards, crc64 with CRC-64/XZ for CRC64_XP10; both seeds;
	// the mlx5 block sizes; the whole-guard check masks; splits.
	crcs := []struct{ f, g string }{{"crc32", "crc32"}, {"crc32", "crc32c"}, {"crc64", "crc64xp10"}}
	crc := func(f, g string, iv, blocks int, seed string) params {
		return params{Format: f, Guard: g, Interval: iv, Blocks: blocks, Check: 0xFF, Escape: "none", CRCSeed: seed}
	}
	mask := func(f string) uint8 {
		if f == "crc32" {
			return 0xF0
		}
		return 0xFF
	}
	for _, fg := range crcs {
		for _, sd := range []string{"zeros", "ones"} {
			for _, op := range []string{"generate", "verify", "strip", "pass"} {
				p := crc(fg.f, fg.g, 512, 4, sd)
				p.Check = mask(fg.f)
				add(spec{op: op, desc: fmt.Sprintf("%s/%s seed %s %s, 4 x 512", fg.f, fg.g, sd, op), p: p, seed: next()})
			}
		}
		for _, iv := range []int{520, 4048, 4096, 4160} {
			p := crc(fg.f, fg.g, iv, 3, "ones")
			p.Check = mask(fg.f)
			add(spec{op: "verify", desc: fmt.Sprintf("%s/%s interval %d, data corrupted in block 1 -> guard", fg.f, fg.g, iv),
				p: p, seed: next(), mutate: []int{iv + 9}})
		}
		p := crc(fg.f, fg.g, 512, 3, "ones")
		p.Check = mask(fg.f)
		add(spec{op: "strip", desc: fmt.Sprintf("%s/%s CRC byte 1 of block 2 corrupted -> guard", fg.f, fg.g),
			p: p, seed: next(), piPatch: map[int]byte{2*p.tuple() + 1: 0x01}})
		q := p
		q.Check = 0
		add(spec{op: "strip", desc: fmt.Sprintf("%s/%s CRC corrupted, check mask 0: nothing checked", fg.f, fg.g),
			p: q, seed: next(), piPatch: map[int]byte{2*p.tuple() + 1: 0x01}})
		zeroSeed := p
		zeroSeed.CRCSeed = "zeros"
		add(spec{op: "verify", desc: fmt.Sprintf("%s/%s generated with seed zeros, checked with ones -> guard", fg.f, fg.g),
			p: p, seed: next(), genWith: &zeroSeed})
		r := crc(fg.f, fg.g, 512, 3, "ones")
		r.Check, r.Splits = mask(fg.f), []int{3, 509, 7}
		add(spec{op: "pass", desc: fmt.Sprintf("%s/%s pass in pieces of %v", fg.f, fg.g, r.Splits), p: r, seed: next()})
	}
	p = crc("crc32", "crc32c", 512, 3, "ones")
	p.Check, p.DstGuard = 0xF0, "crc32"
	add(spec{op: "translate-guard", desc: "crc32: CRC-32C -> CRC-32", p: p, seed: next()})
	return l
}
