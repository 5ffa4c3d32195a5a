/*
 * tgclient.c - the blocking client of toggled: a non-blocking socket driven
 * with poll() and deadlines, the Hello exchange, request/reply matching by
 * id and a bounded queue for the events that arrive in between.  Everything
 * read from the socket is untrusted: frames go through tgp_reader, error
 * codes are sanitised, text is cleaned before it reaches err.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "peer_trust.h"
#include "tgclient.h"
#include "util.h"

#define TGC_VERSION_MAX 64   /* daemon_version kept, NUL included */
/* The client name sent in Hello: free text the daemon only logs, not an
 * agent name, so not TGP_MAX_NAME (equal today by chance). */
#define TGC_NAME_MAX    64
#define TGC_READ_CHUNK  16384
#define TGC_DEAD_MSG    256

struct tgc {
	int fd;
	uint64_t last_id;
	bool may_write;
	int dead;                         /* sticky error once unusable */
	char dead_msg[TGC_DEAD_MSG];
	char daemon_version[TGC_VERSION_MAX];
	struct tgp_reader rd;
	Toggle__Envelope **evq;           /* ring of TGC_EVENT_QUEUE, lazily allocated */
	size_t evq_head, evq_len;
	uint64_t ev_dropped;
};

/* ---- messages ----------------------------------------------------------- */

/* Append untrusted text, control characters replaced (UTF-8 kept), truncated to fit. */
static void err_append(char *err, size_t errlen, const char *s)
{
	util_clean_append(err, errlen, s, UTIL_CLEAN_CONTROL);
}

/* Mark the connection unusable: later calls report the same error. */
__attribute__((format(printf, 5, 6)))
static int mark_dead(struct tgc *c, int code, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->dead_msg, sizeof(c->dead_msg), fmt, ap);
	va_end(ap);
	c->dead = code;
	util_seterr(err, errlen, "%s", c->dead_msg);
	return code;
}

static int dead_again(const struct tgc *c, char *err, size_t errlen)
{
	util_seterr(err, errlen, "%s", c->dead_msg);
	return c->dead;
}

/* ---- deadlines ---------------------------------------------------------- */

static int64_t now_ms(void)
{
	return (int64_t)util_mono_ms();
}

/* -1 stands for "no deadline". */
static int64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

/* What is left of a deadline, as a poll() timeout. */
static int remaining_ms(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t left = deadline - now_ms();
	if (left <= 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

/* Wait until fd is ready for events: 0, TOGGLE_ETIMEDOUT or TOGGLE_EIO. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int n = poll(&p, 1, remaining_ms(deadline));
		if (n > 0)
			return 0;   /* ready, or POLLHUP/POLLERR: the next I/O says which */
		if (n == 0)
			return TOGGLE_ETIMEDOUT;
		if (errno != EINTR)
			return TOGGLE_EIO;
	}
}

/* ---- raw I/O ------------------------------------------------------------ */

static int send_all(struct tgc *c, const uint8_t *p, size_t n, int64_t deadline,
		    char *err, size_t errlen)
{
	size_t done = 0;
	while (done < n) {
		ssize_t k = send(c->fd, p + done, n - done, MSG_NOSIGNAL);
		if (k > 0) {
			done += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = wait_fd(c->fd, POLLOUT, deadline);
			if (rc == 0)
				continue;
			if (rc != TOGGLE_ETIMEDOUT)
				return mark_dead(c, rc, err, errlen, "cannot write to toggled: %s",
						 strerror(errno));
			/* Half a frame on the wire leaves the stream unusable. */
			if (done > 0)
				return mark_dead(c, TOGGLE_EIO, err, errlen,
						 "cannot write to toggled: timed out in the middle of a frame");
			util_seterr(err, errlen, "cannot write to toggled: timed out");
			return rc;
		}
		if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
			return mark_dead(c, TOGGLE_EIO, err, errlen, "toggled closed the connection");
		return mark_dead(c, TOGGLE_EIO, err, errlen, "cannot write to toggled: %s",
				 k < 0 ? strerror(errno) : "no progress");
	}
	return 0;
}

/* Read once (after waiting) into the frame reader: 0 or a negative code. */
static int fill(struct tgc *c, int64_t deadline, char *err, size_t errlen)
{
	int rc = wait_fd(c->fd, POLLIN, deadline);
	if (rc == TOGGLE_ETIMEDOUT)
		return rc;
	if (rc)
		return mark_dead(c, rc, err, errlen, "cannot wait for toggled: %s", strerror(errno));
	uint8_t tmp[TGC_READ_CHUNK];
	size_t want = tgp_reader_room(&c->rd);
	if (want > sizeof(tmp))
		want = sizeof(tmp);
	ssize_t k = recv(c->fd, tmp, want, 0);
	if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (k < 0 && errno == ECONNRESET)
		return mark_dead(c, TOGGLE_EIO, err, errlen, "toggled closed the connection");
	if (k < 0)
		return mark_dead(c, TOGGLE_EIO, err, errlen, "cannot read from toggled: %s",
				 strerror(errno));
	if (k == 0)
		return mark_dead(c, TOGGLE_EIO, err, errlen, "toggled closed the connection");
	/* A bad header makes feed fail; next() reports it after the good frames. */
	rc = tgp_reader_feed(&c->rd, tmp, (size_t)k);
	if (rc == TOGGLE_ENOMEM || rc == TOGGLE_EBUSY)
		return mark_dead(c, TOGGLE_ENOMEM, err, errlen, "cannot buffer a frame from toggled");
	return 0;
}

/* The next envelope from the socket: 1, or a negative code (ETIMEDOUT too). */
static int read_env(struct tgc *c, Toggle__Envelope **env, int64_t deadline,
		    char *err, size_t errlen)
{
	if (c->dead)
		return dead_again(c, err, errlen);
	for (;;) {
		int rc = tgp_reader_next(&c->rd, env);
		if (rc == 1)
			return 1;
		if (rc < 0)
			return mark_dead(c, TOGGLE_EPROTO, err, errlen,
					 "malformed frame from toggled (%s)",
					 rc == TOGGLE_ELIMIT ? "frame over the size limit"
							     : "cannot decode the message");
		rc = fill(c, deadline, err, errlen);
		if (rc < 0)
			return rc;
	}
}

/* ---- events ------------------------------------------------------------- */

static void queue_event(struct tgc *c, Toggle__Envelope *ev)
{
	if (!c->evq)
		c->evq = calloc(TGC_EVENT_QUEUE, sizeof(*c->evq));
	if (!c->evq) {
		toggle__envelope__free_unpacked(ev, NULL);
		c->ev_dropped++;
		return;
	}
	if (c->evq_len == TGC_EVENT_QUEUE) {
		/* A watcher that lags loses the oldest events, never the newest. */
		toggle__envelope__free_unpacked(c->evq[c->evq_head], NULL);
		c->evq_head = (c->evq_head + 1) % TGC_EVENT_QUEUE;
		c->evq_len--;
		c->ev_dropped++;
	}
	c->evq[(c->evq_head + c->evq_len) % TGC_EVENT_QUEUE] = ev;
	c->evq_len++;
}

static Toggle__Envelope *pop_event(struct tgc *c)
{
	if (c->evq_len == 0)
		return NULL;
	Toggle__Envelope *ev = c->evq[c->evq_head];
	c->evq[c->evq_head] = NULL;
	c->evq_head = (c->evq_head + 1) % TGC_EVENT_QUEUE;
	c->evq_len--;
	return ev;
}

uint64_t tgc_events_dropped(const struct tgc *c)
{
	return c ? c->ev_dropped : 0;
}

/* ---- calls -------------------------------------------------------------- */

static uint64_t next_id(struct tgc *c)
{
	if (++c->last_id == 0)   /* id 0 belongs to events */
		c->last_id = 1;
	return c->last_id;
}

/* A known negative code stays; anything else the daemon sends is EPROTO. */
static int sanitize_code(int32_t code)
{
	return code < 0 && code >= TOGGLE_ERROR_MIN ? code : TOGGLE_EPROTO;
}

/* err = the daemon's message and the agents it names; returns the code. */
static int reply_error(const Toggle__Error *e, char *err, size_t errlen)
{
	util_seterr(err, errlen, "%s", "");
	err_append(err, errlen, e->message && *e->message ? e->message : "error without a message");
	for (size_t i = 0; i < e->n_agents; i++) {
		err_append(err, errlen, i == 0 ? " (agents: " : ", ");
		err_append(err, errlen, e->agents[i]);
		if (i + 1 == e->n_agents)
			err_append(err, errlen, ")");
	}
	return sanitize_code(e->code);
}

/*
 * Read until the reply with this id.  An Error with id 0 is the daemon
 * saying why it drops us before it could read an id: it answers this call.
 * Replies with other ids are late answers to calls that timed out.
 */
static int await_reply(struct tgc *c, uint64_t id, Toggle__Envelope **out,
		       int64_t deadline, char *err, size_t errlen)
{
	for (;;) {
		Toggle__Envelope *env = NULL;
		int rc = read_env(c, &env, deadline, err, errlen);
		if (rc < 0)
			return rc;
		if (env->body_case == TOGGLE__ENVELOPE__BODY_EVENT) {
			queue_event(c, env);
			continue;
		}
		if (env->id == id ||
		    (env->id == 0 && env->body_case == TOGGLE__ENVELOPE__BODY_ERROR)) {
			*out = env;
			return 0;
		}
		toggle__envelope__free_unpacked(env, NULL);
	}
}

static int send_request(struct tgc *c, const Toggle__Envelope *req, int64_t deadline,
			char *err, size_t errlen)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc = tgp_frame_encode(req, &buf, &len);
	if (rc == TOGGLE_ELIMIT)
		util_seterr(err, errlen, "request too large (over %u bytes)", TGP_MAX_FRAME);
	else if (rc == TOGGLE_ENOMEM)
		util_seterr(err, errlen, "out of memory");
	else if (rc)
		util_seterr(err, errlen, "request has no body or misses a required field");
	if (rc)
		return rc;
	rc = send_all(c, buf, len, deadline, err, errlen);
	free(buf);
	return rc;
}

int tgc_call(struct tgc *c, Toggle__Envelope *req, Toggle__Envelope **reply,
	     int timeout_ms, char *err, size_t errlen)
{
	if (reply)
		*reply = NULL;
	util_seterr(err, errlen, "%s", "");
	if (!c || !req) {
		util_seterr(err, errlen, "invalid argument");
		return TOGGLE_EINVAL;
	}
	if (c->dead)
		return dead_again(c, err, errlen);
	int64_t deadline = deadline_of(timeout_ms);
	req->id = next_id(c);
	int rc = send_request(c, req, deadline, err, errlen);
	if (rc)
		return rc;
	Toggle__Envelope *env = NULL;
	rc = await_reply(c, req->id, &env, deadline, err, errlen);
	if (rc == TOGGLE_ETIMEDOUT)
		util_seterr(err, errlen, "no reply from toggled within %d ms", timeout_ms);
	if (rc)
		return rc;
	if (env->body_case == TOGGLE__ENVELOPE__BODY_ERROR)
		rc = reply_error(env->error, err, errlen);
	if (reply)
		*reply = env;
	else
		toggle__envelope__free_unpacked(env, NULL);
	return rc;
}

int tgc_next_event(struct tgc *c, Toggle__Envelope **event, int timeout_ms)
{
	if (!c || !event)
		return TOGGLE_EINVAL;
	*event = pop_event(c);
	if (*event)
		return 1;
	int64_t deadline = deadline_of(timeout_ms);
	for (;;) {
		Toggle__Envelope *env = NULL;
		int rc = read_env(c, &env, deadline, NULL, 0);
		if (rc == TOGGLE_ETIMEDOUT)
			return 0;
		if (rc < 0)
			return rc;
		if (env->body_case == TOGGLE__ENVELOPE__BODY_EVENT) {
			*event = env;
			return 1;
		}
		toggle__envelope__free_unpacked(env, NULL);   /* a late reply */
	}
}

int tgc_recv(struct tgc *c, Toggle__Envelope **env, int timeout_ms)
{
	if (!c || !env)
		return TOGGLE_EINVAL;
	*env = NULL;
	int rc = read_env(c, env, deadline_of(timeout_ms), NULL, 0);
	return rc == TOGGLE_ETIMEDOUT ? 0 : rc;
}

int tgc_send_raw(struct tgc *c, const void *buf, size_t len)
{
	if (!c || (!buf && len))
		return TOGGLE_EINVAL;
	if (c->dead)
		return c->dead;
	return send_all(c, buf, len, deadline_of(TGC_RAW_TIMEOUT_MS), NULL, 0);
}

/* ---- connect ------------------------------------------------------------ */

/* connect() a non-blocking socket within the deadline: 0 or an errno value. */
static int connect_fd(int fd, const struct sockaddr_un *sa, socklen_t salen, int64_t deadline)
{
	for (;;) {
		if (connect(fd, (const struct sockaddr *)sa, salen) == 0)
			return 0;
		if (errno == EAGAIN) {
			/* Unix sockets say EAGAIN while the listen backlog is full. */
			int left = remaining_ms(deadline);
			if (left == 0)
				return ETIMEDOUT;
			poll(NULL, 0, left < 0 || left > 10 ? 10 : left);
			continue;
		}
		if (errno != EINPROGRESS && errno != EINTR)
			return errno;
		int rc = wait_fd(fd, POLLOUT, deadline);
		if (rc)
			return rc == TOGGLE_ETIMEDOUT ? ETIMEDOUT : errno;
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			return errno;
		return soerr;
	}
}

/* The name this program goes by, for the daemon's logs. */
static void client_name(char *buf, size_t len)
{
	const char *n = program_invocation_short_name;
	snprintf(buf, len, "%s", n && *n ? n : "tgclient");
}

/* Keep the daemon's version string printable and bounded. */
static void keep_version(struct tgc *c, const char *v)
{
	c->daemon_version[0] = '\0';
	err_append(c->daemon_version, sizeof(c->daemon_version), v ? v : "");
}

static int hello(struct tgc *c, int64_t deadline, char *err, size_t errlen)
{
	char name[TGC_NAME_MAX];
	client_name(name, sizeof(name));
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = TGP_PROTOCOL_VERSION;
	h.min_protocol_version = TGP_PROTOCOL_VERSION;
	h.client = name;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	Toggle__Envelope *rep = NULL;
	int rc = tgc_call(c, &env, &rep, remaining_ms(deadline), err, errlen);
	if (rc == 0 && rep->body_case != TOGGLE__ENVELOPE__BODY_HELLO_REPLY) {
		util_seterr(err, errlen, "toggled answered Hello with message %d", (int)rep->body_case);
		rc = TOGGLE_EPROTO;
	} else if (rc == 0 && rep->hello_reply->protocol_version != TGP_PROTOCOL_VERSION) {
		util_seterr(err, errlen, "toggled speaks protocol %u, this client %u",
			     rep->hello_reply->protocol_version, TGP_PROTOCOL_VERSION);
		rc = TOGGLE_EVERSION;
	} else if (rc == 0) {
		c->may_write = rep->hello_reply->may_write;
		keep_version(c, rep->hello_reply->daemon_version);
	}
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	return rc;
}

static void connect_failed(const char *path, int e, char *err, size_t errlen)
{
	if (e == EACCES || e == EPERM)
		util_seterr(err, errlen, "cannot connect to %s: %s; check the permissions of %s",
			     path, strerror(e), path);
	else
		util_seterr(err, errlen, "cannot connect to %s: %s; is toggled running? "
			     "start it with `toggled --socket %s`", path, strerror(e), path);
}

/* Socket + connect: 0 with c->fd set, or TOGGLE_ECONNECT. */
static int open_socket(struct tgc *c, const char *path, int64_t deadline,
		       char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t salen;
	if (tgp_unix_address(path, &sa, &salen)) {
		util_seterr(err, errlen, "cannot connect to %s: socket path empty or too long "
			     "(at most %zu bytes)", path, sizeof(sa.sun_path) - 1);
		return TOGGLE_ECONNECT;
	}
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0) {
		util_seterr(err, errlen, "cannot create a socket: %s", strerror(errno));
		return TOGGLE_ECONNECT;
	}
	int e = connect_fd(c->fd, &sa, salen, deadline);
	if (e) {
		connect_failed(path, e, err, errlen);
		return TOGGLE_ECONNECT;
	}
	/* Nothing is sent, nothing read, before the listener is known to be trusted. */
	char why[512];
	if (tgp_peer_trusted(c->fd, path, getenv(TGP_TRUST_ENV), why, sizeof(why)) != 0) {
		util_seterr(err, errlen, "cannot connect: %s", why);
		return TOGGLE_ECONNECT;
	}
	return 0;
}

int tgc_connect(const char *path, int timeout_ms, struct tgc **out, char *err, size_t errlen)
{
	util_seterr(err, errlen, "%s", "");
	if (!out)
		return TOGGLE_EINVAL;
	*out = NULL;
	char pathbuf[PATH_MAX];
	if (!path && !(path = tgp_default_socket_path(pathbuf, sizeof(pathbuf)))) {
		util_seterr(err, errlen, "cannot connect: the default socket path is too long");
		return TOGGLE_ECONNECT;
	}
	struct tgc *c = calloc(1, sizeof(*c));
	if (!c) {
		util_seterr(err, errlen, "out of memory");
		return TOGGLE_ENOMEM;
	}
	c->fd = -1;
	tgp_reader_init(&c->rd);
	int64_t deadline = deadline_of(timeout_ms);
	int rc = open_socket(c, path, deadline, err, errlen);
	if (rc == 0)
		rc = hello(c, deadline, err, errlen);
	if (rc) {
		tgc_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* ---- accessors ---------------------------------------------------------- */

bool tgc_may_write(const struct tgc *c)
{
	return c && c->may_write;
}

const char *tgc_daemon_version(const struct tgc *c)
{
	return c ? c->daemon_version : "";
}

int tgc_fd(const struct tgc *c)
{
	return c ? c->fd : -1;
}

void tgc_close(struct tgc *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	Toggle__Envelope *ev;
	while ((ev = pop_event(c)))
		toggle__envelope__free_unpacked(ev, NULL);
	free(c->evq);
	tgp_reader_free(&c->rd);
	free(c);
}
