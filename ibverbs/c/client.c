/* The daemon connection: HELLO, request/reply, doorbells, and the reader
 * thread that takes replies and events (docs/PROTOCOL.md). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hcasim.h"

const char *hc_socket_path(void)
{
	const char *p = getenv("HCASIM_SOCKET");
	return p && *p ? p : "hcasim.sock";
}

static void put_header(uint8_t *h, int type, uint32_t id, size_t len)
{
	hc_put16(h, (uint16_t)type);
	hc_put16(h + 2, 0);
	hc_put32(h + 4, id);
	hc_put32(h + 8, (uint32_t)len);
}

/* send_msg sends one message, with fd as SCM_RIGHTS if fd >= 0. */
static int send_msg(int sock, int type, uint32_t id, const void *payload, size_t len, int fd)
{
	uint8_t h[HC_HDR];
	put_header(h, type, id, len);
	struct iovec iov[2] = {{h, HC_HDR}, {(void *)payload, len}};
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
	union {
		struct cmsghdr c;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	if (fd >= 0) {
		memset(&ctl, 0, sizeof ctl);
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof ctl.buf;
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof fd);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);
		if (n >= 0)
			return 0;
		if (errno != EINTR)
			return errno;
	}
}

/* hc_dial connects to the daemon at path and says HELLO; it returns the
 * socket, or -1 with errno set. */
int hc_dial(const char *path, uint16_t *lid)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof a.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(a.sun_path, path);
	uint8_t *r = NULL; /* the reply: 64 KiB, not on the caller's stack */
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&a, sizeof a) < 0)
		goto fail;
	uint8_t hello[8];
	hc_put32(hello, HC_MAGIC);
	hc_put16(hello + 4, HC_VERSION);
	hc_put16(hello + 6, 0);
	int err = send_msg(s, HC_T_HELLO, 1, hello, sizeof hello, -1);
	if (err) {
		errno = err;
		goto fail;
	}
	r = hc_zalloc(HC_MAX_MSG + 1);
	if (!r)
		goto fail;
	for (;;) {
		ssize_t n = recv(s, r, HC_MAX_MSG + 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < HC_HDR) {
			errno = n < 0 ? errno : ECONNREFUSED;
			goto fail;
		}
		int type = hc_get16(r);
		if (type == HC_T_EVENTS)
			continue;
		if (type != (HC_T_HELLO | HC_T_REPLY) || n < HC_HDR + 8 || hc_get32(r + HC_HDR) != 0 ||
		    hc_get16(r + HC_HDR + 4) != HC_VERSION) {
			errno = EPROTO;
			goto fail;
		}
		*lid = hc_get16(r + HC_HDR + 6);
		hc_zfree(r);
		return s;
	}
fail:;
	int e = errno;
	hc_zfree(r);
	close(s);
	errno = e;
	return -1;
}

/* dispatch_events hands the daemon's events on. An async event is queued
 * with its object looked up under obj_mu, which destroy takes to take the
 * object out of the table and its events off the queue: no event names a
 * destroyed object. */
static void dispatch_events(struct hc_context *ctx, const uint8_t *p, size_t len)
{
	for (size_t off = 0; off + 8 <= len; off += 8) {
		int type = p[off];
		uint32_t obj = hc_get32(p + off + 4) & 0xFFFFFF;
		struct ibv_async_event ev = {0};
		if (type == HC_EV_COMPLETION) {
			hc_cq_event(ctx, obj);
			continue;
		}
		pthread_mutex_lock(&ctx->obj_mu);
		switch (type) {
		case HC_EV_SQ_DRAINED:
		case HC_EV_LAST_WQE:
		case HC_EV_QP_FATAL: {
			struct hc_qp *qp = obj < ctx->nqps ? ctx->qps[obj] : NULL;
			if (!qp)
				break;
			if (type == HC_EV_QP_FATAL)
				hc_qp_saw_error(qp);
			ev.element.qp = &qp->qpx.qp_base;
			ev.event_type = type == HC_EV_SQ_DRAINED ? IBV_EVENT_SQ_DRAINED
					: type == HC_EV_LAST_WQE ? IBV_EVENT_QP_LAST_WQE_REACHED
								 : IBV_EVENT_QP_FATAL;
			hc_push_async(ctx, &ev);
			break;
		}
		case HC_EV_SRQ_LIMIT: {
			struct hc_srq *s = obj < ctx->nsrqs ? ctx->srqs[obj] : NULL;
			if (!s)
				break;
			ev.element.srq = &s->srq;
			ev.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
			hc_push_async(ctx, &ev);
			break;
		}
		case HC_EV_CQ_ERROR: {
			struct hc_cq *cq = obj < ctx->ncqs ? ctx->cqs[obj] : NULL;
			if (!cq)
				break;
			ev.element.cq = ibv_cq_ex_to_cq(&cq->cqx);
			ev.event_type = IBV_EVENT_CQ_ERR;
			hc_push_async(ctx, &ev);
			break;
		}
		default:
			break; /* unknown types are ignored */
		}
		pthread_mutex_unlock(&ctx->obj_mu);
	}
}

/* hc_gone reports whether the daemon's connection has ended: the device
 * is then as a ConnectX after a fatal error, where every command the
 * kernel would run fails with EIO. */
int hc_gone(struct hc_context *ctx)
{
	pthread_mutex_lock(&ctx->mu);
	int d = ctx->dead;
	pthread_mutex_unlock(&ctx->mu);
	return d;
}

/* conn_over marks the connection ended: waiting requests fail with EIO,
 * and the program gets IBV_EVENT_DEVICE_FATAL (once). */
static void conn_over(struct hc_context *ctx)
{
	pthread_mutex_lock(&ctx->mu);
	int was = ctx->dead;
	ctx->dead = 1;
	pthread_cond_broadcast(&ctx->cond);
	pthread_mutex_unlock(&ctx->mu);
	if (!was) {
		struct ibv_async_event ev = {.event_type = IBV_EVENT_DEVICE_FATAL};
		ev.element.port_num = 1;
		hc_push_async(ctx, &ev);
	}
}

/* reader takes every message the daemon sends: replies go to the waiting
 * request, events to their CQ channels and the async queue. It runs until
 * the daemon's end-of-file: after that the device touches none of this
 * process's memory. */
static void *reader(void *arg)
{
	struct hc_context *ctx = arg;
	uint8_t *buf = hc_zalloc(HC_MAX_MSG + 1);
	if (!buf)
		goto dead;
	for (;;) {
		ssize_t n = recv(ctx->sock, buf, HC_MAX_MSG + 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (n < HC_HDR) {
			conn_over(ctx); /* not a message: a request's reply may be lost in it */
			continue;
		}
		int type = hc_get16(buf);
		uint32_t id = hc_get32(buf + 4);
		size_t len = (size_t)n - HC_HDR;
		if (type == HC_T_EVENTS) {
			dispatch_events(ctx, buf + HC_HDR, len);
			continue;
		}
		if (type == HC_T_ERROR && id == 0) {
			conn_over(ctx); /* the daemon ends the connection: its end-of-file follows */
			continue;
		}
		pthread_mutex_lock(&ctx->mu);
		int ok = id != 0 && id == ctx->want_id && !ctx->reply_ready;
		if (ok) {
			memcpy(ctx->reply, buf + HC_HDR, len);
			ctx->reply_len = len;
			ctx->reply_type = type;
			ctx->reply_ready = 1;
			pthread_cond_broadcast(&ctx->cond);
		}
		pthread_mutex_unlock(&ctx->mu);
		/* A reply no request awaits breaks the protocol (the daemon
		 * answers each request once, in order): the request that
		 * waits for its own would wait forever. The device is gone, as
		 * a ConnectX whose firmware stops answering commands. */
		if (!ok)
			conn_over(ctx);
	}
dead:
	hc_zfree(buf);
	conn_over(ctx);
	return NULL;
}

/* hc_start starts the reader thread, with every signal blocked in it. */
int hc_start(struct hc_context *ctx)
{
	ctx->reply = hc_zalloc(HC_MAX_MSG);
	if (!ctx->reply)
		return ENOMEM;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = pthread_create(&ctx->reader, NULL, reader, ctx);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return err;
	ctx->reader_started = 1;
	return 0;
}

/* hc_stop closes the connection as PROTOCOL.md section 8 says: shut down
 * the write side and wait for the daemon's end-of-file, after which the
 * device no longer touches this process's memory. */
void hc_stop(struct hc_context *ctx)
{
	shutdown(ctx->sock, SHUT_WR);
	if (ctx->reader_started)
		pthread_join(ctx->reader, NULL);
	close(ctx->sock);
	hc_zfree(ctx->reply);
	ctx->reply = NULL;
}

/* hc_request sends a request and waits for its reply; the reply's payload
 * goes to out. It returns 0, EPROTO-style errors for a refused message
 * (the ERROR status mapped to an errno), or EIO when the daemon is gone. */
int hc_request(struct hc_context *ctx, int type, const void *payload, size_t len, int fd, uint8_t *out, size_t cap,
	       size_t *outlen)
{
	int err = 0;
	pthread_mutex_lock(&ctx->req_mu);
	pthread_mutex_lock(&ctx->mu);
	if (ctx->dead) {
		pthread_mutex_unlock(&ctx->mu);
		pthread_mutex_unlock(&ctx->req_mu);
		return EIO;
	}
	if (++ctx->next_id == 0)
		ctx->next_id = 1;
	uint32_t id = ctx->next_id;
	ctx->want_id = id;
	ctx->reply_ready = 0;
	pthread_mutex_unlock(&ctx->mu);
	err = send_msg(ctx->sock, type, id, payload, len, fd);
	pthread_mutex_lock(&ctx->mu);
	if (err) {
		ctx->want_id = 0;
		err = ctx->dead || err == EPIPE ? EIO : err;
		goto out;
	}
	while (!ctx->reply_ready && !ctx->dead)
		pthread_cond_wait(&ctx->cond, &ctx->mu);
	ctx->want_id = 0;
	if (!ctx->reply_ready) {
		err = EIO;
		goto out;
	}
	if (ctx->reply_type == HC_T_ERROR) {
		uint32_t st = ctx->reply_len >= 4 ? hc_get32(ctx->reply) : 0;
		err = st == 5 ? ENOMEM : st == 8 ? EIO : EINVAL; /* NO_MEMORY, SHUTDOWN, the rest */
		goto out;
	}
	if (ctx->reply_type != (type | HC_T_REPLY)) {
		err = EPROTO;
		goto out;
	}
	size_t n = ctx->reply_len < cap ? ctx->reply_len : cap;
	if (out) {
		memcpy(out, ctx->reply, n);
		memset(out + n, 0, cap - n); /* a short reply reads as zeros, never as stale bytes */
	}
	if (outlen)
		*outlen = ctx->reply_len;
out:
	pthread_mutex_unlock(&ctx->mu);
	pthread_mutex_unlock(&ctx->req_mu);
	return err;
}

void hc_cmd_header(uint8_t *in, uint16_t opcode)
{
	memset(in, 0, 8);
	hc_put16(in, opcode);
}

/* hc_status_errno maps a command status to the errno the kernel's mlx5
 * driver returns for it. */
int hc_status_errno(int status)
{
	switch (status) {
	case 0:
		return 0;
	case HC_STAT_RESOURCE_BUSY:
		return EBUSY;
	case HC_STAT_EXCEED_LIM:
	case HC_STAT_NO_RESOURCES:
		return ENOMEM;
	case HC_STAT_BAD_QP_STATE:
	case HC_STAT_BAD_PARAM:
		return EINVAL;
	}
	return EINVAL;
}

/* hc_cmd runs a device command; a failed output mailbox becomes an errno
 * (its reason is kept in the output for debugging). */
int hc_cmd(struct hc_context *ctx, uint8_t *in, size_t inlen, uint8_t *out, size_t cap, size_t *outlen)
{
	size_t n = 0;
	int err = hc_request(ctx, HC_T_COMMAND, in, inlen, -1, out, cap, &n);
	if (err)
		return err;
	if (outlen)
		*outlen = n;
	if (n < 8 || cap < 8)
		return EPROTO;
	if (out[0] != 0 && getenv("HCASIM_DEBUG"))
		fprintf(stderr, "hcasim: command %#x: status %#x: %.*s\n", hc_get16(in), out[0],
			(int)(n > 8 && cap > 8 ? (n < cap ? n : cap) - 8 : 0), (char *)out + 8);
	return hc_status_errno(out[0]);
}

/* hc_notify sends a message without reply (RING_SQ, RING_RQ). */
int hc_notify(struct hc_context *ctx, int type, uint32_t obj)
{
	uint8_t p[4];
	hc_put32(p, obj);
	return send_msg(ctx->sock, type, 0, p, sizeof p, -1);
}

/* hc_arm arms a CQ and waits until the arm has taken effect. */
int hc_arm(struct hc_context *ctx, uint32_t cqn, uint32_t word)
{
	uint8_t p[8], r[8];
	hc_put32(p, cqn);
	hc_put32(p + 4, word);
	return hc_request(ctx, HC_T_ARM_CQ, p, sizeof p, -1, r, sizeof r, NULL);
}

int hc_map(struct hc_context *ctx, int fd, uint64_t size, uint32_t align, uint64_t *iova)
{
	uint8_t p[16] = {0}, r[16];
	size_t n = 0;
	hc_put64(p, size);
	hc_put32(p + 8, align);
	int err = hc_request(ctx, HC_T_MAP_MEM, p, sizeof p, fd, r, sizeof r, &n);
	if (err)
		return err;
	if (n < 16)
		return EPROTO;
	*iova = hc_get64(r + 8);
	return 0;
}

int hc_unmap(struct hc_context *ctx, uint64_t iova)
{
	uint8_t p[8], r[4];
	hc_put64(p, iova);
	return hc_request(ctx, HC_T_UNMAP, p, sizeof p, -1, r, sizeof r, NULL);
}

/* hc_push_async queues an async event and counts it on the async fd. */
void hc_push_async(struct hc_context *ctx, struct ibv_async_event *ev)
{
	struct hc_async *a = hc_zalloc(sizeof *a);
	if (!a)
		return;
	a->ev = *ev;
	a->next = NULL;
	pthread_mutex_lock(&ctx->mu);
	if (ctx->async_tail) {
		ctx->async_tail->next = a;
	} else {
		ctx->async_head = a;
		hc_evfd_set(ctx->vctx.context.async_fd);
	}
	ctx->async_tail = a;
	pthread_mutex_unlock(&ctx->mu);
}

/* An event queue's eventfd (the async fd, a completion channel's fd) is
 * readable exactly while the queue holds events: set when the first is
 * queued, cleared when the last goes, both under the queue's lock. */
void hc_evfd_set(int fd)
{
	uint64_t one = 1;
	while (write(fd, &one, sizeof one) < 0 && errno == EINTR)
		;
}

void hc_evfd_clear(int fd)
{
	uint64_t v; /* the count is 1: the read does not block */
	while (read(fd, &v, sizeof v) < 0 && errno == EINTR)
		;
}

/* hc_purge_async drops the queued async events of obj (a QP or CQ being
 * destroyed), as the kernel drops unread events of a destroyed object.
 * Called with obj_mu held, after obj left its table. */
void hc_purge_async(struct hc_context *ctx, void *obj)
{
	pthread_mutex_lock(&ctx->mu);
	int had = ctx->async_head != NULL;
	struct hc_async **p = &ctx->async_head, *last = NULL;
	while (*p) {
		struct hc_async *a = *p;
		int qp_ev = a->ev.event_type == IBV_EVENT_QP_FATAL || a->ev.event_type == IBV_EVENT_SQ_DRAINED ||
			    a->ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED;
		int cq_ev = a->ev.event_type == IBV_EVENT_CQ_ERR;
		int srq_ev = a->ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED;
		if ((qp_ev && (void *)a->ev.element.qp == obj) || (cq_ev && (void *)a->ev.element.cq == obj) ||
		    (srq_ev && (void *)a->ev.element.srq == obj)) {
			*p = a->next;
			hc_zfree(a);
			continue;
		}
		last = a;
		p = &a->next;
	}
	ctx->async_tail = last;
	if (had && !ctx->async_head)
		hc_evfd_clear(ctx->vctx.context.async_fd);
	pthread_mutex_unlock(&ctx->mu);
}

void hcasim_unimplemented(const char *name, int *once)
{
	if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "hcasim: unimplemented: %s\n", name);
}
