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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "toggled.h"

#define TD_MAX_STORED_AGENTS 4096 /* agent names remembered (files in agents/) */
#define STORE_FORMAT         1
#define STORE_SUBDIR         "agents"
#define STORE_SUFFIX         ".json"
#define STORE_TMP_SUFFIX     ".tmp" /* <name>.json.tmp while it is being written */
#define STORE_DIR_MODE       0750
#define STORE_FILE_MODE      0600
/* <name>.json.tmp and its NUL. */
#define STORE_FNAME_MAX      (TGP_MAX_NAME + sizeof(STORE_SUFFIX STORE_TMP_SUFFIX))
/*
 * The largest file a valid entry gives: the standing spec and every plan
 * spec at their bound with every byte escaped (\u00XX), plus the structure.
 */
#define STORE_MAX_FILE \
	((size_t)(TD_MAX_PENDING_PLAN + 1) * (6 * (size_t)TGP_MAX_SPEC + 128) + 4096)
#define STORE_MAX_LOGGED     16 /* ignored directory entries named in the log, per load */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || errlen == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/*
 * Copy text from a file (or a file name) into out for an error message:
 * control and non-ASCII bytes become '?', so a hostile key cannot forge log
 * lines or drive a terminal.
 */
static const char *printable(const char *in, char *out, size_t outlen)
{
	size_t i = 0;
	for (; in[i] && i + 1 < outlen; i++) {
		unsigned char c = (unsigned char)in[i];
		out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	out[i] = '\0';
	return out;
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
 * An agent name, which is also the stem of its file name: 1 to
 * TGP_MAX_NAME - 1 bytes of [A-Za-z0-9_.-] (what registration accepts),
 * and neither "." nor "..".
 */
static bool name_ok(const char *name)
{
	size_t n = strnlen(name, TGP_MAX_NAME);
	if (n == 0 || n >= TGP_MAX_NAME || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			return false;
	}
	return true;
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
	}
	free(s->v);
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
	char buf[PATH_MAX];
	size_t len = strlen(dir);
	if (len == 0 || len >= sizeof(buf)) {
		seterr(err, errlen, "state directory: path empty or too long");
		return TOGGLE_EINVAL;
	}
	memcpy(buf, dir, len + 1);
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(buf, STORE_DIR_MODE) != 0 && errno != EEXIST) {
			seterr(err, errlen, "cannot create state directory %s: %s", buf,
			       strerror(errno));
			return TOGGLE_EIO;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	struct stat st;
	if (stat(dir, &st) != 0) {
		seterr(err, errlen, "state directory %s: %s", dir, strerror(errno));
		return TOGGLE_EIO;
	}
	if (!S_ISDIR(st.st_mode)) {
		seterr(err, errlen, "state directory %s: not a directory", dir);
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
	seterr(lc->err, lc->errlen, "%s: %s: %s", lc->path, where, what);
	return TOGGLE_EINVAL;
}

static int out_of_memory(const struct load_ctx *lc)
{
	seterr(lc->err, lc->errlen, "%s: out of memory while loading", lc->path);
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
		seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
		return TOGGLE_EIO;
	}
	if (!S_ISREG(st.st_mode)) {
		note_ignored(adir, fname, "not a regular file", ignored);
		return 0;
	}
	/* O_NOFOLLOW, O_NONBLOCK: whatever replaced it since the stat is not followed, nor waited on. */
	int fd = openat(dfd, fname, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return TOGGLE_EIO;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		note_ignored(adir, fname, "not a regular file", ignored);
		return 0;
	}
	if ((uintmax_t)st.st_size > STORE_MAX_FILE) {
		close(fd);
		seterr(err, errlen, "%s: larger than %zu bytes", path, STORE_MAX_FILE);
		return TOGGLE_EINVAL;
	}
	json_error_t jerr;
	/* Duplicate keys are refused: which copy wins would otherwise be a guess. */
	json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
	close(fd);
	if (!root) {
		seterr(err, errlen, "%s: line %d, column %d: %s", path, jerr.line, jerr.column,
		       jerr.text);
		return TOGGLE_EINVAL;
	}
	int rc = parse_entry(&lc, stem, root, out);
	json_decref(root);
	return rc;
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
	char (*stems)[TGP_MAX_NAME] = NULL, pf[80];
	size_t n = 0, ignored = 0;
	int rc = 0;
	int dfd = open(adir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dp = dfd < 0 ? NULL : fdopendir(dfd);
	if (!dp) {
		seterr(err, errlen, "cannot open %s: %s", adir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return TOGGLE_EIO;
	}
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(dp);
		if (!de) {
			if (errno) {
				seterr(err, errlen, "cannot read %s: %s", adir, strerror(errno));
				rc = TOGGLE_EIO;
			}
			break;
		}
		const char *fname = de->d_name;
		size_t len = strlen(fname);
		if (strcmp(fname, ".") == 0 || strcmp(fname, "..") == 0)
			continue;
		if (ends_with(fname, len, STORE_TMP_SUFFIX)) {
			if (unlinkat(dfd, fname, 0) != 0 && errno != ENOENT)
				log_warn("state: cannot remove the leftover %s/%s", adir,
					 printable(fname, pf, sizeof(pf)));
			continue;
		}
		if (!ends_with(fname, len, STORE_SUFFIX)) {
			note_ignored(adir, fname, "not <agent name>" STORE_SUFFIX, &ignored);
			continue;
		}
		size_t stem_len = len - strlen(STORE_SUFFIX);
		char stem[TGP_MAX_NAME];
		if (stem_len < sizeof(stem)) {
			memcpy(stem, fname, stem_len);
			stem[stem_len] = '\0';
		}
		if (stem_len >= sizeof(stem) || !name_ok(stem)) {
			seterr(err, errlen,
			       "%s/%s: file name: must be <agent name>%s, the name 1 to %d bytes "
			       "of [A-Za-z0-9_.-]", adir, printable(fname, pf, sizeof(pf)),
			       STORE_SUFFIX, TGP_MAX_NAME - 1);
			rc = TOGGLE_EINVAL;
			break;
		}
		if (n >= TD_MAX_STORED_AGENTS) {
			seterr(err, errlen, "%s: more than %d names", adir, TD_MAX_STORED_AGENTS);
			rc = TOGGLE_EINVAL;
			break;
		}
		if (!stems && !(stems = malloc(TD_MAX_STORED_AGENTS * sizeof(*stems)))) {
			seterr(err, errlen, "%s: out of memory while loading", adir);
			rc = TOGGLE_ENOMEM;
			break;
		}
		memcpy(stems[n++], stem, stem_len + 1);
	}
	if (rc == 0 && n > 1)
		qsort(stems, n, sizeof(*stems), cmp_names);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = load_file(dfd, adir, stems[i], out, err, errlen, &ignored);
	if (ignored > STORE_MAX_LOGGED)
		log_warnx("state: %zu more entries of %s ignored", ignored - STORE_MAX_LOGGED, adir);
	closedir(dp);
	free(stems);
	return rc;
}

int td_store_load(struct td_store *s, const char *dir, char *err, size_t errlen)
{
	char adir[PATH_MAX];
	struct td_store tmp = { 0 };
	if (!s || !dir)
		return TOGGLE_EINVAL;
	td_store_free(s);
	if ((size_t)snprintf(adir, sizeof(adir), "%s/%s", dir, STORE_SUBDIR) >= sizeof(adir)) {
		seterr(err, errlen, "state directory: path too long");
		return TOGGLE_EINVAL;
	}
	int rc = mkdir_p(dir, err, errlen);
	if (rc == 0)
		rc = mkdir_p(adir, err, errlen);
	if (rc == 0)
		rc = load_dir(adir, &tmp, err, errlen);
	if (rc) {
		td_store_free(&tmp);
		return rc;
	}
	/* What was just read is what the files hold. */
	for (size_t i = 0; i < tmp.n; i++) {
		tmp.v[i].dirty = false;
		tmp.v[i].owner = s;
	}
	tmp.dirty = false;
	*s = tmp;
	return 0;
}

/* ---- saving -------------------------------------------------------------- */

/* One entry's document, or NULL (errno ENOMEM) on ENOMEM or text jansson refuses. */
static char *dump_entry(const struct td_desired *dd)
{
	json_t *o = json_object(), *plans = json_array();
	char *text = NULL;
	if (!o || !plans || json_object_set_new(o, "format", json_integer(STORE_FORMAT)) ||
	    json_object_set_new(o, "name", json_string(dd->name)))
		goto out;
	if (dd->standing && json_object_set_new(o, "enabled", json_string(dd->standing)))
		goto out;
	for (size_t i = 0; i < dd->n_plans; i++) {
		/* set_new/append_new take the reference even on failure; json_pack is avoided. */
		json_t *e = json_object();
		if (!e || json_object_set_new(e, "step", json_integer(dd->plan_steps[i])) ||
		    json_object_set_new(e, "hooks", json_string(dd->plan_specs[i])) ||
		    json_array_append_new(plans, e)) {
			json_decref(e);
			goto out;
		}
	}
	if (!json_object_set(o, "plans", plans))
		text = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(2));
out:
	json_decref(plans);
	json_decref(o);
	if (!text)
		errno = ENOMEM;
	return text;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, buf, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Write and fsync dfd/tmp; -1 with errno.  *created tells the caller there is a file to remove. */
static int write_tmp(int dfd, const char *tmp, const char *text, bool *created)
{
	/* O_NOFOLLOW: never write through a link planted in the state directory. */
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
			STORE_FILE_MODE);
	if (fd < 0)
		return -1;
	*created = true;
	/* A stale tmp from a crash keeps its old mode through O_TRUNC: force it. */
	if (fchmod(fd, STORE_FILE_MODE) != 0 || write_all(fd, text, strlen(text)) != 0 ||
	    write_all(fd, "\n", 1) != 0 || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return close(fd);
}

/* EINVAL: a file system that cannot sync directories; nothing more to do there. */
static int fsync_dirfd(int fd)
{
	return fsync(fd) != 0 && errno != EINVAL ? -1 : 0;
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

/*
 * One entry into the directory dfd: written to <name>.json.tmp, synced and
 * renamed over <name>.json; an empty entry's file removed instead.  0 when
 * the directory changed, 1 when it did not (an empty entry without a file),
 * -1 with errno.
 */
static int save_entry(int dfd, const struct td_desired *dd)
{
	char fname[STORE_FNAME_MAX], tmp[STORE_FNAME_MAX];
	if (!name_ok(dd->name)) {
		errno = EINVAL;
		return -1;
	}
	snprintf(fname, sizeof(fname), "%s%s", dd->name, STORE_SUFFIX);
	snprintf(tmp, sizeof(tmp), "%s%s%s", dd->name, STORE_SUFFIX, STORE_TMP_SUFFIX);
	if (!dd->standing && dd->n_plans == 0) {
		if (unlinkat(dfd, fname, 0) == 0)
			return 0;
		return errno == ENOENT ? 1 : -1;
	}
	char *text = dump_entry(dd);
	bool created = false;
	int rc = text && write_tmp(dfd, tmp, text, &created) == 0 &&
			 renameat(dfd, tmp, dfd, fname) == 0 ? 0 : -1;
	int e = errno;
	if (rc != 0 && created)
		unlinkat(dfd, tmp, 0);
	free(text);
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
		if (mkdir(adir, STORE_DIR_MODE) != 0 && errno != EEXIST)
			return -1;
		*made = true;
		fd = open(adir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	return fd;
}

/*
 * Write the dirty entries, each on its own (a failure keeps that one dirty
 * and goes on with the others), then sync the directory once for all the
 * renames.  Only then are the entries clean: a reply sent after this
 * returns 0 acknowledges durable state.
 */
static int store_save_dirty(struct td_store *s, const char *dir)
{
	if (!s || !dir) {
		errno = EINVAL;
		return TOGGLE_EINVAL;
	}
	unsigned char done[TD_MAX_STORED_AGENTS / 8] = { 0 };
	int dfd = -1, first_err = 0;
	bool made = false, changed = false;
	for (size_t i = 0; i < s->n && i < TD_MAX_STORED_AGENTS; i++) {
		struct td_desired *dd = &s->v[i];
		if (!dd->dirty)
			continue;
		if (dfd < 0 && (dfd = open_agents_dir(dir, &made)) < 0) {
			first_err = errno;
			break;
		}
		int rc = save_entry(dfd, dd);
		if (rc < 0) {
			if (!first_err)
				first_err = errno;
			continue;
		}
		done[i / 8] |= (unsigned char)(1u << (i % 8));
		changed |= rc == 0;
	}
	/*
	 * A failure here comes after the renames: the new files are in place but
	 * may not survive a crash, so report it and stay dirty to retry.
	 */
	if (dfd >= 0 && (changed || made) &&
	    (fsync_dirfd(dfd) != 0 || (made && fsync_dir(dir) != 0))) {
		if (!first_err)
			first_err = errno;
		memset(done, 0, sizeof(done));
	}
	if (dfd >= 0)
		close(dfd);
	for (size_t i = 0; i < s->n && i < TD_MAX_STORED_AGENTS; i++)
		if (done[i / 8] & (1u << (i % 8)))
			s->v[i].dirty = false;
	if (first_err) {
		s->save_errors++;
		errno = first_err;
		return TOGGLE_EIO;
	}
	s->saves++;
	s->dirty = false;
	return 0;
}

/* Every save, timed for --metrics. */
int td_store_save(struct td_store *s, const char *dir)
{
	uint64_t t0 = td_mono_ns();
	int rc = store_save_dirty(s, dir);
	if (s)
		td_hist_add(&s->save_lat, td_mono_ns() - t0);
	return rc;
}
