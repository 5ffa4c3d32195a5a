/*
 * toggle_sim.h - the in-tree CUDA simulator.
 *
 * A CPU model of the parts of the CUDA driver that libtoggle uses: streams,
 * stream capture, kernel nodes (a host function runs when the node executes),
 * other nodes, graphs, instantiation into execs with per-exec node enable
 * state, launch (runs the enabled nodes in capture order, synchronously),
 * upload, and failure injection.  Integrators use it to test their
 * integration on machines without a GPU: pass it in toggle_config.sim with
 * backend TOGGLE_BACKEND_SIM.
 *
 * Like the driver (measured on an H200, CUDA 13.0), node handles of a
 * destroyed graph are refused by set/get enabled, while its execs still
 * launch with the state they had.  Unlike the driver, a NULL stream is not
 * the default stream: it is refused.
 *
 * Handles (CUstream, CUgraph, CUgraphExec, CUgraphNode) returned by a
 * simulator belong to it and must only be used with it.  The simulator has
 * no global state; two simulators are independent.  Functions return
 * CUresult like the driver they model.
 */
#ifndef TOGGLE_SIM_H
#define TOGGLE_SIM_H

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

/* Operations that can be counted and made to fail. */
enum toggle_sim_op {
	TOGGLE_SIM_OP_GET_CAPTURE_INFO,
	TOGGLE_SIM_OP_NODE_GET_TYPE,
	TOGGLE_SIM_OP_NODE_SET_ENABLED,
	TOGGLE_SIM_OP_NODE_GET_ENABLED,
	TOGGLE_SIM_OP_GRAPH_LAUNCH,
	TOGGLE_SIM_OP_GRAPH_UPLOAD,
	TOGGLE_SIM_OP_INSTANTIATE,
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
