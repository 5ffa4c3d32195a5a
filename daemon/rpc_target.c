/*
 * rpc_target.c - the default target (no selector, or "all") of commands
 * that change state.  Agents register from every local user with a catalog
 * of their own, so one agent whose catalog refuses a spec must not make the
 * operator's default command fail for everyone (issue 11 item 5): such
 * agents are left out, named in the reply and in the log, and the command
 * applies to the others.  It fails only when no agent accepts it.  An
 * explicit selector (agent, pid, group) stays all-or-nothing.  And the
 * targets of every command that names agents (rpc_targets).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rpc.h"

int rpc_targets(struct td_peer *p, struct rpc_reply *r, const Toggle__Selector *sel,
		struct td_agent ***agents, size_t *n)
{
	struct td_selector s;
	char err[160];
	int rc = td_selector_parse(sel, &s, err, sizeof(err));
	if (!rc)
		rc = td_agents_select(p->d, &s, agents, n);
	if (rc == TOGGLE_ENOAGENT)
		snprintf(err, sizeof(err), "no agent matches the target (agents connected: %zu)",
			 p->d->n_agents);
	else if (rc == TOGGLE_ENOMEM)
		snprintf(err, sizeof(err), "out of memory");
	if (rc)
		rpc_fail(r, rc, "%s", err);
	return rc;
}

static bool target_is_default(const Toggle__Selector *sel)
{
	return !sel || sel->sel_case == TOGGLE__SELECTOR__SEL__NOT_SET ||
	       sel->sel_case == TOGGLE__SELECTOR__SEL_ALL;
}

/* Does every spec parse for a's catalog?  If not, why (first failure). */
static bool catalog_accepts(const struct td_agent *a, const char *const *specs, size_t n_specs,
			    char *why, size_t len)
{
	struct toggle_set set;
	for (size_t k = 0; k < n_specs; k++) {
		if (!specs[k] || strlen(specs[k]) > TGP_MAX_SPEC)
			return true; /* the command's own check reports it for every agent */
		if (toggle_set_parse(&a->cat, specs[k], &set, why, len) != 0)
			return false;
	}
	return true;
}

int rpc_default_filter(struct td_peer *p, struct rpc_reply *r, const Toggle__Selector *sel,
		       struct td_agent **v, size_t *n, const char *const *specs, size_t n_specs)
{
	struct rpc_skipped *sk = &r->skipped;
	rpc_skipped_free(sk);
	if (!target_is_default(sel) || *n < 2)
		return 0; /* one agent: its own refusal is the answer */
	char why[256];
	size_t keep = 0;
	for (size_t i = 0; i < *n; i++) {
		if (catalog_accepts(v[i], specs, n_specs, why, sizeof(why))) {
			v[keep++] = v[i];
			continue;
		}
		char line[400];
		snprintf(line, sizeof(line), "%s (id %llu, uid %u): %s", v[i]->name,
			 (unsigned long long)v[i]->id, v[i]->uid, why);
		char **nv = realloc(sk->v, (sk->n + 1) * sizeof(*nv));
		char *copy = strdup(line);
		if (!nv || !copy) {
			free(copy);
			if (nv)
				sk->v = nv;
			rpc_skipped_free(sk);
			return rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
		}
		sk->v = nv;
		sk->v[sk->n++] = copy;
	}
	if (keep == 0) {
		/* Nobody accepts it: the command fails as it would for one agent, first one named. */
		rpc_skipped_free(sk);
		return 0;
	}
	for (size_t i = 0; i < sk->n; i++)
		log_info("pid %u uid %u: default target: skipped agent %s", p->pid, p->uid, sk->v[i]);
	*n = keep;
	return 0;
}
