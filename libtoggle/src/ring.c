/*
 * ring.c - the data ring's layout, its checks and its position arithmetic
 * (toggle_ring.h), shared by the agent (record.c drives the writer) and
 * toggled (the reader).  libc only: no CUDA, so the daemon links it.
 *
 * Everything the reader takes from the mapping is copied once with relaxed
 * atomic loads (the agent may be rewriting it: the copy is defined
 * behaviour) and checked on the copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "toggle_ring.h"

#define RING_SEALS      (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define RING_READ_TRIES 1000 /* seqlock retries before a reader gives up */
#define RING_PROD_OFF   128u
#define RING_CONS_OFF   256u
#define RING_REQ_OFF    384u

_Static_assert(sizeof(((struct toggle_ring_request *)0)->set) == sizeof(struct toggle_set),
	       "the request's set is a struct toggle_set's bitmap");
_Static_assert(offsetof(struct toggle_ring_record, shape) == 64 &&
		       offsetof(struct toggle_ring_record, payload_len) == 96 &&
		       offsetof(struct toggle_ring_record, checksum) == TOGGLE_RING_CHECKSUM_BYTES,
	       "record header offsets as documented");
_Static_assert(TOGGLE_RING_MIN_CAPACITY % TOGGLE_RING_ALIGN == 0 && TOGGLE_RING_DATA_OFFSET % 4096 == 0,
	       "capacities and the data area keep records aligned and the data page-aligned");

const char *toggle_ring_fault_str(int fault)
{
	static const char *const text[] = {
#define RING_FAULT_TEXT(NAME, t) t,
		TOGGLE_RING_FAULT_MAP(RING_FAULT_TEXT)
#undef RING_FAULT_TEXT
	};
	if (fault < 0 || fault >= TOGGLE_RING_F_COUNT)
		return "unknown ring fault";
	return text[fault];
}

void toggle_ring_record_seal(struct toggle_ring_record *r)
{
	r->checksum = toggle_ring_fnv1a(r, TOGGLE_RING_CHECKSUM_BYTES);
}

/* DATA only: dtype, dims and payload agree; the hook lies in the hook space. */
static int ring_check_data(const struct toggle_ring_record *r)
{
	if (r->payload_len > r->length - sizeof(*r))
		return TOGGLE_RING_F_PAYLOAD;
	unsigned esize = toggle_dtype_size(r->dtype);
	if (esize == 0)
		return TOGGLE_RING_F_DTYPE;
	if (r->ndim > TOGGLE_RING_MAX_DIMS)
		return TOGGLE_RING_F_NDIM;
	uint64_t n = esize;
	for (unsigned i = 0; i < TOGGLE_RING_MAX_DIMS; i++) {
		if (i >= r->ndim) {
			if (r->shape[i] != 0)
				return TOGGLE_RING_F_SHAPE;
			continue;
		}
		/* Bounded by the payload at every step: no overflow, and a zero
		 * dimension makes an empty payload. */
		if (r->shape[i] != 0 && n > r->payload_len / r->shape[i])
			return TOGGLE_RING_F_SHAPE;
		n *= r->shape[i];
	}
	if (n != r->payload_len)
		return TOGGLE_RING_F_SHAPE;
	if (r->hook_type >= TOGGLE_MAX_HOOK_TYPES || r->layer >= TOGGLE_MAX_LAYERS)
		return TOGGLE_RING_F_HOOK;
	return TOGGLE_RING_F_OK;
}

int toggle_ring_record_check(const struct toggle_ring_record *r, uint64_t off, uint64_t avail,
			     uint64_t capacity, uint64_t seq)
{
	if (r->magic != TOGGLE_RING_REC_MAGIC)
		return TOGGLE_RING_F_MAGIC;
	if (r->header_size != sizeof(*r))
		return TOGGLE_RING_F_HEADER_SIZE;
	if (r->checksum != toggle_ring_fnv1a(r, TOGGLE_RING_CHECKSUM_BYTES))
		return TOGGLE_RING_F_CHECKSUM;
	if (r->kind != TOGGLE_RING_REC_DATA && r->kind != TOGGLE_RING_REC_PAD)
		return TOGGLE_RING_F_KIND;
	if (r->length < sizeof(*r) || r->length % TOGGLE_RING_ALIGN != 0 || r->length > avail)
		return TOGGLE_RING_F_LENGTH;
	if (off >= capacity || r->length > capacity - off)
		return TOGGLE_RING_F_STRADDLE;
	if (r->seq != seq)
		return TOGGLE_RING_F_SEQ;
	return r->kind == TOGGLE_RING_REC_DATA ? ring_check_data(r) : TOGGLE_RING_F_OK;
}

/* ---- the region ---------------------------------------------------------- */

static bool ring_capacity_ok(uint64_t c)
{
	return c >= TOGGLE_RING_MIN_CAPACITY && c <= TOGGLE_RING_MAX_CAPACITY && (c & (c - 1)) == 0;
}

static void ring_layout(struct toggle_ring_header *h, uint64_t capacity)
{
	memset(h, 0, sizeof(*h));
	h->magic = TOGGLE_RING_MAGIC;
	h->layout_version = TOGGLE_RING_LAYOUT_VERSION;
	h->header_size = sizeof(*h);
	h->total_size = TOGGLE_RING_DATA_OFFSET + capacity;
	h->data_offset = TOGGLE_RING_DATA_OFFSET;
	h->capacity = capacity;
	h->record_align = TOGGLE_RING_ALIGN;
	h->record_header = sizeof(struct toggle_ring_record);
	h->producer_offset = RING_PROD_OFF;
	h->consumer_offset = RING_CONS_OFF;
	h->request_offset = RING_REQ_OFF;
}

/* Map with the private layout *lay; the data area read-only for the daemon. */
static int ring_map(struct toggle_ring_map *m, int fd, const struct toggle_ring_header *lay,
		    bool data_ro, char *err, size_t errlen)
{
	size_t size = (size_t)lay->total_size;
	void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		snprintf(err, errlen, "mmap of the %zu-byte ring: %s", size, strerror(errno));
		return TOGGLE_ESHM;
	}
	if (data_ro && mprotect((char *)base + lay->data_offset, (size_t)lay->capacity, PROT_READ) != 0) {
		snprintf(err, errlen, "mprotect of the ring's data: %s", strerror(errno));
		munmap(base, size);
		return TOGGLE_ESHM;
	}
	m->fd = fd;
	m->size = size;
	m->capacity = lay->capacity;
	m->base = base;
	m->prod = (struct toggle_ring_producer *)((char *)base + RING_PROD_OFF);
	m->cons = (struct toggle_ring_consumer *)((char *)base + RING_CONS_OFF);
	m->req = (struct toggle_ring_request *)((char *)base + RING_REQ_OFF);
	m->data = (unsigned char *)base + lay->data_offset;
	return 0;
}

int toggle_ring_create(uint64_t capacity, struct toggle_ring_map *m, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	m->fd = -1;
	if (!ring_capacity_ok(capacity)) {
		snprintf(err, errlen, "ring capacity %llu: a power of two from %llu to %llu bytes",
			 (unsigned long long)capacity, (unsigned long long)TOGGLE_RING_MIN_CAPACITY,
			 (unsigned long long)TOGGLE_RING_MAX_CAPACITY);
		return TOGGLE_EINVAL;
	}
	struct toggle_ring_header h;
	ring_layout(&h, capacity);
	int fd = memfd_create("toggle-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		return TOGGLE_ESHM;
	}
	if (ftruncate(fd, (off_t)h.total_size) != 0 || fcntl(fd, F_ADD_SEALS, RING_SEALS) != 0) {
		snprintf(err, errlen, "sizing or sealing the ring's memfd: %s", strerror(errno));
		close(fd);
		return TOGGLE_ESHM;
	}
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(err, errlen, "writing the ring header: %s", strerror(errno));
		close(fd);
		return TOGGLE_ESHM;
	}
	int rc = ring_map(m, fd, &h, false, err, errlen);
	if (rc)
		close(fd);
	return rc;
}

/* Consumer rules 1 and 2 (toggle_ring.h) on an untrusted fd; *lay: our layout. */
static int ring_check_fd(int fd, uint64_t expect_size, struct toggle_ring_header *lay, char *err,
			 size_t errlen)
{
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "ring fd is not a regular file");
		return TOGGLE_ESHM;
	}
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
		snprintf(err, errlen, "ring is not sealed against resizing");
		return TOGGLE_ESHM;
	}
	struct toggle_ring_header got;
	if (pread(fd, &got, sizeof(got), 0) != (ssize_t)sizeof(got)) {
		snprintf(err, errlen, "cannot read the ring header");
		return TOGGLE_ESHM;
	}
	if (got.magic != TOGGLE_RING_MAGIC) {
		snprintf(err, errlen, "bad ring magic %#llx", (unsigned long long)got.magic);
		return TOGGLE_ESHM;
	}
	if (got.layout_version != TOGGLE_RING_LAYOUT_VERSION) {
		snprintf(err, errlen, "ring layout %u; this side speaks %u", got.layout_version,
			 TOGGLE_RING_LAYOUT_VERSION);
		return TOGGLE_ESHM;
	}
	if (!ring_capacity_ok(got.capacity)) {
		snprintf(err, errlen, "ring capacity %llu out of bounds or not a power of two",
			 (unsigned long long)got.capacity);
		return TOGGLE_ESHM;
	}
	struct toggle_ring_header want;
	ring_layout(&want, got.capacity);
	memset(got.reserved, 0, sizeof(got.reserved));
	if (memcmp(&got, &want, sizeof(got)) != 0) {
		snprintf(err, errlen, "ring header fields disagree with layout %u",
			 TOGGLE_RING_LAYOUT_VERSION);
		return TOGGLE_ESHM;
	}
	if ((uint64_t)sb.st_size != want.total_size ||
	    (expect_size != 0 && expect_size != want.total_size)) {
		snprintf(err, errlen, "ring is %lld bytes, announced %llu; its header needs %llu",
			 (long long)sb.st_size, (unsigned long long)expect_size,
			 (unsigned long long)want.total_size);
		return TOGGLE_ESHM;
	}
	*lay = want;
	return 0;
}

int toggle_ring_attach(int fd, uint64_t expect_size, struct toggle_ring_map *m, char *err,
		       size_t errlen)
{
	memset(m, 0, sizeof(*m));
	m->fd = -1;
	struct toggle_ring_header lay;
	int rc = ring_check_fd(fd, expect_size, &lay, err, errlen);
	if (rc)
		return rc;
	int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (own < 0) {
		snprintf(err, errlen, "dup of the ring fd: %s", strerror(errno));
		return TOGGLE_ESHM;
	}
	rc = ring_map(m, own, &lay, true, err, errlen);
	if (rc)
		close(own);
	return rc;
}

void toggle_ring_unmap(struct toggle_ring_map *m)
{
	if (m->base)
		munmap(m->base, m->size);
	if (m->fd >= 0)
		close(m->fd);
	memset(m, 0, sizeof(*m));
	m->fd = -1;
}

/* ---- the consumer ---------------------------------------------------------- */

static uint64_t ring_load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Copy a record header out of the mapping, word by word. */
static void ring_copy_header(struct toggle_ring_record *dst, const unsigned char *src)
{
	uint64_t w[sizeof(*dst) / 8];
	for (size_t i = 0; i < sizeof(w) / 8; i++)
		w[i] = ring_load((const uint64_t *)(const void *)(src + 8 * i));
	memcpy(dst, w, sizeof(*dst));
}

void toggle_ring_reader_open(struct toggle_ring_reader *rd, const struct toggle_ring_map *m)
{
	memset(rd, 0, sizeof(*rd));
	rd->m = m;
	uint64_t h = __atomic_load_n(&m->prod->head, __ATOMIC_ACQUIRE);
	if (h % TOGGLE_RING_ALIGN != 0) {
		rd->fault = TOGGLE_RING_F_HEAD_ALIGN;
		return;
	}
	rd->tail = rd->head = h;
	__atomic_store_n(&m->cons->tail, h, __ATOMIC_RELEASE);
}

/* A new head from the producer (rule 3); 0 or a fault. */
static int ring_poll_head(struct toggle_ring_reader *rd)
{
	uint64_t h = __atomic_load_n(&rd->m->prod->head, __ATOMIC_ACQUIRE);
	if (h < rd->head)
		return TOGGLE_RING_F_HEAD_BACK;
	if (h % TOGGLE_RING_ALIGN != 0)
		return TOGGLE_RING_F_HEAD_ALIGN;
	if (h - rd->tail > rd->m->capacity)
		return TOGGLE_RING_F_HEAD_OVER;
	rd->head = h;
	return TOGGLE_RING_F_OK;
}

int toggle_ring_reader_next(struct toggle_ring_reader *rd, struct toggle_ring_record *out,
			    const void **payload)
{
	const struct toggle_ring_map *m = rd->m;
	for (;;) {
		if (rd->fault != TOGGLE_RING_F_OK)
			return TOGGLE_ESHM;
		if (rd->pending) /* the last record was not released: it stays the next */
			toggle_ring_reader_release(rd, NULL);
		if (rd->tail == rd->head) {
			rd->fault = ring_poll_head(rd);
			if (rd->fault != TOGGLE_RING_F_OK)
				return TOGGLE_ESHM;
			if (rd->tail == rd->head)
				return 0;
		}
		uint64_t off = rd->tail & (m->capacity - 1);
		struct toggle_ring_record r;
		ring_copy_header(&r, m->data + off);
		int f = toggle_ring_record_check(&r, off, rd->head - rd->tail, m->capacity,
						 rd->seq_known ? rd->seq : r.seq);
		if (f != TOGGLE_RING_F_OK) {
			rd->fault = f;
			return TOGGLE_ESHM;
		}
		rd->seq = r.seq + 1;
		rd->seq_known = true;
		rd->pending = r.length;
		if (r.kind == TOGGLE_RING_REC_PAD)
			continue; /* released at the top of the loop */
		*out = r;
		*payload = m->data + off + sizeof(r);
		return 1;
	}
}

void toggle_ring_reader_release(struct toggle_ring_reader *rd, const struct toggle_ring_record *rec)
{
	(void)rec;
	if (!rd->pending)
		return;
	rd->tail += rd->pending;
	rd->pending = 0;
	__atomic_store_n(&rd->m->cons->tail, rd->tail, __ATOMIC_RELEASE);
}

/* ---- the producer ------------------------------------------------------------ */

void toggle_ring_writer_init(struct toggle_ring_writer *w, struct toggle_ring_map *m)
{
	memset(w, 0, sizeof(*w));
	w->m = m;
	w->head = w->reserve = __atomic_load_n(&m->prod->head, __ATOMIC_RELAXED);
	w->seq = __atomic_load_n(&m->prod->seq, __ATOMIC_RELAXED);
}

static void ring_count(uint64_t *word, uint64_t n)
{
	__atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* A header at position pos: zeroed, then kind, length and the next seq. */
static struct toggle_ring_record *ring_lay(struct toggle_ring_writer *w, uint64_t pos, unsigned kind,
					   uint64_t length)
{
	struct toggle_ring_record *r =
		(struct toggle_ring_record *)(void *)(w->m->data + (pos & (w->m->capacity - 1)));
	memset(r, 0, sizeof(*r));
	r->magic = TOGGLE_RING_REC_MAGIC;
	r->kind = (uint16_t)kind;
	r->header_size = sizeof(*r);
	r->length = length;
	r->seq = w->seq++;
	__atomic_store_n(&w->m->prod->seq, w->seq, __ATOMIC_RELAXED);
	return r;
}

struct toggle_ring_record *toggle_ring_writer_reserve(struct toggle_ring_writer *w,
						      uint64_t payload_len, uint64_t *pos)
{
	struct toggle_ring_producer *p = w->m->prod;
	uint64_t cap = w->m->capacity;
	uint64_t len = toggle_ring_record_length(payload_len);
	/* What the daemon says it has read: bounded before it is believed. */
	uint64_t tail = __atomic_load_n(&w->m->cons->tail, __ATOMIC_ACQUIRE);
	bool tail_ok = tail <= w->head && w->reserve - tail <= cap;
	uint64_t off = w->reserve & (cap - 1);
	uint64_t pad = (len != 0 && len > cap - off) ? cap - off : 0;
	if (!tail_ok || len == 0 || len > cap || w->reserve + pad + len - tail > cap) {
		if (!tail_ok)
			ring_count(&p->consumer_errors, 1);
		ring_count(&p->dropped, 1);
		ring_count(&p->dropped_bytes, len);
		return NULL;
	}
	if (pad) {
		toggle_ring_record_seal(ring_lay(w, w->reserve, TOGGLE_RING_REC_PAD, pad));
		w->reserve += pad;
	}
	struct toggle_ring_record *r = ring_lay(w, w->reserve, TOGGLE_RING_REC_DATA, len);
	r->payload_len = payload_len;
	r->dropped = __atomic_load_n(&p->dropped, __ATOMIC_RELAXED);
	*pos = w->reserve;
	w->reserve += len;
	return r;
}

void toggle_ring_writer_void(struct toggle_ring_writer *w, uint64_t pos)
{
	if (pos < w->head || pos >= w->reserve)
		return;
	struct toggle_ring_record *r =
		(struct toggle_ring_record *)(void *)(w->m->data + (pos & (w->m->capacity - 1)));
	uint64_t length = r->length, seq = r->seq;
	memset(r, 0, sizeof(*r));
	r->magic = TOGGLE_RING_REC_MAGIC;
	r->kind = TOGGLE_RING_REC_PAD;
	r->header_size = sizeof(*r);
	r->length = length;
	r->seq = seq;
	toggle_ring_record_seal(r);
	ring_count(&w->m->prod->errors, 1);
}

void toggle_ring_writer_publish(struct toggle_ring_writer *w, uint64_t pos, uint64_t n_data)
{
	if (pos < w->head || pos > w->reserve)
		return;
	ring_count(&w->m->prod->records, n_data);
	w->head = pos;
	__atomic_store_n(&w->m->prod->head, pos, __ATOMIC_RELEASE);
}

/* ---- the request (seqlock: the daemon writes, the agent reads) ---------------- */

void toggle_ring_request_write(struct toggle_ring_request *rq, uint64_t session,
			       const struct toggle_set *set)
{
	uint64_t s = __atomic_load_n(&rq->seq, __ATOMIC_RELAXED);
	__atomic_store_n(&rq->seq, s + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&rq->session, session, __ATOMIC_RELAXED);
	for (size_t i = 0; i < TOGGLE_RING_SET_WORDS; i++)
		__atomic_store_n(&rq->set[i], set ? set->bits[i] : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rq->seq, s + 2, __ATOMIC_RELEASE);
}

int toggle_ring_request_read(const struct toggle_ring_request *rq, uint64_t *session,
			     struct toggle_set *set)
{
	for (int t = 0; t < RING_READ_TRIES; t++) {
		uint64_t s0 = __atomic_load_n(&rq->seq, __ATOMIC_ACQUIRE);
		if (s0 & 1)
			continue;
		uint64_t ses = ring_load(&rq->session);
		for (size_t i = 0; i < TOGGLE_RING_SET_WORDS; i++)
			set->bits[i] = ring_load(&rq->set[i]);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&rq->seq, __ATOMIC_RELAXED) == s0) {
			*session = ses;
			return 0;
		}
	}
	return TOGGLE_EBUSY;
}
