/*
 * report.h - the one way up out of the daemon's lower layers (issue 29;
 * docs/architecture.md, "The daemon's layers").  The state (agents.c,
 * events.c, commit.c, ctl.c, view.c, store.c) and the dispatcher never call
 * a layer above them by name: they report here what happened, and what is
 * to be done about it was registered from above at start-up.
 *
 *  - A peer's output (struct td_report_io): a frame for a peer, a place held
 *    in its queue for a reply that waits for a save, that place filled, a
 *    peer to drop.  server.c registers its write queues (td_server_listen).
 *    Until something is registered (a unit test of the state alone) a frame
 *    is freed, no place is held and nobody is dropped.
 *  - Agent changes (td_report_subscribe): an agent joined, an agent is
 *    leaving, the status lanes of every agent were just read.  A module
 *    subscribes once, at start-up, with a function and its argument (the
 *    cluster, events.c, commit.c, the dispatcher's waiters; a recorder
 *    would do the same).  Subscribers that change an agent's desired state
 *    (TD_SUB_APPLY: the cluster's set for a new agent) are called before
 *    those that only tell others about it (TD_SUB_OBSERVE: watchers' events),
 *    so that an event carries the state the appliers gave the agent; within
 *    a role, in the order they subscribed.
 *
 * Both are plain synchronous calls through function pointers: a report runs
 * its subscribers before it returns, exactly where the lower layer made it.
 */
#ifndef TD_REPORT_H
#define TD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

struct td_daemon;
struct td_peer;
struct td_agent;
struct td_out;
struct td_pending;

/* What a peer's output is done with (server.c's write queues). */
struct td_report_io {
	/* Queue an encoded frame (taken) behind the peer's other replies. */
	void (*frame)(struct td_peer *p, uint8_t *buf, size_t len);
	/* Hold a place for a reply that waits; NULL when the peer was dropped instead. */
	struct td_out *(*hold)(struct td_peer *p, struct td_pending *pend);
	/* Put the reply (taken; NULL: none) in its place: what is behind it may leave. */
	void (*fill)(struct td_peer *p, struct td_out *slot, uint8_t *data, size_t len);
	/* Close the peer (why: logged; NULL: quietly). */
	void (*drop)(struct td_peer *p, const char *why);
};

enum td_change_kind {
	TD_AGENT_JOINED, /* registered, its lanes read and its saved state restored */
	TD_AGENT_LEFT,   /* leaving: still in the registry, gone once the report returns */
	TD_AGENTS_POLLED /* every agent's status counters were just read (agent: NULL) */
};

struct td_change {
	enum td_change_kind kind;
	struct td_daemon *d;
	struct td_agent *a;
};

typedef void td_change_fn(void *arg, const struct td_change *c);

enum td_sub_role { TD_SUB_APPLY, TD_SUB_OBSERVE };

#define TD_MAX_SUBSCRIBERS 8

/* Kept in struct td_daemon (toggled.h). */
struct td_report {
	const struct td_report_io *io;
	size_t n_subs;
	struct {
		td_change_fn *fn;
		void *arg;
		enum td_sub_role role;
	} subs[TD_MAX_SUBSCRIBERS];
};

/* From above, at start-up. */
void td_report_io(struct td_daemon *d, const struct td_report_io *io);
/* 0, or TOGGLE_ELIMIT when TD_MAX_SUBSCRIBERS are taken. */
int td_report_subscribe(struct td_daemon *d, enum td_sub_role role, td_change_fn *fn, void *arg);

/* From below. */
void td_report_change(struct td_daemon *d, enum td_change_kind kind, struct td_agent *a);
/* Encode env and queue it to p (nothing if p is closing). */
void td_report_send(struct td_peer *p, const Toggle__Envelope *env);
void td_report_frame(struct td_peer *p, uint8_t *buf, size_t len);
struct td_out *td_report_hold(struct td_peer *p, struct td_pending *pend);
void td_report_fill(struct td_peer *p, struct td_out *slot, uint8_t *data, size_t len);
void td_report_drop(struct td_peer *p, const char *why);

#endif
