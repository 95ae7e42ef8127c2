/* The device list, contexts, queries, protection domains, completion
 * channels and async events. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "hcasim.h"

#undef ibv_get_device_list
#undef ibv_query_port

#define HC_DEV_NAME "hcasim0"
#define HC_IBDEV_PATH "/sys/class/infiniband/" HC_DEV_NAME
#define HC_FW_VER "16.35.0000"
#define HC_BOARD_ID "HCASIM_0001"
/* The GID table: index 0 holds the port's GID, the others are empty (as
 * on hardware, where most of the table is). */
#define HC_GID_TBL_LEN 16

/* A device as libibverbs lays it out: room for a verbs_device after the
 * ibv_device, in case a provider library ever looks past it. */
struct hc_device {
	struct ibv_device dev;
	uint8_t verbs_device_rest[512];
	uint16_t lid;
};

static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hc_device *the_device; /* under list_mu; lives for the process */

uint64_t hc_guid(uint16_t lid) { return 0x0002c90300000000ULL | (uint64_t)lid << 8 | 0x01; }

HC_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **list = calloc(2, sizeof *list);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (num)
		*num = 0;
	uint16_t lid;
	int s = hc_dial(hc_socket_path(), &lid);
	if (s < 0) {
		static int once;
		if (!__atomic_exchange_n(&once, 1, __ATOMIC_RELAXED) && !getenv("HCASIM_QUIET"))
			fprintf(stderr,
				"hcasim: no hcasim daemon at %s (%s): start one with `hcasim serve --socket PATH` and "
				"set HCASIM_SOCKET=PATH, or run the program under `hcasim exec --`\n",
				hc_socket_path(), strerror(errno));
		hc_obj_add(list, HC_OBJ_DEVLIST);
		return list; /* no devices: an empty list, as libibverbs gives */
	}
	close(s);
	pthread_mutex_lock(&list_mu);
	if (!the_device) {
		struct hc_device *d = calloc(1, sizeof *d);
		if (d) {
			d->dev.node_type = IBV_NODE_CA;
			d->dev.transport_type = IBV_TRANSPORT_IB;
			snprintf(d->dev.name, sizeof d->dev.name, "%s", HC_DEV_NAME);
			snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs0");
			snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs0");
			snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "%s", HC_IBDEV_PATH);
			d->lid = lid;
			the_device = d;
			hc_obj_add(&d->dev, HC_OBJ_DEVICE);
		}
	}
	if (the_device) {
		the_device->lid = lid;
		list[0] = &the_device->dev;
		if (num)
			*num = 1;
	}
	pthread_mutex_unlock(&list_mu);
	hc_obj_add(list, HC_OBJ_DEVLIST);
	return list;
}

HC_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	if (!hc_obj_live(list, HC_OBJ_DEVLIST))
		return;
	hc_obj_del(list);
	free(list);
}

HC_EXPORT const char *ibv_get_device_name(struct ibv_device *d)
{
	HC_LIVE(d, HC_OBJ_DEVICE, NULL);
	return d->name;
}

HC_EXPORT __be64 ibv_get_device_guid(struct ibv_device *d)
{
	HC_LIVE(d, HC_OBJ_DEVICE, 0);
	return htobe64(hc_guid(((struct hc_device *)d)->lid));
}

HC_EXPORT int ibv_get_device_index(struct ibv_device *d)
{
	HC_LIVE(d, HC_OBJ_DEVICE, -1);
	return 0;
}

static void parse_caps(const uint8_t *o, size_t len, struct hc_caps *c)
{
	c->max_pd = hc_get32(o + 8);
	c->max_cq = hc_get32(o + 12);
	c->max_qp = hc_get32(o + 16);
	c->max_psv = hc_get32(o + 20);
	c->max_mkeys = hc_get32(o + 24);
	c->log_max_cq = o[28];
	c->log_max_sq = o[29];
	c->log_max_rq = o[30];
	c->log_max_klm = o[31];
	c->max_sge = hc_get16(o + 32);
	c->max_indirection = o[34];
	c->max_rd_atomic = o[35];
	c->max_inline = hc_get32(o + 36);
	c->sig_handover = o[43] & 1;
	c->lid = hc_get16(o + 44);
	c->min_log_page = o[50];
	c->max_log_page = o[51];
	c->max_mapped = hc_get64(o + 56);
	c->has_gid = 0;
	if (len >= HC_CAP_OUT_SIZE)
		for (int i = 0; i < 16; i++)
			if (o[HC_CAP_OUT_GID + i])
				c->has_gid = 1;
	if (c->has_gid)
		memcpy(c->gid, o + HC_CAP_OUT_GID, 16);
	/* Bounds the library's arithmetic relies on (16-bit WQE counters,
	 * shifts of an int), whatever the daemon says. */
	if (c->log_max_cq > 24)
		c->log_max_cq = 24;
	if (c->log_max_sq > 15)
		c->log_max_sq = 15;
	if (c->log_max_rq > 15)
		c->log_max_rq = 15;
	if (c->log_max_klm > 16)
		c->log_max_klm = 16;
	if (c->max_log_page > 62)
		c->max_log_page = 62;
	if (c->min_log_page > c->max_log_page)
		c->min_log_page = c->max_log_page;
}

static struct ibv_context *open_device(struct ibv_device *device)
{
	struct hc_context *ctx = hc_zalloc(sizeof *ctx);
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	uint16_t lid;
	ctx->sock = hc_dial(hc_socket_path(), &lid);
	if (ctx->sock < 0) {
		int e = errno;
		hc_zfree(ctx);
		errno = e == ENOENT || e == ECONNREFUSED ? ENODEV : e;
		return NULL;
	}
	pthread_mutex_init(&ctx->req_mu, NULL);
	pthread_mutex_init(&ctx->mu, NULL);
	pthread_cond_init(&ctx->cond, NULL);
	pthread_mutex_init(&ctx->obj_mu, NULL);
	struct ibv_context *c = &ctx->vctx.context;
	c->device = device;
	c->cmd_fd = ctx->sock;
	c->async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->vctx.sz = sizeof ctx->vctx;
	int err = c->async_fd < 0 ? errno : hc_start(ctx);
	if (err)
		goto fail;
	uint8_t in[8], out[HC_CAP_OUT_SIZE];
	size_t outlen = 0;
	hc_cmd_header(in, HC_CMD_QUERY_HCA_CAP);
	err = hc_cmd(ctx, in, sizeof in, out, sizeof out, &outlen);
	if (err)
		goto fail;
	parse_caps(out, outlen, &ctx->caps);
	c->ops.poll_cq = hc_poll_cq;
	c->ops.req_notify_cq = hc_req_notify_cq;
	c->ops.post_send = hc_post_send;
	c->ops.post_recv = hc_post_recv;
	ctx->vctx.query_port = hc_query_port;
	ctx->vctx.query_device_ex = hc_query_device_ex;
	ctx->vctx.create_qp_ex = hc_create_qp_ex;
	ctx->vctx.create_cq_ex = hc_create_cq_ex;
	hc_fill_unimplemented_ops(ctx);
	hc_obj_add(c, HC_OBJ_CONTEXT);
	return c;
fail:
	if (ctx->reader_started)
		hc_stop(ctx);
	else
		close(ctx->sock);
	if (c->async_fd >= 0)
		close(c->async_fd);
	hc_zfree(ctx->reply);
	hc_zfree(ctx);
	errno = err;
	return NULL;
}

HC_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	HC_LIVE(device, HC_OBJ_DEVICE, NULL);
	return open_device(device);
}

HC_EXPORT int ibv_close_device(struct ibv_context *c)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, EINVAL);
	hc_obj_del(c);
	struct hc_context *ctx = hc_ctx(c);
	hc_stop(ctx);
	hc_mr_context_closed(ctx);
	close(c->async_fd);
	for (struct hc_async *a = ctx->async_head, *n; a; a = n) {
		n = a->next;
		hc_zfree(a);
	}
	hc_zfree(ctx->cqs);
	hc_zfree(ctx->qps);
	hc_zfree(ctx->srqs);
	hc_zfree(ctx->mkeys);
	hc_zfree(ctx);
	return 0;
}

HC_EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, EINVAL);
	if (!a)
		return EINVAL;
	struct hc_context *ctx = hc_ctx(c);
	if (hc_gone(ctx))
		return EIO; /* the device is gone (the daemon's connection ended) */
	struct hc_caps *k = &ctx->caps;
	memset(a, 0, sizeof *a);
	snprintf(a->fw_ver, sizeof a->fw_ver, "%s", HC_FW_VER);
	a->node_guid = htobe64(hc_guid(k->lid));
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = k->max_mapped ? k->max_mapped : 1ULL << 40;
	a->page_size_cap = ~4095ULL & ((2ULL << (k->max_log_page ? k->max_log_page : 30)) - 1);
	a->vendor_id = 0x02c9;
	a->vendor_part_id = 4119; /* ConnectX-5 */
	a->hw_ver = 0;
	a->max_qp = (int)k->max_qp;
	a->max_qp_wr = 1 << k->log_max_sq;
	a->max_srq = (int)k->max_qp;
	a->max_srq_wr = (1 << k->log_max_rq) - 1;
	a->max_srq_sge = k->max_sge;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
			      IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B |
			      IBV_DEVICE_XRC;
	a->max_sge = k->max_sge;
	a->max_sge_rd = k->max_sge;
	a->max_cq = (int)k->max_cq;
	a->max_cqe = (1 << k->log_max_cq) - 1;
	a->max_mr = (int)k->max_mkeys;
	a->max_mw = (int)k->max_mkeys;
	a->max_pd = (int)k->max_pd;
	a->max_qp_rd_atom = k->max_rd_atomic;
	a->max_qp_init_rd_atom = k->max_rd_atomic;
	a->max_res_rd_atom = (int)(k->max_qp * k->max_rd_atomic);
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = 1;
	return 0;
}

int hc_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in, struct ibv_device_attr_ex *a,
		       size_t len)
{
	if ((in && in->comp_mask) || !a || !hc_obj_live(c, HC_OBJ_CONTEXT))
		return EINVAL;
	if (len < sizeof a->orig_attr)
		return EINVAL;
	struct ibv_device_attr_ex x;
	memset(&x, 0, sizeof x);
	int err = ibv_query_device(c, &x.orig_attr);
	if (err)
		return err;
	x.max_dm_size = 0;
	x.phys_port_cnt_ex = 1;
	/* RSS as mlx5: raw packet QPs, Toeplitz over IPv4/IPv6 addresses and
	 * TCP/UDP ports, tables of up to 256 work queues. */
	x.rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
	x.rss_caps.max_rwq_indirection_tables = hc_ctx(c)->caps.max_qp;
	x.rss_caps.max_rwq_indirection_table_size = 1u << HC_RSS_MAX_LOG;
	x.rss_caps.rx_hash_fields_mask = 0xFF;
	x.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
	x.max_wq_type_rq = hc_ctx(c)->caps.max_qp;
	memcpy(a, &x, len < sizeof x ? len : sizeof x);
	if (len > sizeof x)
		memset((char *)a + sizeof x, 0, len - sizeof x);
	return 0;
}

static void fill_port(struct ibv_port_attr *a)
{
	memset(a, 0, sizeof *a);
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = HC_GID_TBL_LEN;
	/* A RoCE port, as mlx5 reports one: CM and IP-based GIDs, no LID. */
	a->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
	a->max_msg_sz = 1u << 30;
	a->pkey_tbl_len = 1;
	a->lid = 0;
	a->sm_lid = 0;
	a->max_vl_num = 1;
	a->subnet_timeout = 18;
	a->active_width = 2;  /* 4X */
	a->active_speed = 32; /* EDR */
	a->phys_state = 5;    /* LinkUp */
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
}

int hc_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len)
{
	if (port != 1 || !a || !hc_obj_live(c, HC_OBJ_CONTEXT))
		return EINVAL;
	if (hc_gone(hc_ctx(c)))
		return EIO;
	struct ibv_port_attr p;
	fill_port(&p);
	memcpy(a, &p, len < sizeof p ? len : sizeof p);
	return 0;
}

/* The exported ibv_query_port takes the old structure: everything up to
 * port_cap_flags2. */
HC_EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *a)
{
	return hc_query_port(c, port, (struct ibv_port_attr *)a, offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* The port's GID table, as Linux builds a RoCE port's: for each address
 * of the port a RoCE v1 and a RoCE v2 entry. Index 0 and 1 are the IPv6
 * link-local form (fe80:: and the node GUID as the interface ID), 2 and 3
 * the IPv4-mapped form of the daemon's --roce address, or of 127.0.0.1
 * for a daemon without a wire. The rest are empty. */
enum { HC_GID_ENTRIES = 4 };

/* hc_gid_entry gives the GID at index and its type (enum ibv_gid_type),
 * or returns ENODATA for an empty entry. */
int hc_gid_entry(const struct hc_context *ctx, unsigned index, union ibv_gid *g, unsigned *type)
{
	memset(g, 0, sizeof *g);
	if (index >= HC_GID_ENTRIES)
		return ENODATA;
	if (index < 2) {
		g->global.subnet_prefix = htobe64(0xfe80000000000000ULL);
		g->global.interface_id = htobe64(hc_guid(ctx->caps.lid));
	} else if (ctx->caps.has_gid) {
		memcpy(g->raw, ctx->caps.gid, sizeof g->raw);
	} else {
		static const uint8_t loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
		memcpy(g->raw, loop, sizeof g->raw);
	}
	*type = index & 1 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
	return 0;
}

/* hc_check_av checks an address vector against the RoCE port as the
 * kernel does (rdma_check_ah_attr, rdma_get_gid_attr): a global route is
 * required (EINVAL), its source GID index must name an entry (EINVAL past
 * the table, ENODATA for an empty one). 0 if it is good. */
int hc_check_av(const struct hc_context *ctx, const struct ibv_ah_attr *ah)
{
	if (ah->port_num > 1 || !ah->is_global || ah->grh.sgid_index >= HC_GID_TBL_LEN)
		return EINVAL;
	union ibv_gid g;
	unsigned type;
	return hc_gid_entry(ctx, ah->grh.sgid_index, &g, &type);
}

HC_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	if (!hc_obj_live(c, HC_OBJ_CONTEXT) || !gid || port != 1 || index < 0 || index >= HC_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	unsigned type;
	hc_gid_entry(hc_ctx(c), (unsigned)index, gid, &type); /* an empty entry reads as zeros */
	return 0;
}

HC_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
				uint32_t flags, size_t len)
{
	if (!hc_obj_live(c, HC_OBJ_CONTEXT) || !e || flags || port != 1 || len < sizeof *e || index >= HC_GID_TBL_LEN)
		return EINVAL;
	union ibv_gid g;
	unsigned type;
	if (hc_gid_entry(hc_ctx(c), index, &g, &type))
		return ENODATA;
	memset(e, 0, len);
	e->gid = g;
	e->gid_index = index;
	e->port_num = 1;
	e->gid_type = type;
	e->ndev_ifindex = 0; /* no netdev (docs/CONFORMANCE.md) */
	return 0;
}

HC_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *e, size_t max, uint32_t flags,
				       size_t len)
{
	if (!hc_obj_live(c, HC_OBJ_CONTEXT) || !e || flags || len < sizeof *e)
		return -EINVAL;
	if (max < HC_GID_ENTRIES)
		return -EINVAL; /* rdma-core: the table does not fit */
	for (unsigned i = 0; i < HC_GID_ENTRIES; i++) {
		int err = _ibv_query_gid_ex(c, 1, i, (struct ibv_gid_entry *)((char *)e + i * len), 0, len);
		if (err)
			return -err;
	}
	return HC_GID_ENTRIES;
}

/* ibv_query_gid_type (IBVERBS_PRIVATE) answers as rdma-core 44's, which
 * asks _ibv_query_gid_ex: enum ibv_gid_type_sysfs, 0 for IB / RoCE v1 (and
 * for an empty entry), 1 for RoCE v2; -1 with errno for a bad port or
 * index. */
HC_EXPORT int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned index, enum ibv_gid_type_sysfs *type)
{
	if (!hc_obj_live(c, HC_OBJ_CONTEXT) || !type || port != 1 || index >= HC_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	union ibv_gid g;
	unsigned t = IBV_GID_TYPE_ROCE_V1;
	hc_gid_entry(hc_ctx(c), index, &g, &t);
	*type = t == IBV_GID_TYPE_ROCE_V2 ? IBV_GID_TYPE_SYSFS_ROCE_V2 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

HC_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	if (!hc_obj_live(c, HC_OBJ_CONTEXT) || !pkey || port != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xFFFF);
	return 0;
}

HC_EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	if (!hc_obj_live(c, HC_OBJ_CONTEXT)) {
		errno = EINVAL;
		return -1;
	}
	if (port != 1 || be16toh(pkey) != 0xFFFF) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

/* Protection domains. */
HC_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, NULL);
	struct hc_context *ctx = hc_ctx(c);
	uint8_t in[8], out[64];
	hc_cmd_header(in, HC_CMD_ALLOC_PD);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err) {
		errno = err;
		return NULL;
	}
	struct ibv_pd *pd = calloc(1, sizeof *pd);
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = c;
	pd->handle = hc_get32(out + 8) & 0xFFFFFF;
	hc_obj_add(pd, HC_OBJ_PD);
	return pd;
}

HC_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	HC_LIVE(pd, HC_OBJ_PD, EINVAL);
	struct hc_context *ctx = hc_ctx(pd->context);
	uint8_t in[12], out[64];
	hc_cmd_header(in, HC_CMD_DEALLOC_PD);
	hc_put32(in + 8, pd->handle);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (err && err != EIO)
		return err;
	hc_obj_del(pd);
	free(pd);
	return 0;
}

/* Completion channels. */
HC_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, NULL);
	struct hc_channel *ch = hc_zalloc(sizeof *ch);
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ch->ch.fd < 0) {
		int e = errno;
		hc_zfree(ch);
		errno = e;
		return NULL;
	}
	ch->ch.context = c;
	pthread_mutex_init(&ch->mu, NULL);
	hc_obj_add(&ch->ch, HC_OBJ_CHANNEL);
	return &ch->ch;
}

HC_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	HC_LIVE(channel, HC_OBJ_CHANNEL, EINVAL);
	struct hc_channel *ch = (struct hc_channel *)channel;
	pthread_mutex_lock(&ch->mu);
	int busy = ch->ncq > 0;
	pthread_mutex_unlock(&ch->mu);
	if (busy) {
		errno = EBUSY;
		return EBUSY;
	}
	hc_obj_del(channel);
	close(ch->ch.fd);
	hc_zfree(ch->q);
	hc_zfree(ch);
	return 0;
}

/* wait_event waits until an event queue's eventfd is readable (it is
 * while the queue holds events). It returns -1 with EAGAIN if the program
 * made the fd non-blocking, and with EINTR if a signal ends the wait, as
 * libibverbs' read of the kernel's event file does. */
static int wait_event(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && (fl & O_NONBLOCK)) {
		errno = EAGAIN;
		return -1;
	}
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, -1) < 0 ? -1 : 0;
}

HC_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	HC_LIVE(channel, HC_OBJ_CHANNEL, -1);
	if (!cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	struct hc_channel *ch = (struct hc_channel *)channel;
	for (;;) {
		pthread_mutex_lock(&ch->mu);
		if (ch->n == 0) {
			pthread_mutex_unlock(&ch->mu);
			if (wait_event(ch->ch.fd) < 0)
				return -1;
			continue;
		}
		struct hc_cq *q = ch->q[ch->head];
		ch->head = (ch->head + 1) % ch->cap;
		if (--ch->n == 0)
			hc_evfd_clear(ch->ch.fd);
		/* Counted before ch->mu is released: ibv_destroy_cq takes the
		 * CQ's events off the queue under ch->mu, then waits for the
		 * acks of those already handed out. */
		pthread_mutex_lock(&q->cqx.mutex);
		q->comp_reported++;
		pthread_mutex_unlock(&q->cqx.mutex);
		pthread_mutex_unlock(&ch->mu);
		*cq = ibv_cq_ex_to_cq(&q->cqx);
		*cq_context = q->cqx.cq_context;
		return 0;
	}
}

HC_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!hc_obj_live(cq, HC_OBJ_CQ))
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* Async events. */

/* async_count counts an event of a QP or CQ handed to the program (ack 0)
 * or acked (ack 1), under the object's mutex, as libibverbs counts them. */
static void async_count(const struct ibv_async_event *ev, int ack)
{
	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
	case IBV_EVENT_SQ_DRAINED: {
		struct ibv_qp *q = ev->element.qp;
		pthread_mutex_lock(&q->mutex);
		if (ack)
			q->events_completed++;
		else
			hc_qp(q)->async_reported++;
		pthread_cond_signal(&q->cond);
		pthread_mutex_unlock(&q->mutex);
		break;
	}
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *q = ev->element.srq;
		pthread_mutex_lock(&q->mutex);
		if (ack)
			q->events_completed++;
		else
			hc_srq(q)->async_reported++;
		pthread_cond_signal(&q->cond);
		pthread_mutex_unlock(&q->mutex);
		break;
	}
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *c = ev->element.cq;
		pthread_mutex_lock(&c->mutex);
		if (ack)
			c->async_events_completed++;
		else
			hc_cq(c)->async_reported++;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->mutex);
		break;
	}
	default:
		break;
	}
}
HC_EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	HC_LIVE(c, HC_OBJ_CONTEXT, -1);
	if (!ev) {
		errno = EINVAL;
		return -1;
	}
	struct hc_context *ctx = hc_ctx(c);
	for (;;) {
		pthread_mutex_lock(&ctx->mu);
		struct hc_async *a = ctx->async_head;
		if (a) {
			ctx->async_head = a->next;
			if (!a->next) {
				ctx->async_tail = NULL;
				hc_evfd_clear(c->async_fd);
			}
			async_count(&a->ev, 0); /* before mu goes: see hc_purge_async */
		}
		pthread_mutex_unlock(&ctx->mu);
		if (!a) {
			if (wait_event(c->async_fd) < 0)
				return -1;
			continue;
		}
		*ev = a->ev;
		hc_zfree(a);
		return 0;
	}
}

/* ibv_ack_async_event acks an event of a QP or CQ: ibv_destroy_qp and
 * ibv_destroy_cq wait until every event handed out has been acked. */
HC_EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	if (!ev)
		return;
	switch (ev->event_type) { /* an event of an object that is not one: nothing to ack */
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
	case IBV_EVENT_SQ_DRAINED:
		if (!hc_obj_live(ev->element.qp, HC_OBJ_QP))
			return;
		break;
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		if (!hc_obj_live(ev->element.srq, HC_OBJ_SRQ))
			return;
		break;
	case IBV_EVENT_CQ_ERR:
		if (!hc_obj_live(ev->element.cq, HC_OBJ_CQ))
			return;
		break;
	default:
		break;
	}
	async_count(ev, 1);
}

/* Object tables: CQs and QPs by number, for events and completions. The
 * numbers are small (the device hands them out from a low base), so a
 * table indexed by number grows as needed. */
int hc_table_put(struct hc_context *ctx, int kind, uint32_t num, void *obj)
{
	pthread_mutex_lock(&ctx->obj_mu);
	void ***tab = kind == HC_TAB_QP	    ? (void ***)&ctx->qps
		      : kind == HC_TAB_CQ   ? (void ***)&ctx->cqs
		      : kind == HC_TAB_SRQ  ? (void ***)&ctx->srqs
					    : (void ***)&ctx->mkeys;
	size_t *n = kind == HC_TAB_QP ? &ctx->nqps : kind == HC_TAB_CQ ? &ctx->ncqs : kind == HC_TAB_SRQ ? &ctx->nsrqs : &ctx->nmkeys;
	if (num >= *n && (!obj || num >= 1u << 24)) {
		pthread_mutex_unlock(&ctx->obj_mu);
		return obj ? EPROTO : 0; /* object numbers are 24 bits */
	}
	if (num >= *n) {
		size_t nn = *n ? *n : 64;
		while (nn <= num)
			nn *= 2;
		void **t = hc_zalloc(nn * sizeof *t);
		if (!t) {
			pthread_mutex_unlock(&ctx->obj_mu);
			return ENOMEM;
		}
		if (*n)
			memcpy(t, *tab, *n * sizeof *t);
		hc_zfree(*tab);
		*tab = t;
		*n = nn;
	}
	hc_obj_add(obj, kind); /* (the destroyer deletes it, just before it frees it) */
	(*tab)[num] = obj;
	pthread_mutex_unlock(&ctx->obj_mu);
	return 0;
}

/* hc_find_qp_on returns QP qpn if it completes on cq. The caller holds
 * cq's lock: a QP on cq cannot be freed while it is held (destroy cleans
 * its CQs first). */
struct hc_qp *hc_find_qp_on(struct hc_context *ctx, uint32_t qpn, struct hc_cq *cq)
{
	pthread_mutex_lock(&ctx->obj_mu);
	struct hc_qp *q = qpn < ctx->nqps ? ctx->qps[qpn] : NULL;
	if (q && q->scq != cq && q->rcq != cq)
		q = NULL;
	pthread_mutex_unlock(&ctx->obj_mu);
	return q;
}

/* sysfs: what ibv_devinfo reads of the device; any other file is read
 * from the real sysfs as rdma-core does (librdmacm asks for
 * /sys/class/misc/rdma_cm/abi_version). -1 with errno on failure. */
HC_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	if (!dir || !file || (!buf && size)) {
		errno = EINVAL;
		return -1;
	}
	if (strcmp(dir, HC_IBDEV_PATH) == 0) {
		const char *v = NULL;
		if (strcmp(file, "board_id") == 0)
			v = HC_BOARD_ID;
		else if (strcmp(file, "fw_ver") == 0)
			v = HC_FW_VER;
		else if (strcmp(file, "node_type") == 0)
			v = "1: CA";
		if (!v) {
			errno = ENOENT;
			return -1;
		}
		if (size == 0)
			return 0;
		int n = snprintf(buf, size, "%s", v);
		return n < (int)size ? n : (int)size - 1;
	}
	char path[4096];
	if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = size ? read(fd, buf, size) : 0;
	close(fd);
	if (n < 0)
		return -1;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	else if ((size_t)n < size)
		buf[n] = '\0';
	return (int)n;
}

/* ibv_get_sysfs_path (IBVERBS_PRIVATE) returns the sysfs root, as
 * rdma-core's: $SYSFS_PATH without its trailing slashes when the caller is
 * not set-uid, else "/sys". librdmacm passes it to ibv_read_sysfs_file. */
static char sysfs_path[256] = "/sys";
static pthread_once_t sysfs_once = PTHREAD_ONCE_INIT;

static void sysfs_path_init(void)
{
	const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
	if (!env || !*env || strlen(env) >= sizeof sysfs_path)
		return;
	size_t n = strlen(env);
	while (n > 1 && env[n - 1] == '/')
		n--;
	memcpy(sysfs_path, env, n);
	sysfs_path[n] = '\0';
}

HC_EXPORT const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sysfs_once, sysfs_path_init);
	return sysfs_path;
}

/* Strings. */
HC_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((unsigned)s < sizeof names / sizeof names[0] && names[s])
		return names[s];
	return "unknown";
}

HC_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const names[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};
	if (t >= 0 && (unsigned)t < sizeof names / sizeof names[0] && names[t])
		return names[t];
	return "unknown";
}

HC_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const names[] = {
		[IBV_PORT_NOP] = "no state change (NOP)", [IBV_PORT_DOWN] = "down",
		[IBV_PORT_INIT] = "init",		  [IBV_PORT_ARMED] = "armed",
		[IBV_PORT_ACTIVE] = "active",		  [IBV_PORT_ACTIVE_DEFER] = "active defer",
	};
	if ((unsigned)s < sizeof names / sizeof names[0] && names[s])
		return names[s];
	return "unknown";
}

HC_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const names[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	if ((unsigned)e < sizeof names / sizeof names[0] && names[e])
		return names[e];
	return "unknown";
}

/* Rates. */
static const struct {
	enum ibv_rate rate;
	int mult, mbps;
} rates[] = {
	{IBV_RATE_2_5_GBPS, 1, 2500},	 {IBV_RATE_5_GBPS, 2, 5000},	   {IBV_RATE_10_GBPS, 4, 10000},
	{IBV_RATE_20_GBPS, 8, 20000},	 {IBV_RATE_30_GBPS, 12, 30000},	   {IBV_RATE_40_GBPS, 16, 40000},
	{IBV_RATE_60_GBPS, 24, 60000},	 {IBV_RATE_80_GBPS, 32, 80000},	   {IBV_RATE_120_GBPS, 48, 120000},
	{IBV_RATE_14_GBPS, 5, 14062},	 {IBV_RATE_56_GBPS, 22, 56250},	   {IBV_RATE_112_GBPS, 45, 112500},
	{IBV_RATE_168_GBPS, 67, 168750}, {IBV_RATE_25_GBPS, 10, 25781},	   {IBV_RATE_100_GBPS, 40, 103125},
	{IBV_RATE_200_GBPS, 80, 206250}, {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
	{IBV_RATE_50_GBPS, 20, 53125},	 {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
};
#define NRATES (sizeof rates / sizeof rates[0])

HC_EXPORT int ibv_rate_to_mult(enum ibv_rate r)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == r)
			return rates[i].mult;
	return -1;
}

HC_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

HC_EXPORT int ibv_rate_to_mbps(enum ibv_rate r)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == r)
			return rates[i].mbps;
	return -1;
}

HC_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* Address handles: checked as the kernel checks a RoCE AV (hc_check_av),
 * kept, and their datagram segment built once: rlid the LID the AV's GID
 * names (hc_dest_lid: the device's fabric address), the GRH fields, the
 * destination GID. */
HC_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	if (!hc_obj_live(pd, HC_OBJ_PD) || !attr || attr->port_num != 1) {
		errno = EINVAL;
		return NULL;
	}
	struct hc_context *ctx = hc_ctx(pd->context);
	int err = hc_check_av(ctx, attr);
	if (err) {
		errno = err;
		return NULL;
	}
	struct hc_ah *a = calloc(1, sizeof *a);
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->attr = *attr;
	uint8_t *v = a->av;
	v[12] = (uint8_t)((attr->static_rate & 0xF) << 4 | (attr->sl & 7) << 1);
	hc_put16(v + 14, hc_dest_lid(ctx, attr));
	v[26] = attr->grh.traffic_class;
	v[27] = attr->grh.hop_limit;
	hc_put32(v + 28, 1u << 30 | (uint32_t)attr->grh.sgid_index << 20 | (attr->grh.flow_label & 0xFFFFF));
	memcpy(v + 32, attr->grh.dgid.raw, 16);
	hc_obj_add(&a->ah, HC_OBJ_AH);
	return &a->ah;
}

/* grh_version tells the header a UD receive buffer starts with, as
 * libibverbs does: 6 for a GRH (IPv6 header), 4 for RoCEv2 over IPv4 (the
 * IPv4 header in the last 20 bytes, its checksum right), -1 otherwise. */
static int grh_version(const uint8_t *g)
{
	const uint8_t *h = g + 20;
	if ((h[0] >> 4) == 4 && (h[0] & 0xF) == 5) {
		uint32_t sum = 0;
		for (int i = 0; i < 20; i += 2)
			sum += (uint32_t)h[i] << 8 | h[i + 1];
		while (sum > 0xFFFF)
			sum = (sum & 0xFFFF) + (sum >> 16);
		if (sum == 0xFFFF)
			return 4;
	}
	return (g[0] >> 4) == 6 ? 6 : -1;
}

/* find_gid returns the index of gid in the port's table with type, or
 * -1. */
static int find_gid(const struct hc_context *ctx, const union ibv_gid *gid, unsigned type)
{
	for (unsigned i = 0; i < HC_GID_ENTRIES; i++) {
		union ibv_gid g;
		unsigned t;
		if (!hc_gid_entry(ctx, i, &g, &t) && t == type && !memcmp(&g, gid, sizeof g))
			return (int)i;
	}
	return -1;
}

/* ibv_init_ah_from_wc builds the AV that answers a UD receive: on a RoCE
 * port the completion must carry a GRH (IBV_WC_GRH); its source becomes
 * the destination GID and its destination names the source GID entry (of
 * type RoCE v2 for an IPv4 header or a GRH followed by UDP, v1 for a GRH
 * followed by a BTH). It returns 0, or -1 with errno (EINVAL for a
 * bad argument or no GRH, EPROTONOSUPPORT for a header it cannot read,
 * ENOENT for a destination that is not one of the port's GIDs). */
HC_EXPORT int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *ah)
{
	if (!hc_obj_live(c, HC_OBJ_CONTEXT) || !wc || !ah || port != 1 || !grh || !(wc->wc_flags & IBV_WC_GRH)) {
		errno = EINVAL;
		return -1;
	}
	memset(ah, 0, sizeof *ah);
	ah->port_num = port;
	ah->sl = wc->sl;
	ah->is_global = 1;
	ah->grh.hop_limit = 0xFF;
	const uint8_t *g = (const uint8_t *)grh;
	union ibv_gid sgid;
	memset(&sgid, 0, sizeof sgid);
	unsigned type = IBV_GID_TYPE_ROCE_V2;
	switch (grh_version(g)) {
	case 4:
		ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xFF;
		memcpy(ah->grh.dgid.raw + 12, g + 20 + 12, 4);
		sgid.raw[10] = sgid.raw[11] = 0xFF;
		memcpy(sgid.raw + 12, g + 20 + 16, 4);
		ah->grh.traffic_class = g[21];
		break;
	case 6: /* its next header tells RoCE v2 (UDP) from v1 (a BTH), as libibverbs reads it */
		if (g[6] == 0x1B)
			type = IBV_GID_TYPE_ROCE_V1;
		else if (g[6] != 17) { /* UDP */
			errno = EPROTONOSUPPORT;
			return -1;
		}
		memcpy(ah->grh.dgid.raw, g + 8, 16);
		memcpy(sgid.raw, g + 24, 16);
		ah->grh.traffic_class = (uint8_t)(hc_get32(g) >> 20);
		ah->grh.flow_label = hc_get32(g) & 0xFFFFF;
		break;
	default:
		errno = EPROTONOSUPPORT;
		return -1;
	}
	int i = find_gid(hc_ctx(c), &sgid, type);
	if (i < 0) {
		errno = ENOENT;
		return -1;
	}
	ah->grh.sgid_index = (uint8_t)i;
	return 0;
}

HC_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
					       uint8_t port)
{
	struct ibv_ah_attr a;
	if (!hc_obj_live(pd, HC_OBJ_PD) || ibv_init_ah_from_wc(pd->context, port, wc, grh, &a)) {
		if (!hc_obj_live(pd, HC_OBJ_PD))
			errno = EINVAL;
		return NULL;
	}
	return ibv_create_ah(pd, &a);
}

HC_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	HC_LIVE(ah, HC_OBJ_AH, EINVAL);
	hc_obj_del(ah);
	free(ah);
	return 0;
}
