/*
 * metrics.c - `toggled --metrics ADDRESS`: /metrics in the Prometheus text
 * format (0.0.4), served by libmicrohttpd on its own thread.
 *
 * The HTTP thread never reads loop state.  A scrape asks the loop for a
 * snapshot (uv_async_send) and waits, bounded, for it; the loop builds the
 * snapshot into a buffer of its own and swaps it with the shared one under
 * a mutex held for a pointer swap only, so the loop never waits on HTTP.
 * The HTTP thread swaps the shared one with its own, unlocks and renders.
 * Counters the dispatcher and the store feed (td_metrics_rpc, td_hist_add)
 * live in loop-owned memory and are copied by the loop into the snapshot.
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "log.h"
#include "toggled.h"

#define SCRAPE_WAIT_MS 1000   /* longest wait for the loop; then 503 */
#define MAX_CONNECTIONS 16

/* Histogram upper bounds, seconds (TD_HIST_BUCKETS of them, then +Inf). */
static const double hist_le[TD_HIST_BUCKETS] = {25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
						1e-3,  2.5e-3, 5e-3,  10e-3, 25e-3,
						50e-3, 100e-3, 250e-3, 1.0};

/* Method label per request type; TD_RPC_OTHER for the rest. */
static const struct {
	Toggle__Envelope__BodyCase body;
	const char *name;
} rpc_methods[TD_RPC_METHODS - 1] = {
	{TOGGLE__ENVELOPE__BODY_HELLO, "hello"},
	{TOGGLE__ENVELOPE__BODY_REGISTER_AGENT, "register_agent"},
	{TOGGLE__ENVELOPE__BODY_LIST_AGENTS, "list_agents"},
	{TOGGLE__ENVELOPE__BODY_LIST_GRAPHS, "list_graphs"},
	{TOGGLE__ENVELOPE__BODY_STATUS, "status"},
	{TOGGLE__ENVELOPE__BODY_HOOKS, "hooks"},
	{TOGGLE__ENVELOPE__BODY_SHOW_PLAN, "show_plan"},
	{TOGGLE__ENVELOPE__BODY_WATCH, "watch"},
	{TOGGLE__ENVELOPE__BODY_SET_ENABLED, "set_enabled"},
	{TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, "submit_plan"},
	{TOGGLE__ENVELOPE__BODY_CLEAR_PLAN, "clear_plan"},
};
#define TD_RPC_OTHER (TD_RPC_METHODS - 1)

/* graphtoggle_agent_conn_state's states: TOGGLE_SHM_CONN_* 1..3, then "unknown"
 * for 0 (an agent that predates the connection words) or anything else it wrote. */
static const char *const conn_states[] = {"connecting", "connected", "reconnecting", "unknown"};
#define CONN_STATES (sizeof(conn_states) / sizeof(conn_states[0]))

static size_t conn_state_index(uint64_t state)
{
	return state >= TOGGLE_SHM_CONN_CONNECTING && state <= TOGGLE_SHM_CONN_RECONNECTING
		       ? (size_t)(state - TOGGLE_SHM_CONN_CONNECTING)
		       : CONN_STATES - 1;
}

/* graphtoggle_agent_anomalies_total's kinds: the status lane's counter names. */
#define ANOMALY_KIND(NAME, name) [TOGGLE_SHM_AN_##NAME] = #name,
static const char *const anomaly_kinds[TOGGLE_SHM_AN_COUNT] = {
	TOGGLE_SHM_ANOMALY_MAP(ANOMALY_KIND)
};
#undef ANOMALY_KIND

struct snap_agent {
	uint64_t id;
	char name[TGP_MAX_NAME], group[TGP_MAX_NAME];
	uint32_t pid;
	bool status_valid;
	int64_t step;
	uint64_t control_version, applied_version, replays, plan_rejected, graphs;
	uint64_t anomalies[TOGGLE_SHM_AN_COUNT];
	struct toggle_shm_conn conn; /* the agent's own view of its connection (agent-written) */
};

struct snapshot {
	uint64_t uptime_ms;
	uint32_t peers_agent, peers_client, peers_watcher;
	struct td_stats stats;
	uint64_t rpc[TD_RPC_METHODS][TD_RPC_CODES];
	struct td_hist rpc_lat[TD_RPC_METHODS];
	uint64_t saves, save_errors;
	struct td_hist save_lat;
	uint64_t checkpoints, ckpt_failures;
	struct td_hist ckpt_lat;
	size_t n_agents, cap_agents;
	struct snap_agent *agents;
};

struct td_metrics {
	struct td_daemon *d;
	struct MHD_Daemon *httpd;
	char address[PATH_MAX];
	bool unix_socket;
	int listen_fd;
	uv_async_t async;
	/* Loop-owned counters (td_metrics_rpc). */
	uint64_t rpc[TD_RPC_METHODS][TD_RPC_CODES];
	struct td_hist rpc_lat[TD_RPC_METHODS];
	/* Three snapshots: the loop's, the shared one, the HTTP thread's. */
	struct snapshot *building, *ready, *rendering;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t requested, published; /* under mu */
};

uint64_t td_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void td_hist_add(struct td_hist *h, uint64_t ns)
{
	size_t i = 0;
	while (i < TD_HIST_BUCKETS && (double)ns > hist_le[i] * 1e9)
		i++;
	h->bucket[i]++;
	h->count++;
	h->sum_ns += ns;
}

void td_metrics_rpc(struct td_daemon *d, const Toggle__Envelope *req, int code, uint64_t ns)
{
	struct td_metrics *m = d->metrics;
	if (!m)
		return;
	size_t meth = TD_RPC_OTHER;
	for (size_t i = 0; i < TD_RPC_OTHER; i++)
		if (rpc_methods[i].body == req->body_case)
			meth = i;
	int c = code <= 0 && code > -TD_RPC_CODES ? -code : TD_RPC_CODES - 1;
	m->rpc[meth][c]++;
	td_hist_add(&m->rpc_lat[meth], ns);
}

/* ---- the loop's side ---- */

static int snap_fill(struct td_metrics *m, struct snapshot *s)
{
	struct td_daemon *d = m->d;
	if (s->cap_agents < d->n_agents) {
		struct snap_agent *v = realloc(s->agents, d->n_agents * sizeof(*v));
		if (!v)
			return TOGGLE_ENOMEM;
		s->agents = v;
		s->cap_agents = d->n_agents;
	}
	s->uptime_ms = util_mono_ms() - d->start_ms;
	s->peers_agent = s->peers_client = s->peers_watcher = 0;
	for (struct td_peer *p = d->peers; p; p = p->next) {
		if (p->agent)
			s->peers_agent++;
		else if (p->watching)
			s->peers_watcher++;
		else
			s->peers_client++;
	}
	s->stats = d->stats;
	memcpy(s->rpc, m->rpc, sizeof(s->rpc));
	memcpy(s->rpc_lat, m->rpc_lat, sizeof(s->rpc_lat));
	s->saves = d->store.saves;
	s->save_errors = d->store.save_errors;
	s->save_lat = d->store.save_lat;
	s->checkpoints = d->store.checkpoints;
	s->ckpt_failures = d->store.ckpt_failures;
	s->ckpt_lat = d->store.ckpt_lat;
	size_t n = 0;
	for (struct td_agent *a = d->agents; a && n < s->cap_agents; a = a->next, n++) {
		struct snap_agent *o = &s->agents[n];
		const struct toggle_shm_status *st = a->st;
		o->id = a->id;
		memcpy(o->name, a->name, sizeof(o->name));
		memcpy(o->group, a->group, sizeof(o->group));
		o->pid = a->pid;
		o->status_valid = a->st_valid;
		o->step = st->step;
		o->control_version = a->ctl.version;
		o->applied_version = st->version_applied;
		o->replays = st->replays;
		o->plan_rejected = st->plan_rejected;
		o->graphs = st->total_graphs;
		memcpy(o->anomalies, st->anomalies, sizeof(o->anomalies));
		o->conn = st->conn;
	}
	s->n_agents = n;
	return 0;
}

static void on_snapshot_wanted(uv_async_t *h)
{
	struct td_metrics *m = h->data;
	/* Counters as of now: the poll the status timer would run next. */
	td_agents_poll(m->d);
	if (snap_fill(m, m->building) != 0) {
		log_warnx("metrics: out of memory for the snapshot");
		return;
	}
	pthread_mutex_lock(&m->mu);
	struct snapshot *t = m->ready;
	m->ready = m->building;
	m->building = t;
	m->published = m->requested;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

/* ---- the HTTP thread's side ---- */

/* Label value escaping of the text format: backslash, quote, newline. */
static void put_label(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n') {
			fputs("\\n", f);
			continue;
		}
		fputc(*s, f);
	}
}

static void put_help(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A histogram series; labels is "" or `key="value",`. */
static void put_hist(FILE *f, const char *name, const char *labels, const struct td_hist *h)
{
	uint64_t cum = 0;
	for (size_t i = 0; i < TD_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		fprintf(f, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, hist_le[i],
			(unsigned long long)cum);
	}
	cum += h->bucket[TD_HIST_BUCKETS];
	fprintf(f, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
	/* labels without its trailing comma, and no braces when empty */
	size_t n = strlen(labels);
	int ln = (int)(n ? n - 1 : 0);
	fprintf(f, "%s_sum%s%.*s%s %.9f\n", name, n ? "{" : "", ln, labels, n ? "}" : "",
		(double)h->sum_ns / 1e9);
	fprintf(f, "%s_count%s%.*s%s %llu\n", name, n ? "{" : "", ln, labels, n ? "}" : "",
		(unsigned long long)h->count);
}

/* ErrorCode's name without its prefix is toggle_err_name()'s without "TOGGLE_E"
 * (tests/check_proto.c keeps the two lists equal): "LATE", "SPEC", ... */
static const char *code_label(int idx)
{
	static const char prefix[] = "TOGGLE_E";
	if (idx == 0)
		return "OK";
	const char *name = idx < TD_RPC_CODES - 1 ? toggle_err_name(-idx) : NULL;
	return name ? name + sizeof(prefix) - 1 : "OTHER";
}

static void agent_labels(FILE *f, const struct snap_agent *a)
{
	fputs("{agent=\"", f);
	put_label(f, a->name);
	fputs("\",group=\"", f);
	put_label(f, a->group);
	fprintf(f, "\",pid=\"%u\",id=\"%llu\"", a->pid, (unsigned long long)a->id);
}

/* One metric: HELP, TYPE and a series per agent. */
#define AGENT_SERIES(f, s, a, name, type, help, fmt, ...)               \
	do {                                                             \
		put_help(f, name, type, help);                           \
		for (size_t _i = 0; _i < (s)->n_agents; _i++) {          \
			const struct snap_agent *a = &(s)->agents[_i];   \
			fputs(name, f);                                  \
			agent_labels(f, a);                              \
			fprintf(f, fmt, __VA_ARGS__);                    \
		}                                                        \
	} while (0)

/* The daemon itself: up, uptime, peers, agents, drops. */
static void render_daemon(FILE *f, const struct snapshot *s)
{
	put_help(f, "graphtoggle_up", "gauge", "1: toggled answered this scrape");
	fprintf(f, "graphtoggle_up 1\n");
	put_help(f, "graphtoggle_uptime_seconds", "gauge", "Seconds since toggled started");
	fprintf(f, "graphtoggle_uptime_seconds %.3f\n", (double)s->uptime_ms / 1e3);
	put_help(f, "graphtoggle_peers", "gauge", "Connections by kind (agent, watcher, client)");
	fprintf(f, "graphtoggle_peers{kind=\"agent\"} %u\n", s->peers_agent);
	fprintf(f, "graphtoggle_peers{kind=\"watcher\"} %u\n", s->peers_watcher);
	fprintf(f, "graphtoggle_peers{kind=\"client\"} %u\n", s->peers_client);
	put_help(f, "graphtoggle_agents", "gauge", "Agents registered");
	fprintf(f, "graphtoggle_agents %zu\n", s->n_agents);
	put_help(f, "graphtoggle_peers_dropped_total", "counter",
		 "Peers dropped for a write queue over its bound");
	fprintf(f, "graphtoggle_peers_dropped_total %llu\n", (unsigned long long)s->stats.dropped_peers);
	put_help(f, "graphtoggle_frames_refused_total", "counter",
		 "Bad frames: undecodable (connection closed) or not canonically encoded (refused, "
		 "connection kept)");
	fprintf(f, "graphtoggle_frames_refused_total %llu\n",
		(unsigned long long)s->stats.frames_refused);
}

/* Requests by method and code, and their time on the loop. */
static void render_rpc(FILE *f, const struct snapshot *s)
{
	put_help(f, "graphtoggle_rpc_requests_total", "counter",
		 "Requests by method and result code (ErrorCode without its prefix; OK)");
	for (size_t mi = 0; mi < TD_RPC_METHODS; mi++) {
		const char *meth = mi < TD_RPC_OTHER ? rpc_methods[mi].name : "other";
		for (int c = 0; c < TD_RPC_CODES; c++) {
			if (c != 0 && !s->rpc[mi][c])
				continue;
			fprintf(f, "graphtoggle_rpc_requests_total{method=\"%s\",code=\"%s\"} %llu\n", meth,
				code_label(c), (unsigned long long)s->rpc[mi][c]);
		}
	}
	put_help(f, "graphtoggle_rpc_duration_seconds", "histogram",
		 "Time the loop spent dispatching a request, by method");
	for (size_t mi = 0; mi < TD_RPC_METHODS; mi++) {
		char labels[48];
		snprintf(labels, sizeof(labels), "method=\"%s\",",
			 mi < TD_RPC_OTHER ? rpc_methods[mi].name : "other");
		put_hist(f, "graphtoggle_rpc_duration_seconds", labels, &s->rpc_lat[mi]);
	}
}

/* Saves of the desired state. */
static void render_store(FILE *f, const struct snapshot *s)
{
	put_help(f, "graphtoggle_store_saves_total", "counter", "Desired-state saves that succeeded");
	fprintf(f, "graphtoggle_store_saves_total %llu\n", (unsigned long long)s->saves);
	put_help(f, "graphtoggle_store_save_failures_total", "counter", "Desired-state saves that failed");
	fprintf(f, "graphtoggle_store_save_failures_total %llu\n", (unsigned long long)s->save_errors);
	put_help(f, "graphtoggle_store_save_duration_seconds", "histogram",
		 "Time of a desired-state save (write, fsync, rename)");
	put_hist(f, "graphtoggle_store_save_duration_seconds", "", &s->save_lat);
	put_help(f, "graphtoggle_store_checkpoints_total", "counter",
		 "Checkpoints that folded the old journal into the entry files");
	fprintf(f, "graphtoggle_store_checkpoints_total %llu\n", (unsigned long long)s->checkpoints);
	put_help(f, "graphtoggle_store_checkpoint_failures_total", "counter",
		 "Checkpoints that failed (saves are refused until one succeeds)");
	fprintf(f, "graphtoggle_store_checkpoint_failures_total %llu\n",
		(unsigned long long)s->ckpt_failures);
	put_help(f, "graphtoggle_store_checkpoint_duration_seconds", "histogram",
		 "Time of a checkpoint (files written, synced, renamed; the old journal removed), "
		 "beside the saves");
	put_hist(f, "graphtoggle_store_checkpoint_duration_seconds", "", &s->ckpt_lat);
}

/* One series per agent, from its status lane. */
static void render_agents(FILE *f, const struct snapshot *s)
{
	AGENT_SERIES(f, s, a, "graphtoggle_agent_connected", "gauge",
		     "1 while the agent's connection to toggled is open (agents that left are not listed)",
		     "} %d\n", 1);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_status_valid", "gauge",
		     "1 if the agent's status lane passed the daemon's checks at the last read",
		     "} %d\n", a->status_valid ? 1 : 0);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_step", "gauge",
		     "The agent's current step (-1 before the first)",
		     "} %lld\n", (long long)a->step);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_applied_version_lag", "gauge",
		     "Control versions written by toggled and not yet run by a replay",
		     "} %llu\n",
		     (unsigned long long)(a->control_version > a->applied_version
						  ? a->control_version - a->applied_version
						  : 0));
	AGENT_SERIES(f, s, a, "graphtoggle_agent_set_changes_total", "counter",
		     "Standing-set changes toggled wrote for the agent (its control version)",
		     "} %llu\n", (unsigned long long)a->control_version);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_replays_total", "counter",
		     "Graph launches through libtoggle",
		     "} %llu\n", (unsigned long long)a->replays);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_launches_refused_total", "counter",
		     "Launches the replay guard refused (unbound or stale graph)",
		     "} %llu\n",
		     (unsigned long long)(a->anomalies[TOGGLE_SHM_AN_LAUNCH_UNBOUND] +
					  a->anomalies[TOGGLE_SHM_AN_LAUNCH_STALE]));
	AGENT_SERIES(f, s, a, "graphtoggle_agent_late_plans_total", "counter",
		     "Plan entries refused because their step had begun",
		     "} %llu\n",
		     (unsigned long long)a->anomalies[TOGGLE_SHM_AN_LATE_PLANS]);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_plan_batches_rejected_total", "counter",
		     "Plan batches the agent refused whole",
		     "} %llu\n", (unsigned long long)a->plan_rejected);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_graphs", "gauge",
		     "Graphs the agent has",
		     "} %llu\n", (unsigned long long)a->graphs);
}

/* The agent's own view of its connection, and its anomalies by kind. */
static void render_agent_conn(FILE *f, const struct snapshot *s)
{
	put_help(f, "graphtoggle_agent_conn_state", "gauge",
		 "The agent's own view of its connection to toggled: 1 for the state it reports "
		 "(unknown: an agent without the status lane's connection words)");
	for (size_t i = 0; i < s->n_agents; i++) {
		const struct snap_agent *a = &s->agents[i];
		size_t cur = conn_state_index(a->conn.state);
		for (size_t k = 0; k < CONN_STATES; k++) {
			fputs("graphtoggle_agent_conn_state", f);
			agent_labels(f, a);
			fprintf(f, ",state=\"%s\"} %d\n", conn_states[k], k == cur);
		}
	}
	AGENT_SERIES(f, s, a, "graphtoggle_agent_conn_sessions_total", "counter",
		     "Registrations the agent made with toggled, as it reports them (> 1: it reconnected)",
		     "} %llu\n", (unsigned long long)a->conn.sessions);
	AGENT_SERIES(f, s, a, "graphtoggle_agent_conn_failures_total", "counter",
		     "Failed connection or registration attempts, as the agent reports them",
		     "} %llu\n", (unsigned long long)a->conn.failures);
	put_help(f, "graphtoggle_agent_anomalies_total", "counter", "The agent's anomaly counters by kind");
	for (size_t i = 0; i < s->n_agents; i++) {
		const struct snap_agent *a = &s->agents[i];
		for (int k = 0; k < TOGGLE_SHM_AN_COUNT; k++) {
			fputs("graphtoggle_agent_anomalies_total", f);
			agent_labels(f, a);
			fprintf(f, ",kind=\"%s\"} %llu\n", anomaly_kinds[k],
				(unsigned long long)a->anomalies[k]);
		}
	}
}

static void render(FILE *f, const struct snapshot *s)
{
	render_daemon(f, s);
	render_rpc(f, s);
	render_store(f, s);
	render_agents(f, s);
	render_agent_conn(f, s);
}

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, char *body, size_t len,
			       const char *type)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result respond_text(struct MHD_Connection *c, unsigned status, const char *text)
{
	char *body = strdup(text);
	return body ? respond(c, status, body, strlen(body), "text/plain; charset=utf-8") : MHD_NO;
}

/* Wait for a snapshot newer than this request; false on timeout. */
static bool snapshot_take(struct td_metrics *m)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += SCRAPE_WAIT_MS / 1000;
	pthread_mutex_lock(&m->mu);
	uint64_t want = ++m->requested;
	uv_async_send(&m->async);
	int rc = 0;
	while (m->published < want && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&m->cv, &m->mu, &until);
	bool ok = m->published >= want;
	if (ok) {
		struct snapshot *t = m->rendering;
		m->rendering = m->ready;
		m->ready = t;
	}
	pthread_mutex_unlock(&m->mu);
	return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct td_metrics *m = cls;
	(void)version;
	(void)upload;
	(void)con_cls;
	if (*upload_size)
		return respond_text(c, 413, "no request body expected\n");
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return respond_text(c, 405, "GET /metrics\n");
	if (strcmp(url, "/metrics") != 0)
		return respond_text(c, 404, "toggled serves /metrics only\n");
	if (!snapshot_take(m))
		return respond_text(c, 503, "toggled's loop did not publish a snapshot within 1 s\n");
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);
	if (!f)
		return respond_text(c, 500, "out of memory\n");
	render(f, m->rendering);
	if (fclose(f) != 0) {
		free(body);
		return respond_text(c, 500, "out of memory\n");
	}
	return respond(c, 200, body, len, "text/plain; version=0.0.4; charset=utf-8");
}

/* ---- start and stop ---- */

/* ADDRESS: /path (Unix socket), PORT, HOST:PORT or [V6]:PORT (HOST defaults to 127.0.0.1). */
static int listen_on(struct td_metrics *m, const char *addr, char *err, size_t errlen)
{
	if (addr[0] == '/') {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(addr) >= sizeof(sa.sun_path)) {
			snprintf(err, errlen, "metrics socket path longer than %zu bytes",
				 sizeof(sa.sun_path) - 1);
			return -1;
		}
		memcpy(sa.sun_path, addr, strlen(addr) + 1);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			snprintf(err, errlen, "socket: %s", strerror(errno));
			return -1;
		}
		unlink(addr); /* ours from an earlier run; the main socket guards against two daemons */
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0) {
			snprintf(err, errlen, "listening on %s: %s", addr, strerror(errno));
			close(fd);
			return -1;
		}
		m->unix_socket = true;
		return fd;
	}
	char host[256] = "127.0.0.1";
	const char *port = addr;
	const char *colon = strrchr(addr, ':');
	if (colon) {
		size_t hl = (size_t)(colon - addr);
		const char *h = addr;
		if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
			h++;
			hl -= 2;
		}
		if (hl == 0 || hl >= sizeof(host)) {
			snprintf(err, errlen, "bad metrics address '%s' (PORT, HOST:PORT or /path)", addr);
			return -1;
		}
		memcpy(host, h, hl);
		host[hl] = '\0';
		port = colon + 1;
	}
	char *end;
	long pn = strtol(port, &end, 10);
	if (!*port || *end || pn < 0 || pn > 65535) {
		snprintf(err, errlen, "bad metrics port in '%s'", addr);
		return -1;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
	struct addrinfo *ai = NULL;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		snprintf(err, errlen, "metrics address '%s': %s (a numeric address is needed)", addr,
			 gai_strerror(rc));
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
		snprintf(err, errlen, "listening on %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	/* Say the port bound (port 0: one the kernel chose). */
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char h[NI_MAXHOST], sv[NI_MAXSERV];
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), sv, sizeof(sv),
			NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(m->address, sizeof(m->address), "%s%s%s:%s", ss.ss_family == AF_INET6 ? "[" : "",
			 h, ss.ss_family == AF_INET6 ? "]" : "", sv);
	return fd;
}

static void metrics_free_cb(uv_handle_t *h)
{
	struct td_metrics *m = h->data;
	for (int i = 0; i < 3; i++) {
		struct snapshot *s = i == 0 ? m->building : i == 1 ? m->ready : m->rendering;
		free(s->agents);
	}
	/* The three came from one calloc: free the lowest address. */
	struct snapshot *lo = m->building;
	if (m->ready < lo)
		lo = m->ready;
	if (m->rendering < lo)
		lo = m->rendering;
	free(lo);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	free(m);
}

int td_metrics_start(struct td_daemon *d, const char *address, char *err, size_t errlen)
{
	struct td_metrics *m = calloc(1, sizeof(*m));
	struct snapshot *s = calloc(3, sizeof(*s));
	if (!m || !s) {
		free(m);
		free(s);
		snprintf(err, errlen, "out of memory");
		return TOGGLE_ENOMEM;
	}
	m->d = d;
	m->building = &s[0];
	m->ready = &s[1];
	m->rendering = &s[2];
	snprintf(m->address, sizeof(m->address), "%s", address);
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	m->listen_fd = listen_on(m, address, err, errlen);
	if (m->listen_fd < 0) {
		free(s);
		free(m);
		return TOGGLE_EIO;
	}
	uv_async_init(d->loop, &m->async, on_snapshot_wanted);
	m->async.data = m;
	/* ITC: so that MHD_quiesce_daemon hands the listen socket back at stop. */
	m->httpd = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ITC, 0, NULL, NULL,
				    on_request, m, MHD_OPTION_LISTEN_SOCKET, m->listen_fd,
				    MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
				    MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	if (!m->httpd) {
		snprintf(err, errlen, "libmicrohttpd did not start on %s", address);
		close(m->listen_fd);
		if (m->unix_socket)
			unlink(m->address);
		uv_close((uv_handle_t *)&m->async, metrics_free_cb);
		return TOGGLE_EIO;
	}
	d->metrics = m;
	log_info("metrics on %s (GET /metrics)", m->address);
	return 0;
}

void td_metrics_stop(struct td_daemon *d)
{
	struct td_metrics *m = d->metrics;
	if (!m)
		return;
	d->metrics = NULL;
	/* The listen socket comes back to us (else MHD closes it); stopping
	 * joins the HTTP thread, whose scrape waiting on the loop times out. */
	MHD_socket fd = MHD_quiesce_daemon(m->httpd);
	MHD_stop_daemon(m->httpd);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	if (m->unix_socket)
		unlink(m->address);
	uv_close((uv_handle_t *)&m->async, metrics_free_cb);
}
