/*
 * log.h - toggled's logging: levels, printf formats, stderr only (journald
 * picks it up; under systemd each line carries its syslog priority).
 * fatal() is for start-up only.
 */
#ifndef TD_LOG_H
#define TD_LOG_H

enum log_level { LOG_LVL_ERR = 3, LOG_LVL_WARN = 4, LOG_LVL_INFO = 6, LOG_LVL_DEBUG = 7 };

void log_init(const char *ident, int verbose);
void log_set_verbose(int verbose);
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* appends errno */
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
