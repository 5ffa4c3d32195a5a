/*
 * check_lifetime_sim.c - libtoggle knows when a graph dies (issue #28), on the
 * simulator with its handle reuse on (a destroyed graph's handle and node
 * handles go to the next graph, as on the H200): the simulator's user
 * objects: the driver's reference rules (graph, clone, exec, exec with
 * queued launches), destructors on the simulator's thread, held until run,
 * node handle reuse.
 * The simulator, the agent, its kernels and their log are the lifetime
 * suites' fixture (tests/fixture_lifetime.h).  Split out of check_lifetime.c
 * (issue 29).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "fixture_lifetime.h"

/* ---- 2. the simulator's user objects --------------------------------------------- */

struct dtor_probe {
	atomic_int calls;
	atomic_bool other_thread; /* not the thread that created it */
	pthread_t creator;
};

static void CUDA_CB probe_dtor(void *arg)
{
	struct dtor_probe *p = arg;
	atomic_store(&p->other_thread, !pthread_equal(pthread_self(), p->creator));
	atomic_fetch_add(&p->calls, 1);
}

static CUuserObject probe_new(struct lfx *f, struct dtor_probe *p)
{
	atomic_init(&p->calls, 0);
	atomic_init(&p->other_thread, false);
	p->creator = pthread_self();
	CUuserObject o;
	ck_assert_int_eq(toggle_sim_user_object_create(f->sim, &o, p, probe_dtor, 1,
						       CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
			 CUDA_SUCCESS);
	return o;
}

/*
 * The driver's reference rules: a graph's references (moved or new), a
 * clone's copies, an exec's copies taken at instantiation, held until the
 * exec is destroyed; the destructor once, on another thread, when the last
 * one goes.  What the driver does not check, the simulator refuses.
 */
START_TEST(test_sim_user_object_rules)
{
	struct lfx f;
	lfx_sim(&f, 0);
	struct dtor_probe p;
	CUuserObject o = probe_new(&f, &p);
	CUgraph g = capture_stranger(&f, 2), h = capture_stranger(&f, 1);
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 1);
	/* Flags and counts. */
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(g, o, 0, 0), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(g, o, 1, 7), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(g, o, 2, CU_GRAPH_USER_OBJECT_MOVE),
			 CUDA_ERROR_INVALID_VALUE); /* the caller owns one */
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE),
			 CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_user_object_release(o, 1), CUDA_ERROR_INVALID_VALUE); /* moved */
	/* Releasing what a graph does not own: refused (driver 580 corrupts the count). */
	ck_assert_int_eq(toggle_sim_graph_release_user_object(h, o, 1), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_release_user_object(g, o, 2), CUDA_ERROR_INVALID_VALUE);
	/* An exec and a clone take copies; the graph's destruction leaves them. */
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	CUgraph c;
	ck_assert_int_eq(toggle_sim_graph_clone(&c, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(atomic_load(&p.calls), 0);
	/* The clone gives its copy back: the last reference, the destructor runs. */
	ck_assert_int_eq(toggle_sim_graph_release_user_object(c, o, 1), CUDA_SUCCESS);
	ck_assert_int_eq(atomic_load(&p.calls), 1); /* waited for (default) */
	ck_assert(atomic_load(&p.other_thread));
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 0);
	ck_assert_int_eq(toggle_sim_graph_destroy(c), CUDA_SUCCESS);

	/* New references (flags 0) besides the caller's; an exec made before a
	 * retain holds none of it (the rotation libtoggle relies on). */
	struct dtor_probe q;
	CUuserObject o2 = probe_new(&f, &q);
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(h, o2, 2, 0), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, h), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_user_object_release(o2, 1), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_release_user_object(h, o2, 2), CUDA_SUCCESS);
	ck_assert_int_eq(atomic_load(&q.calls), 0); /* the exec's copies */
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(atomic_load(&q.calls), 1);
	struct dtor_probe r;
	CUuserObject o3 = probe_new(&f, &r);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, h), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(h, o3, 1, CU_GRAPH_USER_OBJECT_MOVE),
			 CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(h), CUDA_SUCCESS);
	ck_assert_int_eq(atomic_load(&r.calls), 1); /* the exec made before holds none */
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	/* One left with the simulator: destroyed with it, its destructor run. */
	struct dtor_probe z;
	(void)probe_new(&f, &z);
	toggle_sim_destroy(f.sim);
	ck_assert_int_eq(atomic_load(&z.calls), 1);
}
END_TEST

/* When destructors run: waited for (default), not waited for, held until run. */
START_TEST(test_sim_destructor_modes)
{
	struct lfx f;
	lfx_sim(&f, 0);
	struct dtor_probe p;
	toggle_sim_set_destructors(f.sim, TOGGLE_SIM_DESTRUCTORS_HELD);
	CUuserObject o = probe_new(&f, &p);
	ck_assert_int_eq(toggle_sim_user_object_release(o, 1), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_user_object_count(f.sim), 0); /* dead, destructor pending */
	ck_assert_int_eq(atomic_load(&p.calls), 0);
	toggle_sim_run_destructors(f.sim);
	ck_assert_int_eq(atomic_load(&p.calls), 1);
	ck_assert(atomic_load(&p.other_thread));
	toggle_sim_set_destructors(f.sim, TOGGLE_SIM_DESTRUCTORS_ASYNC);
	for (int i = 0; i < 50; i++) {
		o = probe_new(&f, &p);
		CUgraph g = capture_stranger(&f, 1);
		ck_assert_int_eq(toggle_sim_graph_retain_user_object(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE),
				 CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
		toggle_sim_run_destructors(f.sim); /* waits for the thread */
		ck_assert_int_eq(atomic_load(&p.calls), 1);
	}
	/* Held at the simulator's end: run then. */
	toggle_sim_set_destructors(f.sim, TOGGLE_SIM_DESTRUCTORS_HELD);
	o = probe_new(&f, &p);
	CUgraph g = capture_stranger(&f, 1);
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE),
			 CUDA_SUCCESS);
	toggle_sim_destroy(f.sim);
	ck_assert_int_eq(atomic_load(&p.calls), 1);
}
END_TEST

static void k_probe_check(void *arg)
{
	struct dtor_probe *p = arg;
	ck_assert_int_eq(atomic_load(&p->calls), 0); /* the launch runs before the destructor */
}

/* Deferred mode: an exec destroyed with launches queued keeps its references until they ran. */
START_TEST(test_sim_exec_queued_launches)
{
	struct lfx f;
	lfx_sim(&f, 0);
	struct dtor_probe p;
	CUuserObject o = probe_new(&f, &p);
	CUgraph g;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.s, k_probe_check, &p), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s, &g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_retain_user_object(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE),
			 CUDA_SUCCESS);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	toggle_sim_set_deferred(f.sim, true, 1);
	ck_assert_int_eq(toggle_sim_graph_launch(e, f.s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_launch(e, f.s), CUDA_SUCCESS);
	ck_assert_int_eq(atomic_load(&p.calls), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(atomic_load(&p.calls), 1);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* Handle reuse gives a dead graph's node handles to the next graph, never while an exec holds them. */
START_TEST(test_sim_node_reuse)
{
	struct lfx f;
	lfx_sim(&f, 0);
	CUgraph g = capture_stranger(&f, 4);
	CUgraphNode v[4], w[8];
	size_t n = 4;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(g, v, &n), CUDA_SUCCESS);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	CUgraph h = capture_stranger(&f, 8); /* the exec still runs g's nodes */
	ck_assert_ptr_eq(h, g);
	n = 8;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(h, w, &n), CUDA_SUCCESS);
	for (int i = 0; i < 8; i++)
		for (int k = 0; k < 4; k++)
			ck_assert_ptr_ne(w[i], v[k]);
	/* The dead nodes are refused, the exec still runs them. */
	ck_assert_int_eq(toggle_sim_graph_node_set_enabled(e, v[0], 0), CUDA_ERROR_INVALID_VALUE);
	log_reset(&f);
	ck_assert_int_eq(toggle_sim_graph_launch(e, f.s), CUDA_SUCCESS);
	ck_assert_uint_eq(f.others, 4);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(h), CUDA_SUCCESS);
	/* Now h's nodes are free: the next graph's first 8 nodes are they, in order. */
	CUgraph k2 = capture_stranger(&f, 10);
	CUgraphNode x[10];
	n = 10;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(k2, x, &n), CUDA_SUCCESS);
	for (int i = 0; i < 8; i++)
		ck_assert_ptr_eq(x[i], w[i]);
	ck_assert_int_eq(toggle_sim_graph_destroy(k2), CUDA_SUCCESS);
	toggle_sim_destroy(f.sim);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lifetime_sim");
	TCase *tc = tcase_create("lifetime");
	tcase_add_test(tc, test_sim_user_object_rules);
	tcase_add_test(tc, test_sim_destructor_modes);
	tcase_add_test(tc, test_sim_exec_queued_launches);
	tcase_add_test(tc, test_sim_node_reuse);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
