/*
 * registry.c - which producer node of which graph serves which hook, which
 * exec each graph is bound to, and the status views of all of it.  Binding
 * itself, which reaches over regions and device mode, is bind.c's; this
 * file calls only the producer-free exec (bare.c), lifetime objects
 * (life.c) and core.
 *
 * Graphs are found by handle through a small open-addressing map, so the
 * replay path costs one hash probe.  Records are never removed while the
 * agent lives: a forgotten graph keeps a "stale" record so that its later
 * launches fail closed instead of passing as unrelated.  A graph into whose
 * capture a producer was launched that could not be recorded is "late" and
 * fails closed too.  Handles are only keys: where a launch or bind would be
 * refused or rebound, the graph behind the handle is checked to still be
 * the one recorded (tg_graph_replaced), so that a new graph that reuses a
 * dead one's handle is not blocked; the stale record is then emptied.
 * Where the driver has user objects, it says itself when a recorded graph
 * or its bound exec is destroyed (life.c), and every slow path acts on it
 * (tg_registry_sweep).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"


int tg_registry_init(struct toggle_agent *a)
{
	a->graphs = calloc(TOGGLE_MAX_GRAPHS, sizeof(*a->graphs));
	return a->graphs ? 0 : TOGGLE_ENOMEM;
}

static void graph_free(struct tg_graph *g)
{
	tg_life_free(g);
	free(g->nodes);
	free(g->state);
	free(g->by_hook);
	free(g->shadow);
	free(g);
}

void tg_registry_free(struct toggle_agent *a)
{
	for (size_t i = 0; i < a->n_graphs; i++) {
		tg_bare_free(a, a->graphs[i]);
		graph_free(a->graphs[i]);
	}
	free(a->graphs);
	a->graphs = NULL;
	a->n_graphs = 0;
}

static void map_insert(struct toggle_agent *a, struct tg_graph *g)
{
	size_t i = tg_map_hash(g->graph) & TG_MAP_MASK;
	while (a->map[i])
		i = (i + 1) & TG_MAP_MASK;
	a->map[i] = g;
}

static struct tg_graph *graph_new(struct toggle_agent *a, CUgraph graph)
{
	if (a->n_graphs >= TOGGLE_MAX_GRAPHS)
		return NULL;
	struct tg_graph *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->graph = graph;
	g->last_step = -1;
	g->run_slot = &g->last_stream;
	g->slot = (uint32_t)a->n_graphs;
	a->graphs[a->n_graphs++] = g;
	map_insert(a, g);
	return g;
}

/*
 * Forget everything recorded for g (a new capture reuses its handle); its
 * replays stay counted in the agent's launches.  Its device resources stay
 * with the record: this may run during a capture, when memory cannot be
 * freed, and the next device setup reuses them.  So do the foreign exec
 * (life.c) and, with keep_life (forget), the graph's lifetime object.
 */
void tg_graph_clear(struct toggle_agent *a, struct tg_graph *g, bool keep_life)
{
	a->launches_retired += g->replays;
	tg_bare_drop(a, g);
	tg_life_clear(a, g, keep_life);
	free(g->nodes);
	free(g->state);
	free(g->by_hook);
	struct tg_graph keep = *g;
	memset(g, 0, sizeof(*g));
	g->graph = keep.graph;
	g->slot = keep.slot;
	g->last_step = -1;
	g->run_slot = &g->last_stream;
	g->dev_mem = keep.dev_mem;
	g->dev_mem_size = keep.dev_mem_size;
	g->shadow = keep.shadow;
	g->cap_words = keep.cap_words;
	g->epoch = keep.epoch;
	g->join = keep.join;
	/* Second execs dropped inside a capture are parked, not destroyed (bare.c):
	 * every one, with the graph it was built from, is kept for the next bind
	 * or close to destroy. */
	g->bare.parked = keep.bare.parked;
	g->bare.parked_graph = keep.bare.parked_graph;
	g->full.parked = keep.full.parked;
	g->full.parked_graph = keep.full.parked_graph;
	g->setx.parked = keep.setx.parked;
	g->setx.parked_graph = keep.setx.parked_graph;
	g->allx.parked = keep.allx.parked;
	g->allx.parked_graph = keep.allx.parked_graph;
	g->life = keep.life; /* NULL unless keep_life */
	g->foreign = keep.foreign;
	memcpy(g->foreign_life, keep.foreign_life, sizeof(g->foreign_life));
	g->n_foreign = keep.n_foreign;
}

void tg_graph_reset_exec(struct tg_graph *g, CUgraphExec exec)
{
	g->exec = exec;
	g->bound = exec != NULL;
	g->applied_version = 0;
	g->prep_unordered = false; /* the new exec's first sync writes every word */
	g->prep_version = 0;
	g->last_step = -1;
	memset(g->state, TG_NODE_UNKNOWN, g->n_nodes);
	g->synced_valid = false;
}

/* Room for `more` nodes after those recorded; changes no recorded state. */
static int graph_reserve(struct tg_graph *g, size_t more)
{
	if (more > TOGGLE_MAX_NODES - g->n_nodes)
		return TOGGLE_ELIMIT;
	if (g->n_nodes + more <= g->cap_nodes)
		return 0;
	uint32_t cap = g->cap_nodes ? g->cap_nodes : 64;
	while (cap < g->n_nodes + more)
		cap *= 2;
	if (cap > TOGGLE_MAX_NODES)
		cap = TOGGLE_MAX_NODES;
	struct tg_node *nodes = realloc(g->nodes, cap * sizeof(*nodes));
	if (!nodes)
		return TOGGLE_ENOMEM;
	g->nodes = nodes;
	uint8_t *state = realloc(g->state, cap);
	if (!state)
		return TOGGLE_ENOMEM;
	g->state = state;
	g->cap_nodes = cap;
	return 0;
}

static int graph_add_node(struct tg_graph *g, CUgraphNode node, uint32_t hook, uint64_t devnode,
			  bool attrs)
{
	int rc = graph_reserve(g, 1);
	if (rc)
		return rc;
	g->nodes[g->n_nodes] =
		(struct tg_node){.node = node, .hook = hook, .devnode = devnode, .attrs = attrs};
	if (g->n_ident < TG_IDENT_NODES)
		g->ident[g->n_ident++] = node;
	g->state[g->n_nodes] = TG_NODE_UNKNOWN;
	free(g->by_hook); /* the index no longer covers every node */
	g->by_hook = NULL;
	g->synced_valid = false;
	g->n_nodes++;
	g->n_devnodes += devnode != 0;
	g->n_attrs += attrs;
	if (!tg_set_has(&g->covered, hook)) {
		g->covered.bits[hook / 64] |= 1ull << (hook % 64);
		g->hooks_covered++;
	}
	/* A node added after binding is in an unknown state: force a sync, and
	 * decide device mode again (the next launch rebinds). */
	g->applied_version = 0;
	g->prep_version = 0;
	if (g->dev != TG_DEV_UNDECIDED) {
		g->dev = TG_DEV_UNDECIDED;
		g->dev_setup = false;
		g->exec = NULL;
	}
	return 0;
}

/* The node the last launch into a capturing stream added, and its graph. */
static int record_find_node(struct toggle_agent *a, CUstream stream, struct toggle_hook hook,
			    CUgraph *graph, CUgraphNode *node, uint64_t *capture_id)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	const CUgraphNode *deps = NULL;
	size_t ndeps = 0;
	CUresult r = a->cu.stream_get_capture_info(stream, &st, &id, graph, &deps, NULL, &ndeps);
	if (r != CUDA_SUCCESS) {
		*graph = NULL; /* not named: a failed call's outputs mean nothing */
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "recording hook %u:%u: cuStreamGetCaptureInfo: %s",
			       hook.type, hook.layer, tg_cu_errstr(&a->cu, r));
	}
	if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
		*graph = NULL; /* undefined when not capturing */
		a->anomalies.record_not_capturing++;
		return tg_fail(a, TOGGLE_ECAPTURE, "recording hook %u:%u: stream %p is not capturing",
			       hook.type, hook.layer, (void *)stream);
	}
	if (ndeps != 1 || !deps) {
		a->anomalies.record_not_kernel++;
		return tg_fail(a, TOGGLE_ENOTKERNEL,
			       "recording hook %u:%u: the capture ends in %zu nodes, not in the one "
			       "producer launch", hook.type, hook.layer, ndeps);
	}
	*node = deps[0];
	*capture_id = id;
	CUgraphNodeType type;
	r = a->cu.graph_node_get_type(*node, &type);
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "recording hook %u:%u: cuGraphNodeGetType: %s",
			       hook.type, hook.layer, tg_cu_errstr(&a->cu, r));
	}
	if (type != CU_GRAPH_NODE_TYPE_KERNEL) {
		a->anomalies.record_not_kernel++;
		return tg_fail(a, TOGGLE_ENOTKERNEL,
			       "recording hook %u:%u: node %p of graph %p is of type %d, not a kernel",
			       hook.type, hook.layer, (void *)*node, (void *)*graph, (int)type);
	}
	return 0;
}

int toggle_record_producer(struct toggle_agent *a, CUstream stream, struct toggle_hook hook)
{
	if (!a)
		return TOGGLE_EINVAL;
	return tg_record(a, stream, hook, 0, true);
}

/* Find or make the record of the graph a capture is building (a reused handle: cleared). */
struct tg_graph *tg_graph_for_capture(struct toggle_agent *a, CUgraph graph, uint64_t id)
{
	tg_registry_sweep(a);
	struct tg_graph *g = tg_graph_find(a, graph);
	bool fresh = !g;
	if (!g && !(g = graph_new(a, graph)))
		return NULL;
	if (fresh || g->stale || g->capture_id != id) {
		/* A forgotten or destroyed graph's handle reused by a new capture.  Its
		 * bound exec may outlive it: kept aside, never bound to this graph. */
		if (!fresh && g->capture_id != id)
			tg_life_orphan(a, g);
		tg_graph_clear(a, g, false);
		g->capture_id = id;
		unsigned gid = 0;
		g->has_graph_id = a->cu.graph_get_id && a->cu.graph_get_id(graph, &gid) == CUDA_SUCCESS;
		g->graph_id = gid;
		tg_life_capture(a, g); /* the driver tells when this graph is destroyed */
	}
	return g;
}

void tg_graph_mark_late(struct toggle_agent *a, CUgraph graph, uint64_t id, const char *note,
			const CUgraphNode *nodes, size_t n)
{
	struct tg_graph *g = tg_graph_for_capture(a, graph, id);
	if (!g)
		return; /* no room for a record: the refusal and its anomaly say so */
	if (!g->late)
		snprintf(g->note, sizeof(g->note), "%s", note);
	g->late = true;
	/* Nodes of this capture: a new graph behind the handle is recognised by their absence. */
	for (size_t i = 0; i < n && g->n_ident < TG_IDENT_NODES; i++)
		if (nodes[i])
			g->ident[g->n_ident++] = nodes[i];
}

/*
 * A record was refused on a stream that may be capturing: the producer the
 * caller launched is in that capture's graph, unrecorded, and would run
 * whatever the set.  Mark the graph late so that it fails closed until it
 * is captured again.  graph NULL: ask the stream (the refusal came before,
 * or the query that would have named the graph failed).
 * Leaves the refusal's error text alone.
 */
static void record_mark_late(struct toggle_agent *a, CUstream stream, CUgraph graph, uint64_t id,
			     struct toggle_hook hook, int why)
{
	CUgraphNode last = NULL;
	if (!graph) {
		CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
		cuuint64_t cid = 0;
		const CUgraphNode *deps = NULL;
		size_t ndeps = 0;
		if (a->cu.stream_get_capture_info(stream, &st, &cid, &graph, &deps, NULL, &ndeps) !=
			    CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_ACTIVE || !graph)
			return;
		id = cid;
		last = ndeps == 1 && deps ? deps[0] : NULL;
	}
	char note[TG_NOTE_LEN];
	snprintf(note, sizeof(note),
		 "producer hook %u:%u was launched into its capture but not recorded (%s)",
		 hook.type, hook.layer, toggle_strerror(why));
	tg_graph_mark_late(a, graph, id, note, &last, 1);
}

void tg_record_refused(struct toggle_agent *a, CUstream stream, struct toggle_hook hook, int why)
{
	record_mark_late(a, stream, NULL, 0, hook, why);
}

void tg_record_refused_in(struct toggle_agent *a, CUgraph graph, uint64_t id,
			  struct toggle_hook hook, int why)
{
	if (graph)
		record_mark_late(a, NULL, graph, id, hook, why);
}

int tg_record(struct toggle_agent *a, CUstream stream, struct toggle_hook hook, uint64_t devnode,
	      bool attrs)
{
	int rc;
	if (hook.type >= a->catalog.n_types || hook.layer >= a->catalog.n_layers) {
		rc = tg_fail(a, TOGGLE_ERANGE, "hook %u:%u outside the catalog (%u types, %u layers)",
			     hook.type, hook.layer, a->catalog.n_types, a->catalog.n_layers);
		record_mark_late(a, stream, NULL, 0, hook, rc);
		return rc;
	}
	if (a->capture_depth == 0) {
		a->anomalies.record_outside_window++;
		rc = tg_fail(a, TOGGLE_ECAPTURE, "recording hook %u:%u: no capture window is open",
			     hook.type, hook.layer);
		record_mark_late(a, stream, NULL, 0, hook, rc);
		return rc;
	}
	CUgraph graph = NULL;
	CUgraphNode node = NULL;
	uint64_t id = 0;
	rc = record_find_node(a, stream, hook, &graph, &node, &id);
	if (rc) {
		/* The capture named its graph unless the query failed or none was active;
		 * NULL asks the stream again (a failed query may not fail twice). */
		record_mark_late(a, stream, graph, id, hook, rc);
		return rc;
	}
	struct tg_graph *g = tg_graph_for_capture(a, graph, id);
	if (!g)
		return tg_fail(a, a->n_graphs >= TOGGLE_MAX_GRAPHS ? TOGGLE_ELIMIT : TOGGLE_ENOMEM,
			       "recording hook %u:%u: cannot add graph %p (%zu graphs)", hook.type,
			       hook.layer, (void *)graph, a->n_graphs);
	if ((g->n_nodes && g->nodes[g->n_nodes - 1].node == node) || node == g->planner_node)
		return tg_fail(a, TOGGLE_EINVAL, "hook %u:%u: node %p of graph %p is already recorded",
			       hook.type, hook.layer, (void *)node, (void *)graph);
	rc = graph_add_node(g, node, tg_hook_index(hook), devnode, attrs);
	if (rc) {
		record_mark_late(a, stream, graph, id, hook, rc);
		return tg_fail(a, rc, "recording hook %u:%u into graph %p: %s", hook.type, hook.layer,
			       (void *)graph, toggle_strerror(rc));
	}
	return 0;
}

static int node_cmp(const void *x, const void *y)
{
	uintptr_t a = (uintptr_t)*(const CUgraphNode *)x, b = (uintptr_t)*(const CUgraphNode *)y;
	return a < b ? -1 : a > b;
}

int tg_record_nodes(struct toggle_agent *a, CUgraph graph, uint64_t id, const CUgraphNode *nodes,
		    size_t n, struct toggle_hook hook)
{
	struct tg_graph *g = tg_graph_for_capture(a, graph, id);
	if (!g)
		return tg_fail(a, a->n_graphs >= TOGGLE_MAX_GRAPHS ? TOGGLE_ELIMIT : TOGGLE_ENOMEM,
			       "recording hook %u:%u: cannot add graph %p (%zu graphs)", hook.type,
			       hook.layer, (void *)graph, a->n_graphs);
	/* Refuse before changing anything: a node recorded already, or no room. */
	CUgraphNode *sorted = malloc((n ? n : 1) * sizeof(*sorted));
	if (!sorted)
		return tg_fail(a, TOGGLE_ENOMEM, "recording hook %u:%u: out of memory", hook.type,
			       hook.layer);
	memcpy(sorted, nodes, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), node_cmp);
	CUgraphNode dup = NULL;
	for (size_t i = 0; i + 1 < n && !dup; i++)
		if (sorted[i] == sorted[i + 1])
			dup = sorted[i];
	for (uint32_t i = 0; i <= g->n_nodes && !dup; i++) {
		CUgraphNode have = i < g->n_nodes ? g->nodes[i].node : g->planner_node;
		if (have && bsearch(&have, sorted, n, sizeof(*sorted), node_cmp))
			dup = have;
	}
	free(sorted);
	if (dup)
		return tg_fail(a, TOGGLE_EINVAL, "hook %u:%u: node %p of graph %p is already recorded "
			       "(as a producer or the planner)", hook.type, hook.layer, (void *)dup,
			       (void *)graph);
	int rc = graph_reserve(g, n);
	if (rc)
		return tg_fail(a, rc, "recording hook %u:%u into graph %p: %zu more nodes: %s",
			       hook.type, hook.layer, (void *)graph, n, toggle_strerror(rc));
	for (size_t i = 0; i < n; i++) {
		rc = graph_add_node(g, nodes[i], tg_hook_index(hook), 0, true);
		if (rc) /* cannot happen: room was reserved */
			return tg_fail(a, rc, "recording hook %u:%u into graph %p: %s", hook.type,
				       hook.layer, (void *)graph, toggle_strerror(rc));
	}
	return 0;
}

int toggle_graph_forget(struct toggle_agent *a, CUgraph graph)
{
	if (!a)
		return TOGGLE_EINVAL;
	tg_registry_sweep(a);
	struct tg_graph *g = tg_graph_find(a, graph);
	if (!g || g->stale)
		return tg_fail(a, TOGGLE_ENOENT, "graph %p is not known to this agent", (void *)graph);
	/* The identity stays, so that a new graph behind this handle is recognised:
	 * the graph's lifetime object (its destructor drops the record), else ids
	 * and nodes. */
	struct tg_graph keep = *g;
	tg_graph_clear(a, g, true);
	g->capture_id = keep.capture_id;
	g->graph_id = keep.graph_id;
	g->has_graph_id = keep.has_graph_id;
	memcpy(g->ident, keep.ident, sizeof(g->ident));
	g->n_ident = keep.n_ident;
	g->stale = true;
	return 0;
}

/* ---- identity --------------------------------------------------------------- */

static int cmp_node(const void *x, const void *y)
{
	uintptr_t a = (uintptr_t)*(const CUgraphNode *)x, b = (uintptr_t)*(const CUgraphNode *)y;
	return (a > b) - (a < b);
}

/* Graphs with more nodes than this are not listed: the record is kept (fail closed). */
#define TG_IDENT_MAX_LIST (1u << 22)

/* Whether every node kept in ident is still a node of g's graph: 1 yes, 0 no, -1 cannot tell. */
static int graph_holds_ident(struct toggle_agent *a, const struct tg_graph *g)
{
	size_t n = 0;
	if (!g->n_ident || !a->cu.graph_get_nodes ||
	    a->cu.graph_get_nodes(g->graph, NULL, &n) != CUDA_SUCCESS || n > TG_IDENT_MAX_LIST)
		return -1;
	if (n == 0)
		return 0; /* an empty graph holds none of the recorded nodes */
	CUgraphNode *v = malloc(n * sizeof(*v));
	if (!v)
		return -1;
	int holds = -1;
	if (a->cu.graph_get_nodes(g->graph, v, &n) == CUDA_SUCCESS) {
		qsort(v, n, sizeof(*v), cmp_node);
		holds = 1;
		for (uint32_t i = 0; i < g->n_ident && holds; i++)
			holds = bsearch(&g->ident[i], v, n, sizeof(*v), cmp_node) != NULL;
	}
	free(v);
	return holds;
}

/*
 * Slow paths only (a launch or bind that would be refused or rebound, a
 * sync that failed).  First what the driver said: the graph's lifetime
 * object destroyed (life.c) means the graph is, and then nothing goes to
 * the driver with the handle.  Then, with cuGraphGetId (CUDA 13.1+), the id
 * recorded at capture: a changed id alone means a new graph (ids are never
 * reused), an unchanged one the same graph.  Without ids, the recorded
 * nodes (up to TG_IDENT_NODES) must still be nodes of the graph
 * (cuGraphGetNodes: only the live handle the caller passed goes to the
 * driver, never a recorded node that may be dead): that check answers
 * "same" wrongly when the new graph got the dead one's node handles too
 * (the common case on the H200), which is why the lifetime object comes
 * first; it stays for what the object cannot tell (no user objects, or a
 * destructor the driver has not run yet).  When it cannot tell, the answer
 * is no: the record stays, and fails closed.
 */
bool tg_graph_replaced(struct toggle_agent *a, const struct tg_graph *g)
{
	if (g->gone || tg_life_graph_dead(g))
		return true;
	if (g->has_graph_id && a->cu.graph_get_id) {
		unsigned id = 0;
		if (a->cu.graph_get_id(g->graph, &id) == CUDA_SUCCESS)
			return id != g->graph_id;
	}
	return graph_holds_ident(a, g) == 0;
}

/* The driver said the bound exec is destroyed, or (CUDA 13.1+) a new id is behind its handle. */
bool tg_exec_replaced(struct toggle_agent *a, const struct tg_graph *g)
{
	if (g->exec_dead)
		return true; /* never ask the driver about a handle that may be dead */
	unsigned id = 0;
	return g->has_exec_id && g->exec && a->cu.graph_exec_get_id &&
	       a->cu.graph_exec_get_id(g->exec, &id) == CUDA_SUCCESS && id != g->exec_id;
}

/*
 * The handle names another graph now.  The record goes (passes as
 * unrelated), unless its bound exec may outlive the graph (the driver keeps
 * an exec whose graph is destroyed): then it stays for that exec alone
 * (gone): its launches are ours (refused in host modes once the set changes,
 * its producers can no longer be set), any other exec is a stranger's.
 */
void tg_graph_drop(struct toggle_agent *a, struct tg_graph *g)
{
	if (a->life && g->bound && g->exec && !g->exec_dead && !g->stale) {
		if (!g->gone)
			snprintf(g->note, sizeof(g->note), "graph destroyed while its exec %p is bound: "
				 "only that exec is toggled (device mode) or run at its set",
				 (void *)g->exec);
		g->gone = true;
		return;
	}
	tg_graph_clear(a, g, false); /* no nodes, not stale, not late: passes as unrelated */
}

/* ---- the driver's word ---------------------------------------------------- */

/*
 * What the driver said about g since the last look (life.c).  The bound exec
 * destroyed (against the documented rule, or after its graph): its node
 * states, upload and producer-free exec go, and launches rebind (with the
 * exec they pass; never this one, whose handle may be dead).  The graph
 * destroyed: the record of a bound graph goes (passes as unrelated), or,
 * while its exec may live, stays for that exec alone (gone).
 */
static void graph_look(struct toggle_agent *a, struct tg_graph *g)
{
	if (tg_life_look(g)) {
		g->exec_dead = true;
		g->applied_version = 0; /* off the fast path: its next launch rebinds */
		g->prep_version = 0;
		g->prep_unordered = false;
		g->uploaded_exec = NULL;
		g->last_stream = NULL;
		tg_bare_drop(a, g); /* built for that exec */
		if (g->n_nodes)
			memset(g->state, TG_NODE_UNKNOWN, g->n_nodes);
		g->synced_valid = false;
	}
	/* A record no exec of which is bound is never toggled: it goes when its
	 * handle is next used (tg_graph_replaced asks the object first), and
	 * lists as it was until then (a forgotten graph: stale). */
	if ((g->bound && tg_life_graph_dead(g)) || (g->gone && g->exec_dead))
		tg_graph_drop(a, g);
}

void tg_registry_sweep(struct toggle_agent *a)
{
	if (!tg_life_take_deaths(a))
		return;
	for (size_t i = 0; i < a->n_graphs; i++)
		graph_look(a, a->graphs[i]);
	tg_fast_update(a);
}

/* ---- status ------------------------------------------------------------- */

static void graph_status(const struct toggle_agent *a, const struct tg_graph *g,
			 struct toggle_graph_status *out)
{
	bool bound = g->bound && !g->exec_dead; /* a destroyed exec is not bound */
	*out = (struct toggle_graph_status){
		.graph = g->graph,
		.exec = bound ? g->exec : NULL,
		.nodes = g->n_nodes,
		.hooks_covered = g->hooks_covered,
		.applied_version = tg_graph_held_version(g),
		.replays = g->replays,
		.last_step = g->last_step,
		.bound = bound,
		.stale = g->stale,
		.mode = g->dev == TG_DEV_ACTIVE ? TOGGLE_MODE_DEVICE
			: a->mode == TOGGLE_MODE_DEVICE ? TOGGLE_MODE_LAZY : a->mode,
		.device_fallback = g->dev == TG_DEV_FALLBACK,
		.uploaded = g->dev == TG_DEV_ACTIVE && bound && g->uploaded_exec == g->exec,
		.tainted_launches = g->tainted,
		.tainted_step = g->tainted ? g->tainted_step : -1,
		.tainted = g->unclean,
		.blocked = g->blocked,
		.bare_exec = g->bare.exec != NULL,
		.bare_running = tg_bare_running(g),
		.bare_replays = tg_bare_replays(g),
		.full_exec = g->full.exec != NULL,
		.full_running = tg_full_running(g),
		.full_replays = tg_full_replays(g),
		.set_exec = g->setx.exec != NULL || g->allx.exec != NULL,
		.set_running = tg_setx_running(g),
		.set_replays = tg_alt_replays(g, &g->setx) + tg_alt_replays(g, &g->allx),
	};
	memcpy(out->note, g->note, sizeof(out->note));
}

size_t toggle_graph_count(const struct toggle_agent *a)
{
	return a ? a->n_graphs : 0;
}

size_t toggle_graph_list(const struct toggle_agent *a, struct toggle_graph_status *out, size_t cap)
{
	if (!a)
		return 0;
	for (size_t i = 0; out && i < a->n_graphs && i < cap; i++)
		graph_status(a, a->graphs[i], &out[i]);
	return a->n_graphs;
}

int toggle_graph_status(const struct toggle_agent *a, CUgraph graph, struct toggle_graph_status *out)
{
	if (!a || !out)
		return TOGGLE_EINVAL;
	const struct tg_graph *g = tg_graph_find(a, graph);
	if (!g)
		return TOGGLE_ENOENT;
	graph_status(a, g, out);
	return 0;
}

int toggle_graph_hooks(const struct toggle_agent *a, CUgraph graph, struct toggle_set *out)
{
	if (!a || !out)
		return TOGGLE_EINVAL;
	const struct tg_graph *g = tg_graph_find(a, graph);
	if (!g)
		return TOGGLE_ENOENT;
	*out = g->covered;
	return 0;
}

void toggle_registry_check(const struct toggle_agent *a, struct toggle_registry_check *out)
{
	if (!a || !out) {
		if (out)
			*out = (struct toggle_registry_check){0};
		return;
	}
	struct toggle_set all, common, first;
	toggle_set_fill(&all, &a->catalog);
	common = all;
	bool have_first = false;
	*out = (struct toggle_registry_check){.complete = true, .uniform = true};
	for (size_t i = 0; i < a->n_graphs; i++) {
		const struct tg_graph *g = a->graphs[i];
		if (g->stale || g->n_nodes == 0) /* a planner alone makes no graph with producers */
			continue;
		out->graphs++;
		out->unbound += !g->bound || g->exec_dead;
		if (!toggle_set_equal(&g->covered, &all))
			out->complete = false;
		if (!have_first) {
			first = g->covered;
			have_first = true;
		} else if (!toggle_set_equal(&g->covered, &first)) {
			out->uniform = false;
		}
		for (size_t w = 0; w < TOGGLE_MAX_HOOKS / 64; w++)
			common.bits[w] &= g->covered.bits[w];
	}
	out->hooks_uncovered = out->graphs ? (uint32_t)(toggle_set_count(&all) - toggle_set_count(&common)) : 0;
	if (!out->graphs)
		out->complete = false;
}
