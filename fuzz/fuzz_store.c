/*
 * fuzz_store.c - libFuzzer target: what toggled reads from its state
 * directory at start (daemon/store.c, issue 16 item 7).  The first byte
 * picks the decoder, the rest is the file:
 *   even: one agents/<stem>.json (td_store_parse_file),
 *   odd:  agents.journal (td_store_parse_journal), replayed over a store
 *         that already holds an entry loaded from a file, as at a start.
 * These are the functions td_store_load calls on the bytes it read.  Must
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

static void fuzz_journal(const char *buf, size_t size)
{
	struct td_store s = {0};
	char err[512] = "";
	size_t good = 0;
	bool corrupt = false;
	if (td_store_parse_file(FZ_FILE, FZ_STEM, fz_loaded, strlen(fz_loaded), &s, err,
				sizeof(err)) != 0)
		abort();
	int rc = td_store_parse_journal(FZ_JOURNAL, buf, size, &s, &good, &corrupt, err, sizeof(err));
	if (good > size || (good > 0 && buf[good - 1] != '\n'))
		abort(); /* the journal is cut to a record's end */
	if (corrupt != (rc == TOGGLE_EINVAL))
		abort();
	if (rc == 0 && memchr(buf + good, '\n', size - good))
		abort(); /* accepted: every complete record was applied */
	if (rc != 0)
		check_refusal(rc, err, FZ_JOURNAL);
	check_store(&s);
	td_store_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *text = (const char *)data + 1;
	if (data[0] & 1)
		fuzz_journal(text, size - 1);
	else
		fuzz_file(text, size - 1);
	return 0;
}
