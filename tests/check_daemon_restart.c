/*
 * check_daemon_restart.c - end-to-end tests of toggled: a daemon restart, the agent's connection state, stale and live sockets.
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
 * The connection state an integrator reads (toggle_conn_get) and the daemon
 * sees in the status lane: standalone, connecting while no daemon listens,
 * connected, reconnecting after the daemon died, connected again.
 */
static struct toggle_conn_info conn_wait(struct toggle_agent *ag, enum toggle_conn_state want,
					 uint64_t min_sessions, const char *what)
{
	struct toggle_conn_info ci;
	uint64_t end = now_ms() + 10000;
	for (;;) {
		ASSERT(toggle_conn_get(ag, &ci) == 0, "toggle_conn_get");
		if (ci.state == want && ci.sessions >= min_sessions)
			return ci;
		ASSERT(now_ms() < end, "%s: state %s, sessions %llu after 10 s (last error: %s)", what,
		       toggle_conn_state_name(ci.state), (unsigned long long)ci.sessions, ci.last_error);
		sleep_ms(5);
	}
}

/* What the agent published in its status lane at its last step. */
static struct toggle_shm_conn conn_lane(struct toggle_agent *ag, int64_t step)
{
	ASSERT(toggle_step_begin(ag, step, NULL) == 0, "step_begin: %s", toggle_last_error(ag));
	struct toggle_shm_status *st = calloc(1, sizeof(*st));
	ASSERT(st, "calloc");
	ASSERT(toggle_shm_status_read(ag->shm.st, st) == 0, "status read");
	struct toggle_shm_conn c = st->conn;
	free(st);
	return c;
}

START_TEST(test_conn_state)
{
	struct env e;
	env_setup(&e);
	struct toggle_sim *sim;
	ASSERT(toggle_sim_create(&sim) == 0, "sim");
	struct toggle_config cfg = {.name = "conn-probe", .group = "g",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.backend = TOGGLE_BACKEND_SIM, .sim = sim};
	struct toggle_agent *ag;
	struct toggle_conn_info ci;

	/* No socket_path: standalone, never an error. */
	ASSERT(toggle_agent_open(&cfg, &ag) == 0, "open standalone");
	ASSERT(toggle_conn_get(ag, &ci) == 0, "conn_get");
	ASSERT(ci.state == TOGGLE_CONN_STANDALONE && ci.sessions == 0 && ci.failures == 0 &&
	       ci.last_error[0] == '\0', "standalone: %s", toggle_conn_state_name(ci.state));
	ASSERT_STR(toggle_conn_state_name(ci.state), "standalone", "state name");
	ASSERT(toggle_conn_get(NULL, &ci) == TOGGLE_EINVAL && toggle_conn_get(ag, NULL) == TOGGLE_EINVAL,
	       "NULL arguments");
	toggle_agent_close(ag);

	/* No daemon listening: connecting, with the reason. */
	daemon_stop(&e);
	cfg.socket_path = e.sock;
	ASSERT(toggle_agent_open(&cfg, &ag) == 0, "open: %s", "with socket");
	uint64_t end = now_ms() + 10000;
	do {
		ASSERT(now_ms() < end, "no failed attempt within 10 s");
		sleep_ms(5);
		toggle_conn_get(ag, &ci);
	} while (ci.failures == 0);
	ASSERT(ci.state == TOGGLE_CONN_CONNECTING && ci.sessions == 0 && ci.agent_id == 0,
	       "before any daemon: %s", toggle_conn_state_name(ci.state));
	ASSERT(strstr(ci.last_error, "connecting to the daemon"), "last error: %s", ci.last_error);
	ASSERT(ci.since_unix_ms > 0, "since");
	struct toggle_shm_conn lane = conn_lane(ag, 0);
	ASSERT(lane.state == TOGGLE_CONN_CONNECTING && lane.failures >= 1, "lane: state %llu failures %llu",
	       (unsigned long long)lane.state, (unsigned long long)lane.failures);

	/* The daemon comes: connected, with the id the daemon lists. */
	daemon_start(&e);
	ci = conn_wait(ag, TOGGLE_CONN_CONNECTED, 1, "first daemon");
	struct tgc *c = client(&e);
	struct ainfo ai;
	end = now_ms() + 5000;
	while (!agent_lookup(c, cfg.name, &ai, NULL)) {
		ASSERT(now_ms() < end, "agent not listed");
		sleep_ms(5);
	}
	ASSERT(ci.agent_id == ai.id && ci.sessions == 1, "agent_id %llu (daemon: %llu), sessions %llu",
	       (unsigned long long)ci.agent_id, (unsigned long long)ai.id,
	       (unsigned long long)ci.sessions);
	lane = conn_lane(ag, 1);
	ASSERT(lane.state == TOGGLE_CONN_CONNECTED && lane.sessions == 1, "lane: state %llu sessions %llu",
	       (unsigned long long)lane.state, (unsigned long long)lane.sessions);
	tgc_close(c);

	/* The daemon dies: reconnecting, saying why. */
	daemon_kill9(&e);
	ci = conn_wait(ag, TOGGLE_CONN_RECONNECTING, 1, "after the daemon died");
	ASSERT(ci.last_error[0] != '\0', "no last error after the daemon died");
	lane = conn_lane(ag, 2);
	ASSERT(lane.state == TOGGLE_CONN_RECONNECTING, "lane: state %llu", (unsigned long long)lane.state);

	/* A new daemon: connected again, a second session. */
	daemon_start(&e);
	ci = conn_wait(ag, TOGGLE_CONN_CONNECTED, 2, "second daemon");
	ASSERT(ci.sessions == 2, "sessions %llu", (unsigned long long)ci.sessions);
	lane = conn_lane(ag, 3);
	ASSERT(lane.state == TOGGLE_CONN_CONNECTED && lane.sessions == 2, "lane: state %llu sessions %llu",
	       (unsigned long long)lane.state, (unsigned long long)lane.sessions);

	toggle_agent_close(ag);
	toggle_sim_destroy(sim);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* 10, 13. Daemon restart, stale and live sockets                            */
/* ======================================================================== */

START_TEST(test_daemon_restart)
{
	struct env e;
	env_setup(&e);
	char text[1024];
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "survivor", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);
	struct spec standing = canon("attn_out:1-2");
	set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:1-2");
	static const char *const specs[2] = {"resid_post:3", "all"};
	static const int64_t far[2] = {100000, 100001};
	int64_t cur = plan_ahead(c, ap->name, far, specs, 2);
	char want[2 * SPEC_LEN + 32];
	snprintf(want, sizeof(want), "+100000=%s;+100001=%s;", canon(specs[0]).s, canon(specs[1]).s);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, want, "show_plan before the kill");
	tgc_close(c);

	/* Without a daemon the agent keeps stepping with its last set. */
	daemon_kill9(&e);
	int64_t at_kill = agent_last_step(ap);
	sleep_ms(300);
	struct alog l;
	alog_wait(ap, at_kill + 100, 10000, &l);
	for (int64_t s = at_kill; s <= at_kill + 100; s++)
		alog_expect(&l, ap, s, standing.s);
	alog_free(&l);

	/* A new daemon on the same socket and state: the agent comes back by itself. */
	daemon_start(&e);
	c = client(&e);
	uint64_t t0 = now_ms();
	struct ainfo ai;
	while (!agent_lookup(c, ap->name, &ai, NULL)) {
		agent_assert_alive(ap);
		ASSERT(now_ms() - t0 < 5000, "agent did not reconnect within 5 s");
		sleep_ms(10);
	}
	ASSERT_STR(ai.enabled, standing.s, "restored standing set");
	ASSERT(ai.control_version > 0, "restored control version %llu",
	       (unsigned long long)ai.control_version);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, want, "show_plan after the restart");
	/* And it still runs that set. */
	int64_t now = agent_last_step(ap);
	alog_wait(ap, now + 20, 10000, &l);
	for (int64_t s = at_kill; s <= now + 20; s++)
		alog_expect(&l, ap, s, standing.s);
	alog_free(&l);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

START_TEST(test_stale_socket)
{
	struct env e;
	env_setup(&e);
	/* A second daemon on a live socket refuses to start; the first keeps serving. */
	char second_log[PATH_MAX];
	snprintf(second_log, sizeof(second_log), "%s/second.log", e.dir);
	pid_t second = daemon_spawn(&e, second_log);
	int st = 0;
	bool done = wait_exit(second, 20000, &st);
	if (!done) {
		kill(second, SIGKILL);
		waitpid(second, &st, 0);
	}
	ASSERT(done, "a second daemon on a live socket is still running");
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) != 0, "second daemon ended with %s",
	       status_text(st));
	ASSERT(file_contains(second_log, "already listening"),
	       "second daemon's log does not say why it did not start");
	daemon_alive(&e, "a second daemon tried to start");

	/* SIGKILL leaves the socket file; the next daemon replaces it. */
	daemon_kill9(&e);
	struct stat sb;
	ASSERT(lstat(e.sock, &sb) == 0 && S_ISSOCK(sb.st_mode), "socket file gone after SIGKILL");
	ASSERT(!file_contains(e.dlog, "replaced a stale socket"), "stale socket before any");
	daemon_start(&e);
	ASSERT(file_contains(e.dlog, "replaced a stale socket"),
	       "new daemon did not report the stale socket");
	daemon_alive(&e, "the restart on a stale socket");
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_restart_suite(void)
{
	Suite *s = suite_create("daemon_restart");
	TCase *tc = add_tcase(s, "restart");
	tcase_add_test(tc, test_daemon_restart);
	tcase_add_test(tc, test_conn_state);
	tcase_add_test(tc, test_stale_socket);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_restart_suite());
}
