/*
 * fuzz_cluster.c - libFuzzer target: what a toggled in a cluster reads from
 * etcd (daemon/cluster_key.c, daemon/etcd.c): keys, selector text, set and
 * plan values, base64, a range response and a line of the watch stream.
 * The first byte picks the decoder.  Must never crash or leak; a key it
 * accepts must be the canonical key of what it parsed, base64 must
 * round-trip, and what the etcd decoders accept must be within their
 * bounds (keys decoded, revisions at or after where the watch stands).
 */
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "etcd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536)
		return 0;
	char *s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	char err[256], key[1024];
	struct cluster_sel sel;
	switch (data[0] % 7) {
	case 0: {
		enum cluster_key_kind kind;
		if (cluster_key_parse("/graphtoggle/c/desired/", s, &kind, &sel, err, sizeof(err)) == 0 &&
		    kind == CLUSTER_KEY_SET &&
		    (cluster_set_key("c", &sel, key, sizeof(key)) || strcmp(key, s)))
			abort(); /* one key per selector */
		break;
	}
	case 1:
		if (cluster_sel_parse(s, &sel, err, sizeof(err)) == 0) {
			char text[256];
			struct cluster_sel again;
			cluster_sel_text(&sel, text, sizeof(text));
			if (strcmp(text, s) || cluster_sel_parse(text, &again, err, sizeof(err)))
				abort();
		}
		break;
	case 2: {
		char *spec;
		if (cluster_set_value_parse(s, &spec, err, sizeof(err)) == 0)
			free(spec);
		break;
	}
	case 3: {
		struct cluster_plan p;
		if (cluster_plan_value_parse(s, &p, err, sizeof(err)) == 0)
			cluster_plan_free(&p);
		break;
	}
	case 5: { /* a watch line; where the watch stands: the first byte / 7 */
		int64_t next_rev = data[0] / 7;
		struct etcd_watch_msg m;
		enum etcd_watch_outcome o = etcd_watch_parse(s, size - 1, next_rev, &m);
		if (m.events) {
			if (o != ETCD_WATCH_GO_ON || m.events->kind != ETCD_EVENTS || !m.events->n)
				abort();
			for (size_t i = 0; i < m.events->n; i++)
				if (!m.events->kvs[i].key || m.events->kvs[i].mod_revision < next_rev ||
				    (m.events->kvs[i].bad && m.events->kvs[i].value))
					abort();
			etcd_batch_free(m.events);
		}
		if (o == ETCD_WATCH_COMPACTED && m.compacted <= 0)
			abort();
		break;
	}
	case 6: { /* a range response */
		struct etcd_kv *kvs;
		size_t n;
		int64_t rev;
		if (etcd_range_parse_text(s, size - 1, ETCD_MAX_VALUE, &kvs, &n, &rev) == 0) {
			if (rev <= 0 || n > ETCD_MAX_KVS || (n && !kvs))
				abort();
			/* A key or value it does not take is a bad kv, never a value. */
			for (size_t i = 0; i < n; i++)
				if (!kvs[i].key || !kvs[i].value == !kvs[i].bad ||
				    (kvs[i].value && strlen(kvs[i].value) != kvs[i].value_len))
					abort();
			etcd_kvs_free(kvs, n);
		}
		break;
	}
	default: {
		char *out;
		size_t n;
		if (etcd_b64_decode(s, &out, &n, 4096) == 0) {
			char *back = etcd_b64_encode(out, n);
			if (!back || strcmp(back, s))
				abort();
			free(back);
			free(out);
		}
		break;
	}
	}
	free(s);
	return 0;
}
