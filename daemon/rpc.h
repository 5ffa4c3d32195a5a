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
/* Agents a default-target command left out (their catalog refused it). */
struct rpc_skipped {
	char **v; /* "name (id N, uid U): reason" */
	size_t n;
};
void rpc_skipped_free(struct rpc_skipped *sk);
/*
 * Default target only (no selector, or all): drop from v the agents whose
 * catalog refuses one of specs, naming them in *sk (rpc_target.c).  When no
 * agent would be left, v is kept whole so that the command fails naming the
 * first.  0, or an error already sent to the peer.
 */
int rpc_default_filter(struct td_peer *p, uint64_t req_id, const Toggle__Selector *sel,
		       struct td_agent **v, size_t *n, const char *const *specs, size_t n_specs,
		       struct rpc_skipped *sk);
/* Format a set of an agent as spec text into a malloc'd string (NULL on ENOMEM). */
char *rpc_spec(const struct td_agent *a, const uint64_t *words);

/* Fill one reply element as the query handlers do (also for the cluster's
 * published status).  AgentInfo.enabled is malloc'd: free it. */
void rpc_fill_agent(Toggle__AgentInfo *m, struct td_agent *a);
void rpc_fill_graph(Toggle__GraphInfo *m, const struct td_agent *a, const struct toggle_shm_graph *r);
void rpc_fill_status(Toggle__StatusReply *rep, const struct td_daemon *d);

/* An error from td_ctl_set/td_ctl_plan: code, message, the agent it names ("" for none)
 * and that agent's id (Error.agent_ids). */
struct td_ctl_err {
	int code;
	char msg[400];
	char agent[TGP_MAX_NAME];
	uint64_t agent_id;
};

/*
 * The validate-then-apply core of SetEnabled and SubmitPlan (rpc_control.c),
 * shared by the RPC handlers and the cluster layer: all targets or none,
 * applied to the accepted state and marked for the next save; the control
 * lanes are written by commit.c once that save succeeded.  Default-target
 * filtering (rpc_default_filter) stays with the handlers.  td_ctl_plan
 * with no targets checks the entries only.  0, or a TOGGLE_E* code with
 * *e filled.
 */
int td_ctl_set(struct td_agent **v, size_t n, const char *spec, Toggle__SetOp op,
	       struct td_ctl_err *e);
int td_ctl_plan(struct td_agent **v, size_t n, const Toggle__SubmitPlanRequest *m,
		struct td_ctl_err *e);
/* Reply with *e as an Error (naming its agent, if any). */
void td_ctl_err_send(struct td_peer *p, uint64_t id, const struct td_ctl_err *e);

#endif
