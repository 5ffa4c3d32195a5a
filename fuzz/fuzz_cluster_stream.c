/*
 * fuzz_cluster_stream.c - libFuzzer target: a whole etcd watch stream as a
 * toggled in a cluster reads it (daemon/etcd.c etcd_watch_parse, then the
 * host's judgement of each key, daemon/cluster_key.c).  The input is the
 * stream, one message per line; where the watch stands moves on as the
 * watch thread moves it (past the last event of each message read on; a
 * message that ends the stream reconnects at the same place).
 *
 * Must never crash or leak, and: every message read on moves the watch
 * strictly forward; a key or value the host would not take (over the
 * limits, a NUL, not base64) comes as a skipped kv (a reason, no value, a
 * printable key of bounded length), never as a value and never as the end
 * of the stream; every value handed on is within the limits, NUL-free; a
 * set key the host takes is the canonical key of its selector.
 */
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "etcd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DESIRED "/graphtoggle/c/desired/"

static void judge(const struct etcd_kv *kv)
{
	if (!kv->key || (kv->bad && kv->value) || (kv->bad_key && !kv->bad))
		abort();
	if (kv->bad_key) { /* a display copy: printable, bounded */
		size_t n = strlen(kv->key);
		if (n > ETCD_MAX_SHOWN_KEY + 3)
			abort();
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)kv->key[i] < 0x20 || (unsigned char)kv->key[i] >= 0x7f)
				abort();
		return;
	}
	if (strlen(kv->key) > ETCD_MAX_KEY)
		abort();
	if (!kv->bad && !kv->deleted &&
	    (!kv->value || kv->value_len > ETCD_MAX_VALUE || strlen(kv->value) != kv->value_len))
		abort();
	enum cluster_key_kind kind;
	struct cluster_sel sel;
	char err[256], key[1024];
	if (cluster_key_parse(DESIRED, kv->key, &kind, &sel, err, sizeof(err)) != 0 || !kv->value)
		return;
	if (kind == CLUSTER_KEY_SET) {
		char *spec;
		if (cluster_set_key("c", &sel, key, sizeof(key)) || strcmp(key, kv->key))
			abort(); /* one key per selector */
		if (cluster_set_value_parse(kv->value, &spec, err, sizeof(err)) == 0)
			free(spec);
	} else if (kind == CLUSTER_KEY_PLAN) {
		struct cluster_plan p;
		if (cluster_plan_value_parse(kv->value, &p, err, sizeof(err)) == 0) {
			if (p.n < 1 || p.n > CLUSTER_MAX_PLANS)
				abort();
			cluster_plan_free(&p);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > (1u << 20))
		return 0;
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	int64_t next_rev = 1;
	for (size_t start = 0; start < size;) {
		const char *nl = memchr(s + start, '\n', size - start);
		size_t len = nl ? (size_t)(nl - (s + start)) : size - start;
		struct etcd_watch_msg m;
		enum etcd_watch_outcome o = etcd_watch_parse(s + start, len, next_rev, &m);
		if (m.events) {
			if (o != ETCD_WATCH_GO_ON || m.events->kind != ETCD_EVENTS || !m.events->n)
				abort();
			for (size_t i = 0; i < m.events->n; i++) {
				if (m.events->kvs[i].mod_revision < next_rev)
					abort();
				judge(&m.events->kvs[i]);
			}
			for (size_t i = 1; i < m.events->n; i++)
				if (m.events->kvs[i].mod_revision < m.events->kvs[i - 1].mod_revision)
					abort(); /* the watch would go on before a key it passed */
			int64_t last = m.events->kvs[m.events->n - 1].mod_revision;
			if (last == INT64_MAX)
				abort(); /* where would it go on? */
			next_rev = last + 1; /* forward: last >= next_rev */
			etcd_batch_free(m.events);
		}
		if (o == ETCD_WATCH_COMPACTED && m.compacted <= 0)
			abort();
		start += len + 1;
	}
	free(s);
	return 0;
}
