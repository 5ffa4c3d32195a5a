/*
 * bare.c - the producer-free ("bare") exec: per bound exec, a second exec of
 * the same graph with its producer nodes removed, launched at the steps whose
 * set enables none of the graph's hooks.  Disabled nodes are not free on the
 * GPU (docs/benchmarks.md); a graph without them replays at the floor.
 * A third, the "full" exec: in host modes the graph as it is (a clone, kept
 * for its node handles), run at every step the bare exec does not fit, its
 * producers set from states of its own (sync.c); in device mode the graph
 * without its planner, every producer a plain kernel node (the planner and
 * device-updatable nodes are not free either), run at steps whose set
 * enables every hook of the graph.  In host modes what the full exec saves
 * is the main exec's lifetime object (life.c): the driver paces the
 * launches of an exec that holds one (docs/libtoggle.md, *What the
 * references cost*), none of libtoggle's execs holds it.
 *
 * Built at bind (never in the background: graph objects are not thread-safe
 * and the application owns the graph): clone the graph, find each producer
 * in the clone, connect each of its dependencies to each of its dependents
 * (default edges: the strictest order, so nothing that followed a producer
 * can start earlier than before), destroy it, instantiate, destroy the clone
 * (the full exec: clone, instantiate, destroy the clone).
 * A build that fails leaves the main exec alone: it runs every step, as
 * without this file.
 *
 * Picked only when the set changes (tg_bare_pick, from the slow path and
 * apply_all): g->run then names the exec the hot path launches, so switching
 * costs no driver call and the hot path no compare.  The main exec keeps its
 * node states (and g->synced) while the bare one runs; the usual sync brings
 * it to the current set when it is picked again.
 *
 * A graph its planner toggles (device mode) cannot be cloned (the driver
 * refuses cuGraphClone of a graph with a device-updatable node), nor can
 * such a node be destroyed: its bare exec is assembled instead
 * (bare_assemble): a new graph, node by node, of every node that is neither
 * a producer nor the planner, each of the same type with the parameters the
 * driver's getter gives (and a kernel's launch attributes), and the
 * original's edges with the removed nodes bypassed.  The full exec is
 * assembled the same way with the producers kept, each a kernel node of the
 * same parameters without the device-updatable attribute (the driver copies
 * no attributes from a device-updatable node: a producer launched with
 * attributes of the application's, or recorded from a node it made, means
 * no full exec).  A node of a type that cannot be copied so (no getter:
 * memory allocation, conditional, batch memory operation nodes...; or a
 * device-updatable kernel that is not a producer) means no such exec: the
 * device exec runs those steps.  Neither holds a device-updatable node or
 * runs the planner, so the planner's mask and its record of node states
 * stay what the device exec's last launch left: the first launch of the
 * device exec after bare or full ones gets the mask words that differ from
 * them, in stream order, like any launch after a set change (device.c), and
 * its planner sets exactly the nodes whose state differs from the set.
 * Each is uploaded once, at the build.
 *
 * Host modes assemble their bare and full execs the same way (the producers
 * then keep their attributes) unless toggle_config.clone_execs, and clone the
 * graph when the assembly fails.  Why not clones: on the compiled Llama
 * (H100, benchmarks.md section 11, session 20) lazy mode's assembled execs
 * ran 0.25 to 0.7 point of the floor faster all on than its clones of the
 * same graphs, in interleaved runs.
 *
 * Host modes' set exec: a set in between that has held for TG_SETX_STEADY
 * steps gets, at a step_begin and one graph a step (tg_setx_step), a clone
 * of the full exec's clone without the producers it leaves off, picked while
 * the set agrees with it on the graph's hooks: no node set and no disabled
 * node for a set an operator keeps.  Its candidates are the graphs whose
 * pick ran the full exec at that version (a queue), so a step's cost does
 * not grow with the records.
 *
 * Host modes' all-on exec: an exec whose producers were disabled and
 * enabled again by node sets replays all on slower than one never set
 * (benchmarks.md section 11, session 21).  Once all on has run on a full
 * exec that a set in between had set (toggled), the graph gets, at a
 * step_begin and one graph a step, the full exec's graph instantiated
 * again: all on runs it from then on, sets in between the full exec, so
 * neither sets a node when all on alternates with one set.  Kept while the
 * full exec is; it counts as a set exec in the status and the stats.
 *
 * toggle_graph_set_bare(), the switch over both, is bind.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"

/* Most dependencies or dependents of one node the build accepts from the driver. */
#define TG_BARE_MAX_EDGES (1u << 20)

/* Steps a set in between must hold before set execs are built for it, one graph a step. */
#define TG_SETX_STEADY 8u
/* Most candidates a step looks at (tg_setx_step): a step's cost stays bounded
 * while graphs wait to be launched at the set (setx_want's LATER). */
#define TG_SETX_LOOKS 8u

/* Whether the current set leaves g nothing to run. */
static bool bare_fits(const struct toggle_agent *a, const struct tg_graph *g)
{
	for (uint32_t w = g->alt_wlo; w < g->alt_whi; w++)
		if (a->current.bits[w] & g->covered.bits[w])
			return false;
	return true;
}

/* Whether the current set enables every hook of g. */
static bool full_fits(const struct toggle_agent *a, const struct tg_graph *g)
{
	for (uint32_t w = g->alt_wlo; w < g->alt_whi; w++)
		if ((a->current.bits[w] & g->covered.bits[w]) != g->covered.bits[w])
			return false;
	return true;
}

/* Whether the current set agrees, on g's hooks, with the one its set exec was built for. */
static bool setx_fits(const struct toggle_agent *a, const struct tg_graph *g)
{
	for (uint32_t w = g->alt_wlo; w < g->alt_whi; w++)
		if ((a->current.bits[w] & g->covered.bits[w]) != g->setx_set.bits[w])
			return false;
	return true;
}

static bool alt_running(const struct tg_graph *g, const struct tg_bare *x)
{
	return x->exec && g->run == x->exec;
}

bool tg_bare_running(const struct tg_graph *g)
{
	return alt_running(g, &g->bare);
}

bool tg_full_running(const struct tg_graph *g)
{
	return alt_running(g, &g->full);
}

bool tg_setx_running(const struct tg_graph *g)
{
	return alt_running(g, &g->setx) || alt_running(g, &g->allx);
}

uint64_t tg_bare_replays(const struct tg_graph *g)
{
	return tg_alt_replays(g, &g->bare);
}

uint64_t tg_full_replays(const struct tg_graph *g)
{
	return tg_alt_replays(g, &g->full);
}

/* The second exec g runs now, if any. */
static struct tg_bare *alt_now(struct tg_graph *g)
{
	return alt_running(g, &g->bare)   ? &g->bare
	       : alt_running(g, &g->full) ? &g->full
	       : alt_running(g, &g->setx) ? &g->setx
	       : alt_running(g, &g->allx) ? &g->allx
					  : NULL;
}

/* Close the count of launches of the second exec now running, if any. */
static void bare_stop(struct tg_graph *g)
{
	struct tg_bare *x = alt_now(g);
	if (x) {
		x->replays += g->replays - x->since;
		g->alt_closed += g->replays - x->since;
	}
	tg_run_set(g, g->exec, &g->last_stream);
}

static void alt_switched(struct toggle_agent *a, struct tg_graph *g, const struct tg_bare *x)
{
	if (x == &g->bare)
		a->stats.bare_switches++;
	else if (x == &g->full)
		a->stats.full_switches++;
	else
		a->stats.set_switches++;
}

/* The record at the head of a candidates' ring (queue, *head, *n), taken off;
 * NULL when its slot no longer holds one. */
static struct tg_graph *ring_take(struct toggle_agent *a, const uint32_t *queue, uint32_t *head,
				  uint32_t *n, uint32_t *slot)
{
	*slot = queue[*head];
	*head = (*head + 1) % TOGGLE_MAX_GRAPHS;
	(*n)--;
	return *slot < a->n_graphs ? a->graphs[*slot] : NULL;
}

/* Name slot a candidate for a set exec (tg_setx_step's ring); false when full. */
static bool setx_push(struct toggle_agent *a, uint32_t slot)
{
	if (a->setx_n >= TOGGLE_MAX_GRAPHS)
		return false;
	a->setx_queue[(a->setx_head + a->setx_n) % TOGGLE_MAX_GRAPHS] = slot;
	a->setx_n++;
	return true;
}

/* Name g a candidate for an all-on exec (tg_setx_step's other ring), once while queued. */
static void allx_push(struct toggle_agent *a, struct tg_graph *g)
{
	if (g->allx_queued || a->allx_n >= TOGGLE_MAX_GRAPHS)
		return; /* full: named again by a later pick */
	a->allx_queue[(a->allx_head + a->allx_n) % TOGGLE_MAX_GRAPHS] = g->slot;
	a->allx_n++;
	g->allx_queued = true;
	g->allx_step0 = a->step;
}

int tg_bare_pick(struct toggle_agent *a, struct tg_graph *g)
{
	/* Device mode: a strict agent refuses a blocked graph's launches
	 * (tg_device_sync), the bare and full execs' too; the caller polled the
	 * planner's report first (replay.c). */
	struct tg_bare *want = NULL, *now = alt_now(g);
	if (!g->blocked && g->bare.exec && bare_fits(a, g))
		want = &g->bare;
	else if (!g->blocked && g->allx.exec && full_fits(a, g))
		want = &g->allx; /* host modes: nothing to set, as the bare exec */
	else if (!g->blocked && g->setx.exec && setx_fits(a, g))
		want = &g->setx; /* host modes: nothing to set, as the bare exec */
	else if (!g->blocked && g->full.exec && g->full.nodes && !g->gone) {
		/* Host modes: every other set, its producers set first.  A failing
		 * node set refuses the launch as any failed sync does (counted, kept
		 * in the last error); the full exec's states are then unknown and the
		 * next pick sets them all. */
		bool all = full_fits(a, g);
		if (!all)
			g->full.toggled = true; /* also when the sync fails: states unknown */
		int rc = tg_full_sync(a, g);
		if (rc)
			return rc;
		want = &g->full;
		/* A set in between on the full exec: a candidate for a set exec
		 * (tg_setx_step), once a version; all on on a full exec a set in
		 * between has set: for an all-on exec.  Found here, not by a walk
		 * over every record at each step. */
		if (a->setx_on && !all && g->setx_queued != a->version && setx_push(a, g->slot))
			g->setx_queued = a->version;
		else if (a->setx_on && all && g->full.toggled && !g->allx.failed)
			allx_push(a, g);
	} else if (!g->blocked && g->full.exec && g->full.nodes && tg_full_holds(a, g)) {
		/* A graph destroyed while its exec is bound: only a set the full
		 * exec holds already, untouched, as the main exec's rule is
		 * (tg_graph_sync); else the main exec's rule decides. */
		want = &g->full;
	} else if (!g->blocked && g->full.exec && !g->full.nodes && full_fits(a, g))
		want = &g->full;
	if (want != now) {
		if (now) {
			now->replays += g->replays - now->since;
			g->alt_closed += g->replays - now->since;
			alt_switched(a, g, now);
		}
		if (want) {
			want->since = g->replays;
			alt_switched(a, g, want);
		}
	}
	if (want)
		tg_run_set(g, want->exec, &want->stream);
	else
		tg_run_set(g, g->exec, &g->last_stream);
	if (want)
		g->applied_version = a->version; /* it holds every set it fits */
	return want != NULL ? 1 : 0;
}

/*
 * The caller launches the main exec itself (toggle_graph_prepare): back to
 * it.  It holds the set it last synced (g->synced), not necessarily the
 * current one: out of date until the sync that follows.
 */
void tg_bare_leave(struct toggle_agent *a, struct tg_graph *g)
{
	struct tg_bare *now = alt_now(g);
	if (!now)
		return;
	alt_switched(a, g, now);
	bare_stop(g);
	g->applied_version = 0;
}

static void bare_destroy(struct toggle_agent *a, CUgraphExec *exec)
{
	if (!*exec)
		return;
	CUresult r = a->cu.graph_exec_destroy(*exec);
	if (r != CUDA_SUCCESS)
		a->anomalies.driver_errors++;
	*exec = NULL;
}

static void bare_graph_destroy(struct toggle_agent *a, CUgraph *graph)
{
	if (!*graph)
		return;
	if (a->cu.graph_destroy(*graph) != CUDA_SUCCESS)
		a->anomalies.driver_errors++;
	*graph = NULL;
}

/* The parked exec and its clone. */
static void alt_unpark(struct toggle_agent *a, struct tg_bare *x)
{
	bare_destroy(a, &x->parked);
	bare_graph_destroy(a, &x->parked_graph);
}

/* The host full exec's node handles and states (its clone goes with its exec). */
static void alt_forget_nodes(struct tg_bare *x)
{
	free(x->nodes);
	free(x->state);
	x->nodes = NULL;
	x->state = NULL;
	x->synced_valid = false;
	x->toggled = false;
}

/* Destroying an exec inside a capture window is left for later (bind, close). */
static void alt_drop(struct toggle_agent *a, struct tg_bare *x)
{
	alt_forget_nodes(x);
	if (!x->exec)
		return;
	if (a->capture_depth == 0) {
		bare_destroy(a, &x->exec);
		bare_graph_destroy(a, &x->graph);
		return;
	}
	alt_unpark(a, x);
	x->parked = x->exec;
	x->parked_graph = x->graph;
	x->exec = NULL;
	x->graph = NULL;
}

void tg_bare_drop(struct toggle_agent *a, struct tg_graph *g)
{
	bare_stop(g);
	alt_drop(a, &g->bare);
	alt_drop(a, &g->full);
	alt_drop(a, &g->setx);
	alt_drop(a, &g->allx);
	g->setx.failed = false;
	g->allx.failed = false;
	memset(&g->setx_set, 0, sizeof(g->setx_set));
}

void tg_bare_free(struct toggle_agent *a, struct tg_graph *g)
{
	bare_stop(g);
	alt_forget_nodes(&g->full);
	bare_destroy(a, &g->bare.exec);
	bare_destroy(a, &g->full.exec);
	bare_graph_destroy(a, &g->full.graph);
	bare_destroy(a, &g->setx.exec);
	bare_destroy(a, &g->allx.exec);
	alt_unpark(a, &g->bare);
	alt_unpark(a, &g->full);
	alt_unpark(a, &g->setx);
	alt_unpark(a, &g->allx);
}

/* The dependencies (deps) or dependents of node, in a new array; with
 * edata, their edge data too (else dropped). */
static int bare_edges_data(struct toggle_agent *a, CUgraphNode node, bool deps, CUgraphNode **out,
			   CUgraphEdgeData **edata, size_t *n)
{
	CUresult (*get)(CUgraphNode, CUgraphNode *, CUgraphEdgeData *, size_t *) =
		deps ? a->cu.graph_node_get_dependencies : a->cu.graph_node_get_dependent_nodes;
	const char *what = deps ? "cuGraphNodeGetDependencies" : "cuGraphNodeGetDependentNodes";
	*out = NULL;
	*n = 0;
	size_t count = 0;
	CUresult r = get(node, NULL, NULL, &count);
	if (r != CUDA_SUCCESS)
		return tg_fail(a, TOGGLE_ECUDA, "%s: %s", what, tg_cu_errstr(&a->cu, r));
	if (count > TG_BARE_MAX_EDGES)
		return tg_fail(a, TOGGLE_ELIMIT, "%s: %zu edges (at most %u)", what, count,
			       TG_BARE_MAX_EDGES);
	CUgraphNode *v = malloc((count ? count : 1) * sizeof(*v));
	/* Edge data is read (a query without it fails on non-default edges) and
	 * dropped: reconnected edges are default ones, the strictest order. */
	CUgraphEdgeData *e = malloc((count ? count : 1) * sizeof(*e));
	if (!v || !e) {
		free(v);
		free(e);
		return tg_fail(a, TOGGLE_ENOMEM, "%s: out of memory", what);
	}
	size_t got = count;
	r = count ? get(node, v, e, &got) : CUDA_SUCCESS;
	if (r != CUDA_SUCCESS || got > count) {
		free(v);
		free(e);
		return tg_fail(a, TOGGLE_ECUDA, "%s: %s", what,
			       r != CUDA_SUCCESS ? tg_cu_errstr(&a->cu, r) : "count grew");
	}
	if (edata)
		*edata = e;
	else
		free(e);
	*out = v;
	*n = got;
	return 0;
}

static int bare_edges(struct toggle_agent *a, CUgraphNode node, bool deps, CUgraphNode **out,
		      size_t *n)
{
	return bare_edges_data(a, node, deps, out, NULL, n);
}

static bool bare_has(const CUgraphNode *v, size_t n, CUgraphNode x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/*
 * Remove one producer from the clone: every dependency of it becomes a
 * dependency of every dependent it had (unless it already is one: the
 * driver refuses an existing edge).
 */
static int bare_remove(struct toggle_agent *a, CUgraph clone, CUgraphNode node)
{
	CUgraphNode *pred = NULL, *succ = NULL, *have = NULL, *from = NULL, *to = NULL;
	size_t np = 0, ns = 0, nh = 0, k = 0;
	int rc = bare_edges(a, node, true, &pred, &np);
	if (!rc)
		rc = bare_edges(a, node, false, &succ, &ns);
	if (!rc && np && ns) {
		if (np > TG_BARE_MAX_EDGES / ns) {
			rc = tg_fail(a, TOGGLE_ELIMIT, "a producer with %zu dependencies and %zu "
				     "dependents", np, ns);
		} else {
			from = malloc(np * ns * sizeof(*from));
			to = malloc(np * ns * sizeof(*to));
			if (!from || !to)
				rc = tg_fail(a, TOGGLE_ENOMEM, "out of memory");
		}
	}
	CUresult r = CUDA_SUCCESS;
	if (!rc && (r = a->cu.graph_destroy_node(node)) != CUDA_SUCCESS)
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphDestroyNode: %s", tg_cu_errstr(&a->cu, r));
	for (size_t s = 0; !rc && np && s < ns; s++) {
		free(have);
		have = NULL;
		rc = bare_edges(a, succ[s], true, &have, &nh);
		for (size_t p = 0; !rc && p < np; p++) {
			if (bare_has(have, nh, pred[p]))
				continue;
			from[k] = pred[p];
			to[k++] = succ[s];
		}
	}
	if (!rc && k && (r = a->cu.graph_add_dependencies(clone, from, to, NULL, k)) != CUDA_SUCCESS)
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphAddDependencies: %s", tg_cu_errstr(&a->cu, r));
	free(pred);
	free(succ);
	free(have);
	free(from);
	free(to);
	return rc;
}

/*
 * Clone src (g's graph, or the full exec's clone: src_nodes then names g's
 * producers in it), and remove from the clone each producer whose hook is
 * not in on (NULL: every producer; the bare and set execs) or, full, find
 * each in it (*nodes: the handles that set them in its exec); instantiate
 * the clone.  The clone is destroyed (the exec does not need it), except the
 * full exec's, kept in *keep: its node handles live as long as it does.
 */
static int clone_build(struct toggle_agent *a, struct tg_graph *g, CUgraph src,
		       CUgraphNode *src_nodes, const struct toggle_set *on, bool full,
		       CUgraphExec *out, CUgraph *keep, CUgraphNode **nodes)
{
	CUgraph clone = NULL;
	CUgraphNode *found = NULL;
	CUresult r = a->cu.graph_clone(&clone, src);
	if (r != CUDA_SUCCESS)
		return tg_fail(a, TOGGLE_ECUDA, "cuGraphClone: %s", tg_cu_errstr(&a->cu, r));
	/* A clone of the graph holds a copy of its lifetime object, and an exec of
	 * it would too: given back first, or the graph's death would wait for
	 * this exec (life.c).  The full exec's clone gave its back already. */
	int rc = src == g->graph ? tg_life_unclone(a, g, clone) : 0;
	if (!rc && full && !(found = malloc((size_t)g->n_nodes * sizeof(*found))))
		rc = tg_fail(a, TOGGLE_ENOMEM, "out of memory");
	for (uint32_t i = 0; !rc && i < g->n_nodes; i++) {
		if (!full && on && tg_set_has(on, g->nodes[i].hook))
			continue;
		CUgraphNode node = NULL;
		r = a->cu.graph_node_find_in_clone(&node, src_nodes ? src_nodes[i] : g->nodes[i].node,
						   clone);
		if (r != CUDA_SUCCESS)
			rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphNodeFindInClone: %s",
				     tg_cu_errstr(&a->cu, r));
		else if (full)
			found[i] = node;
		else
			rc = bare_remove(a, clone, node);
	}
	if (!rc && (r = a->cu.graph_instantiate(out, clone, 0)) != CUDA_SUCCESS) {
		*out = NULL;
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphInstantiateWithFlags: %s",
			     tg_cu_errstr(&a->cu, r));
	}
	if (!rc && full) {
		*keep = clone;
		*nodes = found;
		return 0;
	}
	free(found);
	r = a->cu.graph_destroy(clone); /* the exec does not need it */
	if (r != CUDA_SUCCESS && !rc) {
		bare_destroy(a, out);
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphDestroy: %s", tg_cu_errstr(&a->cu, r));
	}
	return rc;
}

/* Host modes: the bare exec (every producer removed) or the full exec (every one kept). */
static int bare_build(struct toggle_agent *a, struct tg_graph *g, bool full, CUgraphExec *out,
		      CUgraph *keep, CUgraphNode **nodes)
{
	return clone_build(a, g, g->graph, NULL, NULL, full, out, keep, nodes);
}

/* ---- assembled node by node (device mode; host modes unless clone_execs) ---- */

/* Most nodes of a graph the assembly accepts from the driver. */
#define TG_BARE_MAX_NODES (1u << 20)

/* One node of the recorded graph: its copy, or why it has none. */
struct bare_map {
	CUgraphNode orig;
	CUgraphNode copy; /* NULL: removed (the planner, a producer of the bare exec) */
	uint32_t seen;    /* stamp of the last kept node whose dependencies reached it */
	uint32_t edge;    /* the edge added for that node, when this one is kept */
	bool drop;
	bool producer;    /* kept (the full exec): copied without its attributes */
};

static int bare_map_cmp(const void *x, const void *y)
{
	uintptr_t a = (uintptr_t)((const struct bare_map *)x)->orig;
	uintptr_t b = (uintptr_t)((const struct bare_map *)y)->orig;
	return (a > b) - (a < b);
}

static struct bare_map *bare_map_find(struct bare_map *m, size_t n, CUgraphNode node)
{
	struct bare_map key = {.orig = node};
	return bsearch(&key, m, n, sizeof(*m), bare_map_cmp);
}

/* The edges of the assembled graph, added in one call at the end. */
struct bare_edgelist {
	CUgraphNode *from, *to;
	CUgraphEdgeData *data;
	size_t n, cap;
	bool special; /* some edge keeps non-default data */
};

static int bare_edge_add(struct toggle_agent *a, struct bare_edgelist *l, struct bare_map *from,
			 CUgraphNode to, uint32_t stamp, const CUgraphEdgeData *data)
{
	static const CUgraphEdgeData zero;
	if (from->seen == stamp) {
		/* Reached twice (directly and around a removed node, say): one
		 * default edge, the strictest order of the two. */
		l->data[from->edge] = zero;
		return 0;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		if (cap > TG_BARE_MAX_EDGES)
			return tg_fail(a, TOGGLE_ELIMIT, "more than %u edges", TG_BARE_MAX_EDGES);
		CUgraphNode *f = realloc(l->from, cap * sizeof(*f));
		if (f)
			l->from = f;
		CUgraphNode *t = f ? realloc(l->to, cap * sizeof(*t)) : NULL;
		if (t)
			l->to = t;
		CUgraphEdgeData *d = t ? realloc(l->data, cap * sizeof(*d)) : NULL;
		if (!d)
			return tg_fail(a, TOGGLE_ENOMEM, "out of memory");
		l->data = d;
		l->cap = cap;
	}
	from->seen = stamp;
	from->edge = (uint32_t)l->n;
	l->from[l->n] = from->copy;
	l->to[l->n] = to;
	l->data[l->n] = data ? *data : zero;
	l->n++;
	return 0;
}

/*
 * The edges into kept node m (stamp: its own): each dependency that is kept,
 * with its edge data; through each one removed, the kept nodes it depends
 * on, transitively (default edges: nothing that followed a producer may
 * start earlier than before).
 */
static int bare_edges_into(struct toggle_agent *a, struct bare_map *map, size_t n,
			   struct bare_map *m, uint32_t stamp, struct bare_edgelist *l)
{
	CUgraphNode *stack = NULL;
	size_t sn = 0, scap = 0;
	CUgraphNode node = m->orig;
	bool direct = true;
	int rc = 0;
	for (;;) {
		CUgraphNode *deps = NULL;
		CUgraphEdgeData *ed = NULL;
		size_t nd = 0;
		rc = bare_edges_data(a, node, true, &deps, &ed, &nd);
		for (size_t k = 0; !rc && k < nd; k++) {
			struct bare_map *d = bare_map_find(map, n, deps[k]);
			if (!d) {
				rc = tg_fail(a, TOGGLE_ECUDA, "a dependency outside the graph");
			} else if (!d->drop) {
				rc = bare_edge_add(a, l, d, m->copy, stamp, direct ? &ed[k] : NULL);
				l->special |= direct && d->seen == stamp &&
					      memcmp(&l->data[d->edge], &(CUgraphEdgeData){0},
						     sizeof(CUgraphEdgeData)) != 0;
			} else if (d->seen != stamp) {
				d->seen = stamp; /* each removed node walked once per kept node */
				if (sn == scap) {
					size_t cap = scap ? 2 * scap : 16;
					CUgraphNode *t = cap <= TG_BARE_MAX_NODES
							 ? realloc(stack, cap * sizeof(*t)) : NULL;
					if (!t) {
						rc = tg_fail(a, TOGGLE_ENOMEM, "out of memory");
						break;
					}
					stack = t;
					scap = cap;
				}
				stack[sn++] = d->orig;
			}
		}
		free(deps);
		free(ed);
		if (rc || sn == 0)
			break;
		node = stack[--sn];
		direct = false;
	}
	free(stack);
	return rc;
}

/*
 * Add a copy of node (of type t) to graph: *copy, or an error (ENOTSUP: not
 * copyable).  plain: a producer of the full exec, a device-updatable kernel
 * whose attributes the driver does not copy (it was recorded without any
 * of the application's: struct tg_node) and whose copy must not be one.
 */
static int bare_copy_node(struct toggle_agent *a, CUgraph graph, CUgraphNode node,
			  CUgraphNodeType t, bool plain, CUcontext *ctx, bool *have_ctx,
			  CUgraphNode *copy)
{
	const struct tg_cu *cu = &a->cu;
	CUresult r = CUDA_SUCCESS;
	const char *what = "?";
	*copy = NULL;
	if ((t == CU_GRAPH_NODE_TYPE_MEMSET || t == CU_GRAPH_NODE_TYPE_MEMCPY) && !*have_ctx) {
		if (!cu->ctx_get_current)
			goto unsupported;
		if ((r = cu->ctx_get_current(ctx)) != CUDA_SUCCESS)
			return tg_fail(a, TOGGLE_ECUDA, "cuCtxGetCurrent: %s", tg_cu_errstr(cu, r));
		*have_ctx = true;
	}
	switch (t) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		if (!cu->kernel_node_get_params || !cu->add_kernel_node ||
		    !cu->kernel_node_copy_attributes)
			goto unsupported;
		CUDA_KERNEL_NODE_PARAMS p;
		memset(&p, 0, sizeof(p));
		what = "cuGraphKernelNodeGetParams";
		r = cu->kernel_node_get_params(node, &p);
		if (r == CUDA_SUCCESS) {
			what = "cuGraphAddKernelNode";
			r = cu->add_kernel_node(copy, graph, NULL, 0, &p);
		}
		if (r == CUDA_SUCCESS && !plain) {
			/* Launch attributes (priority, cluster shape, access policy...);
			 * refused for a device-updatable node: not a copy then. */
			what = "cuGraphKernelNodeCopyAttributes";
			r = cu->kernel_node_copy_attributes(*copy, node);
		}
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		if (!cu->memset_node_get_params || !cu->add_memset_node)
			goto unsupported;
		CUDA_MEMSET_NODE_PARAMS p;
		what = "cuGraphMemsetNodeGetParams";
		r = cu->memset_node_get_params(node, &p);
		if (r == CUDA_SUCCESS) {
			what = "cuGraphAddMemsetNode";
			r = cu->add_memset_node(copy, graph, NULL, 0, &p, *ctx);
		}
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		if (!cu->memcpy_node_get_params || !cu->add_memcpy_node)
			goto unsupported;
		CUDA_MEMCPY3D p;
		what = "cuGraphMemcpyNodeGetParams";
		r = cu->memcpy_node_get_params(node, &p);
		if (r == CUDA_SUCCESS) {
			what = "cuGraphAddMemcpyNode";
			r = cu->add_memcpy_node(copy, graph, NULL, 0, &p, *ctx);
		}
		break;
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
		if (!cu->add_empty_node)
			goto unsupported;
		what = "cuGraphAddEmptyNode";
		r = cu->add_empty_node(copy, graph, NULL, 0);
		break;
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
		bool rec = t == CU_GRAPH_NODE_TYPE_EVENT_RECORD;
		CUresult (*get)(CUgraphNode, CUevent *) =
			rec ? cu->event_record_node_get_event : cu->event_wait_node_get_event;
		CUresult (*add)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUevent) =
			rec ? cu->add_event_record_node : cu->add_event_wait_node;
		if (!get || !add)
			goto unsupported;
		CUevent ev = NULL;
		what = rec ? "cuGraphEventRecordNodeGetEvent" : "cuGraphEventWaitNodeGetEvent";
		r = get(node, &ev);
		if (r == CUDA_SUCCESS) {
			what = rec ? "cuGraphAddEventRecordNode" : "cuGraphAddEventWaitNode";
			r = add(copy, graph, NULL, 0, ev);
		}
		break;
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		if (!cu->host_node_get_params || !cu->add_host_node)
			goto unsupported;
		CUDA_HOST_NODE_PARAMS p;
		what = "cuGraphHostNodeGetParams";
		r = cu->host_node_get_params(node, &p);
		if (r == CUDA_SUCCESS) {
			what = "cuGraphAddHostNode";
			r = cu->add_host_node(copy, graph, NULL, 0, &p);
		}
		break;
	}
	case CU_GRAPH_NODE_TYPE_GRAPH: {
		if (!cu->child_graph_node_get_graph || !cu->add_child_graph_node)
			goto unsupported;
		CUgraph child = NULL;
		what = "cuGraphChildGraphNodeGetGraph";
		r = cu->child_graph_node_get_graph(node, &child);
		if (r == CUDA_SUCCESS) {
			what = "cuGraphAddChildGraphNode"; /* a clone of the child: refused if it
							    * holds a device-updatable node */
			r = cu->add_child_graph_node(copy, graph, NULL, 0, child);
		}
		break;
	}
	default:
		goto unsupported;
	}
	if (plain && t != CU_GRAPH_NODE_TYPE_KERNEL)
		goto unsupported; /* a producer is a kernel (record.c): never reached */
	if (r != CUDA_SUCCESS)
		return tg_fail(a, TOGGLE_ECUDA, "%s: %s", what, tg_cu_errstr(cu, r));
	return 0;
unsupported:
	return tg_fail(a, TOGGLE_ENOTSUP, "a node of type %d cannot be copied", (int)t);
}

/* The recorded graph's nodes, each with its copy's slot (sorted by handle),
 * the planner and (bare exec) the producers to drop, (full) the producers marked. */
static int bare_assemble_map(struct toggle_agent *a, struct tg_graph *g, bool full,
			     struct bare_map **out, CUgraphNode **order, size_t *n_out)
{
	size_t n = 0;
	*out = NULL;
	*order = NULL;
	CUresult r = a->cu.graph_get_nodes(g->graph, NULL, &n);
	if (r != CUDA_SUCCESS)
		return tg_fail(a, TOGGLE_ECUDA, "cuGraphGetNodes: %s", tg_cu_errstr(&a->cu, r));
	if (n > TG_BARE_MAX_NODES)
		return tg_fail(a, TOGGLE_ELIMIT, "%zu nodes (at most %u)", n, TG_BARE_MAX_NODES);
	CUgraphNode *v = calloc(n ? n : 1, sizeof(*v));
	struct bare_map *m = calloc(n ? n : 1, sizeof(*m));
	if (!v || !m) {
		free(v);
		free(m);
		return tg_fail(a, TOGGLE_ENOMEM, "out of memory");
	}
	size_t got = n;
	r = n ? a->cu.graph_get_nodes(g->graph, v, &got) : CUDA_SUCCESS;
	if (r != CUDA_SUCCESS || got != n) {
		free(v);
		free(m);
		return tg_fail(a, TOGGLE_ECUDA, "cuGraphGetNodes: %s",
			       r != CUDA_SUCCESS ? tg_cu_errstr(&a->cu, r) : "the count changed");
	}
	for (size_t i = 0; i < n; i++)
		m[i].orig = v[i];
	qsort(m, n, sizeof(*m), bare_map_cmp);
	for (size_t i = 1; i < n; i++)
		if (m[i].orig == m[i - 1].orig) {
			free(v);
			free(m);
			return tg_fail(a, TOGGLE_ECUDA, "cuGraphGetNodes: a node twice");
		}
	/* The producers and the planner (device mode): each must be a node of the graph. */
	for (uint32_t i = 0; i < g->n_nodes + (g->planner_node != NULL); i++) {
		CUgraphNode node = i < g->n_nodes ? g->nodes[i].node : g->planner_node;
		struct bare_map *p = bare_map_find(m, n, node);
		if (!p) {
			free(v);
			free(m);
			return tg_fail(a, TOGGLE_ECUDA, "a recorded %s is not a node of the graph",
				       i < g->n_nodes ? "producer" : "planner");
		}
		/* The same node recorded twice is refused at record (registry.c). */
		if (i < g->n_nodes && full)
			p->producer = true;
		else
			p->drop = true;
	}
	*out = m;
	*order = v;
	*n_out = n;
	return 0;
}

/*
 * Assemble g's graph without its planner and (bare) its producers or (full)
 * with them (device mode: plain, without the device-updatable attribute),
 * and instantiate it; device mode uploads it once.  Host modes' full exec
 * (keep, nodes) keeps the new graph and its producers' copies, in g->nodes'
 * order, as clone_build keeps the clone's.  Anything that fails leaves
 * nothing behind (the new graph and its exec are destroyed): no half-built
 * state.
 */
static int bare_assemble(struct toggle_agent *a, struct tg_graph *g, bool full, CUgraphExec *out,
			 CUgraph *keep, CUgraphNode **nodes)
{
	bool host = g->dev != TG_DEV_ACTIVE;
	struct bare_map *map = NULL;
	CUgraphNode *order = NULL;
	struct bare_edgelist l = {0};
	CUgraph graph = NULL;
	CUcontext ctx = NULL;
	bool have_ctx = false;
	size_t n = 0;
	CUresult r;
	*out = NULL;
	int rc = bare_assemble_map(a, g, full, &map, &order, &n);
	if (!rc && (r = tg_cu_graph_create(&a->cu, &graph)) != CUDA_SUCCESS) {
		graph = NULL;
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphCreate: %s", tg_cu_errstr(&a->cu, r));
	}
	/* The copies in the graph's own order (its launches' order where edges leave it free). */
	for (size_t i = 0; !rc && i < n; i++) {
		struct bare_map *m = bare_map_find(map, n, order[i]);
		CUgraphNodeType t;
		if (m->drop)
			continue;
		if ((r = a->cu.graph_node_get_type(m->orig, &t)) != CUDA_SUCCESS)
			rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphNodeGetType: %s",
				     tg_cu_errstr(&a->cu, r));
		else
			rc = bare_copy_node(a, graph, m->orig, t, m->producer && !host, &ctx,
					    &have_ctx, &m->copy);
	}
	for (size_t i = 0; !rc && i < n; i++) {
		struct bare_map *m = bare_map_find(map, n, order[i]);
		if (!m->drop)
			rc = bare_edges_into(a, map, n, m, (uint32_t)i + 1, &l);
	}
	if (!rc && l.n &&
	    (r = a->cu.graph_add_dependencies(graph, l.from, l.to, l.special ? l.data : NULL, l.n)) !=
		    CUDA_SUCCESS)
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphAddDependencies: %s", tg_cu_errstr(&a->cu, r));
	if (!rc && (r = a->cu.graph_instantiate(out, graph, 0)) != CUDA_SUCCESS) {
		*out = NULL;
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphInstantiateWithFlags: %s",
			     tg_cu_errstr(&a->cu, r));
	}
	/* Uploaded once, here, on the agent's own stream: its first launch pays no upload. */
	if (!rc && !host && (r = a->cu.graph_upload(*out, a->dev.setup)) == CUDA_SUCCESS)
		r = a->cu.stream_synchronize(a->dev.setup);
	if (!rc && !host && r != CUDA_SUCCESS)
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphUpload: %s", tg_cu_errstr(&a->cu, r));
	/* Host modes' full exec: its graph and producer copies are kept, as the
	 * clone's are (the node sets and the set exec's clone use them). */
	CUgraphNode *found = NULL;
	if (!rc && keep && !(found = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof(*found))))
		rc = tg_fail(a, TOGGLE_ENOMEM, "out of memory");
	for (uint32_t i = 0; !rc && found && i < g->n_nodes; i++)
		found[i] = bare_map_find(map, n, g->nodes[i].node)->copy;
	if (rc && *out)
		bare_destroy(a, out);
	if (!rc && keep) {
		*keep = graph;
		*nodes = found;
		graph = NULL;
	}
	if (graph && (r = a->cu.graph_destroy(graph)) != CUDA_SUCCESS) {
		/* the exec does not need it */
		a->anomalies.driver_errors++;
		if (!rc) {
			bare_destroy(a, out);
			rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphDestroy: %s", tg_cu_errstr(&a->cu, r));
		}
	}
	free(map);
	free(order);
	free(l.from);
	free(l.to);
	free(l.data);
	return rc;
}

/* Whether g gets a bare exec: with producers, agent and graph not opted out;
 * host-toggled (a clone), or toggled by its planner (assembled). */
static bool bare_wanted(const struct toggle_agent *a, const struct tg_graph *g)
{
	if (!a->bare_on || g->bare_off || !g->bound || g->exec_dead || g->gone || g->n_nodes == 0)
		return false;
	if (g->dev == TG_DEV_ACTIVE)
		return g->planner_node && tg_cu_assemble_ready(&a->cu);
	return g->n_devnodes == 0 && !g->planner_node;
}

/* Build one of g's second execs into x; a failure is counted, its reason kept. */
static void alt_build(struct toggle_agent *a, struct tg_graph *g, struct tg_bare *x)
{
	bool full = x == &g->full;
	CUgraphExec exec = NULL;
	CUgraph graph = NULL;
	CUgraphNode *nodes = NULL;
	uint8_t *state = NULL;
	int rc;
	if (full && g->dev == TG_DEV_ACTIVE && g->n_attrs) {
		uint32_t h = 0;
		for (uint32_t i = 0; i < g->n_nodes; i++)
			if (g->nodes[i].attrs) {
				h = g->nodes[i].hook;
				break;
			}
		rc = tg_fail(a, TOGGLE_ENOTSUP, "producer hook %u:%u may hold launch attributes of "
			     "its own, which the driver does not copy from a device-updatable node",
			     h / TOGGLE_MAX_LAYERS, h % TOGGLE_MAX_LAYERS);
	} else if (g->dev == TG_DEV_ACTIVE) {
		rc = bare_assemble(a, g, full, &exec, NULL, NULL);
	} else {
		/* Host modes: assembled unless clone_execs, else (or when the
		 * assembly fails: a node it cannot copy, say) a clone of the graph. */
		rc = 1;
		if (a->host_assemble) {
			rc = bare_assemble(a, g, full, &exec, full ? &graph : NULL,
					   full ? &nodes : NULL);
			if (rc)
				a->stats.assemble_fallbacks++;
			else
				a->stats.assembled_builds++;
		}
		if (rc)
			rc = bare_build(a, g, full, &exec, &graph, &nodes);
		/* Every producer of the clone is on, as captured; the first pick
		 * sets those its set turns off. */
		if (!rc && full && !(state = malloc(g->n_nodes ? g->n_nodes : 1))) {
			rc = tg_fail(a, TOGGLE_ENOMEM, "out of memory");
			bare_destroy(a, &exec);
			bare_graph_destroy(a, &graph);
			free(nodes);
			nodes = NULL;
		}
		if (!rc && full)
			memset(state, TG_NODE_ON, g->n_nodes);
	}
	x->failed = rc != 0;
	if (rc) {
		char why[sizeof(a->err)];
		memcpy(why, a->err, sizeof(why));
		tg_fail(a, 0, "graph %p: no %s exec, the main exec runs those steps: %.400s",
			(void *)g->graph, full ? "full" : "producer-free", why);
		if (full)
			a->stats.full_build_failures++;
		else
			a->stats.bare_build_failures++;
		return;
	}
	x->exec = exec;
	x->graph = graph;
	x->nodes = nodes;
	x->state = state;
	x->synced_valid = false;
	x->toggled = false;
	if (full)
		a->stats.full_builds++;
	else
		a->stats.bare_builds++;
}

/*
 * After a bind (or unbind): the old second execs go, new ones are built for
 * the new exec.  A failed build is not the bind's failure, nor an anomaly
 * (some graphs cannot be cloned: memory or conditional nodes): it is
 * counted in the stats, its reason kept in the last error, and the main
 * exec runs those steps.
 */
void tg_bare_bind(struct toggle_agent *a, struct tg_graph *g)
{
	tg_bare_drop(a, g);
	if (a->capture_depth == 0) {
		alt_unpark(a, &g->bare);
		alt_unpark(a, &g->full);
		alt_unpark(a, &g->setx);
		alt_unpark(a, &g->allx);
	}
	g->bare.failed = false;
	g->full.failed = false;
	if (!bare_wanted(a, g))
		return;
	tg_covered_words(g, &g->alt_wlo, &g->alt_whi);
	/* The full exec's reason is the one kept when both fail (its build is the last). */
	alt_build(a, g, &g->bare);
	if (a->full_on)
		alt_build(a, g, &g->full);
}

/* ---- host modes: the set exec ----------------------------------------------- */

enum setx_want { SETX_NO, SETX_LATER, SETX_NOW };

/* Whether g may get a set or all-on exec at all: a bound host-mode graph in
 * use, with a full exec whose graph and node handles they are made from. */
static bool alt_buildable(const struct tg_graph *g)
{
	return g->bound && !g->stale && !g->gone && !g->exec_dead && !g->late && !g->blocked &&
	       g->dev != TG_DEV_ACTIVE && g->full.exec && g->full.graph && g->full.nodes;
}

/* Whether g should get a set exec for the current set now: a host-mode graph
 * with a full exec (whose clone it is made from), at a set in between (all
 * off and all on have their execs, which disable nothing), not already built
 * for this set, nor failed for it; and launched since the set became current
 * (a graph the engine no longer replays gets none), else LATER: eager mode
 * names every bound graph at the step that changes the set, before its
 * launches, so one launched late still gets its exec. */
static enum setx_want setx_want(const struct toggle_agent *a, const struct tg_graph *g)
{
	if (!alt_buildable(g))
		return SETX_NO;
	/* All off and all on have their execs, which disable nothing. */
	if (bare_fits(a, g) || full_fits(a, g))
		return SETX_NO;
	if ((g->setx.exec || g->setx.failed) && setx_fits(a, g))
		return SETX_NO;
	return g->last_step < a->setx_step0 ? SETX_LATER : SETX_NOW;
}

/* The set exec: the full exec's clone without the producers the current set leaves off. */
static int setx_build(struct toggle_agent *a, struct tg_graph *g, CUgraphExec *out)
{
	return clone_build(a, g, g->full.graph, g->full.nodes, &a->current, false, out, NULL, NULL);
}

/* Build g's set exec for the current set, replacing the one it had; its next
 * pick (the next launch, or eager's apply) runs it.  A failure is counted and
 * kept in the last error; that set then runs on the full exec. */
static void setx_make(struct toggle_agent *a, struct tg_graph *g)
{
	CUgraphExec exec = NULL;
	int rc = setx_build(a, g, &exec);
	if (alt_now(g) == &g->setx)
		bare_stop(g); /* the old one, picked at an earlier set: closed, main until the pick */
	alt_drop(a, &g->setx);
	memset(&g->setx_set, 0, sizeof(g->setx_set));
	for (uint32_t w = g->alt_wlo; w < g->alt_whi; w++)
		g->setx_set.bits[w] = a->current.bits[w] & g->covered.bits[w];
	g->setx.failed = rc != 0;
	g->applied_version = 0; /* picked again: the set exec, or what ran before */
	if (rc) {
		char why[sizeof(a->err)];
		memcpy(why, a->err, sizeof(why));
		tg_fail(a, 0, "graph %p: no set exec, the full exec runs this set: %.400s",
			(void *)g->graph, why);
		a->stats.set_build_failures++;
		return;
	}
	g->setx.exec = exec;
	a->stats.set_builds++;
}

/* Whether g should get its all-on exec: queued by a pick that ran all on on
 * its full exec after a set in between had set it, and still so (allx_step
 * waits for a launch since). */
static bool allx_wanted(const struct toggle_agent *a, const struct tg_graph *g)
{
	return a->setx_on && alt_buildable(g) && g->full.toggled && !g->allx.exec &&
	       !g->allx.failed;
}

/* Build g's all-on exec: the full exec's graph instantiated again (its nodes as
 * built: node sets change an exec, never its graph).  A failure is counted and
 * kept in the last error; all on then runs on the full exec until a rebind. */
static void allx_make(struct toggle_agent *a, struct tg_graph *g)
{
	CUgraphExec exec = NULL;
	CUresult r = a->cu.graph_instantiate(&exec, g->full.graph, 0);
	g->applied_version = 0; /* picked again: the all-on exec at all on */
	if (r != CUDA_SUCCESS) {
		g->allx.failed = true;
		tg_fail(a, TOGGLE_ECUDA, "graph %p: no all-on exec, the full exec runs all on: "
			"cuGraphInstantiateWithFlags: %s", (void *)g->graph, tg_cu_errstr(&a->cu, r));
		a->stats.set_build_failures++;
		return;
	}
	g->allx.exec = exec;
	a->stats.set_builds++;
}

/* The next all-on exec wanted, looking at TG_SETX_LOOKS candidates at most;
 * true when one was built (the step's one build). */
static bool allx_step(struct toggle_agent *a)
{
	if (a->capture_depth) /* as the set execs: never during a capture */
		return false;
	uint32_t looks = a->allx_n < TG_SETX_LOOKS ? a->allx_n : TG_SETX_LOOKS;
	while (looks--) {
		uint32_t slot;
		struct tg_graph *g = ring_take(a, a->allx_queue, &a->allx_head, &a->allx_n, &slot);
		if (!g)
			continue;
		g->allx_queued = false;
		if (!allx_wanted(a, g))
			continue;
		if (g->last_step < g->allx_step0) {
			/* Named by eager's apply, not launched since: to the back, named
			 * at this step (a batch size the engine no longer replays costs
			 * nothing; one launched at this step gets it at the next). */
			allx_push(a, g);
			continue;
		}
		allx_make(a, g);
		return true;
	}
	return false;
}

void tg_setx_step(struct toggle_agent *a)
{
	/* All-on execs first, whatever the set: all on that alternates with
	 * other sets never holds, and its exec serves every all-on step after. */
	bool built = allx_step(a);
	if (a->version != a->setx_version) {
		/* A new set: the candidates go (the picks at this version name them
		 * again), the count of steps starts. */
		a->setx_version = a->version;
		a->setx_step0 = a->step;
		a->setx_steady = 0;
		a->setx_head = a->setx_n = 0;
		return;
	}
	if (a->setx_steady < TG_SETX_STEADY) {
		a->setx_steady++;
		return;
	}
	/* Graph objects are the application's and not thread-safe, and an exec is
	 * not destroyed inside a capture window: never during a capture; and one
	 * build a step. */
	if (a->capture_depth || built)
		return;
	/* The next candidate wanted now, looking at TG_SETX_LOOKS at most: the
	 * step's cost does not grow with the graphs bound.  One not launched yet
	 * at this set goes to the back: it is looked at again at a later step. */
	uint32_t looks = a->setx_n < TG_SETX_LOOKS ? a->setx_n : TG_SETX_LOOKS;
	while (looks--) {
		uint32_t slot;
		struct tg_graph *g = ring_take(a, a->setx_queue, &a->setx_head, &a->setx_n, &slot);
		enum setx_want w = g ? setx_want(a, g) : SETX_NO;
		if (w == SETX_NOW) {
			setx_make(a, g); /* one a step: a build costs about what a bind's does */
			return;
		}
		if (w == SETX_LATER)
			(void)setx_push(a, slot); /* room: one was just taken */
	}
}
