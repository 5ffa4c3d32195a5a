/*
 * copyout.c - the built-in copy producer (toggle_copy_out), the struct
 * layout table for bindings (toggle_layout) and toggle_version.
 * Stubs for now (the contract of issue #9): TOGGLE_ENOTSUP.
 */
#include "toggle.h"

int toggle_copy_out(struct toggle_agent *agent, CUstream stream, struct toggle_hook hook,
		    const struct toggle_copy *copy)
{
	(void)agent;
	(void)stream;
	(void)hook;
	(void)copy;
	return TOGGLE_ENOTSUP;
}

const struct toggle_layout_entry *toggle_layout(size_t *count)
{
	if (count)
		*count = 0;
	return NULL;
}

unsigned toggle_version(void)
{
	return ((unsigned)TOGGLE_VERSION_MAJOR << 16) | TOGGLE_VERSION_MINOR;
}
