/*
 * check_lifetime_races.c - libtoggle knows when a graph dies (issue #28), on the
 * simulator with its handle reuse on (a destroyed graph's handle and node
 * handles go to the next graph, as on the H200): bad input: a graph
 * destroyed while its exec runs (deferred mode), a destructor that runs
 * while the agent closes or after it, a graph that dies between a step's
 * check and its launch; no use after free (ASan), no launch of a dead exec,
 * no wrong set.
 * The simulator, the agent, its kernels and their log are the lifetime
 * suites' fixture (tests/fixture_lifetime.h).  Split out of check_lifetime.c
 * (issue 29).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "fixture_lifetime.h"

/* ---- 4. bad input -------------------------------------------------------------------- */

/*
 * A graph destroyed while launches of its exec are queued (deferred mode),
 * then a stranger behind its handle, then the exec destroyed with launches
 * still queued: every queued launch runs the set of its step, the stranger
 * runs untouched, nothing is launched that the driver destroyed, no use
 * after free (ASan).  _i: lazy, eager.
 */
START_TEST(test_graph_destroyed_while_exec_runs)
{
	struct lfx f;
	lfx_open(&f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY, 0);
	CUgraph g = capture_ours(&f, NULL);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	toggle_sim_set_deferred(f.sim, true, 28);
	step(&f, 0, 0x3c);
	log_reset(&f);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(toggle_graph_launch(f.agent, g, e, f.s), 0);
	ck_assert_uint_eq(f.ran, 0); /* queued */
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	CUgraph s = capture_stranger(&f, NS);
	ck_assert_ptr_eq(s, g);
	CUgraphExec se;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_launch(f.agent, s, se, f.s), 0);
	ck_assert_int_eq(toggle_graph_launch(f.agent, g, e, f.s), 0); /* our exec, its set */
	step(&f, 1, 0x01);
	ck_assert_int_eq(toggle_graph_launch(f.agent, g, e, f.s), TOGGLE_ESTALE);
	ck_assert_int_eq(toggle_graph_launch(f.agent, s, se, f.s), 0);
	toggle_sim_synchronize(f.sim);
	ck_assert_uint_eq(f.ran, 0x3c); /* four launches of e, every one at step 0's set */
	ck_assert_uint_eq(f.others, 2 * NS);
	log_reset(&f);
	ck_assert_int_eq(toggle_graph_launch(f.agent, g, e, f.s), TOGGLE_ESTALE);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS); /* nothing queued of it */
	ck_assert_int_eq(toggle_graph_launch(f.agent, s, se, f.s), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS); /* runs its queued launch */
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(f.ran, 0);
	toggle_sim_set_deferred(f.sim, false, 0);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

/*
 * Destructors that run while the agent closes, or after: graphs destroyed
 * right before toggle_agent_close with the destructors on the simulator's
 * thread not waited for (_i 0: they race the close), held until after the
 * close (_i 1), or graphs still alive at the close and destroyed later
 * (_i 2).  No use after free, no leak (ASan), in 100 rounds.
 */
START_TEST(test_destructor_while_agent_closes)
{
	for (int round = 0; round < 100; round++) {
		struct lfx f;
		lfx_sim(&f, 0);
		if (_i < 2)
			toggle_sim_set_destructors(f.sim, _i == 0 ? TOGGLE_SIM_DESTRUCTORS_ASYNC
								  : TOGGLE_SIM_DESTRUCTORS_HELD);
		f.agent = lfx_agent(&f, TOGGLE_MODE_LAZY);
		CUgraph g[3];
		CUgraphExec e[3];
		for (int k = 0; k < 3; k++) {
			g[k] = capture_ours(&f, NULL);
			ck_assert_int_eq(toggle_graph_instantiate(f.agent, g[k], &e[k]), 0);
		}
		step(&f, 0, 0x0f);
		for (int k = 0; k < 3; k++)
			ck_assert_int_eq(launch(&f, g[k], e[k]), 0);
		if (_i < 2) {
			for (int k = 0; k < 3; k++) {
				ck_assert_int_eq(toggle_sim_exec_destroy(e[k]), CUDA_SUCCESS);
				ck_assert_int_eq(toggle_sim_graph_destroy(g[k]), CUDA_SUCCESS);
			}
		}
		toggle_agent_close(f.agent);
		if (_i == 1)
			toggle_sim_run_destructors(f.sim);
		if (_i == 2) {
			for (int k = 0; k < 3; k++) {
				ck_assert_int_eq(toggle_sim_exec_destroy(e[k]), CUDA_SUCCESS);
				ck_assert_int_eq(toggle_sim_graph_destroy(g[k]), CUDA_SUCCESS);
			}
		}
		toggle_sim_destroy(f.sim);
	}
}
END_TEST

/* Launches racing destructors on the simulator's thread: what runs is always the right set. */
START_TEST(test_destructors_race_launches)
{
	struct lfx f;
	lfx_sim(&f, 0);
	toggle_sim_set_destructors(f.sim, TOGGLE_SIM_DESTRUCTORS_ASYNC);
	f.agent = lfx_agent(&f, TOGGLE_MODE_LAZY);
	uint64_t rng = 28;
	for (int round = 0; round < 200; round++) {
		CUgraph g = capture_ours(&f, NULL);
		CUgraphExec e;
		ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
		uint32_t set = (uint32_t)tu_rng_next(&rng) & 0xff;
		step(&f, 2 * round, set);
		ck_assert_int_eq(launch(&f, g, e), 0);
		ck_assert_uint_eq(f.ran, set);
		if (tu_rng_next(&rng) % 2)
			ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
		ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
		CUgraph s = capture_stranger(&f, 1 + (int)(tu_rng_next(&rng) % NS));
		CUgraphExec se;
		ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
		toggle_sim_run_destructors(f.sim); /* the driver ran it by now (it does, in cuGraphDestroy) */
		step(&f, 2 * round + 1, (uint32_t)tu_rng_next(&rng) & 0xff);
		ck_assert_int_eq(launch(&f, s, se), 0);
		ck_assert_uint_eq(f.ran, 0);
		ck_assert_uint_eq(f.others, toggle_sim_graph_node_count(s));
		ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	}
	lfx_close(&f);
}
END_TEST

/*
 * The graph dies between a step's look and its launch: the step began, the
 * bound graph runs its producer-free exec (the set enables none of its
 * hooks) or its full exec (every one), then graph and exec are destroyed
 * without unbinding and a stranger gets both handles.  Its launch matches
 * the record on every compare of the hot path; the destructor's mark sends
 * it to the slow path, which drops the record: the stranger's exec runs, not
 * the dead graph's second exec.  A second exec holding the graph's lifetime
 * object would keep the destructor from running at all.  _i: 13.0, 13.1;
 * bare, full.
 */
START_TEST(test_graph_dies_between_step_and_launch)
{
	struct lfx f;
	bool full = _i >= 2;
	uint32_t set = full ? (1u << NP) - 1 : 0;
	lfx_open(&f, TOGGLE_MODE_LAZY, _i % 2 ? 13010 : 13000);
	CUgraph g = capture_ours(&f, NULL);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, set);
	ck_assert_int_eq(launch(&f, g, e), 0);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert(full ? gs.full_running : gs.bare_running);
	ck_assert_int_eq(launch(&f, g, e), 0); /* the hot path, through the second exec */
	ck_assert_uint_eq(f.ran, set);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	CUgraph s = capture_stranger(&f, NS);
	CUgraphExec se;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	ck_assert_ptr_eq(s, g);
	ck_assert_ptr_eq(se, e);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(f.ran, 0);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(toggle_sim_exec_count(f.sim), 1); /* the bare and full execs went */
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lifetime_races");
	TCase *tc = tcase_create("lifetime");
	tcase_add_loop_test(tc, test_graph_destroyed_while_exec_runs, 0, 2);
	tcase_add_loop_test(tc, test_destructor_while_agent_closes, 0, 3);
	tcase_add_test(tc, test_destructors_race_launches);
	tcase_add_loop_test(tc, test_graph_dies_between_step_and_launch, 0, 4);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
