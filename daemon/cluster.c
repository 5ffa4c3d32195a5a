/*
 * cluster.c - toggled as one host of a cluster (docs/cluster.md): it
 * watches /graphtoggle/NAME/desired/ in etcd (etcd.c), applies what
 * concerns its local agents through the same validate-then-apply code as
 * the SetEnabled and SubmitPlan RPCs (td_ctl_set, td_ctl_plan), remembers
 * the last revision it applied in <state_dir>/cluster-NAME.rev, and
 * publishes its status under /graphtoggle/NAME/status/HOST with a lease.
 *
 * Order: every key that changed is applied in revision order, once; a
 * standing set replaces (last writer, by revision, wins); a plan is
 * applied to each matching agent on its own, all entries or none, and a
 * late one is rejected on that agent and reported in the status.  A key
 * whose revision is not above the saved one was applied before a restart
 * and is not applied again.  Everything here runs on the loop's thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cluster.h"
#include "etcd.h"
#include "log.h"
#include "toggled.h"
#include "util.h"

/* The status is looked at every CL_PUBLISH_MS and put when what it says
 * changed (agents, sets, plans pending, revision, rejections, the etcd
 * member); what moves by itself (steps, replays, uptime, request counts)
 * is refreshed every CL_REFRESH_MS only.  The heartbeat is the lease's
 * keep-alive (etcd.c), which writes no revision: an idle host does not
 * move etcd's revision every second. */
#define CL_PUBLISH_MS  1000
#define CL_REFRESH_MS  30000
/* The first status waits for the catch-up (the events up to the newest key
 * etcd held when the watch started), so that it never shows the revision of
 * before the restart; at most this long after start. */
#define CL_CATCHUP_MS  10000
#define CL_MAX_REJECTS 16   /* last rejections kept for the status */
#define CL_MAX_SETS    4096 /* standing-set keys remembered */
#define CL_MAX_PLANS   256  /* newest plan keys remembered for agents that join */
#define CL_MAX_SEEN    4096 /* agent names and the revision they were served up to */
#define CL_REDO_MS     1000 /* after a failed save, re-apply this much later */
/* Rejections in the log: one line per key and revision (not one per agent,
 * nor again at a resync), at most CL_LOG_BURST lines per CL_LOG_WINDOW_MS,
 * then one line that says how many were left out.  status/HOST keeps the
 * last CL_MAX_REJECTS whatever the log shows. */
#define CL_LOG_BURST     10
#define CL_LOG_WINDOW_MS 10000
#define CL_LOG_SEEN      64   /* (key, revision) pairs remembered as logged */
/* Plan applications remembered (and on disk) until the revision file passes them. */
#define CL_MAX_RECORDS   4096
/* An agent this host's saved state knows counts as present for the plans
 * applied in this long after start (it was reconnecting to this toggled). */
#define CL_RETURN_MS     30000

struct cl_set {
	char *key;
	char *spec;
	struct cluster_sel sel;
	int64_t rev;
};

struct cl_plan_key {
	char *key;
	char *value;
	int64_t rev;
};

struct cl_seen {
	char name[TGP_MAX_NAME];
	int64_t rev;
};

/*
 * A plan applied to one agent: by revision and key (a hash), the agent's
 * name, and the step its relative entries counted from.  Written to
 * <state_dir>/cluster-NAME.plans (synced) before any save can hold what the
 * plan changed, so that a replay of the plan after a crash (the revision
 * file is written after the save) puts the same entries at the same steps
 * again, which the agent holds already: applied once.
 */
struct cl_record {
	int64_t rev;
	uint64_t key;
	int64_t base;
	char agent[TGP_MAX_NAME];
};

struct cl_reject {
	char key[ETCD_MAX_KEY + 1];
	int64_t rev;
	char agent[TGP_MAX_NAME];
	int code;
	char msg[400];
};

struct td_cluster {
	struct td_daemon *d;
	struct etcd_watcher *w;
	char desired[ETCD_MAX_KEY + 1];
	char status_key[ETCD_MAX_KEY + 1];
	char rev_path[PATH_MAX];
	char rec_path[PATH_MAX];
	struct cl_record *records; /* plan applications above saved_rev (and some below) */
	size_t n_records;
	bool records_dirty, records_warned;
	uint64_t start_ms; /* util_mono_ms when this daemon joined the cluster */
	int64_t applied_rev;   /* every key up to here is applied */
	int64_t notified_rev;  /* a save callback is queued for keys up to here */
	int64_t durable_rev;   /* keys up to here are in a save that succeeded */
	int64_t saved_rev;     /* what rev_path holds */
	int64_t start_rev;     /* saved_rev at start: what the store's state reflects */
	struct cl_set *sets;   /* the standing sets etcd holds now */
	size_t n_sets;
	/* Plans newer than start_rev, oldest first (a ring): an agent that
	 * joins late (a host restarted before its agents reconnected) gets
	 * those it has not been served. */
	struct cl_plan_key plans[CL_MAX_PLANS];
	size_t n_plans, first_plan;
	struct cl_seen *seen; /* agents by name: served up to which revision */
	size_t n_seen;
	bool connected, down_logged;
	/* The member the watch reads from, since when (unix ms), the last
	 * reason a watch ended, and how often it moved to another member. */
	char member[ETCD_MAX_URL];
	uint64_t member_since;
	char last_error[256];
	uint64_t failovers;
	uint64_t applied, rejected, resyncs, skipped;
	/* The log's rate limit (reject()). */
	uint64_t log_window_start;
	unsigned log_in_window;
	uint64_t log_suppressed;
	uint64_t log_seen[CL_LOG_SEEN];
	size_t log_seen_next;
	struct cl_reject rejects[CL_MAX_REJECTS];
	size_t n_rejects, next_reject;
	uv_timer_t pub_timer;
	char *last_published;
	char *last_stable;     /* last_published without what moves by itself */
	uint64_t published_ms; /* util_mono_ms of the last publish */
	bool snapshot_seen;    /* the watch's first range read arrived */
	int64_t catchup_to;    /* its newest key's revision: caught up when applied */
	/* After a failed save: what was applied since durable_rev was rolled
	 * back; new keys are only remembered until redo_timer re-applies them. */
	bool redo_pending;
	bool save_failing; /* logged once per run of failed saves */
	uv_timer_t redo_timer;
	/* The revision file is written on the thread pool, once durable_rev moved. */
	uv_work_t rev_work;
	bool rev_busy;
	int64_t rev_writing;
	int rev_errno;
	bool stopping;
	int open_handles; /* freed when both timers are closed, no write is in */
	size_t notes;     /* flight and no save callback is queued */
};

/* One queued save callback: the keys up to rev are in the save it waits for. */
struct cl_note {
	struct td_cluster *c;
	int64_t rev;
};

/* ---- the saved revision ------------------------------------------------- */

int cluster_rev_load(const char *path, int64_t *rev)
{
	*rev = 0;
	FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -1;
	char buf[32] = "";
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *end;
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (errno || end == buf || (*end && *end != '\n') || v < 0)
		return -1;
	*rev = v;
	return 0;
}

/* tmp, fsync, rename, fsync the directory: the old or the new value, never half. */
int cluster_rev_save(const char *path, int64_t rev)
{
	char tmp[PATH_MAX + 8], buf[32];
	int n = snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -1;
	int len = snprintf(buf, sizeof(buf), "%" PRId64 "\n", rev);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	int rc = write(fd, buf, (size_t)len) == len && fsync(fd) == 0 ? 0 : -1;
	if (close(fd) != 0)
		rc = -1;
	if (rc == 0)
		rc = rename(tmp, path);
	if (rc == 0) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", path);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
	} else {
		unlink(tmp);
	}
	return rc;
}

static void cluster_free_if_done(struct td_cluster *c);

static void rev_work_run(uv_work_t *w)
{
	struct td_cluster *c = w->data;
	c->rev_errno = cluster_rev_save(c->rev_path, c->rev_writing) == 0 ? 0 : errno ? errno : EIO;
}

static void rev_write_start(struct td_cluster *c);

static void rev_work_done(uv_work_t *w, int status)
{
	struct td_cluster *c = w->data;
	c->rev_busy = false;
	if (status == 0 && c->rev_errno == 0) {
		c->saved_rev = c->rev_writing;
		rev_write_start(c); /* durable_rev may have moved meanwhile */
	} else {
		/* The next durable batch tries again; a restart replays from the old value. */
		log_warnx("cluster: writing revision %" PRId64 " to %s: %s", c->rev_writing, c->rev_path,
			  status ? uv_strerror(status) : strerror(c->rev_errno));
	}
	cluster_free_if_done(c);
}

/*
 * The revision file follows durable_rev, never the applied revision: a key
 * is marked applied only once the save holding what it changed succeeded.
 * A crash between that save and this write applies a key twice (a set is
 * idempotent), never loses one.  Off the loop, like the save itself; at
 * shutdown (after the loop stopped serving) in place.
 */
static void rev_write_start(struct td_cluster *c)
{
	if (c->rev_busy || c->durable_rev <= c->saved_rev)
		return;
	c->rev_busy = true;
	c->rev_writing = c->durable_rev;
	c->rev_work.data = c;
	if (!c->stopping && uv_queue_work(c->d->loop, &c->rev_work, rev_work_run, rev_work_done) == 0)
		return;
	rev_work_run(&c->rev_work);
	c->rev_busy = false;
	if (c->rev_errno == 0)
		c->saved_rev = c->rev_writing;
	else
		log_warnx("cluster: writing revision %" PRId64 " to %s: %s", c->rev_writing, c->rev_path,
			  strerror(c->rev_errno));
}

static void on_redo(uv_timer_t *t);

/* commit.c: the save holding the keys up to note->rev completed. */
static void on_saved(void *arg, int rc, const char *reason)
{
	struct cl_note *note = arg;
	struct td_cluster *c = note->c;
	int64_t rev = note->rev;
	free(note);
	c->notes--;
	if (rc == 0) {
		/* Ignored while a redo is pending: those keys were not applied again yet. */
		if (!c->redo_pending && rev > c->durable_rev) {
			c->durable_rev = rev;
			rev_write_start(c);
			if (c->save_failing)
				log_info("cluster: revisions up to %" PRId64 " saved again", rev);
			c->save_failing = false;
		}
		cluster_free_if_done(c);
		return;
	}
	if (c->redo_pending) {
		cluster_free_if_done(c);
		return;
	}
	/* Rolled back (commit.c): what was applied after durable_rev is gone from
	 * the agents' accepted state. The revision stays; re-apply it later. */
	if (!c->save_failing)
		log_warnx("cluster: the desired state holding revisions %" PRId64 "..%" PRId64
			  " was not saved (%s); %s stays at %" PRId64 ", re-applied every %d ms until "
			  "a save succeeds", c->durable_rev + 1, rev, reason ? reason : "?", c->rev_path,
			  c->saved_rev, CL_REDO_MS);
	c->save_failing = true;
	c->redo_pending = true;
	c->notified_rev = c->durable_rev;
	if (!c->stopping)
		uv_timer_start(&c->redo_timer, on_redo, CL_REDO_MS, 0);
	cluster_free_if_done(c);
}

/* Ask commit.c to tell when what was applied up to applied_rev is durable. */
static void notify_saved(struct td_cluster *c, bool force)
{
	if (c->redo_pending || (!force && c->applied_rev <= c->notified_rev))
		return;
	struct cl_note *note = malloc(sizeof(*note));
	if (note) {
		*note = (struct cl_note){.c = c, .rev = c->applied_rev};
		if (td_commit_notify(c->d, on_saved, note) == 0) {
			c->notes++;
			c->notified_rev = c->applied_rev;
			return;
		}
		free(note);
	}
	/* The next batch's callback covers these keys too. */
	log_warnx("cluster: out of memory; revision %" PRId64 " marked applied with the next batch",
		  c->applied_rev);
}

/* ---- applying ----------------------------------------------------------- */

/* FNV-1a of a key and its revision: "this rejection was logged". */
static uint64_t log_hash(const char *key, int64_t rev)
{
	uint64_t h = 1469598103934665603ull;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return (h ^ (uint64_t)rev) * 1099511628211ull;
}

/* Say how many rejections the rate limit kept out of the log, once its window is over. */
static void log_flush_suppressed(struct td_cluster *c, uint64_t now)
{
	if (now - c->log_window_start < CL_LOG_WINDOW_MS)
		return;
	if (c->log_suppressed)
		log_warnx("cluster: %" PRIu64 " more rejections not logged in %d s (the last %d are "
			  "in %s)", c->log_suppressed, CL_LOG_WINDOW_MS / 1000, CL_MAX_REJECTS,
			  c->status_key);
	c->log_suppressed = 0;
	c->log_in_window = 0;
	c->log_window_start = now;
}

/*
 * A key, or a key on one agent, not applied: kept for status/HOST, counted,
 * logged.  Key and message come from etcd (a key may hold a newline that
 * forges a log line, or an escape for the terminal): both are cleaned here,
 * for the log and for the status alike.
 */
static void reject(struct td_cluster *c, const char *key, int64_t rev, const char *agent, int code,
		   const char *msg)
{
	struct cl_reject *r = &c->rejects[c->next_reject];
	c->next_reject = (c->next_reject + 1) % CL_MAX_REJECTS;
	if (c->n_rejects < CL_MAX_REJECTS)
		c->n_rejects++;
	util_clean(r->key, sizeof(r->key), key, UTIL_CLEAN_ASCII);
	r->rev = rev;
	util_clean(r->agent, sizeof(r->agent), agent ? agent : "", UTIL_CLEAN_ASCII);
	r->code = code;
	util_clean(r->msg, sizeof(r->msg), msg, UTIL_CLEAN_ASCII);
	c->rejected++;
	uint64_t h = log_hash(key, rev), now = util_mono_ms();
	for (size_t i = 0; i < CL_LOG_SEEN; i++)
		if (c->log_seen[i] == h)
			return; /* this key at this revision is in the log already */
	c->log_seen[c->log_seen_next] = h;
	c->log_seen_next = (c->log_seen_next + 1) % CL_LOG_SEEN;
	log_flush_suppressed(c, now);
	if (c->log_in_window >= CL_LOG_BURST) {
		c->log_suppressed++;
		return;
	}
	c->log_in_window++;
	log_warnx("cluster: %s (revision %" PRId64 ")%s%s: %s", r->key, rev,
		  r->agent[0] ? " on agent " : "", r->agent, r->msg);
}

/* The local agents sel names (none when it is another host's). */
static int local_agents(struct td_cluster *c, const struct cluster_sel *sel, struct td_agent ***v,
			size_t *n)
{
	struct td_selector s;
	int kind;
	uint64_t id;
	const char *group;
	*v = NULL;
	*n = 0;
	memset(&s, 0, sizeof(s));
	if (!cluster_sel_local(sel, c->d->cfg.host_id, &kind, &id, &group))
		return 0;
	s.kind = kind == 1 ? SEL_AGENT : kind == 2 ? SEL_PID : kind == 3 ? SEL_GROUP : SEL_ALL;
	s.agent_id = id;
	s.pid = (uint32_t)id;
	if (group)
		snprintf(s.group, sizeof(s.group), "%s", group);
	int rc = td_agents_select(c->d, &s, v, n);
	return rc == TOGGLE_ENOAGENT ? 0 : rc;
}

/* One agent at a time: a spec that does not fit one catalog spares the others. */
static void apply_set(struct td_cluster *c, const struct cl_set *s, struct td_agent **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct td_ctl_err e;
		if (td_ctl_set(&v[i], 1, s->spec, TOGGLE__SET_OP__SET_OP_REPLACE, &e))
			reject(c, s->key, s->rev, v[i]->name, e.code, e.msg);
		else
			c->applied++;
	}
}

/* ---- plans applied once: the record ------------------------------------ */

static uint64_t key_hash(const char *key)
{
	return log_hash(key, 0);
}

static struct cl_record *record_find(struct td_cluster *c, int64_t rev, uint64_t key,
				     const char *agent)
{
	for (size_t i = 0; i < c->n_records; i++)
		if (c->records[i].rev == rev && c->records[i].key == key &&
		    !strcmp(c->records[i].agent, agent))
			return &c->records[i];
	return NULL;
}

/* Records the revision file has passed are no longer replayed: dropped. */
static void records_prune(struct td_cluster *c)
{
	size_t k = 0;
	for (size_t i = 0; i < c->n_records; i++)
		if (c->records[i].rev > c->saved_rev)
			c->records[k++] = c->records[i];
	if (k != c->n_records)
		c->records_dirty = true;
	c->n_records = k;
}

static void record_add(struct td_cluster *c, int64_t rev, uint64_t key, int64_t base,
		       const char *agent)
{
	if (c->n_records == CL_MAX_RECORDS)
		records_prune(c);
	if (c->n_records == CL_MAX_RECORDS) { /* more plans than this in flight: drop the oldest */
		memmove(c->records, c->records + 1, (CL_MAX_RECORDS - 1) * sizeof(*c->records));
		c->n_records--;
		if (!c->records_warned)
			log_warnx("cluster: more than %d plan applications not yet in %s: the oldest "
				  "may be applied again after a crash", CL_MAX_RECORDS, c->rev_path);
		c->records_warned = true;
	}
	if (!c->records) {
		c->records = calloc(CL_MAX_RECORDS, sizeof(*c->records));
		if (!c->records) {
			log_warnx("cluster: out of memory for the record of applied plans");
			return;
		}
	}
	struct cl_record *r = &c->records[c->n_records++];
	*r = (struct cl_record){.rev = rev, .key = key, .base = base};
	snprintf(r->agent, sizeof(r->agent), "%s", agent);
	c->records_dirty = true;
}

/*
 * Write the records (tmp, fsync, rename, fsync of the directory), on the
 * loop: before this returns to the loop, no save can have started that
 * holds what the plans just applied changed.  One small file per batch
 * with a plan in it.
 */
static void records_flush(struct td_cluster *c)
{
	if (!c->records_dirty)
		return;
	c->records_dirty = false;
	records_prune(c);
	c->records_dirty = false;
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", c->rec_path);
	FILE *f = fopen(tmp, "we");
	bool ok = f != NULL;
	for (size_t i = 0; ok && i < c->n_records; i++)
		ok = fprintf(f, "%" PRId64 " %016" PRIx64 " %" PRId64 " %s\n", c->records[i].rev,
			     c->records[i].key, c->records[i].base, c->records[i].agent) > 0;
	if (f) {
		ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
		ok = fclose(f) == 0 && ok;
	}
	if (ok && rename(tmp, c->rec_path) == 0) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", c->rec_path);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
		c->records_warned = false;
		return;
	}
	int e = errno;
	unlink(tmp);
	if (!c->records_warned)
		log_warnx("cluster: writing %s: %s; a crash before the revision file follows may "
			  "apply a plan twice", c->rec_path, strerror(e));
	c->records_warned = true;
	c->records_dirty = true; /* the next batch tries again */
}

/* The records file at start: missing is none; a line it cannot read is skipped (logged). */
static void records_load(struct td_cluster *c)
{
	FILE *f = fopen(c->rec_path, "re");
	if (!f)
		return;
	char line[256];
	size_t bad = 0;
	while (fgets(line, sizeof(line), f)) {
		long long rev, base;
		unsigned long long key;
		char agent[TGP_MAX_NAME + 1];
		if (sscanf(line, "%lld %16llx %lld %64s", &rev, &key, &base, agent) != 4 ||
		    strlen(agent) >= TGP_MAX_NAME || !util_name_ok(agent, TGP_MAX_NAME)) {
			bad++;
			continue;
		}
		if (rev > c->saved_rev)
			record_add(c, rev, key, base, agent);
	}
	fclose(f);
	c->records_dirty = false;
	if (bad)
		log_warnx("cluster: %s: %zu unreadable lines skipped", c->rec_path, bad);
}

/* Does agent a hold a pending entry for this step with this set? */
static bool agent_has_entry(const struct td_agent *a, int64_t step, const struct toggle_set *set)
{
	for (size_t j = 0; j < a->n_plans; j++)
		if (a->plans[j].step == step && toggle_set_equal(&a->plans[j].set, set))
			return true;
	return false;
}

/*
 * A plan to one agent.  First time: relative entries are resolved here,
 * from the agent's step now, and that step is recorded before anything is
 * saved.  Again (a replay after a crash or a failed save, or an agent that
 * comes back): the recorded step again, entries for steps the agent has
 * begun are left out (they were applied before), and so are those it holds
 * pending already: each entry reaches an agent once.
 */
static void apply_plan_to(struct td_cluster *c, const char *key, int64_t rev,
			  const struct cluster_plan *p, struct td_agent *a)
{
	uint64_t kh = key_hash(key);
	const struct cl_record *r = record_find(c, rev, kh, a->name);
	td_agent_refresh(a);
	int64_t now = a->st->step, base = r ? r->base : now;
	Toggle__PlanEntry en[CLUSTER_MAX_PLANS], *ep[CLUSTER_MAX_PLANS];
	size_t n = 0;
	for (size_t k = 0; k < p->n; k++) {
		int64_t step = p->e[k].n;
		if (p->e[k].relative) {
			/* base comes from the agent's memory: bound it before adding. */
			if (base < -1 || base > INT64_MAX - p->e[k].n) {
				char msg[200];
				snprintf(msg, sizeof(msg), "agent reports step %lld: +%lld is out of range",
					 (long long)base, (long long)p->e[k].n);
				reject(c, key, rev, a->name, TOGGLE_EINVAL, msg);
				return;
			}
			step = base + p->e[k].n;
		}
		if (r) {
			struct toggle_set set;
			char err[256];
			if (step <= now || (toggle_set_parse(&a->cat, p->e[k].spec, &set, err,
							     sizeof(err)) == 0 &&
					    agent_has_entry(a, step, &set)))
				continue;
		}
		toggle__plan_entry__init(&en[n]);
		en[n].step = step;
		en[n].spec = p->e[k].spec;
		ep[n] = &en[n];
		n++;
	}
	if (r && n == 0) {
		log_debug("cluster: plan %s (revision %" PRId64 ") was applied to agent %s before",
			  key, rev, a->name);
		return;
	}
	Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	m.n_entries = n;
	m.entries = ep;
	struct td_ctl_err e;
	if (td_ctl_plan(&a, 1, &m, &e)) {
		reject(c, key, rev, a->name, e.code, e.msg);
		return;
	}
	c->applied++;
	if (!r)
		record_add(c, rev, kh, base, a->name);
}

/* A plan to the local agents it names (only to `only`, if not NULL). */
static void apply_plan(struct td_cluster *c, const char *key, int64_t rev, const char *value,
		       const struct td_agent *only)
{
	struct cluster_plan p;
	char err[256];
	if (cluster_plan_value_parse(value, &p, err, sizeof(err))) {
		reject(c, key, rev, NULL, TOGGLE_EINVAL, err);
		return;
	}
	struct td_agent **v;
	size_t n;
	if (local_agents(c, &p.target, &v, &n)) {
		reject(c, key, rev, NULL, TOGGLE_ENOMEM, "out of memory");
		cluster_plan_free(&p);
		return;
	}
	/* Each agent on its own: late on one is rejected whole on that one. */
	for (size_t i = 0; i < n; i++)
		if (!only || v[i] == only)
			apply_plan_to(c, key, rev, &p, v[i]);
	free(v);
	cluster_plan_free(&p);
}

static void set_free(struct cl_set *s)
{
	free(s->key);
	free(s->spec);
}

static struct cl_set *set_find(struct td_cluster *c, const char *key)
{
	for (size_t i = 0; i < c->n_sets; i++)
		if (!strcmp(c->sets[i].key, key))
			return &c->sets[i];
	return NULL;
}

static void set_forget(struct td_cluster *c, const char *key)
{
	struct cl_set *s = set_find(c, key);
	if (!s)
		return;
	set_free(s);
	*s = c->sets[--c->n_sets];
}

/* Remember a standing-set key; NULL (and reported) when its value is bad. */
static struct cl_set *set_remember(struct td_cluster *c, const struct etcd_kv *kv,
				   const struct cluster_sel *sel)
{
	char err[256];
	char *spec;
	if (cluster_set_value_parse(kv->value, &spec, err, sizeof(err))) {
		set_forget(c, kv->key);
		reject(c, kv->key, kv->mod_revision, NULL, TOGGLE_EINVAL, err);
		return NULL;
	}
	struct cl_set *s = set_find(c, kv->key);
	if (!s) {
		/* Only keys that may name this host's agents count against the limit. */
		if (c->n_sets == CL_MAX_SETS) {
			free(spec);
			reject(c, kv->key, kv->mod_revision, NULL, TOGGLE_ELIMIT, "too many standing-set keys");
			return NULL;
		}
		struct cl_set *nv = realloc(c->sets, (c->n_sets + 1) * sizeof(*nv));
		char *key = strdup(kv->key);
		if (!nv || !key) {
			if (nv)
				c->sets = nv;
			free(key);
			free(spec);
			reject(c, kv->key, kv->mod_revision, NULL, TOGGLE_ENOMEM, "out of memory");
			return NULL;
		}
		c->sets = nv;
		s = &c->sets[c->n_sets++];
		s->key = key;
	} else {
		free(s->spec);
	}
	s->spec = spec;
	s->sel = *sel;
	s->rev = kv->mod_revision;
	return s;
}

static void plan_remember(struct td_cluster *c, const struct etcd_kv *kv)
{
	char *key = strdup(kv->key), *value = strdup(kv->value);
	if (!key || !value) {
		free(key);
		free(value);
		log_warnx("cluster: out of memory remembering plan %s", kv->key);
		return;
	}
	struct cl_plan_key *p;
	if (c->n_plans == CL_MAX_PLANS) { /* drop the oldest */
		p = &c->plans[c->first_plan];
		free(p->key);
		free(p->value);
		c->first_plan = (c->first_plan + 1) % CL_MAX_PLANS;
	} else {
		p = &c->plans[(c->first_plan + c->n_plans++) % CL_MAX_PLANS];
	}
	*p = (struct cl_plan_key){.key = key, .value = value, .rev = kv->mod_revision};
}

/*
 * A plan key deleted (its lease expired, or by hand): agents keep the
 * entries they hold, and an agent that joins later no longer gets it.
 */
static void plan_forget(struct td_cluster *c, const char *key)
{
	for (size_t i = 0; i < c->n_plans; i++) {
		struct cl_plan_key *p = &c->plans[(c->first_plan + i) % CL_MAX_PLANS];
		if (strcmp(p->key, key))
			continue;
		free(p->key);
		free(p->value);
		for (size_t k = i; k + 1 < c->n_plans; k++)
			c->plans[(c->first_plan + k) % CL_MAX_PLANS] =
				c->plans[(c->first_plan + k + 1) % CL_MAX_PLANS];
		c->n_plans--;
		return;
	}
}

static struct cl_seen *seen_find(struct td_cluster *c, const char *name)
{
	for (size_t i = 0; i < c->n_seen; i++)
		if (!strcmp(c->seen[i].name, name))
			return &c->seen[i];
	return NULL;
}

/* Remember that the agents now connected have been served up to applied_rev. */
static void seen_update(struct td_cluster *c, const struct td_agent *only)
{
	for (struct td_agent *a = c->d->agents; a; a = a->next) {
		if (only && a != only)
			continue;
		struct cl_seen *s = seen_find(c, a->name);
		if (!s && c->n_seen < CL_MAX_SEEN) {
			struct cl_seen *nv = realloc(c->seen, (c->n_seen + 1) * sizeof(*nv));
			if (!nv)
				return;
			c->seen = nv;
			s = &c->seen[c->n_seen++];
			snprintf(s->name, sizeof(s->name), "%s", a->name);
		}
		if (s)
			s->rev = c->applied_rev;
	}
}

/* Does a selector name any of this host's agents (now or when they join)? */
static bool sel_here(const struct td_cluster *c, const struct cluster_sel *sel)
{
	int kind;
	uint64_t id;
	const char *group;
	return cluster_sel_local(sel, c->d->cfg.host_id, &kind, &id, &group);
}

/*
 * A key etcd.c could not take (over the limits, a NUL, not base64): skipped
 * and reported, and the watch goes on past it.  A standing set this host
 * held under that key is forgotten (its agents keep what they have, as for
 * a deleted key).  Another host's set is not this host's to report.
 */
static void on_bad_kv(struct td_cluster *c, const struct etcd_kv *kv, bool apply)
{
	enum cluster_key_kind kind = CLUSTER_KEY_OTHER;
	struct cluster_sel sel;
	char err[256];
	if (!kv->bad_key) {
		if (cluster_key_parse(c->desired, kv->key, &kind, &sel, err, sizeof(err)) == 0 &&
		    kind == CLUSTER_KEY_SET) {
			set_forget(c, kv->key);
			if (!sel_here(c, &sel))
				return;
		}
	}
	if (!apply || kv->deleted) /* a deleted key changes nothing on agents */
		return;
	c->skipped++;
	snprintf(err, sizeof(err), "skipped: %s", kv->bad);
	reject(c, kv->key, kv->mod_revision, NULL, TOGGLE_ELIMIT, err);
}

/* One key, in revision order: remember it, and apply it if it is new to us. */
static void on_kv(struct td_cluster *c, const struct etcd_kv *kv, bool apply, bool apply_plans)
{
	enum cluster_key_kind kind;
	struct cluster_sel sel;
	char err[256];
	if (c->redo_pending)
		apply = false; /* remembered now, applied by on_redo */
	if (kv->bad) {
		on_bad_kv(c, kv, apply);
		return;
	}
	/* A malformed or unknown key: skipped whole, and reported. */
	if (cluster_key_parse(c->desired, kv->key, &kind, &sel, err, sizeof(err)) ||
	    kind == CLUSTER_KEY_OTHER) {
		if (kind == CLUSTER_KEY_OTHER)
			snprintf(err, sizeof(err), "not a key of this version's layout "
				 "(desired/set/... or desired/plan/NAME)");
		if (apply && !kv->deleted) {
			c->skipped++;
			char msg[300];
			snprintf(msg, sizeof(msg), "skipped: %s", err);
			reject(c, kv->key, kv->mod_revision, NULL, TOGGLE_EINVAL, msg);
		}
		return;
	}
	if (kind == CLUSTER_KEY_SET) {
		if (!kv->value) { /* deleted: agents keep what they have */
			set_forget(c, kv->key);
			return;
		}
		if (!sel_here(c, &sel)) /* another host's: not remembered, not counted */
			return;
		struct cl_set *s = set_remember(c, kv, &sel);
		if (!s || !apply)
			return;
		struct td_agent **v;
		size_t n;
		if (local_agents(c, &sel, &v, &n)) {
			reject(c, kv->key, kv->mod_revision, NULL, TOGGLE_ENOMEM, "out of memory");
			return;
		}
		apply_set(c, s, v, n);
		free(v);
	} else if (kind == CLUSTER_KEY_PLAN && kv->value) {
		/* Another host's plan is not remembered: it would push this host's
		 * out of the ring that agents joining late are served from. */
		struct cluster_plan p;
		if (cluster_plan_value_parse(kv->value, &p, err, sizeof(err)) == 0) {
			bool here = sel_here(c, &p.target);
			cluster_plan_free(&p);
			if (!here)
				return;
			if (kv->mod_revision > c->start_rev)
				plan_remember(c, kv);
		}
		if (apply && apply_plans)
			apply_plan(c, kv->key, kv->mod_revision, kv->value, NULL);
	} else if (kind == CLUSTER_KEY_PLAN) {
		plan_forget(c, kv->key);
	}
}

static int kv_rev_cmp(const void *a, const void *b)
{
	const struct etcd_kv *x = *(const struct etcd_kv *const *)a, *y = *(const struct etcd_kv *const *)b;
	return (x->mod_revision > y->mod_revision) - (x->mod_revision < y->mod_revision);
}

static void on_snapshot(struct td_cluster *c, struct etcd_batch *b)
{
	if (b->resync && c->applied_rev > 0) {
		c->resyncs++;
		/* Logged once per resynchronisation, not per retry. */
		log_warnx("cluster: revision %" PRId64 " is compacted in etcd%s: full resync from a "
			  "range read at revision %" PRId64, c->applied_rev + 1,
			  b->compacted > 0 ? "" : " (or etcd's data was replaced)", b->revision);
	}
	for (size_t i = 0; i < c->n_sets; i++)
		set_free(&c->sets[i]);
	c->n_sets = 0;
	const struct etcd_kv **order = calloc(b->n ? b->n : 1, sizeof(*order));
	if (!order) {
		log_warnx("cluster: out of memory reading a snapshot");
		return;
	}
	for (size_t i = 0; i < b->n; i++)
		order[i] = &b->kvs[i];
	qsort(order, b->n, sizeof(*order), kv_rev_cmp);
	/* A first start takes the standing sets, not the plans of the past. */
	bool first = c->applied_rev == 0;
	if (first)
		c->start_rev = b->revision;
	if (!c->snapshot_seen)
		c->catchup_to = b->resync ? 0 : b->latest;
	c->snapshot_seen = true;
	for (size_t i = 0; i < b->n; i++)
		on_kv(c, order[i], b->resync && order[i]->mod_revision > c->applied_rev, !first);
	free(order);
	if (b->resync && b->revision > c->applied_rev)
		c->applied_rev = b->revision;
}

/* The watch's state where the Status reply and /metrics read it. */
static void view_update(struct td_cluster *c)
{
	struct td_cluster_view *v = &c->d->cluster_view;
	v->on = true;
	v->connected = c->connected;
	util_clean(v->member, sizeof(v->member), c->member, UTIL_CLEAN_ASCII);
	v->since_unix_ms = c->member_since;
	v->failovers = c->failovers;
	snprintf(v->last_error, sizeof(v->last_error), "%s", c->last_error);
}

static void on_batch(void *arg, struct etcd_batch *b)
{
	struct td_cluster *c = arg;
	switch (b->kind) {
	case ETCD_CONNECTED:
		if (c->member[0] && strcmp(c->member, b->err))
			c->failovers++;
		if (!c->connected || strcmp(c->member, b->err))
			log_info("cluster: watching etcd at %s from revision %" PRId64, b->err,
				 c->applied_rev + 1);
		snprintf(c->member, sizeof(c->member), "%s", b->err);
		c->member_since = util_unix_ms();
		c->connected = true;
		c->down_logged = false;
		view_update(c);
		break;
	case ETCD_DISCONNECTED:
		util_clean(c->last_error, sizeof(c->last_error), b->err, UTIL_CLEAN_ASCII);
		/* Once per episode: the first failure after a watch was up. */
		if (c->connected || !c->down_logged)
			log_warnx("cluster: etcd unreachable or unfit (%s); local requests go on, trying "
				  "the next member", c->last_error);
		c->connected = false;
		c->down_logged = true;
		c->d->cluster_view.lost++;
		view_update(c);
		break;
	case ETCD_SNAPSHOT:
		on_snapshot(c, b);
		break;
	case ETCD_EVENTS: {
		/* New to us: above what was applied before this batch.  Keys of one
		 * revision (a transaction) all arrive in one batch; comparing with
		 * the revision of the key before applied only the first of them. */
		int64_t before = c->applied_rev;
		for (size_t i = 0; i < b->n; i++) {
			on_kv(c, &b->kvs[i], b->kvs[i].mod_revision > before, true);
			if (b->kvs[i].mod_revision > c->applied_rev)
				c->applied_rev = b->kvs[i].mod_revision;
		}
		break;
	}
	}
	etcd_batch_free(b);
	seen_update(c, NULL);
	records_flush(c); /* before the loop can start the save of what was applied */
	notify_saved(c, false);
}

static int set_rev_cmp(const void *a, const void *b)
{
	const struct cl_set *x = *(const struct cl_set *const *)a, *y = *(const struct cl_set *const *)b;
	return (x->rev > y->rev) - (x->rev < y->rev);
}

/*
 * After a failed save: the keys above durable_rev, in revision order, again
 * (the standing sets etcd holds and the plans remembered), as if they had
 * just arrived.  If this save fails too, on_saved schedules another.
 */
static void on_redo(uv_timer_t *t)
{
	struct td_cluster *c = t->data;
	c->redo_pending = false;
	const struct cl_set **sets = calloc(c->n_sets ? c->n_sets : 1, sizeof(*sets));
	if (!sets) {
		c->redo_pending = true;
		uv_timer_start(&c->redo_timer, on_redo, CL_REDO_MS, 0);
		return;
	}
	size_t ns = 0;
	for (size_t i = 0; i < c->n_sets; i++)
		if (c->sets[i].rev > c->durable_rev)
			sets[ns++] = &c->sets[i];
	qsort(sets, ns, sizeof(*sets), set_rev_cmp);
	if (c->n_plans == CL_MAX_PLANS && c->plans[c->first_plan].rev > c->durable_rev + 1)
		log_warnx("cluster: more than %d plans since revision %" PRId64 ": the oldest are "
			  "re-applied only at the next restart", CL_MAX_PLANS, c->durable_rev);
	log_debug("cluster: re-applying revisions %" PRId64 "..%" PRId64 " after a failed save",
		  c->durable_rev + 1, c->applied_rev);
	size_t i = 0, k = 0;
	while (i < ns || k < c->n_plans) {
		const struct cl_plan_key *p = k < c->n_plans ? &c->plans[(c->first_plan + k) % CL_MAX_PLANS] : NULL;
		if (p && (p->rev <= c->durable_rev || p->rev > c->applied_rev)) {
			k++;
			continue;
		}
		if (i < ns && (!p || sets[i]->rev < p->rev)) {
			struct td_agent **v;
			size_t n;
			if (local_agents(c, &sets[i]->sel, &v, &n))
				reject(c, sets[i]->key, sets[i]->rev, NULL, TOGGLE_ENOMEM, "out of memory");
			else
				apply_set(c, sets[i], v, n);
			free(v);
			i++;
		} else {
			apply_plan(c, p->key, p->rev, p->value, NULL);
			k++;
		}
	}
	free(sets);
	seen_update(c, NULL);
	records_flush(c);
	notify_saved(c, true);
}

static bool names_agent(struct td_cluster *c, const struct cluster_sel *sel, const struct td_agent *a)
{
	struct td_agent **v;
	size_t n;
	bool found = false;
	if (local_agents(c, sel, &v, &n))
		return false;
	for (size_t k = 0; k < n; k++)
		found |= v[k] == a;
	free(v);
	return found;
}

/*
 * An agent joined: what the cluster changed since it was last served (since
 * this daemon started, for an agent it has not seen: its saved state covers
 * the rest) reaches it now: the newest standing set that names it, then the
 * plans, in revision order.  A local change made since stays otherwise.
 *
 * Plans, by the rule of docs/cluster.md: an absolute plan reaches an agent
 * that joins until its steps have begun there (the late rule); a relative
 * one only an agent that was present when this host applied it: one that
 * holds a record of it (it had it before it went away), or one this host's
 * saved state knows that comes back for the first time within 30 s of this
 * daemon's start (the plan was applied while it was reconnecting to a
 * restarted toggled).  An agent new to the host does not get the relative plans of
 * the past: "+200" meant 200 steps after the agents of that moment.
 */
static void cluster_agent_joined(struct td_agent *a)
{
	struct td_cluster *c = a->d->cluster;
	if (!c)
		return;
	const struct cl_seen *seen = seen_find(c, a->name);
	int64_t known = seen ? seen->rev : c->start_rev;
	char skey[TD_MAX_KEY];
	bool returning = !seen && util_mono_ms() - c->start_ms < CL_RETURN_MS &&
			 td_store_key(skey, sizeof(skey), a->name, a->uid) == 0 &&
			 td_store_get(&a->d->store, skey, false) != NULL;
	/* While a redo is pending, on_redo serves what is above durable_rev. */
	int64_t upto = c->redo_pending ? c->durable_rev : c->applied_rev;
	const struct cl_set *best = NULL;
	for (size_t i = 0; i < c->n_sets; i++) {
		const struct cl_set *s = &c->sets[i];
		if (s->rev > known && s->rev <= upto && (!best || s->rev > best->rev) &&
		    names_agent(c, &s->sel, a))
			best = s;
	}
	log_debug("cluster: agent %s joined, served up to revision %" PRId64 "%s%s", a->name, known,
		  best ? "; newest set for it: " : "", best ? best->key : "");
	if (best)
		apply_set(c, best, &a, 1);
	bool any = best != NULL;
	for (size_t i = 0; i < c->n_plans; i++) {
		const struct cl_plan_key *p = &c->plans[(c->first_plan + i) % CL_MAX_PLANS];
		if (p->rev <= known || p->rev > upto)
			continue;
		struct cluster_plan pl;
		char err[256];
		bool relative = false;
		if (cluster_plan_value_parse(p->value, &pl, err, sizeof(err)) == 0) {
			for (size_t k = 0; k < pl.n; k++)
				relative |= pl.e[k].relative;
			cluster_plan_free(&pl);
		}
		if (relative && !returning && !record_find(c, p->rev, key_hash(p->key), a->name)) {
			log_debug("cluster: relative plan %s (revision %" PRId64 ") not for agent %s, "
				  "which was not here when it was applied", p->key, p->rev, a->name);
			continue;
		}
		apply_plan(c, p->key, p->rev, p->value, a);
		any = true;
	}
	seen_update(c, a);
	records_flush(c);
	/* A failed save of this rolls it back: re-applied from durable_rev then. */
	if (any)
		notify_saved(c, true);
}

/* Agents that join (agents.c reports them, report.h): the cluster's set and
 * plans for each, before the watchers hear of it (an applier). */
static void cluster_on_change(void *arg, const struct td_change *ch)
{
	(void)arg;
	if (ch->kind == TD_AGENT_JOINED)
		cluster_agent_joined(ch->a);
}

/* ---- status ------------------------------------------------------------- */

static char *b64_of(const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return NULL;
	protobuf_c_message_pack(m, buf);
	char *s = etcd_b64_encode(buf, len);
	free(buf);
	return s;
}

/*
 * The host's status: the same ListAgents, ListGraphs and Status replies a
 * local client gets (protobuf, base64), so that togglectl --etcd prints
 * them with the same tables; plus the applied revision and rejections.
 */
static char *status_json(struct td_cluster *c, bool stable)
{
	struct td_daemon *d = c->d;
	size_t n = d->n_agents, ng = 0, k = 0;
	Toggle__AgentInfo *ai = calloc(n + 1, sizeof(*ai));
	Toggle__AgentInfo **ap = calloc(n + 1, sizeof(*ap));
	size_t i = 0;
	for (struct td_agent *a = d->agents; a; a = a->next)
		ng += a->st->n_graphs;
	Toggle__GraphInfo *gi = calloc(ng + 1, sizeof(*gi));
	Toggle__GraphInfo **gp = calloc(ng + 1, sizeof(*gp));
	char *out = NULL, *agents = NULL, *graphs = NULL, *status = NULL;
	if (!ai || !ap || !gi || !gp)
		goto done;
	for (struct td_agent *a = d->agents; a; a = a->next, i++) {
		td_view_agent(&ai[i], a); /* refreshes a->st */
		ap[i] = &ai[i];
		if (stable)
			ai[i].step = 0;
		for (uint64_t j = 0; j < a->st->n_graphs && k < ng; j++, k++) {
			td_view_graph(&gi[k], a, &a->st->graphs[j]);
			gp[k] = &gi[k];
			if (stable)
				gi[k].replays = 0, gi[k].last_step = 0;
		}
	}
	Toggle__ListAgentsReply la = TOGGLE__LIST_AGENTS_REPLY__INIT;
	la.n_agents = i;
	la.agents = ap;
	Toggle__ListGraphsReply lg = TOGGLE__LIST_GRAPHS_REPLY__INIT;
	lg.n_graphs = k;
	lg.graphs = gp;
	Toggle__StatusReply st;
	td_view_status(&st, d);
	if (stable)
		st.uptime_ms = 0, st.requests = 0, st.clients = 0;
	agents = b64_of(&la.base);
	graphs = b64_of(&lg.base);
	status = b64_of(&st.base);
	json_t *rej = json_array();
	for (size_t r = 0; rej && r < c->n_rejects; r++) {
		const struct cl_reject *x = &c->rejects[(c->next_reject + CL_MAX_REJECTS - c->n_rejects + r) %
							CL_MAX_REJECTS];
		json_array_append_new(rej, json_pack("{s:s, s:I, s:s, s:i, s:s}", "key", x->key,
						     "revision", (json_int_t)x->rev, "agent", x->agent,
						     "code", x->code, "message", x->msg));
	}
	json_t *member = json_pack("{s:s, s:b, s:I, s:I, s:s}", "member", c->member, "connected",
				   c->connected, "since_ms", (json_int_t)c->member_since, "failovers",
				   (json_int_t)c->failovers, "last_error", c->last_error);
	json_t *j = agents && graphs && status && rej && member
			    ? json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:O, s:O}", "host",
					d->cfg.host_id, "revision", (json_int_t)c->applied_rev, "applied",
					(json_int_t)c->applied, "rejected", (json_int_t)c->rejected,
					"resyncs", (json_int_t)c->resyncs, "skipped",
					(json_int_t)c->skipped, "agents", agents, "graphs",
					graphs, "status", status, "rejections", rej, "etcd", member)
			    : NULL;
	out = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(j);
	json_decref(rej);
	json_decref(member);
done:
	for (size_t r = 0; r < i; r++)
		free(ai[r].enabled);
	free(ai);
	free(ap);
	free(gi);
	free(gp);
	free(agents);
	free(graphs);
	free(status);
	return out;
}

static void on_publish(uv_timer_t *t)
{
	struct td_cluster *c = t->data;
	log_flush_suppressed(c, util_mono_ms());
	uint64_t now = util_mono_ms();
	if ((!c->snapshot_seen || c->applied_rev < c->catchup_to) &&
	    now - c->start_ms < CL_CATCHUP_MS)
		return; /* not caught up yet: the status would show an old revision */
	char *st = status_json(c, true);
	if (!st)
		return;
	bool changed = !c->last_stable || strcmp(st, c->last_stable) != 0;
	if (!changed && now - c->published_ms < CL_REFRESH_MS) {
		free(st);
		return;
	}
	char *s = status_json(c, false);
	if (!s || (c->last_published && !strcmp(s, c->last_published))) {
		free(s);
		free(st);
		return;
	}
	etcd_watcher_publish(c->w, s);
	free(c->last_published);
	c->last_published = s;
	free(c->last_stable);
	c->last_stable = st;
	c->published_ms = now;
}

/* ---- start and stop ----------------------------------------------------- */

int td_cluster_start(struct td_daemon *d, char *err, size_t errlen)
{
	const struct td_config *cfg = &d->cfg;
	if (!cfg->etcd[0])
		return 0;
	if (!cluster_name_ok(cfg->cluster) || !cluster_name_ok(cfg->host_id)) {
		snprintf(err, errlen, "--etcd needs --cluster NAME and --host-id ID "
			 "([A-Za-z0-9_.-], 1-%d bytes)", CLUSTER_MAX_NAME - 1);
		return -1;
	}
	/* A no-op until d->cluster is set, below. */
	if (td_report_subscribe(d, TD_SUB_APPLY, cluster_on_change, NULL) != 0) {
		snprintf(err, errlen, "cannot subscribe to agent changes");
		return -1;
	}
	struct td_cluster *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	c->d = d;
	int n = snprintf(c->rev_path, sizeof(c->rev_path), "%s/cluster-%s.rev", cfg->state_dir,
			 cfg->cluster);
	if (n < 0 || (size_t)n >= sizeof(c->rev_path) ||
	    cluster_prefix(cfg->cluster, "desired/", c->desired, sizeof(c->desired)) ||
	    cluster_prefix(cfg->cluster, "status/", c->status_key, sizeof(c->status_key)) ||
	    strlen(c->status_key) + strlen(cfg->host_id) >= sizeof(c->status_key)) {
		snprintf(err, errlen, "state directory or names too long");
		free(c);
		return -1;
	}
	strcat(c->status_key, cfg->host_id);
	n = snprintf(c->rec_path, sizeof(c->rec_path), "%s/cluster-%s.plans", cfg->state_dir,
		     cfg->cluster);
	if (n < 0 || (size_t)n >= sizeof(c->rec_path)) {
		snprintf(err, errlen, "state directory too long");
		free(c);
		return -1;
	}
	if (cluster_rev_load(c->rev_path, &c->applied_rev) != 0) {
		snprintf(err, errlen, "%s: unreadable or not a revision", c->rev_path);
		free(c);
		return -1;
	}
	c->saved_rev = c->start_rev = c->durable_rev = c->notified_rev = c->applied_rev;
	records_load(c);
	c->start_ms = util_mono_ms();
	/* Read once, at start: a SIGHUP keeps them, like the other cluster keys. */
	struct etcd_creds cr;
	memset(&cr, 0, sizeof(cr));
	if (cfg->etcd_credentials[0] &&
	    etcd_creds_load(cfg->etcd_credentials, &cr, err, errlen) != 0) {
		free(c->records);
		free(c);
		return -1;
	}
	int wrc = etcd_watcher_start(&c->w, d->loop, cfg->etcd, &cr, c->desired, c->applied_rev,
				     c->status_key, on_batch, c, err, errlen);
	explicit_bzero(&cr, sizeof(cr));
	if (wrc) {
		free(c->records);
		free(c);
		return -1;
	}
	uv_timer_init(d->loop, &c->pub_timer);
	c->pub_timer.data = c;
	uv_timer_init(d->loop, &c->redo_timer);
	c->redo_timer.data = c;
	c->open_handles = 2;
	uv_timer_start(&c->pub_timer, on_publish, 0, CL_PUBLISH_MS);
	d->cluster = c;
	view_update(c);
	log_info("cluster '%s' as host '%s' through etcd %s (applied revision %" PRId64 ")",
		 cfg->cluster, cfg->host_id, cfg->etcd, c->applied_rev);
	return 0;
}

static void cluster_free(struct td_cluster *c)
{
	for (size_t i = 0; i < c->n_sets; i++)
		set_free(&c->sets[i]);
	free(c->sets);
	for (size_t i = 0; i < c->n_plans; i++) {
		free(c->plans[(c->first_plan + i) % CL_MAX_PLANS].key);
		free(c->plans[(c->first_plan + i) % CL_MAX_PLANS].value);
	}
	free(c->seen);
	free(c->records);
	free(c->last_published);
	free(c->last_stable);
	free(c);
}

static void cluster_free_if_done(struct td_cluster *c)
{
	if (c->stopping && c->open_handles == 0 && !c->rev_busy && c->notes == 0)
		cluster_free(c);
}

static void on_timer_closed(uv_handle_t *h)
{
	struct td_cluster *c = h->data;
	c->open_handles--;
	cluster_free_if_done(c);
}

/*
 * Stop watching.  The structure lives on until its timers are closed and
 * no revision write is in flight: the save callbacks still queued run in
 * td_commit_drain, after this, and write the revision in place.
 */
void td_cluster_stop(struct td_daemon *d)
{
	struct td_cluster *c = d->cluster;
	if (!c)
		return;
	d->cluster = NULL;
	etcd_watcher_stop(c->w); /* joins its threads; batches not yet handled are dropped */
	c->stopping = true;
	uv_timer_stop(&c->pub_timer);
	uv_timer_stop(&c->redo_timer);
	uv_close((uv_handle_t *)&c->pub_timer, on_timer_closed);
	uv_close((uv_handle_t *)&c->redo_timer, on_timer_closed);
}
