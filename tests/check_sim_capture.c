/*
 * check_sim_capture.c - tests of the in-tree CUDA simulator (toggle_sim.h): the simulator
 * and its streams (handles, kinds, launches outside a capture), and stream
 * capture (nodes, state errors, capture info, ids, many nodes).
 * Run under ASan with leak detection, so a simulator that leaks fails here
 * too.  The simulator with one stream and the kernels that record their
 * order are the simulator suites' fixture (tests/fixture_sim.h).  Split out
 * of check_sim.c (issue 29).
 */
#include "fixture_sim.h"

/* ---- simulator and streams ------------------------------------------------ */

START_TEST(create_destroy)
{
	struct toggle_sim *sim = NULL;
	CUstream s = NULL;

	toggle_sim_destroy(NULL);
	ck_assert_int_eq(toggle_sim_create(NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_sim_create(&sim), 0);
	CK_CU(toggle_sim_stream_create(NULL, &s), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_stream_create(sim, NULL), CUDA_ERROR_INVALID_VALUE);
	CK_OK(toggle_sim_stream_create(sim, &s));
	CK_OK(toggle_sim_stream_destroy(s));
	CK_CU(toggle_sim_stream_destroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	toggle_sim_destroy(sim);
}
END_TEST

START_TEST(null_handles_refused)
{
	CUgraph g = NULL;
	CUgraphExec ex = NULL;
	CUstreamCaptureStatus st;
	CUgraphNodeType type;
	unsigned on;

	CK_CU(toggle_sim_stream_begin_capture(NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_stream_end_capture(NULL, &g), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_launch_kernel(NULL, rec_kernel, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_memset(NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_stream_get_capture_info(NULL, &st, NULL, NULL, NULL, NULL, NULL),
	      CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_instantiate(&ex, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_destroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_exec_destroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	ck_assert_uint_eq(toggle_sim_graph_node_count(NULL), 0);
	CK_CU(toggle_sim_graph_node_get_type(NULL, &type), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_set_enabled(NULL, NULL, 1), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_get_enabled(NULL, NULL, &on), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_launch(NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_upload(NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	ck_assert_uint_eq(toggle_sim_calls(NULL, TOGGLE_SIM_OP_GRAPH_LAUNCH), 0);
	toggle_sim_fail(NULL, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, CUDA_ERROR_UNKNOWN);
	toggle_sim_reset_counters(NULL);
}
END_TEST

/* Handles are checked for their kind: one kind passed as another is refused. */
START_TEST(wrong_kind_refused)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "K");
	CUgraphExec ex = instantiate(g);
	CUgraphNodeType type;

	CK_CU(toggle_sim_graph_launch((CUgraphExec)(void *)g, f.s), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_launch(ex, (CUstream)(void *)ex), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_stream_begin_capture((CUstream)(void *)g), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_destroy((CUgraph)(void *)ex), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_exec_destroy((CUgraphExec)(void *)f.s), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_get_type((CUgraphNode)(void *)g, &type),
	      CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_set_enabled(ex, (CUgraphNode)(void *)g, 0),
	      CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(toggle_sim_graph_node_count((CUgraph)(void *)f.s), 0);
	ck_assert_uint_eq(enabled(ex, f.nodes[0]), 1);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(launch_without_capture_runs_now)
{
	struct fx f;
	fx_open(&f);

	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[3]));
	CK_OK(toggle_sim_memset(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[5]));
	rec_expect(&f.rec, (const int[]){ 3, 5 }, 2);
	CK_CU(toggle_sim_launch_kernel(f.s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* ---- capture ---------------------------------------------------------------- */

START_TEST(capture_records_nodes)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KMK");
	CUgraphNodeType type;

	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 3);
	ck_assert_uint_eq(f.rec.n, 0); /* captured, not run */
	ck_assert_ptr_ne(f.nodes[0], f.nodes[1]);
	ck_assert_ptr_ne(f.nodes[1], f.nodes[2]);
	CK_OK(toggle_sim_graph_node_get_type(f.nodes[0], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_KERNEL);
	CK_OK(toggle_sim_graph_node_get_type(f.nodes[1], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_MEMSET);
	CK_OK(toggle_sim_graph_node_get_type(f.nodes[2], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_KERNEL);
	CK_CU(toggle_sim_graph_node_get_type(f.nodes[0], NULL), CUDA_ERROR_INVALID_VALUE);
	/* The stream no longer captures: a launch runs at once. */
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[7]));
	rec_expect(&f.rec, (const int[]){ 7 }, 1);
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 3);
	CK_OK(toggle_sim_graph_destroy(g));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(capture_state_errors)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = NULL;
	CUstreamCaptureStatus st;

	CK_CU(toggle_sim_stream_end_capture(f.s, &g), CUDA_ERROR_ILLEGAL_STATE);
	ck_assert_ptr_null(g);
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_CU(toggle_sim_stream_begin_capture(f.s), CUDA_ERROR_ILLEGAL_STATE);
	CK_CU(toggle_sim_stream_end_capture(f.s, NULL), CUDA_ERROR_INVALID_VALUE);
	/* Neither failure ended the capture. */
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, &g, NULL, NULL, NULL));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	/* A graph being captured into cannot be destroyed. */
	CK_CU(toggle_sim_graph_destroy(g), CUDA_ERROR_ILLEGAL_STATE);
	CUgraph ended = NULL;
	CK_OK(toggle_sim_stream_end_capture(f.s, &ended));
	ck_assert_ptr_eq(ended, g);
	CK_CU(toggle_sim_stream_end_capture(f.s, &ended), CUDA_ERROR_ILLEGAL_STATE);
	CK_OK(toggle_sim_graph_destroy(g));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(capture_info_fields)
{
	struct fx f;
	fx_open(&f);
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	cuuint64_t id = 99;
	CUgraph g = (CUgraph)(void *)&f, g2 = NULL;
	const CUgraphNode *deps = (const CUgraphNode *)(void *)&f;
	const CUgraphEdgeData *edges = NULL;
	size_t n = 99;

	/* Not capturing: status NONE, success, the rest zeroed. */
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id, &g, &deps, &edges, &n));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
	ck_assert_ptr_null(g);
	ck_assert_uint_eq(n, 0);

	/* Right after begin: active, an id, the graph, no dependency yet. */
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id, &g, &deps, &edges, &n));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	ck_assert_uint_ne(id, 0);
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 0);

	/* After each node: the only dependency is that node, with a default edge. */
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	cuuint64_t id2 = 0;
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id2, &g2, &deps, &edges, &n));
	ck_assert_uint_eq(id2, id);
	ck_assert_ptr_eq(g2, g);
	ck_assert_uint_eq(n, 1);
	CUgraphNode k = deps[0];
	CUgraphNodeType type;
	CK_OK(toggle_sim_graph_node_get_type(k, &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_KERNEL);
	static const CUgraphEdgeData zero_edge;
	if (edges != NULL)
		ck_assert_int_eq(memcmp(&edges[0], &zero_edge, sizeof(zero_edge)), 0);

	CK_OK(toggle_sim_memset(f.s));
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, &deps, NULL, &n));
	ck_assert_uint_eq(n, 1);
	ck_assert_ptr_ne(deps[0], k);
	CK_OK(toggle_sim_graph_node_get_type(deps[0], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_MEMSET);
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 2);

	/* Argument rules of the driver. */
	CK_CU(toggle_sim_stream_get_capture_info(f.s, NULL, &id, NULL, NULL, NULL, NULL),
	      CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, NULL, &edges, &n),
	      CUDA_ERROR_INVALID_VALUE);
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, NULL, NULL, NULL));

	CK_OK(toggle_sim_stream_end_capture(f.s, &g2));
	ck_assert_ptr_eq(g2, g);
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id, &g2, &deps, &edges, &n));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
	ck_assert_uint_eq(n, 0);
	toggle_sim_destroy(f.sim);
}
END_TEST

static cuuint64_t capture_id(CUstream s)
{
	CUstreamCaptureStatus st;
	cuuint64_t id = 0;

	CK_OK(toggle_sim_stream_get_capture_info(s, &st, &id, NULL, NULL, NULL, NULL));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	return id;
}

START_TEST(capture_ids_unique)
{
	struct fx f;
	fx_open(&f);
	CUstream s2;
	cuuint64_t ids[6];
	CUgraph g;

	CK_OK(toggle_sim_stream_create(f.sim, &s2));
	for (int i = 0; i < 3; i++) {
		CK_OK(toggle_sim_stream_begin_capture(f.s));
		CK_OK(toggle_sim_stream_begin_capture(s2));
		ids[2 * i] = capture_id(f.s);
		ids[2 * i + 1] = capture_id(s2);
		CK_OK(toggle_sim_stream_end_capture(f.s, &g));
		CK_OK(toggle_sim_stream_end_capture(s2, &g));
	}
	for (int i = 0; i < 6; i++) {
		ck_assert_uint_ne(ids[i], 0);
		for (int j = 0; j < i; j++)
			ck_assert_uint_ne(ids[i], ids[j]);
	}
	toggle_sim_destroy(f.sim); /* also frees the six empty graphs */
}
END_TEST

/* Node handles handed out early stay valid while later nodes are added. */
START_TEST(many_nodes_keep_handles)
{
	struct fx f;
	fx_open(&f);
	enum { N = 1000 };
	CUgraphNode *nodes = calloc(N, sizeof(*nodes));
	CUgraph g;

	ck_assert_ptr_nonnull(nodes);
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	for (int i = 0; i < N; i++) {
		if (i % 3 == 0)
			CK_OK(toggle_sim_memset(f.s));
		else
			CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
		nodes[i] = last_node(f.s);
	}
	CK_OK(toggle_sim_stream_end_capture(f.s, &g));
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), N);
	CUgraphExec ex = instantiate(g);
	for (int i = 0; i < N; i++) {
		CUgraphNodeType type;
		CK_OK(toggle_sim_graph_node_get_type(nodes[i], &type));
		ck_assert_int_eq(type, i % 3 == 0 ? CU_GRAPH_NODE_TYPE_MEMSET
						  : CU_GRAPH_NODE_TYPE_KERNEL);
		CK_OK(toggle_sim_graph_node_set_enabled(ex, nodes[i], 0));
	}
	/* All disabled: a launch runs nothing (and would overflow the record otherwise). */
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	ck_assert_uint_eq(f.rec.n, 0);
	free(nodes);
	toggle_sim_destroy(f.sim);
}
END_TEST

static Suite *sim_capture_suite(void)
{
	Suite *s = suite_create("sim_capture");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, create_destroy);
	tcase_add_test(tc, null_handles_refused);
	tcase_add_test(tc, wrong_kind_refused);
	tcase_add_test(tc, launch_without_capture_runs_now);
	tcase_add_test(tc, capture_records_nodes);
	tcase_add_test(tc, capture_state_errors);
	tcase_add_test(tc, capture_info_fields);
	tcase_add_test(tc, capture_ids_unique);
	tcase_add_test(tc, many_nodes_keep_handles);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(sim_capture_suite());
}
