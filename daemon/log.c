/* log.c - see log.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

/* Process-wide by nature: one daemon, one stderr. */
static const char *log_ident = "toggled";
static int log_verbose;
static int log_journal; /* stderr is connected to journald: use <N> prefixes */

void log_init(const char *ident, int verbose)
{
	log_ident = ident;
	log_verbose = verbose;
	log_journal = getenv("JOURNAL_STREAM") != NULL;
}

void log_set_verbose(int verbose)
{
	log_verbose = verbose;
}

static const char *level_name(int level)
{
	switch (level) {
	case LOG_LVL_ERR: return "error";
	case LOG_LVL_WARN: return "warning";
	case LOG_LVL_INFO: return "info";
	default: return "debug";
	}
}

__attribute__((format(printf, 3, 0)))
static void log_vwrite(int level, const char *errstr, const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (log_journal) {
		fprintf(stderr, "<%d>%s%s%s\n", level, msg, errstr ? ": " : "", errstr ? errstr : "");
		return;
	}
	char ts[32];
	struct timespec now;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &now);
	localtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ld %s %s: %s%s%s\n", ts, now.tv_nsec / 1000000, log_ident,
		level_name(level), msg, errstr ? ": " : "", errstr ? errstr : "");
}

#define LOG_BODY(level, errstr)                      \
	do {                                         \
		va_list ap;                          \
		va_start(ap, fmt);                   \
		log_vwrite((level), (errstr), fmt, ap); \
		va_end(ap);                          \
	} while (0)

void log_warn(const char *fmt, ...)
{
	const char *e = strerror(errno);
	LOG_BODY(LOG_LVL_WARN, e);
}

void log_warnx(const char *fmt, ...)
{
	LOG_BODY(LOG_LVL_WARN, NULL);
}

void log_info(const char *fmt, ...)
{
	LOG_BODY(LOG_LVL_INFO, NULL);
}

void log_debug(const char *fmt, ...)
{
	if (log_verbose)
		LOG_BODY(LOG_LVL_DEBUG, NULL);
}

void fatal(const char *fmt, ...)
{
	const char *e = strerror(errno);
	LOG_BODY(LOG_LVL_ERR, e);
	exit(1);
}

void fatalx(const char *fmt, ...)
{
	LOG_BODY(LOG_LVL_ERR, NULL);
	exit(1);
}
