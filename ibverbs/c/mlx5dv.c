/* mlx5dv: the direct-verbs API of libmlx5.so.1 (the same object): the
 * device's mlx5 identity and signature capabilities, mlx5dv QPs, indirect
 * and block-signature mkeys, and the WQEs rdma-core's mlx5 provider posts
 * to configure them inside the send queue (UMR with the mkey context, a
 * KLM or repeat-block layout and a BSF; SET_PSV), parsed back from the
 * device's SIG_ERR CQEs for mlx5dv_mkey_check. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hcasim.h"

#define SEG 16

/* mkey_mask bits (umr/segs.go, mlx5). */
#define MASK_LEN (1ULL << 0)
#define MASK_SIG_ERR (1ULL << 9)
#define MASK_BSF_ENABLE (1ULL << 12)
#define MASK_MKEY (1ULL << 13)
#define MASK_LW (1ULL << 18)
#define MASK_RR (1ULL << 19)
#define MASK_RW (1ULL << 20)
#define MASK_A (1ULL << 21)
#define MASK_FREE (1ULL << 29)
#define MASK_ACCESS (MASK_LW | MASK_RR | MASK_RW | MASK_A)

#define HC_OP_SET_PSV 0x20
#define HC_CMD_CREATE_PSV 0x600
#define HC_CMD_DESTROY_PSV 0x601

/* The WQE in scratch: control, UMR control, mkey context, translation. */
#define OFF_UMR 16
#define OFF_MKC 64
#define OFF_XLT 128

/* A signature domain's type, as the provider keeps it (a 64-bit CRC
 * apart: mlx5dv_mkey_check reports its whole value). */
enum { SIG_NONE, SIG_CRC, SIG_T10DIF, SIG_CRC64 };

/* The signature configuration's state (the provider's mlx5_mkey_bsf_state). */
enum { BSF_INIT, BSF_RESET, BSF_SET, BSF_UPDATED };

struct hc_mkey {
	struct mlx5dv_mkey dv; /* lkey, rkey */
	struct hc_context *ctx;
	struct ibv_pd *pd;
	uint32_t index;
	uint16_t num_desc;
	int sig;
	uint32_t psv_mem, psv_wire;
	int have_mem, have_wire, have_key; /* what the device still holds (destroy may be retried) */
	uint64_t length; /* of the last layout */
	int state;
	int mem_type, wire_type;
	uint64_t tsig_mem, tsig_wire;

	pthread_mutex_t mu; /* the error, set while polling the CQ */
	int err_exists;
	uint32_t err_count;
	int err_count_updated;
	uint16_t syndrome;
	uint64_t expected, actual, offset;
	uint8_t err_sig_type, err_domain;
};

static struct hc_qp *dv_qp(struct mlx5dv_qp_ex *m) { return (struct hc_qp *)((char *)m - offsetof(struct hc_qp, dv)); }

/* Context. */

HC_EXPORT bool mlx5dv_is_supported(struct ibv_device *device) { return hc_obj_live(device, HC_OBJ_DEVICE); }

HC_EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device, struct mlx5dv_context_attr *attr)
{
	if (attr && (attr->flags || attr->comp_mask)) {
		errno = EOPNOTSUPP; /* DEVX is not modelled */
		return NULL;
	}
	return ibv_open_device(device);
}

HC_EXPORT int mlx5dv_query_device(struct ibv_context *c, struct mlx5dv_context *a)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, EINVAL);
	if (!a)
		return EINVAL;
	struct hc_context *ctx = hc_ctx(c);
	/* The fields past comp_mask are written only as comp_mask asks, as
	 * rdma-core does: a program built against older headers passes a
	 * smaller struct. */
	uint64_t want = a->comp_mask;
	a->version = 1;
	a->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1;
	a->comp_mask = 0;
	if (want & MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD) {
		a->comp_mask |= MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD;
		memset(&a->sig_caps, 0, sizeof a->sig_caps);
		if (ctx->caps.sig_handover) {
			a->sig_caps.block_size = MLX5DV_BLOCK_SIZE_CAP_512 | MLX5DV_BLOCK_SIZE_CAP_520 |
						 MLX5DV_BLOCK_SIZE_CAP_4048 | MLX5DV_BLOCK_SIZE_CAP_4096 |
						 MLX5DV_BLOCK_SIZE_CAP_4160;
			a->sig_caps.block_prot = MLX5DV_SIG_PROT_CAP_T10DIF | MLX5DV_SIG_PROT_CAP_CRC;
			a->sig_caps.t10dif_bg = MLX5DV_SIG_T10DIF_BG_CAP_CRC | MLX5DV_SIG_T10DIF_BG_CAP_CSUM;
			a->sig_caps.crc_type = MLX5DV_SIG_CRC_TYPE_CAP_CRC32 | MLX5DV_SIG_CRC_TYPE_CAP_CRC32C |
					       MLX5DV_SIG_CRC_TYPE_CAP_CRC64_XP10;
		}
	}
	return 0;
}

/* QPs. */

static void dv_fill_ops(struct hc_qp *qp);

HC_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *c, struct ibv_qp_init_attr_ex *a,
					  struct mlx5dv_qp_init_attr *dva)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, NULL);
	struct hc_qp_dv dv = {0};
	if (dva) {
		const uint64_t known = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DC |
				       MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
		if (dva->comp_mask & ~known) {
			errno = EINVAL;
			return NULL;
		}
		if (dva->comp_mask & (MLX5DV_QP_INIT_ATTR_MASK_DC | MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS)) {
			errno = EOPNOTSUPP; /* DC is not modelled */
			return NULL;
		}
		if (dva->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) {
			uint32_t f = dva->create_flags;
			if ((f & MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE) && (f & MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE)) {
				errno = EINVAL;
				return NULL;
			}
			/* Scatter to CQE is an optimisation the device has not: both
			 * flags are accepted and change nothing. */
			if (f & ~(uint32_t)(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE | MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE |
					    MLX5DV_QP_CREATE_SIG_PIPELINING)) {
				errno = EOPNOTSUPP;
				return NULL;
			}
			dv.create_flags = f;
		}
		if (dva->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) {
			const uint64_t mk = MLX5DV_QP_EX_WITH_MR_INTERLEAVED | MLX5DV_QP_EX_WITH_MR_LIST |
					    MLX5DV_QP_EX_WITH_MKEY_CONFIGURE;
			if ((dva->send_ops_flags & ~mk) || (dva->send_ops_flags && a->qp_type != IBV_QPT_RC)) {
				errno = EOPNOTSUPP; /* raw WQEs, memcpy */
				return NULL;
			}
			dv.ops = dva->send_ops_flags;
		}
	}
	/* The WQE size mlx5's provider reserves: 192 bytes (a UMR with its
	 * mkey context and a 64-byte translation) for MR_LIST and
	 * MR_INTERLEAVED (and memory windows and LOCAL_INV), else an atomic's
	 * 48; an mkey configure's translation and BSF come from
	 * max_inline_data. */
	uint64_t ops = (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? a->send_ops_flags : ~0ULL;
	dv.overhead = (dv.ops & (MLX5DV_QP_EX_WITH_MR_INTERLEAVED | MLX5DV_QP_EX_WITH_MR_LIST)) ||
			      (ops & (IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW))
		      ? 192
		      : 48;
	dv.integrity = dv.ops != 0;
	if ((dv.create_flags & MLX5DV_QP_CREATE_SIG_PIPELINING) && (a->qp_type != IBV_QPT_RC || !hc_ctx(c)->caps.sig_handover)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return hc_create_qp(c, a, &dv);
}

/* hc_dv_qp_init installs the mlx5dv ops. The provider leaves them NULL
 * on a QP created without mlx5 send ops, so a call crashes; here every QP
 * has them, and on such a QP they fail wr_complete with EOPNOTSUPP. */
void hc_dv_qp_init(struct hc_qp *qp, const struct hc_qp_dv *dv)
{
	qp->dv_ops = dv->ops;
	qp->dv_flags = dv->create_flags;
	dv_fill_ops(qp);
}

HC_EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *x)
{
	HC_LIVE(x, HC_OBJ_QP, NULL); /* an hc_qp begins with its ibv_qp_ex */
	return &((struct hc_qp *)x)->dv;
}

/* Mkeys. */

static int psv_create(struct hc_context *ctx, uint32_t pd, uint32_t *index)
{
	uint8_t in[12] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_CREATE_PSV);
	hc_put32(in + 8, 1u << 28 | (pd & 0xFFFFFF));
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (!err)
		*index = hc_get32(out + 8) & 0xFFFFFF;
	return err;
}

static int mkey_destroy(struct hc_mkey *m);

HC_EXPORT struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *attr)
{
	const uint32_t known = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE |
			       MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
	if (!attr || !hc_obj_live(attr->pd, HC_OBJ_PD)) {
		errno = EINVAL;
		return NULL;
	}
	if (!attr->create_flags || (attr->create_flags & ~known)) {
		errno = EOPNOTSUPP; /* crypto and UPDATE_TAG are not modelled */
		return NULL;
	}
	struct ibv_pd *pd = attr->pd;
	struct hc_context *ctx = hc_ctx(pd->context);
	int sig = !!(attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE);
	if (sig && !ctx->caps.sig_handover) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	uint32_t num_desc = ((uint32_t)attr->max_entries + 3) & ~3u;
	if (num_desc == 0 || num_desc > (1u << ctx->caps.log_max_klm)) {
		errno = EINVAL;
		return NULL;
	}
	attr->max_entries = (uint16_t)num_desc;
	struct hc_mkey *m = hc_zalloc(sizeof *m);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t flags = (sig ? 1u << 30 : 0) |
			 (attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE ? 1u << 24 : 0);
	int err = hc_create_free_klm(ctx, pd->handle, 0, flags, sig ? 4 : 0, num_desc, &m->index);
	if (err) {
		hc_zfree(m);
		errno = err;
		return NULL;
	}
	m->have_key = 1;
	m->ctx = ctx;
	m->pd = pd;
	m->num_desc = (uint16_t)num_desc;
	m->sig = sig;
	m->dv.lkey = m->dv.rkey = m->index << 8;
	m->state = BSF_INIT;
	m->err_count = 1; /* the first UMR sets the expected error parity */
	m->err_count_updated = 1;
	pthread_mutex_init(&m->mu, NULL);
	if (sig) {
		err = psv_create(ctx, pd->handle, &m->psv_mem);
		m->have_mem = !err;
		if (!err) {
			err = psv_create(ctx, pd->handle, &m->psv_wire);
			m->have_wire = !err;
		}
	}
	if (!err)
		err = hc_table_put(ctx, HC_TAB_MKEY, m->index, m);
	if (err) {
		mkey_destroy(m);
		errno = err;
		return NULL;
	}
	return &m->dv;
}

/* mlx5dv_destroy_mkey destroys the PSVs, then the key, as rdma-core does;
 * after a failure, a retry destroys only what is left. */
HC_EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey *dvm)
{
	HC_LIVE(dvm, HC_OBJ_MKEY, EINVAL);
	return mkey_destroy((struct hc_mkey *)dvm);
}

/* mkey_destroy destroys a key, or what a failed create made of one. */
static int mkey_destroy(struct hc_mkey *m)
{
	struct hc_context *ctx = m->ctx;
	if (m->have_mem) {
		int err = hc_obj_destroy(ctx, HC_CMD_DESTROY_PSV, m->psv_mem);
		if (err)
			return err;
		m->have_mem = 0;
	}
	if (m->have_wire) {
		int err = hc_obj_destroy(ctx, HC_CMD_DESTROY_PSV, m->psv_wire);
		if (err)
			return err;
		m->have_wire = 0;
	}
	if (m->have_key) {
		int err = hc_obj_destroy(ctx, HC_CMD_DESTROY_MKEY, m->index);
		if (err)
			return err;
		m->have_key = 0;
	}
	/* Under obj_mu, which hc_dv_sig_err holds while it records: no poller
	 * uses the key after this. */
	pthread_mutex_lock(&ctx->obj_mu);
	if (m->index < ctx->nmkeys && ctx->mkeys[m->index] == m)
		ctx->mkeys[m->index] = NULL;
	pthread_mutex_unlock(&ctx->obj_mu);
	hc_obj_del(m);
	hc_zfree(m);
	return 0;
}

/* hc_dv_sig_err records a SIG_ERR CQE on its mkey (the provider consumes
 * it: it is no work completion). */
void hc_dv_sig_err(struct hc_context *ctx, const uint8_t *e)
{
	uint32_t index = hc_get32(e + 36) >> 8;
	pthread_mutex_lock(&ctx->obj_mu); /* held to the end: mlx5dv_destroy_mkey waits for it */
	struct hc_mkey *m = index < ctx->nmkeys ? ctx->mkeys[index] : NULL;
	if (!m) {
		pthread_mutex_unlock(&ctx->obj_mu);
		return;
	}
	pthread_mutex_lock(&m->mu);
	m->err_exists = 1;
	m->err_count++;
	m->err_count_updated = 1;
	m->syndrome = hc_get16(e + 32);
	m->expected = (uint64_t)hc_get32(e + 16) << 32 | hc_get32(e + 24);
	m->actual = (uint64_t)hc_get32(e + 20) << 32 | hc_get32(e + 28);
	m->offset = hc_get64(e + 40);
	m->err_sig_type = e[34];
	m->err_domain = e[35];
	pthread_mutex_unlock(&m->mu);
	pthread_mutex_unlock(&ctx->obj_mu);
}

HC_EXPORT int _mlx5dv_mkey_check(struct mlx5dv_mkey *dvm, struct mlx5dv_mkey_err *out, size_t size)
{
	HC_LIVE(dvm, HC_OBJ_MKEY, EINVAL);
	struct hc_mkey *m = (struct hc_mkey *)dvm;
	if (!out || !m->sig || size < sizeof *out)
		return EINVAL;
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&m->mu);
	int err = 0;
	if (!m->err_exists) {
		out->err_type = MLX5DV_MKEY_NO_ERR;
		goto out;
	}
	/* The domain the error was found in, and its signature type. */
	int type = m->err_domain == 0 ? m->wire_type : m->err_domain == 1 ? m->mem_type : SIG_NONE;
	if (!(m->syndrome & (7u << 11)) || m->err_sig_type != 0 || type == SIG_NONE) {
		err = EINVAL;
		goto out;
	}
	/* rdma-core's order: the reference tag, then the application tag,
	 * then the guard. */
	uint64_t x = m->expected, a = m->actual;
	if (m->syndrome & (1u << 11)) {
		out->err_type = MLX5DV_MKEY_SIG_BLOCK_BAD_REFTAG;
		x &= 0xFFFFFFFF;
		a &= 0xFFFFFFFF;
	} else if (m->syndrome & (1u << 12)) {
		out->err_type = MLX5DV_MKEY_SIG_BLOCK_BAD_APPTAG;
		x = (x >> 32) & 0xFFFF;
		a = (a >> 32) & 0xFFFF;
	} else {
		out->err_type = MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD;
		if (type != SIG_CRC64) {
			x >>= type == SIG_T10DIF ? 48 : 32;
			a >>= type == SIG_T10DIF ? 48 : 32;
		}
	}
	out->err.sig.expected_value = x;
	out->err.sig.actual_value = a;
	out->err.sig.offset = m->offset;
	m->err_exists = 0;
out:
	pthread_mutex_unlock(&m->mu);
	return err;
}

/* Building the memory-key WQE. Errors latch in wr_err: wr_complete then
 * fails and posts nothing of the batch. */

static void latch(struct hc_qp *qp, int err)
{
	if (!qp->wr_err)
		qp->wr_err = err;
	qp->mk = NULL;
}

/* hc_dv_wr_close drops an mkey WQE whose setters did not all come (as
 * the provider does: it is never posted, and no error is raised). */
int hc_dv_wr_close(struct hc_qp *qp)
{
	qp->mk = NULL;
	return 0;
}

static uint8_t umr_access(uint32_t access)
{
	uint8_t a = 0;
	if (access & IBV_ACCESS_REMOTE_ATOMIC)
		a |= 0x40;
	if (access & IBV_ACCESS_REMOTE_WRITE)
		a |= 0x20;
	if (access & IBV_ACCESS_REMOTE_READ)
		a |= 0x10;
	if (access & IBV_ACCESS_LOCAL_WRITE)
		a |= 0x08;
	return a;
}

/* set_psv commits a SET_PSV WQE. */
static int set_psv(struct hc_qp *qp, uint32_t psv, uint64_t tsig, int signaled)
{
	uint8_t imm[4] = {0};
	uint8_t *p = qp->scratch + SEG;
	hc_put32(p, psv & 0xFFFFFF);
	hc_put32(p + 4, 0);
	hc_put64(p + 8, tsig);
	hc_put_ctrl(qp, HC_OP_SET_PSV, 2 * SEG, hc_fence(qp, 0, qp->wr_flags_cur & IBV_SEND_FENCE), signaled, 0, imm);
	return hc_commit(qp, 2 * SEG, qp->wr_id_cur, IBV_WC_DRIVER1, 1);
}

/* finalize writes the mkey WQE's segments, commits it and the SET_PSVs
 * that follow it (the provider's umr_wqe_finalize). */
static void finalize(struct hc_qp *qp)
{
	struct hc_mkey *m = qp->mk;
	qp->mk = NULL;
	int bsf = 0, psvs = 0;
	if (m->sig) {
		if (qp->mk_sig_set) {
			bsf = psvs = 1;
		} else if (m->state == BSF_SET) {
			psvs = m->err_count_updated; /* re-arm the PSVs after an error */
		} else {
			qp->mk_mask |= MASK_BSF_ENABLE; /* INIT or RESET: no BSF */
		}
	}
	if (bsf && qp->mk_xlt + 64 > qp->cap.max_inline_data + 4) {
		latch(qp, ENOMEM);
		return;
	}
	uint64_t len = qp->mk_layout ? qp->mk_len : m->length;
	if (bsf && len > UINT32_MAX) {
		latch(qp, EINVAL);
		return;
	}
	uint8_t *u = qp->scratch + OFF_UMR, *mk = qp->scratch + OFF_MKC;
	uint32_t flags_pd = 0;
	if (bsf) {
		qp->mk_mask |= MASK_BSF_ENABLE;
		flags_pd |= 1u << 30;
	}
	pthread_mutex_lock(&m->mu);
	if (m->sig && m->err_count_updated) {
		qp->mk_mask |= MASK_SIG_ERR;
		flags_pd |= (m->err_count & 1) << 26;
		m->err_count_updated = 0;
	}
	pthread_mutex_unlock(&m->mu);
	memset(u, 0, 48);
	u[0] = 0x80; /* inline */
	hc_put16(u + 4, (uint16_t)(qp->mk_xlt / 16));
	hc_put16(u + 6, bsf ? 4 : 0);
	hc_put64(u + 8, qp->mk_mask);
	memset(mk, 0, 64);
	mk[2] = qp->mk_access;
	hc_put32(mk + 4, 0xFFFFFF00u | (m->dv.lkey & 0xFF));
	hc_put32(mk + 12, flags_pd);
	hc_put64(mk + 24, len);
	size_t n = OFF_XLT + qp->mk_xlt;
	if (bsf) {
		memcpy(qp->scratch + n, qp->mk_bsf, 64);
		n += 64;
	}
	uint8_t imm[4];
	hc_put32(imm, m->dv.lkey);
	int mem = psvs && (bsf ? qp->mk_mem_type : m->mem_type) != SIG_NONE;
	int wire = psvs && (bsf ? qp->mk_wire_type : m->wire_type) != SIG_NONE;
	int signaled = (qp->wr_flags_cur & IBV_SEND_SIGNALED) || qp->sig_all;
	hc_put_ctrl(qp, HC_OP_UMR, n, hc_fence(qp, 0, qp->wr_flags_cur & IBV_SEND_FENCE), signaled && !mem && !wire,
		    qp->wr_flags_cur & IBV_SEND_SOLICITED, imm);
	int err = hc_commit(qp, n, qp->wr_id_cur, IBV_WC_DRIVER1, 1);
	if (!err && bsf) {
		m->mem_type = qp->mk_mem_type;
		m->wire_type = qp->mk_wire_type;
		m->tsig_mem = qp->mk_tsig_mem;
		m->tsig_wire = qp->mk_tsig_wire;
		m->state = BSF_UPDATED;
	}
	if (!err && mem)
		err = set_psv(qp, m->psv_mem, m->tsig_mem, signaled && !wire);
	if (!err && wire)
		err = set_psv(qp, m->psv_wire, m->tsig_wire, signaled);
	if (err) {
		latch(qp, err);
		return;
	}
	if (qp->mk_layout)
		m->length = qp->mk_len;
}

static void setter_done(struct hc_qp *qp)
{
	if (++qp->mk_setters == qp->mk_want)
		finalize(qp);
}

static void x_mkey_configure(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *dvm, uint8_t num_setters,
			     struct mlx5dv_mkey_conf_attr *attr)
{
	struct hc_qp *qp = dv_qp(mqp);
	struct hc_mkey *m = (struct hc_mkey *)dvm;
	/* Any WQE being built ends here (an mkey WQE without all its setters
	 * is dropped). */
	hc_wr_close(qp);
	qp->mk = NULL;
	if (qp->wr_err)
		return;
	if (!qp->dv_ops) {
		latch(qp, EOPNOTSUPP); /* a QP without MLX5DV_QP_EX_WITH_MKEY_CONFIGURE (or MR_*) */
		return;
	}
	if (!(qp->qpx.wr_flags & IBV_SEND_INLINE) || (attr && (attr->conf_flags & ~MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR)) ||
	    (attr && attr->comp_mask)) {
		latch(qp, EOPNOTSUPP);
		return;
	}
	if (!m || m->ctx != qp->ctx) {
		latch(qp, EINVAL);
		return;
	}
	qp->mk = m;
	qp->mk_want = num_setters;
	qp->mk_setters = 0;
	qp->mk_mask = MASK_FREE | MASK_MKEY;
	qp->mk_xlt = 0;
	qp->mk_layout = qp->mk_access_set = qp->mk_sig_set = 0;
	qp->mk_access = 0;
	qp->wr_id_cur = qp->qpx.wr_id;
	qp->wr_flags_cur = qp->qpx.wr_flags;
	if (m->sig) {
		if (attr && (attr->conf_flags & MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR)) {
			m->mem_type = m->wire_type = SIG_NONE;
			m->state = BSF_RESET;
		} else if (m->state == BSF_UPDATED) {
			m->state = BSF_SET;
		} else if (m->state == BSF_RESET) {
			m->state = BSF_INIT;
		}
	}
	if (num_setters == 0)
		finalize(qp);
}

static void x_set_access(struct mlx5dv_qp_ex *mqp, uint32_t access)
{
	struct hc_qp *qp = dv_qp(mqp);
	if (!qp->mk) {
		latch(qp, EINVAL);
		return;
	}
	if ((access & ~(uint32_t)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_ATOMIC)) ||
	    (qp->mk_mask & MASK_ACCESS)) {
		latch(qp, EINVAL);
		return;
	}
	qp->mk_mask |= MASK_ACCESS;
	qp->mk_access = umr_access(access);
	setter_done(qp);
}

/* Translations: a KLM list, or a repeat block. */

/* xlt_room is how many 16-byte translation entries a WQE takes: what the
 * QP's inline size allows, and no more than scratch holds beside the
 * WQE's other segments and the BSF. */
static size_t xlt_room(struct hc_qp *qp)
{
	size_t inl = (qp->cap.max_inline_data + 4) / 16;
	size_t fit = (sizeof qp->scratch - OFF_XLT - 64) / 16;
	return inl < fit ? inl : fit;
}
static void x_layout_list(struct mlx5dv_qp_ex *mqp, uint16_t n, const struct ibv_sge *sge)
{
	struct hc_qp *qp = dv_qp(mqp);
	struct hc_mkey *m = qp->mk;
	if (!m || qp->mk_layout) {
		latch(qp, EINVAL);
		return;
	}
	size_t room = xlt_room(qp);
	if (n > room || n > m->num_desc) {
		latch(qp, ENOMEM);
		return;
	}
	uint8_t *x = qp->scratch + OFF_XLT;
	uint64_t len = 0;
	for (uint16_t i = 0; i < n; i++) {
		hc_put32(x + 16 * i, sge[i].length);
		hc_put32(x + 16 * i + 4, sge[i].lkey);
		hc_put64(x + 16 * i + 8, sge[i].addr);
		len += sge[i].length;
	}
	qp->mk_xlt = ((size_t)n * 16 + 63) & ~(size_t)63;
	memset(x + (size_t)n * 16, 0, qp->mk_xlt - (size_t)n * 16);
	qp->mk_len = len;
	qp->mk_layout = 1;
	qp->mk_mask |= MASK_LEN;
	setter_done(qp);
}

static void x_layout_interleaved(struct mlx5dv_qp_ex *mqp, uint32_t repeat, uint16_t n,
				 const struct mlx5dv_mr_interleaved *d)
{
	struct hc_qp *qp = dv_qp(mqp);
	struct hc_mkey *m = qp->mk;
	if (!m || qp->mk_layout) {
		latch(qp, EINVAL);
		return;
	}
	size_t room = xlt_room(qp);
	if (room == 0 || n > room - 1 || n > m->num_desc) {
		latch(qp, ENOMEM);
		return;
	}
	uint8_t *x = qp->scratch + OFF_XLT;
	uint32_t cycle = 0;
	for (uint16_t i = 0; i < n; i++) {
		uint8_t *e = x + 16 * (i + 1);
		hc_put16(e, (uint16_t)(d[i].bytes_count + d[i].bytes_skip));
		hc_put16(e + 2, (uint16_t)d[i].bytes_count);
		hc_put32(e + 4, d[i].lkey);
		hc_put64(e + 8, d[i].addr);
		cycle += d[i].bytes_count;
	}
	hc_put32(x, cycle);
	hc_put32(x + 4, 0x400); /* repeat block */
	hc_put32(x + 8, repeat);
	hc_put16(x + 12, 0);
	hc_put16(x + 14, n);
	qp->mk_xlt = ((size_t)(n + 1) * 16 + 63) & ~(size_t)63;
	memset(x + (size_t)(n + 1) * 16, 0, qp->mk_xlt - (size_t)(n + 1) * 16);
	qp->mk_len = (uint64_t)cycle * repeat;
	qp->mk_layout = 1;
	qp->mk_mask |= MASK_LEN;
	setter_done(qp);
}

/* Signatures. */

static int block_selector(uint32_t bs)
{
	switch (bs) {
	case MLX5DV_BLOCK_SIZE_512:
		return 1;
	case MLX5DV_BLOCK_SIZE_520:
		return 2;
	case MLX5DV_BLOCK_SIZE_4048:
		return 6;
	case MLX5DV_BLOCK_SIZE_4096:
		return 3;
	case MLX5DV_BLOCK_SIZE_4160:
		return 4;
	}
	return -1;
}

static uint64_t put_t10dif(uint8_t *p, const struct mlx5dv_sig_t10dif *t);

/* check_domain validates a domain; it returns an errno. */
static int check_domain(const struct mlx5dv_sig_block_domain *d)
{
	if (d->comp_mask || block_selector(d->block_size) < 0)
		return EINVAL;
	if (d->sig_type == MLX5DV_SIG_TYPE_T10DIF) {
		const struct mlx5dv_sig_t10dif *t = d->sig.dif;
		if (!t || (t->bg != 0 && t->bg != 0xFFFF) ||
		    (t->bg_type != MLX5DV_SIG_T10DIF_CRC && t->bg_type != MLX5DV_SIG_T10DIF_CSUM) ||
		    (t->flags & ~(MLX5DV_SIG_T10DIF_FLAG_REF_REMAP | MLX5DV_SIG_T10DIF_FLAG_APP_ESCAPE |
				  MLX5DV_SIG_T10DIF_FLAG_APP_REF_ESCAPE)))
			return EINVAL;
		return 0;
	}
	if (d->sig_type == MLX5DV_SIG_TYPE_CRC) {
		const struct mlx5dv_sig_crc *c = d->sig.crc;
		if (!c)
			return EINVAL;
		switch (c->type) {
		case MLX5DV_SIG_CRC_TYPE_CRC32:
		case MLX5DV_SIG_CRC_TYPE_CRC32C:
			if (c->seed != 0 && c->seed != 0xFFFFFFFF)
				return EINVAL;
			break;
		case MLX5DV_SIG_CRC_TYPE_CRC64_XP10:
			if (c->seed != 0 && c->seed != UINT64_MAX)
				return EINVAL;
			break;
		default:
			return EINVAL;
		}
		return 0;
	}
	return EINVAL;
}

/* put_domain writes a domain's BSF parts: its block format selector byte
 * (returned through bfs: 0 for T10-DIF) and, for T10-DIF, its inline
 * section; it returns the PSV's transient signature and sets the type. */
static uint64_t put_domain(uint8_t *inl, const struct mlx5dv_sig_block_domain *d, uint8_t *bfs, int *type)
{
	if (d->sig_type == MLX5DV_SIG_TYPE_T10DIF) {
		*bfs = 0;
		*type = SIG_T10DIF;
		return put_t10dif(inl, d->sig.dif);
	}
	const struct mlx5dv_sig_crc *c = d->sig.crc;
	uint8_t base = c->type == MLX5DV_SIG_CRC_TYPE_CRC32 ? 0x20 : c->type == MLX5DV_SIG_CRC_TYPE_CRC32C ? 0x40 : 0x50;
	*bfs = base | 0x02 | (c->seed == 0 ? 0x01 : 0); /* repeat; the seed bit means seed 0 */
	*type = c->type == MLX5DV_SIG_CRC_TYPE_CRC64_XP10 ? SIG_CRC64 : SIG_CRC;
	return c->type == MLX5DV_SIG_CRC_TYPE_CRC64_XP10 ? c->seed : c->seed << 32;
}

/* put_t10dif writes a domain's 16-byte inline BSF section and returns its
 * PSV's transient signature. */
static uint64_t put_t10dif(uint8_t *p, const struct mlx5dv_sig_t10dif *t)
{
	hc_put16(p, 0xC000); /* valid, refresh */
	hc_put16(p + 2, t->app_tag);
	hc_put32(p + 4, t->ref_tag);
	p[8] = t->bg_type == MLX5DV_SIG_T10DIF_CRC ? 0x1 : 0x2;
	p[9] = 0x80 | (t->bg ? 0x08 : 0); /* repeat block, seed */
	p[13] = (t->flags & MLX5DV_SIG_T10DIF_FLAG_REF_REMAP ? 0x40 : 0) |
		(t->flags & MLX5DV_SIG_T10DIF_FLAG_APP_REF_ESCAPE ? 0x02
		 : t->flags & MLX5DV_SIG_T10DIF_FLAG_APP_ESCAPE	  ? 0x01
								  : 0);
	hc_put16(p + 14, 0xFFFF);
	return (uint64_t)t->bg << 48 | (uint64_t)t->app_tag << 32 | t->ref_tag;
}

static void x_sig_block(struct mlx5dv_qp_ex *mqp, const struct mlx5dv_sig_block_attr *a)
{
	struct hc_qp *qp = dv_qp(mqp);
	struct hc_mkey *m = qp->mk;
	if (!m || !m->sig || qp->mk_sig_set || !a || (!a->mem && !a->wire) ||
	    (a->flags & ~(uint32_t)MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK) || a->comp_mask) {
		latch(qp, EINVAL);
		return;
	}
	int err = 0;
	if (a->mem)
		err = check_domain(a->mem);
	if (!err && a->wire)
		err = check_domain(a->wire);
	if (err) {
		latch(qp, err);
		return;
	}
	uint8_t *b = qp->mk_bsf;
	memset(b, 0, 64);
	/* The same block structure: one signature type and block size in both
	 * domains; the copy mask it allows by default (rdma-core's
	 * mlx5_umr_block_t10dif_sbs and mlx5_umr_block_crc_sbs). */
	int sbs = a->mem && a->wire && a->mem->sig_type == a->wire->sig_type && a->mem->block_size == a->wire->block_size;
	uint8_t copy = 0;
	if (sbs && a->mem->sig_type == MLX5DV_SIG_TYPE_T10DIF) {
		const struct mlx5dv_sig_t10dif *x = a->mem->sig.dif, *y = a->wire->sig.dif;
		if (x->bg_type == y->bg_type && x->bg == y->bg)
			copy |= 0xC0;
		if (x->app_tag == y->app_tag)
			copy |= 0x30;
		if (x->ref_tag == y->ref_tag)
			copy |= 0x0F;
	} else if (sbs) {
		const struct mlx5dv_sig_crc *x = a->mem->sig.crc, *y = a->wire->sig.crc;
		if (x->type != y->type)
			sbs = 0;
		else
			copy = x->type == MLX5DV_SIG_CRC_TYPE_CRC64_XP10 ? 0xFF : 0xF0;
	}
	if (a->flags & MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK) {
		if (!sbs) {
			latch(qp, EINVAL);
			return;
		}
		copy = a->copy_mask;
	}
	b[0] = 0x80 | (sbs ? 0x10 : 0); /* with inline sections; same block structure */
	b[1] = a->check_mask;
	b[2] = sbs ? copy : a->wire ? (uint8_t)block_selector(a->wire->block_size) : 0;
	b[3] = a->mem ? (uint8_t)block_selector(a->mem->block_size) : 0;
	hc_put32(b + 4, 0xFFFFFFFF); /* raw_data_size */
	qp->mk_mem_type = qp->mk_wire_type = SIG_NONE;
	uint8_t bfs;
	if (a->wire) {
		qp->mk_tsig_wire = put_domain(b + 32, a->wire, &bfs, &qp->mk_wire_type);
		hc_put32(b + 8, (uint32_t)bfs << 24 | (m->psv_wire & 0xFFFFFF));
	}
	if (a->mem) {
		qp->mk_tsig_mem = put_domain(b + 48, a->mem, &bfs, &qp->mk_mem_type);
		hc_put32(b + 12, (uint32_t)bfs << 24 | (m->psv_mem & 0xFFFFFF));
	}
	qp->mk_sig_set = 1;
	setter_done(qp);
}

static void x_dv_unimplemented(struct hc_qp *qp, const char *name)
{
	static int once;
	hcasim_unimplemented(name, &once);
	latch(qp, EOPNOTSUPP);
}

static void x_set_dc_addr(struct mlx5dv_qp_ex *mqp, struct ibv_ah *ah, uint32_t dctn, uint64_t key)
{
	(void)ah;
	(void)dctn;
	(void)key;
	x_dv_unimplemented(dv_qp(mqp), "mlx5dv_wr_set_dc_addr");
}

/* The provider's list and interleaved registrations are mkey_configure
 * with two setters. */
static void x_mr_interleaved(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *mkey, uint32_t access, uint32_t repeat,
			     uint16_t n, struct mlx5dv_mr_interleaved *d)
{
	struct mlx5dv_mkey_conf_attr attr = {0};
	x_mkey_configure(mqp, mkey, 2, &attr);
	x_set_access(mqp, access);
	x_layout_interleaved(mqp, repeat, n, d);
}

static void x_mr_list(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *mkey, uint32_t access, uint16_t n,
		      struct ibv_sge *sge)
{
	struct mlx5dv_mkey_conf_attr attr = {0};
	x_mkey_configure(mqp, mkey, 2, &attr);
	x_set_access(mqp, access);
	x_layout_list(mqp, n, sge);
}

static void dv_fill_ops(struct hc_qp *qp)
{
	struct mlx5dv_qp_ex *d = &qp->dv;
	d->wr_set_dc_addr = x_set_dc_addr;
	d->wr_mr_interleaved = x_mr_interleaved;
	d->wr_mr_list = x_mr_list;
	d->wr_mkey_configure = x_mkey_configure;
	d->wr_set_mkey_access_flags = x_set_access;
	d->wr_set_mkey_layout_list = x_layout_list;
	d->wr_set_mkey_layout_interleaved = x_layout_interleaved;
	d->wr_set_mkey_sig_block = x_sig_block;
}

/* mlx5dv_qp_cancel_posted_send_wrs turns the posted WQEs the device has
 * not fetched yet whose wr_id is wr_id into NOPs (they complete
 * successfully, as their own opcode): the provider's way out of a
 * signature-pipelining drain. The QP must be in SQD. It returns how many
 * it cancelled, or -errno. */
HC_EXPORT int mlx5dv_qp_cancel_posted_send_wrs(struct mlx5dv_qp_ex *mqp, uint64_t wr_id)
{
	if (!mqp || !hc_obj_live(dv_qp(mqp), HC_OBJ_QP))
		return -EINVAL;
	struct hc_qp *qp = dv_qp(mqp);
	uint8_t in[12], out[64];
	hc_cmd_header(in, HC_CMD_QUERY_QP);
	hc_put32(in + 8, qp->qpx.qp_base.qp_num);
	pthread_mutex_lock(&qp->smu);
	int err = hc_cmd(qp->ctx, in, sizeof in, out, sizeof out, NULL);
	if (err) {
		pthread_mutex_unlock(&qp->smu);
		return -err;
	}
	if (out[8] != 5) { /* the device's SQD */
		pthread_mutex_unlock(&qp->smu);
		return -EINVAL;
	}
	uint16_t size = (uint16_t)(1u << qp->sq_log);
	uint16_t at = hc_get16(out + 44); /* the next WQE the device fetches */
	int n = 0;
	while (at != qp->cur_post && (uint16_t)(qp->cur_post - at) <= size) {
		uint16_t slot = at & (size - 1);
		if (qp->nbb[slot] == 0)
			break;
		if (qp->wrid[slot] == wr_id) {
			uint8_t *c = qp->sq + (size_t)slot * HC_WQEBB;
			hc_put32(c, (uint32_t)at << 8 | 0x00); /* NOP, the WQE's index kept */
			n++;
		}
		at += qp->nbb[slot];
	}
	pthread_mutex_unlock(&qp->smu);
	return n;
}
