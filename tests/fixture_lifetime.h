/*
 * fixture_lifetime.h - the shared fixture of the lifetime suites
 * (tests/check_lifetime_*.c): the simulator with handle reuse on, an agent,
 * producer and stranger kernels that log what ran (struct lfx), our graph
 * of NP recorded producers and a stranger's of up to NS kernels, steps and
 * launches.  Moved out of check_lifetime.c (issue 29); static inline, as the
 * helpers are small and names like step and launch would be poor globals.
 */
#ifndef FIXTURE_LIFETIME_H
#define FIXTURE_LIFETIME_H

#include <stdio.h>
#include <string.h>

#include "agent_impl.h" /* white-box: the driver table (user objects withheld), counters */
#include "fixture_catalog.h"
#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

#define NP 8   /* producers of the recorded graph */
#define NS 32  /* kernels of the stranger */
struct lfx;

struct kern {
	struct lfx *f;
	int id; /* producers: hook 0..NH-1; other kernels: 100 + i */
};

/* The kernel log: which kernels ran, in order, since the last reset. */
struct lfx {
	struct toggle_sim *sim;
	CUstream s;
	struct toggle_agent *agent;
	CUmodule mod;
	CUfunction produce;
	struct kern prod[NH];
	struct kern other[NS];
	int log[4 * NS];
	unsigned n_log;
	uint32_t ran;     /* bit per producer hook since the last reset */
	unsigned others;  /* stranger kernels since the last reset */
};

static inline void k_run(void *arg)
{
	struct kern *k = arg;
	struct lfx *f = k->f;
	if (f->n_log < sizeof(f->log) / sizeof(f->log[0]))
		f->log[f->n_log++] = k->id;
	if (k->id < 100)
		f->ran |= 1u << k->id;
	else
		f->others++;
}

static inline void k_produce(void **p)
{
	struct lfx *f;
	int hook;
	memcpy(&f, p[0], sizeof(f));
	memcpy(&hook, p[1], sizeof(hook));
	f->ran |= 1u << hook;
}

static const struct toggle_sim_function functions[] = {
	{.name = "produce", .fn = k_produce, .n_params = 2, .param_size = {sizeof(void *), sizeof(int)}},
};
static const struct toggle_sim_image image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC, .n_functions = 1, .functions = functions};

/* ---- fixture ----------------------------------------------------------------- */

static inline void lfx_sim(struct lfx *f, int driver_version)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	if (driver_version)
		toggle_sim_set_driver_version(f->sim, driver_version);
	toggle_sim_set_handle_reuse(f->sim, true);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_load(f->sim, &f->mod, &image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&f->produce, f->mod, "produce"), CUDA_SUCCESS);
	for (int h = 0; h < NH; h++)
		f->prod[h] = (struct kern){f, h};
	for (int i = 0; i < NS; i++)
		f->other[i] = (struct kern){f, 100 + i};
}

static inline struct toggle_agent *lfx_agent(struct lfx *f, enum toggle_mode mode)
{
	struct toggle_config cfg = {
		.name = "lifetime-test",
		.catalog = catalog,
		.mode = mode,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
	struct toggle_agent *a = NULL;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	ck_assert_int_eq(toggle_agent_mode(a), mode);
	return a;
}

static inline void lfx_open(struct lfx *f, enum toggle_mode mode, int driver_version)
{
	lfx_sim(f, driver_version);
	f->agent = lfx_agent(f, mode);
}

static inline void lfx_close(struct lfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
}

static inline void step(struct lfx *f, int64_t st, uint32_t bits)
{
	struct toggle_set want = set_of(bits);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &want), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, st, NULL), 0);
}

/* NP host producers, hooks 0..NP-1, recorded by the agent. */
static inline CUgraph capture_ours(struct lfx *f, CUgraphNode nodes[NP])
{
	CUgraph g;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s), CUDA_SUCCESS);
	for (int h = 0; h < NP; h++) {
		ck_assert_int_eq(toggle_sim_launch_kernel(f->s, k_run, &f->prod[h]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_record_producer(f->agent, f->s, hook_of(h)), 0);
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s, &g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	if (nodes) {
		size_t n = NP;
		ck_assert_int_eq(toggle_sim_graph_get_nodes(g, nodes, &n), CUDA_SUCCESS);
		ck_assert_uint_eq(n, NP);
	}
	return g;
}

/* Another component's graph of n kernels: the agent never hears of its capture. */
static inline CUgraph capture_stranger(struct lfx *f, int n)
{
	CUgraph g;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s), CUDA_SUCCESS);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(toggle_sim_launch_kernel(f->s, k_run, &f->other[i]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s, &g), CUDA_SUCCESS);
	return g;
}

/* The stranger got the dead graph's handle and its NP node handles (the reuse the issue is about). */
static inline void assert_reused(CUgraph stranger, CUgraph dead,
				 const CUgraphNode dead_nodes[NP])
{
	ck_assert_ptr_eq(stranger, dead);
	CUgraphNode v[NS];
	size_t n = NS;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(stranger, v, &n), CUDA_SUCCESS);
	unsigned shared = 0;
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < NP; k++)
			shared += v[i] == dead_nodes[k];
	ck_assert_uint_eq(shared, NP);
}

static inline void log_reset(struct lfx *f)
{
	f->n_log = 0;
	f->ran = 0;
	f->others = 0;
}

static inline int launch(struct lfx *f, CUgraph g, CUgraphExec e)
{
	log_reset(f);
	int rc = toggle_graph_launch(f->agent, g, e, f->s);
	toggle_sim_synchronize(f->sim);
	return rc;
}

#endif
