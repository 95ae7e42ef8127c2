/* libhcasim_ucma.so: the rdma_cm character device for the real librdmacm,
 * preloaded by `hcasim exec`. librdmacm talks to the kernel's rdma_ucm
 * only through the fd of /dev/infiniband/rdma_cm: each command is one
 * write() of struct rdma_ucm_cmd_hdr and its payload, answers are written
 * to the `response` pointer the payload carries, and the fd polls
 * readable while events wait. This object catches the open of that one
 * path (handing back an eventfd), fstat on it (a character device),
 * write and close; every command goes to the daemon's CM service over a
 * connection of its own (docs/PROTOCOL.md, UCMA_OPEN and UCMA), which
 * answers it and keeps the eventfd readable exactly while events wait.
 * Everything else passes through untouched. The CM itself is the
 * daemon's (hca/ucma): this is a translator, as the libibverbs front end
 * is. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define CM_PATH "/dev/infiniband/rdma_cm"
#define MAX_FD 4096
#define HDR 12
#define MAX_MSG 65536
#define T_UCMA_OPEN 0x08
#define T_UCMA 0x09
#define T_ERROR 0x41
#define REPLY 0x80

/* Commands (rdma/rdma_user_cm.h) whose payload carries a response pointer,
 * and where. */
enum { C_CREATE_ID = 0, C_DESTROY_ID = 1, C_QUERY_ROUTE = 5, C_INIT_QP_ATTR = 11, C_GET_EVENT = 12,
       C_SET_OPTION = 14, C_JOIN_IP_MCAST = 16, C_LEAVE_MCAST = 17, C_MIGRATE_ID = 18, C_QUERY = 19,
       C_JOIN_MCAST = 22 };

/* An id of the channel, as the kernel would report its removal: its
 * number and uid (0 for a child not yet accepted, whose events the kernel
 * drops). */
struct cmid {
	uint32_t id;
	uint64_t uid;
};

struct chan {
	int sock;	   /* this channel's connection to the daemon */
	uint64_t token;	   /* the daemon's name for the channel (MIGRATE_ID) */
	pthread_mutex_t mu; /* one command in flight; the fields below */
	struct cmid *ids;
	size_t nids, capids;
	/* gone: the daemon went away. Each id then gets one DEVICE_REMOVAL
	 * (the first nremoved of ids have had theirs). */
	int gone;
	/* closed: the program closed the fd. The struct is never freed: a
	 * thread still in GET_EVENT on it (rping's) keeps a pointer to it, and
	 * stays blocked, as the kernel leaves it. */
	int closed;
	size_t nremoved;
};

#define EV_SIZE 336
#define EV_CONNECT_REQUEST 4
#define EV_DEVICE_REMOVAL 11

static void track(struct chan *c, uint32_t id, uint64_t uid)
{
	if (c->nids == c->capids) {
		size_t n = c->capids ? 2 * c->capids : 16;
		struct cmid *p = realloc(c->ids, n * sizeof *p);
		if (!p)
			return; /* the id's removal goes unreported */
		c->ids = p, c->capids = n;
	}
	c->ids[c->nids++] = (struct cmid){id, uid};
}

static struct cmid *find_id(struct chan *c, uint32_t id)
{
	for (size_t i = 0; i < c->nids; i++)
		if (c->ids[i].id == id)
			return &c->ids[i];
	return NULL;
}

static void untrack(struct chan *c, uint32_t id)
{
	struct cmid *p = find_id(c, id);
	if (p)
		*p = c->ids[--c->nids];
}

static struct chan *chans[MAX_FD];
static pthread_mutex_t chans_mu = PTHREAD_MUTEX_INITIALIZER;

static struct chan *chan_of(int fd)
{
	if (fd < 0 || fd >= MAX_FD)
		return NULL;
	return __atomic_load_n(&chans[fd], __ATOMIC_ACQUIRE);
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | p[2] << 8 | p[3]; }

/* send_msg sends one message, with fd as SCM_RIGHTS if fd >= 0. */
static int send_msg(int sock, int type, const void *a, size_t alen, const void *b, size_t blen, int fd)
{
	uint8_t h[HDR];
	put16(h, (uint16_t)type);
	put16(h + 2, 0);
	put32(h + 4, 1);
	put32(h + 8, (uint32_t)(alen + blen));
	struct iovec iov[3] = {{h, HDR}, {(void *)a, alen}, {(void *)b, blen}};
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = 3};
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
		if (sendmsg(sock, &m, MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EINTR)
			return errno ? errno : EIO;
	}
}

/* recv_reply reads the reply to a message of type; it returns its payload
 * length, or -1 with errno (EIO: the daemon is gone or answered ERROR). */
static ssize_t recv_reply(int sock, int type, uint8_t *buf, size_t cap)
{
	for (;;) {
		ssize_t n = recv(sock, buf, cap, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < HDR || (size_t)n - HDR != get32(buf + 8) || ((buf[0] << 8 | buf[1]) != (REPLY | type))) {
			errno = n < 0 && errno ? errno : EIO;
			if (n >= 0)
				errno = ENODEV; /* gone, or an ERROR: the device went away */
			return -1;
		}
		return n - HDR;
	}
}

static int sys_close(int fd) { return (int)syscall(SYS_close, fd); }

/* open_chan makes the fd of a new channel: an eventfd the daemon keeps
 * readable while events wait, and a connection to the daemon. */
static int open_chan(int flags)
{
	const char *path = getenv("HCASIM_SOCKET");
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (!path || !*path || strlen(path) >= sizeof a.sun_path) {
		errno = ENOENT;
		return -1;
	}
	strcpy(a.sun_path, path);
	int efd = eventfd(0, (flags & O_CLOEXEC) ? EFD_CLOEXEC : 0);
	if (efd < 0)
		return -1;
	if (efd >= MAX_FD) {
		sys_close(efd);
		errno = EMFILE;
		return -1;
	}
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct chan *c = calloc(1, sizeof *c);
	uint8_t buf[64];
	int err = s < 0 || !c ? ENOMEM : 0;
	if (!err && connect(s, (struct sockaddr *)&a, sizeof a))
		err = ENOENT; /* no daemon: no device, as without the module */
	if (!err)
		err = send_msg(s, T_UCMA_OPEN, NULL, 0, NULL, 0, efd);
	ssize_t n = err ? -1 : recv_reply(s, T_UCMA_OPEN, buf, sizeof buf);
	if (!err && n != 8)
		err = ENODEV;
	if (err) {
		if (s >= 0)
			sys_close(s);
		sys_close(efd);
		free(c);
		errno = err;
		return -1;
	}
	c->sock = s;
	c->token = (uint64_t)get32(buf + HDR) << 32 | get32(buf + HDR + 4);
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_lock(&chans_mu);
	__atomic_store_n(&chans[efd], c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&chans_mu);
	return efd;
}

static int is_cm_path(const char *path) { return path && !strcmp(path, CM_PATH); }

/* user_copy copies n bytes between our memory and a pointer a program
 * gave in a command, as the kernel's copy_{to,from}_user: a bad pointer is
 * EFAULT, not a crash (process_vm_readv/writev on ourselves check it). */
static int user_copy(void *ours, uint64_t user, size_t n, int to_user)
{
	if (!n)
		return 0;
	if (!user)
		return EFAULT;
	struct iovec l = {ours, n}, r = {(void *)(uintptr_t)user, n};
	ssize_t k = to_user ? process_vm_writev(getpid(), &l, 1, &r, 1, 0) : process_vm_readv(getpid(), &l, 1, &r, 1, 0);
	if (k == (ssize_t)n)
		return 0;
	if (k < 0 && (errno == ENOSYS || errno == EPERM)) { /* no such check here: trust the pointer */
		if (to_user)
			memcpy((void *)(uintptr_t)user, ours, n);
		else
			memcpy(ours, (const void *)(uintptr_t)user, n);
		return 0;
	}
	return EFAULT;
}

static int resp_off(uint32_t cmd)
{
	switch (cmd) {
	case C_CREATE_ID:
		return 8;
	case C_DESTROY_ID:
	case C_QUERY_ROUTE:
	case C_INIT_QP_ATTR:
	case C_GET_EVENT:
	case C_JOIN_IP_MCAST:
	case C_LEAVE_MCAST:
	case C_MIGRATE_ID:
	case C_QUERY:
	case C_JOIN_MCAST:
		return 0;
	}
	return -1;
}

/* command sends one command and writes its answer to the response
 * pointer; it returns 0 or an errno, and the answer in *resp (of *nresp
 * bytes, until the next command of this thread). */
static int command(struct chan *c, const uint8_t *cmd, size_t len, uint32_t op, uint16_t out, const uint8_t **resp,
		   size_t *nresp)
{
	uint8_t extra[256 + 8];
	size_t nextra = 0;
	const uint8_t *pl = cmd + 8;
	size_t plen = len - 8;
	if (op == C_SET_OPTION && plen >= 24) { /* the option's value travels with it */
		uint64_t p;
		uint32_t optlen;
		memcpy(&p, pl, 8);
		memcpy(&optlen, pl + 20, 4);
		if (optlen > 256)
			return EINVAL;
		if (user_copy(extra, p, optlen, 0))
			return EFAULT;
		nextra = optlen;
	}
	if (op == C_MIGRATE_ID && plen >= 16) { /* the channel moved to, by its token */
		uint32_t fd;
		memcpy(&fd, pl + 12, 4);
		struct chan *to = chan_of((int)fd);
		if (!to)
			return EBADF;
		for (int i = 0; i < 8; i++)
			extra[i] = (uint8_t)(to->token >> (56 - 8 * i));
		nextra = 8;
	}
	static __thread uint8_t buf[MAX_MSG];
	int off = resp_off(op);
	if (off >= 0 && out && plen >= (size_t)off + 8) {
		/* The answer's room must be writable before the daemon acts: a
		 * GET_EVENT with a bad pointer leaves its event queued, as the
		 * kernel's does. Read it and write it back unchanged. */
		uint64_t p;
		memcpy(&p, pl + off, 8);
		size_t n = out < 512 ? out : 512;
		if (user_copy(buf, p, n, 0) || user_copy(buf, p, n, 1))
			return EFAULT;
	}
	int err = send_msg(c->sock, T_UCMA, cmd, len, extra, nextra, -1);
	if (err)
		return ENODEV;
	ssize_t n = recv_reply(c->sock, T_UCMA, buf, sizeof buf);
	if (n < 4)
		return ENODEV;
	uint32_t e = get32(buf + HDR);
	if (e)
		return (int)e;
	size_t got = (size_t)n - 4;
	*resp = buf + HDR + 4;
	*nresp = got;
	if (off >= 0 && out && plen >= (size_t)off + 8) {
		uint64_t p;
		memcpy(&p, pl + off, 8);
		return user_copy(buf + HDR + 4, p, got < out ? got : out, 1);
	}
	return 0;
}

/* after records what a successful command did to the channel's ids
 * (called with c->mu held). */
static void after(struct chan *c, uint32_t op, const uint8_t *pl, size_t plen, const uint8_t *resp, size_t nresp)
{
	uint32_t id;
	uint64_t uid;
	if (op == C_CREATE_ID && plen >= 16 && nresp >= 4) {
		memcpy(&uid, pl, 8);
		memcpy(&id, resp, 4);
		track(c, id, uid);
	} else if (op == C_DESTROY_ID && plen >= 12) {
		memcpy(&id, pl + 8, 4);
		untrack(c, id);
	} else if (op == C_GET_EVENT && nresp >= 16) {
		uint32_t ev;
		memcpy(&id, resp + 8, 4);
		memcpy(&ev, resp + 12, 4);
		if (ev == EV_CONNECT_REQUEST)
			track(c, id, 0);
	} else if (op == 8 /* ACCEPT */ && plen >= 284 && pl[8 + 271]) {
		memcpy(&uid, pl, 8);
		memcpy(&id, pl + 280, 4);
		struct cmid *m = find_id(c, id);
		if (m)
			m->uid = uid;
	} else if (op == C_MIGRATE_ID && plen >= 16) {
		memcpy(&id, pl + 8, 4);
		uint32_t fd;
		memcpy(&fd, pl + 12, 4);
		struct chan *old = chan_of((int)fd);
		struct cmid *m = old && old != c ? find_id(old, id) : NULL;
		if (m) { /* its mutex is not ours: the id moves under both */
			uint64_t u = m->uid;
			pthread_mutex_lock(&old->mu);
			untrack(old, id);
			pthread_mutex_unlock(&old->mu);
			track(c, id, u);
		}
	}
}

/* removal hands out the channel's next DEVICE_REMOVAL (the daemon is
 * gone), writing it to the GET_EVENT's response; 0, or EAGAIN when every
 * id has had its own (called with c->mu held). */
static int removal(struct chan *c, const uint8_t *pl, size_t plen, uint16_t out)
{
	while (c->nremoved < c->nids && !c->ids[c->nremoved].uid)
		c->nremoved++; /* a child not accepted: the kernel drops its events */
	if (c->nremoved >= c->nids)
		return EAGAIN;
	uint64_t p;
	if (plen < 8 || out < 324)
		return EINVAL;
	memcpy(&p, pl, 8);
	uint8_t ev[EV_SIZE] = {0};
	struct cmid *m = &c->ids[c->nremoved];
	uint32_t type = EV_DEVICE_REMOVAL;
	memcpy(ev, &m->uid, 8);
	memcpy(ev + 8, &m->id, 4);
	memcpy(ev + 12, &type, 4);
	int err = user_copy(ev, p, out < EV_SIZE ? out : EV_SIZE, 1);
	if (!err)
		c->nremoved++;
	return err;
}

/* cm_write is write() on a channel: one command, which returns the bytes
 * written or -1 with errno, as the kernel's ucma_write. */
static ssize_t cm_write(struct chan *c, int fd, const void *b, size_t len)
{
	uint8_t cmd[8 + 512];
	if (len < 8 || len > sizeof cmd) {
		errno = EINVAL;
		return -1;
	}
	if (user_copy(cmd, (uintptr_t)b, len, 0)) {
		errno = EFAULT;
		return -1;
	}
	uint32_t op;
	uint16_t in, out;
	memcpy(&op, cmd, 4);
	memcpy(&in, cmd + 4, 2);
	memcpy(&out, cmd + 6, 2);
	if ((size_t)in + 8 != len) {
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		pthread_mutex_lock(&c->mu);
		if (c->closed) { /* closed under a blocked GET_EVENT: it stays blocked */
			pthread_mutex_unlock(&c->mu);
			if (op != C_GET_EVENT) {
				errno = EBADF;
				return -1;
			}
			for (;;)
				poll(NULL, 0, -1);
		}
		const uint8_t *resp = NULL;
		size_t nresp = 0;
		int err = c->gone ? ENODEV : command(c, cmd, len, op, out, &resp, &nresp);
		if (err == ENODEV && !c->gone) {
			/* The daemon went away: as the kernel when its device is
			 * removed, each id gets DEVICE_REMOVAL, then nothing more. */
			c->gone = 1;
			uint64_t one = 1;
			for (size_t i = 0; i < c->nids; i++)
				if (c->ids[i].uid) {
					(void)!syscall(SYS_write, fd, &one, sizeof one);
					break;
				}
		}
		if (c->gone && op == C_GET_EVENT) {
			err = removal(c, cmd + 8, len - 8, out);
			if (err == EAGAIN) { /* drained: the fd is readable no more */
				uint64_t v;
				struct pollfd q = {.fd = fd, .events = POLLIN};
				if (poll(&q, 1, 0) == 1)
					(void)!syscall(SYS_read, fd, &v, sizeof v);
			}
		}
		if (!err)
			after(c, op, cmd + 8, len - 8, resp, nresp);
		pthread_mutex_unlock(&c->mu);
		if (err == EAGAIN && op == C_GET_EVENT && !(fcntl(fd, F_GETFL) & O_NONBLOCK)) {
			/* A blocking GET_EVENT: wait until the daemon makes the fd
			 * readable (an event waits), or goes away, then ask again. */
			struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = c->sock, .events = POLLIN}};
			if (poll(p, c->gone ? 1 : 2, -1) < 0 && errno != EINTR)
				return -1;
			continue; /* a hung-up socket fails the next command: ENODEV */
		}
		if (err) {
			errno = err;
			return -1;
		}
		return (ssize_t)len;
	}
}

/*
 * The GID types in sysfs. UCX reads a GID's type from
 * /sys/class/infiniband/hcasim0/ports/1/gid_attrs/types/N with open and
 * read (not through libibverbs); without it, it takes every GID for RoCE
 * v1. The table's shape is fixed (the front end's hc_gid_entry, the
 * device's ifc.PortGID): 4 entries, even ones RoCE v1, odd ones RoCE v2,
 * and the rest of the 16 empty, whose read the kernel refuses (EINVAL,
 * here at open). The file is a memfd with the kernel's words. It returns
 * 1 with *fd (or -1 and errno) for such a path, 0 for any other.
 */
static int sysfs_open(const char *path, int flags, int *fd)
{
	static const char pre[] = "/sys/class/infiniband/hcasim0/ports/1/gid_attrs/types/";
	if (!path || strncmp(path, pre, sizeof pre - 1))
		return 0;
	const char *n = path + sizeof pre - 1;
	int i = 0, digits = 0;
	for (; *n >= '0' && *n <= '9' && digits < 3; n++, digits++)
		i = i * 10 + (*n - '0');
	*fd = -1;
	if (!digits || *n || i >= 16) {
		errno = ENOENT;
		return 1;
	}
	if (i >= 4 || (flags & O_ACCMODE) != O_RDONLY) {
		errno = (flags & O_ACCMODE) != O_RDONLY ? EACCES : EINVAL;
		return 1;
	}
	const char *v = i & 1 ? "RoCE v2\n" : "IB/RoCE v1\n";
	int m = (int)syscall(SYS_memfd_create, "hcasim-sysfs", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0u);
	if (m < 0)
		return 1;
	size_t len = strlen(v);
	if ((size_t)syscall(SYS_write, m, v, len) != len || lseek(m, 0, SEEK_SET) != 0) {
		int err = errno ? errno : EIO;
		sys_close(m);
		errno = err;
		return 1;
	}
	*fd = m;
	return 1;
}

#define REAL(name, ret, ...)                                                                                           \
	static ret (*real_##name)(__VA_ARGS__);                                                                        \
	static ret (*get_##name(void))(__VA_ARGS__)                                                                    \
	{                                                                                                              \
		if (!real_##name)                                                                                      \
			real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);                                    \
		return real_##name;                                                                                    \
	}

REAL(open, int, const char *, int, ...)
REAL(open64, int, const char *, int, ...)
REAL(openat, int, int, const char *, int, ...)
REAL(openat64, int, int, const char *, int, ...)
REAL(__open_2, int, const char *, int)
REAL(__open64_2, int, const char *, int)
REAL(fstat, int, int, struct stat *)
REAL(fstat64, int, int, struct stat64 *)
REAL(stat, int, const char *, struct stat *)
REAL(stat64, int, const char *, struct stat64 *)
REAL(access, int, const char *, int)
REAL(write, ssize_t, int, const void *, size_t)
REAL(close, int, int)

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);

/* own_open opens what the shim answers itself, the rdma_cm device and the
 * sysfs files of sysfs_open: 1 with *fd (or -1 and errno), 0 for a path
 * the real open takes. Every open variant asks it first. */
static int own_open(const char *path, int flags, int *fd)
{
	if (is_cm_path(path)) {
		*fd = open_chan(flags);
		return 1;
	}
	return sysfs_open(path, flags, fd);
}

#define MODE_ARG(flags, mode)                                                                                          \
	mode_t mode = 0;                                                                                               \
	if ((flags) & (O_CREAT | __O_TMPFILE)) {                                                                       \
		va_list ap;                                                                                            \
		va_start(ap, flags);                                                                                   \
		mode = va_arg(ap, mode_t);                                                                             \
		va_end(ap);                                                                                            \
	}

__attribute__((visibility("default"))) int open(const char *path, int flags, ...)
{
	MODE_ARG(flags, mode)
	int fd;
	if (own_open(path, flags, &fd))
		return fd;
	return get_open()(path, flags, mode);
}

__attribute__((visibility("default"))) int open64(const char *path, int flags, ...)
{
	MODE_ARG(flags, mode)
	int fd;
	if (own_open(path, flags, &fd))
		return fd;
	return get_open64()(path, flags, mode);
}

__attribute__((visibility("default"))) int openat(int dir, const char *path, int flags, ...)
{
	MODE_ARG(flags, mode)
	int fd;
	if (own_open(path, flags, &fd))
		return fd;
	return get_openat()(dir, path, flags, mode);
}

__attribute__((visibility("default"))) int openat64(int dir, const char *path, int flags, ...)
{
	MODE_ARG(flags, mode)
	int fd;
	if (own_open(path, flags, &fd))
		return fd;
	return get_openat64()(dir, path, flags, mode);
}

__attribute__((visibility("default"))) int __open_2(const char *path, int flags)
{
	int fd;
	if (own_open(path, flags, &fd))
		return fd;
	return get___open_2()(path, flags);
}

__attribute__((visibility("default"))) int __open64_2(const char *path, int flags)
{
	int fd;
	if (own_open(path, flags, &fd))
		return fd;
	return get___open64_2()(path, flags);
}

/* A channel says it is a character device (librdmacm's open_cdev checks). */
static void chardev(struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_mode = S_IFCHR | 0666;
	st->st_rdev = makedev(231, 255);
}

__attribute__((visibility("default"))) int fstat(int fd, struct stat *st)
{
	if (chan_of(fd)) {
		chardev(st);
		return 0;
	}
	return get_fstat()(fd, st);
}

__attribute__((visibility("default"))) int fstat64(int fd, struct stat64 *st)
{
	if (chan_of(fd)) {
		chardev((struct stat *)st); /* the same layout on 64-bit */
		return 0;
	}
	return get_fstat64()(fd, st);
}

/*
 * The verbs device node (/dev/infiniband/uverbs0, the front end's
 * dev_name): UCX's IB transports use a device only if stat() shows this
 * character device and access() grants read and write, though they never
 * open it (the front end talks to the daemon).
 */
static int is_verbs_node(const char *path)
{
	const char *p = "/dev/infiniband/uverbs";
	size_t n = strlen(p);
	if (!path || strncmp(path, p, n))
		return 0;
	path += n;
	if (!*path)
		return 0;
	for (; *path; path++)
		if (*path < '0' || *path > '9')
			return 0;
	return 1;
}

__attribute__((visibility("default"))) int stat(const char *path, struct stat *st)
{
	if (is_verbs_node(path) || is_cm_path(path)) {
		chardev(st);
		return 0;
	}
	return get_stat()(path, st);
}

__attribute__((visibility("default"))) int stat64(const char *path, struct stat64 *st)
{
	if (is_verbs_node(path) || is_cm_path(path)) {
		chardev((struct stat *)st); /* the same layout on 64-bit */
		return 0;
	}
	return get_stat64()(path, st);
}

__attribute__((visibility("default"))) int access(const char *path, int mode)
{
	if (is_verbs_node(path) || is_cm_path(path))
		return 0;
	return get_access()(path, mode);
}

__attribute__((visibility("default"))) ssize_t write(int fd, const void *b, size_t len)
{
	struct chan *c = chan_of(fd);
	if (c)
		return cm_write(c, fd, b, len);
	return get_write()(fd, b, len);
}

__attribute__((visibility("default"))) int close(int fd)
{
	pthread_mutex_lock(&chans_mu);
	struct chan *c = chan_of(fd);
	if (c)
		__atomic_store_n(&chans[fd], NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&chans_mu);
	if (c) { /* the daemon destroys the channel's ids when its connection ends */
		pthread_mutex_lock(&c->mu);
		c->closed = 1;
		sys_close(c->sock);
		c->sock = -1;
		free(c->ids);
		c->ids = NULL;
		c->nids = c->capids = c->nremoved = 0;
		pthread_mutex_unlock(&c->mu);
	}
	return get_close()(fd);
}
