/*
 * agent.c - agent lifetime and configuration, and toggle_step_begin(): the
 * top of the agent, the only file that calls every other (agent_impl.h).
 *
 * A step's slow path runs in three passes, each calling only downwards:
 * intake (the daemon's control lane into the desired state, control.c; what
 * the driver destroyed into the records, registry.c), resolve (the step's
 * set, desired.c), apply (per graph: device mode's reports, eager's syncs,
 * replay.c), then the status lane is written (control.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"
#include "record_impl.h"

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

/* Everything open made (after a failed open too). */
static void agent_free(struct toggle_agent *a)
{
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
	a->full_on = a->bare_on && !cfg->no_full_exec;
	a->setx_on = a->full_on && !cfg->no_set_exec;
	a->host_assemble = a->bare_on && !cfg->clone_execs && tg_cu_assemble_ready(&a->cu);
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
		agent_free(a);
		return rc;
	}
	*out = a;
	return 0;
}

void toggle_agent_close(struct toggle_agent *a)
{
	if (a)
		agent_free(a);
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

int toggle_step_begin(struct toggle_agent *a, int64_t step, struct toggle_set *effective)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (step < 0)
		return tg_fail(a, TOGGLE_EINVAL, "step %lld is negative", (long long)step);
	if (a->step >= 0 && step <= a->step)
		return tg_fail(a, TOGGLE_ESTEP, "step %lld does not follow step %lld",
			       (long long)step, (long long)a->step);
	/* Intake: the daemon's latest word into the desired state, then the
	 * driver's (graphs and execs destroyed since the last look). */
	if (a->shm.ctl) {
		tg_control_poll(a);
		if (a->step < 0)
			tg_resolve_stepless(a); /* before the first step, read is in effect (and counted) */
	}
	tg_registry_sweep(a);
	if (a->rec_on)
		tg_record_step(a); /* the last step's copies that completed: published */
	/* Resolve: the set of this step. */
	tg_resolve_step(a, step);
	if (effective)
		*effective = a->current;
	/* Apply. */
	if (a->dev.on)
		tg_device_step(a); /* planners' reports; launches from here on are this step's */
	/* A set that held: one graph's set exec (host modes), before eager's apply
	 * picks it. */
	if (a->setx_on && !a->dev.on)
		tg_setx_step(a);
	/* Eager: apply now.  A failure leaves that exec out of date, and its
	 * next launch retries the sync and is refused if it fails again. */
	if (a->mode == TOGGLE_MODE_EAGER)
		(void)tg_apply_all(a);
	if (a->shm.ctl)
		tg_status_publish(a);
	return 0;
}

/* The getters below do nothing with a NULL output, and report zeros for a NULL agent. */
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
	tg_stats_get(a, out);
}
