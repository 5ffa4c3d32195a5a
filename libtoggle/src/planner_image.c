/*
 * planner_image.c - the planner's fatbin for the cuda backend, embedded at
 * build time.  The Makefile (and scripts/gpu-check.sh) compile planner.cu
 * with nvcc when it exists, turn the fatbin into a header of bytes
 * (scripts/embed.sh) and build this file with TG_HAVE_PLANNER_FATBIN; without
 * nvcc the library has no planner and device mode reports TOGGLE_ENOTSUP
 * (strict) or runs lazy.
 */
#include <stddef.h>

#include "cu.h"

#ifdef TG_HAVE_PLANNER_FATBIN
#include "tg_planner_fatbin.h" /* tg_planner_fatbin_bytes[] */

const void *tg_planner_fatbin(void)
{
	return tg_planner_fatbin_bytes;
}
#else
const void *tg_planner_fatbin(void)
{
	return NULL;
}
#endif
