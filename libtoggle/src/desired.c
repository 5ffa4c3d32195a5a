/*
 * desired.c - the agent's desired state and its resolution: the standing
 * set, per-step plans, and the set of each step (resolve).
 *
 * The set replays run with changes only at toggle_step_begin() (or, before
 * the first step, when the standing set changes), so every replay of a step
 * runs exactly the set the metadata gate was given for it.  Intake (the
 * public API, the daemon's control lane: control.c) writes the standing set
 * and plans here; resolve (tg_resolve_step, tg_resolve_stepless) turns them
 * into the current set and its version; apply (replay.c) brings the execs
 * to it.  Calls nothing of the agent but core.c.
 */
#include <string.h>

#include "agent_impl.h"

static int desired_check_set(struct toggle_agent *a, const struct toggle_set *set)
{
	if (!set)
		return tg_fail(a, TOGGLE_EINVAL, "set is NULL");
	if (toggle_catalog_check_set(&a->catalog, set))
		return tg_fail(a, TOGGLE_ERANGE, "set holds hooks outside the catalog (%u types, %u layers)",
			       a->catalog.n_types, a->catalog.n_layers);
	return 0;
}

/*
 * Make set the one replays run with; bump the version only on a real change.
 * The standing set again, unwritten since it was made current: equal, no
 * compare of the whole bitmap (a step on an unchanged set: 1 KiB, the
 * largest part of its host time otherwise; bench_host step).
 */
static void desired_set_current(struct toggle_agent *a, const struct toggle_set *set)
{
	bool standing = set == &a->standing;
	if (standing && a->current_standing)
		return;
	a->current_standing = standing;
	if (toggle_set_equal(&a->current, set))
		return;
	a->current = *set;
	a->version++;
	a->stats.version = a->version;
	tg_fast_update(a);
}

int tg_standing_set(struct toggle_agent *a, const struct toggle_set *set)
{
	int rc = desired_check_set(a, set);
	if (rc)
		return rc;
	a->standing = *set;
	a->current_standing = false;
	return 0;
}

void tg_resolve_stepless(struct toggle_agent *a)
{
	desired_set_current(a, &a->standing);
}

int toggle_set_enabled(struct toggle_agent *a, const struct toggle_set *set)
{
	if (!a)
		return TOGGLE_EINVAL;
	int rc = tg_standing_set(a, set);
	if (rc)
		return rc;
	if (a->step < 0)
		tg_resolve_stepless(a); /* stepless use: takes effect now */
	return 0;
}

static size_t plan_lower_bound(const struct toggle_agent *a, int64_t step)
{
	size_t lo = 0, hi = a->n_plans;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->plans[mid].step < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool plan_has(const struct toggle_agent *a, int64_t step)
{
	size_t i = plan_lower_bound(a, step);
	return i < a->n_plans && a->plans[i].step == step;
}

/* Insert or replace; capacity was checked by the caller. */
static void plan_put(struct toggle_agent *a, int64_t step, const struct toggle_set *set)
{
	size_t i = plan_lower_bound(a, step);
	if (i == a->n_plans || a->plans[i].step != step) {
		memmove(&a->plans[i + 1], &a->plans[i], (a->n_plans - i) * sizeof(a->plans[0]));
		a->n_plans++;
	}
	a->plans[i].step = step;
	a->plans[i].set = *set;
}

static int plan_check_entry(struct toggle_agent *a, int64_t step, const struct toggle_set *set)
{
	if (step < 0)
		return tg_fail(a, TOGGLE_EINVAL, "plan for negative step %lld", (long long)step);
	if (a->step >= 0 && step <= a->step) {
		a->anomalies.late_plans++;
		return tg_fail(a, TOGGLE_ELATE, "plan for step %lld rejected: step %lld has already begun",
			       (long long)step, (long long)a->step);
	}
	return desired_check_set(a, set);
}

int toggle_plan_step(struct toggle_agent *a, int64_t step, const struct toggle_set *set)
{
	struct toggle_plan_entry e = {.step = step};
	if (!a)
		return TOGGLE_EINVAL;
	if (!set)
		return tg_fail(a, TOGGLE_EINVAL, "set is NULL");
	e.set = *set;
	return tg_plan_submit(a, &e, 1);
}

int toggle_plan_submit(struct toggle_agent *a, const struct toggle_plan_entry *entries, size_t n)
{
	if (!a)
		return TOGGLE_EINVAL;
	return tg_plan_submit(a, entries, n);
}

int tg_plan_submit(struct toggle_agent *a, const struct toggle_plan_entry *entries, size_t n)
{
	if (n && !entries)
		return tg_fail(a, TOGGLE_EINVAL, "entries is NULL");
	if (n > TOGGLE_MAX_PLAN)
		return tg_fail(a, TOGGLE_ELIMIT, "plan of %zu entries; at most %d", n, TOGGLE_MAX_PLAN);
	/* Validate everything first: a rejected plan applies nothing. */
	size_t added = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = plan_check_entry(a, entries[i].step, &entries[i].set);
		if (rc)
			return rc;
		for (size_t j = 0; j < i; j++)
			if (entries[j].step == entries[i].step)
				return tg_fail(a, TOGGLE_EINVAL, "plan names step %lld twice",
					       (long long)entries[i].step);
		added += !plan_has(a, entries[i].step);
	}
	if (a->n_plans + added > TOGGLE_MAX_PLAN)
		return tg_fail(a, TOGGLE_ELIMIT, "plan table full: %zu pending + %zu new > %d",
			       a->n_plans, added, TOGGLE_MAX_PLAN);
	for (size_t i = 0; i < n; i++)
		plan_put(a, entries[i].step, &entries[i].set);
	return 0;
}

void tg_plan_clear(struct toggle_agent *a)
{
	a->n_plans = 0;
}

void toggle_plan_clear(struct toggle_agent *a)
{
	if (a)
		tg_plan_clear(a);
}

void tg_aligned_late(struct toggle_agent *a, uint64_t version)
{
	a->aligned_rejected++;
	a->aligned_rejected_version = version;
	a->aligned_rejected_step = a->step;
	a->anomalies.late_plans++;
}

/*
 * The set of step (the caller checked that it follows the last one): an
 * aligned standing set due at it, the plan entry for exactly this step if
 * there is one, else the standing set.
 */
void tg_resolve_step(struct toggle_agent *a, int64_t step)
{
	if (a->aligned_pending && step == a->aligned_step) {
		/* An aligned change's step: its set is the standing set from here on. */
		a->standing = a->aligned_set;
		a->current_standing = false;
		a->aligned_pending = false;
	} else if (a->aligned_pending && step > a->aligned_step) {
		/* Stepped over it: it can never run at its step, and no other will do. */
		tg_aligned_late(a, a->aligned_version);
		a->aligned_pending = false;
	}
	/* Entries for steps that were skipped can never run: drop them with this one. */
	size_t i = plan_lower_bound(a, step);
	const struct toggle_set *set = &a->standing;
	struct toggle_set planned;
	size_t drop = i;
	if (i < a->n_plans && a->plans[i].step == step) {
		planned = a->plans[i].set;
		set = &planned;
		drop = i + 1;
	}
	memmove(&a->plans[0], &a->plans[drop], (a->n_plans - drop) * sizeof(a->plans[0]));
	a->n_plans -= drop;

	a->step = step;
	a->stats.step = step;
	desired_set_current(a, set);
	a->ctl_version_step = a->ctl_version;
	tg_fast_update(a);
}

/* Does nothing with a NULL output; zeros for a NULL agent. */
void toggle_current_set(const struct toggle_agent *a, struct toggle_set *out)
{
	if (out)
		*out = a ? a->current : (struct toggle_set){{0}};
}
