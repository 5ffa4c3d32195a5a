/*
 * check_sim_exec.c - tests of the in-tree CUDA simulator (toggle_sim.h): execs: launch
 * order, disabled nodes, independent execs, foreign nodes, instantiation
 * mid-capture, launch and upload errors, a graph destroyed before its exec.
 * Run under ASan with leak detection, so a simulator that leaks fails here
 * too.  The simulator with one stream and the kernels that record their
 * order are the simulator suites' fixture (tests/fixture_sim.h).  Split out
 * of check_sim.c (issue 29).
 */
#include "fixture_sim.h"

/* ---- execs ------------------------------------------------------------------ */

START_TEST(launch_runs_in_order)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKMKK");
	CUgraphExec ex = instantiate(g);

	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 3, 4 }, 4);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 3, 4, 0, 1, 3, 4 }, 8);
	for (int i = 0; i < 5; i++)
		ck_assert_uint_eq(enabled(ex, f.nodes[i]), 1);
	CK_OK(toggle_sim_exec_destroy(ex));
	CK_OK(toggle_sim_graph_destroy(g));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(disabled_nodes_skipped)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKMKK");
	CUgraphExec ex = instantiate(g);

	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[1], 0));
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[4], 0));
	ck_assert_uint_eq(enabled(ex, f.nodes[1]), 0);
	ck_assert_uint_eq(enabled(ex, f.nodes[0]), 1);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 3 }, 2);

	/* Memset nodes can be toggled too; any non-zero value enables. */
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[2], 0));
	ck_assert_uint_eq(enabled(ex, f.nodes[2]), 0);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[1], 7));
	ck_assert_uint_eq(enabled(ex, f.nodes[1]), 1);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 3 }, 3);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(execs_are_independent)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKK");
	CUgraphExec a = instantiate(g), b = instantiate(g);

	ck_assert_ptr_ne(a, b);
	CK_OK(toggle_sim_graph_node_set_enabled(a, f.nodes[0], 0));
	CK_OK(toggle_sim_graph_node_set_enabled(b, f.nodes[2], 0));
	ck_assert_uint_eq(enabled(a, f.nodes[0]), 0);
	ck_assert_uint_eq(enabled(b, f.nodes[0]), 1);
	CK_OK(toggle_sim_graph_launch(a, f.s));
	rec_expect(&f.rec, (const int[]){ 1, 2 }, 2);
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	/* A new exec starts all enabled, whatever the others hold. */
	CUgraphExec c = instantiate(g);
	CK_OK(toggle_sim_exec_destroy(a));
	CK_OK(toggle_sim_graph_launch(c, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 2 }, 3);
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(foreign_node_refused)
{
	struct fx f;
	fx_open(&f);
	CUgraph g1 = fx_capture(&f, "KK");
	CUgraphNode n1[2] = { f.nodes[0], f.nodes[1] };
	CUgraph g2 = fx_capture(&f, "KK");
	CUgraphExec ex = instantiate(g1);
	unsigned on = 5;

	/* g2's first node has the same position as g1's: identity decides. */
	CK_CU(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_get_enabled(ex, f.nodes[1], &on), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(on, 5);
	CK_CU(toggle_sim_graph_node_set_enabled(ex, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_get_enabled(ex, n1[0], NULL), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(enabled(ex, n1[0]), 1);
	ck_assert_uint_eq(enabled(ex, n1[1]), 1);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	CK_OK(toggle_sim_graph_destroy(g2));
	toggle_sim_destroy(f.sim);
}
END_TEST

/* An exec is a snapshot: nodes captured after instantiation are not in it. */
START_TEST(instantiate_mid_capture_snapshots)
{
	struct fx f;
	fx_open(&f);
	CUstreamCaptureStatus st;
	CUgraph g = NULL, ended = NULL;

	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	CUgraphNode first = last_node(f.s);
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, &g, NULL, NULL, NULL));
	CUgraphExec ex = instantiate(g);
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[1]));
	CUgraphNode second = last_node(f.s);
	CK_OK(toggle_sim_stream_end_capture(f.s, &ended));

	CK_CU(toggle_sim_graph_node_set_enabled(ex, second, 0), CUDA_ERROR_INVALID_VALUE);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, first, 1));
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0 }, 1);
	CUgraphExec full = instantiate(ended);
	CK_OK(toggle_sim_graph_launch(full, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(launch_and_upload_errors)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "K");
	CUgraphExec ex = instantiate(g);
	struct toggle_sim *other;
	CUstream foreign;

	ck_assert_int_eq(toggle_sim_create(&other), 0);
	CK_OK(toggle_sim_stream_create(other, &foreign));
	CK_CU(toggle_sim_graph_launch(ex, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_launch(ex, foreign), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_upload(ex, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_upload(ex, foreign), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_instantiate(NULL, g), CUDA_ERROR_INVALID_VALUE);

	/* Launching into a capturing stream is refused and runs nothing. */
	CUgraph g2;
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_CU(toggle_sim_graph_launch(ex, f.s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CK_CU(toggle_sim_graph_upload(ex, f.s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CK_OK(toggle_sim_stream_end_capture(f.s, &g2));
	ck_assert_uint_eq(toggle_sim_graph_node_count(g2), 0);
	ck_assert_uint_eq(f.rec.n, 0);

	CK_OK(toggle_sim_graph_upload(ex, f.s));
	ck_assert_uint_eq(f.rec.n, 0); /* upload runs nothing */
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0 }, 1);
	toggle_sim_destroy(other);
	toggle_sim_destroy(f.sim);
}
END_TEST

/*
 * As measured on the H200 (driver 580): the graph may go before its execs,
 * which still launch with the state they had; its node handles die with it,
 * so set/get_enabled with them fail with CUDA_ERROR_INVALID_VALUE.
 */
START_TEST(graph_destroyed_before_exec)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KMK");
	CUgraphExec a = instantiate(g), b = instantiate(g);
	CUgraphNodeType type;
	unsigned on = 5;

	CK_OK(toggle_sim_graph_node_set_enabled(a, f.nodes[0], 0));
	CK_OK(toggle_sim_graph_destroy(g));
	CK_OK(toggle_sim_graph_launch(a, f.s));
	rec_expect(&f.rec, (const int[]){ 2 }, 1);
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 2 }, 2);

	/* The simulator keeps the nodes' memory while an exec lives: refused, not crashed. */
	CK_CU(toggle_sim_graph_node_set_enabled(a, f.nodes[2], 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_get_enabled(a, f.nodes[0], &on), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(on, 5);
	CK_CU(toggle_sim_graph_node_get_type(f.nodes[1], &type), CUDA_ERROR_INVALID_HANDLE);
	CK_OK(toggle_sim_graph_launch(a, f.s));
	rec_expect(&f.rec, (const int[]){ 2 }, 1);
	CK_OK(toggle_sim_exec_destroy(a));
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 2 }, 2);
	CK_OK(toggle_sim_exec_destroy(b));
	toggle_sim_destroy(f.sim);
}
END_TEST

static Suite *sim_exec_suite(void)
{
	Suite *s = suite_create("sim_exec");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, launch_runs_in_order);
	tcase_add_test(tc, disabled_nodes_skipped);
	tcase_add_test(tc, execs_are_independent);
	tcase_add_test(tc, foreign_node_refused);
	tcase_add_test(tc, instantiate_mid_capture_snapshots);
	tcase_add_test(tc, launch_and_upload_errors);
	tcase_add_test(tc, graph_destroyed_before_exec);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(sim_exec_suite());
}
