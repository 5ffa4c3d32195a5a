/*
 * togglectl.c - the graphtoggle control tool: main, the global options, the
 * command table, and parsing argv into an action (command, arguments,
 * target, output mode).  The command runs in ctl_cmds.c and prints through
 * ctl_output.c.  Exit codes: 0 ok, 1 error from the daemon, 2 usage,
 * 3 cannot connect, 4 --wait ran out after the set was accepted (docs/cli.md).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl_output.h"
#include "frame.h"
#include "toggle_error.h"
#include "util.h"

const struct ctl_cmd ctl_commands[] = {
	{"status", NULL, 0, 0, 0, "", "the daemon: version, uptime, counters",
	 ctl_cmd_status},
	{"agents", NULL, 0, 0, CTL_F_TARGET, "", "connected agents", ctl_cmd_agents},
	{"graphs", NULL, 0, 1, CTL_F_TARGET | CTL_F_SELARG, "[SELECTOR]",
	 "graphs of the agents and what their execs hold", ctl_cmd_graphs},
	{"hooks", NULL, 0, 1, CTL_F_TARGET | CTL_F_SELARG, "[SELECTOR]",
	 "the hook catalog and which hooks are on", ctl_cmd_hooks},
	{"enable", NULL, 1, -1, CTL_F_TARGET | CTL_F_WAIT, "SPEC...",
	 "add hooks to the standing set", ctl_cmd_enable},
	{"disable", NULL, 1, -1, CTL_F_TARGET | CTL_F_WAIT, "SPEC...",
	 "remove hooks from the standing set", ctl_cmd_disable},
	{"set", NULL, 1, -1, CTL_F_TARGET | CTL_F_WAIT, "SPEC...",
	 "replace the standing set", ctl_cmd_set},
	{"plan", "submit", 1, 1, CTL_F_TARGET, "FILE|-",
	 "per-step sets from a JSON file", ctl_cmd_plan_submit},
	{"plan", "show", 0, 0, CTL_F_TARGET, "", "plan entries not yet begun",
	 ctl_cmd_plan_show},
	{"plan", "clear", 0, 0, CTL_F_TARGET, "", "drop every pending plan entry",
	 ctl_cmd_plan_clear},
	{"watch", NULL, 0, 0, CTL_F_TARGET, "", "live events, one line each, until interrupted",
	 ctl_cmd_watch},
	{"record", NULL, 1, -1, CTL_F_TARGET | CTL_F_RECORD, "SPEC... -o DIR",
	 "record the hooks' activations into safetensors files", ctl_cmd_record},
};
const size_t ctl_n_commands = sizeof(ctl_commands) / sizeof(ctl_commands[0]);

#define CTL_SELECTOR_FORMS "all, agent:ID, name:NAME, pid:PID, group:NAME, or a bare agent ID"

enum { OPT_WAIT = 256, OPT_TIMEOUT, OPT_ETCD, OPT_CLUSTER, OPT_ETCD_CREDENTIALS, OPT_ALIGNED,
       OPT_PLAN_TTL, OPT_STEPS, OPT_UNTIL_INTERRUPT, OPT_AGENTS };

static const struct option ctl_long_opts[] = {
	{"socket", required_argument, NULL, 's'},
	{"target", required_argument, NULL, 't'},
	{"json", no_argument, NULL, 'j'},
	{"wait", optional_argument, NULL, OPT_WAIT},
	{"aligned", optional_argument, NULL, OPT_ALIGNED},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"etcd", required_argument, NULL, OPT_ETCD},
	{"cluster", required_argument, NULL, OPT_CLUSTER},
	{"etcd-credentials", required_argument, NULL, OPT_ETCD_CREDENTIALS},
	{"plan-ttl", required_argument, NULL, OPT_PLAN_TTL},
	{"output", required_argument, NULL, 'o'},
	{"steps", required_argument, NULL, OPT_STEPS},
	{"until-interrupt", no_argument, NULL, OPT_UNTIL_INTERRUPT},
	{"agents", required_argument, NULL, OPT_AGENTS},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

/* ---- usage -------------------------------------------------------------- */

static void ctl_cmd_synopsis(const struct ctl_cmd *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s%s%s", c->name, c->sub ? " " : "", c->sub ? c->sub : "",
		 c->args[0] ? " " : "", c->args);
}

static void ctl_usage(FILE *f)
{
	char syn[64];
	fprintf(f, "usage: togglectl [options] COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < ctl_n_commands; i++) {
		ctl_cmd_synopsis(&ctl_commands[i], syn, sizeof(syn));
		fprintf(f, "  %-24s %s\n", syn, ctl_commands[i].help);
	}
	fprintf(f,
		"\noptions:\n"
		"  -s, --socket PATH        the daemon's socket (default: $TOGGLE_SOCKET, else\n"
		"                           /run/toggle/toggled.sock as root, else\n"
		"                           $XDG_RUNTIME_DIR/toggle/toggled.sock, else\n"
		"                           /tmp/toggle-EUID/toggled.sock)\n"
		"  -t, --target SELECTOR    which agents: all (the default), agent:ID,\n"
		"                           name:NAME (the one agent of that name), pid:PID,\n"
		"                           group:NAME, or a bare agent ID\n"
		"  -j, --json               JSON output (schema: docs/cli.md)\n"
		"      --wait[=TIMEOUT]     enable/disable/set: wait until every targeted agent\n"
		"                           ran the new set at a replay (default 5s)\n"
		"      --aligned[=+N]       enable/disable/set: every targeted agent switches at\n"
		"                           one step none has begun (the highest step + N; N\n"
		"                           measured by toggled when not given); not with --etcd\n"
		"      --timeout TIMEOUT    connect and request timeout (default 5s)\n"
		"  -o, --output DIR         record: the directory of the files (made if missing;\n"
		"                           one that holds a recording is refused)\n"
		"      --steps N            record: N steps of each agent, then stop\n"
		"      --until-interrupt    record: until interrupted (the default)\n"
		"      --agents SELECTOR    record: which agents (as --target)\n"
		"      --etcd URL[,URL...]  with --cluster NAME: the whole cluster through etcd\n"
		"                           (set, plan submit, agents, graphs, status; targets\n"
		"                           all, host:H, group:G, agent:H/ID, pid:H/PID)\n"
		"      --cluster NAME       the cluster's name (with --etcd)\n"
		"      --etcd-credentials FILE\n"
		"                           with --etcd: etcd's CA, client certificate and key,\n"
		"                           user and password (docs/cluster.md)\n"
		"      --plan-ttl SECONDS   with --etcd, plan submit: etcd deletes the plan's key\n"
		"                           this long after (default 86400: a day)\n"
		"  -h, --help               this text\n"
		"  -V, --version            print the version\n"
		"\n"
		"SPEC:     none | all | TYPE[:LAYERS][,TYPE[:LAYERS]...]\n"
		"          (TYPE: a hook type or *; LAYERS: * | N | N-M);\n"
		"          several SPEC arguments are joined with \",\"\n"
		"TIMEOUT:  500ms, 2s, 1m (a bare number is seconds; at most 10m)\n"
		"exit:     0 ok, 1 error from the daemon, 2 usage, 3 cannot connect,\n"
		"          4 accepted but --wait ran out (applies from the agents' next step)\n");
}

/* A usage error: what was wrong, the right form, exit code 2. */
static int ctl_usage_error(const struct ctl_ctx *ctx, const struct ctl_cmd *c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int ctl_usage_error(const struct ctl_ctx *ctx, const struct ctl_cmd *c, const char *fmt, ...)
{
	char what[1024], syn[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (c) {
		ctl_cmd_synopsis(c, syn, sizeof(syn));
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"%s; usage: togglectl [options] %s", what, syn);
	}
	return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL, "%s; see togglectl --help", what);
}

/* ---- values ------------------------------------------------------------- */

/* Decimal digits only, no sign, no overflow past max. */
static bool ctl_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

/* "500ms", "2s", "1m", a bare number of seconds: 1 ms .. CTL_MAX_DURATION_MS. */
static bool ctl_parse_duration(const char *s, int *ms)
{
	char num[24];
	size_t n = strspn(s, "0123456789");
	const char *unit = s + n;
	uint64_t v, mult;
	if (n == 0 || n >= sizeof(num))
		return false;
	memcpy(num, s, n);
	num[n] = '\0';
	if (!strcmp(unit, "ms"))
		mult = 1;
	else if (!strcmp(unit, "s") || !*unit)
		mult = 1000;
	else if (!strcmp(unit, "m"))
		mult = 60000;
	else
		return false;
	if (!ctl_parse_u64(num, CTL_MAX_DURATION_MS, &v) || v * mult > CTL_MAX_DURATION_MS ||
	    v == 0)
		return false;
	*ms = (int)(v * mult);
	return true;
}

int ctl_selector_parse(const char *text, struct ctl_opts *opt, char *err, size_t errlen)
{
	Toggle__Selector *sel = &opt->target;
	uint64_t v;
	const char *why = NULL;
	toggle__selector__init(sel);
	if (!text[0]) {
		why = "empty";
	} else if (!strcmp(text, "all")) {
		sel->sel_case = TOGGLE__SELECTOR__SEL_ALL;
		sel->all = 1;
	} else if (!strncmp(text, "agent:", 6) || strspn(text, "0123456789") == strlen(text)) {
		const char *id = text[0] == 'a' ? text + 6 : text;
		if (ctl_parse_u64(id, UINT64_MAX, &v) && v > 0) {
			sel->sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
			sel->agent_id = v;
		} else {
			why = "an agent ID is a number from 1 (see togglectl agents)";
		}
	} else if (!strncmp(text, "pid:", 4)) {
		if (ctl_parse_u64(text + 4, UINT32_MAX, &v) && v > 0) {
			sel->sel_case = TOGGLE__SELECTOR__SEL_PID;
			sel->pid = (uint32_t)v;
		} else {
			why = "a PID is a number from 1";
		}
	} else if (!strncmp(text, "name:", 5)) {
		if (util_name_ok(text + 5, TGP_MAX_NAME)) {
			/* resolved to agent:ID once connected (ctl_resolve_name) */
			snprintf(opt->target_name, sizeof(opt->target_name), "%s", text + 5);
			sel->sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
		} else {
			why = "an agent name is 1 to 63 of [A-Za-z0-9_.-], not . or ..";
		}
	} else if (!strncmp(text, "group:", 6)) {
		if (util_name_ok(text + 6, TGP_MAX_NAME)) { /* the rule toggled applies */
			snprintf(opt->target_group, sizeof(opt->target_group), "%s", text + 6);
			sel->sel_case = TOGGLE__SELECTOR__SEL_GROUP;
			sel->group = opt->target_group;
		} else {
			why = "a group name is 1 to 63 of [A-Za-z0-9_.-], not . or ..";
		}
	} else {
		why = "unknown form";
	}
	if (why) {
		snprintf(err, errlen, "bad selector '%s' (%s); accepted: " CTL_SELECTOR_FORMS, text, why);
		return -1;
	}
	opt->have_target = true;
	opt->target_text = text;
	return 0;
}

/* ---- parsing argv into an action ---------------------------------------- */

/* --json must shape even the errors found while parsing: look for it first. */
static bool ctl_wants_json(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "-j"))
			return true;
	return false;
}

/*
 * --wait given without "=TIMEOUT": getopt leaves "--wait 2s"'s "2s" among
 * the arguments, where it would be read as a hook spec (ctl_check_args).
 */
static bool ctl_wait_bare;

/* Options: 0 to go on, -1 done (help, version), or an exit code > 0. */
static int ctl_parse_options(struct ctl_ctx *ctx, int argc, char **argv)
{
	struct ctl_opts *o = &ctx->opt;
	char err[512];
	const char *target = NULL;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:t:o:jhV", ctl_long_opts, NULL)) != -1) {
		switch (c) {
		case 's': o->socket = optarg; break;
		case 't': target = optarg; break;
		case OPT_AGENTS:
			if (target)
				return ctl_usage_error(ctx, NULL, "give the agents once: --agents or --target");
			target = optarg;
			break;
		case 'o': o->output_dir = optarg; break;
		case OPT_STEPS:
			if (!ctl_parse_u64(optarg, CTL_MAX_RECORD_STEPS, &o->steps) || o->steps == 0)
				return ctl_usage_error(ctx, NULL, "bad --steps value '%s': expected 1 to %llu",
						       optarg, (unsigned long long)CTL_MAX_RECORD_STEPS);
			break;
		case OPT_UNTIL_INTERRUPT: o->until_interrupt = true; break;
		case 'j': o->json = true; break;
		case OPT_WAIT:
			o->wait = true;
			ctl_wait_bare = !optarg;
			if (optarg && !ctl_parse_duration(optarg, &o->wait_ms))
				return ctl_usage_error(ctx, NULL, "bad --wait value '%s': expected a "
						       "duration such as 500ms, 2s or 1m (at most 10m)", optarg);
			break;
		case OPT_TIMEOUT:
			if (!ctl_parse_duration(optarg, &o->timeout_ms))
				return ctl_usage_error(ctx, NULL, "bad --timeout value '%s': expected a "
						       "duration such as 500ms, 2s or 1m (at most 10m)", optarg);
			break;
		case OPT_ALIGNED: {
			o->aligned = true;
			if (!optarg)
				break;
			char *end = NULL;
			errno = 0;
			unsigned long long n = strtoull(optarg + (optarg[0] == '+'), &end, 10);
			if (optarg[0] != '+' || !optarg[1] || *end || errno || n < 1 ||
			    n > TGP_MAX_ALIGN_MARGIN)
				return ctl_usage_error(ctx, NULL, "bad --aligned value '%s': expected +N, "
						       "a margin of 1 to %u steps", optarg,
						       TGP_MAX_ALIGN_MARGIN);
			o->aligned_margin = (uint32_t)n;
			break;
		}
		case OPT_ETCD: o->etcd = optarg; break;
		case OPT_CLUSTER: o->cluster = optarg; break;
		case OPT_ETCD_CREDENTIALS: o->etcd_credentials = optarg; break;
		case OPT_PLAN_TTL: {
			char *end;
			errno = 0;
			long long n = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || n < CTL_PLAN_TTL_MIN || n > CTL_PLAN_TTL_MAX)
				return ctl_usage_error(ctx, NULL, "bad --plan-ttl value '%s': expected "
						       "seconds, %d to %d", optarg, CTL_PLAN_TTL_MIN,
						       CTL_PLAN_TTL_MAX);
			o->plan_ttl_s = n;
			break;
		}
		case 'h': ctl_usage(stdout); return -1;
		case 'V': printf("togglectl %s (protocol %d)\n", CTL_VERSION, TGP_PROTOCOL_VERSION); return -1;
		case ':':
			if (strncmp(argv[optind - 1], "--", 2) && optopt > 0 && optopt < 256)
				return ctl_usage_error(ctx, NULL, "option -%c needs a value", optopt);
			return ctl_usage_error(ctx, NULL, "option %s needs a value", argv[optind - 1]);
		default:
			if (strncmp(argv[optind - 1], "--", 2) && optopt > 0 && optopt < 256)
				return ctl_usage_error(ctx, NULL, "unknown option '-%c'", optopt);
			return ctl_usage_error(ctx, NULL, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (!o->etcd != !o->cluster)
		return ctl_usage_error(ctx, NULL, "--etcd and --cluster go together");
	if (o->aligned && o->etcd)
		return ctl_usage_error(ctx, NULL, "--aligned is not supported with --etcd: align the "
				       "agents of one host through its toggled (--socket) instead");
	if (target && (o->etcd ? ctl_cluster_target(target, o, err, sizeof(err))
			       : ctl_selector_parse(target, o, err, sizeof(err))))
		return ctl_usage_error(ctx, NULL, "%s", err);
	if (!o->socket) {
		if (!tgp_default_socket_path(o->socket_buf, sizeof(o->socket_buf)))
			return ctl_fail(ctx->out, CTL_EXIT_CONNECT, TOGGLE_ECONNECT,
					"the default socket path is too long; give one with --socket PATH");
		o->socket = o->socket_buf;
	}
	return 0;
}

static const struct ctl_cmd *ctl_find(const struct ctl_ctx *ctx, int argc, char **argv, int *used,
				      int *rc)
{
	bool known = false;
	for (size_t i = 0; i < ctl_n_commands; i++) {
		const struct ctl_cmd *c = &ctl_commands[i];
		if (strcmp(c->name, argv[0]))
			continue;
		known = true;
		if (!c->sub) {
			*used = 1;
			return c;
		}
		if (argc > 1 && !strcmp(c->sub, argv[1])) {
			*used = 2;
			return c;
		}
	}
	if (known)
		*rc = ctl_usage_error(ctx, NULL, "%s needs a subcommand: submit FILE|-, show or clear%s%s%s",
				      argv[0], argc > 1 ? " (not '" : "", argc > 1 ? argv[1] : "",
				      argc > 1 ? "')" : "");
	else
		*rc = ctl_usage_error(ctx, NULL, "unknown command '%s' (commands: status, agents, graphs, "
				      "hooks, enable, disable, set, plan, watch, record, help)", argv[0]);
	return NULL;
}

/* Check the arguments against the command; 0 or the exit code. */
static int ctl_check_args(struct ctl_ctx *ctx, const struct ctl_cmd *c, int *argc, char ***argv)
{
	char err[512];
	if (*argc < c->min_args)
		return ctl_usage_error(ctx, c, "%s%s%s needs an argument", c->name, c->sub ? " " : "",
				       c->sub ? c->sub : "");
	if (c->max_args >= 0 && *argc > c->max_args)
		return ctl_usage_error(ctx, c, "too many arguments (from '%s' on)", (*argv)[c->max_args]);
	if ((c->flags & CTL_F_SELARG) && *argc == 1) {
		if (ctx->opt.have_target)
			return ctl_usage_error(ctx, c, "give the target once: --target %s or the SELECTOR "
					       "argument '%s'", ctx->opt.target_text, (*argv)[0]);
		if (ctx->opt.etcd ? ctl_cluster_target((*argv)[0], &ctx->opt, err, sizeof(err))
				  : ctl_selector_parse((*argv)[0], &ctx->opt, err, sizeof(err)))
			return ctl_usage_error(ctx, c, "%s", err);
		(*argc)--;
		(*argv)++;
	}
	if (ctx->opt.have_target && !(c->flags & CTL_F_TARGET))
		return ctl_usage_error(ctx, c, "%s takes no --target (it is about the daemon itself)",
				       c->name);
	if (ctx->opt.wait && !(c->flags & CTL_F_WAIT))
		return ctl_usage_error(ctx, c, "--wait applies to enable, disable and set only");
	if ((ctx->opt.output_dir || ctx->opt.steps || ctx->opt.until_interrupt) &&
	    !(c->flags & CTL_F_RECORD))
		return ctl_usage_error(ctx, c, "-o, --steps and --until-interrupt apply to record only");
	if ((c->flags & CTL_F_RECORD) && !ctx->opt.output_dir)
		return ctl_usage_error(ctx, c, "record needs -o DIR, the directory of the files");
	if (ctx->opt.steps && ctx->opt.until_interrupt)
		return ctl_usage_error(ctx, c, "--steps N and --until-interrupt exclude each other");
	if ((c->flags & CTL_F_RECORD) && ctx->opt.etcd)
		return ctl_usage_error(ctx, c, "record talks to one host's toggled (--socket), not --etcd");
	if (ctx->opt.aligned && !(c->flags & CTL_F_WAIT))
		return ctl_usage_error(ctx, c, "--aligned applies to enable, disable and set only");
	for (int i = 0; ctl_wait_bare && i < *argc; i++) {
		int ms;
		if (ctl_parse_duration((*argv)[i], &ms))
			return ctl_usage_error(ctx, c, "'%s' is a duration, not a hook spec: --wait takes "
					       "its timeout after '=' (--wait=%s)", (*argv)[i], (*argv)[i]);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ctl_ctx ctx;
	memset(&ctx, 0, sizeof(ctx));
	toggle__selector__init(&ctx.opt.target);
	ctx.opt.timeout_ms = CTL_DEFAULT_TIMEOUT_MS;
	ctx.opt.wait_ms = CTL_DEFAULT_WAIT_MS;
	ctx.out = ctl_wants_json(argc, argv) ? &ctl_output_json : &ctl_output_human;
	int rc = ctl_parse_options(&ctx, argc, argv);
	if (rc)
		return rc < 0 ? CTL_EXIT_OK : rc;
	ctx.out = ctx.opt.json ? &ctl_output_json : &ctl_output_human;
	int cargc = argc - optind, used = 0;
	char **cargv = argv + optind;
	if (cargc == 0)
		return ctl_usage_error(&ctx, NULL, "no command given");
	if (!strcmp(cargv[0], "help")) { /* as --help: the command people type first */
		ctl_usage(stdout);
		return CTL_EXIT_OK;
	}
	ctx.cmd = ctl_find(&ctx, cargc, cargv, &used, &rc);
	if (!ctx.cmd)
		return rc;
	cargc -= used;
	cargv += used;
	rc = ctl_check_args(&ctx, ctx.cmd, &cargc, &cargv);
	if (!rc && ctx.opt.target_name[0] && !ctx.opt.etcd)
		rc = ctl_resolve_name(&ctx);
	if (rc) {
		tgc_close(ctx.conn);
		return rc;
	}
	rc = ctx.opt.etcd ? ctl_cluster_run(&ctx, cargc, cargv) : ctx.cmd->handler(&ctx, cargc, cargv);
	tgc_close(ctx.conn);
	return rc;
}
