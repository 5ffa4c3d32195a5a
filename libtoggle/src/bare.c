/*
 * bare.c - the producer-free ("bare") exec: per bound exec, a second exec of
 * the same graph with its producer nodes removed, launched at the steps whose
 * set enables none of the graph's hooks.  Disabled nodes are not free on the
 * GPU (docs/benchmarks.md); a graph without them replays at the floor.
 *
 * Built at bind (never in the background: graph objects are not thread-safe
 * and the application owns the graph): clone the graph, find each producer
 * in the clone, connect each of its dependencies to each of its dependents
 * (default edges: the strictest order, so nothing that followed a producer
 * can start earlier than before), destroy it, instantiate, destroy the clone.
 * A build that fails leaves the main exec alone: it runs every step, as
 * without this file.
 *
 * Picked only when the set changes (tg_bare_pick, from the slow path and
 * apply_all): g->run then names the exec the hot path launches, so switching
 * costs no driver call and the hot path no compare.  The main exec keeps its
 * node states (and g->synced) while the bare one runs; the usual sync brings
 * it to the current set when it is picked again.
 *
 * Not built for a graph its planner toggles (device mode): device-updatable
 * nodes cannot be destroyed (a driver rule, cuda.h), and such a graph has
 * one exec at a time.
 *
 * toggle_graph_set_bare(), the switch over it, is bind.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"

/* Most dependencies or dependents of one node the build accepts from the driver. */
#define TG_BARE_MAX_EDGES (1u << 20)

/* Whether the current set leaves g nothing to run. */
static bool bare_fits(const struct toggle_agent *a, const struct tg_graph *g)
{
	for (uint32_t w = g->bare.wlo; w < g->bare.whi; w++)
		if (a->current.bits[w] & g->covered.bits[w])
			return false;
	return true;
}

bool tg_bare_running(const struct tg_graph *g)
{
	return g->bare.exec && g->run == g->bare.exec;
}

uint64_t tg_bare_replays(const struct tg_graph *g)
{
	return g->bare.replays + (tg_bare_running(g) ? g->replays - g->bare.since : 0);
}

/* Close the count of launches of the bare exec now running, if any. */
static void bare_stop(struct tg_graph *g)
{
	if (tg_bare_running(g))
		g->bare.replays += g->replays - g->bare.since;
	g->run = g->exec;
}

bool tg_bare_pick(struct toggle_agent *a, struct tg_graph *g)
{
	bool bare = g->bare.exec && bare_fits(a, g);
	if (bare == tg_bare_running(g)) {
		/* no switch */
	} else if (bare) {
		g->bare.since = g->replays;
		a->stats.bare_switches++;
	} else {
		g->bare.replays += g->replays - g->bare.since;
		a->stats.bare_switches++;
	}
	g->run = bare ? g->bare.exec : g->exec;
	if (bare)
		g->applied_version = a->version; /* the bare exec holds every set it fits */
	return bare;
}

/*
 * The caller launches the main exec itself (toggle_graph_prepare): back to
 * it.  It holds the set it last synced (g->synced), not necessarily the
 * current one: out of date until the sync that follows.
 */
void tg_bare_leave(struct toggle_agent *a, struct tg_graph *g)
{
	if (!tg_bare_running(g))
		return;
	bare_stop(g);
	a->stats.bare_switches++;
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

/* Destroying an exec inside a capture window is left for later (bind, close). */
void tg_bare_drop(struct toggle_agent *a, struct tg_graph *g)
{
	bare_stop(g);
	if (!g->bare.exec)
		return;
	if (a->capture_depth == 0) {
		bare_destroy(a, &g->bare.exec);
		return;
	}
	bare_destroy(a, &g->bare.parked);
	g->bare.parked = g->bare.exec;
	g->bare.exec = NULL;
}

void tg_bare_free(struct toggle_agent *a, struct tg_graph *g)
{
	bare_stop(g);
	bare_destroy(a, &g->bare.exec);
	bare_destroy(a, &g->bare.parked);
}

/* The dependencies (deps) or dependents of node, in a new array. */
static int bare_edges(struct toggle_agent *a, CUgraphNode node, bool deps, CUgraphNode **out,
		      size_t *n)
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
	free(e);
	if (r != CUDA_SUCCESS || got > count) {
		free(v);
		return tg_fail(a, TOGGLE_ECUDA, "%s: %s", what,
			       r != CUDA_SUCCESS ? tg_cu_errstr(&a->cu, r) : "count grew");
	}
	*out = v;
	*n = got;
	return 0;
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

/* Clone g's graph, remove its producers, instantiate the clone. */
static int bare_build(struct toggle_agent *a, struct tg_graph *g, CUgraphExec *out)
{
	CUgraph clone = NULL;
	CUresult r = a->cu.graph_clone(&clone, g->graph);
	if (r != CUDA_SUCCESS)
		return tg_fail(a, TOGGLE_ECUDA, "cuGraphClone: %s", tg_cu_errstr(&a->cu, r));
	/* The clone holds a copy of the graph's lifetime object, and an exec of it
	 * would too: given back first, or the graph's death would wait for this
	 * exec (life.c). */
	int rc = tg_life_unclone(a, g, clone);
	for (uint32_t i = 0; !rc && i < g->n_nodes; i++) {
		CUgraphNode node = NULL;
		r = a->cu.graph_node_find_in_clone(&node, g->nodes[i].node, clone);
		if (r != CUDA_SUCCESS)
			rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphNodeFindInClone: %s",
				     tg_cu_errstr(&a->cu, r));
		else
			rc = bare_remove(a, clone, node);
	}
	if (!rc && (r = a->cu.graph_instantiate(out, clone, 0)) != CUDA_SUCCESS)
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphInstantiateWithFlags: %s",
			     tg_cu_errstr(&a->cu, r));
	r = a->cu.graph_destroy(clone); /* the exec does not need it */
	if (r != CUDA_SUCCESS && !rc) {
		bare_destroy(a, out);
		rc = tg_fail(a, TOGGLE_ECUDA, "cuGraphDestroy: %s", tg_cu_errstr(&a->cu, r));
	}
	return rc;
}

/* Whether g gets a bare exec: host-toggled, with producers, agent and graph not opted out. */
static bool bare_wanted(const struct toggle_agent *a, const struct tg_graph *g)
{
	return a->bare_on && !g->bare_off && g->bound && !g->exec_dead && !g->gone &&
	       g->n_nodes > 0 && g->dev != TG_DEV_ACTIVE && g->n_devnodes == 0 && !g->planner_node;
}

/*
 * After a bind (or unbind): the old bare exec goes, a new one is built for
 * the new exec.  A failed build is not the bind's failure, nor an anomaly
 * (some graphs cannot be cloned: memory or conditional nodes): it is
 * counted in the stats, its reason kept in the last error, and the main
 * exec runs every step.
 */
void tg_bare_bind(struct toggle_agent *a, struct tg_graph *g)
{
	tg_bare_drop(a, g);
	if (a->capture_depth == 0)
		bare_destroy(a, &g->bare.parked);
	g->bare.failed = false;
	if (!bare_wanted(a, g))
		return;
	g->bare.wlo = TOGGLE_MAX_HOOKS / 64;
	g->bare.whi = 0;
	for (uint32_t w = 0; w < TOGGLE_MAX_HOOKS / 64; w++) {
		if (!g->covered.bits[w])
			continue;
		g->bare.wlo = w < g->bare.wlo ? w : g->bare.wlo;
		g->bare.whi = w + 1;
	}
	CUgraphExec exec = NULL;
	int rc = bare_build(a, g, &exec);
	if (rc) {
		char why[sizeof(a->err)];
		memcpy(why, a->err, sizeof(why));
		tg_fail(a, 0, "graph %p: no producer-free exec, the main exec runs every step: %.400s",
			(void *)g->graph, why);
		a->stats.bare_build_failures++;
		g->bare.failed = true;
		return;
	}
	g->bare.exec = exec;
	a->stats.bare_builds++;
}
