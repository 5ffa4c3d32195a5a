/*
 * cu.h - the table of CUDA driver entry points libtoggle calls.
 *
 * Every driver call goes through this table.  The cuda backend fills it from
 * libcuda.so.1 (dlopen + cuGetProcAddress, never linked at build time); the
 * sim backend fills it with the simulator's functions.  Signatures are the
 * driver's own, so the hot path is one indirect call.
 *
 * The first group is needed by every mode: without it the agent does not
 * open.  The second group is device mode's (the planner kernel, its memory,
 * stream-ordered mask writes): an entry the driver lacks stays NULL and only
 * device mode becomes unavailable (tg_cu_device_ready()).  Entry points that
 * take no handle (memory, modules, events, the internal stream) are reached
 * through the tg_cu_* helpers below, which pass the simulator its own
 * instance; the driver uses the calling thread's current context.
 */
#ifndef TG_CU_H
#define TG_CU_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>

struct toggle_sim;

/* Device mode needs the 12.4 device-updatable kernel node attribute. */
#if CUDA_VERSION >= 12040
#define TG_HAVE_DEVICE_MODE 1
#else
#define TG_HAVE_DEVICE_MODE 0
#endif

struct tg_cu {
	/* Every mode. */
	CUresult (*stream_get_capture_info)(CUstream, CUstreamCaptureStatus *, cuuint64_t *,
					    CUgraph *, const CUgraphNode **,
					    const CUgraphEdgeData **, size_t *);
	CUresult (*graph_node_get_type)(CUgraphNode, CUgraphNodeType *);
	CUresult (*graph_node_set_enabled)(CUgraphExec, CUgraphNode, unsigned);
	CUresult (*graph_node_get_enabled)(CUgraphExec, CUgraphNode, unsigned *);
	CUresult (*graph_launch)(CUgraphExec, CUstream);
	CUresult (*graph_upload)(CUgraphExec, CUstream);
	CUresult (*get_error_string)(CUresult, const char **);
	/* Graph identity, on slow paths only (registry.c, with graph_get_nodes
	 * above): cuGraphGetId and cuGraphExecGetId (CUDA 13.1+, NULL on older
	 * drivers: the CUDA 13.0 headers do not declare them). */
	CUresult (*graph_get_id)(CUgraph, unsigned *);
	CUresult (*graph_exec_get_id)(CUgraphExec, unsigned *);

	/* Device mode (NULL where the driver lacks them). */
	CUresult (*launch_kernel_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUresult (*stream_batch_mem_op)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned);
	CUresult (*memcpy_htod_async)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*stream_synchronize)(CUstream);
	CUresult (*event_record)(CUevent, CUstream);
	CUresult (*stream_wait_event)(CUstream, CUevent, unsigned);
	CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*graph_node_get_dependent_nodes)(CUgraphNode, CUgraphNode *, CUgraphEdgeData *,
						   size_t *);
	CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
	/* Producer regions (region.c): NULL makes only regions unavailable. */
	CUresult (*graph_node_get_dependencies)(CUgraphNode, CUgraphNode *, CUgraphEdgeData *,
						size_t *);
	CUresult (*graph_get_nodes)(CUgraph, CUgraphNode *, size_t *);
	/* Loading the copy kernel while a capture may be open (copyout.c). */
	CUresult (*thread_exchange_capture_mode)(CUstreamCaptureMode *);
	/* The producer-free exec (bare.c; NULL where the driver lacks them:
	 * no such exec is built then).  graph_instantiate,
	 * graph_node_get_dependent_nodes and graph_node_get_dependencies above too. */
	CUresult (*graph_clone)(CUgraph *, CUgraph);
	CUresult (*graph_node_find_in_clone)(CUgraphNode *, CUgraphNode, CUgraph);
	CUresult (*graph_destroy_node)(CUgraphNode);
	CUresult (*graph_add_dependencies)(CUgraph, const CUgraphNode *, const CUgraphNode *,
					   const CUgraphEdgeData *, size_t);
	CUresult (*graph_destroy)(CUgraph);
	CUresult (*graph_exec_destroy)(CUgraphExec);
	/* The device-mode bare exec (bare.c), assembled node by node because the
	 * driver refuses cuGraphClone of a graph with a device-updatable node.
	 * The getter/adder pair of a node type NULL: graphs holding such a node
	 * get no device-mode bare exec.  cuCtxGetCurrent: the context memcpy and
	 * memset nodes are added in. */
	CUresult (*kernel_node_get_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
	CUresult (*add_kernel_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				    const CUDA_KERNEL_NODE_PARAMS *);
	CUresult (*kernel_node_copy_attributes)(CUgraphNode, CUgraphNode);
	CUresult (*memset_node_get_params)(CUgraphNode, CUDA_MEMSET_NODE_PARAMS *);
	CUresult (*add_memset_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				    const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
	CUresult (*memcpy_node_get_params)(CUgraphNode, CUDA_MEMCPY3D *);
	CUresult (*add_memcpy_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				    const CUDA_MEMCPY3D *, CUcontext);
	CUresult (*add_empty_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t);
	CUresult (*event_record_node_get_event)(CUgraphNode, CUevent *);
	CUresult (*add_event_record_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
					  CUevent);
	CUresult (*event_wait_node_get_event)(CUgraphNode, CUevent *);
	CUresult (*add_event_wait_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUevent);
	CUresult (*host_node_get_params)(CUgraphNode, CUDA_HOST_NODE_PARAMS *);
	CUresult (*add_host_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				  const CUDA_HOST_NODE_PARAMS *);
	CUresult (*child_graph_node_get_graph)(CUgraphNode, CUgraph *);
	CUresult (*add_child_graph_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph);
	CUresult (*ctx_get_current)(CUcontext *);
	/* Lifetime (life.c): user objects whose destructors say that a graph, or
	 * the execs instantiated from it, are gone (CUDA 11.3+; NULL where the
	 * driver lacks them: the identity checks of registry.c stay the only
	 * ones, tg_cu_has_user_objects).  cuUserObjectCreate takes no handle:
	 * tg_cu_user_object_create. */
	CUresult (*graph_retain_user_object)(CUgraph, CUuserObject, unsigned, unsigned);
	CUresult (*graph_release_user_object)(CUgraph, CUuserObject, unsigned);
	CUresult (*user_object_release)(CUuserObject, unsigned);
	/* The data ring (record.c): NULL makes only recording unavailable
	 * (tg_cu_record_ready).  cuMemHostRegister is handle-less. */
	CUresult (*memcpy_dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*event_query)(CUevent);
	CUresult (*mem_host_register)(void *, size_t, unsigned);
	CUresult (*mem_host_unregister)(void *);
	/* Reached through the helpers below only. */
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*module_load_data)(CUmodule *, const void *);
	CUresult (*module_unload)(CUmodule);
	CUresult (*event_create)(CUevent *, unsigned);
	CUresult (*event_destroy)(CUevent);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*stream_destroy)(CUstream);
	CUresult (*ctx_get_device)(CUdevice *);
	CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
	CUresult (*mem_host_alloc)(void **, size_t, unsigned);
	CUresult (*mem_free_host)(void *);
	CUresult (*mem_host_get_device_pointer)(CUdeviceptr *, void *, unsigned);
	CUresult (*ctx_synchronize)(void);
	CUresult (*user_object_create)(CUuserObject *, void *, CUhostFn, unsigned, unsigned);
	CUresult (*graph_create)(CUgraph *, unsigned);

	const void *planner_image; /* fatbin (driver) or sim image; NULL: not built */
	int driver_version;        /* e.g. 13000 */
	void *dl;                  /* dlopen handle, NULL for the simulator */
	struct toggle_sim *sim;    /* the simulator, NULL for the driver */
};

/* Fill from libcuda.so.1.  0, or TOGGLE_ENODRIVER with err filled. */
int tg_cu_load_driver(struct tg_cu *cu, char *err, size_t errlen);
/* Fill with the simulator's entry points. */
void tg_cu_load_sim(struct tg_cu *cu, struct toggle_sim *sim);
void tg_cu_unload(struct tg_cu *cu);
/* Driver error name for messages, never NULL. */
const char *tg_cu_errstr(const struct tg_cu *cu, CUresult r);

/* Whether device mode's entry points are all there; *missing names one that is not. */
bool tg_cu_device_ready(const struct tg_cu *cu, const char **missing);
/* Whether the producer-free exec's entry points are all there (bare.c). */
bool tg_cu_bare_ready(const struct tg_cu *cu);
/* Whether the device-mode bare exec's entry points are there (bare.c): the
 * graph calls and kernel nodes' (other node types are checked one by one). */
bool tg_cu_assemble_ready(const struct tg_cu *cu);
/* Whether user objects are there (life.c): create, retain and release by graphs, release. */
bool tg_cu_has_user_objects(const struct tg_cu *cu);
/* Whether the data ring's entry points are there (record.c); *missing names one that is not. */
bool tg_cu_record_ready(const struct tg_cu *cu, const char **missing);

/* Handle-less entry points: the simulator gets its instance, the driver the current context. */
CUresult tg_cu_mem_alloc(const struct tg_cu *cu, CUdeviceptr *p, size_t n);
CUresult tg_cu_mem_free(const struct tg_cu *cu, CUdeviceptr p);
CUresult tg_cu_memcpy_dtoh(const struct tg_cu *cu, void *dst, CUdeviceptr src, size_t n);
CUresult tg_cu_module_load(const struct tg_cu *cu, CUmodule *mod, const void *image);
CUresult tg_cu_module_unload(const struct tg_cu *cu, CUmodule mod);
CUresult tg_cu_event_create(const struct tg_cu *cu, CUevent *ev);
CUresult tg_cu_event_destroy(const struct tg_cu *cu, CUevent ev);
CUresult tg_cu_stream_create(const struct tg_cu *cu, CUstream *s);
CUresult tg_cu_stream_destroy(const struct tg_cu *cu, CUstream s);
/* Host memory the device writes (pinned, mapped): *host for loads, *dev for kernels. */
CUresult tg_cu_mem_host_alloc(const struct tg_cu *cu, void **host, CUdeviceptr *dev, size_t n);
CUresult tg_cu_mem_host_free(const struct tg_cu *cu, void *host);
/* cuUserObjectCreate (flags CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, the only one defined). */
CUresult tg_cu_user_object_create(const struct tg_cu *cu, CUuserObject *out, void *ptr,
				  CUhostFn destroy, unsigned refs);
/* Page-lock [p, p + n) for the device's copies (cuMemHostRegister, portable). */
CUresult tg_cu_mem_host_register(const struct tg_cu *cu, void *p, size_t n);
CUresult tg_cu_mem_host_unregister(const struct tg_cu *cu, void *p);
/* cuGraphCreate (flags 0): an empty graph with explicit edges. */
CUresult tg_cu_graph_create(const struct tg_cu *cu, CUgraph *out);
/* Wait for all work of the context (the simulator: run everything queued). */
CUresult tg_cu_ctx_synchronize(const struct tg_cu *cu);
/* 64-bit stream memory operations on the current device (always for the simulator). */
bool tg_cu_has_64bit_memops(const struct tg_cu *cu);

/* The planner's image for the driver (planner_image.c): NULL when built without nvcc. */
const void *tg_planner_fatbin(void);
/* The planner's image for the simulator (planner_sim.c). */
const void *tg_planner_sim_image(void);
/* The copy kernel's image for the driver (copyout.c): NULL when built without nvcc. */
const void *tg_copyout_fatbin(void);
/* The copy kernel's image for the simulator (copyout.c). */
const void *tg_copyout_sim_image(void);
/* The recorder's gather kernel (gather_image.c): the fatbin (NULL when built
 * without nvcc) and the simulator's image. */
const void *tg_gather_fatbin(void);
const void *tg_gather_sim_image(void);

#endif /* TG_CU_H */
