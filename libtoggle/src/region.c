/*
 * region.c - producer regions: every kernel node that the capture of a
 * stream gains between toggle_producer_begin and toggle_producer_end is
 * recorded under one hook, for producers that are several kernels, or
 * kernels launched by code that cannot call toggle_record_producer after
 * each launch (a torch op).
 *
 * Begin keeps the graph's nodes (cuGraphGetNodes, sorted).  End walks back
 * from the stream's dependency frontier (cuStreamGetCaptureInfo) through
 * cuGraphNodeGetDependencies, stopping at any node the graph had at begin:
 * what it reaches is the region, streams forked and joined inside it
 * included.  Stopping at every old node, not only at the frontier the
 * stream had at begin, matters: a side stream reused by every layer (as
 * PyTorch does) still depends on its own last node, from before the region,
 * when it is forked again.  The walk must account for every node the graph
 * gained; fewer means work launched in the region is not ordered before its
 * end (a stream forked inside and not joined back, or another stream
 * capturing into the same graph meanwhile) and the region is refused, as it
 * is for any memcpy or memset node.  On refusal nothing is recorded, but
 * whatever the capture gained since begin stays in the graph and would run
 * at every replay whatever the set: that graph is marked late (fails closed
 * until captured again) unless the region gained nothing (region_refused).
 * An aborted region is treated the same way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"

/* The open region of stream, or NULL. */
static struct tg_region *region_find(struct toggle_agent *a, CUstream stream)
{
	for (unsigned i = 0; i < a->n_regions; i++)
		if (a->regions[i].stream == stream)
			return &a->regions[i];
	return NULL;
}

/* Closed (its object, if still in r, stays on the graph: it goes with it). */
static void region_drop(struct toggle_agent *a, struct tg_region *r)
{
	free(r->old);
	tg_life_region_put(a, r->life, r->own_life, r->graph, false);
	*r = a->regions[--a->n_regions];
	memset(&a->regions[a->n_regions], 0, sizeof(a->regions[0]));
}

/* Take r out of the open regions; the caller owns what it holds (old, life). */
static struct tg_region region_take(struct toggle_agent *a, struct tg_region *r)
{
	struct tg_region t = *r;
	r->old = NULL;
	r->life = NULL;
	region_drop(a, r);
	return t;
}

void tg_region_close(struct toggle_agent *a)
{
	while (a->n_regions)
		region_drop(a, &a->regions[a->n_regions - 1]);
}

/* Capture status, id, graph and frontier of stream; ECUDA counted and explained. */
static int region_capture_info(struct toggle_agent *a, CUstream stream, const char *what,
			       CUstreamCaptureStatus *st, uint64_t *id, CUgraph *graph,
			       const CUgraphNode **front, size_t *n_front)
{
	cuuint64_t cid = 0;
	CUresult r = a->cu.stream_get_capture_info(stream, st, &cid, graph, front, NULL, n_front);
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "%s: cuStreamGetCaptureInfo: %s", what,
			       tg_cu_errstr(&a->cu, r));
	}
	*id = cid;
	if (*st != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
		a->anomalies.record_not_capturing++;
		return tg_fail(a, TOGGLE_ECAPTURE, "%s: stream %p is not capturing", what,
			       (void *)stream);
	}
	return 0;
}

static int node_cmp(const void *x, const void *y)
{
	uintptr_t a = (uintptr_t)*(const CUgraphNode *)x, b = (uintptr_t)*(const CUgraphNode *)y;
	return a < b ? -1 : a > b;
}

/* How many nodes graph has, and (list != NULL) all of them, sorted. */
static int region_graph_nodes(struct toggle_agent *a, CUgraph graph, const char *what, size_t *n,
			      CUgraphNode **list)
{
	CUresult r = a->cu.graph_get_nodes(graph, NULL, n);
	if (r == CUDA_SUCCESS && list) {
		size_t got = *n;
		if (!(*list = malloc((got ? got : 1) * sizeof(**list))))
			return tg_fail(a, TOGGLE_ENOMEM, "%s: out of memory", what);
		r = got ? a->cu.graph_get_nodes(graph, *list, &got) : CUDA_SUCCESS;
		if (r == CUDA_SUCCESS && got != *n)
			r = CUDA_ERROR_UNKNOWN; /* cannot change between two calls on this thread */
		if (r != CUDA_SUCCESS) {
			free(*list);
			*list = NULL;
		} else {
			qsort(*list, *n, sizeof(**list), node_cmp);
		}
	}
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "%s: cuGraphGetNodes: %s", what,
			       tg_cu_errstr(&a->cu, r));
	}
	return 0;
}

/* How many nodes the region's capture gained, when it cannot be told from inside end. */
#define REGION_GAINED_UNKNOWN SIZE_MAX

/*
 * A region whose capture ended while it was open: what it captured is in the
 * graph, unrecorded, and would run whatever the set.  Unless the region
 * captured nothing, the graph fails closed (late), if the handle still names
 * it: its lifetime object says so (life.c); without one it cannot be told,
 * and the record behind the handle fails closed, whichever capture it is of.
 */
static void region_left_open(struct toggle_agent *a, const struct tg_region *r, const char *hook_name)
{
	char on[32];
	if (!hook_name) { /* found by a look: the hook is not known yet */
		snprintf(on, sizeof(on), "on stream %p", (void *)r->stream);
		hook_name = on;
	}
	int alive = tg_life_alive(r->life);
	if (alive == 0)
		return; /* destroyed: the handle may name another graph by now */
	size_t n = 0;
	if (alive == 1 && a->cu.graph_get_nodes &&
	    a->cu.graph_get_nodes(r->graph, NULL, &n) == CUDA_SUCCESS && n <= r->n_old)
		return; /* nothing was captured in the region: nothing runs unrecorded */
	uint64_t id = r->capture_id;
	const struct tg_graph *g = tg_graph_find(a, r->graph);
	if (alive < 0 && g && !g->stale)
		id = g->capture_id; /* mark that record in place, never clear it */
	char note[TG_NOTE_LEN];
	snprintf(note, sizeof(note), "producer region %.31s was still open when its capture ended "
		 "(not recorded)", hook_name);
	tg_graph_mark_late(a, r->graph, id, note, r->old, r->n_old);
}

/* The capture of r's stream is no longer r's: 1, still r's: 0, cannot tell: -1. */
static int region_capture_over(struct toggle_agent *a, const struct tg_region *r)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	CUgraph graph = NULL;
	if (a->cu.stream_get_capture_info(r->stream, &st, &id, &graph, NULL, NULL, NULL) !=
	    CUDA_SUCCESS)
		return -1;
	return st != CU_STREAM_CAPTURE_STATUS_ACTIVE || id != r->capture_id || graph != r->graph;
}

void tg_region_ended(struct toggle_agent *a, CUgraph graph)
{
	/* Backwards: region_take moves the last open region into the slot it frees. */
	for (unsigned i = a->n_regions; i-- > 0;) {
		if (a->regions[i].graph != graph || region_capture_over(a, &a->regions[i]) == 0)
			continue;
		struct tg_region r = region_take(a, &a->regions[i]);
		region_left_open(a, &r, NULL);
		free(r.old);
		tg_life_region_put(a, r.life, r.own_life, r.graph, false);
	}
}

void tg_region_capture_end(struct toggle_agent *a)
{
	for (unsigned i = a->n_regions; i-- > 0;) {
		if (region_capture_over(a, &a->regions[i]) != 1)
			continue; /* still capturing, or cannot tell: the bind or launch looks again */
		struct tg_region r = region_take(a, &a->regions[i]);
		region_left_open(a, &r, NULL);
		free(r.old);
		tg_life_region_put(a, r.life, r.own_life, r.graph, false);
	}
}

/*
 * A region closed without recording.  Whatever its capture gained since
 * begin stays in the graph, unrecorded: kernels that would run at every
 * replay whatever the set.  So unless the capture gained nothing, or is no
 * longer the region's (a graph the region never reached), its graph is
 * marked late and fails closed until it is captured again (tg_graph_mark_late).
 * gained REGION_GAINED_UNKNOWN: ask the stream; when even that fails, fail
 * closed.  nodes: the region's nodes found so far (identity of the graph).
 * Makes no tg_fail: the refusal's error text stays.
 */
static void region_refused(struct toggle_agent *a, const struct tg_region *r, CUstream stream,
			   const char *hook_name, size_t gained, const char *why,
			   const CUgraphNode *nodes, size_t n_nodes)
{
	bool known = true;
	if (gained == REGION_GAINED_UNKNOWN) {
		CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
		cuuint64_t id = 0;
		CUgraph graph = NULL;
		const CUgraphNode *front = NULL;
		size_t n_front = 0, n = 0;
		if (a->cu.stream_get_capture_info(stream, &st, &id, &graph, &front, NULL, &n_front) ==
		    CUDA_SUCCESS) {
			if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE || id != r->capture_id ||
			    graph != r->graph) {
				region_left_open(a, r, hook_name); /* its capture ended first */
				return;
			}
			if (a->cu.graph_get_nodes(graph, NULL, &n) == CUDA_SUCCESS)
				gained = n >= r->n_old ? n - r->n_old : 0;
			else
				known = false;
		} else {
			known = false;
		}
	}
	if (known && gained == 0)
		return; /* nothing captured in the region: nothing runs unrecorded */
	uint64_t id = r->capture_id;
	if (!known) {
		/* The capture may have ended and its handle gone to a newer capture's
		 * graph: mark that record in place, never clear it (tg_graph_for_capture
		 * would, and its producers would then run unrecorded). */
		const struct tg_graph *g = tg_graph_find(a, r->graph);
		if (g && !g->stale)
			id = g->capture_id;
	}
	char note[TG_NOTE_LEN];
	if (known)
		snprintf(note, sizeof(note), "producer region %s (%zu nodes) was captured but not "
			 "recorded: %s", hook_name, gained, why);
	else
		snprintf(note, sizeof(note), "producer region %s may have captured nodes that were "
			 "not recorded: %s", hook_name, why);
	/* Any node of the graph identifies it: the region's, else those from before it. */
	if (n_nodes)
		tg_graph_mark_late(a, r->graph, id, note, nodes, n_nodes);
	else
		tg_graph_mark_late(a, r->graph, id, note, r->old, r->n_old);
}

int toggle_producer_begin(struct toggle_agent *a, CUstream stream)
{
	static const char what[] = "opening a producer region";

	if (!a)
		return TOGGLE_EINVAL;
	if (a->capture_depth == 0) {
		a->anomalies.record_outside_window++;
		return tg_fail(a, TOGGLE_ECAPTURE, "%s: no capture window is open", what);
	}
	if (!a->cu.graph_node_get_dependencies || !a->cu.graph_get_nodes)
		return tg_fail(a, TOGGLE_ENOTSUP, "%s: the CUDA driver lacks cuGraphNodeGetDependencies "
			       "or cuGraphGetNodes", what);
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	uint64_t id = 0;
	CUgraph graph = NULL;
	const CUgraphNode *front = NULL;
	size_t n_front = 0, n_old = 0;
	int rc = region_capture_info(a, stream, what, &st, &id, &graph, &front, &n_front);
	if (rc)
		return rc;
	struct tg_region *open = region_find(a, stream);
	if (open && open->capture_id == id)
		return tg_fail(a, TOGGLE_EINVAL, "%s: stream %p already has an open region (regions "
			       "do not nest on one stream)", what, (void *)stream);
	if (open) { /* left open in a capture that has ended: it can never end well */
		struct tg_region r = region_take(a, open);
		region_left_open(a, &r, NULL);
		free(r.old);
		tg_life_region_put(a, r.life, r.own_life, r.graph, false);
	}
	if (a->n_regions == TG_MAX_REGIONS)
		return tg_fail(a, TOGGLE_ELIMIT, "%s: %d regions are open already", what,
			       TG_MAX_REGIONS);
	CUgraphNode *old = NULL;
	if ((rc = region_graph_nodes(a, graph, what, &n_old, &old)))
		return rc;
	/* While the capture is active the graph is alive and ours: the object that
	 * tells, if the capture ends with the region still open, whether it still is. */
	bool own = false;
	struct tg_life *life = tg_life_region(a, graph, id, &own);
	a->regions[a->n_regions++] = (struct tg_region){
		.stream = stream,
		.capture_id = id,
		.graph = graph,
		.old = old,
		.n_old = n_old,
		.life = life,
		.own_life = own,
	};
	return 0;
}

void toggle_producer_abort(struct toggle_agent *a, CUstream stream)
{
	struct tg_region *open = a ? region_find(a, stream) : NULL;
	if (!open)
		return;
	/* Dropped, but what the capture gained since begin is in the graph. */
	struct tg_region r = region_take(a, open);
	region_refused(a, &r, stream, "(aborted)", REGION_GAINED_UNKNOWN,
		       "toggle_producer_abort", NULL, 0);
	free(r.old);
	tg_life_region_put(a, r.life, r.own_life, r.graph, false);
}

/* ---- the walk ----------------------------------------------------------------- */

struct walk {
	CUgraphNode *seen; /* open addressing, cap a power of two */
	size_t cap, n;
	CUgraphNode *queue; /* nodes of the region, in the order reached */
	size_t qn, qcap;
	CUgraphNode *deps;
	CUgraphEdgeData *edges;
	size_t dcap;
};

/* 1: added, 0: seen before, <0: out of memory. */
static int walk_mark(struct walk *w, CUgraphNode n)
{
	if (2 * (w->n + 1) > w->cap) {
		struct walk t = {.cap = w->cap ? 2 * w->cap : 64};
		if (!(t.seen = calloc(t.cap, sizeof(*t.seen))))
			return -1;
		for (size_t i = 0; i < w->cap; i++)
			if (w->seen[i])
				(void)walk_mark(&t, w->seen[i]);
		free(w->seen);
		w->seen = t.seen;
		w->cap = t.cap;
	}
	size_t i = tg_node_hash(n) & (w->cap - 1);
	for (; w->seen[i]; i = (i + 1) & (w->cap - 1))
		if (w->seen[i] == n)
			return 0;
	w->seen[i] = n;
	w->n++;
	return 1;
}

static int walk_push(struct walk *w, CUgraphNode n)
{
	if (w->qn == w->qcap) {
		size_t cap = w->qcap ? 2 * w->qcap : 64;
		CUgraphNode *q = realloc(w->queue, cap * sizeof(*q));
		if (!q)
			return -1;
		w->queue = q;
		w->qcap = cap;
	}
	w->queue[w->qn++] = n;
	return 0;
}

static void walk_free(struct walk *w)
{
	free(w->seen);
	free(w->queue);
	free(w->deps);
	free(w->edges);
}

static bool region_old(const struct tg_region *r, CUgraphNode n)
{
	return bsearch(&n, r->old, r->n_old, sizeof(*r->old), node_cmp) != NULL;
}

/* 1: n is new and was queued, 0: old or queued before, <0: out of memory. */
static int walk_visit(struct walk *w, const struct tg_region *r, CUgraphNode n)
{
	if (!n || region_old(r, n))
		return 0;
	int added = walk_mark(w, n);
	if (added > 0 && walk_push(w, n) < 0)
		return -1;
	return added;
}

/*
 * Collect the nodes reachable backwards from front that are not older than
 * the region, at most `limit` (the walk stops past it: 1).  0 done, <0 an
 * error (set).
 */
static int walk_region(struct toggle_agent *a, struct walk *w, const struct tg_region *r,
		       const CUgraphNode *front, size_t n_front, size_t limit, struct toggle_hook hook)
{
	for (size_t i = 0; i < n_front; i++)
		if (walk_visit(w, r, front[i]) < 0)
			goto nomem;
	for (size_t qi = 0; qi < w->qn; qi++) {
		if (w->qn > limit)
			return 1;
		size_t nd = 0;
		CUresult cr = a->cu.graph_node_get_dependencies(w->queue[qi], NULL, NULL, &nd);
		if (cr == CUDA_SUCCESS && nd > w->dcap) {
			free(w->deps);
			free(w->edges);
			w->deps = malloc(nd * sizeof(*w->deps));
			w->edges = malloc(nd * sizeof(*w->edges));
			w->dcap = nd;
			if (!w->deps || !w->edges) {
				w->dcap = 0;
				goto nomem;
			}
		}
		if (cr == CUDA_SUCCESS && nd)
			cr = a->cu.graph_node_get_dependencies(w->queue[qi], w->deps, w->edges, &nd);
		if (cr != CUDA_SUCCESS) {
			a->anomalies.driver_errors++;
			return tg_fail(a, TOGGLE_ECUDA, "closing the region of hook %u:%u: "
				       "cuGraphNodeGetDependencies: %s", hook.type, hook.layer,
				       tg_cu_errstr(&a->cu, cr));
		}
		for (size_t k = 0; k < nd; k++)
			if (walk_visit(w, r, w->deps[k]) < 0)
				goto nomem;
	}
	return w->qn > limit ? 1 : 0;
nomem:
	return tg_fail(a, TOGGLE_ENOMEM, "closing the region of hook %u:%u: out of memory",
		       hook.type, hook.layer);
}

static const char *region_node_kind(CUgraphNodeType t)
{
	switch (t) {
	case CU_GRAPH_NODE_TYPE_MEMCPY: return "memcpy";
	case CU_GRAPH_NODE_TYPE_MEMSET: return "memset";
	case CU_GRAPH_NODE_TYPE_HOST: return "host";
	case CU_GRAPH_NODE_TYPE_GRAPH: return "child graph";
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "memory allocation";
	case CU_GRAPH_NODE_TYPE_MEM_FREE: return "memory free";
	default: return "non-kernel";
	}
}

/*
 * The kernel nodes of the walk into *out (oldest first: the walk reached
 * them newest first).  Nodes without work (empty, event record and wait)
 * are skipped; any other node refuses the region.
 */
static int region_kernels(struct toggle_agent *a, const struct walk *w, struct toggle_hook hook,
			  CUgraphNode **out, size_t *n_kernels)
{
	CUgraphNode *kern = malloc((w->qn ? w->qn : 1) * sizeof(*kern));
	size_t k = 0;
	if (!kern)
		return tg_fail(a, TOGGLE_ENOMEM, "closing the region of hook %u:%u: out of memory",
			       hook.type, hook.layer);
	for (size_t i = w->qn; i-- > 0;) {
		CUgraphNodeType t;
		CUresult cr = a->cu.graph_node_get_type(w->queue[i], &t);
		if (cr != CUDA_SUCCESS) {
			free(kern);
			a->anomalies.driver_errors++;
			return tg_fail(a, TOGGLE_ECUDA, "closing the region of hook %u:%u: "
				       "cuGraphNodeGetType: %s", hook.type, hook.layer,
				       tg_cu_errstr(&a->cu, cr));
		}
		if (t == CU_GRAPH_NODE_TYPE_KERNEL) {
			kern[k++] = w->queue[i];
			continue;
		}
		if (t == CU_GRAPH_NODE_TYPE_EMPTY || t == CU_GRAPH_NODE_TYPE_EVENT_RECORD ||
		    t == CU_GRAPH_NODE_TYPE_WAIT_EVENT)
			continue;
		free(kern);
		a->anomalies.record_not_kernel++;
		if (t == CU_GRAPH_NODE_TYPE_MEMCPY || t == CU_GRAPH_NODE_TYPE_MEMSET)
			return tg_fail(a, TOGGLE_ENOTKERNEL,
				       "the region of hook %u:%u holds a %s node, which cannot be "
				       "toggled as a producer: make the copy a kernel (in PyTorch "
				       "torch.mul(x, 1, out=buf) instead of buf.copy_(x); in C "
				       "toggle_copy_out); nothing of the region is recorded",
				       hook.type, hook.layer, region_node_kind(t));
		return tg_fail(a, TOGGLE_ENOTKERNEL,
			       "the region of hook %u:%u holds a %s node (type %d): only kernel "
			       "nodes can be producers; nothing of the region is recorded",
			       hook.type, hook.layer, region_node_kind(t), (int)t);
	}
	*out = kern;
	*n_kernels = k;
	return 0;
}

int toggle_producer_end(struct toggle_agent *a, CUstream stream, struct toggle_hook hook,
			size_t *n_recorded)
{
	if (n_recorded)
		*n_recorded = 0;
	if (!a)
		return TOGGLE_EINVAL;
	struct tg_region *open = region_find(a, stream);
	if (!open)
		return tg_fail(a, TOGGLE_EINVAL, "closing a producer region: stream %p has none open "
			       "(toggle_producer_begin)", (void *)stream);
	/* The region closes here whatever happens: nothing of it stays pending. */
	struct tg_region r = region_take(a, open);
	bool active = false; /* its capture is still active: its own object goes back */

	struct walk w = {0};
	CUgraphNode *kern = NULL;
	int rc = 0;
	char what[64], name[32];
	snprintf(what, sizeof(what), "closing the region of hook %u:%u", hook.type, hook.layer);
	snprintf(name, sizeof(name), "of hook %u:%u", hook.type, hook.layer);
	/* On refusal: what the capture gained (unknown until counted) and why, for region_refused. */
	size_t gained = REGION_GAINED_UNKNOWN;
	const char *why = NULL;
	if (hook.type >= a->catalog.n_types || hook.layer >= a->catalog.n_layers) {
		rc = tg_fail(a, TOGGLE_ERANGE, "hook %u:%u outside the catalog (%u types, %u layers)",
			     hook.type, hook.layer, a->catalog.n_types, a->catalog.n_layers);
		why = "hook outside the catalog";
		goto out;
	}
	if (a->capture_depth == 0) {
		a->anomalies.record_outside_window++;
		rc = tg_fail(a, TOGGLE_ECAPTURE, "%s: no capture window is open", what);
		why = "no capture window open at its end";
		goto out;
	}
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	uint64_t id = 0;
	CUgraph graph = NULL;
	const CUgraphNode *front = NULL;
	size_t n_front = 0, graph_nodes = 0;
	if ((rc = region_capture_info(a, stream, what, &st, &id, &graph, &front, &n_front))) {
		/* Not capturing any more: region_refused finds the graph out of reach. */
		why = rc == TOGGLE_ECUDA ? "cuStreamGetCaptureInfo failed" : "its capture ended";
		goto out;
	}
	if (id != r.capture_id || graph != r.graph) {
		a->anomalies.record_not_capturing++;
		rc = tg_fail(a, TOGGLE_ECAPTURE, "%s: the capture the region began in has ended",
			     what);
		why = "its capture ended"; /* its graph, if alive, fails closed */
		goto out;
	}
	active = true;
	if ((rc = region_graph_nodes(a, graph, what, &graph_nodes, NULL))) {
		why = "cuGraphGetNodes failed";
		goto out; /* gained unknown: fail closed */
	}
	gained = graph_nodes >= r.n_old ? graph_nodes - r.n_old : 0;
	/* front stays valid until the next capture call on stream: the walk makes none. */
	rc = walk_region(a, &w, &r, front, n_front, gained, hook);
	if (rc < 0) {
		why = toggle_strerror(rc);
		goto out;
	}
	if (rc == 1 || w.qn != gained) {
		rc = tg_fail(a, TOGGLE_EINVAL, "%s: the capture gained %zu nodes since "
			     "toggle_producer_begin but %zu of them are ordered before the region's "
			     "end on stream %p: join every stream forked in the region into it "
			     "before toggle_producer_end (or capture nothing else into this graph "
			     "meanwhile); nothing recorded", what, gained, w.qn, (void *)stream);
		why = "work not joined before its end";
		goto out;
	}
	size_t n_kernels = 0;
	if ((rc = region_kernels(a, &w, hook, &kern, &n_kernels))) {
		why = rc == TOGGLE_ENOTKERNEL ? "a node that is not a kernel (memcpy, memset...)"
					      : toggle_strerror(rc);
		goto out;
	}
	if (n_kernels == 0) {
		a->anomalies.record_not_kernel++;
		rc = tg_fail(a, TOGGLE_ENOTKERNEL, "%s: the region holds no kernel node (%zu nodes)",
			     what, gained);
		goto out; /* why NULL: nothing in it runs (empty, event nodes) */
	}
	if ((rc = tg_record_nodes(a, graph, id, kern, n_kernels, hook))) {
		why = rc == TOGGLE_EINVAL ? "a node recorded already" : toggle_strerror(rc);
		goto out;
	}
	if (n_recorded)
		*n_recorded = n_kernels;
out:
	if (rc && why)
		region_refused(a, &r, stream, name, gained, why, w.queue, w.qn);
	free(r.old);
	tg_life_region_put(a, r.life, r.own_life, r.graph, active);
	free(kern);
	walk_free(&w);
	return rc;
}
