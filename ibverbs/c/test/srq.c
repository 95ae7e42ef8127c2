/* srq: a libibverbs program (built against the installed headers and
 * libibverbs, run on hcasim's) that checks the SRQ verbs as mlx5 answers
 * them: the sizes it reports, the errno of bad arguments and of a full
 * SRQ, the limit event, a QP on an SRQ (no receive queue of its own; the
 * SRQ busy while it is attached; last WQE reached when it goes to ERR).
 * It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any
 * failed. ibverbs/baduse_test.go builds and runs it. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "checks.h"

static struct ibv_context *ctx;

/* next_event waits (boundedly) for an async event of type want. */
static int next_event(enum ibv_event_type want, struct ibv_async_event *ev)
{
	for (int i = 0; i < 50; i++) {
		struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		if (ibv_get_async_event(ctx, ev))
			return 0;
		if (ev->event_type == want)
			return 1;
		ibv_ack_async_event(ev);
	}
	return 0;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 200000000L; i++)
		if (ibv_poll_cq(cq, 1, wc))
			return 1;
	return 0;
}

int main(void)
{
	uint16_t lid;
	ctx = open_first(&lid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	char *buf = calloc(1, 65536);
	struct ibv_mr *mr = pd && buf ? ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!pd || !cq || !mr)
		die("pd, cq or mr");
	struct ibv_device_attr da;
	CHECK("the device advertises SRQs", ibv_query_device(ctx, &da) == 0 && da.max_srq > 0 && da.max_srq_wr > 0 && da.max_srq_sge > 0,
	      "max_srq %d max_srq_wr %d max_srq_sge %d", da.max_srq, da.max_srq_wr, da.max_srq_sge);

	struct {
		const char *name;
		uint32_t wr, sge, limit;
	} bad[] = {{"max_wr above max_srq_wr", (uint32_t)da.max_srq_wr + 1, 1, 0},
		   {"max_sge above max_srq_sge", 16, (uint32_t)da.max_srq_sge + 1, 0},
		   {"a limit above max_wr", 16, 1, 17}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct ibv_srq_init_attr a = {.attr = {.max_wr = bad[i].wr, .max_sge = bad[i].sge, .srq_limit = bad[i].limit}};
		errno = 0;
		struct ibv_srq *s = ibv_create_srq(pd, &a);
		char name[96];
		snprintf(name, sizeof name, "create SRQ with %s", bad[i].name);
		CHECK(name, !s && errno == EINVAL, "got %p, errno %d", (void *)s, errno);
	}
	/* mlx5 and the kernel take max_wr and max_sge 0 (pyverbs' default
	 * SrqInitAttr()). */
	struct ibv_srq_init_attr zero = {.attr = {.max_wr = 0, .max_sge = 0}};
	struct ibv_srq *zs = ibv_create_srq(pd, &zero);
	CHECK("create SRQ with max_wr and max_sge 0, as mlx5", zs != NULL && zero.attr.max_wr == 0, "got %p, errno %d, max_wr %u",
	      (void *)zs, errno, zero.attr.max_wr);
	if (zs)
		ibv_destroy_srq(zs);

	struct ibv_srq_init_attr ia = {.attr = {.max_wr = 6, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &ia);
	if (!srq)
		die("create srq");
	CHECK("max_wr rounds up as mlx5 (6 -> 7)", ia.attr.max_wr == 7 && ia.attr.max_sge >= 1, "max_wr %u max_sge %u",
	      ia.attr.max_wr, ia.attr.max_sge);

	struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr wrs[8], *badwr = NULL;
	for (int i = 0; i < 8; i++)
		wrs[i] = (struct ibv_recv_wr){.wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1, .next = i < 7 ? &wrs[i + 1] : NULL};
	int rc = ibv_post_srq_recv(srq, wrs, &badwr);
	CHECK("a post past the SRQ's size fails with ENOMEM at the first WR refused", rc == ENOMEM && badwr == &wrs[7],
	      "returned %d, bad_wr %p (want %p)", rc, (void *)badwr, (void *)&wrs[7]);
	struct ibv_sge two[2] = {sg, sg};
	struct ibv_recv_wr big = {.wr_id = 99, .sg_list = two, .num_sge = 2};
	badwr = NULL;
	rc = ibv_post_srq_recv(srq, &big, &badwr);
	CHECK("a WR of more SGEs than max_sge fails with EINVAL", rc == EINVAL && badwr == &big, "returned %d", rc);

	struct ibv_srq_attr sa = {.max_wr = 100};
	CHECK("resizing an SRQ is refused (EINVAL), as on mlx5", ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == EINVAL, "accepted");
	sa.srq_limit = 8;
	CHECK("a limit above max_wr is refused", ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == EINVAL, "accepted");
	sa.srq_limit = 6;
	CHECK("arm the limit", ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "errno %d", errno);
	memset(&sa, 0, sizeof sa);
	CHECK("query reads the limit back", ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 6 && sa.max_wr == 7,
	      "limit %u max_wr %u", sa.srq_limit, sa.max_wr);

	/* Two RC QPs connected to each other, the second on the SRQ. */
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *snd = ibv_create_qp(pd, &qa);
	qa.srq = srq;
	struct ibv_qp *rcv = ibv_create_qp(pd, &qa);
	if (!snd || !rcv)
		die("create qps");
	CHECK("a QP on an SRQ reports no receive queue", qa.cap.max_recv_wr == 0, "max_recv_wr %u", qa.cap.max_recv_wr);
	if (rc_connect(snd, rcv->qp_num, lid, 0, 7) || rc_connect(rcv, snd->qp_num, lid, 0, 7))
		die("connect");
	struct ibv_recv_wr own = {.wr_id = 50, .sg_list = &sg, .num_sge = 1};
	badwr = NULL;
	rc = ibv_post_recv(rcv, &own, &badwr);
	CHECK("ibv_post_recv to a QP on an SRQ fails (ENOMEM, as mlx5)", rc == ENOMEM && badwr == &own, "returned %d", rc);

	/* Sends take WRs 0 and 1: 5 left, below the limit of 6. */
	struct ibv_sge ss = {.addr = (uintptr_t)buf + 4096, .length = 16, .lkey = mr->lkey};
	int got[2] = {-1, -1};
	for (int i = 0; i < 2; i++) {
		struct ibv_send_wr sw = {.wr_id = 100 + (uint64_t)i, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bs;
		ibv_post_send(snd, &sw, &bs);
		for (int k = 0; k < 2; k++) {
			struct ibv_wc wc;
			if (poll_one(cq, &wc) && wc.qp_num == rcv->qp_num)
				got[i] = wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV ? (int)wc.wr_id : -2;
		}
	}
	CHECK("receives come from the SRQ in post order", got[0] == 0 && got[1] == 1, "WR IDs %d, %d", got[0], got[1]);
	struct ibv_async_event ev;
	int ok = next_event(IBV_EVENT_SRQ_LIMIT_REACHED, &ev);
	CHECK("IBV_EVENT_SRQ_LIMIT_REACHED", ok && ev.element.srq == srq, "no event");
	if (ok)
		ibv_ack_async_event(&ev);
	memset(&sa, 0, sizeof sa);
	CHECK("the limit is disarmed after its event", ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 0, "limit %u",
	      sa.srq_limit);

	CHECK("an SRQ a QP uses cannot be destroyed (EBUSY)", ibv_destroy_srq(srq) == EBUSY, "destroyed");
	struct ibv_qp_attr ea = {.qp_state = IBV_QPS_ERR};
	CHECK("modify the SRQ's QP to ERR", ibv_modify_qp(rcv, &ea, IBV_QP_STATE) == 0, "errno %d", errno);
	ok = next_event(IBV_EVENT_QP_LAST_WQE_REACHED, &ev);
	CHECK("IBV_EVENT_QP_LAST_WQE_REACHED", ok && ev.element.qp == rcv, "no event");
	if (ok)
		ibv_ack_async_event(&ev);
	CHECK("destroy the QPs", ibv_destroy_qp(rcv) == 0 && ibv_destroy_qp(snd) == 0, "errno %d", errno);
	CHECK("destroy the SRQ once unused", ibv_destroy_srq(srq) == 0, "errno %d", errno);
	/* ibv_create_srq_ex of the basic kind, naming a CQ (the provider's
	 * create_srq_ex, not ibv_create_srq), and its SRQ number. */
	struct ibv_srq_init_attr_ex xa = {.attr = {.max_wr = 4, .max_sge = 1},
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ,
					  .srq_type = IBV_SRQT_BASIC, .pd = pd, .cq = cq};
	struct ibv_srq *xs = ibv_create_srq_ex(ctx, &xa);
	uint32_t num = 0;
	CHECK("ibv_create_srq_ex of the basic kind", xs && xa.attr.max_wr == 7, "errno %d", errno);
	CHECK("ibv_get_srq_num", xs && ibv_get_srq_num(xs, &num) == 0 && num != 0, "number %u", num);
	CHECK("destroy it", xs && ibv_destroy_srq(xs) == 0, "errno %d", errno);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return failed;
}
