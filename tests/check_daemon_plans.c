/*
 * check_daemon_plans.c - end-to-end tests of toggled: plans: absolute, relative, their limits.
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
/* 7. Plans                                                                  */
/* ======================================================================== */

START_TEST(test_plans)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN], text[1024];
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "planner", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);
	struct spec standing = canon("resid_post:*");
	set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:*");

	/* Three entries 50 steps ahead: exactly those sets at exactly those steps. */
	static const char *const specs[3] = {"attn_out:0", "attn_out:1", "all"};
	static const int64_t near[3] = {50, 51, 52};
	int64_t cur = plan_ahead(c, ap->name, near, specs, 3);
	struct alog l;
	alog_wait(ap, cur + 60, 10000, &l);
	for (int64_t s = cur + 1; s <= cur + 60; s++) {
		bool planned = s >= cur + 50 && s <= cur + 52;
		alog_expect(&l, ap, s, planned ? canon(specs[s - cur - 50]).s : standing.s);
	}
	alog_free(&l);

	/* Far entries: listed, then cleared, and they never happen. */
	static const char *const far_specs[2] = {"attn_out:2", "attn_out:3"};
	static const int64_t far[2] = {400, 401};
	cur = plan_ahead(c, ap->name, far, far_specs, 2);
	plan_text(c, cur, text, sizeof(text));
	char want[2 * SPEC_LEN + 32];
	snprintf(want, sizeof(want), "+400=%s;+401=%s;", canon(far_specs[0]).s, canon(far_specs[1]).s);
	ASSERT_STR(text, want, "show_plan");
	int rc = rpc_clear_plan(c, NULL, err);
	ASSERT_CODE(rc, 0, err);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, "", "show_plan after clear_plan");
	alog_wait(ap, cur + 405, 10000, &l);
	for (int64_t s = cur + 395; s <= cur + 405; s++)
		alog_expect(&l, ap, s, standing.s);
	alog_free(&l);

	/* One entry for a step already begun: ELATE, and the other entry does not happen either. */
	cur = agent_info(c, ap->name).step;
	int64_t late_steps[2] = {cur + 100, cur - 1};
	rc = rpc_plan(c, NULL, late_steps, specs, 2, err);
	ASSERT_CODE(rc, TOGGLE_ELATE, err);
	ASSERT(strstr(err, "planner"), "ELATE does not name the agent: %s", err);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, "", "show_plan after a late plan");
	alog_wait(ap, cur + 105, 10000, &l);
	alog_expect(&l, ap, cur + 100, standing.s);
	alog_free(&l);

	/* Malformed plans. */
	int64_t dup[2] = {cur + 1000, cur + 1000};
	rc = rpc_plan(c, NULL, dup, specs, 2, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	rc = rpc_plan(c, NULL, dup, specs, 0, err);
	ASSERT_CODE(rc, TOGGLE_ELIMIT, err);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, "", "show_plan after refused plans");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Relative steps are resolved per agent, when the daemon applies the plan to
 * it: two agents far apart in steps get the same offset from their own
 * step, and each runs the entry at that step.
 */
START_TEST(test_plan_relative)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "early", .group = "rel", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "late", .group = "rel", .steps = true,
						     .start = 1000000});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	agent_wait_listed(c, p1, 2);

	static const char *const specs[2] = {"attn_out:1", "resid_post:2"};
	static const int64_t after[2] = {200, 201};
	int64_t before0 = agent_info(c, p0->name).step, before1 = agent_info(c, p1->name).step;
	int rc = rpc_plan_after(c, NULL, after, specs, 2, err);
	ASSERT_CODE(rc, 0, err);
	int64_t after0 = agent_info(c, p0->name).step, after1 = agent_info(c, p1->name).step;

	Toggle__Envelope *rep = NULL;
	rc = rpc_show_plan(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->plan->n_plans == 2, "show_plan lists %zu agents", rep->plan->n_plans);
	int64_t at[2] = {-1, -1};
	for (size_t i = 0; i < 2; i++) {
		const Toggle__AgentPlan *pl = rep->plan->plans[i];
		bool first = pl->agent_id == agent_info(c, p0->name).id;
		int64_t lo = first ? before0 : before1, hi = first ? after0 : after1;
		ASSERT(pl->n_entries == 2, "agent %llu has %zu entries", (unsigned long long)pl->agent_id,
		       pl->n_entries);
		int64_t s0 = pl->entries[0]->step < pl->entries[1]->step ? pl->entries[0]->step
									: pl->entries[1]->step;
		ASSERT(s0 >= lo + 200 && s0 <= hi + 200,
		       "agent %llu: +200 resolved to %lld, its step was %lld..%lld",
		       (unsigned long long)pl->agent_id, (long long)s0, (long long)lo, (long long)hi);
		ASSERT(pl->entries[0]->step + pl->entries[1]->step == 2 * s0 + 1, "+201 is not +200 + 1");
		at[first ? 0 : 1] = s0;
	}
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT(at[1] - at[0] > 900000, "both agents got the same step %lld", (long long)at[0]);

	/* Each runs the entry at its own resolved step. */
	struct agent_proc *ps[2] = {p0, p1};
	for (int i = 0; i < 2; i++) {
		struct alog l;
		alog_wait(ps[i], at[i] + 2, 10000, &l);
		alog_expect(&l, ps[i], at[i], canon(specs[0]).s);
		alog_expect(&l, ps[i], at[i] + 1, canon(specs[1]).s);
		alog_free(&l);
	}

	/* Bad relative entries are refused before anything is written. */
	static const int64_t zero[1] = {0}, huge[1] = {TGP_MAX_PLAN_AFTER + 1};
	rc = rpc_plan_after(c, NULL, zero, specs, 1, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	rc = rpc_plan_after(c, NULL, huge, specs, 1, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	static const int64_t twice[2] = {50, 50};
	rc = rpc_plan_after(c, NULL, twice, specs, 2, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Plan limits: one plan holds 1 to TGP_MAX_PLAN_ENTRIES (64) entries; an
 * agent holds TOGGLE_MAX_PLAN (256) pending entries, the number the agents
 * table shows (pending_plan); a plan past that is refused with an error
 * that names the same number and the same limit.
 */
START_TEST(test_plan_limits)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "limits", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);

	int64_t steps[TGP_MAX_PLAN_ENTRIES + 1];
	const char *specs[TGP_MAX_PLAN_ENTRIES + 1];
	for (int i = 0; i <= TGP_MAX_PLAN_ENTRIES; i++)
		specs[i] = "attn_out:1";
	int64_t base = agent_info(c, ap->name).step + 1000000;
	for (int i = 0; i <= TGP_MAX_PLAN_ENTRIES; i++)
		steps[i] = base + i;
	int rc = rpc_plan(c, NULL, steps, specs, TGP_MAX_PLAN_ENTRIES + 1, err);
	ASSERT_CODE(rc, TOGGLE_ELIMIT, err);
	ASSERT(strstr(err, "1 to 64 entries"), "per-plan limit: %s", err);

	/* Fill the agent's pending plan, one full plan at a time: the agent
	 * takes each from its shared memory at its next step. */
	int full = TOGGLE_MAX_PLAN / TGP_MAX_PLAN_ENTRIES;
	for (int b = 0; b < full; b++) {
		for (int i = 0; i < TGP_MAX_PLAN_ENTRIES; i++)
			steps[i] = base + b * TGP_MAX_PLAN_ENTRIES + i;
		for (int tries = 0;; tries++) {
			rc = rpc_plan(c, NULL, steps, specs, TGP_MAX_PLAN_ENTRIES, err);
			if (rc != TOGGLE_EBUSY || !strstr(err, "not yet taken") || tries > 1000)
				break;
			usleep(5000);
		}
		ASSERT_CODE(rc, 0, err);
	}
	struct ainfo ai = agent_info(c, ap->name);
	ASSERT(ai.pending_plan == TOGGLE_MAX_PLAN, "pending_plan %u", ai.pending_plan);

	/* One more: refused whatever the ring holds, in the table's terms. */
	steps[0] = base + TOGGLE_MAX_PLAN;
	for (int tries = 0;; tries++) {
		rc = rpc_plan(c, NULL, steps, specs, 1, err);
		if (rc != TOGGLE_EBUSY || !strstr(err, "not yet taken") || tries > 1000)
			break;
		usleep(5000);
	}
	ASSERT_CODE(rc, TOGGLE_EBUSY, err);
	char want[128];
	snprintf(want, sizeof(want), "has %u pending plan entries", ai.pending_plan);
	ASSERT(strstr(err, want), "the error does not say what the table says (%s): %s", want, err);
	ASSERT(strstr(err, "limit of 256 pending entries per agent"), "limit not named: %s", err);
	ASSERT(agent_info(c, ap->name).pending_plan == TOGGLE_MAX_PLAN, "a refused plan changed the count");

	/* The agent itself holds all of them: none was refused on its side. */
	ai = agent_info(c, ap->name);
	ASSERT(ai.anomalies == 0, "agent anomalies %llu", (unsigned long long)ai.anomalies);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_plans_suite(void)
{
	Suite *s = suite_create("daemon_plans");
	TCase *tc = add_tcase(s, "plans");
	tcase_add_test(tc, test_plans);
	tcase_add_test(tc, test_plan_limits);
	tcase_add_test(tc, test_plan_relative);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_plans_suite());
}
