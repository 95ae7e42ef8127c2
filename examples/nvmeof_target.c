/* nvmeof_target: what an NVMe-oF target does with mlx5dv's block
 * signatures, on hcasim (or a ConnectX HCA): the host's data has no PI
 * (none on the wire either, as with a host that does not send PI); the
 * target keeps T10-DIF type 1 in its memory, so its HCA
 *   - inserts PI when the target RDMA READs the host's data into target
 *     memory through a BLOCK_SIGNATURE mkey (wire: none, memory: T10-DIF),
 *   - checks and strips it when the target RDMA WRITEs the data back,
 *   - and reports a block corrupted in target memory through
 *     mlx5dv_mkey_check, with its error type and offset.
 *
 * Build against rdma-core (libibverbs-dev) and run on hcasim:
 *   cc -o nvmeof_target examples/nvmeof_target.c -libverbs -lmlx5
 *   bin/hcasim exec -- ./nvmeof_target
 * It prints what it checks and exits 0 when all of it holds.
 *
 * One process plays host and target, with two RC QPs connected to each
 * other through the device. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#define BLOCK 512
#define BLOCKS 4
#define PI 8
#define REF_TAG 0x1000 /* the first block's LBA */
#define APP_TAG 0x00A5

static int failed;

#define CHECK(cond, ...)                                                                                               \
	do {                                                                                                           \
		printf("%s: ", (cond) ? "ok  " : "FAIL");                                                              \
		printf(__VA_ARGS__);                                                                                   \
		printf("\n");                                                                                          \
		if (!(cond))                                                                                           \
			failed = 1;                                                                                    \
	} while (0)

static void die(const char *what)
{
	fprintf(stderr, "nvmeof_target: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* CRC-16/T10-DIF: poly 0x8BB7, init 0, no reflection (the T10 guard). */
static uint16_t crc16_t10dif(const uint8_t *p, size_t n)
{
	uint16_t c = 0;
	for (size_t i = 0; i < n; i++) {
		c ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			c = c & 0x8000 ? (uint16_t)(c << 1 ^ 0x8BB7) : (uint16_t)(c << 1);
	}
	return c;
}

static uint32_t be(const uint8_t *p, int n)
{
	uint32_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct mlx5dv_qp_ex *dv;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid; /* the port's GID the QPs connect through */

static struct side make_side(int dv)
{
	struct side s = {0};
	s.cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!s.cq)
		die("create cq");
	struct ibv_qp_init_attr_ex a = {
		.send_cq = s.cq,
		.recv_cq = s.cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 512},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_LOCAL_INV,
	};
	struct mlx5dv_qp_init_attr d = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS,
					.send_ops_flags = MLX5DV_QP_EX_WITH_MKEY_CONFIGURE};
	s.qp = dv ? mlx5dv_create_qp(ctx, &a, &d) : ibv_create_qp_ex(ctx, &a);
	if (!s.qp)
		die("create qp");
	s.qpx = ibv_qp_to_qp_ex(s.qp);
	if (dv)
		s.dv = mlx5dv_qp_ex_from_ibv_qp_ex(s.qpx);
	return s;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = dest;
	/* The port is RoCE: the path is a global route, here to the port's
	 * own IPv4-mapped RoCE v2 GID (index 3), from that GID. */
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = 3;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 100000000L; i++)
		if (ibv_poll_cq(cq, 1, wc))
			return wc->status;
	return -1;
}

/* configure sets the target's mkey up over its PI-carrying buffer: memory
 * domain T10-DIF type 1 (CRC guard, ref tag incremented per block,
 * app-tag escape), no signature on the wire; guard, app and ref tags all
 * checked. */
static int configure(struct side *t, struct mlx5dv_mkey *mkey, struct ibv_mr *mr, uint8_t *buf)
{
	struct mlx5dv_sig_t10dif dif = {.bg_type = MLX5DV_SIG_T10DIF_CRC, .bg = 0, .app_tag = APP_TAG, .ref_tag = REF_TAG,
					.flags = MLX5DV_SIG_T10DIF_FLAG_REF_REMAP | MLX5DV_SIG_T10DIF_FLAG_APP_ESCAPE};
	struct mlx5dv_sig_block_domain mem = {.sig_type = MLX5DV_SIG_TYPE_T10DIF, .sig.dif = &dif,
					      .block_size = MLX5DV_BLOCK_SIZE_512};
	struct mlx5dv_sig_block_attr sig = {.mem = &mem,
					    .check_mask = MLX5DV_SIG_MASK_T10DIF_GUARD | MLX5DV_SIG_MASK_T10DIF_APPTAG |
							  MLX5DV_SIG_MASK_T10DIF_REFTAG};
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = BLOCKS * (BLOCK + PI), .lkey = mr->lkey};
	struct mlx5dv_mkey_conf_attr conf = {0};
	ibv_wr_start(t->qpx);
	t->qpx->wr_id = 1;
	t->qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mkey_configure(t->dv, mkey, 3, &conf);
	mlx5dv_wr_set_mkey_access_flags(t->dv, IBV_ACCESS_LOCAL_WRITE);
	mlx5dv_wr_set_mkey_layout_list(t->dv, 1, &sge);
	mlx5dv_wr_set_mkey_sig_block(t->dv, &sig);
	int err = ibv_wr_complete(t->qpx);
	if (err)
		return err;
	struct ibv_wc wc;
	return wait_one(t->cq, &wc);
}

/* rdma posts an RDMA READ or WRITE of the data through the mkey (zero
 * based: wire-domain offset 0, the data's length) against the host's MR. */
static int rdma(struct side *t, int write, struct mlx5dv_mkey *mkey, struct ibv_mr *remote)
{
	ibv_wr_start(t->qpx);
	t->qpx->wr_id = 2;
	t->qpx->wr_flags = IBV_SEND_SIGNALED;
	if (write)
		ibv_wr_rdma_write(t->qpx, remote->rkey, (uintptr_t)remote->addr);
	else
		ibv_wr_rdma_read(t->qpx, remote->rkey, (uintptr_t)remote->addr);
	ibv_wr_set_sge(t->qpx, mkey->lkey, 0, BLOCKS * BLOCK);
	int err = ibv_wr_complete(t->qpx);
	if (err)
		return err;
	struct ibv_wc wc;
	return wait_one(t->cq, &wc);
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no RDMA device (run under `hcasim exec --`)");
	if (!mlx5dv_is_supported(list[0]))
		die("not an mlx5 device");
	ctx = mlx5dv_open_device(list[0], &(struct mlx5dv_context_attr){0});
	if (!ctx)
		die("open");
	struct mlx5dv_context caps = {.comp_mask = MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD};
	if (mlx5dv_query_device(ctx, &caps) || !(caps.sig_caps.block_prot & MLX5DV_SIG_PROT_CAP_T10DIF) ||
	    !(caps.sig_caps.block_size & MLX5DV_BLOCK_SIZE_CAP_512)) {
		errno = EOPNOTSUPP;
		die("no T10-DIF signature offload");
	}
	if (ibv_query_gid(ctx, 1, 3, &gid))
		die("query gid");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("pd");

	/* The host's data (no PI), where it reads back, and the target's
	 * memory for data and PI (aligned_alloc wants a size that is a multiple
	 * of the alignment). */
	uint8_t *host = aligned_alloc(4096, 4096), *back = aligned_alloc(4096, 4096);
	uint8_t *tmem = aligned_alloc(4096, 4 * 4096);
	for (int i = 0; i < BLOCKS * BLOCK; i++)
		host[i] = (uint8_t)(i * 7 + i / BLOCK);
	memset(back, 0, BLOCKS * BLOCK);
	memset(tmem, 0, BLOCKS * (BLOCK + PI));
	const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *hmr = ibv_reg_mr(pd, host, BLOCKS * BLOCK, acc), *bmr = ibv_reg_mr(pd, back, BLOCKS * BLOCK, acc);
	struct ibv_mr *tmr = ibv_reg_mr(pd, tmem, BLOCKS * (BLOCK + PI), IBV_ACCESS_LOCAL_WRITE);
	if (!hmr || !bmr || !tmr)
		die("reg mr");
	struct side hs = make_side(0), ts = make_side(1);
	connect_qp(hs.qp, ts.qp->qp_num);
	connect_qp(ts.qp, hs.qp->qp_num);
	struct mlx5dv_mkey_init_attr mi = {.pd = pd,
					   .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
							   MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE,
					   .max_entries = 1};
	struct mlx5dv_mkey *mkey = mlx5dv_create_mkey(&mi);
	if (!mkey)
		die("create mkey");

	/* 1. The target READs the host's data: PI is inserted into its memory. */
	int st = configure(&ts, mkey, tmr, tmem);
	CHECK(st == 0, "configure the mkey (T10-DIF type 1 in memory, none on the wire): status %d", st);
	st = rdma(&ts, 0, mkey, hmr);
	CHECK(st == IBV_WC_SUCCESS, "RDMA READ %d bytes of host data through the mkey: status %d", BLOCKS * BLOCK, st);
	int pi_ok = 1;
	for (int b = 0; b < BLOCKS; b++) {
		uint8_t *blk = tmem + b * (BLOCK + PI), *t = blk + BLOCK;
		pi_ok &= memcmp(blk, host + b * BLOCK, BLOCK) == 0 && be(t, 2) == crc16_t10dif(blk, BLOCK) &&
			 be(t + 2, 2) == APP_TAG && be(t + 4, 4) == (uint32_t)(REF_TAG + b);
	}
	CHECK(pi_ok, "target memory holds the data with a T10-DIF tuple per block (guard CRC16, app %#x, ref %#x+i)",
	      APP_TAG, REF_TAG);
	struct mlx5dv_mkey_err err;
	CHECK(mlx5dv_mkey_check(mkey, &err) == 0 && err.err_type == MLX5DV_MKEY_NO_ERR, "mkey_check: no error");

	/* 2. The target WRITEs it back: the HCA checks and strips the PI. */
	st = rdma(&ts, 1, mkey, bmr);
	CHECK(st == IBV_WC_SUCCESS && memcmp(back, host, BLOCKS * BLOCK) == 0,
	      "RDMA WRITE back through the mkey: status %d, the host gets the data without PI", st);
	CHECK(mlx5dv_mkey_check(mkey, &err) == 0 && err.err_type == MLX5DV_MKEY_NO_ERR, "mkey_check: no error");

	/* 3. A block corrupted in target memory: the WRITE completes, the
	 * error is on the mkey (block 2, wire-style offset 2 * (512 + 8)). */
	tmem[2 * (BLOCK + PI) + 100] ^= 0x20;
	st = rdma(&ts, 1, mkey, bmr);
	struct ibv_wc wc;
	ibv_poll_cq(ts.cq, 1, &wc); /* takes the SIG_ERR CQE */
	int rc = mlx5dv_mkey_check(mkey, &err);
	CHECK(st == IBV_WC_SUCCESS && rc == 0 && err.err_type == MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD &&
		      err.err.sig.offset == 2 * (BLOCK + PI),
	      "corrupted block 2: the WRITE completes (status %d), mkey_check gives BAD_GUARD (%d) at offset %llu "
	      "(expected %#llx, actual %#llx)",
	      st, err.err_type, (unsigned long long)err.err.sig.offset, (unsigned long long)err.err.sig.expected_value,
	      (unsigned long long)err.err.sig.actual_value);
	CHECK(mlx5dv_mkey_check(mkey, &err) == 0 && err.err_type == MLX5DV_MKEY_NO_ERR,
	      "mkey_check reports an error once");

	/* Invalidate the mkey and tear down. */
	ibv_wr_start(ts.qpx);
	ts.qpx->wr_id = 3;
	ts.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(ts.qpx, mkey->lkey);
	st = ibv_wr_complete(ts.qpx) ? -2 : wait_one(ts.cq, &wc);
	CHECK(st == IBV_WC_SUCCESS, "local invalidate of the mkey: status %d", st);
	mlx5dv_destroy_mkey(mkey);
	ibv_destroy_qp(hs.qp);
	ibv_destroy_qp(ts.qp);
	ibv_destroy_cq(hs.cq);
	ibv_destroy_cq(ts.cq);
	ibv_dereg_mr(hmr);
	ibv_dereg_mr(bmr);
	ibv_dereg_mr(tmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(host);
	free(back);
	free(tmem);
	printf(failed ? "nvmeof_target: FAILED\n" : "nvmeof_target: all checks passed\n");
	return failed;
}
