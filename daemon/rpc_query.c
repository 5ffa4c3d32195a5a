/*
 * rpc_query.c - read-only requests: list agents, list graphs, status, hooks,
 * show plan, watch.  Agent facts come from each agent's status lane, read
 * fresh for every query.  What a reply points to is either the agents'
 * own memory (sent before anything can change it) or the reply's
 * (rpc_alloc, rpc_adopt).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* A default target ("all") with no agent is answered with an empty list;
 * a named target must exist. */
static bool none_to_list(const struct td_peer *p, const Toggle__Selector *sel)
{
	return (!sel || sel->sel_case == TOGGLE__SELECTOR__SEL__NOT_SET ||
		sel->sel_case == TOGGLE__SELECTOR__SEL_ALL) && !p->d->n_agents;
}

void rpc_list_agents(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	Toggle__ListAgentsReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_AGENTS);
	toggle__list_agents_reply__init(rep);
	const Toggle__Selector *sel = req->list_agents->target;
	struct td_agent **v;
	size_t n;
	if (none_to_list(p, sel) || rpc_targets(p, r, sel, &v, &n))
		return;
	Toggle__AgentInfo *infos = rpc_alloc(r, n, sizeof(*infos));
	Toggle__AgentInfo **ptrs = rpc_alloc(r, n, sizeof(*ptrs));
	if (infos && ptrs) {
		for (size_t i = 0; i < n; i++) {
			td_view_agent(&infos[i], v[i]);
			td_record_fill_agent(&infos[i], v[i]); /* its data ring, if it shared one */
			infos[i].enabled = rpc_adopt(r, infos[i].enabled);
			ptrs[i] = &infos[i];
		}
		rep->n_agents = n;
		rep->agents = ptrs;
	} else {
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
	}
	free(v);
}

void rpc_list_graphs(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	Toggle__ListGraphsReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_GRAPHS);
	toggle__list_graphs_reply__init(rep);
	const Toggle__Selector *sel = req->list_graphs->target;
	struct td_agent **v;
	size_t n;
	if (none_to_list(p, sel) || rpc_targets(p, r, sel, &v, &n))
		return;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		td_agent_refresh(v[i]);
		total += v[i]->st->n_graphs;
	}
	Toggle__GraphInfo *g = rpc_alloc(r, total, sizeof(*g));
	Toggle__GraphInfo **gp = rpc_alloc(r, total, sizeof(*gp));
	uint64_t *trunc = rpc_alloc(r, n, sizeof(*trunc));
	if (!g || !gp || !trunc) {
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
	} else {
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			const struct td_agent *a = v[i];
			if (a->st->total_graphs > a->st->n_graphs)
				trunc[rep->n_truncated_agents++] = a->id;
			for (uint64_t j = 0; j < a->st->n_graphs; j++, k++) {
				td_view_graph(&g[k], a, &a->st->graphs[j]);
				gp[k] = &g[k];
			}
		}
		rep->n_graphs = k;
		rep->graphs = gp;
		rep->truncated_agents = trunc;
	}
	free(v);
}

void rpc_status(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	(void)req;
	td_view_status(rpc_body(r, TOGGLE__ENVELOPE__BODY_STATUS_REPLY), p->d);
}

void rpc_hooks(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	Toggle__HooksReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_HOOKS_REPLY);
	toggle__hooks_reply__init(rep);
	const Toggle__Selector *sel = req->hooks->target;
	struct td_agent **v;
	size_t n;
	if (none_to_list(p, sel) || rpc_targets(p, r, sel, &v, &n))
		return;
	Toggle__AgentHooks *h = rpc_alloc(r, n, sizeof(*h));
	Toggle__AgentHooks **hp = rpc_alloc(r, n, sizeof(*hp));
	if (h && hp) {
		for (size_t i = 0; i < n; i++) {
			struct td_agent *a = v[i];
			td_agent_refresh(a);
			toggle__agent_hooks__init(&h[i]);
			h[i].agent_id = a->id;
			h[i].name = a->name;
			h[i].n_hook_types = a->cat.n_types;
			h[i].hook_types = (char **)(uintptr_t)a->cat.type_names;
			h[i].n_layers = a->cat.n_layers;
			h[i].enabled = rpc_adopt(r, td_view_spec(a, a->has_standing ? a->ctl.standing
										     : a->st->current));
			h[i].current = rpc_adopt(r, td_view_spec(a, a->st->current));
			hp[i] = &h[i];
		}
		rep->n_agents = n;
		rep->agents = hp;
	} else {
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
	}
	free(v);
}

/* One agent's plan entries for steps not yet begun (entries live in e). */
static void plan_fill(struct rpc_reply *r, Toggle__AgentPlan *ap, struct td_agent *a,
		      Toggle__PlanEntry *e, Toggle__PlanEntry **ep)
{
	td_agent_refresh(a);
	int64_t now = a->st->step;
	toggle__agent_plan__init(ap);
	ap->agent_id = a->id;
	ap->entries = ep;
	for (size_t j = 0; j < a->n_plans; j++) {
		if (a->plans[j].step <= now)
			continue; /* begun: history, not plan */
		Toggle__PlanEntry *en = &e[ap->n_entries];
		toggle__plan_entry__init(en);
		en->step = a->plans[j].step;
		en->spec = rpc_adopt(r, td_view_spec(a, a->plans[j].set.bits));
		ep[ap->n_entries++] = en;
	}
}

void rpc_show_plan(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	Toggle__ShowPlanReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_PLAN);
	toggle__show_plan_reply__init(rep);
	const Toggle__Selector *sel = req->show_plan->target;
	struct td_agent **v;
	size_t n;
	if (none_to_list(p, sel) || rpc_targets(p, r, sel, &v, &n))
		return;
	Toggle__AgentPlan *ap = rpc_alloc(r, n, sizeof(*ap));
	Toggle__AgentPlan **app = rpc_alloc(r, n, sizeof(*app));
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += v[i]->n_plans;
	Toggle__PlanEntry *e = rpc_alloc(r, total, sizeof(*e));
	Toggle__PlanEntry **ep = rpc_alloc(r, total, sizeof(*ep));
	if (ap && app && e && ep) {
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			plan_fill(r, &ap[i], v[i], &e[k], &ep[k]);
			k += ap[i].n_entries;
			app[i] = &ap[i];
		}
		rep->n_plans = n;
		rep->plans = app;
	} else {
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
	}
	free(v);
}

void rpc_watch(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	char err[160];
	struct td_selector s;
	int rc = td_selector_parse(req->watch->target, &s, err, sizeof(err));
	if (rc) {
		rpc_fail(r, rc, "%s", err);
		return;
	}
	p->watching = true;
	p->watch_sel = s;
	toggle__ack__init(rpc_body(r, TOGGLE__ENVELOPE__BODY_ACK));
}
