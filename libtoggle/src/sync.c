/*
 * sync.c - node states (host modes): an exec's producer nodes brought to a
 * set with cuGraphExecNodeSetEnabled, setting only those whose cached state
 * differs.  Two execs keep states of their own: the graph's main exec (its
 * own nodes) and the full exec (bare.c: its clone's nodes), so running one
 * never leaves the other's cache wrong.  Below replay.c (the guard and the
 * launch) and bare.c (the pick); calls nothing of the agent but core.
 */
#include <stdlib.h>

#include "agent_impl.h"

/*
 * The exec a sync sets and what it knows of it: the main exec (the graph's
 * own nodes) or, in host modes, the full exec (its clone's nodes, bare.c).
 * Each keeps its own node states, so running one never leaves the other's
 * cache wrong.
 */
struct sync_target {
	CUgraphExec exec;
	CUgraphNode *nodes;       /* NULL: the graph's own (g->nodes[i].node) */
	uint8_t *state;
	struct toggle_set *synced;
	bool *synced_valid;
	const char *what;         /* for errors: "exec" or "full exec" */
};

static struct sync_target target_main(struct tg_graph *g)
{
	return (struct sync_target){g->exec, NULL, g->state, &g->synced, &g->synced_valid, "exec"};
}

static struct sync_target target_full(struct tg_graph *g)
{
	return (struct sync_target){g->full.exec, g->full.nodes, g->full.state, &g->full.synced,
				    &g->full.synced_valid, "full exec"};
}

/* Set node i of t's exec; on failure its state becomes unknown. */
static int sync_node(struct toggle_agent *a, struct tg_graph *g, const struct sync_target *t,
		     uint32_t i, uint8_t on)
{
	a->stats.node_set_calls++;
	CUgraphNode node = t->nodes ? t->nodes[i] : g->nodes[i].node;
	CUresult r = a->cu.graph_node_set_enabled(t->exec, node, on);
	if (r != CUDA_SUCCESS) {
		/* The driver may or may not have changed it: unknown, and the
		 * exec does not hold any version until a sync completes. */
		t->state[i] = TG_NODE_UNKNOWN;
		g->applied_version = 0;
		a->anomalies.driver_errors++;
		uint32_t h = g->nodes[i].hook;
		return tg_fail(a, TOGGLE_ECUDA,
			       "graph %p %s %p: cuGraphNodeSetEnabled(hook %u:%u, %s): %s",
			       (void *)g->graph, t->what, (void *)t->exec, h / TOGGLE_MAX_LAYERS,
			       h % TOGGLE_MAX_LAYERS, on ? "on" : "off", tg_cu_errstr(&a->cu, r));
	}
	t->state[i] = on;
	g->upload_pending |= !t->nodes && g->nodes[i].devnode != 0;
	return 0;
}

/* Every node whose cached state differs (after a bind: all of them). */
static int sync_all(struct toggle_agent *a, struct tg_graph *g, const struct sync_target *t,
		    const struct toggle_set *want)
{
	for (uint32_t i = 0; i < g->n_nodes; i++) {
		uint8_t on = tg_set_has(want, g->nodes[i].hook) ? TG_NODE_ON : TG_NODE_OFF;
		int rc = t->state[i] == on ? 0 : sync_node(a, g, t, i, on);
		if (rc)
			return rc;
	}
	return 0;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

/* Build g->by_hook once per capture; false when memory is short. */
static bool sync_index(struct tg_graph *g)
{
	if (g->by_hook)
		return true;
	uint64_t *keys = malloc((size_t)g->n_nodes * sizeof(*keys));
	uint32_t *idx = malloc((size_t)g->n_nodes * sizeof(*idx));
	if (!keys || !idx) {
		free(keys);
		free(idx);
		return false;
	}
	for (uint32_t i = 0; i < g->n_nodes; i++)
		keys[i] = (uint64_t)g->nodes[i].hook << 32 | i;
	qsort(keys, g->n_nodes, sizeof(*keys), cmp_u64);
	for (uint32_t i = 0; i < g->n_nodes; i++)
		idx[i] = (uint32_t)keys[i];
	free(keys);
	g->by_hook = idx;
	tg_covered_words(g, &g->wlo, &g->whi); /* the words this graph covers at all */
	return true;
}

/* The first position >= from in by_hook whose node has a hook >= hook:
 * galloping from the cursor, since changed hooks come in increasing order. */
static uint32_t sync_seek(const struct tg_graph *g, uint32_t from, uint32_t hook)
{
	uint32_t step = 1, lo = from, hi = from;
	while (hi < g->n_nodes && g->nodes[g->by_hook[hi]].hook < hook) {
		lo = hi + 1;
		hi += step;
		step *= 2;
	}
	if (hi > g->n_nodes)
		hi = g->n_nodes;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (g->nodes[g->by_hook[mid]].hook < hook)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Only the nodes of hooks that changed since the exec last held a whole set,
 * found through the hook-ordered index: O(words + changed * log) instead of
 * a pass over every node.  Returns 1 when so many changed that the plain
 * pass is cheaper (nothing done then).
 */
static int sync_changed(struct toggle_agent *a, struct tg_graph *g, const struct sync_target *t,
			const struct toggle_set *want)
{
	uint32_t changed = 0;
	for (uint32_t w = g->wlo; w < g->whi; w++)
		changed += (uint32_t)__builtin_popcountll((want->bits[w] ^ t->synced->bits[w]) &
							   g->covered.bits[w]);
	if (changed * 8u > g->hooks_covered)
		return 1;
	uint32_t pos = 0;
	for (uint32_t w = g->wlo; w < g->whi; w++) {
		uint64_t d = (want->bits[w] ^ t->synced->bits[w]) & g->covered.bits[w];
		while (d) {
			uint32_t hook = w * 64 + (uint32_t)__builtin_ctzll(d);
			d &= d - 1;
			uint8_t on = tg_set_has(want, hook) ? TG_NODE_ON : TG_NODE_OFF;
			for (pos = sync_seek(g, pos, hook);
			     pos < g->n_nodes && g->nodes[g->by_hook[pos]].hook == hook; pos++) {
				uint32_t i = g->by_hook[pos];
				int rc = t->state[i] == on ? 0 : sync_node(a, g, t, i, on);
				if (rc)
					return rc;
			}
		}
	}
	return 0;
}

/* Whether two sets agree on g's hooks. */
static bool synced_to_set(const struct tg_graph *g, const struct toggle_set *synced,
			  const struct toggle_set *want)
{
	for (uint32_t w = 0; w < TOGGLE_MAX_HOOKS / 64; w++)
		if ((want->bits[w] ^ synced->bits[w]) & g->covered.bits[w])
			return false;
	return true;
}

/* Whether every node of g's exec holds what want asks of its hook: the
 * exec was last synced to a set that agrees with want on g's hooks. */
bool tg_synced_to(const struct tg_graph *g, const struct toggle_set *want)
{
	return g->synced_valid && synced_to_set(g, &g->synced, want);
}

/* t's exec to want: the changed nodes, or all whose state differs. */
static int sync_to(struct toggle_agent *a, struct tg_graph *g, const struct sync_target *t,
		   const struct toggle_set *want)
{
	int rc = *t->synced_valid && sync_index(g) ? sync_changed(a, g, t, want) : 1;
	if (rc == 1)
		rc = sync_all(a, g, t, want);
	if (rc) {
		*t->synced_valid = false;
		return rc;
	}
	*t->synced = *want;
	*t->synced_valid = true;
	a->stats.syncs++;
	return 0;
}

/* g's main exec to the current set (replay.c's tg_graph_sync, after its guards). */
int tg_sync_main(struct toggle_agent *a, struct tg_graph *g)
{
	struct sync_target t = target_main(g);
	return sync_to(a, g, &t, &a->current);
}

/* Whether the full exec (host modes) holds the current set already. */
bool tg_full_holds(const struct toggle_agent *a, const struct tg_graph *g)
{
	return g->full.exec && g->full.nodes && g->full.synced_valid &&
	       synced_to_set(g, &g->full.synced, &a->current);
}

/*
 * Host modes: the full exec to the current set (tg_bare_pick, before it runs a
 * set in between or all on).  Its failure leaves the full exec's states
 * unknown (the next pick sets them all); the caller refuses the launch.
 */
int tg_full_sync(struct toggle_agent *a, struct tg_graph *g)
{
	struct sync_target t = target_full(g);
	if (!t.exec || !t.nodes)
		return tg_fail(a, TOGGLE_EINVAL, "graph %p: no full exec to set", (void *)g->graph);
	if (tg_full_holds(a, g))
		return 0;
	return sync_to(a, g, &t, &a->current);
}

