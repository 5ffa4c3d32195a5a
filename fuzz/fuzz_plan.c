/*
 * fuzz_plan.c - libFuzzer target: togglectl's plan files (client/ctl_cmds.c,
 * `plan submit FILE`, issue 16 item 7).  The input is the file, given to
 * ctl_plan_parse as ctl_plan_load gives it what it read.  Must never crash
 * or leak; a plan it accepts must be what the daemon can be sent: 1 to
 * TGP_MAX_PLAN_ENTRIES entries, each a step >= 0 or a relative "+N" (not
 * both kinds), no step twice, a spec of 1 to TGP_MAX_SPEC bytes without a
 * NUL; a refusal must be reported exactly once.
 */
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl_output.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_errors;

static void fz_error(const struct ctl_error *e)
{
	if (!e->message || !e->message[0] || e->code >= 0)
		abort();
	fz_errors++;
}

static const struct ctl_output fz_out = {.error = fz_error};

static void check_plan(const struct ctl_plan *pl)
{
	if (pl->n < 1 || pl->n > TGP_MAX_PLAN_ENTRIES)
		abort();
	for (size_t i = 0; i < pl->n; i++) {
		const Toggle__PlanEntry *e = &pl->e[i];
		size_t len = e->spec ? strnlen(e->spec, TGP_MAX_SPEC + 1) : 0;
		if (pl->p[i] != e || len < 1 || len > TGP_MAX_SPEC)
			abort();
		if (e->after ? e->step != -1 || e->after < 1 || e->after > TGP_MAX_PLAN_AFTER
			     : e->step < 0)
			abort();
		if ((e->after != 0) != (pl->e[0].after != 0))
			abort();
		for (size_t k = 0; k < i; k++)
			if (pl->e[k].step == e->step && pl->e[k].after == e->after)
				abort();
	}
	/* What plan submit sends: it must encode. */
	Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	m.n_entries = pl->n;
	m.entries = pl->p;
	if (toggle__submit_plan_request__get_packed_size(&m) == 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ctl_plan pl;
	fz_errors = 0;
	int rc = ctl_plan_parse(&fz_out, "plan.json", (const char *)data, size, &pl);
	if (rc == 0) {
		if (fz_errors != 0)
			abort();
		check_plan(&pl);
		ctl_plan_free(&pl);
	} else if (fz_errors != 1) {
		abort(); /* refused: said once (and freed: LeakSanitizer checks) */
	}
	return 0;
}
