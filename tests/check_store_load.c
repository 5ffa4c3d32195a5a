/*
 * check_store_load.c - loading the store (daemon/store.c): a missing or
 * uncreatable directory, corrupt JSON, file names, what is not a regular
 * file, leftovers, schema violations, bounds.
 * The temporary state directory and the file helpers are the store suites'
 * fixture (tests/fixture_store.h).  Split out of check_store.c (issue 29).
 */
#include "fixture_store.h"

/* ---- store: loading ------------------------------------------------------ */

START_TEST(test_missing_dir_is_empty)
{
	struct td_store s = { 0 };
	char err[256] = "", p[128], q[160];
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_ptr_null(td_store_get(&s, "alpha", false));
	ck_assert(exists(in_dir(p, sizeof(p), "agents")));

	/* The directories are created, parents included. */
	in_dir(p, sizeof(p), "a/b/c");
	mode_t old = umask(022);
	ck_assert_int_eq(td_store_load(&s, p, err, sizeof(err)), 0);
	umask(old);
	struct stat st;
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0750);
	snprintf(q, sizeof(q), "%s/agents", p);
	ck_assert_int_eq(stat(q, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0750);
	ck_assert_uint_eq(s.n, 0);
	/* ...and a save into it works. */
	ck_assert_int_eq(td_desired_set_standing(td_store_get(&s, "x", true), "y"), 0);
	ck_assert_int_eq(td_store_save(&s, p), 0);
	snprintf(q, sizeof(q), "%s/agents/x.json", p);
	ck_assert(exists(q));
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
	/* agents/ that is a file. */
	write_text(in_dir(p, sizeof(p), "agents"), "x");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EIO);
	ck_assert_msg(strstr(err, "not a directory") && strstr(err, "/agents"),
		      "unclear error: %s", err);

	/* Saving there fails cleanly too, and the entry stays dirty. */
	struct td_desired *x = td_store_get(&s, "x", true);
	ck_assert_int_eq(td_desired_set_standing(x, "y"), 0);
	errno = 0;
	ck_assert_int_eq(td_store_save(&s, d), TOGGLE_EIO);
	ck_assert_int_eq(errno, ENOTDIR);
	ck_assert_uint_eq(s.save_errors, 1);
	ck_assert_uint_eq(s.saves, 0);
	ck_assert(x->dirty);
	ck_assert(s.dirty);
	errno = 0;
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO); /* agents is a file */
	ck_assert_int_eq(errno, ENOTDIR);
	ck_assert(x->dirty);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

START_TEST(test_corrupt_json)
{
	struct td_store s = { 0 };
	char err[512] = "", p[192];
	make_tmpdir();
	make_agents_dir();
	write_entry("good", "{\"format\": 1, \"name\": \"good\", \"enabled\": \"x\"}");
	write_entry("alpha", "{\"format\": 1,\n  \"name\": ,}\n");
	ck_assert_ptr_nonnull(td_store_get(&s, "stale", true)); /* must be gone afterwards */
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_ptr_null(s.v); /* nothing half-loaded, "good" included */
	ck_assert_ptr_null(td_store_get(&s, "stale", false));
	ck_assert_msg(strstr(err, entry_path(p, sizeof(p), "alpha")), "no file in: %s", err);
	ck_assert_msg(strstr(err, "line 2"), "no line in: %s", err);
	ck_assert_msg(strstr(err, "column"), "no column in: %s", err);

	write_entry("alpha", "");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "alpha.json: "), "no file in: %s", err);
	write_entry("alpha", "{\"format\": 1, \"name\": \"alpha\"} trailing");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "alpha.json: "), "no file in: %s", err);
	/* Valid to the end: accepted (enabled and plans may be left out). */
	write_entry("alpha", "{\"format\": 1, \"name\": \"alpha\"}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 2);
	ck_assert_ptr_null(td_store_get(&s, "alpha", false)->standing);
	ck_assert_str_eq(td_store_get(&s, "good", false)->standing, "x");
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* A file name and "name" inside must agree; file names must be agent names. */
START_TEST(test_file_names)
{
	struct td_store s = { 0 };
	char err[512] = "", p[192];
	make_tmpdir();
	make_agents_dir();
	write_entry("alpha", "{\"format\": 1, \"name\": \"beta\"}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, entry_path(p, sizeof(p), "alpha")) && strstr(err, "name: ") &&
		      strstr(err, "\"beta\" is not the file's name"), "unclear error: %s", err);
	write_entry("alpha", "{\"format\": 1, \"name\": \"alpha.json\"}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	write_entry("alpha", "{\"format\": 1, \"name\": \"Alpha\"}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	write_entry("alpha", "{\"format\": 1}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "alpha.json: name: must be a string"), "unclear error: %s", err);
	write_entry("alpha", "{\"format\": 1, \"name\": 7}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "alpha.json: name: "), "unclear error: %s", err);
	write_entry("alpha", "{\"format\": 1, \"name\": \"\\u001b[31m\"}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "\"?[31m\" is not"), "not made printable: %s", err);
	ck_assert_int_eq(unlink(entry_path(p, sizeof(p), "alpha")), 0);

	/* *.json whose stem is no agent name: refused, naming the file. */
	static const char *const bad[] = {
		".json", "..json", "...json" /* stem "..": refused as well */, "a b.json",
		"caf\xc3\xa9.json", "a:b.json", "x\x1b.json",
		"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn.json", /* 64 */
	};
	static const char *const shown[] = {
		"/.json", "/..json", "/...json", "/a b.json", "/caf??.json", "/a:b.json", "/x?.json",
		"/nnnnnnnnnnnn",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_text(in_agents(p, sizeof(p), bad[i]), "{}");
		ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
		ck_assert_msg(strstr(err, "/agents") && strstr(err, shown[i]) &&
			      strstr(err, "file name: must be <agent name>.json"),
			      "case %zu: unclear error: %s", i, err);
		ck_assert_uint_eq(s.n, 0);
		ck_assert_int_eq(unlink(p), 0);
	}
	/* "..json" has the stem "."; "...json" the stem ".."; both refused. A stem of 63 bytes is fine. */
	char *longest = repeat('n', TGP_MAX_NAME - 1), doc[256];
	snprintf(doc, sizeof(doc), "{\"format\": 1, \"name\": \"%s\", \"enabled\": \"\"}", longest);
	write_entry(longest, doc);
	write_entry(".hidden", "{\"format\": 1, \"name\": \".hidden\", \"enabled\": \"a\"}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 2);
	ck_assert_ptr_nonnull(td_store_get(&s, longest, false));
	ck_assert_ptr_nonnull(td_store_get(&s, ".hidden", false));
	free(longest);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* Entries that are not regular files are ignored (and logged); other names too. */
START_TEST(test_not_regular_ignored)
{
	struct td_store s = { 0 };
	char err[512] = "", p[192], q[192];
	make_tmpdir();
	make_agents_dir();
	write_entry("alpha", "{\"format\": 1, \"name\": \"alpha\", \"enabled\": \"a\"}");
	ck_assert_int_eq(mkfifo(entry_path(p, sizeof(p), "fifo"), 0600), 0);
	ck_assert_int_eq(mkdir(entry_path(p, sizeof(p), "dir"), 0700), 0);
	/* A link to a valid entry elsewhere: not followed. */
	write_text(in_dir(q, sizeof(q), "elsewhere.json"),
		   "{\"format\": 1, \"name\": \"link\", \"enabled\": \"a\"}");
	ck_assert_int_eq(symlink(q, entry_path(p, sizeof(p), "link")), 0);
	write_text(in_agents(p, sizeof(p), "README"), "not state");
	write_text(in_agents(p, sizeof(p), "beta.json~"), "{");
	capture_stderr();
	int rc = td_store_load(&s, tdir, err, sizeof(err));
	char *log = captured_stderr();
	ck_assert_msg(rc == 0, "load: %d: %s", rc, err);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_ptr_nonnull(td_store_get(&s, "alpha", false));
	ck_assert_ptr_null(td_store_get(&s, "link", false));
	ck_assert_msg(strstr(log, "agents/fifo.json: not a regular file"), "log: %s", log);
	ck_assert_msg(strstr(log, "agents/dir.json: not a regular file"), "log: %s", log);
	ck_assert_msg(strstr(log, "agents/link.json: not a regular file"), "log: %s", log);
	ck_assert_msg(strstr(log, "agents/README: not <agent name>.json"), "log: %s", log);
	ck_assert_msg(strstr(log, "agents/beta.json~: not <agent name>.json"), "log: %s", log);
	free(log);
	/* Nothing ignored was touched. */
	ck_assert(exists(entry_path(p, sizeof(p), "fifo")));
	ck_assert(exists(entry_path(p, sizeof(p), "link")));
	ck_assert(exists(in_agents(p, sizeof(p), "README")));
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* *.tmp left by a save that crashed: removed at load, the entry's file wins. */
START_TEST(test_tmp_leftovers_removed)
{
	struct td_store s = { 0 };
	char err[256] = "", p[192];
	make_tmpdir();
	make_agents_dir();
	write_entry("alpha", "{\"format\": 1, \"name\": \"alpha\", \"enabled\": \"old\"}");
	write_text(in_agents(p, sizeof(p), "alpha.json.tmp"), "{\"format\": 1, \"name\": \"alp");
	write_text(in_agents(p, sizeof(p), "beta.json.tmp"), "");
	write_text(in_agents(p, sizeof(p), "odd name.tmp"), "x");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_str_eq(td_store_get(&s, "alpha", false)->standing, "old");
	ck_assert_ptr_null(td_store_get(&s, "beta", false));
	char *names = list_agents_dir();
	ck_assert_str_eq(names, "alpha.json");
	free(names);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* Documents that break the schema; each must be refused naming the file and what is wrong. */
static const struct {
	const char *json, *needle;
} bad_docs[] = {
	{ "[]", "top level" },
	{ "{\"name\": \"a\"}", "format" },
	{ "{\"format\": 2, \"name\": \"a\"}", "format" },
	{ "{\"format\": \"1\", \"name\": \"a\"}", "format" },
	{ "{\"format\": 1, \"name\": \"a\", \"extra\": 0}", "\"extra\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"agents\": {}}", "\"agents\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"enabled\": 1}", "enabled" },
	{ "{\"format\": 1, \"name\": \"a\", \"enabled\": null}", "enabled" },
	{ "{\"format\": 1, \"name\": \"a\", \"enabled\": \"x\\u0000y\"}", "NUL" },
	{ "{\"format\": 1, \"name\": \"a\", \"enabled\": \"\\udc00\"}", "line 1" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": {}}", "plans" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [1]}", "plans[0]" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"step\": 1, \"hooks\": \"\"},"
	  "{\"step\": -1, \"hooks\": \"x\"}]}", "plans[1]" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"step\": 1.5, \"hooks\": \"x\"}]}",
	  "\"step\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"step\": \"1\", \"hooks\": \"x\"}]}",
	  "\"step\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"hooks\": \"x\"}]}", "\"step\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"step\": 1}]}", "\"hooks\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"step\": 1, \"hooks\": 3}]}",
	  "\"hooks\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"step\": 1, \"hooks\": \"x\", "
	  "\"when\": 0}]}", "\"when\"" },
	{ "{\"format\": 1, \"name\": \"a\", \"plans\": [{\"step\": 99999999999999999999, "
	  "\"hooks\": \"x\"}]}", "line 1" },
	{ "{\"format\": 1, \"name\": \"a\", \"name\": \"a\"}", "duplicate" },
	{ "{\"format\": 1, \"name\": \"a\", \"\\u001b[31mred\": 0}", "\"?[31mred\"" },
};

START_TEST(test_schema_violations)
{
	struct td_store s = { 0 };
	char err[512] = "", p[192];
	make_tmpdir();
	make_agents_dir();
	write_entry("ok", "{\"format\": 1, \"name\": \"ok\", \"enabled\": \"x\"}");
	write_entry("a", bad_docs[_i].json);
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_ptr_null(s.v);
	char want[224];
	snprintf(want, sizeof(want), "%s: ", entry_path(p, sizeof(p), "a"));
	ck_assert_msg(strstr(err, want), "case %d: no file in: %s", _i, err);
	ck_assert_msg(strstr(err, bad_docs[_i].needle), "case %d: \"%s\" not in: %s", _i,
		      bad_docs[_i].needle, err);
	remove_tmpdir();
}
END_TEST

/* One agent's document: {"enabled": <enabled>} plus n plans of spec "x". */
static char *doc_one(const char *name, const char *enabled, size_t n_plans, int64_t first_step)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	fprintf(m, "{\"format\": 1, \"name\": \"%s\", \"enabled\": \"%s\", \"plans\": [", name,
		enabled);
	for (size_t i = 0; i < n_plans; i++)
		fprintf(m, "%s{\"step\": %lld, \"hooks\": \"x\"}", i ? "," : "",
			(long long)(first_step + (int64_t)i));
	fputs("]}", m);
	fclose(m);
	return buf;
}

/* Loads doc as agents/<name>.json (alone) and returns the code, freeing doc and the store. */
static int load_doc(const char *name, char *doc, char *err, size_t errlen, size_t *n)
{
	struct td_store s = { 0 };
	char p[256];
	remove_tmpdir();
	ck_assert_int_eq(mkdir(tdir, 0700), 0);
	make_agents_dir();
	snprintf(p, sizeof(p), "%s/agents/%s.json", tdir, name);
	write_text(p, doc);
	free(doc);
	int rc = td_store_load(&s, tdir, err, errlen);
	*n = s.n;
	td_store_free(&s);
	return rc;
}

START_TEST(test_bounds)
{
	char err[512] = "";
	size_t n;
	char *spec_max = repeat('s', TGP_MAX_SPEC), *spec_over = repeat('s', TGP_MAX_SPEC + 1);
	char *name_max = repeat('n', TGP_MAX_NAME - 1);
	make_tmpdir();
	/* Exactly at each bound: accepted. */
	ck_assert_int_eq(load_doc(name_max, doc_one(name_max, spec_max, TD_MAX_PENDING_PLAN, 0),
				  err, sizeof(err), &n), 0);
	ck_assert_uint_eq(n, 1);
	/* One past: refused, naming the bound. */
	ck_assert_int_eq(load_doc("a", doc_one("a", spec_over, 0, 0), err, sizeof(err), &n),
			 TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "enabled") && strstr(err, "8192"), "%s", err);
	ck_assert_int_eq(load_doc("a", doc_one("a", "x", TD_MAX_PENDING_PLAN + 1, 0), err,
				  sizeof(err), &n), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "more than 256 plans"), "%s", err);
	ck_assert_uint_eq(n, 0);
	/* Specs must be UTF-8 (jansson checks the file; the store checks again). */
	ck_assert_int_eq(load_doc("a", doc_one("a", "\xc3\x28", 0, 0), err, sizeof(err), &n),
			 TOGGLE_EINVAL);

	/* A too long plan spec. */
	char *big = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&big, &len);
	fprintf(m, "{\"format\": 1, \"name\": \"a\", \"plans\": "
		"[{\"step\": 0, \"hooks\": \"%s\"}]}", spec_over);
	fclose(m);
	ck_assert_int_eq(load_doc("a", big, err, sizeof(err), &n), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "plans[0]") && strstr(err, "\"hooks\""), "%s", err);

	/* A file larger than any valid entry is not read at all. */
	char p[192];
	ck_assert_int_eq(load_doc("a", doc_one("a", "x", 0, 0), err, sizeof(err), &n), 0);
	ck_assert_int_eq(truncate(entry_path(p, sizeof(p), "a"), 64 << 20), 0);
	struct td_store s = { 0 };
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, p) && strstr(err, "larger than"), "%s", err);
	free(spec_max);
	free(spec_over);
	free(name_max);
	remove_tmpdir();
}
END_TEST

/* count files a0..a<count-1> in agents/, each with an empty entry. */
static void make_many(size_t count)
{
	char name[32], doc[96];
	for (size_t i = 0; i < count; i++) {
		snprintf(name, sizeof(name), "a%zu", i);
		snprintf(doc, sizeof(doc), "{\"format\": 1, \"name\": \"%s\"}", name);
		write_entry(name, doc);
	}
}

START_TEST(test_agent_count_bound)
{
	struct td_store s = { 0 };
	char err[512] = "", p[192];
	make_tmpdir();
	make_agents_dir();
	make_many(MAX_AGENTS);
	/* Leftovers and other names do not count against the bound. */
	write_text(in_agents(p, sizeof(p), "a0.json.tmp"), "");
	write_text(in_agents(p, sizeof(p), "notes.txt"), "");
	capture_stderr();
	int rc = td_store_load(&s, tdir, err, sizeof(err));
	free(captured_stderr());
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_eq(s.n, MAX_AGENTS);
	char name[32];
	snprintf(name, sizeof(name), "a%d", MAX_AGENTS - 1);
	ck_assert_ptr_nonnull(td_store_get(&s, name, false));
	td_store_free(&s);
	ck_assert(!exists(in_agents(p, sizeof(p), "a0.json.tmp")));
	ck_assert_int_eq(unlink(in_agents(p, sizeof(p), "notes.txt")), 0);

	snprintf(name, sizeof(name), "a%d", MAX_AGENTS);
	write_entry(name, "{}");
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_msg(strstr(err, "more than 4096 names") && strstr(err, "/agents"), "%s", err);
	remove_tmpdir();
}
END_TEST

static Suite *store_load_suite(void)
{
	Suite *s = suite_create("store_load");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_missing_dir_is_empty);
	tcase_add_test(tc, test_uncreatable_dir);
	tcase_add_test(tc, test_corrupt_json);
	tcase_add_test(tc, test_file_names);
	tcase_add_test(tc, test_not_regular_ignored);
	tcase_add_test(tc, test_tmp_leftovers_removed);
	tcase_add_loop_test(tc, test_schema_violations, 0,
			    (int)(sizeof(bad_docs) / sizeof(bad_docs[0])));
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_agent_count_bound);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(store_load_suite());
}
