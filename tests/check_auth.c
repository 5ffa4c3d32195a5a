/*
 * check_auth.c - the daemon's write permission rule (daemon/auth.c):
 * owner and root, the operator group, the user database, /proc groups.
 * The temporary state directory and the file helpers are the store suites'
 * fixture (tests/fixture_store.h).  Split out of check_store.c (issue 29).
 */
#include "fixture_store.h"

#define NO_SUCH_PID 99999999u /* above any pid_max */
/* ---- auth ---------------------------------------------------------------- */

START_TEST(test_auth_owner_and_root)
{
	struct td_daemon d = { 0 };
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
	ck_assert(td_auth_may_write(&d, 0, 54321, NO_SUCH_PID));
	ck_assert(td_auth_may_write(&d, (uint32_t)geteuid(), 54321, NO_SUCH_PID));
	ck_assert(!td_auth_may_write(&d, 54321, 54321, NO_SUCH_PID));
	ck_assert(!td_auth_may_write(&d, 54321, 54321, 0));
	/* Our own pid with a uid that is not its uid: its groups do not count. */
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)getpid()));
}
END_TEST

START_TEST(test_auth_operator_group)
{
	struct td_daemon d = { 0 };
	struct group *gr = getgrgid(getegid());
	ck_assert_ptr_nonnull(gr);
	snprintf(d.cfg.operator_group, sizeof(d.cfg.operator_group), "%s", gr->gr_name);
	td_auth_reload(&d);
	ck_assert(d.have_operator_gid);
	ck_assert_uint_eq(d.operator_gid, getegid());
	ck_assert(td_auth_may_write(&d, 54321, (uint32_t)getegid(), NO_SUCH_PID));
	ck_assert(!td_auth_may_write(&d, 54321, 54321, NO_SUCH_PID));

	/* Unknown or empty group: nobody is an operator, quietly. */
	snprintf(d.cfg.operator_group, sizeof(d.cfg.operator_group), "no-such-group-xyzzy");
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
	ck_assert(!td_auth_may_write(&d, 54321, (uint32_t)getegid(), NO_SUCH_PID));
	d.cfg.operator_group[0] = '\0';
	d.have_operator_gid = true;
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
	/* A name filling its whole array (no NUL) is refused, not read past. */
	memset(d.cfg.operator_group, 'g', sizeof(d.cfg.operator_group));
	td_auth_reload(&d);
	ck_assert(!d.have_operator_gid);
}
END_TEST

/* Fallback to the user database: a user whose primary group is the operator group. */
START_TEST(test_auth_user_database)
{
	struct td_daemon d = { 0 };
	struct passwd *pw;
	uid_t uid = 0;
	gid_t gid = 0;
	bool found = false;
	setpwent();
	while (!found && (pw = getpwent()) != NULL) {
		if (pw->pw_uid != 0 && pw->pw_uid != geteuid() && pw->pw_gid != 54321) {
			uid = pw->pw_uid, gid = pw->pw_gid;
			found = true;
		}
	}
	endpwent();
	if (!found)
		TU_SKIP(TU_SKIP_ENV, "no account other than root and the test's own user here");
	d.have_operator_gid = true;
	d.operator_gid = gid;
	ck_assert(td_auth_may_write(&d, (uint32_t)uid, 54321, NO_SUCH_PID));
	d.operator_gid = 54322;
	ck_assert(!td_auth_may_write(&d, (uint32_t)uid, 54321, NO_SUCH_PID));
}
END_TEST

/*
 * The peer process's supplementary groups, read from /proc: needs root to
 * make a process of another user with chosen groups (skipped otherwise).
 */
START_TEST(test_auth_proc_groups)
{
	if (geteuid() != 0)
		TU_SKIP(TU_SKIP_ROOT, "needs root to make a process of uid 54321 with chosen groups");
	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	pid_t child = fork();
	ck_assert_int_ne(child, -1);
	if (child == 0) {
		gid_t extra[] = { 54330, 54322 };
		char c;
		close(fds[1]);
		if (setgroups(2, extra) || setgid(54321) || setuid(54321))
			_exit(1);
		(void)!read(fds[0], &c, 1); /* until the parent is done */
		_exit(0);
	}
	close(fds[0]);
	/* Wait until the child has dropped to its new identity. */
	char path[64], *status = NULL;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)child);
	for (int i = 0; i < 1000; i++) {
		free(status);
		status = read_text(path);
		if (strstr(status, "\nUid:\t54321\t54321"))
			break;
		usleep(1000);
	}
	ck_assert_ptr_nonnull(strstr(status, "\nUid:\t54321\t54321"));
	ck_assert_ptr_nonnull(strstr(status, "\nGroups:\t54322 54330")); /* the kernel sorts them */
	free(status);

	struct td_daemon d = { 0 };
	d.have_operator_gid = true;
	d.operator_gid = 54322;
	ck_assert(td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	d.operator_gid = 54323;
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	d.operator_gid = 5432; /* a prefix or suffix of a listed group is not that group */
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	d.operator_gid = 4322;
	ck_assert(!td_auth_may_write(&d, 54321, 54321, (uint32_t)child));
	/* The process at that pid is not the peer's uid: its groups are not trusted. */
	d.operator_gid = 54322;
	ck_assert(!td_auth_may_write(&d, 54320, 54321, (uint32_t)child));

	close(fds[1]);
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

static Suite *auth_suite(void)
{
	Suite *s = suite_create("auth");
	TCase *tc = tcase_create("auth");
	tcase_add_test(tc, test_auth_owner_and_root);
	tcase_add_test(tc, test_auth_operator_group);
	tcase_add_test(tc, test_auth_user_database);
	tcase_add_test(tc, test_auth_proc_groups);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(auth_suite());
}
