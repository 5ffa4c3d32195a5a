/*
 * agents.c - the daemon's agent registry: registration (validated, shared
 * memory attached), selectors, writing control lanes, reading status lanes,
 * and turning what changed there into events and answered waits.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "toggled.h"
#include "util.h"

uint64_t td_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t unix_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool name_ok(const char *s)
{
	/* "." and ".." name directories, not state files (issue 11 item 8). */
	return util_name_ok(s, TGP_MAX_NAME);
}

int td_selector_parse(const Toggle__Selector *m, struct td_selector *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	out->kind = SEL_ALL;
	if (!m)
		return 0;
	switch (m->sel_case) {
	case TOGGLE__SELECTOR__SEL__NOT_SET:
	case TOGGLE__SELECTOR__SEL_ALL:
		return 0;
	case TOGGLE__SELECTOR__SEL_AGENT_ID:
		out->kind = SEL_AGENT;
		out->agent_id = m->agent_id;
		return 0;
	case TOGGLE__SELECTOR__SEL_PID:
		out->kind = SEL_PID;
		out->pid = m->pid;
		return 0;
	case TOGGLE__SELECTOR__SEL_GROUP:
		if (!name_ok(m->group)) {
			snprintf(err, errlen, "bad group name in selector (expected [A-Za-z0-9_.-], 1-%d bytes)",
				 TGP_MAX_NAME - 1);
			return TOGGLE_EINVAL;
		}
		out->kind = SEL_GROUP;
		snprintf(out->group, sizeof(out->group), "%s", m->group);
		return 0;
	default:
		snprintf(err, errlen, "unknown selector kind %d", (int)m->sel_case);
		return TOGGLE_EINVAL;
	}
}

bool td_selector_match(const struct td_selector *s, const struct td_agent *a)
{
	switch (s->kind) {
	case SEL_ALL: return true;
	case SEL_AGENT: return a->id == s->agent_id;
	case SEL_PID: return a->pid == s->pid;
	case SEL_GROUP: return strcmp(a->group, s->group) == 0;
	}
	return false;
}

int td_agents_select(struct td_daemon *d, const struct td_selector *s, struct td_agent ***out,
		     size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!d->n_agents)
		return TOGGLE_ENOAGENT;
	struct td_agent **v = calloc(d->n_agents, sizeof(*v));
	if (!v)
		return TOGGLE_ENOMEM;
	/* Oldest first: the list is newest first. */
	for (struct td_agent *a = d->agents; a; a = a->next)
		if (td_selector_match(s, a))
			v[(*n)++] = a;
	for (size_t i = 0; i < *n / 2; i++) {
		struct td_agent *t = v[i];
		v[i] = v[*n - 1 - i];
		v[*n - 1 - i] = t;
	}
	if (!*n) {
		free(v);
		return TOGGLE_ENOAGENT;
	}
	*out = v;
	return 0;
}

void td_agent_write_control(struct td_agent *a)
{
	toggle_shm_control_write(a->shm.ctl, &a->ctl);
}

/* a->st keeps the last consistent snapshot: a torn or refused read never
 * replaces it (st_valid says whether the latest read succeeded). */
void td_agent_refresh(struct td_agent *a)
{
	int rc = toggle_shm_status_read(a->shm.st, a->st_tmp);
	a->st_valid = rc == 0;
	if (a->st_valid) {
		struct toggle_shm_status *t = a->st;
		a->st = a->st_tmp;
		a->st_tmp = t;
	}
}

static int64_t agent_step(const struct td_agent *a)
{
	return a->st->step;
}

/* Copy this agent's accepted state into the store (commit.c saves it, then publishes it). */
void td_agent_persist(struct td_agent *a)
{
	struct td_store *s = &a->d->store;
	a->unsaved = true;
	char key[TD_MAX_KEY];
	struct td_desired *dd = td_store_key(key, sizeof(key), a->name, a->uid) == 0
					? td_store_get(s, key, true) : NULL;
	if (!dd) {
		log_warnx("agent %s: desired state not stored (store full or no memory)", a->name);
		return;
	}
	char *spec = malloc(TGP_MAX_SPEC + 1);
	int64_t *steps = calloc(a->n_plans ? a->n_plans : 1, sizeof(*steps));
	char **specs = calloc(a->n_plans ? a->n_plans : 1, sizeof(*specs));
	size_t n = 0;
	bool ok = spec && steps && specs;
	if (ok && a->has_standing) {
		struct toggle_set st;
		memcpy(st.bits, a->ctl.standing, sizeof(st.bits));
		toggle_set_format(&a->cat, &st, spec, TGP_MAX_SPEC + 1);
		ok = td_desired_set_standing(dd, spec) == 0;
	}
	int64_t now = agent_step(a);
	for (size_t i = 0; ok && i < a->n_plans; i++) {
		if (a->plans[i].step <= now)
			continue; /* begun: nothing left to restore */
		specs[n] = malloc(TGP_MAX_SPEC + 1);
		if (!specs[n]) {
			ok = false;
			break;
		}
		toggle_set_format(&a->cat, &a->plans[i].set, specs[n], TGP_MAX_SPEC + 1);
		steps[n++] = a->plans[i].step;
	}
	if (ok)
		ok = td_desired_set_plans(dd, steps, specs, n) == 0;
	if (!ok)
		log_warnx("agent %s: desired state not stored (no memory)", a->name);
	for (size_t i = 0; i < n; i++)
		free(specs[i]);
	free(specs);
	free(steps);
	free(spec);
}

/*
 * After a daemon restart (or a reconnection): push the saved desired state
 * to the agent again.  Saved means in its file: a change whose save is still
 * in flight is not pushed from here.
 */
static void agent_restore(struct td_agent *a)
{
	/* Keyed by name and uid: another user's agent of the same name gets nothing of it. */
	char key[TD_MAX_KEY];
	if (td_store_key(key, sizeof(key), a->name, a->uid) != 0)
		return;
	struct td_desired *dd = td_store_get(&a->d->store, key, false);
	if (!dd)
		return;
	char err[256];
	struct toggle_set set;
	if (dd->saved_standing) {
		if (toggle_set_parse(&a->cat, dd->saved_standing, &set, err, sizeof(err)) == 0) {
			memcpy(a->ctl.standing, set.bits, sizeof(set.bits));
			a->ctl.version++;
			a->has_standing = true;
		} else {
			log_warnx("agent %s: saved set '%s' does not fit its catalog: %s", a->name,
				  dd->saved_standing, err);
		}
	}
	int64_t now = agent_step(a);
	uint64_t used = a->ctl.plan_head - a->st->plan_consumed;
	uint64_t room = used > TOGGLE_SHM_PLAN_RING ? 0 : TOGGLE_SHM_PLAN_RING - used;
	for (size_t i = 0; i < dd->saved_n_plans && room > 0; i++) {
		if (dd->saved_steps[i] <= now ||
		    toggle_set_parse(&a->cat, dd->saved_specs[i], &set, err, sizeof(err)) != 0 ||
		    a->n_plans >= TD_MAX_PENDING_PLAN)
			continue;
		struct toggle_shm_plan_slot slot = {.batch = ++a->next_batch, .batch_len = 1,
						    .step = dd->saved_steps[i]};
		memcpy(slot.set, set.bits, sizeof(slot.set));
		toggle_shm_plan_slot_write(a->shm.ctl, a->ctl.plan_head++, &slot);
		a->plans[a->n_plans++] = (struct td_plan_entry){.step = dd->saved_steps[i], .set = set};
		room--;
	}
	td_agent_write_control(a);
	log_info("agent %s (id %llu): restored its desired state (version %llu, %zu plan entries)",
		 a->name, (unsigned long long)a->id, (unsigned long long)a->ctl.version, a->n_plans);
}

static int agent_check_register(const Toggle__RegisterAgentRequest *m, char *err, size_t errlen)
{
	if (!name_ok(m->name)) {
		snprintf(err, errlen, "bad agent name (expected [A-Za-z0-9_.-], 1-%d bytes, not . or ..)",
			 TGP_MAX_NAME - 1);
		return TOGGLE_EINVAL;
	}
	if (m->group && m->group[0] && !name_ok(m->group)) {
		snprintf(err, errlen, "bad group name");
		return TOGGLE_EINVAL;
	}
	if (m->mode > 2) {
		snprintf(err, errlen, "unknown mode %u", m->mode);
		return TOGGLE_EINVAL;
	}
	if (m->n_hook_types == 0 || m->n_hook_types > TOGGLE_MAX_HOOK_TYPES || m->n_layers == 0 ||
	    m->n_layers > TOGGLE_MAX_LAYERS) {
		snprintf(err, errlen, "catalog of %zu hook types x %u layers is out of bounds (1-%d x 1-%d)",
			 m->n_hook_types, m->n_layers, TOGGLE_MAX_HOOK_TYPES, TOGGLE_MAX_LAYERS);
		return TOGGLE_ERANGE;
	}
	struct toggle_catalog cat = {.type_names = (const char *const *)m->hook_types,
				     .n_types = (uint16_t)m->n_hook_types,
				     .n_layers = (uint16_t)m->n_layers};
	return toggle_catalog_validate(&cat, err, errlen);
}

int td_agent_register(struct td_peer *p, const Toggle__RegisterAgentRequest *m, uint64_t *id, char *err,
		      size_t errlen)
{
	struct td_daemon *d = p->d;
	if (p->agent) {
		snprintf(err, errlen, "this connection already registered agent %llu",
			 (unsigned long long)p->agent->id);
		return TOGGLE_EPROTO;
	}
	if (p->pending_fd < 0) {
		snprintf(err, errlen, "RegisterAgent came without its shared-memory fd (SCM_RIGHTS)");
		return TOGGLE_ESHM;
	}
	int rc = agent_check_register(m, err, errlen);
	if (rc)
		return rc;
	if (m->group && m->group[0] &&
	    td_auth_group_denied(d, m->group, p->uid, p->gid, p->pid, err, errlen))
		return TOGGLE_EPERM;
	struct td_agent *a = calloc(1, sizeof(*a));
	if (a) {
		a->st = calloc(1, sizeof(*a->st));
		a->st_tmp = calloc(1, sizeof(*a->st_tmp));
		a->plans = calloc(TD_MAX_PENDING_PLAN, sizeof(*a->plans));
	}
	if (!a || !a->st || !a->st_tmp || !a->plans) {
		if (a) {
			free(a->st);
			free(a->st_tmp);
			free(a->plans);
		}
		free(a);
		return TOGGLE_ENOMEM;
	}
	rc = toggle_shm_attach(p->pending_fd, &a->shm, err, errlen);
	close(p->pending_fd);
	p->pending_fd = -1;
	if (rc) {
		free(a->st);
		free(a->st_tmp);
		free(a->plans);
		free(a);
		return rc;
	}
	a->d = d;
	a->peer = p;
	a->id = ++d->next_agent_id;
	snprintf(a->name, sizeof(a->name), "%s", m->name);
	snprintf(a->group, sizeof(a->group), "%s", m->group ? m->group : "");
	for (size_t i = 0; i < m->n_hook_types; i++) {
		snprintf(a->type_names[i], sizeof(a->type_names[i]), "%s", m->hook_types[i]);
		a->type_ptrs[i] = a->type_names[i];
	}
	a->cat = (struct toggle_catalog){.type_names = a->type_ptrs,
					 .n_types = (uint16_t)m->n_hook_types,
					 .n_layers = (uint16_t)m->n_layers};
	a->pid = p->pid;
	a->uid = p->uid;
	a->mode = m->mode;
	a->driver_version = m->driver_version;
	a->connected_ms = unix_ms();
	/* Continue the lane where a previous daemon left it. */
	if (toggle_shm_control_read(a->shm.ctl, &a->ctl) != 0)
		memset(&a->ctl, 0, sizeof(a->ctl));
	a->st->step = -1;
	td_agent_refresh(a);
	a->st_anomalies = 0;
	for (int i = 0; i < TOGGLE_SHM_AN_COUNT; i++)
		a->st_anomalies += a->st->anomalies[i];
	a->ev_applied = a->st->version_applied;
	a->ev_rejected = a->st->plan_rejected;
	a->next = d->agents;
	if (d->agents)
		d->agents->prev = a;
	d->agents = a;
	d->n_agents++;
	p->agent = a;
	agent_restore(a);
	/* What the lane shows now is durable: a failed save rolls back to it. */
	if (td_agent_state_copy(&a->durable, a) != 0)
		log_warnx("agent %s: no memory for its durable state copy; a failed save "
			  "rolls it back to no plans", a->name);
	td_cluster_agent_joined(a);
	*id = a->id;
	log_info("agent %s (id %llu, pid %u, uid %u, group '%s') registered: %u hook types x %u layers",
		 a->name, (unsigned long long)a->id, a->pid, a->uid, a->group, a->cat.n_types,
		 a->cat.n_layers);
	td_event(d, a, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_JOINED, a->ctl.version, agent_step(a), NULL);
	td_timer_update(d);
	return 0;
}

void td_agent_gone(struct td_agent *a)
{
	struct td_daemon *d = a->d;
	log_info("agent %s (id %llu) left", a->name, (unsigned long long)a->id);
	td_event(d, a, TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_LEFT, a->ctl.version, agent_step(a), NULL);
	if (a->prev)
		a->prev->next = a->next;
	else
		d->agents = a->next;
	if (a->next)
		a->next->prev = a->prev;
	d->n_agents--;
	if (a->peer)
		a->peer->agent = NULL;
	toggle_shm_unmap(&a->shm);
	td_agent_state_free(&a->durable);
	td_agent_state_free(&a->saving_state);
	free(a->st);
	free(a->st_tmp);
	free(a->plans);
	free(a);
}

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
	ev.unix_ms = unix_ms();
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

static struct td_agent *agent_by_id(struct td_daemon *d, uint64_t id)
{
	for (struct td_agent *a = d->agents; a; a = a->next)
		if (a->id == id)
			return a;
	return NULL;
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

/* Answer a waiter: the versions when all applied, else a timeout error. */
static bool waiter_try(struct td_daemon *d, struct td_waiter *w, uint64_t now)
{
	const char *late[64];
	uint64_t late_ids[64];
	size_t n_late = 0, n_named = 0, n_gone = 0;
	for (size_t i = 0; i < w->n; i++) {
		struct td_agent *a = agent_by_id(d, w->agent_ids[i]);
		if (a && a->st->version_applied >= w->versions[i])
			continue;
		n_late++;
		n_gone += !a;
		if (n_named < 64) {
			late_ids[n_named] = w->agent_ids[i];
			late[n_named++] = w->names[i];
		}
	}
	if (n_gone) {
		/* An agent that left will never apply it: say so now, not at the deadline. */
		char msg[128];
		snprintf(msg, sizeof(msg), "%zu of %zu agents left before applying the set", n_gone, w->n);
		td_peer_send_error_ids(w->peer, w->request_id, TOGGLE_ENOAGENT, msg, late, late_ids,
				       n_named);
		return true;
	}
	if (n_late && now < w->deadline_ms)
		return false;
	if (n_late) {
		char msg[128];
		snprintf(msg, sizeof(msg), "%zu of %zu agents did not apply the set at a replay in time",
			 n_late, w->n);
		td_peer_send_error_ids(w->peer, w->request_id, TOGGLE_ETIMEDOUT, msg, late, late_ids,
				       n_named);
		return true;
	}
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__SetEnabledReply rep = TOGGLE__SET_ENABLED_REPLY__INIT;
	Toggle__AgentVersion *vs = calloc(w->n, sizeof(*vs));
	Toggle__AgentVersion **vp = calloc(w->n, sizeof(*vp));
	if (vs && vp) {
		for (size_t i = 0; i < w->n; i++) {
			toggle__agent_version__init(&vs[i]);
			vs[i].agent_id = w->agent_ids[i];
			vs[i].version = w->versions[i];
			vp[i] = &vs[i];
		}
		env.id = w->request_id;
		env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY;
		env.set_enabled_reply = &rep;
		rep.n_versions = w->n;
		rep.versions = vp;
		rep.n_skipped = w->n_skipped;
		rep.skipped = w->skipped;
		td_peer_send(w->peer, &env);
	} else {
		td_peer_send_error(w->peer, w->request_id, TOGGLE_ENOMEM, "out of memory", NULL, 0);
	}
	free(vs);
	free(vp);
	return true;
}

void td_agents_poll(struct td_daemon *d)
{
	for (struct td_agent *a = d->agents, *next; a; a = next) {
		next = a->next;
		/* The counters only: the set and graph records are read by queries. */
		if (toggle_shm_status_read_head(a->shm.st, a->st_tmp) != 0)
			continue;
		memcpy(&a->st->step, &a->st_tmp->step,
		       offsetof(struct toggle_shm_status, current) - offsetof(struct toggle_shm_status, step));
		agent_events(a);
	}
	uint64_t now = td_now_ms();
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
	td_agents_poll(t->data);
}

/* Poll fast while someone waits, slowly while agents or watchers exist. */
void td_timer_update(struct td_daemon *d)
{
	uint64_t want = d->waiters ? TD_POLL_WAIT_MS : (d->n_agents ? TD_POLL_IDLE_MS : 0);
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
