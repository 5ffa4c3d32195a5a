/*
 * fuzz_gzip.c - libFuzzer target: arbitrary Accept-Encoding values (what any
 * scraper of /metrics sends) through td_gzip_accepted, and the bytes through
 * td_gzip.  Must never crash; a value over 1024 bytes is never accepted, and
 * what td_gzip writes inflates back to exactly its input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "gzipenc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *v = malloc(size + 1);
	if (!v)
		return 0;
	memcpy(v, data, size);
	v[size] = '\0';
	if (td_gzip_accepted(v) && strlen(v) > 1024)
		abort();
	char *z = NULL, *back = malloc(size + 1);
	size_t zlen = 0;
	if (back && td_gzip(v, size, &z, &zlen) == 0) {
		z_stream s;
		memset(&s, 0, sizeof(s));
		if (inflateInit2(&s, 15 + 16) != Z_OK)
			abort();
		s.next_in = (Bytef *)z;
		s.avail_in = (uInt)zlen;
		s.next_out = (Bytef *)back;
		s.avail_out = (uInt)size + 1;
		if (inflate(&s, Z_FINISH) != Z_STREAM_END || s.total_out != size ||
		    memcmp(back, v, size) != 0)
			abort();
		inflateEnd(&s);
		free(z);
	}
	free(back);
	free(v);
	return 0;
}
