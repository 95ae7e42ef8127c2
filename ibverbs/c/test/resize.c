/* resize: ibv_resize_cq on a CQ that holds unpolled completions (a
 * libibverbs program built against the installed headers, run on
 * hcasim's): they are kept, in order, across growing and shrinking; the
 * CQ then takes more than its old size; bad sizes are EINVAL. It prints
 * "ok NAME" or "FAIL NAME: why" per check and exits 1 if any failed.
 * ibverbs/baduse_test.go builds and runs it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "checks.h"

static struct ibv_qp *qp;
static struct ibv_mr *mr;
static char *buf;

static void post_writes(uint64_t from, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = from + (uint64_t)i, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr = {.rdma = {.remote_addr = (uintptr_t)buf + 4096, .rkey = mr->rkey}}},
				   *bad;
		if (ibv_post_send(qp, &wr, &bad))
			die("post send");
	}
}

/* in_order polls n completions (boundedly) and reports whether they are
 * the writes from, from+1, … in order, all successful. */
static int in_order(struct ibv_cq *cq, uint64_t from, int n)
{
	int got = 0;
	for (long spin = 0; got < n && spin < 200000000L; spin++) {
		struct ibv_wc wc;
		int k = ibv_poll_cq(cq, 1, &wc);
		if (k < 0)
			return 0;
		if (k == 0)
			continue;
		if (wc.status != IBV_WC_SUCCESS || wc.wr_id != from + (uint64_t)got)
			return 0;
		got++;
	}
	return got == n;
}

int main(void)
{
	uint16_t lid;
	struct ibv_context *ctx = open_first(&lid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 7, NULL, NULL, 0);
	buf = calloc(1, 8192);
	mr = pd && buf ? ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!cq || !mr)
		die("cq or mr");
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 64, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	qp = ibv_create_qp(pd, &qa);
	if (!qp || rc_connect(qp, qp->qp_num, lid, IBV_ACCESS_REMOTE_WRITE, 7))
		die("qp");

	CHECK("a size of 0 is EINVAL", ibv_resize_cq(cq, 0) == EINVAL, "accepted");
	CHECK("a size above max_cqe is EINVAL", ibv_resize_cq(cq, 1 << 30) == EINVAL, "accepted");
	CHECK("the same size leaves the CQ as it is", ibv_resize_cq(cq, 7) == 0 && cq->cqe == 7, "cqe %d", cq->cqe);

	post_writes(0, 5);
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL); /* most or all of them complete meanwhile; either way they must survive */
	int rc = ibv_resize_cq(cq, 100);
	CHECK("grow to 100", rc == 0 && cq->cqe == 127, "returned %d, cqe %d", rc, cq->cqe);
	CHECK("the completions before growing are kept, in order", in_order(cq, 0, 5), "lost or reordered");
	post_writes(100, 40);
	CHECK("40 completions after growing from 7", in_order(cq, 100, 40), "lost or reordered");
	post_writes(200, 3);
	nanosleep(&ts, NULL);
	rc = ibv_resize_cq(cq, 15);
	CHECK("shrink to 15", rc == 0 && cq->cqe == 15, "returned %d, cqe %d", rc, cq->cqe);
	CHECK("the completions before shrinking are kept, in order", in_order(cq, 200, 3), "lost or reordered");
	post_writes(300, 12);
	CHECK("12 completions after shrinking", in_order(cq, 300, 12), "lost or reordered");
	CHECK("destroy", ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "errno %d", errno);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return failed;
}
