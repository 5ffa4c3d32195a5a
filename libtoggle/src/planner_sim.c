/*
 * planner_sim.c - the planner for the simulator: the same per-node step as
 * the CUDA kernel (planner.h), one thread, with the simulator's model of the
 * device-side cudaGraphKernelNodeSetEnabled.  Its image is what the sim
 * backend loads where the cuda backend loads the fatbin.
 */
#include <string.h>

#include "cu.h"
#include "toggle_sim.h"

#define TG_PLAN_QUAL static inline
#if CUDA_VERSION >= 12040
#define TG_PLAN_SET_ENABLED(node, on) \
	((int)toggle_sim_device_node_set_enabled((CUgraphDeviceNode)(uintptr_t)(node), (on)))
#else /* no device-updatable nodes before 12.4: device mode never starts, this never runs */
#define TG_PLAN_SET_ENABLED(node, on) ((void)(node), (void)(on), (int)CUDA_ERROR_NOT_SUPPORTED)
#endif
#define TG_PLAN_FENCE_SYSTEM() __atomic_thread_fence(__ATOMIC_RELEASE)
#include "planner.h"

_Static_assert(sizeof(struct tg_plan_desc) == TG_PLAN_DESC_SIZE, "descriptor layout");

/* tg_planner(struct tg_plan_desc *d, unsigned long long tag), as in planner.cu. */
static void tg_planner_sim(void **params)
{
	struct tg_plan_desc *d;
	unsigned long long tag;
	memcpy(&d, params[0], sizeof(d));
	memcpy(&tag, params[1], sizeof(tag));

	if (d->tag != tag || d->n == 0)
		return;
	int force = d->epoch != d->seen_epoch;
	const uint64_t *mask = (const uint64_t *)(uintptr_t)d->mask;
	const uint64_t *nodes = (const uint64_t *)(uintptr_t)d->nodes;
	uint8_t *state = (uint8_t *)(uintptr_t)d->state;
	uint64_t calls = 0, failures = 0;
	for (uint32_t i = 0; i < d->n; i++) {
		unsigned r = tg_plan_node(mask, state, nodes, i, force);
		calls += r != 0;
		failures += r == 2;
	}
	if (force)
		d->seen_epoch = d->epoch;
	tg_plan_finish(d, calls, failures);
}

static const struct toggle_sim_function tg_planner_functions[] = {
	{.name = "tg_planner",
	 .fn = tg_planner_sim,
	 .n_params = 2,
	 .param_size = {sizeof(struct tg_plan_desc *), sizeof(unsigned long long)}},
};

static const struct toggle_sim_image tg_planner_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC,
	.n_functions = 1,
	.functions = tg_planner_functions,
};

const void *tg_planner_sim_image(void)
{
	return &tg_planner_image;
}
