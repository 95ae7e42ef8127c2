/* Shared receive queues: the ring (mlx5's layout: a 16-byte next segment
 * at the head of every WQE links the free WQEs into a list; the doorbell
 * record is the posted counter) lives in this process, as a QP's does;
 * create, modify (the limit), query and destroy are commands. A receive
 * CQE of a QP on an SRQ names the SRQ's WQE, which goes back to the free
 * list once polled (hc_srq_free). */
#include <errno.h>
#include <string.h>

#include "hcasim.h"

#define SRQ_NEXT 16
#define SEG 16

static uint8_t log2ceil(size_t n)
{
	uint8_t l = 0;
	while (((size_t)1 << l) < n)
		l++;
	return l;
}

static uint8_t *srq_wqe(struct hc_srq *s, uint16_t i) { return s->ring + ((size_t)i << s->shift); }

/* create_srq creates a basic SRQ, or with dom and xcq an XRC SRQ. */
static struct ibv_srq *create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a, struct hc_xdom *dom,
				  struct hc_cq *xcq)
{
	struct hc_context *ctx = hc_ctx(pd->context);
	struct hc_caps *k = &ctx->caps;
	struct ibv_srq_attr *at = &a->attr;
	/* As mlx5: max_wr + 1 WQEs (the list's tail stays free), each a next
	 * segment and max_sge data segments, at least 32 bytes. mlx5 and the
	 * kernel take max_wr and max_sge 0 (an SRQ that holds no receive). */
	if (at->max_wr >= (1u << k->log_max_rq) || at->max_sge > k->max_sge ||
	    at->srq_limit > at->max_wr) {
		errno = EINVAL;
		return NULL;
	}
	struct hc_srq *s = hc_zalloc(sizeof *s);
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->ctx = ctx;
	s->log = log2ceil((size_t)at->max_wr + 1);
	s->shift = log2ceil(SRQ_NEXT + (size_t)at->max_sge * SEG);
	if (s->shift < 5)
		s->shift = 5;
	s->max_sge = (uint32_t)(((1u << s->shift) - SRQ_NEXT) / SEG);
	size_t n = (size_t)1 << s->log, ringb = n << s->shift;
	s->wrid = hc_zalloc(n * sizeof *s->wrid);
	int err = !s->wrid ? ENOMEM : hc_alloc_type_ok("MLX_SRQ_ALLOC_TYPE");
	if (!err)
		err = hc_dma_alloc(ctx, ringb + 64, &s->mem);
	if (err) {
		hc_zfree(s->wrid);
		hc_zfree(s);
		errno = err;
		return NULL;
	}
	s->ring = s->mem.addr;
	s->db = s->mem.addr + ringb;
	for (size_t i = 0; i < n; i++)
		hc_put16(srq_wqe(s, (uint16_t)i) + 2, (uint16_t)((i + 1) & (n - 1)));
	s->head = 0;
	s->tail = (uint16_t)(n - 1);
	uint8_t in[HC_SRQ_IN_XRC_SIZE] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_CREATE_SRQ);
	hc_put32(in + 8, pd->handle);
	in[16] = s->log;
	in[17] = s->shift;
	hc_put32(in + 20, at->srq_limit);
	hc_put64(in + 24, s->mem.iova);
	hc_put64(in + 32, s->mem.iova + ringb);
	if (dom) {
		hc_put32(in + 40, dom->num);
		hc_put32(in + 44, xcq->cqn);
	}
	err = hc_cmd(ctx, in, dom ? HC_SRQ_IN_XRC_SIZE : 40, out, sizeof out, NULL);
	if (!err) {
		s->srqn = hc_get32(out + 8) & 0xFFFFFF;
		err = hc_table_put(ctx, HC_TAB_SRQ, s->srqn, s);
		if (err) {
			uint8_t d[12];
			hc_cmd_header(d, HC_CMD_DESTROY_SRQ);
			hc_put32(d + 8, s->srqn);
			hc_cmd(ctx, d, sizeof d, out, sizeof out, NULL);
		}
	}
	if (err) {
		hc_dma_free(ctx, &s->mem);
		hc_zfree(s->wrid);
		hc_zfree(s);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->limit = at->srq_limit;
	s->xdom = dom;
	s->xcq = xcq;
	if (xcq)
		atomic_fetch_add(&xcq->nxrc, 1);
	at->max_wr = (uint32_t)n - 1;
	at->max_sge = s->max_sge;
	struct ibv_srq *q = &s->srq;
	q->context = pd->context;
	q->srq_context = a->srq_context;
	q->pd = pd;
	q->handle = s->srqn;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	return q;
}

HC_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	if (!hc_obj_live(pd, HC_OBJ_PD) || !a) {
		errno = EINVAL;
		return NULL;
	}
	return create_srq(pd, a, NULL, NULL);
}

HC_EXPORT int ibv_modify_srq(struct ibv_srq *q, struct ibv_srq_attr *a, int mask)
{
	if (!hc_obj_live(q, HC_OBJ_SRQ) || !a)
		return EINVAL;
	struct hc_srq *s = hc_srq(q);
	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	if (mask & IBV_SRQ_MAX_WR)
		return EINVAL; /* mlx5 cannot resize an SRQ */
	if (!(mask & IBV_SRQ_LIMIT))
		return 0;
	if (a->srq_limit > (1u << s->log) - 1)
		return EINVAL;
	uint8_t in[16] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_ARM_RQ);
	hc_put32(in + 8, s->srqn);
	hc_put32(in + 12, a->srq_limit);
	int err = hc_cmd(s->ctx, in, sizeof in, out, sizeof out, NULL);
	if (!err)
		s->limit = a->srq_limit;
	return err;
}

HC_EXPORT int ibv_query_srq(struct ibv_srq *q, struct ibv_srq_attr *a)
{
	if (!hc_obj_live(q, HC_OBJ_SRQ) || !a)
		return EINVAL;
	struct hc_srq *s = hc_srq(q);
	uint8_t in[12] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_QUERY_SRQ);
	hc_put32(in + 8, s->srqn);
	int err = hc_cmd(s->ctx, in, sizeof in, out, sizeof out, NULL);
	if (err)
		return err;
	a->max_wr = (1u << s->log) - 1;
	a->max_sge = s->max_sge;
	a->srq_limit = hc_get32(out + 8);
	return 0;
}

HC_EXPORT int ibv_destroy_srq(struct ibv_srq *q)
{
	if (!hc_obj_live(q, HC_OBJ_SRQ))
		return EINVAL;
	struct hc_srq *s = hc_srq(q);
	struct hc_context *ctx = s->ctx;
	uint8_t in[12] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_DESTROY_SRQ);
	hc_put32(in + 8, s->srqn);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err && err != EIO)
		return err;
	pthread_mutex_lock(&ctx->obj_mu);
	if (s->srqn < ctx->nsrqs && ctx->srqs[s->srqn] == s)
		ctx->srqs[s->srqn] = NULL;
	hc_purge_async(ctx, q);
	pthread_mutex_unlock(&ctx->obj_mu);
	if (s->xcq) { /* its CQEs go, as mlx5 cleans an XRC SRQ's CQ; no poller uses s after */
		hc_cq_clean(s->xcq, HC_CLEAN_SRQ, s);
		atomic_fetch_sub(&s->xcq->nxrc, 1);
	}	pthread_mutex_lock(&q->mutex);
	while (q->events_completed != s->async_reported)
		pthread_cond_wait(&q->cond, &q->mutex);
	pthread_mutex_unlock(&q->mutex);
	hc_dma_free(ctx, &s->mem);
	hc_zfree(s->wrid);
	hc_obj_del(q);
	hc_zfree(s);
	return 0;
}

/* hc_post_srq_recv is the context's post_srq_recv: mlx5's, WQEs taken
 * from the free list's head; ENOMEM when only its tail is left. */
int hc_post_srq_recv(struct ibv_srq *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct hc_srq *s = hc_srq(q);
	int err = 0, posted = 0;
	pthread_mutex_lock(&s->mu);
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > s->max_sge)
			err = EINVAL;
		else if (s->head == s->tail)
			err = ENOMEM;
		if (err) {
			*bad = wr;
			break;
		}
		uint8_t *w = srq_wqe(s, s->head);
		uint16_t next = hc_get16(w + 2);
		uint8_t *d = w + SRQ_NEXT;
		int i = 0;
		for (; i < wr->num_sge; i++) {
			hc_put32(d + i * SEG, wr->sg_list[i].length);
			hc_put32(d + i * SEG + 4, wr->sg_list[i].lkey);
			hc_put64(d + i * SEG + 8, wr->sg_list[i].addr);
		}
		if ((uint32_t)i < s->max_sge) {
			memset(d + i * SEG, 0, SEG);
			hc_put32(d + i * SEG + 4, HC_TERMINATOR_LKEY);
		}
		s->wrid[s->head] = wr->wr_id;
		s->head = next;
		s->counter++;
		posted++;
	}
	if (posted)
		hc_store32(s->db, s->counter);
	pthread_mutex_unlock(&s->mu);
	return err;
}

/* hc_srq_free returns WQE idx's WR ID and links the WQE behind the free
 * list's tail. */
uint64_t hc_srq_free(struct hc_srq *s, uint16_t idx)
{
	pthread_mutex_lock(&s->mu);
	idx &= (uint16_t)((1u << s->log) - 1);
	hc_put16(srq_wqe(s, s->tail) + 2, idx);
	s->tail = idx;
	uint64_t id = s->wrid[idx];
	pthread_mutex_unlock(&s->mu);
	return id;
}

/* hc_create_srq_ex is the context's create_srq_ex (ibv_create_srq_ex
 * calls it for what ibv_create_srq cannot take): a basic SRQ, with or
 * without a CQ named (mlx5 uses the CQ only for XRC and tag matching), or
 * an XRC SRQ, which needs its domain and CQ; tag-matching SRQs are not
 * modelled. */
struct ibv_srq *hc_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *a)
{
	const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			       IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	if (!a || (a->comp_mask & ~known) || !(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !hc_obj_live(a->pd, HC_OBJ_PD) ||
	    a->pd->context != c) {
		errno = a && (a->comp_mask & ~known) ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	enum ibv_srq_type t = a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE ? a->srq_type : IBV_SRQT_BASIC;
	if (t == IBV_SRQT_TM || t > IBV_SRQT_TM) {
		HC_UNIMPLEMENTED("ibv_create_srq_ex (tag matching)");
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct hc_xdom *dom = NULL;
	struct hc_cq *xcq = NULL;
	if (t == IBV_SRQT_XRC) {
		/* An XRC SRQ names its domain and the CQ its completions go to. */
		const uint32_t need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
		if ((a->comp_mask & need) != need || !a->xrcd || !a->cq || a->xrcd->context != c || a->cq->context != c) {
			errno = EINVAL;
			return NULL;
		}
		dom = ((struct hc_xrcd *)a->xrcd)->dom;
		xcq = hc_cq(a->cq);
	}
	struct ibv_srq_init_attr b = {.srq_context = a->srq_context, .attr = a->attr};
	struct ibv_srq *s = create_srq(a->pd, &b, dom, xcq);
	if (s)
		a->attr = b.attr;
	return s;
}

/* hc_get_srq_num is the context's get_srq_num: the SRQ's number, as mlx5
 * gives it for any SRQ. */
int hc_get_srq_num(struct ibv_srq *q, uint32_t *num)
{
	if (!q || !num)
		return EINVAL;
	*num = hc_srq(q)->srqn;
	return 0;
}
