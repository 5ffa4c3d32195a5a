/*
 * agent.c - agent lifetime, configuration, and the desired state: the
 * standing set, per-step plans, and the resolution of each step's set.
 *
 * The set replays run with changes only at toggle_step_begin() (or, before
 * the first step, when the standing set changes), so every replay of a step
 * runs exactly the set the metadata gate was given for it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"
#include "record_impl.h"

int tg_fail(struct toggle_agent *a, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->err, sizeof(a->err), fmt, ap);
	va_end(ap);
	return code;
}

static int agent_copy_name(char *dst, const char *src, const char *what, char *err, size_t errlen)
{
	size_t n = src ? strlen(src) : 0;
	if (n >= TOGGLE_MAX_NAME) {
		snprintf(err, errlen, "%s is %zu bytes long; at most %d allowed", what, n,
			 TOGGLE_MAX_NAME - 1);
		return TOGGLE_EINVAL;
	}
	memcpy(dst, src ? src : "", n + 1);
	return 0;
}

static int agent_configure(struct toggle_agent *a, const struct toggle_config *cfg)
{
	int rc = toggle_catalog_validate(&cfg->catalog, a->err, sizeof(a->err));
	if (rc)
		return rc;
	if (!cfg->name || !cfg->name[0])
		return tg_fail(a, TOGGLE_EINVAL, "agent name is empty");
	if ((rc = agent_copy_name(a->name, cfg->name, "agent name", a->err, sizeof(a->err))) ||
	    (rc = agent_copy_name(a->group, cfg->group, "group name", a->err, sizeof(a->err))))
		return rc;
	for (unsigned i = 0; i < cfg->catalog.n_types; i++) {
		/* Validated above: each name fits. */
		snprintf(a->type_names[i], TOGGLE_MAX_NAME, "%s", cfg->catalog.type_names[i]);
		a->type_ptrs[i] = a->type_names[i];
	}
	a->catalog.type_names = a->type_ptrs;
	a->catalog.n_types = cfg->catalog.n_types;
	a->catalog.n_layers = cfg->catalog.n_layers;

	switch (cfg->mode) {
	case TOGGLE_MODE_LAZY:
	case TOGGLE_MODE_EAGER:
		a->mode = cfg->mode;
		break;
	case TOGGLE_MODE_DEVICE:
		/* Decided once the backend is loaded (agent_start_device). */
		a->mode = TOGGLE_MODE_DEVICE;
		break;
	default:
		return tg_fail(a, TOGGLE_EINVAL, "unknown mode %d", (int)cfg->mode);
	}
	a->strict = cfg->strict;
	return 0;
}

static int agent_load_backend(struct toggle_agent *a, const struct toggle_config *cfg)
{
	switch (cfg->backend) {
	case TOGGLE_BACKEND_SIM:
		if (!cfg->sim)
			return tg_fail(a, TOGGLE_EINVAL, "sim backend needs toggle_config.sim");
		tg_cu_load_sim(&a->cu, cfg->sim);
		return 0;
	case TOGGLE_BACKEND_CUDA:
		return tg_cu_load_driver(&a->cu, a->err, sizeof(a->err));
	default:
		return tg_fail(a, TOGGLE_EINVAL, "unknown backend %d", (int)cfg->backend);
	}
}

/* Device mode, or why not: strict refuses, else the agent runs lazy and says why. */
static int agent_start_device(struct toggle_agent *a)
{
	if (tg_device_open(a) == 0)
		return 0;
	char why[sizeof(a->err)];
	memcpy(why, a->err, sizeof(why));
	if (a->strict)
		return tg_fail(a, TOGGLE_ENOTSUP, "device mode unavailable (strict): %.400s", why);
	a->mode = TOGGLE_MODE_LAZY;
	return tg_fail(a, 0, "device mode unavailable, running lazy: %.400s", why);
}

int toggle_agent_open(const struct toggle_config *cfg, struct toggle_agent **out)
{
	if (!cfg || !out)
		return TOGGLE_EINVAL;
	*out = NULL;
	struct toggle_agent *a = calloc(1, sizeof(*a));
	if (!a)
		return TOGGLE_ENOMEM;
	a->step = -1;
	a->taint.last_step = -1;
	a->version = 1; /* the empty standing set; 0 means "no set applied" */
	a->stats.step = -1;
	int rc = agent_configure(a, cfg);
	if (rc == 0)
		rc = agent_load_backend(a, cfg);
	if (rc == 0 && a->mode == TOGGLE_MODE_DEVICE)
		rc = agent_start_device(a);
	a->bare_on = rc == 0 && !cfg->no_bare_exec && tg_cu_bare_ready(&a->cu);
	if (rc == 0)
		tg_life_open(a); /* user objects: the driver says when a graph is destroyed */
	if (rc == 0) {
		a->plans = calloc(TOGGLE_MAX_PLAN, sizeof(*a->plans));
		rc = a->plans ? tg_registry_init(a) : TOGGLE_ENOMEM;
	}
	if (rc == 0 && cfg->socket_path && cfg->socket_path[0])
		rc = tg_control_open(a, cfg->socket_path);
	tg_fast_update(a);
	if (rc) {
		/* No agent to hold the text: callers use the code (toggle_strerror). */
		toggle_agent_close(a);
		return rc;
	}
	*out = a;
	return 0;
}

void toggle_agent_close(struct toggle_agent *a)
{
	if (!a)
		return;
	tg_control_close(a);
	tg_record_close(a); /* after the connection thread that passes its fd */
	tg_region_close(a);
	tg_copyout_close(a);
	tg_device_close(a);
	tg_registry_free(a);
	tg_life_close(a); /* destructors still to run touch only their own memory */
	free(a->plans);
	tg_cu_unload(&a->cu);
	free(a);
}

const char *toggle_last_error(const struct toggle_agent *a)
{
	return a ? a->err : "no agent";
}

enum toggle_mode toggle_agent_mode(const struct toggle_agent *a)
{
	return a ? a->mode : TOGGLE_MODE_LAZY;
}

const struct toggle_catalog *toggle_agent_catalog(const struct toggle_agent *a)
{
	return a ? &a->catalog : NULL;
}

/* ---- desired state ------------------------------------------------------ */

static int agent_check_set(struct toggle_agent *a, const struct toggle_set *set)
{
	if (!set)
		return tg_fail(a, TOGGLE_EINVAL, "set is NULL");
	if (toggle_catalog_check_set(&a->catalog, set))
		return tg_fail(a, TOGGLE_ERANGE, "set holds hooks outside the catalog (%u types, %u layers)",
			       a->catalog.n_types, a->catalog.n_layers);
	return 0;
}

/* Make set the one replays run with; bump the version only on a real change. */
static void agent_set_current(struct toggle_agent *a, const struct toggle_set *set)
{
	if (toggle_set_equal(&a->current, set))
		return;
	a->current = *set;
	a->version++;
	a->stats.version = a->version;
	tg_fast_update(a);
}

int toggle_set_enabled(struct toggle_agent *a, const struct toggle_set *set)
{
	if (!a)
		return TOGGLE_EINVAL;
	int rc = agent_check_set(a, set);
	if (rc)
		return rc;
	a->standing = *set;
	if (a->step < 0)
		agent_set_current(a, set); /* stepless use: takes effect now */
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
	return agent_check_set(a, set);
}

int toggle_plan_step(struct toggle_agent *a, int64_t step, const struct toggle_set *set)
{
	struct toggle_plan_entry e = {.step = step};
	if (!a)
		return TOGGLE_EINVAL;
	if (!set)
		return tg_fail(a, TOGGLE_EINVAL, "set is NULL");
	e.set = *set;
	return toggle_plan_submit(a, &e, 1);
}

int toggle_plan_submit(struct toggle_agent *a, const struct toggle_plan_entry *entries, size_t n)
{
	if (!a)
		return TOGGLE_EINVAL;
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

void toggle_plan_clear(struct toggle_agent *a)
{
	if (a)
		a->n_plans = 0;
}

int toggle_step_begin(struct toggle_agent *a, int64_t step, struct toggle_set *effective)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (step < 0)
		return tg_fail(a, TOGGLE_EINVAL, "step %lld is negative", (long long)step);
	if (a->step >= 0 && step <= a->step)
		return tg_fail(a, TOGGLE_ESTEP, "step %lld does not follow step %lld",
			       (long long)step, (long long)a->step);
	if (a->shm.ctl)
		tg_control_poll(a); /* the daemon's latest word, before resolving */
	tg_life_sweep(a); /* graphs and execs the driver destroyed since the last look */
	if (a->rec_on)
		tg_record_step(a); /* the last step's copies that completed: published */
	if (a->aligned_pending && step == a->aligned_step) {
		/* An aligned change's step: its set is the standing set from here on. */
		a->standing = a->aligned_set;
		a->aligned_pending = false;
	} else if (a->aligned_pending && step > a->aligned_step) {
		/* Stepped over it: it can never run at its step, and no other will do. */
		tg_control_aligned_late(a, a->aligned_version);
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
	agent_set_current(a, set);
	if (effective)
		*effective = a->current;
	a->ctl_version_step = a->ctl_version;
	tg_fast_update(a);
	if (a->dev.on)
		tg_device_step(a); /* planners' reports; launches from here on are this step's */
	/* Eager: apply now.  A failure leaves that exec out of date, and its
	 * next launch retries the sync and is refused if it fails again. */
	if (a->mode == TOGGLE_MODE_EAGER)
		(void)toggle_apply_all(a);
	if (a->shm.ctl)
		tg_status_publish(a);
	return 0;
}

/* The getters below do nothing with a NULL output, and report zeros for a NULL agent. */
void toggle_current_set(const struct toggle_agent *a, struct toggle_set *out)
{
	if (out)
		*out = a ? a->current : (struct toggle_set){{0}};
}

void toggle_anomalies_get(const struct toggle_agent *a, struct toggle_anomalies *out)
{
	if (out)
		*out = a ? a->anomalies : (struct toggle_anomalies){0};
}

void toggle_stats_get(const struct toggle_agent *a, struct toggle_stats *out)
{
	if (!out)
		return;
	if (!a) {
		*out = (struct toggle_stats){.step = -1};
		return;
	}
	*out = a->stats;
	out->version = a->version;
	out->step = a->step;
	/* The replay path counts per graph only; the total is summed here. */
	out->launches = a->launches_retired + a->stats.launches_unrelated;
	for (size_t i = 0; i < a->n_graphs; i++)
		out->launches += a->graphs[i]->replays;
}
