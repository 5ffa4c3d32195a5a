/*
 * util.h - the small helpers the daemon, the client library, togglectl and
 * the tests share, written once: the agent-name rule, cleaning untrusted
 * text before it is logged or printed, the millisecond clocks, mkdir -p and
 * the error-buffer printf.  libc only (built into $(B)/libtgutil.a); the
 * agent library (libtoggle) does not link it, so that libtoggle.so exports
 * no util_ symbol and builds on the GPU machine from its own sources.
 */
#ifndef TG_UTIL_H
#define TG_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The name rule of agent names, agent groups and cluster/host names: 1 to
 * max - 1 bytes of [A-Za-z0-9_.-] (ASCII on purpose: isalnum() follows the
 * locale), neither "." nor ".." (they name directories, and an agent name
 * is a state file's stem).  NULL is no name.
 */
bool util_name_ok(const char *s, size_t max);
/* The same rule for the first n bytes of s (a name that ends at a separator). */
bool util_name_ok_len(const char *s, size_t n, size_t max);

/* What util_clean replaces with '?'. */
enum util_clean {
	UTIL_CLEAN_ASCII,   /* everything but printable ASCII (0x20..0x7e): one column per byte */
	UTIL_CLEAN_CONTROL, /* C0 controls and DEL only: UTF-8 text passes */
};

/*
 * Append untrusted text to the string in out (outlen bytes in all), bytes
 * that could forge a log line or drive a terminal replaced by '?', cut to
 * fit; out stays NUL-terminated.  Nothing happens when out is NULL, outlen
 * is 0 or in is NULL.
 */
void util_clean_append(char *out, size_t outlen, const char *in, enum util_clean how);
/* The same into an emptied out; returns out (for a printf argument). */
const char *util_clean(char *out, size_t outlen, const char *in, enum util_clean how);

/* Milliseconds of CLOCK_MONOTONIC (deadlines, intervals) and of CLOCK_REALTIME (timestamps). */
uint64_t util_mono_ms(void);
uint64_t util_unix_ms(void);

/* What util_mkdirs returns. */
enum util_mkdirs_rc {
	UTIL_MKDIRS_OK = 0,
	UTIL_MKDIRS_BADPATH = -1, /* dir empty, or PATH_MAX bytes or more: nothing made */
	UTIL_MKDIRS_FAILED = -2,  /* a mkdir failed: errno, and the path it failed on in at */
};

/*
 * mkdir -p: create each missing component of dir, those before the last
 * with parent_mode and the last with leaf_mode (both less the umask).  A
 * component that exists is left alone, whatever it is: the caller checks
 * the result.  at (atlen bytes, may be NULL) receives the path of a failed
 * mkdir.
 */
enum util_mkdirs_rc util_mkdirs(const char *dir, mode_t parent_mode, mode_t leaf_mode, char *at,
				size_t atlen);

/* snprintf into an error buffer that may be NULL or of size 0 (then nothing). */
void util_seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
