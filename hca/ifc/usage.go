package ifc

// Usage is what the whole device holds at one moment, over all its
// functions: the model's own QUERY_USAGE, for churn tests and operators
// (hcasim counters), so that a client's death can be seen to give back
// everything it held.
type Usage struct {
	Functions   uint64 // open functions (one per client connection)
	PDs         uint64
	CQs         uint64
	QPs         uint64
	SRQs        uint64
	Mkeys       uint64
	Maps        uint64 // memory regions mapped into functions' DMA spaces (MAP_MEM)
	MappedBytes uint64 // their bytes
	Charged     uint64 // device memory the functions' objects are charged (budgets)
}

// Values returns the fields in order (the QUERY_USAGE layout: BE64 each
// from byte 8).
func (u Usage) Values() []uint64 {
	return []uint64{u.Functions, u.PDs, u.CQs, u.QPs, u.SRQs, u.Mkeys, u.Maps, u.MappedBytes, u.Charged}
}

// UsageFrom is the inverse of Values; missing values are zero.
func UsageFrom(v []uint64) Usage {
	v = append(v, make([]uint64, 9)...)
	return Usage{Functions: v[0], PDs: v[1], CQs: v[2], QPs: v[3], SRQs: v[4], Mkeys: v[5], Maps: v[6],
		MappedBytes: v[7], Charged: v[8]}
}

// Names returns the fields' names in Values' order.
func (Usage) Names() []string {
	return []string{"functions", "pds", "cqs", "qps", "srqs", "mkeys", "maps", "mapped_bytes", "charged_bytes"}
}
