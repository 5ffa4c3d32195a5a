/*
 * check_store_journal.c - the store's journal (daemon/store.c): records,
 * checkpoints beside saves, checksums, keys of name and uid, a corrupt
 * file set aside.
 * The temporary state directory and the file helpers are the store suites'
 * fixture (tests/fixture_store.h).  Split out of check_store.c (issue 29).
 */
#include "fixture_store.h"

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

/*
 * A format-2 journal that lost its first header (bytes gone at its start) begins
 * with that record's JSON: it is still read as format 2, so the payload without
 * its checksums is damage, never applied, and the records after it are (fuzz_store
 * found the old first-byte rule reading it as format 1: the unchecked payload
 * applied, every later record refused).
 */
START_TEST(test_journal_lost_first_header)
{
	struct td_desired v = { 0 };
	snprintf(v.name, sizeof(v.name), "alpha");
	v.standing = (char *)(uintptr_t)"resid_post:1";
	size_t l1 = 0, l2 = 0;
	char *r1 = td_store_encode_record(1, &v, 1, &l1);
	snprintf(v.name, sizeof(v.name), "beta");
	v.standing = (char *)(uintptr_t)"mlp_out:2";
	char *r2 = td_store_encode_record(2, &v, 1, &l2);
	ck_assert_ptr_nonnull(r1);
	ck_assert_ptr_nonnull(r2);
	ck_assert_uint_gt(l1, 24);
	char *j = malloc(l1 + l2);
	ck_assert_ptr_nonnull(j);
	memcpy(j, r1 + 24, l1 - 24); /* the first record without its 24-byte header */
	memcpy(j + l1 - 24, r2, l2);
	ck_assert_int_eq(j[0], '{');
	struct td_store st = { 0 };
	struct td_journal_scan scan;
	char err[512] = "";
	int rc = td_store_parse_journal("j", j, l1 - 24 + l2, 0, &st, &scan, err, sizeof(err));
	ck_assert_int_eq(rc, TOGGLE_EINVAL);
	ck_assert_int_eq(scan.format, 2);
	ck_assert(scan.corrupt);
	ck_assert_uint_eq(scan.records, 1);
	ck_assert_ptr_null(td_store_get(&st, "alpha", false)); /* unchecked: not applied */
	struct td_desired *b = td_store_get(&st, "beta", false);
	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(b->standing, "mlp_out:2");
	ck_assert_msg(strstr(err, "not a record") != NULL, "%s", err);
	td_store_free(&st);

	/* A format-1 journal (JSON lines, before issue 30) is still read as one. */
	static const char v1[] = "{\"entries\":[{\"enabled\":\"resid_post:3\",\"format\":1,"
				 "\"name\":\"gamma\",\"plans\":[]}],\"format\":1}\n";
	memset(&st, 0, sizeof(st));
	ck_assert_int_eq(td_store_parse_journal("j", v1, strlen(v1), 0, &st, &scan, err,
						sizeof(err)), 0);
	ck_assert_int_eq(scan.format, 1);
	ck_assert_uint_eq(scan.records, 1);
	struct td_desired *g = td_store_get(&st, "gamma", false);
	ck_assert_ptr_nonnull(g);
	ck_assert_str_eq(g->standing, "resid_post:3");
	td_store_free(&st);
	free(j);
	free(r1);
	free(r2);
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

static Suite *store_journal_suite(void)
{
	Suite *s = suite_create("store_journal");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_store_keys);
	tcase_add_test(tc, test_journal);
	tcase_add_test(tc, test_checkpoint_beside_saves);
	tcase_add_test(tc, test_record_checksums);
	tcase_add_test(tc, test_journal_lost_first_header);
	tcase_add_test(tc, test_quarantine);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(store_journal_suite());
}
