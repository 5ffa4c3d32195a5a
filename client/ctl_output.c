/*
 * ctl_output.c - togglectl's printers: aligned tables with human units for
 * people (ctl_output_human), one JSON document per command or one JSON
 * object per line for `watch` (ctl_output_json, jansson; the schema is
 * docs/cli.md and must stay stable).  Everything printed that came from the
 * daemon is cleaned of control characters first.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl_output.h"
#include "toggle_error.h"
#include "toggle_hooks.h"
#include "util.h"

/* ---- small helpers ------------------------------------------------------ */

static void ctl_oom(void)
{
	fputs("togglectl: out of memory\n", stderr);
	exit(CTL_EXIT_ERROR);
}

static void *ctl_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		ctl_oom();
	return p;
}

/* A copy of s that is safe on a terminal and one column per byte. */
static char *ctl_clean(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	char *c = ctl_xrealloc(NULL, n + 1);
	util_clean(c, n + 1, s, UTIL_CLEAN_ASCII);
	return c;
}

void ctl_fmt_duration(uint64_t ms, char *buf, size_t len)
{
	unsigned long long s = ms / 1000;
	if (s < 60)
		snprintf(buf, len, "%llus", s);
	else if (s < 3600)
		snprintf(buf, len, "%llum%llus", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%lluh%llum", s / 3600, s % 3600 / 60);
	else
		snprintf(buf, len, "%llud%lluh", s / 86400, s % 86400 / 3600);
}

void ctl_fmt_ago(uint64_t unix_ms, uint64_t now_unix_ms, char *buf, size_t len)
{
	char d[32];
	if (unix_ms == 0) {
		snprintf(buf, len, "-");
		return;
	}
	ctl_fmt_duration(now_unix_ms > unix_ms ? now_unix_ms - unix_ms : 0, d, sizeof(d));
	snprintf(buf, len, "%s ago", d);
}

const char *ctl_mode_name(uint32_t mode)
{
	static const char *const names[] = {"lazy", "eager", "device"};
	return mode < 3 ? names[mode] : "?";
}

const char *ctl_event_name(int kind)
{
	switch (kind) {
	case TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_JOINED: return "joined";
	case TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_LEFT: return "left";
	case TOGGLE__EVENT_KIND__EVENT_KIND_SET_APPLIED: return "set_applied";
	case TOGGLE__EVENT_KIND__EVENT_KIND_PLAN_REJECTED: return "plan_rejected";
	case TOGGLE__EVENT_KIND__EVENT_KIND_ANOMALY: return "anomaly";
	default: return "unknown";
	}
}

/* toggle_err_name() without its "TOGGLE_" prefix ("OK", "EINVAL", ...): the
 * names of --json's "error" object (docs/cli.md); "EUNKNOWN" for a code
 * not in the list. */
const char *ctl_error_name(int code)
{
	static const char prefix[] = "TOGGLE_";
	const char *name = toggle_err_name(code);
	return name ? name + sizeof(prefix) - 1 : "EUNKNOWN";
}

/* "sim" for the simulator, else "12.4" from the driver's 12040. */
static void ctl_fmt_driver(int32_t v, char *buf, size_t len)
{
	if (v <= 0)
		snprintf(buf, len, "sim");
	else
		snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
}

/* The agent with this id in a ListAgents reply, or NULL. */
static const Toggle__AgentInfo *ctl_find_agent(const Toggle__ListAgentsReply *a, uint64_t id)
{
	for (size_t i = 0; a && i < a->n_agents; i++)
		if (a->agents[i]->agent_id == id)
			return a->agents[i];
	return NULL;
}

/* The catalog of a reply, when it is within bounds (else false). */
static bool ctl_catalog(char **types, size_t n_types, uint32_t n_layers,
			struct toggle_catalog *cat)
{
	if (n_types == 0 || n_types > TOGGLE_MAX_HOOK_TYPES || n_layers == 0 ||
	    n_layers > TOGGLE_MAX_LAYERS)
		return false;
	*cat = (struct toggle_catalog){.type_names = (const char *const *)types,
				       .n_types = (uint16_t)n_types,
				       .n_layers = (uint16_t)n_layers};
	return true;
}

/* Parse spec text from the daemon against cat: false if it does not parse. */
static bool ctl_spec_set(const struct toggle_catalog *cat, const char *spec, struct toggle_set *out)
{
	char err[8];
	return spec && toggle_set_parse(cat, spec, out, err, sizeof(err)) == 0;
}

/* Layers of one type in a set: "*" (all), "-" (none) or "0-7,12". */
static void ctl_layers_text(const struct toggle_set *set, uint16_t type, uint16_t n_layers,
			    char *buf, size_t len)
{
	size_t used = 0, on = 0;
	buf[0] = '\0';
	for (uint16_t l = 0; l < n_layers; l++) {
		if (!toggle_set_contains(set, (struct toggle_hook){type, l}))
			continue;
		uint16_t e = l;
		while (e + 1 < n_layers && toggle_set_contains(set, (struct toggle_hook){type, (uint16_t)(e + 1)}))
			e++;
		int n = e == l ? snprintf(buf + used, len - used, "%s%u", on ? "," : "", l)
			       : snprintf(buf + used, len - used, "%s%u-%u", on ? "," : "", l, e);
		if (n < 0 || (size_t)n >= len - used)
			break;
		used += (size_t)n;
		on += (size_t)(e - l) + 1;
		l = e;
	}
	if (on == n_layers)
		snprintf(buf, len, "*");
	else if (on == 0)
		snprintf(buf, len, "-");
}

/* ---- aligned tables ----------------------------------------------------- */

struct ctl_table {
	size_t ncols, n, cap;
	char **cells; /* row-major, n cells so far */
};

static void ctl_table_add(struct ctl_table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void ctl_table_add(struct ctl_table *t, const char *fmt, ...)
{
	char buf[1024], *text = buf;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(buf)) { /* a long spec: format it again, whole */
		text = ctl_xrealloc(NULL, (size_t)n + 1);
		va_start(ap, fmt);
		vsnprintf(text, (size_t)n + 1, fmt, ap);
		va_end(ap);
	}
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->cells = ctl_xrealloc(t->cells, t->cap * sizeof(*t->cells));
	}
	t->cells[t->n++] = ctl_clean(text[0] ? text : "-");
	if (text != buf)
		free(text);
}

static void ctl_table_init(struct ctl_table *t, size_t ncols, const char *const *head)
{
	*t = (struct ctl_table){.ncols = ncols};
	for (size_t c = 0; head && c < ncols; c++)
		ctl_table_add(t, "%s", head[c]);
}

/* Print with every column as wide as its widest cell, two spaces apart; free. */
static void ctl_table_print(struct ctl_table *t)
{
	size_t *w = calloc(t->ncols, sizeof(*w));
	if (!w)
		ctl_oom();
	for (size_t i = 0; i < t->n; i++) {
		size_t len = strlen(t->cells[i]);
		if (len > w[i % t->ncols])
			w[i % t->ncols] = len;
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t c = i % t->ncols;
		bool last = c + 1 == t->ncols || i + 1 == t->n;
		if (last)
			printf("%s\n", t->cells[i]);
		else
			printf("%-*s", (int)(w[c] + 2), t->cells[i]);
		free(t->cells[i]);
	}
	free(t->cells);
	free(w);
	t->cells = NULL;
	t->n = t->cap = 0;
}

/* ---- human printers ----------------------------------------------------- */

static void human_status(const Toggle__StatusReply *r, bool may_write)
{
	char up[32];
	ctl_fmt_duration(r->uptime_ms, up, sizeof(up));
	struct ctl_table t;
	ctl_table_init(&t, 2, NULL);
	ctl_table_add(&t, "daemon");
	ctl_table_add(&t, "toggled %s, protocol %u", r->daemon_version, r->protocol_version);
	ctl_table_add(&t, "uptime");
	ctl_table_add(&t, "%s", up);
	ctl_table_add(&t, "socket");
	ctl_table_add(&t, "%s", r->socket);
	ctl_table_add(&t, "state dir");
	ctl_table_add(&t, "%s", r->state_dir);
	ctl_table_add(&t, "agents");
	ctl_table_add(&t, "%u", r->agents);
	ctl_table_add(&t, "clients");
	ctl_table_add(&t, "%u", r->clients);
	ctl_table_add(&t, "requests");
	ctl_table_add(&t, "%llu", (unsigned long long)r->requests);
	ctl_table_add(&t, "errors");
	ctl_table_add(&t, "%llu", (unsigned long long)r->errors);
	ctl_table_add(&t, "denied");
	ctl_table_add(&t, "%llu", (unsigned long long)r->denied);
	ctl_table_add(&t, "dropped peers");
	ctl_table_add(&t, "%llu", (unsigned long long)r->dropped_peers);
	/* proto3: 0 is a count like any other (the line is always there), "" is no failure. */
	ctl_table_add(&t, "save errors");
	if (r->save_error[0])
		ctl_table_add(&t, "%llu, failing: %s", (unsigned long long)r->save_errors,
			      r->save_error);
	else
		ctl_table_add(&t, "%llu", (unsigned long long)r->save_errors);
	ctl_table_add(&t, "access");
	ctl_table_add(&t, "%s", may_write ? "read-write" : "read-only");
	if (r->etcd_member && r->etcd_member[0]) {
		char since[64] = "?";
		time_t ts = (time_t)(r->etcd_since_unix_ms / 1000);
		struct tm tm;
		if (r->etcd_since_unix_ms && gmtime_r(&ts, &tm))
			strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
		ctl_table_add(&t, "etcd");
		ctl_table_add(&t, "%s %s since %s, %llu failovers%s%s",
			      r->etcd_connected ? "watching" : "lost (retrying), last", r->etcd_member,
			      since, (unsigned long long)r->etcd_failovers,
			      r->etcd_last_error[0] ? "; last error: " : "", r->etcd_last_error);
	}
	ctl_table_print(&t);
}

static void human_agents(const Toggle__ListAgentsReply *r)
{
	static const char *const head[] = {"ID", "NAME", "GROUP", "PID", "MODE", "DRIVER", "STEP",
					   "VERSION", "APPLIED", "GRAPHS", "ANOMALIES", "QUEUED",
					   "ENABLED", "CONNECTED", "RING", "RECORDS", "DROPPED",
					   "FORWARDED"};
	enum { RING_COLS = 4 };
	if (r->n_agents == 0) {
		printf("no agents connected\n");
		return;
	}
	/* The RING columns (its size, the agent's records and drops, what toggled
	 * forwarded) only when an agent shares a data ring: the table stays as it
	 * was for everyone else. */
	bool rings = false;
	for (size_t i = 0; i < r->n_agents; i++)
		rings = rings || r->agents[i]->ring_bytes;
	uint64_t now = util_unix_ms();
	struct ctl_table t;
	ctl_table_init(&t, sizeof(head) / sizeof(head[0]) - (rings ? 0 : RING_COLS), head);
	for (size_t i = 0; i < r->n_agents; i++) {
		const Toggle__AgentInfo *a = r->agents[i];
		char drv[16], ago[48];
		ctl_fmt_driver(a->driver_version, drv, sizeof(drv));
		ctl_fmt_ago(a->connected_unix_ms, now, ago, sizeof(ago));
		ctl_table_add(&t, "%llu", (unsigned long long)a->agent_id);
		ctl_table_add(&t, "%s", a->name);
		ctl_table_add(&t, "%s", a->group ? a->group : "");
		ctl_table_add(&t, "%u", a->pid);
		ctl_table_add(&t, "%s", ctl_mode_name(a->mode));
		ctl_table_add(&t, "%s", drv);
		if (a->step < 0)
			ctl_table_add(&t, "-");
		else
			ctl_table_add(&t, "%lld", (long long)a->step);
		ctl_table_add(&t, "%llu", (unsigned long long)a->control_version);
		ctl_table_add(&t, "%llu", (unsigned long long)a->applied_version);
		ctl_table_add(&t, "%u", a->graphs);
		if (a->tainted_launches)
			ctl_table_add(&t, "%llu (tainted %llu, last step %lld)",
				      (unsigned long long)a->anomalies,
				      (unsigned long long)a->tainted_launches, (long long)a->tainted_step);
		else
			ctl_table_add(&t, "%llu", (unsigned long long)a->anomalies);
		ctl_table_add(&t, "%u", a->pending_plan);
		ctl_table_add(&t, "%s", a->enabled);
		ctl_table_add(&t, "%s", ago);
		if (rings && a->ring_bytes) {
			ctl_table_add(&t, "%llu KiB", (unsigned long long)(a->ring_bytes >> 10));
			ctl_table_add(&t, "%llu", (unsigned long long)a->ring_records);
			ctl_table_add(&t, "%llu", (unsigned long long)a->ring_dropped);
			ctl_table_add(&t, "%llu (%.1f MiB)", (unsigned long long)a->ring_forwarded_records,
				      (double)a->ring_forwarded_bytes / (1024.0 * 1024.0));
		} else if (rings) {
			for (int k = 0; k < RING_COLS; k++)
				ctl_table_add(&t, "-");
		}
	}
	ctl_table_print(&t);
}

static const char *ctl_graph_state(const Toggle__GraphInfo *g)
{
	if (g->stale)
		return "stale";
	if (!g->bound)
		return "unbound";
	/* Device mode: a launch ran another set than its step's. */
	return g->blocked ? "bound,tainted,blocked" : g->tainted ? "bound,tainted" : "bound";
}

/* Which exec its launches run: the main one, the producer-free one, device
 * mode's full one, or none. */
static const char *ctl_graph_runs(const Toggle__GraphInfo *g)
{
	if (g->stale || !g->bound)
		return NULL;
	return g->bare_running ? "bare" : g->full_running ? "full" : "main";
}

static void human_graphs(const Toggle__ListGraphsReply *g, const Toggle__ListAgentsReply *a)
{
	static const char *const head[] = {"AGENT", "NAME", "GRAPH", "EXEC", "NODES", "HOOKS",
					   "APPLIED", "REPLAYS", "LAST-STEP", "MODE", "STATE", "RUNS"};
	if (g->n_graphs == 0) {
		printf("no graphs\n");
	} else {
		struct ctl_table t;
		ctl_table_init(&t, sizeof(head) / sizeof(head[0]), head);
		for (size_t i = 0; i < g->n_graphs; i++) {
			const Toggle__GraphInfo *r = g->graphs[i];
			const Toggle__AgentInfo *ag = ctl_find_agent(a, r->agent_id);
			ctl_table_add(&t, "%llu", (unsigned long long)r->agent_id);
			ctl_table_add(&t, "%s", ag ? ag->name : "?");
			ctl_table_add(&t, "0x%llx", (unsigned long long)r->graph);
			if (r->exec)
				ctl_table_add(&t, "0x%llx", (unsigned long long)r->exec);
			else
				ctl_table_add(&t, "-");
			ctl_table_add(&t, "%u", r->nodes);
			ctl_table_add(&t, "%u", r->hooks_covered);
			if (r->applied_version)
				ctl_table_add(&t, "%llu", (unsigned long long)r->applied_version);
			else
				ctl_table_add(&t, "-");
			ctl_table_add(&t, "%llu", (unsigned long long)r->replays);
			if (r->last_step < 0)
				ctl_table_add(&t, "-");
			else
				ctl_table_add(&t, "%lld", (long long)r->last_step);
			ctl_table_add(&t, "%s", ag ? ctl_mode_name(ag->mode) : "?");
			ctl_table_add(&t, "%s", ctl_graph_state(r));
			ctl_table_add(&t, "%s", ctl_graph_runs(r) ? ctl_graph_runs(r) : "-");
		}
		ctl_table_print(&t);
	}
	for (size_t i = 0; i < g->n_truncated_agents; i++)
		fprintf(stderr, "togglectl: agent %llu has more graphs than its shared memory lists; "
			"only the first are shown\n", (unsigned long long)g->truncated_agents[i]);
}

static void human_hooks(const Toggle__HooksReply *r)
{
	static const char *const head[] = {"AGENT", "NAME", "HOOK", "LAYERS", "ENABLED", "CURRENT"};
	if (r->n_agents == 0) {
		printf("no agents connected\n");
		return;
	}
	struct ctl_table t;
	ctl_table_init(&t, sizeof(head) / sizeof(head[0]), head);
	for (size_t i = 0; i < r->n_agents; i++) {
		const Toggle__AgentHooks *h = r->agents[i];
		struct toggle_catalog cat;
		struct toggle_set en, cur;
		bool ok = ctl_catalog(h->hook_types, h->n_hook_types, h->n_layers, &cat) &&
			  ctl_spec_set(&cat, h->enabled, &en) && ctl_spec_set(&cat, h->current, &cur);
		if (!ok) { /* not splittable per type: show the spec text */
			ctl_table_add(&t, "%llu", (unsigned long long)h->agent_id);
			ctl_table_add(&t, "%s", h->name);
			ctl_table_add(&t, "(all)");
			ctl_table_add(&t, "%u", h->n_layers);
			ctl_table_add(&t, "%s", h->enabled);
			ctl_table_add(&t, "%s", h->current);
			continue;
		}
		for (uint16_t ty = 0; ty < cat.n_types; ty++) {
			char e[1024], c[1024];
			ctl_layers_text(&en, ty, cat.n_layers, e, sizeof(e));
			ctl_layers_text(&cur, ty, cat.n_layers, c, sizeof(c));
			ctl_table_add(&t, "%llu", (unsigned long long)h->agent_id);
			ctl_table_add(&t, "%s", h->name);
			ctl_table_add(&t, "%s", h->hook_types[ty]);
			ctl_table_add(&t, "%u", h->n_layers);
			ctl_table_add(&t, "%s", e);
			ctl_table_add(&t, "%s", c);
		}
	}
	ctl_table_print(&t);
}

static void human_set(const struct ctl_set_result *r)
{
	static const char *const head[] = {"AGENT", "VERSION", "STATE"};
	struct ctl_table t;
	ctl_table_init(&t, 3, head);
	for (size_t i = 0; i < r->reply->n_versions; i++) {
		ctl_table_add(&t, "%llu", (unsigned long long)r->reply->versions[i]->agent_id);
		ctl_table_add(&t, "%llu", (unsigned long long)r->reply->versions[i]->version);
		if (r->aligned)
			ctl_table_add(&t, "%s step %lld", r->waited ? "applied from" : "taken for",
				      (long long)r->reply->aligned_step);
		else
			ctl_table_add(&t, "%s", r->waited ? "applied" : "written");
	}
	ctl_table_print(&t);
}

/* The steps a plan names: absolute, or (togglectl never mixes them) the
 * offsets of a relative plan, *relative then true. */
static void ctl_plan_range(const Toggle__SubmitPlanRequest *m, long long *lo, long long *hi,
			   bool *relative)
{
	*relative = m->n_entries && (m->entries[0]->after != 0);
	for (size_t i = 0; i < m->n_entries; i++) {
		const Toggle__PlanEntry *e = m->entries[i];
		long long s = (long long)((e->after != 0) ? e->after : e->step);
		*lo = i == 0 || s < *lo ? s : *lo;
		*hi = i == 0 || s > *hi ? s : *hi;
	}
	if (!m->n_entries)
		*lo = *hi = 0;
}

static void human_plan_submitted(const Toggle__SubmitPlanRequest *m)
{
	long long lo, hi;
	bool rel;
	ctl_plan_range(m, &lo, &hi, &rel);
	const char *plus = rel ? "+" : "", *tail = rel ? " after each agent's current step" : "";
	if (lo == hi)
		printf("plan submitted: %zu %s, step %s%lld%s\n", m->n_entries,
		       m->n_entries == 1 ? "entry" : "entries", plus, lo, tail);
	else
		printf("plan submitted: %zu entries, steps %s%lld-%s%lld%s\n", m->n_entries, plus, lo,
		       plus, hi, tail);
}

static int ctl_entry_cmp(const void *a, const void *b)
{
	const Toggle__PlanEntry *x = *(Toggle__PlanEntry *const *)a;
	const Toggle__PlanEntry *y = *(Toggle__PlanEntry *const *)b;
	return (x->step > y->step) - (x->step < y->step);
}

/* Entries of one agent's plan in step order (a sorted copy of the pointers). */
static Toggle__PlanEntry **ctl_sorted_entries(const Toggle__AgentPlan *p)
{
	Toggle__PlanEntry **v = ctl_xrealloc(NULL, p->n_entries * sizeof(*v));
	if (p->n_entries)
		memcpy(v, p->entries, p->n_entries * sizeof(*v));
	qsort(v, p->n_entries, sizeof(*v), ctl_entry_cmp);
	return v;
}

static void human_plan(const Toggle__ShowPlanReply *r)
{
	static const char *const head[] = {"AGENT", "STEP", "HOOKS"};
	size_t total = 0;
	for (size_t i = 0; i < r->n_plans; i++)
		total += r->plans[i]->n_entries;
	if (total == 0) {
		printf("no plan entries pending\n");
		return;
	}
	struct ctl_table t;
	ctl_table_init(&t, 3, head);
	for (size_t i = 0; i < r->n_plans; i++) {
		Toggle__PlanEntry **v = ctl_sorted_entries(r->plans[i]);
		for (size_t j = 0; j < r->plans[i]->n_entries; j++) {
			ctl_table_add(&t, "%llu", (unsigned long long)r->plans[i]->agent_id);
			ctl_table_add(&t, "%lld", (long long)v[j]->step);
			ctl_table_add(&t, "%s", v[j]->spec);
		}
		free(v);
	}
	ctl_table_print(&t);
}

static void human_plan_cleared(void)
{
	printf("plan cleared\n");
}

static void human_event(const Toggle__Event *e)
{
	time_t sec = (time_t)(e->unix_ms / 1000);
	struct tm tm;
	char when[32] = "?";
	if (localtime_r(&sec, &tm))
		strftime(when, sizeof(when), "%H:%M:%S", &tm);
	char *name = ctl_clean(e->agent_name);
	printf("%s.%03u %-13s agent=%llu name=%s", when, (unsigned)(e->unix_ms % 1000),
	       ctl_event_name(e->kind), (unsigned long long)e->agent_id, name);
	if (e->version)
		printf(" version=%llu", (unsigned long long)e->version);
	if (e->step >= 0)
		printf(" step=%lld", (long long)e->step);
	if (e->message && e->message[0]) {
		char *msg = ctl_clean(e->message);
		printf(" %s", msg);
		free(msg);
	}
	printf("\n");
	fflush(stdout);
	free(name);
}

static void human_error(const struct ctl_error *e)
{
	char *msg = ctl_clean(e->message);
	fprintf(stderr, "togglectl: %s", msg);
	free(msg);
	for (size_t i = 0; i < e->n_agents; i++) {
		char *a = ctl_clean(e->agents[i]);
		fprintf(stderr, "%s%s", i ? ", " : " (agents: ", a);
		free(a);
	}
	fprintf(stderr, "%s\n", e->n_agents ? ")" : "");
}

/* One line, rewritten in place on a terminal; the last one stays. */
static void human_record(const struct ctl_record_stats *s)
{
	bool tty = isatty(STDERR_FILENO);
	if (!s->final && !tty)
		return; /* a log gets the summary only */
	double mib = (double)s->bytes / (1024.0 * 1024.0);
	double secs = (double)s->elapsed_ms / 1000.0;
	fprintf(stderr, "%srecord: %llu records, %.1f MiB (%.1f MiB/s), %llu files, %llu dropped, "
		"%zu/%zu agents done%s%s%s",
		tty ? "\r\033[K" : "", (unsigned long long)s->records, mib,
		secs > 0 ? mib / secs : 0.0, (unsigned long long)s->files,
		(unsigned long long)s->dropped, s->agents_ended, s->agents,
		s->final ? (s->complete ? ", complete" : ", stopped") : "",
		s->final && s->stopped ? ": " : "", s->final && s->stopped ? s->stopped : "");
	if (s->final)
		fprintf(stderr, "\n");
	fflush(stderr);
}

const struct ctl_output ctl_output_human = {
	.status = human_status,
	.agents = human_agents,
	.graphs = human_graphs,
	.hooks = human_hooks,
	.set = human_set,
	.plan_submitted = human_plan_submitted,
	.plan = human_plan,
	.plan_cleared = human_plan_cleared,
	.event = human_event,
	.error = human_error,
	.record = human_record,
};

/* ---- JSON printers ------------------------------------------------------ */

/* A JSON string of untrusted text: invalid UTF-8 is cleaned rather than lost. */
static json_t *jstr(const char *s)
{
	json_t *j = json_string(s ? s : "");
	if (!j) {
		char *c = ctl_clean(s);
		j = json_string(c);
		free(c);
	}
	return j;
}

static json_t *jstr_or_null(const char *s)
{
	return s && s[0] ? jstr(s) : json_null();
}

static json_t *ju64(uint64_t v)
{
	return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

static json_t *ji64(int64_t v)
{
	return json_integer((json_int_t)v);
}

static json_t *jhandle(uint64_t h)
{
	char buf[24];
	snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)h);
	return json_string(buf);
}

static json_t *jstrings(char **v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, jstr(v[i]));
	return a;
}

/* One document per command (indented), one line per object in streams. */
static void jemit(json_t *root, bool stream)
{
	if (!root)
		ctl_oom();
	size_t flags = stream ? JSON_COMPACT : JSON_INDENT(2);
	if (json_dumpf(root, stdout, flags) != 0)
		ctl_oom();
	fputc('\n', stdout);
	fflush(stdout);
	json_decref(root);
}

static json_t *json_of_agent(const Toggle__AgentInfo *a)
{
	/* Its data ring (docs/recording.md), null without one: the agent's counters
	 * as toggled shows them (never back, at most 2^53) and what toggled forwarded. */
	json_t *ring = a->ring_bytes
			       ? json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "bytes",
					   ju64(a->ring_bytes), "records", ju64(a->ring_records),
					   "dropped", ju64(a->ring_dropped), "errors",
					   ju64(a->ring_errors), "forwarded_records",
					   ju64(a->ring_forwarded_records), "forwarded_bytes",
					   ju64(a->ring_forwarded_bytes), "counter_faults",
					   ju64(a->ring_counter_faults))
			       : json_null();
	return json_pack("{s:o, s:o, s:o, s:I, s:I, s:s, s:i, s:o, s:o, s:o, s:o, s:I, s:o, s:o, "
			 "s:o, s:I, s:I, s:o, s:o, s:o}",
			 "agent_id", ju64(a->agent_id),
			 "name", jstr(a->name),
			 "group", jstr_or_null(a->group),
			 "pid", (json_int_t)a->pid,
			 "uid", (json_int_t)a->uid,
			 "mode", ctl_mode_name(a->mode),
			 "driver_version", (int)a->driver_version,
			 "connected_unix_ms", ju64(a->connected_unix_ms),
			 "step", ji64(a->step),
			 "control_version", ju64(a->control_version),
			 "applied_version", ju64(a->applied_version),
			 "graphs", (json_int_t)a->graphs,
			 "anomalies", ju64(a->anomalies),
			 "enabled", jstr(a->enabled),
			 "hook_types", jstrings(a->hook_types, a->n_hook_types),
			 "n_layers", (json_int_t)a->n_layers,
			 "pending_plan", (json_int_t)a->pending_plan,
			 "tainted_launches", ju64(a->tainted_launches),
			 /* proto3: the step means something only once a launch was tainted */
			 "tainted_step", ji64(a->tainted_launches ? a->tainted_step : -1),
			 "ring", ring);
}

json_t *ctl_json_status(const Toggle__StatusReply *r, bool may_write)
{
	return json_pack("{s:o, s:I, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o, s:o}",
			"daemon_version", jstr(r->daemon_version),
			"protocol_version", (json_int_t)r->protocol_version,
			"uptime_ms", ju64(r->uptime_ms),
			"agents", (json_int_t)r->agents,
			"clients", (json_int_t)r->clients,
			"requests", ju64(r->requests),
			"errors", ju64(r->errors),
			"denied", ju64(r->denied),
			"dropped_peers", ju64(r->dropped_peers),
			"socket", jstr(r->socket),
			"state_dir", jstr(r->state_dir),
			"may_write", may_write,
			"save_errors", ju64(r->save_errors),
			"save_error", jstr_or_null(r->save_error),
			"etcd", r->etcd_member && r->etcd_member[0]
				? json_pack("{s:s, s:b, s:I, s:I, s:s}", "member", r->etcd_member,
					    "connected", r->etcd_connected, "since_ms",
					    (json_int_t)r->etcd_since_unix_ms, "failovers",
					    (json_int_t)r->etcd_failovers, "last_error",
					    r->etcd_last_error)
				: json_null());
}

static void json_status(const Toggle__StatusReply *r, bool may_write)
{
	jemit(ctl_json_status(r, may_write), false);
}

json_t *ctl_json_agents(const Toggle__ListAgentsReply *r)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < r->n_agents; i++)
		json_array_append_new(arr, json_of_agent(r->agents[i]));
	return json_pack("{s:o}", "agents", arr);
}

static void json_agents(const Toggle__ListAgentsReply *r)
{
	jemit(ctl_json_agents(r), false);
}

json_t *ctl_json_graphs(const Toggle__ListGraphsReply *g, const Toggle__ListAgentsReply *a)
{
	json_t *arr = json_array(), *trunc = json_array();
	for (size_t i = 0; i < g->n_graphs; i++) {
		const Toggle__GraphInfo *r = g->graphs[i];
		const Toggle__AgentInfo *ag = ctl_find_agent(a, r->agent_id);
		json_array_append_new(arr, json_pack(
			"{s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:b, s:b, s:b, s:b, s:b, s:b, "
			"s:o}",
			"agent_id", ju64(r->agent_id),
			"agent_name", ag ? jstr(ag->name) : json_null(),
			"graph", jhandle(r->graph),
			"exec", r->exec ? jhandle(r->exec) : json_null(),
			"nodes", (json_int_t)r->nodes,
			"hooks_covered", (json_int_t)r->hooks_covered,
			"applied_version", ju64(r->applied_version),
			"replays", ju64(r->replays),
			"last_step", ji64(r->last_step),
			"mode", ag ? json_string(ctl_mode_name(ag->mode)) : json_null(),
			"bound", (int)r->bound,
			"stale", (int)r->stale,
			"tainted", (int)r->tainted,
			"blocked", (int)r->blocked,
			"bare_exec", (int)r->bare_exec,
			"full_exec", (int)r->full_exec,
			"runs", ctl_graph_runs(r) ? json_string(ctl_graph_runs(r)) : json_null()));
	}
	for (size_t i = 0; i < g->n_truncated_agents; i++)
		json_array_append_new(trunc, ju64(g->truncated_agents[i]));
	return json_pack("{s:o, s:o}", "graphs", arr, "truncated_agents", trunc);
}

static void json_graphs(const Toggle__ListGraphsReply *g, const Toggle__ListAgentsReply *a)
{
	jemit(ctl_json_graphs(g, a), false);
}

/* The layers of one type in a set, as an array of numbers. */
static json_t *json_layers(const struct toggle_set *set, uint16_t type, uint16_t n_layers)
{
	json_t *a = json_array();
	for (uint16_t l = 0; l < n_layers; l++)
		if (toggle_set_contains(set, (struct toggle_hook){type, l}))
			json_array_append_new(a, json_integer(l));
	return a;
}

static void json_hooks(const Toggle__HooksReply *r)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < r->n_agents; i++) {
		const Toggle__AgentHooks *h = r->agents[i];
		struct toggle_catalog cat;
		struct toggle_set en, cur;
		bool cat_ok = ctl_catalog(h->hook_types, h->n_hook_types, h->n_layers, &cat);
		bool en_ok = cat_ok && ctl_spec_set(&cat, h->enabled, &en);
		bool cur_ok = cat_ok && ctl_spec_set(&cat, h->current, &cur);
		json_t *types = json_array();
		for (size_t ty = 0; ty < h->n_hook_types; ty++)
			json_array_append_new(types, json_pack(
				"{s:o, s:o, s:o}", "type", jstr(h->hook_types[ty]),
				"enabled", en_ok ? json_layers(&en, (uint16_t)ty, cat.n_layers) : json_null(),
				"current", cur_ok ? json_layers(&cur, (uint16_t)ty, cat.n_layers) : json_null()));
		json_array_append_new(arr, json_pack(
			"{s:o, s:o, s:o, s:I, s:o, s:o, s:o}",
			"agent_id", ju64(h->agent_id),
			"name", jstr(h->name),
			"hook_types", jstrings(h->hook_types, h->n_hook_types),
			"n_layers", (json_int_t)h->n_layers,
			"enabled", jstr(h->enabled),
			"current", jstr(h->current),
			"types", types));
	}
	jemit(json_pack("{s:o}", "agents", arr), false);
}

static void json_set(const struct ctl_set_result *r)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < r->reply->n_versions; i++)
		json_array_append_new(arr, json_pack("{s:o, s:o}",
			"agent_id", ju64(r->reply->versions[i]->agent_id),
			"version", ju64(r->reply->versions[i]->version)));
	json_t *o = json_pack("{s:s, s:o, s:b, s:o}", "op", r->op, "spec", jstr(r->spec),
			      "waited", (int)r->waited, "agents", arr);
	if (r->aligned && o)
		json_object_set_new(o, "aligned_step", ji64(r->reply->aligned_step));
	jemit(o, false);
}

static void json_plan_submitted(const Toggle__SubmitPlanRequest *m)
{
	long long lo, hi;
	bool rel;
	ctl_plan_range(m, &lo, &hi, &rel);
	jemit(json_pack("{s:I, s:I, s:I, s:b}", "entries", (json_int_t)m->n_entries,
			"first_step", (json_int_t)lo, "last_step", (json_int_t)hi, "relative", (int)rel),
	      false);
}

static void json_plan(const Toggle__ShowPlanReply *r)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < r->n_plans; i++) {
		json_t *entries = json_array();
		Toggle__PlanEntry **v = ctl_sorted_entries(r->plans[i]);
		for (size_t j = 0; j < r->plans[i]->n_entries; j++)
			json_array_append_new(entries, json_pack("{s:o, s:o}", "step", ji64(v[j]->step),
								 "hooks", jstr(v[j]->spec)));
		free(v);
		json_array_append_new(arr, json_pack("{s:o, s:o}", "agent_id",
						     ju64(r->plans[i]->agent_id), "entries", entries));
	}
	jemit(json_pack("{s:o}", "plans", arr), false);
}

static void json_plan_cleared(void)
{
	jemit(json_pack("{s:b}", "cleared", 1), false);
}

static void json_event(const Toggle__Event *e)
{
	jemit(json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
			"kind", ctl_event_name(e->kind),
			"agent_id", ju64(e->agent_id),
			"agent_name", jstr(e->agent_name),
			"version", ju64(e->version),
			"step", e->step >= 0 ? ji64(e->step) : json_null(),
			"message", jstr_or_null(e->message),
			"unix_ms", ju64(e->unix_ms)),
	      true);
}

static void json_error(const struct ctl_error *e)
{
	json_t *agents = json_array();
	for (size_t i = 0; i < e->n_agents; i++)
		json_array_append_new(agents, jstr(e->agents[i]));
	jemit(json_pack("{s:{s:i, s:s, s:o, s:o}}", "error", "code", e->code,
			"name", ctl_error_name(e->code), "message", jstr(e->message),
			"agents", agents),
	      e->stream);
}

static void json_record(const struct ctl_record_stats *s)
{
	jemit(json_pack("{s:{s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:b, s:b, s:o}}",
			s->final ? "recorded" : "progress",
			"records", ju64(s->records), "bytes", ju64(s->bytes),
			"dropped", ju64(s->dropped), "files", ju64(s->files),
			"steps", ju64(s->steps), "agents", (json_int_t)s->agents,
			"agents_ended", (json_int_t)s->agents_ended,
			"elapsed_ms", ju64(s->elapsed_ms), "final", s->final,
			"complete", s->complete, "stopped", jstr_or_null(s->stopped)),
	      true);
}

const struct ctl_output ctl_output_json = {
	.status = json_status,
	.agents = json_agents,
	.graphs = json_graphs,
	.hooks = json_hooks,
	.set = json_set,
	.plan_submitted = json_plan_submitted,
	.plan = json_plan,
	.plan_cleared = json_plan_cleared,
	.event = json_event,
	.error = json_error,
	.record = json_record,
};

/* ---- errors ------------------------------------------------------------- */

int ctl_fail(const struct ctl_output *out, int exitcode, int code, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct ctl_error e = {.code = code, .message = msg};
	out->error(&e);
	return exitcode;
}
