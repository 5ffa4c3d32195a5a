/*
 * check_peer.c - the agent and the clients refuse a daemon socket that
 * another user listens on (issue 11 item 6, the agent and client side).
 *
 * A squatter, a forked child that becomes uid 65534 before listen() (the
 * kernel records who called listen() in SO_PEERCRED), plays toggled: it
 * answers Hello with a HelloReply and counts what it receives, the fds
 * that come with SCM_RIGHTS above all.  The agent must never hand it its
 * memfd, tgc_connect and togglectl must refuse it before sending a byte,
 * and TOGGLE_DAEMON_UID must make it trusted.  Becoming 65534 needs root:
 * skipped visibly otherwise.
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "peer_trust.h"
#include "tgclient.h"
#include "testutil.h"
#include "util.h"
#include "toggle.h"
#include "toggle_sim.h"

#ifndef TOGGLECTL_BIN
#error "TOGGLECTL_BIN must name togglectl (client/client.mk passes it)"
#endif

#define SQUAT_UID 65534

/* What the squatter saw, in memory shared with the test. */
struct tally {
	int conns;     /* connections accepted */
	int closed;    /* connections it finished with (EOF or error) */
	int bytes;     /* bytes received */
	int fds;       /* fds received with SCM_RIGHTS */
	int hellos;    /* Hello messages answered */
	int registers; /* RegisterAgent messages received */
};

struct squat {
	char dir[64];
	char path[128];
	pid_t pid;
	struct tally *t;
};

/* ---- the squatter (child process: no Check asserts, _exit only) ---------- */

static void squat_add(int *counter, int n)
{
	__atomic_add_fetch(counter, n, __ATOMIC_SEQ_CST);
}

static void squat_send(int fd, const Toggle__Envelope *env)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	if (tgp_frame_encode(env, &buf, &len) != 0)
		return;
	for (size_t off = 0; off < len;) {
		ssize_t k = send(fd, buf + off, len - off, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	free(buf);
}

static void squat_hello_reply(int fd, uint64_t id)
{
	Toggle__HelloReply hr = TOGGLE__HELLO_REPLY__INIT;
	hr.protocol_version = TGP_PROTOCOL_VERSION;
	hr.daemon_version = "squatter";
	hr.may_write = 1;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = id;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO_REPLY;
	env.hello_reply = &hr;
	squat_send(fd, &env);
}

/* One connection: count bytes and passed fds, answer Hello, until EOF. */
static void squat_serve(struct tally *t, int fd)
{
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct tgp_reader r;
	tgp_reader_init(&r);
	for (;;) {
		uint8_t buf[4096];
		union {
			char buf[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
		ssize_t k = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < n; i++) {
				int passed;
				memcpy(&passed, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				close(passed);
			}
			squat_add(&t->fds, n);
		}
		squat_add(&t->bytes, (int)k);
		if (tgp_reader_feed(&r, buf, (size_t)k) < 0)
			break;
		Toggle__Envelope *env = NULL;
		while (tgp_reader_next(&r, &env) == 1) {
			if (env->body_case == TOGGLE__ENVELOPE__BODY_HELLO) {
				squat_hello_reply(fd, env->id);
				squat_add(&t->hellos, 1);
			} else if (env->body_case == TOGGLE__ENVELOPE__BODY_REGISTER_AGENT) {
				squat_add(&t->registers, 1);
			}
			toggle__envelope__free_unpacked(env, NULL);
		}
	}
	tgp_reader_free(&r);
	squat_add(&t->closed, 1);
}

__attribute__((noreturn)) static void squat_child(struct squat *s, int ready, pid_t parent)
{
	struct sockaddr_un sa;
	socklen_t salen;
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || tgp_unix_address(s->path, &sa, &salen) != 0 ||
	    bind(lfd, (struct sockaddr *)&sa, salen) != 0)
		_exit(2);
	/* The uid that listen() records is the one a client sees. */
	if (setgroups(0, NULL) != 0 || setgid(SQUAT_UID) != 0 || setuid(SQUAT_UID) != 0 ||
	    geteuid() != SQUAT_UID || listen(lfd, 8) != 0)
		_exit(3);
	/* Die with the test (a failed assert ends it early); set after setuid, which clears it. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(6);
	if (write(ready, "r", 1) != 1)
		_exit(4);
	close(ready);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			_exit(5);
		}
		squat_add(&s->t->conns, 1);
		squat_serve(s->t, fd);
		close(fd);
	}
}

/* Start the squatter at a fresh path; false (test skipped) when not root. */
static bool squat_start(struct squat *s)
{
	memset(s, 0, sizeof(*s));
	if (geteuid() != 0)
		return false;
	s->t = mmap(NULL, sizeof(*s->t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_msg(s->t != MAP_FAILED, "mmap: %s", strerror(errno));
	snprintf(s->dir, sizeof(s->dir), "/tmp/tgpeer-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	snprintf(s->path, sizeof(s->path), "%s/toggled.sock", s->dir);
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t parent = getpid();
	s->pid = fork();
	ck_assert_int_ge(s->pid, 0);
	if (s->pid == 0) {
		close(p[0]);
		squat_child(s, p[1], parent);
	}
	close(p[1]);
	struct pollfd pf = {.fd = p[0], .events = POLLIN};
	char ch = 0;
	int ok = poll(&pf, 1, 5000) == 1 && read(p[0], &ch, 1) == 1 && ch == 'r';
	close(p[0]);
	if (!ok) {
		int st = 0;
		kill(s->pid, SIGKILL);
		waitpid(s->pid, &st, 0);
		ck_abort_msg("the squatter did not start (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	return true;
}

static int64_t mono_ms(void)
{
	return (int64_t)util_mono_ms();
}

static int tally_get(int *counter)
{
	return __atomic_load_n(counter, __ATOMIC_SEQ_CST);
}

/* Wait until the squatter has accepted at least min connections (a client
 * may be gone before it accepts) and finished with every one of them. */
static void squat_settle(struct squat *s, int min)
{
	int64_t end = mono_ms() + 10000;
	while (tally_get(&s->t->conns) < min ||
	       tally_get(&s->t->closed) < tally_get(&s->t->conns)) {
		ck_assert_msg(mono_ms() < end, "the squatter accepted %d of %d connection(s), "
			      "finished %d", tally_get(&s->t->conns), min, tally_get(&s->t->closed));
		poll(NULL, 0, 5);
	}
}

static void squat_stop(struct squat *s)
{
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
	unlink(s->path);
	rmdir(s->dir);
	munmap(s->t, sizeof(*s->t));
}

/* ---- the uid list (no root needed) ---------------------------------------- */

START_TEST(test_trust_list)
{
	ck_assert_int_eq(tgp_trust_listed("65534", 65534), 1);
	ck_assert_int_eq(tgp_trust_listed("1,2,65534", 65534), 1);
	ck_assert_int_eq(tgp_trust_listed("0", 0), 1);
	ck_assert_int_eq(tgp_trust_listed("4294967294", 4294967294u), 1);
	ck_assert_int_eq(tgp_trust_listed("65534", 6553), 0);
	ck_assert_int_eq(tgp_trust_listed("6553", 65534), 0);
	ck_assert_int_eq(tgp_trust_listed("", 65534), 0); /* empty = unset */
	ck_assert_int_eq(tgp_trust_listed("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", 16), 1);
	static const char *const bad[] = {"x", ",", "1,", ",1", "1,,2", " 1", "1 ", "+1", "-1",
					  "0x10", "4294967295", "00000000001", "1;2",
					  "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(tgp_trust_listed(bad[i], 1) == -1, "'%s' accepted", bad[i]);
	/* Past TGP_TRUST_ENV_MAX bytes, and at it with 128 uids: refused (a
	 * valid list of 16 uids is at most 175 bytes). */
	char big[TGP_TRUST_ENV_MAX + 2];
	memset(big, '0', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (size_t i = 1; i < sizeof(big) - 1; i += 2)
		big[i] = ',';
	ck_assert_int_eq(tgp_trust_listed(big, 0), -1);
	big[TGP_TRUST_ENV_MAX] = '\0';
	ck_assert_int_eq(tgp_trust_listed(big, 0), -1);
}
END_TEST

/* ---- the client library -------------------------------------------------- */

START_TEST(test_client_refuses_other_uid)
{
	struct squat s;
	unsetenv(TGP_TRUST_ENV);
	if (!squat_start(&s))
		TU_SKIP(TU_SKIP_ROOT, "needs root to listen as uid %d", SQUAT_UID);
	struct tgc *c = NULL;
	char err[1024];
	int rc = tgc_connect(s.path, 3000, &c, err, sizeof(err));
	ck_assert_msg(rc == TOGGLE_ECONNECT && c == NULL, "tgc_connect: %d (%s)", rc, err);
	ck_assert_msg(strstr(err, s.path), "the socket is named: %s", err);
	ck_assert_msg(strstr(err, "uid 65534"), "the listener's uid is named: %s", err);
	ck_assert_msg(strstr(err, "TOGGLE_DAEMON_UID=65534"), "the way to trust it: %s", err);
	squat_settle(&s, 1);
	ck_assert_msg(tally_get(&s.t->bytes) == 0, "the squatter received %d bytes",
		      tally_get(&s.t->bytes));
	squat_stop(&s);
}
END_TEST

START_TEST(test_client_trusts_listed_uid)
{
	struct squat s;
	if (!squat_start(&s))
		TU_SKIP(TU_SKIP_ROOT, "needs root to listen as uid %d", SQUAT_UID);
	struct tgc *c = NULL;
	char err[1024];
	ck_assert_int_eq(setenv(TGP_TRUST_ENV, "1,65534", 1), 0);
	int rc = tgc_connect(s.path, 3000, &c, err, sizeof(err));
	ck_assert_msg(rc == 0 && c, "listed in TOGGLE_DAEMON_UID: %d (%s)", rc, err);
	ck_assert_str_eq(tgc_daemon_version(c), "squatter");
	tgc_close(c);
	/* Malformed: trusts nobody beyond root and us, and says why. */
	static const char *const bad[] = {"65534x", "65534,", ",65534", "65534 ", "-1",
					  "4294967295", "99999999999",
					  "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,65534"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(setenv(TGP_TRUST_ENV, bad[i], 1), 0);
		c = NULL;
		rc = tgc_connect(s.path, 3000, &c, err, sizeof(err));
		ck_assert_msg(rc == TOGGLE_ECONNECT && !c, "'%s': %d (%s)", bad[i], rc, err);
		ck_assert_msg(strstr(err, "TOGGLE_DAEMON_UID is malformed"), "'%s': %s", bad[i], err);
	}
	/* Empty is unset; another uid is not this one. */
	static const char *const other[] = {"", "1000", "6553", "655340"};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		ck_assert_int_eq(setenv(TGP_TRUST_ENV, other[i], 1), 0);
		c = NULL;
		rc = tgc_connect(s.path, 3000, &c, err, sizeof(err));
		ck_assert_msg(rc == TOGGLE_ECONNECT && !c, "'%s': %d (%s)", other[i], rc, err);
		ck_assert_msg(strstr(err, "set TOGGLE_DAEMON_UID=65534"), "'%s': %s", other[i], err);
	}
	squat_settle(&s, (int)(1 + sizeof(bad) / sizeof(bad[0]) + sizeof(other) / sizeof(other[0])));
	ck_assert_int_eq(tally_get(&s.t->hellos), 1);
	squat_stop(&s);
	unsetenv(TGP_TRUST_ENV);
}
END_TEST

/* togglectl: exit 3 (cannot connect) with the message, nothing sent. */
START_TEST(test_togglectl_refuses_other_uid)
{
	struct squat s;
	unsetenv(TGP_TRUST_ENV);
	if (!squat_start(&s))
		TU_SKIP(TU_SKIP_ROOT, "needs root to listen as uid %d", SQUAT_UID);
	char cmd[512], out[4096] = "";
	snprintf(cmd, sizeof(cmd), "%s --socket %s status 2>&1", TOGGLECTL_BIN, s.path);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 3, "togglectl exit %d: %s",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
	ck_assert_msg(strstr(out, "uid 65534") && strstr(out, "TOGGLE_DAEMON_UID=65534") &&
		      strstr(out, s.path), "togglectl says: %s", out);
	snprintf(cmd, sizeof(cmd), "%s --json --socket %s status 2>&1", TOGGLECTL_BIN, s.path);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	st = pclose(p);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 3 && strstr(out, "\"ECONNECT\""),
		      "togglectl --json exit %d: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
	squat_settle(&s, 2);
	ck_assert_msg(tally_get(&s.t->bytes) == 0, "the squatter received %d bytes",
		      tally_get(&s.t->bytes));
	squat_stop(&s);
}
END_TEST

/* ---- the agent ------------------------------------------------------------ */

static const char *const type_names[] = {"resid_post", "attn_out"};

static struct toggle_agent *agent_open(struct toggle_sim **sim, const char *path)
{
	ck_assert_int_eq(toggle_sim_create(sim), 0);
	struct toggle_config cfg = {
		.name = "peer-probe", .group = "g",
		.catalog = {.type_names = type_names, .n_types = 2, .n_layers = 4},
		.backend = TOGGLE_BACKEND_SIM, .sim = *sim, .socket_path = path,
	};
	struct toggle_agent *a = NULL;
	int rc = toggle_agent_open(&cfg, &a);
	ck_assert_msg(rc == 0, "toggle_agent_open: %d", rc);
	return a;
}

START_TEST(test_agent_never_sends_memfd)
{
	struct squat s;
	unsetenv(TGP_TRUST_ENV);
	if (!squat_start(&s))
		TU_SKIP(TU_SKIP_ROOT, "needs root to listen as uid %d", SQUAT_UID);
	struct toggle_sim *sim;
	struct toggle_agent *a = agent_open(&sim, s.path);
	/* Two refused attempts: it keeps retrying with its backoff. */
	struct toggle_conn_info ci;
	int64_t end = mono_ms() + 10000;
	do {
		ck_assert_msg(mono_ms() < end, "no two failed attempts within 10 s");
		poll(NULL, 0, 5);
		ck_assert_int_eq(toggle_conn_get(a, &ci), 0);
	} while (ci.failures < 2);
	toggle_agent_close(a);
	toggle_sim_destroy(sim);
	squat_settle(&s, 2);
	ck_assert_msg(tally_get(&s.t->fds) == 0, "the squatter received %d fd(s)",
		      tally_get(&s.t->fds));
	ck_assert_msg(tally_get(&s.t->bytes) == 0 && tally_get(&s.t->registers) == 0,
		      "the squatter received %d bytes, %d registrations", tally_get(&s.t->bytes),
		      tally_get(&s.t->registers));
	ck_assert_msg(ci.state == TOGGLE_CONN_CONNECTING && ci.sessions == 0 && ci.agent_id == 0,
		      "state %s", toggle_conn_state_name(ci.state));
	ck_assert_msg(strstr(ci.last_error, "untrusted daemon") && strstr(ci.last_error, s.path) &&
		      strstr(ci.last_error, "uid 65534") &&
		      strstr(ci.last_error, "TOGGLE_DAEMON_UID=65534"), "last error: %s", ci.last_error);
	squat_stop(&s);
}
END_TEST

/* TOGGLE_DAEMON_UID, read when the agent opens, trusts that listener. */
START_TEST(test_agent_trusts_listed_uid)
{
	struct squat s;
	if (!squat_start(&s))
		TU_SKIP(TU_SKIP_ROOT, "needs root to listen as uid %d", SQUAT_UID);
	ck_assert_int_eq(setenv(TGP_TRUST_ENV, "65534", 1), 0);
	struct toggle_sim *sim;
	struct toggle_agent *a = agent_open(&sim, s.path);
	unsetenv(TGP_TRUST_ENV); /* already read */
	int64_t end = mono_ms() + 10000;
	while (tally_get(&s.t->fds) < 1) {
		ck_assert_msg(mono_ms() < end, "no registration within 10 s");
		poll(NULL, 0, 5);
	}
	toggle_agent_close(a);
	toggle_sim_destroy(sim);
	squat_settle(&s, 1);
	ck_assert_int_ge(tally_get(&s.t->registers), 1);
	squat_stop(&s);
}
END_TEST

static Suite *peer_suite(void)
{
	Suite *s = suite_create("peer");
	TCase *tc = tcase_create("list");
	tcase_add_test(tc, test_trust_list);
	suite_add_tcase(s, tc);
	tc = tcase_create("client");
	tcase_add_test(tc, test_client_refuses_other_uid);
	tcase_add_test(tc, test_client_trusts_listed_uid);
	tcase_add_test(tc, test_togglectl_refuses_other_uid);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	tc = tcase_create("agent");
	tcase_add_test(tc, test_agent_never_sends_memfd);
	tcase_add_test(tc, test_agent_trusts_listed_uid);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(peer_suite());
}
