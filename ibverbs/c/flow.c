/* Flow steering: ibv_create_flow and ibv_destroy_flow (verbs.h's inline
 * wrappers call them through the context's table). The specs after the
 * ibv_flow_attr are translated, as libibverbs' ib_spec_to_kern_spec
 * translates them for the kernel, into the device's CREATE_FLOW layout:
 * per spec a BE16 type, a BE16 size, then the filter's value and mask. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hcasim.h"

#define FLOW_IN_SPECS 24
#define FLOW_MAX_SPECS 16
#define FLOW_MAX_IN (FLOW_IN_SPECS + FLOW_MAX_SPECS * (4 + 2 * 40))

/* spec_filter returns the offset and size of a spec's value (the mask
 * follows it at the same size in the verbs struct), and the struct's size;
 * 0 for a type the device does not match. The filters the device knows
 * are those of verbs.h, byte for byte. */
static size_t spec_filter(uint32_t type, size_t *val, size_t *sz)
{
	switch (type) {
	case IBV_FLOW_SPEC_ETH:
		*val = offsetof(struct ibv_flow_spec_eth, val), *sz = sizeof(struct ibv_flow_eth_filter);
		return sizeof(struct ibv_flow_spec_eth);
	case IBV_FLOW_SPEC_IPV4:
		*val = offsetof(struct ibv_flow_spec_ipv4, val), *sz = sizeof(struct ibv_flow_ipv4_filter);
		return sizeof(struct ibv_flow_spec_ipv4);
	case IBV_FLOW_SPEC_IPV4_EXT:
		*val = offsetof(struct ibv_flow_spec_ipv4_ext, val), *sz = sizeof(struct ibv_flow_ipv4_ext_filter);
		return sizeof(struct ibv_flow_spec_ipv4_ext);
	case IBV_FLOW_SPEC_IPV6:
		*val = offsetof(struct ibv_flow_spec_ipv6, val), *sz = sizeof(struct ibv_flow_ipv6_filter);
		return sizeof(struct ibv_flow_spec_ipv6);
	case IBV_FLOW_SPEC_TCP:
	case IBV_FLOW_SPEC_UDP:
		*val = offsetof(struct ibv_flow_spec_tcp_udp, val), *sz = sizeof(struct ibv_flow_tcp_udp_filter);
		return sizeof(struct ibv_flow_spec_tcp_udp);
	case IBV_FLOW_SPEC_ACTION_DROP:
		*val = *sz = 0;
		return sizeof(struct ibv_flow_spec_action_drop);
	}
	return 0;
}

/* known_type reports whether libibverbs knows a spec type (it refuses the
 * others with EINVAL before the kernel sees them). */
static int known_type(uint32_t t)
{
	switch (t & ~(uint32_t)IBV_FLOW_SPEC_INNER) {
	case IBV_FLOW_SPEC_ETH:
	case IBV_FLOW_SPEC_IPV4:
	case IBV_FLOW_SPEC_IPV6:
	case IBV_FLOW_SPEC_IPV4_EXT:
	case IBV_FLOW_SPEC_ESP:
	case IBV_FLOW_SPEC_TCP:
	case IBV_FLOW_SPEC_UDP:
	case IBV_FLOW_SPEC_GRE:
	case IBV_FLOW_SPEC_MPLS:
	case IBV_FLOW_SPEC_VXLAN_TUNNEL:
	case IBV_FLOW_SPEC_ACTION_TAG:
	case IBV_FLOW_SPEC_ACTION_DROP:
	case IBV_FLOW_SPEC_ACTION_HANDLE:
	case IBV_FLOW_SPEC_ACTION_COUNT:
		return 1;
	}
	return 0;
}

struct ibv_flow *hc_create_flow(struct ibv_qp *q, struct ibv_flow_attr *a)
{
	if (!q || !a) {
		errno = EINVAL;
		return NULL;
	}
	struct hc_qp *qp = hc_qp(q);
	if (a->comp_mask || a->port != 1 || a->type > IBV_FLOW_ATTR_SNIFFER || a->num_of_specs > FLOW_MAX_SPECS ||
	    (a->flags & ~(uint32_t)IBV_FLOW_ATTR_FLAGS_DONT_TRAP) || q->qp_type != IBV_QPT_RAW_PACKET) {
		/* Egress rules, and rules on anything but a raw packet QP
		 * (mlx5's steering to an RC or UD QP), are not modelled. */
		errno = q->qp_type != IBV_QPT_RAW_PACKET || (a->flags & IBV_FLOW_ATTR_FLAGS_EGRESS) ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	uint8_t in[FLOW_MAX_IN] = {0}, out[64];
	size_t n = FLOW_IN_SPECS;
	const uint8_t *s = (const uint8_t *)(a + 1);
	for (unsigned i = 0; i < a->num_of_specs; i++) {
		struct ibv_flow_spec hdr; /* only its header is read: the spec may be shorter */
		memcpy(&hdr.hdr, s, sizeof hdr.hdr);
		size_t val, sz, need = spec_filter(hdr.hdr.type, &val, &sz);
		if (!need) {
			errno = known_type(hdr.hdr.type) ? EOPNOTSUPP : EINVAL;
			return NULL;
		}
		if (hdr.hdr.size < need) {
			errno = EINVAL;
			return NULL;
		}
		hc_put16(in + n, (uint16_t)hdr.hdr.type);
		hc_put16(in + n + 2, (uint16_t)(4 + 2 * sz));
		memcpy(in + n + 4, s + val, sz);
		memcpy(in + n + 4 + sz, s + val + sz, sz);
		n += 4 + 2 * sz;
		s += hdr.hdr.size;
	}
	struct hc_flow *f = hc_zalloc(sizeof *f);
	if (!f) {
		errno = ENOMEM;
		return NULL;
	}
	hc_cmd_header(in, HC_CMD_CREATE_FLOW);
	hc_put32(in + 8, q->qp_num);
	in[12] = (uint8_t)a->type;
	in[13] = a->num_of_specs;
	hc_put16(in + 14, a->priority);
	hc_put32(in + 16, a->flags);
	int err = hc_cmd(qp->ctx, in, n, out, sizeof out, NULL);
	if (err) {
		hc_zfree(f);
		errno = err;
		return NULL;
	}
	f->id = hc_get32(out + 8);
	f->flow.context = q->context;
	f->flow.handle = f->id;
	return &f->flow;
}

int hc_destroy_flow(struct ibv_flow *fl)
{
	if (!fl)
		return EINVAL;
	struct hc_flow *f = (struct hc_flow *)fl;
	uint8_t in[12], out[64];
	hc_cmd_header(in, HC_CMD_DESTROY_FLOW);
	hc_put32(in + 8, f->id);
	int err = hc_cmd(hc_ctx(fl->context), in, sizeof in, out, sizeof out, NULL);
	if (err && err != EIO)
		return err;
	hc_zfree(f);
	return 0;
}
