/*
 * check_store_entries.c - the store's entries and their setters
 * (daemon/store.c): the lookup bound, bad names, the setters, clean parse
 * error text.
 * The temporary state directory and the file helpers are the store suites'
 * fixture (tests/fixture_store.h).  Split out of check_store.c (issue 29).
 */
#include "fixture_store.h"

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

static Suite *store_entries_suite(void)
{
	Suite *s = suite_create("store_entries");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_get_bound);
	tcase_add_test(tc, test_get_bad_names);
	tcase_add_test(tc, test_setters);
	tcase_add_test(tc, test_parse_error_text_clean);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(store_entries_suite());
}
