/* Memory the device reaches: memfds for rings, and memory regions.
 *
 * ibv_reg_mr takes ordinary process memory (malloc, mmap, the stack). The
 * daemon can only reach memfds, so registration moves the page-rounded
 * range onto one, in place: the pages are copied into a new memfd mapped
 * elsewhere, which mremap then puts over the same addresses in one step.
 * The memfd is then mapped into the daemon (once per context), and the MR's
 * mkey translates its addresses (MTT) to that mapping. Nothing is copied on
 * the data path: the device reads and writes the program's own pages.
 *
 * Such a "region" is shared by every registration that covers its pages
 * (overlapping registrations reuse it; pages not yet in one get a new
 * region). When the last registration of a region goes, the pages are
 * copied back onto private anonymous memory, again in one mremap, so that
 * after ibv_dereg_mr the memory is as it was. docs/CONFORMANCE.md lists
 * what this means for the program (neighbouring bytes on the edge pages,
 * fork, writes by other threads during registration). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <ucontext.h>
#include <unistd.h>

#include "hcasim.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define PAGE 4096UL

static int new_memfd(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* hc_zalloc returns len zeroed bytes on pages of their own, or NULL with
 * errno set. The library's objects (contexts, queues, keys, events) live
 * there, never on a page with the program's buffers: registration and
 * fork move whole pages, and a write by another thread (the reader, a
 * poller) to a page while it moves would be lost. */
void *hc_zalloc(size_t len)
{
	if (len > SIZE_MAX - 16 - PAGE) {
		errno = ENOMEM;
		return NULL;
	}
	size_t size = (len + 16 + PAGE - 1) & ~(PAGE - 1);
	uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	memcpy(p, &size, sizeof size);
	return p + 16;
}

void hc_zfree(void *q)
{
	if (!q)
		return;
	uint8_t *p = (uint8_t *)q - 16;
	size_t size;
	memcpy(&size, p, sizeof size);
	munmap(p, size);
}

/* hc_alloc_type_ok applies mlx5's MLX_{CQ,QP,SRQ}_ALLOC_TYPE variable env
 * (rdma-core's mlx5 provider): HUGE asks for the queue in huge pages and
 * fails the create with ENOMEM when the system has none to give; PREFER_HUGE
 * and the others fall back. hcasim's queues stay in ordinary shared pages
 * either way: it only probes that a 2 MiB huge page could be had. */
int hc_alloc_type_ok(const char *env)
{
	const char *v = getenv(env);
	if (!v || strcmp(v, "HUGE"))
		return 0;
	int fd = memfd_create("hcasim-huge-probe", MFD_CLOEXEC | MFD_HUGETLB);
	if (fd < 0)
		return ENOMEM;
	int err = ftruncate(fd, 2 << 20) ? ENOMEM : 0;
	if (!err) {
		void *p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
		if (p == MAP_FAILED)
			err = ENOMEM;
		else
			munmap(p, 2 << 20);
	}
	close(fd);
	return err;
}

/* hc_dma_alloc allocates len zeroed bytes shared with the daemon. */
int hc_dma_alloc(struct hc_context *ctx, size_t len, struct hc_dma *d)
{
	size_t size = (len + PAGE - 1) & ~(PAGE - 1);
	int fd = new_memfd("hcasim-queue", size);
	if (fd < 0)
		return errno;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		return e;
	}
	int err = hc_map(ctx, fd, size, PAGE, &d->iova);
	close(fd);
	if (err) {
		munmap(p, size);
		return err;
	}
	d->addr = p;
	d->len = size;
	return 0;
}

void hc_dma_free(struct hc_context *ctx, struct hc_dma *d)
{
	if (!d->addr)
		return;
	/* A failed UNMAP (the daemon is gone) leaves nothing to protect. */
	hc_unmap(ctx, d->iova);
	munmap(d->addr, d->len);
	d->addr = NULL;
}

/* A context's mapping of a region. */
struct rmap {
	struct hc_context *ctx;
	uint64_t iova; /* of byte 0 of the memfd */
	int refs;
	struct rmap *next;
};

/* A range of this process's pages moved onto a memfd. */
struct region {
	uintptr_t start, end; /* page aligned */
	int fd;
	dev_t dev;
	ino_t ino;
	uint64_t pad; /* start mod 2^log_page: the memfd's first byte is at start - pad */
	uint8_t log_page;
	int refs;
	int forked; /* on private memory while fork() runs */
	int stale;  /* its pages are no longer its own: out of the list */
	struct rmap *maps;
	struct region *next;
};

static pthread_mutex_t regions_mu = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions; /* under regions_mu */

/* A mapping of /proc/self/maps. */
struct vma {
	uintptr_t start, end;
	int prot;
	int shared;
	dev_t dev;
	unsigned long ino;
	unsigned long long off;
};

/* read_vmas returns the mappings that intersect [s, e), in order. */
static int read_vmas(uintptr_t s, uintptr_t e, struct vma **out, size_t *n)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return errno;
	size_t cap = 8, k = 0;
	struct vma *v = malloc(cap * sizeof *v);
	char line[512];
	while (v && fgets(line, sizeof line, f)) {
		unsigned long a, b, ino;
		unsigned long long off;
		unsigned maj, min;
		char perm[8];
		if (sscanf(line, "%lx-%lx %7s %llx %x:%x %lu", &a, &b, perm, &off, &maj, &min, &ino) != 7)
			continue;
		if (b <= s || a >= e)
			continue;
		if (k == cap) {
			struct vma *nv = realloc(v, 2 * cap * sizeof *v);
			if (!nv) {
				free(v);
				v = NULL;
				break;
			}
			v = nv;
			cap *= 2;
		}
		v[k].start = a;
		v[k].end = b;
		v[k].prot = (perm[0] == 'r' ? PROT_READ : 0) | (perm[1] == 'w' ? PROT_WRITE : 0) |
			    (perm[2] == 'x' ? PROT_EXEC : 0);
		v[k].shared = perm[3] == 's';
		v[k].dev = makedev(maj, min);
		v[k].ino = ino;
		v[k].off = off;
		k++;
	}
	fclose(f);
	if (!v)
		return ENOMEM;
	*out = v;
	*n = k;
	return 0;
}

/* covered reports whether vmas cover [s, e) without a hole. */
static int covered(struct vma *v, size_t n, uintptr_t s, uintptr_t e)
{
	uintptr_t at = s;
	for (size_t i = 0; i < n && at < e; i++) {
		if (v[i].start > at)
			return 0;
		if (v[i].end > at)
			at = v[i].end;
	}
	return at >= e;
}

/* restore_prot gives [s, e) the protections vmas had. */
static void restore_prot(struct vma *v, size_t n, uintptr_t s, uintptr_t e)
{
	for (size_t i = 0; i < n; i++) {
		if (v[i].prot == (PROT_READ | PROT_WRITE))
			continue;
		uintptr_t a = v[i].start > s ? v[i].start : s, b = v[i].end < e ? v[i].end : e;
		if (a < b)
			mprotect((void *)a, b - a, v[i].prot);
	}
}

/* choose_log picks the MTT page size of a region: the smallest power of
 * two from 4 KiB at which it takes at most 2048 entries. */
static uint8_t choose_log(size_t len)
{
	uint8_t k = 12;
	while (k < 30 && (len >> k) > 2048)
		k++;
	return k;
}

/* A move puts a copy of [to, to+len) at from over to: memcpy, then one
 * mremap. Nothing may write the range between the two, or the write is
 * lost — and the range may hold the calling thread's own stack (a buffer
 * on the stack shares its pages with the frames below it). So the move
 * runs on a stack of its own (swapcontext): the old stack is not touched
 * from the copy to the remap, and its saved context is in the copy. */
struct move {
	void *from, *to;
	size_t len;
	int err;
	ucontext_t back, side;
};

/* copy_pages copies whole pages, which a sanitizer build sees as reads
 * outside the program's allocations (the malloc redzones beside a buffer
 * share its pages): there it is a plain loop the sanitizer does not check
 * (memcpy would be intercepted), volatile so the compiler does not make it
 * memcpy again. */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize_address)) static void copy_pages(void *to, const void *from, size_t len)
{
	volatile uint64_t *d = to;
	const uint64_t *s = from;
	for (size_t i = 0; i < len / 8; i++)
		d[i] = s[i];
}
#else
static void copy_pages(void *to, const void *from, size_t len)
{
	memcpy(to, from, len);
}
#endif

static void move_on_side(void)
{
	/* The move is found through a global: makecontext passes only ints. */
	extern struct move *hc_cur_move;
	struct move *m = hc_cur_move;
	copy_pages(m->from, m->to, m->len);
	/* The system call itself: a program's memory hooks (UCX's ucm) wrap
	 * mremap() and drop its fifth argument. */
	long r = syscall(SYS_mremap, m->from, m->len, m->len, MREMAP_MAYMOVE | MREMAP_FIXED, m->to);
	m->err = r == -1 ? errno : 0; /* after the remap: lands in the new pages */
}

struct move *hc_cur_move; /* under regions_mu */

/* move_pages runs a move with every signal blocked (a handler could write
 * the moving pages, or run on them) on a side stack below a guard page. */
static int move_pages(void *from, void *to, size_t len)
{
	const size_t stack = 64 * 1024;
	uint8_t *st = mmap(NULL, PAGE + stack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (st == MAP_FAILED)
		return errno;
	struct move *m = hc_zalloc(sizeof *m); /* not on the stack being moved */
	if (!m || mprotect(st, PAGE, PROT_NONE) < 0) {
		hc_zfree(m);
		munmap(st, PAGE + stack);
		return ENOMEM;
	}
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	m->from = from;
	m->to = to;
	m->len = len;
	m->err = EINVAL;
	int err = 0;
	if (getcontext(&m->side) < 0) {
		err = errno;
	} else {
		m->side.uc_stack.ss_sp = st + PAGE;
		m->side.uc_stack.ss_size = stack;
		m->side.uc_link = &m->back;
		makecontext(&m->side, move_on_side, 0);
		hc_cur_move = m;
		if (swapcontext(&m->back, &m->side) < 0)
			err = errno;
		else
			err = m->err;
		hc_cur_move = NULL;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	hc_zfree(m);
	munmap(st, PAGE + stack);
	return err;
}

/* region_new moves [s, e) onto a new memfd in place. */
static int region_new(uintptr_t s, uintptr_t e, struct region **out)
{
	struct vma *v;
	size_t n;
	int err = read_vmas(s, e, &v, &n);
	if (err)
		return err;
	if (!covered(v, n, s, e)) {
		free(v);
		return EFAULT;
	}
	for (size_t i = 0; i < n; i++) {
		if (!(v[i].prot & PROT_READ)) {
			free(v);
			return EFAULT;
		}
		if (v[i].shared) {
			/* Shared mappings (files, shared memory) cannot move onto a
			 * memfd without leaving whoever else maps them. */
			free(v);
			fprintf(stderr, "hcasim: ibv_reg_mr of a shared mapping (%#lx-%#lx) is not supported\n",
				(unsigned long)s, (unsigned long)e);
			return EOPNOTSUPP;
		}
	}
	size_t len = e - s;
	uint8_t log = choose_log(len);
	uint64_t pad = s & ((1ULL << log) - 1);
	int fd = new_memfd("hcasim-mr", pad + len);
	if (fd < 0) {
		err = errno;
		free(v);
		return err;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)pad);
	if (p == MAP_FAILED) {
		err = errno;
		goto fail;
	}
	err = move_pages(p, (void *)s, len);
	if (err) {
		munmap(p, len);
		goto fail;
	}
	restore_prot(v, n, s, e);
	free(v);
	struct stat st;
	fstat(fd, &st);
	struct region *r = calloc(1, sizeof *r);
	if (!r) {
		/* The pages stay on the memfd: harmless, only not registered. */
		close(fd);
		return ENOMEM;
	}
	r->start = s;
	r->end = e;
	r->fd = fd;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	r->pad = pad;
	r->log_page = log;
	*out = r;
	return 0;
fail:
	free(v);
	close(fd);
	return err;
}

/* region_release puts a region's pages back on private anonymous memory,
 * if they are still the region's (the program may have unmapped or
 * replaced them since). */
static void region_release(struct region *r)
{
	struct vma *v;
	size_t n;
	size_t len = r->end - r->start;
	if (read_vmas(r->start, r->end, &v, &n) == 0) {
		int ours = covered(v, n, r->start, r->end);
		for (size_t i = 0; ours && i < n; i++) {
			uint64_t want = r->pad + (v[i].start > r->start ? v[i].start - r->start : 0);
			if (v[i].ino != r->ino || v[i].dev != r->dev || v[i].off != want)
				ours = 0;
		}
		if (ours) {
			int prot_ok = 1;
			for (size_t i = 0; i < n; i++)
				if (!(v[i].prot & PROT_READ))
					prot_ok = 0;
			void *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (prot_ok && q != MAP_FAILED) {
				if (move_pages(q, (void *)r->start, len))
					munmap(q, len);
				else
					restore_prot(v, n, r->start, r->end);
			} else if (q != MAP_FAILED) {
				munmap(q, len);
			}
		}
		free(v);
	}
	close(r->fd);
	free(r);
}

/* rmap_get returns ctx's mapping of r, mapping the memfd if needed. */
static int rmap_get(struct hc_context *ctx, struct region *r, struct rmap **out)
{
	for (struct rmap *m = r->maps; m; m = m->next)
		if (m->ctx == ctx) {
			*out = m;
			return 0;
		}
	struct rmap *m = calloc(1, sizeof *m);
	if (!m)
		return ENOMEM;
	uint32_t align = 1u << r->log_page;
	int err = hc_map(ctx, r->fd, r->pad + (r->end - r->start), align, &m->iova);
	if (err) {
		free(m);
		return err;
	}
	m->ctx = ctx;
	m->next = r->maps;
	r->maps = m;
	*out = m;
	return 0;
}

static void rmap_put(struct region *r, struct rmap *m)
{
	if (--m->refs > 0)
		return;
	for (struct rmap **p = &r->maps; *p; p = &(*p)->next)
		if (*p == m) {
			*p = m->next;
			break;
		}
	hc_unmap(m->ctx, m->iova);
	free(m);
}

static void region_put(struct region *r)
{
	if (--r->refs > 0)
		return;
	if (r->stale) {
		close(r->fd);
		free(r);
		return;
	}
	for (struct region **p = &regions; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	region_release(r);
}


/* The device IOVA of address a of region r through mapping m. */
static uint64_t dev_iova(struct region *r, struct rmap *m, uintptr_t a)
{
	return m->iova + r->pad + (a - r->start);
}

/* A registered MR and the regions it uses. */
struct hc_mr {
	struct ibv_mr mr;
	uint32_t index;
	unsigned access;
	uint64_t iova;
	size_t nused;
	struct region **used;
	struct rmap **maps;
};

/* find_region returns the region holding address a. */
static struct region *find_region(uintptr_t a)
{
	for (struct region *r = regions; r; r = r->next)
		if (a >= r->start && a < r->end)
			return r;
	return NULL;
}

/* drop_stale unlinks the regions over [s, e) whose pages are no longer
 * theirs: the program unmapped or replaced them (while an MR was still
 * registered, or after a context closed with MRs registered). Their
 * holders still release them; new registrations get regions of their
 * own. Called with regions_mu held. */
static void drop_stale_in(struct vma *v, size_t n, uintptr_t s, uintptr_t e)
{
	for (struct region **p = &regions; *p;) {
		struct region *r = *p;
		uintptr_t a = r->start > s ? r->start : s, b = r->end < e ? r->end : e;
		int ours = a >= b || covered(v, n, a, b);
		for (size_t i = 0; ours && a < b && i < n; i++) {
			if (v[i].end <= a || v[i].start >= b)
				continue;
			uintptr_t from = v[i].start > r->start ? v[i].start : r->start;
			if (v[i].ino != r->ino || v[i].dev != r->dev || v[i].off + (from - v[i].start) != r->pad + (from - r->start))
				ours = 0;
		}
		if (ours) {
			p = &r->next;
			continue;
		}
		*p = r->next;
		r->next = NULL;
		r->stale = 1;
	}
}

static void drop_stale(uintptr_t s, uintptr_t e)
{
	struct vma *v;
	size_t n;
	if (read_vmas(s, e, &v, &n))
		return;
	drop_stale_in(v, n, s, e);
	free(v);
}

/* Fork. A region's pages are MAP_SHARED memfd pages: a child would share
 * them with the parent — and if they hold a thread's stack, both would run
 * on the same frames. So around fork() every region is put back on
 * private anonymous memory (the child gets a copy, as the kernel gives a
 * child copies of pinned pages), and in the parent moved onto its memfd
 * again. The device keeps its mapping of the memfd throughout; what it
 * writes there while fork() runs is overwritten by the parent's copy.
 * Regions whose pages the program has unmapped or replaced are dropped
 * first (they are not moved: the pages there are the program's); regions
 * with pages it cannot read (PROT_NONE) stay shared with the child. Each
 * move keeps the pages' protections. */
static struct vma *fork_vmas; /* under regions_mu, from fork_prepare to the end of fork */
static size_t fork_nvmas;

static int region_readable(struct region *r)
{
	for (size_t i = 0; i < fork_nvmas; i++)
		if (fork_vmas[i].end > r->start && fork_vmas[i].start < r->end && !(fork_vmas[i].prot & PROT_READ))
			return 0;
	return 1;
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&regions_mu);
	if (!regions || read_vmas(0, UINTPTR_MAX, &fork_vmas, &fork_nvmas)) {
		fork_vmas = NULL;
		fork_nvmas = 0;
		return; /* nothing registered, or no way to tell what is still ours: nothing moves */
	}
	drop_stale_in(fork_vmas, fork_nvmas, 0, UINTPTR_MAX);
	for (struct region *r = regions; r; r = r->next) {
		size_t len = r->end - r->start;
		r->forked = 0;
		if (!region_readable(r))
			continue;
		void *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		r->forked = q != MAP_FAILED && move_pages(q, (void *)r->start, len) == 0;
		if (q != MAP_FAILED && !r->forked)
			munmap(q, len);
		if (r->forked)
			restore_prot(fork_vmas, fork_nvmas, r->start, r->end);
	}
}

static void fork_done(void)
{
	free(fork_vmas);
	fork_vmas = NULL;
	fork_nvmas = 0;
	pthread_mutex_unlock(&regions_mu);
}

static void fork_parent(void)
{
	for (struct region *r = regions; fork_vmas && r; r = r->next) {
		if (!r->forked)
			continue;
		r->forked = 0;
		size_t len = r->end - r->start;
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)r->pad);
		if (p != MAP_FAILED && move_pages(p, (void *)r->start, len) != 0)
			munmap(p, len);
		else if (p != MAP_FAILED)
			restore_prot(fork_vmas, fork_nvmas, r->start, r->end);
	}
	fork_done();
}

static void fork_child(void)
{
	for (struct region *r = regions; r; r = r->next)
		r->forked = 0;
	fork_done();
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* cover makes every page of [s, e) part of a region and returns them in
 * address order. Called with regions_mu held. */
static int cover(uintptr_t s, uintptr_t e, struct region ***out, size_t *nout)
{
	size_t cap = 4, n = 0;
	drop_stale(s, e);
	struct region **list = malloc(cap * sizeof *list);
	if (!list)
		return ENOMEM;
	uintptr_t at = s;
	int err = 0;
	while (at < e) {
		struct region *r = find_region(at);
		if (!r) {
			/* The uncovered run from at: up to the next region or e. */
			uintptr_t stop = e;
			for (struct region *q = regions; q; q = q->next)
				if (q->start > at && q->start < stop)
					stop = q->start;
			err = region_new(at, stop, &r);
			if (err)
				break;
			r->next = regions;
			regions = r;
		}
		if (n == cap) {
			struct region **nl = realloc(list, 2 * cap * sizeof *list);
			if (!nl) {
				err = ENOMEM;
				break;
			}
			list = nl;
			cap *= 2;
		}
		list[n++] = r;
		r->refs++;
		at = r->end;
	}
	if (err) {
		for (size_t i = 0; i < n; i++)
			region_put(list[i]);
		free(list);
		return err;
	}
	*out = list;
	*nout = n;
	return 0;
}

/* hc_mkey_access is the mkey context's access byte for verbs access
 * flags: local read always, then LW RR RW A. */
uint8_t hc_mkey_access(unsigned access)
{
	uint8_t a = 0x04; /* local read */
	if (access & IBV_ACCESS_LOCAL_WRITE)
		a |= 0x08;
	if (access & IBV_ACCESS_REMOTE_READ)
		a |= 0x10;
	if (access & IBV_ACCESS_REMOTE_WRITE)
		a |= 0x20;
	if (access & IBV_ACCESS_REMOTE_ATOMIC)
		a |= 0x40;
	return a;
}

/* mr_drop releases what an MR holds of regions and mappings. Called with
 * regions_mu held. */
static void mr_drop(struct hc_mr *m)
{
	for (size_t i = 0; i < m->nused; i++) {
		if (m->maps && m->maps[i])
			rmap_put(m->used[i], m->maps[i]);
		region_put(m->used[i]);
	}
	free(m->used);
	free(m->maps);
	m->used = NULL;
	m->maps = NULL;
	m->nused = 0;
}

/* The access flags ibv_reg_mr accepts; ODP, dma-buf and the rest are not
 * modelled. */
#define SUPPORTED_ACCESS                                                                                               \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |         \
	 IBV_ACCESS_MW_BIND)

/* mr_check validates ibv_reg_mr's arguments; it returns an errno. */
static int mr_check(struct hc_context *ctx, void *addr, size_t length, uint64_t iova, unsigned *access)
{
	*access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE; /* optional flags a device may ignore */
	if (*access & IBV_ACCESS_ON_DEMAND)
		return EOPNOTSUPP; /* includes implicit ODP, ibv_reg_mr(pd, NULL, SIZE_MAX, ...) */
	if ((*access & ~SUPPORTED_ACCESS) || length == 0 || !addr ||
	    ((*access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(*access & IBV_ACCESS_LOCAL_WRITE)))
		return EINVAL;
	uintptr_t a = (uintptr_t)addr;
	if (a + length < a || iova + length < iova || ((iova ^ a) & (PAGE - 1)))
		return EINVAL;
	if (ctx->caps.max_mapped && length > ctx->caps.max_mapped)
		return ENOMEM;
	return 0;
}

/* mr_make registers [addr, addr+length) at iova in m: its regions, their
 * mappings into ctx, and an MTT mkey. It returns an errno; m holds
 * nothing on failure. */
static int mr_make(struct hc_context *ctx, struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
		   unsigned access, struct hc_mr *m)
{
	uintptr_t a = (uintptr_t)addr;
	uintptr_t s = a & ~(PAGE - 1), e = (a + length + PAGE - 1) & ~(PAGE - 1);
	uint8_t *in = NULL;
	pthread_once(&fork_once, fork_register);
	pthread_mutex_lock(&regions_mu);
	int err = cover(s, e, &m->used, &m->nused);
	if (err) {
		pthread_mutex_unlock(&regions_mu);
		return err;
	}
	m->maps = calloc(m->nused, sizeof *m->maps);
	if (!m->maps) {
		err = ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < m->nused; i++) {
		err = rmap_get(ctx, m->used[i], &m->maps[i]);
		if (err)
			goto fail;
		m->maps[i]->refs++;
	}
	/* The MTT: one region's own page size when it holds the whole MR and
	 * the MR's address is congruent to the memory at it; 4 KiB pages
	 * across regions otherwise. */
	uint8_t log = 12;
	if (m->nused == 1 && !((iova ^ a) & ((1ULL << m->used[0]->log_page) - 1)))
		log = m->used[0]->log_page;
	uint64_t P = 1ULL << log;
	uint64_t base = iova & ~(P - 1);
	size_t nent = (size_t)(((iova + length - 1) >> log) - (iova >> log) + 1);
	size_t xlt = ((nent + 1) / 2) * 16;
	size_t inlen = 80 + xlt;
	if (inlen > HC_MAX_MSG - HC_HDR) {
		err = ENOMEM; /* an MR over many regions larger than a command can translate */
		goto fail;
	}
	in = calloc(1, inlen);
	if (!in) {
		err = ENOMEM;
		goto fail;
	}
	uintptr_t vbase = a - (uintptr_t)(iova - base); /* the address of MTT page 0 */
	size_t ri = 0;
	for (size_t j = 0; j < nent; j++) {
		uintptr_t va = vbase + j * P;
		uintptr_t probe = va < s ? s : va;
		while (ri + 1 < m->nused && probe >= m->used[ri]->end)
			ri++;
		/* Unsigned arithmetic: va may lie below the region (page 0 of a
		 * large page), the sum is still that page's IOVA. */
		uint64_t dev = dev_iova(m->used[ri], m->maps[ri], probe) - (probe - va);
		hc_put64(in + 80 + j * 8, (dev & ~(P - 1)) | 0x3); /* read and write enabled */
	}
	hc_cmd_header(in, HC_CMD_CREATE_MKEY);
	uint8_t *mk = in + 16;
	/* umr_en, as the kernel's mlx5 driver makes user MRs: ibv_rereg_mr
	 * changes access and PD in place with a UMR (hc_umr_modify). */
	mk[2] = 0x80 | hc_mkey_access(access) | 0x01; /* access_mode MTT */
	uint8_t variant = hc_next_variant(ctx);
	hc_put32(mk + 4, 0xFFFFFFu << 8 | variant);
	hc_put32(mk + 12, pd->handle & 0xFFFFFF);
	hc_put64(mk + 16, iova);
	hc_put64(mk + 24, length);
	hc_put32(mk + 52, (uint32_t)(xlt / 16));
	mk[59] = log;
	uint8_t out[64];
	err = hc_cmd(ctx, in, inlen, out, sizeof out, NULL);
	free(in);
	in = NULL;
	if (err)
		goto fail;
	pthread_mutex_unlock(&regions_mu);
	m->index = hc_get32(out + 8) & 0xFFFFFF;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = m->index;
	m->mr.lkey = m->mr.rkey = m->index << 8 | variant;
	m->access = access;
	m->iova = iova;
	return 0;
fail:
	free(in);
	mr_drop(m);
	pthread_mutex_unlock(&regions_mu);
	return err;
}

/* hc_next_variant is the next key variant (the low byte of an lkey). */
uint8_t hc_next_variant(struct hc_context *ctx)
{
	pthread_mutex_lock(&ctx->obj_mu);
	uint8_t v = ++ctx->variant;
	pthread_mutex_unlock(&ctx->obj_mu);
	return v;
}

/* hc_obj_destroy runs a destroy command (DESTROY_MKEY, DESTROY_PSV) for
 * object num. EIO, the daemon gone, counts as done: so is the object. */
int hc_obj_destroy(struct hc_context *ctx, uint16_t op, uint32_t num)
{
	uint8_t in[12], out[64];
	hc_cmd_header(in, op);
	hc_put32(in + 8, num);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	return err == EIO ? 0 : err;
}

/* hc_create_free_klm creates a free KLM mkey with umr_en and local read
 * only, as mlx5_ib_alloc_mw and mlx5dv_create_mkey do: flags are the bits
 * of the context's PD word above the PD (en_rinval, BSF enable), bsf the
 * BSF octowords, octowords the KLM translation's size. */
int hc_create_free_klm(struct hc_context *ctx, uint32_t pd, uint8_t variant, uint32_t flags, uint32_t bsf,
		       uint32_t octowords, uint32_t *index)
{
	uint8_t in[80] = {0}, out[64];
	hc_cmd_header(in, HC_CMD_CREATE_MKEY);
	uint8_t *mk = in + 16;
	mk[0] = 0x40;		     /* free */
	mk[2] = 0x80 | 0x04 | 0x02; /* umr_en, local read, access mode KLMs */
	hc_put32(mk + 4, 0xFFFFFFu << 8 | variant);
	hc_put32(mk + 12, flags | (pd & 0xFFFFFF));
	hc_put32(mk + 32, bsf);
	hc_put32(mk + 52, octowords);
	int err = hc_cmd(ctx, in, sizeof in, out, sizeof out, NULL);
	if (!err)
		*index = hc_get32(out + 8) & 0xFFFFFF;
	return err;
}

HC_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					  unsigned int access)
{
	HC_LIVE(pd, HC_OBJ_PD, NULL);
	struct hc_context *ctx = hc_ctx(pd->context);
	int err = mr_check(ctx, addr, length, iova, &access);
	struct hc_mr *m = err ? NULL : hc_zalloc(sizeof *m);
	if (!err && !m)
		err = ENOMEM;
	if (!err)
		err = mr_make(ctx, pd, addr, length, iova, access, m);
	if (err) {
		hc_zfree(m);
		errno = err;
		return NULL;
	}
	hc_obj_add(&m->mr, HC_OBJ_MR);
	return &m->mr;
}

/* ibv_rereg_mr changes access and PD in place (a UMR on the mkey, the
 * keys stay); a new translation registers the MR anew and drops the old
 * registration, so the keys change (the new ones are in the ibv_mr), as
 * the kernel's mlx5 driver does when it cannot reuse the mkey. On failure
 * the MR is as it was. */
HC_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	if (!hc_obj_live(mr, HC_OBJ_MR)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	struct hc_mr *m = (struct hc_mr *)mr;
	struct hc_context *ctx = hc_ctx(mr->context);
	if (flags <= 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && (!hc_obj_live(pd, HC_OBJ_PD) || pd->context != mr->context))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	struct ibv_pd *npd = flags & IBV_REREG_MR_CHANGE_PD ? pd : mr->pd;
	void *naddr = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? addr : mr->addr;
	size_t nlen = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? length : mr->length;
	unsigned nacc = flags & IBV_REREG_MR_CHANGE_ACCESS ? (unsigned)access : m->access;
	uint64_t iova = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? (uintptr_t)addr : m->iova;
	int err = mr_check(ctx, naddr, nlen, iova, &nacc);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (!(flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
		/* In place: the keys stay. */
		err = hc_umr_modify(mr->pd, mr->lkey, flags & IBV_REREG_MR_CHANGE_ACCESS, hc_mkey_access(nacc),
				    flags & IBV_REREG_MR_CHANGE_PD ? npd : NULL);
		if (err) {
			errno = err;
			return IBV_REREG_MR_ERR_CMD;
		}
		mr->pd = npd;
		m->access = nacc;
		return 0;
	}
	/* A new translation: a new registration, with new keys. */
	struct hc_mr n = {0};
	err = mr_make(ctx, npd, naddr, nlen, iova, nacc, &n);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	err = hc_obj_destroy(ctx, HC_CMD_DESTROY_MKEY, m->index);
	if (err) {
		hc_obj_destroy(ctx, HC_CMD_DESTROY_MKEY, n.index);
		pthread_mutex_lock(&regions_mu);
		mr_drop(&n);
		pthread_mutex_unlock(&regions_mu);
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	pthread_mutex_lock(&regions_mu);
	mr_drop(m);
	pthread_mutex_unlock(&regions_mu);
	n.access = nacc;
	n.iova = iova;
	*m = n;
	return 0;
}

HC_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

HC_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

HC_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	HC_LIVE(mr, HC_OBJ_MR, EINVAL);
	struct hc_mr *m = (struct hc_mr *)mr;
	int err = hc_obj_destroy(hc_ctx(mr->context), HC_CMD_DESTROY_MKEY, m->index);
	if (err)
		return err;
	hc_obj_del(mr);
	pthread_mutex_lock(&regions_mu);
	mr_drop(m);
	pthread_mutex_unlock(&regions_mu);
	hc_zfree(m);
	return 0;
}

/* hc_mr_context_closed drops a closing context's mappings from every
 * region (its MRs are gone with the connection). */
void hc_mr_context_closed(struct hc_context *ctx)
{
	pthread_mutex_lock(&regions_mu);
	for (struct region *r = regions; r; r = r->next)
		for (struct rmap **p = &r->maps; *p;)
			if ((*p)->ctx == ctx) {
				struct rmap *m = *p;
				*p = m->next;
				free(m);
			} else {
				p = &(*p)->next;
			}
	pthread_mutex_unlock(&regions_mu);
}

/* Fork needs no preparation: registered memory is copied for a child
 * (fork_prepare). */
HC_EXPORT int ibv_fork_init(void) { return 0; }
HC_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
HC_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
HC_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

/* hc_mr_access returns the access flags mr was registered with. */
unsigned hc_mr_access(struct ibv_mr *mr) { return ((struct hc_mr *)mr)->access; }
