/* Receive-side scaling: receive work queues (ibv_create_wq and friends),
 * indirection tables (ibv_create_rwq_ind_table) and RSS QPs
 * (ibv_create_qp_ex with IBV_QP_INIT_ATTR_IND_TABLE | _RX_HASH). A work
 * queue is a device raw packet QP without a send queue (its receive
 * queue, its CQ); a table lives here, in the context; an RSS QP is a
 * device QP that hashes the frames its flows take to the table's work
 * queues. The kernel's reference rules hold: a work queue in a table, or
 * a table an RSS QP uses, is EBUSY to destroy. */
#include <errno.h>
#include <string.h>

#include "hcasim.h"

struct hc_wq {
	struct ibv_wq wq;
	struct ibv_qp *qp; /* the device's receive queue */
	int refs;	   /* tables holding it, under the context's obj_mu */
};

struct hc_ind {
	struct ibv_rwq_ind_table t;
	uint32_t log;
	struct hc_wq **wqs;
	int refs; /* RSS QPs using it, under the context's obj_mu */
};

static int wq_post_recv(struct ibv_wq *w, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return ibv_post_recv(((struct hc_wq *)w)->qp, wr, bad);
}

struct ibv_wq *hc_create_wq(struct ibv_context *c, struct ibv_wq_init_attr *a)
{
	if (!a || a->wq_type != IBV_WQT_RQ || !a->pd || !a->cq || a->pd->context != c || a->cq->context != c ||
	    (a->comp_mask & ~(uint32_t)IBV_WQ_INIT_ATTR_FLAGS) ||
	    ((a->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && a->create_flags)) {
		/* No VLAN stripping, FCS scatter, padding or delay drop. */
		errno = a && a->wq_type == IBV_WQT_RQ && (a->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && a->create_flags
				? EOPNOTSUPP
				: EINVAL;
		return NULL;
	}
	struct hc_wq *w = hc_zalloc(sizeof *w);
	if (!w) {
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_RAW_PACKET, .send_cq = a->cq, .recv_cq = a->cq,
					 .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = a->pd,
					 .cap = {.max_send_wr = 1, .max_send_sge = 1, .max_recv_wr = a->max_wr,
						 .max_recv_sge = a->max_sge}};
	struct hc_qp_dv dv = {.dev_flags = HC_QPF_NO_SQ};
	w->qp = hc_create_qp(c, &qa, &dv);
	if (!w->qp) {
		hc_zfree(w);
		return NULL;
	}
	struct ibv_wq *q = &w->wq;
	q->context = c;
	q->wq_context = a->wq_context;
	q->pd = a->pd;
	q->cq = a->cq;
	q->wq_num = w->qp->qp_num;
	q->handle = w->qp->handle;
	q->state = IBV_WQS_RESET;
	q->wq_type = IBV_WQT_RQ;
	q->post_recv = wq_post_recv;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	a->max_wr = qa.cap.max_recv_wr;
	a->max_sge = qa.cap.max_recv_sge;
	return q;
}

/* The device QP of a work queue moves RESET → INIT → RTR for RDY. */
int hc_modify_wq(struct ibv_wq *q, struct ibv_wq_attr *a)
{
	struct hc_wq *w = (struct hc_wq *)q;
	const uint32_t known = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS;
	if (!a || (a->attr_mask & ~known))
		return EINVAL;
	if ((a->attr_mask & IBV_WQ_ATTR_FLAGS) && a->flags_mask)
		return EOPNOTSUPP;
	enum ibv_wq_state cur = (a->attr_mask & IBV_WQ_ATTR_CURR_STATE) ? a->curr_wq_state : q->state;
	if (!(a->attr_mask & IBV_WQ_ATTR_STATE))
		return 0;
	enum ibv_wq_state to = a->wq_state;
	struct ibv_qp_attr qa = {.port_num = 1};
	int err = 0;
	if (cur > IBV_WQS_ERR || to > IBV_WQS_ERR)
		return EINVAL;
	if (to == IBV_WQS_RESET) {
		qa.qp_state = IBV_QPS_RESET;
		err = ibv_modify_qp(w->qp, &qa, IBV_QP_STATE);
	} else if (to == IBV_WQS_ERR) {
		qa.qp_state = IBV_QPS_ERR;
		err = ibv_modify_qp(w->qp, &qa, IBV_QP_STATE);
	} else if (cur == IBV_WQS_RESET) {
		qa.qp_state = IBV_QPS_INIT;
		err = ibv_modify_qp(w->qp, &qa, IBV_QP_STATE | IBV_QP_PORT);
		qa.qp_state = IBV_QPS_RTR;
		if (!err)
			err = ibv_modify_qp(w->qp, &qa, IBV_QP_STATE);
	} else if (cur != IBV_WQS_RDY) {
		return EINVAL; /* ERR → RDY: through RESET */
	}
	if (!err)
		q->state = to;
	return err;
}

int hc_destroy_wq(struct ibv_wq *q)
{
	struct hc_wq *w = (struct hc_wq *)q;
	struct hc_context *ctx = hc_ctx(q->context);
	pthread_mutex_lock(&ctx->obj_mu);
	int busy = w->refs > 0;
	pthread_mutex_unlock(&ctx->obj_mu);
	if (busy)
		return EBUSY;
	int err = ibv_destroy_qp(w->qp);
	if (err)
		return err;
	hc_zfree(w);
	return 0;
}

struct ibv_rwq_ind_table *hc_create_ind_table(struct ibv_context *c, struct ibv_rwq_ind_table_init_attr *a)
{
	if (!a || a->comp_mask || a->log_ind_tbl_size > HC_RSS_MAX_LOG || !a->ind_tbl) {
		errno = EINVAL;
		return NULL;
	}
	size_t n = (size_t)1 << a->log_ind_tbl_size;
	for (size_t i = 0; i < n; i++)
		if (!a->ind_tbl[i] || a->ind_tbl[i]->context != c) {
			errno = EINVAL;
			return NULL;
		}
	struct hc_ind *t = hc_zalloc(sizeof *t);
	struct hc_wq **wqs = hc_zalloc(n * sizeof *wqs);
	if (!t || !wqs) {
		hc_zfree(t);
		hc_zfree(wqs);
		errno = ENOMEM;
		return NULL;
	}
	struct hc_context *ctx = hc_ctx(c);
	pthread_mutex_lock(&ctx->obj_mu);
	for (size_t i = 0; i < n; i++) {
		wqs[i] = (struct hc_wq *)a->ind_tbl[i];
		wqs[i]->refs++;
	}
	t->t.ind_tbl_num = ++ctx->next_ind;
	pthread_mutex_unlock(&ctx->obj_mu);
	t->log = a->log_ind_tbl_size;
	t->wqs = wqs;
	t->t.context = c;
	t->t.ind_tbl_handle = t->t.ind_tbl_num;
	return &t->t;
}

int hc_destroy_ind_table(struct ibv_rwq_ind_table *tb)
{
	struct hc_ind *t = (struct hc_ind *)tb;
	struct hc_context *ctx = hc_ctx(tb->context);
	pthread_mutex_lock(&ctx->obj_mu);
	int busy = t->refs > 0;
	if (!busy)
		for (size_t i = 0; i < (size_t)1 << t->log; i++)
			t->wqs[i]->refs--;
	pthread_mutex_unlock(&ctx->obj_mu);
	if (busy)
		return EBUSY;
	hc_zfree(t->wqs);
	hc_zfree(t);
	return 0;
}

void hc_ind_unref(struct hc_ind *t)
{
	struct hc_context *ctx = hc_ctx(t->t.context);
	pthread_mutex_lock(&ctx->obj_mu);
	t->refs--;
	pthread_mutex_unlock(&ctx->obj_mu);
}

/* hc_create_rss_qp makes an RSS QP: a raw packet QP with no queues whose
 * flows' frames go to the table's work queues by the Toeplitz hash of the
 * fields the hash configuration names, as mlx5's RSS QP (a TIR). */
struct ibv_qp *hc_create_rss_qp(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
	const uint32_t need = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
	const uint32_t known = need | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	struct ibv_rx_hash_conf *h = &a->rx_hash_conf;
	if ((a->comp_mask & need) != need || (a->comp_mask & ~known) || a->qp_type != IBV_QPT_RAW_PACKET || !a->pd ||
	    !a->rwq_ind_tbl || a->rwq_ind_tbl->context != c || a->pd->context != c || a->srq ||
	    h->rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ || h->rx_hash_key_len != HC_RSS_KEY || !h->rx_hash_key ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags)) {
		errno = EINVAL;
		return NULL;
	}
	if (h->rx_hash_fields_mask & ~(uint64_t)0xFF) {
		errno = EOPNOTSUPP; /* the IPsec SPI and inner headers are not hashed */
		return NULL;
	}
	if (!hc_net_raw()) {
		errno = EPERM;
		return NULL;
	}
	struct hc_context *ctx = hc_ctx(c);
	struct hc_ind *t = (struct hc_ind *)a->rwq_ind_tbl;
	size_t n = (size_t)1 << t->log;
	uint8_t in[120 + 4 * (1 << HC_RSS_MAX_LOG)] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_CREATE_QP);
	hc_put32(in + 8, a->pd->handle);
	hc_put32(in + 20, HC_QPF_RSS);
	in[26] = 4; /* log RQ stride: read by no one, but in range */
	in[27] = HC_QP_RAW;
	hc_put64(in + 64, h->rx_hash_fields_mask);
	in[72] = 1; /* Toeplitz */
	in[73] = HC_RSS_KEY;
	in[74] = (uint8_t)t->log;
	memcpy(in + 80, h->rx_hash_key, HC_RSS_KEY);
	for (size_t i = 0; i < n; i++)
		hc_put32(in + 120 + 4 * i, t->wqs[i]->wq.wq_num);
	struct hc_qp *qp = hc_zalloc(sizeof *qp);
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	int err = hc_cmd(ctx, in, 120 + 4 * n, out, sizeof out, NULL);
	if (err) {
		hc_zfree(qp);
		errno = err;
		return NULL;
	}
	qp->ctx = ctx;
	qp->ind = t;
	pthread_mutex_init(&qp->smu, NULL);
	pthread_mutex_init(&qp->rmu, NULL);
	pthread_mutex_lock(&ctx->obj_mu);
	t->refs++;
	pthread_mutex_unlock(&ctx->obj_mu);
	memset(&a->cap, 0, sizeof a->cap);
	struct ibv_qp *q = &qp->qpx.qp_base;
	q->pd = a->pd;
	q = hc_qp_publish(ctx, qp, a, hc_get32(out + 8) & 0xFFFFFF);
	if (!q)
		hc_ind_unref(t);
	return q;
}
