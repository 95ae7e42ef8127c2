/* XRC: domains, and the completions of XRC SRQs. A domain is the
 * device's (ALLOC_XRCD); as the kernel does, opening a file's domain again
 * (the same inode) gives the domain already open, and an open without a
 * file (fd -1) a new one. Domains are per context: two processes, or two
 * contexts, that open the same file get domains of their own (each
 * context is a function of the device, and a function's objects are its
 * own), which docs/CONFORMANCE.md records. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hcasim.h"

struct ibv_xrcd *hc_open_xrcd(struct ibv_context *c, struct ibv_xrcd_init_attr *a)
{
	/* ibv_cmd_open_xrcd: both the fd and the flags are given. */
	if (!a || a->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
		errno = a ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (!(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
	    (a->oflags & ~(O_CREAT | O_EXCL))) {
		errno = EINVAL;
		return NULL;
	}
	struct stat st;
	if (a->fd != -1 && fstat(a->fd, &st) != 0) {
		errno = EBADF;
		return NULL;
	}
	struct hc_context *ctx = hc_ctx(c);
	struct hc_xrcd *h = calloc(1, sizeof *h);
	if (!h) {
		errno = ENOMEM;
		return NULL;
	}
	/* obj_mu is held across the command: two opens of one file make one
	 * domain. */
	pthread_mutex_lock(&ctx->obj_mu);
	struct hc_xdom *d = NULL;
	if (a->fd != -1)
		for (d = ctx->xdoms; d && !(d->has_inode && d->dev == st.st_dev && d->ino == st.st_ino); d = d->next)
			;
	int err = 0;
	if (d && (a->oflags & O_EXCL))
		err = EINVAL;
	else if (!d && a->fd != -1 && !(a->oflags & O_CREAT))
		err = EAGAIN; /* the kernel's answer: no domain for the file, and no O_CREAT */
	else if (!d && !(d = calloc(1, sizeof *d)))
		err = ENOMEM;
	else if (!d->refs) {
		uint8_t in[8], out[64];
		hc_cmd_header(in, HC_CMD_ALLOC_XRCD);
		err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
		if (err) {
			free(d);
		} else {
			d->num = hc_get32(out + 8) & 0xFFFFFF;
			d->has_inode = a->fd != -1;
			if (d->has_inode) {
				d->dev = st.st_dev;
				d->ino = st.st_ino;
			}
			d->next = ctx->xdoms;
			ctx->xdoms = d;
		}
	}
	if (!err) {
		d->refs++;
		h->dom = d;
		h->x.context = c;
	}
	pthread_mutex_unlock(&ctx->obj_mu);
	if (err) {
		free(h);
		errno = err;
		return NULL;
	}
	return &h->x;
}

int hc_close_xrcd(struct ibv_xrcd *x)
{
	if (!x)
		return EINVAL;
	struct hc_xrcd *h = (struct hc_xrcd *)x;
	struct hc_context *ctx = hc_ctx(x->context);
	struct hc_xdom *d = h->dom;
	int err = 0;
	pthread_mutex_lock(&ctx->obj_mu);
	if (d->refs == 1) {
		/* The last handle: the domain goes, unless SRQs or QPs still use
		 * it (EBUSY, as the kernel's). */
		err = hc_obj_destroy(ctx, HC_CMD_DEALLOC_XRCD, d->num);
		if (!err) {
			struct hc_xdom **pp = &ctx->xdoms;
			while (*pp != d)
				pp = &(*pp)->next;
			*pp = d->next;
			free(d);
		}
	} else {
		d->refs--;
	}
	pthread_mutex_unlock(&ctx->obj_mu);
	if (err)
		return err;
	free(h);
	return 0;
}

/* hc_xrc_wc makes the work completion of a receive CQE of an XRC SRQ that
 * completes on cq (the CQE names the SRQ and the target QP); -1 for a
 * CQE that is not one. The caller holds cq's lock: an SRQ being destroyed
 * waits for it, then removes its CQEs (ibv_destroy_srq). */
int hc_xrc_wc(struct hc_cq *cq, const uint8_t *e, struct ibv_wc *wc)
{
	uint32_t srqn = hc_get32(e + 32) & 0xFFFFFF, qpn = hc_get32(e + 56) & 0xFFFFFF;
	struct hc_context *ctx = cq->ctx;
	if (!srqn)
		return -1;
	pthread_mutex_lock(&ctx->obj_mu);
	struct hc_srq *s = srqn < ctx->nsrqs ? ctx->srqs[srqn] : NULL;
	struct hc_qp *qp = qpn < ctx->nqps ? ctx->qps[qpn] : NULL;
	uint32_t src = qp && qp->qpx.qp_base.qp_type == IBV_QPT_XRC_RECV ? qp->attr.dest_qp_num : 0;
	pthread_mutex_unlock(&ctx->obj_mu);
	if (!s || s->xcq != cq)
		return -1;
	memset(wc, 0, sizeof *wc);
	wc->qp_num = qpn;
	wc->wr_id = hc_srq_free(s, hc_get16(e + 60));
	hc_recv_fields(e, wc);
	wc->src_qp = src;
	return 1;
}
