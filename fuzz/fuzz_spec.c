/*
 * fuzz_spec.c - libFuzzer target: arbitrary hook specs against a catalog.
 * Must never crash; a spec that parses must format to a canonical text that
 * parses back to the same set, and a refused spec must leave the output set
 * untouched and an error message that is a terminated string.
 */
#include <stdlib.h>
#include <string.h>

#include "toggle_hooks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"resid_post", "attn_out", "mlp_out", "x.y_2"};
	static const struct toggle_catalog cat = {.type_names = names, .n_types = 4, .n_layers = 40};
	char *spec = malloc(size + 1);
	if (!spec)
		return 0;
	memcpy(spec, data, size);
	spec[size] = '\0';
	struct toggle_set s, back, marker;
	memset(&marker, 0xa5, sizeof(marker));
	s = marker;
	char err[256];
	if (toggle_set_parse(&cat, spec, &s, err, sizeof(err)) == 0) {
		char text[8192];
		int n = toggle_set_format(&cat, &s, text, sizeof(text));
		if (n < 0 || (size_t)n >= sizeof(text))
			abort();
		if (toggle_set_parse(&cat, text, &back, err, sizeof(err)) != 0 ||
		    !toggle_set_equal(&s, &back))
			abort();
	} else if (memcmp(&s, &marker, sizeof(s)) != 0 || strlen(err) >= sizeof(err)) {
		abort();
	}
	free(spec);
	return 0;
}
