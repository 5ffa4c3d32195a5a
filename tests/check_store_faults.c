/*
 * check_store_faults.c - the desired-state store under faults (issue 30):
 * every call that changes the state directory failed in turn through the
 * store's seam (daemon/store.h), a journal that cannot be emptied, and
 * damaged journals.  The checks are black-box: what a save acknowledged is
 * what a new store loads from the directory, whatever failed on the way,
 * and a damaged value is never loaded as if it had been written.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/fs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_store.h" /* tdir, in_dir, slurp, capture_stderr */
#include "store.h"
#include "testutil.h"
#include "toggled.h"

/* Under /dev/shm when there is one: hundreds of scenarios, each a few dozen syncs. */
static void make_tmpdir_under(const char *base)
{
	struct stat st;
	if (!base)
		base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	snprintf(tdir, sizeof(tdir), "%s/check_store_faults.XXXXXX", base);
	ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static void spit(const char *path, const char *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* Names in tdir (and agents/) that contain needle. */
static int count_names(const char *sub, const char *needle)
{
	char p[128];
	DIR *dp = opendir(sub ? in_dir(p, sizeof(p), sub) : tdir);
	ck_assert_ptr_nonnull(dp);
	int n = 0;
	for (struct dirent *de; (de = readdir(dp));)
		n += strstr(de->d_name, needle) != NULL;
	closedir(dp);
	return n;
}

static const char *standing_of(struct td_store *s, const char *name)
{
	struct td_desired *dd = td_store_get(s, name, false);
	return dd ? dd->standing : NULL;
}

static void set_standing(struct td_store *s, const char *name, const char *spec)
{
	struct td_desired *dd = td_store_get(s, name, true);
	ck_assert_ptr_nonnull(dd);
	ck_assert_int_eq(td_desired_set_standing(dd, spec), 0);
}

/*
 * Where checkpoints fold the old journal: 0 as configured (agents.checkpoint
 * up to journal_max bytes, the files past it), FILES_ONLY (always the
 * files), ALTERNATE (the scenario changes the bound after each checkpoint:
 * one way, then the other, agents.checkpoint removed by a fold into the
 * files, and made again).
 */
#define FILES_ONLY 1u
#define ALTERNATE  2u
static uint64_t base_max;

/* A journal store over tdir, loaded. */
static void open_store(struct td_store *s, uint64_t journal_max, bool quarantine)
{
	char err[512] = "";
	memset(s, 0, sizeof(*s));
	s->journal = true;
	s->journal_max = journal_max;
	s->base_max = base_max;
	s->quarantine = quarantine;
	int rc = td_store_load(s, tdir, err, sizeof(err));
	ck_assert_msg(rc == 0, "load: %s", err);
}

/* ---- the seam: fail the n-th call of one kind (or every one from then on) -- */

struct fault {
	enum td_store_op op;
	int nth;             /* 1-based; 0: only count */
	bool persistent;     /* fail every call from the n-th on */
	const char *only;    /* NULL, or fail only calls about names containing this */
	int err;
	bool and_truncate;   /* and every truncate fails (a failed append cannot be cut back) */
	bool any;            /* count and fail calls of every kind (a crash: nothing after) */
	atomic_int count[TD_STORE_N_OPS];
	atomic_int fired;
};

static int fault_hook(enum td_store_op op, const char *file, void *arg)
{
	struct fault *f = arg;
	if (f->only && (!file || !strstr(file, f->only)))
		return 0;
	if (f->and_truncate && op == TD_STORE_TRUNCATE && f->nth)
		return EIO;
	int n = atomic_fetch_add(&f->count[f->any ? 0 : op], 1) + 1;
	if ((op != f->op && !f->any) || f->nth == 0 || n < f->nth || (n > f->nth && !f->persistent))
		return 0;
	atomic_fetch_add(&f->fired, 1);
	return f->err;
}

static const char *const op_names[TD_STORE_N_OPS] = {
	"open", "write", "sync", "truncate", "rename", "unlink",
};

/*
 * What was acknowledged: per entry, the value of its last save that
 * returned 0, and the values of the saves that failed since (a failed
 * save may or may not have reached the disk: EIO says "not known to be
 * durable", and the daemon's retry overwrites it with the acknowledged
 * value once it can).
 */
#define NE 3
#define MAYBE 64
static const char *const ent[NE] = { "alpha", "beta", "gamma" };

struct model {
	char acked[NE][32];
	bool have[NE];
	char maybe[NE][MAYBE][32];
	int n_maybe[NE];
	int saves_ok, saves_failed;
	uint64_t checkpoints, ckpt_files;
};

/*
 * steps saves, one entry changed each (round robin) to a value never used
 * before, with journal_max small enough that checkpoints come every few
 * saves.  A failed save is followed by what the daemon does: roll back to
 * the durable state (entries a failed save may have left on disk stay
 * dirty and are written again by the next save).
 */
static void scenario(int steps, uint64_t journal_max, struct model *m)
{
	struct td_store s;
	memset(m, 0, sizeof(*m));
	open_store(&s, journal_max, false);
	for (int i = 0; i < steps; i++) {
		int e = i % NE;
		char v[32];
		snprintf(v, sizeof(v), "v%d", i);
		set_standing(&s, ent[e], v);
		if (base_max == ALTERNATE)
			s.base_max = s.checkpoints % 2 ? FILES_ONLY : 1u << 20;
		bool dirty[NE];
		for (int k = 0; k < NE; k++) {
			struct td_desired *dd = td_store_get(&s, ent[k], false);
			dirty[k] = dd && dd->dirty;
		}
		if (td_store_save(&s, tdir) == 0) {
			m->saves_ok++;
			for (int k = 0; k < NE; k++) {
				if (!dirty[k])
					continue;
				const char *now = standing_of(&s, ent[k]);
				snprintf(m->acked[k], sizeof(m->acked[k]), "%s", now ? now : "");
				m->have[k] = now != NULL;
				m->n_maybe[k] = 0;
			}
		} else {
			m->saves_failed++;
			if (m->n_maybe[e] < MAYBE)
				snprintf(m->maybe[e][m->n_maybe[e]++], 32, "%s", v);
			td_store_rollback(&s);
		}
	}
	m->checkpoints = s.checkpoints;
	m->ckpt_files = s.ckpt_files;
	td_store_free(&s); /* a crash: nothing more is written */
}

/* A new store on the directory holds every acknowledged value (or a later refused one). */
static void verify(const struct model *m, const char *what)
{
	struct td_store r;
	char err[512] = "";
	memset(&r, 0, sizeof(r));
	r.journal = true;
	int rc = td_store_load(&r, tdir, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s: the state directory does not load strictly: %s", what, err);
	for (int k = 0; k < NE; k++) {
		const char *got = standing_of(&r, ent[k]);
		bool ok = m->have[k] ? got && strcmp(got, m->acked[k]) == 0 : got == NULL;
		for (int i = 0; !ok && i < m->n_maybe[k]; i++)
			ok = got && strcmp(got, m->maybe[k][i]) == 0;
		ck_assert_msg(ok, "%s: %s loads as \"%s\", its last acknowledged value is \"%s\"", what,
			      ent[k], got ? got : "(none)", m->have[k] ? m->acked[k] : "(none)");
	}
	td_store_free(&r);
}

#define STEPS 15
#define JMAX  300 /* bytes: a checkpoint every few saves */

/*
 * Each kind of call failed in turn, once (the n-th call of that kind) and
 * from the n-th call on (a journal that cannot be emptied: chattr +a on
 * the journal makes truncate, rename and unlink fail with EPERM), the
 * journal's calls alone and every call.
 */
static void fault_matrix3(enum td_store_op op, bool persistent, const char *only, int err,
			  bool and_truncate, bool any)
{
	struct fault count = { .op = op, .only = only, .any = any };
	struct model m;
	make_tmpdir_under(NULL);
	td_store_set_fault(fault_hook, &count);
	scenario(STEPS, JMAX, &m);
	td_store_set_fault(NULL, NULL);
	ck_assert_int_eq(m.saves_failed, 0);
	ck_assert_uint_ge(m.checkpoints, 3);
	/* Each way of folding was taken as asked (as configured: 3 entries fit in journal_max). */
	if (base_max == FILES_ONLY)
		ck_assert_uint_eq(m.ckpt_files, m.checkpoints);
	else if (base_max == ALTERNATE)
		ck_assert(m.ckpt_files > 0 && m.ckpt_files < m.checkpoints);
	else
		ck_assert_uint_eq(m.ckpt_files, 0);
	verify(&m, "no fault");
	remove_tmpdir();
	int calls = atomic_load(&count.count[any ? 0 : op]);
	int fired = 0;
	for (int n = 1; n <= calls; n++) {
		struct fault f = { .op = op, .nth = n, .persistent = persistent, .only = only,
				   .err = err, .and_truncate = and_truncate, .any = any };
		char what[200];
		snprintf(what, sizeof(what), "%s call %d of %d%s%s%s failed (%s)%s",
			 any ? "any" : op_names[op], n,
			 calls, persistent ? " and every later one" : "", only ? " about " : "",
			 only ? only : "", strerror(err), and_truncate ? ", every truncate too" : "");
		make_tmpdir_under(NULL);
		td_store_set_fault(fault_hook, &f);
		scenario(STEPS, JMAX, &m);
		td_store_set_fault(NULL, NULL);
		fired += atomic_load(&f.fired) > 0;
		verify(&m, what);
		remove_tmpdir();
	}
	ck_assert_msg(calls == 0 || fired > 0, "%s: no fault fired", op_names[op]);
	fprintf(stderr, "fault matrix (%s): %s%s%s%s%s: %d scenarios, each acknowledged value "
		"loaded\n", base_max == FILES_ONLY ? "the files" : base_max == ALTERNATE ?
		"each way in turn" : "agents.checkpoint", any ? "any call" : op_names[op], persistent ? " from the n-th call on" : " once", only ? " about " : "",
		only ? only : "", and_truncate ? ", every truncate too" : "", calls);
}

static void fault_matrix2(enum td_store_op op, bool persistent, const char *only, int err,
			  bool and_truncate)
{
	fault_matrix3(op, persistent, only, err, and_truncate, false);
}

static void fault_matrix(enum td_store_op op, bool persistent, const char *only, int err)
{
	fault_matrix2(op, persistent, only, err, false);
}

/*
 * Each kind of call failed once, and from then on, with every checkpoint
 * writing the entries' files (past base_max, and at start and stop); the
 * tests above fold into agents.checkpoint (3 entries fit in it).
 */
START_TEST(test_fault_files)
{
	base_max = FILES_ONLY;
	fault_matrix((enum td_store_op)_i, false, NULL, EIO);
	fault_matrix((enum td_store_op)_i, true, NULL, EIO);
	base_max = 0;
}
END_TEST

/*
 * A crash after any number of calls: from the n-th call of any kind on,
 * nothing more reaches the directory (every call fails), for every n, in
 * each way of folding.  What is on disk then is what a kill -9 between
 * two calls leaves (the page cache aside): every acknowledged value loads.
 */
START_TEST(test_crash_anywhere)
{
	static const uint64_t way[3] = { 0, FILES_ONLY, ALTERNATE };
	base_max = way[_i];
	fault_matrix3(TD_STORE_OPEN, true, NULL, EIO, false, true);
	base_max = 0;
}
END_TEST

START_TEST(test_fault_once)
{
	fault_matrix((enum td_store_op)_i, false, NULL, EIO);
}
END_TEST

START_TEST(test_fault_persistent)
{
	fault_matrix((enum td_store_op)_i, true, NULL, EIO);
}
END_TEST

/* The journal alone, as `chattr +a` on it would: truncate, rename, unlink refused (EPERM). */
START_TEST(test_fault_journal_locked)
{
	static const enum td_store_op ops[] = { TD_STORE_TRUNCATE, TD_STORE_RENAME, TD_STORE_UNLINK };
	fault_matrix(ops[_i], true, "agents.journal", EPERM);
}
END_TEST

/*
 * A write or a sync of an append fails and the journal cannot be cut back
 * (every truncate fails): the failed record may stay on disk, so the next
 * append must cut first, and fails while it cannot; never a record after
 * stale bytes, never an acknowledgement of what a restart would not load.
 */
START_TEST(test_fault_cut_fails)
{
	static const enum td_store_op ops[] = { TD_STORE_WRITE, TD_STORE_SYNC };
	fault_matrix2(ops[_i], false, NULL, EIO, true);
}
END_TEST

/*
 * agents.checkpoint grows with the names the journals held; past base_max
 * the next checkpoint writes every name it holds to its file and removes
 * it, and the one after starts a new one.  Every value loads at each step.
 */
START_TEST(test_base_to_files)
{
	char bpath[128];
	make_tmpdir(NULL);
	in_dir(bpath, sizeof(bpath), "agents.checkpoint");
	base_max = 700;
	struct td_store s;
	open_store(&s, 1, false); /* each save rotates: a checkpoint after each */
	bool went_to_files = false, base_again = false;
	for (int i = 0; i < 24; i++) {
		char name[16], v[32];
		snprintf(name, sizeof(name), "agent-%d", i);
		snprintf(v, sizeof(v), "value-%d", i);
		set_standing(&s, name, v);
		uint64_t files = s.ckpt_files;
		ck_assert_int_eq(td_store_save(&s, tdir), 0);
		struct stat st;
		bool base = stat(bpath, &st) == 0;
		ck_assert(base == s.base_present);
		if (s.ckpt_files > files) {
			ck_assert_msg(!base, "agents.checkpoint left beside the files");
			went_to_files = true;
		} else if (went_to_files && base) {
			base_again = true;
		}
		if (base)
			ck_assert_int_le(st.st_size, 700);
		struct td_store r;
		char err[512] = "";
		memset(&r, 0, sizeof(r));
		r.journal = true;
		ck_assert_msg(td_store_load(&r, tdir, err, sizeof(err)) == 0, "load: %s", err);
		for (int k = 0; k <= i; k++) {
			snprintf(name, sizeof(name), "agent-%d", k);
			snprintf(v, sizeof(v), "value-%d", k);
			ck_assert_msg(standing_of(&r, name) && !strcmp(standing_of(&r, name), v),
				      "step %d: %s lost", i, name);
		}
		td_store_free(&r);
	}
	ck_assert_msg(went_to_files && base_again, "never past the bound (files %d, again %d)",
		      went_to_files, base_again);
	/* A clean stop's fold: the files alone, no agents.checkpoint. */
	s.compact = true;
	char err[512] = "";
	ck_assert_int_eq(td_store_checkpoint(&s, tdir, err, sizeof(err)), 0);
	ck_assert_int_eq(count_names(NULL, "agents.checkpoint"), 0);
	ck_assert_int_eq(count_names(NULL, "agents.journal"), 0);
	td_store_free(&s);
	base_max = 0;
	open_store(&s, 1, false);
	ck_assert_str_eq(standing_of(&s, "agent-23"), "value-23");
	ck_assert_str_eq(standing_of(&s, "agent-0"), "value-0");
	td_store_free(&s);
	remove_tmpdir();
}
END_TEST

/*
 * The case for real: the journal made append-only (FS_APPEND_FL,
 * what chattr +a sets) on a running store.  Before: every write was
 * acknowledged with no error, the checkpoint could not empty the journal,
 * and a restart replayed the stale journal over the newer files.  Now a
 * save that cannot be made durable is refused, and every acknowledged one
 * loads back.
 */
START_TEST(test_append_only_journal)
{
	char jpath[128];
	make_tmpdir_under(getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	in_dir(jpath, sizeof(jpath), "agents.journal");
	struct td_store s;
	struct model m = { 0 };
	open_store(&s, JMAX, false);
	set_standing(&s, "alpha", "first");
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	snprintf(m.acked[0], sizeof(m.acked[0]), "first");
	m.have[0] = true;
	int fd = open(jpath, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	int flags = 0;
	if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0 ||
	    (flags |= FS_APPEND_FL, ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0)) {
		int e = errno;
		close(fd);
		td_store_free(&s);
		remove_tmpdir();
		TU_SKIP(e == EPERM ? TU_SKIP_ROOT : TU_SKIP_ENV, "cannot make %s append-only: %s", jpath,
			strerror(e));
	}
	for (int i = 0; i < 16; i++) {
		int e = i % NE;
		char v[32];
		snprintf(v, sizeof(v), "locked-%d", i);
		set_standing(&s, ent[e], v);
		if (td_store_save(&s, tdir) == 0) {
			snprintf(m.acked[e], sizeof(m.acked[e]), "%s", v);
			m.have[e] = true;
			m.saves_ok++;
		} else {
			td_store_rollback(&s);
			m.saves_failed++;
		}
	}
	td_store_free(&s);
	/* Unlocked (the operator's fix), then restarted: every acknowledged value. */
	int unlocked = flags & ~FS_APPEND_FL;
	ck_assert_int_eq(ioctl(fd, FS_IOC_SETFLAGS, &unlocked), 0);
	verify(&m, "append-only journal, unlocked after");
	/* Still append-only at the start: it starts, and loads the same. */
	ck_assert_int_eq(ioctl(fd, FS_IOC_SETFLAGS, &flags), 0);
	verify(&m, "append-only journal, still locked");
	ck_assert_int_eq(ioctl(fd, FS_IOC_SETFLAGS, &unlocked), 0);
	close(fd);
	ck_assert_msg(m.saves_ok > 0, "no save went through before the checkpoint was due");
	remove_tmpdir();
}
END_TEST

/* ---- damaged journals ------------------------------------------------------ */

/* Three records, one entry each, then the journal's bytes for the test to damage. */
static char *three_records(size_t *len)
{
	char jpath[128];
	struct td_store s;
	open_store(&s, 1 << 20, false);
	set_standing(&s, "alpha", "alpha-1111");
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	set_standing(&s, "beta", "beta-2222");
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	set_standing(&s, "gamma", "gamma-3333");
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	td_store_free(&s);
	return slurp(in_dir(jpath, sizeof(jpath), "agents.journal"), len);
}

static char *find(char *buf, size_t len, const char *needle)
{
	return memmem(buf, len, needle, strlen(needle));
}

/*
 * A damaged record in the middle: strict refuses and names the journal;
 * the default start sets it aside, loads the record before it and the one
 * after it, never the damaged value, and names the agent it held.
 */
static void damaged_middle(char *buf, size_t len)
{
	char jpath[128], err[512] = "";
	spit(in_dir(jpath, sizeof(jpath), "agents.journal"), buf, len);
	struct td_store r = { 0 };
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "agents.journal"), "unclear refusal: %s", err);
	td_store_free(&r);
	memset(&r, 0, sizeof(r));
	r.journal = true;
	r.quarantine = true;
	capture_stderr();
	int rc = td_store_load(&r, tdir, err, sizeof(err));
	char *log = captured_stderr();
	ck_assert_msg(rc == 0, "load: %s", err);
	ck_assert_uint_ge(r.quarantined, 1);
	/* beta's one record is the damaged one: nothing of it may be loaded. */
	const char *b = standing_of(&r, "beta");
	ck_assert_msg(!b, "a damaged value was loaded: %s", b);
	ck_assert_msg(standing_of(&r, "alpha") && !strcmp(standing_of(&r, "alpha"), "alpha-1111"),
		      "the record before the damage was lost");
	ck_assert_msg(standing_of(&r, "gamma") && !strcmp(standing_of(&r, "gamma"), "gamma-3333"),
		      "the record after the damage was lost (%s)",
		      standing_of(&r, "gamma") ? standing_of(&r, "gamma") : "none");
	ck_assert_msg(strstr(log, "beta"), "the log does not name the agent the damage affected:\n%s",
		      log);
	ck_assert_msg(count_names(NULL, "agents.journal.corrupt-") == 1, "the journal was not set aside");
	free(log);
	td_store_free(&r);
	/* What the start kept is durable: the next start loads it without a word. */
	memset(&r, 0, sizeof(r));
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(standing_of(&r, "gamma"), "gamma-3333");
	td_store_free(&r);
}

/*
 * agents.checkpoint damaged (a digit flipped): strict refuses and names
 * it; the default start never loads the damaged value, names the agent,
 * keeps what the journal after it holds, and sets it aside.
 */
START_TEST(test_damaged_base)
{
	char bpath[128], err[512] = "";
	make_tmpdir(NULL);
	base_max = 1u << 20;
	struct td_store s;
	open_store(&s, 1, false); /* every save rotates, and a checkpoint folds it */
	set_standing(&s, "alpha", "alpha-1111");
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	set_standing(&s, "beta", "beta-2222");
	ck_assert_int_eq(td_store_save(&s, tdir), 0); /* beta: in agents.journal too */
	ck_assert(s.base_present && s.ckpt_files == 0);
	td_store_free(&s);
	base_max = 0;
	size_t len;
	char *buf = slurp(in_dir(bpath, sizeof(bpath), "agents.checkpoint"), &len);
	char *d = find(buf, len, "alpha-1111");
	ck_assert_ptr_nonnull(d);
	d[9] = '2';
	spit(bpath, buf, len);
	free(buf);
	struct td_store r = { 0 };
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_msg(strstr(err, "agents.checkpoint") && strstr(err, "alpha"), "unclear refusal: %s",
		      err);
	td_store_free(&r);
	memset(&r, 0, sizeof(r));
	r.journal = true;
	r.quarantine = true;
	capture_stderr();
	int rc = td_store_load(&r, tdir, err, sizeof(err));
	char *log = captured_stderr();
	ck_assert_msg(rc == 0, "load: %s", err);
	ck_assert_msg(!standing_of(&r, "alpha"), "a damaged value was loaded: %s",
		      standing_of(&r, "alpha"));
	ck_assert_str_eq(standing_of(&r, "beta"), "beta-2222");
	ck_assert_msg(strstr(log, "alpha"), "the log does not name the agent:\n%s", log);
	ck_assert_int_eq(count_names(NULL, "agents.checkpoint.corrupt-"), 1);
	ck_assert_int_eq(count_names(NULL, "agents.checkpoint"), 1); /* the copy set aside only */
	free(log);
	td_store_free(&r);
	memset(&r, 0, sizeof(r));
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(standing_of(&r, "beta"), "beta-2222");
	td_store_free(&r);
	remove_tmpdir();
}
END_TEST

/* One digit of a value flipped: the record is still valid JSON. */
START_TEST(test_flipped_digit)
{
	size_t len;
	make_tmpdir_under(NULL);
	char *buf = three_records(&len);
	char *v = find(buf, len, "beta-2222");
	ck_assert_ptr_nonnull(v);
	v[7] = '3'; /* beta-2232 */
	damaged_middle(buf, len); /* beta-2232 */
	free(buf);
	remove_tmpdir();
}
END_TEST

/* Bytes cut out of the middle record. */
START_TEST(test_cut_in_middle)
{
	size_t len;
	make_tmpdir_under(NULL);
	char *buf = three_records(&len);
	char *v = find(buf, len, "beta-2222");
	ck_assert_ptr_nonnull(v);
	size_t at = (size_t)(v - buf) + 2, cut = 6;
	memmove(buf + at, buf + at + cut, len - at - cut);
	damaged_middle(buf, len - cut); /* beta-2222 -> be2, still JSON */
	free(buf);
	remove_tmpdir();
}
END_TEST

/*
 * A damaged journal whose intact records cannot be folded into the files
 * at the start (every open for writing fails): the start goes on with
 * what it read, saves are refused (never appended after the damage) until
 * the fold works, then everything is durable.
 */
START_TEST(test_fold_fails_at_load)
{
	char jpath[128], err[512] = "";
	size_t len;
	make_tmpdir_under(NULL);
	char *buf = three_records(&len);
	char *v = find(buf, len, "beta-2222");
	v[7] = '3';
	spit(in_dir(jpath, sizeof(jpath), "agents.journal"), buf, len);
	free(buf);
	struct fault f = { .op = TD_STORE_OPEN, .nth = 1, .persistent = true, .err = ENOSPC };
	td_store_set_fault(fault_hook, &f);
	struct td_store r = { 0 };
	r.journal = true;
	r.quarantine = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert(r.ckpt_failed && r.compact);
	ck_assert_str_eq(standing_of(&r, "gamma"), "gamma-3333");
	set_standing(&r, "alpha", "refused");
	ck_assert_int_eq(td_store_save(&r, tdir), TOGGLE_EIO);
	td_store_rollback(&r);
	ck_assert_int_eq(count_names(NULL, "agents.journal.corrupt-"), 0); /* not before the fold */
	td_store_set_fault(NULL, NULL);
	set_standing(&r, "alpha", "after");
	ck_assert_int_eq(td_store_save(&r, tdir), 0); /* the fold first, then the save */
	ck_assert(!r.ckpt_failed && !r.compact);
	ck_assert_int_eq(count_names(NULL, "agents.journal.corrupt-"), 1);
	td_store_free(&r);
	memset(&r, 0, sizeof(r));
	r.journal = true;
	ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
	ck_assert_str_eq(standing_of(&r, "alpha"), "after");
	ck_assert_str_eq(standing_of(&r, "gamma"), "gamma-3333");
	ck_assert_ptr_null(standing_of(&r, "beta"));
	td_store_free(&r);
	remove_tmpdir();
}
END_TEST

/* A torn last record (a crash while it was written): dropped, strict or not. */
START_TEST(test_torn_tail)
{
	char jpath[128], err[512] = "";
	size_t len;
	make_tmpdir_under(NULL);
	char *buf = three_records(&len);
	for (size_t cut = 1; cut < 12; cut += 5) {
		spit(in_dir(jpath, sizeof(jpath), "agents.journal"), buf, len - cut);
		struct td_store r = { 0 };
		r.journal = true;
		int rc = td_store_load(&r, tdir, err, sizeof(err));
		ck_assert_msg(rc == 0, "a torn last record stops a strict load: %s", err);
		ck_assert_str_eq(standing_of(&r, "beta"), "beta-2222");
		ck_assert_ptr_null(standing_of(&r, "gamma"));
		ck_assert_uint_eq(r.quarantined, 0);
		td_store_free(&r);
	}
	/* A torn tail that cannot be cut (truncate fails): the start goes on, saves are
	 * refused until it can be cut (never a record after the torn bytes). */
	spit(in_dir(jpath, sizeof(jpath), "agents.journal"), buf, len - 3);
	struct fault f = { .op = TD_STORE_TRUNCATE, .nth = 1, .persistent = true, .err = EPERM };
	td_store_set_fault(fault_hook, &f);
	struct td_store r;
	open_store(&r, 1 << 20, false);
	ck_assert(r.jtrim);
	set_standing(&r, "gamma", "after");
	ck_assert_int_eq(td_store_save(&r, tdir), TOGGLE_EIO);
	td_store_rollback(&r);
	td_store_set_fault(NULL, NULL);
	set_standing(&r, "gamma", "after");
	ck_assert_int_eq(td_store_save(&r, tdir), 0);
	td_store_free(&r);
	open_store(&r, 1 << 20, false);
	ck_assert_str_eq(standing_of(&r, "gamma"), "after");
	ck_assert_str_eq(standing_of(&r, "beta"), "beta-2222");
	td_store_free(&r);
	free(buf);
	remove_tmpdir();
}
END_TEST

/* An agent name with ".json.corrupt-" in it is an agent name like any other. */
START_TEST(test_corrupt_infix_name)
{
	static const char *const names[] = { "x.json.corrupt-1", "y.json.corrupt-", "z.json" };
	struct td_store s;
	make_tmpdir_under(NULL);
	open_store(&s, 1, true);
	for (size_t i = 0; i < 3; i++)
		set_standing(&s, names[i], names[i]);
	ck_assert_int_eq(td_store_save(&s, tdir), 0);
	set_standing(&s, "other", "x");
	ck_assert_int_eq(td_store_save(&s, tdir), 0); /* the first save's checkpoint, at least */
	td_store_free(&s);
	for (int pass = 0; pass < 2; pass++) {
		struct td_store r;
		open_store(&r, 1, true);
		for (size_t i = 0; i < 3; i++)
			ck_assert_msg(standing_of(&r, names[i]) && !strcmp(standing_of(&r, names[i]), names[i]),
				      "%s lost its state (pass %d)", names[i], pass);
		ck_assert_uint_eq(r.quarantined, 0);
		/* A checkpoint of everything, then the next start. */
		for (size_t i = 0; i < 3; i++)
			set_standing(&r, names[i], names[i]);
		set_standing(&r, "other", pass ? "y" : "z");
		ck_assert_int_eq(td_store_save(&r, tdir), 0);
		td_store_free(&r);
	}
	remove_tmpdir();
}
END_TEST

/*
 * agents.journal that is not a regular file (a directory, a FIFO, a
 * symbolic link): strict refuses with the reason; the default start sets
 * it aside and starts with the files.
 */
START_TEST(test_journal_not_regular)
{
	char jpath[128], err[512] = "";
	make_tmpdir_under(NULL);
	in_dir(jpath, sizeof(jpath), "agents.journal");
	for (int kind = 0; kind < 3; kind++) {
		struct td_store s;
		open_store(&s, 1, false);
		set_standing(&s, "alpha", "kept");
		ck_assert_int_eq(td_store_save(&s, tdir), 0);
		set_standing(&s, "beta", "lost");
		ck_assert_int_eq(td_store_save(&s, tdir), 0);
		td_store_free(&s);
		/* A checkpoint has written alpha's file; beta was only in the journal. */
		unlink(jpath);
		rmdir(jpath);
		int rc = kind == 0 ? mkdir(jpath, 0700) : kind == 1 ? mkfifo(jpath, 0600)
							     : symlink("/etc/passwd", jpath);
		ck_assert_int_eq(rc, 0);
		struct td_store r = { 0 };
		r.journal = true;
		ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), TOGGLE_EINVAL);
		ck_assert_msg(strstr(err, "agents.journal") && strstr(err, "regular"),
			      "unclear refusal: %s", err);
		td_store_free(&r);
		memset(&r, 0, sizeof(r));
		r.journal = true;
		r.quarantine = true;
		rc = td_store_load(&r, tdir, err, sizeof(err));
		ck_assert_msg(rc == 0, "kind %d: a journal that is not a regular file stops the start: %s",
			      kind, err);
		ck_assert_str_eq(standing_of(&r, "alpha"), "kept");
		ck_assert_uint_ge(r.quarantined, 1);
		set_standing(&r, "alpha", "after");
		ck_assert_int_eq(td_store_save(&r, tdir), 0);
		td_store_free(&r);
		memset(&r, 0, sizeof(r));
		r.journal = true;
		ck_assert_int_eq(td_store_load(&r, tdir, err, sizeof(err)), 0);
		ck_assert_str_eq(standing_of(&r, "alpha"), "after");
		td_store_free(&r);
	}
	remove_tmpdir();
}
END_TEST

static Suite *faults_suite(void)
{
	Suite *s = suite_create("store_faults");
	TCase *tc = tcase_create("seam");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_fault_once, 0, TD_STORE_N_OPS);
	tcase_add_loop_test(tc, test_fault_persistent, 0, TD_STORE_N_OPS);
	tcase_add_loop_test(tc, test_fault_journal_locked, 0, 3);
	tcase_add_loop_test(tc, test_fault_cut_fails, 0, 2);
	tcase_add_test(tc, test_append_only_journal);
	tcase_add_loop_test(tc, test_fault_files, 0, TD_STORE_N_OPS);
	tcase_add_loop_test(tc, test_crash_anywhere, 0, 3);
	tcase_add_test(tc, test_base_to_files);
	suite_add_tcase(s, tc);
	tc = tcase_create("damage");
	tcase_add_test(tc, test_flipped_digit);
	tcase_add_test(tc, test_damaged_base);
	tcase_add_test(tc, test_cut_in_middle);
	tcase_add_test(tc, test_torn_tail);
	tcase_add_test(tc, test_fold_fails_at_load);
	tcase_add_test(tc, test_corrupt_infix_name);
	tcase_add_test(tc, test_journal_not_regular);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(faults_suite());
}
