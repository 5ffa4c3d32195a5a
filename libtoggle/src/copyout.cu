/*
 * copyout.cu - the built-in copy producer (toggle_copy_out): copy rows of
 * row_bytes from src (pitch src_pitch) to dst (pitch dst_pitch), `width`
 * bytes per access.  Built into a fatbin and embedded in libtoggle when nvcc
 * exists (libtoggle/libtoggle.mk, scripts/gpu-lib.sh), like planner.cu.
 */
#include <stdint.h>

#include "copyout.h"

extern "C" __global__ void tg_copy_out(unsigned long long dst, unsigned long long src,
				       unsigned long long row_bytes, unsigned long long rows,
				       unsigned long long dst_pitch, unsigned long long src_pitch,
				       unsigned width)
{
	unsigned long long per_row = row_bytes / width, total = per_row * rows;
	unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;

	for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	     i < total; i += stride) {
		unsigned long long r = i / per_row, c = (i - r * per_row) * width;
		unsigned char *d = (unsigned char *)(uintptr_t)(dst + r * dst_pitch + c);
		const unsigned char *s = (const unsigned char *)(uintptr_t)(src + r * src_pitch + c);

		switch (width) {
		case 16:
			*(uint4 *)d = *(const uint4 *)s;
			break;
		case 8:
			*(uint2 *)d = *(const uint2 *)s;
			break;
		case 4:
			*(uint32_t *)d = *(const uint32_t *)s;
			break;
		default:
			*d = *s;
			break;
		}
	}
}
