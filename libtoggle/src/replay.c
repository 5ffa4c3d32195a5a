/*
 * replay.c - bring execs to the current set and launch them: the hot path.
 *
 * When nothing changed, a launch of a known graph costs one map probe and one
 * version compare before cuGraphLaunch.  When the set changed, only nodes
 * whose cached state differs are set (host modes), or the changed mask words
 * are enqueued on the launch stream for the graph's planner (device mode,
 * device.c).  Any failure refuses the launch, and any failure after the exec
 * was brought to the set but before it was launched leaves the graph marked
 * out of date (applied_version 0), so the next launch redoes the work.
 */

#include "agent_impl.h"
#include "record_impl.h"

int tg_graph_sync(struct toggle_agent *a, struct tg_graph *g)
{
	const struct toggle_set *want = &a->current;
	if (g->gone && tg_synced_to(g, want)) {
		/* Destroyed while its exec is bound, and the set is back at what
		 * that exec holds (on the H200: 0x0f, 0xf0, 0x0f): it runs as it
		 * is, no node is touched. */
		g->applied_version = a->version;
		return 0;
	}
	if (g->gone) {
		/* The driver refuses node handles of a destroyed graph, and the
		 * handles may name another graph's nodes by now: never passed on. */
		a->anomalies.launch_stale++;
		return tg_fail(a, TOGGLE_ESTALE,
			       "graph %p exec %p: the graph was destroyed while its exec is bound, "
			       "so its producers can no longer be set: refused at this set (keep "
			       "the graph alive while its execs are toggled; capture it again)",
			       (void *)g->graph, (void *)g->exec);
	}
	if (g->dev == TG_DEV_ACTIVE) {
		/* The guard against mixing: the planner owns this exec's producers, and
		 * a host toggle would mix with the state it set on the device. */
		a->anomalies.host_on_device_node++;
		return tg_fail(a, TOGGLE_ENOTSUP,
			       "graph %p exec %p: host cuGraphNodeSetEnabled refused: its producers "
			       "are toggled by its planner (device mode); host and device toggles "
			       "never mix on one exec", (void *)g->graph, (void *)g->exec);
	}
	int rc = tg_sync_main(a, g);
	if (!rc)
		g->applied_version = a->version;
	return rc;
}

/*
 * A graph toggled on the host (fallback) whose device-updatable nodes
 * changed: the driver wants an upload before its next launch.  In stream
 * order, so launches already submitted keep the state they were launched with.
 */
static int launch_upload(struct toggle_agent *a, struct tg_graph *g, CUstream stream)
{
	CUresult r = a->cu.graph_upload(g->exec, stream);
	if (r != CUDA_SUCCESS) {
		/* The nodes hold the set but the launch would not see it: not current. */
		g->applied_version = 0;
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "graph %p exec %p: cuGraphUpload after host toggles: %s",
			       (void *)g->graph, (void *)g->exec, tg_cu_errstr(&a->cu, r));
	}
	g->upload_pending = false;
	a->stats.uploads++;
	return 0;
}

static int launch_refuse(struct toggle_agent *a, int code)
{
	a->stats.launches_refused++;
	return code;
}

/* launch_prepare's answer for a record whose handle now names another graph. */
#define TG_LAUNCH_UNRELATED 1

/*
 * The slow path: a known graph that is stale, late, unbound, rebound or out
 * of date.  0: launch it; TG_LAUNCH_UNRELATED: the handle names a new graph
 * (the record was dropped), launch it untouched; < 0: refuse.
 */
static int launch_prepare(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec,
			  CUstream stream, bool own_exec)
{
	/* About to refuse or rebind: is it still the graph recorded under this handle? */
	bool refuse = g->stale || g->late || g->dev == TG_DEV_REFUSED || !g->bound;
	bool rebind = !refuse && (exec != g->exec || tg_exec_replaced(a, g));
	if (!g->gone && (refuse || rebind) && tg_graph_replaced(a, g))
		tg_graph_drop(a, g); /* cleared, or kept for its bound exec alone (gone) */
	if (g->gone && exec == g->exec && tg_exec_replaced(a, g)) {
		g->exec_dead = true; /* a new exec behind that handle (13.1 ids): nothing is ours */
		tg_graph_drop(a, g);
	}
	if (g->gone && exec == g->exec && g->dev != TG_DEV_ACTIVE &&
	    g->applied_version != a->version && !tg_synced_to(g, &a->current) &&
	    tg_life_settle(a, g)) {
		/* Our exec was destroyed too: the one behind its handle is a stranger's. */
		tg_registry_sweep(a);
	}
	if (!tg_graph_related(g))
		return TG_LAUNCH_UNRELATED;
	if (g->gone && exec != g->exec)
		return TG_LAUNCH_UNRELATED; /* its graph is destroyed: another exec is a stranger's */
	if (g->stale) {
		a->anomalies.launch_stale++;
		return tg_fail(a, TOGGLE_ESTALE, "launch of graph %p refused: it was forgotten",
			       (void *)g->graph);
	}
	if (g->late) {
		a->anomalies.launch_unbound++;
		return tg_fail(a, TOGGLE_ECAPTURE,
			       "launch of graph %p refused: %s; capture it again inside a capture "
			       "window, recording every producer", (void *)g->graph, g->note);
	}
	if (g->dev == TG_DEV_REFUSED) {
		a->anomalies.launch_unbound++;
		return tg_fail(a, TOGGLE_ENOTSUP, "launch of graph %p refused: %s (strict device mode)",
			       (void *)g->graph, g->note);
	}
	if (!g->bound) {
		a->anomalies.launch_unbound++;
		return tg_fail(a, TOGGLE_EUNBOUND,
			       "launch of graph %p refused: it has %u producer nodes but no bound exec "
			       "(call toggle_graph_bind)", (void *)g->graph, g->n_nodes);
	}
	if (!exec)
		return tg_fail(a, TOGGLE_EINVAL, "launch of graph %p with a NULL exec", (void *)g->graph);
	if (rebind && !g->gone) {
		/* Re-instantiated (maybe behind the old handle): node states unknown. */
		int rc = tg_graph_bind_exec(a, g, exec);
		if (rc)
			return rc;
	}
	if (own_exec)
		tg_bare_leave(a, g); /* the caller launches exec itself: never the bare one */
	else if (g->dev == TG_DEV_ACTIVE && (g->bare.exec || g->full.exec) &&
		 g->applied_version != a->version)
		tg_device_poll(a, g); /* a taint that blocks it blocks the bare and full execs too */
	int pick = g->applied_version != a->version && !own_exec ? tg_bare_pick(a, g) : 0;
	if (g->applied_version != a->version && pick <= 0) {
		/* pick < 0: the full exec's sync failed, refused as any failed sync */
		int rc = pick < 0                  ? pick
			 : g->dev == TG_DEV_ACTIVE ? tg_device_sync(a, g, stream)
						   : tg_graph_sync(a, g);
		if (rc && !g->gone && tg_graph_replaced(a, g)) {
			/* Bound graph destroyed, its handle reused: not ours any more
			 * (unless its exec, this one, lives on: then refused). */
			tg_graph_drop(a, g);
			if (!tg_graph_related(g))
				return TG_LAUNCH_UNRELATED;
		}
		if (rc)
			return rc;
	}
	return g->upload_pending ? launch_upload(a, g, stream) : 0;
}

/* Daemon lane around a launch: stepless agents take changes at once; the
 * first replay under a new control version is reported in the status lane. */
static void launch_control_before(struct toggle_agent *a)
{
	if (a->step < 0 && tg_control_changed(a)) {
		tg_control_poll(a);      /* intake */
		tg_resolve_stepless(a);  /* resolve: no step, the standing set */
		a->ctl_version_step = a->ctl_version;
		tg_fast_update(a);
	}
}

static void launch_control_after(struct toggle_agent *a)
{
	if (a->ctl_published != a->ctl_version_step) {
		a->ctl_published = a->ctl_version_step;
		tg_status_publish(a);
		tg_fast_update(a);
	}
}

/* cuGraphLaunch itself failed: nothing ran; node states stay as they are. */
__attribute__((noinline, cold)) static int launch_failed(struct toggle_agent *a, CUgraph graph,
							  CUgraphExec exec, CUresult r)
{
	a->anomalies.driver_errors++;
	return launch_refuse(a, tg_fail(a, TOGGLE_ECUDA, "cuGraphLaunch(graph %p, exec %p): %s",
					(void *)graph, (void *)exec, tg_cu_errstr(&a->cu, r)));
}

/* Device mode, a launch of g: at its first of the step, note the index (core.h). */
__attribute__((noinline, cold)) static void replay_note_step(const struct toggle_agent *a,
							   struct tg_graph *g)
{
	if (g->last_step != a->step && g->dev == TG_DEV_ACTIVE && g->dev_setup)
		tg_dev_note_step(g, a->step);
}

/* The launch of g's exec happened, or (toggle_graph_prepare) is promised:
 * one more launch index (device mode's taint report maps runs to steps
 * with it), and the stream the next mask write must be ordered after. */
static inline void replay_account(struct toggle_agent *a, struct tg_graph *g, CUstream stream)
{
	/* Device mode: a graph's first launch of a step notes where the step's
	 * launch indexes start (tainted launches are told by step), here rather
	 * than at step_begin for every bound graph. */
	if (__builtin_expect(a->dev.on, 0))
		replay_note_step(a, g);
	g->replays++;
	g->last_step = a->step;
	/* Each exec keeps its own last stream: device mode's mask writes wait
	 * for the device exec's (last_stream; the bare and full execs read no
	 * mask), a switch of execs for the last launch's (tg_last_launch). */
	*g->run_slot = stream;
}

/*
 * Device mode: the mask words a prepare just enqueued on its stream (or its
 * wait for an earlier stream's) may never see the promised launch there, and
 * nothing else orders a launch on another stream after them (launches of one
 * exec are serialised by the driver, but these are not launches).  Launches
 * leave the fast path until one has waited for that stream (tg_device_sync
 * joins); prepares on that same stream stay fast through prep_version.
 */
static void replay_unordered(struct tg_graph *g)
{
	g->prep_unordered = true;
	g->prep_version = g->applied_version;
	g->applied_version = 0;
}

/*
 * Every launch or prepare that is not a plain replay of an up-to-date exec:
 * the guard, the exec brought to the set on stream, the accounting.  One
 * function for both, so that toggle_graph_prepare() + cuGraphLaunch and
 * toggle_graph_launch() cannot drift apart; `launch` says whether to call
 * cuGraphLaunch here (prepare: the caller does, right after).
 */
__attribute__((noinline, cold)) static int replay_slow(struct toggle_agent *a, CUgraph graph,
							CUgraphExec exec, CUstream stream,
							bool launch)
{
	if (a->shm.ctl)
		launch_control_before(a);
	tg_registry_sweep(a); /* what the driver said was destroyed, before the record is trusted */
	if (a->n_regions)
		tg_region_ended(a, graph); /* a region its capture ended with: late */
	struct tg_graph *g = tg_graph_find(a, graph);
	CUresult r;
	int prep = 0;
	/* Device mode: a prepare on another stream than the exec's last launch.
	 * Its launch may never come, and the next mask write, ordered after
	 * this stream alone (tg_device_sync), must still follow that launch. */
	bool moves = g && !launch && g->dev == TG_DEV_ACTIVE && g->last_stream &&
		     g->last_stream != stream;
	/* Stale, late and unbound records hold exec NULL and version 0 (versions
	 * start at 1), so these two compares are the whole fast-path guard. */
	if (g && tg_graph_related(g) &&
	    __builtin_expect(exec != g->exec || g->applied_version != a->version ||
			     (!launch && g->run != g->exec) || moves, 0)) {
		uint64_t words = a->stats.mask_words, joins = a->stats.stream_joins;
		prep = launch_prepare(a, g, exec, stream, !launch);
		if (prep < 0)
			return launch_refuse(a, prep);
		if (prep == 0 && moves && g->dev == TG_DEV_ACTIVE && a->stats.stream_joins == joins &&
		    g->last_stream && g->last_stream != stream) {
			int rc = tg_device_order(a, g, g->last_stream, stream);
			if (rc)
				return launch_refuse(a, rc);
		}
		if (!launch && prep == 0 && g->dev == TG_DEV_ACTIVE &&
		    (a->stats.mask_words != words || a->stats.stream_joins != joins ||
		     g->prep_unordered))
			replay_unordered(g);
	}
	if (!g || !tg_graph_related(g) || prep == TG_LAUNCH_UNRELATED) {
		/* Unrelated to us (or a planner without producers): launched untouched;
		 * a prepare has nothing to do. */
		if (!launch)
			return 0;
		r = a->cu.graph_launch(exec, stream);
		if (r != CUDA_SUCCESS) {
			a->anomalies.driver_errors++;
			return tg_fail(a, TOGGLE_ECUDA, "cuGraphLaunch(graph %p, unrelated): %s",
				       (void *)graph, tg_cu_errstr(&a->cu, r));
		}
		a->stats.launches_unrelated++;
		return 0;
	}
	CUgraphExec last_run = NULL;
	CUstream last_any = tg_last_launch(g, &last_run);
	if (last_any && last_any != stream && last_run != g->run) {
		/* The first launch after a switch between the exec and the bare or
		 * full one, on another stream (any mode): the driver serialises
		 * launches of one exec, not of two, so this one waits for the last
		 * (an event), as launches of the one exec did before the switch
		 * (check_bare_streams.c, check_device_bare.c).  A prepare too: the
		 * caller launches the exec right after. */
		int rc = tg_device_order(a, g, last_any, stream);
		if (rc)
			return launch_refuse(a, rc);
	}
	if (launch) {
		r = a->cu.graph_launch(g->run, stream); /* exec, its bare or full exec (bare.c) */
		if (r != CUDA_SUCCESS) {
			if (g->prep_unordered && g->applied_version)
				replay_unordered(g); /* still unordered: keep launches slow */
			return launch_failed(a, graph, g->run, r);
		}
		/* After last_stream's mask work (a join when stream differs):
		 * ordered.  Not a bare or full launch: it reads no mask and made no
		 * join, so the device exec's next launch must still wait for that
		 * work (tg_device_sync), or it may read the mask before it lands. */
		if (g->run == g->exec) {
			g->prep_unordered = false;
			g->prep_version = 0;
		}
	}
	replay_account(a, g, stream);
	if (launch && a->rec_on)
		tg_record_launch(a, g, stream); /* the monitor buffers after it, on its stream */
	if (a->shm.ctl)
		launch_control_after(a);
	return 0;
}

/*
 * The hot path: a known graph whose bound exec holds the current set, with no
 * daemon-lane work pending (tg_fast_update).  Stale and unbound records hold
 * exec NULL and version 0 (versions start at 1), so the two compares are the
 * whole guard.  Anything else, and any failure, goes through replay_slow().
 */
int toggle_graph_launch(struct toggle_agent *a, CUgraph graph, CUgraphExec exec, CUstream stream)
{
	if (__builtin_expect(!a, 0))
		return TOGGLE_EINVAL;
	struct tg_graph *g = tg_graph_find(a, graph);
	if (__builtin_expect(!g || exec != g->exec || g->applied_version != tg_fast_version(a), 0))
		return replay_slow(a, graph, exec, stream, true);
	CUresult r = a->cu.graph_launch(g->run, stream); /* exec, its bare or full exec (bare.c) */
	if (__builtin_expect(r != CUDA_SUCCESS, 0))
		return launch_failed(a, g->graph, g->run, r); /* from g: fewer live registers */
	replay_account(a, g, stream); /* device mode orders its next mask write after it */
	if (__builtin_expect(a->rec_on != NULL, 0))
		tg_record_launch(a, g, stream); /* the recorder (record.c): one branch when off */
	return 0;
}

/*
 * toggle_graph_launch() without the cuGraphLaunch: same guard, same set.  The
 * caller launches exec itself, never the producer-free one: a graph whose
 * launches run the bare exec goes through the slow path, back to the main.
 */
int toggle_graph_prepare(struct toggle_agent *a, CUgraph graph, CUgraphExec exec, CUstream stream)
{
	if (__builtin_expect(!a, 0))
		return TOGGLE_EINVAL;
	struct tg_graph *g = tg_graph_find(a, graph);
	/* Device mode: a prepare on another stream than the last launch's is
	 * ordered after it (replay_slow: its launch may never come). */
	if (__builtin_expect(!g || exec != g->exec || g->run != g->exec ||
			     (stream != g->last_stream && g->dev == TG_DEV_ACTIVE), 0))
		return replay_slow(a, graph, exec, stream, false);
	/* Up to date; or (device mode) up to date for a prepare on the stream
	 * of the last one (checked above), whose mask work is not known to be
	 * launched yet (prep_version is 0 in the host modes). */
	uint64_t fast = tg_fast_version(a);
	if (__builtin_expect(g->applied_version != fast && g->prep_version != fast, 0))
		return replay_slow(a, graph, exec, stream, false);
	replay_account(a, g, stream);
	return 0;
}

int toggle_apply_all(struct toggle_agent *a)
{
	if (!a)
		return TOGGLE_EINVAL;
	return tg_apply_all(a);
}

int tg_apply_all(struct toggle_agent *a)
{
	tg_registry_sweep(a);
	int first = 0;
	for (size_t i = 0; i < a->n_graphs; i++) {
		struct tg_graph *g = a->graphs[i];
		/* Device-mode graphs take their set in stream order, at their launch.
		 * A destroyed exec is never touched (its next launch rebinds), nor an
		 * exec whose graph is destroyed (its launches at another set refuse). */
		if (g->stale || !g->bound || g->applied_version == a->version ||
		    g->dev == TG_DEV_ACTIVE || g->exec_dead || g->gone)
			continue;
		/* A new exec behind the bound handle: its node states are unknown. */
		bool rebind = tg_exec_replaced(a, g);
		if (rebind && tg_graph_replaced(a, g)) {
			g->exec_dead = true; /* a new exec behind its handle: the bound one is gone */
			tg_graph_drop(a, g); /* graph and exec destroyed, handles reused */
			continue;
		}
		int rc = rebind ? tg_graph_bind_exec(a, g, g->exec) : 0;
		CUgraphExec ran = g->run;
		if (rc == 0)
			rc = tg_bare_pick(a, g);
		if (rc == 0)
			rc = tg_graph_sync(a, g); /* the main exec runs this set */
		else if (rc > 0)
			rc = 0; /* picked another exec, which holds the set */
		CUgraphExec last = NULL;
		if (rc == 0 && g->run != ran && tg_last_launch(g, &last))
			g->applied_version = 0; /* a switch of execs: its launch orders it (replay_slow) */
		if (rc && tg_graph_replaced(a, g)) {
			tg_graph_drop(a, g); /* the handle names another graph now */
			continue;
		}
		if (rc && !first)
			first = rc;
		if (g->upload_pending)
			g->applied_version = 0; /* its launch uploads first (launch_prepare) */
	}
	return first;
}
