/* testutil.h - small helpers shared by the Check tests. */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* splitmix64: the tests' reproducible random stream (seeded per case). */
static inline uint64_t tu_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A random set of nh (< 32) hooks as a bitmask: empty, full, random, one
 * flip of the previous one, or the previous one again. */
static inline uint32_t tu_pick_set(uint64_t *rng, uint32_t prev, unsigned nh)
{
	uint32_t all = (1u << nh) - 1;
	switch (tu_rng_next(rng) % 6) {
	case 0:
		return 0;
	case 1:
		return all;
	case 2:
	case 3:
		return (uint32_t)tu_rng_next(rng) & all;
	case 4:
		return prev ^ (1u << (tu_rng_next(rng) % nh));
	default:
		return prev;
	}
}

/* Run one suite and exit with its verdict (the body of every test's main). */
static inline int tu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/*
 * Skipped tests are visible: Check has no skip verdict (a test that returns
 * early counts as passed), so a skip prints "SKIP: test: reason" and appends
 * that line to $TG_SKIP_LOG, which `make check` counts and lists at the end
 * (an append of one short line: tests run in forked children).  A skip for
 * want of root fails instead when $TG_REQUIRE_ROOT_TESTS is 1 (CI, as root).
 */
enum tu_skip_kind { TU_SKIP_ENV, TU_SKIP_ROOT };

__attribute__((format(printf, 3, 4)))
static inline void tu_skip(enum tu_skip_kind kind, const char *fn, const char *fmt, ...)
{
	char why[256], line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	size_t n = strlen(fn); /* Check names a test's function NAME_fn */
	if (n > 3 && strcmp(fn + n - 3, "_fn") == 0)
		n -= 3;
	snprintf(line, sizeof(line), "%.*s: %s\n", (int)n, fn, why);
	const char *req = getenv("TG_REQUIRE_ROOT_TESTS");
	if (kind == TU_SKIP_ROOT && req && strcmp(req, "1") == 0)
		ck_abort_msg("not skipped (TG_REQUIRE_ROOT_TESTS=1): %s", line);
	fprintf(stderr, "SKIP: %s", line);
	const char *log = getenv("TG_SKIP_LOG");
	if (log && *log) {
		int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, line, strlen(line)) != (ssize_t)strlen(line))
			ck_abort_msg("cannot record the skip in %s", log);
		close(fd);
	}
}

/* Skip the rest of the current test, visibly. */
#define TU_SKIP(kind, ...)                                \
	do {                                              \
		tu_skip((kind), __func__, __VA_ARGS__);   \
		return;                                   \
	} while (0)

#endif
