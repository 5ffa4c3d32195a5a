/*
 * events.c - what watchers and waiters learn from the agents: events
 * (joined, left, set applied, plan rejected, anomalies) to every peer that
 * watches a matching selector, and the answers of `set --wait` once each
 * agent applied its version, left, or the deadline passed.  The status
 * timer polls the agents' status lanes for both: fast while someone waits,
 * slowly while agents exist.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

void td_event(struct td_daemon *d, const struct td_agent *a, Toggle__EventKind kind,
	      uint64_t version, int64_t step, const char *msg)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__Event ev = TOGGLE__EVENT__INIT;
	env.id = 0;
	env.body_case = TOGGLE__ENVELOPE__BODY_EVENT;
	env.event = &ev;
	ev.kind = kind;
	ev.agent_id = a->id;
	ev.agent_name = (char *)(uintptr_t)a->name;
	ev.version = version;
	ev.step = step;
	ev.message = (char *)(uintptr_t)msg;
	ev.unix_ms = util_unix_ms();
	for (struct td_peer *p = d->peers, *next; p; p = next) {
		next = p->next; /* sending may drop a slow watcher */
		if (p->watching && td_selector_match(&p->watch_sel, a))
			td_peer_send(p, &env);
	}
}

/* Compare the fresh status with what watchers were last told: applied
 * versions, rejected plans and anomalies become events. */
static void agent_events(struct td_agent *a)
{
	struct toggle_shm_status *s = a->st;
	if (s->version_applied != a->ev_applied && s->version_applied)
		td_event(a->d, a, TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED, s->version_applied, s->step, NULL);
	a->ev_applied = s->version_applied;
	if (s->plan_rejected != a->ev_rejected) {
		char msg[128];
		snprintf(msg, sizeof(msg), "plan batch %llu rejected: step %lld had already begun",
			 (unsigned long long)s->plan_rejected_batch, (long long)s->plan_rejected_step);
		td_event(a->d, a, TOGGLE__EVENT_KIND__EVENT_KIND_PLAN_REJECTED, a->ctl.version,
			 s->plan_rejected_step, msg);
		a->ev_rejected = s->plan_rejected;
	}
	uint64_t sum = 0;
	for (int i = 0; i < TOGGLE_SHM_AN_COUNT; i++)
		sum += s->anomalies[i];
	if (sum != a->st_anomalies) {
		char msg[64];
		snprintf(msg, sizeof(msg), "%llu anomalies in all", (unsigned long long)sum);
		td_event(a->d, a, TOGGLE__EVENT_KIND__EVENT_KIND_ANOMALY, a->ctl.version, s->step, msg);
		a->st_anomalies = sum;
	}
}

void td_waiter_free(struct td_waiter *w)
{
	for (size_t i = 0; i < w->n_skipped; i++)
		free(w->skipped[i]);
	free(w->skipped);
	free(w->names);
	free(w->agent_ids);
	free(w->versions);
	free(w);
}

/* Fill r with a waiter's answer: the versions when all applied, an error
 * when an agent left or the deadline passed.  false: not yet. */
static bool waiter_answer(struct td_daemon *d, const struct td_waiter *w, uint64_t now,
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

/* Answer a waiter through the dispatcher if its time came; true when answered. */
static bool waiter_try(struct td_daemon *d, struct td_waiter *w, uint64_t now)
{
	const char *late[64];
	uint64_t late_ids[64];
	struct rpc_reply r;
	rpc_reply_init(&r);
	if (!waiter_answer(d, w, now, &r, late, late_ids, 64)) {
		rpc_reply_free(&r);
		return false;
	}
	td_dispatch_reply(w->peer, w->request_id, &r);
	return true;
}

/* The counters only: the set and graph records are read by queries. */
static void agent_poll(struct td_agent *a)
{
	if (toggle_shm_status_read_head(a->shm.st, a->st_tmp) != 0)
		return;
	memcpy(&a->st->step, &a->st_tmp->step,
	       offsetof(struct toggle_shm_status, current) - offsetof(struct toggle_shm_status, step));
	td_agent_rate_sample(a, util_mono_ms());
	agent_events(a);
}

/*
 * How the idle poll is spread: many agents are read a slice per tick, so
 * no tick reads hundreds of lanes at once while requests wait (issue 17),
 * and every agent is still read every TD_POLL_IDLE_MS.
 */
static void poll_plan(size_t n_agents, uint64_t *interval_ms, size_t *per_tick)
{
	size_t slices = (n_agents + TD_POLL_SLICE - 1) / TD_POLL_SLICE;
	if (slices < 1)
		slices = 1;
	if (slices > TD_POLL_IDLE_MS)
		slices = TD_POLL_IDLE_MS;
	*interval_ms = TD_POLL_IDLE_MS / slices;
	*per_tick = (n_agents + slices - 1) / slices;
}

/* One idle tick: the next slice of agents in id order, wrapping around. */
static void agents_poll_slice(struct td_daemon *d)
{
	uint64_t interval;
	size_t per_tick;
	poll_plan(d->n_agents, &interval, &per_tick);
	size_t i = td_agent_index(d, d->poll_next_id);
	for (size_t k = 0; k < per_tick && d->n_agents; k++, i++) {
		if (i >= d->n_agents)
			i = 0;
		struct td_agent *a = d->by_id[i];
		d->poll_next_id = a->id + 1;
		agent_poll(a);
	}
	td_timer_update(d);
}

void td_agents_poll(struct td_daemon *d)
{
	for (struct td_agent *a = d->agents; a; a = a->next)
		agent_poll(a);
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
	td_timer_update(d);
}

static void on_status_timer(uv_timer_t *t)
{
	struct td_daemon *d = t->data;
	if (d->waiters)
		td_agents_poll(d);
	else
		agents_poll_slice(d);
}

/* Poll every agent fast while someone waits, a slice at a time while agents exist. */
void td_timer_update(struct td_daemon *d)
{
	uint64_t want = 0;
	size_t per_tick;
	if (d->waiters)
		want = TD_POLL_WAIT_MS;
	else if (d->n_agents)
		poll_plan(d->n_agents, &want, &per_tick);
	if (!uv_is_active((uv_handle_t *)&d->status_timer)) {
		if (want)
			uv_timer_start(&d->status_timer, on_status_timer, want, want);
		return;
	}
	if (!want)
		uv_timer_stop(&d->status_timer);
	else if (uv_timer_get_repeat(&d->status_timer) != want)
		uv_timer_start(&d->status_timer, on_status_timer, want, want);
}
