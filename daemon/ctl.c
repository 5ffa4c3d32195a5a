/*
 * ctl.c - the validate-then-apply core of the writes: SetEnabled (plain and
 * aligned), SubmitPlan and ClearPlan, shared by the RPC handlers
 * (rpc_control.c) and the cluster layer (cluster.c), which both call down
 * into it.
 *
 * Every command is checked against every target before anything is
 * written: a spec that does not parse for one agent, a step one agent has
 * already begun, or a full plan ring rejects the whole command.  Then the
 * command is applied to each target's accepted state and to the store
 * (td_commit_accept); the control lanes are written by commit.c once the
 * save that holds it succeeded.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toggled.h"

/* One plan fits the agent's ring whole; the daemon never remembers more
 * pending entries than the agent can hold. */
_Static_assert(TGP_MAX_PLAN_ENTRIES == TOGGLE_SHM_PLAN_RING, "a plan is at most one ring");
_Static_assert(TGP_MAX_PLAN_ENTRIES <= TD_MAX_PENDING_PLAN, "a plan fits the pending limit");

/* Record an error (and the agent it names, if any) for the caller to report. */
static int ctl_err(struct td_ctl_err *e, int code, const struct td_agent *a, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int ctl_err(struct td_ctl_err *e, int code, const struct td_agent *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	e->code = code;
	snprintf(e->agent, sizeof(e->agent), "%s", a ? a->name : "");
	e->agent_id = a ? a->id : 0;
	return code;
}

/* Parse spec against one agent's catalog; on error name the agent. */
static int parse_for(struct td_ctl_err *e, const struct td_agent *a, const char *spec,
		     struct toggle_set *out)
{
	char err[256];
	if (!spec || strlen(spec) > TGP_MAX_SPEC)
		return ctl_err(e, TOGGLE_ESPEC, NULL, "hook spec missing or too long");
	int rc = toggle_set_parse(&a->cat, spec, out, err, sizeof(err));
	if (rc)
		ctl_err(e, rc, a, "agent %s (id %llu): %s", a->name, (unsigned long long)a->id, err);
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

/*
 * Check spec and op against every target, then apply to all: each agent's
 * accepted standing set is replaced (or added to, or subtracted from), its
 * version raised and its desired state marked for saving.  Nothing is
 * applied when one target fails.  No control lane is written here: commit.c
 * writes it once the save holding this succeeded.  The cluster layer
 * (cluster.c) applies what etcd says through this same function.
 */
static int ctl_set(struct td_agent **v, size_t n, const char *spec, Toggle__SetOp op,
		   int64_t aligned_step, struct td_ctl_err *e);

int td_ctl_set(struct td_agent **v, size_t n, const char *spec, Toggle__SetOp op,
	       struct td_ctl_err *e)
{
	return ctl_set(v, n, spec, op, -1, e);
}

int td_ctl_set_aligned(struct td_agent **v, size_t n, const char *spec, Toggle__SetOp op,
		       int64_t step, struct td_ctl_err *e)
{
	return ctl_set(v, n, spec, op, step, e);
}

/* aligned_step -1: a plain set (at each agent's next step). */
static int ctl_set(struct td_agent **v, size_t n, const char *spec, Toggle__SetOp op,
		   int64_t aligned_step, struct td_ctl_err *e)
{
	if (op != TOGGLE__SET_OP__SET_OP_REPLACE && op != TOGGLE__SET_OP__SET_OP_ADD && op != TOGGLE__SET_OP__SET_OP_REMOVE)
		return ctl_err(e, TOGGLE_EINVAL, NULL, "unknown set operation");
	struct toggle_set *next = calloc(n ? n : 1, sizeof(*next));
	if (!next)
		return ctl_err(e, TOGGLE_ENOMEM, NULL, "out of memory");
	/* Check all, then apply all. */
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		struct toggle_set arg;
		rc = parse_for(e, v[i], spec, &arg);
		if (rc)
			break;
		td_agent_refresh(v[i]);
		/* add/remove start from what the agent runs if the daemon never set it. */
		memcpy(next[i].bits, v[i]->has_standing ? v[i]->ctl.standing : v[i]->st->current,
		       sizeof(next[i].bits));
		set_apply_op(&next[i], &arg, op);
	}
	for (size_t i = 0; i < n && !rc; i++) {
		struct td_agent *a = v[i];
		memcpy(a->ctl.standing, next[i].bits, sizeof(a->ctl.standing));
		a->ctl.standing_step = aligned_step < 0 ? 0 : aligned_step;
		a->ctl.standing_flags = aligned_step < 0 ? 0 : TOGGLE_SHM_STANDING_ALIGNED;
		a->ctl.version++;
		a->has_standing = true;
		td_commit_accept(a);
	}
	free(next);
	return rc;
}

/*
 * An aligned set's step: one no target has begun, checked against every
 * target first (all or nothing).  Each target's status lane is the agent's
 * word, so a step is bounded before it is added to and the targets must lie
 * within TD_ALIGN_MAX_SPREAD steps of each other: one agent reporting a
 * huge step cannot push the change out of reach of the others.
 */
int td_ctl_align(struct td_agent **v, size_t n, uint32_t margin_req, int64_t *out,
		 uint32_t *margin_out, struct td_ctl_err *e)
{
	if (n == 0)
		return ctl_err(e, TOGGLE_ENOAGENT, NULL, "no agent to align the set for");
	struct td_agent *lo = NULL, *hi = NULL;
	uint64_t rate = 0;
	for (size_t i = 0; i < n; i++) {
		struct td_agent *a = v[i];
		td_agent_refresh(a);
		if (!a->st_valid)
			return ctl_err(e, TOGGLE_ESHM, a,
				       "agent %s (id %llu): its status lane cannot be read; cannot align to it",
				       a->name, (unsigned long long)a->id);
		if (!(a->st->features & TOGGLE_SHM_FEAT_ALIGNED))
			return ctl_err(e, TOGGLE_ENOTSUP, a,
				       "agent %s (id %llu) runs a libtoggle without aligned changes "
				       "(upgrade it, or set without --aligned)",
				       a->name, (unsigned long long)a->id);
		if (a->st->step < 0)
			return ctl_err(e, TOGGLE_EINVAL, a,
				       "agent %s (id %llu) has not begun a step: an aligned set needs "
				       "steps (toggle_step_begin) on every target",
				       a->name, (unsigned long long)a->id);
		/* The agent holds one aligned set until its step: a second one
		 * would replace it there unseen, so it waits for the first. */
		if ((a->ctl.standing_flags & TOGGLE_SHM_STANDING_ALIGNED) &&
		    a->st->step < a->ctl.standing_step)
			return ctl_err(e, TOGGLE_EBUSY, a,
				       "agent %s (id %llu) is at step %lld and has not yet begun step "
				       "%lld of the previous aligned set: retry after it (a set without "
				       "--aligned replaces it)",
				       a->name, (unsigned long long)a->id, (long long)a->st->step,
				       (long long)a->ctl.standing_step);
		/* One catalog: the same spec must name the same hooks on every rank. */
		const struct td_agent *f = v[0];
		bool same = a->cat.n_types == f->cat.n_types && a->cat.n_layers == f->cat.n_layers;
		for (uint16_t t = 0; same && t < a->cat.n_types; t++)
			same = strcmp(a->type_names[t], f->type_names[t]) == 0;
		if (!same)
			return ctl_err(e, TOGGLE_EINVAL, a,
				       "agent %s (id %llu) has another catalog than agent %s (id %llu) "
				       "(%u hook types x %u layers, against %u x %u, or other names): an "
				       "aligned set needs one catalog on every target",
				       a->name, (unsigned long long)a->id, f->name,
				       (unsigned long long)f->id, a->cat.n_types, a->cat.n_layers,
				       f->cat.n_types, f->cat.n_layers);
		if (!lo || a->st->step < lo->st->step)
			lo = a;
		if (!hi || a->st->step > hi->st->step)
			hi = a;
		if (a->steps_per_s > rate)
			rate = a->steps_per_s;
	}
	if (hi->st->step - lo->st->step > TD_ALIGN_MAX_SPREAD)
		return ctl_err(e, TOGGLE_ERANGE, hi,
			       "agent %s (id %llu) reports step %lld, agent %s (id %llu) step %lld: more "
			       "than %d steps apart, an aligned set would wait that long on the one behind",
			       hi->name, (unsigned long long)hi->id, (long long)hi->st->step, lo->name,
			       (unsigned long long)lo->id, (long long)lo->st->step, TD_ALIGN_MAX_SPREAD);
	uint64_t margin = margin_req;
	for (size_t i = 0; i < n && margin == 0; i++)
		if (!v[i]->rate_known) /* 4 steps could be too few for a fast engine */
			return ctl_err(e, TOGGLE_EBUSY, v[i],
				       "agent %s (id %llu) registered too recently for its step rate to "
				       "be measured (%d ms): retry, or give the margin (--aligned=+N)",
				       v[i]->name, (unsigned long long)v[i]->id, TD_ALIGN_RATE_MS);
	if (margin == 0) {
		margin = (rate * TD_ALIGN_LEAD_MS + 999) / 1000 + 1;
		if (margin < TD_ALIGN_MIN_MARGIN)
			margin = TD_ALIGN_MIN_MARGIN;
	}
	if (hi->st->step > INT64_MAX - (int64_t)margin)
		return ctl_err(e, TOGGLE_ERANGE, hi,
			       "agent %s (id %llu) reports step %lld: +%llu is out of range",
			       hi->name, (unsigned long long)hi->id, (long long)hi->st->step,
			       (unsigned long long)margin);
	*out = hi->st->step + (int64_t)margin;
	*margin_out = (uint32_t)margin;
	return 0;
}

/*
 * Everything that must hold for one agent before a plan is written.  Steps
 * are resolved here, for this agent: a relative entry (after) is the
 * agent's current step now plus after.
 */
static int plan_check(struct td_ctl_err *e, struct td_agent *a, const Toggle__SubmitPlanRequest *m,
		      struct toggle_set *sets, int64_t *steps)
{
	td_agent_refresh(a);
	int64_t now = a->st->step;
	uint64_t used = a->ctl.plan_head - a->st->plan_consumed;
	for (size_t k = 0; k < m->n_entries; k++) {
		const Toggle__PlanEntry *en = m->entries[k];
		/* now comes from the agent's memory: bound it before adding. */
		if ((en->after != 0) && (now < -1 || now > INT64_MAX - en->after))
			return ctl_err(e, TOGGLE_EINVAL, a,
				       "agent %s (id %llu) reports step %lld: +%lld is out of range",
				       a->name, (unsigned long long)a->id, (long long)now,
				       (long long)en->after);
		steps[k] = (en->after != 0) ? now + en->after : en->step;
		for (size_t j = 0; j < k; j++)
			if (steps[j] == steps[k])
				return ctl_err(e, TOGGLE_EINVAL, a,
					       "plan entries %zu and %zu are both step %lld for agent %s (id %llu)",
					       j, k, (long long)steps[k], a->name, (unsigned long long)a->id);
	}
	for (size_t k = 0; k < m->n_entries; k++) {
		int rc = parse_for(e, a, m->entries[k]->spec, &sets[k]);
		if (rc)
			return rc;
		if (steps[k] <= now)
			return ctl_err(e, TOGGLE_ELATE, a,
				       "plan rejected: agent %s (id %llu) has already begun step %lld (entry for step %lld)",
				       a->name, (unsigned long long)a->id, (long long)now, (long long)steps[k]);
	}
	/* The pending entries the agents table shows (pending_plan, QUEUED). */
	size_t pending = 0;
	for (size_t j = 0; j < a->n_plans; j++)
		pending += a->plans[j].step > now;
	if (pending + m->n_entries > TD_MAX_PENDING_PLAN)
		return ctl_err(e, TOGGLE_EBUSY, a,
			       "agent %s (id %llu) has %zu pending plan entries; %zu more would pass the limit "
			       "of %d pending entries per agent",
			       a->name, (unsigned long long)a->id, pending, m->n_entries, TD_MAX_PENDING_PLAN);
	if (used > TOGGLE_SHM_PLAN_RING || used + m->n_entries > TOGGLE_SHM_PLAN_RING)
		return ctl_err(e, TOGGLE_EBUSY, a,
			       "agent %s (id %llu) has not yet taken %llu plan entries from its shared memory; "
			       "%zu more do not fit there (%d at a time): retry after its next step",
			       a->name, (unsigned long long)a->id, (unsigned long long)used, m->n_entries,
			       TOGGLE_SHM_PLAN_RING);
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
		       const struct toggle_set *sets, const int64_t *steps)
{
	uint64_t batch = ++a->next_batch;
	plan_prune(a);
	for (size_t k = 0; k < m->n_entries; k++) {
		struct toggle_shm_plan_slot slot = {.batch = batch, .batch_len = m->n_entries,
						    .batch_index = k, .step = steps[k]};
		memcpy(slot.set, sets[k].bits, sizeof(slot.set));
		toggle_shm_plan_slot_write(a->shm.ctl, a->ctl.plan_head + k, &slot);
		a->plans[a->n_plans++] = (struct td_plan_entry){.step = slot.step, .set = sets[k]};
	}
	a->ctl.plan_head += m->n_entries; /* published by the control write after the save */
	td_commit_accept(a);
}

/*
 * Check a plan's entries, then every target (plan_check), then apply it to
 * all of them (the slots in shared memory are published by the control
 * write after the save, commit.c); nothing is applied when one entry or one
 * target fails.  With no targets, only the entries are checked.  Used by
 * the SubmitPlan handler and by the cluster layer.
 */
int td_ctl_plan(struct td_agent **v, size_t n, const Toggle__SubmitPlanRequest *m,
		struct td_ctl_err *e)
{
	if (m->n_entries == 0 || m->n_entries > TGP_MAX_PLAN_ENTRIES)
		return ctl_err(e, TOGGLE_ELIMIT, NULL, "a plan has 1 to %d entries; this one has %zu",
			       TGP_MAX_PLAN_ENTRIES, m->n_entries);
	for (size_t k = 0; k < m->n_entries; k++) {
		const Toggle__PlanEntry *en = m->entries[k];
		bool dup = false;
		for (size_t j = 0; j < k; j++)
			dup |= (m->entries[j]->after != 0) == (en->after != 0) &&
				((en->after != 0) ? m->entries[j]->after == en->after
					       : m->entries[j]->step == en->step);
		if ((en->after != 0) && (en->step != -1 || en->after < 1 || en->after > TGP_MAX_PLAN_AFTER ||
				      dup)) {
			if (dup || en->step != -1)
				return ctl_err(e, TOGGLE_EINVAL, NULL, "plan entry %zu: relative step +%lld %s",
					       k, (long long)en->after,
					       dup ? "is named twice" : "needs step -1");
			return ctl_err(e, TOGGLE_EINVAL, NULL,
				       "plan entry %zu: relative step +%lld is out of range (+1 to +%lld)",
				       k, (long long)en->after, (long long)TGP_MAX_PLAN_AFTER);
		}
		if (en->after == 0 && (en->step < 0 || dup))
			return ctl_err(e, TOGGLE_EINVAL, NULL, "plan entry %zu: step %lld is %s", k,
				       (long long)en->step, dup ? "named twice" : "negative");
	}
	if (n == 0)
		return 0;
	struct toggle_set *sets = calloc(n * m->n_entries, sizeof(*sets));
	int64_t *steps = calloc(n * m->n_entries, sizeof(*steps));
	int rc = 0;
	if (!sets || !steps)
		rc = ctl_err(e, TOGGLE_ENOMEM, NULL, "out of memory");
	for (size_t i = 0; i < n && !rc; i++)
		rc = plan_check(e, v[i], m, &sets[i * m->n_entries], &steps[i * m->n_entries]);
	for (size_t i = 0; i < n && !rc; i++)
		plan_write(v[i], m, &sets[i * m->n_entries], &steps[i * m->n_entries]);
	free(sets);
	free(steps);
	return rc;
}

void td_ctl_clear(struct td_agent **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct td_agent *a = v[i];
		a->ctl.plan_clear = a->ctl.plan_head;
		a->ctl.plan_clears++;
		a->n_plans = 0;
		td_commit_accept(a);
	}
}
