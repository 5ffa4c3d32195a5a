/* gzipenc.h - gzip for /metrics when the scraper asks for it (metrics.c). */
#ifndef TD_GZIPENC_H
#define TD_GZIPENC_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Does an Accept-Encoding value (NULL: none) accept gzip?  Yes for "gzip",
 * "x-gzip" or "*" with a q-value above 0 (RFC 9110 12.5.3), unless gzip is
 * listed with q=0.  A value over 1024 bytes, or a malformed one, is no.
 */
bool td_gzip_accepted(const char *accept_encoding);

/* in[0..len) gzipped into a malloc'ed *out, *outlen bytes: 0, or -1 (no memory). */
int td_gzip(const char *in, size_t len, char **out, size_t *outlen);

#endif
