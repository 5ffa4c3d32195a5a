/*
 * check_agent_bind.c - libtoggle's agent on the simulator: recording and
 * binding: a graph without producers untouched, an unbound graph refused,
 * a rebind resetting per-exec state, another exec of the graph.
 * The simulator, the agent, its producers and the capture and launch
 * helpers are the agent suites' fixture (tests/fixture_agent.h).  Split out
 * of check_agent.c (issue 29); the tests keep their numbers from it.
 */
#include "fixture_agent.h"

/* 1. A graph without producers passes through untouched. */
START_TEST(test_unrelated_graph_launches)
{
	struct fx f;
	fx_open(&f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	fx_capture(&f, 0, false);
	struct toggle_set all = spec("all"), ran;
	ck_assert_int_eq(toggle_set_enabled(f.agent, &all), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);
	ck_assert_int_eq(toggle_graph_count(f.agent), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_uint_eq(f.compute_runs, NL);
	ck_assert_uint_eq(set_calls(&f), 0);
	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.launches_unrelated, 1);
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[0], f.exec[0]), TOGGLE_ENOENT);
	fx_close(&f);
}
END_TEST

/* 2. A graph with producers that is not bound fails closed. */
START_TEST(test_unbound_graph_refused)
{
	struct fx f;
	fx_open(&f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	fx_capture(&f, 0, true);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	struct toggle_set ran, none = spec("none");
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_EUNBOUND);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	ck_assert_uint_eq(f.compute_runs, 0);
	assert_set_eq(&ran, &none);
	char name[32];
	snprintf(name, sizeof(name), "%p", (void *)f.graph[0]);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), name));
	struct toggle_anomalies an;
	toggle_anomalies_get(f.agent, &an);
	ck_assert_uint_eq(an.launch_unbound, 1);
	fx_close(&f);
}
END_TEST

static const char *const rebind_sets[] = {"none", "resid_post:1-3,mlp_out:7", "all"};

/* 3. Binding a new exec resets per-exec state and syncs before its first launch. */
START_TEST(test_rebind_resets_and_syncs)
{
	struct fx f;
	fx_open_main(&f, _i / 3 ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	struct toggle_set want = spec(rebind_sets[_i % 3]), ran;
	fx_capture_bound(&f, 0);
	ck_assert_int_eq(toggle_set_enabled(f.agent, &want), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, NULL), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &want);

	CUgraphExec old = f.exec[0];
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec[0], f.graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[0], f.exec[0]), 0);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.applied_version, 0);
	ck_assert_uint_eq(gs.replays, 1); /* counted per graph, across execs */
	ck_assert_int_eq(gs.last_step, -1);
	ck_assert_ptr_eq(gs.exec, f.exec[0]);

	/* Same set, same step: only the new exec's unknown state forces calls. */
	uint64_t before = set_calls(&f);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &want);
	ck_assert_uint_eq(set_calls(&f) - before, NT * NL);
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.replays, 2);
	ck_assert_int_eq(gs.last_step, 1);
	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.launches, 2);
	/* Unbinding: launches fail closed until the next bind. */
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[0], NULL), 0);
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert(!gs.bound);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_EUNBOUND);
	ck_assert_int_eq(toggle_apply_all(f.agent), 0); /* skips unbound graphs */
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	fx_close(&f);
}
END_TEST

/* 4. Launching with another exec than the bound one rebinds and syncs. */
START_TEST(test_launch_other_exec_rebinds)
{
	struct fx f;
	fx_open(&f, _i / 3 ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	struct toggle_set want = spec(rebind_sets[_i % 3]), ran;
	fx_capture_bound(&f, 0);
	ck_assert_int_eq(toggle_set_enabled(f.agent, &want), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, NULL), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	CUgraphExec old = f.exec[0];
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec[0], f.graph[0]), CUDA_SUCCESS);
	struct toggle_stats before, after;
	toggle_stats_get(f.agent, &before);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &want);
	toggle_stats_get(f.agent, &after);
	ck_assert_uint_eq(after.rebinds, before.rebinds + 1);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_ptr_eq(gs.exec, f.exec[0]);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	fx_close(&f);
}
END_TEST

static Suite *agent_bind_suite(void)
{
	Suite *s = suite_create("agent_bind");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_unrelated_graph_launches, 0, 2);
	tcase_add_loop_test(tc, test_unbound_graph_refused, 0, 2);
	tcase_add_loop_test(tc, test_rebind_resets_and_syncs, 0, 6);
	tcase_add_loop_test(tc, test_launch_other_exec_rebinds, 0, 6);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(agent_bind_suite());
}
