/*
 * check_daemon_durability.c - end-to-end tests of toggled: the saved state: a full disk, name squatting, corrupt state, pipelined writes.
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
 * Name squatting: an agent of another uid that registers under a root
 * agent's name gets nothing of its saved state, and what is set for it is
 * not what the root agent gets back after a restart (state keyed by name
 * and uid).
 */
START_TEST(test_name_squatting)
{
	if (geteuid() != 0)
		TU_SKIP(TU_SKIP_ROOT, "needs root to become uid %d", NOBODY);
	struct env e;
	env_setup(&e);
	ASSERT(chmod(e.dir, 0755) == 0, "chmod %s: %s", e.dir, strerror(errno));
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "shared", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	struct ainfo root_ai = agent_wait_listed(c, ap, 1);
	struct spec root_set = canon("attn_out:1-2"), other_set = canon("resid_post:0");
	Toggle__Selector root_sel = sel_id(root_ai.id);
	set_applied(c, &root_sel, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:1-2");

	/* The same name from uid nobody: registered, but nothing of root's state restored. */
	int b = agent_start(&e, &(struct agent_opts){.name = "shared", .group = "g", .steps = true,
						     .uid = NOBODY});
	struct agent_proc *bp = &e.agents[b];
	struct ainfo nb;
	uint64_t end = now_ms() + 10000;
	for (;;) {
		Toggle__Envelope *rep = NULL;
		char err[ERRLEN];
		Toggle__Selector ps = sel_pid((uint32_t)bp->pid);
		int rc = rpc_list_agents(c, &ps, &rep, err);
		bool found = rc == 0 && rep->agents->n_agents == 1 && rep->agents->agents[0]->step >= 1;
		if (found)
			ainfo_copy(&nb, rep->agents->agents[0]);
		if (rep)
			toggle__envelope__free_unpacked(rep, NULL);
		if (found)
			break;
		agent_assert_alive(bp);
		ASSERT(now_ms() < end, "the nobody agent did not register within 10 s");
		sleep_ms(10);
	}
	ASSERT(nb.uid == NOBODY, "uid %u", nb.uid);
	ASSERT(nb.control_version == 0, "the squatter got control version %llu (root's saved state)",
	       (unsigned long long)nb.control_version);
	ASSERT(strcmp(nb.enabled, root_set.s) != 0, "the squatter runs root's set %s", nb.enabled);

	/* Root sets another set on the squatter's agent; root's own saved set stays. */
	Toggle__Selector other_sel = sel_id(nb.id);
	set_applied(c, &other_sel, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:0");
	tgc_close(c);
	daemon_kill9(&e);
	daemon_start(&e);
	c = client(&e);
	end = now_ms() + 5000;
	for (;;) {
		struct ainfo r, o;
		Toggle__Selector rs = sel_pid((uint32_t)ap->pid), os = sel_pid((uint32_t)bp->pid);
		Toggle__Envelope *rep = NULL, *rep2 = NULL;
		char err[ERRLEN];
		bool both = rpc_list_agents(c, &rs, &rep, err) == 0 && rep->agents->n_agents == 1 &&
			    rpc_list_agents(c, &os, &rep2, err) == 0 && rep2->agents->n_agents == 1;
		if (both) {
			ainfo_copy(&r, rep->agents->agents[0]);
			ainfo_copy(&o, rep2->agents->agents[0]);
		}
		if (rep)
			toggle__envelope__free_unpacked(rep, NULL);
		if (rep2)
			toggle__envelope__free_unpacked(rep2, NULL);
		if (both) {
			ASSERT_STR(r.enabled, root_set.s, "root's agent after the restart");
			ASSERT_STR(o.enabled, other_set.s, "the other uid's agent after the restart");
			break;
		}
		agent_assert_alive(ap);
		agent_assert_alive(bp);
		ASSERT(now_ms() < end, "agents did not reconnect within 5 s");
		sleep_ms(10);
	}
	/* Two keys: one per (name, uid). */
	char path[PATH_MAX + 64], key[64];
	snprintf(path, sizeof(path), "%s/agents.journal", e.state);
	snprintf(key, sizeof(key), "\"name\":\"shared@%d\"", NOBODY);
	ASSERT(file_contains(path, key), "%s has no entry %s", path, key);
	ASSERT(file_contains(path, "\"name\":\"shared\""), "%s has no entry for root's", path);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* Durability: a full disk                                                   */
/* ======================================================================== */

/* Lines of path that contain needle. */
static int file_count(const char *path, const char *needle)
{
	char *text = file_read(path);
	int n = 0;
	for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	free(text);
	return n;
}

/* Write zeros to path until the file system is full. */
static void disk_fill(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ASSERT(fd >= 0, "open %s: %s", path, strerror(errno));
	static const char zeros[4096];
	for (;;) {
		ssize_t w = write(fd, zeros, sizeof(zeros));
		if (w < 0 && errno == ENOSPC)
			break;
		ASSERT(w > 0, "filling %s: %s", path, strerror(errno));
	}
	close(fd);
}

/*
 * A corrupt state file does not keep the daemon from starting: it is set
 * aside (renamed, logged once) and the others are restored; --strict-state
 * keeps the old refusal.
 */
START_TEST(test_corrupt_state_set_aside)
{
	struct env e;
	env_setup(&e);
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "keeper", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);
	struct spec kept = canon("attn_out:3");
	set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:3");
	tgc_close(c);
	daemon_stop(&e);
	char bad[PATH_MAX + 32];
	snprintf(bad, sizeof(bad), "%s/agents/broken.json", e.state);
	FILE *f = fopen(bad, "w");
	ASSERT(f && fputs("{\"format\": 1, \"name\": ", f) >= 0 && fclose(f) == 0, "write %s", bad);

	/* Strict: refused, as before. */
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_detach(parent);
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
			_exit(126);
		execl(TOGGLED_BIN, "toggled", "--socket", e.sock, "--state-dir", e.state,
		      "--strict-state", (char *)NULL);
		_exit(127);
	}
	int st = 0;
	ASSERT(wait_exit(pid, 20000, &st), "toggled --strict-state did not exit on a corrupt file");
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 127,
	       "toggled --strict-state ended with %s", status_text(st));
	ASSERT(access(bad, F_OK) == 0, "--strict-state moved the corrupt file");

	/* Default: starts, sets the file aside, restores the rest. */
	daemon_start(&e);
	ASSERT(access(bad, F_OK) != 0, "the corrupt file is still in place");
	ASSERT(file_count(e.dlog, "broken.json: ") == 1 && file_count(e.dlog, "set aside as") == 1,
	       "the corrupt file was not logged once");
	c = client(&e);
	uint64_t t0 = now_ms();
	struct ainfo ai;
	while (!agent_lookup(c, ap->name, &ai, NULL)) {
		agent_assert_alive(ap);
		ASSERT(now_ms() - t0 < 5000, "agent did not reconnect within 5 s");
		sleep_ms(10);
	}
	ASSERT_STR(ai.enabled, kept.s, "restored standing set");
	tgc_close(c);
	/* The next start does not log it again. */
	daemon_alive(&e, "restart");
	daemon_stop(&e);
	daemon_start(&e);
	ASSERT(file_count(e.dlog, "set aside as") == 1, "the set-aside file was logged again");
	env_teardown(&e);
}
END_TEST

/*
 * Replies leave in request order per connection, a write's after its save:
 * pipelined writes and reads (one spec that fails among them) on one
 * connection while two other connections pipeline writes to the same agent;
 * the last acknowledged set is what the agent ends up with.
 */
START_TEST(test_pipelined_order)
{
	struct env e;
	env_setup(&e);
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "order", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);
	enum { N = 120, OTHERS = 9 }; /* more writers than a turn reads and writes (BUSY_IO_PER_TURN) */
	struct raw r[1 + OTHERS];
	for (int k = 0; k <= OTHERS; k++) {
		raw_open(&r[k], &e);
		raw_hello(&r[k]);
	}
	static const char *const specs[3] = {"attn_out:0", "resid_post:1-2", "attn_out:3"};
	Toggle__SetEnabledRequest se = TOGGLE__SET_ENABLED_REQUEST__INIT;
	Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__ListAgentsRequest la = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	se.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	for (uint64_t i = 0; i < N; i++) {
		for (int k = 0; k <= OTHERS; k++) {
			Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
			env.id = 1000 + i;
			if (k == 0 && i % 3 == 1) {
				env.body_case = i % 2 ? TOGGLE__ENVELOPE__BODY_STATUS
						      : TOGGLE__ENVELOPE__BODY_LIST_AGENTS;
				if (i % 2)
					env.status = &st;
				else
					env.list_agents = &la;
			} else {
				se.spec = (char *)(uintptr_t)(k == 0 && i == 50 ? "no_such_hook:1"
										 : specs[(i + (uint64_t)k) % 3]);
				env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
				env.set_enabled = &se;
			}
			raw_send_env(&r[k], &env, -1);
		}
	}
	for (int k = 0; k <= OTHERS; k++) {
		for (uint64_t i = 0; i < N; i++) {
			Toggle__Envelope *rep = NULL;
			int got = raw_recv(&r[k], &rep, RPC_TIMEOUT_MS);
			ASSERT(got == 1, "connection %d: no reply %llu", k, (unsigned long long)i);
			ASSERT(rep->id == 1000 + i, "connection %d: reply %llu where %llu was due", k,
			       (unsigned long long)rep->id, (unsigned long long)(1000 + i));
			Toggle__Envelope__BodyCase want =
				k == 0 && i % 3 == 1 ? (i % 2 ? TOGGLE__ENVELOPE__BODY_STATUS_REPLY
							      : TOGGLE__ENVELOPE__BODY_AGENTS)
				: k == 0 && i == 50 ? TOGGLE__ENVELOPE__BODY_ERROR
						    : TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY;
			ASSERT(rep->body_case == want, "connection %d, reply %llu: body %d, expected %d", k,
			       (unsigned long long)i, (int)rep->body_case, (int)want);
			toggle__envelope__free_unpacked(rep, NULL);
		}
	}
	/* One more acknowledged set from connection 0, after everything: it holds. */
	char err[ERRLEN];
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	se.spec = (char *)(uintptr_t)"resid_post:3";
	env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	env.set_enabled = &se;
	int rc = raw_call(&r[0], &env, -1, TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY, err);
	ASSERT_CODE(rc, 0, err);
	struct ainfo ai = agent_info(c, ap->name);
	ASSERT_STR(ai.enabled, canon("resid_post:3").s, "enabled after the pipelined writes");
	for (int k = 0; k <= OTHERS; k++)
		raw_close(&r[k]);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * The state directory on a small tmpfs (a private mount namespace: it goes
 * away with the test process), then filled: every write is refused with
 * TOGGLE_EIO and the reason, nothing of it reaches the agent or the saved
 * state, the failure is counted in status and logged once; once there is
 * room again writes go through, and a kill -9 loses none of them.
 */
START_TEST(test_full_disk)
{
	if (geteuid() != 0)
		TU_SKIP(TU_SKIP_ROOT, "needs root for a tmpfs of its own");
	/*
	 * The tmpfs must not show outside this process: a mount namespace of
	 * its own, every mount in it private.  Where / is not a mount point (a
	 * plain chroot, e.g. debootstrap's root not bind-mounted onto itself)
	 * there is no mount to make private (EINVAL), and where the machine
	 * refuses new namespaces (a container without CAP_SYS_ADMIN) there is
	 * no namespace: the test cannot run there, and says so.
	 */
	if (unshare(CLONE_NEWNS) != 0)
		TU_SKIP(TU_SKIP_ENV, "no mount namespace of its own here (unshare: %s)", strerror(errno));
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		ASSERT(errno == EINVAL, "mount private: %s", strerror(errno));
		TU_SKIP(TU_SKIP_ENV, "/ is not a mount point (a chroot?): its mounts cannot be made "
				     "private (mount: %s)", strerror(errno));
	}
	struct env e;
	env_setup(&e);
	daemon_alive(&e, "start"); /* serving: its signal handlers are in place */
	daemon_stop(&e);
	ASSERT(mkdir(e.state, 0700) == 0 || errno == EEXIST, "mkdir: %s", strerror(errno));
	ASSERT(mount("tmpfs", e.state, "tmpfs", 0, "size=512k,mode=0700") == 0, "mount tmpfs: %s",
	       strerror(errno));
	daemon_start(&e);
	char err[ERRLEN], filler[PATH_MAX + 16], text[1024];
	snprintf(filler, sizeof(filler), "%s/filler", e.state);
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "engine", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);
	struct spec later = canon("resid_post:0");
	uint64_t v0 = set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:1-2");
	static const char *const specs[1] = {"resid_post:3"};
	static const int64_t far[1] = {100000};
	int64_t base = plan_ahead(c, ap->name, far, specs, 1);
	char want_plan[SPEC_LEN + 32];
	snprintf(want_plan, sizeof(want_plan), "+100000=%s;", canon(specs[0]).s);

	disk_fill(filler);
	/*
	 * Writes may still fit in the journal's last block: each one either is
	 * acknowledged (then durable) or refused; within a few dozen the block
	 * is full and they are refused.
	 */
	static const char *const alt[2] = {"attn_out:0", "attn_out:1-2"};
	const char *last_ok = "attn_out:1-2";
	uint64_t v1 = v0;
	int tries = 0, rc;
	for (;; tries++) {
		ASSERT(tries < 400, "400 writes acknowledged on a full disk");
		Toggle__Envelope *rep = NULL;
		rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, alt[tries & 1], WAIT_MS, &rep, err);
		if (rc == 0) {
			last_ok = alt[tries & 1];
			v1 = rep->set_enabled_reply->versions[0]->version;
		}
		if (rep)
			toggle__envelope__free_unpacked(rep, NULL);
		if (rc != 0)
			break;
	}
	ASSERT_CODE(rc, TOGGLE_EIO, err);
	printf("test_full_disk: %d writes acknowledged after the fill, then EIO\n", tries);
	struct spec good = canon(last_ok);
	int64_t full_at = agent_last_step(ap);
	/* Every kind of write: refused with EIO and why, several times over. */
	for (int i = 0; i < 4; i++) {
		Toggle__Envelope *rep = NULL;
		rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:0", i & 1 ? WAIT_MS : 0,
				 &rep, err);
		if (rep)
			toggle__envelope__free_unpacked(rep, NULL);
		ASSERT_CODE(rc, TOGGLE_EIO, err);
		ASSERT(strstr(err, "No space left on device") && strstr(err, "/agents.journal"),
		       "EIO without the reason: %s", err);
	}
	int64_t steps2[1] = {base + 200000};
	rc = rpc_plan(c, NULL, steps2, specs, 1, err);
	ASSERT_CODE(rc, TOGGLE_EIO, err);
	rc = rpc_clear_plan(c, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EIO, err);
	rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_ADD, "resid_post:1", 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EIO, err);

	/* Nothing of it applied: the accepted state, the lane and the agent keep the old set. */
	struct ainfo ai = agent_info(c, ap->name);
	ASSERT_STR(ai.enabled, good.s, "enabled after refused writes");
	ASSERT(ai.control_version == v1, "control version %llu after refused writes, was %llu",
	       (unsigned long long)ai.control_version, (unsigned long long)v1);
	plan_text(c, base, text, sizeof(text));
	ASSERT_STR(text, want_plan, "show_plan after refused writes");
	int64_t now = agent_last_step(ap);
	struct alog l;
	alog_wait(ap, now + 20, 10000, &l);
	for (int64_t st = full_at; st <= now + 20; st++)
		alog_expect(&l, ap, st, good.s);
	alog_free(&l);

	/* Counted in status, with the reason; logged once, not once per write. */
	Toggle__Envelope *rep = NULL;
	rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->status_reply->save_errors >= 1,
	       "status counts %llu failed saves", (unsigned long long)rep->status_reply->save_errors);
	ASSERT(rep->status_reply->save_error[0] &&
	       strstr(rep->status_reply->save_error, "No space left on device"),
	       "status gives no reason: %s",
	       rep->status_reply->save_error[0] ? rep->status_reply->save_error : "(none)");
	toggle__envelope__free_unpacked(rep, NULL);
	int logged = file_count(e.dlog, "cannot save the desired state");
	ASSERT(logged == 1, "the failure was logged %d times, expected once", logged);

	/* Room again: the next write goes through and is applied. */
	ASSERT(unlink(filler) == 0, "unlink: %s", strerror(errno));
	uint64_t v2 = set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:0");
	ASSERT(v2 > v1, "version %llu after %llu", (unsigned long long)v2, (unsigned long long)v1);
	ASSERT(file_count(e.dlog, "saved under") == 1, "the recovery was not logged once");
	rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(!rep->status_reply->save_error[0], "status still failing: %s",
	       rep->status_reply->save_error);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);

	/* kill -9: what was acknowledged comes back, what was refused does not. */
	daemon_kill9(&e);
	daemon_start(&e);
	c = client(&e);
	uint64_t t0 = now_ms();
	while (!agent_lookup(c, ap->name, &ai, NULL)) {
		agent_assert_alive(ap);
		ASSERT(now_ms() - t0 < 5000, "agent did not reconnect within 5 s");
		sleep_ms(10);
	}
	ASSERT_STR(ai.enabled, later.s, "restored standing set");
	plan_text(c, base, text, sizeof(text));
	ASSERT_STR(text, want_plan, "show_plan after the restart");
	tgc_close(c);
	for (int i = 0; i < e.n_agents; i++)
		agent_stop(&e, i);
	daemon_stop(&e);
	ASSERT(umount2(e.state, MNT_DETACH) == 0, "umount: %s", strerror(errno));
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_durability_suite(void)
{
	Suite *s = suite_create("daemon_durability");
	TCase *tc = add_tcase(s, "durability");
	tcase_add_test(tc, test_full_disk);
	tcase_add_test(tc, test_name_squatting);
	tcase_add_test(tc, test_corrupt_state_set_aside);
	tcase_add_test(tc, test_pipelined_order);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_durability_suite());
}
