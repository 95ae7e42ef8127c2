package ifc

import "github.com/hcasim/hcasim/umr"

// Mailbox layouts (byte offsets; every field big-endian). docs/DEVICE.md
// has the same tables.
const (
	// QUERY_HCA_CAP output.
	CapOutMaxPD        = 8
	CapOutMaxCQ        = 12
	CapOutMaxQP        = 16
	CapOutMaxPSV       = 20
	CapOutMaxMkeys     = 24
	CapOutLogSizes     = 28 // log_max_cq_sz, log_max_sq_sz, log_max_rq_sz, log_max_klm_list_size (one byte each)
	CapOutMaxSGE       = 32 // BE16, then max_indirection, max_rd_atomic
	CapOutMaxIndir     = 34
	CapOutMaxRDAtomic  = 35
	CapOutMaxInline    = 36
	CapOutFlags        = 40 // bit 0 sho (signature handover)
	CapOutUMRFence     = 43
	CapOutLID          = 44 // BE16
	CapOutRepeatEnts   = 48 // BE16, then min and max log page size
	CapOutMinLogPage   = 50
	CapOutMaxLogPage   = 51
	CapOutMaxMapped    = 56 // BE64
	CapOutGID          = 64 // 16 bytes: the port's GID on the wire (zero: no wire)
	CapOutFuncMem      = 80 // BE64: the device memory one function's objects may hold (0: no bound)
	CapOutDevMem       = 88 // BE64: the device memory all functions' objects may hold
	CapOutSize         = 96
	CapFlagSigHandover = 1

	// QUERY_PORT_COUNTERS output: the counters from 8.
	CountersOut = 8

	// ALLOC_PD output, DEALLOC_PD input: the PD.
	PDOff = 8

	// CREATE_MKEY input: mkey context at 16 (umr.MkeySeg layout), then
	// the initial translation; output: the mkey index at 8.
	MkeyInCtx   = 16
	MkeyInXLT   = MkeyInCtx + umr.MkeySegSize
	MkeyOutIdx  = 8
	MkeyIdxOff  = 8 // DESTROY_MKEY and QUERY_MKEY input
	MkeyOutCtx  = 16
	MkeyOutSize = MkeyOutCtx + umr.MkeySegSize

	// CREATE_CQ input; output: the CQN at 8.
	CQInLogSize = 8 // one byte
	CQInRing    = 16
	CQInDBRec   = 24
	CQInSize    = 32
	CQNOff      = 8 // CREATE_CQ output, DESTROY_CQ input

	// MODIFY_CQ (resize) input: the CQN at 8, the new log size at 12 (one
	// byte), the new ring at 16 (the doorbell record stays).
	CQResizeLog  = 12
	CQResizeRing = 16
	CQResizeSize = 24

	// CREATE_QP input; output: the QPN at 8.
	QPInPD        = 8
	QPInSendCQ    = 12
	QPInRecvCQ    = 16
	QPInFlags     = 20 // bit 0: integrity (signature) enabled
	QPInLogSQ     = 24 // one byte each: log WQEBBs, log RQ WQEs, log RQ stride
	QPInLogRQ     = 25
	QPInLogStride = 26
	QPInType      = 27 // the transport service, mlx5's QPC st: QPTypeRC, QPTypeUC
	QPInSRQN      = 28 // the SRQ the QP takes its receives from (0: its own receive queue)
	QPInSQ        = 32
	QPInRQ        = 40
	QPInDBRec     = 48
	QPInSize      = 56
	// QPInXRCD is an XRC QP's XRC domain, in a CREATE_QP input of at
	// least QPInSizeXRC bytes: non-zero makes an XRC QP of QPTypeXRC a
	// target (no send or receive queue, no CQs, no PD: it serves into the
	// XRC SRQs of its domain), zero an initiator (a send queue and send CQ,
	// no receive queue).
	QPInXRCD    = 56
	QPInSizeXRC = 60
	QPTypeRC    = 0 // reliable connected
	QPTypeUC    = 1 // unreliable connected: no ACKs, a lost packet drops its message
	QPTypeUD    = 2 // unreliable datagram: each send names its destination (mlx5 st UD)
	QPTypeXRC   = 3 // extended reliable connected, initiator or target (mlx5 st XRC)
	// QPTypeRaw is a raw packet QP: its sends are Ethernet frames (an
	// Ethernet segment after the control segment), its receives take the
	// frames its flows steer to it (CmdCreateFlow). No SRQ, no PD checks
	// beyond the lkeys of its own WQEs.
	QPTypeRaw    = 4
	QPFlagIntegr = 1
	QPFlagDBHint = 2 // model extension: the send activity hint (sq.DBRecHintSize)
	// QPFlagDrainSigErr is signature pipelining (mlx5's drain_sigerr QP
	// context bit, which rdma-core's provider sets with an INIT2INIT for
	// MLX5DV_QP_CREATE_SIG_PIPELINING): a fenced WQE waits for the WQEs
	// before it and, if one of them met a signature error, the QP goes to
	// SQD instead of running it.
	QPFlagDrainSigErr = 4
	// QPFlagBlockMcastLB is IBV_QP_CREATE_BLOCK_SELF_MCAST_LB on a raw
	// packet QP: the multicast frames QPs of its own function send do not
	// reach it (mlx5's self_lb_block on the QP's TIR).
	QPFlagBlockMcastLB = 8
	// QPFlagNoSQ makes a raw packet QP a receive work queue (verbs'
	// ibv_wq): no send queue (the SQ IOVA is not read), its receive queue
	// and one CQ (send and receive CQ the same).
	QPFlagNoSQ = 16
	// QPFlagRSS makes a raw packet QP a receive-side-scaling QP: no queues
	// and no CQs; the frames its flows take go to one of the work queues
	// of its indirection table, chosen by the Toeplitz hash of the header
	// fields it names (QPInRSS*, in an input of QPInSizeRSS bytes and the
	// table after it).
	QPFlagRSS = 32
	// An RSS QP's hash: the fields (BE64, verbs' enum ibv_rx_hash_fields:
	// bits 0–7, the IPv4 and IPv6 addresses and TCP and UDP ports), the
	// function (1: Toeplitz), the key length (40), log2 of the table's
	// entries (0–8), the key, then the work queues' QPNs (BE32 each).
	QPInRSSFields = 64
	QPInRSSFunc   = 72
	QPInRSSKeyLen = 73
	QPInRSSLogTbl = 74
	QPInRSSKey    = 80
	QPInRSSWQNs   = 120
	QPInSizeRSS   = QPInRSSWQNs
	RSSKeySize    = 40
	RSSMaxLogTbl  = 8
	QPNOff        = 8 // CREATE_QP output; DESTROY_QP, modify and QUERY_QP input

	// Modify QP input (RST2INIT … RTS2SQD): qpn at 8, opt_param_mask at
	// 12, the QP context from 16. RST2INIT always takes the access flags;
	// INIT2INIT, RTS2RTS and SQD_RTS only with QPOptAccess in the mask
	// (mlx5's RRE|RAE|RWE optional-parameter bits).
	QPOptMask       = 12
	QPOptAccess     = 1<<1 | 1<<2 | 1<<3
	QPCAccess       = 16 // bit 0 remote read, bit 1 remote write, bit 2 remote atomic
	QPCRemoteLID    = 20 // BE16
	QPCRemoteQPN    = 24
	QPCRQPSN        = 28
	QPCSQPSN        = 32
	QPCMinRNR       = 36 // one byte each: min_rnr_timer, timeout, retry_cnt, rnr_retry
	QPCTimeout      = 37
	QPCRetry        = 38
	QPCRNRRetry     = 39
	QPCMaxRD        = 40 // one byte each: max_rd_atomic, max_dest_rd_atomic
	QPCMaxDestRD    = 41
	QPCMTU          = 42 // INIT2RTR: path MTU, 1 (256) … 5 (4096); 0 means 4096
	QPModifySize    = 48 // the shortest modify input; the remote GID follows in a longer one
	QPCRemoteGID    = 48 // INIT2RTR: 16 bytes, the peer's GID (zero: a LID on the fabric)
	QPModifyGIDSize = 64
	// QPCQKey is a UD QP's Q_Key (BE32), in a modify input of at least
	// QPModifyQKeySize bytes: RST2INIT always takes it, INIT2INIT,
	// RTR2RTS, RTS2RTS and SQD_RTS with QPOptQKey in the mask (mlx5's
	// MLX5_QP_OPTPAR_Q_KEY).
	QPCQKey          = 64
	QPModifyQKeySize = 68
	QPOptQKey        = 1 << 8
	QPOutState       = 8  // QUERY_QP output: the state byte, then the context from 16
	QPOutSQCounter   = 44 // QUERY_QP output: BE16 hw_sq_wqebb_counter, the index of the next send WQE the device fetches
	QPOutSize        = QPModifyQKeySize
	QPAccessRead     = 1
	QPAccessWrite    = 2
	QPAccessAtomic   = 4

	// CREATE_SRQ input (output: the SRQN at 8): PD at 8, one byte each of
	// log WQEs and log WQE stride at 16 and 17, the armed limit at 20, the
	// ring at 24, the doorbell record (the posted counter) at 32.
	// DESTROY_SRQ, QUERY_SRQ and ARM_RQ input: the SRQN at 8; ARM_RQ's
	// limit at 12. QUERY_SRQ output: the limit at 8, the WQEs taken at 12,
	// the PD at 16, log WQEs and log stride at 20 and 21.
	SRQInPD        = 8
	SRQInLogSize   = 16
	SRQInLogStride = 17
	SRQInLimit     = 20
	SRQInRing      = 24
	SRQInDBRec     = 32
	SRQInSize      = 40
	// An XRC SRQ: its XRC domain at 40 and the CQ its completions go to
	// at 44, in a CREATE_SRQ input of at least SRQInSizeXRC bytes (a zero
	// domain: a basic SRQ).
	SRQInXRCD    = 40
	SRQInCQN     = 44
	SRQInSizeXRC = 48
	// XRCDOff is ALLOC_XRCD's output and DEALLOC_XRCD's input: the domain.
	XRCDOff         = 8
	SRQNOff         = 8
	SRQArmLimit     = 12
	SRQArmSize      = 16
	SRQOutLimit     = 8
	SRQOutTaken     = 12
	SRQOutPD        = 16
	SRQOutLogSize   = 20
	SRQOutLogStride = 21
	SRQOutSize      = 24

	// CREATE_PSV input: num_psv[31:28] | pd[23:0] at 8; output: the PSV
	// indices at 8, 12, 16, 20. DESTROY_PSV input: the index at 8.
	PSVInPDNum = 8
	PSVOutIdx  = 8
	PSVOutSize = 24
	PSVIdxOff  = 8

	// CREATE_FLOW input: the raw packet QP at 8, the rule's kind at 12
	// (FlowNormal …), the number of specs at 13, the priority (BE16, lower
	// first) at 14, the flags at 16 (FlowDontTrap), then from 24 the
	// specs, each a 4-byte header — BE16 type (verbs' enum ibv_flow_spec_type
	// value), BE16 size of the whole spec — then the value and the mask,
	// each half of the rest, in the byte order of the verbs filter (network
	// order fields). Output: the flow at 8 (FlowOff), DESTROY_FLOW's input.
	FlowInQPN      = 8
	FlowInKind     = 12
	FlowInNumSpecs = 13
	FlowInPriority = 14
	FlowInFlags    = 16
	FlowInSpecs    = 24
	FlowSpecHdr    = 4
	FlowOff        = 8
	// The kinds of rule (verbs' enum ibv_flow_attr_type): a normal rule
	// matches its specs; an all-default rule takes what no normal rule
	// took, a multicast-default one the multicast frames no normal rule
	// took; a sniffer gets a copy of every frame.
	FlowNormal    = 0
	FlowAllDef    = 1
	FlowMCDefault = 2
	FlowSniffer   = 3
	// FlowDontTrap (IBV_FLOW_ATTR_FLAGS_DONT_TRAP): a frame the rule takes
	// goes on to the rules after it.
	FlowDontTrap = 2
	// The spec types the device matches (verbs' values).
	FlowSpecEth     = 0x20
	FlowSpecIPv4    = 0x30
	FlowSpecIPv6    = 0x31
	FlowSpecIPv4Ext = 0x32
	FlowSpecTCP     = 0x40
	FlowSpecUDP     = 0x41
	FlowSpecDrop    = 0x1001 // an action: the frames the rule takes are dropped
)
