/*
 * check_store.c - tests of the daemon's persisted desired state
 * (daemon/store.c) and of its write permission rule (daemon/auth.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "toggled.h"

#define MAX_AGENTS 4096 /* TD_MAX_STORED_AGENTS in store.c */
#define NO_SUCH_PID 99999999u /* above any pid_max */

/* ---- helpers ------------------------------------------------------------- */

static char tdir[64];

static void make_tmpdir(void)
{
	snprintf(tdir, sizeof(tdir), "/tmp/check_store.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	chmod(path, 0700);
	return remove(path);
}

static void remove_tmpdir(void)
{
	nftw(tdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* tdir/<name> into buf. */
static const char *in_dir(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tdir, name);
	return buf;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
}

/* The whole file, NUL-terminated; freed by the caller. */
static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	int c;
	while ((c = getc(f)) != EOF)
		putc(c, m);
	fclose(f);
	fclose(m);
	return buf;
}

static void write_state(const char *text)
{
	char p[128];
	write_text(in_dir(p, sizeof(p), "state.json"), text);
}

static char *read_state(void)
{
	char p[128];
	return read_text(in_dir(p, sizeof(p), "state.json"));
}

/* A string of n copies of c; freed by the caller. */
static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void set_plans2(struct td_desired *dd, int64_t s0, const char *p0, int64_t s1,
		       const char *p1)
{
	int64_t steps[2] = { s0, s1 };
	char a[64], b[64];
	char *specs[2] = { a, b };
	snprintf(a, sizeof(a), "%s", p0);
	snprintf(b, sizeof(b), "%s", p1);
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, 2), 0);
}

/* A store of three names: standing set with plans, standing NULL with plans, standing only. */
static void fill_store(struct td_store *s)
{
	struct td_desired *a = td_store_get(s, "alpha", true);
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(td_desired_set_standing(a, "resid_post:0-3,attn_out:*"), 0);
	set_plans2(a, 5, "resid_post:1", 7, "");
	struct td_desired *b = td_store_get(s, "beta", true);
	ck_assert_ptr_nonnull(b);
	set_plans2(b, 0, "mlp_out:2", 123456789012LL, "resid_post:*");
	struct td_desired *g = td_store_get(s, "gamma \"q\" \xc3\xa9", true);
	ck_assert_ptr_nonnull(g);
	ck_assert_int_eq(td_desired_set_standing(g, ""), 0);
	s->dirty = true;
}

/* ---- store: round trip --------------------------------------------------- */

START_TEST(test_roundtrip)
{
	struct td_store s = { 0 }, r = { 0 };
	char err[256] = "";
	make_tmpdir();
	fill_store(&s);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!s.dirty);
	ck_assert_uint_eq(s.saves, 1);
	ck_assert_uint_eq(s.save_errors, 0);

	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 3);
	ck_assert(!r.dirty);
	struct td_desired *a = td_store_get(&r, "alpha", false);
	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(a->standing, "resid_post:0-3,attn_out:*");
	ck_assert_uint_eq(a->n_plans, 2);
	ck_assert_int_eq(a->plan_steps[0], 5);
	ck_assert_str_eq(a->plan_specs[0], "resid_post:1");
	ck_assert_int_eq(a->plan_steps[1], 7);
	ck_assert_str_eq(a->plan_specs[1], "");

	struct td_desired *b = td_store_get(&r, "beta", false);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_null(b->standing); /* NULL survives as NULL, not as "" */
	ck_assert_uint_eq(b->n_plans, 2);
	ck_assert_int_eq(b->plan_steps[1], 123456789012LL);
	ck_assert_str_eq(b->plan_specs[1], "resid_post:*");

	struct td_desired *g = td_store_get(&r, "gamma \"q\" \xc3\xa9", false);
	ck_assert_ptr_nonnull(g);
	ck_assert_ptr_nonnull(g->standing);
	ck_assert_str_eq(g->standing, ""); /* "" (nothing enabled) differs from none set */
	ck_assert_uint_eq(g->n_plans, 0);
	ck_assert_ptr_null(td_store_get(&r, "delta", false));

	/* Saving what was loaded gives the same bytes: the file is stable. */
	char *first = read_state();
	ck_assert_int_eq(td_store_save(&r, tdir), 0);
	char *second = read_state();
	ck_assert_str_eq(first, second);
	free(first);
	free(second);
	td_store_free(&s);
	td_store_free(&r);
	ck_assert_ptr_null(r.v);
	ck_assert_uint_eq(r.n, 0);
	remove_tmpdir();
}
END_TEST

START_TEST(test_file_shape)
{
	struct td_store s = { 0 };
	char p[128];
	make_tmpdir();
	fill_store(&s);
	/* A stale tmp with a loose mode must not lend it to the new file. */
	write_text(in_dir(p, sizeof(p), "state.json.tmp"), "junk");
	ck_assert_int_eq(chmod(p, 0644), 0);
	mode_t old = umask(0);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	umask(old);

	struct stat st;
	ck_assert_int_eq(stat(in_dir(p, sizeof(p), "state.json"), &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_int_eq(stat(in_dir(p, sizeof(p), "state.json.tmp"), &st), -1);
	ck_assert_int_eq(errno, ENOENT);

	json_error_t jerr;
	json_t *root = json_load_file(in_dir(p, sizeof(p), "state.json"), 0, &jerr);
	ck_assert_msg(root != NULL, "saved file is not JSON: %s", jerr.text);
	ck_assert_int_eq(json_integer_value(json_object_get(root, "format")), 1);
	json_t *agents = json_object_get(root, "agents");
	ck_assert_uint_eq(json_object_size(agents), 3);
	json_t *beta = json_object_get(agents, "beta");
	ck_assert_ptr_null(json_object_get(beta, "enabled")); /* omitted when NULL */
	json_t *plans = json_object_get(beta, "plans");
	ck_assert_uint_eq(json_array_size(plans), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(plans, 0), "step")), 0);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(plans, 0), "hooks")),
			 "mlp_out:2");
	json_decref(root);

	/* Sorted keys and indentation: readable and stable. */
	char *text = read_state();
	ck_assert_ptr_nonnull(strstr(text, "\n  \"agents\": {\n    \"alpha\": {"));
	ck_assert(strstr(text, "\"agents\"") < strstr(text, "\"format\""));
	ck_assert_int_eq(text[strlen(text) - 1], '\n');
	free(text);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* ---- store: loading ------------------------------------------------------ */

START_TEST(test_missing_file_is_empty)
{
	struct td_store s = { 0 };
	char err[256] = "", p[128];
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_ptr_null(td_store_get(&s, "alpha", false));

	/* The directory is created, parents included. */
	in_dir(p, sizeof(p), "a/b/c");
	mode_t old = umask(022);
	ck_assert_int_eq(td_store_load(&s, p, err, sizeof(err)), 0);
	umask(old);
	struct stat st;
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0750);
	ck_assert_uint_eq(s.n, 0);
	/* ...and a save into it works. */
	ck_assert_ptr_nonnull(td_store_get(&s, "x", true));
	ck_assert_int_eq(td_store_save(&s, p), 0);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

START_TEST(test_uncreatable_dir)
{
	struct td_store s = { 0 };
	char err[256] = "", p[128], d[160];
	make_tmpdir();
	write_text(in_dir(p, sizeof(p), "file"), "x");
	snprintf(d, sizeof(d), "%s/sub", p);
	ck_assert_int_eq(td_store_load(&s, d, err, sizeof(err)), TOGGLE_EIO);
	ck_assert_msg(strstr(err, "cannot create state directory") && strstr(err, p),
		      "unclear error: %s", err);
	/* A state "directory" that is a file. */
	ck_assert_int_eq(td_store_load(&s, p, err, sizeof(err)), TOGGLE_EIO);
	ck_assert_msg(strstr(err, "not a directory"), "unclear error: %s", err);

	/* Saving there fails cleanly too. */
	ck_assert_ptr_nonnull(td_store_get(&s, "x", true));
	errno = 0;
	ck_assert_int_eq(td_store_save(&s, d), TOGGLE_EIO);
	ck_assert_int_eq(errno, ENOTDIR);
	ck_assert_uint_eq(s.save_errors, 1);
	ck_assert_uint_eq(s.saves, 0);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

START_TEST(test_corrupt_json)
{
	struct td_store s = { 0 };
	char err[256] = "";
	make_tmpdir();
	write_state("{\"format\": 1,\n  \"agents\": {,}}\n");
	ck_assert_ptr_nonnull(td_store_get(&s, "stale", true)); /* must be gone afterwards */
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_ptr_null(td_store_get(&s, "stale", false));
	ck_assert_msg(strstr(err, "state.json") && strstr(err, tdir), "no file in: %s", err);
	ck_assert_msg(strstr(err, "line 2"), "no line in: %s", err);
	ck_assert_msg(strstr(err, "column"), "no column in: %s", err);

	write_state("");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	write_state("{\"format\": 1, \"agents\": {}} trailing");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	/* Valid to the end: accepted. */
	write_state("{\"format\": 1, \"agents\": {}}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 0);

	/* Not a regular file. */
	char p[128];
	unlink(in_dir(p, sizeof(p), "state.json"));
	ck_assert_int_eq(mkfifo(p, 0600), 0);
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "not a regular file"), "unclear error: %s", err);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* Documents that break the schema; each must be refused naming what is wrong. */
static const struct {
	const char *json, *needle;
} bad_docs[] = {
	{ "[]", "top level" },
	{ "{\"agents\": {}}", "format" },
	{ "{\"format\": 2, \"agents\": {}}", "format" },
	{ "{\"format\": \"1\", \"agents\": {}}", "format" },
	{ "{\"format\": 1}", "agents" },
	{ "{\"format\": 1, \"agents\": []}", "agents" },
	{ "{\"format\": 1, \"agents\": {}, \"extra\": 0}", "\"extra\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": 1}}", "agents.\"a\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"enabled\": 1}}}", "\"enabled\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"enabled\": null}}}", "\"enabled\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"enabled\": \"x\\u0000y\"}}}", "NUL" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"color\": \"x\"}}}", "\"color\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": {}}}}", "\"plans\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [1]}}}", "plans[0]" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"step\": 1, \"hooks\": \"\"},"
	  "{\"step\": -1, \"hooks\": \"x\"}]}}}", "plans[1]" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"step\": 1.5, \"hooks\": \"x\"}]}}}",
	  "\"step\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"step\": \"1\", \"hooks\": \"x\"}]}}}",
	  "\"step\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"hooks\": \"x\"}]}}}", "\"step\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"step\": 1}]}}}", "\"hooks\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"step\": 1, \"hooks\": 3}]}}}",
	  "\"hooks\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"step\": 1, \"hooks\": \"x\", "
	  "\"when\": 0}]}}}", "\"when\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {\"plans\": [{\"step\": 99999999999999999999, "
	  "\"hooks\": \"x\"}]}}}", "line 1" },
	{ "{\"format\": 1, \"agents\": {\"\": {}}}", "agents.\"\"" },
	{ "{\"format\": 1, \"agents\": {\"a\": {}, \"a\": {}}}", "duplicate" },
	{ "{\"format\": 1, \"agents\": {\"ok\": {\"enabled\": \"x\"}, \"bad\": 0}}", "\"bad\"" },
	{ "{\"format\": 1, \"agents\": {\"\\u001b[31mred\": 0}}", "agents.\"?[31mred\"" },
};

START_TEST(test_schema_violations)
{
	struct td_store s = { 0 };
	char err[256] = "";
	make_tmpdir();
	write_state(bad_docs[_i].json);
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_ptr_null(s.v);
	ck_assert_msg(strstr(err, "state.json: "), "case %d: no file in: %s", _i, err);
	ck_assert_msg(strstr(err, bad_docs[_i].needle), "case %d: \"%s\" not in: %s", _i,
		      bad_docs[_i].needle, err);
	remove_tmpdir();
}
END_TEST

/* A document with one agent: {"enabled": <enabled>} plus n plans of spec "x". */
static char *doc_one(const char *name, const char *enabled, size_t n_plans, int64_t first_step)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	fprintf(m, "{\"format\": 1, \"agents\": {\"%s\": {\"enabled\": \"%s\", \"plans\": [", name,
		enabled);
	for (size_t i = 0; i < n_plans; i++)
		fprintf(m, "%s{\"step\": %lld, \"hooks\": \"x\"}", i ? "," : "",
			(long long)(first_step + (int64_t)i));
	fputs("]}}}", m);
	fclose(m);
	return buf;
}

/* Loads doc and returns the code, freeing doc and the store. */
static int load_doc(char *doc, char *err, size_t errlen, size_t *n)
{
	struct td_store s = { 0 };
	write_state(doc);
	free(doc);
	int rc = td_store_load(&s, tdir, err, errlen);
	*n = s.n;
	td_store_free(&s);
	return rc;
}

START_TEST(test_bounds)
{
	char err[256] = "";
	size_t n;
	char *spec_max = repeat('s', TGP_MAX_SPEC), *spec_over = repeat('s', TGP_MAX_SPEC + 1);
	char *name_max = repeat('n', TGP_MAX_NAME - 1), *name_over = repeat('n', TGP_MAX_NAME);
	make_tmpdir();
	/* Exactly at each bound: accepted. */
	ck_assert_int_eq(load_doc(doc_one(name_max, spec_max, TD_MAX_PENDING_PLAN, 0), err,
				  sizeof(err), &n), 0);
	ck_assert_uint_eq(n, 1);
	/* One past: refused, naming the bound. */
	ck_assert_int_eq(load_doc(doc_one("a", spec_over, 0, 0), err, sizeof(err), &n),
			 TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "\"enabled\"") && strstr(err, "8192"), "%s", err);
	ck_assert_int_eq(load_doc(doc_one(name_over, "x", 0, 0), err, sizeof(err), &n),
			 TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "agent name"), "%s", err);
	ck_assert_int_eq(load_doc(doc_one("a", "x", TD_MAX_PENDING_PLAN + 1, 0), err, sizeof(err),
				  &n), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "more than 256 plans"), "%s", err);
	ck_assert_uint_eq(n, 0);

	/* A too long plan spec. */
	char *big = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&big, &len);
	fprintf(m, "{\"format\": 1, \"agents\": {\"a\": {\"plans\": "
		"[{\"step\": 0, \"hooks\": \"%s\"}]}}}", spec_over);
	fclose(m);
	ck_assert_int_eq(load_doc(big, err, sizeof(err), &n), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "plans[0]") && strstr(err, "\"hooks\""), "%s", err);
	free(spec_max);
	free(spec_over);
	free(name_max);
	free(name_over);
	remove_tmpdir();
}
END_TEST

/* max agents named a0..a<count-1>, each with an empty entry. */
static char *doc_many(size_t count)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	fputs("{\"format\": 1, \"agents\": {", m);
	for (size_t i = 0; i < count; i++)
		fprintf(m, "%s\"a%zu\": {}", i ? "," : "", i);
	fputs("}}", m);
	fclose(m);
	return buf;
}

START_TEST(test_agent_count_bound)
{
	char err[256] = "";
	size_t n;
	make_tmpdir();
	ck_assert_int_eq(load_doc(doc_many(MAX_AGENTS), err, sizeof(err), &n), 0);
	ck_assert_uint_eq(n, MAX_AGENTS);
	ck_assert_int_eq(load_doc(doc_many(MAX_AGENTS + 1), err, sizeof(err), &n), TOGGLE_EINVAL);
	ck_assert_uint_eq(n, 0);
	ck_assert_msg(strstr(err, "more than 4096 names"), "%s", err);
	remove_tmpdir();
}
END_TEST

/* ---- store: saving fails cleanly ----------------------------------------- */

START_TEST(test_save_failure_keeps_old_file)
{
	struct td_store s = { 0 };
	char p[128];
	make_tmpdir();
	fill_store(&s);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	char *before = read_state();

	/* The tmp path is a directory: open fails, nothing may be replaced. */
	ck_assert_int_eq(mkdir(in_dir(p, sizeof(p), "state.json.tmp"), 0700), 0);
	ck_assert_int_eq(td_desired_set_standing(td_store_get(&s, "alpha", false), "changed"), 0);
	s.dirty = true;
	errno = 0;
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO);
	ck_assert_int_eq(errno, EISDIR); /* preserved for the caller's log */
	ck_assert_uint_eq(s.save_errors, 1);
	ck_assert_uint_eq(s.saves, 1);
	ck_assert(s.dirty); /* still to be saved */
	char *after = read_state();
	ck_assert_str_eq(before, after);
	free(after);

	/* A link planted at the tmp path is not written through. */
	char target[128];
	ck_assert_int_eq(rmdir(p), 0);
	ck_assert_int_eq(symlink(in_dir(target, sizeof(target), "target"), p), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO);
	ck_assert_int_eq(errno, ELOOP);
	ck_assert_int_eq(access(target, F_OK), -1);
	ck_assert_uint_eq(s.save_errors, 2);
	after = read_state();
	ck_assert_str_eq(before, after);
	free(after);

	/* The rename fails (state.json is a non-empty directory): the tmp file is removed. */
	char sub[160], old[128];
	ck_assert_int_eq(unlink(p), 0);
	in_dir(old, sizeof(old), "old.json");
	ck_assert_int_eq(rename(in_dir(target, sizeof(target), "state.json"), old), 0);
	ck_assert_int_eq(mkdir(target, 0700), 0);
	snprintf(sub, sizeof(sub), "%s/sub", target);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO);
	ck_assert_int_eq(errno, EISDIR);
	ck_assert_int_eq(access(p, F_OK), -1);
	ck_assert_int_eq(access(sub, F_OK), 0);
	ck_assert_uint_eq(s.save_errors, 3);
	ck_assert_int_eq(rmdir(sub), 0);
	ck_assert_int_eq(rmdir(target), 0);
	ck_assert_int_eq(rename(old, target), 0);

	/* Once the obstacle is gone, the next save goes through. */
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!s.dirty);
	after = read_state();
	ck_assert_ptr_nonnull(strstr(after, "\"changed\""));
	free(after);
	free(before);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* ---- store: entries and setters ----------------------------------------- */

START_TEST(test_get_bound)
{
	struct td_store s = { 0 };
	char name[32];
	ck_assert_ptr_null(td_store_get(&s, "a", false));
	struct td_desired *first = td_store_get(&s, "n0", true);
	ck_assert_ptr_nonnull(first);
	ck_assert_int_eq(td_desired_set_standing(first, "kept"), 0);
	for (int i = 1; i < MAX_AGENTS; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		ck_assert_ptr_nonnull(td_store_get(&s, name, true));
	}
	ck_assert_uint_eq(s.n, MAX_AGENTS);
	ck_assert_ptr_null(td_store_get(&s, "one-too-many", true));
	ck_assert_uint_eq(s.n, MAX_AGENTS);
	/* Existing names are still found, at the same address as when created. */
	ck_assert_ptr_eq(td_store_get(&s, "n0", true), first);
	ck_assert_str_eq(first->standing, "kept");
	snprintf(name, sizeof(name), "n%d", MAX_AGENTS - 1);
	ck_assert_ptr_nonnull(td_store_get(&s, name, false));
	td_store_free(&s);
}
END_TEST

START_TEST(test_get_bad_names)
{
	struct td_store s = { 0 };
	char *longest = repeat('n', TGP_MAX_NAME - 1), *too_long = repeat('n', TGP_MAX_NAME);
	ck_assert_ptr_null(td_store_get(&s, "", true));
	ck_assert_ptr_null(td_store_get(&s, too_long, true));
	ck_assert_ptr_null(td_store_get(&s, "bad\xff", true));       /* not UTF-8 */
	ck_assert_ptr_null(td_store_get(&s, "bad\xc0\xaf", true));   /* overlong */
	ck_assert_ptr_null(td_store_get(&s, "bad\xed\xa0\x80", true)); /* surrogate */
	ck_assert_ptr_null(td_store_get(&s, "bad\xe2\x82", true));   /* truncated */
	ck_assert_ptr_null(td_store_get(&s, NULL, true));
	ck_assert_uint_eq(s.n, 0);
	struct td_desired *dd = td_store_get(&s, longest, true);
	ck_assert_ptr_nonnull(dd);
	ck_assert_str_eq(dd->name, longest);
	ck_assert_ptr_nonnull(td_store_get(&s, "\xf0\x9f\x98\x80", true)); /* U+1F600 */
	free(longest);
	free(too_long);
	td_store_free(&s);
}
END_TEST

START_TEST(test_setters)
{
	struct td_store s = { 0 };
	struct td_desired *dd = td_store_get(&s, "a", true);
	char *over = repeat('x', TGP_MAX_SPEC + 1), *max = repeat('x', TGP_MAX_SPEC);
	ck_assert_int_eq(td_desired_set_standing(dd, "one"), 0);
	ck_assert_int_eq(td_desired_set_standing(dd, over), TOGGLE_EINVAL);
	ck_assert_int_eq(td_desired_set_standing(dd, "bad\xff"), TOGGLE_EINVAL);
	ck_assert_str_eq(dd->standing, "one"); /* a refused value changes nothing */
	ck_assert_int_eq(td_desired_set_standing(dd, max), 0);
	ck_assert_uint_eq(strlen(dd->standing), TGP_MAX_SPEC);
	ck_assert_int_eq(td_desired_set_standing(dd, NULL), 0);
	ck_assert_ptr_null(dd->standing);
	ck_assert_int_eq(td_desired_set_standing(NULL, "x"), TOGGLE_EINVAL);

	set_plans2(dd, 3, "p3", 4, "p4");
	int64_t steps[TD_MAX_PENDING_PLAN + 1];
	char *specs[TD_MAX_PENDING_PLAN + 1];
	for (size_t i = 0; i <= TD_MAX_PENDING_PLAN; i++)
		steps[i] = (int64_t)i, specs[i] = max;
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, TD_MAX_PENDING_PLAN + 1),
			 TOGGLE_EINVAL);
	steps[1] = -1;
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, 2), TOGGLE_EINVAL);
	steps[1] = 1;
	specs[1] = over;
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, 2), TOGGLE_EINVAL);
	specs[1] = NULL;
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, 2), TOGGLE_EINVAL);
	ck_assert_int_eq(td_desired_set_plans(dd, NULL, NULL, 1), TOGGLE_EINVAL);
	/* All refused: the old list is intact. */
	ck_assert_uint_eq(dd->n_plans, 2);
	ck_assert_int_eq(dd->plan_steps[1], 4);
	ck_assert_str_eq(dd->plan_specs[1], "p4");

	/* Copies are taken: the caller's strings may go away. */
	char mine[8] = "mine";
	specs[0] = mine;
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, 1), 0);
	mine[0] = 'X';
	ck_assert_str_eq(dd->plan_specs[0], "mine");
	/* Passing the entry's own arrays back is safe. */
	ck_assert_int_eq(td_desired_set_plans(dd, dd->plan_steps, dd->plan_specs, dd->n_plans), 0);
	ck_assert_str_eq(dd->plan_specs[0], "mine");
	specs[1] = max;
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, TD_MAX_PENDING_PLAN), 0);
	ck_assert_uint_eq(dd->n_plans, TD_MAX_PENDING_PLAN);
	ck_assert_int_eq(td_desired_set_plans(dd, NULL, NULL, 0), 0);
	ck_assert_uint_eq(dd->n_plans, 0);
	ck_assert_ptr_null(dd->plan_steps);
	free(over);
	free(max);
	td_store_free(&s);
}
END_TEST

/* ---- auth ---------------------------------------------------------------- */

START_TEST(test_auth_owner_and_root)
{
	struct td_daemon d = { 0 };
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
	ck_assert(td_auth_may_write(&d, 0, 54321, NO_SUCH_PID));
	ck_assert(td_auth_may_write(&d, (uint32_t)geteuid(), 54321, NO_SUCH_PID));
	ck_assert(!td_auth_may_write(&d, 54321, 54321, NO_SUCH_PID));
	ck_assert(!td_auth_may_write(&d, 54321, 54321, 0));
	/* Our own pid with a uid that is not its uid: its groups do not count. */
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)getpid()));
}
END_TEST

START_TEST(test_auth_operator_group)
{
	struct td_daemon d = { 0 };
	struct group *gr = getgrgid(getegid());
	ck_assert_ptr_nonnull(gr);
	snprintf(d.cfg.operator_group, sizeof(d.cfg.operator_group), "%s", gr->gr_name);
	td_auth_reload(&d);
	ck_assert(d.have_operator_gid);
	ck_assert_uint_eq(d.operator_gid, getegid());
	ck_assert(td_auth_may_write(&d, 54321, (uint32_t)getegid(), NO_SUCH_PID));
	ck_assert(!td_auth_may_write(&d, 54321, 54321, NO_SUCH_PID));

	/* Unknown or empty group: nobody is an operator, quietly. */
	snprintf(d.cfg.operator_group, sizeof(d.cfg.operator_group), "no-such-group-xyzzy");
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
	ck_assert(!td_auth_may_write(&d, 54321, (uint32_t)getegid(), NO_SUCH_PID));
	d.cfg.operator_group[0] = '\0';
	d.have_operator_gid = true;
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
	/* A name filling its whole array (no NUL) is refused, not read past. */
	memset(d.cfg.operator_group, 'g', sizeof(d.cfg.operator_group));
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
}
END_TEST

/* Fallback to the user database: a user whose primary group is the operator group. */
START_TEST(test_auth_user_database)
{
	struct td_daemon d = { 0 };
	struct passwd *pw;
	uid_t uid = 0;
	gid_t gid = 0;
	bool found = false;
	setpwent();
	while (!found && (pw = getpwent()) != NULL) {
		if (pw->pw_uid != 0 && pw->pw_uid != geteuid() && pw->pw_gid != 54321) {
			uid = pw->pw_uid, gid = pw->pw_gid;
			found = true;
		}
	}
	endpwent();
	if (!found)
		return; /* no suitable account on this machine */
	d.have_operator_gid = true;
	d.operator_gid = gid;
	ck_assert(td_auth_may_write(&d, (uint32_t)uid, 54321, NO_SUCH_PID));
	d.operator_gid = 54322;
	ck_assert(!td_auth_may_write(&d, (uint32_t)uid, 54321, NO_SUCH_PID));
}
END_TEST

/*
 * The peer process's supplementary groups, read from /proc: needs root to
 * make a process of another user with chosen groups (skipped otherwise).
 */
START_TEST(test_auth_proc_groups)
{
	if (geteuid() != 0)
		return;
	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	pid_t child = fork();
	ck_assert_int_ne(child, -1);
	if (child == 0) {
		gid_t extra[] = { 54330, 54322 };
		char c;
		close(fds[1]);
		if (setgroups(2, extra) || setgid(54321) || setuid(54321))
			_exit(1);
		(void)!read(fds[0], &c, 1); /* until the parent is done */
		_exit(0);
	}
	close(fds[0]);
	/* Wait until the child has dropped to its new identity. */
	char path[64], *status = NULL;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)child);
	for (int i = 0; i < 1000; i++) {
		free(status);
		status = read_text(path);
		if (strstr(status, "\nUid:\t54321\t54321"))
			break;
		usleep(1000);
	}
	ck_assert_ptr_nonnull(strstr(status, "\nUid:\t54321\t54321"));
	ck_assert_ptr_nonnull(strstr(status, "\nGroups:\t54322 54330")); /* the kernel sorts them */
	free(status);

	struct td_daemon d = { 0 };
	d.have_operator_gid = true;
	d.operator_gid = 54322;
	ck_assert(td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	d.operator_gid = 54323;
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	d.operator_gid = 5432; /* a prefix or suffix of a listed group is not that group */
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	d.operator_gid = 4322;
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	/* The process at that pid is not the peer's uid: its groups are not trusted. */
	d.operator_gid = 54322;
	ck_assert(!td_auth_may_write(&d, 54320, 54321, (uint32_t)child));

	close(fds[1]);
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_roundtrip);
	tcase_add_test(tc, test_file_shape);
	tcase_add_test(tc, test_missing_file_is_empty);
	tcase_add_test(tc, test_uncreatable_dir);
	tcase_add_test(tc, test_corrupt_json);
	tcase_add_loop_test(tc, test_schema_violations, 0,
			    (int)(sizeof(bad_docs) / sizeof(bad_docs[0])));
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_agent_count_bound);
	tcase_add_test(tc, test_save_failure_keeps_old_file);
	tcase_add_test(tc, test_get_bound);
	tcase_add_test(tc, test_get_bad_names);
	tcase_add_test(tc, test_setters);
	suite_add_tcase(s, tc);

	tc = tcase_create("auth");
	tcase_add_test(tc, test_auth_owner_and_root);
	tcase_add_test(tc, test_auth_operator_group);
	tcase_add_test(tc, test_auth_user_database);
	tcase_add_test(tc, test_auth_proc_groups);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(store_suite());
}
