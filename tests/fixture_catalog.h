/*
 * fixture_catalog.h - the small test catalog the simulator suites share
 * (check_guard.c, check_lifetime_*.c): NT hook types of NL layers, hook h
 * as (type h / NL, layer h % NL), a set as a bitmask of NH hooks.  Moved out
 * of check_guard.c and check_lifetime.c, which had each a copy (issue 29).
 */
#ifndef FIXTURE_CATALOG_H
#define FIXTURE_CATALOG_H

#include <stdint.h>

#include "testutil.h"
#include "toggle.h"

#define NT 2
#define NL 4
#define NH (NT * NL)

static const char *const type_names[NT] = {"resid_post", "attn_out"};
static const struct toggle_catalog catalog = {.type_names = type_names, .n_types = NT,
					      .n_layers = NL};

static inline struct toggle_hook hook_of(int h)
{
	return (struct toggle_hook){(uint16_t)(h / NL), (uint16_t)(h % NL)};
}

static inline struct toggle_set set_of(uint32_t bits)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	for (int h = 0; h < NH; h++)
		if (bits >> h & 1)
			ck_assert_int_eq(toggle_set_add(&s, hook_of(h)), 0);
	return s;
}

#endif
