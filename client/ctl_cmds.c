/*
 * ctl_cmds.c - togglectl's command handlers: each builds one request
 * (proto/graphtoggle/v1/toggle.proto), calls toggled through tgclient, checks the reply's
 * type and hands it to the output table.  The plan file is read and
 * validated here, before anything is sent.  Handlers return the exit code.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl.h"
#include "ctl_output.h"
#include "toggle_error.h"

#define CTL_ERRLEN        2048
#define CTL_WATCH_TICK_MS 200   /* how often watch looks at its stop flag */

/* ---- talking to toggled ------------------------------------------------- */

static int ctl_connect(struct ctl_ctx *ctx)
{
	char err[CTL_ERRLEN];
	int rc = tgc_connect(ctx->opt.socket, ctx->opt.timeout_ms, &ctx->conn, err, sizeof(err));
	if (rc == 0)
		return 0;
	if (rc == TOGGLE_ECONNECT)
		return ctl_fail(ctx->out, CTL_EXIT_CONNECT, rc, "%s", err);
	/* Connected but no usable hello (hung or closing daemon): still "cannot connect". */
	bool reached = rc != TOGGLE_ETIMEDOUT && rc != TOGGLE_EIO;
	return ctl_fail(ctx->out, reached ? CTL_EXIT_ERROR : CTL_EXIT_CONNECT, rc,
			"toggled at %s: %s", ctx->opt.socket, err);
}

const Toggle__Selector *ctl_target(const struct ctl_ctx *ctx)
{
	return ctx->opt.have_target ? &ctx->opt.target : NULL;
}

/* Report what an Error reply says: the daemon's message and the agents it names. */
static void ctl_daemon_error(struct ctl_ctx *ctx, int code, const Toggle__Error *e)
{
	struct ctl_error ce = {
		.code = code,
		.message = e->message && e->message[0] ? e->message : toggle_strerror(code),
		.agents = (const char *const *)e->agents,
		.n_agents = e->n_agents,
	};
	ctx->out->error(&ce);
}

/*
 * Send req and wait for a reply of type want.  0 with *rep (free it with
 * toggle__envelope__free_unpacked), or the exit code after reporting.
 */
static int ctl_call(struct ctl_ctx *ctx, Toggle__Envelope *req, Toggle__Envelope__BodyCase want,
		    int timeout_ms, Toggle__Envelope **rep)
{
	char err[CTL_ERRLEN];
	int rc = tgc_call(ctx->conn, req, rep, timeout_ms, err, sizeof(err));
	if (rc == 0 && (*rep)->body_case == want)
		return 0;
	int exitcode = CTL_EXIT_ERROR;
	if (rc == 0)
		ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_EPROTO,
			 "toggled answered with message type %d where %d was expected",
			 (int)(*rep)->body_case, (int)want);
	else if (*rep && (*rep)->body_case == TOGGLE__ENVELOPE__BODY_ERROR &&
		 rc == TOGGLE_ETIMEDOUT && req->body_case == TOGGLE__ENVELOPE__BODY_SET_ENABLED &&
		 (req->set_enabled->wait_ms != 0 || req->set_enabled->aligned)) {
		/*
		 * The daemon answers a wait with ETIMEDOUT only after it changed,
		 * saved and wrote the set: accepted, not a failure; the agents
		 * named run it from their next step.
		 */
		char msg[CTL_ERRLEN];
		const char *why = (*rep)->error->message && (*rep)->error->message[0]
					  ? (*rep)->error->message : toggle_strerror(rc);
		snprintf(msg, sizeof(msg),
			 "set accepted and saved, but not yet applied everywhere: %s; "
			 "it takes effect at their next step", why);
		Toggle__Error e = *(*rep)->error;
		e.message = msg;
		ctl_daemon_error(ctx, rc, &e);
		exitcode = CTL_EXIT_PENDING;
	} else if (*rep && (*rep)->body_case == TOGGLE__ENVELOPE__BODY_ERROR)
		ctl_daemon_error(ctx, rc, (*rep)->error);
	else
		ctl_fail(ctx->out, CTL_EXIT_ERROR, rc, "%s", err[0] ? err : toggle_strerror(rc));
	if (*rep)
		toggle__envelope__free_unpacked(*rep, NULL);
	*rep = NULL;
	return exitcode;
}

/* Connect, then call: the common case of every command. */
int ctl_request(struct ctl_ctx *ctx, Toggle__Envelope *req, Toggle__Envelope__BodyCase want,
		       Toggle__Envelope **rep)
{
	int rc = ctx->conn ? 0 : ctl_connect(ctx);
	return rc ? rc : ctl_call(ctx, req, want, ctx->opt.timeout_ms, rep);
}

Toggle__Envelope ctl_envelope(Toggle__Envelope__BodyCase body, void *msg)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = body;
	env.hello = msg; /* every body is a pointer member of one union */
	return env;
}

/* ---- queries ------------------------------------------------------------ */

int ctl_cmd_status(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc, (void)argv;
	Toggle__StatusRequest m = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_STATUS, &m), *rep;
	int rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_STATUS_REPLY, &rep);
	if (rc)
		return rc;
	ctx->out->status(rep->status_reply, tgc_may_write(ctx->conn));
	toggle__envelope__free_unpacked(rep, NULL);
	return CTL_EXIT_OK;
}

int ctl_resolve_name(struct ctl_ctx *ctx)
{
	const char *name = ctx->opt.target_name;
	Toggle__ListAgentsRequest m = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_LIST_AGENTS, &m), *rep;
	int rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_AGENTS, &rep);
	if (rc)
		return rc;
	uint64_t id = 0;
	size_t n = 0;
	char ids[256] = "";
	for (size_t i = 0; i < rep->agents->n_agents; i++) {
		const Toggle__AgentInfo *a = rep->agents->agents[i];
		if (!a->name || strcmp(a->name, name))
			continue;
		id = a->agent_id;
		size_t l = strlen(ids);
		if (l + 24 < sizeof(ids))
			snprintf(ids + l, sizeof(ids) - l, "%s%llu", n ? ", " : "", (unsigned long long)id);
		n++;
	}
	toggle__envelope__free_unpacked(rep, NULL);
	if (n == 0)
		return ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_ENOAGENT,
				"no agent called '%s' (togglectl agents lists them)", name);
	if (n > 1)
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"%zu agents are called '%s' (ids %s): choose one with agent:ID", n, name,
				ids);
	ctx->opt.target.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	ctx->opt.target.agent_id = id;
	return 0;
}

int ctl_cmd_agents(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc, (void)argv;
	Toggle__ListAgentsRequest m = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_LIST_AGENTS, &m), *rep;
	int rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_AGENTS, &rep);
	if (rc)
		return rc;
	ctx->out->agents(rep->agents);
	toggle__envelope__free_unpacked(rep, NULL);
	return CTL_EXIT_OK;
}

int ctl_cmd_graphs(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc, (void)argv;
	Toggle__ListGraphsRequest gm = TOGGLE__LIST_GRAPHS_REQUEST__INIT;
	gm.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	Toggle__Envelope greq = ctl_envelope(TOGGLE__ENVELOPE__BODY_LIST_GRAPHS, &gm), *grep;
	int rc = ctl_request(ctx, &greq, TOGGLE__ENVELOPE__BODY_GRAPHS, &grep);
	if (rc)
		return rc;
	/* Names and modes come from the agents; one that left since has none. */
	Toggle__ListAgentsRequest am = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	am.target = gm.target;
	Toggle__Envelope areq = ctl_envelope(TOGGLE__ENVELOPE__BODY_LIST_AGENTS, &am), *arep = NULL;
	char err[CTL_ERRLEN];
	rc = tgc_call(ctx->conn, &areq, &arep, ctx->opt.timeout_ms, err, sizeof(err));
	bool have = rc == 0 && arep->body_case == TOGGLE__ENVELOPE__BODY_AGENTS;
	if (rc && rc != TOGGLE_ENOAGENT) {
		if (arep)
			toggle__envelope__free_unpacked(arep, NULL);
		toggle__envelope__free_unpacked(grep, NULL);
		return ctl_fail(ctx->out, CTL_EXIT_ERROR, rc, "%s", err);
	}
	ctx->out->graphs(grep->graphs, have ? arep->agents : NULL);
	if (arep)
		toggle__envelope__free_unpacked(arep, NULL);
	toggle__envelope__free_unpacked(grep, NULL);
	return CTL_EXIT_OK;
}

int ctl_cmd_hooks(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc, (void)argv;
	Toggle__HooksRequest m = TOGGLE__HOOKS_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_HOOKS, &m), *rep;
	int rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_HOOKS_REPLY, &rep);
	if (rc)
		return rc;
	ctx->out->hooks(rep->hooks_reply);
	toggle__envelope__free_unpacked(rep, NULL);
	return CTL_EXIT_OK;
}

/* ---- enable, disable, set ---------------------------------------------- */

/* Join the SPEC arguments with ","; NULL (after reporting) when unusable. */
char *ctl_join_spec(struct ctl_ctx *ctx, int argc, char **argv, int *exitcode)
{
	size_t len = 0;
	for (int i = 0; i < argc; i++) {
		if (!argv[i][0]) {
			*exitcode = ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_ESPEC,
					     "hook spec argument %d is empty (expected none, all or "
					     "TYPE[:LAYERS],...)", i + 1);
			return NULL;
		}
		len += strlen(argv[i]) + 1;
	}
	if (len - 1 > TGP_MAX_SPEC) {
		*exitcode = ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_ELIMIT,
				     "hook spec of %zu bytes is over the limit of %d bytes", len - 1,
				     TGP_MAX_SPEC);
		return NULL;
	}
	char *spec = malloc(len);
	if (!spec) {
		*exitcode = ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
		return NULL;
	}
	spec[0] = '\0';
	for (int i = 0; i < argc; i++) {
		if (i)
			strcat(spec, ",");
		strcat(spec, argv[i]);
	}
	return spec;
}

/* Agents a default-target command left out: said on stderr, also with --json. */
static void ctl_note_skipped(char **skipped, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "togglectl: left out agent %s\n", skipped[i]);
}

static int ctl_set_op(struct ctl_ctx *ctx, int argc, char **argv, Toggle__SetOp op,
		      const char *name)
{
	int rc = CTL_EXIT_ERROR;
	char *spec = ctl_join_spec(ctx, argc, argv, &rc);
	if (!spec)
		return rc;
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	m.op = op;
	m.spec = spec;
	if (ctx->opt.wait)
		m.wait_ms = (uint32_t)ctx->opt.wait_ms;
	m.aligned = ctx->opt.aligned;
	m.aligned_margin = ctx->opt.aligned_margin;
	/* An aligned set's reply waits for the agents (TD_ALIGN_ACK_MS without --wait). */
	int wait_ms = ctx->opt.wait ? ctx->opt.wait_ms : ctx->opt.aligned ? 5000 : 0;
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_SET_ENABLED, &m), *rep = NULL;
	rc = ctl_connect(ctx);
	if (!rc)
		rc = ctl_call(ctx, &req, TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY,
			      ctx->opt.timeout_ms + wait_ms, &rep);
	if (!rc) {
		struct ctl_set_result r = {.op = name, .spec = spec, .waited = ctx->opt.wait,
					   .aligned = ctx->opt.aligned,
					   .reply = rep->set_enabled_reply};
		ctx->out->set(&r);
		ctl_note_skipped(rep->set_enabled_reply->skipped, rep->set_enabled_reply->n_skipped);
		toggle__envelope__free_unpacked(rep, NULL);
	}
	free(spec);
	return rc;
}

int ctl_cmd_enable(struct ctl_ctx *ctx, int argc, char **argv)
{
	return ctl_set_op(ctx, argc, argv, TOGGLE__SET_OP__SET_OP_ADD, "enable");
}

int ctl_cmd_disable(struct ctl_ctx *ctx, int argc, char **argv)
{
	return ctl_set_op(ctx, argc, argv, TOGGLE__SET_OP__SET_OP_REMOVE, "disable");
}

int ctl_cmd_set(struct ctl_ctx *ctx, int argc, char **argv)
{
	return ctl_set_op(ctx, argc, argv, TOGGLE__SET_OP__SET_OP_REPLACE, "set");
}

/* ---- plans -------------------------------------------------------------- */

void ctl_plan_free(struct ctl_plan *pl)
{
	json_decref(pl->root);
	free(pl->e);
	free(pl->p);
}

static const char *ctl_json_kind(const json_t *j)
{
	switch (json_typeof(j)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a real number";
	case JSON_TRUE: return "true";
	case JSON_FALSE: return "false";
	default: return "null";
	}
}

/* The whole file (or stdin for "-"), at most CTL_MAX_PLAN_FILE bytes. */
static int ctl_read_file(const struct ctl_output *out, const char *path, const char *shown,
			 char **buf, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
	if (!f)
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL, "cannot open plan %s: %s", shown,
				strerror(errno));
	*buf = malloc(CTL_MAX_PLAN_FILE + 1);
	if (!*buf) {
		if (f != stdin)
			fclose(f);
		return ctl_fail(out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
	}
	*len = fread(*buf, 1, CTL_MAX_PLAN_FILE + 1, f);
	int rerr = ferror(f);
	if (f != stdin)
		fclose(f);
	int rc = 0;
	if (rerr)
		rc = ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EIO, "cannot read plan %s", shown);
	else if (*len > CTL_MAX_PLAN_FILE)
		rc = ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_ELIMIT,
			      "plan %s is larger than %u bytes (1 MiB)", shown, CTL_MAX_PLAN_FILE);
	if (rc) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

/* Check one entry and fill e; 0 or the exit code after reporting. */
static int ctl_plan_entry(const struct ctl_output *out, const char *shown, size_t i, json_t *j,
			  Toggle__PlanEntry *e)
{
	if (!json_is_object(j))
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"plan %s: entry %zu: must be an object {\"step\": N, \"hooks\": \"SPEC\"}, "
				"not %s", shown, i, ctl_json_kind(j));
	const char *key;
	json_t *val;
	json_object_foreach(j, key, val) {
		if (strcmp(key, "step") && strcmp(key, "hooks"))
			return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
					"plan %s: entry %zu: unknown field \"%s\" (fields: step, hooks)",
					shown, i, key);
	}
	json_t *step = json_object_get(j, "step"), *hooks = json_object_get(j, "hooks");
	if (!step)
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"plan %s: entry %zu: field \"step\" is missing (an integer >= 0, or \"+N\")",
				shown, i);
	long long after = 0;
	if (json_is_string(step)) {
		/* "+N": N steps after each agent's current step, resolved by the daemon. */
		const char *t = json_string_value(step);
		char *end = NULL;
		errno = 0;
		if (t[0] != '+')
			return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
					"plan %s: entry %zu: field \"step\" must be an integer >= 0, not a "
					"string (a relative step is \"+N\")", shown, i);
		if (t[1] >= '0' && t[1] <= '9')
			after = strtoll(t + 1, &end, 10);
		if (!end || *end || errno || after < 1 || after > TGP_MAX_PLAN_AFTER ||
		    strlen(t) != json_string_length(step))
			return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
					"plan %s: entry %zu: relative step \"%.32s\" must be \"+N\" with N "
					"from 1 to %lld", shown, i, t, (long long)TGP_MAX_PLAN_AFTER);
	} else if (!json_is_integer(step))
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"plan %s: entry %zu: field \"step\" must be an integer >= 0, not %s",
				shown, i, ctl_json_kind(step));
	if (!after && json_integer_value(step) < 0)
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"plan %s: entry %zu: field \"step\" must be an integer >= 0, not %lld",
				shown, i, (long long)json_integer_value(step));
	if (!hooks)
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"plan %s: entry %zu: field \"hooks\" is missing (a hook spec such as "
				"\"resid_post:0-7\" or \"none\")", shown, i);
	if (!json_is_string(hooks))
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"plan %s: entry %zu: field \"hooks\" must be a hook spec string such as "
				"\"resid_post:0-7\", not %s", shown, i, ctl_json_kind(hooks));
	size_t len = json_string_length(hooks);
	if (len == 0 || strlen(json_string_value(hooks)) != len)
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_ESPEC,
				"plan %s: entry %zu: field \"hooks\" is empty or holds a NUL byte "
				"(use \"none\" for no hooks)", shown, i);
	if (len > TGP_MAX_SPEC)
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_ELIMIT,
				"plan %s: entry %zu: field \"hooks\" has %zu bytes; at most %d", shown, i,
				len, TGP_MAX_SPEC);
	toggle__plan_entry__init(e);
	/* Relative: step -1, so a daemon without PlanEntry.after refuses it. */
	e->step = after ? -1 : (int64_t)json_integer_value(step);
	e->after = after;
	e->spec = (char *)(uintptr_t)json_string_value(hooks);
	return 0;
}

/* Validate a plan file's bytes: a JSON array of {"step": N, "hooks": "SPEC"}. */
int ctl_plan_parse(const struct ctl_output *out, const char *shown, const char *buf, size_t len,
		   struct ctl_plan *pl)
{
	int rc = 0;
	json_error_t jerr;
	memset(pl, 0, sizeof(*pl));
	pl->root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!pl->root)
		return ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL, "plan %s: line %d, column %d: %s",
				shown, jerr.line, jerr.column, jerr.text);
	if (!json_is_array(pl->root))
		rc = ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
			      "plan %s: must be an array of {\"step\": N, \"hooks\": \"SPEC\"} objects, "
			      "not %s", shown, ctl_json_kind(pl->root));
	else if ((pl->n = json_array_size(pl->root)) == 0 || pl->n > TGP_MAX_PLAN_ENTRIES)
		rc = ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_ELIMIT,
			      "plan %s: has %zu entries; a plan has 1 to %d", shown, pl->n,
			      TGP_MAX_PLAN_ENTRIES);
	else if (!(pl->e = calloc(pl->n, sizeof(*pl->e))) || !(pl->p = calloc(pl->n, sizeof(*pl->p))))
		rc = ctl_fail(out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < pl->n; i++) {
		rc = ctl_plan_entry(out, shown, i, json_array_get(pl->root, i), &pl->e[i]);
		if (!rc && i > 0 && (pl->e[i].after != 0) != (pl->e[0].after != 0))
			rc = ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				      "plan %s: entry %zu: a plan has absolute steps (N) or relative "
				      "ones (\"+N\"), not both", shown, i);
		for (size_t k = 0; !rc && k < i; k++)
			if (pl->e[k].step == pl->e[i].step && pl->e[k].after == pl->e[i].after)
				rc = ctl_fail(out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
					      "plan %s: entry %zu: step %s%lld is already planned by entry %zu",
					      shown, i, (pl->e[i].after != 0) ? "+" : "",
					      (long long)((pl->e[i].after != 0) ? pl->e[i].after : pl->e[i].step), k);
		pl->p[i] = &pl->e[i];
	}
	if (rc)
		ctl_plan_free(pl);
	return rc;
}

/* Read and validate a plan file (path, or "-" for standard input). */
int ctl_plan_load(const struct ctl_output *out, const char *path, struct ctl_plan *pl)
{
	const char *shown = strcmp(path, "-") ? path : "(standard input)";
	char *buf = NULL;
	size_t len = 0;
	memset(pl, 0, sizeof(*pl));
	int rc = ctl_read_file(out, path, shown, &buf, &len);
	if (rc)
		return rc;
	rc = ctl_plan_parse(out, shown, buf, len, pl);
	free(buf);
	return rc;
}

int ctl_cmd_plan_submit(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc;
	struct ctl_plan pl;
	int rc = ctl_plan_load(ctx->out, argv[0], &pl);
	if (rc)
		return rc;
	Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	m.n_entries = pl.n;
	m.entries = pl.p;
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, &m), *rep;
	rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_ACK, &rep);
	if (!rc) {
		ctx->out->plan_submitted(&m);
		ctl_note_skipped(rep->ack->skipped, rep->ack->n_skipped);
		toggle__envelope__free_unpacked(rep, NULL);
	}
	ctl_plan_free(&pl);
	return rc;
}

int ctl_cmd_plan_show(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc, (void)argv;
	Toggle__ShowPlanRequest m = TOGGLE__SHOW_PLAN_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_SHOW_PLAN, &m), *rep;
	int rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_PLAN, &rep);
	if (rc)
		return rc;
	ctx->out->plan(rep->plan);
	toggle__envelope__free_unpacked(rep, NULL);
	return CTL_EXIT_OK;
}

int ctl_cmd_plan_clear(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc, (void)argv;
	Toggle__ClearPlanRequest m = TOGGLE__CLEAR_PLAN_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_CLEAR_PLAN, &m), *rep;
	int rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_ACK, &rep);
	if (rc)
		return rc;
	ctx->out->plan_cleared();
	toggle__envelope__free_unpacked(rep, NULL);
	return CTL_EXIT_OK;
}

/* ---- watch -------------------------------------------------------------- */

static volatile sig_atomic_t ctl_stop;

static void ctl_on_stop(int sig)
{
	(void)sig;
	ctl_stop = 1;
}

int ctl_cmd_watch(struct ctl_ctx *ctx, int argc, char **argv)
{
	(void)argc, (void)argv;
	struct sigaction sa = {.sa_handler = ctl_on_stop};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	Toggle__WatchRequest m = TOGGLE__WATCH_REQUEST__INIT;
	m.target = (Toggle__Selector *)(uintptr_t)ctl_target(ctx);
	Toggle__Envelope req = ctl_envelope(TOGGLE__ENVELOPE__BODY_WATCH, &m), *rep;
	int rc = ctl_request(ctx, &req, TOGGLE__ENVELOPE__BODY_ACK, &rep);
	if (rc)
		return rc;
	toggle__envelope__free_unpacked(rep, NULL);
	if (!ctx->opt.json && isatty(STDERR_FILENO))
		fprintf(stderr, "togglectl: watching events from %s (interrupt to stop)\n",
			ctx->opt.socket);
	while (!ctl_stop) {
		Toggle__Envelope *ev = NULL;
		rc = tgc_next_event(ctx->conn, &ev, CTL_WATCH_TICK_MS);
		if (rc == 0)
			continue;
		if (rc < 0) {
			struct ctl_error e = {.code = rc, .stream = true};
			char msg[CTL_ERRLEN];
			snprintf(msg, sizeof(msg), "lost the connection to toggled at %s (%s)",
				 ctx->opt.socket, rc == TOGGLE_EIO ? "it closed the connection"
								   : toggle_strerror(rc));
			e.message = msg;
			ctx->out->error(&e);
			return CTL_EXIT_ERROR;
		}
		ctx->out->event(ev->event);
		toggle__envelope__free_unpacked(ev, NULL);
	}
	return CTL_EXIT_OK;
}
