/*
 * fixture_bare.h - the shared fixture of the bare-exec suites
 * (tests/check_bare_*.c): a simulator and an agent (struct bfx), graphs of
 * kernels that record their id when they run (producers of NT_COVERED of
 * the NT hook types, and plain kernels), the capture, step and launch
 * helpers and the check of what a launch ran; the device-mode image.
 * Moved out of check_bare.c (issue 29); static inline, as the helpers are
 * small and names like step and spec would be poor global symbols.
 */
#ifndef FIXTURE_BARE_H
#define FIXTURE_BARE_H

#include <stdio.h>
#include <string.h>

#include "agent_impl.h"
#include "testutil.h"
#include "toggle.h"
#include "toggle_shm.h"
#include "toggle_sim.h"

#define NT 3 /* hook types in the catalog; graphs cover NT_COVERED of them */
#define NT_COVERED 2
#define NL 8
#define MAX_K 128
#define MAX_LOG 1024

struct bfx;

/* One kernel of a captured graph: records its id when it runs. */
struct kern {
	struct bfx *f;
	int id;
	bool producer;
	struct toggle_hook hook;
};

struct bfx {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	struct kern k[MAX_K]; /* in capture order */
	int nk;
	int log[MAX_LOG];
	int nlog;
	CUgraph graph;
	CUgraphExec exec;
};

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};
/* attn_out is not covered, and its bitmap words lie between those of the two covered. */
static const uint16_t covered_types[NT_COVERED] = {0, 2};

static inline void k_run(void *arg)
{
	struct kern *k = arg;
	ck_assert_int_lt(k->f->nlog, MAX_LOG);
	k->f->log[k->f->nlog++] = k->id;
}

static inline struct toggle_config bfx_config(struct bfx *f, enum toggle_mode mode)
{
	return (struct toggle_config){
		.name = "bare-test",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
}

/* A fixture with its simulator and stream, no agent yet (the caller opens one with a
 * config of its own: bfx_config, then toggle_agent_open into f->agent). */
static inline struct bfx *bfx_new(int driver_version)
{
	struct bfx *f = calloc(1, sizeof(*f));
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	if (driver_version)
		toggle_sim_set_driver_version(f->sim, driver_version);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->stream), CUDA_SUCCESS);
	return f;
}

/* driver_version 0: the simulator's default (no graph or exec ids); no_full: no full exec
 * (host modes: every set the bare exec does not fit runs the main exec then). */
static inline struct bfx *bfx_open_opts(enum toggle_mode mode, bool no_bare, bool no_full,
					int driver_version)
{
	struct bfx *f = bfx_new(driver_version);
	struct toggle_config cfg = bfx_config(f, mode);
	cfg.no_bare_exec = no_bare;
	cfg.no_full_exec = no_full;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	return f;
}

/* Host modes' second execs cloned, not assembled (toggle_config.clone_execs): for the
 * tests of the clone's own build. */
static inline struct bfx *bfx_open_clones(enum toggle_mode mode, int driver_version)
{
	struct bfx *f = bfx_new(driver_version);
	struct toggle_config cfg = bfx_config(f, mode);
	cfg.clone_execs = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	return f;
}

static inline struct bfx *bfx_open_drv(enum toggle_mode mode, bool no_bare, int driver_version)
{
	return bfx_open_opts(mode, no_bare, false, driver_version);
}

static inline struct bfx *bfx_open_cfg(enum toggle_mode mode, bool no_bare)
{
	return bfx_open_drv(mode, no_bare, 0);
}

static inline struct bfx *bfx_open(enum toggle_mode mode)
{
	return bfx_open_cfg(mode, false);
}

static inline void bfx_close(struct bfx *f)
{
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
	free(f);
}

static inline void add_kernel(struct bfx *f, bool producer, struct toggle_hook hook)
{
	ck_assert_int_lt(f->nk, MAX_K);
	struct kern *k = &f->k[f->nk];
	*k = (struct kern){.f = f, .id = f->nk, .producer = producer, .hook = hook};
	f->nk++;
	ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, k_run, k), CUDA_SUCCESS);
	if (producer)
		ck_assert_int_eq(toggle_record_producer(f->agent, f->stream, hook), 0);
}

/*
 * A graph that starts and ends with producers, has runs of consecutive
 * producers and a memset node: even layers put their producers before the
 * layer's compute kernel, odd layers after it.  Only NT_COVERED hook types
 * have producers.  Instantiated, not bound.
 */
static inline void bfx_capture(struct bfx *f)
{
	f->nk = 0;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	for (uint16_t l = 0; l < NL; l++) {
		if (l % 2)
			add_kernel(f, false, (struct toggle_hook){0, 0});
		for (int t = 0; t < NT_COVERED; t++)
			add_kernel(f, true, (struct toggle_hook){covered_types[t], l});
		if (l % 2 == 0)
			add_kernel(f, false, (struct toggle_hook){0, 0});
		if (l == 3)
			ck_assert_int_eq(toggle_sim_memset(f->stream), CUDA_SUCCESS);
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
}

static inline void bfx_capture_bound(struct bfx *f)
{
	bfx_capture(f);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
}

static inline struct toggle_set spec(const char *text)
{
	static const struct toggle_catalog cat = {.type_names = type_names, .n_types = NT,
						  .n_layers = NL};
	struct toggle_set s;
	char err[128];
	ck_assert_msg(toggle_set_parse(&cat, text, &s, err, sizeof(err)) == 0, "%s: %s", text, err);
	return s;
}

/* The kernels a launch under set s must run, in order: every non-producer, and the producers in s. */
static inline int expected(const struct bfx *f, const struct toggle_set *s, int *out)
{
	int n = 0;
	for (int i = 0; i < f->nk; i++)
		if (!f->k[i].producer || toggle_set_contains(s, f->k[i].hook))
			out[n++] = f->k[i].id;
	return n;
}

/* Launch through the agent and check the log against set s. */
static inline void launch_check(struct bfx *f, const struct toggle_set *s)
{
	int want[MAX_K];
	int n = expected(f, s, want);
	f->nlog = 0;
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream), 0);
	ck_assert_int_eq(f->nlog, n);
	for (int i = 0; i < n; i++)
		ck_assert_msg(f->log[i] == want[i], "kernel %d of the launch: ran %d, expected %d", i,
			      f->log[i], want[i]);
}

static inline bool set_fits(const struct toggle_set *s)
{
	for (int t = 0; t < NT_COVERED; t++)
		for (uint16_t l = 0; l < NL; l++)
			if (toggle_set_contains(s, (struct toggle_hook){covered_types[t], l}))
				return false;
	return true;
}

/* Whether s enables every hook the fixture's graphs cover (the full exec's sets). */
static inline bool set_covers_all(const struct toggle_set *s)
{
	for (int t = 0; t < NT_COVERED; t++)
		for (uint16_t l = 0; l < NL; l++)
			if (!toggle_set_contains(s, (struct toggle_hook){covered_types[t], l}))
				return false;
	return true;
}

/* Host modes' all-on exec (bare.c) as a walk of sets sees it: built at the
 * step_begin after all on ran on a full exec that a set in between had set;
 * from then on all on runs it, with no node set, and the full exec keeps the
 * states of the last set in between. */
struct allx_model {
	bool toggled, pending, built;
};

/* At a step_begin: the build the last step queued. */
static inline void allx_model_step(struct allx_model *m)
{
	m->built = m->built || m->pending;
	m->pending = false;
}

/* Whether the all-on exec runs set s this step (after allx_model_step); else
 * what s does to the model (the bare or the full exec runs it). */
static inline bool allx_model_runs(struct allx_model *m, const struct toggle_set *s)
{
	if (set_fits(s))
		return false;
	bool all = set_covers_all(s);
	if (all && m->built)
		return true;
	if (!all)
		m->toggled = true;
	else if (m->toggled)
		m->pending = true;
	return false;
}

static inline struct toggle_graph_status gstatus(struct bfx *f)
{
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph, &gs), 0);
	return gs;
}

static inline uint64_t set_calls(struct bfx *f)
{
	return toggle_sim_calls(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED);
}

static inline void step(struct bfx *f, int64_t n, const struct toggle_set *s)
{
	ck_assert_int_eq(toggle_set_enabled(f->agent, s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, n, NULL), 0);
}

static inline struct toggle_stats bfx_stats(struct bfx *f)
{
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	return st;
}

/* Steps a set must hold before its set execs are built (bare.c's TG_SETX_STEADY). */
#define STEADY 8

/* The node sets that bring an exec whose producers hold *state (per kernel of
 * f, true: on) to set s; *state then holds s. */
static inline uint64_t sets_to(const struct bfx *f, bool *state, const struct toggle_set *s)
{
	uint64_t n = 0;
	for (int i = 0; i < f->nk; i++) {
		bool on = toggle_set_contains(s, f->k[i].hook);
		if (f->k[i].producer && state[i] != on) {
			state[i] = on;
			n++;
		}
	}
	return n;
}

static inline void k_devprod(void **p)
{
	struct kern *k;
	memcpy(&k, p[0], sizeof(k));
	k_run(k);
}

static const struct toggle_sim_function dev_functions[] = {
	{.name = "produce", .fn = k_devprod, .n_params = 1, .param_size = {sizeof(void *)}},
};
static const struct toggle_sim_image dev_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC, .n_functions = 1, .functions = dev_functions};

#endif
