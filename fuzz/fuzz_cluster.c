/*
 * fuzz_cluster.c - libFuzzer target: what a toggled in a cluster reads from
 * etcd (daemon/cluster_key.c, daemon/etcd.c): keys, selector text, set and
 * plan values, base64.  The first byte picks the decoder.  Must never crash
 * or leak; a key it accepts must be the canonical key of what it parsed,
 * and base64 must round-trip.
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
	switch (data[0] % 5) {
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
