/*
 * hookset.c - hook sets (a fixed bitmap over type x layer), validation of
 * the hook catalog, and the text form of a set: a small hand-written parser
 * for hook specs and the canonical formatter that is its inverse.
 *
 * Everything here is pure: no allocation, no global state, reentrant.  Specs
 * come from outside (CLI, daemon socket), so the parser trusts nothing: every
 * byte is classified, numbers saturate instead of overflowing, and error
 * texts escape what they quote.  The bitmap primitives that cannot report an
 * error (clear, contains, count, ...) expect valid pointers, like memset.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "toggle_hooks.h"

#define HS_WORDS      (TOGGLE_MAX_HOOKS / 64)
#define HS_TYPE_WORDS (TOGGLE_MAX_LAYERS / 64) /* words spanned by one hook type */
#define HS_QUOTE_MAX  48 /* bytes of a token shown in an error text */
#define HS_LAYERS_EXPECTED "N, N-M with N<=M, or *"

_Static_assert(TOGGLE_MAX_LAYERS % 64 == 0, "a hook type must span whole bitmap words");
_Static_assert(sizeof(((struct toggle_set *)0)->bits) * 8 == TOGGLE_MAX_HOOKS,
	       "the bitmap holds every hook");

/* ---- bitmap ------------------------------------------------------------- */

static bool hs_in_space(struct toggle_hook h)
{
	return h.type < TOGGLE_MAX_HOOK_TYPES && h.layer < TOGGLE_MAX_LAYERS;
}

static size_t hs_index(struct toggle_hook h)
{
	return (size_t)h.type * TOGGLE_MAX_LAYERS + h.layer;
}

static uint64_t hs_bit(size_t idx)
{
	return UINT64_C(1) << (idx % 64);
}

/* NULL sets (toggle_hooks.h): nothing done, false, 0 or TOGGLE_EINVAL, never a crash. */
void toggle_set_clear(struct toggle_set *set)
{
	if (set)
		memset(set, 0, sizeof(*set));
}

int toggle_set_add(struct toggle_set *set, struct toggle_hook hook)
{
	if (!set)
		return TOGGLE_EINVAL;
	if (!hs_in_space(hook))
		return TOGGLE_ERANGE;
	size_t i = hs_index(hook);
	set->bits[i / 64] |= hs_bit(i);
	return 0;
}

int toggle_set_remove(struct toggle_set *set, struct toggle_hook hook)
{
	if (!set)
		return TOGGLE_EINVAL;
	if (!hs_in_space(hook))
		return TOGGLE_ERANGE;
	size_t i = hs_index(hook);
	set->bits[i / 64] &= ~hs_bit(i);
	return 0;
}

/* A hook outside the hook space is in no set (not an out-of-bounds read). */
bool toggle_set_contains(const struct toggle_set *set, struct toggle_hook hook)
{
	if (!set || !hs_in_space(hook))
		return false;
	size_t i = hs_index(hook);
	return (set->bits[i / 64] & hs_bit(i)) != 0;
}

size_t toggle_set_count(const struct toggle_set *set)
{
	size_t n = 0;
	if (!set)
		return 0;
	for (size_t i = 0; i < HS_WORDS; i++)
		n += (size_t)__builtin_popcountll(set->bits[i]);
	return n;
}

bool toggle_set_equal(const struct toggle_set *a, const struct toggle_set *b)
{
	if (!a || !b)
		return false;
	for (size_t i = 0; i < HS_WORDS; i++)
		if (a->bits[i] != b->bits[i])
			return false;
	return true;
}

void toggle_set_union(struct toggle_set *dst, const struct toggle_set *src)
{
	if (!dst || !src)
		return;
	for (size_t i = 0; i < HS_WORDS; i++)
		dst->bits[i] |= src->bits[i];
}

void toggle_set_subtract(struct toggle_set *dst, const struct toggle_set *src)
{
	if (!dst || !src)
		return;
	for (size_t i = 0; i < HS_WORDS; i++)
		dst->bits[i] &= ~src->bits[i];
}

static unsigned hs_min(unsigned a, unsigned b)
{
	return a < b ? a : b;
}

/* Bits of layers 0..n_layers-1 that fall into word w of a type's span. */
static uint64_t hs_layer_mask(unsigned w, unsigned n_layers)
{
	unsigned lo = w * 64;
	if (n_layers >= lo + 64)
		return UINT64_MAX;
	if (n_layers <= lo)
		return 0;
	return (UINT64_C(1) << (n_layers - lo)) - 1;
}

/*
 * The set becomes exactly the catalog's hooks.  Counts beyond the hook space
 * are clamped so that an unvalidated catalog cannot write out of bounds.
 */
void toggle_set_fill(struct toggle_set *set, const struct toggle_catalog *cat)
{
	if (!set)
		return;
	toggle_set_clear(set);
	if (!cat)
		return; /* no catalog: no hook */
	unsigned n_types = hs_min(cat->n_types, TOGGLE_MAX_HOOK_TYPES);
	unsigned n_layers = hs_min(cat->n_layers, TOGGLE_MAX_LAYERS);

	for (unsigned t = 0; t < n_types; t++)
		for (unsigned w = 0; w < HS_TYPE_WORDS; w++)
			set->bits[t * HS_TYPE_WORDS + w] = hs_layer_mask(w, n_layers);
}

/* Only the counts matter here: the catalog's shape decides what is inside. */
int toggle_catalog_check_set(const struct toggle_catalog *cat, const struct toggle_set *set)
{
	struct toggle_set all;

	if (!cat || !set)
		return TOGGLE_EINVAL;
	toggle_set_fill(&all, cat);
	for (size_t i = 0; i < HS_WORDS; i++)
		if (set->bits[i] & ~all.bits[i])
			return TOGGLE_ERANGE;
	return 0;
}

/* ---- bounded text output ------------------------------------------------ */

/*
 * A text sink with snprintf semantics, shared by error texts and the
 * formatter: need counts every byte asked for, buf keeps what fits, and buf
 * is NUL terminated whenever len > 0.
 */
struct hs_out {
	char *buf;
	size_t len;
	size_t need;
};

static void hs_out_init(struct hs_out *o, char *buf, size_t len)
{
	o->buf = buf;
	o->len = buf ? len : 0; /* a NULL buffer only counts */
	o->need = 0;
	if (o->len > 0)
		o->buf[0] = '\0';
}

__attribute__((format(printf, 2, 3)))
static void hs_printf(struct hs_out *o, const char *fmt, ...)
{
	char *dst = NULL;
	size_t room = 0;
	va_list ap;

	/* Once full, the buffer already ends in a NUL; keep counting only. */
	if (o->need < o->len) {
		dst = o->buf + o->need;
		room = o->len - o->need;
	}
	va_start(ap, fmt);
	int n = vsnprintf(dst, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->need += (size_t)n;
}

/*
 * Append s[0..n) in single quotes, bytes outside printable ASCII as \xNN and
 * long tokens cut with "...": error texts end up in logs and terminals.
 */
static void hs_quote(struct hs_out *o, const char *s, size_t n)
{
	size_t shown = n > HS_QUOTE_MAX ? HS_QUOTE_MAX : n;

	hs_printf(o, "'");
	for (size_t i = 0; i < shown; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f)
			hs_printf(o, "%c", c);
		else
			hs_printf(o, "\\x%02x", c);
	}
	hs_printf(o, "%s'", n > shown ? "..." : "");
}

/* ---- catalog ------------------------------------------------------------ */

/* ASCII only, on purpose: isalnum() would follow the locale. */
static bool hs_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.';
}

/* Spec keywords cannot be type names, or "all" would have two meanings. */
static bool hs_keyword(const char *s, size_t n)
{
	return (n == 3 && memcmp(s, "all", 3) == 0) || (n == 4 && memcmp(s, "none", 4) == 0);
}

static int hs_bad_name(struct hs_out *o, unsigned i, const char *name, size_t n,
		       const char *why)
{
	hs_printf(o, "hook type name %u ", i);
	hs_quote(o, name, n);
	hs_printf(o, " %s", why);
	return TOGGLE_EINVAL;
}

static int hs_check_name(struct hs_out *o, unsigned i, const char *name)
{
	if (!name) {
		hs_printf(o, "hook type name %u is NULL", i);
		return TOGGLE_EINVAL;
	}
	/* strnlen: never read further than a valid name could reach. */
	size_t n = strnlen(name, TOGGLE_MAX_NAME);
	if (n == 0) {
		hs_printf(o, "hook type name %u is empty", i);
		return TOGGLE_EINVAL;
	}
	if (n >= TOGGLE_MAX_NAME) {
		hs_bad_name(o, i, name, n, "is too long");
		hs_printf(o, " (at most %d bytes)", TOGGLE_MAX_NAME - 1);
		return TOGGLE_EINVAL;
	}
	if (hs_keyword(name, n) || strcmp(name, "*") == 0)
		return hs_bad_name(o, i, name, n, "is reserved (all, none and * are spec words)");
	for (size_t k = 0; k < n; k++) {
		if (!hs_name_char(name[k])) {
			hs_bad_name(o, i, name, n, "has invalid character ");
			hs_quote(o, name + k, 1);
			hs_printf(o, " (expected [A-Za-z0-9_.])");
			return TOGGLE_EINVAL;
		}
	}
	return 0;
}

static int hs_validate(const struct toggle_catalog *cat, struct hs_out *o)
{
	if (!cat) {
		hs_printf(o, "catalog is NULL");
		return TOGGLE_EINVAL;
	}
	if (cat->n_types < 1 || cat->n_types > TOGGLE_MAX_HOOK_TYPES) {
		hs_printf(o, "catalog has %u hook types (expected 1-%d)", cat->n_types,
			  TOGGLE_MAX_HOOK_TYPES);
		return TOGGLE_EINVAL;
	}
	if (cat->n_layers < 1 || cat->n_layers > TOGGLE_MAX_LAYERS) {
		hs_printf(o, "catalog has %u layers (expected 1-%d)", cat->n_layers,
			  TOGGLE_MAX_LAYERS);
		return TOGGLE_EINVAL;
	}
	if (!cat->type_names) {
		hs_printf(o, "catalog type_names is NULL");
		return TOGGLE_EINVAL;
	}
	for (unsigned i = 0; i < cat->n_types; i++) {
		int rc = hs_check_name(o, i, cat->type_names[i]);
		if (rc)
			return rc;
	}
	/* Names are now known to be short and terminated: strcmp is safe. */
	for (unsigned i = 1; i < cat->n_types; i++) {
		for (unsigned j = 0; j < i; j++) {
			const char *name = cat->type_names[i];
			if (strcmp(name, cat->type_names[j]) == 0) {
				hs_bad_name(o, i, name, strlen(name), "duplicates");
				hs_printf(o, " name %u", j);
				return TOGGLE_EINVAL;
			}
		}
	}
	return 0;
}

int toggle_catalog_validate(const struct toggle_catalog *cat, char *err, size_t errlen)
{
	struct hs_out o;

	hs_out_init(&o, err, errlen);
	return hs_validate(cat, &o);
}

/* ---- parser ------------------------------------------------------------- */

/*
 * A tokenizer and one function per grammar rule (see toggle.h).  Keywords
 * and names are case-sensitive; offsets in error texts count bytes from 0.
 * The first error stops the parse, and *out is written only on success.
 */

enum hs_kind { HS_END, HS_WORD, HS_STAR, HS_COLON, HS_COMMA, HS_DASH, HS_BAD };

/* One token: a run of name characters (names and numbers alike) or one byte. */
struct hs_tok {
	enum hs_kind kind;
	size_t off; /* byte offset in the spec, reported in errors */
	size_t len;
};

/* The item being parsed, kept for error texts. */
struct hs_item {
	size_t type_off, type_len; /* the TYPE token: a name or "*" */
	unsigned t_lo, t_hi;       /* type indices it covers */
	size_t layers_off;         /* where LAYERS starts */
	unsigned l_lo, l_hi;       /* layers it covers, inclusive */
};

struct hs_parser {
	const struct toggle_catalog *cat;
	const char *spec;
	size_t pos;      /* next unread byte */
	size_t prev_end; /* end of the last consumed token */
	struct hs_tok tok; /* current, not yet consumed, token */
	struct hs_out *err;
	struct toggle_set set; /* built here, copied out only on success */
};

static bool hs_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Consume the current token and read the next one. */
static void hs_next(struct hs_parser *p)
{
	const char *s = p->spec;
	struct hs_tok t = { HS_BAD, 0, 1 };

	p->prev_end = p->tok.off + p->tok.len;
	while (hs_space(s[p->pos]))
		p->pos++;
	t.off = p->pos;
	switch (s[p->pos]) {
	case '\0': t.kind = HS_END; t.len = 0; break;
	case '*': t.kind = HS_STAR; break;
	case ':': t.kind = HS_COLON; break;
	case ',': t.kind = HS_COMMA; break;
	case '-': t.kind = HS_DASH; break;
	default:
		if (hs_name_char(s[p->pos])) {
			t.kind = HS_WORD;
			while (hs_name_char(s[p->pos + t.len]))
				t.len++;
		}
		break;
	}
	p->pos += t.len;
	p->tok = t;
}

static const char *hs_tok_text(const struct hs_parser *p)
{
	return p->spec + p->tok.off;
}

static int hs_unexpected(struct hs_parser *p, const char *expected)
{
	hs_printf(p->err, "unexpected ");
	if (p->tok.kind == HS_END)
		hs_printf(p->err, "end of spec");
	else
		hs_quote(p->err, hs_tok_text(p), p->tok.len);
	hs_printf(p->err, " at offset %zu (expected %s)", p->tok.off, expected);
	return TOGGLE_ESPEC;
}

static int hs_misplaced_keyword(struct hs_parser *p, size_t off, size_t len)
{
	hs_quote(p->err, p->spec + off, len);
	hs_printf(p->err, " at offset %zu must be the whole spec (no layers, no other items)", off);
	return TOGGLE_ESPEC;
}

static int hs_unknown_type(struct hs_parser *p)
{
	hs_printf(p->err, "unknown hook type ");
	hs_quote(p->err, hs_tok_text(p), p->tok.len);
	hs_printf(p->err, " (known: ");
	for (unsigned i = 0; i < p->cat->n_types; i++)
		hs_printf(p->err, "%s%s", i ? ", " : "", p->cat->type_names[i]);
	hs_printf(p->err, ")");
	return TOGGLE_ESPEC;
}

static int hs_lookup(const struct toggle_catalog *cat, const char *s, size_t n)
{
	for (unsigned i = 0; i < cat->n_types; i++)
		if (strncmp(cat->type_names[i], s, n) == 0 && cat->type_names[i][n] == '\0')
			return (int)i;
	return -1;
}

/* TYPE = a catalog name | "*" */
static int hs_parse_type(struct hs_parser *p, struct hs_item *it)
{
	it->type_off = p->tok.off;
	it->type_len = p->tok.len;
	if (p->tok.kind == HS_COMMA || p->tok.kind == HS_END) {
		hs_printf(p->err, "empty item at offset %zu (expected TYPE[:LAYERS])", p->tok.off);
		return TOGGLE_ESPEC;
	}
	if (p->tok.kind == HS_STAR) {
		it->t_lo = 0;
		it->t_hi = p->cat->n_types - 1u;
	} else if (p->tok.kind == HS_WORD) {
		int t = hs_lookup(p->cat, hs_tok_text(p), p->tok.len);
		if (t < 0 && hs_keyword(hs_tok_text(p), p->tok.len))
			return hs_misplaced_keyword(p, p->tok.off, p->tok.len);
		if (t < 0)
			return hs_unknown_type(p);
		it->t_lo = it->t_hi = (unsigned)t;
	} else {
		return hs_unexpected(p, "a hook type or '*'");
	}
	hs_next(p);
	return 0;
}

static int hs_bad_range(struct hs_parser *p, const struct hs_item *it, size_t end)
{
	hs_printf(p->err, "bad layer range ");
	hs_quote(p->err, p->spec + it->layers_off, end - it->layers_off);
	hs_printf(p->err, " (expected " HS_LAYERS_EXPECTED ")");
	return TOGGLE_ESPEC;
}

/*
 * N: decimal digits only (no sign, no base prefix), below n_layers.  The
 * value saturates, so a huge number is reported as out of range instead of
 * wrapping around to a valid layer.
 */
static int hs_parse_layer(struct hs_parser *p, const struct hs_item *it, unsigned *out)
{
	const char *s = hs_tok_text(p);
	size_t n = p->tok.len;
	unsigned long v = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			hs_printf(p->err, "bad layer ");
			hs_quote(p->err, s, n);
			hs_printf(p->err, " (expected " HS_LAYERS_EXPECTED ")");
			return TOGGLE_ESPEC;
		}
		if (v < 1000000)
			v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v >= p->cat->n_layers) {
		size_t shown = n > HS_QUOTE_MAX ? HS_QUOTE_MAX : n;
		hs_printf(p->err, "layer %.*s%s out of range for ", (int)shown, s,
			  n > shown ? "..." : "");
		hs_quote(p->err, p->spec + it->type_off, it->type_len);
		hs_printf(p->err, " (layers 0-%u)", p->cat->n_layers - 1u);
		return TOGGLE_ESPEC;
	}
	*out = (unsigned)v;
	hs_next(p);
	return 0;
}

/* LAYERS = "*" | N | N "-" M */
static int hs_parse_layers(struct hs_parser *p, struct hs_item *it)
{
	int rc;

	it->layers_off = p->tok.off;
	if (p->tok.kind == HS_STAR) {
		hs_next(p);
		return 0; /* it->l_lo/l_hi already cover every layer */
	}
	if (p->tok.kind != HS_WORD)
		return hs_unexpected(p, "layers after ':': " HS_LAYERS_EXPECTED);
	rc = hs_parse_layer(p, it, &it->l_lo);
	if (rc)
		return rc;
	it->l_hi = it->l_lo;
	if (p->tok.kind != HS_DASH)
		return 0;
	hs_next(p);
	if (p->tok.kind != HS_WORD) /* "3-", "3-*", "3--4", ... */
		return hs_bad_range(p, it, p->tok.off + p->tok.len);
	rc = hs_parse_layer(p, it, &it->l_hi);
	if (rc)
		return rc;
	if (it->l_lo > it->l_hi)
		return hs_bad_range(p, it, p->prev_end);
	return 0;
}

static void hs_add_item(struct hs_parser *p, const struct hs_item *it)
{
	for (unsigned t = it->t_lo; t <= it->t_hi; t++)
		for (unsigned l = it->l_lo; l <= it->l_hi; l++)
			toggle_set_add(&p->set, (struct toggle_hook){ (uint16_t)t, (uint16_t)l });
}

/* ITEM = TYPE [":" LAYERS], followed by "," or the end of the spec. */
static int hs_parse_item(struct hs_parser *p)
{
	struct hs_item it = { .l_lo = 0, .l_hi = p->cat->n_layers - 1u };
	const char *follow = "':', ',' or end of spec";
	int rc = hs_parse_type(p, &it);

	if (rc == 0 && p->tok.kind == HS_COLON) {
		hs_next(p);
		rc = hs_parse_layers(p, &it);
		follow = "',' or end of spec";
	}
	if (rc)
		return rc;
	if (p->tok.kind != HS_COMMA && p->tok.kind != HS_END)
		return hs_unexpected(p, follow);
	hs_add_item(p, &it);
	return 0;
}

/* "none" | "all" | ITEM ("," ITEM)* */
static int hs_parse_spec(struct hs_parser *p)
{
	hs_next(p);
	if (p->tok.kind == HS_END) {
		hs_printf(p->err, "empty hook spec (expected none, all or TYPE[:LAYERS],...)");
		return TOGGLE_ESPEC;
	}
	if (p->tok.kind == HS_WORD && hs_keyword(hs_tok_text(p), p->tok.len)) {
		struct hs_tok kw = p->tok;
		hs_next(p);
		if (p->tok.kind != HS_END)
			return hs_misplaced_keyword(p, kw.off, kw.len);
		if (kw.len == 3) /* "all"; "none" leaves the set empty */
			toggle_set_fill(&p->set, p->cat);
		return 0;
	}
	for (;;) {
		int rc = hs_parse_item(p);
		if (rc)
			return rc;
		if (p->tok.kind == HS_END)
			return 0;
		hs_next(p); /* the ',' hs_parse_item checked for */
	}
}

int toggle_set_parse(const struct toggle_catalog *cat, const char *spec,
		     struct toggle_set *out, char *err, size_t errlen)
{
	struct hs_out o;
	struct hs_parser p = { .cat = cat, .spec = spec, .err = &o };

	hs_out_init(&o, err, errlen);
	if (!spec || !out) {
		hs_printf(&o, "%s is NULL", !spec ? "spec" : "output set");
		return TOGGLE_EINVAL;
	}
	int rc = hs_validate(cat, &o);
	if (rc == 0)
		rc = hs_parse_spec(&p);
	if (rc == 0)
		*out = p.set;
	return rc;
}

/* ---- formatter ---------------------------------------------------------- */

/* No hook at all: stops at the first word with a bit (a count would visit all 128). */
static bool hs_empty(const struct toggle_set *set)
{
	for (size_t i = 0; i < HS_WORDS; i++)
		if (set->bits[i])
			return false;
	return true;
}

static bool hs_type_full(const struct toggle_set *set, const struct toggle_set *all, unsigned t)
{
	for (unsigned w = t * HS_TYPE_WORDS; w < (t + 1) * HS_TYPE_WORDS; w++)
		if (set->bits[w] != all->bits[w])
			return false;
	return true;
}

static bool hs_has(const struct toggle_set *set, unsigned t, unsigned l)
{
	return toggle_set_contains(set, (struct toggle_hook){ (uint16_t)t, (uint16_t)l });
}

/* One type's items: "t:*" when full, else its runs of consecutive layers. */
static void hs_format_type(const struct toggle_catalog *cat, const struct toggle_set *set,
			   unsigned t, bool full, struct hs_out *o)
{
	const char *name = cat->type_names[t];

	if (full) {
		hs_printf(o, "%s%s:*", o->need ? "," : "", name);
		return;
	}
	for (unsigned l = 0; l < cat->n_layers; l++) {
		if (!hs_has(set, t, l))
			continue;
		unsigned first = l;
		while (l + 1 < cat->n_layers && hs_has(set, t, l + 1))
			l++;
		hs_printf(o, "%s%s:%u", o->need ? "," : "", name, first);
		if (l > first)
			hs_printf(o, "-%u", l);
	}
}

/*
 * The longest text (32 types of 128 single-layer items of at most 72 bytes)
 * is under 300 KB, so the length always fits the int return value.
 */
int toggle_set_format(const struct toggle_catalog *cat, const struct toggle_set *set,
		      char *buf, size_t len)
{
	struct hs_out o;
	struct hs_out quiet = { 0 };
	struct toggle_set all;

	if (buf && len > 0)
		buf[0] = '\0'; /* a failed call leaves an empty string, not stale text */
	if (!cat || !set || (!buf && len > 0))
		return TOGGLE_EINVAL;
	if (hs_validate(cat, &quiet))
		return TOGGLE_EINVAL;
	if (toggle_catalog_check_set(cat, set))
		return TOGGLE_ERANGE;

	hs_out_init(&o, buf, len);
	toggle_set_fill(&all, cat);
	if (hs_empty(set)) {
		hs_printf(&o, "none");
	} else if (toggle_set_equal(set, &all)) {
		hs_printf(&o, "all");
	} else {
		for (unsigned t = 0; t < cat->n_types; t++)
			hs_format_type(cat, set, t, hs_type_full(set, &all, t), &o);
	}
	return (int)o.need;
}
