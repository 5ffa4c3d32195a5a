/*
 * fuzz_store.c - libFuzzer target: what toggled reads from its state
 * directory at start (daemon/store.c, issue 16 item 7; the journal's
 * format 2, issue 30).  The first byte picks the mode (its value % 4), the
 * rest is the input:
 *   0, 2: one agents/<stem>.json (td_store_parse_file);
 *   1:    agents.journal (td_store_parse_journal), replayed over a store
 *         that already holds an entry loaded from a file, as at a start:
 *         either format (format 1 begins with '{');
 *   3:    records built by the writer's encoder (td_store_encode_record)
 *         from the input, then damaged as the input says (bits flipped,
 *         bytes cut out, the end cut off), then parsed: what is applied is
 *         always a value that was written, never a damaged one, and an
 *         undamaged journal gives back every record.
 * These are the functions td_store_load and the save path call.  Must
 * never crash or leak; what it accepts must be within the store's bounds;
 * every error names the file; the journal's valid length ends a record.
 */
#include <stdlib.h>
#include <string.h>

#include "toggled.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_STEM    "a"
#define FZ_FILE    "state/agents/" FZ_STEM ".json"
#define FZ_JOURNAL "state/agents.journal"

static const char fz_loaded[] =
	"{\"format\": 1, \"name\": \"" FZ_STEM "\", \"enabled\": \"resid_post:0\", "
	"\"plans\": [{\"step\": 4, \"hooks\": \"none\"}]}";

static bool spec_bounded(const char *spec)
{
	return spec && strnlen(spec, TGP_MAX_SPEC + 1) <= TGP_MAX_SPEC;
}

/* What a load accepted: bounded values, one entry per name. */
static void check_store(const struct td_store *s)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct td_desired *dd = &s->v[i];
		if (strnlen(dd->name, sizeof(dd->name)) == sizeof(dd->name) || !dd->name[0] ||
		    (dd->standing && !spec_bounded(dd->standing)) || dd->n_plans > TD_MAX_PENDING_PLAN)
			abort();
		for (size_t k = 0; k < dd->n_plans; k++)
			if (dd->plan_steps[k] < 0 || !spec_bounded(dd->plan_specs[k]))
				abort();
		for (size_t k = 0; k < i; k++)
			if (strcmp(s->v[k].name, dd->name) == 0)
				abort();
	}
}

/* A refusal: one of the load's codes, with a message that names the file. */
static void check_refusal(int rc, const char *err, const char *path)
{
	if ((rc != TOGGLE_EINVAL && rc != TOGGLE_ENOMEM) || strncmp(err, path, strlen(path)) != 0)
		abort();
}

static void fuzz_file(const char *text, size_t len)
{
	struct td_store s = {0};
	char err[512] = "";
	int rc = td_store_parse_file(FZ_FILE, FZ_STEM, text, len, &s, err, sizeof(err));
	if (rc == 0 && (s.n != 1 || strcmp(s.v[0].name, FZ_STEM) != 0))
		abort(); /* a file holds its own name's entry, nothing else */
	if (rc != 0)
		check_refusal(rc, err, FZ_FILE);
	check_store(&s);
	td_store_free(&s);
}

/* Two stores hold the same values. */
static bool same_values(const struct td_store *a, const struct td_store *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++) {
		const struct td_desired *x = &a->v[i], *y = &b->v[i];
		if (strcmp(x->name, y->name) != 0 || !x->standing != !y->standing ||
		    (x->standing && strcmp(x->standing, y->standing) != 0) || x->n_plans != y->n_plans)
			return false;
		for (size_t k = 0; k < x->n_plans; k++)
			if (x->plan_steps[k] != y->plan_steps[k] ||
			    strcmp(x->plan_specs[k], y->plan_specs[k]) != 0)
				return false;
	}
	return true;
}

static int parse_over_loaded(const char *buf, size_t size, uint64_t after, struct td_store *s,
			     struct td_journal_scan *scan, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	if (td_store_parse_file(FZ_FILE, FZ_STEM, fz_loaded, strlen(fz_loaded), s, err, errlen) != 0)
		abort();
	return td_store_parse_journal(FZ_JOURNAL, buf, size, after, s, scan, err, errlen);
}

static void fuzz_journal(const char *buf, size_t size, uint64_t after)
{
	struct td_store s, p;
	struct td_journal_scan scan, pscan;
	char err[512] = "", perr[512];
	int rc = parse_over_loaded(buf, size, after, &s, &scan, err, sizeof(err));
	if (scan.good > size || scan.corrupt != (rc == TOGGLE_EINVAL))
		abort();
	if (rc == 0 && !scan.torn && scan.good != size && scan.format != 0)
		abort(); /* accepted whole: every byte was a record */
	if (rc != 0)
		check_refusal(rc, err, FZ_JOURNAL);
	check_store(&s);
	/* Accepted with a torn tail: its valid length alone is the same journal, whole. */
	if (rc == 0 && scan.torn) {
		int prc = parse_over_loaded(buf, scan.good, after, &p, &pscan, perr, sizeof(perr));
		if (prc != 0 || pscan.torn || pscan.records != scan.records || !same_values(&s, &p))
			abort();
		td_store_free(&p);
	}
	td_store_free(&s);
}

/* ---- mode 3: the writer's records, damaged ------------------------------------ */

#define FZ_NAMES  4
#define FZ_VALUES 64

struct fz_written {
	char values[FZ_NAMES][FZ_VALUES][24]; /* every value written per name */
	size_t n[FZ_NAMES];
	char last[FZ_NAMES][24];
	bool have_last[FZ_NAMES];
};

static const char *const fz_names[FZ_NAMES] = { "a", "b", "c@7", "d.json.corrupt-1" };

static uint8_t take(const uint8_t **p, const uint8_t *end)
{
	return *p < end ? *(*p)++ : 0;
}

static bool was_written(const struct fz_written *w, size_t k, const char *v)
{
	for (size_t i = 0; i < w->n[k]; i++)
		if (strcmp(w->values[k][i], v) == 0)
			return true;
	return false;
}

static void fuzz_records(const uint8_t *in, size_t size)
{
	const uint8_t *p = in, *end = in + size;
	static struct fz_written w;
	memset(&w, 0, sizeof(w));
	size_t n_rec = take(&p, end) % 8 + 1, len = 0, cap = 0;
	char *journal = NULL;
	uint64_t seq = take(&p, end) % 3; /* 0: the first record is seq 1 */
	for (size_t r = 0; r < n_rec; r++) {
		struct td_desired v[FZ_NAMES];
		size_t n = take(&p, end) % FZ_NAMES + 1, used = 0;
		memset(v, 0, sizeof(v));
		char vals[FZ_NAMES][24];
		for (size_t i = 0; i < n; i++) {
			size_t k = take(&p, end) % FZ_NAMES;
			bool dup = false;
			for (size_t j = 0; j < used; j++)
				dup |= strcmp(v[j].name, fz_names[k]) == 0;
			if (dup)
				continue;
			/* A value unique to this record and name: "r<rec>k<name>:<bytes>". */
			int l = snprintf(vals[used], sizeof(vals[used]), "r%zuk%zu:", r, k);
			size_t vl = take(&p, end) % 8;
			for (size_t b = 0; b < vl && (size_t)l < sizeof(vals[used]) - 1; b++)
				vals[used][l++] = (char)('a' + take(&p, end) % 26);
			vals[used][l] = '\0';
			memcpy(v[used].name, fz_names[k], strlen(fz_names[k]) + 1);
			v[used].standing = vals[used];
			if (w.n[k] < FZ_VALUES)
				memcpy(w.values[k][w.n[k]++], vals[used], sizeof(vals[used]));
			memcpy(w.last[k], vals[used], sizeof(vals[used]));
			w.have_last[k] = true;
			used++;
		}
		size_t rl = 0;
		char *rec = td_store_encode_record(++seq, v, used, &rl);
		if (!rec)
			abort();
		if (len + rl > cap) {
			cap = (len + rl) * 2;
			char *nj = realloc(journal, cap);
			if (!nj)
				abort();
			journal = nj;
		}
		memcpy(journal + len, rec, rl);
		len += rl;
		free(rec);
	}
	/* Damage: up to 4 steps, each a bit flip, a cut-out range, or the end cut off. */
	bool damaged = false;
	for (int d = take(&p, end) % 5; d > 0 && len > 0; d--) {
		size_t at = ((size_t)take(&p, end) << 8 | take(&p, end)) % len;
		switch (take(&p, end) % 3) {
		case 0: {
			uint8_t x = take(&p, end);
			journal[at] ^= (char)(x ? x : 1);
			break;
		}
		case 1: {
			size_t cut = take(&p, end) % 32 + 1;
			if (cut > len - at)
				cut = len - at;
			memmove(journal + at, journal + at + cut, len - at - cut);
			len -= cut;
			break;
		}
		default:
			len = at;
			break;
		}
		damaged = true;
	}
	struct td_store s = { 0 };
	struct td_journal_scan scan;
	char err[512] = "";
	int rc = td_store_parse_journal(FZ_JOURNAL, journal, len, 0, &s, &scan, err, sizeof(err));
	if (rc == TOGGLE_ENOMEM)
		goto out;
	if (!damaged && (rc != 0 || scan.torn || scan.records != n_rec))
		abort(); /* the writer's journal reads back whole */
	if (rc != 0)
		check_refusal(rc, err, FZ_JOURNAL);
	check_store(&s);
	for (size_t i = 0; i < s.n; i++) {
		size_t k = 0;
		while (k < FZ_NAMES && strcmp(s.v[i].name, fz_names[k]) != 0)
			k++;
		/* Never a name or a value that was not written (a damaged one). */
		if (k == FZ_NAMES || !s.v[i].standing || !was_written(&w, k, s.v[i].standing) ||
		    s.v[i].n_plans != 0)
			abort();
		if (!damaged && strcmp(s.v[i].standing, w.last[k]) != 0)
			abort(); /* the last record of a name wins */
	}
out:
	td_store_free(&s);
	free(journal);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *text = (const char *)data + 1;
	switch (data[0] % 4) {
	case 1:
		fuzz_journal(text, size - 1, data[0] >= 128 ? 2 : 0);
		break;
	case 3:
		fuzz_records(data + 1, size - 1);
		break;
	default:
		fuzz_file(text, size - 1);
		break;
	}
	return 0;
}
