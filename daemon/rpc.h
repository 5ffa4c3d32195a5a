/*
 * rpc.h - request handlers and the reply they fill.  A handler checks one
 * request and fills a struct rpc_reply (a body, an error, or "deferred");
 * it never encodes or sends: the dispatcher (dispatch.c) does, once the
 * handler returned, as chrony's handlers fill a reply that only its
 * dispatcher writes.  rpc_query.c: read-only requests; rpc_control.c:
 * registration and the requests that change the desired state (their core
 * is ctl.c's, below); rpc_target.c: the targets and the default target of
 * those; rpc_reply.c: filling a reply.
 */
#ifndef TD_RPC_H
#define TD_RPC_H

#include "toggled.h"

/* Agents a default-target command left out (their catalog refused it). */
struct rpc_skipped {
	char **v; /* "name (id N, uid U): reason" */
	size_t n;
};

enum rpc_outcome {
	RPC_BODY,     /* body, and its message in u */
	RPC_ERROR,    /* an Error: code, text and the agents it concerns */
	RPC_DEFERRED, /* a write whose answer comes after its save: from waiter, or
		       * from nobody when waiter is NULL (the peer is dropped) */
};

struct rpc_mem; /* what a body points to, freed once it is encoded */

struct rpc_reply {
	enum rpc_outcome outcome;
	bool after_save; /* a write's body: it leaves once the write is durable (commit.c) */
	Toggle__Envelope__BodyCase body;
	union {
		Toggle__HelloReply hello;
		Toggle__RegisterAgentReply registered;
		Toggle__ListAgentsReply agents;
		Toggle__ListGraphsReply graphs;
		Toggle__StatusReply status;
		Toggle__HooksReply hooks;
		Toggle__ShowPlanReply plan;
		Toggle__SetEnabledReply set;
		Toggle__Ack ack;
	} u;
	int code;
	char text[400];
	const char *const *agents; /* n_agents names and their ids (ids may be NULL) */
	const uint64_t *agent_ids;
	size_t n_agents;
	char agent[TGP_MAX_NAME];  /* storage for the one agent rpc_fail_ctl names */
	const char *agent_ptr;
	uint64_t agent_id;
	struct td_waiter *waiter;  /* RPC_DEFERRED: armed once the write is saved */
	struct rpc_skipped skipped; /* rpc_default_filter: named in the write's reply */
	const char *drop;          /* drop the peer once the reply is queued: why */
	struct rpc_mem *mem;
};

typedef void td_handler_fn(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r);

td_handler_fn rpc_register_agent, rpc_list_agents, rpc_list_graphs, rpc_status, rpc_hooks,
	rpc_show_plan, rpc_watch, rpc_set_enabled, rpc_submit_plan, rpc_clear_plan,
	rpc_register_ring, rpc_record; /* record.c */

/* rpc_reply.c: filling a reply. */
void rpc_reply_init(struct rpc_reply *r);
void rpc_reply_free(struct rpc_reply *r);
/* Answer with a body: u's member for it, which the caller initialises and fills. */
void *rpc_body(struct rpc_reply *r, Toggle__Envelope__BodyCase body);
/* Answer with an Error; returns code. */
int rpc_fail(struct rpc_reply *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* n zeroed elements (at least one) freed with the reply; NULL when out of memory. */
void *rpc_alloc(struct rpc_reply *r, size_t n, size_t size);
/* s (malloc'd, or NULL) is freed with the reply; NULL when out of memory (s freed). */
char *rpc_adopt(struct rpc_reply *r, char *s);
void rpc_skipped_free(struct rpc_skipped *sk);
/* Answer with *e as an Error (naming its agent, if any); returns its code. */
int rpc_fail_ctl(struct rpc_reply *r, const struct td_ctl_err *e);
/*
 * dispatch.c: encode and queue r to p as the reply to request id, then free
 * it: the one place a reply is sent, for the dispatcher and for the replies
 * that were deferred (a waiter's).
 */
void td_dispatch_reply(struct td_peer *p, uint64_t id, struct rpc_reply *r);

/* rpc_target.c: parse the request's selector and select agents; on error fills r
 * and returns it. */
int rpc_targets(struct td_peer *p, struct rpc_reply *r, const Toggle__Selector *sel,
		struct td_agent ***agents, size_t *n);
/*
 * Default target only (no selector, or all): drop from v the agents whose
 * catalog refuses one of specs, naming them in r->skipped (rpc_target.c).
 * When no agent would be left, v is kept whole so that the command fails
 * naming the first.  0, or an error filled in r.
 */
int rpc_default_filter(struct td_peer *p, struct rpc_reply *r, const Toggle__Selector *sel,
		       struct td_agent **v, size_t *n, const char *const *specs, size_t n_specs);
/*
 * Fill r with a SetEnabledReply of n versions that names the skipped agents
 * (not copied: they outlive the reply); the caller fills each version's
 * agent_id and version.  NULL when out of memory.  Also for the waiters'
 * replies (rpc_wait_answer).
 */
Toggle__AgentVersion **rpc_set_reply(struct rpc_reply *r, size_t n, char **skipped,
				     size_t n_skipped);
/*
 * Fill r with a waiter's answer (set --wait, an aligned set): the versions
 * when all applied, an error when an agent left or refused it, or the
 * deadline passed; late/late_ids (max) hold the agents it names.  false:
 * not yet.  The dispatcher sends it after each full status poll.
 */
bool rpc_wait_answer(struct td_daemon *d, const struct td_waiter *w, uint64_t now,
		     struct rpc_reply *r, const char **late, uint64_t *late_ids, size_t max);

#endif
