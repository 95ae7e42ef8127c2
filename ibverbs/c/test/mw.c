/* mw: a libibverbs program (built against the installed headers, run on
 * hcasim's libibverbs) that checks memory windows as mlx5 gives them:
 * type 1 (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW, ibv_wr_bind_mw), remote
 * access through the window's rkey within its range and rights, unbinding,
 * LOCAL_INV and SEND_WITH_INV of a type 2 window, a type 2 window reachable
 * only through the QP it is bound to, a bound type 2 window not rebindable
 * (IBV_WC_MW_BIND_ERR), and the refusals of ibv_alloc_mw.
 * It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any
 * failed. ibverbs/baduse_test.go builds and runs it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "checks.h"

enum { BUF = 65536, WIN = 4096, WLEN = 256 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint16_t lid;
static char *buf;
static struct ibv_mr *mr;

struct end {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
};

static struct end make_end(void)
{
	struct end e = {0};
	e.cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {.send_cq = e.cq, .recv_cq = e.cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	e.qp = e.cq ? ibv_create_qp(pd, &qa) : NULL;
	if (!e.qp)
		die("create an RC QP");
	return e;
}

/* pair connects two new RC QPs with remote read and write access. */
static void pair(struct end *a, struct end *b)
{
	*a = make_end();
	*b = make_end();
	unsigned acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
	if (rc_connect(a->qp, b->qp->qp_num, lid, acc, 1) || rc_connect(b->qp, a->qp->qp_num, lid, acc, 1))
		die("connect an RC pair");
}

static void unpair(struct end *a, struct end *b)
{
	ibv_destroy_qp(a->qp);
	ibv_destroy_qp(b->qp);
	ibv_destroy_cq(a->cq);
	ibv_destroy_cq(b->cq);
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 200000000L; i++)
		if (ibv_poll_cq(cq, 1, wc))
			return 1;
	wc->status = (enum ibv_wc_status)-1;
	return 0;
}

/* rdma posts one signaled READ or WRITE of n bytes from e to raddr
 * through rkey and returns its completion status. */
static int rdma(struct end *e, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey, uint32_t n)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = n, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED, .wr = {.rdma = {.remote_addr = raddr, .rkey = rkey}}};
	struct ibv_send_wr *bad;
	if (ibv_post_send(e->qp, &wr, &bad))
		return -2;
	struct ibv_wc wc;
	poll_one(e->cq, &wc);
	return wc.status;
}

/* bind2 binds type 2 window mw on e with IBV_WR_BIND_MW to rkey and
 * returns the completion status (and its opcode in *op). */
static int bind2(struct end *e, struct ibv_mw *mw, uint32_t rkey, uint64_t len, unsigned access, int *op)
{
	struct ibv_send_wr wr = {.wr_id = 9, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = (uintptr_t)buf + WIN, .length = len,
							 .mw_access_flags = access};
	struct ibv_send_wr *bad;
	if (ibv_post_send(e->qp, &wr, &bad))
		return -2;
	struct ibv_wc wc;
	poll_one(e->cq, &wc);
	if (op)
		*op = wc.opcode;
	return wc.status;
}

/* new2 allocates a type 2 window and sets *k to the rkey its first bind
 * takes; with e, it also binds it on e for rw access and dies when that
 * fails. */
static struct ibv_mw *new2(struct end *e, uint32_t *k, unsigned rw)
{
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mw)
		die("alloc a type 2 window");
	*k = ibv_inc_rkey(mw->rkey);
	if (e && bind2(e, mw, *k, WLEN, rw, NULL) != IBV_WC_SUCCESS)
		die("bind a type 2 window");
	return mw;
}

static int bind1(struct end *e, struct ibv_mw *mw, uint64_t len, unsigned access)
{
	struct ibv_mw_bind mb = {.wr_id = 3, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = {.mr = mr, .addr = (uintptr_t)buf + WIN, .length = len,
					       .mw_access_flags = access}};
	int rc = ibv_bind_mw(e->qp, mw, &mb);
	if (rc)
		return -2;
	struct ibv_wc wc;
	poll_one(e->cq, &wc);
	return wc.opcode == IBV_WC_BIND_MW ? (int)wc.status : -3;
}

int main(void)
{
	ctx = open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	buf = calloc(1, BUF);
	mr = pd && buf ? ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) : NULL;
	if (!mr)
		die("pd or mr");
	uint64_t win = (uintptr_t)buf + WIN;
	unsigned rw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;

	struct ibv_device_attr da;
	CHECK("the device advertises windows of type 1 and 2B",
	      ibv_query_device(ctx, &da) == 0 && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
		  (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) && !(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A) &&
		  da.max_mw > 0,
	      "flags %#x max_mw %d", da.device_cap_flags, da.max_mw);
	errno = 0;
	struct ibv_mw *bad = ibv_alloc_mw(pd, (enum ibv_mw_type)3);
	CHECK("a window of type 3 is refused (EINVAL)", !bad && errno == EINVAL, "got %p errno %d", (void *)bad, errno);

	/* Type 1. */
	struct end a, b;
	pair(&a, &b);
	struct ibv_mw *m1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	if (!m1)
		die("alloc a type 1 window");
	uint32_t before = m1->rkey;
	int st = bind1(&a, m1, WLEN, rw);
	CHECK("ibv_bind_mw of a type 1 window completes with IBV_WC_BIND_MW", st == IBV_WC_SUCCESS, "status %d", st);
	CHECK("the bind gives the window the next rkey variant", m1->rkey == ibv_inc_rkey(before) && m1->rkey != before,
	      "rkey %#x before %#x", m1->rkey, before);
	memset(buf, 0x5a, WLEN);
	st = rdma(&b, IBV_WR_RDMA_WRITE, win + WLEN - 64, m1->rkey, 64);
	CHECK("a WRITE through the type 1 window lands", st == IBV_WC_SUCCESS && (unsigned char)buf[WIN + WLEN - 1] == 0x5a,
	      "status %d byte %#x", st, (unsigned char)buf[WIN + WLEN - 1]);
	st = rdma(&b, IBV_WR_RDMA_WRITE, win + WLEN - 63, m1->rkey, 64);
	CHECK("a WRITE one byte past the window: IBV_WC_REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	unpair(&a, &b);

	pair(&a, &b);
	st = rdma(&b, IBV_WR_RDMA_READ, win, m1->rkey, 64);
	CHECK("a READ through a window bound without remote read: IBV_WC_REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR,
	      "status %d", st);
	unpair(&a, &b);

	pair(&a, &b);
	st = rdma(&b, IBV_WR_RDMA_WRITE, win, m1->rkey, 64);
	CHECK("a type 1 window serves any QP of its PD", st == IBV_WC_SUCCESS, "status %d", st);
	st = bind1(&a, m1, 0, 0);
	CHECK("a zero-length bind unbinds the type 1 window", st == IBV_WC_SUCCESS, "status %d", st);
	st = rdma(&b, IBV_WR_RDMA_WRITE, win, m1->rkey, 64);
	CHECK("a WRITE through the unbound window: IBV_WC_REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	CHECK("ibv_dealloc_mw of the type 1 window", ibv_dealloc_mw(m1) == 0, "errno %d", errno);
	unpair(&a, &b);

	/* Type 2, bound to QP a. */
	pair(&a, &b);
	uint32_t k2;
	struct ibv_mw *m2 = new2(NULL, &k2, 0);
	int op = -1;
	st = bind2(&a, m2, k2, WLEN, rw | IBV_ACCESS_REMOTE_READ, &op);
	CHECK("IBV_WR_BIND_MW of a type 2 window completes with IBV_WC_BIND_MW", st == IBV_WC_SUCCESS && op == IBV_WC_BIND_MW,
	      "status %d opcode %d", st, op);
	st = rdma(&b, IBV_WR_RDMA_READ, win, k2, WLEN);
	CHECK("a READ through the type 2 window, on its QP", st == IBV_WC_SUCCESS, "status %d", st);
	struct end c, d;
	pair(&c, &d);
	st = rdma(&d, IBV_WR_RDMA_WRITE, win, k2, 64);
	CHECK("the type 2 window through another QP: IBV_WC_REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	unpair(&c, &d);
	st = bind2(&a, m2, ibv_inc_rkey(k2), WLEN, rw, NULL);
	CHECK("rebinding a bound type 2 window: IBV_WC_MW_BIND_ERR", st == IBV_WC_MW_BIND_ERR, "status %d", st);
	CHECK("ibv_dealloc_mw of a bound type 2 window", ibv_dealloc_mw(m2) == 0, "errno %d", errno);
	unpair(&a, &b);

	/* LOCAL_INV, then SEND_WITH_INV from the peer. */
	pair(&a, &b);
	m2 = new2(&a, &k2, rw);
	struct ibv_send_wr inv = {.wr_id = 11, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				  .invalidate_rkey = k2};
	struct ibv_send_wr *badwr;
	struct ibv_wc wc = {0};
	int ok = ibv_post_send(a.qp, &inv, &badwr) == 0 && poll_one(a.cq, &wc);
	CHECK("LOCAL_INV of the type 2 window", ok && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
	      "status %d opcode %d", wc.status, wc.opcode);
	st = rdma(&b, IBV_WR_RDMA_WRITE, win, k2, 64);
	CHECK("a WRITE through the invalidated window: IBV_WC_REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	ibv_dealloc_mw(m2);
	unpair(&a, &b);
	m2 = new2(NULL, &k2, 0);

	pair(&a, &b);
	struct ibv_qp_ex *qx = NULL;
	{
		struct ibv_cq *xcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_qp_init_attr_ex xa = {.send_cq = xcq, .recv_cq = xcq, .qp_type = IBV_QPT_RC, .pd = pd,
						 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
						 .send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_RDMA_WRITE,
						 .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *xq = xcq ? ibv_create_qp_ex(ctx, &xa) : NULL;
		CHECK("an extended QP with IBV_QP_EX_WITH_BIND_MW is created", xq != NULL, "errno %d", errno);
		if (xq) {
			unsigned acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
			if (rc_connect(xq, b.qp->qp_num, lid, acc, 1))
				die("connect the extended QP");
			qx = ibv_qp_to_qp_ex(xq);
			struct ibv_mw_bind_info bi = {.mr = mr, .addr = win, .length = WLEN, .mw_access_flags = rw};
			ibv_wr_start(qx);
			qx->wr_id = 21;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_bind_mw(qx, m2, k2, &bi);
			int rc = ibv_wr_complete(qx);
			ok = rc == 0 && poll_one(xcq, &wc);
			CHECK("ibv_wr_bind_mw binds the type 2 window", ok && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
			      "rc %d status %d opcode %d", rc, wc.status, wc.opcode);
			st = rdma(&b, IBV_WR_RDMA_WRITE, win, k2, 64);
			CHECK("the window ibv_wr_bind_mw bound is not reachable from another QP", st == IBV_WC_REM_ACCESS_ERR,
			      "status %d", st);
			ibv_destroy_qp(xq);
		}
		ibv_destroy_cq(xcq);
	}
	unpair(&a, &b);

	ibv_dealloc_mw(m2);
	pair(&a, &b);
	m2 = new2(&a, &k2, rw);
	struct ibv_recv_wr rwr = {.wr_id = 31, .sg_list = &(struct ibv_sge){.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey},
				  .num_sge = 1};
	struct ibv_recv_wr *badr;
	struct ibv_send_wr sinv = {.wr_id = 32, .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED,
				   .invalidate_rkey = k2};
	struct ibv_wc rwc = {0};
	ok = ibv_post_recv(a.qp, &rwr, &badr) == 0 && ibv_post_send(b.qp, &sinv, &badwr) == 0 && poll_one(b.cq, &wc) &&
	     poll_one(a.cq, &rwc);
	CHECK("SEND_WITH_INV of the type 2 window's rkey invalidates it at the receiver",
	      ok && wc.status == IBV_WC_SUCCESS && rwc.status == IBV_WC_SUCCESS && (rwc.wc_flags & IBV_WC_WITH_INV) &&
		  rwc.invalidated_rkey == k2,
	      "send %d recv %d flags %#x rkey %#x", wc.status, rwc.status, rwc.wc_flags, rwc.invalidated_rkey);
	st = rdma(&b, IBV_WR_RDMA_WRITE, win, k2, 64);
	CHECK("a WRITE through the remotely invalidated window: IBV_WC_REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR,
	      "status %d", st);
	CHECK("ibv_dealloc_mw of the type 2 window", ibv_dealloc_mw(m2) == 0, "errno %d", errno);
	unpair(&a, &b);
	return failed;
}
