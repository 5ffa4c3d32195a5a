/*
 * rpc_control.c - registration and the requests that change desired state:
 * set enabled (replace, add, remove; optional wait), submit plan, clear plan.
 *
 * Every command is checked against every target before anything is
 * written: a spec that does not parse for one agent, a step one agent has
 * already begun, or a full plan ring rejects the whole command.  Then each
 * target's control lane is written and the desired state is marked for
 * saving; the reply goes out after the save (server.c, check phase).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rpc.h"

static void reply_ack(struct td_peer *p, uint64_t id)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__Ack ack = TOGGLE__ACK__INIT;
	env.id = id;
	env.body_case = TOGGLE__ENVELOPE__BODY_ACK;
	env.ack = &ack;
	td_peer_send(p, &env);
}

void rpc_register_agent(struct td_peer *p, const Toggle__Envelope *req)
{
	char err[256] = "";
	uint64_t id = 0;
	int rc = td_agent_register(p, req->register_agent, &id, err, sizeof(err));
	if (rc) {
		log_warnx("registration from pid %u refused: %s", p->pid, err);
		td_peer_send_error(p, req->id, rc, err, NULL, 0);
		return;
	}
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__RegisterAgentReply rep = TOGGLE__REGISTER_AGENT_REPLY__INIT;
	env.id = req->id;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_REPLY;
	env.register_reply = &rep;
	rep.agent_id = id;
	td_peer_send(p, &env);
}

/* Parse spec against one agent's catalog; on error reply naming the agent. */
static int parse_for(struct td_peer *p, uint64_t id, const struct td_agent *a, const char *spec,
		     struct toggle_set *out)
{
	char err[256], msg[400];
	if (!spec || strlen(spec) > TGP_MAX_SPEC) {
		td_peer_send_error(p, id, TOGGLE_ESPEC, "hook spec missing or too long", NULL, 0);
		return TOGGLE_ESPEC;
	}
	int rc = toggle_set_parse(&a->cat, spec, out, err, sizeof(err));
	if (rc) {
		snprintf(msg, sizeof(msg), "agent %s (id %llu): %s", a->name, (unsigned long long)a->id,
			 err);
		const char *names[1] = {a->name};
		td_peer_send_error_ids(p, id, rc, msg, names, &a->id, 1);
	}
	return rc;
}

static void set_apply_op(struct toggle_set *cur, const struct toggle_set *arg, Toggle__SetOp op)
{
	switch (op) {
	case TOGGLE__SET_OP__SET_OP_ADD: toggle_set_union(cur, arg); break;
	case TOGGLE__SET_OP__SET_OP_REMOVE: toggle_set_subtract(cur, arg); break;
	default: *cur = *arg; break;
	}
}

static void set_reply(struct td_peer *p, uint64_t id, struct td_agent **v, size_t n)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__SetEnabledReply rep = TOGGLE__SET_ENABLED_REPLY__INIT;
	Toggle__AgentVersion *vs = calloc(n, sizeof(*vs));
	Toggle__AgentVersion **vp = calloc(n, sizeof(*vp));
	if (!vs || !vp) {
		td_peer_send_error(p, id, TOGGLE_ENOMEM, "out of memory", NULL, 0);
	} else {
		for (size_t i = 0; i < n; i++) {
			toggle__agent_version__init(&vs[i]);
			vs[i].agent_id = v[i]->id;
			vs[i].version = v[i]->ctl.version;
			vp[i] = &vs[i];
		}
		env.id = id;
		env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY;
		env.set_enabled_reply = &rep;
		rep.n_versions = n;
		rep.versions = vp;
		td_peer_send(p, &env);
	}
	free(vs);
	free(vp);
}

static int add_waiter(struct td_peer *p, uint64_t id, struct td_agent **v, size_t n, uint32_t ms)
{
	struct td_waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return TOGGLE_ENOMEM;
	w->agent_ids = calloc(n, sizeof(*w->agent_ids));
	w->versions = calloc(n, sizeof(*w->versions));
	w->names = calloc(n, sizeof(*w->names));
	if (!w->agent_ids || !w->versions || !w->names) {
		td_waiter_free(w);
		return TOGGLE_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		w->agent_ids[i] = v[i]->id;
		w->versions[i] = v[i]->ctl.version;
		snprintf(w->names[i], sizeof(w->names[i]), "%s", v[i]->name);
	}
	w->n = n;
	w->peer = p;
	w->request_id = id;
	w->deadline_ms = td_now_ms() + ms;
	w->next = p->d->waiters;
	p->d->waiters = w;
	td_timer_update(p->d);
	return 0;
}

void rpc_set_enabled(struct td_peer *p, const Toggle__Envelope *req)
{
	const Toggle__SetEnabledRequest *m = req->set_enabled;
	/* Unspecified is refused like an unknown op: a client that forgot op
	 * must not replace the whole set by default. */
	if (m->op != TOGGLE__SET_OP__SET_OP_REPLACE && m->op != TOGGLE__SET_OP__SET_OP_ADD &&
	    m->op != TOGGLE__SET_OP__SET_OP_REMOVE) {
		td_peer_send_error(p, req->id, TOGGLE_EINVAL,
				   m->op == TOGGLE__SET_OP__SET_OP_UNSPECIFIED
					   ? "set operation not given (SET_OP_UNSPECIFIED)"
					   : "unknown set operation",
				   NULL, 0);
		return;
	}
	if (m->wait_ms > TGP_MAX_WAIT_MS) {
		char msg[96];
		snprintf(msg, sizeof(msg), "wait of %u ms is over the limit of %u ms", m->wait_ms,
			 TGP_MAX_WAIT_MS);
		td_peer_send_error(p, req->id, TOGGLE_EINVAL, msg, NULL, 0);
		return;
	}
	struct td_agent **v;
	size_t n;
	if (rpc_targets(p, req, m->target, &v, &n))
		return;
	struct toggle_set *next = calloc(n, sizeof(*next));
	if (!next) {
		td_peer_send_error(p, req->id, TOGGLE_ENOMEM, "out of memory", NULL, 0);
		free(v);
		return;
	}
	/* Check all, then apply all. */
	size_t i;
	for (i = 0; i < n; i++) {
		struct toggle_set arg;
		if (parse_for(p, req->id, v[i], m->spec, &arg))
			break;
		td_agent_refresh(v[i]);
		/* add/remove start from what the agent runs if the daemon never set it. */
		memcpy(next[i].bits, v[i]->has_standing ? v[i]->ctl.standing : v[i]->st->current,
		       sizeof(next[i].bits));
		set_apply_op(&next[i], &arg, m->op);
	}
	if (i == n) {
		for (i = 0; i < n; i++) {
			struct td_agent *a = v[i];
			memcpy(a->ctl.standing, next[i].bits, sizeof(a->ctl.standing));
			a->ctl.version++;
			a->has_standing = true;
			td_agent_write_control(a);
			td_agent_persist(a);
		}
		if (m->wait_ms > 0) {
			if (add_waiter(p, req->id, v, n, m->wait_ms))
				td_peer_send_error(p, req->id, TOGGLE_ENOMEM, "out of memory", NULL, 0);
		} else {
			set_reply(p, req->id, v, n);
		}
	}
	free(next);
	free(v);
}

/* Everything that must hold for one agent before a plan is written. */
static int plan_check(struct td_peer *p, uint64_t id, struct td_agent *a,
		      const Toggle__SubmitPlanRequest *m, struct toggle_set *sets)
{
	char msg[256];
	td_agent_refresh(a);
	int64_t now = a->st->step;
	uint64_t used = a->ctl.plan_head - a->st->plan_consumed;
	const char *names[1] = {a->name};
	for (size_t k = 0; k < m->n_entries; k++) {
		int rc = parse_for(p, id, a, m->entries[k]->spec, &sets[k]);
		if (rc)
			return rc;
		if (m->entries[k]->step <= now) {
			snprintf(msg, sizeof(msg),
				 "plan rejected: agent %s (id %llu) has already begun step %lld (entry for step %lld)",
				 a->name, (unsigned long long)a->id, (long long)now,
				 (long long)m->entries[k]->step);
			td_peer_send_error_ids(p, id, TOGGLE_ELATE, msg, names, &a->id, 1);
			return TOGGLE_ELATE;
		}
	}
	if (used > TOGGLE_SHM_PLAN_RING || used + m->n_entries > TOGGLE_SHM_PLAN_RING ||
	    a->n_plans + m->n_entries > TD_MAX_PENDING_PLAN) {
		snprintf(msg, sizeof(msg),
			 "agent %s (id %llu) has %llu plan entries not yet taken; %zu more do not fit (ring of %d)",
			 a->name, (unsigned long long)a->id, (unsigned long long)used, m->n_entries,
			 TOGGLE_SHM_PLAN_RING);
		td_peer_send_error_ids(p, id, TOGGLE_EBUSY, msg, names, &a->id, 1);
		return TOGGLE_EBUSY;
	}
	return 0;
}

/* Drop remembered entries for steps the agent has begun. */
static void plan_prune(struct td_agent *a)
{
	int64_t now = a->st->step;
	size_t k = 0;
	for (size_t j = 0; j < a->n_plans; j++)
		if (a->plans[j].step > now)
			a->plans[k++] = a->plans[j];
	a->n_plans = k;
}

static void plan_write(struct td_agent *a, const Toggle__SubmitPlanRequest *m,
		       const struct toggle_set *sets)
{
	uint64_t batch = ++a->next_batch;
	plan_prune(a);
	for (size_t k = 0; k < m->n_entries; k++) {
		struct toggle_shm_plan_slot slot = {.batch = batch, .batch_len = m->n_entries,
						    .batch_index = k, .step = m->entries[k]->step};
		memcpy(slot.set, sets[k].bits, sizeof(slot.set));
		toggle_shm_plan_slot_write(a->shm.ctl, a->ctl.plan_head + k, &slot);
		a->plans[a->n_plans++] = (struct td_plan_entry){.step = slot.step, .set = sets[k]};
	}
	a->ctl.plan_head += m->n_entries; /* published by this control write */
	td_agent_write_control(a);
	td_agent_persist(a);
}

void rpc_submit_plan(struct td_peer *p, const Toggle__Envelope *req)
{
	const Toggle__SubmitPlanRequest *m = req->submit_plan;
	char msg[128];
	if (m->n_entries == 0 || m->n_entries > TOGGLE_SHM_PLAN_RING) {
		snprintf(msg, sizeof(msg), "a plan has 1 to %d entries; this one has %zu",
			 TOGGLE_SHM_PLAN_RING, m->n_entries);
		td_peer_send_error(p, req->id, TOGGLE_ELIMIT, msg, NULL, 0);
		return;
	}
	for (size_t k = 0; k < m->n_entries; k++) {
		bool dup = false;
		for (size_t j = 0; j < k; j++)
			dup |= m->entries[j]->step == m->entries[k]->step;
		if (m->entries[k]->step < 0 || dup) {
			snprintf(msg, sizeof(msg), "plan entry %zu: step %lld is %s", k,
				 (long long)m->entries[k]->step, dup ? "named twice" : "negative");
			td_peer_send_error(p, req->id, TOGGLE_EINVAL, msg, NULL, 0);
			return;
		}
	}
	struct td_agent **v;
	size_t n;
	if (rpc_targets(p, req, m->target, &v, &n))
		return;
	struct toggle_set *sets = calloc(n * m->n_entries, sizeof(*sets));
	size_t i = 0;
	if (!sets)
		td_peer_send_error(p, req->id, TOGGLE_ENOMEM, "out of memory", NULL, 0);
	else
		for (i = 0; i < n; i++)
			if (plan_check(p, req->id, v[i], m, &sets[i * m->n_entries]))
				break;
	if (sets && i == n) {
		for (i = 0; i < n; i++)
			plan_write(v[i], m, &sets[i * m->n_entries]);
		reply_ack(p, req->id);
	}
	free(sets);
	free(v);
}

void rpc_clear_plan(struct td_peer *p, const Toggle__Envelope *req)
{
	struct td_agent **v;
	size_t n;
	if (rpc_targets(p, req, req->clear_plan->target, &v, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		struct td_agent *a = v[i];
		a->ctl.plan_clear = a->ctl.plan_head;
		a->ctl.plan_clears++;
		a->n_plans = 0;
		td_agent_write_control(a);
		td_agent_persist(a);
	}
	reply_ack(p, req->id);
	free(v);
}
