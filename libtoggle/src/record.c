/*
 * record.c - the recorder (toggle_record.h): monitor buffers after a
 * replay, copied in stream order into the page-locked data ring
 * (toggle_ring.h, positions and checks in ring.c), published once the
 * event after the copies has completed.  Never waits on the launch path.
 *
 * A launch's records form a batch: the ring range [start, end) reserved
 * for them (pads included) and the event recorded after their copies.
 * Batches complete in the order they were laid out only per stream, but
 * the ring is published in position order: poll publishes the oldest
 * batches whose events have completed and stops at the first that has not.
 *
 * Two ways to copy.  Staged (when the gather kernel, a staging area and a
 * stream of the recorder's own could be had at toggle_record_open): on
 * the replay's stream one launch of gather.cu per TG_GATHER_MAX (40) records
 * copies headers and payloads device to device into the staging area,
 * a device mirror of the ring's data area (a record's staging offset is
 * its ring offset), then an event; the recorder's stream waits on it and
 * copies each contiguous ring range (two when the batch wraps) to the
 * host, then records the batch's event.  The replay's stream carries one
 * kernel and one event per launch; the engine's synchronize on it no
 * longer waits for the host copies.  A staging range is written again only
 * when its ring range is reserved again, i.e. after the record there was
 * published, after its copy completed: no other ordering is needed.
 * Otherwise (no fatbin, the allocation refused): one cuMemcpyDtoHAsync per
 * record on the replay's stream, as eager records always are.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"
#include "conn.h"
#include "gather.h"
#include "record_impl.h"
#include "toggle_record.h"

#define REC_SLOTS (2 * TOGGLE_RECORD_MAX_BUFFERS) /* open addressing, load <= 1/2 */
#define REC_RUNS  4 /* contiguous ring ranges of a staged batch: 2 at most (one wrap) */

/* The header words gather.h passes once per launch, where the header has them. */
_Static_assert(sizeof(struct tg_gather_args) <= 4096, "the gather's arguments fit 4 KiB");
_Static_assert(sizeof(struct toggle_ring_record) == 8 * TG_GATHER_HDR_WORDS &&
		       offsetof(struct toggle_ring_record, session) == 8 * 3 &&
		       offsetof(struct toggle_ring_record, step) == 8 * 4 &&
		       offsetof(struct toggle_ring_record, graph) == 8 * 5 &&
		       offsetof(struct toggle_ring_record, launch) == 8 * 6 &&
		       offsetof(struct toggle_ring_record, reserved) == 8 * 14 &&
		       offsetof(struct toggle_ring_record, payload_len) == 8 * TG_GATHER_PAYLOAD_WORD &&
		       TG_GATHER_HDR_WORDS - __builtin_popcount(TG_GATHER_SHARED) ==
			       TG_GATHER_REC_WORDS,
	       "gather.h's shared and own header words are the record header's");

struct rec_buf {
	CUgraph graph;       /* NULL: every graph */
	uint32_t hook;       /* hook index + 1; 0: empty slot, UINT32_MAX: removed */
	uint64_t capture_id; /* declared in this capture of graph (0: any): a later
			      * capture behind a reused handle does not see it */
	struct toggle_record_buffer b;
};

struct rec_batch {
	uint64_t start, end; /* ring positions */
	uint64_t n_data;     /* DATA records in it that were not voided */
	uint64_t bytes;      /* their payload bytes */
	CUstream origin;     /* the replay's stream */
	CUstream stream;     /* the one its event is on: origin, or the recorder's (staged) */
	bool has_event;      /* false: the event record failed; a later one on stream covers it */
	/* Staged only. */
	bool staged;
	bool launched;       /* a gather of it was enqueued: its event must cover that */
	bool failed;         /* a step failed: voided once its device work is done */
	bool idle;           /* nothing of it reached the device: done, voided */
	unsigned n_runs;
	uint64_t run[REC_RUNS][2]; /* contiguous ring ranges [start, end), positions */
};

struct tg_rec {
	struct toggle_ring_map map;
	struct toggle_ring_writer w;
	bool host_registered;
	/* The request, as last read. */
	uint64_t req_seq;
	uint64_t session;
	struct toggle_set want;
	/* Declared buffers. */
	struct rec_buf bufs[REC_SLOTS];
	uint32_t n_bufs;
	/* Batches in flight: a ring of TOGGLE_RECORD_MAX_PENDING, events one per slot. */
	struct rec_batch batch[TOGGLE_RECORD_MAX_PENDING];
	CUevent ev[TOGGLE_RECORD_MAX_PENDING];
	uint64_t b_head, b_tail; /* batches ever opened / ever published */
	uint64_t bytes;          /* payload bytes published */
	uint64_t eager_runs;     /* the `launch` tag of eager records */
	/* The staged path (NULL fn: record by record). */
	CUmodule g_mod;
	CUfunction g_fn;
	CUdeviceptr staging;     /* capacity bytes of device memory: the ring's mirror */
	CUstream copy;           /* the recorder's stream: the host copies */
	CUevent gev[TOGGLE_RECORD_MAX_PENDING]; /* after a batch's gathers, on its replay stream */
	struct tg_gather_args args; /* the launch being filled */
};

/* The declared buffers live in the agent before a ring exists: a small
 * side allocation made at the first declaration. */
static struct tg_rec *rec_get(struct toggle_agent *a)
{
	if (!a->rec) {
		a->rec = calloc(1, sizeof(*a->rec));
		if (a->rec) {
			a->rec->map.fd = -1;
			a->rec->req_seq = UINT64_MAX; /* read at the first look */
		}
	}
	return a->rec;
}

static bool rec_ring(const struct tg_rec *r)
{
	return r && r->map.base;
}

/* ---- declared buffers ---------------------------------------------------- */

static size_t rec_hash(CUgraph graph, uint32_t hook)
{
	uint64_t k = (uint64_t)(uintptr_t)graph * 0x9e3779b97f4a7c15ull ^ (uint64_t)hook * 0xbf58476d1ce4e5b9ull;
	return (size_t)(k >> 40) & (REC_SLOTS - 1);
}

/* The slot of (graph, hook), or with insert the first free one on its probe path. */
static struct rec_buf *rec_slot(struct tg_rec *r, CUgraph graph, uint32_t hook, bool insert)
{
	struct rec_buf *free_slot = NULL;
	for (size_t i = rec_hash(graph, hook), n = 0; n < REC_SLOTS; i = (i + 1) & (REC_SLOTS - 1), n++) {
		struct rec_buf *s = &r->bufs[i];
		if (s->hook == 0)
			return insert ? (free_slot ? free_slot : s) : NULL;
		if (s->hook == UINT32_MAX) {
			if (!free_slot)
				free_slot = s;
			continue;
		}
		if (s->graph == graph && s->hook == hook + 1)
			return s;
	}
	return insert ? free_slot : NULL;
}

static const struct toggle_record_buffer *rec_lookup(struct tg_rec *r, const struct tg_graph *g,
						     uint32_t hook)
{
	struct rec_buf *s = rec_slot(r, g->graph, hook, false);
	if (s && s->capture_id && s->capture_id != g->capture_id)
		s = NULL; /* a buffer of an earlier graph that had this handle */
	if (!s)
		s = rec_slot(r, NULL, hook, false);
	return s ? &s->b : NULL;
}

static int rec_check_buffer(struct toggle_agent *a, const struct toggle_record_buffer *b)
{
	unsigned esize = toggle_dtype_size(b->dtype);
	if (!b->ptr || !esize || b->ndim > TOGGLE_RING_MAX_DIMS || b->bytes == 0)
		return tg_fail(a, TOGGLE_EINVAL,
			       "monitor buffer: pointer %#llx, dtype %u, %u dims, %llu bytes: needs a "
			       "pointer, a known dtype (enum toggle_dtype), at most %d dims and bytes",
			       (unsigned long long)b->ptr, b->dtype, b->ndim,
			       (unsigned long long)b->bytes, TOGGLE_RING_MAX_DIMS);
	uint64_t n = esize;
	for (unsigned i = 0; i < TOGGLE_RING_MAX_DIMS; i++) {
		if (i >= b->ndim ? b->shape[i] != 0
				 : (b->shape[i] == 0 || n > b->bytes / b->shape[i]))
			return tg_fail(a, TOGGLE_EINVAL,
				       "monitor buffer: dim %u is %llu: dims must be > 0 within ndim, "
				       "0 beyond it, and their product fit the bytes", i,
				       (unsigned long long)b->shape[i]);
		if (i < b->ndim)
			n *= b->shape[i];
	}
	if (n != b->bytes)
		return tg_fail(a, TOGGLE_EINVAL,
			       "monitor buffer: its shape holds %llu bytes of dtype %s, not %llu",
			       (unsigned long long)n, toggle_dtype_name(b->dtype),
			       (unsigned long long)b->bytes);
	if (rec_ring(a->rec) && toggle_ring_record_length(b->bytes) > a->rec->map.capacity)
		return tg_fail(a, TOGGLE_ELIMIT, "monitor buffer of %llu bytes: larger than the ring",
			       (unsigned long long)b->bytes);
	return 0;
}

static int rec_declare(struct toggle_agent *a, CUgraph graph, uint64_t capture_id,
		       struct toggle_hook hook, const struct toggle_record_buffer *buf)
{
	if (hook.type >= a->catalog.n_types || hook.layer >= a->catalog.n_layers)
		return tg_fail(a, TOGGLE_ERANGE, "monitor buffer for hook %u:%u: outside the catalog",
			       hook.type, hook.layer);
	int rc = buf ? rec_check_buffer(a, buf) : 0;
	if (rc)
		return rc;
	struct tg_rec *r = rec_get(a);
	if (!r)
		return tg_fail(a, TOGGLE_ENOMEM, "recorder: out of memory");
	uint32_t h = tg_hook_index(hook);
	struct rec_buf *s = rec_slot(r, graph, h, buf != NULL);
	if (!buf) {
		if (s) {
			s->hook = UINT32_MAX;
			r->n_bufs--;
		}
		return 0;
	}
	if (s && s->hook == h + 1) {
		s->capture_id = capture_id;
		s->b = *buf;
		return 0;
	}
	if (!s || r->n_bufs >= TOGGLE_RECORD_MAX_BUFFERS)
		return tg_fail(a, TOGGLE_ELIMIT, "monitor buffers: at most %d per agent",
			       TOGGLE_RECORD_MAX_BUFFERS);
	s->graph = graph;
	s->hook = h + 1;
	s->capture_id = capture_id;
	s->b = *buf;
	r->n_bufs++;
	return 0;
}

int toggle_record_buffer(struct toggle_agent *a, CUgraph graph, struct toggle_hook hook,
			 const struct toggle_record_buffer *buf)
{
	if (!a)
		return TOGGLE_EINVAL;
	return rec_declare(a, graph, 0, hook, buf);
}

int toggle_record_buffer_in_capture(struct toggle_agent *a, CUstream stream, struct toggle_hook hook,
				    const struct toggle_record_buffer *buf)
{
	if (!a || !buf)
		return TOGGLE_EINVAL;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	CUgraph graph = NULL;
	CUresult cr = a->cu.stream_get_capture_info(stream, &st, &id, &graph, NULL, NULL, NULL);
	if (cr != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_ACTIVE || !graph)
		return tg_fail(a, TOGGLE_ECAPTURE,
			       "monitor buffer for hook %u:%u in a capture: stream %p is not capturing",
			       hook.type, hook.layer, (void *)stream);
	return rec_declare(a, graph, id, hook, buf);
}

/* ---- the ring ------------------------------------------------------------ */

static void rec_ring_close(struct toggle_agent *a, struct tg_rec *r);

/* The staged path's parts, what exists of them (after a ctx synchronize). */
static void rec_staged_close(struct toggle_agent *a, struct tg_rec *r)
{
	for (unsigned i = 0; i < TOGGLE_RECORD_MAX_PENDING; i++)
		if (r->gev[i])
			(void)tg_cu_event_destroy(&a->cu, r->gev[i]);
	memset(r->gev, 0, sizeof(r->gev));
	if (r->copy)
		(void)tg_cu_stream_destroy(&a->cu, r->copy);
	if (r->staging)
		(void)tg_cu_mem_free(&a->cu, r->staging);
	if (r->g_mod)
		(void)tg_cu_module_unload(&a->cu, r->g_mod);
	r->copy = NULL;
	r->staging = 0;
	r->g_mod = NULL;
	r->g_fn = NULL;
}

/*
 * The gather kernel, capacity bytes of staging, a stream and events, or
 * none of them: the per-record path then (never an error of the open).
 */
static void rec_staged_open(struct toggle_agent *a, struct tg_rec *r)
{
	const struct tg_cu *cu = &a->cu;
	const void *image = cu->sim ? tg_gather_sim_image() : tg_gather_fatbin();
	if (!image || !cu->launch_kernel_ex || !cu->module_get_function || !cu->stream_wait_event ||
	    (!cu->sim && (!cu->module_load_data || !cu->module_unload || !cu->mem_alloc ||
			  !cu->mem_free || !cu->stream_create || !cu->stream_destroy)))
		return;
	CUmodule mod = NULL;
	if (tg_cu_module_load(cu, &mod, image) != CUDA_SUCCESS)
		return;
	r->g_mod = mod;
	CUfunction fn = NULL;
	bool ok = cu->module_get_function(&fn, mod, TG_GATHER_KERNEL) == CUDA_SUCCESS &&
		  tg_cu_mem_alloc(cu, &r->staging, r->map.capacity) == CUDA_SUCCESS &&
		  tg_cu_stream_create(cu, &r->copy) == CUDA_SUCCESS;
	for (unsigned i = 0; ok && i < TOGGLE_RECORD_MAX_PENDING; i++)
		ok = tg_cu_event_create(cu, &r->gev[i]) == CUDA_SUCCESS;
	if (!ok) {
		rec_staged_close(a, r);
		return;
	}
	r->g_fn = fn;
}

int toggle_record_open(struct toggle_agent *a, uint64_t capacity, int *fd)
{
	if (!a)
		return TOGGLE_EINVAL;
	const char *missing = NULL;
	if (!tg_cu_record_ready(&a->cu, &missing))
		return tg_fail(a, TOGGLE_ENOTSUP, "recording needs the driver's %s", missing);
	struct tg_rec *r = rec_get(a);
	if (!r)
		return tg_fail(a, TOGGLE_ENOMEM, "recorder: out of memory");
	if (rec_ring(r))
		return tg_fail(a, TOGGLE_EINVAL, "the agent has a ring already");
	int rc = toggle_ring_create(capacity, &r->map, a->err, sizeof(a->err));
	if (rc)
		return rc;
	CUresult cr = tg_cu_mem_host_register(&a->cu, r->map.base, r->map.size);
	if (cr != CUDA_SUCCESS) {
		toggle_ring_unmap(&r->map);
		return tg_fail(a, TOGGLE_ECUDA, "cuMemHostRegister of the %zu-byte ring: %s",
			       r->map.size, tg_cu_errstr(&a->cu, cr));
	}
	r->host_registered = true;
	for (unsigned i = 0; i < TOGGLE_RECORD_MAX_PENDING; i++) {
		cr = tg_cu_event_create(&a->cu, &r->ev[i]);
		if (cr != CUDA_SUCCESS) {
			rec_ring_close(a, r);
			return tg_fail(a, TOGGLE_ECUDA, "cuEventCreate for the recorder: %s",
				       tg_cu_errstr(&a->cu, cr));
		}
	}
	rec_staged_open(a, r);
	toggle_ring_writer_init(&r->w, &r->map);
	/* Buffers declared before the ring: bigger ones are refused now. */
	for (size_t i = 0; i < REC_SLOTS; i++) {
		struct rec_buf *s = &r->bufs[i];
		if (s->hook && s->hook != UINT32_MAX &&
		    toggle_ring_record_length(s->b.bytes) > r->map.capacity) {
			s->hook = UINT32_MAX;
			r->n_bufs--;
		}
	}
	if (a->conn)
		tg_conn_ring(a->conn, r->map.fd, r->map.size);
	if (fd)
		*fd = r->map.fd;
	a->rec_on = r;
	return 0;
}

int toggle_record_set(struct toggle_agent *a, uint64_t session, const struct toggle_set *set)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (!rec_ring(a->rec))
		return tg_fail(a, TOGGLE_EINVAL, "no ring: call toggle_record_open first");
	if (a->shm.ctl)
		return tg_fail(a, TOGGLE_EBUSY, "the daemon owns this agent's recording requests");
	struct toggle_set all;
	if (!set) {
		memset(&all, 0xff, sizeof(all));
		set = &all;
	}
	toggle_ring_request_write(a->rec->map.req, session, set);
	return 0;
}

/* The request, when its seq moved.  Never waits: a daemon stuck mid-write
 * leaves the previous request in force until the next look. */
static void rec_request(struct tg_rec *r)
{
	uint64_t seq = toggle_ring_request_seq(r->map.req);
	if (__builtin_expect(seq == r->req_seq, 1))
		return;
	uint64_t session;
	struct toggle_set want;
	if (toggle_ring_request_read(r->map.req, &session, &want) != 0)
		return;
	r->req_seq = seq;
	r->session = session;
	r->want = want;
	__atomic_store_n(&r->map.prod->session, session, __ATOMIC_RELAXED);
}

static void rec_count(uint64_t *word, uint64_t n)
{
	__atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* ---- publishing ------------------------------------------------------------ */

static struct toggle_ring_record *rec_at(struct tg_rec *r, uint64_t pos)
{
	return (struct toggle_ring_record *)(void *)(r->map.data + (pos & (r->map.capacity - 1)));
}

/* Every DATA record of b becomes a PAD: its bytes are not known good. */
static void rec_void_batch(struct tg_rec *r, struct rec_batch *b)
{
	for (uint64_t pos = b->start; pos < b->end;) {
		struct toggle_ring_record *h = rec_at(r, pos);
		uint64_t len = h->length;
		/* The staged path's copies rewrite headers (with the gather's copies
		 * of them): a length that cannot be ends the walk, never loops. */
		if (len < TOGGLE_RING_ALIGN || len % TOGGLE_RING_ALIGN || len > b->end - pos)
			break;
		if (h->kind == TOGGLE_RING_REC_DATA)
			toggle_ring_writer_void(&r->w, pos);
		pos += len;
	}
	b->n_data = 0;
	b->bytes = 0;
}

/* 1 when b's copies are known complete (or failed: voided), 0 not yet. */
static int rec_batch_done(struct toggle_agent *a, struct tg_rec *r, uint64_t i)
{
	struct rec_batch *b = &r->batch[i % TOGGLE_RECORD_MAX_PENDING];
	if (b->idle)
		return 1;
	if (!b->has_event) {
		/* Covered by a later event on its stream, once that one completed: an
		 * event on that stream, or a staged batch's from that replay stream
		 * (it follows a wait for an event recorded there after b's work). */
		for (uint64_t j = i + 1; j < r->b_head; j++) {
			struct rec_batch *c = &r->batch[j % TOGGLE_RECORD_MAX_PENDING];
			if (c->has_event && (c->stream == b->stream || c->origin == b->stream))
				return a->cu.event_query(r->ev[j % TOGGLE_RECORD_MAX_PENDING]) ==
				       CUDA_SUCCESS;
		}
		return 0;
	}
	CUresult q = a->cu.event_query(r->ev[i % TOGGLE_RECORD_MAX_PENDING]);
	if (q == CUDA_ERROR_NOT_READY)
		return 0;
	if (q != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		rec_void_batch(r, b);
	}
	return 1;
}

/* The oldest batch, its device work done: published (as PADs when a step of it failed). */
static void rec_publish(struct tg_rec *r)
{
	struct rec_batch *b = &r->batch[r->b_tail % TOGGLE_RECORD_MAX_PENDING];
	if (b->failed)
		rec_void_batch(r, b);
	toggle_ring_writer_publish(&r->w, b->end, b->n_data);
	r->bytes += b->bytes;
	r->b_tail++;
}

static void rec_poll(struct toggle_agent *a, struct tg_rec *r)
{
	while (r->b_tail != r->b_head && rec_batch_done(a, r, r->b_tail))
		rec_publish(r);
}

/* The request re-read, what completed published; the launches still in flight. */
static int rec_look(struct toggle_agent *a, struct tg_rec *r)
{
	rec_request(r);
	rec_poll(a, r);
	return (int)(r->b_head - r->b_tail);
}

int toggle_record_poll(struct toggle_agent *a)
{
	if (!a || !rec_ring(a->rec))
		return 0;
	return rec_look(a, a->rec);
}

/* No public entry point is called from inside the library: the step's
 * look goes through the same static core as toggle_record_poll. */
void tg_record_step(struct toggle_agent *a)
{
	if (rec_ring(a->rec))
		(void)rec_look(a, a->rec);
}

int toggle_record_flush(struct toggle_agent *a)
{
	if (!a || !rec_ring(a->rec))
		return 0;
	if (a->rec->b_head != a->rec->b_tail) {
		CUresult cr = tg_cu_ctx_synchronize(&a->cu);
		if (cr != CUDA_SUCCESS)
			a->anomalies.driver_errors++;
	}
	rec_poll(a, a->rec);
	/* What is still not done (an eventless batch with no later event):
	 * the copies ran, the context being synchronized. */
	while (a->rec->b_tail != a->rec->b_head)
		rec_publish(a->rec);
	return 0;
}

/* ---- recording ------------------------------------------------------------- */

/* A record counted as dropped without being laid out (too many in flight). */
static void rec_drop(struct tg_rec *r, uint64_t bytes)
{
	rec_count(&r->map.prod->dropped, 1);
	rec_count(&r->map.prod->dropped_bytes, toggle_ring_record_length(bytes));
}

/* Enqueue the gather of the records collected in r->args, on b's replay stream. */
static void rec_gather_launch(struct toggle_agent *a, struct tg_rec *r, struct rec_batch *b)
{
	struct tg_gather_args *g = &r->args;
	if (!g->n)
		return;
	unsigned long long most = 0;
	for (unsigned long long i = 0; i < g->n; i++)
		if (g->rec[i].w[tg_gather_slot(TG_GATHER_PAYLOAD_WORD)] > most)
			most = g->rec[i].w[tg_gather_slot(TG_GATHER_PAYLOAD_WORD)];
	unsigned long long blocks = (most / 16 + TG_GATHER_THREADS - 1) / TG_GATHER_THREADS;
	blocks = blocks < 1 ? 1 : blocks > TG_GATHER_MAX_BLOCKS ? TG_GATHER_MAX_BLOCKS : blocks;
	CUlaunchConfig cfg = {
		.gridDimX = (unsigned)blocks, .gridDimY = (unsigned)g->n, .gridDimZ = 1,
		.blockDimX = TG_GATHER_THREADS, .blockDimY = 1, .blockDimZ = 1,
		.hStream = b->origin,
	};
	void *params[1] = {g};
	g->staging = r->staging;
	CUresult cr = b->failed ? CUDA_ERROR_NOT_READY
				: a->cu.launch_kernel_ex(&cfg, r->g_fn, params, NULL);
	if (cr == CUDA_SUCCESS) {
		b->launched = true;
	} else if (!b->failed) {
		a->anomalies.driver_errors++;
		b->failed = true;
	}
	g->n = 0;
}

/* A staged record: its header and source for the gather, its ring range for the host copy. */
static void rec_stage(struct toggle_agent *a, struct tg_rec *r, struct rec_batch *b,
		      const struct toggle_ring_record *h, uint64_t pos, CUdeviceptr src)
{
	uint64_t off = pos & (r->map.capacity - 1);
	struct tg_gather_args *g = &r->args;
	uint64_t word[TG_GATHER_HDR_WORDS];
	memcpy(word, h, sizeof(word));
	/* A shared word that differs (it cannot within one launch): a launch of its own. */
	for (unsigned t = 0; g->n && t < TG_GATHER_HDR_WORDS; t++)
		if ((TG_GATHER_SHARED >> t & 1u) && word[t] != g->shared[t]) {
			rec_gather_launch(a, r, b);
			break;
		}
	if (!g->n)
		memcpy(g->shared, word, sizeof(word));
	struct tg_gather_rec *d = &g->rec[g->n];
	d->src = src;
	d->off = off;
	for (unsigned t = 0; t < TG_GATHER_HDR_WORDS; t++)
		if (!(TG_GATHER_SHARED >> t & 1u))
			d->w[tg_gather_slot(t)] = word[t];
	if (++g->n == TG_GATHER_MAX)
		rec_gather_launch(a, r, b);
	/* A new range where a pad came between, or at the ring's start. */
	if (b->n_runs && b->run[b->n_runs - 1][1] == pos && off != 0) {
		b->run[b->n_runs - 1][1] = pos + h->length;
	} else if (b->n_runs < REC_RUNS) {
		b->run[b->n_runs][0] = pos;
		b->run[b->n_runs][1] = pos + h->length;
		b->n_runs++;
	} else {
		b->failed = true; /* cannot happen: a batch is shorter than the ring */
	}
}

/* Lay out and copy one record into batch b (a full ring drops it, counted). */
static void rec_one(struct toggle_agent *a, struct tg_rec *r, struct rec_batch *b, uint32_t hook,
		    const struct toggle_record_buffer *buf, CUgraph graph, uint64_t launch,
		    unsigned flags, CUstream stream)
{
	uint64_t pos;
	struct toggle_ring_record *h = toggle_ring_writer_reserve(&r->w, buf->bytes, &pos);
	if (!h)
		return; /* ring full: counted by the writer */
	h->session = r->session;
	h->step = a->step;
	h->graph = (uint64_t)(uintptr_t)graph;
	h->launch = launch;
	h->hook_type = (uint16_t)(hook / TOGGLE_MAX_LAYERS);
	h->layer = (uint16_t)(hook % TOGGLE_MAX_LAYERS);
	h->dtype = (uint8_t)buf->dtype;
	h->ndim = (uint8_t)buf->ndim;
	h->flags = (uint16_t)flags;
	for (unsigned i = 0; i < TOGGLE_RING_MAX_DIMS; i++)
		h->shape[i] = buf->shape[i];
	toggle_ring_record_seal(h);
	if (b->staged) {
		b->end = r->w.reserve;
		rec_stage(a, r, b, h, pos, buf->ptr); /* bytes: the header's payload_len */
		b->n_data++;
		b->bytes += buf->bytes;
		return;
	}
	CUresult cr = a->cu.memcpy_dtoh_async(h + 1, buf->ptr, buf->bytes, stream);
	b->end = r->w.reserve;
	if (cr != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		toggle_ring_writer_void(&r->w, pos);
		return;
	}
	b->n_data++;
	b->bytes += buf->bytes;
}

/* Open a batch on stream (NULL: too many in flight, every record dropped);
 * staged when asked and the staged path exists. */
static struct rec_batch *rec_batch_open(struct toggle_agent *a, struct tg_rec *r, CUstream stream,
					bool staged)
{
	rec_poll(a, r);
	if (r->b_head - r->b_tail >= TOGGLE_RECORD_MAX_PENDING)
		return NULL;
	struct rec_batch *b = &r->batch[r->b_head % TOGGLE_RECORD_MAX_PENDING];
	memset(b, 0, sizeof(*b));
	b->start = b->end = r->w.reserve;
	b->origin = b->stream = stream;
	b->staged = staged && r->g_fn;
	r->args.n = 0;
	return b;
}

/*
 * A staged batch's copies: the last gather, an event on the replay's
 * stream, the recorder's stream waiting on it, one host copy per range.
 * Any step failing fails the batch (voided when published); its event then
 * goes where it covers what was enqueued: the recorder's stream once that
 * waits, else the replay's.  Nothing enqueued at all: voided now, done.
 */
static void rec_staged_copies(struct toggle_agent *a, struct tg_rec *r, struct rec_batch *b,
			      unsigned slot)
{
	rec_gather_launch(a, r, b);
	if (!b->launched) {
		rec_void_batch(r, b);
		b->idle = true;
		return;
	}
	if (b->failed)
		return;
	CUresult cr = a->cu.event_record(r->gev[slot], b->origin);
	if (cr == CUDA_SUCCESS)
		cr = a->cu.stream_wait_event(r->copy, r->gev[slot], 0);
	if (cr == CUDA_SUCCESS) {
		b->stream = r->copy;
		uint64_t mask = r->map.capacity - 1;
		for (unsigned i = 0; cr == CUDA_SUCCESS && i < b->n_runs; i++) {
			uint64_t off = b->run[i][0] & mask, len = b->run[i][1] - b->run[i][0];
			cr = a->cu.memcpy_dtoh_async(r->map.data + off, r->staging + off, len, r->copy);
		}
	}
	if (cr != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		b->failed = true;
	}
}

/* Close it: the event after its copies, or nothing when it holds nothing. */
static void rec_batch_close(struct toggle_agent *a, struct tg_rec *r, struct rec_batch *b)
{
	if (b->end == b->start)
		return; /* every record dropped: no space was taken */
	unsigned slot = (unsigned)(r->b_head % TOGGLE_RECORD_MAX_PENDING);
	if (b->staged) {
		rec_staged_copies(a, r, b, slot);
		if (b->idle) {
			r->b_head++;
			return;
		}
	}
	CUresult cr = a->cu.event_record(r->ev[slot], b->stream);
	b->has_event = cr == CUDA_SUCCESS;
	if (!b->has_event)
		a->anomalies.driver_errors++;
	r->b_head++;
}

/* The hooks to record after a replay of g: the step's, g's, the request's. */
static void rec_graph(struct toggle_agent *a, struct tg_rec *r, struct tg_graph *g, CUstream stream)
{
	struct rec_batch *b = NULL;
	bool any = false;
	for (uint32_t w = 0; w < TOGGLE_MAX_HOOKS / 64; w++) {
		uint64_t bits = a->current.bits[w] & g->covered.bits[w] & r->want.bits[w];
		while (bits) {
			uint32_t hook = w * 64 + (uint32_t)__builtin_ctzll(bits);
			bits &= bits - 1;
			const struct toggle_record_buffer *buf = rec_lookup(r, g, hook);
			if (!buf)
				continue;
			if (!any) {
				any = true;
				b = rec_batch_open(a, r, stream, true);
			}
			if (!b)
				rec_drop(r, buf->bytes);
			else
				rec_one(a, r, b, hook, buf, g->graph, g->replays, 0, stream);
		}
	}
	if (b)
		rec_batch_close(a, r, b);
}

void tg_record_launch(struct toggle_agent *a, struct tg_graph *g, CUstream stream)
{
	struct tg_rec *r = a->rec;
	if (!rec_ring(r))
		return;
	rec_request(r);
	if (__builtin_expect(r->session == 0, 1)) {
		if (r->b_head != r->b_tail)
			rec_poll(a, r);
		return;
	}
	rec_graph(a, r, g, stream);
}

int toggle_record_after(struct toggle_agent *a, CUgraph graph, CUstream stream)
{
	if (!a)
		return TOGGLE_EINVAL;
	struct tg_graph *g = tg_graph_find(a, graph);
	if (!g || !g->bound || g->stale || g->late || !g->n_nodes)
		return 0; /* unrelated, or not launched through the guard: nothing ran of ours */
	tg_record_launch(a, g, stream);
	return 0;
}

int toggle_record_eager(struct toggle_agent *a, struct toggle_hook hook,
			const struct toggle_record_buffer *buf, CUstream stream)
{
	if (!a || !buf)
		return TOGGLE_EINVAL;
	struct tg_rec *r = a->rec;
	if (!rec_ring(r))
		return 0;
	if (hook.type >= a->catalog.n_types || hook.layer >= a->catalog.n_layers)
		return tg_fail(a, TOGGLE_ERANGE, "eager record of hook %u:%u: outside the catalog",
			       hook.type, hook.layer);
	int rc = rec_check_buffer(a, buf);
	if (rc)
		return rc;
	rec_request(r);
	uint32_t h = tg_hook_index(hook);
	if (r->session == 0 || !tg_set_has(&a->current, h) || !tg_set_has(&r->want, h))
		return 0;
	struct rec_batch *b = rec_batch_open(a, r, stream, false); /* one record: no gather */
	if (!b) {
		rec_drop(r, buf->bytes);
		return 0;
	}
	rec_one(a, r, b, h, buf, NULL, ++r->eager_runs, TOGGLE_RING_REC_EAGER, stream);
	rec_batch_close(a, r, b);
	return 0;
}

void toggle_record_stats_get(const struct toggle_agent *a, struct toggle_record_stats *out)
{
	memset(out, 0, sizeof(*out));
	const struct tg_rec *r = a ? a->rec : NULL;
	if (!rec_ring(r))
		return;
	const struct toggle_ring_producer *p = r->map.prod;
	out->records = __atomic_load_n(&p->records, __ATOMIC_RELAXED);
	out->dropped = __atomic_load_n(&p->dropped, __ATOMIC_RELAXED);
	out->errors = __atomic_load_n(&p->errors, __ATOMIC_RELAXED);
	out->bytes = r->bytes;
	out->pending = r->b_head - r->b_tail;
	out->session = r->session;
	out->capacity = r->map.capacity;
	out->staged = r->g_fn != NULL;
}

#define REC_TYPE(T) {#T, NULL, sizeof(struct T), 0}
#define REC_FIELD(T, f) {#T, #f, sizeof(((struct T *)0)->f), offsetof(struct T, f)}

static const struct toggle_layout_entry rec_layout[] = {
	REC_TYPE(toggle_record_buffer),
	REC_FIELD(toggle_record_buffer, ptr),
	REC_FIELD(toggle_record_buffer, bytes),
	REC_FIELD(toggle_record_buffer, dtype),
	REC_FIELD(toggle_record_buffer, ndim),
	REC_FIELD(toggle_record_buffer, shape),
	REC_TYPE(toggle_record_stats),
	REC_FIELD(toggle_record_stats, records),
	REC_FIELD(toggle_record_stats, bytes),
	REC_FIELD(toggle_record_stats, dropped),
	REC_FIELD(toggle_record_stats, errors),
	REC_FIELD(toggle_record_stats, pending),
	REC_FIELD(toggle_record_stats, session),
	REC_FIELD(toggle_record_stats, capacity),
	REC_FIELD(toggle_record_stats, staged),
};

const struct toggle_layout_entry *toggle_record_layout(size_t *count)
{
	if (count)
		*count = sizeof(rec_layout) / sizeof(rec_layout[0]);
	return rec_layout;
}

/* The ring's part of the recorder; the declared buffers stay. */
static void rec_ring_close(struct toggle_agent *a, struct tg_rec *r)
{
	if (!rec_ring(r))
		return;
	/* The DMA must be done with the ring before it is unregistered. */
	if (r->b_head != r->b_tail)
		(void)tg_cu_ctx_synchronize(&a->cu);
	for (unsigned i = 0; i < TOGGLE_RECORD_MAX_PENDING; i++)
		if (r->ev[i])
			(void)tg_cu_event_destroy(&a->cu, r->ev[i]);
	memset(r->ev, 0, sizeof(r->ev));
	rec_staged_close(a, r);
	if (r->host_registered)
		(void)tg_cu_mem_host_unregister(&a->cu, r->map.base);
	r->host_registered = false;
	toggle_ring_unmap(&r->map);
	r->b_head = r->b_tail = 0;
	a->rec_on = NULL;
}

void tg_record_close(struct toggle_agent *a)
{
	struct tg_rec *r = a->rec;
	if (!r)
		return;
	rec_ring_close(a, r);
	free(r);
	a->rec = NULL;
}
