/*
 * copyout.cu - the built-in copy producer (toggle_copy_out): copy rows of
 * row_bytes from src (pitch src_pitch) to dst (pitch dst_pitch), `width`
 * bytes per access.  Built into a fatbin and embedded in libtoggle when nvcc
 * exists (libtoggle/libtoggle.mk, scripts/gpu-lib.sh), like planner.cu.
 *
 * A producer this small is latency-bound: what its threads do before the
 * first load is on the replay's critical path.  The one-row case (every
 * contiguous copy: toggle_copy_out makes it one row) therefore indexes with
 * 32-bit counters and no division; the per-element 64-bit divisions of the
 * general path cost about 0.34 us a producer on the H200 against torch's
 * own copy kernel (docs/benchmarks.md, section 6).  The commonest case, one
 * row of 16-byte accesses, has a kernel of its own (tg_copy_out_row16),
 * without the other cases' code.  width is 16, 8, 4 or 1 (copyout.c's
 * copy_width).
 */
#include <stdint.h>

#include "copyout.h"

/* Elements the 32-bit loop takes: i + stride stays below 2^32 (stride < 2^19). */
#define TG_COPY_ROW32_MAX 0x7fffffffull

template <typename T>
__device__ static void copy_row(unsigned long long dst, unsigned long long src,
				unsigned long long n)
{
	T *d = (T *)(uintptr_t)dst;
	const T *s = (const T *)(uintptr_t)src;

	if (n <= TG_COPY_ROW32_MAX) {
		unsigned m = (unsigned)n, stride = gridDim.x * blockDim.x;
		for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride)
			d[i] = s[i];
		return;
	}
	unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
	for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	     i < n; i += stride)
		d[i] = s[i];
}

template <typename T>
__device__ static void copy_rows(unsigned long long dst, unsigned long long src,
				 unsigned long long per_row, unsigned long long rows,
				 unsigned long long dst_pitch, unsigned long long src_pitch)
{
	unsigned long long total = per_row * rows;
	unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;

	for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	     i < total; i += stride) {
		unsigned long long r = i / per_row, c = i - r * per_row;
		T *d = (T *)(uintptr_t)(dst + r * dst_pitch) + c;
		const T *s = (const T *)(uintptr_t)(src + r * src_pitch) + c;
		*d = *s;
	}
}

template <typename T>
__device__ static void copy_any(unsigned long long dst, unsigned long long src,
				unsigned long long row_bytes, unsigned long long rows,
				unsigned long long dst_pitch, unsigned long long src_pitch)
{
	unsigned long long per_row = row_bytes / sizeof(T); /* a shift: sizeof is constant */

	if (rows == 1)
		copy_row<T>(dst, src, per_row);
	else
		copy_rows<T>(dst, src, per_row, rows, dst_pitch, src_pitch);
}

extern "C" __global__ void tg_copy_out(unsigned long long dst, unsigned long long src,
				       unsigned long long row_bytes, unsigned long long rows,
				       unsigned long long dst_pitch, unsigned long long src_pitch,
				       unsigned width)
{
	switch (width) {
	case 16:
		copy_any<uint4>(dst, src, row_bytes, rows, dst_pitch, src_pitch);
		break;
	case 8:
		copy_any<uint2>(dst, src, row_bytes, rows, dst_pitch, src_pitch);
		break;
	case 4:
		copy_any<uint32_t>(dst, src, row_bytes, rows, dst_pitch, src_pitch);
		break;
	default:
		copy_any<unsigned char>(dst, src, row_bytes, rows, dst_pitch, src_pitch);
		break;
	}
}

extern "C" __global__ void tg_copy_out_row16(unsigned long long dst, unsigned long long src,
					     unsigned long long row_bytes, unsigned long long rows,
					     unsigned long long dst_pitch,
					     unsigned long long src_pitch, unsigned width)
{
	(void)rows, (void)dst_pitch, (void)src_pitch, (void)width; /* 1, unused, unused, 16 */
	copy_row<uint4>(dst, src, row_bytes / 16);
}
