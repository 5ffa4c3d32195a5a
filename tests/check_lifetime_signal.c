/*
 * check_lifetime_signal.c - libtoggle knows when a graph dies (issue #28), on the
 * simulator with its handle reuse on (a destroyed graph's handle and node
 * handles go to the next graph, as on the H200): what libtoggle does with
 * the signal: a graph destroyed before its exec (the exec still toggled or
 * refused, never a stranger's exec), a bound exec destroyed (rebind, its
 * bare exec and its upload), the absence of user objects (today's checks),
 * no identity work on the hot path.
 * The simulator, the agent, its kernels and their log are the lifetime
 * suites' fixture (tests/fixture_lifetime.h).  Split out of check_lifetime.c
 * (issue 29).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "fixture_lifetime.h"

/* ---- 3. what libtoggle does with it ---------------------------------------------- */

/* Driver calls of the user-object entry points through the agent's table. */
static unsigned long uo_calls;

static CUresult count_retain(CUgraph g, CUuserObject o, unsigned n, unsigned fl)
{
	uo_calls++;
	return toggle_sim_graph_retain_user_object(g, o, n, fl);
}

static CUresult count_release(CUgraph g, CUuserObject o, unsigned n)
{
	uo_calls++;
	return toggle_sim_graph_release_user_object(g, o, n);
}

/* Device mode's graph: the planner, then NP device-updatable producers. */
static CUgraph capture_ours_device(struct lfx *f)
{
	CUgraph g;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(f->agent, f->s), 0);
	for (int h = 0; h < NP; h++) {
		void *fp = f;
		int hk = h;
		void *params[] = {&fp, &hk};
		CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
				    .blockDimY = 1, .blockDimZ = 1, .hStream = f->s};
		ck_assert_int_eq(toggle_launch_producer(f->agent, &c, f->produce, params, hook_of(h)), 0);
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s, &g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	return g;
}

/*
 * The graph destroyed before its exec (the driver keeps the exec; its
 * handle goes to the next graph while the exec lives, 299 of 300 on the
 * H200).  _i: lazy, eager, device.  The exec stays ours: at its set it runs
 * as before; at another set the host modes refuse it (its producers can no
 * longer be set) and device mode's planner sets them; a stranger behind the
 * handle, with its own exec, runs untouched; once the exec is destroyed too
 * the record goes.
 */
START_TEST(test_graph_dies_before_exec)
{
	static const enum toggle_mode modes[3] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
						  TOGGLE_MODE_DEVICE};
	struct lfx f;
	enum toggle_mode mode = modes[_i];
	bool dev = mode == TOGGLE_MODE_DEVICE;
	lfx_open(&f, mode, 0);
	CUgraph g = dev ? capture_ours_device(&f) : capture_ours(&f, NULL);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, 0x0f);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	/* At its set it runs as it did; the agent knows at once (its exec holds no
	 * reference to the graph's object: the bind gave the graph a new one). */
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert_ptr_nonnull(strstr(gs.note, "destroyed"));
	/* A stranger gets the handle while the exec lives. */
	CUgraph s = capture_stranger(&f, NS);
	ck_assert_ptr_eq(s, g);
	CUgraphExec se;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, s, &se), 0);
	ck_assert_int_eq(toggle_graph_bind(f.agent, s, se), TOGGLE_ENOENT);
	struct toggle_stats st0, st1;
	toggle_stats_get(f.agent, &st0);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(f.ran, 0);
	/* Our exec at its set, through the same handle, at the same step and at
	 * the next step with the same set (the step's sweep keeps the record:
	 * its exec lives). */
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	ck_assert_uint_eq(f.others, 0);
	step(&f, 1, 0x0f);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	ck_assert_uint_eq(f.others, 0);
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert(gs.bound && gs.exec == e);
	ck_assert_ptr_nonnull(strstr(gs.note, "destroyed"));
	/* Another set. */
	step(&f, 2, 0xf0);
	int rc = launch(&f, g, e);
	if (dev) {
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(f.ran, 0xf0); /* the planner needs no graph */
	} else {
		ck_assert_int_eq(rc, TOGGLE_ESTALE);
		ck_assert_uint_eq(f.ran, 0);
		ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "destroyed"));
	}
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	/* Back at the set the exec holds (the H200's gpu_lifetime leg: 0x0f,
	 * 0xf0, 0x0f, refused on the code before): it runs as it is. */
	step(&f, 3, 0x0f);
	ck_assert_msg(launch(&f, g, e) == 0, "back at its set: %s", toggle_last_error(f.agent));
	ck_assert_uint_eq(f.ran, 0x0f);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(f.ran, 0);
	toggle_stats_get(f.agent, &st1);
	ck_assert_uint_eq(st1.launches_unrelated, st0.launches_unrelated + 3);
	/* The exec goes too: nothing of the record is left. */
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_int_eq(toggle_graph_status(f.agent, s, &gs), 0);
	ck_assert(gs.nodes == 0 && !gs.bound);
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 0);
	lfx_close(&f);
}
END_TEST

/*
 * The GPU leg's order (gpu_lifetime's "before", lazy, where the H200 reused
 * the handle): the graph destroyed before its exec, a stranger behind its
 * handle instantiated by the application (not through the agent) and
 * launched through the agent, then the next step at the exec's set: our
 * exec runs at its set (it did before the stranger), the stranger untouched.
 */
START_TEST(test_graph_dies_before_exec_raw_stranger)
{
	struct lfx f;
	bool dev = _i == 1;
	lfx_open(&f, dev ? TOGGLE_MODE_DEVICE : TOGGLE_MODE_LAZY, 0);
	CUgraph g = dev ? capture_ours_device(&f) : capture_ours(&f, NULL);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, 0x0f);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	CUgraph s = capture_stranger(&f, NS);
	ck_assert_ptr_eq(s, g);
	CUgraphExec se;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(f.ran, 0);
	step(&f, 1, 0x0f);
	ck_assert_msg(launch(&f, g, e) == 0, "our exec at its set: %s", toggle_last_error(f.agent));
	ck_assert_uint_eq(f.ran, 0x0f);
	ck_assert_uint_eq(f.others, 0);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

/*
 * A bound exec destroyed (against the documented rule) and the graph
 * instantiated again into the same handle, on a CUDA 13.0 driver (no exec
 * ids: before, only 13.1 noticed).  _i: lazy, eager, device.  The agent
 * learns it from the driver: no call reaches the dead exec (eager's step
 * begin), its producer-free exec goes, and the next launch rebinds: every
 * producer set (lazy, eager), an upload (device).
 */
START_TEST(test_bound_exec_destroyed)
{
	static const enum toggle_mode modes[3] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
						  TOGGLE_MODE_DEVICE};
	struct lfx f;
	enum toggle_mode mode = modes[_i];
	lfx_open(&f, mode, 13000);
	CUgraph g;
	if (mode == TOGGLE_MODE_DEVICE) {
		ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
		ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_capture_planner(f.agent, f.s), 0);
		for (int h = 0; h < NP; h++) {
			void *fp = &f;
			int hk = h;
			void *params[] = {&fp, &hk};
			CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
					    .blockDimY = 1, .blockDimZ = 1, .hStream = f.s};
			ck_assert_int_eq(toggle_launch_producer(f.agent, &c, f.produce, params, hook_of(h)),
					 0);
		}
		ck_assert_int_eq(toggle_sim_stream_end_capture(f.s, &g), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	} else {
		g = capture_ours(&f, NULL);
	}
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS); /* the application's */
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, e), 0);
	step(&f, 0, 0x01);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x01);
	/* with the producer-free one and the full one (device mode: assembled) */
	unsigned execs = toggle_sim_exec_count(f.sim);
	ck_assert_uint_eq(execs, 3);

	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	CUgraphExec e2;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, g), CUDA_SUCCESS);
	ck_assert_ptr_eq(e2, e); /* the test needs the reuse: a live exec behind the dead one's handle */
	struct toggle_anomalies an0, an1;
	toggle_anomalies_get(f.agent, &an0);
	uint64_t sets = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED);
	step(&f, 1, 0x03); /* eager: no call reaches what that handle names now */
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED), sets);
	toggle_anomalies_get(f.agent, &an1);
	ck_assert_uint_eq(an1.driver_errors, an0.driver_errors);
	ck_assert_uint_eq(toggle_sim_exec_count(f.sim), 1); /* e2: the bare (and full) exec went */
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert(!gs.bound && gs.exec == NULL && gs.nodes == NP);
	uint64_t uploads = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD);
	ck_assert_int_eq(launch(&f, g, e2), 0);
	ck_assert_uint_eq(f.ran, 0x03);
	if (mode == TOGGLE_MODE_DEVICE) {
		/* The new exec, and the producer-free and full execs assembled for it
		 * (issue 31). */
		ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD), uploads + 3);
		struct toggle_device_counters dc;
		ck_assert_int_eq(toggle_graph_device_counters(f.agent, g, &dc), 0);
		ck_assert_uint_eq(dc.device_failures, 0);
	} else {
		/* The set runs the full exec built for the new exec: a clone, every
		 * producer on, so those the set turns off (0x03: all but two). */
		ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED),
				  sets + NP - 2);
	}
	ck_assert_uint_eq(toggle_sim_exec_count(f.sim), execs);
	step(&f, 2, 0x00);
	ck_assert_int_eq(launch(&f, g, e2), 0);
	ck_assert_uint_eq(f.ran, 0x00);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

/*
 * Without user objects (a simulated driver older than 11.3): today's
 * identity checks, documented.  A stranger that does not hold the dead
 * graph's nodes is told apart by them; none is created.
 */
START_TEST(test_without_user_objects)
{
	struct lfx f;
	lfx_open(&f, TOGGLE_MODE_LAZY, 11020);
	ck_assert(!f.agent->life);
	CUgraph g = capture_ours(&f, NULL);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, 0x0f);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_int_eq(toggle_graph_forget(f.agent, g), 0);
	ck_assert_int_eq(launch(&f, g, e), TOGGLE_ESTALE); /* while it lives */
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS); /* the exec keeps the nodes */
	CUgraph s = capture_stranger(&f, NS);
	ck_assert_ptr_eq(s, g);
	CUgraphExec se;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 0);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_USER_OBJECT_CREATE), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	lfx_close(&f);
}
END_TEST

/*
 * The hot path is as it was: no user-object call and no identity call on
 * the replay of an unchanged set, in every mode; one object per graph, one
 * more per bind (the previous ones go with their execs).  _i: lazy, eager,
 * device.
 */
START_TEST(test_lifetime_off_hot_path)
{
	static const enum toggle_mode modes[3] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
						  TOGGLE_MODE_DEVICE};
	struct lfx f;
	lfx_open(&f, modes[_i], 0);
	f.agent->cu.graph_retain_user_object = count_retain;
	f.agent->cu.graph_release_user_object = count_release;
	CUgraph g;
	if (modes[_i] == TOGGLE_MODE_DEVICE) {
		ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
		ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_capture_planner(f.agent, f.s), 0);
		void *fp = &f;
		int hk = 0;
		void *params[] = {&fp, &hk};
		CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
				    .blockDimY = 1, .blockDimZ = 1, .hStream = f.s};
		ck_assert_int_eq(toggle_launch_producer(f.agent, &c, f.produce, params, hook_of(0)), 0);
		ck_assert_int_eq(toggle_sim_stream_end_capture(f.s, &g), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	} else {
		g = capture_ours(&f, NULL);
	}
	ck_assert_uint_eq(uo_calls, 1); /* the graph's object, at capture */
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, 0x01);
	ck_assert_int_eq(launch(&f, g, e), 0);
	unsigned long at_bind = uo_calls;
	uint64_t creates = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_USER_OBJECT_CREATE);
	for (int64_t st = 1; st <= 50; st++) {
		step(&f, st, 0x01);
		for (int k = 0; k < 20; k++)
			ck_assert_int_eq(toggle_graph_launch(f.agent, g, e, f.s), 0);
	}
	toggle_sim_synchronize(f.sim);
	ck_assert_uint_eq(uo_calls, at_bind);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_USER_OBJECT_CREATE), creates);
	/* The graph holds one object, its exec one (and the bare exec none). */
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 2);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 1);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 0);
	lfx_close(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lifetime_signal");
	TCase *tc = tcase_create("lifetime");
	tcase_add_loop_test(tc, test_graph_dies_before_exec, 0, 3);
	tcase_add_loop_test(tc, test_graph_dies_before_exec_raw_stranger, 0, 2);
	tcase_add_loop_test(tc, test_bound_exec_destroyed, 0, 3);
	tcase_add_test(tc, test_without_user_objects);
	tcase_add_loop_test(tc, test_lifetime_off_hot_path, 0, 3);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
