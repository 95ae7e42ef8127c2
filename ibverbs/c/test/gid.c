/* gid: a libibverbs program (built against the installed headers and
 * libibverbs, run on hcasim's) that checks the port's GID table and a QP's
 * path as ibv_query_qp reads it back. Usage: gid OWN [PEER]: OWN is the
 * daemon's --roce IPv4 address, or "none" for a daemon without a wire
 * (then GID 0 is fe80:: and the node GUID); PEER another daemon's address,
 * used as a QP's remote GID (no traffic goes to it). It prints "ok NAME" or
 * "FAIL NAME: why" per check and exits 1 if any failed.
 * ibverbs/roce_test.go builds and runs it. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "checks.h"

/* The provider-private query (IBVERBS_PRIVATE_34; driver.h is not
 * installed): enum ibv_gid_type_sysfs, 0 IB / RoCE v1, 1 RoCE v2. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type);

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint16_t lid;

/* mapped returns the IPv4-mapped GID of a dotted address. */
static union ibv_gid mapped(const char *ip)
{
	union ibv_gid g;
	memset(&g, 0, sizeof g);
	g.raw[10] = g.raw[11] = 0xff;
	if (inet_pton(AF_INET, ip, g.raw + 12) != 1) {
		printf("FAIL setup: %s is not an IPv4 address\n", ip);
		exit(1);
	}
	return g;
}

static struct ibv_qp *make_qp(void)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *q = ibv_create_qp(pd, &ia);
	if (!q)
		die("create qp");
	return q;
}

/* to_rtr moves qp through INIT to RTR toward dest at path mtu, with a
 * global route to dgid when dgid is not NULL. */
static int to_rtr(struct ibv_qp *qp, uint32_t dest, enum ibv_mtu mtu, const union ibv_gid *dgid)
{
	return rc_to_rtr(qp, dest, lid, dgid, mtu, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

static int to_rts(struct ibv_qp *qp) { return rc_to_rts(qp, 2); }

/* path reads back a QP's path MTU and route. */
static int path(struct ibv_qp *qp, struct ibv_qp_attr *a)
{
	struct ibv_qp_init_attr ia;
	memset(a, 0, sizeof *a);
	return ibv_query_qp(qp, a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV, &ia);
}

/* send_8k SENDs buf's first 8 KiB from qs to a receive of qr into its
 * second 8 KiB and waits for both completions; it returns how many came,
 * *bad how many of them failed. */
static int send_8k(struct ibv_qp *qs, struct ibv_qp *qr, char *buf, struct ibv_mr *mr, int *bad)
{
	struct ibv_sge rs = {.addr = (uintptr_t)buf + 8192, .length = 8192, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = 8192, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	if (ibv_post_recv(qr, &rw, &rbad) || ibv_post_send(qs, &sw, &sbad))
		die("post");
	int got = 0;
	*bad = 0;
	for (long spins = 0; got < 2 && spins < 200000000L; spins++) {
		struct ibv_wc wc;
		int k = ibv_poll_cq(cq, 1, &wc);
		if (k < 0)
			die("poll");
		if (k == 1) {
			got++;
			if (wc.status != IBV_WC_SUCCESS)
				(*bad)++;
		}
	}
	return got;
}

static const char *gidstr(const union ibv_gid *g)
{
	static char s[2][INET6_ADDRSTRLEN];
	static int i;
	i ^= 1;
	inet_ntop(AF_INET6, g->raw, s[i], sizeof s[i]);
	return s[i];
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: gid OWN|none [PEER]\n");
		return 2;
	}
	int wire = strcmp(argv[1], "none") != 0;
	ctx = open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd, cq");

	/* The GID table of a RoCE port: link-local v1 and v2, then the
	 * IPv4-mapped address (the wire's, else 127.0.0.1) v1 and v2. */
	union ibv_gid want[4];
	memset(want, 0, sizeof want);
	want[0].global.subnet_prefix = htobe64(0xfe80000000000000ULL);
	want[0].global.interface_id = ibv_get_device_guid(ctx->device);
	want[1] = want[0];
	want[2] = want[3] = mapped(wire ? argv[1] : "127.0.0.1");
	union ibv_gid g0;
	for (int i = 0; i < 4; i++) {
		union ibv_gid g;
		memset(&g, 0xAA, sizeof g);
		int r = ibv_query_gid(ctx, 1, i, &g);
		char name[64];
		snprintf(name, sizeof name, "query_gid %d", i);
		CHECK(name, r == 0 && memcmp(&g, &want[i], sizeof g) == 0, "ret %d, GID %s, want %s", r, gidstr(&g),
		      gidstr(&want[i]));
		struct ibv_gid_entry e;
		memset(&e, 0, sizeof e);
		r = ibv_query_gid_ex(ctx, 1, i, &e, 0);
		unsigned wtype = i & 1 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
		snprintf(name, sizeof name, "query_gid_ex %d", i);
		CHECK(name, r == 0 && memcmp(&e.gid, &want[i], sizeof e.gid) == 0 && e.gid_type == wtype &&
				    e.gid_index == (uint32_t)i && e.port_num == 1,
		      "ret %d, GID %s type %u", r, gidstr(&e.gid), e.gid_type);
		int type = -1;
		r = ibv_query_gid_type(ctx, 1, (unsigned)i, &type);
		snprintf(name, sizeof name, "query_gid_type %d", i);
		CHECK(name, r == 0 && type == (i & 1), "ret %d, type %d", r, type);
	}
	g0 = want[3];
	union ibv_gid g4;
	memset(&g4, 0xAA, sizeof g4);
	int r = ibv_query_gid(ctx, 1, 4, &g4);
	CHECK("query_gid 4 is empty", r == 0 && g4.global.subnet_prefix == 0 && g4.global.interface_id == 0,
	      "ret %d, GID %s", r, gidstr(&g4));
	struct ibv_gid_entry e;
	r = ibv_query_gid_ex(ctx, 1, 4, &e, 0);
	CHECK("query_gid_ex 4 is ENODATA", r == ENODATA, "ret %d", r);
	r = ibv_query_gid_ex(ctx, 1, 1000, &e, 0);
	CHECK("query_gid_ex past the table is EINVAL", r == EINVAL, "ret %d", r);
	struct ibv_gid_entry tab[8];
	ssize_t n = ibv_query_gid_table(ctx, tab, 8, 0);
	CHECK("query_gid_table: 4 entries", n == 4 && memcmp(&tab[3].gid, &want[3], sizeof want[3]) == 0 &&
						    tab[3].gid_type == IBV_GID_TYPE_ROCE_V2 && tab[0].gid_type == IBV_GID_TYPE_ROCE_V1,
	      "ret %zd", n);
	n = ibv_query_gid_table(ctx, tab, 2, 0);
	CHECK("query_gid_table into a short array", n < 0, "ret %zd", n);
	int type = -1;
	r = ibv_query_gid_type(ctx, 1, 4, &type);
	CHECK("query_gid_type of an empty entry", r == 0 && type == 0, "ret %d, type %d", r, type);
	errno = 0;
	r = ibv_query_gid_type(ctx, 1, 1000, &type);
	CHECK("query_gid_type past the table", r == -1 && errno == EINVAL, "ret %d, errno %d", r, errno);
	struct ibv_port_attr pa;
	r = ibv_query_port(ctx, 1, &pa);
	CHECK("a RoCE port: link layer Ethernet, LID 0, IP-based GIDs",
	      r == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.lid == 0 &&
		      (pa.port_cap_flags & IBV_PORT_IP_BASED_GIDS) && pa.gid_tbl_len >= 4,
	      "ret %d, link layer %d, LID %u, flags %#x", r, pa.link_layer, pa.lid, pa.port_cap_flags);

	/* Address vectors on RoCE need a global route with a real source
	 * GID, in a QP's path and in an AH. */
	{
		struct ibv_qp *q = make_qp();
		struct ibv_qp_attr x = {.qp_state = IBV_QPS_INIT, .port_num = 1};
		if (ibv_modify_qp(q, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("init");
		int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = q->qp_num,
					  .ah_attr = {.dlid = 1, .port_num = 1}, .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
		errno = 0;
		r = ibv_modify_qp(q, &rtr, mask);
		CHECK("RTR without a GRH is EINVAL", r == EINVAL, "ret %d", r);
		rtr.ah_attr.is_global = 1;
		rtr.ah_attr.grh.dgid = g0;
		rtr.ah_attr.grh.sgid_index = 4;
		r = ibv_modify_qp(q, &rtr, mask);
		CHECK("RTR from an empty source GID is ENODATA", r == ENODATA, "ret %d", r);
		rtr.ah_attr.grh.sgid_index = 200;
		r = ibv_modify_qp(q, &rtr, mask);
		CHECK("RTR from a source GID past the table is EINVAL", r == EINVAL, "ret %d", r);
		struct ibv_qp_attr qa0;
		struct ibv_qp_init_attr qia;
		r = ibv_query_qp(q, &qa0, IBV_QP_STATE, &qia);
		CHECK("the refused QP stays in INIT", r == 0 && qa0.qp_state == IBV_QPS_INIT, "state %d", qa0.qp_state);
		ibv_destroy_qp(q);

		struct ibv_ah_attr ah = {.dlid = 1, .port_num = 1};
		errno = 0;
		struct ibv_ah *h = ibv_create_ah(pd, &ah);
		CHECK("create_ah without a GRH is EINVAL", !h && errno == EINVAL, "ah %p errno %d", (void *)h, errno);
		ah.is_global = 1;
		ah.grh.dgid = g0;
		ah.grh.sgid_index = 3;
		ah.grh.hop_limit = 64;
		h = ibv_create_ah(pd, &ah);
		CHECK("create_ah with a GRH", h != NULL, "errno %d", errno);
		if (h)
			ibv_destroy_ah(h);
	}

	/* Two QPs of this port connected with a global route to the port's
	 * own GID: the device's fabric carries them (not the wire), at the
	 * path MTU set; query_qp reads the path back. */
	struct ibv_qp *qa = make_qp(), *qb = make_qp();
	if (to_rtr(qa, qb->qp_num, IBV_MTU_2048, &g0) || to_rtr(qb, qa->qp_num, IBV_MTU_2048, &g0) || to_rts(qa) ||
	    to_rts(qb))
		die("connect to the own GID");
	struct ibv_qp_attr a;
	r = path(qa, &a);
	CHECK("query_qp: path MTU and own GID", r == 0 && a.path_mtu == IBV_MTU_2048 && a.ah_attr.is_global &&
						       memcmp(&a.ah_attr.grh.dgid, &g0, sizeof g0) == 0 &&
						       a.qp_state == IBV_QPS_RTS,
	      "ret %d, MTU %d, global %d, GID %s, state %d", r, a.path_mtu, a.ah_attr.is_global,
	      gidstr(&a.ah_attr.grh.dgid), a.qp_state);
	static char buf[16384];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("reg mr");
	for (size_t i = 0; i < 8192; i++)
		buf[i] = (char)(i * 7 + 1);
	int bad, got = send_8k(qa, qb, buf, mr, &bad);
	CHECK("SEND over the own GID", got == 2 && !bad && memcmp(buf, buf + 8192, 8192) == 0, "%d completions, %d bad",
	      got, bad);

	/* Two QPs connected over the link-local RoCE v2 GID (index 1): this
	 * port's fabric too, with a wire or without. */
	struct ibv_qp *qc = make_qp(), *qe = make_qp();
	if (to_rtr(qc, qe->qp_num, IBV_MTU_1024, &want[1]) || to_rtr(qe, qc->qp_num, IBV_MTU_1024, &want[1]) ||
	    to_rts(qc) || to_rts(qe))
		die("connect over the link-local GID");
	memset(buf + 8192, 0, 8192);
	got = send_8k(qc, qe, buf, mr, &bad);
	CHECK("SEND over the link-local GID", got == 2 && !bad && memcmp(buf, buf + 8192, 8192) == 0,
	      "%d completions, %d bad", got, bad);
	ibv_destroy_qp(qe);

	/* A QP toward another host's GID (RTR only: nothing is sent). */
	if (argc > 2) {
		union ibv_gid peer = mapped(argv[2]);
		struct ibv_qp *qd = make_qp();
		if (to_rtr(qd, 0x123, IBV_MTU_512, &peer))
			die("RTR toward the peer");
		r = path(qd, &a);
		CHECK("query_qp: path toward the peer", r == 0 && a.path_mtu == IBV_MTU_512 && a.ah_attr.is_global &&
								 memcmp(&a.ah_attr.grh.dgid, &peer, sizeof peer) == 0,
		      "ret %d, MTU %d, global %d, GID %s", r, a.path_mtu, a.ah_attr.is_global,
		      gidstr(&a.ah_attr.grh.dgid));
		/* Back to RESET: the device forgets the path; RTR again anew. */
		struct ibv_qp_attr x = {.qp_state = IBV_QPS_RESET};
		if (ibv_modify_qp(qd, &x, IBV_QP_STATE) || to_rtr(qd, 0x123, IBV_MTU_4096, NULL))
			die("reset and RTR again");
		r = path(qd, &a);
		CHECK("query_qp: a new path after RESET", r == 0 && a.path_mtu == IBV_MTU_4096 && a.ah_attr.is_global &&
								  memcmp(&a.ah_attr.grh.dgid, &g0, sizeof g0) == 0,
		      "ret %d, MTU %d, global %d, GID %s", r, a.path_mtu, a.ah_attr.is_global, gidstr(&a.ah_attr.grh.dgid));
		ibv_destroy_qp(qd);
	}
	ibv_destroy_qp(qc);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
