/*
 * gpu_check.cu - the real-GPU proof of libtoggle (run by scripts/gpu-check.sh).
 *
 * What it proves, with real stream capture, real instantiation and real
 * cuGraphNodeSetEnabled, in lazy mode and then in eager mode (two agents):
 *
 *  1. The three lanes agree at every replay: the producers that actually ran
 *     in a replay are exactly the hooks toggle_step_begin() returned for that
 *     replay's step.  Every producer appends {graph, hook, step} to a device
 *     ring; the host keeps a log of (step, graphs launched, effective set)
 *     and every WINDOW steps compares the two, hook by hook (missing, extra,
 *     duplicate, records of graphs that were not launched).
 *     Replays are pipelined (no host sync per step).  The step reaches the
 *     producers in stream order: a one-thread kernel writes it into a device
 *     word before the step's graphs, so each replay is checked against the
 *     set of its own step even while the host runs ahead.
 *  2. The agent makes exactly the cuGraphNodeSetEnabled calls an independent
 *     model predicts: only the nodes that change, all nodes of an exec whose
 *     state is unknown; at each replay (lazy) or for every bound exec at
 *     step_begin (eager).  Checked call by call and in total.
 *  3. Re-instantiation: new execs, bound explicitly or only launched (the
 *     launch must rebind), run with the right producers from their first
 *     replay on.
 *  4. Fail closed and pass through: a graph with producers that was never
 *     bound is refused with TOGGLE_EUNBOUND and runs nothing; a graph without
 *     producers passes every step; a plan for a step that already began is
 *     refused with TOGGLE_ELATE and does not leak into that step.
 *  5. Per-step plans win over the standing set for exactly their step.
 *  6. Device mode (a third agent, strict): a planner captured at the head of
 *     each graph and producers launched with toggle_launch_producer (device-
 *     updatable nodes); 10,000 pipelined steps by default.  Every replay's
 *     ring content equals the set of its step, the host makes zero
 *     cuGraphNodeSetEnabled calls, the planners' device-side calls equal the
 *     model's (all nodes after a bind, then the hooks that changed) with no
 *     failure, each exec is uploaded once at bind, a second instantiation is
 *     refused with TOGGLE_ENOTSUP, and mid-phase the rotating graphs are
 *     bound again, instantiated again after their exec was destroyed, or
 *     captured again.
 *  7. Device mode's fallback (a fourth agent, not strict): the same capture
 *     without a planner, so every graph falls back to host lazy mode with
 *     its device-updatable producers toggled by cuGraphNodeSetEnabled and an
 *     upload in stream order after each change (the driver's rule for such
 *     nodes); checked like the lazy phase, call by call.
 *  8. Device mode on several streams: one graph launched 3000 times, each
 *     launch on a stream drawn at random among three, with a new random set
 *     each time and no host synchronisation; a kernel inside the graph
 *     counts its launches, so each ring record names its launch.  Every
 *     launch must run its own set: this needs libtoggle's event join before
 *     a mask write on another stream than the previous launch's.
 *  9. Figures (informational): host cost per toggle_graph_launch and GPU time
 *     per replay in lazy and device mode, with and without a set change at
 *     every replay, and the host cost of the candidate stream-ordered writes.
 *
 * Exit status: 0 on PASS and when there is no CUDA device (SKIPPED), 1 on
 * FAIL, 2 on bad usage.  Written in a plain C style on purpose.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "toggle.h"

/* ---- the shape of the workload --------------------------------------------- */

#define N_TYPES     3
#define N_LAYERS    32
#define N_HOOKS     (N_TYPES * N_LAYERS) /* producers per graph: one per hook */
#define N_ROT       3                    /* graphs launched in rotation: ids 0..2 */
#define G_UNBOUND   3                    /* graph with producers, never bound */
#define N_PGRAPHS   4                    /* graphs with producers */
#define CHUNK       4096                 /* floats per batch row; a producer copies one (16 KiB) */
#define RING_CAP    (1u << 20)           /* ring records */
#define WINDOW      32                   /* steps between ring checks */
#define PLAN_SLOTS  8                    /* pending plans are at most 3 steps ahead */
#define MAX_DIAG    20                   /* mismatch lines printed per phase */
#define THREADS     256

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out", "mlp_out"};
static const int batch_of[N_PGRAPHS] = {1, 8, 32, 1};

/* One ring record: which producer ran, in which graph, at which step. */
struct ring_rec {
	int32_t graph;
	int32_t hook; /* type * N_LAYERS + layer */
	long long step;
};

/* ---- failure: die(), CUDA_CHECK, TG_CHECK ---------------------------------- */

#define GPU_TAG "gpu-check"
#include "gpu_common.h"

/* ---- kernels ---------------------------------------------------------------- */

/* The step in stream order: every producer after this reads this step. */
__global__ void set_step(long long *d_step, long long step)
{
	*d_step = step;
}

/* Inside a graph: count its launches (they are serialised), for the producers after it. */
__global__ void mark_launch(long long *d_launch)
{
	*d_launch += 1;
}

/* The "layer": x = x*a + b, a few times per element (converges to 1.0). */
__global__ void compute(float *x, size_t n, float a, float b)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		float v = x[i];
		for (int k = 0; k < 16; k++)
			v = v * a + b;
		x[i] = v;
	}
}

/* A producer: copy one 16 KiB slice of the activation out, then log itself. */
__global__ void produce(const float *x, float *out, const long long *d_step,
			struct ring_rec *ring, unsigned long long *count, unsigned int *overflow,
			int graph, int hook)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < CHUNK;
	     i += gridDim.x * blockDim.x)
		out[i] = x[i];
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		unsigned long long slot = atomicAdd(count, 1ull);
		if (slot < RING_CAP) {
			ring[slot].graph = graph;
			ring[slot].hook = hook;
			ring[slot].step = *d_step;
		} else {
			atomicExch(overflow, 1u);
		}
	}
}

/* ---- small helpers ------------------------------------------------------------ */

static unsigned rng_below(uint64_t *s, unsigned n)
{
	return (unsigned)(gpu_rng_next(s) % n);
}

static struct toggle_hook hook_of(int h)
{
	struct toggle_hook k;

	k.type = (uint16_t)(h / N_LAYERS);
	k.layer = (uint16_t)(h % N_LAYERS);
	return k;
}

static bool set_has(const struct toggle_set *s, int h)
{
	return toggle_set_contains(s, hook_of(h));
}

static void set_put(struct toggle_set *s, int h, bool on)
{
	int r = on ? toggle_set_add(s, hook_of(h)) : toggle_set_remove(s, hook_of(h));

	if (r != TOGGLE_OK)
		die("toggle_set_%s(hook %d): %s", on ? "add" : "remove", h, toggle_strerror(r));
}

/* Number of hooks in which two sets differ. */
static unsigned set_diff(const struct toggle_set *a, const struct toggle_set *b)
{
	unsigned n = 0;

	for (size_t i = 0; i < sizeof a->bits / sizeof a->bits[0]; i++)
		n += (unsigned)__builtin_popcountll(a->bits[i] ^ b->bits[i]);
	return n;
}

static void hook_name(int h, char *buf, size_t len)
{
	if (h >= 0 && h < N_HOOKS)
		snprintf(buf, len, "%s:%d", type_names[h / N_LAYERS], h % N_LAYERS);
	else
		snprintf(buf, len, "#%d", h);
}

static void set_text(const struct toggle_catalog *cat, const struct toggle_set *s, char *buf,
		     size_t len)
{
	if (toggle_set_format(cat, s, buf, len) < 0)
		snprintf(buf, len, "(unprintable set)");
}

/* ---- device state shared by both phases --------------------------------------- */

struct dev {
	cudaStream_t stream;
	float *act[N_PGRAPHS]; /* activations of each graph: batch * CHUNK floats */
	float *unrel;          /* the unrelated graph's buffer */
	float *hook_out;       /* one CHUNK per hook */
	long long *step;
	struct ring_rec *ring;
	unsigned long long *count;
	unsigned int *overflow;
	struct ring_rec *host_ring;
	CUfunction produce_fn; /* `produce`, for toggle_launch_producer */
};

static void dev_init(struct dev *d)
{
	CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
	for (int g = 0; g < N_PGRAPHS; g++) {
		size_t bytes = (size_t)batch_of[g] * CHUNK * sizeof(float);
		CUDA_CHECK(cudaMalloc(&d->act[g], bytes));
		CUDA_CHECK(cudaMemset(d->act[g], 0, bytes));
	}
	CUDA_CHECK(cudaMalloc(&d->unrel, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMemset(d->unrel, 0, CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&d->hook_out, (size_t)N_HOOKS * CHUNK * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&d->step, sizeof(long long)));
	CUDA_CHECK(cudaMemset(d->step, 0xff, sizeof(long long))); /* -1 */
	CUDA_CHECK(cudaMalloc(&d->ring, (size_t)RING_CAP * sizeof(struct ring_rec)));
	CUDA_CHECK(cudaMalloc(&d->count, sizeof(unsigned long long)));
	CUDA_CHECK(cudaMemset(d->count, 0, sizeof(unsigned long long)));
	CUDA_CHECK(cudaMalloc(&d->overflow, sizeof(unsigned int)));
	CUDA_CHECK(cudaMemset(d->overflow, 0, sizeof(unsigned int)));
	d->host_ring = (struct ring_rec *)malloc((size_t)RING_CAP * sizeof(struct ring_rec));
	if (!d->host_ring)
		die("out of host memory for the ring copy");
	{
		cudaFunction_t fn;
		CUDA_CHECK(cudaGetFuncBySymbol(&fn, (const void *)produce));
		d->produce_fn = (CUfunction)fn;
	}
	CUDA_CHECK(cudaDeviceSynchronize());
}

static void dev_free(struct dev *d)
{
	for (int g = 0; g < N_PGRAPHS; g++)
		CUDA_CHECK(cudaFree(d->act[g]));
	CUDA_CHECK(cudaFree(d->unrel));
	CUDA_CHECK(cudaFree(d->hook_out));
	CUDA_CHECK(cudaFree(d->step));
	CUDA_CHECK(cudaFree(d->ring));
	CUDA_CHECK(cudaFree(d->count));
	CUDA_CHECK(cudaFree(d->overflow));
	CUDA_CHECK(cudaStreamDestroy(d->stream));
	free(d->host_ring);
}

/* ---- one phase: one agent, one mode -------------------------------------------- */

/* What the model says the agent knows about one graph's bound exec. */
struct gmodel {
	cudaGraphExec_t exec; /* the exec the agent has bound, NULL = none */
	bool known;           /* the node states of that exec are known ... */
	struct toggle_set last; /* ... and are this set */
};

struct plan_slot {
	long long step; /* -1 = free */
	struct toggle_set set;
};

struct win_entry {
	long long step;
	unsigned launched; /* bit per graph id */
	struct toggle_set eff;
};

struct phase {
	const char *name;
	enum toggle_mode mode;
	bool fallback; /* device mode, not strict, no planner: host lazy fallback */
	long long steps;
	uint64_t rng;
	struct dev *d;
	struct toggle_agent *agent;
	struct toggle_catalog cat;
	struct toggle_set full;

	cudaGraph_t graph[N_PGRAPHS];
	cudaGraphExec_t exec[N_PGRAPHS];
	cudaGraph_t unrel_graph;
	cudaGraphExec_t unrel_exec;
	cudaGraphExec_t deferred_old; /* eager: old exec kept alive until its graph rebinds */

	/* the independent model */
	struct gmodel model[N_PGRAPHS];
	struct toggle_set standing;
	struct plan_slot plans[PLAN_SLOTS];
	uint64_t calls_seen;     /* stats.node_set_calls already accounted for */
	uint64_t expected_calls;

	/* the host log of the current window */
	struct win_entry win[WINDOW];
	int win_len;

	/* results */
	uint64_t replays, records, unbound_records;
	uint64_t missing, extra, duplicate, unlaunched, stray, overflows;
	uint64_t call_mismatch, resolve_mismatch, api_mismatch;
	uint64_t launches_ok, unrelated, refused, planned, late_rejected;
	uint64_t reinstantiated, bind_applied, windows, windows_in_flight;
	/* device mode: what each graph's planner must have done since its capture */
	uint64_t dev_expected[N_PGRAPHS], dev_launches[N_PGRAPHS];
	uint64_t dev_calls, dev_expected_calls, dev_failures, dev_runs; /* retired graphs included */
	uint64_t dev_mismatch, second_inst_refused, expected_uploads;
	int diag;
	double elapsed_ms;
};

/* Print one diagnostic line (at most MAX_DIAG per phase). */
static void diag(struct phase *ph, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void diag(struct phase *ph, const char *fmt, ...)
{
	va_list ap;

	if (ph->diag++ >= MAX_DIAG) {
		if (ph->diag == MAX_DIAG + 1)
			printf("gpu-check: phase=%s: further mismatch lines suppressed\n", ph->name);
		return;
	}
	printf("gpu-check: phase=%s: ", ph->name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static struct toggle_stats stats_of(const struct phase *ph)
{
	struct toggle_stats st;

	toggle_stats_get(ph->agent, &st);
	return st;
}

/* Compare the driver calls made since the last accounting with the model's. */
static void account_calls(struct phase *ph, const char *what, long long step, int graph,
			  uint64_t expected)
{
	uint64_t now = stats_of(ph).node_set_calls;
	uint64_t made = now - ph->calls_seen;

	ph->calls_seen = now;
	ph->expected_calls += expected;
	if (made != expected) {
		ph->call_mismatch++;
		diag(ph, "node_set_calls mismatch: %s step=%lld graph=%d made=%" PRIu64
			 " expected=%" PRIu64, what, step, graph, made, expected);
	}
}

/* The model's cost of bringing graph g's bound exec to set eff. */
static uint64_t model_apply(struct phase *ph, int g, const struct toggle_set *eff)
{
	struct gmodel *m = &ph->model[g];
	uint64_t calls = m->known ? set_diff(&m->last, eff) : N_HOOKS;

	m->known = true;
	m->last = *eff;
	return calls;
}

/* ---- capture and binding -------------------------------------------------------- */

static cudaGraph_t capture(struct phase *ph, int gid, bool producers)
{
	struct dev *d = ph->d;
	float *x = gid < N_PGRAPHS ? d->act[gid] : d->unrel;
	int batch = gid < N_PGRAPHS ? batch_of[gid] : 1;
	size_t n = (size_t)batch * CHUNK;
	unsigned blocks = (unsigned)((n + THREADS - 1) / THREADS);
	int layers = producers ? N_LAYERS : 1;
	cudaGraph_t graph;

	TG_CHECK(ph->agent, toggle_capture_begin(ph->agent));
	CUDA_CHECK(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal));
	/* device mode: the planner heads every graph (alone in the unrelated one) */
	if (!ph->fallback)
		TG_CHECK(ph->agent, toggle_capture_planner(ph->agent, (CUstream)d->stream));
	for (int l = 0; l < layers; l++) {
		compute<<<blocks, THREADS, 0, d->stream>>>(x, n, 0.999f, 0.001f);
		CUDA_LAUNCHED();
		for (int t = 0; producers && t < N_TYPES; t++) {
			int h = t * N_LAYERS + l;
			/* each hook reads its own row of the batch when there are several */
			const float *row = x + (size_t)(h % batch) * CHUNK;
			float *out = d->hook_out + (size_t)h * CHUNK;

			if (ph->mode == TOGGLE_MODE_DEVICE) {
				CUlaunchConfig lc;
				void *params[8] = {&row, &out, &d->step, &d->ring, &d->count,
						   &d->overflow, &gid, &h};

				memset(&lc, 0, sizeof lc);
				lc.gridDimX = CHUNK / THREADS;
				lc.gridDimY = lc.gridDimZ = 1;
				lc.blockDimX = THREADS;
				lc.blockDimY = lc.blockDimZ = 1;
				lc.hStream = (CUstream)d->stream;
				TG_CHECK(ph->agent, toggle_launch_producer(ph->agent, &lc, d->produce_fn,
									   params, hook_of(h)));
				continue;
			}
			produce<<<CHUNK / THREADS, THREADS, 0, d->stream>>>(
				row, out, d->step, d->ring, d->count, d->overflow, gid, h);
			CUDA_LAUNCHED();
			TG_CHECK(ph->agent, toggle_record_producer(ph->agent, d->stream, hook_of(h)));
		}
	}
	CUDA_CHECK(cudaStreamEndCapture(d->stream, &graph));
	TG_CHECK(ph->agent, toggle_capture_end(ph->agent));
	return graph;
}

/* toggle_graph_bind, with the model: the exec's state becomes unknown.  The
 * agent may bring it to the current set right away (all nodes) or later. */
static void bind(struct phase *ph, int g)
{
	uint64_t before = stats_of(ph).node_set_calls, made;

	TG_CHECK(ph->agent, toggle_graph_bind(ph->agent, ph->graph[g], ph->exec[g]));
	ph->model[g].exec = ph->exec[g];
	ph->model[g].known = false;
	made = stats_of(ph).node_set_calls - before;
	if (made == N_HOOKS) {
		ph->model[g].known = true;
		toggle_current_set(ph->agent, &ph->model[g].last);
		ph->bind_applied++;
		account_calls(ph, "bind", -1, g, N_HOOKS);
	} else {
		account_calls(ph, "bind", -1, g, 0);
	}
}

/* Device mode: instantiate (once: a driver rule), bind and upload, with the model. */
static void instantiate_bound(struct phase *ph, int g)
{
	uint64_t before = stats_of(ph).node_set_calls;

	TG_CHECK(ph->agent, toggle_graph_instantiate(ph->agent, ph->graph[g], &ph->exec[g]));
	ph->model[g].exec = ph->exec[g];
	ph->model[g].known = false; /* the next planner (or host sync) sets every producer */
	ph->expected_uploads += !ph->fallback;
	account_calls(ph, "instantiate+bind", -1, g, 0);
	(void)before;
}

static void expect_eq(struct phase *ph, const char *what, uint64_t got, uint64_t want)
{
	if (got != want) {
		ph->api_mismatch++;
		diag(ph, "%s: got %" PRIu64 ", expected %" PRIu64, what, got, want);
	}
}

/* The registry after capture: every producer graph covers every hook once. */
static void check_registry(struct phase *ph)
{
	struct toggle_registry_check rc;

	toggle_registry_check(ph->agent, &rc);
	expect_eq(ph, "registry graphs", rc.graphs, N_PGRAPHS);
	expect_eq(ph, "registry unbound", rc.unbound, 1);
	expect_eq(ph, "registry complete", rc.complete, 1);
	expect_eq(ph, "registry uniform", rc.uniform, 1);
	expect_eq(ph, "registry hooks_uncovered", rc.hooks_uncovered, 0);
	for (int g = 0; g < N_PGRAPHS; g++) {
		struct toggle_graph_status gs;
		struct toggle_set hooks;

		TG_CHECK(ph->agent, toggle_graph_status(ph->agent, ph->graph[g], &gs));
		TG_CHECK(ph->agent, toggle_graph_hooks(ph->agent, ph->graph[g], &hooks));
		expect_eq(ph, "graph nodes", gs.nodes, N_HOOKS);
		expect_eq(ph, "graph hooks_covered", gs.hooks_covered, N_HOOKS);
		expect_eq(ph, "graph bound", gs.bound, g != G_UNBOUND);
		expect_eq(ph, "graph hooks == catalog", toggle_set_equal(&hooks, &ph->full), 1);
	}
	printf("gpu-check: phase=%s graphs=%u producers_per_graph=%d unbound=%u complete=%d "
	       "uniform=%d\n", ph->name, rc.graphs, N_HOOKS, rc.unbound, rc.complete, rc.uniform);
}

static void setup(struct phase *ph)
{
	struct toggle_config cfg;
	char name[TOGGLE_MAX_NAME];
	int r;

	memset(&cfg, 0, sizeof cfg);
	snprintf(name, sizeof name, "gpu_check_%s", ph->name);
	cfg.name = name;
	cfg.catalog = ph->cat;
	cfg.mode = ph->mode;
	cfg.strict = !ph->fallback;
	/* Its call model is the main exec's: the producer-free exec has its own proof (gpu_bare.cu). */
	cfg.no_bare_exec = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	r = toggle_agent_open(&cfg, &ph->agent);
	if (r != TOGGLE_OK)
		die("toggle_agent_open(%s): %d (%s)", ph->name, r, toggle_strerror(r));
	if (toggle_agent_mode(ph->agent) != ph->mode)
		die("agent runs in mode %d, asked for %d", (int)toggle_agent_mode(ph->agent),
		    (int)ph->mode);

	for (int g = 0; g < N_PGRAPHS; g++) {
		ph->graph[g] = capture(ph, g, true);
		if (ph->mode != TOGGLE_MODE_DEVICE || g == G_UNBOUND)
			CUDA_CHECK(cudaGraphInstantiate(&ph->exec[g], ph->graph[g], 0));
	}
	ph->unrel_graph = capture(ph, N_PGRAPHS, false);
	CUDA_CHECK(cudaGraphInstantiate(&ph->unrel_exec, ph->unrel_graph, 0));

	ph->calls_seen = stats_of(ph).node_set_calls;
	for (int g = 0; g < N_ROT; g++) /* G_UNBOUND stays unbound */
		if (ph->mode == TOGGLE_MODE_DEVICE)
			instantiate_bound(ph, g);
		else
			bind(ph, g);
	if (ph->mode == TOGGLE_MODE_DEVICE) {
		struct toggle_graph_status gs;

		for (int g = 0; g < N_ROT; g++) {
			TG_CHECK(ph->agent, toggle_graph_status(ph->agent, ph->graph[g], &gs));
			if (ph->fallback)
				expect_eq(ph, "graph falls back to host lazy mode",
					  gs.mode == TOGGLE_MODE_LAZY && gs.device_fallback &&
					  strstr(gs.note, "no planner") != NULL, 1);
			else
				expect_eq(ph, "graph runs in device mode",
					  gs.mode == TOGGLE_MODE_DEVICE && !gs.device_fallback &&
					  gs.uploaded, 1);
		}
		expect_eq(ph, "stats.uploads after setup", stats_of(ph).uploads, ph->expected_uploads);
	}
	check_registry(ph);
	for (int i = 0; i < PLAN_SLOTS; i++)
		ph->plans[i].step = -1;
}

static void teardown(struct phase *ph)
{
	CUDA_CHECK(cudaStreamSynchronize(ph->d->stream));
	toggle_agent_close(ph->agent);
	ph->agent = NULL;
	for (int g = 0; g < N_PGRAPHS; g++) {
		CUDA_CHECK(cudaGraphExecDestroy(ph->exec[g]));
		CUDA_CHECK(cudaGraphDestroy(ph->graph[g]));
	}
	if (ph->deferred_old)
		CUDA_CHECK(cudaGraphExecDestroy(ph->deferred_old));
	CUDA_CHECK(cudaGraphExecDestroy(ph->unrel_exec));
	CUDA_CHECK(cudaGraphDestroy(ph->unrel_graph));
}

/*
 * Mid-phase: a new exec for every rotating graph.  Two are bound explicitly;
 * graph `implicit` is not: its next toggle_graph_launch (with the new exec)
 * must rebind it.  Old execs are destroyed after a sync, except that in eager
 * mode the implicit graph's old exec stays alive until the launch rebinds:
 * eager step_begin legitimately applies to every exec the agent has bound.
 */
/* Device mode's planner counters of graph g, checked against the model (stream idle). */
static void check_device_counters(struct phase *ph, int g, bool retire)
{
	struct toggle_device_counters dc;

	TG_CHECK(ph->agent, toggle_graph_device_counters(ph->agent, ph->graph[g], &dc));
	if (dc.device_calls != ph->dev_expected[g] || dc.device_failures != 0 ||
	    dc.planner_runs != ph->dev_launches[g]) {
		ph->dev_mismatch++;
		diag(ph, "graph %d planner: calls=%" PRIu64 " (model %" PRIu64 ") failures=%" PRIu64
			 " runs=%" PRIu64 " (launches %" PRIu64 ")", g, dc.device_calls,
		     ph->dev_expected[g], dc.device_failures, dc.planner_runs, ph->dev_launches[g]);
	}
	if (retire) {
		ph->dev_calls += dc.device_calls;
		ph->dev_expected_calls += ph->dev_expected[g];
		ph->dev_failures += dc.device_failures;
		ph->dev_runs += dc.planner_runs;
		ph->dev_expected[g] = 0;
		ph->dev_launches[g] = 0;
	}
}

/*
 * Device mode's mid-phase change.  A graph with device-updatable nodes has
 * one exec at a time: a second toggle_graph_instantiate while its exec lives
 * is refused.  So graph `same` is bound again to its own exec (its next
 * planner sets every producer, with no new upload); the next graph is
 * unbound, its exec destroyed and the graph instantiated again (a new exec,
 * uploaded, every producer set); the other is captured again (a new graph
 * and exec, the old ones forgotten and destroyed).
 */
static void recapture(struct phase *ph, int same)
{
	cudaGraphExec_t extra = NULL;
	int r;

	CUDA_CHECK(cudaStreamSynchronize(ph->d->stream));
	r = toggle_graph_instantiate(ph->agent, ph->graph[same], &extra);
	if (r != TOGGLE_ENOTSUP || extra != NULL) {
		ph->api_mismatch++;
		diag(ph, "second toggle_graph_instantiate returned %d (%s), expected TOGGLE_ENOTSUP", r,
		     toggle_strerror(r));
	} else {
		ph->second_inst_refused++;
	}
	for (int g = 0; g < N_ROT; g++) {
		cudaGraph_t old_graph = ph->graph[g];
		cudaGraphExec_t old_exec = ph->exec[g];

		int again = (same + 1) % N_ROT;

		/* same capture (bound again, instantiated again): its counters go on */
		if (!ph->fallback)
			check_device_counters(ph, g, g != same && g != again);
		if (g == same) {
			TG_CHECK(ph->agent, toggle_graph_bind(ph->agent, ph->graph[g], ph->exec[g]));
			ph->model[g].known = false;
			account_calls(ph, "bind again", -1, g, 0);
			continue;
		}
		if (g == again) {
			TG_CHECK(ph->agent, toggle_graph_bind(ph->agent, ph->graph[g], NULL));
			CUDA_CHECK(cudaGraphExecDestroy(old_exec));
			instantiate_bound(ph, g);
			ph->reinstantiated++;
			continue;
		}
		ph->graph[g] = capture(ph, g, true);
		instantiate_bound(ph, g);
		TG_CHECK(ph->agent, toggle_graph_forget(ph->agent, old_graph));
		CUDA_CHECK(cudaGraphExecDestroy(old_exec));
		CUDA_CHECK(cudaGraphDestroy(old_graph));
		ph->reinstantiated++;
	}
}

static void reinstantiate(struct phase *ph, int implicit)
{
	cudaGraphExec_t old[N_ROT];

	if (ph->mode == TOGGLE_MODE_DEVICE) {
		recapture(ph, implicit);
		return;
	}

	CUDA_CHECK(cudaStreamSynchronize(ph->d->stream));
	/* all new execs first, so that none can reuse the address of an old one */
	for (int g = 0; g < N_ROT; g++) {
		old[g] = ph->exec[g];
		CUDA_CHECK(cudaGraphInstantiate(&ph->exec[g], ph->graph[g], 0));
		ph->reinstantiated++;
	}
	for (int g = 0; g < N_ROT; g++) {
		if (g != implicit) {
			bind(ph, g);
			CUDA_CHECK(cudaGraphExecDestroy(old[g]));
		} else if (ph->mode == TOGGLE_MODE_EAGER) {
			ph->deferred_old = old[g];
		} else {
			CUDA_CHECK(cudaGraphExecDestroy(old[g]));
		}
	}
}

/* ---- the desired state -------------------------------------------------------- */

/* A random set: empty, full, random density, a few flips, layer ranges, same. */
static void pick_set(struct phase *ph, const struct toggle_set *prev, struct toggle_set *out)
{
	unsigned kind = rng_below(&ph->rng, 16);

	toggle_set_clear(out);
	if (kind == 0) {
		/* empty */
	} else if (kind == 1) {
		*out = ph->full;
	} else if (kind <= 5) {
		unsigned density = rng_below(&ph->rng, 101);
		for (int h = 0; h < N_HOOKS; h++)
			if (rng_below(&ph->rng, 100) < density)
				set_put(out, h, true);
	} else if (kind <= 10) {
		unsigned flips = 1 + rng_below(&ph->rng, 4);
		*out = *prev;
		for (unsigned i = 0; i < flips; i++) {
			int h = (int)rng_below(&ph->rng, N_HOOKS);
			set_put(out, h, !set_has(out, h));
		}
	} else if (kind <= 13) {
		unsigned a = rng_below(&ph->rng, N_LAYERS);
		unsigned b = a + rng_below(&ph->rng, N_LAYERS - a);
		unsigned types = 1 + rng_below(&ph->rng, (1u << N_TYPES) - 1);
		for (int t = 0; t < N_TYPES; t++)
			for (unsigned l = a; (types >> t) & 1 && l <= b; l++)
				set_put(out, t * N_LAYERS + (int)l, true);
	} else {
		*out = *prev;
	}
}

/* Sometimes plan a future step (s+1..s+3) with its own set. */
static void maybe_plan(struct phase *ph, long long s)
{
	long long t = s + 1 + rng_below(&ph->rng, 3);
	struct plan_slot *slot = &ph->plans[t % PLAN_SLOTS];
	struct toggle_set set;

	if (rng_below(&ph->rng, 7) != 0 || t >= ph->steps || slot->step == t)
		return;
	pick_set(ph, &ph->standing, &set);
	TG_CHECK(ph->agent, toggle_plan_step(ph->agent, t, &set));
	account_calls(ph, "plan_step", s, -1, 0);
	slot->step = t;
	slot->set = set;
	ph->planned++;
}

/* toggle_step_begin, checked against the model's resolution. */
static void step_begin(struct phase *ph, long long s, struct toggle_set *eff)
{
	struct plan_slot *slot = &ph->plans[s % PLAN_SLOTS];
	const struct toggle_set *want = slot->step == s ? &slot->set : &ph->standing;
	struct toggle_set cur;
	uint64_t expected = 0;

	TG_CHECK(ph->agent, toggle_step_begin(ph->agent, s, eff));
	if (!toggle_set_equal(eff, want)) {
		char got_s[2048], want_s[2048];
		set_text(&ph->cat, eff, got_s, sizeof got_s);
		set_text(&ph->cat, want, want_s, sizeof want_s);
		ph->resolve_mismatch++;
		diag(ph, "step %lld resolved to {%s}, expected the %s set {%s}", s, got_s,
		     slot->step == s ? "planned" : "standing", want_s);
	}
	if (slot->step == s)
		slot->step = -1;
	if (toggle_catalog_check_set(&ph->cat, eff) != TOGGLE_OK) {
		ph->resolve_mismatch++;
		diag(ph, "step %lld: effective set outside the catalog", s);
	}
	toggle_current_set(ph->agent, &cur);
	if (!toggle_set_equal(&cur, eff)) {
		ph->resolve_mismatch++;
		diag(ph, "step %lld: toggle_current_set differs from the effective set", s);
	}
	expect_eq(ph, "stats.step", (uint64_t)stats_of(ph).step, (uint64_t)s);

	if (ph->mode == TOGGLE_MODE_EAGER)
		for (int g = 0; g < N_PGRAPHS; g++)
			if (ph->model[g].exec)
				expected += model_apply(ph, g, eff);
	account_calls(ph, "step_begin", s, -1, expected);
}

/* A plan for a step that already began: refused, and nothing changes. */
static void late_plan(struct phase *ph, long long s, const struct toggle_set *eff)
{
	struct toggle_set other, cur;
	int r;

	other = ph->full;
	toggle_set_subtract(&other, eff); /* as different as it gets */
	r = toggle_plan_step(ph->agent, s, &other);
	if (r != TOGGLE_ELATE) {
		ph->api_mismatch++;
		diag(ph, "late plan for step %lld returned %d (%s), expected TOGGLE_ELATE", s, r,
		     toggle_strerror(r));
	} else {
		ph->late_rejected++;
	}
	toggle_current_set(ph->agent, &cur);
	if (!toggle_set_equal(&cur, eff)) {
		ph->resolve_mismatch++;
		diag(ph, "late plan for step %lld changed the current set", s);
	}
	account_calls(ph, "late plan", s, -1, 0);
}

/* ---- replay ----------------------------------------------------------------- */

/* One producer graph through toggle_graph_launch, with the model. */
static void launch(struct phase *ph, long long s, int g, const struct toggle_set *eff)
{
	struct toggle_stats before = stats_of(ph), after;
	struct gmodel *m = &ph->model[g];
	bool rebind = m->exec != ph->exec[g];

	TG_CHECK(ph->agent, toggle_graph_launch(ph->agent, ph->graph[g], ph->exec[g],
						 ph->d->stream));
	CUDA_LAUNCHED();
	after = stats_of(ph);
	if (rebind) {
		m->exec = ph->exec[g];
		m->known = false;
		expect_eq(ph, "stats.rebinds increase on implicit rebind",
			  after.rebinds - before.rebinds, 1);
	}
	expect_eq(ph, "stats.launches increase", after.launches - before.launches, 1);
	if (ph->mode == TOGGLE_MODE_DEVICE && !ph->fallback) {
		/* the planner's calls, on the device; none on the host */
		ph->dev_expected[g] += model_apply(ph, g, eff);
		ph->dev_launches[g]++;
		account_calls(ph, "launch (device)", s, g, 0);
	} else {
		account_calls(ph, rebind ? "launch (rebind)" : "launch", s, g,
			      model_apply(ph, g, eff));
	}
	ph->launches_ok++;
	ph->replays++;
}

static void launch_unrelated(struct phase *ph, long long s)
{
	struct toggle_stats before = stats_of(ph), after;

	TG_CHECK(ph->agent, toggle_graph_launch(ph->agent, ph->unrel_graph, ph->unrel_exec,
						 ph->d->stream));
	CUDA_LAUNCHED();
	after = stats_of(ph);
	expect_eq(ph, "stats.launches_unrelated increase",
		  after.launches_unrelated - before.launches_unrelated, 1);
	account_calls(ph, "launch unrelated", s, -1, 0);
	ph->launches_ok++;
	ph->unrelated++;
}

/* The graph with producers that was never bound must be refused. */
static void launch_unbound(struct phase *ph, long long s)
{
	struct toggle_stats before = stats_of(ph), after;
	int r = toggle_graph_launch(ph->agent, ph->graph[G_UNBOUND], ph->exec[G_UNBOUND],
				    ph->d->stream);

	CUDA_LAUNCHED();
	after = stats_of(ph);
	if (r != TOGGLE_EUNBOUND) {
		ph->api_mismatch++;
		diag(ph, "unbound graph launch returned %d (%s), expected TOGGLE_EUNBOUND", r,
		     toggle_strerror(r));
	} else {
		ph->refused++;
	}
	expect_eq(ph, "stats.launches_refused increase",
		  after.launches_refused - before.launches_refused, 1);
	expect_eq(ph, "stats.launches increase on refusal", after.launches - before.launches, 0);
	account_calls(ph, "launch unbound", s, G_UNBOUND, 0);
}

/* ---- the ring check ------------------------------------------------------------ */

/* Sync, read the ring back and compare it with the window's host log. */
static void check_window(struct phase *ph)
{
	static uint16_t tally[WINDOW][N_PGRAPHS][N_HOOKS];
	struct dev *d = ph->d;
	unsigned long long count = 0;
	unsigned int overflow = 0;
	long long first = ph->win_len ? ph->win[0].step : 0;
	char hn[64];

	/* still busy here means the host ran ahead of the GPU: replays pipelined */
	cudaError_t q = cudaStreamQuery(d->stream);
	if (q == cudaErrorNotReady)
		ph->windows_in_flight++;
	else
		CUDA_CHECK(q);
	CUDA_CHECK(cudaStreamSynchronize(d->stream));
	if (ph->mode == TOGGLE_MODE_DEVICE && !ph->fallback)
		for (int g = 0; g < N_ROT; g++)
			check_device_counters(ph, g, false);
	CUDA_CHECK(cudaMemcpy(&count, d->count, sizeof count, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(&overflow, d->overflow, sizeof overflow, cudaMemcpyDeviceToHost));
	if (overflow || count > RING_CAP) {
		ph->overflows++;
		diag(ph, "ring overflow: %llu records for %u slots", count, RING_CAP);
		count = RING_CAP;
	}
	if (count)
		CUDA_CHECK(cudaMemcpy(d->host_ring, d->ring, count * sizeof(struct ring_rec),
				      cudaMemcpyDeviceToHost));
	ph->records += count;

	memset(tally, 0, sizeof tally);
	for (unsigned long long i = 0; i < count; i++) {
		const struct ring_rec *r = &d->host_ring[i];
		long long w = r->step - first;

		if (r->graph < 0 || r->graph >= N_PGRAPHS || r->hook < 0 || r->hook >= N_HOOKS ||
		    w < 0 || w >= ph->win_len) {
			ph->stray++;
			diag(ph, "stray record graph=%d hook=%d step=%lld (window %lld..%lld)",
			     r->graph, r->hook, r->step, first, first + ph->win_len - 1);
			continue;
		}
		if (r->graph == G_UNBOUND)
			ph->unbound_records++;
		if (tally[w][r->graph][r->hook] < UINT16_MAX)
			tally[w][r->graph][r->hook]++;
	}

	for (int w = 0; w < ph->win_len; w++) {
		const struct win_entry *e = &ph->win[w];
		for (int g = 0; g < N_PGRAPHS; g++) {
			bool launched = (e->launched >> g) & 1;
			for (int h = 0; h < N_HOOKS; h++) {
				unsigned got = tally[w][g][h];
				unsigned want = launched && set_has(&e->eff, h) ? 1 : 0;
				const char *kind;

				if (got == want)
					continue;
				if (want && got == 0) {
					ph->missing++;
					kind = "missing";
				} else if (want) {
					ph->duplicate += got - 1;
					kind = "duplicate";
				} else if (launched) {
					ph->extra += got;
					kind = "extra (hook not in the step's set)";
				} else {
					ph->unlaunched += got;
					kind = "from a graph not launched at that step";
				}
				hook_name(h, hn, sizeof hn);
				diag(ph, "step=%lld graph=%d hook=%s records=%u expected=%u: %s",
				     e->step, g, hn, got, want, kind);
			}
		}
	}

	CUDA_CHECK(cudaMemsetAsync(d->count, 0, sizeof(unsigned long long), d->stream));
	CUDA_CHECK(cudaMemsetAsync(d->overflow, 0, sizeof(unsigned int), d->stream));
	ph->win_len = 0;
	ph->windows++;
}

/* ---- the phase --------------------------------------------------------------- */

static void run_steps(struct phase *ph)
{
	long long reinst_at = ph->steps / 2;
	long long late_at = ph->steps > 5 ? 5 : ph->steps - 1;
	int implicit = -1;
	struct toggle_set eff;

	for (long long s = 0; s < ph->steps; s++) {
		struct toggle_set next;
		unsigned launched = 0;
		int first, second = -1;

		if (s == reinst_at) {
			implicit = (int)rng_below(&ph->rng, N_ROT);
			reinstantiate(ph, implicit);
		}

		pick_set(ph, &ph->standing, &next);
		TG_CHECK(ph->agent, toggle_set_enabled(ph->agent, &next));
		ph->standing = next;
		account_calls(ph, "set_enabled", s, -1, 0);

		step_begin(ph, s, &eff);
		if (s == late_at)
			late_plan(ph, s, &eff);
		maybe_plan(ph, s);

		/* the step reaches the producers in stream order */
		set_step<<<1, 1, 0, ph->d->stream>>>(ph->d->step, s);
		CUDA_LAUNCHED();

		first = s == reinst_at ? implicit : (int)rng_below(&ph->rng, N_ROT);
		if (rng_below(&ph->rng, 2))
			second = (first + 1 + (int)rng_below(&ph->rng, N_ROT - 1)) % N_ROT;
		launch(ph, s, first, &eff);
		launched |= 1u << first;
		if (second >= 0) {
			launch(ph, s, second, &eff);
			launched |= 1u << second;
		}
		if (s == 0)
			launch_unbound(ph, s);
		launch_unrelated(ph, s);

		if (s == reinst_at) {
			struct toggle_graph_status gs;

			TG_CHECK(ph->agent, toggle_graph_status(ph->agent, ph->graph[implicit], &gs));
			expect_eq(ph, "rebound graph holds its exec",
				  gs.exec == ph->exec[implicit] && gs.bound, 1);
			if (ph->deferred_old) {
				CUDA_CHECK(cudaStreamSynchronize(ph->d->stream));
				CUDA_CHECK(cudaGraphExecDestroy(ph->deferred_old));
				ph->deferred_old = NULL;
			}
		}

		ph->win[ph->win_len].step = s;
		ph->win[ph->win_len].launched = launched;
		ph->win[ph->win_len].eff = eff;
		if (++ph->win_len == WINDOW || s == ph->steps - 1)
			check_window(ph);
	}
}

/* Whole-phase counters of the agent against what the program did. */
static void check_totals(struct phase *ph)
{
	struct toggle_stats st = stats_of(ph);
	struct toggle_anomalies an;

	toggle_anomalies_get(ph->agent, &an);
	expect_eq(ph, "stats.node_set_calls", st.node_set_calls, ph->expected_calls);
	expect_eq(ph, "stats.launches", st.launches, ph->launches_ok);
	expect_eq(ph, "stats.launches_unrelated", st.launches_unrelated, ph->unrelated);
	expect_eq(ph, "stats.launches_refused", st.launches_refused, 1);
	expect_eq(ph, "anomalies.launch_unbound", an.launch_unbound, 1);
	expect_eq(ph, "anomalies.late_plans", an.late_plans, 1);
	expect_eq(ph, "anomalies.launch_stale", an.launch_stale, 0);
	expect_eq(ph, "anomalies.driver_errors", an.driver_errors, 0);
	expect_eq(ph, "anomalies.record_outside_window", an.record_outside_window, 0);
	expect_eq(ph, "anomalies.record_not_capturing", an.record_not_capturing, 0);
	expect_eq(ph, "anomalies.record_not_kernel", an.record_not_kernel, 0);
	expect_eq(ph, "records of the unbound graph", ph->unbound_records, 0);
	if (ph->fallback) {
		expect_eq(ph, "anomalies.device_fallbacks: every graph bound",
			  an.device_fallbacks, N_ROT + (N_ROT - 2)); /* one graph captured again */
		expect_eq(ph, "second instantiation refused", ph->second_inst_refused,
			  1);
	} else if (ph->mode == TOGGLE_MODE_DEVICE) {
		expect_eq(ph, "host cuGraphNodeSetEnabled calls (device mode)", st.node_set_calls, 0);
		expect_eq(ph, "stats.uploads: one per bound exec", st.uploads, ph->expected_uploads);
		expect_eq(ph, "second instantiation refused", ph->second_inst_refused,
			  1);
		expect_eq(ph, "anomalies.device_fallbacks", an.device_fallbacks, 0);
		for (int g = 0; g < N_ROT; g++)
			check_device_counters(ph, g, true);
	}
}

static uint64_t ring_mismatches(const struct phase *ph)
{
	return ph->missing + ph->extra + ph->duplicate + ph->unlaunched + ph->stray +
	       ph->overflows;
}

static uint64_t stats_fallbacks(const struct phase *ph)
{
	struct toggle_anomalies an;

	toggle_anomalies_get(ph->agent, &an);
	return an.device_fallbacks;
}

static void run_phase(struct phase *ph)
{
	double t0;
	struct toggle_stats st;

	setup(ph);
	t0 = gpu_now_ms();
	run_steps(ph);
	ph->elapsed_ms = gpu_now_ms() - t0;
	check_totals(ph);
	st = stats_of(ph);

	if (ph->fallback)
		printf("gpu-check: phase=%s fallback_graphs=%" PRIu64 " uploads_after_host_toggles=%"
		       PRIu64 "\n", ph->name, (uint64_t)0 + stats_fallbacks(ph), st.uploads);
	else if (ph->mode == TOGGLE_MODE_DEVICE)
		printf("gpu-check: phase=%s host_node_set_calls=%" PRIu64 " device_calls=%" PRIu64
		       " expected_device_calls=%" PRIu64 " device_failures=%" PRIu64
		       " planner_runs=%" PRIu64 " uploads=%" PRIu64 " mask_writes=%" PRIu64
		       " mask_words=%" PRIu64 " stream_joins=%" PRIu64 " device_mismatches=%" PRIu64
		       " second_instantiation_refused=%" PRIu64 "\n",
		       ph->name, st.node_set_calls, ph->dev_calls, ph->dev_expected_calls,
		       ph->dev_failures, ph->dev_runs, st.uploads, st.mask_writes, st.mask_words,
		       st.stream_joins, ph->dev_mismatch, ph->second_inst_refused);
	printf("gpu-check: phase=%s steps=%lld replays=%" PRIu64 " records=%" PRIu64
	       " mismatches=%" PRIu64 " (missing=%" PRIu64 " extra=%" PRIu64 " duplicate=%" PRIu64
	       " unlaunched=%" PRIu64 " stray=%" PRIu64 " overflow=%" PRIu64 ")"
	       " node_set_calls=%" PRIu64 " expected_calls=%" PRIu64 " calls_per_changed_hook=%.3f"
	       " call_mismatches=%" PRIu64 " resolve_mismatches=%" PRIu64 " api_mismatches=%" PRIu64
	       " reinstantiated=%" PRIu64 " rebinds=%" PRIu64 " bind_applied=%" PRIu64
	       " unrelated_launches=%" PRIu64 " refused_unbound=%" PRIu64 " plans=%" PRIu64
	       " late_plans_rejected=%" PRIu64 " windows=%" PRIu64 " windows_in_flight=%" PRIu64
	       " elapsed_ms=%.1f\n",
	       ph->name, ph->steps, ph->replays, ph->records, ring_mismatches(ph), ph->missing,
	       ph->extra, ph->duplicate, ph->unlaunched, ph->stray, ph->overflows,
	       st.node_set_calls, ph->expected_calls,
	       ph->expected_calls ? (double)st.node_set_calls / (double)ph->expected_calls : 1.0,
	       ph->call_mismatch, ph->resolve_mismatch, ph->api_mismatch, ph->reinstantiated,
	       st.rebinds, ph->bind_applied, ph->unrelated, ph->refused, ph->planned,
	       ph->late_rejected, ph->windows, ph->windows_in_flight, ph->elapsed_ms);
	fflush(stdout);
	teardown(ph);
}

/* ---- device mode on several streams ----------------------------------------------- */

#define MS_LAUNCHES 3000
#define MS_STREAMS  3

/* Returns the number of mismatching (launch, hook) pairs. */
static uint64_t check_streams(struct dev *d, const struct toggle_catalog *cat, uint64_t seed)
{
	static uint32_t want[MS_LAUNCHES][(N_HOOKS + 31) / 32], seen[MS_LAUNCHES][(N_HOOKS + 31) / 32];
	struct toggle_config cfg;
	struct toggle_agent *agent;
	struct toggle_set set;
	struct toggle_stats st;
	cudaStream_t s[MS_STREAMS];
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	long long *d_launch, minus1 = -1;
	unsigned long long count = 0;
	uint64_t rng = seed ^ 0x5157, bad = 0, stray = 0;
	int gid = 0;
	const float *row = d->act[0];
	int r;

	memset(&cfg, 0, sizeof cfg);
	cfg.name = "gpu_check_streams";
	cfg.catalog = *cat;
	cfg.mode = TOGGLE_MODE_DEVICE;
	cfg.strict = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	r = toggle_agent_open(&cfg, &agent);
	if (r != TOGGLE_OK)
		die("streams: toggle_agent_open: %s", toggle_strerror(r));
	for (int i = 0; i < MS_STREAMS; i++)
		CUDA_CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&d_launch, sizeof *d_launch));
	CUDA_CHECK(cudaMemcpy(d_launch, &minus1, sizeof minus1, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaMemset(d->count, 0, sizeof(unsigned long long)));
	CUDA_CHECK(cudaDeviceSynchronize());

	TG_CHECK(agent, toggle_capture_begin(agent));
	CUDA_CHECK(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal));
	TG_CHECK(agent, toggle_capture_planner(agent, (CUstream)s[0]));
	mark_launch<<<1, 1, 0, s[0]>>>(d_launch);
	CUDA_LAUNCHED();
	for (int h = 0; h < N_HOOKS; h++) {
		CUlaunchConfig lc;
		float *out = d->hook_out + (size_t)h * CHUNK;
		void *params[8] = {&row, &out, &d_launch, &d->ring, &d->count, &d->overflow, &gid, &h};

		memset(&lc, 0, sizeof lc);
		lc.gridDimX = CHUNK / THREADS;
		lc.gridDimY = lc.gridDimZ = 1;
		lc.blockDimX = THREADS;
		lc.blockDimY = lc.blockDimZ = 1;
		lc.hStream = (CUstream)s[0];
		TG_CHECK(agent, toggle_launch_producer(agent, &lc, d->produce_fn, params, hook_of(h)));
	}
	CUDA_CHECK(cudaStreamEndCapture(s[0], &graph));
	TG_CHECK(agent, toggle_capture_end(agent));
	TG_CHECK(agent, toggle_graph_instantiate(agent, graph, &exec));

	for (int k = 0; k < MS_LAUNCHES; k++) {
		toggle_set_clear(&set);
		for (int h = 0; h < N_HOOKS; h++) {
			bool on = rng_below(&rng, 2);
			set_put(&set, h, on);
			if (on)
				want[k][h / 32] |= 1u << (h % 32);
		}
		TG_CHECK(agent, toggle_set_enabled(agent, &set));
		TG_CHECK(agent, toggle_graph_launch(agent, graph, exec,
						    (CUstream)s[rng_below(&rng, MS_STREAMS)]));
	}
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemcpy(&count, d->count, sizeof count, cudaMemcpyDeviceToHost));
	if (count > RING_CAP)
		die("streams: ring overflow");
	CUDA_CHECK(cudaMemcpy(d->host_ring, d->ring, count * sizeof(struct ring_rec),
			      cudaMemcpyDeviceToHost));
	for (unsigned long long i = 0; i < count; i++) {
		const struct ring_rec *rr = &d->host_ring[i];

		if (rr->step < 0 || rr->step >= MS_LAUNCHES || rr->hook < 0 || rr->hook >= N_HOOKS) {
			stray++;
			continue;
		}
		if (seen[rr->step][rr->hook / 32] >> (rr->hook % 32) & 1)
			bad++; /* twice */
		seen[rr->step][rr->hook / 32] |= 1u << (rr->hook % 32);
	}
	for (int k = 0; k < MS_LAUNCHES; k++)
		for (int w = 0; w < (N_HOOKS + 31) / 32; w++)
			bad += (uint64_t)__builtin_popcount(want[k][w] ^ seen[k][w]);
	toggle_stats_get(agent, &st);
	{
		struct toggle_device_counters dc;

		TG_CHECK(agent, toggle_graph_device_counters(agent, graph, &dc));
		printf("gpu-check: phase=device-streams launches=%d streams=%d records=%llu "
		       "mismatches=%" PRIu64 " stray=%" PRIu64 " stream_joins=%" PRIu64
		       " mask_writes=%" PRIu64 " host_node_set_calls=%" PRIu64 " planner_runs=%" PRIu64
		       " device_calls=%" PRIu64 " device_failures=%" PRIu64 "\n",
		       MS_LAUNCHES, MS_STREAMS, count, bad, stray, st.stream_joins, st.mask_writes,
		       st.node_set_calls, dc.planner_runs, dc.device_calls, dc.device_failures);
		if (dc.planner_runs != MS_LAUNCHES || dc.device_failures || st.node_set_calls ||
		    !st.stream_joins)
			bad++;
	}
	toggle_agent_close(agent);
	CUDA_CHECK(cudaGraphExecDestroy(exec));
	CUDA_CHECK(cudaGraphDestroy(graph));
	for (int i = 0; i < MS_STREAMS; i++)
		CUDA_CHECK(cudaStreamDestroy(s[i]));
	CUDA_CHECK(cudaFree(d_launch));
	CUDA_CHECK(cudaMemset(d->count, 0, sizeof(unsigned long long)));
	CUDA_CHECK(cudaMemset(d->overflow, 0, sizeof(unsigned int)));
	return bad + stray;
}

/* ---- figures (informational) -------------------------------------------------- */

/* One graph (batch 1, every hook) under an agent of one mode, for the figures. */
static void bench_setup(struct phase *ph, struct dev *d, const struct toggle_catalog *cat,
			enum toggle_mode mode, const char *name)
{
	struct toggle_config cfg;
	int r;

	memset(ph, 0, sizeof *ph);
	ph->name = name;
	ph->mode = mode;
	ph->d = d;
	ph->cat = *cat;
	memset(&cfg, 0, sizeof cfg);
	cfg.name = name;
	cfg.catalog = *cat;
	cfg.mode = mode;
	cfg.strict = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	r = toggle_agent_open(&cfg, &ph->agent);
	if (r != TOGGLE_OK)
		die("bench: toggle_agent_open(%s): %s", name, toggle_strerror(r));
	ph->graph[0] = capture(ph, 0, true);
	if (mode == TOGGLE_MODE_DEVICE) {
		TG_CHECK(ph->agent, toggle_graph_instantiate(ph->agent, ph->graph[0], &ph->exec[0]));
	} else {
		CUDA_CHECK(cudaGraphInstantiate(&ph->exec[0], ph->graph[0], 0));
		TG_CHECK(ph->agent, toggle_graph_bind(ph->agent, ph->graph[0], ph->exec[0]));
	}
}

static void bench_teardown(struct phase *ph)
{
	CUDA_CHECK(cudaStreamSynchronize(ph->d->stream));
	toggle_agent_close(ph->agent);
	CUDA_CHECK(cudaGraphExecDestroy(ph->exec[0]));
	CUDA_CHECK(cudaGraphDestroy(ph->graph[0]));
}

/*
 * reps replays; with `change`, the set alternates between two sets that
 * differ in about half the hooks (48 of 96 producers flip at every replay).
 * Host: the median time of the toggle_graph_launch call itself (the stream
 * is drained every 32 launches, outside the timing, so that a full launch
 * queue never blocks it).  GPU: events around `reps` back-to-back replays.
 */
static void bench_run(struct phase *ph, bool change, int reps)
{
	static double host_us[4096];
	struct toggle_set a, b;
	cudaEvent_t e0, e1;
	float gpu_ms = 0;
	uint64_t rng = 0xfeed;
	struct dev *d = ph->d;

	if (reps > 4096)
		reps = 4096;
	toggle_set_clear(&a);
	toggle_set_clear(&b);
	for (int h = 0; h < N_HOOKS; h++) {
		bool on = rng_below(&rng, 2);
		set_put(&a, h, on);
		set_put(&b, h, change && h % 2 == 0 ? !on : on);
	}
	TG_CHECK(ph->agent, toggle_set_enabled(ph->agent, &a));
	TG_CHECK(ph->agent, toggle_graph_launch(ph->agent, ph->graph[0], ph->exec[0],
						 (CUstream)d->stream));
	CUDA_CHECK(cudaStreamSynchronize(d->stream));
	for (int i = 0; i < reps; i++) {
		double t0;

		TG_CHECK(ph->agent, toggle_set_enabled(ph->agent, i % 2 ? &a : &b));
		t0 = gpu_now_ms();
		TG_CHECK(ph->agent, toggle_graph_launch(ph->agent, ph->graph[0], ph->exec[0],
							 (CUstream)d->stream));
		host_us[i] = (gpu_now_ms() - t0) * 1e3;
		if (i % 32 == 31)
			CUDA_CHECK(cudaStreamSynchronize(d->stream));
	}
	CUDA_CHECK(cudaStreamSynchronize(d->stream));
	qsort(host_us, (size_t)reps, sizeof host_us[0], gpu_cmp_double);

	CUDA_CHECK(cudaEventCreate(&e0));
	CUDA_CHECK(cudaEventCreate(&e1));
	CUDA_CHECK(cudaEventRecord(e0, d->stream));
	for (int i = 0; i < reps; i++) {
		TG_CHECK(ph->agent, toggle_set_enabled(ph->agent, i % 2 ? &a : &b));
		TG_CHECK(ph->agent, toggle_graph_launch(ph->agent, ph->graph[0], ph->exec[0],
							 (CUstream)d->stream));
	}
	CUDA_CHECK(cudaEventRecord(e1, d->stream));
	CUDA_CHECK(cudaEventSynchronize(e1));
	CUDA_CHECK(cudaEventElapsedTime(&gpu_ms, e0, e1));
	CUDA_CHECK(cudaEventDestroy(e0));
	CUDA_CHECK(cudaEventDestroy(e1));
	/* the ring is not checked here: reset it */
	CUDA_CHECK(cudaMemset(d->count, 0, sizeof(unsigned long long)));
	CUDA_CHECK(cudaMemset(d->overflow, 0, sizeof(unsigned int)));
	printf("gpu-check: figures mode=%s set=%s producers=%d flips_per_replay=%u "
	       "host_us_per_launch_median=%.2f host_us_p90=%.2f gpu_us_per_replay=%.2f\n",
	       ph->name, change ? "changes_every_replay" : "unchanged", N_HOOKS,
	       change ? set_diff(&a, &b) : 0, host_us[reps / 2], host_us[reps * 9 / 10],
	       gpu_ms * 1e3 / reps);
}

typedef CUresult (*batch_fn)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t, CUstream);

/* Host cost of the two stream-ordered write candidates, k 64-bit words per call. */
static void bench_writes(struct dev *d)
{
	batch_fn batch = NULL;
	htod_fn htod = NULL;
	cudaDriverEntryPointQueryResult q;
	uint64_t *buf, words[256];
	static double us[2048];

	if (cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", (void **)&batch, 12030,
					     cudaEnableDefault, &q) != cudaSuccess || !batch ||
	    cudaGetDriverEntryPointByVersion("cuMemcpyHtoDAsync", (void **)&htod, 12030,
					     cudaEnableDefault, &q) != cudaSuccess || !htod) {
		printf("gpu-check: figures writes: driver entry points not found, skipped\n");
		return;
	}
	CUDA_CHECK(cudaMalloc(&buf, sizeof words));
	memset(words, 0, sizeof words);
	for (int k = 1; k <= 64; k *= 4) {
		for (int how = 0; how < 2; how++) {
			for (int i = 0; i < 2048; i++) {
				CUstreamBatchMemOpParams ops[64];
				CUresult r;
				double t0;

				for (int w = 0; w < k; w++) {
					memset(&ops[w], 0, sizeof ops[w]);
					ops[w].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
					ops[w].writeValue.address = (CUdeviceptr)(uintptr_t)(buf + w);
					ops[w].writeValue.value64 = (uint64_t)i;
					words[w] = (uint64_t)i;
				}
				t0 = gpu_now_ms();
				r = how == 0 ? batch((CUstream)d->stream, (unsigned)k, ops, 0)
					     : htod((CUdeviceptr)(uintptr_t)buf, words,
						    (size_t)k * sizeof words[0], (CUstream)d->stream);
				us[i] = (gpu_now_ms() - t0) * 1e3;
				if (r != CUDA_SUCCESS)
					die("bench: %s failed: %d", how ? "cuMemcpyHtoDAsync"
									: "cuStreamBatchMemOp", (int)r);
				if (i % 32 == 31)
					CUDA_CHECK(cudaStreamSynchronize(d->stream));
			}
			CUDA_CHECK(cudaStreamSynchronize(d->stream));
			qsort(us, 2048, sizeof us[0], gpu_cmp_double);
			printf("gpu-check: figures write=%s words=%d host_us_median=%.2f host_us_p90=%.2f\n",
			       how ? "cuMemcpyHtoDAsync(pageable)" : "cuStreamBatchMemOp(write64)", k,
			       us[1024], us[2048 * 9 / 10]);
		}
	}
	CUDA_CHECK(cudaFree(buf));
}

static void figures(struct dev *d, const struct toggle_catalog *cat)
{
	static struct phase ph;
	static const enum toggle_mode modes[2] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_DEVICE};
	static const char *const names[2] = {"lazy", "device"};

	for (int m = 0; m < 2; m++) {
		bench_setup(&ph, d, cat, modes[m], names[m]);
		bench_run(&ph, false, 2000);
		bench_run(&ph, true, 2000);
		bench_teardown(&ph);
	}
	bench_writes(d);
}

/* ---- main --------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: gpu_check [--steps N] [--device-steps N] [--seed N] [--no-figures]\n"
		   "  --steps N         steps of the lazy and eager phases (default 1000)\n"
		   "  --device-steps N  steps of the device phase (default 10000)\n"
		   "  --seed N          random seed (default 0x5eed)\n"
		   "  --no-figures      skip the timing figures\n");
}

static void parse_args(int argc, char **argv, long long *steps, long long *device_steps,
		       uint64_t *seed, bool *figs)
{
	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;

		if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
			usage(stdout);
			exit(0);
		} else if (strcmp(opt, "--no-figures") == 0) {
			*figs = false;
		} else if ((strcmp(opt, "--steps") == 0 || strcmp(opt, "--device-steps") == 0) && val) {
			long long *dst = opt[2] == 's' ? steps : device_steps;

			*dst = strtoll(val, &end, 10);
			if (end == val || *end || *dst < 1 || *dst > 1000000000LL)
				goto bad;
			i++;
		} else if (strcmp(opt, "--seed") == 0 && val) {
			*seed = strtoull(val, &end, 0);
			if (end == val || *end)
				goto bad;
			i++;
		} else {
			val = NULL;
			goto bad;
		}
		continue;
bad:
		fprintf(stderr, "gpu_check: bad argument: %s%s%s\n", opt, val ? " " : "",
			val ? val : "");
		usage(stderr);
		exit(2);
	}
}
/* No device is not a failure: print SKIPPED and leave with 0. */
static void device_header(void)
{
	struct cudaDeviceProp prop;
	int n = gpu_device_or_skip(), drv = 0, rt = 0;

	CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	CUDA_CHECK(cudaRuntimeGetVersion(&rt));
	printf("gpu-check: device 0 of %d: %s (sm_%d%d, %d SMs, %.1f GiB)\n", n, prop.name,
	       prop.major, prop.minor, prop.multiProcessorCount,
	       (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
	printf("gpu-check: driver %d.%d, runtime %d.%d, libtoggle %d.%d\n", drv / 1000,
	       drv % 1000 / 10, rt / 1000, rt % 1000 / 10, TOGGLE_VERSION_MAJOR,
	       TOGGLE_VERSION_MINOR);
}

int main(int argc, char **argv)
{
	enum { NPH = 4 };
	static struct phase phases[NPH];
	static const enum toggle_mode modes[NPH] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
						    TOGGLE_MODE_DEVICE, TOGGLE_MODE_DEVICE};
	static const char *const names[NPH] = {"lazy", "eager", "device", "device-fallback"};
	long long steps = 1000, device_steps = 10000;
	uint64_t seed = 0x5eed;
	bool figs = true;
	uint64_t streams_bad;
	struct toggle_catalog cat;
	struct dev d;
	char err[256], why[512];
	size_t wl = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv, &steps, &device_steps, &seed, &figs);
	device_header();
	printf("gpu-check: steps=%lld per host phase, %lld in the device phase, seed=0x%" PRIx64
	       ", window=%d, ring=%u records\n", steps, device_steps, seed, WINDOW, RING_CAP);

	cat.type_names = type_names;
	cat.n_types = N_TYPES;
	cat.n_layers = N_LAYERS;
	if (toggle_catalog_validate(&cat, err, sizeof err) != TOGGLE_OK)
		die("catalog: %s", err);

	memset(&d, 0, sizeof d);
	dev_init(&d);
	for (int p = 0; p < NPH; p++) {
		struct phase *ph = &phases[p];

		ph->name = names[p];
		ph->mode = modes[p];
		ph->fallback = p == 3;
		ph->steps = modes[p] == TOGGLE_MODE_DEVICE && !ph->fallback ? device_steps : steps;
		ph->rng = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(p + 1));
		ph->d = &d;
		ph->cat = cat;
		toggle_set_fill(&ph->full, &cat);
		run_phase(ph);
	}
	streams_bad = check_streams(&d, &cat, seed);
	if (figs)
		figures(&d, &cat);
	dev_free(&d);

	why[0] = '\0';
	for (int p = 0; p < NPH; p++) {
		const struct phase *ph = &phases[p];
		uint64_t ring = ring_mismatches(ph);

		if (ring || ph->call_mismatch || ph->resolve_mismatch || ph->api_mismatch ||
		    ph->dev_mismatch)
			wl += (size_t)snprintf(why + wl, sizeof why - wl,
					       "%s%s: ring=%" PRIu64 " calls=%" PRIu64
					       " resolve=%" PRIu64 " api=%" PRIu64 " device=%" PRIu64,
					       wl ? "; " : "", ph->name, ring, ph->call_mismatch,
					       ph->resolve_mismatch, ph->api_mismatch, ph->dev_mismatch);
	}
	if (streams_bad)
		wl += (size_t)snprintf(why + wl, sizeof why - wl, "%sdevice-streams: %" PRIu64,
				       wl ? "; " : "", streams_bad);
	if (wl) {
		printf("gpu-check: FAIL (%s)\n", why);
		return 1;
	}
	printf("gpu-check: PASS\n");
	return 0;
}
