/*
 * fixture_agent.h - the shared fixture of the agent suites
 * (tests/check_agent_*.c): a simulator with one stream and an agent
 * (struct fx), producer kernels that mark their hook as executed and a
 * compute kernel, graphs of NL layers x NT hook types captured and bound,
 * launches, the set helpers.  Moved out of check_agent.c (issue 29); static
 * inline, as the helpers are small and names like spec would be poor globals.
 */
#ifndef FIXTURE_AGENT_H
#define FIXTURE_AGENT_H

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

#define NT 3
#define NL 8
#define MAX_GRAPHS 4

/* One producer kernel's host body: marks its hook as executed. */
struct producer {
	struct fx *fx;
	struct toggle_hook hook;
};

struct fx {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	struct toggle_set ran;   /* producers executed since the last reset */
	unsigned compute_runs;
	struct producer prod[MAX_GRAPHS][NT * NL];
	CUgraph graph[MAX_GRAPHS];
	CUgraphExec exec[MAX_GRAPHS];
};

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

static inline void producer_fn(void *arg)
{
	struct producer *p = arg;
	ck_assert_int_eq(toggle_set_add(&p->fx->ran, p->hook), 0);
}

static inline void compute_fn(void *arg)
{
	((struct fx *)arg)->compute_runs++;
}

static inline struct toggle_config fx_config(struct fx *f, enum toggle_mode mode)
{
	return (struct toggle_config){
		.name = "test-agent",
		.group = "tests",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
}

static inline void fx_open(struct fx *f, enum toggle_mode mode)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->stream), CUDA_SUCCESS);
	struct toggle_config cfg = fx_config(f, mode);
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
}

/* Only the main exec: these tests count its node toggles, which the
 * producer-free exec skips at empty sets (check_bare.c tests that one). */
static inline void fx_open_main(struct fx *f, enum toggle_mode mode)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->stream), CUDA_SUCCESS);
	struct toggle_config cfg = fx_config(f, mode);
	cfg.no_bare_exec = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
}

static inline void fx_close(struct fx *f)
{
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
}

/* Capture graph i: per layer a compute kernel, then one producer per hook type. */
static inline void fx_capture(struct fx *f, int i, bool producers)
{
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	for (uint16_t l = 0; l < NL; l++) {
		ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, compute_fn, f), CUDA_SUCCESS);
		for (uint16_t t = 0; producers && t < NT; t++) {
			struct producer *p = &f->prod[i][t * NL + l];
			*p = (struct producer){.fx = f, .hook = {t, l}};
			ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, producer_fn, p), CUDA_SUCCESS);
			ck_assert_int_eq(toggle_record_producer(f->agent, f->stream, p->hook), 0);
		}
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph[i]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[i], f->graph[i]), CUDA_SUCCESS);
}

static inline void fx_capture_bound(struct fx *f, int i)
{
	fx_capture(f, i, true);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[i], f->exec[i]), 0);
}

/* Launch graph i through the agent; returns the code and what ran. */
static inline int fx_launch(struct fx *f, int i, struct toggle_set *ran)
{
	toggle_set_clear(&f->ran);
	int rc = toggle_graph_launch(f->agent, f->graph[i], f->exec[i], f->stream);
	if (ran)
		*ran = f->ran;
	return rc;
}

static inline uint64_t set_calls(struct fx *f)
{
	return toggle_sim_calls(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED);
}

static inline struct toggle_set spec(const char *text)
{
	static const struct toggle_catalog cat = {.type_names = type_names, .n_types = NT,
						  .n_layers = NL};
	struct toggle_set s;
	char err[128];
	int rc = toggle_set_parse(&cat, text, &s, err, sizeof(err));
	ck_assert_msg(rc == 0, "spec '%s': %s", text, err);
	return s;
}

static inline void assert_set_eq(const struct toggle_set *got, const struct toggle_set *want)
{
	static const struct toggle_catalog cat = {.type_names = type_names, .n_types = NT,
						  .n_layers = NL};
	char g[512], w[512];
	toggle_set_format(&cat, got, g, sizeof(g));
	toggle_set_format(&cat, want, w, sizeof(w));
	ck_assert_msg(toggle_set_equal(got, want), "ran '%s', expected '%s'", g, w);
}

#endif
