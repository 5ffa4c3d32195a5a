/*
 * check_region_record.c - producer regions on the simulator: a region records
 * every kernel node its capture gained (one kernel, several, streams forked
 * and joined inside it) and nothing else; unjoined or escaping forks,
 * memcpy/memset nodes and an empty region are refused with nothing
 * recorded (a refused region that gained nothing leaves the graph alone);
 * side streams reused by every region (PyTorch's pattern) stay exact; the
 * simulator's fork/join model.
 * The simulator, the agent, its kernels and the capture helpers are the
 * region suites' fixture (tests/fixture_region.h).  Split out of
 * check_region.c (issue 29).
 */
#include "fixture_region.h"

/* ---- regions ------------------------------------------------------------------ */

START_TEST(region_one_kernel)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	kernel(&f, 0, 2);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), B(0) | B(1) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 2)}, 1), B(0) | B(2));
	rfx_close(&f);
}
END_TEST

/* Two regions of several kernels each, plus a kernel between them that no region has. */
START_TEST(region_several_kernels)
{
	struct rfx f;
	rfx_open(&f, (enum toggle_mode)_i, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	kernel(&f, 0, 3);
	ck_assert_uint_eq(region_end(&f, 0, hk(1, 4)), 3);
	kernel(&f, 0, 4);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 5);
	kernel(&f, 0, 6);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(2, 7), NULL), 0); /* n may be NULL */
	end(&f);
	ck_assert_uint_eq(recorded(&f), 5);
	instantiate(&f);
	uint64_t a = B(1) | B(2) | B(3), b = B(5) | B(6);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(4));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(1, 4)}, 1), a | B(4));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(2, 7)}, 1), b | B(4));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(1, 4), hk(2, 7)}, 2), a | b | B(4));
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(4));
	struct toggle_set hooks;
	ck_assert_int_eq(toggle_graph_hooks(f.agent, f.graph, &hooks), 0);
	ck_assert_uint_eq(toggle_set_count(&hooks), 2);
	rfx_close(&f);
}
END_TEST

/*
 * s0: k0 | region: k1, fork s1 (k2, k3 on s1), k4 on s0, join s1, k5 | k6.
 * The region holds k1..k5; k0 and k6 are outside it.
 */
START_TEST(region_forked_and_joined)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	edge(&f, 0, 1, 0); /* fork */
	kernel(&f, 1, 2);
	kernel(&f, 1, 3);
	kernel(&f, 0, 4);
	edge(&f, 1, 0, 1); /* join */
	kernel(&f, 0, 5);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 5);
	kernel(&f, 0, 6);
	end(&f);
	instantiate(&f);
	uint64_t region = B(1) | B(2) | B(3) | B(4) | B(5);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(6));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), region | B(0) | B(6));
	rfx_close(&f);
}
END_TEST

/* A region that ends with its fork as the frontier (joined into the end): still exact. */
START_TEST(region_join_at_the_end)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 1);
	kernel(&f, 0, 2);
	edge(&f, 1, 0, 1); /* s0's frontier is now {k2, k1} */
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 3)), 2);
	kernel(&f, 0, 3);
	end(&f);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(3));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 3)}, 1), B(0) | B(1) | B(2) | B(3));
	rfx_close(&f);
}
END_TEST

/*
 * The torch pattern: one side stream reused by every region.  At the second
 * fork the side stream still depends on its own last node (a wait adds to
 * a capturing stream's dependencies), which lies before the region: the
 * walk must stop there, not refuse or take older nodes in.
 */
START_TEST(region_side_stream_reused)
{
	struct rfx f;
	rfx_open(&f, (enum toggle_mode)_i, false);
	begin(&f);
	for (int r = 0; r < 3; r++) {
		kernel(&f, 0, 10 * r);
		ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
		kernel(&f, 0, 10 * r + 1);
		edge(&f, 0, 1, 0);
		kernel(&f, 1, 10 * r + 2);
		edge(&f, 1, 0, 1);
		ck_assert_uint_eq(region_end(&f, 0, hk(0, r)), 2);
	}
	kernel(&f, 0, 40);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 6);
	instantiate(&f);
	uint64_t always = B(0) | B(10) | B(20) | B(40);
	ck_assert_uint_eq(run_with(&f, NULL, 0), always);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), always | B(11) | B(12));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0), hk(0, 2)}, 2),
			  always | B(1) | B(2) | B(21) | B(22));
	rfx_close(&f);
}
END_TEST

/*
 * A fork inside the region not joined before its end: refused, nothing
 * recorded, and the graph, which holds the region's kernels unrecorded,
 * fails closed until it is captured again.
 */
START_TEST(region_unjoined_fork_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 2);
	kernel(&f, 0, 3);
	size_t n = 99;
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), &n), TOGGLE_EINVAL);
	ck_assert_uint_eq(n, 0);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "join every stream"));
	edge(&f, 1, 0, 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	assert_late(&f, "region of hook 0:0 (3 nodes)");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/* A stream forked before the region and joined inside it: its older kernel is not the region's. */
START_TEST(region_fork_from_before)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 1); /* before the region, on s1 */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 2);
	edge(&f, 1, 0, 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 1);
	kernel(&f, 0, 3);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(1) | B(3));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(0) | B(1) | B(2) | B(3));
	rfx_close(&f);
}
END_TEST

/*
 * Two regions open at once on two streams of one capture: each sees the
 * other's work.  The refused one leaves its kernel unrecorded at that point,
 * so the graph fails closed even though the other region takes it in later.
 */
START_TEST(region_two_streams_one_capture_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	edge(&f, 0, 1, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[1]), 0);
	kernel(&f, 1, 1);
	kernel(&f, 0, 2);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[1], hk(0, 1), NULL), TOGGLE_EINVAL);
	edge(&f, 1, 0, 1);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), 0); /* joined: k1, k2 */
	end(&f);
	ck_assert_uint_eq(recorded(&f), 2);
	assert_late(&f, "region of hook 0:1 (2 nodes)");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/*
 * memcpy and memset nodes refuse the whole region, with how to make the copy
 * a kernel; the region's kernels are in the graph unrecorded: it fails closed.
 */
START_TEST(region_copy_nodes_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	for (int memcpy_node = 0; memcpy_node < 2; memcpy_node++) {
		uint64_t nk = anomalies(&f).record_not_kernel;
		ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
		kernel(&f, 0, 1);
		if (memcpy_node)
			ck_assert_int_eq(toggle_sim_memcpy(f.s[0]), CUDA_SUCCESS);
		else
			ck_assert_int_eq(toggle_sim_memset(f.s[0]), CUDA_SUCCESS);
		kernel(&f, 0, 2);
		size_t n = 99;
		ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), &n), TOGGLE_ENOTKERNEL);
		ck_assert_uint_eq(n, 0);
		const char *e = toggle_last_error(f.agent);
		ck_assert_ptr_nonnull(strstr(e, memcpy_node ? "memcpy" : "memset"));
		ck_assert_ptr_nonnull(strstr(e, "torch.mul(x, 1, out=buf)"));
		ck_assert_ptr_nonnull(strstr(e, "toggle_copy_out"));
		ck_assert_uint_eq(anomalies(&f).record_not_kernel, nk + 1);
		ck_assert_uint_eq(recorded(&f), 0);
	}
	/* The region is closed: a later one on the same stream records normally... */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 3);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	/* ... but the refused regions' kernels 1 and 2 would run at every replay. */
	assert_late(&f, "region of hook 0:0 (3 nodes) was captured but not recorded: a node that "
		    "is not a kernel");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

START_TEST(region_without_kernel_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	uint64_t nk = anomalies(&f).record_not_kernel;
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ENOTKERNEL);
	ck_assert_uint_eq(anomalies(&f).record_not_kernel, nk + 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	/* Nothing was captured in the region: the graph is left alone (unrelated, runs). */
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &(struct toggle_graph_status){0}),
			 TOGGLE_ENOENT);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec, f.graph), CUDA_SUCCESS);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0));
	rfx_close(&f);
}
END_TEST

/*
 * Refusals of regions that captured nothing (gained no node) leave the graph
 * alone: an empty region, one closed with a hook outside the catalog, after
 * the window closed, or aborted.  The graph's recorded producers toggle as
 * usual.
 */
START_TEST(region_refused_empty_leaves_graph_alone)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 2), NULL), TOGGLE_ENOTKERNEL);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(NT, 0), NULL), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	toggle_producer_abort(f.agent, f.s[0]);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 3), NULL), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	kernel(&f, 0, 2);
	end(&f);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &gs), 0);
	ck_assert_str_eq(gs.note, "");
	ck_assert_uint_eq(gs.nodes, 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), B(0) | B(1) | B(2));
	rfx_close(&f);
}
END_TEST

/* ---- the simulator's fork/join model ---------------------------------------------- */

START_TEST(sim_fork_join_rules)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	CUgraph g;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[0]), CUDA_SUCCESS);
	kernel(&f, 0, 0);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 1);
	/* a forked stream cannot end the capture; an unjoined one keeps the origin from ending it */
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[1], &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
	/* another capture's event cannot be waited on */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[2]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_wait_event(f.s[2], f.ev[0], 0),
			 CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
	edge(&f, 1, 0, 1);
	kernel(&f, 0, 2);
	/* k2 depends on k0's chain end and k1 */
	CUstreamCaptureStatus st;
	const CUgraphNode *deps = NULL;
	size_t nd = 0;
	ck_assert_int_eq(toggle_sim_stream_get_capture_info(f.s[0], &st, NULL, NULL, &deps, NULL, &nd),
			 CUDA_SUCCESS);
	ck_assert_uint_eq(nd, 1);
	CUgraphNode k2 = deps[0], d2[4];
	size_t n2 = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependencies(k2, d2, NULL, &n2), CUDA_SUCCESS);
	ck_assert_uint_eq(n2, 2);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &g), CUDA_SUCCESS);
	/* the forked stream left the capture with it */
	ck_assert_int_eq(toggle_sim_stream_get_capture_info(f.s[1], &st, NULL, NULL, NULL, NULL, NULL),
			 CUDA_SUCCESS);
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
	size_t all = 0;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(g, NULL, &all), CUDA_SUCCESS);
	ck_assert_uint_eq(all, 3);
	/* a capture event of an ended capture can no longer fork */
	ck_assert_int_eq(toggle_sim_stream_wait_event(f.s[1], f.ev[0], 0),
			 CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
	CUgraphExec ex;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&ex, g), CUDA_SUCCESS);
	f.ran = 0;
	ck_assert_int_eq(toggle_sim_graph_launch(ex, f.s[0]), CUDA_SUCCESS);
	ck_assert_uint_eq(f.ran, B(0) | B(1) | B(2));
	CUgraph g2;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[2], &g2), CUDA_SUCCESS);
	rfx_close(&f);
}
END_TEST

static Suite *region_record_suite(void)
{
	Suite *s = suite_create("region_record");
	TCase *tc = tcase_create("region");
	tcase_add_test(tc, region_one_kernel);
	tcase_add_loop_test(tc, region_several_kernels, TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER + 1);
	tcase_add_test(tc, region_forked_and_joined);
	tcase_add_test(tc, region_join_at_the_end);
	tcase_add_loop_test(tc, region_side_stream_reused, TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER + 1);
	tcase_add_test(tc, region_unjoined_fork_refused);
	tcase_add_test(tc, region_fork_from_before);
	tcase_add_test(tc, region_two_streams_one_capture_refused);
	tcase_add_test(tc, region_copy_nodes_refused);
	tcase_add_test(tc, region_without_kernel_refused);
	tcase_add_test(tc, region_refused_empty_leaves_graph_alone);
	tcase_add_test(tc, sim_fork_join_rules);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(region_record_suite());
}
