/* gpu_sets.h - a hook index as a hook, a bitmask of hook indices as a set:
 * what every GPU program with N_LAYERS layers of each hook type shares.
 *
 * Include after gpu_common.h (die) and after defining N_LAYERS and N_HOOKS
 * (at most 64 for set_of's mask). Hook h is type h / N_LAYERS, layer
 * h % N_LAYERS. */
#ifndef GPU_SETS_H
#define GPU_SETS_H

#include <stdint.h>

#include "toggle.h"

static inline struct toggle_hook hook_of(int h)
{
	struct toggle_hook k;

	k.type = (uint16_t)(h / N_LAYERS);
	k.layer = (uint16_t)(h % N_LAYERS);
	return k;
}

/* The set of the hooks whose bits are set in bits; dies if one is refused. */
static inline struct toggle_set set_of(uint64_t bits)
{
	struct toggle_set s;

	toggle_set_clear(&s);
	for (int h = 0; h < N_HOOKS; h++)
		if (bits >> h & 1u)
			if (toggle_set_add(&s, hook_of(h)) != TOGGLE_OK)
				die("toggle_set_add(%d)", h);
	return s;
}

#endif /* GPU_SETS_H */
