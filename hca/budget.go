package hca

// Device memory budgets. Every object a function creates costs the daemon
// memory of its own (an mkey its translation, a QP its engines and
// queues), whatever the client's memory holds. Each function may hold up
// to Caps.FuncMemBytes of it and all functions together Caps.DevMemBytes;
// a create past either is refused with EXCEED_LIM, as a device at its
// limit refuses, and the daemon logs (once per function) which limit it
// was. An mkey is charged its translation capacity (what UMRs may fill
// later) when created. The ConnectX5Caps defaults (192 MiB a function,
// 2 GiB in all) hold what the rdma-core suite, perftest and the hcatest
// scenarios create, many times over, and stop a client that creates
// objects without end before the daemon grows by 256 MiB; `hcasim serve
// --func-mem/--dev-mem` raise them.

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
		f.refused("func_mem_bytes", c)
		return false
	}
	if !f.dev.charge(n) {
		f.refused("dev_mem_bytes", f.dev.caps.DevMemBytes)
		return false
	}
	f.charged += n
	return true
}

// refused logs, once per function, the budget that refused it; f.mu is
// held.
func (f *Func) refused(limit string, bytes uint64) {
	if f.budgetLogged {
		return
	}
	f.budgetLogged = true
	f.dev.log.Warn("memory budget reached: creates are refused with EXCEED_LIM (raise it with serve --func-mem / --dev-mem)",
		"limit", limit, "bytes", bytes, "func_holds", f.charged, "device_holds", f.dev.charged.Load())
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
