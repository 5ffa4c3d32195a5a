/*
 * check_prepare_refusals.c - toggle_graph_prepare(): toggle_graph_launch() without
 * its cuGraphLaunch, for callers that launch their exec themselves (torch's
 * CUDAGraph::replay, which runs its generators' prologue first).  On the
 * simulator, in lazy, eager and device mode:
 *
 *  - refusals are launch's: same code, same error text, same counters,
 *    nothing launched, nothing enqueued;
 *  - the accounting is a launch's: replays, last step, the agent's launch
 *    count, and device mode's launch index (a tainted launch made through
 *    prepare is reported with its step); unrelated graphs: 0, nothing done;
 *  - device mode on two streams: the mask written on the prepare's stream
 *    after a join on the previous launch's stream.
 *
 * The simulated kernels, the agent and its graphs, and what ran are the
 * prepare suites' fixture (tests/fixture_prepare.h).  Split out of
 * check_prepare.c (issue 29).
 */
#include "fixture_prepare.h"

/* ---- 3. refusals are launch's --------------------------------------------------- */

#define N64(s) (sizeof(s) / sizeof(uint64_t))

struct counters {
	uint64_t st[N64(struct toggle_stats)];
	uint64_t an[N64(struct toggle_anomalies)];
	uint64_t sim_launches, sim_sets, sim_memops;
};

_Static_assert(sizeof(struct toggle_stats) % 8 == 0, "stats are 64-bit fields");
_Static_assert(sizeof(struct toggle_anomalies) % 8 == 0, "anomalies are 64-bit fields");

static struct counters counters(struct pfx *f)
{
	struct counters c;
	struct toggle_stats st;
	struct toggle_anomalies an;
	toggle_stats_get(f->agent, &st);
	toggle_anomalies_get(f->agent, &an);
	memcpy(c.st, &st, sizeof(st));
	memcpy(c.an, &an, sizeof(an));
	c.sim_launches = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	c.sim_sets = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED);
	c.sim_memops = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP);
	return c;
}

/*
 * graph/exec refused: prepare first, then launch, on the same state.  Both
 * return want with the same error text and move the same counters by the
 * same amounts (launches_refused and the anomaly by one each); neither
 * launches anything nor enqueues anything.
 */
static void same_refusal(struct pfx *f, CUgraph graph, CUgraphExec exec, int want,
			 const char *says)
{
	struct counters c0 = counters(f);
	int rp = toggle_graph_prepare(f->agent, graph, exec, f->s[0]);
	char err_prepare[512];
	snprintf(err_prepare, sizeof(err_prepare), "%s", toggle_last_error(f->agent));
	struct counters c1 = counters(f);
	int rl = toggle_graph_launch(f->agent, graph, exec, f->s[0]);
	struct counters c2 = counters(f);
	ck_assert_int_eq(rp, want);
	ck_assert_int_eq(rl, want);
	ck_assert_str_eq(err_prepare, toggle_last_error(f->agent));
	ck_assert_msg(strstr(err_prepare, says), "'%s' does not say '%s'", err_prepare, says);
	for (size_t i = 0; i < N64(struct toggle_stats); i++)
		ck_assert_msg(c1.st[i] - c0.st[i] == c2.st[i] - c1.st[i],
			      "stats field %zu: prepare moved it by %llu, launch by %llu", i,
			      (unsigned long long)(c1.st[i] - c0.st[i]),
			      (unsigned long long)(c2.st[i] - c1.st[i]));
	for (size_t i = 0; i < N64(struct toggle_anomalies); i++)
		ck_assert_msg(c1.an[i] - c0.an[i] == c2.an[i] - c1.an[i],
			      "anomaly field %zu: prepare moved it by %llu, launch by %llu", i,
			      (unsigned long long)(c1.an[i] - c0.an[i]),
			      (unsigned long long)(c2.an[i] - c1.an[i]));
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_eq(st.launches_refused, c0.st[offsetof(struct toggle_stats, launches_refused) / 8] + 2);
	ck_assert_uint_eq(c2.sim_launches, c0.sim_launches);
	ck_assert_uint_eq(c2.sim_sets, c0.sim_sets);
	ck_assert_uint_eq(c2.sim_memops, c0.sim_memops);
}

/* Unbound, forgotten, late (host modes); NULL agent; NULL exec.  _i: lazy, eager. */
START_TEST(refusals_host)
{
	struct pfx *f = pfx_open(modes[_i], true);
	/* Captured, never bound. */
	pfx_capture(f, 0, false);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[0], f->graph[0]), CUDA_SUCCESS);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_EUNBOUND, "no bound exec");
	/* Bound, then forgotten. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	step(f, 0, 0x1);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert_int_eq(toggle_graph_forget(f->agent, f->graph[0]), 0);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_ESTALE, "forgotten");
	/* A producer recorded after the capture window closed: the graph is late. */
	CUgraph late;
	CUgraphExec late_exec;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_compute, f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f->agent, f->s[0], (struct toggle_hook){0, 1}),
			 TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &late), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&late_exec, late), CUDA_SUCCESS);
	same_refusal(f, late, late_exec, TOGGLE_ECAPTURE, "capture it again");
	/* A NULL exec for a bound graph. */
	pfx_capture(f, 1, false);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[1], &f->exec[1]), 0);
	same_refusal(f, f->graph[1], NULL, TOGGLE_EINVAL, "NULL exec");
	/* No agent. */
	ck_assert_int_eq(toggle_graph_prepare(NULL, f->graph[1], f->exec[1], f->s[0]), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_launch(NULL, f->graph[1], f->exec[1], f->s[0]), TOGGLE_EINVAL);
	pfx_close(f);
}
END_TEST

/* Strict device mode: a graph without a planner is refused at bind, then at launch. */
START_TEST(refusals_device_strict)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_capture(f, 0, false);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]),
			 TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(f->exec[0]);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_ENOTSUP, "strict device mode");
	pfx_close(f);
}
END_TEST

/*
 * A driver call that fails while bringing the exec to the set refuses the
 * prepare like the launch (same code, counted, nothing launched); once the
 * driver works again, prepare + own launch runs the set.  _i: lazy (a node
 * set fails), device (the mask write fails).
 */
START_TEST(refusals_driver_failure)
{
	enum toggle_mode mode = _i ? TOGGLE_MODE_DEVICE : TOGGLE_MODE_LAZY;
	enum toggle_sim_op op = _i ? TOGGLE_SIM_OP_BATCH_MEM_OP : TOGGLE_SIM_OP_NODE_SET_ENABLED;
	const char *says = _i ? "cuStreamBatchMemOp" : "cuGraphNodeSetEnabled";
	struct pfx *f = pfx_open(mode, true);
	pfx_graphs(f);
	step(f, 0, 0x0000ffu);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	step(f, 1, 0xff0000u);
	int rc[2];
	struct counters c[3];
	c[0] = counters(f);
	for (int k = 0; k < 2; k++) {
		toggle_sim_fail(f->sim, op, 0, 1, CUDA_ERROR_INVALID_VALUE);
		rc[k] = k == 0 ? prepare(f, 0, 0) : via_launch(f, 0, 0);
		ck_assert_msg(strstr(toggle_last_error(f->agent), says), "%s",
			      toggle_last_error(f->agent));
		c[k + 1] = counters(f);
	}
	ck_assert_int_eq(rc[0], TOGGLE_ECUDA);
	ck_assert_int_eq(rc[1], TOGGLE_ECUDA);
	size_t refused = offsetof(struct toggle_stats, launches_refused) / 8;
	size_t driver = offsetof(struct toggle_anomalies, driver_errors) / 8;
	for (int k = 0; k < 2; k++) {
		ck_assert_uint_eq(c[k + 1].st[refused], c[k].st[refused] + 1);
		ck_assert_uint_eq(c[k + 1].an[driver], c[k].an[driver] + 1);
		ck_assert_uint_eq(c[k + 1].sim_launches, c[k].sim_launches);
	}
	ck_assert_uint_eq(gstatus(f, 0).replays, 1); /* refusals are not launches */
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert_uint_eq(pfx_check(f), 2);
	ck_assert_uint_eq(f->expect[0][1], 0xff0000u);
	pfx_close(f);
}
END_TEST

/* ---- 4. accounting ------------------------------------------------------------------ */

/* Replays, last step, the agent's launches; unrelated graphs: 0 and nothing done. */
START_TEST(accounting_and_unrelated)
{
	struct pfx *f = pfx_open(modes[_i], true);
	pfx_graphs(f);
	/* A graph without producers. */
	CUgraph other;
	CUgraphExec other_exec;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_other, f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &other), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&other_exec, other), CUDA_SUCCESS);

	for (int64_t s = 0; s < 5; s++) {
		step(f, 10 + s, (uint32_t)(0x3u << s));
		struct toggle_graph_status before = gstatus(f, 1);
		uint64_t launches = stats(f).launches;
		ck_assert_int_eq(via_prepare(f, 1, (int)s % NS), 0);
		struct toggle_graph_status after = gstatus(f, 1);
		ck_assert_uint_eq(after.replays, before.replays + 1);
		ck_assert_int_eq(after.last_step, 10 + s);
		ck_assert_uint_eq(stats(f).launches, launches + 1);
		ck_assert_uint_eq(gstatus(f, 0).replays, 0); /* another graph: untouched */
	}
	pfx_check(f);

	struct counters c0 = counters(f);
	ck_assert_int_eq(toggle_graph_prepare(f->agent, other, other_exec, f->s[0]), 0);
	struct counters c1 = counters(f);
	ck_assert_mem_eq(c0.st, c1.st, sizeof(c0.st));
	ck_assert_mem_eq(c0.an, c1.an, sizeof(c0.an));
	ck_assert_uint_eq(c1.sim_launches, c0.sim_launches); /* the caller launches it */
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->other_runs, 0);
	/* launch's way with it, for comparison: launched and counted as unrelated. */
	ck_assert_int_eq(toggle_graph_launch(f->agent, other, other_exec, f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->other_runs, 1);
	ck_assert_uint_eq(stats(f).launches_unrelated,
			  c0.st[offsetof(struct toggle_stats, launches_unrelated) / 8] + 1);
	ck_assert_int_eq(toggle_sim_exec_destroy(other_exec), CUDA_SUCCESS);
	pfx_close(f);
}
END_TEST

/*
 * Device mode's launch index: a launch made through prepare whose planner
 * fails two device calls is reported as tainted at its own step (the
 * report maps planner runs to steps through the launches accounted), and a
 * strict agent then refuses the prepare as it refuses the launch.
 */
#define TAINT_A 0x0000ffu /* resid_post:0-7 */
#define TAINT_B 0x00ff00u /* attn_out:0-7 */
/* The launch from A to B calls h0, h8, h1, h9, h2, ...: the 4th and 5th
 * fail, so h9 stays off and h2 stays on in that launch. */
#define TAINT_RAN (TAINT_B ^ (1u << 9) ^ (1u << 2))

START_TEST(device_taint_step_through_prepare)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_capture(f, 0, true);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	toggle_sim_set_deferred(f->sim, true, 7);
	step(f, 0, TAINT_A);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0); /* step 0 has two launches */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, NH + 3, 2, CUDA_ERROR_INVALID_VALUE);
	step(f, 1, TAINT_B);
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	toggle_sim_synchronize(f->sim);
	f->expect[0][2] = TAINT_RAN; /* what that launch really ran */
	pfx_check(f);
	ck_assert_int_eq(toggle_step_begin(f->agent, 2, NULL), 0); /* reads the report */
	struct toggle_taint t;
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, 1);
	ck_assert_uint_eq(t.lost, 0);
	ck_assert_int_eq(t.last_step, 1);
	ck_assert_int_eq(gstatus(f, 0).tainted_step, 1);
	ck_assert(gstatus(f, 0).blocked);
	same_refusal(f, f->graph[0], f->exec[0], TOGGLE_ECUDA, "step 1");
	/* A bind re-arms it: prepare + own launch is clean again. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_int_eq(via_prepare(f, 0, 2), 0);
	pfx_check(f);
	pfx_close(f);
}
END_TEST

/* ---- 5. device mode on two streams ---------------------------------------------- */

/*
 * Launch on stream 0, then a new set prepared on stream 1: the mask words
 * are written on stream 1 after a join on stream 0 (the launch there has
 * not run yet: deferred), and the launch on stream 1 runs the new set while
 * the one on stream 0 keeps the old.  Then back to stream 0 through
 * toggle_graph_launch: joined again.
 */
START_TEST(device_two_streams)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_graphs(f);
	for (uint64_t seed = 1; seed <= 16; seed++) {
		toggle_sim_set_deferred(f->sim, true, seed);
		int64_t s0 = (int64_t)seed * 10;
		step(f, s0, 0x00000fu);
		ck_assert_int_eq(via_prepare(f, 0, 0), 0);
		uint64_t joins = stats(f).stream_joins;
		uint64_t memops = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP);
		step(f, s0 + 1, 0xf00000u);
		ck_assert_int_eq(via_prepare(f, 0, 1), 0);
		ck_assert_uint_eq(stats(f).stream_joins, joins + 1);
		ck_assert_uint_gt(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP), memops);
		step(f, s0 + 2, 0x0f0f0fu);
		ck_assert_int_eq(via_launch(f, 0, 0), 0);
		ck_assert_uint_eq(stats(f).stream_joins, joins + 2);
		pfx_check(f);
	}
	pfx_close(f);
}
END_TEST

static Suite *prepare_refusals_suite(void)
{
	Suite *s = suite_create("prepare_refusals");
	TCase *tc = tcase_create("prepare");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, refusals_host, 0, 2);
	tcase_add_test(tc, refusals_device_strict);
	tcase_add_loop_test(tc, refusals_driver_failure, 0, 2);
	tcase_add_loop_test(tc, accounting_and_unrelated, 0, 3);
	tcase_add_test(tc, device_taint_step_through_prepare);
	tcase_add_test(tc, device_two_streams);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(prepare_refusals_suite());
}
