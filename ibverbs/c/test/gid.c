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

	/* The GID table. */
	union ibv_gid g0, want;
	memset(&want, 0, sizeof want);
	if (wire) {
		want = mapped(argv[1]);
	} else {
		want.global.subnet_prefix = htobe64(0xfe80000000000000ULL);
		want.global.interface_id = ibv_get_device_guid(ctx->device);
	}
	int r = ibv_query_gid(ctx, 1, 0, &g0);
	CHECK("query_gid 0", r == 0 && memcmp(&g0, &want, sizeof g0) == 0, "ret %d, GID %s, want %s", r, gidstr(&g0),
	      gidstr(&want));
	union ibv_gid g1;
	memset(&g1, 0xAA, sizeof g1);
	r = ibv_query_gid(ctx, 1, 1, &g1);
	CHECK("query_gid 1 is empty", r == 0 && g1.global.subnet_prefix == 0 && g1.global.interface_id == 0,
	      "ret %d, GID %s", r, gidstr(&g1));
	struct ibv_gid_entry e;
	memset(&e, 0, sizeof e);
	r = ibv_query_gid_ex(ctx, 1, 0, &e, 0);
	unsigned wtype = wire ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB;
	CHECK("query_gid_ex 0", r == 0 && memcmp(&e.gid, &want, sizeof want) == 0 && e.gid_type == wtype &&
					e.gid_index == 0 && e.port_num == 1,
	      "ret %d, GID %s type %u, want %s type %u", r, gidstr(&e.gid), e.gid_type, gidstr(&want), wtype);
	r = ibv_query_gid_ex(ctx, 1, 1, &e, 0);
	CHECK("query_gid_ex 1 is ENODATA", r == ENODATA, "ret %d", r);
	struct ibv_gid_entry tab[4];
	ssize_t n = ibv_query_gid_table(ctx, tab, 4, 0);
	CHECK("query_gid_table", n == 1 && memcmp(&tab[0].gid, &want, sizeof want) == 0 && tab[0].gid_type == wtype,
	      "ret %zd, type %u", n, n > 0 ? tab[0].gid_type : 0);
	int type = -1;
	r = ibv_query_gid_type(ctx, 1, 0, &type);
	CHECK("query_gid_type 0", r == 0 && type == (wire ? 1 : 0), "ret %d, type %d", r, type);
	type = -1;
	r = ibv_query_gid_type(ctx, 1, 1, &type);
	CHECK("query_gid_type of an empty entry", r == 0 && type == 0, "ret %d, type %d", r, type);
	errno = 0;
	r = ibv_query_gid_type(ctx, 1, 1000, &type);
	CHECK("query_gid_type past the table", r == -1 && errno == EINVAL, "ret %d, errno %d", r, errno);
	struct ibv_port_attr pa;
	r = ibv_query_port(ctx, 1, &pa);
	CHECK("link layer InfiniBand with a LID",
	      r == 0 && pa.link_layer == IBV_LINK_LAYER_INFINIBAND && pa.lid != 0 && pa.gid_tbl_len >= 1,
	      "ret %d, link layer %d, LID %u", r, pa.link_layer, pa.lid);

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
	struct ibv_sge rs = {.addr = (uintptr_t)buf + 8192, .length = 8192, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = 8192, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	if (ibv_post_recv(qb, &rw, &rbad) || ibv_post_send(qa, &sw, &sbad))
		die("post");
	int got = 0, bad = 0;
	for (long spins = 0; got < 2 && spins < 200000000L; spins++) {
		struct ibv_wc wc;
		int k = ibv_poll_cq(cq, 1, &wc);
		if (k < 0)
			die("poll");
		if (k == 1) {
			got++;
			if (wc.status != IBV_WC_SUCCESS)
				bad++;
		}
	}
	CHECK("SEND over the own GID", got == 2 && !bad && memcmp(buf, buf + 8192, 8192) == 0, "%d completions, %d bad",
	      got, bad);

	/* A QP without a global route: not global, its MTU. */
	struct ibv_qp *qc = make_qp();
	if (to_rtr(qc, qa->qp_num, IBV_MTU_256, NULL))
		die("RTR without a GRH");
	r = path(qc, &a);
	CHECK("query_qp: no global route", r == 0 && a.path_mtu == IBV_MTU_256 && !a.ah_attr.is_global &&
						   a.qp_state == IBV_QPS_RTR,
	      "ret %d, MTU %d, global %d, state %d", r, a.path_mtu, a.ah_attr.is_global, a.qp_state);

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
		CHECK("query_qp: a new path after RESET", r == 0 && a.path_mtu == IBV_MTU_4096 && !a.ah_attr.is_global,
		      "ret %d, MTU %d, global %d", r, a.path_mtu, a.ah_attr.is_global);
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
