/*
 * check_bare.c - the producer-free ("bare") exec on the simulator: what each
 * launch ran (every kernel records itself, so a launch's log proves that no
 * producer ran and that every other kernel ran in capture order), which exec
 * ran, the main exec keeping its node states, rebind, re-instantiation,
 * forget, close, the per-agent off switch, build failures, driver failures
 * while switching between the two execs, the status lane's flags, device
 * mode's decision, and the simulator's model of clones and graph edits.
 */
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

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};
/* attn_out is not covered, and its bitmap words lie between those of the two covered. */
static const uint16_t covered_types[NT_COVERED] = {0, 2};

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

static void k_run(void *arg)
{
	struct kern *k = arg;
	ck_assert_int_lt(k->f->nlog, MAX_LOG);
	k->f->log[k->f->nlog++] = k->id;
}

static struct toggle_config bfx_config(struct bfx *f, enum toggle_mode mode)
{
	return (struct toggle_config){
		.name = "bare-test",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
}

/* driver_version 0: the simulator's default (no graph or exec ids). */
static struct bfx *bfx_open_drv(enum toggle_mode mode, bool no_bare, int driver_version)
{
	struct bfx *f = calloc(1, sizeof(*f));
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	if (driver_version)
		toggle_sim_set_driver_version(f->sim, driver_version);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->stream), CUDA_SUCCESS);
	struct toggle_config cfg = bfx_config(f, mode);
	cfg.no_bare_exec = no_bare;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	return f;
}

static struct bfx *bfx_open_cfg(enum toggle_mode mode, bool no_bare)
{
	return bfx_open_drv(mode, no_bare, 0);
}

static struct bfx *bfx_open(enum toggle_mode mode)
{
	return bfx_open_cfg(mode, false);
}

static void bfx_close(struct bfx *f)
{
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
	free(f);
}

static void add_kernel(struct bfx *f, bool producer, struct toggle_hook hook)
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
static void bfx_capture(struct bfx *f)
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

static void bfx_capture_bound(struct bfx *f)
{
	bfx_capture(f);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
}

static struct toggle_set spec(const char *text)
{
	static const struct toggle_catalog cat = {.type_names = type_names, .n_types = NT,
						  .n_layers = NL};
	struct toggle_set s;
	char err[128];
	ck_assert_msg(toggle_set_parse(&cat, text, &s, err, sizeof(err)) == 0, "%s: %s", text, err);
	return s;
}

/* The kernels a launch under set s must run, in order: every non-producer, and the producers in s. */
static int expected(const struct bfx *f, const struct toggle_set *s, int *out)
{
	int n = 0;
	for (int i = 0; i < f->nk; i++)
		if (!f->k[i].producer || toggle_set_contains(s, f->k[i].hook))
			out[n++] = f->k[i].id;
	return n;
}

/* Launch through the agent and check the log against set s. */
static void launch_check(struct bfx *f, const struct toggle_set *s)
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

static bool set_fits(const struct toggle_set *s)
{
	for (int t = 0; t < NT_COVERED; t++)
		for (uint16_t l = 0; l < NL; l++)
			if (toggle_set_contains(s, (struct toggle_hook){covered_types[t], l}))
				return false;
	return true;
}

static struct toggle_graph_status gstatus(struct bfx *f)
{
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph, &gs), 0);
	return gs;
}

static uint64_t set_calls(struct bfx *f)
{
	return toggle_sim_calls(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED);
}

static void step(struct bfx *f, int64_t n, const struct toggle_set *s)
{
	ck_assert_int_eq(toggle_set_enabled(f->agent, s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, n, NULL), 0);
}

/* ---- the bare exec runs no producer, every other kernel, in order ------------ */

static const char *const walk[] = {
	"none", "resid_post:1", "attn_out:*", "mlp_out:0-3,resid_post:7", "none", "all",
	"attn_out:2", "resid_post:*", "none",
};

START_TEST(test_bare_runs_no_producer_in_order)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bare_exec);
	ck_assert(!gs.bare_running);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2); /* the application's and the bare one */
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 1); /* the clone is gone */
	uint64_t bare_launches = 0;
	for (size_t i = 0; i < sizeof(walk) / sizeof(walk[0]); i++) {
		struct toggle_set s = spec(walk[i]);
		bool fits = set_fits(&s);
		uint64_t calls = set_calls(f);
		step(f, (int64_t)i, &s);
		uint64_t launches = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
		for (int rep = 0; rep < 2; rep++)
			launch_check(f, &s);
		/* One driver launch per launch, whichever exec; no node set to switch to the bare one. */
		ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH) - launches, 2);
		if (fits)
			ck_assert_uint_eq(set_calls(f) - calls, 0);
		gs = gstatus(f);
		ck_assert_msg(gs.bare_running == fits, "set %s: bare_running %d", walk[i],
			      gs.bare_running);
		bare_launches += fits ? 2 : 0;
		ck_assert_uint_eq(gs.bare_replays, bare_launches);
		ck_assert_uint_eq(gs.replays, 2 * (i + 1));
	}
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 1);
	ck_assert_uint_eq(st.bare_build_failures, 0);
	ck_assert_uint_eq(st.bare_switches, 9); /* every step of the walk flips: bare, main, ... */
	ck_assert_uint_eq(st.launches, 2 * sizeof(walk) / sizeof(walk[0]));
	bfx_close(f);
}
END_TEST

/* While the bare exec runs, the main exec keeps its nodes: coming back costs only the diff. */
START_TEST(test_bare_main_keeps_its_state)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set a = spec("resid_post:0-3"), none = spec("none"), b = spec("resid_post:2-5");
	step(f, 1, &a);
	launch_check(f, &a);
	uint64_t c = set_calls(f);
	step(f, 2, &none);
	launch_check(f, &none);
	ck_assert_uint_eq(set_calls(f) - c, 0);
	ck_assert(gstatus(f).bare_running);
	step(f, 3, &b);
	launch_check(f, &b);
	/* 0,1 off and 4,5 on: the main exec still held a. */
	ck_assert_uint_eq(set_calls(f) - c, 4);
	ck_assert(!gstatus(f).bare_running);
	bfx_close(f);
}
END_TEST

/* ---- rebind, re-instantiation, unbind, forget, close -------------------------- */

START_TEST(test_bare_rebind_and_reinstantiate)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set none = spec("none"), some = spec("mlp_out:2");
	step(f, 1, &none);
	launch_check(f, &none);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2);

	/* An explicit bind of a new exec: the old bare exec goes, a new one comes. */
	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3); /* old, new, new bare */
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bare_exec);
	ck_assert_uint_eq(gs.bare_replays, 1);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	ck_assert_uint_eq(gstatus(f).bare_replays, 2);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);

	/* Re-instantiated and launched without a bind: rebound through the launch. */
	old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3); /* old, new, new bare */
	step(f, 2, &some);
	launch_check(f, &some);
	ck_assert(!gstatus(f).bare_running);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);

	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 3);
	ck_assert_uint_eq(st.rebinds, 3);

	/* Unbind: the bare exec goes with it, and launches fail closed. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, NULL), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	ck_assert(!gstatus(f).bare_exec);
	step(f, 3, &none);
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream),
			 TOGGLE_EUNBOUND);
	bfx_close(f);
}
END_TEST

START_TEST(test_bare_forget_and_close)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set none = spec("none");
	step(f, 1, &none);
	launch_check(f, &none);
	ck_assert_int_eq(toggle_graph_forget(f->agent, f->graph), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream), TOGGLE_ESTALE);
	ck_assert_int_eq(toggle_sim_exec_destroy(f->exec), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(f->graph), CUDA_SUCCESS);

	/* Forgotten inside a capture window: destroyed later, at close. */
	bfx_capture_bound(f);
	launch_check(f, &none);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2);
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_graph_forget(f->agent, f->graph), 0);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2);

	/* A bound graph with its bare exec at close. */
	CUgraph g1 = f->graph;
	CUgraphExec e1 = f->exec;
	bfx_capture_bound(f);
	launch_check(f, &none);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 4);
	toggle_agent_close(f->agent);
	f->agent = NULL;
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2); /* e1 and f->exec: the application's */
	ck_assert_int_eq(toggle_sim_exec_destroy(e1), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g1), CUDA_SUCCESS);
	toggle_sim_destroy(f->sim);
	free(f);
}
END_TEST

/* ---- the per-agent off switch; build failures --------------------------------- */

START_TEST(test_bare_off_switch)
{
	struct bfx *f = bfx_open_cfg(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY, true);
	bfx_capture_bound(f);
	ck_assert(!gstatus(f).bare_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	struct toggle_set none = spec("none");
	uint64_t c = set_calls(f);
	step(f, 1, &none);
	launch_check(f, &none);
	ck_assert_uint_eq(set_calls(f) - c, NT_COVERED * NL); /* the main exec's producers, off */
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(!gs.bare_running);
	ck_assert_uint_eq(gs.bare_replays, 0);
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 0);
	bfx_close(f);
}
END_TEST

/* toggle_graph_set_bare: off before the bind builds nothing; on while bound builds it and the
 * next all-off launch runs it; off while it runs destroys it and the main exec (re-synced) runs
 * the step's set; the choice survives a rebind. */
START_TEST(test_bare_per_graph_switch)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture(f);
	ck_assert_int_eq(toggle_graph_set_bare(f->agent, f->graph, false), 0);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert(!gstatus(f).bare_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	struct toggle_set none = spec("none"), some = spec("resid_post:1");
	step(f, 1, &none);
	launch_check(f, &none);
	ck_assert(!gstatus(f).bare_running);
	/* on, while bound, mid-step: built now, run from the next launch */
	ck_assert_int_eq(toggle_graph_set_bare(f->agent, f->graph, true), 0);
	ck_assert(gstatus(f).bare_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	ck_assert_uint_eq(gstatus(f).bare_replays, 1);
	/* off while the bare exec runs: gone, the main exec runs the set that follows */
	ck_assert_int_eq(toggle_graph_set_bare(f->agent, f->graph, false), 0);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(!gs.bare_exec);
	ck_assert(!gs.bare_running);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	launch_check(f, &none);
	step(f, 2, &some);
	launch_check(f, &some);
	step(f, 3, &none);
	launch_check(f, &none);
	ck_assert(!gstatus(f).bare_running);
	/* the choice survives a rebind */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert(!gstatus(f).bare_exec);
	ck_assert_uint_eq(gstatus(f).bare_replays, 1);
	/* on again, then a prepare (the caller launches the main exec) at an all-off set:
	 * set_bare(true) makes the next launch pick the bare exec at the same set */
	ck_assert_int_eq(toggle_graph_set_bare(f->agent, f->graph, true), 0);
	ck_assert_int_eq(toggle_graph_prepare(f->agent, f->graph, f->exec, f->stream), 0);
	ck_assert(!gstatus(f).bare_running);
	ck_assert_int_eq(toggle_graph_set_bare(f->agent, f->graph, true), 0);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	ck_assert_uint_eq(gstatus(f).bare_replays, 2);
	/* unknown graph, NULL agent */
	ck_assert_int_eq(toggle_graph_set_bare(f->agent, (CUgraph)&none, true), TOGGLE_ENOENT);
	ck_assert_int_eq(toggle_graph_set_bare(NULL, f->graph, true), TOGGLE_EINVAL);
	bfx_close(f);
}
END_TEST

static const enum toggle_sim_op build_ops[] = {
	TOGGLE_SIM_OP_GRAPH_CLONE, TOGGLE_SIM_OP_DESTROY_NODE, TOGGLE_SIM_OP_ADD_DEPENDENCIES,
	TOGGLE_SIM_OP_INSTANTIATE,
};

/* A build that fails at any step: the bind succeeds, nothing leaks, the main exec runs. */
START_TEST(test_bare_build_failure_keeps_main)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_LAZY);
	bfx_capture(f);
	toggle_sim_fail(f->sim, build_ops[_i], _i == 1 ? 3 : 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "no producer-free exec"));
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bound);
	ck_assert(!gs.bare_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 1);
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 0);
	ck_assert_uint_eq(st.bare_build_failures, 1);
	struct toggle_set none = spec("none"), one = spec("resid_post:4");
	step(f, 1, &none);
	launch_check(f, &none);
	step(f, 2, &one);
	launch_check(f, &one);
	/* The next bind builds it. */
	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert(gstatus(f).bare_exec);
	step(f, 3, &none);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	bfx_close(f);
}
END_TEST

/* ---- failures while switching between the two execs ------------------------------ */

/*
 * A step's set and a launch that may be refused: a refused launch ran
 * nothing (ECUDA, empty log); an accepted one ran exactly the set.  The
 * step itself may report the eager apply's failure.
 */
static int step_launch(struct bfx *f, int64_t n, const struct toggle_set *s)
{
	ck_assert_int_eq(toggle_set_enabled(f->agent, s), 0);
	int rc = toggle_step_begin(f->agent, n, NULL);
	ck_assert_msg(rc == 0 || rc == TOGGLE_ECUDA, "step %lld: %d", (long long)n, rc);
	int want[MAX_K];
	int nwant = expected(f, s, want);
	f->nlog = 0;
	rc = toggle_graph_launch(f->agent, f->graph, f->exec, f->stream);
	if (rc) {
		ck_assert_int_eq(rc, TOGGLE_ECUDA);
		ck_assert_int_eq(f->nlog, 0);
		return rc;
	}
	ck_assert_int_eq(f->nlog, nwant);
	for (int i = 0; i < nwant; i++)
		ck_assert_msg(f->log[i] == want[i], "step %lld: kernel %d ran %d, expected %d",
			      (long long)n, i, f->log[i], want[i]);
	return 0;
}

/*
 * Driver failures at the switch, in both directions (lazy, eager): a failed
 * cuGraphLaunch of either exec, a failed cuGraphNodeSetEnabled while the
 * main exec is brought back from the bare one, and a failed sync followed
 * by a step that fits the bare exec and then one that does not (the main
 * exec's half-applied nodes must not be trusted).  No launch may run
 * another set than its step's; a refused one runs nothing.
 */
START_TEST(test_bare_switch_failures_run_no_wrong_set)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set a = spec("resid_post:0-3"), b = spec("mlp_out:1,resid_post:5"),
			  none = spec("none");
	int64_t n = 0;
	ck_assert_int_eq(step_launch(f, n++, &a), 0);

	/* main -> bare: the bare exec's launch fails; then it runs, counted once. */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, CUDA_ERROR_LAUNCH_FAILED);
	ck_assert_int_eq(step_launch(f, n++, &none), TOGGLE_ECUDA);
	launch_check(f, &none);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bare_running);
	ck_assert_uint_eq(gs.bare_replays, 1);

	/* bare -> main: a node set fails (at the launch, or at the eager apply:
	 * the launch then retries the sync). */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 1, 1, CUDA_ERROR_UNKNOWN);
	int rc = step_launch(f, n++, &b);
	ck_assert(!gstatus(f).bare_running);
	if (rc)
		launch_check(f, &b);
	ck_assert(!gstatus(f).bare_running);

	/* A failed sync, then the bare exec's step, then main again. */
	ck_assert_int_eq(step_launch(f, n++, &a), 0);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 2, 1, CUDA_ERROR_UNKNOWN);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &b), 0);
	rc = toggle_step_begin(f->agent, n++, NULL);
	if (_i == 0) { /* lazy: the launch syncs, fails and is refused */
		ck_assert_int_eq(rc, 0);
		f->nlog = 0;
		ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream),
				 TOGGLE_ECUDA);
		ck_assert_int_eq(f->nlog, 0);
	} else { /* eager: the apply at the step fails, leaving the exec out of date */
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(gstatus(f).applied_version, 0);
	}
	ck_assert_int_eq(step_launch(f, n++, &none), 0);
	ck_assert(gstatus(f).bare_running);
	ck_assert_int_eq(step_launch(f, n++, &b), 0);
	ck_assert(!gstatus(f).bare_running);

	/* A node set armed to fail at the step that goes to the bare exec (which
	 * needs none: eager's apply picks it), then main: its sync may take the
	 * failure, and the exec that runs must hold the step's set. */
	ck_assert_int_eq(step_launch(f, n++, &a), 0);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 0, 1, CUDA_ERROR_UNKNOWN);
	ck_assert_int_eq(step_launch(f, n++, &none), 0);
	ck_assert(gstatus(f).bare_running);
	if (step_launch(f, n++, &b))
		launch_check(f, &b);
	ck_assert(!gstatus(f).bare_running);

	/* bare -> main: the main exec's launch fails; the next one runs the set. */
	ck_assert_int_eq(step_launch(f, n++, &none), 0);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, CUDA_ERROR_LAUNCH_FAILED);
	ck_assert_int_eq(step_launch(f, n++, &a), TOGGLE_ECUDA);
	launch_check(f, &a);
	ck_assert(!gstatus(f).bare_running);
	ck_assert_uint_eq(gstatus(f).bare_replays, 4);
	bfx_close(f);
}
END_TEST

/*
 * The identity path (CUDA 13.1's exec ids, handles reused): the application
 * re-instantiates its exec behind the same handle (every producer on again)
 * while the bare exec runs, without a bind.  The next change rebinds through
 * the exec id and rebuilds the bare exec for the new exec; _i 1, 3: that
 * rebuild fails, and the main exec must then run the all-off step with
 * every producer off.  _i 0-1 lazy, 2-3 eager.
 */
START_TEST(test_bare_reinstantiated_behind_handle)
{
	bool eager = _i >= 2, fail_build = _i % 2;
	struct bfx *f = bfx_open_drv(eager ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY, false, 13010);
	toggle_sim_set_handle_reuse(f->sim, true);
	bfx_capture_bound(f);
	struct toggle_set a = spec("resid_post:2"), none = spec("none"), b = spec("mlp_out:6");
	ck_assert_int_eq(step_launch(f, 0, &a), 0);
	ck_assert_int_eq(step_launch(f, 1, &none), 0);
	ck_assert(gstatus(f).bare_running);

	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_exec_destroy(f->exec), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_ptr_eq(f->exec, old); /* the test needs the reuse */
	if (fail_build)
		toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(step_launch(f, 2, &b), 0);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(!gs.bare_running);
	ck_assert(gs.bare_exec == !fail_build);
	ck_assert_int_eq(step_launch(f, 3, &none), 0);
	ck_assert(gstatus(f).bare_running == !fail_build);
	ck_assert_int_eq(step_launch(f, 4, &b), 0);
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.rebinds, 2);
	ck_assert_uint_eq(st.bare_builds, fail_build ? 1 : 2);
	ck_assert_uint_eq(st.bare_build_failures, fail_build ? 1 : 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), fail_build ? 1 : 2);
	bfx_close(f);
}
END_TEST

/*
 * The status lane (what toggled reads): which exec runs, in flag bits of
 * their own, distinct from device mode's tainted and blocked.
 */
START_TEST(test_bare_status_lane_flags)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_LAZY);
	struct toggle_agent *a = f->agent;
	char err[128];
	/* White-box: the region a daemon connection would have made. */
	ck_assert_int_eq(toggle_shm_create(&a->shm, err, sizeof(err)), 0);
	a->status_buf = calloc(1, sizeof(*a->status_buf));
	ck_assert_ptr_nonnull(a->status_buf);
	bfx_capture_bound(f);
	struct toggle_set none = spec("none"), some = spec("resid_post:3");
	const uint64_t taint = TOGGLE_SHM_GRAPH_TAINTED | TOGGLE_SHM_GRAPH_BLOCKED;
	struct toggle_shm_status st;

	step(f, 0, &none);
	launch_check(f, &none);
	step(f, 1, &none); /* publishes */
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.n_graphs, 1);
	ck_assert_uint_eq(st.graphs[0].flags, TOGGLE_SHM_GRAPH_BOUND | TOGGLE_SHM_GRAPH_BARE |
						      TOGGLE_SHM_GRAPH_BARE_RUNNING);
	ck_assert_uint_eq(st.graphs[0].flags & taint, 0);

	step(f, 2, &some);
	launch_check(f, &some);
	step(f, 3, &some);
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.graphs[0].flags, TOGGLE_SHM_GRAPH_BOUND | TOGGLE_SHM_GRAPH_BARE);
	/* Every flag a bit of its own. */
	const uint64_t bits[] = {TOGGLE_SHM_GRAPH_BOUND, TOGGLE_SHM_GRAPH_STALE,
				 TOGGLE_SHM_GRAPH_DEVICE, TOGGLE_SHM_GRAPH_FALLBACK,
				 TOGGLE_SHM_GRAPH_TAINTED, TOGGLE_SHM_GRAPH_BLOCKED,
				 TOGGLE_SHM_GRAPH_BARE, TOGGLE_SHM_GRAPH_BARE_RUNNING};
	uint64_t all = 0;
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
		ck_assert_uint_eq(all & bits[i], 0);
		all |= bits[i];
	}
	bfx_close(f);
}
END_TEST

/* ---- device mode ------------------------------------------------------------------ */

static void k_devprod(void **p)
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

/*
 * A graph its planner toggles gets no bare exec: its producers are
 * device-updatable, which the driver does not let a graph lose
 * (cuGraphDestroyNode), and it has one exec at a time.  A graph a
 * device-mode agent toggles on the host (fallback) gets one.
 */
START_TEST(test_bare_device_mode_decision)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_DEVICE);
	ck_assert_int_eq(toggle_agent_mode(f->agent), TOGGLE_MODE_DEVICE);
	CUmodule mod;
	CUfunction produce;
	ck_assert_int_eq(toggle_sim_module_load(f->sim, &mod, &dev_image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&produce, mod, "produce"), CUDA_SUCCESS);

	/* Planner first, then compute and producers through toggle_launch_producer. */
	f->nk = 0;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(f->agent, f->stream), 0);
	for (uint16_t l = 0; l < NL; l++) {
		add_kernel(f, false, (struct toggle_hook){0, 0});
		struct kern *k = &f->k[f->nk];
		*k = (struct kern){.f = f, .id = f->nk, .producer = true, .hook = {0, l}};
		f->nk++;
		void *kp = k;
		void *params[] = {&kp};
		CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
				    .blockDimY = 1, .blockDimZ = 1, .hStream = f->stream};
		ck_assert_int_eq(toggle_launch_producer(f->agent, &c, produce, params, k->hook), 0);
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph, &f->exec), 0);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_DEVICE);
	ck_assert(!gs.bare_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds + st.bare_build_failures, 0); /* not even tried */
	struct toggle_set none = spec("none"), one = spec("resid_post:5");
	step(f, 1, &none);
	launch_check(f, &none);
	step(f, 2, &one);
	launch_check(f, &one);
	ck_assert(!gstatus(f).bare_running);
	CUgraph dev_graph = f->graph;

	/* Plain producers, no planner: toggled on the host (fallback), bare exec built. */
	bfx_capture(f);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	gs = gstatus(f);
	ck_assert(gs.device_fallback);
	ck_assert(gs.bare_exec);
	step(f, 3, &none);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	step(f, 4, &one);
	launch_check(f, &one);
	ck_assert(!gstatus(f).bare_running);
	(void)dev_graph;
	toggle_agent_close(f->agent);
	f->agent = NULL;
	ck_assert_int_eq(toggle_sim_module_unload(mod), CUDA_SUCCESS);
	toggle_sim_destroy(f->sim);
	free(f);
}
END_TEST

/* ---- the simulator's model of clones and graph edits ------------------------------ */

struct chain {
	struct bfx f;
	struct kern k[4];
	CUgraphNode node[4];
	CUgraph graph;
};

/* A -> B -> C -> D, captured. */
static void chain_capture(struct chain *c)
{
	memset(c, 0, sizeof(*c));
	ck_assert_int_eq(toggle_sim_create(&c->f.sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(c->f.sim, &c->f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(c->f.stream), CUDA_SUCCESS);
	for (int i = 0; i < 4; i++) {
		c->k[i] = (struct kern){.f = &c->f, .id = i};
		ck_assert_int_eq(toggle_sim_launch_kernel(c->f.stream, k_run, &c->k[i]), CUDA_SUCCESS);
		CUstreamCaptureStatus st;
		const CUgraphNode *deps;
		size_t n;
		ck_assert_int_eq(toggle_sim_stream_get_capture_info(c->f.stream, &st, NULL, NULL, &deps,
								    NULL, &n),
				 CUDA_SUCCESS);
		ck_assert_uint_eq(n, 1);
		c->node[i] = deps[0];
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(c->f.stream, &c->graph), CUDA_SUCCESS);
}

/* Run an exec of g and compare the kernels it ran with want (n of them). */
static void chain_run(struct chain *c, CUgraph g, const int *want, int n)
{
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	c->f.nlog = 0;
	ck_assert_int_eq(toggle_sim_graph_launch(e, c->f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(c->f.nlog, n);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(c->f.log[i], want[i]);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
}

START_TEST(test_sim_clone_and_edits)
{
	struct chain c;
	chain_capture(&c);
	CUgraph k1, k2;
	CUgraphNode b, b2, a2, c2, x[4];
	size_t n;

	/* Captured graphs are not edited in the model. */
	ck_assert_int_eq(toggle_sim_graph_destroy_node(c.node[1]), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_graph_clone(&k1, c.graph), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k1), 4);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&b, c.node[1], k1), CUDA_SUCCESS);
	ck_assert_ptr_ne(b, c.node[1]);
	/* The clone has the original's edges. */
	n = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependencies(b, x, NULL, &n), CUDA_SUCCESS);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&a2, c.node[0], k1), CUDA_SUCCESS);
	ck_assert_ptr_eq(x[0], a2);
	n = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependent_nodes(b, x, NULL, &n), CUDA_SUCCESS);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&c2, c.node[2], k1), CUDA_SUCCESS);
	ck_assert_ptr_eq(x[0], c2);

	/* B destroyed without reconnecting: A and C are unordered, and the later runs first. */
	ck_assert_int_eq(toggle_sim_graph_destroy_node(b), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k1), 3);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&b2, c.node[1], k1),
			 CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(b), CUDA_ERROR_INVALID_VALUE);
	n = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependencies(c2, x, NULL, &n), CUDA_SUCCESS);
	ck_assert_uint_eq(n, 0);
	chain_run(&c, k1, (const int[]){2, 3, 0}, 3);

	/* Reconnected: capture order again.  An existing edge and a live exec are refused. */
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k1, &a2, &c2, NULL, 1), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k1, &a2, &c2, NULL, 1),
			 CUDA_ERROR_INVALID_VALUE);
	chain_run(&c, k1, (const int[]){0, 2, 3}, 3);
	CUgraphExec live;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&live, k1), CUDA_SUCCESS);
	CUgraphNode d2;
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&d2, c.node[3], k1), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(d2), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k1, &a2, &d2, NULL, 1),
			 CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_exec_destroy(live), CUDA_SUCCESS);

	/* A clone of a clone; a cycle fails instantiation. */
	ck_assert_int_eq(toggle_sim_graph_clone(&k2, k1), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k2), 3);
	CUgraphNode a3, d3;
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&a3, a2, k2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&d3, d2, k2), CUDA_SUCCESS);
	chain_run(&c, k2, (const int[]){0, 2, 3}, 3);
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k2, &d3, &a3, NULL, 1), CUDA_SUCCESS);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, k2), CUDA_ERROR_INVALID_VALUE);

	/* Failure injection: a failed call changes nothing. */
	toggle_sim_fail(c.f.sim, TOGGLE_SIM_OP_DESTROY_NODE, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(a2), CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k1), 3);
	toggle_sim_fail(c.f.sim, TOGGLE_SIM_OP_GRAPH_CLONE, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_sim_graph_clone(&k2, c.graph), CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_uint_eq(toggle_sim_graph_count(c.f.sim), 3);

	/* The original is untouched. */
	chain_run(&c, c.graph, (const int[]){0, 1, 2, 3}, 4);
	toggle_sim_destroy(c.f.sim);
}
END_TEST

/* Driver rule: a device-updatable node cannot be destroyed, in a clone either. */
START_TEST(test_sim_devupd_node_not_destroyed)
{
	struct bfx *f = bfx_open_cfg(TOGGLE_MODE_LAZY, false);
	CUmodule mod;
	CUfunction produce;
	ck_assert_int_eq(toggle_sim_module_load(f->sim, &mod, &dev_image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&produce, mod, "produce"), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	struct kern k = {.f = f, .id = 7};
	void *kp = &k;
	void *params[] = {&kp};
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof(attr));
	attr.id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
	attr.value.deviceUpdatableKernelNode.deviceUpdatable = 1;
	CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
			    .blockDimY = 1, .blockDimZ = 1, .hStream = f->stream, .attrs = &attr,
			    .numAttrs = 1};
	ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, produce, params, NULL), CUDA_SUCCESS);
	CUstreamCaptureStatus st;
	const CUgraphNode *deps;
	size_t n;
	ck_assert_int_eq(toggle_sim_stream_get_capture_info(f->stream, &st, NULL, NULL, &deps, NULL,
							    &n),
			 CUDA_SUCCESS);
	CUgraphNode node = deps[0];
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph), CUDA_SUCCESS);
	CUgraph clone;
	CUgraphNode cn;
	ck_assert_int_eq(toggle_sim_graph_clone(&clone, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&cn, node, clone), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(cn), CUDA_ERROR_INVALID_VALUE);
	bfx_close(f);
}
END_TEST

static Suite *bare_suite(void)
{
	Suite *s = suite_create("bare");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_bare_runs_no_producer_in_order, 0, 2);
	tcase_add_loop_test(tc, test_bare_main_keeps_its_state, 0, 2);
	tcase_add_loop_test(tc, test_bare_rebind_and_reinstantiate, 0, 2);
	tcase_add_test(tc, test_bare_forget_and_close);
	tcase_add_loop_test(tc, test_bare_off_switch, 0, 2);
	tcase_add_loop_test(tc, test_bare_per_graph_switch, 0, 2);
	tcase_add_loop_test(tc, test_bare_build_failure_keeps_main, 0,
			    (int)(sizeof(build_ops) / sizeof(build_ops[0])));
	tcase_add_loop_test(tc, test_bare_switch_failures_run_no_wrong_set, 0, 2);
	tcase_add_loop_test(tc, test_bare_reinstantiated_behind_handle, 0, 4);
	tcase_add_test(tc, test_bare_status_lane_flags);
	tcase_add_test(tc, test_bare_device_mode_decision);
	tcase_add_test(tc, test_sim_clone_and_edits);
	tcase_add_test(tc, test_sim_devupd_node_not_destroyed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(bare_suite());
}
