/*
 * check_set_exec.c - host modes' set exec on the simulator: a set in between
 * that holds for some steps gets, one graph a step, an exec of the graph
 * without the producers it leaves off, which its launches then run with no
 * node set and no disabled node; other sets run the full exec as before.
 * All on gets an all-on exec, the full exec's graph instantiated again, at the
 * step after it ran on a full exec a set in between had set (node sets leave
 * an exec slower all on than one never set), kept while the full exec is: all
 * on alternating with a set in between then sets no node at all.
 * Ground truth: the kernels each launch ran (the fixture's log), in order.
 */
#include "fixture_bare.h"

/* Steps n.. with set s, each launched and checked, until the set exec is built
 * (or `most` steps): the number of steps it took. */
static int hold(struct bfx *f, int64_t *n, const struct toggle_set *s, int most)
{
	uint64_t built = bfx_stats(f).set_builds;
	for (int i = 1; i <= most; i++) {
		step(f, (*n)++, s);
		launch_check(f, s);
		if (bfx_stats(f).set_builds != built)
			return i;
	}
	return 0;
}

START_TEST(test_set_exec_after_a_steady_set)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set s = spec("resid_post:1-2,mlp_out:6"), t = spec("mlp_out:0-3"),
			  all = spec("all"), none = spec("none");
	int64_t n = 0;
	unsigned execs = toggle_sim_exec_count(f->sim); /* the application's, bare, full */
	ck_assert_uint_eq(execs, 3);

	/* Until the set has held for STEADY steps, the full exec; at the step after, the
	 * set exec is built and that step's launch (eager: its apply) picks it. */
	for (int i = 0; i < STEADY + 1; i++) {
		step(f, n++, &s);
		launch_check(f, &s);
		ck_assert(gstatus(f).full_running && !gstatus(f).set_exec);
	}
	ck_assert_int_eq(hold(f, &n, &s, 1), 1);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.set_exec && gs.set_running && !gs.full_running && !gs.bare_running);
	ck_assert_uint_eq(gs.set_replays, 1);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), execs + 1);
	/* No node set from then on. */
	uint64_t c = set_calls(f);
	step(f, n++, &s);
	launch_check(f, &s);
	launch_check(f, &s);
	ck_assert_uint_eq(gstatus(f).set_replays, 3);
	ck_assert_uint_eq(set_calls(f) - c, 0);

	/* Another set: the full exec again, exactly; back to s: the set exec, not rebuilt. */
	step(f, n++, &t);
	launch_check(f, &t);
	ck_assert(gstatus(f).full_running);
	c = set_calls(f);
	step(f, n++, &s);
	launch_check(f, &s);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(set_calls(f) - c, 0);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1);

	/* All off never gets one (its exec disables nothing).  All on, now that sets in
	 * between have run on the full exec (its producers disabled and enabled again by
	 * node sets), gets its all-on exec at the next step, without holding: the full
	 * exec's graph instantiated again, which no node set touched; its launches set
	 * no node. */
	ck_assert_int_eq(hold(f, &n, &none, 3 * STEADY), 0);
	ck_assert(gstatus(f).bare_running);
	ck_assert_int_eq(hold(f, &n, &all, 3 * STEADY), 2);
	c = set_calls(f);
	step(f, n++, &all);
	launch_check(f, &all);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(set_calls(f) - c, 0);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), execs + 2); /* s's set exec kept */

	/* t held: its set exec replaces s's (one at a time); the all-on exec stays. */
	ck_assert_int_gt(hold(f, &n, &t, 20), 0);
	step(f, n++, &t);
	launch_check(f, &t);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), execs + 2);
	c = set_calls(f);
	step(f, n++, &all);
	launch_check(f, &all);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(set_calls(f) - c, 0);
	step(f, n++, &s);
	launch_check(f, &s);
	ck_assert(gstatus(f).full_running);
	struct toggle_stats st = bfx_stats(f);
	ck_assert_uint_eq(st.set_builds, 3);
	ck_assert_uint_eq(st.set_build_failures, 0);
	ck_assert_uint_gt(st.set_switches, 0);

	/* A rebind drops it; unbind and close leave nothing (ASan: no leak). */
	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert(!gstatus(f).set_exec);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	ck_assert_int_gt(hold(f, &n, &s, 20), 0);
	step(f, n++, &s);
	launch_check(f, &s);
	ck_assert(gstatus(f).set_running);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, NULL), 0);
	ck_assert(!gstatus(f).set_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1); /* the application's */
	bfx_close(f);
}
END_TEST

/* All on gets its all-on exec only once a set in between has run on the full exec: a
 * full exec no node set touched is as good; a rebind's new full exec starts untouched. */
START_TEST(test_all_on_set_exec_only_after_node_sets)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set s = spec("mlp_out:2"), all = spec("all"), none = spec("none");
	int64_t n = 0;
	ck_assert_int_eq(hold(f, &n, &none, 2), 0);
	ck_assert_int_eq(hold(f, &n, &all, 3 * STEADY), 0);
	ck_assert(gstatus(f).full_running && !gstatus(f).set_exec);
	/* one step of a set in between on the full exec */
	step(f, n++, &s);
	launch_check(f, &s);
	ck_assert(gstatus(f).full_running);
	ck_assert_int_eq(hold(f, &n, &all, 3 * STEADY), 2);
	step(f, n++, &all);
	launch_check(f, &all);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1);
	/* a rebind: new execs, the full one untouched again */
	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	ck_assert_int_eq(hold(f, &n, &all, 3 * STEADY), 0);
	ck_assert(gstatus(f).full_running && !gstatus(f).set_exec);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1);
	bfx_close(f);
}
END_TEST

/* Steps n, n + 1: set in between s, then all on, each launched and checked: the all-on
 * launch runs the full exec that s set, which queues its all-on exec. */
static void set_then_all_on(struct bfx *f, int64_t *n, const struct toggle_set *s)
{
	struct toggle_set all = spec("all");
	step(f, (*n)++, s);
	launch_check(f, s);
	step(f, (*n)++, &all);
	launch_check(f, &all);
	ck_assert(gstatus(f).full_running);
}

/* All on alternating with a set in between at every step (a per-step plan): neither
 * holds, yet after the first all-on step on the set full exec its all-on exec is built
 * at the next step_begin, and from then on all on runs it and the set in between the
 * full exec, which keeps that set's states: no node set after the first step back to
 * the set in between.  Each launch runs
 * exactly its step's producers (the kernel log).  With set execs off, none. */
START_TEST(test_all_on_alternating_with_a_set_in_between)
{
	bool off = _i / 2;
	struct bfx *f = bfx_new(0);
	struct toggle_config cfg = bfx_config(f, _i % 2 ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	cfg.no_set_exec = off;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	bfx_capture_bound(f);
	struct toggle_set s = spec("resid_post:*"), all = spec("all");
	int64_t n = 0;
	set_then_all_on(f, &n, &s);
	ck_assert(!gstatus(f).set_exec);
	uint64_t c = 0;
	for (int i = 0; i < 20; i++) {
		const struct toggle_set *x = i % 2 ? &all : &s;
		if (i == 1)
			c = set_calls(f); /* step 0 set the full exec from all on to s */
		step(f, n++, x);
		launch_check(f, x);
		launch_check(f, x);
		struct toggle_graph_status gs = gstatus(f);
		ck_assert_msg(gs.set_running == (!off && x == &all) &&
				      gs.full_running == (off || x == &s),
			      "step %d: set_running %d full_running %d", i, gs.set_running,
			      gs.full_running);
	}
	struct toggle_stats st = bfx_stats(f);
	ck_assert_uint_eq(st.set_builds, off ? 0 : 1);
	ck_assert_uint_eq(st.set_build_failures, 0);
	if (off)
		ck_assert_uint_gt(set_calls(f) - c, 0);
	else
		ck_assert_uint_eq(set_calls(f) - c, 0);
	ck_assert_uint_eq(gstatus(f).set_replays, off ? 0 : 20);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), off ? 3 : 4);
	bfx_close(f);
}
END_TEST

/* Two graphs captured and bound, g0 first: the fixture's graph (the one its helpers
 * launch) is g1; use_graph makes another current. */
static void capture_two(struct bfx *f, CUgraph *g0, CUgraphExec *e0, CUgraph *g1, CUgraphExec *e1)
{
	bfx_capture_bound(f);
	*g0 = f->graph;
	*e0 = f->exec;
	bfx_capture_bound(f);
	*g1 = f->graph;
	*e1 = f->exec;
}

static void use_graph(struct bfx *f, CUgraph g, CUgraphExec e)
{
	f->graph = g;
	f->exec = e;
}

/* Two graphs bound, one launched: only that one gets an all-on exec (eager's apply names
 * both; the other waits for a launch, and gets its own at the step after one). */
START_TEST(test_all_on_exec_only_for_graphs_in_use)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	CUgraph g0, g1;
	CUgraphExec e0, e1;
	capture_two(f, &g0, &e0, &g1, &e1);
	struct toggle_set s = spec("mlp_out:1-2"), all = spec("all");
	int64_t n = 0;
	set_then_all_on(f, &n, &s);
	for (int i = 0; i < 2 * STEADY; i++) {
		step(f, n++, &all);
		launch_check(f, &all);
	}
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, g0, &gs), 0);
	ck_assert(!gs.set_exec);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1);
	use_graph(f, g0, e0);
	/* g0 launched at all on: in eager mode its full exec was set at s's apply, so its
	 * all-on exec comes at the next step; in lazy mode it never ran s (none). */
	step(f, n++, &all);
	launch_check(f, &all);
	step(f, n++, &all);
	launch_check(f, &all);
	ck_assert_int_eq(toggle_graph_status(f->agent, g0, &gs), 0);
	ck_assert(gs.set_exec == (_i == 1) && gs.set_running == (_i == 1));
	ck_assert_uint_eq(bfx_stats(f).set_builds, _i ? 2 : 1);
	use_graph(f, g1, e1); /* the fixture's to close */
	bfx_close(f);
}
END_TEST

/* The all-on exec's build fails: counted, all on runs on the full exec exactly, not
 * tried again until a rebind. */
START_TEST(test_all_on_exec_build_failure)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set s = spec("mlp_out:1"), all = spec("all");
	int64_t n = 0;
	set_then_all_on(f, &n, &s);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_INSTANTIATE, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	for (int i = 0; i < 6; i++) {
		step(f, n++, &all);
		launch_check(f, &all);
		ck_assert(gstatus(f).full_running && !gstatus(f).set_exec);
	}
	struct toggle_stats st = bfx_stats(f);
	ck_assert_uint_eq(st.set_builds, 0);
	ck_assert_uint_eq(st.set_build_failures, 1);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "no all-on exec"));
	bfx_close(f);
}
END_TEST

/* A build that fails: counted, the full exec runs the set exactly, the same set is
 * not tried again; another set that holds gets one. */
START_TEST(test_set_exec_build_failure)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set s = spec("resid_post:3"), t = spec("resid_post:4");
	int64_t n = 0;
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_INSTANTIATE, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	for (int i = 0; i < 3 * STEADY; i++) {
		step(f, n++, &s);
		launch_check(f, &s);
	}
	struct toggle_stats st = bfx_stats(f);
	ck_assert_uint_eq(st.set_builds, 0);
	ck_assert_uint_eq(st.set_build_failures, 1);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "no set exec"));
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(!gs.set_exec && gs.full_running);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3);
	ck_assert_int_gt(hold(f, &n, &t, 20), 0);
	step(f, n++, &t);
	launch_check(f, &t);
	ck_assert(gstatus(f).set_running);
	bfx_close(f);
}
END_TEST

/* Several graphs: one build a step, each graph its own set exec, every launch exact. */
START_TEST(test_set_exec_one_graph_a_step)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_LAZY);
	enum { G = 3 };
	CUgraph graph[G];
	CUgraphExec exec[G];
	for (int i = 0; i < G; i++) {
		bfx_capture_bound(f);
		graph[i] = f->graph;
		exec[i] = f->exec;
	}
	struct toggle_set s = spec("mlp_out:5");
	uint64_t first = 0;
	for (int64_t n = 0; n < STEADY + 1 + G + 2; n++) {
		step(f, n, &s);
		for (int i = 0; i < G; i++) {
			f->graph = graph[i];
			f->exec = exec[i];
			launch_check(f, &s);
		}
		uint64_t b = bfx_stats(f).set_builds;
		if (b && !first)
			first = (uint64_t)n;
		/* never more than one build a step */
		ck_assert_uint_le(b, first ? (uint64_t)n - first + 1 : 0);
	}
	ck_assert_uint_eq(bfx_stats(f).set_builds, G);
	for (int i = 0; i < G; i++) {
		struct toggle_graph_status gs;
		ck_assert_int_eq(toggle_graph_status(f->agent, graph[i], &gs), 0);
		ck_assert(gs.set_exec && gs.set_running);
	}
	bfx_close(f);
}
END_TEST

/* no_full_exec (_i 0: it is made from the full exec's clone) or no_set_exec (_i 1): none;
 * the held set runs the main exec (0) or the full exec (1), exactly. */
START_TEST(test_set_exec_off)
{
	struct bfx *f = bfx_new(0);
	struct toggle_config cfg = bfx_config(f, TOGGLE_MODE_LAZY);
	cfg.no_full_exec = _i == 0;
	cfg.no_set_exec = _i == 1;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	bfx_capture_bound(f);
	struct toggle_set s = spec("resid_post:0,mlp_out:7");
	int64_t n = 0;
	ck_assert_int_eq(hold(f, &n, &s, 3 * STEADY), 0);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(!gs.set_exec && gs.full_running == (_i == 1));
	ck_assert_uint_eq(bfx_stats(f).set_build_failures, 0);
	bfx_close(f);
}
END_TEST

/* A graph not launched since the set became current (an engine's batch size it no
 * longer replays) gets none; once launched at that set it gets one, in eager mode too
 * (_i 1), where the step that changes the set names every bound graph before any
 * launch. */
START_TEST(test_set_exec_only_for_graphs_in_use)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	CUgraph g0, g1;
	CUgraphExec e0, e1;
	capture_two(f, &g0, &e0, &g1, &e1);
	struct toggle_set s = spec("mlp_out:1-2");
	int64_t n = 0;
	ck_assert_int_gt(hold(f, &n, &s, 20), 0);
	for (int i = 0; i < 2 * STEADY; i++) {
		step(f, n++, &s);
		launch_check(f, &s);
	}
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, g0, &gs), 0);
	ck_assert(!gs.set_exec);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1);
	/* White-box: the candidates come from the picks, not from a walk over every record
	 * at each step (bench_host idle: the step's cost must not grow with the graphs
	 * bound).  Lazy: the launched graph's pick named it, and it is taken; eager: the
	 * set's apply named both, and g0 waits for a launch. */
	ck_assert_uint_eq(f->agent->setx_n, _i ? 1 : 0);
	if (_i)
		ck_assert_uint_eq(f->agent->setx_queue[f->agent->setx_head],
				  f->agent->graphs[0]->slot);
	/* g0 launched: its set exec comes at a later step (the set still holds; eager: the
	 * launch's step looks at it again). */
	use_graph(f, g0, e0);
	step(f, n++, &s);
	launch_check(f, &s);
	step(f, n++, &s);
	launch_check(f, &s);
	ck_assert_int_eq(toggle_graph_status(f->agent, g0, &gs), 0);
	ck_assert(gs.set_exec && gs.set_running);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 2);
	use_graph(f, g1, e1); /* the fixture's to close */
	bfx_close(f);
}
END_TEST

/* Eager: the set's apply names every bound graph; the ones never launched wait at the
 * back of the ring, looked at a few a step, and one launched behind more of them than a
 * step looks at still gets its set exec. */
START_TEST(test_set_exec_behind_waiting_graphs)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_EAGER);
	enum { G = 20 };
	for (int i = 0; i < G; i++)
		bfx_capture_bound(f); /* f->graph, f->exec: the last, the one launched */
	struct toggle_set s = spec("resid_post:3,mlp_out:0");
	int64_t n = 0;
	int took = hold(f, &n, &s, STEADY + 1 + 2 * G);
	ck_assert_int_gt(took, 0);
	step(f, n++, &s);
	launch_check(f, &s);
	ck_assert(gstatus(f).set_running);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1);
	ck_assert_uint_eq(f->agent->setx_n, G - 1); /* the others still wait */
	for (int i = 0; i < 4 * G; i++) {
		step(f, n++, &s);
		launch_check(f, &s);
	}
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1); /* never launched: none built */
	bfx_close(f);
}
END_TEST

static Suite *set_exec_suite(void)
{
	Suite *s = suite_create("set_exec");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_set_exec_after_a_steady_set, 0, 2);
	tcase_add_loop_test(tc, test_all_on_set_exec_only_after_node_sets, 0, 2);
	tcase_add_loop_test(tc, test_all_on_alternating_with_a_set_in_between, 0, 4);
	tcase_add_test(tc, test_all_on_exec_build_failure);
	tcase_add_loop_test(tc, test_all_on_exec_only_for_graphs_in_use, 0, 2);
	tcase_add_loop_test(tc, test_set_exec_build_failure, 0, 2);
	tcase_add_test(tc, test_set_exec_one_graph_a_step);
	tcase_add_loop_test(tc, test_set_exec_off, 0, 2);
	tcase_add_loop_test(tc, test_set_exec_only_for_graphs_in_use, 0, 2);
	tcase_add_test(tc, test_set_exec_behind_waiting_graphs);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(set_exec_suite());
}
