/*
 * check_prepare_runs.c - toggle_graph_prepare(): toggle_graph_launch() without
 * its cuGraphLaunch, for callers that launch their exec themselves (torch's
 * CUDAGraph::replay, which runs its generators' prologue first).  On the
 * simulator, in lazy, eager and device mode:
 *
 *  - prepare + the caller's own launch runs exactly the step's set, mixed at
 *    random with toggle_graph_launch, over random steps and streams
 *    (deferred execution in device mode: the host runs ahead);
 *  - a prepare not followed by its launch, then another prepare (same or
 *    other stream, same or other set), still runs exactly the set.
 *
 * The simulated kernels, the agent and its graphs, and what ran are the
 * prepare suites' fixture (tests/fixture_prepare.h).  Split out of
 * check_prepare.c (issue 29).
 */
#include "fixture_prepare.h"

/* ---- 1. prepare + own launch runs the step's set -------------------------------- */

/*
 * Random steps and sets (plans too), a few replays per step, each through
 * toggle_graph_launch, prepare + own launch, or one or two prepares left
 * without their launch followed by either.  streams > 1: random streams.
 * Device mode runs deferred (the host ahead of the device).
 */
static void random_steps(enum toggle_mode mode, uint64_t seed, int streams, int steps)
{
	struct pfx *f = pfx_open(mode, true);
	pfx_graphs(f);
	bool device = mode == TOGGLE_MODE_DEVICE;
	if (device)
		toggle_sim_set_deferred(f->sim, true, seed);
	uint64_t rng = seed, prepared[G] = {0}, unlaunched[G] = {0};
	uint32_t cur = 0;
	int64_t last_step[G] = {-1, -1, -1};
	for (int64_t s = 0; s < steps; s++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set set = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &set), 0);
		if (tu_rng_next(&rng) % 5 == 0) {
			struct toggle_set p = set_of((uint32_t)tu_rng_next(&rng) & ((1u << NH) - 1));
			ck_assert_int_eq(toggle_plan_step(f->agent, s + 1, &p), 0);
		}
		struct toggle_set gate;
		ck_assert_int_eq(toggle_step_begin(f->agent, s, &gate), 0);
		int n = 1 + (int)(tu_rng_next(&rng) % 4);
		for (int i = 0; i < n; i++) {
			int g = (int)(tu_rng_next(&rng) % G);
			int si = (int)(tu_rng_next(&rng) % (uint64_t)streams);
			switch (tu_rng_next(&rng) % 4) {
			case 0:
				ck_assert_int_eq(via_launch(f, g, si), 0);
				break;
			case 3:
				/* one or two left without their launch, on random streams:
				 * the next prepare must still be exact */
				for (int k = 1 + (int)(tu_rng_next(&rng) % 2); k > 0; k--) {
					int sj = (int)(tu_rng_next(&rng) % (uint64_t)streams);
					ck_assert_int_eq(prepare(f, g, sj), 0);
					unlaunched[g]++;
				}
				if (tu_rng_next(&rng) % 2) { /* then toggle_graph_launch */
					ck_assert_int_eq(via_launch(f, g, si), 0);
					break;
				}
				/* then prepare + own launch */
				/* fall through */
			default:
				ck_assert_int_eq(via_prepare(f, g, si), 0);
				prepared[g]++;
				break;
			}
			ck_assert_uint_eq(f->expect[g][f->launched[g] - 1], set_bits(&gate));
			last_step[g] = s;
		}
		if (s % 97 == 96)
			pfx_check(f);
	}
	uint64_t checked = pfx_check(f), total = 0;
	ck_assert_uint_gt(checked, (uint64_t)steps);
	for (int g = 0; g < G; g++) {
		ck_assert_uint_gt(prepared[g], 0);
		ck_assert_uint_gt(unlaunched[g], 0);
		/* Every prepare is accounted as a launch, launched or not. */
		struct toggle_graph_status gs = gstatus(f, g);
		ck_assert_uint_eq(gs.replays, f->launched[g] + unlaunched[g]);
		ck_assert_int_eq(gs.last_step, last_step[g]);
		total += gs.replays;
		if (device) {
			struct toggle_device_counters dc;
			ck_assert_int_eq(toggle_graph_device_counters(f->agent, f->graph[g], &dc), 0);
			/* Every launch of the device exec ran its planner; all-off and
			 * all-on launches may have run the bare or the full exec, which
			 * have none (issue 31). */
			ck_assert_uint_eq(dc.planner_runs,
					  f->launched[g] - gs.bare_replays - gs.full_replays);
			ck_assert_uint_eq(dc.device_failures, 0);
		}
	}
	struct toggle_stats st = stats(f);
	ck_assert_uint_eq(st.launches, total);
	ck_assert_uint_eq(st.launches_refused, 0);
	if (device) {
		ck_assert_uint_eq(st.node_set_calls, 0);
		if (streams > 1)
			ck_assert_uint_gt(st.stream_joins, 0);
	} else {
		ck_assert_uint_gt(st.node_set_calls, 0);
	}
	pfx_close(f);
}

START_TEST(prepare_runs_the_set)
{
	/* _i: lazy, eager, device on one stream */
	random_steps(modes[_i], 0x9e9a + (uint64_t)_i, 1, 500);
}
END_TEST

START_TEST(prepare_runs_the_set_streams)
{
	/* _i: lazy, eager, device on NS streams */
	random_steps(modes[_i], 0x57e4 + (uint64_t)_i, NS, 500);
}
END_TEST

/* ---- 2. a prepare without its launch ----------------------------------------------- */

/*
 * Set A prepared on stream 0 and never launched; then set B (a new step)
 * prepared on stream 1 and launched there: B runs.  Then a prepare of B
 * left alone, and one more prepare of B plus its launch: B, with no work
 * for the repeat (host: no node set; device: no mask write).  _i: mode.
 */
START_TEST(prepare_without_launch_then_prepare)
{
	struct pfx *f = pfx_open(modes[_i], true);
	bool device = f->mode == TOGGLE_MODE_DEVICE;
	pfx_graphs(f);
	if (device)
		toggle_sim_set_deferred(f->sim, true, 3);
	const uint32_t A = 0x00f0f0u, B = 0x0f0f0fu;
	step(f, 0, A);
	ck_assert_int_eq(via_launch(f, 0, 0), 0); /* first run: A, everything set */
	step(f, 1, B);
	ck_assert_int_eq(prepare(f, 0, 0), 0); /* not launched */
	step(f, 2, A);
	ck_assert_int_eq(prepare(f, 0, 2), 0); /* not launched either */
	step(f, 3, B);
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	ck_assert_uint_eq(pfx_check(f), 2);
	ck_assert_uint_eq(f->expect[0][1], B);

	struct toggle_stats st0 = stats(f);
	ck_assert_int_eq(prepare(f, 0, 1), 0); /* not launched */
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	struct toggle_stats st1 = stats(f);
	ck_assert_uint_eq(st1.node_set_calls, st0.node_set_calls);
	ck_assert_uint_eq(st1.mask_writes, st0.mask_writes);
	if (!device) /* device: one sync after a prepare that wrote (the stream check) */
		ck_assert_uint_eq(st1.syncs, st0.syncs);
	ck_assert_uint_eq(pfx_check(f), 3);
	ck_assert_uint_eq(f->expect[0][2], B);
	/* Accounted as launches: 1 + 3 prepares not launched + 2 launched. */
	ck_assert_uint_eq(gstatus(f, 0).replays, 6);
	/* The status says the exec holds the current set (device mode keeps
	 * launches off the fast path meanwhile: not a set it lacks). */
	ck_assert_uint_eq(gstatus(f, 0).applied_version, stats(f).version);
	ck_assert_int_eq(gstatus(f, 0).last_step, 3);
	pfx_close(f);
}
END_TEST

/*
 * Device mode: a new set prepared on stream 0 and not launched; then, with
 * the set unchanged (nothing left to write), a launch on stream 1, through
 * toggle_graph_launch or prepare + own launch.  That launch must wait for
 * stream 0's words: with the host ahead of the device, nothing else orders
 * it after them.  Also through a chain of two unlaunched prepares on two
 * streams, and two on one stream (also with a set change and back between
 * them).  _i: 0 launch, 1 prepare.
 */
START_TEST(device_unlaunched_prepare_other_stream)
{
	struct pfx *f = pfx_open(TOGGLE_MODE_DEVICE, true);
	pfx_graphs(f);
	uint32_t sets[2] = {0x000fffu, 0xfff000u};
	for (uint64_t seed = 1; seed <= 32; seed++) {
		toggle_sim_set_deferred(f->sim, true, seed);
		int64_t s0 = (int64_t)seed * 10;
		step(f, s0, sets[0]);
		ck_assert_int_eq(via_launch(f, 0, 2), 0);
		step(f, s0 + 1, sets[1]);
		ck_assert_int_eq(prepare(f, 0, 0), 0); /* its words, no launch */
		uint64_t joins = stats(f).stream_joins;
		ck_assert_int_eq(_i ? via_prepare(f, 0, 1) : via_launch(f, 0, 1), 0);
		uint64_t j1 = stats(f).stream_joins;
		ck_assert_int_eq(via_prepare(f, 0, 1), 0); /* the same stream: fast again */
		uint64_t j2 = stats(f).stream_joins;
		pfx_check(f); /* first: what ran is the point */
		ck_assert_uint_eq(j1, joins + 1);
		ck_assert_uint_eq(j2, joins + 1);
		/* A chain: words on stream 0, a prepare on stream 1 with nothing to
		 * write (it only waits for stream 0), neither launched; the launch
		 * on stream 2 must still come after stream 0's words. */
		step(f, s0 + 2, sets[0]);
		ck_assert_int_eq(prepare(f, 0, 0), 0);
		ck_assert_int_eq(prepare(f, 0, 1), 0);
		ck_assert_int_eq(_i ? via_prepare(f, 0, 2) : via_launch(f, 0, 2), 0);
		pfx_check(f);
		/* Twice on one stream, neither launched (the second has nothing to
		 * write or wait for), then a launch on another stream. */
		step(f, s0 + 3, sets[1]);
		ck_assert_int_eq(prepare(f, 0, 1), 0);
		ck_assert_int_eq(prepare(f, 0, 1), 0);
		ck_assert_int_eq(_i ? via_prepare(f, 0, 0) : via_launch(f, 0, 0), 0);
		pfx_check(f);
		/* The second on the same stream after a set change and back: a new
		 * version, but nothing to write; then a launch on another stream. */
		step(f, s0 + 4, sets[0]);
		ck_assert_int_eq(prepare(f, 0, 2), 0);
		step(f, s0 + 5, 0x0f0f0fu);
		step(f, s0 + 6, sets[0]);
		ck_assert_int_eq(prepare(f, 0, 2), 0);
		ck_assert_int_eq(via_launch(f, 0, 1), 0);
		pfx_check(f);
	}
	pfx_close(f);
}
END_TEST

/*
 * The producer-free exec (issue 14): toggle_graph_launch runs it at a step
 * whose set leaves the graph nothing, but a prepare's caller launches the
 * main exec, which must then hold that set too.  _i: lazy, eager (device
 * mode builds none).
 */
START_TEST(prepare_never_picks_the_bare_exec)
{
	struct pfx *f = pfx_open(modes[_i], true);
	pfx_graphs(f);
	ck_assert(gstatus(f, 0).bare_exec);
	const uint32_t A = 0x0000ffu, B = 0x00ff00u;
	step(f, 0, A);
	ck_assert_int_eq(via_launch(f, 0, 0), 0);
	step(f, 1, 0);
	ck_assert_int_eq(via_launch(f, 0, 0), 0); /* the bare exec */
	ck_assert(gstatus(f, 0).bare_running);
	uint64_t switches = stats(f).bare_switches;
	ck_assert_int_eq(via_prepare(f, 0, 0), 0); /* the main exec, brought to the empty set */
	ck_assert_uint_eq(pfx_check(f), 3); /* first: what ran is the point */
	ck_assert_uint_eq(f->expect[0][2], 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(!gs.bare_running);
	ck_assert_uint_eq(gs.bare_replays, 1);
	ck_assert_uint_eq(gs.replays, 3);
	ck_assert_uint_eq(stats(f).bare_switches, switches + 1);
	ck_assert_int_eq(via_launch(f, 0, 1), 0); /* launch follows: the main exec, same set */
	ck_assert_int_eq(via_prepare(f, 0, 1), 0);
	ck_assert_uint_eq(pfx_check(f), 5);
	for (int k = 1; k < 5; k++)
		ck_assert_uint_eq(f->expect[0][k], 0);
	/* Later steps: prepare keeps to the main exec, launch picks again. */
	step(f, 2, B);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	step(f, 3, 0);
	ck_assert_int_eq(via_launch(f, 0, 0), 0);
	ck_assert(gstatus(f, 0).bare_running);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert(!gstatus(f, 0).bare_running);
	step(f, 4, 0);
	ck_assert_int_eq(via_prepare(f, 0, 0), 0);
	ck_assert(!gstatus(f, 0).bare_running);
	ck_assert_uint_eq(pfx_check(f), 9);
	ck_assert_uint_eq(f->expect[0][5], B);
	ck_assert_uint_eq(gstatus(f, 0).bare_replays, 2);
	pfx_close(f);
}
END_TEST

static Suite *prepare_runs_suite(void)
{
	Suite *s = suite_create("prepare_runs");
	TCase *tc = tcase_create("prepare");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, prepare_runs_the_set, 0, 3);
	tcase_add_loop_test(tc, prepare_runs_the_set_streams, 0, 3);
	tcase_add_loop_test(tc, prepare_without_launch_then_prepare, 0, 3);
	tcase_add_loop_test(tc, device_unlaunched_prepare_other_stream, 0, 2);
	tcase_add_loop_test(tc, prepare_never_picks_the_bare_exec, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(prepare_runs_suite());
}
