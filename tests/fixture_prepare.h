/*
 * fixture_prepare.h - the shared fixture of the prepare suites
 * (tests/check_prepare_*.c): the simulated kernels (a producer per hook that
 * logs what ran, a mark per launch), an agent in lazy, eager or device mode
 * on the simulator with G graphs (struct pfx), captures, prepares and
 * launches, and the check of what ran against the set of each launch.
 * Moved out of check_prepare.c (issue 29); static inline, as the helpers
 * are small and only these suites use them.
 */
#ifndef FIXTURE_PREPARE_H
#define FIXTURE_PREPARE_H

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

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

static const enum toggle_mode modes[3] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
					  TOGGLE_MODE_DEVICE};

/* ---- the simulated kernels ------------------------------------------------ */

static inline void k_produce(void **p)
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

static inline void k_mark(void **p)
{
	struct pfx *f;
	int graph;
	memcpy(&f, p[0], sizeof(f));
	memcpy(&graph, p[1], sizeof(graph));
	f->runs[graph]++;
}

static inline void k_compute(void *arg)
{
	(void)arg;
}

static inline void k_other(void *arg)
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

static inline struct pfx *pfx_open(enum toggle_mode mode, bool strict)
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

static inline void pfx_close(struct pfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
	free(f);
}

static inline CUlaunchConfig launch_cfg(CUstream s)
{
	return (CUlaunchConfig){.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
				.blockDimY = 1, .blockDimZ = 1, .hStream = s};
}

/*
 * Capture graph gi on stream 0: the planner (device mode; nothing otherwise),
 * a mark kernel, then per layer a compute kernel and NT producers.  planner
 * false: no planner (a strict device agent refuses such a graph).
 */
static inline void pfx_capture(struct pfx *f, int gi, bool planner)
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
static inline void pfx_graphs(struct pfx *f)
{
	for (int g = 0; g < G; g++) {
		pfx_capture(f, g, true);
		ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[g], &f->exec[g]), 0);
	}
}

static inline uint32_t set_bits(const struct toggle_set *s)
{
	uint32_t m = 0;
	for (int h = 0; h < NH; h++)
		if (toggle_set_contains(s, (struct toggle_hook){(uint16_t)(h / NL), (uint16_t)(h % NL)}))
			m |= 1u << h;
	return m;
}

static inline struct toggle_set set_of(uint32_t m)
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

static inline void step(struct pfx *f, int64_t n, uint32_t m)
{
	struct toggle_set s = set_of(m);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, n, NULL), 0);
}

/* Note that graph gi was launched now: it must run the current set. */
static inline void noted(struct pfx *f, int gi)
{
	struct toggle_set cur;
	toggle_current_set(f->agent, &cur);
	ck_assert_uint_lt(f->launched[gi], MAX_LAUNCHES);
	f->expect[gi][f->launched[gi]++] = set_bits(&cur);
}

static inline int via_launch(struct pfx *f, int gi, int si)
{
	int rc = toggle_graph_launch(f->agent, f->graph[gi], f->exec[gi], f->s[si]);
	if (rc == 0)
		noted(f, gi);
	return rc;
}

static inline int prepare(struct pfx *f, int gi, int si)
{
	return toggle_graph_prepare(f->agent, f->graph[gi], f->exec[gi], f->s[si]);
}

/* The caller's own launch after a prepare (what torch's replay does). */
static inline void own_launch(struct pfx *f, int gi, int si)
{
	ck_assert_int_eq(toggle_sim_graph_launch(f->exec[gi], f->s[si]), CUDA_SUCCESS);
	noted(f, gi);
}

static inline int via_prepare(struct pfx *f, int gi, int si)
{
	int rc = prepare(f, gi, si);
	if (rc == 0)
		own_launch(f, gi, si);
	return rc;
}

/* Run everything queued; every launch ran exactly its set.  Returns launches checked. */
static inline uint64_t pfx_check(struct pfx *f)
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

static inline struct toggle_stats stats(struct pfx *f)
{
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	return st;
}

static inline struct toggle_graph_status gstatus(struct pfx *f, int gi)
{
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph[gi], &gs), 0);
	return gs;
}

#endif
