/*
 * rpc.h - request handlers.  Each fills a reply (or an error) for one
 * request and queues it to the peer; none touches the socket.
 * rpc_query.c: read-only requests; rpc_control.c: registration and the
 * requests that change the desired state.
 */
#ifndef TD_RPC_H
#define TD_RPC_H

#include "toggled.h"

typedef void td_handler_fn(struct td_peer *p, const Toggle__Envelope *req);

td_handler_fn rpc_register_agent, rpc_list_agents, rpc_list_graphs, rpc_status, rpc_hooks,
	rpc_show_plan, rpc_watch, rpc_set_enabled, rpc_submit_plan, rpc_clear_plan;

/* Parse the request's selector and select agents; on error replies and returns it. */
int rpc_targets(struct td_peer *p, const Toggle__Envelope *req, const Toggle__Selector *sel,
		struct td_agent ***agents, size_t *n);
/* Format a set of an agent as spec text into a malloc'd string (NULL on ENOMEM). */
char *rpc_spec(const struct td_agent *a, const uint64_t *words);

#endif
