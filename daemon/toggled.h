/*
 * toggled.h - the daemon's shared types: configuration, peers (connections),
 * agents, the desired-state store, waiters, and the functions each module
 * offers the others.  The modules are layers that call one way, down
 * (docs/architecture.md, "The daemon's layers"; scripts/layer-check.sh):
 *   main.c (start-up, signals, wiring the layers together);
 *   server.c (listener, peers, framing, turns, write queues) and metrics.c
 *     (Prometheus /metrics on its own thread);
 *   dispatch.c (validation order, permission, routing, and the one place
 *     replies are encoded and sent, those that wait for a save too);
 *   rpc_query.c, rpc_control.c, rpc_target.c, rpc_reply.c (handlers: they
 *     fill a reply, rpc.h) and cluster.c (etcd's desired state);
 *   the state: ctl.c (validate-then-apply of a write), view.c (agents and
 *     status as reply messages), commit.c (saves, durable before visible),
 *     events.c (status polling, events to watchers), agents.c (registry,
 *     shared memory), store.c (persistence), report.c (the one way up:
 *     report.h);
 *   helpers: auth.c (SO_PEERCRED and the operator group), hist.c, log.c,
 *     paths.c, config.c, netcheck.c, gzipenc.c, etcd.c, cluster_key.c;
 *   record.c (data rings, recordings), beside the handlers.
 */
#ifndef TOGGLED_H
#define TOGGLED_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>
#include <uv.h>

#include "cluster.h"
#include "frame.h"
#include "report.h"
#include "toggle_hooks.h"
#include "toggle_shm.h"

#include "toggle_version.h"
#include "util.h"
#define TD_VERSION          TOGGLE_VERSION_STRING
#define TD_MAX_QUEUE        (8u << 20)  /* bytes queued to one peer before it is dropped */
#define TD_MAX_PEERS        1024        /* default max_peers */
#define TD_MAX_PEERS_LIMIT  65536       /* max_peers accepted from the configuration */
#define TD_RESERVED_PEERS   32          /* default reserved_peers: root and operators only */
#define TD_MAX_PEERS_PER_UID 256        /* default max_peers_per_uid (root and us exempt) */
#define TD_HELLO_TIMEOUT_MS 5000        /* default hello_timeout_ms */
#define TD_IDLE_TIMEOUT_MS  300000      /* default idle_timeout_ms (not agents, not watchers) */
#define TD_FDS_PER_PEER     4           /* socket, a passed fd in flight, an agent's memfd, its data ring */
#define TD_FDS_SPARE        64          /* state files, /proc reads, the reserve fd */
#define TD_MAX_GROUP_RULES  32          /* agent_group lines in toggled.conf */
#define TD_UNIX_GROUP_MAX   64          /* unix group names (operator_group, @group), NUL included */
#define TD_GROUP_MEMBERS    8           /* uids or @unix groups per agent_group line */
#define TD_LOG_EVERY_MS     10000       /* repeated warnings: one line per this, with a count */
#define TD_FRAMES_PER_TURN  2           /* default frames_per_turn: frames of all peers per loop turn */
#define TD_POLL_IDLE_MS     10          /* status-lane polling for events: each agent this often */
#define TD_POLL_SLICE       32          /* agents whose lanes one idle tick reads, at least */
#define TD_POLL_WAIT_MS     1           /* while a SetEnabled waits */
/* Aligned changes (rpc_control.c).  The step is the highest reported step
 * plus a margin covering TD_ALIGN_LEAD_MS at the fastest target's measured
 * step rate (the save's fdatasync, the lane write a loop turn later, the
 * agent's read at its next step), at least TD_ALIGN_MIN_MARGIN steps. */
#define TD_ALIGN_LEAD_MS    200
#define TD_ALIGN_MIN_MARGIN 4
#define TD_ALIGN_RATE_MS    250         /* step rate sampled over at least this */
#define TD_ALIGN_MAX_RATE   1000000     /* steps/s believed at most (the rate is the agent's word) */
#define TD_ALIGN_MAX_SPREAD 65536       /* targets' steps at most this far apart */
#define TD_ALIGN_ACK_MS     5000        /* without wait_ms: how long the reply waits for the agents */
/* Pending plan entries (steps not begun) per agent: the agent's own limit. */
#define TD_MAX_PENDING_PLAN TOGGLE_MAX_PLAN
/* A store key: an agent name, or name@uid (td_store_key), and its NUL. */
#define TD_MAX_KEY          (TGP_MAX_NAME + 12)

/* agent_group = NAME: UID|@UNIXGROUP, ...  Who may register agents in group NAME. */
struct td_group_rule {
	char name[TGP_MAX_NAME];
	size_t n;
	struct {
		bool is_group;     /* @name: a unix group, resolved at registration */
		uint32_t uid;
		char group[TD_UNIX_GROUP_MAX];
	} m[TD_GROUP_MEMBERS];
};

struct td_config {
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char state_dir[PATH_MAX];
	char config_path[PATH_MAX];
	char operator_group[TD_UNIX_GROUP_MAX];
	unsigned socket_mode;
	int verbose;
	size_t max_queue;
	/* Connection limits (issue 11 item 3): one uid cannot lock the others out. */
	unsigned max_peers;          /* all peers */
	unsigned reserved_peers;     /* of those, kept for root, our uid and the operator group */
	unsigned max_peers_per_uid;  /* per uid other than root and ours; 0: no limit */
	unsigned hello_timeout_ms;   /* a peer must say hello within this; 0: no deadline */
	unsigned idle_timeout_ms;    /* a client that is not an agent, not watching and not
				      * waiting is dropped after this long silent; 0: never */
	unsigned frames_per_turn;    /* frames handled per loop turn, all peers together */
	size_t journal_max;          /* journal bytes before a checkpoint (store.c) */
	/* Groups tied to uids or unix groups (issue 11 item 5); others are open to all. */
	struct td_group_rule group_rules[TD_MAX_GROUP_RULES];
	size_t n_group_rules;
	/* Cluster (cluster.c): etcd endpoints, cluster name, this host's id; set
	 * at start-up only (a SIGHUP keeps them). */
	char etcd[1024];
	char cluster[CLUSTER_MAX_NAME];
	char host_id[CLUSTER_MAX_NAME];
	char etcd_credentials[PATH_MAX]; /* TLS files, user and password (etcd.h); "": none */
	/* Given on the command line: they win over the file, also after SIGHUP. */
	char cli_group[TD_UNIX_GROUP_MAX]; /* -g: the operator group */
	bool cli_verbose;
	bool strict_state; /* a corrupt state file stops the start instead of being set aside */
};

struct td_selector {
	enum { SEL_ALL, SEL_AGENT, SEL_PID, SEL_GROUP } kind;
	uint64_t agent_id;
	uint32_t pid;
	char group[TGP_MAX_NAME];
};

struct td_pending;

/*
 * One frame queued to a peer.  A reply to a write that waits for its save
 * holds its place in the queue with pend set and data NULL: nothing behind
 * it leaves before it, so each peer gets its replies in request order.
 */
struct td_out {
	struct td_out *next;
	size_t len, off;
	uint8_t *data;
	struct td_pending *pend; /* non-NULL while the reply waits for its save */
};

struct td_daemon;
struct td_agent;

/* Which turn queue a peer waits in (server.c). */
enum td_peer_queue_id { TD_QUEUE_NONE, TD_QUEUE_FRESH, TD_QUEUE_BUSY };

struct td_peer_queue {
	struct td_peer *head, *tail;
};

struct td_peer {
	struct td_daemon *d;
	struct td_peer *next, *prev;
	uv_poll_t poll;
	int fd;
	uint64_t id;
	bool said_hello;
	bool may_write;
	bool closing;
	bool want_write;
	uint32_t pid, uid, gid;
	uint64_t connected_ms, active_ms; /* util_mono_ms() at accept and at the last frame */
	struct tgp_reader rd;
	int pending_fd; /* from SCM_RIGHTS, until a RegisterAgent claims it */
	struct td_out *out_head, *out_tail;
	size_t out_bytes;
	bool watching;
	struct td_selector watch_sel;
	struct td_agent *agent; /* the agent this connection registered */
	bool recording;         /* a recording streams to it (record.c): never idle */
	/* Waiting for a turn (server.c): complete frames are buffered, and the
	 * socket is not read again until they are handled. */
	enum td_peer_queue_id queued;
	struct td_peer *queue_next;
	unsigned held;                 /* replies holding their place for a save */
	bool flush_queued;             /* on the daemon's flush list */
	struct td_peer *flush_next;
};

struct td_plan_entry {
	int64_t step;
	struct toggle_set set;
};

/*
 * One version of an agent's desired state: what a save in flight holds, or
 * what the last save that succeeded holds (durable, and published).
 */
struct td_agent_state {
	struct toggle_shm_control_view ctl;
	bool has_standing;
	uint64_t next_batch;
	size_t n_plans;
	struct td_plan_entry *plans; /* n_plans entries, malloc'd */
};

struct td_agent {
	struct td_agent *next, *prev;
	struct td_daemon *d;
	struct td_peer *peer;
	uint64_t id;
	char name[TGP_MAX_NAME], group[TGP_MAX_NAME];
	char type_names[TOGGLE_MAX_HOOK_TYPES][TGP_MAX_NAME];
	const char *type_ptrs[TOGGLE_MAX_HOOK_TYPES];
	struct toggle_catalog cat;
	uint32_t pid, uid, mode;
	int32_t driver_version;
	uint64_t connected_ms;
	struct toggle_shm shm;
	/*
	 * The accepted desired state: what writes are checked against and what
	 * queries show.  It reaches the control lane only once saved (commit.c);
	 * a failed save puts it back to `durable`.
	 */
	struct toggle_shm_control_view ctl;
	bool has_standing;            /* the daemon has set a standing set */
	uint64_t next_batch;
	struct td_plan_entry *plans;  /* submitted entries, for show and persistence */
	size_t n_plans;
	bool unsaved;                 /* accepted changes not yet in a save */
	bool saving;                  /* `saving` holds what the save in flight writes */
	bool publish_queued;          /* its lane waits for `durable` (commit.c) */
	bool touched;                 /* on commit.c's list: unsaved or saving */
	struct td_agent *touched_next;
	struct td_desired *desired;   /* its store entry, once found (entries never move) */
	struct td_agent *publish_next;
	struct td_agent_state saving_state, durable; /* durable: also what the lane shows */
	/* Last status read, for events and queries. */
	struct toggle_shm_status *st, *st_tmp; /* last good snapshot, scratch */
	bool st_valid;
	/* What watchers were last told, compared by the status poll only: a query
	 * refreshing st must not hide a change from them (issue 11 item 11). */
	uint64_t st_anomalies, ev_applied, ev_rejected;
	/* Its step rate, for an aligned change's margin (events.c): the step and
	 * time of the last sample, and steps per second since the one before
	 * (0: not measured, or it did not step). */
	int64_t rate_step;
	uint64_t rate_ms;
	uint64_t steps_per_s;
	bool rate_known;     /* a whole sample window has passed since it registered */
	struct td_ring *ring; /* its data ring (record.c), or NULL */
};

struct td_waiter {
	struct td_waiter *next;
	struct td_peer *peer;
	uint64_t request_id;
	uint64_t deadline_ms;
	size_t n;
	uint64_t *agent_ids, *versions;
	char (*names)[TGP_MAX_NAME]; /* to name agents that left */
	char **skipped;              /* default target: agents left out, for the reply */
	size_t n_skipped;
	/* An aligned set (rpc_control.c): answered once every agent took it
	 * (version seen), or ran it when until_applied (--wait); an agent that
	 * refused it as late fails the wait with TOGGLE_ELATE at once. */
	bool aligned, until_applied;
	int64_t aligned_step;
};

struct td_store;
struct td_cluster;

/*
 * Desired state of one agent name and uid, as persisted in
 * <state_dir>/agents/<key>.json (key: td_store_key)
 * (spec text per catalog).  The setters raise dirty (and the store's dirty)
 * when the value changes; td_store_save writes dirty entries only.
 */
struct td_desired {
	char name[TD_MAX_KEY]; /* the store key: the agent name, or name@uid */
	char *standing; /* NULL: none set */
	size_t n_plans;
	int64_t *plan_steps;
	char **plan_specs;
	bool dirty;             /* changed since its file was last written */
	bool unsure;            /* its file may not hold `saved` (a failed save renamed it) */
	bool in_journal;        /* a record of agents.journal holds it, maybe not yet its file */
	bool in_old;            /* a record of agents.journal.old holds it: the checkpoint's */
	bool in_base;           /* agents.checkpoint holds it (a checkpoint wrote it there) */
	struct td_store *owner; /* the store it belongs to (set by td_store_get/load) */
	/* What its file holds: the last save that succeeded, or the load. */
	char *saved_standing;
	size_t saved_n_plans;
	int64_t *saved_steps;
	char **saved_specs;
};

/* A latency histogram (hist.c; metrics.c renders it): counts per bucket, the last one +Inf. */
#define TD_HIST_BUCKETS 14
struct td_hist {
	uint64_t bucket[TD_HIST_BUCKETS + 1];
	uint64_t count, sum_ns;
};

struct td_store {
	struct td_desired *v;
	size_t n;
	bool dirty;
	bool quarantine;        /* load: set a corrupt file aside rather than fail */
	size_t cap;             /* entries at most; 0: TD_MAX_STORED_AGENTS (store.c) */
	/*
	 * Saves append one record to <dir>/agents.journal (one fdatasync per
	 * save, however many entries).  When it passes journal_max bytes (0:
	 * the default) the save that appends next renames it agents.journal.old
	 * and starts a new one; a checkpoint, off the save path, then writes the
	 * names the old journal holds (with those agents.checkpoint holds) into
	 * a new agents.checkpoint, one file, and removes the old journal; past
	 * base_max bytes, or at a clean stop, it writes their files instead and
	 * removes agents.checkpoint too (store.c).  Without the journal each
	 * save writes the entries' files.
	 */
	bool journal;
	bool jopen;             /* jfd is open */
	int jfd;
	uint64_t jsize;         /* the journal's valid length: where the next record goes */
	bool jtrim;             /* bytes may lie past jsize (a failed append, a torn tail): cut first */
	bool jdir_unsynced;     /* the state directory must be synced before a record counts */
	uint64_t jseq;          /* the sequence number of the next record */
	uint64_t journal_max;
	bool old_present;       /* agents.journal.old exists: a checkpoint is due or running */
	bool compact;           /* fold every journal into the files, then remove them (load) */
	bool live_aside, old_aside; /* compact: that journal is corrupt: set it aside, not removed */
	bool base_present;      /* agents.checkpoint exists (loaded after the files) */
	bool base_aside;        /* compact: agents.checkpoint is corrupt: set it aside */
	uint64_t base_max;      /* agents.checkpoint's bound in bytes (0: journal_max); past it a
				 * checkpoint writes the entries' files instead */
	uint64_t ckpt_files;    /* checkpoints that wrote the entries' files (the others: one file) */
	bool ckpt_running;      /* a checkpoint job is out (td_store_ckpt_begin..end) */
	bool ckpt_failed;       /* the last checkpoint failed: saves are refused until one works */
	char ckpt_reason[512];
	uint64_t saves, save_errors, quarantined, checkpoints, ckpt_failures;
	struct td_hist save_lat; /* each save job, begin to end (--metrics) */
	struct td_hist ckpt_lat; /* each checkpoint job, begin to end */
};

struct td_store_job;

/*
 * td_commit_notify, td_commit_wait: fn(arg, rc, reason) once the save that
 * holds everything accepted so far completes: rc 0 once it is durable (after
 * the control lanes are written), TOGGLE_EIO when it failed and was rolled
 * back (reason says why).
 */
typedef void td_commit_fn(void *arg, int rc, const char *reason);

/* One wait for a save, queued in commit.c; its memory is the waiter's (owned:
 * td_commit_notify's, freed by commit.c once fn returned). */
struct td_commit_wait {
	struct td_commit_wait *next;
	td_commit_fn *fn;
	void *arg;
	bool write;            /* a peer's write: counted in failed_writes when it fails */
	bool owned;
	uint64_t publish_mark; /* answered once publish_done reaches it */
};

/* Saves off the loop (commit.c): one in flight, the writes accepted meanwhile wait for the next. */
struct td_commit {
	uv_work_t work;
	uv_timer_t retry;
	struct td_store_job *job;     /* in flight, or NULL */
	uv_work_t ckpt_work;          /* a checkpoint, beside the saves (store.c) */
	struct td_store_job *ckpt;    /* in flight, or NULL */
	struct td_commit_wait *inflight;  /* replies that wait for the job in flight */
	struct td_commit_wait *queued, **queued_tail; /* replies that wait for the next one */
	/* A finished save is made visible a few agents and replies per turn
	 * (td_commit_step): agents whose lane waits for their durable state,
	 * oldest first, and replies that wait for the agents queued before them. */
	struct td_agent *publish_head, *publish_tail;
	/* Agents with accepted changes not yet durable (unsaved or saving): a
	 * save visits these, not every agent. */
	struct td_agent *touched;
	uint64_t publish_added, publish_done; /* agents that joined, and left, the queue */
	struct td_commit_wait *answers, **answers_tail;
	bool failing;                 /* the last save (or checkpoint) failed */
	bool stopping;
	char reason[256];             /* why the last save failed */
	uint64_t failures;            /* saves that failed (status: save_errors) */
	uint64_t failed_writes;       /* writes answered TOGGLE_EIO */
};

struct td_stats {
	uint64_t requests, errors, denied, dropped_peers, frames_refused;
	uint64_t refused_peers, timed_out_peers, accept_errors;
};

/* A warning that can repeat fast (a flood): logged once per TD_LOG_EVERY_MS. */
struct td_ratelog {
	uint64_t next_ms;    /* log again from then */
	uint64_t suppressed; /* occurrences since the last line */
};

struct td_daemon {
	uv_loop_t *loop;
	struct td_config cfg;
	int listen_fd;
	bool socket_owned; /* we created it, so we unlink it at exit */
	uv_poll_t listen_poll;
	bool listen_paused;  /* out of fds with no reserve: accepting resumes on listen_timer */
	uv_timer_t listen_timer;
	int reserve_fd;      /* spent to accept and refuse when accept() says EMFILE */
	uv_timer_t peer_timer; /* hello deadlines and idle timeouts */
	struct td_ratelog log_refused, log_accept;
	/* One turn of the loop's work (server.c): at most frames_per_turn
	 * frames, one per peer at a time: those of peers with nothing in flight
	 * (fresh) as soon as read, up to half of them; the rest in the check
	 * phase, taken in turn from the fresh queue and peers with frames left
	 * or replies waiting for a save (busy); then a slice of finished saves
	 * (commit.c); then replies are written. */
	uv_check_t turn_check;
	uv_idle_t turn_idle;           /* active while work is left: poll does not block */
	struct td_peer_queue fresh, busy;
	bool last_fresh;               /* the last frame came from `fresh` */
	struct td_peer *flush_head, *flush_tail; /* peers with replies ready to write, FIFO */
	unsigned busy_reads;           /* this turn's reads of peers with writes in flight */
	unsigned fresh_served;         /* fresh frames handled in this turn's poll phase */
	uv_timer_t status_timer;
	uv_signal_t sig_term, sig_int, sig_hup;
	struct td_peer *peers;
	size_t n_peers;
	struct td_agent *agents;
	size_t n_agents;
	struct td_agent **by_id;       /* the same agents by id, ascending (agents.c) */
	size_t by_id_cap;
	uint64_t poll_next_id;         /* the idle status poll goes on from this id (events.c) */
	uint64_t next_agent_id, next_peer_id;
	struct td_waiter *waiters;
	struct td_store store;
	struct td_commit commit;
	gid_t operator_gid;
	bool have_operator_gid;
	uint64_t start_ms;
	struct td_stats stats;
	struct td_metrics *metrics; /* NULL without --metrics */
	int rpc_code;               /* result of the request being dispatched */
	struct td_cluster *cluster; /* NULL: not in a cluster */
	struct td_report report;    /* what the upper layers registered (report.h) */
	/* What cluster.c reports of its watch, for the Status reply and
	 * /metrics (data written by cluster.c, read by the layers that show
	 * it; no call between them). */
	struct td_cluster_view {
		bool on;                /* in a cluster */
		bool connected;         /* the watch is up */
		char member[256];       /* the etcd member it reads from */
		uint64_t since_unix_ms; /* ... since then */
		uint64_t failovers;     /* moves to another member */
		uint64_t lost;          /* watches that ended */
		char last_error[256];   /* why the last one ended (cleaned) */
	} cluster_view;
	struct td_rec *rec;         /* recordings (record.c); NULL until the first */
};


/* server.c: the listener and the peers; registers its write queues as the
 * lower layers' way to a peer (report.h) when it starts listening. */
int td_server_listen(struct td_daemon *d, int activated_fd);
void td_server_close(struct td_daemon *d);
/* Apply changed limits and timeouts (after a configuration reload). */
void td_server_reconfigure(struct td_daemon *d);

/* dispatch.c */
/* At start-up: the waiters' answers after each full status poll (report.h). */
int td_dispatch_init(struct td_daemon *d);
void td_dispatch(struct td_peer *p, Toggle__Envelope *req);
/* The one place an Error frame is built: encoded into *buf (malloc'd); 0 or a TOGGLE_E*. */
int td_error_frame(uint64_t id, int code, const char *msg, const char *const *agents,
		   const uint64_t *ids, size_t n_agents, uint8_t **buf, size_t *len);
/* Queue an Error to p, naming the agents concerned (ids[i] is agents[i]'s; ids may be NULL). */
void td_dispatch_error(struct td_peer *p, uint64_t id, int code, const char *msg,
		       const char *const *agents, const uint64_t *ids, size_t n_agents);
/* The peer of a reply waiting for its save left (server.c, when it frees the queue). */
void td_pending_detach(struct td_pending *pd);

/* paths.c: directories that must be ours (owned by us or root, not writable by
 * others; ancestors may be sticky like /tmp, the leaf only if sticky_leaf_ok). */
int td_path_dir_trusted(const char *dir, bool sticky_leaf_ok, char *err, size_t errlen);
/* mkdir -p: parents 0755, the last one leaf_mode; existing ones are left as they are. */
int td_path_mkdirs(const char *dir, mode_t leaf_mode, char *err, size_t errlen);
/* A Unix socket path about to be bound (--metrics PATH): its directory trusted as the
 * RPC socket's is (td_path_dir_trusted, sticky leaf allowed); nothing there, or a
 * socket of our uid that nobody listens on, which is removed (*replaced).  Anything
 * else there is refused and left as it is. */
int td_path_socket_claim(const char *path, bool *replaced, char *err, size_t errlen);
/* metrics.c: --metrics ADDRESS (its own thread; see the file's head). */
#define TD_RPC_METHODS 12 /* request types with a label, and "other" */
#define TD_RPC_CODES   (2 - TOGGLE_ERROR_MIN) /* OK, the error codes, and "OTHER" */
int td_metrics_start(struct td_daemon *d, const char *address, char *err, size_t errlen);
void td_metrics_stop(struct td_daemon *d);
void td_metrics_rpc(struct td_daemon *d, const Toggle__Envelope *req, int code, uint64_t ns);
/* hist.c: the histograms' upper bounds (seconds; then +Inf), and CLOCK_MONOTONIC in ns. */
extern const double td_hist_le[TD_HIST_BUCKETS];
void td_hist_add(struct td_hist *h, uint64_t ns);
uint64_t td_mono_ns(void);

/* auth.c */
bool td_auth_may_write(const struct td_daemon *d, uint32_t uid, uint32_t gid, uint32_t pid);
void td_auth_reload(struct td_daemon *d);
/* May this peer register an agent in group?  NULL if so, else why not (in why). */
const char *td_auth_group_denied(const struct td_daemon *d, const char *group, uint32_t uid,
				 uint32_t gid, uint32_t pid, char *why, size_t len);

/* agents.c: the registry.  A join and a departure are reported (report.h):
 * the cluster, events.c and commit.c subscribe. */
int td_agent_register(struct td_peer *p, const Toggle__RegisterAgentRequest *m, uint64_t *id,
		      char *err, size_t errlen);
void td_agent_gone(struct td_agent *a);
bool td_selector_match(const struct td_selector *s, const struct td_agent *a);
int td_selector_parse(const Toggle__Selector *m, struct td_selector *out, char *err, size_t errlen);
/* The agent with this id, or NULL: a binary search, not a walk. */
struct td_agent *td_agent_find(struct td_daemon *d, uint64_t id);
/* Index in d->by_id of the first agent whose id is at least id (d->n_agents if none). */
size_t td_agent_index(const struct td_daemon *d, uint64_t id);
/* Agents a selector names; TOGGLE_ENOAGENT when none. *out freed by caller. */
int td_agents_select(struct td_daemon *d, const struct td_selector *s, struct td_agent ***out,
		     size_t *n);
void td_agent_refresh(struct td_agent *a);
/* Sample its step rate (td_agent.steps_per_s) from the last status read. */
void td_agent_rate_sample(struct td_agent *a, uint64_t now_ms);           /* read its status lane */
void td_agent_write_control(struct td_agent *a);     /* publish a->ctl */
/* Copy desired state to the store (td_commit_accept: and mark it for the next save). */
void td_agent_persist(struct td_agent *a);
/* Free a state copy's plans. */
void td_agent_state_free(struct td_agent_state *st);
/* Agent state: copy the accepted state into dst (plans allocated); TOGGLE_ENOMEM. */
int td_agent_state_copy(struct td_agent_state *dst, const struct td_agent *a);

/* events.c */
/* At start-up: the status timer, and events for agents that join and leave. */
int td_events_init(struct td_daemon *d);
/* Status lanes -> events; then reported (TD_AGENTS_POLLED: the waiters are answered). */
void td_agents_poll(struct td_daemon *d);
/* An event to every peer watching a selector that matches a. */
void td_event(struct td_daemon *d, const struct td_agent *a, Toggle__EventKind kind,
	      uint64_t version, int64_t step, const char *msg);
void td_timer_update(struct td_daemon *d);           /* the status timer's period */
void td_waiter_free(struct td_waiter *w);

/* commit.c: saves on the thread pool, group commit, replies after durability. */
/* At start-up (subscribes to agents that leave); 0 or TOGGLE_ELIMIT. */
int td_commit_init(struct td_daemon *d);
/* Check phase: start a save when writes wait and none is in flight. */
void td_commit_kick(struct td_daemon *d);
/* Check phase: a bounded share of a finished save's lanes and replies; true if more wait. */
bool td_commit_step(struct td_daemon *d);
/* The agent's accepted state changed: the next save holds it. */
void td_commit_touch(struct td_agent *a);
/* A write applied to the agent's accepted state: copied to the store (td_agent_persist)
 * and marked for the next save. */
void td_commit_accept(struct td_agent *a);
/*
 * w (fn and arg set; its memory the caller's until fn is called) waits for
 * the save that holds everything accepted so far: queued like every other
 * wait, in order (a save starts at the next td_commit_kick; at shutdown
 * td_commit_drain completes it).  A write's reply waits this way
 * (dispatch.c).
 */
void td_commit_wait(struct td_daemon *d, struct td_commit_wait *w);
/* The same for code that is not a peer's write (the cluster): 0 or TOGGLE_ENOMEM
 * (fn never called). */
int td_commit_notify(struct td_daemon *d, td_commit_fn *fn, void *arg);
/* Shutdown: wait for the save in flight, save the rest, answer every write. */
void td_commit_drain(struct td_daemon *d);

/* ctl.c: the validate-then-apply core of SetEnabled, SubmitPlan and ClearPlan,
 * shared by the RPC handlers and the cluster layer. */
/* An error from td_ctl_*: code, message, the agent it names ("" for none)
 * and that agent's id (Error.agent_ids). */
struct td_ctl_err {
	int code;
	char msg[400];
	char agent[TGP_MAX_NAME];
	uint64_t agent_id;
};
/*
 * All targets or none, applied to the accepted state and marked for the
 * next save; the control lanes are written by commit.c once that save
 * succeeded.  Default-target filtering (rpc_default_filter) stays with the
 * handlers.  td_ctl_plan with no targets checks the entries only.  0, or a
 * TOGGLE_E* code with *e filled.
 */
int td_ctl_set(struct td_agent **v, size_t n, const char *spec, Toggle__SetOp op,
	       struct td_ctl_err *e);
/* An aligned set: the step every target switches at (td_ctl_align). */
int td_ctl_set_aligned(struct td_agent **v, size_t n, const char *spec, Toggle__SetOp op,
		       int64_t step, struct td_ctl_err *e);
/* The step of an aligned set that no target has begun, checked against every
 * target (margin_req 0: from their step rates); the margin used in *margin_out. */
int td_ctl_align(struct td_agent **v, size_t n, uint32_t margin_req, int64_t *out,
		 uint32_t *margin_out, struct td_ctl_err *e);
int td_ctl_plan(struct td_agent **v, size_t n, const Toggle__SubmitPlanRequest *m,
		struct td_ctl_err *e);
/* Every pending plan entry of the targets cleared. */
void td_ctl_clear(struct td_agent **v, size_t n);

/* view.c: agents and the daemon as reply messages, for the query handlers and
 * the cluster's published status.  AgentInfo.enabled is malloc'd: free it. */
void td_view_agent(Toggle__AgentInfo *m, struct td_agent *a); /* refreshes a->st */
void td_view_graph(Toggle__GraphInfo *m, const struct td_agent *a, const struct toggle_shm_graph *r);
void td_view_status(Toggle__StatusReply *rep, const struct td_daemon *d);
/* A set of an agent as spec text, malloc'd (NULL on ENOMEM). */
char *td_view_spec(const struct td_agent *a, const uint64_t *words);

/* Free a state copy's plans. */
void td_agent_state_free(struct td_agent_state *st);
/* Agent state: copy the accepted state into dst (plans allocated); TOGGLE_ENOMEM. */
int td_agent_state_copy(struct td_agent_state *dst, const struct td_agent *a);
/* record.c: data rings and recordings (docs/recording.md).  An agent or a
 * peer leaves: its recording ends (hooks restored); the daemon stops: every
 * recording ends, then (after the loop's last run) its memory is freed. */
/* Subscribes to agent changes (report.h): 0, or TOGGLE_ELIMIT. */
/* record_owed.c: what a running recording added to an agent's standing set,
 * noted synced under <state_dir>/recording/ before it is added, so that it is
 * removed even when the recording cannot end (toggled killed, the agent left):
 * td_owed_settle at the agent's next join.  note: 0 or TOGGLE_E* (err says
 * why); paid: the note goes once the saves accepted so far are durable;
 * forget: at once (session 0: whatever note). */
int td_owed_note(struct td_daemon *d, const struct td_agent *a, uint64_t session,
		 const char *spec, char *err, size_t errlen);
void td_owed_paid(struct td_daemon *d, const struct td_agent *a, uint64_t session);
void td_owed_forget(struct td_daemon *d, const struct td_agent *a, uint64_t session);
void td_owed_settle(struct td_agent *a);
/* A note's bytes (n of text, no NUL needed): 1 with *session (never 0) and spec
 * (printable, NUL-terminated, under spec_len), -1 when they are not a note. */
int td_owed_parse(const char *text, size_t n, uint64_t *session, char *spec, size_t spec_len);
int td_record_init(struct td_daemon *d);
void td_record_peer_gone(struct td_peer *p);
void td_record_stop(struct td_daemon *d);
void td_record_free(struct td_daemon *d);
/*
 * An agent's data ring as toggled shows it (AgentInfo.ring_*, /metrics):
 * its size; the agent's own counters, folded so that they never go back
 * and never pass 2^53 whatever the agent writes (counter_faults: the
 * observations that refused a value); and toggled's own count of the
 * records and payload bytes it forwarded from the ring.  All zero without
 * a ring.  Observing folds, hence not const.
 */
struct td_ring_counters {
	uint64_t capacity;
	uint64_t records, dropped, errors, counter_faults;
	uint64_t forwarded_records, forwarded_bytes;
};
void td_record_ring_counters(struct td_agent *a, struct td_ring_counters *out);
/* AgentInfo's ring fields, from td_record_ring_counters. */
void td_record_fill_agent(Toggle__AgentInfo *m, struct td_agent *a);
/* cluster.c: watch etcd, apply, publish (no-op without cfg.etcd). */
int td_cluster_start(struct td_daemon *d, char *err, size_t errlen);
void td_cluster_stop(struct td_daemon *d);

/* store.c: one file per agent name under <dir>/agents/, and the journal. */
#include "store.h"

#endif
