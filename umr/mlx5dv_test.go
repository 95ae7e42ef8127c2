package umr

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mlx5dvProgram prints the sizes and offsets this package and klm rely on,
// from Debian's rdma-core header (libibverbs-dev), and golden bytes of the
// layouts built with the header's structs.
const mlx5dvProgram = `
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/mlx5dv.h>
#define P(name, v) printf("%s %lu\n", name, (unsigned long)(v))
static void dump(const char *name, const void *p, size_t n) {
	printf("%s ", name);
	for (size_t i = 0; i < n; i++) printf("%02x", ((const unsigned char *)p)[i]);
	printf("\n");
}
int main(void) {
	P("umr_ctrl.size", sizeof(struct mlx5_wqe_umr_ctrl_seg));
	P("umr_ctrl.flags", offsetof(struct mlx5_wqe_umr_ctrl_seg, flags));
	P("umr_ctrl.klm_octowords", offsetof(struct mlx5_wqe_umr_ctrl_seg, klm_octowords));
	P("umr_ctrl.bsf_octowords", offsetof(struct mlx5_wqe_umr_ctrl_seg, bsf_octowords));
	P("umr_ctrl.mkey_mask", offsetof(struct mlx5_wqe_umr_ctrl_seg, mkey_mask));
	P("mkey.size", sizeof(struct mlx5_wqe_mkey_context_seg));
	P("mkey.free", offsetof(struct mlx5_wqe_mkey_context_seg, free));
	P("mkey.access_flags", offsetof(struct mlx5_wqe_mkey_context_seg, access_flags));
	P("mkey.qpn_mkey", offsetof(struct mlx5_wqe_mkey_context_seg, qpn_mkey));
	P("mkey.flags_pd", offsetof(struct mlx5_wqe_mkey_context_seg, flags_pd));
	P("mkey.start_addr", offsetof(struct mlx5_wqe_mkey_context_seg, start_addr));
	P("mkey.len", offsetof(struct mlx5_wqe_mkey_context_seg, len));
	P("mkey.bsf_octword_size", offsetof(struct mlx5_wqe_mkey_context_seg, bsf_octword_size));
	P("mkey.translations_octword_size", offsetof(struct mlx5_wqe_mkey_context_seg, translations_octword_size));
	P("mkey.log_page_size", offsetof(struct mlx5_wqe_mkey_context_seg, log_page_size));
	P("klm.size", sizeof(struct mlx5_wqe_umr_klm_seg));
	P("klm.byte_count", offsetof(struct mlx5_wqe_umr_klm_seg, byte_count));
	P("klm.mkey", offsetof(struct mlx5_wqe_umr_klm_seg, mkey));
	P("klm.address", offsetof(struct mlx5_wqe_umr_klm_seg, address));
	P("rep.size", sizeof(struct mlx5_wqe_umr_repeat_block_seg));
	P("rep.byte_count", offsetof(struct mlx5_wqe_umr_repeat_block_seg, byte_count));
	P("rep.op", offsetof(struct mlx5_wqe_umr_repeat_block_seg, op));
	P("rep.repeat_count", offsetof(struct mlx5_wqe_umr_repeat_block_seg, repeat_count));
	P("rep.num_ent", offsetof(struct mlx5_wqe_umr_repeat_block_seg, num_ent));
	P("ent.size", sizeof(struct mlx5_wqe_umr_repeat_ent_seg));
	P("ent.stride", offsetof(struct mlx5_wqe_umr_repeat_ent_seg, stride));
	P("ent.byte_count", offsetof(struct mlx5_wqe_umr_repeat_ent_seg, byte_count));
	P("ent.memkey", offsetof(struct mlx5_wqe_umr_repeat_ent_seg, memkey));
	P("ent.va", offsetof(struct mlx5_wqe_umr_repeat_ent_seg, va));
	P("data.size", sizeof(struct mlx5_wqe_data_seg));
	P("mask.len", MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN);
	P("mask.start_addr", MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR);
	P("mask.sig_err", MLX5_WQE_UMR_CTRL_MKEY_MASK_SIG_ERR);
	P("mask.bsf_enable", MLX5_WQE_UMR_CTRL_MKEY_MASK_BSF_ENABLE);
	P("mask.mkey", MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY);
	P("mask.qpn", MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN);
	P("mask.free", MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE);
	P("flag.inline", MLX5_WQE_UMR_CTRL_FLAG_INLINE);
	P("flag.check_free", MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE);
	/* Golden bytes, filled through the header's structs. */
	struct mlx5_wqe_umr_ctrl_seg c; memset(&c, 0, sizeof c);
	c.flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
	c.klm_octowords = htons(4); c.bsf_octowords = htons(4);
	c.mkey_mask = htobe64(0x209E3343ull);
	dump("gold.umr_ctrl", &c, sizeof c);
	struct mlx5_wqe_umr_repeat_block_seg r; memset(&r, 0, sizeof r);
	r.byte_count = htonl(520); r.op = htonl(0x400); r.repeat_count = htonl(8); r.num_ent = htons(2);
	dump("gold.repeat", &r, sizeof r);
	struct mlx5_wqe_umr_repeat_ent_seg e; memset(&e, 0, sizeof e);
	e.stride = htons(8); e.byte_count = htons(8); e.memkey = htonl(0x1234); e.va = htobe64(0x1000);
	dump("gold.entry", &e, sizeof e);
	struct mlx5_wqe_umr_klm_seg k; memset(&k, 0, sizeof k);
	k.byte_count = htonl(4160); k.mkey = htonl(0xc0ffee); k.address = htobe64(0x7f0012345000ull);
	dump("gold.klm", &k, sizeof k);
	return 0;
}
`

// TestMlx5dvHeader checks the layouts against rdma-core's mlx5dv.h when
// Debian's libibverbs-dev and a C compiler are installed (.ci/run installs
// them); without them it is skipped.
func TestMlx5dvHeader(t *testing.T) {
	if _, err := os.Stat("/usr/include/infiniband/mlx5dv.h"); err != nil {
		t.Skip("no /usr/include/infiniband/mlx5dv.h (apt-get install libibverbs-dev)")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "layout.c")
	require.NoError(t, os.WriteFile(src, []byte(mlx5dvProgram), 0o644))
	bin := filepath.Join(dir, "layout")
	out, err := exec.Command(cc, "-O0", "-Wall", "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "compile against mlx5dv.h:\n%s", out)
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok {
			got[k] = v
		}
	}
	num := func(k string) uint64 {
		v, err := strconv.ParseUint(got[k], 10, 64)
		require.NoError(t, err, "%s: %q", k, got[k])
		return v
	}
	for k, want := range map[string]uint64{
		"umr_ctrl.size": CtrlSegSize, "umr_ctrl.flags": 0, "umr_ctrl.klm_octowords": 4, "umr_ctrl.bsf_octowords": 6, "umr_ctrl.mkey_mask": 8,
		"mkey.size": MkeySegSize, "mkey.free": 0, "mkey.access_flags": 2, "mkey.qpn_mkey": 4, "mkey.flags_pd": 12,
		"mkey.start_addr": 16, "mkey.len": 24, "mkey.bsf_octword_size": 32, "mkey.translations_octword_size": 52, "mkey.log_page_size": 59,
		"klm.size": klm.KLMSize, "klm.byte_count": 0, "klm.mkey": 4, "klm.address": 8,
		"rep.size": klm.RepeatCtrlSize, "rep.byte_count": 0, "rep.op": 4, "rep.repeat_count": 8, "rep.num_ent": 14,
		"ent.size": klm.RepeatEntrySize, "ent.stride": 0, "ent.byte_count": 2, "ent.memkey": 4, "ent.va": 8,
		"data.size": DataSegSize,
		"mask.len":  uint64(MaskLen), "mask.start_addr": uint64(MaskStartAddr), "mask.sig_err": uint64(MaskEnSigErr),
		"mask.bsf_enable": uint64(MaskBSFEnable), "mask.mkey": uint64(MaskKey), "mask.qpn": uint64(MaskQPN), "mask.free": uint64(MaskFree),
		"flag.inline": FlagInline, "flag.check_free": FlagCheckNotFree, // rdma-core's CHECK_FREE is "fail if not free"
	} {
		assert.Equal(t, num(k), want, "%s: mlx5dv.h (expected) vs ours (actual)", k)
	}
	// Golden bytes: ours must equal the header's.
	c := make(CtrlSeg, CtrlSegSize)
	c.Encode(&CtrlFields{Flags: FlagInline | FlagCheckNotFree, XLTOctowords: 4, BSFOctowords: 4, Mask: MaskSignature})
	r := make([]byte, klm.RepeatCtrlSize)
	klm.RepeatCtrl(r).Encode(&klm.RepeatCtrlFields{BytesPerCycle: 520, Op: klm.RepeatBlockOp, RepeatCount: 8, NumEntries: 2})
	e := make([]byte, klm.RepeatEntrySize)
	klm.RepeatEntry(e).Encode(&klm.RepeatEntryFields{Stride: 8, ByteCount: 8, Key: 0x1234, VA: 0x1000})
	k := make([]byte, klm.KLMSize)
	klm.KLM(k).Encode(&klm.KLMFields{ByteCount: 4160, Key: 0xc0ffee, VA: 0x7f0012345000})
	for name, b := range map[string][]byte{"gold.umr_ctrl": c, "gold.repeat": r, "gold.entry": e, "gold.klm": k} {
		assert.Equal(t, got[name], hex.EncodeToString(b), "%s: header (expected) vs ours (actual)", name)
	}
}
