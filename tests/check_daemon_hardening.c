/*
 * check_daemon_hardening.c - end-to-end tests of toggled: a hostile local user (issue 11).
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
/* Issue 11: a hostile local user                                           */
/* ======================================================================== */

/* Item 1: the agent rewrites its header's lane offsets while registering. */
struct offset_flipper {
	volatile uint64_t *ctl_off, *st_off;
	uint64_t good_ctl, good_st;
	volatile int stop;
};

static void *offsets_flip(void *arg)
{
	struct offset_flipper *f = arg;
	const uint64_t far = (uint64_t)1 << 40;
	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		__atomic_store_n(f->ctl_off, far, __ATOMIC_RELAXED);
		__atomic_store_n(f->st_off, far, __ATOMIC_RELAXED);
		for (volatile int i = 0; i < 64; i++)
			;
		__atomic_store_n(f->ctl_off, f->good_ctl, __ATOMIC_RELAXED);
		__atomic_store_n(f->st_off, f->good_st, __ATOMIC_RELAXED);
		for (volatile int i = 0; i < 64; i++)
			;
	}
	return NULL;
}

START_TEST(test_shm_offsets_rewritten_while_registering)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct offset_flipper f = {.ctl_off = &shm.hdr->control_offset,
				   .st_off = &shm.hdr->status_offset,
				   .good_ctl = shm.hdr->control_offset,
				   .good_st = shm.hdr->status_offset};
	pthread_t t;
	ASSERT(pthread_create(&t, NULL, offsets_flip, &f) == 0, "pthread_create");
	int accepted = 0, refused = 0;
	/* docs/reliability.md runs it longer: TG_HOSTILE_REGISTRATIONS=N. */
	const char *env_n = getenv("TG_HOSTILE_REGISTRATIONS");
	int rounds = env_n && atoi(env_n) > 0 ? atoi(env_n) : 2000;
	for (int i = 0; i < rounds; i++) {
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		/* Every registration is answered (accepted, or refused as ESHM): never a crash. */
		rc = raw_register(&r, "shifty", NT, NL, shm.fd, err);
		ASSERT(rc == 0 || rc == TOGGLE_ESHM, "registration %d: %s: %s", i, toggle_strerror(rc),
		       err);
		if (rc == 0)
			accepted++;
		else
			refused++;
		raw_close(&r);
	}
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	daemon_alive(&e, "registrations of a region whose offsets kept changing");
	printf("hostile registrations: %d, accepted %d, refused %d, daemon alive\n", rounds, accepted,
	       refused);
	ASSERT(accepted > 0 && refused > 0, "%d accepted, %d refused: the race was not exercised",
	       accepted, refused);
	toggle_shm_unmap(&shm);
	env_teardown(&e);
}
END_TEST

/* Item 8: a RegisterAgent whose name is patched after packing (byte at, to). */
static int raw_register_patched(struct raw *r, const char *name, char at, char to, int pass_fd,
				char *err)
{
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.n_hook_types = NT;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = NL;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = ++r->next_id;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	uint8_t *buf;
	size_t len;
	ASSERT_CODE(tgp_frame_encode(&env, &buf, &len), 0, "tgp_frame_encode");
	uint8_t *hit = memmem(buf, len, name, strlen(name));
	ASSERT(hit, "name not found in the packed frame");
	uint8_t *c = memchr(hit, at, strlen(name));
	ASSERT(c, "no '%c' in the name", at);
	*c = (uint8_t)to;
	raw_write(r, buf, len, pass_fd);
	free(buf);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(r, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "no reply to a patched RegisterAgent");
	int rc = 0;
	err[0] = '\0';
	if (rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR) {
		rc = rep->error->code;
		snprintf(err, ERRLEN, "%s", rep->error->message);
	}
	toggle__envelope__free_unpacked(rep, NULL);
	return rc;
}

START_TEST(test_names_dot_and_nul_refused)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct tgc *c = client(&e);
	static const char *const dots[] = {".", ".."};
	for (int i = 0; i < 2; i++) {
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		rc = raw_register(&r, dots[i], NT, NL, shm.fd, err);
		ASSERT_CODE(rc, TOGGLE_EINVAL, err);
		raw_close(&r);
		ASSERT(!agent_lookup(c, dots[i], NULL, NULL), "agent '%s' was registered", dots[i]);
	}
	/* "a\0/../../x": C would read it as "a". */
	{
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		rc = raw_register_patched(&r, "a#/../../x", '#', '\0', shm.fd, err);
		ASSERT_CODE(rc, TOGGLE_EINVAL, err);
		ASSERT(strstr(err, "NUL"), "the error does not say why: %s", err);
		ASSERT(!agent_lookup(c, "a", NULL, NULL), "'a\\0/../../x' was registered as 'a'");
		/* The connection stays usable: the refusal was for this request only. */
		rc = raw_register(&r, "after-nul", NT, NL, shm.fd, err);
		ASSERT_CODE(rc, 0, err);
		raw_close(&r);
	}
	tgc_close(c);
	toggle_shm_unmap(&shm);
	daemon_alive(&e, "names with dots and NUL bytes");
	env_teardown(&e);
}
END_TEST

/*
 * Item 11: a client that queries the agent between the daemon's status polls
 * must not make watchers miss SET_APPLIED.  Each round sets without waiting,
 * queries until the agent applied it (each query reads the status lane), and
 * then the watcher must still hear of that version.
 */
START_TEST(test_events_survive_queries)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *w = client(&e), *c = client(&e);
	int rc = rpc_watch(w, NULL, err);
	ASSERT_CODE(rc, 0, err);
	int a = agent_start(&e, &(struct agent_opts){.name = "queried", .steps = true});
	agent_wait_listed(c, &e.agents[a], 1);
	for (int round = 0; round < 10; round++) {
		Toggle__Envelope *rep = NULL;
		rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, round % 2 ? "attn_out:*" : "resid_post:*", 0,
			     &rep, err);
		ASSERT_CODE(rc, 0, err);
		ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY &&
		       rep->set_enabled_reply->n_versions == 1, "set reply");
		uint64_t v = rep->set_enabled_reply->versions[0]->version;
		toggle__envelope__free_unpacked(rep, NULL);
		uint64_t end = now_ms() + 10000;
		while (agent_info(c, "queried").applied_version < v)
			ASSERT(now_ms() < end, "round %d: version %llu not applied in 10 s", round,
			       (unsigned long long)v);
		struct evinfo ev;
		do
			ev = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED, "queried", 3000);
		while (ev.version < v);
		ASSERT(ev.version == v, "round %d: SET_APPLIED %llu, set %llu", round,
		       (unsigned long long)ev.version, (unsigned long long)v);
	}
	tgc_close(w);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Item 5: an agent with a foreign catalog (here: no attn_out hooks) must not
 * make the operator's default-target set and plan fail for everyone: it is
 * left out and named; an explicit selector naming it still fails.
 */
START_TEST(test_default_target_not_poisoned)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "native", .steps = true});
	struct ainfo native = agent_wait_listed(c, &e.agents[a], 1);
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct raw r;
	raw_open(&r, &e);
	raw_hello(&r);
	rc = raw_register(&r, "foreign", 1, 1, shm.fd, err); /* resid_post:0 only */
	ASSERT_CODE(rc, 0, err);
	struct ainfo foreign = agent_info(c, "foreign");

	Toggle__Envelope *rep = NULL;
	rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:*", WAIT_MS, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__SetEnabledReply *sr = rep->set_enabled_reply;
	ASSERT(sr->n_versions == 1 && sr->versions[0]->agent_id == native.id,
	       "set went to %zu agents (first %llu), expected only native %llu", sr->n_versions,
	       sr->n_versions ? (unsigned long long)sr->versions[0]->agent_id : 0ull,
	       (unsigned long long)native.id);
	ASSERT(sr->n_skipped == 1 && strstr(sr->skipped[0], "foreign") &&
	       strstr(sr->skipped[0], "attn_out"), "skipped: %zu '%s'", sr->n_skipped,
	       sr->n_skipped ? sr->skipped[0] : "");
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT_STR(agent_info(c, "native").enabled, "attn_out:*", "native's set");
	ASSERT(agent_info(c, "foreign").control_version == foreign.control_version,
	       "the foreign agent's lane was written");

	/* A plan to the default target: the same. */
	int64_t step = agent_info(c, "native").step + 100000;
	Toggle__PlanEntry pe = TOGGLE__PLAN_ENTRY__INIT, *pep = &pe;
	pe.step = step;
	pe.spec = (char *)(uintptr_t)"attn_out:0";
	Toggle__SubmitPlanRequest pm = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	pm.n_entries = 1;
	pm.entries = &pep;
	rc = rpc(c, TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, &pm, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_ACK && rep->ack->n_skipped == 1 &&
	       strstr(rep->ack->skipped[0], "foreign"), "plan: foreign not named as skipped");
	toggle__envelope__free_unpacked(rep, NULL);

	/* Named explicitly, it still refuses (all or nothing). */
	Toggle__Selector sel = sel_id(foreign.id);
	rc = rpc_set(c, &sel, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:*", 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);
	ASSERT(strstr(err, "foreign"), "the error does not name the agent: %s", err);
	/* A spec nobody accepts fails naming an agent, as before. */
	rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "no_such_hook:*", 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);
	raw_close(&r);
	toggle_shm_unmap(&shm);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* uid 65534: refused in group prod (tied to uid 4242), admitted in lab (open). */
_Noreturn static void group_child(const struct env *e)
{
	char err[ERRLEN];
	struct toggle_shm shm;
	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
		_exit(10);
	if (toggle_shm_create(&shm, err, ERRLEN) != 0)
		_exit(11);
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	if (raw_register_group(&r, "squatter", "prod", shm.fd, err) != TOGGLE_EPERM)
		_exit(12);
	if (!strstr(err, "agent_group"))
		_exit(13);
	if (raw_register_group(&r, "labrat", "lab", shm.fd, err) != 0)
		_exit(14);
	raw_close(&r);
	_exit(0);
}

START_TEST(test_agent_group_tied_to_uid)
{
	if (geteuid() != 0)
		TU_SKIP(TU_SKIP_ROOT, "needs root to become uid %d", NOBODY);
	struct env e;
	env_setup_conf(&e, "agent_group = prod: 4242, @no-such-group-here\n");
	ASSERT(chmod(e.dir, 0755) == 0, "chmod %s: %s", e.dir, strerror(errno));
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct raw r;
	raw_open(&r, &e);
	raw_hello(&r);
	rc = raw_register_group(&r, "rooted", "prod", shm.fd, err); /* root may */
	ASSERT_CODE(rc, 0, err);
	static const char *const why[] = {
		[10] = "cannot become nobody", [11] = "shm", [12] = "group prod was not refused with EPERM",
		[13] = "the refusal does not name agent_group", [14] = "open group lab was refused",
	};
	run_child(&e, group_child, "uid 65534 agent", why, sizeof(why) / sizeof(why[0]));
	struct tgc *c = client(&e);
	ASSERT(!agent_lookup(c, "squatter", NULL, NULL), "the squatter is registered");
	tgc_close(c);
	raw_close(&r);
	toggle_shm_unmap(&shm);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_hardening_suite(void)
{
	Suite *s = suite_create("daemon_hardening");
	TCase *tc = add_tcase(s, "issue11");
	tcase_add_test(tc, test_shm_offsets_rewritten_while_registering);
	tcase_add_test(tc, test_names_dot_and_nul_refused);
	tcase_add_test(tc, test_events_survive_queries);
	tcase_add_test(tc, test_default_target_not_poisoned);
	tcase_add_test(tc, test_agent_group_tied_to_uid);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_hardening_suite());
}
