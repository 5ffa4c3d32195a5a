/*
 * core.h - the lowest layer of libtoggle's agent: its private state (the
 * agent and its graph records) and the helpers every other file may use:
 * failure reporting (tg_fail), graph lookup (tg_graph_find), the version
 * the replay fast path compares (tg_fast_update), the stats view.  core.c
 * calls nothing of the agent's own files; every file above may call it.
 * The layers above and which file may call which: agent_impl.h and
 * docs/architecture.md ("Inside libtoggle").
 */
#ifndef TG_CORE_H
#define TG_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "cu.h"
#include "toggle.h"
#include "toggle_shm.h"

struct tg_conn;
struct tg_rec;
struct tg_life;
struct tg_life_hub;

#define TG_MAP_SLOTS (2 * TOGGLE_MAX_GRAPHS)
#define TG_STEP_BOUNDS 16 /* steps a device-mode graph remembers its launches of */
#define TG_IDENT_NODES 8 /* recorded nodes kept to recognise a graph (tg_graph_replaced) */
#define TG_LIFE_HELD 16  /* user objects a record keeps for the execs of its graph (life.c) */
#define TG_NOTE_LEN 128  /* a graph's note: toggle_graph_status.note */
#define TG_MAP_MASK  (TG_MAP_SLOTS - 1)

/* Per-node state cache of the bound exec. */
enum tg_node_state { TG_NODE_OFF = 0, TG_NODE_ON = 1, TG_NODE_UNKNOWN = 2 };

struct tg_node {
	CUgraphNode node;
	uint32_t hook;    /* hook index: type * TOGGLE_MAX_LAYERS + layer */
	uint64_t devnode; /* its CUgraphDeviceNode, 0 when not device-updatable */
	bool attrs;       /* launched with launch attributes of the application's, or
			   * recorded from a node it made: a plain copy (bare.c's full
			   * exec) would lose them */
};

/* How a graph of a device-mode agent is toggled (decided at bind). */
enum tg_dev {
	TG_DEV_UNDECIDED = 0, /* not bound since capture (or not a device-mode agent) */
	TG_DEV_ACTIVE,        /* the planner toggles it */
	TG_DEV_FALLBACK,      /* the host toggles it (lazy); note says why */
	TG_DEV_REFUSED,       /* strict agent: bind refused; note says why */
};

/* A second exec of a graph (bare.c): the producer-free one, or (device mode)
 * the full one, every producer a plain kernel node and no planner. */
struct tg_bare {
	CUgraphExec exec;         /* NULL: none (not built, off, or the build failed) */
	CUgraphExec parked;       /* one dropped inside a capture window: destroyed later */
	/* Host modes' full exec (bare.c) also runs the sets in between: its
	 * producers are set like the main exec's, with their own state (replay.c,
	 * tg_full_sync), so that no step of a host-mode graph launches the main
	 * exec, the one holding the lifetime object the driver paces. */
	CUgraph graph;            /* the clone exec was instantiated from (its node handles) */
	CUgraph parked_graph;     /* graph of parked */
	CUgraphNode *nodes;       /* per recorded node of the graph, its node in graph */
	uint8_t *state;           /* enum tg_node_state per node, for exec */
	struct toggle_set synced; /* the set every node of exec holds, if synced_valid */
	bool synced_valid;
	uint64_t replays;         /* launches that ran such an exec before `since` */
	uint64_t since;           /* g->replays when the running one was picked */
	CUstream stream;          /* stream of its last launch (its run_slot) */
	bool failed;              /* the last build failed: the main exec runs instead */
	/* Host modes' full exec: a set in between has run on it (a producer
	 * disabled by a node set) since it was built.  An exec whose nodes were
	 * disabled and enabled again replays all on slower than one never set
	 * (H100, benchmarks.md section 11, session 21): all on then runs the
	 * graph's all-on exec (bare.c). */
	bool toggled;
};

struct tg_graph {
	CUgraph graph;
	uint64_t capture_id;      /* capture that recorded the nodes */
	struct tg_node *nodes;
	uint8_t *state;           /* enum tg_node_state per node, for exec */
	uint32_t n_nodes, cap_nodes;
	uint32_t *by_hook;        /* node indices ordered by hook; NULL until a sync needs it */
	uint32_t wlo, whi;        /* bitmap words holding covered hooks (with by_hook) */
	struct toggle_set synced; /* the set every node of exec holds, if synced_valid */
	bool synced_valid;        /* false: some node state unknown, sync them all */
	struct toggle_set covered;
	uint32_t hooks_covered;
	CUgraphExec exec;
	CUgraphExec run;          /* what its launches run while applied_version holds:
				   * exec, its bare or its full exec (bare.c; tg_run_set) */
	CUstream *run_slot;       /* where a launch of run notes its stream: last_stream
				   * (exec), bare.stream or full.stream */
	bool bound;
	bool stale;
	uint64_t applied_version; /* version of the set exec holds; 0 = none */
	uint64_t replays;         /* launches of this graph, across execs (of exec: tg_dev_runs) */
	int64_t last_step;
	CUstream last_stream;     /* stream of the last launch of exec through the agent */
	/* The last launch before run was picked (tg_last_launch): its exec and
	 * stream (NULL: none), and replays when run was picked. */
	CUgraphExec prev_run;
	CUstream prev_stream;
	uint64_t run_since;
	uint64_t alt_closed;      /* launches of bare and full execs no longer running */
	uint32_t slot;            /* index among the agent's records: its planner descriptor */

	/* Device mode (device.c).  Kept across a new capture into the record:
	 * dev_mem, dev_mem_size, shadow, cap_words, epoch, join. */
	uint64_t planner_tag;     /* the planner captured into this capture, 0 = none */
	CUgraphNode planner_node;
	uint32_t n_devnodes;      /* nodes recorded with a device handle */
	enum tg_dev dev;
	char note[TG_NOTE_LEN];   /* why not device mode, or why late */
	bool dev_setup;           /* descriptor and arrays written for this capture */
	CUgraphExec uploaded_exec; /* exec uploaded by the last bind, NULL = none */
	CUdeviceptr dev_mem;      /* nodes, mask, state */
	size_t dev_mem_size;
	uint64_t *shadow;         /* mask words on the device once enqueued writes ran */
	uint32_t words, cap_words;
	bool shadow_valid;        /* false: every word is written next time */
	uint64_t epoch;           /* epoch the device holds or will hold */
	bool epoch_pending;       /* epoch still to be written before the next launch */
	CUevent join;             /* orders a write on a new stream after the last one */
	/* Device mode after toggle_graph_prepare (replay.c): last_stream holds mask
	 * work (words, or a wait for another stream) that no launch through the
	 * agent followed.  While set, applied_version is 0 (launches take the slow
	 * path, which waits for last_stream when theirs differs) and prep_version
	 * is what the mask holds for a prepare on last_stream (its fast path). */
	bool prep_unordered;
	uint64_t prep_version;
	bool upload_pending;      /* host toggled a device-updatable node (fallback): upload
				   * before the next launch, as the driver requires */

	/* Device mode's tainted launches (device.c): what the planner's report
	 * said, read at step_begin and at a launch that writes the mask.
	 * Launch index i = the value of tg_dev_runs when launch i was made (the
	 * bare and full execs' launches run no planner and are not counted there). */
	uint64_t run_base;        /* replays at the descriptor's write: run r is launch run_base + r - 1 */
	uint64_t exec_first;      /* replays at the bind of the current exec: its first launch */
	uint64_t rep_seen;        /* report records taken (the report's bad count) */
	uint64_t last_bad_run;    /* latest tainted run taken */
	uint64_t tainted;         /* tainted launches reported, this capture */
	int64_t tainted_step;     /* step of the latest, -1 = none or unknown */
	bool unclean;             /* a tainted launch not yet followed by a clean one */
	bool blocked;             /* strict: launches refused until a clean apply or a bind */
	struct {
		uint64_t first;       /* first launch index of ... */
		int64_t step;         /* ... this step */
	} bounds[TG_STEP_BOUNDS];
	uint32_t n_bounds;        /* pushed so far; the last TG_STEP_BOUNDS are kept */
	/* Identity behind the handles (registry.c, slow paths only): a destroyed
	 * graph's or exec's handle may be given to a new one. */
	unsigned graph_id;        /* cuGraphGetId at capture, if has_graph_id (CUDA 13.1+) */
	bool has_graph_id;
	unsigned exec_id;         /* cuGraphExecGetId of exec at bind, if has_exec_id */
	bool has_exec_id;
	CUgraphNode ident[TG_IDENT_NODES]; /* nodes of this capture: without ids, */
	uint32_t n_ident;                  /* the graph must still hold them all */
	/*
	 * Lifetime (life.c): CUDA user objects whose destructors (driver thread)
	 * say that the graph, or the execs instantiated from it, are gone.  An
	 * instantiated exec holds a copy of every reference its graph holds, so
	 * each bind hands the graph a new object and the old one stays with the
	 * execs made meanwhile.  life: the graph's (also held by execs made since
	 * the last bind); held[]: older ones, the graph released them, only execs
	 * hold them (dead ones are pruned at each look).  The bound exec holds
	 * exec_life (toggle_graph_instantiate made it alone in its epoch), else
	 * one of held[]: gone once all of them are.  Slow paths only.
	 */
	struct tg_life *life;
	struct tg_life *held[TG_LIFE_HELD];
	uint32_t n_held;
	struct tg_life *exec_life;
	struct tg_life *fresh;    /* the graph's object since toggle_graph_instantiate's last rotation */
	bool exec_tracked;        /* the bound exec holds exec_life or one of held[] */
	bool exec_dead;           /* the bound exec is destroyed: launches rebind (never touch it) */
	bool gone;                /* the graph is destroyed, its bound exec may live: only that
				   * exec is ours (launches at another set refused, host modes) */
	/* An exec of the graph that had this handle before a new capture (gone),
	 * maybe alive: it is refused, never bound to this one.  Its objects. */
	CUgraphExec foreign;
	struct tg_life *foreign_life[TG_LIFE_HELD + 1];
	uint32_t n_foreign;
	/* A producer launched into this capture could not be recorded (note says
	 * which and why): bind and launches are refused until it is captured again. */
	bool late;
	/* toggle_graph_set_bare(false): no producer-free exec for this graph. */
	bool bare_off;

	/* The producer-free exec (bare.c): exec's graph without its producers;
	 * device mode's full exec: without its planner, producers plain. */
	struct tg_bare bare, full;
	/* Host modes' set exec (bare.c): the graph without the producers one
	 * set leaves off (setx_set: that set on the graph's hooks), built at a
	 * step_begin once a set in between has held for TG_SETX_STEADY steps,
	 * launched while the current set agrees with it on the graph's hooks. */
	struct tg_bare setx;
	struct toggle_set setx_set;
	uint64_t setx_queued;     /* the version at which it became a candidate (a->setx_queue) */
	/* Host modes' all-on exec (bare.c): the full exec's graph instantiated
	 * again, which no node set touches, built at a step_begin once all on
	 * has run on a full exec that sets in between had set (toggled), and
	 * kept while the full exec is: all on runs it, sets in between the full
	 * exec, so all on alternating with other sets needs no node set. */
	struct tg_bare allx;
	bool allx_queued;         /* named in a->allx_queue */
	int64_t allx_step0;       /* the step it was named at: built once launched since */
	uint32_t alt_wlo, alt_whi; /* set words that hold the graph's covered hooks */
	uint32_t n_attrs;         /* producers recorded with attrs (struct tg_node) */
};

struct tg_plan {
	int64_t step;
	struct toggle_set set;
};

/* Device mode's per-agent state (device.c). */
struct tg_device {
	bool on;                  /* the agent runs in device mode */
	CUmodule module;
	CUfunction planner;
	CUstream setup;           /* the agent's own stream: bind-time copies and uploads */
	CUdeviceptr descs;        /* TOGGLE_MAX_GRAPHS planner descriptors */
	uint64_t next_tag;
	uint64_t *want;           /* scratch: mask words of one graph */
	CUstreamBatchMemOpParams *ops; /* scratch: one batch */
	void *reports;            /* TOGGLE_MAX_GRAPHS planner reports, host-mapped, then
				   * the signal word (device.c, tg_device_step) */
	CUdeviceptr reports_dev;  /* the same, for the planners */
};

#define TG_MAX_REGIONS 64 /* producer regions open at once per agent (one per stream) */

/* An open producer region (region.c): what the capture of its stream held at begin. */
struct tg_region {
	CUstream stream;
	uint64_t capture_id;
	CUgraph graph;
	CUgraphNode *old;     /* every node the graph had at begin, sorted */
	size_t n_old;
	/* A lifetime object on that graph (life.c): whether graph still names it
	 * once its capture ended with the region open.  own: the region's, given
	 * back at a normal end; else the record's. */
	struct tg_life *life;
	bool own_life;
};

/* The built-in copy producer's kernel (copyout.c), loaded at its first use. */
struct tg_copyout {
	CUmodule module;
	CUfunction fn;       /* tg_copy_out: any rows and width */
	CUfunction fn_row16; /* tg_copy_out_row16: one row of 16-byte accesses */
};

struct toggle_agent {
	struct tg_cu cu;
	char name[TOGGLE_MAX_NAME];
	char group[TOGGLE_MAX_NAME];
	char type_names[TOGGLE_MAX_HOOK_TYPES][TOGGLE_MAX_NAME];
	const char *type_ptrs[TOGGLE_MAX_HOOK_TYPES];
	struct toggle_catalog catalog; /* points into type_ptrs */
	enum toggle_mode mode;
	bool strict;
	struct tg_device dev;
	bool bare_on;             /* build producer-free execs (toggle_config.no_bare_exec) */
	bool host_assemble;       /* host modes: assemble the second execs (unless toggle_config.clone_execs) */
	bool full_on;             /* and full execs (toggle_config.no_full_exec) */
	bool setx_on;             /* and set execs (toggle_config.no_set_exec) */
	/* Set execs (bare.c, tg_setx_step): the version seen at the last
	 * step_begin, the step it was first seen at, the steps it has held; the
	 * candidates, the slots of the graphs whose pick ran the full exec at
	 * this version (each named once: tg_graph.setx_queued): a ring of
	 * setx_n from setx_head. */
	uint64_t setx_version;
	int64_t setx_step0;
	uint32_t setx_steady;
	uint32_t setx_queue[TOGGLE_MAX_GRAPHS];
	uint32_t setx_head, setx_n;
	/* All-on execs to build (bare.c, tg_setx_step), one a step whatever the
	 * set: the slots of graphs whose pick ran all on on a toggled full exec
	 * (each named once while queued: tg_graph.allx_queued), a ring. */
	uint32_t allx_queue[TOGGLE_MAX_GRAPHS];
	uint32_t allx_head, allx_n;

	/* Desired state. */
	struct toggle_set standing;
	bool current_standing;    /* current is standing, neither written since (desired.c) */
	struct tg_plan *plans;    /* sorted by step, TOGGLE_MAX_PLAN slots */
	size_t n_plans;
	struct toggle_set current; /* the set replays of this step run with */
	uint64_t version;          /* bumped whenever current changes */
	int64_t step;              /* -1 before the first step */

	/* Registry. */
	struct tg_graph **graphs;  /* n_graphs records, stable addresses */
	size_t n_graphs;
	/* Open addressing, load factor <= 1/2; inline with a constant mask so
	 * the replay path loads neither a pointer nor a size to probe it. */
	struct tg_graph *map[TG_MAP_SLOTS];
	unsigned capture_depth;
	struct tg_region regions[TG_MAX_REGIONS];
	unsigned n_regions;
	struct tg_copyout copy;

	/* Daemon lane (socket_path set): shared memory and the connection thread. */
	struct toggle_shm shm;       /* shm.ctl == NULL when standalone */
	struct tg_conn *conn;
	uint64_t ctl_seq;            /* control seq last read */
	uint64_t ctl_version;        /* control version last read */
	uint64_t ctl_version_step;   /* control version in effect for this step */
	uint64_t ctl_published;      /* version_applied last published */
	/* What the replay fast path compares: tg_fast_update(), and UINT64_MAX from
	 * a user object's destructor on a driver thread (life.c: the next launch
	 * takes the slow path, which looks at what died).  Accessed atomically
	 * (__atomic builtins: this header is C++ too) for that writer; the fast
	 * path's relaxed load is a plain load. */
	uint64_t fast_version;
	uint64_t plan_consumed;      /* control plan slots consumed */
	uint64_t plan_clears;        /* control plan clears seen */
	uint64_t plan_rejected, plan_rejected_batch;
	int64_t plan_rejected_step;
	/* An aligned standing set (control lane standing_step) waiting for its
	 * step: step_begin(step >= aligned_step) makes it the standing set. */
	bool aligned_pending;
	int64_t aligned_step;
	uint64_t aligned_version;    /* the control version that carried it */
	struct toggle_set aligned_set;
	uint64_t aligned_rejected, aligned_rejected_version;
	int64_t aligned_rejected_step;
	uint64_t control_errors;     /* malformed control-lane content */
	struct toggle_shm_status *status_buf;

	/* Lifetime (life.c): NULL when the driver has no user objects. */
	struct tg_life_hub *life;
	uint64_t deaths_seen;        /* destructors seen run at the last sweep */
	uint32_t settle_us;          /* tg_life_settle's bound (TOGGLE_LIFE_SETTLE_US) */

	/* The recorder (record.c): NULL until a buffer is declared or a ring
	 * opened; rec_on is rec once a ring is open, NULL before: what the
	 * launch path tests (declared buffers alone cost it nothing). */
	struct tg_rec *rec;
	struct tg_rec *rec_on;

	struct toggle_anomalies anomalies;
	struct toggle_taint taint;   /* device mode's tainted launches, all graphs */
	struct toggle_stats stats;   /* launches: derived, see toggle_stats_get */
	uint64_t launches_retired;   /* replays of records since cleared */
	char err[512];
};

/* Set the last-error text and return code (printf-style context). */
int tg_fail(struct toggle_agent *a, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The agent's counters with the derived ones filled in (toggle_stats_get). */
void tg_stats_get(const struct toggle_agent *a, struct toggle_stats *out);

static inline uint32_t tg_hook_index(struct toggle_hook h)
{
	return (uint32_t)h.type * TOGGLE_MAX_LAYERS + h.layer;
}

static inline bool tg_set_has(const struct toggle_set *s, uint32_t idx)
{
	return (s->bits[idx / 64] >> (idx % 64)) & 1u;
}

/* Fibonacci hashing of the handle: two instructions on the replay path. */
static inline size_t tg_map_hash(CUgraph graph)
{
	return (size_t)(((uint64_t)(uintptr_t)graph * 0x9e3779b97f4a7c15ull) >> 32);
}

/* The record of a graph, or NULL: one probe in the common case. */
static inline struct tg_graph *tg_graph_find(const struct toggle_agent *a, CUgraph graph)
{
	for (size_t i = tg_map_hash(graph) & TG_MAP_MASK;; i = (i + 1) & TG_MAP_MASK) {
		struct tg_graph *g = a->map[i];
		if (!g || g->graph == graph)
			return g;
	}
}

/* The version of the set g's exec holds, for status (applied_version is 0
 * while a prepare's mask work is unordered, to keep launches off the fast path). */
static inline uint64_t tg_graph_held_version(const struct tg_graph *g)
{
	return g->prep_unordered && !g->applied_version ? g->prep_version : g->applied_version;
}

/* A record that is not passed through as unrelated: producers, forgotten, or late. */
static inline bool tg_graph_related(const struct tg_graph *g)
{
	return g->n_nodes || g->stale || g->late;
}

/*
 * Whether a lifetime object's destructor ran since the last sweep: the
 * death count of life.c's hub (life_hub.h), read here so that
 * tg_fast_update needs nothing above core.  a->life must be set.
 */
bool tg_life_pending(const struct toggle_agent *a);

/*
 * The version the replay fast path compares an exec's with: the current one,
 * or one no exec ever holds while a launch has daemon-lane work to do (an
 * agent that never began a step polls the lane at every launch; the first
 * replay under a new control version is reported).  Called after anything
 * it depends on changes: version, step, ctl_version_step, ctl_published.
 */
static inline void tg_fast_update(struct toggle_agent *a)
{
	bool lane_work = a->shm.ctl && (a->step < 0 || a->ctl_published != a->ctl_version_step);
	__atomic_store_n(&a->fast_version, lane_work ? UINT64_MAX : a->version, __ATOMIC_SEQ_CST);
	/* After the store: a destructor that ran before it and was not swept yet
	 * leaves the slow path on (one that runs after it stores UINT64_MAX itself). */
	if (a->life && tg_life_pending(a))
		__atomic_store_n(&a->fast_version, UINT64_MAX, __ATOMIC_SEQ_CST);
}

/* The fast path's read of fast_version: a plain load. */
static inline uint64_t tg_fast_version(const struct toggle_agent *a)
{
	return __atomic_load_n(&a->fast_version, __ATOMIC_RELAXED);
}

/* The words [*lo, *hi) of the hook bitmap that hold g's covered hooks (lo > hi: none). */
static inline void tg_covered_words(const struct tg_graph *g, uint32_t *lo, uint32_t *hi)
{
	*lo = TOGGLE_MAX_HOOKS / 64;
	*hi = 0;
	for (uint32_t w = 0; w < TOGGLE_MAX_HOOKS / 64; w++) {
		if (!g->covered.bits[w])
			continue;
		*lo = w < *lo ? w : *lo;
		*hi = w + 1;
	}
}

/* Launches of x (g's bare or full exec), across execs, the running one's included. */
static inline uint64_t tg_alt_replays(const struct tg_graph *g, const struct tg_bare *x)
{
	return x->replays + (x->exec && g->run == x->exec ? g->replays - x->since : 0);
}

/* Launches of g's exec (device mode: its planner's runs): what the others
 * leave (run is a bare or full exec while it is not exec). */
static inline uint64_t tg_dev_runs(const struct tg_graph *g)
{
	return g->replays - g->alt_closed - (g->run != g->exec ? g->replays - g->run_since : 0);
}

/* The stream of g's last launch (NULL: none yet), *exec the exec it ran:
 * run's if it launched since it was picked, else what ran before. */
static inline CUstream tg_last_launch(const struct tg_graph *g, CUgraphExec *exec)
{
	if (g->replays != g->run_since && g->run_slot) {
		*exec = g->run;
		return *g->run_slot;
	}
	*exec = g->prev_run;
	return g->prev_stream;
}

/* Device mode: launches from index tg_dev_runs(g) on are made in step (device.c
 * tells a tainted launch's step from these notes, made at each graph's first
 * launch of a step, replay.c, and at bind, device.c). */
static inline void tg_dev_note_step(struct tg_graph *g, int64_t step)
{
	uint64_t runs = tg_dev_runs(g);
	if (g->n_bounds) {
		uint32_t last = (g->n_bounds - 1) % TG_STEP_BOUNDS;
		if (g->bounds[last].first == runs) {
			g->bounds[last].step = step; /* no launch since the last note */
			return;
		}
	}
	uint32_t i = g->n_bounds % TG_STEP_BOUNDS;
	g->bounds[i].first = runs;
	g->bounds[i].step = step;
	g->n_bounds++;
}

/* Make x (with its stream slot) what g's launches run; the last launch before kept. */
static inline void tg_run_set(struct tg_graph *g, CUgraphExec x, CUstream *slot)
{
	if (x == g->run && slot == g->run_slot)
		return;
	g->prev_stream = tg_last_launch(g, &g->prev_run);
	g->run = x;
	g->run_slot = slot;
	g->run_since = g->replays;
}

/* Hash of a node handle for open-addressing node sets (device.c, region.c):
 * Fibonacci hashing; the low bits of a pointer are alignment, so shift. */
static inline size_t tg_node_hash(CUgraphNode n)
{
	return (size_t)(((uint64_t)(uintptr_t)n * 0x9e3779b97f4a7c15ull) >> 20);
}

#endif
