/* gpu_legs.h - what the GPU programs built of legs share (gpu_guard.cu,
 * gpu_lifetime.cu): the first failure of a leg (and gpu_sets.h's hook_of and
 * set_of), an agent opened on the real driver, the leg's verdict line.
 *
 * Include after gpu_common.h (GPU_TAG, die) and after defining N_LAYERS,
 * N_HOOKS and a struct env with the members `char why[512]` (the first
 * failure of the current leg) and `struct toggle_catalog cat`. */
#ifndef GPU_LEGS_H
#define GPU_LEGS_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gpu_sets.h"

static void fail_leg(struct env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Keeps the first failure only: what follows it is usually its consequence. */
static void fail_leg(struct env *e, const char *fmt, ...)
{
	va_list ap;

	if (e->why[0])
		return;
	va_start(ap, fmt);
	vsnprintf(e->why, sizeof e->why, fmt, ap);
	va_end(ap);
}

/* An agent on the real driver in mode, or die: a leg cannot run without one. */
static struct toggle_agent *agent_open(struct env *e, const char *name, enum toggle_mode mode)
{
	struct toggle_config cfg;
	struct toggle_agent *a;
	int r;

	memset(&cfg, 0, sizeof cfg);
	cfg.name = name;
	cfg.catalog = e->cat;
	cfg.mode = mode;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	r = toggle_agent_open(&cfg, &a);
	if (r != TOGGLE_OK)
		die("toggle_agent_open(%s): %d (%s)", name, r, toggle_strerror(r));
	if (toggle_agent_mode(a) != mode)
		die("agent %s runs in mode %d, asked for %d: %s", name, (int)toggle_agent_mode(a),
		    (int)mode, toggle_last_error(a));
	return a;
}

static void leg_report(struct env *e, const char *leg, const char *figures)
{
	if (e->why[0])
		printf(GPU_TAG ": leg=%s FAIL (%s)\n", leg, e->why);
	else
		printf(GPU_TAG ": leg=%s PASS %s\n", leg, figures);
}

#endif
