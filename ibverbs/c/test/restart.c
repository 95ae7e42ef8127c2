/* restart.c: a program whose daemon goes away under it (issue 29: a
 * daemon restart is a ConnectX reset). It opens the device and builds a
 * connected RC QP with a posted receive, prints "ready", then waits for
 * the async event the loss brings: IBV_EVENT_DEVICE_FATAL. After it every
 * verb that needs the device fails (no hang, no crash), and every destroy
 * succeeds, so the program can clean up and exit. Run by
 * TestDaemonRestart (ibverbs/baduse_test.go), which stops the daemon once
 * "ready" is printed. */
#include <poll.h>
#include <unistd.h>

#include "checks.h"

int main(void)
{
	uint16_t lid;
	struct ibv_context *c = open_first(&lid);
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *cq = pd ? ibv_create_cq(c, 16, NULL, NULL, 0) : NULL;
	static char buf[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!cq || !mr)
		die("setup");
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp || rc_connect(qp, qp->qp_num, lid, 0, 7))
		die("qp");
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(qp, &rwr, &bad))
		die("post_recv");
	printf("ready\n");
	fflush(stdout);

	struct pollfd p = {.fd = c->async_fd, .events = POLLIN};
	int n = poll(&p, 1, 30000);
	CHECK("the async fd turns readable when the daemon goes", n == 1, "poll %d", n);
	struct ibv_async_event ev = {0};
	int r = n == 1 ? ibv_get_async_event(c, &ev) : -1;
	CHECK("IBV_EVENT_DEVICE_FATAL", !r && ev.event_type == IBV_EVENT_DEVICE_FATAL, "r %d event %d", r,
	      ev.event_type);
	if (!r)
		ibv_ack_async_event(&ev);

	struct ibv_device_attr da;
	CHECK("ibv_query_device fails", ibv_query_device(c, &da) != 0, "succeeded");
	struct ibv_device_attr_ex dax;
	CHECK("ibv_query_device_ex fails", ibv_query_device_ex(c, NULL, &dax) != 0, "succeeded");
	struct ibv_port_attr pa;
	CHECK("ibv_query_port fails", ibv_query_port(c, 1, &pa) != 0, "succeeded");
	errno = 0;
	CHECK("ibv_alloc_pd fails", !ibv_alloc_pd(c) && errno, "errno %d", errno);
	errno = 0;
	CHECK("ibv_create_cq fails", !ibv_create_cq(c, 16, NULL, NULL, 0) && errno, "errno %d", errno);
	errno = 0;
	CHECK("ibv_reg_mr fails", !ibv_reg_mr(pd, buf + 64, 64, IBV_ACCESS_LOCAL_WRITE) && errno, "errno %d", errno);
	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad;
	int pr = ibv_post_send(qp, &swr, &sbad);
	struct ibv_wc wc;
	int polled = ibv_poll_cq(cq, 1, &wc);
	/* A post after the fatal error is refused, or completes in error: never a success. */
	CHECK("a send after the loss does not succeed",
	      pr != 0 || (polled >= 0 && (polled == 0 || wc.status != IBV_WC_SUCCESS)), "post %d poll %d status %d", pr,
	      polled, polled > 0 ? wc.status : -1);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK("ibv_query_qp fails", ibv_query_qp(qp, &qattr, IBV_QP_STATE, &qinit) != 0, "succeeded");
	CHECK("ibv_destroy_qp succeeds", !ibv_destroy_qp(qp), "errno %d", errno);
	CHECK("ibv_dereg_mr succeeds", !ibv_dereg_mr(mr), "errno %d", errno);
	CHECK("ibv_destroy_cq succeeds", !ibv_destroy_cq(cq), "errno %d", errno);
	CHECK("ibv_dealloc_pd succeeds", !ibv_dealloc_pd(pd), "errno %d", errno);
	CHECK("ibv_close_device succeeds", !ibv_close_device(c), "errno %d", errno);
	return failed;
}
