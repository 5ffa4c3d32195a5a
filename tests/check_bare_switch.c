/*
 * check_bare_switch.c - the producer-free ("bare") exec on the simulator: driver
 * failures while switching between the two execs, an exec re-instantiated
 * behind a handle, the status lane's flags, device mode's decision.
 * The simulator, the agent, kernels that record themselves and the launch
 * check are the bare suites' fixture (tests/fixture_bare.h).  Split out of
 * check_bare.c (issue 29).
 */
#include "fixture_bare.h"

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
	/* No full exec: the sets the bare exec does not fit run the main exec. */
	struct bfx *f = bfx_open_opts(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY, false, true, 0);
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
 * Host modes: the full exec runs every set the bare exec does not fit, its
 * producers set from its own states.  A node set that fails on it refuses the
 * launch as any failed sync does (lazy; eager: the step's apply fails and the
 * exec is out of date, its launch retries), and the full exec's states are not
 * trusted after: the retry sets every one that may differ.  Ground truth: the
 * kernels each launch ran.
 */
START_TEST(test_full_sync_failures_run_no_wrong_set)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set a = spec("resid_post:0-3"), b = spec("mlp_out:1,resid_post:5"),
			  none = spec("none");
	int64_t n = 0;
	ck_assert_int_eq(step_launch(f, n++, &a), 0);
	ck_assert(gstatus(f).full_running);
	uint64_t full0 = gstatus(f).full_replays;

	/* a -> b, the second node set fails. */
	struct toggle_anomalies an0, an1;
	toggle_anomalies_get(f->agent, &an0);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 1, 1, CUDA_ERROR_UNKNOWN);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &b), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, n++, NULL), 0);
	if (_i == 0) { /* lazy: the launch syncs, fails and is refused: nothing runs */
		f->nlog = 0;
		ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream),
				 TOGGLE_ECUDA);
		ck_assert_int_eq(f->nlog, 0);
	} else { /* eager: the apply at the step failed */
		ck_assert_uint_eq(gstatus(f).applied_version, 0);
	}
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "full exec"));
	toggle_anomalies_get(f->agent, &an1);
	ck_assert_uint_eq(an1.driver_errors, an0.driver_errors + 1);
	ck_assert_uint_eq(gstatus(f).full_replays, full0);
	/* The retry: every producer that may differ set again, b exactly, on the full exec. */
	launch_check(f, &b);
	ck_assert(gstatus(f).full_running);

	/* From the bare exec to b, a node set fails: the same, then a and b exactly. */
	ck_assert_int_eq(step_launch(f, n++, &none), 0);
	ck_assert(gstatus(f).bare_running);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 0, 1, CUDA_ERROR_UNKNOWN);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &a), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, n++, NULL), 0);
	if (_i == 0) {
		f->nlog = 0;
		ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream),
				 TOGGLE_ECUDA);
		ck_assert_int_eq(f->nlog, 0);
	}
	launch_check(f, &a);
	ck_assert(gstatus(f).full_running);
	ck_assert_int_eq(step_launch(f, n++, &b), 0);
	ck_assert_int_eq(step_launch(f, n++, &none), 0);
	ck_assert_int_eq(step_launch(f, n++, &b), 0);
	ck_assert(gstatus(f).full_running);

	/* The full exec's launch fails: refused, nothing ran; the next runs b. */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, CUDA_ERROR_LAUNCH_FAILED);
	f->nlog = 0;
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec, f->stream), TOGGLE_ECUDA);
	ck_assert_int_eq(f->nlog, 0);
	launch_check(f, &b);
	bfx_close(f);
}
END_TEST

/* The application's exec launched by the caller itself (after a prepare): it ran s. */
static void direct_check(struct bfx *f, const struct toggle_set *s)
{
	int want[MAX_K];
	int n = expected(f, s, want);
	f->nlog = 0;
	ck_assert_int_eq(toggle_sim_graph_launch(f->exec, f->stream), CUDA_SUCCESS);
	ck_assert_int_eq(f->nlog, n);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(f->log[i], want[i]);
}

/*
 * toggle_graph_prepare (the caller launches the application's exec itself,
 * as torch's replay of a graph with random ops does) while the full exec runs
 * the sets in between: the main exec is brought to the set from its own
 * states, and the next guarded launch runs the full exec again, from its own.
 */
START_TEST(test_full_and_prepare_keep_their_states)
{
	struct bfx *f = bfx_open(_i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	struct toggle_set a = spec("resid_post:0-3"), b = spec("resid_post:2-5");
	step(f, 1, &a);
	launch_check(f, &a);
	ck_assert(gstatus(f).full_running);

	/* prepare + the application's launch: a, from the main exec */
	ck_assert_int_eq(toggle_graph_prepare(f->agent, f->graph, f->exec, f->stream), 0);
	ck_assert(!gstatus(f).full_running);
	direct_check(f, &a);

	/* b through the agent: the full exec, which held a (0,1 off and 4,5 on) */
	uint64_t c = set_calls(f);
	step(f, 2, &b);
	launch_check(f, &b);
	ck_assert(gstatus(f).full_running);
	ck_assert_uint_eq(set_calls(f) - c, 4);

	/* prepare at b: the main exec held a, the same four */
	c = set_calls(f);
	ck_assert_int_eq(toggle_graph_prepare(f->agent, f->graph, f->exec, f->stream), 0);
	ck_assert_uint_eq(set_calls(f) - c, 4);
	direct_check(f, &b);

	/* a guarded launch at the same set: the main exec, which holds it */
	c = set_calls(f);
	launch_check(f, &b);
	ck_assert(!gstatus(f).full_running);
	ck_assert_uint_eq(set_calls(f) - c, 0);
	/* the next set: the full exec again, from the b it held (2,3 off, 6 on) */
	struct toggle_set d = spec("resid_post:4-6");
	step(f, 3, &d);
	launch_check(f, &d);
	ck_assert(gstatus(f).full_running);
	ck_assert_uint_eq(set_calls(f) - c, 3);
	bfx_close(f);
}
END_TEST

/*
 * The identity path (CUDA 13.1's exec ids, handles reused): the application
 * re-instantiates its exec behind the same handle (every producer on again)
 * while the bare exec runs, without a bind.  The next change rebinds through
 * the exec id and rebuilds the bare exec for the new exec; _i 1, 3: that
 * rebuild fails, and the main exec must then run the all-off step with
 * every producer off.  _i 0-1 lazy, 2-3 eager; the execs cloned (clone_execs), the
 * clone's failure injected.
 */
START_TEST(test_bare_reinstantiated_behind_handle)
{
	bool eager = _i >= 2, fail_build = _i % 2;
	struct bfx *f = bfx_open_clones(eager ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY, 13010);
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
	ck_assert_uint_eq(st.full_builds, 2); /* its clone is the next one, not failed */
	/* the application's, the full one and (unless its build failed) the bare one */
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), fail_build ? 2 : 3);
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
	const uint64_t both = TOGGLE_SHM_GRAPH_BARE | TOGGLE_SHM_GRAPH_FULL;
	ck_assert_uint_eq(st.graphs[0].flags,
			  TOGGLE_SHM_GRAPH_BOUND | both | TOGGLE_SHM_GRAPH_BARE_RUNNING);
	ck_assert_uint_eq(st.graphs[0].flags & taint, 0);

	step(f, 2, &some);
	launch_check(f, &some);
	step(f, 3, &some);
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	/* host modes: the full exec runs every set the bare one does not fit */
	ck_assert_uint_eq(st.graphs[0].flags,
			  TOGGLE_SHM_GRAPH_BOUND | both | TOGGLE_SHM_GRAPH_FULL_RUNNING);
	struct toggle_set every = spec("all");
	step(f, 4, &every);
	launch_check(f, &every);
	step(f, 5, &every);
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.graphs[0].flags,
			  TOGGLE_SHM_GRAPH_BOUND | both | TOGGLE_SHM_GRAPH_FULL_RUNNING);
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

/*
 * A graph its planner toggles gets a bare exec assembled node by node (the
 * driver refuses to clone it: issue 31; tests/check_device_bare.c tests it
 * in depth), never a clone.  A graph a device-mode agent toggles on the
 * host (fallback) gets one, cloned.
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
	ck_assert(gs.bare_exec && gs.full_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(f->sim), 3); /* the device, bare and full execs */
	ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), 0); /* assembled */
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.bare_builds, 1);
	ck_assert_uint_eq(st.bare_build_failures, 0);
	struct toggle_set none = spec("none"), one = spec("resid_post:5");
	step(f, 1, &none);
	launch_check(f, &none);
	ck_assert(gstatus(f).bare_running);
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
	ck_assert(gs.full_exec); /* a clone, like host modes' (issue 23): no lifetime object */
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

static Suite *bare_switch_suite(void)
{
	Suite *s = suite_create("bare_switch");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_bare_switch_failures_run_no_wrong_set, 0, 2);
	tcase_add_loop_test(tc, test_full_sync_failures_run_no_wrong_set, 0, 2);
	tcase_add_loop_test(tc, test_full_and_prepare_keep_their_states, 0, 2);
	tcase_add_loop_test(tc, test_bare_reinstantiated_behind_handle, 0, 4);
	tcase_add_test(tc, test_bare_status_lane_flags);
	tcase_add_test(tc, test_bare_device_mode_decision);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(bare_switch_suite());
}
