/* allsyms: every function the front end exports (the names on stdin, one
 * per line, as the export table lists them) is called with every argument
 * NULL / 0, and then with every argument a pointer to a zeroed object the
 * library never handed out (a program's bad or stale pointer: its inner
 * pointers are NULL, its handles 0). Each call runs in a child of its own
 * so that a crash names its function; the child has 10 s. A call may fail
 * in any documented way; it must not crash or hang. Before that, stale
 * and fake objects where the verbs expect live ones get EINVAL.
 * ibverbs/baduse_test.go (TestAllSymbols) builds and runs it. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checks.h"

/* Up to six integer-class arguments travel in registers on x86-64 and
 * arm64, so one type calls any of the exported functions. */
typedef long (*anyfn)(long, long, long, long, long, long);

static void call(anyfn f, int pattern)
{
	/* The fake object: 64 KiB of zeros, larger than any verbs object. */
	static uint8_t *fake;
	if (!fake) {
		fake = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (fake == MAP_FAILED)
			_exit(3);
	}
	long a = pattern ? (long)fake : 0;
	f(a, a, a, a, a, a);
}

/* stale: objects used after they were destroyed, and the fake object
 * where a live one belongs, get the documented error (EINVAL) from the
 * entry points that take them. */
static void stale(void)
{
	static uint8_t fake[4096];
	uint16_t lid;
	struct ibv_context *ctx = open_first(&lid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!pd || !cq)
		die("setup");
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = {1, 1, 1, 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!mr || !qp)
		die("setup");
	CHECK("destroy_qp", ibv_destroy_qp(qp) == 0, "failed");
	CHECK("destroy_qp again: EINVAL", ibv_destroy_qp(qp) == EINVAL, "not EINVAL");
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT};
	CHECK("modify_qp of a destroyed QP: EINVAL", ibv_modify_qp(qp, &at, IBV_QP_STATE) == EINVAL, "not EINVAL");
	CHECK("dereg_mr", ibv_dereg_mr(mr) == 0, "failed");
	CHECK("dereg_mr again: EINVAL", ibv_dereg_mr(mr) == EINVAL, "not EINVAL");
	CHECK("destroy_cq", ibv_destroy_cq(cq) == 0, "failed");
	CHECK("destroy_cq again: EINVAL", ibv_destroy_cq(cq) == EINVAL, "not EINVAL");
	errno = 0;
	CHECK("reg_mr on a fake PD: NULL, EINVAL", !ibv_reg_mr((struct ibv_pd *)fake, buf, sizeof buf, 0) && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("create_qp on a CQ as PD: NULL, EINVAL", !ibv_create_qp((struct ibv_pd *)cq, &qa) && errno == EINVAL,
	      "errno %d", errno);
	CHECK("dealloc_pd", ibv_dealloc_pd(pd) == 0, "failed");
	CHECK("dealloc_pd again: EINVAL", ibv_dealloc_pd(pd) == EINVAL, "not EINVAL");
	errno = 0;
	CHECK("alloc_pd on a fake context: NULL, EINVAL", !ibv_alloc_pd((struct ibv_context *)fake) && errno == EINVAL,
	      "errno %d", errno);
	CHECK("close_device", ibv_close_device(ctx) == 0, "failed");
	CHECK("close_device again: EINVAL", ibv_close_device(ctx) == EINVAL, "not EINVAL");
	errno = 0;
	CHECK("open_device of a fake device: NULL, EINVAL", !ibv_open_device((struct ibv_device *)fake) && errno == EINVAL,
	      "errno %d", errno);
}

int main(int argc, char **argv)
{
	stale();
	FILE *list = argc > 1 ? fopen(argv[1], "r") : NULL;
	if (!list) {
		CHECK("the symbol list", 0, "usage: allsyms FILE");
		return 1;
	}
	/* The front end, as LD_LIBRARY_PATH finds it. */
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW);
	if (!lib) {
		CHECK("dlopen libibverbs.so.1", 0, "%s", dlerror());
		return 1;
	}
	char line[256], name[128], version[64];
	while (fgets(line, sizeof line, list)) {
		if (sscanf(line, "%127s %63s", name, version) != 2)
			continue;
		char label[200];
		snprintf(label, sizeof label, "%s@%s", name, version);
		anyfn f = (anyfn)dlvsym(lib, name, version);
		if (!f) {
			CHECK(label, 0, "not found by dlvsym");
			continue;
		}
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			alarm(10);
			call(f, 0);
			call(f, 1);
			_exit(0);
		}
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) < 0) {
			CHECK(label, 0, "fork/wait: %s", strerror(errno));
			continue;
		}
		CHECK(label, !WIFSIGNALED(st), "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	}
	return 0;
}
