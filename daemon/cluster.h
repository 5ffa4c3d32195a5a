/*
 * cluster.h - toggled in a cluster through etcd (docs/cluster.md).
 *
 * Key layout under /graphtoggle/NAME/:
 *   desired/set/all                 {"hooks": SPEC}   standing set of every agent
 *   desired/set/host/HOST           {"hooks": SPEC}   of every agent of one host
 *   desired/set/group/GROUP         {"hooks": SPEC}   of one group, on every host
 *   desired/set/agent/HOST/ID       {"hooks": SPEC}   of one agent
 *   desired/set/pid/HOST/PID        {"hooks": SPEC}   of one process's agents
 *   desired/plan/PLANID             {"target": SEL, "entries": [{"step"|"after": N, "hooks": SPEC}]}
 *   status/HOST                     this host's status, under a lease
 * SEL, as text: all, host:HOST, group:GROUP, agent:HOST/ID, pid:HOST/PID.
 *
 * cluster_key.c: the pure parts (names, selectors, keys, values); linked
 * into togglectl too.  cluster.c: the daemon side.
 */
#ifndef TD_CLUSTER_H
#define TD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "toggle_hooks.h"
#include "toggle_proto.h"

#define CLUSTER_ROOT      "/graphtoggle/"
/* Cluster names, host ids and the agent groups a selector names (group:G),
 * with the NUL: an agent's group must fit, so it is the agents' name limit. */
#define CLUSTER_MAX_NAME  TOGGLE_MAX_NAME
#define CLUSTER_MAX_PLANS TGP_MAX_PLAN_ENTRIES /* entries of one plan */

struct cluster_sel {
	enum { CLUSTER_SEL_ALL, CLUSTER_SEL_HOST, CLUSTER_SEL_GROUP, CLUSTER_SEL_AGENT,
	       CLUSTER_SEL_PID } kind;
	char host[CLUSTER_MAX_NAME];
	char group[CLUSTER_MAX_NAME];
	uint64_t id; /* agent id or pid */
};

/* [A-Za-z0-9_.-], 1 to CLUSTER_MAX_NAME - 1 bytes, not "." or "..". */
bool cluster_name_ok(const char *s);
/* "all", "host:H", "group:G", "agent:H/ID", "pid:H/PID". 0, or -1 with err. */
int cluster_sel_parse(const char *text, struct cluster_sel *out, char *err, size_t errlen);
/* The text cluster_sel_parse reads. */
void cluster_sel_text(const struct cluster_sel *s, char *buf, size_t len);
/* The key of the standing set of s: "<root>NAME/desired/set/...". */
int cluster_set_key(const char *cluster, const struct cluster_sel *s, char *buf, size_t len);
/* "<root>NAME/" and "<root>NAME/desired/", "<root>NAME/status/". */
int cluster_prefix(const char *cluster, const char *sub, char *buf, size_t len);

enum cluster_key_kind { CLUSTER_KEY_OTHER, CLUSTER_KEY_SET, CLUSTER_KEY_PLAN };
/*
 * What a key under desired_prefix is: a standing set (its selector in
 * *sel), a plan, or something else (ignored).  -1 with err for a set or
 * plan key that is malformed.
 */
int cluster_key_parse(const char *desired_prefix, const char *key, enum cluster_key_kind *kind,
		      struct cluster_sel *sel, char *err, size_t errlen);

/*
 * Does s concern host_id's agents?  If so, fills the local matching rule:
 * kind 0 all, 1 agent id, 2 pid, 3 group (the values of struct td_selector).
 */
bool cluster_sel_local(const struct cluster_sel *s, const char *host_id, int *kind, uint64_t *id,
		       const char **group);

/* A standing set value: {"hooks": SPEC}.  The spec is malloc'd. */
int cluster_set_value_parse(const char *value, char **spec, char *err, size_t errlen);

struct cluster_plan_entry {
	bool relative;  /* "after": N steps from the agent's step when it is applied */
	int64_t n;      /* step, or after */
	char *spec;
};
struct cluster_plan {
	struct cluster_sel target;
	size_t n;
	struct cluster_plan_entry e[CLUSTER_MAX_PLANS];
};
/* A plan value; bounds checked (1..CLUSTER_MAX_PLANS entries). */
int cluster_plan_value_parse(const char *value, struct cluster_plan *p, char *err, size_t errlen);
void cluster_plan_free(struct cluster_plan *p);

/* cluster.c: the applied revision's file: missing is 0; written atomically
 * (tmp, fsync, rename, fsync of the directory).  0, or -1 (errno). */
int cluster_rev_load(const char *path, int64_t *rev);
int cluster_rev_save(const char *path, int64_t rev);

#endif
