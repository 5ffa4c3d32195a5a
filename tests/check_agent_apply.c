/*
 * check_agent_apply.c - libtoggle's agent on the simulator: lazy and eager
 * apply (only changed nodes set, every node of a hook), plans, a standing
 * change waiting for the step, agents sharing nothing, and a property test
 * that every replay runs exactly the set toggle_step_begin() reported.
 * The simulator, the agent, its producers and the capture and launch
 * helpers are the agent suites' fixture (tests/fixture_agent.h).  Split out
 * of check_agent.c (issue 29); the tests keep their numbers from it.
 */
#include "fixture_agent.h"

/* 5. Only nodes whose state differs are set. */
START_TEST(test_only_changed_nodes_set)
{
	struct fx f;
	fx_open(&f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	struct toggle_set s = spec("resid_post:*,attn_out:2-5"), ran;
	ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &s);

	uint64_t c0 = set_calls(&f);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, NULL), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_uint_eq(set_calls(&f), c0); /* unchanged: zero driver calls */
	assert_set_eq(&ran, &s);

	static const unsigned ks[] = {1, 3, 7, 24};
	int64_t step = 2;
	for (size_t n = 0; n < sizeof(ks) / sizeof(ks[0]); n++) {
		for (unsigned k = 0; k < ks[n]; k++) { /* flip k distinct hooks */
			struct toggle_hook h = {(uint16_t)(k % NT), (uint16_t)(k / NT)};
			if (toggle_set_contains(&s, h))
				toggle_set_remove(&s, h);
			else
				toggle_set_add(&s, h);
		}
		ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
		uint64_t before = set_calls(&f);
		ck_assert_int_eq(toggle_step_begin(f.agent, step++, NULL), 0);
		ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
		ck_assert_uint_eq(set_calls(&f) - before, ks[n]);
		assert_set_eq(&ran, &s);
	}
	fx_close(&f);
}
END_TEST


/* Several nodes per hook: a change of k hooks sets exactly their 2k nodes,
 * through the hook index, and a failure half way is retried in full. */
START_TEST(test_changes_reach_every_node_of_a_hook)
{
	struct fx f;
	fx_open_main(&f, TOGGLE_MODE_LAZY);
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	for (int copy = 0; copy < 2; copy++) /* two passes: each hook gets two nodes */
		for (uint16_t t = 0; t < NT; t++)
			for (uint16_t l = 0; l < NL; l++) {
				struct producer *p = &f.prod[copy][t * NL + l];
				*p = (struct producer){.fx = &f, .hook = {t, l}};
				ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, producer_fn, p), 0);
				ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, p->hook), 0);
			}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &f.graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec[0], f.graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[0], f.exec[0]), 0);
	struct toggle_set s = spec("none"), ran;
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0); /* first sync: every node */
	static const char *const steps[] = {"mlp_out:7", "mlp_out:7,resid_post:0", "attn_out:3-4",
					    "none", "*:5", "resid_post:0"};
	for (int i = 0; i < 6; i++) {
		struct toggle_set next = spec(steps[i]);
		struct toggle_set gone = s, came = next; /* the hooks that change */
		toggle_set_subtract(&gone, &next);
		toggle_set_subtract(&came, &s);
		size_t k = toggle_set_count(&gone) + toggle_set_count(&came);
		ck_assert_int_eq(toggle_set_enabled(f.agent, &next), 0);
		ck_assert_int_eq(toggle_step_begin(f.agent, i + 1, NULL), 0);
		uint64_t c = set_calls(&f);
		if (i == 3) {
			/* The second call of this change fails: the launch is refused;
			 * the retry sets the failed node and the rest, 2k + 1 in all. */
			toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 1, 1,
					CUDA_ERROR_INVALID_VALUE);
			ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_ECUDA);
			ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
			ck_assert_uint_eq(set_calls(&f) - c, 2 * k + 1);
		} else {
			ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
			ck_assert_uint_eq(set_calls(&f) - c, 2 * k);
		}
		assert_set_eq(&ran, &next);
		s = next;
	}
	fx_close(&f);
}
END_TEST

/* 6. A plan for a step that has begun is rejected whole. */
START_TEST(test_late_plan_rejected)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	struct toggle_set standing = spec("attn_out:*"), p = spec("mlp_out:0-1"), eff;
	ck_assert_int_eq(toggle_set_enabled(f.agent, &standing), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 5, NULL), 0);
	ck_assert_int_eq(toggle_plan_step(f.agent, 5, &p), TOGGLE_ELATE);
	ck_assert_int_eq(toggle_plan_step(f.agent, 3, &p), TOGGLE_ELATE);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "step 3"));
	struct toggle_plan_entry mixed[2] = {{.step = 6, .set = p}, {.step = 4, .set = p}};
	ck_assert_int_eq(toggle_plan_submit(f.agent, mixed, 2), TOGGLE_ELATE);
	struct toggle_anomalies an;
	toggle_anomalies_get(f.agent, &an);
	ck_assert_uint_eq(an.late_plans, 3);
	/* Nothing of the rejected plan applied: this step and step 6 keep the standing set. */
	struct toggle_set ran;
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &standing);
	ck_assert_int_eq(toggle_step_begin(f.agent, 6, &eff), 0);
	assert_set_eq(&eff, &standing);
	/* A timely plan is used for exactly its step. */
	ck_assert_int_eq(toggle_plan_step(f.agent, 8, &p), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 7, &eff), 0);
	assert_set_eq(&eff, &standing);
	ck_assert_int_eq(toggle_step_begin(f.agent, 8, &eff), 0);
	assert_set_eq(&eff, &p);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &p);
	ck_assert_int_eq(toggle_step_begin(f.agent, 9, &eff), 0);
	assert_set_eq(&eff, &standing);
	ck_assert_int_eq(toggle_step_begin(f.agent, 9, &eff), TOGGLE_ESTEP);
	fx_close(&f);
}
END_TEST

/* Standing-set changes wait for the next step: a step's replays all agree. */
START_TEST(test_standing_change_waits_for_step)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	struct toggle_set a = spec("resid_post:0"), b = spec("mlp_out:*"), ran, eff;
	ck_assert_int_eq(toggle_set_enabled(f.agent, &a), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, &eff), 0);
	ck_assert_int_eq(toggle_set_enabled(f.agent, &b), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &a);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, &eff), 0);
	assert_set_eq(&eff, &b);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &b);
	fx_close(&f);
}
END_TEST

/* 7. No process-wide state: agents never share graphs or capture windows. */
START_TEST(test_agents_share_nothing)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	ck_assert_int_eq(toggle_graph_count(f.agent), 1);
	toggle_agent_close(f.agent);

	struct toggle_config cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	struct toggle_agent *b;
	ck_assert_int_eq(toggle_agent_open(&cfg, &b), 0);
	ck_assert_int_eq(toggle_graph_count(b), 0);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(b, f.graph[0], &gs), TOGGLE_ENOENT);
	ck_assert_int_eq(toggle_graph_bind(b, f.graph[0], f.exec[0]), TOGGLE_ENOENT);

	/* A capture window of one agent is not open for another. */
	struct toggle_agent *c;
	ck_assert_int_eq(toggle_agent_open(&cfg, &c), 0);
	ck_assert_int_eq(toggle_capture_begin(c), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	struct toggle_hook h = {0, 0};
	ck_assert_int_eq(toggle_record_producer(b, f.stream, h), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_record_producer(c, f.stream, h), 0);
	CUgraph g2;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &g2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(c), 0);
	ck_assert_int_eq(toggle_capture_end(c), TOGGLE_EINVAL);
	/* b refused a producer launched into g2's capture: it keeps g2 only to
	 * fail it closed (issue #10); c's record is c's alone. */
	ck_assert_int_eq(toggle_graph_count(b), 1);
	ck_assert_int_eq(toggle_graph_count(c), 1);

	/* A graph the agent forgot fails closed, and cannot be bound again. */
	CUgraphExec e2;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, g2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(c, g2, e2), 0);
	ck_assert_int_eq(toggle_graph_launch(b, g2, e2, f.stream), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_graph_forget(c, g2), 0);
	unsigned runs = f.compute_runs;
	ck_assert_int_eq(toggle_graph_launch(c, g2, e2, f.stream), TOGGLE_ESTALE);
	ck_assert_uint_eq(f.compute_runs, runs);
	ck_assert_int_eq(toggle_graph_bind(c, g2, e2), TOGGLE_ESTALE);
	ck_assert_int_eq(toggle_graph_forget(c, g2), TOGGLE_ENOENT);
	struct toggle_registry_check rc;
	toggle_registry_check(c, &rc);
	ck_assert_uint_eq(rc.graphs, 0);
	toggle_agent_close(c);
	toggle_agent_close(b);
	f.agent = NULL;
	fx_close(&f);
}
END_TEST

/* 8. A failing driver call refuses the launch and leaves the registry consistent. */
/* 9. Property: every replay runs exactly the set step_begin reported. */
static unsigned rnd(unsigned *seed, unsigned n)
{
	return (unsigned)rand_r(seed) % n;
}

static void random_set(unsigned *seed, struct toggle_set *s)
{
	toggle_set_clear(s);
	unsigned kind = rnd(seed, 5), density = rnd(seed, 100);
	for (uint16_t t = 0; t < NT; t++)
		for (uint16_t l = 0; l < NL; l++) {
			bool on = kind == 1 || (kind >= 2 && rnd(seed, 100) < density);
			if (on)
				toggle_set_add(s, (struct toggle_hook){t, l});
		}
}

START_TEST(test_property_replays_match_gate)
{
	unsigned seed = 12345u + (unsigned)_i;
	struct fx f;
	fx_open(&f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	const int ngraphs = 3;
	for (int g = 0; g < ngraphs; g++)
		fx_capture_bound(&f, g);
	CUgraphExec old[64];
	unsigned n_old = 0;
	unsigned replays = 0, late = 0;
	for (int64_t step = 0; step < 10000; step++) {
		struct toggle_set s, eff, ran;
		if (rnd(&seed, 3) == 0) {
			random_set(&seed, &s);
			ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
		}
		if (rnd(&seed, 4) == 0) {
			random_set(&seed, &s);
			int64_t when = step - 2 + (int64_t)rnd(&seed, 6);
			if (when < 0)
				when = 0;
			int rc = toggle_plan_step(f.agent, when, &s);
			ck_assert_int_eq(rc, when < step ? TOGGLE_ELATE : 0); /* step-1 has begun */
			late += rc != 0;
		}
		if (rnd(&seed, 50) == 0) { /* re-instantiate one graph */
			int g = (int)rnd(&seed, ngraphs);
			if (n_old == 64) {
				for (unsigned i = 0; i < n_old; i++)
					toggle_sim_exec_destroy(old[i]);
				n_old = 0;
			}
			old[n_old++] = f.exec[g];
			ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec[g], f.graph[g]), 0);
			if (rnd(&seed, 2))
				ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[g], f.exec[g]), 0);
		}
		ck_assert_int_eq(toggle_step_begin(f.agent, step, &eff), 0);
		for (unsigned n = rnd(&seed, 4); n > 0; n--) {
			int g = (int)rnd(&seed, ngraphs);
			ck_assert_int_eq(fx_launch(&f, g, &ran), 0);
			assert_set_eq(&ran, &eff);
			replays++;
		}
	}
	for (unsigned i = 0; i < n_old; i++)
		toggle_sim_exec_destroy(old[i]);
	ck_assert_uint_gt(replays, 10000);
	ck_assert_uint_gt(late, 100);
	fx_close(&f);
}
END_TEST

static Suite *agent_apply_suite(void)
{
	Suite *s = suite_create("agent_apply");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_only_changed_nodes_set, 0, 2);
	tcase_add_test(tc, test_changes_reach_every_node_of_a_hook);
	tcase_add_test(tc, test_late_plan_rejected);
	tcase_add_test(tc, test_standing_change_waits_for_step);
	tcase_add_test(tc, test_agents_share_nothing);
	tcase_add_loop_test(tc, test_property_replays_match_gate, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(agent_apply_suite());
}
