package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/internal/frontendtest"
)

// parseDevinfo reads ibv_devinfo's layout (hcasim devinfo's too) into
// "section/key" → value: a key's section is the header lines above it with
// less indentation (port 1, sig_caps ...), and a line without a colon
// indented below a key (a flag name) is added to that key's value.
func parseDevinfo(out string) map[string]string {
	m := map[string]string{}
	type head struct {
		depth int
		name  string
	}
	var heads []head
	last, lastDepth := "", 0
	for _, l := range strings.Split(out, "\n") {
		text := strings.TrimSpace(l)
		if text == "" {
			continue
		}
		depth := len(l) - len(strings.TrimLeft(l, "\t"))
		k, v, ok := strings.Cut(text, ":")
		if !ok {
			if last != "" && depth > lastDepth {
				m[last] = strings.TrimSpace(m[last] + " " + text)
			}
			continue
		}
		v = strings.TrimSpace(v)
		for len(heads) > 0 && heads[len(heads)-1].depth >= depth {
			heads = heads[:len(heads)-1]
		}
		var path []string
		for _, h := range heads {
			path = append(path, h.name)
		}
		key := strings.Join(append(path, k), "/")
		switch {
		case k == "port":
			heads = append(heads, head{depth, "port " + v})
		case v == "":
			heads = append(heads, head{depth, k})
		}
		m[key], last, lastDepth = v, key, depth
	}
	return m
}

// devinfoShared are fields hcasim devinfo -v and ibv_devinfo -v on the
// front end must both print, with the same value.
var devinfoShared = []string{
	"hca_id", "transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id", "hw_ver", "board_id",
	"phys_port_cnt", "max_mr_size", "page_size_cap", "max_qp", "max_qp_wr", "device_cap_flags", "max_sge", "max_sge_rd",
	"max_cq", "max_cqe", "max_mr", "max_pd", "max_qp_rd_atom", "max_res_rd_atom", "max_qp_init_rd_atom", "atomic_cap",
	"max_pkeys", "local_ca_ack_delay", "max_srq", "max_mw", "max_ah",
	"port 1/state", "port 1/max_mtu", "port 1/active_mtu", "port 1/sm_lid", "port 1/port_lid", "port 1/port_lmc",
	"port 1/link_layer", "port 1/max_msg_sz", "port 1/port_cap_flags", "port 1/max_vl_num", "port 1/pkey_tbl_len",
	"port 1/gid_tbl_len", "port 1/subnet_timeout", "port 1/active_width", "port 1/active_speed", "port 1/phys_state",
	"port 1/GID[  0]",
}

// requireAgree checks that the two outputs have every shared field and the
// same value in every field they both have.
func requireAgree(t *testing.T, ours, theirs string) {
	t.Helper()
	a, b := parseDevinfo(ours), parseDevinfo(theirs)
	for _, k := range devinfoShared {
		require.Contains(t, a, k, "hcasim devinfo -v lacks %s:\n%s", k, ours)
		require.Contains(t, b, k, "ibv_devinfo -v lacks %s:\n%s", k, theirs)
	}
	n := 0
	for k, v := range a {
		if w, ok := b[k]; ok {
			assert.Equal(t, w, v, "%s: hcasim devinfo -v says %q, ibv_devinfo -v on the front end %q", k, v, w)
			n++
		}
	}
	t.Logf("%d fields agree", n)
}

func TestDevinfoInProcess(t *testing.T) {
	code, out, errOut := runCLI("devinfo")
	require.Equal(t, 0, code, errOut)
	f := parseDevinfo(out)
	for k, v := range map[string]string{
		"hca_id": "hcasim0", "transport": "InfiniBand (0)", "vendor_id": "0x02c9", "vendor_part_id": "4119",
		"fw_ver": "16.35.0000", "node_guid": "0002:c903:0000:0101", "phys_port_cnt": "1", "port 1/state": "PORT_ACTIVE (4)",
		"port 1/active_mtu": "4096 (5)", "port 1/port_lid": "0", "port 1/link_layer": "Ethernet",
		"preset":            "cx5 (--caps, in process)",
		"signature_offload": "T10DIF CRC, block sizes 512 520 4048 4096 4160, 65536 PSVs",
	} {
		assert.Equal(t, v, f[k], k)
	}
	assert.NotContains(t, f, "max_qp", "max_qp without -v")

	code, out, errOut = runCLI("devinfo", "-v", "--caps", "small")
	require.Equal(t, 0, code, errOut)
	f = parseDevinfo(out)
	for k, v := range map[string]string{
		"max_qp": "32", "max_cq": "64", "max_pd": "16", "max_qp_wr": "1024", "max_cqe": "4095", "max_mr_size": "0x10000000",
		"max_res_rd_atom": "512", "max_sge": "30", "max_mr": "1048576", "page_size_cap": "0x7ffff000",
		"device_cap_flags": "0x01121c20 CHANGE_PHY_PORT PORT_ACTIVE_EVENT SYS_IMAGE_GUID RC_RNR_NAK_GEN MEM_WINDOW XRC MEM_WINDOW_TYPE_2B",
		"max_mw":           "1048576",
		"port 1/GID[  0]":  "fe80:0000:0000:0000:0002:c903:0000:0101, RoCE v1",
		"port 1/GID[  1]":  "fe80::2:c903:0:101, RoCE v2",
		"port 1/GID[  2]":  "0000:0000:0000:0000:0000:ffff:7f00:0001, RoCE v1",
		"port 1/GID[  3]":  "::ffff:127.0.0.1, RoCE v2",
		"preset":           "small (--caps, in process)",
		"sig_caps (mlx5dv_query_device)/block_size":                        "0x1f (512 520 4048 4096 4160)",
		"sig_caps (mlx5dv_query_device)/block_prot":                        "0x3 (T10DIF CRC)",
		"sig_caps (mlx5dv_query_device)/t10dif_bg":                         "0x3 (CRC CSUM)",
		"sig_caps (mlx5dv_query_device)/crc_type":                          "0x7 (CRC32 CRC32C CRC64_XP10)",
		"sig_caps (mlx5dv_query_device)/max_psv":                           "64",
		"hca_caps (QUERY_HCA_CAP beyond ibv_device_attr)/max_mapped_bytes": "268435456 (256 MiB)",
	} {
		assert.Equal(t, v, f[k], k)
	}

	// Without signature handover the signature caps are empty, as
	// mlx5dv_query_device's.
	code, out, _ = runCLI("devinfo", "--caps", "cx5-nosig", "-v")
	require.Equal(t, 0, code)
	f = parseDevinfo(out)
	assert.Equal(t, "0x0 (none)", f["sig_caps (mlx5dv_query_device)/block_size"])
	assert.Equal(t, "false", f["hca_caps (QUERY_HCA_CAP beyond ibv_device_attr)/signature_handover"])
	_, out, _ = runCLI("devinfo", "--caps", "cx5-nosig")
	assert.Equal(t, "none (no signature handover)", parseDevinfo(out)["signature_offload"])
}

func TestDevinfoJSON(t *testing.T) {
	code, out, errOut := runCLI("devinfo", "--json")
	require.Equal(t, 0, code, errOut)
	var d devinfo
	require.NoError(t, json.Unmarshal([]byte(out), &d), "stdout is not one JSON object:\n%s", out)
	assert.Equal(t, "hcasim0", d.HCAID)
	assert.Equal(t, "cx5", d.Preset)
	assert.Equal(t, "flag", d.PresetFrom)
	assert.EqualValues(t, 0x02c9, d.Device.VendorID)
	assert.EqualValues(t, 4119, d.Device.VendorPartID)
	assert.Equal(t, "0002:c903:0000:0101", d.Device.NodeGUID.String())
	assert.Equal(t, 65536, d.Device.MaxQP)
	require.Len(t, d.Ports, 1)
	assert.EqualValues(t, 4, d.Ports[0].State)
	assert.EqualValues(t, 0, d.Ports[0].LID, "a RoCE port has no LID")
	require.Len(t, d.Ports[0].GIDs, 4)
	assert.Equal(t, "fe80:0000:0000:0000:0002:c903:0000:0101", d.Ports[0].GIDs[0].GID)
	assert.Equal(t, "RoCEv1", d.Ports[0].GIDs[0].Type)
	assert.Equal(t, "::ffff:127.0.0.1", d.Ports[0].GIDs[3].GID)
	assert.Equal(t, "RoCEv2", d.Ports[0].GIDs[3].Type)
	assert.EqualValues(t, 0x1f, d.SigCaps.BlockSize)
	assert.Equal(t, []int{512, 520, 4048, 4096, 4160}, d.SigCaps.BlockSizes())
	assert.EqualValues(t, 65536, d.SigCaps.MaxPSV)
	assert.True(t, d.Caps.SignatureHandover)
	// The GUID is a string in JSON.
	var raw struct {
		Device map[string]any `json:"device"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	assert.Equal(t, "0002:c903:0000:0101", raw.Device["node_guid"])

	code, out, errOut = runCLI("devinfo", "--caps", "list", "--json")
	require.Equal(t, 0, code, errOut)
	var presets []presetInfo
	require.NoError(t, json.Unmarshal([]byte(out), &presets), out)
	require.Len(t, presets, len(capsPresets))
	for _, p := range presets {
		assert.NotEmpty(t, p.Summary, "preset %s has no summary in presetSummaries", p.Name)
		assert.Positive(t, p.Device.MaxQP, p.Name)
	}
}

func TestDevinfoUsage(t *testing.T) {
	code, out, errOut := runCLI("devinfo", "--caps", "list")
	require.Equal(t, 0, code, errOut)
	for name := range capsPresets {
		assert.Contains(t, out, "  "+name+" ", "--caps list")
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"devinfo", "extra"}, 2, "unexpected arguments"},
		{[]string{"devinfo", "--caps", "cx9"}, 2, `--caps "cx9" is not a preset`},
		{[]string{"devinfo", "--caps"}, 2, "cx5, cx5-nosig, small"},
		{[]string{"devinfo", "--connect", "x.sock", "--caps", "small"}, 2, "a daemon runs the one of its serve --caps"},
		{[]string{"devinfo", "--connect", filepath.Join(t.TempDir(), "none.sock")}, 1, "connect: "},
	} {
		code, _, errOut := runCLI(c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.msg, c.args)
	}
	_, _, errOut = runCLI("devinfo", "--caps", "cx9")
	assert.Contains(t, errOut, "small per-function limits", "a bad --caps lists the presets")
	_, out, _ = runCLI("--help")
	assert.Contains(t, out, "devinfo")
}

// devinfo --connect against a daemon started in the test: the preset is
// recognised from the daemon's capabilities, the GUID (made from the
// daemon's LID) and the link-local GIDs are the daemon's, and everything else is what the in-process
// device with the same preset shows.
func TestDevinfoConnect(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	hcasimChild(t, "serve", "--socket", sock, "--caps", "small", "--lid", "5", "--log-level", "warn")
	waitSocket(t, sock)
	code, out, errOut := runCLI("devinfo", "-v", "--connect", sock)
	require.Equal(t, 0, code, errOut)
	remote := parseDevinfo(out)
	for k, v := range map[string]string{
		"node_guid": "0002:c903:0000:0501", "port 1/port_lid": "0", "port 1/sm_lid": "0", "max_qp": "32",
		"port 1/GID[  0]": "fe80:0000:0000:0000:0002:c903:0000:0501, RoCE v1", "port 1/state": "PORT_ACTIVE (4)",
		"port 1/GID[  1]": "fe80::2:c903:0:501, RoCE v2",
		"preset":          fmt.Sprintf("small (the capabilities of the daemon at %s)", sock),
	} {
		assert.Equal(t, v, remote[k], k)
	}
	_, out, _ = runCLI("devinfo", "-v", "--caps", "small")
	local := parseDevinfo(out)
	for _, k := range []string{"node_guid", "sys_image_guid", "port 1/GID[  0]", "port 1/GID[  1]", "preset"} {
		delete(local, k)
		delete(remote, k)
	}
	assert.Equal(t, local, remote, "in process and through the daemon")

	code, out, errOut = runCLI("devinfo", "--json", "--connect", sock)
	require.Equal(t, 0, code, errOut)
	var d devinfo
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, "small", d.Preset)
	assert.Equal(t, "matched", d.PresetFrom)
	assert.Equal(t, sock, d.Source)
	assert.EqualValues(t, 0, d.Ports[0].LID)
	assert.Equal(t, "fe80::2:c903:0:501", d.Ports[0].GIDs[1].GID)
}

// hcasim devinfo -v and the real ibv_devinfo -v on hcasim's libibverbs
// (hcasim exec) show one device: in process and a private daemon with
// each preset, and one daemon with a RoCEv2 port (its GID) and a LID of
// its own that both ask. A small mlx5dv program checks the signature caps
// the same way.
func TestDevinfoAgreesWithFrontend(t *testing.T) {
	lib := frontendtest.Lib(t)
	frontendtest.Need(t, "ibv_devinfo", "ibverbs-utils")
	t.Setenv("HCASIM_SOCKET", "")
	for _, preset := range presetNames() {
		t.Run(preset, func(t *testing.T) {
			code, theirs, errOut := runCLI("exec", "--lib", lib, "--caps", preset, "--", "ibv_devinfo", "-v")
			require.Equal(t, 0, code, "ibv_devinfo -v: %s", errOut)
			code, ours, errOut := runCLI("devinfo", "-v", "--caps", preset)
			require.Equal(t, 0, code, errOut)
			requireAgree(t, ours, theirs)
		})
	}
	t.Run("daemon", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "d.sock")
		ip := fmt.Sprintf("127.%d.%d.2", 1+rand.IntN(254), rand.IntN(256))
		hcasimChild(t, "serve", "--socket", sock, "--roce", ip, "--lid", "9", "--log-level", "warn")
		waitSocket(t, sock)
		code, theirs, errOut := runCLI("exec", "--lib", lib, "--socket", sock, "--", "ibv_devinfo", "-v")
		require.Equal(t, 0, code, "ibv_devinfo -v: %s", errOut)
		code, ours, errOut := runCLI("devinfo", "-v", "--connect", sock)
		require.Equal(t, 0, code, errOut)
		requireAgree(t, ours, theirs)
		assert.Equal(t, "::ffff:"+ip+", RoCE v2", parseDevinfo(ours)["port 1/GID[  3]"])
		assert.Equal(t, "0002:c903:0000:0901", parseDevinfo(ours)["node_guid"])
	})
	t.Run("sig_caps", func(t *testing.T) {
		frontendtest.Need(t, "cc", "gcc")
		bin := filepath.Join(t.TempDir(), "sigcaps")
		out, err := exec.Command("cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-o", bin,
			filepath.Join("testdata", "sigcaps.c"), "-libverbs", "-lmlx5").CombinedOutput()
		require.NoError(t, err, "build testdata/sigcaps.c: %s", out)
		for _, preset := range presetNames() {
			code, theirs, errOut := runCLI("exec", "--lib", lib, "--caps", preset, "--", bin)
			require.Equal(t, 0, code, "%s: sigcaps: %s", preset, errOut)
			code, ours, errOut := runCLI("devinfo", "--json", "--caps", preset)
			require.Equal(t, 0, code, errOut)
			var d devinfo
			require.NoError(t, json.Unmarshal([]byte(ours), &d))
			s := d.SigCaps
			want := map[string]string{
				"block_size": strconv.FormatUint(s.BlockSize, 10), "block_prot": strconv.FormatUint(uint64(s.BlockProt), 10),
				"t10dif_bg": strconv.FormatUint(uint64(s.T10DIFBg), 10), "crc_type": strconv.FormatUint(uint64(s.CRCType), 10),
			}
			got := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(theirs), "\n") {
				k, v, _ := strings.Cut(l, " ")
				got[k] = v
			}
			assert.Equal(t, want, got, "%s: hcasim devinfo's sig_caps (want) and mlx5dv_query_device's on the front end (got)", preset)
		}
	})
}

// serve --func-mem / --dev-mem set the memory budgets a daemon
// advertises (devinfo --connect shows them); a size that is not one is
// a usage error.
func TestServeBudgetFlags(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	hcasimChild(t, "serve", "--socket", sock, "--func-mem", "512M", "--dev-mem", "4G", "--log-level", "warn")
	waitSocket(t, sock)
	code, out, errOut := runCLI("devinfo", "--json", "--connect", sock)
	require.Equal(t, 0, code, errOut)
	var d devinfo
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, uint64(512<<20), d.Caps.FuncMemBytes)
	assert.Equal(t, uint64(4<<30), d.Caps.DevMemBytes)
	for _, bad := range []string{"lots", "0", "12X", "-1M"} {
		code, _, errOut := runCLI("serve", "--socket", filepath.Join(t.TempDir(), "x.sock"), "--func-mem", bad)
		assert.NotEqual(t, 0, code, bad)
		assert.Contains(t, errOut, "--func-mem", bad)
	}
	n, err := parseBytes("192M")
	require.NoError(t, err)
	assert.Equal(t, uint64(192<<20), n)
	_, err = parseBytes("99999999999999999999G")
	assert.Error(t, err)
}
