/*
 * check_bare_exec.c - the producer-free ("bare") exec on the simulator: what each
 * launch ran (every kernel records itself, so a launch's log proves that no
 * producer ran and that every other kernel ran in capture order), the main
 * exec keeping its node states, rebind, re-instantiation, forget, close,
 * the per-agent and per-graph off switches, build failures.
 * The simulator, the agent, kernels that record themselves and the launch
 * check are the bare suites' fixture (tests/fixture_bare.h).  Split out of
 * check_bare.c (issue 29).
 */
#include "fixture_bare.h"

/* ---- the bare exec runs no producer, every other kernel, in order ------------ */

static const char *const walk[] = {
	"none", "resid_post:1", "attn_out:*", "mlp_out:0-3,resid_post:7", "none", "all",
	"attn_out:2", "resid_post:*", "none", "resid_post:*,mlp_out:*", "all", "mlp_out:3",
};

/* Host modes: every set the bare exec does not fit runs the full exec (a clone
 * of the graph holding no lifetime object), its producers set from its own
 * states; the application's exec never runs and is never set. */
START_TEST(test_bare_runs_no_producer_in_order)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bare_exec && gs.full_exec);
	ck_assert(!gs.bare_running && !gs.full_running);
	/* the application's, the bare one and the full one */
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3);
	/* the bare exec's clone is gone, the full exec's kept (its node handles) */
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 2);
	bool full_state[MAX_K];
	for (int k = 0; k < MAX_K; k++)
		full_state[k] = true; /* a clone: every producer on, as captured */
	uint64_t bare_launches = 0, full_launches = 0, all_launches = 0;
	struct allx_model m = {0};
	for (size_t i = 0; i < sizeof(walk) / sizeof(walk[0]); i++) {
		struct toggle_set s = spec(walk[i]);
		bool fits = set_fits(&s);
		allx_model_step(&m);
		bool all = allx_model_runs(&m, &s); /* all on on the all-on exec */
		uint64_t calls = set_calls(f);
		step(f, (int64_t)i, &s);
		uint64_t launches = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
		for (int rep = 0; rep < 2; rep++)
			launch_check(f, &s);
		/* One driver launch per launch, whichever exec; no node set to switch to the
		 * bare one, and to the full one only those whose state in it differs. */
		ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH) - launches, 2);
		uint64_t want_calls = fits || all ? 0 : sets_to(f, full_state, &s);
		ck_assert_msg(set_calls(f) - calls == want_calls, "set %s: %llu node sets, want %llu",
			      walk[i], (unsigned long long)(set_calls(f) - calls),
			      (unsigned long long)want_calls);
		gs = gstatus(f);
		ck_assert_msg(gs.bare_running == fits, "set %s: bare_running %d", walk[i],
			      gs.bare_running);
		ck_assert_msg(gs.full_running == (!fits && !all), "set %s: full_running %d", walk[i],
			      gs.full_running);
		ck_assert_msg(gs.set_running == all, "set %s: set_running %d", walk[i],
			      gs.set_running);
		bare_launches += fits ? 2 : 0;
		full_launches += fits || all ? 0 : 2;
		all_launches += all ? 2 : 0;
		ck_assert_uint_eq(gs.bare_replays, bare_launches);
		ck_assert_uint_eq(gs.full_replays, full_launches);
		ck_assert_uint_eq(gs.set_replays, all_launches);
		ck_assert_uint_eq(gs.replays, 2 * (i + 1));
	}
	ck_assert(m.built); /* the walk reached its all-on exec */
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 1);
	ck_assert_uint_eq(st.bare_build_failures, 0);
	ck_assert_uint_eq(st.full_builds, 1);
	ck_assert_uint_eq(st.full_build_failures, 0);
	/* attn_out is not covered: attn_out sets fit the bare exec.  Into or out of the bare
	 * exec at every step but the last two, the full exec the other way round. */
	ck_assert_uint_eq(st.bare_switches, 10);
	ck_assert_uint_eq(st.full_switches, 9);
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
	/* 0,1 off and 4,5 on: the exec that ran a (host modes: the full one) still held it. */
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
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3); /* the application's, bare, full */

	/* An explicit bind of a new exec: the old bare and full execs go, new ones come. */
	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 4); /* old, new, new bare, new full */
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
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 4); /* old, new, new bare, new full */
	step(f, 2, &some);
	launch_check(f, &some);
	ck_assert(!gstatus(f).bare_running);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);

	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 3);
	ck_assert_uint_eq(st.full_builds, 3);
	ck_assert_uint_eq(st.rebinds, 3);

	/* Unbind: the bare and full execs go with it, and launches fail closed. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, NULL), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	ck_assert(!gstatus(f).bare_exec && !gstatus(f).full_exec);
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
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3);
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_graph_forget(f->agent, f->graph), 0);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3);

	/* A bound graph with its bare and full execs at close. */
	CUgraph g1 = f->graph;
	CUgraphExec e1 = f->exec;
	bfx_capture_bound(f);
	launch_check(f, &none);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 6);
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

/* no_full_exec: the bare exec is built, the full one is not; all-on steps run the main exec,
 * exactly. */
START_TEST(test_full_off_switch)
{
	struct bfx *f = bfx_new(0);
	struct toggle_config cfg = bfx_config(f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	cfg.no_full_exec = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	bfx_capture_bound(f);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bare_exec && !gs.full_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2);
	struct toggle_set all = spec("all"), none = spec("none");
	step(f, 1, &all);
	launch_check(f, &all);
	ck_assert(!gstatus(f).full_running && !gstatus(f).bare_running);
	step(f, 2, &none);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.full_builds, 0);
	ck_assert_uint_eq(st.full_build_failures, 0);
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
	ck_assert(gstatus(f).bare_exec && gstatus(f).full_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3);
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

/* A clone's build (clone_execs; the assembly's fallback) that fails at any step: the bind
 * succeeds, nothing leaks, the full exec (or the main one) runs the steps the bare exec
 * would have. */
START_TEST(test_bare_build_failure_keeps_main)
{
	struct bfx *f = bfx_open_clones(TOGGLE_MODE_LAZY, 0);
	bfx_capture(f);
	toggle_sim_fail(f->sim, build_ops[_i], _i == 1 ? 3 : 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "no producer-free exec"));
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bound);
	ck_assert(!gs.bare_exec);
	/* The full exec's build (a clone and an instantiation, the next of each) is its own. */
	ck_assert(gs.full_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 2);
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 2); /* the graph and the full exec's clone */
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 0);
	ck_assert_uint_eq(st.bare_build_failures, 1);
	ck_assert_uint_eq(st.full_builds, 1);
	struct toggle_set none = spec("none"), one = spec("resid_post:4"), all = spec("all");
	step(f, 1, &none);
	launch_check(f, &none);
	ck_assert(!gstatus(f).bare_running);
	step(f, 2, &one);
	launch_check(f, &one);
	step(f, 3, &all);
	launch_check(f, &all);
	ck_assert(gstatus(f).full_running);
	/* The next bind builds it. */
	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert(gstatus(f).bare_exec);
	step(f, 4, &none);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	bfx_close(f);
}
END_TEST

static Suite *bare_exec_suite(void)
{
	Suite *s = suite_create("bare_exec");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_bare_runs_no_producer_in_order, 0, 2);
	tcase_add_loop_test(tc, test_bare_main_keeps_its_state, 0, 2);
	tcase_add_loop_test(tc, test_bare_rebind_and_reinstantiate, 0, 2);
	tcase_add_test(tc, test_bare_forget_and_close);
	tcase_add_loop_test(tc, test_bare_off_switch, 0, 2);
	tcase_add_loop_test(tc, test_full_off_switch, 0, 2);
	tcase_add_loop_test(tc, test_bare_per_graph_switch, 0, 2);
	tcase_add_loop_test(tc, test_bare_build_failure_keeps_main, 0,
			    (int)(sizeof(build_ops) / sizeof(build_ops[0])));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(bare_exec_suite());
}
