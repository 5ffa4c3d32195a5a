/*
 * check_agent_failures.c - libtoggle's agent on the simulator: fail-closed
 * guards: driver failures, eager failures retried, refused records, the
 * registry check, configuration errors, the CUDA backend without a driver.
 * The simulator, the agent, its producers and the capture and launch
 * helpers are the agent suites' fixture (tests/fixture_agent.h).  Split out
 * of check_agent.c (issue 29); the tests keep their numbers from it.
 */
#include "fixture_agent.h"

START_TEST(test_driver_failure_refuses_launch)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	struct toggle_set s = spec("attn_out:*"), ran, none = spec("none");
	ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 5, 1, CUDA_ERROR_INVALID_VALUE);
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_ECUDA);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	assert_set_eq(&ran, &none);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "cuGraphNodeSetEnabled"));
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.applied_version, 0);
	ck_assert_uint_eq(gs.replays, 0);

	/* The retry sets the failed node and the rest, then runs the right set. */
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &s);

	/* A failing launch: refused, counted, node states stay right. */
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, CUDA_ERROR_LAUNCH_FAILED);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_ECUDA);
	uint64_t c = set_calls(&f);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_uint_eq(set_calls(&f), c);
	assert_set_eq(&ran, &s);

	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.launches_refused, 2);
	struct toggle_anomalies an;
	toggle_anomalies_get(f.agent, &an);
	ck_assert_uint_eq(an.driver_errors, 2);

	/* Recording with a failing capture query. */
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO, 0, 1, CUDA_ERROR_INVALID_VALUE);
	struct toggle_hook h = {0, 0};
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ECUDA);
	CUgraph g2;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &g2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	/* Nothing recorded, but the producer is in g2: asked again, the stream named
	 * g2, which is late and fails closed. */
	ck_assert_int_eq(toggle_graph_count(f.agent), 2);
	ck_assert_int_eq(toggle_graph_status(f.agent, g2, &gs), 0);
	ck_assert_uint_eq(gs.nodes, 0);
	ck_assert_ptr_nonnull(strstr(gs.note, "not recorded"));
	CUgraphExec e2;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, g2), CUDA_SUCCESS);
	launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	ck_assert_int_eq(toggle_graph_launch(f.agent, g2, e2, f.stream), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	ck_assert_int_eq(toggle_sim_exec_destroy(e2), CUDA_SUCCESS);
	fx_close(&f);
}
END_TEST

START_TEST(test_eager_failure_then_launch_retries)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_EAGER);
	fx_capture_bound(&f, 0);
	struct toggle_set s = spec("mlp_out:3-6"), ran;
	ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 0, 1, CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0); /* eager apply fails */
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.applied_version, 0);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 0, 1, CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_ECUDA);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &s);
	/* Eager: the next change is applied at step_begin, before any launch. */
	struct toggle_set t = spec("resid_post:*");
	ck_assert_int_eq(toggle_set_enabled(f.agent, &t), 0);
	uint64_t c = set_calls(&f);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, NULL), 0);
	ck_assert_uint_eq(set_calls(&f) - c, toggle_set_count(&s) + toggle_set_count(&t));
	c = set_calls(&f);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_uint_eq(set_calls(&f), c);
	assert_set_eq(&ran, &t);
	fx_close(&f);
}
END_TEST

START_TEST(test_record_refusals)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	struct toggle_hook h = {1, 2}, bad_layer = {0, NL}, bad_type = {NT, 0};
	/* Window closed. */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	/* Out of the catalog. */
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, bad_layer), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, bad_type), TOGGLE_ERANGE);
	/* Not a kernel node. */
	ck_assert_int_eq(toggle_sim_memset(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ENOTKERNEL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "not a kernel"));
	/* The same node twice. */
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), 0);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_EINVAL);
	CUgraph g;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &g), CUDA_SUCCESS);
	/* Stream not capturing. */
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	struct toggle_anomalies an;
	toggle_anomalies_get(f.agent, &an);
	ck_assert_uint_eq(an.record_outside_window, 1);
	ck_assert_uint_eq(an.record_not_kernel, 1);
	ck_assert_uint_eq(an.record_not_capturing, 1);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert_uint_eq(gs.nodes, 1);
	ck_assert_uint_eq(gs.hooks_covered, 1);
	ck_assert(!gs.bound);
	toggle_sim_graph_destroy(g);
	fx_close(&f);
}
END_TEST

START_TEST(test_registry_check)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	fx_capture(&f, 1, true);
	struct toggle_registry_check rc;
	toggle_registry_check(f.agent, &rc);
	ck_assert_uint_eq(rc.graphs, 2);
	ck_assert_uint_eq(rc.unbound, 1);
	ck_assert(rc.complete);
	ck_assert(rc.uniform);
	ck_assert_uint_eq(rc.hooks_uncovered, 0);
	/* A third graph with one producer: neither complete nor uniform. */
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, (struct toggle_hook){2, 7}), 0);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &f.graph[2]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	toggle_registry_check(f.agent, &rc);
	ck_assert_uint_eq(rc.graphs, 3);
	ck_assert(!rc.complete);
	ck_assert(!rc.uniform);
	ck_assert_uint_eq(rc.hooks_uncovered, NT * NL - 1);
	struct toggle_graph_status list[4];
	ck_assert_uint_eq(toggle_graph_list(f.agent, list, 4), 3);
	ck_assert_uint_eq(list[0].nodes, NT * NL);
	ck_assert_uint_eq(list[2].hooks_covered, 1);
	ck_assert_uint_eq(toggle_graph_list(f.agent, list, 1), 3);
	toggle_sim_graph_destroy(f.graph[2]);
	fx_close(&f);
}
END_TEST

START_TEST(test_open_config_errors)
{
	struct fx f;
	memset(&f, 0, sizeof(f));
	ck_assert_int_eq(toggle_sim_create(&f.sim), 0);
	struct toggle_agent *a = NULL;
	/* Device mode needs a 12.4 driver: strict refuses, else lazy (check_device.c has more). */
	toggle_sim_set_driver_version(f.sim, 12030);
	struct toggle_config cfg = fx_config(&f, TOGGLE_MODE_DEVICE);
	cfg.strict = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	ck_assert_ptr_null(a);
	cfg.strict = false;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	ck_assert_int_eq(toggle_agent_mode(a), TOGGLE_MODE_LAZY);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(a), "12.4"));
	toggle_agent_close(a);
	toggle_sim_set_driver_version(f.sim, 13000);
	cfg.strict = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	ck_assert_int_eq(toggle_agent_mode(a), TOGGLE_MODE_DEVICE);
	toggle_agent_close(a);
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.sim = NULL;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.name = "";
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.catalog.n_layers = 0;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	cfg = fx_config(&f, (enum toggle_mode)7);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	/* The catalog is copied: the caller's names may go away. */
	char n0[] = "resid_post", n1[] = "attn_out";
	const char *names[2] = {n0, n1};
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.catalog.type_names = names;
	cfg.catalog.n_types = 2;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	memset(n0, 'x', sizeof(n0) - 1);
	ck_assert_str_eq(toggle_agent_catalog(a)->type_names[0], "resid_post");
	struct toggle_set out_of_catalog;
	toggle_set_clear(&out_of_catalog);
	toggle_set_add(&out_of_catalog, (struct toggle_hook){2, 0});
	ck_assert_int_eq(toggle_set_enabled(a, &out_of_catalog), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_plan_step(a, 3, &out_of_catalog), TOGGLE_ERANGE);
	toggle_agent_close(a);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* Without an NVIDIA driver, the cuda backend refuses with a clear error. */
START_TEST(test_cuda_backend_without_driver)
{
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (dl) {
		dlclose(dl);
		TU_SKIP(TU_SKIP_ENV, "libcuda.so.1 is installed here: the no-driver refusal cannot be tested");
	}
	struct toggle_config cfg = {
		.name = "x",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.backend = TOGGLE_BACKEND_CUDA,
	};
	struct toggle_agent *a = NULL;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENODRIVER);
	ck_assert_ptr_null(a);
}
END_TEST

static Suite *agent_failures_suite(void)
{
	Suite *s = suite_create("agent_failures");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_driver_failure_refuses_launch);
	tcase_add_test(tc, test_eager_failure_then_launch_retries);
	tcase_add_test(tc, test_record_refusals);
	tcase_add_test(tc, test_registry_check);
	tcase_add_test(tc, test_open_config_errors);
	tcase_add_test(tc, test_cuda_backend_without_driver);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(agent_failures_suite());
}
