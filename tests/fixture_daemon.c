/*
 * fixture_daemon.c - the end-to-end suites' environment (check_daemon_*.c):
 * a private directory with the daemon's socket, state and log, the real
 * daemon (TOGGLED_BIN) started and stopped in it, agent children on the
 * simulator backend, their logs, and the failure report.  Moved out of
 * check_daemon.c (issue 29); fixture_daemon.h says what each suite gets.
 */
#include "fixture_daemon.h"

const char *const type_names[NT] = {"resid_post", "attn_out"};
const struct toggle_catalog catalog = {.type_names = type_names, .n_types = NT,
				       .n_layers = NL};

/* The running test's environment, for failure reports. */
static struct env *g_env;

/* ======================================================================== */
/* Time, files, failure reports                                              */
/* ======================================================================== */

uint64_t now_ms(void)
{
	return util_mono_ms();
}

void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

const char *status_text(int st)
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
char *file_read(const char *path)
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
bool file_contains(const char *path, const char *needle)
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

_Noreturn void fail_at(const char *file, int line, const char *cond, const char *fmt, ...)
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

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

struct spec canon(const char *text)
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
void child_detach(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(99);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* fork(); the child is detached (child_detach) before it returns 0. */
static pid_t fork_detached(void)
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		child_detach(parent);
	return pid;
}

/*
 * fork/exec TOGGLED_BIN on the env's socket and state dir, with the
 * configuration file conf (-c) unless NULL; stderr appended to logpath.
 */
static pid_t daemon_spawn_conf(const struct env *e, const char *logpath, const char *conf)
{
	pid_t pid = fork_detached();
	if (pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		close_range(3, ~0u, 0);
		if (conf)
			execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state,
			      "-c", conf, "-v", (char *)NULL);
		else
			execl(TOGGLED_BIN, "toggled", "--socket", e->sock, "--state-dir", e->state,
			      "-v", (char *)NULL);
		dprintf(2, "check_daemon: exec %s: %s\n", TOGGLED_BIN, strerror(errno));
		_exit(127);
	}
	return pid;
}

pid_t daemon_spawn(const struct env *e, const char *logpath)
{
	return daemon_spawn_conf(e, logpath, NULL);
}

/* Wait up to timeout_ms for pid to end: true with *st. */
bool wait_exit(pid_t pid, int timeout_ms, int *st)
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

/* Wait (bounded) until the daemon just spawned accepts on its socket. */
static void daemon_wait_accepting(struct env *e)
{
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

/* Start the daemon and wait (bounded) until its socket accepts. */
void daemon_start(struct env *e)
{
	e->daemon = daemon_spawn(e, e->dlog);
	daemon_wait_accepting(e);
}

/* SIGTERM; the daemon must exit 0 (ASan and leak reports make it exit non-zero). */
void daemon_stop(struct env *e)
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

void daemon_kill9(struct env *e)
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
int agent_start(struct env *e, const struct agent_opts *o)
{
	ASSERT(e->n_agents < MAX_AGENTS, "more than %d agents", MAX_AGENTS);
	struct agent_proc *ap = &e->agents[e->n_agents];
	snprintf(ap->name, sizeof(ap->name), "%s", o->name);
	char log[PATH_MAX];
	snprintf(log, sizeof(log), "%s/agent-%s.log", e->dir, o->name);
	memcpy(ap->log, log, sizeof(ap->log));
	pid_t pid = fork_detached();
	if (pid == 0) {
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
void agent_assert_alive(struct agent_proc *ap)
{
	int st;
	if (ap->pid && waitpid(ap->pid, &st, WNOHANG) == ap->pid) {
		ap->pid = 0;
		ASSERT(0, "agent %s ended early: %s (%s)", ap->name, status_text(st),
		       agent_exit_text(st));
	}
}

/* SIGTERM; the agent must exit 0 (every replay ran its step's set). */
void agent_stop(struct env *e, int i)
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

void agent_kill9(struct env *e, int i)
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

/*
 * The env's private directory and its paths: mkdtemp, as suites and their
 * tests run in parallel; named after the suite, for the directory a failed
 * test keeps (/tmp/check_daemon_rpc.XXXXXX).
 */
static void env_dir(struct env *e)
{
	snprintf(e->dir, sizeof(e->dir), "/tmp/%.40s.XXXXXX", program_invocation_short_name);
	ASSERT(mkdtemp(e->dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(e->sock, sizeof(e->sock), "%s/s.sock", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	snprintf(e->dlog, sizeof(e->dlog), "%s/toggled.log", e->dir);
	g_env = e;
}

void env_setup(struct env *e)
{
	memset(e, 0, sizeof(*e));
	ASSERT(access(TOGGLED_BIN, X_OK) == 0, "%s: %s (run from the repository root after make)",
	       TOGGLED_BIN, strerror(errno));
	env_dir(e);
	daemon_start(e);
}

/* Stop the agents (each must exit 0), then the daemon (must exit 0); remove the directory. */
void env_teardown(struct env *e)
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

/* Every complete "step S set SPEC" line of an agent's log. */
void alog_load(struct alog *l, const char *path)
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

void alog_free(struct alog *l)
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

int64_t agent_last_step(const struct agent_proc *ap)
{
	struct alog l;
	alog_load(&l, ap->log);
	int64_t last = alog_last(&l);
	alog_free(&l);
	return last;
}

/* Wait until the agent logged step (or fail, with why if it died). */
void alog_wait(struct agent_proc *ap, int64_t step, int timeout_ms, struct alog *out)
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

void alog_expect(const struct alog *l, const struct agent_proc *ap, int64_t step,
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
void assert_switch(struct agent_proc *ap, int64_t before_last, int64_t at_step,
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

/*
 * Run fn(e) in a child process (it drops privileges and _exits 0, or a
 * code that why[] explains) and assert that it passed, within 20 s.
 */
void run_child(const struct env *e, void (*fn)(const struct env *),
	       const char *what, const char *const *why, size_t n_why)
{
	pid_t pid = fork_detached();
	if (pid == 0) {
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

/* Item 5: a daemon started with a configuration file (text) in the env's directory. */
void env_setup_conf(struct env *e, const char *text)
{
	memset(e, 0, sizeof(*e));
	env_dir(e);
	char conf[PATH_MAX];
	snprintf(conf, sizeof(conf), "%s/toggled.conf", e->dir);
	FILE *f = fopen(conf, "we");
	ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", conf);
	e->daemon = daemon_spawn_conf(e, e->dlog, conf);
	daemon_wait_accepting(e);
}

/* ======================================================================== */

TCase *add_tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tc;
}
