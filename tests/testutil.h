/* testutil.h - small helpers shared by the Check tests. */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <check.h>
#include <stdlib.h>

/* Run one suite and exit with its verdict (the body of every test's main). */
static inline int tu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
