/*
 * fuzz_owed.c - libFuzzer target: a recording note as toggled reads it at
 * an agent's join (td_owed_parse, daemon/record_owed.c): whatever the
 * bytes, it reads only them and either refuses them or gives a nonzero
 * session and a printable spec, NUL-terminated within its buffer, that
 * encodes back to the same bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toggled.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1); /* exactly size bytes: ASan sees an overread */
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	char spec[TGP_MAX_SPEC + 33];
	uint64_t session = 0;
	int rc = td_owed_parse(copy, size, &session, spec, sizeof(spec));
	if (rc == 1) {
		size_t k = strlen(spec);
		if (session == 0 || k == 0 || k >= sizeof(spec))
			abort();
		for (size_t i = 0; i < k; i++)
			if ((unsigned char)spec[i] < 0x20 || (unsigned char)spec[i] >= 0x7f)
				abort();
		char again[TGP_MAX_SPEC + 64];
		int n = snprintf(again, sizeof(again), "%llu %s\n", (unsigned long long)session, spec);
		if (n < 0 || (size_t)n != size || memcmp(again, copy, size) != 0)
			abort(); /* a note is exactly what td_owed_note writes */
	} else if (rc != -1) {
		abort();
	}
	free(copy);
	return 0;
}
