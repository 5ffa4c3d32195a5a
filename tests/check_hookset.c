/*
 * check_hookset.c - tests of hook sets, catalog validation, the hook spec
 * parser and the canonical formatter (libtoggle/src/hookset.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"

static const char *const std_names[] = { "resid_post", "attn_out", "mlp_out" };
static const struct toggle_catalog std_cat = { std_names, 3, 32 };

static struct toggle_hook hk(unsigned type, unsigned layer)
{
	return (struct toggle_hook){ (uint16_t)type, (uint16_t)layer };
}

/* Add layers lo..hi (inclusive) of one type, checking every add succeeds. */
static void add_range(struct toggle_set *s, unsigned type, unsigned lo, unsigned hi)
{
	for (unsigned l = lo; l <= hi; l++)
		ck_assert_int_eq(toggle_set_add(s, hk(type, l)), 0);
}

/* A catalog whose names live with it: the full-size one, or a random one. */
struct test_cat {
	char names[TOGGLE_MAX_HOOK_TYPES][24];
	const char *ptrs[TOGGLE_MAX_HOOK_TYPES];
	struct toggle_catalog cat;
};

/* Every type and layer there is, types named t0..t31. */
static void big_catalog(struct test_cat *tc)
{
	for (unsigned i = 0; i < TOGGLE_MAX_HOOK_TYPES; i++) {
		snprintf(tc->names[i], sizeof(tc->names[i]), "t%u", i);
		tc->ptrs[i] = tc->names[i];
	}
	tc->cat = (struct toggle_catalog){ tc->ptrs, TOGGLE_MAX_HOOK_TYPES, TOGGLE_MAX_LAYERS };
}

/* A set that no parse result can equal: used to see *out left untouched. */
static void poison(struct toggle_set *s)
{
	memset(s, 0xa5, sizeof(*s));
}

/* ---- bitmap ------------------------------------------------------------- */

START_TEST(test_add_contains_count)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	ck_assert_uint_eq(toggle_set_count(&s), 0);
	ck_assert_int_eq(toggle_set_add(&s, hk(1, 5)), 0);
	ck_assert(toggle_set_contains(&s, hk(1, 5)));
	ck_assert(!toggle_set_contains(&s, hk(1, 4)));
	ck_assert(!toggle_set_contains(&s, hk(1, 6)));
	ck_assert(!toggle_set_contains(&s, hk(0, 5)));
	ck_assert(!toggle_set_contains(&s, hk(2, 5)));
	ck_assert_uint_eq(toggle_set_count(&s), 1);
	ck_assert_int_eq(toggle_set_add(&s, hk(1, 5)), 0); /* adding twice is one hook */
	ck_assert_uint_eq(toggle_set_count(&s), 1);
	ck_assert_int_eq(toggle_set_add(&s, hk(31, 255)), 0);
	ck_assert_int_eq(toggle_set_add(&s, hk(0, 0)), 0);
	ck_assert_uint_eq(toggle_set_count(&s), 3);
	ck_assert(toggle_set_contains(&s, hk(31, 255)));
	ck_assert(toggle_set_contains(&s, hk(0, 0)));
	toggle_set_clear(&s);
	ck_assert_uint_eq(toggle_set_count(&s), 0);
	ck_assert(!toggle_set_contains(&s, hk(1, 5)));
}
END_TEST

/* The documented layout: index = type * TOGGLE_MAX_LAYERS + layer. */
START_TEST(test_index_layout)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	toggle_set_add(&s, hk(0, 63));
	toggle_set_add(&s, hk(0, 64));
	toggle_set_add(&s, hk(1, 0));
	toggle_set_add(&s, hk(31, 255));
	ck_assert(s.bits[0] == UINT64_C(1) << 63);
	ck_assert(s.bits[1] == 1);
	ck_assert(s.bits[TOGGLE_MAX_LAYERS / 64] == 1);
	ck_assert(s.bits[TOGGLE_MAX_HOOKS / 64 - 1] == UINT64_C(1) << 63);
	ck_assert_uint_eq(toggle_set_count(&s), 4);
}
END_TEST

START_TEST(test_range_errors)
{
	struct toggle_set s, before;
	toggle_set_clear(&s);
	add_range(&s, 0, 0, 3);
	before = s;
	ck_assert_int_eq(toggle_set_add(&s, hk(TOGGLE_MAX_HOOK_TYPES, 0)), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_set_add(&s, hk(0, TOGGLE_MAX_LAYERS)), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_set_add(&s, hk(65535, 65535)), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_set_remove(&s, hk(TOGGLE_MAX_HOOK_TYPES, 0)), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_set_remove(&s, hk(0, TOGGLE_MAX_LAYERS)), TOGGLE_ERANGE);
	ck_assert(toggle_set_equal(&s, &before));
	/* An out-of-space hook is in no set; a wrong index would alias (1,0). */
	toggle_set_add(&s, hk(1, 0));
	ck_assert(!toggle_set_contains(&s, hk(0, TOGGLE_MAX_LAYERS)));
	ck_assert(!toggle_set_contains(&s, hk(TOGGLE_MAX_HOOK_TYPES, 0)));
	ck_assert_int_eq(toggle_set_add(NULL, hk(0, 0)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_remove(NULL, hk(0, 0)), TOGGLE_EINVAL);
}
END_TEST

START_TEST(test_remove)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	add_range(&s, 2, 10, 12);
	ck_assert_int_eq(toggle_set_remove(&s, hk(2, 11)), 0);
	ck_assert(!toggle_set_contains(&s, hk(2, 11)));
	ck_assert(toggle_set_contains(&s, hk(2, 10)));
	ck_assert(toggle_set_contains(&s, hk(2, 12)));
	ck_assert_uint_eq(toggle_set_count(&s), 2);
	ck_assert_int_eq(toggle_set_remove(&s, hk(2, 11)), 0); /* absent: no error */
	ck_assert_int_eq(toggle_set_remove(&s, hk(5, 200)), 0);
	ck_assert_uint_eq(toggle_set_count(&s), 2);
}
END_TEST

START_TEST(test_equal)
{
	struct toggle_set a, b;
	toggle_set_clear(&a);
	toggle_set_clear(&b);
	ck_assert(toggle_set_equal(&a, &b));
	toggle_set_add(&a, hk(31, 255)); /* the very last word */
	ck_assert(!toggle_set_equal(&a, &b));
	ck_assert(!toggle_set_equal(&b, &a));
	toggle_set_add(&b, hk(31, 255));
	ck_assert(toggle_set_equal(&a, &b));
	toggle_set_add(&a, hk(0, 0)); /* the very first word */
	ck_assert(!toggle_set_equal(&a, &b));
}
END_TEST

START_TEST(test_union_subtract)
{
	struct toggle_set a, b, c;
	toggle_set_clear(&a);
	toggle_set_clear(&b);
	add_range(&a, 0, 0, 9);
	add_range(&b, 0, 5, 14);
	add_range(&b, 31, 250, 255);

	c = a;
	toggle_set_union(&c, &b);
	ck_assert_uint_eq(toggle_set_count(&c), 21);
	ck_assert(toggle_set_contains(&c, hk(0, 0)));
	ck_assert(toggle_set_contains(&c, hk(0, 14)));
	ck_assert(toggle_set_contains(&c, hk(31, 255)));
	ck_assert(!toggle_set_contains(&c, hk(0, 15)));

	c = a;
	toggle_set_subtract(&c, &b);
	ck_assert_uint_eq(toggle_set_count(&c), 5);
	ck_assert(toggle_set_contains(&c, hk(0, 4)));
	ck_assert(!toggle_set_contains(&c, hk(0, 5)));
	ck_assert(toggle_set_equal(&a, &a));

	c = a; /* aliasing: x | x = x, x - x = {} */
	toggle_set_union(&c, &c);
	ck_assert(toggle_set_equal(&c, &a));
	toggle_set_subtract(&c, &c);
	ck_assert_uint_eq(toggle_set_count(&c), 0);
}
END_TEST

START_TEST(test_fill)
{
	struct toggle_set s;
	poison(&s); /* fill replaces, it does not add */
	toggle_set_fill(&s, &std_cat);
	ck_assert_uint_eq(toggle_set_count(&s), 3 * 32);
	ck_assert(toggle_set_contains(&s, hk(0, 0)));
	ck_assert(toggle_set_contains(&s, hk(2, 31)));
	ck_assert(!toggle_set_contains(&s, hk(2, 32)));
	ck_assert(!toggle_set_contains(&s, hk(3, 0)));

	/* Word boundaries of the per-type span. */
	static const uint16_t layers[] = { 1, 63, 64, 65, 127, 128, 200, 255, 256 };
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
		struct toggle_catalog cat = { std_names, 3, layers[i] };
		toggle_set_fill(&s, &cat);
		ck_assert_uint_eq(toggle_set_count(&s), 3u * layers[i]);
		ck_assert(toggle_set_contains(&s, hk(2, layers[i] - 1u)));
		ck_assert(!toggle_set_contains(&s, hk(2, layers[i])));
		ck_assert(!toggle_set_contains(&s, hk(3, 0)));
		ck_assert_int_eq(toggle_catalog_check_set(&cat, &s), 0);
	}
}
END_TEST

START_TEST(test_check_set)
{
	struct toggle_set s;
	toggle_set_fill(&s, &std_cat);
	ck_assert_int_eq(toggle_catalog_check_set(&std_cat, &s), 0);
	toggle_set_clear(&s);
	ck_assert_int_eq(toggle_catalog_check_set(&std_cat, &s), 0);
	toggle_set_add(&s, hk(0, 32));
	ck_assert_int_eq(toggle_catalog_check_set(&std_cat, &s), TOGGLE_ERANGE);
	toggle_set_clear(&s);
	toggle_set_add(&s, hk(3, 0));
	ck_assert_int_eq(toggle_catalog_check_set(&std_cat, &s), TOGGLE_ERANGE);
	toggle_set_clear(&s);
	toggle_set_add(&s, hk(31, 255));
	ck_assert_int_eq(toggle_catalog_check_set(&std_cat, &s), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_catalog_check_set(NULL, &s), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_catalog_check_set(&std_cat, NULL), TOGGLE_EINVAL);
}
END_TEST

/* ---- catalog validation ------------------------------------------------- */

#define A63 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const char *const v_null_name[] = { "a", NULL };
static const char *const v_empty[] = { "a", "" };
static const char *const v_long[] = { "a", A63 "a" };
static const char *const v_dash[] = { "attn-out" };
static const char *const v_space[] = { "ok", "a b" };
static const char *const v_utf8[] = { "caf\xc3\xa9" };
static const char *const v_all[] = { "x", "all" };
static const char *const v_none[] = { "none" };
static const char *const v_star[] = { "*" };
static const char *const v_dup[] = { "a", "b", "a" };
static const char *const v_colon[] = { "a:b" };

struct bad_catalog {
	struct toggle_catalog cat;
	const char *want; /* substring the error text must hold */
};

static const struct bad_catalog bad_catalogs[] = {
	{ { std_names, 0, 32 }, "0 hook types (expected 1-32)" },
	{ { std_names, 33, 32 }, "33 hook types" },
	{ { std_names, 3, 0 }, "0 layers (expected 1-256)" },
	{ { std_names, 3, 257 }, "257 layers" },
	{ { NULL, 3, 32 }, "type_names is NULL" },
	{ { v_null_name, 2, 4 }, "hook type name 1 is NULL" },
	{ { v_empty, 2, 4 }, "hook type name 1 is empty" },
	{ { v_long, 2, 4 }, "hook type name 1 'aaaa" },
	{ { v_long, 2, 4 }, "too long" },
	{ { v_dash, 1, 4 }, "'attn-out' has invalid character '-'" },
	{ { v_space, 2, 4 }, "'a b' has invalid character ' '" },
	{ { v_utf8, 1, 4 }, "'caf\\xc3\\xa9' has invalid character '\\xc3'" },
	{ { v_colon, 1, 4 }, "invalid character ':'" },
	{ { v_all, 2, 4 }, "hook type name 1 'all' is reserved" },
	{ { v_none, 1, 4 }, "'none' is reserved" },
	{ { v_star, 1, 4 }, "'*' is reserved" },
	{ { v_dup, 3, 4 }, "hook type name 2 'a' duplicates name 0" },
};

START_TEST(test_validate_bad)
{
	const struct bad_catalog *b = &bad_catalogs[_i];
	char err[256];
	ck_assert_int_eq(toggle_catalog_validate(&b->cat, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, b->want) != NULL, "error '%s' lacks '%s'", err, b->want);
	/* No buffer: same verdict, no write. */
	ck_assert_int_eq(toggle_catalog_validate(&b->cat, NULL, 0), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_catalog_validate(&b->cat, err, 0), TOGGLE_EINVAL);
}
END_TEST

START_TEST(test_validate_good)
{
	static const char *const n63[] = { A63, "A.b_9", "ALL", "7" };
	struct test_cat big;
	char err[128] = "stale";

	ck_assert_int_eq(toggle_catalog_validate(&std_cat, err, sizeof(err)), 0);
	ck_assert_int_eq(toggle_catalog_validate(&(struct toggle_catalog){ n63, 4, 1 }, err,
						 sizeof(err)), 0);
	big_catalog(&big);
	ck_assert_int_eq(toggle_catalog_validate(&big.cat, err, sizeof(err)), 0);
	ck_assert_int_eq(toggle_catalog_validate(NULL, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "NULL"));
}
END_TEST

START_TEST(test_validate_truncates)
{
	char err[8];
	memset(err, 'X', sizeof(err));
	ck_assert_int_eq(toggle_catalog_validate(&bad_catalogs[0].cat, err, 5), TOGGLE_EINVAL);
	ck_assert_uint_eq(strlen(err), 4);
	ck_assert_int_eq(err[5], 'X'); /* nothing written past errlen */
	ck_assert_int_eq(toggle_catalog_validate(&bad_catalogs[0].cat, err, 1), TOGGLE_EINVAL);
	ck_assert_str_eq(err, "");
}
END_TEST

/* ---- parser: accepted forms --------------------------------------------- */

static void parse_ok(const struct toggle_catalog *cat, const char *spec,
		     const struct toggle_set *want)
{
	struct toggle_set out;
	char err[256];
	poison(&out);
	int rc = toggle_set_parse(cat, spec, &out, err, sizeof(err));
	ck_assert_msg(rc == 0, "parse '%s': %d (%s)", spec, rc, err);
	ck_assert_msg(toggle_set_equal(&out, want), "parse '%s': wrong set (%zu hooks)", spec,
		      toggle_set_count(&out));
}

START_TEST(test_parse_keywords)
{
	struct toggle_set none, all;
	toggle_set_clear(&none);
	toggle_set_fill(&all, &std_cat);
	parse_ok(&std_cat, "none", &none);
	parse_ok(&std_cat, "  none\t", &none);
	parse_ok(&std_cat, "all", &all);
	parse_ok(&std_cat, "\n all ", &all);
	parse_ok(&std_cat, "*", &all);
	parse_ok(&std_cat, "*:*", &all);
	parse_ok(&std_cat, "resid_post,attn_out,mlp_out", &all);
	parse_ok(&std_cat, "mlp_out:*,resid_post:0-31,attn_out", &all);
}
END_TEST

START_TEST(test_parse_items)
{
	struct toggle_set w;

	toggle_set_clear(&w);
	add_range(&w, 0, 0, 31);
	parse_ok(&std_cat, "resid_post", &w);
	parse_ok(&std_cat, "resid_post:*", &w);
	parse_ok(&std_cat, "resid_post:0-31", &w);

	toggle_set_clear(&w);
	add_range(&w, 2, 5, 5);
	parse_ok(&std_cat, "mlp_out:5", &w);
	parse_ok(&std_cat, "mlp_out:5-5", &w);
	parse_ok(&std_cat, "mlp_out:005", &w);

	toggle_set_clear(&w);
	add_range(&w, 0, 0, 3);
	add_range(&w, 0, 8, 8);
	add_range(&w, 1, 0, 31);
	add_range(&w, 2, 31, 31);
	parse_ok(&std_cat, "resid_post:0-3,resid_post:8,attn_out:*,mlp_out:31", &w);
	/* order and overlap do not matter: items are a union */
	parse_ok(&std_cat, "mlp_out:31,attn_out,resid_post:8,resid_post:2-3,resid_post:0-2", &w);

	toggle_set_clear(&w);
	add_range(&w, 0, 2, 2);
	add_range(&w, 1, 2, 2);
	add_range(&w, 2, 2, 2);
	parse_ok(&std_cat, "*:2", &w);

	toggle_set_clear(&w);
	for (unsigned t = 0; t < 3; t++)
		add_range(&w, t, 30, 31);
	parse_ok(&std_cat, "*:30-31", &w);
}
END_TEST

START_TEST(test_parse_whitespace)
{
	struct toggle_set w;
	toggle_set_clear(&w);
	add_range(&w, 0, 1, 2);
	add_range(&w, 2, 7, 7);
	add_range(&w, 1, 0, 31);
	parse_ok(&std_cat, " \tresid_post : 1 - 2 ,\n mlp_out:7 , attn_out : * \r\n", &w);
	parse_ok(&std_cat, "resid_post:1-2,mlp_out:7,attn_out:*", &w);
}
END_TEST

/* Names may look like numbers; the catalog decides what a TYPE is. */
START_TEST(test_parse_odd_names)
{
	static const char *const names[] = { "7", "x.y", "ALL" };
	struct toggle_catalog cat = { names, 3, 10 };
	struct toggle_set w;

	toggle_set_clear(&w);
	add_range(&w, 0, 3, 3);
	add_range(&w, 1, 9, 9);
	parse_ok(&cat, "7:3,x.y:9", &w);
	toggle_set_clear(&w);
	add_range(&w, 0, 0, 9);
	parse_ok(&cat, "7", &w);
	toggle_set_clear(&w);
	add_range(&w, 2, 0, 9);
	parse_ok(&cat, "ALL", &w); /* keywords are case-sensitive */
}
END_TEST

/* ---- parser: errors ----------------------------------------------------- */

struct bad_spec {
	const char *spec;
	const char *want; /* substring of the error text: the bad token and the expectation */
};

static const struct bad_spec bad_specs[] = {
	{ "", "empty hook spec (expected none, all or TYPE[:LAYERS],...)" },
	{ " \t ", "empty hook spec" },
	{ "resid_pots", "unknown hook type 'resid_pots' (known: resid_post, attn_out, mlp_out)" },
	{ "ALL", "unknown hook type 'ALL'" },
	{ "resid post", "unknown hook type 'resid'" },
	{ "resid_post:40", "layer 40 out of range for 'resid_post' (layers 0-31)" },
	{ "resid_post:32", "layer 32 out of range for 'resid_post'" },
	{ "attn_out:0-32", "layer 32 out of range for 'attn_out'" },
	{ "*:40", "layer 40 out of range for '*' (layers 0-31)" },
	{ "resid_post:99999999999999999999999", "layer 99999999999999999999999 out of range" },
	{ "resid_post:4294967296", "layer 4294967296 out of range" },
	{ "resid_post:1-18446744073709551617", "layer 18446744073709551617 out of range" },
	{ "resid_post:7-3", "bad layer range '7-3' (expected N, N-M with N<=M, or *)" },
	{ "resid_post: 7 - 3 ", "bad layer range '7 - 3' (expected" },
	{ "resid_post:3-", "bad layer range '3-' (expected" },
	{ "resid_post:3-*", "bad layer range '3-*'" },
	{ "resid_post:3--4", "bad layer range '3--'" },
	{ "resid_post:0x1f", "bad layer '0x1f' (expected N, N-M with N<=M, or *)" },
	{ "resid_post:1.5", "bad layer '1.5'" },
	{ "resid_post:1e3", "bad layer '1e3'" },
	{ "resid_post:1-x", "bad layer 'x'" },
	{ "resid_post:1,,attn_out:2", "empty item at offset 13" },
	{ "resid_post:1,", "empty item at offset 13" },
	{ "resid_post:1, ", "empty item at offset 14" },
	{ ",resid_post", "empty item at offset 0" },
	{ ",", "empty item at offset 0" },
	{ "attn_out , , mlp_out", "empty item at offset 11" },
	{ "all,resid_post", "'all' at offset 0 must be the whole spec" },
	{ "resid_post,all", "'all' at offset 11 must be the whole spec" },
	{ "none:3", "'none' at offset 0 must be the whole spec" },
	{ "all all", "'all' at offset 0 must be the whole spec" },
	{ "resid_post:", "unexpected end of spec at offset 11 (expected layers" },
	{ "resid_post:,mlp_out", "unexpected ',' at offset 11 (expected layers" },
	{ "resid_post:-1", "unexpected '-' at offset 11 (expected layers" },
	{ "resid_post:+1", "unexpected '+' at offset 11" },
	{ "resid_post:1:2", "unexpected ':' at offset 12 (expected ',' or end of spec)" },
	{ "resid_post:*-3", "unexpected '-' at offset 12 (expected ',' or end of spec)" },
	{ "resid_post:1-2-3", "unexpected '-' at offset 14" },
	{ "resid_post:1 2", "unexpected '2' at offset 13" },
	{ "resid_post 3", "unexpected '3' at offset 11 (expected ':', ',' or end of spec)" },
	{ "resid_post-3", "unexpected '-' at offset 10 (expected ':', ',' or end of spec)" },
	{ ":3", "unexpected ':' at offset 0 (expected a hook type or '*')" },
	{ "resid_post;attn_out", "unexpected ';' at offset 10" },
	{ "resid_post:\x01", "unexpected '\\x01' at offset 11" },
	{ "resid_post\xc3\xa9", "unexpected '\\xc3' at offset 10" },
	{ "r_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "unknown hook type 'r_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'" },
};

START_TEST(test_parse_error)
{
	const struct bad_spec *b = &bad_specs[_i];
	struct toggle_set out, before;
	char err[512];

	poison(&out);
	before = out;
	memset(err, 'X', sizeof(err));
	int rc = toggle_set_parse(&std_cat, b->spec, &out, err, sizeof(err));
	ck_assert_msg(rc == TOGGLE_ESPEC, "'%s' gave %d", b->spec, rc);
	ck_assert_msg(memchr(err, '\0', sizeof(err)) != NULL, "'%s': error not terminated", b->spec);
	ck_assert_msg(strstr(err, b->want) != NULL, "'%s': error '%s' lacks '%s'", b->spec, err,
		      b->want);
	ck_assert_msg(toggle_set_equal(&out, &before), "'%s': *out changed", b->spec);
	/* The verdict does not depend on having somewhere to write the text. */
	ck_assert_int_eq(toggle_set_parse(&std_cat, b->spec, &out, NULL, 0), TOGGLE_ESPEC);
	ck_assert_int_eq(toggle_set_parse(&std_cat, b->spec, &out, err, 0), TOGGLE_ESPEC);
	ck_assert(toggle_set_equal(&out, &before));
}
END_TEST

START_TEST(test_parse_error_truncates)
{
	struct toggle_set out;
	char err[16];
	memset(err, 'X', sizeof(err));
	ck_assert_int_eq(toggle_set_parse(&std_cat, "resid_pots", &out, err, 8), TOGGLE_ESPEC);
	ck_assert_str_eq(err, "unknown");
	ck_assert_int_eq(err[8], 'X');
	ck_assert_int_eq(toggle_set_parse(&std_cat, "resid_pots", &out, err, 1), TOGGLE_ESPEC);
	ck_assert_str_eq(err, "");
}
END_TEST

START_TEST(test_parse_bad_args)
{
	static const char *const dup[] = { "a", "a" };
	struct toggle_catalog bad = { dup, 2, 4 };
	struct toggle_set out, before;
	char err[256];

	poison(&out);
	before = out;
	ck_assert_int_eq(toggle_set_parse(&bad, "a", &out, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "duplicates"));
	ck_assert(toggle_set_equal(&out, &before));
	ck_assert_int_eq(toggle_set_parse(NULL, "all", &out, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_parse(&std_cat, NULL, &out, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_parse(&std_cat, "all", NULL, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert(toggle_set_equal(&out, &before));
}
END_TEST

/* ---- formatter ---------------------------------------------------------- */

static void format_is(const struct toggle_catalog *cat, const struct toggle_set *s,
		      const char *want)
{
	char buf[512];
	int n = toggle_set_format(cat, s, buf, sizeof(buf));
	ck_assert_int_eq(n, (int)strlen(want));
	ck_assert_str_eq(buf, want);
}

START_TEST(test_format_basic)
{
	struct toggle_set s;

	toggle_set_clear(&s);
	format_is(&std_cat, &s, "none");
	toggle_set_fill(&s, &std_cat);
	format_is(&std_cat, &s, "all");
	toggle_set_remove(&s, hk(2, 31));
	format_is(&std_cat, &s, "resid_post:*,attn_out:*,mlp_out:0-30");

	toggle_set_clear(&s);
	add_range(&s, 1, 0, 31); /* added out of catalog order */
	add_range(&s, 0, 8, 8);
	add_range(&s, 0, 0, 3);
	format_is(&std_cat, &s, "resid_post:0-3,resid_post:8,attn_out:*");

	toggle_set_clear(&s);
	add_range(&s, 2, 0, 0);
	add_range(&s, 2, 2, 3);
	add_range(&s, 2, 30, 31);
	format_is(&std_cat, &s, "mlp_out:0,mlp_out:2-3,mlp_out:30-31");

	toggle_set_clear(&s);
	add_range(&s, 0, 1, 31);
	format_is(&std_cat, &s, "resid_post:1-31");
	toggle_set_clear(&s);
	add_range(&s, 0, 31, 31);
	format_is(&std_cat, &s, "resid_post:31");
}
END_TEST

START_TEST(test_format_edges)
{
	static const char *const names[] = { "a", "b" };
	struct toggle_catalog one = { names, 2, 1 };
	struct test_cat big;
	struct toggle_set s;

	toggle_set_clear(&s);
	toggle_set_add(&s, hk(0, 0));
	format_is(&one, &s, "a:*"); /* with one layer, a single layer is every layer */
	toggle_set_add(&s, hk(1, 0));
	format_is(&one, &s, "all");

	big_catalog(&big);
	toggle_set_clear(&s);
	toggle_set_add(&s, hk(31, 255));
	toggle_set_add(&s, hk(31, 63));
	toggle_set_add(&s, hk(31, 64));
	format_is(&big.cat, &s, "t31:63-64,t31:255");
	toggle_set_fill(&s, &big.cat);
	format_is(&big.cat, &s, "all");
}
END_TEST

START_TEST(test_format_truncation)
{
	struct toggle_set s;
	char buf[32];

	toggle_set_clear(&s);
	add_range(&s, 0, 0, 3); /* "resid_post:0-3": 14 bytes */
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, NULL, 0), 14);
	memset(buf, 'X', sizeof(buf));
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, buf, 0), 14);
	ck_assert_int_eq(buf[0], 'X'); /* len 0: not a byte written */
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, buf, 5), 14);
	ck_assert_str_eq(buf, "resi");
	ck_assert_int_eq(buf[5], 'X');
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, buf, 1), 14);
	ck_assert_str_eq(buf, "");
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, buf, 14), 14);
	ck_assert_str_eq(buf, "resid_post:0-");
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, buf, 15), 14);
	ck_assert_str_eq(buf, "resid_post:0-3");

	/* Truncation across items keeps the needed length of the whole text. */
	add_range(&s, 2, 31, 31); /* + ",mlp_out:31" = 25 */
	memset(buf, 'X', sizeof(buf));
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, buf, 18), 25);
	ck_assert_str_eq(buf, "resid_post:0-3,ml");
	ck_assert_int_eq(buf[18], 'X');
}
END_TEST

START_TEST(test_format_errors)
{
	static const char *const dup[] = { "a", "a" };
	struct toggle_catalog bad = { dup, 2, 4 };
	struct toggle_set s;
	char buf[32];

	toggle_set_clear(&s);
	toggle_set_add(&s, hk(0, 32)); /* layer outside the catalog */
	memset(buf, 'X', sizeof(buf));
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, buf, sizeof(buf)), TOGGLE_ERANGE);
	ck_assert_str_eq(buf, "");
	toggle_set_clear(&s);
	toggle_set_add(&s, hk(3, 0)); /* type outside the catalog */
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, NULL, 0), TOGGLE_ERANGE);

	toggle_set_clear(&s);
	ck_assert_int_eq(toggle_set_format(&bad, &s, buf, sizeof(buf)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_format(NULL, &s, buf, sizeof(buf)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_format(&std_cat, NULL, buf, sizeof(buf)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_format(&std_cat, &s, NULL, 4), TOGGLE_EINVAL);
}
END_TEST

/* ---- property: parse(format(s)) == s ------------------------------------ */

#define PROP_SETS     2000
#define PROP_PER_CAT  100 /* a new random catalog every PROP_PER_CAT sets */

static unsigned rnd(unsigned *seed, unsigned n)
{
	return (unsigned)rand_r(seed) % n;
}

static void rand_catalog(struct test_cat *rc, unsigned *seed)
{
	static const char *const stems[] = { "resid_post", "attn.out", "MLP_", "h", "9" };
	rc->cat.n_types = (uint16_t)(1 + rnd(seed, TOGGLE_MAX_HOOK_TYPES));
	rc->cat.n_layers = (uint16_t)(1 + rnd(seed, TOGGLE_MAX_LAYERS));
	for (unsigned i = 0; i < rc->cat.n_types; i++) {
		snprintf(rc->names[i], sizeof(rc->names[i]), "%s%u", stems[rnd(seed, 5)], i);
		rc->ptrs[i] = rc->names[i];
	}
	rc->cat.type_names = rc->ptrs;
	ck_assert_int_eq(toggle_catalog_validate(&rc->cat, NULL, 0), 0);
}

/* Add layers between a and b (either order), unchecked: for the hot loop. */
static void set_span(struct toggle_set *s, unsigned type, unsigned a, unsigned b)
{
	for (unsigned l = a < b ? a : b; l <= (a < b ? b : a); l++)
		toggle_set_add(s, hk(type, l));
}

/* Sets of many shapes: sparse, dense, runs, whole types, all, nearly all. */
static void rand_set(struct toggle_set *s, const struct toggle_catalog *cat, unsigned *seed)
{
	unsigned nt = cat->n_types, nl = cat->n_layers;
	unsigned shape = rnd(seed, 5), pct = rnd(seed, 101);

	toggle_set_clear(s);
	if (shape == 0 || shape == 1) { /* each hook with probability pct% */
		for (unsigned t = 0; t < nt; t++)
			for (unsigned l = 0; l < nl; l++)
				if (rnd(seed, 100) < pct)
					toggle_set_add(s, hk(t, l));
	} else if (shape == 2) { /* a few runs */
		for (unsigned k = rnd(seed, 8); k > 0; k--) {
			unsigned t = rnd(seed, nt), a = rnd(seed, nl), b = rnd(seed, nl);
			set_span(s, t, a, b);
		}
	} else if (shape == 3) { /* whole types plus a hook */
		for (unsigned t = 0; t < nt; t++)
			if (rnd(seed, 2))
				set_span(s, t, 0, nl - 1);
		toggle_set_add(s, hk(rnd(seed, nt), rnd(seed, nl)));
	} else { /* everything, maybe less one hook */
		toggle_set_fill(s, cat);
		if (rnd(seed, 2))
			toggle_set_remove(s, hk(rnd(seed, nt), rnd(seed, nl)));
	}
}

/*
 * Format into a fresh heap buffer of exactly the announced size.  The
 * property loop asserts only on failure (ck_abort_msg): every ck_assert
 * costs Check a message to its parent, and the loop makes tens of thousands.
 */
static char *format_alloc(const struct toggle_catalog *cat, const struct toggle_set *s)
{
	int n = toggle_set_format(cat, s, NULL, 0);
	if (n <= 0)
		ck_abort_msg("format size query gave %d", n);
	char *buf = malloc((size_t)n + 1);
	if (!buf)
		ck_abort_msg("out of memory");
	int m = toggle_set_format(cat, s, buf, (size_t)n + 1);
	if (m != n || strlen(buf) != (size_t)n)
		ck_abort_msg("format gave %d then %d ('%.200s')", n, m, buf);
	return buf;
}

START_TEST(test_roundtrip_property)
{
	unsigned seed = 20240601u;
	struct test_cat rc;
	unsigned seen_all = 0, seen_none = 0;

	for (unsigned i = 0; i < PROP_SETS; i++) {
		struct toggle_set s, back;
		char err[256];

		if (i % PROP_PER_CAT == 0)
			rand_catalog(&rc, &seed);
		rand_set(&s, &rc.cat, &seed);
		if (toggle_catalog_check_set(&rc.cat, &s) != 0)
			ck_abort_msg("set %u: generator left the catalog", i);
		char *text = format_alloc(&rc.cat, &s);
		poison(&back);
		int rcode = toggle_set_parse(&rc.cat, text, &back, err, sizeof(err));
		if (rcode != 0)
			ck_abort_msg("set %u: '%.200s' does not parse: %s", i, text, err);
		if (!toggle_set_equal(&s, &back))
			ck_abort_msg("set %u: '%.200s' parses to another set", i, text);
		char *again = format_alloc(&rc.cat, &back);
		if (strcmp(text, again) != 0)
			ck_abort_msg("set %u: unstable text '%.200s'", i, again);
		seen_all += strcmp(text, "all") == 0;
		seen_none += strcmp(text, "none") == 0;
		free(again);
		free(text);
	}
	/* The generator must reach the special forms, or the test proves less. */
	ck_assert_uint_gt(seen_all, 0);
	ck_assert_uint_gt(seen_none, 0);
}
END_TEST

static Suite *hookset_suite(void)
{
	Suite *s = suite_create("hookset");
	TCase *tc = tcase_create("set");
	tcase_add_test(tc, test_add_contains_count);
	tcase_add_test(tc, test_index_layout);
	tcase_add_test(tc, test_range_errors);
	tcase_add_test(tc, test_remove);
	tcase_add_test(tc, test_equal);
	tcase_add_test(tc, test_union_subtract);
	tcase_add_test(tc, test_fill);
	tcase_add_test(tc, test_check_set);
	suite_add_tcase(s, tc);

	tc = tcase_create("catalog");
	tcase_add_loop_test(tc, test_validate_bad, 0,
			    (int)(sizeof(bad_catalogs) / sizeof(bad_catalogs[0])));
	tcase_add_test(tc, test_validate_good);
	tcase_add_test(tc, test_validate_truncates);
	suite_add_tcase(s, tc);

	tc = tcase_create("parse");
	tcase_add_test(tc, test_parse_keywords);
	tcase_add_test(tc, test_parse_items);
	tcase_add_test(tc, test_parse_whitespace);
	tcase_add_test(tc, test_parse_odd_names);
	tcase_add_loop_test(tc, test_parse_error, 0, (int)(sizeof(bad_specs) / sizeof(bad_specs[0])));
	tcase_add_test(tc, test_parse_error_truncates);
	tcase_add_test(tc, test_parse_bad_args);
	suite_add_tcase(s, tc);

	tc = tcase_create("format");
	tcase_add_test(tc, test_format_basic);
	tcase_add_test(tc, test_format_edges);
	tcase_add_test(tc, test_format_truncation);
	tcase_add_test(tc, test_format_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("property");
	tcase_set_timeout(tc, 60); /* 2000 round trips under ASan */
	tcase_add_test(tc, test_roundtrip_property);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(hookset_suite());
}
