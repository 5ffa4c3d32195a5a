/*
 * dispatch.c - every request goes through here, validated in a fixed order:
 * size and decoding (the frame reader, before this), version (hello first),
 * type (known request for this table), permission (mutating requests need
 * SO_PEERCRED rights), then arguments (the handler).  Each step and each
 * handler fills one struct rpc_reply; only td_dispatch_reply, here, encodes
 * and queues it (to the peer now, or behind the write's save, commit.c).
 * The waiters of `set --wait` are answered here too, after each full status
 * poll (events.c reports it).  Below the server: the peer's queue is reached
 * through what the server registered (report.h), never by name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "rpc.h"
#include "toggled.h"

struct td_rpc {
	Toggle__Envelope__BodyCase body;
	const char *name;
	bool mutating;
	td_handler_fn *handler;
};

static const struct td_rpc rpc_table[] = {
	{TOGGLE__ENVELOPE__BODY_REGISTER_AGENT, "register_agent", false, rpc_register_agent},
	{TOGGLE__ENVELOPE__BODY_LIST_AGENTS, "list_agents", false, rpc_list_agents},
	{TOGGLE__ENVELOPE__BODY_LIST_GRAPHS, "list_graphs", false, rpc_list_graphs},
	{TOGGLE__ENVELOPE__BODY_STATUS, "status", false, rpc_status},
	{TOGGLE__ENVELOPE__BODY_HOOKS, "hooks", false, rpc_hooks},
	{TOGGLE__ENVELOPE__BODY_SHOW_PLAN, "show_plan", false, rpc_show_plan},
	{TOGGLE__ENVELOPE__BODY_WATCH, "watch", false, rpc_watch},
	{TOGGLE__ENVELOPE__BODY_SET_ENABLED, "set_enabled", true, rpc_set_enabled},
	{TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, "submit_plan", true, rpc_submit_plan},
	{TOGGLE__ENVELOPE__BODY_CLEAR_PLAN, "clear_plan", true, rpc_clear_plan},
	{TOGGLE__ENVELOPE__BODY_REGISTER_RING, "register_ring", false, rpc_register_ring},
	/* Mutating: it adds hooks to the standing set, so only writers record. */
	{TOGGLE__ENVELOPE__BODY_RECORD, "record", true, rpc_record},
};

/*
 * A reply that waits for its save (commit.c): its place in the peer's queue
 * is held (server.c, through report.h) and filled once the save completed,
 * with the reply, or nothing while a waiter takes over, or TOGGLE_EIO.
 */
struct td_pending {
	struct td_commit_wait wait;
	struct td_peer *peer;     /* NULL once the peer left */
	struct td_out *slot;      /* its place in the peer's queue */
	uint64_t request_id;
	uint8_t *reply;           /* the encoded reply, or NULL when a waiter answers */
	size_t len;
	struct td_waiter *waiter; /* armed when the save succeeds */
};

int td_error_frame(uint64_t id, int code, const char *msg, const char *const *agents,
		   const uint64_t *ids, size_t n_agents, uint8_t **buf, size_t *len)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__Error err = TOGGLE__ERROR__INIT;
	env.id = id;
	env.body_case = TOGGLE__ENVELOPE__BODY_ERROR;
	env.error = &err;
	err.code = code;
	err.message = (char *)(uintptr_t)msg;
	err.n_agents = n_agents;
	err.agents = (char **)(uintptr_t)agents;
	err.n_agent_ids = ids ? n_agents : 0;
	err.agent_ids = (uint64_t *)(uintptr_t)ids;
	return tgp_frame_encode(&env, buf, len);
}

void td_dispatch_error(struct td_peer *p, uint64_t id, int code, const char *msg,
		       const char *const *agents, const uint64_t *ids, size_t n_agents)
{
	p->d->stats.errors++;
	p->d->rpc_code = code; /* for --metrics */
	if (p->closing)
		return;
	uint8_t *buf;
	size_t len;
	int rc = td_error_frame(id, code, msg, agents, ids, n_agents, &buf, &len);
	if (rc) {
		log_warnx("cannot encode an error for peer %llu: %s", (unsigned long long)p->id,
			  toggle_strerror(rc));
		return;
	}
	td_report_frame(p, buf, len);
}

static void pending_free(struct td_pending *pd)
{
	free(pd->reply);
	if (pd->waiter)
		td_waiter_free(pd->waiter);
	free(pd);
}

void td_pending_detach(struct td_pending *pd)
{
	pd->peer = NULL;
	pd->slot = NULL;
}

/* The save holding the write completed (commit.c): its place is filled. */
static void pending_done(void *arg, int rc, const char *reason)
{
	struct td_pending *pd = arg;
	struct td_peer *p = pd->peer;
	if (!p) {
		pending_free(pd);
		return;
	}
	if (rc != 0) {
		uint8_t *buf = NULL;
		size_t len = 0;
		p->d->stats.errors++;
		if (td_error_frame(pd->request_id, TOGGLE_EIO, reason, NULL, NULL, 0, &buf, &len) != 0)
			buf = NULL, len = 0; /* the slot is released: the peer times out */
		td_report_fill(p, pd->slot, buf, len);
	} else if (pd->waiter) {
		struct td_waiter *w = pd->waiter;
		pd->waiter = NULL;
		w->next = p->d->waiters;
		p->d->waiters = w;
		td_report_fill(p, pd->slot, NULL, 0);
	} else {
		td_report_fill(p, pd->slot, pd->reply, pd->len);
		pd->reply = NULL;
	}
	pending_free(pd);
}

/*
 * A write was accepted (its agents' state changed, td_commit_accept done):
 * reply (an encoded frame, taken) leaves after the save that holds it, or
 * waiter is armed then; on a failed save the peer gets TOGGLE_EIO instead.
 */
static void reply_wait_save(struct td_peer *p, uint64_t request_id, uint8_t *reply, size_t len,
			    struct td_waiter *waiter)
{
	struct td_pending *pd = calloc(1, sizeof(*pd));
	if (!pd || p->closing) {
		/* The state is accepted all the same: the next save holds it. */
		free(pd);
		free(reply);
		if (waiter)
			td_waiter_free(waiter);
		if (!p->closing)
			td_report_drop(p, "out of memory");
		return;
	}
	pd->peer = p;
	pd->request_id = request_id;
	pd->reply = reply;
	pd->len = len;
	pd->waiter = waiter;
	pd->wait.fn = pending_done;
	pd->wait.arg = pd;
	pd->wait.write = true;
	td_commit_wait(p->d, &pd->wait);
	pd->slot = td_report_hold(p, pd);
	if (!pd->slot)
		pd->peer = NULL; /* dropped (queue bound, memory): answered to nobody */
}

/* A write's body, encoded now, leaves once the write is durable (commit.c). */
static void reply_after_save(struct td_peer *p, uint64_t id, const Toggle__Envelope *env)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc = tgp_frame_encode(env, &buf, &len);
	if (rc) {
		log_warnx("cannot encode a reply for peer %llu: %s", (unsigned long long)p->id,
			  toggle_strerror(rc));
		buf = NULL;
		len = 0;
	}
	reply_wait_save(p, id, buf, len, NULL);
}

void td_dispatch_reply(struct td_peer *p, uint64_t id, struct rpc_reply *r)
{
	switch (r->outcome) {
	case RPC_ERROR:
		td_dispatch_error(p, id, r->code, r->text, r->agents, r->agent_ids, r->n_agents);
		break;
	case RPC_DEFERRED:
		reply_wait_save(p, id, NULL, 0, r->waiter); /* takes the waiter */
		r->waiter = NULL;
		break;
	case RPC_BODY: {
		Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
		env.id = id;
		env.body_case = r->body;
		env.hello = (void *)&r->u; /* every body member is a pointer in one union */
		if (r->after_save)
			reply_after_save(p, id, &env);
		else
			td_report_send(p, &env);
		break;
	}
	}
	if (r->drop)
		td_report_drop(p, r->drop);
	rpc_reply_free(r);
}

/* Answer a waiter through the dispatcher if its time came; true when answered. */
static bool waiter_try(struct td_daemon *d, struct td_waiter *w, uint64_t now)
{
	const char *late[64];
	uint64_t late_ids[64];
	struct rpc_reply r;
	rpc_reply_init(&r);
	if (!rpc_wait_answer(d, w, now, &r, late, late_ids, 64)) {
		rpc_reply_free(&r);
		return false;
	}
	td_dispatch_reply(w->peer, w->request_id, &r);
	return true;
}

/* After each full status poll (report.h): the waiters whose time came. */
static void dispatch_on_change(void *arg, const struct td_change *ch)
{
	(void)arg;
	if (ch->kind != TD_AGENTS_POLLED)
		return;
	struct td_daemon *d = ch->d;
	uint64_t now = util_mono_ms();
	for (struct td_waiter **w = &d->waiters; *w;) {
		if (waiter_try(d, *w, now)) {
			struct td_waiter *done = *w;
			*w = done->next;
			td_waiter_free(done);
		} else {
			w = &(*w)->next;
		}
	}
}

int td_dispatch_init(struct td_daemon *d)
{
	return td_report_subscribe(d, TD_SUB_OBSERVE, dispatch_on_change, NULL);
}

static void dispatch_hello(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	const Toggle__HelloRequest *h = req->hello;
	/* The client speaks [min, max]; 0 as min means max only (protocol 1 clients). */
	uint32_t max = h->protocol_version;
	uint32_t min = h->min_protocol_version ? h->min_protocol_version : max;
	if (min > TGP_PROTOCOL_VERSION || max < TGP_PROTOCOL_VERSION) {
		char msg[160];
		snprintf(msg, sizeof(msg),
			 "protocol versions %u to %u are not spoken here; toggled %s speaks %d", min,
			 max, TD_VERSION, TGP_PROTOCOL_VERSION);
		log_warnx("peer %llu (pid %u): %s", (unsigned long long)p->id, p->pid, msg);
		rpc_fail(r, TOGGLE_EVERSION, "%s", msg);
		return;
	}
	p->said_hello = true;
	Toggle__HelloReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_HELLO_REPLY);
	toggle__hello_reply__init(rep);
	rep->protocol_version = TGP_PROTOCOL_VERSION;
	rep->daemon_version = (char *)TD_VERSION;
	rep->may_write = p->may_write;
}

/* The request's type is not one this table serves: answered, the connection kept. */
static void dispatch_unknown(const Toggle__Envelope *req, struct rpc_reply *r)
{
	/* A body this daemon's schema lacks decodes as an unknown field: a
	 * newer client's request. */
	bool unknown = req->body_case == TOGGLE__ENVELOPE__BODY__NOT_SET &&
		       req->base.n_unknown_fields > 0;
	char msg[96];
	if (unknown)
		snprintf(msg, sizeof(msg), "request type (field %u) not implemented by toggled %s",
			 req->base.unknown_fields[0].tag, TD_VERSION);
	else
		snprintf(msg, sizeof(msg), "message type %d is not a request this daemon serves",
			 (int)req->body_case);
	rpc_fail(r, unknown ? TOGGLE_EUNIMPLEMENTED : TOGGLE_EPROTO, "%s", msg);
}

static void dispatch_request(struct td_peer *p, Toggle__Envelope *req, struct rpc_reply *r)
{
	p->d->stats.requests++;
	/* proto3 has no required fields: a request without an id decodes as
	 * id 0, which only events carry; its reply could not be matched. */
	if (req->id == 0) {
		rpc_fail(r, TOGGLE_EPROTO, "a request needs a non-zero id");
		r->drop = "request with id 0";
		return;
	}
	if (req->body_case == TOGGLE__ENVELOPE__BODY_HELLO) {
		dispatch_hello(p, req, r);
		return;
	}
	if (!p->said_hello) {
		rpc_fail(r, TOGGLE_EPROTO, "the first message must be a hello");
		r->drop = "no hello";
		return;
	}
	const struct td_rpc *rpc = NULL;
	for (size_t i = 0; i < sizeof(rpc_table) / sizeof(rpc_table[0]); i++)
		if (rpc_table[i].body == req->body_case)
			rpc = &rpc_table[i];
	if (!rpc) {
		dispatch_unknown(req, r);
		return;
	}
	if (rpc->mutating && !p->may_write) {
		p->d->stats.denied++;
		log_warnx("denied %s to pid %u uid %u: not root, not uid %u, not in group '%s'",
			  rpc->name, p->pid, p->uid, (unsigned)geteuid(), p->d->cfg.operator_group);
		char msg[160];
		snprintf(msg, sizeof(msg),
			 "%s needs root, the daemon's user or the operator group '%s'; uid %u may only read",
			 rpc->name, p->d->cfg.operator_group, p->uid);
		rpc_fail(r, TOGGLE_EPERM, "%s", msg);
		return;
	}
	log_debug("peer %llu: %s", (unsigned long long)p->id, rpc->name);
	rpc->handler(p, req, r);
}

void td_dispatch(struct td_peer *p, Toggle__Envelope *req)
{
	p->d->rpc_code = 0;
	struct rpc_reply r;
	rpc_reply_init(&r);
	dispatch_request(p, req, &r);
	td_dispatch_reply(p, req->id, &r);
}
