/*
 * view.c - agents and the daemon as the reply messages a client reads
 * (AgentInfo, GraphInfo, StatusReply): for the query handlers and for the
 * status the cluster publishes in etcd, so that both show the same.  State:
 * it reads the agents' status lanes fresh and calls nothing above it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toggled.h"

char *td_view_spec(const struct td_agent *a, const uint64_t *words)
{
	struct toggle_set s;
	memcpy(s.bits, words, sizeof(s.bits));
	int n = toggle_set_format(&a->cat, &s, NULL, 0);
	if (n < 0)
		return strdup("(outside the catalog)");
	char *buf = malloc((size_t)n + 1);
	if (buf)
		toggle_set_format(&a->cat, &s, buf, (size_t)n + 1);
	return buf;
}

static uint64_t anomalies_sum(const struct td_agent *a)
{
	uint64_t sum = 0;
	for (int i = 0; i < TOGGLE_SHM_AN_COUNT; i++)
		sum += a->st->anomalies[i];
	return sum;
}

void td_view_agent(Toggle__AgentInfo *m, struct td_agent *a)
{
	toggle__agent_info__init(m);
	td_agent_refresh(a);
	m->agent_id = a->id;
	m->name = a->name;
	m->group = a->group;
	m->pid = a->pid;
	m->uid = a->uid;
	m->mode = a->mode;
	m->driver_version = a->driver_version;
	m->connected_unix_ms = a->connected_ms;
	m->step = a->st->step;
	m->control_version = a->ctl.version;
	m->applied_version = a->st->version_applied;
	m->graphs = (uint32_t)a->st->total_graphs;
	m->anomalies = anomalies_sum(a);
	/* Without a daemon-set standing set, show what the agent runs now. */
	m->enabled = td_view_spec(a, a->has_standing ? a->ctl.standing : a->st->current);
	m->n_hook_types = a->cat.n_types;
	m->hook_types = (char **)(uintptr_t)a->cat.type_names;
	m->n_layers = a->cat.n_layers;
	uint32_t pending = 0;
	for (size_t i = 0; i < a->n_plans; i++)
		pending += a->plans[i].step > m->step;
	m->pending_plan = pending;
	if (a->st->tainted_launches) {
		m->tainted_launches = a->st->tainted_launches;
		m->tainted_step = a->st->tainted_step;
	}
}

void td_view_graph(Toggle__GraphInfo *m, const struct td_agent *a, const struct toggle_shm_graph *r)
{
	toggle__graph_info__init(m);
	m->agent_id = a->id;
	m->graph = r->graph;
	m->exec = r->exec;
	m->nodes = (uint32_t)r->nodes;
	m->hooks_covered = (uint32_t)r->hooks_covered;
	m->applied_version = r->applied_version;
	m->replays = r->replays;
	m->last_step = r->last_step;
	m->bound = (r->flags & TOGGLE_SHM_GRAPH_BOUND) != 0;
	m->stale = (r->flags & TOGGLE_SHM_GRAPH_STALE) != 0;
	m->tainted = (r->flags & TOGGLE_SHM_GRAPH_TAINTED) != 0;
	m->blocked = (r->flags & TOGGLE_SHM_GRAPH_BLOCKED) != 0;
	m->bare_exec = (r->flags & TOGGLE_SHM_GRAPH_BARE) != 0;
	m->bare_running = (r->flags & TOGGLE_SHM_GRAPH_BARE_RUNNING) != 0;
	m->full_exec = (r->flags & TOGGLE_SHM_GRAPH_FULL) != 0;
	m->full_running = (r->flags & TOGGLE_SHM_GRAPH_FULL_RUNNING) != 0;
}

void td_view_status(Toggle__StatusReply *rep, const struct td_daemon *d)
{
	toggle__status_reply__init(rep);
	rep->daemon_version = (char *)TD_VERSION;
	rep->protocol_version = TGP_PROTOCOL_VERSION;
	rep->uptime_ms = util_mono_ms() - d->start_ms;
	rep->agents = (uint32_t)d->n_agents;
	rep->clients = (uint32_t)(d->n_peers - d->n_agents);
	rep->requests = d->stats.requests;
	rep->errors = d->stats.errors;
	rep->denied = d->stats.denied;
	rep->dropped_peers = d->stats.dropped_peers;
	rep->socket = (char *)(uintptr_t)d->cfg.socket_path;
	rep->state_dir = (char *)(uintptr_t)d->cfg.state_dir;
	rep->save_errors = d->commit.failures;
	if (d->commit.failing)
		rep->save_error = (char *)(uintptr_t)d->commit.reason;
	const struct td_cluster_view *cv = &d->cluster_view;
	if (cv->on) {
		rep->etcd_member = (char *)(uintptr_t)cv->member;
		rep->etcd_connected = cv->connected;
		rep->etcd_since_unix_ms = cv->since_unix_ms;
		rep->etcd_failovers = cv->failovers;
		rep->etcd_last_error = (char *)(uintptr_t)cv->last_error;
	}
}
