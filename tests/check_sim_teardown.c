/*
 * check_sim_teardown.c - tests of the in-tree CUDA simulator (toggle_sim.h): two
 * simulators side by side, teardown (a stream destroyed mid-capture, destroy
 * frees everything), the error strings, and the driver table it fills
 * (tg_cu_load_sim).
 * Run under ASan with leak detection, so a simulator that leaks fails here
 * too.  The simulator with one stream and the kernels that record their
 * order are the simulator suites' fixture (tests/fixture_sim.h).  Split out
 * of check_sim.c (issue 29).
 */
#include "fixture_sim.h"

/* ---- two simulators, teardown --------------------------------------------------- */

START_TEST(two_sims_independent)
{
	struct fx a, b;
	fx_open(&a);
	fx_open(&b);
	CUgraph ga = fx_capture(&a, "KK"), gb = fx_capture(&b, "KK");
	CUgraphExec ea = instantiate(ga), eb = instantiate(gb);

	toggle_sim_fail(a.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 5, CUDA_ERROR_UNKNOWN);
	CK_CU(toggle_sim_graph_launch(ea, a.s), CUDA_ERROR_UNKNOWN);
	CK_OK(toggle_sim_graph_launch(eb, b.s));
	rec_expect(&b.rec, (const int[]){ 0, 1 }, 2);
	ck_assert_uint_eq(toggle_sim_calls(a.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 1);
	ck_assert_uint_eq(toggle_sim_calls(b.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 1);
	ck_assert_uint_eq(toggle_sim_calls(b.sim, TOGGLE_SIM_OP_INSTANTIATE), 1);

	/* Handles of one simulator are refused by the other. */
	CK_CU(toggle_sim_graph_launch(eb, a.s), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_set_enabled(eb, a.nodes[0], 0), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(enabled(eb, b.nodes[0]), 1);

	CK_OK(toggle_sim_graph_node_set_enabled(eb, b.nodes[1], 0));
	toggle_sim_destroy(a.sim);
	CK_OK(toggle_sim_graph_launch(eb, b.s));
	rec_expect(&b.rec, (const int[]){ 0 }, 1);
	ck_assert_uint_eq(a.rec.n, 0);
	toggle_sim_destroy(b.sim);
}
END_TEST

/* A capture in progress ends with its stream; its graph goes too. */
START_TEST(stream_destroyed_mid_capture)
{
	struct fx f;
	fx_open(&f);
	CUstream s2;

	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	CK_OK(toggle_sim_stream_destroy(f.s));
	CK_OK(toggle_sim_stream_create(f.sim, &s2));
	CK_OK(toggle_sim_launch_kernel(s2, rec_kernel, &f.args[1]));
	rec_expect(&f.rec, (const int[]){ 1 }, 1);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* Leaves every kind of object alive; LeakSanitizer fails the test if destroy misses one. */
START_TEST(destroy_frees_everything)
{
	struct fx f;
	fx_open(&f);
	CUstream s2, s3;

	CK_OK(toggle_sim_stream_create(f.sim, &s2));
	CK_OK(toggle_sim_stream_create(f.sim, &s3));
	CUgraph g1 = fx_capture(&f, "KMK");
	(void)instantiate(g1);
	(void)instantiate(g1);
	CUgraph g2 = fx_capture(&f, "KK");
	(void)instantiate(g2);
	CK_OK(toggle_sim_graph_destroy(g2)); /* nodes held by its exec alone */
	(void)fx_capture(&f, "M");           /* a graph with no exec */
	CK_OK(toggle_sim_stream_begin_capture(s2));
	CK_OK(toggle_sim_launch_kernel(s2, rec_kernel, &f.args[0]));
	CK_OK(toggle_sim_memset(s2));
	CK_OK(toggle_sim_stream_begin_capture(f.s)); /* an empty capture */
	toggle_sim_destroy(f.sim);
}
END_TEST

/* ---- error strings, driver table ----------------------------------------------------- */

START_TEST(error_strings)
{
	static const CUresult known[] = {
		CUDA_SUCCESS,
		CUDA_ERROR_INVALID_VALUE,
		CUDA_ERROR_OUT_OF_MEMORY,
		CUDA_ERROR_INVALID_HANDLE,
		CUDA_ERROR_ILLEGAL_STATE,
		CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
	};
	const char *s = NULL;

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		s = NULL;
		CK_OK(toggle_sim_get_error_string(known[i], &s));
		ck_assert_ptr_nonnull(s);
		ck_assert_str_ne(s, "unknown error");
	}
	CK_OK(toggle_sim_get_error_string(CUDA_ERROR_INVALID_VALUE, &s));
	ck_assert_str_eq(s, "invalid argument");
	CK_OK(toggle_sim_get_error_string((CUresult)123456, &s));
	ck_assert_str_eq(s, "unknown error");
	CK_CU(toggle_sim_get_error_string(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

START_TEST(cu_table_is_the_sim)
{
	struct tg_cu cu;
	struct fx f;

	struct toggle_sim *owner;
	ck_assert_int_eq(toggle_sim_create(&owner), 0);
	toggle_sim_set_driver_version(owner, 12080);
	memset(&cu, 0xa5, sizeof(cu));
	tg_cu_load_sim(&cu, owner);
	ck_assert_ptr_eq(cu.sim, owner);
	ck_assert_int_eq(cu.driver_version, 12080);
	ck_assert_ptr_nonnull(cu.planner_image);
	ck_assert(cu.launch_kernel_ex == toggle_sim_launch_kernel_ex);
	ck_assert(cu.stream_batch_mem_op == toggle_sim_stream_batch_mem_op);
	ck_assert(tg_cu_device_ready(&cu, NULL));
	ck_assert(tg_cu_has_64bit_memops(&cu));
	toggle_sim_destroy(owner);
	tg_cu_load_sim(&cu, NULL); /* a NULL simulator reports driver version 0 */
	ck_assert_int_eq(cu.driver_version, 0);
	cu.driver_version = 13000;
	ck_assert(cu.stream_get_capture_info == toggle_sim_stream_get_capture_info);
	ck_assert(cu.graph_node_get_type == toggle_sim_graph_node_get_type);
	ck_assert(cu.graph_node_set_enabled == toggle_sim_graph_node_set_enabled);
	ck_assert(cu.graph_node_get_enabled == toggle_sim_graph_node_get_enabled);
	ck_assert(cu.graph_launch == toggle_sim_graph_launch);
	ck_assert(cu.graph_upload == toggle_sim_graph_upload);
	ck_assert(cu.get_error_string == toggle_sim_get_error_string);
	ck_assert_int_eq(cu.driver_version, 13000);
	ck_assert_ptr_null(cu.dl);

	/* Through the table, as libtoggle calls it. */
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KK");
	CUgraphExec ex = instantiate(g);
	CK_OK(cu.graph_node_set_enabled(ex, f.nodes[0], 0));
	CK_OK(cu.graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 1 }, 1);
	toggle_sim_destroy(f.sim);
}
END_TEST

static Suite *sim_teardown_suite(void)
{
	Suite *s = suite_create("sim_teardown");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, two_sims_independent);
	tcase_add_test(tc, stream_destroyed_mid_capture);
	tcase_add_test(tc, destroy_frees_everything);
	tcase_add_test(tc, error_strings);
	tcase_add_test(tc, cu_table_is_the_sim);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(sim_teardown_suite());
}
