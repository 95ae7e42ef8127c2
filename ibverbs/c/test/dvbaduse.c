/* dvbaduse: bad use of mlx5dv's mkey API, and what it gets (the errno or
 * error completion rdma-core's mlx5 provider and the HCA give; see
 * docs/CONFORMANCE.md). Prints "ok NAME" or "FAIL NAME: why"; exits 1 if
 * any failed. ibverbs/baduse_test.go builds and runs it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include "checks.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint16_t lid;

static struct ibv_qp *make_qp(uint64_t dv_ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 128},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND,
	};
	struct mlx5dv_qp_init_attr d = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS, .send_ops_flags = dv_ops};
	struct ibv_qp *qp = mlx5dv_create_qp(ctx, &a, &d);
	if (!qp)
		die("create qp");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	if (rc_connect(qp, dest, lid, 0, 1))
		die("connect");
}

static int wait_one(struct ibv_wc *wc)
{
	for (long i = 0; i < 100000000L; i++)
		if (ibv_poll_cq(cq, 1, wc))
			return wc->status;
	return -1;
}

/* configure posts one mkey configure with a list layout of n SGEs over
 * buf and, if sig is not NULL, a signature block; it returns
 * wr_complete's result. */
static int configure(struct ibv_qp *qp, struct mlx5dv_mkey *mkey, unsigned flags, int n, uint32_t lkey, void *buf,
		     const struct mlx5dv_sig_block_attr *sig)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	struct mlx5dv_qp_ex *dv = mlx5dv_qp_ex_from_ibv_qp_ex(x);
	struct ibv_sge sge[8];
	for (int i = 0; i < n && i < 8; i++)
		sge[i] = (struct ibv_sge){.addr = (uintptr_t)buf + 64 * i, .length = 16, .lkey = lkey};
	struct mlx5dv_mkey_conf_attr conf = {0};
	ibv_wr_start(x);
	x->wr_id = 9;
	x->wr_flags = flags;
	mlx5dv_wr_mkey_configure(dv, mkey, sig ? 3 : 2, &conf);
	mlx5dv_wr_set_mkey_access_flags(dv, IBV_ACCESS_LOCAL_WRITE);
	mlx5dv_wr_set_mkey_layout_list(dv, (uint16_t)n, sge);
	if (sig)
		mlx5dv_wr_set_mkey_sig_block(dv, sig);
	return ibv_wr_complete(x);
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no device");
	ctx = mlx5dv_open_device(list[0], &(struct mlx5dv_context_attr){0});
	if (!ctx)
		die("open");
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		die("query port");
	lid = pa.lid;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	uint8_t *buf = aligned_alloc(4096, 4096);
	memset(buf, 0, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd || !cq || !mr)
		die("setup");

	errno = 0;
	CHECK("create_mkey without flags", !mlx5dv_create_mkey(&(struct mlx5dv_mkey_init_attr){.pd = pd, .max_entries = 4}) &&
						   errno == EOPNOTSUPP,
	      "errno %d", errno);
	errno = 0;
	CHECK("create_mkey crypto", !mlx5dv_create_mkey(&(struct mlx5dv_mkey_init_attr){
					    .pd = pd, .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO, .max_entries = 4}) &&
					    errno == EOPNOTSUPP,
	      "errno %d", errno);
	struct mlx5dv_mkey_init_attr mi = {.pd = pd,
					   .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
							   MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE,
					   .max_entries = 3};
	struct mlx5dv_mkey *mkey = mlx5dv_create_mkey(&mi);
	CHECK("create_mkey rounds max_entries up to 4", mkey && mi.max_entries == 4, "mkey %p, max_entries %u",
	      (void *)mkey, mi.max_entries);
	if (!mkey)
		exit(1);
	struct mlx5dv_mkey_init_attr pi = {.pd = pd, .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT, .max_entries = 4};
	struct mlx5dv_mkey *plain = mlx5dv_create_mkey(&pi);

	struct ibv_qp *a = make_qp(MLX5DV_QP_EX_WITH_MKEY_CONFIGURE), *b = make_qp(MLX5DV_QP_EX_WITH_MKEY_CONFIGURE);
	struct ibv_qp *noops = make_qp(0);
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);
	connect_qp(noops, noops->qp_num); /* in RTS: the configure itself is what fails */
	struct ibv_wc wc;

	/* A signature mkey before configuration is free: the SEND through it
	 * fails with a local protection error (and the QP goes to error). */
	struct ibv_qp *c = make_qp(0), *d = make_qp(0);
	connect_qp(c, d->qp_num);
	connect_qp(d, c->qp_num);
	struct ibv_sge sge = {.addr = 0, .length = 16, .lkey = mkey->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	int st = ibv_post_send(c, &wr, &bad) ? -2 : wait_one(&wc);
	CHECK("a signature mkey used before configuration: LOC_PROT_ERR", st == IBV_WC_LOC_PROT_ERR, "status %d", st);

	CHECK("mkey_check of a key without BLOCK_SIGNATURE: EINVAL", plain && mlx5dv_mkey_check(plain, &(struct mlx5dv_mkey_err){0}) == EINVAL,
	      "accepted");
	CHECK("configure without IBV_SEND_INLINE: EOPNOTSUPP",
	      configure(a, mkey, IBV_SEND_SIGNALED, 1, mr->lkey, buf, NULL) == EOPNOTSUPP, "accepted");
	CHECK("a layout longer than max_entries: ENOMEM",
	      configure(a, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 5, mr->lkey, buf, NULL) == ENOMEM, "accepted");
	CHECK("configure on a QP without MKEY_CONFIGURE: EOPNOTSUPP",
	      configure(noops, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, NULL) == EOPNOTSUPP,
	      "accepted");

	struct mlx5dv_sig_t10dif dif = {.bg_type = MLX5DV_SIG_T10DIF_CRC, .bg = 0xFFFF, .app_tag = 1, .ref_tag = 2};
	struct mlx5dv_sig_block_domain dom = {.sig_type = MLX5DV_SIG_TYPE_T10DIF, .sig.dif = &dif,
					      .block_size = MLX5DV_BLOCK_SIZE_512};
	struct mlx5dv_sig_block_attr sig = {.wire = &dom, .check_mask = 0xFF};
	dom.block_size = 7;
	CHECK("an unknown block size: EINVAL",
	      configure(a, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, &sig) == EINVAL, "accepted");
	dom.block_size = MLX5DV_BLOCK_SIZE_512;
	dif.bg = 0x1234;
	CHECK("a T10-DIF guard seed other than 0 or 0xFFFF: EINVAL",
	      configure(a, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, &sig) == EINVAL, "accepted");
	dif.bg = 0;
	struct mlx5dv_sig_crc crc = {.type = 7, .seed = 0};
	struct mlx5dv_sig_block_domain cdom = {.sig_type = MLX5DV_SIG_TYPE_CRC, .sig.crc = &crc,
					       .block_size = MLX5DV_BLOCK_SIZE_512};
	struct mlx5dv_sig_block_attr csig = {.mem = &cdom, .check_mask = 0xF0};
	CHECK("an unknown CRC type: EINVAL",
	      configure(a, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, &csig) == EINVAL, "accepted");
	crc.type = MLX5DV_SIG_CRC_TYPE_CRC32;
	crc.seed = 5;
	CHECK("a CRC seed other than 0 or all ones: EINVAL",
	      configure(a, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, &csig) == EINVAL, "accepted");
	CHECK("a signature on a key without BLOCK_SIGNATURE: EINVAL",
	      plain && configure(a, plain, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, &sig) == EINVAL,
	      "accepted");
	sig.flags = MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK;
	CHECK("a copy mask without the same block structure: EINVAL",
	      configure(a, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, &sig) == EINVAL, "accepted");
	sig.flags = 0;
	/* After all that, a good configure still works, and completes as UMR. */
	st = configure(a, mkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 1, mr->lkey, buf, &sig);
	int wst = st ? -2 : wait_one(&wc);
	CHECK("a good configure after the bad ones", st == 0 && wst == IBV_WC_SUCCESS && (int)wc.opcode == (int)MLX5DV_WC_UMR,
	      "complete %d, status %d, opcode %d", st, wst, wc.opcode);
	CHECK("cancel_posted_send_wrs on a QP not in SQD: -EINVAL",
	      mlx5dv_qp_cancel_posted_send_wrs(mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_to_qp_ex(a)), 9) == -EINVAL,
	      "accepted");
	errno = 0;
	struct ibv_qp_init_attr_ex ux = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	struct mlx5dv_qp_init_attr ud = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS,
					 .send_ops_flags = MLX5DV_QP_EX_WITH_MKEY_CONFIGURE};
	CHECK("mkey ops on a UD QP: EOPNOTSUPP", !mlx5dv_create_qp(ctx, &ux, &ud) && errno == EOPNOTSUPP, "errno %d",
	      errno);
	CHECK("destroy mkeys", mlx5dv_destroy_mkey(mkey) == 0 && (!plain || mlx5dv_destroy_mkey(plain) == 0),
	      "errno %d", errno);
	return failed;
}
