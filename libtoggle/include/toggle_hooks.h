/*
 * toggle_hooks.h - hooks, hook sets, the hook catalog and the one hook-spec
 * grammar, shared by libtoggle, toggled and togglectl, and the limits they
 * share (names, hook space, pending plans).  Needs no CUDA.
 * Catalog type names "all", "none" and "*" are reserved.
 */
#ifndef TOGGLE_HOOKS_H
#define TOGGLE_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "toggle_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hook space: a hook is (type, layer); index = type * TOGGLE_MAX_LAYERS + layer. */
#define TOGGLE_MAX_HOOK_TYPES 32
#define TOGGLE_MAX_LAYERS     256
#define TOGGLE_MAX_HOOKS      (TOGGLE_MAX_HOOK_TYPES * TOGGLE_MAX_LAYERS)
#define TOGGLE_MAX_NAME       64   /* agent, group and hook type names, NUL included */
/* Pending per-step plan entries per agent (toggle_plan_submit); here, not in
 * toggle.h, because toggled bounds what it keeps per agent by it and builds
 * without CUDA's headers. */
#define TOGGLE_MAX_PLAN       256

struct toggle_hook {
	uint16_t type;
	uint16_t layer;
};

/* A set of hooks: a plain bitmap, copyable by value. */
struct toggle_set {
	uint64_t bits[TOGGLE_MAX_HOOKS / 64];
};

/* The hook catalog: names of the hook types and the number of layers. */
struct toggle_catalog {
	const char *const *type_names; /* n_types names, unique, [A-Za-z0-9_.]+ */
	uint16_t n_types;              /* 1..TOGGLE_MAX_HOOK_TYPES */
	uint16_t n_layers;             /* 1..TOGGLE_MAX_LAYERS */
};

/*
 * The set helpers take NULL without crashing: a NULL set or catalog makes
 * clear, union, subtract and fill do nothing (fill with a set and no
 * catalog clears it), contains and equal return false, count 0, add,
 * remove and toggle_catalog_check_set TOGGLE_EINVAL (parse, format and
 * validate say so in their text too).
 */
void toggle_set_clear(struct toggle_set *set);
int toggle_set_add(struct toggle_set *set, struct toggle_hook hook);    /* TOGGLE_ERANGE */
int toggle_set_remove(struct toggle_set *set, struct toggle_hook hook); /* TOGGLE_ERANGE */
bool toggle_set_contains(const struct toggle_set *set, struct toggle_hook hook);
size_t toggle_set_count(const struct toggle_set *set);
bool toggle_set_equal(const struct toggle_set *a, const struct toggle_set *b);
void toggle_set_union(struct toggle_set *dst, const struct toggle_set *src);
void toggle_set_subtract(struct toggle_set *dst, const struct toggle_set *src);
/* Every hook of the catalog. */
void toggle_set_fill(struct toggle_set *set, const struct toggle_catalog *cat);
/* 0 if every hook of set lies inside the catalog, else TOGGLE_ERANGE. */
int toggle_catalog_check_set(const struct toggle_catalog *cat, const struct toggle_set *set);
/* 0 if the catalog itself is well formed (counts, names), else TOGGLE_EINVAL with err filled. */
int toggle_catalog_validate(const struct toggle_catalog *cat, char *err, size_t errlen);

/*
 * Parse a hook spec against a catalog into *out (replaced on success only).
 * Grammar: "none" | "all" | ITEM ("," ITEM)*
 *   ITEM   = TYPE [":" LAYERS]       (no LAYERS: every layer)
 *   TYPE   = a catalog name | "*"
 *   LAYERS = "*" | N | N "-" M       (inclusive, within the catalog)
 * On error returns TOGGLE_ESPEC and writes a message naming the bad token
 * and what was expected into err (if errlen > 0).
 */
int toggle_set_parse(const struct toggle_catalog *cat, const char *spec,
		     struct toggle_set *out, char *err, size_t errlen);

/*
 * Canonical text of a set ("none", "all", or "type:a-b,type:c,..." in
 * catalog order).  snprintf semantics: returns the length it needs (without
 * the NUL); the output is truncated to len.  Hooks outside the catalog are
 * not printable: TOGGLE_ERANGE.
 */
int toggle_set_format(const struct toggle_catalog *cat, const struct toggle_set *set,
		      char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_HOOKS_H */
