/*
 * check_store_save.c - the daemon's persisted desired state (daemon/store.c):
 * one file per agent name under <state_dir>/agents/, round trip and file
 * layout, only changed entries rewritten, a save all or nothing, the
 * daemon's group commit, a full disk, empty entries unlinked.
 * The temporary state directory and the file helpers are the store suites'
 * fixture (tests/fixture_store.h).  Split out of check_store.c (issue 29).
 */
#include "fixture_store.h"

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

static Suite *store_save_suite(void)
{
	Suite *s = suite_create("store_save");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_roundtrip);
	tcase_add_test(tc, test_file_shape);
	tcase_add_test(tc, test_only_dirty_rewritten);
	tcase_add_test(tc, test_save_cost_follows_changes);
	tcase_add_test(tc, test_save_failure_keeps_entry_dirty);
	tcase_add_test(tc, test_empty_entry_unlinked);
	tcase_add_test(tc, test_job_group_commit);
	tcase_add_test(tc, test_save_full_disk);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(store_save_suite());
}
