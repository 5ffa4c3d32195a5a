/*
 * fixture_store.c - the store suites' fixture (check_store_*.c,
 * check_store_faults.c): a temporary state directory named after the suite,
 * file and entry helpers, stderr captured while the store logs, a store of
 * three names.  Moved out of check_store.c (issue 29).
 */
#include "fixture_store.h"

/* ---- helpers ------------------------------------------------------------- */

char tdir[64];

/* Named after the suite (/tmp/check_store_save.XXXXXX): which one left it is plain. */
void make_tmpdir(void)
{
	snprintf(tdir, sizeof(tdir), "/tmp/%.40s.XXXXXX", program_invocation_short_name);
	ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	chmod(path, 0700);
	return remove(path);
}

void remove_tmpdir(void)
{
	nftw(tdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* tdir/<name> into buf. */
const char *in_dir(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tdir, name);
	return buf;
}

/* tdir/agents/<fname> into buf (fname: a whole file name, suffix included). */
const char *in_agents(char *buf, size_t len, const char *fname)
{
	snprintf(buf, len, "%s/agents/%s", tdir, fname);
	return buf;
}

/* tdir/agents/<name>.json into buf. */
const char *entry_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/agents/%s.json", tdir, name);
	return buf;
}

void make_agents_dir(void)
{
	char p[128];
	ck_assert_int_eq(mkdir(in_dir(p, sizeof(p), "agents"), 0750), 0);
}

void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
}

/* The whole file, NUL-terminated (binary-safe: *len its size); freed by the caller. */
char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot read %s: %s", path, strerror(errno));
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);
	int c;
	while ((c = getc(f)) != EOF)
		putc(c, m);
	fclose(f);
	fclose(m);
	*len = n;
	return buf;
}

/* The whole file, NUL-terminated; freed by the caller. */
char *read_text(const char *path)
{
	size_t len;
	return slurp(path, &len);
}

void write_entry(const char *name, const char *text)
{
	char p[192];
	write_text(entry_path(p, sizeof(p), name), text);
}

char *read_entry(const char *name)
{
	char p[192];
	return read_text(entry_path(p, sizeof(p), name));
}

void text_has_entry(const char *name, const char *needle)
{
	char *text = read_entry(name);
	ck_assert_msg(strstr(text, needle), "%s.json does not hold %s: %s", name, needle, text);
	free(text);
}

bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

bool entry_exists(const char *name)
{
	char p[192];
	return exists(entry_path(p, sizeof(p), name));
}

/* Inode number of an entry's file: a new one each time the file is rewritten (tmp + rename). */
ino_t entry_ino(const char *name)
{
	char p[192];
	struct stat st;
	ck_assert_msg(stat(entry_path(p, sizeof(p), name), &st) == 0, "%s: %s", p, strerror(errno));
	return st.st_ino;
}

/* Names in tdir/agents, sorted, joined by ' '; freed by the caller. */
char *list_agents_dir(void)
{
	char p[128];
	struct dirent **v;
	int n = scandir(in_dir(p, sizeof(p), "agents"), &v, NULL, alphasort);
	ck_assert_int_ge(n, 0);
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, ".."))
			fprintf(m, "%s%s", len || ftell(m) ? " " : "", v[i]->d_name);
		free(v[i]);
	}
	free(v);
	fclose(m);
	return buf;
}

/* stderr (where the store logs) into a file while capturing; the text afterwards. */
static int saved_stderr = -1;

void capture_stderr(void)
{
	char p[128];
	fflush(stderr);
	saved_stderr = dup(2);
	int fd = open(in_dir(p, sizeof(p), "stderr.log"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dup2(fd, 2), 2);
	close(fd);
}

char *captured_stderr(void)
{
	char p[128];
	fflush(stderr);
	ck_assert_int_eq(dup2(saved_stderr, 2), 2);
	close(saved_stderr);
	saved_stderr = -1;
	char *text = read_text(in_dir(p, sizeof(p), "stderr.log"));
	unlink(p);
	return text;
}

/* A string of n copies of c; freed by the caller. */
char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

void set_plans2(struct td_desired *dd, int64_t s0, const char *p0, int64_t s1,
		const char *p1)
{
	int64_t steps[2] = { s0, s1 };
	char a[64], b[64];
	char *specs[2] = { a, b };
	snprintf(a, sizeof(a), "%s", p0);
	snprintf(b, sizeof(b), "%s", p1);
	ck_assert_int_eq(td_desired_set_plans(dd, steps, specs, 2), 0);
}

/* A store of three names: standing set with plans, standing NULL with plans, standing only. */
void fill_store(struct td_store *s)
{
	struct td_desired *a = td_store_get(s, "alpha", true);
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(td_desired_set_standing(a, "resid_post:0-3,attn_out:*"), 0);
	set_plans2(a, 5, "resid_post:1", 7, "");
	struct td_desired *b = td_store_get(s, "beta", true);
	ck_assert_ptr_nonnull(b);
	set_plans2(b, 0, "mlp_out:2", 123456789012LL, "resid_post:* \"q\" \xc3\xa9\x01");
	struct td_desired *g = td_store_get(s, GAMMA, true);
	ck_assert_ptr_nonnull(g);
	ck_assert_int_eq(td_desired_set_standing(g, ""), 0);
	/* The setters raised the flags: no caller has to. */
	ck_assert(s->dirty);
	ck_assert(a->dirty && b->dirty && g->dirty);
}
