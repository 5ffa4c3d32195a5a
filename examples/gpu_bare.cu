/*
 * gpu_bare.cu - the real-GPU proof of libtoggle's producer-free ("bare")
 * exec (run by scripts/gpu-check.sh after gpu_check).
 *
 * The graph: a head producer, then NB blocks, then a tail producer.  Each
 * block is captured on two streams (fork and join through events):
 *
 *	A -> {P0 (s0), P1 (s1)} -> B -> P2 -> {C (s0), D (s1)} -> next block's A
 *
 * so producers have one or two dependencies and one or two dependents, and
 * B depends on two producers.  A, B, C and D are the non-producer kernels:
 * one block each; thread 0 takes a ticket from a global counter when the
 * kernel starts and another when it ends (after a ~20 µs spin that makes
 * concurrent starts show), and each computes its region of an activation
 * from its predecessors' regions.  Each producer copies a region out and
 * counts itself (and its hook) in device memory.
 *
 * What it checks, through a lazy agent with the producer-free exec on:
 *  1. At steps whose set is empty the agent launches the bare exec (status
 *     says so): no producer ran, every non-producer kernel ran exactly once,
 *     every dependency of the captured graph held (end ticket of A before
 *     start ticket of B, and so on: the reconnected edges), and the
 *     activation equals the main exec's, bit for bit.  No
 *     cuGraphNodeSetEnabled call is made to switch to it.
 *  2. At other steps the full exec (a clone of the graph without its
 *     lifetime reference) runs exactly the set's producers, with the same
 *     order checks; coming back from the bare exec costs only the hooks that
 *     differ from the set the full exec last held.
 *  3. Pipelined: 512 steps with random sets (a third of them empty; in every
 *     64 steps one held for 20, which gets its set exec), no host sync; a one-thread kernel writes the step in stream order before each
 *     launch and each producer records (step, hook): every step ran exactly
 *     its own set, whichever exec ran it.
 *  4. Rebind (a new exec bound explicitly), re-instantiation (a new exec
 *     only launched), forget (launch refused) and close: the bare exec is
 *     rebuilt and runs as in 1.
 *  5. Device mode's decision (informational where device mode is missing):
 *     a graph its planner toggles has no bare exec, and the driver refuses
 *     cuGraphDestroyNode on a device-updatable node of a clone (the reason).
 *  6. Figures (kernels without the spin): replay µs of the graph without
 *     producers (the floor, captured so), the bare exec, the main exec with every producer disabled and
 *     with every one enabled; the bind time and device memory of the bare
 *     exec; host µs of the launch that switches exec.
 *
 * Output: progress lines, "gpu-bare: figures: ..." lines, then
 * "gpu-bare: PASS" (exit 0), or "gpu-bare: FAIL (...)" (exit 1);
 * "gpu-bare: SKIPPED: ..." (exit 0) without a CUDA device.
 * Written in a plain C style, like gpu_check.cu.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "toggle.h"

#define GPU_TAG "gpu-bare"
#include "gpu_common.h"

/* ---- the shape of the workload ------------------------------------------------ */

#define NB        16              /* blocks */
#define NK        (4 * NB)        /* non-producer kernels: A, B, C, D per block */
#define REG       4096            /* floats per region */
#define N_REG     4               /* regions: A, B, C, D */
#define N_TYPES   4               /* resid_post, attn_out, mlp_out (per block), edge */
#define N_HOOKS   (N_TYPES * NB)
#define N_PROD    (3 * NB + 2)    /* producers in the graph */
#define PIPE      512             /* pipelined steps */
#define RING_CAP  (PIPE * N_PROD)
#define THREADS   256
#define SPIN_NS   20000ull        /* checks: makes a start before a dependency's end show */

/* Spin of the kernels captured next: SPIN_NS for the checks, 0 for the figures. */
static unsigned long long g_spin_ns = SPIN_NS;

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out", "mlp_out", "edge"};
enum { T_P0 = 0, T_P1 = 1, T_P2 = 2, T_EDGE = 3 };

struct ring_rec {
	int32_t hook;
	int32_t pad;
	long long step;
};

/* Device state, one allocation each. */
struct dev {
	cudaStream_t s0, s1;
	float *act;                 /* N_REG regions */
	float *out;                 /* N_HOOKS slots of REG floats */
	unsigned long long *ticket; /* the global ticket counter */
	unsigned long long *t_in;   /* NK: ticket at start, ~0 = did not run */
	unsigned long long *t_out;  /* NK: ticket at the end */
	unsigned *runs;             /* NK: times each kernel ran */
	unsigned *prod;             /* N_HOOKS: times each producer ran */
	long long *d_step;
	struct ring_rec *ring;
	unsigned long long *ring_n;
};

/* ---- kernels ----------------------------------------------------------------- */

__device__ unsigned long long gb_now(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* out = in1 * a + in2 * b, elementwise over one region; tickets at start and end. */
__global__ void gb_compute(struct dev d, int id, int in1, int in2, int outr, float a, float b,
			   unsigned long long spin)
{
	__shared__ unsigned long long start;

	if (threadIdx.x == 0) {
		start = gb_now();
		d.t_in[id] = atomicAdd(d.ticket, 1ull);
		atomicAdd(&d.runs[id], 1u);
	}
	__syncthreads();
	for (int i = threadIdx.x; i < REG; i += blockDim.x) {
		float x = d.act[in1 * REG + i], y = d.act[in2 * REG + i];
		d.act[outr * REG + i] = x * a + y * b + 0.001f * (float)id;
	}
	if (threadIdx.x == 0)
		while (gb_now() - start < spin)
			;
	__syncthreads();
	__threadfence();
	if (threadIdx.x == 0)
		d.t_out[id] = atomicAdd(d.ticket, 1ull);
}

/* A producer: copy a region to its hook's slot, count itself, record (step, hook). */
__global__ void gb_produce(struct dev d, int hook, int region)
{
	for (int i = threadIdx.x; i < REG; i += blockDim.x)
		d.out[hook * REG + i] = d.act[region * REG + i];
	if (threadIdx.x == 0) {
		unsigned long long slot;

		atomicAdd(&d.prod[hook], 1u);
		slot = atomicAdd(d.ring_n, 1ull);
		if (slot < RING_CAP) {
			d.ring[slot].hook = hook;
			d.ring[slot].step = *d.d_step;
		}
	}
}

__global__ void gb_set_step(long long *d_step, long long step)
{
	*d_step = step;
}

/* A device-updatable kernel for the driver-rule probe (never runs). */
__global__ void gb_nothing(int x)
{
	(void)x;
}

/* ---- helpers -------------------------------------------------------------------- */

static struct toggle_hook hook_of(int h)
{
	struct toggle_hook k;

	k.type = (uint16_t)(h / NB);
	k.layer = (uint16_t)(h % NB);
	return k;
}

static int hook_idx(int type, int layer)
{
	return type * NB + layer;
}

static void set_put(struct toggle_set *s, int h)
{
	if (toggle_set_add(s, hook_of(h)) != TOGGLE_OK)
		die("toggle_set_add(%d)", h);
}

/* The hooks the graph has producers for: every P0/P1/P2 and edge:0, edge:1. */
static bool hook_in_graph(int h)
{
	return h / NB != T_EDGE || h % NB < 2;
}

/* Whether two sets enable the same hooks of the graph (the ones libtoggle sees). */
static bool same_in_graph(const struct toggle_set *x, const struct toggle_set *y)
{
	for (int h = 0; h < N_HOOKS; h++)
		if (hook_in_graph(h) &&
		    toggle_set_contains(x, hook_of(h)) != toggle_set_contains(y, hook_of(h)))
			return false;
	return true;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, gpu_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- capture ------------------------------------------------------------------------ */

static void launch_compute(struct dev *d, cudaStream_t s, int id, int in1, int in2, int outr)
{
	gb_compute<<<1, THREADS, 0, s>>>(*d, id, in1, in2, outr, 0.5f + 0.01f * (float)(id % 7),
					  0.25f, g_spin_ns);
	CUDA_LAUNCHED();
}

static void launch_producer(struct toggle_agent *a, struct dev *d, cudaStream_t s, int hook,
			    int region, bool record)
{
	gb_produce<<<1, THREADS, 0, s>>>(*d, hook, region);
	CUDA_LAUNCHED();
	if (record)
		TG_CHECK(a, toggle_record_producer(a, (CUstream)s, hook_of(hook)));
}

/*
 * The graph (see the top of the file).  with_producers false: the same
 * kernels without any producer, the floor.  agent may be NULL (no record).
 */
static cudaGraph_t capture(struct toggle_agent *a, struct dev *d, bool with_producers)
{
	cudaEvent_t ev[4 * NB + 2];
	cudaGraph_t g;
	int ne = 0;

	for (int i = 0; i < 4 * NB + 2; i++)
		CUDA_CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
	if (a)
		TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(d->s0, cudaStreamCaptureModeThreadLocal));
	if (with_producers)
		launch_producer(a, d, d->s0, hook_idx(T_EDGE, 0), 0, a != NULL);
	for (int l = 0; l < NB; l++) {
		int A = 4 * l, B = A + 1, C = A + 2, D = A + 3;

		/* A reads C and D of the block before (regions 2 and 3). */
		launch_compute(d, d->s0, A, 2, 3, 0);
		CUDA_CHECK(cudaEventRecord(ev[ne], d->s0));
		CUDA_CHECK(cudaStreamWaitEvent(d->s1, ev[ne++], 0));
		if (with_producers) {
			launch_producer(a, d, d->s0, hook_idx(T_P0, l), 0, a != NULL);
			launch_producer(a, d, d->s1, hook_idx(T_P1, l), 0, a != NULL);
		}
		CUDA_CHECK(cudaEventRecord(ev[ne], d->s1));
		CUDA_CHECK(cudaStreamWaitEvent(d->s0, ev[ne++], 0));
		launch_compute(d, d->s0, B, 0, 0, 1);
		if (with_producers)
			launch_producer(a, d, d->s0, hook_idx(T_P2, l), 1, a != NULL);
		CUDA_CHECK(cudaEventRecord(ev[ne], d->s0));
		CUDA_CHECK(cudaStreamWaitEvent(d->s1, ev[ne++], 0));
		launch_compute(d, d->s0, C, 1, 0, 2);
		launch_compute(d, d->s1, D, 1, 1, 3);
		CUDA_CHECK(cudaEventRecord(ev[ne], d->s1));
		CUDA_CHECK(cudaStreamWaitEvent(d->s0, ev[ne++], 0));
	}
	if (with_producers)
		launch_producer(a, d, d->s0, hook_idx(T_EDGE, 1), 3, a != NULL);
	CUDA_CHECK(cudaStreamEndCapture(d->s0, &g));
	if (a)
		TG_CHECK(a, toggle_capture_end(a));
	for (int i = 0; i < 4 * NB + 2; i++)
		CUDA_CHECK(cudaEventDestroy(ev[i]));
	return g;
}

/* ---- one checked step ----------------------------------------------------------------- */

static float h_init[N_REG * REG];
static float h_ref[N_REG * REG];  /* the main exec's activation, all producers on */
static bool have_ref;

/* Reset the device state of one launch: activation, tickets, counters. */
static void reset(struct dev *d)
{
	CUDA_CHECK(cudaMemcpyAsync(d->act, h_init, sizeof h_init, cudaMemcpyHostToDevice, d->s0));
	CUDA_CHECK(cudaMemsetAsync(d->ticket, 0, sizeof(unsigned long long), d->s0));
	CUDA_CHECK(cudaMemsetAsync(d->t_in, 0xff, NK * sizeof(unsigned long long), d->s0));
	CUDA_CHECK(cudaMemsetAsync(d->t_out, 0xff, NK * sizeof(unsigned long long), d->s0));
	CUDA_CHECK(cudaMemsetAsync(d->runs, 0, NK * sizeof(unsigned), d->s0));
	CUDA_CHECK(cudaMemsetAsync(d->prod, 0, N_HOOKS * sizeof(unsigned), d->s0));
	CUDA_CHECK(cudaMemsetAsync(d->ring_n, 0, sizeof(unsigned long long), d->s0));
}

/*
 * After one launch (stream idle): every non-producer kernel ran once, every
 * dependency held, exactly the producers of `want` ran once, and the
 * activation equals the reference.  Returns the number of violations and
 * prints the first few.
 */
static unsigned check_launch(struct dev *d, const struct toggle_set *want, const char *what)
{
	static unsigned long long t_in[NK], t_out[NK];
	static unsigned runs[NK], prod[N_HOOKS];
	static float act[N_REG * REG];
	unsigned bad = 0;

	CUDA_CHECK(cudaStreamSynchronize(d->s0));
	CUDA_CHECK(cudaMemcpy(t_in, d->t_in, sizeof t_in, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(t_out, d->t_out, sizeof t_out, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(runs, d->runs, sizeof runs, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(prod, d->prod, sizeof prod, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(act, d->act, sizeof act, cudaMemcpyDeviceToHost));
#define BAD(...)                                                                     \
	do {                                                                         \
		if (bad++ < 8) {                                                     \
			printf("gpu-bare: %s: ", what);                              \
			printf(__VA_ARGS__);                                         \
			printf("\n");                                                \
		}                                                                    \
	} while (0)
	for (int k = 0; k < NK; k++)
		if (runs[k] != 1)
			BAD("kernel %d ran %u times", k, runs[k]);
	for (int l = 0; l < NB; l++) {
		int A = 4 * l, B = A + 1, C = A + 2, D = A + 3;
		int edges[5][2] = {{A, B}, {B, C}, {B, D}, {C, A + 4}, {D, A + 4}};

		for (int e = 0; e < 5; e++) {
			int u = edges[e][0], v = edges[e][1];
			if (v >= NK)
				continue;
			if (!(t_out[u] < t_in[v]))
				BAD("kernel %d started (ticket %llu) before kernel %d ended (%llu)", v,
				    t_in[v], u, t_out[u]);
		}
	}
	for (int h = 0; h < N_HOOKS; h++) {
		unsigned expect = hook_in_graph(h) && toggle_set_contains(want, hook_of(h)) ? 1 : 0;
		if (prod[h] != expect)
			BAD("producer of hook %d ran %u times, expected %u", h, prod[h], expect);
	}
	if (!have_ref) {
		memcpy(h_ref, act, sizeof act);
		have_ref = true;
	} else if (memcmp(act, h_ref, sizeof act) != 0) {
		BAD("the activation differs from the main exec's");
	}
#undef BAD
	return bad;
}

/* Set, step_begin, launch, check; the exec that ran must be the bare one iff expect_bare. */
static unsigned step_checked(struct toggle_agent *a, struct dev *d, cudaGraph_t g,
			     cudaGraphExec_t e, long long step, const struct toggle_set *s,
			     bool expect_bare, const char *what)
{
	struct toggle_graph_status gs;
	unsigned bad;

	reset(d);
	TG_CHECK(a, toggle_set_enabled(a, s));
	TG_CHECK(a, toggle_step_begin(a, step, NULL));
	TG_CHECK(a, toggle_graph_launch(a, g, e, (CUstream)d->s0));
	bad = check_launch(d, s, what);
	TG_CHECK(a, toggle_graph_status(a, g, &gs));
	if (gs.bare_running != expect_bare) {
		printf("gpu-bare: %s: bare_running %d, expected %d\n", what, gs.bare_running,
		       expect_bare);
		bad++;
	}
	/* Every other set runs the full exec (host modes): never the main exec, whose
	 * lifetime reference the driver paces. */
	if (gs.full_running == expect_bare) {
		printf("gpu-bare: %s: full_running %d, expected %d\n", what, gs.full_running,
		       !expect_bare);
		bad++;
	}
	return bad;
}

/* Producers of the graph whose state differs between x and y: what a sync from x to y sets. */
static unsigned producers_differing(const struct toggle_set *x, const struct toggle_set *y)
{
	unsigned n = 0;

	for (int h = 0; h < N_HOOKS; h++)
		n += hook_in_graph(h) &&
		     toggle_set_contains(x, hook_of(h)) != toggle_set_contains(y, hook_of(h));
	return n;
}

static uint64_t node_calls(struct toggle_agent *a)
{
	struct toggle_stats st;

	toggle_stats_get(a, &st);
	return st.node_set_calls;
}

/* Host modes' second execs cloned (toggle_config.clone_execs) instead of assembled, the
 * default: main runs the lazy legs once each way. */
static bool g_clone_execs;

/* How the host-mode agent a built its second execs, as it should: every build assembled
 * (none cloned) by default, every one cloned with clone_execs; a violation else. */
static unsigned check_exec_builds(struct toggle_agent *a, const char *leg)
{
	struct toggle_stats st;

	toggle_stats_get(a, &st);
	printf("gpu-bare: %s: execs assembled %" PRIu64 ", cloned after a failed assembly %"
	       PRIu64 " (%s)\n", leg, st.assembled_builds, st.assemble_fallbacks,
	       g_clone_execs ? "clone_execs" : "the default");
	if (g_clone_execs ? st.assembled_builds != 0 || st.assemble_fallbacks != 0
			  : st.assembled_builds == 0 || st.assemble_fallbacks != 0) {
		printf("gpu-bare: %s: expected %s\n", leg,
		       g_clone_execs ? "no assembly" : "every exec assembled");
		return 1;
	}
	return 0;
}

static struct toggle_agent *open_agent(const struct toggle_catalog *cat, const char *name,
				       enum toggle_mode mode, bool no_bare)
{
	struct toggle_config cfg;
	struct toggle_agent *a = NULL;
	int r;

	memset(&cfg, 0, sizeof cfg);
	cfg.name = name;
	cfg.catalog = *cat;
	cfg.mode = mode;
	cfg.strict = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	cfg.no_bare_exec = no_bare;
	cfg.clone_execs = g_clone_execs;
	r = toggle_agent_open(&cfg, &a);
	if (r != TOGGLE_OK)
		return NULL;
	return a;
}

/* ---- 1, 2, 4: synchronous steps; rebind, re-instantiation, forget ------------------------ */

static unsigned run_steps(const struct toggle_catalog *cat, struct dev *d)
{
	struct toggle_agent *a = open_agent(cat, "gpu_bare_lazy", TOGGLE_MODE_LAZY, false);
	struct toggle_set none, all, half, quarter;
	struct toggle_graph_status gs;
	cudaGraph_t g;
	cudaGraphExec_t e, e2;
	unsigned bad = 0;
	uint64_t c0;
	long long step = 0;

	if (!a)
		die("toggle_agent_open(lazy) failed");
	g = capture(a, d, true);
	CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
	TG_CHECK(a, toggle_graph_bind(a, g, e));
	TG_CHECK(a, toggle_graph_status(a, g, &gs));
	if (!gs.bare_exec)
		die("no producer-free exec after bind: %s", toggle_last_error(a));
	toggle_set_clear(&none);
	toggle_set_fill(&all, cat);
	toggle_set_clear(&half);
	toggle_set_clear(&quarter);
	for (int h = 0; h < N_HOOKS; h++) {
		if (h % 2 == 0)
			set_put(&half, h);
		if (h % 4 == 1)
			set_put(&quarter, h);
	}

	/* All on: the full exec (a clone without the lifetime reference), no node set. */
	c0 = node_calls(a);
	bad += step_checked(a, d, g, e, ++step, &all, false, "full, all on (reference)");
	TG_CHECK(a, toggle_graph_status(a, g, &gs));
	if (!gs.full_running || node_calls(a) != c0) {
		printf("gpu-bare: all on: full_running %d (expected 1), %" PRIu64
		       " cuGraphNodeSetEnabled calls (expected 0)\n", gs.full_running,
		       node_calls(a) - c0);
		bad++;
	}
	bad += step_checked(a, d, g, e, ++step, &quarter, false, "full, quarter");
	c0 = node_calls(a);
	bad += step_checked(a, d, g, e, ++step, &none, true, "bare");
	if (node_calls(a) != c0) {
		printf("gpu-bare: switching to the bare exec made %" PRIu64
		       " cuGraphNodeSetEnabled calls, expected 0\n", node_calls(a) - c0);
		bad++;
	}
	bad += step_checked(a, d, g, e, ++step, &none, true, "bare, again");
	c0 = node_calls(a);
	bad += step_checked(a, d, g, e, ++step, &half, false, "full, half");
	/* The full exec still held `quarter`: only the producers that differ are set. */
	if (node_calls(a) - c0 != producers_differing(&quarter, &half)) {
		printf("gpu-bare: back to the full exec: %" PRIu64 " node calls, expected %u\n",
		       node_calls(a) - c0, producers_differing(&quarter, &half));
		bad++;
	}
	bad += step_checked(a, d, g, e, ++step, &none, true, "bare after half");
	bad += step_checked(a, d, g, e, ++step, &quarter, false, "full, quarter");
	printf("gpu-bare: steps: bare and full execs alternate, %u violations\n", bad);

	/* 4. Rebind: a new exec bound explicitly. */
	CUDA_CHECK(cudaGraphInstantiate(&e2, g, 0));
	TG_CHECK(a, toggle_graph_bind(a, g, e2));
	CUDA_CHECK(cudaGraphExecDestroy(e));
	e = e2;
	bad += step_checked(a, d, g, e, ++step, &none, true, "bare after rebind");
	bad += step_checked(a, d, g, e, ++step, &half, false, "full after rebind");
	/* Re-instantiated and only launched: the launch rebinds. */
	CUDA_CHECK(cudaGraphInstantiate(&e2, g, 0));
	bad += step_checked(a, d, g, e2, ++step, &none, true, "bare after re-instantiation");
	bad += step_checked(a, d, g, e2, ++step, &quarter, false, "full after re-instantiation");
	CUDA_CHECK(cudaGraphExecDestroy(e));
	e = e2;
	{
		struct toggle_stats st;
		toggle_stats_get(a, &st);
		if (st.bare_builds != 3 || st.bare_build_failures != 0) {
			printf("gpu-bare: %" PRIu64 " bare builds, %" PRIu64
			       " failures; expected 3 and 0\n", st.bare_builds, st.bare_build_failures);
			bad++;
		}
	}
	bad += check_exec_builds(a, "steps");
	/* Forget: launches refused. */
	TG_CHECK(a, toggle_graph_forget(a, g));
	TG_CHECK(a, toggle_step_begin(a, ++step, NULL));
	if (toggle_graph_launch(a, g, e, (CUstream)d->s0) != TOGGLE_ESTALE) {
		printf("gpu-bare: a forgotten graph's launch was not refused\n");
		bad++;
	}
	CUDA_CHECK(cudaStreamSynchronize(d->s0));
	toggle_agent_close(a);
	CUDA_CHECK(cudaGraphExecDestroy(e));
	CUDA_CHECK(cudaGraphDestroy(g));
	printf("gpu-bare: rebind, re-instantiation, forget, close: %u violations in all\n", bad);
	return bad;
}

/* ---- 3: pipelined steps ------------------------------------------------------------------ */

/* seed: the random walk's, with held segments; 0: all on alternating with a set in
 * between at every step (a per-step plan), which after the first steps runs the
 * all-on exec and the full exec in turn with no node set. */
static unsigned run_pipelined(const struct toggle_catalog *cat, struct dev *d, uint64_t seed)
{
	const char *leg = seed ? "pipelined" : "alternating";
	uint64_t sets_before = 0; /* node sets made by the end of step 2 (alternating) */
	static struct toggle_set sets[PIPE];
	static struct ring_rec ring[RING_CAP];
	static unsigned char seen[PIPE][N_HOOKS];
	struct toggle_agent *a = open_agent(cat, "gpu_bare_pipe", TOGGLE_MODE_LAZY, false);
	unsigned long long n = 0;
	unsigned bad = 0, bare_steps = 0, held_mixed = 0, held_all = 0, held_new = 0;
	int last_held = -1; /* the last held set in between a set exec was wanted for */
	bool toggled = false, all_on_due = false; /* a set in between ran; then all on */
	cudaGraph_t g;
	cudaGraphExec_t e;
	uint64_t rng = seed;

	if (!a)
		die("toggle_agent_open(pipelined) failed");
	g = capture(a, d, true);
	CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
	TG_CHECK(a, toggle_graph_bind(a, g, e));
	reset(d);
	CUDA_CHECK(cudaStreamSynchronize(d->s0));
	for (int i = 0; i < PIPE; i++) {
		unsigned kind = (unsigned)(gpu_rng_next(&rng) % 3);

		toggle_set_clear(&sets[i]);
		if (!seed) {
			for (int h = 0; h < N_HOOKS; h++)
				if (i % 2 || h % 2 == 0)
					set_put(&sets[i], h);
		} else if (i % 64 == 40 && (i / 64) % 2 == 1) {
			/* Every other held segment all on, after sets in between ran
			 * on the full exec (node sets): all on gets its all-on exec
			 * then, the full exec's graph instantiated again. */
			for (int h = 0; h < N_HOOKS; h++)
				set_put(&sets[i], h);
		} else if (i % 64 >= 40 && i % 64 < 60) {
			/* Held for 20 steps: long enough for a set exec (a set in between
			 * that holds, libtoggle.md) to be built and run. */
			sets[i] = sets[i - 1];
		} else if (kind != 0) {
			unsigned density = (unsigned)(gpu_rng_next(&rng) % 101);
			for (int h = 0; h < N_HOOKS; h++)
				if (gpu_rng_next(&rng) % 100 < density)
					set_put(&sets[i], h);
		}
		{
			bool fits = true, all = true; /* none / every hook of the graph */
			for (int h = 0; h < N_HOOKS; h++) {
				if (!hook_in_graph(h))
					continue;
				if (toggle_set_contains(&sets[i], hook_of(h)))
					fits = false;
				else
					all = false;
			}
			bare_steps += fits;
			held_mixed += i % 64 == 59 && !fits && !all;
			held_all += i % 64 == 59 && all;
			/* A held set in between needs a build of its own unless the
			 * set exec the last one got still fits; all on needs one, the
			 * all-on exec, at the step after it first runs on the full
			 * exec that a set in between set, kept from then on. */
			if (i % 64 == 59 && !fits && !all) {
				held_new += last_held < 0 || !same_in_graph(&sets[last_held], &sets[i]);
				last_held = i;
			}
			all_on_due = all_on_due || (all && toggled && i + 1 < PIPE);
			toggled = toggled || (!fits && !all);
		}
		TG_CHECK(a, toggle_set_enabled(a, &sets[i]));
		TG_CHECK(a, toggle_step_begin(a, i, NULL));
		gb_set_step<<<1, 1, 0, d->s0>>>(d->d_step, i);
		CUDA_LAUNCHED();
		TG_CHECK(a, toggle_graph_launch(a, g, e, (CUstream)d->s0));
		if (i == 2) {
			struct toggle_stats st2;
			toggle_stats_get(a, &st2);
			sets_before = st2.node_set_calls;
		}
	}
	CUDA_CHECK(cudaStreamSynchronize(d->s0));
	CUDA_CHECK(cudaMemcpy(&n, d->ring_n, sizeof n, cudaMemcpyDeviceToHost));
	if (n > RING_CAP)
		die("%s: ring overflow (%llu records)", leg, n);
	CUDA_CHECK(cudaMemcpy(ring, d->ring, (size_t)n * sizeof ring[0], cudaMemcpyDeviceToHost));
	memset(seen, 0, sizeof seen);
	for (unsigned long long r = 0; r < n; r++) {
		if (ring[r].step < 0 || ring[r].step >= PIPE || ring[r].hook < 0 ||
		    ring[r].hook >= N_HOOKS) {
			bad++;
			continue;
		}
		seen[ring[r].step][ring[r].hook]++;
	}
	for (int i = 0; i < PIPE; i++)
		for (int h = 0; h < N_HOOKS; h++) {
			unsigned want = hook_in_graph(h) && toggle_set_contains(&sets[i], hook_of(h));
			if (seen[i][h] != want) {
				if (bad < 8)
					printf("gpu-bare: %s step %d hook %d ran %u times, "
					       "expected %u\n", leg, i, h, seen[i][h], want);
				bad++;
			}
		}
	{
		struct toggle_graph_status gs;
		TG_CHECK(a, toggle_graph_status(a, g, &gs));
		if (gs.bare_replays != bare_steps) {
			printf("gpu-bare: %s: %" PRIu64 " bare replays, expected %u\n", leg,
			       gs.bare_replays, bare_steps);
			bad++;
		}
		struct toggle_stats st;
		toggle_stats_get(a, &st);
		/* The held sets that were in between got set execs, and they ran. */
		if (held_mixed && (!st.set_builds || !gs.set_replays)) {
			printf("gpu-bare: %s: %u held sets in between, %" PRIu64 " set execs "
			       "built, %" PRIu64 " set-exec replays\n", leg, held_mixed, st.set_builds,
			       gs.set_replays);
			bad++;
		}
		/* A build for each held set in between the set exec did not hold
		 * already, one for the all-on exec, and none other (random sets
		 * never hold; the all-on exec serves every all on after it). */
		uint64_t want_builds = held_new + (all_on_due ? 1u : 0u);
		if (st.set_builds + st.set_build_failures != want_builds) {
			printf("gpu-bare: %s: %u held sets in between (%u new) and %u held all "
			       "on: %" PRIu64 " set and all-on execs built (%" PRIu64 " failed), want %"
			       PRIu64 "\n", leg, held_mixed, held_new, held_all, st.set_builds,
			       st.set_build_failures, want_builds);
			bad++;
		}
		/* Alternating: from step 3 on, all on runs the all-on exec and the set
		 * in between the full exec, which kept its states: no node set. */
		if (!seed && (st.node_set_calls != sets_before || gs.set_replays != PIPE / 2 - 1)) {
			printf("gpu-bare: %s: %" PRIu64 " node sets after step 2, %" PRIu64 " launches "
			       "of the all-on exec (want 0 and %d)\n", leg,
			       st.node_set_calls - sets_before, gs.set_replays, PIPE / 2 - 1);
			bad++;
		}
		printf("gpu-bare: %s: %u held sets in between (%u new), %u held all on: %" PRIu64
		       " set and all-on execs built (%" PRIu64 " failed), %" PRIu64 " launches ran one\n",
		       leg, held_mixed, held_new, held_all, st.set_builds, st.set_build_failures,
		       gs.set_replays);
	}
	bad += check_exec_builds(a, leg);
	printf("gpu-bare: %s: %d steps (%u without a hook of the graph: bare exec), "
	       "%llu producer records, %u violations\n", leg, PIPE, bare_steps, n, bad);
	toggle_agent_close(a);
	CUDA_CHECK(cudaGraphExecDestroy(e));
	CUDA_CHECK(cudaGraphDestroy(g));
	return bad;
}

/* ---- 5: device mode's decision ------------------------------------------------------------ */

static unsigned run_device(const struct toggle_catalog *cat, struct dev *d)
{
	struct toggle_agent *a = open_agent(cat, "gpu_bare_device", TOGGLE_MODE_DEVICE, false);
	cudaLaunchAttribute attr;
	cudaLaunchConfig_t lc;
	cudaGraph_t g, clone;
	cudaGraphNode_t nodes[4];
	size_t nn = 4;
	cudaError_t err;
	unsigned bad = 0;

	/* The driver rule: a device-updatable node cannot leave a graph, clone or not. */
	memset(&attr, 0, sizeof attr);
	attr.id = cudaLaunchAttributeDeviceUpdatableKernelNode;
	attr.val.deviceUpdatableKernelNode.deviceUpdatable = 1;
	lc = cudaLaunchConfig_t();
	lc.gridDim = dim3(1, 1, 1);
	lc.blockDim = dim3(1, 1, 1);
	lc.stream = d->s0;
	lc.attrs = &attr;
	lc.numAttrs = 1;
	g = NULL;
	CUDA_CHECK(cudaStreamBeginCapture(d->s0, cudaStreamCaptureModeThreadLocal));
	err = cudaLaunchKernelEx(&lc, gb_nothing, 0);
	if (cudaStreamEndCapture(d->s0, &g) != cudaSuccess && err == cudaSuccess)
		err = cudaErrorStreamCaptureInvalidated;
	if (err != cudaSuccess) {
		printf("gpu-bare: device mode: no device-updatable nodes here (%s): decision "
		       "not probed\n", cudaGetErrorName(err));
		(void)cudaGetLastError();
	} else {
		/* Measured on the H200 (driver 580, CUDA 13.0): the clone itself is
		 * refused (cudaErrorNotSupported) for such a graph. */
		err = cudaGraphClone(&clone, g);
		if (err != cudaSuccess) {
			printf("gpu-bare: device mode: cuGraphClone of a graph with a device-updatable "
			       "node: %s (the reason a planner-toggled graph gets no bare exec)\n",
			       cudaGetErrorName(err));
			(void)cudaGetLastError();
		} else {
			CUDA_CHECK(cudaGraphGetNodes(clone, nodes, &nn));
			err = nn == 1 ? cudaGraphDestroyNode(nodes[0]) : cudaErrorInvalidValue;
			printf("gpu-bare: device mode: cuGraphDestroyNode on a device-updatable node "
			       "of a clone: %s (the reason a planner-toggled graph gets no bare "
			       "exec)\n", cudaGetErrorName(err));
			(void)cudaGetLastError();
			CUDA_CHECK(cudaGraphDestroy(clone));
		}
	}
	if (g)
		CUDA_CHECK(cudaGraphDestroy(g));

	if (!a || toggle_agent_mode(a) != TOGGLE_MODE_DEVICE) {
		printf("gpu-bare: device mode: not available here, graph decision not checked\n");
		if (a)
			toggle_agent_close(a);
		return 0;
	}
	{
		cudaGraph_t dg;
		cudaGraphExec_t de;
		void *f = NULL;
		struct toggle_graph_status gs;

		CUDA_CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&f, (const void *)gb_produce));
		TG_CHECK(a, toggle_capture_begin(a));
		CUDA_CHECK(cudaStreamBeginCapture(d->s0, cudaStreamCaptureModeThreadLocal));
		TG_CHECK(a, toggle_capture_planner(a, (CUstream)d->s0));
		for (int l = 0; l < NB; l++) {
			CUlaunchConfig c;
			struct dev dv = *d;
			int hook = hook_idx(T_P0, l), region = 0;
			void *params[3] = {&dv, &hook, &region};

			launch_compute(d, d->s0, 4 * l, 2, 3, 0);
			memset(&c, 0, sizeof c);
			c.gridDimX = c.gridDimY = c.gridDimZ = 1;
			c.blockDimX = THREADS;
			c.blockDimY = c.blockDimZ = 1;
			c.hStream = (CUstream)d->s0;
			TG_CHECK(a, toggle_launch_producer(a, &c, (CUfunction)f, params,
							   hook_of(hook)));
		}
		CUDA_CHECK(cudaStreamEndCapture(d->s0, &dg));
		TG_CHECK(a, toggle_capture_end(a));
		TG_CHECK(a, toggle_graph_instantiate(a, dg, (CUgraphExec *)&de));
		TG_CHECK(a, toggle_graph_status(a, dg, &gs));
		/* Issue 31: no clone, but a bare exec assembled node by node (gpu_devbare
		 * checks what it runs). */
		if (gs.mode != TOGGLE_MODE_DEVICE || !gs.bare_exec) {
			printf("gpu-bare: device mode: graph mode %d, bare_exec %d; expected device "
			       "mode and an assembled bare exec (%s)\n", (int)gs.mode, gs.bare_exec,
			       toggle_last_error(a));
			bad++;
		} else {
			printf("gpu-bare: device mode: the planner toggles the graph, bare exec "
			       "assembled\n");
		}
		CUDA_CHECK(cudaStreamSynchronize(d->s0));
		toggle_agent_close(a);
		CUDA_CHECK(cudaGraphExecDestroy(de));
		CUDA_CHECK(cudaGraphDestroy(dg));
	}
	return bad;
}

/* ---- 6: figures ---------------------------------------------------------------------------- */

static double time_replays(struct toggle_agent *a, cudaGraph_t g, cudaGraphExec_t e,
			   struct dev *d, int n)
{
	cudaEvent_t e0, e1;
	float ms = 0;

	CUDA_CHECK(cudaEventCreate(&e0));
	CUDA_CHECK(cudaEventCreate(&e1));
	for (int i = 0; i < 5; i++) {
		if (a)
			TG_CHECK(a, toggle_graph_launch(a, g, e, (CUstream)d->s0));
		else
			CUDA_CHECK(cudaGraphLaunch(e, d->s0));
	}
	CUDA_CHECK(cudaEventRecord(e0, d->s0));
	for (int i = 0; i < n; i++) {
		if (a)
			TG_CHECK(a, toggle_graph_launch(a, g, e, (CUstream)d->s0));
		else
			CUDA_CHECK(cudaGraphLaunch(e, d->s0));
	}
	CUDA_CHECK(cudaEventRecord(e1, d->s0));
	CUDA_CHECK(cudaEventSynchronize(e1));
	CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
	CUDA_CHECK(cudaEventDestroy(e0));
	CUDA_CHECK(cudaEventDestroy(e1));
	return (double)ms * 1000.0 / n;
}

static void figures(const struct toggle_catalog *cat, struct dev *d)
{
	enum { R = 7, N = 200 };
	struct toggle_agent *on = open_agent(cat, "gpu_bare_fig_on", TOGGLE_MODE_LAZY, false);
	struct toggle_agent *off = open_agent(cat, "gpu_bare_fig_off", TOGGLE_MODE_LAZY, true);
	double floor_us[R], bare_us[R], dis_us[R], all_us[R], sw_bare[64], sw_main[64];
	double sw_off[64], bind_on, bind_off, t0, rss0, rss1;
	size_t free0, free1, total;
	struct toggle_set none, all, one;
	cudaGraph_t gf, gon, goff;
	cudaGraphExec_t ef, eon, eoff;
	long long step = 0;

	if (!on || !off)
		die("figures: toggle_agent_open failed");
	g_spin_ns = 0; /* the kernels' own cost only */
	gf = capture(NULL, d, false);
	gon = capture(on, d, true);
	goff = capture(off, d, true);
	CUDA_CHECK(cudaGraphInstantiate(&ef, gf, 0));
	CUDA_CHECK(cudaGraphInstantiate(&eon, gon, 0));
	CUDA_CHECK(cudaGraphInstantiate(&eoff, goff, 0));
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemGetInfo(&free0, &total));
	rss0 = gpu_rss_kib();
	t0 = gpu_now_us();
	TG_CHECK(on, toggle_graph_bind(on, gon, eon));
	bind_on = gpu_now_us() - t0;
	t0 = gpu_now_us();
	TG_CHECK(off, toggle_graph_bind(off, goff, eoff));
	bind_off = gpu_now_us() - t0;
	toggle_set_clear(&none);
	toggle_set_fill(&all, cat);
	toggle_set_clear(&one);
	set_put(&one, hook_idx(T_P0, 3));
	TG_CHECK(on, toggle_set_enabled(on, &none));
	TG_CHECK(on, toggle_step_begin(on, ++step, NULL));
	TG_CHECK(on, toggle_graph_launch(on, gon, eon, (CUstream)d->s0)); /* uploads the bare exec */
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemGetInfo(&free1, &total));
	rss1 = gpu_rss_kib();
	for (int r = 0; r < R; r++) {
		floor_us[r] = time_replays(NULL, gf, ef, d, N);
		TG_CHECK(on, toggle_set_enabled(on, &none));
		TG_CHECK(on, toggle_step_begin(on, ++step, NULL));
		bare_us[r] = time_replays(on, gon, eon, d, N);
		TG_CHECK(off, toggle_set_enabled(off, &none));
		TG_CHECK(off, toggle_step_begin(off, step, NULL));
		dis_us[r] = time_replays(off, goff, eoff, d, N);
		TG_CHECK(off, toggle_set_enabled(off, &all));
		TG_CHECK(off, toggle_step_begin(off, ++step, NULL));
		all_us[r] = time_replays(off, goff, eoff, d, N);
	}
	/* Host µs of the launch that switches: to the bare exec, back to the main one
	 * (one node changed), against the same step on an agent without bare exec. */
	for (int i = 0; i < 64; i++) {
		CUDA_CHECK(cudaStreamSynchronize(d->s0));
		TG_CHECK(on, toggle_set_enabled(on, &none));
		TG_CHECK(on, toggle_step_begin(on, ++step, NULL));
		t0 = gpu_now_us();
		TG_CHECK(on, toggle_graph_launch(on, gon, eon, (CUstream)d->s0));
		sw_bare[i] = gpu_now_us() - t0;
		TG_CHECK(on, toggle_set_enabled(on, &one));
		TG_CHECK(on, toggle_step_begin(on, ++step, NULL));
		t0 = gpu_now_us();
		TG_CHECK(on, toggle_graph_launch(on, gon, eon, (CUstream)d->s0));
		sw_main[i] = gpu_now_us() - t0;
		TG_CHECK(off, toggle_set_enabled(off, i % 2 ? &none : &one));
		TG_CHECK(off, toggle_step_begin(off, step, NULL));
		t0 = gpu_now_us();
		TG_CHECK(off, toggle_graph_launch(off, goff, eoff, (CUstream)d->s0));
		sw_off[i] = gpu_now_us() - t0;
	}
	CUDA_CHECK(cudaStreamSynchronize(d->s0));
	{
		double fl = median(floor_us, R), ba = median(bare_us, R), di = median(dis_us, R);
		double al = median(all_us, R);
		printf("gpu-bare: figures: graph of %d kernels and %d producers (fork/join), "
		       "medians of %d x %d replays\n", NK, N_PROD, R, N);
		printf("gpu-bare: figures: replay us: floor %.2f, bare exec %.2f (%.3fx), all "
		       "disabled %.2f (%.3fx), all enabled %.2f (%.3fx)\n", fl, ba, ba / fl, di,
		       di / fl, al, al / fl);
		printf("gpu-bare: figures: bind us: with bare exec %.0f, without %.0f (build %.0f); "
		       "after its first launch: device memory %.1f KiB (cudaMemGetInfo), host "
		       "resident %.0f KiB more\n", bind_on, bind_off, bind_on - bind_off,
		       free0 >= free1 ? (double)(free0 - free1) / 1024.0 : 0.0, rss1 - rss0);
		printf("gpu-bare: figures: host us of the launch: switch to bare %.2f, back to full "
		       "(1 node) %.2f, without bare exec (1 node) %.2f\n", median(sw_bare, 64),
		       median(sw_main, 64), median(sw_off, 64));
	}
	/* Bind us, medians of R rebinds of one exec (unbound between): the second execs
	 * assembled (the default), cloned (clone_execs), none (no_bare_exec), alternating. */
	{
		struct toggle_agent *cl;
		cudaGraph_t gcl;
		cudaGraphExec_t ecl;
		double b_as[R], b_cl[R], b_no[R];

		g_clone_execs = true;
		cl = open_agent(cat, "gpu_bare_fig_clone", TOGGLE_MODE_LAZY, false);
		g_clone_execs = false;
		if (!cl)
			die("figures: toggle_agent_open(clone_execs) failed");
		gcl = capture(cl, d, true);
		CUDA_CHECK(cudaGraphInstantiate(&ecl, gcl, 0));
		for (int r = 0; r < R; r++) {
			TG_CHECK(on, toggle_graph_bind(on, gon, NULL));
			t0 = gpu_now_us();
			TG_CHECK(on, toggle_graph_bind(on, gon, eon));
			b_as[r] = gpu_now_us() - t0;
			TG_CHECK(cl, toggle_graph_bind(cl, gcl, NULL));
			t0 = gpu_now_us();
			TG_CHECK(cl, toggle_graph_bind(cl, gcl, ecl));
			b_cl[r] = gpu_now_us() - t0;
			TG_CHECK(off, toggle_graph_bind(off, goff, NULL));
			t0 = gpu_now_us();
			TG_CHECK(off, toggle_graph_bind(off, goff, eoff));
			b_no[r] = gpu_now_us() - t0;
		}
		printf("gpu-bare: figures: bind us, medians of %d rebinds: second execs assembled "
		       "%.0f, cloned (clone_execs) %.0f, none (no_bare_exec) %.0f\n", R,
		       median(b_as, R), median(b_cl, R), median(b_no, R));
		toggle_agent_close(cl);
		CUDA_CHECK(cudaGraphExecDestroy(ecl));
		CUDA_CHECK(cudaGraphDestroy(gcl));
	}
	toggle_agent_close(on);
	toggle_agent_close(off);
	CUDA_CHECK(cudaGraphExecDestroy(ef));
	CUDA_CHECK(cudaGraphExecDestroy(eon));
	CUDA_CHECK(cudaGraphExecDestroy(eoff));
	CUDA_CHECK(cudaGraphDestroy(gf));
	CUDA_CHECK(cudaGraphDestroy(gon));
	CUDA_CHECK(cudaGraphDestroy(goff));
}

/* ---- main ------------------------------------------------------------------------------------ */

static void device_header(void)
{
	struct cudaDeviceProp prop;
	int drv = 0;

	gpu_device_or_skip();
	CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	printf("gpu-bare: device 0: %s (sm_%d%d), driver %d.%d\n", prop.name, prop.major,
	       prop.minor, drv / 1000, drv % 1000 / 10);
}

int main(int argc, char **argv)
{
	struct toggle_catalog cat;
	struct dev d;
	char err[256];
	unsigned bad = 0;
	bool figs = !(argc > 1 && strcmp(argv[1], "--no-figures") == 0);

	setvbuf(stdout, NULL, _IOLBF, 0);
	device_header();
	cat.type_names = type_names;
	cat.n_types = N_TYPES;
	cat.n_layers = NB;
	if (toggle_catalog_validate(&cat, err, sizeof err) != TOGGLE_OK)
		die("catalog: %s", err);
	for (int i = 0; i < N_REG * REG; i++)
		h_init[i] = 0.5f + 0.25f * (float)((i * 7919) % 1000) / 1000.0f;

	memset(&d, 0, sizeof d);
	CUDA_CHECK(cudaStreamCreateWithFlags(&d.s0, cudaStreamNonBlocking));
	CUDA_CHECK(cudaStreamCreateWithFlags(&d.s1, cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&d.act, N_REG * REG * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&d.out, (size_t)N_HOOKS * REG * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&d.ticket, sizeof(unsigned long long)));
	CUDA_CHECK(cudaMalloc(&d.t_in, NK * sizeof(unsigned long long)));
	CUDA_CHECK(cudaMalloc(&d.t_out, NK * sizeof(unsigned long long)));
	CUDA_CHECK(cudaMalloc(&d.runs, NK * sizeof(unsigned)));
	CUDA_CHECK(cudaMalloc(&d.prod, N_HOOKS * sizeof(unsigned)));
	CUDA_CHECK(cudaMalloc(&d.d_step, sizeof(long long)));
	CUDA_CHECK(cudaMalloc(&d.ring, RING_CAP * sizeof(struct ring_rec)));
	CUDA_CHECK(cudaMalloc(&d.ring_n, sizeof(unsigned long long)));
	CUDA_CHECK(cudaMemset(d.d_step, 0, sizeof(long long)));

	bad += run_steps(&cat, &d);
	bad += run_pipelined(&cat, &d, 0xba7e);
	bad += run_pipelined(&cat, &d, 0);
	g_clone_execs = true; /* the clones: the assembly's fallback and the opt-out */
	printf("gpu-bare: the lazy legs again, with clone_execs\n");
	bad += run_steps(&cat, &d);
	bad += run_pipelined(&cat, &d, 0xc10e);
	g_clone_execs = false;
	bad += run_device(&cat, &d);
	if (figs)
		figures(&cat, &d);

	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaFree(d.act));
	CUDA_CHECK(cudaFree(d.out));
	CUDA_CHECK(cudaFree(d.ticket));
	CUDA_CHECK(cudaFree(d.t_in));
	CUDA_CHECK(cudaFree(d.t_out));
	CUDA_CHECK(cudaFree(d.runs));
	CUDA_CHECK(cudaFree(d.prod));
	CUDA_CHECK(cudaFree(d.d_step));
	CUDA_CHECK(cudaFree(d.ring));
	CUDA_CHECK(cudaFree(d.ring_n));
	CUDA_CHECK(cudaStreamDestroy(d.s0));
	CUDA_CHECK(cudaStreamDestroy(d.s1));
	if (bad) {
		printf("gpu-bare: FAIL (%u violations)\n", bad);
		return 1;
	}
	printf("gpu-bare: PASS\n");
	return 0;
}
