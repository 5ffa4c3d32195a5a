/*
 * check_client.c - tests of the client library (client/tgclient.c) against
 * a scripted fake daemon: a thread on a listening socket in a private
 * directory that answers Hello well or badly, interleaves events, sends
 * malformed frames, closes early or never answers.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "tgclient.h"
#include "testutil.h"
#include "util.h"

#define T_OK_MS 5000     /* generous timeout for calls that must succeed */
#define FLOOD   1100     /* events sent before one reply: more than the queue */

enum scenario {
	SC_OK,            /* HelloReply, then Status -> StatusReply, others -> Ack */
	SC_VERSION,       /* Error{VERSION} to Hello */
	SC_WRONG_VERSION, /* HelloReply announcing protocol 99 */
	SC_EVENT_FIRST,   /* an event and a stale reply before each reply */
	SC_CLOSE_HELLO,   /* closes after reading Hello */
	SC_CLOSE_CALL,    /* closes after reading the first request */
	SC_SILENT_HELLO,  /* never answers Hello */
	SC_SILENT_CALL,   /* never answers the first request */
	SC_ERROR_REPLY,   /* Error{PERM, agents} to the first request */
	SC_BAD_CODE,      /* Error{12345}, then Error{0} */
	SC_ERROR_ID0,     /* Error with id 0, then closes */
	SC_FLOOD,         /* FLOOD events, then the reply */
	SC_OVERSIZE,      /* a header announcing TGP_MAX_FRAME + 1 */
	SC_RAW,           /* records the raw bytes it receives */
	SC_EVENTS_LATER,  /* Ack to Watch, then later two events, then closes */
};

struct fake {
	enum scenario sc;
	char dir[64];
	char path[128];
	int lfd;
	pthread_t th;
	char fail[256];        /* first server-side check that failed */
	char client[64];       /* Hello.client as received */
	uint8_t raw[64];
	size_t raw_n;
};

/* ---- the fake daemon ---------------------------------------------------- */

static void fake_fail(struct fake *f, const char *what)
{
	if (!f->fail[0])
		snprintf(f->fail, sizeof(f->fail), "fake daemon: %s", what);
}

/* Blocking read of the next envelope; NULL when the client went away. */
static Toggle__Envelope *srv_read(int fd, struct tgp_reader *r)
{
	for (;;) {
		Toggle__Envelope *env = NULL;
		int rc = tgp_reader_next(r, &env);
		if (rc == 1)
			return env;
		if (rc < 0)
			return NULL;
		uint8_t buf[4096];
		ssize_t k = recv(fd, buf, sizeof(buf), 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || tgp_reader_feed(r, buf, (size_t)k) < 0)
			return NULL;
	}
}

static void srv_write(struct fake *f, int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			fake_fail(f, "send failed");
			return;
		}
		b += k;
		n -= (size_t)k;
	}
}

static void srv_send(struct fake *f, int fd, const Toggle__Envelope *env)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	if (tgp_frame_encode(env, &buf, &len)) {
		fake_fail(f, "cannot encode");
		return;
	}
	srv_write(f, fd, buf, len);
	free(buf);
}

static void srv_hello_reply(struct fake *f, int fd, uint64_t id, uint32_t version)
{
	Toggle__HelloReply hr = TOGGLE__HELLO_REPLY__INIT;
	hr.protocol_version = version;
	hr.daemon_version = "fake 1.0\x1b[31m";   /* the escape must not survive */
	hr.may_write = 1;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = id;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO_REPLY;
	env.hello_reply = &hr;
	srv_send(f, fd, &env);
}

static void srv_error(struct fake *f, int fd, uint64_t id, int32_t code, char *msg,
		      size_t n_agents, char **agents)
{
	Toggle__Error e = TOGGLE__ERROR__INIT;
	e.code = code;
	e.message = msg;
	e.n_agents = n_agents;
	e.agents = agents;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = id;
	env.body_case = TOGGLE__ENVELOPE__BODY_ERROR;
	env.error = &e;
	srv_send(f, fd, &env);
}

static void srv_event(struct fake *f, int fd, const char *name, uint64_t version)
{
	Toggle__Event ev = TOGGLE__EVENT__INIT;
	ev.kind = TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED;
	ev.agent_id = 1;
	ev.agent_name = (char *)(uintptr_t)name;
	ev.version = version;
	ev.unix_ms = 1;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_EVENT;
	env.event = &ev;
	srv_send(f, fd, &env);
}

/* The normal answer to a request: StatusReply to Status, Ack to the rest. */
static void srv_answer(struct fake *f, int fd, const Toggle__Envelope *req)
{
	Toggle__StatusReply st = TOGGLE__STATUS_REPLY__INIT;
	Toggle__Ack ack = TOGGLE__ACK__INIT;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = req->id;
	if (req->body_case == TOGGLE__ENVELOPE__BODY_STATUS) {
		st.daemon_version = "fake 1.0";
		st.protocol_version = TGP_PROTOCOL_VERSION;
		st.socket = f->path;
		st.state_dir = "/nowhere";
		st.requests = req->id;
		env.body_case = TOGGLE__ENVELOPE__BODY_STATUS_REPLY;
		env.status_reply = &st;
	} else {
		env.body_case = TOGGLE__ENVELOPE__BODY_ACK;
		env.ack = &ack;
	}
	srv_send(f, fd, &env);
}

/* Wait for the client to hang up (scenarios that must not close first). */
static void srv_wait_close(int fd)
{
	uint8_t buf[256];
	for (;;) {
		ssize_t k = recv(fd, buf, sizeof(buf), 0);
		if (k <= 0 && !(k < 0 && errno == EINTR))
			return;
	}
}

static void srv_raw(struct fake *f, int fd, struct tgp_reader *r)
{
	/* Bytes that came with the Hello are already in the reader. */
	size_t have = tgp_reader_pending(r);
	if (have > sizeof(f->raw))
		have = sizeof(f->raw);
	if (have)
		memcpy(f->raw, r->buf + r->off, have);
	f->raw_n = have;
	while (f->raw_n < 8) {
		ssize_t k = recv(fd, f->raw + f->raw_n, sizeof(f->raw) - f->raw_n, 0);
		if (k <= 0)
			break;
		f->raw_n += (size_t)k;
	}
}

/* Everything after a good Hello, per scenario. */
static void srv_script(struct fake *f, int fd, struct tgp_reader *r, uint64_t hello_id)
{
	static char *agents[] = { "a1", "a2" };
	if (f->sc == SC_WRONG_VERSION) {
		srv_hello_reply(f, fd, hello_id, 99);
		srv_wait_close(fd);
		return;
	}
	srv_hello_reply(f, fd, hello_id, TGP_PROTOCOL_VERSION);
	if (f->sc == SC_RAW) {
		srv_raw(f, fd, r);
		return;
	}
	Toggle__Envelope *req;
	for (int n = 0; (req = srv_read(fd, r)); n++) {
		uint64_t id = req->id;
		switch (f->sc) {
		case SC_EVENT_FIRST:
			srv_event(f, fd, "e1", id);
			srv_error(f, fd, id + 1000, TOGGLE_EPERM, "stale", 0, NULL);
			srv_answer(f, fd, req);
			break;
		case SC_CLOSE_CALL:
			toggle__envelope__free_unpacked(req, NULL);
			return;
		case SC_SILENT_CALL:
			break;
		case SC_ERROR_REPLY:
			srv_error(f, fd, id, TOGGLE_EPERM, "not in group \x1b[2Jtoggle", 2, agents);
			break;
		case SC_BAD_CODE:
			srv_error(f, fd, id, n == 0 ? 12345 : 0, "odd", 0, NULL);
			break;
		case SC_ERROR_ID0:
			srv_error(f, fd, 0, TOGGLE_EPROTO, "cannot decode your frame", 0, NULL);
			toggle__envelope__free_unpacked(req, NULL);
			return;
		case SC_FLOOD:
			for (uint64_t i = 0; i < FLOOD; i++)
				srv_event(f, fd, "flood", i);
			srv_answer(f, fd, req);
			break;
		case SC_OVERSIZE: {
			uint32_t big = TGP_MAX_FRAME + 1;
			uint8_t h[4] = { (uint8_t)(big >> 24), (uint8_t)(big >> 16),
					 (uint8_t)(big >> 8), (uint8_t)big };
			srv_write(f, fd, h, sizeof(h));
			break;
		}
		case SC_EVENTS_LATER:
			srv_answer(f, fd, req);
			poll(NULL, 0, 200);
			srv_event(f, fd, "late", 1);
			srv_event(f, fd, "late", 2);
			toggle__envelope__free_unpacked(req, NULL);
			return;
		default:
			srv_answer(f, fd, req);
			break;
		}
		toggle__envelope__free_unpacked(req, NULL);
	}
}

static void srv_session(struct fake *f, int fd)
{
	struct tgp_reader r;
	tgp_reader_init(&r);
	Toggle__Envelope *hello = srv_read(fd, &r);
	if (!hello || hello->body_case != TOGGLE__ENVELOPE__BODY_HELLO) {
		fake_fail(f, "first message is not Hello");
	} else if (hello->hello->protocol_version != TGP_PROTOCOL_VERSION || hello->id == 0) {
		fake_fail(f, "bad Hello version or id");
	} else {
		snprintf(f->client, sizeof(f->client), "%s",
			 hello->hello->client ? hello->hello->client : "");
		if (f->sc == SC_VERSION)
			srv_error(f, fd, hello->id, TOGGLE_EVERSION, "toggled speaks protocol 2 only",
				  0, NULL);
		else if (f->sc == SC_SILENT_HELLO)
			srv_wait_close(fd);
		else if (f->sc != SC_CLOSE_HELLO)
			srv_script(f, fd, &r, hello->id);
	}
	if (hello)
		toggle__envelope__free_unpacked(hello, NULL);
	tgp_reader_free(&r);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;   /* fake_stop shut the listener: nobody connected */
	srv_session(f, fd);
	close(fd);
	return NULL;
}

static void fake_start(struct fake *f, enum scenario sc)
{
	memset(f, 0, sizeof(*f));
	f->sc = sc;
	snprintf(f->dir, sizeof(f->dir), "/tmp/tgc-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/toggled.sock", f->dir);
	struct sockaddr_un sa;
	socklen_t salen;
	ck_assert_int_eq(tgp_unix_address(f->path, &sa, &salen), 0);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f->lfd, 0);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, salen), 0);
	ck_assert_int_eq(listen(f->lfd, 4), 0);
	ck_assert_int_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);   /* wakes accept() if nobody connected */
	pthread_join(f->th, NULL);
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
	ck_assert_msg(f->fail[0] == '\0', "%s", f->fail);
}

/* ---- client helpers ----------------------------------------------------- */

static struct tgc *connect_ok(struct fake *f)
{
	struct tgc *c = NULL;
	char err[256];
	int rc = tgc_connect(f->path, T_OK_MS, &c, err, sizeof(err));
	ck_assert_msg(rc == 0, "tgc_connect: %d %s", rc, err);
	ck_assert_ptr_nonnull(c);
	return c;
}

static Toggle__Envelope status_req(void)
{
	static Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
	env.status = &st;
	return env;
}

static int64_t mono_ms(void)
{
	return (int64_t)util_mono_ms();
}

/* ---- connect ------------------------------------------------------------ */

START_TEST(test_connect_and_call)
{
	struct fake f;
	fake_start(&f, SC_OK);
	struct tgc *c = connect_ok(&f);
	ck_assert(tgc_may_write(c));
	ck_assert_str_eq(tgc_daemon_version(c), "fake 1.0?[31m");
	ck_assert_int_ge(tgc_fd(c), 0);
	char err[256] = "stale text";
	for (uint64_t want = 2; want <= 3; want++) {
		Toggle__Envelope req = status_req();
		Toggle__Envelope *rep = NULL;
		ck_assert_int_eq(tgc_call(c, &req, &rep, T_OK_MS, err, sizeof(err)), 0);
		ck_assert_str_eq(err, "");
		ck_assert_uint_eq(req.id, want);
		ck_assert_ptr_nonnull(rep);
		ck_assert_uint_eq(rep->id, want);
		ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_STATUS_REPLY);
		ck_assert_uint_eq(rep->status_reply->requests, want);
		toggle__envelope__free_unpacked(rep, NULL);
	}
	/* reply == NULL: the envelope is freed for the caller */
	Toggle__Envelope req = status_req();
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), 0);
	tgc_close(c);
	fake_stop(&f);
	ck_assert_str_eq(f.client, program_invocation_short_name);
}
END_TEST

START_TEST(test_connect_default_path)
{
	struct fake f;
	fake_start(&f, SC_OK);
	setenv("TOGGLE_SOCKET", f.path, 1);
	struct tgc *c = NULL;
	char err[256];
	ck_assert_int_eq(tgc_connect(NULL, T_OK_MS, &c, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(c);
	tgc_close(c);
	unsetenv("TOGGLE_SOCKET");
	fake_stop(&f);
}
END_TEST

START_TEST(test_connect_missing_socket)
{
	char dir[] = "/tmp/tgc-test-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof(path), "%s/nobody.sock", dir);
	struct tgc *c = (struct tgc *)(uintptr_t)1;
	char err[512];
	ck_assert_int_eq(tgc_connect(path, 1000, &c, err, sizeof(err)), TOGGLE_ECONNECT);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(err, path) != NULL, "err: %s", err);
	ck_assert_msg(strstr(err, "No such file") != NULL, "err: %s", err);
	ck_assert_msg(strstr(err, "toggled --socket") != NULL, "err: %s", err);
	/* a tiny err buffer is truncated, never overrun; NULL is allowed */
	char small[8];
	ck_assert_int_eq(tgc_connect(path, 1000, &c, small, sizeof(small)), TOGGLE_ECONNECT);
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
	ck_assert_int_eq(tgc_connect(path, 1000, &c, NULL, 0), TOGGLE_ECONNECT);
	rmdir(dir);
}
END_TEST

START_TEST(test_connect_path_too_long)
{
	char path[300];
	memset(path, 'p', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	struct tgc *c = NULL;
	char err[512];
	ck_assert_int_eq(tgc_connect(path, 1000, &c, err, sizeof(err)), TOGGLE_ECONNECT);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(err, "too long") != NULL, "err: %s", err);
}
END_TEST

START_TEST(test_version_error)
{
	struct fake f;
	fake_start(&f, SC_VERSION);
	struct tgc *c = NULL;
	char err[256];
	ck_assert_int_eq(tgc_connect(f.path, T_OK_MS, &c, err, sizeof(err)), TOGGLE_EVERSION);
	ck_assert_ptr_null(c);
	ck_assert_str_eq(err, "toggled speaks protocol 2 only");
	fake_stop(&f);
}
END_TEST

START_TEST(test_hello_reply_wrong_version)
{
	struct fake f;
	fake_start(&f, SC_WRONG_VERSION);
	struct tgc *c = NULL;
	char err[256];
	ck_assert_int_eq(tgc_connect(f.path, T_OK_MS, &c, err, sizeof(err)), TOGGLE_EVERSION);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(err, "99") != NULL, "err: %s", err);
	fake_stop(&f);
}
END_TEST

START_TEST(test_close_during_hello)
{
	struct fake f;
	fake_start(&f, SC_CLOSE_HELLO);
	struct tgc *c = NULL;
	char err[256];
	ck_assert_int_eq(tgc_connect(f.path, T_OK_MS, &c, err, sizeof(err)), TOGGLE_EIO);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(err, "closed") != NULL, "err: %s", err);
	fake_stop(&f);
}
END_TEST

START_TEST(test_hello_timeout)
{
	struct fake f;
	fake_start(&f, SC_SILENT_HELLO);
	struct tgc *c = NULL;
	char err[256];
	int64_t t0 = mono_ms();
	ck_assert_int_eq(tgc_connect(f.path, 200, &c, err, sizeof(err)), TOGGLE_ETIMEDOUT);
	int64_t dt = mono_ms() - t0;
	ck_assert_ptr_null(c);
	ck_assert_int_ge(dt, 190);
	ck_assert_int_lt(dt, 3000);
	ck_assert_msg(strstr(err, "no reply") != NULL, "err: %s", err);
	fake_stop(&f);
}
END_TEST

/* ---- calls -------------------------------------------------------------- */

START_TEST(test_event_before_reply)
{
	struct fake f;
	fake_start(&f, SC_EVENT_FIRST);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	Toggle__Envelope *rep = NULL;
	ck_assert_int_eq(tgc_call(c, &req, &rep, T_OK_MS, err, sizeof(err)), 0);
	/* the stale Error with another id was skipped, not taken as the reply */
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_STATUS_REPLY);
	ck_assert_uint_eq(rep->id, req.id);
	toggle__envelope__free_unpacked(rep, NULL);
	Toggle__Envelope *ev = NULL;
	ck_assert_int_eq(tgc_next_event(c, &ev, 0), 1);
	ck_assert_int_eq(ev->body_case, TOGGLE__ENVELOPE__BODY_EVENT);
	ck_assert_str_eq(ev->event->agent_name, "e1");
	ck_assert_uint_eq(ev->event->version, req.id);
	toggle__envelope__free_unpacked(ev, NULL);
	ck_assert_int_eq(tgc_next_event(c, &ev, 0), 0);
	ck_assert_ptr_null(ev);
	ck_assert_uint_eq(tgc_events_dropped(c), 0);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_close_during_call)
{
	struct fake f;
	fake_start(&f, SC_CLOSE_CALL);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	Toggle__Envelope *rep = (Toggle__Envelope *)(uintptr_t)1;
	ck_assert_int_eq(tgc_call(c, &req, &rep, T_OK_MS, err, sizeof(err)), TOGGLE_EIO);
	ck_assert_ptr_null(rep);
	ck_assert_msg(strstr(err, "closed") != NULL, "err: %s", err);
	/* the connection stays dead */
	err[0] = '\0';
	ck_assert_int_eq(tgc_call(c, &req, &rep, T_OK_MS, err, sizeof(err)), TOGGLE_EIO);
	ck_assert_msg(strstr(err, "closed") != NULL, "err: %s", err);
	Toggle__Envelope *ev = NULL;
	ck_assert_int_lt(tgc_next_event(c, &ev, 100), 0);
	ck_assert_int_lt(tgc_send_raw(c, "x", 1), 0);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_call_timeout)
{
	struct fake f;
	fake_start(&f, SC_SILENT_CALL);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	Toggle__Envelope *rep = NULL;
	int64_t t0 = mono_ms();
	ck_assert_int_eq(tgc_call(c, &req, &rep, 200, err, sizeof(err)), TOGGLE_ETIMEDOUT);
	int64_t dt = mono_ms() - t0;
	ck_assert_int_ge(dt, 190);
	ck_assert_int_lt(dt, 3000);
	ck_assert_ptr_null(rep);
	ck_assert_msg(strstr(err, "200 ms") != NULL, "err: %s", err);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_error_reply)
{
	struct fake f;
	fake_start(&f, SC_ERROR_REPLY);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	Toggle__Envelope *rep = NULL;
	ck_assert_int_eq(tgc_call(c, &req, &rep, T_OK_MS, err, sizeof(err)), TOGGLE_EPERM);
	ck_assert_str_eq(err, "not in group ?[2Jtoggle (agents: a1, a2)");
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_ERROR);
	ck_assert_int_eq(rep->error->code, TOGGLE_EPERM);
	toggle__envelope__free_unpacked(rep, NULL);
	/* an Error reply does not break the connection; reply NULL is fine */
	char small[12];
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, small, sizeof(small)), TOGGLE_EPERM);
	ck_assert_str_eq(small, "not in grou");
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_unknown_error_code)
{
	struct fake f;
	fake_start(&f, SC_BAD_CODE);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EPROTO);
	ck_assert_str_eq(err, "odd");
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EPROTO);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_error_with_id_zero)
{
	struct fake f;
	fake_start(&f, SC_ERROR_ID0);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EPROTO);
	ck_assert_str_eq(err, "cannot decode your frame");
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EIO);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_event_flood)
{
	struct fake f;
	fake_start(&f, SC_FLOOD);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), 0);
	ck_assert_uint_eq(tgc_events_dropped(c), FLOOD - TGC_EVENT_QUEUE);
	Toggle__Envelope *ev = NULL;
	for (uint64_t i = FLOOD - TGC_EVENT_QUEUE; i < FLOOD; i++) {
		ck_assert_int_eq(tgc_next_event(c, &ev, 0), 1);
		ck_assert_uint_eq(ev->event->version, i);   /* oldest dropped, order kept */
		toggle__envelope__free_unpacked(ev, NULL);
	}
	ck_assert_int_eq(tgc_next_event(c, &ev, 0), 0);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_oversize_from_daemon)
{
	struct fake f;
	fake_start(&f, SC_OVERSIZE);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EPROTO);
	ck_assert_msg(strstr(err, "size limit") != NULL, "err: %s", err);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_bad_requests)
{
	struct fake f;
	fake_start(&f, SC_OK);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope none = TOGGLE__ENVELOPE__INIT;
	ck_assert_int_eq(tgc_call(c, &none, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_int_eq(tgc_call(c, NULL, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_int_eq(tgc_call(NULL, &none, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_EINVAL);
	/* a request over the frame limit is refused before anything is sent */
	char *spec = malloc(TGP_MAX_FRAME + 1);
	ck_assert_ptr_nonnull(spec);
	memset(spec, 'a', TGP_MAX_FRAME);
	spec[TGP_MAX_FRAME] = '\0';
	Toggle__SetEnabledRequest se = TOGGLE__SET_ENABLED_REQUEST__INIT;
	se.spec = spec;
	Toggle__Envelope big = TOGGLE__ENVELOPE__INIT;
	big.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	big.set_enabled = &se;
	ck_assert_int_eq(tgc_call(c, &big, NULL, T_OK_MS, err, sizeof(err)), TOGGLE_ELIMIT);
	free(spec);
	/* the connection is still fine */
	Toggle__Envelope req = status_req();
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), 0);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

/* ---- events and raw bytes ----------------------------------------------- */

START_TEST(test_events_later_then_close)
{
	struct fake f;
	fake_start(&f, SC_EVENTS_LATER);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__WatchRequest w = TOGGLE__WATCH_REQUEST__INIT;
	Toggle__Envelope req = TOGGLE__ENVELOPE__INIT;
	req.body_case = TOGGLE__ENVELOPE__BODY_WATCH;
	req.watch = &w;
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), 0);
	Toggle__Envelope *ev = NULL;
	ck_assert_int_eq(tgc_next_event(c, &ev, 0), 0);     /* nothing yet */
	for (uint64_t v = 1; v <= 2; v++) {
		ck_assert_int_eq(tgc_next_event(c, &ev, T_OK_MS), 1);
		ck_assert_str_eq(ev->event->agent_name, "late");
		ck_assert_uint_eq(ev->event->version, v);
		toggle__envelope__free_unpacked(ev, NULL);
	}
	ck_assert_int_eq(tgc_next_event(c, &ev, T_OK_MS), TOGGLE_EIO);
	ck_assert_int_eq(tgc_next_event(c, &ev, 0), TOGGLE_EIO);
	tgc_close(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_send_raw)
{
	struct fake f;
	fake_start(&f, SC_RAW);
	struct tgc *c = connect_ok(&f);
	ck_assert_int_eq(tgc_send_raw(c, "garbage!", 8), 0);
	Toggle__Envelope *env = NULL;
	ck_assert_int_eq(tgc_recv(c, &env, T_OK_MS), TOGGLE_EIO);   /* fake closes */
	ck_assert_ptr_null(env);
	tgc_close(c);
	fake_stop(&f);
	ck_assert_uint_eq(f.raw_n, 8);
	ck_assert_mem_eq(f.raw, "garbage!", 8);
}
END_TEST

START_TEST(test_recv_any)
{
	struct fake f;
	fake_start(&f, SC_EVENTS_LATER);
	struct tgc *c = connect_ok(&f);
	char err[256];
	Toggle__Envelope req = status_req();
	ck_assert_int_eq(tgc_call(c, &req, NULL, T_OK_MS, err, sizeof(err)), 0);
	Toggle__Envelope *env = NULL;
	ck_assert_int_eq(tgc_recv(c, &env, 0), 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(tgc_recv(c, &env, T_OK_MS), 1);
		ck_assert_int_eq(env->body_case, TOGGLE__ENVELOPE__BODY_EVENT);
		toggle__envelope__free_unpacked(env, NULL);
	}
	ck_assert_int_eq(tgc_recv(c, &env, T_OK_MS), TOGGLE_EIO);
	tgc_close(c);
	tgc_close(NULL);
	fake_stop(&f);
}
END_TEST

static Suite *client_suite(void)
{
	Suite *s = suite_create("client");
	TCase *tc = tcase_create("connect");
	tcase_add_test(tc, test_connect_and_call);
	tcase_add_test(tc, test_connect_default_path);
	tcase_add_test(tc, test_connect_missing_socket);
	tcase_add_test(tc, test_connect_path_too_long);
	tcase_add_test(tc, test_version_error);
	tcase_add_test(tc, test_hello_reply_wrong_version);
	tcase_add_test(tc, test_close_during_hello);
	tcase_add_test(tc, test_hello_timeout);
	suite_add_tcase(s, tc);

	tc = tcase_create("call");
	tcase_add_test(tc, test_event_before_reply);
	tcase_add_test(tc, test_close_during_call);
	tcase_add_test(tc, test_call_timeout);
	tcase_add_test(tc, test_error_reply);
	tcase_add_test(tc, test_unknown_error_code);
	tcase_add_test(tc, test_error_with_id_zero);
	tcase_add_test(tc, test_event_flood);
	tcase_add_test(tc, test_oversize_from_daemon);
	tcase_add_test(tc, test_bad_requests);
	suite_add_tcase(s, tc);

	tc = tcase_create("events");
	tcase_add_test(tc, test_events_later_then_close);
	tcase_add_test(tc, test_send_raw);
	tcase_add_test(tc, test_recv_any);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(client_suite());
}
