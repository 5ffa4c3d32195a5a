/*
 * commit.c - saving the desired state off the loop, and answering a write
 * only once what it changed is durable.
 *
 * Order: durable before visible.  A write handler checks the command
 * against the accepted state, applies it there (the agent's ctl and plans,
 * and the store's entries); the dispatcher queues its reply here to wait
 * (td_commit_wait).  The check phase starts
 * a save of everything accepted so far, one save at a time: the file work
 * (write, fsync, rename, fsync of the directory) runs on libuv's thread pool
 * while the loop keeps serving reads, pushes, accepts and watchers, and the
 * writes accepted meanwhile wait for the next save (group commit).  When a
 * save is done, each agent it holds gets that state on its control lane and
 * the waits are told, in order: the dispatcher then sends the replies, in
 * request order per peer (server.c holds their place in the peer's queue).
 * When it fails, every write not yet durable is answered TOGGLE_EIO with
 * the reason, and the accepted state of every agent and store entry goes
 * back to the durable one: nothing that could not be saved ever reaches an
 * agent.  Code that is not a peer's request (the cluster layer) learns a
 * save's outcome the same way, through a callback queued with the replies
 * (td_commit_notify).  commit.c knows no peer: a wait is a function the
 * layer above gave it.
 *
 * Checkpoints run beside the saves, on the thread pool too (ckpt_work):
 * when a save has rotated the journal, the checkpoint writes the old
 * journal's entries to their files while later saves append to the new
 * journal, so a checkpoint never holds a write.  A checkpoint that fails is
 * a save failure all the same (logged once, counted, `status` gives the
 * reason): saves are refused (TOGGLE_EIO) until one succeeds, tried again
 * each second.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "toggled.h"

#define COMMIT_RETRY_MS 1000 /* rewrite after a failed save left a file unsure */
/* Per loop turn: a save of 256 agents is made visible over several turns,
 * so a read waits for a bounded slice of it, not the whole (issue 17). */
#define COMMIT_LANES_PER_TURN   32
#define COMMIT_ANSWERS_PER_TURN 64

/* The accepted state back to the durable one (a->plans holds TD_MAX_PENDING_PLAN). */
static void agent_rollback(struct td_agent *a)
{
	const struct td_agent_state *d = &a->durable;
	a->ctl = d->ctl;
	a->has_standing = d->has_standing;
	a->next_batch = d->next_batch;
	a->n_plans = d->n_plans <= TD_MAX_PENDING_PLAN ? d->n_plans : TD_MAX_PENDING_PLAN;
	if (a->n_plans)
		memcpy(a->plans, d->plans, a->n_plans * sizeof(*a->plans));
	a->unsaved = false;
	if (a->saving)
		td_agent_state_free(&a->saving_state);
	a->saving = false;
}

static void on_retry(uv_timer_t *t);
static void commit_forget_agent(struct td_agent *a);

/* An agent leaves (report.h): out of the queue of lanes to write and the list
 * of changed agents. */
static void commit_on_change(void *arg, const struct td_change *ch)
{
	(void)arg;
	if (ch->kind == TD_AGENT_LEFT)
		commit_forget_agent(ch->a);
}

int td_commit_init(struct td_daemon *d)
{
	struct td_commit *c = &d->commit;
	memset(c, 0, sizeof(*c));
	c->queued_tail = &c->queued;
	c->answers_tail = &c->answers;
	c->work.data = d;
	c->ckpt_work.data = d;
	uv_timer_init(d->loop, &c->retry);
	c->retry.data = d;
	/* The load could not fold a damaged or old journal into the files: saves are refused
	 * until it can (the store says why), tried again each second from now on. */
	if (d->store.ckpt_failed) {
		c->failing = true;
		c->failures++;
		snprintf(c->reason, sizeof(c->reason), "checkpoint: %.*s", (int)sizeof(c->reason) - 13,
			 d->store.ckpt_reason);
		uv_timer_start(&c->retry, on_retry, COMMIT_RETRY_MS, 0);
	}
	return td_report_subscribe(d, TD_SUB_OBSERVE, commit_on_change, NULL);
}

void td_commit_wait(struct td_daemon *d, struct td_commit_wait *w)
{
	struct td_commit *c = &d->commit;
	w->next = NULL;
	*c->queued_tail = w;
	c->queued_tail = &w->next;
}

int td_commit_notify(struct td_daemon *d, td_commit_fn *fn, void *arg)
{
	struct td_commit_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return TOGGLE_ENOMEM;
	w->fn = fn;
	w->arg = arg;
	w->owned = true;
	td_commit_wait(d, w);
	return 0;
}

/* fn may free the memory w lies in: nothing of w is read after it. */
static void answer_ok(struct td_daemon *d, struct td_commit_wait *w)
{
	(void)d;
	bool owned = w->owned;
	w->fn(w->arg, 0, NULL);
	if (owned)
		free(w);
}

static void answer_eio(struct td_daemon *d, struct td_commit_wait *w, const char *msg)
{
	if (w->write)
		d->commit.failed_writes++;
	bool owned = w->owned;
	w->fn(w->arg, TOGGLE_EIO, msg);
	if (owned)
		free(w);
}

static void publish_add(struct td_commit *c, struct td_agent *a)
{
	if (a->publish_queued)
		return; /* its lane is written later with what is durable then */
	a->publish_queued = true;
	a->publish_next = NULL;
	if (c->publish_tail)
		c->publish_tail->publish_next = a;
	else
		c->publish_head = a;
	c->publish_tail = a;
	c->publish_added++;
}

void td_commit_accept(struct td_agent *a)
{
	td_commit_touch(a);
	td_agent_persist(a);
}

void td_commit_touch(struct td_agent *a)
{
	struct td_commit *c = &a->d->commit;
	a->unsaved = true;
	if (a->touched)
		return;
	a->touched = true;
	a->touched_next = c->touched;
	c->touched = a;
}

static void touched_remove(struct td_commit *c, struct td_agent *a)
{
	for (struct td_agent **pp = &c->touched; *pp; pp = &(*pp)->touched_next)
		if (*pp == a) {
			*pp = a->touched_next;
			break;
		}
	a->touched = false;
	a->touched_next = NULL;
}

static void commit_forget_agent(struct td_agent *a)
{
	struct td_commit *c = &a->d->commit;
	if (a->touched)
		touched_remove(c, a);
	if (!a->publish_queued)
		return;
	struct td_agent *prev = NULL;
	for (struct td_agent *x = c->publish_head; x; prev = x, x = x->publish_next) {
		if (x != a)
			continue;
		if (prev)
			prev->publish_next = a->publish_next;
		else
			c->publish_head = a->publish_next;
		if (c->publish_tail == a)
			c->publish_tail = prev;
		break;
	}
	a->publish_queued = false;
	c->publish_done++; /* counted as left: the replies behind it do not wait */
}

/*
 * Durable, so visible: the saved agents' lanes are written, then the
 * replies go, oldest first, a bounded number per turn.  A reply waits for
 * every agent queued before it (publish_mark), so it never leaves before
 * the lane of an agent it changed shows the change.
 */
bool td_commit_step(struct td_daemon *d)
{
	struct td_commit *c = &d->commit;
	for (int n = 0; n < COMMIT_LANES_PER_TURN && c->publish_head; n++) {
		struct td_agent *a = c->publish_head;
		c->publish_head = a->publish_next;
		if (!c->publish_head)
			c->publish_tail = NULL;
		a->publish_queued = false;
		a->publish_next = NULL;
		c->publish_done++;
		td_agent_write_control(a);
	}
	for (int n = 0; n < COMMIT_ANSWERS_PER_TURN && c->answers; n++) {
		struct td_commit_wait *w = c->answers;
		if (w->publish_mark > c->publish_done)
			break;
		c->answers = w->next;
		if (!c->answers)
			c->answers_tail = &c->answers;
		answer_ok(d, w);
	}
	return c->publish_head || c->answers;
}

/* Durable: the saved agents' state becomes durable and joins the lanes to
 * write; the replies queue behind them (td_commit_step sends both). */
static void commit_saved(struct td_daemon *d, struct td_commit_wait *list)
{
	struct td_commit *c = &d->commit;
	for (struct td_agent **pp = &c->touched, *a; (a = *pp);) {
		if (a->saving) {
			td_agent_state_free(&a->durable);
			a->durable = a->saving_state;
			memset(&a->saving_state, 0, sizeof(a->saving_state));
			a->saving = false;
			publish_add(c, a);
		}
		if (a->unsaved) { /* changed again meanwhile: the next save */
			pp = &a->touched_next;
			continue;
		}
		*pp = a->touched_next;
		a->touched = false;
		a->touched_next = NULL;
	}
	for (struct td_commit_wait *w = list; w; w = w->next)
		w->publish_mark = c->publish_added;
	if (list) {
		*c->answers_tail = list;
		while (*c->answers_tail)
			c->answers_tail = &(*c->answers_tail)->next;
	}
	if (!d->store.ckpt_failed) {
		if (c->failing)
			log_info("state: saved under %s again (%llu saves had failed)",
				 d->cfg.state_dir, (unsigned long long)c->failures);
		c->failing = false;
		c->reason[0] = '\0';
	}
	td_timer_update(d);
}

/* Every write not yet durable fails, those accepted since the save began too:
 * they were checked against state that is now rolled back. */
static void commit_failed(struct td_daemon *d, struct td_commit_wait *list, const char *reason)
{
	struct td_commit *c = &d->commit;
	c->failures++;
	if (!c->failing)
		log_warnx("state: cannot save the desired state: %s; writes are answered with "
			  "TOGGLE_EIO and not applied until a save succeeds", reason);
	c->failing = true;
	snprintf(c->reason, sizeof(c->reason), "%s", reason);
	char msg[400];
	snprintf(msg, sizeof(msg), "desired state not saved, nothing applied: %s", reason);
	for (struct td_agent *a = c->touched, *next; a; a = next) {
		next = a->touched_next;
		agent_rollback(a);
		a->touched = false;
		a->touched_next = NULL;
	}
	c->touched = NULL;
	td_store_rollback(&d->store);
	struct td_commit_wait *q = c->queued;
	c->queued = NULL;
	c->queued_tail = &c->queued;
	for (int pass = 0; pass < 2; pass++)
		for (struct td_commit_wait *w = pass ? q : list, *next; w; w = next) {
			next = w->next;
			answer_eio(d, w, msg);
		}
	/* A file the failed save replaced is written back to its saved value later;
	 * a failed checkpoint is tried again (its timer is not pushed back). */
	if ((d->store.dirty || d->store.ckpt_failed) && !c->stopping &&
	    !uv_is_active((uv_handle_t *)&c->retry))
		uv_timer_start(&c->retry, on_retry, COMMIT_RETRY_MS, 0);
}

static void commit_done(struct td_daemon *d, int rc, const char *reason)
{
	struct td_commit_wait *list = d->commit.inflight;
	d->commit.inflight = NULL;
	if (rc == 0)
		commit_saved(d, list);
	else
		commit_failed(d, list, reason);
}

static void work_run(uv_work_t *w)
{
	struct td_daemon *d = w->data;
	td_store_job_run(d->commit.job);
}

static void work_done(uv_work_t *w, int status)
{
	struct td_daemon *d = w->data;
	struct td_commit *c = &d->commit;
	char reason[256] = "";
	struct td_store_job *j = c->job;
	c->job = NULL;
	int rc = td_store_job_end(&d->store, j, reason, sizeof(reason));
	if (status != 0 && rc == 0) {
		rc = TOGGLE_EIO;
		snprintf(reason, sizeof(reason), "the save did not run: %s", uv_strerror(status));
	}
	commit_done(d, rc, reason);
}

/* ---- checkpoints ------------------------------------------------------------ */

static void ckpt_run(uv_work_t *w)
{
	struct td_daemon *d = w->data;
	td_store_job_run(d->commit.ckpt);
}

static void ckpt_done(uv_work_t *w, int status)
{
	struct td_daemon *d = w->data;
	struct td_commit *c = &d->commit;
	char reason[256] = "";
	struct td_store_job *j = c->ckpt;
	c->ckpt = NULL;
	if (status != 0) {
		td_store_job_cancel(&d->store, j); /* it did not run: due again */
		log_warnx("state: a checkpoint did not run: %s", uv_strerror(status));
		return;
	}
	bool was_failed = d->store.ckpt_failed;
	if (td_store_ckpt_end(&d->store, j, reason, sizeof(reason)) == 0) {
		if (was_failed && c->failing) { /* the checkpoint was why saves failed */
			log_info("state: checkpoint under %s done, saving again (%llu saves had failed)",
				 d->cfg.state_dir, (unsigned long long)c->failures);
			c->failing = false;
			c->reason[0] = '\0';
		}
		return;
	}
	/* Saves are refused from now on (td_store_job_begin) until a checkpoint succeeds. */
	c->failures++;
	if (!c->failing)
		log_warnx("state: cannot checkpoint the desired state: %s; writes are answered with "
			  "TOGGLE_EIO and not applied until a checkpoint succeeds (tried each second)",
			  reason);
	c->failing = true;
	snprintf(c->reason, sizeof(c->reason), "checkpoint: %s", reason);
	if (!c->stopping)
		uv_timer_start(&c->retry, on_retry, COMMIT_RETRY_MS, 0);
}

/*
 * A checkpoint, when one is due (the journal was rotated, or the load left
 * a journal to fold in) and none is out; after a failure only from the
 * retry timer, so that a failing disk is not hammered.
 */
static void ckpt_maybe_start(struct td_daemon *d, bool retry)
{
	struct td_commit *c = &d->commit;
	if (c->ckpt || c->stopping || !td_store_ckpt_due(&d->store) ||
	    (d->store.ckpt_failed && !retry))
		return;
	struct td_store_job *j = td_store_ckpt_begin(&d->store, d->cfg.state_dir);
	if (!j) {
		if (!c->stopping)
			uv_timer_start(&c->retry, on_retry, COMMIT_RETRY_MS, 0); /* no memory: later */
		return;
	}
	c->ckpt = j;
	if (uv_queue_work(d->loop, &c->ckpt_work, ckpt_run, ckpt_done) != 0) {
		c->ckpt = NULL;
		td_store_job_cancel(&d->store, j);
		if (!c->stopping)
			uv_timer_start(&c->retry, on_retry, COMMIT_RETRY_MS, 0);
	}
}

/* Snapshot what was accepted and save it: on the thread pool, or at once when no file changes. */
static void commit_start(struct td_daemon *d, bool sync)
{
	struct td_commit *c = &d->commit;
	if (!d->store.ckpt_failed)
		uv_timer_stop(&c->retry); /* this save holds what it would retry */
	d->store.journal_max = d->cfg.journal_max; /* as configured now (SIGHUP reloads it) */
	struct td_store_job *j = td_store_job_begin(&d->store, d->cfg.state_dir);
	bool ok = j != NULL;
	for (struct td_agent *a = c->touched; ok && a; a = a->touched_next) {
		if (!a->unsaved)
			continue;
		if (td_agent_state_copy(&a->saving_state, a) != 0) {
			ok = false;
			break;
		}
		a->saving = true;
		a->unsaved = false;
	}
	c->inflight = c->queued;
	c->queued = NULL;
	c->queued_tail = &c->queued;
	if (!ok) {
		char reason[64];
		snprintf(reason, sizeof(reason), "out of memory");
		if (j)
			td_store_job_cancel(&d->store, j); /* its entries dirty again */
		commit_done(d, TOGGLE_EIO, reason);
		return;
	}
	if (sync || td_store_job_entries(j) == 0) {
		char reason[256] = "";
		td_store_job_run(j);
		int rc = td_store_job_end(&d->store, j, reason, sizeof(reason));
		commit_done(d, rc, reason);
		return;
	}
	c->job = j;
	int rc = uv_queue_work(d->loop, &c->work, work_run, work_done);
	if (rc != 0) {
		char reason[256] = "";
		c->job = NULL;
		td_store_job_run(j); /* no thread pool: do it here rather than lose it */
		rc = td_store_job_end(&d->store, j, reason, sizeof(reason));
		commit_done(d, rc, reason);
	}
}

static void on_retry(uv_timer_t *t)
{
	struct td_daemon *d = t->data;
	ckpt_maybe_start(d, true);
	if (!d->commit.job && d->store.dirty && !d->commit.stopping)
		commit_start(d, false);
	if (d->store.ckpt_failed && !d->commit.ckpt && !d->commit.stopping &&
	    !uv_is_active((uv_handle_t *)t))
		uv_timer_start(t, on_retry, COMMIT_RETRY_MS, 0);
}

/*
 * Check phase.  A save starts when writes wait for one (or something is
 * dirty and the last save did not fail: the retry timer handles that case,
 * so a full disk is not hammered) and none is in flight.
 */
void td_commit_kick(struct td_daemon *d)
{
	struct td_commit *c = &d->commit;
	ckpt_maybe_start(d, false);
	if (c->job || c->stopping)
		return;
	if (c->queued || (d->store.dirty && !c->failing))
		commit_start(d, false);
}

void td_commit_drain(struct td_daemon *d)
{
	struct td_commit *c = &d->commit;
	c->stopping = true;
	while (c->job || c->ckpt)
		uv_run(d->loop, UV_RUN_ONCE);
	if (c->queued || d->store.dirty)
		commit_start(d, true);
	while (td_commit_step(d))
		;
	if (d->commit.failing)
		log_warnx("state: the last desired state could not be saved at shutdown: %s",
			  c->reason);
	/*
	 * A clean stop folds the journals into the files: the next start (of
	 * this version, or of one before the journal's format 2) reads the
	 * files alone.  If it cannot, the journals stay and are replayed.
	 */
	if (d->store.journal && !d->commit.failing) {
		char reason[256] = "";
		d->store.compact = true;
		if (td_store_checkpoint(&d->store, d->cfg.state_dir, reason, sizeof(reason)) != 0)
			log_warnx("state: cannot fold the journal into the files at shutdown: %s (the "
				  "next start replays it)", reason);
	}
	uv_timer_stop(&c->retry);
	uv_close((uv_handle_t *)&c->retry, NULL);
}
