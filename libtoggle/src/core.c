/*
 * core.c - the helpers every file of the agent uses: failure reporting,
 * the lifetime hub's death count (for tg_fast_update), the stats view.
 * The lowest layer of the agent: it calls none of the agent's other files
 * (core.h, agent_impl.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "core.h"
#include "life_hub.h"

int tg_fail(struct toggle_agent *a, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->err, sizeof(a->err), fmt, ap);
	va_end(ap);
	return code;
}

bool tg_life_pending(const struct toggle_agent *a)
{
	return atomic_load_explicit(&a->life->deaths, memory_order_acquire) != a->deaths_seen;
}

void tg_stats_get(const struct toggle_agent *a, struct toggle_stats *out)
{
	*out = a->stats;
	out->version = a->version;
	out->step = a->step;
	/* The replay path counts per graph only; the total is summed here. */
	out->launches = a->launches_retired + a->stats.launches_unrelated;
	for (size_t i = 0; i < a->n_graphs; i++)
		out->launches += a->graphs[i]->replays;
}
