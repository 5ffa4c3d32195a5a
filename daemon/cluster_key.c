/*
 * cluster_key.c - the pure parts of the cluster layer: names, selectors,
 * the etcd key layout and the JSON values under it (cluster.h).  Whatever
 * comes from etcd is untrusted here: bounded, type-checked, and a value
 * that fails is rejected whole.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster.h"
#include "util.h"

/* The agent-name rule (util.h), bounded by the cluster's own name size. */
bool cluster_name_ok(const char *s)
{
	return util_name_ok(s, CLUSTER_MAX_NAME);
}

/* Decimal digits only, 1 to max, no leading zero: one text per number. */
static int parse_id(const char *s, uint64_t max, uint64_t *out)
{
	if (!*s || *s == '0' || strlen(s) > 20)
		return -1;
	for (const char *p = s; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	errno = 0;
	unsigned long long v = strtoull(s, NULL, 10);
	if (errno || v == 0 || v > max)
		return -1;
	*out = v;
	return 0;
}

/* "HOST/N" (sep '/') into host and id. */
static int host_id(const char *s, char sep, struct cluster_sel *out, uint64_t max)
{
	const char *slash = strchr(s, sep);
	if (!slash || (size_t)(slash - s) >= sizeof(out->host))
		return -1;
	memcpy(out->host, s, (size_t)(slash - s));
	out->host[slash - s] = '\0';
	return cluster_name_ok(out->host) && parse_id(slash + 1, max, &out->id) == 0 ? 0 : -1;
}

int cluster_sel_parse(const char *text, struct cluster_sel *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	int rc = -1;
	if (!text) {
		rc = -1;
	} else if (!strcmp(text, "all")) {
		out->kind = CLUSTER_SEL_ALL;
		rc = 0;
	} else if (!strncmp(text, "host:", 5)) {
		out->kind = CLUSTER_SEL_HOST;
		if (cluster_name_ok(text + 5)) {
			snprintf(out->host, sizeof(out->host), "%s", text + 5);
			rc = 0;
		}
	} else if (!strncmp(text, "group:", 6)) {
		out->kind = CLUSTER_SEL_GROUP;
		if (cluster_name_ok(text + 6)) {
			snprintf(out->group, sizeof(out->group), "%s", text + 6);
			rc = 0;
		}
	} else if (!strncmp(text, "agent:", 6)) {
		out->kind = CLUSTER_SEL_AGENT;
		rc = host_id(text + 6, '/', out, UINT64_MAX);
	} else if (!strncmp(text, "pid:", 4)) {
		out->kind = CLUSTER_SEL_PID;
		rc = host_id(text + 4, '/', out, UINT32_MAX);
	}
	if (rc)
		snprintf(err, errlen, "bad cluster selector '%.80s' (expected all, host:HOST, "
			 "group:GROUP, agent:HOST/ID or pid:HOST/PID; names [A-Za-z0-9_.-])",
			 text ? text : "");
	return rc;
}

void cluster_sel_text(const struct cluster_sel *s, char *buf, size_t len)
{
	switch (s->kind) {
	case CLUSTER_SEL_ALL: snprintf(buf, len, "all"); break;
	case CLUSTER_SEL_HOST: snprintf(buf, len, "host:%s", s->host); break;
	case CLUSTER_SEL_GROUP: snprintf(buf, len, "group:%s", s->group); break;
	case CLUSTER_SEL_AGENT:
		snprintf(buf, len, "agent:%s/%llu", s->host, (unsigned long long)s->id);
		break;
	case CLUSTER_SEL_PID:
		snprintf(buf, len, "pid:%s/%llu", s->host, (unsigned long long)s->id);
		break;
	}
}

int cluster_prefix(const char *cluster, const char *sub, char *buf, size_t len)
{
	if (!cluster_name_ok(cluster))
		return -1;
	int n = snprintf(buf, len, CLUSTER_ROOT "%s/%s", cluster, sub ? sub : "");
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int cluster_set_key(const char *cluster, const struct cluster_sel *s, char *buf, size_t len)
{
	char sel[2 * CLUSTER_MAX_NAME + 32];
	cluster_sel_text(s, sel, sizeof(sel));
	/* The key path is the selector text with '/' for its first ':'. */
	char *colon = strchr(sel, ':');
	if (colon)
		*colon = '/';
	if (!cluster_name_ok(cluster))
		return -1;
	int n = snprintf(buf, len, CLUSTER_ROOT "%s/desired/set/%s", cluster, sel);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int cluster_key_parse(const char *desired_prefix, const char *key, enum cluster_key_kind *kind,
		      struct cluster_sel *sel, char *err, size_t errlen)
{
	size_t pl = strlen(desired_prefix);
	*kind = CLUSTER_KEY_OTHER;
	if (strncmp(key, desired_prefix, pl) != 0)
		return 0;
	const char *rest = key + pl;
	if (!strncmp(rest, "plan/", 5)) {
		if (!cluster_name_ok(rest + 5)) {
			snprintf(err, errlen, "bad plan key '%.120s'", key);
			return -1;
		}
		*kind = CLUSTER_KEY_PLAN;
		return 0;
	}
	if (strncmp(rest, "set/", 4) != 0)
		return 0;
	/* set/KIND[/...]: back to selector text, KIND:... */
	char text[2 * CLUSTER_MAX_NAME + 32];
	if (strlen(rest + 4) >= sizeof(text)) {
		snprintf(err, errlen, "set key too long");
		return -1;
	}
	snprintf(text, sizeof(text), "%s", rest + 4);
	char *slash = strchr(text, '/');
	if (slash)
		*slash = ':';
	if (cluster_sel_parse(text, sel, err, errlen))
		return -1;
	/* Only the canonical spelling: one key per selector. */
	char again[512];
	if (cluster_set_key("x", sel, again, sizeof(again)) ||
	    strcmp(again + strlen(CLUSTER_ROOT "x/desired/"), rest) != 0) {
		snprintf(err, errlen, "set key '%.120s' is not in its canonical form", key);
		return -1;
	}
	*kind = CLUSTER_KEY_SET;
	return 0;
}

bool cluster_sel_local(const struct cluster_sel *s, const char *host_id, int *kind, uint64_t *id,
		       const char **group)
{
	*kind = 0;
	*id = 0;
	*group = NULL;
	switch (s->kind) {
	case CLUSTER_SEL_ALL: return true;
	case CLUSTER_SEL_HOST: return strcmp(s->host, host_id) == 0;
	case CLUSTER_SEL_GROUP:
		*kind = 3;
		*group = s->group;
		return true;
	case CLUSTER_SEL_AGENT:
		*kind = 1;
		*id = s->id;
		return strcmp(s->host, host_id) == 0;
	case CLUSTER_SEL_PID:
		*kind = 2;
		*id = s->id;
		return strcmp(s->host, host_id) == 0;
	}
	return false;
}

static json_t *load_object(const char *value, char *err, size_t errlen)
{
	json_error_t je;
	json_t *j = json_loads(value, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(j)) {
		snprintf(err, errlen, "value is not a JSON object%s%.100s", j ? "" : ": ",
			 j ? "" : je.text);
		json_decref(j);
		return NULL;
	}
	return j;
}

static char *spec_of(const json_t *h, char *err, size_t errlen)
{
	if (!json_is_string(h) || json_string_length(h) == 0 ||
	    json_string_length(h) > TGP_MAX_SPEC || strlen(json_string_value(h)) != json_string_length(h)) {
		snprintf(err, errlen, "\"hooks\" must be a hook spec string of 1 to %d bytes",
			 TGP_MAX_SPEC);
		return NULL;
	}
	char *s = strdup(json_string_value(h));
	if (!s)
		snprintf(err, errlen, "out of memory");
	return s;
}

int cluster_set_value_parse(const char *value, char **spec, char *err, size_t errlen)
{
	*spec = NULL;
	json_t *j = load_object(value, err, errlen);
	if (!j)
		return -1;
	if (json_object_size(j) != 1) {
		snprintf(err, errlen, "a set value is {\"hooks\": SPEC} and nothing else");
		json_decref(j);
		return -1;
	}
	*spec = spec_of(json_object_get(j, "hooks"), err, errlen);
	json_decref(j);
	return *spec ? 0 : -1;
}

void cluster_plan_free(struct cluster_plan *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->e[i].spec);
	p->n = 0;
}

int cluster_plan_value_parse(const char *value, struct cluster_plan *p, char *err, size_t errlen)
{
	memset(p, 0, sizeof(*p));
	json_t *j = load_object(value, err, errlen);
	if (!j)
		return -1;
	const json_t *t = json_object_get(j, "target"), *es = json_object_get(j, "entries");
	int rc = -1;
	if (json_object_size(j) != 2 || !json_is_string(t) || !json_is_array(es)) {
		snprintf(err, errlen, "a plan value is {\"target\": SELECTOR, \"entries\": [...]}");
		goto out;
	}
	if (cluster_sel_parse(json_string_value(t), &p->target, err, errlen))
		goto out;
	size_t n = json_array_size(es);
	if (n == 0 || n > CLUSTER_MAX_PLANS) {
		snprintf(err, errlen, "a plan has 1 to %d entries; this one has %zu", CLUSTER_MAX_PLANS, n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(es, i), *st = json_object_get(e, "step"),
			     *af = json_object_get(e, "after");
		if (!json_is_object(e) || json_object_size(e) != 2 || (!st == !af) ||
		    (st && (!json_is_integer(st) || json_integer_value(st) < 0)) ||
		    (af && (!json_is_integer(af) || json_integer_value(af) < 1 ||
			    json_integer_value(af) > TGP_MAX_PLAN_AFTER))) {
			snprintf(err, errlen, "plan entry %zu: expected {\"step\": N >= 0 or \"after\": "
				 "1..%lld, \"hooks\": SPEC}", i, (long long)TGP_MAX_PLAN_AFTER);
			goto out;
		}
		p->e[i].relative = af != NULL;
		p->e[i].n = json_integer_value(af ? af : st);
		p->e[i].spec = spec_of(json_object_get(e, "hooks"), err, errlen);
		if (!p->e[i].spec)
			goto out;
		p->n = i + 1;
	}
	rc = 0;
out:
	if (rc)
		cluster_plan_free(p);
	json_decref(j);
	return rc;
}
