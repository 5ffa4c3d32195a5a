/*
 * gpu_bench.cu - the GPU figures of graphtoggle (make gpu-bench, run by
 * scripts/gpu-bench.sh).  Figures only: nothing here asserts a speed.  Each
 * configuration is checked once per repetition for *behaviour* (which
 * producers actually ran), so that a method that silently does not toggle
 * cannot report a figure as if it did.
 *
 * The workload: a chain of L layers (L = 32 and 128), each a small compute
 * kernel on a 64 KiB activation followed by a producer that copies that
 * 64 KiB out to its own slot.  Everything is captured on one stream, so the
 * graph is one linear chain and every node is on the critical path: the
 * figures are per-node overheads, not bandwidth.
 *
 *  4. Replay time: no producers captured (the floor); all producers captured
 *     and, through a graphtoggle lazy agent, all enabled, all disabled, half
 *     (that agent has no producer-free exec, so "all disabled" is disabled
 *     nodes); and all off through an agent with the producer-free exec (a
 *     second exec without the producers, issue #14).
 *  5. Changing the producer set, half of the L producers flipping at each
 *     change (sets A = even layers, B = layers 0,1 mod 4: both half on):
 *       lazy      graphtoggle lazy (toggle_set_enabled + toggle_step_begin +
 *                 the toggle_graph_launch that applies, minus a launch that
 *                 applies nothing)
 *       recap     recapture (enabled producers only) + cudaGraphInstantiate
 *       update    recapture with every producer and an `active` kernel
 *                 argument + cudaGraphExecUpdate
 *       flag      every producer always launched, early exit on a device
 *                 flag array; change = one cudaMemcpyAsync of the flags
 *       cond      a conditional IF node around each producer, handles set by
 *                 a small kernel at the head of the graph from the same flag
 *                 array; change = one cudaMemcpyAsync of the flags
 *       device    graphtoggle device mode (toggle_capture_planner, producers
 *                 through toggle_launch_producer, toggle_graph_instantiate),
 *                 when toggle_agent_open accepts TOGGLE_MODE_DEVICE with strict
 *                 (else "device mode: not built"); calls also count the
 *                 planner's device-side set-enabled calls
 *     For each: host wall-clock cost of the change (median), driver calls
 *     made (graphtoggle), host time of the next launch, replay time after it.
 *
 *  6. The producer-free exec: its build time at bind (clone, remove the
 *     producers, instantiate; median of rebinds), its device memory
 *     (cudaMemGetInfo) and host memory (resident set) after its first launch,
 *     host µs of the launch that switches to it and back, device mode's
 *     all-off replay without a bare exec and with the assembled one (issue
 *     31: no clone, built node by node), and whether a small cache of execs for frequent non-empty
 *     sets would pay (item 5's figures: replay of an exec without the
 *     disabled producers against the lazy one, against the build cost).
 *
 * Replay time: CUDA events around R back-to-back replays of one exec (after
 * a warm-up), divided by R; median over the repetitions.  Configurations and
 * methods are interleaved inside each repetition, so that drift in clocks
 * touches them all alike.  Ratios are against figures of the same run.
 *
 * Output: progress lines, then the tables last.  With $OUT set, the full
 * results (median, min, max of every figure) go to $OUT/gpu_bench.csv.
 * Exit status: 0 (also when there is no CUDA device: SKIPPED), 1 on a CUDA
 * or libtoggle failure or a behaviour mismatch, 2 on bad usage.
 * Written in a plain C style on purpose, like examples/gpu_check.cu.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "toggle.h"

/* ---- the shape of the workload --------------------------------------------- */

#define MAX_L      128
#define SLICE      16384 /* floats: one activation, one producer copy (64 KiB) */
#define THREADS    256
#define MAX_REPS   201
#define WARM       10    /* launches before the first timed replay */
#define N_CFG      5     /* item 4 configurations */
#define N_METH     6     /* item 5 methods */

enum cfg { C_FLOOR, C_ALL, C_NONE, C_HALF, C_BARE };
static const char *const cfg_names[N_CFG] = {"floor (no producers)", "all enabled",
					     "all disabled", "half enabled",
					     "all off, bare exec"};
static const char *const cfg_keys[N_CFG] = {"floor", "all_on", "all_off", "half",
					    "all_off_bare"};

enum meth_kind { M_LAZY, M_RECAP, M_UPDATE, M_FLAG, M_COND, M_DEVICE };
static const char *const meth_names[N_METH] = {
	"graphtoggle lazy", "recapture + instantiate", "recapture + cudaGraphExecUpdate",
	"early exit on device flag", "conditional IF nodes", "graphtoggle device mode"};
static const char *const meth_keys[N_METH] = {"lazy", "recapture_instantiate",
					      "recapture_exec_update", "flag_early_exit",
					      "conditional_if", "device_mode"};

static const char *const type_names[1] = {"resid_post"};
static bool g_no_device; /* --no-device: leave graphtoggle device mode out */

/* ---- failure: die(), CUDA_CHECK, TG_CHECK ---------------------------------- */

#define GPU_TAG "gpu-bench"
#include "gpu_common.h"

static void on_alarm(int sig)
{
	static const char msg[] = "gpu-bench: FAIL (time limit reached, see --time-limit)\n";
	(void)sig;
	if (write(1, msg, sizeof msg - 1) < 0)
		_exit(1);
	_exit(1);
}

/* ---- kernels ---------------------------------------------------------------- */

/* The "layer": a few FMAs per element of the 64 KiB activation. */
__global__ void compute(float *x, int n, float a, float b)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		float v = x[i];
		for (int k = 0; k < 16; k++)
			v = v * a + b;
		x[i] = v;
	}
}

__device__ __forceinline__ void copy_slice(const float4 *src, float4 *dst)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < SLICE / 4)
		dst[i] = src[i];
}

/* A producer: copy the 64 KiB activation out. */
__global__ void produce(const float4 *src, float4 *dst)
{
	copy_slice(src, dst);
}

/* The same, with an argument that cudaGraphExecUpdate can change. */
__global__ void produce_active(const float4 *src, float4 *dst, int active)
{
	if (active)
		copy_slice(src, dst);
}

/* The same, always launched, leaving at once when its device flag is 0. */
__global__ void produce_flag(const float4 *src, float4 *dst, const int *flags, int idx)
{
	if (flags[idx])
		copy_slice(src, dst);
}

struct cond_handles {
	cudaGraphConditionalHandle h[MAX_L];
};

/* Head of the conditional graph: each IF node's condition from the flag array. */
__global__ void set_conds(struct cond_handles hs, const int *flags, int n)
{
	int i = threadIdx.x;

	if (i < n)
		cudaGraphSetConditional(hs.h[i], flags[i] ? 1u : 0u);
}

/* ---- small helpers ------------------------------------------------------------ */

struct summary {
	double med, min, max;
	int n;
};

static struct summary summarize(const double *v, int n)
{
	double tmp[MAX_REPS];
	struct summary s;

	memset(&s, 0, sizeof s);
	if (n <= 0)
		return s;
	memcpy(tmp, v, (size_t)n * sizeof(double));
	qsort(tmp, (size_t)n, sizeof(double), gpu_cmp_double);
	s.med = n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
	s.min = tmp[0];
	s.max = tmp[n - 1];
	s.n = n;
	return s;
}

static struct toggle_hook hook_of(int layer)
{
	struct toggle_hook k;

	k.type = 0;
	k.layer = (uint16_t)layer;
	return k;
}

/* The sets, as one bool per layer. */
static void set_all(bool *en, int L, bool on)
{
	for (int l = 0; l < L; l++)
		en[l] = on;
}

static void set_a(bool *en, int L) /* even layers */
{
	for (int l = 0; l < L; l++)
		en[l] = l % 2 == 0;
}

static void set_b(bool *en, int L) /* layers 0 and 1 mod 4: differs from A in L/2 */
{
	for (int l = 0; l < L; l++)
		en[l] = l % 4 < 2;
}

/* ---- the bench state ------------------------------------------------------------ */

struct meth {
	enum meth_kind kind;
	bool available;
	char note[192];          /* why not available */
	struct toggle_agent *agent; /* lazy and device */
	int64_t step;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	int *d_flags;            /* flag and cond */
	int *h_flags;            /* pinned */
	struct cond_handles handles;
	/* per repetition */
	double change[MAX_REPS];  /* host µs of the change (lazy: with the applying launch) */
	double next[MAX_REPS];    /* host µs of the next launch */
	double replay[MAX_REPS];  /* µs per replay after the change */
	double calls[MAX_REPS];   /* cuGraphNodeSetEnabled calls of the change */
	double dcalls[MAX_REPS];  /* device mode: device-side set-enabled calls per change */
	double mwords[MAX_REPS];  /* device mode: mask words written per change */
	uint64_t dc_prev, mw_prev;
	int nrep;
	uint64_t bad;             /* producer-ran mismatches */
	uint64_t checks;
};

struct bench {
	int L;
	int reps, replays;
	cudaStream_t s;
	cudaEvent_t e0, e1;
	float *x;     /* the activation */
	float *out;   /* MAX_L slots of SLICE floats */
	float *h_probe;
	struct toggle_catalog cat;
	CUfunction produce_fn; /* for toggle_launch_producer */
	bool device_built; /* TOGGLE_MODE_DEVICE accepted */
	char device_note[192];

	/* item 4 */
	cudaGraph_t floor_graph;
	cudaGraphExec_t floor_exec;
	double cfg_us[N_CFG][MAX_REPS];
	uint64_t cfg_bad[N_CFG], cfg_checks[N_CFG];

	/* item 5 */
	struct meth m[N_METH];

	/* item 6: the producer-free exec */
	struct meth bare;          /* a lazy agent with it, every producer captured */
	double bind_plain_us;      /* the lazy method's bind (no bare exec) */
	double build_us[MAX_REPS]; /* bind with the bare exec's build */
	int n_build;
	double dev_kib, host_kib;  /* memory after its first launch */
	double sw_bare[MAX_REPS], sw_main[MAX_REPS]; /* host µs of the switching launch */
	double dev_off[MAX_REPS];  /* device mode, all off, no bare exec: µs per replay */
	int n_dev_off;
	double dev_bare[MAX_REPS]; /* device mode, all off, its assembled bare exec (issue 31) */
	int n_dev_bare;
};

/* A libtoggle failure: fatal for the lazy agent; for device mode it marks
 * the row unavailable with the error, so that the other figures still come. */
static bool tg_ok(struct meth *m, int r, const char *what)
{
	if (r == TOGGLE_OK)
		return true;
	if (m->kind != M_DEVICE)
		die("%s: %d (%s): %s", what, r, toggle_strerror(r),
		    m->agent ? toggle_last_error(m->agent) : "");
	snprintf(m->note, sizeof m->note, "device mode: %s: %s: %s", what, toggle_strerror(r),
		 m->agent ? toggle_last_error(m->agent) : "");
	m->available = false;
	return false;
}

/* ---- capture ---------------------------------------------------------------- */

enum prod_kind { P_NONE, P_PLAIN, P_ACTIVE, P_FLAG, P_DEVICE };

/*
 * Capture the chain: per layer, compute then (by kind) a producer.
 *   P_NONE   no producers
 *   P_PLAIN  a producer for each layer with en[l] (en NULL: every layer);
 *            recorded with the agent when there is one
 *   P_ACTIVE every layer's producer, active = en[l]
 *   P_FLAG   every layer's producer, reading d_flags[l]
 *   P_DEVICE graphtoggle's planner first, then every layer's producer
 *            through toggle_launch_producer (device-updatable nodes)
 * Returns NULL only when the agent refused a record (m marked unavailable).
 */
static cudaGraph_t capture_chain(struct bench *b, enum prod_kind kind, const bool *en,
				 const int *d_flags, struct meth *m)
{
	struct toggle_agent *agent = m ? m->agent : NULL;
	cudaGraph_t g = NULL;
	bool ok = true;
	int rc;

	if (agent && !tg_ok(m, toggle_capture_begin(agent), "toggle_capture_begin"))
		return NULL;
	CUDA_CHECK(cudaStreamBeginCapture(b->s, cudaStreamCaptureModeThreadLocal));
	if (kind == P_DEVICE)
		ok = tg_ok(m, toggle_capture_planner(agent, b->s), "toggle_capture_planner");
	for (int l = 0; l < b->L; l++) {
		const float4 *src = (const float4 *)b->x;
		float4 *dst = (float4 *)(b->out + (size_t)l * SLICE);

		compute<<<SLICE / THREADS, THREADS, 0, b->s>>>(b->x, SLICE, 0.999f, 0.001f);
		CUDA_LAUNCHED();
		switch (kind) {
		case P_NONE:
			break;
		case P_PLAIN:
			if (en && !en[l])
				break;
			produce<<<SLICE / 4 / THREADS, THREADS, 0, b->s>>>(src, dst);
			CUDA_LAUNCHED();
			if (agent && ok) {
				rc = toggle_record_producer(agent, b->s, hook_of(l));
				ok = tg_ok(m, rc, "toggle_record_producer");
			}
			break;
		case P_ACTIVE:
			produce_active<<<SLICE / 4 / THREADS, THREADS, 0, b->s>>>(src, dst,
										  en[l] ? 1 : 0);
			CUDA_LAUNCHED();
			break;
		case P_FLAG:
			produce_flag<<<SLICE / 4 / THREADS, THREADS, 0, b->s>>>(src, dst, d_flags, l);
			CUDA_LAUNCHED();
			break;
		case P_DEVICE:
			if (ok) {
				CUlaunchConfig lc;
				void *params[2];

				memset(&lc, 0, sizeof lc);
				lc.gridDimX = SLICE / 4 / THREADS;
				lc.gridDimY = lc.gridDimZ = 1;
				lc.blockDimX = THREADS;
				lc.blockDimY = lc.blockDimZ = 1;
				lc.hStream = b->s;
				params[0] = &src;
				params[1] = &dst;
				rc = toggle_launch_producer(agent, &lc, b->produce_fn, params, hook_of(l));
				ok = tg_ok(m, rc, "toggle_launch_producer");
			}
			break;
		}
	}
	CUDA_CHECK(cudaStreamEndCapture(b->s, &g));
	if (agent) {
		rc = toggle_capture_end(agent);
		if (ok)
			ok = tg_ok(m, rc, "toggle_capture_end");
	}
	if (!ok) {
		CUDA_CHECK(cudaGraphDestroy(g));
		return NULL;
	}
	return g;
}

/* The conditional graph, built node by node (same chain, same kernels):
 * set_conds -> compute0 -> IF(h0){produce0} -> compute1 -> IF(h1){produce1} ... */
static cudaGraph_t build_cond_graph(struct bench *b, struct meth *m)
{
	cudaGraph_t g;
	cudaGraphNode_t prev, node;
	struct cudaKernelNodeParams kp;
	float *x = b->x;
	int n = SLICE, L = b->L;
	float a = 0.999f, c = 0.001f;
	const int *flags = m->d_flags;
	void *set_args[3], *comp_args[4];

	CUDA_CHECK(cudaGraphCreate(&g, 0));
	memset(&m->handles, 0, sizeof m->handles);
	for (int l = 0; l < L; l++)
		CUDA_CHECK(cudaGraphConditionalHandleCreate(&m->handles.h[l], g, 0,
							    cudaGraphCondAssignDefault));

	set_args[0] = &m->handles;
	set_args[1] = &flags;
	set_args[2] = &L;
	kp = cudaKernelNodeParams(); /* zero, dims 1 */
	kp.func = (void *)set_conds;
	kp.gridDim = dim3(1, 1, 1);
	kp.blockDim = dim3(MAX_L, 1, 1);
	kp.kernelParams = set_args;
	CUDA_CHECK(cudaGraphAddKernelNode(&prev, g, NULL, 0, &kp));

	comp_args[0] = &x;
	comp_args[1] = &n;
	comp_args[2] = &a;
	comp_args[3] = &c;
	for (int l = 0; l < L; l++) {
		/* its union has no default constructor in C++: aggregate-initialise (the
		 * members not named are zero) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
		struct cudaGraphNodeParams cp = {cudaGraphNodeTypeConditional};
#pragma GCC diagnostic pop
		cudaGraph_t body;
		cudaGraphNode_t pn;
		const float4 *src = (const float4 *)b->x;
		float4 *dst = (float4 *)(b->out + (size_t)l * SLICE);
		void *prod_args[2];

		kp = cudaKernelNodeParams(); /* zero, dims 1 */
		kp.func = (void *)compute;
		kp.gridDim = dim3(SLICE / THREADS, 1, 1);
		kp.blockDim = dim3(THREADS, 1, 1);
		kp.kernelParams = comp_args;
		CUDA_CHECK(cudaGraphAddKernelNode(&node, g, &prev, 1, &kp));
		prev = node;

		cp.conditional.handle = m->handles.h[l];
		cp.conditional.type = cudaGraphCondTypeIf;
		cp.conditional.size = 1;
		CUDA_CHECK(cudaGraphAddNode(&node, g, &prev, NULL, 1, &cp));
		prev = node;
		body = cp.conditional.phGraph_out[0];

		prod_args[0] = &src;
		prod_args[1] = &dst;
		kp = cudaKernelNodeParams(); /* zero, dims 1 */
		kp.func = (void *)produce;
		kp.gridDim = dim3(SLICE / 4 / THREADS, 1, 1);
		kp.blockDim = dim3(THREADS, 1, 1);
		kp.kernelParams = prod_args;
		CUDA_CHECK(cudaGraphAddKernelNode(&pn, body, NULL, 0, &kp));
	}
	return g;
}

/* ---- launching and timing ---------------------------------------------------- */

/* One launch of the method's exec, the way its user would launch it. */
static bool launch(struct bench *b, struct meth *m)
{
	if (m->agent)
		return tg_ok(m, toggle_graph_launch(m->agent, m->graph, m->exec, b->s),
			     "toggle_graph_launch");
	CUDA_CHECK(cudaGraphLaunch(m->exec, b->s));
	return true;
}

static void launch_floor(struct bench *b)
{
	CUDA_CHECK(cudaGraphLaunch(b->floor_exec, b->s));
}

/* µs per replay: warm-up, then events around back-to-back replays.  m NULL:
 * the floor exec. */
static double time_replays(struct bench *b, struct meth *m)
{
	float ms = 0;

	for (int i = 0; i < WARM; i++) {
		if (!m)
			launch_floor(b);
		else if (!launch(b, m))
			return -1;
	}
	CUDA_CHECK(cudaEventRecord(b->e0, b->s));
	for (int i = 0; i < b->replays; i++) {
		if (!m)
			launch_floor(b);
		else if (!launch(b, m))
			return -1;
	}
	CUDA_CHECK(cudaEventRecord(b->e1, b->s));
	CUDA_CHECK(cudaEventSynchronize(b->e1));
	CUDA_LAUNCHED();
	CUDA_CHECK(cudaEventElapsedTime(&ms, b->e0, b->e1));
	return (double)ms * 1000.0 / b->replays;
}

/*
 * Behaviour: clear every slot, replay once, read back one float of each slot.
 * A producer ran iff its slot is non-zero (the activation never is).  Returns
 * the number of layers whose producer did not do what en says.
 */
static uint64_t check_ran(struct bench *b, struct meth *m, const bool *en)
{
	uint64_t bad = 0;

	CUDA_CHECK(cudaStreamSynchronize(b->s));
	CUDA_CHECK(cudaMemsetAsync(b->out, 0, (size_t)b->L * SLICE * sizeof(float), b->s));
	if (!m)
		launch_floor(b);
	else if (!launch(b, m))
		return 0;
	CUDA_CHECK(cudaMemcpy2DAsync(b->h_probe, sizeof(float), b->out, SLICE * sizeof(float),
				     sizeof(float), (size_t)b->L, cudaMemcpyDeviceToHost, b->s));
	CUDA_CHECK(cudaStreamSynchronize(b->s));
	CUDA_LAUNCHED();
	for (int l = 0; l < b->L; l++) {
		bool ran = b->h_probe[l] != 0.0f;
		bool want = en ? en[l] : false;
		if (ran != want)
			bad++;
	}
	return bad;
}

/* ---- graphtoggle agents ---------------------------------------------------------- */

static int open_agent(struct bench *b, enum toggle_mode mode, const char *name,
		      struct toggle_agent **out, bool bare)
{
	struct toggle_config cfg;

	memset(&cfg, 0, sizeof cfg);
	cfg.no_bare_exec = !bare;
	cfg.name = name;
	cfg.catalog = b->cat;
	cfg.mode = mode;
	cfg.strict = true;
	cfg.backend = TOGGLE_BACKEND_CUDA;
	cfg.socket_path = NULL;
	return toggle_agent_open(&cfg, out);
}

static void to_set(const bool *en, int L, struct toggle_set *s)
{
	toggle_set_clear(s);
	for (int l = 0; l < L; l++)
		if (en[l] && toggle_set_add(s, hook_of(l)) != TOGGLE_OK)
			die("toggle_set_add(layer %d)", l);
}

static uint64_t node_calls(const struct meth *m)
{
	struct toggle_stats st;

	toggle_stats_get(m->agent, &st);
	return st.node_set_calls;
}

/* Device mode: device-side set-enabled calls so far (stream must be idle). */
static uint64_t device_calls(struct meth *m)
{
	struct toggle_device_counters dc;

	memset(&dc, 0, sizeof dc);
	if (!tg_ok(m, toggle_graph_device_counters(m->agent, m->graph, &dc),
		   "toggle_graph_device_counters"))
		return 0;
	return dc.device_calls;
}

static uint64_t mask_words(const struct meth *m)
{
	struct toggle_stats st;

	toggle_stats_get(m->agent, &st);
	return st.mask_words;
}

/* The agent's set for the next step (no launch). */
static bool agent_set(struct meth *m, const bool *en, int L)
{
	struct toggle_set s;

	to_set(en, L, &s);
	if (!tg_ok(m, toggle_set_enabled(m->agent, &s), "toggle_set_enabled"))
		return false;
	return tg_ok(m, toggle_step_begin(m->agent, ++m->step, NULL), "toggle_step_begin");
}

/* ---- the methods: set-up and change --------------------------------------------- */

static void fill_flags(struct meth *m, const bool *en, int L)
{
	for (int l = 0; l < L; l++)
		m->h_flags[l] = en[l] ? 1 : 0;
}

/* Build the method's graph and exec with set en; false if not available. */
static bool meth_setup(struct bench *b, struct meth *m, const bool *en)
{
	char name[TOGGLE_MAX_NAME];
	int r;

	m->available = true;
	m->step = 0;
	switch (m->kind) {
	case M_LAZY:
	case M_DEVICE:
		if (m->kind == M_DEVICE && !b->device_built) {
			snprintf(m->note, sizeof m->note, "%s", b->device_note);
			m->available = false;
			return false;
		}
		snprintf(name, sizeof name, "gpu_bench_%s_%d", meth_keys[m->kind], b->L);
		/* Device mode with its bare exec (issue 31): item 5's sets are half on,
		 * so it never runs there; item 6 times all off with it and without. */
		r = open_agent(b, m->kind == M_LAZY ? TOGGLE_MODE_LAZY : TOGGLE_MODE_DEVICE, name,
			       &m->agent, m->kind == M_DEVICE);
		if (r != TOGGLE_OK) {
			m->agent = NULL;
			tg_ok(m, r, "toggle_agent_open");
			return false;
		}
		if (m->kind == M_LAZY) {
			m->graph = capture_chain(b, P_PLAIN, NULL, NULL, m);
			CUDA_CHECK(cudaGraphInstantiate(&m->exec, m->graph, 0));
			b->bind_plain_us = gpu_now_us();
			if (!tg_ok(m, toggle_graph_bind(m->agent, m->graph, m->exec),
				   "toggle_graph_bind"))
				return false;
			b->bind_plain_us = gpu_now_us() - b->bind_plain_us;
		} else {
			struct toggle_graph_status gs;

			if (toggle_agent_mode(m->agent) != TOGGLE_MODE_DEVICE) {
				snprintf(m->note, sizeof m->note,
					 "device mode: agent runs in mode %d",
					 (int)toggle_agent_mode(m->agent));
				m->available = false;
				return false;
			}
			m->graph = capture_chain(b, P_DEVICE, NULL, NULL, m);
			if (!m->graph)
				return false;
			/* instantiates, binds and uploads (once: a driver rule) */
			if (!tg_ok(m, toggle_graph_instantiate(m->agent, m->graph, &m->exec),
				   "toggle_graph_instantiate"))
				return false;
			if (!tg_ok(m, toggle_graph_status(m->agent, m->graph, &gs),
				   "toggle_graph_status"))
				return false;
			if (gs.mode != TOGGLE_MODE_DEVICE || gs.device_fallback) {
				snprintf(m->note, sizeof m->note,
					 "device mode: graph runs on the host: %s", gs.note);
				m->available = false;
				return false;
			}
		}
		if (!agent_set(m, en, b->L))
			return false;
		break;
	case M_RECAP:
		m->graph = capture_chain(b, P_PLAIN, en, NULL, NULL);
		CUDA_CHECK(cudaGraphInstantiate(&m->exec, m->graph, 0));
		break;
	case M_UPDATE:
		m->graph = capture_chain(b, P_ACTIVE, en, NULL, NULL);
		CUDA_CHECK(cudaGraphInstantiate(&m->exec, m->graph, 0));
		break;
	case M_FLAG:
	case M_COND:
		CUDA_CHECK(cudaMalloc(&m->d_flags, MAX_L * sizeof(int)));
		CUDA_CHECK(cudaMallocHost(&m->h_flags, MAX_L * sizeof(int)));
		memset(m->h_flags, 0, MAX_L * sizeof(int));
		fill_flags(m, en, b->L);
		CUDA_CHECK(cudaMemcpy(m->d_flags, m->h_flags, MAX_L * sizeof(int),
				      cudaMemcpyHostToDevice));
		m->graph = m->kind == M_FLAG ? capture_chain(b, P_FLAG, NULL, m->d_flags, NULL)
					     : build_cond_graph(b, m);
		CUDA_CHECK(cudaGraphInstantiate(&m->exec, m->graph, 0));
		break;
	}
	if (m->kind != M_DEVICE) /* device mode uploaded it at bind */
		CUDA_CHECK(cudaGraphUpload(m->exec, b->s));
	for (int i = 0; i < WARM; i++)
		if (!launch(b, m))
			return false;
	CUDA_CHECK(cudaStreamSynchronize(b->s));
	return m->available;
}

static void meth_teardown(struct bench *b, struct meth *m)
{
	CUDA_CHECK(cudaStreamSynchronize(b->s));
	if (m->agent)
		toggle_agent_close(m->agent); /* before the graph: it holds its nodes */
	m->agent = NULL;
	if (m->exec)
		CUDA_CHECK(cudaGraphExecDestroy(m->exec));
	if (m->graph)
		CUDA_CHECK(cudaGraphDestroy(m->graph));
	if (m->d_flags)
		CUDA_CHECK(cudaFree(m->d_flags));
	if (m->h_flags)
		CUDA_CHECK(cudaFreeHost(m->h_flags));
	m->exec = NULL;
	m->graph = NULL;
	m->d_flags = NULL;
	m->h_flags = NULL;
}

/*
 * Change the set to en; the stream is idle.  Returns the host µs of the
 * change (lazy and device: set + step_begin + the launch that applies it),
 * or -1 when the method failed (device mode only).  *calls: driver node
 * calls made (graphtoggle only).
 */
static double meth_change(struct bench *b, struct meth *m, const bool *en, double *calls)
{
	double t0, t1;
	uint64_t c0;
	cudaGraph_t g, old_graph;
	cudaGraphExec_t e, old_exec;
	cudaGraphExecUpdateResultInfo info;
	cudaError_t err;

	*calls = 0;
	switch (m->kind) {
	case M_LAZY:
	case M_DEVICE:
		c0 = node_calls(m);
		t0 = gpu_now_us();
		if (!agent_set(m, en, b->L) || !launch(b, m))
			return -1;
		t1 = gpu_now_us();
		*calls = (double)(node_calls(m) - c0);
		return t1 - t0;
	case M_RECAP:
		old_graph = m->graph;
		old_exec = m->exec;
		t0 = gpu_now_us();
		g = capture_chain(b, P_PLAIN, en, NULL, NULL);
		CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
		t1 = gpu_now_us();
		m->graph = g;
		m->exec = e;
		CUDA_CHECK(cudaGraphExecDestroy(old_exec)); /* idle stream: nothing in flight */
		CUDA_CHECK(cudaGraphDestroy(old_graph));
		return t1 - t0;
	case M_UPDATE:
		memset(&info, 0, sizeof info);
		t0 = gpu_now_us();
		g = capture_chain(b, P_ACTIVE, en, NULL, NULL);
		err = cudaGraphExecUpdate(m->exec, g, &info);
		t1 = gpu_now_us();
		if (err != cudaSuccess || info.result != cudaGraphExecUpdateSuccess)
			die("cudaGraphExecUpdate: %s (result %d)", cudaGetErrorName(err),
			    (int)info.result);
		CUDA_CHECK(cudaGraphDestroy(m->graph)); /* keep the graph the exec now matches */
		m->graph = g;
		return t1 - t0;
	case M_FLAG:
	case M_COND:
		t0 = gpu_now_us();
		fill_flags(m, en, b->L);
		CUDA_CHECK(cudaMemcpyAsync(m->d_flags, m->h_flags, (size_t)b->L * sizeof(int),
					   cudaMemcpyHostToDevice, b->s));
		t1 = gpu_now_us();
		return t1 - t0;
	}
	return -1;
}

/* ---- item 4 ------------------------------------------------------------------ */

static void run_item4(struct bench *b)
{
	struct meth *lz = &b->m[M_LAZY];
	bool en[MAX_L];

	for (int rep = 0; rep < b->reps; rep++) {
		for (int c = 0; c < N_CFG; c++) {
			const bool *want = en;
			struct meth *m = lz;

			switch (c) {
			case C_FLOOR:
				m = NULL;
				want = NULL;
				break;
			case C_ALL:
				set_all(en, b->L, true);
				break;
			case C_NONE:
				set_all(en, b->L, false);
				break;
			case C_HALF:
				set_a(en, b->L);
				break;
			case C_BARE:
				m = &b->bare;
				set_all(en, b->L, false);
				break;
			}
			if (m && !agent_set(m, en, b->L))
				die("lazy agent failed");
			b->cfg_us[c][rep] = time_replays(b, m);
			b->cfg_bad[c] += check_ran(b, m, want);
			if (c == C_BARE) { /* and it was the producer-free exec that ran */
				struct toggle_graph_status gs;

				TG_CHECK(m->agent, toggle_graph_status(m->agent, m->graph, &gs));
				b->cfg_bad[c] += !gs.bare_running;
			}
			b->cfg_checks[c]++;
		}
	}
}

/* ---- item 6: the producer-free exec ------------------------------------------- */

/*
 * A lazy agent with the producer-free exec and its own copy of the chain:
 * memory around the first bind and launch, then the build time over rebinds
 * of the same exec (each destroys the bare exec and builds it again).
 */
static void bare_setup(struct bench *b)
{
	struct meth *m = &b->bare;
	char name[TOGGLE_MAX_NAME];
	size_t free0, free1, total;
	double rss0, t0;
	bool none[MAX_L];

	memset(m, 0, sizeof *m);
	m->kind = M_LAZY;
	m->available = true;
	snprintf(name, sizeof name, "gpu_bench_bare_%d", b->L);
	if (open_agent(b, TOGGLE_MODE_LAZY, name, &m->agent, true) != TOGGLE_OK)
		die("bare: toggle_agent_open failed");
	m->graph = capture_chain(b, P_PLAIN, NULL, NULL, m);
	CUDA_CHECK(cudaGraphInstantiate(&m->exec, m->graph, 0));
	CUDA_CHECK(cudaGraphUpload(m->exec, b->s));
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemGetInfo(&free0, &total));
	rss0 = gpu_rss_kib();
	t0 = gpu_now_us();
	TG_CHECK(m->agent, toggle_graph_bind(m->agent, m->graph, m->exec));
	b->build_us[0] = gpu_now_us() - t0;
	b->n_build = 1;
	set_all(none, b->L, false);
	if (!agent_set(m, none, b->L) || !launch(b, m))
		die("bare: first launch failed");
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemGetInfo(&free1, &total));
	b->dev_kib = free0 >= free1 ? (double)(free0 - free1) / 1024.0 : 0.0;
	b->host_kib = gpu_rss_kib() - rss0;
	{
		struct toggle_graph_status gs;

		TG_CHECK(m->agent, toggle_graph_status(m->agent, m->graph, &gs));
		if (!gs.bare_exec || !gs.bare_running)
			die("bare: no producer-free exec (%s)", toggle_last_error(m->agent));
	}
	for (int i = 1; i < b->reps && i < 11; i++) {
		CUDA_CHECK(cudaStreamSynchronize(b->s));
		t0 = gpu_now_us();
		TG_CHECK(m->agent, toggle_graph_bind(m->agent, m->graph, m->exec));
		b->build_us[b->n_build++] = gpu_now_us() - t0;
	}
	for (int i = 0; i < WARM; i++)
		if (!launch(b, m))
			die("bare: warm-up launch failed");
	CUDA_CHECK(cudaStreamSynchronize(b->s));
}

/* Switch host cost; device mode all off.  After item 5 (device mode is set up). */
static void run_item6(struct bench *b)
{
	struct meth *m = &b->bare, *dv = &b->m[M_DEVICE];
	bool none[MAX_L], one[MAX_L];
	double t0;

	set_all(none, b->L, false);
	set_all(one, b->L, false);
	one[3] = true;
	for (int rep = 0; rep < b->reps; rep++) {
		CUDA_CHECK(cudaStreamSynchronize(b->s));
		if (!agent_set(m, none, b->L))
			die("bare: set failed");
		t0 = gpu_now_us();
		if (!launch(b, m))
			die("bare: launch failed");
		b->sw_bare[rep] = gpu_now_us() - t0;
		CUDA_CHECK(cudaStreamSynchronize(b->s));
		if (!agent_set(m, one, b->L))
			die("bare: set failed");
		t0 = gpu_now_us();
		if (!launch(b, m))
			die("bare: launch failed");
		b->sw_main[rep] = gpu_now_us() - t0;
	}
	b->bare.bad += check_ran(b, m, one);
	b->bare.checks++;
	if (!dv->available)
		return;
	/* Interleaved: all off without the bare exec (the planner and the
	 * disabled device-updatable producers), then with it (issue 31). */
	for (int rep = 0; rep < b->reps; rep++) {
		double us;

		for (int with = 0; with < 2; with++) {
			CUDA_CHECK(cudaStreamSynchronize(b->s));
			if (!tg_ok(dv, toggle_graph_set_bare(dv->agent, dv->graph, with != 0),
				   "toggle_graph_set_bare"))
				return;
			if (with) {
				struct toggle_graph_status gs;

				if (!tg_ok(dv, toggle_graph_status(dv->agent, dv->graph, &gs),
					   "toggle_graph_status"))
					return;
				if (!gs.bare_exec) { /* not built: no row, never the device exec's */
					snprintf(dv->note, sizeof dv->note, "no bare exec: %s",
						 toggle_last_error(dv->agent));
					continue;
				}
			}
			if (!agent_set(dv, none, b->L) || !launch(b, dv))
				return;
			us = time_replays(b, dv);
			if (us < 0)
				return;
			if (with)
				b->dev_bare[b->n_dev_bare++] = us;
			else
				b->dev_off[b->n_dev_off++] = us;
			dv->bad += check_ran(b, dv, none);
			dv->checks++;
		}
	}
}

/* ---- item 5 ------------------------------------------------------------------ */

static void run_item5(struct bench *b)
{
	bool a[MAX_L], bb[MAX_L];

	set_a(a, b->L);
	set_b(bb, b->L);
	/* every method starts with set A, built and warm */
	for (int k = 0; k < N_METH; k++) {
		struct meth *m = &b->m[k];

		if (k != M_LAZY) /* the lazy method exists since item 4 */
			meth_setup(b, m, a);
		else if (!agent_set(m, a, b->L))
			die("lazy agent failed");
		if (m->available) {
			m->bad += check_ran(b, m, a);
			m->checks++;
		}
		if (m->available && k == M_DEVICE) {
			m->dc_prev = device_calls(m);
			m->mw_prev = mask_words(m);
		}
		printf("gpu-bench: L=%d %s: %s\n", b->L, meth_names[k],
		       m->available ? "ready" : m->note);
	}

	for (int rep = 0; rep < b->reps; rep++) {
		const bool *en = rep % 2 == 0 ? bb : a;

		for (int k = 0; k < N_METH; k++) {
			struct meth *m = &b->m[k];
			double cost, calls, t0, t1, us;

			if (!m->available)
				continue;
			CUDA_CHECK(cudaStreamSynchronize(b->s));
			cost = meth_change(b, m, en, &calls);
			if (cost < 0)
				continue;
			CUDA_CHECK(cudaStreamSynchronize(b->s));
			t0 = gpu_now_us();
			if (!launch(b, m))
				continue;
			t1 = gpu_now_us();
			us = time_replays(b, m);
			if (us < 0)
				continue;
			m->change[m->nrep] = cost;
			m->next[m->nrep] = t1 - t0;
			m->replay[m->nrep] = us;
			m->calls[m->nrep] = calls;
			if (k == M_DEVICE) { /* the stream is idle after time_replays */
				uint64_t dc = device_calls(m), mw = mask_words(m);

				m->dcalls[m->nrep] = (double)(dc - m->dc_prev);
				m->mwords[m->nrep] = (double)(mw - m->mw_prev);
				m->dc_prev = dc;
				m->mw_prev = mw;
			}
			m->nrep++;
			m->bad += check_ran(b, m, en);
			m->checks++;
		}
	}
}

/* ---- output ------------------------------------------------------------------- */

static FILE *g_csv, *g_raw;

/* Every repetition's figure, for plots and for spotting drift. */
static void raw_rows(int L, const char *section, const char *name, const char *metric,
		     const double *v, int n)
{
	for (int i = 0; g_raw && i < n; i++)
		fprintf(g_raw, "%d,%s,%s,%s,%d,%.4f\n", L, section, name, metric, i, v[i]);
}

static void csv_row(int L, const char *section, const char *name, const char *metric,
		    struct summary s)
{
	if (g_csv)
		fprintf(g_csv, "%d,%s,%s,%s,%.4f,%.4f,%.4f,%d\n", L, section, name, metric, s.med,
			s.min, s.max, s.n);
}

/* The change cost of a method: lazy and device subtract the launch. */
static double change_cost(const struct meth *m)
{
	struct summary c = summarize(m->change, m->nrep);

	if (m->kind == M_LAZY || m->kind == M_DEVICE)
		return c.med - summarize(m->next, m->nrep).med;
	return c.med;
}

static void write_csv(struct bench *b)
{
	for (int c = 0; c < N_CFG; c++) {
		csv_row(b->L, "replay", cfg_keys[c], "us_per_replay",
			summarize(b->cfg_us[c], b->reps));
		raw_rows(b->L, "replay", cfg_keys[c], "us_per_replay", b->cfg_us[c], b->reps);
	}
	for (int k = 0; k < N_METH; k++) {
		const struct meth *m = &b->m[k];
		struct summary d;

		if (!m->available || m->nrep == 0)
			continue;
		csv_row(b->L, "change", meth_keys[k], "host_us_change_raw",
			summarize(m->change, m->nrep));
		memset(&d, 0, sizeof d);
		d.med = change_cost(m);
		d.min = d.max = d.med;
		d.n = m->nrep;
		csv_row(b->L, "change", meth_keys[k], "host_us_change", d);
		csv_row(b->L, "change", meth_keys[k], "host_us_next_launch",
			summarize(m->next, m->nrep));
		csv_row(b->L, "change", meth_keys[k], "node_set_calls", summarize(m->calls, m->nrep));
		if (k == M_DEVICE) {
			csv_row(b->L, "change", meth_keys[k], "device_set_enabled_calls",
				summarize(m->dcalls, m->nrep));
			csv_row(b->L, "change", meth_keys[k], "mask_words_written",
				summarize(m->mwords, m->nrep));
		}
		csv_row(b->L, "change", meth_keys[k], "us_per_replay_after",
			summarize(m->replay, m->nrep));
		raw_rows(b->L, "change", meth_keys[k], "host_us_change_raw", m->change, m->nrep);
		raw_rows(b->L, "change", meth_keys[k], "host_us_next_launch", m->next, m->nrep);
		raw_rows(b->L, "change", meth_keys[k], "us_per_replay_after", m->replay, m->nrep);
	}
	{
		struct summary one;

		memset(&one, 0, sizeof one);
		one.n = 1;
		csv_row(b->L, "bare", "build", "host_us_bind_with_build",
			summarize(b->build_us, b->n_build));
		one.med = one.min = one.max = b->bind_plain_us;
		csv_row(b->L, "bare", "bind_without", "host_us_bind", one);
		one.med = one.min = one.max = b->dev_kib;
		csv_row(b->L, "bare", "memory", "device_kib", one);
		one.med = one.min = one.max = b->host_kib;
		csv_row(b->L, "bare", "memory", "host_kib", one);
		csv_row(b->L, "bare", "switch", "host_us_launch_to_bare",
			summarize(b->sw_bare, b->reps));
		csv_row(b->L, "bare", "switch", "host_us_launch_to_main_1_node",
			summarize(b->sw_main, b->reps));
		if (b->n_dev_off)
			csv_row(b->L, "bare", "device_mode_all_off", "us_per_replay",
				summarize(b->dev_off, b->n_dev_off));
		if (b->n_dev_bare)
			csv_row(b->L, "bare", "device_mode_all_off_bare_exec", "us_per_replay",
				summarize(b->dev_bare, b->n_dev_bare));
		raw_rows(b->L, "bare", "build", "host_us_bind_with_build", b->build_us, b->n_build);
	}
}

static void print_check(uint64_t bad, uint64_t checks, char *buf, size_t len)
{
	if (bad)
		snprintf(buf, len, "BAD %" PRIu64, bad);
	else
		snprintf(buf, len, "ok %" PRIu64, checks);
}

static void print_item4(struct bench *const *bs, int nb)
{
	printf("\n== 4. Replay time of a chain of L layers (compute kernel + 64 KiB producer per layer)\n");
	printf("   us per replay, median of %d repetitions x %d back-to-back replays; "
	       "lazy agent sets the producers\n", bs[0]->reps, bs[0]->replays);
	printf("%-5s %-22s %12s %10s %14s %7s\n", "L", "configuration", "us/replay", "x floor",
	       "delta/node us", "check");
	for (int i = 0; i < nb; i++) {
		const struct bench *b = bs[i];
		double floor_us = summarize(b->cfg_us[C_FLOOR], b->reps).med;

		for (int c = 0; c < N_CFG; c++) {
			double us = summarize(b->cfg_us[c], b->reps).med;
			char chk[32], delta[32];

			print_check(b->cfg_bad[c], b->cfg_checks[c], chk, sizeof chk);
			if (c == C_FLOOR)
				snprintf(delta, sizeof delta, "-");
			else
				snprintf(delta, sizeof delta, "%.3f", (us - floor_us) / b->L);
			printf("%-5d %-22s %12.2f %10.3f %14s %7s\n", b->L, cfg_names[c], us,
			       us / floor_us, delta, chk);
		}
		{
			double on = summarize(b->cfg_us[C_ALL], b->reps).med;
			double off = summarize(b->cfg_us[C_NONE], b->reps).med;
			double half = summarize(b->cfg_us[C_HALF], b->reps).med;
			printf("%-5d per producer: enabled %.3f us, disabled %.3f us over no node; "
			       "half predicted from them %.2f us, measured %.2f us\n", b->L,
			       (on - floor_us) / b->L, (off - floor_us) / b->L,
			       floor_us + (on - floor_us) / 2 + (off - floor_us) / 2, half);
		}
	}
	printf("   delta/node = (us/replay - floor) / L: per producer node, enabled or disabled\n");
}

static void print_item5(struct bench *const *bs, int nb)
{
	printf("\n== 5. Changing the producer set (L/2 producers flip per change; "
	       "sets stay half on), medians of %d changes\n", bs[0]->reps);
	printf("   change us: host wall clock (lazy/device: set + step_begin + the applying launch, "
	       "minus a launch that applies nothing);\n"
	       "   calls: host cuGraphNodeSetEnabled per change (device mode: + device-side "
	       "set-enabled calls); next launch: host us of the launch "
	       "after the change (recapture: includes the upload);\n"
	       "   replay: us per replay after the change, %d back-to-back replays\n",
	       bs[0]->replays);
	printf("%-5s %-32s %10s %8s %9s %9s %10s %9s %8s %7s\n", "L", "method", "change us",
	       "x lazy", "calls", "next us", "replay us", "x floor", "x lazy", "check");
	for (int i = 0; i < nb; i++) {
		const struct bench *b = bs[i];
		const struct meth *lz = &b->m[M_LAZY];
		double floor_us = summarize(b->cfg_us[C_FLOOR], b->reps).med;
		double lz_change = change_cost(lz);
		double lz_replay = summarize(lz->replay, lz->nrep).med;

		for (int k = 0; k < N_METH; k++) {
			const struct meth *m = &b->m[k];
			double ch, rp;
			char chk[32], calls[32];

			if (!m->available || m->nrep == 0) {
				printf("%-5d %-32s %s\n", b->L, meth_names[k],
				       m->note[0] ? m->note : "no figures");
				continue;
			}
			ch = change_cost(m);
			rp = summarize(m->replay, m->nrep).med;
			print_check(m->bad, m->checks, chk, sizeof chk);
			if (k == M_DEVICE)
				snprintf(calls, sizeof calls, "%.0f+%.0fd",
					 summarize(m->calls, m->nrep).med,
					 summarize(m->dcalls, m->nrep).med);
			else
				snprintf(calls, sizeof calls, "%.0f", summarize(m->calls, m->nrep).med);
			printf("%-5d %-32s %10.2f %8.2f %9s %9.2f %10.2f %9.3f %8.3f %7s\n", b->L,
			       meth_names[k], ch, ch / lz_change, calls,
			       summarize(m->next, m->nrep).med,
			       rp, rp / floor_us, rp / lz_replay, chk);
		}
	}
}

static void print_item6(struct bench *const *bs, int nb)
{
	printf("\n== 6. The producer-free exec (issue #14)\n");
	printf("   all off: us per replay, x floor (target <= 1.01); build: host us of a bind "
	       "that builds it (clone, remove producers, instantiate), median of %d;\n"
	       "   memory after its first launch: device (cudaMemGetInfo, driver granularity) "
	       "and host resident; switch: host us of the launch that goes to the bare exec,\n"
	       "   and of the one that goes back to the main exec with 1 node changed\n",
	       bs[0]->n_build);
	printf("%-5s %10s %8s %10s %10s %10s %10s %12s %12s %7s\n", "L", "bare us", "x floor",
	       "build us", "bind us", "dev KiB", "host KiB", "to bare us", "to main us", "check");
	for (int i = 0; i < nb; i++) {
		const struct bench *b = bs[i];
		double floor_us = summarize(b->cfg_us[C_FLOOR], b->reps).med;
		double bare_us = summarize(b->cfg_us[C_BARE], b->reps).med;
		char chk[32];

		print_check(b->cfg_bad[C_BARE] + b->bare.bad, b->cfg_checks[C_BARE] + b->bare.checks,
			    chk, sizeof chk);
		printf("%-5d %10.2f %8.3f %10.0f %10.1f %10.0f %10.0f %12.2f %12.2f %7s\n", b->L,
		       bare_us, bare_us / floor_us, summarize(b->build_us, b->n_build).med,
		       b->bind_plain_us, b->dev_kib, b->host_kib,
		       summarize(b->sw_bare, b->reps).med, summarize(b->sw_main, b->reps).med, chk);
	}
	printf("   bind us: the lazy method's bind, without a bare exec\n");
	printf("\n   device mode, all off: without a bare exec (planner + disabled "
	       "device-updatable producers) and with the assembled one (issue 31)\n");
	for (int i = 0; i < nb; i++) {
		const struct bench *b = bs[i];
		double floor_us = summarize(b->cfg_us[C_FLOOR], b->reps).med;

		if (!b->n_dev_off) {
			printf("%-5d device mode: no figures (%s)\n", b->L,
			       b->m[M_DEVICE].note[0] ? b->m[M_DEVICE].note : "not run");
			continue;
		}
		{
			double d = summarize(b->dev_off, b->n_dev_off).med;
			printf("%-5d device all off %.2f us/replay = %.3fx floor; lazy with bare exec "
			       "%.3fx\n", b->L, d, d / floor_us,
			       summarize(b->cfg_us[C_BARE], b->reps).med / floor_us);
			if (b->n_dev_bare) {
				double db = summarize(b->dev_bare, b->n_dev_bare).med;
				printf("%-5d device all off, bare exec %.2f us/replay = %.3fx floor\n",
				       b->L, db, db / floor_us);
			} else {
				printf("%-5d device all off, bare exec: none (%s)\n", b->L,
				       b->m[M_DEVICE].note[0] ? b->m[M_DEVICE].note : "not built");
			}
		}
	}
	printf("\n   a cache of execs for frequent non-empty sets (from item 5, sets half on): an "
	       "entry replays like recapture's exec,\n   costs a build like the bare exec's and "
	       "its memory\n");
	printf("%-5s %14s %14s %14s %12s %16s\n", "L", "lazy us/replay", "exact us/replay",
	       "saved us", "build us", "break-even");
	for (int i = 0; i < nb; i++) {
		const struct bench *b = bs[i];
		const struct meth *lz = &b->m[M_LAZY], *rc = &b->m[M_RECAP];
		double build = summarize(b->build_us, b->n_build).med;

		if (!lz->nrep || !rc->nrep) {
			printf("%-5d no figures\n", b->L);
			continue;
		}
		{
			double l = summarize(lz->replay, lz->nrep).med;
			double e = summarize(rc->replay, rc->nrep).med;
			double saved = l - e;
			char be[32];

			if (saved > 0)
				snprintf(be, sizeof be, "%.0f replays", build / saved);
			else
				snprintf(be, sizeof be, "never");
			printf("%-5d %14.2f %14.2f %14.2f %12.0f %16s\n", b->L, l, e, saved, build, be);
		}
	}
	printf("   break-even: replays of one set before an entry's build is paid back (memory: "
	       "dev KiB per entry)\n");
}

/* ---- main --------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: gpu_bench [--reps N] [--replays N] [--layers L[,L]] [--no-device]\n"
		   "                 [--time-limit S]\n"
		   "  --reps N        repetitions (default 21, at most %d)\n"
		   "  --replays N     back-to-back replays per timing (default 200)\n"
		   "  --layers LIST   chain lengths, comma separated, at most 4, each a "
		   "multiple of 4 up to %d (default 32,128)\n"
		   "  --no-device     leave graphtoggle device mode out\n"
		   "  --time-limit S  give up after S seconds (default 240)\n",
		   MAX_REPS, MAX_L);
}

static long parse_num(const char *opt, const char *val, long lo, long hi)
{
	char *end = NULL;
	long v;

	if (!val)
		goto bad;
	v = strtol(val, &end, 10);
	if (end == val || *end || v < lo || v > hi)
		goto bad;
	return v;
bad:
	fprintf(stderr, "gpu_bench: bad argument: %s %s\n", opt, val ? val : "");
	usage(stderr);
	exit(2);
}

static void device_header(int argc, char **argv)
{
	struct cudaDeviceProp prop;
	int n = gpu_device_or_skip(), drv = 0, rt = 0, clk = 0, mclk = 0;

	CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	CUDA_CHECK(cudaRuntimeGetVersion(&rt));
	CUDA_CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
	CUDA_CHECK(cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, 0));
	printf("gpu-bench: device 0 of %d: %s (sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, "
	       "max clock %d MHz, memory clock %d MHz)\n", n, prop.name, prop.major, prop.minor,
	       prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
	       prop.l2CacheSize >> 20, clk / 1000, mclk / 1000);
	printf("gpu-bench: CUDA driver API %d.%d, runtime %d.%d, built with nvcc %d.%d.%d, "
	       "libtoggle %d.%d\n", drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10,
	       __CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__, __CUDACC_VER_BUILD__,
	       TOGGLE_VERSION_MAJOR, TOGGLE_VERSION_MINOR);
	printf("gpu-bench: command:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\n");
}

/* Does this libtoggle accept device mode (strict)? */
static void probe_device_mode(struct bench *b)
{
	struct toggle_agent *agent = NULL;
	int r;

	if (g_no_device) {
		b->device_built = false;
		snprintf(b->device_note, sizeof b->device_note, "device mode: left out (--no-device)");
		return;
	}
	r = open_agent(b, TOGGLE_MODE_DEVICE, "gpu_bench_probe", &agent, false);
	if (r == TOGGLE_OK) {
		b->device_built = true;
		b->device_note[0] = '\0';
		toggle_agent_close(agent);
	} else if (r == TOGGLE_ENOTSUP) {
		b->device_built = false;
		snprintf(b->device_note, sizeof b->device_note, "device mode: not built");
	} else {
		b->device_built = false;
		snprintf(b->device_note, sizeof b->device_note,
			 "device mode: toggle_agent_open: %d (%s)", r, toggle_strerror(r));
	}
}

static void bench_run(struct bench *b)
{
	float *h_init;
	uint64_t seed = 0x5eedull + (uint64_t)b->L;

	memset(b->m, 0, sizeof b->m);
	for (int k = 0; k < N_METH; k++)
		b->m[k].kind = (enum meth_kind)k;
	b->cat.type_names = type_names;
	b->cat.n_types = 1;
	b->cat.n_layers = (uint16_t)b->L;

	CUDA_CHECK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
	CUDA_CHECK(cudaEventCreate(&b->e0));
	CUDA_CHECK(cudaEventCreate(&b->e1));
	CUDA_CHECK(cudaMalloc(&b->x, SLICE * sizeof(float)));
	CUDA_CHECK(cudaMalloc(&b->out, (size_t)MAX_L * SLICE * sizeof(float)));
	CUDA_CHECK(cudaMallocHost(&b->h_probe, MAX_L * sizeof(float)));
	/* random activation in [0.5, 1.5): never 0, and x*a+b keeps it there */
	h_init = (float *)malloc(SLICE * sizeof(float));
	if (!h_init)
		die("out of host memory");
	for (int i = 0; i < SLICE; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		h_init[i] = 0.5f + (float)(seed >> 40) / (float)(1ull << 24);
	}
	CUDA_CHECK(cudaMemcpy(b->x, h_init, SLICE * sizeof(float), cudaMemcpyHostToDevice));
	free(h_init);

	{
		cudaFunction_t f;
		CUDA_CHECK(cudaGetFuncBySymbol(&f, (const void *)produce));
		b->produce_fn = (CUfunction)f;
	}
	probe_device_mode(b);

	/* item 4: the floor and the lazy graph */
	b->floor_graph = capture_chain(b, P_NONE, NULL, NULL, NULL);
	CUDA_CHECK(cudaGraphInstantiate(&b->floor_exec, b->floor_graph, 0));
	CUDA_CHECK(cudaGraphUpload(b->floor_exec, b->s));
	{
		bool all[MAX_L];
		set_all(all, b->L, true);
		if (!meth_setup(b, &b->m[M_LAZY], all))
			die("lazy agent set-up failed");
	}
	bare_setup(b);
	printf("gpu-bench: L=%d: item 4 (%d reps x %d replays)\n", b->L, b->reps, b->replays);
	run_item4(b);
	printf("gpu-bench: L=%d: item 5 (%d changes)\n", b->L, b->reps);
	run_item5(b);
	printf("gpu-bench: L=%d: item 6 (the producer-free exec)\n", b->L);
	run_item6(b);

	for (int k = 0; k < N_METH; k++)
		meth_teardown(b, &b->m[k]);
	meth_teardown(b, &b->bare);
	CUDA_CHECK(cudaGraphExecDestroy(b->floor_exec));
	CUDA_CHECK(cudaGraphDestroy(b->floor_graph));
	CUDA_CHECK(cudaFree(b->x));
	CUDA_CHECK(cudaFree(b->out));
	CUDA_CHECK(cudaFreeHost(b->h_probe));
	CUDA_CHECK(cudaEventDestroy(b->e0));
	CUDA_CHECK(cudaEventDestroy(b->e1));
	CUDA_CHECK(cudaStreamDestroy(b->s));
}

int main(int argc, char **argv)
{
	static struct bench benches[4];
	struct bench *bs[4];
	int layers[4] = {32, 128}, nl = 2, reps = 21, replays = 200;
	long limit = 240;
	const char *outdir;
	uint64_t bad = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(opt, "--reps") == 0) {
			reps = (int)parse_num(opt, val, 1, MAX_REPS);
			i++;
		} else if (strcmp(opt, "--replays") == 0) {
			replays = (int)parse_num(opt, val, 1, 100000);
			i++;
		} else if (strcmp(opt, "--no-device") == 0) {
			g_no_device = true;
		} else if (strcmp(opt, "--time-limit") == 0) {
			limit = parse_num(opt, val, 1, 86400);
			i++;
		} else if (strcmp(opt, "--layers") == 0 && val) {
			char buf[64], *tok, *save = NULL;

			snprintf(buf, sizeof buf, "%s", val);
			nl = 0;
			for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (nl == 4)
					parse_num(opt, "(more than 4)", 0, 0);
				layers[nl] = (int)parse_num(opt, tok, 4, MAX_L);
				if (layers[nl] % 4)
					parse_num(opt, "(each a multiple of 4)", 0, 0);
				nl++;
			}
			if (nl == 0)
				parse_num(opt, val, 0, 0);
			i++;
		} else {
			fprintf(stderr, "gpu_bench: bad argument: %s\n", opt);
			usage(stderr);
			return 2;
		}
	}

	signal(SIGALRM, on_alarm);
	alarm((unsigned)limit);
	device_header(argc, argv);
	printf("gpu-bench: layers");
	for (int i = 0; i < nl; i++)
		printf(" %d", layers[i]);
	printf("; %d repetitions x %d replays (after %d warm-up launches); producer copies "
	       "64 KiB; compute kernel: 16 FMA per float of a 64 KiB activation\n", reps, replays,
	       WARM);

	outdir = getenv("OUT");
	if (outdir && outdir[0]) {
		char path[4096];

		snprintf(path, sizeof path, "%s/gpu_bench.csv", outdir);
		g_csv = fopen(path, "w");
		if (!g_csv)
			printf("gpu-bench: cannot write %s, no CSV\n", path);
		else
			fprintf(g_csv, "L,section,name,metric,median,min,max,n\n");
		snprintf(path, sizeof path, "%s/gpu_bench_raw.csv", outdir);
		g_raw = fopen(path, "w");
		if (!g_raw)
			printf("gpu-bench: cannot write %s, no raw CSV\n", path);
		else
			fprintf(g_raw, "L,section,name,metric,rep,value\n");
	}

	for (int i = 0; i < nl; i++) {
		struct bench *b = &benches[i];

		b->L = layers[i];
		b->reps = reps;
		b->replays = replays;
		bench_run(b);
		write_csv(b);
		bs[i] = b;
		for (int c = 0; c < N_CFG; c++)
			bad += b->cfg_bad[c];
		for (int k = 0; k < N_METH; k++)
			bad += b->m[k].bad;
		bad += b->bare.bad;
	}
	if (g_csv) {
		fclose(g_csv);
		printf("gpu-bench: wrote %s/gpu_bench.csv\n", outdir);
	}
	if (g_raw) {
		fclose(g_raw);
		printf("gpu-bench: wrote %s/gpu_bench_raw.csv (every repetition)\n", outdir);
	}

	print_item4(bs, nl);
	print_item5(bs, nl);
	print_item6(bs, nl);
	if (bad) {
		printf("\ngpu-bench: FAIL (%" PRIu64 " producer-ran mismatches: see check columns)\n",
		       bad);
		return 1;
	}
	printf("\ngpu-bench: done (behaviour checks passed; figures are not asserted)\n");
	return 0;
}
