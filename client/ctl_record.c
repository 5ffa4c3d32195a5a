/*
 * ctl_record.c - togglectl record SPEC -o DIR: asks toggled to record the
 * hooks of SPEC on the target agents (RecordRequest), then turns the
 * stream of RecordData chunks into safetensors files, one per agent and
 * step (DIR/<agent>-<id>/step-<step>.safetensors), and writes DIR/index.json
 * at the end.  Everything the daemon sends is checked again here (sizes,
 * dtypes, shapes, chunk order) before a byte is kept: a bad frame ends the
 * recording with an error, never a file that lies.  Layout and formats:
 * docs/recording.md.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl.h"
#include "ctl_output.h"
#include "safetensors.h"
#include "toggle_error.h"
#include "util.h"

#define REC_TICK_MS       200             /* how often the stop flag and progress are looked at */
#define REC_PROGRESS_MS   1000            /* a progress report at most this often */
#define REC_MAX_RECORD    (1ull << 32)    /* bytes of one record */
#define REC_MAX_STEP      (4ull << 30)    /* bytes one agent's step may hold in memory */
#define REC_MAX_TENSORS   4096            /* records of one agent's step */
#define REC_FORMAT        "graphtoggle-recording"
#define REC_FORMAT_VERSION 1

static volatile sig_atomic_t rec_stop;

static void rec_on_stop(int sig)
{
	(void)sig;
	rec_stop = 1;
}

/* One record of the step being gathered. */
struct rec_tensor {
	char name[TGP_MAX_NAME + 32];
	char hook[TGP_MAX_NAME + 16];
	char dtype[16];
	size_t ndim;
	uint64_t shape[ST_MAX_DIMS];
	uint64_t graph, seq, size, got;
	uint8_t *data;
};

struct rec_agent {
	uint64_t id;
	char name[TGP_MAX_NAME];
	char sub[TGP_MAX_NAME + 24];     /* its directory under DIR */
	bool have_step;
	int64_t step;
	struct rec_tensor *t;
	size_t n;
	uint64_t step_bytes;
	uint64_t records, bytes, dropped, steps, files;
	bool ended;
	int code;
	char msg[512];
};

struct rec {
	struct ctl_ctx *ctx;
	const char *dir;
	char *spec;
	uint64_t request_id;
	struct rec_agent *a;
	size_t n;
	json_t *files;                   /* the index's file entries */
	uint64_t start_ms, last_progress_ms;
	char err[1024];                  /* the first error that ends the recording */
	int err_code;
};

static struct rec_agent *rec_agent(struct rec *r, uint64_t id)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->a[i].id == id)
			return &r->a[i];
	return NULL;
}

static int rec_fail(struct rec *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int rec_fail(struct rec *r, int code, const char *fmt, ...)
{
	if (!r->err_code) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->err, sizeof(r->err), fmt, ap);
		va_end(ap);
		r->err_code = code;
	}
	return code;
}

static void rec_step_free(struct rec_agent *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->t[i].data);
	free(a->t);
	a->t = NULL;
	a->n = 0;
	a->step_bytes = 0;
}

/* Write the agent's gathered step as one file (complete records only). */
static int rec_flush(struct rec *r, struct rec_agent *a)
{
	size_t n = a->n;
	if (n && a->t[n - 1].got < a->t[n - 1].size)
		n--; /* a record cut short (interrupted): left out, not written half */
	if (!a->have_step || n == 0) {
		rec_step_free(a);
		return 0;
	}
	char rel[TGP_MAX_NAME + 64], path[PATH_MAX + 128];
	snprintf(rel, sizeof(rel), "%s/step-%012lld.safetensors", a->sub, (long long)a->step);
	snprintf(path, sizeof(path), "%s/%s", r->dir, rel);
	struct st_tensor *st = calloc(n, sizeof(*st));
	json_t *meta = json_object(), *names = json_array();
	int rc = st && meta && names ? 0 : TOGGLE_ENOMEM;
	char buf[64];
	snprintf(buf, sizeof(buf), "%lld", (long long)a->step);
	json_object_set_new(meta, "format", json_string(REC_FORMAT));
	json_object_set_new(meta, "step", json_string(buf));
	json_object_set_new(meta, "agent", json_string(a->name));
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)a->id);
	json_object_set_new(meta, "agent_id", json_string(buf));
	for (size_t i = 0; !rc && i < n; i++) {
		struct rec_tensor *t = &a->t[i];
		st[i] = (struct st_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim,
					   .data = t->data, .size = t->size};
		memcpy(st[i].shape, t->shape, sizeof(st[i].shape));
		char key[sizeof(t->name) + 16];
		snprintf(key, sizeof(key), "%s.hook", t->name);
		json_object_set_new(meta, key, json_string(t->hook));
		snprintf(key, sizeof(key), "%s.graph", t->name);
		snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)t->graph);
		json_object_set_new(meta, key, json_string(buf));
		snprintf(key, sizeof(key), "%s.batch", t->name);
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)(t->ndim ? t->shape[0] : 1));
		json_object_set_new(meta, key, json_string(buf));
		snprintf(key, sizeof(key), "%s.seq", t->name);
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)t->seq);
		json_object_set_new(meta, key, json_string(buf));
		json_array_append_new(names, json_pack("{s:s,s:s}", "name", t->name, "hook", t->hook));
	}
	char err[1024] = "";
	if (!rc)
		rc = st_write(path, st, n, meta, err, sizeof(err));
	if (rc == 0) {
		json_array_append_new(r->files, json_pack("{s:s,s:I,s:s,s:I,s:O}", "file", rel,
							  "agent_id", (json_int_t)a->id, "agent",
							  a->name, "step", (json_int_t)a->step,
							  "tensors", names));
		a->files++;
	} else {
		rec_fail(r, rc, "%s", err[0] ? err : "out of memory writing a file");
	}
	json_decref(names);
	json_decref(meta);
	free(st);
	rec_step_free(a);
	return rc;
}

/* The index: what was asked, the agents, every file; written last, replaced whole. */
static int rec_write_index(struct rec *r, bool complete, const char *stopped)
{
	json_t *agents = json_array();
	for (size_t i = 0; i < r->n; i++) {
		struct rec_agent *a = &r->a[i];
		json_array_append_new(agents, json_pack("{s:I,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:b,s:s?}",
			"agent_id", (json_int_t)a->id, "name", a->name, "dir", a->sub,
			"records", (json_int_t)a->records, "bytes", (json_int_t)a->bytes,
			"dropped", (json_int_t)a->dropped, "steps", (json_int_t)a->steps,
			"files", (json_int_t)a->files, "ended", a->ended,
			"error", a->code ? a->msg : NULL));
	}
	json_t *root = json_pack("{s:s,s:i,s:s,s:I,s:b,s:s?,s:o,s:O}", "format", REC_FORMAT,
				 "version", REC_FORMAT_VERSION, "spec", r->spec,
				 "started_unix_ms", (json_int_t)r->start_ms, "complete", complete,
				 "stopped", stopped, "agents", agents, "files", r->files);
	char path[PATH_MAX + 32], tmp[PATH_MAX + 48];
	snprintf(path, sizeof(path), "%s/index.json", r->dir);
	snprintf(tmp, sizeof(tmp), "%s/index.json.tmp", r->dir);
	int rc = root && json_dump_file(root, tmp, JSON_INDENT(1) | JSON_PRESERVE_ORDER) == 0 &&
			 rename(tmp, path) == 0 ? 0 : TOGGLE_EIO;
	int e = errno;
	json_decref(root);
	if (rc) {
		unlink(tmp);
		rec_fail(r, rc, "cannot write %s: %s", path, strerror(e));
	}
	return rc;
}

static void rec_report(struct rec *r, bool final, bool complete, const char *stopped)
{
	struct ctl_record_stats s = {.dir = r->dir, .agents = r->n, .final = final,
				     .complete = complete, .stopped = stopped};
	for (size_t i = 0; i < r->n; i++) {
		s.records += r->a[i].records;
		s.bytes += r->a[i].bytes;
		s.dropped += r->a[i].dropped;
		s.files += r->a[i].files;
		s.steps += r->a[i].steps;
		s.agents_ended += r->a[i].ended;
	}
	s.elapsed_ms = util_unix_ms() - r->start_ms;
	r->ctx->out->record(&s);
}

/* The hook's spec text as the daemon sent it: it names a file's tensors, so only a tame name. */
static bool rec_hook_ok(const char *h)
{
	size_t n = strlen(h);
	if (n == 0 || n >= TGP_MAX_NAME + 16)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((h[i] >= 'a' && h[i] <= 'z') || (h[i] >= 'A' && h[i] <= 'Z') ||
		      (h[i] >= '0' && h[i] <= '9') || strchr("_.-:", h[i])))
			return false;
	return true;
}

/* A new record of a: checked, its buffer made, the step's file written when the step changed. */
static int rec_begin(struct rec *r, struct rec_agent *a, const Toggle__RecordData *m)
{
	if (!rec_hook_ok(m->hook))
		return rec_fail(r, TOGGLE_EPROTO, "toggled sent a record of agent %s with a bad hook name",
				a->name);
	if (m->n_shape > ST_MAX_DIMS)
		return rec_fail(r, TOGGLE_EPROTO, "toggled sent a record of %zu dimensions", m->n_shape);
	struct st_tensor chk = {.dtype = m->dtype, .ndim = m->n_shape, .size = m->size};
	memcpy(chk.shape, m->shape, m->n_shape * sizeof(uint64_t));
	char why[160];
	if (st_tensor_check(&chk, why, sizeof(why)))
		return rec_fail(r, TOGGLE_EPROTO, "toggled sent a bad record of agent %s, %s: %s",
				a->name, m->hook, why);
	if (m->size > REC_MAX_RECORD)
		return rec_fail(r, TOGGLE_ELIMIT, "a record of agent %s (%s) is %llu bytes, over %llu",
				a->name, m->hook, (unsigned long long)m->size,
				(unsigned long long)REC_MAX_RECORD);
	if (a->have_step && m->step != a->step) {
		int rc = rec_flush(r, a);
		if (rc)
			return rc;
		a->steps++;
	}
	if (!a->have_step || m->step != a->step) {
		a->have_step = true;
		a->step = m->step;
	}
	if (a->n >= REC_MAX_TENSORS || a->step_bytes + m->size > REC_MAX_STEP)
		return rec_fail(r, TOGGLE_ELIMIT, "step %lld of agent %s holds more than %d records or "
				"%llu bytes", (long long)m->step, a->name, REC_MAX_TENSORS,
				(unsigned long long)REC_MAX_STEP);
	struct rec_tensor *v = realloc(a->t, (a->n + 1) * sizeof(*v));
	if (!v)
		return rec_fail(r, TOGGLE_ENOMEM, "out of memory");
	a->t = v;
	struct rec_tensor *t = &a->t[a->n];
	memset(t, 0, sizeof(*t));
	t->data = malloc(m->size ? m->size : 1);
	if (!t->data)
		return rec_fail(r, TOGGLE_ENOMEM, "out of memory for a record of %llu bytes",
				(unsigned long long)m->size);
	a->n++;
	snprintf(t->hook, sizeof(t->hook), "%s", m->hook);
	/* The same hook twice in a step (two graphs): the second is HOOK#1, and so on. */
	unsigned dup = 0;
	for (size_t i = 0; i + 1 < a->n; i++)
		dup += strcmp(a->t[i].hook, t->hook) == 0;
	if (dup)
		snprintf(t->name, sizeof(t->name), "%s#%u", t->hook, dup);
	else
		snprintf(t->name, sizeof(t->name), "%s", t->hook);
	snprintf(t->dtype, sizeof(t->dtype), "%s", m->dtype);
	t->ndim = m->n_shape;
	memcpy(t->shape, m->shape, m->n_shape * sizeof(uint64_t));
	t->graph = m->graph;
	t->seq = m->seq;
	t->size = m->size;
	a->step_bytes += m->size;
	return 0;
}

static int rec_data(struct rec *r, const Toggle__RecordData *m)
{
	struct rec_agent *a = rec_agent(r, m->agent_id);
	if (!a || a->ended)
		return rec_fail(r, TOGGLE_EPROTO, "toggled sent a record of agent %llu, not recorded",
				(unsigned long long)m->agent_id);
	struct rec_tensor *cur = a->n ? &a->t[a->n - 1] : NULL;
	bool open = cur && cur->got < cur->size;
	if (m->offset == 0 && !open) {
		int rc = rec_begin(r, a, m);
		if (rc)
			return rc;
		cur = &a->t[a->n - 1];
	} else if (!open || m->offset != cur->got || m->seq != cur->seq || m->size != cur->size) {
		return rec_fail(r, TOGGLE_EPROTO, "toggled sent a chunk of agent %s out of order "
				"(record %llu at offset %llu)", a->name, (unsigned long long)m->seq,
				(unsigned long long)m->offset);
	}
	if (m->data.len > TGP_RECORD_CHUNK || m->data.len > cur->size - cur->got ||
	    (m->data.len == 0 && cur->size != 0))
		return rec_fail(r, TOGGLE_EPROTO, "toggled sent a chunk of %zu bytes for agent %s "
				"where %llu were left", m->data.len, a->name,
				(unsigned long long)(cur->size - cur->got));
	if (m->data.len)
		memcpy(cur->data + cur->got, m->data.data, m->data.len);
	cur->got += m->data.len;
	a->bytes += m->data.len;
	if (cur->got == cur->size)
		a->records++;
	a->dropped = m->dropped;
	return 0;
}

/* A code from the daemon: a known TOGGLE_E*, else EPROTO. */
static int rec_code(int code)
{
	return code < 0 && code >= TOGGLE_ERROR_MIN ? code : TOGGLE_EPROTO;
}

static int rec_end(struct rec *r, const Toggle__RecordEnd *m, bool *done)
{
	if (m->agent_id == 0) {
		*done = true;
		if (m->code && !r->err_code)
			rec_fail(r, rec_code(m->code), "toggled ended the recording: %s", m->message);
		return 0;
	}
	struct rec_agent *a = rec_agent(r, m->agent_id);
	if (!a)
		return rec_fail(r, TOGGLE_EPROTO, "toggled ended agent %llu, not recorded",
				(unsigned long long)m->agent_id);
	int rc = rec_flush(r, a);
	if (a->have_step)
		a->steps++;
	a->have_step = false;
	a->ended = true;
	a->dropped = m->dropped;
	a->code = m->code;
	util_clean(a->msg, sizeof(a->msg), m->message, UTIL_CLEAN_CONTROL);
	if (m->code) {
		struct ctl_error e = {.code = m->code, .stream = true};
		char msg[700];
		snprintf(msg, sizeof(msg), "recording of agent %s (id %llu) ended: %s", a->name,
			 (unsigned long long)a->id, a->msg);
		e.message = msg;
		r->ctx->out->error(&e);
	}
	return rc;
}

/* DIR: made if missing; one that holds an index already is someone's recording. */
static int rec_prepare_dir(struct rec *r)
{
	char at[PATH_MAX];
	if (util_mkdirs(r->dir, 0755, 0755, at, sizeof(at)) != UTIL_MKDIRS_OK)
		return ctl_fail(r->ctx->out, CTL_EXIT_ERROR, TOGGLE_EIO, "cannot make %s: %s", r->dir,
				strerror(errno));
	struct stat sb;
	if (stat(r->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return ctl_fail(r->ctx->out, CTL_EXIT_ERROR, TOGGLE_EIO, "%s is not a directory",
				r->dir);
	char idx[PATH_MAX + 32];
	snprintf(idx, sizeof(idx), "%s/index.json", r->dir);
	if (access(idx, F_OK) == 0)
		return ctl_fail(r->ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"%s already holds a recording (index.json); give another -o DIR", r->dir);
	return 0;
}

static int rec_agents(struct rec *r, const Toggle__RecordReply *rep)
{
	r->a = calloc(rep->n_agents ? rep->n_agents : 1, sizeof(*r->a));
	if (!r->a)
		return ctl_fail(r->ctx->out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
	for (size_t i = 0; i < rep->n_agents; i++) {
		const Toggle__RecordAgent *m = rep->agents[i];
		if (!util_name_ok(m->name, TGP_MAX_NAME) || rec_agent(r, m->agent_id))
			return ctl_fail(r->ctx->out, CTL_EXIT_ERROR, TOGGLE_EPROTO,
					"toggled named a bad or repeated agent in its reply");
		struct rec_agent *a = &r->a[r->n++];
		a->id = m->agent_id;
		snprintf(a->name, sizeof(a->name), "%s", m->name);
		snprintf(a->sub, sizeof(a->sub), "%s-%llu", m->name, (unsigned long long)m->agent_id);
		char path[PATH_MAX + 64];
		snprintf(path, sizeof(path), "%s/%s", r->dir, a->sub);
		if (mkdir(path, 0755) != 0 && errno != EEXIST)
			return ctl_fail(r->ctx->out, CTL_EXIT_ERROR, TOGGLE_EIO, "cannot make %s: %s",
					path, strerror(errno));
	}
	for (size_t i = 0; i < rep->n_skipped; i++) {
		struct ctl_error e = {.code = 0, .stream = true};
		char msg[600];
		snprintf(msg, sizeof(msg), "not recorded: %s", rep->skipped[i]);
		e.message = msg;
		r->ctx->out->error(&e);
	}
	return 0;
}

/* Receive until the daemon's last RecordEnd, an interrupt or an error. */
static void rec_loop(struct rec *r, const char **stopped)
{
	bool done = false;
	while (!done && !r->err_code) {
		if (rec_stop) {
			*stopped = "interrupted";
			return;
		}
		uint64_t now = util_unix_ms();
		if (now - r->last_progress_ms >= REC_PROGRESS_MS) {
			r->last_progress_ms = now;
			rec_report(r, false, false, NULL);
		}
		Toggle__Envelope *env = NULL;
		int rc = tgc_recv(r->ctx->conn, &env, REC_TICK_MS);
		if (rc == 0)
			continue;
		if (rc < 0) {
			rec_fail(r, rc, "lost the connection to toggled at %s (%s)", r->ctx->opt.socket,
				 rc == TOGGLE_EIO ? "it closed the connection" : toggle_strerror(rc));
			return;
		}
		if (env->id == r->request_id || env->id == 0) {
			switch (env->body_case) {
			case TOGGLE__ENVELOPE__BODY_RECORD_DATA:
				rec_data(r, env->record_data);
				break;
			case TOGGLE__ENVELOPE__BODY_RECORD_END:
				rec_end(r, env->record_end, &done);
				break;
			case TOGGLE__ENVELOPE__BODY_ERROR:
				rec_fail(r, rec_code((int)env->error->code), "toggled: %s",
					 env->error->message);
				break;
			default:
				break; /* an event, or a body newer than us */
			}
		}
		toggle__envelope__free_unpacked(env, NULL);
	}
}

int ctl_cmd_record(struct ctl_ctx *ctx, int argc, char **argv)
{
	int rc;
	struct rec r = {.ctx = ctx, .dir = ctx->opt.output_dir};
	r.spec = ctl_join_spec(ctx, argc, argv, &rc);
	if (!r.spec)
		return rc;
	struct sigaction sa = {.sa_handler = rec_on_stop};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* A file size limit is a full disk like another: write() says EFBIG, no signal. */
	signal(SIGXFSZ, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	rc = rec_prepare_dir(&r);
	if (rc) {
		free(r.spec);
		return rc;
	}
	Toggle__RecordRequest m = TOGGLE__RECORD_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	m.spec = r.spec;
	m.steps = ctx->opt.steps;
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_RECORD, &m), *rep = NULL;
	rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_RECORD_REPLY, &rep);
	if (rc) {
		free(r.spec);
		return rc;
	}
	r.request_id = req.id;
	r.start_ms = r.last_progress_ms = util_unix_ms();
	r.files = json_array();
	rc = rec_agents(&r, rep->record_reply);
	toggle__envelope__free_unpacked(rep, NULL);
	const char *stopped = NULL;
	if (!rc && r.files) {
		if (!ctx->opt.json && isatty(STDERR_FILENO))
			fprintf(stderr, "togglectl: recording %s of %zu agents into %s (%s)\n", r.spec,
				r.n, r.dir, ctx->opt.steps ? "until the steps are done"
							   : "interrupt to stop");
		rec_loop(&r, &stopped);
		/* What was gathered is written, whatever ended the recording. */
		for (size_t i = 0; i < r.n; i++)
			if (!r.a[i].ended) {
				if (rec_flush(&r, &r.a[i]) == 0 && r.a[i].have_step)
					r.a[i].steps++;
				r.a[i].have_step = false;
			}
		bool complete = !r.err_code && !stopped;
		for (size_t i = 0; i < r.n; i++)
			complete = complete && r.a[i].ended && r.a[i].code == 0;
		if (r.err_code)
			stopped = r.err;
		rec_write_index(&r, complete, stopped ? stopped : (complete ? NULL : "agents ended early"));
		if (r.err_code && stopped != r.err)
			stopped = r.err;
		rec_report(&r, true, complete, stopped);
		if (r.err_code)
			rc = ctl_fail(ctx->out, CTL_EXIT_ERROR, r.err_code, "%s", r.err);
		else
			rc = CTL_EXIT_OK;
	} else if (!rc) {
		rc = ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
	}
	for (size_t i = 0; r.a && i < r.n; i++)
		rec_step_free(&r.a[i]);
	free(r.a);
	json_decref(r.files);
	free(r.spec);
	return rc;
}
