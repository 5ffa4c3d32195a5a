/*
 * check_record_staged.c - the recorder's staged path on the simulator
 * (record.c, gather.h): after a replay, one gather per 40 records on the
 * replay's stream into the device staging area, then on the recorder's own
 * stream one host copy per contiguous ring range.  What is checked: the
 * replay's stream carries no host copy (its synchronize does not wait for
 * one, and nothing is published before the copy ran); the gather reads the
 * monitor buffers at the replay's point in stream order (a later replay
 * overwriting a buffer does not change the record); a batch that wraps
 * takes two copies; staging reused across many wraps under random orders
 * stays exact; every injected failure voids the whole batch, published only
 * once what was enqueued of it has run; without staging the per-record
 * path runs.
 *
 * Ground truth is what ran: a head kernel counts the runs, each producer
 * writes a pattern of (run, hook) into its buffer when it runs, and the
 * simulator counts the driver calls made.
 */
#include <stddef.h>
#include <string.h>

#include "fixture_record_sim.h"
#include "testutil.h"
#include "toggle.h"
#include "toggle_record.h"
#include "toggle_ring.h"
#include "toggle_sim.h"

#define NT 3
#define NL 16
#define NH (NT * NL) /* 48 records a launch: two gathers (40 + 8) */
#define ELEMS 64     /* floats per monitor buffer: records of 128 + 256 bytes */
#define MAX_RUNS 8192

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

struct fx {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	CUdeviceptr buf[NH];
	uint32_t runs;
	struct prod prod[NH];
	CUgraph graph;
	CUgraphExec exec;
	int64_t step;
	int64_t run_step[MAX_RUNS]; /* the step of each launch submitted */
	struct toggle_set run_set[MAX_RUNS];
	uint32_t n_sub;
	struct toggle_set set;
	struct toggle_ring_map m;
	struct toggle_ring_reader rd;
	uint64_t got;
};

static uint32_t buf_of(uint16_t t, uint16_t l)
{
	return (uint32_t)t * NL + l;
}

static void fx_open(struct fx *f, uint64_t capacity, enum toggle_sim_op refuse)
{
	memset(f, 0, sizeof(*f));
	f->m.fd = -1;
	record_sim_open("staged-agent",
			(struct toggle_catalog){.type_names = type_names, .n_types = NT, .n_layers = NL},
			&f->sim, &f->stream, &f->agent);
	for (uint32_t i = 0; i < NH; i++)
		ck_assert_int_eq(toggle_sim_mem_alloc(f->sim, &f->buf[i], ELEMS * 4), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, head_fn, &f->runs), CUDA_SUCCESS);
	for (uint16_t t = 0; t < NT; t++)
		for (uint16_t l = 0; l < NL; l++) {
			struct prod *p = &f->prod[buf_of(t, l)];
			*p = (struct prod){.runs = &f->runs, .buf = f->buf, .elems = ELEMS,
					   .hook = buf_of(t, l)};
			ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, producer_fn, p), CUDA_SUCCESS);
			ck_assert_int_eq(toggle_record_producer(f->agent, f->stream,
								(struct toggle_hook){t, l}), 0);
			struct toggle_record_buffer b = {
				.ptr = f->buf[buf_of(t, l)], .bytes = ELEMS * 4,
				.dtype = TOGGLE_DTYPE_F32, .ndim = 2, .shape = {8, ELEMS / 8}};
			ck_assert_int_eq(toggle_record_buffer(f->agent, NULL, (struct toggle_hook){t, l},
							      &b), 0);
		}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	if (refuse != TOGGLE_SIM_OP_COUNT)
		toggle_sim_fail(f->sim, refuse, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	int fd = -1;
	ck_assert_int_eq(toggle_record_open(f->agent, capacity, &fd), 0);
	char err[256];
	ck_assert_int_eq(toggle_ring_attach(fd, 0, &f->m, err, sizeof(err)), 0);
	toggle_ring_reader_open(&f->rd, &f->m);
	ck_assert_int_eq(toggle_record_set(f->agent, 1, NULL), 0);
}

static bool fx_staged(const struct fx *f)
{
	struct toggle_record_stats st;
	toggle_record_stats_get(f->agent, &st);
	return st.staged == 1;
}

static void fx_close(struct fx *f)
{
	toggle_agent_close(f->agent);
	ck_assert_uint_eq(toggle_sim_host_registered(f->sim), 0);
	/* The staging area went with the ring: only the monitor buffers are left. */
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), (size_t)NH * ELEMS * 4);
	toggle_ring_unmap(&f->m);
	toggle_sim_destroy(f->sim);
}

static struct toggle_set all_set(void)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	for (uint16_t t = 0; t < NT; t++)
		for (uint16_t l = 0; l < NL; l++)
			ck_assert_int_eq(toggle_set_add(&s, (struct toggle_hook){t, l}), 0);
	return s;
}

static void fx_step(struct fx *f, const struct toggle_set *set)
{
	ck_assert_int_eq(toggle_set_enabled(f->agent, set), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, ++f->step, &f->set), 0);
}

static void fx_launch(struct fx *f)
{
	ck_assert_uint_lt(f->n_sub, MAX_RUNS);
	f->run_step[f->n_sub] = f->step;
	f->run_set[f->n_sub] = f->set;
	f->n_sub++;
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream), 0);
}

/* Every published record against the run its payload names. */
static void fx_drain(struct fx *f)
{
	struct toggle_ring_record r;
	const void *pl;
	int rc;
	while ((rc = toggle_ring_reader_next(&f->rd, &r, &pl)) == 1) {
		ck_assert_uint_eq(r.payload_len, ELEMS * 4);
		ck_assert(r.hook_type < NT && r.layer < NL);
		const float *p = pl;
		uint32_t run = (uint32_t)(p[0] / 1000.0f);
		ck_assert_msg(run < f->n_sub, "record names run %u of %u", run, f->n_sub);
		ck_assert_int_eq(r.step, f->run_step[run]);
		ck_assert_uint_eq(r.graph, (uint64_t)(uintptr_t)f->graph);
		struct toggle_hook h = {r.hook_type, r.layer};
		ck_assert(toggle_set_contains(&f->run_set[run], h));
		for (unsigned i = 0; i < ELEMS; i++)
			ck_assert_msg(p[i] == pattern(run, buf_of(h.type, h.layer), i),
				      "record step %lld hook %u:%u word %u: %g, run %u wrote %g",
				      (long long)r.step, h.type, h.layer, i, p[i], run,
				      pattern(run, buf_of(h.type, h.layer), i));
		toggle_ring_reader_release(&f->rd, &r);
		f->got++;
	}
	ck_assert_msg(rc == 0, "ring fault: %s", toggle_ring_fault_str(f->rd.fault));
}

static uint64_t calls(const struct fx *f, enum toggle_sim_op op)
{
	return toggle_sim_calls(f->sim, op);
}

static uint64_t head(const struct fx *f)
{
	return __atomic_load_n(&f->m.prod->head, __ATOMIC_ACQUIRE);
}

/* 48 records: two gathers and one host copy, none of it record by record. */
START_TEST(test_one_copy_per_launch)
{
	static struct fx f; /* large: not on the stack */
	fx_open(&f, 1u << 20, TOGGLE_SIM_OP_COUNT);
	ck_assert(fx_staged(&f));
	/* The staging area: as many bytes of device memory as the ring's capacity. */
	ck_assert_uint_eq(toggle_sim_mem_in_use(f.sim), (size_t)NH * ELEMS * 4 + (1u << 20));
	struct toggle_set all = all_set();
	for (int s = 0; s < 5; s++) {
		fx_step(&f, &all);
		uint64_t k0 = calls(&f, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX);
		uint64_t c0 = calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC);
		fx_launch(&f);
		ck_assert_uint_eq(calls(&f, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX) - k0, 2);
		ck_assert_uint_eq(calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC) - c0, 1);
		ck_assert_int_eq(toggle_record_poll(f.agent), 0);
		fx_drain(&f);
		ck_assert_uint_eq(f.got, (uint64_t)NH * (unsigned)(s + 1));
	}
	fx_close(&f);
}
END_TEST

/*
 * The replay's stream runs alone (the copy stream held): the replays and
 * their gathers are done, the host copies are not, nothing is published;
 * the second replay overwrote every buffer.  Then the rest runs: each
 * record holds its own replay's data.
 */
START_TEST(test_copy_off_the_replay_stream)
{
	static struct fx f; /* large: not on the stack */
	fx_open(&f, 1u << 20, TOGGLE_SIM_OP_COUNT);
	toggle_sim_set_deferred(f.sim, true, 11);
	struct toggle_set all = all_set();
	fx_step(&f, &all);
	fx_launch(&f);
	fx_step(&f, &all);
	fx_launch(&f);
	ck_assert_int_eq(toggle_sim_stream_run(f.stream), CUDA_SUCCESS); /* waits for nothing */
	ck_assert_uint_eq(f.runs, 2);
	ck_assert_int_eq(toggle_record_poll(f.agent), 2);
	ck_assert_uint_eq(head(&f), 0);
	const float *b0 = (const float *)(uintptr_t)f.buf[0];
	ck_assert(b0[0] == pattern(1, 0, 0)); /* the buffer holds the second replay's data */
	toggle_sim_synchronize(f.sim);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f);
	ck_assert_uint_eq(f.got, 2 * NH);
	fx_close(&f);
}
END_TEST

/* A small ring, read every step: batches wrap (two copies then), staging is
 * reused lap after lap; every record exact, none lost. */
START_TEST(test_wrap)
{
	static struct fx f; /* large: not on the stack */
	fx_open(&f, TOGGLE_RING_MIN_CAPACITY, TOGGLE_SIM_OP_COUNT);
	struct toggle_set all = all_set();
	unsigned twos = 0;
	for (int s = 0; s < 40; s++) {
		fx_step(&f, &all);
		uint64_t c0 = calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC);
		uint64_t h0 = head(&f);
		fx_launch(&f);
		uint64_t n = calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC) - c0;
		ck_assert(n == 1 || n == 2);
		ck_assert_int_eq(toggle_record_poll(f.agent), 0);
		/* Two exactly when the batch's records straddle the ring's end. */
		uint64_t cap = TOGGLE_RING_MIN_CAPACITY, len = NH * 384ull;
		bool wraps = (h0 & (cap - 1)) + len > cap;
		ck_assert_uint_eq(n, wraps ? 2 : 1);
		twos += n == 2;
		fx_drain(&f);
	}
	ck_assert_uint_gt(twos, 3);
	ck_assert_uint_eq(f.got, 40 * NH);
	struct toggle_record_stats st;
	toggle_record_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.dropped + st.errors, 0);
	fx_close(&f);
}
END_TEST

/*
 * Random sets, launches and GPU progress (the replay's stream alone, or
 * everything, in seeded orders), a small ring read at random: every
 * record published exact, and records + drops = what was asked.
 */
START_TEST(test_random_orders)
{
	static struct fx f; /* large: not on the stack */
	fx_open(&f, TOGGLE_RING_MIN_CAPACITY, TOGGLE_SIM_OP_COUNT);
	uint64_t rng = 0xa11ce + (uint64_t)_i;
	toggle_sim_set_deferred(f.sim, true, rng);
	uint64_t asked = 0;
	for (int s = 0; s < 400; s++) {
		struct toggle_set set;
		toggle_set_clear(&set);
		uint64_t bits = tu_rng_next(&rng);
		for (uint32_t h = 0; h < NH; h++)
			if ((bits >> h) & 1)
				toggle_set_add(&set, (struct toggle_hook){(uint16_t)(h / NL),
									 (uint16_t)(h % NL)});
		fx_step(&f, &set);
		for (int k = 0; k < 1 + (int)(tu_rng_next(&rng) % 3); k++) {
			fx_launch(&f);
			asked += (uint64_t)__builtin_popcountll(bits & ((1ull << NH) - 1));
		}
		switch (tu_rng_next(&rng) % 4) {
		case 0:
			toggle_sim_synchronize(f.sim);
			break;
		case 1:
			(void)toggle_sim_stream_run(f.stream);
			break;
		default:
			break;
		}
		(void)toggle_record_poll(f.agent);
		if (tu_rng_next(&rng) % 3)
			fx_drain(&f);
	}
	ck_assert_int_eq(toggle_record_flush(f.agent), 0);
	fx_drain(&f);
	struct toggle_record_stats st;
	toggle_record_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.records, f.got);
	ck_assert_uint_eq(st.records + st.dropped, asked);
	ck_assert_uint_gt(st.records, 2000);
	fx_close(&f);
}
END_TEST

/* One launch with op's call after `skip` more failing: no record of it
 * published as data, all 48 counted as errors; published only once the
 * device work enqueued for it ran; the next launch is whole again. */
static void fail_once(enum toggle_sim_op op, uint64_t skip, bool wrap, uint64_t want_copies)
{
	static struct fx f; /* large: not on the stack */
	fx_open(&f, TOGGLE_RING_MIN_CAPACITY, TOGGLE_SIM_OP_COUNT);
	struct toggle_set all = all_set();
	/* With wrap: launches until the next one's records straddle the ring's end. */
	while (wrap && (head(&f) & (TOGGLE_RING_MIN_CAPACITY - 1)) + NH * 384ull <=
			       TOGGLE_RING_MIN_CAPACITY) {
		fx_step(&f, &all);
		fx_launch(&f);
		ck_assert_int_eq(toggle_record_poll(f.agent), 0);
		fx_drain(&f);
	}
	uint64_t got0 = f.got;
	toggle_sim_set_deferred(f.sim, true, 7);
	/* A query reports an error only for what has run (the driver's sticky errors). */
	bool query = op == TOGGLE_SIM_OP_EVENT_QUERY;
	if (!query)
		toggle_sim_fail(f.sim, op, skip, 1, CUDA_ERROR_LAUNCH_FAILED);
	uint64_t c0 = calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC);
	uint64_t h0 = head(&f);
	fx_step(&f, &all);
	fx_launch(&f);
	ck_assert_uint_eq(calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC) - c0, want_copies);
	if (op != TOGGLE_SIM_OP_LAUNCH_KERNEL_EX || skip) {
		/* Something of it was enqueued: not published before it ran. */
		(void)toggle_record_poll(f.agent);
		ck_assert_uint_eq(head(&f), h0);
	}
	toggle_sim_synchronize(f.sim);
	if (query)
		toggle_sim_fail(f.sim, op, skip, 1, CUDA_ERROR_LAUNCH_FAILED);
	(void)toggle_record_poll(f.agent);
	ck_assert_uint_gt(head(&f), h0);
	fx_drain(&f);
	ck_assert_uint_eq(f.got, got0);
	struct toggle_record_stats st;
	toggle_record_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.errors, NH);
	ck_assert_uint_eq(st.pending, 0);
	toggle_sim_set_deferred(f.sim, false, 0);
	fx_step(&f, &all);
	fx_launch(&f);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f);
	ck_assert_uint_eq(f.got, got0 + NH);
	fx_close(&f);
}

START_TEST(test_fail_first_gather)
{
	fail_once(TOGGLE_SIM_OP_LAUNCH_KERNEL_EX, 0, false, 0); /* nothing enqueued: voided at once */
}
END_TEST

START_TEST(test_fail_second_gather)
{
	fail_once(TOGGLE_SIM_OP_LAUNCH_KERNEL_EX, 1, false, 0); /* the first one ran */
}
END_TEST

START_TEST(test_fail_gather_event)
{
	fail_once(TOGGLE_SIM_OP_EVENT_RECORD, 0, false, 0);
}
END_TEST

START_TEST(test_fail_wait)
{
	fail_once(TOGGLE_SIM_OP_STREAM_WAIT_EVENT, 0, false, 0);
}
END_TEST

START_TEST(test_fail_copy)
{
	fail_once(TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC, 0, false, 1);
}
END_TEST

START_TEST(test_fail_second_copy)
{
	fail_once(TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC, 1, true, 2); /* the first range's copy ran */
}
END_TEST

START_TEST(test_fail_query)
{
	fail_once(TOGGLE_SIM_OP_EVENT_QUERY, 0, false, 1);
}
END_TEST

/* The batch's own event refused: covered by the next launch's, then published. */
START_TEST(test_fail_batch_event)
{
	static struct fx f; /* large: not on the stack */
	fx_open(&f, 1u << 20, TOGGLE_SIM_OP_COUNT);
	struct toggle_set all = all_set();
	toggle_sim_set_deferred(f.sim, true, 5);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_EVENT_RECORD, 1, 1, CUDA_ERROR_INVALID_VALUE);
	fx_step(&f, &all);
	fx_launch(&f);
	toggle_sim_synchronize(f.sim);
	ck_assert_int_eq(toggle_record_poll(f.agent), 1); /* no event: not known done */
	fx_step(&f, &all);
	fx_launch(&f);
	toggle_sim_synchronize(f.sim);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f);
	ck_assert_uint_eq(f.got, 2 * NH); /* its copies ran: its records are good */
	fx_close(&f);
}
END_TEST

/* No staging (the allocation refused) or no kernel (the module refused):
 * record by record on the replay's stream, exact. */
START_TEST(test_fallback)
{
	static const enum toggle_sim_op refuse[] = {TOGGLE_SIM_OP_MEM_ALLOC, TOGGLE_SIM_OP_MODULE_LOAD};
	static struct fx f; /* large: not on the stack */
	fx_open(&f, 1u << 20, refuse[_i]);
	ck_assert(!fx_staged(&f));
	struct toggle_set all = all_set();
	fx_step(&f, &all);
	uint64_t k0 = calls(&f, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX);
	uint64_t c0 = calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC);
	fx_launch(&f);
	ck_assert_uint_eq(calls(&f, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX), k0);
	ck_assert_uint_eq(calls(&f, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC) - c0, NH);
	ck_assert_int_eq(toggle_record_poll(f.agent), 0);
	fx_drain(&f);
	ck_assert_uint_eq(f.got, NH);
	fx_close(&f);
}
END_TEST

static Suite *staged_suite(void)
{
	Suite *s = suite_create("record_staged");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_one_copy_per_launch);
	tcase_add_test(tc, test_copy_off_the_replay_stream);
	tcase_add_test(tc, test_wrap);
	tcase_add_loop_test(tc, test_random_orders, 0, 4);
	tcase_add_test(tc, test_fail_first_gather);
	tcase_add_test(tc, test_fail_second_gather);
	tcase_add_test(tc, test_fail_gather_event);
	tcase_add_test(tc, test_fail_wait);
	tcase_add_test(tc, test_fail_copy);
	tcase_add_test(tc, test_fail_second_copy);
	tcase_add_test(tc, test_fail_query);
	tcase_add_test(tc, test_fail_batch_event);
	tcase_add_loop_test(tc, test_fallback, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(staged_suite());
}
