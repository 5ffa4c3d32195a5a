/*
 * toggled.h - the daemon's shared types: configuration, peers (connections),
 * agents, the desired-state store, waiters, and the functions each module
 * offers the others.  Modules: main.c (start-up, signals), server.c
 * (listener, peers, framing, write queues), dispatch.c (validation order,
 * permission, routing), rpc_query.c and rpc_control.c (handlers), agents.c
 * (registry, shared memory, status polling, events), store.c (persistence),
 * auth.c (SO_PEERCRED and the operator group), metrics.c (Prometheus
 * /metrics on its own thread).
 */
#ifndef TOGGLED_H
#define TOGGLED_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>
#include <uv.h>

#include "frame.h"
#include "toggle.h"
#include "toggle_shm.h"

#define TD_VERSION          "0.1.0"
#define TD_MAX_QUEUE        (8u << 20)  /* bytes queued to one peer before it is dropped */
#define TD_MAX_PEERS        1024
#define TD_POLL_IDLE_MS     10          /* status-lane polling for events */
#define TD_POLL_WAIT_MS     1           /* while a SetEnabled waits */
#define TD_MAX_PENDING_PLAN 256         /* remembered plan entries per agent name */

struct td_config {
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char state_dir[PATH_MAX];
	char config_path[PATH_MAX];
	char operator_group[64];
	unsigned socket_mode;
	int verbose;
	size_t max_queue;
	/* Given on the command line: they win over the file, also after SIGHUP. */
	char cli_group[64];
	bool cli_verbose;
};

struct td_selector {
	enum { SEL_ALL, SEL_AGENT, SEL_PID, SEL_GROUP } kind;
	uint64_t agent_id;
	uint32_t pid;
	char group[TGP_MAX_NAME];
};

struct td_out {
	struct td_out *next;
	size_t len, off;
	uint8_t *data;
};

struct td_daemon;
struct td_agent;

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
	struct tgp_reader rd;
	int pending_fd; /* from SCM_RIGHTS, until a RegisterAgent claims it */
	struct td_out *out_head, *out_tail;
	size_t out_bytes;
	bool watching;
	struct td_selector watch_sel;
	struct td_agent *agent; /* the agent this connection registered */
};

struct td_plan_entry {
	int64_t step;
	struct toggle_set set;
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
	/* What the daemon last wrote to the control lane. */
	struct toggle_shm_control_view ctl;
	bool has_standing;            /* the daemon has set a standing set */
	uint64_t next_batch;
	struct td_plan_entry *plans;  /* submitted entries, for show and persistence */
	size_t n_plans;
	/* Last status read, for events and queries. */
	struct toggle_shm_status *st, *st_tmp; /* last good snapshot, scratch */
	bool st_valid;
	uint64_t st_anomalies;
};

struct td_waiter {
	struct td_waiter *next;
	struct td_peer *peer;
	uint64_t request_id;
	uint64_t deadline_ms;
	size_t n;
	uint64_t *agent_ids, *versions;
	char (*names)[TGP_MAX_NAME]; /* to name agents that left */
};

struct td_store;

/*
 * Desired state of one agent name, as persisted in <state_dir>/agents/<name>.json
 * (spec text per catalog).  The setters raise dirty (and the store's dirty)
 * when the value changes; td_store_save writes dirty entries only.
 */
struct td_desired {
	char name[TGP_MAX_NAME];
	char *standing; /* NULL: none set */
	size_t n_plans;
	int64_t *plan_steps;
	char **plan_specs;
	bool dirty;             /* changed since its file was last written */
	struct td_store *owner; /* the store it belongs to (set by td_store_get/load) */
};

/* A latency histogram (metrics.c): counts per bucket, the last one +Inf. */
#define TD_HIST_BUCKETS 14
struct td_hist {
	uint64_t bucket[TD_HIST_BUCKETS + 1];
	uint64_t count, sum_ns;
};

struct td_store {
	struct td_desired *v;
	size_t n;
	bool dirty;
	uint64_t saves, save_errors;
	struct td_hist save_lat;
};

struct td_stats {
	uint64_t requests, errors, denied, dropped_peers, frames_refused;
};

struct td_daemon {
	uv_loop_t *loop;
	struct td_config cfg;
	int listen_fd;
	bool socket_owned; /* we created it, so we unlink it at exit */
	uv_poll_t listen_poll;
	uv_check_t flush_check;
	uv_timer_t status_timer;
	uv_signal_t sig_term, sig_int, sig_hup;
	struct td_peer *peers;
	size_t n_peers;
	struct td_agent *agents;
	size_t n_agents;
	uint64_t next_agent_id, next_peer_id;
	struct td_waiter *waiters;
	struct td_store store;
	gid_t operator_gid;
	bool have_operator_gid;
	uint64_t start_ms;
	struct td_stats stats;
	struct td_metrics *metrics; /* NULL without --metrics */
	int rpc_code;               /* result of the request being dispatched */
};

uint64_t td_now_ms(void);

/* server.c */
int td_server_listen(struct td_daemon *d, int activated_fd);
void td_server_close(struct td_daemon *d);
/* Queue an envelope to a peer (written in the loop's check phase). */
void td_peer_send(struct td_peer *p, const Toggle__Envelope *env);
void td_peer_send_error(struct td_peer *p, uint64_t id, int code, const char *msg,
			const char *const *agents, size_t n_agents);
/* The same, naming the agents concerned by id too (ids[i] is agents[i]'s). */
void td_peer_send_error_ids(struct td_peer *p, uint64_t id, int code, const char *msg,
			    const char *const *agents, const uint64_t *ids, size_t n_agents);
void td_peer_drop(struct td_peer *p, const char *why);

/* dispatch.c */
void td_dispatch(struct td_peer *p, Toggle__Envelope *req);

/* metrics.c: --metrics ADDRESS (its own thread; see the file's head). */
#define TD_RPC_METHODS 12 /* request types with a label, and "other" */
#define TD_RPC_CODES   27 /* OK, the 25 error codes, and "OTHER" */
int td_metrics_start(struct td_daemon *d, const char *address, char *err, size_t errlen);
void td_metrics_stop(struct td_daemon *d);
void td_metrics_rpc(struct td_daemon *d, const Toggle__Envelope *req, int code, uint64_t ns);
void td_hist_add(struct td_hist *h, uint64_t ns);
uint64_t td_mono_ns(void);

/* auth.c */
bool td_auth_may_write(const struct td_daemon *d, uint32_t uid, uint32_t gid, uint32_t pid);
void td_auth_reload(struct td_daemon *d);

/* agents.c */
int td_agent_register(struct td_peer *p, const Toggle__RegisterAgentRequest *m, uint64_t *id,
		      char *err, size_t errlen);
void td_agent_gone(struct td_agent *a);
bool td_selector_match(const struct td_selector *s, const struct td_agent *a);
int td_selector_parse(const Toggle__Selector *m, struct td_selector *out, char *err, size_t errlen);
/* Agents a selector names; TOGGLE_ENOAGENT when none. *out freed by caller. */
int td_agents_select(struct td_daemon *d, const struct td_selector *s, struct td_agent ***out,
		     size_t *n);
void td_agent_refresh(struct td_agent *a);           /* read its status lane */
void td_agent_write_control(struct td_agent *a);     /* publish a->ctl */
void td_agent_persist(struct td_agent *a);           /* copy desired state to the store */
void td_agents_poll(struct td_daemon *d);            /* status lanes -> events, waiters */
void td_event(struct td_daemon *d, const struct td_agent *a, Toggle__EventKind kind,
	      uint64_t version, int64_t step, const char *msg);
void td_timer_update(struct td_daemon *d);
void td_waiter_free(struct td_waiter *w);

/* store.c: one file per agent name under <dir>/agents/. */
int td_store_load(struct td_store *s, const char *dir, char *err, size_t errlen);
/* Writes the dirty entries only (an empty one's file is removed); TOGGLE_EIO with errno. */
int td_store_save(struct td_store *s, const char *dir);
void td_store_free(struct td_store *s);
struct td_desired *td_store_get(struct td_store *s, const char *name, bool create);
int td_desired_set_standing(struct td_desired *dd, const char *spec);
int td_desired_set_plans(struct td_desired *dd, const int64_t *steps, char *const *specs, size_t n);

#endif
