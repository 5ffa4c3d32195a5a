/*
 * dispatch.c - every request goes through here, validated in a fixed order:
 * size and decoding (the frame reader, before this), version (hello first),
 * type (known request for this table), permission (mutating requests need
 * SO_PEERCRED rights), then arguments (the handler).  Handlers fill a reply
 * and queue it; they never touch the socket.
 */
#include <stdio.h>
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
};

static void dispatch_hello(struct td_peer *p, const Toggle__Envelope *req)
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
		td_peer_send_error(p, req->id, TOGGLE_EVERSION, msg, NULL, 0);
		return;
	}
	p->said_hello = true;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__HelloReply rep = TOGGLE__HELLO_REPLY__INIT;
	env.id = req->id;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO_REPLY;
	env.hello_reply = &rep;
	rep.protocol_version = TGP_PROTOCOL_VERSION;
	rep.daemon_version = (char *)TD_VERSION;
	rep.may_write = p->may_write;
	td_peer_send(p, &env);
}

static void dispatch_request(struct td_peer *p, Toggle__Envelope *req)
{
	p->d->stats.requests++;
	/* proto3 has no required fields: a request without an id decodes as
	 * id 0, which only events carry; its reply could not be matched. */
	if (req->id == 0) {
		td_peer_send_error(p, 0, TOGGLE_EPROTO, "a request needs a non-zero id", NULL, 0);
		td_peer_drop(p, "request with id 0");
		return;
	}
	if (req->body_case == TOGGLE__ENVELOPE__BODY_HELLO) {
		dispatch_hello(p, req);
		return;
	}
	if (!p->said_hello) {
		td_peer_send_error(p, req->id, TOGGLE_EPROTO, "the first message must be a hello",
				   NULL, 0);
		td_peer_drop(p, "no hello");
		return;
	}
	const struct td_rpc *rpc = NULL;
	for (size_t i = 0; i < sizeof(rpc_table) / sizeof(rpc_table[0]); i++)
		if (rpc_table[i].body == req->body_case)
			rpc = &rpc_table[i];
	if (!rpc) {
		/* A body this daemon's schema lacks decodes as an unknown field: a
		 * newer client's request, answered and the connection kept. */
		bool unknown = req->body_case == TOGGLE__ENVELOPE__BODY__NOT_SET &&
			       req->base.n_unknown_fields > 0;
		char msg[96];
		if (unknown)
			snprintf(msg, sizeof(msg), "request type (field %u) not implemented by toggled %s",
				 req->base.unknown_fields[0].tag, TD_VERSION);
		else
			snprintf(msg, sizeof(msg), "message type %d is not a request this daemon serves",
				 (int)req->body_case);
		td_peer_send_error(p, req->id, unknown ? TOGGLE_EUNIMPLEMENTED : TOGGLE_EPROTO, msg, NULL, 0);
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
		td_peer_send_error(p, req->id, TOGGLE_EPERM, msg, NULL, 0);
		return;
	}
	log_debug("peer %llu: %s", (unsigned long long)p->id, rpc->name);
	rpc->handler(p, req);
}

/* Every request, timed and counted by method and result for --metrics. */
void td_dispatch(struct td_peer *p, Toggle__Envelope *req)
{
	struct td_daemon *d = p->d;
	uint64_t t0 = d->metrics ? td_mono_ns() : 0;
	d->rpc_code = 0;
	dispatch_request(p, req);
	if (d->metrics)
		td_metrics_rpc(d, req, d->rpc_code, td_mono_ns() - t0);
}
