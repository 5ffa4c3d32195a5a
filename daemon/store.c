/*
 * store.c - persistence of the daemon's desired state (the standing spec and
 * the pending plan entries of each agent name), so that a restarted daemon
 * puts agents back where the operator left them.  One file per agent name,
 * <state_dir>/agents/<name>.json, and a save writes only the entries that
 * changed: its cost follows what changed, not how many agents are stored.
 * Specs are opaque text here; the daemon parses them against each agent's
 * catalog.  Everything read from the files is untrusted and bounded.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "toggled.h"
#include "util.h"

#define TD_MAX_STORED_AGENTS 4096 /* agent names remembered (files in agents/) */
#define STORE_FORMAT         1
#define STORE_SUBDIR         "agents"
#define STORE_SUFFIX         ".json"
#define STORE_TMP_SUFFIX     ".tmp" /* <name>.json.tmp while it is being written */
#define STORE_DIR_MODE       0750
#define STORE_FILE_MODE      0600
#define STORE_BAD_SUFFIX     ".corrupt" /* <file>.corrupt-<unix time>: set aside at load */
/* <key>.json.tmp and its NUL. */
#define STORE_FNAME_MAX      (TD_MAX_KEY + sizeof(STORE_SUFFIX STORE_TMP_SUFFIX))
/*
 * The largest file a valid entry gives: the standing spec and every plan
 * spec at their bound with every byte escaped (\u00XX), plus the structure.
 */
#define STORE_MAX_FILE \
	((size_t)(TD_MAX_PENDING_PLAN + 1) * (6 * (size_t)TGP_MAX_SPEC + 128) + 4096)
#define STORE_MAX_LOGGED     16 /* ignored directory entries named in the log, per load */
#define STORE_SYNC_CHUNK     128 /* files written, then synced together, at a time */
#define STORE_JOURNAL        "agents.journal" /* in the state directory */
#define STORE_JOURNAL_OLD    "agents.journal.old" /* the journal a checkpoint folds in */
/* What checkpoints folded the old journals into: one file of records (the journal's format). */
#define STORE_BASE           "agents.checkpoint"
#define STORE_BASE_TMP       "agents.checkpoint.tmp" /* while it is being written */
#define STORE_JOURNAL_MAX    (4u << 20)  /* bytes before a checkpoint (default) */
#define STORE_JOURNAL_LIMIT  (256u << 20) /* never written past; a longer journal is not read */
#define STORE_SYNC_THREADS   16  /* fsyncs in flight at once */
#define STORE_CKPT_CHUNK     32  /* a checkpoint's files written, synced, renamed at a time */
#define STORE_CKPT_PAUSE_MAX_US 50000 /* the longest pause between a checkpoint's rounds */
/* A journal record (format 2, store.h): header, then the payload. */
#define REC_MAGIC            "\xffTJ\x02"
#define REC_HDR              24
#define REC_MAX              (STORE_JOURNAL_LIMIT - REC_HDR)
#define STORE_MAX_DAMAGED    32 /* damaged records' agent names kept for the log, per journal */

/* ---- the fault seam (store.h) --------------------------------------------- */

static td_store_fault_fn *_Atomic fault_fn;
static void *_Atomic fault_arg;

void td_store_set_fault(td_store_fault_fn *fn, void *arg)
{
	fault_arg = arg;
	fault_fn = fn;
}

/* 0, or -1 with errno: the hook failed this call. */
static int fault(enum td_store_op op, const char *file)
{
	td_store_fault_fn *fn = fault_fn;
	int e = fn ? fn(op, file, fault_arg) : 0;
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

static ssize_t io_write(int fd, const void *buf, size_t len, const char *file)
{
	return fault(TD_STORE_WRITE, file) ? -1 : write(fd, buf, len);
}

static ssize_t io_pwrite(int fd, const void *buf, size_t len, off_t off, const char *file)
{
	return fault(TD_STORE_WRITE, file) ? -1 : pwrite(fd, buf, len, off);
}

static int io_fsync(int fd, const char *file)
{
	return fault(TD_STORE_SYNC, file) ? -1 : fsync(fd);
}

static int io_fdatasync(int fd, const char *file)
{
	return fault(TD_STORE_SYNC, file) ? -1 : fdatasync(fd);
}

static int io_ftruncate(int fd, off_t len, const char *file)
{
	return fault(TD_STORE_TRUNCATE, file) ? -1 : ftruncate(fd, len);
}

static int io_renameat(int dfd, const char *from, int dfd2, const char *to)
{
	return fault(TD_STORE_RENAME, from) ? -1 : renameat(dfd, from, dfd2, to);
}

static int io_unlinkat(int dfd, const char *name, int flags)
{
	return fault(TD_STORE_UNLINK, name) ? -1 : unlinkat(dfd, name, flags);
}

static int io_openat(int dfd, const char *name, int flags, mode_t mode)
{
	return fault(TD_STORE_OPEN, name) ? -1 : openat(dfd, name, flags, mode);
}

/*
 * Buffers of 128 KiB and more (a journal read at start, a large record,
 * the entries' array, a job's copies, the list of file names at load) are
 * mapped here, not malloc'd: glibc maps such a malloc itself and, when
 * it is freed, raises its mmap threshold to its size, after which the
 * daemon's later large callocs (each agent's 264 KiB plan array) come from
 * the heap, where calloc zeroes what it reuses page by page.  A restart
 * with 256 agents after reading a 2 to 4 MiB journal had 2.5 times the
 * RSS of a first start (issue 30).
 */
#define BIG_BUF (128u << 10)

static void *big_alloc(size_t n)
{
	if (n < BIG_BUF)
		return malloc(n ? n : 1);
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* Zeroed: a fresh mapping is, a small block is cleared. */
static void *big_calloc(size_t n)
{
	return n < BIG_BUF ? calloc(1, n ? n : 1) : big_alloc(n);
}

static void big_free(void *p, size_t n)
{
	if (p && n < BIG_BUF)
		free(p);
	else if (p)
		munmap(p, n);
}

/*
 * Copy text from a file (or a file name) into out for an error message:
 * control and non-ASCII bytes become '?', so a hostile key cannot forge log
 * lines or drive a terminal.
 */
static const char *printable(const char *in, char *out, size_t outlen)
{
	return util_clean(out, outlen, in, UTIL_CLEAN_ASCII);
}

/* Valid UTF-8 as jansson checks it; otherwise json_string() would fail at save time. */
static bool utf8_valid(const char *str, size_t len)
{
	static const uint32_t min_cp[4] = { 0, 0x80, 0x800, 0x10000 }; /* shorter is overlong */
	const unsigned char *p = (const unsigned char *)str, *end = p + len;
	while (p < end) {
		unsigned c = *p++;
		size_t more = c < 0x80 ? 0 : c < 0xc2 ? 4 : c < 0xe0 ? 1 : c < 0xf0 ? 2 : c < 0xf5 ? 3 : 4;
		if (more == 4 || (size_t)(end - p) < more)
			return false;
		uint32_t cp = c & (0x7fu >> more);
		for (size_t i = 0; i < more; i++, p++) {
			if ((*p & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (*p & 0x3f);
		}
		if (cp < min_cp[more] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
	}
	return true;
}

/* minlen..maxlen bytes (NUL excluded) of valid UTF-8. */
static bool text_ok(const char *s, size_t minlen, size_t maxlen)
{
	size_t n = strnlen(s, maxlen + 1);
	return n >= minlen && n <= maxlen && utf8_valid(s, n);
}

/*
 * A store key, which is also the stem of its file name: an agent name (1 to
 * TGP_MAX_NAME - 1 bytes of [A-Za-z0-9_.-], what registration accepts,
 * neither "." nor ".."), optionally followed by @uid (decimal, no leading
 * zero, at most UINT32_MAX): one spelling per key, so two files never hold
 * the same one.
 */
static bool name_ok(const char *name)
{
	size_t len = strnlen(name, TD_MAX_KEY);
	const char *at = memchr(name, '@', len);
	size_t n = at ? (size_t)(at - name) : len;
	if (len >= TD_MAX_KEY || !util_name_ok_len(name, n, TGP_MAX_NAME))
		return false;
	if (!at)
		return true;
	size_t digits = len - n - 1;
	uint64_t uid = 0;
	if (digits == 0 || digits > 10 || (at[1] == '0' && digits > 1))
		return false;
	for (size_t i = 1; i <= digits; i++) {
		if (at[i] < '0' || at[i] > '9')
			return false;
		uid = uid * 10 + (uint64_t)(at[i] - '0');
	}
	return uid <= UINT32_MAX;
}

int td_store_key(char *out, size_t len, const char *name, uint32_t uid)
{
	int n = uid == (uint32_t)geteuid() ? snprintf(out, len, "%s", name)
					   : snprintf(out, len, "%s@%u", name, uid);
	return n < 0 || (size_t)n >= len || !name_ok(out) ? TOGGLE_EINVAL : 0;
}

static bool spec_ok(const char *spec)
{
	return text_ok(spec, 0, TGP_MAX_SPEC);
}

static bool ends_with(const char *s, size_t len, const char *suffix)
{
	size_t n = strlen(suffix);
	return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* ---- in-memory entries --------------------------------------------------- */

static void value_free(char **standing, size_t *n, int64_t **steps, char ***specs);
static bool value_copy(char **standing, size_t *n, int64_t **steps, char ***specs,
		       const char *from_standing, size_t from_n, const int64_t *from_steps,
		       char *const *from_specs);

static void desired_clear_plans(struct td_desired *dd)
{
	for (size_t i = 0; i < dd->n_plans; i++)
		free(dd->plan_specs[i]);
	free(dd->plan_specs);
	free(dd->plan_steps);
	dd->plan_specs = NULL;
	dd->plan_steps = NULL;
	dd->n_plans = 0;
}

static void mark_dirty(struct td_desired *dd)
{
	dd->dirty = true;
	if (dd->owner)
		dd->owner->dirty = true;
}

static size_t store_cap(const struct td_store *s)
{
	return s->cap && s->cap < TD_MAX_STORED_AGENTS ? s->cap : TD_MAX_STORED_AGENTS;
}

void td_store_free(struct td_store *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].standing);
		desired_clear_plans(&s->v[i]);
		value_free(&s->v[i].saved_standing, &s->v[i].saved_n_plans, &s->v[i].saved_steps,
			   &s->v[i].saved_specs);
	}
	big_free(s->v, store_cap(s) * sizeof(*s->v));
	if (s->jopen)
		close(s->jfd);
	memset(s, 0, sizeof(*s));
}

/*
 * The array is allocated at its full bound on first use (a few hundred KiB,
 * touched lazily; s->cap entries for a scratch store), so a pointer
 * returned here stays valid until
 * td_store_free or td_store_load: creating another entry never moves it.
 */
struct td_desired *td_store_get(struct td_store *s, const char *name, bool create)
{
	if (!s || !name)
		return NULL;
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].name, name) == 0) {
			s->v[i].owner = s;
			return &s->v[i];
		}
	if (!create || !name_ok(name) || s->n >= store_cap(s))
		return NULL;
	if (!s->v && !(s->v = big_calloc(store_cap(s) * sizeof(*s->v))))
		return NULL;
	struct td_desired *dd = &s->v[s->n++];
	memset(dd, 0, sizeof(*dd));
	memcpy(dd->name, name, strlen(name) + 1);
	dd->owner = s;
	return dd; /* empty and clean: nothing to write until a setter changes it */
}

/* Setting the value an entry already has changes nothing and writes nothing. */
int td_desired_set_standing(struct td_desired *dd, const char *spec)
{
	char *copy = NULL;
	if (!dd)
		return TOGGLE_EINVAL;
	if (spec && !spec_ok(spec))
		return TOGGLE_EINVAL;
	if (spec ? dd->standing && strcmp(dd->standing, spec) == 0 : !dd->standing)
		return 0;
	if (spec && !(copy = strdup(spec)))
		return TOGGLE_ENOMEM;
	free(dd->standing);
	dd->standing = copy;
	mark_dirty(dd);
	return 0;
}

static bool plans_equal(const struct td_desired *dd, const int64_t *steps,
			const char *const *specs, size_t n)
{
	if (n != dd->n_plans)
		return false;
	for (size_t i = 0; i < n; i++)
		if (steps[i] != dd->plan_steps[i] || strcmp(specs[i], dd->plan_specs[i]) != 0)
			return false;
	return true;
}

/* Shared by the setter and the loader (whose strings are const, owned by jansson). */
static int plans_set(struct td_desired *dd, const int64_t *steps, const char *const *specs,
		     size_t n)
{
	if (!dd || n > TD_MAX_PENDING_PLAN || (n && (!steps || !specs)))
		return TOGGLE_EINVAL;
	for (size_t i = 0; i < n; i++)
		if (steps[i] < 0 || !specs[i] || !spec_ok(specs[i]))
			return TOGGLE_EINVAL;
	if (plans_equal(dd, steps, specs, n))
		return 0;
	/* Copy everything first: a failure leaves the old list in place. */
	int64_t *nsteps = n ? malloc(n * sizeof(*nsteps)) : NULL;
	char **nspecs = n ? calloc(n, sizeof(*nspecs)) : NULL;
	bool ok = !n || (nsteps && nspecs);
	for (size_t i = 0; ok && i < n; i++)
		ok = (nspecs[i] = strdup(specs[i])) != NULL;
	if (!ok) {
		for (size_t i = 0; nspecs && i < n; i++)
			free(nspecs[i]);
		free(nspecs);
		free(nsteps);
		return TOGGLE_ENOMEM;
	}
	if (n)
		memcpy(nsteps, steps, n * sizeof(*nsteps));
	desired_clear_plans(dd);
	dd->plan_steps = nsteps;
	dd->plan_specs = nspecs;
	dd->n_plans = n;
	mark_dirty(dd);
	return 0;
}

int td_desired_set_plans(struct td_desired *dd, const int64_t *steps, char *const *specs, size_t n)
{
	return plans_set(dd, steps, (const char *const *)specs, n);
}

/* ---- loading ------------------------------------------------------------- */

/* mkdir -p with mode 0750 (less the umask); the last component must end up a directory. */
static int mkdir_p(const char *dir, char *err, size_t errlen)
{
	char at[PATH_MAX];
	switch (util_mkdirs(dir, STORE_DIR_MODE, STORE_DIR_MODE, at, sizeof(at))) {
	case UTIL_MKDIRS_OK:
		break;
	case UTIL_MKDIRS_BADPATH:
		util_seterr(err, errlen, "state directory: path empty or too long");
		return TOGGLE_EINVAL;
	case UTIL_MKDIRS_FAILED:
		util_seterr(err, errlen, "cannot create state directory %s: %s", at, strerror(errno));
		return TOGGLE_EIO;
	}
	struct stat st;
	if (stat(dir, &st) != 0) {
		util_seterr(err, errlen, "state directory %s: %s", dir, strerror(errno));
		return TOGGLE_EIO;
	}
	if (!S_ISDIR(st.st_mode)) {
		util_seterr(err, errlen, "state directory %s: not a directory", dir);
		return TOGGLE_EIO;
	}
	return 0;
}

/* Context of one file's load, for error messages that name the file and the key. */
struct load_ctx {
	const char *path;
	char *err;
	size_t errlen;
};

static int schema_error(const struct load_ctx *lc, const char *where, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "<file>: <key path>: <what is wrong>"; returns TOGGLE_EINVAL for the caller to pass up. */
static int schema_error(const struct load_ctx *lc, const char *where, const char *fmt, ...)
{
	char what[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	util_seterr(lc->err, lc->errlen, "%s: %s: %s", lc->path, where, what);
	return TOGGLE_EINVAL;
}

static int out_of_memory(const struct load_ctx *lc)
{
	util_seterr(lc->err, lc->errlen, "%s: out of memory while loading", lc->path);
	return TOGGLE_ENOMEM;
}

/* Every key of obj must be one of allowed (NULL-terminated): unknown state is refused, not dropped. */
static int check_keys(const struct load_ctx *lc, json_t *obj, const char *where,
		      const char *const *allowed)
{
	const char *key;
	json_t *val;
	json_object_foreach(obj, key, val) {
		size_t i = 0;
		while (allowed[i] && strcmp(allowed[i], key) != 0)
			i++;
		if (!allowed[i]) {
			char pk[80];
			return schema_error(lc, where, "unknown key \"%s\"",
					    printable(key, pk, sizeof(pk)));
		}
	}
	return 0;
}

static int parse_plans(const struct load_ctx *lc, json_t *arr, struct td_desired *dd)
{
	static const char *const keys[] = { "step", "hooks", NULL };
	int64_t steps[TD_MAX_PENDING_PLAN];
	const char *specs[TD_MAX_PENDING_PLAN];
	char at[32];
	if (!json_is_array(arr))
		return schema_error(lc, "plans", "must be an array");
	size_t n = json_array_size(arr);
	if (n > TD_MAX_PENDING_PLAN)
		return schema_error(lc, "plans", "more than %d plans", TD_MAX_PENDING_PLAN);
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i), *step, *hooks;
		snprintf(at, sizeof(at), "plans[%zu]", i);
		if (!json_is_object(e))
			return schema_error(lc, at, "must be an object");
		int rc = check_keys(lc, e, at, keys);
		if (rc)
			return rc;
		step = json_object_get(e, "step");
		hooks = json_object_get(e, "hooks");
		if (!json_is_integer(step) || json_integer_value(step) < 0)
			return schema_error(lc, at, "\"step\" must be an integer >= 0");
		if (!json_is_string(hooks) || !spec_ok(json_string_value(hooks)))
			return schema_error(lc, at, "\"hooks\" must be a string of at most %d bytes",
					    TGP_MAX_SPEC);
		steps[i] = json_integer_value(step);
		specs[i] = json_string_value(hooks);
	}
	int rc = plans_set(dd, steps, specs, n);
	return rc == TOGGLE_ENOMEM ? out_of_memory(lc) : rc;
}

/* One file's document: {"format": 1, "name": <stem>, "enabled"?: "...", "plans"?: [...]}. */
static int parse_entry(const struct load_ctx *lc, const char *stem, json_t *root,
		       struct td_store *out)
{
	static const char *const keys[] = { "format", "name", "enabled", "plans", NULL };
	char pn[80];
	if (!json_is_object(root))
		return schema_error(lc, "top level", "must be an object");
	int rc = check_keys(lc, root, "top level", keys);
	if (rc)
		return rc;
	json_t *fmt = json_object_get(root, "format");
	if (!json_is_integer(fmt) || json_integer_value(fmt) != STORE_FORMAT)
		return schema_error(lc, "format", "must be %d", STORE_FORMAT);
	json_t *name = json_object_get(root, "name");
	if (!json_is_string(name))
		return schema_error(lc, "name", "must be a string");
	if (strcmp(json_string_value(name), stem) != 0)
		return schema_error(lc, "name", "\"%s\" is not the file's name (\"%s\")",
				    printable(json_string_value(name), pn, sizeof(pn)), stem);
	/* The stem passed name_ok, and file names are unique in a directory. */
	struct td_desired *dd = td_store_get(out, stem, true);
	if (!dd)
		return out_of_memory(lc);
	json_t *enabled = json_object_get(root, "enabled");
	if (enabled) {
		if (!json_is_string(enabled) || !spec_ok(json_string_value(enabled)))
			return schema_error(lc, "enabled", "must be a string of at most %d bytes",
					    TGP_MAX_SPEC);
		if (td_desired_set_standing(dd, json_string_value(enabled)))
			return out_of_memory(lc);
	}
	json_t *plans = json_object_get(root, "plans");
	return plans ? parse_plans(lc, plans, dd) : 0;
}

/* A directory entry that is not state: named in the log (the first few), not loaded. */
static void note_ignored(const char *adir, const char *fname, const char *why, size_t *ignored)
{
	char pf[80];
	if ((*ignored)++ < STORE_MAX_LOGGED)
		log_warnx("state: ignoring %s/%s: %s", adir, printable(fname, pf, sizeof(pf)), why);
}

/* Up to cap bytes from a freshly opened fd, stopping at EOF or the first read error: how many. */
static size_t read_upto(int fd, char *buf, size_t cap)
{
	size_t got = 0;
	while (got < cap) {
		ssize_t r = read(fd, buf + got, cap - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/*
 * One entry file's bytes into out: the JSON document of the agent name
 * stem (which passed name_ok), checked whole.  path names the file in
 * errors.  0, TOGGLE_EINVAL (not valid state) or TOGGLE_ENOMEM.
 */
int td_store_parse_file(const char *path, const char *stem, const char *text, size_t len,
			struct td_store *out, char *err, size_t errlen)
{
	struct load_ctx lc = { path, err, errlen };
	json_error_t jerr;
	/* Duplicate keys are refused: which copy wins would otherwise be a guess. */
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		char pt[sizeof(jerr.text)]; /* jansson quotes the bad token: bytes of the file */
		util_seterr(err, errlen, "%s: line %d, column %d: %s", path, jerr.line, jerr.column,
		            printable(jerr.text, pt, sizeof(pt)));
		return TOGGLE_EINVAL;
	}
	int rc = parse_entry(&lc, stem, root, out);
	json_decref(root);
	return rc;
}

/* agents/<stem>.json into out; a file that is not regular is ignored (logged). */
static int load_file(int dfd, const char *adir, const char *stem, struct td_store *out,
		     char *err, size_t errlen, size_t *ignored)
{
	char fname[STORE_FNAME_MAX], path[PATH_MAX + STORE_FNAME_MAX];
	snprintf(fname, sizeof(fname), "%s%s", stem, STORE_SUFFIX);
	snprintf(path, sizeof(path), "%s/%s", adir, fname);
	struct load_ctx lc = { path, err, errlen };
	struct stat st;
	if (fstatat(dfd, fname, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		util_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
		return TOGGLE_EIO;
	}
	if (!S_ISREG(st.st_mode)) {
		note_ignored(adir, fname, "not a regular file", ignored);
		return 0;
	}
	/* O_NOFOLLOW, O_NONBLOCK: whatever replaced it since the stat is not followed, nor waited on. */
	int fd = openat(dfd, fname, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		util_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return TOGGLE_EIO;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		note_ignored(adir, fname, "not a regular file", ignored);
		return 0;
	}
	if ((uintmax_t)st.st_size > STORE_MAX_FILE) {
		close(fd);
		util_seterr(err, errlen, "%s: larger than %zu bytes", path, STORE_MAX_FILE);
		return TOGGLE_EINVAL;
	}
	/*
	 * Its bytes up to EOF or the first read error, as json_loadfd read them
	 * (a cut read is parsed, and refused if its JSON is cut).  Entry files
	 * are replaced by rename, never rewritten in place; the byte past
	 * st_size makes one that grew all the same a JSON error rather than a
	 * document cut silently at its old length.
	 */
	size_t cap = (size_t)st.st_size + 1;
	char *text = big_alloc(cap);
	if (!text) {
		close(fd);
		return out_of_memory(&lc);
	}
	size_t len = read_upto(fd, text, cap);
	close(fd);
	int rc = td_store_parse_file(path, stem, text, len, out, err, errlen);
	big_free(text, cap);
	return rc;
}

static int fsync_dirfd(int fd);

/* renameat, never over an existing name (EEXIST), through the fault seam. */
static int rename_noreplace(int dfd, const char *from, int dfd2, const char *to)
{
	if (fault(TD_STORE_RENAME, from))
		return -1;
	if (renameat2(dfd, from, dfd2, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -1;
	/* A file system without RENAME_NOREPLACE: look first (only this daemon writes here). */
	struct stat st;
	if (fstatat(dfd2, to, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		errno = EEXIST;
		return -1;
	}
	return renameat(dfd, from, dfd2, to);
}

/*
 * dfd/name renamed <name>.corrupt-<unix time> (or -<time>-<k> when that is
 * taken: an earlier copy is never replaced); the new name in out.  Such a
 * name never ends in .json, so no load takes it for an entry's file.
 */
static int set_aside(int dfd, const char *name, char *out, size_t outlen)
{
	long long t = (long long)time(NULL);
	for (int k = 0; k < 100; k++) {
		if (k == 0)
			snprintf(out, outlen, "%s%s-%lld", name, STORE_BAD_SUFFIX, t);
		else
			snprintf(out, outlen, "%s%s-%lld-%d", name, STORE_BAD_SUFFIX, t, k);
		if (rename_noreplace(dfd, name, dfd, out) == 0)
			return 0;
		if (errno != EEXIST)
			return -1;
	}
	return -1;
}

/*
 * A file that is not valid state, set aside as <file>.corrupt-<unix time>
 * so that the daemon starts without it (logged here, once: later loads skip
 * such names silently).  err holds why it is corrupt.  0, or TOGGLE_EIO when
 * it cannot be renamed (then it is skipped all the same, and logged again
 * at the next start).
 */
static int quarantine(int dfd, const char *adir, const char *fname, const char *err,
		      struct td_store *out)
{
	char aside[STORE_FNAME_MAX + 48], pf[80];
	out->quarantined++;
	if (set_aside(dfd, fname, aside, sizeof(aside)) != 0) {
		log_warn("state: %s; cannot set %s/%s aside, starting without it", err, adir,
			 printable(fname, pf, sizeof(pf)));
		return 0;
	}
	if (fsync_dirfd(dfd) != 0)
		log_warn("state: syncing %s", adir);
	log_warnx("state: %s; set aside as %s/%s, starting without it (--strict-state: refuse "
		  "to start instead)", err, adir, printable(aside, pf, sizeof(pf)));
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(a, b);
}

/*
 * List agents/: *.tmp (left by a save that crashed; the entry's file is
 * intact) removed, other names than *.json ignored, each <name>.json's name
 * checked and bounded; then the files loaded in name order, so that which
 * error is reported does not depend on the directory's order.
 */
static int load_dir(const char *adir, struct td_store *out, char *err, size_t errlen)
{
	char (*stems)[TD_MAX_KEY] = NULL, pf[80];
	size_t n = 0, ignored = 0;
	int rc = 0;
	int dfd = open(adir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dp = dfd < 0 ? NULL : fdopendir(dfd);
	if (!dp) {
		util_seterr(err, errlen, "cannot open %s: %s", adir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return TOGGLE_EIO;
	}
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(dp);
		if (!de) {
			if (errno) {
				util_seterr(err, errlen, "cannot read %s: %s", adir, strerror(errno));
				rc = TOGGLE_EIO;
			}
			break;
		}
		const char *fname = de->d_name;
		size_t len = strlen(fname);
		if (strcmp(fname, ".") == 0 || strcmp(fname, "..") == 0)
			continue;
		if (ends_with(fname, len, STORE_TMP_SUFFIX)) {
			if (io_unlinkat(dfd, fname, 0) != 0 && errno != ENOENT)
				log_warn("state: cannot remove the leftover %s/%s", adir,
					 printable(fname, pf, sizeof(pf)));
			continue;
		}
		/*
		 * Every name that ends in .json is an entry's file, whatever else
		 * it holds (an agent may be called x.json.corrupt-1); a file set
		 * aside never ends so (set_aside).
		 */
		if (!ends_with(fname, len, STORE_SUFFIX)) {
			if (!strstr(fname, STORE_SUFFIX STORE_BAD_SUFFIX "-"))
				note_ignored(adir, fname, "not <agent name>" STORE_SUFFIX, &ignored);
			continue; /* or set aside by an earlier start, logged then */
		}
		size_t stem_len = len - strlen(STORE_SUFFIX);
		char stem[TD_MAX_KEY];
		if (stem_len < sizeof(stem)) {
			memcpy(stem, fname, stem_len);
			stem[stem_len] = '\0';
		}
		if (stem_len >= sizeof(stem) || !name_ok(stem)) {
			util_seterr(err, errlen,
			            "%s/%s: file name: must be <agent name>%s or <agent name>@<uid>%s, the "
			            "name 1 to %d bytes of [A-Za-z0-9_.-]", adir,
			            printable(fname, pf, sizeof(pf)), STORE_SUFFIX, STORE_SUFFIX,
			            TGP_MAX_NAME - 1);
			rc = TOGGLE_EINVAL;
			if (out->quarantine && quarantine(dfd, adir, fname, err, out) == 0) {
				rc = 0;
				continue;
			}
			break;
		}
		if (n >= TD_MAX_STORED_AGENTS) {
			util_seterr(err, errlen, "%s: more than %d names", adir, TD_MAX_STORED_AGENTS);
			rc = TOGGLE_EINVAL;
			break;
		}
		if (!stems && !(stems = big_alloc(TD_MAX_STORED_AGENTS * sizeof(*stems)))) {
			util_seterr(err, errlen, "%s: out of memory while loading", adir);
			rc = TOGGLE_ENOMEM;
			break;
		}
		memcpy(stems[n++], stem, stem_len + 1);
	}
	if (rc == 0 && n > 1)
		qsort(stems, n, sizeof(*stems), cmp_names);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		size_t before = out->n;
		rc = load_file(dfd, adir, stems[i], out, err, errlen, &ignored);
		if (rc != TOGGLE_EINVAL || !out->quarantine)
			continue;
		/* A corrupt file: its entry (the last one, if it got that far) is dropped. */
		while (out->n > before) {
			struct td_desired *dd = &out->v[--out->n];
			free(dd->standing);
			desired_clear_plans(dd);
			memset(dd, 0, sizeof(*dd));
		}
		char fname[STORE_FNAME_MAX];
		snprintf(fname, sizeof(fname), "%s%s", stems[i], STORE_SUFFIX);
		rc = quarantine(dfd, adir, fname, err, out);
	}
	if (ignored > STORE_MAX_LOGGED)
		log_warnx("state: %zu more entries of %s ignored", ignored - STORE_MAX_LOGGED, adir);
	closedir(dp);
	big_free(stems, TD_MAX_STORED_AGENTS * sizeof(*stems));
	return rc;
}

/* ---- the journal: records ---------------------------------------------------- */

/*
 * CRC32C (Castagnoli, reflected polynomial 0x82f63b78: the checksum of
 * iSCSI, ext4's and btrfs's metadata), a byte at a time from a table of
 * 256 built once.  About 1 GB/s here; a journal is at most 256 MiB and is
 * read once, at start.
 */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t td_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	pthread_once(&crc_once, crc_init);
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static uint32_t get_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const unsigned char *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

/* A header at p (REC_HDR bytes): its magic and its own checksum; *plen, *seq from it. */
static bool header_ok(const unsigned char *p, uint32_t *plen, uint64_t *seq)
{
	if (memcmp(p, REC_MAGIC, 4) != 0 || td_crc32c(0, p, 16) != get_le32(p + 16))
		return false;
	*plen = get_le32(p + 4);
	*seq = get_le64(p + 8);
	return *plen > 0 && *plen <= REC_MAX;
}

/*
 * A whole valid record at pos (header and payload checksums)?  *budget
 * bounds the payload bytes checked while looking for one after damage, so
 * that a journal of forged headers costs a few passes over it, not one per
 * header.
 */
static bool record_at(const unsigned char *buf, size_t size, size_t pos, size_t *budget,
		      uint32_t *plen, uint64_t *seq)
{
	if (size - pos < REC_HDR || !header_ok(buf + pos, plen, seq) ||
	    *plen > size - pos - REC_HDR || *plen > *budget)
		return false;
	*budget -= *plen;
	return td_crc32c(0, buf + pos + REC_HDR, *plen) == get_le32(buf + pos + 20);
}

/* The next valid record at or after from, or size. */
static size_t resync(const unsigned char *buf, size_t size, size_t from, size_t *budget)
{
	uint32_t plen;
	uint64_t seq;
	while (from + REC_HDR <= size) {
		const unsigned char *m = memchr(buf + from, 0xff, size - from - REC_HDR + 1);
		if (!m)
			break;
		from = (size_t)(m - buf);
		if (record_at(buf, size, from, budget, &plen, &seq))
			return from;
		from++;
	}
	return size;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	while (n && !*p)
		p++, n--;
	return n == 0;
}

/* Agent names of damaged records that no later record sets (for the log). */
struct damage {
	char names[STORE_MAX_DAMAGED][TD_MAX_KEY];
	size_t n, more;
	bool unknown;
};

static void damage_add(struct damage *dm, const char *name)
{
	for (size_t i = 0; i < dm->n; i++)
		if (strcmp(dm->names[i], name) == 0)
			return;
	if (dm->n < STORE_MAX_DAMAGED)
		memcpy(dm->names[dm->n++], name, strlen(name) + 1);
	else
		dm->more++;
}

/* A later intact record sets it: its damaged value does not matter any more. */
static void damage_drop(struct damage *dm, const char *name)
{
	for (size_t i = 0; i < dm->n; i++)
		if (strcmp(dm->names[i], name) == 0) {
			memmove(dm->names[i], dm->names[i + 1], (dm->n - i - 1) * sizeof(dm->names[0]));
			dm->n--;
			return;
		}
}

/*
 * The names a damaged stretch still shows (for the log only: nothing of it
 * is applied): its entries when it is still JSON, else every "name":"..."
 * in its bytes that is an agent name; unknown when there is none.
 */
static void damage_names(struct damage *dm, const char *text, size_t len)
{
	static const char key[] = "\"name\":\"";
	json_t *rec = json_loadb(text, len, 0, NULL), *arr = json_object_get(rec, "entries");
	size_t found = 0;
	for (size_t i = 0; i < json_array_size(arr) && i < TD_MAX_STORED_AGENTS; i++) {
		const char *name = json_string_value(json_object_get(json_array_get(arr, i), "name"));
		if (name && name_ok(name)) {
			damage_add(dm, name);
			found++;
		}
	}
	json_decref(rec);
	for (const char *p = rec ? text + len : text, *end = text + len;
	     (p = memmem(p, (size_t)(end - p), key, sizeof(key) - 1)); ) {
		p += sizeof(key) - 1;
		const char *q = memchr(p, '"', (size_t)(end - p) < TD_MAX_KEY ? (size_t)(end - p) : TD_MAX_KEY);
		char name[TD_MAX_KEY];
		if (!q)
			continue;
		memcpy(name, p, (size_t)(q - p));
		name[q - p] = '\0';
		if (name_ok(name)) {
			damage_add(dm, name);
			found++;
		}
	}
	if (!found)
		dm->unknown = true;
}

/*
 * One record's JSON into a scratch store, checked whole: every entry a
 * valid document of a valid key, no key twice.  0 or TOGGLE_EINVAL/ENOMEM.
 */
static int record_parse(const struct load_ctx *lc, const char *text, size_t len,
			struct td_store *scratch)
{
	static const char *const keys[] = { "format", "entries", NULL };
	json_error_t jerr;
	json_t *rec = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	int rc = 0;
	if (!rec) {
		char pt[sizeof(jerr.text)]; /* jansson quotes the bad token: bytes of the file */
		util_seterr(lc->err, lc->errlen, "%s: column %d: %s", lc->path, jerr.column,
			    printable(jerr.text, pt, sizeof(pt)));
		return TOGGLE_EINVAL;
	}
	if (!json_is_object(rec))
		rc = schema_error(lc, "record", "must be an object");
	if (!rc)
		rc = check_keys(lc, rec, "record", keys);
	json_t *fmt = json_object_get(rec, "format"), *arr = json_object_get(rec, "entries");
	if (!rc && (!json_is_integer(fmt) || json_integer_value(fmt) != STORE_FORMAT))
		rc = schema_error(lc, "format", "must be %d", STORE_FORMAT);
	if (!rc && (!json_is_array(arr) || json_array_size(arr) > TD_MAX_STORED_AGENTS))
		rc = schema_error(lc, "entries", "must be an array of at most %d", TD_MAX_STORED_AGENTS);
	scratch->cap = json_array_size(arr) ? json_array_size(arr) : 1;
	for (size_t i = 0; !rc && i < json_array_size(arr); i++) {
		json_t *doc = json_array_get(arr, i), *name = json_object_get(doc, "name");
		char pn[80];
		if (!json_is_string(name) || !name_ok(json_string_value(name)))
			rc = schema_error(lc, "entries", "entry %zu: \"name\" must be an agent name", i);
		else if (td_store_get(scratch, json_string_value(name), false))
			rc = schema_error(lc, "entries", "\"%s\" twice",
					  printable(json_string_value(name), pn, sizeof(pn)));
		else
			rc = parse_entry(lc, json_string_value(name), doc, scratch);
	}
	json_decref(rec);
	return rc;
}

/* A checked record over out, whole or not at all (the bound on names checked first). */
static int record_apply(const struct load_ctx *lc, struct td_store *scratch, struct td_store *out,
			struct damage *dm)
{
	size_t fresh = 0;
	for (size_t i = 0; i < scratch->n; i++)
		fresh += td_store_get(out, scratch->v[i].name, false) == NULL;
	if (out->n + fresh > store_cap(out))
		return schema_error(lc, "entries", "more than %d names in the state",
				    TD_MAX_STORED_AGENTS);
	for (size_t i = 0; i < scratch->n; i++) {
		struct td_desired *sd = &scratch->v[i];
		struct td_desired *dd = td_store_get(out, sd->name, true);
		if (!dd || td_desired_set_standing(dd, sd->standing) != 0 ||
		    td_desired_set_plans(dd, sd->plan_steps, sd->plan_specs, sd->n_plans) != 0)
			return out_of_memory(lc);
		dd->in_journal = true;
		damage_drop(dm, sd->name);
	}
	return 0;
}

/* One record's text checked and applied; 0, TOGGLE_EINVAL (not applied) or TOGGLE_ENOMEM. */
static int record_load(const char *where, const char *text, size_t len, struct td_store *out,
		       struct damage *dm, char *err, size_t errlen)
{
	struct load_ctx lc = { where, err, errlen };
	struct td_store scratch = { 0 };
	int rc = record_parse(&lc, text, len, &scratch);
	if (rc == 0)
		rc = record_apply(&lc, &scratch, out, dm);
	td_store_free(&scratch);
	return rc;
}

/* The first damage found names the journal, where, and what. */
static void damage_note(struct td_journal_scan *scan, char *err, size_t errlen, const char *path,
			size_t at, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void damage_note(struct td_journal_scan *scan, char *err, size_t errlen, const char *path,
			size_t at, const char *fmt, ...)
{
	if (!scan->corrupt && err && errlen) {
		char what[PATH_MAX + 256];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(what, sizeof(what), fmt, ap);
		va_end(ap);
		util_seterr(err, errlen, "%s: record at byte %zu: %s", path, at, what);
	}
	scan->corrupt = true;
	scan->damaged++;
}

/* Format 1 (before issue 30): one JSON record a line, no checksum. */
static int parse_v1(const char *path, const char *buf, size_t size, struct td_store *out,
		    struct td_journal_scan *scan, struct damage *dm, char *err, size_t errlen)
{
	size_t pos = 0, lineno = 0;
	while (pos < size) {
		const char *nl = memchr(buf + pos, '\n', size - pos);
		if (!nl) {
			scan->torn = true; /* never completed, never acknowledged */
			break;
		}
		size_t len = (size_t)(nl - buf) - pos;
		char where[PATH_MAX + 64], e2[PATH_MAX + 256];
		snprintf(where, sizeof(where), "%s: record %zu", path, ++lineno);
		int rc = record_load(where, buf + pos, len, out, dm, e2, sizeof(e2));
		if (rc == TOGGLE_ENOMEM) {
			util_seterr(err, errlen, "%s", e2);
			return rc;
		}
		if (rc == 0) {
			scan->records++;
			scan->good = (size_t)(nl - buf) + 1;
		} else {
			if (!scan->corrupt)
				util_seterr(err, errlen, "%s", e2);
			scan->corrupt = true;
			scan->damaged++;
			damage_names(dm, buf + pos, len);
		}
		pos = (size_t)(nl - buf) + 1;
	}
	return 0;
}

/* Format 2: records with a length, a sequence number and checksums (store.h). */
static int parse_v2(const char *path, const char *buf, size_t size, uint64_t after_seq,
		    struct td_store *out, struct td_journal_scan *scan, struct damage *dm, char *err,
		    size_t errlen)
{
	const unsigned char *ub = (const unsigned char *)buf;
	size_t pos = 0, budget = 8 * size + (1u << 20);
	uint64_t last = after_seq;
	size_t stretch = 0; /* damaged records since the last one applied */
	while (pos < size) {
		uint32_t plen = 0;
		uint64_t seq = 0;
		size_t avail = size - pos;
		bool hdr = avail >= REC_HDR && header_ok(ub + pos, &plen, &seq);
		if ((avail < REC_HDR || (hdr && plen > avail - REC_HDR) || all_zero(ub + pos, avail)) &&
		    resync(ub, size, pos + 1, &budget) == size) {
			scan->torn = true; /* the last append, cut short by a crash */
			break;
		}
		char e2[PATH_MAX + 256] = "";
		const char *what = NULL;
		if (!hdr)
			what = "not a record (magic or header checksum)";
		else if (plen > avail - REC_HDR)
			what = "cut short, records follow";
		else if (td_crc32c(0, ub + pos + REC_HDR, plen) != get_le32(ub + pos + 20))
			what = "checksum mismatch";
		else if (last && seq <= last)
			what = "sequence number out of order";
		if (!what) {
			char where[PATH_MAX + 64];
			snprintf(where, sizeof(where), "%s: record at byte %zu", path, pos);
			int rc = record_load(where, buf + pos + REC_HDR, plen, out, dm, e2, sizeof(e2));
			if (rc == TOGGLE_ENOMEM) {
				util_seterr(err, errlen, "%s", e2);
				return rc;
			}
			if (rc == 0) {
				/* Records missing between two intact ones: their agents are unknown. */
				if (last && seq != last + 1) {
					if (!stretch)
						damage_note(scan, err, errlen, path, pos,
							    "%llu records missing before it",
							    (unsigned long long)(seq - last - 1));
					if (seq - last - 1 > stretch)
						dm->unknown = true;
				}
				scan->records++;
				scan->last_seq = last = seq;
				pos += REC_HDR + plen;
				scan->good = pos;
				stretch = 0;
				continue;
			}
			what = e2; /* intact but not valid state: never applied either */
		}
		if (what == e2 && !scan->corrupt) {
			util_seterr(err, errlen, "%s", e2);
			scan->corrupt = true;
			scan->damaged++;
		} else {
			damage_note(scan, err, errlen, path, pos, "%s", what);
		}
		size_t next = resync(ub, size, pos + 1, &budget), span = next - pos;
		if (hdr && span >= REC_HDR && plen <= span - REC_HDR)
			damage_names(dm, buf + pos + REC_HDR, plen); /* the record, up to the next */
		else
			damage_names(dm, buf + pos, span);
		stretch++;
		pos = next;
	}
	return 0;
}

int td_store_parse_journal(const char *path, const char *buf, size_t size, uint64_t after_seq,
			   struct td_store *out, struct td_journal_scan *scan, char *err,
			   size_t errlen)
{
	struct damage dm;
	memset(scan, 0, sizeof(*scan));
	dm.n = dm.more = 0;
	dm.unknown = false;
	if (err && errlen)
		err[0] = '\0';
	if (size == 0)
		return 0;
	/*
	 * Format 1 is UTF-8 JSON text, which never holds the byte 0xff that begins
	 * every format-2 record: a journal that starts with '{' but holds a record
	 * magic is format 2 missing its start (its first header lost), whose
	 * unchecked bytes are damage.  Read as format 1 they would be applied.
	 */
	scan->format = buf[0] == '{' && !memmem(buf, size, REC_MAGIC, 4) ? 1 : 2;
	int rc = scan->format == 1 ? parse_v1(path, buf, size, out, scan, &dm, err, errlen)
				   : parse_v2(path, buf, size, after_seq, out, scan, &dm, err, errlen);
	if (rc)
		return rc;
	scan->unknown = dm.unknown;
	scan->n_affected = dm.n + dm.more;
	size_t used = 0;
	scan->affected[0] = '\0';
	for (size_t i = 0; i < dm.n; i++) {
		char pn[80];
		int w = snprintf(scan->affected + used, sizeof(scan->affected) - used, "%s%s",
				 i ? ", " : "", printable(dm.names[i], pn, sizeof(pn)));
		if (w < 0 || (size_t)w >= sizeof(scan->affected) - used) {
			scan->affected[used] = '\0';
			break;
		}
		used += (size_t)w;
	}
	return scan->corrupt ? TOGGLE_EINVAL : 0;
}

/* ---- the journal: loading ------------------------------------------------------ */

/* One journal file as the load found it. */
struct jfile {
	const char *name;  /* STORE_JOURNAL or STORE_JOURNAL_OLD */
	bool present;      /* read (a regular file of bounded size) */
	struct td_journal_scan scan;
};

static bool journal_path(char *buf, size_t len, const char *dir, const char *name)
{
	return (size_t)snprintf(buf, len, "%s/%s", dir, name) < len;
}

/* "; agents it affected: a, b (and 3 more)" for a log line or a refusal. */
static void affected_text(const struct td_journal_scan *scan, char *out, size_t len)
{
	size_t shown = 0;
	for (const char *p = scan->affected; *p; p++)
		shown += *p == ',';
	shown += scan->affected[0] != '\0';
	if (scan->n_affected == 0 && !scan->unknown)
		snprintf(out, len, "; no agent affected (later records set the ones it held)");
	else
		snprintf(out, len, "; agents it affected: %s%s%s%s", scan->affected,
			 scan->n_affected > shown ? " and more" : "",
			 scan->unknown && scan->n_affected ? ", and " : "",
			 scan->unknown ? "unknown ones (a damaged record cannot be read)" : "");
}

/*
 * <dir>/<jf->name> replayed over out (after_seq: the sequence number the
 * records must follow).  Not there: nothing.  Not a regular file, or over
 * the bound: not read; refused, or with quarantine set aside.  Damaged
 * records: refused with what and where, or with quarantine logged with the
 * agents they affected, the intact records applied (the caller folds them
 * into the files and sets the journal aside).  A torn tail is dropped.
 */
static int load_journal(const char *dir, struct jfile *jf, uint64_t after_seq, struct td_store *out,
			char *err, size_t errlen)
{
	char path[PATH_MAX + 32], pf[PATH_MAX + 64];
	struct stat st;
	if (!journal_path(path, sizeof(path), dir, jf->name)) {
		util_seterr(err, errlen, "state directory: path too long");
		return TOGGLE_EINVAL;
	}
	if (lstat(path, &st) != 0) {
		if (errno == ENOENT)
			return 0;
		util_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
		return TOGGLE_EIO;
	}
	int fd = -1;
	/* O_NOFOLLOW, O_NONBLOCK: whatever replaced it since the stat is not followed, nor waited on. */
	if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size <= STORE_JOURNAL_LIMIT) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0 && errno != ELOOP) {
			util_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
			return TOGGLE_EIO;
		}
	}
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uintmax_t)st.st_size > STORE_JOURNAL_LIMIT) {
		if (fd >= 0)
			close(fd);
		util_seterr(err, errlen, "%s: not a regular file of at most %u bytes", path,
			    STORE_JOURNAL_LIMIT);
		if (!out->quarantine)
			return TOGGLE_EINVAL;
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		char aside[PATH_MAX];
		out->quarantined++;
		if (dfd < 0 || set_aside(dfd, jf->name, aside, sizeof(aside)) != 0) {
			/* Saves will fail on it, with the reason; the start goes on. */
			log_warn("state: %s; cannot set it aside", err);
		} else {
			if (fsync_dirfd(dfd) != 0)
				log_warn("state: syncing %s", dir);
			log_warnx("state: %s; set aside as %s/%s, starting without it (--strict-state: "
				  "refuse to start instead)", err, dir, printable(aside, pf, sizeof(pf)));
		}
		if (dfd >= 0)
			close(dfd);
		return 0;
	}
	size_t size = (size_t)st.st_size;
	char *buf = big_alloc(size);
	size_t got = buf ? read_upto(fd, buf, size) : 0;
	close(fd);
	if (!buf || got != size) {
		util_seterr(err, errlen, buf ? "cannot read %s" : "%s: out of memory while loading", path);
		big_free(buf, size);
		return buf ? TOGGLE_EIO : TOGGLE_ENOMEM;
	}
	jf->present = true;
	int rc = td_store_parse_journal(path, buf, size, after_seq, out, &jf->scan, err, errlen);
	big_free(buf, size);
	if (rc == TOGGLE_ENOMEM)
		return rc;
	char aff[sizeof(jf->scan.affected) + 160];
	affected_text(&jf->scan, aff, sizeof(aff));
	if (rc == TOGGLE_EINVAL) {
		size_t used = strnlen(err, errlen);
		if (used + 1 < errlen)
			snprintf(err + used, errlen - used, "%s", aff);
		if (!out->quarantine)
			return rc;
		out->quarantined++;
		log_warnx("state: %s; %zu damaged stretch(es) not applied, %zu intact records applied "
			  "over the files: each agent it affected starts from its value before the "
			  "damage; %s is set aside once those records are in the files (--strict-state: "
			  "refuse to start instead)", err, jf->scan.damaged, jf->scan.records,
			  printable(path, pf, sizeof(pf)));
	}
	if (jf->scan.torn && !jf->scan.corrupt)
		log_warnx("state: %s: a record cut short at byte %zu (a save that never completed, so "
			  "never acknowledged) dropped", printable(path, pf, sizeof(pf)), jf->scan.good);
	return 0;
}

/* An entry agents.checkpoint holds (the journals' come after). */
static void journal_to_base(struct td_store *s)
{
	for (size_t i = 0; i < s->n; i++) {
		s->v[i].in_base |= s->v[i].in_journal;
		s->v[i].in_journal = false;
	}
}

/* An entry the old journal holds: the checkpoint's (the live journal's come after). */
static void journal_to_old(struct td_store *s)
{
	for (size_t i = 0; i < s->n; i++) {
		s->v[i].in_old |= s->v[i].in_journal;
		s->v[i].in_journal = false;
	}
}

/* The live journal cut to its last whole record, or jtrim: the next append cuts it first. */
static void cut_torn_tail(const char *dir, struct td_store *s, size_t good)
{
	char path[PATH_MAX + 32], pf[PATH_MAX + 64];
	if (!journal_path(path, sizeof(path), dir, STORE_JOURNAL))
		return;
	int fd = io_openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
	if (fd < 0 || io_ftruncate(fd, (off_t)good, STORE_JOURNAL) != 0 ||
	    io_fdatasync(fd, STORE_JOURNAL) != 0) {
		log_warn("state: cannot cut %s to its last whole record (the next save tries again)",
			 printable(path, pf, sizeof(pf)));
		s->jtrim = true;
	}
	if (fd >= 0)
		close(fd);
}

/*
 * The files, then agents.checkpoint (what the checkpoints folded), then
 * agents.journal.old (a checkpoint that had not finished), then
 * agents.journal, each record replayed in order: every value a file or
 * agents.checkpoint holds is one the journals held before it or hold again
 * after it (a checkpoint writes the durable value of an entry, and a later
 * one is in a journal read after it), so a later step never puts an older
 * value over a newer one.  A damaged or
 * old-format journal is folded into the files at once (a checkpoint of
 * everything, here) and then removed or set aside.
 */
int td_store_load(struct td_store *s, const char *dir, char *err, size_t errlen)
{
	char adir[PATH_MAX];
	struct td_store tmp = { 0 };
	if (!s || !dir)
		return TOGGLE_EINVAL;
	tmp.quarantine = s->quarantine;
	tmp.journal = s->journal;
	tmp.journal_max = s->journal_max;
	tmp.base_max = s->base_max;
	td_store_free(s);
	if ((size_t)snprintf(adir, sizeof(adir), "%s/%s", dir, STORE_SUBDIR) >= sizeof(adir)) {
		util_seterr(err, errlen, "state directory: path too long");
		return TOGGLE_EINVAL;
	}
	struct jfile base = { .name = STORE_BASE }, old = { .name = STORE_JOURNAL_OLD },
		     live = { .name = STORE_JOURNAL };
	int rc = mkdir_p(dir, err, errlen);
	if (rc == 0)
		rc = mkdir_p(adir, err, errlen);
	if (rc == 0)
		rc = load_dir(adir, &tmp, err, errlen);
	if (rc == 0)
		rc = load_journal(dir, &base, 0, &tmp, err, errlen);
	journal_to_base(&tmp);
	if (rc == 0)
		rc = load_journal(dir, &old, 0, &tmp, err, errlen);
	journal_to_old(&tmp);
	if (rc == 0)
		rc = load_journal(dir, &live, old.scan.last_seq, &tmp, err, errlen);
	if (rc) {
		td_store_free(&tmp);
		return rc;
	}
	uint64_t last = old.scan.last_seq > live.scan.last_seq ? old.scan.last_seq : live.scan.last_seq;
	tmp.jseq = last + 1;
	tmp.old_present = old.present;
	tmp.base_present = base.present;
	/* agents.checkpoint is never written in format 1: one that reads so is folded too. */
	tmp.compact = old.scan.corrupt || live.scan.corrupt || base.scan.corrupt ||
		      old.scan.format == 1 || live.scan.format == 1 || base.scan.format == 1 ||
		      (!tmp.journal && (old.present || live.present || base.present));
	if (tmp.compact) {
		tmp.base_aside = base.scan.corrupt;
		tmp.old_aside = old.scan.corrupt;
		tmp.live_aside = live.scan.corrupt;
		journal_to_old(&tmp); /* every journal's entries are the checkpoint's */
	} else if (live.present) {
		tmp.jsize = live.scan.good;
		if (live.scan.torn)
			cut_torn_tail(dir, &tmp, live.scan.good);
	}
	/* What was just read is what is durable. */
	for (size_t i = 0; i < tmp.n; i++) {
		struct td_desired *dd = &tmp.v[i];
		dd->dirty = false;
		dd->owner = s;
		if (!value_copy(&dd->saved_standing, &dd->saved_n_plans, &dd->saved_steps,
				&dd->saved_specs, dd->standing, dd->n_plans, dd->plan_steps,
				dd->plan_specs)) {
			td_store_free(&tmp);
			util_seterr(err, errlen, "%s: out of memory while loading", adir);
			return TOGGLE_ENOMEM;
		}
	}
	tmp.dirty = false;
	*s = tmp;
	if (s->compact) {
		char cerr[512] = "";
		if (td_store_checkpoint(s, dir, cerr, sizeof(cerr)) != 0)
			log_warnx("state: cannot fold the journal into %s: %s; saves are refused until "
				  "that works (tried again each second)", adir, cerr);
		else if (old.scan.format == 1 || live.scan.format == 1)
			log_info("state: the journal of the format before issue 30 folded into %s", adir);
	}
	return 0;
}

/* ---- saving -------------------------------------------------------------- */

/* One entry's document as JSON, or NULL on ENOMEM or text jansson refuses. */
static json_t *entry_json(const struct td_desired *dd)
{
	json_t *o = json_object(), *plans = json_array();
	if (!o || !plans || json_object_set_new(o, "format", json_integer(STORE_FORMAT)) ||
	    json_object_set_new(o, "name", json_string(dd->name)))
		goto fail;
	if (dd->standing && json_object_set_new(o, "enabled", json_string(dd->standing)))
		goto fail;
	for (size_t i = 0; i < dd->n_plans; i++) {
		/* set_new/append_new take the reference even on failure; json_pack is avoided. */
		json_t *e = json_object();
		if (!e || json_object_set_new(e, "step", json_integer(dd->plan_steps[i])) ||
		    json_object_set_new(e, "hooks", json_string(dd->plan_specs[i])) ||
		    json_array_append_new(plans, e)) {
			json_decref(e);
			goto fail;
		}
	}
	if (json_object_set_new(o, "plans", plans))
		plans = NULL; /* taken even on failure */
	else
		return o;
fail:
	json_decref(plans);
	json_decref(o);
	return NULL;
}

/* One entry's file text, or NULL (errno ENOMEM). */
static char *dump_entry(const struct td_desired *dd)
{
	json_t *o = entry_json(dd);
	char *text = o ? json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(2)) : NULL;
	json_decref(o);
	if (!text)
		errno = ENOMEM;
	return text;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t w = io_write(fd, buf, len, NULL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

/*
 * Write dfd/tmp, not yet synced: its open fd, or -1 with errno.  *created
 * tells the caller there is a file to remove.
 */
static int write_tmp(int dfd, const char *tmp, const char *text, bool *created)
{
	/* O_NOFOLLOW: never write through a link planted in the state directory. */
	int fd = io_openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
			   STORE_FILE_MODE);
	if (fd < 0)
		return -1;
	*created = true;
	/* A stale tmp from a crash keeps its old mode through O_TRUNC: force it. */
	if (fchmod(fd, STORE_FILE_MODE) != 0 || write_all(fd, text, strlen(text)) != 0 ||
	    write_all(fd, "\n", 1) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

struct sync_slice {
	const int *fds;
	size_t n;
	int err; /* the first errno, or 0 */
};

static void *sync_slice_run(void *arg)
{
	struct sync_slice *sl = arg;
	for (size_t i = 0; i < sl->n; i++)
		if (io_fsync(sl->fds[i], NULL) != 0 && !sl->err)
			sl->err = errno;
	return NULL;
}

/*
 * fsync n files, several at a time: concurrent fsyncs share the journal
 * commits of ext4 and xfs, so a save of many files costs a few commits, not
 * one per file (256 files on the CI VM's ext4: 24-34 ms against 110-750 ms
 * one after the other).  Then close them.  0, or the first errno.
 */
static int sync_close_all(const int *fds, size_t n)
{
	struct sync_slice sl[STORE_SYNC_THREADS];
	pthread_t th[STORE_SYNC_THREADS];
	bool started[STORE_SYNC_THREADS] = { false };
	size_t k = n < STORE_SYNC_THREADS ? n : STORE_SYNC_THREADS;
	for (size_t i = 0; i < k; i++) {
		sl[i] = (struct sync_slice){ fds + i * n / k, (i + 1) * n / k - i * n / k, 0 };
		/* A thread that cannot start: its slice runs here. */
		started[i] = i > 0 && pthread_create(&th[i], NULL, sync_slice_run, &sl[i]) == 0;
	}
	int err = 0;
	for (size_t i = 0; i < k; i++) {
		if (!started[i])
			sync_slice_run(&sl[i]);
	}
	for (size_t i = 0; i < k; i++) {
		if (started[i])
			pthread_join(th[i], NULL);
		if (!err)
			err = sl[i].err;
	}
	for (size_t i = 0; i < n; i++)
		if (close(fds[i]) != 0 && !err)
			err = errno;
	return err;
}

/* EINVAL: a file system that cannot sync directories; nothing more to do there. */
static int fsync_dirfd(int fd)
{
	return io_fsync(fd, NULL) != 0 && errno != EINVAL ? -1 : 0;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync_dirfd(fd);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}


/* agents/ under dir, opened; made when missing (*made: its parent must be synced too). */
static int open_agents_dir(const char *dir, bool *made)
{
	char adir[PATH_MAX];
	if ((size_t)snprintf(adir, sizeof(adir), "%s/%s", dir, STORE_SUBDIR) >= sizeof(adir)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(adir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if ((fault(TD_STORE_OPEN, STORE_SUBDIR) || mkdir(adir, STORE_DIR_MODE) != 0) && errno != EEXIST)
			return -1;
		*made = true;
		fd = open(adir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	return fd;
}

/* ---- saving in three steps ----------------------------------------------- */

struct job_entry {
	size_t index;          /* in the store's array */
	struct td_desired val; /* the entry as it was when the job began (name and value) */
	bool tmp_made;         /* its <name>.json.tmp exists */
	bool renamed;          /* its file was replaced or removed */
};

enum job_kind {
	JOB_FILES,  /* a save without the journal: the dirty entries' files */
	JOB_APPEND, /* a save: one record appended to the journal (rotating it first) */
	JOB_CKPT,   /* a checkpoint: the files of what the old journal holds, then it removed */
};

struct td_store_job {
	char dir[PATH_MAX];
	enum job_kind kind;
	size_t n, cap_e;       /* entries copied, and room for (cap_e) */
	struct job_entry *e;
	/* JOB_APPEND: the journal's fd, taken from the store and given back. */
	bool rotate;           /* rename agents.journal to agents.journal.old first */
	bool rotated;          /* it was (even if the append then failed) */
	bool jopen;
	int jfd;
	uint64_t jsize;        /* its valid length, before and after this job */
	bool jsize_unsure;     /* a failed append may have left bytes past jsize */
	bool jtrim;            /* cut what lies past jsize before appending */
	bool jdir_unsynced;    /* sync the state directory before the record counts */
	uint64_t seq;          /* the record's sequence number */
	/* JOB_CKPT: what becomes of the journals once the files are durable. */
	bool compact;          /* both journals go (else only the old one) */
	bool pace;             /* pause between rounds (beside saves; not at start or stop) */
	bool old_aside, live_aside; /* set aside (corrupt), not removed */
	char old_to[PATH_MAX], live_to[PATH_MAX]; /* the names they were set aside as */
	uint64_t base_max;     /* agents.checkpoint up to this size, else the files (0: files) */
	bool wrote_base;       /* the entries went to agents.checkpoint, not to their files */
	bool base_aside;       /* files: agents.checkpoint is corrupt, set aside */
	char base_to[PATH_MAX];
	int rc;                /* 0 or TOGGLE_EIO */
	int err_no;
	char reason[PATH_MAX + 256]; /* "<what> <file>: <strerror>" */
	uint64_t t0;           /* td_mono_ns() at begin: save_lat times begin to end */
};

static void value_free(char **standing, size_t *n, int64_t **steps, char ***specs)
{
	for (size_t i = 0; *specs && i < *n; i++)
		free((*specs)[i]);
	free(*specs);
	free(*steps);
	free(*standing);
	*standing = NULL;
	*specs = NULL;
	*steps = NULL;
	*n = 0;
}

/* Deep copy of a value; false on ENOMEM (nothing allocated then). */
static bool value_copy(char **standing, size_t *n, int64_t **steps, char ***specs,
		       const char *from_standing, size_t from_n, const int64_t *from_steps,
		       char *const *from_specs)
{
	char *nst = from_standing ? strdup(from_standing) : NULL;
	int64_t *nsteps = from_n ? malloc(from_n * sizeof(*nsteps)) : NULL;
	char **nspecs = from_n ? calloc(from_n, sizeof(*nspecs)) : NULL;
	bool ok = (!from_standing || nst) && (!from_n || (nsteps && nspecs));
	for (size_t i = 0; ok && i < from_n; i++)
		ok = (nspecs[i] = strdup(from_specs[i])) != NULL;
	if (!ok) {
		value_free(&nst, &from_n, &nsteps, &nspecs);
		return false;
	}
	if (from_n)
		memcpy(nsteps, from_steps, from_n * sizeof(*nsteps));
	*standing = nst;
	*n = from_n;
	*steps = nsteps;
	*specs = nspecs;
	return true;
}

static void saved_free(struct td_desired *dd)
{
	value_free(&dd->saved_standing, &dd->saved_n_plans, &dd->saved_steps, &dd->saved_specs);
}

static bool saved_equal_cur(const struct td_desired *dd)
{
	if (!dd->standing != !dd->saved_standing ||
	    (dd->standing && strcmp(dd->standing, dd->saved_standing) != 0))
		return false;
	return plans_equal(dd, dd->saved_steps, (const char *const *)dd->saved_specs,
			   dd->saved_n_plans);
}

static void job_free(struct td_store_job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++) {
		struct td_desired *v = &j->e[i].val;
		value_free(&v->standing, &v->n_plans, &v->plan_steps, &v->plan_specs);
	}
	big_free(j->e, j->cap_e * sizeof(*j->e));
	free(j);
}

size_t td_store_job_entries(const struct td_store_job *j)
{
	return j ? j->n : 0;
}

static struct td_store_job *job_new(const char *dir)
{
	struct td_store_job *j = calloc(1, sizeof(*j));
	if (!j || !dir || strlen(dir) >= sizeof(j->dir)) {
		free(j);
		errno = j ? EINVAL : ENOMEM;
		return NULL;
	}
	memcpy(j->dir, dir, strlen(dir) + 1);
	j->t0 = td_mono_ns();
	return j;
}

/* Copy the entries pick() chooses into the job: their current value, or (saved) the durable one. */
static int job_snapshot(struct td_store_job *j, struct td_store *s,
			bool (*pick)(const struct td_desired *, const struct td_store_job *), bool saved)
{
	size_t n = 0;
	for (size_t i = 0; i < s->n; i++)
		n += pick(&s->v[i], j);
	if (n && !(j->e = big_calloc(n * sizeof(*j->e))))
		return -1;
	j->cap_e = n;
	for (size_t i = 0; i < s->n && j->n < n; i++) {
		struct td_desired *dd = &s->v[i];
		if (!pick(dd, j))
			continue;
		struct job_entry *e = &j->e[j->n];
		e->index = i;
		memcpy(e->val.name, dd->name, sizeof(e->val.name));
		bool ok = !saved ? value_copy(&e->val.standing, &e->val.n_plans, &e->val.plan_steps,
					      &e->val.plan_specs, dd->standing, dd->n_plans,
					      dd->plan_steps, dd->plan_specs)
				 : value_copy(&e->val.standing, &e->val.n_plans, &e->val.plan_steps,
					      &e->val.plan_specs, dd->saved_standing,
					      dd->saved_n_plans, dd->saved_steps, dd->saved_specs);
		if (!ok)
			return -1;
		j->n++;
	}
	return 0;
}

static bool pick_dirty(const struct td_desired *dd, const struct td_store_job *j)
{
	(void)j;
	return dd->dirty;
}

/*
 * Snapshot the dirty entries; they become clean (a change made while the
 * job runs marks them dirty again, for the next job).  NULL with errno on
 * ENOMEM, the store untouched.  While a checkpoint has failed (or the load
 * could not fold a damaged journal into the files) the job fails at once:
 * a save is refused rather than acknowledged on a journal that cannot be
 * ended.
 */
struct td_store_job *td_store_job_begin(struct td_store *s, const char *dir)
{
	struct td_store_job *j = s ? job_new(dir) : NULL;
	if (!j) {
		if (!s)
			errno = EINVAL;
		return NULL;
	}
	uint64_t jmax = s->journal_max ? s->journal_max : STORE_JOURNAL_MAX;
	j->kind = s->journal ? JOB_APPEND : JOB_FILES;
	if (job_snapshot(j, s, pick_dirty, false) != 0) {
		job_free(j);
		errno = ENOMEM;
		return NULL;
	}
	if (j->n && (s->ckpt_failed || s->compact)) {
		j->rc = TOGGLE_EIO;
		j->err_no = EIO;
		snprintf(j->reason, sizeof(j->reason), "a checkpoint failed, saves wait for one to "
			 "succeed: %s", s->ckpt_reason[0] ? s->ckpt_reason : "(no reason)");
	}
	if (j->kind == JOB_APPEND) {
		j->rotate = !s->old_present && s->jsize > 0 && s->jsize >= jmax;
		j->jopen = s->jopen;
		j->jfd = s->jfd;
		j->jsize = s->jsize;
		j->jtrim = s->jtrim;
		j->jdir_unsynced = s->jdir_unsynced;
		j->seq = s->jseq ? s->jseq : 1;
		s->jopen = false; /* the job holds the journal until it ends */
	}
	for (size_t k = 0; k < j->n; k++)
		s->v[j->e[k].index].dirty = false;
	s->dirty = false;
	return j;
}

/* The reason names <dir>/<fname>, or <dir>/agents/<fname> for an entry's file. */
static int job_fail(struct td_store_job *j, const char *what, const char *fname)
{
	int e = errno;
	char pf[80];
	bool top = strcmp(fname, STORE_JOURNAL) == 0 || strcmp(fname, STORE_JOURNAL_OLD) == 0 ||
		   strcmp(fname, STORE_BASE) == 0 || strcmp(fname, STORE_BASE_TMP) == 0;
	if (j->rc)
		return -1; /* the first failure is the reason */
	j->rc = TOGGLE_EIO;
	j->err_no = e;
	snprintf(j->reason, sizeof(j->reason), "%s %s/%s%s: %s", what, j->dir,
		 top ? "" : STORE_SUBDIR "/", printable(fname, pf, sizeof(pf)), strerror(e));
	return -1;
}

static bool entry_empty(const struct td_desired *v)
{
	return !v->standing && v->n_plans == 0;
}

/*
 * The bytes of one record (REC_HDR, then the payload), or NULL with errno;
 * in a buffer of big_alloc (big) or malloc.  The JSON is written straight
 * into it (json_dumpb, twice: its size, then its bytes).
 */
static char *encode_record(uint64_t seq, const struct td_desired *const *v, size_t n, size_t *len,
			   bool big)
{
	const size_t flags = JSON_SORT_KEYS | JSON_COMPACT;
	json_t *rec = json_object(), *arr = json_array();
	bool ok = rec && arr && !json_object_set_new(rec, "format", json_integer(STORE_FORMAT));
	for (size_t i = 0; ok && i < n; i++) {
		json_t *e = entry_json(v[i]);
		ok = e && !json_array_append_new(arr, e);
	}
	if (ok)
		ok = !json_object_set(rec, "entries", arr);
	json_decref(arr);
	size_t text = ok ? json_dumpb(rec, NULL, 0, flags) : 0;
	size_t plen = text + 1; /* and a newline: `tail` shows one record a line */
	unsigned char *out = NULL;
	if (text && plen <= REC_MAX)
		out = big ? big_alloc(REC_HDR + plen) : malloc(REC_HDR + plen);
	if (out && json_dumpb(rec, (char *)out + REC_HDR, text, flags) != text) {
		if (big)
			big_free(out, REC_HDR + plen);
		else
			free(out);
		out = NULL;
	}
	json_decref(rec);
	if (!out) {
		errno = text && plen > REC_MAX ? EFBIG : ENOMEM;
		return NULL;
	}
	memcpy(out, REC_MAGIC, 4);
	for (int b = 0; b < 4; b++)
		out[4 + b] = (unsigned char)(plen >> (8 * b));
	for (int b = 0; b < 8; b++)
		out[8 + b] = (unsigned char)(seq >> (8 * b));
	uint32_t hcrc = td_crc32c(0, out, 16);
	out[REC_HDR + plen - 1] = '\n';
	uint32_t pcrc = td_crc32c(0, out + REC_HDR, plen);
	for (int b = 0; b < 4; b++) {
		out[16 + b] = (unsigned char)(hcrc >> (8 * b));
		out[20 + b] = (unsigned char)(pcrc >> (8 * b));
	}
	*len = REC_HDR + plen;
	return (char *)out;
}

char *td_store_encode_record(uint64_t seq, const struct td_desired *v, size_t n, size_t *len)
{
	const struct td_desired **pv = n ? malloc(n * sizeof(*pv)) : NULL;
	if (n && !pv)
		return NULL;
	for (size_t i = 0; i < n; i++)
		pv[i] = &v[i];
	char *out = encode_record(seq, pv, n, len, false);
	free(pv);
	return out;
}

static int pwrite_all(int fd, const char *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = io_pwrite(fd, buf + done, len - done, (off_t)(off + done), STORE_JOURNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

/* Open (or create) agents.journal for appending; -1 with the job failed. */
static int journal_open(struct td_store_job *j, const char *path)
{
	int fd = io_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			   STORE_FILE_MODE);
	if (fd >= 0) {
		j->jdir_unsynced = true; /* a new journal's name must survive a crash too */
		j->jtrim = false;
		j->jsize = 0;
	} else if (errno == EEXIST) {
		struct stat st;
		fd = io_openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
		if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
			close(fd);
			fd = -1;
			errno = EINVAL;
			return job_fail(j, "not a regular file:", STORE_JOURNAL);
		}
		if (fd >= 0 && (uint64_t)st.st_size != j->jsize)
			j->jtrim = true; /* bytes past the last record we know (a tail not cut) */
	}
	if (fd < 0)
		return job_fail(j, "cannot open", STORE_JOURNAL);
	j->jfd = fd;
	j->jopen = true;
	return 0;
}

/*
 * Append one record (the job's entries, its sequence number) at the
 * journal's valid length, then fdatasync it (and the directory when a
 * name changed): the entries are durable.  Past journal_max the journal is
 * first renamed agents.journal.old (never over one: one checkpoint at a
 * time) and a new one started: the checkpoint writes the old one's entries
 * out while saves go on here.  A failure cuts the journal back (or says it
 * could not: the next append cuts first).
 */
static void journal_append(struct td_store_job *j)
{
	char path[PATH_MAX + 32], opath[PATH_MAX + 32];
	if (!journal_path(path, sizeof(path), j->dir, STORE_JOURNAL) ||
	    !journal_path(opath, sizeof(opath), j->dir, STORE_JOURNAL_OLD)) {
		errno = ENAMETOOLONG;
		job_fail(j, "cannot open", STORE_JOURNAL);
		return;
	}
	if (j->rotate) {
		if (rename_noreplace(AT_FDCWD, path, AT_FDCWD, opath) != 0) {
			job_fail(j, "cannot rotate (rename to " STORE_JOURNAL_OLD ")", STORE_JOURNAL);
			return;
		}
		j->rotated = true;
		if (j->jopen)
			close(j->jfd); /* it is the old journal's now */
		j->jopen = false;
		j->jsize = 0;
		j->jtrim = j->jsize_unsure = false;
		j->jdir_unsynced = true;
	}
	if (!j->jopen && journal_open(j, path) != 0)
		return;
	if (j->jtrim) {
		if (io_ftruncate(j->jfd, (off_t)j->jsize, STORE_JOURNAL) != 0) {
			job_fail(j, "cannot cut to its last record", STORE_JOURNAL);
			return;
		}
		j->jtrim = false; /* synced with the record below */
	}
	const struct td_desired **pv = malloc(j->n * sizeof(*pv));
	for (size_t i = 0; pv && i < j->n; i++)
		pv[i] = &j->e[i].val;
	size_t len = 0;
	char *rec = pv ? encode_record(j->seq, pv, j->n, &len, true) : NULL;
	free(pv);
	if (!rec) {
		job_fail(j, "cannot encode a record of", STORE_JOURNAL);
		return;
	}
	if (j->jsize + len > STORE_JOURNAL_LIMIT) {
		big_free(rec, len);
		errno = EFBIG;
		job_fail(j, "no room (a checkpoint has not ended) in", STORE_JOURNAL);
		return;
	}
	int rc = pwrite_all(j->jfd, rec, len, j->jsize);
	big_free(rec, len);
	if (rc == 0)
		rc = io_fdatasync(j->jfd, STORE_JOURNAL);
	if (rc == 0 && j->jdir_unsynced && fsync_dir(j->dir) != 0)
		rc = -1;
	if (rc != 0) {
		job_fail(j, "cannot append to", STORE_JOURNAL);
		if (io_ftruncate(j->jfd, (off_t)j->jsize, STORE_JOURNAL) != 0 ||
		    io_fdatasync(j->jfd, STORE_JOURNAL) != 0)
			j->jsize_unsure = true;
		return;
	}
	j->jsize += len;
	j->jdir_unsynced = false;
}

/* Write and sync the tmp files of entries [from, to); false with the job failed. */
static bool write_tmps(struct td_store_job *j, int dfd, size_t from, size_t to)
{
	char tmp[STORE_FNAME_MAX];
	int fds[STORE_SYNC_CHUNK];
	size_t nfd = 0;
	for (size_t i = from; i < to; i++) {
		struct job_entry *e = &j->e[i];
		if (!name_ok(e->val.name)) {
			errno = EINVAL;
			job_fail(j, "bad name", e->val.name);
			break;
		}
		if (entry_empty(&e->val))
			continue;
		snprintf(tmp, sizeof(tmp), "%s%s%s", e->val.name, STORE_SUFFIX, STORE_TMP_SUFFIX);
		char *text = dump_entry(&e->val);
		int fd = text ? write_tmp(dfd, tmp, text, &e->tmp_made) : -1;
		bool encoded = text != NULL;
		free(text);
		if (fd < 0) {
			job_fail(j, encoded ? "cannot write" : "cannot encode", tmp);
			break;
		}
		fds[nfd++] = fd;
		if (nfd == STORE_SYNC_CHUNK) {
			int err = sync_close_all(fds, nfd);
			nfd = 0;
			if (err) {
				errno = err;
				job_fail(j, "cannot sync", tmp);
				break;
			}
		}
	}
	if (nfd) {
		int err = sync_close_all(fds, nfd); /* after a failure: closed all the same */
		if (err) {
			errno = err;
			job_fail(j, "cannot sync", "");
		}
	}
	return j->rc == 0;
}

/* Rename the tmp files of [from, to) into place (empty entries: their file removed). */
static bool rename_tmps(struct td_store_job *j, int dfd, size_t from, size_t to, bool *changed)
{
	char fname[STORE_FNAME_MAX], tmp[STORE_FNAME_MAX];
	for (size_t i = from; j->rc == 0 && i < to; i++) {
		struct job_entry *e = &j->e[i];
		snprintf(fname, sizeof(fname), "%s%s", e->val.name, STORE_SUFFIX);
		snprintf(tmp, sizeof(tmp), "%s%s%s", e->val.name, STORE_SUFFIX, STORE_TMP_SUFFIX);
		if (entry_empty(&e->val)) {
			if (io_unlinkat(dfd, fname, 0) == 0)
				*changed = e->renamed = true;
			else if (errno != ENOENT)
				job_fail(j, "cannot remove", fname);
			continue;
		}
		if (io_renameat(dfd, tmp, dfd, fname) != 0) {
			job_fail(j, "cannot rename into", fname);
			break;
		}
		e->tmp_made = false;
		*changed = e->renamed = true;
	}
	return j->rc == 0;
}

/* The tmp files a failure left, removed. */
static void remove_tmps(struct td_store_job *j, int dfd)
{
	char tmp[STORE_FNAME_MAX];
	for (size_t i = 0; i < j->n; i++) {
		if (!j->e[i].tmp_made)
			continue;
		snprintf(tmp, sizeof(tmp), "%s%s%s", j->e[i].val.name, STORE_SUFFIX, STORE_TMP_SUFFIX);
		io_unlinkat(dfd, tmp, 0);
		j->e[i].tmp_made = false;
	}
}

/*
 * A save without the journal: every <name>.json.tmp written and synced (a
 * failure there removes them all and leaves every file as it was: a full
 * disk fails here), then renamed into place (empty entries: their file
 * removed) and the directory synced once.  A checkpoint: the same a chunk
 * at a time (its values are durable in the old journal already, so it
 * need not be all or nothing, and each round holds the disk briefly), then
 * the old journal removed and the state directory synced.
 */
static void files_write(struct td_store_job *j)
{
	bool made = false, changed = false;
	int dfd = open_agents_dir(j->dir, &made);
	if (dfd < 0) {
		job_fail(j, "cannot open", "");
		return;
	}
	size_t chunk = j->kind == JOB_CKPT ? STORE_CKPT_CHUNK : j->n;
	for (size_t from = 0; from < j->n && j->rc == 0; from += chunk) {
		size_t to = j->n - from < chunk ? j->n : from + chunk;
		uint64_t t0 = td_mono_ns();
		if (write_tmps(j, dfd, from, to))
			rename_tmps(j, dfd, from, to, &changed);
		/*
		 * Paced: after a round, as long a pause (at most 50 ms), so that the
		 * saves' own syncs find the disk free half the time.  Measured on the
		 * 2-core VM (issue 30): a set during a checkpoint took 1.0 to 1.4
		 * times its p50 outside one paced, 1.2 to 3.0 times unpaced.
		 */
		if (j->pace && to < j->n) {
			uint64_t us = (td_mono_ns() - t0) / 1000;
			usleep((useconds_t)(us < STORE_CKPT_PAUSE_MAX_US ? us : STORE_CKPT_PAUSE_MAX_US));
		}
	}
	remove_tmps(j, dfd);
	/* After the renames: the new files are in place but may not survive a crash. */
	if ((changed || made) && (fsync_dirfd(dfd) != 0 || (made && fsync_dir(j->dir) != 0)))
		job_fail(j, "cannot sync", "");
	close(dfd);
}

/* The checkpoint's end: the journals it covered removed (or set aside), the directory synced. */
static void journals_dispose(struct td_store_job *j)
{
	int dfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		job_fail(j, "cannot open", STORE_JOURNAL);
		return;
	}
	struct {
		const char *name;
		bool go, aside;
		char *to;
	} js[3] = {
		{ STORE_BASE, !j->wrote_base, j->base_aside, j->base_to },
		{ STORE_JOURNAL_OLD, true, j->old_aside, j->old_to },
		{ STORE_JOURNAL, j->compact, j->live_aside, j->live_to },
	};
	/*
	 * In load order, the directory synced after each: a later layer never
	 * goes while an earlier one that it overrides stays (a file system
	 * need not keep two unlinks in order across a crash).
	 */
	for (int k = 0; k < 3 && j->rc == 0; k++) {
		bool changed = false;
		if (!js[k].go)
			continue;
		if (js[k].aside) {
			if (set_aside(dfd, js[k].name, js[k].to, PATH_MAX) == 0)
				changed = true;
			else if (errno != ENOENT)
				job_fail(j, "cannot set aside", js[k].name);
		} else if (io_unlinkat(dfd, js[k].name, 0) == 0) {
			changed = true;
		} else if (errno != ENOENT) {
			job_fail(j, "cannot remove", js[k].name);
		}
		if (j->rc == 0 && changed && fsync_dirfd(dfd) != 0)
			job_fail(j, "cannot sync the directory of", js[k].name);
	}
	close(dfd);
}

/*
 * The checkpoint's entries (the old journal's and agents.checkpoint's)
 * as one record in a new agents.checkpoint: written under a temporary
 * name, synced, renamed over the old one, the directory synced.  One file
 * and three syncs, where writing each entry's file costs a file, an inode
 * and a sync per entry (256 on the VM: 8 rounds of a few journal commits
 * each, and ext4's inode allocation on the checkpoint's CPU).  0 written,
 * 1 larger than base_max (the files instead), -1 the job failed.
 */
static int base_write(struct td_store_job *j)
{
	char path[PATH_MAX + 32], tpath[PATH_MAX + 32];
	if (!journal_path(path, sizeof(path), j->dir, STORE_BASE) ||
	    !journal_path(tpath, sizeof(tpath), j->dir, STORE_BASE_TMP)) {
		errno = ENAMETOOLONG;
		return job_fail(j, "cannot open", STORE_BASE_TMP);
	}
	const struct td_desired **pv = malloc((j->n ? j->n : 1) * sizeof(*pv));
	for (size_t i = 0; pv && i < j->n; i++)
		pv[i] = &j->e[i].val;
	size_t len = 0;
	char *rec = pv ? encode_record(1, pv, j->n, &len, true) : NULL;
	free(pv);
	if (!rec && errno == EFBIG)
		return 1;
	if (!rec)
		return job_fail(j, "cannot encode a record of", STORE_BASE_TMP);
	if (len > j->base_max) {
		big_free(rec, len);
		return 1;
	}
	int fd = io_openat(AT_FDCWD, tpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
			   STORE_FILE_MODE);
	if (fd < 0) {
		big_free(rec, len);
		return job_fail(j, "cannot open", STORE_BASE_TMP);
	}
	int rc = fchmod(fd, STORE_FILE_MODE) == 0 ? write_all(fd, rec, len) : -1;
	big_free(rec, len);
	if (rc == 0)
		rc = io_fsync(fd, STORE_BASE_TMP);
	if (rc != 0) {
		job_fail(j, "cannot write", STORE_BASE_TMP);
		close(fd);
		io_unlinkat(AT_FDCWD, tpath, 0);
		return -1;
	}
	if (close(fd) != 0) {
		job_fail(j, "cannot write", STORE_BASE_TMP);
		io_unlinkat(AT_FDCWD, tpath, 0);
		return -1;
	}
	if (io_renameat(AT_FDCWD, tpath, AT_FDCWD, path) != 0) {
		job_fail(j, "cannot rename into", STORE_BASE);
		io_unlinkat(AT_FDCWD, tpath, 0);
		return -1;
	}
	/* Before the old journal goes: the new agents.checkpoint must be the one a crash keeps. */
	if (fsync_dir(j->dir) != 0)
		return job_fail(j, "cannot sync the directory of", STORE_BASE);
	j->wrote_base = true;
	return 0;
}

/* A checkpoint: the files, then (when they are durable) the journals it covered. */
static void ckpt_run(struct td_store_job *j)
{
	int rc = j->n && j->base_max ? base_write(j) : 1;
	if (rc == 1 && j->n)
		files_write(j);
	if (j->rc == 0)
		journals_dispose(j);
}

void td_store_job_run(struct td_store_job *j)
{
	if (!j || j->rc)
		return;
	switch (j->kind) {
	case JOB_APPEND:
		if (j->n)
			journal_append(j);
		break;
	case JOB_FILES:
		if (j->n)
			files_write(j);
		break;
	case JOB_CKPT:
		ckpt_run(j);
		break;
	}
}

/* The journal's fd back to the store (closed if the store was reloaded meanwhile). */
static void journal_give_back(struct td_store *s, struct td_store_job *j)
{
	if (!j->jopen)
		return;
	if (s->jopen && s->jfd != j->jfd) {
		close(j->jfd);
	} else {
		s->jfd = j->jfd;
		s->jopen = true;
	}
	j->jopen = false;
}

/*
 * Success: each entry's value is durable (`saved`).  Failure: the entries
 * are dirty again; one whose file was replaced, or whose record may have
 * stayed in the journal, is marked unsure, for a rollback to rewrite it.
 */
int td_store_job_end(struct td_store *s, struct td_store_job *j, char *err, size_t errlen)
{
	if (!s || !j || j->kind == JOB_CKPT) {
		if (s && j)
			return td_store_ckpt_end(s, j, err, errlen);
		job_free(j);
		errno = EINVAL;
		return TOGGLE_EINVAL;
	}
	int rc = j->rc;
	td_hist_add(&s->save_lat, td_mono_ns() - j->t0); /* begin and end: both on the loop thread */
	if (j->kind == JOB_APPEND) {
		journal_give_back(s, j);
		if (j->rotated) {
			s->old_present = true;
			journal_to_old(s);
		}
		s->jsize = j->jsize;
		s->jtrim = j->jtrim || j->jsize_unsure;
		s->jdir_unsynced = j->jdir_unsynced;
		if (rc == 0 && j->n)
			s->jseq = j->seq + 1;
	}
	for (size_t i = 0; i < j->n; i++) {
		struct job_entry *e = &j->e[i];
		if (e->index >= s->n || strcmp(s->v[e->index].name, e->val.name) != 0)
			continue; /* the store was reloaded meanwhile */
		struct td_desired *dd = &s->v[e->index];
		if (rc == 0) {
			if (j->kind == JOB_APPEND)
				dd->in_journal = true;
			saved_free(dd);
			dd->saved_standing = e->val.standing;
			dd->saved_n_plans = e->val.n_plans;
			dd->saved_steps = e->val.plan_steps;
			dd->saved_specs = e->val.plan_specs;
			e->val.standing = NULL;
			e->val.n_plans = 0;
			e->val.plan_steps = NULL;
			e->val.plan_specs = NULL;
			dd->unsure = false;
		} else {
			/* A record that could not be cut off is overridden by the next one. */
			dd->unsure |= e->renamed || j->jsize_unsure;
			mark_dirty(dd);
		}
	}
	if (rc == 0) {
		s->saves++;
	} else {
		s->save_errors++;
		util_seterr(err, errlen, "%s", j->reason);
	}
	int e = j->err_no;
	job_free(j);
	errno = e;
	return rc;
}

void td_store_job_cancel(struct td_store *s, struct td_store_job *j)
{
	for (size_t i = 0; s && j && i < j->n; i++)
		if (j->e[i].index < s->n && j->kind != JOB_CKPT)
			mark_dirty(&s->v[j->e[i].index]);
	if (s && j && j->kind == JOB_CKPT)
		s->ckpt_running = false;
	if (s && j)
		journal_give_back(s, j);
	else if (j && j->jopen)
		close(j->jfd);
	job_free(j);
}

/* ---- checkpoints ----------------------------------------------------------- */

bool td_store_ckpt_due(const struct td_store *s)
{
	return s && !s->ckpt_running && (s->old_present || s->compact);
}

static bool pick_ckpt(const struct td_desired *dd, const struct td_store_job *j)
{
	return dd->in_old || dd->in_base || (j->compact && dd->in_journal);
}

/*
 * The durable value of every entry the old journal holds (with compact:
 * every journal), to be written to its file.  Rotation waits for the end
 * of this checkpoint, so the set of such entries does not change while it
 * runs; saves append to the new journal meanwhile, and a later value they
 * make durable is replayed over the file at a load (files, old journal,
 * journal), so writing the value of the snapshot is never a step back.
 */
struct td_store_job *td_store_ckpt_begin(struct td_store *s, const char *dir)
{
	if (!td_store_ckpt_due(s)) {
		errno = EINVAL;
		return NULL;
	}
	struct td_store_job *j = job_new(dir);
	if (!j)
		return NULL;
	j->kind = JOB_CKPT;
	j->pace = true;
	j->compact = s->compact;
	j->old_aside = s->compact && s->old_aside;
	j->live_aside = s->compact && s->live_aside;
	j->base_aside = s->compact && s->base_aside;
	/* Folded into one file beside the saves; into the files at start, stop and past the bound. */
	j->base_max = s->compact ? 0 : s->base_max ? s->base_max
				     : s->journal_max ? s->journal_max : STORE_JOURNAL_MAX;
	if (job_snapshot(j, s, pick_ckpt, true) != 0) {
		job_free(j);
		errno = ENOMEM;
		return NULL;
	}
	s->ckpt_running = true;
	return j;
}

int td_store_ckpt_end(struct td_store *s, struct td_store_job *j, char *err, size_t errlen)
{
	int rc = j->rc;
	char pf[PATH_MAX + 64];
	s->ckpt_running = false;
	td_hist_add(&s->ckpt_lat, td_mono_ns() - j->t0);
	if (rc == 0) {
		s->checkpoints++;
		s->old_present = false;
		s->ckpt_failed = false;
		s->ckpt_reason[0] = '\0';
		/* Rotation waits for this end: in_old is the set the job began with. */
		for (size_t i = 0; i < s->n; i++) {
			s->v[i].in_base = j->wrote_base && (s->v[i].in_base || s->v[i].in_old);
			s->v[i].in_old = false;
			if (j->compact)
				s->v[i].in_journal = false;
		}
		s->base_present = j->wrote_base;
		s->ckpt_files += !j->wrote_base;
		if (j->base_to[0])
			log_warnx("state: %s/%s set aside as %s/%s", j->dir, STORE_BASE, j->dir,
				  printable(j->base_to, pf, sizeof(pf)));
		if (j->old_to[0])
			log_warnx("state: %s/%s set aside as %s/%s", j->dir, STORE_JOURNAL_OLD, j->dir,
				  printable(j->old_to, pf, sizeof(pf)));
		if (j->live_to[0])
			log_warnx("state: %s/%s set aside as %s/%s", j->dir, STORE_JOURNAL, j->dir,
				  printable(j->live_to, pf, sizeof(pf)));
		if (j->compact) {
			s->compact = s->old_aside = s->live_aside = s->base_aside = false;
			if (s->jopen)
				close(s->jfd);
			s->jopen = false;
			s->jsize = 0;
			s->jtrim = false;
		}
	} else {
		s->ckpt_failures++;
		s->ckpt_failed = true;
		snprintf(s->ckpt_reason, sizeof(s->ckpt_reason), "%.*s",
			 (int)sizeof(s->ckpt_reason) - 1, j->reason);
		util_seterr(err, errlen, "%s", j->reason);
	}
	int e = j->err_no;
	job_free(j);
	errno = e;
	return rc;
}

int td_store_checkpoint(struct td_store *s, const char *dir, char *err, size_t errlen)
{
	if (!td_store_ckpt_due(s))
		return 0;
	struct td_store_job *j = td_store_ckpt_begin(s, dir);
	if (!j) {
		util_seterr(err, errlen, "out of memory for a checkpoint");
		return TOGGLE_EIO;
	}
	j->pace = false; /* nothing else waits on the disk here (start, stop, tests) */
	td_store_job_run(j);
	return td_store_ckpt_end(s, j, err, errlen);
}

void td_store_rollback(struct td_store *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		struct td_desired *dd = &s->v[i];
		if (!saved_equal_cur(dd)) {
			char *st = NULL, **specs = NULL;
			int64_t *steps = NULL;
			size_t n = 0;
			if (value_copy(&st, &n, &steps, &specs, dd->saved_standing, dd->saved_n_plans,
				       dd->saved_steps, dd->saved_specs)) {
				free(dd->standing);
				desired_clear_plans(dd);
				dd->standing = st;
				dd->n_plans = n;
				dd->plan_steps = steps;
				dd->plan_specs = specs;
			} else {
				dd->unsure = true; /* no memory: the file is rewritten when it can be */
			}
		}
		dd->dirty = dd->unsure;
	}
	s->dirty = false;
	for (size_t i = 0; i < s->n; i++)
		s->dirty |= s->v[i].dirty;
}

/*
 * A save, in this thread; with the journal, a checkpoint that is due runs
 * after it (and one that failed is tried again before it: the save would
 * be refused otherwise).  The daemon runs both on the thread pool instead
 * (commit.c), the checkpoint beside the saves.
 */
int td_store_save(struct td_store *s, const char *dir)
{
	if (!s || !dir) {
		errno = EINVAL;
		return TOGGLE_EINVAL;
	}
	if (s->ckpt_failed)
		td_store_checkpoint(s, dir, NULL, 0);
	struct td_store_job *j = td_store_job_begin(s, dir);
	if (!j) {
		s->save_errors++;
		return TOGGLE_EIO;
	}
	td_store_job_run(j);
	int rc = td_store_job_end(s, j, NULL, 0);
	int e = errno;
	if (!s->ckpt_failed)
		td_store_checkpoint(s, dir, NULL, 0);
	errno = e;
	return rc;
}
