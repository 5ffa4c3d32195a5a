/*
 * fixture_daemon.h - the shared fixture of the end-to-end suites
 * (tests/check_daemon_*.c): each test gets a private directory under /tmp
 * with the socket, the state directory and the logs (mkdtemp: suites run in
 * parallel), starts the daemon there, and stops it at the end with SIGTERM:
 * the daemon must exit 0, so an ASan or leak report in it fails the test.
 * On a failure the daemon's log and the agents' logs are printed and the
 * directory is kept.  Children are tied to the test process with
 * PR_SET_PDEATHSIG, so a failed or timed-out test leaves nothing running.
 *
 * An agent child captures NGRAPHS graphs of NL layers x NT hook types whose
 * producer kernels record what ran, then steps until SIGTERM: each step it
 * launches every graph, checks that what ran is the step's effective set
 * (exit 3 if not), and logs "step S set SPEC" to DIR/agent-NAME.log.
 *
 * fixture_daemon.c: the environment, the daemon, the agent children, their
 * logs; fixture_rpc.c: client RPCs and raw connections.
 */
#ifndef FIXTURE_DAEMON_H
#define FIXTURE_DAEMON_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_impl.h" /* white-box: the agent's own status lane */
#include "frame.h"
#include "testutil.h"
#include "util.h"
#include "tgclient.h"
#include "toggle.h"
#include "toggle_shm.h"
#include "toggle_sim.h"

#ifndef TOGGLED_BIN
#error "TOGGLED_BIN must name the daemon binary (daemon/daemon.mk passes it)"
#endif

#define NT             2     /* hook types of the test catalog */
#define NL             4     /* layers */
#define NGRAPHS        2     /* graphs each agent captures */
#define MAX_AGENTS     4
#define SPEC_LEN       256
#define ERRLEN         512
#define RPC_TIMEOUT_MS 15000
#define WAIT_MS        5000  /* wait_ms of SetEnabled requests that must succeed */
#define NOBODY         65534

/* The test catalog: NT hook types of NL layers. */
extern const char *const type_names[NT];
extern const struct toggle_catalog catalog;

/* Exit codes of an agent child. */
enum { AGENT_OK = 0, AGENT_SETUP = 2, AGENT_MISMATCH = 3, AGENT_LAUNCH = 4, AGENT_STEP = 5 };

struct agent_proc {
	pid_t pid; /* 0 once reaped */
	char name[32];
	char log[PATH_MAX];
};

struct env {
	char dir[64];
	char sock[PATH_MAX], state[PATH_MAX], dlog[PATH_MAX];
	pid_t daemon; /* 0 when not running */
	int n_agents;
	struct agent_proc agents[MAX_AGENTS];
};

/* Like ck_assert_msg, but prints the daemon's and agents' logs first. */
#define ASSERT(cond, ...)                                         \
	do {                                                      \
		if (!(cond))                                      \
			fail_at(__FILE__, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

/* got and want are plain variables or constants (evaluated twice). */
#define ASSERT_CODE(got, want, err)                                                    \
	ASSERT((got) == (want), "code %d (%s), expected %d (%s); message: %s", (int)(got), \
	       toggle_strerror(got), (int)(want), toggle_strerror(want), (err))

#define ASSERT_STR(got, want, what) \
	ASSERT(strcmp((got), (want)) == 0, "%s is '%s', expected '%s'", (what), (got), (want))

/* A hook spec in the canonical text of the test catalog. */
struct spec {
	char s[SPEC_LEN];
};

struct agent_opts {
	const char *name, *group;
	int64_t start;  /* first step */
	bool steps;     /* false: register, capture, bind, then only sleep (never launches) */
	int period_ms;  /* sleep between steps; 0 means 1 ms */
	int64_t anomaly_at; /* > 0: at this step, record a producer outside any capture window */
	uid_t uid;      /* > 0: the agent runs as this uid (and gid) */
	int64_t stall_at; /* > 0: after this step, stall stall_ms, then go on at stall_at + jump */
	int stall_ms;
	int64_t jump;     /* 0 means 1 */
};

struct aline {
	int64_t step;
	char spec[SPEC_LEN];
};

struct alog {
	struct aline *v;
	size_t n;
};

/* Print the failure, the daemon's and agents' logs (the directory is kept), and fail the test. */
_Noreturn void fail_at(const char *file, int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* One Check test case of s, with the suites' 60 s timeout. */
TCase *add_tcase(Suite *s, const char *name);

/* What list_agents says about one agent. */
struct ainfo {
	uint64_t id, control_version, applied_version, anomalies;
	uint32_t pid, uid, mode, n_layers, graphs, pending_plan;
	int32_t driver_version;
	int64_t step;
	char name[64], group[64], enabled[SPEC_LEN];
	size_t n_types;
	char types[NT + 2][64];
};

struct evinfo {
	uint64_t agent_id, version;
	int64_t step;
};

struct raw {
	int fd;
	struct tgp_reader rd;
	uint64_t next_id;
};


/* tests/fixture_daemon.c */
uint64_t now_ms(void);
void sleep_ms(int ms);
const char *status_text(int st);
char *file_read(const char *path);
bool file_contains(const char *path, const char *needle);
struct spec canon(const char *text);
void child_detach(pid_t parent);
pid_t daemon_spawn(const struct env *e, const char *logpath);
bool wait_exit(pid_t pid, int timeout_ms, int *st);
void daemon_start(struct env *e);
void daemon_stop(struct env *e);
void daemon_kill9(struct env *e);
int agent_start(struct env *e, const struct agent_opts *o);
void agent_assert_alive(struct agent_proc *ap);
void agent_stop(struct env *e, int i);
void agent_kill9(struct env *e, int i);
void env_setup(struct env *e);
void env_teardown(struct env *e);
void alog_load(struct alog *l, const char *path);
void alog_free(struct alog *l);
int64_t agent_last_step(const struct agent_proc *ap);
void alog_wait(struct agent_proc *ap, int64_t step, int timeout_ms, struct alog *out);
void alog_expect(const struct alog *l, const struct agent_proc *ap, int64_t step,
		 const char *want);
void assert_switch(struct agent_proc *ap, int64_t before_last, int64_t at_step,
		   const char *old_set, const char *new_set);
void run_child(const struct env *e, void (*fn)(const struct env *),
	       const char *what, const char *const *why, size_t n_why);
void env_setup_conf(struct env *e, const char *text);

/* tests/fixture_rpc.c */
struct tgc *client(const struct env *e);
int rpc(struct tgc *c, Toggle__Envelope__BodyCase body, void *msg, Toggle__Envelope **rep,
	char *err);
int rpc_status(struct tgc *c, Toggle__Envelope **rep, char *err);
int rpc_list_agents(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err);
int rpc_list_graphs(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err);
int rpc_hooks(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err);
int rpc_show_plan(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err);
int rpc_clear_plan(struct tgc *c, Toggle__Selector *sel, char *err);
int rpc_watch(struct tgc *c, Toggle__Selector *sel, char *err);
int rpc_set(struct tgc *c, Toggle__Selector *sel, Toggle__SetOp op, const char *spec,
	    uint32_t wait_ms, Toggle__Envelope **rep, char *err);
uint64_t set_applied(struct tgc *c, Toggle__Selector *sel, Toggle__SetOp op,
		     const char *spec);
int rpc_plan(struct tgc *c, Toggle__Selector *sel, const int64_t *steps,
	     const char *const *specs, size_t n, char *err);
int rpc_plan_after(struct tgc *c, Toggle__Selector *sel, const int64_t *after,
		   const char *const *specs, size_t n, char *err);
Toggle__Selector sel_group(const char *group);
Toggle__Selector sel_id(uint64_t id);
Toggle__Selector sel_pid(uint32_t pid);
void ainfo_copy(struct ainfo *o, const Toggle__AgentInfo *m);
bool agent_lookup(struct tgc *c, const char *name, struct ainfo *out, size_t *total);
struct ainfo agent_info(struct tgc *c, const char *name);
struct ainfo agent_wait_listed(struct tgc *c, struct agent_proc *ap, int64_t min_step);
void agent_wait_gone(struct tgc *c, const char *name);
void daemon_alive(const struct env *e, const char *after);
struct evinfo event_wait(struct tgc *c, Toggle__EventKind kind, const char *name,
			 int timeout_ms);
void raw_open(struct raw *r, const struct env *e);
void raw_close(struct raw *r);
void raw_write(struct raw *r, const void *buf, size_t len, int pass_fd);
void raw_send_env(struct raw *r, Toggle__Envelope *env, int pass_fd);
int raw_recv(struct raw *r, Toggle__Envelope **env, int timeout_ms);
int raw_call(struct raw *r, Toggle__Envelope *req, int pass_fd,
	     Toggle__Envelope__BodyCase want, char *err);
int raw_hello_version(struct raw *r, uint32_t version, char *err);
void raw_hello(struct raw *r);
int raw_status(struct raw *r, char *err);
void raw_expect_closed(struct raw *r, const char *after);
int raw_register(struct raw *r, const char *name, size_t n_types, uint32_t n_layers,
		 int pass_fd, char *err);
int64_t plan_ahead(struct tgc *c, const char *name, const int64_t *offsets,
		   const char *const *specs, size_t n);
void plan_text(struct tgc *c, int64_t base, char *out, size_t len);
int raw_register_group(struct raw *r, const char *name, const char *group, int fd,
		       char *err);

#endif
