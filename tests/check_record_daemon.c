/*
 * check_record_daemon.c - recordings end to end (issue 24, docs/recording.md):
 * the real toggled (ASan build, TOGGLED_BIN) on a private socket, fake
 * agents in this process that register a control region and a data ring
 * by hand and write records into the ring with toggle_ring.h's writer (or
 * forge them), and recording clients through the client library.
 *   - a recording delivers exactly the records of the hooks asked for, in
 *     chunks that reassemble to the bytes written; the hooks it added are
 *     in the standing set while it runs and gone after; --steps ends it;
 *   - hostile rings (a rewritten header, forged lengths, an unknown dtype,
 *     a huge shape, a head past the capacity, a hook outside the catalog):
 *     that agent's part ends with ESHM, the other agent of the same
 *     recording goes on, toggled serves everyone and exits cleanly;
 *   - refused: a hook outside the catalog, an agent without a ring, a
 *     second recording of one agent, a ring fd that is not sealed, a user
 *     who may not write sets;
 *   - a client that stops reading: toggled keeps serving, the agent's ring
 *     fills (it drops, never waits); the client leaves: hooks restored and
 *     the agent told to stop recording;
 *   - the whole path with libtoggle's own recorder (toggle_record.h) on the
 *     simulator: every record toggled forwards equals what the producer of
 *     its step and hook wrote, and only hooks the recording asked for.
 * toggled must exit 0 at every test's end (sanitizer reports fail it).
 */
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
#include "toggle.h"
#include "toggle_hooks.h"
#include "toggle_record.h"
#include "toggle_ring.h"
#include "toggle_shm.h"
#include "toggle_sim.h"

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
	char dir[64], sock[128], state[128], dlog[160];
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
	fprintf(stderr, "check_record_daemon.c:%d: FAILED (%s): %s\n", line, cond, msg);
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
	snprintf(e->dir, sizeof(e->dir), "/tmp/check_record.XXXXXX");
	ASSERT(mkdtemp(e->dir), "mkdtemp: %s", strerror(errno));
	chmod(e->dir, 0755);
	snprintf(e->sock, sizeof(e->sock), "%s/t.sock", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	snprintf(e->dlog, sizeof(e->dlog), "%s/toggled.log", e->dir);
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
		execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state, "-v",
		      (char *)NULL);
		_exit(127);
	}
	uint64_t end = now_ms() + 10000;
	while (!socket_accepts(e->sock)) {
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

/* The agent's standing set as the daemon shows it (ListAgents.enabled). */
static void enabled_of(struct tgc *c, uint64_t agent_id, char *out, size_t len)
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
static void enabled_wait(struct tgc *c, uint64_t agent_id, const char *want)
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

static int set_spec(struct tgc *c, uint64_t agent_id, const char *spec)
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

/* ---- tests -------------------------------------------------------------------- */

/* The records asked for, exact, in order; others filtered; steps end it; hooks restored. */
START_TEST(test_record_steps)
{
	struct env e;
	env_setup(&e);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	fake_step(&f, 4);
	struct tgc *c = client(&e);
	ASSERT_CODE(set_spec(c, f.agent_id, "attn_out:0"), 0, "set");
	enabled_wait(c, f.agent_id, "attn_out:0");

	Toggle__Selector sel = sel_id(f.agent_id);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	int rc = record_start(c, &sel, "resid_post:1,attn_out:0", 2, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->record_reply->n_agents == 1, "reply names %zu agents", rep->record_reply->n_agents);
	ASSERT(!strcmp(rep->record_reply->agents[0]->added, "resid_post:1"),
	       "added '%s' (attn_out:0 was on already)", rep->record_reply->agents[0]->added);
	toggle__envelope__free_unpacked(rep, NULL);
	enabled_wait(c, f.agent_id, "resid_post:1,attn_out:0");

	struct toggle_set want;
	uint64_t session = fake_session(&f, &want, true);
	/* A record of the session before (reserved before the agent saw the change): dropped. */
	uint64_t sh[2] = {2, 3};
	float small[6], big[3 * 40000];
	fill(small, 6, 1.0f);
	fill(big, 3 * 40000, 7.0f);
	uint64_t bigsh[2] = {3, 40000};
	ASSERT(fake_put(&f, session - 1, 5, 0, 1, sh, 2, small, sizeof(small), true), "ring full");
	ASSERT(fake_put(&f, session, 5, 0, 1, sh, 2, small, sizeof(small), true), "ring full");
	ASSERT(fake_put(&f, session, 5, 1, 2, sh, 2, small, sizeof(small), true), "ring full"); /* not asked */
	ASSERT(fake_put(&f, session, 6, 1, 0, bigsh, 2, big, sizeof(big), true), "ring full");

	struct got g;
	Toggle__RecordEnd end;
	char msg[ERRLEN];
	ASSERT(record_get(c, id, &g, &end, msg), "ended early: %s", msg);
	ASSERT(g.step == 5 && !strcmp(g.hook, "resid_post:1") && !strcmp(g.dtype, "F32") &&
	       g.ndim == 2 && g.shape[0] == 2 && g.shape[1] == 3 && g.size == sizeof(small) &&
	       g.agent_id == f.agent_id && g.graph == 0xabc1,
	       "first record: step %lld hook %s dtype %s", (long long)g.step, g.hook, g.dtype);
	ASSERT(!memcmp(g.data, small, sizeof(small)), "bytes differ");
	free(g.data);
	ASSERT(record_get(c, id, &g, &end, msg), "ended early: %s", msg);
	ASSERT(g.step == 6 && !strcmp(g.hook, "attn_out:0") && g.size == sizeof(big) &&
	       g.chunks == (sizeof(big) + TGP_RECORD_CHUNK - 1) / TGP_RECORD_CHUNK,
	       "second record: step %lld hook %s, %zu chunks", (long long)g.step, g.hook, g.chunks);
	ASSERT(!memcmp(g.data, big, sizeof(big)), "bytes of the chunked record differ");
	free(g.data);
	/* Step 7 is a third step: the recording of 2 steps ends before it. */
	ASSERT(fake_put(&f, session, 7, 0, 1, sh, 2, small, sizeof(small), true), "ring full");
	ASSERT(!record_get(c, id, &g, &end, msg), "a record of a third step was forwarded");
	ASSERT(end.agent_id == f.agent_id && end.code == 0 && end.records == 2 && end.steps == 2,
	       "agent's end: agent %llu code %d records %llu steps %llu (%s)",
	       (unsigned long long)end.agent_id, end.code, (unsigned long long)end.records,
	       (unsigned long long)end.steps, msg);
	ASSERT(!record_get(c, id, &g, &end, msg) && end.agent_id == 0, "no final end");
	enabled_wait(c, f.agent_id, "attn_out:0"); /* what it added is gone, the rest stays */
	fake_session(&f, NULL, false);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* Forge one record (or the head) of a ring: kind selects how. */
enum forge { F_LENGTH, F_DTYPE, F_SHAPE, F_HEAD, F_HOOK, F_HEADER };

static const char *forge_name(enum forge k)
{
	static const char *n[] = {"length", "dtype", "huge shape", "head", "hook", "header"};
	return n[k];
}

static void forge(struct fake *f, uint64_t session, enum forge k)
{
	float v[6];
	fill(v, 6, 0.0f);
	uint64_t sh[2] = {2, 3};
	if (k == F_HEAD) {
		__atomic_store_n(&f->ring.prod->head, f->w.head + 4 * RING_CAP, __ATOMIC_RELEASE);
		return;
	}
	if (k == F_HEADER) {
		/* The header is copied at registration and never read again: rewriting
		 * it (a huge capacity, a bad magic) must change nothing; the next forged
		 * record then ends it. */
		struct toggle_ring_header *h = f->ring.base;
		h->capacity = 1ull << 40;
		h->magic = 0;
		k = F_LENGTH;
	}
	struct toggle_ring_record *r = fake_put(f, session, 9, 0, 0, sh, 2, v, sizeof(v), false);
	ASSERT(r, "ring full");
	switch (k) {
	case F_LENGTH: r->length = 64ull * RING_CAP; break;
	case F_DTYPE: r->dtype = 200; break;
	case F_SHAPE: r->shape[0] = 1ull << 62; r->shape[1] = 1ull << 62; break;
	case F_HOOK: r->hook_type = 1; r->layer = 100; break; /* in the hook space, not the catalog */
	default: break;
	}
	toggle_ring_record_seal(r);
	toggle_ring_writer_publish(&f->w, f->w.reserve, 1);
}

/* A hostile ring ends its agent's part (ESHM); the other agent goes on; toggled lives. */
START_TEST(test_record_hostile)
{
	struct env e;
	env_setup(&e);
	enum forge k = (enum forge)_i;
	struct fake bad, good;
	fake_open(&bad, &e, "bad", -1);
	fake_open(&good, &e, "good", -1);
	fake_step(&bad, 1);
	fake_step(&good, 1);
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN], msg[ERRLEN];
	int rc = record_start(c, NULL, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->record_reply->n_agents == 2, "%zu agents", rep->record_reply->n_agents);
	toggle__envelope__free_unpacked(rep, NULL);
	uint64_t sb = fake_session(&bad, NULL, true), sg = fake_session(&good, NULL, true);
	forge(&bad, sb, k);
	struct got g;
	Toggle__RecordEnd end;
	ASSERT(!record_get(c, id, &g, &end, msg), "a forged record (%s) was forwarded", forge_name(k));
	ASSERT(end.agent_id == bad.agent_id && end.code == TOGGLE_ESHM,
	       "forged %s: end of agent %llu code %d (%s)", forge_name(k),
	       (unsigned long long)end.agent_id, end.code, msg);
	/* The good agent's records still come, exact. */
	float v[4] = {1, 2, 3, 4};
	uint64_t sh[1] = {4};
	ASSERT(fake_put(&good, sg, 2, 0, 0, sh, 1, v, sizeof(v), true), "ring full");
	ASSERT(record_get(c, id, &g, &end, msg), "the good agent's part ended: %s", msg);
	ASSERT(g.agent_id == good.agent_id && !memcmp(g.data, v, sizeof(v)), "good agent's record");
	free(g.data);
	daemon_serves(&e);
	struct tgc *q = client(&e);
	enabled_wait(q, bad.agent_id, "none"); /* restored at once */
	fake_session(&bad, NULL, false);
	/* A broken ring is not recorded again. */
	Toggle__Selector sel = sel_id(bad.agent_id);
	rc = record_start(q, &sel, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, TOGGLE_ENOTSUP, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(q);
	tgc_close(c);
	fake_close(&bad);
	fake_close(&good);
	env_teardown(&e);
}
END_TEST

/* Refused: outside the catalog, no ring, a second recording, an unsealed ring fd. */
START_TEST(test_record_refused)
{
	struct env e;
	env_setup(&e);
	struct fake f, plain;
	fake_open(&f, &e, "eng", -1);
	fake_open(&plain, &e, "plain", -2);
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	Toggle__Selector sel = sel_id(f.agent_id);
	int rc = record_start(c, &sel, "resid_post:7", 0, &rep, &id, err);
	ASSERT(rc == TOGGLE_ESPEC || rc == TOGGLE_ERANGE, "code %d (%s): %s", rc, toggle_strerror(rc),
	       err);
	ASSERT(strstr(err, "eng"), "the error names the agent: %s", err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	enabled_wait(c, f.agent_id, "none"); /* nothing was added */
	Toggle__Selector ps = sel_id(plain.agent_id);
	rc = record_start(c, &ps, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, TOGGLE_ENOTSUP, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	/* The default target leaves the agent without a ring out and names it. */
	rc = record_start(c, NULL, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->record_reply->n_agents == 1 && rep->record_reply->n_skipped == 1 &&
	       strstr(rep->record_reply->skipped[0], "plain"), "default target: %zu agents, %zu skipped",
	       rep->record_reply->n_agents, rep->record_reply->n_skipped);
	toggle__envelope__free_unpacked(rep, NULL);
	struct tgc *c2 = client(&e);
	rc = record_start(c2, &sel, "resid_post:1", 0, &rep, &id, err);
	ASSERT_CODE(rc, TOGGLE_EBUSY, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c2);
	/* A ring fd that is not sealed is refused; the agent stays registered. */
	struct fake u;
	fake_open(&u, &e, "unsealed", -2);
	int mfd = memfd_create("not-a-ring", MFD_CLOEXEC);
	ASSERT(mfd >= 0 && ftruncate(mfd, TOGGLE_RING_DATA_OFFSET + RING_CAP) == 0, "memfd");
	Toggle__RegisterRingRequest rr = TOGGLE__REGISTER_RING_REQUEST__INIT;
	rr.ring_size = TOGGLE_RING_DATA_OFFSET + RING_CAP;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_RING;
	env.register_ring = &rr;
	rc = fake_call(&u, &env, mfd, TOGGLE__ENVELOPE__BODY_REGISTER_RING_REPLY, err);
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(mfd);
	enabled_of(c2 = client(&e), u.agent_id, err, sizeof(err)); /* still listed */
	tgc_close(c2);
	tgc_close(c);
	fake_close(&u);
	fake_close(&plain);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* Only users who may write sets may record. */
START_TEST(test_record_perm)
{
	if (geteuid() != 0) {
		tu_skip(TU_SKIP_ROOT, __func__, "needs root to connect as uid %d", NOBODY);
		return;
	}
	struct env e;
	env_setup(&e);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork");
	if (pid == 0) {
		if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
			_exit(10);
		struct tgc *c = NULL;
		char err[ERRLEN];
		setenv("TOGGLE_DAEMON_UID", "0", 1);
		if (tgc_connect(e.sock, RPC_MS, &c, err, sizeof(err)) != 0)
			_exit(11);
		Toggle__Envelope *rep = NULL;
		uint64_t id;
		int rc = record_start(c, NULL, "resid_post:0", 0, &rep, &id, err);
		_exit(rc == TOGGLE_EPERM ? 0 : 12);
	}
	int st;
	waitpid(pid, &st, 0);
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "uid %d: record was not refused with EPERM "
	       "(child status %d)", NOBODY, st);
	struct tgc *c = client(&e);
	enabled_wait(c, f.agent_id, "none");
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* A client that stops reading: toggled serves on, the ring fills; it leaves: restored. */
START_TEST(test_record_client_stops)
{
	struct env e;
	env_setup(&e);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	fake_step(&f, 1);
	struct tgc *c = client(&e);
	ASSERT_CODE(set_spec(c, f.agent_id, "attn_out:3"), 0, "set");
	Toggle__Selector sel = sel_id(f.agent_id);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	int rc = record_start(c, &sel, "resid_post:*", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	toggle__envelope__free_unpacked(rep, NULL);
	uint64_t session = fake_session(&f, NULL, true);
	/* Write far more than the client's queue and the ring hold, never reading. */
	static float chunk[16384]; /* 64 KiB a record */
	uint64_t sh[1] = {16384};
	uint64_t written = 0, dropped = 0;
	uint64_t end = now_ms() + WAIT_MS;
	while (dropped < 64 && now_ms() < end) {
		if (fake_put(&f, session, (int64_t)(2 + written), 0, 0, sh, 1, chunk, sizeof(chunk), true))
			written++;
		else
			dropped++, sleep_ms(1);
	}
	ASSERT(dropped >= 64, "the ring never filled (%llu records written)",
	       (unsigned long long)written);
	/* More than the ring holds: toggled forwarded until the client's queue was full. */
	ASSERT(written > 2 * RING_CAP / sizeof(chunk),
	       "only %llu records went before the ring filled", (unsigned long long)written);
	ASSERT(__atomic_load_n(&f.ring.prod->dropped, __ATOMIC_RELAXED) == dropped,
	       "the agent counted its drops");
	daemon_serves(&e); /* toggled did not block on the stuck client */
	/* What toggled queued for the client is there, in ring order without a gap:
	 * the daemon held back (the ring filled) rather than dropping records. */
	struct got g;
	Toggle__RecordEnd rend;
	char msg[ERRLEN];
	uint64_t prev = 0;
	for (unsigned i = 0; i < 32; i++) {
		ASSERT(record_get(c, id, &g, &rend, msg), "recording ended: %s", msg);
		ASSERT(!strcmp(g.hook, "resid_post:0") && g.size == sizeof(chunk), "record %u", i);
		/* seq counts PADs too (where a record would straddle the ring's end): one at most. */
		ASSERT(i == 0 || (g.seq > prev && g.seq <= prev + 2), "record %u has seq %llu after %llu",
		       i, (unsigned long long)g.seq, (unsigned long long)prev);
		prev = g.seq;
		free(g.data);
	}
	struct tgc *q = client(&e);
	enabled_of(q, f.agent_id, err, sizeof(err));
	ASSERT(!strcmp(err, "resid_post:*,attn_out:3"), "while recording: '%s'", err);
	tgc_close(c); /* the client goes away */
	enabled_wait(q, f.agent_id, "attn_out:3");
	fake_session(&f, NULL, false);
	tgc_close(q);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* The agent leaves mid-recording: its part ends ENOAGENT, the recording's last end follows. */
START_TEST(test_record_agent_leaves)
{
	struct env e;
	env_setup(&e);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN], msg[ERRLEN];
	int rc = record_start(c, NULL, "all", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	toggle__envelope__free_unpacked(rep, NULL);
	fake_session(&f, NULL, true);
	fake_close(&f);
	struct got g;
	Toggle__RecordEnd end;
	ASSERT(!record_get(c, id, &g, &end, msg) && end.code == TOGGLE_ENOAGENT, "end code %d (%s)",
	       end.code, msg);
	ASSERT(!record_get(c, id, &g, &end, msg) && end.agent_id == 0, "no final end");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ---- libtoggle's recorder on the simulator, end to end ---------------------- */

struct lt;
struct lt_prod {
	struct lt *lt;
	unsigned h;                  /* the producer's buffer: type * NL + layer */
};

struct lt {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	CUdeviceptr buf[NT * NL];
	uint32_t runs;               /* graph runs (head kernel) */
	int64_t run_step[4096];      /* the step of each run */
	struct lt_prod prod[NT * NL];
	CUgraph graph;
	CUgraphExec exec;
};

static float lt_pattern(uint32_t run, unsigned h, unsigned i)
{
	return (float)(run * 1000u + h * 20u + i);
}

static void lt_head(void *arg)
{
	((struct lt *)arg)->runs++;
}

/* What ran: the run that executes (the head kernel counted it) and the hook. */
static void lt_producer(void *arg)
{
	const struct lt_prod *p = arg;
	float *b = (float *)(uintptr_t)p->lt->buf[p->h];
	for (unsigned i = 0; i < 16; i++)
		b[i] = lt_pattern(p->lt->runs - 1, p->h, i);
}

START_TEST(test_record_libtoggle)
{
	struct env e;
	env_setup(&e);
	static struct lt lt;
	memset(&lt, 0, sizeof(lt));
	ASSERT(toggle_sim_create(&lt.sim) == 0, "sim");
	ASSERT(toggle_sim_stream_create(lt.sim, &lt.stream) == CUDA_SUCCESS, "stream");
	struct toggle_config cfg = {.name = "lt", .catalog = {.type_names = type_names,
							      .n_types = NT, .n_layers = NL},
				    .mode = TOGGLE_MODE_LAZY, .backend = TOGGLE_BACKEND_SIM,
				    .sim = lt.sim, .socket_path = e.sock};
	ASSERT(toggle_agent_open(&cfg, &lt.agent) == 0, "agent open");
	ASSERT(toggle_capture_begin(lt.agent) == 0, "capture");
	ASSERT(toggle_sim_stream_begin_capture(lt.stream) == CUDA_SUCCESS, "capture");
	ASSERT(toggle_sim_launch_kernel(lt.stream, lt_head, &lt) == CUDA_SUCCESS, "head");
	for (unsigned t = 0; t < NT; t++)
		for (unsigned l = 0; l < NL; l++) {
			unsigned h = t * NL + l;
			ASSERT(toggle_sim_mem_alloc(lt.sim, &lt.buf[h], 64) == CUDA_SUCCESS, "alloc");
			lt.prod[h].lt = &lt;
			lt.prod[h].h = h;
			ASSERT(toggle_sim_launch_kernel(lt.stream, lt_producer, &lt.prod[h]) ==
			       CUDA_SUCCESS, "producer");
			struct toggle_hook hk = {(uint16_t)t, (uint16_t)l};
			ASSERT(toggle_record_producer(lt.agent, lt.stream, hk) == 0, "record producer");
			struct toggle_record_buffer b = {.ptr = lt.buf[h], .bytes = 64,
							 .dtype = TOGGLE_DTYPE_F32, .ndim = 2,
							 .shape = {4, 4}};
			ASSERT(toggle_record_buffer(lt.agent, NULL, hk, &b) == 0, "buffer");
		}
	ASSERT(toggle_sim_stream_end_capture(lt.stream, &lt.graph) == CUDA_SUCCESS, "end capture");
	ASSERT(toggle_capture_end(lt.agent) == 0, "capture end");
	ASSERT(toggle_sim_graph_instantiate(&lt.exec, lt.graph) == CUDA_SUCCESS, "instantiate");
	ASSERT(toggle_graph_bind(lt.agent, lt.graph, lt.exec) == 0, "bind");
	ASSERT(toggle_record_open(lt.agent, 1u << 20, NULL) == 0, "record open");

	/* Steps go on while the client asks: the agent and the client share this thread. */
	struct tgc *c = client(&e);
	int64_t step = 0;
	struct toggle_set eff;
	Toggle__Envelope *rep = NULL;
	uint64_t id = 0;
	char err[ERRLEN];
	int rc = TOGGLE_ENOAGENT;
	uint64_t end = now_ms() + WAIT_MS;
	while (rc) { /* until the agent and its ring are registered */
		ASSERT(toggle_step_begin(lt.agent, ++step, &eff) == 0, "step");
		ASSERT(now_ms() < end, "the agent's ring never reached toggled: %s", err);
		rc = record_start(c, NULL, "resid_post:1,attn_out:2", 3, &rep, &id, err);
		ASSERT(rc == 0 || rc == TOGGLE_ENOAGENT || rc == TOGGLE_ENOTSUP, "record: %s", err);
		if (rep)
			toggle__envelope__free_unpacked(rep, NULL);
		rep = NULL;
		sleep_ms(5);
	}
	unsigned got = 0, ends = 0;
	end = now_ms() + WAIT_MS;
	while (ends < 2) {
		ASSERT(now_ms() < end, "the recording did not end (%u records)", got);
		ASSERT(toggle_step_begin(lt.agent, ++step, &eff) == 0, "step");
		ASSERT(lt.runs < 4096, "runs");
		lt.run_step[lt.runs] = step;
		ASSERT(toggle_graph_launch(lt.agent, lt.graph, lt.exec, lt.stream) == 0, "launch: %s",
		       toggle_last_error(lt.agent));
		toggle_record_poll(lt.agent);
		for (;;) {
			Toggle__Envelope *env = NULL;
			if (tgc_recv(c, &env, 2) != 1)
				break;
			if (env->id == id && env->body_case == TOGGLE__ENVELOPE__BODY_RECORD_END) {
				ASSERT(env->record_end->code == 0, "end: %s", env->record_end->message);
				ends++;
			} else if (env->id == id && env->body_case == TOGGLE__ENVELOPE__BODY_RECORD_DATA) {
				const Toggle__RecordData *m = env->record_data;
				ASSERT(!strcmp(m->hook, "resid_post:1") || !strcmp(m->hook, "attn_out:2"),
				       "a record of %s, not asked for", m->hook);
				ASSERT(m->size == 64 && m->data.len == 64 && !strcmp(m->dtype, "F32") &&
				       m->n_shape == 2, "record shape");
				unsigned h = m->hook[0] == 'r' ? 1 : NL + 2;
				float v[16];
				memcpy(v, m->data.data, 64);
				uint32_t run = (uint32_t)(v[0] / 1000.0f);
				ASSERT(run < lt.runs && lt.run_step[run] == m->step,
				       "record of step %lld names run %u", (long long)m->step, run);
				for (unsigned i = 0; i < 16; i++)
					ASSERT(v[i] == lt_pattern(run, h, i), "%s step %lld word %u: %g",
					       m->hook, (long long)m->step, i, v[i]);
				ASSERT(m->graph == (uint64_t)(uintptr_t)lt.graph, "graph");
				got++;
			}
			toggle__envelope__free_unpacked(env, NULL);
		}
	}
	ASSERT(got == 6, "%u records for 3 steps of 2 hooks", got);
	enabled_wait(c, 1, "none");
	tgc_close(c);
	toggle_agent_close(lt.agent);
	toggle_sim_destroy(lt.sim);
	env_teardown(&e);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("record_daemon");
	TCase *t = tcase_create("record");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_record_steps);
	tcase_add_loop_test(t, test_record_hostile, F_LENGTH, F_HEADER + 1);
	tcase_add_test(t, test_record_refused);
	tcase_add_test(t, test_record_perm);
	tcase_add_test(t, test_record_client_stops);
	tcase_add_test(t, test_record_agent_leaves);
	tcase_add_test(t, test_record_libtoggle);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	return tu_run_suite(suite());
}
