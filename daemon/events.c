/*
 * events.c - what watchers and waiters learn from the agents: events
 * (joined, left, set applied, plan rejected, anomalies) to every peer that
 * watches a matching selector.  The status timer polls the agents' status
 * lanes: fast while someone waits, slowly while agents exist.  After each
 * full poll it reports so (report.h): the dispatcher answers the waiters of
 * `set --wait` whose agents applied their version, left, or whose deadline
 * passed.  The events go to the watchers through report.h too: events.c is
 * state, below the server, and calls nothing above it.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toggled.h"

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
			td_report_send(p, &env);
	}
}

/* An agent joined or is leaving (agents.c's report): the watchers hear it.  A
 * joining agent's event comes after the cluster applied its set to it (the
 * cluster subscribes as an applier): it carries that version. */
static void events_on_change(void *arg, const struct td_change *ch)
{
	(void)arg;
	struct td_agent *a = ch->a;
	if (ch->kind == TD_AGENT_JOINED) {
		td_event(ch->d, a, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_JOINED, a->ctl.version,
			 a->st->step, NULL);
		td_timer_update(ch->d);
	} else if (ch->kind == TD_AGENT_LEFT) {
		td_event(ch->d, a, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_LEFT, a->ctl.version,
			 a->st->step, NULL);
	}
}

static void on_status_timer(uv_timer_t *t);

int td_events_init(struct td_daemon *d)
{
	uv_timer_init(d->loop, &d->status_timer);
	d->status_timer.data = d;
	return td_report_subscribe(d, TD_SUB_OBSERVE, events_on_change, NULL);
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
	/* The waiters whose time came are answered (dispatch.c). */
	td_report_change(d, TD_AGENTS_POLLED, NULL);
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
