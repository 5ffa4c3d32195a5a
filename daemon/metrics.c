/*
 * metrics.c - `toggled --metrics ADDRESS`: /metrics in the Prometheus text
 * format (0.0.4), served by libmicrohttpd on its own thread.
 *
 * The HTTP thread never reads loop state.  A scrape asks the loop for a
 * snapshot (uv_async_send) and waits, bounded, for it; the loop builds the
 * snapshot into a buffer of its own and exchanges it with the shared one
 * (an atomic pointer exchange: no lock, so the loop never waits on the
 * lower-priority HTTP thread), then posts a semaphore.  The HTTP thread
 * exchanges the shared one with its own and renders.
 * Counters the server and the store feed (td_metrics_rpc; td_hist_add,
 * hist.c) live in loop-owned memory and are copied by the loop into the
 * snapshot.
 *
 * /metrics is for Prometheus, never a lever on the daemon (issue 30):
 *  - one thread polls every connection (libmicrohttpd's internal polling
 *    thread, epoll, non-blocking sockets), so a slow client holds nobody;
 *  - at most METRICS_CONNECTIONS connections: one more closes the oldest
 *    that is not being answered (shutdown on its socket, from this same
 *    thread), so connections that trickle bytes or sit idle, however many,
 *    give way to a scrape; when every one is being answered, the new one is
 *    closed instead; METRICS_IDLE_S without a byte closes one;
 *  - the text is rendered at most once per METRICS_CACHE_MS: scrapes within
 *    that time of a render get the same response (one refcounted MHD
 *    response), so a flood costs the loop one snapshot and this thread one
 *    render per interval, whatever its rate;
 *  - at most METRICS_RATE answers a second (a bucket of METRICS_BURST): a
 *    scrape past that is suspended, in order of arrival, until the pacer
 *    thread resumes it, so a client scraping back to back waits instead of
 *    making toggled copy 600 KB (256 agents) to it as fast as it can read;
 *    and the HTTP thread runs at a lower priority (METRICS_NICE) than the
 *    loop;
 *  - a loop that has not answered a snapshot request for SCRAPE_WAIT_MS is
 *    answered 503 at once, never waited on again by each scrape in turn.
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "gzipenc.h"
#include "log.h"
#include "toggled.h"

#define SCRAPE_WAIT_MS 1000   /* longest wait for the loop; then 503 */
#define METRICS_CACHE_MS 250  /* a render answers the scrapes of this long after it */
#define METRICS_CONNECTIONS 32 /* open connections; one more closes the oldest idle one */
#define METRICS_MHD_SLACK 32  /* libmicrohttpd's own limit is this much higher: the
			       * closed ones leave on its next turn (it accepts 10 a turn) */
#define METRICS_IDLE_S 10     /* a connection silent this long is closed */
#define METRICS_ANSWER_S 5    /* a request this long unanswered may be closed for room */
#define METRICS_BACKLOG 1024  /* listen(2): a burst of connections waits, not dropped */
#define METRICS_NICE 10       /* the HTTP thread's nice value above the loop's */
#define METRICS_RATE 10       /* /metrics answers a second, past the burst */
#define METRICS_BURST 10      /* answers at once after a quiet time */

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
	struct td_ring_counters ring; /* its data ring as record.c shows it (capacity 0: none) */
};

struct snapshot {
	uint64_t uptime_ms;
	uint32_t peers_agent, peers_client, peers_watcher;
	struct td_stats stats;
	uint64_t rpc[TD_RPC_METHODS][TD_RPC_CODES];
	struct td_hist rpc_lat[TD_RPC_METHODS];
	uint64_t saves, save_errors;
	struct td_hist save_lat;
	struct td_cluster_view cluster;
	uint64_t checkpoints, ckpt_failures;
	struct td_hist ckpt_lat;
	size_t n_agents, cap_agents;
	struct snap_agent *agents;
	uint64_t seq; /* the request it answers (td_metrics.requested when filled) */
};

/* One HTTP connection, oldest first in td_metrics' list (the HTTP thread's). */
struct mconn {
	struct mconn *prev, *next;
	struct MHD_Connection *c;
	MHD_socket fd;
	bool listed; /* false once closed to make room (it leaves on MHD's next turn) */
	/* Under pace_mu: suspended in the wait queue; let through; closed while waiting. */
	struct mconn *wnext;
	bool waiting, granted, evicted;
	uint64_t busy_ns; /* the HTTP thread's: when its request came (0: none) */
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
	/* Three snapshots: the loop's, the shared one, the HTTP thread's.  Only
	 * `ready` is shared, and only through atomic_exchange. */
	struct snapshot *building, *rendering;
	_Atomic(struct snapshot *) ready;
	struct snapshot *all; /* the three's one allocation */
	_Atomic uint64_t requested;   /* by the HTTP thread */
	_Atomic uint64_t published;   /* by the loop: requests up to this one answered */
	sem_t published_sem;          /* posted at each publication */
	uint64_t pending_since_ns;    /* the HTTP thread's: its oldest request not yet answered */
	/* The HTTP thread's own. */
	struct mconn *oldest, *newest;
	size_t n_conns; /* listed */
	uint64_t evicted, refused;
	struct MHD_Response *cached; /* the last render, refcounted by MHD */
	struct MHD_Response *cached_gz; /* the same, gzipped: made when first asked for */
	uint64_t cached_ns;          /* when its snapshot was asked for */
	bool niced;
	/* The answers' pace: the HTTP thread and the pacer thread, under pace_mu. */
	pthread_mutex_t pace_mu;
	pthread_cond_t pace_cv; /* CLOCK_MONOTONIC */
	struct mconn *wait_head, *wait_tail;
	double tokens;
	uint64_t tokens_ns;
	bool pace_stop;
	pthread_t pacer;
};

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
	s->cluster = d->cluster_view;
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
		td_record_ring_counters(a, &o->ring);
	}
	s->n_agents = n;
	return 0;
}

static void on_snapshot_wanted(uv_async_t *h)
{
	struct td_metrics *m = h->data;
	uint64_t seq = atomic_load(&m->requested); /* the requests made before this fill */
	/* Counters as of now: the poll the status timer would run next. */
	td_agents_poll(m->d);
	if (snap_fill(m, m->building) != 0) {
		log_warnx("metrics: out of memory for the snapshot");
		return;
	}
	m->building->seq = seq;
	m->building = atomic_exchange(&m->ready, m->building);
	atomic_store(&m->published, seq);
	sem_post(&m->published_sem);
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
		fprintf(f, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, td_hist_le[i],
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
static void render_daemon(FILE *f, const struct snapshot *s, const struct td_metrics *m)
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
	put_help(f, "graphtoggle_metrics_connections_dropped_total", "counter",
		 "Connections to /metrics closed at the connection limit: evicted (the oldest not "
		 "being answered, to make room) or refused (a new one, every other being answered)");
	fprintf(f, "graphtoggle_metrics_connections_dropped_total{reason=\"evicted\"} %llu\n",
		(unsigned long long)m->evicted);
	fprintf(f, "graphtoggle_metrics_connections_dropped_total{reason=\"refused\"} %llu\n",
		(unsigned long long)m->refused);
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

/*
 * The cluster's watch (toggled --etcd): which member, since when, how often
 * it moved and lost its watch; the last error as a label of an info
 * metric (cleaned by cluster.c, escaped here, bounded).  Nothing outside a
 * cluster.
 */
static void render_cluster(FILE *f, const struct snapshot *s)
{
	const struct td_cluster_view *v = &s->cluster;
	if (!v->on)
		return;
	put_help(f, "graphtoggle_cluster_watch_up", "gauge",
		 "1 while the etcd watch is up, on the member named");
	fputs("graphtoggle_cluster_watch_up{member=\"", f);
	put_label(f, v->member);
	fprintf(f, "\"} %d\n", v->connected ? 1 : 0);
	put_help(f, "graphtoggle_cluster_watch_member_since_seconds", "gauge",
		 "Unix time since which the watch reads from this member");
	fputs("graphtoggle_cluster_watch_member_since_seconds{member=\"", f);
	put_label(f, v->member);
	fprintf(f, "\"} %.3f\n", (double)v->since_unix_ms / 1000.0);
	put_help(f, "graphtoggle_cluster_watch_failovers_total", "counter",
		 "Moves of the watch to another etcd member");
	fprintf(f, "graphtoggle_cluster_watch_failovers_total %llu\n",
		(unsigned long long)v->failovers);
	put_help(f, "graphtoggle_cluster_watch_lost_total", "counter", "Watches that ended");
	fprintf(f, "graphtoggle_cluster_watch_lost_total %llu\n", (unsigned long long)v->lost);
	put_help(f, "graphtoggle_cluster_watch_last_error_info", "gauge",
		 "Why the last watch ended (empty: none yet)");
	fputs("graphtoggle_cluster_watch_last_error_info{error=\"", f);
	put_label(f, v->last_error);
	fputs("\"} 1\n", f);
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

/* One metric: HELP, TYPE and a series per agent that shares a data ring. */
#define RING_SERIES(f, s, name, type, help, field)                                  \
	do {                                                                         \
		put_help(f, name, type, help);                                       \
		for (size_t _i = 0; _i < (s)->n_agents; _i++) {                      \
			const struct snap_agent *_a = &(s)->agents[_i];              \
			if (!_a->ring.capacity)                                      \
				continue;                                            \
			fputs(name, f);                                              \
			agent_labels(f, _a);                                         \
			fprintf(f, "} %llu\n", (unsigned long long)_a->ring.field); \
		}                                                                    \
	} while (0)

/*
 * Data rings (docs/recording.md): the agent's counters as toggled shows
 * them (record.c's fold: never back, at most 2^53, so a hostile agent
 * cannot reset or overflow these counters), and toggled's own count of
 * what it forwarded.  Agents without a ring have no series.
 */
static void render_rings(FILE *f, const struct snapshot *s)
{
	RING_SERIES(f, s, "graphtoggle_agent_ring_size_bytes", "gauge",
		    "Bytes of the agent's data ring (its data area)", capacity);
	RING_SERIES(f, s, "graphtoggle_agent_ring_records_total", "counter",
		    "Records the agent published into its data ring, as it reports them", records);
	RING_SERIES(f, s, "graphtoggle_agent_ring_dropped_total", "counter",
		    "Records the agent dropped because its data ring was full (the consumer was "
		    "slower), as it reports them", dropped);
	RING_SERIES(f, s, "graphtoggle_agent_ring_errors_total", "counter",
		    "Records the agent turned into pads (a copy or its event failed), as it reports "
		    "them", errors);
	RING_SERIES(f, s, "graphtoggle_agent_ring_counter_faults_total", "counter",
		    "Reads of the agent's ring counters that toggled refused: a value lower than "
		    "before or past 2^53", counter_faults);
	RING_SERIES(f, s, "graphtoggle_agent_ring_forwarded_records_total", "counter",
		    "Records toggled read from the agent's ring, validated and forwarded to a "
		    "recording", forwarded_records);
	RING_SERIES(f, s, "graphtoggle_agent_ring_forwarded_bytes_total", "counter",
		    "Payload bytes of those records", forwarded_bytes);
}

static void render(FILE *f, const struct snapshot *s, const struct td_metrics *m)
{
	render_daemon(f, s, m);
	render_rpc(f, s);
	render_store(f, s);
	render_cluster(f, s);
	render_agents(f, s);
	render_agent_conn(f, s);
	render_rings(f, s);
}

static enum MHD_Result respond_text(struct MHD_Connection *c, unsigned status, const char *text)
{
	char *body = strdup(text);
	struct MHD_Response *r =
		body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/*
 * Wait for a snapshot newer than this request; false on timeout.  The wait
 * ends SCRAPE_WAIT_MS after the oldest request the loop has not answered:
 * while the loop is stuck, each later scrape is answered 503 at once.
 */
static bool snapshot_take(struct td_metrics *m)
{
	uint64_t now = td_mono_ns();
	if (atomic_load(&m->published) == atomic_load(&m->requested))
		m->pending_since_ns = now; /* none pending: this one is the oldest */
	uint64_t want = atomic_fetch_add(&m->requested, 1) + 1;
	uv_async_send(&m->async);
	uint64_t until_ns = m->pending_since_ns + (uint64_t)SCRAPE_WAIT_MS * 1000000u;
	struct timespec until = {.tv_sec = (time_t)(until_ns / 1000000000u),
				 .tv_nsec = (long)(until_ns % 1000000000u)};
	/* Each publication posts once; posts left from earlier ones only make
	 * this look again. */
	while (atomic_load(&m->published) < want)
		if (sem_clockwait(&m->published_sem, CLOCK_MONOTONIC, &until) != 0 && errno != EINTR)
			break;
	if (atomic_load(&m->published) < want)
		return false;
	/* The loop exchanged after our request, so `ready` holds one as new. */
	m->rendering = atomic_exchange(&m->ready, m->rendering);
	return true;
}

/* A response over body (taken: freed with the response, or here on failure). */
static struct MHD_Response *response_of(char *body, size_t len, bool gz)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return NULL;
	}
	MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	MHD_add_response_header(r, "Vary", "Accept-Encoding");
	if (gz)
		MHD_add_response_header(r, "Content-Encoding", "gzip");
	return r;
}

static void cache_drop(struct td_metrics *m)
{
	/* connections still sending a response hold their own reference */
	if (m->cached)
		MHD_destroy_response(m->cached);
	if (m->cached_gz)
		MHD_destroy_response(m->cached_gz);
	m->cached = m->cached_gz = NULL;
}

/* The response to a scrape: the cached one within METRICS_CACHE_MS of its
 * snapshot, else a new render; gzipped when gz (and gzip worked), the
 * gzipped form made with the render that first needed it (a render without
 * it, then a gzip scrape in the same window: one more render, so at most
 * two a window).  NULL: the loop did not answer (503). */
static struct MHD_Response *scrape_response(struct td_metrics *m, bool gz)
{
	uint64_t now = td_mono_ns();
	if (m->cached && now - m->cached_ns < (uint64_t)METRICS_CACHE_MS * 1000000u &&
	    (!gz || m->cached_gz))
		return gz ? m->cached_gz : m->cached;
	if (!snapshot_take(m))
		return NULL;
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);
	if (!f)
		return NULL;
	render(f, m->rendering, m);
	if (fclose(f) != 0) {
		free(body);
		return NULL;
	}
	struct MHD_Response *rz = NULL;
	char *z = NULL;
	size_t zlen = 0;
	if (gz && td_gzip(body, len, &z, &zlen) == 0)
		rz = response_of(z, zlen, true);
	struct MHD_Response *r = response_of(body, len, false);
	if (!r) {
		if (rz)
			MHD_destroy_response(rz);
		return NULL;
	}
	cache_drop(m);
	m->cached = r;
	m->cached_gz = rz;
	m->cached_ns = now;
	return gz && rz ? rz : r;
}

/* ---- the answers' pace ---- */

static void tokens_refill(struct td_metrics *m, uint64_t now)
{
	m->tokens += (double)(now - m->tokens_ns) * METRICS_RATE / 1e9;
	if (m->tokens > METRICS_BURST)
		m->tokens = METRICS_BURST;
	m->tokens_ns = now;
}

enum pace { PACE_NOW, PACE_WAIT, PACE_CLOSE };

/* May k's scrape be answered now?  If the pacer let it through, or the
 * bucket has an answer and nobody waits before it; never if k was closed. */
static enum pace pace_take(struct td_metrics *m, struct mconn *k)
{
	pthread_mutex_lock(&m->pace_mu);
	enum pace p = k->evicted ? PACE_CLOSE : k->granted ? PACE_NOW : PACE_WAIT;
	if (p == PACE_WAIT) {
		tokens_refill(m, td_mono_ns());
		if (!m->wait_head && m->tokens >= 1) {
			m->tokens -= 1;
			p = PACE_NOW;
		}
	}
	k->granted = false; /* a next request on this connection waits its turn again */
	pthread_mutex_unlock(&m->pace_mu);
	return p;
}

/* k's connection was just suspended: in the queue, for the pacer to resume
 * (at stop, when the pacer is gone, resumed at once to be closed). */
static void pace_wait(struct td_metrics *m, struct mconn *k)
{
	pthread_mutex_lock(&m->pace_mu);
	if (m->pace_stop) {
		k->evicted = true;
		pthread_mutex_unlock(&m->pace_mu);
		MHD_resume_connection(k->c);
		return;
	}
	k->waiting = true;
	k->wnext = NULL;
	if (m->wait_tail)
		m->wait_tail->wnext = k;
	else
		m->wait_head = k;
	m->wait_tail = k;
	pthread_cond_signal(&m->pace_cv);
	pthread_mutex_unlock(&m->pace_mu);
}

static struct mconn *wait_pop(struct td_metrics *m)
{
	struct mconn *k = m->wait_head;
	m->wait_head = k->wnext;
	if (!m->wait_head)
		m->wait_tail = NULL;
	k->wnext = NULL;
	k->waiting = false;
	return k;
}

/* Take k out of the queue if it waits there (it is being closed): true if
 * so, and the caller resumes it (whoever takes k out resumes it, once). */
static bool pace_cancel(struct td_metrics *m, struct mconn *k)
{
	pthread_mutex_lock(&m->pace_mu);
	bool was = k->waiting;
	if (was) {
		struct mconn **pp = &m->wait_head, *prev = NULL;
		while (*pp != k) {
			prev = *pp;
			pp = &(*pp)->wnext;
		}
		*pp = k->wnext;
		if (m->wait_tail == k)
			m->wait_tail = prev;
		k->wnext = NULL;
		k->waiting = false;
	}
	k->evicted = true;
	pthread_mutex_unlock(&m->pace_mu);
	return was;
}

/* The pacer: resumes the oldest waiting scrape each time the bucket has an
 * answer; at stop, resumes every one still waiting (to be closed). */
static void *pacer_main(void *arg)
{
	struct td_metrics *m = arg;
	pthread_mutex_lock(&m->pace_mu);
	while (!m->pace_stop) {
		if (!m->wait_head) {
			pthread_cond_wait(&m->pace_cv, &m->pace_mu);
			continue;
		}
		uint64_t now = td_mono_ns();
		tokens_refill(m, now);
		if (m->tokens < 1) {
			uint64_t until_ns = now + (uint64_t)((1 - m->tokens) * 1e9 / METRICS_RATE) + 1;
			struct timespec until = {.tv_sec = (time_t)(until_ns / 1000000000u),
						 .tv_nsec = (long)(until_ns % 1000000000u)};
			pthread_cond_timedwait(&m->pace_cv, &m->pace_mu, &until);
			continue;
		}
		m->tokens -= 1;
		struct mconn *k = wait_pop(m);
		k->granted = true;
		struct MHD_Connection *c = k->c;
		pthread_mutex_unlock(&m->pace_mu);
		MHD_resume_connection(c);
		pthread_mutex_lock(&m->pace_mu);
	}
	while (m->wait_head) {
		struct mconn *k = wait_pop(m);
		k->evicted = true;
		struct MHD_Connection *c = k->c;
		pthread_mutex_unlock(&m->pace_mu);
		MHD_resume_connection(c);
		pthread_mutex_lock(&m->pace_mu);
	}
	pthread_mutex_unlock(&m->pace_mu);
	return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct td_metrics *m = cls;
	(void)version;
	(void)upload;
	if (*upload_size)
		return respond_text(c, 413, "no request body expected\n");
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return respond_text(c, 405, "GET /metrics\n");
	if (strcmp(url, "/metrics") != 0)
		return respond_text(c, 404, "toggled serves /metrics only\n");
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct mconn *k = ci ? ci->socket_context : NULL;
	if (k && !*con_cls) { /* the request's first call: it is being answered from now */
		*con_cls = k;
		k->busy_ns = td_mono_ns();
	}
	switch (k ? pace_take(m, k) : PACE_CLOSE) {
	case PACE_CLOSE:
		return MHD_NO; /* closed to make room (or never listed) */
	case PACE_WAIT:
		MHD_suspend_connection(c); /* the pacer resumes it: we come back here */
		pace_wait(m, k);
		return MHD_YES;
	case PACE_NOW:
		break;
	}
	/* gzip when asked (Prometheus does): the text grows with the agents */
	const char *ae = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING);
	struct MHD_Response *r = scrape_response(m, td_gzip_accepted(ae));
	if (!r)
		return respond_text(c, 503, "toggled's loop did not publish a snapshot within 1 s\n");
	return MHD_queue_response(c, 200, r);
}

/* Lower the HTTP thread's priority below the loop's (raising a nice value
 * needs no privilege); called on this thread before its first request. */
static void http_thread_nice(struct td_metrics *m)
{
	if (m->niced)
		return;
	m->niced = true;
	id_t tid = (id_t)gettid();
	errno = 0;
	int cur = getpriority(PRIO_PROCESS, tid);
	if (cur == -1 && errno != 0)
		return;
	int want = cur + METRICS_NICE > 19 ? 19 : cur + METRICS_NICE;
	if (setpriority(PRIO_PROCESS, tid, want) != 0)
		log_debug("metrics: nice %d for the HTTP thread: %s", want, strerror(errno));
}

static void conn_unlist(struct td_metrics *m, struct mconn *k)
{
	if (k->prev)
		k->prev->next = k->next;
	else
		m->oldest = k->next;
	if (k->next)
		k->next->prev = k->prev;
	else
		m->newest = k->prev;
	k->prev = k->next = NULL;
	k->listed = false;
	m->n_conns--;
}

/* Being answered (waiting its turn or sending) for less than METRICS_ANSWER_S:
 * a scrape, not to be closed for room.  Idle, trickling or slow: fair game. */
static bool conn_answering(const struct mconn *k, uint64_t now)
{
	return k->busy_ns && now - k->busy_ns < (uint64_t)METRICS_ANSWER_S * 1000000000u;
}

/* Shut k down (libmicrohttpd sees it end and closes it on its next turn);
 * waiting its turn, it is resumed, to be closed. */
static void conn_drop(struct td_metrics *m, struct mconn *k)
{
	conn_unlist(m, k);
	shutdown(k->fd, SHUT_RDWR);
	if (pace_cancel(m, k))
		MHD_resume_connection(k->c);
}

/*
 * Every connection is listed, oldest first.  Past METRICS_CONNECTIONS, the
 * oldest that is not being answered is dropped, the new one itself when
 * every other is (a flood of more scrapes than places: they are answered at
 * the pace, newcomers refused, rather than each new one closing a scrape
 * about to be answered, which would answer none).  All notifications run on
 * the one HTTP thread, and CLOSED comes before the socket is closed, so a
 * listed fd is always the connection's.
 */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct td_metrics *m = cls;
	struct mconn *k = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (k && k->listed)
			conn_unlist(m, k);
		free(k);
		*socket_context = NULL;
		return;
	}
	http_thread_nice(m);
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	k = ci ? calloc(1, sizeof(*k)) : NULL;
	if (!k) {
		/* Untracked, it could never be made room from: not kept. */
		if (ci)
			shutdown(ci->connect_fd, SHUT_RDWR);
		return;
	}
	k->c = c;
	k->fd = ci->connect_fd;
	k->listed = true;
	k->prev = m->newest;
	if (m->newest)
		m->newest->next = k;
	else
		m->oldest = k;
	m->newest = k;
	*socket_context = k;
	m->n_conns++;
	if (m->n_conns <= METRICS_CONNECTIONS)
		return;
	uint64_t now = td_mono_ns();
	struct mconn *v = m->oldest;
	while (conn_answering(v, now))
		v = v->next; /* stops at k at the latest: it has no request yet */
	conn_drop(m, v);
	if (v == k)
		m->refused++;
	else
		m->evicted++;
}

/* A request's end (answered, or its connection closed): no longer answering. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)con_cls;
	(void)toe;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct mconn *k = ci ? ci->socket_context : NULL;
	if (k)
		k->busy_ns = 0;
}

/* ---- start and stop ---- */

static bool same_file(const struct stat *a, const char *path)
{
	struct stat b;
	return stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

/* path is toggled's own RPC socket: --socket however spelled, or the socket
 * systemd handed over (its bound name). */
static bool is_rpc_socket(const struct td_daemon *d, const char *path)
{
	struct stat sb;
	if (strcmp(path, d->cfg.socket_path) == 0)
		return true;
	if (stat(path, &sb) != 0)
		return false;
	if (same_file(&sb, d->cfg.socket_path))
		return true;
	struct sockaddr_un sa;
	socklen_t sl = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	return d->listen_fd >= 0 &&
	       getsockname(d->listen_fd, (struct sockaddr *)&sa, &sl) == 0 &&
	       sa.sun_family == AF_UNIX && sl > offsetof(struct sockaddr_un, sun_path) &&
	       sa.sun_path[0] && sl < sizeof(sa) && same_file(&sb, sa.sun_path);
}

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
		if (is_rpc_socket(m->d, addr)) {
			snprintf(err, errlen, "%s is toggled's RPC socket (--socket): give the metrics "
				 "a path of their own", addr);
			return -1;
		}
		/* Never remove what is not a stale socket of ours; only a directory
		 * nobody else may write in keeps it so until bind (issue 30). */
		bool replaced;
		if (td_path_socket_claim(addr, &replaced, err, errlen) != 0)
			return -1;
		if (replaced)
			log_info("metrics: replaced a stale socket at %s", addr);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			snprintf(err, errlen, "socket: %s", strerror(errno));
			return -1;
		}
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
		    listen(fd, METRICS_BACKLOG) != 0) {
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
	    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, METRICS_BACKLOG) != 0) {
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
	for (int i = 0; i < 3; i++)
		free(m->all[i].agents);
	free(m->all);
	sem_destroy(&m->published_sem);
	pthread_mutex_destroy(&m->pace_mu);
	pthread_cond_destroy(&m->pace_cv);
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
	m->all = s;
	m->building = &s[0];
	atomic_init(&m->ready, &s[1]);
	m->rendering = &s[2];
	atomic_init(&m->requested, 0);
	atomic_init(&m->published, 0);
	sem_init(&m->published_sem, 0, 0);
	snprintf(m->address, sizeof(m->address), "%s", address);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* td_mono_ns's clock */
	pthread_mutex_init(&m->pace_mu, NULL);
	pthread_cond_init(&m->pace_cv, &ca);
	pthread_condattr_destroy(&ca);
	m->tokens = METRICS_BURST;
	m->tokens_ns = td_mono_ns();
	m->listen_fd = listen_on(m, address, err, errlen);
	if (m->listen_fd < 0) {
		sem_destroy(&m->published_sem);
		pthread_mutex_destroy(&m->pace_mu);
		pthread_cond_destroy(&m->pace_cv);
		free(s);
		free(m);
		return TOGGLE_EIO;
	}
	uv_async_init(d->loop, &m->async, on_snapshot_wanted);
	m->async.data = m;
	/* One internal polling thread (epoll on Linux), every socket non-blocking:
	 * a slow client waits on its own socket, never holds the thread.
	 * Suspend and resume: the pace (and its ITC, so that
	 * MHD_quiesce_daemon hands the listen socket back at stop). */
	m->httpd = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0,
				    NULL, NULL,
				    on_request, m, MHD_OPTION_LISTEN_SOCKET, m->listen_fd,
				    MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
				    MHD_OPTION_NOTIFY_COMPLETED, on_completed, m,
				    MHD_OPTION_CONNECTION_LIMIT,
				    (unsigned)(METRICS_CONNECTIONS + METRICS_MHD_SLACK),
				    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_S,
				    MHD_OPTION_END);
	if (m->httpd && pthread_create(&m->pacer, NULL, pacer_main, m) != 0) {
		MHD_quiesce_daemon(m->httpd); /* the listen socket is closed below */
		MHD_stop_daemon(m->httpd);
		m->httpd = NULL;
	}
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
	/* Every suspended scrape resumed (to be closed): MHD stops no daemon
	 * with suspended connections. */
	pthread_mutex_lock(&m->pace_mu);
	m->pace_stop = true;
	pthread_cond_signal(&m->pace_cv);
	pthread_mutex_unlock(&m->pace_mu);
	pthread_join(m->pacer, NULL);
	MHD_stop_daemon(m->httpd);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	/* Every connection has closed (and said so): the cache's is the last reference. */
	cache_drop(m);
	if (m->unix_socket)
		unlink(m->address);
	uv_close((uv_handle_t *)&m->async, metrics_free_cb);
}
