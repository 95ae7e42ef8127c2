package hca

// Receive-side scaling for raw packet QPs: an RSS QP (ifc.QPFlagRSS) has
// no queues of its own; each frame its flows take goes to one of the work
// queues (raw QPs of ifc.QPFlagNoSQ) of its indirection table, the entry
// the Toeplitz hash of the frame's selected header fields picks (the low
// bits of the hash, as a NIC's RSS table is indexed).

import (
	"encoding/binary"

	"github.com/hcasim/hcasim/hca/ifc"
)

// Hash fields (verbs' enum ibv_rx_hash_fields) the device hashes.
const (
	rssSrcIPv4 = 1 << iota
	rssDstIPv4
	rssSrcIPv6
	rssDstIPv6
	rssSrcTCP
	rssDstTCP
	rssSrcUDP
	rssDstUDP
	rssKnown = 1<<8 - 1
)

// rssConf is an RSS QP's hash and indirection table.
type rssConf struct {
	fields uint64
	key    [ifc.RSSKeySize]byte
	wqs    []*QP // 2^n work queues, each holding a reference (rssRefs)
}

// parseRSS reads an RSS QP's hash from in and looks up its work queues
// among f's QPs (under f.mu).
func (f *Func) parseRSS(in ifc.In) (*rssConf, ifc.Out) {
	if len(in) < ifc.QPInSizeRSS {
		return nil, failOut(ifc.StatusBadInputLen, uint32(len(in)), "an RSS QP needs %d bytes", ifc.QPInSizeRSS)
	}
	fields, log := binary.BigEndian.Uint64(in[ifc.QPInRSSFields:]), in.U8(ifc.QPInRSSLogTbl)
	if in.U8(ifc.QPInRSSFunc) != 1 || in.U8(ifc.QPInRSSKeyLen) != ifc.RSSKeySize || fields&^rssKnown != 0 || log > ifc.RSSMaxLogTbl {
		return nil, failOut(ifc.StatusBadParam, uint32(log), "RSS function %d key %d fields %#x table 2^%d",
			in.U8(ifc.QPInRSSFunc), in.U8(ifc.QPInRSSKeyLen), fields, log)
	}
	n := 1 << log
	if len(in) < ifc.QPInRSSWQNs+4*n {
		return nil, failOut(ifc.StatusBadInputLen, uint32(len(in)), "an RSS table of %d entries", n)
	}
	r := &rssConf{fields: fields, wqs: make([]*QP, n)}
	copy(r.key[:], in[ifc.QPInRSSKey:])
	for i := range r.wqs {
		wqn := in.U32(ifc.QPInRSSWQNs+4*i) & 0xFFFFFF
		wq := f.qps[wqn]
		if wq == nil || !wq.wq {
			return nil, failOut(ifc.StatusBadResource, wqn, "no work queue %#x", wqn)
		}
		r.wqs[i] = wq
	}
	for _, wq := range r.wqs {
		wq.rssRefs++
	}
	return r, nil
}

// release drops the table's references (under f.mu).
func (r *rssConf) release() {
	for _, wq := range r.wqs {
		wq.rssRefs--
	}
}

// pick returns the work queue the frame goes to.
func (r *rssConf) pick(v *frameView) *QP {
	var in [36]byte
	n := 0
	add := func(field uint64, b []byte) {
		if r.fields&field != 0 {
			n += copy(in[n:], b)
		}
	}
	switch v.l3 {
	case 4:
		add(rssSrcIPv4, v.ip4[0:4])
		add(rssDstIPv4, v.ip4[4:8])
	case 6:
		add(rssSrcIPv6, v.ip6[0:16])
		add(rssDstIPv6, v.ip6[16:32])
	}
	if v.hasL4 && v.proto == 6 {
		add(rssSrcTCP, v.l4[2:4])
		add(rssDstTCP, v.l4[0:2])
	}
	if v.hasL4 && v.proto == 17 {
		add(rssSrcUDP, v.l4[2:4])
		add(rssDstUDP, v.l4[0:2])
	}
	return r.wqs[toeplitz(r.key[:], in[:n])&uint32(len(r.wqs)-1)]
}

// toeplitz is the Toeplitz hash of data under key (Microsoft's RSS
// definition): for each set bit of data, the 32 key bits starting at
// that bit's position are XORed in.
func toeplitz(key, data []byte) uint32 {
	bit := func(i int) uint32 {
		if i/8 >= len(key) {
			return 0
		}
		return uint32(key[i/8]>>(7-i%8)) & 1
	}
	var win uint32
	for i := range 32 {
		win = win<<1 | bit(i)
	}
	var h uint32
	next := 32
	for _, b := range data {
		for j := 7; j >= 0; j-- {
			if b>>j&1 != 0 {
				h ^= win
			}
			win = win<<1 | bit(next)
			next++
		}
	}
	return h
}
