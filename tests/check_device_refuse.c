/*
 * check_device_refuse.c - device mode on the simulator: rebind rules, the single-instantiation
 * limit, strict refusal and lazy fallback, a missing planner, the guard
 * against mixing host and device toggles, device mode unavailable, capture
 * and device-call failures.
 * The simulated kernels, the agent and its graphs, and what ran are the
 * device suites' fixture (tests/fixture_device.h).  Split out of
 * check_device.c (issue 29).
 */
#include "fixture_device.h"

/* ---- rebind, instantiation ------------------------------------------------------ */

START_TEST(rebind_rules)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	struct toggle_set s = set_of(0x0f0f0f);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH);

	/* Bind the same exec again: per-exec state resets, no new upload, the next
	 * planner sets every producer. */
	uint64_t rebinds = stats(f).rebinds;
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_uint_eq(stats(f).rebinds, rebinds + 1);
	ck_assert_uint_eq(gstatus(f, 0).applied_version, 0);
	ck_assert_uint_eq(stats(f).uploads, 1);
	toggle_sim_set_deferred(f->sim, true, 3);
	ck_assert_int_eq(dfx_launch(f, 0, 1), 0); /* another stream, too */
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, 2 * NH);

	/* Unbind: launches fail closed; bind again: uploaded again, all nodes set. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], NULL), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_EUNBOUND);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_uint_eq(stats(f).uploads, 2);
	s = set_of(0x000001);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 2), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, 3 * NH);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);

	/* Forget: refused; a new capture into the same record starts over. */
	ck_assert_int_eq(toggle_graph_forget(f->agent, f->graph[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ESTALE);
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(toggle_sim_exec_destroy(f->exec[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(f->graph[0]), CUDA_SUCCESS);
	memset(f->launched, 0, sizeof(f->launched));
	memset(f->runs, 0, sizeof(f->runs));
	f->nlog = 0;
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(gstatus(f, 0).mode, TOGGLE_MODE_DEVICE);
	dfx_close(f);
}
END_TEST

START_TEST(second_instantiation_refused)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	CUgraphExec again = (CUgraphExec)(uintptr_t)1;
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &again), TOGGLE_ENOTSUP);
	ck_assert_ptr_null(again);
	ck_assert_msg(strstr(toggle_last_error(f->agent), "once at a time"), "%s",
		      toggle_last_error(f->agent));
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_INSTANTIATE), 2);
	/* The first exec is still bound and works. */
	struct toggle_set s = set_of(0x0000f0);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH);

	/* Unbound and destroyed, the graph instantiates again: a new exec, uploaded,
	 * whose first planner sets every producer. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(f->exec[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_uint_eq(stats(f).uploads, 2);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, 2 * NH);
	ck_assert_uint_eq(dcount(f, 0).device_failures, 0);

	/* A graph instantiated behind libtoggle's back: the driver refuses, with the same text. */
	ck_assert_int_eq(toggle_sim_graph_instantiate(&again, f->graph[0]), CUDA_ERROR_NOT_SUPPORTED);
	dfx_capture(f, 1, H_DEVICE);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[1], f->graph[1]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[1], &again), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "operation not supported"));
	/* The device-updatable attribute outside a capture: refused like the driver does. */
	void *fp = f;
	int graph = 0, hook = 0;
	void *params[] = {&fp, &graph, &hook};
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof(attr));
	attr.id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
	attr.value.deviceUpdatableKernelNode.deviceUpdatable = 1;
	CUlaunchConfig c = launch_cfg(f->s[0]);
	c.attrs = &attr;
	c.numAttrs = 1;
	ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, f->produce, params, NULL),
			 CUDA_ERROR_NOT_SUPPORTED);
	/* Graphs without device-updatable nodes instantiate as often as wanted. */
	CUgraph plain;
	CUgraphExec e1, e2;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_compute, f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &plain), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, plain, &e1), 0);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, plain, &e2), 0);
	ck_assert_int_eq(toggle_graph_launch(f->agent, plain, e2, f->s[0]), 0);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, plain, NULL), TOGGLE_EINVAL);
	dfx_close(f);
}
END_TEST

/* ---- strict and fallback ---------------------------------------------------------- */

static void expect_refused(enum how how, const char *why)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, how);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(f->exec[0]);
	ck_assert_msg(strstr(toggle_last_error(f->agent), why), "%s", toggle_last_error(f->agent));
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(!gs.bound && !gs.device_fallback);
	ck_assert_ptr_nonnull(strstr(gs.note, why));
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), TOGGLE_ENOTSUP);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), why));
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	ck_assert_uint_eq(an.device_refused, 2);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->runs[0], 0); /* nothing ran */
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 0);
	dfx_close(f);
}

static void expect_fallback(enum how how, const char *why)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, false);
	dfx_capture(f, 0, how);
	dfx_capture(f, 1, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[1], &f->exec[1]), 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(gs.bound && gs.device_fallback && !gs.uploaded);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_LAZY);
	ck_assert_msg(strstr(gs.note, why), "%s", gs.note);
	ck_assert_int_eq(gstatus(f, 1).mode, TOGGLE_MODE_DEVICE);
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	ck_assert_uint_eq(an.device_fallbacks, 1);
	toggle_sim_set_deferred(f->sim, true, 11);
	uint64_t rng = 99;
	uint32_t cur = 0;
	for (int64_t step = 0; step < 100; step++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		ck_assert_int_eq(toggle_step_begin(f->agent, step, NULL), 0);
		ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
		ck_assert_int_eq(dfx_launch(f, 1, 0), 0);
	}
	dfx_check(f);
	/* The fallback graph took host calls; its planner (if any) never acted. */
	ck_assert_uint_gt(stats(f).node_set_calls, 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), stats(f).node_set_calls);
	struct toggle_device_counters dc;
	ck_assert_int_eq(toggle_graph_device_counters(f->agent, f->graph[0], &dc), TOGGLE_ENOTSUP);
	ck_assert_uint_eq(dcount(f, 1).planner_runs, 100);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), dcount(f, 1).device_calls);
	dfx_close(f);
}

START_TEST(strict_refuses_a_node_not_device_updatable)
{
	expect_refused(H_ONE_PLAIN, "producer hook 0:3 is not device-updatable");
}
END_TEST

START_TEST(fallback_for_a_node_not_device_updatable)
{
	expect_fallback(H_ONE_PLAIN, "producer hook 0:3 is not device-updatable");
}
END_TEST

START_TEST(missing_planner_refused)
{
	expect_refused(H_NO_PLANNER, "no planner");
}
END_TEST

START_TEST(missing_planner_fallback)
{
	expect_fallback(H_NO_PLANNER, "no planner");
}
END_TEST

START_TEST(producer_before_planner_refused)
{
	expect_refused(H_BEFORE_PLANNER, "producer hook 0:0 is not ordered after the planner");
}
END_TEST

START_TEST(mixing_refused)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	struct toggle_set s = set_of(0x000fff);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	/* The host path on a device-mode graph: refused before any driver call. */
	struct tg_graph *g = tg_graph_find(f->agent, f->graph[0]);
	ck_assert_int_eq(tg_graph_sync(f->agent, g), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "never mix"));
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	ck_assert_uint_eq(an.host_on_device_node, 1);
	/* apply_all and eager-style calls leave device-mode graphs to their launch. */
	ck_assert_int_eq(toggle_apply_all(f->agent), 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	dfx_close(f);
}
END_TEST

/* ---- agent-level availability ---------------------------------------------------------- */

START_TEST(device_mode_unavailable)
{
	struct dfx *f = dfx_new();
	struct toggle_agent *a = NULL;
	struct toggle_config cfg = dfx_config(f, TOGGLE_MODE_DEVICE, true);

	toggle_sim_set_driver_version(f->sim, 12030);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	toggle_sim_set_driver_version(f->sim, 12040);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_MODULE_LOAD, 0, 1, CUDA_ERROR_NO_BINARY_FOR_GPU);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_MEM_ALLOC, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0);

	/* Not strict: lazy, and the same integration code works. */
	cfg.strict = false;
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_MODULE_LOAD, 0, 1, CUDA_ERROR_NO_BINARY_FOR_GPU);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	f->agent = a;
	ck_assert_int_eq(toggle_agent_mode(a), TOGGLE_MODE_LAZY);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(a), "planner"));
	dfx_capture(f, 0, H_DEVICE); /* toggle_capture_planner: nothing; producers: plain */
	ck_assert_uint_eq(toggle_sim_graph_node_count(f->graph[0]), 1 + NL + NH);
	ck_assert_int_eq(toggle_graph_instantiate(a, f->graph[0], &f->exec[0]), 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_LAZY);
	ck_assert(!gs.device_fallback);
	/* Plain nodes instantiate again. */
	CUgraphExec e2;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, f->graph[0]), CUDA_SUCCESS);
	struct toggle_set s = set_of(0x123456);
	ck_assert_int_eq(toggle_set_enabled(a, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(stats(f).node_set_calls, NH);
	dfx_close(f);
}
END_TEST

START_TEST(capture_planner_errors)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	struct toggle_agent *a = f->agent;
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), TOGGLE_ECAPTURE); /* no window */
	{
		/* A producer into a capture outside any window: refused before the launch. */
		void *fp0 = f;
		int g0 = 0, h0 = 0;
		void *p0[] = {&fp0, &g0, &h0};
		CUlaunchConfig c0 = launch_cfg(f->s[0]);
		CUgraph dropped;
		ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_launch_producer(a, &c0, f->produce, p0,
							(struct toggle_hook){0, 0}),
				 TOGGLE_ECAPTURE);
		ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &dropped), CUDA_SUCCESS);
		ck_assert_uint_eq(toggle_sim_graph_node_count(dropped), 0);
		ck_assert_int_eq(toggle_sim_graph_destroy(dropped), CUDA_SUCCESS);
	}
	ck_assert_int_eq(toggle_capture_begin(a), 0);
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), TOGGLE_ECAPTURE); /* not capturing */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), 0);
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), TOGGLE_EINVAL); /* twice */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX, 0, 1, CUDA_ERROR_INVALID_VALUE);
	void *fp = f;
	int graph = 0, hook = 0;
	void *params[] = {&fp, &graph, &hook};
	CUlaunchConfig c = launch_cfg(f->s[0]);
	ck_assert_int_eq(toggle_launch_producer(a, &c, f->produce, params, (struct toggle_hook){0, 0}),
			 TOGGLE_ECUDA);
	/* A graph with a planner and no producers: launched as an unrelated graph. */
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(a), 0);
	ck_assert_int_eq(toggle_graph_instantiate(a, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(toggle_graph_bind(a, f->graph[0], f->exec[0]), TOGGLE_ENOENT);
	struct toggle_stats before = stats(f);
	ck_assert_int_eq(toggle_graph_launch(a, f->graph[0], f->exec[0], f->s[0]), 0);
	ck_assert_uint_eq(stats(f).launches_unrelated, before.launches_unrelated + 1);
	struct toggle_registry_check rc;
	toggle_registry_check(a, &rc);
	ck_assert_uint_eq(rc.graphs, 0);
	dfx_close(f);

	/* Outside device mode the planner call does nothing. */
	f = dfx_open(TOGGLE_MODE_LAZY, false);
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(f->agent, f->s[0]), 0);
	ck_assert_uint_eq(toggle_graph_count(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph[0]), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(f->graph[0]), 0);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	dfx_close(f);
}
END_TEST

/* Device-side failures are counted and retried: the next launch sets those nodes again. */
START_TEST(device_call_failures_retried)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	struct toggle_set s = set_of(0);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 1, 2, CUDA_ERROR_INVALID_VALUE);
	s = set_of(0x7);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	struct toggle_device_counters dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, NH + 3);
	ck_assert_uint_eq(dc.device_failures, 2);
	f->launched[0] = 1; /* that launch ran a partial set: not part of the check */
	f->runs[0] = 1;
	f->nlog = 0;
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH + 5);
	ck_assert_uint_eq(f->nlog, 3);
	dfx_close(f);
}
END_TEST

/* A mask write that fails refuses the launch; the next one writes every word. */
START_TEST(mask_write_failure_refuses)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	struct toggle_set s = set_of(0x00ff00);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP, 0, 1, CUDA_ERROR_ILLEGAL_STATE);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ECUDA);
	ck_assert_uint_eq(stats(f).launches_refused, 1);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(f->runs[0], 1);
	dfx_close(f);
}
END_TEST

static Suite *device_refuse_suite(void)
{
	Suite *s = suite_create("device_refuse");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, rebind_rules);
	tcase_add_test(tc, second_instantiation_refused);
	tcase_add_test(tc, strict_refuses_a_node_not_device_updatable);
	tcase_add_test(tc, fallback_for_a_node_not_device_updatable);
	tcase_add_test(tc, missing_planner_refused);
	tcase_add_test(tc, missing_planner_fallback);
	tcase_add_test(tc, producer_before_planner_refused);
	tcase_add_test(tc, mixing_refused);
	tcase_add_test(tc, device_mode_unavailable);
	tcase_add_test(tc, capture_planner_errors);
	tcase_add_test(tc, device_call_failures_retried);
	tcase_add_test(tc, mask_write_failure_refuses);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(device_refuse_suite());
}
