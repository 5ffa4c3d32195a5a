/*
 * check_record.c - the recorder (toggle_record.h) on the simulator: every
 * published record equals what the producer of its step and hook wrote
 * into the monitor buffer (the simulator's memory, stamped by the kernels
 * themselves), no record for a hook its step did not enable, a full ring
 * drops and counts and publishes nothing wrong, a step's records are
 * published only once the copies' event has completed, and failed copies
 * or events leave no record behind.
 *
 * Ground truth is what ran: a head kernel in each graph counts the runs
 * (run k is the k-th launch submitted, one stream), and each producer
 * writes a pattern of (run, hook) into its buffer when it runs.
 */
#include <stddef.h>
#include <string.h>

#include "fixture_record_sim.h"
#include "testutil.h"
#include "toggle.h"
#include "toggle_record.h"
#include "toggle_ring.h"
#include "toggle_sim.h"

#define NT 2
#define NL 4
#define NH (NT * NL)
#define NG 2
#define ELEMS 16 /* floats per monitor buffer */
#define MAX_RUNS 4096

static const char *const type_names[NT] = {"resid_post", "attn_out"};

struct submitted {
	int g;
	int64_t step;
	struct toggle_set set; /* the step's set */
};

struct fx {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	CUdeviceptr buf[NH];     /* monitor buffers, one per hook, shared by the graphs */
	uint32_t runs;           /* graph runs so far (head kernel) */
	struct prod prod[NG][NH];
	CUgraph graph[NG];
	CUgraphExec exec[NG];
	struct toggle_set covered[NG];
	struct submitted sub[MAX_RUNS];
	uint32_t n_sub;
	int64_t step;
	struct toggle_set set;   /* this step's (toggle_step_begin's) */
	/* the consumer */
	struct toggle_ring_map m;
	struct toggle_ring_reader rd;
	uint64_t got;            /* records read and checked */
};

static struct toggle_hook hook_of(uint32_t h)
{
	return (struct toggle_hook){(uint16_t)(h / TOGGLE_MAX_LAYERS), (uint16_t)(h % TOGGLE_MAX_LAYERS)};
}

static uint32_t hook_idx(uint16_t t, uint16_t l)
{
	return (uint32_t)t * TOGGLE_MAX_LAYERS + l;
}

static struct toggle_record_buffer buf_desc(struct fx *f, uint32_t i)
{
	return (struct toggle_record_buffer){.ptr = f->buf[i], .bytes = ELEMS * 4,
					     .dtype = TOGGLE_DTYPE_F32, .ndim = 2,
					     .shape = {4, ELEMS / 4}};
}

/* Graph g: the head kernel, then per hook it covers a compute and a producer.
 * Graph 0 covers every hook, graph 1 the hooks of layer 0 and 1. */
static void fx_capture(struct fx *f, int g)
{
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, head_fn, &f->runs), CUDA_SUCCESS);
	toggle_set_clear(&f->covered[g]);
	for (uint16_t t = 0; t < NT; t++)
		for (uint16_t l = 0; l < NL; l++) {
			if (g == 1 && l > 1)
				continue;
			struct prod *p = &f->prod[g][t * NL + l];
			*p = (struct prod){.runs = &f->runs, .buf = f->buf, .elems = ELEMS,
					   .hook = (uint32_t)(t * NL + l)};
			ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, producer_fn, p), CUDA_SUCCESS);
			ck_assert_int_eq(toggle_record_producer(f->agent, f->stream,
								(struct toggle_hook){t, l}), 0);
			ck_assert_int_eq(toggle_set_add(&f->covered[g], (struct toggle_hook){t, l}), 0);
		}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph[g]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[g], f->graph[g]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[g], f->exec[g]), 0);
}

/* The producers' buffers are indexed t * NL + l; the agent's hooks by
 * type * TOGGLE_MAX_LAYERS + layer: map a record's hook back. */
static uint32_t buf_of(uint16_t t, uint16_t l)
{
	return (uint32_t)t * NL + l;
}

/* staged false: the staging allocation refused, the recorder copies record by record. */
static void fx_open_path(struct fx *f, uint64_t capacity, bool declare, bool staged)
{
	memset(f, 0, sizeof(*f));
	f->m.fd = -1;
	record_sim_open("rec-agent",
			(struct toggle_catalog){.type_names = type_names, .n_types = NT, .n_layers = NL},
			&f->sim, &f->stream, &f->agent);
	for (uint32_t i = 0; i < NH; i++)
		ck_assert_int_eq(toggle_sim_mem_alloc(f->sim, &f->buf[i], ELEMS * 4), CUDA_SUCCESS);
	for (int g = 0; g < NG; g++)
		fx_capture(f, g);
	if (declare)
		for (uint16_t t = 0; t < NT; t++)
			for (uint16_t l = 0; l < NL; l++) {
				struct toggle_record_buffer b = buf_desc(f, buf_of(t, l));
				ck_assert_int_eq(toggle_record_buffer(f->agent, NULL,
								      (struct toggle_hook){t, l}, &b), 0);
			}
	if (capacity) {
		int fd = -1;
		if (!staged)
			toggle_sim_fail(f->sim, TOGGLE_SIM_OP_MEM_ALLOC, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
		ck_assert_int_eq(toggle_record_open(f->agent, capacity, &fd), 0);
		struct toggle_record_stats st;
		toggle_record_stats_get(f->agent, &st);
		ck_assert_uint_eq(st.staged, staged);
		char err[256];
		ck_assert_int_eq(toggle_ring_attach(fd, 0, &f->m, err, sizeof(err)), 0);
		toggle_ring_reader_open(&f->rd, &f->m);
	}
}

static void fx_open(struct fx *f, uint64_t capacity, bool declare)
{
	fx_open_path(f, capacity, declare, true);
}

static void fx_close(struct fx *f)
{
	toggle_agent_close(f->agent);
	ck_assert_uint_eq(toggle_sim_host_registered(f->sim), 0); /* the ring was unregistered */
	toggle_ring_unmap(&f->m);
	toggle_sim_destroy(f->sim);
}

static void fx_step(struct fx *f, const struct toggle_set *set)
{
	ck_assert_int_eq(toggle_set_enabled(f->agent, set), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, ++f->step, &f->set), 0);
	ck_assert(toggle_set_equal(&f->set, set));
}

static void fx_launch(struct fx *f, int g)
{
	ck_assert_uint_lt(f->n_sub, MAX_RUNS);
	f->sub[f->n_sub++] = (struct submitted){.g = g, .step = f->step, .set = f->set};
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[g], f->exec[g], f->stream), 0);
}

/* Hooks a launch of g records at set under request want. */
static unsigned expected(const struct fx *f, int g, const struct toggle_set *set,
			 const struct toggle_set *want)
{
	unsigned n = 0;
	for (uint16_t t = 0; t < NT; t++)
		for (uint16_t l = 0; l < NL; l++) {
			struct toggle_hook h = {t, l};
			n += toggle_set_contains(set, h) && toggle_set_contains(&f->covered[g], h) &&
			     (!want || toggle_set_contains(want, h));
		}
	return n;
}

/*
 * Read what is published and check every record against what ran: its
 * payload names the run that wrote it; that run's launch has this record's
 * step and graph, its step enabled the hook and the graph covers it.
 */
static void fx_drain(struct fx *f, const struct toggle_set *want)
{
	struct toggle_ring_record r;
	const void *pl;
	int rc;
	while ((rc = toggle_ring_reader_next(&f->rd, &r, &pl)) == 1) {
		ck_assert_uint_eq(r.flags, 0);
		ck_assert_uint_eq(r.dtype, TOGGLE_DTYPE_F32);
		ck_assert_uint_eq(r.ndim, 2);
		ck_assert_uint_eq(r.shape[0] * r.shape[1], ELEMS);
		ck_assert_uint_eq(r.payload_len, ELEMS * 4);
		ck_assert(r.hook_type < NT && r.layer < NL);
		const float *p = pl;
		uint32_t run = (uint32_t)(p[0] / 1000.0f);
		ck_assert_msg(run < f->n_sub, "record names run %u of %u", run, f->n_sub);
		const struct submitted *s = &f->sub[run];
		struct toggle_hook h = {r.hook_type, r.layer};
		ck_assert_int_eq(r.step, s->step);
		ck_assert_uint_eq(r.graph, (uint64_t)(uintptr_t)f->graph[s->g]);
		ck_assert_msg(toggle_set_contains(&s->set, h), "hook %u:%u recorded at step %lld, "
			      "which did not enable it", h.type, h.layer, (long long)r.step);
		ck_assert(toggle_set_contains(&f->covered[s->g], h));
		ck_assert(!want || toggle_set_contains(want, h));
		for (unsigned i = 0; i < ELEMS; i++)
			ck_assert_msg(p[i] == pattern(run, buf_of(h.type, h.layer), i),
				      "record step %lld hook %u:%u word %u: %g, the buffer had %g",
				      (long long)r.step, h.type, h.layer, i, p[i],
				      pattern(run, buf_of(h.type, h.layer), i));
		toggle_ring_reader_release(&f->rd, &r);
		f->got++;
	}
	ck_assert_msg(rc == 0, "ring fault: %s", toggle_ring_fault_str(f->rd.fault));
}

static struct toggle_set rand_set(uint64_t *rng)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	uint64_t bits = tu_rng_next(rng);
	for (uint16_t t = 0; t < NT; t++)
		for (uint16_t l = 0; l < NL; l++)
			if ((bits >> (t * NL + l)) & 1)
				ck_assert_int_eq(toggle_set_add(&s, (struct toggle_hook){t, l}), 0);
	return s;
}

/* Random sets, two graphs, deferred execution in a seeded order: every
 * record exact, none missing (the ring is large enough), none extra; on
 * the staged path and record by record. */
START_TEST(test_records_match_buffers)
{
	struct fx f;
	fx_open_path(&f, 1u << 20, true, _i % 3 != 2); /* every third: record by record */
	uint64_t rng = 0x5eed + (uint64_t)_i;
	toggle_sim_set_deferred(f.sim, true, rng);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	uint64_t want = 0;
	for (int s = 0; s < 300; s++) {
		struct toggle_set set = rand_set(&rng);
		fx_step(&f, &set);
		for (int k = 0; k < 1 + (int)(tu_rng_next(&rng) % 3); k++) {
			int g = (int)(tu_rng_next(&rng) % NG);
			fx_launch(&f, g);
			want += expected(&f, g, &set, NULL);
		}
		if (tu_rng_next(&rng) % 4 == 0)
			toggle_sim_synchronize(f.sim); /* the GPU catches up now and then */
		(void)toggle_record_poll(f.agent);
		fx_drain(&f, NULL);
	}
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	struct toggle_record_stats st;
	toggle_record_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.dropped, 0);
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(st.records, want);
	ck_assert_uint_eq(f.got, want);
	ck_assert_uint_eq(st.bytes, want * ELEMS * 4);
	ck_assert_uint_gt(want, 300);
	fx_close(&f);
}
END_TEST

/* Only the request's hooks, only while a session is on. */
START_TEST(test_request_selects)
{
	struct fx f;
	fx_open(&f, 1u << 20, true);
	struct toggle_set all, want;
	toggle_set_clear(&all);
	for (uint32_t h = 0; h < NH; h++)
		toggle_set_add(&all, hook_of(hook_idx((uint16_t)(h / NL), (uint16_t)(h % NL))));
	fx_step(&f, &all);
	fx_launch(&f, 0); /* session 0: nothing */
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 0);
	toggle_set_clear(&want);
	toggle_set_add(&want, (struct toggle_hook){1, 2});
	toggle_set_add(&want, (struct toggle_hook){0, 0});
	ck_assert_int_eq(toggle_record_set(f.agent, 7, &want), 0);
	fx_step(&f, &all);
	fx_launch(&f, 0);
	fx_launch(&f, 1); /* covers 0:0 but not 1:2 */
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	struct toggle_ring_record r;
	const void *pl;
	fx_drain(&f, &want);
	ck_assert_uint_eq(f.got, 3);
	ck_assert_uint_eq(f.m.prod->session, 7);
	ck_assert_int_eq(toggle_record_set(f.agent, 0, NULL), 0);
	fx_step(&f, &all);
	fx_launch(&f, 0);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	ck_assert_int_eq(toggle_ring_reader_next(&f.rd, &r, &pl), 0);
	fx_close(&f);
}
END_TEST

/* Nothing is published before the copies' event completed, and then all. */
START_TEST(test_published_after_event)
{
	struct fx f;
	fx_open(&f, 1u << 20, true);
	toggle_sim_set_deferred(f.sim, true, 3);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set set;
	toggle_set_clear(&set);
	toggle_set_add(&set, (struct toggle_hook){0, 1});
	toggle_set_add(&set, (struct toggle_hook){1, 3});
	fx_step(&f, &set);
	fx_launch(&f, 0);
	fx_step(&f, &set);
	fx_launch(&f, 0);
	/* The GPU has not run: every poll and step leaves head where it was. */
	ck_assert_int_eq(toggle_record_poll(f.agent), 2);
	ck_assert_uint_eq(__atomic_load_n(&f.m.prod->head, __ATOMIC_ACQUIRE), 0);
	fx_step(&f, &set);
	ck_assert_uint_eq(f.runs, 0);
	ck_assert_uint_eq(__atomic_load_n(&f.m.prod->head, __ATOMIC_ACQUIRE), 0);
	/* It runs: the next look publishes both launches' records. */
	toggle_sim_synchronize(f.sim);
	ck_assert_uint_eq(f.runs, 2);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 4);
	fx_close(&f);
}
END_TEST

/* A ring that fills while nobody reads: drops counted, what was published
 * exact, records + drops = what was asked for; reading frees room again. */
START_TEST(test_full_ring_drops)
{
	struct fx f;
	fx_open(&f, TOGGLE_RING_MIN_CAPACITY, true);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set all;
	toggle_set_clear(&all);
	for (uint16_t t = 0; t < NT; t++)
		for (uint16_t l = 0; l < NL; l++)
			toggle_set_add(&all, (struct toggle_hook){t, l});
	/* 8 records of 256 B (128 + 64, aligned) a launch: 64 KiB holds 256; 100 launches ask 800. */
	for (int s = 0; s < 100; s++) {
		fx_step(&f, &all);
		fx_launch(&f, 0);
	}
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	struct toggle_record_stats st;
	toggle_record_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.records + st.dropped, 800);
	ck_assert_uint_gt(st.dropped, 400);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, st.records);
	/* Room again: the next launch is recorded whole. */
	fx_step(&f, &all);
	fx_launch(&f, 0);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, st.records + 8);
	fx_close(&f);
}
END_TEST

/* Too many launches in flight (the GPU far behind): dropped, never waited for. */
START_TEST(test_pending_limit)
{
	struct fx f;
	fx_open(&f, 1u << 22, true);
	toggle_sim_set_deferred(f.sim, true, 9);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set one;
	toggle_set_clear(&one);
	toggle_set_add(&one, (struct toggle_hook){0, 0});
	for (int s = 0; s < TOGGLE_RECORD_MAX_PENDING + 10; s++) {
		fx_step(&f, &one);
		fx_launch(&f, 0);
	}
	ck_assert_uint_eq(f.runs, 0); /* nothing ran: nothing waited */
	struct toggle_record_stats st;
	toggle_record_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.pending, TOGGLE_RECORD_MAX_PENDING);
	ck_assert_uint_eq(st.dropped, 10);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, TOGGLE_RECORD_MAX_PENDING);
	fx_close(&f);
}
END_TEST

/* A refused copy, an event query error, a refused event record: the
 * records concerned never reach the consumer as data; the rest do.  The
 * per-record path (the staged path's failures: check_record_staged.c). */
START_TEST(test_driver_failures)
{
	struct fx f;
	fx_open_path(&f, 1u << 20, true, false);
	toggle_sim_set_deferred(f.sim, true, 5);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set two;
	toggle_set_clear(&two);
	toggle_set_add(&two, (struct toggle_hook){0, 0});
	toggle_set_add(&two, (struct toggle_hook){1, 1});
	/* The second copy of the first launch is refused. */
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC, 1, 1, CUDA_ERROR_INVALID_VALUE);
	fx_step(&f, &two);
	fx_launch(&f, 0);
	toggle_sim_synchronize(f.sim);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 1);
	ck_assert_uint_eq(f.m.prod->errors, 1);
	/* The event's query fails: both records of the launch voided. */
	fx_step(&f, &two);
	fx_launch(&f, 0);
	toggle_sim_synchronize(f.sim);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_EVENT_QUERY, 0, 1, CUDA_ERROR_LAUNCH_FAILED);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 1);
	ck_assert_uint_eq(f.m.prod->errors, 3);
	/* The event record fails: that launch waits for the next one's event. */
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_EVENT_RECORD, 0, 1, CUDA_ERROR_INVALID_VALUE);
	fx_step(&f, &two);
	fx_launch(&f, 0);
	toggle_sim_synchronize(f.sim);
	ck_assert_int_eq(toggle_record_poll(f.agent), 1);
	fx_step(&f, &two);
	fx_launch(&f, 0);
	ck_assert_int_eq(toggle_record_poll(f.agent), 2);
	toggle_sim_synchronize(f.sim);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 5);
	fx_close(&f);
}
END_TEST

/* torch's way: prepare, its own launch, then toggle_record_after. */
START_TEST(test_record_after_prepare)
{
	struct fx f;
	fx_open(&f, 1u << 20, true);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set set = {{0}};
	toggle_set_add(&set, (struct toggle_hook){0, 1});
	toggle_set_add(&set, (struct toggle_hook){1, 0});
	fx_step(&f, &set);
	ck_assert_int_eq(toggle_graph_prepare(f.agent, f.graph[1], f.exec[1], f.stream), 0);
	f.sub[f.n_sub++] = (struct submitted){.g = 1, .step = f.step, .set = f.set};
	ck_assert_int_eq(toggle_sim_graph_launch(f.exec[1], f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_after(f.agent, f.graph[1], f.stream), 0);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 2);
	/* An unrelated graph: nothing. */
	ck_assert_int_eq(toggle_record_after(f.agent, (CUgraph)(uintptr_t)0x1234, f.stream), 0);
	fx_close(&f);
}
END_TEST

/* The registered op's eager run: recorded when its step enables the hook. */
START_TEST(test_eager)
{
	struct fx f;
	fx_open(&f, 1u << 20, true);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set set = {{0}};
	toggle_set_add(&set, (struct toggle_hook){1, 2});
	fx_step(&f, &set);
	float *b = (float *)(uintptr_t)f.buf[buf_of(1, 2)];
	for (unsigned i = 0; i < ELEMS; i++)
		b[i] = (float)i * 0.5f;
	struct toggle_record_buffer d = buf_desc(&f, buf_of(1, 2));
	ck_assert_int_eq(toggle_record_eager(f.agent, (struct toggle_hook){1, 2}, &d, f.stream), 0);
	ck_assert_int_eq(toggle_record_eager(f.agent, (struct toggle_hook){0, 2}, &d, f.stream), 0);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	struct toggle_ring_record r;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(&f.rd, &r, &pl), 1);
	ck_assert_uint_eq(r.flags, TOGGLE_RING_REC_EAGER);
	ck_assert_uint_eq(r.graph, 0);
	ck_assert_uint_eq(r.hook_type, 1);
	ck_assert_uint_eq(r.layer, 2);
	ck_assert_int_eq(r.step, f.step);
	ck_assert(memcmp(pl, b, ELEMS * 4) == 0);
	toggle_ring_reader_release(&f.rd, &r);
	ck_assert_int_eq(toggle_ring_reader_next(&f.rd, &r, &pl), 0); /* 0:2 not enabled */
	fx_close(&f);
}
END_TEST

/* Declarations are checked; a graph's own buffer wins over the shared one. */
START_TEST(test_buffers)
{
	struct fx f;
	fx_open(&f, 0, false);
	struct toggle_hook h = {0, 1};
	struct toggle_record_buffer b = buf_desc(&f, 0);
	b.dtype = 99;
	ck_assert_int_eq(toggle_record_buffer(f.agent, NULL, h, &b), TOGGLE_EINVAL);
	b = buf_desc(&f, 0);
	b.shape[1] = 5;
	ck_assert_int_eq(toggle_record_buffer(f.agent, NULL, h, &b), TOGGLE_EINVAL);
	b = buf_desc(&f, 0);
	b.shape[3] = 2;
	ck_assert_int_eq(toggle_record_buffer(f.agent, NULL, h, &b), TOGGLE_EINVAL);
	b = buf_desc(&f, 0);
	ck_assert_int_eq(toggle_record_buffer(f.agent, NULL, (struct toggle_hook){NT, 0}, &b),
			 TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_record_open(f.agent, 1000, NULL), TOGGLE_EINVAL);
	/* Shared buffer of 0:1 is buffer 5 (wrong on purpose); graph 1 has its own, 1. */
	struct toggle_record_buffer shared = buf_desc(&f, 5), own = buf_desc(&f, buf_of(0, 1));
	ck_assert_int_eq(toggle_record_buffer(f.agent, NULL, h, &shared), 0);
	ck_assert_int_eq(toggle_record_buffer(f.agent, f.graph[1], h, &own), 0);
	int fd;
	ck_assert_int_eq(toggle_record_open(f.agent, 1u << 16, &fd), 0);
	ck_assert_int_eq(toggle_record_open(f.agent, 1u << 16, &fd), TOGGLE_EINVAL);
	char err[256];
	ck_assert_int_eq(toggle_ring_attach(fd, 0, &f.m, err, sizeof(err)), 0);
	toggle_ring_reader_open(&f.rd, &f.m);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set set = {{0}};
	toggle_set_add(&set, h);
	fx_step(&f, &set);
	fx_launch(&f, 1);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL); /* checks the payload is 0:1's own buffer */
	ck_assert_uint_eq(f.got, 1);
	/* Removed: the shared one (wrong data) would be used; removed too: nothing. */
	ck_assert_int_eq(toggle_record_buffer(f.agent, f.graph[1], h, NULL), 0);
	ck_assert_int_eq(toggle_record_buffer(f.agent, NULL, h, NULL), 0);
	fx_step(&f, &set);
	fx_launch(&f, 1);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 1);
	fx_close(&f);
}
END_TEST

/* Declared in a capture: that graph's buffer, for that capture only (a new
 * graph that gets the handle later records nothing from it). */
static struct toggle_graph_status capture_one(struct fx *f, CUgraph *g, CUgraphExec *e, bool declare)
{
	struct toggle_hook h = {1, 0};
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, head_fn, &f->runs), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, producer_fn, &f->prod[0][buf_of(1, 0)]),
			 CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f->agent, f->stream, h), 0);
	struct toggle_record_buffer b = buf_desc(f, buf_of(1, 0));
	if (declare)
		ck_assert_int_eq(toggle_record_buffer_in_capture(f->agent, f->stream, h, &b), 0);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(e, *g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, *g, *e), 0);
	struct toggle_graph_status st;
	ck_assert_int_eq(toggle_graph_status(f->agent, *g, &st), 0);
	return st;
}

START_TEST(test_buffer_in_capture)
{
	struct fx f;
	fx_open(&f, 1u << 20, false);
	toggle_sim_set_handle_reuse(f.sim, true);
	struct toggle_record_buffer b = buf_desc(&f, 0);
	ck_assert_int_eq(toggle_record_buffer_in_capture(f.agent, f.stream, (struct toggle_hook){0, 0}, &b),
			 TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), 0);
	struct toggle_set set = {{0}};
	toggle_set_add(&set, (struct toggle_hook){1, 0});
	CUgraph g;
	CUgraphExec e;
	capture_one(&f, &g, &e, true);
	fx_step(&f, &set);
	f.sub[f.n_sub++] = (struct submitted){.g = 0, .step = f.step, .set = f.set};
	f.graph[0] = g; /* fx_drain checks the record's graph against graph[sub.g] */
	ck_assert_int_eq(toggle_graph_launch(f.agent, g, e, f.stream), 0);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 1);
	/* The graph and its exec destroyed; the next capture reuses the handle. */
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	CUgraph g2;
	CUgraphExec e2;
	capture_one(&f, &g2, &e2, false);
	ck_assert_ptr_eq(g2, g);
	fx_step(&f, &set);
	f.sub[f.n_sub++] = (struct submitted){.g = 0, .step = f.step, .set = f.set};
	ck_assert_int_eq(toggle_graph_launch(f.agent, g2, e2, f.stream), 0);
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f, NULL);
	ck_assert_uint_eq(f.got, 1); /* nothing declared for this capture */
	fx_close(&f);
}
END_TEST

/* No ring: launches are untouched, the stats all zero. */
START_TEST(test_off)
{
	struct fx f;
	fx_open(&f, 0, false);
	struct toggle_set set = {{0}};
	toggle_set_add(&set, (struct toggle_hook){0, 0});
	fx_step(&f, &set);
	fx_launch(&f, 0);
	ck_assert_uint_eq(f.runs, 1);
	struct toggle_record_stats st;
	toggle_record_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.capacity, 0);
	ck_assert_uint_eq(st.records, 0);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	ck_assert_int_eq(toggle_record_set(f.agent, 1, NULL), TOGGLE_EINVAL);
	fx_close(&f);
}
END_TEST

/* toggle_record_layout is the compiler's own offsetof/sizeof, every field. */
START_TEST(test_layout)
{
	size_t n = 0;
	const struct toggle_layout_entry *e = toggle_record_layout(&n);
	ck_assert_uint_eq(n, 15); /* 2 structs, 5 + 8 fields */
#define WANT(T, f, sz, off)                                                        \
	do {                                                                       \
		bool hit = false;                                                  \
		for (size_t i = 0; i < n; i++)                                     \
			hit |= strcmp(e[i].type, #T) == 0 && e[i].field &&         \
			       strcmp(e[i].field, #f) == 0 && e[i].size == (sz) && \
			       e[i].offset == (off);                               \
		ck_assert_msg(hit, #T "." #f);                                     \
	} while (0)
#define WF(T, f) WANT(T, f, sizeof(((struct T *)0)->f), offsetof(struct T, f))
	WF(toggle_record_buffer, ptr);
	WF(toggle_record_buffer, bytes);
	WF(toggle_record_buffer, dtype);
	WF(toggle_record_buffer, ndim);
	WF(toggle_record_buffer, shape);
	WF(toggle_record_stats, records);
	WF(toggle_record_stats, bytes);
	WF(toggle_record_stats, dropped);
	WF(toggle_record_stats, errors);
	WF(toggle_record_stats, pending);
	WF(toggle_record_stats, session);
	WF(toggle_record_stats, capacity);
	WF(toggle_record_stats, staged);
	ck_assert_uint_eq(e[0].size, sizeof(struct toggle_record_buffer));
	ck_assert_ptr_null(e[0].field);
}
END_TEST

static Suite *record_suite(void)
{
	Suite *s = suite_create("record");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_records_match_buffers, 0, 6);
	tcase_add_test(tc, test_request_selects);
	tcase_add_test(tc, test_published_after_event);
	tcase_add_test(tc, test_full_ring_drops);
	tcase_add_test(tc, test_pending_limit);
	tcase_add_test(tc, test_driver_failures);
	tcase_add_test(tc, test_record_after_prepare);
	tcase_add_test(tc, test_eager);
	tcase_add_test(tc, test_buffers);
	tcase_add_test(tc, test_buffer_in_capture);
	tcase_add_test(tc, test_layout);
	tcase_add_test(tc, test_off);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(record_suite());
}
