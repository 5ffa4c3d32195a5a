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
#define STORE_JOURNAL_MAX    (4u << 20)  /* bytes before a checkpoint (default) */
#define STORE_JOURNAL_LIMIT  (256u << 20) /* a longer journal is not read: corrupt */
#define STORE_SYNC_THREADS   16  /* fsyncs in flight at once */

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
	free(s->v);
	if (s->jopen)
		close(s->jfd);
	memset(s, 0, sizeof(*s));
}

/*
 * The array is allocated at its full bound on first use (a few hundred KiB,
 * touched lazily), so a pointer returned here stays valid until
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
	if (!create || !name_ok(name) || s->n >= TD_MAX_STORED_AGENTS)
		return NULL;
	if (!s->v && !(s->v = calloc(TD_MAX_STORED_AGENTS, sizeof(*s->v))))
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
	char *text = malloc(cap);
	if (!text) {
		close(fd);
		return out_of_memory(&lc);
	}
	size_t len = read_upto(fd, text, cap);
	close(fd);
	int rc = td_store_parse_file(path, stem, text, len, out, err, errlen);
	free(text);
	return rc;
}

static int fsync_dirfd(int fd);

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
	char aside[STORE_FNAME_MAX + 32], pf[80];
	snprintf(aside, sizeof(aside), "%s%s-%lld", fname, STORE_BAD_SUFFIX, (long long)time(NULL));
	out->quarantined++;
	if (io_renameat(dfd, fname, dfd, aside) != 0) {
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
		if (strstr(fname, STORE_SUFFIX STORE_BAD_SUFFIX "-"))
			continue; /* set aside by an earlier start, logged then */
		if (ends_with(fname, len, STORE_TMP_SUFFIX)) {
			if (io_unlinkat(dfd, fname, 0) != 0 && errno != ENOENT)
				log_warn("state: cannot remove the leftover %s/%s", adir,
					 printable(fname, pf, sizeof(pf)));
			continue;
		}
		if (!ends_with(fname, len, STORE_SUFFIX)) {
			note_ignored(adir, fname, "not <agent name>" STORE_SUFFIX, &ignored);
			continue;
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
		if (!stems && !(stems = malloc(TD_MAX_STORED_AGENTS * sizeof(*stems)))) {
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
	free(stems);
	return rc;
}

static bool journal_path(char *buf, size_t len, const char *dir);
static int write_all(int fd, const char *buf, size_t len);

/*
 * One journal record into a scratch store, checked whole: every entry a
 * valid document of a valid key, no key twice.  0 or TOGGLE_EINVAL/ENOMEM.
 */
static int journal_record(const struct load_ctx *lc, const char *line, size_t len,
			  struct td_store *scratch)
{
	static const char *const keys[] = { "format", "entries", NULL };
	json_error_t jerr;
	json_t *rec = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
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

/*
 * The journal's bytes replayed over out: each complete record (a line) whole,
 * in order, a later one overriding; a last line without its newline is left
 * (torn).  *good: the length of the records applied; *corrupt: the record
 * after them is a complete line that is not valid (TOGGLE_EINVAL).  path
 * names the journal in errors.  0, TOGGLE_EINVAL or TOGGLE_ENOMEM.
 */
int td_store_parse_journal(const char *path, const char *buf, size_t size, struct td_store *out,
			   size_t *good, bool *corrupt, char *err, size_t errlen)
{
	size_t pos = 0, lineno = 0;
	int rc = 0;
	*good = 0;
	*corrupt = false;
	while (pos < size) {
		const char *nl = memchr(buf + pos, '\n', size - pos);
		if (!nl)
			break; /* torn: never completed, never acknowledged */
		char where[PATH_MAX + 64];
		snprintf(where, sizeof(where), "%s: record %zu", path, ++lineno);
		struct load_ctx lc = { where, err, errlen };
		struct td_store scratch = { 0 };
		rc = journal_record(&lc, buf + pos, (size_t)(nl - buf) - pos, &scratch);
		for (size_t i = 0; rc == 0 && i < scratch.n; i++) {
			struct td_desired *sd = &scratch.v[i];
			struct td_desired *dd = td_store_get(out, sd->name, true);
			if (!dd || td_desired_set_standing(dd, sd->standing) != 0 ||
			    td_desired_set_plans(dd, sd->plan_steps, sd->plan_specs, sd->n_plans) != 0)
				rc = dd ? out_of_memory(&lc) : schema_error(&lc, "entries", "more than %d names",
									      TD_MAX_STORED_AGENTS);
			else
				dd->in_journal = true;
		}
		td_store_free(&scratch);
		if (rc == TOGGLE_EINVAL) {
			*corrupt = true;
			break;
		}
		if (rc)
			break;
		pos = *good = (size_t)(nl - buf) + 1;
	}
	return rc;
}

/*
 * Replay <dir>/agents.journal over what the files held: each record whole,
 * in order, a later one overriding.  A last line without its newline is a
 * record whose save never completed (and was never acknowledged): cut off.
 * A complete line that is not a valid record is corruption: refused, or with
 * quarantine the journal is copied aside as agents.journal.corrupt-<time>
 * and cut there (what came before it stays).
 */
static int load_journal(const char *dir, struct td_store *out, char *err, size_t errlen)
{
	char path[PATH_MAX + 32];
	if (!journal_path(path, sizeof(path), dir)) {
		util_seterr(err, errlen, "state directory: path too long");
		return TOGGLE_EINVAL;
	}
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT)
		return 0;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		util_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return TOGGLE_EIO;
	}
	if (!S_ISREG(st.st_mode) || (uintmax_t)st.st_size > STORE_JOURNAL_LIMIT) {
		util_seterr(err, errlen, "%s: not a regular file of at most %u bytes", path,
		            STORE_JOURNAL_LIMIT);
		close(fd);
		return TOGGLE_EINVAL;
	}
	size_t size = (size_t)st.st_size;
	char *buf = malloc(size ? size : 1);
	size_t got = buf ? read_upto(fd, buf, size) : 0;
	if (!buf || got != size) {
		util_seterr(err, errlen, buf ? "cannot read %s" : "%s: out of memory while loading", path);
		free(buf);
		close(fd);
		return buf ? TOGGLE_EIO : TOGGLE_ENOMEM;
	}
	size_t good = 0;
	bool corrupt = false;
	int rc = td_store_parse_journal(path, buf, size, out, &good, &corrupt, err, errlen);
	if (rc == 0 || (corrupt && out->quarantine)) {
		rc = 0;
		if (corrupt) {
			char aside[PATH_MAX + 64], pf[PATH_MAX + 64];
			snprintf(aside, sizeof(aside), "%s%s-%lld", path, STORE_BAD_SUFFIX,
				 (long long)time(NULL));
			int afd = io_openat(AT_FDCWD, aside, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
					    STORE_FILE_MODE);
			bool kept = afd >= 0 && write_all(afd, buf, size) == 0 && io_fsync(afd, STORE_JOURNAL) == 0;
			if (afd >= 0)
				close(afd);
			out->quarantined++;
			log_warnx("state: %s; %s copied to %s and cut before that record, starting with "
				  "what came before (--strict-state: refuse to start instead)", err,
				  path, kept ? printable(aside, pf, sizeof(pf)) : "(could not copy)");
		}
		if (good < size && (io_ftruncate(fd, (off_t)good, STORE_JOURNAL) != 0 ||
				    io_fsync(fd, STORE_JOURNAL) != 0)) {
			util_seterr(err, errlen, "cannot cut %s to its last complete record: %s", path,
			            strerror(errno));
			rc = TOGGLE_EIO;
		}
		out->jsize = good;
	}
	free(buf);
	close(fd);
	return rc;
}

int td_store_load(struct td_store *s, const char *dir, char *err, size_t errlen)
{
	char adir[PATH_MAX];
	struct td_store tmp = { 0 };
	if (!s || !dir)
		return TOGGLE_EINVAL;
	tmp.quarantine = s->quarantine;
	tmp.journal = s->journal;
	tmp.journal_max = s->journal_max;
	td_store_free(s);
	if ((size_t)snprintf(adir, sizeof(adir), "%s/%s", dir, STORE_SUBDIR) >= sizeof(adir)) {
		util_seterr(err, errlen, "state directory: path too long");
		return TOGGLE_EINVAL;
	}
	int rc = mkdir_p(dir, err, errlen);
	if (rc == 0)
		rc = mkdir_p(adir, err, errlen);
	if (rc == 0)
		rc = load_dir(adir, &tmp, err, errlen);
	if (rc == 0)
		rc = load_journal(dir, &tmp, err, errlen);
	if (rc) {
		td_store_free(&tmp);
		return rc;
	}
	/* What was just read is what the files hold. */
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
	bool was_dirty;        /* a change to save (else: a checkpoint writes its file) */
	bool tmp_made;         /* its <name>.json.tmp exists */
	bool renamed;          /* its file was replaced or removed */
};

struct td_store_job {
	char dir[PATH_MAX];
	size_t n;
	struct job_entry *e;
	bool journal;          /* append one record to the journal */
	bool checkpoint;       /* write the files, then empty the journal */
	bool jopen;            /* the journal's fd, taken from the store and given back */
	int jfd;
	uint64_t jsize;        /* its valid length, before and after this job */
	bool jsize_unsure;     /* a failed append may have left bytes past jsize */
	bool jtrim;            /* cut what lies past the record this job appends */
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
	free(j->e);
	free(j);
}

size_t td_store_job_entries(const struct td_store_job *j)
{
	return j ? j->n : 0;
}

/*
 * Snapshot the dirty entries; they become clean (a change made while the
 * job runs marks them dirty again, for the next job).  NULL with errno on
 * ENOMEM, the store untouched.
 */
struct td_store_job *td_store_job_begin(struct td_store *s, const char *dir)
{
	struct td_store_job *j = calloc(1, sizeof(*j));
	size_t n = 0;
	if (!j || !s || !dir || strlen(dir) >= sizeof(j->dir)) {
		free(j);
		errno = j ? EINVAL : ENOMEM;
		return NULL;
	}
	memcpy(j->dir, dir, strlen(dir) + 1);
	j->t0 = td_mono_ns();
	uint64_t jmax = s->journal_max ? s->journal_max : STORE_JOURNAL_MAX;
	/* A checkpoint also writes the files of the entries whose value is only in the journal. */
	j->checkpoint = s->jsize > 0 && (!s->journal || s->jsize >= jmax);
	j->journal = s->journal && !j->checkpoint;
	j->jopen = s->jopen;
	j->jfd = s->jfd;
	j->jsize = s->jsize;
	j->jtrim = s->jtrim;
	for (size_t i = 0; i < s->n; i++)
		n += s->v[i].dirty || (j->checkpoint && s->v[i].in_journal);
	if (n && !(j->e = calloc(n, sizeof(*j->e)))) {
		free(j);
		errno = ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < s->n && j->n < n; i++) {
		struct td_desired *dd = &s->v[i];
		if (!dd->dirty && !(j->checkpoint && dd->in_journal))
			continue;
		struct job_entry *e = &j->e[j->n];
		e->index = i;
		e->was_dirty = dd->dirty;
		memcpy(e->val.name, dd->name, sizeof(e->val.name));
		bool ok = dd->dirty ? value_copy(&e->val.standing, &e->val.n_plans, &e->val.plan_steps,
						 &e->val.plan_specs, dd->standing, dd->n_plans,
						 dd->plan_steps, dd->plan_specs)
				    : value_copy(&e->val.standing, &e->val.n_plans, &e->val.plan_steps,
						 &e->val.plan_specs, dd->saved_standing,
						 dd->saved_n_plans, dd->saved_steps, dd->saved_specs);
		if (!ok) {
			job_free(j);
			errno = ENOMEM;
			return NULL;
		}
		j->n++;
	}
	for (size_t k = 0; k < j->n; k++)
		s->v[j->e[k].index].dirty = false;
	s->dirty = false;
	s->jopen = false; /* the job holds the journal until it ends */
	return j;
}

/* The reason names <dir>/<fname>, or <dir>/agents/<fname> for an entry's file. */
static int job_fail(struct td_store_job *j, const char *what, const char *fname)
{
	int e = errno;
	char pf[80];
	bool journal = strcmp(fname, STORE_JOURNAL) == 0;
	j->rc = TOGGLE_EIO;
	j->err_no = e;
	snprintf(j->reason, sizeof(j->reason), "%s %s/%s%s: %s", what, j->dir,
		 journal ? "" : STORE_SUBDIR "/", printable(fname, pf, sizeof(pf)), strerror(e));
	return -1;
}

static bool entry_empty(const struct td_desired *v)
{
	return !v->standing && v->n_plans == 0;
}

/*
 * Phase 1 writes and syncs every <name>.json.tmp; a failure there removes
 * them all and leaves every file as it was (a full disk fails here).  Phase
 * 2 renames them into place (empty entries: their file removed) and syncs
 * the directory once.  Runs on any thread: it touches the job only.
 */
/* The journal's path; false when too long. */
static bool journal_path(char *buf, size_t len, const char *dir)
{
	return (size_t)snprintf(buf, len, "%s/%s", dir, STORE_JOURNAL) < len;
}

/*
 * Append one record, a line {"format":1,"entries":[<entry document>...]},
 * at the journal's valid length, then fdatasync it: the entries are durable.
 * A failure truncates the journal back (or says it could not).
 */
static void journal_append(struct td_store_job *j)
{
	char path[PATH_MAX + 32];
	if (!journal_path(path, sizeof(path), j->dir)) {
		errno = ENAMETOOLONG;
		job_fail(j, "cannot open", STORE_JOURNAL);
		return;
	}
	bool created = false;
	if (!j->jopen) {
		int fd = io_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
				   STORE_FILE_MODE);
		created = fd >= 0;
		if (fd < 0 && errno == EEXIST)
			fd = io_openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
		if (fd < 0) {
			job_fail(j, "cannot open", STORE_JOURNAL);
			return;
		}
		j->jfd = fd;
		j->jopen = true;
	}
	json_t *rec = json_object(), *arr = json_array();
	bool ok = rec && arr && !json_object_set_new(rec, "format", json_integer(STORE_FORMAT));
	for (size_t i = 0; ok && i < j->n; i++) {
		json_t *e = entry_json(&j->e[i].val);
		ok = e && !json_array_append_new(arr, e);
	}
	if (ok)
		ok = !json_object_set(rec, "entries", arr);
	char *text = ok ? json_dumps(rec, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
	json_decref(arr);
	json_decref(rec);
	if (!text) {
		errno = ENOMEM;
		job_fail(j, "cannot encode a record of", STORE_JOURNAL);
		return;
	}
	size_t len = strlen(text);
	text[len++] = '\n'; /* replaces the NUL: the text is not used as a string again */
	size_t off = 0;
	int rc = 0;
	while (off < len) {
		ssize_t w = io_pwrite(j->jfd, text + off, len - off, (off_t)(j->jsize + off),
				      STORE_JOURNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			rc = -1;
			break;
		}
		off += (size_t)w;
	}
	free(text);
	if (rc == 0 && j->jtrim && io_ftruncate(j->jfd, (off_t)(j->jsize + len), STORE_JOURNAL) != 0)
		rc = -1;
	/* A new journal's name must survive a crash too. */
	if (rc == 0 && (io_fdatasync(j->jfd, STORE_JOURNAL) != 0 || (created && fsync_dir(j->dir) != 0)))
		rc = -1;
	if (rc != 0) {
		job_fail(j, "cannot append to", STORE_JOURNAL);
		if (io_ftruncate(j->jfd, (off_t)j->jsize, STORE_JOURNAL) != 0 ||
		    io_fdatasync(j->jfd, STORE_JOURNAL) != 0)
			j->jsize_unsure = true;
		return;
	}
	j->jsize += len;
	j->jtrim = false;
}

/* After a checkpoint's files are durable: the journal emptied (best effort). */
static void journal_reset(struct td_store_job *j)
{
	char path[PATH_MAX + 32];
	if (!j->jopen && journal_path(path, sizeof(path), j->dir)) {
		int fd = io_openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
		if (fd >= 0) {
			j->jfd = fd;
			j->jopen = true;
		}
	}
	if (j->jopen && io_ftruncate(j->jfd, 0, STORE_JOURNAL) == 0 &&
	    io_fdatasync(j->jfd, STORE_JOURNAL) == 0)
		j->jsize = 0;
}

void td_store_job_run(struct td_store_job *j)
{
	char fname[STORE_FNAME_MAX], tmp[STORE_FNAME_MAX];
	bool made = false, changed = false;
	if (!j || (j->n == 0 && !j->checkpoint))
		return;
	if (j->journal) {
		journal_append(j);
		return;
	}
	int dfd = open_agents_dir(j->dir, &made);
	if (dfd < 0) {
		job_fail(j, "cannot open", "");
		return;
	}
	size_t i, nfd = 0;
	int fds[STORE_SYNC_CHUNK];
	for (i = 0; i < j->n; i++) {
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
		if (err && j->rc == 0) {
			errno = err;
			job_fail(j, "cannot sync", "");
		}
	}
	for (i = 0; j->rc == 0 && i < j->n; i++) {
		struct job_entry *e = &j->e[i];
		snprintf(fname, sizeof(fname), "%s%s", e->val.name, STORE_SUFFIX);
		snprintf(tmp, sizeof(tmp), "%s%s%s", e->val.name, STORE_SUFFIX, STORE_TMP_SUFFIX);
		if (entry_empty(&e->val)) {
			if (io_unlinkat(dfd, fname, 0) == 0)
				changed = e->renamed = true;
			else if (errno != ENOENT)
				job_fail(j, "cannot remove", fname);
			continue;
		}
		if (io_renameat(dfd, tmp, dfd, fname) != 0) {
			job_fail(j, "cannot rename into", fname);
			break;
		}
		e->tmp_made = false;
		changed = e->renamed = true;
	}
	for (i = 0; i < j->n; i++) {
		if (!j->e[i].tmp_made)
			continue;
		snprintf(tmp, sizeof(tmp), "%s%s%s", j->e[i].val.name, STORE_SUFFIX, STORE_TMP_SUFFIX);
		io_unlinkat(dfd, tmp, 0);
		j->e[i].tmp_made = false;
	}
	/* After the renames: the new files are in place but may not survive a crash. */
	if ((changed || made) && (fsync_dirfd(dfd) != 0 || (made && fsync_dir(j->dir) != 0)) &&
	    j->rc == 0)
		job_fail(j, "cannot sync", "");
	close(dfd);
	if (j->rc == 0 && j->checkpoint)
		journal_reset(j);
}

/*
 * Success: each entry's file holds the job's value (`saved`).  Failure: the
 * entries are dirty again (their value still differs from their file); one
 * whose file was replaced before the failure is marked unsure, for a
 * rollback to rewrite it.
 */
int td_store_job_end(struct td_store *s, struct td_store_job *j, char *err, size_t errlen)
{
	if (!s || !j) {
		job_free(j);
		errno = EINVAL;
		return TOGGLE_EINVAL;
	}
	int rc = j->rc;
	td_hist_add(&s->save_lat, td_mono_ns() - j->t0); /* begin and end: both on the loop thread */
	/* The journal back to the store (closed if the store was reloaded meanwhile). */
	if (s->jopen && j->jopen && s->jfd != j->jfd)
		close(j->jfd);
	else if (j->jopen) {
		s->jfd = j->jfd;
		s->jopen = true;
	}
	bool emptied = j->checkpoint && rc == 0 && j->jsize == 0;
	s->jsize = j->jsize;
	s->jtrim = emptied ? false : j->jtrim || j->jsize_unsure;
	if (emptied) {
		s->checkpoints++;
		for (size_t i = 0; i < s->n; i++)
			s->v[i].in_journal = false;
	}
	for (size_t i = 0; i < j->n; i++) {
		struct job_entry *e = &j->e[i];
		if (e->index >= s->n || strcmp(s->v[e->index].name, e->val.name) != 0)
			continue; /* the store was reloaded meanwhile */
		struct td_desired *dd = &s->v[e->index];
		if (rc == 0 && j->journal)
			dd->in_journal = true;
		if (rc == 0 && !e->was_dirty)
			continue; /* a checkpoint's copy of its saved value */
		if (rc == 0) {
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
		} else if (e->was_dirty) {
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
		if (j->e[i].index < s->n && j->e[i].was_dirty)
			mark_dirty(&s->v[j->e[i].index]);
	if (s && j && j->jopen && !s->jopen) {
		s->jfd = j->jfd;
		s->jopen = true;
	} else if (j && j->jopen) {
		close(j->jfd);
	}
	job_free(j);
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

int td_store_save(struct td_store *s, const char *dir)
{
	if (!s || !dir) {
		errno = EINVAL;
		return TOGGLE_EINVAL;
	}
	struct td_store_job *j = td_store_job_begin(s, dir);
	if (!j) {
		s->save_errors++;
		return TOGGLE_EIO;
	}
	td_store_job_run(j);
	return td_store_job_end(s, j, NULL, 0);
}
