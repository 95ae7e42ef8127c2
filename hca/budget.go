package hca

// Device memory budgets. Every object a function creates costs the daemon
// memory of its own (an mkey its translation, a QP its engines and
// queues), whatever the client's memory holds. Each function may hold up
// to Caps.FuncMemBytes of it and all functions together Caps.DevMemBytes;
// a create past either is refused with EXCEED_LIM, as a device at its
// limit refuses. An mkey is charged its translation capacity (what UMRs
// may fill later) when created.

// Object costs, in bytes of device memory: estimates of what the model
// holds per object, rounded up.
const (
	mkeyBaseCost = 512
	qpCost       = 64 << 10 // two goroutines' stacks, the inbox and ACK queues, scratch
	cqCost       = 1 << 10
	psvCost      = 256
)

// mkeyCost returns what an mkey with xltOctowords of translation costs.
func mkeyCost(xltOctowords uint32) uint64 { return mkeyBaseCost + 16*uint64(xltOctowords) }

// charge reserves n bytes for f, within its budget and the device's; f.mu
// is held. It reports whether they fit.
func (f *Func) charge(n uint64) bool {
	if c := f.dev.caps.FuncMemBytes; c > 0 && f.charged+n > c {
		return false
	}
	if !f.dev.charge(n) {
		return false
	}
	f.charged += n
	return true
}

// uncharge releases what charge reserved; f.mu is held.
func (f *Func) uncharge(n uint64) {
	n = min(n, f.charged)
	f.charged -= n
	f.dev.uncharge(n)
}

// charge reserves n bytes of the device's budget.
func (d *Device) charge(n uint64) bool {
	limit := d.caps.DevMemBytes
	for {
		cur := d.charged.Load()
		if limit > 0 && cur+n > limit {
			return false
		}
		if d.charged.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (d *Device) uncharge(n uint64) { d.charged.Add(-n) }

// MemCharged returns the device memory the functions' objects hold now.
func (d *Device) MemCharged() uint64 { return d.charged.Load() }
