/*
 * util.c - the shared helpers of util.h.  Every input here may be hostile
 * (names from the socket or from etcd, text from files and from peers):
 * lengths are bounded before anything is copied.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

static bool util_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-' || c == '.';
}

bool util_name_ok_len(const char *s, size_t n, size_t max)
{
	if (!s || n == 0 || n >= max || (n == 1 && s[0] == '.') ||
	    (n == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!util_name_char(s[i]))
			return false;
	return true;
}

bool util_name_ok(const char *s, size_t max)
{
	/* strnlen: a name of max bytes or more fails without reading further. */
	return s && util_name_ok_len(s, strnlen(s, max), max);
}

void util_clean_append(char *out, size_t outlen, const char *in, enum util_clean how)
{
	if (!out || outlen == 0 || !in)
		return;
	size_t n = strnlen(out, outlen - 1);
	for (; *in && n + 1 < outlen; in++, n++) {
		unsigned char c = (unsigned char)*in;
		bool bad = c < 0x20 || c == 0x7f || (how == UTIL_CLEAN_ASCII && c > 0x7f);
		out[n] = bad ? '?' : (char)c;
	}
	out[n] = '\0';
}

const char *util_clean(char *out, size_t outlen, const char *in, enum util_clean how)
{
	if (out && outlen)
		out[0] = '\0';
	util_clean_append(out, outlen, in, how);
	return out;
}

static uint64_t util_clock_ms(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t util_mono_ms(void)
{
	return util_clock_ms(CLOCK_MONOTONIC);
}

uint64_t util_unix_ms(void)
{
	return util_clock_ms(CLOCK_REALTIME);
}

enum util_mkdirs_rc util_mkdirs(const char *dir, mode_t parent_mode, mode_t leaf_mode, char *at,
				size_t atlen)
{
	char buf[PATH_MAX];
	size_t len = strnlen(dir, sizeof(buf));
	if (len == 0 || len >= sizeof(buf))
		return UTIL_MKDIRS_BADPATH;
	memcpy(buf, dir, len + 1);
	/* Each prefix that ends before a '/', then the whole path (buf + 1: "/" is there). */
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(buf, c ? parent_mode : leaf_mode) != 0 && errno != EEXIST) {
			int e = errno;
			if (at && atlen)
				snprintf(at, atlen, "%s", buf);
			errno = e;
			return UTIL_MKDIRS_FAILED;
		}
		*p = c;
		if (!c)
			return UTIL_MKDIRS_OK;
	}
}

void util_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || errlen == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}
