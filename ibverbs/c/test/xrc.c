/* xrc.c: XRC through the front end. Domains (ibv_open_xrcd with and
 * without a file, the kernel's open rules), XRC SRQs and their CQ, an
 * initiator sending into a target's SRQs (the completion on the SRQ's
 * CQ, naming the target), the SRQ's PD for RDMA at the target, an SRQ of
 * another domain refused (IBV_WC_REM_INV_REQ_ERR), the queues XRC QPs do
 * not have, the kernel's modify masks for XRC, ibv_open_qp, and
 * ibv_close_xrcd / ibv_destroy_cq refusing while in use. Usage: xrc FILE
 * (a scratch file for the domain). */
#include <fcntl.h>
#include <unistd.h>

#include "checks.h"

static struct ibv_context *ctx;
static uint16_t lid;
static struct ibv_pd *pd, *pd2;
static struct ibv_cq *scq, *xcq;
static char *buf;
static struct ibv_mr *mr, *mr2;

enum { BUF = 1 << 16 };

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 20000000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n == 1;
	}
	return 0;
}

static struct ibv_srq *xsrq(struct ibv_xrcd *x, struct ibv_pd *p)
{
	struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 16, .max_sge = 1},
					 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
						      IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
					 .srq_type = IBV_SRQT_XRC,
					 .pd = p,
					 .xrcd = x,
					 .cq = xcq};
	return ibv_create_srq_ex(ctx, &a);
}

static struct ibv_qp *tgt(struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex a = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
	return ibv_create_qp_ex(ctx, &a);
}

static struct ibv_qp *ini(void)
{
	struct ibv_qp_init_attr_ex a = {.qp_type = IBV_QPT_XRC_SEND,
					.comp_mask = IBV_QP_INIT_ATTR_PD,
					.pd = pd,
					.send_cq = scq,
					.cap = {.max_send_wr = 16, .max_send_sge = 1}};
	return ibv_create_qp_ex(ctx, &a);
}

/* connect moves initiator i and target t to each other: INIT, then RTR
 * and RTS with the masks the kernel's qp_state_table gives XRC. */
static int connect(struct ibv_qp *i, struct ibv_qp *t)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 3, &gid))
		return -1;
	struct ibv_qp *qs[2] = {i, t};
	for (int k = 0; k < 2; k++) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
					.qp_access_flags = k ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0};
		if (ibv_modify_qp(qs[k], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			return -1;
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = qs[1 - k]->qp_num;
		a.ah_attr = (struct ibv_ah_attr){.dlid = lid, .port_num = 1, .is_global = 1,
						 .grh = {.dgid = gid, .sgid_index = 3, .hop_limit = 64}};
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 12;
		int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (k)
			m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		if (ibv_modify_qp(qs[k], &a, m))
			return -1;
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = a.rnr_retry = 1;
		a.max_rd_atomic = 1;
		m = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
		if (!k)
			m |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		if (ibv_modify_qp(qs[k], &a, m))
			return -1;
	}
	return 0;
}

/* xsend posts a signaled SEND of n bytes from buf on i to SRQ srqn and
 * returns its completion status. */
static int xsend(struct ibv_qp *i, uint32_t srqn, uint32_t n, uint64_t id)
{
	struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = n, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.qp_type.xrc.remote_srqn = srqn;
	if (ibv_post_send(i, &wr, &bad))
		return -2;
	struct ibv_wc wc;
	return poll_one(scq, &wc) && wc.wr_id == id ? (int)wc.status : -3;
}

static int xwrite(struct ibv_qp *i, uint32_t srqn, struct ibv_mr *to, uint64_t id)
{
	struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.qp_type.xrc.remote_srqn = srqn;
	wr.wr.rdma.remote_addr = (uintptr_t)to->addr + 4096;
	wr.wr.rdma.rkey = to->rkey;
	if (ibv_post_send(i, &wr, &bad))
		return -2;
	struct ibv_wc wc;
	return poll_one(scq, &wc) && wc.wr_id == id ? (int)wc.status : -3;
}

/* post_srq posts a receive to XRC SRQ s, through an MR of its PD. */
static int post_srq(struct ibv_srq *s, uint64_t id)
{
	struct ibv_sge sg = {.addr = (uintptr_t)buf + BUF / 2, .length = 4096, .lkey = s->pd == pd ? mr->lkey : mr2->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1}, *bad;
	return ibv_post_srq_recv(s, &wr, &bad);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		die("usage: xrc FILE");
	ctx = open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	pd2 = ibv_alloc_pd(ctx);
	buf = calloc(1, BUF);
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	xcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	mr = pd && buf ? ibv_reg_mr(pd, buf, BUF, acc) : NULL;
	mr2 = pd2 ? ibv_reg_mr(pd2, buf, BUF, acc) : NULL;
	if (!mr || !mr2 || !scq || !xcq)
		die("setup");

	struct ibv_device_attr da;
	CHECK("ibv_query_device reports IBV_DEVICE_XRC",
	      ibv_query_device(ctx, &da) == 0 && (da.device_cap_flags & IBV_DEVICE_XRC), "flags %#x",
	      da.device_cap_flags);

	/* Domains. */
	struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_OFLAGS, .oflags = O_CREAT};
	errno = 0;
	CHECK("ibv_open_xrcd without IBV_XRCD_INIT_ATTR_FD: EINVAL", !ibv_open_xrcd(ctx, &xa) && errno == EINVAL,
	      "errno %d", errno);
	xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	xa.fd = -1;
	struct ibv_xrcd *anon = ibv_open_xrcd(ctx, &xa);
	CHECK("ibv_open_xrcd without a file (fd -1)", anon != NULL, "errno %d", errno);
	int fd = open(argv[1], O_RDONLY | O_CREAT, 0600);
	if (fd < 0)
		die("open the domain's file");
	xa.fd = fd;
	xa.oflags = 0;
	errno = 0;
	CHECK("ibv_open_xrcd of a file with no domain, without O_CREAT: EAGAIN",
	      !ibv_open_xrcd(ctx, &xa) && errno == EAGAIN, "errno %d", errno);
	xa.oflags = O_CREAT;
	struct ibv_xrcd *x1 = ibv_open_xrcd(ctx, &xa);
	CHECK("ibv_open_xrcd of a file with O_CREAT", x1 != NULL, "errno %d", errno);
	xa.oflags = 0;
	struct ibv_xrcd *x2 = ibv_open_xrcd(ctx, &xa);
	CHECK("ibv_open_xrcd of the same file again, without O_CREAT", x2 != NULL, "errno %d", errno);
	xa.oflags = O_CREAT | O_EXCL;
	errno = 0;
	CHECK("ibv_open_xrcd of an open file's domain with O_EXCL: EINVAL", !ibv_open_xrcd(ctx, &xa) && errno == EINVAL,
	      "errno %d", errno);
	xa.fd = 1 << 20;
	xa.oflags = O_CREAT;
	errno = 0;
	CHECK("ibv_open_xrcd of a bad fd: EBADF", !ibv_open_xrcd(ctx, &xa) && errno == EBADF, "errno %d", errno);
	if (!anon || !x1 || !x2)
		die("domains");

	/* SRQs, QPs, and what they refuse. */
	struct ibv_srq_init_attr_ex sa = {.attr = {.max_wr = 4, .max_sge = 1},
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
						       IBV_SRQ_INIT_ATTR_XRCD,
					  .srq_type = IBV_SRQT_XRC,
					  .pd = pd,
					  .xrcd = x1};
	errno = 0;
	CHECK("an XRC SRQ without its CQ: EINVAL", !ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "errno %d", errno);
	struct ibv_srq *s1 = xsrq(x1, pd), *s2 = xsrq(x2, pd2), *sa1 = xsrq(anon, pd);
	uint32_t n1 = 0, n2 = 0, na = 0;
	CHECK("XRC SRQs in both handles' domain and in another, with their numbers",
	      s1 && s2 && sa1 && !ibv_get_srq_num(s1, &n1) && !ibv_get_srq_num(s2, &n2) && !ibv_get_srq_num(sa1, &na) &&
		      n1 && n2 && na,
	      "errno %d", errno);
	if (!s1 || !s2 || !sa1)
		die("XRC SRQs");
	struct ibv_qp *t = tgt(x2), *i = ini();
	CHECK("an XRC target (ibv_create_qp_ex IBV_QPT_XRC_RECV) and an initiator", t && i, "errno %d", errno);
	if (!t || !i)
		die("XRC QPs");
	struct ibv_qp_init_attr_ex bad = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	errno = 0;
	CHECK("a target without IBV_QP_INIT_ATTR_XRCD: EINVAL", !ibv_create_qp_ex(ctx, &bad) && errno == EINVAL,
	      "errno %d", errno);
	struct ibv_recv_wr rwr = {.wr_id = 1}, *rbad;
	CHECK("ibv_post_recv on an initiator: ENOMEM (no receive queue)", ibv_post_recv(i, &rwr, &rbad) == ENOMEM,
	      "wrong");
	CHECK("ibv_post_recv on a target: ENOMEM", ibv_post_recv(t, &rwr, &rbad) == ENOMEM, "wrong");
	struct ibv_qp_attr ma = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (ibv_modify_qp(i, &ma, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("initiator to INIT");
	ma = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = t->qp_num,
				  .ah_attr = {.port_num = 1, .is_global = 1, .grh = {.sgid_index = 3, .hop_limit = 1}}};
	ibv_query_gid(ctx, 1, 3, &ma.ah_attr.grh.dgid);
	CHECK("an initiator's RTR with IBV_QP_MIN_RNR_TIMER (the kernel's table has none): EINVAL",
	      ibv_modify_qp(i, &ma,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    IBV_QP_MIN_RNR_TIMER) == EINVAL,
	      "wrong");
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};
	ibv_modify_qp(i, &r, IBV_QP_STATE);
	CHECK("the initiator and the target connect with XRC's modify masks", connect(i, t) == 0, "errno %d", errno);
	struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND}, *sbad;
	CHECK("ibv_post_send on a target: ENOMEM (no send queue)", ibv_post_send(t, &sw, &sbad) == ENOMEM, "wrong");

	/* Traffic: into the SRQ of the target's domain (opened by the other
	 * handle of the same file), completing on the SRQ's CQ. */
	if (post_srq(s1, 41) || post_srq(s2, 42))
		die("post SRQ receives");
	memset(buf, 0x5A, 256);
	int st = xsend(i, n1, 256, 7);
	struct ibv_wc wc = {0};
	int got = st == IBV_WC_SUCCESS && poll_one(xcq, &wc);
	CHECK("a SEND into the SRQ the XRCETH names: on the SRQ's CQ, naming the target and the initiator",
	      got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 41 && wc.qp_num == t->qp_num && wc.src_qp == i->qp_num &&
		      wc.byte_len == 256 && wc.opcode == IBV_WC_RECV && (unsigned char)buf[BUF / 2] == 0x5A,
	      "send %d wr_id %llu qp %#x (target %#x) src %#x byte_len %u status %d", st,
	      (unsigned long long)wc.wr_id, wc.qp_num, t->qp_num, wc.src_qp, wc.byte_len, wc.status);
	st = xsend(i, n2, 16, 8);
	got = st == IBV_WC_SUCCESS && poll_one(xcq, &wc);
	CHECK("one target serves two SRQs of its domain", got && wc.wr_id == 42 && wc.qp_num == t->qp_num,
	      "send %d wr_id %llu", st, (unsigned long long)wc.wr_id);
	st = xwrite(i, n2, mr2, 9);
	CHECK("an RDMA WRITE through the target in the named SRQ's PD", st == IBV_WC_SUCCESS, "status %d", st);
	st = xwrite(i, n1, mr2, 10);
	CHECK("an RDMA WRITE to a key of another PD than the named SRQ's: IBV_WC_REM_ACCESS_ERR",
	      st == IBV_WC_REM_ACCESS_ERR, "status %d", st);

	/* The target went to ERR with that NAK: a new pair for the rest. */
	struct ibv_qp *i2 = ini(), *t2 = tgt(x1);
	if (!i2 || !t2 || connect(i2, t2))
		die("second pair");
	st = xsend(i2, na, 16, 11);
	CHECK("a SEND naming an SRQ of another domain: IBV_WC_REM_INV_REQ_ERR", st == IBV_WC_REM_INV_REQ_ERR,
	      "status %d", st);

	/* ibv_open_qp: a handle of the target, which outlives its creator's
	 * destroy. */
	struct ibv_qp *i3 = ini(), *t3 = tgt(x1);
	if (!i3 || !t3)
		die("third pair");
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
				      .qp_num = t3->qp_num,
				      .xrcd = anon,
				      .qp_type = IBV_QPT_XRC_RECV};
	errno = 0;
	CHECK("ibv_open_qp of a target in another domain: EINVAL", !ibv_open_qp(ctx, &oa) && errno == EINVAL,
	      "errno %d", errno);
	oa.xrcd = x2; /* the same file's domain as x1 */
	struct ibv_qp *h = ibv_open_qp(ctx, &oa);
	CHECK("ibv_open_qp of the target through the other handle of its domain",
	      h && h->qp_num == t3->qp_num && h->qp_type == IBV_QPT_XRC_RECV, "errno %d", errno);
	if (!h)
		die("open_qp");
	CHECK("the target, moved through its opened handle, carries traffic", connect(i3, h) == 0 && !post_srq(s1, 43) &&
										  xsend(i3, n1, 32, 12) == IBV_WC_SUCCESS,
	      "errno %d", errno);
	poll_one(xcq, &wc);
	CHECK("ibv_destroy_qp of the creator's target while opened", ibv_destroy_qp(t3) == 0, "wrong");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK("the opened handle still queries the target (RTS)",
	      ibv_query_qp(h, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS, "state %d", qa.qp_state);
	int ok = !post_srq(s1, 44) && xsend(i3, n1, 32, 13) == IBV_WC_SUCCESS && poll_one(xcq, &wc) && wc.wr_id == 44;
	CHECK("and it still carries traffic", ok, "wr_id %llu", (unsigned long long)wc.wr_id);
	CHECK("ibv_destroy_qp of the last handle", ibv_destroy_qp(h) == 0, "wrong");

	/* What is in use is refused. */
	CHECK("ibv_destroy_cq of an XRC SRQ's CQ: EBUSY", ibv_destroy_cq(xcq) == EBUSY, "wrong");
	int e = ibv_close_xrcd(anon);
	CHECK("ibv_close_xrcd of a domain with an SRQ: EBUSY", e == EBUSY, "got %d", e);
	CHECK("ibv_destroy_srq of XRC SRQs", !ibv_destroy_srq(sa1) && !ibv_destroy_srq(s2), "errno %d", errno);
	CHECK("ibv_close_xrcd once nothing uses it", ibv_close_xrcd(anon) == 0, "wrong");
	ibv_destroy_qp(i);
	ibv_destroy_qp(t);
	ibv_destroy_qp(i2);
	ibv_destroy_qp(t2);
	ibv_destroy_qp(i3);
	ibv_destroy_srq(s1);
	CHECK("ibv_close_xrcd of both handles of the file's domain", !ibv_close_xrcd(x2) && !ibv_close_xrcd(x1),
	      "wrong");
	CHECK("ibv_destroy_cq once its XRC SRQs are gone", ibv_destroy_cq(xcq) == 0, "wrong");
	close(fd);
	unlink(argv[1]);
	return failed;
}
