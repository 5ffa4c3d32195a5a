/*
 * toggle_sim.h - the in-tree CUDA simulator.
 *
 * A CPU model of the parts of the CUDA driver that libtoggle uses: streams,
 * stream capture, kernel nodes (a host function runs when the node executes),
 * other nodes, graphs, instantiation into execs with per-exec node enable
 * state, launch (runs the enabled nodes in capture order), upload, and
 * failure injection.  Integrators use it to test their integration on
 * machines without a GPU: pass it in toggle_config.sim with backend
 * TOGGLE_BACKEND_SIM.
 *
 * Device mode's parts are modelled too: device memory (host memory behind
 * CUdeviceptr values), modules whose kernels are host functions
 * (struct toggle_sim_image), cuLaunchKernelEx with the device-updatable
 * kernel node attribute, the device-side cudaGraphKernelNodeSetEnabled
 * (toggle_sim_device_node_set_enabled), stream-ordered 64-bit writes
 * (cuStreamBatchMemOp), events, and the driver's rules for such graphs
 * (measured on an H200, CUDA 13.0): a graph holding device-updatable nodes
 * has one exec at a time (a second instantiation while the first exec lives
 * is CUDA_ERROR_NOT_SUPPORTED; after it is destroyed, it succeeds), and the
 * device-side calls made during the first launch of an exec that was not
 * uploaded before it fail (the driver fails about a third; the simulator
 * fails them all, deterministically).
 *
 * Execution is synchronous by default: work runs when it is submitted.  In
 * deferred mode (toggle_sim_set_deferred) work queues per stream and runs
 * only at a synchronisation, in an order drawn from a seed among the orders
 * that stream order, event waits and the serialisation of an exec's launches
 * allow: the model of pipelined launches that a host racing ahead of the
 * GPU needs.  Host calls (set enabled, copies to and from device memory)
 * act at once, like the driver's.
 *
 * Like the driver (measured on an H200, CUDA 13.0), node handles of a
 * destroyed graph are refused by set/get enabled, while its execs still
 * launch with the state they had.  User objects and their destructors
 * (called on a thread of the simulator's own) are modelled with the
 * driver's reference rules.  Unlike the driver, a NULL stream is not
 * the default stream: it is refused.
 *
 * Handles (CUstream, CUgraph, CUgraphExec, CUgraphNode) returned by a
 * simulator belong to it and must only be used with it.  The simulator has
 * no global state; two simulators are independent.  Functions return
 * CUresult like the driver they model.
 */
#ifndef TOGGLE_SIM_H
#define TOGGLE_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

struct toggle_sim;

/* A simulated kernel: runs on the host when its node (or launch) executes. */
typedef void (*toggle_sim_kernel_fn)(void *arg);

int toggle_sim_create(struct toggle_sim **out); /* 0, TOGGLE_EINVAL or TOGGLE_ENOMEM */
/* Frees every stream, graph and exec the simulator still owns. */
void toggle_sim_destroy(struct toggle_sim *sim);

CUresult toggle_sim_stream_create(struct toggle_sim *sim, CUstream *out);
CUresult toggle_sim_stream_destroy(CUstream stream);

/* Capture: like cuStreamBeginCapture / cuStreamEndCapture. */
CUresult toggle_sim_stream_begin_capture(CUstream stream);
CUresult toggle_sim_stream_end_capture(CUstream stream, CUgraph *graph_out);

/* Launch a kernel: added as a kernel node when capturing, else run now. */
CUresult toggle_sim_launch_kernel(CUstream stream, toggle_sim_kernel_fn fn, void *arg);
/* A non-kernel operation (a memset node when capturing, a no-op else). */
CUresult toggle_sim_memset(CUstream stream);
/* Another non-kernel operation: a memcpy node when capturing, a no-op else. */
CUresult toggle_sim_memcpy(CUstream stream);

CUresult toggle_sim_graph_instantiate(CUgraphExec *exec_out, CUgraph graph);
CUresult toggle_sim_graph_destroy(CUgraph graph);
CUresult toggle_sim_exec_destroy(CUgraphExec exec);
unsigned toggle_sim_graph_node_count(CUgraph graph);

/* The driver entry points libtoggle's table uses, with the driver's signatures. */
CUresult toggle_sim_stream_get_capture_info(CUstream stream, CUstreamCaptureStatus *status_out,
					    cuuint64_t *id_out, CUgraph *graph_out,
					    const CUgraphNode **deps_out,
					    const CUgraphEdgeData **edge_out, size_t *ndeps_out);
CUresult toggle_sim_graph_node_get_type(CUgraphNode node, CUgraphNodeType *type);
CUresult toggle_sim_graph_node_set_enabled(CUgraphExec exec, CUgraphNode node, unsigned enabled);
CUresult toggle_sim_graph_node_get_enabled(CUgraphExec exec, CUgraphNode node, unsigned *enabled);
CUresult toggle_sim_graph_launch(CUgraphExec exec, CUstream stream);
CUresult toggle_sim_graph_upload(CUgraphExec exec, CUstream stream);
CUresult toggle_sim_get_error_string(CUresult err, const char **str);
/* cuGraphInstantiateWithFlags (flags must be 0). */
CUresult toggle_sim_graph_instantiate_with_flags(CUgraphExec *exec_out, CUgraph graph,
						 unsigned long long flags);
/*
 * Dependencies, as stream capture makes them: a node depends on its stream's
 * frontier when it was captured (the previous node on that stream, plus
 * what event waits joined).  One stream captured alone makes a chain.
 * Fork and join: cuEventRecord into a capturing stream takes its frontier;
 * cuStreamWaitEvent with that event forks a stream that is not capturing
 * into the capture, or joins the frontier into one of the same capture.
 * End of capture on a forked stream is CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
 * on the origin with a forked stream's last node not joined back,
 * CUDA_ERROR_STREAM_CAPTURE_UNJOINED (the capture stays open).
 */
CUresult toggle_sim_graph_node_get_dependent_nodes(CUgraphNode node, CUgraphNode *deps,
						   CUgraphEdgeData *edges, size_t *n);
CUresult toggle_sim_graph_node_get_dependencies(CUgraphNode node, CUgraphNode *deps,
						CUgraphEdgeData *edges, size_t *n);
/* cuGraphGetNodes: nodes NULL gives the count in *n; else up to *n nodes in capture order. */
CUresult toggle_sim_graph_get_nodes(CUgraph graph, CUgraphNode *nodes, size_t *n);
/*
 * cuGraphGetId / cuGraphExecGetId: ids unique per simulator, never reused.
 * The driver has them from CUDA 13.1: libtoggle's table gets them only when
 * the simulated driver version (toggle_sim_set_driver_version, before the
 * agent opens) is 13010 or newer.
 */
CUresult toggle_sim_graph_get_id(CUgraph graph, unsigned *id);
CUresult toggle_sim_graph_exec_get_id(CUgraphExec exec, unsigned *id);
/*
 * Handle reuse (off by default): the memory of the last destroyed graph and
 * of the last destroyed exec is handed out again by the next graph (capture)
 * and exec (instantiation), so the new object gets the old handle, as the
 * driver's allocator may do.  Its id is new.  The nodes of the last node set
 * freed (a graph's nodes go once the graph and every exec instantiated from
 * it are destroyed) are handed out again too, in their order, to the next
 * nodes created: a new graph's first nodes get the dead graph's node handles
 * (the driver did so in every handle reuse measured on an H200, driver 580).
 */
void toggle_sim_set_handle_reuse(struct toggle_sim *sim, bool on);

/*
 * User objects (cuUserObjectCreate, CUDA 11.3+): a destructor and a count of
 * references owned by user code, by graphs and by execs, with the driver's
 * rules (CUDA C++ Programming Guide, "CUDA User Objects"): a graph's
 * references come from cuGraphRetainUserObject (flags 0: new references;
 * CU_GRAPH_USER_OBJECT_MOVE: the caller's), a clone gets a copy of every
 * reference of its source and an instantiated exec one of every reference
 * its graph owns at instantiation; a destroyed graph's or exec's references
 * go (an exec's once its queued launches ran).  When the last reference goes
 * the destructor is called on the simulator's destructor thread, never on
 * the caller's (no simulator call is allowed from it, as no CUDA call is
 * from the driver's).  Unlike the driver, releasing more references than
 * the graph (or user code) owns is refused with CUDA_ERROR_INVALID_VALUE:
 * driver 580 accepts it and corrupts the count.  flags of create must be
 * CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, the only one defined.
 */
CUresult toggle_sim_user_object_create(struct toggle_sim *sim, CUuserObject *out, void *ptr,
				       CUhostFn destroy, unsigned initial_refcount,
				       unsigned flags);
CUresult toggle_sim_user_object_retain(CUuserObject object, unsigned count);
CUresult toggle_sim_user_object_release(CUuserObject object, unsigned count);
CUresult toggle_sim_graph_retain_user_object(CUgraph graph, CUuserObject object, unsigned count,
					     unsigned flags);
CUresult toggle_sim_graph_release_user_object(CUgraph graph, CUuserObject object, unsigned count);

/* When a destructor runs, relative to the call that dropped the last reference. */
enum toggle_sim_destructors {
	/* Default: on the destructor thread, and that call returns once it ran
	 * (what driver 580 did for cuGraphDestroy, 200 of 200 times). */
	TOGGLE_SIM_DESTRUCTORS_WAIT = 0,
	/* On the destructor thread, whenever it gets to it: the call does not
	 * wait (the documented contract: no CUDA API waits for a destructor). */
	TOGGLE_SIM_DESTRUCTORS_ASYNC = 1,
	/* Queued until toggle_sim_run_destructors: a test places each exactly. */
	TOGGLE_SIM_DESTRUCTORS_HELD = 2,
	/* What driver 580 does (examples/probe_userobj.cu on the H200): a
	 * reference a graph drops (cuGraphDestroy, a release) runs its
	 * destructor inside the call, as WAIT; one an exec drops
	 * (cuGraphExecDestroy) only after the call returned (0 of 400 inside
	 * it), held here until toggle_sim_run_destructors places it: a new exec
	 * may get the dead one's handle meanwhile. */
	TOGGLE_SIM_DESTRUCTORS_EXEC_LATE = 3,
};
void toggle_sim_set_destructors(struct toggle_sim *sim, enum toggle_sim_destructors how);
/* Run the held destructors and wait until the thread has run every one queued so far. */
void toggle_sim_run_destructors(struct toggle_sim *sim);
/* User objects alive (leak checks).  toggle_sim_destroy destroys the rest, destructors run. */
unsigned toggle_sim_user_object_count(const struct toggle_sim *sim);

/*
 * Clones and graph edits (what libtoggle's producer-free exec uses):
 * cuGraphClone, cuGraphNodeFindInClone, cuGraphNodeGetDependencies (12.3
 * form), cuGraphDestroyNode, cuGraphAddDependencies (12.3 form).  A clone
 * has explicit edges; an exec of it runs its nodes in a topological order
 * that, among the nodes ready at each point, takes the last one in the
 * clone's order, so an order that rests on a missing edge shows.  Model
 * limits: only a clone's nodes can be destroyed or given dependencies, only
 * while no exec of it lives (else CUDA_ERROR_NOT_SUPPORTED), and edge data
 * must be the default.  As the driver: an existing dependency is
 * CUDA_ERROR_INVALID_VALUE, and so is destroying a device-updatable node.
 */
CUresult toggle_sim_graph_clone(CUgraph *clone_out, CUgraph original);
CUresult toggle_sim_graph_node_find_in_clone(CUgraphNode *node_out, CUgraphNode original,
					     CUgraph clone);
CUresult toggle_sim_graph_node_get_dependencies(CUgraphNode node, CUgraphNode *deps,
						CUgraphEdgeData *edges, size_t *n);
CUresult toggle_sim_graph_destroy_node(CUgraphNode node);
CUresult toggle_sim_graph_add_dependencies(CUgraph graph, const CUgraphNode *from,
					   const CUgraphNode *to, const CUgraphEdgeData *edges,
					   size_t n);
/*
 * Graphs built node by node (what libtoggle's device-mode bare exec uses: a
 * graph holding a device-updatable node cannot be cloned, a driver rule the
 * simulator keeps, CUDA_ERROR_NOT_SUPPORTED).  cuGraphCreate (flags 0), the
 * getters of kernel, memset and memcpy nodes and cuGraphAddKernelNode,
 * cuGraphAddMemsetNode, cuGraphAddMemcpyNode, cuGraphAddEmptyNode,
 * cuGraphKernelNodeCopyAttributes (refused to or from a device-updatable
 * node, as the driver documents).  A created graph has explicit edges and
 * the model limits of a clone.  A node of toggle_sim_launch_kernel reads
 * back as a kernel of one CUfunction of the simulator's own whose
 * kernelParams are {&fn, &arg}; cuGraphAddKernelNode with it adds such a
 * node again.  Memset and memcpy nodes keep the parameters they were added
 * with (zero for captured ones); ctx is not looked at (no contexts here).
 */
CUresult toggle_sim_graph_create(struct toggle_sim *sim, CUgraph *out, unsigned flags);
CUresult toggle_sim_graph_kernel_node_get_params(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p);
CUresult toggle_sim_graph_add_kernel_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					  size_t n, const CUDA_KERNEL_NODE_PARAMS *p);
CUresult toggle_sim_graph_kernel_node_copy_attributes(CUgraphNode dst, CUgraphNode src);
CUresult toggle_sim_graph_memset_node_get_params(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p);
CUresult toggle_sim_graph_memcpy_node_get_params(CUgraphNode node, CUDA_MEMCPY3D *p);
CUresult toggle_sim_graph_add_memset_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					  size_t n, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx);
CUresult toggle_sim_graph_add_memcpy_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					  size_t n, const CUDA_MEMCPY3D *p, CUcontext ctx);
CUresult toggle_sim_graph_add_empty_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					 size_t n);
/* Capture a node of another type than kernel (a no-op when it runs): a
 * memory-allocation or conditional node, say, that no getter reads back. */
CUresult toggle_sim_capture_node(CUstream stream, CUgraphNodeType type);

/* Graphs and execs alive in this simulator (leak checks). */
unsigned toggle_sim_graph_count(const struct toggle_sim *sim);
unsigned toggle_sim_exec_count(const struct toggle_sim *sim);

/* ---- device mode's parts ------------------------------------------------- */

/* The driver version the backend reports (default 13000, i.e. 13.0). */
void toggle_sim_set_driver_version(struct toggle_sim *sim, int version);
int toggle_sim_driver_version(const struct toggle_sim *sim);

/* Device memory: host memory, zeroed, behind a CUdeviceptr. */
CUresult toggle_sim_mem_alloc(struct toggle_sim *sim, CUdeviceptr *out, size_t bytes);
CUresult toggle_sim_mem_free(struct toggle_sim *sim, CUdeviceptr p);
/* Bytes allocated and not freed. */
size_t toggle_sim_mem_in_use(const struct toggle_sim *sim);
/* Host <-> device copies.  The async copy takes the source at the call (like a
 * copy from pageable memory) and writes in stream order; dtoh reads now. */
CUresult toggle_sim_memcpy_htod_async(CUdeviceptr dst, const void *src, size_t bytes,
				      CUstream stream);
CUresult toggle_sim_memcpy_dtoh(struct toggle_sim *sim, void *dst, CUdeviceptr src, size_t bytes);
/* cuStreamBatchMemOp: CU_STREAM_MEM_OP_WRITE_VALUE_64 only, count < 256, flags 0. */
CUresult toggle_sim_stream_batch_mem_op(CUstream stream, unsigned count,
					CUstreamBatchMemOpParams *ops, unsigned flags);

/* A simulated kernel of a module: params[i] points to parameter i's value. */
typedef void (*toggle_sim_kernel_ex_fn)(void **params);

#define TOGGLE_SIM_MAX_PARAMS 8
#define TOGGLE_SIM_IMAGE_MAGIC 0x6d697374696d6167ull /* "gamitsim" */

struct toggle_sim_function {
	const char *name;
	toggle_sim_kernel_ex_fn fn;
	unsigned n_params;
	size_t param_size[TOGGLE_SIM_MAX_PARAMS]; /* bytes copied from params[i] at launch */
};

/* What toggle_sim_module_load takes where cuModuleLoadData takes a fatbin. */
struct toggle_sim_image {
	uint64_t magic; /* TOGGLE_SIM_IMAGE_MAGIC; anything else: CUDA_ERROR_INVALID_IMAGE */
	unsigned n_functions;
	const struct toggle_sim_function *functions;
};

CUresult toggle_sim_module_load(struct toggle_sim *sim, CUmodule *out, const void *image);
CUresult toggle_sim_module_unload(CUmodule module);
CUresult toggle_sim_module_get_function(CUfunction *out, CUmodule module, const char *name);
const char *toggle_sim_function_name(CUfunction fn); /* its image's name; NULL: not a function */
/*
 * cuLaunchKernelEx.  Captured: a kernel node whose parameters are copied now;
 * with CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE (deviceUpdatable 1)
 * it is device-updatable and its device handle is written back into that
 * attribute's value.  The attribute on a stream that is not capturing is
 * CUDA_ERROR_NOT_SUPPORTED (as the driver answers).  extra must be NULL.
 */
CUresult toggle_sim_launch_kernel_ex(const CUlaunchConfig *config, CUfunction fn, void **params,
				     void **extra);
/*
 * The device-side cudaGraphKernelNodeSetEnabled: valid only from a kernel
 * that runs inside a launch of the exec holding the node (else
 * CUDA_ERROR_INVALID_VALUE); takes effect for the rest of this launch and
 * persists into later ones.  Fails during the first launch of an exec that
 * was not uploaded before it.
 */
#if CUDA_VERSION >= 12040 /* the headers name CUgraphDeviceNode from 12.4 on */
CUresult toggle_sim_device_node_set_enabled(CUgraphDeviceNode node, unsigned enable);
#endif

/* Events: record and wait in stream order (cuEventRecord, cuStreamWaitEvent). */
CUresult toggle_sim_event_create(struct toggle_sim *sim, CUevent *out);
CUresult toggle_sim_event_destroy(CUevent event);
CUresult toggle_sim_event_record(CUevent event, CUstream stream);
CUresult toggle_sim_stream_wait_event(CUstream stream, CUevent event, unsigned flags);
/* cuEventQuery: CUDA_SUCCESS once every record submitted so far has run
 * (never recorded: success too), else CUDA_ERROR_NOT_READY.  Never runs work. */
CUresult toggle_sim_event_query(CUevent event);

/*
 * Page-locked host memory and copies from the device in stream order (the
 * data ring's, libtoggle/include/toggle_ring.h).  cuMemHostRegister (flags 0
 * or CU_MEMHOSTREGISTER_PORTABLE; an overlap with a registered range is
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) and cuMemHostUnregister (after
 * the queued work, like a free).  cuMemcpyDtoHAsync reads the device memory
 * when the copy runs in its stream (after the work queued before it), not at
 * the call.  Stricter than the driver: its destination must lie in a
 * registered range (the driver takes pageable memory too, but then the copy
 * is staged and the host may wait: exactly what the recorder must not do).
 */
CUresult toggle_sim_mem_host_register(struct toggle_sim *sim, void *p, size_t bytes, unsigned flags);
CUresult toggle_sim_mem_host_unregister(struct toggle_sim *sim, void *p);
size_t toggle_sim_host_registered(const struct toggle_sim *sim); /* bytes registered (leak checks) */
CUresult toggle_sim_memcpy_dtoh_async(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);

/*
 * Deferred execution (off by default).  Turning it off runs what is queued.
 * The seed picks the order in which runnable streams go; the same seed and
 * the same calls give the same order.
 */
void toggle_sim_set_deferred(struct toggle_sim *sim, bool on, uint64_t seed);
/* Run queued work until this stream's queue is empty (cuStreamSynchronize). */
CUresult toggle_sim_stream_synchronize(CUstream stream);
/*
 * Run this stream's queued work only, in order, while its head is runnable;
 * every other stream is held (a copy engine or another stream far behind the
 * compute).  CUDA_SUCCESS when the queue emptied, CUDA_ERROR_NOT_READY when
 * its head waits for an event that a held stream records.  No driver call:
 * the simulator's own way to place the GPU's progress.
 */
CUresult toggle_sim_stream_run(CUstream stream);
/* Run all queued work (cuCtxSynchronize). */
void toggle_sim_synchronize(struct toggle_sim *sim);

/* Operations that can be counted and made to fail. */
enum toggle_sim_op {
	TOGGLE_SIM_OP_GET_CAPTURE_INFO,
	TOGGLE_SIM_OP_NODE_GET_TYPE,
	TOGGLE_SIM_OP_NODE_SET_ENABLED,
	TOGGLE_SIM_OP_NODE_GET_ENABLED,
	TOGGLE_SIM_OP_GRAPH_LAUNCH,
	TOGGLE_SIM_OP_GRAPH_UPLOAD,
	TOGGLE_SIM_OP_INSTANTIATE,
	TOGGLE_SIM_OP_LAUNCH_KERNEL_EX,
	TOGGLE_SIM_OP_BATCH_MEM_OP,
	TOGGLE_SIM_OP_MEMCPY_HTOD,
	TOGGLE_SIM_OP_MEM_ALLOC,
	TOGGLE_SIM_OP_MODULE_LOAD,
	TOGGLE_SIM_OP_EVENT_RECORD,
	TOGGLE_SIM_OP_STREAM_WAIT_EVENT,
	TOGGLE_SIM_OP_DEVICE_SET_ENABLED, /* device-side calls, counted when they run */
	TOGGLE_SIM_OP_GRAPH_CLONE,
	TOGGLE_SIM_OP_DESTROY_NODE,
	TOGGLE_SIM_OP_ADD_DEPENDENCIES,
	TOGGLE_SIM_OP_USER_OBJECT_CREATE,
	TOGGLE_SIM_OP_GRAPH_RETAIN_USER_OBJECT,
	TOGGLE_SIM_OP_GRAPH_RELEASE_USER_OBJECT,
	TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC,
	TOGGLE_SIM_OP_EVENT_QUERY,
	TOGGLE_SIM_OP_HOST_REGISTER,
	TOGGLE_SIM_OP_GRAPH_CREATE,    /* cuGraphCreate */
	TOGGLE_SIM_OP_ADD_NODE,        /* every cuGraphAdd*Node */
	TOGGLE_SIM_OP_NODE_GET_PARAMS, /* the node getters and cuGraphKernelNodeCopyAttributes */
	TOGGLE_SIM_OP_COUNT
};

/*
 * Make the call of op that comes after `skip` more successful calls fail
 * with err, `times` times in a row (0 = cancel).  A failed call changes
 * nothing, like a driver call that returns an error.
 */
void toggle_sim_fail(struct toggle_sim *sim, enum toggle_sim_op op, uint64_t skip,
		     uint64_t times, CUresult err);
/* Calls of op so far (failed ones included). */
uint64_t toggle_sim_calls(const struct toggle_sim *sim, enum toggle_sim_op op);
void toggle_sim_reset_counters(struct toggle_sim *sim);

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_SIM_H */
