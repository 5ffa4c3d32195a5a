/*
 * rpc_control.c - registration and the requests that change desired state:
 * set enabled (replace, add, remove; optional wait), submit plan, clear plan.
 *
 * Every command is checked against every target before anything is
 * written: a spec that does not parse for one agent, a step one agent has
 * already begun, or a full plan ring rejects the whole command (ctl.c, the
 * validate-then-apply core the cluster uses too).  Then the command is
 * applied to each target's accepted state and to the store; the control
 * lanes are written and the reply leaves once the save that holds it
 * succeeded, or TOGGLE_EIO and nothing applied if it failed (commit.c).
 * The answers of `set --wait` are decided here too (rpc_wait_answer).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rpc.h"

/* An accepted write's Ack, naming the agents the default target left out. */
static void ack_after_save(struct rpc_reply *r)
{
	Toggle__Ack *ack = rpc_body(r, TOGGLE__ENVELOPE__BODY_ACK);
	toggle__ack__init(ack);
	ack->n_skipped = r->skipped.n;
	ack->skipped = r->skipped.v;
	r->after_save = true;
}

/* No memory for an accepted write's reply: it is saved all the same, the
 * peer hears nothing and is dropped. */
static void reply_none(struct rpc_reply *r)
{
	r->outcome = RPC_DEFERRED;
	r->waiter = NULL;
	r->drop = "out of memory";
}

void rpc_register_agent(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	char err[256] = "";
	uint64_t id = 0;
	int rc = td_agent_register(p, req->register_agent, &id, err, sizeof(err));
	if (rc) {
		log_warnx("registration from pid %u refused: %s", p->pid, err);
		rpc_fail(r, rc, "%s", err);
		return;
	}
	Toggle__RegisterAgentReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY);
	toggle__register_agent_reply__init(rep);
	rep->agent_id = id;
}

Toggle__AgentVersion **rpc_set_reply(struct rpc_reply *r, size_t n, char **skipped,
				     size_t n_skipped)
{
	Toggle__AgentVersion *vs = rpc_alloc(r, n, sizeof(*vs));
	Toggle__AgentVersion **vp = rpc_alloc(r, n, sizeof(*vp));
	if (!vs || !vp)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		toggle__agent_version__init(&vs[i]);
		vp[i] = &vs[i];
	}
	Toggle__SetEnabledReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY);
	toggle__set_enabled_reply__init(rep);
	rep->n_versions = n;
	rep->versions = vp;
	rep->n_skipped = n_skipped;
	rep->skipped = skipped;
	return vp;
}

/* The versions just accepted, once they are saved. */
static void set_reply(struct rpc_reply *r, struct td_agent **v, size_t n)
{
	Toggle__AgentVersion **vp = rpc_set_reply(r, n, r->skipped.v, r->skipped.n);
	if (!vp) {
		reply_none(r);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		vp[i]->agent_id = v[i]->id;
		vp[i]->version = v[i]->ctl.version;
	}
	r->after_save = true;
}

/* set --wait: a waiter for the versions just accepted, armed once they are
 * saved; it answers when the agents applied them (rpc_wait_answer, after
 * each full status poll). */
static void wait_reply(struct td_peer *p, uint64_t id, struct rpc_reply *r, struct td_agent **v,
		       size_t n, uint32_t ms)
{
	struct td_waiter *w = calloc(1, sizeof(*w));
	if (w) {
		w->agent_ids = calloc(n, sizeof(*w->agent_ids));
		w->versions = calloc(n, sizeof(*w->versions));
		w->names = calloc(n, sizeof(*w->names));
	}
	if (!w || !w->agent_ids || !w->versions || !w->names) {
		if (w)
			td_waiter_free(w);
		reply_none(r);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		w->agent_ids[i] = v[i]->id;
		w->versions[i] = v[i]->ctl.version;
		snprintf(w->names[i], sizeof(w->names[i]), "%s", v[i]->name);
	}
	w->n = n;
	w->skipped = r->skipped.v; /* the waiter's reply names them; it frees them */
	w->n_skipped = r->skipped.n;
	r->skipped = (struct rpc_skipped){0};
	w->peer = p;
	w->request_id = id;
	/* The deadline counts from the request: a slow save shortens the wait. */
	w->deadline_ms = util_mono_ms() + ms;
	r->outcome = RPC_DEFERRED;
	r->waiter = w;
}

/* set --aligned: every target of the selection, or none. */
static void set_aligned(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	const Toggle__SetEnabledRequest *m = req->set_enabled;
	if (m->aligned_margin > TGP_MAX_ALIGN_MARGIN) {
		rpc_fail(r, TOGGLE_EINVAL, "aligned margin of %u steps is over the limit of %u",
			 m->aligned_margin, TGP_MAX_ALIGN_MARGIN);
		return;
	}
	struct td_agent **v = NULL;
	size_t n = 0;
	/* A selector matching none ("all" with no agent too) is ENOAGENT. */
	if (rpc_targets(p, r, m->target, &v, &n))
		return;
	struct td_ctl_err e;
	int64_t step = 0;
	uint32_t margin = 0;
	if (td_ctl_align(v, n, m->aligned_margin, &step, &margin, &e) ||
	    td_ctl_set_aligned(v, n, m->spec, m->op, step, &e)) {
		rpc_fail_ctl(r, &e);
		free(v);
		return;
	}
	log_info("pid %u uid %u: aligned set '%.64s' for %zu agents at step %lld (margin %u)", p->pid,
		 p->uid, m->spec, n, (long long)step, margin);
	wait_reply(p, req->id, r, v, n, m->wait_ms ? m->wait_ms : TD_ALIGN_ACK_MS);
	if (r->waiter) {
		r->waiter->aligned = true;
		r->waiter->until_applied = m->wait_ms > 0;
		r->waiter->aligned_step = step;
	}
	free(v);
}

void rpc_set_enabled(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	const Toggle__SetEnabledRequest *m = req->set_enabled;
	/* Unspecified is refused like an unknown op: a client that forgot op
	 * must not replace the whole set by default. */
	if (m->op != TOGGLE__SET_OP__SET_OP_REPLACE && m->op != TOGGLE__SET_OP__SET_OP_ADD &&
	    m->op != TOGGLE__SET_OP__SET_OP_REMOVE) {
		rpc_fail(r, TOGGLE_EINVAL, "%s",
			 m->op == TOGGLE__SET_OP__SET_OP_UNSPECIFIED
				 ? "set operation not given (SET_OP_UNSPECIFIED)"
				 : "unknown set operation");
		return;
	}
	if (m->wait_ms > TGP_MAX_WAIT_MS) {
		rpc_fail(r, TOGGLE_EINVAL, "wait of %u ms is over the limit of %u ms", m->wait_ms,
			 TGP_MAX_WAIT_MS);
		return;
	}
	if (m->aligned) {
		set_aligned(p, req, r);
		return;
	}
	if (m->aligned_margin) {
		rpc_fail(r, TOGGLE_EINVAL, "aligned_margin without aligned");
		return;
	}
	struct td_agent **v;
	size_t n;
	if (rpc_targets(p, r, m->target, &v, &n))
		return;
	const char *specs[1] = {m->spec};
	struct td_ctl_err e;
	if (rpc_default_filter(p, r, m->target, v, &n, specs, 1))
		; /* r holds the error */
	else if (td_ctl_set(v, n, m->spec, m->op, &e))
		rpc_fail_ctl(r, &e);
	else if (m->wait_ms > 0)
		wait_reply(p, req->id, r, v, n, m->wait_ms);
	else
		set_reply(r, v, n);
	free(v);
}

void rpc_submit_plan(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	const Toggle__SubmitPlanRequest *m = req->submit_plan;
	struct td_ctl_err e;
	/* Entry errors come before target errors, as they always did. */
	if (td_ctl_plan(NULL, 0, m, &e)) {
		rpc_fail_ctl(r, &e);
		return;
	}
	struct td_agent **v;
	size_t n;
	if (rpc_targets(p, r, m->target, &v, &n))
		return;
	const char *specs[TOGGLE_SHM_PLAN_RING];
	for (size_t k = 0; k < m->n_entries; k++)
		specs[k] = m->entries[k]->spec;
	if (rpc_default_filter(p, r, m->target, v, &n, specs, m->n_entries))
		; /* r holds the error */
	else if (td_ctl_plan(v, n, m, &e))
		rpc_fail_ctl(r, &e);
	else
		ack_after_save(r);
	free(v);
}

void rpc_clear_plan(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	struct td_agent **v;
	size_t n;
	if (rpc_targets(p, r, req->clear_plan->target, &v, &n))
		return;
	td_ctl_clear(v, n);
	ack_after_save(r);
	free(v);
}

/* Fill r with a waiter's answer: the versions when all applied, an error
 * when an agent left or the deadline passed.  false: not yet. */
bool rpc_wait_answer(struct td_daemon *d, const struct td_waiter *w, uint64_t now,
			  struct rpc_reply *r, const char **late, uint64_t *late_ids, size_t max)
{
	size_t n_late = 0, n_named = 0, n_gone = 0, n_refused = 0;
	for (size_t i = 0; i < w->n; i++) {
		struct td_agent *a = td_agent_find(d, w->agent_ids[i]);
		if (a && w->aligned) {
			/* The refusal words are past the counters the poll reads. */
			td_agent_refresh(a);
			if (a->st->aligned_rejected_version == w->versions[i] &&
			    a->st->aligned_rejected != 0) {
				if (n_refused == 0)
					n_named = 0; /* name the agents that refused it */
				n_refused++;
				if (n_named < max) {
					late_ids[n_named] = w->agent_ids[i];
					late[n_named++] = w->names[i];
				}
				continue;
			}
		}
		if (a && !w->aligned && a->st->version_applied >= w->versions[i])
			continue;
		if (a && w->aligned && !w->until_applied && a->st->version_seen >= w->versions[i])
			continue;
		if (a && w->aligned && w->until_applied && a->st->version_applied >= w->versions[i] &&
		    a->st->step >= w->aligned_step)
			continue;
		n_late++;
		n_gone += !a;
		if (n_named < max && !n_refused) {
			late_ids[n_named] = w->agent_ids[i];
			late[n_named++] = w->names[i];
		}
	}
	if (n_refused) {
		r->agents = late;
		r->agent_ids = late_ids;
		r->n_agents = n_named;
		rpc_fail(r, TOGGLE_ELATE,
			 "aligned set for step %lld refused as late by %zu of %zu agents (they had begun "
			 "it when they read it); the other agents run it from step %lld",
			 (long long)w->aligned_step, n_refused, w->n, (long long)w->aligned_step);
		return true;
	}
	r->agents = late;
	r->agent_ids = late_ids;
	r->n_agents = n_named;
	if (n_gone) {
		/* An agent that left will never apply it: say so now, not at the deadline. */
		rpc_fail(r, TOGGLE_ENOAGENT, "%zu of %zu agents left before applying the set", n_gone,
			 w->n);
		return true;
	}
	if (n_late && now < w->deadline_ms)
		return false;
	if (n_late && w->aligned) {
		rpc_fail(r, TOGGLE_ETIMEDOUT,
			 "%zu of %zu agents did not %s the aligned set for step %lld in time (stalled?); "
			 "it stays in their control lane for step %lld", n_late, w->n,
			 w->until_applied ? "run" : "take", (long long)w->aligned_step,
			 (long long)w->aligned_step);
		return true;
	}
	if (n_late) {
		rpc_fail(r, TOGGLE_ETIMEDOUT, "%zu of %zu agents did not apply the set at a replay in time",
			 n_late, w->n);
		return true;
	}
	Toggle__AgentVersion **vp = rpc_set_reply(r, w->n, w->skipped, w->n_skipped);
	if (!vp) {
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
		r->n_agents = 0;
		return true;
	}
	for (size_t i = 0; i < w->n; i++) {
		vp[i]->agent_id = w->agent_ids[i];
		vp[i]->version = w->versions[i];
	}
	if (w->aligned)
		r->u.set.aligned_step = w->aligned_step;
	return true;
}

