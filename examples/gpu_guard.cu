/*
 * gpu_guard.cu - issue #10 on the real driver (run by scripts/gpu-check.sh
 * after gpu_check): the guard fails closed and never blocks graphs it does
 * not own.  Three legs, each printing one "gpu-guard: leg=NAME PASS|FAIL"
 * line with its figures:
 *
 *  upload  A device-mode agent (not strict), a graph captured without a
 *          planner, so it runs on the host fallback: its device-updatable
 *          producers are toggled by cuGraphNodeSetEnabled and uploaded
 *          before the launch.  The agent's cuGraphUpload is wrapped (its
 *          driver table, through the private header) to fail once after a
 *          set change: that launch must be refused and run nothing, and the
 *          next launch must upload again and run the new set, not the old.
 *  late    A lazy agent: a producer launched into a capture after the
 *          capture window closed (refused at record time), once next to a
 *          recorded producer and once alone.  Bind and launches of both
 *          graphs must be refused and run nothing, whatever the set; a
 *          proper capture afterwards runs exactly its set.
 *  reuse   A lazy agent: a graph with producers is forgotten (then unbound,
 *          in a second round); while it lives its launches stay refused.
 *          Then it is destroyed and unrelated one-kernel graphs are captured
 *          until the driver hands out the same CUgraph handle (at most
 *          REUSE_TRIES graphs).  That graph must launch untouched through
 *          the agent.  If the driver never reuses the handle, the round
 *          prints "not exercised" (not a failure: the case cannot arise).
 *
 * Every producer counts its runs in device memory, per hook; after each
 * launch the host synchronises and compares the counts with the set.
 * Exit status: 0 on PASS and when there is no CUDA device (SKIPPED), 1 on
 * FAIL.  Written in the plain C style of gpu_check.cu.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "agent_impl.h" /* the agent's driver table: wrapped by the upload leg */
#include "toggle.h"

#define GPU_TAG "gpu-guard"
#include "gpu_common.h"

#define N_TYPES     2
#define N_LAYERS    4
#define N_HOOKS     (N_TYPES * N_LAYERS)
#define REUSE_TRIES 64

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out"};

/* ---- kernels ------------------------------------------------------------------ */

__global__ void produce(unsigned *counts, int hook)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		atomicAdd(&counts[hook], 1u);
}

__global__ void other(unsigned *runs)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		atomicAdd(runs, 1u);
}

/* ---- shared state --------------------------------------------------------------- */

struct env {
	cudaStream_t s;
	unsigned *d_counts; /* N_HOOKS run counters, then one for `other` */
	CUfunction produce_fn;
	struct toggle_catalog cat;
	char why[512]; /* the first failure of the current leg */
};

#include "gpu_legs.h"

static void counts_reset(struct env *e)
{
	CUDA_CHECK(cudaMemset(e->d_counts, 0, (N_HOOKS + 1) * sizeof(unsigned)));
	CUDA_CHECK(cudaDeviceSynchronize());
}

/* Bit h set when producer h ran exactly once since the reset; *bad: ran more than once. */
static unsigned counts_read(struct env *e, unsigned *other_runs, bool *bad)
{
	unsigned c[N_HOOKS + 1], bits = 0;

	CUDA_CHECK(cudaStreamSynchronize(e->s));
	CUDA_CHECK(cudaMemcpy(c, e->d_counts, sizeof c, cudaMemcpyDeviceToHost));
	*bad = false;
	for (int h = 0; h < N_HOOKS; h++) {
		bits |= c[h] ? 1u << h : 0;
		*bad |= c[h] > 1;
	}
	if (other_runs)
		*other_runs = c[N_HOOKS];
	return bits;
}

/* Launch through the agent, then compare what ran with `want` (launch code `rc_want`). */
static void launch_expect(struct env *e, struct toggle_agent *a, const char *what, cudaGraph_t g,
			  cudaGraphExec_t x, int rc_want, unsigned want)
{
	unsigned got, other_runs;
	bool bad;
	int rc;

	counts_reset(e);
	rc = toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)x, (CUstream)e->s);
	got = counts_read(e, &other_runs, &bad);
	if (rc != rc_want)
		fail_leg(e, "%s: toggle_graph_launch returned %d (%s), expected %d: %s", what, rc,
			 toggle_strerror(rc), rc_want, toggle_last_error(a));
	else if (got != want || bad)
		fail_leg(e, "%s: producers that ran 0x%02x, expected 0x%02x%s", what, got, want,
			 bad ? " (one ran twice)" : "");
}

static void step(struct toggle_agent *a, int64_t s, unsigned bits)
{
	struct toggle_set set = set_of(bits), gate;

	TG_CHECK(a, toggle_set_enabled(a, &set));
	TG_CHECK(a, toggle_step_begin(a, s, &gate));
	if (!toggle_set_equal(&gate, &set))
		die("step %lld: the gate reports another set", (long long)s);
}

/* One producer of hook h, launched and (if record) recorded. */
static int host_producer(struct env *e, struct toggle_agent *a, int h, bool record)
{
	produce<<<1, 32, 0, e->s>>>(e->d_counts, h);
	CUDA_LAUNCHED();
	return record ? toggle_record_producer(a, (CUstream)e->s, hook_of(h)) : TOGGLE_OK;
}

/* A lazy-mode graph: every producer recorded inside a window. */
static cudaGraph_t capture_host(struct env *e, struct toggle_agent *a)
{
	cudaGraph_t g;

	TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
	for (int h = 0; h < N_HOOKS; h++)
		TG_CHECK(a, host_producer(e, a, h, true));
	CUDA_CHECK(cudaStreamEndCapture(e->s, &g));
	TG_CHECK(a, toggle_capture_end(a));
	return g;
}

/* ---- upload: a failed cuGraphUpload must not leave the graph marked current ------ */

static CUresult (*real_upload)(CUgraphExec, CUstream);
static int uploads_to_fail;
static unsigned long long uploads_failed, uploads_passed;

static CUresult wrapped_upload(CUgraphExec x, CUstream s)
{
	if (uploads_to_fail > 0) {
		uploads_to_fail--;
		uploads_failed++;
		return CUDA_ERROR_LAUNCH_FAILED; /* and nothing was uploaded */
	}
	uploads_passed++;
	return real_upload(x, s);
}

static bool leg_upload(struct env *e)
{
	struct toggle_agent *a = agent_open(e, "gpu_guard_upload", TOGGLE_MODE_DEVICE);
	struct toggle_graph_status gs;
	struct toggle_stats st0, st1;
	cudaGraph_t g;
	cudaGraphExec_t x;
	const unsigned s1 = 0x0f, s2 = 0xf0;
	char fig[256];

	e->why[0] = '\0';
	real_upload = a->cu.graph_upload;
	a->cu.graph_upload = wrapped_upload;

	TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
	for (int h = 0; h < N_HOOKS; h++) { /* no planner: the graph runs on the host fallback */
		CUlaunchConfig lc;
		int hk = h;
		void *params[2] = {&e->d_counts, &hk};

		memset(&lc, 0, sizeof lc);
		lc.gridDimX = lc.gridDimY = lc.gridDimZ = 1;
		lc.blockDimX = 32;
		lc.blockDimY = lc.blockDimZ = 1;
		lc.hStream = (CUstream)e->s;
		TG_CHECK(a, toggle_launch_producer(a, &lc, e->produce_fn, params, hook_of(h)));
	}
	CUDA_CHECK(cudaStreamEndCapture(e->s, &g));
	TG_CHECK(a, toggle_capture_end(a));
	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)g, (CUgraphExec *)&x));
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	if (!gs.device_fallback)
		fail_leg(e, "the graph without planner does not run on the host fallback (mode %d)",
			 (int)gs.mode);

	step(a, 0, s1);
	launch_expect(e, a, "step 0", g, x, TOGGLE_OK, s1);
	step(a, 1, s2);
	toggle_stats_get(a, &st0);
	uploads_to_fail = 1;
	launch_expect(e, a, "step 1, upload fails", g, x, TOGGLE_ECUDA, 0);
	if (uploads_failed != 1)
		fail_leg(e, "the wrapped cuGraphUpload was called %llu times failing, expected 1",
			 uploads_failed);
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	if (gs.applied_version != 0)
		fail_leg(e, "after the failed upload the graph holds version %" PRIu64 ", expected 0",
			 gs.applied_version);
	launch_expect(e, a, "step 1, retry", g, x, TOGGLE_OK, s2);
	launch_expect(e, a, "step 1, again", g, x, TOGGLE_OK, s2);
	toggle_stats_get(a, &st1);
	if (st1.uploads != st0.uploads + 1)
		fail_leg(e, "uploads %" PRIu64 " -> %" PRIu64 ", expected one more", st0.uploads,
			 st1.uploads);
	snprintf(fig, sizeof fig,
		 "(fallback graph of %d device-updatable producers; upload failed %llu, passed %llu; "
		 "refused launch ran 0x00; retry ran 0x%02x = the step's set, not 0x%02x)",
		 N_HOOKS, uploads_failed, uploads_passed, s2, s1);
	leg_report(e, "upload", fig);

	CUDA_CHECK(cudaStreamSynchronize(e->s));
	TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g, NULL));
	toggle_agent_close(a);
	CUDA_CHECK(cudaGraphExecDestroy(x));
	CUDA_CHECK(cudaGraphDestroy(g));
	return e->why[0] == '\0';
}

/* ---- late: producers that could not be recorded make their graph fail closed ------ */

static bool leg_late(struct env *e)
{
	struct toggle_agent *a = agent_open(e, "gpu_guard_late", TOGGLE_MODE_LAZY);
	struct toggle_graph_status gs;
	cudaGraph_t g1, g2, g3;
	cudaGraphExec_t x1, x2, x3;
	const unsigned all = (1u << N_HOOKS) - 1;
	char fig[256];
	int r;

	e->why[0] = '\0';
	/* g1: hook 0 recorded, then the window closes and hook 1 is launched anyway. */
	TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
	TG_CHECK(a, host_producer(e, a, 0, true));
	TG_CHECK(a, toggle_capture_end(a));
	r = host_producer(e, a, 1, true);
	if (r != TOGGLE_ECAPTURE)
		fail_leg(e, "g1: recording outside the window returned %d, expected TOGGLE_ECAPTURE", r);
	CUDA_CHECK(cudaStreamEndCapture(e->s, &g1));
	/* g2: no window at all, one producer: it used to pass as unrelated. */
	CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
	r = host_producer(e, a, 2, true);
	if (r != TOGGLE_ECAPTURE)
		fail_leg(e, "g2: recording outside the window returned %d, expected TOGGLE_ECAPTURE", r);
	CUDA_CHECK(cudaStreamEndCapture(e->s, &g2));
	CUDA_CHECK(cudaGraphInstantiate(&x1, g1, 0));
	CUDA_CHECK(cudaGraphInstantiate(&x2, g2, 0));

	r = toggle_graph_bind(a, (CUgraph)g1, (CUgraphExec)x1);
	if (r != TOGGLE_ECAPTURE)
		fail_leg(e, "g1: bind returned %d, expected TOGGLE_ECAPTURE", r);
	if (toggle_graph_status(a, (CUgraph)g2, &gs) != TOGGLE_OK || !strstr(gs.note, "not recorded"))
		fail_leg(e, "g2: no status note saying its producer was not recorded");
	step(a, 0, 0x1); /* excludes hooks 1 and 2 */
	launch_expect(e, a, "g1 step 0", g1, x1, TOGGLE_ECAPTURE, 0);
	launch_expect(e, a, "g2 step 0", g2, x2, TOGGLE_ECAPTURE, 0);
	step(a, 1, all);
	launch_expect(e, a, "g1 step 1", g1, x1, TOGGLE_ECAPTURE, 0);
	launch_expect(e, a, "g2 step 1", g2, x2, TOGGLE_ECAPTURE, 0);

	/* Captured again properly: it runs exactly its set. */
	g3 = capture_host(e, a);
	CUDA_CHECK(cudaGraphInstantiate(&x3, g3, 0));
	TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g3, (CUgraphExec)x3));
	step(a, 2, 0x1);
	launch_expect(e, a, "proper capture step 2", g3, x3, TOGGLE_OK, 0x1);
	snprintf(fig, sizeof fig,
		 "(late producer beside a recorded one and alone: bind and 4 launches refused, ran "
		 "0x00; proper capture ran 0x01)");
	leg_report(e, "late", fig);

	CUDA_CHECK(cudaStreamSynchronize(e->s));
	TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g3, NULL));
	toggle_agent_close(a);
	CUDA_CHECK(cudaGraphExecDestroy(x1));
	CUDA_CHECK(cudaGraphExecDestroy(x2));
	CUDA_CHECK(cudaGraphExecDestroy(x3));
	CUDA_CHECK(cudaGraphDestroy(g1));
	CUDA_CHECK(cudaGraphDestroy(g2));
	CUDA_CHECK(cudaGraphDestroy(g3));
	return e->why[0] == '\0';
}

/* ---- reuse: a new graph behind a dead one's handle is not blocked ------------------ */

/* One round: forget (unbind false) or unbind the graph, destroy it, look for the reuse. */
static void reuse_round(struct env *e, struct toggle_agent *a, bool unbind, char *out, size_t len)
{
	cudaGraph_t g, spare[REUSE_TRIES];
	cudaGraphExec_t x, ux;
	int n = 0, rc_want = unbind ? TOGGLE_EUNBOUND : TOGGLE_ESTALE;
	const char *name = unbind ? "unbound" : "forgotten";
	char what[96];
	bool found = false;

	g = capture_host(e, a);
	CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
	TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g, (CUgraphExec)x));
	snprintf(what, sizeof what, "%s round, bound", name);
	launch_expect(e, a, what, g, x, TOGGLE_OK, 0x3);
	if (unbind)
		TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g, NULL));
	else
		TG_CHECK(a, toggle_graph_forget(a, (CUgraph)g));
	/* Alive: the identity check must not take it for another graph. */
	snprintf(what, sizeof what, "%s graph, still alive", name);
	launch_expect(e, a, what, g, x, rc_want, 0);
	CUDA_CHECK(cudaGraphExecDestroy(x));
	CUDA_CHECK(cudaGraphDestroy(g));

	for (n = 0; n < REUSE_TRIES && !found; n++) {
		cudaGraph_t u;

		CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
		other<<<1, 32, 0, e->s>>>(e->d_counts + N_HOOKS);
		CUDA_LAUNCHED();
		CUDA_CHECK(cudaStreamEndCapture(e->s, &u));
		if (u != g) {
			spare[n] = u; /* kept alive, so the next capture gets another address */
			continue;
		}
		found = true;
		spare[n] = u;
		CUDA_CHECK(cudaGraphInstantiate(&ux, u, 0));
		{
			unsigned got, other_runs = 0;
			bool bad;
			int rc;

			counts_reset(e);
			rc = toggle_graph_launch(a, (CUgraph)u, (CUgraphExec)ux, (CUstream)e->s);
			got = counts_read(e, &other_runs, &bad);
			if (rc != TOGGLE_OK)
				fail_leg(e, "%s round: the new graph behind the reused handle was refused: "
					 "%d (%s): %s", name, rc, toggle_strerror(rc),
					 toggle_last_error(a));
			else if (other_runs != 1 || got != 0)
				fail_leg(e, "%s round: the new graph ran its kernel %u times, producers 0x%02x",
					 name, other_runs, got);
		}
		CUDA_CHECK(cudaStreamSynchronize(e->s));
		CUDA_CHECK(cudaGraphExecDestroy(ux));
	}
	for (int i = 0; i < n; i++)
		CUDA_CHECK(cudaGraphDestroy(spare[i]));
	if (found)
		snprintf(out, len, "%s: handle reused after %d capture(s), launched untouched", name, n);
	else
		snprintf(out, len, "%s: not exercised (no reused handle in %d captures)", name, n);
}

static bool leg_reuse(struct env *e)
{
	struct toggle_agent *a = agent_open(e, "gpu_guard_reuse", TOGGLE_MODE_LAZY);
	char r1[128], r2[128], fig[512];
	const char *how;

	e->why[0] = '\0';
	if (a->cu.graph_get_id)
		how = "cuGraphGetId";
	else if (a->cu.graph_get_nodes)
		how = "recorded nodes via cuGraphGetNodes (no cuGraphGetId before CUDA 13.1)";
	else
		how = NULL;
	if (!how)
		fail_leg(e, "the driver table has neither cuGraphGetId nor cuGraphGetNodes");
	step(a, 0, 0x3);
	reuse_round(e, a, false, r1, sizeof r1);
	reuse_round(e, a, true, r2, sizeof r2);
	snprintf(fig, sizeof fig, "(identity by %s, exec identity %s; %s; %s)", how ? how : "-",
		 a->cu.graph_exec_get_id ? "by cuGraphExecGetId" : "not available (CUDA 13.1+)", r1,
		 r2);
	leg_report(e, "reuse", fig);
	toggle_agent_close(a);
	return e->why[0] == '\0';
}

/* ---- main ------------------------------------------------------------------------ */

int main(void)
{
	struct env e;
	char err[256];
	int drv = 0, failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	gpu_device_or_skip();
	CUDA_CHECK(cudaFree(0)); /* the context is current: device mode loads its planner */
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	printf("gpu-guard: driver %d.%d\n", drv / 1000, drv % 1000 / 10);

	memset(&e, 0, sizeof e);
	e.cat.type_names = type_names;
	e.cat.n_types = N_TYPES;
	e.cat.n_layers = N_LAYERS;
	if (toggle_catalog_validate(&e.cat, err, sizeof err) != TOGGLE_OK)
		die("catalog: %s", err);
	CUDA_CHECK(cudaStreamCreateWithFlags(&e.s, cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&e.d_counts, (N_HOOKS + 1) * sizeof(unsigned)));
	{
		cudaFunction_t fn;

		CUDA_CHECK(cudaGetFuncBySymbol(&fn, (const void *)produce));
		e.produce_fn = (CUfunction)fn;
	}

	failed += !leg_upload(&e);
	failed += !leg_late(&e);
	failed += !leg_reuse(&e);

	CUDA_CHECK(cudaFree(e.d_counts));
	CUDA_CHECK(cudaStreamDestroy(e.s));
	if (failed) {
		printf("gpu-guard: FAIL (%d of 3 legs)\n", failed);
		return 1;
	}
	printf("gpu-guard: PASS\n");
	return 0;
}
