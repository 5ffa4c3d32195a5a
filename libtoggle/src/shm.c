/*
 * shm.c - create, attach and access the agent/daemon shared-memory region
 * (layout in toggle_shm.h and docs/shm.md).
 *
 * Seqlocks: the writer makes seq odd, writes, makes it even again (release);
 * the reader loads seq (acquire), copies, fences, re-loads, and retries on a
 * change.  Data words are copied with relaxed atomic accesses so that the
 * concurrent copy is defined behaviour.  A reader gives up after a bounded
 * number of tries: a writer that died mid-write must not hang the other side.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "toggle_shm.h"

#define SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static size_t shm_align(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static void shm_layout(struct toggle_shm_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = TOGGLE_SHM_MAGIC;
	h->layout_version = TOGGLE_SHM_LAYOUT_VERSION;
	h->header_size = sizeof(*h);
	h->set_words = TOGGLE_SHM_SET_WORDS;
	h->plan_ring = TOGGLE_SHM_PLAN_RING;
	h->max_graphs = TOGGLE_SHM_MAX_GRAPHS;
	h->control_offset = shm_align(sizeof(*h));
	h->control_size = sizeof(struct toggle_shm_control);
	h->status_offset = shm_align(h->control_offset + h->control_size);
	h->status_size = sizeof(struct toggle_shm_status);
	h->total_size = shm_align(h->status_offset + h->status_size);
}

/*
 * Map fd with the layout in *lay, a private copy that was built or validated
 * beforehand.  The offsets come from that copy, never from the mapped header:
 * the agent can rewrite the mapping at any moment, also between the daemon's
 * check and this map (issue 11, item 1).
 */
static int shm_map(struct toggle_shm *shm, int fd, const struct toggle_shm_header *lay,
		   char *err, size_t errlen)
{
	size_t size = (size_t)lay->total_size;
	void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		snprintf(err, errlen, "mmap of %zu bytes: %s", size, strerror(errno));
		return TOGGLE_ESHM;
	}
	shm->fd = fd;
	shm->size = size;
	shm->base = base;
	shm->hdr = base;
	shm->ctl = (struct toggle_shm_control *)((char *)base + lay->control_offset);
	shm->st = (struct toggle_shm_status *)((char *)base + lay->status_offset);
	return 0;
}

int toggle_shm_create(struct toggle_shm *shm, char *err, size_t errlen)
{
	struct toggle_shm_header h;
	shm_layout(&h);
	memset(shm, 0, sizeof(*shm));
	shm->fd = -1;
	int fd = memfd_create("toggle-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		return TOGGLE_ESHM;
	}
	if (ftruncate(fd, (off_t)h.total_size) != 0 || fcntl(fd, F_ADD_SEALS, SHM_SEALS) != 0) {
		snprintf(err, errlen, "sizing or sealing the memfd: %s", strerror(errno));
		close(fd);
		return TOGGLE_ESHM;
	}
	/* The header goes in through the fd: the mapping then sees a valid one. */
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(err, errlen, "writing the header: %s", strerror(errno));
		close(fd);
		return TOGGLE_ESHM;
	}
	int rc = shm_map(shm, fd, &h, err, errlen);
	if (rc) {
		close(fd);
		return rc;
	}
	shm->st->step = -1;
	return 0;
}

/*
 * Everything the daemon must know before trusting an agent's region.  The
 * header is copied once (pread) and compared with this library's own layout;
 * on success *lay is that own layout, which the caller maps with.
 */
static int shm_check_fd(int fd, struct toggle_shm_header *lay, char *err, size_t errlen)
{
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "shared memory fd is not a regular file");
		return TOGGLE_ESHM;
	}
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
		snprintf(err, errlen, "shared memory is not sealed against resizing");
		return TOGGLE_ESHM;
	}
	struct toggle_shm_header want;
	shm_layout(&want);
	if ((uint64_t)sb.st_size != want.total_size) {
		snprintf(err, errlen, "shared memory is %lld bytes; layout %d needs %llu",
			 (long long)sb.st_size, TOGGLE_SHM_LAYOUT_VERSION,
			 (unsigned long long)want.total_size);
		return TOGGLE_ESHM;
	}
	struct toggle_shm_header got;
	if (pread(fd, &got, sizeof(got), 0) != (ssize_t)sizeof(got)) {
		snprintf(err, errlen, "cannot read the shared memory header");
		return TOGGLE_ESHM;
	}
	if (got.magic != want.magic) {
		snprintf(err, errlen, "bad shared memory magic %#llx", (unsigned long long)got.magic);
		return TOGGLE_ESHM;
	}
	if (got.layout_version != want.layout_version) {
		snprintf(err, errlen, "shared memory layout %u; this daemon speaks %u",
			 got.layout_version, want.layout_version);
		return TOGGLE_ESHM;
	}
	/* Same layout version, so every field must match ours exactly. */
	memset(got.reserved, 0, sizeof(got.reserved));
	got.reserved0 = 0;
	if (memcmp(&got, &want, sizeof(got)) != 0) {
		snprintf(err, errlen, "shared memory header fields disagree with layout %u",
			 want.layout_version);
		return TOGGLE_ESHM;
	}
	*lay = want;
	return 0;
}

int toggle_shm_attach(int fd, struct toggle_shm *shm, char *err, size_t errlen)
{
	memset(shm, 0, sizeof(*shm));
	shm->fd = -1;
	struct toggle_shm_header lay;
	int rc = shm_check_fd(fd, &lay, err, errlen);
	if (rc)
		return rc;
	int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (own < 0) {
		snprintf(err, errlen, "dup of the shared memory fd: %s", strerror(errno));
		return TOGGLE_ESHM;
	}
	rc = shm_map(shm, own, &lay, err, errlen);
	if (rc)
		close(own);
	return rc;
}

void toggle_shm_unmap(struct toggle_shm *shm)
{
	if (shm->base)
		munmap(shm->base, shm->size);
	if (shm->fd >= 0)
		close(shm->fd);
	memset(shm, 0, sizeof(*shm));
	shm->fd = -1;
}

/* ---- seqlock primitives ---- */

static void words_store(uint64_t *dst, const uint64_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		__atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
}

static void words_load(uint64_t *dst, const uint64_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

static uint64_t seq_write_begin(uint64_t *seq)
{
	uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
	__atomic_store_n(seq, s + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	return s + 2;
}

static void seq_write_end(uint64_t *seq, uint64_t next)
{
	__atomic_store_n(seq, next, __ATOMIC_RELEASE);
}

static bool seq_read_begin(const uint64_t *seq, uint64_t *s)
{
	*s = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
	return (*s & 1) == 0;
}

static bool seq_read_ok(const uint64_t *seq, uint64_t s)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(seq, __ATOMIC_RELAXED) == s;
}

/* Word views of the seqlocked parts (all fields are 64-bit words). */
#define CTL_WORDS offsetof(struct toggle_shm_control, reserved) / 8 - 1
#define ST_FIXED_WORDS offsetof(struct toggle_shm_status, reserved) / 8 - 1
#define GRAPH_WORDS (sizeof(struct toggle_shm_graph) / 8)

_Static_assert(offsetof(struct toggle_shm_control, version) == 8, "control layout");
_Static_assert(sizeof(struct toggle_shm_control_view) == (CTL_WORDS) * 8, "control view");
_Static_assert(sizeof(struct toggle_shm_graph) % 8 == 0, "graph record");
_Static_assert(offsetof(struct toggle_shm_status, step) == 8, "status layout");
/* The connection words took the end of the reserved space: nothing moved. */
_Static_assert(offsetof(struct toggle_shm_status, graphs) ==
	       offsetof(struct toggle_shm_status, current) + TOGGLE_SHM_SET_WORDS * 8 + 256,
	       "status layout 1: graphs after 256 reserved bytes");
#define CONN_WORDS (sizeof(struct toggle_shm_conn) / 8)
/* Layout 1 as first published: fields added since come out of reserved space. */
_Static_assert(offsetof(struct toggle_shm_status, graphs) == 1432, "status layout 1");
_Static_assert(sizeof(struct toggle_shm_status) == 1432 + 64 * 64, "status layout 1");
_Static_assert(sizeof(struct toggle_shm_control) == 68904, "control layout 1");

/* Both sides memcpy a struct toggle_set's bitmap into and out of the lanes'
 * sets: the same bytes.  Layout 1 fixes them at 128 words; a larger hook
 * space is a new TOGGLE_SHM_LAYOUT_VERSION. */
#define SHM_FIELD_SIZE(type, field) sizeof(((type *)0)->field)
_Static_assert(TOGGLE_SHM_SET_WORDS == 128, "layout 1: 128-word sets");
_Static_assert(SHM_FIELD_SIZE(struct toggle_shm_plan_slot, set) == sizeof(struct toggle_set),
	       "plan slot set vs struct toggle_set");
_Static_assert(SHM_FIELD_SIZE(struct toggle_shm_control, standing) == sizeof(struct toggle_set),
	       "standing set vs struct toggle_set");
_Static_assert(SHM_FIELD_SIZE(struct toggle_shm_control_view, standing) ==
		       sizeof(struct toggle_set),
	       "control view's standing set vs struct toggle_set");
_Static_assert(SHM_FIELD_SIZE(struct toggle_shm_status, current) == sizeof(struct toggle_set),
	       "status current set vs struct toggle_set");

void toggle_shm_control_write(struct toggle_shm_control *ctl, const struct toggle_shm_control_view *v)
{
	uint64_t next = seq_write_begin(&ctl->seq);
	words_store(&ctl->version, (const uint64_t *)v, CTL_WORDS);
	seq_write_end(&ctl->seq, next);
}

int toggle_shm_control_read(const struct toggle_shm_control *ctl, struct toggle_shm_control_view *v)
{
	for (int i = 0; i < TOGGLE_SHM_READ_TRIES; i++) {
		uint64_t s;
		if (!seq_read_begin(&ctl->seq, &s))
			continue;
		words_load((uint64_t *)v, &ctl->version, CTL_WORDS);
		if (seq_read_ok(&ctl->seq, s))
			return 0;
	}
	return TOGGLE_EBUSY;
}

uint64_t toggle_shm_control_seq(const struct toggle_shm_control *ctl)
{
	return __atomic_load_n(&ctl->seq, __ATOMIC_ACQUIRE);
}

void toggle_shm_plan_slot_write(struct toggle_shm_control *ctl, uint64_t i,
				const struct toggle_shm_plan_slot *slot)
{
	struct toggle_shm_plan_slot *dst = &ctl->plan[i % TOGGLE_SHM_PLAN_RING];
	words_store((uint64_t *)dst, (const uint64_t *)slot, sizeof(*slot) / 8);
	/* Published by the release store of the next control write. */
}

void toggle_shm_plan_slot_read(const struct toggle_shm_control *ctl, uint64_t i,
			       struct toggle_shm_plan_slot *slot)
{
	const struct toggle_shm_plan_slot *src = &ctl->plan[i % TOGGLE_SHM_PLAN_RING];
	words_load((uint64_t *)slot, (const uint64_t *)src, sizeof(*slot) / 8);
}

void toggle_shm_status_write(struct toggle_shm_status *st, const struct toggle_shm_status *src)
{
	uint64_t n = src->n_graphs <= TOGGLE_SHM_MAX_GRAPHS ? src->n_graphs : TOGGLE_SHM_MAX_GRAPHS;
	uint64_t next = seq_write_begin(&st->seq);
	words_store((uint64_t *)&st->step, (const uint64_t *)&src->step, ST_FIXED_WORDS);
	words_store((uint64_t *)&st->conn, (const uint64_t *)&src->conn, CONN_WORDS);
	words_store((uint64_t *)st->graphs, (const uint64_t *)src->graphs, n * GRAPH_WORDS);
	seq_write_end(&st->seq, next);
}

#define ST_HEAD_WORDS (offsetof(struct toggle_shm_status, current) / 8 - 1)

int toggle_shm_status_read_head(const struct toggle_shm_status *st, struct toggle_shm_status *out)
{
	for (int i = 0; i < TOGGLE_SHM_READ_TRIES; i++) {
		uint64_t s;
		if (!seq_read_begin(&st->seq, &s))
			continue;
		words_load((uint64_t *)&out->step, (const uint64_t *)&st->step, ST_HEAD_WORDS);
		if (seq_read_ok(&st->seq, s)) {
			out->seq = s;
			return out->n_graphs <= TOGGLE_SHM_MAX_GRAPHS ? 0 : TOGGLE_ESHM;
		}
	}
	return TOGGLE_EBUSY;
}

int toggle_shm_status_read(const struct toggle_shm_status *st, struct toggle_shm_status *out)
{
	for (int i = 0; i < TOGGLE_SHM_READ_TRIES; i++) {
		uint64_t s;
		if (!seq_read_begin(&st->seq, &s))
			continue;
		words_load((uint64_t *)&out->step, (const uint64_t *)&st->step, ST_FIXED_WORDS);
		words_load((uint64_t *)&out->conn, (const uint64_t *)&st->conn, CONN_WORDS);
		/* n_graphs is untrusted: bound it before copying records. */
		uint64_t n = out->n_graphs;
		if (n > TOGGLE_SHM_MAX_GRAPHS)
			n = TOGGLE_SHM_MAX_GRAPHS;
		words_load((uint64_t *)out->graphs, (const uint64_t *)st->graphs, n * GRAPH_WORDS);
		if (!seq_read_ok(&st->seq, s))
			continue;
		out->seq = s;
		return out->n_graphs <= TOGGLE_SHM_MAX_GRAPHS ? 0 : TOGGLE_ESHM;
	}
	return TOGGLE_EBUSY;
}
