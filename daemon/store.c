/*
 * store.c - persistence of the daemon's desired state (the standing spec and
 * the pending plan entries of each agent name) in <state_dir>/state.json, so
 * that a restarted daemon puts agents back where the operator left them.
 * Specs are opaque text here; the daemon parses them against each agent's
 * catalog.  Everything read from the file is untrusted and bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "toggled.h"

#define TD_MAX_STORED_AGENTS 4096 /* agent names remembered */
#define STORE_FORMAT         1
#define STORE_FILE           "state.json"
#define STORE_TMP            "state.json.tmp"
#define STORE_DIR_MODE       0750
#define STORE_FILE_MODE      0600

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
 * Copy text from the file into out for an error message: control and
 * non-ASCII bytes become '?', so a hostile key cannot forge log lines or
 * drive a terminal.
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

static bool name_ok(const char *name)
{
	return text_ok(name, 1, TGP_MAX_NAME - 1);
}

static bool spec_ok(const char *spec)
{
	return text_ok(spec, 0, TGP_MAX_SPEC);
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
		if (strcmp(s->v[i].name, name) == 0)
			return &s->v[i];
	if (!create || !name_ok(name) || s->n >= TD_MAX_STORED_AGENTS)
		return NULL;
	if (!s->v && !(s->v = calloc(TD_MAX_STORED_AGENTS, sizeof(*s->v))))
		return NULL;
	struct td_desired *dd = &s->v[s->n++];
	memset(dd, 0, sizeof(*dd));
	memcpy(dd->name, name, strlen(name) + 1);
	return dd;
}

int td_desired_set_standing(struct td_desired *dd, const char *spec)
{
	char *copy = NULL;
	if (!dd)
		return TOGGLE_EINVAL;
	if (spec) {
		if (!spec_ok(spec))
			return TOGGLE_EINVAL;
		if (!(copy = strdup(spec)))
			return TOGGLE_ENOMEM;
	}
	free(dd->standing);
	dd->standing = copy;
	return 0;
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

/* Context of one load, for error messages that name the file and the key. */
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

static int parse_plans(const struct load_ctx *lc, json_t *arr, struct td_desired *dd,
		       const char *where)
{
	static const char *const keys[] = { "step", "hooks", NULL };
	int64_t steps[TD_MAX_PENDING_PLAN];
	const char *specs[TD_MAX_PENDING_PLAN];
	char at[160];
	if (!json_is_array(arr))
		return schema_error(lc, where, "\"plans\" must be an array");
	size_t n = json_array_size(arr);
	if (n > TD_MAX_PENDING_PLAN)
		return schema_error(lc, where, "more than %d plans", TD_MAX_PENDING_PLAN);
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i), *step, *hooks;
		snprintf(at, sizeof(at), "%s.plans[%zu]", where, i);
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

static int parse_agent(const struct load_ctx *lc, const char *name, json_t *entry,
		       struct td_store *out)
{
	static const char *const keys[] = { "enabled", "plans", NULL };
	char pn[80], where[128];
	snprintf(where, sizeof(where), "agents.\"%s\"", printable(name, pn, sizeof(pn)));
	if (!name_ok(name))
		return schema_error(lc, where, "agent name must have 1 to %d bytes",
				    TGP_MAX_NAME - 1);
	if (!json_is_object(entry))
		return schema_error(lc, where, "must be an object");
	int rc = check_keys(lc, entry, where, keys);
	if (rc)
		return rc;
	struct td_desired *dd = td_store_get(out, name, true);
	if (!dd)
		return out_of_memory(lc);
	json_t *enabled = json_object_get(entry, "enabled");
	if (enabled) {
		if (!json_is_string(enabled) || !spec_ok(json_string_value(enabled)))
			return schema_error(lc, where,
					    "\"enabled\" must be a string of at most %d bytes",
					    TGP_MAX_SPEC);
		if (td_desired_set_standing(dd, json_string_value(enabled)))
			return out_of_memory(lc);
	}
	json_t *plans = json_object_get(entry, "plans");
	return plans ? parse_plans(lc, plans, dd, where) : 0;
}

static int parse_root(const struct load_ctx *lc, json_t *root, struct td_store *out)
{
	static const char *const keys[] = { "format", "agents", NULL };
	if (!json_is_object(root))
		return schema_error(lc, "top level", "must be an object");
	int rc = check_keys(lc, root, "top level", keys);
	if (rc)
		return rc;
	json_t *fmt = json_object_get(root, "format");
	if (!json_is_integer(fmt) || json_integer_value(fmt) != STORE_FORMAT)
		return schema_error(lc, "format", "must be %d", STORE_FORMAT);
	json_t *agents = json_object_get(root, "agents");
	if (!json_is_object(agents))
		return schema_error(lc, "agents", "must be an object");
	if (json_object_size(agents) > TD_MAX_STORED_AGENTS)
		return schema_error(lc, "agents", "more than %d names", TD_MAX_STORED_AGENTS);
	const char *name;
	json_t *entry;
	json_object_foreach(agents, name, entry) {
		if ((rc = parse_agent(lc, name, entry, out)) != 0)
			return rc;
	}
	return 0;
}

/* Open state.json: 0 with *fd, 1 when it does not exist, or a TOGGLE_E* code. */
static int open_state(const struct load_ctx *lc, int *fd)
{
	/* O_NONBLOCK: a FIFO planted there must not hang start-up before fstat sees it. */
	*fd = open(lc->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (*fd < 0 && errno == ENOENT)
		return 1;
	if (*fd < 0) {
		seterr(lc->err, lc->errlen, "cannot open %s: %s", lc->path, strerror(errno));
		return TOGGLE_EIO;
	}
	struct stat st;
	if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		seterr(lc->err, lc->errlen, "%s: not a regular file", lc->path);
		close(*fd);
		return TOGGLE_EINVAL;
	}
	return 0;
}

int td_store_load(struct td_store *s, const char *dir, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct td_store tmp = { 0 };
	if (!s || !dir)
		return TOGGLE_EINVAL;
	td_store_free(s);
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE) >= sizeof(path)) {
		seterr(err, errlen, "state directory: path too long");
		return TOGGLE_EINVAL;
	}
	int rc = mkdir_p(dir, err, errlen), fd = -1;
	if (rc)
		return rc;
	struct load_ctx lc = { path, err, errlen };
	if ((rc = open_state(&lc, &fd)) != 0)
		return rc > 0 ? 0 : rc; /* missing file: first start, empty store */
	json_error_t jerr;
	/* Duplicate keys are refused: which copy wins would otherwise be a guess. */
	json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
	close(fd);
	if (!root) {
		seterr(err, errlen, "%s: line %d, column %d: %s", path, jerr.line, jerr.column,
		       jerr.text);
		return TOGGLE_EINVAL;
	}
	rc = parse_root(&lc, root, &tmp);
	json_decref(root);
	if (rc) {
		td_store_free(&tmp);
		return rc;
	}
	*s = tmp;
	return 0;
}

/* ---- saving -------------------------------------------------------------- */

static json_t *dump_agent(const struct td_desired *dd)
{
	json_t *o = json_object(), *plans = json_array();
	if (!o || !plans)
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
	if (json_object_set_new(o, "plans", plans)) {
		json_decref(o);
		return NULL;
	}
	return o;
fail:
	json_decref(plans);
	json_decref(o);
	return NULL;
}

/* The whole store as text, or NULL (errno set) on ENOMEM or text jansson refuses. */
static char *dump_store(const struct td_store *s)
{
	json_t *root = json_object(), *agents = json_object();
	char *text = NULL;
	bool ok = root && agents && !json_object_set_new(root, "format", json_integer(STORE_FORMAT));
	for (size_t i = 0; ok && i < s->n; i++)
		ok = !json_object_set_new(agents, s->v[i].name, dump_agent(&s->v[i]));
	if (ok && !json_object_set(root, "agents", agents))
		text = json_dumps(root, JSON_SORT_KEYS | JSON_INDENT(2));
	json_decref(agents);
	json_decref(root);
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

/* Write and fsync tmp; -1 with errno.  *created tells the caller there is a file to remove. */
static int write_tmp(const char *tmp, const char *text, bool *created)
{
	/* O_NOFOLLOW: never write through a link planted in the state directory. */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, STORE_FILE_MODE);
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

/* The rename is only durable once the directory entry is on disk. */
static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	/* EINVAL: a file system that cannot sync directories; nothing more to do there. */
	int rc = fsync(fd) != 0 && errno != EINVAL ? -1 : 0;
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

static int save_files(const char *dir, const char *text)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	bool created = false;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE) >= sizeof(path) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s/%s", dir, STORE_TMP) >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (write_tmp(tmp, text, &created) != 0 || rename(tmp, path) != 0) {
		int e = errno;
		if (created)
			unlink(tmp);
		errno = e;
		return -1;
	}
	/*
	 * A failure here comes after the rename: the new file is in place but
	 * may not survive a crash, so report it and stay dirty to retry.
	 */
	return fsync_dir(dir);
}

int td_store_save(struct td_store *s, const char *dir)
{
	if (!s || !dir) {
		errno = EINVAL;
		return TOGGLE_EINVAL;
	}
	char *text = dump_store(s);
	int rc = text ? save_files(dir, text) : -1;
	int e = errno;
	free(text);
	if (rc != 0) {
		s->save_errors++;
		errno = e;
		return TOGGLE_EIO;
	}
	s->saves++;
	s->dirty = false;
	return 0;
}
