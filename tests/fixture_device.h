/*
 * fixture_device.h - the shared fixture of the device-mode suites
 * (tests/check_device_*.c): struct dfx holds the simulator, its streams, an
 * agent, G graphs of NL layers x NT hook types and the log of what ran;
 * dfx_open/dfx_capture/dfx_launch drive them, dfx_check compares what ran
 * with the set each launch was submitted with.
 */
#ifndef FIXTURE_DEVICE_H
#define FIXTURE_DEVICE_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_impl.h" /* white-box: the mixing guard */
#include "testutil.h"
#include "tgclient.h"
#include "toggle.h"
#include "toggle_sim.h"

#define NT 3
#define NL 8
#define NH (NT * NL) /* 24 hooks: a set fits a uint32_t */
#define G 4
#define NS 3
#define MAX_LAUNCHES 4096

/* What ran: one record per producer execution. */
struct rec {
	int graph, hook;
	uint64_t launch; /* index of the launch of that graph that ran it */
};

struct dfx {
	struct toggle_sim *sim;
	CUstream s[NS];
	struct toggle_agent *agent;
	CUmodule mod;
	CUfunction produce, mark;
	CUgraph graph[G];
	CUgraphExec exec[G];
	uint64_t runs[G];          /* launches of graph g that ran (counted by its mark kernel) */
	struct rec log[1 << 17];
	size_t nlog;
	uint32_t expect[G][MAX_LAUNCHES]; /* the set of each launch, when it was submitted */
	uint64_t launched[G];
	unsigned compute_runs;
};

/* How a graph's producers are captured. */
enum how {
	H_DEVICE,         /* planner first, producers through toggle_launch_producer */
	H_NO_PLANNER,     /* producers through toggle_launch_producer, no planner */
	H_ONE_PLAIN,      /* planner, but hook 0:3 recorded with toggle_record_producer */
	H_BEFORE_PLANNER, /* hook 0:0's producer captured before the planner */
	H_RECORD_DEVICE,  /* launch_kernel_ex with the attribute + toggle_record_device_producer */
};

void k_compute(void *arg);
struct toggle_config dfx_config(struct dfx *f, enum toggle_mode mode, bool strict);
struct dfx *dfx_new(void);
struct dfx *dfx_open(enum toggle_mode mode, bool strict);
void dfx_close(struct dfx *f);
CUlaunchConfig launch_cfg(CUstream s);
void dfx_capture(struct dfx *f, int gi, enum how how);
uint32_t set_bits(const struct toggle_set *s);
struct toggle_set set_of(uint32_t m);
int dfx_launch(struct dfx *f, int gi, int si);
uint64_t dfx_check(struct dfx *f);
uint64_t sim_calls(struct dfx *f, enum toggle_sim_op op);
struct toggle_stats stats(struct dfx *f);
struct toggle_graph_status gstatus(struct dfx *f, int gi);
struct toggle_device_counters dcount(struct dfx *f, int gi);

#endif
