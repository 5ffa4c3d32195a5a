/*
 * gather_image.c - the recorder's gather kernel (gather.h) for both
 * backends: the fatbin embedded at build time for the cuda backend, as the
 * copy producer's (copyout_image.c: with nvcc, gather.cu becomes a fatbin,
 * scripts/embed.sh a header of bytes, and this file is built with
 * TG_HAVE_GATHER_FATBIN; without nvcc the recorder copies record by record),
 * and its host model for the simulator, where device memory is host memory.
 */
#include <stdint.h>
#include <string.h>

#include "cu.h"
#include "gather.h"
#include "toggle_sim.h"

#ifdef TG_HAVE_GATHER_FATBIN
#include "tg_gather_fatbin.h" /* tg_gather_fatbin_bytes[] */

const void *tg_gather_fatbin(void)
{
	return tg_gather_fatbin_bytes;
}
#else
const void *tg_gather_fatbin(void)
{
	return NULL;
}
#endif

/* tg_gather as gather.cu runs it: the records in order, when the launch runs in its stream. */
static void tg_gather_sim(void **params)
{
	struct tg_gather_args a;
	memcpy(&a, params[0], sizeof(a));
	for (unsigned long long i = 0; i < a.n && i < TG_GATHER_MAX; i++) {
		const struct tg_gather_rec *r = &a.rec[i];
		unsigned char *base = (unsigned char *)(uintptr_t)(a.staging + r->off);
		for (unsigned t = 0; t < TG_GATHER_HDR_WORDS; t++) {
			unsigned long long v = (TG_GATHER_SHARED >> t) & 1u ? a.shared[t]
							       : r->w[tg_gather_slot(t)];
			memcpy(base + 8 * t, &v, sizeof(v));
		}
		memcpy(base + 128, (const unsigned char *)(uintptr_t)r->src,
		       r->w[tg_gather_slot(TG_GATHER_PAYLOAD_WORD)]);
	}
}

static const struct toggle_sim_function tg_gather_functions[] = {
	{.name = TG_GATHER_KERNEL,
	 .fn = tg_gather_sim,
	 .n_params = 1,
	 .param_size = {sizeof(struct tg_gather_args)}},
};

static const struct toggle_sim_image tg_gather_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC,
	.n_functions = 1,
	.functions = tg_gather_functions,
};

const void *tg_gather_sim_image(void)
{
	return &tg_gather_image;
}
