/*
 * sim.c - the in-tree CUDA simulator (toggle_sim.h) and tg_cu_load_sim().
 *
 * A CPU model of streams, stream capture, graphs, execs and per-exec node
 * enable state, so that libtoggle and its integrators can be tested on
 * machines without a GPU.  All state hangs off struct toggle_sim; every
 * handle it hands out points to an object that starts with struct sim_hdr,
 * so a function that receives only a handle finds its simulator and can check
 * the handle's kind.
 *
 * Error rules: a handle that is NULL, destroyed or of another kind is
 * CUDA_ERROR_INVALID_HANDLE; a missing output pointer, or a node that is not
 * part of the exec it is used with, is CUDA_ERROR_INVALID_VALUE.  Codes
 * follow what the driver returned on the H200 (driver 580, CUDA 13.0): end
 * of a capture that is not open and destroy of a graph being captured are
 * CUDA_ERROR_ILLEGAL_STATE; launch or upload into a capturing stream is
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the driver also invalidates the
 * capture; the simulator leaves it open).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "toggle.h"
#include "toggle_sim.h"

#define SIM_MAGIC 0x6d697374u /* "tsim" */

enum sim_kind {
	SIM_STREAM = 1,
	SIM_GRAPH,
	SIM_EXEC,
	SIM_NODE,
};

/* First member of every object a handle points to. */
struct sim_hdr {
	uint32_t magic; /* SIM_MAGIC while alive, 0 once destroyed */
	uint32_t kind;  /* enum sim_kind */
	struct toggle_sim *sim;
};

/* Streams, graphs and execs are listed per simulator so that destroy frees them. */
struct sim_obj {
	struct sim_hdr hdr;
	struct sim_obj *prev, *next;
};

struct sim_node {
	struct sim_hdr hdr;
	unsigned index; /* position in its node set: an exec finds it in O(1) */
	CUgraphNodeType type;
	toggle_sim_kernel_fn fn; /* kernel nodes only */
	void *arg;
};

/*
 * The nodes of one graph, shared by the graph and every exec instantiated
 * from it (nodes are only appended and never change, so an exec needs no
 * copy).  Like the driver (measured on the H200, driver 580), node handles
 * die with their graph: set/get_enabled with them then fail with
 * CUDA_ERROR_INVALID_VALUE while the exec still launches with the state it
 * has.  The memory stays until the last exec goes, so such a stale handle is
 * refused rather than read after free, and no later node can take its
 * address and be mistaken for it.
 */
struct sim_nodeset {
	unsigned refs;
	unsigned n, cap;
	struct sim_node **v; /* pointers, so node addresses never move */
};

struct sim_stream;

struct sim_graph {
	struct sim_obj obj;
	struct sim_nodeset *nodes;
	struct sim_stream *capturing; /* stream capturing into this graph, or NULL */
};

struct sim_exec {
	struct sim_obj obj;
	struct sim_nodeset *nodes;
	unsigned n;             /* nodes the graph had when instantiated */
	unsigned char *enabled; /* one flag per node, all set at start */
	uint64_t launches;      /* successful launches, for debugging */
	bool uploaded;
};

struct sim_stream {
	struct sim_obj obj;
	struct sim_graph *capture; /* graph being captured into, or NULL */
	uint64_t capture_id;
	CUgraphNode dep;      /* get_capture_info's dependency array (last node) */
	CUgraphEdgeData edge; /* its edge data: zero, a default edge */
};

struct sim_fail {
	uint64_t skip;  /* calls still to let through */
	uint64_t times; /* calls still to fail after those */
	CUresult err;
};

struct toggle_sim {
	struct sim_obj streams, graphs, execs; /* list heads; magic 0, never a handle */
	uint64_t last_capture_id;
	uint64_t calls[TOGGLE_SIM_OP_COUNT];
	struct sim_fail fail[TOGGLE_SIM_OP_COUNT];
};

/* ---- objects and handles --------------------------------------------------- */

static void sim_list_init(struct sim_obj *head)
{
	head->prev = head;
	head->next = head;
}

static void sim_obj_add(struct toggle_sim *sim, struct sim_obj *head, struct sim_obj *o,
			enum sim_kind kind)
{
	o->hdr.magic = SIM_MAGIC;
	o->hdr.kind = kind;
	o->hdr.sim = sim;
	o->prev = head->prev;
	o->next = head;
	head->prev->next = o;
	head->prev = o;
}

/* Unlink and clear the magic, so a stale handle is refused rather than trusted. */
static void sim_obj_kill(struct sim_obj *o)
{
	o->prev->next = o->next;
	o->next->prev = o->prev;
	o->hdr.magic = 0;
}

/* The object behind handle h if it is a live object of that kind, else NULL. */
static void *sim_handle(void *h, enum sim_kind kind)
{
	struct sim_hdr *hdr = h;

	if (hdr == NULL || hdr->magic != SIM_MAGIC || hdr->kind != (uint32_t)kind)
		return NULL;
	return hdr;
}

static struct sim_stream *sim_stream_of(CUstream h)
{
	return sim_handle(h, SIM_STREAM);
}

static struct sim_graph *sim_graph_of(CUgraph h)
{
	return sim_handle(h, SIM_GRAPH);
}

static struct sim_exec *sim_exec_of(CUgraphExec h)
{
	return sim_handle(h, SIM_EXEC);
}

static struct sim_node *sim_node_of(CUgraphNode h)
{
	return sim_handle(h, SIM_NODE);
}

/* ---- counting and failure injection ----------------------------------------- */

/* The injected error for this call of op, or CUDA_SUCCESS. */
static CUresult sim_inject(struct toggle_sim *sim, enum toggle_sim_op op)
{
	struct sim_fail *f = &sim->fail[op];

	if (f->times == 0)
		return CUDA_SUCCESS;
	if (f->skip > 0) {
		f->skip--;
		return CUDA_SUCCESS;
	}
	f->times--;
	return f->err;
}

/*
 * Every counted entry point passes here once, before it changes anything:
 * the call is counted whatever happens, and only a call whose arguments are
 * valid (check == CUDA_SUCCESS) meets an injected failure, so `skip` counts
 * calls that would have succeeded.
 */
static CUresult sim_gate(struct toggle_sim *sim, enum toggle_sim_op op, CUresult check)
{
	sim->calls[op]++;
	if (check != CUDA_SUCCESS)
		return check;
	return sim_inject(sim, op);
}

/* ---- nodes --------------------------------------------------------------------- */

static struct sim_nodeset *sim_nodeset_new(void)
{
	struct sim_nodeset *ns = calloc(1, sizeof(*ns));

	if (ns != NULL)
		ns->refs = 1;
	return ns;
}

static void sim_nodeset_put(struct sim_nodeset *ns)
{
	if (--ns->refs > 0)
		return;
	/* The graph went first (sim_graph_free), so the handles are dead already. */
	for (unsigned i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
	free(ns);
}

/* Room for one more node pointer; only the pointer array moves. */
static bool sim_nodeset_reserve(struct sim_nodeset *ns)
{
	if (ns->n < ns->cap)
		return true;
	if (ns->cap > UINT32_MAX / 2)
		return false;
	unsigned cap = ns->cap ? ns->cap * 2 : 16;
	struct sim_node **v = realloc(ns->v, cap * sizeof(*v));
	if (v == NULL)
		return false;
	ns->v = v;
	ns->cap = cap;
	return true;
}

static struct sim_node *sim_nodeset_add(struct sim_nodeset *ns, struct toggle_sim *sim,
					CUgraphNodeType type, toggle_sim_kernel_fn fn, void *arg)
{
	if (!sim_nodeset_reserve(ns))
		return NULL;
	struct sim_node *nd = calloc(1, sizeof(*nd));
	if (nd == NULL)
		return NULL;
	nd->hdr.magic = SIM_MAGIC;
	nd->hdr.kind = SIM_NODE;
	nd->hdr.sim = sim;
	nd->index = ns->n;
	nd->type = type;
	nd->fn = fn;
	nd->arg = arg;
	ns->v[ns->n++] = nd;
	return nd;
}

/* ---- graphs and execs ------------------------------------------------------------ */

static struct sim_graph *sim_graph_new(struct toggle_sim *sim)
{
	struct sim_graph *g = calloc(1, sizeof(*g));

	if (g == NULL)
		return NULL;
	g->nodes = sim_nodeset_new();
	if (g->nodes == NULL) {
		free(g);
		return NULL;
	}
	sim_obj_add(sim, &sim->graphs, &g->obj, SIM_GRAPH);
	return g;
}

static void sim_graph_free(struct sim_graph *g)
{
	for (unsigned i = 0; i < g->nodes->n; i++)
		g->nodes->v[i]->hdr.magic = 0;
	sim_obj_kill(&g->obj);
	sim_nodeset_put(g->nodes);
	free(g);
}

static struct sim_exec *sim_exec_new(struct sim_graph *g)
{
	struct toggle_sim *sim = g->obj.hdr.sim;
	struct sim_exec *ex = calloc(1, sizeof(*ex));

	if (ex == NULL)
		return NULL;
	ex->n = g->nodes->n;
	/* One extra byte so that an empty graph is not a NULL special case. */
	ex->enabled = malloc((size_t)ex->n + 1);
	if (ex->enabled == NULL) {
		free(ex);
		return NULL;
	}
	memset(ex->enabled, 1, (size_t)ex->n + 1);
	ex->nodes = g->nodes;
	ex->nodes->refs++;
	sim_obj_add(sim, &sim->execs, &ex->obj, SIM_EXEC);
	return ex;
}

static void sim_exec_free(struct sim_exec *ex)
{
	sim_obj_kill(&ex->obj);
	sim_nodeset_put(ex->nodes);
	free(ex->enabled);
	free(ex);
}

/*
 * The index of node in ex, found by identity: the node's own index names the
 * only slot it can occupy.  A node of a destroyed graph is no longer a node.
 * Driver rule: only kernel, memcpy and memset nodes can be enabled or
 * disabled.
 */
static CUresult sim_exec_find(const struct sim_exec *ex, CUgraphNode node, unsigned *idx)
{
	const struct sim_node *nd = sim_node_of(node);

	if (nd == NULL || nd->hdr.sim != ex->obj.hdr.sim || nd->index >= ex->n ||
	    ex->nodes->v[nd->index] != nd)
		return CUDA_ERROR_INVALID_VALUE;
	if (nd->type != CU_GRAPH_NODE_TYPE_KERNEL && nd->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
	    nd->type != CU_GRAPH_NODE_TYPE_MEMSET)
		return CUDA_ERROR_INVALID_VALUE;
	*idx = nd->index;
	return CUDA_SUCCESS;
}

/* A stream an exec may be launched or uploaded into. */
static CUresult sim_exec_stream_check(const struct sim_exec *ex, CUstream stream)
{
	const struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL || st->obj.hdr.sim != ex->obj.hdr.sim)
		return CUDA_ERROR_INVALID_HANDLE;
	if (st->capture != NULL)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	return CUDA_SUCCESS;
}

/* ---- simulator ---------------------------------------------------------------------- */

int toggle_sim_create(struct toggle_sim **out)
{
	if (out == NULL)
		return TOGGLE_EINVAL;
	struct toggle_sim *sim = calloc(1, sizeof(*sim));
	if (sim == NULL)
		return TOGGLE_ENOMEM;
	sim_list_init(&sim->streams);
	sim_list_init(&sim->graphs);
	sim_list_init(&sim->execs);
	*out = sim;
	return 0;
}

void toggle_sim_destroy(struct toggle_sim *sim)
{
	if (sim == NULL)
		return;
	/* Execs and graphs first: they only drop node references.  Streams last,
	 * so that a capturing stream's graph is freed once, from the graph list. */
	while (sim->execs.next != &sim->execs)
		sim_exec_free((struct sim_exec *)sim->execs.next);
	while (sim->graphs.next != &sim->graphs)
		sim_graph_free((struct sim_graph *)sim->graphs.next);
	while (sim->streams.next != &sim->streams) {
		struct sim_obj *o = sim->streams.next;
		sim_obj_kill(o);
		free(o);
	}
	free(sim);
}

/* ---- streams and capture -------------------------------------------------------------- */

CUresult toggle_sim_stream_create(struct toggle_sim *sim, CUstream *out)
{
	if (sim == NULL || out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct sim_stream *st = calloc(1, sizeof(*st));
	if (st == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim_obj_add(sim, &sim->streams, &st->obj, SIM_STREAM);
	*out = (CUstream)st;
	return CUDA_SUCCESS;
}

/* A capture in progress dies with its stream: its graph was never handed over. */
CUresult toggle_sim_stream_destroy(CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (st->capture != NULL)
		sim_graph_free(st->capture);
	sim_obj_kill(&st->obj);
	free(st);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_stream_begin_capture(CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (st->capture != NULL)
		return CUDA_ERROR_ILLEGAL_STATE;
	struct toggle_sim *sim = st->obj.hdr.sim;
	struct sim_graph *g = sim_graph_new(sim);
	if (g == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->capturing = st;
	st->capture = g;
	st->capture_id = ++sim->last_capture_id;
	st->dep = NULL;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_stream_end_capture(CUstream stream, CUgraph *graph_out)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (graph_out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (st->capture == NULL)
		return CUDA_ERROR_ILLEGAL_STATE;
	st->capture->capturing = NULL;
	*graph_out = (CUgraph)st->capture;
	st->capture = NULL;
	st->dep = NULL;
	return CUDA_SUCCESS;
}

/* Append a node to the capture; each node depends on the one before it. */
static CUresult sim_capture_add(struct sim_stream *st, CUgraphNodeType type,
				toggle_sim_kernel_fn fn, void *arg)
{
	struct sim_node *nd = sim_nodeset_add(st->capture->nodes, st->obj.hdr.sim, type, fn, arg);

	if (nd == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	st->dep = (CUgraphNode)nd;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_launch_kernel(CUstream stream, toggle_sim_kernel_fn fn, void *arg)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (fn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (st->capture != NULL)
		return sim_capture_add(st, CU_GRAPH_NODE_TYPE_KERNEL, fn, arg);
	fn(arg);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_memset(CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (st->capture != NULL)
		return sim_capture_add(st, CU_GRAPH_NODE_TYPE_MEMSET, NULL, NULL);
	return CUDA_SUCCESS;
}

/*
 * The dependency set after n captured nodes is {last node}, empty right after
 * begin_capture.  Outputs are zeroed when not capturing, where the driver
 * leaves them undefined, so that a caller reading them anyway sees no graph.
 */
static void sim_capture_info_fill(struct sim_stream *st, CUstreamCaptureStatus *status_out,
				  cuuint64_t *id_out, CUgraph *graph_out,
				  const CUgraphNode **deps_out, const CUgraphEdgeData **edge_out,
				  size_t *ndeps_out)
{
	bool on = st->capture != NULL;
	size_t n = on && st->dep != NULL ? 1 : 0;

	*status_out = on ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	if (id_out != NULL)
		*id_out = on ? st->capture_id : 0;
	if (graph_out != NULL)
		*graph_out = on ? (CUgraph)st->capture : NULL;
	if (deps_out != NULL)
		*deps_out = n > 0 ? &st->dep : NULL;
	if (edge_out != NULL)
		*edge_out = n > 0 ? &st->edge : NULL;
	if (ndeps_out != NULL)
		*ndeps_out = n;
}

CUresult toggle_sim_stream_get_capture_info(CUstream stream, CUstreamCaptureStatus *status_out,
					    cuuint64_t *id_out, CUgraph *graph_out,
					    const CUgraphNode **deps_out,
					    const CUgraphEdgeData **edge_out, size_t *ndeps_out)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	/* The driver: status is required, and edge data only comes with deps. */
	bool bad = status_out == NULL || (edge_out != NULL && deps_out == NULL);
	CUresult r = sim_gate(st->obj.hdr.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO,
			      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	sim_capture_info_fill(st, status_out, id_out, graph_out, deps_out, edge_out, ndeps_out);
	return CUDA_SUCCESS;
}

/* ---- graphs, execs, nodes --------------------------------------------------------------- */

CUresult toggle_sim_graph_instantiate(CUgraphExec *exec_out, CUgraph graph)
{
	struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(g->obj.hdr.sim, TOGGLE_SIM_OP_INSTANTIATE,
			      exec_out == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_exec *ex = sim_exec_new(g);
	if (ex == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*exec_out = (CUgraphExec)ex;
	return CUDA_SUCCESS;
}

/* Like the driver, a graph cannot be destroyed while it is being captured into. */
CUresult toggle_sim_graph_destroy(CUgraph graph)
{
	struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (g->capturing != NULL)
		return CUDA_ERROR_ILLEGAL_STATE;
	sim_graph_free(g);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_exec_destroy(CUgraphExec exec)
{
	struct sim_exec *ex = sim_exec_of(exec);

	if (ex == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_exec_free(ex);
	return CUDA_SUCCESS;
}

unsigned toggle_sim_graph_node_count(CUgraph graph)
{
	const struct sim_graph *g = sim_graph_of(graph);

	return g != NULL ? g->nodes->n : 0;
}

CUresult toggle_sim_graph_node_get_type(CUgraphNode node, CUgraphNodeType *type)
{
	struct sim_node *nd = sim_node_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(nd->hdr.sim, TOGGLE_SIM_OP_NODE_GET_TYPE,
			      type == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	*type = nd->type;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_node_set_enabled(CUgraphExec exec, CUgraphNode node, unsigned enabled)
{
	struct sim_exec *ex = sim_exec_of(exec);
	unsigned idx = 0;

	if (ex == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(ex->obj.hdr.sim, TOGGLE_SIM_OP_NODE_SET_ENABLED,
			      sim_exec_find(ex, node, &idx));
	if (r != CUDA_SUCCESS)
		return r;
	ex->enabled[idx] = enabled != 0;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_node_get_enabled(CUgraphExec exec, CUgraphNode node, unsigned *enabled)
{
	struct sim_exec *ex = sim_exec_of(exec);
	unsigned idx = 0;

	if (ex == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult check = enabled == NULL ? CUDA_ERROR_INVALID_VALUE : sim_exec_find(ex, node, &idx);
	CUresult r = sim_gate(ex->obj.hdr.sim, TOGGLE_SIM_OP_NODE_GET_ENABLED, check);
	if (r != CUDA_SUCCESS)
		return r;
	*enabled = ex->enabled[idx];
	return CUDA_SUCCESS;
}

/* Runs the enabled kernel nodes in capture order, synchronously. */
CUresult toggle_sim_graph_launch(CUgraphExec exec, CUstream stream)
{
	struct sim_exec *ex = sim_exec_of(exec);

	if (ex == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(ex->obj.hdr.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH,
			      sim_exec_stream_check(ex, stream));
	if (r != CUDA_SUCCESS)
		return r;
	ex->launches++;
	for (unsigned i = 0; i < ex->n; i++) {
		const struct sim_node *nd = ex->nodes->v[i];
		if (ex->enabled[i] && nd->type == CU_GRAPH_NODE_TYPE_KERNEL)
			nd->fn(nd->arg);
	}
	return CUDA_SUCCESS;
}

/* Nothing to copy on the host; the mark is there for device mode to check later. */
CUresult toggle_sim_graph_upload(CUgraphExec exec, CUstream stream)
{
	struct sim_exec *ex = sim_exec_of(exec);

	if (ex == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(ex->obj.hdr.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD,
			      sim_exec_stream_check(ex, stream));
	if (r != CUDA_SUCCESS)
		return r;
	ex->uploaded = true;
	return CUDA_SUCCESS;
}

/* ---- errors ------------------------------------------------------------------------------ */

/* The driver's own texts, for the results the simulator returns or is often told to inject. */
static const struct {
	CUresult err;
	const char *str;
} sim_errors[] = {
	{ CUDA_SUCCESS, "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "initialization error" },
	{ CUDA_ERROR_INVALID_HANDLE, "invalid resource handle" },
	{ CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state" },
	{ CUDA_ERROR_NOT_SUPPORTED, "operation not supported" },
	{ CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
	  "operation not permitted when stream is capturing" },
	{ CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
	  "operation failed due to a previous error during capture" },
	{ CUDA_ERROR_UNKNOWN, "unknown error" },
};

/* Unlike the driver, a code it does not know still gets a text: "unknown error". */
CUresult toggle_sim_get_error_string(CUresult err, const char **str)
{
	if (str == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*str = "unknown error";
	for (size_t i = 0; i < sizeof(sim_errors) / sizeof(sim_errors[0]); i++) {
		if (sim_errors[i].err == err) {
			*str = sim_errors[i].str;
			break;
		}
	}
	return CUDA_SUCCESS;
}

/* ---- failure injection and counters -------------------------------------------------------- */

void toggle_sim_fail(struct toggle_sim *sim, enum toggle_sim_op op, uint64_t skip,
		     uint64_t times, CUresult err)
{
	if (sim == NULL || (unsigned)op >= TOGGLE_SIM_OP_COUNT)
		return;
	/* Injecting success would return without filling outputs: treat as cancel. */
	if (err == CUDA_SUCCESS)
		times = 0;
	sim->fail[op].skip = times > 0 ? skip : 0;
	sim->fail[op].times = times;
	sim->fail[op].err = err;
}

uint64_t toggle_sim_calls(const struct toggle_sim *sim, enum toggle_sim_op op)
{
	if (sim == NULL || (unsigned)op >= TOGGLE_SIM_OP_COUNT)
		return 0;
	return sim->calls[op];
}

void toggle_sim_reset_counters(struct toggle_sim *sim)
{
	if (sim != NULL)
		memset(sim->calls, 0, sizeof(sim->calls));
}

/* ---- the driver table --------------------------------------------------------------------- */

void tg_cu_load_sim(struct tg_cu *cu)
{
	cu->stream_get_capture_info = toggle_sim_stream_get_capture_info;
	cu->graph_node_get_type = toggle_sim_graph_node_get_type;
	cu->graph_node_set_enabled = toggle_sim_graph_node_set_enabled;
	cu->graph_node_get_enabled = toggle_sim_graph_node_get_enabled;
	cu->graph_launch = toggle_sim_graph_launch;
	cu->graph_upload = toggle_sim_graph_upload;
	cu->get_error_string = toggle_sim_get_error_string;
	cu->driver_version = 13000;
	cu->dl = NULL;
}
