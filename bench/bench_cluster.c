/*
 * bench_cluster.c - the cluster layer's latency, measured (never asserted).
 *
 * Starts H toggled (--etcd URL --cluster bench --host-id hN, private sockets
 * and state directories) against the etcd at URL, attaches A libtoggle
 * agents (simulator, in this process) to each, then:
 *   - N cluster sets (a put of desired/set/all through etcd's JSON gateway,
 *     the same request togglectl --etcd set makes): time from the put to
 *     the new set in EVERY agent's shared memory (control-lane sequence of
 *     all H x A agents moved), p50/p99/max;
 *   - catch-up: kill -9 the last toggled, K sets while it is down, restart
 *     it: time from its start to its saved revision reaching the last put
 *     (the daemon caught up), and to the last set in its agents' shared
 *     memory (includes the agents' own reconnect backoff);
 *   - idle: the etcd connections each toggled holds, and the TIME_WAIT
 *     sockets to etcd's client ports made in 10 s (ss);
 *   - with --stop-pid PID --others URLS (bench/cluster.sh: 3 members, the
 *     hosts list the one PID serves first): SIGSTOP that member, put a set
 *     through the others, time until every agent has it (a hung member
 *     found by the liveness check, the watch moved), then SIGCONT.
 *
 * Usage: bench_cluster --toggled PATH --etcd URLS [--hosts H] [--agents A]
 *        [--changes N] [--down K] [--stop-pid PID --others URLS]
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_impl.h"
#include "etcd.h"
#include "frame.h"
#include "tgclient.h"
#include "toggle.h"
#include "toggle_sim.h"

#define MAX_HOSTS  64
#define MAX_AGENTS 64
static const char *const types[] = {"h0", "h1"};

struct host {
	char dir[64], sock[128], state[128], rev[160], log[160];
	pid_t pid;
	struct toggle_agent *agents[MAX_AGENTS];
};

static const char *toggled_bin, *etcd_url, *others_url;
static struct toggle_sim *sim;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void die(const char *what)
{
	fprintf(stderr, "bench_cluster: %s\n", what);
	exit(1);
}

static void host_start(struct host *h, int n)
{
	char id[16];
	snprintf(id, sizeof(id), "h%d", n);
	h->pid = fork();
	if (h->pid == 0) {
		int fd = open(h->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execl(toggled_bin, toggled_bin, "--socket", h->sock, "--state-dir", h->state, "--etcd",
		      etcd_url, "--cluster", "bench", "--host-id", id, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		struct tgc *c;
		char err[256];
		if (tgc_connect(h->sock, 100, &c, err, sizeof(err)) == 0) {
			tgc_close(c);
			return;
		}
		usleep(10000);
	}
	die("toggled did not start");
}

static int64_t rev_of(const struct host *h)
{
	FILE *f = fopen(h->rev, "r");
	long long v = 0;
	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

static int64_t put_set_at(const char *url, int k)
{
	char value[64], err[512];
	snprintf(value, sizeof(value), "{\"hooks\": \"h0:%d,h1:%d\"}", k % 4, (k / 4) % 4); /* k >= 0 */
	const char *key = "/graphtoggle/bench/desired/set/all", *v = value;
	int64_t rev;
	if (etcd_txn_put(url, NULL, &key, &v, 1, NULL, 0, &rev, err, sizeof(err)))
		die(err);
	return rev;
}

static int64_t put_set(int k)
{
	return put_set_at(etcd_url, k);
}

/* Lines of a shell command's output (ss), -1 if it cannot run. */
static long count_lines(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	long n = 0;
	int c;
	while ((c = fgetc(p)) != EOF)
		n += c == '\n';
	return pclose(p) == 0 ? n : -1;
}

/* The client ports of the members in etcd_url, as an ss filter: "( dport = :P or ... )". */
static void port_filter(char *out, size_t len, bool dst)
{
	char urls[ETCD_MAX_ENDPOINTS][ETCD_MAX_URL], err[128];
	size_t n = 0, k = 0;
	out[0] = '\0';
	if (etcd_endpoints_parse(etcd_url, urls, &n, err, sizeof(err)))
		return;
	k += (size_t)snprintf(out + k, len - k, "( "); /* ss wants the blanks */
	for (size_t i = 0; i < n && k < len; i++) {
		const char *colon = strrchr(urls[i], ':');
		k += (size_t)snprintf(out + k, len - k, "%s%s = :%s", i ? " or " : "",
				      dst ? "dport" : "sport", colon ? colon + 1 : "0");
	}
	if (k < len)
		snprintf(out + k, len - k, " )");
}

/* Established connections of one toggled to the members (ss -p names it). */
static long host_conns(pid_t pid)
{
	char f[512], cmd[768];
	port_filter(f, sizeof(f), true);
	snprintf(cmd, sizeof(cmd), "ss -Htnp state established '%s' | grep 'pid=%d,'", f, (int)pid);
	long n = count_lines(cmd);
	return n < 0 ? 0 : n; /* grep's status 1: none */
}

/*
 * TIME_WAIT sockets to or from the members' client ports made in the last
 * `secs` seconds: those whose 60 s timer has more than 60 - secs - 1 left
 * (older ones, from the start of the hosts, are not the idle hosts').
 */
static long time_wait_new(int secs)
{
	char fd[512], fs[512], cmd[1400];
	port_filter(fd, sizeof(fd), true);
	port_filter(fs, sizeof(fs), false);
	snprintf(cmd, sizeof(cmd), "ss -Htano state time-wait '( %s or %s )' | "
		 "sed -n 's/.*timewait,\\([0-9]*\\)\\(sec\\|min\\).*/\\1 \\2/p' | "
		 "awk '{ t = $2 == \"min\" ? $1 * 60 : $1; if (t > %d) print }'", fd, fs,
		 60 - secs - 1);
	return count_lines(cmd);
}

static bool all_moved(struct host *hs, int first, int last, int na, uint64_t *seq0)
{
	for (int h = first; h <= last; h++)
		for (int a = 0; a < na; a++)
			if (toggle_shm_control_seq(hs[h].agents[a]->shm.ctl) == seq0[h * MAX_AGENTS + a])
				return false;
	return true;
}

static void snap(struct host *hs, int nh, int na, uint64_t *seq0)
{
	for (int h = 0; h < nh; h++)
		for (int a = 0; a < na; a++)
			seq0[h * MAX_AGENTS + a] = toggle_shm_control_seq(hs[h].agents[a]->shm.ctl);
}

int main(int argc, char **argv)
{
	int nh = 3, na = 16, changes = 1000, down = 100;
	pid_t stop_pid = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--toggled"))
			toggled_bin = argv[i + 1];
		else if (!strcmp(argv[i], "--etcd"))
			etcd_url = argv[i + 1];
		else if (!strcmp(argv[i], "--hosts"))
			nh = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--agents"))
			na = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--changes"))
			changes = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--down"))
			down = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--stop-pid"))
			stop_pid = (pid_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--others"))
			others_url = argv[i + 1];
		else
			die("usage: bench_cluster --toggled PATH --etcd URLS [--hosts H] [--agents A] "
			    "[--changes N] [--down K] [--stop-pid PID --others URLS]");
	}
	if (!toggled_bin || !etcd_url || nh < 1 || nh > MAX_HOSTS || na < 1 || na > MAX_AGENTS ||
	    changes < 1 || down < 1 || (stop_pid > 0) != (others_url != NULL))
		die("usage: bench_cluster --toggled PATH --etcd URLS [--hosts 1-64] [--agents 1-64] ... "
		    "[--stop-pid PID --others URLS]");
	signal(SIGPIPE, SIG_IGN);
	if (toggle_sim_create(&sim))
		die("simulator");
	static struct host hs[MAX_HOSTS];
	const char *tmp = getenv("TMPDIR");
	for (int h = 0; h < nh; h++) {
		struct host *x = &hs[h];
		snprintf(x->dir, sizeof(x->dir), "%s/tg-bcl-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
		if (!mkdtemp(x->dir))
			die("mkdtemp");
		snprintf(x->sock, sizeof(x->sock), "%s/s.sock", x->dir);
		snprintf(x->state, sizeof(x->state), "%s/state", x->dir);
		snprintf(x->rev, sizeof(x->rev), "%s/state/cluster-bench.rev", x->dir);
		snprintf(x->log, sizeof(x->log), "%s/toggled.log", x->dir);
		host_start(x, h + 1);
		for (int a = 0; a < na; a++) {
			char name[32];
			snprintf(name, sizeof(name), "bench-%d", a);
			struct toggle_config cfg = {.name = name,
						    .catalog = {.type_names = types, .n_types = 2, .n_layers = 4},
						    .backend = TOGGLE_BACKEND_SIM, .sim = sim,
						    .socket_path = x->sock};
			if (toggle_agent_open(&cfg, &x->agents[a]))
				die("agent open");
		}
	}
	uint64_t *seq0 = calloc((size_t)nh * MAX_AGENTS, sizeof(*seq0));
	double *vis = calloc((size_t)changes, sizeof(*vis));
	if (!seq0 || !vis)
		die("out of memory");
	/* Warm up: every agent registered and reached by a cluster set. */
	for (int tries = 0;; tries++) {
		snap(hs, nh, na, seq0);
		put_set(1000000 + tries);
		double t0 = now_ms();
		while (!all_moved(hs, 0, nh - 1, na, seq0) && now_ms() - t0 < 1000)
			usleep(1000);
		if (all_moved(hs, 0, nh - 1, na, seq0))
			break;
		if (tries == 30)
			die("not every agent is reached by a cluster set (registered?)");
	}
	for (int i = 0; i < changes; i++) {
		snap(hs, nh, na, seq0);
		double t0 = now_ms();
		put_set(i);
		while (!all_moved(hs, 0, nh - 1, na, seq0)) {
			if (now_ms() - t0 > 5000)
				die("a cluster set did not reach every agent in 5 s");
			usleep(50); /* leave the cores to etcd and the daemons */
		}
		vis[i] = now_ms() - t0;
	}
	qsort(vis, (size_t)changes, sizeof(*vis), cmp_double);
	printf("cluster set -> visible in every agent's shared memory, %d hosts x %d agents, %d changes:\n"
	       "  p50 %.2f ms   p99 %.2f ms   max %.2f ms\n", nh, na, changes,
	       vis[(size_t)(0.5 * (changes - 1) + 0.5)], vis[(size_t)(0.99 * (changes - 1) + 0.5)],
	       vis[changes - 1]);

	/* Catch-up: the last host down, `down` changes, back. */
	struct host *last = &hs[nh - 1];
	kill(last->pid, SIGKILL);
	waitpid(last->pid, NULL, 0);
	int64_t target = 0;
	for (int i = 0; i < down; i++)
		target = put_set(changes + i);
	snap(hs, nh, na, seq0);
	double t0 = now_ms();
	host_start(last, nh);
	double t_listen = now_ms() - t0;
	while (rev_of(last) < target) {
		if (now_ms() - t0 > 10000)
			die("the restarted host did not catch up in 10 s");
		usleep(200);
	}
	double t_caught = now_ms() - t0;
	while (!all_moved(hs, nh - 1, nh - 1, na, seq0)) {
		if (now_ms() - t0 > 10000)
			die("the restarted host's agents did not get the last set in 10 s");
		usleep(200);
	}
	double t_agents = now_ms() - t0;
	printf("catch-up after kill -9 and %d changes while down: listening %.1f ms, caught up "
	       "(revision saved) %.1f ms, in its %d agents' shared memory %.1f ms (agents' reconnect "
	       "included) after its start\n", down, t_listen, t_caught, na, t_agents);

	/* Idle: connections held, TIME_WAIT sockets made (after the catch-up settled). */
	sleep(3);
	long most = 0, total = 0;
	for (int h = 0; h < nh; h++) {
		long c = host_conns(hs[h].pid);
		total += c;
		most = c > most ? c : most;
	}
	sleep(10);
	long tw = time_wait_new(10);
	printf("idle, %d hosts: etcd connections per host %.2f on average, at most %ld; TIME_WAIT "
	       "sockets to etcd made in 10 s: %ld\n", nh, (double)total / nh, most, tw);

	/* A hung member: the one every host watches (listed first). */
	if (stop_pid > 0) {
		snap(hs, nh, na, seq0);
		double f0 = now_ms();
		kill(stop_pid, SIGSTOP);
		put_set_at(others_url, 5000000);
		double t_put = now_ms() - f0;
		while (!all_moved(hs, 0, nh - 1, na, seq0)) {
			if (now_ms() - f0 > 30000) {
				kill(stop_pid, SIGCONT);
				die("a set during a hung member did not reach every agent in 30 s");
			}
			usleep(1000);
		}
		double t_fail = now_ms() - f0;
		kill(stop_pid, SIGCONT);
		printf("member failure (SIGSTOP of the watched member): the set put through the others "
		       "after %.0f ms, in all %d agents' shared memory %.0f ms after the failure\n",
		       t_put, nh * na, t_fail);
	}

	for (int h = 0; h < nh; h++) {
		for (int a = 0; a < na; a++)
			toggle_agent_close(hs[h].agents[a]);
		kill(hs[h].pid, SIGTERM);
		waitpid(hs[h].pid, NULL, 0);
		char cmd[sizeof(hs[h].dir) + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf %.63s", hs[h].dir);
		if (system(cmd) != 0)
			fprintf(stderr, "bench_cluster: could not remove %s\n", hs[h].dir);
	}
	toggle_sim_destroy(sim);
	free(seq0);
	free(vis);
	return 0;
}
