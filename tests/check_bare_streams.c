/*
 * check_bare_streams.c - a graph's launches stay in launch order across
 * streams when libtoggle switches between its exec and the producer-free
 * one (host modes; device mode's case is check_device_bare.c's
 * alternating_exact).  The driver serialises the launches of one exec,
 * whatever their streams, and an application may rely on it (its graph
 * replayed on alternating streams); the bare exec is another exec, so the
 * first launch after a switch, on another stream, must wait for the last
 * one (an event), as the one exec's launches did.  The simulator's deferred
 * mode runs queued work of different streams in a seeded random order and
 * one exec's launches in order; its kernel log must be every launch's
 * kernels, in launch order.  Before: host modes did not order the switch
 * (launches of the two execs overtook each other).
 */
#include "fixture_bare.h"

#define NSTREAMS 3

/* _i / 3: lazy, eager; _i % 3: the deferred order's seed. */
START_TEST(test_switch_across_streams_in_order)
{
	static const char *const sets[] = {"none", "resid_post:3", "none", "all", "none",
					   "none", "mlp_out:0,resid_post:7", "none", "all"};
	enum { NSETS = sizeof(sets) / sizeof(sets[0]), ROUNDS = 4 };
	struct bfx *f = bfx_open(_i / 3 ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	bfx_capture_bound(f);
	CUstream s[NSTREAMS];
	s[0] = f->stream;
	for (int i = 1; i < NSTREAMS; i++)
		ck_assert_int_eq(toggle_sim_stream_create(f->sim, &s[i]), CUDA_SUCCESS);
	toggle_sim_set_deferred(f->sim, true, 0xb5a0000u + (uint64_t)(_i % 3));
	int want[MAX_LOG];
	int nwant = 0;
	unsigned n = 0;
	f->nlog = 0;
	for (unsigned r = 0; r < ROUNDS; r++) {
		for (unsigned k = 0; k < NSETS; k++) {
			struct toggle_set set = spec(sets[k]);
			ck_assert_int_eq(toggle_set_enabled(f->agent, &set), 0);
			ck_assert_int_eq(toggle_step_begin(f->agent, (int64_t)(r * NSETS + k), NULL), 0);
			ck_assert_int_lt(nwant + f->nk, MAX_LOG);
			nwant += expected(f, &set, want + nwant);
			ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, f->exec,
							     s[(n + r) % NSTREAMS]), 0);
			n++;
		}
	}
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(f->nlog, nwant);
	for (int i = 0; i < nwant; i++)
		ck_assert_msg(f->log[i] == want[i], "kernel %d of %d: ran %d, expected %d (launches "
			      "out of order)", i, nwant, f->log[i], want[i]);
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	ck_assert_uint_gt(st.bare_switches, 0);
	bfx_close(f);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("bare_streams");
	TCase *tc = tcase_create("streams");
	tcase_add_loop_test(tc, test_switch_across_streams_in_order, 0, 6);
	suite_add_tcase(su, tc);
	return tu_run_suite(su);
}
