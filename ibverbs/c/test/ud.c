/* ud: a libibverbs program (built against the installed headers, run on
 * hcasim's libibverbs) that checks UD QPs as the kernel and mlx5 answer
 * them: the UD state machine (a Q_Key, no path), address handles on the
 * RoCE port, SEND and SEND with immediate with the 40-byte GRH (the IPv4
 * header of RoCEv2 in its last 20 bytes) at the head of the receive
 * buffer, src_qp and IBV_WC_GRH in the completion, the Q_Key rules (a
 * wrong one drops the datagram; a privileged one in a send means the QP's
 * own), a buffer too short and a message over the MTU, an AH made from a
 * completion to answer, and the ibv_wr_* API with ibv_wr_set_ud_addr.
 * Usage: ud [OWN]: OWN is the daemon's --roce IPv4 address (default
 * 127.0.0.1). It prints "ok NAME" or "FAIL NAME: why" per check and exits
 * 1 if any failed. ibverbs/baduse_test.go builds and runs it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "checks.h"

#define QKEY 0x11111111u
#define GRH 40

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t buf[3 * 8192];
static uint16_t lid;

static int ud_init(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
}

static int ud_ready(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x123;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static struct ibv_qp *ud_qp(void)
{
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2}};
	struct ibv_qp *q = ibv_create_qp(pd, &qa);
	if (!q || ud_init(q, QKEY) || ud_ready(q))
		die("UD QP");
	return q;
}

/* poll_for waits for a completion of wr_id; spins bounds the wait.
 * Completions of other WRs that come first are kept for their own
 * poll_for. */
static struct ibv_wc stash[64];
static int nstash;

static int poll_for(uint64_t wr_id, struct ibv_wc *out, long spins)
{
	for (int i = 0; i < nstash; i++)
		if (stash[i].wr_id == wr_id) {
			*out = stash[i];
			stash[i] = stash[--nstash];
			return 1;
		}
	for (long i = 0; i < spins; i++) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("poll");
		if (n == 1 && wc.wr_id == wr_id) {
			*out = wc;
			return 1;
		}
		if (n == 1 && nstash < 64)
			stash[nstash++] = wc;
	}
	return 0;
}

static int recv_at(struct ibv_qp *qp, uint64_t id, size_t off, uint32_t len)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &w, &bad);
}

static int send_to(struct ibv_qp *qp, uint64_t id, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, size_t off,
		   uint32_t len, int imm)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1,
				.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	w.imm_data = htonl(0xC0FFEE);
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = qpn;
	w.wr.ud.remote_qkey = qkey;
	return ibv_post_send(qp, &w, &bad);
}

/* net_raw reports whether this process holds CAP_NET_RAW. */
static int net_raw(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long cap = 0;
	int found = 0;
	while (f && !found && fgets(line, sizeof line, f))
		found = sscanf(line, "CapEff: %llx", &cap) == 1;
	if (f)
		fclose(f);
	return found && (cap >> 13 & 1);
}

int main(int argc, char **argv)
{
	const char *own = argc > 1 ? argv[1] : "127.0.0.1";
	ctx = open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !cq || !mr)
		die("pd, cq, mr");
	struct ibv_wc wc;

	/* The state machine. */
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *t = ibv_create_qp(pd, &qa);
	CHECK("create a UD QP", t && t->qp_type == IBV_QPT_UD, "errno %d", errno);
	if (!t)
		die("create");
	struct ibv_qp_attr x = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	int r = ibv_modify_qp(t, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
	CHECK("INIT without a Q_Key is EINVAL", r == EINVAL, "ret %d", r);
	r = ibv_modify_qp(t, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS);
	CHECK("INIT with access flags is EINVAL", r == EINVAL, "ret %d", r);
	x.qkey = 0x80000001u;
	r = ibv_modify_qp(t, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	CHECK("a privileged Q_Key needs CAP_NET_RAW", net_raw() ? r == 0 : r == EPERM, "ret %d, CAP_NET_RAW %d", r,
	      net_raw());
	if (r == 0) {
		struct ibv_qp_attr z = {.qp_state = IBV_QPS_RESET};
		if (ibv_modify_qp(t, &z, IBV_QP_STATE))
			die("reset");
	}
	r = ud_init(t, 0x2222);
	struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR, .dest_qp_num = 5};
	int r2 = ibv_modify_qp(t, &rtr, IBV_QP_STATE | IBV_QP_DEST_QPN);
	CHECK("INIT with a Q_Key; RTR with a remote QPN is EINVAL", r == 0 && r2 == EINVAL, "ret %d %d", r, r2);
	r = ud_ready(t);
	struct ibv_qp_attr qq;
	struct ibv_qp_init_attr qi;
	memset(&qq, 0, sizeof qq);
	int r3 = ibv_query_qp(t, &qq, IBV_QP_STATE | IBV_QP_QKEY, &qi);
	CHECK("RTR, RTS; query_qp reads the Q_Key back", r == 0 && r3 == 0 && qq.qp_state == IBV_QPS_RTS &&
								qq.qkey == 0x2222 && qi.qp_type == IBV_QPT_UD,
	      "ret %d %d state %d qkey %#x type %d", r, r3, qq.qp_state, qq.qkey, qi.qp_type);
	ibv_destroy_qp(t);

	struct ibv_qp_init_attr_ex xa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
					 .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	errno = 0;
	t = ibv_create_qp_ex(ctx, &xa);
	CHECK("UD send_ops_flags with RDMA_WRITE is EOPNOTSUPP", !t && errno == EOPNOTSUPP, "qp %p errno %d",
	      (void *)t, errno);

	/* Traffic between two UD QPs of this port. */
	struct ibv_qp *a = ud_qp(), *b = ud_qp();
	union ibv_gid g3;
	if (ibv_query_gid(ctx, 1, 3, &g3))
		die("query gid");
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = g3, .sgid_index = 3, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("create ah");
	for (size_t i = 0; i < 4096; i++)
		buf[i] = (uint8_t)(i * 13 + 7);

	if (recv_at(b, 100, 8192, GRH + 4096) || send_to(a, 1, ah, b->qp_num, QKEY, 0, 4096, 0))
		die("post");
	int s1 = poll_for(1, &wc, 20000000L);
	CHECK("a UD SEND of the MTU completes", s1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
	      "got %d status %s", s1, ibv_wc_status_str(wc.status));
	int r1 = poll_for(100, &wc, 20000000L);
	struct ibv_wc rw = wc;
	CHECK("the receive: GRH + payload, src_qp, IBV_WC_GRH",
	      r1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == GRH + 4096 &&
		      wc.src_qp == a->qp_num && (wc.wc_flags & IBV_WC_GRH) && wc.qp_num == b->qp_num &&
		      memcmp(buf + 8192 + GRH, buf, 4096) == 0,
	      "got %d status %s len %u src_qp %#x flags %#x", r1, ibv_wc_status_str(wc.status), wc.byte_len, wc.src_qp,
	      wc.wc_flags);
	const uint8_t *ip = buf + 8192 + 20;
	struct in_addr want;
	inet_pton(AF_INET, own, &want);
	CHECK("the GRH holds RoCEv2's IPv4 header", ip[0] == 0x45 && ip[9] == 17 && !memcmp(ip + 12, &want, 4) &&
							     !memcmp(ip + 16, &want, 4) && buf[8192] == 0,
	      "version %#x proto %u", ip[0], ip[9]);
	CHECK("the completion's SL is the RoCE packet type: UDP, IPv4 (0xA)", rw.sl == 0xA, "sl %#x", rw.sl);

	/* An AH made from the completion answers the sender. */
	struct ibv_ah *back = ibv_create_ah_from_wc(pd, &rw, (struct ibv_grh *)(buf + 8192), 1);
	CHECK("create_ah_from_wc", back != NULL, "errno %d", errno);
	struct ibv_ah_attr ba;
	r = ibv_init_ah_from_wc(ctx, 1, &rw, (struct ibv_grh *)(buf + 8192), &ba);
	CHECK("init_ah_from_wc: the sender's GID, source GID index 3", r == 0 && ba.is_global && ba.grh.sgid_index == 3 &&
									    !memcmp(&ba.grh.dgid, &g3, 16),
	      "ret %d global %d sgid %u", r, ba.is_global, ba.grh.sgid_index);
	struct ibv_wc nog = rw;
	nog.wc_flags &= ~(unsigned)IBV_WC_GRH;
	errno = 0;
	r = ibv_init_ah_from_wc(ctx, 1, &nog, (struct ibv_grh *)(buf + 8192), &ba);
	CHECK("init_ah_from_wc without a GRH fails", r != 0 && errno == EINVAL, "ret %d errno %d", r, errno);
	if (back) {
		if (recv_at(a, 101, 8192, GRH + 64) || send_to(b, 2, back, a->qp_num, QKEY, 0, 64, 1))
			die("post answer");
		int got = poll_for(101, &wc, 20000000L);
		CHECK("the answer: SEND with immediate", got && wc.status == IBV_WC_SUCCESS && wc.src_qp == b->qp_num &&
								 (wc.wc_flags & IBV_WC_WITH_IMM) &&
								 ntohl(wc.imm_data) == 0xC0FFEE && wc.byte_len == GRH + 64,
		      "got %d status %s flags %#x imm %#x", got, ibv_wc_status_str(wc.status), wc.wc_flags,
		      ntohl(wc.imm_data));
		poll_for(2, &wc, 20000000L);
		ibv_destroy_ah(back);
	}

	/* The GID types in sysfs, which UCX reads with open and read. */
	char ty[3][32];
	int terr = 0;
	for (int i = 0; i < 3; i++) {
		char path[96];
		snprintf(path, sizeof path, "/sys/class/infiniband/hcasim0/ports/1/gid_attrs/types/%d", i + 2);
		memset(ty[i], 0, sizeof ty[i]);
		errno = 0;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (read(fd, ty[i], sizeof ty[i] - 1) < 0)
				ty[i][0] = '?';
			close(fd);
		} else if (i == 2)
			terr = errno;
	}
	CHECK("sysfs gid_attrs/types: 2 is IB/RoCE v1, 3 RoCE v2, 4 (empty) EINVAL",
	      !strcmp(ty[0], "IB/RoCE v1\n") && !strcmp(ty[1], "RoCE v2\n") && terr == EINVAL, "%s|%s|errno %d", ty[0],
	      ty[1], terr);

	/* From a RoCE v1 GID (index 2, as UCX picks when it cannot read the
	 * GID types): the receive buffer holds a real GRH, an IPv6 header
	 * whose next header is the BTH (0x1B), whatever the GIDs; the AH made
	 * from it sends from the v1 entry again. */
	union ibv_gid g2;
	if (ibv_query_gid(ctx, 1, 2, &g2))
		die("query gid 2");
	struct ibv_ah_attr a1 = {.is_global = 1, .port_num = 1, .grh = {.dgid = g2, .sgid_index = 2, .hop_limit = 64}};
	struct ibv_ah *ah1 = ibv_create_ah(pd, &a1);
	if (!ah1)
		die("create ah v1");
	if (recv_at(b, 110, 8192, GRH + 64) || send_to(a, 10, ah1, b->qp_num, QKEY, 0, 64, 0))
		die("post v1");
	poll_for(10, &wc, 20000000L);
	int v1 = poll_for(110, &wc, 20000000L);
	const uint8_t *g = buf + 8192;
	CHECK("from a RoCE v1 GID: an IPv6 GRH, next header BTH, the v1 GIDs",
	      v1 && wc.status == IBV_WC_SUCCESS && (g[0] >> 4) == 6 && g[6] == 0x1B && !memcmp(g + 8, &g2, 16) &&
		      !memcmp(g + 24, &g2, 16) && (g[4] << 8 | g[5]) == 12 + 8 + 64 + 4,
	      "got %d status %s version %u next %#x len %u", v1, ibv_wc_status_str(wc.status), g[0] >> 4, g[6],
	      (g[4] << 8 | g[5]));
	memset(&ba, 0, sizeof ba);
	r = ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)g, &ba);
	CHECK("and the SL says a GRH without UDP (0)", wc.sl == 0, "sl %#x", wc.sl);
	CHECK("init_ah_from_wc of a RoCE v1 GRH: source GID index 2", r == 0 && ba.grh.sgid_index == 2 &&
									 !memcmp(&ba.grh.dgid, &g2, 16),
	      "ret %d errno %d sgid %u", r, errno, ba.grh.sgid_index);
	ibv_destroy_ah(ah1);

	/* A wrong Q_Key: dropped; the receive waits for the next datagram,
	 * which a privileged Q_Key in the send (the QP's own) delivers. */
	if (recv_at(b, 102, 8192, GRH + 64) || send_to(a, 3, ah, b->qp_num, 0x999, 0, 16, 0))
		die("post");
	int sent = poll_for(3, &wc, 20000000L);
	int early = poll_for(102, &wc, 2000000L);
	CHECK("a wrong Q_Key: the send completes, the datagram is dropped",
	      sent && !early, "send %d, receive %d (status %s)", sent, early, ibv_wc_status_str(wc.status));
	if (send_to(a, 4, ah, b->qp_num, 0x80000000u, 0, 16, 0))
		die("post");
	int got = poll_for(102, &wc, 20000000L);
	CHECK("a privileged Q_Key in the send means the QP's own", got && wc.status == IBV_WC_SUCCESS &&
									  wc.byte_len == GRH + 16,
	      "got %d status %s len %u", got, ibv_wc_status_str(wc.status), wc.byte_len);
	poll_for(4, &wc, 20000000L);

	/* A receive buffer too short for GRH + payload: dropped, the WQE
	 * waits; a datagram that fits then takes it. */
	if (recv_at(b, 103, 8192, GRH + 8) || send_to(a, 5, ah, b->qp_num, QKEY, 0, 100, 0))
		die("post");
	poll_for(5, &wc, 20000000L);
	early = poll_for(103, &wc, 2000000L);
	if (send_to(a, 6, ah, b->qp_num, QKEY, 0, 8, 0))
		die("post");
	got = !early && poll_for(103, &wc, 20000000L);
	CHECK("a buffer too short drops the datagram; the next that fits takes it",
	      got && wc.status == IBV_WC_SUCCESS && wc.byte_len == GRH + 8, "early %d got %d len %u", early, got,
	      wc.byte_len);
	poll_for(6, &wc, 20000000L);

	/* The wr_* API with ibv_wr_set_ud_addr. */
	struct ibv_qp_init_attr_ex ea = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
					 .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *e = ibv_create_qp_ex(ctx, &ea);
	if (!e || ud_init(e, QKEY) || ud_ready(e))
		die("extended UD QP");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(e);
	if (recv_at(b, 104, 8192, GRH + 256))
		die("post");
	ibv_wr_start(qx);
	qx->wr_id = 7;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htonl(0xABCD));
	ibv_wr_set_ud_addr(qx, ah, b->qp_num, QKEY);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 256);
	r = ibv_wr_complete(qx);
	int ws = r == 0 && poll_for(7, &wc, 20000000L) && wc.status == IBV_WC_SUCCESS;
	got = poll_for(104, &wc, 20000000L);
	CHECK("ibv_wr_send_imm + ibv_wr_set_ud_addr", ws && got && wc.src_qp == e->qp_num && ntohl(wc.imm_data) == 0xABCD &&
							      memcmp(buf + 8192 + GRH, buf, 256) == 0,
	      "complete %d send %d recv %d src %#x", r, ws, got, wc.src_qp);
	ibv_destroy_qp(e);

	/* Bad posts: an RDMA WRITE, no AH. */
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = 8, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad = NULL;
	w.wr.ud.ah = ah;
	r = ibv_post_send(a, &w, &bad);
	CHECK("an RDMA WRITE on a UD QP is EINVAL", r == EINVAL && bad == &w, "ret %d", r);
	w.opcode = IBV_WR_SEND;
	w.wr.ud.ah = NULL;
	r = ibv_post_send(a, &w, &bad);
	CHECK("a UD SEND without an AH is EINVAL", r == EINVAL, "ret %d", r);

	/* Over the MTU: a local length error. */
	if (send_to(a, 9, ah, b->qp_num, QKEY, 0, 8192, 0))
		die("post");
	got = poll_for(9, &wc, 20000000L);
	CHECK("a UD SEND over the MTU: IBV_WC_LOC_LEN_ERR", got && wc.status == IBV_WC_LOC_LEN_ERR, "got %d status %s",
	      got, ibv_wc_status_str(wc.status));

	ibv_destroy_ah(ah);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
