/*
 * ctl.h - togglectl's shared types: the global options, the parsed action
 * (which command, its arguments, its target) and the command table entry.
 * togglectl.c parses argv into a struct ctl_ctx; ctl_cmds.c runs the
 * command; ctl_output.c prints through a table of function pointers.
 */
#ifndef CTL_H
#define CTL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/toggle.pb-c.h"
#include "tgclient.h"
#include "toggle_proto.h"

#include "toggle_version.h"
#define CTL_VERSION            TOGGLE_VERSION_STRING
#define CTL_DEFAULT_TIMEOUT_MS 5000        /* --timeout: every RPC and the connect */
#define CTL_DEFAULT_WAIT_MS    5000        /* --wait without a value */
#define CTL_MAX_DURATION_MS    600000      /* longest --timeout or --wait (TGP_MAX_WAIT_MS) */
#define CTL_MAX_PLAN_FILE      (1u << 20)  /* bytes of a plan file */
#define CTL_MAX_RECORD_STEPS   TGP_MAX_RECORD_STEPS /* --steps */

/* Exit codes (docs/cli.md, togglectl(1)). */
enum ctl_exit {
	CTL_EXIT_OK = 0,
	CTL_EXIT_ERROR = 1,   /* the daemon answered an error, or the exchange failed */
	CTL_EXIT_USAGE = 2,   /* bad command line or bad input file: nothing was sent */
	CTL_EXIT_CONNECT = 3, /* cannot connect to toggled */
	CTL_EXIT_PENDING = 4, /* --wait ran out: the set was accepted, not yet applied everywhere */
};

/* Command flags: what a command accepts besides its arguments. */
#define CTL_F_TARGET 0x1u /* --target */
#define CTL_F_SELARG 0x2u /* an optional SELECTOR argument (same as --target) */
#define CTL_F_WAIT   0x4u /* --wait */
#define CTL_F_RECORD 0x8u /* -o, --steps, --until-interrupt, --agents */

struct ctl_ctx;
typedef int ctl_handler_fn(struct ctl_ctx *ctx, int argc, char **argv);

struct ctl_cmd {
	const char *name;
	const char *sub;        /* second word ("plan submit"), or NULL */
	int min_args, max_args; /* max -1: no upper bound */
	unsigned flags;
	const char *args;       /* argument synopsis for usage */
	const char *help;       /* one line */
	ctl_handler_fn *handler;
};

/* The parsed command line. */
struct ctl_opts {
	const char *socket;      /* NULL: tgp_default_socket_path() */
	char socket_buf[PATH_MAX];
	bool json;
	bool wait;
	int wait_ms;
	int timeout_ms;
	bool have_target;        /* --target or a SELECTOR argument */
	const char *target_text; /* as the user wrote it */
	Toggle__Selector target; /* group points into target_group */
	char target_group[TGP_MAX_NAME];
	char target_name[TGP_MAX_NAME]; /* name:NAME, resolved by ctl_resolve_name() */
	const char *etcd;        /* --etcd: the cluster view (ctl_cluster.c) */
	const char *cluster;     /* --cluster NAME */
	const char *etcd_credentials; /* --etcd-credentials FILE (etcd.h) */
	int64_t plan_ttl_s;      /* --plan-ttl: a cluster plan's lease; 0: CTL_PLAN_TTL_DEFAULT */
	bool aligned;            /* --aligned: one step for every target */
	uint32_t aligned_margin; /* --aligned=+N; 0: the daemon's */
	/* record (ctl_record.c) */
	const char *output_dir;  /* -o, --output DIR */
	uint64_t steps;          /* --steps N; 0: none given */
	bool until_interrupt;    /* --until-interrupt */
};

/* A cluster plan's key lives under a lease of this many seconds (--plan-ttl). */
#define CTL_PLAN_TTL_DEFAULT 86400
#define CTL_PLAN_TTL_MIN     10
#define CTL_PLAN_TTL_MAX     31536000

struct ctl_output;

struct ctl_ctx {
	struct ctl_opts opt;
	const struct ctl_cmd *cmd;
	const struct ctl_output *out;
	struct tgc *conn;
};

/* togglectl.c: parse a selector ("all", "agent:ID", "pid:PID", "group:NAME",
 * a bare agent id) into opt->target.  0, or -1 with a message in err. */
int ctl_selector_parse(const char *text, struct ctl_opts *opt, char *err, size_t errlen);

/* ctl_cmds.c: a name:NAME target becomes agent:ID of the one agent of that
 * name (the daemon's selectors have no name): 0, or the exit code after
 * reporting none or several. */
int ctl_resolve_name(struct ctl_ctx *ctx);

/* togglectl.c: the command table, for usage texts. */
extern const struct ctl_cmd ctl_commands[];
extern const size_t ctl_n_commands;

/* ctl_cmds.c: shared with ctl_cluster.c. */
struct ctl_output;
/* Join the SPEC arguments with ","; NULL (after reporting, *exitcode set). */
char *ctl_join_spec(struct ctl_ctx *ctx, int argc, char **argv, int *exitcode);
/* A plan read from a file: the entries point into root's strings. */
struct ctl_plan {
	struct json_t *root;
	size_t n;
	Toggle__PlanEntry *e;
	Toggle__PlanEntry **p;
};
int ctl_plan_load(const struct ctl_output *out, const char *path, struct ctl_plan *pl);
/* ctl_plan_load's decoder, from the file's bytes (shown names it in errors;
 * fuzz/fuzz_plan.c calls it too). */
int ctl_plan_parse(const struct ctl_output *out, const char *shown, const char *buf, size_t len,
		   struct ctl_plan *pl);
void ctl_plan_free(struct ctl_plan *pl);

/* ctl_cluster.c: the command, across every host of --cluster through --etcd. */
int ctl_cluster_run(struct ctl_ctx *ctx, int argc, char **argv);
/* Parse a cluster selector (all, host:H, group:G, agent:H/ID, pid:H/PID). */
int ctl_cluster_target(const char *text, struct ctl_opts *opt, char *err, size_t errlen);

/* ctl_cmds.c: what the handlers of other files share.  The request's
 * target (NULL: the default), an envelope of one body, and a call (connect
 * first if need be): 0 with *rep of type want, or the exit code after
 * reporting. */
const Toggle__Selector *ctl_target(const struct ctl_ctx *ctx);
Toggle__Envelope ctl_envelope(Toggle__Envelope__BodyCase body, void *msg);
int ctl_request(struct ctl_ctx *ctx, Toggle__Envelope *req, Toggle__Envelope__BodyCase want,
		Toggle__Envelope **rep);

/* ctl_record.c: togglectl record. */
ctl_handler_fn ctl_cmd_record;

/* ctl_cmds.c: the handlers. */
ctl_handler_fn ctl_cmd_status, ctl_cmd_agents, ctl_cmd_graphs, ctl_cmd_hooks, ctl_cmd_enable,
	ctl_cmd_disable, ctl_cmd_set, ctl_cmd_plan_submit, ctl_cmd_plan_show, ctl_cmd_plan_clear,
	ctl_cmd_watch;

#endif /* CTL_H */
