/* gpu_chain.h - the device-mode chain of gpu_devbare, gpu_devfull and
 * gpu_devtaint: a launch-numbering kernel, a layer's compute and a producer
 * that copies the activations out and logs {hook, launch} in a device ring,
 * the ground truth of what ran at which launch.
 *
 * Include after gpu_common.h and after defining CHUNK (floats per layer) and
 * RING_CAP (ring records). */
#ifndef GPU_CHAIN_H
#define GPU_CHAIN_H

#include <stdint.h>

/* One producer run: which hook, at which launch (the mark kernel's count). */
struct ring_rec {
	int32_t hook;
	int32_t pad;
	long long launch;
};

/* The chain's device memory. */
struct dev {
	float *x, *out;              /* activations; monitor buffers (N_HOOKS slices) */
	long long *launch;           /* the mark kernel's launch counter */
	unsigned long long *computes; /* runs per compute kernel */
	struct ring_rec *ring;
	unsigned long long *count;
	unsigned int *overflow;
};

/* Right after the planner (a non-producer: in the bare and full execs too): number the launch. */
__global__ void chain_mark(long long *launch)
{
	*launch += 1;
}

/* A layer's work: touch the activations, count the run. */
__global__ void chain_compute(float *x, unsigned long long *computes, int k)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < CHUNK; i += gridDim.x * blockDim.x)
		x[i] = x[i] * 0.5f + (float)k;
	if (blockIdx.x == 0 && threadIdx.x == 0)
		atomicAdd(&computes[k], 1ull);
}

/* A producer: copy the activations out, log {hook, launch}. */
__global__ void chain_produce(const float *x, float *out, const long long *launch,
			      struct ring_rec *ring, unsigned long long *count, unsigned int *overflow,
			      int hook)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < CHUNK; i += gridDim.x * blockDim.x)
		out[i] = x[i];
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		unsigned long long slot = atomicAdd(count, 1ull);
		if (slot < RING_CAP) {
			ring[slot].hook = hook;
			ring[slot].pad = 0;
			ring[slot].launch = *launch;
		} else {
			atomicExch(overflow, 1u);
		}
	}
}

#endif /* GPU_CHAIN_H */
