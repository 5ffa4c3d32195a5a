/*
 * gpu_devtaint.cu - the GPU leg of device mode's tainted launches (issue 18),
 * run by scripts/gpu-check.sh after examples/gpu_check.cu.
 *
 * A launch cannot be cancelled from the device: when the planner's
 * device-side cudaGraphKernelNodeSetEnabled fails, that launch runs with the
 * producer in its old state.  libtoggle must say so (the tainted step), a
 * strict agent must refuse the exec until it is clean again, and every other
 * launch must run exactly the set of its step.
 *
 * The injected failure: the one the driver itself produces (measured on an
 * H200, CUDA 13.0, docs/libtoggle.md): device-side calls in the first launch
 * of an exec that was not uploaded before it fail (about a third of them).
 * libtoggle always uploads at bind, so this program reaches into the agent
 * (white-box, like tests/check_device_bind.c) and marks a freshly instantiated
 * exec as uploaded before binding it.  No handle is forged: the driver
 * returns the error, nothing faults.
 *
 * What it checks, with real capture, a real planner and a device ring in
 * which every producer logs {hook, launch} (a kernel in the graph counts the
 * launches, which the driver serialises):
 *  1. The injected launch (first step, empty set, so every call is a
 *     "disable") failed F > 0 calls (planner counters), and its ring holds at
 *     least F producers that should not have run (the failed disables).
 *  2. At the next toggle_step_begin() libtoggle reports it, without any
 *     synchronisation of its own: toggle_taint_get() (1 launch, step 0, F
 *     calls failed, this graph), toggle_graph_status() (tainted, blocked,
 *     tainted_step 0), anomalies.device_tainted == 1.
 *  3. Strict: the next launch of that exec is refused (TOGGLE_ECUDA) and
 *     runs nothing.
 *  4. After toggle_graph_bind() (the re-arm), STEPS pipelined steps with a
 *     random set each: every launch's ring content equals its step's set
 *     (0 mismatches, 0 stray records), no further failure, no further taint,
 *     and the graph is reported clean.
 * If the driver happens to fail no call in the injected launch, a fresh exec
 * is tried, up to MAX_ATTEMPTS times (those launches are checked as clean).
 *
 * Output: one "gpu-devtaint: figures ..." line and "gpu-devtaint: PASS", or
 * "gpu-devtaint: FAIL (why)" and exit 1; "gpu-devtaint: SKIPPED" and exit 0
 * without a CUDA device.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "toggle.h"
extern "C" {
#include "agent_impl.h" /* white-box: skip the upload of one exec */
}

#define N_TYPES      3
#define N_LAYERS     32
#define N_HOOKS      (N_TYPES * N_LAYERS)
#define HW           ((N_HOOKS + 31) / 32) /* 32-bit words of a hook bitmap */
#define STEPS        2000
#define MAX_ATTEMPTS 5
#define MAX_LAUNCHES (STEPS + MAX_ATTEMPTS + 8)
#define RING_CAP     (1u << 18)
#define CHUNK        1024
#define THREADS      256

#define GPU_TAG "gpu-devtaint"
#include "gpu_common.h"
#include "gpu_chain.h"
#include "gpu_sets.h"

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out", "mlp_out"};

/* What each launch that ran was made with. */
static uint32_t want[MAX_LAUNCHES][HW], seen[MAX_LAUNCHES][HW];
static long long step_of[MAX_LAUNCHES];
static int n_launches;

struct ctx {
	struct toggle_agent *agent;
	cudaStream_t stream;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	long long step;
	uint64_t rng;
};

/* Begin the next step with set bits (a bitmap of N_HOOKS). */
static void begin_step(struct ctx *c, const uint32_t *bits)
{
	struct toggle_set set;

	toggle_set_clear(&set);
	for (int h = 0; h < N_HOOKS; h++)
		if (bits[h / 32] >> (h % 32) & 1u)
			TG_CHECK(c->agent, toggle_set_add(&set, hook_of(h)));
	TG_CHECK(c->agent, toggle_set_enabled(c->agent, &set));
	TG_CHECK(c->agent, toggle_step_begin(c->agent, ++c->step, NULL));
}

/* Launch through the agent; on success note what that launch must run. */
static int launch(struct ctx *c, const uint32_t *bits)
{
	int r = toggle_graph_launch(c->agent, (CUgraph)c->graph, (CUgraphExec)c->exec,
				    (CUstream)c->stream);

	if (r == TOGGLE_OK) {
		if (n_launches >= MAX_LAUNCHES)
			die("more launches than planned");
		memcpy(want[n_launches], bits, sizeof want[0]);
		step_of[n_launches] = c->step;
		n_launches++;
	}
	return r;
}

/* A fresh exec, bound without its upload: the injection. */
static void bind_not_uploaded(struct ctx *c)
{
	struct tg_graph *g;

	CUDA_CHECK(cudaGraphInstantiate(&c->exec, c->graph, 0));
	g = tg_graph_find(c->agent, (CUgraph)c->graph);
	if (!g)
		die("the agent has no record of its graph");
	g->uploaded_exec = (CUgraphExec)c->exec; /* libtoggle believes it uploaded it */
	TG_CHECK(c->agent, toggle_graph_bind(c->agent, (CUgraph)c->graph, (CUgraphExec)c->exec));
}

static void device_header(void)
{
	struct cudaDeviceProp prop;
	int drv = 0;

	gpu_device_or_skip();
	CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	printf("gpu-devtaint: device 0: %s (sm_%d%d), driver %d.%d\n", prop.name, prop.major,
	       prop.minor, drv / 1000, drv % 1000 / 10);
	CUDA_CHECK(cudaFree(0)); /* a current context before the agent opens */
}

int main(void)
{
	struct ctx c;
	struct toggle_config cfg;
	struct toggle_taint t;
	struct toggle_graph_status gs;
	struct toggle_anomalies an;
	struct toggle_stats st;
	struct toggle_device_counters dc;
	struct ring_rec *d_ring, *h_ring;
	unsigned long long *d_count, count = 0;
	unsigned int *d_overflow, overflow = 0;
	long long *d_launch, minus1 = -1;
	float *d_x, *d_out;
	uint32_t none[HW], bits[HW];
	uint64_t failures = 0, extra_in_tainted = 0, mismatches = 0, stray = 0, refused = 0;
	int attempts = 0, tainted_launch = -1;
	char why[512];
	size_t wl = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	device_header();
	memset(&c, 0, sizeof c);
	c.step = -1;
	c.rng = 0xd7a1;
	memset(none, 0, sizeof none);

	CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&d_ring, (size_t)RING_CAP * sizeof(struct ring_rec)));
	CUDA_CHECK(cudaMalloc(&d_count, sizeof *d_count));
	CUDA_CHECK(cudaMemset(d_count, 0, sizeof *d_count));
	CUDA_CHECK(cudaMalloc(&d_overflow, sizeof *d_overflow));
	CUDA_CHECK(cudaMemset(d_overflow, 0, sizeof *d_overflow));
	CUDA_CHECK(cudaMalloc(&d_launch, sizeof *d_launch));
	CUDA_CHECK(cudaMemcpy(d_launch, &minus1, sizeof minus1, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaMalloc(&d_x, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMemset(d_x, 0, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&d_out, (size_t)N_HOOKS * CHUNK * sizeof(float)));
	h_ring = (struct ring_rec *)malloc((size_t)RING_CAP * sizeof(struct ring_rec));
	if (!h_ring)
		die("out of host memory");
	CUDA_CHECK(cudaDeviceSynchronize());

	memset(&cfg, 0, sizeof cfg);
	cfg.name = "gpu_devtaint";
	cfg.catalog.type_names = type_names;
	cfg.catalog.n_types = N_TYPES;
	cfg.catalog.n_layers = N_LAYERS;
	cfg.mode = TOGGLE_MODE_DEVICE;
	cfg.strict = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	/* The injection needs the device exec's first launch on the empty set:
	 * with a producer-free exec that step would run it (gpu_devbare's leg). */
	cfg.no_bare_exec = true;
	{
		int r = toggle_agent_open(&cfg, &c.agent);

		if (r != TOGGLE_OK)
			die("toggle_agent_open (strict device mode): %s", toggle_strerror(r));
	}

	/* The graph: planner, launch counter, one producer per hook. */
	{
		cudaFunction_t fn;
		CUfunction produce_fn;

		CUDA_CHECK(cudaGetFuncBySymbol(&fn, (const void *)chain_produce));
		produce_fn = (CUfunction)fn;
		TG_CHECK(c.agent, toggle_capture_begin(c.agent));
		CUDA_CHECK(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal));
		TG_CHECK(c.agent, toggle_capture_planner(c.agent, (CUstream)c.stream));
		chain_mark<<<1, 1, 0, c.stream>>>(d_launch);
		CUDA_LAUNCHED();
		for (int h = 0; h < N_HOOKS; h++) {
			CUlaunchConfig lc;
			float *out = d_out + (size_t)h * CHUNK;
			void *params[7] = {&d_x, &out, &d_launch, &d_ring, &d_count, &d_overflow, &h};

			memset(&lc, 0, sizeof lc);
			lc.gridDimX = CHUNK / THREADS;
			lc.gridDimY = lc.gridDimZ = 1;
			lc.blockDimX = THREADS;
			lc.blockDimY = lc.blockDimZ = 1;
			lc.hStream = (CUstream)c.stream;
			TG_CHECK(c.agent, toggle_launch_producer(c.agent, &lc, produce_fn, params,
								 hook_of(h)));
		}
		CUDA_CHECK(cudaStreamEndCapture(c.stream, &c.graph));
		TG_CHECK(c.agent, toggle_capture_end(c.agent));
	}

	/* 1. The injection: step with the empty set, first launch of an exec not uploaded. */
	for (attempts = 1; attempts <= MAX_ATTEMPTS; attempts++) {
		bind_not_uploaded(&c);
		toggle_stats_get(c.agent, &st);
		if (st.uploads != 0)
			die("the exec was uploaded: the injection did not take");
		begin_step(&c, none);
		TG_CHECK(c.agent, launch(&c, none));
		CUDA_CHECK(cudaStreamSynchronize(c.stream));
		TG_CHECK(c.agent, toggle_graph_device_counters(c.agent, (CUgraph)c.graph, &dc));
		if (dc.device_failures > 0) {
			failures = dc.device_failures;
			tainted_launch = n_launches - 1;
			break;
		}
		/* The driver failed nothing this time: another fresh exec. */
		TG_CHECK(c.agent, toggle_graph_bind(c.agent, (CUgraph)c.graph, NULL));
		CUDA_CHECK(cudaGraphExecDestroy(c.exec));
	}
	if (tainted_launch < 0)
		die("no device-side call failed in the first launch of %d execs that were not "
		    "uploaded: the failure could not be injected", MAX_ATTEMPTS);

	/* 2. Reported at the next step_begin, without a wait of libtoggle's own. */
	toggle_taint_get(c.agent, &t);
	if (t.launches != 0)
		wl += (size_t)snprintf(why + wl, sizeof why - wl, "%sreported before the step began",
				       wl ? "; " : "");
	begin_step(&c, none);
	toggle_taint_get(c.agent, &t);
	TG_CHECK(c.agent, toggle_graph_status(c.agent, (CUgraph)c.graph, &gs));
	toggle_anomalies_get(c.agent, &an);
	if (t.launches != 1 || t.lost != 0 || t.last_step != step_of[tainted_launch] ||
	    t.calls_failed != failures || t.last_graph != (CUgraph)c.graph)
		wl += (size_t)snprintf(why + wl, sizeof why - wl,
				       "%staint: launches=%" PRIu64 " lost=%" PRIu64 " step=%lld (want "
				       "%lld) calls_failed=%" PRIu64 " (want %" PRIu64 ")",
				       wl ? "; " : "", t.launches, t.lost, (long long)t.last_step,
				       step_of[tainted_launch], t.calls_failed, failures);
	if (!gs.tainted || !gs.blocked || gs.tainted_launches != 1 ||
	    gs.tainted_step != step_of[tainted_launch] || an.device_tainted != 1)
		wl += (size_t)snprintf(why + wl, sizeof why - wl,
				       "%sgraph status: tainted=%d blocked=%d launches=%" PRIu64
				       " step=%lld device_tainted=%" PRIu64,
				       wl ? "; " : "", gs.tainted, gs.blocked, gs.tainted_launches,
				       (long long)gs.tainted_step, an.device_tainted);

	/* 3. Strict: refused until clean; nothing runs. */
	{
		int r = launch(&c, none);

		if (r == TOGGLE_ECUDA)
			refused++;
		else
			wl += (size_t)snprintf(why + wl, sizeof why - wl,
					       "%sthe tainted exec was launched again (%d: %s)",
					       wl ? "; " : "", r, toggle_strerror(r));
	}

	/* 4. Re-armed by a bind, then pipelined steps that must all be exact. */
	TG_CHECK(c.agent, toggle_graph_bind(c.agent, (CUgraph)c.graph, (CUgraphExec)c.exec));
	for (int s = 0; s < STEPS; s++) {
		for (int w = 0; w < HW; w++)
			bits[w] = (uint32_t)gpu_rng_next(&c.rng);
		bits[HW - 1] &= N_HOOKS % 32 ? (1u << (N_HOOKS % 32)) - 1 : ~0u;
		begin_step(&c, bits);
		TG_CHECK(c.agent, launch(&c, bits));
	}
	CUDA_CHECK(cudaStreamSynchronize(c.stream));
	begin_step(&c, none); /* reads the reports of everything that ran */
	toggle_taint_get(c.agent, &t);
	TG_CHECK(c.agent, toggle_graph_status(c.agent, (CUgraph)c.graph, &gs));
	TG_CHECK(c.agent, toggle_graph_device_counters(c.agent, (CUgraph)c.graph, &dc));
	toggle_stats_get(c.agent, &st);
	if (t.launches != 1 || gs.tainted || gs.blocked || dc.device_failures != failures)
		wl += (size_t)snprintf(why + wl, sizeof why - wl,
				       "%safter the re-arm: taint launches=%" PRIu64 " tainted=%d "
				       "blocked=%d device_failures=%" PRIu64 " (want %" PRIu64 ")",
				       wl ? "; " : "", t.launches, gs.tainted, gs.blocked,
				       dc.device_failures, failures);

	/* The ring: what ran in each launch. */
	CUDA_CHECK(cudaMemcpy(&count, d_count, sizeof count, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(&overflow, d_overflow, sizeof overflow, cudaMemcpyDeviceToHost));
	if (overflow || count > RING_CAP)
		die("ring overflow (%llu records)", count);
	CUDA_CHECK(cudaMemcpy(h_ring, d_ring, count * sizeof(struct ring_rec),
			      cudaMemcpyDeviceToHost));
	for (unsigned long long i = 0; i < count; i++) {
		const struct ring_rec *rr = &h_ring[i];

		if (rr->launch < 0 || rr->launch >= n_launches || rr->hook < 0 || rr->hook >= N_HOOKS) {
			stray++;
			continue;
		}
		if (seen[rr->launch][rr->hook / 32] >> (rr->hook % 32) & 1u)
			mismatches++; /* twice */
		seen[rr->launch][rr->hook / 32] |= 1u << (rr->hook % 32);
	}
	for (int k = 0; k < n_launches; k++) {
		uint64_t d = 0;

		for (int w = 0; w < HW; w++)
			d += (uint64_t)__builtin_popcount(want[k][w] ^ seen[k][w]);
		if (k == tainted_launch)
			extra_in_tainted = d; /* the failed disables: producers that ran */
		else
			mismatches += d;
	}
	/* Each failed disable left a producer running; the driver may also drop the
	 * calls that succeeded in a launch that uploads too late (then more ran). */
	if (extra_in_tainted < failures || extra_in_tainted == 0)
		wl += (size_t)snprintf(why + wl, sizeof why - wl,
				       "%sthe tainted launch ran %" PRIu64 " producers outside its set; "
				       "%" PRIu64 " disables failed",
				       wl ? "; " : "", extra_in_tainted, failures);
	if (mismatches || stray)
		wl += (size_t)snprintf(why + wl, sizeof why - wl,
				       "%s%" PRIu64 " mismatches and %" PRIu64 " stray records in the "
				       "other launches", wl ? "; " : "", mismatches, stray);

	printf("gpu-devtaint: figures attempts=%d injected_launch_step=%lld calls_failed=%" PRIu64
	       " tainted_reported=%" PRIu64 " tainted_step=%lld extra_producers_in_tainted_launch=%"
	       PRIu64 " refused=%" PRIu64 " launches=%d clean_steps=%d records=%llu mismatches=%"
	       PRIu64 " stray=%" PRIu64 " planner_runs=%" PRIu64 " device_calls=%" PRIu64
	       " uploads=%" PRIu64 "\n",
	       attempts, step_of[tainted_launch], failures, t.launches, (long long)t.last_step,
	       extra_in_tainted, refused, n_launches, STEPS, count, mismatches, stray,
	       dc.planner_runs, dc.device_calls, st.uploads);

	toggle_agent_close(c.agent);
	CUDA_CHECK(cudaGraphExecDestroy(c.exec));
	CUDA_CHECK(cudaGraphDestroy(c.graph));
	CUDA_CHECK(cudaFree(d_ring));
	CUDA_CHECK(cudaFree(d_count));
	CUDA_CHECK(cudaFree(d_overflow));
	CUDA_CHECK(cudaFree(d_launch));
	CUDA_CHECK(cudaFree(d_x));
	CUDA_CHECK(cudaFree(d_out));
	CUDA_CHECK(cudaStreamDestroy(c.stream));
	free(h_ring);
	if (wl) {
		printf("gpu-devtaint: FAIL (%s)\n", why);
		return 1;
	}
	printf("gpu-devtaint: PASS\n");
	return 0;
}
