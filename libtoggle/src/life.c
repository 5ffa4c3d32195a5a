/*
 * life.c - how libtoggle knows that a graph it recorded, or an exec of it,
 * is destroyed: the driver says so.  Handles are only keys, and the driver
 * hands a destroyed graph's handle, and its node handles, to the next graph
 * (measured on an H200, driver 580: 284 of 300 times, always with every node
 * handle), so no look at the live graph can tell a stranger from the dead
 * graph.  A CUDA user object (cuUserObjectCreate, CUDA 11.3+) can: its
 * destructor runs once the last reference to it goes.
 *
 * The driver's rules (CUDA C++ Programming Guide, "CUDA User Objects";
 * checked on the H200): a graph holds the references it was given
 * (cuGraphRetainUserObject), a clone a copy of each, and an instantiated
 * exec a copy of every reference its graph holds at instantiation, kept
 * until the exec is destroyed and its launches completed.  So:
 *
 *  - every record gets an object at capture (tg_life_capture: the capture's
 *    graph may be given references), moved to the graph;
 *  - at each bind to a new exec the graph gives that object back and gets a
 *    new one (tg_life_bind): the old one is then held only by the execs
 *    instantiated while the graph held it (the bound exec among them), the
 *    new one by the graph alone, so its destructor says "the graph is
 *    destroyed" even while its exec lives (the graph may go first, and its
 *    handle is then reused while the exec lives: 299 of 300 on the H200);
 *  - the bound exec is gone once every object of the record's closed epochs
 *    is (it holds one of them; which one only toggle_graph_instantiate,
 *    which gives it an epoch of its own, knows): never too early, late only
 *    while another exec instantiated from the graph lives;
 *  - the producer-free exec (bare.c) is built from a clone that gives its
 *    copy back first (tg_life_unclone), so it holds none.
 *
 * The destructor runs on a driver thread (or inside the call that dropped
 * the last reference: cuGraphDestroy, on driver 580) where no CUDA call is
 * allowed.  It only marks: its object dead, the agent's count of deaths up,
 * and the agent's fast-path version to UINT64_MAX, so that the very next
 * launch of any graph takes the slow path, which sweeps (tg_registry_sweep):
 * the hot path of an unchanged launch does no extra work.  Objects and the
 * hub are reference-counted (the destructor's, the agent's) so that a
 * destructor that runs while the agent closes, or long after, touches only
 * memory that is still its own: the agent's pointer in the hub is cleared
 * at close, and close waits for a destructor between its load of it and
 * its store (a few instructions).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_impl.h"
#include "life_hub.h"

/*
 * How long tg_life_settle waits for an exec's destructor.  On the H200
 * (driver 580, examples/probe_userobj.cu) the reference an exec holds goes
 * on a driver thread after cudaGraphExecDestroy returns, never inside it
 * (0 of 400), and a new exec got the dead one's handle in that window.
 */
#define TG_LIFE_SETTLE_US     5000u
#define TG_LIFE_SETTLE_MAX_US 1000000u

struct tg_life {
	atomic_uint refs;       /* the destructor's, and the agent's (one per pointer it keeps) */
	atomic_bool dead;       /* the destructor ran */
	struct tg_life_hub *hub;
	CUuserObject obj;       /* passed to the driver only while a graph of ours holds it */
};

static void hub_put(struct tg_life_hub *h)
{
	if (atomic_fetch_sub(&h->refs, 1) == 1)
		free(h);
}

static void life_put(struct tg_life *t)
{
	if (t && atomic_fetch_sub(&t->refs, 1) == 1) {
		hub_put(t->hub);
		free(t);
	}
}

static struct tg_life *life_get(struct tg_life *t)
{
	if (t)
		atomic_fetch_add(&t->refs, 1);
	return t;
}

static bool life_dead(const struct tg_life *t)
{
	return atomic_load_explicit(&t->dead, memory_order_acquire);
}

/* The destructor: a driver thread, no CUDA call, no lock, nothing the agent may free. */
static void CUDA_CB life_destroyed(void *arg)
{
	struct tg_life *t = arg;
	struct tg_life_hub *h = t->hub;
	atomic_store(&t->dead, true);
	atomic_fetch_add(&h->deaths, 1);
	atomic_fetch_add(&h->busy, 1);
	struct toggle_agent *a = atomic_load(&h->agent);
	if (a)
		__atomic_store_n(&a->fast_version, UINT64_MAX, __ATOMIC_SEQ_CST); /* the next launch looks */
	atomic_fetch_sub(&h->busy, 1);
	life_put(t);
}

void tg_life_open(struct toggle_agent *a)
{
	if (!tg_cu_has_user_objects(&a->cu))
		return; /* identity checks only (registry.c), as before user objects */
	struct tg_life_hub *h = calloc(1, sizeof(*h));
	if (!h)
		return;
	atomic_init(&h->refs, 1);
	atomic_init(&h->deaths, 0);
	atomic_init(&h->agent, a);
	atomic_init(&h->busy, 0);
	a->life = h;
	a->settle_us = TG_LIFE_SETTLE_US;
	const char *env = getenv("TOGGLE_LIFE_SETTLE_US");
	if (env && *env) {
		char *end;
		unsigned long v = strtoul(env, &end, 10);
		if (!*end && v <= TG_LIFE_SETTLE_MAX_US)
			a->settle_us = (uint32_t)v; /* otherwise the default: never unbounded */
	}
}

void tg_life_close(struct toggle_agent *a)
{
	struct tg_life_hub *h = a->life;
	if (!h)
		return;
	a->life = NULL;
	atomic_store(&h->agent, NULL);
	while (atomic_load(&h->busy)) /* a destructor between its load and its store */
		sched_yield();
	hub_put(h);
}

/* A new object, moved to graph; NULL (counted) when the driver refuses. */
static struct tg_life *life_attach(struct toggle_agent *a, CUgraph graph)
{
	struct tg_life *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	atomic_init(&t->refs, 2); /* the destructor's, the caller's */
	atomic_init(&t->dead, false);
	t->hub = a->life;
	atomic_fetch_add(&t->hub->refs, 1);
	CUresult r = tg_cu_user_object_create(&a->cu, &t->obj, t, life_destroyed, 1);
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		hub_put(t->hub);
		free(t);
		return NULL;
	}
	r = a->cu.graph_retain_user_object(graph, t->obj, 1, CU_GRAPH_USER_OBJECT_MOVE);
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		(void)a->cu.user_object_release(t->obj, 1); /* the destructor runs: its reference */
		life_put(t);
		return NULL;
	}
	return t;
}

void tg_life_capture(struct toggle_agent *a, struct tg_graph *g)
{
	if (a->life && !g->life)
		g->life = life_attach(a, g->graph);
}

static void life_drop_exec(struct tg_graph *g)
{
	life_put(g->exec_life);
	g->exec_life = NULL;
	g->exec_tracked = false;
	g->exec_dead = false;
}

void tg_life_clear(struct toggle_agent *a, struct tg_graph *g, bool keep_graph)
{
	(void)a;
	if (!keep_graph) {
		life_put(g->life);
		g->life = NULL;
	}
	for (uint32_t i = 0; i < g->n_held; i++)
		life_put(g->held[i]);
	g->n_held = 0;
	life_put(g->fresh);
	g->fresh = NULL;
	life_drop_exec(g);
	g->gone = false;
}

static void foreign_clear(struct tg_graph *g)
{
	for (uint32_t i = 0; i < g->n_foreign; i++)
		life_put(g->foreign_life[i]);
	g->n_foreign = 0;
	g->foreign = NULL;
}

void tg_life_free(struct tg_graph *g)
{
	tg_life_clear(NULL, g, false);
	foreign_clear(g);
}

void tg_life_orphan(struct toggle_agent *a, struct tg_graph *g)
{
	(void)a;
	if (!g->bound || !g->exec || g->exec_dead || !g->exec_tracked)
		return;
	foreign_clear(g); /* one foreign exec per handle: the latest */
	g->foreign = g->exec;
	if (g->exec_life) {
		g->foreign_life[g->n_foreign++] = life_get(g->exec_life);
	} else {
		for (uint32_t i = 0; i < g->n_held; i++)
			g->foreign_life[g->n_foreign++] = life_get(g->held[i]);
	}
}

bool tg_life_graph_dead(const struct tg_graph *g)
{
	return g->life && life_dead(g->life);
}

/* Every object in v that the destructor marked goes; how many are left. */
static uint32_t life_prune(struct tg_life **v, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (life_dead(v[i]))
			life_put(v[i]);
		else
			v[k++] = v[i];
	}
	for (uint32_t i = k; i < n; i++)
		v[i] = NULL;
	return k;
}

/* Whether the bound exec is destroyed, by what the driver said (pruned first). */
static bool life_exec_dead(const struct tg_graph *g)
{
	if (!g->bound || !g->exec_tracked)
		return false;
	return g->exec_life ? life_dead(g->exec_life) : g->n_held == 0;
}

static uint64_t life_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/*
 * Waits, at most a->settle_us, until every object of v is dead (and, with
 * counted, the agent's count of deaths has moved, so that the caller's sweep
 * looks: a destructor marks its object before it counts).  The driver drops
 * an exec's references after cudaGraphExecDestroy returned (see
 * TG_LIFE_SETTLE_US), and a new exec may have the dead one's handle by then.
 * Only where the agent would refuse otherwise; true when all died.
 */
static bool life_wait_all(const struct toggle_agent *a, struct tg_life *const *v, uint32_t n,
			  bool counted)
{
	uint64_t end = life_now_us() + a->settle_us;
	for (;;) {
		uint32_t alive = 0;
		for (uint32_t i = 0; i < n; i++)
			alive += !life_dead(v[i]);
		if (!alive && (!counted || tg_life_pending(a)))
			return true;
		if (life_now_us() >= end)
			return false;
		sched_yield();
	}
}

bool tg_life_foreign(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec)
{
	if (!g->foreign || exec != g->foreign)
		return false;
	g->n_foreign = life_prune(g->foreign_life, g->n_foreign);
	if (g->n_foreign && life_wait_all(a, g->foreign_life, g->n_foreign, false))
		g->n_foreign = life_prune(g->foreign_life, g->n_foreign);
	if (g->n_foreign == 0) {
		foreign_clear(g); /* destroyed: a new exec may have its handle */
		return false;
	}
	return true;
}

/*
 * Close the graph's epoch: it gives its object back (held by the execs made
 * meanwhile, now in held[]) and gets a new one.  false: nothing was closed
 * (no object, no room, or the driver refused), the execs are not tracked.
 * Never releases what the graph does not hold (driver 580 would take it
 * from the object's count, and free it twice later).
 */
static bool life_rotate(struct toggle_agent *a, struct tg_graph *g, struct tg_life **closed)
{
	*closed = NULL;
	if (!a->life || !g->life || life_dead(g->life))
		return false;
	g->n_held = life_prune(g->held, g->n_held);
	if (g->n_held == TG_LIFE_HELD)
		return false; /* so many execs of this graph alive: no more tracked */
	CUresult r = a->cu.graph_release_user_object(g->graph, g->life->obj, 1);
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		return false; /* the graph keeps it: still the graph's object */
	}
	*closed = g->held[g->n_held++] = g->life;
	/* NULL when the driver refuses: the graph's death is then told by the
	 * identity checks alone (registry.c), as without user objects. */
	g->life = life_attach(a, g->graph);
	return true;
}

void tg_life_fresh(struct toggle_agent *a, struct tg_graph *g)
{
	struct tg_life *closed;
	life_put(g->fresh);
	g->fresh = NULL;
	if (life_rotate(a, g, &closed))
		g->fresh = life_get(g->life);
}

void tg_life_bind(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec)
{
	(void)exec;
	struct tg_life *closed;
	life_drop_exec(g);
	g->exec_tracked = life_rotate(a, g, &closed);
	if (g->exec_tracked && closed == g->fresh && closed)
		g->exec_life = life_get(closed); /* the exec toggle_graph_instantiate made: its own */
	life_put(g->fresh);
	g->fresh = NULL;
}

void tg_life_unbind(struct toggle_agent *a, struct tg_graph *g)
{
	(void)a;
	life_drop_exec(g);
}

struct tg_life *tg_life_region(struct toggle_agent *a, CUgraph graph, uint64_t id, bool *own)
{
	*own = false;
	if (!a->life)
		return NULL;
	const struct tg_graph *g = tg_graph_find(a, graph);
	if (g && g->capture_id == id && g->life && !g->stale)
		return life_get(g->life); /* the record of this capture has one on it */
	*own = true;
	return life_attach(a, graph);
}

void tg_life_region_put(struct toggle_agent *a, struct tg_life *t, bool own, CUgraph graph,
			bool capturing)
{
	if (!t)
		return;
	/* Only while its capture is active is the graph surely alive and ours. */
	if (own && capturing && !life_dead(t) &&
	    a->cu.graph_release_user_object(graph, t->obj, 1) != CUDA_SUCCESS)
		a->anomalies.driver_errors++; /* stays on the graph: goes with it */
	life_put(t);
}

int tg_life_alive(const struct tg_life *t)
{
	return t ? !life_dead(t) : -1;
}

int tg_life_unclone(struct toggle_agent *a, const struct tg_graph *g, CUgraph clone)
{
	if (!g->life)
		return 0;
	CUresult r = a->cu.graph_release_user_object(clone, g->life->obj, 1);
	if (r != CUDA_SUCCESS)
		return tg_fail(a, TOGGLE_ECUDA, "cuGraphReleaseUserObject (the clone's copy of the "
			       "graph's lifetime object): %s", tg_cu_errstr(&a->cu, r));
	return 0;
}

/*
 * What the driver said about g's objects since the last look: the dead ones
 * go.  The bound exec destroyed (against the documented rule, or after its
 * graph): true, once; the record's sweep (tg_registry_sweep) then drops its
 * node states, upload and producer-free exec, and the record itself when
 * its graph is destroyed.
 */
bool tg_life_look(struct tg_graph *g)
{
	g->n_held = life_prune(g->held, g->n_held);
	if (g->n_foreign) {
		g->n_foreign = life_prune(g->foreign_life, g->n_foreign);
		if (!g->n_foreign)
			foreign_clear(g);
	}
	return !g->exec_dead && life_exec_dead(g);
}

bool tg_life_take_deaths(struct toggle_agent *a)
{
	if (!a->life)
		return false;
	uint64_t d = atomic_load_explicit(&a->life->deaths, memory_order_acquire);
	if (d == a->deaths_seen)
		return false;
	a->deaths_seen = d; /* a destructor that runs from here on counts for the next sweep */
	return true;
}

int tg_life_describe(const struct tg_graph *g, char *buf, size_t len)
{
	int k = snprintf(buf, len, "graph object %s, exec %s (%s), held", !g->life ? "none"
			 : life_dead(g->life) ? "dead" : "alive", !g->exec_tracked ? "untracked"
			 : g->exec_life ? "own object" : "by held[]", !g->exec_life ? "-"
			 : life_dead(g->exec_life) ? "dead" : "alive");
	for (uint32_t i = 0; i < g->n_held && k > 0 && (size_t)k < len; i++)
		k += snprintf(buf + k, len - (size_t)k, " %s", life_dead(g->held[i]) ? "dead" : "alive");
	return k;
}

bool tg_life_settle(struct toggle_agent *a, const struct tg_graph *g)
{
	if (!a->life || !g->bound || !g->exec_tracked || g->exec_dead)
		return false;
	/* The objects the bound exec holds: its own, or the closed epochs'. */
	return g->exec_life ? life_wait_all(a, &g->exec_life, 1, true)
			    : life_wait_all(a, g->held, g->n_held, true);
}

bool tg_life_exec_reused(struct tg_graph *g, CUgraphExec exec)
{
	if (g->foreign == exec)
		foreign_clear(g);
	if (!g->gone || g->exec != exec || g->exec_dead)
		return false;
	g->exec_dead = true; /* the record was kept for that exec alone */
	return true;
}
