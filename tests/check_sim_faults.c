/*
 * check_sim_faults.c - tests of the in-tree CUDA simulator (toggle_sim.h): failure
 * injection (skip and times, a failed call changes nothing) and the call
 * counters.
 * Run under ASan with leak detection, so a simulator that leaks fails here
 * too.  The simulator with one stream and the kernels that record their
 * order are the simulator suites' fixture (tests/fixture_sim.h).  Split out
 * of check_sim.c (issue 29).
 */
#include "fixture_sim.h"

/* ---- failure injection and counters ------------------------------------------- */

START_TEST(fail_skip_times)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKK");
	CUgraphExec ex = instantiate(g);
	const enum toggle_sim_op op = TOGGLE_SIM_OP_NODE_SET_ENABLED;

	toggle_sim_fail(f.sim, op, 1, 2, CUDA_ERROR_NOT_SUPPORTED);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 0)); /* skipped */
	CK_CU(toggle_sim_graph_node_set_enabled(ex, f.nodes[1], 0), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_uint_eq(enabled(ex, f.nodes[1]), 1); /* changed nothing */
	/* A call with a bad argument fails as such and does not use up the injection. */
	CK_CU(toggle_sim_graph_node_set_enabled(ex, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_set_enabled(ex, f.nodes[2], 0), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_uint_eq(enabled(ex, f.nodes[2]), 1);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[2], 0)); /* injection spent */
	ck_assert_uint_eq(toggle_sim_calls(f.sim, op), 5);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_NODE_GET_ENABLED), 2);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 1 }, 1);

	/* times = 0 cancels; so does injecting CUDA_SUCCESS. */
	toggle_sim_fail(f.sim, op, 0, 3, CUDA_ERROR_UNKNOWN);
	toggle_sim_fail(f.sim, op, 0, 0, CUDA_ERROR_UNKNOWN);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 1));
	toggle_sim_fail(f.sim, op, 0, 3, CUDA_SUCCESS);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 1));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(fail_changes_nothing)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KM");
	CUgraphExec ex = instantiate(g), ex2 = (CUgraphExec)(void *)&f;
	const CUresult err = CUDA_ERROR_LAUNCH_FAILED;

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, err);
	CK_CU(toggle_sim_graph_launch(ex, f.s), err);
	ck_assert_uint_eq(f.rec.n, 0);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0 }, 1);

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_INSTANTIATE, 0, 1, err);
	CK_CU(toggle_sim_graph_instantiate(&ex2, g), err);
	ck_assert_ptr_eq(ex2, (CUgraphExec)(void *)&f);

	CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_GET_TYPE, 0, 1, err);
	CK_CU(toggle_sim_graph_node_get_type(f.nodes[0], &type), err);
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_EMPTY);

	unsigned on = 9;
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_GET_ENABLED, 0, 1, err);
	CK_CU(toggle_sim_graph_node_get_enabled(ex, f.nodes[0], &on), err);
	ck_assert_uint_eq(on, 9);

	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	size_t n = 77;
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO, 0, 1, err);
	CK_CU(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, NULL, NULL, &n), err);
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	ck_assert_uint_eq(n, 77);
	(void)last_node(f.s); /* next call succeeds */
	CUgraph g2;
	CK_OK(toggle_sim_stream_end_capture(f.s, &g2));

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD, 0, 1, err);
	CK_CU(toggle_sim_graph_upload(ex, f.s), err);
	CK_OK(toggle_sim_graph_upload(ex, f.s));

	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 2);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_INSTANTIATE), 2);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD), 2);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* Every op is counted once per call, failed calls included; reset keeps injections. */
START_TEST(counters_count_every_call)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KM");
	CUgraphExec ex = NULL;
	CUstreamCaptureStatus st;
	CUgraphNodeType type;
	unsigned on;

	toggle_sim_reset_counters(f.sim);
	for (int op = 0; op < TOGGLE_SIM_OP_COUNT; op++)
		ck_assert_uint_eq(toggle_sim_calls(f.sim, (enum toggle_sim_op)op), 0);
	for (int round = 0; round < 2; round++) {
		/* Round 0 with valid arguments, round 1 with a bad one each. */
		bool bad = round == 1;
		CK_CU(toggle_sim_graph_instantiate(bad ? NULL : &ex, g),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_stream_get_capture_info(f.s, bad ? NULL : &st, NULL, NULL, NULL,
							 NULL, NULL),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_node_get_type(f.nodes[0], bad ? NULL : &type),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_node_set_enabled(ex, bad ? NULL : f.nodes[0], 1),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_node_get_enabled(ex, f.nodes[0], bad ? NULL : &on),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_launch(ex, bad ? NULL : f.s),
		      bad ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_upload(ex, bad ? NULL : f.s),
		      bad ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS);
		for (int op = 0; op <= TOGGLE_SIM_OP_INSTANTIATE; op++)
			ck_assert_uint_eq(toggle_sim_calls(f.sim, (enum toggle_sim_op)op),
					  (uint64_t)round + 1);
	}
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_COUNT), 0);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, (enum toggle_sim_op)-1), 0);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_COUNT, 0, 1, CUDA_ERROR_UNKNOWN); /* ignored */

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 1, 1, CUDA_ERROR_UNKNOWN);
	toggle_sim_reset_counters(f.sim);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 0);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	CK_CU(toggle_sim_graph_launch(ex, f.s), CUDA_ERROR_UNKNOWN);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 2);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_NODE_GET_TYPE), 0);
	toggle_sim_destroy(f.sim);
}
END_TEST

static Suite *sim_faults_suite(void)
{
	Suite *s = suite_create("sim_faults");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, fail_skip_times);
	tcase_add_test(tc, fail_changes_nothing);
	tcase_add_test(tc, counters_count_every_call);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(sim_faults_suite());
}
