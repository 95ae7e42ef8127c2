/* The context's operation tables for verbs the device does not model.
 * verbs.h's inline wrappers call through these; each entry reports the
 * verb once on stderr ("hcasim: unimplemented: NAME") and fails with
 * EOPNOTSUPP, NULL for the ones returning an object. */
#include <errno.h>

#include "hcasim.h"

#define UNIMPL_INT(fn, verb)                                                                                           \
	static int fn(void)                                                                                            \
	{                                                                                                              \
		HC_UNIMPLEMENTED(verb);                                                                                \
		errno = EOPNOTSUPP;                                                                                    \
		return EOPNOTSUPP;                                                                                     \
	}
#define UNIMPL_PTR(fn, verb)                                                                                           \
	static void *fn(void)                                                                                          \
	{                                                                                                              \
		HC_UNIMPLEMENTED(verb);                                                                                \
		errno = EOPNOTSUPP;                                                                                    \
		return NULL;                                                                                           \
	}

UNIMPL_INT(u_advise_mr, "ibv_advise_mr")
UNIMPL_PTR(u_alloc_null_mr, "ibv_alloc_null_mr")
UNIMPL_INT(u_read_counters, "ibv_read_counters")
UNIMPL_INT(u_attach_counters, "ibv_attach_counters_point_flow")
UNIMPL_PTR(u_create_counters, "ibv_create_counters")
UNIMPL_INT(u_destroy_counters, "ibv_destroy_counters")
UNIMPL_PTR(u_reg_dm_mr, "ibv_reg_dm_mr")
UNIMPL_PTR(u_alloc_dm, "ibv_alloc_dm")
UNIMPL_INT(u_free_dm, "ibv_free_dm")
UNIMPL_INT(u_modify_esp, "ibv_modify_flow_action_esp")
UNIMPL_INT(u_destroy_action, "ibv_destroy_flow_action")
UNIMPL_PTR(u_create_esp, "ibv_create_flow_action_esp")
UNIMPL_INT(u_rate_limit, "ibv_modify_qp_rate_limit")
UNIMPL_PTR(u_parent_domain, "ibv_alloc_parent_domain")
UNIMPL_INT(u_dealloc_td, "ibv_dealloc_td")
UNIMPL_PTR(u_alloc_td, "ibv_alloc_td")
UNIMPL_INT(u_modify_cq, "ibv_modify_cq")
UNIMPL_INT(u_post_srq_ops, "ibv_post_srq_ops")
UNIMPL_INT(u_rt_values, "ibv_query_rt_values_ex")

/* SET stores an UNIMPL function in a table entry of another type: the
 * entries are only ever called by verbs.h wrappers, with arguments the
 * functions ignore. */
#define SET(field, fn) (field) = (__typeof__(field))(void (*)(void))(fn)

void hc_fill_unimplemented_ops(struct hc_context *ctx)
{
	struct ibv_context_ops *o = &ctx->vctx.context.ops;
	o->alloc_mw = hc_alloc_mw;
	o->bind_mw = hc_bind_mw;
	o->dealloc_mw = hc_dealloc_mw;
	o->post_srq_recv = hc_post_srq_recv;
	struct verbs_context *v = &ctx->vctx;
	SET(v->advise_mr, u_advise_mr);
	SET(v->alloc_null_mr, u_alloc_null_mr);
	SET(v->read_counters, u_read_counters);
	SET(v->attach_counters_point_flow, u_attach_counters);
	SET(v->create_counters, u_create_counters);
	SET(v->destroy_counters, u_destroy_counters);
	SET(v->reg_dm_mr, u_reg_dm_mr);
	SET(v->alloc_dm, u_alloc_dm);
	SET(v->free_dm, u_free_dm);
	SET(v->modify_flow_action_esp, u_modify_esp);
	SET(v->destroy_flow_action, u_destroy_action);
	SET(v->create_flow_action_esp, u_create_esp);
	SET(v->modify_qp_rate_limit, u_rate_limit);
	SET(v->alloc_parent_domain, u_parent_domain);
	SET(v->dealloc_td, u_dealloc_td);
	SET(v->alloc_td, u_alloc_td);
	SET(v->modify_cq, u_modify_cq);
	SET(v->post_srq_ops, u_post_srq_ops);
	v->destroy_rwq_ind_table = hc_destroy_ind_table;
	v->create_rwq_ind_table = hc_create_ind_table;
	v->destroy_wq = hc_destroy_wq;
	v->modify_wq = hc_modify_wq;
	v->create_wq = hc_create_wq;
	SET(v->query_rt_values, u_rt_values);
	v->ibv_create_flow = hc_create_flow;
	v->ibv_destroy_flow = hc_destroy_flow;
	v->open_qp = hc_open_qp;
	v->get_srq_num = hc_get_srq_num;
	v->create_srq_ex = hc_create_srq_ex;
	v->open_xrcd = hc_open_xrcd;
	v->close_xrcd = hc_close_xrcd;
}
