package klm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Table errors.
var (
	ErrNoMkey         = errors.New("klm: no mkey at that index")
	ErrIndex          = errors.New("klm: mkey index out of range or reserved")
	ErrTableFull      = errors.New("klm: mkey table full")
	ErrBadTranslation = errors.New("klm: translation not usable")
	ErrTooManyEntries = errors.New("klm: translation has more entries than allowed")
	ErrBadAccess      = errors.New("klm: access rights not allowed (remote write or atomic without local write)")
	ErrBadPageSize    = errors.New("klm: page size not supported")
	ErrBadAccessMode  = errors.New("klm: access mode not supported")
)

// Mkey is one memory key's context. Published Mkeys are immutable: the
// table replaces them, it never changes them, so a resolution in progress
// sees one consistent key.
type Mkey struct {
	// Variant is the key's current variant byte.
	Variant uint8
	// Free is set while the key is not registered (after creation without
	// a translation, or after an invalidation); every access faults.
	Free bool
	// PD is the protection domain; AnyPD (the reserved lkey only) waives
	// the PD check.
	PD    uint32
	AnyPD bool
	// Access are the permissions.
	Access Access
	// UMREnabled allows UMR work requests to modify the key (umr_en).
	UMREnabled bool
	// Mode is the translation mode, fixed at creation.
	Mode AccessMode
	// StartAddr and Len are the key's address range; with Length64 the
	// key covers every address from StartAddr on.
	StartAddr, Len uint64
	Length64       bool
	// LogPageSize is the MTT page size or KSM entity size, log 2.
	LogPageSize uint8
	// QPN is the QP the key is bound to (0xFFFFFF: none).
	QPN uint32
	// RemoteInvalidate allows a SEND_WITH_INV to invalidate the key (en_rinval).
	RemoteInvalidate bool
	// SmallFence is small_fence_on_rdma_read_response.
	SmallFence bool
	// BSFEnabled marks a signature key; BSF holds its 64-byte BSF, which the
	// signature layer decodes.
	BSFEnabled bool
	BSF        []byte
	// ExpectedSigErr is the expected_sigerr_count bit.
	ExpectedSigErr uint8
	// XLTOctowords is the translation capacity in 16-byte units, fixed at
	// creation (translations_octword_size); XLT holds the translation bytes.
	XLTOctowords uint32
	XLT          []byte

	tr translation
}

// Clone returns a copy of m that shares no mutable state with it, for
// building the next version of a key.
func (m *Mkey) Clone() *Mkey {
	c := *m
	c.XLT = clone(m.XLT)
	c.BSF = clone(m.BSF)
	c.tr = translation{}
	return &c
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// translation is the parsed form of an Mkey's XLT.
type translation struct {
	ok      bool
	entries []indirect // KLM and KSM
	rep     *repeat    // repeat block
	mapped  uint64     // bytes mapped from the key's base (page base for MTT)
}

type indirect struct {
	start, len uint64 // offset of the entry in the key's space, and its length
	key        Key
	va         uint64
}

type repeat struct {
	cycle, count uint64
	ents         []repeatEnt
}

type repeatEnt struct {
	off, len, stride uint64 // offset within the cycle, bytes per cycle, stride
	key              Key
	va               uint64
}

// parse validates m's translation against caps and prepares it for
// resolution. A free key is not parsed.
func (m *Mkey) parse(c *Caps) error {
	m.tr = translation{}
	if !m.Access.Valid() {
		return fmt.Errorf("access %v: %w", m.Access, ErrBadAccess)
	}
	if len(m.XLT) > int(m.XLTOctowords)*OctowordSize {
		return fmt.Errorf("%d translation bytes for a capacity of %d octowords: %w", len(m.XLT), m.XLTOctowords, ErrTooManyEntries)
	}
	if m.Free {
		return nil
	}
	switch m.Mode {
	case ModePA:
		m.tr.mapped = ^uint64(0)
	case ModeMTT, ModeKSM:
		if m.LogPageSize < c.MinLogPageSize || m.LogPageSize > c.MaxLogPageSize {
			return fmt.Errorf("log page size %d not in %d..%d: %w", m.LogPageSize, c.MinLogPageSize, c.MaxLogPageSize, ErrBadPageSize)
		}
		size := MTTSize
		if m.Mode == ModeKSM {
			size = KSMSize
		}
		n := uint64(len(m.XLT) / size)
		if n > uint64(c.MaxListEntries()) {
			return fmt.Errorf("%d %v entries, at most %d: %w", n, m.Mode, c.MaxListEntries(), ErrTooManyEntries)
		}
		m.tr.mapped = n << m.LogPageSize
	case ModeKLM:
		if len(m.XLT) >= RepeatCtrlSize && binary.BigEndian.Uint32(m.XLT[4:]) == RepeatBlockOp {
			return m.parseRepeat(c)
		}
		return m.parseKLM(c)
	default:
		return fmt.Errorf("mode %v: %w", m.Mode, ErrBadAccessMode)
	}
	m.tr.ok = true
	return nil
}

// parseKLM takes entries until they cover the key's length (the rest of the
// translation buffer may hold padding or stale entries); an entry with a
// byte count of 0 ends the list.
func (m *Mkey) parseKLM(c *Caps) error {
	var off uint64
	var ents []indirect
	for i := 0; i+KLMSize <= len(m.XLT); i += KLMSize {
		if !m.Length64 && off >= m.Len {
			break
		}
		e := KLM(m.XLT[i:]).Fields()
		if e.ByteCount == 0 {
			break
		}
		if len(ents) == int(c.MaxListEntries()) {
			return fmt.Errorf("more than %d KLM entries: %w", c.MaxListEntries(), ErrTooManyEntries)
		}
		ents = append(ents, indirect{start: off, len: uint64(e.ByteCount), key: e.Key, va: e.VA})
		off += uint64(e.ByteCount)
	}
	m.tr = translation{ok: true, entries: ents, mapped: off}
	return nil
}

func (m *Mkey) parseRepeat(c *Caps) error {
	h := RepeatCtrl(m.XLT).Fields()
	n := int(h.NumEntries)
	if n == 0 || n > int(c.MaxRepeatEntries) {
		return fmt.Errorf("repeat block with %d entries, 1..%d allowed: %w", n, c.MaxRepeatEntries, ErrBadTranslation)
	}
	if RepeatCtrlSize+n*RepeatEntrySize > len(m.XLT) {
		return fmt.Errorf("repeat block with %d entries in %d bytes: %w", n, len(m.XLT), ErrBadTranslation)
	}
	r := &repeat{count: uint64(h.RepeatCount), ents: make([]repeatEnt, n)}
	for i := range n {
		e := RepeatEntry(m.XLT[RepeatCtrlSize+i*RepeatEntrySize:]).Fields()
		r.ents[i] = repeatEnt{off: r.cycle, len: uint64(e.ByteCount), stride: uint64(e.Stride), key: e.Key, va: e.VA}
		r.cycle += uint64(e.ByteCount)
	}
	if r.cycle == 0 || r.cycle != uint64(h.BytesPerCycle) {
		return fmt.Errorf("repeat block of %d bytes per cycle, entries sum to %d: %w", h.BytesPerCycle, r.cycle, ErrBadTranslation)
	}
	m.tr = translation{ok: true, rep: r, mapped: r.cycle * r.count}
	return nil
}

const chunkBits = 12

type chunk [1 << chunkBits]atomic.Pointer[Mkey]

// Table is one function's mkey table. Lookups and resolutions take no
// locks; changes are serialised. A Table is safe for concurrent use.
type Table struct {
	caps   Caps
	mem    *Memory
	mu     sync.Mutex // serialises changes
	chunks []atomic.Pointer[chunk]
	next   uint32 // allocation hint, under mu
	count  uint32 // mkeys created, under mu
	check  func(index uint32, cur, next *Mkey) error
}

// SetCheck installs a check every Update runs on the context it is about
// to publish (with the table's lock held: check must not wait for a lock
// held by a caller of the table): the device's rules on what a context
// may name outside the table, such as a BSF's PSVs. An error leaves the
// table unchanged and is returned by Update. Set it before the table is
// used.
func (t *Table) SetCheck(check func(index uint32, cur, next *Mkey) error) { t.check = check }

// reserved is the mkey behind ReservedLKey.
var reserved = &Mkey{
	PD: 0, AnyPD: true, Access: LocalRead | LocalWrite, Mode: ModePA,
	Length64: true, QPN: 0xFFFFFF, tr: translation{ok: true, mapped: ^uint64(0)},
}

// NewTable returns an empty table over mem with the given capabilities.
func NewTable(c Caps, mem *Memory) *Table {
	c.MaxMkeys = min(max(c.MaxMkeys, FirstIndex+1), MaxIndex+1)
	c.LogMaxKLMListSize = min(c.LogMaxKLMListSize, 24)
	return &Table{
		caps:   c,
		mem:    mem,
		chunks: make([]atomic.Pointer[chunk], (c.MaxMkeys+(1<<chunkBits)-1)>>chunkBits),
		next:   FirstIndex,
	}
}

// Caps returns the table's capabilities.
func (t *Table) Caps() Caps { return t.caps }

// Memory returns the address space the table's keys translate into.
func (t *Table) Memory() *Memory { return t.mem }

// Lookup returns the current context of the mkey at index, or nil. The
// context is shared and must not be modified (Clone it to build a change).
func (t *Table) Lookup(index uint32) *Mkey {
	if index == ReservedLKey.Index() {
		return reserved
	}
	if index >= t.caps.MaxMkeys {
		return nil
	}
	c := t.chunks[index>>chunkBits].Load()
	if c == nil {
		return nil
	}
	return c[index&(1<<chunkBits-1)].Load()
}

func (t *Table) slot(index uint32) *atomic.Pointer[Mkey] {
	ci := index >> chunkBits
	c := t.chunks[ci].Load()
	if c == nil {
		c = new(chunk)
		t.chunks[ci].Store(c)
	}
	return &c[index&(1<<chunkBits-1)]
}

// Create adds an mkey with context m at a free index and returns its key
// (index and m.Variant). m must be valid for the table's capabilities.
func (t *Table) Create(m Mkey) (Key, error) {
	m.XLT, m.BSF = clone(m.XLT), clone(m.BSF) // the caller keeps its buffers
	if err := m.parse(&t.caps); err != nil {
		return 0, fmt.Errorf("create mkey: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count >= t.caps.MaxMkeys-FirstIndex {
		return 0, fmt.Errorf("create mkey: %w", ErrTableFull)
	}
	for i := t.next; ; {
		if t.Lookup(i) == nil {
			t.slot(i).Store(&m)
			t.count++
			t.next = i + 1
			if t.next >= t.caps.MaxMkeys {
				t.next = FirstIndex
			}
			return MakeKey(i, m.Variant), nil
		}
		if i++; i >= t.caps.MaxMkeys {
			i = FirstIndex
		}
	}
}

// Destroy removes the mkey at index.
func (t *Table) Destroy(index uint32) error {
	if index < FirstIndex || index >= t.caps.MaxMkeys {
		return fmt.Errorf("destroy mkey %#x: %w", index, ErrIndex)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.Lookup(index) == nil {
		return fmt.Errorf("destroy mkey %#x: %w", index, ErrNoMkey)
	}
	t.slot(index).Store(nil)
	t.count--
	return nil
}

// Update replaces the mkey at index atomically: build receives the current
// context and returns the next one (a Clone it changed, which it must not
// touch after returning), or an error that leaves the table unchanged. The new context is validated before it is
// published. Concurrent updates are serialised.
func (t *Table) Update(index uint32, build func(cur *Mkey) (*Mkey, error)) error {
	if index < FirstIndex || index >= t.caps.MaxMkeys {
		return fmt.Errorf("update mkey %#x: %w", index, ErrIndex)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.Lookup(index)
	if cur == nil {
		return fmt.Errorf("update mkey %#x: %w", index, ErrNoMkey)
	}
	next, err := build(cur)
	if err != nil {
		return err
	}
	if next == nil || next.Mode != cur.Mode {
		return fmt.Errorf("update mkey %#x: the access mode is fixed at creation: %w", index, ErrBadAccessMode)
	}
	if err := next.parse(&t.caps); err != nil {
		return fmt.Errorf("update mkey %#x: %w", index, err)
	}
	if t.check != nil {
		if err := t.check(index, cur, next); err != nil {
			return fmt.Errorf("update mkey %#x: %w", index, err)
		}
	}
	t.slot(index).Store(next)
	return nil
}
