/* callers: the libibverbs entry points librdmacm, UCX and libfabric call
 * before (or instead of) the common verbs, with the arguments they pass,
 * and the same entry points with bad arguments: each returns what
 * rdma-core 44 documents and none crashes the program. The private ones
 * (IBVERBS_PRIVATE, declared in rdma-core's driver.h, which Debian does
 * not install) are declared here as there. ibverbs/baduse_test.go builds
 * and runs it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "checks.h"

const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

int main(void)
{
	/* librdmacm's check_abi_version and ucma_init. */
	const char *sys = ibv_get_sysfs_path();
	CHECK("ibv_get_sysfs_path is the sysfs root", sys && strcmp(sys, "/sys") == 0, "got %s", sys ? sys : "NULL");
	CHECK("ibv_get_sysfs_path is stable", ibv_get_sysfs_path() == sys, "two different pointers");
	char value[8];
	errno = 0;
	int n = ibv_read_sysfs_file(sys, "class/misc/rdma_cm/abi_version", value, sizeof value);
	CHECK("ibv_read_sysfs_file of an absent file", n == -1 ? errno != 0 : n >= 0 && n < (int)sizeof value,
	      "returned %d, errno %d", n, errno);
	errno = 0;
	n = ibv_read_sysfs_file(NULL, "class/misc/rdma_cm/abi_version", value, sizeof value);
	CHECK("ibv_read_sysfs_file of no directory", n == -1 && errno == EINVAL, "returned %d, errno %d", n, errno);
	errno = 0;
	n = ibv_read_sysfs_file(sys, NULL, value, sizeof value);
	CHECK("ibv_read_sysfs_file of no file", n == -1 && errno == EINVAL, "returned %d, errno %d", n, errno);
	n = ibv_read_sysfs_file("/proc/self", "comm", value, 0);
	CHECK("ibv_read_sysfs_file into no room", n == 0, "returned %d", n);

	/* Fork support, as UCX and libfabric ask. */
	CHECK("ibv_fork_init", ibv_fork_init() == 0, "errno %d", errno);
	enum ibv_fork_status fs = ibv_is_fork_initialized();
	CHECK("ibv_is_fork_initialized", fs == IBV_FORK_UNNEEDED, "status %d", fs);
	char page[64];
	CHECK("ibv_dontfork_range", ibv_dontfork_range(page, sizeof page) == 0, "errno %d", errno);
	CHECK("ibv_dofork_range", ibv_dofork_range(page, sizeof page) == 0, "errno %d", errno);

	/* The device list as librdmacm's ucma_init walks it. */
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1)
		die("no device");
	__be64 guid = ibv_get_device_guid(list[0]);
	CHECK("ibv_get_device_guid", guid != 0, "a zero GUID");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("open device");
	CHECK("the device's GUID is the one ibv_query_device gives", ({
		      struct ibv_device_attr da;
		      ibv_query_device(ctx, &da) == 0 && da.node_guid == guid;
	      }),
	      "query device or GUID differs");
	ibv_free_device_list(list);

	/* ECE: librdmacm asks for it around connect and accept; hcasim has
	 * none, and says so as a provider without it does. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd or cq");
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("create qp");
	struct ibv_ece ece = {0};
	int rc = ibv_query_ece(qp, &ece);
	CHECK("ibv_query_ece without ECE", rc == EOPNOTSUPP, "returned %d", rc);
	ece.vendor_id = 0x02c9;
	rc = ibv_set_ece(qp, &ece);
	CHECK("ibv_set_ece without ECE", rc == EOPNOTSUPP, "returned %d", rc);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
