/*
 * gzipenc.c - gzip for /metrics: the Prometheus text grows with the agents
 * (27 KB at 3 agents, 601 KB at 256, every scrape) and compresses about
 * tenfold; Prometheus asks with "Accept-Encoding: gzip".  zlib does the
 * work; this file only reads the header and wraps one deflate call.
 */
#include "gzipenc.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define GZ_MAX_HEADER 1024

/* The q-value of one "coding;q=V" element: 0 to 1000, or -1 if malformed. */
static int gz_qvalue(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (p == end)
		return 1000;
	if (*p != ';')
		return -1;
	p++;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (end - p < 3 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=')
		return -1;
	p += 2;
	int q = 0, scale = 1000;
	if (*p == '1')
		q = 1000;
	else if (*p != '0')
		return -1;
	p++;
	if (p < end && *p == '.') {
		p++;
		for (int d = 0; d < 3 && p < end && *p >= '0' && *p <= '9'; d++, p++) {
			scale /= 10;
			q += (*p - '0') * scale;
		}
	}
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p == end && q <= 1000 ? q : -1;
}

bool td_gzip_accepted(const char *v)
{
	if (!v || strnlen(v, GZ_MAX_HEADER + 1) > GZ_MAX_HEADER)
		return false;
	int gzip = -1, star = -1; /* their q-values, -1: not listed */
	for (const char *p = v; *p;) {
		const char *end = p + strcspn(p, ",");
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		size_t n = strcspn(p, ";, \t");
		if (p + n > end)
			n = (size_t)(end - p);
		int q = gz_qvalue(p + n, end);
		if (q < 0)
			return false;
		if ((n == 4 && !strncasecmp(p, "gzip", 4)) || (n == 6 && !strncasecmp(p, "x-gzip", 6)))
			gzip = q;
		else if (n == 1 && *p == '*')
			star = q;
		p = *end ? end + 1 : end;
	}
	return gzip > 0 || (gzip < 0 && star > 0);
}

int td_gzip(const char *in, size_t len, char **out, size_t *outlen)
{
	if (len > UINT_MAX / 2) /* zlib counts in uInt */
		return -1;
	z_stream z;
	memset(&z, 0, sizeof(z));
	/* 15 + 16: a gzip header and trailer around the deflate stream */
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	uLong cap = deflateBound(&z, (uLong)len);
	char *buf = malloc(cap);
	if (!buf) {
		deflateEnd(&z);
		return -1;
	}
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)len;
	z.next_out = (Bytef *)buf;
	z.avail_out = (uInt)cap;
	int rc = deflate(&z, Z_FINISH);
	size_t n = z.total_out;
	deflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(buf);
		return -1;
	}
	*out = buf;
	*outlen = n;
	return 0;
}
