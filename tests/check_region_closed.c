/*
 * check_region_closed.c - producer regions that fail: use outside a capture,
 * nesting, a region open at capture end, abort, overlapping records, device
 * mode, a driver failure.  A refused or aborted region whose capture gained
 * nodes leaves them in the graph unrecorded: that graph fails closed (late:
 * bind and launch refused, nothing runs) until captured again.
 * The simulator, the agent, its kernels and the capture helpers are the
 * region suites' fixture (tests/fixture_region.h).  Split out of
 * check_region.c (issue 29).
 */
#include "fixture_region.h"

START_TEST(region_outside_a_capture)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	/* No capture window. */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_outside_window, 1);
	/* A window, but the stream is not capturing. */
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_not_capturing, 1);
	/* Nothing was opened: end has no region. */
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);

	/* The window closes between begin and end: refused, nothing recorded, and k1
	 * is in the graph unrecorded: it fails closed. */
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_outside_window, 2);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &f.graph), CUDA_SUCCESS);
	ck_assert_uint_eq(recorded(&f), 0);
	assert_late(&f, "region of hook 0:0 (1 nodes) was captured but not recorded: no capture "
		    "window");

	/* The capture ends between begin and end: refused. */
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &f.graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_not_capturing, 2);
	ck_assert_uint_eq(recorded(&f), 0);
	/* A hook outside the catalog: refused, and the graph fails closed. */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(NT, 0), NULL), TOGGLE_ERANGE);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	assert_late(&f, "region of hook 3:0 (1 nodes) was captured but not recorded: hook outside");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/*
 * A region still open when its capture ends (issue #28): its kernels are in
 * the graph unrecorded, and would run whatever the set: the graph fails
 * closed like every other refused record (late), found where it shows
 * first.  _i: 0 at toggle_capture_end; 1 the window stays open: at the
 * bind or launch; 2 at a toggle_producer_end made after the capture ended;
 * 3 the region captured nothing: the graph is left alone; 4 the graph is
 * destroyed and a stranger got its handle before the window closed: the
 * stranger is not touched.
 */
START_TEST(region_open_at_capture_end_fails_closed)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	if (_i != 3)
		kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &f.graph), CUDA_SUCCESS);
	if (_i == 4) {
		toggle_sim_set_handle_reuse(f.sim, true);
		CUgraph dead = f.graph;
		ck_assert_int_eq(toggle_sim_graph_destroy(dead), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[1]), CUDA_SUCCESS);
		kernel(&f, 1, 5);
		ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[1], &f.graph), CUDA_SUCCESS);
		ck_assert_ptr_eq(f.graph, dead);
		toggle_sim_set_handle_reuse(f.sim, false);
	}
	if (_i == 2) {
		ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(1, 2), NULL), TOGGLE_ECAPTURE);
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
		assert_late(&f, "region of hook 1:2 was still open when its capture ended");
		recapture_works(&f);
	} else if (_i == 1) {
		assert_late(&f, "was still open when its capture ended");
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
		recapture_works(&f);
	} else {
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
		if (_i == 0) {
			assert_late(&f, "region on stream 0x");
			struct toggle_graph_status gs;
			ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &gs), 0);
			ck_assert_ptr_nonnull(strstr(gs.note, "was still open when its capture ended"));
			recapture_works(&f);
		} else {
			/* Left alone: it runs, untouched, whatever the set. */
			instantiate(&f);
			uint64_t all = _i == 3 ? B(0) : B(5); /* a plain kernel; the stranger's */
			ck_assert_uint_eq(run_with(&f, NULL, 0), all);
			ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), all);
		}
	}
	/* The region is closed: nothing is open on the stream any more. */
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	rfx_close(&f);
}
END_TEST

START_TEST(region_nested_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "do not nest"));
	kernel(&f, 0, 2);
	/* The outer region is still open and holds both kernels. */
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 2);
	/* Regions on two streams of two captures at once are independent. */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[2]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[2]), 0);
	kernel(&f, 2, 3);
	kernel(&f, 0, 4);
	ck_assert_uint_eq(region_end(&f, 2, hk(1, 0)), 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(1, 1)), 1);
	CUgraph g2;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[2], &g2), CUDA_SUCCESS);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 3);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g2, &gs), 0);
	ck_assert_uint_eq(gs.nodes, 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(1) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(1, 1)}, 1), B(4));
	rfx_close(&f);
}
END_TEST

START_TEST(region_abort)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	toggle_producer_abort(f.agent, f.s[0]); /* nothing captured in it */
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	toggle_producer_abort(f.agent, f.s[0]); /* nothing open: nothing happens */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0); /* no longer "nested" */
	kernel(&f, 0, 2);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 1);
	/* A region left open when its capture ended is replaced by the next capture's. */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	end(&f);
	CUgraph first = f.graph;
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 4);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	CUgraph second = f.graph;
	f.graph = first;
	ck_assert_uint_eq(recorded(&f), 1); /* k2 */
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(2));
	f.graph = second;
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), B(4));
	rfx_close(&f);
}
END_TEST

/*
 * Aborting a region whose capture gained kernels drops the region, but its
 * kernels are in the graph unrecorded: the graph fails closed (the
 * project's rule), until captured again.
 */
START_TEST(region_abort_with_kernels_fails_closed)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	toggle_producer_abort(f.agent, f.s[0]);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	/* A later region of the same capture still records, the graph stays late. */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 3);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	assert_late(&f, "region (aborted) (2 nodes)");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/* A node of the region recorded already (toggle_record_producer): refused, the first stays. */
START_TEST(region_overlapping_record_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.s[0], hk(0, 0)), 0);
	kernel(&f, 0, 2);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 1), NULL), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "already recorded"));
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	/* k2 is in the graph unrecorded. */
	assert_late(&f, "region of hook 0:1 (2 nodes) was captured but not recorded: a node "
		    "recorded already");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/* Device mode: a region's kernels are not device-updatable: that graph runs lazy on the host. */
START_TEST(region_in_device_mode_falls_back)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_DEVICE, false);
	begin(&f);
	ck_assert_int_eq(toggle_capture_planner(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 2);
	end(&f);
	instantiate(&f);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &gs), 0);
	ck_assert(gs.device_fallback);
	ck_assert_ptr_nonnull(strstr(gs.note, "not device-updatable"));
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(1) | B(2));
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	rfx_close(&f);
}
END_TEST

/*
 * A failing driver call in the walk refuses the region and records nothing;
 * the region's kernels are in the graph: it fails closed.  _i: 0 the type
 * query fails, 1 the capture query at end fails (the graph is asked again),
 * 2 the capture query fails twice (cannot tell what the region gained:
 * fail closed all the same).
 */
START_TEST(region_driver_failure_records_nothing)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	if (_i == 0) /* the second node's type query fails */
		toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_GET_TYPE, 1, 1, CUDA_ERROR_INVALID_VALUE);
	else
		toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO, 0, (uint64_t)_i,
				CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ECUDA);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent),
				     _i ? "cuStreamGetCaptureInfo" : "cuGraphNodeGetType"));
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	ck_assert_uint_eq(anomalies(&f).driver_errors, 1);
	assert_late(&f, _i == 0   ? "region of hook 0:0 (2 nodes) was captured but not recorded"
			: _i == 1 ? "region of hook 0:0 (2 nodes) was captured but not recorded: "
				    "cuStreamGetCaptureInfo failed"
				  : "region of hook 0:0 may have captured nodes");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

static Suite *region_closed_suite(void)
{
	Suite *s = suite_create("region_closed");
	TCase *tc = tcase_create("region");
	tcase_add_test(tc, region_outside_a_capture);
	tcase_add_test(tc, region_nested_refused);
	tcase_add_loop_test(tc, region_open_at_capture_end_fails_closed, 0, 5);
	tcase_add_test(tc, region_abort);
	tcase_add_test(tc, region_abort_with_kernels_fails_closed);
	tcase_add_test(tc, region_overlapping_record_refused);
	tcase_add_test(tc, region_in_device_mode_falls_back);
	tcase_add_loop_test(tc, region_driver_failure_records_nothing, 0, 3);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(region_closed_suite());
}
