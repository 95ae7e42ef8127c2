package ifc

import "github.com/hcasim/hcasim/klm"

// Caps are the device capabilities QUERY_HCA_CAP reports.
type Caps struct {
	Mkey klm.Caps
	// Object limits per function.
	MaxPD, MaxCQ, MaxQP, MaxPSV uint32
	// Queue sizes, log 2: CQEs per CQ, WQEBBs per send queue, WQEs per
	// receive queue.
	LogMaxCQSize, LogMaxSQSize, LogMaxRQSize uint8
	// MaxSGE is the scatter/gather entries a receive WQE may hold, and a
	// send WQE within its 16 WQEBBs.
	MaxSGE uint16
	// MaxInline is the largest inline send.
	MaxInline uint32
	// MaxRDAtomic bounds outstanding RDMA READ and atomic operations per QP.
	MaxRDAtomic uint8
	// UMRFence is what mlx5 reads as umr_fence: 0 strong ordering, 1 small
	// initiator fence, 2 none.
	UMRFence uint8
	// SignatureHandover is the sho bit: integrity offload.
	SignatureHandover bool
	// MaxMappedBytes caps a function's DMA-mapped memory (0: no cap).
	MaxMappedBytes uint64
	// FuncMemBytes and DevMemBytes bound the device memory the objects of
	// one function, and of all functions, may hold (mkey translations, QP
	// engines, CQs, PSVs; budget.go); 0: no bound. A create past either
	// is refused with EXCEED_LIM.
	FuncMemBytes, DevMemBytes uint64
}
