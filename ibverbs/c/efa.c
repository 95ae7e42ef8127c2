/* libefa.so.1's direct verbs: hcasim's device is no EFA device, and libefa
 * answers such a device quietly — EOPNOTSUPP, or NULL with errno
 * EOPNOTSUPP — so callers that probe for EFA (libfabric's efa provider,
 * pyverbs) go on without a word. */
#include <errno.h>

#include <infiniband/efadv.h>

#include "hcasim.h"

HC_EXPORT int efadv_query_device(struct ibv_context *c, struct efadv_device_attr *a, uint32_t inlen)
{
	return EOPNOTSUPP;
}

HC_EXPORT int efadv_query_ah(struct ibv_ah *ah, struct efadv_ah_attr *a, uint32_t inlen) { return EOPNOTSUPP; }

HC_EXPORT struct ibv_qp *efadv_create_driver_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a, uint32_t type)
{
	errno = EOPNOTSUPP;
	return NULL;
}

HC_EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a,
					    struct efadv_qp_init_attr *e, uint32_t inlen)
{
	errno = EOPNOTSUPP;
	return NULL;
}

HC_EXPORT struct ibv_cq_ex *efadv_create_cq(struct ibv_context *c, struct ibv_cq_init_attr_ex *a,
					    struct efadv_cq_init_attr *e, uint32_t inlen)
{
	errno = EOPNOTSUPP;
	return NULL;
}

HC_EXPORT struct efadv_cq *efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex *cq)
{
	errno = EOPNOTSUPP;
	return NULL;
}
