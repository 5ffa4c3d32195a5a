/*
 * check_version.c - the version is written once, in
 * libtoggle/include/toggle_version.h; toggled, togglectl, toggle.h and the
 * Makefile take it from there.  What cannot be generated from it is read
 * here and must say the same: the Python package (pyproject.toml, _lib.py's
 * API version, __init__.py's __version__), the man pages' title lines, and
 * the versions docs/cli.md and the CLI's golden output show.  Run from the
 * top of the source tree (make check does).
 */
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_version.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f, "%s: %s (run from the top of the source tree)", path, strerror(errno));
	char *buf = malloc(1 << 20);
	ck_assert_ptr_nonnull(buf);
	size_t n = fread(buf, 1, (1 << 20) - 1, f);
	ck_assert_msg(!ferror(f) && feof(f), "%s: read error or larger than 1 MiB", path);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

/*
 * Every match of pattern (POSIX extended; group 1 is the version) in path
 * must be want; returns how many there were.
 */
static int all_say(const char *path, const char *pattern, const char *want)
{
	regex_t re;
	ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE), 0);
	char *text = slurp(path);
	int n = 0;
	regmatch_t m[2];
	for (const char *p = text; regexec(&re, p, 2, m, p == text ? 0 : REG_NOTBOL) == 0;
	     p += m[0].rm_eo, n++) {
		int len = (int)(m[1].rm_eo - m[1].rm_so);
		ck_assert_msg(len == (int)strlen(want) && memcmp(p + m[1].rm_so, want, (size_t)len) == 0,
			      "%s says version %.*s where toggle_version.h says %s", path, len,
			      p + m[1].rm_so, want);
	}
	regfree(&re);
	free(text);
	return n;
}

START_TEST(test_string_is_the_numbers)
{
	char want[32];
	snprintf(want, sizeof(want), "%d.%d.%d", TOGGLE_VERSION_MAJOR, TOGGLE_VERSION_MINOR,
		 TOGGLE_VERSION_PATCH);
	ck_assert_str_eq(TOGGLE_VERSION_STRING, want);
}
END_TEST

START_TEST(test_python)
{
	char num[16];
	ck_assert_int_eq(all_say("python/pyproject.toml", "^version = \"([^\"]*)\"",
				 TOGGLE_VERSION_STRING), 1);
	snprintf(num, sizeof(num), "%d", TOGGLE_VERSION_MAJOR);
	ck_assert_int_eq(all_say("python/graphtoggle/_lib.py", "^API_MAJOR = ([0-9]+)", num), 1);
	snprintf(num, sizeof(num), "%d", TOGGLE_VERSION_MINOR);
	ck_assert_int_eq(all_say("python/graphtoggle/_lib.py", "^API_MINOR = ([0-9]+)", num), 1);
	snprintf(num, sizeof(num), "%d", TOGGLE_VERSION_PATCH);
	ck_assert_int_eq(all_say("python/graphtoggle/__init__.py",
				 "^__version__ = \"%d\\.%d\\.([0-9]+)\"", num), 1);
}
END_TEST

START_TEST(test_man_pages)
{
	static const char *const pages[] = {"man/libtoggle.3", "man/togglectl.1", "man/toggled.8"};
	char want[16];
	snprintf(want, sizeof(want), "%d.%d", TOGGLE_VERSION_MAJOR, TOGGLE_VERSION_MINOR);
	for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++)
		ck_assert_int_eq(all_say(pages[i], "^\\.TH .*\"graphtoggle ([^\"]*)\"", want), 1);
}
END_TEST

/* What toggled and togglectl print, as the docs and the golden files show it. */
START_TEST(test_shown_versions)
{
	static const char *const files[] = {"docs/cli.md", "tests/cli/golden/status.txt"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		ck_assert_int_gt(all_say(files[i], "toggle[a-z]* ([0-9]+\\.[0-9]+\\.[0-9]+)",
					 TOGGLE_VERSION_STRING), 0);
	ck_assert_int_eq(all_say("docs/cli.md", "\"daemon_version\": \"([^\"]*)\"",
				 TOGGLE_VERSION_STRING), 1);
}
END_TEST

START_TEST(test_library_reports_it)
{
	ck_assert_uint_eq(toggle_version(),
			  ((unsigned)TOGGLE_VERSION_MAJOR << 16) | TOGGLE_VERSION_MINOR);
}
END_TEST

static Suite *version_suite(void)
{
	Suite *s = suite_create("version");
	TCase *tc = tcase_create("one place");
	tcase_add_test(tc, test_string_is_the_numbers);
	tcase_add_test(tc, test_python);
	tcase_add_test(tc, test_man_pages);
	tcase_add_test(tc, test_shown_versions);
	tcase_add_test(tc, test_library_reports_it);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(version_suite());
}
