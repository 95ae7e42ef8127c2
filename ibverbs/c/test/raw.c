/* raw: a libibverbs program (built against the installed headers, run on
 * hcasim's libibverbs) that checks raw packet QPs and flow steering as the
 * kernel and mlx5 answer them: CAP_NET_RAW, the raw state machine (the
 * port, nothing of a transport), frames sent with ibv_post_send (the
 * header split across SGEs, and inline) and with the ibv_wr_* API, the
 * frames a flow's specs take and those they do not, EBUSY for a QP with
 * a flow, and the errors of specs, opcodes and flags mlx5 refuses; and
 * receive-side scaling: work queues, an indirection table and an RSS QP
 * spreading frames from many sources over the work queues, with the
 * kernel's EBUSY for objects in use.
 * It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any
 * failed. ibverbs/baduse_test.go builds and runs it. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "checks.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t buf[4 * 4096];
static const uint8_t group[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};

#define RX_OFF (2 * 4096)

/* wait_wc waits for a completion of wr_id; completions of other WRs that
 * come first are kept for their own wait. */
static struct ibv_wc stash[32];
static int nstash;

static int wait_wc(uint64_t wr_id, struct ibv_wc *out)
{
	for (int i = 0; i < nstash; i++)
		if (stash[i].wr_id == wr_id) {
			*out = stash[i];
			stash[i] = stash[--nstash];
			return 1;
		}
	for (long i = 0; i < 20000000; i++) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("poll");
		if (n == 1 && wc.wr_id == wr_id) {
			*out = wc;
			return 1;
		}
		if (n == 1 && nstash < 32)
			stash[nstash++] = wc;
	}
	return 0;
}

static int to_rts(struct ibv_qp *q)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PORT))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(q, &a, IBV_QP_STATE);
}

static struct ibv_qp *raw_qp(void)
{
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 3, .max_recv_sge = 1,
					      .max_inline_data = 128}};
	struct ibv_qp *q = ibv_create_qp(pd, &qa);
	if (!q || to_rts(q))
		die("raw packet QP");
	return q;
}

/* frame writes an Ethernet/IPv4/UDP frame of n bytes to dst from UDP port
 * sport at buf+off. */
static void frame(size_t off, const uint8_t dst[6], uint16_t sport, size_t n, uint8_t seed)
{
	uint8_t *f = buf + off;
	for (size_t i = 0; i < n; i++)
		f[i] = (uint8_t)(seed + i * 7);
	memcpy(f, dst, 6);
	memcpy(f + 6, "\x24\x8a\x07\xa5\x28\xc8", 6);
	f[12] = 0x08, f[13] = 0x00;
	f[14] = 0x45, f[23] = 17;
	f[34] = (uint8_t)(sport >> 8), f[35] = (uint8_t)sport;
}

static int post_frame(struct ibv_qp *q, uint64_t id, struct ibv_sge *sg, int n, unsigned flags)
{
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = sg, .num_sge = n, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | flags},
			   *bad;
	return ibv_post_send(q, &wr, &bad);
}

static void post_rx(struct ibv_qp *q, uint64_t id, size_t off)
{
	struct ibv_sge s = {.addr = (uintptr_t)(buf + off), .length = 4096, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	if (ibv_post_recv(q, &wr, &bad))
		die("post recv");
}

/* The flow: an ETH spec (group MAC, IPv4) and a UDP spec (source port 1234). */
struct eth_udp_flow {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
	struct ibv_flow_spec_tcp_udp udp;
};

static struct ibv_flow *eth_udp_flow(struct ibv_qp *q)
{
	struct eth_udp_flow f = {
		.attr = {.type = IBV_FLOW_ATTR_NORMAL, .size = sizeof f, .num_of_specs = 2, .port = 1},
		.eth = {.type = IBV_FLOW_SPEC_ETH, .size = sizeof f.eth},
		.udp = {.type = IBV_FLOW_SPEC_UDP, .size = sizeof f.udp},
	};
	memcpy(f.eth.val.dst_mac, group, 6);
	memset(f.eth.mask.dst_mac, 0xff, 6);
	f.eth.val.ether_type = htons(0x0800);
	f.eth.mask.ether_type = 0xffff;
	f.udp.val.src_port = htons(1234);
	f.udp.mask.src_port = 0xffff;
	return ibv_create_flow(q, &f.attr);
}

/* sent checks that the send of id completed successfully. */
static void sent(const char *name, uint64_t id)
{
	struct ibv_wc wc;
	int got = wait_wc(id, &wc);
	CHECK(name, got && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "got %d status %s", got,
	      got ? ibv_wc_status_str(wc.status) : "-");
}

/* received checks that receive id holds the n-byte frame at buf+off. */
static void received(const char *name, struct ibv_qp *rx, uint64_t id, size_t rx_off, size_t off, size_t n)
{
	struct ibv_wc wc;
	int got = wait_wc(id, &wc);
	CHECK(name,
	      got && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == n &&
		      wc.qp_num == rx->qp_num && !(wc.wc_flags & IBV_WC_GRH) && !memcmp(buf + rx_off, buf + off, n),
	      "got %d status %s len %u", got, got ? ibv_wc_status_str(wc.status) : "-", got ? wc.byte_len : 0);
}

static void traffic(void)
{
	struct ibv_qp *tx = raw_qp(), *rx = raw_qp();
	struct ibv_flow *fl = eth_udp_flow(rx);
	CHECK("create flow", fl != NULL, "errno %d", errno);
	if (!fl)
		return;
	post_rx(rx, 100, RX_OFF);
	post_rx(rx, 101, RX_OFF + 4096);
	frame(0, (const uint8_t[6]){0x02, 1, 2, 3, 4, 5}, 1234, 64, 1); /* another MAC */
	frame(1024, group, 999, 64, 2);					  /* another port */
	frame(2048, group, 1234, 1000, 3);
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	CHECK("post a frame to another MAC", !post_frame(tx, 1, &s, 1, 0), "errno %d", errno);
	s.addr = (uintptr_t)(buf + 1024);
	CHECK("post a frame to another port", !post_frame(tx, 2, &s, 1, 0), "errno %d", errno);
	/* The header split over three SGEs: 10, 20 and the rest. */
	struct ibv_sge three[3] = {{(uintptr_t)(buf + 2048), 10, mr->lkey},
				   {(uintptr_t)(buf + 2058), 20, mr->lkey},
				   {(uintptr_t)(buf + 2078), 1000 - 30, mr->lkey}};
	CHECK("post a matching frame in three SGEs", !post_frame(tx, 3, three, 3, 0), "errno %d", errno);
	sent("frame to another MAC sent", 1);
	sent("frame to another port sent", 2);
	sent("matching frame sent", 3);
	received("only the matching frame taken", rx, 100, RX_OFF, 2048, 1000);
	/* Inline: the whole frame in the WQE. */
	frame(3072, group, 1234, 100, 4);
	s = (struct ibv_sge){.addr = (uintptr_t)(buf + 3072), .length = 100, .lkey = 0};
	CHECK("post an inline frame", !post_frame(tx, 4, &s, 1, IBV_SEND_INLINE), "errno %d", errno);
	sent("inline frame sent", 4);
	received("inline frame received", rx, 101, RX_OFF + 4096, 3072, 100);
	/* The ibv_wr_* API. */
	struct ibv_qp_init_attr_ex qx = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd, .send_ops_flags = IBV_QP_EX_WITH_SEND,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *xq = ibv_create_qp_ex(ctx, &qx);
	CHECK("create a raw QP with send ops", xq && !to_rts(xq), "errno %d", errno);
	if (xq) {
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(xq);
		post_rx(rx, 102, RX_OFF);
		frame(1024, group, 1234, 200, 5);
		ibv_wr_start(x);
		x->wr_id = 5;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(x);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(buf + 1024), 200);
		CHECK("ibv_wr_send of a frame", !ibv_wr_complete(x), "errno %d", errno);
		sent("ibv_wr frame sent", 5);
		received("ibv_wr frame received", rx, 102, RX_OFF, 1024, 200);
		ibv_wr_start(x);
		ibv_wr_rdma_write(x, 1, 0);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 64);
		CHECK("ibv_wr_rdma_write on a raw QP fails", ibv_wr_complete(x) != 0, "completed");
		ibv_destroy_qp(xq);
	}
	/* Posts mlx5 refuses. */
	s = (struct ibv_sge){.addr = (uintptr_t)buf, .length = 17, .lkey = mr->lkey};
	CHECK("a frame shorter than the inline header: EINVAL", post_frame(tx, 6, &s, 1, 0) == EINVAL, "posted");
	s.length = 64;
	CHECK("IBV_SEND_IP_CSUM without the cap: EINVAL", post_frame(tx, 7, &s, 1, IBV_SEND_IP_CSUM) == EINVAL,
	      "posted");
	struct ibv_send_wr w = {.wr_id = 8, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM}, *bad;
	CHECK("SEND with immediate on a raw QP: EINVAL", ibv_post_send(tx, &w, &bad) == EINVAL, "posted");
	errno = 0;
	CHECK("destroy a QP with a flow: EBUSY", ibv_destroy_qp(rx) == EBUSY, "errno %d", errno);
	CHECK("destroy the flow", !ibv_destroy_flow(fl), "errno %d", errno);
	CHECK("destroy the QP then", !ibv_destroy_qp(rx), "errno %d", errno);
	ibv_destroy_qp(tx);
}

static void bad_flows(void)
{
	struct ibv_qp *q = raw_qp();
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
	} f = {
		.attr = {.type = IBV_FLOW_ATTR_NORMAL, .size = sizeof f, .num_of_specs = 1, .port = 1},
		.eth = {.type = IBV_FLOW_SPEC_ETH, .size = sizeof f.eth},
	};
	f.eth.type = IBV_FLOW_SPEC_MPLS;
	errno = 0;
	CHECK("an MPLS spec: EOPNOTSUPP", !ibv_create_flow(q, &f.attr) && errno == EOPNOTSUPP, "errno %d", errno);
	f.eth.type = (enum ibv_flow_spec_type)0x77;
	errno = 0;
	CHECK("an unknown spec: EINVAL", !ibv_create_flow(q, &f.attr) && errno == EINVAL, "errno %d", errno);
	f.eth.type = IBV_FLOW_SPEC_ETH;
	f.eth.size = 8;
	errno = 0;
	CHECK("a spec shorter than its struct: EINVAL", !ibv_create_flow(q, &f.attr) && errno == EINVAL, "errno %d",
	      errno);
	f.eth.size = sizeof f.eth;
	f.attr.port = 2;
	errno = 0;
	CHECK("port 2: EINVAL", !ibv_create_flow(q, &f.attr) && errno == EINVAL, "errno %d", errno);
	f.attr.port = 1;
	f.attr.type = IBV_FLOW_ATTR_SNIFFER;
	errno = 0;
	CHECK("a sniffer with specs: EINVAL", !ibv_create_flow(q, &f.attr) && errno == EINVAL, "errno %d", errno);
	f.attr.num_of_specs = 0;
	struct ibv_flow *sn = ibv_create_flow(q, &f.attr);
	CHECK("a sniffer", sn != NULL, "errno %d", errno);
	if (sn)
		ibv_destroy_flow(sn);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *rc = ibv_create_qp(pd, &qa);
	f.attr.type = IBV_FLOW_ATTR_NORMAL;
	errno = 0;
	CHECK("a flow on an RC QP: EOPNOTSUPP", rc && !ibv_create_flow(rc, &f.attr) && errno == EOPNOTSUPP,
	      "errno %d", errno);
	ibv_destroy_qp(rc);
	/* The raw state machine: the port is required, a Q_Key is not taken. */
	struct ibv_qp_init_attr ra = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *r = ibv_create_qp(pd, &ra);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 1};
	CHECK("RESET to INIT without the port: EINVAL", r && ibv_modify_qp(r, &a, IBV_QP_STATE) == EINVAL, "accepted");
	CHECK("RESET to INIT with a Q_Key: EINVAL",
	      r && ibv_modify_qp(r, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_QKEY) == EINVAL, "accepted");
	CHECK("RESET to INIT with the port", r && !ibv_modify_qp(r, &a, IBV_QP_STATE | IBV_QP_PORT), "errno %d",
	      errno);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	ra.srq = srq;
	errno = 0;
	CHECK("a raw QP on an SRQ: EINVAL", srq && !ibv_create_qp(pd, &ra) && errno == EINVAL, "errno %d", errno);
	if (srq)
		ibv_destroy_srq(srq);
	if (r)
		ibv_destroy_qp(r);
	ibv_destroy_qp(q);
}

static void rss(void)
{
	struct ibv_wq *wqs[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 16, .max_sge = 1, .pd = pd, .cq = cq};
		wqs[i] = ibv_create_wq(ctx, &wa);
		struct ibv_wq_attr m = {.attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY};
		CHECK("create a work queue and make it ready", wqs[i] && !ibv_modify_wq(wqs[i], &m), "errno %d", errno);
		if (!wqs[i])
			return;
		for (int k = 0; k < 16; k++) {
			struct ibv_sge sg = {.addr = (uintptr_t)(buf + RX_OFF + (i * 16 + k) * 128), .length = 128,
					     .lkey = mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = 1000 + i * 16 + k, .sg_list = &sg, .num_sge = 1}, *bad;
			if (ibv_post_wq_recv(wqs[i], &wr, &bad))
				die("post wq recv");
		}
	}
	struct ibv_rwq_ind_table_init_attr ta = {.log_ind_tbl_size = 1, .ind_tbl = wqs};
	struct ibv_rwq_ind_table *tbl = ibv_create_rwq_ind_table(ctx, &ta);
	CHECK("create an indirection table", tbl != NULL, "errno %d", errno);
	if (!tbl)
		return;
	CHECK("destroy a work queue in a table: EBUSY", ibv_destroy_wq(wqs[0]) == EBUSY, "destroyed");
	uint8_t key[40];
	for (int i = 0; i < 40; i++)
		key[i] = (uint8_t)(0x6d + i * 37);
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_RAW_PACKET,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
		.pd = pd,
		.rwq_ind_tbl = tbl,
		.rx_hash_conf = {.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ, .rx_hash_key_len = 40, .rx_hash_key = key,
				 .rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4}};
	struct ibv_qp *rq = ibv_create_qp_ex(ctx, &qa);
	CHECK("create an RSS QP", rq != NULL, "errno %d", errno);
	if (!rq)
		return;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK("modify an RSS QP: EOPNOTSUPP", ibv_modify_qp(rq, &a, IBV_QP_STATE | IBV_QP_PORT) == EOPNOTSUPP,
	      "modified");
	struct ibv_recv_wr rw = {.wr_id = 1}, *rbad;
	CHECK("post a receive to an RSS QP: ENOMEM", ibv_post_recv(rq, &rw, &rbad) == ENOMEM, "posted");
	CHECK("destroy a table an RSS QP uses: EBUSY", ibv_destroy_rwq_ind_table(tbl) == EBUSY, "destroyed");
	struct ibv_flow *fl = eth_udp_flow(rq);
	CHECK("a flow on the RSS QP", fl != NULL, "errno %d", errno);
	struct ibv_qp *tx = raw_qp();
	int per[2] = {0, 0}, bad_wq = 0;
	for (int k = 0; k < 16; k++) {
		frame(0, group, 1234, 64, (uint8_t)k);
		buf[26] = (uint8_t)(10 + k), buf[27] = (uint8_t)(k * 3); /* the source IPv4 address */
		struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
		if (post_frame(tx, 2000 + k, &s, 1, 0))
			die("post frame");
		struct ibv_wc wc;
		if (!wait_wc(2000 + k, &wc) || wc.status != IBV_WC_SUCCESS)
			die("send frame");
	}
	for (int k = 0; k < 16; k++) {
		struct ibv_wc wc;
		int got = 0;
		if (nstash) /* kept while the sends were awaited */
			wc = stash[--nstash], got = 1;
		for (long spin = 0; spin < 20000000 && !got; spin++)
			got = ibv_poll_cq(cq, 1, &wc);
		if (got != 1 || wc.status != IBV_WC_SUCCESS || wc.byte_len != 64) {
			bad_wq++;
			continue;
		}
		if (wc.qp_num == wqs[0]->wq_num)
			per[0]++;
		else if (wc.qp_num == wqs[1]->wq_num)
			per[1]++;
		else
			bad_wq++;
	}
	CHECK("16 frames from 16 sources spread over both work queues", !bad_wq && per[0] + per[1] == 16 && per[0] && per[1],
	      "%d and %d, %d bad", per[0], per[1], bad_wq);
	ibv_destroy_flow(fl);
	ibv_destroy_qp(tx);
	CHECK("destroy the RSS QP", !ibv_destroy_qp(rq), "errno %d", errno);
	CHECK("destroy the table then", !ibv_destroy_rwq_ind_table(tbl), "errno %d", errno);
	for (int i = 0; i < 2; i++)
		CHECK("destroy a work queue then", !ibv_destroy_wq(wqs[i]), "errno %d", errno);
}

int main(void)
{
	uint16_t lid;
	ctx = open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = pd && cq ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		die("pd, cq, mr");
	if (geteuid() != 0) {
		struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
					      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
		errno = 0;
		CHECK("a raw QP without CAP_NET_RAW: EPERM", !ibv_create_qp(pd, &qa) && errno == EPERM, "errno %d", errno);
		return failed;
	}
	traffic();
	bad_flows();
	rss();
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
