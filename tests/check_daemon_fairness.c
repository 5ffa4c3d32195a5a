/*
 * check_daemon_fairness.c - end-to-end tests of toggled: fairness (issue 17): floods, many lanes, many agents.
 *
 * The real daemon binary (the ASan/UBSan build, TOGGLED_BIN), agents on the
 * simulator backend in child processes, and the client library; the
 * environment, the agent children and the RPC helpers are the shared
 * fixture (tests/fixture_daemon.h).  Split out of check_daemon.c (issue 29).
 *
 * Run from the repository root (TOGGLED_BIN is a relative path).
 */
#include "fixture_daemon.h"

/*
 * Fairness (issue 17): a client pipelining a flood of requests must not
 * starve another client's request.  The daemon is stopped while the flood
 * (well within one read of the socket) and then a probe are queued, so both
 * wait when it resumes and the flood's socket is reported first.  A status
 * reply carries the daemon's request count when it was handled: the probe
 * must be handled before the flood's last frame, which a loop that handles
 * all it read from one peer before the next never does.  Then a flood over
 * several reads: every reply, in order, none lost.
 */

static uint64_t status_requests(const Toggle__Envelope *rep, const char *what)
{
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_STATUS_REPLY, "%s: body %d", what,
	       (int)rep->body_case);
	return rep->status_reply->requests;
}

static void status_flood(struct raw *r, uint64_t first_id, size_t n)
{
	Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
	uint8_t *all = NULL;
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
		env.id = first_id + i;
		env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
		env.status = &st;
		uint8_t *buf;
		size_t blen;
		ASSERT_CODE(tgp_frame_encode(&env, &buf, &blen), 0, "tgp_frame_encode");
		uint8_t *grown = realloc(all, len + blen);
		ASSERT(grown, "out of memory");
		all = grown;
		memcpy(all + len, buf, blen);
		len += blen;
		free(buf);
	}
	raw_write(r, all, len, -1);
	free(all);
}

/* The flood's n replies, in order; returns the request count of the last. */
static uint64_t status_flood_replies(struct raw *r, uint64_t first_id, size_t n, uint64_t *first)
{
	uint64_t last = 0;
	for (size_t i = 0; i < n; i++) {
		Toggle__Envelope *rep = NULL;
		int got = raw_recv(r, &rep, RPC_TIMEOUT_MS);
		ASSERT(got == 1, "flood: no reply %zu of %zu", i, n);
		ASSERT(rep->id == first_id + i, "flood: reply %llu where %llu was due",
		       (unsigned long long)rep->id, (unsigned long long)(first_id + i));
		uint64_t req = status_requests(rep, "flood");
		ASSERT(req > last, "flood: request count %llu after %llu", (unsigned long long)req,
		       (unsigned long long)last);
		if (i == 0 && first)
			*first = req;
		last = req;
		toggle__envelope__free_unpacked(rep, NULL);
	}
	return last;
}

static void flood_and_probe(struct env *e, uint64_t most_before)
{
	enum { FLOOD = 2000, BIG_FLOOD = 10000 };
	struct raw flood, probe;
	raw_open(&probe, e);
	raw_hello(&probe);
	raw_open(&flood, e);
	raw_hello(&flood);
	sleep_ms(100); /* the daemon back in its poll with both sockets drained */
	ASSERT(kill(e->daemon, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
	int st;
	ASSERT(waitpid(e->daemon, &st, WUNTRACED) == e->daemon && WIFSTOPPED(st),
	       "the daemon did not stop");
	status_flood(&flood, 1000, FLOOD);
	Toggle__StatusRequest sr = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 7;
	env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
	env.status = &sr;
	raw_send_env(&probe, &env, -1);
	ASSERT(kill(e->daemon, SIGCONT) == 0, "SIGCONT: %s", strerror(errno));

	Toggle__Envelope *rep = NULL;
	ASSERT(raw_recv(&probe, &rep, RPC_TIMEOUT_MS) == 1, "probe: no reply");
	ASSERT(rep->id == 7, "probe: reply id %llu", (unsigned long long)rep->id);
	uint64_t at_probe = status_requests(rep, "probe");
	toggle__envelope__free_unpacked(rep, NULL);
	uint64_t at_first = 0;
	uint64_t at_last = status_flood_replies(&flood, 1000, FLOOD, &at_first);
	/* Frames are taken one per peer, alternating between peers that just
	 * sent and peers with frames left: the flood gets at most two frames
	 * in before the probe, whatever frames_per_turn is; one when the poll
	 * phase may serve two fresh frames (the flood's first, then the probe). */
	ASSERT(at_probe <= at_first + most_before,
	       "the probe was handled as request %llu, after %llu frames of the flood (from %llu; "
	       "at most %llu expected)",
	       (unsigned long long)at_probe, (unsigned long long)(at_probe - at_first),
	       (unsigned long long)at_first, (unsigned long long)most_before);
	ASSERT(at_probe < at_last,
	       "the probe waited for the whole flood of %d frames from another client: handled as "
	       "request %llu, the flood's last as %llu", FLOOD, (unsigned long long)at_probe,
	       (unsigned long long)at_last);

	/* Over several reads and beyond the socket's buffer: nothing lost or reordered. */
	status_flood(&flood, 100000, BIG_FLOOD);
	status_flood_replies(&flood, 100000, BIG_FLOOD, NULL);
	char err[ERRLEN];
	ASSERT_CODE(raw_status(&probe, err), 0, err);
	raw_close(&flood);
	raw_close(&probe);
}

START_TEST(test_flood_does_not_starve)
{
	struct env e;
	env_setup(&e);
	flood_and_probe(&e, 2);
	env_teardown(&e);
	/* The budget is configurable: one frame per turn. */
	env_setup_conf(&e, "frames_per_turn = 1\n");
	flood_and_probe(&e, 2);
	env_teardown(&e);
	/* Four: both sockets' first frames are handled as read, in the poll phase. */
	env_setup_conf(&e, "frames_per_turn = 4\n");
	flood_and_probe(&e, 1);
	env_teardown(&e);
}
END_TEST

/*
 * Issue 17: a save is made visible a slice per loop turn (commit.c), so a
 * save of many agents spans several turns.  A write's reply must still
 * leave only once every lane it changed shows the change: 100 agents in
 * one group (three times the lanes written per turn), a set to the group,
 * and every lane read at once when the reply arrives.
 */

/* Agent i of a raw fleet: its own region and connection, registered as
 * "<prefix>-i" in group (the test owns the region: it reads the lanes). */
struct raw_agent {
	struct toggle_shm shm;
	struct raw conn;
	bool gone;
};

static void raw_agent_open(struct env *e, struct raw_agent *a, const char *prefix, int i,
			   const char *group)
{
	char name[32], err[ERRLEN];
	snprintf(name, sizeof(name), "%s-%d", prefix, i);
	ASSERT_CODE(toggle_shm_create(&a->shm, err, ERRLEN), 0, err);
	raw_open(&a->conn, e);
	raw_hello(&a->conn);
	ASSERT_CODE(raw_register_group(&a->conn, name, group, a->shm.fd, err), 0, err);
	a->gone = false;
}

static void raw_agents_close(struct raw_agent *a, int n)
{
	for (int i = 0; i < n; i++) {
		if (!a[i].gone)
			raw_close(&a[i].conn);
		toggle_shm_unmap(&a[i].shm);
	}
}

START_TEST(test_reply_after_every_lane)
{
	enum { N = 100 };
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	static struct raw_agent ag[N];
	for (int i = 0; i < N; i++)
		raw_agent_open(&e, &ag[i], "many", i, "many");
	struct tgc *c = client(&e);
	Toggle__Selector sel = sel_group("many");
	static const char *const specs[3] = {"attn_out:1-2", "resid_post:0", "attn_out:0"};
	for (int k = 0; k < 3; k++) {
		struct toggle_set want;
		ASSERT_CODE(toggle_set_parse(&catalog, specs[k], &want, err, sizeof(err)), 0, err);
		Toggle__Envelope *rep = NULL;
		ASSERT_CODE(rpc_set(c, &sel, TOGGLE__SET_OP__SET_OP_REPLACE, specs[k], 0, &rep, err), 0,
			    err);
		ASSERT(rep->set_enabled_reply->n_versions == N, "%zu versions for %d agents",
		       rep->set_enabled_reply->n_versions, N);
		toggle__envelope__free_unpacked(rep, NULL);
		for (int i = 0; i < N; i++) {
			struct toggle_shm_control_view v;
			ASSERT_CODE(toggle_shm_control_read(ag[i].shm.ctl, &v), 0, "control lane");
			ASSERT(memcmp(v.standing, want.bits, sizeof(v.standing)) == 0,
			       "set %d (%s) answered, but agent many-%d's lane does not show it", k,
			       specs[k], i);
		}
	}
	tgc_close(c);
	raw_agents_close(ag, N);
	env_teardown(&e);
}
END_TEST

/*
 * Issue 17: agents are found by id through an index kept in id order
 * (td_agent_find), not a walk.  Agents that leave from the middle and the
 * ends, and one that registers after: every live id is found (its lane
 * shows the set), every gone id is TOGGLE_ENOAGENT.
 */
START_TEST(test_agent_ids_after_leaves)
{
	enum { N = 7 };
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	static struct raw_agent ag[N];
	uint64_t ids[N];
	struct tgc *c = client(&e);
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "byid-%d", i);
		raw_agent_open(&e, &ag[i], "byid", i, "");
		ids[i] = agent_info(c, name).id;
		if (i == N - 2) {
			/* Leave: the first, one in the middle, the newest so far. */
			static const int leave[3] = {0, 2, N - 2};
			for (int k = 0; k < 3; k++) {
				raw_close(&ag[leave[k]].conn);
				ag[leave[k]].gone = true;
			}
			for (int k = 0; k < 3; k++) {
				char n2[32];
				snprintf(n2, sizeof(n2), "byid-%d", leave[k]);
				for (int t = 0; t < 200 && agent_lookup(c, n2, NULL, NULL); t++)
					sleep_ms(10);
				ASSERT(!agent_lookup(c, n2, NULL, NULL), "%s still listed", n2);
			}
		}
	}
	struct toggle_set want;
	ASSERT_CODE(toggle_set_parse(&catalog, "attn_out:1-2", &want, err, sizeof(err)), 0, err);
	for (int i = 0; i < N; i++) {
		Toggle__Selector sel = sel_id(ids[i]);
		Toggle__Envelope *rep = NULL;
		int rc = rpc_set(c, &sel, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:1-2", 0, &rep, err);
		if (rep)
			toggle__envelope__free_unpacked(rep, NULL);
		if (ag[i].gone) {
			ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
			continue;
		}
		ASSERT_CODE(rc, 0, err);
		struct toggle_shm_control_view v;
		ASSERT_CODE(toggle_shm_control_read(ag[i].shm.ctl, &v), 0, "control lane");
		ASSERT(memcmp(v.standing, want.bits, sizeof(v.standing)) == 0,
		       "the set to id %llu did not reach byid-%d", (unsigned long long)ids[i], i);
	}
	/* An id never given: refused, not another agent's. */
	Toggle__Selector none = sel_id(ids[N - 1] + 1);
	Toggle__Envelope *rep = NULL;
	ASSERT_CODE(rpc_set(c, &none, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:0", 0, &rep, err),
		    TOGGLE_ENOAGENT, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
	raw_agents_close(ag, N);
	env_teardown(&e);
}
END_TEST

/*
 * Issue 17: with many agents the status poll reads a slice of them per tick
 * (events.c), not all at once.  Every agent must still be read: 100 agents
 * each publish an applied version on their status lane, and a watcher gets
 * a SET_APPLIED event from every one of them.
 */
START_TEST(test_events_from_many_agents)
{
	enum { N = 100 };
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	static struct raw_agent ag[N];
	bool seen[N] = {false};
	struct tgc *w = client(&e);
	for (int i = 0; i < N; i++)
		raw_agent_open(&e, &ag[i], "ev", i, "");
	ASSERT_CODE(rpc_watch(w, NULL, err), 0, err);
	struct toggle_shm_status *st = calloc(1, sizeof(*st));
	ASSERT(st, "out of memory");
	for (int i = 0; i < N; i++) {
		st->version_applied = 40 + (uint64_t)i;
		toggle_shm_status_write(ag[i].shm.st, st);
	}
	free(st);
	int left = N;
	uint64_t end = now_ms() + 10000;
	while (left > 0) {
		uint64_t now = now_ms();
		ASSERT(now < end, "%d of %d agents never reported their applied version", left, N);
		Toggle__Envelope *ev = NULL;
		int got = tgc_next_event(w, &ev, (int)(end - now));
		ASSERT(got >= 0, "watch connection failed: %d", got);
		if (got == 0)
			continue;
		const Toggle__Event *m = ev->event;
		int i = -1;
		if (m->kind == TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED &&
		    sscanf(m->agent_name, "ev-%d", &i) == 1 && i >= 0 && i < N && !seen[i]) {
			ASSERT(m->version == 40 + (uint64_t)i, "ev-%d: version %llu", i,
			       (unsigned long long)m->version);
			seen[i] = true;
			left--;
		}
		toggle__envelope__free_unpacked(ev, NULL);
	}
	tgc_close(w);
	raw_agents_close(ag, N);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_fairness_suite(void)
{
	Suite *s = suite_create("daemon_fairness");
	TCase *tc = add_tcase(s, "fairness");
	tcase_add_test(tc, test_flood_does_not_starve);
	tcase_add_test(tc, test_reply_after_every_lane);
	tcase_add_test(tc, test_agent_ids_after_leaves);
	tcase_add_test(tc, test_events_from_many_agents);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_fairness_suite());
}
