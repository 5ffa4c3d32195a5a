/*
 * check_bare_assembled.c - host modes' producer-free and full execs assembled
 * node by node (the default; toggle_config.clone_execs opts out) on the
 * simulator: no clone of the
 * captured graph, what each launch ran (every kernel records itself: the
 * fixture's log, in capture order), node sets on the assembled full exec, a
 * set exec cloned from its graph, the fallback to a clone when the assembly
 * fails, rebind and close, clone_execs.  The clones are check_bare_exec.c's.
 */
#include "fixture_bare.h"

static struct bfx *open_assembled(enum toggle_mode mode)
{
	struct bfx *f = bfx_new(0);
	struct toggle_config cfg = bfx_config(f, mode); /* the default: assembled */
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	return f;
}

static const char *const walk[] = {
	"none", "resid_post:1", "all", "mlp_out:0-3,resid_post:7", "none", "all",
	"resid_post:*", "none", "resid_post:*,mlp_out:*", "mlp_out:3",
};

/* Both execs assembled, none cloned; every set runs exactly its producers on the
 * exec the pick names (all off: the bare one; every other set: the full one, its
 * producers set from their states, all on as assembled). */
START_TEST(test_assembled_execs_run_each_set)
{
	struct bfx *f = open_assembled(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bare_exec && gs.full_exec);
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), 0);
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CREATE), 2);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3); /* the application's, bare, full */
	/* the bare exec's graph is gone, the full exec's kept (its node handles) */
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 2);
	struct toggle_stats st = bfx_stats(f);
	ck_assert_uint_eq(st.assembled_builds, 2);
	ck_assert_uint_eq(st.assemble_fallbacks, 0);
	ck_assert_uint_eq(st.bare_builds, 1);
	ck_assert_uint_eq(st.full_builds, 1);
	bool state[MAX_K];
	for (int k = 0; k < MAX_K; k++)
		state[k] = true; /* assembled with every producer, each enabled */
	struct allx_model m = {0};
	for (size_t i = 0; i < sizeof(walk) / sizeof(walk[0]); i++) {
		struct toggle_set s = spec(walk[i]);
		bool fits = set_fits(&s);
		allx_model_step(&m);
		bool all = allx_model_runs(&m, &s); /* all on on the all-on exec */
		uint64_t calls = set_calls(f), want = fits || all ? 0 : sets_to(f, state, &s);
		step(f, (int64_t)i, &s);
		launch_check(f, &s);
		launch_check(f, &s);
		ck_assert_msg(set_calls(f) - calls == want, "set %s: %llu node sets, want %llu",
			      walk[i], (unsigned long long)(set_calls(f) - calls),
			      (unsigned long long)want);
		gs = gstatus(f);
		ck_assert_msg(gs.bare_running == fits && gs.full_running == (!fits && !all) &&
				      gs.set_running == all,
			      "set %s", walk[i]);
	}
	ck_assert(m.built); /* the walk reached its all-on exec */
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), 0);
	bfx_close(f);
}
END_TEST

/* A set in between that holds: its set exec is a clone of the assembled full exec's graph,
 * run with no node set; exact before and after. */
START_TEST(test_assembled_full_graph_gives_the_set_exec)
{
	struct bfx *f = open_assembled(TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set s = spec("resid_post:1-2,mlp_out:6"), none = spec("none");
	int64_t n = 0;
	for (int i = 0; i < STEADY + 2; i++) {
		step(f, n++, &s);
		launch_check(f, &s);
	}
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.set_exec && gs.set_running);
	ck_assert_uint_eq(bfx_stats(f).set_builds, 1);
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), 1);
	uint64_t c = set_calls(f);
	step(f, n++, &s);
	launch_check(f, &s);
	ck_assert_uint_eq(set_calls(f) - c, 0);
	step(f, n++, &none);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
	bfx_close(f);
}
END_TEST

/* The assembly fails (here: the first node it adds): that exec is cloned instead, counted;
 * the other is assembled; every set exact.  Failing at every add: both cloned. */
START_TEST(test_failed_assembly_falls_back_to_a_clone)
{
	struct bfx *f = open_assembled(TOGGLE_MODE_LAZY);
	bfx_capture(f);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_ADD_NODE, 0, (_i ? 1000 : 1), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	struct toggle_graph_status gs = gstatus(f);
	ck_assert(gs.bound && gs.bare_exec && gs.full_exec);
	struct toggle_stats st = bfx_stats(f);
	ck_assert_uint_eq(st.assemble_fallbacks, (_i ? 2 : 1));
	ck_assert_uint_eq(st.assembled_builds, (_i ? 0 : 1));
	ck_assert_uint_eq(st.bare_build_failures + st.full_build_failures, 0);
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), (_i ? 2 : 1));
	/* nothing of the failed assemblies left: the graph, the full exec's graph; 3 execs */
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 2);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3);
	const char *sets[] = {"none", "all", "mlp_out:2", "none"};
	for (int i = 0; i < 4; i++) {
		struct toggle_set s = spec(sets[i]);
		step(f, i, &s);
		launch_check(f, &s);
	}
	bfx_close(f);
}
END_TEST

/* Rebind and close: the assembled execs go with the old exec and come again for the new;
 * close leaves only the application's. */
START_TEST(test_assembled_execs_rebind_and_close)
{
	struct bfx *f = open_assembled(TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set none = spec("none"), all = spec("all");
	step(f, 1, &none);
	launch_check(f, &none);
	CUgraphExec old = f->exec;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, f->exec), 0);
	ck_assert_uint_eq(bfx_stats(f).assembled_builds, 4);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 4); /* old, new, new bare, new full */
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 2);
	step(f, 2, &all);
	launch_check(f, &all);
	ck_assert(gstatus(f).full_running);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	CUgraph g = f->graph;
	CUgraphExec e = f->exec;
	toggle_agent_close(f->agent);
	f->agent = NULL;
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 1);
	ck_assert_uint_eq(toggle_sim_graph_count(f->sim), 1);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	toggle_sim_destroy(f->sim);
	free(f);
}
END_TEST

/* The default, through the fixture's own opening: assembled, no clone.  With
 * clone_execs the execs are clones, as before session 20. */
START_TEST(test_default_assembles_clone_execs_clones)
{
	struct bfx *f = bfx_open(TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), 0);
	ck_assert_uint_eq(bfx_stats(f).assembled_builds, 2);
	bfx_close(f);

	f = bfx_new(0);
	struct toggle_config cfg = bfx_config(f, TOGGLE_MODE_LAZY);
	cfg.clone_execs = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	bfx_capture_bound(f);
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), 2);
	ck_assert_uint_eq(bfx_stats(f).assembled_builds, 0);
	ck_assert_uint_eq(bfx_stats(f).assemble_fallbacks, 0);
	bfx_close(f);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("bare_assembled");
	TCase *t = tcase_create("core");
	tcase_add_loop_test(t, test_assembled_execs_run_each_set, 0, 2);
	tcase_add_test(t, test_assembled_full_graph_gives_the_set_exec);
	tcase_add_loop_test(t, test_failed_assembly_falls_back_to_a_clone, 0, 2);
	tcase_add_test(t, test_assembled_execs_rebind_and_close);
	tcase_add_test(t, test_default_assembles_clone_execs_clones);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run_suite(suite());
}
