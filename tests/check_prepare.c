/*
 * check_prepare.c - toggle_graph_prepare(): toggle_graph_launch() without
 * its cuGraphLaunch, for callers that launch their exec themselves (torch's
 * CUDAGraph::replay, which runs its generators' prologue first).  On the
 * simulator, in lazy, eager and device mode:
 *
 *  - prepare + the caller's own launch runs exactly the step's set, mixed at
 *    random with toggle_graph_launch, over random steps and streams
 *    (deferred execution in device mode: the host runs ahead);
 *  - a prepare not followed by its launch, then another prepare (same or
 *    other stream, same or other set), still runs exactly the set;
 *  - refusals are launch's: same code, same error text, same counters,
 *    nothing launched, nothing enqueued;
 *  - the accounting is a launch's: replays, last step, the agent's launch
 *    count, and device mode's launch index (a tainted launch made through
 *    prepare is reported with its step); unrelated graphs: 0, nothing done;
 *  - device mode on two streams: the mask written on the prepare's stream
 *    after a join on the previous launch's stream.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

#define NT 3
#define NL 8
#define NH (NT * NL) /* 24 hooks: a set fits a uint32_t */
#define G 3
#define NS 3
#define MAX_LAUNCHES 4096

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

static const enum toggle_mode modes[3] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
					  TOGGLE_MODE_DEVICE};

/* What ran: one record per producer execution. */
struct rec {
	int graph, hook;
	uint64_t launch; /* index of the launch of that graph that ran it */
};

struct pfx {
	struct toggle_sim *sim;
	enum toggle_mode mode;
	CUstream s[NS];
	struct toggle_agent *agent;
	CUmodule mod;
	CUfunction produce, mark;
	CUgraph graph[G];
	CUgraphExec exec[G];
	uint64_t runs[G]; /* launches of graph g that ran (its mark kernel) */
	struct rec log[1 << 17];
	size_t nlog;
	uint32_t expect[G][MAX_LAUNCHES]; /* the set of each launch when it was submitted */
	uint64_t launched[G];
	uint64_t other_runs; /* kernels of the unrelated graph */
};

/* ---- the simulated kernels ------------------------------------------------ */

static void k_produce(void **p)
{
	struct pfx *f;
	int graph, hook;
	memcpy(&f, p[0], sizeof(f));
	memcpy(&graph, p[1], sizeof(graph));
	memcpy(&hook, p[2], sizeof(hook));
	ck_assert_uint_lt(f->nlog, sizeof(f->log) / sizeof(f->log[0]));
	ck_assert_uint_gt(f->runs[graph], 0);
	f->log[f->nlog++] = (struct rec){graph, hook, f->runs[graph] - 1};
}

static void k_mark(void **p)
{
	struct pfx *f;
	int graph;
	memcpy(&f, p[0], sizeof(f));
	memcpy(&graph, p[1], sizeof(graph));
	f->runs[graph]++;
}

static void k_compute(void *arg)
{
	(void)arg;
}

static void k_other(void *arg)
{
	((struct pfx *)arg)->other_runs++;
}

static const struct toggle_sim_function test_functions[] = {
	{.name = "produce", .fn = k_produce, .n_params = 3,
	 .param_size = {sizeof(void *), sizeof(int), sizeof(int)}},
	{.name = "mark", .fn = k_mark, .n_params = 2, .param_size = {sizeof(void *), sizeof(int)}},
};

static const struct toggle_sim_image test_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC, .n_functions = 2, .functions = test_functions};

/* ---- fixture ---------------------------------------------------------------- */

static struct pfx *pfx_open(enum toggle_mode mode, bool strict)
{
	struct pfx *f = calloc(1, sizeof(*f));
	ck_assert_ptr_nonnull(f);
	f->mode = mode;
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	for (int i = 0; i < NS; i++)
		ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->s[i]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_load(f->sim, &f->mod, &test_image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&f->produce, f->mod, "produce"), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&f->mark, f->mod, "mark"), CUDA_SUCCESS);
	struct toggle_config cfg = {
		.name = "prepare-test",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.strict = strict,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	return f;
}

static void pfx_close(struct pfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
	free(f);
}

static CUlaunchConfig launch_cfg(CUstream s)
{
	return (CUlaunchConfig){.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
				.blockDimY = 1, .blockDimZ = 1, .hStream = s};
}

/*
 * Capture graph gi on stream 0: the planner (device mode; nothing otherwise),
 * a mark kernel, then per layer a compute kernel and NT producers.  planner
 * false: no planner (a strict device agent refuses such a graph).
 */
static void pfx_capture(struct pfx *f, int gi, bool planner)
{
	struct toggle_agent *a = f->agent;
	ck_assert_int_eq(toggle_capture_begin(a), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	if (planner)
		ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), 0);
	void *fp = f;
	int graph = gi;
	void *mparams[] = {&fp, &graph};
	CUlaunchConfig c = launch_cfg(f->s[0]);
	ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, f->mark, mparams, NULL), CUDA_SUCCESS);
	for (int l = 0; l < NL; l++) {
		ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_compute, f), CUDA_SUCCESS);
		for (int t = 0; t < NT; t++) {
			int h = t * NL + l;
			void *params[] = {&fp, &graph, &h};
			struct toggle_hook hook = {(uint16_t)t, (uint16_t)l};
			ck_assert_int_eq(toggle_launch_producer(a, &c, f->produce, params, hook), 0);
		}
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph[gi]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(a), 0);
}

/* Capture and bind G graphs (toggle_graph_instantiate: uploads in device mode). */
static void pfx_graphs(struct pfx *f)
{
	for (int g = 0; g < G; g++) {
		pfx_capture(f, g, true);
		ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[g], &f->exec[g]), 0);
	}
}

static uint32_t set_bits(const struct toggle_set *s)
{
	uint32_t m = 0;
	for (int h = 0; h < NH; h++)
		if (toggle_set_contains(s, (struct toggle_hook){(uint16_t)(h / NL), (uint16_t)(h % NL)}))
			m |= 1u << h;
	return m;
}

static struct toggle_set set_of(uint32_t m)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	for (int h = 0; h < NH; h++)
		if (m >> h & 1)
			ck_assert_int_eq(toggle_set_add(&s, (struct toggle_hook){(uint16_t)(h / NL),
									(uint16_t)(h % NL)}),
					 0);
	return s;
}

static void step(struct pfx *f, int64_t n, uint32_t m)
{
	struct toggle_set s = set_of(m);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, n, NULL), 0);
}

/* Note that graph gi was launched now: it must run the current set. */
static void noted(struct pfx *f, int gi)
{
	struct toggle_set cur;
	toggle_current_set(f->agent, &cur);
	ck_assert_uint_lt(f->launched[gi], MAX_LAUNCHES);
	f->expect[gi][f->launched[gi]++] = set_bits(&cur);
}

static int via_launch(struct pfx *f, int gi, int si)
{
	int rc = toggle_graph_launch(f->agent, f->graph[gi], f->exec[gi], f->s[si]);
	if (rc == 0)
		noted(f, gi);
	return rc;
}

static int prepare(struct pfx *f, int gi, int si)
{
	return toggle_graph_prepare(f->agent, f->graph[gi], f->exec[gi], f->s[si]);
}

/* The caller's own launch after a prepare (what torch's replay does). */
static void own_launch(struct pfx *f, int gi, int si)
{
	ck_assert_int_eq(toggle_sim_graph_launch(f->exec[gi], f->s[si]), CUDA_SUCCESS);
	noted(f, gi);
}

static int via_prepare(struct pfx *f, int gi, int si)
{
	int rc = prepare(f, gi, si);
	if (rc == 0)
		own_launch(f, gi, si);
	return rc;
}

/* Run everything queued; every launch ran exactly its set.  Returns launches checked. */
static uint64_t pfx_check(struct pfx *f)
{
	static uint32_t seen[G][MAX_LAUNCHES];
	uint64_t n = 0;
	toggle_sim_synchronize(f->sim);
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < f->nlog; i++) {
		const struct rec *r = &f->log[i];
		ck_assert_uint_lt(r->launch, f->launched[r->graph]);
		ck_assert_msg(!(seen[r->graph][r->launch] >> r->hook & 1),
			      "graph %d launch %llu: hook %d ran twice", r->graph,
			      (unsigned long long)r->launch, r->hook);
		seen[r->graph][r->launch] |= 1u << r->hook;
	}
	for (int g = 0; g < G; g++) {
		ck_assert_uint_eq(f->runs[g], f->launched[g]);
		for (uint64_t k = 0; k < f->launched[g]; k++, n++)
			ck_assert_msg(seen[g][k] == f->expect[g][k],
				      "graph %d launch %llu ran 0x%06x, the gate said 0x%06x", g,
				      (unsigned long long)k, seen[g][k], f->expect[g][k]);
	}
	return n;
}

static struct toggle_stats stats(struct pfx *f)
{
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	return st;
}

static struct toggle_graph_status gstatus(struct pfx *f, int gi)
{
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph[gi], &gs), 0);
	return gs;
}


/* ---- 1. prepare + own launch runs the step's set -------------------------------- */

/*
 * Random steps and sets (plans too), a few replays per step, each through
 * toggle_graph_launch, prepare + own launch, or one or two prepares left
 * without their launch followed by either.  streams > 1: random streams.
 * Device mode runs deferred (the host ahead of the device).
 */
static void random_steps(enum toggle_mode mode, uint64_t seed, int streams, int steps)
{
	struct pfx *f = pfx_open(mode, true);
	pfx_graphs(f);
	bool device = mode == TOGGLE_MODE_DEVICE;
	if (device)
		toggle_sim_set_deferred(f->sim, true, seed);
	uint64_t rng = seed, prepared[G] = {0}, unlaunched[G] = {0};
	uint32_t cur = 0;
	int64_t last_step[G] = {-1, -1, -1};
	for (int64_t s = 0; s < steps; s++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set set = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &set), 0);
		if (tu_rng_next(&rng) % 5 == 0) {
			struct toggle_set p = set_of((uint32_t)tu_rng_next(&rng) & ((1u << NH) - 1));
			ck_assert_int_eq(toggle_plan_step(f->agent, s + 1, &p), 0);
		}
		struct toggle_set gate;
		ck_assert_int_eq(toggle_step_begin(f->agent, s, &gate), 0);
		int n = 1 + (int)(tu_rng_next(&rng) % 4);
		for (int i = 0; i < n; i++) {
			int g = (int)(tu_rng_next(&rng) % G);
			int si = (int)(tu_rng_next(&rng) % (uint64_t)streams);
			switch (tu_rng_next(&rng) % 4) {
			case 0:
				ck_assert_int_eq(via_launch(f, g, si), 0);
				break;
			case 3:
				/* one or two left without their launch, on random streams:
				 * the next prepare must still be exact */
				for (int k = 1 + (int)(tu_rng_next(&rng) % 2); k > 0; k--) {
					int sj = (int)(tu_rng_next(&rng) % (uint64_t)streams);
					ck_assert_int_eq(prepare(f, g, sj), 0);
					unlaunched[g]++;
				}
				if (tu_rng_next(&rng) % 2) { /* then toggle_graph_launch */
					ck_assert_int_eq(via_launch(f, g, si), 0);
					break;
				}
				/* then prepare + own launch */
				/* fall through */
			default:
				ck_assert_int_eq(via_prepare(f, g, si), 0);
				prepared[g]++;
				break;
			}
			ck_assert_uint_eq(f->expect[g][f->launched[g] - 1], set_bits(&gate));
			last_step[g] = s;
		}
		if (s % 97 == 96)
			pfx_check(f);
	}
	uint64_t checked = pfx_check(f), total = 0;
	ck_assert_uint_gt(checked, (uint64_t)steps);
	for (int g = 0; g < G; g++) {
		ck_assert_uint_gt(prepared[g], 0);
		ck_assert_uint_gt(unlaunched[g], 0);
		/* Every prepare is accounted as a launch, launched or not. */
		struct toggle_graph_status gs = gstatus(f, g);
		ck_assert_uint_eq(gs.replays, f->launched[g] + unlaunched[g]);
		ck_assert_int_eq(gs.last_step, last_step[g]);
		total += gs.replays;
		if (device) {
			struct toggle_device_counters dc;
			ck_assert_int_eq(toggle_graph_device_counters(f->agent, f->graph[g], &dc), 0);
			ck_assert_uint_eq(dc.planner_runs, f->launched[g]);
			ck_assert_uint_eq(dc.device_failures, 0);
		}
	}
	struct toggle_stats st = stats(f);
	ck_assert_uint_eq(st.launches, total);
	ck_assert_uint_eq(st.launches_refused, 0);
	if (device) {
		ck_assert_uint_eq(st.node_set_calls, 0);
		if (streams > 1)
			ck_assert_uint_gt(st.stream_joins, 0);
	} else {
		ck_assert_uint_gt(st.node_set_calls, 0);
	}
	pfx_close(f);
}

START_TEST(prepare_runs_the_set)
{
	/* _i: lazy, eager, device on one stream */
	random_steps(modes[_i], 0x9e9a + (uint64_t)_i, 1, 500);
}
END_TEST

START_TEST(prepare_runs_the_set_streams)
{
	/* _i: lazy, eager, device on NS streams */
	random_steps(modes[_i], 0x57e4 + (uint64_t)_i, NS, 500);
}
END_TEST

/* ---- 2. a prepare without its launch ----------------------------------------------- */

/*
 * Set A prepared on stream 0 and never launched; then set B (a new step)
 * prepared on stream 1 and launched there: B runs.  Then a prepare of B
 * left alone, and one more prepare of B plus its launch: B, with no work
 * for the repeat (host: no node set; device: no mask write).  _i: mode.
 */
START_TEST(prepare_without_launch_then_prepare)
{
	struct pfx *f = pfx_open(modes[_i], true);
	bool device = f->mode == TOGGLE_MODE_DEVICE;
	pfx_graphs(f);
	if (device)
		toggle_sim_set_deferred(f->sim, true, 3);
	const uint32_t A = 0x00f0f0u, B = 0x0f0f0fu;
	step(f, 0, A);
	ck_assert_int_eq(via_launch(f, 0, 0), 0); /* first run: A, everything set */
	step(f, 1, B);
	ck_assert_int_eq(prepare(f, 0, 0), 0); /* not launched */
	step(f, 2, A);
	ck_assert_int_eq(prepare(f, 0, 2), 0); /* not launched either */
	step(f, 3, B);
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	ck_assert_uint_eq(pfx_check(f), 2);
	ck_assert_uint_eq(f->expect[0][1], B);

	struct toggle_stats st0 = stats(f);
	ck_assert_int_eq(prepare(f, 0, 1), 0); /* not launched */
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	struct toggle_stats st1 = stats(f);
	ck_assert_uint_eq(st1.node_set_calls, st0.node_set_calls);
	ck_assert_uint_eq(st1.mask_writes, st0.mask_writes);
	if (!device) /* device: one sync after a prepare that wrote (the stream check) */
		ck_assert_uint_eq(st1.syncs, st0.syncs);
	ck_assert_uint_eq(pfx_check(f), 3);
	ck_assert_uint_eq(f->expect[0][2], B);
	/* Accounted as launches: 1 + 3 prepares not launched + 2 launched. */
	ck_assert_uint_eq(gstatus(f, 0).replays, 6);
	/* The status says the exec holds the current set (device mode keeps
	 * launches off the fast path meanwhile: not a set it lacks). */
	ck_assert_uint_eq(gstatus(f, 0).applied_version, stats(f).version);
	ck_assert_int_eq(gstatus(f, 0).last_step, 3);
	pfx_close(f);
}
END_TEST

/*
 * Device mode: a new set prepared on stream 0 and not launched; then, with
 * the set unchanged (nothing left to write), a launch on stream 1, through
 * toggle_graph_launch or prepare + own launch.  That launch must wait for
 * stream 0's words: with the host ahead of the device, nothing else orders
 * it after them.  Also through a chain of two unlaunched prepares on two
 * streams, and two on one stream (also with a set change and back between
 * them).  _i: 0 launch, 1 prepare.
 */
START_TEST(device_unlaunched_prepare_other_stream)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_graphs(f);
	uint32_t sets[2] = {0x000fffu, 0xfff000u};
	for (uint64_t seed = 1; seed <= 32; seed++) {
		toggle_sim_set_deferred(f->sim, true, seed);
		int64_t s0 = (int64_t)seed * 10;
		step(f, s0, sets[0]);
		ck_assert_int_eq(via_launch(f, 0, 2), 0);
		step(f, s0 + 1, sets[1]);
		ck_assert_int_eq(prepare(f, 0, 0), 0); /* its words, no launch */
		uint64_t joins = stats(f).stream_joins;
		ck_assert_int_eq(_i ? via_prepare(f, 0, 1) : via_launch(f, 0, 1), 0);
		uint64_t j1 = stats(f).stream_joins;
		ck_assert_int_eq(via_prepare(f, 0, 1), 0); /* the same stream: fast again */
		uint64_t j2 = stats(f).stream_joins;
		pfx_check(f); /* first: what ran is the point */
		ck_assert_uint_eq(j1, joins + 1);
		ck_assert_uint_eq(j2, joins + 1);
		/* A chain: words on stream 0, a prepare on stream 1 with nothing to
		 * write (it only waits for stream 0), neither launched; the launch
		 * on stream 2 must still come after stream 0's words. */
		step(f, s0 + 2, sets[0]);
		ck_assert_int_eq(prepare(f, 0, 0), 0);
		ck_assert_int_eq(prepare(f, 0, 1), 0);
		ck_assert_int_eq(_i ? via_prepare(f, 0, 2) : via_launch(f, 0, 2), 0);
		pfx_check(f);
		/* Twice on one stream, neither launched (the second has nothing to
		 * write or wait for), then a launch on another stream. */
		step(f, s0 + 3, sets[1]);
		ck_assert_int_eq(prepare(f, 0, 1), 0);
		ck_assert_int_eq(prepare(f, 0, 1), 0);
		ck_assert_int_eq(_i ? via_prepare(f, 0, 0) : via_launch(f, 0, 0), 0);
		pfx_check(f);
		/* The second on the same stream after a set change and back: a new
		 * version, but nothing to write; then a launch on another stream. */
		step(f, s0 + 4, sets[0]);
		ck_assert_int_eq(prepare(f, 0, 2), 0);
		step(f, s0 + 5, 0x0f0f0fu);
		step(f, s0 + 6, sets[0]);
		ck_assert_int_eq(prepare(f, 0, 2), 0);
		ck_assert_int_eq(via_launch(f, 0, 1), 0);
		pfx_check(f);
	}
	pfx_close(f);
}
END_TEST

/*
 * The producer-free exec (issue 14): toggle_graph_launch runs it at a step
 * whose set leaves the graph nothing, but a prepare's caller launches the
 * main exec, which must then hold that set too.  _i: lazy, eager (device
 * mode builds none).
 */
START_TEST(prepare_never_picks_the_bare_exec)
{
	struct pfx *f = pfx_open(modes[_i], true);
	pfx_graphs(f);
	ck_assert(gstatus(f, 0).bare_exec);
	const uint32_t A = 0x0000ffu, B = 0x00ff00u;
	step(f, 0, A);
	ck_assert_int_eq(via_launch(f, 0, 0), 0);
	step(f, 1, 0);
	ck_assert_int_eq(via_launch(f, 0, 0), 0); /* the bare exec */
	ck_assert(gstatus(f, 0).bare_running);
	uint64_t switches = stats(f).bare_switches;
	ck_assert_int_eq(via_prepare(f, 0, 0), 0); /* the main exec, brought to the empty set */
	ck_assert_uint_eq(pfx_check(f), 3); /* first: what ran is the point */
	ck_assert_uint_eq(f->expect[0][2], 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(!gs.bare_running);
	ck_assert_uint_eq(gs.bare_replays, 1);
	ck_assert_uint_eq(gs.replays, 3);
	ck_assert_uint_eq(stats(f).bare_switches, switches + 1);
	ck_assert_int_eq(via_launch(f, 0, 1), 0); /* launch follows: the main exec, same set */
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	ck_assert_uint_eq(pfx_check(f), 5);
	for (int k = 1; k < 5; k++)
		ck_assert_uint_eq(f->expect[0][k], 0);
	/* Later steps: prepare keeps to the main exec, launch picks again. */
	step(f, 2, B);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	step(f, 3, 0);
	ck_assert_int_eq(via_launch(f, 0, 0), 0);
	ck_assert(gstatus(f, 0).bare_running);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert(!gstatus(f, 0).bare_running);
	step(f, 4, 0);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert(!gstatus(f, 0).bare_running);
	ck_assert_uint_eq(pfx_check(f), 9);
	ck_assert_uint_eq(f->expect[0][5], B);
	ck_assert_uint_eq(gstatus(f, 0).bare_replays, 2);
	pfx_close(f);
}
END_TEST

/* ---- 3. refusals are launch's --------------------------------------------------- */

#define N64(s) (sizeof(s) / sizeof(uint64_t))

struct counters {
	uint64_t st[N64(struct toggle_stats)];
	uint64_t an[N64(struct toggle_anomalies)];
	uint64_t sim_launches, sim_sets, sim_memops;
};

_Static_assert(sizeof(struct toggle_stats) % 8 == 0, "stats are 64-bit fields");
_Static_assert(sizeof(struct toggle_anomalies) % 8 == 0, "anomalies are 64-bit fields");

static struct counters counters(struct pfx *f)
{
	struct counters c;
	struct toggle_stats st;
	struct toggle_anomalies an;
	toggle_stats_get(f->agent, &st);
	toggle_anomalies_get(f->agent, &an);
	memcpy(c.st, &st, sizeof(st));
	memcpy(c.an, &an, sizeof(an));
	c.sim_launches = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	c.sim_sets = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED);
	c.sim_memops = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP);
	return c;
}

/*
 * graph/exec refused: prepare first, then launch, on the same state.  Both
 * return want with the same error text and move the same counters by the
 * same amounts (launches_refused and the anomaly by one each); neither
 * launches anything nor enqueues anything.
 */
static void same_refusal(struct pfx *f, CUgraph graph, CUgraphExec exec, int want,
			 const char *says)
{
	struct counters c0 = counters(f);
	int rp = toggle_graph_prepare(f->agent, graph, exec, f->s[0]);
	char err_prepare[512];
	snprintf(err_prepare, sizeof(err_prepare), "%s", toggle_last_error(f->agent));
	struct counters c1 = counters(f);
	int rl = toggle_graph_launch(f->agent, graph, exec, f->s[0]);
	struct counters c2 = counters(f);
	ck_assert_int_eq(rp, want);
	ck_assert_int_eq(rl, want);
	ck_assert_str_eq(err_prepare, toggle_last_error(f->agent));
	ck_assert_msg(strstr(err_prepare, says), "'%s' does not say '%s'", err_prepare, says);
	for (size_t i = 0; i < N64(struct toggle_stats); i++)
		ck_assert_msg(c1.st[i] - c0.st[i] == c2.st[i] - c1.st[i],
			      "stats field %zu: prepare moved it by %llu, launch by %llu", i,
			      (unsigned long long)(c1.st[i] - c0.st[i]),
			      (unsigned long long)(c2.st[i] - c1.st[i]));
	for (size_t i = 0; i < N64(struct toggle_anomalies); i++)
		ck_assert_msg(c1.an[i] - c0.an[i] == c2.an[i] - c1.an[i],
			      "anomaly field %zu: prepare moved it by %llu, launch by %llu", i,
			      (unsigned long long)(c1.an[i] - c0.an[i]),
			      (unsigned long long)(c2.an[i] - c1.an[i]));
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.launches_refused, c0.st[offsetof(struct toggle_stats, launches_refused) / 8] + 2);
	ck_assert_uint_eq(c2.sim_launches, c0.sim_launches);
	ck_assert_uint_eq(c2.sim_sets, c0.sim_sets);
	ck_assert_uint_eq(c2.sim_memops, c0.sim_memops);
}

/* Unbound, forgotten, late (host modes); NULL agent; NULL exec.  _i: lazy, eager. */
START_TEST(refusals_host)
{
	struct pfx *f = pfx_open(modes[_i], true);
	/* Captured, never bound. */
	pfx_capture(f, 0, false);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[0], f->graph[0]), CUDA_SUCCESS);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_EUNBOUND, "no bound exec");
	/* Bound, then forgotten. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	step(f, 0, 0x1);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert_int_eq(toggle_graph_forget(f->agent, f->graph[0]), 0);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_ESTALE, "forgotten");
	/* A producer recorded after the capture window closed: the graph is late. */
	CUgraph late;
	CUgraphExec late_exec;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_compute, f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f->agent, f->s[0], (struct toggle_hook){0, 1}),
			 TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &late), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&late_exec, late), CUDA_SUCCESS);
	same_refusal(f, late, late_exec, TOGGLE_ECAPTURE, "capture it again");
	/* A NULL exec for a bound graph. */
	pfx_capture(f, 1, false);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[1], &f->exec[1]), 0);
	same_refusal(f, f->graph[1], NULL, TOGGLE_EINVAL, "NULL exec");
	/* No agent. */
	ck_assert_int_eq(toggle_graph_prepare(NULL, f->graph[1], f->exec[1], f->s[0]), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_launch(NULL, f->graph[1], f->exec[1], f->s[0]), TOGGLE_EINVAL);
	pfx_close(f);
}
END_TEST

/* Strict device mode: a graph without a planner is refused at bind, then at launch. */
START_TEST(refusals_device_strict)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_capture(f, 0, false);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]),
			 TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(f->exec[0]);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_ENOTSUP, "strict device mode");
	pfx_close(f);
}
END_TEST

/*
 * A driver call that fails while bringing the exec to the set refuses the
 * prepare like the launch (same code, counted, nothing launched); once the
 * driver works again, prepare + own launch runs the set.  _i: lazy (a node
 * set fails), device (the mask write fails).
 */
START_TEST(refusals_driver_failure)
{
	enum toggle_mode mode = _i ? TOGGLE_MODE_DEVICE : TOGGLE_MODE_LAZY;
	enum toggle_sim_op op = _i ? TOGGLE_SIM_OP_BATCH_MEM_OP : TOGGLE_SIM_OP_NODE_SET_ENABLED;
	const char *says = _i ? "cuStreamBatchMemOp" : "cuGraphNodeSetEnabled";
	struct pfx *f = pfx_open(mode, true);
	pfx_graphs(f);
	step(f, 0, 0x0000ffu);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	step(f, 1, 0xff0000u);
	int rc[2];
	struct counters c[3];
	c[0] = counters(f);
	for (int k = 0; k < 2; k++) {
		toggle_sim_fail(f->sim, op, 0, 1, CUDA_ERROR_INVALID_VALUE);
		rc[k] = k == 0 ? prepare(f, 0, 0) : via_launch(f, 0, 0);
		ck_assert_msg(strstr(toggle_last_error(f->agent), says), "%s",
			      toggle_last_error(f->agent));
		c[k + 1] = counters(f);
	}
	ck_assert_int_eq(rc[0], TOGGLE_ECUDA);
	ck_assert_int_eq(rc[1], TOGGLE_ECUDA);
	size_t refused = offsetof(struct toggle_stats, launches_refused) / 8;
	size_t driver = offsetof(struct toggle_anomalies, driver_errors) / 8;
	for (int k = 0; k < 2; k++) {
		ck_assert_uint_eq(c[k + 1].st[refused], c[k].st[refused] + 1);
		ck_assert_uint_eq(c[k + 1].an[driver], c[k].an[driver] + 1);
		ck_assert_uint_eq(c[k + 1].sim_launches, c[k].sim_launches);
	}
	ck_assert_uint_eq(gstatus(f, 0).replays, 1); /* refusals are not launches */
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert_uint_eq(pfx_check(f), 2);
	ck_assert_uint_eq(f->expect[0][1], 0xff0000u);
	pfx_close(f);
}
END_TEST

/* ---- 4. accounting ------------------------------------------------------------------ */

/* Replays, last step, the agent's launches; unrelated graphs: 0 and nothing done. */
START_TEST(accounting_and_unrelated)
{
	struct pfx *f = pfx_open(modes[_i], true);
	pfx_graphs(f);
	/* A graph without producers. */
	CUgraph other;
	CUgraphExec other_exec;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_other, f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &other), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&other_exec, other), CUDA_SUCCESS);

	for (int64_t s = 0; s < 5; s++) {
		step(f, 10 + s, (uint32_t)(0x3u << s));
		struct toggle_graph_status before = gstatus(f, 1);
		uint64_t launches = stats(f).launches;
		ck_assert_int_eq(via_prepare(f, 1, (int)s % NS), 0);
		struct toggle_graph_status after = gstatus(f, 1);
		ck_assert_uint_eq(after.replays, before.replays + 1);
		ck_assert_int_eq(after.last_step, 10 + s);
		ck_assert_uint_eq(stats(f).launches, launches + 1);
		ck_assert_uint_eq(gstatus(f, 0).replays, 0); /* another graph: untouched */
	}
	pfx_check(f);

	struct counters c0 = counters(f);
	ck_assert_int_eq(toggle_graph_prepare(f->agent, other, other_exec, f->s[0]), 0);
	struct counters c1 = counters(f);
	ck_assert_mem_eq(c0.st, c1.st, sizeof(c0.st));
	ck_assert_mem_eq(c0.an, c1.an, sizeof(c0.an));
	ck_assert_uint_eq(c1.sim_launches, c0.sim_launches); /* the caller launches it */
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->other_runs, 0);
	/* launch's way with it, for comparison: launched and counted as unrelated. */
	ck_assert_int_eq(toggle_graph_launch(f->agent, other, other_exec, f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->other_runs, 1);
	ck_assert_uint_eq(stats(f).launches_unrelated,
			  c0.st[offsetof(struct toggle_stats, launches_unrelated) / 8] + 1);
	ck_assert_int_eq(toggle_sim_exec_destroy(other_exec), CUDA_SUCCESS);
	pfx_close(f);
}
END_TEST

/*
 * Device mode's launch index: a launch made through prepare whose planner
 * fails two device calls is reported as tainted at its own step (the
 * report maps planner runs to steps through the launches accounted), and a
 * strict agent then refuses the prepare as it refuses the launch.
 */
#define TAINT_A 0x0000ffu /* resid_post:0-7 */
#define TAINT_B 0x00ff00u /* attn_out:0-7 */
/* The launch from A to B calls h0, h8, h1, h9, h2, ...: the 4th and 5th
 * fail, so h9 stays off and h2 stays on in that launch. */
#define TAINT_RAN (TAINT_B ^ (1u << 9) ^ (1u << 2))

START_TEST(device_taint_step_through_prepare)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_capture(f, 0, true);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	toggle_sim_set_deferred(f->sim, true, 7);
	step(f, 0, TAINT_A);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0); /* step 0 has two launches */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, NH + 3, 2, CUDA_ERROR_INVALID_VALUE);
	step(f, 1, TAINT_B);
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	toggle_sim_synchronize(f->sim);
	f->expect[0][2] = TAINT_RAN; /* what that launch really ran */
	pfx_check(f);
	ck_assert_int_eq(toggle_step_begin(f->agent, 2, NULL), 0); /* reads the report */
	struct toggle_taint t;
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, 1);
	ck_assert_uint_eq(t.lost, 0);
	ck_assert_int_eq(t.last_step, 1);
	ck_assert_int_eq(gstatus(f, 0).tainted_step, 1);
	ck_assert(gstatus(f, 0).blocked);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_ECUDA, "step 1");
	/* A bind re-arms it: prepare + own launch is clean again. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_int_eq(via_prepare(f, 0, 2), 0);
	pfx_check(f);
	pfx_close(f);
}
END_TEST

/* ---- 5. device mode on two streams ---------------------------------------------- */

/*
 * Launch on stream 0, then a new set prepared on stream 1: the mask words
 * are written on stream 1 after a join on stream 0 (the launch there has
 * not run yet: deferred), and the launch on stream 1 runs the new set while
 * the one on stream 0 keeps the old.  Then back to stream 0 through
 * toggle_graph_launch: joined again.
 */
START_TEST(device_two_streams)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_graphs(f);
	for (uint64_t seed = 1; seed <= 16; seed++) {
		toggle_sim_set_deferred(f->sim, true, seed);
		int64_t s0 = (int64_t)seed * 10;
		step(f, s0, 0x00000fu);
		ck_assert_int_eq(via_prepare(f, 0, 0), 0);
		uint64_t joins = stats(f).stream_joins;
		uint64_t memops = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP);
		step(f, s0 + 1, 0xf00000u);
		ck_assert_int_eq(via_prepare(f, 0, 1), 0);
		ck_assert_uint_eq(stats(f).stream_joins, joins + 1);
		ck_assert_uint_gt(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP), memops);
		step(f, s0 + 2, 0x0f0f0fu);
		ck_assert_int_eq(via_launch(f, 0, 0), 0);
		ck_assert_uint_eq(stats(f).stream_joins, joins + 2);
		pfx_check(f);
	}
	pfx_close(f);
}
END_TEST

static Suite *prepare_suite(void)
{
	Suite *s = suite_create("prepare");
	TCase *tc = tcase_create("prepare");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, prepare_runs_the_set, 0, 3);
	tcase_add_loop_test(tc, prepare_runs_the_set_streams, 0, 3);
	tcase_add_loop_test(tc, prepare_without_launch_then_prepare, 0, 3);
	tcase_add_loop_test(tc, device_unlaunched_prepare_other_stream, 0, 2);
	tcase_add_loop_test(tc, prepare_never_picks_the_bare_exec, 0, 2);
	tcase_add_loop_test(tc, refusals_host, 0, 2);
	tcase_add_test(tc, refusals_device_strict);
	tcase_add_loop_test(tc, refusals_driver_failure, 0, 2);
	tcase_add_loop_test(tc, accounting_and_unrelated, 0, 3);
	tcase_add_test(tc, device_taint_step_through_prepare);
	tcase_add_test(tc, device_two_streams);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(prepare_suite());
}
