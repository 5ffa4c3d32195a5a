/*
 * gather.cu - the recorder's gather kernel (gather.h): a launch's records,
 * headers and payloads, into the device staging area in one launch on the
 * replay's stream.  Built into a fatbin and embedded in libtoggle when nvcc
 * exists (libtoggle/libtoggle.mk), like copyout.cu and planner.cu.
 */
#include <stdint.h>

#include "gather.h"

static_assert(sizeof(struct tg_gather_args) <= 4096, "kernel parameters stay under 4 KiB");

extern "C" __global__ void tg_gather(const __grid_constant__ struct tg_gather_args a)
{
	const unsigned i = blockIdx.y;
	if (i >= a.n)
		return;
	const struct tg_gather_rec &r = a.rec[i];
	unsigned char *base = (unsigned char *)(uintptr_t)(a.staging + r.off);
	const unsigned t = threadIdx.x;
	if (blockIdx.x == 0 && t < TG_GATHER_HDR_WORDS)
		((unsigned long long *)base)[t] =
			(TG_GATHER_SHARED >> t) & 1u ? a.shared[t] : r.w[tg_gather_slot(t)];

	const unsigned long long bytes = r.w[tg_gather_slot(TG_GATHER_PAYLOAD_WORD)];
	unsigned char *d = base + 128;
	const unsigned char *s = (const unsigned char *)(uintptr_t)r.src;
	const unsigned width = r.src % 16 == 0 ? 16 : r.src % 8 == 0 ? 8 : r.src % 4 == 0 ? 4 : 1;
	const unsigned long long n = bytes / width;
	const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
	const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	for (unsigned long long k = first; k < n; k += stride) {
		switch (width) {
		case 16:
			((uint4 *)d)[k] = ((const uint4 *)s)[k];
			break;
		case 8:
			((uint2 *)d)[k] = ((const uint2 *)s)[k];
			break;
		case 4:
			((uint32_t *)d)[k] = ((const uint32_t *)s)[k];
			break;
		default:
			d[k] = s[k];
			break;
		}
	}
	/* The bytes past the last whole access. */
	const unsigned long long done = n * width;
	if (first < bytes - done)
		d[done + first] = s[done + first];
}
