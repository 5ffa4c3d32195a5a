/*
 * gpu_devbare.cu - the GPU leg of device mode's producer-free exec (issue
 * 31), run by scripts/gpu-check.sh.
 *
 * The driver refuses cuGraphClone of a graph with a device-updatable node,
 * so libtoggle assembles device mode's bare exec node by node (bare.c): every
 * node that is neither a producer nor the planner, copied with its
 * parameters, and the edges with the removed nodes bypassed.  This leg checks
 * it on the real driver, ground truth from device buffers:
 *  1. The build: the graph runs in device mode and has a bare exec.
 *  2. All-off steps (the first launches after the bind): no producer ran (the
 *     monitor buffers, filled with a sentinel, are untouched; the producers'
 *     ring is empty), every compute kernel ran once per launch (its counter),
 *     the planner did not run (its counters).
 *  3. Mixed steps: STEPS pipelined steps with a random set each (a third of
 *     them empty, some with one hook), launches alternating between two
 *     streams: every launch ran exactly its step's producers (the ring holds
 *     {hook, launch}; a mark kernel at the head, copied into the bare exec
 *     too, numbers the launches), every compute kernel once per launch.
 *  4. Figures: GPU time per replay (CUDA events, medians of R repetitions of
 *     N back-to-back replays, interleaved): the floor (the same kernels
 *     captured without producers and planner, plain cudaGraphLaunch), bare
 *     replays (all off, this exec), device all off without a bare exec
 *     (toggle_graph_set_bare(false) on a second graph of the same shape:
 *     the planner and disabled device-updatable producers), device all on
 *     (device mode's full exec since it exists: gpu_devfull checks it and
 *     compares it with the device exec and lazy mode).
 *
 * Output: "gpu-devbare: figures ..." and "gpu-devbare: PASS", or
 * "gpu-devbare: FAIL (why)" and exit 1; "gpu-devbare: SKIPPED" and exit 0
 * without a CUDA device.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "toggle.h"

#define N_TYPES      1
#define N_LAYERS     32
#define N_HOOKS      (N_TYPES * N_LAYERS)
#define N_COMPUTE    (N_LAYERS + 1)
#define STEPS        2000
#define WARM         64   /* all-off launches of part 2 */
#define MAX_LAUNCHES (STEPS + WARM + 8)
#define RING_CAP     (1u << 18)
#define CHUNK        1024
#define THREADS      256
#define R            7
#define N            200

#define GPU_TAG "gpu-devbare"
#include "gpu_common.h"
#include "gpu_chain.h"
#include "gpu_sets.h"

static const char *const type_names[N_TYPES] = {"resid_post"};

/* Capture: [planner], mark, per layer a compute and [a producer], a last compute. */
static cudaGraph_t capture(struct toggle_agent *a, struct dev *d, cudaStream_t s, bool producers)
{
	cudaFunction_t fn;
	cudaGraph_t g;

	CUDA_CHECK(cudaGetFuncBySymbol(&fn, (const void *)chain_produce));
	if (producers)
		TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	if (producers)
		TG_CHECK(a, toggle_capture_planner(a, (CUstream)s));
	chain_mark<<<1, 1, 0, s>>>(d->launch);
	CUDA_LAUNCHED();
	for (int l = 0; l < N_LAYERS; l++) {
		chain_compute<<<CHUNK / THREADS, THREADS, 0, s>>>(d->x, d->computes, l);
		CUDA_LAUNCHED();
		if (!producers)
			continue;
		CUlaunchConfig lc;
		int h = l;
		float *out = d->out + (size_t)h * CHUNK;
		void *params[7] = {&d->x, &out, &d->launch, &d->ring, &d->count, &d->overflow, &h};

		memset(&lc, 0, sizeof lc);
		lc.gridDimX = CHUNK / THREADS;
		lc.gridDimY = lc.gridDimZ = 1;
		lc.blockDimX = THREADS;
		lc.blockDimY = lc.blockDimZ = 1;
		lc.hStream = (CUstream)s;
		TG_CHECK(a, toggle_launch_producer(a, &lc, (CUfunction)fn, params, hook_of(h)));
	}
	chain_compute<<<CHUNK / THREADS, THREADS, 0, s>>>(d->x, d->computes, N_LAYERS);
	CUDA_LAUNCHED();
	CUDA_CHECK(cudaStreamEndCapture(s, &g));
	if (producers)
		TG_CHECK(a, toggle_capture_end(a));
	return g;
}

static long long step_no = -1;

static void begin(struct toggle_agent *a, uint32_t bits)
{
	struct toggle_set s = set_of(bits);

	TG_CHECK(a, toggle_set_enabled(a, &s));
	TG_CHECK(a, toggle_step_begin(a, ++step_no, NULL));
}

/* Median GPU µs per replay of n back-to-back launches (agent NULL: plain cudaGraphLaunch). */
static double time_replays(struct toggle_agent *a, cudaGraph_t g, cudaGraphExec_t e,
			   cudaStream_t s, int n)
{
	cudaEvent_t e0, e1;
	float ms = 0;

	CUDA_CHECK(cudaEventCreate(&e0));
	CUDA_CHECK(cudaEventCreate(&e1));
	for (int i = 0; i < 5; i++) {
		if (a)
			TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s));
		else
			CUDA_CHECK(cudaGraphLaunch(e, s));
	}
	CUDA_CHECK(cudaEventRecord(e0, s));
	for (int i = 0; i < n; i++) {
		if (a)
			TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s));
		else
			CUDA_CHECK(cudaGraphLaunch(e, s));
	}
	CUDA_CHECK(cudaEventRecord(e1, s));
	CUDA_CHECK(cudaEventSynchronize(e1));
	CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
	CUDA_CHECK(cudaEventDestroy(e0));
	CUDA_CHECK(cudaEventDestroy(e1));
	return (double)ms * 1000.0 / n;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), gpu_cmp_double);
	return v[n / 2];
}

static uint32_t want[MAX_LAUNCHES], seen[MAX_LAUNCHES];

int main(void)
{
	struct cudaDeviceProp prop;
	struct toggle_config cfg;
	struct toggle_agent *a;
	struct toggle_graph_status gs;
	struct toggle_device_counters dc;
	struct toggle_stats st;
	struct dev d;
	cudaStream_t s[2];
	cudaGraph_t g, gnb, gf;
	cudaGraphExec_t e, enb, ef;
	unsigned long long computes[N_COMPUTE], count = 0;
	unsigned int overflow = 0;
	long long minus1 = -1;
	uint64_t rng = 0xdeb4e, mismatches = 0, stray = 0, bad_computes = 0, untouched_bad = 0;
	unsigned bare_steps = 0;
	int n_launches = 0, drv = 0;
	char why[512] = "";
	size_t wl = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	gpu_device_or_skip();
	CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	printf(GPU_TAG ": device 0: %s (sm_%d%d), driver %d.%d\n", prop.name, prop.major,
	       prop.minor, drv / 1000, drv % 1000 / 10);
	CUDA_CHECK(cudaFree(0)); /* a current context before the agent opens */
	for (int i = 0; i < 2; i++)
		CUDA_CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&d.x, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMemset(d.x, 0, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&d.out, (size_t)N_HOOKS * CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMemset(d.out, 0xff, (size_t)N_HOOKS * CHUNK * sizeof(float))); /* sentinel */
	CUDA_CHECK(cudaMalloc(&d.launch, sizeof *d.launch));
	CUDA_CHECK(cudaMemcpy(d.launch, &minus1, sizeof minus1, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaMalloc(&d.computes, sizeof computes));
	CUDA_CHECK(cudaMemset(d.computes, 0, sizeof computes));
	CUDA_CHECK(cudaMalloc(&d.ring, (size_t)RING_CAP * sizeof(struct ring_rec)));
	CUDA_CHECK(cudaMalloc(&d.count, sizeof *d.count));
	CUDA_CHECK(cudaMemset(d.count, 0, sizeof *d.count));
	CUDA_CHECK(cudaMalloc(&d.overflow, sizeof *d.overflow));
	CUDA_CHECK(cudaMemset(d.overflow, 0, sizeof *d.overflow));
	CUDA_CHECK(cudaDeviceSynchronize());

	memset(&cfg, 0, sizeof cfg);
	cfg.name = "gpu_devbare";
	cfg.catalog.type_names = type_names;
	cfg.catalog.n_types = N_TYPES;
	cfg.catalog.n_layers = N_LAYERS;
	cfg.mode = TOGGLE_MODE_DEVICE;
	cfg.strict = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	{
		int r = toggle_agent_open(&cfg, &a);

		if (r != TOGGLE_OK)
			die("toggle_agent_open (strict device mode): %s", toggle_strerror(r));
	}
	if (toggle_agent_mode(a) != TOGGLE_MODE_DEVICE)
		die("device mode is not available here: %s", toggle_last_error(a));

	/* 1. The build. */
	g = capture(a, &d, s[0], true);
	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)g, (CUgraphExec *)&e));
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	if (gs.mode != TOGGLE_MODE_DEVICE || !gs.bare_exec)
		die("graph mode %d, bare_exec %d: expected device mode with a bare exec (%s)",
		    (int)gs.mode, gs.bare_exec, toggle_last_error(a));

	/* 2. All-off steps first: the device exec has not run yet. */
	for (int k = 0; k < WARM; k++) {
		begin(a, 0);
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s[k % 2]));
		want[n_launches++] = 0;
	}
	CUDA_CHECK(cudaDeviceSynchronize());
	TG_CHECK(a, toggle_graph_device_counters(a, (CUgraph)g, &dc));
	CUDA_CHECK(cudaMemcpy(&count, d.count, sizeof count, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(computes, d.computes, sizeof computes, cudaMemcpyDeviceToHost));
	{
		size_t bytes = (size_t)N_HOOKS * CHUNK * sizeof(float);
		unsigned char *h = (unsigned char *)malloc(bytes);

		if (!h)
			die("out of host memory");
		CUDA_CHECK(cudaMemcpy(h, d.out, bytes, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < bytes; i++)
			untouched_bad += h[i] != 0xff;
		free(h);
	}
	for (int k = 0; k < N_COMPUTE; k++)
		bad_computes += computes[k] != (unsigned long long)WARM;
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	if (count || untouched_bad || bad_computes || dc.planner_runs || !gs.bare_running ||
	    gs.bare_replays != WARM)
		wl += (size_t)snprintf(why + wl, sizeof why - wl,
				       "%sall off: %llu producer records, %" PRIu64 " monitor bytes "
				       "written, %" PRIu64 " compute kernels not run once per launch, "
				       "%" PRIu64 " planner runs, bare_running %d, bare_replays %" PRIu64,
				       wl ? "; " : "", count, untouched_bad, bad_computes,
				       dc.planner_runs, gs.bare_running, gs.bare_replays);
	printf(GPU_TAG ": all off: %d launches, %llu producer records, %" PRIu64
	       " monitor bytes written, planner runs %" PRIu64 "\n",
	       WARM, count, untouched_bad, dc.planner_runs);

	/* 3. Mixed steps, pipelined, two streams. */
	for (int k = 0; k < STEPS; k++) {
		uint64_t r = gpu_rng_next(&rng);
		uint32_t bits = (uint32_t)(r >> 32);

		if (r % 3 == 0)
			bits = 0;
		else if (r % 3 == 1 && (r >> 8) % 2)
			bits = 1u << ((r >> 16) % N_HOOKS);
		bare_steps += bits == 0;
		begin(a, bits);
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s[(r >> 4) % 2]));
		want[n_launches++] = bits;
	}
	CUDA_CHECK(cudaDeviceSynchronize());
	begin(a, 0); /* reads the planner's reports */
	CUDA_CHECK(cudaMemcpy(&count, d.count, sizeof count, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(&overflow, d.overflow, sizeof overflow, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(computes, d.computes, sizeof computes, cudaMemcpyDeviceToHost));
	if (overflow || count > RING_CAP)
		die("ring overflow (%llu records)", count);
	{
		struct ring_rec *h = (struct ring_rec *)malloc((count ? count : 1) * sizeof(*h));

		if (!h)
			die("out of host memory");
		CUDA_CHECK(cudaMemcpy(h, d.ring, count * sizeof(*h), cudaMemcpyDeviceToHost));
		for (unsigned long long i = 0; i < count; i++) {
			if (h[i].launch < 0 || h[i].launch >= n_launches || h[i].hook < 0 ||
			    h[i].hook >= N_HOOKS) {
				stray++;
				continue;
			}
			if (seen[h[i].launch] >> h[i].hook & 1u)
				mismatches++; /* twice */
			seen[h[i].launch] |= 1u << h[i].hook;
		}
		free(h);
	}
	for (int k = 0; k < n_launches; k++)
		mismatches += (uint64_t)__builtin_popcount(want[k] ^ seen[k]);
	bad_computes = 0;
	for (int k = 0; k < N_COMPUTE; k++)
		bad_computes += computes[k] != (unsigned long long)n_launches;
	{
		struct toggle_taint t;

		toggle_taint_get(a, &t);
		if (mismatches || stray || bad_computes || t.launches)
			wl += (size_t)snprintf(why + wl, sizeof why - wl,
					       "%smixed: %" PRIu64 " mismatches, %" PRIu64 " stray records, "
					       "%" PRIu64 " compute kernels not run once per launch, %" PRIu64
					       " tainted launches", wl ? "; " : "", mismatches, stray,
					       bad_computes, t.launches);
	}
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	toggle_stats_get(a, &st);
	printf(GPU_TAG ": mixed: %d steps (%u all off), %d launches, %llu producer records, %" PRIu64
	       " mismatches, %" PRIu64 " stray, bare_replays %" PRIu64 ", bare switches %" PRIu64
	       ", stream joins %" PRIu64 "\n",
	       STEPS, bare_steps, n_launches, count, mismatches, stray, gs.bare_replays,
	       st.bare_switches, st.stream_joins);

	/* 4. Figures: floor, bare, device all off without bare, device all on. */
	gnb = capture(a, &d, s[0], true);
	TG_CHECK(a, toggle_graph_set_bare(a, (CUgraph)gnb, false));
	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)gnb, (CUgraphExec *)&enb));
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)gnb, &gs));
	if (gs.mode != TOGGLE_MODE_DEVICE || gs.bare_exec)
		die("the graph opted out has mode %d, bare_exec %d", (int)gs.mode, gs.bare_exec);
	gf = capture(a, &d, s[0], false);
	CUDA_CHECK(cudaGraphInstantiate(&ef, gf, 0));
	CUDA_CHECK(cudaGraphUpload(ef, s[0]));
	{
		double fl[R], ba[R], off[R], on[R];

		for (int r = 0; r < R; r++) {
			begin(a, 0);
			fl[r] = time_replays(NULL, gf, ef, s[0], N);
			ba[r] = time_replays(a, g, e, s[0], N);
			off[r] = time_replays(a, gnb, enb, s[0], N);
			begin(a, (uint32_t)~0u);
			on[r] = time_replays(a, g, e, s[0], N);
		}
		double mf = median(fl, R), mb = median(ba, R), mo = median(off, R), mn = median(on, R);
		printf(GPU_TAG ": figures layers=%d replays=%dx%d floor_us=%.2f bare_us=%.2f (%.3fx) "
		       "device_all_off_no_bare_us=%.2f (%.3fx) device_all_on_us=%.2f (%.3fx)\n",
		       N_LAYERS, R, N, mf, mb, mb / mf, mo, mo / mf, mn, mn / mf);
	}

	CUDA_CHECK(cudaDeviceSynchronize());
	toggle_agent_close(a);
	CUDA_CHECK(cudaGraphExecDestroy(e));
	CUDA_CHECK(cudaGraphDestroy(g));
	CUDA_CHECK(cudaGraphExecDestroy(enb));
	CUDA_CHECK(cudaGraphDestroy(gnb));
	CUDA_CHECK(cudaGraphExecDestroy(ef));
	CUDA_CHECK(cudaGraphDestroy(gf));
	CUDA_CHECK(cudaFree(d.x));
	CUDA_CHECK(cudaFree(d.out));
	CUDA_CHECK(cudaFree(d.launch));
	CUDA_CHECK(cudaFree(d.computes));
	CUDA_CHECK(cudaFree(d.ring));
	CUDA_CHECK(cudaFree(d.count));
	CUDA_CHECK(cudaFree(d.overflow));
	for (int i = 0; i < 2; i++)
		CUDA_CHECK(cudaStreamDestroy(s[i]));
	if (wl) {
		printf(GPU_TAG ": FAIL (%s)\n", why);
		return 1;
	}
	printf(GPU_TAG ": PASS\n");
	return 0;
}
