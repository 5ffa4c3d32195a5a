/*
 * check_util.c - the shared helpers (util/util.c): the agent-name rule,
 * cleaning untrusted text, the millisecond clocks, mkdir -p and the
 * error-buffer printf, with the edge cases the copies they replace handled
 * (daemon/agents.c, store.c, main.c, cluster_key.c, paths.c, etcd.c,
 * client/tgclient.c, ctl_output.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "util.h"

/* ---- the name rule --------------------------------------------------------- */

START_TEST(test_name_rule)
{
	ck_assert(util_name_ok("worker-0", 64));
	ck_assert(util_name_ok("gpu-node_07.rack2", 64));
	ck_assert(util_name_ok("a", 64));
	ck_assert(util_name_ok(".a", 64));
	ck_assert(util_name_ok("...", 64)); /* only "." and ".." name directories */
	ck_assert(!util_name_ok(NULL, 64));
	ck_assert(!util_name_ok("", 64));
	ck_assert(!util_name_ok(".", 64));
	ck_assert(!util_name_ok("..", 64));
	ck_assert(!util_name_ok("a/b", 64));
	ck_assert(!util_name_ok("../x", 64));
	ck_assert(!util_name_ok("a b", 64));
	ck_assert(!util_name_ok("a@1", 64));
	ck_assert(!util_name_ok("caf\xc3\xa9", 64));
	ck_assert(!util_name_ok("a\nb", 64));
}
END_TEST

/* Every byte value alone and inside a name: only [A-Za-z0-9_.-] passes. */
START_TEST(test_name_bytes)
{
	static const char allowed[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.";
	for (int b = 1; b < 256; b++) {
		char mid[4] = {'x', (char)b, 'y', '\0'};
		bool want = strchr(allowed, b) != NULL;
		ck_assert_msg(util_name_ok(mid, 64) == want, "byte 0x%02x inside a name: %d", b, !want);
		ck_assert_msg(util_name_ok_len(mid, 3, 64) == want, "byte 0x%02x (len)", b);
	}
}
END_TEST

/* 1 to max - 1 bytes; a longer string is not read past max. */
START_TEST(test_name_length)
{
	char name[80];
	memset(name, 'a', sizeof(name));
	name[63] = '\0';
	ck_assert(util_name_ok(name, 64));
	name[63] = 'a';
	name[64] = '\0';
	ck_assert(!util_name_ok(name, 64));
	ck_assert(util_name_ok(name, 65));
	name[1] = '\0';
	ck_assert(!util_name_ok(name, 1));
	ck_assert(util_name_ok(name, 2));
}
END_TEST

/* A name that ends at a separator (the store's NAME@UID keys). */
START_TEST(test_name_prefix)
{
	ck_assert(util_name_ok_len("alpha@1000", 5, 64));
	ck_assert(!util_name_ok_len("alpha@1000", 6, 64));
	ck_assert(!util_name_ok_len("alpha@1000", 0, 64));
	ck_assert(!util_name_ok_len(".@1", 1, 64));
	ck_assert(!util_name_ok_len("..@1", 2, 64));
	ck_assert(util_name_ok_len("...@1", 3, 64));
	ck_assert(!util_name_ok_len("alpha", 5, 5));
	ck_assert(util_name_ok_len("alpha", 5, 6));
	ck_assert(!util_name_ok_len(NULL, 3, 64));
}
END_TEST

/* ---- cleaning -------------------------------------------------------------- */

START_TEST(test_clean_ascii)
{
	char out[64];
	ck_assert_str_eq(util_clean(out, sizeof(out), "ok text ~", UTIL_CLEAN_ASCII), "ok text ~");
	ck_assert_str_eq(util_clean(out, sizeof(out), "a\x1b[2Jb\x7f\x01\t\n", UTIL_CLEAN_ASCII),
			 "a?[2Jb????");
	ck_assert_str_eq(util_clean(out, sizeof(out), "caf\xc3\xa9 \xff", UTIL_CLEAN_ASCII),
			 "caf?? ?");
	ck_assert_str_eq(util_clean(out, sizeof(out), "", UTIL_CLEAN_ASCII), "");
	ck_assert_str_eq(util_clean(out, sizeof(out), NULL, UTIL_CLEAN_ASCII), "");
	/* every byte: exactly 0x20..0x7e passes */
	for (int b = 1; b < 256; b++) {
		char in[2] = {(char)b, '\0'};
		util_clean(out, sizeof(out), in, UTIL_CLEAN_ASCII);
		ck_assert_msg(out[0] == (b >= 0x20 && b <= 0x7e ? (char)b : '?'), "byte 0x%02x", b);
		ck_assert(out[1] == '\0');
	}
}
END_TEST

START_TEST(test_clean_control)
{
	char out[64];
	ck_assert_str_eq(util_clean(out, sizeof(out), "caf\xc3\xa9\x1b[31m\x7f", UTIL_CLEAN_CONTROL),
			 "caf\xc3\xa9?[31m?");
	for (int b = 1; b < 256; b++) {
		char in[2] = {(char)b, '\0'};
		util_clean(out, sizeof(out), in, UTIL_CLEAN_CONTROL);
		ck_assert_msg(out[0] == (b < 0x20 || b == 0x7f ? '?' : (char)b), "byte 0x%02x", b);
	}
}
END_TEST

/* Cut to fit, always terminated; appends after what is there; NULLs and 0 do nothing. */
START_TEST(test_clean_bounds)
{
	char out[8];
	ck_assert_str_eq(util_clean(out, 4, "abcdef", UTIL_CLEAN_ASCII), "abc");
	ck_assert_str_eq(util_clean(out, 1, "abcdef", UTIL_CLEAN_ASCII), "");
	strcpy(out, "ab");
	util_clean_append(out, sizeof(out), "c\x01" "def", UTIL_CLEAN_CONTROL);
	ck_assert_str_eq(out, "abc?def");
	util_clean_append(out, sizeof(out), "zz", UTIL_CLEAN_CONTROL); /* full: unchanged */
	ck_assert_str_eq(out, "abc?def");
	memset(out, 'x', sizeof(out)); /* no NUL at all: terminated at the end */
	util_clean_append(out, sizeof(out), "q", UTIL_CLEAN_ASCII);
	ck_assert_int_eq(out[sizeof(out) - 1], '\0');
	ck_assert_uint_eq(strlen(out), sizeof(out) - 1);
	strcpy(out, "keep");
	util_clean_append(out, sizeof(out), NULL, UTIL_CLEAN_ASCII);
	util_clean_append(out, 0, "zz", UTIL_CLEAN_ASCII);
	util_clean_append(NULL, 8, "zz", UTIL_CLEAN_ASCII);
	ck_assert_str_eq(out, "keep");
	ck_assert_ptr_null(util_clean(NULL, 8, "zz", UTIL_CLEAN_ASCII));
}
END_TEST

/* ---- clocks ---------------------------------------------------------------- */

START_TEST(test_clocks)
{
	uint64_t m0 = util_mono_ms();
	struct timespec nap = {0, 30 * 1000000L};
	while (nanosleep(&nap, &nap) != 0 && errno == EINTR)
		;
	uint64_t m1 = util_mono_ms();
	ck_assert_msg(m1 - m0 >= 30 && m1 - m0 < 10000, "30 ms slept, %llu ms measured",
		      (unsigned long long)(m1 - m0));
	struct timespec rt;
	ck_assert_int_eq(clock_gettime(CLOCK_REALTIME, &rt), 0);
	uint64_t want = (uint64_t)rt.tv_sec * 1000 + (uint64_t)rt.tv_nsec / 1000000;
	uint64_t u = util_unix_ms();
	ck_assert_msg(u >= want && u - want < 2000, "unix ms %llu, clock_gettime %llu",
		      (unsigned long long)u, (unsigned long long)want);
}
END_TEST

/* ---- mkdir -p -------------------------------------------------------------- */

static char tmpdir[64];

static void tmp_setup(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/check_util.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)st, (void)type, (void)f;
	return remove(path);
}

static void tmp_cleanup(void)
{
	ck_assert_int_eq(nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static mode_t mode_of(const char *path)
{
	struct stat st;
	ck_assert_msg(lstat(path, &st) == 0, "%s: %s", path, strerror(errno));
	ck_assert_msg(S_ISDIR(st.st_mode), "%s is not a directory", path);
	return st.st_mode & 07777;
}

START_TEST(test_mkdirs)
{
	tmp_setup();
	mode_t old = umask(0);
	char p[256], at[256];
	snprintf(p, sizeof(p), "%s/a/b/c", tmpdir);
	ck_assert_int_eq(util_mkdirs(p, 0751, 0700, at, sizeof(at)), UTIL_MKDIRS_OK);
	ck_assert_uint_eq(mode_of(p), 0700);
	snprintf(p, sizeof(p), "%s/a/b", tmpdir);
	ck_assert_uint_eq(mode_of(p), 0751);
	snprintf(p, sizeof(p), "%s/a", tmpdir);
	ck_assert_uint_eq(mode_of(p), 0751);
	/* all there already: fine, and nothing changes mode */
	snprintf(p, sizeof(p), "%s/a/b/c", tmpdir);
	ck_assert_int_eq(util_mkdirs(p, 0700, 0755, at, sizeof(at)), UTIL_MKDIRS_OK);
	ck_assert_uint_eq(mode_of(p), 0700);
	/* a trailing slash and doubled slashes (the leaf is made as a parent, as before) */
	snprintf(p, sizeof(p), "%s//d/", tmpdir);
	ck_assert_int_eq(util_mkdirs(p, 0751, 0700, at, sizeof(at)), UTIL_MKDIRS_OK);
	snprintf(p, sizeof(p), "%s/d", tmpdir);
	ck_assert_uint_eq(mode_of(p), 0751);
	ck_assert_int_eq(util_mkdirs("/", 0755, 0755, at, sizeof(at)), UTIL_MKDIRS_OK);
	umask(old);
	tmp_cleanup();
}
END_TEST

START_TEST(test_mkdirs_fails)
{
	tmp_setup();
	char p[256], at[512], want[256];
	snprintf(p, sizeof(p), "%s/file", tmpdir);
	int fd = open(p, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	/* a file where a parent should be: the failing prefix is named */
	snprintf(p, sizeof(p), "%s/file/x/y", tmpdir);
	errno = 0;
	ck_assert_int_eq(util_mkdirs(p, 0755, 0700, at, sizeof(at)), UTIL_MKDIRS_FAILED);
	ck_assert_int_eq(errno, ENOTDIR);
	snprintf(want, sizeof(want), "%s/file/x", tmpdir);
	ck_assert_str_eq(at, want);
	/* a file as the leaf: left alone (EEXIST), the caller checks what is there */
	snprintf(p, sizeof(p), "%s/file", tmpdir);
	ck_assert_int_eq(util_mkdirs(p, 0755, 0700, NULL, 0), UTIL_MKDIRS_OK);
	/* a component longer than NAME_MAX is mkdir's ENAMETOOLONG, not a bad path */
	char longc[NAME_MAX + 2];
	memset(longc, 'n', sizeof(longc) - 1);
	longc[sizeof(longc) - 1] = '\0';
	char lp[512];
	snprintf(lp, sizeof(lp), "%s/%s", tmpdir, longc);
	ck_assert_int_eq(util_mkdirs(lp, 0755, 0700, at, sizeof(at)), UTIL_MKDIRS_FAILED);
	ck_assert_int_eq(errno, ENAMETOOLONG);
	ck_assert_str_eq(at, lp);
	/* the path itself: empty, or PATH_MAX bytes or more */
	ck_assert_int_eq(util_mkdirs("", 0755, 0700, at, sizeof(at)), UTIL_MKDIRS_BADPATH);
	char *huge = malloc(PATH_MAX + 1);
	ck_assert_ptr_nonnull(huge);
	memset(huge, 'a', PATH_MAX);
	huge[PATH_MAX] = '\0';
	ck_assert_int_eq(util_mkdirs(huge, 0755, 0700, at, sizeof(at)), UTIL_MKDIRS_BADPATH);
	huge[PATH_MAX - 1] = '\0'; /* one byte shorter is a path: mkdir refuses the component */
	ck_assert_int_eq(util_mkdirs(huge, 0755, 0700, NULL, 0), UTIL_MKDIRS_FAILED);
	ck_assert_int_eq(errno, ENAMETOOLONG);
	free(huge);
	/* at too small: cut, terminated */
	snprintf(p, sizeof(p), "%s/file/x", tmpdir);
	char small[8];
	ck_assert_int_eq(util_mkdirs(p, 0755, 0700, small, sizeof(small)), UTIL_MKDIRS_FAILED);
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
	tmp_cleanup();
}
END_TEST

/* ---- the error buffer ------------------------------------------------------ */

START_TEST(test_seterr)
{
	char err[8];
	util_seterr(err, sizeof(err), "%s %d", "code", 12345);
	ck_assert_str_eq(err, "code 12");
	util_seterr(err, sizeof(err), "%s", "");
	ck_assert_str_eq(err, "");
	strcpy(err, "keep");
	util_seterr(err, 0, "x");
	util_seterr(NULL, 8, "x");
	ck_assert_str_eq(err, "keep");
}
END_TEST

static Suite *util_suite(void)
{
	Suite *s = suite_create("util");
	TCase *tc = tcase_create("names");
	tcase_add_test(tc, test_name_rule);
	tcase_add_test(tc, test_name_bytes);
	tcase_add_test(tc, test_name_length);
	tcase_add_test(tc, test_name_prefix);
	suite_add_tcase(s, tc);
	tc = tcase_create("clean");
	tcase_add_test(tc, test_clean_ascii);
	tcase_add_test(tc, test_clean_control);
	tcase_add_test(tc, test_clean_bounds);
	suite_add_tcase(s, tc);
	tc = tcase_create("misc");
	tcase_add_test(tc, test_clocks);
	tcase_add_test(tc, test_mkdirs);
	tcase_add_test(tc, test_mkdirs_fails);
	tcase_add_test(tc, test_seterr);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(util_suite());
}
