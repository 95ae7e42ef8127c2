package klm_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/hcasim/hcasim/klm"
)

// Benchmarks of Table.Resolve. Each resolves a 4 KiB range at one of 1024
// pseudo-random byte offsets of a key, into preallocated segments, so a
// resolution must not allocate.
//
//   - mtt: an MTT key of N 4 KiB pages, scattered (no two consecutive pages
//     contiguous in memory): 4 KiB spans 2 pages, 2 segments.
//   - klm: a KLM key of N 4 KiB entries through ReservedLKey at scattered
//     pages: 2 entries, 2 segments.
//   - ksm: a KSM key of N 4 KiB entities, the same.
//   - strided: a signature key over N 512-byte blocks with 8-byte PI (the
//     repeat block of mlx5-integrity.md §2.4) through a KLM PI MR, as the
//     kernel maps a 2-entry data + 1-entry metadata SG list: 4 KiB of the
//     520-byte stream is about 8 data + 8 PI segments.

const benchIOVA = 0x1_0000_0000

type benchEnv struct {
	tbl  *klm.Table
	reqs []klm.Request
	segs int // segments per resolution, at most
}

// benchRequests makes 1024 requests of n bytes at pseudo-random offsets
// of [start, start+size).
func benchRequests(key klm.Key, start, size, n uint64, need klm.Access) []klm.Request {
	r := rand.New(rand.NewPCG(uint64(size), n))
	reqs := make([]klm.Request, 1024)
	for i := range reqs {
		reqs[i] = klm.Request{Key: key, PD: testPD, Addr: start + r.Uint64N(size-n+1), Len: n, Access: need}
	}
	return reqs
}

func newBenchEnv(b testing.TB, mode string, n int) *benchEnv {
	mem := klm.NewMemory()
	tbl := klm.NewTable(klm.ConnectX5, mem)
	create := func(m klm.Mkey) klm.Key {
		k, err := tbl.Create(m)
		if err != nil {
			b.Fatal(err)
		}
		return k
	}
	const page = 4096
	r := rand.New(rand.NewPCG(uint64(n), 1))
	perm := r.Perm(n)
	page0 := func(i int) uint64 { return benchIOVA + uint64(perm[i])*page }
	if mode != "strided" {
		if err := mem.Map(benchIOVA, make([]byte, n*page)); err != nil {
			b.Fatal(err)
		}
	}
	size := uint64(n) * page
	switch mode {
	case "mtt":
		es := make([]klm.MTTFields, n)
		for i := range es {
			es[i] = rw(page0(i))
		}
		const start = 0x7f00_0000_0000
		k := create(mttMkey(start, size, 12, es...))
		return &benchEnv{tbl, benchRequests(k, start, size, 4096, klm.LocalRead), 2}
	case "klm":
		es := make([]klm.KLMFields, n)
		for i := range es {
			es[i] = klm.KLMFields{ByteCount: page, Key: klm.ReservedLKey, VA: page0(i)}
		}
		k := create(klmMkey(0, size, es...))
		return &benchEnv{tbl, benchRequests(k, 0, size, 4096, klm.RemoteRead), 2}
	case "ksm":
		es := make([]klm.KSMFields, n)
		for i := range es {
			es[i] = klm.KSMFields{Key: klm.ReservedLKey, VA: page0(i)}
		}
		k := create(ksmMkey(0, size, 12, es...))
		return &benchEnv{tbl, benchRequests(k, 0, size, 4096, klm.RemoteRead), 2}
	case "strided":
		sig, total := stridedKey(b, tbl, n, true)
		return &benchEnv{tbl, benchRequests(sig, 0, total, min(4096, total), klm.RemoteRead), 20}
	}
	b.Fatalf("mode %q", mode)
	return nil
}

// stridedKey maps blocks×512 bytes of data (in two SG entries) and
// blocks×8 bytes of PI and creates the signature key over them: through a
// KLM PI MR (pimr) or directly through ReservedLKey (PA mode, one data
// entry). It returns the key and the stream's length.
func stridedKey(b testing.TB, tbl *klm.Table, blocks int, pimr bool) (klm.Key, uint64) {
	mem := tbl.Memory()
	dataLen, metaLen := uint64(blocks)*512, uint64(blocks)*8
	half := dataLen / 2
	const d1, d2, m = benchIOVA, 2 * benchIOVA, 3 * benchIOVA
	for _, r := range []struct{ iova, n uint64 }{{d1, half}, {d2, dataLen - half}, {m, metaLen}} {
		if err := mem.Map(r.iova, make([]byte, r.n)); err != nil {
			b.Fatal(err)
		}
	}
	dk, dva, pk, pva := klm.ReservedLKey, uint64(d1), klm.ReservedLKey, uint64(m)
	if pimr {
		k, err := tbl.Create(klmMkey(0, dataLen+metaLen,
			klm.KLMFields{ByteCount: uint32(half), Key: klm.ReservedLKey, VA: d1},
			klm.KLMFields{ByteCount: uint32(dataLen - half), Key: klm.ReservedLKey, VA: d2},
			klm.KLMFields{ByteCount: uint32(metaLen), Key: klm.ReservedLKey, VA: m}))
		if err != nil {
			b.Fatal(err)
		}
		dk, dva, pk, pva = k, 0, k, dataLen
	} else if err := mem.Map(d1+half, make([]byte, dataLen-half)); err != nil {
		b.Fatal(err) // PA mode: one contiguous data entry
	}
	sig, err := tbl.Create(sigMkey(dataLen+metaLen, sigXLT(uint32(blocks), dk, dva, pk, pva)))
	if err != nil {
		b.Fatal(err)
	}
	return sig, dataLen + metaLen
}

func runResolve(b *testing.B, tbl *klm.Table, reqs []klm.Request, maxSegs int) {
	segs := make([][]byte, 0, maxSegs+8)
	var err error
	b.ReportAllocs()
	b.SetBytes(int64(reqs[0].Len))
	i := 0
	for b.Loop() {
		if _, err = tbl.Resolve(segs[:0], reqs[i&(len(reqs)-1)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkResolve(b *testing.B) {
	for _, mode := range []string{"mtt", "klm", "ksm", "strided"} {
		for _, n := range []int{16, 256, 4096} {
			b.Run(fmt.Sprintf("mode=%s/entries=%d", mode, n), func(b *testing.B) {
				e := newBenchEnv(b, mode, n)
				runResolve(b, e.tbl, e.reqs, e.segs)
			})
		}
	}
}

// BenchmarkResolveStrided64K: the whole signature stream of 64 KiB of data
// in 512-byte blocks with 8-byte PI (128 cycles, 256 segments), through a
// KLM PI MR and in PA mode.
func BenchmarkResolveStrided64K(b *testing.B) {
	for _, pimr := range []bool{true, false} {
		name := "pimr=klm"
		if !pimr {
			name = "pimr=pa"
		}
		b.Run(name, func(b *testing.B) {
			tbl := klm.NewTable(klm.ConnectX5, klm.NewMemory())
			sig, total := stridedKey(b, tbl, 128, pimr)
			req := klm.Request{Key: sig, PD: testPD, Len: total, Access: klm.RemoteWrite}
			segs, err := tbl.Resolve(nil, req)
			if err != nil || len(segs) != 256 {
				b.Fatalf("%d segments, %v", len(segs), err)
			}
			runResolve(b, tbl, []klm.Request{req}, 256)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/128, "ns/block")
		})
	}
}

// TestBenchmarkSetups checks the benchmarks' keys resolve as described.
func TestBenchmarkSetups(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, mode := range []string{"mtt", "klm", "ksm", "strided"} {
		for _, n := range []int{16, 256} {
			t.Run(fmt.Sprintf("%s/%d", mode, n), func(t *testing.T) {
				e := newBenchEnv(t, mode, n)
				for _, r := range e.reqs[:64] {
					segs, err := e.tbl.Resolve(nil, r)
					if err != nil {
						t.Fatalf("%+v: %v", r, err)
					}
					if len(segs) > e.segs {
						t.Fatalf("%+v: %d segments, at most %d expected", r, len(segs), e.segs)
					}
					var total uint64
					for _, s := range segs {
						total += uint64(len(s))
					}
					if total != r.Len {
						t.Fatalf("%+v: %d bytes", r, total)
					}
				}
			})
		}
	}
}
