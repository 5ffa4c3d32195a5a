/*
 * gpu_region.cu - the real-GPU proof of producer regions and of the
 * built-in copy producer (run by scripts/gpu-check.sh after gpu_check).
 *
 * Captures use cudaStreamCaptureModeGlobal, PyTorch's default.  Ground truth
 * is read from device memory only, never from libtoggle's counters: before
 * every replay a sentinel is written (in stream order) over every buffer a
 * producer writes, and the step number into a device word that the graph's
 * kernels read.
 *
 *  1. Regions (a lazy agent, then an eager one): one graph with 12 regions,
 *     6 of three kernels in a row and 6 "torch-like" ones (a kernel, a fork
 *     to a second stream with a kernel there, the join back), with kernels
 *     between them that no region holds.  Every kernel stamps the step into
 *     its own slot.  Each toggle_producer_end must report the region's
 *     kernel count, and after N steps with random sets each region's
 *     kernels must all have stamped the step when its hook was in the
 *     step's set and all have left the sentinel otherwise, while every
 *     kernel outside a region stamped every step.  Then a region holding a
 *     cudaMemcpyAsync, and one holding a cudaMemsetAsync, each captured
 *     into its OWN graph (a kernel before it, a kernel and the copy inside
 *     it), must be refused with TOGGLE_ENOTKERNEL and record nothing; that
 *     graph then holds unrecorded work, so it is late: its bind and every
 *     launch (sets all and none) must be refused with TOGGLE_ECAPTURE and
 *     run nothing: no stamp, and the scratch buffer the copy would change
 *     keeps its sentinel.
 *  2. toggle_copy_out (lazy, eager and device agents; device strict, so its
 *     graph is really toggled by the planner): a kernel in the graph writes
 *     a source pattern that depends on the step, then six copies: four
 *     contiguous (16-byte aligned; 1001 bytes from an odd address; 4104
 *     bytes 8-byte aligned; 300001 bytes from an odd address, more than the
 *     capped grid has threads, so its loop strides) and two strided (32
 *     rows of 256 bytes, source pitch 1024, destination pitch 512; 7 rows
 *     of 36 bytes, pitches 100 and 40): every access width and both paths
 *     of the kernel (libtoggle/src/copyout.cu).  After every
 *     replay each destination must hold the pattern of this step where its
 *     hook is on (and the sentinel in its pitch gaps), only the sentinel
 *     where it is off.  In device mode the host makes no
 *     cuGraphNodeSetEnabled call and the planners report no failed
 *     device-side call.  The first toggle_copy_out of each agent loads the
 *     copy kernel while the capture is open.
 *
 * Prints one line per leg ("gpu-region: <leg>: PASS ...") and
 * "gpu-region: PASS" at the end.  Exit status: 0 on PASS and when there is
 * no CUDA device (SKIPPED), 1 on FAIL, 2 on bad usage.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "toggle.h"

#define GPU_TAG "gpu-region"
#include "gpu_common.h"

#define N_TYPES   3
#define N_LAYERS  8
#define N_REG     12  /* regions: hooks 0..11 */
#define MAX_SLOTS 64  /* stamp slots: one per kernel */
#define MAX_DIAG  10  /* mismatch lines printed per leg */
#define SENTINEL  0xa5
#define SCRATCH_HALF 4096 /* refused regions: the memset writes the first half, the memcpy the second */
#define SCRATCH_A 0x5a    /* sentinels of the two halves */
#define SCRATCH_B 0x3c

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out", "mlp_out"};

/* ---- kernels ---------------------------------------------------------------- */

__global__ void set_step(long long *d_step, long long step)
{
	*d_step = step;
}

/* A "layer" kernel: stamps the step into its slot (all threads agree). */
__global__ void stamp(long long *slots, int slot, const long long *d_step)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		slots[slot] = *d_step;
}

/* The copy source of this step: byte i = pattern(i, step). */
__device__ __host__ static inline unsigned char pattern(size_t i, long long step)
{
	return (unsigned char)(i * 7u + (size_t)step * 13u + (i >> 8));
}

__global__ void fill(unsigned char *src, size_t n, const long long *d_step)
{
	long long step = *d_step;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		src[i] = pattern(i, step);
}

/* ---- helpers ------------------------------------------------------------------ */

static struct toggle_hook hook_of(int h)
{
	struct toggle_hook k;

	k.type = (uint16_t)(h / N_LAYERS);
	k.layer = (uint16_t)(h % N_LAYERS);
	return k;
}

/* A random set over hooks 0..n-1: empty, full, the previous one, or random bits. */
static uint32_t pick(uint64_t *rng, uint32_t prev, int n)
{
	uint32_t all = (1u << n) - 1;

	switch (gpu_rng_next(rng) % 8) {
	case 0:
		return 0;
	case 1:
		return all;
	case 2:
		return prev;
	case 3:
		return prev ^ (1u << (gpu_rng_next(rng) % (unsigned)n));
	default:
		return (uint32_t)gpu_rng_next(rng) & all;
	}
}

static struct toggle_set set_of(uint32_t m, int n)
{
	struct toggle_set s;

	toggle_set_clear(&s);
	for (int h = 0; h < n; h++)
		if (m >> h & 1 && toggle_set_add(&s, hook_of(h)) != TOGGLE_OK)
			die("toggle_set_add(hook %d)", h);
	return s;
}

static uint32_t bits_of(const struct toggle_set *s, int n)
{
	uint32_t m = 0;

	for (int h = 0; h < n; h++)
		if (toggle_set_contains(s, hook_of(h)))
			m |= 1u << h;
	return m;
}

static struct toggle_agent *open_agent(enum toggle_mode mode, bool strict)
{
	struct toggle_config cfg;
	struct toggle_agent *a = NULL;
	int r;

	memset(&cfg, 0, sizeof cfg);
	cfg.name = "gpu-region";
	cfg.catalog.type_names = type_names;
	cfg.catalog.n_types = N_TYPES;
	cfg.catalog.n_layers = N_LAYERS;
	cfg.mode = mode;
	cfg.strict = strict;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	r = toggle_agent_open(&cfg, &a);
	if (r != TOGGLE_OK)
		die("toggle_agent_open(mode %d): %d (%s)", (int)mode, r, toggle_strerror(r));
	if (toggle_agent_mode(a) != mode)
		die("agent runs in mode %d, not %d: %s", (int)toggle_agent_mode(a), (int)mode,
		    toggle_last_error(a));
	return a;
}

static const char *mode_name(enum toggle_mode m)
{
	return m == TOGGLE_MODE_LAZY ? "lazy" : m == TOGGLE_MODE_EAGER ? "eager" : "device";
}

/* ---- leg 1: regions ------------------------------------------------------------- */

struct region_leg {
	cudaStream_t s0, s1;
	cudaEvent_t fork_ev, join_ev;
	long long *d_step, *d_slots, *h_slots;
	void *d_scratch;       /* what the refused memcpy/memset regions touch */
	int slot_hook[MAX_SLOTS]; /* hook of each slot's kernel, -1: in no region */
	int n_slots;
	size_t expect_nodes;
	double region_ms;      /* host time in toggle_producer_begin/end */
};

static void k_stamp(struct region_leg *L, cudaStream_t s, int hook)
{
	if (L->n_slots == MAX_SLOTS)
		die("too many stamp slots");
	L->slot_hook[L->n_slots] = hook;
	stamp<<<1, 32, 0, s>>>(L->d_slots, L->n_slots, L->d_step);
	CUDA_LAUNCHED();
	L->n_slots++;
}

static void region_begin(struct region_leg *L, struct toggle_agent *a)
{
	double t0 = gpu_now_ms();

	TG_CHECK(a, toggle_producer_begin(a, (CUstream)L->s0));
	L->region_ms += gpu_now_ms() - t0;
}

static void region_end(struct region_leg *L, struct toggle_agent *a, int h, size_t want)
{
	size_t n = 0;
	double t0 = gpu_now_ms();

	TG_CHECK(a, toggle_producer_end(a, (CUstream)L->s0, hook_of(h), &n));
	L->region_ms += gpu_now_ms() - t0;
	if (n != want)
		die("region of hook %d recorded %zu kernels, not %zu", h, n, want);
}

/*
 * A region around a kernel and a memcpy or memset: refused, nothing
 * recorded; what it captured stays in the graph unrecorded (the graph is late).
 */
static void refused_region(struct region_leg *L, struct toggle_agent *a, bool memset_node)
{
	struct toggle_anomalies before, after;
	int r;

	toggle_anomalies_get(a, &before);
	TG_CHECK(a, toggle_producer_begin(a, (CUstream)L->s0));
	k_stamp(L, L->s0, -1);
	if (memset_node)
		CUDA_CHECK(cudaMemsetAsync(L->d_scratch, 0, SCRATCH_HALF, L->s0));
	else
		CUDA_CHECK(cudaMemcpyAsync((char *)L->d_scratch + SCRATCH_HALF, L->d_scratch,
					   SCRATCH_HALF, cudaMemcpyDeviceToDevice, L->s0));
	r = toggle_producer_end(a, (CUstream)L->s0, hook_of(0), NULL);
	toggle_anomalies_get(a, &after);
	if (r != TOGGLE_ENOTKERNEL)
		die("a region holding a %s returned %d (%s), not TOGGLE_ENOTKERNEL",
		    memset_node ? "memset" : "memcpy", r, toggle_strerror(r));
	if (!strstr(toggle_last_error(a), memset_node ? "memset" : "memcpy") ||
	    !strstr(toggle_last_error(a), "toggle_copy_out"))
		die("the refusal does not say what and how: %s", toggle_last_error(a));
	if (after.record_not_kernel != before.record_not_kernel + 1)
		die("the refused region was not counted as an anomaly");
	printf("gpu-region: %s region refused as it must be: %s\n",
	       memset_node ? "memset" : "memcpy", toggle_last_error(a));
}

static cudaGraph_t region_capture(struct region_leg *L, struct toggle_agent *a)
{
	cudaGraph_t graph;
	struct toggle_graph_status gs;

	L->n_slots = 0;
	TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(L->s0, cudaStreamCaptureModeGlobal));
	k_stamp(L, L->s0, -1);
	for (int h = 0; h < N_REG; h++) {
		region_begin(L, a);
		if (h % 2 == 0) { /* three kernels in a row */
			k_stamp(L, L->s0, h);
			k_stamp(L, L->s0, h);
			k_stamp(L, L->s0, h);
			region_end(L, a, h, 3);
		} else { /* torch-like: a kernel, a forked stream's kernel, the join */
			k_stamp(L, L->s0, h);
			CUDA_CHECK(cudaEventRecord(L->fork_ev, L->s0));
			CUDA_CHECK(cudaStreamWaitEvent(L->s1, L->fork_ev, 0));
			k_stamp(L, L->s1, h);
			CUDA_CHECK(cudaEventRecord(L->join_ev, L->s1));
			CUDA_CHECK(cudaStreamWaitEvent(L->s0, L->join_ev, 0));
			region_end(L, a, h, 2);
		}
		k_stamp(L, L->s0, -1); /* a layer kernel between regions */
	}
	CUDA_CHECK(cudaStreamEndCapture(L->s0, &graph));
	TG_CHECK(a, toggle_capture_end(a));
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)graph, &gs));
	L->expect_nodes = (size_t)(N_REG / 2) * 3 + (size_t)(N_REG / 2) * 2;
	if (gs.nodes != L->expect_nodes || gs.hooks_covered != N_REG)
		die("graph records %u nodes over %u hooks, not %zu over %d", gs.nodes,
		    gs.hooks_covered, L->expect_nodes, N_REG);
	return graph;
}

/*
 * A refused region captured into its own graph: a kernel before it, then
 * the region (a kernel and a memcpy or memset).  The region is refused and
 * records nothing, so its work is in the graph unrecorded and the graph is
 * late: bind and launches (whatever the set) are refused with
 * TOGGLE_ECAPTURE, and nothing of it runs.  Returns the mismatches.
 */
static uint64_t refused_graph_run(struct region_leg *L, struct toggle_agent *a,
				  enum toggle_mode mode, bool memset_node, long long first_step)
{
	const char *what = memset_node ? "memset" : "memcpy";
	cudaGraph_t graph;
	cudaGraphExec_t exec = NULL;
	struct toggle_graph_status gs;
	unsigned char *h_scratch;
	uint64_t bad = 0;
	int r;

	CUDA_CHECK(cudaMallocHost(&h_scratch, 2 * SCRATCH_HALF));
	L->n_slots = 0;
	TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(L->s0, cudaStreamCaptureModeGlobal));
	k_stamp(L, L->s0, -1);
	refused_region(L, a, memset_node);
	CUDA_CHECK(cudaStreamEndCapture(L->s0, &graph));
	TG_CHECK(a, toggle_capture_end(a));

	TG_CHECK(a, toggle_graph_status(a, (CUgraph)graph, &gs));
	if (gs.nodes != 0 || !strstr(gs.note, "producer region of hook 0:0") ||
	    !strstr(gs.note, "not recorded")) {
		printf("gpu-region: region-%s: %s graph: %u nodes recorded, note \"%s\" (want 0 "
		       "and a note naming the region)\n", mode_name(mode), what, gs.nodes, gs.note);
		bad++;
	}
	/* Nothing of it is recorded: instantiate makes an exec and binds nothing. */
	r = toggle_graph_instantiate(a, (CUgraph)graph, &exec);
	if (r != TOGGLE_OK && r != TOGGLE_ECAPTURE)
		die("toggle_graph_instantiate(%s graph): %d (%s): %s", what, r, toggle_strerror(r),
		    toggle_last_error(a));
	if (!exec)
		CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
	r = toggle_graph_bind(a, (CUgraph)graph, exec);
	if (r != TOGGLE_ECAPTURE) {
		printf("gpu-region: region-%s: %s graph: bind returned %d (%s), not "
		       "TOGGLE_ECAPTURE\n", mode_name(mode), what, r, toggle_strerror(r));
		bad++;
	}
	for (int s = 0; s < 4; s++) {
		uint32_t want = s % 2 ? (1u << N_REG) - 1 : 0;
		struct toggle_set set = set_of(want, N_REG);
		int ran = 0;

		TG_CHECK(a, toggle_set_enabled(a, &set));
		TG_CHECK(a, toggle_step_begin(a, first_step + s, NULL));
		CUDA_CHECK(cudaMemsetAsync(L->d_slots, 0xff, MAX_SLOTS * sizeof(long long), L->s0));
		CUDA_CHECK(cudaMemsetAsync(L->d_scratch, SCRATCH_A, SCRATCH_HALF, L->s0));
		CUDA_CHECK(cudaMemsetAsync((char *)L->d_scratch + SCRATCH_HALF, SCRATCH_B,
					   SCRATCH_HALF, L->s0));
		set_step<<<1, 1, 0, L->s0>>>(L->d_step, first_step + s);
		CUDA_LAUNCHED();
		r = toggle_graph_launch(a, (CUgraph)graph, exec, (CUstream)L->s0);
		CUDA_CHECK(cudaMemcpyAsync(L->h_slots, L->d_slots, MAX_SLOTS * sizeof(long long),
					   cudaMemcpyDeviceToHost, L->s0));
		CUDA_CHECK(cudaMemcpyAsync(h_scratch, L->d_scratch, 2 * SCRATCH_HALF,
					   cudaMemcpyDeviceToHost, L->s0));
		CUDA_CHECK(cudaStreamSynchronize(L->s0));
		for (int k = 0; k < L->n_slots; k++)
			ran += L->h_slots[k] != -1;
		for (int i = 0; i < 2 * SCRATCH_HALF; i++)
			ran += h_scratch[i] != (i < SCRATCH_HALF ? SCRATCH_A : SCRATCH_B);
		if (r != TOGGLE_ECAPTURE || ran) {
			printf("gpu-region: region-%s: %s graph, set %s: launch returned %d (%s), %d "
			       "stamps or scratch bytes changed (want TOGGLE_ECAPTURE and 0)\n",
			       mode_name(mode), what, want ? "all" : "none", r, toggle_strerror(r),
			       ran);
			bad++;
		}
	}
	printf("gpu-region: region-%s: %s region's own graph: %s (late: bind and launch "
	       "refused, nothing ran; note: %s)\n", mode_name(mode), what, bad ? "FAIL" : "PASS",
	       gs.note);
	CUDA_CHECK(cudaGraphExecDestroy(exec));
	CUDA_CHECK(cudaGraphDestroy(graph));
	CUDA_CHECK(cudaFreeHost(h_scratch));
	return bad;
}

static uint64_t region_leg_run(enum toggle_mode mode, long long steps, uint64_t seed)
{
	struct region_leg L;
	struct toggle_agent *a = open_agent(mode, false);
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	uint64_t rng = seed, mismatches = 0, stamped = 0;
	uint32_t prev = 0;
	int diag = 0;
	double t0, launch_ms = 0;

	memset(&L, 0, sizeof L);
	CUDA_CHECK(cudaStreamCreateWithFlags(&L.s0, cudaStreamNonBlocking));
	CUDA_CHECK(cudaStreamCreateWithFlags(&L.s1, cudaStreamNonBlocking));
	CUDA_CHECK(cudaEventCreateWithFlags(&L.fork_ev, cudaEventDisableTiming));
	CUDA_CHECK(cudaEventCreateWithFlags(&L.join_ev, cudaEventDisableTiming));
	CUDA_CHECK(cudaMalloc(&L.d_step, sizeof(long long)));
	CUDA_CHECK(cudaMalloc(&L.d_slots, MAX_SLOTS * sizeof(long long)));
	CUDA_CHECK(cudaMalloc(&L.d_scratch, 2 * SCRATCH_HALF));
	CUDA_CHECK(cudaMallocHost(&L.h_slots, MAX_SLOTS * sizeof(long long)));
	CUDA_CHECK(cudaDeviceSynchronize());

	/* Outside a capture window a region is refused. */
	if (toggle_producer_begin(a, (CUstream)L.s0) != TOGGLE_ECAPTURE)
		die("toggle_producer_begin outside a capture window was not refused");

	graph = region_capture(&L, a);
	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)graph, &exec));

	for (long long s = 0; s < steps; s++) {
		uint32_t want = pick(&rng, prev, N_REG), got;
		struct toggle_set set = set_of(want, N_REG), eff;

		prev = want;
		TG_CHECK(a, toggle_set_enabled(a, &set));
		TG_CHECK(a, toggle_step_begin(a, s, &eff));
		got = bits_of(&eff, N_REG);
		if (got != want)
			die("step %lld: the gate says 0x%x, the standing set is 0x%x", s, got, want);
		CUDA_CHECK(cudaMemsetAsync(L.d_slots, 0xff, MAX_SLOTS * sizeof(long long), L.s0));
		set_step<<<1, 1, 0, L.s0>>>(L.d_step, s);
		CUDA_LAUNCHED();
		t0 = gpu_now_ms();
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)graph, exec, (CUstream)L.s0));
		launch_ms += gpu_now_ms() - t0;
		CUDA_CHECK(cudaMemcpyAsync(L.h_slots, L.d_slots, MAX_SLOTS * sizeof(long long),
					   cudaMemcpyDeviceToHost, L.s0));
		CUDA_CHECK(cudaStreamSynchronize(L.s0));
		for (int k = 0; k < L.n_slots; k++) {
			int h = L.slot_hook[k];
			bool on = h < 0 || (want >> h & 1);
			long long v = L.h_slots[k], expect = on ? s : -1;

			stamped += v == s;
			if (v != expect) {
				mismatches++;
				if (diag++ < MAX_DIAG)
					printf("gpu-region: region-%s: step %lld slot %d (hook %d): %lld, "
					       "expected %lld\n", mode_name(mode), s, k, h, v, expect);
			}
		}
	}
	printf("gpu-region: region-%s: %s steps=%lld kernels=%d recorded=%zu regions=%d "
	       "stamps=%" PRIu64 " mismatches=%" PRIu64 " host_us_per_launch=%.2f "
	       "host_us_per_region=%.1f\n",
	       mode_name(mode), mismatches ? "FAIL" : "PASS", steps, L.n_slots, L.expect_nodes,
	       N_REG, stamped, mismatches, launch_ms * 1e3 / (double)steps,
	       L.region_ms * 1e3 / N_REG);

	TG_CHECK(a, toggle_graph_bind(a, (CUgraph)graph, NULL));
	CUDA_CHECK(cudaGraphExecDestroy(exec));
	/* The refused regions, each in its own graph (the good graph is unbound now). */
	mismatches += refused_graph_run(&L, a, mode, false, steps);
	mismatches += refused_graph_run(&L, a, mode, true, steps + 4);
	toggle_agent_close(a);
	CUDA_CHECK(cudaGraphDestroy(graph));
	CUDA_CHECK(cudaFree(L.d_step));
	CUDA_CHECK(cudaFree(L.d_slots));
	CUDA_CHECK(cudaFree(L.d_scratch));
	CUDA_CHECK(cudaFreeHost(L.h_slots));
	CUDA_CHECK(cudaEventDestroy(L.fork_ev));
	CUDA_CHECK(cudaEventDestroy(L.join_ev));
	CUDA_CHECK(cudaStreamDestroy(L.s0));
	CUDA_CHECK(cudaStreamDestroy(L.s1));
	return mismatches;
}

/* ---- leg 2: toggle_copy_out ------------------------------------------------------ */

#define N_COPY   6
#define SRC_SIZE (320 * 1024 + 64)

struct copy_case {
	const char *name;
	size_t src_off, row_bytes, rows, src_pitch, dst_pitch; /* pitch 0: contiguous */
	size_t dst_size;
	unsigned char *d_dst, *h_dst;
};

static struct copy_case cases[N_COPY] = {
	{"contiguous-64KiB", 0, 64 * 1024, 1, 0, 0, 0, NULL, NULL},
	{"contiguous-1001B-odd", 3, 1001, 1, 0, 0, 0, NULL, NULL},
	{"strided-32x256", 64, 256, 32, 1024, 512, 0, NULL, NULL},
	{"strided-7x36", 12, 36, 7, 100, 40, 0, NULL, NULL},
	/* 8-byte accesses on one row */
	{"contiguous-4104B-w8", 8, 4104, 1, 0, 0, 0, NULL, NULL},
	/* more bytes than the capped grid's threads (1024 blocks x 256): the row loop strides */
	{"contiguous-300001B-stride", 1, 300001, 1, 0, 0, 0, NULL, NULL},
};

static struct toggle_copy copy_of(const struct copy_case *c, unsigned char *d_src)
{
	struct toggle_copy k;

	memset(&k, 0, sizeof k);
	k.dst = (CUdeviceptr)(uintptr_t)c->d_dst;
	k.src = (CUdeviceptr)(uintptr_t)(d_src + c->src_off);
	k.row_bytes = c->row_bytes;
	k.rows = c->rows;
	k.dst_pitch = c->dst_pitch ? c->dst_pitch : c->row_bytes;
	k.src_pitch = c->src_pitch ? c->src_pitch : c->row_bytes;
	return k;
}

/* Mismatching bytes of case c after step s (on: the copy ran). */
static uint64_t copy_check(const struct copy_case *c, long long s, bool on)
{
	size_t dp = c->dst_pitch ? c->dst_pitch : c->row_bytes;
	size_t sp = c->src_pitch ? c->src_pitch : c->row_bytes;
	uint64_t bad = 0;

	for (size_t i = 0; i < c->dst_size; i++) {
		size_t r = i / dp, col = i % dp;
		unsigned char want = SENTINEL;

		if (on && r < c->rows && col < c->row_bytes)
			want = pattern(c->src_off + r * sp + col, s);
		bad += c->h_dst[i] != want;
	}
	return bad;
}

static uint64_t copy_leg_run(enum toggle_mode mode, long long steps, uint64_t seed)
{
	bool device = mode == TOGGLE_MODE_DEVICE;
	struct toggle_agent *a = open_agent(mode, device); /* strict: device mode or nothing */
	cudaStream_t s0;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	unsigned char *d_src;
	long long *d_step;
	uint64_t rng = seed, mismatches = 0, copies_on = 0;
	uint32_t prev = 0;
	int diag = 0;
	struct toggle_stats st0, st1;
	struct toggle_graph_status gs;

	CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&d_src, SRC_SIZE));
	CUDA_CHECK(cudaMalloc(&d_step, sizeof(long long)));
	for (int c = 0; c < N_COPY; c++) {
		struct copy_case *k = &cases[c];
		size_t dp = k->dst_pitch ? k->dst_pitch : k->row_bytes;

		k->dst_size = (k->rows - 1) * dp + k->row_bytes + (k->dst_pitch ? dp - k->row_bytes : 0);
		CUDA_CHECK(cudaMalloc(&k->d_dst, k->dst_size));
		CUDA_CHECK(cudaMallocHost(&k->h_dst, k->dst_size));
		if (k->src_off + (k->rows - 1) * (k->src_pitch ? k->src_pitch : k->row_bytes) +
			    k->row_bytes > SRC_SIZE)
			die("copy case %s does not fit the source", k->name);
	}
	CUDA_CHECK(cudaDeviceSynchronize());

	TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
	TG_CHECK(a, toggle_capture_planner(a, (CUstream)s0)); /* nothing outside device mode */
	fill<<<64, 256, 0, s0>>>(d_src, SRC_SIZE, d_step);
	CUDA_LAUNCHED();
	for (int c = 0; c < N_COPY; c++) {
		struct toggle_copy k = copy_of(&cases[c], d_src);

		TG_CHECK(a, toggle_copy_out(a, (CUstream)s0, hook_of(c), &k));
	}
	CUDA_CHECK(cudaStreamEndCapture(s0, &graph));
	TG_CHECK(a, toggle_capture_end(a));
	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)graph, &exec));
	TG_CHECK(a, toggle_graph_status(a, (CUgraph)graph, &gs));
	if (gs.nodes != N_COPY || gs.mode != mode)
		die("copy graph: %u producers in mode %d, not %d in mode %d (%s)", gs.nodes,
		    (int)gs.mode, N_COPY, (int)mode, gs.note);
	toggle_stats_get(a, &st0);

	for (long long s = 0; s < steps; s++) {
		uint32_t want = pick(&rng, prev, N_COPY);
		struct toggle_set set = set_of(want, N_COPY), eff;

		prev = want;
		TG_CHECK(a, toggle_set_enabled(a, &set));
		TG_CHECK(a, toggle_step_begin(a, s, &eff));
		if (bits_of(&eff, N_COPY) != want)
			die("step %lld: the gate disagrees with the standing set", s);
		for (int c = 0; c < N_COPY; c++)
			CUDA_CHECK(cudaMemsetAsync(cases[c].d_dst, SENTINEL, cases[c].dst_size, s0));
		set_step<<<1, 1, 0, s0>>>(d_step, s);
		CUDA_LAUNCHED();
		TG_CHECK(a, toggle_graph_launch(a, (CUgraph)graph, exec, (CUstream)s0));
		for (int c = 0; c < N_COPY; c++)
			CUDA_CHECK(cudaMemcpyAsync(cases[c].h_dst, cases[c].d_dst, cases[c].dst_size,
						   cudaMemcpyDeviceToHost, s0));
		CUDA_CHECK(cudaStreamSynchronize(s0));
		for (int c = 0; c < N_COPY; c++) {
			bool on = want >> c & 1;
			uint64_t bad = copy_check(&cases[c], s, on);

			copies_on += on;
			if (bad) {
				mismatches++;
				if (diag++ < MAX_DIAG)
					printf("gpu-region: copy-%s: step %lld %s (%s): %" PRIu64
					       " bytes differ\n", mode_name(mode), s, cases[c].name,
					       on ? "on" : "off", bad);
			}
		}
	}
	toggle_stats_get(a, &st1);
	if (device) {
		struct toggle_device_counters dc;

		TG_CHECK(a, toggle_graph_device_counters(a, (CUgraph)graph, &dc));
		if (st1.node_set_calls != st0.node_set_calls || dc.device_failures) {
			printf("gpu-region: copy-device: host made %" PRIu64 " node set calls, planner "
			       "%" PRIu64 " failed device calls (both must be 0)\n",
			       st1.node_set_calls - st0.node_set_calls, dc.device_failures);
			mismatches++;
		}
		printf("gpu-region: copy-device: planner runs=%" PRIu64 " device calls=%" PRIu64
		       " host node set calls=%" PRIu64 "\n", dc.planner_runs, dc.device_calls,
		       st1.node_set_calls - st0.node_set_calls);
	}
	printf("gpu-region: copy-%s: %s steps=%lld copies=%d copies_on=%" PRIu64
	       " mismatches=%" PRIu64 "\n", mode_name(mode), mismatches ? "FAIL" : "PASS", steps,
	       N_COPY, copies_on, mismatches);

	TG_CHECK(a, toggle_graph_bind(a, (CUgraph)graph, NULL));
	CUDA_CHECK(cudaGraphExecDestroy(exec));
	toggle_agent_close(a);
	CUDA_CHECK(cudaGraphDestroy(graph));
	for (int c = 0; c < N_COPY; c++) {
		CUDA_CHECK(cudaFree(cases[c].d_dst));
		CUDA_CHECK(cudaFreeHost(cases[c].h_dst));
	}
	CUDA_CHECK(cudaFree(d_src));
	CUDA_CHECK(cudaFree(d_step));
	CUDA_CHECK(cudaStreamDestroy(s0));
	return mismatches;
}

/* ---- main ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: gpu_region [--steps N] [--seed N]\n"
		   "  --steps N  steps of each leg (default 2000)\n"
		   "  --seed N   random seed (default 0x5eed)\n");
}

int main(int argc, char **argv)
{
	long long steps = 2000;
	uint64_t seed = 0x5eed, bad[5];
	static const char *const legs[5] = {"region-lazy", "region-eager", "copy-lazy",
					    "copy-eager", "copy-device"};
	int n = 0, drv = 0;
	bool fail = false;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		char *end = NULL;

		if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
			steps = strtoll(argv[++i], &end, 10);
			if (end == argv[i] || *end || steps < 1 || steps > 100000000LL)
				goto bad;
		} else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
			seed = strtoull(argv[++i], &end, 0);
			if (end == argv[i] || *end)
				goto bad;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			goto bad;
		}
		continue;
bad:
		fprintf(stderr, "gpu_region: bad argument: %s\n", argv[i]);
		usage(stderr);
		return 2;
	}
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("gpu-region: SKIPPED: no CUDA device\n");
		return 0;
	}
	CUDA_CHECK(cudaSetDevice(0));
	CUDA_CHECK(cudaFree(0)); /* the primary context is current before any agent opens */
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	printf("gpu-region: driver %d.%d, libtoggle %u.%u, steps=%lld per leg, seed=0x%" PRIx64
	       "\n", drv / 1000, drv % 1000 / 10, toggle_version() >> 16, toggle_version() & 0xffff,
	       steps, seed);

	bad[0] = region_leg_run(TOGGLE_MODE_LAZY, steps, seed ^ 1);
	bad[1] = region_leg_run(TOGGLE_MODE_EAGER, steps, seed ^ 2);
	bad[2] = copy_leg_run(TOGGLE_MODE_LAZY, steps, seed ^ 3);
	bad[3] = copy_leg_run(TOGGLE_MODE_EAGER, steps, seed ^ 4);
	bad[4] = copy_leg_run(TOGGLE_MODE_DEVICE, steps, seed ^ 5);
	for (int i = 0; i < 5; i++) {
		if (bad[i]) {
			printf("gpu-region: FAIL (%s: %" PRIu64 " mismatches)\n", legs[i], bad[i]);
			fail = true;
		}
	}
	if (fail)
		return 1;
	printf("gpu-region: PASS\n");
	return 0;
}
