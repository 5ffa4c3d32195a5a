/*
 * conn.c - the agent's connection thread (see conn.h).
 *
 * The thread blocks every signal (the application's handlers stay the
 * application's), uses MSG_NOSIGNAL, and wakes for shutdown through a pipe.
 * State shared with the application thread sits behind a mutex that only
 * status queries take: never the replay path.  The status lane's copy of
 * it (state and counters, no text) is mirrored in atomic words, so that
 * publishing the status never waits for this thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "peer_trust.h"
#include "toggle_frame.h"
#include "toggle_proto.h"

#define CONN_BACKOFF_MIN_MS 50
#define CONN_BACKOFF_MAX_MS 2000
#define CONN_REPLY_TIMEOUT_MS 2000

struct tg_conn {
	pthread_t thread;
	int wake[2];  /* write end closes to stop the thread */
	int shm_fd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	/* TOGGLE_DAEMON_UID as it was at start (read once: getenv is not
	 * safe against the application's setenv from this thread); one byte
	 * over the limit keeps an overlong value overlong, hence refused. */
	bool trust_set;
	char trust[TGP_TRUST_ENV_MAX + 2];
	/* Copies of the registration strings. */
	char name[TGP_MAX_NAME], group[TGP_MAX_NAME];
	char types[TOGGLE_MAX_HOOK_TYPES][TGP_MAX_NAME];
	const char *type_ptrs[TOGGLE_MAX_HOOK_TYPES];
	struct pbw_register reg;

	pthread_mutex_t lock; /* guards st and the ring fields */
	/* The data ring (tg_conn_ring): offered after each registration, and
	 * at once when it comes during a session (ring_wake pokes the thread). */
	int ring_fd;
	uint64_t ring_size;
	int ring_wake[2];
	bool ring_sent; /* this session's daemon has it (the thread's own) */
	struct toggle_conn_info st;
	struct toggle_shm_conn lane; /* mirror of st's numbers, atomic words */
	uint64_t next_id;
};

static int64_t conn_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Under c->lock: mirror st into the lane words. */
static void conn_mirror(struct tg_conn *c)
{
	__atomic_store_n(&c->lane.state, (uint64_t)c->st.state, __ATOMIC_RELAXED);
	__atomic_store_n(&c->lane.sessions, c->st.sessions, __ATOMIC_RELAXED);
	__atomic_store_n(&c->lane.failures, c->st.failures, __ATOMIC_RELAXED);
	__atomic_store_n(&c->lane.since_unix_ms, (uint64_t)c->st.since_unix_ms, __ATOMIC_RELAXED);
}

/* Under c->lock: move to state s (the time only when it changes). */
static void conn_enter(struct tg_conn *c, enum toggle_conn_state s)
{
	if (c->st.state != s) {
		c->st.state = s;
		c->st.since_unix_ms = conn_now_ms();
	}
	conn_mirror(c);
}

/* Record why the connection failed or ended as "what: detail" (detail may
 * be NULL); a failed attempt also counts in failures. */
static void conn_note(struct tg_conn *c, bool failed, const char *what, const char *detail)
{
	pthread_mutex_lock(&c->lock);
	snprintf(c->st.last_error, sizeof(c->st.last_error), "%.40s%s%.212s", what, detail ? ": " : "",
		 detail ? detail : "");
	c->st.failures += failed;
	conn_mirror(c);
	pthread_mutex_unlock(&c->lock);
}

static void conn_set_error(struct tg_conn *c, const char *what, const char *detail)
{
	conn_note(c, true, what, detail);
}

/* Sleep ms, or return 1 at once if asked to stop. */
static int conn_wait_stop(struct tg_conn *c, int ms)
{
	struct pollfd p = {.fd = c->wake[0], .events = POLLIN};
	int r;
	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r > 0;
}

static int conn_connect(struct tg_conn *c)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, c->path, sizeof(sa.sun_path));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Is the listener one we may hand the memfd to?  Checked before any byte goes out. */
static bool conn_peer_ok(struct tg_conn *c, int fd)
{
	char why[256];
	if (tgp_peer_trusted(fd, c->path, c->trust_set ? c->trust : NULL, why, sizeof(why)) == 0)
		return true;
	conn_set_error(c, "untrusted daemon", why);
	return false;
}

static int conn_send(int fd, const uint8_t *buf, size_t len, int pass_fd)
{
	struct iovec iov = {.iov_base = (void *)(uintptr_t)buf, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
	}
	while (len) {
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		/* The fd went with the first byte; the rest is plain data. */
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int conn_read_full(struct tg_conn *c, int fd, uint8_t *buf, size_t len)
{
	struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = c->wake[0], .events = POLLIN}};
	while (len) {
		int r = poll(p, 2, CONN_REPLY_TIMEOUT_MS);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || (p[1].revents & (POLLIN | POLLHUP)))
			return -1;
		ssize_t n = read(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Send one frame, read the reply frame, decode it. */
static int conn_exchange(struct tg_conn *c, int fd, const uint8_t *frame, size_t len, int pass_fd,
			 struct pbw_reply *rep)
{
	if (conn_send(fd, frame, len, pass_fd) != 0) {
		conn_set_error(c, "sending to the daemon", strerror(errno));
		return -1;
	}
	uint8_t hdr[TGP_FRAME_HEADER];
	if (conn_read_full(c, fd, hdr, sizeof(hdr)) != 0) {
		conn_set_error(c, "no reply from the daemon", NULL);
		return -1;
	}
	uint32_t n = tgp_frame_header_get(hdr);
	if (tgp_frame_len_check(n) != 0) {
		conn_set_error(c, "daemon reply has a bad length", NULL);
		return -1;
	}
	uint8_t *body = malloc(n);
	if (!body)
		return -1;
	int rc = conn_read_full(c, fd, body, n);
	if (rc == 0)
		rc = pbw_decode_reply(body, n, rep);
	free(body);
	if (rc != 0)
		conn_set_error(c, "malformed reply from the daemon", NULL);
	return rc;
}

static int conn_reply_ok(struct tg_conn *c, const struct pbw_reply *rep, uint32_t want)
{
	if (rep->body == want)
		return 0;
	if (rep->body == PBW_ENV_ERROR)
		conn_set_error(c, "daemon refused", rep->error_message);
	else
		conn_set_error(c, "unexpected reply from the daemon", NULL);
	return -1;
}

/*
 * RegisterRing with the ring's fd, if the agent has one (toggle_ring.h).
 * A daemon that refuses it (one without rings: UNIMPLEMENTED or PROTO) is
 * no failure: the agent stays registered, recording nothing.  -1 only when
 * the connection itself failed.
 */
static int conn_register_ring(struct tg_conn *c, int fd)
{
	pthread_mutex_lock(&c->lock);
	int ring_fd = c->ring_fd;
	uint64_t size = c->ring_size;
	pthread_mutex_unlock(&c->lock);
	if (ring_fd < 0 || c->ring_sent)
		return 0;
	uint8_t frame[64];
	struct pbw_reply rep;
	long len = pbw_frame_register_ring(frame, sizeof(frame), ++c->next_id, size);
	if (len < 0 || conn_exchange(c, fd, frame, (size_t)len, ring_fd, &rep))
		return -1;
	c->ring_sent = true;
	if (rep.body == PBW_ENV_ERROR)
		conn_note(c, false, "the daemon took no data ring", rep.error_message);
	else if (rep.body != PBW_ENV_REGISTER_RING_REPLY)
		conn_note(c, false, "unexpected reply to the data ring", NULL);
	return 0;
}

/* Hello + RegisterAgent (+ RegisterRing) on a fresh connection; 0 when registered. */
static int conn_register(struct tg_conn *c, int fd)
{
	uint8_t frame[8192];
	struct pbw_reply rep;
	c->ring_sent = false;
	long len = pbw_frame_hello(frame, sizeof(frame), ++c->next_id, TGP_PROTOCOL_VERSION,
				   "libtoggle");
	if (len < 0 || conn_exchange(c, fd, frame, (size_t)len, -1, &rep) ||
	    conn_reply_ok(c, &rep, PBW_ENV_HELLO_REPLY))
		return -1;
	len = pbw_frame_register(frame, sizeof(frame), ++c->next_id, &c->reg);
	if (len < 0 || conn_exchange(c, fd, frame, (size_t)len, c->shm_fd, &rep) ||
	    conn_reply_ok(c, &rep, PBW_ENV_REGISTER_REPLY))
		return -1;
	pthread_mutex_lock(&c->lock);
	c->st.agent_id = rep.agent_id;
	c->st.sessions++;
	conn_enter(c, TOGGLE_CONN_CONNECTED);
	pthread_mutex_unlock(&c->lock);
	return conn_register_ring(c, fd);
}

/* Registered: wait until the daemon goes away or we are stopped. 1 = stop. */
static int conn_session(struct tg_conn *c, int fd)
{
	struct pollfd p[3] = {{.fd = fd, .events = POLLIN},
			      {.fd = c->wake[0], .events = POLLIN},
			      {.fd = c->ring_wake[0], .events = POLLIN}};
	uint8_t sink[512];
	for (;;) {
		int r = poll(p, 3, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || p[1].revents)
			return 1;
		if (p[2].revents) {
			/* A ring came after the registration: offered now. */
			while (read(c->ring_wake[0], sink, sizeof(sink)) > 0)
				;
			if (conn_register_ring(c, fd) != 0)
				return 0;
			continue;
		}
		/* The daemon sends nothing after registration: data or EOF both end it. */
		ssize_t n = read(fd, sink, sizeof(sink));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
	}
}

static void *conn_main(void *arg)
{
	struct tg_conn *c = arg;
	int backoff = CONN_BACKOFF_MIN_MS;
	for (;;) {
		int fd = conn_connect(c);
		if (fd < 0) {
			conn_set_error(c, "connecting to the daemon", strerror(errno));
		} else if (conn_peer_ok(c, fd) && conn_register(c, fd) == 0) {
			backoff = CONN_BACKOFF_MIN_MS;
			int stop = conn_session(c, fd);
			close(fd);
			if (stop)
				return NULL;
			conn_note(c, false, "the daemon closed the connection", NULL);
			pthread_mutex_lock(&c->lock);
			conn_enter(c, TOGGLE_CONN_RECONNECTING);
			pthread_mutex_unlock(&c->lock);
			continue;
		}
		if (fd >= 0)
			close(fd);
		if (conn_wait_stop(c, backoff))
			return NULL;
		backoff = backoff * 2 > CONN_BACKOFF_MAX_MS ? CONN_BACKOFF_MAX_MS : backoff * 2;
	}
}

static int conn_copy_reg(struct tg_conn *c, const struct pbw_register *reg)
{
	if (reg->n_types > TOGGLE_MAX_HOOK_TYPES || strlen(reg->name) >= sizeof(c->name) ||
	    (reg->group && strlen(reg->group) >= sizeof(c->group)))
		return -1;
	snprintf(c->name, sizeof(c->name), "%s", reg->name);
	snprintf(c->group, sizeof(c->group), "%s", reg->group ? reg->group : "");
	for (unsigned i = 0; i < reg->n_types; i++) {
		if (strlen(reg->hook_types[i]) >= sizeof(c->types[i]))
			return -1;
		snprintf(c->types[i], sizeof(c->types[i]), "%s", reg->hook_types[i]);
		c->type_ptrs[i] = c->types[i];
	}
	c->reg = *reg;
	c->reg.name = c->name;
	c->reg.group = c->group;
	c->reg.hook_types = c->type_ptrs;
	return 0;
}

int tg_conn_start(const char *path, int shm_fd, const struct pbw_register *reg,
		  struct tg_conn **out, char *err, size_t errlen)
{
	struct tg_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return TOGGLE_ENOMEM;
	if (strlen(path) >= sizeof(c->path) || conn_copy_reg(c, reg) != 0) {
		snprintf(err, errlen, "daemon socket path or registration names too long");
		free(c);
		return TOGGLE_EINVAL;
	}
	snprintf(c->path, sizeof(c->path), "%s", path);
	const char *trust = getenv(TGP_TRUST_ENV);
	if (trust) {
		c->trust_set = true;
		snprintf(c->trust, sizeof(c->trust), "%s", trust);
	}
	c->shm_fd = shm_fd;
	c->ring_fd = -1;
	c->st.state = TOGGLE_CONN_CONNECTING;
	c->st.since_unix_ms = conn_now_ms();
	conn_mirror(c);
	if (pipe2(c->wake, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		free(c);
		return TOGGLE_EIO;
	}
	if (pipe2(c->ring_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		close(c->wake[0]);
		close(c->wake[1]);
		free(c);
		return TOGGLE_EIO;
	}
	pthread_mutex_init(&c->lock, NULL);
	/* The thread inherits a full signal mask: it must never run app handlers. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&c->thread, NULL, conn_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		snprintf(err, errlen, "pthread_create: %s", strerror(rc));
		close(c->wake[0]);
		close(c->wake[1]);
		close(c->ring_wake[0]);
		close(c->ring_wake[1]);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return TOGGLE_EIO;
	}
	*out = c;
	return 0;
}

void tg_conn_stop(struct tg_conn *c)
{
	if (!c)
		return;
	close(c->wake[1]); /* POLLHUP on wake[0] wakes every poll of the thread */
	pthread_join(c->thread, NULL);
	close(c->wake[0]);
	close(c->ring_wake[0]);
	close(c->ring_wake[1]);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

void tg_conn_info(struct tg_conn *c, struct toggle_conn_info *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->st;
	pthread_mutex_unlock(&c->lock);
}

void tg_conn_lane(const struct tg_conn *c, struct toggle_shm_conn *out)
{
	out->state = __atomic_load_n(&c->lane.state, __ATOMIC_RELAXED);
	out->sessions = __atomic_load_n(&c->lane.sessions, __ATOMIC_RELAXED);
	out->failures = __atomic_load_n(&c->lane.failures, __ATOMIC_RELAXED);
	out->since_unix_ms = __atomic_load_n(&c->lane.since_unix_ms, __ATOMIC_RELAXED);
}

void tg_conn_ring(struct tg_conn *c, int fd, uint64_t size)
{
	pthread_mutex_lock(&c->lock);
	c->ring_fd = fd;
	c->ring_size = size;
	pthread_mutex_unlock(&c->lock);
	/* Non-blocking: a full pipe already says "look". */
	ssize_t n = write(c->ring_wake[1], "r", 1);
	(void)n;
}
