/*
 * bind.c - capture windows, binding, instantiating and the producer-free
 * exec's switch: the registry's entry points that reach over the records
 * (registry.c), producer regions (region.c), device mode (device.c) and the
 * producer-free exec (bare.c).  Above all four: none of them calls a
 * function here (replay.c, above, rebinds through tg_graph_bind_exec).
 */
#include <stdio.h>

#include "agent_impl.h"

/* ---- capture windows -------------------------------------------------------- */

int toggle_capture_begin(struct toggle_agent *a)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (a->capture_depth == UINT32_MAX)
		return tg_fail(a, TOGGLE_ELIMIT, "capture windows nested too deep");
	a->capture_depth++;
	return 0;
}

int toggle_capture_end(struct toggle_agent *a)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (a->capture_depth == 0)
		return tg_fail(a, TOGGLE_EINVAL, "toggle_capture_end without toggle_capture_begin");
	a->capture_depth--;
	if (a->n_regions)
		tg_region_capture_end(a); /* a region its capture ended with: that graph is late */
	return 0;
}

/* ---- binding ---------------------------------------------------------------- */

/*
 * Bind (or unbind) and reset per-exec state.  In a device-mode agent this
 * also decides how the graph runs and, in device mode, sets it up and
 * uploads the exec; a refused or failed device bind leaves it unbound.
 */
int tg_graph_bind_exec(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec)
{
	if (exec && a->n_regions)
		tg_region_ended(a, g->graph);
	if (exec && g->late) {
		a->anomalies.launch_unbound++;
		return tg_fail(a, TOGGLE_ECAPTURE,
			       "graph %p cannot be bound: %s; capture it again inside a capture window "
			       "(toggle_capture_begin/end), recording every producer", (void *)g->graph,
			       g->note);
	}
	if (exec && tg_life_foreign(a, g, exec)) {
		a->anomalies.launch_stale++;
		return tg_fail(a, TOGGLE_ESTALE,
			       "exec %p was instantiated from the graph that had handle %p before it "
			       "was destroyed: it is not an exec of this graph (capture again and "
			       "instantiate the new graph)", (void *)exec, (void *)g->graph);
	}
	/* The same exec bound again (a re-arm): its lifetime is tracked already. */
	bool same = exec && g->bound && exec == g->exec && !g->exec_dead;
	if (exec && g->exec_dead)
		g->uploaded_exec = NULL; /* the bound exec was destroyed: any new one is uploaded */
	unsigned eid = 0;
	bool has_eid = exec && a->cu.graph_exec_get_id &&
		       a->cu.graph_exec_get_id(exec, &eid) == CUDA_SUCCESS;
	if (exec && exec == g->uploaded_exec && has_eid && g->has_exec_id && eid != g->exec_id)
		g->uploaded_exec = NULL; /* a new exec behind the uploaded one's handle */
	g->has_exec_id = false;
	if (exec && a->dev.on) {
		int rc = tg_device_bind(a, g, exec);
		if (rc) {
			tg_graph_reset_exec(g, NULL);
			tg_life_unbind(a, g);
			tg_bare_drop(a, g);
			return rc;
		}
	}
	if (!exec)
		g->uploaded_exec = NULL;
	tg_graph_reset_exec(g, exec); /* NULL unbinds: launches fail closed until a bind */
	g->has_exec_id = has_eid;
	g->exec_id = eid;
	/* Before the producer-free exec's clone: the graph holds its new object then. */
	if (!exec)
		tg_life_unbind(a, g);
	else if (!same)
		tg_life_bind(a, g, exec);
	tg_bare_bind(a, g);
	a->stats.rebinds += exec != NULL;
	return 0;
}

int toggle_graph_bind(struct toggle_agent *a, CUgraph graph, CUgraphExec exec)
{
	if (!a)
		return TOGGLE_EINVAL;
	tg_registry_sweep(a);
	if (a->n_regions)
		tg_region_ended(a, graph);
	struct tg_graph *g = tg_graph_find(a, graph);
	if (g && tg_graph_related(g) && !g->gone && tg_graph_replaced(a, g))
		tg_graph_drop(a, g); /* a new graph behind a dead one's handle */
	if (g && g->gone && exec && exec != g->exec)
		g = NULL; /* the graph behind the handle is a stranger's */
	if (!g || !tg_graph_related(g))
		return tg_fail(a, TOGGLE_ENOENT,
			       "graph %p has no recorded producers (unrelated graphs need no bind)",
			       (void *)graph);
	if (g->stale)
		return tg_fail(a, TOGGLE_ESTALE, "graph %p was forgotten; capture it again",
			       (void *)graph);
	if (g->gone) {
		if (!exec) {
			tg_graph_clear(a, g, false); /* nothing of it is left to toggle */
			return 0;
		}
		return tg_fail(a, TOGGLE_ESTALE, "graph %p was destroyed while its exec %p is bound: "
			       "its producers can no longer be set (keep the graph alive while its "
			       "execs are toggled; capture it again)", (void *)graph, (void *)exec);
	}
	return tg_graph_bind_exec(a, g, exec); /* refuses a late graph */
}

int toggle_graph_instantiate(struct toggle_agent *a, CUgraph graph, CUgraphExec *exec)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (!exec)
		return tg_fail(a, TOGGLE_EINVAL, "instantiating graph %p: exec is NULL", (void *)graph);
	*exec = NULL;
	if (!a->cu.graph_instantiate)
		return tg_fail(a, TOGGLE_ENOTSUP, "the CUDA driver lacks cuGraphInstantiateWithFlags");
	tg_registry_sweep(a);
	if (a->n_regions)
		tg_region_ended(a, graph);
	struct tg_graph *g = tg_graph_find(a, graph);
	if (g && tg_graph_related(g) && !g->gone && tg_graph_replaced(a, g))
		tg_graph_drop(a, g); /* a new graph behind a dead one's handle */
	/* gone: the graph is destroyed (its exec lives on); the handle names a stranger's. */
	bool known = g && !g->stale && !g->gone && g->n_nodes;
	if (known && !g->late)
		tg_life_fresh(a, g); /* the exec made here gets an object of its own */
	CUresult r = a->cu.graph_instantiate(exec, graph, 0);
	if (r != CUDA_SUCCESS) {
		*exec = NULL;
		if (r == CUDA_ERROR_NOT_SUPPORTED && known && g->n_devnodes)
			return tg_fail(a, TOGGLE_ENOTSUP,
				       "graph %p holds device-updatable producers: the driver "
				       "instantiates such a graph once at a time (cuGraphInstantiate: "
				       "%s); destroy its exec first, or capture it again",
				       (void *)graph, tg_cu_errstr(&a->cu, r));
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "instantiating graph %p: %s", (void *)graph,
			       tg_cu_errstr(&a->cu, r));
	}
	/* The exec made here is new whatever its handle: an exec that had that
	 * handle is destroyed, though the driver may not have run its
	 * destructor yet (it does so after cudaGraphExecDestroy returns). */
	if (g && tg_life_exec_reused(g, *exec))
		tg_graph_drop(a, g); /* kept for that exec alone: nothing is left */
	if (!known)
		return 0;
	/* A new exec, whatever its address (an old one may have been freed): upload it. */
	g->uploaded_exec = NULL;
	return tg_graph_bind_exec(a, g, *exec);
}

/* ---- the producer-free exec ------------------------------------------------- */

int toggle_graph_set_bare(struct toggle_agent *a, CUgraph graph, bool on)
{
	if (!a)
		return TOGGLE_EINVAL;
	tg_registry_sweep(a);
	struct tg_graph *g = tg_graph_find(a, graph);
	if (!g || !tg_graph_related(g))
		return tg_fail(a, TOGGLE_ENOENT, "graph %p has no recorded producers (no bare exec "
			       "to decide about)", (void *)graph);
	if (g->stale || g->gone)
		return tg_fail(a, TOGGLE_ESTALE, "graph %p was %s; capture it again", (void *)graph,
			       g->stale ? "forgotten" : "destroyed while its exec is bound");
	bool changed = g->bare_off != !on;
	g->bare_off = !on;
	if (!g->bound)
		return 0; /* decided at the bind */
	if (changed) {
		/* Running a second exec now: back to the main one, whose nodes hold an older set. */
		tg_bare_leave(a, g);
		tg_bare_bind(a, g); /* drops the old one; builds one when on */
	}
	/* The next launch's slow path picks (a launch after a prepare at an unchanged set
	 * would run the main exec on the fast path: the prepare synced it). */
	if (on && (g->bare.exec || g->full.exec) && g->run == g->exec)
		g->applied_version = 0;
	return 0;
}
