/* Completion queues: the CQ ring shared with the daemon, polled here
 * (ibv_poll_cq and the ibv_cq_ex start/next/end API), arming and
 * completion events. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcasim.h"

#define CQE_SIZE 64

/* next_cqe_at returns the CQE at index ci if the device has written it:
 * its last word is read with one load, then the rest. */
static uint8_t *next_cqe_at(struct hc_cq *cq, uint32_t ci)
{
	uint8_t *e = cq->ring + (size_t)(ci & ((1u << cq->log) - 1)) * CQE_SIZE;
	uint32_t last = hc_load32(e + 60);
	uint8_t op_own = (uint8_t)last;
	if ((op_own >> 4) == HC_CQE_INVALID || (op_own & 1) != ((ci >> cq->log) & 1))
		return NULL;
	return e;
}

/* next_cqe returns the CQE at the consumer index if the device has
 * written it. */
static uint8_t *next_cqe(struct hc_cq *cq) { return next_cqe_at(cq, cq->ci); }

/* to_wc turns the CQE into a work completion; it returns 0 for CQEs that
 * make none (signature errors, CQEs of QPs already destroyed). */
static int to_wc(struct hc_cq *cq, const uint8_t *e, struct ibv_wc *wc)
{
	int op = e[63] >> 4;
	if (op == HC_CQE_SIG_ERR) {
		hc_dv_sig_err(cq->ctx, e); /* recorded on the mkey for mlx5dv_mkey_check, not a completion */
		return 0;
	}
	uint32_t qpn = hc_get32(e + 56) & 0xFFFFFF;
	if (op != HC_CQE_REQ && op != HC_CQE_REQ_ERR && cq->nxrc) {
		int n = hc_xrc_wc(cq, e, wc); /* a receive of an XRC SRQ on this CQ: no QP of ours needed */
		if (n >= 0)
			return n;
	}
	struct hc_qp *qp =
		cq->cur_qp && cq->cur_qp->qpx.qp_base.qp_num == qpn ? cq->cur_qp : hc_find_qp_on(cq->ctx, qpn, cq);
	if (!qp)
		return 0;
	cq->cur_qp = qp;
	memset(wc, 0, sizeof *wc);
	wc->qp_num = qpn;
	switch (op) {
	case HC_CQE_REQ:
	case HC_CQE_REQ_ERR:
		hc_send_done(qp, e, wc);
		return 1;
	case HC_CQE_RESP_WR_IMM:
	case HC_CQE_RESP_SEND:
	case HC_CQE_RESP_SEND_IMM:
	case HC_CQE_RESP_SEND_INV:
	case HC_CQE_RESP_ERR:
		hc_recv_done(qp, e, wc);
		return 1;
	}
	return 0;
}

/* The device is a process of its own that shares this machine's CPUs: a
 * program that spins on an empty CQ takes them from it. After a run of
 * empty polls the poller yields its CPU once per poll (sched_yield), so
 * the device gets to run; any completion ends the run. */
#define YIELD_AFTER 64

static void empty_poll(struct hc_cq *cq)
{
	if (++cq->empty >= YIELD_AFTER)
		sched_yield();
}

int hc_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct hc_cq *cq = hc_cq(ibcq);
	int got = 0;
	if (n < 0)
		return -EINVAL;
	pthread_mutex_lock(&cq->lock);
	uint32_t ci0 = cq->ci;
	while (got < n) {
		uint8_t *e = next_cqe(cq);
		if (!e)
			break;
		cq->ci++;
		got += to_wc(cq, e, &wc[got]);
	}
	if (cq->ci != ci0) {
		hc_store32(cq->db, cq->ci & 0xFFFFFF);
		cq->empty = 0;
	}
	pthread_mutex_unlock(&cq->lock);
	if (!got && n > 0)
		empty_poll(cq);
	return got;
}

int hc_req_notify_cq(struct ibv_cq *ibcq, int solicited)
{
	struct hc_cq *cq = hc_cq(ibcq);
	pthread_mutex_lock(&cq->lock);
	cq->arm_sn++;
	uint32_t word = (uint32_t)(cq->arm_sn & 3) << 28 | (solicited ? 0x01000000u : 0) | (cq->ci & 0xFFFFFF);
	pthread_mutex_unlock(&cq->lock);
	return hc_arm(cq->ctx, cq->cqn, word);
}

/* hc_cq_event queues a completion event for the CQ's channel (the reader
 * thread calls it). */
void hc_cq_event(struct hc_context *ctx, uint32_t cqn)
{
	pthread_mutex_lock(&ctx->obj_mu);
	struct hc_cq *cq = cqn < ctx->ncqs ? ctx->cqs[cqn] : NULL;
	struct hc_channel *ch = cq ? cq->channel : NULL;
	if (ch) {
		pthread_mutex_lock(&ch->mu);
		if (ch->n == ch->cap) {
			size_t nc = ch->cap ? 2 * ch->cap : 16;
			struct hc_cq **q = hc_zalloc(nc * sizeof *q);
			if (q) {
				for (size_t i = 0; i < ch->n; i++)
					q[i] = ch->q[(ch->head + i) % ch->cap];
				hc_zfree(ch->q);
				ch->q = q;
				ch->head = 0;
				ch->cap = nc;
			}
		}
		if (ch->n < ch->cap) {
			ch->q[(ch->head + ch->n) % ch->cap] = cq;
			/* Under ch->mu: the channel cannot be destroyed while a
			 * CQ found in the table still uses it. */
			if (ch->n++ == 0)
				hc_evfd_set(ch->ch.fd);
		}
		pthread_mutex_unlock(&ch->mu);
	}
	pthread_mutex_unlock(&ctx->obj_mu);
}

/* ibv_cq_ex polling. The current completion is kept in cur. */
static int ex_fill(struct hc_cq *cq)
{
	for (;;) {
		uint8_t *e = next_cqe(cq);
		if (!e)
			return ENOENT;
		cq->ci++;
		if (to_wc(cq, e, &cq->cur)) {
			cq->cqx.wr_id = cq->cur.wr_id;
			cq->cqx.status = cq->cur.status;
			return 0;
		}
	}
}

static int ex_start_poll(struct ibv_cq_ex *x, struct ibv_poll_cq_attr *attr)
{
	struct hc_cq *cq = (struct hc_cq *)x;
	if (attr && attr->comp_mask)
		return EINVAL;
	pthread_mutex_lock(&cq->lock);
	int err = ex_fill(cq);
	if (err) {
		hc_store32(cq->db, cq->ci & 0xFFFFFF);
		pthread_mutex_unlock(&cq->lock);
		empty_poll(cq);
	} else {
		cq->empty = 0;
	}
	return err;
}

static int ex_next_poll(struct ibv_cq_ex *x) { return ex_fill((struct hc_cq *)x); }

static void ex_end_poll(struct ibv_cq_ex *x)
{
	struct hc_cq *cq = (struct hc_cq *)x;
	hc_store32(cq->db, cq->ci & 0xFFFFFF);
	pthread_mutex_unlock(&cq->lock);
}

#define CUR(x) (((struct hc_cq *)(x))->cur)
static enum ibv_wc_opcode ex_opcode(struct ibv_cq_ex *x) { return CUR(x).opcode; }
static uint32_t ex_vendor_err(struct ibv_cq_ex *x) { return CUR(x).vendor_err; }
static uint32_t ex_byte_len(struct ibv_cq_ex *x) { return CUR(x).byte_len; }
static __be32 ex_imm_data(struct ibv_cq_ex *x) { return CUR(x).imm_data; }
static uint32_t ex_qp_num(struct ibv_cq_ex *x) { return CUR(x).qp_num; }
static uint32_t ex_src_qp(struct ibv_cq_ex *x) { return CUR(x).src_qp; }
static unsigned ex_wc_flags(struct ibv_cq_ex *x) { return CUR(x).wc_flags; }
static uint32_t ex_slid(struct ibv_cq_ex *x) { return CUR(x).slid; }
static uint8_t ex_sl(struct ibv_cq_ex *x) { return CUR(x).sl; }
static uint8_t ex_dlid_path_bits(struct ibv_cq_ex *x) { return CUR(x).dlid_path_bits; }

/* The wc_flags an extended CQ can report. */
#define HC_WC_FLAGS IBV_WC_STANDARD_FLAGS

static struct hc_cq *create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			       int comp_vector)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, NULL);
	if (channel && !hc_obj_live(channel, HC_OBJ_CHANNEL)) {
		errno = EINVAL;
		return NULL;
	}
	struct hc_context *ctx = hc_ctx(c);
	if (cqe <= 0 || cqe > (1 << ctx->caps.log_max_cq) - 1 || comp_vector < 0 || comp_vector >= c->num_comp_vectors ||
	    (channel && channel->context != c)) {
		errno = EINVAL;
		return NULL;
	}
	uint8_t log = 0;
	while ((1u << log) < (unsigned)cqe + 1)
		log++;
	struct hc_cq *cq = hc_zalloc(sizeof *cq);
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	size_t ring = (size_t)CQE_SIZE << log;
	int err = hc_alloc_type_ok("MLX_CQ_ALLOC_TYPE");
	if (!err)
		err = hc_dma_alloc(ctx, ring + 64, &cq->mem);
	if (err) {
		hc_zfree(cq);
		errno = err;
		return NULL;
	}
	cq->ctx = ctx;
	cq->ring = cq->mem.addr;
	cq->db = cq->mem.addr + ring;
	cq->log = log;
	for (size_t i = 0; i < (1u << log); i++)
		cq->ring[i * CQE_SIZE + 63] = 0xF1; /* opcode INVALID, owner 1: mlx5's initialisation */
	pthread_mutex_init(&cq->lock, NULL);
	struct ibv_cq_ex *x = &cq->cqx;
	x->context = c;
	x->channel = channel;
	x->cq_context = cq_context;
	x->cqe = (1 << log) - 1;
	pthread_mutex_init(&x->mutex, NULL);
	pthread_cond_init(&x->cond, NULL);
	uint8_t in[32] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_CREATE_CQ);
	in[8] = log;
	hc_put64(in + 16, cq->mem.iova);
	hc_put64(in + 24, cq->mem.iova + ring);
	err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err) {
		hc_dma_free(ctx, &cq->mem);
		hc_zfree(cq);
		errno = err;
		return NULL;
	}
	cq->cqn = hc_get32(out + 8) & 0xFFFFFF;
	x->handle = cq->cqn;
	if (channel) {
		struct hc_channel *ch = (struct hc_channel *)channel;
		pthread_mutex_lock(&ch->mu);
		ch->ncq++;
		pthread_mutex_unlock(&ch->mu);
		cq->channel = ch;
	}
	/* In the table last: events and completions find it whole. */
	err = hc_table_put(ctx, HC_TAB_CQ, cq->cqn, cq);
	if (err) {
		ibv_destroy_cq(ibv_cq_ex_to_cq(x));
		errno = err;
		return NULL;
	}
	return cq;
}

HC_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct hc_cq *cq = create_cq(c, cqe, cq_context, channel, comp_vector);
	return cq ? ibv_cq_ex_to_cq(&cq->cqx) : NULL;
}

struct ibv_cq_ex *hc_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *a)
{
	if (!a) {
		errno = EINVAL;
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (a->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)))) {
		errno = EINVAL;
		return NULL;
	}
	if (a->wc_flags & ~(uint64_t)HC_WC_FLAGS) {
		errno = EOPNOTSUPP; /* timestamps, VLANs, flow tags, tag matching */
		return NULL;
	}
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (a->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct hc_cq *cq = create_cq(c, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector);
	if (!cq)
		return NULL;
	struct ibv_cq_ex *x = &cq->cqx;
	cq->ex = 1;
	x->start_poll = ex_start_poll;
	x->next_poll = ex_next_poll;
	x->end_poll = ex_end_poll;
	x->read_opcode = ex_opcode;
	x->read_vendor_err = ex_vendor_err;
	x->read_byte_len = ex_byte_len;
	x->read_imm_data = ex_imm_data;
	x->read_qp_num = ex_qp_num;
	x->read_src_qp = ex_src_qp;
	x->read_wc_flags = ex_wc_flags;
	x->read_slid = ex_slid;
	x->read_sl = ex_sl;
	x->read_dlid_path_bits = ex_dlid_path_bits;
	return x;
}

HC_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	HC_LIVE(ibcq, HC_OBJ_CQ, EINVAL);
	struct hc_cq *cq = hc_cq(ibcq);
	struct hc_context *ctx = cq->ctx;
	uint8_t in[12], out[64];
	hc_cmd_header(in, HC_CMD_DESTROY_CQ);
	hc_put32(in + 8, cq->cqn);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err && err != EIO)
		return err;
	pthread_mutex_lock(&ctx->obj_mu);
	if (cq->cqn < ctx->ncqs && ctx->cqs[cq->cqn] == cq)
		ctx->cqs[cq->cqn] = NULL;
	hc_purge_async(ctx, ibcq);
	struct hc_channel *ch = cq->channel;
	if (ch) {
		/* Drop its queued events, as the kernel does. */
		pthread_mutex_lock(&ch->mu);
		size_t k = 0;
		for (size_t i = 0; i < ch->n; i++) {
			struct hc_cq *q = ch->q[(ch->head + i) % ch->cap];
			if (q != cq)
				ch->q[(ch->head + k++) % ch->cap] = q;
		}
		if (ch->n && !k)
			hc_evfd_clear(ch->ch.fd);
		ch->n = k;
		ch->ncq--;
		pthread_mutex_unlock(&ch->mu);
	}
	pthread_mutex_unlock(&ctx->obj_mu);
	/* The events handed out must be acked first, as libibverbs waits: a
	 * thread may still hold the CQ from ibv_get_cq_event. */
	pthread_mutex_lock(&ibcq->mutex);
	while (ibcq->comp_events_completed != cq->comp_reported || ibcq->async_events_completed != cq->async_reported)
		pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
	pthread_mutex_unlock(&ibcq->mutex);
	hc_dma_free(ctx, &cq->mem);
	if (cq->rmem.addr)
		hc_dma_free(ctx, &cq->rmem);
	hc_obj_del(ibcq);
	hc_zfree(cq);
	return 0;
}

/* ibv_resize_cq, as mlx5's provider resizes: a new ring, MODIFY_CQ, then
 * the CQEs not yet polled copied from the old ring to the new one at the
 * next index, up to the RESIZE_CQ CQE the device wrote in the old ring to
 * mark the switch, and the consumer index stepped past it. The size rounds
 * up to 2^n - 1 CQEs; the same size leaves the CQ as it is; one that
 * cannot hold the unpolled CQEs is EINVAL (from the device). */
HC_EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	HC_LIVE(ibcq, HC_OBJ_CQ, EINVAL);
	struct hc_cq *cq = hc_cq(ibcq);
	struct hc_context *ctx = cq->ctx;
	if (cqe < 1 || cqe > (1 << ctx->caps.log_max_cq) - 1)
		return EINVAL;
	uint8_t log = 0;
	while ((1u << log) < (unsigned)cqe + 1)
		log++;
	pthread_mutex_lock(&cq->lock);
	if (log == cq->log) {
		pthread_mutex_unlock(&cq->lock);
		return 0;
	}
	struct hc_dma m;
	size_t ring = (size_t)CQE_SIZE << log;
	int err = hc_dma_alloc(ctx, ring, &m);
	if (err) {
		pthread_mutex_unlock(&cq->lock);
		return err;
	}
	for (size_t i = 0; i < (1u << log); i++)
		m.addr[i * CQE_SIZE + 63] = 0xF1;
	uint8_t in[24] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_MODIFY_CQ);
	hc_put32(in + 8, cq->cqn);
	in[12] = log;
	hc_put64(in + 16, m.iova);
	err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err) {
		pthread_mutex_unlock(&cq->lock);
		hc_dma_free(ctx, &m);
		return err;
	}
	/* The marker is in the old ring before the command returns. */
	uint32_t i = cq->ci;
	for (uint32_t n = 0; n <= (1u << cq->log); n++, i++) {
		uint8_t *e = next_cqe_at(cq, i);
		if (!e) {
			err = EIO; /* no marker: the device broke the protocol */
			break;
		}
		if ((e[63] >> 4) == HC_CQE_RESIZE)
			break;
		uint8_t *d = m.addr + (size_t)((i + 1) & ((1u << log) - 1)) * CQE_SIZE;
		memcpy(d, e, CQE_SIZE);
		d[63] = (uint8_t)((d[63] & ~1) | (((i + 1) >> log) & 1));
	}
	if (cq->rmem.addr)
		hc_dma_free(ctx, &cq->rmem);
	cq->rmem = m;
	cq->ring = m.addr;
	cq->log = log;
	cq->ci++;
	cq->cqx.cqe = (1 << log) - 1;
	hc_store32(cq->db, cq->ci & 0xFFFFFF);
	pthread_mutex_unlock(&cq->lock);
	return err;
}

/* hc_cq_clean removes a QP's CQEs from the CQ, as mlx5's provider does when
 * the QP is reset or destroyed: the CQEs still unpolled are walked back
 * from the newest, the others moved up over the removed ones (keeping
 * each slot's owner bit), and the consumer index advanced past the gap. */
void hc_cq_clean(struct hc_cq *cq, uint32_t qpn, struct hc_srq *srq)
{
	if (!cq)
		return; /* a QP without this CQ (XRC) */
	pthread_mutex_lock(&cq->lock);
	uint32_t size = 1u << cq->log, prod = cq->ci;
	for (;;) {
		uint8_t *e = cq->ring + (size_t)(prod & (size - 1)) * CQE_SIZE;
		uint8_t op_own = (uint8_t)hc_load32(e + 60);
		if ((op_own >> 4) == HC_CQE_INVALID || (op_own & 1) != ((prod >> cq->log) & 1) || prod - cq->ci >= size)
			break;
		prod++;
	}
	uint32_t freed = 0;
	for (uint32_t i = prod; i-- != cq->ci;) {
		uint8_t *e = cq->ring + (size_t)(i & (size - 1)) * CQE_SIZE;
		int mine = qpn == HC_CLEAN_SRQ ? (hc_get32(e + 32) & 0xFFFFFF) == srq->srqn && (e[63] >> 4) != HC_CQE_REQ &&
							   (e[63] >> 4) != HC_CQE_REQ_ERR
					       : (hc_get32(e + 56) & 0xFFFFFF) == qpn;
		if (mine) {
			int op = e[63] >> 4;
			if (srq && op >= HC_CQE_RESP_WR_IMM && (op <= HC_CQE_RESP_SEND_INV || op == HC_CQE_RESP_ERR))
				hc_srq_free(srq, hc_get16(e + 60)); /* its SRQ WQE back on the free list, as mlx5 */
			freed++;
		} else if (freed) {
			uint8_t *d = cq->ring + (size_t)((i + freed) & (size - 1)) * CQE_SIZE;
			uint8_t owner = d[63] & 1;
			memcpy(d, e, CQE_SIZE);
			d[63] = (uint8_t)((d[63] & ~1) | owner);
		}
	}
	if (freed) {
		cq->ci += freed;
		hc_store32(cq->db, cq->ci & 0xFFFFFF);
	}
	if (cq->cur_qp && (qpn == HC_CLEAN_SRQ || cq->cur_qp->qpx.qp_base.qp_num == qpn))
		cq->cur_qp = NULL;
	pthread_mutex_unlock(&cq->lock);
}
