/* hcasim's replacement libibverbs.so.1: internal declarations.
 *
 * The library is a client of `hcasim serve` (docs/PROTOCOL.md): every
 * ibv_open_device is one connection, one function of the daemon's device.
 * Rings, doorbell records and registered memory are memfds mapped into the
 * daemon; post_send, post_recv and poll_cq work on them in this process and
 * never wait for the daemon. Commands (create, modify, destroy) are
 * request/reply messages; a reader thread per context takes the replies and
 * the daemon's events (completion events to channels, the rest to the
 * async fd). */
#ifndef HCASIM_H
#define HCASIM_H

#include <endian.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#define HC_EXPORT __attribute__((visibility("default")))

/* Protocol (docs/PROTOCOL.md). */
enum {
	HC_MAGIC = 0x48434153,
	HC_VERSION = 1,
	HC_HDR = 12,
	HC_MAX_MSG = 65536,

	HC_T_HELLO = 0x01,
	HC_T_COMMAND = 0x02,
	HC_T_MAP_MEM = 0x03,
	HC_T_UNMAP = 0x04,
	HC_T_RING_SQ = 0x05,
	HC_T_RING_RQ = 0x06,
	HC_T_ARM_CQ = 0x07,
	HC_T_EVENTS = 0x40,
	HC_T_ERROR = 0x41,
	HC_T_REPLY = 0x80,

	HC_EV_COMPLETION = 0x00,
	HC_EV_SQ_DRAINED = 0x03,
	HC_EV_CQ_ERROR = 0x04,
	HC_EV_QP_FATAL = 0x05,
	HC_EV_LAST_WQE = 0x13,
	HC_EV_SRQ_LIMIT = 0x14,
};

/* Device commands (docs/DEVICE.md). */
enum {
	HC_CMD_QUERY_HCA_CAP = 0x100,
	HC_CMD_CREATE_MKEY = 0x200,
	HC_CMD_DESTROY_MKEY = 0x202,
	HC_CMD_CREATE_CQ = 0x400,
	HC_CMD_DESTROY_CQ = 0x401,
	HC_CMD_MODIFY_CQ = 0x402,
	HC_CMD_CREATE_QP = 0x500,
	HC_CMD_DESTROY_QP = 0x501,
	HC_CMD_RST2INIT = 0x502,
	HC_CMD_INIT2RTR = 0x503,
	HC_CMD_RTR2RTS = 0x504,
	HC_CMD_RTS2RTS = 0x505,
	HC_CMD_SQERR2RTS = 0x506,
	HC_CMD_2ERR = 0x507,
	HC_CMD_2RST = 0x50A,
	HC_CMD_QUERY_QP = 0x50B,
	HC_CMD_SQD2RTS = 0x50C,
	HC_CMD_RTS2SQD = 0x50D,
	HC_CMD_INIT2INIT = 0x50E,
	HC_CMD_CREATE_SRQ = 0x700,
	HC_CMD_DESTROY_SRQ = 0x701,
	HC_CMD_QUERY_SRQ = 0x702,
	HC_CMD_ARM_RQ = 0x703,
	HC_CMD_ALLOC_PD = 0x800,
	HC_CMD_DEALLOC_PD = 0x801,
	HC_CMD_ALLOC_XRCD = 0x80E,
	HC_CMD_DEALLOC_XRCD = 0x80F,
	HC_QP_XRC = 3,		 /* CREATE_QP transport byte: XRC */
	HC_QP_IN_XRCD = 56,	 /* CREATE_QP: a target's XRC domain */
	HC_QP_IN_XRC_SIZE = 60,
	HC_SRQ_IN_XRC_SIZE = 48, /* CREATE_SRQ with the XRC domain at 40, the CQ at 44 */
	HC_XRC_SEG = 16,	 /* an XRC initiator's WQE: mlx5_wqe_xrc_seg */
	HC_QP_RAW = 4,		 /* CREATE_QP transport byte: raw packet */
	/* A raw packet WQE's Ethernet segment (mlx5_wqe_eth_seg) with the
	 * 18 bytes of L2 header mlx5's provider copies inline
	 * (MLX5_ETH_L2_INLINE_HEADER_SIZE): 32 bytes. */
	HC_ETH_SEG = 32,
	HC_ETH_INLINE = 18,
	HC_QPF_NO_SQ = 16,  /* CREATE_QP flag: a raw QP without a send queue (an ibv_wq) */
	HC_QPF_RSS = 32,    /* CREATE_QP flag: an RSS QP (docs/DEVICE.md "Receive-side scaling") */
	HC_RSS_KEY = 40,    /* the Toeplitz key's bytes */
	HC_RSS_MAX_LOG = 8, /* an indirection table of at most 256 entries */
	HC_CMD_CREATE_FLOW = 0x936, /* the model's flow rule (docs/DEVICE.md "Raw packet QPs") */
	HC_CMD_DESTROY_FLOW = 0x938,

	HC_CAP_OUT_GID = 64, /* QUERY_HCA_CAP output: 16 bytes, the port's GID */
	HC_CAP_OUT_SIZE = 80,
	HC_QPC_MTU = 42,	/* modify (INIT2RTR) input, QUERY_QP output: path MTU, IB encoding */
	HC_QPC_REMOTE_GID = 48, /* modify (INIT2RTR) input, QUERY_QP output: 16 bytes */
	HC_QP_MODIFY_SIZE = 64, /* a modify input with the remote GID */
	HC_QP_OUT_SIZE = 64,
	HC_QPC_QKEY = 64,	   /* modify input of a UD QP: its Q_Key (BE32) */
	HC_QP_MODIFY_UD_SIZE = 68, /* a modify input with the Q_Key */
	HC_QP_OPT_QKEY = 1 << 8,   /* opt_param_mask: the Q_Key is set */
	HC_DATAGRAM_SEG = 48,	   /* a UD send WQE's datagram segment (mlx5_wqe_av) */
	HC_GRH_SIZE = 40,	   /* the GRH at the head of a UD receive buffer */

	HC_STAT_BAD_PARAM = 0x03,
	HC_STAT_RESOURCE_BUSY = 0x06,
	HC_STAT_EXCEED_LIM = 0x08,
	HC_STAT_NO_RESOURCES = 0x0F,
	HC_STAT_BAD_QP_STATE = 0x40,
};

/* WQE and CQE layouts (sq/, cq/, mlx5). */
enum {
	HC_WQEBB = 64,
	HC_MAX_WQEBBS = 16,
	HC_OP_SEND_INV = 0x01,
	HC_OP_RDMA_WRITE = 0x08,
	HC_OP_RDMA_WRITE_IMM = 0x09,
	HC_OP_SEND = 0x0A,
	HC_OP_SEND_IMM = 0x0B,
	HC_OP_RDMA_READ = 0x10,
	HC_OP_ATOMIC_CS = 0x11,
	HC_OP_ATOMIC_FA = 0x12,
	HC_OP_UMR = 0x25,
	HC_CE_CQ_UPDATE = 0x08,
	HC_SE = 0x02,
	HC_FENCE_SMALL = 0x20,
	HC_FENCE = 0x40,
	HC_FENCE_STRONG = 0x60,
	HC_FENCE_SMALL_AND = 0x80,
	HC_INLINE = 0x80000000u,
	HC_TERMINATOR_LKEY = 0x100,
	HC_RESERVED_LKEY = 0x200,

	HC_CQE_REQ = 0,
	HC_CQE_RESP_WR_IMM = 1,
	HC_CQE_RESP_SEND = 2,
	HC_CQE_RESP_SEND_IMM = 3,
	HC_CQE_RESP_SEND_INV = 4,
	HC_CQE_RESIZE = 5,
	HC_CQE_SIG_ERR = 12,
	HC_CQE_REQ_ERR = 13,
	HC_CQE_RESP_ERR = 14,
	HC_CQE_INVALID = 15,
};

/* Device capabilities (QUERY_HCA_CAP). */
struct hc_caps {
	uint32_t max_pd, max_cq, max_qp, max_psv, max_mkeys;
	uint8_t log_max_cq, log_max_sq, log_max_rq, log_max_klm;
	uint16_t max_sge;
	uint8_t max_indirection, max_rd_atomic;
	uint32_t max_inline;
	int sig_handover;
	uint16_t lid;
	uint8_t min_log_page, max_log_page;
	uint64_t max_mapped;
	/* The port's RoCEv2 GID (QUERY_HCA_CAP 64..79; an older, 64-byte
	 * output has none): set when the daemon has a wire (serve --roce). */
	int has_gid;
	uint8_t gid[16];
};

/* A memfd mapped here and into the daemon (rings, doorbell records). */
struct hc_dma {
	uint8_t *addr;
	size_t len;
	uint64_t iova;
};

struct hc_cq;
struct hc_qp;
struct hc_mkey;

/* What mlx5dv_create_qp asks for beyond an RC QP. */
struct hc_qp_dv {
	size_t overhead;     /* the bytes a WQE needs before its data (0: the default) */
	int integrity;	     /* signature WQEs: the device's integrity QP flag */
	uint64_t ops;	     /* MLX5DV_QP_EX_WITH_* */
	uint32_t create_flags; /* MLX5DV_QP_CREATE_* */
	uint32_t dev_flags;    /* more CREATE_QP flags (HC_QPF_NO_SQ: a work queue) */
};

/* A queued asynchronous event. */
struct hc_async {
	struct ibv_async_event ev;
	struct hc_async *next;
};

/* An open device: one connection to the daemon. */
struct hc_context {
	struct verbs_context vctx; /* ibv_context last, as verbs.h requires */
	int sock;
	struct hc_caps caps;

	pthread_t reader;
	int reader_started;
	pthread_mutex_t req_mu; /* one request in flight */
	pthread_mutex_t mu;     /* the fields below */
	pthread_cond_t cond;
	uint32_t next_id;
	uint32_t want_id;
	uint8_t *reply; /* HC_MAX_MSG bytes: the awaited reply */
	size_t reply_len;
	int reply_type;
	int reply_ready;
	int dead; /* the connection ended */

	/* Objects by number, for events and completions. */
	pthread_mutex_t obj_mu;
	uint32_t next_ind; /* the last indirection table number (rss.c), under obj_mu */
	struct hc_cq **cqs;
	size_t ncqs;
	struct hc_qp **qps;
	size_t nqps;
	struct hc_mkey **mkeys; /* mlx5dv mkeys by index, for SIG_ERR CQEs */
	size_t nmkeys;
	struct hc_srq **srqs; /* for SRQ events */
	size_t nsrqs;

	struct hc_xdom *xdoms; /* under obj_mu */
	struct hc_async *async_head, *async_tail; /* under mu */
	uint8_t variant; /* under obj_mu */
};

static inline struct hc_context *hc_ctx(struct ibv_context *c)
{
	return (struct hc_context *)((char *)c - offsetof(struct hc_context, vctx.context));
}

/* A completion channel: an eventfd counting queued CQ events. */
struct hc_channel {
	struct ibv_comp_channel ch;
	pthread_mutex_t mu;
	struct hc_cq **q; /* queued CQs, a ring of cap entries */
	size_t head, n, cap;
	int ncq; /* CQs using it */
};

struct hc_cq {
	struct ibv_cq_ex cqx; /* its head is the ibv_cq */
	struct hc_context *ctx;
	struct hc_dma mem; /* ring, then the 8-byte doorbell record */
	struct hc_dma rmem; /* the ring after a resize (rmem.addr NULL: none) */
	uint8_t *ring;
	uint8_t *db;
	uint32_t cqn;
	uint8_t log;
	uint32_t ci;
	uint8_t arm_sn;
	pthread_mutex_t lock; /* poll and arm */
	struct hc_channel *channel;
	struct hc_qp *cur_qp; /* the QP of the last CQE (cleared when it is destroyed) */
	struct ibv_wc cur;    /* ibv_cq_ex polling: the current completion */
	int ex;		/* created with ibv_create_cq_ex */
	unsigned empty; /* polls in a row that found nothing */
	atomic_int nxrc; /* XRC SRQs completing here */
	/* Events handed to the program (under the ibv_cq's mutex): destroy
	 * waits until ibv_ack_cq_events and ibv_ack_async_event have acked
	 * as many, as libibverbs does. */
	unsigned comp_reported, async_reported;
};

/* A shared receive queue (srq.c). */
struct hc_srq {
	struct ibv_srq srq;
	struct hc_context *ctx;
	struct hc_dma mem; /* the ring, then the doorbell record */
	uint8_t *ring, *db;
	uint8_t log, shift;
	uint32_t max_sge, srqn, limit;
	pthread_mutex_t mu; /* the free list and the counter */
	uint16_t head, tail, counter;
	uint64_t *wrid;
	unsigned async_reported; /* under the ibv_srq's mutex */
	/* An XRC SRQ: its domain and the CQ its completions go to. */
	struct hc_xdom *xdom;
	struct hc_cq *xcq;
};

/* An XRC domain of the context (xrc.c): one per file opened (by inode),
 * or one per open without a file; each ibv_xrcd handle counts. */
struct hc_xdom {
	struct hc_xdom *next;
	uint32_t num;
	int refs;
	int has_inode;
	dev_t dev;
	ino_t ino;
};

struct hc_xrcd {
	struct ibv_xrcd x;
	struct hc_xdom *dom;
};

struct hc_qp {
	struct ibv_qp_ex qpx; /* its head is the ibv_qp */
	struct hc_context *ctx;
	struct hc_srq *srq; /* where its receives come from, or NULL */
	/* XRC targets: the domain; a handle of ibv_open_qp names the target
	 * it opened. A target counts its handles, and one its creator
	 * destroyed while opened is gone: destroyed with its last handle (both
	 * under the context's obj_mu). */
	struct hc_xdom *xdom;
	struct hc_ind *ind; /* an RSS QP's indirection table (rss.c) */
	struct hc_qp *opened;
	int open_refs, gone;
	struct hc_dma mem; /* SQ ring, RQ ring, doorbell record */
	uint8_t *sq;
	uint8_t *rq;
	uint8_t *db;
	uint8_t sq_log, rq_log, rq_shift;
	struct ibv_qp_cap cap;
	int sig_all;
	struct hc_cq *scq, *rcq;

	pthread_mutex_t smu; /* the send side */
	uint16_t cur_post;
	_Atomic uint16_t sq_tail; /* moved by the poller, which does not take smu */
	uint64_t *wrid;
	uint8_t *wrop; /* enum ibv_wc_opcode of each WQE's first slot */
	uint8_t *nbb;
	uint8_t fm_cache;
	uint8_t scratch[HC_MAX_WQEBBS * HC_WQEBB];

	pthread_mutex_t rmu; /* the receive side */
	uint16_t rq_head, rq_tail;
	uint64_t *rwrid;

	/* Attributes the driver keeps (query_qp). */
	struct ibv_qp_attr attr;
	int hint_off; /* offset of the doorbell hint word */
	unsigned async_reported; /* async events handed to the program, under the ibv_qp's mutex */

	/* The wr_* API: the WQE being built. */
	int wr_err;
	uint16_t wr_start_post;
	uint8_t wr_start_fm;
	int wr_open;
	size_t wr_len; /* bytes of the WQE built in scratch */
	uint8_t wr_opc;
	uint8_t wr_wcop;
	uint32_t wr_imm;
	uint64_t wr_id_cur;
	unsigned wr_flags_cur;

	/* mlx5dv (mlx5dv.c): the ops, and the memory-key WQE being built. */
	struct mlx5dv_qp_ex dv;
	uint64_t dv_ops;
	uint32_t dv_flags;
	struct hc_mkey *mk; /* the key of the open mkey WQE; NULL if none */
	int mk_setters, mk_want;
	uint64_t mk_mask;
	size_t mk_xlt; /* translation bytes in scratch, padded to 64 */
	int mk_layout, mk_access_set, mk_sig_set;
	uint64_t mk_len;
	uint8_t mk_access;
	uint8_t mk_bsf[64];
	uint64_t mk_tsig_mem, mk_tsig_wire;
	int mk_mem_type, mk_wire_type; /* the signature types the setter asked for */
};

/* An address handle: the attributes, and the datagram segment a UD send
 * WQE copies (mlx5_wqe_av, its Q_Key and remote QPN filled per WR), as
 * mlx5's provider keeps it. */
struct hc_ah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
	uint8_t av[HC_DATAGRAM_SEG];
};

static inline struct hc_qp *hc_qp(struct ibv_qp *q) { return (struct hc_qp *)q; }
static inline struct hc_ah *hc_ah(struct ibv_ah *a) { return (struct hc_ah *)a; }
static inline struct hc_cq *hc_cq(struct ibv_cq *c) { return (struct hc_cq *)c; }
static inline struct hc_srq *hc_srq(struct ibv_srq *s) { return (struct hc_srq *)s; }

/* Byte order helpers over device memory. */
static inline void hc_put16(uint8_t *p, uint16_t v) { v = htobe16(v); __builtin_memcpy(p, &v, 2); }
static inline void hc_put32(uint8_t *p, uint32_t v) { v = htobe32(v); __builtin_memcpy(p, &v, 4); }
static inline void hc_put64(uint8_t *p, uint64_t v) { v = htobe64(v); __builtin_memcpy(p, &v, 8); }
static inline uint16_t hc_get16(const uint8_t *p) { uint16_t v; __builtin_memcpy(&v, p, 2); return be16toh(v); }
static inline uint32_t hc_get32(const uint8_t *p) { uint32_t v; __builtin_memcpy(&v, p, 4); return be32toh(v); }
static inline uint64_t hc_get64(const uint8_t *p) { uint64_t v; __builtin_memcpy(&v, p, 8); return be64toh(v); }
/* One aligned, sequentially consistent 32-bit store / load of a BE value. */
static inline void hc_store32(uint8_t *p, uint32_t v) { atomic_store((_Atomic uint32_t *)p, htobe32(v)); }
static inline uint32_t hc_load32(uint8_t *p) { return be32toh(atomic_load((_Atomic uint32_t *)p)); }

/* client.c */
const char *hc_socket_path(void);
int hc_dial(const char *path, uint16_t *lid);
int hc_start(struct hc_context *ctx);
void hc_stop(struct hc_context *ctx);
int hc_request(struct hc_context *ctx, int type, const void *payload, size_t len, int fd, uint8_t *out, size_t cap,
	       size_t *outlen);
int hc_cmd(struct hc_context *ctx, uint8_t *in, size_t inlen, uint8_t *out, size_t cap, size_t *outlen);
int hc_notify(struct hc_context *ctx, int type, uint32_t obj);
int hc_arm(struct hc_context *ctx, uint32_t cqn, uint32_t word);
int hc_map(struct hc_context *ctx, int fd, uint64_t size, uint32_t align, uint64_t *iova);
int hc_unmap(struct hc_context *ctx, uint64_t iova);
void hc_push_async(struct hc_context *ctx, struct ibv_async_event *ev);
void hc_evfd_set(int fd);
void hc_evfd_clear(int fd);
void hc_cmd_header(uint8_t *in, uint16_t opcode);
int hc_status_errno(int status);

/* mem.c */
void *hc_zalloc(size_t len);
void hc_zfree(void *p);
int hc_dma_alloc(struct hc_context *ctx, size_t len, struct hc_dma *d);
void hc_dma_free(struct hc_context *ctx, struct hc_dma *d);
void hc_mr_context_closed(struct hc_context *ctx);
uint8_t hc_mkey_access(unsigned access);
uint8_t hc_next_variant(struct hc_context *ctx);
int hc_obj_destroy(struct hc_context *ctx, uint16_t op, uint32_t num);
int hc_create_free_klm(struct hc_context *ctx, uint32_t pd, uint8_t variant, uint32_t flags, uint32_t bsf,
		       uint32_t octowords, uint32_t *index);

/* objects: tables by number */
enum { HC_TAB_CQ, HC_TAB_QP, HC_TAB_MKEY, HC_TAB_SRQ };

/* objects.c: every object handed out, by address and kind (the tables'
 * kinds are the first), so that an entry point can refuse a pointer that
 * is not a live object of its kind. */
enum {
	HC_OBJ_CQ = HC_TAB_CQ,
	HC_OBJ_QP = HC_TAB_QP,
	HC_OBJ_MKEY = HC_TAB_MKEY,
	HC_OBJ_SRQ = HC_TAB_SRQ,
	HC_OBJ_CONTEXT,
	HC_OBJ_DEVICE,
	HC_OBJ_DEVLIST,
	HC_OBJ_PD,
	HC_OBJ_MR,
	HC_OBJ_AH,
	HC_OBJ_CHANNEL,
	HC_OBJ_MW,
	HC_OBJ_XRCD,
	HC_OBJ_WQ,
	HC_OBJ_IND,
	HC_OBJ_FLOW,
};
void hc_obj_add(const void *p, int kind);
void hc_obj_del(const void *p);
int hc_obj_live(const void *p, int kind);

/* HC_LIVE returns ret from the calling entry point, with errno EINVAL,
 * unless p is a live object of kind. */
#define HC_LIVE(p, kind, ret)                                                                                          \
	do {                                                                                                           \
		if (!hc_obj_live((p), (kind))) {                                                                       \
			errno = EINVAL;                                                                                \
			return ret;                                                                                    \
		}                                                                                                      \
	} while (0)
int hc_table_put(struct hc_context *ctx, int kind, uint32_t num, void *obj);
struct hc_qp *hc_find_qp_on(struct hc_context *ctx, uint32_t qpn, struct hc_cq *cq);
void hc_purge_async(struct hc_context *ctx, void *obj);

/* cq.c */
void hc_cq_event(struct hc_context *ctx, uint32_t cqn);
int hc_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int hc_req_notify_cq(struct ibv_cq *cq, int solicited);
/* hc_cq_clean's qpn HC_CLEAN_SRQ: the CQEs of XRC SRQ srq, of any QP. */
#define HC_CLEAN_SRQ 0x1000000u
void hc_cq_clean(struct hc_cq *cq, uint32_t qpn, struct hc_srq *srq);

/* srq.c */
int hc_post_srq_recv(struct ibv_srq *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
uint64_t hc_srq_free(struct hc_srq *s, uint16_t idx);
struct ibv_srq *hc_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *a);
int hc_get_srq_num(struct ibv_srq *q, uint32_t *num);

/* xrc.c */
struct ibv_xrcd *hc_open_xrcd(struct ibv_context *c, struct ibv_xrcd_init_attr *a);
int hc_close_xrcd(struct ibv_xrcd *x);
int hc_xrc_wc(struct hc_cq *cq, const uint8_t *e, struct ibv_wc *wc);
void hc_recv_fields(const uint8_t *e, struct ibv_wc *wc);

/* qp.c */
int hc_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
/* Memory windows (mw.c). hc_bind_segs writes a bind's (or, with length 0,
 * an unbind's) UMR control, mkey context and KLM segments at p and returns
 * their size. */
struct ibv_mw *hc_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int hc_dealloc_mw(struct ibv_mw *mw);
int hc_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mb);
size_t hc_bind_segs(uint8_t *p, enum ibv_mw_type type, uint32_t rkey, const struct ibv_mw_bind_info *b, uint32_t qpn);
unsigned hc_mr_access(struct ibv_mr *mr);
int hc_alloc_type_ok(const char *env);
int hc_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_qp *hc_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);
struct ibv_qp *hc_open_qp(struct ibv_context *c, struct ibv_qp_open_attr *a);
/* A flow rule of a raw packet QP: the device's flow number. */
struct hc_flow {
	struct ibv_flow flow;
	uint32_t id;
};

struct ibv_flow *hc_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *a);
int hc_destroy_flow(struct ibv_flow *f);
int hc_net_raw(void);
/* libibverbs' marshall.h (not installed by Debian): marshall.c. */
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
struct ibv_qp *hc_qp_publish(struct hc_context *ctx, struct hc_qp *qp, struct ibv_qp_init_attr_ex *a, uint32_t qpn);
struct ibv_qp *hc_create_rss_qp(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);
void hc_ind_unref(struct hc_ind *t);
struct ibv_wq *hc_create_wq(struct ibv_context *c, struct ibv_wq_init_attr *a);
int hc_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *a);
int hc_destroy_wq(struct ibv_wq *wq);
struct ibv_rwq_ind_table *hc_create_ind_table(struct ibv_context *c, struct ibv_rwq_ind_table_init_attr *a);
int hc_destroy_ind_table(struct ibv_rwq_ind_table *t);
struct ibv_qp *hc_create_qp(struct ibv_context *c, struct ibv_qp_init_attr_ex *a, const struct hc_qp_dv *dv);
void hc_send_done(struct hc_qp *qp, const uint8_t *cqe, struct ibv_wc *wc);
void hc_recv_done(struct hc_qp *qp, const uint8_t *cqe, struct ibv_wc *wc);
void hc_qp_saw_error(struct hc_qp *qp);
int hc_umr_modify(struct ibv_pd *cur_pd, uint32_t key, int change_access, uint8_t access, struct ibv_pd *new_pd);

/* qp.c, for mlx5dv.c */
void hc_put_ctrl(struct hc_qp *qp, uint8_t opcode, size_t len, uint8_t fence, int signaled, int solicited,
		 const uint8_t imm[4]);
int hc_commit(struct hc_qp *qp, size_t len, uint64_t wr_id, uint8_t wcop, int local_op);
uint8_t hc_fence(struct hc_qp *qp, int local_inv, int fenced);
void hc_wr_close(struct hc_qp *qp);

/* mlx5dv.c */
void hc_dv_qp_init(struct hc_qp *qp, const struct hc_qp_dv *dv);
void hc_dv_sig_err(struct hc_context *ctx, const uint8_t *cqe);
int hc_dv_wr_close(struct hc_qp *qp);

/* device.c */
int hc_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len);
int hc_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in, struct ibv_device_attr_ex *a,
		       size_t len);
struct ibv_cq_ex *hc_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *a);
void hc_fill_unimplemented_ops(struct hc_context *ctx);
uint64_t hc_guid(uint16_t lid);
int hc_check_av(const struct hc_context *ctx, const struct ibv_ah_attr *ah);
uint16_t hc_dest_lid(const struct hc_context *ctx, const struct ibv_ah_attr *ah);
int hc_gid_entry(const struct hc_context *ctx, unsigned index, union ibv_gid *g, unsigned *type);
int hc_gone(struct hc_context *ctx);

/* IBVERBS_PRIVATE symbols whose prototypes are in rdma-core 44's
 * infiniband/driver.h, which Debian does not install: declared here exactly
 * as there, so a definition that strays from them does not compile
 * (-Werror=missing-prototypes makes every export need one). */
enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1, IBV_GID_TYPE_SYSFS_ROCE_V2 };
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       enum ibv_gid_type_sysfs *type);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

void hcasim_unimplemented(const char *name, int *once);
#define HC_UNIMPLEMENTED(name)                                                                                         \
	do {                                                                                                           \
		static int once_;                                                                                      \
		hcasim_unimplemented(name, &once_);                                                                    \
	} while (0)

#endif
