/*
 * copyout_image.c - the copy producer's fatbin for the cuda backend,
 * embedded at build time exactly as the planner's (planner_image.c): with
 * nvcc, copyout.cu becomes a fatbin, scripts/embed.sh a header of bytes,
 * and this file is built with TG_HAVE_COPYOUT_FATBIN; without nvcc
 * toggle_copy_out reports TOGGLE_ENOTSUP on the cuda backend.
 */
#include <stddef.h>

#include "cu.h"

#ifdef TG_HAVE_COPYOUT_FATBIN
#include "tg_copyout_fatbin.h" /* tg_copyout_fatbin_bytes[] */

const void *tg_copyout_fatbin(void)
{
	return tg_copyout_fatbin_bytes;
}
#else
const void *tg_copyout_fatbin(void)
{
	return NULL;
}
#endif
