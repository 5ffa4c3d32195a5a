/*
 * fixture_store.h - the shared fixture of the store suites
 * (tests/check_store_*.c, check_store_faults.c, check_auth.c): the test's
 * state directory tdir (mkdtemp, named after the suite: suites run in
 * parallel), paths in it, files and entries written and read, stderr (where
 * the store logs) captured, and a store of three names.
 */
#ifndef FIXTURE_STORE_H
#define FIXTURE_STORE_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "toggled.h"

#define MAX_AGENTS 4096 /* TD_MAX_STORED_AGENTS in store.c */
#define GAMMA "Gamma_2.x-y" /* every character class a name may have */

/* The test's directory (make_tmpdir, removed with everything in it by remove_tmpdir). */
extern char tdir[64];

void make_tmpdir(void);
void remove_tmpdir(void);
/* tdir/<name> into buf. */
const char *in_dir(char *buf, size_t len, const char *name);
const char *in_agents(char *buf, size_t len, const char *fname);
const char *entry_path(char *buf, size_t len, const char *name);
void make_agents_dir(void);
void write_text(const char *path, const char *text);
char *slurp(const char *path, size_t *len);
char *read_text(const char *path);
void write_entry(const char *name, const char *text);
char *read_entry(const char *name);
void text_has_entry(const char *name, const char *needle);
bool exists(const char *path);
bool entry_exists(const char *name);
ino_t entry_ino(const char *name);
char *list_agents_dir(void);
void capture_stderr(void);
char *captured_stderr(void);
char *repeat(char c, size_t n);
void set_plans2(struct td_desired *dd, int64_t s0, const char *p0, int64_t s1,
		const char *p1);
void fill_store(struct td_store *s);

#endif
