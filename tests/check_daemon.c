/*
 * check_daemon.c - end-to-end tests of toggled: the real daemon binary (the
 * ASan/UBSan build, TOGGLED_BIN), agents on the simulator backend in child
 * processes, and the client library.
 *
 * Every test gets a private directory under /tmp with the socket, the state
 * directory and the logs, starts the daemon there, and stops it at the end
 * with SIGTERM: the daemon must exit 0, so an ASan or leak report in it fails
 * the test.  On a failure the daemon's log and the agents' logs are printed
 * and the directory is kept.  Children are tied to the test process with
 * PR_SET_PDEATHSIG, so a failed or timed-out test leaves nothing running.
 *
 * An agent child captures NGRAPHS graphs of NL layers x NT hook types whose
 * producer kernels record what ran, then steps until SIGTERM: each step it
 * launches every graph, checks that what ran is the step's effective set
 * (exit 3 if not), and logs "step S set SPEC" to DIR/agent-NAME.log.
 *
 * Run from the repository root (TOGGLED_BIN is a relative path).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_impl.h" /* white-box: the agent's own status lane */
#include "frame.h"
#include "testutil.h"
#include "util.h"
#include "tgclient.h"
#include "toggle.h"
#include "toggle_shm.h"
#include "toggle_sim.h"

#ifndef TOGGLED_BIN
#error "TOGGLED_BIN must name the daemon binary (daemon/daemon.mk passes it)"
#endif

#define NT             2     /* hook types of the test catalog */
#define NL             4     /* layers */
#define NGRAPHS        2     /* graphs each agent captures */
#define MAX_AGENTS     4
#define SPEC_LEN       256
#define ERRLEN         512
#define RPC_TIMEOUT_MS 15000
#define WAIT_MS        5000  /* wait_ms of SetEnabled requests that must succeed */
#define NOBODY         65534

static const char *const type_names[NT] = {"resid_post", "attn_out"};
static const struct toggle_catalog catalog = {.type_names = type_names, .n_types = NT,
					      .n_layers = NL};

/* Exit codes of an agent child. */
enum { AGENT_OK = 0, AGENT_SETUP = 2, AGENT_MISMATCH = 3, AGENT_LAUNCH = 4, AGENT_STEP = 5 };

struct agent_proc {
	pid_t pid; /* 0 once reaped */
	char name[32];
	char log[PATH_MAX];
};

struct env {
	char dir[64];
	char sock[PATH_MAX], state[PATH_MAX], dlog[PATH_MAX];
	pid_t daemon; /* 0 when not running */
	int n_agents;
	struct agent_proc agents[MAX_AGENTS];
};

/* The running test's environment, for failure reports. */
static struct env *g_env;

/* ======================================================================== */
/* Time, files, failure reports                                              */
/* ======================================================================== */

static uint64_t now_ms(void)
{
	return util_mono_ms();
}

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static const char *status_text(int st)
{
	static char buf[64];
	if (WIFEXITED(st))
		snprintf(buf, sizeof(buf), "exit status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, sizeof(buf), "signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	else
		snprintf(buf, sizeof(buf), "wait status %#x", st);
	return buf;
}

/* The whole file as a string (NULL if unreadable); free() it. */
static char *file_read(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (cap - len < 2) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	fclose(f);
	if (buf)
		buf[len] = '\0';
	return buf;
}

/* Binary-safe: the journal's records have binary headers (issue 30). */
static bool file_contains(const char *path, const char *needle)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	int ch;
	while (m && (ch = getc(f)) != EOF)
		putc(ch, m);
	fclose(f);
	if (m)
		fclose(m);
	bool found = buf && memmem(buf, len, needle, strlen(needle)) != NULL;
	free(buf);
	return found;
}

static void dump_file(const char *title, const char *path, size_t tail)
{
	char *text = file_read(path);
	if (!text) {
		fprintf(stderr, "---- %s (%s): cannot read: %s\n", title, path, strerror(errno));
		return;
	}
	size_t len = strlen(text);
	const char *from = len > tail ? text + len - tail : text;
	fprintf(stderr, "---- %s (%s)%s ----\n%s---- end of %s ----\n", title, path,
		from != text ? ", last part" : "", from, title);
	free(text);
}

static void env_report(void)
{
	const struct env *e = g_env;
	if (!e)
		return;
	fprintf(stderr, "==== test directory kept: %s\n", e->dir);
	dump_file("toggled log", e->dlog, 48 * 1024);
	for (int i = 0; i < e->n_agents; i++) {
		char title[64];
		snprintf(title, sizeof(title), "agent %s log", e->agents[i].name);
		dump_file(title, e->agents[i].log, 1500);
	}
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
	fprintf(stderr, "check_daemon.c:%d: FAILED (%s): %s\n", line, cond, msg);
	env_report();
	ck_abort_msg("line %d: %s: %s", line, cond, msg);
	abort();
}

/* Like ck_assert_msg, but prints the daemon's and agents' logs first. */
#define ASSERT(cond, ...)                                         \
	do {                                                      \
		if (!(cond))                                      \
			fail_at(__LINE__, #cond, __VA_ARGS__);    \
	} while (0)

/* got and want are plain variables or constants (evaluated twice). */
#define ASSERT_CODE(got, want, err)                                                    \
	ASSERT((got) == (want), "code %d (%s), expected %d (%s); message: %s", (int)(got), \
	       toggle_strerror(got), (int)(want), toggle_strerror(want), (err))

#define ASSERT_STR(got, want, what) \
	ASSERT(strcmp((got), (want)) == 0, "%s is '%s', expected '%s'", (what), (got), (want))

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* A hook spec in the canonical text of the test catalog. */
struct spec {
	char s[SPEC_LEN];
};

static struct spec canon(const char *text)
{
	struct toggle_set set;
	struct spec out;
	char err[256];
	int rc = toggle_set_parse(&catalog, text, &set, err, sizeof(err));
	ASSERT(rc == 0, "test spec '%s': %s", text, err);
	toggle_set_format(&catalog, &set, out.s, sizeof(out.s));
	return out;
}

/* ======================================================================== */
/* The daemon                                                                */
/* ======================================================================== */

/* In a child just forked: die with the test process, unblock signals. */
static void child_detach(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(99);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* fork/exec TOGGLED_BIN on the env's socket and state dir; stderr appended to logpath. */
static pid_t daemon_spawn(const struct env *e, const char *logpath)
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_detach(parent);
		int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		close_range(3, ~0u, 0);
		execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state, "-v",
		      (char *)NULL);
		dprintf(2, "check_daemon: exec %s: %s\n", TOGGLED_BIN, strerror(errno));
		_exit(127);
	}
	return pid;
}

/* Wait up to timeout_ms for pid to end: true with *st. */
static bool wait_exit(pid_t pid, int timeout_ms, int *st)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		pid_t r = waitpid(pid, st, WNOHANG);
		if (r == pid)
			return true;
		if (r < 0 && errno != EINTR)
			return false;
		if (now_ms() >= end)
			return false;
		sleep_ms(5);
	}
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

/* Start the daemon and wait (bounded) until its socket accepts. */
static void daemon_start(struct env *e)
{
	e->daemon = daemon_spawn(e, e->dlog);
	uint64_t end = now_ms() + 10000;
	while (!socket_accepts(e->sock)) {
		int st;
		if (waitpid(e->daemon, &st, WNOHANG) == e->daemon) {
			e->daemon = 0;
			ASSERT(0, "toggled ended during start-up with %s", status_text(st));
		}
		ASSERT(now_ms() < end, "toggled does not accept on %s after 10 s", e->sock);
		sleep_ms(10);
	}
}

/* SIGTERM; the daemon must exit 0 (ASan and leak reports make it exit non-zero). */
static void daemon_stop(struct env *e)
{
	if (!e->daemon)
		return;
	pid_t pid = e->daemon;
	int st = 0;
	kill(pid, SIGTERM);
	bool done = wait_exit(pid, 20000, &st);
	if (!done) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	e->daemon = 0;
	ASSERT(done, "toggled did not stop within 20 s of SIGTERM");
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "toggled ended with %s (sanitizer reports are in its log)", status_text(st));
}

static void daemon_kill9(struct env *e)
{
	ASSERT(e->daemon > 0, "no daemon to kill");
	kill(e->daemon, SIGKILL);
	int st;
	waitpid(e->daemon, &st, 0);
	e->daemon = 0;
}

/* ======================================================================== */
/* Agent children                                                            */
/* ======================================================================== */

struct agent_opts {
	const char *name, *group;
	int64_t start;  /* first step */
	bool steps;     /* false: register, capture, bind, then only sleep (never launches) */
	int period_ms;  /* sleep between steps; 0 means 1 ms */
	int64_t anomaly_at; /* > 0: at this step, record a producer outside any capture window */
	uid_t uid;      /* > 0: the agent runs as this uid (and gid) */
	int64_t stall_at; /* > 0: after this step, stall stall_ms, then go on at stall_at + jump */
	int stall_ms;
	int64_t jump;     /* 0 means 1 */
};

static volatile sig_atomic_t child_stop;
static struct toggle_set child_ran; /* producers that ran in the current launch */

static void child_on_term(int sig)
{
	(void)sig;
	child_stop = 1;
}

static void producer_fn(void *arg)
{
	const struct toggle_hook *h = arg;
	toggle_set_add(&child_ran, *h);
}

static void child_log(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void child_log(int fd, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)!write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* Capture one graph (a producer per hook), instantiate it, bind it. */
static int child_capture(struct toggle_agent *a, CUstream s, struct toggle_hook *hooks,
			 CUgraph *graph, CUgraphExec *exec)
{
	int rc = toggle_capture_begin(a);
	if (rc)
		return rc;
	if (toggle_sim_stream_begin_capture(s) != CUDA_SUCCESS)
		return TOGGLE_ECUDA;
	for (uint16_t l = 0; l < NL; l++) {
		for (uint16_t t = 0; t < NT; t++) {
			struct toggle_hook *h = &hooks[l * NT + t];
			*h = (struct toggle_hook){.type = t, .layer = l};
			if (toggle_sim_launch_kernel(s, producer_fn, h) != CUDA_SUCCESS)
				return TOGGLE_ECUDA;
			if ((rc = toggle_record_producer(a, s, *h)))
				return rc;
		}
	}
	if (toggle_sim_stream_end_capture(s, graph) != CUDA_SUCCESS)
		return TOGGLE_ECUDA;
	if ((rc = toggle_capture_end(a)))
		return rc;
	if (toggle_sim_graph_instantiate(exec, *graph) != CUDA_SUCCESS)
		return TOGGLE_ECUDA;
	return toggle_graph_bind(a, *graph, *exec);
}

/* One step: begin it, launch every graph, check what ran, log the set. */
static int child_step(struct toggle_agent *a, int lfd, int64_t step, const CUgraph *graph,
		      const CUgraphExec *exec, CUstream s)
{
	struct toggle_set eff;
	char want[SPEC_LEN], got[SPEC_LEN];
	int rc = toggle_step_begin(a, step, &eff);
	if (rc) {
		child_log(lfd, "error: step_begin(%lld): %s\n", (long long)step, toggle_last_error(a));
		return AGENT_STEP;
	}
	toggle_set_format(&catalog, &eff, want, sizeof(want));
	for (int g = 0; g < NGRAPHS; g++) {
		toggle_set_clear(&child_ran);
		rc = toggle_graph_launch(a, graph[g], exec[g], s);
		if (rc) {
			child_log(lfd, "error: step %lld graph %d: launch: %s\n", (long long)step, g,
				  toggle_last_error(a));
			return AGENT_LAUNCH;
		}
		if (!toggle_set_equal(&child_ran, &eff)) {
			toggle_set_format(&catalog, &child_ran, got, sizeof(got));
			child_log(lfd, "error: step %lld graph %d ran '%s', effective set '%s'\n",
				  (long long)step, g, got, want);
			return AGENT_MISMATCH;
		}
	}
	child_log(lfd, "step %lld set %s\n", (long long)step, want);
	return AGENT_OK;
}

_Noreturn static void agent_main(const struct env *e, const struct agent_opts *o,
				 const char *logpath)
{
	struct sigaction sa = {.sa_handler = child_on_term};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	close_range(3, ~0u, 0); /* the test's sockets must not live on in the agent */
	int lfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (lfd < 0)
		_exit(AGENT_SETUP);
	if (o->uid > 0 && (setgroups(0, NULL) != 0 || setgid((gid_t)o->uid) != 0 ||
			   setuid(o->uid) != 0))
		_exit(AGENT_SETUP);

	struct toggle_sim *sim = NULL;
	struct toggle_agent *a = NULL;
	CUstream stream = NULL;
	struct toggle_hook hooks[NGRAPHS][NT * NL];
	CUgraph graph[NGRAPHS];
	CUgraphExec exec[NGRAPHS];
	int rc = toggle_sim_create(&sim);
	if (!rc && toggle_sim_stream_create(sim, &stream) != CUDA_SUCCESS)
		rc = TOGGLE_ECUDA;
	struct toggle_config cfg = {
		.name = o->name, .group = o->group, .catalog = catalog, .mode = TOGGLE_MODE_LAZY,
		.backend = TOGGLE_BACKEND_SIM, .sim = sim, .socket_path = e->sock,
	};
	if (!rc)
		rc = toggle_agent_open(&cfg, &a);
	for (int g = 0; !rc && g < NGRAPHS; g++)
		rc = child_capture(a, stream, hooks[g], &graph[g], &exec[g]);
	if (rc) {
		child_log(lfd, "error: setup: %s: %s\n", toggle_strerror(rc),
			  a ? toggle_last_error(a) : "");
		_exit(AGENT_SETUP);
	}
	child_log(lfd, "ready pid %d\n", (int)getpid());

	int code = AGENT_OK;
	for (int64_t step = o->start; !child_stop && code == AGENT_OK; step++) {
		if (o->anomaly_at > 0 && step == o->anomaly_at &&
		    toggle_record_producer(a, stream, hooks[0][0]) != TOGGLE_ECAPTURE)
			code = AGENT_SETUP; /* refused and counted, or the test is wrong */
		if (o->steps)
			code = code == AGENT_OK ? child_step(a, lfd, step, graph, exec, stream) : code;
		if (o->stall_at > 0 && step == o->stall_at) {
			sleep_ms(o->stall_ms); /* a rank that stops stepping: no step_begin, no lane read */
			step += (o->jump > 0 ? o->jump : 1) - 1;
		}
		sleep_ms(o->period_ms > 0 ? o->period_ms : 1);
	}
	toggle_agent_close(a);
	toggle_sim_destroy(sim);
	close(lfd);
	_exit(code);
}

/* Fork an agent child; returns its index in e->agents. */
static int agent_start(struct env *e, const struct agent_opts *o)
{
	ASSERT(e->n_agents < MAX_AGENTS, "more than %d agents", MAX_AGENTS);
	struct agent_proc *ap = &e->agents[e->n_agents];
	snprintf(ap->name, sizeof(ap->name), "%s", o->name);
	char log[PATH_MAX];
	snprintf(log, sizeof(log), "%s/agent-%s.log", e->dir, o->name);
	memcpy(ap->log, log, sizeof(ap->log));
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_detach(parent);
		agent_main(e, o, ap->log);
	}
	ap->pid = pid;
	return e->n_agents++;
}

static const char *agent_exit_text(int st)
{
	if (!WIFEXITED(st))
		return "killed";
	switch (WEXITSTATUS(st)) {
	case AGENT_OK: return "clean exit";
	case AGENT_SETUP: return "setup failed";
	case AGENT_MISMATCH: return "producers that ran differ from the effective set";
	case AGENT_LAUNCH: return "a launch was refused";
	case AGENT_STEP: return "step_begin failed";
	default: return "unexpected exit";
	}
}

/* The agent must still run: a dead one fails the test with its reason. */
static void agent_assert_alive(struct agent_proc *ap)
{
	int st;
	if (ap->pid && waitpid(ap->pid, &st, WNOHANG) == ap->pid) {
		ap->pid = 0;
		ASSERT(0, "agent %s ended early: %s (%s)", ap->name, status_text(st),
		       agent_exit_text(st));
	}
}

/* SIGTERM; the agent must exit 0 (every replay ran its step's set). */
static void agent_stop(struct env *e, int i)
{
	struct agent_proc *ap = &e->agents[i];
	if (!ap->pid)
		return;
	int st = 0;
	kill(ap->pid, SIGTERM);
	bool done = wait_exit(ap->pid, 10000, &st);
	if (!done) {
		kill(ap->pid, SIGKILL);
		waitpid(ap->pid, &st, 0);
	}
	ap->pid = 0;
	ASSERT(done, "agent %s did not stop within 10 s of SIGTERM", ap->name);
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == AGENT_OK, "agent %s ended with %s (%s)",
	       ap->name, status_text(st), agent_exit_text(st));
}

static void agent_kill9(struct env *e, int i)
{
	struct agent_proc *ap = &e->agents[i];
	ASSERT(ap->pid > 0, "agent %s is not running", ap->name);
	kill(ap->pid, SIGKILL);
	int st;
	waitpid(ap->pid, &st, 0);
	ap->pid = 0;
}

/* ======================================================================== */
/* Test environment                                                          */
/* ======================================================================== */

static void env_setup(struct env *e)
{
	memset(e, 0, sizeof(*e));
	ASSERT(access(TOGGLED_BIN, X_OK) == 0, "%s: %s (run from the repository root after make)",
	       TOGGLED_BIN, strerror(errno));
	snprintf(e->dir, sizeof(e->dir), "/tmp/tgd-XXXXXX");
	ASSERT(mkdtemp(e->dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(e->sock, sizeof(e->sock), "%s/s.sock", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	snprintf(e->dlog, sizeof(e->dlog), "%s/toggled.log", e->dir);
	g_env = e;
	daemon_start(e);
}

/* Stop the agents (each must exit 0), then the daemon (must exit 0); remove the directory. */
static void env_teardown(struct env *e)
{
	for (int i = 0; i < e->n_agents; i++)
		agent_stop(e, i);
	daemon_stop(e);
	g_env = NULL;
	nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ======================================================================== */
/* Agent logs                                                                */
/* ======================================================================== */

struct aline {
	int64_t step;
	char spec[SPEC_LEN];
};

struct alog {
	struct aline *v;
	size_t n;
};

/* Every complete "step S set SPEC" line of an agent's log. */
static void alog_load(struct alog *l, const char *path)
{
	l->v = NULL;
	l->n = 0;
	FILE *f = fopen(path, "re");
	if (!f)
		return; /* not written yet */
	char line[SPEC_LEN + 64];
	size_t cap = 0;
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);
		if (len == 0 || line[len - 1] != '\n')
			break; /* a line still being written */
		line[len - 1] = '\0';
		long long step;
		int off = 0;
		if (sscanf(line, "step %lld set %n", &step, &off) != 1 || off == 0)
			continue;
		if (l->n == cap) {
			cap = cap ? cap * 2 : 1024;
			struct aline *nv = realloc(l->v, cap * sizeof(*nv));
			ASSERT(nv, "out of memory");
			l->v = nv;
		}
		l->v[l->n].step = step;
		snprintf(l->v[l->n].spec, SPEC_LEN, "%s", line + off);
		l->n++;
	}
	fclose(f);
}

static void alog_free(struct alog *l)
{
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

/* The set logged for step, or NULL. */
static const char *alog_at(const struct alog *l, int64_t step)
{
	if (!l->n)
		return NULL;
	int64_t guess = step - l->v[0].step;
	if (guess >= 0 && (size_t)guess < l->n && l->v[guess].step == step)
		return l->v[guess].spec;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].step == step)
			return l->v[i].spec;
	return NULL;
}

static int64_t alog_last(const struct alog *l)
{
	return l->n ? l->v[l->n - 1].step : -1;
}

static int64_t agent_last_step(const struct agent_proc *ap)
{
	struct alog l;
	alog_load(&l, ap->log);
	int64_t last = alog_last(&l);
	alog_free(&l);
	return last;
}

/* Wait until the agent logged step (or fail, with why if it died). */
static void alog_wait(struct agent_proc *ap, int64_t step, int timeout_ms, struct alog *out)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		alog_load(out, ap->log);
		if (alog_last(out) >= step)
			return;
		int64_t last = alog_last(out);
		alog_free(out);
		agent_assert_alive(ap);
		ASSERT(now_ms() < end, "agent %s did not reach step %lld within %d ms (at %lld)",
		       ap->name, (long long)step, timeout_ms, (long long)last);
		sleep_ms(5);
	}
}

static void alog_expect(const struct alog *l, const struct agent_proc *ap, int64_t step,
			const char *want)
{
	const char *got = alog_at(l, step);
	ASSERT(got, "agent %s logged no step %lld", ap->name, (long long)step);
	ASSERT(strcmp(got, want) == 0, "agent %s ran step %lld with '%s', expected '%s'", ap->name,
	       (long long)step, got, want);
}

/*
 * A command sent after the agent logged before_last, answered when the
 * agent was at step at_step: steps up to before_last ran old_set; from one
 * step on (at_step at the latest) every step ran new_set, through at_step+5.
 */
static void assert_switch(struct agent_proc *ap, int64_t before_last, int64_t at_step,
			  const char *old_set, const char *new_set)
{
	struct alog l;
	alog_wait(ap, at_step + 5, 10000, &l);
	bool seen_new = false;
	int64_t from = before_last > l.v[0].step + 3 ? before_last - 3 : l.v[0].step;
	for (int64_t s = from; s <= at_step + 5; s++) {
		const char *got = alog_at(&l, s);
		ASSERT(got, "agent %s logged no step %lld", ap->name, (long long)s);
		if (s <= before_last) {
			alog_expect(&l, ap, s, old_set);
		} else if (strcmp(got, new_set) == 0) {
			seen_new = true;
		} else {
			ASSERT(!seen_new, "agent %s went back to '%s' at step %lld", ap->name, got,
			       (long long)s);
			alog_expect(&l, ap, s, old_set);
		}
	}
	alog_expect(&l, ap, at_step, new_set);
	alog_free(&l);
}

/* ======================================================================== */
/* Client RPCs                                                               */
/* ======================================================================== */

static struct tgc *client(const struct env *e)
{
	struct tgc *c = NULL;
	char err[ERRLEN];
	int rc = tgc_connect(e->sock, 5000, &c, err, sizeof(err));
	ASSERT_CODE(rc, 0, err);
	return c;
}

/* One request with body msg (every body member is a pointer in one union). */
static int rpc(struct tgc *c, Toggle__Envelope__BodyCase body, void *msg, Toggle__Envelope **rep,
	       char *err)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = body;
	env.hello = msg;
	return tgc_call(c, &env, rep, RPC_TIMEOUT_MS, err, ERRLEN);
}

static int rpc_status(struct tgc *c, Toggle__Envelope **rep, char *err)
{
	Toggle__StatusRequest m = TOGGLE__STATUS_REQUEST__INIT;
	return rpc(c, TOGGLE__ENVELOPE__BODY_STATUS, &m, rep, err);
}

static int rpc_list_agents(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__ListAgentsRequest m = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_LIST_AGENTS, &m, rep, err);
}

static int rpc_list_graphs(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__ListGraphsRequest m = TOGGLE__LIST_GRAPHS_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_LIST_GRAPHS, &m, rep, err);
}

static int rpc_hooks(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__HooksRequest m = TOGGLE__HOOKS_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_HOOKS, &m, rep, err);
}

static int rpc_show_plan(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__ShowPlanRequest m = TOGGLE__SHOW_PLAN_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SHOW_PLAN, &m, rep, err);
}

static int rpc_clear_plan(struct tgc *c, Toggle__Selector *sel, char *err)
{
	Toggle__ClearPlanRequest m = TOGGLE__CLEAR_PLAN_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_CLEAR_PLAN, &m, NULL, err);
}

static int rpc_watch(struct tgc *c, Toggle__Selector *sel, char *err)
{
	Toggle__WatchRequest m = TOGGLE__WATCH_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_WATCH, &m, NULL, err);
}

static int rpc_set(struct tgc *c, Toggle__Selector *sel, Toggle__SetOp op, const char *spec,
		   uint32_t wait_ms, Toggle__Envelope **rep, char *err)
{
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = sel;
	m.op = op;
	m.spec = (char *)(uintptr_t)spec;
	m.wait_ms = wait_ms;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SET_ENABLED, &m, rep, err);
}

/* Set and wait until applied; returns the version the reply names for the one target. */
static uint64_t set_applied(struct tgc *c, Toggle__Selector *sel, Toggle__SetOp op,
			    const char *spec)
{
	Toggle__Envelope *rep = NULL;
	char err[ERRLEN];
	int rc = rpc_set(c, sel, op, spec, WAIT_MS, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY, "reply body %d",
	       (int)rep->body_case);
	ASSERT(rep->set_enabled_reply->n_versions >= 1, "no versions in the reply");
	uint64_t v = rep->set_enabled_reply->versions[0]->version;
	toggle__envelope__free_unpacked(rep, NULL);
	return v;
}

static int rpc_plan(struct tgc *c, Toggle__Selector *sel, const int64_t *steps,
		    const char *const *specs, size_t n, char *err)
{
	Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	Toggle__PlanEntry *e = calloc(n ? n : 1, sizeof(*e));
	Toggle__PlanEntry **ep = calloc(n ? n : 1, sizeof(*ep));
	ASSERT(e && ep, "out of memory");
	for (size_t i = 0; i < n; i++) {
		toggle__plan_entry__init(&e[i]);
		e[i].step = steps[i];
		e[i].spec = (char *)(uintptr_t)specs[i];
		ep[i] = &e[i];
	}
	m.target = sel;
	m.n_entries = n;
	m.entries = ep;
	int rc = rpc(c, TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, &m, NULL, err);
	free(e);
	free(ep);
	return rc;
}

/* A plan of relative entries: each step is the agent's current step + after[i]. */
static int rpc_plan_after(struct tgc *c, Toggle__Selector *sel, const int64_t *after,
			  const char *const *specs, size_t n, char *err)
{
	Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	Toggle__PlanEntry e[8], *ep[8];
	ASSERT(n <= 8, "rpc_plan_after takes 8 entries at most");
	for (size_t i = 0; i < n; i++) {
		toggle__plan_entry__init(&e[i]);
		e[i].step = -1;
		e[i].after = after[i];
		e[i].spec = (char *)(uintptr_t)specs[i];
		ep[i] = &e[i];
	}
	m.target = sel;
	m.n_entries = n;
	m.entries = ep;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, &m, NULL, err);
}

static Toggle__Selector sel_group(const char *group)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_GROUP;
	s.group = (char *)(uintptr_t)group;
	return s;
}

static Toggle__Selector sel_id(uint64_t id)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	s.agent_id = id;
	return s;
}

static Toggle__Selector sel_pid(uint32_t pid)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_PID;
	s.pid = pid;
	return s;
}

/* What list_agents says about one agent. */
struct ainfo {
	uint64_t id, control_version, applied_version, anomalies;
	uint32_t pid, uid, mode, n_layers, graphs, pending_plan;
	int32_t driver_version;
	int64_t step;
	char name[64], group[64], enabled[SPEC_LEN];
	size_t n_types;
	char types[NT + 2][64];
};

static void ainfo_copy(struct ainfo *o, const Toggle__AgentInfo *m)
{
	memset(o, 0, sizeof(*o));
	o->id = m->agent_id;
	o->control_version = m->control_version;
	o->applied_version = m->applied_version;
	o->anomalies = m->anomalies;
	o->pid = m->pid;
	o->uid = m->uid;
	o->mode = m->mode;
	o->n_layers = m->n_layers;
	o->graphs = m->graphs;
	o->driver_version = m->driver_version;
	o->step = m->step;
	o->pending_plan = m->pending_plan;
	snprintf(o->name, sizeof(o->name), "%s", m->name);
	snprintf(o->group, sizeof(o->group), "%s", m->group ? m->group : "");
	snprintf(o->enabled, sizeof(o->enabled), "%s", m->enabled);
	o->n_types = m->n_hook_types;
	for (size_t i = 0; i < m->n_hook_types && i < NT + 2; i++)
		snprintf(o->types[i], sizeof(o->types[i]), "%s", m->hook_types[i]);
}

/* Is the agent listed (then *out)?  How many agents are listed in all (*total)? */
static bool agent_lookup(struct tgc *c, const char *name, struct ainfo *out, size_t *total)
{
	Toggle__Envelope *rep = NULL;
	char err[ERRLEN];
	int rc = rpc_list_agents(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_AGENTS, "reply body %d", (int)rep->body_case);
	bool found = false;
	for (size_t i = 0; i < rep->agents->n_agents; i++) {
		if (strcmp(rep->agents->agents[i]->name, name) == 0) {
			if (out)
				ainfo_copy(out, rep->agents->agents[i]);
			found = true;
		}
	}
	if (total)
		*total = rep->agents->n_agents;
	toggle__envelope__free_unpacked(rep, NULL);
	return found;
}

static struct ainfo agent_info(struct tgc *c, const char *name)
{
	struct ainfo ai;
	ASSERT(agent_lookup(c, name, &ai, NULL), "agent %s is not listed", name);
	return ai;
}

/* Wait until the agent is listed and has begun min_step (-1: registered is enough). */
static struct ainfo agent_wait_listed(struct tgc *c, struct agent_proc *ap, int64_t min_step)
{
	struct ainfo ai;
	uint64_t end = now_ms() + 10000;
	while (!agent_lookup(c, ap->name, &ai, NULL) || ai.step < min_step) {
		agent_assert_alive(ap);
		ASSERT(now_ms() < end, "agent %s not listed (at step %lld) after 10 s", ap->name,
		       (long long)min_step);
		sleep_ms(10);
	}
	return ai;
}

static void agent_wait_gone(struct tgc *c, const char *name)
{
	uint64_t end = now_ms() + 5000;
	while (agent_lookup(c, name, NULL, NULL)) {
		ASSERT(now_ms() < end, "agent %s still listed 5 s after it died", name);
		sleep_ms(10);
	}
}

/* The daemon answers a status request on a fresh connection. */
static void daemon_alive(const struct env *e, const char *after)
{
	struct tgc *c = NULL;
	char err[ERRLEN];
	int rc = tgc_connect(e->sock, 5000, &c, err, sizeof(err));
	ASSERT(rc == 0, "after %s: cannot connect: %s", after, err);
	rc = rpc_status(c, NULL, err);
	ASSERT(rc == 0, "after %s: status: %s", after, err);
	tgc_close(c);
}

struct evinfo {
	uint64_t agent_id, version;
	int64_t step;
};

/* Wait for an event of kind about agent name; other events are skipped. */
static struct evinfo event_wait(struct tgc *c, Toggle__EventKind kind, const char *name,
				int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		uint64_t now = now_ms();
		ASSERT(now < end, "no event %d about %s within %d ms", (int)kind, name, timeout_ms);
		Toggle__Envelope *ev = NULL;
		int got = tgc_next_event(c, &ev, (int)(end - now));
		ASSERT(got >= 0, "watch connection failed: %d", got);
		if (got == 0)
			continue;
		const Toggle__Event *m = ev->event;
		bool match = m->kind == kind && strcmp(m->agent_name, name) == 0;
		struct evinfo out = {.agent_id = m->agent_id, .version = m->version, .step = m->step};
		toggle__envelope__free_unpacked(ev, NULL);
		if (match)
			return out;
	}
}

/* ======================================================================== */
/* Raw connections (frames built by hand, fds passed with SCM_RIGHTS)        */
/* ======================================================================== */

struct raw {
	int fd;
	struct tgp_reader rd;
	uint64_t next_id;
};

static void raw_open(struct raw *r, const struct env *e)
{
	struct sockaddr_un sa;
	socklen_t len;
	ASSERT(tgp_unix_address(e->sock, &sa, &len) == 0, "socket path %s", e->sock);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(r->fd >= 0, "socket: %s", strerror(errno));
	ASSERT(connect(r->fd, (struct sockaddr *)&sa, len) == 0, "connect %s: %s", e->sock,
	       strerror(errno));
	tgp_reader_init(&r->rd);
	r->next_id = 100;
}

static void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	tgp_reader_free(&r->rd);
}

/* Write bytes, the first with pass_fd (if >= 0) as SCM_RIGHTS. */
static void raw_write(struct raw *r, const void *buf, size_t len, int pass_fd)
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
		ssize_t n = sendmsg(r->fd, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		ASSERT(n > 0, "sendmsg: %s", n < 0 ? strerror(errno) : "no progress");
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
	}
}

static void raw_send_env(struct raw *r, Toggle__Envelope *env, int pass_fd)
{
	uint8_t *buf;
	size_t len;
	int rc = tgp_frame_encode(env, &buf, &len);
	ASSERT_CODE(rc, 0, "tgp_frame_encode");
	raw_write(r, buf, len, pass_fd);
	free(buf);
}

/* 1 with *env, 0 when the daemon closed the connection, TOGGLE_ETIMEDOUT. */
static int raw_recv(struct raw *r, Toggle__Envelope **env, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		int got = tgp_reader_next(&r->rd, env);
		ASSERT(got >= 0, "the daemon sent a malformed frame: %s", toggle_strerror(got));
		if (got == 1)
			return 1;
		uint64_t now = now_ms();
		if (now >= end)
			return TOGGLE_ETIMEDOUT;
		struct pollfd p = {.fd = r->fd, .events = POLLIN};
		int n = poll(&p, 1, (int)(end - now));
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			return TOGGLE_ETIMEDOUT;
		uint8_t buf[4096];
		ssize_t k = read(r->fd, buf, sizeof(buf));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return 0; /* end of file or reset: closed */
		ASSERT(tgp_reader_feed(&r->rd, buf, (size_t)k) == 0, "frame reader refused bytes");
	}
}

/* Send req; the reply must come: 0 if its body is want, else the Error's code (err = message). */
static int raw_call(struct raw *r, Toggle__Envelope *req, int pass_fd,
		    Toggle__Envelope__BodyCase want, char *err)
{
	req->id = ++r->next_id;
	raw_send_env(r, req, pass_fd);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(r, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "no reply to message %d: %s", (int)req->body_case,
	       got == 0 ? "connection closed" : "timed out");
	ASSERT(rep->id == req->id, "reply id %llu to request %llu", (unsigned long long)rep->id,
	       (unsigned long long)req->id);
	int rc = 0;
	err[0] = '\0';
	if (rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR) {
		rc = rep->error->code;
		snprintf(err, ERRLEN, "%s", rep->error->message);
		ASSERT(rc < 0, "Error with code %d", rc);
	} else {
		ASSERT(rep->body_case == want, "reply body %d, expected %d", (int)rep->body_case,
		       (int)want);
	}
	toggle__envelope__free_unpacked(rep, NULL);
	return rc;
}

static int raw_hello_version(struct raw *r, uint32_t version, char *err)
{
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = version;
	h.client = (char *)(uintptr_t)"check_daemon-raw";
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	return raw_call(r, &env, -1, TOGGLE__ENVELOPE__BODY_HELLO_REPLY, err);
}

static void raw_hello(struct raw *r)
{
	char err[ERRLEN];
	int rc = raw_hello_version(r, TGP_PROTOCOL_VERSION, err);
	ASSERT_CODE(rc, 0, err);
}

static int raw_status(struct raw *r, char *err)
{
	Toggle__StatusRequest m = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
	env.status = &m;
	return raw_call(r, &env, -1, TOGGLE__ENVELOPE__BODY_STATUS_REPLY, err);
}

/* The daemon closes the connection within 5 s (what it sends before that is dropped). */
static void raw_expect_closed(struct raw *r, const char *after)
{
	for (;;) {
		Toggle__Envelope *env = NULL;
		int got = raw_recv(r, &env, 5000);
		ASSERT(got != TOGGLE_ETIMEDOUT, "after %s: the daemon kept the connection open", after);
		if (got == 0)
			return;
		toggle__envelope__free_unpacked(env, NULL);
	}
}

static int raw_register(struct raw *r, const char *name, size_t n_types, uint32_t n_layers,
			int pass_fd, char *err)
{
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.n_hook_types = n_types;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = n_layers;
	m.mode = 0;
	m.driver_version = 0;
	m.shm_size = 0;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	return raw_call(r, &env, pass_fd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, err);
}

/* ======================================================================== */
/* 1-2. Hello, version, status                                               */
/* ======================================================================== */

START_TEST(test_hello_version)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	ASSERT(tgc_may_write(c), "root or the daemon's own user must be allowed to write");
	ASSERT(tgc_daemon_version(c)[0] != '\0', "empty daemon version");

	/* A Hello of protocol 99 on a live connection, packed by hand: EVERSION. */
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = 99;
	h.client = (char *)(uintptr_t)"check_daemon";
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 77;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	uint8_t *buf;
	size_t len;
	int rc = tgp_frame_encode(&env, &buf, &len);
	ASSERT_CODE(rc, 0, "tgp_frame_encode");
	rc = tgc_send_raw(c, buf, len);
	free(buf);
	ASSERT_CODE(rc, 0, "tgc_send_raw");
	Toggle__Envelope *rep = NULL;
	int got = tgc_recv(c, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "no answer to a Hello of version 99 (%d)", got);
	ASSERT(rep->id == 77 && rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR,
	       "answer id %llu body %d", (unsigned long long)rep->id, (int)rep->body_case);
	ASSERT((int)rep->error->code == TOGGLE_EVERSION, "code %d, expected EVERSION", rep->error->code);
	ASSERT(strstr(rep->error->message, "99"), "message does not name version 99: %s",
	       rep->error->message);
	toggle__envelope__free_unpacked(rep, NULL);
	rc = rpc_status(c, NULL, err);
	ASSERT_CODE(rc, 0, err);
	tgc_close(c);

	/* As the first message: EVERSION, and it does not count as a hello. */
	struct raw r;
	raw_open(&r, &e);
	rc = raw_hello_version(&r, 99, err);
	ASSERT_CODE(rc, TOGGLE_EVERSION, err);
	rc = raw_status(&r, err);
	ASSERT_CODE(rc, TOGGLE_EPROTO, err);
	raw_expect_closed(&r, "a request after a refused hello");
	raw_close(&r);
	env_teardown(&e);
}
END_TEST

START_TEST(test_status)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	int rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_STATUS_REPLY, "body %d", (int)rep->body_case);
	const Toggle__StatusReply *s = rep->status_reply;
	ASSERT_STR(s->daemon_version, tgc_daemon_version(c), "daemon_version");
	ASSERT(s->protocol_version == TGP_PROTOCOL_VERSION, "protocol %u", s->protocol_version);
	ASSERT(s->agents == 0, "%u agents before any started", s->agents);
	ASSERT(s->clients >= 1, "%u clients", s->clients);
	ASSERT(s->requests >= 1, "%llu requests", (unsigned long long)s->requests);
	ASSERT_STR(s->socket, e.sock, "socket");
	ASSERT_STR(s->state_dir, e.state, "state_dir");
	uint64_t uptime0 = s->uptime_ms;
	toggle__envelope__free_unpacked(rep, NULL);

	int a = agent_start(&e,
			&(struct agent_opts){.name = "st-agent", .group = "g", .steps = true});
	agent_wait_listed(c, &e.agents[a], 0);
	rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	s = rep->status_reply;
	ASSERT(s->agents == 1, "%u agents with one registered", s->agents);
	ASSERT(s->uptime_ms >= uptime0, "uptime went back: %llu < %llu",
	       (unsigned long long)s->uptime_ms, (unsigned long long)uptime0);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* 3. Registration                                                           */
/* ======================================================================== */

START_TEST(test_agent_registration)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "reg-agent", .group = "grp", .steps = true});
	struct ainfo ai = agent_wait_listed(c, &e.agents[a], 1);
	ASSERT_STR(ai.name, "reg-agent", "name");
	ASSERT_STR(ai.group, "grp", "group");
	ASSERT(ai.pid == (uint32_t)e.agents[a].pid, "pid %u, child is %d", ai.pid,
	       (int)e.agents[a].pid);
	ASSERT(ai.uid == (uint32_t)geteuid(), "uid %u", ai.uid);
	ASSERT(ai.mode == TOGGLE_MODE_LAZY && ai.driver_version == 0, "mode %u driver %d", ai.mode,
	       ai.driver_version);
	ASSERT(ai.n_types == NT && ai.n_layers == NL, "catalog %zu x %u", ai.n_types, ai.n_layers);
	for (int t = 0; t < NT; t++)
		ASSERT_STR(ai.types[t], type_names[t], "hook type");
	ASSERT(ai.graphs == NGRAPHS, "%u graphs", ai.graphs);
	ASSERT_STR(ai.enabled, "none", "enabled before any command");
	ASSERT(ai.control_version == 0 && ai.anomalies == 0, "control version %llu anomalies %llu",
	       (unsigned long long)ai.control_version, (unsigned long long)ai.anomalies);

	/* A selector by id and by pid names the same agent. */
	Toggle__Selector by_id = sel_id(ai.id), by_pid = sel_pid(ai.pid);
	Toggle__Selector *sels[2] = {&by_id, &by_pid};
	for (int k = 0; k < 2; k++) {
		Toggle__Envelope *rep = NULL;
		int rc = rpc_list_agents(c, sels[k], &rep, err);
		ASSERT_CODE(rc, 0, err);
		ASSERT(rep->agents->n_agents == 1 && rep->agents->agents[0]->agent_id == ai.id,
		       "selector %d: %zu agents", k, rep->agents->n_agents);
		toggle__envelope__free_unpacked(rep, NULL);
	}

	Toggle__Envelope *rep = NULL;
	int rc = rpc_list_graphs(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__ListGraphsReply *lg = rep->graphs;
	ASSERT(lg->n_graphs == NGRAPHS, "%zu graphs listed", lg->n_graphs);
	ASSERT(lg->n_truncated_agents == 0, "truncated");
	for (size_t i = 0; i < lg->n_graphs; i++) {
		const Toggle__GraphInfo *g = lg->graphs[i];
		ASSERT(g->agent_id == ai.id, "graph of agent %llu", (unsigned long long)g->agent_id);
		ASSERT(g->nodes == NT * NL && g->hooks_covered == NT * NL, "graph %zu: %u nodes, %u hooks",
		       i, g->nodes, g->hooks_covered);
		ASSERT(g->bound && !g->stale && g->exec != 0, "graph %zu: bound %d stale %d", i,
		       g->bound, g->stale);
		ASSERT(g->replays > 0, "graph %zu never replayed", i);
	}
	ASSERT(lg->graphs[0]->graph != lg->graphs[1]->graph, "two graphs with one handle");
	toggle__envelope__free_unpacked(rep, NULL);

	rc = rpc_hooks(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__HooksReply *hr = rep->hooks_reply;
	ASSERT(hr->n_agents == 1, "%zu agents in hooks", hr->n_agents);
	const Toggle__AgentHooks *ah = hr->agents[0];
	ASSERT(ah->agent_id == ai.id, "hooks of agent %llu", (unsigned long long)ah->agent_id);
	ASSERT_STR(ah->name, "reg-agent", "hooks name");
	ASSERT(ah->n_hook_types == NT && ah->n_layers == NL, "hooks catalog %zu x %u",
	       ah->n_hook_types, ah->n_layers);
	for (int t = 0; t < NT; t++)
		ASSERT_STR(ah->hook_types[t], type_names[t], "hooks type");
	ASSERT_STR(ah->enabled, "none", "hooks enabled");
	ASSERT_STR(ah->current, "none", "hooks current");
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* 4-6. SetEnabled: operations, waits, selectors                             */
/* ======================================================================== */

/* Set with a wait, then check the daemon's view and the agent's steps. */
static void set_and_check(struct tgc *c, struct agent_proc *ap, Toggle__SetOp op, const char *spec,
			  const char *old_set, const char *new_set)
{
	int64_t before = agent_last_step(ap);
	uint64_t v = set_applied(c, NULL, op, spec);
	struct ainfo ai = agent_info(c, ap->name);
	ASSERT_STR(ai.enabled, new_set, "enabled after the set");
	ASSERT(ai.control_version == v, "control version %llu, reply said %llu",
	       (unsigned long long)ai.control_version, (unsigned long long)v);
	ASSERT(ai.applied_version == v, "applied version %llu after the wait for %llu",
	       (unsigned long long)ai.applied_version, (unsigned long long)v);
	assert_switch(ap, before, ai.step, old_set, new_set);
}

START_TEST(test_set_enabled)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	/* Slow steps: a reply sent before the agent applied would be seen below. */
	int a = agent_start(&e,
			&(struct agent_opts){.name = "setter", .group = "g", .steps = true, .period_ms = 20});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);

	struct spec s1 = canon("resid_post:0-1");
	struct spec s2 = canon("resid_post:0-1,attn_out:3");
	struct spec s3 = canon("resid_post:1,attn_out:3");
	set_and_check(c, ap, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:0-1", "none", s1.s);
	set_and_check(c, ap, TOGGLE__SET_OP__SET_OP_ADD, "attn_out:3", s1.s, s2.s);
	set_and_check(c, ap, TOGGLE__SET_OP__SET_OP_REMOVE, "resid_post:0", s2.s, s3.s);

	/* An unknown hook type: ESPEC naming the agent and the token; nothing changes. */
	struct ainfo before = agent_info(c, ap->name);
	int rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:0,bogus_type:1", WAIT_MS, NULL,
			 err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);
	ASSERT(strstr(err, "setter") && strstr(err, "bogus_type"),
	       "message does not name the agent and the token: %s", err);
	struct ainfo after = agent_info(c, ap->name);
	ASSERT(after.control_version == before.control_version, "control version moved %llu -> %llu",
	       (unsigned long long)before.control_version, (unsigned long long)after.control_version);
	ASSERT_STR(after.enabled, s3.s, "enabled after a refused spec");
	struct alog l;
	alog_wait(ap, after.step + 5, 10000, &l);
	for (int64_t s = before.step; s <= after.step + 5; s++)
		alog_expect(&l, ap, s, s3.s);
	alog_free(&l);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

START_TEST(test_wait_timeout)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "idle-agent", .group = "g", .steps = false});
	agent_wait_listed(c, &e.agents[a], -1);
	uint64_t t0 = now_ms();
	int rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "all", 200, NULL, err);
	uint64_t dt = now_ms() - t0;
	ASSERT_CODE(rc, TOGGLE_ETIMEDOUT, err);
	ASSERT(strstr(err, "idle-agent"), "timeout does not name the agent: %s", err);
	ASSERT(dt >= 190 && dt < 5000, "answered after %llu ms for a wait of 200 ms",
	       (unsigned long long)dt);
	/* The set is the standing one all the same; it was never run. */
	struct ainfo ai = agent_info(c, "idle-agent");
	ASSERT_STR(ai.enabled, "all", "enabled");
	ASSERT(ai.control_version == 1 && ai.applied_version == 0, "control %llu applied %llu",
	       (unsigned long long)ai.control_version, (unsigned long long)ai.applied_version);
	ASSERT(ai.step == -1, "a stepless agent at step %lld", (long long)ai.step);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* No step the agent logged so far ran set. */
static void assert_never_ran(struct agent_proc *ap, const char *set)
{
	struct alog l;
	alog_load(&l, ap->log);
	ASSERT(l.n > 0, "agent %s logged no step", ap->name);
	for (size_t i = 0; i < l.n; i++)
		ASSERT(strcmp(l.v[i].spec, set) != 0, "agent %s ran '%s' at step %lld", ap->name, set,
		       (long long)l.v[i].step);
	alog_free(&l);
}

START_TEST(test_selectors)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int ia = agent_start(&e,
			&(struct agent_opts){.name = "sel-a", .group = "g1", .steps = true});
	int ib = agent_start(&e,
			&(struct agent_opts){.name = "sel-b", .group = "g2", .steps = true});
	struct ainfo a = agent_wait_listed(c, &e.agents[ia], 1);
	struct ainfo b = agent_wait_listed(c, &e.agents[ib], 1);

	Toggle__Selector g1 = sel_group("g1");
	Toggle__Envelope *rep = NULL;
	int rc = rpc_set(c, &g1, TOGGLE__SET_OP__SET_OP_REPLACE, "all", WAIT_MS, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->set_enabled_reply->n_versions == 1 &&
	       rep->set_enabled_reply->versions[0]->agent_id == a.id,
	       "group g1 reached %zu agents", rep->set_enabled_reply->n_versions);
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT_STR(agent_info(c, "sel-a").enabled, "all", "sel-a after the g1 set");
	ASSERT_STR(agent_info(c, "sel-b").enabled, "none", "sel-b after the g1 set");
	ASSERT(agent_info(c, "sel-b").control_version == 0, "sel-b's control lane was written");

	struct spec b_set = canon("attn_out:0"), a_set = canon("resid_post:2");
	Toggle__Selector by_id = sel_id(b.id);
	set_applied(c, &by_id, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:0");
	ASSERT_STR(agent_info(c, "sel-a").enabled, "all", "sel-a after the id set");
	ASSERT_STR(agent_info(c, "sel-b").enabled, b_set.s, "sel-b after the id set");

	Toggle__Selector by_pid = sel_pid(a.pid);
	set_applied(c, &by_pid, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:2");
	ASSERT_STR(agent_info(c, "sel-a").enabled, a_set.s, "sel-a after the pid set");
	ASSERT_STR(agent_info(c, "sel-b").enabled, b_set.s, "sel-b after the pid set");
	assert_never_ran(&e.agents[ib], "all");

	/* Selectors that match nothing. */
	Toggle__Selector none_group = sel_group("nosuch"), none_id = sel_id(a.id + b.id + 100),
			 none_pid = sel_pid(1);
	Toggle__Selector *nothing[3] = {&none_group, &none_id, &none_pid};
	for (int k = 0; k < 3; k++) {
		rc = rpc_set(c, nothing[k], TOGGLE__SET_OP__SET_OP_REPLACE, "none", 0, NULL, err);
		ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
		rc = rpc_list_agents(c, nothing[k], NULL, err);
		ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	}
	ASSERT_STR(agent_info(c, "sel-a").enabled, a_set.s, "sel-a after the selectors of nothing");
	ASSERT_STR(agent_info(c, "sel-b").enabled, b_set.s, "sel-b after the selectors of nothing");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */
/* 7. Plans                                                                  */
/* ======================================================================== */

/*
 * Submit entries at cur+offsets[k] (cur = the agent's step as the daemon
 * sees it) to the one agent; retried if the agent outran the request.
 * Returns cur.
 */
static int64_t plan_ahead(struct tgc *c, const char *name, const int64_t *offsets,
			  const char *const *specs, size_t n)
{
	char err[ERRLEN];
	int64_t steps[8];
	ASSERT(n <= 8, "plan_ahead takes 8 entries at most");
	for (int attempt = 0; attempt < 3; attempt++) {
		int64_t cur = agent_info(c, name).step;
		for (size_t k = 0; k < n; k++)
			steps[k] = cur + offsets[k];
		int rc = rpc_plan(c, NULL, steps, specs, n, err);
		if (rc == TOGGLE_ELATE)
			continue;
		ASSERT_CODE(rc, 0, err);
		return cur;
	}
	ASSERT(0, "plans %lld steps ahead were late three times", (long long)offsets[0]);
}

/* show_plan of the one agent: its entries as "step=spec;..." relative to base. */
static void plan_text(struct tgc *c, int64_t base, char *out, size_t len)
{
	char err[ERRLEN];
	Toggle__Envelope *rep = NULL;
	int rc = rpc_show_plan(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->plan->n_plans == 1, "show_plan lists %zu agents", rep->plan->n_plans);
	const Toggle__AgentPlan *p = rep->plan->plans[0];
	out[0] = '\0';
	for (size_t i = 0; i < p->n_entries; i++) {
		size_t used = strlen(out);
		snprintf(out + used, len - used, "+%lld=%s;", (long long)(p->entries[i]->step - base),
			 p->entries[i]->spec);
	}
	toggle__envelope__free_unpacked(rep, NULL);
}

START_TEST(test_plans)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN], text[1024];
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "planner", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);
	struct spec standing = canon("resid_post:*");
	set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "resid_post:*");

	/* Three entries 50 steps ahead: exactly those sets at exactly those steps. */
	static const char *const specs[3] = {"attn_out:0", "attn_out:1", "all"};
	static const int64_t near[3] = {50, 51, 52};
	int64_t cur = plan_ahead(c, ap->name, near, specs, 3);
	struct alog l;
	alog_wait(ap, cur + 60, 10000, &l);
	for (int64_t s = cur + 1; s <= cur + 60; s++) {
		bool planned = s >= cur + 50 && s <= cur + 52;
		alog_expect(&l, ap, s, planned ? canon(specs[s - cur - 50]).s : standing.s);
	}
	alog_free(&l);

	/* Far entries: listed, then cleared, and they never happen. */
	static const char *const far_specs[2] = {"attn_out:2", "attn_out:3"};
	static const int64_t far[2] = {400, 401};
	cur = plan_ahead(c, ap->name, far, far_specs, 2);
	plan_text(c, cur, text, sizeof(text));
	char want[2 * SPEC_LEN + 32];
	snprintf(want, sizeof(want), "+400=%s;+401=%s;", canon(far_specs[0]).s, canon(far_specs[1]).s);
	ASSERT_STR(text, want, "show_plan");
	int rc = rpc_clear_plan(c, NULL, err);
	ASSERT_CODE(rc, 0, err);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, "", "show_plan after clear_plan");
	alog_wait(ap, cur + 405, 10000, &l);
	for (int64_t s = cur + 395; s <= cur + 405; s++)
		alog_expect(&l, ap, s, standing.s);
	alog_free(&l);

	/* One entry for a step already begun: ELATE, and the other entry does not happen either. */
	cur = agent_info(c, ap->name).step;
	int64_t late_steps[2] = {cur + 100, cur - 1};
	rc = rpc_plan(c, NULL, late_steps, specs, 2, err);
	ASSERT_CODE(rc, TOGGLE_ELATE, err);
	ASSERT(strstr(err, "planner"), "ELATE does not name the agent: %s", err);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, "", "show_plan after a late plan");
	alog_wait(ap, cur + 105, 10000, &l);
	alog_expect(&l, ap, cur + 100, standing.s);
	alog_free(&l);

	/* Malformed plans. */
	int64_t dup[2] = {cur + 1000, cur + 1000};
	rc = rpc_plan(c, NULL, dup, specs, 2, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	rc = rpc_plan(c, NULL, dup, specs, 0, err);
	ASSERT_CODE(rc, TOGGLE_ELIMIT, err);
	plan_text(c, cur, text, sizeof(text));
	ASSERT_STR(text, "", "show_plan after refused plans");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Relative steps are resolved per agent, when the daemon applies the plan to
 * it: two agents far apart in steps get the same offset from their own
 * step, and each runs the entry at that step.
 */
START_TEST(test_plan_relative)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "early", .group = "rel", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "late", .group = "rel", .steps = true,
						     .start = 1000000});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	agent_wait_listed(c, p1, 2);

	static const char *const specs[2] = {"attn_out:1", "resid_post:2"};
	static const int64_t after[2] = {200, 201};
	int64_t before0 = agent_info(c, p0->name).step, before1 = agent_info(c, p1->name).step;
	int rc = rpc_plan_after(c, NULL, after, specs, 2, err);
	ASSERT_CODE(rc, 0, err);
	int64_t after0 = agent_info(c, p0->name).step, after1 = agent_info(c, p1->name).step;

	Toggle__Envelope *rep = NULL;
	rc = rpc_show_plan(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->plan->n_plans == 2, "show_plan lists %zu agents", rep->plan->n_plans);
	int64_t at[2] = {-1, -1};
	for (size_t i = 0; i < 2; i++) {
		const Toggle__AgentPlan *pl = rep->plan->plans[i];
		bool first = pl->agent_id == agent_info(c, p0->name).id;
		int64_t lo = first ? before0 : before1, hi = first ? after0 : after1;
		ASSERT(pl->n_entries == 2, "agent %llu has %zu entries", (unsigned long long)pl->agent_id,
		       pl->n_entries);
		int64_t s0 = pl->entries[0]->step < pl->entries[1]->step ? pl->entries[0]->step
									: pl->entries[1]->step;
		ASSERT(s0 >= lo + 200 && s0 <= hi + 200,
		       "agent %llu: +200 resolved to %lld, its step was %lld..%lld",
		       (unsigned long long)pl->agent_id, (long long)s0, (long long)lo, (long long)hi);
		ASSERT(pl->entries[0]->step + pl->entries[1]->step == 2 * s0 + 1, "+201 is not +200 + 1");
		at[first ? 0 : 1] = s0;
	}
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT(at[1] - at[0] > 900000, "both agents got the same step %lld", (long long)at[0]);

	/* Each runs the entry at its own resolved step. */
	struct agent_proc *ps[2] = {p0, p1};
	for (int i = 0; i < 2; i++) {
		struct alog l;
		alog_wait(ps[i], at[i] + 2, 10000, &l);
		alog_expect(&l, ps[i], at[i], canon(specs[0]).s);
		alog_expect(&l, ps[i], at[i] + 1, canon(specs[1]).s);
		alog_free(&l);
	}

	/* Bad relative entries are refused before anything is written. */
	static const int64_t zero[1] = {0}, huge[1] = {TGP_MAX_PLAN_AFTER + 1};
	rc = rpc_plan_after(c, NULL, zero, specs, 1, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	rc = rpc_plan_after(c, NULL, huge, specs, 1, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	static const int64_t twice[2] = {50, 50};
	rc = rpc_plan_after(c, NULL, twice, specs, 2, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Plan limits: one plan holds 1 to TGP_MAX_PLAN_ENTRIES (64) entries; an
 * agent holds TOGGLE_MAX_PLAN (256) pending entries, the number the agents
 * table shows (pending_plan); a plan past that is refused with an error
 * that names the same number and the same limit.
 */
START_TEST(test_plan_limits)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "limits", .group = "g", .steps = true});
	struct agent_proc *ap = &e.agents[a];
	agent_wait_listed(c, ap, 1);

	int64_t steps[TGP_MAX_PLAN_ENTRIES + 1];
	const char *specs[TGP_MAX_PLAN_ENTRIES + 1];
	for (int i = 0; i <= TGP_MAX_PLAN_ENTRIES; i++)
		specs[i] = "attn_out:1";
	int64_t base = agent_info(c, ap->name).step + 1000000;
	for (int i = 0; i <= TGP_MAX_PLAN_ENTRIES; i++)
		steps[i] = base + i;
	int rc = rpc_plan(c, NULL, steps, specs, TGP_MAX_PLAN_ENTRIES + 1, err);
	ASSERT_CODE(rc, TOGGLE_ELIMIT, err);
	ASSERT(strstr(err, "1 to 64 entries"), "per-plan limit: %s", err);

	/* Fill the agent's pending plan, one full plan at a time: the agent
	 * takes each from its shared memory at its next step. */
	int full = TOGGLE_MAX_PLAN / TGP_MAX_PLAN_ENTRIES;
	for (int b = 0; b < full; b++) {
		for (int i = 0; i < TGP_MAX_PLAN_ENTRIES; i++)
			steps[i] = base + b * TGP_MAX_PLAN_ENTRIES + i;
		for (int tries = 0;; tries++) {
			rc = rpc_plan(c, NULL, steps, specs, TGP_MAX_PLAN_ENTRIES, err);
			if (rc != TOGGLE_EBUSY || !strstr(err, "not yet taken") || tries > 1000)
				break;
			usleep(5000);
		}
		ASSERT_CODE(rc, 0, err);
	}
	struct ainfo ai = agent_info(c, ap->name);
	ASSERT(ai.pending_plan == TOGGLE_MAX_PLAN, "pending_plan %u", ai.pending_plan);

	/* One more: refused whatever the ring holds, in the table's terms. */
	steps[0] = base + TOGGLE_MAX_PLAN;
	for (int tries = 0;; tries++) {
		rc = rpc_plan(c, NULL, steps, specs, 1, err);
		if (rc != TOGGLE_EBUSY || !strstr(err, "not yet taken") || tries > 1000)
			break;
		usleep(5000);
	}
	ASSERT_CODE(rc, TOGGLE_EBUSY, err);
	char want[128];
	snprintf(want, sizeof(want), "has %u pending plan entries", ai.pending_plan);
	ASSERT(strstr(err, want), "the error does not say what the table says (%s): %s", want, err);
	ASSERT(strstr(err, "limit of 256 pending entries per agent"), "limit not named: %s", err);
	ASSERT(agent_info(c, ap->name).pending_plan == TOGGLE_MAX_PLAN, "a refused plan changed the count");

	/* The agent itself holds all of them: none was refused on its side. */
	ai = agent_info(c, ap->name);
	ASSERT(ai.anomalies == 0, "agent anomalies %llu", (unsigned long long)ai.anomalies);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

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
/* 8-9. Events, agent death                                                  */
/* ======================================================================== */

START_TEST(test_watch)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *w = client(&e), *c = client(&e);
	int rc = rpc_watch(w, NULL, err);
	ASSERT_CODE(rc, 0, err);

	int a = agent_start(&e, &(struct agent_opts){.name = "watched", .group = "g", .steps = true,
						     .anomaly_at = 50});
	struct evinfo joined = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_JOINED, "watched", 10000);
	struct ainfo ai = agent_wait_listed(c, &e.agents[a], 1);
	ASSERT(joined.agent_id == ai.id, "joined agent %llu, listed %llu",
	       (unsigned long long)joined.agent_id, (unsigned long long)ai.id);

	/* The agent's anomaly (a producer recorded outside a capture window) is
	 * reported from its status lane. */
	struct evinfo anomaly = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_ANOMALY, "watched", 10000);
	ASSERT(anomaly.agent_id == ai.id, "ANOMALY for agent %llu", (unsigned long long)anomaly.agent_id);

	uint64_t v = set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:*");
	struct evinfo applied = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED, "watched", 10000);
	ASSERT(applied.version == v && applied.agent_id == ai.id, "SET_APPLIED version %llu, set %llu",
	       (unsigned long long)applied.version, (unsigned long long)v);

	agent_stop(&e, a);
	struct evinfo left = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_LEFT, "watched", 10000);
	ASSERT(left.agent_id == ai.id, "left agent %llu", (unsigned long long)left.agent_id);
	tgc_close(w);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

START_TEST(test_agent_kill9)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int iv = agent_start(&e,
			&(struct agent_opts){.name = "victim", .group = "g", .steps = true});
	int ib = agent_start(&e,
			&(struct agent_opts){.name = "bystander", .group = "g", .steps = true});
	int ii = agent_start(&e,
			&(struct agent_opts){.name = "idle-victim", .group = "g", .steps = false});
	struct ainfo victim = agent_wait_listed(c, &e.agents[iv], 1);
	agent_wait_listed(c, &e.agents[ib], 1);
	struct ainfo idle = agent_wait_listed(c, &e.agents[ii], -1);

	/* A wait pending on an agent that dies ends at once with ENOAGENT naming
	 * it, well before its 600 ms deadline. */
	struct raw r;
	raw_open(&r, &e);
	raw_hello(&r);
	Toggle__Selector by_id = sel_id(idle.id);
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = &by_id;
	m.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	m.spec = (char *)(uintptr_t)"all";
	m.wait_ms = 600;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	env.set_enabled = &m;
	env.id = ++r.next_id;
	raw_send_env(&r, &env, -1);
	sleep_ms(50);
	agent_kill9(&e, ii);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(&r, &rep, 400);
	ASSERT(got == 1, "no prompt answer to a wait on a killed agent (%d)", got);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR &&
	       (int)rep->error->code == TOGGLE_ENOAGENT && rep->error->n_agents == 1 &&
	       strcmp(rep->error->agents[0], "idle-victim") == 0,
	       "answer to a wait on a killed agent: body %d", (int)rep->body_case);
	toggle__envelope__free_unpacked(rep, NULL);
	raw_close(&r);

	/* kill -9 of a stepping agent: dropped, the daemon keeps serving. */
	agent_kill9(&e, iv);
	agent_wait_gone(c, "victim");
	agent_wait_gone(c, "idle-victim");
	size_t total = 0;
	ASSERT(agent_lookup(c, "bystander", NULL, &total) && total == 1, "%zu agents listed", total);
	Toggle__Selector by_pid = sel_pid(victim.pid);
	int rc = rpc_set(c, &by_pid, TOGGLE__SET_OP__SET_OP_REPLACE, "all", 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	struct spec s = canon("attn_out:1");
	set_applied(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:1");
	ASSERT_STR(agent_info(c, "bystander").enabled, s.s, "bystander after the set");
	rc = rpc_status(c, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->status_reply->agents == 1, "status counts %u agents", rep->status_reply->agents);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
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
/* 11-12. Permissions, bad input                                             */
/* ======================================================================== */

/* The unprivileged child: exit 0 if everything was as expected, else a step number. */
_Noreturn static void nobody_main(const struct env *e)
{
	char err[ERRLEN];
	struct tgc *c = NULL;
	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
		_exit(10);
	if (tgc_connect(e->sock, 5000, &c, err, sizeof(err)) != 0)
		_exit(11);
	if (tgc_may_write(c))
		_exit(12);
	if (rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "all", 0, NULL, err) != TOGGLE_EPERM)
		_exit(13);
	if (!strstr(err, "65534"))
		_exit(14);
	if (rpc_status(c, NULL, err) != 0)
		_exit(15);
	if (rpc_list_agents(c, NULL, NULL, err) != 0)
		_exit(16);
	int64_t steps[1] = {1000000};
	const char *specs[1] = {"all"};
	if (rpc_plan(c, NULL, steps, specs, 1, err) != TOGGLE_EPERM)
		_exit(17);
	if (rpc_clear_plan(c, NULL, err) != TOGGLE_EPERM)
		_exit(18);
	tgc_close(c);
	_exit(0);
}

/*
 * Run fn(e) in a child process (it drops privileges and _exits 0, or a
 * code that why[] explains) and assert that it passed, within 20 s.
 */
static void run_child(const struct env *e, void (*fn)(const struct env *),
		      const char *what, const char *const *why, size_t n_why)
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_detach(parent);
		fn(e);
		_exit(125); /* fn does not return */
	}
	int st = 0;
	bool done = wait_exit(pid, 20000, &st);
	if (!done) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	ASSERT(done && code == 0, "%s: %s (%s)", what, status_text(st),
	       code > 0 && (size_t)code < n_why && why[code] ? why[code] : "?");
}

START_TEST(test_permission_denied)
{
	if (geteuid() != 0)
		TU_SKIP(TU_SKIP_ROOT, "needs root to become uid %d", NOBODY);
	struct env e;
	env_setup(&e);
	ASSERT(chmod(e.dir, 0755) == 0, "chmod %s: %s", e.dir, strerror(errno));
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "guarded", .group = "g", .steps = true});
	agent_wait_listed(c, &e.agents[a], 1);

	static const char *const why[] = {
		[10] = "cannot become nobody", [11] = "cannot connect",
		[12] = "may_write is true for nobody", [13] = "set_enabled was not refused with EPERM",
		[14] = "EPERM message does not name the uid", [15] = "status failed",
		[16] = "list_agents failed", [17] = "submit_plan was not refused with EPERM",
		[18] = "clear_plan was not refused with EPERM",
	};
	run_child(&e, nobody_main, "unprivileged client", why, sizeof(why) / sizeof(why[0]));
	ASSERT(file_contains(e.dlog, "denied"), "the daemon log does not mention the denial");
	struct ainfo ai = agent_info(c, "guarded");
	ASSERT(ai.control_version == 0, "a denied request wrote the control lane");
	ASSERT_STR(ai.enabled, "none", "enabled after denied requests");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* Raw bytes on a hello'd connection; the daemon must close it. */
static void bad_bytes(const struct env *e, const void *bytes, size_t len, const char *what)
{
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	raw_write(&r, bytes, len, -1);
	raw_expect_closed(&r, what);
	raw_close(&r);
	daemon_alive(e, what);
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* A RegisterAgent on a fresh connection; the daemon keeps serving afterwards. */
static int register_on_fresh(const struct env *e, size_t n_types, uint32_t n_layers, int fd,
			     char *err, const char *what)
{
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	int rc = raw_register(&r, "raw-agent", n_types, n_layers, fd, err);
	raw_close(&r);
	daemon_alive(e, what);
	return rc;
}

START_TEST(test_bad_input)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	uint8_t frame[64];

	/* A frame announcing more than TGP_MAX_FRAME bytes. */
	put_be32(frame, TGP_MAX_FRAME + 1);
	bad_bytes(&e, frame, 4, "an oversize frame header");

	/* Garbage where a protobuf body should be. */
	put_be32(frame, 8);
	memset(frame + 4, 0xff, 8);
	bad_bytes(&e, frame, 12, "a garbage body");

	/* An envelope with no body (tgp_frame_encode refuses those: packed by hand). */
	Toggle__Envelope empty = TOGGLE__ENVELOPE__INIT;
	empty.id = 9;
	size_t n = toggle__envelope__get_packed_size(&empty);
	ASSERT(n + 4 <= sizeof(frame), "packed size %zu", n);
	put_be32(frame, (uint32_t)n);
	toggle__envelope__pack(&empty, frame + 4);
	bad_bytes(&e, frame, n + 4, "an envelope without a body");

	/* A truncated frame, then close. */
	{
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		put_be32(frame, 100);
		memset(frame + 4, 0, 10);
		raw_write(&r, frame, 14, -1);
		raw_close(&r);
		daemon_alive(&e, "a truncated frame and close");
	}

	/* A request before hello: an error, then closed. */
	{
		struct raw r;
		raw_open(&r, &e);
		int rc = raw_status(&r, err);
		ASSERT_CODE(rc, TOGGLE_EPROTO, err);
		raw_expect_closed(&r, "a request before hello");
		raw_close(&r);
		daemon_alive(&e, "a request before hello");
	}

	/* A reply-only body: EPROTO, and the connection stays usable. */
	{
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		Toggle__Ack ack = TOGGLE__ACK__INIT;
		Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
		env.body_case = TOGGLE__ENVELOPE__BODY_ACK;
		env.ack = &ack;
		int rc = raw_call(&r, &env, -1, TOGGLE__ENVELOPE__BODY_ACK, err);
		ASSERT_CODE(rc, TOGGLE_EPROTO, err);
		rc = raw_status(&r, err);
		ASSERT_CODE(rc, 0, err);
		raw_close(&r);
		daemon_alive(&e, "an Ack sent as a request");
	}

	/* RegisterAgent without an fd, with fds that are not a sealed region. */
	int rc = register_on_fresh(&e, NT, NL, -1, err, "a registration without an fd");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	int mfd = memfd_create("check-unsealed", MFD_CLOEXEC);
	ASSERT(mfd >= 0 && ftruncate(mfd, 1 << 20) == 0, "memfd: %s", strerror(errno));
	rc = register_on_fresh(&e, NT, NL, mfd, err, "a registration with an unsealed memfd");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(mfd);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/plain-file", e.dir);
	int tfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ASSERT(tfd >= 0 && ftruncate(tfd, 1 << 20) == 0, "temp file: %s", strerror(errno));
	rc = register_on_fresh(&e, NT, NL, tfd, err, "a registration with a plain file");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(tfd);
	int sfd = memfd_create("check-small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ASSERT(sfd >= 0 && ftruncate(sfd, 4096) == 0 &&
	       fcntl(sfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0,
	       "sealed memfd: %s", strerror(errno));
	rc = register_on_fresh(&e, NT, NL, sfd, err, "a registration with a small sealed memfd");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(sfd);

	/* Catalogs out of bounds, with a good region. */
	struct toggle_shm shm;
	rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	rc = register_on_fresh(&e, 0, NL, shm.fd, err, "a registration with no hook types");
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	rc = register_on_fresh(&e, NT, 300, shm.fd, err, "a registration of 300 layers");
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	/* The same path with everything right registers (the refusals above were for their reason). */
	{
		struct tgc *c = client(&e);
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		rc = raw_register(&r, "raw-agent", NT, NL, shm.fd, err);
		ASSERT_CODE(rc, 0, err);
		struct ainfo ai = agent_info(c, "raw-agent");
		ASSERT(ai.pid == (uint32_t)getpid(), "raw agent pid %u", ai.pid);
		raw_close(&r);
		agent_wait_gone(c, "raw-agent");
		tgc_close(c);
	}
	toggle_shm_unmap(&shm);

	/* Limits of SetEnabled and SubmitPlan. */
	struct tgc *c = client(&e);
	rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "all", TGP_MAX_WAIT_MS + 1, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	int64_t steps[65];
	const char *specs[65];
	for (int i = 0; i < 65; i++) {
		steps[i] = 1000000 + i;
		specs[i] = "all";
	}
	rc = rpc_plan(c, NULL, steps, specs, 65, err);
	ASSERT_CODE(rc, TOGGLE_ELIMIT, err);
	tgc_close(c);
	daemon_alive(&e, "refused limits");
	env_teardown(&e);
}
END_TEST

/*
 * Every handler's error path, and the dispatcher's, reaches the client as an
 * Error carrying the request's id and the handler's code, naming the agent
 * concerned (Error.agents and agent_ids) where there is one, and the
 * connection keeps serving unless the error closes it (issue 16 item 4:
 * handlers fill a reply, only the dispatcher sends it).
 */
enum bad_fill { FILL_NONE, FILL_REGISTER, FILL_SET, FILL_PLAN, FILL_HELLO };
enum bad_target { TARGET_NONE, TARGET_AGENT, TARGET_NO_SUCH_ID, TARGET_NO_SUCH_PID, TARGET_BAD_GROUP };

static const struct bad_request {
	const char *what;
	Toggle__Envelope__BodyCase body;
	const ProtobufCMessageDescriptor *desc; /* the body's message */
	enum bad_target target;                 /* its target field */
	enum bad_fill fill;                     /* its other fields (bad_build) */
	const char *arg;                        /* a name, spec or "unspecified", per fill */
	int64_t num;                            /* a wait, step or protocol version, per fill */
	int code;
	bool names_agent; /* Error.agents and agent_ids name the test's agent */
	bool closes;      /* sent with id 0: answered, then the connection is closed */
} bad_requests[] = {
#define BODY(x, m) TOGGLE__ENVELOPE__BODY_##x, &toggle__##m##__descriptor
	{"RegisterAgent without its fd", BODY(REGISTER_AGENT, register_agent_request), TARGET_NONE,
	 FILL_REGISTER, "err-new", 0, TOGGLE_ESHM, false, false},
	{"RegisterAgent named '..'", BODY(REGISTER_AGENT, register_agent_request), TARGET_NONE,
	 FILL_REGISTER, "..", 1, TOGGLE_EINVAL, false, false},
	{"ListAgents of an agent id nobody has", BODY(LIST_AGENTS, list_agents_request),
	 TARGET_NO_SUCH_ID, FILL_NONE, NULL, 0, TOGGLE_ENOAGENT, false, false},
	{"ListGraphs of group '..'", BODY(LIST_GRAPHS, list_graphs_request), TARGET_BAD_GROUP,
	 FILL_NONE, NULL, 0, TOGGLE_EINVAL, false, false},
	{"Hooks of a pid no agent has", BODY(HOOKS, hooks_request), TARGET_NO_SUCH_PID, FILL_NONE,
	 NULL, 0, TOGGLE_ENOAGENT, false, false},
	{"ShowPlan of group '..'", BODY(SHOW_PLAN, show_plan_request), TARGET_BAD_GROUP, FILL_NONE,
	 NULL, 0, TOGGLE_EINVAL, false, false},
	{"Watch of group '..'", BODY(WATCH, watch_request), TARGET_BAD_GROUP, FILL_NONE, NULL, 0,
	 TOGGLE_EINVAL, false, false},
	{"SetEnabled without an op", BODY(SET_ENABLED, set_enabled_request), TARGET_AGENT, FILL_SET,
	 "unspecified", 0, TOGGLE_EINVAL, false, false},
	{"SetEnabled waiting over the limit", BODY(SET_ENABLED, set_enabled_request), TARGET_AGENT,
	 FILL_SET, "all", TGP_MAX_WAIT_MS + 1, TOGGLE_EINVAL, false, false},
	{"SetEnabled of a hook type the agent lacks", BODY(SET_ENABLED, set_enabled_request),
	 TARGET_AGENT, FILL_SET, "no_such_type:0", 0, TOGGLE_ESPEC, true, false},
	{"SubmitPlan with no entries", BODY(SUBMIT_PLAN, submit_plan_request), TARGET_AGENT,
	 FILL_NONE, NULL, 0, TOGGLE_ELIMIT, false, false},
	{"SubmitPlan of a negative step", BODY(SUBMIT_PLAN, submit_plan_request), TARGET_AGENT,
	 FILL_PLAN, "resid_post:0", -5, TOGGLE_EINVAL, false, false},
	{"SubmitPlan of a spec the agent refuses", BODY(SUBMIT_PLAN, submit_plan_request),
	 TARGET_AGENT, FILL_PLAN, "no_such_type:0", 1000000, TOGGLE_ESPEC, true, false},
	{"ClearPlan of an agent id nobody has", BODY(CLEAR_PLAN, clear_plan_request),
	 TARGET_NO_SUCH_ID, FILL_NONE, NULL, 0, TOGGLE_ENOAGENT, false, false},
	{"an Ack sent as a request", BODY(ACK, ack), TARGET_NONE, FILL_NONE, NULL, 0, TOGGLE_EPROTO,
	 false, false},
	{"a Hello of protocol 99", BODY(HELLO, hello_request), TARGET_NONE, FILL_HELLO, NULL, 99,
	 TOGGLE_EVERSION, false, false},
	{"a request with id 0", BODY(STATUS, status_request), TARGET_NONE, FILL_NONE, NULL, 0,
	 TOGGLE_EPROTO, false, true},
#undef BODY
};

/* What one bad request points to. */
struct bad_msgs {
	void *body; /* malloc'd */
	Toggle__Selector sel;
	Toggle__PlanEntry entry;
	Toggle__PlanEntry *entries[1];
};

static Toggle__Selector bad_selector(enum bad_target t, uint64_t agent_id)
{
	switch (t) {
	case TARGET_AGENT: return sel_id(agent_id);
	case TARGET_NO_SUCH_ID: return sel_id(agent_id + 1000);
	case TARGET_NO_SUCH_PID: return sel_pid((uint32_t)getpid() + 1000000);
	default: return sel_group("..");
	}
}

static void bad_build(const struct bad_request *b, struct bad_msgs *m, Toggle__Envelope *env,
		      uint64_t agent_id)
{
	memset(m, 0, sizeof(*m));
	m->body = calloc(1, b->desc->sizeof_message);
	ASSERT(m->body, "out of memory");
	protobuf_c_message_init(b->desc, m->body);
	if (b->target != TARGET_NONE) {
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field_by_name(b->desc, "target");
		ASSERT(f, "%s: no target field", b->what);
		m->sel = bad_selector(b->target, agent_id);
		*(Toggle__Selector **)(void *)((char *)m->body + f->offset) = &m->sel;
	}
	toggle__envelope__init(env);
	env->body_case = b->body;
	env->hello = m->body; /* every body member is a pointer in one union */
	if (b->fill == FILL_REGISTER) {
		Toggle__RegisterAgentRequest *reg = m->body;
		reg->name = (char *)(uintptr_t)b->arg;
		reg->n_hook_types = NT;
		reg->hook_types = (char **)(uintptr_t)type_names;
		reg->n_layers = NL;
	} else if (b->fill == FILL_SET) {
		Toggle__SetEnabledRequest *set = m->body;
		bool unspecified = strcmp(b->arg, "unspecified") == 0;
		set->op = unspecified ? TOGGLE__SET_OP__SET_OP_UNSPECIFIED : TOGGLE__SET_OP__SET_OP_REPLACE;
		set->spec = (char *)(uintptr_t)(unspecified ? "all" : b->arg);
		set->wait_ms = (uint32_t)b->num;
	} else if (b->fill == FILL_PLAN) {
		Toggle__SubmitPlanRequest *plan = m->body;
		toggle__plan_entry__init(&m->entry);
		m->entry.step = b->num;
		m->entry.spec = (char *)(uintptr_t)b->arg;
		m->entries[0] = &m->entry;
		plan->n_entries = 1;
		plan->entries = m->entries;
	} else if (b->fill == FILL_HELLO) {
		((Toggle__HelloRequest *)m->body)->protocol_version = (uint32_t)b->num;
	}
}

/* Send one bad request (a registration with shm_fd where its num says so);
 * its Error must come with its id, code and agents. */
static void bad_check(const struct env *e, const struct bad_request *b, uint64_t agent_id,
		      int shm_fd)
{
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	struct bad_msgs m;
	Toggle__Envelope env;
	bad_build(b, &m, &env, agent_id);
	env.id = b->closes ? 0 : 4200 + (uint64_t)(b - bad_requests);
	raw_send_env(&r, &env, b->fill == FILL_REGISTER && b->num ? shm_fd : -1);
	free(m.body);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(&r, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "%s: no reply (%s)", b->what, got == 0 ? "closed" : "timed out");
	ASSERT(rep->id == env.id, "%s: reply id %llu, request id %llu", b->what,
	       (unsigned long long)rep->id, (unsigned long long)env.id);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR, "%s: reply body %d, not an Error",
	       b->what, (int)rep->body_case);
	const Toggle__Error *er = rep->error;
	ASSERT((int)er->code == b->code, "%s: code %d (%s), expected %d (%s): %s", b->what,
	       (int)er->code, toggle_strerror((int)er->code), b->code, toggle_strerror(b->code),
	       er->message);
	ASSERT(er->message && er->message[0], "%s: an Error without a message", b->what);
	if (b->names_agent)
		ASSERT(er->n_agents == 1 && strcmp(er->agents[0], "err-agent") == 0 &&
			       er->n_agent_ids == 1 && er->agent_ids[0] == agent_id,
		       "%s: the Error names %zu agents (%s), %zu ids (%llu), not err-agent id %llu",
		       b->what, er->n_agents, er->n_agents ? er->agents[0] : "-", er->n_agent_ids,
		       er->n_agent_ids ? (unsigned long long)er->agent_ids[0] : 0ULL,
		       (unsigned long long)agent_id);
	else
		ASSERT(er->n_agents == 0 && er->n_agent_ids == 0, "%s: the Error names %zu agents",
		       b->what, er->n_agents);
	toggle__envelope__free_unpacked(rep, NULL);
	if (b->closes) {
		raw_expect_closed(&r, b->what);
	} else {
		char err[ERRLEN];
		int rc = raw_status(&r, err);
		ASSERT_CODE(rc, 0, err);
	}
	raw_close(&r);
}

START_TEST(test_error_replies)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct raw agent;
	raw_open(&agent, &e);
	raw_hello(&agent);
	rc = raw_register(&agent, "err-agent", NT, NL, shm.fd, err);
	ASSERT_CODE(rc, 0, err);
	struct tgc *c = client(&e);
	uint64_t id = agent_info(c, "err-agent").id;
	for (size_t i = 0; i < sizeof(bad_requests) / sizeof(bad_requests[0]); i++)
		bad_check(&e, &bad_requests[i], id, shm.fd);
	/* Nothing of it reached the agent: the daemon set no standing set, no plan. */
	struct ainfo ai = agent_info(c, "err-agent");
	ASSERT(ai.control_version == 0 && ai.pending_plan == 0,
	       "refused requests changed the agent: control version %llu, %u plan entries",
	       (unsigned long long)ai.control_version, ai.pending_plan);
	tgc_close(c);
	raw_close(&agent);
	toggle_shm_unmap(&shm);
	daemon_alive(&e, "the bad requests");
	env_teardown(&e);
}
END_TEST

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
 * Fairness (issue 17): a client pipelining a flood of requests must not
 * starve another client's request.  The daemon is stopped while the flood
 * (well within one read of the socket) and then a probe are queued, so both
 * wait when it resumes and the flood's socket is reported first.  A status
 * reply carries the daemon's request count when it was handled: the probe
 * must be handled before the flood's last frame, which a loop that handles
 * all it read from one peer before the next never does.  Then a flood over
 * several reads: every reply, in order, none lost.
 */
static void env_setup_conf(struct env *e, const char *text);

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
static int raw_register_group(struct raw *r, const char *name, const char *group, int fd,
			      char *err);

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
/* Issue 11: a hostile local user                                           */
/* ======================================================================== */

/* Item 1: the agent rewrites its header's lane offsets while registering. */
struct offset_flipper {
	volatile uint64_t *ctl_off, *st_off;
	uint64_t good_ctl, good_st;
	volatile int stop;
};

static void *offsets_flip(void *arg)
{
	struct offset_flipper *f = arg;
	const uint64_t far = (uint64_t)1 << 40;
	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		__atomic_store_n(f->ctl_off, far, __ATOMIC_RELAXED);
		__atomic_store_n(f->st_off, far, __ATOMIC_RELAXED);
		for (volatile int i = 0; i < 64; i++)
			;
		__atomic_store_n(f->ctl_off, f->good_ctl, __ATOMIC_RELAXED);
		__atomic_store_n(f->st_off, f->good_st, __ATOMIC_RELAXED);
		for (volatile int i = 0; i < 64; i++)
			;
	}
	return NULL;
}

START_TEST(test_shm_offsets_rewritten_while_registering)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct offset_flipper f = {.ctl_off = &shm.hdr->control_offset,
				   .st_off = &shm.hdr->status_offset,
				   .good_ctl = shm.hdr->control_offset,
				   .good_st = shm.hdr->status_offset};
	pthread_t t;
	ASSERT(pthread_create(&t, NULL, offsets_flip, &f) == 0, "pthread_create");
	int accepted = 0, refused = 0;
	/* docs/reliability.md runs it longer: TG_HOSTILE_REGISTRATIONS=N. */
	const char *env_n = getenv("TG_HOSTILE_REGISTRATIONS");
	int rounds = env_n && atoi(env_n) > 0 ? atoi(env_n) : 2000;
	for (int i = 0; i < rounds; i++) {
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		/* Every registration is answered (accepted, or refused as ESHM): never a crash. */
		rc = raw_register(&r, "shifty", NT, NL, shm.fd, err);
		ASSERT(rc == 0 || rc == TOGGLE_ESHM, "registration %d: %s: %s", i, toggle_strerror(rc),
		       err);
		if (rc == 0)
			accepted++;
		else
			refused++;
		raw_close(&r);
	}
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	daemon_alive(&e, "registrations of a region whose offsets kept changing");
	printf("hostile registrations: %d, accepted %d, refused %d, daemon alive\n", rounds, accepted,
	       refused);
	ASSERT(accepted > 0 && refused > 0, "%d accepted, %d refused: the race was not exercised",
	       accepted, refused);
	toggle_shm_unmap(&shm);
	env_teardown(&e);
}
END_TEST

/* Item 8: a RegisterAgent whose name is patched after packing (byte at, to). */
static int raw_register_patched(struct raw *r, const char *name, char at, char to, int pass_fd,
				char *err)
{
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.n_hook_types = NT;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = NL;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = ++r->next_id;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	uint8_t *buf;
	size_t len;
	ASSERT_CODE(tgp_frame_encode(&env, &buf, &len), 0, "tgp_frame_encode");
	uint8_t *hit = memmem(buf, len, name, strlen(name));
	ASSERT(hit, "name not found in the packed frame");
	uint8_t *c = memchr(hit, at, strlen(name));
	ASSERT(c, "no '%c' in the name", at);
	*c = (uint8_t)to;
	raw_write(r, buf, len, pass_fd);
	free(buf);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(r, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "no reply to a patched RegisterAgent");
	int rc = 0;
	err[0] = '\0';
	if (rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR) {
		rc = rep->error->code;
		snprintf(err, ERRLEN, "%s", rep->error->message);
	}
	toggle__envelope__free_unpacked(rep, NULL);
	return rc;
}

START_TEST(test_names_dot_and_nul_refused)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct tgc *c = client(&e);
	static const char *const dots[] = {".", ".."};
	for (int i = 0; i < 2; i++) {
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		rc = raw_register(&r, dots[i], NT, NL, shm.fd, err);
		ASSERT_CODE(rc, TOGGLE_EINVAL, err);
		raw_close(&r);
		ASSERT(!agent_lookup(c, dots[i], NULL, NULL), "agent '%s' was registered", dots[i]);
	}
	/* "a\0/../../x": C would read it as "a". */
	{
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		rc = raw_register_patched(&r, "a#/../../x", '#', '\0', shm.fd, err);
		ASSERT_CODE(rc, TOGGLE_EINVAL, err);
		ASSERT(strstr(err, "NUL"), "the error does not say why: %s", err);
		ASSERT(!agent_lookup(c, "a", NULL, NULL), "'a\\0/../../x' was registered as 'a'");
		/* The connection stays usable: the refusal was for this request only. */
		rc = raw_register(&r, "after-nul", NT, NL, shm.fd, err);
		ASSERT_CODE(rc, 0, err);
		raw_close(&r);
	}
	tgc_close(c);
	toggle_shm_unmap(&shm);
	daemon_alive(&e, "names with dots and NUL bytes");
	env_teardown(&e);
}
END_TEST

/*
 * Item 11: a client that queries the agent between the daemon's status polls
 * must not make watchers miss SET_APPLIED.  Each round sets without waiting,
 * queries until the agent applied it (each query reads the status lane), and
 * then the watcher must still hear of that version.
 */
START_TEST(test_events_survive_queries)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *w = client(&e), *c = client(&e);
	int rc = rpc_watch(w, NULL, err);
	ASSERT_CODE(rc, 0, err);
	int a = agent_start(&e, &(struct agent_opts){.name = "queried", .steps = true});
	agent_wait_listed(c, &e.agents[a], 1);
	for (int round = 0; round < 10; round++) {
		Toggle__Envelope *rep = NULL;
		rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, round % 2 ? "attn_out:*" : "resid_post:*", 0,
			     &rep, err);
		ASSERT_CODE(rc, 0, err);
		ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY &&
		       rep->set_enabled_reply->n_versions == 1, "set reply");
		uint64_t v = rep->set_enabled_reply->versions[0]->version;
		toggle__envelope__free_unpacked(rep, NULL);
		uint64_t end = now_ms() + 10000;
		while (agent_info(c, "queried").applied_version < v)
			ASSERT(now_ms() < end, "round %d: version %llu not applied in 10 s", round,
			       (unsigned long long)v);
		struct evinfo ev;
		do
			ev = event_wait(w, TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED, "queried", 3000);
		while (ev.version < v);
		ASSERT(ev.version == v, "round %d: SET_APPLIED %llu, set %llu", round,
		       (unsigned long long)ev.version, (unsigned long long)v);
	}
	tgc_close(w);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Item 5: an agent with a foreign catalog (here: no attn_out hooks) must not
 * make the operator's default-target set and plan fail for everyone: it is
 * left out and named; an explicit selector naming it still fails.
 */
START_TEST(test_default_target_not_poisoned)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a = agent_start(&e, &(struct agent_opts){.name = "native", .steps = true});
	struct ainfo native = agent_wait_listed(c, &e.agents[a], 1);
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct raw r;
	raw_open(&r, &e);
	raw_hello(&r);
	rc = raw_register(&r, "foreign", 1, 1, shm.fd, err); /* resid_post:0 only */
	ASSERT_CODE(rc, 0, err);
	struct ainfo foreign = agent_info(c, "foreign");

	Toggle__Envelope *rep = NULL;
	rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:*", WAIT_MS, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__SetEnabledReply *sr = rep->set_enabled_reply;
	ASSERT(sr->n_versions == 1 && sr->versions[0]->agent_id == native.id,
	       "set went to %zu agents (first %llu), expected only native %llu", sr->n_versions,
	       sr->n_versions ? (unsigned long long)sr->versions[0]->agent_id : 0ull,
	       (unsigned long long)native.id);
	ASSERT(sr->n_skipped == 1 && strstr(sr->skipped[0], "foreign") &&
	       strstr(sr->skipped[0], "attn_out"), "skipped: %zu '%s'", sr->n_skipped,
	       sr->n_skipped ? sr->skipped[0] : "");
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT_STR(agent_info(c, "native").enabled, "attn_out:*", "native's set");
	ASSERT(agent_info(c, "foreign").control_version == foreign.control_version,
	       "the foreign agent's lane was written");

	/* A plan to the default target: the same. */
	int64_t step = agent_info(c, "native").step + 100000;
	Toggle__PlanEntry pe = TOGGLE__PLAN_ENTRY__INIT, *pep = &pe;
	pe.step = step;
	pe.spec = (char *)(uintptr_t)"attn_out:0";
	Toggle__SubmitPlanRequest pm = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	pm.n_entries = 1;
	pm.entries = &pep;
	rc = rpc(c, TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, &pm, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_ACK && rep->ack->n_skipped == 1 &&
	       strstr(rep->ack->skipped[0], "foreign"), "plan: foreign not named as skipped");
	toggle__envelope__free_unpacked(rep, NULL);

	/* Named explicitly, it still refuses (all or nothing). */
	Toggle__Selector sel = sel_id(foreign.id);
	rc = rpc_set(c, &sel, TOGGLE__SET_OP__SET_OP_REPLACE, "attn_out:*", 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);
	ASSERT(strstr(err, "foreign"), "the error does not name the agent: %s", err);
	/* A spec nobody accepts fails naming an agent, as before. */
	rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "no_such_hook:*", 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);
	raw_close(&r);
	toggle_shm_unmap(&shm);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* Item 5: a daemon started with a configuration file (text) in the env's directory. */
static void env_setup_conf(struct env *e, const char *text)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->dir, sizeof(e->dir), "/tmp/tgd-XXXXXX");
	ASSERT(mkdtemp(e->dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(e->sock, sizeof(e->sock), "%s/s.sock", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	snprintf(e->dlog, sizeof(e->dlog), "%s/toggled.log", e->dir);
	g_env = e;
	char conf[PATH_MAX];
	snprintf(conf, sizeof(conf), "%s/toggled.conf", e->dir);
	FILE *f = fopen(conf, "we");
	ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", conf);
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_detach(parent);
		int fd = open(e->dlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		close_range(3, ~0u, 0);
		execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state, "-c", conf,
		      "-v", (char *)NULL);
		_exit(127);
	}
	e->daemon = pid;
	uint64_t end = now_ms() + 10000;
	while (!socket_accepts(e->sock)) {
		int st;
		if (waitpid(e->daemon, &st, WNOHANG) == e->daemon) {
			e->daemon = 0;
			ASSERT(0, "toggled ended during start-up with %s", status_text(st));
		}
		ASSERT(now_ms() < end, "toggled does not accept on %s after 10 s", e->sock);
		sleep_ms(10);
	}
}

static int raw_register_group(struct raw *r, const char *name, const char *group, int fd,
			      char *err)
{
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.group = (char *)(uintptr_t)group;
	m.n_hook_types = NT;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = NL;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	return raw_call(r, &env, fd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, err);
}

/* uid 65534: refused in group prod (tied to uid 4242), admitted in lab (open). */
_Noreturn static void group_child(const struct env *e)
{
	char err[ERRLEN];
	struct toggle_shm shm;
	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
		_exit(10);
	if (toggle_shm_create(&shm, err, ERRLEN) != 0)
		_exit(11);
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	if (raw_register_group(&r, "squatter", "prod", shm.fd, err) != TOGGLE_EPERM)
		_exit(12);
	if (!strstr(err, "agent_group"))
		_exit(13);
	if (raw_register_group(&r, "labrat", "lab", shm.fd, err) != 0)
		_exit(14);
	raw_close(&r);
	_exit(0);
}

START_TEST(test_agent_group_tied_to_uid)
{
	if (geteuid() != 0)
		TU_SKIP(TU_SKIP_ROOT, "needs root to become uid %d", NOBODY);
	struct env e;
	env_setup_conf(&e, "agent_group = prod: 4242, @no-such-group-here\n");
	ASSERT(chmod(e.dir, 0755) == 0, "chmod %s: %s", e.dir, strerror(errno));
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct raw r;
	raw_open(&r, &e);
	raw_hello(&r);
	rc = raw_register_group(&r, "rooted", "prod", shm.fd, err); /* root may */
	ASSERT_CODE(rc, 0, err);
	static const char *const why[] = {
		[10] = "cannot become nobody", [11] = "shm", [12] = "group prod was not refused with EPERM",
		[13] = "the refusal does not name agent_group", [14] = "open group lab was refused",
	};
	run_child(&e, group_child, "uid 65534 agent", why, sizeof(why) / sizeof(why[0]));
	struct tgc *c = client(&e);
	ASSERT(!agent_lookup(c, "squatter", NULL, NULL), "the squatter is registered");
	tgc_close(c);
	raw_close(&r);
	toggle_shm_unmap(&shm);
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static TCase *add_tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tc;
}

/* ======================================================================== */
/* Aligned sets (issue 27)                                                   */
/* ======================================================================== */

static int rpc_set_aligned(struct tgc *c, Toggle__Selector *sel, const char *spec, uint32_t wait_ms,
			   uint32_t margin, Toggle__Envelope **rep, char *err)
{
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = sel;
	m.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	m.spec = (char *)(uintptr_t)spec;
	m.wait_ms = wait_ms;
	m.aligned = true;
	m.aligned_margin = margin;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SET_ENABLED, &m, rep, err);
}

/* Every step from..to of the agent ran old_set before at, new_set from at on. */
static void assert_switch_at(struct agent_proc *ap, int64_t from, int64_t at, int64_t to,
			     const char *old_set, const char *new_set)
{
	struct alog l;
	alog_wait(ap, to, 20000, &l);
	for (int64_t s = from; s <= to; s++)
		alog_expect(&l, ap, s, s < at ? old_set : new_set);
	alog_free(&l);
}

/* A registered agent whose status lane the test writes: the agent's word, an adversary's. */
struct fake_agent {
	struct raw r;
	struct toggle_shm shm;
	struct toggle_shm_status *st;
};

static void fake_start(struct fake_agent *f, const struct env *e, const char *name,
		       const char *group, size_t n_types, uint32_t n_layers, int64_t step,
		       uint64_t features)
{
	char err[ERRLEN];
	int rc = toggle_shm_create(&f->shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	f->st = calloc(1, sizeof(*f->st));
	ASSERT(f->st, "out of memory");
	f->st->step = step;
	f->st->features = features;
	toggle_shm_status_write(f->shm.st, f->st);
	raw_open(&f->r, e);
	raw_hello(&f->r);
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.group = (char *)(uintptr_t)group;
	m.n_hook_types = n_types;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = n_layers;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	rc = raw_call(&f->r, &env, f->shm.fd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, err);
	ASSERT_CODE(rc, 0, err);
}

static void fake_stop(struct tgc *c, struct fake_agent *f, const char *name)
{
	raw_close(&f->r);
	agent_wait_gone(c, name);
	toggle_shm_unmap(&f->shm);
	free(f->st);
}

/*
 * Two agents of one group at steps 700 apart: the reply names one step,
 * above both agents' steps, and both switch at exactly that step.  A second
 * aligned set before the first's step is EBUSY; with a wait, the reply
 * leaves only once both ran it.
 */
START_TEST(test_aligned_switch)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "rank1", .group = "tp", .steps = true,
						     .start = 700});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	agent_wait_listed(c, p1, 702);
	sleep_ms(300); /* a step-rate sample (TD_ALIGN_RATE_MS) */

	Toggle__Selector tp = sel_group("tp");
	Toggle__Envelope *rep = NULL;
	int64_t b0 = agent_last_step(p0), b1 = agent_last_step(p1);
	int rc = rpc_set_aligned(c, &tp, "attn_out:1", 0, 0, &rep, err);
	ASSERT_CODE(rc, 0, err);
	const Toggle__SetEnabledReply *sr = rep->set_enabled_reply;
	int64_t at = sr->aligned_step;
	ASSERT(sr->n_versions == 2, "aligned set reached %zu agents", sr->n_versions);
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT(at > b1 + 3 && at > b0, "aligned step %lld, agents were at %lld and %lld",
	       (long long)at, (long long)b0, (long long)b1);
	ASSERT(at < b1 + 10000, "aligned step %lld is far past rank1's %lld", (long long)at,
	       (long long)b1);

	/* A second one before the first's step: refused, the first stays. */
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EBUSY, err);
	ASSERT(strstr(err, "rank") && strstr(err, "previous aligned"), "EBUSY message: %s", err);

	struct spec old = canon("none"), nu = canon("attn_out:1");
	assert_switch_at(p0, at - 20, at, at + 5, old.s, nu.s);
	assert_switch_at(p1, at - 20, at, at + 5, old.s, nu.s);

	/* With a wait: answered once both ran it (their steps are past it then). */
	rc = rpc_set_aligned(c, &tp, "resid_post:2", WAIT_MS, 0, &rep, err);
	ASSERT_CODE(rc, 0, err);
	int64_t at2 = rep->set_enabled_reply->aligned_step;
	toggle__envelope__free_unpacked(rep, NULL);
	ASSERT(agent_info(c, "rank0").step >= at2 && agent_info(c, "rank1").step >= at2,
	       "the wait answered before both agents ran step %lld", (long long)at2);
	struct spec nu2 = canon("resid_post:2");
	assert_switch_at(p0, at2 - 5, at2, at2 + 3, nu.s, nu2.s);
	assert_switch_at(p1, at2 - 5, at2, at2 + 3, nu.s, nu2.s);

	/* An explicit margin: exactly the highest step plus it. */
	rc = rpc_set_aligned(c, &tp, "none", 0, 3000, &rep, err);
	ASSERT_CODE(rc, 0, err);
	int64_t at3 = rep->set_enabled_reply->aligned_step;
	toggle__envelope__free_unpacked(rep, NULL);
	int64_t hi0 = agent_info(c, "rank0").step, hi1 = agent_info(c, "rank1").step;
	int64_t hi = hi0 > hi1 ? hi0 : hi1; /* the higher one, read after the reply */
	ASSERT(at3 > 3000 && at3 <= hi + 3000 && at3 >= at2 + 3000, "margin 3000: step %lld (highest step now %lld)",
	       (long long)at3, (long long)hi);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * Refused whole, naming the agent, and no lane written: another catalog in
 * the group, an agent without aligned changes, one that never began a
 * step, a hostile step far from the others or near INT64_MAX, a group
 * with no agent, bad margins.
 */
START_TEST(test_aligned_refused)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	agent_wait_listed(c, &e.agents[a0], 2);
	sleep_ms(300); /* its step rate measured (TD_ALIGN_RATE_MS) */
	Toggle__Selector tp = sel_group("tp");
	uint64_t v0 = agent_info(c, "rank0").control_version;
	int64_t now = agent_info(c, "rank0").step;

	struct fake_agent f;
	fake_start(&f, &e, "odd", "tp", 1, 1, now, TOGGLE_SHM_FEAT_ALIGNED); /* resid_post:0 only */
	int rc = rpc_set_aligned(c, &tp, "resid_post:0", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	ASSERT(strstr(err, "odd") && strstr(err, "another catalog"), "catalog message: %s", err);
	fake_stop(c, &f, "odd");

	fake_start(&f, &e, "old", "tp", NT, NL, now, 0); /* a libtoggle that predates them */
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ENOTSUP, err);
	ASSERT(strstr(err, "old") && strstr(err, "upgrade"), "feature message: %s", err);
	fake_stop(c, &f, "old");

	fake_start(&f, &e, "huge", "tp", NT, NL, INT64_MAX - 2, TOGGLE_SHM_FEAT_ALIGNED);
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	ASSERT(strstr(err, "huge") && strstr(err, "apart"), "spread message: %s", err);
	Toggle__Selector huge = sel_id(agent_info(c, "huge").id);
	rc = rpc_set_aligned(c, &huge, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EBUSY, err); /* just registered: no step rate yet */
	ASSERT(strstr(err, "huge") && strstr(err, "step rate"), "rate message: %s", err);
	rc = rpc_set_aligned(c, &huge, "all", 0, 1000, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	ASSERT(strstr(err, "huge") && strstr(err, "out of range"), "overflow message: %s", err);
	fake_stop(c, &f, "huge");

	fake_start(&f, &e, "idle", "tp", NT, NL, -1, TOGGLE_SHM_FEAT_ALIGNED);
	rc = rpc_set_aligned(c, &tp, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	ASSERT(strstr(err, "idle") && strstr(err, "not begun a step"), "stepless message: %s", err);
	fake_stop(c, &f, "idle");

	Toggle__Selector none = sel_group("nobody");
	rc = rpc_set_aligned(c, &none, "all", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	rc = rpc_set_aligned(c, &tp, "all", 0, TGP_MAX_ALIGN_MARGIN + 1, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = &tp;
	m.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	m.spec = (char *)(uintptr_t)"all";
	m.aligned_margin = 10;
	rc = rpc(c, TOGGLE__ENVELOPE__BODY_SET_ENABLED, &m, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	rc = rpc_set_aligned(c, &tp, "no_such_hook", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ESPEC, err);

	ASSERT(agent_info(c, "rank0").control_version == v0,
	       "a refused aligned set wrote rank0's lane (version %llu, was %llu)",
	       (unsigned long long)agent_info(c, "rank0").control_version, (unsigned long long)v0);
	ASSERT_STR(agent_info(c, "rank0").enabled, "none", "rank0's set");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * A stalled rank: the reply waits for it and says so when the wait runs
 * out; the change stays in its lane and it switches at the same step as
 * the others once it steps again.  A late rank, one that skips over the
 * step while stalled: it refuses the change (its set never changes), and
 * the reply is ELATE naming it alone.
 */
START_TEST(test_aligned_stalled_and_late)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "slow", .group = "tp", .steps = true,
						     .stall_at = 400, .stall_ms = 2500});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	struct alog l;
	alog_wait(p1, 400, 20000, &l);
	alog_free(&l);

	Toggle__Selector tp = sel_group("tp");
	int rc = rpc_set_aligned(c, &tp, "attn_out:*", 1000, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ETIMEDOUT, err);
	ASSERT(strstr(err, "stalled") && strstr(err, "slow") && !strstr(err, "rank0"),
	       "stalled message names the wrong agents: %s", err);
	int64_t at = -1;
	Toggle__Envelope *rep = NULL;
	/* The step it waits for: the lane's, as ListAgents cannot show it; both logs agree. */
	struct spec old = canon("none"), nu = canon("attn_out:*");
	alog_wait(p0, agent_last_step(p0), 1000, &l);
	for (size_t i = 1; i < l.n; i++)
		if (strcmp(l.v[i].spec, nu.s) == 0 && strcmp(l.v[i - 1].spec, old.s) == 0)
			at = l.v[i].step;
	alog_free(&l);
	ASSERT(at > 400, "rank0 did not switch (at %lld)", (long long)at);
	assert_switch_at(p1, 380, at, at + 5, old.s, nu.s);
	assert_switch_at(p0, at - 20, at, at + 5, old.s, nu.s);
	(void)rep;

	/* Late: a group whose stalled rank comes back 100000 steps on. */
	int a2 = agent_start(&e, &(struct agent_opts){.name = "rank2", .group = "tp2", .steps = true});
	int a3 = agent_start(&e, &(struct agent_opts){.name = "skipper", .group = "tp2", .steps = true,
						     .stall_at = 400, .stall_ms = 1500, .jump = 100000});
	struct agent_proc *p2 = &e.agents[a2], *p3 = &e.agents[a3];
	agent_wait_listed(c, p2, 2);
	alog_wait(p3, 400, 20000, &l);
	alog_free(&l);
	Toggle__Selector tp2 = sel_group("tp2");
	rc = rpc_set_aligned(c, &tp2, "resid_post:1", 0, 0, NULL, err);
	ASSERT_CODE(rc, TOGGLE_ELATE, err);
	ASSERT(strstr(err, "skipper") && !strstr(err, "rank2"), "late message: %s", err);
	int64_t at2 = -1;
	if (sscanf(strstr(err, "step ") ? strstr(err, "step ") : "", "step %lld", (long long *)&at2) != 1)
		at2 = -1;
	ASSERT(at2 > 400, "no step in the late message: %s", err);
	struct spec nu2 = canon("resid_post:1");
	assert_switch_at(p2, at2 - 5, at2, at2 + 5, old.s, nu2.s);
	assert_switch_at(p3, 100400, 100400, 100420, old.s, old.s);
	ASSERT(agent_info(c, "skipper").anomalies > 0, "the late refusal is not counted as an anomaly");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/*
 * A rank that leaves while the reply waits for it: ENOAGENT naming it at
 * once (not at the deadline), and the rank that stayed still switches at
 * the step.
 */
START_TEST(test_aligned_rank_leaves)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct tgc *c = client(&e);
	int a0 = agent_start(&e, &(struct agent_opts){.name = "rank0", .group = "tp", .steps = true});
	int a1 = agent_start(&e, &(struct agent_opts){.name = "gone", .group = "tp", .steps = true,
						     .stall_at = 300, .stall_ms = 20000});
	struct agent_proc *p0 = &e.agents[a0], *p1 = &e.agents[a1];
	agent_wait_listed(c, p0, 2);
	struct alog l;
	alog_wait(p1, 300, 20000, &l);
	alog_free(&l);
	fflush(NULL);
	pid_t k = fork();
	ASSERT(k >= 0, "fork: %s", strerror(errno));
	if (k == 0) {
		sleep_ms(500);
		kill(p1->pid, SIGKILL);
		_exit(0);
	}
	Toggle__Selector tp = sel_group("tp");
	uint64_t t0 = now_ms();
	int rc = rpc_set_aligned(c, &tp, "attn_out:2", 8000, 0, NULL, err);
	uint64_t took = now_ms() - t0;
	int st;
	waitpid(k, &st, 0);
	waitpid(p1->pid, &st, 0);
	p1->pid = 0;
	ASSERT_CODE(rc, TOGGLE_ENOAGENT, err);
	ASSERT(took < 5000, "the reply waited %llu ms for an agent that left", (unsigned long long)took);
	struct spec old = canon("none"), nu = canon("attn_out:2");
	int64_t at = -1;
	alog_wait(p0, agent_last_step(p0) + 300, 10000, &l);
	for (size_t i = 1; i < l.n; i++)
		if (strcmp(l.v[i].spec, nu.s) == 0 && strcmp(l.v[i - 1].spec, old.s) == 0)
			at = l.v[i].step;
	alog_free(&l);
	ASSERT(at > 300, "rank0 did not switch (at %lld)", (long long)at);
	assert_switch_at(p0, at - 10, at, at + 5, old.s, nu.s);
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

static Suite *daemon_suite(void)
{
	Suite *s = suite_create("daemon");
	TCase *tc = add_tcase(s, "hello");
	tcase_add_test(tc, test_hello_version);
	tcase_add_test(tc, test_status);
	tc = add_tcase(s, "agents");
	tcase_add_test(tc, test_agent_registration);
	tcase_add_test(tc, test_watch);
	tcase_add_test(tc, test_agent_kill9);
	tc = add_tcase(s, "set");
	tcase_add_test(tc, test_set_enabled);
	tcase_add_test(tc, test_wait_timeout);
	tcase_add_test(tc, test_selectors);
	tc = add_tcase(s, "plans");
	tcase_add_test(tc, test_plans);
	tcase_add_test(tc, test_plan_limits);
	tcase_add_test(tc, test_plan_relative);
	tc = add_tcase(s, "restart");
	tcase_add_test(tc, test_daemon_restart);
	tcase_add_test(tc, test_conn_state);
	tcase_add_test(tc, test_stale_socket);
	tc = add_tcase(s, "security");
	tcase_add_test(tc, test_permission_denied);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_error_replies);
	tc = add_tcase(s, "durability");
	tcase_add_test(tc, test_full_disk);
	tcase_add_test(tc, test_name_squatting);
	tcase_add_test(tc, test_corrupt_state_set_aside);
	tcase_add_test(tc, test_pipelined_order);
	tc = add_tcase(s, "fairness");
	tcase_add_test(tc, test_flood_does_not_starve);
	tcase_add_test(tc, test_reply_after_every_lane);
	tcase_add_test(tc, test_agent_ids_after_leaves);
	tcase_add_test(tc, test_events_from_many_agents);
	tc = add_tcase(s, "issue11");
	tcase_add_test(tc, test_shm_offsets_rewritten_while_registering);
	tcase_add_test(tc, test_names_dot_and_nul_refused);
	tcase_add_test(tc, test_events_survive_queries);
	tcase_add_test(tc, test_default_target_not_poisoned);
	tcase_add_test(tc, test_agent_group_tied_to_uid);
	tc = add_tcase(s, "aligned");
	tcase_add_test(tc, test_aligned_switch);
	tcase_add_test(tc, test_aligned_refused);
	tcase_add_test(tc, test_aligned_stalled_and_late);
	tcase_add_test(tc, test_aligned_rank_leaves);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_suite());
}
