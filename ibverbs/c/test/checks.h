/* checks.h: what the front end's C test programs share: the "ok NAME" /
 * "FAIL NAME: why" report (ibverbs/baduse_test.go reads it), a setup
 * failure, opening the device, and connecting an RC QP to a peer on this
 * port. */
#ifndef HCASIM_TEST_CHECKS_H
#define HCASIM_TEST_CHECKS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

static int failed;

#define CHECK(name, cond, ...)                                                                                         \
	do {                                                                                                           \
		if (cond) {                                                                                            \
			printf("ok %s\n", name);                                                                       \
		} else {                                                                                               \
			printf("FAIL %s: ", name);                                                                     \
			printf(__VA_ARGS__);                                                                           \
			printf("\n");                                                                                  \
			failed = 1;                                                                                    \
		}                                                                                                      \
		fflush(stdout);                                                                                        \
	} while (0)

static void die(const char *what)
{
	printf("FAIL setup: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* open_first opens the first device and returns it, with port 1's LID. */
static inline struct ibv_context *open_first(uint16_t *lid)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no device");
	struct ibv_context *c = ibv_open_device(list[0]);
	if (!c)
		die("open device");
	ibv_free_device_list(list);
	struct ibv_port_attr pa;
	if (ibv_query_port(c, 1, &pa))
		die("query port");
	*lid = pa.lid;
	return c;
}

/* rc_to_rtr moves qp through INIT to RTR toward QP dest at lid, at path
 * MTU mtu, with a global route to dgid (the port's own GID when NULL), and remote
 * access flags access. It returns 0, or -1 with errno set. */
static inline int rc_to_rtr(struct ibv_qp *qp, uint32_t dest, uint16_t lid, const union ibv_gid *dgid,
			    enum ibv_mtu mtu, unsigned access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dest;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	/* The port is RoCE: a global route always, to the port's own
	 * IPv4-mapped RoCEv2 GID (index 3) when no dgid is given. */
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.sgid_index = 3;
	a.ah_attr.grh.hop_limit = 64;
	if (dgid)
		a.ah_attr.grh.dgid = *dgid;
	else if (ibv_query_gid(qp->context, 1, 3, &a.ah_attr.grh.dgid))
		return -1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

/* rc_to_rts moves qp from RTR to RTS with retry as both retry counts. */
static inline int rc_to_rts(struct ibv_qp *qp, int retry)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = 10, .retry_cnt = (uint8_t)retry,
				.rnr_retry = (uint8_t)retry, .max_rd_atomic = 1};
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_MAX_QP_RD_ATOMIC);
}

/* rc_connect moves qp through INIT, RTR and RTS to QP dest at lid (path
 * MTU 1024, no global route), with remote access flags access and retry
 * as both retry counts. It returns 0, or -1 with errno set. */
static inline int rc_connect(struct ibv_qp *qp, uint32_t dest, uint16_t lid, unsigned access, int retry)
{
	if (rc_to_rtr(qp, dest, lid, NULL, IBV_MTU_1024, access))
		return -1;
	return rc_to_rts(qp, retry);
}

#endif
