/*
 * ctl_output.h - togglectl's output table: one set of printers for humans
 * (aligned tables, human units) and one for machines (--json, jansson, the
 * schema of docs/cli.md).  Handlers call ctx->out->X(...) and never print
 * on their own; errors go through ctl_fail() whatever the mode.
 */
#ifndef CTL_OUTPUT_H
#define CTL_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ctl.h"

/* One error, as togglectl reports it. */
struct ctl_error {
	int code;                   /* TOGGLE_E* */
	const char *message;        /* what was wrong and what would be right */
	const char *const *agents;  /* agents the daemon named (may be NULL) */
	size_t n_agents;
	bool stream;                /* inside `watch`: one line, like the events */
};

/* Result of a SetEnabled, with what was asked. */
struct ctl_set_result {
	const char *op;   /* "enable", "disable", "set" */
	const char *spec; /* the joined spec */
	bool waited;      /* --wait: every agent applied it at a replay */
	bool aligned;     /* --aligned: reply->aligned_step is the step */
	const Toggle__SetEnabledReply *reply;
};

/* Where a recording stands (togglectl record, ctl_record.c). */
struct ctl_record_stats {
	const char *dir;
	uint64_t records, bytes, dropped, files, steps;
	size_t agents, agents_ended;
	uint64_t elapsed_ms;
	bool final;               /* the last report: the recording ended */
	bool complete;            /* every agent's part ended as asked (--steps done) */
	const char *stopped;      /* why it ended early (interrupted, an error), or NULL */
};

struct ctl_output {
	void (*status)(const Toggle__StatusReply *r, bool may_write);
	void (*agents)(const Toggle__ListAgentsReply *r);
	/* Graphs, with the agents (same target) for names and modes. */
	void (*graphs)(const Toggle__ListGraphsReply *g, const Toggle__ListAgentsReply *a);
	void (*hooks)(const Toggle__HooksReply *r);
	void (*set)(const struct ctl_set_result *r);
	void (*plan_submitted)(const Toggle__SubmitPlanRequest *m);
	void (*plan)(const Toggle__ShowPlanReply *r);
	void (*plan_cleared)(void);
	void (*event)(const Toggle__Event *e);
	void (*error)(const struct ctl_error *e);
	/* A recording's progress (about once a second) and its last report. */
	void (*record)(const struct ctl_record_stats *s);
};

extern const struct ctl_output ctl_output_human;
extern const struct ctl_output ctl_output_json;

/* The --json documents of status, agents and graphs as values (the
 * cluster view, ctl_cluster.c, nests them per host). */
json_t *ctl_json_status(const Toggle__StatusReply *r, bool may_write);
json_t *ctl_json_agents(const Toggle__ListAgentsReply *r);
json_t *ctl_json_graphs(const Toggle__ListGraphsReply *g, const Toggle__ListAgentsReply *a);

/* Short name of an error code ("ESPEC"), "EUNKNOWN" for others. */
const char *ctl_error_name(int code);

/* Report an error through out and return exitcode. */
int ctl_fail(const struct ctl_output *out, int exitcode, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Human units: "3h12m", "12m5s", "5s"; and "5s ago" for a wall-clock time. */
void ctl_fmt_duration(uint64_t ms, char *buf, size_t len);
void ctl_fmt_ago(uint64_t unix_ms, uint64_t now_unix_ms, char *buf, size_t len);

/* Mode names of AgentInfo.mode: "lazy", "eager", "device", "?". */
const char *ctl_mode_name(uint32_t mode);
/* Event kinds: "joined", "left", "set_applied", "plan_rejected", "anomaly". */
const char *ctl_event_name(int kind);

#endif /* CTL_OUTPUT_H */
