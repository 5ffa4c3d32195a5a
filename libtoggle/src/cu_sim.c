/*
 * cu_sim.c - tg_cu_load_sim(): the driver table (cu.h) filled from the
 * in-tree simulator (sim.c) and its planner (planner_sim.c).  Apart from
 * sim.c so that the simulator and the simulated planner, which makes the
 * simulator's device-side calls, do not call each other.
 */
#include <string.h>

#include "cu.h"
#include "toggle_sim.h"

/* No contexts in the simulator: memset and memcpy nodes take NULL. */
static CUresult sim_ctx_get_current(CUcontext *ctx)
{
	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	*ctx = NULL;
	return CUDA_SUCCESS;
}

void tg_cu_load_sim(struct tg_cu *cu, struct toggle_sim *sim)
{
	memset(cu, 0, sizeof(*cu));
	cu->stream_get_capture_info = toggle_sim_stream_get_capture_info;
	cu->graph_node_get_type = toggle_sim_graph_node_get_type;
	cu->graph_node_set_enabled = toggle_sim_graph_node_set_enabled;
	cu->graph_node_get_enabled = toggle_sim_graph_node_get_enabled;
	cu->graph_launch = toggle_sim_graph_launch;
	cu->graph_upload = toggle_sim_graph_upload;
	cu->get_error_string = toggle_sim_get_error_string;
	cu->launch_kernel_ex = toggle_sim_launch_kernel_ex;
	cu->stream_batch_mem_op = toggle_sim_stream_batch_mem_op;
	cu->memcpy_htod_async = toggle_sim_memcpy_htod_async;
	cu->stream_synchronize = toggle_sim_stream_synchronize;
	cu->event_record = toggle_sim_event_record;
	cu->event_query = toggle_sim_event_query;
	cu->memcpy_dtoh_async = toggle_sim_memcpy_dtoh_async;
	cu->stream_wait_event = toggle_sim_stream_wait_event;
	cu->graph_instantiate = toggle_sim_graph_instantiate_with_flags;
	cu->graph_node_get_dependent_nodes = toggle_sim_graph_node_get_dependent_nodes;
	cu->graph_node_get_dependencies = toggle_sim_graph_node_get_dependencies;
	cu->graph_get_nodes = toggle_sim_graph_get_nodes;
	cu->module_get_function = toggle_sim_module_get_function;
	if (toggle_sim_driver_version(sim) >= 13010) { /* the ids came with CUDA 13.1 */
		cu->graph_get_id = toggle_sim_graph_get_id;
		cu->graph_exec_get_id = toggle_sim_graph_exec_get_id;
	}
	cu->graph_clone = toggle_sim_graph_clone;
	cu->graph_node_find_in_clone = toggle_sim_graph_node_find_in_clone;
	cu->graph_destroy_node = toggle_sim_graph_destroy_node;
	cu->graph_add_dependencies = toggle_sim_graph_add_dependencies;
	cu->graph_destroy = toggle_sim_graph_destroy;
	cu->graph_exec_destroy = toggle_sim_exec_destroy;
	/* The device-mode bare exec's: kernel, memset, memcpy and empty nodes
	 * (the simulator has no event, host or child-graph nodes to read back). */
	/* cuGraphCreate is handle-less: tg_cu_graph_create. */
	cu->kernel_node_get_params = toggle_sim_graph_kernel_node_get_params;
	cu->add_kernel_node = toggle_sim_graph_add_kernel_node;
	cu->kernel_node_copy_attributes = toggle_sim_graph_kernel_node_copy_attributes;
	cu->memset_node_get_params = toggle_sim_graph_memset_node_get_params;
	cu->add_memset_node = toggle_sim_graph_add_memset_node;
	cu->memcpy_node_get_params = toggle_sim_graph_memcpy_node_get_params;
	cu->add_memcpy_node = toggle_sim_graph_add_memcpy_node;
	cu->add_empty_node = toggle_sim_graph_add_empty_node;
	cu->ctx_get_current = sim_ctx_get_current;
	/* User objects came with CUDA 11.3 (an older simulated driver has none:
	 * how libtoggle runs without them).  cuUserObjectCreate is handle-less
	 * (tg_cu_user_object_create). */
	if (toggle_sim_driver_version(sim) >= 11030) {
		cu->graph_retain_user_object = toggle_sim_graph_retain_user_object;
		cu->graph_release_user_object = toggle_sim_graph_release_user_object;
		cu->user_object_release = toggle_sim_user_object_release;
	}
	/* The handle-less ones are reached through tg_cu_*, which pass cu->sim. */
	cu->planner_image = tg_planner_sim_image();
	cu->driver_version = toggle_sim_driver_version(sim);
	cu->dl = NULL;
	cu->sim = sim;
}
