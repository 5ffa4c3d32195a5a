/*
 * ctl_cluster.c - togglectl --etcd URL --cluster NAME: the cluster view.
 * set and plan submit write the desired state into etcd (one transaction
 * each; a plan is all entries or none); agents, graphs and status read
 * every host's published status (/graphtoggle/NAME/status/HOST: the same
 * replies a local client gets) and print them with the same tables and
 * --json, one per host.  Key layout: daemon/cluster.h, docs/cluster.md.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cluster.h"
#include "ctl.h"
#include "ctl_host.h"
#include "ctl_output.h"
#include "etcd.h"
#include "toggle_error.h"
#include "util.h"

#define CTL_CLUSTER_ERRLEN 1024

/* --etcd-credentials, read once by ctl_cluster_run; empty: none. */
static struct etcd_creds ctl_creds;

int ctl_cluster_target(const char *text, struct ctl_opts *opt, char *err, size_t errlen)
{
	struct cluster_sel s;
	if (cluster_sel_parse(text, &s, err, errlen))
		return -1;
	opt->have_target = true;
	opt->target_text = text;
	return 0;
}

static struct cluster_sel ctl_cluster_sel(const struct ctl_ctx *ctx)
{
	struct cluster_sel s = {.kind = CLUSTER_SEL_ALL};
	char err[256];
	if (ctx->opt.have_target)
		cluster_sel_parse(ctx->opt.target_text, &s, err, sizeof(err)); /* checked at parse */
	return s;
}

/* ---- set and plan submit ------------------------------------------------ */

/*
 * What a host would refuse is not written: the key and value within the
 * bounds a host reads (etcd.h), the value through the parser a host uses
 * (cluster_key.c: shape, spec length, plan length).  A value written anyway
 * (etcdctl) is skipped and reported by every host; this is the early "no".
 */
static int ctl_cluster_check(struct ctl_ctx *ctx, const char *key, const char *value, bool plan)
{
	char err[256];
	char *spec = NULL;
	struct cluster_plan p;
	if (strlen(key) > ETCD_MAX_KEY)
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_ELIMIT,
				"etcd key over %d bytes; nothing written", ETCD_MAX_KEY);
	if (strlen(value) > ETCD_MAX_VALUE)
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_ELIMIT,
				"the %s is %zu bytes as etcd would hold it, over the %u a host takes; "
				"nothing written%s", plan ? "plan" : "set", strlen(value),
				ETCD_MAX_VALUE, plan ? " (split it into several plans)" : "");
	int rc = plan ? cluster_plan_value_parse(value, &p, err, sizeof(err))
		      : cluster_set_value_parse(value, &spec, err, sizeof(err));
	if (rc)
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"a host would refuse this %s (%s); nothing written", plan ? "plan" : "set",
				err);
	if (plan)
		cluster_plan_free(&p);
	free(spec);
	return 0;
}

static int ctl_cluster_set(struct ctl_ctx *ctx, int argc, char **argv)
{
	int rc = CTL_EXIT_ERROR;
	char *spec = ctl_join_spec(ctx, argc, argv, &rc);
	if (!spec)
		return rc;
	struct cluster_sel sel = ctl_cluster_sel(ctx);
	char key[ETCD_MAX_KEY + 1], err[CTL_CLUSTER_ERRLEN], seltext[200];
	cluster_sel_text(&sel, seltext, sizeof(seltext));
	json_t *v = json_pack("{s:s}", "hooks", spec);
	char *value = v ? json_dumps(v, JSON_COMPACT) : NULL;
	json_decref(v);
	int64_t rev = 0;
	if (!value) {
		rc = ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
	} else if (cluster_set_key(ctx->opt.cluster, &sel, key, sizeof(key))) {
		rc = ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
			      "bad cluster name '%s' (expected [A-Za-z0-9_.-], 1-%d bytes)",
			      ctx->opt.cluster, CLUSTER_MAX_NAME - 1);
	} else if ((rc = ctl_cluster_check(ctx, key, value, false)) != 0) {
		/* said */
	} else {
		const char *k = key, *val = value;
		if (etcd_txn_put(ctx->opt.etcd, &ctl_creds, &k, &val, 1, NULL, 0, &rev, err, sizeof(err)) != 0) {
			rc = ctl_fail(ctx->out, CTL_EXIT_CONNECT, TOGGLE_ECONNECT, "etcd: %s", err);
		} else {
			rc = CTL_EXIT_OK;
			if (ctx->opt.json) {
				json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I}", "op", "set", "spec", spec,
						      "target", seltext, "cluster", ctx->opt.cluster,
						      "revision", (json_int_t)rev);
				if (j)
					json_dumpf(j, stdout, JSON_INDENT(2));
				json_decref(j);
				printf("\n");
			} else {
				printf("set %s on %s of cluster %s (etcd revision %" PRId64 "); every "
				       "host applies it to its agents\n", spec, seltext, ctx->opt.cluster,
				       rev);
			}
		}
	}
	free(value);
	free(spec);
	return rc;
}

static int ctl_cluster_plan(struct ctl_ctx *ctx, char **argv)
{
	struct ctl_plan pl;
	int rc = ctl_plan_load(ctx->out, argv[0], &pl);
	if (rc)
		return rc;
	struct cluster_sel sel = ctl_cluster_sel(ctx);
	char seltext[200], key[ETCD_MAX_KEY + 1], id[64], err[CTL_CLUSTER_ERRLEN];
	cluster_sel_text(&sel, seltext, sizeof(seltext));
	json_t *entries = json_array();
	for (size_t i = 0; entries && i < pl.n; i++) {
		const Toggle__PlanEntry *e = pl.p[i];
		json_t *o = e->after ? json_pack("{s:I, s:s}", "after", (json_int_t)e->after, "hooks",
						 e->spec)
				     : json_pack("{s:I, s:s}", "step", (json_int_t)e->step, "hooks",
						 e->spec);
		if (!o || json_array_append_new(entries, o)) {
			json_decref(entries);
			entries = NULL;
		}
	}
	json_t *v = entries ? json_pack("{s:s, s:o}", "target", seltext, "entries", entries) : NULL;
	char *value = v ? json_dumps(v, JSON_COMPACT) : NULL;
	json_decref(v);
	/* A new key per plan, created only if absent: a plan is never overwritten. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(id, sizeof(id), "%016llx-%08x", (unsigned long long)ts.tv_sec * 1000000000ull +
		 (unsigned long long)ts.tv_nsec, (unsigned)getpid());
	char sub[96];
	snprintf(sub, sizeof(sub), "desired/plan/%s", id);
	int64_t rev = 0;
	if (!value) {
		rc = ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
	} else if (cluster_prefix(ctx->opt.cluster, sub, key, sizeof(key))) {
		rc = ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL, "bad cluster name '%s'",
			      ctx->opt.cluster);
	} else if ((rc = ctl_cluster_check(ctx, key, value, true)) != 0) {
		/* said */
	} else {
		const char *k = key, *val = value;
		/* Under a lease: old plan keys go by themselves (docs/cluster.md). */
		int64_t ttl = ctx->opt.plan_ttl_s ? ctx->opt.plan_ttl_s : CTL_PLAN_TTL_DEFAULT;
		int t = etcd_txn_put_ttl(ctx->opt.etcd, &ctl_creds, &k, &val, 1, &k, 1, ttl, &rev, err,
					 sizeof(err));
		if (t < 0)
			rc = ctl_fail(ctx->out, CTL_EXIT_CONNECT, TOGGLE_ECONNECT, "etcd: %s", err);
		else if (t > 0)
			rc = ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_EBUSY,
				      "plan key %s exists already; nothing written, submit again", key);
		else {
			Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
			m.n_entries = pl.n;
			m.entries = pl.p;
			ctx->out->plan_submitted(&m);
			if (!ctx->opt.json)
				printf("plan %s for %s of cluster %s (etcd revision %" PRId64 "); each host "
				       "applies it to its agents, late ones are reported in status\n",
				       id, seltext, ctx->opt.cluster, rev);
		}
	}
	free(value);
	ctl_plan_free(&pl);
	return rc;
}

/* ---- the hosts' status -------------------------------------------------- */

/* Keep the agents (and their graphs) the target names on this host. */
static void ctl_host_filter(struct ctl_host *h, const struct cluster_sel *sel)
{
	int kind;
	uint64_t id;
	const char *group;
	bool here = cluster_sel_local(sel, h->host, &kind, &id, &group);
	size_t k = 0;
	for (size_t i = 0; i < h->agents->n_agents; i++) {
		Toggle__AgentInfo *a = h->agents->agents[i];
		bool keep = here && (kind == 0 || (kind == 1 && a->agent_id == id) ||
				     (kind == 2 && a->pid == id) ||
				     (kind == 3 && a->group && !strcmp(a->group, group)));
		if (keep)
			h->agents->agents[k++] = a;
		else
			toggle__agent_info__free_unpacked(a, NULL);
	}
	h->agents->n_agents = k;
	k = 0;
	for (size_t i = 0; i < h->graphs->n_graphs; i++) {
		Toggle__GraphInfo *g = h->graphs->graphs[i];
		bool keep = false;
		for (size_t j = 0; j < h->agents->n_agents; j++)
			keep |= h->agents->agents[j]->agent_id == g->agent_id;
		if (keep)
			h->graphs->graphs[k++] = g;
		else
			toggle__graph_info__free_unpacked(g, NULL);
	}
	h->graphs->n_graphs = k;
}

static int ctl_cluster_query(struct ctl_ctx *ctx, const char *what)
{
	char prefix[ETCD_MAX_KEY + 1], err[CTL_CLUSTER_ERRLEN];
	if (cluster_prefix(ctx->opt.cluster, "status/", prefix, sizeof(prefix)))
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL, "bad cluster name '%s'",
				ctx->opt.cluster);
	struct etcd_kv *kvs;
	size_t n;
	int64_t rev;
	if (etcd_range(ctx->opt.etcd, &ctl_creds, prefix, ETCD_MAX_STATUS, &kvs, &n, &rev, err, sizeof(err)))
		return ctl_fail(ctx->out, CTL_EXIT_CONNECT, TOGGLE_ECONNECT, "etcd: %s", err);
	struct cluster_sel sel = ctl_cluster_sel(ctx);
	struct ctl_host *hosts = calloc(n ? n : 1, sizeof(*hosts));
	if (!hosts) {
		etcd_kvs_free(kvs, n);
		return ctl_fail(ctx->out, CTL_EXIT_ERROR, TOGGLE_ENOMEM, "out of memory");
	}
	size_t nh = 0, bad = 0;
	for (size_t i = 0; i < n; i++) {
		struct ctl_host *h = &hosts[nh];
		if (kvs[i].bad || !kvs[i].value || ctl_host_parse(kvs[i].value, h) != 0) {
			/* One host that fails is named; the others are shown. */
			char shown[ETCD_MAX_SHOWN_KEY + 16];
			fprintf(stderr, "togglectl: %s: %s; left out\n",
				util_clean(shown, sizeof(shown), kvs[i].key, UTIL_CLEAN_ASCII),
				kvs[i].bad ? kvs[i].bad : "not a host status");
			bad++;
			continue;
		}
		ctl_host_filter(h, &sel);
		if (sel.kind == CLUSTER_SEL_HOST && strcmp(sel.host, h->host)) {
			ctl_host_free(h);
			continue;
		}
		nh++;
	}
	etcd_kvs_free(kvs, n);
	if (bad)
		fprintf(stderr, "togglectl: %zu host status value(s) under %s are malformed; left out\n",
			bad, prefix);
	if (ctx->opt.json) {
		json_t *arr = json_array();
		for (size_t i = 0; arr && i < nh; i++) {
			const struct ctl_host *h = &hosts[i];
			json_t *o = !strcmp(what, "status") ? json_pack("{s:O}", "status",
					ctl_json_status(h->status, false))
				  : !strcmp(what, "agents") ? ctl_json_agents(h->agents)
				  : ctl_json_graphs(h->graphs, h->agents);
			if (!o)
				continue;
			const char *keys[] = {"host", "revision", "applied", "rejected", "resyncs",
					      "skipped", "rejections", "etcd"};
			for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
				json_t *x = json_object_get(h->doc, keys[k]);
				if (x)
					json_object_set(o, keys[k], x);
			}
			json_array_append_new(arr, o);
		}
		json_t *root = arr ? json_pack("{s:s, s:I, s:o}", "cluster", ctx->opt.cluster,
					       "etcd_revision", (json_int_t)rev, "hosts", arr)
				   : NULL;
		if (root)
			json_dumpf(root, stdout, JSON_INDENT(2));
		printf("\n");
		json_decref(root);
	} else {
		if (nh == 0)
			printf("no host of cluster %s has published its status\n", ctx->opt.cluster);
		for (size_t i = 0; i < nh; i++) {
			const struct ctl_host *h = &hosts[i];
			json_int_t r = json_integer_value(json_object_get(h->doc, "revision"));
			json_int_t rj = json_integer_value(json_object_get(h->doc, "rejected"));
			json_int_t sk = json_integer_value(json_object_get(h->doc, "skipped"));
			printf("%s== host %s (applied revision %lld, %lld rejected, %lld keys skipped)\n",
			       i ? "\n" : "", h->host, (long long)r, (long long)rj, (long long)sk);
			if (!strcmp(what, "status")) {
				ctl_host_print_etcd(stdout, json_object_get(h->doc, "etcd"));
				ctx->out->status(h->status, false);
				const json_t *rs = json_object_get(h->doc, "rejections");
				for (size_t k = 0; k < json_array_size(rs); k++)
					ctl_host_print_rejection(stdout, json_array_get(rs, k));
			} else if (!strcmp(what, "agents")) {
				ctx->out->agents(h->agents);
			} else {
				ctx->out->graphs(h->graphs, h->agents);
			}
		}
	}
	for (size_t i = 0; i < nh; i++)
		ctl_host_free(&hosts[i]);
	free(hosts);
	return CTL_EXIT_OK;
}

static int ctl_cluster_dispatch(struct ctl_ctx *ctx, int argc, char **argv);

int ctl_cluster_run(struct ctl_ctx *ctx, int argc, char **argv)
{
	char err[CTL_CLUSTER_ERRLEN];
	if (ctx->opt.etcd_credentials &&
	    etcd_creds_load(ctx->opt.etcd_credentials, &ctl_creds, err, sizeof(err)) != 0)
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL, "%s", err);
	int rc = ctl_cluster_dispatch(ctx, argc, argv);
	explicit_bzero(&ctl_creds, sizeof(ctl_creds));
	return rc;
}

static int ctl_cluster_dispatch(struct ctl_ctx *ctx, int argc, char **argv)
{
	const struct ctl_cmd *c = ctx->cmd;
	if (ctx->opt.wait)
		return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
				"--wait is not available with --etcd (see togglectl status for the "
				"revision each host applied)");
	if (!strcmp(c->name, "set"))
		return ctl_cluster_set(ctx, argc, argv);
	if (!strcmp(c->name, "plan") && !strcmp(c->sub, "submit"))
		return ctl_cluster_plan(ctx, argv);
	if (!strcmp(c->name, "agents") || !strcmp(c->name, "graphs") || !strcmp(c->name, "status"))
		return ctl_cluster_query(ctx, c->name);
	return ctl_fail(ctx->out, CTL_EXIT_USAGE, TOGGLE_EINVAL,
			"%s%s%s is not available with --etcd (set, plan submit, agents, graphs and "
			"status are)", c->name, c->sub ? " " : "", c->sub ? c->sub : "");
}
