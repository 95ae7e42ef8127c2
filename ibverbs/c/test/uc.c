/* uc: a libibverbs program (built against the installed headers, run on
 * hcasim's libibverbs and libmlx5) that checks UC QPs as mlx5 and the
 * kernel answer them: the RC-only attributes of a transition are refused
 * (EINVAL), UC takes no signature offload and no READ or atomic send ops
 * (EOPNOTSUPP), a READ or an atomic posted anyway completes with
 * IBV_WC_LOC_QP_OP_ERR, and WRITE with immediate and SEND work.
 * It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any
 * failed. ibverbs/baduse_test.go builds and runs it. */
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

static struct ibv_qp *uc_qp(void)
{
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	return ibv_create_qp(pd, &qa);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* to_rtr moves qp from INIT to RTR toward dest with the UC attributes and
 * extra, which may be an RC-only attribute (then it must be refused). */
static int to_rtr(struct ibv_qp *qp, uint32_t dest, int extra)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
				.ah_attr = {.is_global = 1, .grh = {.sgid_index = 3, .hop_limit = 64}, .port_num = 1},
				.max_dest_rd_atomic = 1, .min_rnr_timer = 12};
	if (ibv_query_gid(qp->context, 1, 3, &a.ah_attr.grh.dgid))
		return errno;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | extra);
}

static int to_rts(struct ibv_qp *qp, int extra)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = 10, .retry_cnt = 7, .rnr_retry = 7,
				.max_rd_atomic = 1};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | extra);
}

/* pair creates two UC QPs connected to each other. */
static void pair(struct ibv_qp **a, struct ibv_qp **b)
{
	*a = uc_qp();
	*b = uc_qp();
	if (!*a || !*b || to_init(*a) || to_init(*b) || to_rtr(*a, (*b)->qp_num, 0) || to_rtr(*b, (*a)->qp_num, 0) ||
	    to_rts(*a, 0) || to_rts(*b, 0))
		die("connect a UC pair");
}

static int poll_one(struct ibv_wc *wc)
{
	for (long i = 0; i < 200000000L; i++)
		if (ibv_poll_cq(cq, 1, wc))
			return 1;
	return 0;
}

int main(void)
{
	ctx = open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	char *buf = calloc(1, 65536);
	struct ibv_mr *mr =
		pd && buf ? ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!pd || !cq || !mr)
		die("pd, cq or mr");

	/* RC-only attributes on a UC transition: EINVAL, the QP stays put. */
	struct ibv_qp *q = uc_qp();
	if (!q || to_init(q))
		die("create a UC QP");
	struct {
		const char *name;
		int rtr, mask;
	} rc_only[] = {{"MAX_DEST_RD_ATOMIC at RTR", 1, IBV_QP_MAX_DEST_RD_ATOMIC},
		       {"MIN_RNR_TIMER at RTR", 1, IBV_QP_MIN_RNR_TIMER},
		       {"TIMEOUT at RTS", 0, IBV_QP_TIMEOUT},
		       {"RETRY_CNT at RTS", 0, IBV_QP_RETRY_CNT},
		       {"RNR_RETRY at RTS", 0, IBV_QP_RNR_RETRY},
		       {"MAX_QP_RD_ATOMIC at RTS", 0, IBV_QP_MAX_QP_RD_ATOMIC}};
	int at_rtr = 0;
	for (size_t i = 0; i < sizeof rc_only / sizeof rc_only[0]; i++) {
		if (!rc_only[i].rtr && !at_rtr) {
			if (to_rtr(q, q->qp_num, 0))
				die("UC INIT to RTR");
			at_rtr = 1;
		}
		int rc = rc_only[i].rtr ? to_rtr(q, q->qp_num, rc_only[i].mask) : to_rts(q, rc_only[i].mask);
		char name[96];
		snprintf(name, sizeof name, "UC refuses %s (EINVAL)", rc_only[i].name);
		CHECK(name, rc == EINVAL, "returned %d", rc);
	}
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK("a refused transition leaves the UC QP in RTR", ibv_query_qp(q, &qa, IBV_QP_STATE, &qia) == 0 &&
								    qa.qp_state == IBV_QPS_RTR && qia.qp_type == IBV_QPT_UC,
	      "state %d type %d", qa.qp_state, qia.qp_type);
	CHECK("UC to RTS with the UC attributes", to_rts(q, 0) == 0, "errno %d", errno);
	ibv_destroy_qp(q);

	/* Send ops and offloads UC does not have. */
	struct ibv_qp_init_attr_ex xa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	uint64_t no[] = {IBV_QP_EX_WITH_RDMA_READ, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
	const char *no_name[] = {"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD"};
	for (int i = 0; i < 3; i++) {
		xa.send_ops_flags = IBV_QP_EX_WITH_SEND | no[i];
		errno = 0;
		struct ibv_qp *x = ibv_create_qp_ex(ctx, &xa);
		char name[96];
		snprintf(name, sizeof name, "a UC QP with send op %s is refused (EOPNOTSUPP)", no_name[i]);
		CHECK(name, !x && errno == EOPNOTSUPP, "got %p, errno %d", (void *)x, errno);
		if (x)
			ibv_destroy_qp(x);
	}
	xa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	struct ibv_qp *x = ibv_create_qp_ex(ctx, &xa);
	CHECK("a UC QP with SEND and WRITE_WITH_IMM send ops is created", x != NULL, "errno %d", errno);
	if (x)
		ibv_destroy_qp(x);

	struct mlx5dv_qp_init_attr dva = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS,
					  .send_ops_flags = MLX5DV_QP_EX_WITH_MKEY_CONFIGURE};
	xa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	xa.send_ops_flags = IBV_QP_EX_WITH_SEND;
	errno = 0;
	x = mlx5dv_create_qp(ctx, &xa, &dva);
	CHECK("a UC QP with mlx5dv integrity (MKEY_CONFIGURE) is refused (EOPNOTSUPP)", !x && errno == EOPNOTSUPP,
	      "got %p, errno %d", (void *)x, errno);
	if (x)
		ibv_destroy_qp(x);
	dva = (struct mlx5dv_qp_init_attr){.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
					   .create_flags = MLX5DV_QP_CREATE_SIG_PIPELINING};
	errno = 0;
	x = mlx5dv_create_qp(ctx, &xa, &dva);
	CHECK("a UC QP with SIG_PIPELINING is refused", !x && (errno == EOPNOTSUPP || errno == EINVAL),
	      "got %p, errno %d", (void *)x, errno);
	if (x)
		ibv_destroy_qp(x);

	/* What UC carries: WRITE with immediate, then SEND. */
	struct ibv_qp *a, *b;
	pair(&a, &b);
	struct ibv_sge rs = {.addr = (uintptr_t)buf + 32768, .length = 4096, .lkey = mr->lkey};
	struct ibv_recv_wr rw[2] = {{.wr_id = 1, .sg_list = &rs, .num_sge = 1, .next = &rw[1]},
				    {.wr_id = 2, .sg_list = &rs, .num_sge = 1}};
	struct ibv_recv_wr *badr;
	if (ibv_post_recv(b, rw, &badr))
		die("post recv");
	memset(buf, 0xA5, 256);
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = 256, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = 10, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				.send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0xC0DE),
				.wr = {.rdma = {.remote_addr = (uintptr_t)buf + 16384, .rkey = mr->rkey}}};
	struct ibv_send_wr *bad;
	struct ibv_wc wc[2];
	int got_send = 0, got_recv = 0;
	if (ibv_post_send(a, &w, &bad) == 0)
		for (int i = 0; i < 2 && poll_one(&wc[0]); i++) {
			if (wc[0].wr_id == 10)
				got_send = wc[0].status == IBV_WC_SUCCESS;
			else if (wc[0].wr_id == 1)
				got_recv = wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
					   (wc[0].wc_flags & IBV_WC_WITH_IMM) && be32toh(wc[0].imm_data) == 0xC0DE;
		}
	CHECK("UC WRITE_WITH_IMM completes both sides and places the data",
	      got_send && got_recv && memcmp(buf, buf + 16384, 256) == 0, "send %d recv %d", got_send, got_recv);
	w.wr_id = 11;
	w.opcode = IBV_WR_SEND;
	got_send = got_recv = 0;
	memset(buf + 32768, 0, 256);
	if (ibv_post_send(a, &w, &bad) == 0)
		for (int i = 0; i < 2 && poll_one(&wc[0]); i++) {
			if (wc[0].wr_id == 11)
				got_send = wc[0].status == IBV_WC_SUCCESS;
			else if (wc[0].wr_id == 2)
				got_recv = wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV &&
					   wc[0].byte_len == 256 && wc[0].qp_num == b->qp_num;
		}
	CHECK("UC SEND completes both sides", got_send && got_recv && memcmp(buf, buf + 32768, 256) == 0,
	      "send %d recv %d", got_send, got_recv);

	/* A READ, then an atomic, posted to a UC QP: a local QP operation
	 * error, and the QP goes to ERR. */
	struct {
		const char *name;
		enum ibv_wr_opcode op;
	} ops[] = {{"RDMA_READ", IBV_WR_RDMA_READ}, {"ATOMIC_FETCH_AND_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD}};
	for (int i = 0; i < 2; i++) {
		struct ibv_qp *c, *d;
		pair(&c, &d);
		struct ibv_sge s8 = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr r = {.wr_id = 20 + (uint64_t)i, .sg_list = &s8, .num_sge = 1, .opcode = ops[i].op,
					.send_flags = IBV_SEND_SIGNALED};
		if (ops[i].op == IBV_WR_RDMA_READ) {
			r.wr.rdma.remote_addr = (uintptr_t)buf + 8192;
			r.wr.rdma.rkey = mr->rkey;
		} else {
			r.wr.atomic.remote_addr = (uintptr_t)buf + 8192;
			r.wr.atomic.rkey = mr->rkey;
			r.wr.atomic.compare_add = 1;
		}
		int rc = ibv_post_send(c, &r, &bad);
		int got = rc == 0 && poll_one(&wc[0]);
		char name[96];
		snprintf(name, sizeof name, "%s on a UC QP completes with IBV_WC_LOC_QP_OP_ERR", ops[i].name);
		CHECK(name, got && wc[0].wr_id == r.wr_id && wc[0].status == IBV_WC_LOC_QP_OP_ERR,
		      "post %d, completion %d, wr_id %llu status %s", rc, got, (unsigned long long)wc[0].wr_id,
		      ibv_wc_status_str(wc[0].status));
		memset(&qa, 0, sizeof qa);
		snprintf(name, sizeof name, "the UC QP is in ERR after the %s", ops[i].name);
		CHECK(name, ibv_query_qp(c, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_ERR, "state %d",
		      qa.qp_state);
		ibv_destroy_qp(c);
		ibv_destroy_qp(d);
	}

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return failed;
}
