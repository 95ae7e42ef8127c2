/* replies: the workload of FuzzDaemonReplies (ibverbs/fuzz_test.go), which
 * runs it against a daemon whose replies and events a proxy corrupts. It
 * does what a small RDMA program does — open, query, PD, MR, CQ with a
 * channel, two RC QPs connected to each other, a SEND and an RDMA WRITE,
 * polls bounded in time, the async event queue, teardown — and stops at
 * the first verb that fails, tearing down what it made. Whatever the
 * daemon says, it must end by itself, without a crash. */
#include <fcntl.h>
#include <poll.h>
#include <time.h>

#include "checks.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* drain polls cq for up to n completions or half a second. */
static int drain(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc[4];
	int got = 0;
	for (double end = now() + 0.5; got < n && now() < end;) {
		int k = ibv_poll_cq(cq, 4, wc);
		if (k < 0)
			return -1;
		got += k;
	}
	return got;
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx)
		return 1;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_comp_channel *ch = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_qp *qa = NULL, *qb = NULL;
	static uint8_t buf[8192];
	printf("opened\n");
	fflush(stdout);
	if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, 3, &gid))
		goto out;
	if (!(pd = ibv_alloc_pd(ctx)) || !(ch = ibv_create_comp_channel(ctx)))
		goto out;
	const unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (!(mr = ibv_reg_mr(pd, buf, sizeof buf, acc)))
		goto out;
	if (!(cq = ibv_create_cq(ctx, 16, NULL, ch, 0)) || ibv_req_notify_cq(cq, 0))
		goto out;
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = {4, 4, 1, 1, 64}};
	if (!(qa = ibv_create_qp(pd, &ia)) || !(qb = ibv_create_qp(pd, &ia)))
		goto out;
	if (rc_connect(qa, qb->qp_num, pa.lid, acc, 1) || rc_connect(qb, qa->qp_num, pa.lid, acc, 1))
		goto out;
	struct ibv_sge rs = {(uintptr_t)buf + 4096, 4096, mr->lkey}, ss = {(uintptr_t)buf, 64, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *brw;
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bsw;
	if (ibv_post_recv(qb, &rw, &brw) || ibv_post_send(qa, &sw, &bsw))
		goto out;
	printf("posted\n");
	fflush(stdout);
	drain(cq, 2);
	sw.opcode = IBV_WR_RDMA_WRITE;
	sw.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	sw.wr.rdma.rkey = mr->rkey;
	if (ibv_post_send(qa, &sw, &bsw))
		goto out;
	drain(cq, 1);
	/* The channel and the async queue, without waiting for them. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ecq;
	void *ectx;
	if (ibv_get_cq_event(ch, &ecq, &ectx) == 0)
		ibv_ack_cq_events(ecq, 1);
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_async_event ev;
	for (int i = 0; i < 8 && ibv_get_async_event(ctx, &ev) == 0; i++)
		ibv_ack_async_event(&ev);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	ibv_query_qp(qa, &qattr, IBV_QP_STATE, &qinit);
	printf("ran to the end\n");
	fflush(stdout);
out:
	printf("teardown\n");
	fflush(stdout);
	/* Teardown in order; a destroy that fails leaves its object (and
	 * then its parents) in place, as a program would. */
	if (qb)
		ibv_destroy_qp(qb);
	if (qa)
		ibv_destroy_qp(qa);
	if (cq)
		ibv_destroy_cq(cq);
	if (ch)
		ibv_destroy_comp_channel(ch);
	if (mr)
		ibv_dereg_mr(mr);
	if (pd)
		ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("closed\n");
	return failed;
}
