/* The objects the front end handed out, by address and kind, so that every
 * exported entry point can tell a live object of its own from NULL, a
 * destroyed one, one of another kind, or memory it never made, and fail
 * with EINVAL instead of following the pointer. One open-addressing table
 * (linear probing, tombstones) under one mutex: looked up by the control
 * verbs, never by the data path (post, poll), whose inline entry points in
 * verbs.h follow the program's pointers before hcasim sees them. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "hcasim.h"

struct slot {
	const void *p; /* NULL: empty; &tomb: removed */
	int kind;
};

static pthread_mutex_t objs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot *objs;
static size_t objs_cap, objs_used; /* used counts tombstones too */
static const char tomb;

static size_t slot_of(const void *p, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL;
	return (size_t)(h >> 17) & (cap - 1);
}

/* grow rehashes into a table twice the live count's size (at least 64). */
static int grow(void)
{
	size_t live = 0;
	for (size_t i = 0; i < objs_cap; i++)
		live += objs[i].p && objs[i].p != &tomb;
	size_t cap = 64;
	while (cap < 4 * (live + 1))
		cap *= 2;
	struct slot *t = calloc(cap, sizeof *t);
	if (!t)
		return -1;
	for (size_t i = 0; i < objs_cap; i++) {
		if (!objs[i].p || objs[i].p == &tomb)
			continue;
		size_t j = slot_of(objs[i].p, cap);
		while (t[j].p)
			j = (j + 1) & (cap - 1);
		t[j] = objs[i];
	}
	free(objs);
	objs_used = live;
	objs = t;
	objs_cap = cap;
	return 0;
}

void hc_obj_add(const void *p, int kind)
{
	if (!p)
		return;
	pthread_mutex_lock(&objs_mu);
	if (2 * (objs_used + 1) > objs_cap && grow() < 0) {
		pthread_mutex_unlock(&objs_mu);
		return; /* out of memory: the object works, unchecked */
	}
	size_t i = slot_of(p, objs_cap);
	while (objs[i].p && objs[i].p != &tomb && objs[i].p != p)
		i = (i + 1) & (objs_cap - 1);
	if (!objs[i].p)
		objs_used++;
	objs[i].p = p;
	objs[i].kind = kind;
	pthread_mutex_unlock(&objs_mu);
}

/* find returns the slot holding p, or NULL; under objs_mu. */
static struct slot *find(const void *p)
{
	if (!objs_cap || !p)
		return NULL;
	for (size_t i = slot_of(p, objs_cap);; i = (i + 1) & (objs_cap - 1)) {
		if (!objs[i].p)
			return NULL;
		if (objs[i].p == p)
			return &objs[i];
	}
}

void hc_obj_del(const void *p)
{
	pthread_mutex_lock(&objs_mu);
	struct slot *s = find(p);
	if (s)
		s->p = &tomb;
	pthread_mutex_unlock(&objs_mu);
}

int hc_obj_live(const void *p, int kind)
{
	pthread_mutex_lock(&objs_mu);
	struct slot *s = find(p);
	int ok = s && s->kind == kind;
	pthread_mutex_unlock(&objs_mu);
	return ok;
}

/* A fork while another thread holds the table would leave the child's copy
 * locked forever: the fork waits for it. */
static void objs_lock(void) { pthread_mutex_lock(&objs_mu); }
static void objs_unlock(void) { pthread_mutex_unlock(&objs_mu); }
__attribute__((constructor)) static void objs_atfork(void) { pthread_atfork(objs_lock, objs_unlock, objs_unlock); }
