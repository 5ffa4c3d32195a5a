/*
 * check_agent.c - libtoggle's agent on the simulator: recording, binding,
 * lazy and eager apply, plans, fail-closed guards, and a property test that
 * every replay runs exactly the set toggle_step_begin() reported.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

#define NT 3
#define NL 8
#define MAX_GRAPHS 4

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

/* One producer kernel's host body: marks its hook as executed. */
struct producer {
	struct fx *fx;
	struct toggle_hook hook;
};

struct fx {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	struct toggle_set ran;   /* producers executed since the last reset */
	unsigned compute_runs;
	struct producer prod[MAX_GRAPHS][NT * NL];
	CUgraph graph[MAX_GRAPHS];
	CUgraphExec exec[MAX_GRAPHS];
};

static void producer_fn(void *arg)
{
	struct producer *p = arg;
	ck_assert_int_eq(toggle_set_add(&p->fx->ran, p->hook), 0);
}

static void compute_fn(void *arg)
{
	((struct fx *)arg)->compute_runs++;
}

static struct toggle_config fx_config(struct fx *f, enum toggle_mode mode)
{
	return (struct toggle_config){
		.name = "test-agent",
		.group = "tests",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
}

static void fx_open(struct fx *f, enum toggle_mode mode)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->stream), CUDA_SUCCESS);
	struct toggle_config cfg = fx_config(f, mode);
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
}

/* Only the main exec: these tests count its node toggles, which the
 * producer-free exec skips at empty sets (check_bare.c tests that one). */
static void fx_open_main(struct fx *f, enum toggle_mode mode)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->stream), CUDA_SUCCESS);
	struct toggle_config cfg = fx_config(f, mode);
	cfg.no_bare_exec = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
}

static void fx_close(struct fx *f)
{
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
}

/* Capture graph i: per layer a compute kernel, then one producer per hook type. */
static void fx_capture(struct fx *f, int i, bool producers)
{
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	for (uint16_t l = 0; l < NL; l++) {
		ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, compute_fn, f), CUDA_SUCCESS);
		for (uint16_t t = 0; producers && t < NT; t++) {
			struct producer *p = &f->prod[i][t * NL + l];
			*p = (struct producer){.fx = f, .hook = {t, l}};
			ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, producer_fn, p), CUDA_SUCCESS);
			ck_assert_int_eq(toggle_record_producer(f->agent, f->stream, p->hook), 0);
		}
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph[i]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[i], f->graph[i]), CUDA_SUCCESS);
}

static void fx_capture_bound(struct fx *f, int i)
{
	fx_capture(f, i, true);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[i], f->exec[i]), 0);
}

/* Launch graph i through the agent; returns the code and what ran. */
static int fx_launch(struct fx *f, int i, struct toggle_set *ran)
{
	toggle_set_clear(&f->ran);
	int rc = toggle_graph_launch(f->agent, f->graph[i], f->exec[i], f->stream);
	if (ran)
		*ran = f->ran;
	return rc;
}

static uint64_t set_calls(struct fx *f)
{
	return toggle_sim_calls(f->sim, TOGGLE_SIM_OP_NODE_SET_ENABLED);
}

static struct toggle_set spec(const char *text)
{
	static const struct toggle_catalog cat = {.type_names = type_names, .n_types = NT,
						  .n_layers = NL};
	struct toggle_set s;
	char err[128];
	int rc = toggle_set_parse(&cat, text, &s, err, sizeof(err));
	ck_assert_msg(rc == 0, "spec '%s': %s", text, err);
	return s;
}

static void assert_set_eq(const struct toggle_set *got, const struct toggle_set *want)
{
	static const struct toggle_catalog cat = {.type_names = type_names, .n_types = NT,
						  .n_layers = NL};
	char g[512], w[512];
	toggle_set_format(&cat, got, g, sizeof(g));
	toggle_set_format(&cat, want, w, sizeof(w));
	ck_assert_msg(toggle_set_equal(got, want), "ran '%s', expected '%s'", g, w);
}

/* 1. A graph without producers passes through untouched. */
START_TEST(test_unrelated_graph_launches)
{
	struct fx f;
	fx_open(&f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	fx_capture(&f, 0, false);
	struct toggle_set all = spec("all"), ran;
	ck_assert_int_eq(toggle_set_enabled(f.agent, &all), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);
	ck_assert_int_eq(toggle_graph_count(f.agent), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_uint_eq(f.compute_runs, NL);
	ck_assert_uint_eq(set_calls(&f), 0);
	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.launches_unrelated, 1);
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[0], f.exec[0]), TOGGLE_ENOENT);
	fx_close(&f);
}
END_TEST

/* 2. A graph with producers that is not bound fails closed. */
START_TEST(test_unbound_graph_refused)
{
	struct fx f;
	fx_open(&f, _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	fx_capture(&f, 0, true);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	struct toggle_set ran, none = spec("none");
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_EUNBOUND);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	ck_assert_uint_eq(f.compute_runs, 0);
	assert_set_eq(&ran, &none);
	char name[32];
	snprintf(name, sizeof(name), "%p", (void *)f.graph[0]);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), name));
	struct toggle_anomalies an;
	toggle_anomalies_get(f.agent, &an);
	ck_assert_uint_eq(an.launch_unbound, 1);
	fx_close(&f);
}
END_TEST

static const char *const rebind_sets[] = {"none", "resid_post:1-3,mlp_out:7", "all"};

/* 3. Binding a new exec resets per-exec state and syncs before its first launch. */
START_TEST(test_rebind_resets_and_syncs)
{
	struct fx f;
	fx_open_main(&f, _i / 3 ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	struct toggle_set want = spec(rebind_sets[_i % 3]), ran;
	fx_capture_bound(&f, 0);
	ck_assert_int_eq(toggle_set_enabled(f.agent, &want), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, NULL), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &want);

	CUgraphExec old = f.exec[0];
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec[0], f.graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[0], f.exec[0]), 0);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.applied_version, 0);
	ck_assert_uint_eq(gs.replays, 1); /* counted per graph, across execs */
	ck_assert_int_eq(gs.last_step, -1);
	ck_assert_ptr_eq(gs.exec, f.exec[0]);

	/* Same set, same step: only the new exec's unknown state forces calls. */
	uint64_t before = set_calls(&f);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &want);
	ck_assert_uint_eq(set_calls(&f) - before, NT * NL);
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.replays, 2);
	ck_assert_int_eq(gs.last_step, 1);
	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.launches, 2);
	/* Unbinding: launches fail closed until the next bind. */
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph[0], NULL), 0);
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert(!gs.bound);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_EUNBOUND);
	ck_assert_int_eq(toggle_apply_all(f.agent), 0); /* skips unbound graphs */
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	fx_close(&f);
}
END_TEST

/* 4. Launching with another exec than the bound one rebinds and syncs. */
START_TEST(test_launch_other_exec_rebinds)
{
	struct fx f;
	fx_open(&f, _i / 3 ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
	struct toggle_set want = spec(rebind_sets[_i % 3]), ran;
	fx_capture_bound(&f, 0);
	ck_assert_int_eq(toggle_set_enabled(f.agent, &want), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, NULL), 0);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	CUgraphExec old = f.exec[0];
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec[0], f.graph[0]), CUDA_SUCCESS);
	struct toggle_stats before, after;
	toggle_stats_get(f.agent, &before);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &want);
	toggle_stats_get(f.agent, &after);
	ck_assert_uint_eq(after.rebinds, before.rebinds + 1);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_ptr_eq(gs.exec, f.exec[0]);
	ck_assert_int_eq(toggle_sim_exec_destroy(old), CUDA_SUCCESS);
	fx_close(&f);
}
END_TEST

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
START_TEST(test_driver_failure_refuses_launch)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	struct toggle_set s = spec("attn_out:*"), ran, none = spec("none");
	ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 5, 1, CUDA_ERROR_INVALID_VALUE);
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_ECUDA);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	assert_set_eq(&ran, &none);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "cuGraphNodeSetEnabled"));
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.applied_version, 0);
	ck_assert_uint_eq(gs.replays, 0);

	/* The retry sets the failed node and the rest, then runs the right set. */
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &s);

	/* A failing launch: refused, counted, node states stay right. */
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, CUDA_ERROR_LAUNCH_FAILED);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_ECUDA);
	uint64_t c = set_calls(&f);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_uint_eq(set_calls(&f), c);
	assert_set_eq(&ran, &s);

	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	ck_assert_uint_eq(st.launches_refused, 2);
	struct toggle_anomalies an;
	toggle_anomalies_get(f.agent, &an);
	ck_assert_uint_eq(an.driver_errors, 2);

	/* Recording with a failing capture query. */
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO, 0, 1, CUDA_ERROR_INVALID_VALUE);
	struct toggle_hook h = {0, 0};
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ECUDA);
	CUgraph g2;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &g2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	/* Nothing recorded, but the producer is in g2: asked again, the stream named
	 * g2, which is late and fails closed. */
	ck_assert_int_eq(toggle_graph_count(f.agent), 2);
	ck_assert_int_eq(toggle_graph_status(f.agent, g2, &gs), 0);
	ck_assert_uint_eq(gs.nodes, 0);
	ck_assert_ptr_nonnull(strstr(gs.note, "not recorded"));
	CUgraphExec e2;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, g2), CUDA_SUCCESS);
	launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	ck_assert_int_eq(toggle_graph_launch(f.agent, g2, e2, f.stream), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	ck_assert_int_eq(toggle_sim_exec_destroy(e2), CUDA_SUCCESS);
	fx_close(&f);
}
END_TEST

START_TEST(test_eager_failure_then_launch_retries)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_EAGER);
	fx_capture_bound(&f, 0);
	struct toggle_set s = spec("mlp_out:3-6"), ran;
	ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 0, 1, CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0); /* eager apply fails */
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph[0], &gs), 0);
	ck_assert_uint_eq(gs.applied_version, 0);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED, 0, 1, CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), TOGGLE_ECUDA);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	assert_set_eq(&ran, &s);
	/* Eager: the next change is applied at step_begin, before any launch. */
	struct toggle_set t = spec("resid_post:*");
	ck_assert_int_eq(toggle_set_enabled(f.agent, &t), 0);
	uint64_t c = set_calls(&f);
	ck_assert_int_eq(toggle_step_begin(f.agent, 1, NULL), 0);
	ck_assert_uint_eq(set_calls(&f) - c, toggle_set_count(&s) + toggle_set_count(&t));
	c = set_calls(&f);
	ck_assert_int_eq(fx_launch(&f, 0, &ran), 0);
	ck_assert_uint_eq(set_calls(&f), c);
	assert_set_eq(&ran, &t);
	fx_close(&f);
}
END_TEST

START_TEST(test_record_refusals)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	struct toggle_hook h = {1, 2}, bad_layer = {0, NL}, bad_type = {NT, 0};
	/* Window closed. */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	/* Out of the catalog. */
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, bad_layer), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, bad_type), TOGGLE_ERANGE);
	/* Not a kernel node. */
	ck_assert_int_eq(toggle_sim_memset(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ENOTKERNEL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "not a kernel"));
	/* The same node twice. */
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), 0);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_EINVAL);
	CUgraph g;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &g), CUDA_SUCCESS);
	/* Stream not capturing. */
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, h), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	struct toggle_anomalies an;
	toggle_anomalies_get(f.agent, &an);
	ck_assert_uint_eq(an.record_outside_window, 1);
	ck_assert_uint_eq(an.record_not_kernel, 1);
	ck_assert_uint_eq(an.record_not_capturing, 1);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert_uint_eq(gs.nodes, 1);
	ck_assert_uint_eq(gs.hooks_covered, 1);
	ck_assert(!gs.bound);
	toggle_sim_graph_destroy(g);
	fx_close(&f);
}
END_TEST

START_TEST(test_registry_check)
{
	struct fx f;
	fx_open(&f, TOGGLE_MODE_LAZY);
	fx_capture_bound(&f, 0);
	fx_capture(&f, 1, true);
	struct toggle_registry_check rc;
	toggle_registry_check(f.agent, &rc);
	ck_assert_uint_eq(rc.graphs, 2);
	ck_assert_uint_eq(rc.unbound, 1);
	ck_assert(rc.complete);
	ck_assert(rc.uniform);
	ck_assert_uint_eq(rc.hooks_uncovered, 0);
	/* A third graph with one producer: neither complete nor uniform. */
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f.stream, compute_fn, &f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.stream, (struct toggle_hook){2, 7}), 0);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.stream, &f.graph[2]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	toggle_registry_check(f.agent, &rc);
	ck_assert_uint_eq(rc.graphs, 3);
	ck_assert(!rc.complete);
	ck_assert(!rc.uniform);
	ck_assert_uint_eq(rc.hooks_uncovered, NT * NL - 1);
	struct toggle_graph_status list[4];
	ck_assert_uint_eq(toggle_graph_list(f.agent, list, 4), 3);
	ck_assert_uint_eq(list[0].nodes, NT * NL);
	ck_assert_uint_eq(list[2].hooks_covered, 1);
	ck_assert_uint_eq(toggle_graph_list(f.agent, list, 1), 3);
	toggle_sim_graph_destroy(f.graph[2]);
	fx_close(&f);
}
END_TEST

START_TEST(test_open_config_errors)
{
	struct fx f;
	memset(&f, 0, sizeof(f));
	ck_assert_int_eq(toggle_sim_create(&f.sim), 0);
	struct toggle_agent *a = NULL;
	/* Device mode needs a 12.4 driver: strict refuses, else lazy (check_device.c has more). */
	toggle_sim_set_driver_version(f.sim, 12030);
	struct toggle_config cfg = fx_config(&f, TOGGLE_MODE_DEVICE);
	cfg.strict = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	ck_assert_ptr_null(a);
	cfg.strict = false;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	ck_assert_int_eq(toggle_agent_mode(a), TOGGLE_MODE_LAZY);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(a), "12.4"));
	toggle_agent_close(a);
	toggle_sim_set_driver_version(f.sim, 13000);
	cfg.strict = true;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	ck_assert_int_eq(toggle_agent_mode(a), TOGGLE_MODE_DEVICE);
	toggle_agent_close(a);
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.sim = NULL;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.name = "";
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.catalog.n_layers = 0;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	cfg = fx_config(&f, (enum toggle_mode)7);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_EINVAL);
	/* The catalog is copied: the caller's names may go away. */
	char n0[] = "resid_post", n1[] = "attn_out";
	const char *names[2] = {n0, n1};
	cfg = fx_config(&f, TOGGLE_MODE_LAZY);
	cfg.catalog.type_names = names;
	cfg.catalog.n_types = 2;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	memset(n0, 'x', sizeof(n0) - 1);
	ck_assert_str_eq(toggle_agent_catalog(a)->type_names[0], "resid_post");
	struct toggle_set out_of_catalog;
	toggle_set_clear(&out_of_catalog);
	toggle_set_add(&out_of_catalog, (struct toggle_hook){2, 0});
	ck_assert_int_eq(toggle_set_enabled(a, &out_of_catalog), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_plan_step(a, 3, &out_of_catalog), TOGGLE_ERANGE);
	toggle_agent_close(a);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* Without an NVIDIA driver, the cuda backend refuses with a clear error. */
START_TEST(test_cuda_backend_without_driver)
{
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (dl) {
		dlclose(dl);
		TU_SKIP(TU_SKIP_ENV, "libcuda.so.1 is installed here: the no-driver refusal cannot be tested");
	}
	struct toggle_config cfg = {
		.name = "x",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.backend = TOGGLE_BACKEND_CUDA,
	};
	struct toggle_agent *a = NULL;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENODRIVER);
	ck_assert_ptr_null(a);
}
END_TEST

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

static Suite *agent_suite(void)
{
	Suite *s = suite_create("agent");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_unrelated_graph_launches, 0, 2);
	tcase_add_loop_test(tc, test_unbound_graph_refused, 0, 2);
	tcase_add_loop_test(tc, test_rebind_resets_and_syncs, 0, 6);
	tcase_add_loop_test(tc, test_launch_other_exec_rebinds, 0, 6);
	tcase_add_loop_test(tc, test_only_changed_nodes_set, 0, 2);
	tcase_add_test(tc, test_changes_reach_every_node_of_a_hook);
	tcase_add_test(tc, test_late_plan_rejected);
	tcase_add_test(tc, test_standing_change_waits_for_step);
	tcase_add_test(tc, test_agents_share_nothing);
	tcase_add_test(tc, test_driver_failure_refuses_launch);
	tcase_add_test(tc, test_eager_failure_then_launch_retries);
	tcase_add_test(tc, test_record_refusals);
	tcase_add_test(tc, test_registry_check);
	tcase_add_test(tc, test_open_config_errors);
	tcase_add_test(tc, test_cuda_backend_without_driver);
	tcase_add_loop_test(tc, test_property_replays_match_gate, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(agent_suite());
}
