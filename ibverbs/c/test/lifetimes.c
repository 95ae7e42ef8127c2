/* lifetimes: a libibverbs program (built against the installed headers and
 * libibverbs, run on hcasim's) that checks what threads, events and fork
 * may do to the library's objects: several threads posting to one QP, a
 * poll between ibv_wr_start and ibv_wr_complete, destroy waiting for the
 * acks of events handed out and dropping unread ones, event waits ended
 * by signals or non-blocking fds, and fork with registered memory the
 * program has unmapped, replaced or made read-only. It prints "ok NAME"
 * or "FAIL NAME: why" per check and exits 1 if any failed.
 * ibverbs/baduse_test.go builds and runs it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "checks.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint16_t lid;
static char *buf; /* 8 KiB: WRITEs go from its first page to its second */
static struct ibv_mr *mr;

static struct ibv_qp *make_qp(struct ibv_cq *cq, int wr, uint64_t send_ops)
{
	struct ibv_qp_init_attr_ex ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = wr, .max_recv_wr = wr, .max_send_sge = 1, .max_recv_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	if (send_ops) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = send_ops;
	}
	struct ibv_qp *q = ibv_create_qp_ex(ctx, &ia);
	if (!q)
		die("create qp");
	return q;
}

/* connect_pair connects qa and qb to each other. */
static void connect_pair(struct ibv_qp *qa, struct ibv_qp *qb)
{
	const unsigned rw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (rc_connect(qa, qb->qp_num, lid, rw, 2) || rc_connect(qb, qa->qp_num, lid, rw, 2))
		die("connect");
}

/* post_write posts a signaled 8-byte RDMA WRITE from buf + off to
 * buf + 4096 + off. */
static int post_write(struct ibv_qp *qp, uint64_t id, size_t off)
{
	char *src = buf + off, *dst = buf + 4096 + off;
	struct ibv_sge s = {.addr = (uintptr_t)src, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	w.wr.rdma.remote_addr = (uintptr_t)dst;
	w.wr.rdma.rkey = mr->rkey;
	return ibv_post_send(qp, &w, &bad);
}

static enum ibv_qp_state state_of(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	return ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) ? (enum ibv_qp_state)-1 : a.qp_state;
}

/* Several threads posting to one QP (libibverbs allows it): every WR
 * gets exactly one completion, all successful. */
enum { POSTERS = 4, PER_POSTER = 100000 };
static struct ibv_qp *shared_qp;
static atomic_long post_errs;

static void *poster(void *arg)
{
	long id = (long)arg;
	for (long i = 0; i < PER_POSTER;) {
		int e = post_write(shared_qp, (uint64_t)id << 32 | (uint64_t)i, (size_t)id * 64);
		if (e == ENOMEM) {
			sched_yield(); /* the ring is full: the poller frees it */
			continue;
		}
		if (e) {
			atomic_fetch_add(&post_errs, 1);
			return NULL;
		}
		i++;
	}
	return NULL;
}

static void concurrent_posting(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	if (!cq)
		die("create cq");
	shared_qp = make_qp(cq, 512, 0);
	struct ibv_qp *peer = make_qp(cq, 512, 0);
	connect_pair(shared_qp, peer);
	pthread_t t[POSTERS];
	for (long i = 0; i < POSTERS; i++)
		pthread_create(&t[i], NULL, poster, (void *)i);
	long got = 0, bad = 0, want = (long)POSTERS * PER_POSTER;
	long next[POSTERS] = {0}, order = 0; /* each poster's WRs complete in its order */
	time_t t0 = time(NULL);
	while (got < want && time(NULL) - t0 < 30) {
		struct ibv_wc wc[32];
		int n = ibv_poll_cq(cq, 32, wc);
		for (int i = 0; i < n; i++, got++) {
			bad += wc[i].status != IBV_WC_SUCCESS;
			long p = (long)(wc[i].wr_id >> 32), k = (long)(wc[i].wr_id & 0xFFFFFFFF);
			if (p < 0 || p >= POSTERS || k != next[p]++)
				order++;
		}
	}
	for (int i = 0; i < POSTERS; i++)
		pthread_join(t[i], NULL);
	struct ibv_wc extra;
	int more = ibv_poll_cq(cq, 1, &extra);
	CHECK("concurrent post_send: one completion per WR", got == want && more == 0 && !post_errs,
	      "%ld completions (+%d more) for %ld WRs, %ld post errors", got, more, want, (long)post_errs);
	CHECK("concurrent post_send: all successful, in each poster's order", bad == 0 && order == 0,
	      "%ld errors, %ld out of order", bad, order);
	CHECK("concurrent post_send: the QP stays in RTS", state_of(shared_qp) == IBV_QPS_RTS, "state %d",
	      state_of(shared_qp));
	ibv_destroy_qp(shared_qp);
	ibv_destroy_qp(peer);
	ibv_destroy_cq(cq);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "FAIL poll inside wr_start..wr_complete: it hangs\n";
	if (write(1, m, sizeof m - 1) < 0)
		_exit(2);
	_exit(1);
}

/* mlx5's poll_cq takes no send-queue lock: a thread may poll its send CQ
 * while it builds WRs between ibv_wr_start and ibv_wr_complete. */
static void poll_inside_wr(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq)
		die("create cq");
	struct ibv_qp *qa = make_qp(cq, 16, IBV_QP_EX_WITH_RDMA_WRITE), *qb = make_qp(cq, 16, 0);
	connect_pair(qa, qb);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	signal(SIGALRM, on_alarm);
	alarm(20);
	int polled = 0, err = 0;
	for (int round = 0; round < 2; round++) {
		ibv_wr_start(x);
		if (round == 1) {
			struct ibv_wc wc;
			for (int i = 0; i < 1000000 && !polled; i++)
				polled = ibv_poll_cq(cq, 1, &wc); /* round 0's completion */
		}
		x->wr_id = round;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)buf + 4096);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 8);
		err |= ibv_wr_complete(x);
	}
	alarm(0);
	signal(SIGALRM, SIG_DFL);
	CHECK("poll inside wr_start..wr_complete", polled == 1 && err == 0, "polled %d, wr_complete %d", polled, err);
	struct ibv_wc wc;
	int n = 0;
	for (int i = 0; i < 1000000 && !n; i++)
		n = ibv_poll_cq(cq, 1, &wc);
	CHECK("poll inside wr_start..wr_complete: the batch completes", n == 1 && wc.wr_id == 1 && wc.status == 0,
	      "n %d wr_id %llu status %d", n, (unsigned long long)wc.wr_id, wc.status);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_destroy_cq(cq);
}

/* ibv_destroy_cq waits until the CQ events handed out are acked, as
 * libibverbs does: a thread holding the CQ from ibv_get_cq_event may still
 * poll it. */
static struct ibv_comp_channel *ev_channel;
static atomic_int ev_acked, ev_polled_ok;

static void *event_thread(void *arg)
{
	(void)arg;
	struct ibv_cq *c;
	void *cc;
	if (ibv_get_cq_event(ev_channel, &c, &cc))
		return NULL;
	usleep(200000); /* the main thread is in ibv_destroy_cq by now */
	struct ibv_wc wc;
	int n = ibv_poll_cq(c, 1, &wc);
	atomic_store(&ev_polled_ok, n >= 0);
	atomic_store(&ev_acked, 1);
	ibv_ack_cq_events(c, 1);
	return NULL;
}

static void destroy_waits_for_acks(void)
{
	ev_channel = ibv_create_comp_channel(ctx);
	if (!ev_channel)
		die("create channel");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ev_channel, 0), *cq2 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq || !cq2)
		die("create cq");
	struct ibv_qp *qa = make_qp(cq, 16, 0), *qb = make_qp(cq2, 16, 0);
	connect_pair(qa, qb);
	pthread_t t;
	pthread_create(&t, NULL, event_thread, NULL);
	ibv_req_notify_cq(cq, 0);
	post_write(qa, 1, 0);
	usleep(50000);
	int e1 = ibv_destroy_qp(qa);
	int e2 = ibv_destroy_cq(cq);
	int acked = atomic_load(&ev_acked);
	pthread_join(t, NULL);
	CHECK("destroy_cq waits for the ack of an event handed out", e1 == 0 && e2 == 0 && acked && ev_polled_ok,
	      "destroy qp %d, cq %d, acked before %d", e1, e2, acked);

	/* Events queued and never read go with their CQ: the channel's fd is
	 * not readable after, and a wait on it is a wait for a new event. */
	cq = ibv_create_cq(ctx, 16, NULL, ev_channel, 0);
	qa = make_qp(cq, 16, 0);
	ibv_destroy_qp(qb);
	qb = make_qp(cq2, 16, 0);
	connect_pair(qa, qb);
	ibv_req_notify_cq(cq, 0);
	post_write(qa, 2, 0);
	struct pollfd p = {.fd = ev_channel->fd, .events = POLLIN};
	int ready = poll(&p, 1, 5000);
	ibv_destroy_qp(qa);
	e2 = ibv_destroy_cq(cq);
	int after = poll(&p, 1, 0);
	CHECK("destroy_cq drops its unread events", ready == 1 && e2 == 0 && after == 0,
	      "readable before %d, destroy %d, readable after %d", ready, e2, after);
	CHECK("destroy_comp_channel after its CQs", ibv_destroy_comp_channel(ev_channel) == 0, "errno %d", errno);
	ibv_destroy_qp(qb);
	ibv_destroy_cq(cq2);
}

/* Unread async events of a destroyed QP and CQ are dropped: none names a
 * destroyed object, and the async fd is not readable after. */
static void destroy_drops_async_events(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 1, NULL, NULL, 0), *cq2 = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq || !cq2)
		die("create cq");
	struct ibv_qp *qa = make_qp(cq, 16, 0), *qb = make_qp(cq2, 16, 0);
	connect_pair(qa, qb);
	for (int i = 0; i < 8; i++) /* more completions than the CQ holds: CQ_ERR, QP_FATAL */
		post_write(qa, (uint64_t)i, 0);
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	int ready = poll(&p, 1, 5000);
	usleep(100000); /* the rest of the events */
	void *gone_qp = qa, *gone_cq = cq;
	int e1 = ibv_destroy_qp(qa), e2 = ibv_destroy_cq(cq);
	int named = 0, n = 0;
	while (poll(&p, 1, 100) == 1 && n < 100) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev))
			break;
		n++;
		named += (void *)ev.element.qp == gone_qp || (void *)ev.element.cq == gone_cq;
		ibv_ack_async_event(&ev);
	}
	CHECK("destroy drops unread async events", ready == 1 && e1 == 0 && e2 == 0 && named == 0 && poll(&p, 1, 0) == 0,
	      "events before %d, destroy qp %d cq %d, %d of %d events name them", ready, e1, e2, named, n);
	ibv_destroy_qp(qb);
	ibv_destroy_cq(cq2);
}

static void on_signal(int sig) { (void)sig; }

/* A signal ends a wait for an event with EINTR, and a non-blocking fd
 * makes it EAGAIN, as libibverbs' read of the kernel's event file does. */
static void event_waits(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!ch)
		die("create channel");
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART */
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {.it_value = {.tv_usec = 100000}};
	setitimer(ITIMER_REAL, &it, NULL);
	struct ibv_cq *c;
	void *cc;
	errno = 0;
	int r = ibv_get_cq_event(ch, &c, &cc);
	CHECK("get_cq_event: a signal ends the wait", r == -1 && errno == EINTR, "returned %d errno %d", r, errno);
	setitimer(ITIMER_REAL, &it, NULL);
	struct ibv_async_event ev;
	errno = 0;
	r = ibv_get_async_event(ctx, &ev);
	CHECK("get_async_event: a signal ends the wait", r == -1 && errno == EINTR, "returned %d errno %d", r, errno);
	signal(SIGALRM, SIG_DFL);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	r = ibv_get_cq_event(ch, &c, &cc);
	CHECK("get_cq_event: non-blocking, nothing queued", r == -1 && errno == EAGAIN, "returned %d errno %d", r,
	      errno);
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	errno = 0;
	r = ibv_get_async_event(ctx, &ev);
	CHECK("get_async_event: non-blocking, nothing queued", r == -1 && errno == EAGAIN, "returned %d errno %d", r,
	      errno);
	fcntl(ctx->async_fd, F_SETFL, fl);
	ibv_destroy_comp_channel(ch);
}

/* perms returns the protections of the mapping holding a ("rw-p"). */
static const char *perms(void *a)
{
	static char out[8];
	snprintf(out, sizeof out, "none");
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		unsigned long s, e;
		char p[8];
		if (sscanf(line, "%lx-%lx %7s", &s, &e, p) == 3 && (uintptr_t)a >= s && (uintptr_t)a < e) {
			snprintf(out, sizeof out, "%s", p);
			break;
		}
	}
	if (f)
		fclose(f);
	return out;
}

static int fork_ok(void)
{
	fflush(stdout);
	pid_t p = fork();
	if (p == 0)
		_exit(7);
	int st = 0;
	return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 7;
}

/* fork with registered memory the program unmapped, replaced, or made
 * read-only: the fork handlers leave such pages as the program has them. */
static void fork_cases(void)
{
	size_t len = 1 << 20;
	char *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *fmr = ibv_reg_mr(pd, b, len, IBV_ACCESS_LOCAL_WRITE);
	if (!fmr)
		die("reg mr");
	munmap(b, len); /* freed without ibv_dereg_mr */
	mmap(b, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	CHECK("fork: registered pages unmapped and reserved PROT_NONE", fork_ok(), "fork failed");
	CHECK("fork: the reservation stays PROT_NONE", strcmp(perms(b), "---p") == 0, "%s", perms(b));
	CHECK("dereg_mr of the unmapped registration", ibv_dereg_mr(fmr) == 0, "errno %d", errno);
	munmap(b, len);

	b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fmr = ibv_reg_mr(pd, b, len, IBV_ACCESS_LOCAL_WRITE);
	if (!fmr)
		die("reg mr");
	char *s = mmap(b, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	strcpy(s, "shared-data");
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		s[0] = 'X';
		_exit(0);
	}
	waitpid(p, NULL, 0);
	CHECK("fork: a shared mapping over old registered pages stays shared", strcmp(s, "Xhared-data") == 0,
	      "the parent reads %.16s", s);
	ibv_dereg_mr(fmr);
	munmap(b, len);

	len = 1 << 16;
	b = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fmr = ibv_reg_mr(pd, b, len, 0);
	if (!fmr)
		die("reg mr read-only");
	char before[8];
	snprintf(before, sizeof before, "%s", perms(b));
	int ok = fork_ok();
	CHECK("fork keeps a registered page read-only", ok && before[1] == '-' && strcmp(perms(b), before) == 0,
	      "fork %d, before %s, after %s", ok, before, perms(b));
	ibv_dereg_mr(fmr);
	CHECK("dereg_mr keeps it read-only", perms(b)[1] == '-', "%s", perms(b));
	munmap(b, len);
}

int main(void)
{
	ctx = open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	buf = aligned_alloc(4096, 8192);
	mr = pd && buf ? ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!mr)
		die("alloc pd, reg mr");
	concurrent_posting();
	poll_inside_wr();
	destroy_waits_for_acks();
	destroy_drops_async_events();
	event_waits();
	fork_cases();
	ibv_dereg_mr(mr);
	free(buf);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
