package verbs

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
)

// Device queries: what ibv_query_device, ibv_query_port, ibv_query_gid and
// mlx5dv_query_device report, derived as hcasim's libibverbs front end
// (ibverbs/c/device.c, ibverbs/c/mlx5dv.c) derives them, from the same
// QUERY_HCA_CAP answer, so that a Go program and `hcasim exec --
// ibv_devinfo -v` see one device.
//
// The device reports limits, its LID and its GID; it has no identity
// command (mlx5's QUERY_ADAPTER) and no port command (QUERY_VPORT_STATE):
// both drivers give it a ConnectX-5's identity (the constants below, and a
// node GUID made from the LID) and a port that is up, 4X EDR, MTU 4096,
// whenever a function is open.

// The device's identity, as both drivers report it.
const (
	// DeviceName is the device's name (ibv_get_device_name, hca_id).
	DeviceName = "hcasim0"
	// VendorID is Mellanox's IEEE vendor id.
	VendorID = 0x02c9
	// VendorPartID is a ConnectX-5's PCI device id (0x1017).
	VendorPartID = 4119
	// FWVersion is the firmware-like version (a ConnectX-5's are 16.x).
	FWVersion = "16.35.0000"
	// BoardID is the board id (sysfs board_id).
	BoardID = "HCASIM_0001"
)

// GUID is a node or port GUID; String gives ibv_devinfo's form
// (0002:c903:0000:0101).
type GUID uint64

// NodeGUID returns the node GUID of the device at lid: Mellanox's OUI
// (00:02:c9) in an EUI-64 that carries the LID, as the front end makes it.
func NodeGUID(lid uint16) GUID { return GUID(ifc.NodeGUID(lid)) }

// String formats the GUID as four groups of four hex digits.
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// MarshalText gives the String form (JSON carries GUIDs as strings).
func (g GUID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses the String form.
func (g *GUID) UnmarshalText(b []byte) error {
	var w [4]uint16
	if n, err := fmt.Sscanf(string(b), "%4x:%4x:%4x:%4x", &w[0], &w[1], &w[2], &w[3]); err != nil || n != 4 || len(b) != 19 {
		return fmt.Errorf("guid %q: want four groups of four hex digits (0002:c903:0000:0101): %w", b, ErrInvalid)
	}
	*g = GUID(uint64(w[0])<<48 | uint64(w[1])<<32 | uint64(w[2])<<16 | uint64(w[3]))
	return nil
}

// DeviceCapFlags are ibv_device_attr's device_cap_flags (IBV_DEVICE_*).
type DeviceCapFlags uint32

// Device capability flags (the ones of enum ibv_device_cap_flags).
const (
	DeviceResizeMaxWR         DeviceCapFlags = 1 << 0
	DeviceBadPkeyCntr         DeviceCapFlags = 1 << 1
	DeviceBadQkeyCntr         DeviceCapFlags = 1 << 2
	DeviceRawMulti            DeviceCapFlags = 1 << 3
	DeviceAutoPathMig         DeviceCapFlags = 1 << 4
	DeviceChangePhyPort       DeviceCapFlags = 1 << 5
	DeviceUDAVPortEnforce     DeviceCapFlags = 1 << 6
	DeviceCurrQPStateMod      DeviceCapFlags = 1 << 7
	DeviceShutdownPort        DeviceCapFlags = 1 << 8
	DeviceInitType            DeviceCapFlags = 1 << 9
	DevicePortActiveEvent     DeviceCapFlags = 1 << 10
	DeviceSysImageGUID        DeviceCapFlags = 1 << 11
	DeviceRCRNRNAKGen         DeviceCapFlags = 1 << 12
	DeviceSRQResize           DeviceCapFlags = 1 << 13
	DeviceNNotifyCQ           DeviceCapFlags = 1 << 14
	DeviceMemWindow           DeviceCapFlags = 1 << 17
	DeviceUDIPCsum            DeviceCapFlags = 1 << 18
	DeviceXRC                 DeviceCapFlags = 1 << 20
	DeviceMemMgtExtensions    DeviceCapFlags = 1 << 21
	DeviceMemWindowType2A     DeviceCapFlags = 1 << 23
	DeviceMemWindowType2B     DeviceCapFlags = 1 << 24
	DeviceRCIPCsum            DeviceCapFlags = 1 << 25
	DeviceRawIPCsum           DeviceCapFlags = 1 << 26
	DeviceManagedFlowSteering DeviceCapFlags = 1 << 29
)

var deviceCapNames = []struct {
	f    DeviceCapFlags
	name string
}{
	{DeviceResizeMaxWR, "RESIZE_MAX_WR"}, {DeviceBadPkeyCntr, "BAD_PKEY_CNTR"}, {DeviceBadQkeyCntr, "BAD_QKEY_CNTR"},
	{DeviceRawMulti, "RAW_MULTI"}, {DeviceAutoPathMig, "AUTO_PATH_MIG"}, {DeviceChangePhyPort, "CHANGE_PHY_PORT"},
	{DeviceUDAVPortEnforce, "UD_AV_PORT_ENFORCE"}, {DeviceCurrQPStateMod, "CURR_QP_STATE_MOD"},
	{DeviceShutdownPort, "SHUTDOWN_PORT"}, {DeviceInitType, "INIT_TYPE"}, {DevicePortActiveEvent, "PORT_ACTIVE_EVENT"},
	{DeviceSysImageGUID, "SYS_IMAGE_GUID"}, {DeviceRCRNRNAKGen, "RC_RNR_NAK_GEN"}, {DeviceSRQResize, "SRQ_RESIZE"},
	{DeviceNNotifyCQ, "N_NOTIFY_CQ"}, {DeviceMemWindow, "MEM_WINDOW"}, {DeviceUDIPCsum, "UD_IP_CSUM"},
	{DeviceXRC, "XRC"}, {DeviceMemMgtExtensions, "MEM_MGT_EXTENSIONS"}, {DeviceMemWindowType2A, "MEM_WINDOW_TYPE_2A"},
	{DeviceMemWindowType2B, "MEM_WINDOW_TYPE_2B"}, {DeviceRCIPCsum, "RC_IP_CSUM"}, {DeviceRawIPCsum, "RAW_IP_CSUM"},
	{DeviceManagedFlowSteering, "MANAGED_FLOW_STEERING"},
}

// Names returns the names of the set flags, lowest bit first, as
// ibv_devinfo -v lists them; an unknown bit is named by its value.
func (f DeviceCapFlags) Names() []string {
	var n []string
	for _, c := range deviceCapNames {
		if f&c.f != 0 {
			n = append(n, c.name)
			f &^= c.f
		}
	}
	for b := DeviceCapFlags(1); f != 0; b <<= 1 {
		if f&b != 0 {
			n = append(n, fmt.Sprintf("unknown flag %#x", uint32(b)))
			f &^= b
		}
	}
	return n
}

// AtomicCap is how atomic operations are ordered (IBV_ATOMIC_*).
type AtomicCap uint8

// Atomic capabilities.
const (
	AtomicNone AtomicCap = iota
	AtomicHCA            // atomic within the HCA
	AtomicGlob           // atomic with the CPU too
)

// String gives ibv_devinfo's name.
func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return fmt.Sprintf("AtomicCap(%d)", uint8(a))
}

// DeviceAttr is the device's attributes: ibv_device_attr, field for field
// (json names as ibv_devinfo prints them), and the QUERY_HCA_CAP answer
// they were derived from.
type DeviceAttr struct {
	FWVer                 string         `json:"fw_ver"`
	NodeGUID              GUID           `json:"node_guid"`
	SysImageGUID          GUID           `json:"sys_image_guid"`
	MaxMRSize             uint64         `json:"max_mr_size"`
	PageSizeCap           uint64         `json:"page_size_cap"`
	VendorID              uint32         `json:"vendor_id"`
	VendorPartID          uint32         `json:"vendor_part_id"`
	HWVer                 uint32         `json:"hw_ver"`
	MaxQP                 int            `json:"max_qp"`
	MaxQPWR               int            `json:"max_qp_wr"`
	DeviceCapFlags        DeviceCapFlags `json:"device_cap_flags"`
	MaxSGE                int            `json:"max_sge"`
	MaxSGERd              int            `json:"max_sge_rd"`
	MaxCQ                 int            `json:"max_cq"`
	MaxCQE                int            `json:"max_cqe"`
	MaxMR                 int            `json:"max_mr"`
	MaxPD                 int            `json:"max_pd"`
	MaxQPRdAtom           int            `json:"max_qp_rd_atom"`
	MaxEERdAtom           int            `json:"max_ee_rd_atom"`
	MaxResRdAtom          int            `json:"max_res_rd_atom"`
	MaxQPInitRdAtom       int            `json:"max_qp_init_rd_atom"`
	MaxEEInitRdAtom       int            `json:"max_ee_init_rd_atom"`
	AtomicCap             AtomicCap      `json:"atomic_cap"`
	MaxEE                 int            `json:"max_ee"`
	MaxRDD                int            `json:"max_rdd"`
	MaxMW                 int            `json:"max_mw"`
	MaxRawIPv6QP          int            `json:"max_raw_ipv6_qp"`
	MaxRawEthyQP          int            `json:"max_raw_ethy_qp"`
	MaxMcastGrp           int            `json:"max_mcast_grp"`
	MaxMcastQPAttach      int            `json:"max_mcast_qp_attach"`
	MaxTotalMcastQPAttach int            `json:"max_total_mcast_qp_attach"`
	MaxAH                 int            `json:"max_ah"`
	MaxFMR                int            `json:"max_fmr"`
	MaxSRQ                int            `json:"max_srq"`
	MaxSRQWR              int            `json:"max_srq_wr"`
	MaxSRQSGE             int            `json:"max_srq_sge"`
	MaxPkeys              int            `json:"max_pkeys"`
	LocalCAAckDelay       uint8          `json:"local_ca_ack_delay"`
	PhysPortCnt           uint8          `json:"phys_port_cnt"`
	// Caps is the QUERY_HCA_CAP answer, with what ibv_device_attr has no
	// field for (PSVs, inline size, KLM limits, the memory bounds).
	Caps ifc.Caps `json:"-"`
	// LID is the port's LID the answer carried.
	LID uint16 `json:"-"`
	// GID is the port's RoCEv2 GID the answer carried (zero: no wire).
	GID [16]byte `json:"-"`
}

// queryCaps asks the device for its capabilities now (QUERY_HCA_CAP).
func (c *Context) queryCaps() (ifc.Caps, uint16, [16]byte, error) {
	var gid [16]byte
	if err := c.errClosed(); err != nil {
		return ifc.Caps{}, 0, gid, err
	}
	out, err := c.cmd(ifc.NewIn(ifc.CmdQueryHCACap, ifc.InHeaderSize))
	if err != nil {
		return ifc.Caps{}, 0, gid, err
	}
	if len(out) >= ifc.CapOutGID+16 {
		copy(gid[:], out[ifc.CapOutGID:])
	}
	return capsFrom(out), uint16(out.U32(ifc.CapOutLID) >> 16), gid, nil
}

// QueryDevice asks the device for its capabilities (QUERY_HCA_CAP) and
// returns them as ibv_query_device does on hcasim's front end.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	k, lid, gid, err := c.queryCaps()
	if err != nil {
		return DeviceAttr{}, fmt.Errorf("query device: %w", err)
	}
	a := DeviceAttr{
		FWVer:        FWVersion,
		NodeGUID:     NodeGUID(lid),
		SysImageGUID: NodeGUID(lid),
		MaxMRSize:    k.MaxMappedBytes,
		VendorID:     VendorID,
		VendorPartID: VendorPartID,
		MaxQP:        int(k.MaxQP),
		MaxQPWR:      1 << k.LogMaxSQSize,
		// SRQs: as many as QPs, 2^log_max_rq - 1 WRs (mlx5 keeps one WQE
		// free), the receive SGE limit.
		MaxSRQ:    int(k.MaxQP),
		MaxSRQWR:  1<<k.LogMaxRQSize - 1,
		MaxSRQSGE: int(k.MaxSGE),
		// RC_RNR_NAK_GEN: receivers NAK with RNR; memory windows of type
		// 1 and 2B (mkeys bound by UMR, as on mlx5); the rest as the front
		// end sets them.
		DeviceCapFlags: DeviceRCRNRNAKGen | DevicePortActiveEvent | DeviceSysImageGUID | DeviceChangePhyPort |
			DeviceMemWindow | DeviceMemWindowType2B | DeviceXRC,
		MaxMW:           int(k.Mkey.MaxMkeys),
		MaxSGE:          int(k.MaxSGE),
		MaxSGERd:        int(k.MaxSGE),
		MaxCQ:           int(k.MaxCQ),
		MaxCQE:          1<<k.LogMaxCQSize - 1,
		MaxMR:           int(k.Mkey.MaxMkeys),
		MaxPD:           int(k.MaxPD),
		MaxQPRdAtom:     int(k.MaxRDAtomic),
		MaxQPInitRdAtom: int(k.MaxRDAtomic),
		MaxResRdAtom:    int(k.MaxQP * uint32(k.MaxRDAtomic)),
		AtomicCap:       AtomicHCA,
		MaxPkeys:        1,
		LocalCAAckDelay: 16,
		PhysPortCnt:     1,
		Caps:            k,
		LID:             lid,
		GID:             gid,
	}
	if a.MaxMRSize == 0 {
		a.MaxMRSize = 1 << 40 // no bound on mapped memory
	}
	maxLog, minLog := k.Mkey.MaxLogPageSize, k.Mkey.MinLogPageSize
	if maxLog == 0 {
		maxLog = 30
	}
	if minLog == 0 {
		minLog = 12
	}
	a.PageSizeCap = (uint64(2)<<maxLog - 1) &^ (uint64(1)<<minLog - 1)
	return a, nil
}

// PortState is a port's logical state (IBV_PORT_*).
type PortState uint8

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

// String gives ibv_devinfo's name (PORT_ACTIVE).
func (s PortState) String() string {
	names := []string{"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// LinkLayer is a port's link layer (IBV_LINK_LAYER_*).
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = iota
	LinkLayerInfiniBand
	LinkLayerEthernet
)

// String gives ibv_devinfo's name.
func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// Port capability flags (IBV_PORT_*_SUP) the port sets.
const (
	PortCMSup          = 1 << 16
	PortDeviceMgmtSup  = 1 << 19
	PortVendorClassSup = 1 << 20
	PortIPBasedGIDs    = 1 << 26
)

// GIDTableLen is the port's GID table size; GIDEntries of its entries are
// filled (QueryGID), the others are empty.
const GIDTableLen = 16

// GIDEntries is how many entries of the GID table hold a GID (see
// ifc.PortGID).
const GIDEntries = ifc.GIDEntries

// PortAttr is a port's attributes: ibv_port_attr, field for field.
type PortAttr struct {
	State         PortState `json:"state"`
	MaxMTU        MTU       `json:"max_mtu"`
	ActiveMTU     MTU       `json:"active_mtu"`
	GIDTblLen     int       `json:"gid_tbl_len"`
	PortCapFlags  uint32    `json:"port_cap_flags"`
	MaxMsgSz      uint32    `json:"max_msg_sz"`
	BadPkeyCntr   uint32    `json:"bad_pkey_cntr"`
	QkeyViolCntr  uint32    `json:"qkey_viol_cntr"`
	PkeyTblLen    uint16    `json:"pkey_tbl_len"`
	LID           uint16    `json:"lid"`
	SMLID         uint16    `json:"sm_lid"`
	LMC           uint8     `json:"lmc"`
	MaxVLNum      uint8     `json:"max_vl_num"`
	SMSL          uint8     `json:"sm_sl"`
	SubnetTimeout uint8     `json:"subnet_timeout"`
	InitTypeReply uint8     `json:"init_type_reply"`
	ActiveWidth   uint8     `json:"active_width"` // 2: 4X
	ActiveSpeed   uint8     `json:"active_speed"` // 32: EDR (25 Gb/s a lane)
	PhysState     uint8     `json:"phys_state"`   // 5: LinkUp
	LinkLayer     LinkLayer `json:"link_layer"`
	PortCapFlags2 uint16    `json:"port_cap_flags2"`
}

// QueryPort returns port's attributes (the device has one port, 1): a
// RoCE port, as hcasim's wire is RoCEv2 — link layer Ethernet, LID 0 (the
// device's fabric LID, Context.LID, is the Go driver's own address for
// in-process peers), up, 4X EDR, MTU 4096.
func (c *Context) QueryPort(port int) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, fmt.Errorf("query port %d: the device has port 1: %w", port, ErrInvalid)
	}
	if _, _, _, err := c.queryCaps(); err != nil {
		return PortAttr{}, fmt.Errorf("query port %d: %w", port, err)
	}
	return PortAttr{
		State: PortActive, MaxMTU: MTU4096, ActiveMTU: MTU4096, GIDTblLen: GIDTableLen,
		PortCapFlags: PortCMSup | PortIPBasedGIDs, MaxMsgSz: 1 << 30, PkeyTblLen: 1,
		MaxVLNum: 1, SubnetTimeout: 18, ActiveWidth: 2, ActiveSpeed: 32, PhysState: 5,
		LinkLayer: LinkLayerEthernet,
	}, nil
}

// GIDType is a GID table entry's type.
type GIDType uint8

// GID types (IBV_GID_TYPE_*).
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

// QueryGID returns the GID at index of port's table and its type (see
// GIDEntries); an empty entry is the zero GID.
func (c *Context) QueryGID(port, index int) ([16]byte, GIDType, error) {
	var g [16]byte
	if port != 1 || index < 0 || index >= GIDTableLen {
		return g, GIDTypeIB, fmt.Errorf("query gid %d/%d: %w", port, index, ErrInvalid)
	}
	_, lid, wire, err := c.queryCaps()
	if err != nil {
		return g, GIDTypeIB, fmt.Errorf("query gid %d/%d: %w", port, index, err)
	}
	if g, ok := ifc.PortGID(index, lid, wire); ok {
		if ifc.GIDIsRoCEv1(index) {
			return g, GIDTypeRoCEv1, nil
		}
		return g, GIDTypeRoCEv2, nil
	}
	return g, GIDTypeIB, nil
}

// Signature capability bits, as mlx5dv_sig_caps has them: bit n of a
// mask is the value n of the corresponding type.
const (
	// SigBlockSize512 … SigBlockSize4160 are MLX5DV_BLOCK_SIZE_CAP_*.
	SigBlockSize512  = 1 << 0
	SigBlockSize520  = 1 << 1
	SigBlockSize4048 = 1 << 2
	SigBlockSize4096 = 1 << 3
	SigBlockSize4160 = 1 << 4
)

// SigCaps are the signature offload capabilities mlx5dv_query_device
// reports (mlx5dv_sig_caps), all zero without signature handover, and the
// PSVs a function may hold.
type SigCaps struct {
	// BlockSize is a mask of MLX5DV_BLOCK_SIZE_CAP_* (SigBlockSize512 …).
	BlockSize uint64 `json:"block_size"`
	// BlockProt is a mask of 1 << SigBlockType (T10-DIF, CRC).
	BlockProt uint32 `json:"block_prot"`
	// T10DIFBg is a mask of 1 << BgType (CRC, IP checksum).
	T10DIFBg uint16 `json:"t10dif_bg"`
	// CRCType is a mask of 1 << CRCType (CRC32, CRC32C, CRC64/XP10).
	CRCType uint16 `json:"crc_type"`
	// MaxPSV is the PSVs a function may hold (QUERY_HCA_CAP max_psv;
	// not an mlx5dv field): each signature key takes one or two.
	MaxPSV uint32 `json:"max_psv"`
}

// sigBlockSizes are the block sizes of the SigBlockSize bits, in order.
var sigBlockSizes = []int{512, 520, 4048, 4096, 4160}

// BlockSizes returns the block sizes of BlockSize, smallest bit first.
func (s SigCaps) BlockSizes() []int {
	var n []int
	for i, sz := range sigBlockSizes {
		if s.BlockSize&(1<<i) != 0 {
			n = append(n, sz)
		}
	}
	return n
}

// QuerySigCaps asks the device for its signature offload capabilities: with
// the signature handover bit of QUERY_HCA_CAP, what the model's signature
// pipeline handles (the block sizes of a BSF's bs_selector, T10-DIF with
// either guard, the three CRCs), as mlx5dv_query_device answers on the
// front end.
func (c *Context) QuerySigCaps() (SigCaps, error) {
	k, _, _, err := c.queryCaps()
	if err != nil {
		return SigCaps{}, fmt.Errorf("query signature caps: %w", err)
	}
	s := SigCaps{MaxPSV: k.MaxPSV}
	if k.SignatureHandover {
		s.BlockSize = SigBlockSize512 | SigBlockSize520 | SigBlockSize4048 | SigBlockSize4096 | SigBlockSize4160
		s.BlockProt = 1<<SigBlockT10DIF | 1<<SigBlockCRC
		s.T10DIFBg = 1<<BgCRC | 1<<BgCSUM
		s.CRCType = 1<<CRC32 | 1<<CRC32C | 1<<CRC64XP10
	}
	return s, nil
}
