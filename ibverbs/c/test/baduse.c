/* baduse: a libibverbs program (built against the installed headers and
 * libibverbs, run on hcasim's) that checks what bad use gets — errno
 * values, NULLs, error completions — and the memory semantics of
 * registration (malloc, stack, unaligned, overlapping, neighbours, fork).
 * It prints "ok NAME" or "FAIL NAME: why" per check and exits 1 if any
 * failed. ibverbs/baduse_test.go builds and runs it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "checks.h"

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint16_t lid;

static struct side make_side(void)
{
	struct side s;
	s.cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!s.cq)
		die("create cq");
	struct ibv_qp_init_attr ia = {.send_cq = s.cq, .recv_cq = s.cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2,
					      .max_inline_data = 64}};
	s.qp = ibv_create_qp(pd, &ia);
	if (!s.qp)
		die("create qp");
	return s;
}

static int to_rts(struct ibv_qp *qp, uint32_t dest)
{
	return rc_connect(qp, dest, lid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 2);
}

/* poll_one waits (boundedly) for one completion. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 200000000L; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

/* write_wait posts an RDMA WRITE from (lkey, src) to (rkey, dst) and
 * returns its completion's status (-1: none). */
static int write_wait(struct side *s, uint32_t lkey, void *src, uint32_t len, uint32_t rkey, void *dst)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = rkey;
	struct ibv_send_wr *bad;
	if (ibv_post_send(s->qp, &wr, &bad))
		return -2;
	struct ibv_wc wc;
	return poll_one(s->cq, &wc) ? (int)wc.status : -1;
}

static void registration(void)
{
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	errno = 0;
	CHECK("reg_mr NULL", !ibv_reg_mr(pd, NULL, 4096, 0) && errno == EINVAL, "errno %d", errno);
	char buf[64];
	errno = 0;
	CHECK("reg_mr length 0", !ibv_reg_mr(pd, buf, 0, 0) && errno == EINVAL, "errno %d", errno);
	errno = 0;
	CHECK("reg_mr remote write without local write", !ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_REMOTE_WRITE) &&
							       errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("reg_mr ODP", !ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) &&
				    errno == EOPNOTSUPP,
	      "errno %d", errno);
	errno = 0;
	CHECK("reg_mr implicit ODP", !ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) &&
					     errno == EOPNOTSUPP,
	      "errno %d", errno);
	void *gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 8192);
	errno = 0;
	CHECK("reg_mr unmapped memory", !ibv_reg_mr(pd, gone, 8192, 0) && errno == EFAULT, "errno %d", errno);
	void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	errno = 0;
	CHECK("reg_mr PROT_NONE memory", !ibv_reg_mr(pd, none, 4096, 0) && errno == EFAULT, "errno %d", errno);
	munmap(none, 4096);
	char path[] = "/tmp/hcasim-baduse-XXXXXX";
	int fd = mkstemp(path);
	unlink(path);
	if (fd >= 0 && ftruncate(fd, 4096) == 0) {
		void *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		errno = 0;
		CHECK("reg_mr shared file mapping", !ibv_reg_mr(pd, shared, 4096, 0) && errno == EOPNOTSUPP, "errno %d",
		      errno);
		munmap(shared, 4096);
	}
	if (fd >= 0)
		close(fd);

	/* Data through registered malloc, stack and unaligned memory. */
	struct side a = make_side(), b = make_side();
	if (to_rts(a.qp, b.qp->qp_num) || to_rts(b.qp, a.qp->qp_num))
		die("connect");
	char *heap = malloc(10000);
	memset(heap, 'h', 10000);
	char stack[3000];
	memset(stack, 's', sizeof stack);
	char *src = heap + 1001, *dst = stack + 7; /* unaligned, inside pages shared with neighbours */
	struct ibv_mr *ms = ibv_reg_mr(pd, src, 300, rw), *md = ibv_reg_mr(pd, dst, 300, rw);
	CHECK("reg_mr malloc and stack", ms && md, "errno %d", errno);
	if (!ms || !md)
		exit(1);
	CHECK("mr fields", ms->addr == src && ms->length == 300 && ms->lkey == ms->rkey, "addr %p len %zu", ms->addr,
	      ms->length);
	memcpy(src, "written through the device", 27);
	int st = write_wait(&a, ms->lkey, src, 27, md->rkey, dst);
	CHECK("write heap to stack", st == IBV_WC_SUCCESS && memcmp(dst, "written through the device", 27) == 0,
	      "status %d", st);
	CHECK("neighbours intact", heap[1000] == 'h' && heap[1301] == 'h' && stack[6] == 's' && stack[7 + 300] == 's',
	      "heap %c %c stack %c %c", heap[1000], heap[1301], stack[6], stack[7 + 300]);
	/* An overlapping registration: the device sees the same bytes. */
	struct ibv_mr *mo = ibv_reg_mr(pd, heap, 10000, rw);
	CHECK("overlapping reg_mr", mo != NULL, "errno %d", errno);
	if (mo) {
		st = write_wait(&a, md->lkey, dst, 27, mo->rkey, heap + 5000);
		CHECK("write into the overlapping MR", st == IBV_WC_SUCCESS && memcmp(heap + 5000, dst, 27) == 0,
		      "status %d", st);
		ibv_dereg_mr(mo);
	}
	/* Memory the program unmapped and mapped anew while an MR was still
	 * registered over it: a new registration sees the new pages. */
	char *m1 = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *r1 = ibv_reg_mr(pd, m1, 8192, rw);
	munmap(m1, 8192);
	char *m2 = mmap(m1, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	memset(m2, 'n', 8192);
	struct ibv_mr *r2 = ibv_reg_mr(pd, m2, 8192, rw);
	st = r1 && r2 ? write_wait(&a, r2->lkey, m2 + 100, 16, md->rkey, dst) : -3;
	CHECK("registration over replaced memory", st == IBV_WC_SUCCESS && dst[0] == 'n' && dst[15] == 'n', "status %d, %c",
	      st, dst[0]);
	if (r1)
		ibv_dereg_mr(r1);
	if (r2)
		ibv_dereg_mr(r2);
	CHECK("replaced memory left alone", m2[0] == 'n' && m2[8191] == 'n', "%c", m2[0]);
	munmap(m2, 8192);
	memcpy(src, "written through the device", 27);
	write_wait(&a, ms->lkey, src, 27, md->rkey, dst);

	/* Fork: the child gets a copy of registered memory; the parent's stays
	 * registered. */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		src[0] = 'C';
		_exit(0);
	}
	int ws = 0;
	waitpid(pid, &ws, 0);
	CHECK("fork copies registered pages", src[0] == 'w' && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
	      "parent sees %c (fork %d, wait status %#x)", src[0], pid, ws);
	memcpy(src, "after the fork", 14);
	st = write_wait(&a, ms->lkey, src, 14, md->rkey, dst);
	CHECK("registered memory works after fork", st == IBV_WC_SUCCESS && memcmp(dst, "after the fork", 14) == 0,
	      "status %d", st);
	memcpy(src, "written through the device", 27);
	st = write_wait(&a, ms->lkey, src, 27, md->rkey, dst);
	CHECK("dereg_mr", ibv_dereg_mr(ms) == 0 && ibv_dereg_mr(md) == 0, "errno %d", errno);
	CHECK("memory kept after dereg", memcmp(dst, "written through the device", 27) == 0 && heap[1000] == 'h' &&
						 stack[6] == 's',
	      "dst %.27s", dst);
	pid = fork();
	if (pid == 0) {
		src[1] = 'X';
		_exit(0);
	}
	waitpid(pid, &ws, 0);
	CHECK("fork copies deregistered pages", src[1] != 'X', "parent sees the child's write");

	/* Bad keys: error completions, then flushes. */
	struct ibv_mr *m = ibv_reg_mr(pd, heap, 4096, rw);
	/* An SGE of length 0 gets no data segment (as rdma-core writes
	 * none): its key is never looked at. */
	st = write_wait(&a, m->lkey + 0x100, heap, 0, m->rkey, heap + 2048);
	CHECK("zero-length SGE skipped", st == IBV_WC_SUCCESS, "status %d", st);
	st = write_wait(&a, m->lkey + 0x100, heap, 16, m->rkey, heap + 2048);
	CHECK("bad lkey: LOC_PROT_ERR", st == IBV_WC_LOC_PROT_ERR, "status %d", st);
	st = write_wait(&a, m->lkey, heap, 16, m->rkey, heap + 2048);
	CHECK("after an error: WR_FLUSH_ERR", st == IBV_WC_WR_FLUSH_ERR, "status %d", st);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK("query_qp sees ERR", ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "state %d", qa.qp_state);
	struct side c = make_side(), d = make_side();
	if (to_rts(c.qp, d.qp->qp_num) || to_rts(d.qp, c.qp->qp_num))
		die("connect");
	st = write_wait(&c, m->lkey, heap, 16, m->rkey + 0x200, heap + 2048);
	CHECK("bad rkey: REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	ibv_dereg_mr(m);
	free(heap);
}

static void objects(void)
{
	errno = 0;
	CHECK("create_cq 0 entries", !ibv_create_cq(ctx, 0, NULL, NULL, 0) && errno == EINVAL, "errno %d", errno);
	errno = 0;
	CHECK("create_cq too many", !ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0) && errno == EINVAL, "errno %d", errno);
	errno = 0;
	CHECK("create_cq bad vector", !ibv_create_cq(ctx, 4, NULL, NULL, 5) && errno == EINVAL, "errno %d", errno);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 31, .max_recv_sge = 1}};
	errno = 0;
	CHECK("create_qp too many SGEs", !ibv_create_qp(pd, &ia) && errno == EINVAL, "errno %d", errno);
	ia.cap.max_send_sge = 1;
	ia.cap.max_inline_data = 4096;
	errno = 0;
	CHECK("create_qp too much inline", !ibv_create_qp(pd, &ia) && errno == EINVAL, "errno %d", errno);
	ia.cap.max_inline_data = 0;
	ia.qp_type = IBV_QPT_DRIVER;
	errno = 0;
	CHECK("create_qp DRIVER (mlx5dv_create_qp only)", !ibv_create_qp(pd, &ia) && errno == EOPNOTSUPP, "errno %d", errno);
	ia.qp_type = IBV_QPT_RC;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK("create_qp", qp != NULL, "errno %d", errno);
	CHECK("create_qp reports its caps", ia.cap.max_send_wr >= 4 && ia.cap.max_recv_wr >= 4, "%u %u",
	      ia.cap.max_send_wr, ia.cap.max_recv_wr);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	CHECK("modify RESET to RTR", ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "accepted");
	a.qp_state = IBV_QPS_INIT;
	CHECK("modify to INIT without its attributes", ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "accepted");
	a.port_num = 2;
	CHECK("modify to INIT on port 2",
	      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EINVAL,
	      "accepted");
	char buf[64];
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = 0};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad = NULL;
	CHECK("post_send in RESET", ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "accepted");
	struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *rbad = NULL;
	CHECK("post_recv in RESET", ibv_post_recv(qp, &rwr, &rbad) == EINVAL && rbad == &rwr, "accepted");
	CHECK("destroy a CQ in use", ibv_destroy_cq(cq) == EBUSY, "accepted");
	CHECK("dealloc a PD in use", ibv_dealloc_pd(pd) == EBUSY, "accepted");
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	rwr.num_sge = 2;
	CHECK("post_recv too many SGEs", ibv_post_recv(qp, &rwr, &rbad) == EINVAL, "accepted");
	rwr.num_sge = 1;
	int n = 0;
	while (ibv_post_recv(qp, &rwr, &rbad) == 0 && n < 100)
		n++;
	CHECK("post_recv on a full queue: ENOMEM", n == (int)ia.cap.max_recv_wr, "posted %d of %u", n,
	      ia.cap.max_recv_wr);
	CHECK("destroy qp", ibv_destroy_qp(qp) == 0, "errno %d", errno);
	CHECK("destroy cq", ibv_destroy_cq(cq) == 0, "errno %d", errno);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	CHECK("destroy a channel in use", ibv_destroy_comp_channel(ch) == EBUSY, "accepted");
	ibv_destroy_cq(cq);
	CHECK("destroy a channel", ibv_destroy_comp_channel(ch) == 0, "errno %d", errno);
}

/* Events: completion events and async events on file descriptors that
 * poll(2) works on. */
static void events(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qa = ibv_create_qp(pd, &ia), *qb = ibv_create_qp(pd, &ia);
	if (!qa || !qb || to_rts(qa, qb->qp_num) || to_rts(qb, qa->qp_num))
		die("event qps");
	struct ibv_cq *got;
	void *gctx;
	errno = 0;
	CHECK("get_cq_event with none: EAGAIN", ibv_get_cq_event(ch, &got, &gctx) == -1 && errno == EAGAIN, "errno %d",
	      errno);
	CHECK("req_notify_cq", ibv_req_notify_cq(cq, 0) == 0, "errno %d", errno);
	char *buf = malloc(4096);
	struct ibv_mr *m = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = m->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + 64;
	wr.wr.rdma.rkey = m->rkey;
	ibv_post_send(qa, &wr, &bad);
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int pr = poll(&p, 1, 5000);
	CHECK("poll on the channel fd", pr == 1 && (p.revents & POLLIN), "poll %d revents %#x", pr, p.revents);
	CHECK("get_cq_event", ibv_get_cq_event(ch, &got, &gctx) == 0 && got == cq && gctx == (void *)0x1234,
	      "cq %p ctx %p", (void *)got, gctx);
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc;
	CHECK("the completion", ibv_poll_cq(cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "status %d", wc.status);

	/* SQ drained: RTS -> SQD raises it on the async fd. */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_SQD};
	CHECK("modify to SQD", ibv_modify_qp(qa, &a, IBV_QP_STATE) == 0, "errno %d", errno);
	p.fd = ctx->async_fd;
	pr = poll(&p, 1, 5000);
	struct ibv_async_event ev = {0};
	CHECK("poll on the async fd", pr == 1, "poll %d", pr);
	CHECK("IBV_EVENT_SQ_DRAINED",
	      ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_SQ_DRAINED && ev.element.qp == qa,
	      "event %d", ev.event_type);
	ibv_ack_async_event(&ev);
	a.qp_state = IBV_QPS_RTS;
	CHECK("modify SQD to RTS", ibv_modify_qp(qa, &a, IBV_QP_STATE) == 0, "errno %d", errno);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_dereg_mr(m);
	free(buf);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
}

int main(void)
{
	ctx = open_first(&lid);
	struct ibv_port_attr pa;
	errno = 0;
	CHECK("query_port 2", ibv_query_port(ctx, 2, &pa) == EINVAL, "accepted");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("pd");
	registration();
	objects();
	events();
	return failed;
}
