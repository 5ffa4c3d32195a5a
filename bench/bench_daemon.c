/*
 * bench_daemon.c - toggled's latency and throughput, measured (never asserted).
 *
 * Starts the real daemon on a private socket, attaches A agents (libtoggle
 * agents on the simulator, in this process, each with its own shared memory
 * and connection thread), then measures with the client library:
 *   - SetEnabled round trip (send to reply) and command-to-visible latency
 *     (send to the agent's control-lane sequence number moving), p50/p99,
 *     for A = 1, 16, 256;
 *   - requests per second from 1 and 8 clients, sequential and pipelined
 *     (32 in flight), for a read (Status) and a write (SetEnabled); writes
 *     spread over every agent;
 *   - reads (Status, ListAgents) one at a time, p50/p99, alone and while 8
 *     clients pipeline writes (32 in flight each) to every agent;
 *   - the state directory's own save latency, measured in the same run:
 *     write a small file, fsync, rename, fsync the directory (what one save
 *     of one agent costs the daemon), so figures compare across machines;
 *   - with 256 agents: the time of a /metrics scrape (toggled --metrics on
 *     a loopback port), and the Status and SetEnabled round trips for a
 *     while without scraping, then with a scrape every second;
 *   - with 256 agents: unpipelined SetEnabled round trips while 8 clients
 *     pipeline sets (32 in flight each), first with the journal too large
 *     to checkpoint (journal_max_bytes 128 MiB), then with the default 4 MiB:
 *     checkpoints (counted in /metrics, timed by watching the state
 *     directory for agents.journal.old), the round trips during them and
 *     outside them (issue 30 item 3);
 *   - --rows flood (issue 30): with 256 agents, the write throughput of 8
 *     clients pipelining sets (32 in flight each) and the round trip of
 *     one set at a time, each without and with F threads scraping /metrics
 *     as fast as they can; R runs of each, alternating, and their medians.
 *
 * Usage: bench_daemon --toggled PATH [--requests N] [--seconds S] [--config FILE]
 *        [--rows reads|checkpoint|restart|flood] [--journal-knob no] [--journal-max BYTES]
 *        [--flood F] [--runs R]
 * --config passes a toggled.conf to the daemon (frames_per_turn, say; the
 * bench copies it and adds journal_max_bytes); --rows reads measures the
 * disk and the reads table only, --rows checkpoint the checkpoint table only
 * (--journal-knob no: one phase, the daemon's own journal size, for a
 * toggled before journal_max_bytes; --journal-max: the checkpoint phase's
 * journal_max_bytes, 4096 or more, 4 MiB unless given), --rows restart the daemon's memory at
 * its first start and after restarts; --rows flood the scrape-flood table
 * only (F 4, R 5 unless given).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_impl.h"
#include "conn.h"
#include "frame.h"
#include "tgclient.h"
#include "toggle.h"
#include "toggle_sim.h"

#define MAX_AGENTS 256
static const char *const types[] = {"h0", "h1"};

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_double);
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i];
}

struct bench {
	char dir[64], sock[128], state[128], metrics[32], conf[128];
	char *user_conf; /* --config's text, copied into conf with journal_max_bytes after it */
	pid_t daemon;
	struct toggle_sim *sim;
	struct toggle_agent *agents[MAX_AGENTS];
	uint64_t ids[MAX_AGENTS]; /* the daemon's agent ids */
	size_t n_agents;
};

static void die(const char *what)
{
	fprintf(stderr, "bench_daemon: %s\n", what);
	exit(1);
}

/* The daemon's toggled.conf: --config's lines, then journal_max_bytes (0: not set). */
static void conf_write(const struct bench *b, size_t journal_max)
{
	FILE *f = fopen(b->conf, "w");
	if (!f)
		die("cannot write the bench's toggled.conf");
	if (b->user_conf)
		fputs(b->user_conf, f);
	if (journal_max)
		fprintf(f, "\njournal_max_bytes = %zu\n", journal_max);
	if (fclose(f) != 0)
		die("cannot write the bench's toggled.conf");
}

static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	int c;
	while ((c = getc(f)) != EOF)
		putc(c, m);
	fclose(f);
	fclose(m);
	return buf;
}

static void daemon_exec(struct bench *b, const char *bin);

static void daemon_start(struct bench *b, const char *bin, const char *conf)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(b->dir, sizeof(b->dir), "%s/tg-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(b->dir))
		die("mkdtemp");
	snprintf(b->sock, sizeof(b->sock), "%s/s.sock", b->dir);
	snprintf(b->state, sizeof(b->state), "%s/state", b->dir);
	/* A free loopback port for --metrics (scraped only by the metrics section). */
	int ps = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	if (ps < 0 || bind(ps, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
	    getsockname(ps, (struct sockaddr *)&sin, &sl) != 0)
		die("no free port for --metrics");
	close(ps);
	snprintf(b->metrics, sizeof(b->metrics), "127.0.0.1:%u", ntohs(sin.sin_port));
	snprintf(b->conf, sizeof(b->conf), "%s/toggled.conf", b->dir);
	if (conf && !(b->user_conf = read_all(conf)))
		die("cannot read --config");
	conf_write(b, 0);
	daemon_exec(b, bin);
}

/* toggled on b's socket, state and configuration, and wait until it answers. */
static void daemon_exec(struct bench *b, const char *bin)
{
	b->daemon = fork();
	if (b->daemon == 0) {
		freopen("/dev/null", "w", stderr);
		execl(bin, bin, "--socket", b->sock, "--state-dir", b->state, "--metrics", b->metrics,
		      "-c", b->conf, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		struct tgc *c;
		char err[256];
		if (tgc_connect(b->sock, 100, &c, err, sizeof(err)) == 0) {
			tgc_close(c);
			return;
		}
		usleep(10000);
	}
	die("toggled did not start");
}

static void daemon_stop(struct bench *b)
{
	kill(b->daemon, SIGTERM);
	waitpid(b->daemon, NULL, 0);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", b->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_daemon: could not remove %s\n", b->dir);
}

static size_t daemon_agents(struct tgc *c)
{
	Toggle__Envelope req = TOGGLE__ENVELOPE__INIT, *rep = NULL;
	Toggle__ListAgentsRequest la = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	req.body_case = TOGGLE__ENVELOPE__BODY_LIST_AGENTS;
	req.list_agents = &la;
	char err[256];
	size_t n = 0;
	if (tgc_call(c, &req, &rep, 2000, err, sizeof(err)) == 0)
		n = rep->agents->n_agents;
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	return n;
}

/* Grow to n agents and wait until the daemon lists them all. */
static void agents_attach(struct bench *b, struct tgc *c, size_t n)
{
	while (b->n_agents < n) {
		char name[32];
		snprintf(name, sizeof(name), "bench-%zu", b->n_agents);
		struct toggle_config cfg = {.name = name,
					    .catalog = {.type_names = types, .n_types = 2, .n_layers = 4},
					    .backend = TOGGLE_BACKEND_SIM, .sim = b->sim,
					    .socket_path = b->sock};
		if (toggle_agent_open(&cfg, &b->agents[b->n_agents]))
			die("agent open");
		b->n_agents++;
	}
	for (int i = 0; i < 1000 && daemon_agents(c) < n; i++)
		usleep(5000);
	if (daemon_agents(c) < n)
		die("agents did not register");
	for (size_t i = 0; i < n; i++) {
		struct toggle_conn_info ci; /* ids follow registration order, not ours */
		int tries = 0; /* listed by the daemon, its registration reply maybe not read yet */
		while ((toggle_conn_get(b->agents[i], &ci) != 0 || ci.agent_id == 0) && tries++ < 2000)
			usleep(1000);
		if (ci.agent_id == 0)
			die("agent id");
		b->ids[i] = ci.agent_id;
	}
}

/*
 * The state directory's own latency for what one save does: a small file
 * written and fsync'ed, renamed over the last one, the directory fsync'ed.
 */
static void disk_save_latency(const struct bench *b, size_t n, double *p50, double *p99)
{
	char dir[192], tmp[224], dst[224];
	snprintf(dir, sizeof(dir), "%s/fsync-probe", b->dir);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		die("mkdir fsync-probe");
	snprintf(tmp, sizeof(tmp), "%s/x.json.tmp", dir);
	snprintf(dst, sizeof(dst), "%s/x.json", dir);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	double *v = calloc(n, sizeof(double));
	static const char text[] = "{\n  \"enabled\": \"h0:1\",\n  \"format\": 1,\n  \"name\": \"bench-0\",\n  \"plans\": []\n}\n";
	if (dfd < 0 || !v)
		die("fsync probe");
	for (size_t i = 0; i < n; i++) {
		double t0 = now_us();
		int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, text, sizeof(text) - 1) != (ssize_t)(sizeof(text) - 1) ||
		    fsync(fd) != 0 || close(fd) != 0 || rename(tmp, dst) != 0 || fsync(dfd) != 0)
			die("fsync probe: write/fsync/rename");
		v[i] = now_us() - t0;
	}
	close(dfd);
	*p50 = pct(v, n, 0.5);
	*p99 = pct(v, n, 0.99);
	free(v);
}

/*
 * The disk doing what toggled's save of one set does (store.c,
 * journal_append): one record appended to a growing journal and
 * fdatasync'd.  The file protocol above is what a checkpoint does per file.
 */
static void disk_append_latency(const struct bench *b, size_t n, double *p50, double *p99)
{
	char path[224];
	snprintf(path, sizeof(path), "%s/append-probe.jsonl", b->dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	double *v = calloc(n, sizeof(double));
	static const char rec[] = "{\"entries\":[{\"enabled\":\"h0:1\",\"name\":\"bench-0\","
				  "\"plans\":[]}],\"format\":1}\n";
	if (fd < 0 || !v)
		die("append probe");
	off_t off = 0;
	for (size_t i = 0; i < n; i++) {
		double t0 = now_us();
		if (pwrite(fd, rec, sizeof(rec) - 1, off) != (ssize_t)(sizeof(rec) - 1) ||
		    fdatasync(fd) != 0)
			die("append probe: pwrite/fdatasync");
		v[i] = now_us() - t0;
		off += (off_t)(sizeof(rec) - 1);
	}
	close(fd);
	unlink(path);
	*p50 = pct(v, n, 0.5);
	*p99 = pct(v, n, 0.99);
	free(v);
}

/* Both probes, n each; `when` says which line this is. */
static void disk_report(const struct bench *b, size_t n, const char *when)
{
	double f50, f99, a50, a99;
	disk_save_latency(b, n, &f50, &f99);
	disk_append_latency(b, n, &a50, &a99);
	printf("disk%s: %zu saves (write, fsync, rename, fsync dir) p50 %.1f us, p99 %.1f us (%s)\n",
	       when, n, f50, f99, b->dir);
	printf("disk%s: %zu journal appends (pwrite, fdatasync: a set's save) p50 %.1f us, "
	       "p99 %.1f us\n", when, n, a50, a99);
}

/* A pre-built SetEnabled frame for agent id `id` (the first agent has id 1). */
static int encode_set(uint64_t req_id, uint64_t agent_id, int flip, uint8_t **buf, size_t *len)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__SetEnabledRequest se = TOGGLE__SET_ENABLED_REQUEST__INIT;
	Toggle__Selector sel = TOGGLE__SELECTOR__INIT;
	sel.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	sel.agent_id = agent_id;
	se.target = &sel;
	se.op = TOGGLE__SET_OP__SET_OP_REPLACE;
	se.spec = flip ? "h0:1" : "h0:0";
	env.id = req_id;
	env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	env.set_enabled = &se;
	return tgp_frame_encode(&env, buf, len);
}

static void latency(struct bench *b, struct tgc *c, size_t n_req)
{
	double *rtt = calloc(n_req, sizeof(double)), *vis = calloc(n_req, sizeof(double));
	for (size_t i = 0; i < n_req; i++) {
		size_t k = i % b->n_agents;
		struct toggle_agent *a = b->agents[k];
		uint8_t *buf;
		size_t len;
		uint64_t id = 1000000 + i;
		if (encode_set(id, b->ids[k], (int)(i / b->n_agents) & 1, &buf, &len))
			die("encode");
		uint64_t seq0 = toggle_shm_control_seq(a->shm.ctl);
		double t0 = now_us();
		if (tgc_send_raw(c, buf, len))
			die("send");
		while (toggle_shm_control_seq(a->shm.ctl) == seq0)
			if (now_us() - t0 > 2e6)
				die("the control lane never moved (request refused?)");
		vis[i] = now_us() - t0;
		Toggle__Envelope *rep = NULL;
		do {
			if (rep)
				toggle__envelope__free_unpacked(rep, NULL);
			if (tgc_recv(c, &rep, 2000) != 1)
				die("no reply");
		} while (rep->id != id);
		rtt[i] = now_us() - t0;
		if (rep->body_case != TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY)
			die("set_enabled failed");
		toggle__envelope__free_unpacked(rep, NULL);
		free(buf);
	}
	printf("  %6zu %8zu %10.1f %10.1f %10.1f %10.1f\n", b->n_agents, n_req, pct(vis, n_req, 0.5),
	       pct(vis, n_req, 0.99), pct(rtt, n_req, 0.5), pct(rtt, n_req, 0.99));
	free(rtt);
	free(vis);
}

struct load {
	const char *sock;
	int write, window;
	double seconds;
	const uint64_t *ids;  /* writes go round these agents */
	size_t n_ids, first;
	volatile int *stop;   /* when set: stop (else after seconds) */
	uint64_t done;
};

static void *load_thread(void *arg)
{
	struct load *l = arg;
	struct tgc *c;
	char err[256];
	if (tgc_connect(l->sock, 2000, &c, err, sizeof(err)))
		die(err);
	/* Writes: for each agent, a set and its opposite, so that every write changes state. */
	size_t nf = l->write ? 2 * l->n_ids : 1;
	uint8_t **frames = calloc(nf, sizeof(*frames));
	size_t *lens = calloc(nf, sizeof(*lens));
	if (!frames || !lens)
		die("out of memory");
	for (size_t f = 0; f < nf; f++) {
		Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
		Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
		env.id = 7;
		if (l->write) {
			size_t k = (l->first + f / 2) % l->n_ids;
			if (encode_set(7, l->ids[k], (int)(f & 1), &frames[f], &lens[f]))
				die("encode");
			continue;
		}
		env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
		env.status = &st;
		if (tgp_frame_encode(&env, &frames[f], &lens[f]))
			die("encode");
	}
	double end = now_us() + l->seconds * 1e6;
	uint64_t sent = 0, got = 0;
	while (l->stop ? !*l->stop : now_us() < end) {
		while (sent - got < (uint64_t)l->window) {
			/* Agent k gets set, then (a round later) its opposite. */
			size_t f = l->write ? (sent % l->n_ids) * 2 + (sent / l->n_ids) % 2 : 0;
			if (tgc_send_raw(c, frames[f], lens[f]))
				die("send");
			sent++;
		}
		Toggle__Envelope *rep;
		if (tgc_recv(c, &rep, 2000) != 1)
			die("no reply");
		toggle__envelope__free_unpacked(rep, NULL);
		got++;
	}
	while (got < sent) {
		Toggle__Envelope *rep;
		if (tgc_recv(c, &rep, 2000) != 1)
			die("no reply");
		toggle__envelope__free_unpacked(rep, NULL);
		got++;
	}
	l->done = got;
	for (size_t f = 0; f < nf; f++)
		free(frames[f]);
	free(frames);
	free(lens);
	tgc_close(c);
	return NULL;
}

static double throughput(struct bench *b, int clients, int write, int window, double seconds)
{
	pthread_t th[8];
	struct load l[8];
	for (int i = 0; i < clients; i++) {
		l[i] = (struct load){.sock = b->sock, .write = write, .window = window, .seconds = seconds,
				     .ids = b->ids, .n_ids = b->n_agents,
				     .first = (size_t)i * b->n_agents / (size_t)clients};
		pthread_create(&th[i], NULL, load_thread, &l[i]);
	}
	uint64_t total = 0;
	for (int i = 0; i < clients; i++) {
		pthread_join(th[i], NULL);
		total += l[i].done;
	}
	return (double)total / seconds;
}

/* One read request's frame: Status or ListAgents. */
static void encode_read(int agents, uint8_t **buf, size_t *len)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__ListAgentsRequest la = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	env.id = 9;
	if (agents) {
		env.body_case = TOGGLE__ENVELOPE__BODY_LIST_AGENTS;
		env.list_agents = &la;
	} else {
		env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
		env.status = &st;
	}
	if (tgp_frame_encode(&env, buf, len))
		die("encode");
}

/*
 * Reads one at a time on their own connection for `seconds`, p50/p99 in
 * microseconds; with `writers` clients pipelining writes (32 in flight
 * each) to every agent meanwhile.  *writes: acknowledged writes per second.
 */
static void reads_under_load(struct bench *b, int agents, int writers, double seconds,
			     double *p50, double *p99, double *writes)
{
	pthread_t th[8];
	struct load l[8];
	volatile int stop = 0;
	for (int i = 0; i < writers; i++) {
		l[i] = (struct load){.sock = b->sock, .write = 1, .window = 32, .ids = b->ids,
				     .n_ids = b->n_agents, .stop = &stop,
				     .first = (size_t)i * b->n_agents / (size_t)writers};
		pthread_create(&th[i], NULL, load_thread, &l[i]);
	}
	struct tgc *c;
	char err[256];
	if (tgc_connect(b->sock, 2000, &c, err, sizeof(err)))
		die(err);
	uint8_t *buf;
	size_t len;
	encode_read(agents, &buf, &len);
	size_t cap = 1 << 20, n = 0;
	double *v = calloc(cap, sizeof(double));
	if (!v)
		die("out of memory");
	usleep(200000); /* the writers in full swing */
	double t_start = now_us(), end = t_start + seconds * 1e6;
	while (now_us() < end && n < cap) {
		double t0 = now_us();
		if (tgc_send_raw(c, buf, len))
			die("send");
		Toggle__Envelope *rep;
		if (tgc_recv(c, &rep, 5000) != 1)
			die("no reply to a read");
		v[n++] = now_us() - t0;
		toggle__envelope__free_unpacked(rep, NULL);
	}
	double t_end = now_us();
	stop = 1;
	uint64_t total = 0;
	for (int i = 0; i < writers; i++) {
		pthread_join(th[i], NULL);
		total += l[i].done;
	}
	*writes = (double)total / ((t_end - t_start) / 1e6 + 0.2);
	*p50 = pct(v, n, 0.5);
	*p99 = pct(v, n, 0.99);
	free(v);
	free(buf);
	tgc_close(c);
}

/* ---- --metrics: scrape cost, and RPC latency with and without scraping ---- */

/* One GET /metrics; its wall time in microseconds, the body's bytes in *bytes. */
static double scrape_once(const struct bench *b, size_t *bytes)
{
	unsigned port = (unsigned)atoi(strrchr(b->metrics, ':') + 1);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	double t0 = now_us();
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
	    send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(req) - 1))
		die("scrape: connect/send");
	char buf[65536];
	size_t total = 0;
	ssize_t n;
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
		if (total == 0 && (n < 12 || memcmp(buf + 9, "200", 3) != 0))
			die("scrape: not 200");
		total += (size_t)n;
	}
	close(fd);
	if (n < 0)
		die("scrape: recv");
	*bytes = total;
	return now_us() - t0;
}

struct scraper {
	const struct bench *b;
	volatile int stop;
	unsigned scrapes;
};

/* A scrape every second, as a Prometheus server with scrape_interval 1s. */
static void *scrape_thread(void *arg)
{
	struct scraper *s = arg;
	while (!s->stop) {
		size_t bytes;
		scrape_once(s->b, &bytes);
		s->scrapes++;
		for (int i = 0; i < 100 && !s->stop; i++)
			usleep(10000);
	}
	return NULL;
}

/* Sequential round trips for `seconds`: Status (write 0) or SetEnabled to agent 1. */
static void rpc_rtt(struct tgc *c, int write, double seconds, double *p50, double *p99,
		    double *p999, double *max, size_t *count)
{
	size_t cap = 1 << 20, n = 0;
	double *v = calloc(cap, sizeof(double));
	if (!v)
		die("calloc");
	double end = now_us() + seconds * 1e6;
	char err[256];
	while (now_us() < end && n < cap) {
		Toggle__Envelope req = TOGGLE__ENVELOPE__INIT, *rep = NULL;
		Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
		Toggle__SetEnabledRequest se = TOGGLE__SET_ENABLED_REQUEST__INIT;
		Toggle__Selector sel = TOGGLE__SELECTOR__INIT;
		if (write) {
			sel.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
			sel.agent_id = 1;
			se.target = &sel;
			se.op = TOGGLE__SET_OP__SET_OP_REPLACE;
			se.spec = (n & 1) ? "h0:1" : "h0:0";
			req.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
			req.set_enabled = &se;
		} else {
			req.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
			req.status = &st;
		}
		double t0 = now_us();
		if (tgc_call(c, &req, &rep, 5000, err, sizeof(err)) != 0)
			die(err);
		v[n++] = now_us() - t0;
		toggle__envelope__free_unpacked(rep, NULL);
	}
	*count = n;
	*p50 = pct(v, n, 0.5);
	*p99 = pct(v, n, 0.99);
	*p999 = pct(v, n, 0.999);
	*max = v[n - 1];
	free(v);
}

static void metrics_bench(struct bench *b, struct tgc *c, double seconds)
{
	enum { SCRAPES = 50 };
	double t[SCRAPES];
	size_t bytes = 0;
	for (int i = 0; i < SCRAPES; i++)
		t[i] = scrape_once(b, &bytes);
	double s50 = pct(t, SCRAPES, 0.5), s99 = pct(t, SCRAPES, 0.99), smax = t[SCRAPES - 1];
	printf("daemon: GET /metrics with %zu agents (%d scrapes, %zu bytes each): p50 %.2f ms, "
	       "p99 %.2f ms, max %.2f ms\n",
	       b->n_agents, SCRAPES, bytes, s50 / 1e3, s99 / 1e3, smax / 1e3);
	double run = seconds < 5 ? 5 : seconds;
	printf("daemon: round trips in microseconds with %zu agents, %.0f s each, without and with a "
	       "scrape every second\n", b->n_agents, run);
	printf("  %8s %9s %9s %8s %8s %8s %8s\n", "request", "scraping", "requests", "p50", "p99",
	       "p99.9", "max");
	for (int w = 0; w < 2; w++) {
		for (int scraping = 0; scraping < 2; scraping++) {
			struct scraper s = {.b = b};
			pthread_t th;
			if (scraping)
				pthread_create(&th, NULL, scrape_thread, &s);
			double p50, p99, p999, max;
			size_t n;
			rpc_rtt(c, w, run, &p50, &p99, &p999, &max, &n);
			if (scraping) {
				s.stop = 1;
				pthread_join(th, NULL);
			}
			char label[16] = "no";
			if (scraping)
				snprintf(label, sizeof(label), "%u/%.0fs", s.scrapes, run);
			printf("  %8s %9s %9zu %8.1f %8.1f %8.1f %8.1f\n", w ? "set" : "status", label, n,
			       p50, p99, p999, max);
		}
	}
}

/* ---- checkpoints beside the saves (issue 30 item 3) ------------------------ */

/* One GET /metrics: the value of a counter, or -1. */
static double scrape_counter(const struct bench *b, const char *name)
{
	unsigned port = (unsigned)atoi(strrchr(b->metrics, ':') + 1);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
	    send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(req) - 1))
		die("scrape: connect/send");
	size_t cap = 1 << 22, len = 0;
	char *buf = malloc(cap + 1);
	ssize_t n;
	while (buf && len < cap && (n = recv(fd, buf + len, cap - len, 0)) > 0)
		len += (size_t)n;
	close(fd);
	if (!buf)
		die("out of memory");
	buf[len] = '\0';
	double v = -1;
	char key[128];
	snprintf(key, sizeof(key), "\n%s ", name);
	const char *p = strstr(buf, key);
	if (p)
		v = atof(p + strlen(key));
	free(buf);
	return v;
}

#define CKPT_WINDOWS 4096

/* When agents.journal.old appears (a checkpoint starts) and goes (it ends), from inotify. */
struct ckpt_watch {
	const struct bench *b;
	volatile int stop;
	double start[CKPT_WINDOWS], end[CKPT_WINDOWS];
	size_t n_start, n_end;
};

static void *ckpt_watch_thread(void *arg)
{
	struct ckpt_watch *w = arg;
	int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0 || inotify_add_watch(fd, w->b->state, IN_MOVED_TO | IN_CREATE | IN_DELETE |
					IN_MOVED_FROM) < 0)
		die("inotify on the state directory");
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
	while (!w->stop) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		double t = now_us();
		ssize_t n = read(fd, buf, sizeof(buf));
		for (char *p = buf; n > 0 && p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)(void *)p;
			if (ev->len && strcmp(ev->name, "agents.journal.old") == 0) {
				if ((ev->mask & (IN_MOVED_TO | IN_CREATE)) && w->n_start < CKPT_WINDOWS &&
				    w->n_start == w->n_end)
					w->start[w->n_start++] = t;
				else if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) && w->n_end < w->n_start)
					w->end[w->n_end++] = t;
			}
			p += sizeof(*ev) + ev->len;
		}
	}
	close(fd);
	return NULL;
}

struct ckpt_row {
	double ckpts, p50, p99, max, in_p50, in_p99, in_max, ck50, ckmax, writes;
	size_t sets, in_n, windows;
	double *order; /* the round trips in the order they ran (freed by the caller) */
};

/*
 * Unpipelined sets to one agent for `seconds` while 8 clients pipeline
 * sets to every agent, the journal checkpointed past journal_max bytes
 * (set through toggled.conf and SIGHUP).
 */
static void ckpt_phase(struct bench *b, struct tgc *c, size_t journal_max, double seconds,
		       struct ckpt_row *r)
{
	if (journal_max) {
		conf_write(b, journal_max);
		kill(b->daemon, SIGHUP);
		usleep(300000);
	}
	double c0 = scrape_counter(b, "graphtoggle_store_checkpoints_total");
	static struct ckpt_watch w;
	memset(&w, 0, sizeof(w));
	w.b = b;
	pthread_t wt, th[8];
	pthread_create(&wt, NULL, ckpt_watch_thread, &w);
	struct load l[8];
	volatile int stop = 0;
	for (int i = 0; i < 8; i++) {
		l[i] = (struct load){.sock = b->sock, .write = 1, .window = 32, .ids = b->ids,
				     .n_ids = b->n_agents, .stop = &stop,
				     .first = (size_t)i * b->n_agents / 8};
		pthread_create(&th[i], NULL, load_thread, &l[i]);
	}
	usleep(300000); /* the writers in full swing */
	size_t cap = 1 << 20, n = 0;
	double *t0s = calloc(cap, sizeof(double)), *rtt = calloc(cap, sizeof(double));
	if (!t0s || !rtt)
		die("out of memory");
	char err[256];
	double t_start = now_us(), end = t_start + seconds * 1e6;
	while (now_us() < end && n < cap) {
		Toggle__Envelope req = TOGGLE__ENVELOPE__INIT, *rep = NULL;
		Toggle__SetEnabledRequest se = TOGGLE__SET_ENABLED_REQUEST__INIT;
		Toggle__Selector sel = TOGGLE__SELECTOR__INIT;
		sel.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
		sel.agent_id = b->ids[0];
		se.target = &sel;
		se.op = TOGGLE__SET_OP__SET_OP_REPLACE;
		se.spec = (n & 1) ? "h1:1" : "h1:2"; /* the writers set h0 only: always a change */
		req.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
		req.set_enabled = &se;
		double t0 = now_us();
		if (tgc_call(c, &req, &rep, 10000, err, sizeof(err)) != 0)
			die(err);
		t0s[n] = t0;
		rtt[n++] = now_us() - t0;
		toggle__envelope__free_unpacked(rep, NULL);
	}
	double t_end = now_us();
	r->order = malloc((n ? n : 1) * sizeof(double));
	if (!r->order)
		die("out of memory");
	memcpy(r->order, rtt, n * sizeof(double));
	stop = 1;
	uint64_t total = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		total += l[i].done;
	}
	usleep(200000); /* a checkpoint that was running ends (or is left open) */
	w.stop = 1;
	pthread_join(wt, NULL);
	double c1 = scrape_counter(b, "graphtoggle_store_checkpoints_total");
	/* Samples that overlap a checkpoint (an open one runs to the end). */
	double *in = calloc(n ? n : 1, sizeof(double)), *ck = calloc(w.n_start + 1, sizeof(double));
	size_t n_in = 0, n_ck = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < w.n_start; k++) {
			double s0 = w.start[k], s1 = k < w.n_end ? w.end[k] : 1e300;
			if (t0s[i] < s1 && t0s[i] + rtt[i] > s0) {
				in[n_in++] = rtt[i];
				break;
			}
		}
	for (size_t k = 0; k < w.n_end; k++)
		if (w.start[k] >= t_start && w.end[k] <= t_end)
			ck[n_ck++] = (w.end[k] - w.start[k]) / 1e3;
	r->ckpts = c1 - c0;
	r->windows = n_ck;
	r->sets = n;
	r->p50 = pct(rtt, n, 0.5);
	r->p99 = pct(rtt, n, 0.99);
	r->max = rtt[n - 1];
	r->in_n = n_in;
	r->in_p50 = n_in ? pct(in, n_in, 0.5) : 0;
	r->in_p99 = n_in ? pct(in, n_in, 0.99) : 0;
	r->in_max = n_in ? in[n_in - 1] : 0;
	r->ck50 = n_ck ? pct(ck, n_ck, 0.5) : 0;
	r->ckmax = n_ck ? ck[n_ck - 1] : 0;
	r->writes = (double)total / ((t_end - t_start) / 1e6 + 0.3);
	free(in);
	free(ck);
	free(t0s);
	free(rtt);
}

/* ---- the daemon's memory at its first start and after a restart ------------- */

/* VmRSS (or another /proc/PID/status field) of the daemon, in KiB. */
static long proc_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, field, strlen(field)) == 0 && line[strlen(field)] == ':')
			kb = atol(line + strlen(field) + 1);
	if (f)
		fclose(f);
	return kb;
}

static long file_bytes(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/*
 * With every agent attached: the daemon's RSS after `seconds` of 8 clients
 * pipelining sets (its first start), then kill -9, a start on the same
 * state directory, the agents back, the same load again (issue 30 item 5).
 */
static void restart_bench(struct bench *b, const char *bin, double seconds)
{
	char journal[192];
	snprintf(journal, sizeof(journal), "%s/agents.journal", b->state);
	printf("daemon: memory (KiB) with %zu agents, %.0f s of 8 clients pipelining sets, at its first "
	       "start and after kill -9 and a start on the same state\n", b->n_agents, seconds);
	printf("  %8s %10s %10s %10s %12s\n", "start", "rss_idle", "rss_load", "hwm", "journal_B");
	for (int run = 0; run < 3; run++) {
		long idle = proc_kb(b->daemon, "VmRSS");
		throughput(b, 8, 1, 32, seconds);
		long load = proc_kb(b->daemon, "VmRSS"), hwm = proc_kb(b->daemon, "VmHWM");
		printf("  %8s %10ld %10ld %10ld %12ld\n", run ? "restart" : "first", idle, load, hwm,
		       file_bytes(journal));
		if (run == 2)
			break;
		kill(b->daemon, SIGKILL);
		waitpid(b->daemon, NULL, 0);
		daemon_exec(b, bin);
		struct tgc *c;
		char err[256];
		if (tgc_connect(b->sock, 2000, &c, err, sizeof(err)))
			die(err);
		for (int i = 0; i < 2000 && daemon_agents(c) < b->n_agents; i++)
			usleep(5000);
		if (daemon_agents(c) < b->n_agents)
			die("agents did not come back");
		usleep(300000); /* their registration replies read */
		for (size_t i = 0; i < b->n_agents; i++) {
			struct toggle_conn_info ci;
			while (toggle_conn_get(b->agents[i], &ci) != 0 || ci.agent_id == 0)
				usleep(1000);
			b->ids[i] = ci.agent_id;
		}
		tgc_close(c);
		usleep(500000);
	}
}

/* --journal-knob no: the daemon's own journal size only (a toggled without journal_max_bytes). */
static bool journal_knob = true;
/* --journal-max: the checkpoint phase's journal_max_bytes (the default's 4 MiB unless given). */
static size_t ckpt_jmax = 4u << 20;

/*
 * What "max during checkpoints / p99 without" would read if checkpoints
 * cost nothing: the maximum of `k` consecutive sets of the phase without
 * checkpoints over its p99, the median over its blocks of k (k: how many
 * sets overlapped a checkpoint).  The maximum of a sample grows with the
 * sample; this is that part alone.
 */
static double null_ratio(const struct ckpt_row *off, size_t k, size_t *blocks)
{
	*blocks = k ? off->sets / k : 0;
	if (!*blocks || off->p99 <= 0)
		return 0;
	double *mx = calloc(*blocks, sizeof(double));
	if (!mx)
		die("out of memory");
	for (size_t b = 0; b < *blocks; b++)
		for (size_t i = b * k; i < (b + 1) * k; i++)
			mx[b] = off->order[i] > mx[b] ? off->order[i] : mx[b];
	double v = pct(mx, *blocks, 0.5) / off->p99;
	free(mx);
	return v;
}

static void ckpt_bench(struct bench *b, struct tgc *c, double seconds)
{
	double run = seconds < 10 ? 10 : seconds;
	const size_t jmax[2] = {128u << 20, ckpt_jmax};
	struct ckpt_row r[2];
	if (!journal_knob) {
		ckpt_phase(b, c, 0, run, &r[0]);
		printf("daemon: checkpoints with %zu agents, the daemon's own journal size: unpipelined "
		       "SetEnabled round trips (us) while 8 clients pipeline sets, %.0f s\n",
		       b->n_agents, run);
		printf("  default: ckpts %.0f sets %zu p50 %.1f p99 %.1f p99/p50 %.2f max %.1f in_ckpt %zu "
		       "in_max %.1f sets/s %.0f\n", r[0].ckpts, r[0].sets, r[0].p50, r[0].p99,
		       r[0].p99 / r[0].p50, r[0].max, r[0].in_n, r[0].in_max, r[0].writes);
		free(r[0].order);
		return;
	}
	printf("daemon: checkpoints with %zu agents: unpipelined SetEnabled round trips (us) while 8 "
	       "clients pipeline sets (32 in flight each), %.0f s each\n", b->n_agents, run);
	printf("  %11s %6s %8s %8s %7s %8s %8s %7s %8s %7s %8s %8s %8s %9s %9s\n", "journal_max",
	       "ckpts", "ckpt50ms", "ckptmax", "sets", "p50", "p99", "p99/p50", "max", "in_ckpt",
	       "in_p50", "in_p99", "in_max", "in_max/", "sets/s");
	printf("  %11s %6s %8s %8s %7s %8s %8s %7s %8s %7s %8s %8s %8s %9s %9s\n", "", "", "", "",
	       "", "", "", "", "", "", "", "", "", "p99(off)", "");
	for (int k = 0; k < 2; k++) {
		ckpt_phase(b, c, jmax[k], run, &r[k]);
		printf("  %8zu%s %6.0f %8.1f %8.1f %7zu %8.1f %8.1f %7.2f %8.1f %7zu %8.1f %8.1f %8.1f "
		       "%9.2f %9.0f\n", jmax[k] % (1u << 20) ? jmax[k] >> 10 : jmax[k] >> 20,
		       jmax[k] % (1u << 20) ? "KiB" : "MiB", r[k].ckpts, r[k].ck50, r[k].ckmax, r[k].sets,
		       r[k].p50, r[k].p99, r[k].p99 / r[k].p50, r[k].max, r[k].in_n, r[k].in_p50,
		       r[k].in_p99, r[k].in_max, r[k].in_n ? r[k].in_max / r[0].p99 : 0, r[k].writes);
	}
	size_t blocks = 0;
	double nr = null_ratio(&r[0], r[1].in_n, &blocks);
	printf("  in_max/p99(off) if checkpoints cost nothing (the max of %zu consecutive sets of the "
	       "first phase over its p99, median of %zu blocks): %.2f\n", r[1].in_n, blocks, nr);
	free(r[0].order);
	free(r[1].order);
	conf_write(b, 0);
	kill(b->daemon, SIGHUP);
	usleep(300000);
}

/* ---- --rows flood: writes with and without a scrape flood (issue 30) ---- */

struct flooder {
	const struct bench *b;
	volatile int *stop;
	unsigned long scrapes;
};

/* Scrapes back to back, each on a connection of its own, until told to stop. */
static void *flood_thread(void *arg)
{
	struct flooder *f = arg;
	while (!*f->stop) {
		size_t bytes;
		scrape_once(f->b, &bytes);
		f->scrapes++;
	}
	return NULL;
}

static double median(double *v, int n)
{
	return pct(v, (size_t)n, 0.5);
}

/* The daemon's CPU seconds so far: its loop (the main thread), libmicrohttpd's
 * threads (named MHD-*), and the rest (the thread pool's saves, the pacer). */
static void daemon_cpu(pid_t pid, double *loop, double *http, double *rest)
{
	char path[320];
	*loop = *http = *rest = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return;
	long tck = sysconf(_SC_CLK_TCK);
	struct dirent *e;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		char buf[512], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = '\0';
			fclose(f);
		}
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		const char *p = strrchr(buf, ')');
		unsigned long long ut, st;
		/* after the name: state, then fields 4..13, utime and stime (14, 15) */
		if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				 &ut, &st) != 2)
			continue;
		double sec = (double)(ut + st) / (double)tck;
		if (atoi(e->d_name) == (int)pid)
			*loop += sec;
		else if (!strncmp(comm, "MHD", 3))
			*http += sec;
		else
			*rest += sec;
	}
	closedir(dir);
}

static void flood_bench(struct bench *b, struct tgc *c, double seconds, int flooders, int runs)
{
	enum { MAX_FLOODERS = 64, MAX_RUNS = 64 };
	if (flooders < 0 || flooders > MAX_FLOODERS || runs < 1 || runs > MAX_RUNS)
		die("--flood 0..64 (0: the same runs without a flood, for the noise), --runs 1..64");
	double sets[2][MAX_RUNS], p50[2][MAX_RUNS], p99[2][MAX_RUNS], rate[MAX_RUNS];
	double cpu_loop[2][MAX_RUNS], cpu_http[2][MAX_RUNS], cpu_rest[2][MAX_RUNS];
	double ratio[MAX_RUNS]; /* each run's flooded / alone: neighbours in time */
	printf("daemon: writes with %zu agents, without and with %d threads scraping /metrics back "
	       "to back (%.0f s each part, %d runs alternating)\n", b->n_agents, flooders, seconds,
	       runs);
	printf("  %4s %6s %12s %10s %10s %10s %28s\n", "run", "flood", "sets/s (8x32)", "set p50 us",
	       "set p99 us", "scrapes/s", "toggled CPU/s loop http rest");
	for (int r = 0; r < runs; r++) {
		for (int fl = 0; fl < 2; fl++) {
			volatile int stop = 0;
			pthread_t th[MAX_FLOODERS];
			struct flooder f[MAX_FLOODERS];
			double t0 = now_us(), l0, h0, r0;
			daemon_cpu(b->daemon, &l0, &h0, &r0);
			for (int i = 0; fl && i < flooders; i++) {
				f[i] = (struct flooder){.b = b, .stop = &stop};
				pthread_create(&th[i], NULL, flood_thread, &f[i]);
			}
			sets[fl][r] = throughput(b, 8, 1, 32, seconds);
			double p999, max;
			size_t n;
			rpc_rtt(c, 1, seconds, &p50[fl][r], &p99[fl][r], &p999, &max, &n);
			stop = 1;
			unsigned long scrapes = 0;
			for (int i = 0; fl && i < flooders; i++) {
				pthread_join(th[i], NULL);
				scrapes += f[i].scrapes;
			}
			double el = (now_us() - t0) / 1e6, l1, h1, r1;
			daemon_cpu(b->daemon, &l1, &h1, &r1);
			cpu_loop[fl][r] = (l1 - l0) / el;
			cpu_http[fl][r] = (h1 - h0) / el;
			cpu_rest[fl][r] = (r1 - r0) / el;
			if (fl) {
				rate[r] = (double)scrapes / el;
				ratio[r] = sets[1][r] / sets[0][r];
			}
			printf("  %4d %6s %12.0f %10.1f %10.1f %10.0f %18.3f %4.3f %4.3f\n", r + 1,
			       fl ? "yes" : "no", sets[fl][r], p50[fl][r], p99[fl][r], fl ? rate[r] : 0.0,
			       cpu_loop[fl][r], cpu_http[fl][r], cpu_rest[fl][r]);
			fflush(stdout);
		}
	}
	double s0 = median(sets[0], runs), s1 = median(sets[1], runs);
	double q0 = median(p99[0], runs), q1 = median(p99[1], runs);
	printf("  median: sets/s %.0f alone, %.0f flooded (x%.3f); set p50 %.1f / %.1f us, p99 %.1f "
	       "/ %.1f us (x%.2f); %.0f scrapes/s\n", s0, s1, s1 / s0, median(p50[0], runs),
	       median(p50[1], runs), q0, q1, q1 / q0, median(rate, runs));
	printf("  median of the runs' own ratios (flooded / alone): sets/s x%.3f\n",
	       median(ratio, runs));
	printf("  median toggled CPU (s a second): loop %.3f / %.3f, http %.3f / %.3f, rest %.3f / "
	       "%.3f (alone / flooded)\n", median(cpu_loop[0], runs), median(cpu_loop[1], runs),
	       median(cpu_http[0], runs), median(cpu_http[1], runs), median(cpu_rest[0], runs),
	       median(cpu_rest[1], runs));
}

int main(int argc, char **argv)
{
	const char *bin = NULL, *conf = NULL;
	bool reads_only = false; /* --rows reads: the disk and the reads table only */
	bool ckpt_only = false;  /* --rows checkpoint: the checkpoint table only */
	bool restart_only = false; /* --rows restart: the memory table only */
	bool flood_only = false; /* --rows flood: the scrape-flood table only */
	int flooders = 4, runs = 5;
	size_t n_req = 5000;
	double seconds = 2;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--toggled"))
			bin = argv[i + 1];
		else if (!strcmp(argv[i], "--requests"))
			n_req = (size_t)atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--config"))
			conf = argv[i + 1];
		else if (!strcmp(argv[i], "--rows") && !strcmp(argv[i + 1], "reads"))
			reads_only = true;
		else if (!strcmp(argv[i], "--rows") && !strcmp(argv[i + 1], "checkpoint"))
			ckpt_only = true;
		else if (!strcmp(argv[i], "--rows") && !strcmp(argv[i + 1], "restart"))
			restart_only = true;
		else if (!strcmp(argv[i], "--journal-knob") && !strcmp(argv[i + 1], "no"))
			journal_knob = false;
		else if (!strcmp(argv[i], "--journal-max") && atol(argv[i + 1]) >= 4096)
			ckpt_jmax = (size_t)atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--rows") && !strcmp(argv[i + 1], "flood"))
			flood_only = true;
		else if (!strcmp(argv[i], "--flood"))
			flooders = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--runs"))
			runs = atoi(argv[i + 1]);
		else
			bin = NULL, i = argc; /* unknown: usage */
	}
	if (!bin || n_req < 10 || seconds <= 0) {
		fprintf(stderr, "usage: bench_daemon --toggled PATH [--requests N] [--seconds S] "
			"[--config FILE] [--rows reads|checkpoint|restart|flood] [--journal-knob no] "
			"[--journal-max BYTES] [--flood F] [--runs R]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct bench b = {0};
	if (toggle_sim_create(&b.sim))
		die("sim");
	daemon_start(&b, bin, conf);
	struct tgc *c;
	char err[256];
	if (tgc_connect(b.sock, 2000, &c, err, sizeof(err)))
		die(err);
	if (ckpt_only || restart_only) {
		agents_attach(&b, c, 256);
		if (ckpt_only)
			ckpt_bench(&b, c, seconds);
		else
			restart_bench(&b, bin, seconds);
		goto done;
	}
	if (flood_only) {
		agents_attach(&b, c, MAX_AGENTS);
		flood_bench(&b, c, seconds, flooders, runs);
		goto done;
	}
	/* As many saves as the latency rows have requests: the p99s then see
	 * the disk's stalls equally often (issue 17 target b compares them). */
	disk_report(&b, n_req, "");
	printf("daemon: SetEnabled latency in microseconds (state dir on %s)\n", b.dir);
	printf("  %6s %8s %10s %10s %10s %10s\n", "agents", "requests", "visible50", "visible99",
	       "rtt50", "rtt99");
	static const size_t counts[] = {1, 16, 256};
	for (size_t i = 0; i < 3; i++) {
		agents_attach(&b, c, counts[i]);
		if (!reads_only)
			latency(&b, c, n_req);
	}
	if (!reads_only) {
		printf("daemon: requests per second (%.0f s each, %zu agents attached)\n", seconds,
		       b.n_agents);
		printf("  %8s %8s %12s %12s\n", "clients", "request", "sequential", "pipelined32");
		for (int clients = 1; clients <= 8; clients += 7)
			for (int w = 0; w < 2; w++)
				printf("  %8d %8s %12.0f %12.0f\n", clients, w ? "set" : "status",
				       throughput(&b, clients, w, 1, seconds),
				       throughput(&b, clients, w, 32, seconds));
	}
	printf("daemon: reads one at a time, alone and under 8 clients pipelining sets to %zu agents "
	       "(%.0f s each, microseconds)\n", b.n_agents, seconds);
	printf("  %8s %10s %10s %10s %10s %10s %12s\n", "request", "alone50", "alone99", "loaded50",
	       "loaded99", "x p99", "sets/s");
	for (int agents = 0; agents < 2; agents++) {
		double a50, a99, l50, l99, w0, w;
		reads_under_load(&b, agents, 0, seconds, &a50, &a99, &w0);
		reads_under_load(&b, agents, 8, seconds, &l50, &l99, &w);
		printf("  %8s %10.1f %10.1f %10.1f %10.1f %10.2f %12.0f\n", agents ? "agents" : "status",
		       a50, a99, l50, l99, l99 / a99, w);
	}
	disk_report(&b, n_req, " at the end");
	if (!reads_only) {
		metrics_bench(&b, c, seconds);
		ckpt_bench(&b, c, seconds);
	}
done:
	tgc_close(c);
	for (size_t i = 0; i < b.n_agents; i++)
		toggle_agent_close(b.agents[i]);
	daemon_stop(&b);
	toggle_sim_destroy(b.sim);
	free(b.user_conf);
	return 0;
}
