/*
 * gpu_devfull.cu - the GPU leg of device mode's full exec (issue 31), run
 * by scripts/gpu-check.sh.
 *
 * Device mode's full exec (bare.c) is the graph without its planner, every
 * producer a plain kernel node of the same parameters: steps whose set
 * enables every hook of the graph launch it instead of the device exec
 * (which pays the planner and the device-updatable class).  This leg checks
 * it on the real driver, ground truth from device buffers:
 *  1. The build: the graph runs in device mode with a bare and a full exec.
 *  2. All-on steps (the first launches after the bind): every producer ran
 *     once per launch (the ring holds {hook, launch}; a mark kernel at the
 *     head, copied into every exec, numbers the launches), every compute
 *     kernel once per launch, the planner never ran (its own counters).
 *  3. Mixed steps: STEPS pipelined steps, a third all on, a sixth all off,
 *     the rest random sets or one hook, launches alternating between two
 *     streams (switches between the three execs across streams): every
 *     launch ran exactly its step's producers, the planner ran exactly at
 *     the mixed launches.
 *  4. Figures, all on: GPU time per replay (CUDA events, medians of R
 *     repetitions of N back-to-back replays, interleaved): the floor (the
 *     same kernels captured without producers and planner), device all on
 *     (the full exec), device all on without it (toggle_graph_set_bare(false)
 *     on a second graph of the same shape: the planner and device-updatable
 *     producers), lazy all on (a lazy agent, plain producer nodes); and host
 *     time per step (toggle_step_begin at an unchanged set + the launch,
 *     medians of the same repetitions; the floor: cudaGraphLaunch alone),
 *     all on and all off, for the host-time target.
 *
 * Output: "gpu-devfull: figures ..." lines and "gpu-devfull: PASS", or
 * "gpu-devfull: FAIL (why)" and exit 1; "gpu-devfull: SKIPPED" and exit 0
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
#define ALL_ON       0xffffffffu
#define MIXED        0x55555555u /* every other hook: a set in between */
#define STEPS        2000
#define WARM         64   /* all-on launches of part 2 */
#define MAX_LAUNCHES (STEPS + WARM + 8)
#define RING_CAP     (1u << 18)
#define CHUNK        1024
#define THREADS      256
#define R            7
#define N            200

#define GPU_TAG "gpu-devfull"
#include "gpu_common.h"
#include "gpu_chain.h"
#include "gpu_sets.h"

static const char *const type_names[N_TYPES] = {"resid_post"};

enum how { FLOOR, DEVICE, LAZY };

static void uo_noop(void *p)
{
	(void)p;
}

/* Capture: [planner], mark, per layer a compute and [a producer], a last compute. */
static cudaGraph_t capture(struct toggle_agent *a, struct dev *d, cudaStream_t s, enum how how)
{
	cudaFunction_t fn;
	cudaGraph_t g;

	CUDA_CHECK(cudaGetFuncBySymbol(&fn, (const void *)chain_produce));
	if (how != FLOOR)
		TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	if (how == DEVICE)
		TG_CHECK(a, toggle_capture_planner(a, (CUstream)s));
	chain_mark<<<1, 1, 0, s>>>(d->launch);
	CUDA_LAUNCHED();
	for (int l = 0; l < N_LAYERS; l++) {
		chain_compute<<<CHUNK / THREADS, THREADS, 0, s>>>(d->x, d->computes, l);
		CUDA_LAUNCHED();
		int h = l;
		float *out = d->out + (size_t)h * CHUNK;
		if (how == LAZY) {
			chain_produce<<<CHUNK / THREADS, THREADS, 0, s>>>(d->x, out, d->launch, d->ring,
								    d->count, d->overflow, h);
			CUDA_LAUNCHED();
			TG_CHECK(a, toggle_record_producer(a, (CUstream)s, hook_of(h)));
		} else if (how == DEVICE) {
			CUlaunchConfig lc;
			void *params[7] = {&d->x, &out, &d->launch, &d->ring, &d->count, &d->overflow, &h};

			memset(&lc, 0, sizeof lc);
			lc.gridDimX = CHUNK / THREADS;
			lc.gridDimY = lc.gridDimZ = 1;
			lc.blockDimX = THREADS;
			lc.blockDimY = lc.blockDimZ = 1;
			lc.hStream = (CUstream)s;
			TG_CHECK(a, toggle_launch_producer(a, &lc, (CUfunction)fn, params, hook_of(h)));
		}
	}
	chain_compute<<<CHUNK / THREADS, THREADS, 0, s>>>(d->x, d->computes, N_LAYERS);
	CUDA_LAUNCHED();
	CUDA_CHECK(cudaStreamEndCapture(s, &g));
	if (how != FLOOR)
		TG_CHECK(a, toggle_capture_end(a));
	return g;
}

static long long step_no[3] = {-1, -1, -1}; /* per agent: device, lazy, lazy without full exec */

static void begin(struct toggle_agent *a, int which, uint32_t bits)
{
	struct toggle_set s = set_of(bits);

	TG_CHECK(a, toggle_set_enabled(a, &s));
	TG_CHECK(a, toggle_step_begin(a, ++step_no[which], NULL));
}

/*
 * n back-to-back steps of an unchanged set (agent NULL: plain
 * cudaGraphLaunch): median GPU µs per replay into *gpu_us, host µs per
 * step (toggle_step_begin + toggle_graph_launch) into *host_us.
 */
static void time_steps(struct toggle_agent *a, int which, cudaGraph_t g, cudaGraphExec_t e,
		       cudaStream_t s, int n, double *gpu_us, double *host_us)
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
	CUDA_CHECK(cudaStreamSynchronize(s));
	CUDA_CHECK(cudaEventRecord(e0, s));
	double t0 = gpu_now_us();
	for (int i = 0; i < n; i++) {
		if (a) {
			TG_CHECK(a, toggle_step_begin(a, ++step_no[which], NULL));
			TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s));
		} else {
			CUDA_CHECK(cudaGraphLaunch(e, s));
		}
	}
	*host_us = (gpu_now_us() - t0) / n;
	CUDA_CHECK(cudaEventRecord(e1, s));
	CUDA_CHECK(cudaEventSynchronize(e1));
	CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
	CUDA_CHECK(cudaEventDestroy(e0));
	CUDA_CHECK(cudaEventDestroy(e1));
	*gpu_us = (double)ms * 1000.0 / n;
}

/*
 * n steps alternating between two sets (bits0, bits1) of one size, so that no
 * set holds long enough for a set exec (libtoggle.md, *The set exec*): a host-mode
 * agent runs its full exec, half its producers disabled.  GPU µs per replay, host
 * µs per step (set + step_begin + launch).
 */
static void time_alternating(struct toggle_agent *a, int which, cudaGraph_t g, cudaGraphExec_t e,
			     cudaStream_t s, int n, uint32_t bits0, uint32_t bits1, double *gpu_us,
			     double *host_us)
{
	cudaEvent_t e0, e1;
	float ms = 0;

	CUDA_CHECK(cudaEventCreate(&e0));
	CUDA_CHECK(cudaEventCreate(&e1));
	for (int i = 0; i < 5; i++) {
		begin(a, which, i % 2 ? bits1 : bits0);
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s));
	}
	CUDA_CHECK(cudaStreamSynchronize(s));
	CUDA_CHECK(cudaEventRecord(e0, s));
	double t0 = gpu_now_us();
	for (int i = 0; i < n; i++) {
		begin(a, which, i % 2 ? bits1 : bits0);
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s));
	}
	*host_us = (gpu_now_us() - t0) / n;
	CUDA_CHECK(cudaEventRecord(e1, s));
	CUDA_CHECK(cudaEventSynchronize(e1));
	CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
	CUDA_CHECK(cudaEventDestroy(e0));
	CUDA_CHECK(cudaEventDestroy(e1));
	*gpu_us = (double)ms * 1000.0 / n;
}

/*
 * Plain launches cycling over k execs (e[i % k]), host and GPU time per launch:
 * whether the pacing of an exec that holds a user object is per exec (k execs,
 * each at most n / k launches queued) or per stream (one queue however many
 * execs fill it).
 */
static void time_cycle(cudaGraphExec_t *e, int k, cudaStream_t s, int n, double *gpu_us,
		       double *host_us)
{
	cudaEvent_t e0, e1;
	float ms = 0;

	CUDA_CHECK(cudaEventCreate(&e0));
	CUDA_CHECK(cudaEventCreate(&e1));
	for (int i = 0; i < k; i++)
		CUDA_CHECK(cudaGraphLaunch(e[i], s));
	CUDA_CHECK(cudaStreamSynchronize(s));
	CUDA_CHECK(cudaEventRecord(e0, s));
	double t0 = gpu_now_us();
	for (int i = 0; i < n; i++)
		CUDA_CHECK(cudaGraphLaunch(e[i % k], s));
	*host_us = (gpu_now_us() - t0) / n;
	CUDA_CHECK(cudaEventRecord(e1, s));
	CUDA_CHECK(cudaEventSynchronize(e1));
	CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
	CUDA_CHECK(cudaEventDestroy(e0));
	CUDA_CHECK(cudaEventDestroy(e1));
	*gpu_us = (double)ms * 1000.0 / n;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), gpu_cmp_double);
	return v[n / 2];
}

static uint32_t want[MAX_LAUNCHES], seen[MAX_LAUNCHES];

static struct toggle_agent *open_agent_full(const char *name, enum toggle_mode mode, bool full)
{
	struct toggle_config cfg;
	struct toggle_agent *a;

	memset(&cfg, 0, sizeof cfg);
	cfg.no_full_exec = !full;
	cfg.name = name;
	cfg.catalog.type_names = type_names;
	cfg.catalog.n_types = N_TYPES;
	cfg.catalog.n_layers = N_LAYERS;
	cfg.mode = mode;
	cfg.strict = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	int r = toggle_agent_open(&cfg, &a);
	if (r != TOGGLE_OK)
		die("toggle_agent_open (%s): %s", name, toggle_strerror(r));
	if (toggle_agent_mode(a) != mode)
		die("%s: mode %d is not available here: %s", name, (int)mode, toggle_last_error(a));
	return a;
}

static struct toggle_agent *open_agent(const char *name, enum toggle_mode mode)
{
	return open_agent_full(name, mode, true);
}

int main(void)
{
	struct cudaDeviceProp prop;
	struct toggle_agent *a, *lz;
	struct toggle_graph_status gs;
	struct toggle_device_counters dc;
	struct toggle_stats st;
	struct dev d;
	cudaStream_t s[2];
	cudaGraph_t g, gnf, gl, gf;
	cudaGraphExec_t e, enf, el, ef;
	unsigned long long computes[N_COMPUTE], count = 0;
	unsigned int overflow = 0;
	long long minus1 = -1;
	uint64_t rng = 0xf011e, mismatches = 0, stray = 0, bad_computes = 0, mixed_launches = 0;
	unsigned full_steps = 0, bare_steps = 0;
	int n_launches = 0, drv = 0;
	char why[768] = "";
	size_t wl = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	gpu_device_or_skip();
	CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	printf(GPU_TAG ": device 0: %s (sm_%d%d), driver %d.%d\n", prop.name, prop.major,
	       prop.minor, drv / 1000, drv % 1000 / 10);
	CUDA_CHECK(cudaFree(0)); /* a current context before the agents open */
	for (int i = 0; i < 2; i++)
		CUDA_CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&d.x, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMemset(d.x, 0, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&d.out, (size_t)N_HOOKS * CHUNK * sizeof(float)));
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

	a = open_agent("gpu_devfull", TOGGLE_MODE_DEVICE);

	/* 1. The build. */
	g = capture(a, &d, s[0], DEVICE);
	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)g, (CUgraphExec *)&e));
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	if (gs.mode != TOGGLE_MODE_DEVICE || !gs.bare_exec || !gs.full_exec)
		die("graph mode %d, bare_exec %d, full_exec %d: expected device mode with both (%s)",
		    (int)gs.mode, gs.bare_exec, gs.full_exec, toggle_last_error(a));

	/* 2. All-on steps first: the device exec has not run yet. */
	for (int k = 0; k < WARM; k++) {
		begin(a, 0, ALL_ON);
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s[k % 2]));
		want[n_launches++] = ALL_ON;
	}
	CUDA_CHECK(cudaDeviceSynchronize());
	TG_CHECK(a, toggle_graph_device_counters(a, (CUgraph)g, &dc));
	CUDA_CHECK(cudaMemcpy(&count, d.count, sizeof count, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(computes, d.computes, sizeof computes, cudaMemcpyDeviceToHost));
	for (int k = 0; k < N_COMPUTE; k++)
		bad_computes += computes[k] != (unsigned long long)WARM;
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	if (count != (unsigned long long)WARM * N_HOOKS || bad_computes || dc.planner_runs ||
	    !gs.full_running || gs.full_replays != WARM)
		wl += (size_t)snprintf(why + wl, sizeof why - wl,
				       "%sall on: %llu producer records (want %d), %" PRIu64 " compute "
				       "kernels not run once per launch, %" PRIu64 " planner runs, "
				       "full_running %d, full_replays %" PRIu64,
				       wl ? "; " : "", count, WARM * N_HOOKS, bad_computes,
				       dc.planner_runs, gs.full_running, gs.full_replays);
	printf(GPU_TAG ": all on: %d launches, %llu producer records, planner runs %" PRIu64 "\n",
	       WARM, count, dc.planner_runs);

	/* 3. Mixed steps, pipelined, two streams. */
	for (int k = 0; k < STEPS; k++) {
		uint64_t r = gpu_rng_next(&rng);
		uint32_t bits = (uint32_t)(r >> 32);

		if (r % 3 == 0)
			bits = ALL_ON;
		else if (r % 6 == 1)
			bits = 0;
		else if ((r >> 8) % 2)
			bits = 1u << ((r >> 16) % N_HOOKS);
		else if (bits == 0 || bits == ALL_ON)
			bits = 0x00ff00ffu;
		full_steps += bits == ALL_ON;
		bare_steps += bits == 0;
		mixed_launches += bits != ALL_ON && bits != 0;
		begin(a, 0, bits);
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)e, (CUstream)s[(r >> 4) % 2]));
		want[n_launches++] = bits;
	}
	CUDA_CHECK(cudaDeviceSynchronize());
	begin(a, 0, 0); /* reads the planner's reports */
	TG_CHECK(a, toggle_graph_device_counters(a, (CUgraph)g, &dc));
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
		if (mismatches || stray || bad_computes || t.launches || dc.planner_runs != mixed_launches)
			wl += (size_t)snprintf(why + wl, sizeof why - wl,
					       "%smixed: %" PRIu64 " mismatches, %" PRIu64 " stray records, "
					       "%" PRIu64 " compute kernels not run once per launch, %" PRIu64
					       " tainted launches, %" PRIu64 " planner runs for %" PRIu64
					       " mixed launches", wl ? "; " : "", mismatches, stray,
					       bad_computes, t.launches, dc.planner_runs, mixed_launches);
	}
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)g, &gs));
	toggle_stats_get(a, &st);
	printf(GPU_TAG ": mixed: %d steps (%u all on, %u all off), %d launches, %llu producer "
	       "records, %" PRIu64 " mismatches, %" PRIu64 " stray, planner runs %" PRIu64
	       " (mixed launches %" PRIu64 "), full_replays %" PRIu64 ", bare_replays %" PRIu64
	       ", full switches %" PRIu64 ", stream joins %" PRIu64 "\n",
	       STEPS, full_steps, bare_steps, n_launches, count, mismatches, stray, dc.planner_runs,
	       mixed_launches, gs.full_replays, gs.bare_replays, st.full_switches, st.stream_joins);

	/* 4. Figures: floor, device full, device with its planner, lazy; all on and all off. */
	gnf = capture(a, &d, s[0], DEVICE);
	TG_CHECK(a, toggle_graph_set_bare(a, (CUgraph)gnf, false));
	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)gnf, (CUgraphExec *)&enf));
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)gnf, &gs));
	if (gs.mode != TOGGLE_MODE_DEVICE || gs.bare_exec || gs.full_exec)
		die("the graph opted out has mode %d, bare_exec %d, full_exec %d", (int)gs.mode,
		    gs.bare_exec, gs.full_exec);
	lz = open_agent("gpu_devfull_lazy", TOGGLE_MODE_LAZY);
	gl = capture(lz, &d, s[0], LAZY);
	TG_CHECK(lz, toggle_graph_instantiate(lz, (CUgraph)gl, (CUgraphExec *)&el));
	/* A lazy agent without the full exec: sets in between run the main exec. */
	struct toggle_agent *lm = open_agent_full("gpu_devfull_lazy_nofull", TOGGLE_MODE_LAZY, false);
	cudaGraph_t gm = capture(lm, &d, s[0], LAZY);
	cudaGraphExec_t em;
	TG_CHECK(lm, toggle_graph_instantiate(lm, (CUgraph)gm, (CUgraphExec *)&em));
	gf = capture(NULL, &d, s[0], FLOOR);
	CUDA_CHECK(cudaGraphInstantiate(&ef, gf, 0));
	CUDA_CHECK(cudaGraphUpload(ef, s[0]));
	/* The floor again, its graph holding a user object as libtoggle's records do
	 * (life.c), so its exec holds a reference through every launch. */
	cudaGraph_t guo = capture(NULL, &d, s[0], FLOOR);
	cudaGraphExec_t euo;
	cudaUserObject_t uo;
	CUDA_CHECK(cudaUserObjectCreate(&uo, NULL, uo_noop, 1, cudaUserObjectNoDestructorSync));
	CUDA_CHECK(cudaGraphRetainUserObject(guo, uo, 1, cudaGraphUserObjectMove));
	CUDA_CHECK(cudaGraphInstantiate(&euo, guo, 0));
	CUDA_CHECK(cudaGraphUpload(euo, s[0]));
	/* Twenty execs of that graph (each holds the reference) and twenty of the floor's. */
	cudaGraphExec_t euo20[20], ef20[20];
	for (int i = 0; i < 20; i++) {
		CUDA_CHECK(cudaGraphInstantiate(&euo20[i], guo, 0));
		CUDA_CHECK(cudaGraphUpload(euo20[i], s[0]));
		CUDA_CHECK(cudaGraphInstantiate(&ef20[i], gf, 0));
		CUDA_CHECK(cudaGraphUpload(ef20[i], s[0]));
	}
	{
		double cu[R], hcu[R], cf[R], hcf[R];
		double fl[R], dfu[R], dpl[R], lzo[R], hfl[R], hdfu[R], hdpl[R], hlzo[R];
		double dba[R], lba[R], hdba[R], hlba[R];
		double pl[R], ppl[R], hpl[R], hppl[R], pl20[R], hpl20[R], fuo[R], hfuo[R], dum;
		double mxf[R], hmxf[R], mxm[R], hmxm[R], mxa[R], hmxa[R];

		for (int r = 0; r < R; r++) {
			time_steps(NULL, 0, gf, ef, s[0], N, &fl[r], &hfl[r]);
			begin(a, 0, ALL_ON);
			begin(lz, 1, ALL_ON);
			time_steps(a, 0, g, e, s[0], N, &dfu[r], &hdfu[r]);
			time_steps(a, 0, gnf, enf, s[0], N, &dpl[r], &hdpl[r]);
			time_steps(lz, 1, gl, el, s[0], N, &lzo[r], &hlzo[r]);
			/* Half the hooks on (a set in between), held: lazy's set exec once the
			 * set has held (libtoggle.md, *The set exec*), against the main exec of
			 * an agent without the full exec (nor set execs); and alternating
			 * with the other half: lazy's full exec, half its producers disabled. */
			begin(lz, 1, MIXED);
			begin(lm, 2, MIXED);
			time_steps(lz, 1, gl, el, s[0], N, &mxf[r], &hmxf[r]);
			time_steps(lm, 2, gm, em, s[0], N, &mxm[r], &hmxm[r]);
			time_alternating(lz, 1, gl, el, s[0], N, MIXED, ~MIXED, &mxa[r], &hmxa[r]);
			begin(a, 0, 0);
			begin(lz, 1, 0);
			time_steps(a, 0, g, e, s[0], N, &dba[r], &hdba[r]);
			time_steps(lz, 1, gl, el, s[0], N, &lba[r], &hlba[r]);
			/* The same execs launched plainly (cudaGraphLaunch, no libtoggle call), all
			 * on: is a host time above the floor's libtoggle's or the exec's own? */
			begin(lz, 1, ALL_ON);
			time_steps(lz, 1, gl, el, s[0], 5, &dum, &dum); /* back on the main exec */
			time_steps(NULL, 0, gl, el, s[0], N, &pl[r], &hpl[r]);
			time_steps(NULL, 0, gl, el, s[0], 20, &pl20[r], &hpl20[r]);
			time_steps(NULL, 0, gnf, enf, s[0], N, &ppl[r], &hppl[r]);
			time_steps(NULL, 0, guo, euo, s[0], N, &fuo[r], &hfuo[r]);
			time_cycle(euo20, 20, s[0], N, &cu[r], &hcu[r]);
			time_cycle(ef20, 20, s[0], N, &cf[r], &hcf[r]);
		}
		double mf = median(fl, R), mdf = median(dfu, R), mdp = median(dpl, R);
		double mlz = median(lzo, R), mdb = median(dba, R), mlb = median(lba, R);
		double hf = median(hfl, R), hdf = median(hdfu, R), hdp = median(hdpl, R);
		double hlz = median(hlzo, R), hdb = median(hdba, R), hlb = median(hlba, R);
		printf(GPU_TAG ": figures layers=%d replays=%dx%d all on: floor_us=%.2f "
		       "device_full_us=%.2f (%.4fx) device_planner_us=%.2f (%.4fx) lazy_us=%.2f "
		       "(%.4fx); device full / lazy %.4f\n",
		       N_LAYERS, R, N, mf, mdf, mdf / mf, mdp, mdp / mf, mlz, mlz / mf, mdf / mlz);
		printf(GPU_TAG ": figures all off: device_bare_us=%.2f (%.4fx) lazy_bare_us=%.2f "
		       "(%.4fx)\n", mdb, mdb / mf, mlb, mlb / mf);
		printf(GPU_TAG ": figures half on (set 0x%08x), lazy: held, the set exec GPU us %.2f "
		       "(%.4fx), host us/step %.2f; alternating with 0x%08x, the full exec GPU us %.2f "
		       "(%.4fx), host us/step %.2f; held, the main exec (no_full_exec) GPU us %.2f "
		       "(%.4fx), host us/step %.2f\n", MIXED, median(mxf, R), median(mxf, R) / mf,
		       median(hmxf, R), ~MIXED, median(mxa, R), median(mxa, R) / mf, median(hmxa, R),
		       median(mxm, R), median(mxm, R) / mf, median(hmxm, R));
		{
			struct toggle_graph_status gls;
			TG_CHECK(lz, toggle_graph_status(lz, (CUgraph)gl, &gls));
			printf(GPU_TAG ": figures lazy graph: set exec %d (%" PRIu64 " replays), full "
			       "exec %" PRIu64 " replays\n", gls.set_exec, gls.set_replays,
			       gls.full_replays);
		}
		printf(GPU_TAG ": figures host us per step (step_begin + launch, set unchanged; floor: "
		       "cudaGraphLaunch): floor %.2f; all on: device full %.2f (+%.2f), device "
		       "planner %.2f (+%.2f), lazy %.2f (+%.2f); all off: device bare %.2f (+%.2f), "
		       "lazy bare %.2f (+%.2f)\n",
		       hf, hdf, hdf - hf, hdp, hdp - hf, hlz, hlz - hf, hdb, hdb - hf, hlb, hlb - hf);
		printf(GPU_TAG ": figures host us per launch, plain cudaGraphLaunch of the application's "
		       "execs (no libtoggle call): lazy's %.2f (%d back to back; %.2f for 20), device "
		       "mode's opted out of the bare and full execs %.2f, the floor's with a user "
		       "object %.2f (without: %.2f); GPU us %.2f, %.2f, %.2f\n",
		       median(hpl, R), N, median(hpl20, R), median(hppl, R), median(hfuo, R), hf,
		       median(pl, R), median(ppl, R), median(fuo, R));
		printf(GPU_TAG ": figures host us per launch, %d plain launches cycling over twenty "
		       "execs: with a user object each %.2f, without %.2f (GPU us %.2f, %.2f): paced "
		       "per %s\n", N, median(hcu, R), median(hcf, R), median(cu, R), median(cf, R),
		       median(hcu, R) > 4 * median(hcf, R) ? "stream (not per exec)" : "exec");
	}
	for (int i = 0; i < 20; i++) {
		CUDA_CHECK(cudaGraphExecDestroy(euo20[i]));
		CUDA_CHECK(cudaGraphExecDestroy(ef20[i]));
	}

	CUDA_CHECK(cudaDeviceSynchronize());
	toggle_agent_close(a);
	toggle_agent_close(lz);
	toggle_agent_close(lm);
	CUDA_CHECK(cudaGraphExecDestroy(em));
	CUDA_CHECK(cudaGraphDestroy(gm));
	CUDA_CHECK(cudaGraphExecDestroy(e));
	CUDA_CHECK(cudaGraphDestroy(g));
	CUDA_CHECK(cudaGraphExecDestroy(enf));
	CUDA_CHECK(cudaGraphDestroy(gnf));
	CUDA_CHECK(cudaGraphExecDestroy(el));
	CUDA_CHECK(cudaGraphDestroy(gl));
	CUDA_CHECK(cudaGraphExecDestroy(ef));
	CUDA_CHECK(cudaGraphDestroy(gf));
	CUDA_CHECK(cudaGraphExecDestroy(euo));
	CUDA_CHECK(cudaGraphDestroy(guo));
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
