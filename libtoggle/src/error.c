/* error.c - toggle_strerror() and toggle_err_name(), from the one error list
 * (TOGGLE_ERROR_MAP in toggle_error.h). */
#include <stddef.h>

#include "toggle_error.h"

struct err_entry {
	const char *name, *desc;
};

/* Indexed by -code.  A code listed twice is an overridden initializer
 * (-Woverride-init, an error under -Werror), one below TOGGLE_ERROR_MIN is
 * outside the array, and a positive one a negative index: with as many codes
 * as slots, a list that compiles runs -1 .. TOGGLE_ERROR_MIN without a gap. */
#define ERR_ENTRY(code, name, desc) [-(code)] = {"TOGGLE_E" #name, desc},
static const struct err_entry err_table[1 - TOGGLE_ERROR_MIN] = {
	[0] = {"TOGGLE_OK", "success"},
	TOGGLE_ERROR_MAP(ERR_ENTRY)
};
#undef ERR_ENTRY

static const struct err_entry *err_lookup(int err)
{
	return err <= 0 && err >= TOGGLE_ERROR_MIN ? &err_table[-err] : NULL;
}

const char *toggle_strerror(int err)
{
	const struct err_entry *e = err_lookup(err);
	return e ? e->desc : "unknown error";
}

const char *toggle_err_name(int err)
{
	const struct err_entry *e = err_lookup(err);
	return e ? e->name : NULL;
}
