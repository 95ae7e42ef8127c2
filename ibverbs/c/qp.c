/* RC queue pairs: creation, the state machine, and the data path. Send
 * WQEs are built as mlx5's provider builds them (control, remote address,
 * atomic, data or inline segments; fences; CQ_UPDATE for signaled WRs)
 * into the SQ ring shared with the daemon; the doorbell is a store of the
 * send counter, and a RING_SQ message only while the device's send
 * engine sleeps (the doorbell hint, docs/PROTOCOL.md 6.1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcasim.h"

#define SEG 16

static uint8_t log2ceil(size_t n)
{
	uint8_t l = 0;
	while (((size_t)1 << l) < n)
		l++;
	return l;
}

/* wqebbs_for returns the WQEBBs the largest WR of cap needs: overhead
 * bytes (a control, a remote address and an atomic segment; more for
 * mlx5dv's memory-key WQEs), then the SGEs or the inline data (as mlx5's
 * provider sizes them). */
static int wqebbs_for(const struct ibv_qp_cap *c, size_t overhead)
{
	size_t sges = (size_t)(c->max_send_sge ? c->max_send_sge : 1) * SEG;
	size_t inl = (4 + (size_t)c->max_inline_data + 15) & ~(size_t)15;
	size_t data = overhead + (sges > inl ? sges : inl);
	size_t bb = (data + HC_WQEBB - 1) / HC_WQEBB;
	if (bb < 2)
		bb = 2; /* LOCAL_INV: control, UMR control and mkey context */
	return (int)bb;
}

static void qp_free(struct hc_qp *qp)
{
	hc_dma_free(qp->ctx, &qp->mem);
	hc_zfree(qp->wrid);
	hc_zfree(qp->wrop);
	hc_zfree(qp->nbb);
	hc_zfree(qp->rwrid);
	hc_obj_del(qp);
	hc_zfree(qp);
}

static void qpx_init(struct hc_qp *qp);

static struct ibv_qp *create_tgt(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);

struct ibv_qp *hc_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
	if (!a || !hc_obj_live(c, HC_OBJ_CONTEXT) || ((a->comp_mask & IBV_QP_INIT_ATTR_PD) && !hc_obj_live(a->pd, HC_OBJ_PD))) {
		errno = EINVAL;
		return NULL;
	}
	if (a->qp_type == IBV_QPT_XRC_RECV)
		return create_tgt(c, a);
	return hc_create_qp(c, a, NULL);
}

/* qp_publish fills the ibv_qp of a new QP and puts it in the table (last:
 * events and completions find it whole). */
static struct ibv_qp *qp_publish(struct hc_context *ctx, struct hc_qp *qp, struct ibv_qp_init_attr_ex *a,
				 uint32_t qpn);

struct ibv_qp *hc_qp_publish(struct hc_context *ctx, struct hc_qp *qp, struct ibv_qp_init_attr_ex *a, uint32_t qpn)
{
	return qp_publish(ctx, qp, a, qpn);
}

static struct ibv_qp *qp_publish(struct hc_context *ctx, struct hc_qp *qp, struct ibv_qp_init_attr_ex *a,
				 uint32_t qpn)
{
	struct ibv_qp *q = &qp->qpx.qp_base;
	q->context = &ctx->vctx.context;
	q->qp_context = a->qp_context;
	q->handle = qpn;
	q->qp_num = qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = a->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.cap = qp->cap;
	qp->attr.path_mtu = IBV_MTU_1024;
	qpx_init(qp);
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
		qp->qpx.comp_mask = a->send_ops_flags;
	int err = hc_table_put(ctx, HC_TAB_QP, qpn, qp);
	if (err) {
		uint8_t d[12], out[64];
		hc_cmd_header(d, HC_CMD_DESTROY_QP);
		hc_put32(d + 8, qpn);
		hc_cmd(ctx, d, sizeof d, out, sizeof out, NULL);
		qp_free(qp);
		errno = err;
		return NULL;
	}
	return q;
}

/* create_tgt creates an XRC target QP (IBV_QPT_XRC_RECV): no send or
 * receive queue, no CQs, no PD; its messages go to the XRC SRQs of its
 * domain that they name. */
static struct ibv_qp *create_tgt(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
	struct hc_context *ctx = hc_ctx(c);
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (a->comp_mask & ~known) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd || a->xrcd->context != c) {
		errno = EINVAL;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct hc_qp *qp = hc_zalloc(sizeof *qp);
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->ctx = ctx;
	uint8_t in[HC_QP_IN_XRC_SIZE] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_CREATE_QP);
	in[26] = 4; /* the smallest receive stride, of a queue it does not have */
	in[27] = HC_QP_XRC;
	hc_put32(in + HC_QP_IN_XRCD, ((struct hc_xrcd *)a->xrcd)->dom->num);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err) {
		qp_free(qp);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&qp->smu, NULL);
	pthread_mutex_init(&qp->rmu, NULL);
	qp->xdom = ((struct hc_xrcd *)a->xrcd)->dom;
	memset(&a->cap, 0, sizeof a->cap);
	struct hc_qp_dv none = {0};
	hc_dv_qp_init(qp, &none);
	return qp_publish(ctx, qp, a, hc_get32(out + 8) & 0xFFFFFF);
}

/* hc_create_qp creates an RC or UC QP; dv, if not NULL, holds what
 * mlx5dv_create_qp asked for beyond it. */
struct ibv_qp *hc_create_qp(struct ibv_context *c, struct ibv_qp_init_attr_ex *a, const struct hc_qp_dv *dv)
{
	struct hc_context *ctx = hc_ctx(c);
	if (a->comp_mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH))
		return hc_create_rss_qp(c, a);
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || (a->comp_mask & ~known)) {
		errno = a->comp_mask & ~known ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	int uc = a->qp_type == IBV_QPT_UC, ud = a->qp_type == IBV_QPT_UD, xrc = a->qp_type == IBV_QPT_XRC_SEND;
	int raw = a->qp_type == IBV_QPT_RAW_PACKET;
	/* mlx5 blocks multicast loopback on UD and raw packet QPs; UD
	 * multicast is not modelled, so there the flag changes nothing. */
	uint32_t cflags = (a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? a->create_flags : 0;
	uint32_t cflags_ok = ud || raw ? IBV_QP_CREATE_BLOCK_SELF_MCAST_LB : 0;
	if ((a->qp_type != IBV_QPT_RC && !uc && !ud && !xrc && !raw) || (cflags & ~cflags_ok) ||
	    ((uc || ud || xrc || raw) && dv && (dv->integrity || dv->create_flags))) {
		errno = EOPNOTSUPP; /* RC, UC, UD, XRC and raw packet QPs are modelled; signature offload on RC */
		return NULL;
	}
	if ((a->srq && a->srq->context != c) || ((xrc || raw) && a->srq)) {
		errno = EINVAL;
		return NULL;
	}
	int wq = raw && dv && (dv->dev_flags & HC_QPF_NO_SQ);
	if (raw && !wq && !hc_net_raw()) {
		errno = EPERM; /* as the kernel: a raw packet QP needs CAP_NET_RAW */
		return NULL;
	}
	/* mlx5's supported send ops, per QP type (MLX5_SUPPORTED_SEND_OPS_FLAGS_*). */
	const uint64_t uc_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
				IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
				IBV_QP_EX_WITH_BIND_MW;
	const uint64_t ud_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	const uint64_t ops = raw  ? IBV_QP_EX_WITH_SEND
			     : ud ? ud_ops
			     : uc ? uc_ops
				  : uc_ops | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
					    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~ops)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!a->send_cq || a->send_cq->context != c || (!xrc && (!a->recv_cq || a->recv_cq->context != c))) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp_cap cap = a->cap;
	if (a->srq || xrc) /* no receive queue of its own (an XRC initiator receives nothing) */
		cap.max_recv_wr = cap.max_recv_sge = 0;
	struct hc_caps *k = &ctx->caps;
	if (cap.max_send_sge > k->max_sge || cap.max_recv_sge > k->max_sge || cap.max_inline_data > k->max_inline ||
	    cap.max_send_wr > (1u << k->log_max_sq) || cap.max_recv_wr > (1u << k->log_max_rq)) {
		errno = EINVAL;
		return NULL;
	}
	/* A UD WQE: the control and the datagram segment; RC and UC: the
	 * control and the larger of a remote address with an atomic segment
	 * and a window bind (UMR control, mkey context, a KLM padded to 64),
	 * as mlx5's sq_overhead. */
	size_t overhead = dv && dv->overhead ? dv->overhead
			  : ud		     ? SEG + HC_DATAGRAM_SEG
			  : raw		     ? SEG + HC_ETH_SEG
					     : SEG + 48 + 64 + 64;
	int bb = wqebbs_for(&cap, overhead);
	uint8_t sq_log = log2ceil((size_t)(cap.max_send_wr ? cap.max_send_wr : 1) * (size_t)bb);
	uint8_t rq_log = log2ceil(cap.max_recv_wr ? cap.max_recv_wr : 1);
	uint8_t rq_shift = log2ceil((size_t)(cap.max_recv_sge ? cap.max_recv_sge : 1) * SEG);
	if (rq_shift < 4)
		rq_shift = 4;
	if (sq_log > k->log_max_sq || bb > HC_MAX_WQEBBS) {
		errno = EINVAL;
		return NULL;
	}
	struct hc_qp *qp = hc_zalloc(sizeof *qp);
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->ctx = ctx;
	qp->sq_log = sq_log;
	qp->rq_log = rq_log;
	qp->rq_shift = rq_shift;
	size_t sqb = (size_t)HC_WQEBB << sq_log, rqb = (size_t)1 << (rq_log + rq_shift);
	size_t n = (size_t)1 << sq_log;
	qp->wrid = hc_zalloc(n * sizeof *qp->wrid);
	qp->wrop = hc_zalloc(n);
	qp->nbb = hc_zalloc(n);
	qp->rwrid = hc_zalloc(((size_t)1 << rq_log) * sizeof *qp->rwrid);
	int err = !qp->wrid || !qp->wrop || !qp->nbb || !qp->rwrid ? ENOMEM : hc_alloc_type_ok("MLX_QP_ALLOC_TYPE");
	if (!err)
		err = hc_dma_alloc(ctx, sqb + rqb + 64, &qp->mem);
	if (err) {
		qp_free(qp);
		errno = err;
		return NULL;
	}
	qp->sq = qp->mem.addr;
	qp->rq = qp->mem.addr + sqb;
	qp->db = qp->mem.addr + sqb + rqb;
	uint8_t in[56] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_CREATE_QP);
	hc_put32(in + 8, a->pd->handle);
	hc_put32(in + 12, hc_cq(a->send_cq)->cqn);
	if (!xrc)
		hc_put32(in + 16, hc_cq(a->recv_cq)->cqn);
	uint32_t qflags = 2; /* DB_HINT */
	if (dv && dv->integrity)
		qflags |= 1;
	if (dv && (dv->create_flags & MLX5DV_QP_CREATE_SIG_PIPELINING))
		qflags |= 4; /* drain on signature error */
	if (raw && (cflags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB))
		qflags |= 8; /* block multicast loopback */
	if (dv)
		qflags |= dv->dev_flags;
	hc_put32(in + 20, qflags);
	if (a->srq)
		hc_put32(in + 28, hc_srq(a->srq)->srqn);
	in[24] = sq_log;
	in[25] = rq_log;
	in[26] = rq_shift;
	in[27] = raw ? HC_QP_RAW : xrc ? HC_QP_XRC : ud ? 2 : uc ? 1 : 0; /* RC 0, UC 1, UD 2, XRC 3, raw 4 */
	hc_put64(in + 32, qp->mem.iova);
	hc_put64(in + 40, qp->mem.iova + sqb);
	hc_put64(in + 48, qp->mem.iova + sqb + rqb);
	err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	uint32_t qpn = hc_get32(out + 8) & 0xFFFFFF;
	if (err) {
		qp_free(qp);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&qp->smu, NULL);
	pthread_mutex_init(&qp->rmu, NULL);
	qp->scq = hc_cq(a->send_cq);
	qp->rcq = xrc ? NULL : hc_cq(a->recv_cq);
	qp->srq = a->srq ? hc_srq(a->srq) : NULL;
	qp->sig_all = a->sq_sig_all;
	/* What the QP can take, as mlx5 reports it: at least what was asked. */
	/* The bytes before the data: control, then the datagram segment (UD),
	 * the XRC segment (XRC) and a remote address. */
	int hdr = ud ? SEG + HC_DATAGRAM_SEG : raw ? SEG + HC_ETH_SEG : xrc ? 3 * SEG : 2 * SEG;
	int sendsge = (bb * HC_WQEBB - hdr) / SEG;
	qp->cap.max_send_wr = (uint32_t)(n / (size_t)bb);
	qp->cap.max_recv_wr = 1u << rq_log;
	qp->cap.max_send_sge = (uint32_t)(sendsge < k->max_sge ? sendsge : k->max_sge);
	qp->cap.max_recv_sge = (1u << rq_shift) / SEG;
	if (qp->cap.max_recv_sge > k->max_sge)
		qp->cap.max_recv_sge = k->max_sge;
	if (a->srq || xrc)
		qp->cap.max_recv_wr = qp->cap.max_recv_sge = 0;
	uint32_t inl = (uint32_t)(bb * HC_WQEBB - (dv && dv->overhead ? (int)overhead : hdr) - 4);
	qp->cap.max_inline_data = inl < k->max_inline ? inl : k->max_inline;
	a->cap = qp->cap;
	struct ibv_qp *q = &qp->qpx.qp_base;
	q->pd = a->pd;
	q->send_cq = a->send_cq;
	q->recv_cq = xrc ? NULL : a->recv_cq;
	q->srq = a->srq;
	struct hc_qp_dv none = {0};
	hc_dv_qp_init(qp, dv ? dv : &none);
	return qp_publish(ctx, qp, a, qpn);
}

/* hc_open_qp is ibv_open_qp of an XRC target of this context (domains are
 * the context's): a new handle of the target, whose modify and query are
 * the target's; the target lives until its creator and every handle have
 * destroyed it, as the kernel keeps a shared target. */
struct ibv_qp *hc_open_qp(struct ibv_context *c, struct ibv_qp_open_attr *a)
{
	const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	if (!a || (a->comp_mask & need) != need || a->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED ||
	    a->qp_type != IBV_QPT_XRC_RECV || !a->xrcd || a->xrcd->context != c) {
		errno = EINVAL;
		return NULL;
	}
	struct hc_context *ctx = hc_ctx(c);
	struct hc_qp *h = hc_zalloc(sizeof *h);
	if (!h) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&ctx->obj_mu);
	struct hc_qp *t = a->qp_num < ctx->nqps ? ctx->qps[a->qp_num] : NULL;
	int ok = t && t->qpx.qp_base.qp_type == IBV_QPT_XRC_RECV && !t->gone &&
		 t->xdom == ((struct hc_xrcd *)a->xrcd)->dom;
	if (ok)
		t->open_refs++;
	pthread_mutex_unlock(&ctx->obj_mu);
	if (!ok) {
		hc_zfree(h);
		errno = EINVAL; /* no target of that number in the domain */
		return NULL;
	}
	h->ctx = ctx;
	h->opened = t;
	h->xdom = t->xdom;
	pthread_mutex_init(&h->smu, NULL);
	pthread_mutex_init(&h->rmu, NULL);
	struct ibv_qp *q = &h->qpx.qp_base;
	q->context = c;
	q->qp_context = a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT ? a->qp_context : NULL;
	q->handle = q->qp_num = a->qp_num;
	q->qp_type = IBV_QPT_XRC_RECV;
	q->state = t->qpx.qp_base.state;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	h->attr = t->attr;
	qpx_init(h);
	struct hc_qp_dv none = {0};
	hc_dv_qp_init(h, &none);
	hc_obj_add(q, HC_OBJ_QP);
	return q;
}

HC_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	HC_LIVE(pd, HC_OBJ_PD, NULL);
	if (!a) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp_init_attr_ex x = {0};
	memcpy(&x, a, sizeof *a);
	x.comp_mask = IBV_QP_INIT_ATTR_PD;
	x.pd = pd;
	struct ibv_qp *q = hc_create_qp_ex(pd->context, &x);
	if (q)
		a->cap = x.cap;
	return q;
}

HC_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	HC_LIVE(qp, HC_OBJ_QP, NULL);
	return &hc_qp(qp)->qpx;
}

/* ibv_query_qp_data_in_order: the device places a message's data in
 * address order (on the wire in PSN order, a packet after a gap dropped),
 * so 1 for every opcode; 0 for flags verbs.h does not define (it says
 * they must be 0). */
HC_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)op;
	return hc_obj_live(qp, HC_OBJ_QP) && !flags ? 1 : 0;
}

static int qp_destroy(struct hc_qp *qp);

HC_EXPORT int ibv_destroy_qp(struct ibv_qp *q)
{
	HC_LIVE(q, HC_OBJ_QP, EINVAL);
	struct hc_qp *qp = hc_qp(q);
	struct hc_context *ctx = qp->ctx;
	if (qp->opened || q->qp_type == IBV_QPT_XRC_RECV) {
		/* A target's handle, or a target: the last of them destroys it. */
		struct hc_qp *t = qp->opened ? qp->opened : qp;
		pthread_mutex_lock(&ctx->obj_mu);
		if (qp->opened)
			t->open_refs--;
		else
			t->gone = 1;
		int last = t->gone && !t->open_refs;
		pthread_mutex_unlock(&ctx->obj_mu);
		if (qp->opened)
			qp_free(qp);
		if (!last)
			return 0;
		qp = t;
	}
	return qp_destroy(qp);
}

static int qp_destroy(struct hc_qp *qp)
{
	struct ibv_qp *q = &qp->qpx.qp_base;
	struct hc_context *ctx = qp->ctx;
	uint8_t in[12], out[64];
	hc_cmd_header(in, HC_CMD_DESTROY_QP);
	hc_put32(in + 8, q->qp_num);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err && err != EIO)
		return err;
	/* Out of the table and its unread events dropped (under obj_mu, as
	 * the reader queues them), then the acks of the events handed out
	 * awaited, as libibverbs does. */
	if (qp->ind)
		hc_ind_unref(qp->ind);
	pthread_mutex_lock(&ctx->obj_mu);
	if (q->qp_num < ctx->nqps && ctx->qps[q->qp_num] == qp)
		ctx->qps[q->qp_num] = NULL;
	hc_purge_async(ctx, q);
	pthread_mutex_unlock(&ctx->obj_mu);
	/* An XRC target has no CQs: its CQEs stay in its SRQs' (as mlx5's). */
	hc_cq_clean(qp->scq, q->qp_num, qp->srq);
	if (qp->rcq != qp->scq)
		hc_cq_clean(qp->rcq, q->qp_num, qp->srq);
	pthread_mutex_lock(&q->mutex);
	while (q->events_completed != qp->async_reported)
		pthread_cond_wait(&q->cond, &q->mutex);
	pthread_mutex_unlock(&q->mutex);
	qp_free(qp);
	return 0;
}

/* The attributes each RC transition requires and allows (IBA 11.2.5.3,
 * the kernel's ib_modify_qp_is_ok). */
struct transition {
	enum ibv_qp_state from, to;
	int cmd;
	int req, opt;
};

#define T_INIT_OPT (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define T_RTR_REQ                                                                                                      \
	(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |                   \
	 IBV_QP_MIN_RNR_TIMER)
#define T_RTS_REQ (IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
#define T_RTS_OPT                                                                                                      \
	(IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE)

/* The attributes of the transitions above that UC QPs neither need nor
 * take (the kernel's qp_state_table for IB_QPT_UC). */
#define RC_ONLY                                                                                                        \
	(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |     \
	 IBV_QP_MAX_QP_RD_ATOMIC)

#define XRC_INI_NOT (IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define XRC_TGT_NOT (IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)

static const struct transition transitions[] = {
	{IBV_QPS_RESET, IBV_QPS_INIT, HC_CMD_RST2INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
	{IBV_QPS_INIT, IBV_QPS_INIT, HC_CMD_INIT2INIT, 0, T_INIT_OPT},
	{IBV_QPS_INIT, IBV_QPS_RTR, HC_CMD_INIT2RTR, T_RTR_REQ, IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
	{IBV_QPS_RTR, IBV_QPS_RTS, HC_CMD_RTR2RTS, T_RTS_REQ, T_RTS_OPT},
	{IBV_QPS_RTS, IBV_QPS_RTS, HC_CMD_RTS2RTS, 0, T_RTS_OPT},
	{IBV_QPS_RTS, IBV_QPS_SQD, HC_CMD_RTS2SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
	{IBV_QPS_SQD, IBV_QPS_RTS, HC_CMD_SQD2RTS, 0, T_RTS_OPT},
	{IBV_QPS_SQD, IBV_QPS_SQD, -1, 0,
	 IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE |
		 IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
		 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_AV | IBV_QP_PKEY_INDEX},
	{IBV_QPS_SQE, IBV_QPS_RTS, HC_CMD_SQERR2RTS, 0, IBV_QP_CUR_STATE},
};

/* The transitions of a UD QP (the kernel's qp_state_table for IB_QPT_UD):
 * a Q_Key and no path, no remote attributes. */
static const struct transition ud_transitions[] = {
	{IBV_QPS_RESET, IBV_QPS_INIT, HC_CMD_RST2INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0},
	{IBV_QPS_INIT, IBV_QPS_INIT, HC_CMD_INIT2INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY},
	{IBV_QPS_INIT, IBV_QPS_RTR, HC_CMD_INIT2RTR, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY},
	{IBV_QPS_RTR, IBV_QPS_RTS, HC_CMD_RTR2RTS, IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY},
	{IBV_QPS_RTS, IBV_QPS_RTS, HC_CMD_RTS2RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY},
	{IBV_QPS_RTS, IBV_QPS_SQD, HC_CMD_RTS2SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
	{IBV_QPS_SQD, IBV_QPS_RTS, HC_CMD_SQD2RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY},
	{IBV_QPS_SQD, IBV_QPS_SQD, -1, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY},
	{IBV_QPS_SQE, IBV_QPS_RTS, HC_CMD_SQERR2RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY},
};

/* The transitions of a raw packet QP (the kernel's qp_state_table for
 * IB_QPT_RAW_PACKET): the port, and nothing of a transport. */
static const struct transition raw_transitions[] = {
	{IBV_QPS_RESET, IBV_QPS_INIT, HC_CMD_RST2INIT, IBV_QP_PORT, 0},
	{IBV_QPS_INIT, IBV_QPS_INIT, HC_CMD_INIT2INIT, 0, IBV_QP_PORT},
	{IBV_QPS_INIT, IBV_QPS_RTR, HC_CMD_INIT2RTR, 0, 0},
	{IBV_QPS_RTR, IBV_QPS_RTS, HC_CMD_RTR2RTS, 0, 0},
	{IBV_QPS_RTS, IBV_QPS_RTS, HC_CMD_RTS2RTS, 0, 0},
};

/* net_raw reports whether the process has CAP_NET_RAW, which the kernel
 * asks for a privileged Q_Key and a raw packet QP: CapEff bit 13 in
 * /proc/self/status. */
static int net_raw(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 0;
	char line[256];
	unsigned long long cap = 0;
	int found = 0;
	while (!found && fgets(line, sizeof line, f))
		found = sscanf(line, "CapEff: %llx", &cap) == 1;
	fclose(f);
	return found && (cap >> 13 & 1);
}

/* dest_lid returns the LID the AV names. The port is Ethernet, where the
 * GID is the address and the DLID means nothing (UCX puts a UDP source
 * port hint there): a GID of our own port is us; then the DLID, or for a
 * global route without one the LID our GIDs carry (hc_guid). */
static uint16_t dest_lid(const struct hc_context *ctx, const struct ibv_ah_attr *ah)
{
	if (ah->is_global) {
		for (unsigned i = 0; i < 4; i++) { /* the entries hc_gid_entry fills */
			union ibv_gid g;
			unsigned type;
			if (!hc_gid_entry(ctx, i, &g, &type) && !memcmp(g.raw, ah->grh.dgid.raw, sizeof g.raw))
				return ctx->caps.lid;
		}
	}
	if (ah->dlid)
		return ah->dlid;
	if (ah->is_global) {
		uint64_t id = be64toh(ah->grh.dgid.global.interface_id);
		if ((id & 0xFFFFFFFF000000FFULL) == 0x0002c90300000001ULL)
			return (uint16_t)(id >> 8);
	}
	return ctx->caps.lid;
}

uint16_t hc_dest_lid(const struct hc_context *ctx, const struct ibv_ah_attr *ah) { return dest_lid(ctx, ah); }

int hc_net_raw(void) { return net_raw(); }

static int qp_state_from_device(int s)
{
	static const int map[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
				  IBV_QPS_SQE,	 IBV_QPS_SQD,  IBV_QPS_ERR};
	return s >= 0 && s < 7 ? map[s] : IBV_QPS_ERR;
}

/* device_state asks the device for the QP's state (it moves to ERR on its
 * own); -1 if it cannot. out (HC_QP_OUT_SIZE bytes) gets the QUERY_QP
 * output, *outlen its length (an older daemon's is shorter). */
static int device_state(struct hc_qp *qp, uint8_t *out, size_t *outlen)
{
	uint8_t in[12];
	hc_cmd_header(in, HC_CMD_QUERY_QP);
	hc_put32(in + 8, qp->qpx.qp_base.qp_num);
	if (hc_cmd(qp->ctx, in, sizeof in, out, HC_QP_OUT_SIZE, outlen))
		return -1;
	return qp_state_from_device(out[8]);
}

static void reset_indices(struct hc_qp *qp)
{
	hc_cq_clean(qp->scq, qp->qpx.qp_base.qp_num, qp->srq);
	if (qp->rcq != qp->scq)
		hc_cq_clean(qp->rcq, qp->qpx.qp_base.qp_num, qp->srq);
	pthread_mutex_lock(&qp->smu);
	qp->cur_post = 0;
	atomic_store(&qp->sq_tail, 0);
	qp->fm_cache = 0;
	pthread_mutex_unlock(&qp->smu);
	pthread_mutex_lock(&qp->rmu);
	qp->rq_head = qp->rq_tail = 0;
	pthread_mutex_unlock(&qp->rmu);
	if (qp->db) { /* an XRC target has no queues, and no doorbell record */
		hc_store32(qp->db, 0);
		hc_store32(qp->db + 4, 0);
	}
}

HC_EXPORT int ibv_modify_qp(struct ibv_qp *q, struct ibv_qp_attr *a, int mask)
{
	HC_LIVE(q, HC_OBJ_QP, EINVAL);
	if (!a)
		return EINVAL;
	struct hc_qp *qp = hc_qp(q);
	if (qp->ind)
		return EOPNOTSUPP; /* as mlx5: an RSS QP is not modified */
	if (qp->opened) { /* a handle of ibv_open_qp: the target's */
		struct ibv_qp *t = &qp->opened->qpx.qp_base;
		int err = ibv_modify_qp(t, a, mask);
		q->state = t->state;
		return err;
	}
	struct hc_context *ctx = qp->ctx;
	enum ibv_qp_state cur = (mask & IBV_QP_CUR_STATE) ? a->cur_qp_state : q->state;
	enum ibv_qp_state to = (mask & IBV_QP_STATE) ? a->qp_state : cur;
	int cmd = -1, allowed = IBV_QP_STATE | IBV_QP_CUR_STATE, req = 0;
	if (to == IBV_QPS_ERR) {
		cmd = HC_CMD_2ERR;
	} else if (to == IBV_QPS_RESET) {
		cmd = HC_CMD_2RST;
	} else {
		const struct transition *t = NULL, *tab = transitions;
		size_t ntab = sizeof transitions / sizeof transitions[0];
		if (q->qp_type == IBV_QPT_UD)
			tab = ud_transitions, ntab = sizeof ud_transitions / sizeof ud_transitions[0];
		if (q->qp_type == IBV_QPT_RAW_PACKET)
			tab = raw_transitions, ntab = sizeof raw_transitions / sizeof raw_transitions[0];
		for (size_t i = 0; i < ntab; i++)
			if (tab[i].from == cur && tab[i].to == to)
				t = &tab[i];
		if (!t)
			return EINVAL;
		cmd = t->cmd;
		req = t->req;
		allowed |= t->req | t->opt;
		if (q->qp_type == IBV_QPT_UC) /* UC has no ACKs: none of RC's timers, retries or RDMA reads */
			req &= ~RC_ONLY, allowed &= ~RC_ONLY;
		/* The kernel's qp_state_table for XRC: an initiator serves no
		 * requests (no responder's attributes), a target sends none (no
		 * requester's but the timeout and SQ PSN). */
		if (q->qp_type == IBV_QPT_XRC_SEND)
			req &= ~XRC_INI_NOT, allowed &= ~XRC_INI_NOT;
		if (q->qp_type == IBV_QPT_XRC_RECV)
			req &= ~XRC_TGT_NOT, allowed &= ~XRC_TGT_NOT;
	}
	if ((mask & req) != req || (mask & ~allowed))
		return EINVAL;
	if (((mask & IBV_QP_PORT) && a->port_num != 1) || ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) ||
	    ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) ||
	    ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > ctx->caps.max_rd_atomic) ||
	    ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > ctx->caps.max_rd_atomic) ||
	    ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) || ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) ||
	    ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) || ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) ||
	    ((mask & IBV_QP_AV) && a->ah_attr.port_num > 1) ||
	    ((mask & IBV_QP_ACCESS_FLAGS) &&
	     (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND))))
		return EINVAL;
	if (mask & IBV_QP_AV) {
		int err = hc_check_av(ctx, &a->ah_attr);
		if (err)
			return err;
	}
	if ((mask & IBV_QP_QKEY) && (a->qkey & 0x80000000u) && !net_raw())
		return EPERM; /* a privileged Q_Key needs CAP_NET_RAW, as the kernel says */
	if (cmd < 0) {
		/* SQD -> SQD: attributes only; the device keeps them as they were. */
		return 0;
	}
	/* The context carries every field; a transition takes its own (the
	 * device ignores the rest), so unchanged ones repeat what is kept. */
	struct ibv_qp_attr n = qp->attr;
	if (mask & IBV_QP_ACCESS_FLAGS)
		n.qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		n.pkey_index = a->pkey_index;
	if (mask & IBV_QP_PORT)
		n.port_num = a->port_num;
	if (mask & IBV_QP_AV)
		n.ah_attr = a->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		n.path_mtu = a->path_mtu;
	if (mask & IBV_QP_DEST_QPN)
		n.dest_qp_num = a->dest_qp_num & 0xFFFFFF;
	if (mask & IBV_QP_RQ_PSN)
		n.rq_psn = a->rq_psn & 0xFFFFFF;
	if (mask & IBV_QP_SQ_PSN)
		n.sq_psn = a->sq_psn & 0xFFFFFF;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		n.max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		n.max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		n.min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT)
		n.timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		n.retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		n.rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		n.en_sqd_async_notify = a->en_sqd_async_notify;
	if (mask & IBV_QP_QKEY)
		n.qkey = a->qkey;
	/* INIT2RTR's input is the longer one, with the remote GID; the
	 * others keep the 48 bytes that are all they read. */
	uint8_t in[HC_QP_MODIFY_UD_SIZE] = {0}, out[64];
	size_t inlen = cmd == HC_CMD_INIT2RTR ? HC_QP_MODIFY_SIZE : 48;
	if (q->qp_type == IBV_QPT_UD) {
		inlen = HC_QP_MODIFY_UD_SIZE;
		hc_put32(in + HC_QPC_QKEY, n.qkey);
	}
	hc_cmd_header(in, (uint16_t)cmd);
	hc_put32(in + 8, q->qp_num);
	uint32_t optpar = 0;
	if (mask & IBV_QP_ACCESS_FLAGS)
		optpar |= 0xE;
	if (mask & IBV_QP_QKEY)
		optpar |= HC_QP_OPT_QKEY;
	hc_put32(in + 12, optpar);
	uint8_t acc = 0;
	if (n.qp_access_flags & IBV_ACCESS_REMOTE_READ)
		acc |= 1;
	if (n.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)
		acc |= 2;
	if (n.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC)
		acc |= 4;
	in[19] = acc;
	hc_put16(in + 20, dest_lid(ctx, &n.ah_attr));
	hc_put32(in + 24, n.dest_qp_num);
	hc_put32(in + 28, n.rq_psn);
	hc_put32(in + 32, n.sq_psn);
	in[36] = n.min_rnr_timer;
	in[37] = n.timeout;
	in[38] = n.retry_cnt;
	in[39] = n.rnr_retry;
	in[40] = n.max_rd_atomic;
	in[41] = n.max_dest_rd_atomic;
	/* enum ibv_mtu is IB's encoding (1 = 256 … 5 = 4096), as the device's. */
	in[HC_QPC_MTU] = (uint8_t)n.path_mtu;
	if (cmd == HC_CMD_INIT2RTR && n.ah_attr.is_global)
		memcpy(in + HC_QPC_REMOTE_GID, n.ah_attr.grh.dgid.raw, 16);
	int err = hc_cmd(ctx, in, inlen, out, sizeof out, NULL);
	if (err)
		return err;
	n.qp_state = to;
	n.cur_qp_state = to;
	qp->attr = n;
	q->state = to;
	if (to == IBV_QPS_RESET)
		reset_indices(qp);
	return 0;
}

HC_EXPORT int ibv_query_qp(struct ibv_qp *q, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	HC_LIVE(q, HC_OBJ_QP, EINVAL);
	if (!a || !init)
		return EINVAL;
	struct hc_qp *qp = hc_qp(q);
	if (qp->ind)
		return EOPNOTSUPP; /* as mlx5: nor queried */
	if (qp->opened) {
		struct ibv_qp *t = &qp->opened->qpx.qp_base;
		int err = ibv_query_qp(t, a, mask, init);
		q->state = t->state;
		if (!err && init)
			init->qp_context = q->qp_context;
		return err;
	}
	uint8_t out[HC_QP_OUT_SIZE];
	size_t outlen = 0;
	int s = device_state(qp, out, &outlen);
	if (s < 0 && hc_gone(qp->ctx))
		return EIO; /* the device is gone */
	if (s >= 0 && s != (int)q->state && (s == IBV_QPS_ERR || s == IBV_QPS_SQE)) {
		q->state = (enum ibv_qp_state)s;
		qp->attr.qp_state = (enum ibv_qp_state)s;
	}
	*a = qp->attr;
	/* The path the device took at INIT2RTR: its path MTU, and the remote
	 * GID, a global route when it is set. Before INIT2RTR, and after
	 * RESET (the device forgets the path), the attributes kept here. */
	uint8_t mtu = outlen >= HC_QP_OUT_SIZE ? out[HC_QPC_MTU] : 0;
	if (s >= 0 && s != IBV_QPS_RESET && s != IBV_QPS_INIT && mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096) {
		a->path_mtu = (enum ibv_mtu)mtu;
		int global = 0;
		for (int i = 0; i < 16; i++)
			global |= out[HC_QPC_REMOTE_GID + i];
		memcpy(a->ah_attr.grh.dgid.raw, out + HC_QPC_REMOTE_GID, 16);
		a->ah_attr.is_global = global != 0;
	}
	a->qp_state = q->state;
	a->cur_qp_state = q->state;
	a->cap = qp->cap;
	a->sq_draining = 0;
	if (init) {
		memset(init, 0, sizeof *init);
		init->qp_context = q->qp_context;
		init->send_cq = q->send_cq;
		init->recv_cq = q->recv_cq;
		init->cap = qp->cap;
		init->qp_type = q->qp_type;
		init->sq_sig_all = qp->sig_all;
	}
	return 0;
}

/* hc_qp_saw_error records that the QP is in error (an error completion or
 * a fatal event), as mlx5's provider does for its state. */
void hc_qp_saw_error(struct hc_qp *qp) { qp->qpx.qp_base.state = IBV_QPS_ERR; }

/* Building send WQEs. */

/* get_fence is rdma-core's mlx5 provider's: IBV_SEND_FENCE is
 * MLX5_WQE_CTRL_FENCE (fence and initiator-small fence), otherwise the
 * cached next fence (initiator-small after a local key operation);
 * LOCAL_INV with IBV_SEND_FENCE gets strong ordering. */
static uint8_t get_fence(struct hc_qp *qp, int local_inv, int fenced)
{
	if (local_inv && fenced)
		return HC_FENCE_STRONG;
	return fenced ? HC_FENCE_SMALL_AND : qp->fm_cache;
}

uint8_t hc_fence(struct hc_qp *qp, int local_inv, int fenced) { return get_fence(qp, local_inv, fenced); }

/* put_ctrl writes the control segment of the WQE in scratch. */
static void put_ctrl(struct hc_qp *qp, uint8_t opcode, size_t len, uint8_t fence, int signaled, int solicited,
		     const uint8_t imm[4])
{
	uint8_t *c = qp->scratch;
	hc_put32(c, (uint32_t)qp->cur_post << 8 | opcode);
	hc_put32(c + 4, qp->qpx.qp_base.qp_num << 8 | (uint32_t)(len / SEG));
	c[8] = c[9] = c[10] = 0;
	c[11] = fence | (signaled ? HC_CE_CQ_UPDATE : 0) | (solicited ? HC_SE : 0);
	memcpy(c + 12, imm, 4);
}

/* commit copies the WQE in scratch (len bytes) into the ring at the send
 * counter, wrapping at its end, and records it. It fails if the ring has
 * no room. */
static int commit(struct hc_qp *qp, size_t len, uint64_t wr_id, uint8_t wcop, int local_op)
{
	size_t nbb = (len + HC_WQEBB - 1) / HC_WQEBB;
	uint16_t size = (uint16_t)(1u << qp->sq_log);
	if (!qp->sq)
		return ENOMEM; /* an XRC target: a send queue of no WQEs */
	if ((uint16_t)(qp->cur_post + nbb - atomic_load(&qp->sq_tail)) > size || nbb > size)
		return ENOMEM;
	size_t start = (size_t)(qp->cur_post & (size - 1)) * HC_WQEBB;
	size_t ring = (size_t)size * HC_WQEBB;
	size_t first = len < ring - start ? len : ring - start;
	memcpy(qp->sq + start, qp->scratch, first);
	memcpy(qp->sq, qp->scratch + first, len - first);
	uint16_t slot = qp->cur_post & (size - 1);
	qp->wrid[slot] = wr_id;
	qp->wrop[slot] = wcop;
	qp->nbb[slot] = (uint8_t)nbb;
	qp->cur_post += (uint16_t)nbb;
	qp->fm_cache = local_op ? HC_FENCE_SMALL : 0;
	return 0;
}

void hc_put_ctrl(struct hc_qp *qp, uint8_t opcode, size_t len, uint8_t fence, int signaled, int solicited,
		 const uint8_t imm[4])
{
	put_ctrl(qp, opcode, len, fence, signaled, solicited, imm);
}

int hc_commit(struct hc_qp *qp, size_t len, uint64_t wr_id, uint8_t wcop, int local_op)
{
	return commit(qp, len, wr_id, wcop, local_op);
}

static size_t put_raddr(uint8_t *p, uint64_t addr, uint32_t rkey)
{
	hc_put64(p, addr);
	hc_put32(p + 8, rkey);
	hc_put32(p + 12, 0);
	return SEG;
}

static size_t put_data(uint8_t *p, uint32_t len, uint32_t lkey, uint64_t addr)
{
	hc_put32(p, len);
	hc_put32(p + 4, lkey);
	hc_put64(p + 8, addr);
	return SEG;
}

/* put_inline writes an inline segment of the buffers and returns its
 * padded size, or 0 if they exceed max_inline. */
static size_t put_inline(struct hc_qp *qp, uint8_t *p, size_t n, void *const *addrs, const size_t *lens)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += lens[i];
	if (total > qp->cap.max_inline_data)
		return 0;
	hc_put32(p, (uint32_t)total | HC_INLINE);
	size_t off = 4;
	for (size_t i = 0; i < n; i++) {
		memcpy(p + off, addrs[i], lens[i]);
		off += lens[i];
	}
	size_t padded = (off + SEG - 1) & ~(size_t)(SEG - 1);
	memset(p + off, 0, padded - off);
	return padded;
}

/* local_inv_segs writes LOCAL_INV's UMR control and mkey segments (the
 * mkey made free). */
static size_t local_inv_segs(uint8_t *p)
{
	memset(p, 0, 48 + 64);
	p[0] = 0x80;			 /* inline */
	hc_put64(p + 8, 1ULL << 29);	 /* mkey_mask: FREE */
	p[48] = 0x40;			 /* free */
	return 48 + 64;
}

static const struct {
	uint8_t op;
	uint8_t wc;
} send_ops[] = {
	[IBV_WR_RDMA_WRITE] = {HC_OP_RDMA_WRITE, IBV_WC_RDMA_WRITE},
	[IBV_WR_RDMA_WRITE_WITH_IMM] = {HC_OP_RDMA_WRITE_IMM, IBV_WC_RDMA_WRITE},
	[IBV_WR_SEND] = {HC_OP_SEND, IBV_WC_SEND},
	[IBV_WR_SEND_WITH_IMM] = {HC_OP_SEND_IMM, IBV_WC_SEND},
	[IBV_WR_RDMA_READ] = {HC_OP_RDMA_READ, IBV_WC_RDMA_READ},
	[IBV_WR_ATOMIC_CMP_AND_SWP] = {HC_OP_ATOMIC_CS, IBV_WC_COMP_SWAP},
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = {HC_OP_ATOMIC_FA, IBV_WC_FETCH_ADD},
	[IBV_WR_LOCAL_INV] = {HC_OP_UMR, IBV_WC_LOCAL_INV},
	[IBV_WR_SEND_WITH_INV] = {HC_OP_SEND_INV, IBV_WC_SEND},
	[IBV_WR_BIND_MW] = {HC_OP_UMR, IBV_WC_BIND_MW},
};

/* put_ud_dest fills a datagram segment's Q_Key and remote QPN (with
 * mlx5's extended-AV bit, MLX5_EXTENDED_UD_AV). */
static void put_ud_dest(uint8_t *av, uint32_t qpn, uint32_t qkey)
{
	hc_put32(av, qkey);
	hc_put32(av + 8, 0x80000000u | (qpn & 0xFFFFFF));
}

/* raw_frame writes a raw packet WQE's segments at p from the frame in sg
 * (n entries; with inl, the rest of the frame goes inline, and the lkeys
 * are not read): the Ethernet segment with the frame's first
 * HC_ETH_INLINE bytes inline, as mlx5's copy_eth_inline_headers copies
 * them, then data segments (or an inline segment) of the rest. It returns
 * the bytes written, or 0 with *err: EINVAL for a frame shorter than the
 * header or too many SGEs, ENOMEM for inline data past max_inline_data. */
static size_t raw_frame(struct hc_qp *qp, uint8_t *p, size_t n, const struct ibv_sge *sg, int inl, int *err)
{
	*err = EINVAL;
	if (n > 64)
		return 0;
	memset(p, 0, HC_ETH_SEG);
	hc_put16(p + 12, HC_ETH_INLINE);
	size_t j = 0, off = 0, got = 0;
	for (; j < n && got < HC_ETH_INLINE; j++) {
		size_t k = sg[j].length < HC_ETH_INLINE - got ? sg[j].length : HC_ETH_INLINE - got;
		memcpy(p + 14 + got, (void *)(uintptr_t)sg[j].addr, k);
		got += k;
		off = k;
	}
	if (got < HC_ETH_INLINE)
		return 0; /* "Ethernet headers < 16 bytes" */
	if (j > 0 && off < sg[j - 1].length)
		j--; /* the rest starts inside this entry */
	else
		off = 0;
	size_t len = HC_ETH_SEG;
	if (inl) {
		void *addrs[64];
		size_t lens[64], m = 0;
		for (; j < n; j++, off = 0) {
			addrs[m] = (void *)(uintptr_t)(sg[j].addr + off);
			lens[m++] = sg[j].length - off;
		}
		size_t k = m ? put_inline(qp, p + len, m, addrs, lens) : 0;
		if (m && !k) {
			*err = ENOMEM;
			return 0;
		}
		return len + k;
	}
	if (n - j > qp->cap.max_send_sge)
		return 0;
	for (; j < n; j++, off = 0)
		if (sg[j].length > off)
			len += put_data(p + len, (uint32_t)(sg[j].length - off), sg[j].lkey, sg[j].addr + off);
	return len;
}

/* post_one builds one WR's WQE and commits it. Called with smu held. */
static int post_one(struct hc_qp *qp, struct ibv_send_wr *wr)
{
	if ((unsigned)wr->opcode >= sizeof send_ops / sizeof send_ops[0] || !send_ops[wr->opcode].op)
		return EINVAL;
	uint8_t *p = qp->scratch + SEG;
	size_t n = SEG;
	uint8_t imm[4] = {0};
	enum ibv_wr_opcode op = wr->opcode;
	int atomic = op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
	int ud = qp->qpx.qp_base.qp_type == IBV_QPT_UD;
	if (ud && ((op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM) || !wr->wr.ud.ah))
		return EINVAL; /* UD sends only, each to an address handle */
	if (qp->qpx.qp_base.qp_type == IBV_QPT_RAW_PACKET) {
		/* Frames only; no checksum offload or TSO is advertised, so
		 * mlx5's provider refuses IBV_SEND_IP_CSUM and IBV_WR_TSO. */
		if (op != IBV_WR_SEND || (wr->send_flags & IBV_SEND_IP_CSUM) || wr->num_sge < 0)
			return EINVAL;
		int err;
		size_t k = raw_frame(qp, p, (size_t)wr->num_sge, wr->sg_list, wr->send_flags & IBV_SEND_INLINE, &err);
		if (!k)
			return err;
		n += k;
		put_ctrl(qp, HC_OP_SEND, n, get_fence(qp, 0, wr->send_flags & IBV_SEND_FENCE),
			 (wr->send_flags & IBV_SEND_SIGNALED) || qp->sig_all, wr->send_flags & IBV_SEND_SOLICITED, imm);
		return commit(qp, n, wr->wr_id, IBV_WC_SEND, 0);
	}
	switch (op) {
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		memcpy(imm, &wr->imm_data, 4); /* already big-endian */
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		hc_put32(imm, wr->invalidate_rkey);
		break;
	case IBV_WR_BIND_MW:
		if (!wr->bind_mw.mw || (wr->bind_mw.bind_info.length && !wr->bind_mw.bind_info.mr))
			return EINVAL;
		if (wr->bind_mw.bind_info.length > 1UL << 31)
			return EOPNOTSUPP; /* as mlx5: a KLM maps at most 2 GiB */
		hc_put32(imm, wr->bind_mw.mw->rkey);
		break;
	default:
		break;
	}
	if (qp->qpx.qp_base.qp_type == IBV_QPT_XRC_SEND && op != IBV_WR_BIND_MW && op != IBV_WR_LOCAL_INV) {
		/* mlx5's XRC segment: the remote SRQ, after the control. */
		memset(p, 0, HC_XRC_SEG);
		hc_put32(p, wr->qp_type.xrc.remote_srqn & 0xFFFFFF);
		p += HC_XRC_SEG;
		n += HC_XRC_SEG;
	}
	if (ud) {
		memcpy(p, hc_ah(wr->wr.ud.ah)->av, HC_DATAGRAM_SEG);
		put_ud_dest(p, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
		n += HC_DATAGRAM_SEG;
	}
	if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ)
		n += put_raddr(p, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
	if (atomic) {
		n += put_raddr(p, wr->wr.atomic.remote_addr, wr->wr.atomic.rkey);
		uint8_t *s = qp->scratch + n;
		hc_put64(s, op == IBV_WR_ATOMIC_CMP_AND_SWP ? wr->wr.atomic.swap : wr->wr.atomic.compare_add);
		hc_put64(s + 8, op == IBV_WR_ATOMIC_CMP_AND_SWP ? wr->wr.atomic.compare_add : 0);
		n += SEG;
	}
	if (op == IBV_WR_LOCAL_INV) {
		n += local_inv_segs(qp->scratch + n);
	} else if (op == IBV_WR_BIND_MW) {
		n += hc_bind_segs(qp->scratch + n, wr->bind_mw.mw->type, wr->bind_mw.rkey, &wr->bind_mw.bind_info,
				  qp->qpx.qp_base.qp_num);
	} else if ((wr->send_flags & IBV_SEND_INLINE) && wr->num_sge && op != IBV_WR_RDMA_READ && !atomic) {
		/* rdma-core writes an inline segment only for a WR with SGEs. */
		void *addrs[64];
		size_t lens[64];
		if (wr->num_sge < 0 || wr->num_sge > 64)
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			addrs[i] = (void *)(uintptr_t)wr->sg_list[i].addr;
			lens[i] = wr->sg_list[i].length;
		}
		size_t k = put_inline(qp, qp->scratch + n, (size_t)wr->num_sge, addrs, lens);
		if (!k)
			return ENOMEM;
		n += k;
	} else {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge || (atomic && wr->num_sge != 1))
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++)
			if (wr->sg_list[i].length) /* as rdma-core: no segment for an SGE of length 0 */
				n += put_data(qp->scratch + n, wr->sg_list[i].length, wr->sg_list[i].lkey, wr->sg_list[i].addr);
	}
	int local = op == IBV_WR_LOCAL_INV;
	put_ctrl(qp, send_ops[op].op, n, get_fence(qp, local, wr->send_flags & IBV_SEND_FENCE),
		 (wr->send_flags & IBV_SEND_SIGNALED) || qp->sig_all, wr->send_flags & IBV_SEND_SOLICITED, imm);
	return commit(qp, n, wr->wr_id, send_ops[op].wc, local || op == IBV_WR_BIND_MW);
}

/* publish_sq stores the send counter in the doorbell record. Called with
 * smu held, so that the counter only moves forward. */
static void publish_sq(struct hc_qp *qp) { hc_store32(qp->db + 4, qp->cur_post); }

/* ring_sq rings after publish_sq unless the device's send engine will read
 * the counter anyway (both accesses sequentially consistent; a ring is
 * idempotent, so it needs no lock). */
static void ring_sq(struct hc_qp *qp)
{
	if (hc_load32(qp->db + 8) == 0)
		hc_notify(qp->ctx, HC_T_RING_SQ, qp->qpx.qp_base.qp_num);
}

static int can_post_send(enum ibv_qp_state s)
{
	return s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE || s == IBV_QPS_ERR;
}

int hc_post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct hc_qp *qp = hc_qp(q);
	int err = 0, posted = 0;
	pthread_mutex_lock(&qp->smu);
	if (!qp->sq && wr) {
		err = ENOMEM; /* an XRC target: a send queue of no WQEs */
		*bad = wr;
	} else if (!can_post_send(q->state)) {
		err = EINVAL;
		*bad = wr;
	}
	for (; wr && !err; wr = wr->next) {
		err = post_one(qp, wr);
		if (err)
			*bad = wr;
		else
			posted++;
	}
	if (posted)
		publish_sq(qp);
	pthread_mutex_unlock(&qp->smu);
	if (posted)
		ring_sq(qp);
	return err;
}

int hc_post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct hc_qp *qp = hc_qp(q);
	int err = 0, posted = 0;
	pthread_mutex_lock(&qp->rmu);
	uint16_t size = (uint16_t)(1u << qp->rq_log);
	size_t stride = (size_t)1 << qp->rq_shift;
	if ((q->qp_type == IBV_QPT_XRC_SEND || q->qp_type == IBV_QPT_XRC_RECV || qp->ind) && wr) {
		err = ENOMEM; /* an XRC or RSS QP has a receive queue of no WQEs, in any state */
		*bad = wr;
	} else if (q->state == IBV_QPS_RESET) {
		err = EINVAL;
		*bad = wr;
	} else if (qp->srq && wr) {
		err = ENOMEM; /* as mlx5: a QP on an SRQ has a receive queue of no WQEs */
		*bad = wr;
	}
	for (; wr && !err; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_recv_sge) {
			err = EINVAL;
		} else if ((uint16_t)(qp->rq_head - qp->rq_tail) >= size) {
			err = ENOMEM;
		}
		if (err) {
			*bad = wr;
			break;
		}
		uint16_t slot = qp->rq_head & (size - 1);
		uint8_t *w = qp->rq + slot * stride;
		size_t k = 0;
		for (int i = 0; i < wr->num_sge; i++, k += SEG)
			put_data(w + k, wr->sg_list[i].length, wr->sg_list[i].lkey, wr->sg_list[i].addr);
		if (k < stride)
			put_data(w + k, 0, HC_TERMINATOR_LKEY, 0);
		qp->rwrid[slot] = wr->wr_id;
		qp->rq_head++;
		posted++;
	}
	if (posted)
		hc_store32(qp->db, qp->rq_head); /* under rmu: the counter only moves forward */
	pthread_mutex_unlock(&qp->rmu);
	if (posted)
		hc_notify(qp->ctx, HC_T_RING_RQ, q->qp_num);
	return err;
}

/* Completions. */

static enum ibv_wc_status status_of(uint8_t syndrome)
{
	switch (syndrome) {
	case 0x01:
		return IBV_WC_LOC_LEN_ERR;
	case 0x02:
		return IBV_WC_LOC_QP_OP_ERR;
	case 0x04:
		return IBV_WC_LOC_PROT_ERR;
	case 0x05:
		return IBV_WC_WR_FLUSH_ERR;
	case 0x06:
		return IBV_WC_MW_BIND_ERR;
	case 0x10:
		return IBV_WC_BAD_RESP_ERR;
	case 0x11:
		return IBV_WC_LOC_ACCESS_ERR;
	case 0x12:
		return IBV_WC_REM_INV_REQ_ERR;
	case 0x13:
		return IBV_WC_REM_ACCESS_ERR;
	case 0x14:
		return IBV_WC_REM_OP_ERR;
	case 0x15:
		return IBV_WC_RETRY_EXC_ERR;
	case 0x16:
		return IBV_WC_RNR_RETRY_EXC_ERR;
	case 0x22:
		return IBV_WC_REM_ABORT_ERR;
	}
	return IBV_WC_GENERAL_ERR;
}

void hc_send_done(struct hc_qp *qp, const uint8_t *e, struct ibv_wc *wc)
{
	uint16_t counter = hc_get16(e + 60);
	/* Without smu, as mlx5's poll: a slot's records are not rewritten
	 * until sq_tail has passed it, and only the poller (under the CQ's
	 * lock) moves sq_tail. A poll between ibv_wr_start and
	 * ibv_wr_complete (which hold smu) does not wait. */
	uint16_t slot = counter & (uint16_t)((1u << qp->sq_log) - 1);
	wc->wr_id = qp->wrid[slot];
	wc->opcode = (enum ibv_wc_opcode)qp->wrop[slot];
	atomic_store(&qp->sq_tail, (uint16_t)(counter + qp->nbb[slot]));
	wc->byte_len = hc_get32(e + 44);
	if ((e[63] >> 4) == HC_CQE_REQ_ERR) {
		wc->status = status_of(e[55]);
		wc->vendor_err = e[54];
		hc_qp_saw_error(qp);
	}
}

void hc_recv_done(struct hc_qp *qp, const uint8_t *e, struct ibv_wc *wc)
{
	uint16_t counter = hc_get16(e + 60);
	if (qp->srq) {
		wc->wr_id = hc_srq_free(qp->srq, counter);
	} else {
		pthread_mutex_lock(&qp->rmu);
		uint16_t slot = counter & (uint16_t)((1u << qp->rq_log) - 1);
		wc->wr_id = qp->rwrid[slot];
		qp->rq_tail = counter + 1;
		pthread_mutex_unlock(&qp->rmu);
	}
	hc_recv_fields(e, wc);
	wc->src_qp = qp->attr.dest_qp_num;
	if (qp->qpx.qp_base.qp_type == IBV_QPT_UD) {
		/* flags_rqpn: the source QP, whether a GRH heads the buffer, and
		 * the SL field, which on RoCE is the packet type (bit 3 UDP, bits
		 * 2:0 the L3 header: 0 GRH, 1 IPv6, 2 IPv4) as mlx5 reports it. */
		uint32_t fr = hc_get32(e + 24);
		wc->src_qp = fr & 0xFFFFFF;
		wc->sl = (uint8_t)(fr >> 24 & 0xF);
		if ((fr >> 28) & 3)
			wc->wc_flags |= IBV_WC_GRH;
	}
	if ((e[63] >> 4) == HC_CQE_RESP_ERR)
		hc_qp_saw_error(qp);
}

/* hc_recv_fields decodes what a receive CQE says of any QP: the opcode,
 * length, immediate or invalidated key, and the status. */
void hc_recv_fields(const uint8_t *e, struct ibv_wc *wc)
{
	wc->opcode = IBV_WC_RECV;
	wc->byte_len = hc_get32(e + 44);
	wc->slid = 0; /* a RoCE port: no LIDs */
	switch (e[63] >> 4) {
	case HC_CQE_RESP_WR_IMM:
		wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		/* fall through */
	case HC_CQE_RESP_SEND_IMM:
		memcpy(&wc->imm_data, e + 36, 4);
		wc->wc_flags |= IBV_WC_WITH_IMM;
		break;
	case HC_CQE_RESP_SEND_INV:
		wc->invalidated_rkey = hc_get32(e + 36);
		wc->wc_flags |= IBV_WC_WITH_INV;
		break;
	case HC_CQE_RESP_ERR:
		wc->status = status_of(e[55]);
		wc->vendor_err = e[54];
		break;
	}
}

/* The ibv_qp_ex work-request API: each opcode call starts a WQE in
 * scratch, the setters add its data, and the next call (or wr_complete)
 * commits it. An error anywhere fails wr_complete and drops every WQE of
 * the batch, as mlx5's provider does. */

static struct hc_qp *qpx_qp(struct ibv_qp_ex *x) { return (struct hc_qp *)x; }

static void wr_close(struct hc_qp *qp)
{
	if (!qp->wr_open)
		return;
	qp->wr_open = 0;
	if (qp->wr_err)
		return;
	put_ctrl(qp, qp->wr_opc, qp->wr_len,
		 get_fence(qp, qp->wr_opc == HC_OP_UMR, qp->wr_flags_cur & IBV_SEND_FENCE),
		 (qp->wr_flags_cur & IBV_SEND_SIGNALED) || qp->sig_all, qp->wr_flags_cur & IBV_SEND_SOLICITED,
		 (uint8_t *)&qp->wr_imm);
	int err = commit(qp, qp->wr_len, qp->wr_id_cur, qp->wr_wcop, qp->wr_opc == HC_OP_UMR);
	if (err)
		qp->wr_err = err;
}

void hc_wr_close(struct hc_qp *qp) { wr_close(qp); }

/* wr_open starts a WQE of the given opcode; imm is in wire order. */
static struct hc_qp *wr_open(struct ibv_qp_ex *x, uint8_t opc, uint8_t wcop, uint32_t imm_wire)
{
	struct hc_qp *qp = qpx_qp(x);
	wr_close(qp);
	hc_dv_wr_close(qp);
	qp->wr_open = 1;
	qp->wr_opc = opc;
	qp->wr_wcop = wcop;
	qp->wr_imm = imm_wire;
	qp->wr_id_cur = x->wr_id;
	qp->wr_flags_cur = x->wr_flags;
	qp->wr_len = SEG;
	if (qp->qpx.qp_base.qp_type == IBV_QPT_UD) {
		/* The datagram segment, which ibv_wr_set_ud_addr fills. */
		memset(qp->scratch + SEG, 0, HC_DATAGRAM_SEG);
		qp->wr_len += HC_DATAGRAM_SEG;
	}
	if (qp->qpx.qp_base.qp_type == IBV_QPT_RAW_PACKET && opc != HC_OP_SEND)
		qp->wr_err = EINVAL; /* frames only */
	if (qp->qpx.qp_base.qp_type == IBV_QPT_XRC_SEND && opc != HC_OP_UMR) {
		/* The XRC segment, which ibv_wr_set_xrc_srqn fills. */
		memset(qp->scratch + SEG, 0, HC_XRC_SEG);
		qp->wr_len += HC_XRC_SEG;
	}
	return qp;
}

static uint32_t be(uint32_t v) { return htobe32(v); }

static void x_send(struct ibv_qp_ex *x) { wr_open(x, HC_OP_SEND, IBV_WC_SEND, 0); }
static void x_send_imm(struct ibv_qp_ex *x, __be32 imm) { wr_open(x, HC_OP_SEND_IMM, IBV_WC_SEND, imm); }
static void x_send_inv(struct ibv_qp_ex *x, uint32_t rkey) { wr_open(x, HC_OP_SEND_INV, IBV_WC_SEND, be(rkey)); }

static void x_rdma(struct ibv_qp_ex *x, uint8_t opc, uint8_t wcop, uint32_t rkey, uint64_t addr, uint32_t imm)
{
	struct hc_qp *qp = wr_open(x, opc, wcop, imm);
	qp->wr_len += put_raddr(qp->scratch + qp->wr_len, addr, rkey);
}

static void x_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	x_rdma(x, HC_OP_RDMA_WRITE, IBV_WC_RDMA_WRITE, rkey, addr, 0);
}
static void x_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	x_rdma(x, HC_OP_RDMA_WRITE_IMM, IBV_WC_RDMA_WRITE, rkey, addr, imm);
}
static void x_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	x_rdma(x, HC_OP_RDMA_READ, IBV_WC_RDMA_READ, rkey, addr, 0);
}

static void x_atomic(struct ibv_qp_ex *x, uint8_t opc, uint8_t wcop, uint32_t rkey, uint64_t addr, uint64_t swap_add,
		     uint64_t compare)
{
	struct hc_qp *qp = wr_open(x, opc, wcop, 0);
	qp->wr_len += put_raddr(qp->scratch + qp->wr_len, addr, rkey);
	hc_put64(qp->scratch + qp->wr_len, swap_add);
	hc_put64(qp->scratch + qp->wr_len + 8, compare);
	qp->wr_len += SEG;
}
static void x_cas(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	x_atomic(x, HC_OP_ATOMIC_CS, IBV_WC_COMP_SWAP, rkey, addr, swap, compare);
}
static void x_fadd(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	x_atomic(x, HC_OP_ATOMIC_FA, IBV_WC_FETCH_ADD, rkey, addr, add, 0);
}

static void x_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct hc_qp *qp = wr_open(x, HC_OP_UMR, IBV_WC_LOCAL_INV, be(rkey));
	qp->wr_len += local_inv_segs(qp->scratch + qp->wr_len);
}

static void x_bad(struct ibv_qp_ex *x)
{
	struct hc_qp *qp = qpx_qp(x);
	wr_close(qp);
	if (!qp->wr_err)
		qp->wr_err = EOPNOTSUPP;
}
/* x_bind_mw is mlx5_send_wr_bind_mw: always the type 2 form, with the
 * caller's new rkey (the window's rkey field is left to the caller). */
static void x_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *b)
{
	struct hc_qp *qp = qpx_qp(x);
	int err = !mw || !b || (b->length && !b->mr) ? EINVAL : b->length > 1UL << 31 ? EOPNOTSUPP : 0;
	if (err) {
		wr_close(qp);
		if (!qp->wr_err)
			qp->wr_err = err;
		return;
	}
	qp = wr_open(x, HC_OP_UMR, IBV_WC_BIND_MW, be(mw->rkey));
	qp->wr_len += hc_bind_segs(qp->scratch + qp->wr_len, IBV_MW_TYPE_2, rkey, b, qp->qpx.qp_base.qp_num);
}
static void x_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t sz, uint16_t mss)
{
	(void)hdr;
	(void)sz;
	(void)mss;
	HC_UNIMPLEMENTED("ibv_wr_send_tso");
	x_bad(x);
}
static void x_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct hc_qp *qp = qpx_qp(x);
	if (qp->qpx.qp_base.qp_type != IBV_QPT_UD || !qp->wr_open || !ah) {
		if (!qp->wr_err)
			qp->wr_err = EINVAL; /* only a UD QP's open WR has a UD address */
		return;
	}
	uint8_t *av = qp->scratch + SEG;
	memcpy(av, hc_ah(ah)->av, HC_DATAGRAM_SEG);
	put_ud_dest(av, qpn, qkey);
}
static void x_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	struct hc_qp *qp = qpx_qp(x);
	if (qp->qpx.qp_base.qp_type != IBV_QPT_XRC_SEND || !qp->wr_open || qp->wr_opc == HC_OP_UMR) {
		if (!qp->wr_err)
			qp->wr_err = EINVAL; /* only an XRC initiator's open send names an SRQ */
		return;
	}
	hc_put32(qp->scratch + SEG, srqn & 0xFFFFFF);
}
static void x_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *v)
{
	(void)rkey;
	(void)addr;
	(void)v;
	HC_UNIMPLEMENTED("ibv_wr_atomic_write");
	x_bad(x);
}

/* A data setter must follow an opcode that takes data. */
static int wants_data(struct hc_qp *qp)
{
	if (!qp->wr_open || qp->wr_err)
		return 0;
	if (qp->wr_opc == HC_OP_UMR) {
		qp->wr_err = EINVAL;
		return 0;
	}
	return 1;
}

static void x_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg)
{
	struct hc_qp *qp = qpx_qp(x);
	if (!wants_data(qp))
		return;
	if (qp->qpx.qp_base.qp_type == IBV_QPT_RAW_PACKET) {
		int err;
		size_t k = raw_frame(qp, qp->scratch + qp->wr_len, n, sg, 0, &err);
		if (!k)
			qp->wr_err = err;
		qp->wr_len += k;
		wr_close(qp);
		return;
	}
	int atomic = qp->wr_opc == HC_OP_ATOMIC_CS || qp->wr_opc == HC_OP_ATOMIC_FA;
	if (n > qp->cap.max_send_sge || (atomic && n != 1)) {
		qp->wr_err = EINVAL;
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (sg[i].length) /* as rdma-core's set_sge(_list): none for length 0 */
			qp->wr_len += put_data(qp->scratch + qp->wr_len, sg[i].length, sg[i].lkey, sg[i].addr);
	wr_close(qp);
}

static void x_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};
	x_sge_list(x, 1, &s);
}

static void x_inline_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *b)
{
	struct hc_qp *qp = qpx_qp(x);
	if (!wants_data(qp))
		return;
	if (qp->wr_opc == HC_OP_RDMA_READ || qp->wr_opc == HC_OP_ATOMIC_CS || qp->wr_opc == HC_OP_ATOMIC_FA ||
	    n > 64) {
		qp->wr_err = EINVAL;
		return;
	}
	if (qp->qpx.qp_base.qp_type == IBV_QPT_RAW_PACKET) {
		struct ibv_sge sg[64];
		for (size_t i = 0; i < n; i++)
			sg[i] = (struct ibv_sge){.addr = (uintptr_t)b[i].addr, .length = (uint32_t)b[i].length};
		int err;
		size_t k = raw_frame(qp, qp->scratch + qp->wr_len, n, sg, 1, &err);
		if (!k)
			qp->wr_err = err;
		qp->wr_len += k;
		wr_close(qp);
		return;
	}
	void *addrs[64];
	size_t lens[64];
	for (size_t i = 0; i < n; i++) {
		addrs[i] = b[i].addr;
		lens[i] = b[i].length;
	}
	size_t k = put_inline(qp, qp->scratch + qp->wr_len, n, addrs, lens);
	if (!k) {
		qp->wr_err = ENOMEM;
		return;
	}
	qp->wr_len += k;
	wr_close(qp);
}

static void x_inline(struct ibv_qp_ex *x, void *addr, size_t len)
{
	struct ibv_data_buf b = {.addr = addr, .length = len};
	x_inline_list(x, 1, &b);
}

static void x_start(struct ibv_qp_ex *x)
{
	struct hc_qp *qp = qpx_qp(x);
	pthread_mutex_lock(&qp->smu);
	qp->wr_err = can_post_send(x->qp_base.state) ? 0 : EINVAL;
	qp->wr_open = 0;
	qp->mk = NULL;
	qp->wr_start_post = qp->cur_post;
	qp->wr_start_fm = qp->fm_cache;
}

static int x_complete(struct ibv_qp_ex *x)
{
	struct hc_qp *qp = qpx_qp(x);
	wr_close(qp);
	hc_dv_wr_close(qp);
	int err = qp->wr_err;
	uint16_t cur = qp->cur_post;
	if (err) {
		qp->cur_post = qp->wr_start_post; /* the whole batch is dropped */
		qp->fm_cache = qp->wr_start_fm;
	}
	int posted = !err && cur != qp->wr_start_post;
	if (posted)
		publish_sq(qp);
	pthread_mutex_unlock(&qp->smu);
	if (posted)
		ring_sq(qp);
	return err;
}

static void x_abort(struct ibv_qp_ex *x)
{
	struct hc_qp *qp = qpx_qp(x);
	qp->wr_open = 0;
	qp->mk = NULL;
	qp->cur_post = qp->wr_start_post;
	qp->fm_cache = qp->wr_start_fm;
	pthread_mutex_unlock(&qp->smu);
}

static void qpx_init(struct hc_qp *qp)
{
	struct ibv_qp_ex *x = &qp->qpx;
	x->wr_atomic_cmp_swp = x_cas;
	x->wr_atomic_fetch_add = x_fadd;
	x->wr_bind_mw = x_bind_mw;
	x->wr_local_inv = x_local_inv;
	x->wr_rdma_read = x_read;
	x->wr_rdma_write = x_write;
	x->wr_rdma_write_imm = x_write_imm;
	x->wr_send = x_send;
	x->wr_send_imm = x_send_imm;
	x->wr_send_inv = x_send_inv;
	x->wr_send_tso = x_send_tso;
	x->wr_set_ud_addr = x_ud_addr;
	x->wr_set_xrc_srqn = x_xrc_srqn;
	x->wr_set_inline_data = x_inline;
	x->wr_set_inline_data_list = x_inline_list;
	x->wr_set_sge = x_sge;
	x->wr_set_sge_list = x_sge_list;
	x->wr_start = x_start;
	x->wr_complete = x_complete;
	x->wr_abort = x_abort;
	x->wr_atomic_write = x_atomic_write;
}

/* hc_umr_modify changes an mkey's access flags and PD in place, with a UMR
 * WQE, as the kernel's mlx5 driver rereg's an MR without changing its
 * keys. The UMR goes on a QP of the mkey's current PD (the device checks
 * it), made for the purpose and connected to itself; it is destroyed
 * after. It returns an errno. */
int hc_umr_modify(struct ibv_pd *cur_pd, uint32_t key, int change_access, uint8_t access, struct ibv_pd *new_pd)
{
	struct ibv_context *c = cur_pd->context;
	struct ibv_cq *cq = ibv_create_cq(c, 2, NULL, NULL, 0);
	if (!cq)
		return errno;
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *q = ibv_create_qp(cur_pd, &ia);
	int err = q ? 0 : errno;
	if (!err) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
		err = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	}
	if (!err) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = q->qp_num,
					.ah_attr = {.is_global = 1, .port_num = 1}, .min_rnr_timer = 12};
		unsigned type;
		hc_gid_entry(hc_ctx(c), 3, &a.ah_attr.grh.dgid, &type);
		a.ah_attr.grh.sgid_index = 3;
		err = ibv_modify_qp(q, &a,
				    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	}
	if (!err) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7};
		err = ibv_modify_qp(q, &a,
				    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					    IBV_QP_MAX_QP_RD_ATOMIC);
	}
	if (!err) {
		struct hc_qp *qp = hc_qp(q);
		pthread_mutex_lock(&qp->smu);
		uint8_t *u = qp->scratch + SEG, *mk = u + 48;
		memset(u, 0, 48 + 64);
		uint64_t mask = 0;
		if (change_access)
			mask |= 1ULL << 17 | 1ULL << 18 | 1ULL << 19 | 1ULL << 20 | 1ULL << 21; /* LR LW RR RW A */
		if (new_pd)
			mask |= 1ULL << 7; /* PD */
		hc_put64(u + 8, mask);
		mk[2] = access;
		hc_put32(mk + 12, new_pd ? new_pd->handle & 0xFFFFFF : 0);
		uint8_t imm[4];
		hc_put32(imm, key);
		put_ctrl(qp, HC_OP_UMR, SEG + 48 + 64, HC_FENCE_SMALL, 1, 0, imm);
		err = commit(qp, SEG + 48 + 64, 0, IBV_WC_DRIVER1, 1);
		if (!err)
			publish_sq(qp);
		pthread_mutex_unlock(&qp->smu);
		if (!err)
			ring_sq(qp);
	}
	if (!err) {
		struct ibv_wc wc;
		int n = 0;
		for (int i = 0; i < 5000000 && n == 0; i++) /* a bounded wait, seconds at most */
			n = ibv_poll_cq(cq, 1, &wc);
		err = n == 1 ? (wc.status == IBV_WC_SUCCESS ? 0 : EINVAL) : ETIMEDOUT;
	}
	if (q)
		ibv_destroy_qp(q);
	ibv_destroy_cq(cq);
	return err;
}

/* ECE (enhanced connection establishment): the device has no ECE options,
 * and answers as an rdma-core provider without ECE support does, with
 * EOPNOTSUPP; librdmacm takes that as "none" and connects without. */
HC_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

HC_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}
