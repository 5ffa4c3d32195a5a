/*
 * check_lifetime_reuse.c - libtoggle knows when a graph dies (issue #28), on the
 * simulator with its handle reuse on (a destroyed graph's handle and node
 * handles go to the next graph, as on the H200): the regression: a graph with
 * 8 recorded producers is forgotten, or unbound, and destroyed; another
 * component captures a graph of 32 kernels that gets its handle and its 8
 * node handles.  Before, the identity check took it for the dead graph: its
 * launch was refused (forgotten) or, after toggle_graph_instantiate, 8 of
 * its kernels were disabled (24 of 32 ran).  Now the driver's user object
 * says the graph is gone, and the stranger runs untouched, with and without
 * the CUDA 13.1 ids; randomized scenarios too; a destructor not run yet.
 * The simulator, the agent, its kernels and their log are the lifetime
 * suites' fixture (tests/fixture_lifetime.h).  Split out of check_lifetime.c
 * (issue 29).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "fixture_lifetime.h"

/* ---- 1. the regression ----------------------------------------------------------- */

/*
 * The two outcomes.  _i % 2: 0 forgotten, 1 unbound then
 * toggle_graph_instantiate; _i / 2: driver 13.0 (no ids), 13.1 (ids: a
 * changed id alone means a new graph).  Before: rc -8 and 0 of 32 kernels
 * (forgotten); rc 0 and 24 of 32 kernels, 8 disabled by the agent (unbound).
 */
START_TEST(test_stranger_behind_dead_handle)
{
	struct lfx f;
	bool unbind = _i % 2;
	lfx_open(&f, TOGGLE_MODE_LAZY, _i / 2 ? 13010 : 13000);
	CUgraphNode nodes[NP];
	CUgraph g = capture_ours(&f, nodes);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, e), 0);
	step(&f, 0, 0xff);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0xff);
	if (unbind)
		ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	else
		ck_assert_int_eq(toggle_graph_forget(f.agent, g), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);

	CUgraph s = capture_stranger(&f, NS);
	assert_reused(s, g, nodes);
	CUgraphExec se;
	if (unbind)
		ck_assert_int_eq(toggle_graph_instantiate(f.agent, s, &se), 0);
	else
		ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	step(&f, 1, 0); /* a set that enables none of the dead graph's hooks */
	struct toggle_stats st0, st;
	toggle_stats_get(f.agent, &st0);
	int rc = launch(&f, s, se);
	ck_assert_msg(rc == 0 && f.others == NS,
		      "stranger launch: rc %d (%s), %u of %d kernels ran", rc,
		      toggle_last_error(f.agent), f.others, NS);
	for (int i = 0; i < NS; i++)
		ck_assert_int_eq(f.log[i], 100 + i); /* all of them, in capture order */
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.node_set_calls, st0.node_set_calls); /* never toggled */
	ck_assert_uint_eq(st.launches_refused, st0.launches_refused);
	ck_assert_uint_eq(st.launches_unrelated, st0.launches_unrelated + 1);
	/* Not refused, never toggled, and the agent forgot it: it lists with 0 nodes. */
	struct toggle_graph_status gs;
	if (toggle_graph_status(f.agent, s, &gs) == 0)
		ck_assert(gs.nodes == 0 && !gs.stale && !gs.bound);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

/*
 * 64 randomized reuse scenarios (the suite failed 33 of them): how
 * the dead graph left (forgotten, unbound, left bound against the rule),
 * which went first (exec or graph), the driver (13.0, 13.1), the mode
 * (lazy, eager), how the stranger comes to the agent (launch, or
 * toggle_graph_instantiate first) and the set.  The stranger runs all its
 * kernels, untouched, never refused.
 */
START_TEST(test_stranger_random)
{
	uint64_t rng = 0x28281 + (uint64_t)_i * 7919;
	int how = (int)(tu_rng_next(&rng) % 3);       /* 0 forget, 1 unbind, 2 left bound */
	bool graph_first = tu_rng_next(&rng) % 2;     /* the graph destroyed before its exec */
	bool ids = tu_rng_next(&rng) % 2;
	bool eager = tu_rng_next(&rng) % 2;
	bool via_instantiate = tu_rng_next(&rng) % 2;
	uint32_t set = (uint32_t)tu_rng_next(&rng) & ((1u << NH) - 1);
	int n = 1 + (int)(tu_rng_next(&rng) % NS);
	struct lfx f;
	lfx_open(&f, eager ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY, ids ? 13010 : 13000);
	CUgraph g = capture_ours(&f, NULL);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, (uint32_t)tu_rng_next(&rng) & 0xff);
	ck_assert_int_eq(launch(&f, g, e), 0);
	if (how == 0)
		ck_assert_int_eq(toggle_graph_forget(f.agent, g), 0);
	else if (how == 1)
		ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	if (graph_first) {
		ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	} else {
		ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	}
	CUgraph s = capture_stranger(&f, n);
	ck_assert_ptr_eq(s, g);
	CUgraphExec se;
	if (via_instantiate)
		ck_assert_int_eq(toggle_graph_instantiate(f.agent, s, &se), 0);
	else
		ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	step(&f, 1, set);
	for (int k = 0; k < 3; k++) {
		int rc = launch(&f, s, se);
		ck_assert_msg(rc == 0 && f.others == (unsigned)n,
			      "scenario %d (how %d, graph first %d, ids %d, eager %d, instantiate %d): "
			      "rc %d (%s), %u of %d kernels", _i, how, graph_first, ids, eager,
			      via_instantiate, rc, toggle_last_error(f.agent), f.others, n);
		step(&f, 2 + k, (uint32_t)tu_rng_next(&rng) & 0xff);
	}
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

/*
 * A destructor the driver has not run yet (held): the agent cannot know from
 * it.  With CUDA 13.1's ids, a changed id alone says the graph is new (no
 * node check can overrule it: the stranger holds the dead graph's nodes);
 * on 13.0 the node check alone is left, and the stranger holding those nodes
 * is taken for the dead graph: refused, never toggled (the documented
 * limit); once the destructor ran, it runs untouched.  _i: 13.0, 13.1.
 */
START_TEST(test_destructor_not_run_yet)
{
	struct lfx f;
	lfx_sim(&f, _i ? 13010 : 13000);
	toggle_sim_set_destructors(f.sim, TOGGLE_SIM_DESTRUCTORS_HELD);
	f.agent = lfx_agent(&f, TOGGLE_MODE_LAZY);
	CUgraphNode nodes[NP];
	CUgraph g = capture_ours(&f, nodes);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, 0xff);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_int_eq(toggle_graph_forget(f.agent, g), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	CUgraph s = capture_stranger(&f, NS);
	assert_reused(s, g, nodes);
	CUgraphExec se;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	int rc = launch(&f, s, se);
	if (_i) {
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(f.others, NS);
	} else {
		ck_assert_int_eq(rc, TOGGLE_ESTALE); /* fail closed, nothing ran */
		ck_assert_uint_eq(f.others, 0);
		toggle_sim_run_destructors(f.sim); /* the driver's word comes */
		ck_assert_int_eq(launch(&f, s, se), 0);
		ck_assert_uint_eq(f.others, NS);
	}
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

/*
 * A graph destroyed while its exec is bound (gone), its record holding second
 * execs (the producer-free and full execs and a set exec), and a new capture
 * of ours that gets its handle: the record is cleared inside that capture,
 * where no exec may be destroyed, so they are parked for later.  Every parked
 * exec and the graph it was built from must still be destroyed by close:
 * before, the record kept only the producer-free and full execs, so the full
 * exec's graph and the set exec were lost with it (1 graph and 1 exec left in
 * the simulator).  _i: driver 13.0, 13.1.
 */
START_TEST(test_second_execs_parked_in_a_capture_are_freed)
{
	struct lfx f;
	lfx_open(&f, TOGGLE_MODE_LAZY, _i ? 13010 : 13000);
	CUgraph g = capture_ours(&f, NULL);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, e), 0);
	/* A set in between held until its set exec is built (bare.c's TG_SETX_STEADY, 8). */
	for (int64_t st = 0; st < 12; st++) {
		step(&f, st, 0x0f);
		ck_assert_int_eq(launch(&f, g, e), 0);
		ck_assert_uint_eq(f.ran, 0x0f);
	}
	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.set_builds, 1);
	ck_assert_uint_eq(toggle_sim_exec_count(f.sim), 4);  /* e, producer-free, full, set */
	ck_assert_uint_eq(toggle_sim_graph_count(f.sim), 2); /* g and the full exec's graph */
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS); /* e still bound */

	CUgraph g2 = capture_ours(&f, NULL);
	ck_assert_ptr_eq(g2, g); /* the handle, reused inside the capture */
	CUgraphExec e2;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g2, &e2), 0);
	step(&f, 12, 0xff);
	ck_assert_int_eq(launch(&f, g2, e2), 0);
	ck_assert_uint_eq(f.ran, 0xff);

	toggle_sim_synchronize(f.sim);
	toggle_agent_close(f.agent);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_exec_destroy(e2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g2), CUDA_SUCCESS);
	ck_assert_msg(toggle_sim_exec_count(f.sim) == 0 && toggle_sim_graph_count(f.sim) == 0,
		      "left in the simulator: %u execs, %u graphs", toggle_sim_exec_count(f.sim),
		      toggle_sim_graph_count(f.sim));
	toggle_sim_destroy(f.sim);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lifetime_reuse");
	TCase *tc = tcase_create("lifetime");
	tcase_add_loop_test(tc, test_stranger_behind_dead_handle, 0, 4);
	tcase_add_loop_test(tc, test_stranger_random, 0, 64);
	tcase_add_loop_test(tc, test_destructor_not_run_yet, 0, 2);
	tcase_add_loop_test(tc, test_second_execs_parked_in_a_capture_are_freed, 0, 2);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
