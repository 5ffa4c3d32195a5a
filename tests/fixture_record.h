/*
 * fixture_record.h - what the recorder's daemon suites share
 * (tests/check_record_daemon.c, tests/check_record_drops.c): a real toggled
 * on a temporary socket (its log printed on a failure), a fake agent
 * speaking raw frames with its own control region and data ring
 * (toggle_ring.h), and a recording client that reassembles RecordData
 * chunks.  Static inline, as fixture_lifetime.h: each suite is one
 * translation unit and uses most of it.
 */
#ifndef FIXTURE_RECORD_H
#define FIXTURE_RECORD_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "testutil.h"
#include "tgclient.h"
#include "toggle_error.h"
#include "toggle_hooks.h"
#include "toggle_ring.h"
#include "toggle_shm.h"

#ifndef TOGGLED_BIN
#error "TOGGLED_BIN must name the daemon binary (daemon/daemon.mk passes it)"
#endif

#define NT          2
#define NL          4
#define RING_CAP    (1u << 20)
#define ERRLEN      512
#define RPC_MS      15000
#define WAIT_MS     10000
#define NOBODY      65534

static const char *const type_names[NT] = {"resid_post", "attn_out"};

struct env {
	char dir[64], sock[128], state[128], dlog[160], msock[128];
	pid_t daemon;
	bool metrics; /* toggled serves /metrics on msock too */
};

static struct env *g_env;

static inline uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static inline void env_report(void)
{
	if (!g_env)
		return;
	FILE *f = fopen(g_env->dlog, "r");
	if (!f)
		return;
	fprintf(stderr, "---- toggled log (%s) ----\n", g_env->dlog);
	char line[1024];
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

_Noreturn static inline void fail_at(const char *file, int line, const char *cond,
				    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

_Noreturn static inline void fail_at(const char *file, int line, const char *cond,
				    const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s:%d: FAILED (%s): %s\n", file, line, cond, msg);
	env_report();
	ck_abort_msg("line %d: %s: %s", line, cond, msg);
	abort();
}

#define ASSERT(cond, ...)                                      \
	do {                                                   \
		if (!(cond))                                   \
			fail_at(__FILE__, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

#define ASSERT_CODE(got, want, err)                                                    \
	ASSERT((got) == (want), "code %d (%s), expected %d (%s); message: %s", (int)(got), \
	       toggle_strerror(got), (int)(want), toggle_strerror(want), (err))

/* ---- the daemon ------------------------------------------------------------ */

static inline int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static inline bool socket_accepts(const char *path)
{
	struct sockaddr_un sa;
	socklen_t len;
	if (tgp_unix_address(path, &sa, &len) != 0)
		return false;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool ok = connect(fd, (struct sockaddr *)&sa, len) == 0;
	close(fd);
	return ok;
}

/* toggled on e's socket and state directory (again, after env_daemon_kill9). */
static inline void env_daemon_start(struct env *e)
{
	pid_t parent = getpid();
	fflush(NULL);
	e->daemon = fork();
	ASSERT(e->daemon >= 0, "fork: %s", strerror(errno));
	if (e->daemon == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(99);
		int fd = open(e->dlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		if (e->metrics)
			execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state,
			      "--metrics", e->msock, "-v", (char *)NULL);
		else
			execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state,
			      "-v", (char *)NULL);
		_exit(127);
	}
	uint64_t end = now_ms() + 10000;
	while (!socket_accepts(e->sock) || (e->metrics && !socket_accepts(e->msock))) {
		int st;
		ASSERT(waitpid(e->daemon, &st, WNOHANG) != e->daemon, "toggled ended at start-up");
		ASSERT(now_ms() < end, "toggled does not accept on %s", e->sock);
		sleep_ms(10);
	}
}

/* SIGKILL: toggled dies as in a crash (nothing of it ends cleanly). */
static inline void env_daemon_kill9(struct env *e)
{
	int st;
	kill(e->daemon, SIGKILL);
	waitpid(e->daemon, &st, 0);
}

/* toggled on a temporary socket (and, with metrics, a /metrics socket), its log kept. */
static inline void env_setup(struct env *e, const char *tag, bool metrics)
{
	memset(e, 0, sizeof(*e));
	e->metrics = metrics;
	snprintf(e->dir, sizeof(e->dir), "/tmp/%s.XXXXXX", tag);
	ASSERT(mkdtemp(e->dir), "mkdtemp: %s", strerror(errno));
	chmod(e->dir, 0755);
	snprintf(e->sock, sizeof(e->sock), "%s/t.sock", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	snprintf(e->dlog, sizeof(e->dlog), "%s/toggled.log", e->dir);
	snprintf(e->msock, sizeof(e->msock), "%s/metrics.sock", e->dir);
	g_env = e;
	env_daemon_start(e);
}

/* SIGTERM: toggled must exit 0 (ASan and leak reports make it exit non-zero). */
static inline void env_teardown(struct env *e)
{
	int st = 0;
	kill(e->daemon, SIGTERM);
	uint64_t end = now_ms() + 20000;
	pid_t r;
	while ((r = waitpid(e->daemon, &st, WNOHANG)) == 0 && now_ms() < end)
		sleep_ms(10);
	if (r != e->daemon) {
		kill(e->daemon, SIGKILL);
		waitpid(e->daemon, &st, 0);
	}
	ASSERT(r == e->daemon, "toggled did not stop within 20 s");
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "toggled exited with status %d", st);
	g_env = NULL;
	nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline struct tgc *client(const struct env *e)
{
	struct tgc *c = NULL;
	char err[ERRLEN];
	int rc = tgc_connect(e->sock, RPC_MS, &c, err, sizeof(err));
	ASSERT_CODE(rc, 0, err);
	return c;
}

/* ---- a fake agent: raw frames, its own control region and data ring ---------- */

struct fake {
	int fd;
	struct tgp_reader rd;
	uint64_t next_id, agent_id;
	struct toggle_shm shm;
	struct toggle_ring_map ring;
	struct toggle_ring_writer w;
	int64_t step;
};

static inline void raw_write(int fd, const void *buf, size_t len, int pass_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = (void *)(uintptr_t)buf, .iov_len = len};
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
	while (iov.iov_len) {
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		ASSERT(n > 0, "sendmsg: %s", n < 0 ? strerror(errno) : "no progress");
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
	}
}

/* Send req (with pass_fd), wait for its reply: 0 if the body is want, else the Error's code. */
static inline int fake_call(struct fake *f, Toggle__Envelope *req, int pass_fd,
		     Toggle__Envelope__BodyCase want, char *err)
{
	req->id = ++f->next_id;
	uint8_t *buf;
	size_t len;
	ASSERT(tgp_frame_encode(req, &buf, &len) == 0, "encode");
	raw_write(f->fd, buf, len, pass_fd);
	free(buf);
	uint64_t end = now_ms() + RPC_MS;
	for (;;) {
		Toggle__Envelope *rep = NULL;
		int got = tgp_reader_next(&f->rd, &rep);
		ASSERT(got >= 0, "malformed frame from toggled");
		if (got == 1) {
			int rc = 0;
			err[0] = 0;
			if (rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR) {
				rc = rep->error->code;
				snprintf(err, ERRLEN, "%s", rep->error->message);
			} else {
				ASSERT(rep->body_case == want, "reply body %d, expected %d",
				       (int)rep->body_case, (int)want);
				if (want == TOGGLE__ENVELOPE__BODY_REGISTER_REPLY)
					f->agent_id = rep->register_reply->agent_id;
			}
			toggle__envelope__free_unpacked(rep, NULL);
			return rc;
		}
		struct pollfd p = {.fd = f->fd, .events = POLLIN};
		ASSERT(now_ms() < end, "no reply from toggled");
		if (poll(&p, 1, 100) <= 0)
			continue;
		uint8_t b[4096];
		ssize_t k = read(f->fd, b, sizeof(b));
		ASSERT(k > 0, "toggled closed the agent's connection");
		ASSERT(tgp_reader_feed(&f->rd, b, (size_t)k) == 0, "feed");
	}
}

/* Connect, hello, register (control region), and share a ring (unless ring_fd == -2). */
static inline void fake_open(struct fake *f, const struct env *e, const char *name, int ring_fd)
{
	memset(f, 0, sizeof(*f));
	char err[ERRLEN];
	struct sockaddr_un sa;
	socklen_t len;
	ASSERT(tgp_unix_address(e->sock, &sa, &len) == 0, "address");
	f->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(connect(f->fd, (struct sockaddr *)&sa, len) == 0, "connect: %s", strerror(errno));
	tgp_reader_init(&f->rd);
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = TGP_PROTOCOL_VERSION;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	ASSERT_CODE(fake_call(f, &env, -1, TOGGLE__ENVELOPE__BODY_HELLO_REPLY, err), 0, err);
	ASSERT_CODE(toggle_shm_create(&f->shm, err, sizeof(err)), 0, err);
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.n_hook_types = NT;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = NL;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	ASSERT_CODE(fake_call(f, &env, f->shm.fd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, err), 0,
		    err);
	f->ring.fd = -1;
	if (ring_fd == -2)
		return;
	if (ring_fd == -1) {
		ASSERT_CODE(toggle_ring_create(RING_CAP, &f->ring, err, sizeof(err)), 0, err);
		toggle_ring_writer_init(&f->w, &f->ring);
		ring_fd = f->ring.fd;
	}
	Toggle__RegisterRingRequest rr = TOGGLE__REGISTER_RING_REQUEST__INIT;
	rr.ring_size = TOGGLE_RING_DATA_OFFSET + RING_CAP;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_RING;
	env.register_ring = &rr;
	ASSERT_CODE(fake_call(f, &env, ring_fd, TOGGLE__ENVELOPE__BODY_REGISTER_RING_REPLY, err), 0,
		    err);
}

static inline void fake_close(struct fake *f)
{
	close(f->fd);
	tgp_reader_free(&f->rd);
	toggle_shm_unmap(&f->shm);
	if (f->ring.base)
		toggle_ring_unmap(&f->ring);
}

/* The agent's step, as its status lane reports it. */
static inline void fake_step(struct fake *f, int64_t step)
{
	struct toggle_shm_status st;
	memset(&st, 0, sizeof(st));
	st.step = step;
	toggle_shm_status_write(f->shm.st, &st);
	f->step = step;
}

/* What the daemon's request area asks: session and set (bounded wait for a change). */
static inline uint64_t fake_session(struct fake *f, struct toggle_set *set, bool want_on)
{
	uint64_t end = now_ms() + WAIT_MS, session = 0;
	for (;;) {
		struct toggle_set s;
		ASSERT(toggle_ring_request_read(f->ring.req, &session, &s) == 0, "request read");
		if ((session != 0) == want_on) {
			if (set)
				*set = s;
			return session;
		}
		ASSERT(now_ms() < end, "the ring's request stayed session %llu",
		       (unsigned long long)session);
		sleep_ms(5);
	}
}

/* A DATA record as libtoggle lays it; returns its header in the ring (sealed, published). */
static inline struct toggle_ring_record *fake_put(struct fake *f, uint64_t session, int64_t step,
					   unsigned type, unsigned layer, const uint64_t *shape,
					   unsigned ndim, const void *data, uint64_t len, bool publish)
{
	uint64_t pos;
	struct toggle_ring_record *r = toggle_ring_writer_reserve(&f->w, len, &pos);
	if (!r)
		return NULL;
	r->session = session;
	r->step = step;
	r->graph = 0xabc0 + layer;
	r->launch = (uint64_t)step;
	r->hook_type = (uint16_t)type;
	r->layer = (uint16_t)layer;
	r->dtype = TOGGLE_DTYPE_F32;
	r->ndim = (uint8_t)ndim;
	for (unsigned i = 0; i < ndim; i++)
		r->shape[i] = shape[i];
	memcpy((unsigned char *)r + sizeof(*r), data, len);
	toggle_ring_record_seal(r);
	if (publish)
		toggle_ring_writer_publish(&f->w, f->w.reserve, 1);
	return r;
}

/* ---- a recording client ------------------------------------------------------ */

static inline int record_start(struct tgc *c, Toggle__Selector *sel, const char *spec, uint64_t steps,
			Toggle__Envelope **rep, uint64_t *id, char *err)
{
	Toggle__RecordRequest m = TOGGLE__RECORD_REQUEST__INIT;
	m.target = sel;
	m.spec = (char *)(uintptr_t)spec;
	m.steps = steps;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_RECORD;
	env.record = &m;
	int rc = tgc_call(c, &env, rep, RPC_MS, err, ERRLEN);
	*id = env.id;
	return rc;
}

/* The next frame of the recording (RecordData or RecordEnd). */
static inline Toggle__Envelope *record_next(struct tgc *c, uint64_t id)
{
	uint64_t end = now_ms() + WAIT_MS;
	for (;;) {
		Toggle__Envelope *env = NULL;
		int rc = tgc_recv(c, &env, 200);
		ASSERT(rc >= 0, "recording connection failed: %s", toggle_strerror(rc));
		if (rc == 1 && env->id == id &&
		    (env->body_case == TOGGLE__ENVELOPE__BODY_RECORD_DATA ||
		     env->body_case == TOGGLE__ENVELOPE__BODY_RECORD_END))
			return env;
		if (rc == 1)
			toggle__envelope__free_unpacked(env, NULL);
		ASSERT(now_ms() < end, "no recording frame within %d ms", WAIT_MS);
	}
}

/* One whole record (its chunks reassembled) of agent: payload malloc'd in *data. */
struct got {
	uint64_t agent_id, size, seq, graph;
	int64_t step;
	char hook[64], dtype[16];
	size_t ndim;
	uint64_t shape[8];
	unsigned char *data;
	size_t chunks;
};

/* Next record, or NULL at a RecordEnd (whose code, agent and message are stored). */
static inline bool record_get(struct tgc *c, uint64_t id, struct got *g, Toggle__RecordEnd *end_out,
		       char *end_msg)
{
	memset(g, 0, sizeof(*g));
	for (;;) {
		Toggle__Envelope *env = record_next(c, id);
		if (env->body_case == TOGGLE__ENVELOPE__BODY_RECORD_END) {
			*end_out = *env->record_end;
			snprintf(end_msg, ERRLEN, "%s", env->record_end->message);
			end_out->message = NULL;
			toggle__envelope__free_unpacked(env, NULL);
			ASSERT(g->chunks == 0, "a record cut short by an end");
			return false;
		}
		const Toggle__RecordData *m = env->record_data;
		if (g->chunks == 0) {
			ASSERT(m->offset == 0, "first chunk at offset %llu", (unsigned long long)m->offset);
			g->agent_id = m->agent_id;
			g->size = m->size;
			g->seq = m->seq;
			g->graph = m->graph;
			g->step = m->step;
			snprintf(g->hook, sizeof(g->hook), "%s", m->hook);
			snprintf(g->dtype, sizeof(g->dtype), "%s", m->dtype);
			g->ndim = m->n_shape;
			for (size_t i = 0; i < m->n_shape && i < 8; i++)
				g->shape[i] = m->shape[i];
			g->data = malloc(m->size ? m->size : 1);
		} else {
			ASSERT(m->agent_id == g->agent_id && m->seq == g->seq, "chunks interleaved");
		}
		ASSERT(m->data.len <= TGP_RECORD_CHUNK, "chunk of %zu bytes", m->data.len);
		ASSERT(m->offset + m->data.len <= g->size, "chunk past the record");
		memcpy(g->data + m->offset, m->data.data, m->data.len);
		g->chunks++;
		bool last = m->offset + m->data.len == g->size;
		toggle__envelope__free_unpacked(env, NULL);
		if (last)
			return true;
	}
}

static inline void daemon_serves(const struct env *e)
{
	struct tgc *c = client(e);
	Toggle__StatusRequest m = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
	env.status = &m;
	char err[ERRLEN];
	int rc = tgc_call(c, &env, NULL, RPC_MS, err, sizeof(err));
	ASSERT_CODE(rc, 0, err);
	tgc_close(c);
}

static inline Toggle__Selector sel_id(uint64_t id)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	s.agent_id = id;
	return s;
}

static inline void fill(float *v, size_t n, float base)
{
	for (size_t i = 0; i < n; i++)
		v[i] = base + (float)i;
}

/* The agent's standing set as the daemon shows it (ListAgents.enabled). */
static inline void enabled_of(struct tgc *c, uint64_t agent_id, char *out, size_t len)
{
	Toggle__Selector sel = TOGGLE__SELECTOR__INIT;
	sel.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	sel.agent_id = agent_id;
	Toggle__ListAgentsRequest m = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	m.target = &sel;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT, *rep = NULL;
	env.body_case = TOGGLE__ENVELOPE__BODY_LIST_AGENTS;
	env.list_agents = &m;
	char err[ERRLEN];
	int rc = tgc_call(c, &env, &rep, RPC_MS, err, sizeof(err));
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->agents->n_agents == 1, "%zu agents", rep->agents->n_agents);
	snprintf(out, len, "%s", rep->agents->agents[0]->enabled);
	toggle__envelope__free_unpacked(rep, NULL);
}

/* Wait (bounded) until the standing set is want. */
static inline void enabled_wait(struct tgc *c, uint64_t agent_id, const char *want)
{
	char got[256] = "";
	uint64_t end = now_ms() + WAIT_MS;
	for (;;) {
		enabled_of(c, agent_id, got, sizeof(got));
		if (!strcmp(got, want))
			return;
		ASSERT(now_ms() < end, "agent %llu's standing set is '%s', expected '%s'",
		       (unsigned long long)agent_id, got, want);
		sleep_ms(10);
	}
}

static inline int set_spec(struct tgc *c, uint64_t agent_id, const char *spec)
{
	Toggle__Selector sel = TOGGLE__SELECTOR__INIT;
	sel.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	sel.agent_id = agent_id;
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = &sel;
	m.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	m.spec = (char *)(uintptr_t)spec;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	env.set_enabled = &m;
	char err[ERRLEN];
	return tgc_call(c, &env, NULL, RPC_MS, err, sizeof(err));
}

#endif
