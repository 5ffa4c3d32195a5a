/*
 * check_daemon_rpc.c - end-to-end tests of toggled: hello, status, registration, SetEnabled and its selectors, watch, an agent killed.
 *
 * The real daemon binary (the ASan/UBSan build, TOGGLED_BIN), agents on the
 * simulator backend in child processes, and the client library; the
 * environment, the agent children and the RPC helpers are the shared
 * fixture (tests/fixture_daemon.h).  Split out of check_daemon.c (issue 29).
 *
 * Run from the repository root (TOGGLED_BIN is a relative path).
 */
#include "fixture_daemon.h"
/* ======================================================================== */
/* 1-2. Hello, version, status                                               */
/* ======================================================================== */

START_TEST(test_hello_version)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	ASSERT(tgc_may_write(c), "root or the daemon's own user must be allowed to write");
	ASSERT(tgc_daemon_version(c)[0] != '\0', "empty daemon version");

	/* A Hello of protocol 99 on a live connection, packed by hand: EVERSION. */
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = 99;
	h.client = (char *)(uintptr_t)"check_daemon";
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 77;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	uint8_t *buf;
	size_t len;
	int rc = tgp_frame_encode(&env, &buf, &len);
	ASSERT_CODE(rc, 0, "tgp_frame_encode");
	rc = tgc_send_raw(c, buf, len);
	free(buf);
	ASSERT_CODE(rc, 0, "tgc_send_raw");
	Toggle__Envelope *rep = NULL;
	int got = tgc_recv(c, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "no answer to a Hello of version 99 (%d)", got);
	ASSERT(rep->id == 77 && rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR,
	       "answer id %llu body %d", (unsigned long long)rep->id, (int)rep->body_case);
	ASSERT((int)rep->error->code == TOGGLE_EVERSION, "code %d, expected EVERSION", rep->error->code);
	ASSERT(strstr(rep->error->message, "99"), "message does not name version 99: %s",
	       rep->error->message);
	toggle__envelope__free_unpacked(rep, NULL);
	rc = rpc_status(c, NULL, err);
	ASSERT_CODE(rc, 0, err);
	tgc_close(c);

	/* As the first message: EVERSION, and it does not count as a hello. */
	struct raw r;
	raw_open(&r, &e);
	rc = raw_hello_version(&r, 99, err);
	ASSERT_CODE(rc, TOGGLE_EVERSION, err);
	rc = raw_status(&r, err);
	ASSERT_CODE(rc, TOGGLE_EPROTO, err);
	raw_expect_closed(&r, "a request after a refused hello");
	raw_close(&r);
	env_teardown(&e);
}
END_TEST

START_TEST(test_status)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	int rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_STATUS_REPLY, "body %d", (int)rep->body_case);
	const Toggle__StatusReply *s = rep->status_reply;
	ASSERT_STR(s->daemon_version, tgc_daemon_version(c), "daemon_version");
	ASSERT(s->protocol_version == TGP_PROTOCOL_VERSION, "protocol %u", s->protocol_version);
	ASSERT(s->agents == 0, "%u agents before any started", s->agents);
	ASSERT(s->clients >= 1, "%u clients", s->clients);
	ASSERT(s->requests >= 1, "%llu requests", (unsigned long long)s->requests);
	ASSERT_STR(s->socket, e.sock, "socket");
	ASSERT_STR(s->state_dir, e.state, "state_dir");
	uint64_t uptime0 = s->uptime_ms;
	toggle__envelope__free_unpacked(rep, NULL);

	int a = agent_start(&e,
			&(struct agent_opts){.name = "st-agent", .group = "g", .steps = true});
	agent_wait_listed(c, &e.agents[a], 0);
	rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	s = rep->status_reply;
	ASSERT(s->agents == 1, "%u agents with one registered", s->agents);
	ASSERT(s->uptime_ms >= uptime0, "uptime went back: %llu < %llu",
	       (unsigned long long)s->uptime_ms, (unsigned long long)uptime0);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* 3. Registration                                                           */
/* ======================================================================== */

START_TEST(test_agent_registration)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "reg-agent", .group = "grp", .steps = true});
	struct ainfo ai = agent_wait_listed(c, &e.agents[a], 1);
	ASSERT_STR(ai.name, "reg-agent", "name");
	ASSERT_STR(ai.group, "grp", "group");
	ASSERT(ai.pid == (uint32_t)e.agents[a].pid, "pid %u, child is %d", ai.pid,
	       (int)e.agents[a].pid);
	ASSERT(ai.uid == (uint32_t)geteuid(), "uid %u", ai.uid);
	ASSERT(ai.mode == TOGGLE_MODE_LAZY && ai.driver_version == 0, "mode %u driver %d", ai.mode,
	       ai.driver_version);
	ASSERT(ai.n_types == NT && ai.n_layers == NL, "catalog %zu x %u", ai.n_types, ai.n_layers);
	for (int t = 0; t < NT; t++)
		ASSERT_STR(ai.types[t], type_names[t], "hook type");
	ASSERT(ai.graphs == NGRAPHS, "%u graphs", ai.graphs);
	ASSERT_STR(ai.enabled, "none", "enabled before any command");
	ASSERT(ai.control_version == 0 && ai.anomalies == 0, "control version %llu anomalies %llu",
	       (unsigned long long)ai.control_version, (unsigned long long)ai.anomalies);

	/* A selector by id and by pid names the same agent. */
	Toggle__Selector by_id = sel_id(ai.id), by_pid = sel_pid(ai.pid);
	Toggle__Selector *sels[2] = {&by_id, &by_pid};
	for (int k = 0; k < 2; k++) {
		Toggle__Envelope *rep = NULL;
		int rc = rpc_list_agents(c, sels[k], &rep, err);
		ASSERT_CODE(rc, 0, err);
		ASSERT(rep->agents->n_agents == 1 && rep->agents->agents[0]->agent_id == ai.id,
		       "selector %d: %zu agents", k, rep->agents->n_agents);
		toggle__envelope__free_unpacked(rep, NULL);
	}

	Toggle__Envelope *rep = NULL;
	int rc = rpc_list_graphs(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__ListGraphsReply *lg = rep->graphs;
	ASSERT(lg->n_graphs == NGRAPHS, "%zu graphs listed", lg->n_graphs);
	ASSERT(lg->n_truncated_agents == 0, "truncated");
	for (size_t i = 0; i < lg->n_graphs; i++) {
		const Toggle__GraphInfo *g = lg->graphs[i];
		ASSERT(g->agent_id == ai.id, "graph of agent %llu", (unsigned long long)g->agent_id);
		ASSERT(g->nodes == NT * NL && g->hooks_covered == NT * NL, "graph %zu: %u nodes, %u hooks",
		       i, g->nodes, g->hooks_covered);
		ASSERT(g->bound && !g->stale && g->exec != 0, "graph %zu: bound %d stale %d", i,
		       g->bound, g->stale);
		ASSERT(g->replays > 0, "graph %zu never replayed", i);
	}
	ASSERT(lg->graphs[0]->graph != lg->graphs[1]->graph, "two graphs with one handle");
	toggle__envelope__free_unpacked(rep, NULL);

	rc = rpc_hooks(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__HooksReply *hr = rep->hooks_reply;
	ASSERT(hr->n_agents == 1, "%zu agents in hooks", hr->n_agents);
	const Toggle__AgentHooks *ah = hr->agents[0];
	ASSERT(ah->agent_id == ai.id, "hooks of agent %llu", (unsigned long long)ah->agent_id);
	ASSERT_STR(ah->name, "reg-agent", "hooks name");
	ASSERT(ah->n_hook_types == NT && ah->n_layers == NL, "hooks catalog %zu x %u",
	       ah->n_hook_types, ah->n_layers);
	for (int t = 0; t < NT; t++)
		ASSERT_STR(ah->hook_types[t], type_names[t], "hooks type");
	ASSERT_STR(ah->enabled, "none", "hooks enabled");
	ASSERT_STR(ah->current, "none", "hooks current");
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* 4-6. SetEnabled: operations, waits, selectors                             */
/* ======================================================================== */

/* Set with a wait, then check the daemon's view and the agent's steps. */
static void set_and_check(struct tgc *c, struct agent_proc *ap, Toggle__SetOp op, const char *spec,
			  const char *old_set, const char *new_set)
{
	int64_t before = agent_last_step(ap);
	uint64_t v = set_applied(c, NULL, op, spec);
	struct ainfo ai = agent_info(c, ap->name);
	ASSERT_STR(ai.enabled, new_set, "enabled after the set");
	ASSERT(ai.control_version == v, "control version %llu, reply said %llu",
	       (unsigned long long)ai.control_version, (unsigned long long)v);
	ASSERT(ai.applied_version == v, "applied version %llu after the wait for %llu",
	       (unsigned long long)ai.applied_version, (unsigned long long)v);
	assert_switch(ap, before, ai.step, old_set, new_set);
}

START_TEST(test_set_enabled)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	/* Slow steps: a reply sent before the agent applied would be seen below. */
	int a = agent_start(&e,
			&(struct agent_opts){.name = "setter", .group = "g", .steps = true, .period_ms = 20});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);

	struct spec s1 = canon("resid_post:0-1");
	struct spec s2 = canon("resid_post:0-1,attn_out:3");
	struct spec s3 = canon("resid_post:1,attn_out:3");
	set_and_check(c, ap, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:0-1", "none", s1.s);
	set_and_check(c, ap, TOGGLE__SET_OP__SET_OP_ADD, "attn_out:3", s1.s, s2.s);
	set_and_check(c, ap, TOGGLE__SET_OP__SET_OP_REMOVE, "resid_post:0", s2.s, s3.s);

	/* An unknown hook type: ESPEC naming the agent and the token; nothing changes. */
	struct ainfo before = agent_info(c, ap->name);
	int rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:0,bogus_type:1", WAIT_MS, NULL,
			 err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);
	ASSERT(strstr(err, "setter") && strstr(err, "bogus_type"),
	       "message does not name the agent and the token: %s", err);
	struct ainfo after = agent_info(c, ap->name);
	ASSERT(after.control_version == before.control_version, "control version moved %llu -> %llu",
	       (unsigned long long)before.control_version, (unsigned long long)after.control_version);
	ASSERT_STR(after.enabled, s3.s, "enabled after a refused spec");
	struct alog l;
	alog_wait(ap, after.step + 5, 10000, &l);
	for (int64_t s = before.step; s <= after.step + 5; s++)
		alog_expect(&l, ap, s, s3.s);
	alog_free(&l);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

START_TEST(test_wait_timeout)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "idle-agent", .group = "g", .steps = false});
	agent_wait_listed(c, &e.agents[a], -1);
	uint64_t t0 = now_ms();
	int rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "all", 200, NULL, err);
	uint64_t dt = now_ms() - t0;
	ASSERT_CODE(rc, TOGGLE_ETIMEDOUT, err);
	ASSERT(strstr(err, "idle-agent"), "timeout does not name the agent: %s", err);
	ASSERT(dt >= 190 && dt < 5000, "answered after %llu ms for a wait of 200 ms",
	       (unsigned long long)dt);
	/* The set is the standing one all the same; it was never run. */
	struct ainfo ai = agent_info(c, "idle-agent");
	ASSERT_STR(ai.enabled, "all", "enabled");
	ASSERT(ai.control_version == 1 && ai.applied_version == 0, "control %llu applied %llu",
	       (unsigned long long)ai.control_version, (unsigned long long)ai.applied_version);
	ASSERT(ai.step == -1, "a stepless agent at step %lld", (long long)ai.step);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* No step the agent logged so far ran set. */
static void assert_never_ran(struct agent_proc *ap, const char *set)
{
	struct alog l;
	alog_load(&l, ap->log);
	ASSERT(l.n > 0, "agent %s logged no step", ap->name);
	for (size_t i = 0; i < l.n; i++)
		ASSERT(strcmp(l.v[i].spec, set) != 0, "agent %s ran '%s' at step %lld", ap->name, set,
		       (long long)l.v[i].step);
	alog_free(&l);
}

START_TEST(test_selectors)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int ia = agent_start(&e,
			&(struct agent_opts){.name = "sel-a", .group = "g1", .steps = true});
	int ib = agent_start(&e,
			&(struct agent_opts){.name = "sel-b", .group = "g2", .steps = true});
	struct ainfo a = agent_wait_listed(c, &e.agents[ia], 1);
	struct ainfo b = agent_wait_listed(c, &e.agents[ib], 1);

	Toggle__Selector g1 = sel_group("g1");
	Toggle__Envelope *rep = NULL;
	int rc = rpc_set(c, &g1, TOGGLE__SET_OP__SET_OP_REPLACE, "all", WAIT_MS, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->set_enabled_reply->n_versions == 1 &&
	       rep->set_enabled_reply->versions[0]->agent_id == a.id,
	       "group g1 reached %zu agents", rep->set_enabled_reply->n_versions);
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT_STR(agent_info(c, "sel-a").enabled, "all", "sel-a after the g1 set");
	ASSERT_STR(agent_info(c, "sel-b").enabled, "none", "sel-b after the g1 set");
	ASSERT(agent_info(c, "sel-b").control_version == 0, "sel-b's control lane was written");

	struct spec b_set = canon("attn_out:0"), a_set = canon("resid_post:2");
	Toggle__Selector by_id = sel_id(b.id);
	set_applied(c, &by_id, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:0");
	ASSERT_STR(agent_info(c, "sel-a").enabled, "all", "sel-a after the id set");
	ASSERT_STR(agent_info(c, "sel-b").enabled, b_set.s, "sel-b after the id set");

	Toggle__Selector by_pid = sel_pid(a.pid);
	set_applied(c, &by_pid, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:2");
	ASSERT_STR(agent_info(c, "sel-a").enabled, a_set.s, "sel-a after the pid set");
	ASSERT_STR(agent_info(c, "sel-b").enabled, b_set.s, "sel-b after the pid set");
	assert_never_ran(&e.agents[ib], "all");

	/* Selectors that match nothing. */
	Toggle__Selector none_group = sel_group("nosuch"), none_id = sel_id(a.id + b.id + 100),
			 none_pid = sel_pid(1);
	Toggle__Selector *nothing[3] = {&none_group, &none_id, &none_pid};
	for (int k = 0; k < 3; k++) {
		rc = rpc_set(c, nothing[k], TOGGLE__SET_OP__SET_OP_REPLACE, "none", 0, NULL, err);
		ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
		rc = rpc_list_agents(c, nothing[k], NULL, err);
		ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	}
	ASSERT_STR(agent_info(c, "sel-a").enabled, a_set.s, "sel-a after the selectors of nothing");
	ASSERT_STR(agent_info(c, "sel-b").enabled, b_set.s, "sel-b after the selectors of nothing");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* 8-9. Events, agent death                                                  */
/* ======================================================================== */

START_TEST(test_watch)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *w = client(&e), *c = client(&e);
	int rc = rpc_watch(w, NULL, err);
	ASSERT_CODE(rc, 0, err);

	int a = agent_start(&e, &(struct agent_opts){.name = "watched", .group = "g", .steps = true,
						     .anomaly_at = 50});
	struct evinfo joined = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_JOINED, "watched", 10000);
	struct ainfo ai = agent_wait_listed(c, &e.agents[a], 1);
	ASSERT(joined.agent_id == ai.id, "joined agent %llu, listed %llu",
	       (unsigned long long)joined.agent_id, (unsigned long long)ai.id);

	/* The agent's anomaly (a producer recorded outside a capture window) is
	 * reported from its status lane. */
	struct evinfo anomaly = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_ANOMALY, "watched", 10000);
	ASSERT(anomaly.agent_id == ai.id, "ANOMALY for agent %llu", (unsigned long long)anomaly.agent_id);

	uint64_t v = set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:*");
	struct evinfo applied = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED, "watched", 10000);
	ASSERT(applied.version == v && applied.agent_id == ai.id, "SET_APPLIED version %llu, set %llu",
	       (unsigned long long)applied.version, (unsigned long long)v);

	agent_stop(&e, a);
	struct evinfo left = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_LEFT, "watched", 10000);
	ASSERT(left.agent_id == ai.id, "left agent %llu", (unsigned long long)left.agent_id);
	tgc_close(w);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

START_TEST(test_agent_kill9)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int iv = agent_start(&e,
			&(struct agent_opts){.name = "victim", .group = "g", .steps = true});
	int ib = agent_start(&e,
			&(struct agent_opts){.name = "bystander", .group = "g", .steps = true});
	int ii = agent_start(&e,
			&(struct agent_opts){.name = "idle-victim", .group = "g", .steps = false});
	struct ainfo victim = agent_wait_listed(c, &e.agents[iv], 1);
	agent_wait_listed(c, &e.agents[ib], 1);
	struct ainfo idle = agent_wait_listed(c, &e.agents[ii], -1);

	/* A wait pending on an agent that dies ends at once with ENOAGENT naming
	 * it, well before its 600 ms deadline. */
	struct raw r;
	raw_open(&r, &e);
	raw_hello(&r);
	Toggle__Selector by_id = sel_id(idle.id);
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = &by_id;
	m.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	m.spec = (char *)(uintptr_t)"all";
	m.wait_ms = 600;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	env.set_enabled = &m;
	env.id = ++r.next_id;
	raw_send_env(&r, &env, -1);
	sleep_ms(50);
	agent_kill9(&e, ii);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(&r, &rep, 400);
	ASSERT(got == 1, "no prompt answer to a wait on a killed agent (%d)", got);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR &&
	       (int)rep->error->code == TOGGLE_ENOAGENT && rep->error->n_agents == 1 &&
	       strcmp(rep->error->agents[0], "idle-victim") == 0,
	       "answer to a wait on a killed agent: body %d", (int)rep->body_case);
	toggle__envelope__free_unpacked(rep, NULL);
	raw_close(&r);

	/* kill -9 of a stepping agent: dropped, the daemon keeps serving. */
	agent_kill9(&e, iv);
	agent_wait_gone(c, "victim");
	agent_wait_gone(c, "idle-victim");
	size_t total = 0;
	ASSERT(agent_lookup(c, "bystander", NULL, &total) && total == 1, "%zu agents listed", total);
	Toggle__Selector by_pid = sel_pid(victim.pid);
	int rc = rpc_set(c, &by_pid, TOGGLE__SET_OP__SET_OP_REPLACE, "all", 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	struct spec s = canon("attn_out:1");
	set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:1");
	ASSERT_STR(agent_info(c, "bystander").enabled, s.s, "bystander after the set");
	rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->status_reply->agents == 1, "status counts %u agents", rep->status_reply->agents);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_rpc_suite(void)
{
	Suite *s = suite_create("daemon_rpc");
	TCase *tc = add_tcase(s, "hello");
	tcase_add_test(tc, test_hello_version);
	tcase_add_test(tc, test_status);
	tc = add_tcase(s, "agents");
	tcase_add_test(tc, test_agent_registration);
	tcase_add_test(tc, test_watch);
	tcase_add_test(tc, test_agent_kill9);
	tc = add_tcase(s, "set");
	tcase_add_test(tc, test_set_enabled);
	tcase_add_test(tc, test_wait_timeout);
	tcase_add_test(tc, test_selectors);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_rpc_suite());
}
