/*
 * control.c - the agent's side of the daemon lane: reading the control lane
 * (standing set, plan batches) and publishing the status lane.
 *
 * The intake of a step's slow path: what the lane says goes into the
 * desired state (desired.c) and nothing more; the caller resolves the set
 * afterwards (tg_resolve_step, or tg_resolve_stepless before the first
 * step) and applies it.  Runs on the application's thread only, at
 * step_begin and (for agents that never begin steps) at launch, and only
 * when the control sequence number moved: the replay path reads one 64-bit
 * word otherwise.  Everything read
 * from shared memory is checked: a malformed control lane is counted and
 * ignored, never applied in part.
 */
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"
#include "conn.h"

/* A batch is at most one ring (plan_take_batch) and is submitted whole to
 * the agent's plan table: the table must hold one. */
_Static_assert(TOGGLE_SHM_PLAN_RING <= TOGGLE_MAX_PLAN, "a plan batch fits the plan table");

int tg_control_open(struct toggle_agent *a, const char *socket_path)
{
	int rc = toggle_shm_create(&a->shm, a->err, sizeof(a->err));
	if (rc)
		return rc;
	a->status_buf = calloc(1, sizeof(*a->status_buf));
	if (!a->status_buf)
		return TOGGLE_ENOMEM;
	struct pbw_register reg = {
		.name = a->name,
		.group = a->group,
		.hook_types = a->catalog.type_names,
		.n_types = a->catalog.n_types,
		.n_layers = a->catalog.n_layers,
		.mode = (uint32_t)a->mode,
		.driver_version = a->cu.driver_version,
		.shm_size = a->shm.size,
	};
	if (!a->cu.dl)
		reg.driver_version = 0; /* the simulator */
	tg_status_publish(a);
	return tg_conn_start(socket_path, a->shm.fd, &reg, &a->conn, a->err, sizeof(a->err));
}

int toggle_conn_get(const struct toggle_agent *a, struct toggle_conn_info *out)
{
	if (!a || !out)
		return TOGGLE_EINVAL;
	if (!a->conn) {
		memset(out, 0, sizeof(*out));
		out->state = TOGGLE_CONN_STANDALONE;
		return 0;
	}
	tg_conn_info(a->conn, out);
	return 0;
}

const char *toggle_conn_state_name(enum toggle_conn_state state)
{
	switch (state) {
	case TOGGLE_CONN_STANDALONE: return "standalone";
	case TOGGLE_CONN_CONNECTING: return "connecting";
	case TOGGLE_CONN_CONNECTED: return "connected";
	case TOGGLE_CONN_RECONNECTING: return "reconnecting";
	}
	return "?";
}

void tg_control_close(struct toggle_agent *a)
{
	tg_conn_stop(a->conn);
	a->conn = NULL;
	if (a->shm.base)
		toggle_shm_unmap(&a->shm);
	free(a->status_buf);
	a->status_buf = NULL;
}

static bool set_in_catalog(const struct toggle_agent *a, const uint64_t *words)
{
	struct toggle_set s;
	memcpy(s.bits, words, sizeof(s.bits));
	return toggle_catalog_check_set(&a->catalog, &s) == 0;
}

/* Reject a batch: nothing of it applies; the daemon sees it in the status
 * lane.  Only a late batch is a late-plan anomaly (a malformed one is counted
 * as a control error, a full plan table or no memory is neither). */
static void plan_reject(struct toggle_agent *a, uint64_t batch, int64_t step, bool late)
{
	a->plan_rejected++;
	a->plan_rejected_batch = batch;
	a->plan_rejected_step = step;
	a->anomalies.late_plans += late;
}

/* Apply the batch at slots [first, first+len): all of it or none. */
static void plan_take_batch(struct toggle_agent *a, uint64_t first, uint64_t len,
			    const struct toggle_shm_plan_slot *head)
{
	struct toggle_plan_entry *e = calloc(len, sizeof(*e));
	if (!e) {
		plan_reject(a, head->batch, head->step, false);
		return;
	}
	struct toggle_shm_plan_slot slot;
	bool ok = true;
	int64_t late = -1;
	for (uint64_t k = 0; k < len && ok; k++) {
		toggle_shm_plan_slot_read(a->shm.ctl, first + k, &slot);
		ok = slot.batch == head->batch && slot.batch_len == len && slot.batch_index == k &&
		     set_in_catalog(a, slot.set);
		e[k].step = slot.step;
		memcpy(e[k].set.bits, slot.set, sizeof(e[k].set.bits));
		/* Steps up to the current one have begun (step_begin polls before it moves). */
		if (ok && a->step >= 0 && slot.step <= a->step && late < 0)
			late = slot.step;
	}
	if (!ok)
		a->control_errors++;
	if (!ok || late >= 0 || tg_plan_submit(a, e, len) != 0)
		plan_reject(a, head->batch, late >= 0 ? late : head->step, ok && late >= 0);
	free(e);
}

static void plan_take(struct toggle_agent *a, const struct toggle_shm_control_view *v)
{
	if (v->plan_clears != a->plan_clears) {
		/* A clear drops everything pending, and the slots written before it. */
		tg_plan_clear(a);
		a->plan_clears = v->plan_clears;
		if (v->plan_clear > a->plan_consumed && v->plan_clear <= v->plan_head)
			a->plan_consumed = v->plan_clear;
	}
	if (v->plan_head < a->plan_consumed || v->plan_head - a->plan_consumed > TOGGLE_SHM_PLAN_RING) {
		/* The daemon broke the ring contract: skip what cannot be trusted. */
		a->control_errors++;
		a->plan_consumed = v->plan_head;
		return;
	}
	while (a->plan_consumed < v->plan_head) {
		struct toggle_shm_plan_slot head;
		toggle_shm_plan_slot_read(a->shm.ctl, a->plan_consumed, &head);
		uint64_t len = head.batch_len;
		if (len == 0 || head.batch_index != 0 || len > v->plan_head - a->plan_consumed) {
			a->control_errors++;
			a->plan_consumed = v->plan_head;
			return;
		}
		plan_take_batch(a, a->plan_consumed, len, &head);
		a->plan_consumed += len;
	}
}

/*
 * An aligned standing set: it waits for its step, or is refused whole when
 * that step has begun (or the agent has none: a stepless agent could only
 * take it at once).  Refused, nothing changes: the standing set and any
 * aligned set still pending stay as they were, and the status lane says
 * which version was refused at which step.  A set the agent already runs
 * as its standing set is no change and never late (a restarted daemon
 * rewrites the lane it left).
 */
static void control_aligned(struct toggle_agent *a, const struct toggle_set *s, int64_t step,
			    uint64_t version)
{
	if (!set_in_catalog(a, s->bits) || step < 0) {
		a->control_errors++;
		return;
	}
	if (a->step >= 0 && step > a->step) {
		/* step_begin takes it at exactly that step, or refuses it if it
		 * skips over it (steps need only increase). */
		a->aligned_pending = true;
		a->aligned_step = step;
		a->aligned_set = *s;
		a->aligned_version = version;
		return;
	}
	if (!a->aligned_pending && toggle_set_equal(&a->standing, s))
		return;
	tg_aligned_late(a, version);
}

void tg_control_poll(struct toggle_agent *a)
{
	struct toggle_shm_control_view v;
	uint64_t seq = toggle_shm_control_seq(a->shm.ctl);
	if (seq == a->ctl_seq || (seq & 1))
		return; /* unchanged, or a write in progress: next time */
	if (toggle_shm_control_read(a->shm.ctl, &v) != 0)
		return;
	a->ctl_seq = seq;
	if (v.version != a->ctl_version) {
		struct toggle_set s;
		memcpy(s.bits, v.standing, sizeof(s.bits));
		if (v.standing_flags & TOGGLE_SHM_STANDING_ALIGNED)
			control_aligned(a, &s, v.standing_step, v.version);
		else if (tg_standing_set(a, &s) != 0)
			a->control_errors++;
		else
			a->aligned_pending = false; /* a plain set replaces a pending aligned one */
		a->ctl_version = v.version;
	}
	plan_take(a, &v);
}

void tg_status_publish(struct toggle_agent *a)
{
	struct toggle_shm_status *s = a->status_buf;
	s->step = a->step;
	s->version_seen = a->ctl_version;
	s->version_applied = a->ctl_published;
	s->plan_consumed = a->plan_consumed;
	s->plan_rejected = a->plan_rejected;
	s->plan_rejected_batch = a->plan_rejected_batch;
	s->plan_rejected_step = a->plan_rejected_step;
	s->features = TOGGLE_SHM_FEAT_ALIGNED;
	s->aligned_rejected = a->aligned_rejected;
	s->aligned_rejected_version = a->aligned_rejected_version;
	s->aligned_rejected_step = a->aligned_rejected_step;
	struct toggle_stats st;
	tg_stats_get(a, &st);
	s->replays = st.launches;
	if (a->conn)
		tg_conn_lane(a->conn, &s->conn);
	const struct toggle_anomalies *an = &a->anomalies;
	uint64_t counters[TOGGLE_SHM_AN_COUNT] = {
		[TOGGLE_SHM_AN_RECORD_OUTSIDE_WINDOW] = an->record_outside_window,
		[TOGGLE_SHM_AN_RECORD_NOT_CAPTURING] = an->record_not_capturing,
		[TOGGLE_SHM_AN_RECORD_NOT_KERNEL] = an->record_not_kernel,
		[TOGGLE_SHM_AN_LAUNCH_UNBOUND] = an->launch_unbound,
		[TOGGLE_SHM_AN_LAUNCH_STALE] = an->launch_stale,
		/* A tainted launch is a failed driver call too (on the device): counted
		 * here so that the daemon's anomaly events tell watchers. */
		[TOGGLE_SHM_AN_DRIVER_ERRORS] = an->driver_errors + an->device_tainted,
		[TOGGLE_SHM_AN_LATE_PLANS] = an->late_plans,
		[TOGGLE_SHM_AN_CONTROL_ERRORS] = a->control_errors,
	};
	memcpy(s->anomalies, counters, sizeof(counters));
	memcpy(s->current, a->current.bits, sizeof(s->current));
	s->tainted_launches = a->taint.launches;
	s->tainted_step = a->taint.last_step;
	s->tainted_graph = (uint64_t)(uintptr_t)a->taint.last_graph;
	s->tainted_lost = a->taint.lost;
	s->total_graphs = a->n_graphs;
	s->n_graphs = a->n_graphs < TOGGLE_SHM_MAX_GRAPHS ? a->n_graphs : TOGGLE_SHM_MAX_GRAPHS;
	for (uint64_t i = 0; i < s->n_graphs; i++) {
		const struct tg_graph *g = a->graphs[i];
		s->graphs[i] = (struct toggle_shm_graph){
			.graph = (uint64_t)(uintptr_t)g->graph,
			.exec = (uint64_t)(uintptr_t)(g->bound ? g->exec : NULL),
			.nodes = g->n_nodes,
			.hooks_covered = g->hooks_covered,
			.applied_version = tg_graph_held_version(g),
			.replays = g->replays,
			.last_step = g->last_step,
			.flags = (g->bound ? TOGGLE_SHM_GRAPH_BOUND : 0) |
				 (g->stale ? TOGGLE_SHM_GRAPH_STALE : 0) |
				 (g->dev == TG_DEV_ACTIVE ? TOGGLE_SHM_GRAPH_DEVICE : 0) |
				 (g->dev == TG_DEV_FALLBACK ? TOGGLE_SHM_GRAPH_FALLBACK : 0) |
				 (g->unclean ? TOGGLE_SHM_GRAPH_TAINTED : 0) |
				 (g->blocked ? TOGGLE_SHM_GRAPH_BLOCKED : 0) |
				 (g->bare.exec ? TOGGLE_SHM_GRAPH_BARE : 0) |
				 (tg_bare_running(g) ? TOGGLE_SHM_GRAPH_BARE_RUNNING : 0) |
				 (g->full.exec ? TOGGLE_SHM_GRAPH_FULL : 0) |
				 (tg_full_running(g) || tg_setx_running(g) ? TOGGLE_SHM_GRAPH_FULL_RUNNING : 0),
		};
	}
	toggle_shm_status_write(a->shm.st, s);
}
