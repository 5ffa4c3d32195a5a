/*
 * check_store.c - tests of the daemon's persisted desired state
 * (daemon/store.c: one file per agent name under <state_dir>/agents/, only
 * changed entries rewritten) and of its write permission rule (daemon/auth.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
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

/* tdir/agents/<fname> into buf (fname: a whole file name, suffix included). */
static const char *in_agents(char *buf, size_t len, const char *fname)
{
	snprintf(buf, len, "%s/agents/%s", tdir, fname);
	return buf;
}

/* tdir/agents/<name>.json into buf. */
static const char *entry_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/agents/%s.json", tdir, name);
	return buf;
}

/* agents/<name>.json holds needle. */
static void text_has_entry(const char *name, const char *needle);

static void make_agents_dir(void)
{
	char p[128];
	ck_assert_int_eq(mkdir(in_dir(p, sizeof(p), "agents"), 0750), 0);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
}

/* The whole file, NUL-terminated; freed by the caller. */
static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot read %s: %s", path, strerror(errno));
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

static void write_entry(const char *name, const char *text)
{
	char p[192];
	write_text(entry_path(p, sizeof(p), name), text);
}

static char *read_entry(const char *name)
{
	char p[192];
	return read_text(entry_path(p, sizeof(p), name));
}

static void text_has_entry(const char *name, const char *needle)
{
	char *text = read_entry(name);
	ck_assert_msg(strstr(text, needle), "%s.json does not hold %s: %s", name, needle, text);
	free(text);
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static bool entry_exists(const char *name)
{
	char p[192];
	return exists(entry_path(p, sizeof(p), name));
}

/* Inode number of an entry's file: a new one each time the file is rewritten (tmp + rename). */
static ino_t entry_ino(const char *name)
{
	char p[192];
	struct stat st;
	ck_assert_msg(stat(entry_path(p, sizeof(p), name), &st) == 0, "%s: %s", p, strerror(errno));
	return st.st_ino;
}

/* Names in tdir/agents, sorted, joined by ' '; freed by the caller. */
static char *list_agents_dir(void)
{
	char p[128];
	struct dirent **v;
	int n = scandir(in_dir(p, sizeof(p), "agents"), &v, NULL, alphasort);
	ck_assert_int_ge(n, 0);
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, ".."))
			fprintf(m, "%s%s", len || ftell(m) ? " " : "", v[i]->d_name);
		free(v[i]);
	}
	free(v);
	fclose(m);
	return buf;
}

/* stderr (where the store logs) into a file while capturing; the text afterwards. */
static int saved_stderr = -1;

static void capture_stderr(void)
{
	char p[128];
	fflush(stderr);
	saved_stderr = dup(2);
	int fd = open(in_dir(p, sizeof(p), "stderr.log"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dup2(fd, 2), 2);
	close(fd);
}

static char *captured_stderr(void)
{
	char p[128];
	fflush(stderr);
	ck_assert_int_eq(dup2(saved_stderr, 2), 2);
	close(saved_stderr);
	saved_stderr = -1;
	char *text = read_text(in_dir(p, sizeof(p), "stderr.log"));
	unlink(p);
	return text;
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

#define GAMMA "Gamma_2.x-y" /* every character class a name may have */

/* A store of three names: standing set with plans, standing NULL with plans, standing only. */
static void fill_store(struct td_store *s)
{
	struct td_desired *a = td_store_get(s, "alpha", true);
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(td_desired_set_standing(a, "resid_post:0-3,attn_out:*"), 0);
	set_plans2(a, 5, "resid_post:1", 7, "");
	struct td_desired *b = td_store_get(s, "beta", true);
	ck_assert_ptr_nonnull(b);
	set_plans2(b, 0, "mlp_out:2", 123456789012LL, "resid_post:* \"q\" \xc3\xa9\x01");
	struct td_desired *g = td_store_get(s, GAMMA, true);
	ck_assert_ptr_nonnull(g);
	ck_assert_int_eq(td_desired_set_standing(g, ""), 0);
	/* The setters raised the flags: no caller has to. */
	ck_assert(s->dirty);
	ck_assert(a->dirty && b->dirty && g->dirty);
}

/* ---- store: round trip and file layout ----------------------------------- */

START_TEST(test_roundtrip)
{
	struct td_store s = { 0 }, r = { 0 };
	char err[256] = "";
	make_tmpdir();
	fill_store(&s);
	/* No load before: the save makes agents/ itself. */
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!s.dirty);
	for (size_t i = 0; i < s.n; i++)
		ck_assert(!s.v[i].dirty);
	ck_assert_uint_eq(s.saves, 1);
	ck_assert_uint_eq(s.save_errors, 0);

	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 3);
	ck_assert(!r.dirty);
	struct td_desired *a = td_store_get(&r, "alpha", false);
	ck_assert_ptr_nonnull(a);
	ck_assert(!a->dirty);
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
	ck_assert_str_eq(b->plan_specs[1], "resid_post:* \"q\" \xc3\xa9\x01");

	struct td_desired *g = td_store_get(&r, GAMMA, false);
	ck_assert_ptr_nonnull(g);
	ck_assert_ptr_nonnull(g->standing);
	ck_assert_str_eq(g->standing, ""); /* "" (nothing enabled) differs from none set */
	ck_assert_uint_eq(g->n_plans, 0);
	ck_assert_ptr_null(td_store_get(&r, "delta", false));

	/* Rewriting what was loaded gives the same bytes: the files are stable. */
	char *first = read_entry("beta");
	ino_t ino = entry_ino("beta");
	b->dirty = true;
	r.dirty = true;
	ck_assert_int_eq(td_store_save(&r, tdir), 0);
	ck_assert_uint_ne(entry_ino("beta"), ino); /* it was rewritten... */
	char *second = read_entry("beta");
	ck_assert_str_eq(first, second); /* ...to the same text */
	free(first);
	free(second);

	/* A loaded entry's setters raise the loaded store's flag (not the load's scratch copy). */
	ck_assert_int_eq(td_desired_set_standing(a, "x"), 0);
	ck_assert(a->dirty);
	ck_assert(r.dirty);
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
	char p[192];
	make_tmpdir();
	make_agents_dir();
	fill_store(&s);
	/* A stale tmp with a loose mode must not lend it to the new file. */
	write_text(in_agents(p, sizeof(p), "alpha.json.tmp"), "junk");
	ck_assert_int_eq(chmod(p, 0644), 0);
	mode_t old = umask(0);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	umask(old);

	/* One file per agent, nothing else: no tmp left, no whole-store file. */
	char *names = list_agents_dir();
	ck_assert_str_eq(names, GAMMA ".json alpha.json beta.json");
	free(names);
	ck_assert(!exists(in_dir(p, sizeof(p), "state.json")));
	struct stat st;
	ck_assert_int_eq(stat(entry_path(p, sizeof(p), "alpha"), &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_int_eq(stat(entry_path(p, sizeof(p), "beta"), &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);

	json_error_t jerr;
	json_t *root = json_load_file(entry_path(p, sizeof(p), "beta"), 0, &jerr);
	ck_assert_msg(root != NULL, "saved file is not JSON: %s", jerr.text);
	ck_assert_uint_eq(json_object_size(root), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(root, "format")), 1);
	ck_assert_str_eq(json_string_value(json_object_get(root, "name")), "beta");
	ck_assert_ptr_null(json_object_get(root, "enabled")); /* omitted when NULL */
	json_t *plans = json_object_get(root, "plans");
	ck_assert_uint_eq(json_array_size(plans), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(plans, 0), "step")), 0);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(plans, 0), "hooks")),
			 "mlp_out:2");
	json_decref(root);

	root = json_load_file(entry_path(p, sizeof(p), GAMMA), 0, &jerr);
	ck_assert_msg(root != NULL, "saved file is not JSON: %s", jerr.text);
	ck_assert_str_eq(json_string_value(json_object_get(root, "name")), GAMMA);
	ck_assert_str_eq(json_string_value(json_object_get(root, "enabled")), "");
	ck_assert_uint_eq(json_array_size(json_object_get(root, "plans")), 0);
	json_decref(root);

	/* Sorted keys and indentation: readable and stable. */
	char *text = read_entry("alpha");
	ck_assert_msg(strncmp(text, "{\n  \"enabled\": \"resid_post:0-3,attn_out:*\",\n"
				    "  \"format\": 1,\n  \"name\": \"alpha\",\n  \"plans\": [\n", 70) == 0,
		      "unexpected layout:\n%s", text);
	ck_assert_int_eq(text[strlen(text) - 1], '\n');
	free(text);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* ---- store: saving writes what changed, and only that -------------------- */

START_TEST(test_only_dirty_rewritten)
{
	struct td_store s = { 0 };
	char err[256] = "";
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	fill_store(&s);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ino_t a0 = entry_ino("alpha"), b0 = entry_ino("beta"), g0 = entry_ino(GAMMA);

	/* Nothing dirty: nothing rewritten. */
	s.dirty = true;
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert_uint_eq(entry_ino("alpha"), a0);
	ck_assert_uint_eq(entry_ino("beta"), b0);
	ck_assert_uint_eq(entry_ino(GAMMA), g0);

	/* One entry changes: only its file is rewritten. */
	struct td_desired *b = td_store_get(&s, "beta", false);
	ck_assert(!b->dirty);
	ck_assert(!s.dirty);
	ck_assert_int_eq(td_desired_set_standing(b, "attn_out:1"), 0);
	ck_assert(b->dirty);
	ck_assert(s.dirty);
	ck_assert(!td_store_get(&s, "alpha", false)->dirty);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!b->dirty);
	ino_t b1 = entry_ino("beta");
	ck_assert_uint_ne(b1, b0);
	ck_assert_uint_eq(entry_ino("alpha"), a0);
	ck_assert_uint_eq(entry_ino(GAMMA), g0);
	char *text = read_entry("beta");
	ck_assert_ptr_nonnull(strstr(text, "\"enabled\": \"attn_out:1\""));
	free(text);

	/* Setting the value an entry already has changes nothing: nothing to write. */
	ck_assert_int_eq(td_desired_set_standing(b, "attn_out:1"), 0);
	set_plans2(b, 0, "mlp_out:2", 123456789012LL, "resid_post:* \"q\" \xc3\xa9\x01");
	ck_assert(!b->dirty);
	ck_assert(!s.dirty);
	/* A different plan list (here one step) does. */
	set_plans2(b, 1, "mlp_out:2", 123456789012LL, "resid_post:* \"q\" \xc3\xa9\x01");
	ck_assert(b->dirty);

	/* Two of many: both rewritten, the rest untouched; a new entry gets its file. */
	struct td_desired *g = td_store_get(&s, GAMMA, false);
	ck_assert_int_eq(td_desired_set_standing(g, NULL), 0);
	ck_assert_int_eq(td_desired_set_standing(g, "resid_post:0"), 0);
	struct td_desired *d = td_store_get(&s, "delta", true);
	ck_assert_ptr_nonnull(d);
	ck_assert(!d->dirty); /* created empty: nothing to write yet */
	ck_assert_int_eq(td_desired_set_standing(d, "attn_out:*"), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert_uint_ne(entry_ino("beta"), b1);
	ck_assert_uint_ne(entry_ino(GAMMA), g0);
	ck_assert_uint_eq(entry_ino("alpha"), a0);
	ck_assert(entry_exists("delta"));
	ck_assert_uint_eq(s.saves, 4);

	struct td_store r = { 0 };
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 4);
	ck_assert_str_eq(td_store_get(&r, GAMMA, false)->standing, "resid_post:0");
	ck_assert_int_eq(td_store_get(&r, "beta", false)->plan_steps[0], 1);
	ck_assert_str_eq(td_store_get(&r, "delta", false)->standing, "attn_out:*");
	td_store_free(&r);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* With many entries, a save of one writes one file (the point of the layout). */
START_TEST(test_save_cost_follows_changes)
{
	struct td_store s = { 0 };
	char name[32], err[256] = "";
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	for (int i = 0; i < 256; i++) {
		snprintf(name, sizeof(name), "agent%03d", i);
		ck_assert_int_eq(td_desired_set_standing(td_store_get(&s, name, true), "h0:*"), 0);
	}
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ino_t before[256];
	for (int i = 0; i < 256; i++) {
		snprintf(name, sizeof(name), "agent%03d", i);
		before[i] = entry_ino(name);
	}
	ck_assert_int_eq(td_desired_set_standing(td_store_get(&s, "agent100", false), ""), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	int rewritten = 0;
	for (int i = 0; i < 256; i++) {
		snprintf(name, sizeof(name), "agent%03d", i);
		rewritten += entry_ino(name) != before[i];
	}
	ck_assert_int_eq(rewritten, 1);
	ck_assert_uint_ne(entry_ino("agent100"), before[100]);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* ---- store: a save is all or nothing, and fails cleanly ------------------ */

START_TEST(test_save_failure_keeps_entry_dirty)
{
	struct td_store s = { 0 };
	char p[192], err[256] = "", file_tmp[192];
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	fill_store(&s);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	char *before = read_entry("alpha");
	struct td_desired *a = td_store_get(&s, "alpha", false), *b = td_store_get(&s, "beta", false);
	struct td_desired *g = td_store_get(&s, GAMMA, false);

	/*
	 * alpha's tmp path is a directory: alpha fails, and so does the save of
	 * beta and gamma (all or nothing: one save holds whole commands, which
	 * may span agents); no file changed, no tmp file left.
	 */
	char *beta0 = read_entry("beta"), *gamma0 = read_entry(GAMMA);
	ino_t b0 = entry_ino("beta"), g0 = entry_ino(GAMMA);
	ck_assert_int_eq(mkdir(in_agents(p, sizeof(p), "alpha.json.tmp"), 0700), 0);
	ck_assert_int_eq(td_desired_set_standing(a, "changed"), 0);
	ck_assert_int_eq(td_desired_set_standing(b, "beta-changed"), 0);
	ck_assert_int_eq(td_desired_set_standing(g, "gamma-changed"), 0);
	errno = 0;
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO);
	ck_assert_int_eq(errno, EISDIR); /* preserved for the caller's log */
	ck_assert_uint_eq(s.save_errors, 1);
	ck_assert_uint_eq(s.saves, 1);
	ck_assert(s.dirty); /* still something to save */
	ck_assert(a->dirty);
	ck_assert(b->dirty);
	ck_assert(g->dirty);
	char *after = read_entry("alpha");
	ck_assert_str_eq(before, after);
	free(after);
	after = read_entry("beta");
	ck_assert_str_eq(after, beta0);
	free(after);
	after = read_entry(GAMMA);
	ck_assert_str_eq(after, gamma0);
	free(after);
	ck_assert_uint_eq(entry_ino("beta"), b0);
	ck_assert_uint_eq(entry_ino(GAMMA), g0);
	ck_assert(!exists(in_agents(file_tmp, sizeof(file_tmp), "beta.json.tmp")));
	ck_assert(!exists(in_agents(file_tmp, sizeof(file_tmp), GAMMA ".json.tmp")));
	free(beta0);
	free(gamma0);
	ino_t b1 = entry_ino("beta");

	/* A link planted at the tmp path is not written through; beta is not rewritten. */
	char target[128];
	ck_assert_int_eq(rmdir(p), 0);
	ck_assert_int_eq(symlink(in_dir(target, sizeof(target), "target"), p), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO);
	ck_assert_int_eq(errno, ELOOP);
	ck_assert(!exists(target));
	ck_assert_uint_eq(s.save_errors, 2);
	ck_assert(a->dirty);
	ck_assert_uint_eq(entry_ino("beta"), b1);
	after = read_entry("alpha");
	ck_assert_str_eq(before, after);
	free(after);

	/* The rename fails (alpha.json is a non-empty directory): the tmp file is removed. */
	char file[192], sub[224], old[128];
	ck_assert_int_eq(unlink(p), 0);
	in_dir(old, sizeof(old), "old.json");
	ck_assert_int_eq(rename(entry_path(file, sizeof(file), "alpha"), old), 0);
	ck_assert_int_eq(mkdir(file, 0700), 0);
	snprintf(sub, sizeof(sub), "%s/sub", file);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO);
	ck_assert_int_eq(errno, EISDIR);
	ck_assert(!exists(p));
	ck_assert(exists(sub));
	ck_assert_uint_eq(s.save_errors, 3);
	ck_assert(a->dirty);
	ck_assert_int_eq(rmdir(sub), 0);
	ck_assert_int_eq(rmdir(file), 0);
	ck_assert_int_eq(rename(old, file), 0);

	/* Once the obstacle is gone, the next save goes through, all three entries. */
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!a->dirty);
	ck_assert(!b->dirty);
	ck_assert(!g->dirty);
	ck_assert(!s.dirty);
	after = read_entry("alpha");
	ck_assert_ptr_nonnull(strstr(after, "\"changed\""));
	free(after);
	after = read_entry("beta");
	ck_assert_ptr_nonnull(strstr(after, "\"beta-changed\""));
	free(after);
	after = read_entry(GAMMA);
	ck_assert_ptr_nonnull(strstr(after, "\"gamma-changed\""));
	free(after);
	free(before);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* ---- store: saving in three steps (the daemon's group commit) ------------ */

/*
 * A change made while a job runs is not in it: it stays dirty for the next
 * one, and the entry's saved value is the job's.  A rollback goes back to
 * what the files hold.
 */
START_TEST(test_job_group_commit)
{
	struct td_store s = { 0 };
	char err[256] = "";
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	fill_store(&s);
	struct td_store_job *j = td_store_job_begin(&s, tdir);
	ck_assert_ptr_nonnull(j);
	ck_assert_uint_eq(td_store_job_entries(j), 3);
	ck_assert(!s.dirty); /* everything is in the job */
	struct td_desired *a = td_store_get(&s, "alpha", false), *b = td_store_get(&s, "beta", false);
	ck_assert(!a->dirty);
	/* Accepted while the job runs: the next job's. */
	ck_assert_int_eq(td_desired_set_standing(a, "later"), 0);
	ck_assert(a->dirty && s.dirty);
	td_store_job_run(j);
	ck_assert_int_eq(td_store_job_end(&s, j, err, sizeof(err)), 0);
	ck_assert(a->dirty && s.dirty && !b->dirty);
	ck_assert_str_eq(a->saved_standing, "resid_post:0-3,attn_out:*");
	ck_assert_str_eq(a->standing, "later");
	char *text = read_entry("alpha");
	ck_assert_ptr_nonnull(strstr(text, "\"resid_post:0-3,attn_out:*\""));
	free(text);

	/* Roll back: the unsaved change is dropped, nothing is left to save. */
	ck_assert_int_eq(td_desired_set_plans(b, NULL, NULL, 0), 0);
	td_store_rollback(&s);
	ck_assert_str_eq(a->standing, "resid_post:0-3,attn_out:*");
	ck_assert_uint_eq(a->n_plans, 2);
	ck_assert_uint_eq(b->n_plans, 2);
	ck_assert_str_eq(b->plan_specs[0], "mlp_out:2");
	ck_assert(!a->dirty && !b->dirty && !s.dirty);

	/* Nothing dirty: an empty job, which succeeds without touching a file. */
	ino_t a0 = entry_ino("alpha");
	j = td_store_job_begin(&s, tdir);
	ck_assert_uint_eq(td_store_job_entries(j), 0);
	td_store_job_run(j);
	ck_assert_int_eq(td_store_job_end(&s, j, err, sizeof(err)), 0);
	ck_assert_uint_eq(entry_ino("alpha"), a0);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* Write zeros to path until ENOSPC (or EFBIG under RLIMIT_FSIZE). */
static void fill_disk(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	static const char zeros[4096];
	for (;;) {
		ssize_t w = write(fd, zeros, sizeof(zeros));
		if (w < 0 && (errno == ENOSPC || errno == EFBIG))
			break;
		ck_assert_msg(w > 0, "filling %s: %s", path, strerror(errno));
	}
	close(fd);
}

/*
 * A full disk: the save fails with the reason, changes no file and leaves no
 * tmp file; the entries stay dirty and a rollback returns them to what the
 * files hold; with room again the next save goes through.  As root on a
 * tmpfs of its own (a private mount namespace); otherwise RLIMIT_FSIZE
 * makes every write past 64 bytes fail (EFBIG), a full disk as a process
 * sees it.
 */
START_TEST(test_save_full_disk)
{
	struct td_store s = { 0 };
	char err[512] = "", filler[128], p[192];
	make_tmpdir();
	bool tmpfs = geteuid() == 0 && unshare(CLONE_NEWNS) == 0 &&
		     mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
		     mount("tmpfs", tdir, "tmpfs", 0, "size=256k,mode=0700") == 0;
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	fill_store(&s);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	char *alpha0 = read_entry("alpha"), *beta0 = read_entry("beta");
	struct td_desired *a = td_store_get(&s, "alpha", false), *b = td_store_get(&s, "beta", false);
	ck_assert_int_eq(td_desired_set_standing(a, "alpha-on-a-full-disk"), 0);
	ck_assert_int_eq(td_desired_set_standing(b, "beta-on-a-full-disk"), 0);
	struct rlimit old_lim;
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
	if (tmpfs) {
		fill_disk(in_dir(filler, sizeof(filler), "filler"));
	} else {
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit lim = { 64, old_lim.rlim_max };
		ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	}
	struct td_store_job *j = td_store_job_begin(&s, tdir);
	ck_assert_ptr_nonnull(j);
	td_store_job_run(j);
	errno = 0;
	ck_assert_int_eq(td_store_job_end(&s, j, err, sizeof(err)), TOGGLE_EIO);
	ck_assert_int_eq(errno, tmpfs ? ENOSPC : EFBIG);
	ck_assert_msg(strstr(err, tmpfs ? "No space left on device" : "File too large") &&
		      strstr(err, ".json.tmp"), "unclear reason: %s", err);
	ck_assert_uint_eq(s.save_errors, 1);
	ck_assert(a->dirty && b->dirty && s.dirty);
	char *text = read_entry("alpha");
	ck_assert_str_eq(text, alpha0);
	free(text);
	text = read_entry("beta");
	ck_assert_str_eq(text, beta0);
	free(text);
	ck_assert(!exists(in_agents(p, sizeof(p), "alpha.json.tmp")));
	ck_assert(!exists(in_agents(p, sizeof(p), "beta.json.tmp")));
	/* The daemon's answer to a failed save: back to what the files hold. */
	td_store_rollback(&s);
	ck_assert_str_eq(a->standing, "resid_post:0-3,attn_out:*");
	ck_assert_ptr_null(b->standing);
	ck_assert(!a->dirty && !b->dirty && !s.dirty);

	/* Room again: the next change is saved. */
	if (tmpfs)
		ck_assert_int_eq(unlink(filler), 0);
	else
		ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
	ck_assert_int_eq(td_desired_set_standing(a, "alpha-later"), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	text = read_entry("alpha");
	ck_assert_ptr_nonnull(strstr(text, "\"alpha-later\""));
	free(text);
	free(alpha0);
	free(beta0);
	td_store_free(&s);
	if (tmpfs)
		ck_assert_int_eq(umount2(tdir, MNT_DETACH), 0);
	remove_tmpdir();
}
END_TEST

/* ---- store: the journal --------------------------------------------------- */

static off_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : -1;
}

/* One record of the given entries (name, standing) appended to the journal as is. */
static void append_record(const char *path, uint64_t seq, const char *const *names,
			  const char *const *standing, size_t n)
{
	struct td_desired v[4];
	ck_assert_uint_le(n, 4);
	memset(v, 0, sizeof(v));
	for (size_t i = 0; i < n; i++) {
		snprintf(v[i].name, sizeof(v[i].name), "%s", names[i]);
		v[i].standing = (char *)(uintptr_t)standing[i];
	}
	size_t len = 0;
	char *rec = td_store_encode_record(seq, v, n, &len);
	ck_assert_ptr_nonnull(rec);
	FILE *f = fopen(path, "ab");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(rec, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
	free(rec);
}

static int count_in_dir(const char *needle)
{
	DIR *dp = opendir(tdir);
	ck_assert_ptr_nonnull(dp);
	int n = 0;
	for (struct dirent *de; (de = readdir(dp));)
		n += strncmp(de->d_name, needle, strlen(needle)) == 0;
	closedir(dp);
	return n;
}

/*
 * Saves append one record each; a new store replays them over the files; a
 * torn last record is cut off; a damaged one is refused, or folded into the
 * files with the journal set aside; past journal_max the next save rotates
 * the journal and a checkpoint writes the files of the old one's entries,
 * then removes it.
 */
START_TEST(test_journal)
{
	struct td_store s = { 0 }, r = { 0 };
	char err[512] = "", jpath[128], opath[128], p[192];
	make_tmpdir();
	in_dir(jpath, sizeof(jpath), "agents.journal");
	in_dir(opath, sizeof(opath), "agents.journal.old");
	s.journal = true;
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	fill_store(&s);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!entry_exists("alpha") && !entry_exists("beta"));
	off_t one = file_size(jpath);
	ck_assert_int_gt(one, 0);
	ck_assert_uint_eq(s.jsize, (uint64_t)one);
	struct td_desired *a = td_store_get(&s, "alpha", false);
	ck_assert(a->in_journal);
	ck_assert_int_eq(td_desired_set_standing(a, "alpha-2"), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	off_t two = file_size(jpath);
	ck_assert_int_gt(two, one);
	ck_assert_uint_eq(s.jseq, 3);

	/* Replayed in order: the later record wins. */
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_str_eq(td_store_get(&r, "alpha", false)->standing, "alpha-2");
	ck_assert_uint_eq(td_store_get(&r, "alpha", false)->n_plans, 2);
	ck_assert_uint_eq(td_store_get(&r, "beta", false)->plan_steps[1], 123456789012LL);
	ck_assert_str_eq(td_store_get(&r, "beta", false)->plan_specs[1],
			 "resid_post:* \"q\" \xc3\xa9\x01");
	ck_assert_str_eq(td_store_get(&r, GAMMA, false)->standing, "");
	ck_assert(td_store_get(&r, "beta", false)->in_journal);
	ck_assert_uint_eq(r.jsize, (uint64_t)two);
	ck_assert_uint_eq(r.jseq, 3); /* the sequence goes on where it was */
	td_store_free(&r);

	/* A torn last record (a crash in its write: never acknowledged) is cut off. */
	static const char *const alpha[] = { "alpha" }, *const torn[] = { "torn" };
	append_record(jpath, 3, alpha, torn, 1);
	ck_assert_int_eq(truncate(jpath, two + 30), 0);
	r.journal = true; /* td_store_free cleared it; without, a load folds the journal in */
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(td_store_get(&r, "alpha", false)->standing, "alpha-2");
	ck_assert_int_eq(file_size(jpath), two);
	ck_assert_uint_eq(r.quarantined, 0);
	td_store_free(&r);

	/* An intact record that is not valid state, then a good one: refused (strict) ... */
	char *too_long = repeat('a', TGP_MAX_SPEC + 1);
	const char *const bad_spec[] = { too_long };
	static const char *const after[] = { "after" };
	append_record(jpath, 3, alpha, bad_spec, 1);
	free(too_long);
	append_record(jpath, 4, alpha, after, 1);
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	/* The record after it sets alpha again: no agent is left with a damaged value. */
	ck_assert_msg(strstr(err, "agents.journal: record at byte") && strstr(err, "enabled") &&
		      strstr(err, "no agent affected"), "unclear error: %s", err);
	ck_assert_int_gt(file_size(jpath), two);
	/* ... or folded into the files, the record after it applied, the journal set aside. */
	r.quarantine = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(td_store_get(&r, "alpha", false)->standing, "after");
	ck_assert_uint_eq(r.quarantined, 1);
	ck_assert_uint_eq(r.checkpoints, 1);
	ck_assert(!exists(jpath));
	ck_assert_int_eq(count_in_dir("agents.journal.corrupt-"), 1);
	text_has_entry("alpha", "\"after\"");
	td_store_free(&r);
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(td_store_get(&r, "alpha", false)->standing, "after");
	ck_assert_uint_eq(r.quarantined, 0);

	/* Two entries with one name in one record: damaged as well. */
	static const char *const twice[] = { "x", "x" }, *const xy[] = { "x1", "y" };
	append_record(jpath, 9, twice, xy, 2);
	s.journal = true;
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "\"x\" twice"), "unclear error: %s", err);
	r.journal = true;
	r.quarantine = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_ptr_null(td_store_get(&r, "x", false));

	/* Past journal_max: the next save rotates the journal, the checkpoint writes the files. */
	r.journal_max = 1;
	struct td_desired *b = td_store_get(&r, "beta", false);
	ck_assert_int_eq(td_desired_set_standing(b, "beta-2"), 0);
	uint64_t ck0 = r.checkpoints; /* 1: the load folded the damaged journal in */
	ck_assert(!exists(jpath));
	ck_assert_int_eq(td_store_save(&r, tdir), 0); /* the first record of a new journal */
	ck_assert_uint_eq(r.checkpoints, ck0);
	ck_assert_int_eq(td_desired_set_standing(b, "beta-3"), 0);
	ck_assert_int_eq(td_store_save(&r, tdir), 0); /* rotates, then the checkpoint */
	ck_assert_uint_eq(r.checkpoints, ck0 + 1);
	ck_assert(!exists(opath));
	ck_assert(!r.old_present);
	off_t rec3 = file_size(jpath);
	ck_assert_int_gt(rec3, 0);
	ck_assert_uint_eq(r.jsize, (uint64_t)rec3); /* only beta-3's record */
	ck_assert(!td_store_get(&r, "alpha", false)->in_journal);
	ck_assert(td_store_get(&r, "beta", false)->in_journal);
	/* Its durable value when the checkpoint began: beta-3, which the new journal holds too. */
	text_has_entry("beta", "\"beta-3\"");
	ck_assert(!exists(in_agents(p, sizeof(p), "beta.json.tmp")));
	td_store_free(&s);
	s.journal = true;
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(td_store_get(&s, "beta", false)->standing, "beta-3");
	ck_assert_str_eq(td_store_get(&s, "alpha", false)->standing, "after");
	td_store_free(&s);
	td_store_free(&r);
	remove_tmpdir();
}
END_TEST

/*
 * A checkpoint runs beside the saves: begun (the old journal's entries
 * snapshotted), saves go on appending to the new journal while it runs,
 * and a load at any point sees the newest durable values: files, the old
 * journal, then the new one.
 */
START_TEST(test_checkpoint_beside_saves)
{
	struct td_store s = { 0 }, r = { 0 };
	char err[512] = "", opath[128];
	make_tmpdir();
	in_dir(opath, sizeof(opath), "agents.journal.old");
	s.journal = true;
	s.journal_max = 1;
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	struct td_desired *a = td_store_get(&s, "alpha", true);
	ck_assert_int_eq(td_desired_set_standing(a, "one"), 0);
	struct td_store_job *j = td_store_job_begin(&s, tdir);
	td_store_job_run(j);
	ck_assert_int_eq(td_store_job_end(&s, j, err, sizeof(err)), 0);
	ck_assert(!td_store_ckpt_due(&s));
	ck_assert_int_eq(td_desired_set_standing(a, "two"), 0);
	j = td_store_job_begin(&s, tdir); /* rotates: "one" is the old journal's */
	td_store_job_run(j);
	ck_assert_int_eq(td_store_job_end(&s, j, err, sizeof(err)), 0);
	ck_assert(s.old_present && exists(opath));
	ck_assert(td_store_ckpt_due(&s));
	struct td_store_job *ck = td_store_ckpt_begin(&s, tdir);
	ck_assert_ptr_nonnull(ck);
	ck_assert_uint_eq(td_store_job_entries(ck), 1);
	ck_assert(!td_store_ckpt_due(&s)); /* one at a time */
	/* Saves while the checkpoint is out: appended to the new journal, never rotated. */
	for (int i = 0; i < 3; i++) {
		char v[16];
		snprintf(v, sizeof(v), "three-%d", i);
		ck_assert_int_eq(td_desired_set_standing(a, v), 0);
		j = td_store_job_begin(&s, tdir);
		td_store_job_run(j);
		ck_assert_int_eq(td_store_job_end(&s, j, err, sizeof(err)), 0);
		ck_assert(exists(opath));
		/* A crash now: the newest value. */
		r.journal = true;
		ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
		ck_assert_str_eq(td_store_get(&r, "alpha", false)->standing, v);
		ck_assert(r.old_present);
		td_store_free(&r);
	}
	td_store_job_run(ck); /* writes "two" (durable when it began) to the file */
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(td_store_get(&r, "alpha", false)->standing, "three-2");
	td_store_free(&r);
	ck_assert_int_eq(td_store_ckpt_end(&s, ck, err, sizeof(err)), 0);
	ck_assert(!exists(opath) && !s.old_present);
	ck_assert_uint_eq(s.checkpoints, 1);
	text_has_entry("alpha", "\"two\"");
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(td_store_get(&r, "alpha", false)->standing, "three-2");
	td_store_free(&r);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* CRC32C's check value, and a record's checksums cover every byte of it. */
START_TEST(test_record_checksums)
{
	ck_assert_uint_eq(td_crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(td_crc32c(td_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
	struct td_desired v = { 0 };
	snprintf(v.name, sizeof(v.name), "alpha");
	v.standing = (char *)(uintptr_t)"resid_post:1";
	size_t len = 0;
	char *rec = td_store_encode_record(7, &v, 1, &len);
	ck_assert_ptr_nonnull(rec);
	ck_assert_mem_eq(rec, "\xffTJ\x02", 4);
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			struct td_store st = { 0 };
			struct td_journal_scan scan;
			char err[512];
			rec[i] ^= (char)(1 << bit);
			int rc = td_store_parse_journal("j", rec, len, 0, &st, &scan, err, sizeof(err));
			rec[i] ^= (char)(1 << bit);
			/* Damaged, or (a flip in the length) cut short: never applied. */
			ck_assert_msg(st.n == 0, "byte %zu bit %d: applied", i, bit);
			ck_assert_msg(rc == TOGGLE_EINVAL || scan.torn, "byte %zu bit %d: accepted", i, bit);
			td_store_free(&st);
		}
	}
	free(rec);
}
END_TEST

/* ---- store: keys of name and uid (issue 11, item 7) ----------------------- */

START_TEST(test_store_keys)
{
	struct td_store s = { 0 }, r = { 0 };
	char key[TD_MAX_KEY], err[256] = "";
	uint32_t me = (uint32_t)geteuid(), other = me == 65534 ? 1000 : 65534;
	/* The daemon's own uid keeps the plain name (the files of earlier versions). */
	ck_assert_int_eq(td_store_key(key, sizeof(key), "svc", me), 0);
	ck_assert_str_eq(key, "svc");
	ck_assert_int_eq(td_store_key(key, sizeof(key), "svc", other), 0);
	char want[32];
	snprintf(want, sizeof(want), "svc@%u", other);
	ck_assert_str_eq(key, want);
	char *longest = repeat('n', TGP_MAX_NAME - 1);
	ck_assert_int_eq(td_store_key(key, sizeof(key), longest, 4294967295u == me ? 0 : 4294967295u), 0);
	ck_assert_int_eq(td_store_key(key, sizeof(key), "a/b", other), TOGGLE_EINVAL);
	/* One spelling per key: every other form is refused. */
	static const char *const bad[] = {
		"svc@", "@5", "svc@01", "svc@4294967296", "svc@5@6", "svc@-1", "svc@ 5", ".@5",
		"..@5", "svc@12345678901",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(td_store_get(&s, bad[i], true) == NULL, "case %zu accepted", i);
	ck_assert_ptr_nonnull(td_store_get(&s, "svc@0", true));
	/* Two uids, one name: two entries, two files, loaded back apart. */
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_int_eq(td_desired_set_standing(td_store_get(&s, "svc", true), "mine"), 0);
	ck_assert_int_eq(td_desired_set_standing(td_store_get(&s, want, true), "theirs"), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(entry_exists("svc") && entry_exists(want));
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 2);
	ck_assert_str_eq(td_store_get(&r, "svc", false)->standing, "mine");
	ck_assert_str_eq(td_store_get(&r, want, false)->standing, "theirs");
	free(longest);
	td_store_free(&r);
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* ---- store: a corrupt file is set aside (issue 11, item 9) --------------- */

START_TEST(test_quarantine)
{
	struct td_store s = { 0 };
	char err[512] = "", p[192];
	make_tmpdir();
	make_agents_dir();
	write_entry("good", "{\"format\": 1, \"name\": \"good\", \"enabled\": \"x\"}");
	write_entry("broken", "{\"format\": 1,\n  \"name\": ,}\n");
	/* Valid up to its plans: nothing of it may be loaded. */
	write_entry("half", "{\"format\": 1, \"name\": \"half\", \"enabled\": \"y\", \"plans\": 3}");
	write_text(in_agents(p, sizeof(p), "a b.json"), "{}");
	s.quarantine = true;
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert(s.quarantine); /* kept across the load */
	ck_assert_uint_eq(s.n, 1);
	ck_assert_str_eq(td_store_get(&s, "good", false)->standing, "x");
	ck_assert_ptr_null(td_store_get(&s, "half", false));
	ck_assert_uint_eq(s.quarantined, 3);
	ck_assert(!entry_exists("broken") && !entry_exists("half"));
	ck_assert(!exists(in_agents(p, sizeof(p), "a b.json")));
	/* Set aside under a name the next load skips, with the content kept. */
	DIR *dp = opendir(in_dir(p, sizeof(p), "agents"));
	ck_assert_ptr_nonnull(dp);
	int aside = 0;
	for (struct dirent *de; (de = readdir(dp));) {
		if (!strstr(de->d_name, ".json.corrupt-"))
			continue;
		aside++;
		if (strncmp(de->d_name, "broken.json.corrupt-", 20) == 0) {
			char q[PATH_MAX];
			char *text = read_text(in_agents(q, sizeof(q), de->d_name));
			ck_assert_str_eq(text, "{\"format\": 1,\n  \"name\": ,}\n");
			free(text);
		}
	}
	closedir(dp);
	ck_assert_int_eq(aside, 3);
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_uint_eq(s.quarantined, 0);
	/* The strict behaviour is still there (quarantine off). */
	write_entry("broken", "{");
	s.quarantine = false;
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert(entry_exists("broken"));
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/* ---- store: empty entries lose their file --------------------------------- */

START_TEST(test_empty_entry_unlinked)
{
	struct td_store s = { 0 }, r = { 0 };
	char err[256] = "", p[192];
	make_tmpdir();
	ck_assert_int_eq(td_store_load(&s, tdir, err, sizeof(err)), 0);
	fill_store(&s);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ino_t b0 = entry_ino("beta");

	/* alpha emptied (no standing set, no plans): its file goes, the entry may stay. */
	struct td_desired *a = td_store_get(&s, "alpha", false);
	ck_assert_int_eq(td_desired_set_standing(a, NULL), 0);
	ck_assert_int_eq(td_desired_set_plans(a, NULL, NULL, 0), 0);
	ck_assert(a->dirty);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!a->dirty);
	ck_assert(!entry_exists("alpha"));
	ck_assert_uint_eq(entry_ino("beta"), b0);
	ck_assert_ptr_eq(td_store_get(&s, "alpha", false), a);
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 2);
	ck_assert_ptr_null(td_store_get(&r, "alpha", false));
	td_store_free(&r);

	/* An empty entry that never had a file: nothing to remove, not an error. */
	struct td_desired *e = td_store_get(&s, "epsilon", true);
	ck_assert_int_eq(td_desired_set_standing(e, "x"), 0);
	ck_assert_int_eq(td_desired_set_standing(e, NULL), 0);
	ck_assert(e->dirty);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(!e->dirty);
	ck_assert(!entry_exists("epsilon"));

	/* "" is a standing set (nothing enabled), not an empty entry: it keeps its file. */
	struct td_desired *g = td_store_get(&s, GAMMA, false);
	ck_assert_str_eq(g->standing, "");
	ck_assert_uint_eq(g->n_plans, 0);
	g->dirty = true;
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	ck_assert(entry_exists(GAMMA));

	/* Removing fails (beta.json became a non-empty directory): beta stays dirty. */
	struct td_desired *b = td_store_get(&s, "beta", false);
	char sub[224];
	ck_assert_int_eq(unlink(entry_path(p, sizeof(p), "beta")), 0);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	snprintf(sub, sizeof(sub), "%s/sub", p);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(td_desired_set_plans(b, NULL, NULL, 0), 0);
	ck_assert_int_eq(td_store_save(&s, tdir), TOGGLE_EIO);
	ck_assert(b->dirty);
	ck_assert(s.dirty);
	ck_assert(exists(sub));
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

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
	/* Names become file names: [A-Za-z0-9_.-] only, 1 to 63 bytes, not "." or "..". */
	static const char *const bad[] = {
		"", ".", "..", "a/b", "../x", "a b", "a\\b", "a:b", "a\nb", "caf\xc3\xa9",
		"\xf0\x9f\x98\x80", "bad\xff", "bad\xc0\xaf",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(td_store_get(&s, bad[i], true) == NULL, "case %zu accepted", i);
	ck_assert_ptr_null(td_store_get(&s, too_long, true));
	ck_assert_ptr_null(td_store_get(&s, NULL, true));
	ck_assert_uint_eq(s.n, 0);
	struct td_desired *dd = td_store_get(&s, longest, true);
	ck_assert_ptr_nonnull(dd);
	ck_assert_str_eq(dd->name, longest);
	ck_assert_ptr_nonnull(td_store_get(&s, "...", true));
	ck_assert_ptr_nonnull(td_store_get(&s, ".a", true));
	ck_assert_ptr_nonnull(td_store_get(&s, "A-z_0.9", true));
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
	ck_assert(dd->dirty && s.dirty);
	dd->dirty = s.dirty = false;
	ck_assert_int_eq(td_desired_set_standing(dd, over), TOGGLE_EINVAL);
	ck_assert_int_eq(td_desired_set_standing(dd, "bad\xff"), TOGGLE_EINVAL);
	ck_assert_str_eq(dd->standing, "one"); /* a refused value changes nothing */
	ck_assert(!dd->dirty && !s.dirty);     /* ...and marks nothing */
	ck_assert_int_eq(td_desired_set_standing(dd, max), 0);
	ck_assert_uint_eq(strlen(dd->standing), TGP_MAX_SPEC);
	ck_assert_int_eq(td_desired_set_standing(dd, NULL), 0);
	ck_assert_ptr_null(dd->standing);
	ck_assert(dd->dirty && s.dirty);
	dd->dirty = s.dirty = false;
	ck_assert_int_eq(td_desired_set_standing(dd, NULL), 0); /* unchanged */
	ck_assert(!dd->dirty && !s.dirty);
	ck_assert_int_eq(td_desired_set_standing(dd, ""), 0); /* "" is not NULL */
	ck_assert(dd->dirty && s.dirty);
	ck_assert_int_eq(td_desired_set_standing(NULL, "x"), TOGGLE_EINVAL);

	set_plans2(dd, 3, "p3", 4, "p4");
	dd->dirty = s.dirty = false;
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
	/* All refused: the old list is intact, and not marked. */
	ck_assert_uint_eq(dd->n_plans, 2);
	ck_assert_int_eq(dd->plan_steps[1], 4);
	ck_assert_str_eq(dd->plan_specs[1], "p4");
	ck_assert(!dd->dirty && !s.dirty);
	/* The same list again: unchanged, not marked; one spec differs: marked. */
	set_plans2(dd, 3, "p3", 4, "p4");
	ck_assert(!dd->dirty && !s.dirty);
	set_plans2(dd, 3, "p3", 4, "p5");
	ck_assert(dd->dirty && s.dirty);

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

/*
 * A state file's JSON syntax error is reported with jansson's text, which
 * quotes the bad token: bytes of the file.  They reach the log cleaned,
 * like every other text from a state file (found by fuzz_store's author).
 */
static void assert_clean(const char *what, const char *err)
{
	ck_assert_msg(err[0] != '\0', "%s: no error text", what);
	for (const unsigned char *c = (const unsigned char *)err; *c; c++)
		ck_assert_msg(*c >= 0x20 && *c < 0x7f, "%s: byte 0x%02x in the error: %s", what, *c,
			      err);
}

START_TEST(test_parse_error_text_clean)
{
	static const char entry[] = "{\"format\": 1, \"name\": \x1b[31m}";
	static const char journal[] = "{\"x\": \x1b[2J\x07}\n";
	struct td_store st = { 0 };
	char err[512];
	ck_assert_int_ne(td_store_parse_file("x.json", "x", entry, sizeof(entry) - 1, &st, err,
					     sizeof(err)), 0);
	assert_clean("entry file", err);
	td_store_free(&st);
	struct td_journal_scan scan;
	memset(&st, 0, sizeof(st));
	err[0] = '\0';
	td_store_parse_journal("agents.journal", journal, sizeof(journal) - 1, 0, &st, &scan, err,
			       sizeof(err));
	ck_assert_msg(scan.corrupt, "a record that is not JSON was accepted");
	assert_clean("journal", err);
	td_store_free(&st);
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
		TU_SKIP(TU_SKIP_ENV, "no account other than root and the test's own user here");
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
		TU_SKIP(TU_SKIP_ROOT, "needs root to make a process of uid 54321 with chosen groups");
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
	tcase_add_test(tc, test_only_dirty_rewritten);
	tcase_add_test(tc, test_save_cost_follows_changes);
	tcase_add_test(tc, test_save_failure_keeps_entry_dirty);
	tcase_add_test(tc, test_empty_entry_unlinked);
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
	tcase_add_test(tc, test_get_bound);
	tcase_add_test(tc, test_get_bad_names);
	tcase_add_test(tc, test_setters);
	tcase_add_test(tc, test_job_group_commit);
	tcase_add_test(tc, test_save_full_disk);
	tcase_add_test(tc, test_store_keys);
	tcase_add_test(tc, test_journal);
	tcase_add_test(tc, test_checkpoint_beside_saves);
	tcase_add_test(tc, test_record_checksums);
	tcase_add_test(tc, test_quarantine);
	tcase_add_test(tc, test_parse_error_text_clean);
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
