/*
 * store.h - the desired-state store's seams for tests (daemon/store.c).
 */
#ifndef TD_STORE_H
#define TD_STORE_H

/*
 * Fault injection: every call the store makes that changes the state
 * directory goes through a hook first.  A test installs one that returns
 * an errno to make that call fail (without making it), or 0 to let it run.
 * file: the name (no directory) the call is about.  NULL: no hook, the
 * production default.  The hook may be called from the thread pool and the
 * store's sync threads.
 */
enum td_store_op {
	TD_STORE_OPEN,     /* open or create a file for writing, mkdir */
	TD_STORE_WRITE,    /* write, pwrite */
	TD_STORE_SYNC,     /* fsync, fdatasync (files and directories) */
	TD_STORE_TRUNCATE, /* ftruncate */
	TD_STORE_RENAME,   /* rename */
	TD_STORE_UNLINK,   /* unlink */
	TD_STORE_N_OPS
};
typedef int td_store_fault_fn(enum td_store_op op, const char *file, void *arg);
void td_store_set_fault(td_store_fault_fn *fn, void *arg);

#endif
