/*
 * check_daemon_aligned.c - end-to-end tests of toggled: aligned sets (issue 27).
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
/* Aligned sets (issue 27)                                                   */
/* ======================================================================== */

static int rpc_set_aligned(struct tgc *c, Toggle__Selector *sel, const char *spec, uint32_t wait_ms,
			   uint32_t margin, Toggle__Envelope **rep, char *err)
{
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = sel;
	m.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	m.spec = (char *)(uintptr_t)spec;
	m.wait_ms = wait_ms;
	m.aligned = true;
	m.aligned_margin = margin;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SET_ENABLED, &m, rep, err);
}

/* Every step from..to of the agent ran old_set before at, new_set from at on. */
static void assert_switch_at(struct agent_proc *ap, int64_t from, int64_t at, int64_t to,
			     const char *old_set, const char *new_set)
{
	struct alog l;
	alog_wait(ap, to, 20000, &l);
	for (int64_t s = from; s <= to; s++)
		alog_expect(&l, ap, s, s < at ? old_set : new_set);
	alog_free(&l);
}

/* A registered agent whose status lane the test writes: the agent's word, an adversary's. */
struct fake_agent {
	struct raw r;
	struct toggle_shm shm;
	struct toggle_shm_status *st;
};

static void fake_start(struct fake_agent *f, const struct env *e, const char *name,
		       const char *group, size_t n_types, uint32_t n_layers, int64_t step,
		       uint64_t features)
{
	char err[ERRLEN];
	int rc = toggle_shm_create(&f->shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	f->st = calloc(1, sizeof(*f->st));
	ASSERT(f->st, "out of memory");
	f->st->step = step;
	f->st->features = features;
	toggle_shm_status_write(f->shm.st, f->st);
	raw_open(&f->r, e);
	raw_hello(&f->r);
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.group = (char *)(uintptr_t)group;
	m.n_hook_types = n_types;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = n_layers;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	rc = raw_call(&f->r, &env, f->shm.fd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, err);
	ASSERT_CODE(rc, 0, err);
}

static void fake_stop(struct tgc *c, struct fake_agent *f, const char *name)
{
	raw_close(&f->r);
	agent_wait_gone(c, name);
	toggle_shm_unmap(&f->shm);
	free(f->st);
}

/*
 * Two agents of one group at steps 700 apart: the reply names one step,
 * above both agents' steps, and both switch at exactly that step.  A second
 * aligned set before the first's step is EBUSY; with a wait, the reply
 * leaves only once both ran it.
 */
START_TEST(test_aligned_switch)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "rank1", .group = "tp", .steps = true,
						     .start = 700});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	agent_wait_listed(c, p1, 702);
	sleep_ms(300); /* a step-rate sample (TD_ALIGN_RATE_MS) */

	Toggle__Selector tp = sel_group("tp");
	Toggle__Envelope *rep = NULL;
	int64_t b0 = agent_last_step(p0), b1 = agent_last_step(p1);
	int rc = rpc_set_aligned(c, &tp, "attn_out:1", 0, 0, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__SetEnabledReply *sr = rep->set_enabled_reply;
	int64_t at = sr->aligned_step;
	ASSERT(sr->n_versions == 2, "aligned set reached %zu agents", sr->n_versions);
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT(at > b1 + 3 && at > b0, "aligned step %lld, agents were at %lld and %lld",
	       (long long)at, (long long)b0, (long long)b1);
	ASSERT(at < b1 + 10000, "aligned step %lld is far past rank1's %lld", (long long)at,
	       (long long)b1);

	/* A second one before the first's step: refused, the first stays. */
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EBUSY, err);
	ASSERT(strstr(err, "rank") && strstr(err, "previous aligned"), "EBUSY message: %s", err);

	struct spec old = canon("none"), nu = canon("attn_out:1");
	assert_switch_at(p0, at - 20, at, at + 5, old.s, nu.s);
	assert_switch_at(p1, at - 20, at, at + 5, old.s, nu.s);

	/* With a wait: answered once both ran it (their steps are past it then). */
	rc = rpc_set_aligned(c, &tp, "resid_post:2", WAIT_MS, 0, &rep, err);
	ASSERT_CODE(rc, 0, err);
	int64_t at2 = rep->set_enabled_reply->aligned_step;
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT(agent_info(c, "rank0").step >= at2 && agent_info(c, "rank1").step >= at2,
	       "the wait answered before both agents ran step %lld", (long long)at2);
	struct spec nu2 = canon("resid_post:2");
	assert_switch_at(p0, at2 - 5, at2, at2 + 3, nu.s, nu2.s);
	assert_switch_at(p1, at2 - 5, at2, at2 + 3, nu.s, nu2.s);

	/* An explicit margin: exactly the highest step plus it. */
	rc = rpc_set_aligned(c, &tp, "none", 0, 3000, &rep, err);
	ASSERT_CODE(rc, 0, err);
	int64_t at3 = rep->set_enabled_reply->aligned_step;
	toggle__envelope__free_unpacked(rep, NULL);
	int64_t hi0 = agent_info(c, "rank0").step, hi1 = agent_info(c, "rank1").step;
	int64_t hi = hi0 > hi1 ? hi0 : hi1; /* the higher one, read after the reply */
	ASSERT(at3 > 3000 && at3 <= hi + 3000 && at3 >= at2 + 3000, "margin 3000: step %lld (highest step now %lld)",
	       (long long)at3, (long long)hi);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Refused whole, naming the agent, and no lane written: another catalog in
 * the group, an agent without aligned changes, one that never began a
 * step, a hostile step far from the others or near INT64_MAX, a group
 * with no agent, bad margins.
 */
START_TEST(test_aligned_refused)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	agent_wait_listed(c, &e.agents[a0], 2);
	sleep_ms(300); /* its step rate measured (TD_ALIGN_RATE_MS) */
	Toggle__Selector tp = sel_group("tp");
	uint64_t v0 = agent_info(c, "rank0").control_version;
	int64_t now = agent_info(c, "rank0").step;

	struct fake_agent f;
	fake_start(&f, &e, "odd", "tp", 1, 1, now, TOGGLE_SHM_FEAT_ALIGNED); /* resid_post:0 only */
	int rc = rpc_set_aligned(c, &tp, "resid_post:0", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	ASSERT(strstr(err, "odd") && strstr(err, "another catalog"), "catalog message: %s", err);
	fake_stop(c, &f, "odd");

	fake_start(&f, &e, "old", "tp", NT, NL, now, 0); /* a libtoggle that predates them */
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ENOTSUP, err);
	ASSERT(strstr(err, "old") && strstr(err, "upgrade"), "feature message: %s", err);
	fake_stop(c, &f, "old");

	fake_start(&f, &e, "huge", "tp", NT, NL, INT64_MAX - 2, TOGGLE_SHM_FEAT_ALIGNED);
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	ASSERT(strstr(err, "huge") && strstr(err, "apart"), "spread message: %s", err);
	Toggle__Selector huge = sel_id(agent_info(c, "huge").id);
	rc = rpc_set_aligned(c, &huge, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EBUSY, err); /* just registered: no step rate yet */
	ASSERT(strstr(err, "huge") && strstr(err, "step rate"), "rate message: %s", err);
	rc = rpc_set_aligned(c, &huge, "all", 0, 1000, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	ASSERT(strstr(err, "huge") && strstr(err, "out of range"), "overflow message: %s", err);
	fake_stop(c, &f, "huge");

	fake_start(&f, &e, "idle", "tp", NT, NL, -1, TOGGLE_SHM_FEAT_ALIGNED);
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	ASSERT(strstr(err, "idle") && strstr(err, "not begun a step"), "stepless message: %s", err);
	fake_stop(c, &f, "idle");

	Toggle__Selector none = sel_group("nobody");
	rc = rpc_set_aligned(c, &none, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	rc = rpc_set_aligned(c, &tp, "all", 0, TGP_MAX_ALIGN_MARGIN + 1, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = &tp;
	m.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	m.spec = (char *)(uintptr_t)"all";
	m.aligned_margin = 10;
	rc = rpc(c, TOGGLE__ENVELOPE__BODY_SET_ENABLED, &m, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	rc = rpc_set_aligned(c, &tp, "no_such_hook", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);

	ASSERT(agent_info(c, "rank0").control_version == v0,
	       "a refused aligned set wrote rank0's lane (version %llu, was %llu)",
	       (unsigned long long)agent_info(c, "rank0").control_version, (unsigned long long)v0);
	ASSERT_STR(agent_info(c, "rank0").enabled, "none", "rank0's set");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * A stalled rank: the reply waits for it and says so when the wait runs
 * out; the change stays in its lane and it switches at the same step as
 * the others once it steps again.  A late rank, one that skips over the
 * step while stalled: it refuses the change (its set never changes), and
 * the reply is ELATE naming it alone.
 */
START_TEST(test_aligned_stalled_and_late)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "slow", .group = "tp", .steps = true,
						     .stall_at = 400, .stall_ms = 2500});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	struct alog l;
	alog_wait(p1, 400, 20000, &l);
	alog_free(&l);

	Toggle__Selector tp = sel_group("tp");
	int rc = rpc_set_aligned(c, &tp, "attn_out:*", 1000, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ETIMEDOUT, err);
	ASSERT(strstr(err, "stalled") && strstr(err, "slow") && !strstr(err, "rank0"),
	       "stalled message names the wrong agents: %s", err);
	int64_t at = -1;
	Toggle__Envelope *rep = NULL;
	/* The step it waits for: the lane's, as ListAgents cannot show it; both logs agree. */
	struct spec old = canon("none"), nu = canon("attn_out:*");
	alog_wait(p0, agent_last_step(p0), 1000, &l);
	for (size_t i = 1; i < l.n; i++)
		if (strcmp(l.v[i].spec, nu.s) == 0 && strcmp(l.v[i - 1].spec, old.s) == 0)
			at = l.v[i].step;
	alog_free(&l);
	ASSERT(at > 400, "rank0 did not switch (at %lld)", (long long)at);
	assert_switch_at(p1, 380, at, at + 5, old.s, nu.s);
	assert_switch_at(p0, at - 20, at, at + 5, old.s, nu.s);
	(void)rep;

	/* Late: a group whose stalled rank comes back 100000 steps on. */
	int a2 = agent_start(&e, &(struct agent_opts){.name = "rank2", .group = "tp2", .steps = true});
	int a3 = agent_start(&e, &(struct agent_opts){.name = "skipper", .group = "tp2", .steps = true,
						     .stall_at = 400, .stall_ms = 1500, .jump = 100000});
	struct agent_proc *p2 = &e.agents[a2], *p3 = &e.agents[a3];
	agent_wait_listed(c, p2, 2);
	alog_wait(p3, 400, 20000, &l);
	alog_free(&l);
	Toggle__Selector tp2 = sel_group("tp2");
	rc = rpc_set_aligned(c, &tp2, "resid_post:1", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ELATE, err);
	ASSERT(strstr(err, "skipper") && !strstr(err, "rank2"), "late message: %s", err);
	int64_t at2 = -1;
	if (sscanf(strstr(err, "step ") ? strstr(err, "step ") : "", "step %lld", (long long *)&at2) != 1)
		at2 = -1;
	ASSERT(at2 > 400, "no step in the late message: %s", err);
	struct spec nu2 = canon("resid_post:1");
	assert_switch_at(p2, at2 - 5, at2, at2 + 5, old.s, nu2.s);
	assert_switch_at(p3, 100400, 100400, 100420, old.s, old.s);
	ASSERT(agent_info(c, "skipper").anomalies > 0, "the late refusal is not counted as an anomaly");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * A rank that leaves while the reply waits for it: ENOAGENT naming it at
 * once (not at the deadline), and the rank that stayed still switches at
 * the step.
 */
START_TEST(test_aligned_rank_leaves)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "gone", .group = "tp", .steps = true,
						     .stall_at = 300, .stall_ms = 20000});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	struct alog l;
	alog_wait(p1, 300, 20000, &l);
	alog_free(&l);
	fflush(NULL);
	pid_t k = fork();
	ASSERT(k >= 0, "fork: %s", strerror(errno));
	if (k == 0) {
		sleep_ms(500);
		kill(p1->pid, SIGKILL);
		_exit(0);
	}
	Toggle__Selector tp = sel_group("tp");
	uint64_t t0 = now_ms();
	int rc = rpc_set_aligned(c, &tp, "attn_out:2", 8000, 0, NULL, err);
	uint64_t took = now_ms() - t0;
	int st;
	waitpid(k, &st, 0);
	waitpid(p1->pid, &st, 0);
	p1->pid = 0;
	ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	ASSERT(took < 5000, "the reply waited %llu ms for an agent that left", (unsigned long long)took);
	struct spec old = canon("none"), nu = canon("attn_out:2");
	int64_t at = -1;
	alog_wait(p0, agent_last_step(p0) + 300, 10000, &l);
	for (size_t i = 1; i < l.n; i++)
		if (strcmp(l.v[i].spec, nu.s) == 0 && strcmp(l.v[i - 1].spec, old.s) == 0)
			at = l.v[i].step;
	alog_free(&l);
	ASSERT(at > 300, "rank0 did not switch (at %lld)", (long long)at);
	assert_switch_at(p0, at - 10, at, at + 5, old.s, nu.s);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_aligned_suite(void)
{
	Suite *s = suite_create("daemon_aligned");
	TCase *tc = add_tcase(s, "aligned");
	tcase_add_test(tc, test_aligned_switch);
	tcase_add_test(tc, test_aligned_refused);
	tcase_add_test(tc, test_aligned_stalled_and_late);
	tcase_add_test(tc, test_aligned_rank_leaves);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_aligned_suite());
}
