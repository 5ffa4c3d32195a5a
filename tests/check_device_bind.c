/*
 * check_device_bind.c - device mode on the simulator: the planner captured at the head of each
 * graph, device-updatable producers, upload exactly once at bind, and
 * pipelined replays (deferred execution, several streams) that each run the
 * set the gate reported with no host cuGraphNodeSetEnabled call.
 * The simulated kernels, the agent and its graphs, and what ran are the
 * device suites' fixture (tests/fixture_device.h).  Split out of
 * check_device.c (issue 29).
 */
#include "fixture_device.h"

/* ---- capture and bind ------------------------------------------------------ */

START_TEST(capture_planner_and_device_producers)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	ck_assert_int_eq(toggle_agent_mode(f->agent), TOGGLE_MODE_DEVICE);
	dfx_capture(f, 0, H_DEVICE);
	/* planner + mark + NL compute + NH producers */
	ck_assert_uint_eq(toggle_sim_graph_node_count(f->graph[0]), 2 + NL + NH);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert_uint_eq(gs.nodes, NH);
	ck_assert(!gs.bound);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	gs = gstatus(f, 0);
	ck_assert(gs.bound && gs.uploaded && !gs.device_fallback);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_DEVICE);
	ck_assert_str_eq(gs.note, "");
	struct toggle_registry_check rc;
	toggle_registry_check(f->agent, &rc);
	ck_assert(rc.complete && rc.uniform);

	/* Every producer's first launch: the planner sets all of them. */
	struct toggle_set s = set_of(0x00f0f0);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	struct toggle_device_counters dc = dcount(f, 0);
	ck_assert_uint_eq(dc.planner_runs, 1);
	ck_assert_uint_eq(dc.device_calls, NH);
	ck_assert_uint_eq(dc.device_failures, 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	ck_assert_uint_eq(stats(f).node_set_calls, 0);
	/* The compute kernels ran; the planner touched only producers. */
	ck_assert_uint_eq(f->compute_runs, NL);

	/* The same set again: no write, no device call. */
	uint64_t writes = stats(f).mask_writes;
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_uint_eq(stats(f).mask_writes, writes);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH);
	/* One hook flipped: one word written, one device call. */
	s = set_of(0x00f0f1);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	uint64_t words = stats(f).mask_words;
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_uint_eq(stats(f).mask_words, words + 1);
	dfx_check(f);
	dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, NH + 1);
	ck_assert_uint_eq(dc.planner_runs, 3);
	dfx_close(f);
}
END_TEST

START_TEST(record_device_producer_and_eager_use)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_RECORD_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(gstatus(f, 0).mode, TOGGLE_MODE_DEVICE);
	struct toggle_set s = set_of(0x800001);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	/* A producer launched on a stream that is not capturing runs at once, unrecorded. */
	void *fp = f;
	int graph = 1, hook = 5;
	void *params[] = {&fp, &graph, &hook};
	CUlaunchConfig c = launch_cfg(f->s[1]);
	f->runs[1] = 1;
	size_t before = f->nlog;
	ck_assert_int_eq(toggle_launch_producer(f->agent, &c, f->produce, params,
						(struct toggle_hook){0, 5}),
			 0);
	ck_assert_uint_eq(f->nlog, before + 1);
	ck_assert_uint_eq(toggle_graph_count(f->agent), 1);
	f->nlog = before;
	f->runs[1] = 0;
	/* Bad arguments. */
	ck_assert_int_eq(toggle_launch_producer(f->agent, NULL, f->produce, params,
						(struct toggle_hook){0, 5}),
			 TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_launch_producer(f->agent, &c, f->produce, params,
						(struct toggle_hook){NT, 0}),
			 TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_record_device_producer(f->agent, f->s[0], (struct toggle_hook){0, 0},
						       NULL),
			 TOGGLE_EINVAL);
	dfx_close(f);
}
END_TEST

START_TEST(bind_uploads_exactly_once)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	for (int g = 0; g < 3; g++) {
		dfx_capture(f, g, H_DEVICE);
		ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[g], &f->exec[g]), 0);
	}
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 3);
	ck_assert_uint_eq(stats(f).uploads, 3);
	uint64_t rng = 7;
	uint32_t cur = 0;
	for (int64_t step = 0; step < 200; step++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		ck_assert_int_eq(toggle_step_begin(f->agent, step, NULL), 0);
		for (int g = 0; g < 3; g++)
			ck_assert_int_eq(dfx_launch(f, g, 0), 0);
	}
	dfx_check(f);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 3);
	ck_assert_uint_eq(stats(f).uploads, 3);
	/* An upload that fails: the bind fails, the graph stays unbound, nothing runs. */
	dfx_capture(f, 3, H_DEVICE);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_UPLOAD, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[3], &f->exec[3]), TOGGLE_ECUDA);
	ck_assert_ptr_nonnull(f->exec[3]);
	ck_assert(!gstatus(f, 3).bound);
	ck_assert_int_eq(dfx_launch(f, 3, 0), TOGGLE_EUNBOUND);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[3], f->exec[3]), 0);
	ck_assert_uint_eq(stats(f).uploads, 4);
	ck_assert_int_eq(dfx_launch(f, 3, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 3).device_failures, 0);
	dfx_close(f);
}
END_TEST

/* The driver's rule, modelled: device calls in a first launch that was not uploaded fail. */
START_TEST(sim_upload_requirement)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	/* Instantiated behind libtoggle's back, then bound: bind still uploads. */
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[0], f->graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 1);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_failures, 0);
	dfx_close(f);

	/* Without libtoggle's upload the planner's first calls fail, then it retries. */
	f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[0], f->graph[0]), CUDA_SUCCESS);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_UPLOAD, 0, 1, CUDA_ERROR_UNKNOWN);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), TOGGLE_ECUDA);
	/* Forced through by hand: the exec was never uploaded. */
	struct tg_graph *g = tg_graph_find(f->agent, f->graph[0]);
	ck_assert_ptr_nonnull(g);
	g->uploaded_exec = f->exec[0];
	g->dev_setup = true; /* the descriptor was written before the upload failed */
	tg_graph_reset_exec(g, f->exec[0]);
	struct toggle_set s = set_of(0x0000ff);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	struct toggle_device_counters dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, NH);
	ck_assert_uint_eq(dc.device_failures, NH);
	/* The first launch uploaded it: the next planner sets every (unknown) node. */
	f->nlog = 0;
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, 2 * NH);
	ck_assert_uint_eq(dc.device_failures, NH);
	ck_assert_uint_eq(f->nlog, 8);
	dfx_close(f);
}
END_TEST

/* ---- pipelined replays ------------------------------------------------------- */

/* Steps with random sets, plans, several graphs, no sync between steps; streams per launch. */
static void pipelined(uint64_t seed, int streams, int steps)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	for (int g = 0; g < 3; g++) {
		dfx_capture(f, g, H_DEVICE);
		ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[g], &f->exec[g]), 0);
	}
	toggle_sim_set_deferred(f->sim, true, seed);
	uint64_t rng = seed;
	uint32_t cur = 0;
	uint64_t checked = 0;
	for (int64_t step = 0; step < steps; step++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		if (tu_rng_next(&rng) % 5 == 0) {
			struct toggle_set p = set_of((uint32_t)tu_rng_next(&rng) & ((1u << NH) - 1));
			ck_assert_int_eq(toggle_plan_step(f->agent, step + 1, &p), 0);
		}
		struct toggle_set gate;
		ck_assert_int_eq(toggle_step_begin(f->agent, step, &gate), 0);
		int n = 1 + (int)(tu_rng_next(&rng) % 4);
		for (int i = 0; i < n; i++) {
			int g = (int)(tu_rng_next(&rng) % 3);
			int si = (int)(tu_rng_next(&rng) % (uint64_t)streams);
			ck_assert_int_eq(dfx_launch(f, g, si), 0);
			ck_assert_uint_eq(f->expect[g][f->launched[g] - 1], set_bits(&gate));
		}
		if (step == 0)
			ck_assert_uint_eq(f->nlog, 0); /* nothing ran yet: the host is ahead */
		if (step % 97 == 96)
			checked += dfx_check(f);
	}
	checked = dfx_check(f);
	ck_assert_uint_gt(checked, (uint64_t)steps);
	/* No host toggle at all; the planners did it. */
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	ck_assert_uint_eq(stats(f).node_set_calls, 0);
	ck_assert_uint_eq(stats(f).uploads, 3);
	if (streams > 1)
		ck_assert_uint_gt(stats(f).stream_joins, 0);
	else
		ck_assert_uint_eq(stats(f).stream_joins, 0);
	for (int g = 0; g < 3; g++) {
		struct toggle_device_counters dc = dcount(f, g);
		ck_assert_uint_eq(dc.planner_runs, f->launched[g]);
		ck_assert_uint_eq(dc.device_failures, 0);
		/* The model: all nodes at the first launch, then the hooks that changed. */
		uint64_t want = NH;
		for (uint64_t k = 1; k < f->launched[g]; k++)
			want += (uint64_t)__builtin_popcount(f->expect[g][k] ^ f->expect[g][k - 1]);
		ck_assert_uint_eq(dc.device_calls, want);
	}
	dfx_close(f);
}

START_TEST(pipelined_one_stream)
{
	pipelined(0x5eed + (uint64_t)_i, 1, 600);
}
END_TEST

START_TEST(pipelined_several_streams)
{
	pipelined(0xbeef + (uint64_t)_i, NS, 600);
}
END_TEST

/* The simulator's deferred mode does reorder: a write on a second stream can pass a launch. */
START_TEST(sim_deferred_reorders_streams)
{
	struct dfx *f = dfx_new();
	CUdeviceptr p;
	ck_assert_int_eq(toggle_sim_mem_alloc(f->sim, &p, 8), CUDA_SUCCESS);
	int passed = 0;
	for (uint64_t seed = 1; seed <= 64; seed++) {
		toggle_sim_set_deferred(f->sim, true, seed);
		uint64_t v = 0;
		CUstreamBatchMemOpParams op;
		memset(&op, 0, sizeof(op));
		op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
		op.writeValue.address = p;
		op.writeValue.value64 = 1;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_SUCCESS);
		op.writeValue.value64 = 2;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[1], 1, &op, 0), CUDA_SUCCESS);
		toggle_sim_synchronize(f->sim);
		ck_assert_int_eq(toggle_sim_memcpy_dtoh(f->sim, &v, p, 8), CUDA_SUCCESS);
		passed += v == 1; /* stream 1's write ran first */
		/* With an event, the order is fixed. */
		CUevent ev;
		ck_assert_int_eq(toggle_sim_event_create(f->sim, &ev), CUDA_SUCCESS);
		op.writeValue.value64 = 3;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_event_record(ev, f->s[0]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_stream_wait_event(f->s[1], ev, 0), CUDA_SUCCESS);
		op.writeValue.value64 = 4;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[1], 1, &op, 0), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_stream_synchronize(f->s[1]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_memcpy_dtoh(f->sim, &v, p, 8), CUDA_SUCCESS);
		ck_assert_uint_eq(v, 4);
		ck_assert_int_eq(toggle_sim_event_destroy(ev), CUDA_SUCCESS);
	}
	ck_assert_int_gt(passed, 0);
	ck_assert_int_lt(passed, 64);
	toggle_sim_set_deferred(f->sim, false, 0);
	/* Bad batches. */
	CUstreamBatchMemOpParams op;
	memset(&op, 0, sizeof(op));
	op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	op.writeValue.address = p + 8; /* outside */
	ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_ERROR_INVALID_VALUE);
	op.writeValue.address = p;
	ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 256, &op, 0), CUDA_ERROR_INVALID_VALUE);
	op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_mem_free(f->sim, p + 1), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_mem_free(f->sim, p), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0);
	toggle_sim_destroy(f->sim);
	free(f);
}
END_TEST

static Suite *device_bind_suite(void)
{
	Suite *s = suite_create("device_bind");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, capture_planner_and_device_producers);
	tcase_add_test(tc, record_device_producer_and_eager_use);
	tcase_add_test(tc, bind_uploads_exactly_once);
	tcase_add_test(tc, sim_upload_requirement);
	tcase_add_loop_test(tc, pipelined_one_stream, 0, 3);
	tcase_add_loop_test(tc, pipelined_several_streams, 0, 3);
	tcase_add_test(tc, sim_deferred_reorders_streams);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(device_bind_suite());
}
