/*
 * planner.cu - device mode's planner kernel, captured at the head of every
 * device-mode graph (toggle_capture_planner).  At each launch it reads the
 * mask the host enqueued in stream order for this launch and enables or
 * disables each device-updatable producer whose state differs from the
 * planner's own record (every producer after a bind: the epoch moved), with
 * the device-side cudaGraphKernelNodeSetEnabled.  Producers run after it in
 * the same launch and see its updates (measured on an H200, CUDA 13.0).  A
 * launch in which a call failed is reported to the host (planner.h).
 *
 * Built by nvcc into a fatbin (sm_90 SASS and compute_90 PTX for newer parts)
 * that the Makefile embeds as bytes (planner_image.c); libtoggle loads it
 * with cuModuleLoadData.  No -rdc and no cudadevrt: the driver resolves the
 * device-side call when it loads the module.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#define TG_PLAN_QUAL static __device__ __forceinline__
#define TG_PLAN_SET_ENABLED(node, on) \
	((int)cudaGraphKernelNodeSetEnabled((cudaGraphDeviceNode_t)(uintptr_t)(node), (on) != 0))
#define TG_PLAN_FENCE_SYSTEM() __threadfence_system()
#include "planner.h"

static_assert(sizeof(struct tg_plan_desc) == TG_PLAN_DESC_SIZE, "descriptor layout");

extern "C" __global__ void __launch_bounds__(TG_PLAN_THREADS)
tg_planner(struct tg_plan_desc *d, unsigned long long tag)
{
	__shared__ int go, force;
	__shared__ unsigned long long calls, failures;

	if (threadIdx.x == 0) {
		go = d->tag == tag && d->n > 0;
		force = d->epoch != d->seen_epoch;
		calls = 0;
		failures = 0;
	}
	__syncthreads();
	if (!go)
		return;

	const uint64_t *mask = (const uint64_t *)(uintptr_t)d->mask;
	const uint64_t *nodes = (const uint64_t *)(uintptr_t)d->nodes;
	uint8_t *state = (uint8_t *)(uintptr_t)d->state;
	uint32_t n = d->n;
	unsigned c = 0, f = 0;

	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		unsigned r = tg_plan_node(mask, state, nodes, i, force);
		c += r != 0;
		f += r == 2;
	}
	if (c)
		atomicAdd(&calls, (unsigned long long)c);
	if (f)
		atomicAdd(&failures, (unsigned long long)f);
	__syncthreads();
	if (threadIdx.x == 0) {
		if (force)
			d->seen_epoch = d->epoch;
		tg_plan_finish(d, calls, failures); /* counts, and the host's report */
	}
}
