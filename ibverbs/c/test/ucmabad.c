/* ucmabad: a program that drives hcasim's rdma_cm device
 * (libhcasim_ucma.so, preloaded) as no librdmacm would: short and
 * oversized writes, unknown commands, NULL and wild response pointers,
 * a wild write buffer, ids of nobody, a blocking fd turned non-blocking.
 * Each gets the errno the kernel's rdma_ucm gives (EINVAL, EFAULT, ENOENT,
 * EAGAIN, ENOSPC), never a crash; and the fd polls readable exactly while
 * an event waits. It prints "ok NAME" or "FAIL NAME: why" per check.
 * ibverbs/baduse_test.go builds and runs it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <rdma/rdma_user_cm.h>

#include "checks.h"

static int fd;

/* send_cmd writes one command (header and payload) and returns 0 or errno. */
static int send_cmd(uint32_t cmd, uint16_t out, const void *payload, uint16_t in)
{
	uint8_t b[8 + 512];
	struct rdma_ucm_cmd_hdr h = {.cmd = cmd, .in = in, .out = out};
	memcpy(b, &h, sizeof h);
	memcpy(b + 8, payload, in);
	ssize_t n = write(fd, b, 8 + (size_t)in);
	return n == 8 + (ssize_t)in ? 0 : errno;
}

static int readable(void)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* blocked_get waits in a blocking GET_EVENT on fd2 (no event comes). */
static int fd2;
static volatile int returned;
static void *blocked_get(void *arg)
{
	struct rdma_ucm_event_resp ev;
	struct rdma_ucm_get_event ge = {.response = (uintptr_t)&ev};
	uint8_t b[16];
	struct rdma_ucm_cmd_hdr h = {.cmd = RDMA_USER_CM_CMD_GET_EVENT, .in = sizeof ge, .out = sizeof ev};
	memcpy(b, &h, 8);
	memcpy(b + 8, &ge, 8);
	(void)!write(fd2, b, sizeof b);
	returned = 1;
	return arg;
}

int main(void)
{
	fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("open /dev/infiniband/rdma_cm (is libhcasim_ucma.so preloaded?)");
	struct stat st;
	CHECK("fstat says a character device", !fstat(fd, &st) && S_ISCHR(st.st_mode), "mode %o", st.st_mode);
	/* The verbs node UCX looks for: a read-write character device. */
	CHECK("stat of /dev/infiniband/uverbs0: a character device",
	      !stat("/dev/infiniband/uverbs0", &st) && S_ISCHR(st.st_mode), "errno %d", errno);
	CHECK("access of /dev/infiniband/uverbs0: read-write", !access("/dev/infiniband/uverbs0", R_OK | W_OK), "errno %d",
	      errno);
	CHECK("stat of /dev/infiniband/uverbs: no such node", stat("/dev/infiniband/uverbs", &st) < 0, "found");
	CHECK("stat of /dev/infiniband/uverbs0x: no such node", stat("/dev/infiniband/uverbs0x", &st) < 0, "found");
	uint8_t junk[16] = {0};
	CHECK("a write shorter than the header: EINVAL", write(fd, junk, 4) < 0 && errno == EINVAL, "errno %d", errno);
	volatile uintptr_t wild = 8; /* hidden from the compiler's bounds checks */
	CHECK("a wild write buffer: EFAULT", write(fd, (void *)wild, 32) < 0 && errno == EFAULT, "errno %d", errno);
	CHECK("an unknown command: EINVAL", send_cmd(99, 0, junk, 0) == EINVAL, "accepted");
	struct rdma_ucm_cmd_hdr lie = {.cmd = RDMA_USER_CM_CMD_CREATE_ID, .in = 400, .out = 4};
	CHECK("in past the write: EINVAL", write(fd, &lie, sizeof lie) < 0 && errno == EINVAL, "errno %d", errno);
	struct rdma_ucm_create_id c = {.uid = 7, .ps = RDMA_PS_TCP, .qp_type = 2};
	CHECK("CREATE_ID without a response: EFAULT", send_cmd(RDMA_USER_CM_CMD_CREATE_ID, 4, &c, sizeof c) == EFAULT,
	      "accepted");
	c.response = 1;
	CHECK("CREATE_ID to a wild response: EFAULT", send_cmd(RDMA_USER_CM_CMD_CREATE_ID, 4, &c, sizeof c) == EFAULT,
	      "accepted");
	struct rdma_ucm_create_id_resp cr;
	c.response = (uintptr_t)&cr;
	CHECK("CREATE_ID with out 2: ENOSPC", send_cmd(RDMA_USER_CM_CMD_CREATE_ID, 2, &c, sizeof c) == ENOSPC, "accepted");
	CHECK("CREATE_ID of port space 0x42: EINVAL",
	      send_cmd(RDMA_USER_CM_CMD_CREATE_ID, 4, &(struct rdma_ucm_create_id){.ps = 0x42, .response = c.response},
		       sizeof c) == EINVAL,
	      "accepted");
	CHECK("CREATE_ID", !send_cmd(RDMA_USER_CM_CMD_CREATE_ID, 4, &c, sizeof c), "errno %d", errno);
	struct rdma_ucm_destroy_id d = {.response = (uintptr_t)junk, .id = 12345};
	CHECK("DESTROY_ID of no id: ENOENT", send_cmd(RDMA_USER_CM_CMD_DESTROY_ID, 4, &d, sizeof d) == ENOENT, "accepted");
	struct rdma_ucm_set_option so = {.optval = 8, .id = cr.id, .level = 0, .optname = 0, .optlen = 1};
	CHECK("SET_OPTION from a wild optval: EFAULT", send_cmd(RDMA_USER_CM_CMD_SET_OPTION, 0, &so, sizeof so) == EFAULT,
	      "accepted");
	fcntl(fd, F_SETFL, O_NONBLOCK);
	struct rdma_ucm_event_resp ev;
	struct rdma_ucm_get_event ge = {.response = (uintptr_t)&ev};
	CHECK("no event: not readable", !readable(), "readable");
	CHECK("GET_EVENT with none, non-blocking: EAGAIN",
	      send_cmd(RDMA_USER_CM_CMD_GET_EVENT, sizeof ev, &ge, sizeof ge) == EAGAIN, "accepted");
	struct rdma_ucm_resolve_ip r = {.id = cr.id, .timeout_ms = 2000};
	struct sockaddr_in *dst = (struct sockaddr_in *)&r.dst_addr;
	dst->sin_family = AF_INET;
	dst->sin_addr.s_addr = htonl(0x7f000001);
	CHECK("RESOLVE_IP", !send_cmd(RDMA_USER_CM_CMD_RESOLVE_IP, 0, &r, sizeof r), "errno %d", errno);
	CHECK("an event waits: readable", readable(), "not readable");
	CHECK("GET_EVENT with out 100: ENOSPC", send_cmd(RDMA_USER_CM_CMD_GET_EVENT, 100, &ge, sizeof ge) == ENOSPC,
	      "accepted");
	ge.response = 16;
	CHECK("GET_EVENT to a wild response: EFAULT",
	      send_cmd(RDMA_USER_CM_CMD_GET_EVENT, sizeof ev, &ge, sizeof ge) == EFAULT, "accepted");
	ge.response = (uintptr_t)&ev;
	int e = send_cmd(RDMA_USER_CM_CMD_GET_EVENT, sizeof ev, &ge, sizeof ge);
	CHECK("GET_EVENT: ADDR_RESOLVED", !e && ev.event == 0 /* RDMA_CM_EVENT_ADDR_RESOLVED */ && ev.uid == 7, "errno %d event %u",
	      e, ev.event);
	CHECK("read: not readable", !readable(), "readable");
	struct rdma_ucm_migrate_id m = {.response = (uintptr_t)junk, .id = cr.id, .fd = 0};
	CHECK("MIGRATE_ID from an fd that is no channel: EBADF",
	      send_cmd(RDMA_USER_CM_CMD_MIGRATE_ID, 4, &m, sizeof m) == EBADF, "accepted");
	d.id = cr.id;
	CHECK("DESTROY_ID", !send_cmd(RDMA_USER_CM_CMD_DESTROY_ID, 4, &d, sizeof d), "errno %d", errno);
	CHECK("close", !close(fd), "errno %d", errno);
	/* rping closes its channel while its event thread waits in GET_EVENT:
	 * the thread stays blocked (the kernel's behaviour), nothing crashes. */
	fd2 = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	pthread_t th;
	if (fd2 < 0 || pthread_create(&th, NULL, blocked_get, NULL))
		die("second channel");
	usleep(100000);
	CHECK("close under a blocked GET_EVENT", !close(fd2), "errno %d", errno);
	int again = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC); /* may reuse the number */
	usleep(100000);
	CHECK("the blocked GET_EVENT stays blocked", !returned, "it returned");
	if (again >= 0)
		close(again);
	return failed;
}
