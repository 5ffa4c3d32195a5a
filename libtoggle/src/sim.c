/*
 * sim.c - the in-tree CUDA simulator (toggle_sim.h); cu_sim.c fills the
 * driver table from it (tg_cu_load_sim).
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
 *
 * Device mode's model: device memory is a list of host allocations; a module
 * is a table of host functions; a kernel node launched with the
 * device-updatable attribute carries a second handle (its CUgraphDeviceNode)
 * that toggle_sim_device_node_set_enabled() takes while a launch of its exec
 * runs.  Work goes through one submission point (sim_submit): it runs at
 * once, or in deferred mode joins its stream's queue, and sim_run() executes
 * queued work in an order drawn from the seed among the runnable queue heads.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "toggle.h"
#include "toggle_sim.h"

#define SIM_MAGIC 0x6d697374u /* "tsim" */
/* Device-updatable kernel nodes need the CUDA 12.4 headers; older ones build a
 * simulator without them (libtoggle's device mode is unavailable there too). */
#define TG_SIM_DEVUPD (CUDA_VERSION >= 12040)

enum sim_kind {
	SIM_STREAM = 1,
	SIM_GRAPH,
	SIM_EXEC,
	SIM_NODE,
	SIM_DEVNODE,
	SIM_MODULE,
	SIM_FUNCTION,
	SIM_EVENT,
	SIM_UOBJ,
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

struct sim_nodeset;
struct sim_uobj;

/* The user-object references a graph or an exec owns: object and count. */
struct sim_uref {
	struct sim_uobj *obj;
	unsigned count;
};

struct sim_urefs {
	struct sim_uref *v;
	unsigned n, cap;
};

struct sim_node {
	struct sim_hdr hdr;
	struct sim_hdr devhdr;   /* the CUgraphDeviceNode handle, live when device-updatable */
	struct sim_nodeset *set; /* the node set it belongs to */
	unsigned index; /* position in its node set: an exec finds it in O(1) */
	/* Clones (see "clones and graph edits" below). */
	const struct sim_node *origin; /* the node it was cloned from (compared, never read) */
	bool removed;                  /* cuGraphDestroyNode: no longer part of its graph */
	CUgraphNodeType type;
	toggle_sim_kernel_fn fn; /* kernel nodes of toggle_sim_launch_kernel */
	void *arg;
	const struct toggle_sim_function *func; /* kernel nodes of launch_kernel_ex */
	unsigned char *params;                  /* their parameters, copied at capture */
	struct sim_function *fh;                /* their CUfunction (cuGraphKernelNodeGetParams) */
	/* cuGraphKernelNodeGetParams' kernelParams: pointers into this node, as
	 * the driver's point into its own copy (valid while the node lives). */
	void *pv[TOGGLE_SIM_MAX_PARAMS];
	/* Memset and memcpy nodes: their parameters (zero when captured through
	 * toggle_sim_memset / toggle_sim_memcpy, which take none). */
	CUDA_MEMSET_NODE_PARAMS memset;
	CUDA_MEMCPY3D memcpy;
	bool devupd;
	/* Edges: the stream's dependency frontier when it was captured, and the
	 * nodes captured after it that depend on it. */
	struct sim_node **deps, **outs;
	unsigned n_deps, n_outs, cap_outs;
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
	unsigned execs; /* live execs instantiated from it */
	unsigned n, cap;
	struct sim_node **v; /* pointers, so node addresses never move */
	/* A clone can lose nodes and gain edges (see "clones and graph edits"). */
	bool clone;
	unsigned removed; /* nodes destroyed; they stay in v until the last reference goes */
};

struct sim_stream;

struct sim_graph {
	struct sim_obj obj;
	struct sim_nodeset *nodes;
	struct sim_stream *capturing; /* stream capturing into this graph, or NULL */
	bool devupd;                  /* holds a device-updatable node */
	unsigned id;                  /* cuGraphGetId: unique per simulator */
	struct sim_urefs urefs;       /* user objects it holds references to */
};

struct sim_exec {
	struct sim_obj obj;
	struct sim_nodeset *nodes;
	unsigned n;             /* nodes the graph had when instantiated */
	unsigned char *enabled; /* one flag per node, all set at start: the host's state */
	/* Device-updatable nodes run with the device's copy of their state: the
	 * device-side calls set it, and an upload (or the first launch) copies
	 * the host's state into it.  A host set_enabled on such a node reaches
	 * launches only through an upload, as the driver requires. */
	unsigned char *dev_enabled;
	uint64_t launches;      /* successful launches, for debugging */
	uint64_t enqueued;      /* launches and uploads submitted: each runs after those before */
	uint64_t done;          /* launches and uploads run */
	bool uploaded;          /* uploaded, or launched once */
	bool dev_ok;            /* device-side calls succeed in the launch now running */
	unsigned id;            /* cuGraphExecGetId: unique per simulator */
	struct sim_urefs urefs; /* copies of its graph's references, taken at instantiation */
};

struct sim_work;

struct sim_stream {
	struct sim_obj obj;
	struct sim_graph *capture; /* graph being captured into, or NULL */
	uint64_t capture_id;
	bool forked;          /* joined a capture begun on another stream (event wait) */
	/* The capture's dependency frontier for this stream: what the next node
	 * captured into it depends on, get_capture_info's dependency array. */
	CUgraphNode *front;
	CUgraphEdgeData *front_edges; /* zero: default edges */
	unsigned n_front, cap_front;
	struct sim_work *head, *tail; /* deferred work, in stream order */
};

struct sim_module {
	struct sim_obj obj;
	const struct toggle_sim_image *image;
	struct sim_function *functions; /* one per image function */
};

struct sim_function {
	struct sim_hdr hdr;
	struct sim_module *module;
	const struct toggle_sim_function *f;
};

struct sim_event {
	struct sim_obj obj;
	uint64_t recorded; /* records submitted */
	uint64_t reached;  /* records run */
	/* Recorded into a capture: that capture's id and the stream's frontier
	 * then (a wait forks or joins the capture); cap_id 0: a plain record. */
	uint64_t cap_id;
	CUgraphNode *cap_front;
	unsigned n_cap_front;
};

/*
 * A user object (cuUserObjectCreate): a destructor and a count of every
 * reference, owned by user code, by graphs and by execs.  When the count
 * reaches zero the object's handle dies and its destructor is queued for
 * the simulator's destructor thread (sim_dtor_queue).
 */
struct sim_uobj {
	struct sim_obj obj;
	uint64_t refs; /* all references */
	uint64_t user; /* of which user code owns (cuUserObjectRetain/Release, MOVE) */
	void *ptr;
	CUhostFn fn;
};

/* A destructor call waiting for the destructor thread (or, held, for toggle_sim_run_destructors). */
struct sim_dtor {
	struct sim_dtor *next;
	CUhostFn fn;
	void *ptr;
};

/* A range of host memory registered with cuMemHostRegister. */
struct sim_hostreg {
	struct sim_hostreg *next;
	unsigned char *base;
	size_t bytes;
};

/* One allocation of device memory. */
struct sim_alloc {
	struct sim_alloc *next;
	size_t bytes;
	unsigned char *data;
};

enum sim_work_kind {
	SIM_W_KERNEL,    /* toggle_sim_launch_kernel outside capture */
	SIM_W_KERNEL_EX, /* launch_kernel_ex outside capture */
	SIM_W_GRAPH,     /* a graph launch */
	SIM_W_UPLOAD,    /* a graph upload */
	SIM_W_WRITE64,   /* one 64-bit write of a batch */
	SIM_W_COPY,      /* an async host-to-device copy */
	SIM_W_DTOH,      /* an async device-to-host copy: reads the source when it runs */
	SIM_W_RECORD,    /* an event record */
	SIM_W_WAIT,      /* a wait for an event record */
};

struct sim_work {
	struct sim_work *next;
	enum sim_work_kind kind;
	toggle_sim_kernel_fn fn;                /* KERNEL */
	void *arg;
	const struct toggle_sim_function *func; /* KERNEL_EX */
	struct sim_exec *exec;                  /* GRAPH */
	uint64_t seq;                           /* GRAPH: launch number; RECORD/WAIT: record */
	unsigned char *data;                    /* KERNEL_EX params, GRAPH enable snapshot, COPY */
	unsigned char *dst;                     /* WRITE64, COPY */
	uint64_t value;                         /* WRITE64 */
	size_t bytes;                           /* COPY, DTOH */
	const unsigned char *src;               /* DTOH: device memory, read when it runs */
	struct sim_event *event;                /* RECORD, WAIT */
};

struct sim_fail {
	uint64_t skip;  /* calls still to let through */
	uint64_t times; /* calls still to fail after those */
	CUresult err;
};

struct toggle_sim {
	/* list heads; magic 0, never a handle */
	struct sim_obj streams, graphs, execs, modules, events, uobjs;
	uint64_t last_capture_id;
	uint64_t calls[TOGGLE_SIM_OP_COUNT];
	struct sim_fail fail[TOGGLE_SIM_OP_COUNT];
	int driver_version;
	struct sim_alloc *allocs;
	size_t mem_in_use;
	struct sim_hostreg *hostregs; /* cuMemHostRegister'ed ranges */
	bool deferred;
	uint64_t rng;             /* deferred mode's order */
	struct sim_exec *running; /* exec whose launch is running, for device-side calls */
	/* The CUfunction that cuGraphKernelNodeGetParams names for a node of
	 * toggle_sim_launch_kernel (fn, arg): kernelParams {&fn, &arg}.  Only
	 * cuGraphAddKernelNode takes it. */
	struct sim_function plain;
	/* Handle reuse (toggle_sim_set_handle_reuse): the last destroyed graph and
	 * exec, whose memory (so whose handle) the next creation hands out again. */
	bool reuse;
	struct sim_graph *spare_graph;
	struct sim_exec *spare_exec;
	struct sim_node **spare_nodes; /* the last freed node set's nodes, handed out in order */
	unsigned n_spare_nodes, spare_at;
	unsigned last_graph_id, last_exec_id;
	/* User objects' destructors (toggle_sim_set_destructors): run on a thread
	 * of the simulator's own, never on the caller's.  Everything below dt_mu
	 * is read and written under it. */
	enum toggle_sim_destructors dt_mode;
	pthread_mutex_t dt_mu;
	pthread_cond_t dt_cv;
	pthread_t dt_thread;
	bool dt_started, dt_stop;
	struct sim_dtor *dt_head, *dt_tail;     /* for the thread */
	struct sim_dtor *held_head, *held_tail; /* TOGGLE_SIM_DESTRUCTORS_HELD: until run */
	uint64_t dt_queued, dt_done;            /* handed to the thread, run by it */
};

/* Clones and graph edits (the producer-free exec), defined at the end. */
static CUresult sim_edges_order(const struct sim_nodeset *ns, struct sim_node ***out,
				unsigned *live);
static void sim_edges_apply(struct sim_nodeset *ns, struct sim_node **order);

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

#if TG_SIM_DEVUPD
static struct sim_node *sim_devnode_of(CUgraphDeviceNode h)
{
	struct sim_hdr *hdr = sim_handle(h, SIM_DEVNODE);

	return hdr != NULL ? (struct sim_node *)((char *)hdr - offsetof(struct sim_node, devhdr))
			   : NULL;
}
#endif

static struct sim_module *sim_module_of(CUmodule h)
{
	return sim_handle(h, SIM_MODULE);
}

static struct sim_function *sim_function_of(CUfunction h)
{
	return sim_handle(h, SIM_FUNCTION);
}

static struct sim_event *sim_event_of(CUevent h)
{
	return sim_handle(h, SIM_EVENT);
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

/* Free the node structures kept for handle reuse and not handed out again. */
static void sim_spare_nodes_free(struct toggle_sim *sim)
{
	for (unsigned i = sim->spare_at; i < sim->n_spare_nodes; i++)
		free(sim->spare_nodes[i]);
	free(sim->spare_nodes);
	sim->spare_nodes = NULL;
	sim->n_spare_nodes = sim->spare_at = 0;
}

static void sim_nodeset_put(struct sim_nodeset *ns)
{
	if (--ns->refs > 0)
		return;
	/* The graph went first (sim_graph_free), so the handles are dead already. */
	struct toggle_sim *sim = ns->n ? ns->v[0]->hdr.sim : NULL;
	for (unsigned i = 0; i < ns->n; i++) {
		free(ns->v[i]->params);
		free(ns->v[i]->deps);
		free(ns->v[i]->outs);
		if (!sim->reuse)
			free(ns->v[i]);
	}
	if (sim && sim->reuse) {
		/* Handle reuse: the next nodes created get these addresses, in this
		 * order, as the driver's allocator hands a dead graph's out again
		 * (measured on an H200, driver 580: every node handle of a destroyed
		 * graph of 8 kernels was a node handle of the next graph captured). */
		sim_spare_nodes_free(sim);
		sim->spare_nodes = ns->v;
		sim->n_spare_nodes = ns->n;
		free(ns);
		return;
	}
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
	struct sim_node *nd = NULL;
	if (sim->spare_at < sim->n_spare_nodes) {
		nd = sim->spare_nodes[sim->spare_at++]; /* handle reuse: a dead node's address */
		memset(nd, 0, sizeof(*nd));
	} else if ((nd = calloc(1, sizeof(*nd))) == NULL) {
		return NULL;
	}
	nd->hdr.magic = SIM_MAGIC;
	nd->hdr.kind = SIM_NODE;
	nd->hdr.sim = sim;
	nd->devhdr.kind = SIM_DEVNODE;
	nd->devhdr.sim = sim;
	nd->set = ns;
	nd->index = ns->n;
	nd->type = type;
	nd->fn = fn;
	nd->arg = arg;
	ns->v[ns->n++] = nd;
	return nd;
}

/* ---- user objects ----------------------------------------------------------------- */

static struct sim_uobj *sim_uobj_of(CUuserObject h)
{
	return sim_handle(h, SIM_UOBJ);
}

/* The destructor thread: runs queued destructors one at a time, in order. */
static void *sim_dtor_main(void *arg)
{
	struct toggle_sim *sim = arg;

	pthread_mutex_lock(&sim->dt_mu);
	for (;;) {
		while (sim->dt_head == NULL && !sim->dt_stop)
			pthread_cond_wait(&sim->dt_cv, &sim->dt_mu);
		struct sim_dtor *d = sim->dt_head;
		if (d == NULL)
			break; /* stopping, nothing left */
		sim->dt_head = d->next;
		if (sim->dt_head == NULL)
			sim->dt_tail = NULL;
		pthread_mutex_unlock(&sim->dt_mu);
		d->fn(d->ptr);
		free(d);
		pthread_mutex_lock(&sim->dt_mu);
		sim->dt_done++;
		pthread_cond_broadcast(&sim->dt_cv);
	}
	pthread_mutex_unlock(&sim->dt_mu);
	return NULL;
}

/* Hand the list first..last (n calls) to the thread; wait until they ran if wait.  Under dt_mu. */
static void sim_dtor_give(struct toggle_sim *sim, struct sim_dtor *first, struct sim_dtor *last,
			  uint64_t n, bool wait)
{
	if (!sim->dt_started) {
		if (pthread_create(&sim->dt_thread, NULL, sim_dtor_main, sim) != 0) {
			/* No thread to be had: run them here (the model's only departure). */
			pthread_mutex_unlock(&sim->dt_mu);
			while (first != NULL) {
				struct sim_dtor *d = first;
				first = d->next;
				d->fn(d->ptr);
				free(d);
			}
			pthread_mutex_lock(&sim->dt_mu);
			return;
		}
		sim->dt_started = true;
	}
	if (sim->dt_tail != NULL)
		sim->dt_tail->next = first;
	else
		sim->dt_head = first;
	sim->dt_tail = last;
	sim->dt_queued += n;
	uint64_t ticket = sim->dt_queued;
	pthread_cond_broadcast(&sim->dt_cv);
	while (wait && sim->dt_done < ticket)
		pthread_cond_wait(&sim->dt_cv, &sim->dt_mu);
}

/* The last reference is gone: the destructor runs as toggle_sim_set_destructors says. */
static void sim_dtor_queue(struct toggle_sim *sim, CUhostFn fn, void *ptr, bool by_exec)
{
	struct sim_dtor *d = calloc(1, sizeof(*d));

	if (d == NULL) {
		fn(ptr); /* out of memory: still called, once */
		return;
	}
	d->fn = fn;
	d->ptr = ptr;
	pthread_mutex_lock(&sim->dt_mu);
	bool held = sim->dt_mode == TOGGLE_SIM_DESTRUCTORS_HELD ||
		    (sim->dt_mode == TOGGLE_SIM_DESTRUCTORS_EXEC_LATE && by_exec);
	if (held) {
		if (sim->held_tail != NULL)
			sim->held_tail->next = d;
		else
			sim->held_head = d;
		sim->held_tail = d;
	} else {
		sim_dtor_give(sim, d, d, 1, sim->dt_mode != TOGGLE_SIM_DESTRUCTORS_ASYNC);
	}
	pthread_mutex_unlock(&sim->dt_mu);
}

/* Drop n references of o (the caller checked it has them); the last one destroys it. */
static void sim_uobj_release(struct sim_uobj *o, uint64_t n, bool by_exec)
{
	o->refs -= n;
	if (o->refs > 0)
		return;
	struct toggle_sim *sim = o->obj.hdr.sim;
	CUhostFn fn = o->fn;
	void *ptr = o->ptr;
	sim_obj_kill(&o->obj);
	free(o);
	sim_dtor_queue(sim, fn, ptr, by_exec);
}

/* The count of o in r, or NULL. */
static struct sim_uref *sim_urefs_find(const struct sim_urefs *r, const struct sim_uobj *o)
{
	for (unsigned i = 0; i < r->n; i++)
		if (r->v[i].obj == o)
			return &r->v[i];
	return NULL;
}

/* r owns count more references of o (counted in o); false when out of memory. */
static bool sim_urefs_add(struct sim_urefs *r, struct sim_uobj *o, unsigned count)
{
	struct sim_uref *have = sim_urefs_find(r, o);
	if (have == NULL) {
		if (r->n == r->cap) {
			unsigned cap = r->cap ? 2 * r->cap : 4;
			struct sim_uref *v = realloc(r->v, cap * sizeof(*v));
			if (v == NULL)
				return false;
			r->v = v;
			r->cap = cap;
		}
		have = &r->v[r->n++];
		*have = (struct sim_uref){.obj = o, .count = 0};
	}
	have->count += count;
	o->refs += count;
	return true;
}

/* dst takes a copy of every reference src owns, with its count (clone, instantiate). */
static bool sim_urefs_copy(struct sim_urefs *dst, const struct sim_urefs *src)
{
	for (unsigned i = 0; i < src->n; i++)
		if (!sim_urefs_add(dst, src->v[i].obj, src->v[i].count))
			return false;
	return true;
}

/* Every reference r owns goes (its graph or exec, by_exec, is destroyed). */
static void sim_urefs_drop(struct sim_urefs *r, bool by_exec)
{
	struct sim_uref *v = r->v;
	unsigned n = r->n;

	*r = (struct sim_urefs){0};
	for (unsigned i = 0; i < n; i++)
		sim_uobj_release(v[i].obj, v[i].count, by_exec);
	free(v);
}

CUresult toggle_sim_user_object_create(struct toggle_sim *sim, CUuserObject *out, void *ptr,
				       CUhostFn destroy, unsigned initial_refcount,
				       unsigned flags)
{
	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	bool bad = out == NULL || destroy == NULL || initial_refcount == 0 ||
		   initial_refcount > INT32_MAX || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC;
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_USER_OBJECT_CREATE,
			      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_uobj *o = calloc(1, sizeof(*o));
	if (o == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->refs = o->user = initial_refcount;
	o->ptr = ptr;
	o->fn = destroy;
	sim_obj_add(sim, &sim->uobjs, &o->obj, SIM_UOBJ);
	*out = (CUuserObject)o;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_user_object_retain(CUuserObject object, unsigned count)
{
	struct sim_uobj *o = sim_uobj_of(object);

	if (o == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (count == 0 || count > INT32_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	o->refs += count;
	o->user += count;
	return CUDA_SUCCESS;
}

/* Unlike the driver (which trusts the caller), more than user code owns is refused. */
CUresult toggle_sim_user_object_release(CUuserObject object, unsigned count)
{
	struct sim_uobj *o = sim_uobj_of(object);

	if (o == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (count == 0 || count > INT32_MAX || count > o->user)
		return CUDA_ERROR_INVALID_VALUE;
	o->user -= count;
	sim_uobj_release(o, count, false);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_retain_user_object(CUgraph graph, CUuserObject object, unsigned count,
					     unsigned flags)
{
	struct sim_graph *g = sim_graph_of(graph);
	struct sim_uobj *o = sim_uobj_of(object);

	if (g == NULL || o == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	bool move = flags == CU_GRAPH_USER_OBJECT_MOVE;
	bool bad = count == 0 || count > INT32_MAX || (flags != 0 && !move) ||
		   o->obj.hdr.sim != g->obj.hdr.sim || (move && count > o->user);
	CUresult r = sim_gate(g->obj.hdr.sim, TOGGLE_SIM_OP_GRAPH_RETAIN_USER_OBJECT,
			      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	if (!sim_urefs_add(&g->urefs, o, count))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (move) { /* the caller's references become the graph's: the total does not move */
		o->user -= count;
		o->refs -= count;
	}
	return CUDA_SUCCESS;
}

/*
 * Unlike the driver: releasing more references than the graph owns is
 * refused (driver 580 returns CUDA_SUCCESS for a graph that owns none and
 * takes them from the object's count, so that its owner's release later
 * frees it twice).
 */
CUresult toggle_sim_graph_release_user_object(CUgraph graph, CUuserObject object, unsigned count)
{
	struct sim_graph *g = sim_graph_of(graph);
	struct sim_uobj *o = sim_uobj_of(object);

	if (g == NULL || o == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct sim_uref *have = sim_urefs_find(&g->urefs, o);
	bool bad = count == 0 || count > INT32_MAX || have == NULL || count > have->count;
	CUresult r = sim_gate(g->obj.hdr.sim, TOGGLE_SIM_OP_GRAPH_RELEASE_USER_OBJECT,
			      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	have->count -= count;
	if (have->count == 0)
		*have = g->urefs.v[--g->urefs.n];
	sim_uobj_release(o, count, false);
	return CUDA_SUCCESS;
}

void toggle_sim_set_destructors(struct toggle_sim *sim, enum toggle_sim_destructors how)
{
	if (sim == NULL || (unsigned)how > TOGGLE_SIM_DESTRUCTORS_EXEC_LATE)
		return;
	pthread_mutex_lock(&sim->dt_mu);
	sim->dt_mode = how;
	pthread_mutex_unlock(&sim->dt_mu);
}

void toggle_sim_run_destructors(struct toggle_sim *sim)
{
	if (sim == NULL)
		return;
	pthread_mutex_lock(&sim->dt_mu);
	struct sim_dtor *first = sim->held_head, *last = sim->held_tail;
	uint64_t n = 0;
	for (struct sim_dtor *d = first; d != NULL; d = d->next)
		n++;
	sim->held_head = sim->held_tail = NULL;
	if (first != NULL)
		sim_dtor_give(sim, first, last, n, true);
	uint64_t ticket = sim->dt_queued; /* and those the thread has not run yet */
	while (sim->dt_started && sim->dt_done < ticket)
		pthread_cond_wait(&sim->dt_cv, &sim->dt_mu);
	pthread_mutex_unlock(&sim->dt_mu);
}

unsigned toggle_sim_user_object_count(const struct toggle_sim *sim)
{
	unsigned n = 0;

	if (sim != NULL)
		for (const struct sim_obj *o = sim->uobjs.next; o != &sim->uobjs; o = o->next)
			n++;
	return n;
}

/* ---- graphs and execs ------------------------------------------------------------ */

static struct sim_graph *sim_graph_new(struct toggle_sim *sim)
{
	struct sim_graph *g = sim->spare_graph;

	if (g != NULL) {
		sim->spare_graph = NULL;
		memset(g, 0, sizeof(*g));
	} else if ((g = calloc(1, sizeof(*g))) == NULL) {
		return NULL;
	}
	g->nodes = sim_nodeset_new();
	if (g->nodes == NULL) {
		free(g);
		return NULL;
	}
	g->id = ++sim->last_graph_id;
	sim_obj_add(sim, &sim->graphs, &g->obj, SIM_GRAPH);
	return g;
}

static void sim_stream_leave_capture(struct sim_stream *st);

/* Free a dead graph or exec's memory, or keep it for the next one (handle
 * reuse): the last one destroyed, so that a clone destroyed inside the
 * library (bare.c) does not take the handle the application's next graph
 * would get. */
static void sim_obj_release(struct toggle_sim *sim, void *obj, void **spare)
{
	if (sim->reuse) {
		free(*spare);
		*spare = obj;
	} else {
		free(obj);
	}
}

static void sim_graph_free(struct sim_graph *g)
{
	/* Streams forked into its capture leave it with the graph. */
	struct toggle_sim *gsim = g->obj.hdr.sim;
	for (struct sim_obj *o = gsim->streams.next; o != &gsim->streams; o = o->next)
		if (((struct sim_stream *)o)->capture == g)
			sim_stream_leave_capture((struct sim_stream *)o);
	/* Device handles stay valid while an exec holds the nodes: they name the
	 * instantiated node, which a planner inside that exec still updates. */
	for (unsigned i = 0; i < g->nodes->n; i++)
		g->nodes->v[i]->hdr.magic = 0;
	struct toggle_sim *sim = g->obj.hdr.sim;
	sim_obj_kill(&g->obj);
	sim_nodeset_put(g->nodes);
	sim_urefs_drop(&g->urefs, false); /* its user objects' last references may go */
	sim_obj_release(sim, g, (void **)&sim->spare_graph);
}

static struct sim_exec *sim_exec_new(struct sim_graph *g)
{
	struct toggle_sim *sim = g->obj.hdr.sim;
	struct sim_exec *ex = sim->spare_exec;

	if (ex != NULL) {
		sim->spare_exec = NULL;
		memset(ex, 0, sizeof(*ex));
	} else if ((ex = calloc(1, sizeof(*ex))) == NULL) {
		return NULL;
	}
	ex->n = g->nodes->n;
	/* One extra byte so that an empty graph is not a NULL special case. */
	ex->enabled = malloc((size_t)ex->n + 1);
	if (ex->enabled == NULL) {
		free(ex);
		return NULL;
	}
	memset(ex->enabled, 1, (size_t)ex->n + 1);
	ex->dev_enabled = malloc((size_t)ex->n + 1);
	if (ex->dev_enabled == NULL) {
		free(ex->enabled);
		free(ex);
		return NULL;
	}
	memset(ex->dev_enabled, 1, (size_t)ex->n + 1);
	/* The driver: an instantiated exec retains a copy of every reference the
	 * graph owns (CUDA C++ Programming Guide, "CUDA User Objects"). */
	if (!sim_urefs_copy(&ex->urefs, &g->urefs)) {
		sim_urefs_drop(&ex->urefs, true);
		free(ex->enabled);
		free(ex->dev_enabled);
		free(ex);
		return NULL;
	}
	ex->nodes = g->nodes;
	ex->nodes->refs++;
	ex->nodes->execs++;
	ex->id = ++sim->last_exec_id;
	sim_obj_add(sim, &sim->execs, &ex->obj, SIM_EXEC);
	return ex;
}

static void sim_exec_free(struct sim_exec *ex)
{
	struct toggle_sim *sim = ex->obj.hdr.sim;
	sim_obj_kill(&ex->obj);
	ex->nodes->execs--;
	sim_nodeset_put(ex->nodes);
	free(ex->enabled);
	free(ex->dev_enabled);
	sim_urefs_drop(&ex->urefs, true); /* after its queued launches ran (toggle_sim_exec_destroy) */
	sim_obj_release(sim, ex, (void **)&sim->spare_exec);
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

/* ---- work: submission, queues, execution ----------------------------------------- */

static void sim_work_free(struct sim_work *w)
{
	free(w->data);
	free(w);
}

/* Whether the head of a queue may run now. */
static bool sim_work_runnable(const struct sim_work *w)
{
	switch (w->kind) {
	case SIM_W_GRAPH:
	case SIM_W_UPLOAD:
		return w->exec->done == w->seq; /* launches of one exec run in submission order */
	case SIM_W_WAIT:
		return w->event->reached >= w->seq;
	default:
		return true;
	}
}

static void sim_graph_run(struct sim_exec *ex, const unsigned char *snapshot);
static void sim_graph_upload_run(struct sim_exec *ex, const unsigned char *snapshot);

/* Execute one piece of work (it was runnable). */
static void sim_work_exec(struct sim_work *w)
{
	switch (w->kind) {
	case SIM_W_KERNEL:
		w->fn(w->arg);
		break;
	case SIM_W_KERNEL_EX: {
		void *pv[TOGGLE_SIM_MAX_PARAMS];
		size_t off = 0;
		for (unsigned i = 0; i < w->func->n_params; i++) {
			pv[i] = w->data + off;
			off += w->func->param_size[i];
		}
		w->func->fn(pv);
		break;
	}
	case SIM_W_GRAPH:
		sim_graph_run(w->exec, w->data);
		break;
	case SIM_W_UPLOAD:
		sim_graph_upload_run(w->exec, w->data);
		break;
	case SIM_W_WRITE64:
		memcpy(w->dst, &w->value, sizeof(w->value));
		break;
	case SIM_W_COPY:
		memcpy(w->dst, w->data, w->bytes);
		break;
	case SIM_W_DTOH:
		memcpy(w->dst, w->src, w->bytes);
		break;
	case SIM_W_RECORD:
		if (w->event->reached < w->seq)
			w->event->reached = w->seq;
		break;
	case SIM_W_WAIT:
		break;
	}
}

/* Run work at once, or queue it on its stream in deferred mode (it owns w). */
static void sim_submit(struct sim_stream *st, struct sim_work *w)
{
	struct toggle_sim *sim = st->obj.hdr.sim;

	if (!sim->deferred) {
		sim_work_exec(w);
		sim_work_free(w);
		return;
	}
	w->next = NULL;
	if (st->tail != NULL)
		st->tail->next = w;
	else
		st->head = w;
	st->tail = w;
}

static uint64_t sim_rand(struct toggle_sim *sim) /* splitmix64 */
{
	uint64_t z = (sim->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Run queued work until `until`'s queue is empty (NULL: every queue), one
 * runnable queue head at a time, the queue drawn from the seed.  Work that
 * can never run (a wait for a record never submitted) is a deadlock, as on
 * the GPU: it stays queued and sim_run returns.
 */
static void sim_run(struct toggle_sim *sim, const struct sim_stream *until)
{
	for (;;) {
		if (until != NULL && until->head == NULL)
			return;
		unsigned runnable = 0;
		for (struct sim_obj *o = sim->streams.next; o != &sim->streams; o = o->next) {
			const struct sim_stream *st = (const struct sim_stream *)o;
			runnable += st->head != NULL && sim_work_runnable(st->head);
		}
		if (runnable == 0)
			return;
		unsigned pick = (unsigned)(sim_rand(sim) % runnable);
		for (struct sim_obj *o = sim->streams.next; o != &sim->streams; o = o->next) {
			struct sim_stream *st = (struct sim_stream *)o;
			if (st->head == NULL || !sim_work_runnable(st->head) || pick-- > 0)
				continue;
			struct sim_work *w = st->head;
			st->head = w->next;
			if (st->head == NULL)
				st->tail = NULL;
			sim_work_exec(w);
			sim_work_free(w);
			break;
		}
	}
}

static struct sim_work *sim_work_new(enum sim_work_kind kind)
{
	struct sim_work *w = calloc(1, sizeof(*w));

	if (w != NULL)
		w->kind = kind;
	return w;
}

/* Drop what a stream still has queued (the simulator is going away). */
static void sim_stream_drop(struct sim_stream *st)
{
	while (st->head != NULL) {
		struct sim_work *w = st->head;
		st->head = w->next;
		sim_work_free(w);
	}
	st->tail = NULL;
}

void toggle_sim_set_deferred(struct toggle_sim *sim, bool on, uint64_t seed)
{
	if (sim == NULL)
		return;
	if (!on)
		sim_run(sim, NULL);
	sim->deferred = on;
	sim->rng = seed;
}

CUresult toggle_sim_stream_synchronize(CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_run(st->obj.hdr.sim, st);
	return st->head == NULL ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}

CUresult toggle_sim_stream_run(CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	while (st->head != NULL && sim_work_runnable(st->head)) {
		struct sim_work *w = st->head;
		st->head = w->next;
		if (st->head == NULL)
			st->tail = NULL;
		sim_work_exec(w);
		sim_work_free(w);
	}
	return st->head == NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

void toggle_sim_synchronize(struct toggle_sim *sim)
{
	if (sim != NULL)
		sim_run(sim, NULL);
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
	sim_list_init(&sim->modules);
	sim_list_init(&sim->events);
	sim_list_init(&sim->uobjs);
	if (pthread_mutex_init(&sim->dt_mu, NULL) != 0) {
		free(sim);
		return TOGGLE_ENOMEM;
	}
	if (pthread_cond_init(&sim->dt_cv, NULL) != 0) {
		pthread_mutex_destroy(&sim->dt_mu);
		free(sim);
		return TOGGLE_ENOMEM;
	}
	sim->driver_version = 13000;
	sim->plain.hdr = (struct sim_hdr){.magic = SIM_MAGIC, .kind = SIM_FUNCTION, .sim = sim};
	*out = sim;
	return 0;
}

static void sim_module_free(struct sim_module *m);

void toggle_sim_destroy(struct toggle_sim *sim)
{
	if (sim == NULL)
		return;
	/* Queued work is dropped, not run: its kernels' arguments may be gone. */
	for (struct sim_obj *o = sim->streams.next; o != &sim->streams; o = o->next)
		sim_stream_drop((struct sim_stream *)o);
	/* Execs and graphs first: they only drop node references.  Streams last,
	 * so that a capturing stream's graph is freed once, from the graph list. */
	sim->reuse = false; /* everything below is freed */
	while (sim->execs.next != &sim->execs)
		sim_exec_free((struct sim_exec *)sim->execs.next);
	while (sim->graphs.next != &sim->graphs)
		sim_graph_free((struct sim_graph *)sim->graphs.next);
	while (sim->streams.next != &sim->streams) {
		struct sim_stream *st = (struct sim_stream *)sim->streams.next;
		sim_obj_kill(&st->obj);
		free(st->front);
		free(st->front_edges);
		free(st);
	}
	while (sim->modules.next != &sim->modules)
		sim_module_free((struct sim_module *)sim->modules.next);
	while (sim->events.next != &sim->events) {
		struct sim_event *ev = (struct sim_event *)sim->events.next;
		sim_obj_kill(&ev->obj);
		free(ev->cap_front);
		free(ev);
	}
	free(sim->spare_graph);
	free(sim->spare_exec);
	sim_spare_nodes_free(sim);
	/* User objects user code still owns die with the simulator (a context's
	 * teardown); then every destructor queued or held runs, and the thread ends. */
	while (sim->uobjs.next != &sim->uobjs) {
		struct sim_uobj *o = (struct sim_uobj *)sim->uobjs.next;
		sim_uobj_release(o, o->refs, false);
	}
	toggle_sim_run_destructors(sim);
	pthread_mutex_lock(&sim->dt_mu);
	sim->dt_stop = true;
	pthread_cond_broadcast(&sim->dt_cv);
	bool joined = sim->dt_started;
	pthread_mutex_unlock(&sim->dt_mu);
	if (joined)
		pthread_join(sim->dt_thread, NULL);
	pthread_cond_destroy(&sim->dt_cv);
	pthread_mutex_destroy(&sim->dt_mu);
	while (sim->hostregs != NULL) {
		struct sim_hostreg *hr = sim->hostregs;
		sim->hostregs = hr->next;
		free(hr);
	}
	while (sim->allocs != NULL) {
		struct sim_alloc *al = sim->allocs;
		sim->allocs = al->next;
		free(al->data);
		free(al);
	}
	free(sim);
}

void toggle_sim_set_driver_version(struct toggle_sim *sim, int version)
{
	if (sim != NULL)
		sim->driver_version = version;
}

int toggle_sim_driver_version(const struct toggle_sim *sim)
{
	return sim != NULL ? sim->driver_version : 0;
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
	/* Like the driver, destroy returns at once and queued work still runs. */
	sim_run(st->obj.hdr.sim, st);
	sim_stream_drop(st);
	if (st->capture != NULL && st->capture->capturing == st)
		sim_graph_free(st->capture);
	sim_stream_leave_capture(st); /* a forked stream only leaves */
	sim_obj_kill(&st->obj);
	free(st->front);
	free(st->front_edges);
	free(st);
	return CUDA_SUCCESS;
}

/* ---- the capture's dependency frontier ------------------------------------------------ */

static void sim_stream_leave_capture(struct sim_stream *st)
{
	st->capture = NULL;
	st->capture_id = 0;
	st->forked = false;
	st->n_front = 0;
}

/* Room for n frontier nodes (edge data stays zero: default edges). */
static bool sim_front_reserve(struct sim_stream *st, unsigned n)
{
	if (n <= st->cap_front)
		return true;
	unsigned cap = st->cap_front ? st->cap_front : 4;
	while (cap < n) {
		if (cap > UINT32_MAX / 2)
			return false;
		cap *= 2;
	}
	CUgraphNode *front = realloc(st->front, cap * sizeof(*front));
	if (front == NULL)
		return false;
	st->front = front;
	CUgraphEdgeData *edges = realloc(st->front_edges, cap * sizeof(*edges));
	if (edges == NULL)
		return false;
	memset(edges, 0, cap * sizeof(*edges));
	st->front_edges = edges;
	st->cap_front = cap;
	return true;
}

/* Add n nodes to the frontier, each once (a join). */
static bool sim_front_merge(struct sim_stream *st, const CUgraphNode *nodes, unsigned n)
{
	if (n > UINT32_MAX - st->n_front || !sim_front_reserve(st, st->n_front + n))
		return false;
	for (unsigned i = 0; i < n; i++) {
		bool have = false;
		for (unsigned k = 0; k < st->n_front && !have; k++)
			have = st->front[k] == nodes[i];
		if (!have)
			st->front[st->n_front++] = nodes[i];
	}
	return true;
}

/* The stream capturing capture `id` on its origin stream, or NULL once it ended. */
static struct sim_stream *sim_capture_origin(struct toggle_sim *sim, uint64_t id)
{
	for (struct sim_obj *o = sim->streams.next; o != &sim->streams; o = o->next) {
		struct sim_stream *st = (struct sim_stream *)o;
		if (st->capture != NULL && st->capture_id == id && st->capture->capturing == st)
			return st;
	}
	return NULL;
}

/*
 * Whether every stream forked into st's capture was joined back: each node
 * of its frontier has a dependent or is in st's frontier (the driver refuses
 * to end a capture with unjoined work: CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
 */
static bool sim_capture_joined(const struct sim_stream *st)
{
	const struct toggle_sim *sim = st->obj.hdr.sim;
	for (const struct sim_obj *o = sim->streams.next; o != &sim->streams; o = o->next) {
		const struct sim_stream *fk = (const struct sim_stream *)o;
		if (fk == st || fk->capture != st->capture)
			continue;
		for (unsigned i = 0; i < fk->n_front; i++) {
			const struct sim_node *nd = (const struct sim_node *)fk->front[i];
			bool in_origin = false;
			for (unsigned k = 0; k < st->n_front && !in_origin; k++)
				in_origin = st->front[k] == fk->front[i];
			if (nd->n_outs == 0 && !in_origin)
				return false;
		}
	}
	return true;
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
	st->forked = false;
	st->n_front = 0;
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
	if (st->forked)
		return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED; /* ended on the stream that began it */
	if (!sim_capture_joined(st))
		return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
	struct sim_graph *g = st->capture;
	g->capturing = NULL;
	*graph_out = (CUgraph)g;
	struct toggle_sim *sim = st->obj.hdr.sim;
	for (struct sim_obj *o = sim->streams.next; o != &sim->streams; o = o->next)
		if (((struct sim_stream *)o)->capture == g)
			sim_stream_leave_capture((struct sim_stream *)o);
	return CUDA_SUCCESS;
}

/*
 * Append a node to the capture: it depends on the stream's frontier, and
 * becomes the frontier.  One stream captured alone therefore makes a chain
 * in capture order.
 */
static struct sim_node *sim_capture_add(struct sim_stream *st, CUgraphNodeType type,
					toggle_sim_kernel_fn fn, void *arg)
{
	unsigned n = st->n_front;
	struct sim_node **deps = malloc(((size_t)n + 1) * sizeof(*deps));

	if (deps == NULL || !sim_front_reserve(st, 1)) {
		free(deps);
		return NULL;
	}
	for (unsigned i = 0; i < n; i++) {
		struct sim_node *d = (struct sim_node *)st->front[i];
		deps[i] = d;
		if (d->n_outs == d->cap_outs) {
			unsigned cap = d->cap_outs ? 2 * d->cap_outs : 2;
			struct sim_node **outs = cap > d->cap_outs ? realloc(d->outs, cap * sizeof(*outs))
								   : NULL;
			if (outs == NULL) {
				free(deps);
				return NULL;
			}
			d->outs = outs;
			d->cap_outs = cap;
		}
	}
	struct sim_node *nd = sim_nodeset_add(st->capture->nodes, st->obj.hdr.sim, type, fn, arg);
	if (nd == NULL) {
		free(deps);
		return NULL;
	}
	nd->deps = deps;
	nd->n_deps = n;
	for (unsigned i = 0; i < n; i++)
		deps[i]->outs[deps[i]->n_outs++] = nd;
	st->front[0] = (CUgraphNode)nd;
	st->n_front = 1;
	return nd;
}

CUresult toggle_sim_launch_kernel(CUstream stream, toggle_sim_kernel_fn fn, void *arg)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (fn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (st->capture != NULL)
		return sim_capture_add(st, CU_GRAPH_NODE_TYPE_KERNEL, fn, arg) != NULL
			       ? CUDA_SUCCESS
			       : CUDA_ERROR_OUT_OF_MEMORY;
	struct sim_work *w = sim_work_new(SIM_W_KERNEL);
	if (w == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	w->fn = fn;
	w->arg = arg;
	sim_submit(st, w);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_memset(CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (st->capture != NULL)
		return sim_capture_add(st, CU_GRAPH_NODE_TYPE_MEMSET, NULL, NULL) != NULL
			       ? CUDA_SUCCESS
			       : CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_memcpy(CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (st->capture != NULL)
		return sim_capture_add(st, CU_GRAPH_NODE_TYPE_MEMCPY, NULL, NULL) != NULL
			       ? CUDA_SUCCESS
			       : CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

/* A node of any other type (a no-op when it runs), captured like the others. */
CUresult toggle_sim_capture_node(CUstream stream, CUgraphNodeType type)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (st->capture == NULL || type == CU_GRAPH_NODE_TYPE_KERNEL)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_capture_add(st, type, NULL, NULL) != NULL ? CUDA_SUCCESS
							     : CUDA_ERROR_OUT_OF_MEMORY;
}

/*
 * The dependency set is the stream's frontier: the last node captured into
 * it, plus what event waits joined since; empty right after begin_capture.
 * Outputs are zeroed when not capturing, where the driver leaves them
 * undefined, so that a caller reading them anyway sees no graph.
 */
static void sim_capture_info_fill(struct sim_stream *st, CUstreamCaptureStatus *status_out,
				  cuuint64_t *id_out, CUgraph *graph_out,
				  const CUgraphNode **deps_out, const CUgraphEdgeData **edge_out,
				  size_t *ndeps_out)
{
	bool on = st->capture != NULL;
	size_t n = on ? st->n_front : 0;

	*status_out = on ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	if (id_out != NULL)
		*id_out = on ? st->capture_id : 0;
	if (graph_out != NULL)
		*graph_out = on ? (CUgraph)st->capture : NULL;
	if (deps_out != NULL)
		*deps_out = n > 0 ? st->front : NULL;
	if (edge_out != NULL)
		*edge_out = n > 0 ? st->front_edges : NULL;
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

CUresult toggle_sim_graph_instantiate_with_flags(CUgraphExec *exec_out, CUgraph graph,
						 unsigned long long flags)
{
	struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult check = CUDA_SUCCESS;
	struct sim_node **order = NULL; /* a clone's execution order (sim_edges_order) */
	unsigned live = g->nodes->n;
	if (exec_out == NULL || flags != 0)
		check = CUDA_ERROR_INVALID_VALUE;
	else if (g->devupd && g->nodes->execs > 0)
		check = CUDA_ERROR_NOT_SUPPORTED; /* the driver: one exec at a time */
	else if (g->nodes->clone)
		check = sim_edges_order(g->nodes, &order, &live);
	CUresult r = sim_gate(g->obj.hdr.sim, TOGGLE_SIM_OP_INSTANTIATE, check);
	if (r != CUDA_SUCCESS) {
		free(order);
		return r;
	}
	sim_edges_apply(g->nodes, order);
	struct sim_exec *ex = sim_exec_new(g);
	if (ex == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ex->n = live; /* a clone's destroyed nodes come last and are not part of it */
	*exec_out = (CUgraphExec)ex;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_instantiate(CUgraphExec *exec_out, CUgraph graph)
{
	return toggle_sim_graph_instantiate_with_flags(exec_out, graph, 0);
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
	/* Like the driver, launches already submitted still run. */
	if (ex->done != ex->enqueued)
		sim_run(ex->obj.hdr.sim, NULL);
	sim_exec_free(ex);
	return CUDA_SUCCESS;
}

unsigned toggle_sim_graph_node_count(CUgraph graph)
{
	const struct sim_graph *g = sim_graph_of(graph);

	return g != NULL ? g->nodes->n - g->nodes->removed : 0;
}

void toggle_sim_set_handle_reuse(struct toggle_sim *sim, bool on)
{
	if (sim != NULL)
		sim->reuse = on;
}

CUresult toggle_sim_graph_get_id(CUgraph graph, unsigned *id)
{
	const struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*id = g->id;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_exec_get_id(CUgraphExec exec, unsigned *id)
{
	const struct sim_exec *ex = sim_exec_of(exec);

	if (ex == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*id = ex->id;
	return CUDA_SUCCESS;
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

/* Run one node's kernel. */
static void sim_node_run(const struct sim_node *nd)
{
	if (nd->fn != NULL) {
		nd->fn(nd->arg);
		return;
	}
	void *pv[TOGGLE_SIM_MAX_PARAMS];
	size_t off = 0;
	for (unsigned i = 0; i < nd->func->n_params; i++) {
		pv[i] = nd->params + off;
		off += nd->func->param_size[i];
	}
	nd->func->fn(pv);
}

/*
 * One launch: the enabled kernel nodes in capture order.  A device-updatable
 * node's state is read when it runs (a planner before it may have changed it
 * in this launch); any other node's is the host state at submission.
 */
static void sim_graph_run(struct sim_exec *ex, const unsigned char *snapshot)
{
	struct toggle_sim *sim = ex->obj.hdr.sim;
	struct sim_exec *outer = sim->running;

	ex->dev_ok = ex->uploaded;
	if (!ex->uploaded) /* a first launch uploads, too late for its own device calls */
		memcpy(ex->dev_enabled, snapshot, (size_t)ex->n + 1);
	ex->uploaded = true;
	sim->running = ex;
	for (unsigned i = 0; i < ex->n; i++) {
		const struct sim_node *nd = ex->nodes->v[i];
		bool on = nd->devupd ? ex->dev_enabled[i] : snapshot[i];
		if (on && nd->type == CU_GRAPH_NODE_TYPE_KERNEL)
			sim_node_run(nd);
	}
	sim->running = outer;
	ex->done++;
	ex->launches++;
}

/* An upload: the device's copy of every node's state becomes the host's at submission. */
static void sim_graph_upload_run(struct sim_exec *ex, const unsigned char *snapshot)
{
	memcpy(ex->dev_enabled, snapshot, (size_t)ex->n + 1);
	ex->uploaded = true;
	ex->done++;
}

/*
 * Launch and upload both queue, in stream order, a snapshot of the exec's
 * host-side enable states taken now (a later host change does not reach it).
 */
static CUresult sim_enqueue_exec(CUgraphExec exec, CUstream stream, enum toggle_sim_op op,
				 enum sim_work_kind kind)
{
	struct sim_exec *ex = sim_exec_of(exec);

	if (ex == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(ex->obj.hdr.sim, op, sim_exec_stream_check(ex, stream));
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_work *w = sim_work_new(kind);
	if (w != NULL && (w->data = malloc((size_t)ex->n + 1)) == NULL) {
		free(w);
		w = NULL;
	}
	if (w == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(w->data, ex->enabled, (size_t)ex->n + 1);
	w->exec = ex;
	w->seq = ex->enqueued++;
	sim_submit(sim_stream_of(stream), w);
	return CUDA_SUCCESS;
}

/* Runs the enabled kernel nodes in capture order, now or in stream order (deferred). */
CUresult toggle_sim_graph_launch(CUgraphExec exec, CUstream stream)
{
	return sim_enqueue_exec(exec, stream, TOGGLE_SIM_OP_GRAPH_LAUNCH, SIM_W_GRAPH);
}

/*
 * In stream order, after the exec's earlier launches: the host's node states
 * reach the device-updatable nodes, and device-side calls succeed from the
 * next launch on.
 */
CUresult toggle_sim_graph_upload(CUgraphExec exec, CUstream stream)
{
	return sim_enqueue_exec(exec, stream, TOGGLE_SIM_OP_GRAPH_UPLOAD, SIM_W_UPLOAD);
}

/* The driver's query shape: count with out NULL, else fill *n (NULL past the end). */
static CUresult sim_node_list(struct sim_node *const *v, size_t have, CUgraphNode *out,
			      CUgraphEdgeData *edges, size_t *n)
{
	if (n == NULL || (edges != NULL && out == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	if (out == NULL) {
		*n = have;
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < *n; i++) {
		out[i] = i < have ? (CUgraphNode)v[i] : NULL;
		if (edges != NULL)
			memset(&edges[i], 0, sizeof(edges[i]));
	}
	if (*n > have)
		*n = have;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_node_get_dependent_nodes(CUgraphNode node, CUgraphNode *deps,
						   CUgraphEdgeData *edges, size_t *n)
{
	const struct sim_node *nd = sim_node_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return sim_node_list(nd->outs, nd->n_outs, deps, edges, n);
}

CUresult toggle_sim_graph_node_get_dependencies(CUgraphNode node, CUgraphNode *deps,
						CUgraphEdgeData *edges, size_t *n)
{
	const struct sim_node *nd = sim_node_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return sim_node_list(nd->deps, nd->n_deps, deps, edges, n);
}

CUresult toggle_sim_graph_get_nodes(CUgraph graph, CUgraphNode *nodes, size_t *n)
{
	const struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return sim_node_list(g->nodes->v, g->nodes->n, nodes, NULL, n);
}

/* ---- device memory ------------------------------------------------------------------------ */

CUresult toggle_sim_mem_alloc(struct toggle_sim *sim, CUdeviceptr *out, size_t bytes)
{
	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_MEM_ALLOC,
			      out == NULL || bytes == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_alloc *al = calloc(1, sizeof(*al));
	if (al == NULL || (al->data = calloc(1, bytes)) == NULL) {
		free(al);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	al->bytes = bytes;
	al->next = sim->allocs;
	sim->allocs = al;
	sim->mem_in_use += bytes;
	*out = (CUdeviceptr)(uintptr_t)al->data;
	return CUDA_SUCCESS;
}

/* Queued work may still write it: like the driver's free, let it finish first. */
CUresult toggle_sim_mem_free(struct toggle_sim *sim, CUdeviceptr p)
{
	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (struct sim_alloc **pp = &sim->allocs; *pp != NULL; pp = &(*pp)->next) {
		struct sim_alloc *al = *pp;
		if ((CUdeviceptr)(uintptr_t)al->data != p)
			continue;
		sim_run(sim, NULL);
		*pp = al->next;
		sim->mem_in_use -= al->bytes;
		free(al->data);
		free(al);
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

size_t toggle_sim_mem_in_use(const struct toggle_sim *sim)
{
	return sim != NULL ? sim->mem_in_use : 0;
}

/* The host address of [p, p + bytes) if it lies inside one allocation, else NULL. */
static unsigned char *sim_mem_at(const struct toggle_sim *sim, CUdeviceptr p, size_t bytes)
{
	for (const struct sim_alloc *al = sim->allocs; al != NULL; al = al->next) {
		CUdeviceptr base = (CUdeviceptr)(uintptr_t)al->data;
		if (p >= base && p - base <= al->bytes && bytes <= al->bytes - (p - base))
			return al->data + (p - base);
	}
	return NULL;
}

CUresult toggle_sim_memcpy_htod_async(CUdeviceptr dst, const void *src, size_t bytes,
				      CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	unsigned char *to = sim_mem_at(st->obj.hdr.sim, dst, bytes);
	CUresult check = to == NULL || (src == NULL && bytes) ? CUDA_ERROR_INVALID_VALUE
			 : st->capture != NULL ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
					       : CUDA_SUCCESS;
	CUresult r = sim_gate(st->obj.hdr.sim, TOGGLE_SIM_OP_MEMCPY_HTOD, check);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_work *w = sim_work_new(SIM_W_COPY);
	if (w != NULL && (w->data = malloc(bytes + 1)) == NULL) {
		free(w);
		w = NULL;
	}
	if (w == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (bytes)
		memcpy(w->data, src, bytes);
	w->dst = to;
	w->bytes = bytes;
	sim_submit(st, w);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_memcpy_dtoh(struct toggle_sim *sim, void *dst, CUdeviceptr src, size_t bytes)
{
	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	const unsigned char *from = sim_mem_at(sim, src, bytes);
	if (from == NULL || (dst == NULL && bytes))
		return CUDA_ERROR_INVALID_VALUE;
	if (bytes)
		memcpy(dst, from, bytes);
	return CUDA_SUCCESS;
}

/* ---- page-locked host memory and device-to-host copies in stream order ------------ */

static const struct sim_hostreg *sim_hostreg_at(const struct toggle_sim *sim, const void *p,
						size_t bytes)
{
	const unsigned char *q = p;
	for (const struct sim_hostreg *hr = sim->hostregs; hr != NULL; hr = hr->next)
		if (q >= hr->base && (size_t)(q - hr->base) <= hr->bytes &&
		    bytes <= hr->bytes - (size_t)(q - hr->base))
			return hr;
	return NULL;
}

CUresult toggle_sim_mem_host_register(struct toggle_sim *sim, void *p, size_t bytes, unsigned flags)
{
	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult check = p == NULL || bytes == 0 || (flags & ~(unsigned)CU_MEMHOSTREGISTER_PORTABLE)
				 ? CUDA_ERROR_INVALID_VALUE
			 : sim_hostreg_at(sim, p, 1) || sim_hostreg_at(sim, (unsigned char *)p + bytes - 1, 1)
				 ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
				 : CUDA_SUCCESS;
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_HOST_REGISTER, check);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_hostreg *hr = calloc(1, sizeof(*hr));
	if (hr == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	hr->base = p;
	hr->bytes = bytes;
	hr->next = sim->hostregs;
	sim->hostregs = hr;
	return CUDA_SUCCESS;
}

/* Like the driver's, after the queued work that may still write the range. */
CUresult toggle_sim_mem_host_unregister(struct toggle_sim *sim, void *p)
{
	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (struct sim_hostreg **pp = &sim->hostregs; *pp != NULL; pp = &(*pp)->next) {
		struct sim_hostreg *hr = *pp;
		if (hr->base != p)
			continue;
		sim_run(sim, NULL);
		*pp = hr->next;
		free(hr);
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

size_t toggle_sim_host_registered(const struct toggle_sim *sim)
{
	size_t n = 0;
	for (const struct sim_hostreg *hr = sim ? sim->hostregs : NULL; hr != NULL; hr = hr->next)
		n += hr->bytes;
	return n;
}

CUresult toggle_sim_memcpy_dtoh_async(void *dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct toggle_sim *sim = st->obj.hdr.sim;
	const unsigned char *from = sim_mem_at(sim, src, bytes);
	CUresult check = from == NULL || dst == NULL || bytes == 0 ? CUDA_ERROR_INVALID_VALUE
			 : sim_hostreg_at(sim, dst, bytes) == NULL ? CUDA_ERROR_INVALID_VALUE
			 : st->capture != NULL ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
					       : CUDA_SUCCESS;
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_MEMCPY_DTOH_ASYNC, check);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_work *w = sim_work_new(SIM_W_DTOH);
	if (w == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	w->dst = dst;
	w->src = from;
	w->bytes = bytes;
	sim_submit(st, w);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_stream_batch_mem_op(CUstream stream, unsigned count,
					CUstreamBatchMemOpParams *ops, unsigned flags)
{
	struct sim_stream *st = sim_stream_of(stream);

	if (st == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct toggle_sim *sim = st->obj.hdr.sim;
	CUresult check = CUDA_SUCCESS;
	if (ops == NULL || count == 0 || count > 255 || flags != 0)
		check = CUDA_ERROR_INVALID_VALUE;
	else if (st->capture != NULL)
		check = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	for (unsigned i = 0; check == CUDA_SUCCESS && i < count; i++) {
		if (ops[i].operation != CU_STREAM_MEM_OP_WRITE_VALUE_64)
			check = CUDA_ERROR_NOT_SUPPORTED;
		else if (ops[i].writeValue.flags != 0 || ops[i].writeValue.address % 8 != 0 ||
			 sim_mem_at(sim, ops[i].writeValue.address, 8) == NULL)
			check = CUDA_ERROR_INVALID_VALUE;
	}
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_BATCH_MEM_OP, check);
	if (r != CUDA_SUCCESS)
		return r;
	/* All or nothing: every piece of work is made before any is submitted. */
	struct sim_work *w[255];
	for (unsigned i = 0; i < count; i++) {
		if ((w[i] = sim_work_new(SIM_W_WRITE64)) == NULL) {
			while (i-- > 0)
				sim_work_free(w[i]);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		w[i]->dst = sim_mem_at(sim, ops[i].writeValue.address, 8);
		w[i]->value = ops[i].writeValue.value64;
	}
	for (unsigned i = 0; i < count; i++)
		sim_submit(st, w[i]);
	return CUDA_SUCCESS;
}

/* ---- modules and launches with parameters ------------------------------------------------- */

static void sim_module_free(struct sim_module *m)
{
	for (unsigned i = 0; i < m->image->n_functions; i++)
		m->functions[i].hdr.magic = 0;
	sim_obj_kill(&m->obj);
	free(m->functions);
	free(m);
}

CUresult toggle_sim_module_load(struct toggle_sim *sim, CUmodule *out, const void *image)
{
	const struct toggle_sim_image *img = image;

	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult check = CUDA_SUCCESS;
	if (out == NULL || img == NULL)
		check = CUDA_ERROR_INVALID_VALUE;
	else if (img->magic != TOGGLE_SIM_IMAGE_MAGIC || (img->n_functions && !img->functions))
		check = CUDA_ERROR_INVALID_IMAGE;
	for (unsigned i = 0; check == CUDA_SUCCESS && i < img->n_functions; i++)
		if (img->functions[i].fn == NULL ||
		    img->functions[i].n_params > TOGGLE_SIM_MAX_PARAMS)
			check = CUDA_ERROR_INVALID_IMAGE;
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_MODULE_LOAD, check);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_module *m = calloc(1, sizeof(*m));
	if (m == NULL || (m->functions = calloc(img->n_functions + 1, sizeof(*m->functions))) == NULL) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->image = img;
	for (unsigned i = 0; i < img->n_functions; i++) {
		m->functions[i].hdr = (struct sim_hdr){SIM_MAGIC, SIM_FUNCTION, sim};
		m->functions[i].module = m;
		m->functions[i].f = &img->functions[i];
	}
	sim_obj_add(sim, &sim->modules, &m->obj, SIM_MODULE);
	*out = (CUmodule)m;
	return CUDA_SUCCESS;
}

/* Captured nodes keep their function's description: the image outlives them (it is static). */
CUresult toggle_sim_module_unload(CUmodule module)
{
	struct sim_module *m = sim_module_of(module);

	if (m == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_module_free(m);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_module_get_function(CUfunction *out, CUmodule module, const char *name)
{
	struct sim_module *m = sim_module_of(module);

	if (m == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (out == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < m->image->n_functions; i++) {
		if (m->image->functions[i].name && strcmp(m->image->functions[i].name, name) == 0) {
			*out = (CUfunction)&m->functions[i];
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}

/* The name an image gave fn (tests: which kernel a launch or a node runs). */
const char *toggle_sim_function_name(CUfunction fn)
{
	struct sim_function *f = sim_function_of(fn);

	return f != NULL ? f->f->name : NULL;
}

/* The launch's parameters, copied into one block (param_size bytes each). */
static unsigned char *sim_params_copy(const struct toggle_sim_function *f, void **params)
{
	size_t total = 0;
	for (unsigned i = 0; i < f->n_params; i++)
		total += f->param_size[i];
	unsigned char *p = malloc(total + 1);
	if (p == NULL)
		return NULL;
	size_t off = 0;
	for (unsigned i = 0; i < f->n_params; i++) {
		memcpy(p + off, params[i], f->param_size[i]);
		off += f->param_size[i];
	}
	return p;
}

/* The device-updatable attribute of a launch: -1 bad, 0 absent or 0, 1 set (*which: its index). */
static int sim_launch_devupd(const CUlaunchConfig *cfg, unsigned *which)
{
	int devupd = 0;

	if (cfg->numAttrs && cfg->attrs == NULL)
		return -1;
#if !TG_SIM_DEVUPD
	(void)which; /* headers older than 12.4 have no such attribute */
#else
	for (unsigned i = 0; i < cfg->numAttrs; i++) {
		if (cfg->attrs[i].id != CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE)
			continue;
		int v = cfg->attrs[i].value.deviceUpdatableKernelNode.deviceUpdatable;
		if (v != 0 && v != 1)
			return -1;
		devupd = v;
		*which = i;
	}
#endif
	return devupd;
}

CUresult toggle_sim_launch_kernel_ex(const CUlaunchConfig *config, CUfunction fn, void **params,
				     void **extra)
{
	struct sim_function *f = sim_function_of(fn);

	if (config == NULL || f == NULL || f->f == NULL) /* f->f NULL: the plain kernels' handle */
		return config == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
	struct sim_stream *st = sim_stream_of(config->hStream);
	if (st == NULL || st->obj.hdr.sim != f->hdr.sim)
		return CUDA_ERROR_INVALID_HANDLE;
	unsigned which = 0;
	int devupd = sim_launch_devupd(config, &which);
	CUresult check = CUDA_SUCCESS;
	if (extra != NULL || (f->f->n_params && params == NULL) || devupd < 0 ||
	    !config->gridDimX || !config->gridDimY || !config->gridDimZ || !config->blockDimX ||
	    !config->blockDimY || !config->blockDimZ)
		check = CUDA_ERROR_INVALID_VALUE;
	else if (devupd == 1 && st->capture == NULL)
		check = CUDA_ERROR_NOT_SUPPORTED; /* as the driver answers (H200, CUDA 13.0) */
	CUresult r = sim_gate(st->obj.hdr.sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX, check);
	if (r != CUDA_SUCCESS)
		return r;
	unsigned char *copy = sim_params_copy(f->f, params);
	if (copy == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (st->capture != NULL) {
		struct sim_node *nd = sim_capture_add(st, CU_GRAPH_NODE_TYPE_KERNEL, NULL, NULL);
		if (nd == NULL) {
			free(copy);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		nd->func = f->f;
		nd->params = copy;
		nd->fh = f;
#if TG_SIM_DEVUPD
		if (devupd == 1) {
			nd->devupd = true;
			nd->devhdr.magic = SIM_MAGIC;
			st->capture->devupd = true;
			config->attrs[which].value.deviceUpdatableKernelNode.devNode =
				(CUgraphDeviceNode)&nd->devhdr;
		}
#endif
		return CUDA_SUCCESS;
	}
	struct sim_work *w = sim_work_new(SIM_W_KERNEL_EX);
	if (w == NULL) {
		free(copy);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	w->func = f->f;
	w->data = copy;
	sim_submit(st, w);
	return CUDA_SUCCESS;
}

#if TG_SIM_DEVUPD
CUresult toggle_sim_device_node_set_enabled(CUgraphDeviceNode node, unsigned enable)
{
	struct sim_node *nd = sim_devnode_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct toggle_sim *sim = nd->hdr.sim;
	const struct sim_exec *ex = sim->running;
	CUresult check = CUDA_SUCCESS;
	if (ex == NULL || ex->nodes != nd->set || nd->index >= ex->n || !nd->devupd)
		check = CUDA_ERROR_INVALID_VALUE;
	else if (!ex->dev_ok)
		check = CUDA_ERROR_INVALID_VALUE; /* first launch without an upload */
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, check);
	if (r != CUDA_SUCCESS)
		return r;
	sim->running->dev_enabled[nd->index] = enable != 0;
	return CUDA_SUCCESS;
}
#endif

/* ---- events ------------------------------------------------------------------------------- */

CUresult toggle_sim_event_create(struct toggle_sim *sim, CUevent *out)
{
	if (sim == NULL || out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct sim_event *ev = calloc(1, sizeof(*ev));
	if (ev == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim_obj_add(sim, &sim->events, &ev->obj, SIM_EVENT);
	*out = (CUevent)ev;
	return CUDA_SUCCESS;
}

/* Waits already queued on it still see it reached: run them first. */
CUresult toggle_sim_event_destroy(CUevent event)
{
	struct sim_event *ev = sim_event_of(event);

	if (ev == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_run(ev->obj.hdr.sim, NULL);
	sim_obj_kill(&ev->obj);
	free(ev->cap_front);
	free(ev);
	return CUDA_SUCCESS;
}

CUresult toggle_sim_event_query(CUevent event)
{
	struct sim_event *ev = sim_event_of(event);

	if (ev == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(ev->obj.hdr.sim, TOGGLE_SIM_OP_EVENT_QUERY, CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	return ev->reached >= ev->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult toggle_sim_event_record(CUevent event, CUstream stream)
{
	struct sim_event *ev = sim_event_of(event);
	struct sim_stream *st = sim_stream_of(stream);

	if (ev == NULL || st == NULL || ev->obj.hdr.sim != st->obj.hdr.sim)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_gate(st->obj.hdr.sim, TOGGLE_SIM_OP_EVENT_RECORD, CUDA_SUCCESS);
	if (r != CUDA_SUCCESS)
		return r;
	if (st->capture != NULL) {
		/* Into a capture: the event names the stream's frontier (a fork point). */
		CUgraphNode *snap = malloc(((size_t)st->n_front + 1) * sizeof(*snap));
		if (snap == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (st->n_front)
			memcpy(snap, st->front, st->n_front * sizeof(*snap));
		free(ev->cap_front);
		ev->cap_front = snap;
		ev->n_cap_front = st->n_front;
		ev->cap_id = st->capture_id;
		return CUDA_SUCCESS;
	}
	ev->cap_id = 0;
	struct sim_work *w = sim_work_new(SIM_W_RECORD);
	if (w == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	w->event = ev;
	w->seq = ++ev->recorded;
	sim_submit(st, w);
	return CUDA_SUCCESS;
}

/* Waits for the event's latest record at the time of the call (none: nothing to wait for). */
CUresult toggle_sim_stream_wait_event(CUstream stream, CUevent event, unsigned flags)
{
	struct sim_event *ev = sim_event_of(event);
	struct sim_stream *st = sim_stream_of(stream);

	if (ev == NULL || st == NULL || ev->obj.hdr.sim != st->obj.hdr.sim)
		return CUDA_ERROR_INVALID_HANDLE;
	struct sim_stream *origin = ev->cap_id ? sim_capture_origin(st->obj.hdr.sim, ev->cap_id)
					       : NULL;
	CUresult check = flags != 0 ? CUDA_ERROR_INVALID_VALUE
			 : ev->cap_id && (origin == NULL ||
					  (st->capture != NULL && st->capture_id != ev->cap_id))
			 ? CUDA_ERROR_STREAM_CAPTURE_ISOLATION /* another or an ended capture */
			 : !ev->cap_id && st->capture != NULL ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
							      : CUDA_SUCCESS;
	CUresult r = sim_gate(st->obj.hdr.sim, TOGGLE_SIM_OP_STREAM_WAIT_EVENT, check);
	if (r != CUDA_SUCCESS)
		return r;
	if (ev->cap_id) {
		/* A capture event: fork st into the capture, or join the event's frontier. */
		bool fork = st->capture == NULL;
		unsigned keep = st->n_front;
		if (fork)
			st->n_front = 0;
		if (!sim_front_merge(st, ev->cap_front, ev->n_cap_front)) {
			st->n_front = fork ? 0 : keep;
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (fork) {
			st->capture = origin->capture;
			st->capture_id = ev->cap_id;
			st->forked = true;
		}
		return CUDA_SUCCESS;
	}
	struct sim_work *w = sim_work_new(SIM_W_WAIT);
	if (w == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	w->event = ev;
	w->seq = ev->recorded;
	sim_submit(st, w);
	return CUDA_SUCCESS;
}

/* ---- clones and graph edits (the producer-free exec) ------------------------------------- */

/*
 * cuGraphClone copies a graph's nodes (new handles) and edges.  A clone's
 * nodes can then be destroyed (their edges go with them) and dependencies
 * added.  Instantiating a clone runs its nodes in a topological order that,
 * among the nodes ready at each point, takes the last one in the clone's
 * order: where a missing edge leaves two nodes unordered, the later one runs
 * first, so an order that rests on a missing edge shows in what the kernels
 * record.  Model limits (the driver has none of them): only a clone's nodes
 * can be destroyed or given dependencies, and only while no exec of it
 * lives (its execs share its node set); edge data must be the default.
 */

/* Append x to a node's edge list (deps: exact size; outs: with a capacity). */
static bool sim_edges_link(struct sim_node *from, struct sim_node *to)
{
	struct sim_node **deps = realloc(to->deps, ((size_t)to->n_deps + 1) * sizeof(*deps));

	if (deps == NULL)
		return false;
	to->deps = deps;
	if (from->n_outs == from->cap_outs) {
		unsigned cap = from->cap_outs ? 2 * from->cap_outs : 2;
		struct sim_node **outs = realloc(from->outs, cap * sizeof(*outs));
		if (outs == NULL)
			return false;
		from->outs = outs;
		from->cap_outs = cap;
	}
	to->deps[to->n_deps++] = from;
	from->outs[from->n_outs++] = to;
	return true;
}

/* Remove every x from v[0..*n), keeping the order. */
static void sim_edges_drop(struct sim_node **v, unsigned *n, const struct sim_node *x)
{
	unsigned k = 0;

	for (unsigned i = 0; i < *n; i++)
		if (v[i] != x)
			v[k++] = v[i];
	*n = k;
}

/* A node of a clone that is still part of it, or NULL. */
static struct sim_node *sim_edges_node(CUgraphNode h)
{
	struct sim_node *nd = sim_node_of(h);

	return nd != NULL && nd->set->clone && !nd->removed ? nd : NULL;
}

static bool sim_edges_has(const struct sim_node *to, const struct sim_node *from)
{
	for (unsigned i = 0; i < to->n_deps; i++)
		if (to->deps[i] == from)
			return true;
	return false;
}

/* Whether edge data is absent or all default. */
static bool sim_edges_default(const CUgraphEdgeData *e, size_t n)
{
	static const CUgraphEdgeData zero;

	for (size_t i = 0; e != NULL && i < n; i++)
		if (memcmp(&e[i], &zero, sizeof(zero)) != 0)
			return false;
	return true;
}

/* The execution order of a clone's nodes, destroyed ones last; NULL when
 * an exec already fixed it (edits are refused while one lives). */
static CUresult sim_edges_order(const struct sim_nodeset *ns, struct sim_node ***out,
				unsigned *live)
{
	*out = NULL;
	*live = ns->n - ns->removed;
	if (ns->execs > 0)
		return CUDA_SUCCESS;
	struct sim_node **order = malloc(((size_t)ns->n + 1) * sizeof(*order));
	unsigned *indeg = calloc((size_t)ns->n + 1, sizeof(*indeg));
	bool *placed = calloc((size_t)ns->n + 1, sizeof(*placed));
	if (order == NULL || indeg == NULL || placed == NULL) {
		free(order);
		free(indeg);
		free(placed);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (unsigned i = 0; i < ns->n; i++)
		indeg[i] = ns->v[i]->n_deps; /* destroying a node removed its edges */
	unsigned k = 0;
	for (;;) {
		unsigned pick = ns->n;
		for (unsigned i = ns->n; i-- > 0;) {
			if (!ns->v[i]->removed && !placed[i] && indeg[i] == 0) {
				pick = i;
				break;
			}
		}
		if (pick == ns->n)
			break;
		placed[pick] = true;
		order[k++] = ns->v[pick];
		for (unsigned j = 0; j < ns->v[pick]->n_outs; j++)
			indeg[ns->v[pick]->outs[j]->index]--;
	}
	CUresult r = CUDA_SUCCESS;
	if (k != *live) {
		r = CUDA_ERROR_INVALID_VALUE; /* a cycle */
		free(order);
		order = NULL;
	} else {
		for (unsigned i = 0; i < ns->n; i++)
			if (ns->v[i]->removed)
				order[k++] = ns->v[i];
	}
	free(indeg);
	free(placed);
	*out = order;
	return r;
}

static void sim_edges_apply(struct sim_nodeset *ns, struct sim_node **order)
{
	if (order == NULL)
		return;
	for (unsigned i = 0; i < ns->n; i++) {
		ns->v[i] = order[i];
		order[i]->index = i;
	}
	free(order);
}

/* A copy of nd for a clone's node set (its edges are added later). */
static struct sim_node *sim_edges_copy(struct sim_nodeset *ns, const struct sim_node *nd)
{
	unsigned char *params = NULL;

	if (nd->params != NULL) {
		size_t bytes = 0;
		for (unsigned i = 0; i < nd->func->n_params; i++)
			bytes += nd->func->param_size[i];
		params = malloc(bytes ? bytes : 1);
		if (params == NULL)
			return NULL;
		memcpy(params, nd->params, bytes);
	}
	struct sim_node *c = sim_nodeset_add(ns, nd->hdr.sim, nd->type, nd->fn, nd->arg);
	if (c == NULL) {
		free(params);
		return NULL;
	}
	c->func = nd->func;
	c->params = params;
	c->fh = nd->fh;
	c->memset = nd->memset;
	c->memcpy = nd->memcpy;
	c->devupd = nd->devupd;
	c->devhdr.magic = nd->devupd ? SIM_MAGIC : 0;
	c->origin = nd;
	return c;
}

CUresult toggle_sim_graph_clone(CUgraph *clone_out, CUgraph original)
{
	struct sim_graph *g = sim_graph_of(original);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	/* The driver refuses to clone a graph holding a device-updatable node
	 * (cudaErrorNotSupported, measured by gpu_bare on the H200, CUDA 13.0). */
	CUresult check = clone_out == NULL ? CUDA_ERROR_INVALID_VALUE
			 : g->capturing != NULL ? CUDA_ERROR_ILLEGAL_STATE
			 : g->devupd ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
	CUresult r = sim_gate(g->obj.hdr.sim, TOGGLE_SIM_OP_GRAPH_CLONE, check);
	if (r != CUDA_SUCCESS)
		return r;
	const struct sim_nodeset *src = g->nodes;
	struct sim_graph *c = sim_graph_new(g->obj.hdr.sim);
	struct sim_node **map = calloc((size_t)src->n + 1, sizeof(*map)); /* by source index */
	bool ok = c != NULL && map != NULL;
	if (ok)
		c->nodes->clone = true;
	for (unsigned i = 0; ok && i < src->n; i++)
		if (!src->v[i]->removed)
			ok = (map[i] = sim_edges_copy(c->nodes, src->v[i])) != NULL;
	for (unsigned i = 0; ok && i < src->n; i++) {
		const struct sim_node *nd = src->v[i];
		for (unsigned j = 0; ok && !nd->removed && j < nd->n_deps; j++)
			ok = sim_edges_link(map[nd->deps[j]->index], map[i]);
	}
	free(map);
	/* The driver: a clone retains a copy of every reference of its source, same counts. */
	if (ok)
		ok = sim_urefs_copy(&c->urefs, &g->urefs);
	if (!ok) {
		if (c != NULL)
			sim_graph_free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->devupd = g->devupd;
	*clone_out = (CUgraph)c;
	return CUDA_SUCCESS;
}

/* Live objects on a list (leak checks: a clone or a bare exec left behind). */
static unsigned sim_list_count(const struct sim_obj *head)
{
	unsigned n = 0;

	for (const struct sim_obj *o = head->next; o != head; o = o->next)
		n++;
	return n;
}

unsigned toggle_sim_graph_count(const struct toggle_sim *sim)
{
	return sim != NULL ? sim_list_count(&sim->graphs) : 0;
}

unsigned toggle_sim_exec_count(const struct toggle_sim *sim)
{
	return sim != NULL ? sim_list_count(&sim->execs) : 0;
}

CUresult toggle_sim_graph_node_find_in_clone(CUgraphNode *node_out, CUgraphNode original,
					     CUgraph clone)
{
	const struct sim_graph *c = sim_graph_of(clone);
	const struct sim_node *o = sim_node_of(original);

	if (node_out == NULL || c == NULL || o == NULL || o->hdr.sim != c->obj.hdr.sim)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < c->nodes->n; i++) {
		if (c->nodes->v[i]->origin == o && !c->nodes->v[i]->removed) {
			*node_out = (CUgraphNode)c->nodes->v[i];
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* Driver rule: a device-updatable node cannot be destroyed. */
CUresult toggle_sim_graph_destroy_node(CUgraphNode node)
{
	struct sim_node *nd = sim_node_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct sim_nodeset *ns = nd->set;
	CUresult check = nd->devupd ? CUDA_ERROR_INVALID_VALUE
			 : !ns->clone || ns->execs > 0 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
	CUresult r = sim_gate(nd->hdr.sim, TOGGLE_SIM_OP_DESTROY_NODE, check);
	if (r != CUDA_SUCCESS)
		return r;
	for (unsigned i = 0; i < nd->n_deps; i++)
		sim_edges_drop(nd->deps[i]->outs, &nd->deps[i]->n_outs, nd);
	for (unsigned i = 0; i < nd->n_outs; i++)
		sim_edges_drop(nd->outs[i]->deps, &nd->outs[i]->n_deps, nd);
	nd->n_deps = 0;
	nd->n_outs = 0;
	nd->removed = true;
	nd->hdr.magic = 0;
	ns->removed++;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_add_dependencies(CUgraph graph, const CUgraphNode *from,
					   const CUgraphNode *to, const CUgraphEdgeData *edges,
					   size_t n)
{
	struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult check = CUDA_SUCCESS;
	if (n > 0 && (from == NULL || to == NULL))
		check = CUDA_ERROR_INVALID_VALUE;
	else if (n > 0 && (!g->nodes->clone || g->nodes->execs > 0 || !sim_edges_default(edges, n)))
		check = CUDA_ERROR_NOT_SUPPORTED;
	for (size_t i = 0; check == CUDA_SUCCESS && i < n; i++) {
		const struct sim_node *f = sim_edges_node(from[i]), *t = sim_edges_node(to[i]);
		if (f == NULL || t == NULL || f->set != g->nodes || t->set != g->nodes || f == t ||
		    sim_edges_has(t, f))
			check = CUDA_ERROR_INVALID_VALUE; /* the driver: an existing edge is an error */
		for (size_t j = 0; j < i; j++)
			if (from[j] == from[i] && to[j] == to[i])
				check = CUDA_ERROR_INVALID_VALUE;
	}
	CUresult r = sim_gate(g->obj.hdr.sim, TOGGLE_SIM_OP_ADD_DEPENDENCIES, check);
	if (r != CUDA_SUCCESS)
		return r;
	for (size_t i = 0; i < n; i++) {
		struct sim_node *f = sim_edges_node(from[i]), *t = sim_edges_node(to[i]);
		if (!sim_edges_link(f, t)) {
			/* A failed call changes nothing: undo the edges added so far. */
			while (i-- > 0) {
				f = sim_edges_node(from[i]);
				t = sim_edges_node(to[i]);
				t->n_deps--;
				f->n_outs--;
			}
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	return CUDA_SUCCESS;
}

/* ---- graphs built node by node ------------------------------------------------------ */

/*
 * cuGraphCreate and the add-node calls (what libtoggle's device-mode bare
 * exec is assembled with: a graph holding a device-updatable node cannot be
 * cloned).  A created graph has explicit edges like a clone, so the same
 * model limits hold: nodes are added and given dependencies only while no
 * exec of it lives.  The getters model the driver's: kernel, memset and
 * memcpy nodes only, each of its own type (CUDA_ERROR_INVALID_VALUE else).
 */
CUresult toggle_sim_graph_create(struct toggle_sim *sim, CUgraph *out, unsigned flags)
{
	if (sim == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult check = out == NULL || flags != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_GRAPH_CREATE, check);
	if (r != CUDA_SUCCESS)
		return r;
	struct sim_graph *g = sim_graph_new(sim);
	if (g == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->nodes->clone = true; /* explicit edges: executed in a topological order */
	*out = (CUgraph)g;
	return CUDA_SUCCESS;
}

/* Checks of an add-node call: a created or cloned graph without execs, and
 * dependencies that are distinct live nodes of it. */
static CUresult sim_add_check(const struct sim_graph *g, CUgraphNode *out, const CUgraphNode *deps,
			      size_t n)
{
	if (out == NULL || (n > 0 && deps == NULL) || n > UINT32_MAX / 2)
		return CUDA_ERROR_INVALID_VALUE;
	if (!g->nodes->clone || g->nodes->execs > 0 || g->capturing != NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	for (size_t i = 0; i < n; i++) {
		const struct sim_node *d = sim_edges_node(deps[i]);
		if (d == NULL || d->set != g->nodes)
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t j = 0; j < i; j++)
			if (deps[j] == deps[i])
				return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* A new node of g with its dependencies (checked); NULL when memory is short
 * (then the graph is as before). */
static struct sim_node *sim_add_node(struct sim_graph *g, CUgraphNodeType type,
				     const CUgraphNode *deps, size_t n)
{
	struct sim_nodeset *ns = g->nodes;
	struct sim_node **dv = malloc((n + 1) * sizeof(*dv));
	if (dv == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		struct sim_node *d = sim_edges_node(deps[i]);
		if (d->n_outs == d->cap_outs) {
			unsigned cap = d->cap_outs ? 2 * d->cap_outs : 2;
			struct sim_node **outs = realloc(d->outs, cap * sizeof(*outs));
			if (outs == NULL) {
				free(dv);
				return NULL;
			}
			d->outs = outs;
			d->cap_outs = cap;
		}
		dv[i] = d;
	}
	struct sim_node *nd = sim_nodeset_add(ns, g->obj.hdr.sim, type, NULL, NULL);
	if (nd == NULL) {
		free(dv);
		return NULL;
	}
	nd->deps = dv;
	nd->n_deps = (unsigned)n;
	for (size_t i = 0; i < n; i++)
		dv[i]->outs[dv[i]->n_outs++] = nd;
	return nd;
}

CUresult toggle_sim_graph_kernel_node_get_params(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p)
{
	struct sim_node *nd = sim_node_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult check = p == NULL || nd->removed || nd->type != CU_GRAPH_NODE_TYPE_KERNEL
				 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	CUresult r = sim_gate(nd->hdr.sim, TOGGLE_SIM_OP_NODE_GET_PARAMS, check);
	if (r != CUDA_SUCCESS)
		return r;
	memset(p, 0, sizeof(*p));
	p->gridDimX = p->gridDimY = p->gridDimZ = 1;
	p->blockDimX = p->blockDimY = p->blockDimZ = 1;
	p->kernelParams = nd->pv;
	if (nd->fn != NULL) {
		nd->pv[0] = &nd->fn;
		nd->pv[1] = &nd->arg;
		p->func = (CUfunction)&nd->hdr.sim->plain;
		return CUDA_SUCCESS;
	}
	size_t off = 0;
	for (unsigned i = 0; i < nd->func->n_params; i++) {
		nd->pv[i] = nd->params + off;
		off += nd->func->param_size[i];
	}
	p->func = (CUfunction)nd->fh;
	return CUDA_SUCCESS;
}

CUresult toggle_sim_graph_add_kernel_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					  size_t n, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct toggle_sim *sim = g->obj.hdr.sim;
	struct sim_function *f = p != NULL ? sim_function_of(p->func) : NULL;
	CUresult check = sim_add_check(g, out, deps, n);
	if (check == CUDA_SUCCESS &&
	    (p == NULL || f == NULL || f->hdr.sim != sim || p->extra != NULL || !p->gridDimX ||
	     !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY || !p->blockDimZ ||
	     (f->f == NULL ? p->kernelParams == NULL || p->kernelParams[0] == NULL ||
				     p->kernelParams[1] == NULL
			   : f->f->n_params && p->kernelParams == NULL)))
		check = CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_gate(sim, TOGGLE_SIM_OP_ADD_NODE, check);
	if (r != CUDA_SUCCESS)
		return r;
	unsigned char *copy = NULL;
	if (f->f != NULL && (copy = sim_params_copy(f->f, p->kernelParams)) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct sim_node *nd = sim_add_node(g, CU_GRAPH_NODE_TYPE_KERNEL, deps, n);
	if (nd == NULL) {
		free(copy);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (f->f == NULL) {
		memcpy(&nd->fn, p->kernelParams[0], sizeof(nd->fn));
		memcpy(&nd->arg, p->kernelParams[1], sizeof(nd->arg));
	} else {
		nd->func = f->f;
		nd->params = copy;
		nd->fh = f;
	}
	*out = (CUgraphNode)nd;
	return CUDA_SUCCESS;
}

/* The simulator's kernel nodes have no launch attributes to copy; the
 * driver's rule is kept: never to or from a device-updatable node. */
CUresult toggle_sim_graph_kernel_node_copy_attributes(CUgraphNode dst, CUgraphNode src)
{
	const struct sim_node *d = sim_node_of(dst), *s = sim_node_of(src);

	if (d == NULL || s == NULL || d->hdr.sim != s->hdr.sim)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult check = d->type != CU_GRAPH_NODE_TYPE_KERNEL || s->type != CU_GRAPH_NODE_TYPE_KERNEL
				 ? CUDA_ERROR_INVALID_VALUE
			 : d->devupd || s->devupd ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
	return sim_gate(d->hdr.sim, TOGGLE_SIM_OP_NODE_GET_PARAMS, check);
}

CUresult toggle_sim_graph_memset_node_get_params(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p)
{
	const struct sim_node *nd = sim_node_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult check = p == NULL || nd->removed || nd->type != CU_GRAPH_NODE_TYPE_MEMSET
				 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	CUresult r = sim_gate(nd->hdr.sim, TOGGLE_SIM_OP_NODE_GET_PARAMS, check);
	if (r == CUDA_SUCCESS)
		*p = nd->memset;
	return r;
}

CUresult toggle_sim_graph_memcpy_node_get_params(CUgraphNode node, CUDA_MEMCPY3D *p)
{
	const struct sim_node *nd = sim_node_of(node);

	if (nd == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult check = p == NULL || nd->removed || nd->type != CU_GRAPH_NODE_TYPE_MEMCPY
				 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	CUresult r = sim_gate(nd->hdr.sim, TOGGLE_SIM_OP_NODE_GET_PARAMS, check);
	if (r == CUDA_SUCCESS)
		*p = nd->memcpy;
	return r;
}

/*
 * What memset, memcpy and empty nodes share: the graph, its dependencies and
 * (params_ok) the caller's parameters checked, the call gated (fault
 * injection), the node added and named in *out; NULL with *rc when not.  The
 * caller fills the node's parameters.
 */
static struct sim_node *sim_add_plain(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
				      size_t n, bool params_ok, CUgraphNodeType type, CUresult *rc)
{
	struct sim_graph *g = sim_graph_of(graph);

	if (g == NULL) {
		*rc = CUDA_ERROR_INVALID_HANDLE;
		return NULL;
	}
	CUresult check = sim_add_check(g, out, deps, n);
	if (check == CUDA_SUCCESS && !params_ok)
		check = CUDA_ERROR_INVALID_VALUE;
	*rc = sim_gate(g->obj.hdr.sim, TOGGLE_SIM_OP_ADD_NODE, check);
	if (*rc != CUDA_SUCCESS)
		return NULL;
	struct sim_node *nd = sim_add_node(g, type, deps, n);
	if (nd == NULL) {
		*rc = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	*out = (CUgraphNode)nd;
	return nd;
}

/* The simulator has no contexts: ctx is not looked at. */
CUresult toggle_sim_graph_add_memset_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					  size_t n, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	CUresult rc;
	struct sim_node *nd = sim_add_plain(out, graph, deps, n, p != NULL, CU_GRAPH_NODE_TYPE_MEMSET,
					    &rc);

	(void)ctx;
	if (nd)
		nd->memset = *p;
	return rc;
}

CUresult toggle_sim_graph_add_memcpy_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					  size_t n, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	CUresult rc;
	struct sim_node *nd = sim_add_plain(out, graph, deps, n, p != NULL, CU_GRAPH_NODE_TYPE_MEMCPY,
					    &rc);

	(void)ctx;
	if (nd)
		nd->memcpy = *p;
	return rc;
}

CUresult toggle_sim_graph_add_empty_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
					 size_t n)
{
	CUresult rc;

	(void)sim_add_plain(out, graph, deps, n, true, CU_GRAPH_NODE_TYPE_EMPTY, &rc);
	return rc;
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
	{ CUDA_ERROR_NOT_FOUND, "named symbol not found" },
	{ CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid" },
	{ CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
	  "operation not permitted when stream is capturing" },
	{ CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
	  "operation failed due to a previous error during capture" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
	  "capture sequence contains a fork that was not joined to the primary stream" },
	{ CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
	  "capture was not initiated in this stream" },
	{ CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
	  "operation would result in a merge of separate capture sequences" },
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
