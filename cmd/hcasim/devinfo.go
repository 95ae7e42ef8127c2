package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

var devinfoOpts struct {
	connect *string
	verbose *bool
	json    *bool
	caps    *string
}

var devinfoCmd = &command{
	name:    "devinfo",
	summary: "show the device as ibv_devinfo shows an mlx5 HCA, with its signature offload capabilities and capability preset",
	usage:   "[--connect PATH] [-v] [--json] [--caps PRESET|list]",
	example: "hcasim devinfo -v --caps small   (or: hcasim devinfo --connect /tmp/a.sock)",
	flags: func(fs *flag.FlagSet) {
		devinfoOpts.connect = fs.String("connect", "", "ask the daemon at this socket (hcasim serve) instead of an in-process device")
		devinfoOpts.verbose = new(bool)
		fs.BoolVar(devinfoOpts.verbose, "v", false, "verbose: every attribute, as ibv_devinfo -v, and the signature and hcasim capabilities")
		fs.BoolVar(devinfoOpts.verbose, "verbose", false, "the same as -v")
		devinfoOpts.json = fs.Bool("json", false, "print one JSON object (with --caps list, a JSON array of the presets)")
		devinfoOpts.caps = fs.String("caps", "cx5", "the in-process device's capability preset ("+strings.Join(presetNames(), ", ")+"), or list to describe them")
	},
	run: runDevinfo,
}

// presetSummaries describe the --caps presets (serve.go's capsPresets).
var presetSummaries = map[string]string{
	"cx5":       "a ConnectX-5; each function may map up to 64 GiB (the default)",
	"cx5-nosig": "a ConnectX-5 without signature handover (no integrity offload)",
	"small":     "small per-function limits, for testing how clients handle them",
}

// devinfo is what devinfo shows, and its --json object.
type devinfo struct {
	HCAID     string `json:"hca_id"`
	Transport string `json:"transport"`
	BoardID   string `json:"board_id"`
	// Source is "in process" or the daemon's socket.
	Source string `json:"source"`
	// Preset is the capability preset: the --caps flag's in process, the
	// one whose capabilities the daemon reports with --connect ("" when
	// none matches).
	Preset     string           `json:"preset"`
	PresetFrom string           `json:"preset_from"` // "flag", "matched" or "none"
	Device     verbs.DeviceAttr `json:"device"`
	Ports      []devinfoPort    `json:"ports"`
	SigCaps    verbs.SigCaps    `json:"sig_caps"`
	Caps       devinfoCaps      `json:"caps"`
}

// devinfoPort is one port and its GID table's non-empty entries.
type devinfoPort struct {
	Port int `json:"port"`
	verbs.PortAttr
	GIDs []devinfoGID `json:"gids"`
}

// devinfoGID is a GID table entry.
type devinfoGID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	Type  string `json:"type"` // IB or RoCEv2
}

// devinfoCaps are the QUERY_HCA_CAP fields ibv_device_attr has no place
// for.
type devinfoCaps struct {
	MaxPSV            uint32 `json:"max_psv"`
	MaxInline         uint32 `json:"max_inline"`
	LogMaxSQSize      uint8  `json:"log_max_sq_size"`
	LogMaxRQSize      uint8  `json:"log_max_rq_size"`
	LogMaxCQSize      uint8  `json:"log_max_cq_size"`
	LogMaxKLMListSize uint8  `json:"log_max_klm_list_size"`
	MaxIndirection    uint8  `json:"max_indirection"`
	MaxRepeatEntries  uint16 `json:"max_repeat_entries"`
	MinLogPageSize    uint8  `json:"min_log_page_size"`
	MaxLogPageSize    uint8  `json:"max_log_page_size"`
	UMRFence          uint8  `json:"umr_fence"`
	SignatureHandover bool   `json:"signature_handover"`
	MaxMappedBytes    uint64 `json:"max_mapped_bytes"`
	FuncMemBytes      uint64 `json:"func_mem_bytes"`
	DevMemBytes       uint64 `json:"dev_mem_bytes"`
}

func capsJSON(c ifc.Caps) devinfoCaps {
	return devinfoCaps{
		MaxPSV: c.MaxPSV, MaxInline: c.MaxInline, LogMaxSQSize: c.LogMaxSQSize, LogMaxRQSize: c.LogMaxRQSize,
		LogMaxCQSize: c.LogMaxCQSize, LogMaxKLMListSize: c.Mkey.LogMaxKLMListSize, MaxIndirection: c.Mkey.MaxIndirection,
		MaxRepeatEntries: c.Mkey.MaxRepeatEntries, MinLogPageSize: c.Mkey.MinLogPageSize, MaxLogPageSize: c.Mkey.MaxLogPageSize,
		UMRFence: c.UMRFence, SignatureHandover: c.SignatureHandover, MaxMappedBytes: c.MaxMappedBytes,
		FuncMemBytes: c.FuncMemBytes, DevMemBytes: c.DevMemBytes,
	}
}

func runDevinfo(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		fmt.Fprintf(stderr, "hcasim devinfo: unexpected arguments %q\n", args)
		fs.Usage()
		return errUsage
	}
	capsSet := false
	fs.Visit(func(f *flag.Flag) { capsSet = capsSet || f.Name == "caps" })
	if *devinfoOpts.caps == "list" {
		return listPresets(stdout, *devinfoOpts.json)
	}
	if _, ok := capsPresets[*devinfoOpts.caps]; !ok {
		fmt.Fprintf(stderr, "hcasim devinfo: --caps %q is not a preset; the presets are:\n\n", *devinfoOpts.caps)
		if err := listPresets(stderr, false); err != nil {
			return err
		}
		return errUsage
	}
	var (
		info *devinfo
		err  error
	)
	if path := *devinfoOpts.connect; path != "" {
		if capsSet {
			fmt.Fprintln(stderr, "hcasim devinfo: --caps names the in-process device's preset; a daemon runs the one of its serve --caps (--caps list describes them)")
			fs.Usage()
			return errUsage
		}
		info, err = devinfoConnect(path)
	} else {
		info, err = devinfoPreset(*devinfoOpts.caps)
		if info != nil {
			info.PresetFrom = "flag"
		}
	}
	if err != nil {
		return err
	}
	if *devinfoOpts.json {
		b, err := json.MarshalIndent(info, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return printDevinfo(stdout, info, *devinfoOpts.verbose)
}

// devinfoPreset queries a new in-process device with a preset's
// capabilities, as hcasim perf opens one.
func devinfoPreset(name string) (*devinfo, error) {
	caps := capsPresets[name]()
	dev := hca.New(hca.Options{Caps: &caps})
	defer dev.Close()
	ctx, err := verbs.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("open the in-process device: %w", err)
	}
	defer ctx.Close()
	info, err := queryDevinfo(ctx)
	if err != nil {
		return nil, err
	}
	info.Source, info.Preset = "in process", name
	return info, nil
}

// devinfoConnect queries a daemon's device, and names the preset whose
// capabilities (as the driver reads them from an in-process device) are
// the ones the daemon reports.
func devinfoConnect(path string) (*devinfo, error) {
	ctx, err := verbs.Dial(path)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer ctx.Close()
	info, err := queryDevinfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	info.Source, info.PresetFrom = path, "none"
	for _, name := range presetNames() {
		p, err := devinfoPreset(name)
		if err != nil {
			return nil, err
		}
		if p.Device.Caps == info.Device.Caps {
			info.Preset, info.PresetFrom = name, "matched"
			break
		}
	}
	return info, nil
}

// queryDevinfo asks the device through the driver: QueryDevice, QueryPort,
// QueryGID and QuerySigCaps, what ibv_devinfo asks the front end.
func queryDevinfo(ctx *verbs.Context) (*devinfo, error) {
	a, err := ctx.QueryDevice()
	if err != nil {
		return nil, err
	}
	s, err := ctx.QuerySigCaps()
	if err != nil {
		return nil, err
	}
	info := &devinfo{HCAID: verbs.DeviceName, Transport: "InfiniBand", BoardID: verbs.BoardID, Device: a, SigCaps: s,
		Caps: capsJSON(a.Caps)}
	for port := 1; port <= int(a.PhysPortCnt); port++ {
		p, err := ctx.QueryPort(port)
		if err != nil {
			return nil, err
		}
		dp := devinfoPort{Port: port, PortAttr: p, GIDs: []devinfoGID{}}
		for i := range p.GIDTblLen {
			g, typ, err := ctx.QueryGID(port, i)
			if err != nil {
				return nil, err
			}
			if g == ([16]byte{}) {
				continue
			}
			e := devinfoGID{Index: i, Type: "IB"}
			switch typ {
			case verbs.GIDTypeRoCEv1:
				e.Type = "RoCEv1"
			case verbs.GIDTypeRoCEv2:
				e.Type = "RoCEv2"
			}
			e.GID = formatGID(g, typ)
			dp.GIDs = append(dp.GIDs, e)
		}
		info.Ports = append(info.Ports, dp)
	}
	return info, nil
}

// formatGID formats a GID as ibv_devinfo does: eight groups of four hex
// digits, a RoCE v2 GID as an IPv6 address.
func formatGID(g [16]byte, typ verbs.GIDType) string {
	if typ == verbs.GIDTypeRoCEv2 {
		return netip.AddrFrom16(g).String()
	}
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}

// dvField writes "key:" indented by depth tabs, then tabs up to column col
// (at least one), then the value: ibv_devinfo's layout.
func dvField(w io.Writer, depth int, key string, col int, format string, args ...any) {
	width := 8*depth + len(key) + 1
	tabs := "\t"
	for width = (width/8 + 1) * 8; width < col; width += 8 {
		tabs += "\t"
	}
	fmt.Fprintf(w, "%s%s:%s%s\n", strings.Repeat("\t", depth), key, tabs, fmt.Sprintf(format, args...))
}

var mtuBytes = map[verbs.MTU]int{verbs.MTU256: 256, verbs.MTU512: 512, verbs.MTU1024: 1024, verbs.MTU2048: 2048, verbs.MTU4096: 4096}

func widthStr(w uint8) string {
	if s, ok := map[uint8]string{1: "1X", 2: "4X", 4: "8X", 8: "12X", 16: "2X"}[w]; ok {
		return s
	}
	return "invalid width"
}

func speedStr(s uint8) string {
	if v, ok := map[uint8]string{1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps",
		32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps"}[s]; ok {
		return v
	}
	return "invalid speed"
}

func physStateStr(s uint8) string {
	names := []string{"invalid physical state", "SLEEP", "POLLING", "DISABLED", "PORT_CONFIGURATION TRAINNING", "LINK_UP",
		"LINK_ERROR_RECOVERY", "PHY TEST"}
	if int(s) < len(names) {
		return names[s]
	}
	return "invalid physical state"
}

// maskNames joins the names of a mask's set bits (bit i is names[i]).
func maskNames(m uint64, names ...string) string {
	var out []string
	for i, n := range names {
		if m&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// dvBytes gives a byte count with its binary unit.
func dvBytes(n uint64) string {
	if n == 0 {
		return "0 (no bound)"
	}
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d (%d %s)", n, n>>u.shift, u.name)
		}
	}
	return fmt.Sprint(n)
}

func printDevinfo(w io.Writer, d *devinfo, verbose bool) error {
	a := &d.Device
	fmt.Fprintf(w, "hca_id:\t%s\n", d.HCAID)
	dvField(w, 1, "transport", 40, "%s (0)", d.Transport)
	dvField(w, 1, "fw_ver", 40, "%s", a.FWVer)
	dvField(w, 1, "node_guid", 40, "%v", a.NodeGUID)
	dvField(w, 1, "sys_image_guid", 40, "%v", a.SysImageGUID)
	dvField(w, 1, "vendor_id", 40, "0x%04x", a.VendorID)
	dvField(w, 1, "vendor_part_id", 40, "%d", a.VendorPartID)
	dvField(w, 1, "hw_ver", 40, "0x%x", a.HWVer)
	dvField(w, 1, "board_id", 40, "%s", d.BoardID)
	dvField(w, 1, "phys_port_cnt", 40, "%d", a.PhysPortCnt)
	if verbose {
		dvField(w, 1, "max_mr_size", 40, "0x%x", a.MaxMRSize)
		dvField(w, 1, "page_size_cap", 40, "0x%x", a.PageSizeCap)
		dvField(w, 1, "max_qp", 40, "%d", a.MaxQP)
		dvField(w, 1, "max_qp_wr", 40, "%d", a.MaxQPWR)
		dvField(w, 1, "device_cap_flags", 40, "0x%08x", uint32(a.DeviceCapFlags))
		for _, n := range a.DeviceCapFlags.Names() {
			fmt.Fprintf(w, "\t\t\t\t\t%s\n", n)
		}
		for _, f := range []struct {
			key string
			v   int
		}{
			{"max_sge", a.MaxSGE}, {"max_sge_rd", a.MaxSGERd}, {"max_cq", a.MaxCQ}, {"max_cqe", a.MaxCQE},
			{"max_mr", a.MaxMR}, {"max_pd", a.MaxPD}, {"max_qp_rd_atom", a.MaxQPRdAtom}, {"max_ee_rd_atom", a.MaxEERdAtom},
			{"max_res_rd_atom", a.MaxResRdAtom}, {"max_qp_init_rd_atom", a.MaxQPInitRdAtom},
			{"max_ee_init_rd_atom", a.MaxEEInitRdAtom},
		} {
			dvField(w, 1, f.key, 40, "%d", f.v)
		}
		dvField(w, 1, "atomic_cap", 40, "%v (%d)", a.AtomicCap, uint8(a.AtomicCap))
		for _, f := range []struct {
			key string
			v   int
		}{
			{"max_ee", a.MaxEE}, {"max_rdd", a.MaxRDD}, {"max_mw", a.MaxMW}, {"max_raw_ipv6_qp", a.MaxRawIPv6QP},
			{"max_raw_ethy_qp", a.MaxRawEthyQP}, {"max_mcast_grp", a.MaxMcastGrp}, {"max_mcast_qp_attach", a.MaxMcastQPAttach},
			{"max_total_mcast_qp_attach", a.MaxTotalMcastQPAttach}, {"max_ah", a.MaxAH}, {"max_fmr", a.MaxFMR},
			{"max_srq", a.MaxSRQ}, {"max_srq_wr", a.MaxSRQWR}, {"max_srq_sge", a.MaxSRQSGE}, {"max_pkeys", a.MaxPkeys},
		} {
			dvField(w, 1, f.key, 40, "%d", f.v)
		}
		dvField(w, 1, "local_ca_ack_delay", 40, "%d", a.LocalCAAckDelay)
	}
	for _, p := range d.Ports {
		fmt.Fprintf(w, "\t\tport:\t%d\n", p.Port)
		dvField(w, 3, "state", 48, "%v (%d)", p.State, uint8(p.State))
		dvField(w, 3, "max_mtu", 48, "%d (%d)", mtuBytes[p.MaxMTU], uint8(p.MaxMTU))
		dvField(w, 3, "active_mtu", 48, "%d (%d)", mtuBytes[p.ActiveMTU], uint8(p.ActiveMTU))
		dvField(w, 3, "sm_lid", 48, "%d", p.SMLID)
		dvField(w, 3, "port_lid", 48, "%d", p.LID)
		dvField(w, 3, "port_lmc", 48, "0x%02x", p.LMC)
		dvField(w, 3, "link_layer", 48, "%v", p.LinkLayer)
		if !verbose {
			continue
		}
		dvField(w, 3, "max_msg_sz", 48, "0x%x", p.MaxMsgSz)
		dvField(w, 3, "port_cap_flags", 48, "0x%08x", p.PortCapFlags)
		dvField(w, 3, "port_cap_flags2", 48, "0x%04x", p.PortCapFlags2)
		dvField(w, 3, "max_vl_num", 48, "%d (%d)", p.MaxVLNum, p.MaxVLNum)
		dvField(w, 3, "bad_pkey_cntr", 48, "0x%x", p.BadPkeyCntr)
		dvField(w, 3, "qkey_viol_cntr", 48, "0x%x", p.QkeyViolCntr)
		dvField(w, 3, "sm_sl", 48, "%d", p.SMSL)
		dvField(w, 3, "pkey_tbl_len", 48, "%d", p.PkeyTblLen)
		dvField(w, 3, "gid_tbl_len", 48, "%d", p.GIDTblLen)
		dvField(w, 3, "subnet_timeout", 48, "%d", p.SubnetTimeout)
		dvField(w, 3, "init_type_reply", 48, "%d", p.InitTypeReply)
		dvField(w, 3, "active_width", 48, "%s (%d)", widthStr(p.ActiveWidth), p.ActiveWidth)
		dvField(w, 3, "active_speed", 48, "%s (%d)", speedStr(p.ActiveSpeed), p.ActiveSpeed)
		dvField(w, 3, "phys_state", 48, "%s (%d)", physStateStr(p.PhysState), p.PhysState)
		for _, g := range p.GIDs {
			// On an Ethernet port ibv_devinfo names each entry's type.
			suffix := ""
			if p.LinkLayer == verbs.LinkLayerEthernet {
				suffix = ", RoCE v1"
				if g.Type == "RoCEv2" {
					suffix = ", RoCE v2"
				}
			}
			dvField(w, 3, fmt.Sprintf("GID[%3d]", g.Index), 48, "%s%s", g.GID, suffix)
		}
	}
	// hcasim's additions, after what ibv_devinfo shows.
	preset := d.Preset
	switch d.PresetFrom {
	case "flag":
		preset += " (--caps, in process)"
	case "matched":
		preset += fmt.Sprintf(" (the capabilities of the daemon at %s)", d.Source)
	default:
		preset = fmt.Sprintf("none (the daemon at %s has capabilities no preset has)", d.Source)
	}
	dvField(w, 1, "preset", 40, "%s", preset)
	s := &d.SigCaps
	if !verbose {
		if s.BlockProt == 0 {
			dvField(w, 1, "signature_offload", 40, "none (no signature handover)")
		} else {
			dvField(w, 1, "signature_offload", 40, "%s, block sizes %s, %d PSVs", maskNames(uint64(s.BlockProt), "T10DIF", "CRC"),
				strings.Trim(fmt.Sprint(s.BlockSizes()), "[]"), s.MaxPSV)
		}
		fmt.Fprintln(w)
		return nil
	}
	fmt.Fprintf(w, "\tsig_caps (mlx5dv_query_device):\n")
	dvField(w, 2, "block_size", 48, "0x%x (%s)", s.BlockSize, maskNames(s.BlockSize, "512", "520", "4048", "4096", "4160"))
	dvField(w, 2, "block_prot", 48, "0x%x (%s)", s.BlockProt, maskNames(uint64(s.BlockProt), "T10DIF", "CRC"))
	dvField(w, 2, "t10dif_bg", 48, "0x%x (%s)", s.T10DIFBg, maskNames(uint64(s.T10DIFBg), "CRC", "CSUM"))
	dvField(w, 2, "crc_type", 48, "0x%x (%s)", s.CRCType, maskNames(uint64(s.CRCType), "CRC32", "CRC32C", "CRC64_XP10"))
	dvField(w, 2, "max_psv", 48, "%d", s.MaxPSV)
	c := &d.Caps
	fmt.Fprintf(w, "\thca_caps (QUERY_HCA_CAP beyond ibv_device_attr):\n")
	dvField(w, 2, "signature_handover", 48, "%v", c.SignatureHandover)
	dvField(w, 2, "max_inline", 48, "%d", c.MaxInline)
	dvField(w, 2, "log_max_sq_size", 48, "%d (WQEBBs)", c.LogMaxSQSize)
	dvField(w, 2, "log_max_rq_size", 48, "%d (WQEs)", c.LogMaxRQSize)
	dvField(w, 2, "log_max_cq_size", 48, "%d (CQEs)", c.LogMaxCQSize)
	dvField(w, 2, "log_max_klm_list_size", 48, "%d", c.LogMaxKLMListSize)
	dvField(w, 2, "max_indirection", 48, "%d", c.MaxIndirection)
	dvField(w, 2, "max_repeat_entries", 48, "%d", c.MaxRepeatEntries)
	dvField(w, 2, "log_page_size", 48, "%d..%d", c.MinLogPageSize, c.MaxLogPageSize)
	dvField(w, 2, "umr_fence", 48, "%d (%s)", c.UMRFence, map[uint8]string{0: "strong ordering", 1: "small initiator fence", 2: "none"}[c.UMRFence])
	dvField(w, 2, "max_mapped_bytes", 48, "%s", dvBytes(c.MaxMappedBytes))
	dvField(w, 2, "func_mem_bytes", 48, "%s", dvBytes(c.FuncMemBytes))
	dvField(w, 2, "dev_mem_bytes", 48, "%s", dvBytes(c.DevMemBytes))
	fmt.Fprintln(w)
	return nil
}

// presetInfo is one row of --caps list.
type presetInfo struct {
	Name    string           `json:"name"`
	Default bool             `json:"default"`
	Summary string           `json:"summary"`
	Device  verbs.DeviceAttr `json:"device"`
	SigCaps verbs.SigCaps    `json:"sig_caps"`
	Caps    devinfoCaps      `json:"caps"`
}

// listPresets describes the presets, each as the driver sees an
// in-process device with it.
func listPresets(w io.Writer, asJSON bool) error {
	var rows []presetInfo
	for _, name := range presetNames() {
		d, err := devinfoPreset(name)
		if err != nil {
			return err
		}
		rows = append(rows, presetInfo{Name: name, Default: name == "cx5", Summary: presetSummaries[name], Device: d.Device,
			SigCaps: d.SigCaps, Caps: d.Caps})
	}
	if asJSON {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	fmt.Fprintln(w, "capability presets (hcasim serve|exec|devinfo --caps PRESET):")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  PRESET\tMAX_QP\tMAX_CQ\tMAX_PD\tMAX_MR\tMAX_QP_WR\tMAX_CQE\tMAX_PSV\tMAX_MR_SIZE\tSIG_OFFLOAD")
	for _, r := range rows {
		a := &r.Device
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%#x\t%v\n", r.Name, a.MaxQP, a.MaxCQ, a.MaxPD, a.MaxMR, a.MaxQPWR,
			a.MaxCQE, r.SigCaps.MaxPSV, a.MaxMRSize, r.Caps.SignatureHandover)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "  %-10s %s\n", r.Name, r.Summary)
	}
	return nil
}
