/*
 * agent_impl.h - the agent's private interfaces, one section per file,
 * lowest layer first.  The state itself and the helpers everything uses
 * are core.h's.
 *
 * Calls run one way, down this picture: a file calls only files below it
 * (and the leaves); nothing calls a public entry point (toggle_*) of the
 * agent API from inside the library: each has an internal tg_* core where
 * another file needs it.  scripts/code-stats.sh --fail-on-cycles
 * libtoggle/src (part of make check) fails on any loop between files.
 *
 *   agent.c      lifetime; toggle_step_begin: intake, resolve, apply
 *   replay.c     apply: bring each exec to the set, launch (the hot path)
 *   bind.c       capture windows, binding, instantiating: over records,
 *                regions, device mode and the producer-free exec
 *   copyout.c    the built-in copy producer (through device.c's launch)
 *   device.c     device mode: planners, masks, tainted launches
 *   region.c     producer regions
 *   registry.c   graph records: recording, identity, drop, the sweep of
 *                what the driver destroyed, status views
 *   control.c    intake: the daemon's control lane into the desired
 *                state; the status lane
 *   desired.c    the desired state (standing set, plans) and resolve:
 *                the set of a step
 *   bare.c       the producer-free exec of a record
 *   life.c       lifetime objects: the driver says what is destroyed
 *   core.c       tg_fail, tg_graph_find, tg_fast_update, tg_stats_get
 *   leaves       cu_driver.c cu_sim.c sim.c planner_sim.c planner_image.c
 *                copyout_image.c gather_image.c conn.c pbwire.c shm.c hookset.c error.c
 *                layout.c: they call no agent file
 */
#ifndef TG_AGENT_IMPL_H
#define TG_AGENT_IMPL_H

#include "core.h"

/* ---- life.c: the driver's word on what is destroyed (user objects) ---- */
void tg_life_open(struct toggle_agent *a);   /* a->life stays NULL without user objects */
void tg_life_close(struct toggle_agent *a);  /* after tg_registry_free */
/* The record of the graph a capture is building is new: the graph gets its object. */
void tg_life_capture(struct toggle_agent *a, struct tg_graph *g);
/* Drop the record's objects (the graph's too unless keep_graph); foreign stays. */
void tg_life_clear(struct toggle_agent *a, struct tg_graph *g, bool keep_graph);
/* Agent close: every object of the record, foreign ones too. */
void tg_life_free(struct tg_graph *g);
/* The graph's bound exec may live on after it: keep it as foreign (a new capture). */
void tg_life_orphan(struct toggle_agent *a, struct tg_graph *g);
/* Before an instantiation libtoggle makes (toggle_graph_instantiate): a new object. */
void tg_life_fresh(struct toggle_agent *a, struct tg_graph *g);
/* After g was bound to exec (not NULL): hand the graph a new object, track exec's. */
void tg_life_bind(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec);
/* Unbound: the exec is no longer tracked. */
void tg_life_unbind(struct toggle_agent *a, struct tg_graph *g);
/* Whether the graph's object says it is destroyed (no driver call). */
bool tg_life_graph_dead(const struct tg_graph *g);
/* Whether exec is the foreign exec of g (see struct tg_graph) and may be alive. */
bool tg_life_foreign(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec);
/* The clone bare.c just made holds a copy of the graph's object: give it back. */
int tg_life_unclone(struct toggle_agent *a, const struct tg_graph *g, CUgraph clone);
/* A region opens in capture `id` of graph: an object that says when graph is destroyed. */
struct tg_life *tg_life_region(struct toggle_agent *a, CUgraph graph, uint64_t id, bool *own);
/* The region closes; its own object goes back to the graph if the capture is still active. */
void tg_life_region_put(struct toggle_agent *a, struct tg_life *t, bool own, CUgraph graph,
			bool capturing);
/* Whether the object's graph is alive: true, false, or (no object) -1: cannot tell. */
int tg_life_alive(const struct tg_life *t);
/* Whether destructors ran since the last call (then counted as seen): a sweep is due. */
bool tg_life_take_deaths(struct toggle_agent *a);
/* Prune g's objects the destructors marked; true when that says its bound exec
 * is destroyed and the record does not know it yet (tg_registry_sweep acts). */
bool tg_life_look(struct tg_graph *g);
/*
 * A record whose graph is destroyed (gone) and whose exec handle is launched
 * at a set that exec does not hold: it is ours (refused) or a stranger's
 * exec that got the handle while the driver had not yet run our exec's
 * destructor (it runs on a driver thread after cudaGraphExecDestroy
 * returns).  Waits, at most a->settle_us, for that destructor: true when
 * it ran (the caller sweeps: the record goes, the launch is a stranger's).
 * Only on that path, which refused before: no other launch waits.
 */
bool tg_life_settle(struct toggle_agent *a, const struct tg_graph *g);
/*
 * toggle_graph_instantiate made exec, so whatever had its handle before is
 * destroyed: an older exec of g's handle (foreign) or the bound exec of a
 * record whose graph is gone is dead (true: the caller drops the record).
 */
bool tg_life_exec_reused(struct tg_graph *g, CUgraphExec exec);
/* For traces (gpu_lifetime): the record's lifetime objects in words. */
int tg_life_describe(const struct tg_graph *g, char *buf, size_t len);

/* ---- bare.c: the producer-free exec (and device mode's full one), built at
 * bind, picked when the set changes ---- */
void tg_bare_bind(struct toggle_agent *a, struct tg_graph *g);  /* (re)build for g->exec */
void tg_bare_drop(struct toggle_agent *a, struct tg_graph *g);  /* unbind, forget, new capture */
void tg_bare_free(struct toggle_agent *a, struct tg_graph *g);  /* agent close */
/* Point g->run at the exec the current set needs: 1 (and g holds the current
 * version) when it is the bare, set or full one (host modes: the full one
 * brought to the set first, tg_full_sync); 0 when the main exec runs it (the
 * caller syncs it); < 0: the full exec's sync failed, the launch is refused
 * (its states unknown, g out of date). */
int tg_bare_pick(struct toggle_agent *a, struct tg_graph *g);
/* Back to the main exec, out of date (toggle_graph_prepare: the caller launches it). */
void tg_bare_leave(struct toggle_agent *a, struct tg_graph *g);
bool tg_bare_running(const struct tg_graph *g);
bool tg_setx_running(const struct tg_graph *g);
/* Host modes, at step_begin: once a set in between has held for TG_SETX_STEADY
 * steps, one graph's set exec built for it (bare.c). */
void tg_setx_step(struct toggle_agent *a);
uint64_t tg_bare_replays(const struct tg_graph *g);
bool tg_full_running(const struct tg_graph *g);
uint64_t tg_full_replays(const struct tg_graph *g);

/* ---- desired.c: the desired state and the step's set ---- */
/* The standing set (checked against the catalog); resolves nothing. */
int tg_standing_set(struct toggle_agent *a, const struct toggle_set *set);
/* Add a plan: all entries or none (toggle_plan_submit's checks). */
int tg_plan_submit(struct toggle_agent *a, const struct toggle_plan_entry *entries, size_t n);
void tg_plan_clear(struct toggle_agent *a);
/* An aligned change refused (its step had begun, or was stepped over): counted and reported. */
void tg_aligned_late(struct toggle_agent *a, uint64_t version);
/* Resolve, before the first step: replays run with the standing set at once. */
void tg_resolve_stepless(struct toggle_agent *a);
/* Resolve step (checked by the caller): the plan entry for it, else the standing set. */
void tg_resolve_step(struct toggle_agent *a, int64_t step);

/* ---- control.c: the daemon lane, all on the application's thread ---- */
int tg_control_open(struct toggle_agent *a, const char *socket_path);
void tg_control_close(struct toggle_agent *a);
/* Intake: read the control lane, if its seq moved, into the desired state (no resolve). */
void tg_control_poll(struct toggle_agent *a);
void tg_status_publish(struct toggle_agent *a);   /* write the status lane */

static inline bool tg_control_changed(const struct toggle_agent *a)
{
	return a->shm.ctl && toggle_shm_control_seq(a->shm.ctl) != a->ctl_seq;
}

/* ---- registry.c: graph records ---- */
int tg_registry_init(struct toggle_agent *a);
void tg_registry_free(struct toggle_agent *a);
void tg_graph_reset_exec(struct tg_graph *g, CUgraphExec exec);
/*
 * Forget everything recorded for g (a new capture reuses its handle; forget
 * and a destroyed graph's unbind); with keep_life the graph's lifetime object
 * stays.
 */
void tg_graph_clear(struct toggle_agent *a, struct tg_graph *g, bool keep_life);
/* Whether g's handle now names another graph than the one recorded (slow paths). */
bool tg_graph_replaced(struct toggle_agent *a, const struct tg_graph *g);
/* Whether g's bound exec handle now names another exec than the one bound. */
bool tg_exec_replaced(struct toggle_agent *a, const struct tg_graph *g);
/* Forget a record whose handle names another graph: it passes as unrelated. */
void tg_graph_drop(struct toggle_agent *a, struct tg_graph *g);
/* At every slow-path look (launch, bind, step, ...): act on destructors run since the last. */
void tg_registry_sweep(struct toggle_agent *a);
/* Record the node a capture's last launch added, with its device handle (0: none). */
/* attrs: the node may hold launch attributes of the application's (struct tg_node). */
int tg_record(struct toggle_agent *a, CUstream stream, struct toggle_hook hook, uint64_t devnode,
	      bool attrs);
/* A record refused with `why`: if stream is capturing, its graph fails closed (late). */
void tg_record_refused(struct toggle_agent *a, CUstream stream, struct toggle_hook hook, int why);
/* The same for a producer launched into capture `id` of graph (NULL: nothing). */
void tg_record_refused_in(struct toggle_agent *a, CUgraph graph, uint64_t id,
			  struct toggle_hook hook, int why);
/*
 * Mark the record of graph (capture `id`) late, with note (the first reason
 * stays); nodes are nodes of that capture, kept to recognise a new graph
 * behind the handle.  Leaves the error text alone.
 */
void tg_graph_mark_late(struct toggle_agent *a, CUgraph graph, uint64_t id, const char *note,
			const CUgraphNode *nodes, size_t n);
/* The record of the graph capture `id` is building (a reused handle's is cleared). */
struct tg_graph *tg_graph_for_capture(struct toggle_agent *a, CUgraph graph, uint64_t id);
/* Record n kernel nodes of capture `id` under one hook: all of them or none. */
int tg_record_nodes(struct toggle_agent *a, CUgraph graph, uint64_t id, const CUgraphNode *nodes,
		    size_t n, struct toggle_hook hook);

/* ---- region.c: producer regions ---- */
void tg_region_close(struct toggle_agent *a);
/* Regions still open in graph's capture (it ended: graph is launched or bound): late. */
void tg_region_ended(struct toggle_agent *a, CUgraph graph);
/* toggle_capture_end: regions whose capture ended while they were open make their graph late. */
void tg_region_capture_end(struct toggle_agent *a);

/* ---- device.c ---- */
int tg_device_open(struct toggle_agent *a);       /* 0, or a reason in a->err */
void tg_device_close(struct toggle_agent *a);
/* Decide how g runs and, in device mode, set it up for exec and upload it. */
int tg_device_bind(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec);
/* Enqueue the current set's mask for g on stream, before its launch. */
int tg_device_sync(struct toggle_agent *a, struct tg_graph *g, CUstream stream);
/* Make stream `to` wait for the work enqueued on `from` so far (an event). */
int tg_device_order(struct toggle_agent *a, struct tg_graph *g, CUstream from, CUstream to);
void tg_device_graph_free(struct toggle_agent *a, struct tg_graph *g);
/* At step_begin (the step already moved): read the planners' reports if one signalled. */
void tg_device_step(struct toggle_agent *a);
/* Take what g's planner reported since the last look (plain loads; a device-mode graph). */
void tg_device_poll(struct toggle_agent *a, struct tg_graph *g);
/* toggle_launch_producer for a non-NULL agent (copyout.c launches through it). */
int tg_launch_producer(struct toggle_agent *a, const CUlaunchConfig *config, CUfunction fn,
		       void **params, struct toggle_hook hook);

/* ---- copyout.c ---- */
void tg_copyout_close(struct toggle_agent *a);

/* ---- bind.c ---- */
/*
 * Bind g to exec (NULL unbinds), resetting per-exec state; also decides how
 * the graph runs and, in device mode, sets it up and uploads the exec; a
 * refused or failed device bind leaves it unbound.
 */
int tg_graph_bind_exec(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec);

/* ---- sync.c: node states of the main and the full exec (host modes) ---- */
/* g's main exec brought to the current set; 0 or the failure (states then unknown). */
int tg_sync_main(struct toggle_agent *a, struct tg_graph *g);
/* Whether every node of g's main exec holds what want asks of its hook. */
bool tg_synced_to(const struct tg_graph *g, const struct toggle_set *want);
/* Host modes: g's full exec brought to the current set (its own node states). */
int tg_full_sync(struct toggle_agent *a, struct tg_graph *g);
/* Whether g's full exec (host modes) holds the current set already. */
bool tg_full_holds(const struct toggle_agent *a, const struct tg_graph *g);

/* ---- replay.c ---- */
int tg_graph_sync(struct toggle_agent *a, struct tg_graph *g);
/* Apply: every bound host-mode exec brought to the current set (toggle_apply_all). */
int tg_apply_all(struct toggle_agent *a);

#endif
