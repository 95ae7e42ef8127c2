/* Memory windows, as rdma-core's mlx5 provider and the kernel's mlx5
 * driver make them: a window is an mkey created free, with umr_en, local
 * read and a four-octoword KLM translation, bound to no QP (type 2: also
 * enabled for remote invalidation). A bind is a UMR WQE on the send queue
 * (set_bind_wr's segments); ibv_bind_mw posts one for a type 1 window
 * with the next rkey variant. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hcasim.h"

enum {
	MW_XLT_OCTOWORDS = 4, /* the kernel's roundup(1, 4) KLMs */
	UMR_CTRL = 48,
	MKEY_SEG = 64,
	BIND_KLM = 64, /* one KLM, padded as rdma-core pads it */
};

struct ibv_mw *hc_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL; /* the kernel's ib_uverbs_alloc_mw */
		return NULL;
	}
	struct hc_context *ctx = hc_ctx(pd->context);
	struct ibv_mw *mw = calloc(1, sizeof *mw);
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t variant = hc_next_variant(ctx);
	uint32_t index;
	int err = hc_create_free_klm(ctx, pd->handle, variant, type == IBV_MW_TYPE_2 ? 1u << 24 : 0, 0,
				     MW_XLT_OCTOWORDS, &index); /* en_rinval for type 2 */
	if (err) {
		free(mw);
		errno = err;
		return NULL;
	}
	mw->context = pd->context;
	mw->pd = pd;
	mw->type = type;
	mw->handle = index;
	mw->rkey = index << 8 | variant;
	return mw;
}

int hc_dealloc_mw(struct ibv_mw *mw)
{
	int err = hc_obj_destroy(hc_ctx(mw->context), HC_CMD_DESTROY_MKEY, mw->handle);
	if (err)
		return err;
	free(mw);
	return 0;
}

size_t hc_bind_segs(uint8_t *p, enum ibv_mw_type type, uint32_t rkey, const struct ibv_mw_bind_info *b, uint32_t qpn)
{
	int len = b->length != 0;
	memset(p, 0, UMR_CTRL + MKEY_SEG + (len ? BIND_KLM : 0));
	/* UMR control: TRNSLATION_OFFSET | INLINE; the mask FREE | MKEY, QPN
	 * for type 2. */
	p[0] = 0x10 | 0x80;
	uint64_t mask = 1ULL << 29 | 1ULL << 13;
	if (type == IBV_MW_TYPE_2)
		mask |= 1ULL << 14;
	uint8_t *mk = p + UMR_CTRL;
	if (len) {
		hc_put16(p + 4, 4); /* klm_octowords: one KLM, aligned to 8 entries / 2 */
		if (type == IBV_MW_TYPE_2)
			p[0] |= 0x20; /* CHECK_FREE: the window must be unbound */
		/* LEN START_ADDR LW RR RW A */
		mask |= 1ULL << 0 | 1ULL << 6 | 1ULL << 18 | 1ULL << 19 | 1ULL << 20 | 1ULL << 21;
		mk[2] = hc_mkey_access(b->mw_access_flags) & ~0x04; /* a window grants no local read */
		hc_put64(mk + 16, b->mw_access_flags & IBV_ACCESS_ZERO_BASED ? 0 : b->addr);
		hc_put64(mk + 24, b->length);
	} else {
		if (type == IBV_MW_TYPE_2)
			p[0] |= 0x08; /* CHECK_QPN */
		mk[0] = 0x40; /* free */
	}
	hc_put64(p + 8, mask);
	hc_put32(mk + 4, (type == IBV_MW_TYPE_1 || !len ? 0xFFFFFF00u : qpn << 8) | (rkey & 0xFF));
	if (!len)
		return UMR_CTRL + MKEY_SEG;
	uint8_t *k = p + UMR_CTRL + MKEY_SEG;
	hc_put32(k, (uint32_t)b->length);
	hc_put32(k + 4, b->mr->lkey);
	hc_put64(k + 8, b->addr);
	return UMR_CTRL + MKEY_SEG + BIND_KLM;
}

/* hc_bind_mw is mlx5_bind_mw: a type 1 bind posted as IBV_WR_BIND_MW with
 * the next variant of the window's rkey, which the window takes once the
 * WR is posted. verbs.h's ibv_bind_mw has checked the type and the PDs. */
int hc_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mb)
{
	struct ibv_mw_bind_info *b = &mb->bind_info;
	if (b->mw_access_flags & IBV_ACCESS_ZERO_BASED) {
		errno = EINVAL;
		return EINVAL;
	}
	if (b->mr && (hc_mr_access(b->mr) & IBV_ACCESS_ZERO_BASED)) {
		errno = EINVAL;
		return EINVAL;
	}
	struct ibv_send_wr wr = {0}, *bad = NULL;
	wr.opcode = IBV_WR_BIND_MW;
	wr.wr_id = mb->wr_id;
	wr.send_flags = mb->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.bind_info = *b;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	int err = hc_post_send(qp, &wr, &bad);
	if (err)
		return err;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}
