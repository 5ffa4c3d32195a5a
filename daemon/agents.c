/*
 * agents.c - the daemon's agent registry: registration (validated, shared
 * memory attached), selectors, writing control lanes, reading status lanes,
 * and the desired state copied to the store and restored from it.  What
 * changes in the status lanes becomes events and answered waits in
 * events.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "toggled.h"
#include "util.h"

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

/*
 * d->by_id holds the agents in id order.  Ids only grow, so registering
 * appends; a write to one agent (the common case) finds it by binary search
 * instead of walking every agent (issue 17: that walk was the largest part
 * of a set's cost with 256 agents).
 */
static size_t by_id_lower(const struct td_daemon *d, uint64_t id)
{
	size_t lo = 0, hi = d->n_agents;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (d->by_id[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Before a is linked (d->n_agents does not count it yet). */
static int by_id_add(struct td_daemon *d, struct td_agent *a)
{
	if (d->n_agents == d->by_id_cap) {
		size_t cap = d->by_id_cap ? 2 * d->by_id_cap : 64;
		struct td_agent **v = realloc(d->by_id, cap * sizeof(*v));
		if (!v)
			return TOGGLE_ENOMEM;
		d->by_id = v;
		d->by_id_cap = cap;
	}
	d->by_id[d->n_agents] = a; /* the newest id is the largest */
	return 0;
}

/* Before a is unlinked (d->n_agents still counts it). */
static void by_id_remove(struct td_daemon *d, const struct td_agent *a)
{
	size_t i = by_id_lower(d, a->id);
	if (i < d->n_agents && d->by_id[i] == a)
		memmove(&d->by_id[i], &d->by_id[i + 1], (d->n_agents - i - 1) * sizeof(*d->by_id));
}

size_t td_agent_index(const struct td_daemon *d, uint64_t id)
{
	return by_id_lower(d, id);
}

struct td_agent *td_agent_find(struct td_daemon *d, uint64_t id)
{
	size_t i = by_id_lower(d, id);
	return i < d->n_agents && d->by_id[i]->id == id ? d->by_id[i] : NULL;
}

int td_agents_select(struct td_daemon *d, const struct td_selector *s, struct td_agent ***out,
		     size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!d->n_agents)
		return TOGGLE_ENOAGENT;
	if (s->kind == SEL_AGENT) {
		struct td_agent *a = td_agent_find(d, s->agent_id);
		if (!a)
			return TOGGLE_ENOAGENT;
		if (!(*out = malloc(sizeof(**out))))
			return TOGGLE_ENOMEM;
		(*out)[0] = a;
		*n = 1;
		return 0;
	}
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

/*
 * Step rate for aligned changes: sampled from the status poll, at least
 * TD_ALIGN_RATE_MS apart.  The step is the agent's word: a step that went
 * back or jumped is believed only up to TD_ALIGN_MAX_RATE.
 */
void td_agent_rate_sample(struct td_agent *a, uint64_t now_ms)
{
	int64_t step = a->st->step;
	if (!a->rate_ms || step < a->rate_step) {
		a->rate_ms = now_ms;
		a->rate_step = step;
		a->steps_per_s = 0;
		return;
	}
	uint64_t dt = now_ms - a->rate_ms;
	if (dt < TD_ALIGN_RATE_MS)
		return;
	uint64_t ds = (uint64_t)step - (uint64_t)a->rate_step;
	uint64_t max = (uint64_t)TD_ALIGN_MAX_RATE * dt / 1000;
	a->steps_per_s = (ds > max ? max : ds) * 1000 / dt;
	a->rate_known = true;
	a->rate_ms = now_ms;
	a->rate_step = step;
}

static int64_t agent_step(const struct td_agent *a)
{
	return a->st->step;
}

/* Copy this agent's accepted state into the store (commit.c saves it, then publishes it). */
void td_agent_persist(struct td_agent *a)
{
	struct td_store *s = &a->d->store;
	td_commit_touch(a);
	char key[TD_MAX_KEY];
	/* Looked up once: a store entry stays where it is until the daemon exits. */
	if (!a->desired && td_store_key(key, sizeof(key), a->name, a->uid) == 0)
		a->desired = td_store_get(s, key, true);
	struct td_desired *dd = a->desired;
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
			/* The lane's aligned step (read back from the previous daemon)
			 * belongs to the set it carries: another set is written plain. */
			if (memcmp(a->ctl.standing, set.bits, sizeof(set.bits)) != 0)
				a->ctl.standing_flags = 0, a->ctl.standing_step = 0;
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

/* Free an agent's memory and state copies (not its shared memory: unmap that first). */
static void agent_free(struct td_agent *a)
{
	td_agent_state_free(&a->durable);
	td_agent_state_free(&a->saving_state);
	free(a->st);
	free(a->st_tmp);
	free(a->plans);
	free(a);
}

/* An agent's memory, or NULL when out of memory; agent_free frees it. */
static struct td_agent *agent_alloc(void)
{
	struct td_agent *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->st = calloc(1, sizeof(*a->st));
	a->st_tmp = calloc(1, sizeof(*a->st_tmp));
	a->plans = calloc(TD_MAX_PENDING_PLAN, sizeof(*a->plans));
	if (!a->st || !a->st_tmp || !a->plans) {
		agent_free(a);
		return NULL;
	}
	return a;
}

/* Identity and catalog: from the checked request and the peer's credentials. */
static void agent_init(struct td_agent *a, struct td_peer *p, const Toggle__RegisterAgentRequest *m)
{
	a->d = p->d;
	a->peer = p;
	a->id = ++p->d->next_agent_id;
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
	a->connected_ms = util_unix_ms();
}

/* First read of both lanes; watchers hear of what changes after it. */
static void agent_read_lanes(struct td_agent *a)
{
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
	struct td_agent *a = agent_alloc();
	if (!a)
		return TOGGLE_ENOMEM;
	rc = toggle_shm_attach(p->pending_fd, &a->shm, err, errlen);
	close(p->pending_fd);
	p->pending_fd = -1;
	if (rc) {
		agent_free(a);
		return rc;
	}
	agent_init(a, p, m);
	if (by_id_add(d, a) != 0) {
		agent_free(a);
		return TOGGLE_ENOMEM;
	}
	agent_read_lanes(a);
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
	by_id_remove(d, a);
	if (a->prev)
		a->prev->next = a->next;
	else
		d->agents = a->next;
	if (a->next)
		a->next->prev = a->prev;
	d->n_agents--;
	if (a->peer)
		a->peer->agent = NULL;
	td_commit_forget_agent(a);
	td_record_agent_gone(a);
	toggle_shm_unmap(&a->shm);
	agent_free(a);
}
