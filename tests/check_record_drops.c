/*
 * check_record_drops.c - a data ring's counters as toggled shows them (issue
 * 24: drops "counted and shown in `togglectl agents` and `/metrics`";
 * docs/recording.md): the real toggled (ASan build, TOGGLED_BIN) with
 * --metrics on a Unix socket, fake agents that register a data ring by hand
 * (the helpers are check_record_daemon.c's).
 *   - the ring's size, the agent's records, drops and errors reach
 *     ListAgents (AgentInfo.ring_*) and /metrics
 *     (graphtoggle_agent_ring_*); what toggled forwarded to a recording is
 *     toggled's own count, equal to what the client received;
 *   - a hostile agent that rewrites its counters backwards, to 2^64 - 1, or
 *     back again: the shown values never go back and never pass 2^53, each
 *     refused read is counted (counter_faults), and toggled serves on;
 *   - an agent without a ring has no ring series and ring_bytes 0.
 * toggled must exit 0 at every test's end (sanitizer reports fail it).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
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
};

static struct env *g_env;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void env_report(void)
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

_Noreturn static void fail_at(int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

_Noreturn static void fail_at(int line, const char *cond, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "check_record_drops.c:%d: FAILED (%s): %s\n", line, cond, msg);
	env_report();
	ck_abort_msg("line %d: %s: %s", line, cond, msg);
	abort();
}

#define ASSERT(cond, ...)                                      \
	do {                                                   \
		if (!(cond))                                   \
			fail_at(__LINE__, #cond, __VA_ARGS__); \
	} while (0)

#define ASSERT_CODE(got, want, err)                                                    \
	ASSERT((got) == (want), "code %d (%s), expected %d (%s); message: %s", (int)(got), \
	       toggle_strerror(got), (int)(want), toggle_strerror(want), (err))

/* ---- the daemon ------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static bool socket_accepts(const char *path)
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

static void env_setup(struct env *e)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->dir, sizeof(e->dir), "/tmp/check_drops.XXXXXX");
	ASSERT(mkdtemp(e->dir), "mkdtemp: %s", strerror(errno));
	chmod(e->dir, 0755);
	snprintf(e->sock, sizeof(e->sock), "%s/t.sock", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	snprintf(e->dlog, sizeof(e->dlog), "%s/toggled.log", e->dir);
	snprintf(e->msock, sizeof(e->msock), "%s/metrics.sock", e->dir);
	g_env = e;
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
		execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state, "--metrics",
		      e->msock, "-v", (char *)NULL);
		_exit(127);
	}
	uint64_t end = now_ms() + 10000;
	while (!socket_accepts(e->sock) || !socket_accepts(e->msock)) {
		int st;
		ASSERT(waitpid(e->daemon, &st, WNOHANG) != e->daemon, "toggled ended at start-up");
		ASSERT(now_ms() < end, "toggled does not accept on %s", e->sock);
		sleep_ms(10);
	}
}

/* SIGTERM: toggled must exit 0 (ASan and leak reports make it exit non-zero). */
static void env_teardown(struct env *e)
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

static struct tgc *client(const struct env *e)
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

static void raw_write(int fd, const void *buf, size_t len, int pass_fd)
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
static int fake_call(struct fake *f, Toggle__Envelope *req, int pass_fd,
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
static void fake_open(struct fake *f, const struct env *e, const char *name, int ring_fd)
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

static void fake_close(struct fake *f)
{
	close(f->fd);
	tgp_reader_free(&f->rd);
	toggle_shm_unmap(&f->shm);
	if (f->ring.base)
		toggle_ring_unmap(&f->ring);
}

/* The agent's step, as its status lane reports it. */
static void fake_step(struct fake *f, int64_t step)
{
	struct toggle_shm_status st;
	memset(&st, 0, sizeof(st));
	st.step = step;
	toggle_shm_status_write(f->shm.st, &st);
	f->step = step;
}

/* What the daemon's request area asks: session and set (bounded wait for a change). */
static uint64_t fake_session(struct fake *f, struct toggle_set *set, bool want_on)
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
static struct toggle_ring_record *fake_put(struct fake *f, uint64_t session, int64_t step,
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

static int record_start(struct tgc *c, Toggle__Selector *sel, const char *spec, uint64_t steps,
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
static Toggle__Envelope *record_next(struct tgc *c, uint64_t id)
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
static bool record_get(struct tgc *c, uint64_t id, struct got *g, Toggle__RecordEnd *end_out,
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

static void daemon_serves(const struct env *e)
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

static Toggle__Selector sel_id(uint64_t id)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	s.agent_id = id;
	return s;
}

static void fill(float *v, size_t n, float base)
{
	for (size_t i = 0; i < n; i++)
		v[i] = base + (float)i;
}

/* ---- what toggled shows ------------------------------------------------------ */

#define SHOWN_MAX (1ull << 53)

struct shown {
	uint64_t bytes, records, dropped, errors, fwd_records, fwd_bytes, faults;
};

/* ListAgents' ring fields of one agent. */
static struct shown listed(struct tgc *c, uint64_t agent_id)
{
	Toggle__Selector sel = sel_id(agent_id);
	Toggle__ListAgentsRequest m = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	m.target = &sel;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT, *rep = NULL;
	env.body_case = TOGGLE__ENVELOPE__BODY_LIST_AGENTS;
	env.list_agents = &m;
	char err[ERRLEN];
	int rc = tgc_call(c, &env, &rep, RPC_MS, err, sizeof(err));
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->agents->n_agents == 1, "%zu agents", rep->agents->n_agents);
	const Toggle__AgentInfo *a = rep->agents->agents[0];
	struct shown s = {a->ring_bytes, a->ring_records, a->ring_dropped, a->ring_errors,
			  a->ring_forwarded_records, a->ring_forwarded_bytes, a->ring_counter_faults};
	toggle__envelope__free_unpacked(rep, NULL);
	return s;
}

/* GET /metrics over the Unix socket: the body, malloc'd. */
static char *scrape(const struct env *e)
{
	struct sockaddr_un sa;
	socklen_t salen;
	ASSERT(tgp_unix_address(e->msock, &sa, &salen) == 0, "address %s", e->msock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&sa, salen) == 0, "connect %s: %s",
	       e->msock, strerror(errno));
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	raw_write(fd, req, sizeof(req) - 1, -1);
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	ASSERT(buf, "malloc");
	uint64_t end = now_ms() + WAIT_MS;
	for (;;) {
		if (n + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ASSERT(buf, "realloc");
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ASSERT(now_ms() < end, "/metrics did not answer");
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t k = read(fd, buf + n, cap - n - 1);
		ASSERT(k >= 0, "read: %s", strerror(errno));
		if (k == 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	buf[n] = 0;
	ASSERT(!strncmp(buf, "HTTP/1.1 200", 12), "/metrics answered: %.80s", buf);
	char *body = strstr(buf, "\r\n\r\n");
	ASSERT(body, "no body");
	memmove(buf, body + 4, strlen(body + 4) + 1);
	return buf;
}

/* The value of metric name for agent id, or -1 when there is no such series. */
static long double series(const char *text, const char *name, uint64_t id)
{
	char idl[48];
	snprintf(idl, sizeof(idl), "id=\"%" PRIu64 "\"}", id);
	size_t nl = strlen(name);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, name, nl) || l[nl] != '{')
			continue;
		const char *eol = strchr(l, '\n');
		const char *at = strstr(l, idl);
		if (!at || (eol && at > eol))
			continue;
		return strtold(at + strlen(idl), NULL);
	}
	return -1;
}

/* Both HELP and TYPE lines of a metric are there. */
static void has_family(const char *text, const char *name, const char *type)
{
	char help[160], typ[160];
	snprintf(help, sizeof(help), "# HELP %s ", name);
	snprintf(typ, sizeof(typ), "# TYPE %s %s\n", name, type);
	ASSERT(strstr(text, help) && strstr(text, typ), "no HELP/TYPE %s for %s", type, name);
}

/* /metrics as a struct shown (every field must have its series). */
static struct shown scraped(const struct env *e, uint64_t id)
{
	/* A render answers scrapes for 250 ms (metrics.c's cache): wait it out. */
	sleep_ms(300);
	char *t = scrape(e);
	static const char *const names[] = {
		"graphtoggle_agent_ring_size_bytes", "graphtoggle_agent_ring_records_total",
		"graphtoggle_agent_ring_dropped_total", "graphtoggle_agent_ring_errors_total",
		"graphtoggle_agent_ring_forwarded_records_total",
		"graphtoggle_agent_ring_forwarded_bytes_total",
		"graphtoggle_agent_ring_counter_faults_total"};
	uint64_t v[7];
	for (size_t i = 0; i < 7; i++) {
		has_family(t, names[i], i ? "counter" : "gauge");
		long double x = series(t, names[i], id);
		ASSERT(x >= 0, "no series %s for agent %" PRIu64, names[i], id);
		ASSERT(x <= (long double)UINT64_MAX, "%s out of range", names[i]);
		v[i] = (uint64_t)x;
	}
	free(t);
	return (struct shown){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
}

static void same(const struct shown *a, const struct shown *b, const char *what)
{
	ASSERT(a->bytes == b->bytes && a->records == b->records && a->dropped == b->dropped &&
	       a->errors == b->errors && a->fwd_records == b->fwd_records &&
	       a->fwd_bytes == b->fwd_bytes && a->faults == b->faults,
	       "%s: listed bytes %" PRIu64 " records %" PRIu64 " dropped %" PRIu64 " errors %" PRIu64
	       " fwd %" PRIu64 "/%" PRIu64 " faults %" PRIu64 "; metrics %" PRIu64 " %" PRIu64
	       " %" PRIu64 " %" PRIu64 " %" PRIu64 "/%" PRIu64 " %" PRIu64,
	       what, a->bytes, a->records, a->dropped, a->errors, a->fwd_records, a->fwd_bytes,
	       a->faults, b->bytes, b->records, b->dropped, b->errors, b->fwd_records, b->fwd_bytes,
	       b->faults);
}

static void counters_write(struct fake *f, uint64_t records, uint64_t dropped, uint64_t errors)
{
	__atomic_store_n(&f->ring.prod->records, records, __ATOMIC_RELEASE);
	__atomic_store_n(&f->ring.prod->dropped, dropped, __ATOMIC_RELEASE);
	__atomic_store_n(&f->ring.prod->errors, errors, __ATOMIC_RELEASE);
}

/* ---- tests -------------------------------------------------------------------- */

/*
 * Real drops and forwarded records: a recording of 3 records whose client
 * reads them, then the ring filled with nobody reading; listed and scraped
 * values equal the ring's own words (written by toggle_ring.h's writer, not
 * by hand) and what the client received.
 */
START_TEST(test_drops_shown)
{
	struct env e;
	env_setup(&e);
	struct fake f, bare;
	fake_open(&f, &e, "eng", -1);
	fake_open(&bare, &e, "noring", -2);
	fake_step(&f, 1);
	struct tgc *c = client(&e);

	struct shown l = listed(c, f.agent_id), m = scraped(&e, f.agent_id);
	ASSERT(l.bytes == RING_CAP && l.records == 0 && l.dropped == 0 && l.fwd_records == 0,
	       "fresh ring listed: bytes %" PRIu64 " records %" PRIu64, l.bytes, l.records);
	same(&l, &m, "fresh ring");
	struct shown nb = listed(c, bare.agent_id);
	ASSERT(nb.bytes == 0 && nb.records == 0, "an agent without a ring lists one");
	char *t = scrape(&e);
	ASSERT(series(t, "graphtoggle_agent_ring_dropped_total", bare.agent_id) < 0,
	       "an agent without a ring has a ring series");
	ASSERT(series(t, "graphtoggle_agent_replays_total", bare.agent_id) >= 0,
	       "the ringless agent is in /metrics at all");
	free(t);

	/* A recording that reads 3 records of 24 bytes (and one of another hook, not forwarded). */
	Toggle__Selector sel = sel_id(f.agent_id);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	ASSERT_CODE(record_start(c, &sel, "resid_post:1", 0, &rep, &id, err), 0, err);
	toggle__envelope__free_unpacked(rep, NULL);
	uint64_t session = fake_session(&f, NULL, true);
	uint64_t sh[2] = {2, 3};
	float v[6];
	fill(v, 6, 1.0f);
	for (int s = 0; s < 3; s++)
		ASSERT(fake_put(&f, session, 2 + s, 0, 1, sh, 2, v, sizeof(v), true), "ring full");
	ASSERT(fake_put(&f, session, 5, 1, 0, sh, 2, v, sizeof(v), true), "ring full");
	struct got g;
	Toggle__RecordEnd rend;
	char msg[ERRLEN];
	uint64_t got_bytes = 0;
	for (int s = 0; s < 3; s++) {
		ASSERT(record_get(c, id, &g, &rend, msg), "ended: %s", msg);
		got_bytes += g.size;
		free(g.data);
	}
	/* The recording ends (its client leaves); then the ring fills with nobody
	 * reading it: the writer drops and counts, toggled forwards nothing more. */
	tgc_close(c);
	fake_session(&f, NULL, false);
	c = client(&e);
	static float big[16384];
	uint64_t bsh[1] = {16384}, written = 0, dropped = 0;
	uint64_t end = now_ms() + WAIT_MS;
	struct tgc *q = client(&e);
	while (dropped < 7 && now_ms() < end) {
		if (fake_put(&f, session, 100 + (int64_t)written, 0, 1, bsh, 1, big, sizeof(big), true))
			written++;
		else
			dropped++;
	}
	ASSERT(written >= RING_CAP / sizeof(big) - 2, "only %" PRIu64 " records fit", written);
	ASSERT(dropped == 7, "the ring never filled");
	uint64_t pub = __atomic_load_n(&f.ring.prod->records, __ATOMIC_RELAXED);
	ASSERT(__atomic_load_n(&f.ring.prod->dropped, __ATOMIC_RELAXED) == 7,
	       "the writer counted its drops");
	l = listed(q, f.agent_id);
	m = scraped(&e, f.agent_id);
	ASSERT(l.dropped == 7 && l.records == pub && l.errors == 0 && l.faults == 0,
	       "listed: records %" PRIu64 " (ring %" PRIu64 ") dropped %" PRIu64 " faults %" PRIu64,
	       l.records, pub, l.dropped, l.faults);
	ASSERT(l.fwd_records == 3 && l.fwd_bytes == got_bytes,
	       "forwarded %" PRIu64 " records, %" PRIu64 " bytes; the client got 3, %" PRIu64,
	       l.fwd_records, l.fwd_bytes, got_bytes);
	same(&l, &m, "after drops");
	tgc_close(q);
	tgc_close(c);
	fake_close(&bare);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/*
 * What a hostile agent writes into its counters, in order, and what must be
 * shown after each: never lower than before, never past 2^53.  Every read
 * of a refused value counts one fault: a listing, a scrape, a listing
 * again, so a lying write adds exactly one fault per read and an honest one
 * none.
 */
START_TEST(test_drops_hostile)
{
	struct env e;
	env_setup(&e);
	struct fake f;
	fake_open(&f, &e, "liar", -1);
	fake_step(&f, 1);
	struct tgc *c = client(&e);
	static const struct {
		uint64_t records, dropped, errors;       /* written by the agent */
		uint64_t s_records, s_dropped, s_errors; /* shown */
		bool lie;
	} seq[] = {
		{10, 5, 1, 10, 5, 1, false}, /* honest */
		{20, 9, 1, 20, 9, 1, false},
		{20, 2, 1, 20, 9, 1, true},  /* drops backwards: kept at 9 */
		{0, 0, 0, 20, 9, 1, true},   /* everything to 0 */
		{25, 9, 2, 25, 9, 2, false}, /* honest again: moves on */
		{26, UINT64_MAX, 2, 26, SHOWN_MAX, 2, true}, /* huge: cut at 2^53 */
		{27, 12, 2, 27, SHOWN_MAX, 2, true},         /* back from huge: stays */
		{UINT64_MAX, UINT64_MAX, UINT64_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, true},
		{SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, false},
	};
	uint64_t faults = 0;
	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		counters_write(&f, seq[i].records, seq[i].dropped, seq[i].errors);
		unsigned lie = seq[i].lie ? 1 : 0;
		struct shown l = listed(c, f.agent_id);
		ASSERT(l.records == seq[i].s_records && l.dropped == seq[i].s_dropped &&
		       l.errors == seq[i].s_errors,
		       "write %zu: listed records %" PRIu64 " dropped %" PRIu64 " errors %" PRIu64
		       ", expected %" PRIu64 " %" PRIu64 " %" PRIu64,
		       i, l.records, l.dropped, l.errors, seq[i].s_records, seq[i].s_dropped,
		       seq[i].s_errors);
		ASSERT(l.faults == faults + lie, "write %zu: %" PRIu64 " faults listed, expected %" PRIu64,
		       i, l.faults, faults + lie);
		struct shown m = scraped(&e, f.agent_id);
		ASSERT(m.records == l.records && m.dropped == l.dropped && m.errors == l.errors,
		       "write %zu: /metrics shows records %" PRIu64 " dropped %" PRIu64 " errors %" PRIu64,
		       i, m.records, m.dropped, m.errors);
		ASSERT(m.faults == l.faults + lie, "write %zu: /metrics faults %" PRIu64 ", expected %" PRIu64,
		       i, m.faults, l.faults + lie);
		struct shown again = listed(c, f.agent_id);
		ASSERT(again.dropped == l.dropped && again.faults == m.faults + lie,
		       "write %zu: listed again dropped %" PRIu64 " faults %" PRIu64, i, again.dropped,
		       again.faults);
		faults = again.faults;
	}
	daemon_serves(&e);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("record_drops");
	TCase *t = tcase_create("drops");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_drops_shown);
	tcase_add_test(t, test_drops_hostile);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	return tu_run_suite(suite());
}
