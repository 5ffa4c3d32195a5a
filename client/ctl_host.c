/*
 * ctl_host.c - the decoder of a host's published status (ctl_host.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "ctl_host.h"
#include "etcd.h"
#include "util.h"

/* A base64 protobuf message in a string field, or NULL. */
static void *unpack_b64(const json_t *doc, const char *field,
			void *(*unpack)(ProtobufCAllocator *, size_t, const uint8_t *))
{
	const json_t *v = json_object_get(doc, field);
	char *raw;
	size_t len;
	/* A big host's replies (82 agents x 64 graphs is over 256 KiB): the status bound. */
	if (!json_is_string(v) || etcd_b64_decode(json_string_value(v), &raw, &len, ETCD_MAX_STATUS))
		return NULL;
	void *m = unpack(NULL, len, (const uint8_t *)raw);
	free(raw);
	return m;
}

void ctl_host_free(struct ctl_host *h)
{
	if (h->agents)
		toggle__list_agents_reply__free_unpacked(h->agents, NULL);
	if (h->graphs)
		toggle__list_graphs_reply__free_unpacked(h->graphs, NULL);
	if (h->status)
		toggle__status_reply__free_unpacked(h->status, NULL);
	json_decref(h->doc);
	memset(h, 0, sizeof(*h));
}

int ctl_host_parse(const char *value, struct ctl_host *h)
{
	memset(h, 0, sizeof(*h));
	json_error_t je;
	h->doc = value ? json_loads(value, 0, &je) : NULL;
	const json_t *host = json_object_get(h->doc, "host");
	h->host = json_is_string(host) ? json_string_value(host) : NULL;
	h->agents = unpack_b64(h->doc, "agents", (void *(*)(ProtobufCAllocator *, size_t,
			       const uint8_t *))toggle__list_agents_reply__unpack);
	h->graphs = unpack_b64(h->doc, "graphs", (void *(*)(ProtobufCAllocator *, size_t,
			       const uint8_t *))toggle__list_graphs_reply__unpack);
	h->status = unpack_b64(h->doc, "status", (void *(*)(ProtobufCAllocator *, size_t,
			       const uint8_t *))toggle__status_reply__unpack);
	if (!h->host || !cluster_name_ok(h->host) || !h->agents || !h->graphs || !h->status) {
		ctl_host_free(h);
		return -1;
	}
	return 0;
}

/* A string field, cleaned for a terminal; "?" when it is not a string. */
static const char *field_text(const json_t *o, const char *field, char *buf, size_t len)
{
	const char *s = json_string_value(json_object_get(o, field));
	return util_clean(buf, len, s ? s : "?", UTIL_CLEAN_ASCII);
}

void ctl_host_print_rejection(FILE *f, const json_t *x)
{
	char key[512], agent[128], msg[1024];
	const char *ag = json_string_value(json_object_get(x, "agent"));
	fprintf(f, "rejected  %s (revision %lld)%s%s: %s\n", field_text(x, "key", key, sizeof(key)),
	       (long long)json_integer_value(json_object_get(x, "revision")),
	       ag && ag[0] ? " on agent " : "", ag && ag[0] ? field_text(x, "agent", agent, sizeof(agent)) : "",
	       field_text(x, "message", msg, sizeof(msg)));
}

/*
 * The document's "etcd" object: the member the host's watch reads from,
 * since when, how often it moved, the last reason a watch ended; one line,
 * cleaned.  Nothing for a host that does not publish it (an older toggled).
 */
void ctl_host_print_etcd(FILE *f, const json_t *e)
{
	if (!json_is_object(e))
		return;
	char member[300], last[300], since[64] = "?";
	json_int_t ms = json_integer_value(json_object_get(e, "since_ms"));
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	if (ms > 0 && gmtime_r(&t, &tm))
		strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
	field_text(e, "last_error", last, sizeof(last));
	fprintf(f, "etcd      %s %s since %s, %lld failovers%s%s\n",
		json_is_true(json_object_get(e, "connected")) ? "watching" : "lost (retrying), last",
		field_text(e, "member", member, sizeof(member)), since,
		(long long)json_integer_value(json_object_get(e, "failovers")),
		last[0] ? "; last error: " : "", last);
}
