/*
 * dispatch.c - every request goes through here, validated in a fixed order:
 * size and decoding (the frame reader, before this), version (hello first),
 * type (known request for this table), permission (mutating requests need
 * SO_PEERCRED rights), then arguments (the handler).  Each step and each
 * handler fills one struct rpc_reply; only td_dispatch_reply, here, encodes
 * and queues it (to the peer now, or behind the write's save, commit.c).
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

/* A block of reply memory: one rpc_alloc, or one adopted string (held). */
struct rpc_mem {
	struct rpc_mem *next;
	char *held;
	max_align_t data[];
};

_Static_assert(sizeof(((struct rpc_reply *)0)->text) >= sizeof(((struct td_ctl_err *)0)->msg),
	       "an rpc_reply holds a td_ctl_err's message whole");

void rpc_reply_init(struct rpc_reply *r)
{
	memset(r, 0, sizeof(*r));
	r->outcome = RPC_BODY;
	r->body = TOGGLE__ENVELOPE__BODY__NOT_SET;
}

void rpc_reply_free(struct rpc_reply *r)
{
	for (struct rpc_mem *m = r->mem, *next; m; m = next) {
		next = m->next;
		free(m->held);
		free(m);
	}
	r->mem = NULL;
	if (r->waiter)
		td_waiter_free(r->waiter);
	r->waiter = NULL;
	rpc_skipped_free(&r->skipped);
}

void *rpc_body(struct rpc_reply *r, Toggle__Envelope__BodyCase body)
{
	r->outcome = RPC_BODY;
	r->body = body;
	return &r->u;
}

int rpc_fail(struct rpc_reply *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->text, sizeof(r->text), fmt, ap);
	va_end(ap);
	r->outcome = RPC_ERROR;
	r->code = code;
	return code;
}

int rpc_fail_ctl(struct rpc_reply *r, const struct td_ctl_err *e)
{
	rpc_fail(r, e->code, "%s", e->msg);
	snprintf(r->agent, sizeof(r->agent), "%s", e->agent);
	r->agent_ptr = r->agent;
	r->agents = &r->agent_ptr;
	r->agent_id = e->agent_id;
	r->agent_ids = &r->agent_id;
	r->n_agents = e->agent[0] ? 1 : 0;
	return e->code;
}

void *rpc_alloc(struct rpc_reply *r, size_t n, size_t size)
{
	if (n == 0)
		n = 1;
	if (size && n > (SIZE_MAX - sizeof(struct rpc_mem)) / size)
		return NULL;
	struct rpc_mem *m = calloc(1, sizeof(*m) + n * size);
	if (!m)
		return NULL;
	m->next = r->mem;
	r->mem = m;
	return m->data;
}

char *rpc_adopt(struct rpc_reply *r, char *s)
{
	if (!s)
		return NULL;
	struct rpc_mem *m = calloc(1, sizeof(*m));
	if (!m) {
		free(s);
		return NULL;
	}
	m->held = s;
	m->next = r->mem;
	r->mem = m;
	return s;
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
	td_commit_reply(p, id, buf, len, NULL);
}

void td_dispatch_reply(struct td_peer *p, uint64_t id, struct rpc_reply *r)
{
	switch (r->outcome) {
	case RPC_ERROR:
		td_peer_send_error_ids(p, id, r->code, r->text, r->agents, r->agent_ids, r->n_agents);
		break;
	case RPC_DEFERRED:
		td_commit_reply(p, id, NULL, 0, r->waiter); /* takes the waiter */
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
			td_peer_send(p, &env);
		break;
	}
	}
	if (r->drop)
		td_peer_drop(p, r->drop);
	rpc_reply_free(r);
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

/* Every request, timed and counted by method and result for --metrics. */
void td_dispatch(struct td_peer *p, Toggle__Envelope *req)
{
	struct td_daemon *d = p->d;
	uint64_t t0 = d->metrics ? td_mono_ns() : 0;
	d->rpc_code = 0;
	struct rpc_reply r;
	rpc_reply_init(&r);
	dispatch_request(p, req, &r);
	td_dispatch_reply(p, req->id, &r);
	if (d->metrics)
		td_metrics_rpc(d, req, d->rpc_code, td_mono_ns() - t0);
}
