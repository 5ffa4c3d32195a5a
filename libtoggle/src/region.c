/*
 * region.c - producer regions: every kernel node a capture gains between
 * toggle_producer_begin and toggle_producer_end is recorded under one hook.
 * Stub for now (the contract of issue #9): TOGGLE_ENOTSUP.
 */
#include "toggle.h"

int toggle_producer_begin(struct toggle_agent *agent, CUstream stream)
{
	(void)agent;
	(void)stream;
	return TOGGLE_ENOTSUP;
}

int toggle_producer_end(struct toggle_agent *agent, CUstream stream, struct toggle_hook hook,
			size_t *n_recorded)
{
	(void)agent;
	(void)stream;
	(void)hook;
	if (n_recorded)
		*n_recorded = 0;
	return TOGGLE_ENOTSUP;
}

void toggle_producer_abort(struct toggle_agent *agent, CUstream stream)
{
	(void)agent;
	(void)stream;
}
