/*
 * check_lifetime_settle.c - an exec's destructor that the driver runs after
 * cudaGraphExecDestroy returned (issue #28).  On the H200 (driver 580,
 * examples/probe_userobj.cu) a graph's reference goes inside cuGraphDestroy
 * but an exec's only after cuGraphExecDestroy returned (0 of 400 inside it),
 * and gpu_lifetime's stranger leg saw a stranger's exec get the dead exec's
 * handle in that window: the record (graph gone, exec "alive") took it for
 * its own exec at another set and refused it.  The simulator's EXEC_LATE
 * mode does what that driver does: a test thread places the exec's
 * destructor while the launch is being decided.  Now the agent waits (at
 * most TOGGLE_LIFE_SETTLE_US) for that destructor on this one path, which
 * refused before, and the stranger runs untouched; our own exec at another
 * set is still refused once the wait ends with no death.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "fixture_lifetime.h"

/* The driver thread, late: runs the held destructors after a delay. */
struct late {
	struct toggle_sim *sim;
	long delay_us;
};

static void *late_main(void *arg)
{
	struct late *l = arg;
	struct timespec ts = {l->delay_us / 1000000, (l->delay_us % 1000000) * 1000};
	nanosleep(&ts, NULL);
	toggle_sim_run_destructors(l->sim);
	return NULL;
}

/* The lifetime fixture with driver 580's late exec destructors and a settle bound. */
static void settle_open(struct lfx *f, const char *settle_us)
{
	setenv("TOGGLE_LIFE_SETTLE_US", settle_us, 1);
	lfx_sim(f, 13000);
	toggle_sim_set_destructors(f->sim, TOGGLE_SIM_DESTRUCTORS_EXEC_LATE);
	f->agent = lfx_agent(f, TOGGLE_MODE_LAZY);
}

static void settle_close(struct lfx *f)
{
	lfx_close(f);
	unsetenv("TOGGLE_LIFE_SETTLE_US");
}

/* Our graph, instantiated by the agent, launched at 0x0f (step 0), drained. */
static CUgraph ours_launched(struct lfx *f, CUgraphExec *e)
{
	CUgraph g = capture_ours(f, NULL);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, g, e), 0);
	step(f, 0, 0x0f);
	ck_assert_int_eq(launch(f, g, *e), 0);
	ck_assert_uint_eq(f->ran, 0x0f);
	toggle_sim_synchronize(f->sim);
	return g;
}

/* The driver thread places the held destructors 2 ms after this call. */
static void late_start(struct late *l, pthread_t *t, struct lfx *f)
{
	*l = (struct late){f->sim, 2000};
	ck_assert_int_eq(pthread_create(t, NULL, late_main, l), 0);
}

/*
 * _i / 2: the graph destroyed first (0) or the exec first (1), as the H200
 * leg's rounds; _i % 2: the stranger's exec from toggle_graph_instantiate
 * (1) or the driver (0).  Before: rc -8 (the record's exec), 0 of 32 ran.
 */
START_TEST(test_stranger_behind_dead_exec_handle)
{
	bool exec_first = _i / 2, via_agent = _i % 2;
	struct lfx f;
	settle_open(&f, "1000000"); /* the test's thread is never that late */
	CUgraphExec e;
	CUgraph g = ours_launched(&f, &e);
	if (exec_first) {
		ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	} else {
		ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	}
	CUgraph s = capture_stranger(&f, NS);
	CUgraphExec se;
	if (via_agent)
		ck_assert_int_eq(toggle_graph_instantiate(f.agent, s, &se), 0);
	else
		ck_assert_int_eq(toggle_sim_graph_instantiate(&se, s), CUDA_SUCCESS);
	ck_assert_ptr_eq(s, g);  /* the dead graph's handle */
	ck_assert_ptr_eq(se, e); /* and the dead exec's, its destructor not run yet */
	step(&f, 1, 0x30);       /* a set the dead exec does not hold */

	struct late l;
	pthread_t t;
	late_start(&l, &t, &f);
	int rc = launch(&f, s, se);
	pthread_join(t, NULL);
	ck_assert_msg(rc == 0, "the stranger's launch: rc %d: %s", rc, toggle_last_error(f.agent));
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(f.ran, 0);
	/* And at the next steps, whatever the set. */
	step(&f, 2, 0xff);
	ck_assert_int_eq(launch(&f, s, se), 0);
	ck_assert_uint_eq(f.others, NS);
	ck_assert_uint_eq(f.ran, 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(se), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(s), CUDA_SUCCESS);
	settle_close(&f);
}
END_TEST

/*
 * Our own exec, its graph destroyed, at another set: the wait ends without a
 * death (the exec lives) and the launch is refused as before, nothing run;
 * at the set it holds it runs without waiting for anything.
 */
START_TEST(test_own_exec_still_refused)
{
	struct lfx f;
	settle_open(&f, "1000");
	CUgraphExec e;
	CUgraph g = ours_launched(&f, &e);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	step(&f, 1, 0xf0);
	ck_assert_int_eq(launch(&f, g, e), TOGGLE_ESTALE);
	ck_assert_uint_eq(f.ran, 0);
	ck_assert_uint_eq(f.others, 0);
	step(&f, 2, 0x0f);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	settle_close(&f);
}
END_TEST

/*
 * Our graph captured again behind its dead handle, before the driver ran the
 * destructor of its old exec, and the new exec gets the old exec's handle
 * (the H200's stranger leg, at the start of a round): the old exec is the
 * record's foreign one, still taken for alive.  _i 0: toggle_graph_instantiate
 * (it made the exec: nothing to wait for); 1: the driver's instantiate, then
 * toggle_graph_bind (the late destructor is waited for).  Before: ESTALE "exec
 * ... was instantiated from the graph that had handle ... before it was
 * destroyed", nothing bound.
 */
START_TEST(test_recapture_gets_dead_exec_handle)
{
	bool via_bind = _i;
	struct lfx f;
	settle_open(&f, "1000000");
	CUgraphExec e;
	CUgraph g = ours_launched(&f, &e);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);

	CUgraph g2 = capture_ours(&f, NULL);
	ck_assert_ptr_eq(g2, g);
	CUgraphExec e2;
	int rc;
	if (via_bind) {
		ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, g2), CUDA_SUCCESS);
		ck_assert_ptr_eq(e2, e);
		struct late l;
		pthread_t t;
		late_start(&l, &t, &f);
		rc = toggle_graph_bind(f.agent, g2, e2);
		pthread_join(t, NULL);
	} else {
		rc = toggle_graph_instantiate(f.agent, g2, &e2);
		ck_assert_ptr_eq(e2, e);
	}
	ck_assert_msg(rc == 0, "binding the new exec: rc %d: %s", rc, toggle_last_error(f.agent));
	step(&f, 1, 0x30);
	ck_assert_int_eq(launch(&f, g2, e2), 0);
	ck_assert_uint_eq(f.ran, 0x30);
	toggle_sim_run_destructors(f.sim);
	step(&f, 2, 0x81);
	ck_assert_int_eq(launch(&f, g2, e2), 0);
	ck_assert_uint_eq(f.ran, 0x81);
	ck_assert_int_eq(toggle_sim_exec_destroy(e2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g2), CUDA_SUCCESS);
	settle_close(&f);
}
END_TEST

/*
 * The bound exec destroyed (against the rule) and the graph instantiated
 * again by the agent before the driver ran the old exec's destructor: the
 * new exec gets the old one's handle and every producer enabled (the
 * graph's state).  It is new (toggle_graph_instantiate made it), so its
 * node states are set again: the launch runs exactly the step's set.
 */
START_TEST(test_reinstantiated_behind_live_looking_handle)
{
	struct lfx f;
	settle_open(&f, "1000000");
	CUgraphExec e;
	CUgraph g = ours_launched(&f, &e); /* 0x0f: 0xf0 disabled in e */
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	CUgraphExec e2;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e2), 0);
	ck_assert_ptr_eq(e2, e); /* the dead exec's handle, its destructor not run yet */
	ck_assert_int_eq(launch(&f, g, e2), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	step(&f, 1, 0x0f);
	ck_assert_int_eq(launch(&f, g, e2), 0);
	ck_assert_uint_eq(f.ran, 0x0f);
	toggle_sim_run_destructors(f.sim);
	step(&f, 2, 0x3c);
	ck_assert_int_eq(launch(&f, g, e2), 0);
	ck_assert_uint_eq(f.ran, 0x3c);
	ck_assert_int_eq(toggle_sim_exec_destroy(e2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	settle_close(&f);
}
END_TEST

/* A bound out of range or not a number leaves the default: never unbounded. */
START_TEST(test_settle_bound_checked)
{
	static const char *bad[] = {"abc", "-1", "99999999999", "5000x"};
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct lfx f;
		setenv("TOGGLE_LIFE_SETTLE_US", bad[i], 1);
		lfx_open(&f, TOGGLE_MODE_LAZY, 13000);
		ck_assert_msg(f.agent->settle_us == 5000, "%s: %u", bad[i], f.agent->settle_us);
		lfx_close(&f);
	}
	unsetenv("TOGGLE_LIFE_SETTLE_US");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lifetime_settle");
	TCase *tc = tcase_create("settle");
	tcase_add_loop_test(tc, test_stranger_behind_dead_exec_handle, 0, 4);
	tcase_add_test(tc, test_own_exec_still_refused);
	tcase_add_loop_test(tc, test_recapture_gets_dead_exec_handle, 0, 2);
	tcase_add_test(tc, test_reinstantiated_behind_live_looking_handle);
	tcase_add_test(tc, test_settle_bound_checked);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
