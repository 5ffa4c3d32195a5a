/*
 * fuzz_hosts.c - libFuzzer target: a host's published status in a cluster
 * as togglectl --etcd reads it (client/ctl_host.c): JSON with base64
 * protobuf replies.  Must never crash or leak; an accepted value names a
 * valid host and carries all three replies, and its rejections and the
 * member it watches print as lines without a control byte (the text came
 * from etcd).
 */
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "ctl_host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > (1u << 20))
		return 0;
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	struct ctl_host h;
	if (ctl_host_parse(s, &h) == 0) {
		if (!h.host || !cluster_name_ok(h.host) || !h.agents || !h.graphs || !h.status)
			abort();
		char *out = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&out, &len);
		const json_t *rs = json_object_get(h.doc, "rejections");
		for (size_t k = 0; f && k < json_array_size(rs); k++)
			ctl_host_print_rejection(f, json_array_get(rs, k));
		if (f)
			ctl_host_print_etcd(f, json_object_get(h.doc, "etcd"));
		if (f)
			fclose(f);
		for (size_t i = 0; out && i < len; i++)
			if (((unsigned char)out[i] < 0x20 && out[i] != '\n') || (unsigned char)out[i] >= 0x7f)
				abort();
		free(out);
		ctl_host_free(&h);
	}
	free(s);
	return 0;
}
