/*
 * gpu_lifetime.cu - issue #28 on the real driver (run by scripts/gpu-check.sh
 * after gpu_guard): libtoggle knows when a graph dies, from the driver's
 * user objects, so a destroyed graph's record never touches the graph that
 * reuses its handle.  Legs, each printing one "gpu-lifetime: leg=NAME
 * PASS|FAIL" line with its figures:
 *
 *  stranger  ROUNDS rounds: a graph of N_HOOKS recorded producers is bound
 *            and launched, then forgotten, unbound or left bound (against
 *            the documented rule), and destroyed with its exec, in either
 *            order; then unrelated graphs of N_STRANGER kernels are
 *            captured (at most TRIES per round) until the driver hands out
 *            the dead graph's handle.  Every stranger is launched through
 *            the agent (half of them after toggle_graph_instantiate) at a
 *            random set and must run all its kernels, in order, untouched
 *            (a device-side ring of kernel ids is the ground truth), never
 *            refused.  Reported: how often the handle, every recorded node
 *            handle and the exec handle were reused, and how often the
 *            agent knew of the death as cuGraphDestroy returned.
 *  before    The graph destroyed before its bound exec (lazy, device):
 *            strangers captured while the exec lives (the driver reuses the
 *            handle then too) run untouched; the exec at its set runs as
 *            before; at another set the lazy agent refuses it (its producers
 *            can no longer be set) and the device-mode planner sets them
 *            exactly.
 *  rebind    A bound exec destroyed (against the rule) and the graph
 *            instantiated again: the next launch rebinds and runs exactly
 *            its set (no exec ids before CUDA 13.1: before this issue only
 *            they could tell); reported: steps begun before the driver ran
 *            the dead exec's destructor (it runs 6 to 31 us after
 *            cudaGraphExecDestroy returns), whose eager apply reached the
 *            dead exec (the driver refused the call).
 *
 * Producers count their runs in device memory, per hook; after each launch
 * the host synchronises and compares the counts with the set.  Exit
 * status: 0 on PASS and when there is no CUDA device (SKIPPED), 1 on FAIL.
 * Written in the plain C style of gpu_guard.cu.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "toggle.h"
extern "C" {
#include "agent_impl.h" /* white-box: whether the agent knew of a death at once */
}

#define GPU_TAG "gpu-lifetime"
#include "gpu_common.h"

#define N_TYPES    2
#define N_LAYERS   4
#define N_HOOKS    (N_TYPES * N_LAYERS)
#define N_STRANGER 32
#define ROUNDS     300
#define TRIES      8
#define RING       256

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out"};

/* ---- kernels ------------------------------------------------------------------ */

__global__ void produce(unsigned *counts, int hook)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		atomicAdd(&counts[hook], 1u);
}

/* A stranger's kernel: appends its id to the ring. */
__global__ void stranger_kernel(unsigned *ring, unsigned id)
{
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		unsigned at = atomicAdd(&ring[0], 1u);
		if (at + 1 < RING)
			ring[at + 1] = id;
	}
}

/* ---- shared state --------------------------------------------------------------- */

struct env {
	cudaStream_t s;
	unsigned *d_counts; /* N_HOOKS run counters */
	unsigned *d_ring;   /* [0]: entries, then kernel ids */
	CUfunction produce_fn;
	struct toggle_catalog cat;
	uint64_t rng;
	char why[512]; /* the first failure of the current leg */
};

#include "gpu_legs.h"

/* An agent whose driver has user objects (what this program tests), or die. */
static struct toggle_agent *agent_open_life(struct env *e, const char *name, enum toggle_mode mode)
{
	struct toggle_agent *a = agent_open(e, name, mode);

	if (!a->life)
		die("agent %s: the driver has no user objects (cuUserObjectCreate): nothing to test",
		    name);
	return a;
}

static void reset(struct env *e)
{
	CUDA_CHECK(cudaMemset(e->d_counts, 0, N_HOOKS * sizeof(unsigned)));
	CUDA_CHECK(cudaMemset(e->d_ring, 0, RING * sizeof(unsigned)));
	CUDA_CHECK(cudaDeviceSynchronize());
}

/* Bit h set when producer h ran exactly once since the reset; *bad: ran more than once. */
static unsigned counts_read(struct env *e, bool *bad)
{
	unsigned c[N_HOOKS], bits = 0;

	CUDA_CHECK(cudaStreamSynchronize(e->s));
	CUDA_CHECK(cudaMemcpy(c, e->d_counts, sizeof c, cudaMemcpyDeviceToHost));
	*bad = false;
	for (int h = 0; h < N_HOOKS; h++) {
		bits |= c[h] ? 1u << h : 0;
		*bad |= c[h] > 1;
	}
	return bits;
}

/* Whether the ring holds exactly ids 0..n-1 in order (a stranger of n kernels ran untouched). */
static bool ring_exact(struct env *e, unsigned n, unsigned *got)
{
	unsigned r[RING];

	CUDA_CHECK(cudaStreamSynchronize(e->s));
	CUDA_CHECK(cudaMemcpy(r, e->d_ring, sizeof r, cudaMemcpyDeviceToHost));
	*got = r[0];
	if (r[0] != n)
		return false;
	for (unsigned i = 0; i < n; i++)
		if (r[i + 1] != i)
			return false;
	return true;
}

/* Launch through the agent, then compare what ran with `want` (launch code `rc_want`). */
static void launch_expect(struct env *e, struct toggle_agent *a, const char *what, cudaGraph_t g,
			  cudaGraphExec_t x, int rc_want, unsigned want)
{
	unsigned got;
	bool bad;
	int rc;

	reset(e);
	rc = toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)x, (CUstream)e->s);
	got = counts_read(e, &bad);
	if (rc != rc_want)
		fail_leg(e, "%s: toggle_graph_launch returned %d (%s), expected %d: %s", what, rc,
			 toggle_strerror(rc), rc_want, toggle_last_error(a));
	else if (got != want || bad)
		fail_leg(e, "%s: producers that ran 0x%02x, expected 0x%02x%s", what, got, want,
			 bad ? " (one ran twice)" : "");
}

/* A stranger launched through the agent: all its kernels, in order, and no producer. */
/* GPU_LIFETIME_TRACE=1: the record behind a handle, field by field (issue 28's diagnosis). */
static void trace_record(struct toggle_agent *a, const char *when, cudaGraph_t g, cudaGraphExec_t x)
{
	struct tg_graph *r;
	char life[256];

	if (!getenv("GPU_LIFETIME_TRACE"))
		return;
	r = tg_graph_find(a, (CUgraph)g);
	if (!r || !tg_graph_related(r))
		return; /* no record: nothing to say */
	tg_life_describe(r, life, sizeof life);
	printf("gpu-lifetime: trace %s: graph %p exec %p (record's %p): gone=%d exec_dead=%d "
	       "bound=%d stale=%d synced_valid=%d synced=0x%02llx want=0x%02llx applied=%llu "
	       "version=%llu deaths pending=%d; %s\n", when, (void *)g, (void *)x,
	       (void *)r->exec, r->gone, r->exec_dead, r->bound, r->stale, r->synced_valid,
	       (unsigned long long)r->synced.bits[0], (unsigned long long)a->current.bits[0],
	       (unsigned long long)r->applied_version, (unsigned long long)a->version,
	       tg_life_pending(a), life);
}

static void stranger_expect(struct env *e, struct toggle_agent *a, const char *what,
			    cudaGraph_t g, cudaGraphExec_t x, unsigned n)
{
	unsigned got_n, prod;
	bool bad;
	int rc;

	reset(e);
	trace_record(a, "stranger, before its launch", g, x);
	rc = toggle_graph_launch(a, (CUgraph)g, (CUgraphExec)x, (CUstream)e->s);
	prod = counts_read(e, &bad);
	if (rc != TOGGLE_OK && getenv("GPU_LIFETIME_TRACE")) {
		usleep(20000); /* a destructor the driver runs late: is it known now? */
		tg_registry_sweep(a);
		trace_record(a, "stranger refused, 20 ms and a sweep later", g, x);
	}
	if (rc != TOGGLE_OK)
		fail_leg(e, "%s: the stranger's launch returned %d (%s): %s", what, rc,
			 toggle_strerror(rc), toggle_last_error(a));
	else if (!ring_exact(e, n, &got_n) || prod)
		fail_leg(e, "%s: the stranger ran %u of its %u kernels (producers 0x%02x)", what,
			 got_n, n, prod);
}

static void step(struct toggle_agent *a, int64_t s, unsigned bits)
{
	struct toggle_set set = set_of(bits), gate;

	TG_CHECK(a, toggle_set_enabled(a, &set));
	TG_CHECK(a, toggle_step_begin(a, s, &gate));
	if (!toggle_set_equal(&gate, &set))
		die("step %lld: the gate reports another set", (long long)s);
}

/* Our graph: N_HOOKS producers, recorded (lazy) or launched as device producers after the planner. */
static cudaGraph_t capture_ours(struct env *e, struct toggle_agent *a, bool device)
{
	cudaGraph_t g;

	TG_CHECK(a, toggle_capture_begin(a));
	CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
	if (device)
		TG_CHECK(a, toggle_capture_planner(a, (CUstream)e->s));
	for (int h = 0; h < N_HOOKS; h++) {
		if (device) {
			CUlaunchConfig lc;
			int hk = h;
			void *params[2] = {&e->d_counts, &hk};

			memset(&lc, 0, sizeof lc);
			lc.gridDimX = lc.gridDimY = lc.gridDimZ = 1;
			lc.blockDimX = 32;
			lc.blockDimY = lc.blockDimZ = 1;
			lc.hStream = (CUstream)e->s;
			TG_CHECK(a, toggle_launch_producer(a, &lc, e->produce_fn, params, hook_of(h)));
		} else {
			produce<<<1, 32, 0, e->s>>>(e->d_counts, h);
			CUDA_LAUNCHED();
			TG_CHECK(a, toggle_record_producer(a, (CUstream)e->s, hook_of(h)));
		}
	}
	CUDA_CHECK(cudaStreamEndCapture(e->s, &g));
	TG_CHECK(a, toggle_capture_end(a));
	return g;
}

/* Another component's graph: n kernels, captured without the agent. */
static cudaGraph_t capture_stranger(struct env *e, unsigned n)
{
	cudaGraph_t g;

	CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
	for (unsigned i = 0; i < n; i++) {
		stranger_kernel<<<1, 32, 0, e->s>>>(e->d_ring, i);
		CUDA_LAUNCHED();
	}
	CUDA_CHECK(cudaStreamEndCapture(e->s, &g));
	return g;
}

/* How many of the n nodes in `had` are nodes of g. */
static unsigned nodes_shared(cudaGraph_t g, const cudaGraphNode_t *had, size_t n)
{
	cudaGraphNode_t v[N_STRANGER + N_HOOKS + 1];
	size_t m = sizeof v / sizeof v[0];
	unsigned k = 0;

	CUDA_CHECK(cudaGraphGetNodes(g, v, &m));
	for (size_t i = 0; i < m; i++)
		for (size_t j = 0; j < n; j++)
			k += v[i] == had[j];
	return k;
}

/* ---- stranger: the issue's experiment, every stranger launched untouched ---------- */

static bool leg_stranger(struct env *e)
{
	struct toggle_agent *a = agent_open_life(e, "gpu_lifetime_stranger", TOGGLE_MODE_LAZY);
	unsigned strangers = 0, handle_reused = 0, all_nodes = 0, some_nodes = 0, exec_reused = 0;
	unsigned known_at_once = 0, rounds_reused = 0, via_instantiate = 0, hows[3] = {0, 0, 0};
	char fig[768];
	int64_t st = 0;

	e->why[0] = '\0';
	for (int round = 0; round < ROUNDS && !e->why[0]; round++) {
		int how = (int)(gpu_rng_next(&e->rng) % 3); /* forget, unbind, left bound */
		bool graph_first = gpu_rng_next(&e->rng) % 2;
		unsigned set = (unsigned)gpu_rng_next(&e->rng) & ((1u << N_HOOKS) - 1);
		cudaGraph_t g = capture_ours(e, a, false), dead;
		cudaGraphExec_t x, dead_x;
		cudaGraphNode_t nodes[N_HOOKS];
		size_t n = N_HOOKS;
		char what[96];
		bool reused = false;

		hows[how]++;
		CUDA_CHECK(cudaGraphGetNodes(g, nodes, &n));
		TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)g, (CUgraphExec *)&x));
		step(a, st++, set);
		snprintf(what, sizeof what, "round %d, our graph", round);
		launch_expect(e, a, what, g, x, TOGGLE_OK, set);
		if (how == 0)
			TG_CHECK(a, toggle_graph_forget(a, (CUgraph)g));
		else if (how == 1)
			TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g, NULL));
		CUDA_CHECK(cudaStreamSynchronize(e->s));
		dead = g;
		dead_x = x;
		/* The destructor ran inside cuGraphDestroy (driver 580 does): the agent's
		 * count of deaths moved before the call returned. */
		bool before = tg_life_pending(a);
		if (graph_first) {
			CUDA_CHECK(cudaGraphDestroy(g));
			known_at_once += !before && tg_life_pending(a);
			CUDA_CHECK(cudaGraphExecDestroy(x));
		} else {
			CUDA_CHECK(cudaGraphExecDestroy(x));
			before = tg_life_pending(a);
			CUDA_CHECK(cudaGraphDestroy(g));
			known_at_once += !before && tg_life_pending(a);
		}
		for (int t = 0; t < TRIES && !reused && !e->why[0]; t++) {
			unsigned len = 1 + (unsigned)(gpu_rng_next(&e->rng) % N_STRANGER);
			cudaGraph_t s;
			cudaGraphExec_t sx;
			bool inst = gpu_rng_next(&e->rng) % 2;

			if (t == 0)
				len = N_STRANGER; /* the issue's case first: 8 then 32 */
			s = capture_stranger(e, len);
			reused = s == dead;
			if (reused) {
				unsigned k = nodes_shared(s, nodes, N_HOOKS);

				handle_reused++;
				all_nodes += k == N_HOOKS;
				some_nodes += k > 0;
			}
			if (inst) {
				TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)s, (CUgraphExec *)&sx));
				via_instantiate++;
			} else {
				CUDA_CHECK(cudaGraphInstantiate(&sx, s, 0));
			}
			exec_reused += sx == dead_x;
			step(a, st++, (unsigned)gpu_rng_next(&e->rng) & ((1u << N_HOOKS) - 1));
			snprintf(what, sizeof what, "round %d (how %d, graph first %d), stranger %d of %u "
				 "kernels%s", round, how, graph_first, t, len,
				 reused ? " behind the dead handle" : "");
			stranger_expect(e, a, what, s, sx, len);
			stranger_expect(e, a, what, s, sx, len);
			strangers++;
			CUDA_CHECK(cudaStreamSynchronize(e->s));
			CUDA_CHECK(cudaGraphExecDestroy(sx));
			CUDA_CHECK(cudaGraphDestroy(s));
		}
		rounds_reused += reused;
	}
	snprintf(fig, sizeof fig,
		 "(%d rounds: %u forgotten, %u unbound, %u left bound; %u strangers of up to %d "
		 "kernels, %u after toggle_graph_instantiate, all untouched and exact; the dead "
		 "graph's handle reused in %u rounds, with all %d of its node handles %u times, "
		 "some %u times; its exec's handle reused %u times; the agent knew of the death as "
		 "cuGraphDestroy returned in %u of %d rounds)",
		 ROUNDS, hows[0], hows[1], hows[2], strangers, N_STRANGER, via_instantiate,
		 rounds_reused, N_HOOKS, all_nodes, some_nodes, exec_reused, known_at_once, ROUNDS);
	if (!e->why[0] && handle_reused == 0)
		snprintf(fig, sizeof fig, "(not exercised: the driver never reused a handle in %d "
			 "rounds; %u strangers untouched)", ROUNDS, strangers);
	leg_report(e, "stranger", fig);
	toggle_agent_close(a);
	return e->why[0] == '\0';
}

/* ---- before: the graph destroyed before its bound exec --------------------------------- */

static void before_round(struct env *e, bool device, char *out, size_t len)
{
	struct toggle_agent *a = agent_open_life(e, device ? "gpu_lifetime_before_dev"
						      : "gpu_lifetime_before",
					    device ? TOGGLE_MODE_DEVICE : TOGGLE_MODE_LAZY);
	cudaGraph_t g = capture_ours(e, a, device), dead = g;
	cudaGraphExec_t x;
	struct toggle_graph_status gs;
	unsigned reused = 0;
	const char *name = device ? "device" : "lazy";
	char what[96], when[64];

	TG_CHECK(a, toggle_graph_instantiate(a, (CUgraph)g, (CUgraphExec *)&x));
	step(a, 0, 0x0f);
	launch_expect(e, a, "before destroy", g, x, TOGGLE_OK, 0x0f);
	CUDA_CHECK(cudaStreamSynchronize(e->s));
	CUDA_CHECK(cudaGraphDestroy(g));
	snprintf(what, sizeof what, "%s: its exec at its set, the graph destroyed", name);
	launch_expect(e, a, what, g, x, TOGGLE_OK, 0x0f);
	if (toggle_graph_status(a, (CUgraph)g, &gs) != TOGGLE_OK || !strstr(gs.note, "destroyed"))
		fail_leg(e, "%s: the record does not say its graph was destroyed (note '%s')", name,
			 gs.note);
	for (int t = 0; t < TRIES; t++) {
		cudaGraph_t s = capture_stranger(e, N_STRANGER);
		cudaGraphExec_t sx;

		reused += s == dead;
		CUDA_CHECK(cudaGraphInstantiate(&sx, s, 0));
		snprintf(what, sizeof what, "%s: stranger %d while the exec lives%s", name, t,
			 s == dead ? " (behind its graph's handle)" : "");
		stranger_expect(e, a, what, s, sx, N_STRANGER);
		if (s == dead) {
			/* Our exec through the same handle, at its set, then at another. */
			snprintf(when, sizeof when, "%s t=%d, our exec before the step", name, t);
			trace_record(a, when, dead, x);
			step(a, 1 + 2 * t, 0x0f);
			snprintf(when, sizeof when, "%s t=%d, our exec after the step", name, t);
			trace_record(a, when, dead, x);
			snprintf(what, sizeof what, "%s: our exec at its set (stranger %d)", name, t);
			launch_expect(e, a, what, dead, x, TOGGLE_OK, 0x0f);
			step(a, 2 + 2 * t, 0xf0);
			snprintf(what, sizeof what, "%s: our exec at another set (stranger %d)", name, t);
			if (device)
				launch_expect(e, a, what, dead, x, TOGGLE_OK, 0xf0);
			else
				launch_expect(e, a, what, dead, x, TOGGLE_ESTALE, 0);
			stranger_expect(e, a, "the stranger after", s, sx, N_STRANGER);
		}
		CUDA_CHECK(cudaStreamSynchronize(e->s));
		CUDA_CHECK(cudaGraphExecDestroy(sx));
		CUDA_CHECK(cudaGraphDestroy(s));
	}
	CUDA_CHECK(cudaGraphExecDestroy(x));
	{
		cudaGraph_t s = capture_stranger(e, 3);
		cudaGraphExec_t sx;

		CUDA_CHECK(cudaGraphInstantiate(&sx, s, 0));
		stranger_expect(e, a, "a stranger after the exec went too", s, sx, 3);
		CUDA_CHECK(cudaStreamSynchronize(e->s));
		CUDA_CHECK(cudaGraphExecDestroy(sx));
		CUDA_CHECK(cudaGraphDestroy(s));
	}
	snprintf(out, len, "%s: handle reused by %u of %d strangers while the exec lived", name,
		 reused, TRIES);
	toggle_agent_close(a);
}

static bool leg_before(struct env *e)
{
	char r1[128], r2[128], fig[300];

	e->why[0] = '\0';
	before_round(e, false, r1, sizeof r1);
	before_round(e, true, r2, sizeof r2);
	snprintf(fig, sizeof fig, "(%s; %s; strangers untouched, our exec exact)", r1, r2);
	leg_report(e, "before", fig);
	return e->why[0] == '\0';
}

/* ---- rebind: a bound exec destroyed, the graph instantiated again ------------------- */

static bool leg_rebind(struct env *e)
{
	unsigned reused[2] = {0, 0}, late[2] = {0, 0};
	char fig[400];

	e->why[0] = '\0';
	for (int eager = 0; eager < 2; eager++) {
		struct toggle_agent *a = agent_open_life(e, eager ? "gpu_lifetime_rebind_eager"
							     : "gpu_lifetime_rebind",
						    eager ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY);
		cudaGraph_t g = capture_ours(e, a, false);
		cudaGraphExec_t x;
		int64_t st = 0;

		CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
		TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g, (CUgraphExec)x));
		for (int r = 0; r < 20 && !e->why[0]; r++) {
			struct toggle_anomalies an0, an1;
			cudaGraphExec_t x2;
			unsigned set = (unsigned)gpu_rng_next(&e->rng) & ((1u << N_HOOKS) - 1);
			char what[64];

			step(a, st++, set ^ 0xff);
			launch_expect(e, a, "before", g, x, TOGGLE_OK, set ^ 0xff);
			CUDA_CHECK(cudaStreamSynchronize(e->s));
			CUDA_CHECK(cudaGraphExecDestroy(x)); /* bound: against the rule */
			CUDA_CHECK(cudaGraphInstantiate(&x2, g, 0));
			reused[eager] += x2 == x;
			toggle_anomalies_get(a, &an0);
			step(a, st++, set);
			toggle_anomalies_get(a, &an1);
			/* The driver drops the exec's reference 6 to 31 us after
			 * cudaGraphExecDestroy returns (probe_userobj.cu): a step begun
			 * sooner cannot know, and eager's apply may reach the dead exec
			 * (the driver refuses it: counted, reported).  The launch below
			 * must still be exact: it sweeps, rebinds and syncs. */
			late[eager] += an1.driver_errors != an0.driver_errors;
			snprintf(what, sizeof what, "%s round %d, the new exec", eager ? "eager" : "lazy",
				 r);
			launch_expect(e, a, what, g, x2, TOGGLE_OK, set);
			x = x2;
		}
		TG_CHECK(a, toggle_graph_bind(a, (CUgraph)g, NULL));
		CUDA_CHECK(cudaStreamSynchronize(e->s));
		toggle_agent_close(a);
		CUDA_CHECK(cudaGraphExecDestroy(x));
		CUDA_CHECK(cudaGraphDestroy(g));
	}
	snprintf(fig, sizeof fig, "(20 rounds lazy, 20 eager: the new exec got the dead one's handle "
		 "%u and %u times; every launch exact; steps begun before the driver ran the "
		 "dead exec's destructor, whose apply reached it: %u lazy, %u eager)", reused[0],
		 reused[1], late[0], late[1]);
	leg_report(e, "rebind", fig);
	return e->why[0] == '\0';
}

/* ---- main ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	struct env e;
	char err[256];
	int drv = 0, failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	gpu_device_or_skip();
	CUDA_CHECK(cudaFree(0)); /* the context is current: device mode loads its planner */
	CUDA_CHECK(cudaDriverGetVersion(&drv));
	printf("gpu-lifetime: driver %d.%d\n", drv / 1000, drv % 1000 / 10);

	memset(&e, 0, sizeof e);
	e.rng = argc > 2 && !strcmp(argv[1], "--seed") ? strtoull(argv[2], NULL, 0) : 28;
	e.cat.type_names = type_names;
	e.cat.n_types = N_TYPES;
	e.cat.n_layers = N_LAYERS;
	if (toggle_catalog_validate(&e.cat, err, sizeof err) != TOGGLE_OK)
		die("catalog: %s", err);
	CUDA_CHECK(cudaStreamCreateWithFlags(&e.s, cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&e.d_counts, N_HOOKS * sizeof(unsigned)));
	CUDA_CHECK(cudaMalloc(&e.d_ring, RING * sizeof(unsigned)));
	{
		cudaFunction_t fn;

		CUDA_CHECK(cudaGetFuncBySymbol(&fn, (const void *)produce));
		e.produce_fn = (CUfunction)fn;
	}

	failed += !leg_stranger(&e);
	failed += !leg_before(&e);
	failed += !leg_rebind(&e);

	CUDA_CHECK(cudaFree(e.d_ring));
	CUDA_CHECK(cudaFree(e.d_counts));
	CUDA_CHECK(cudaStreamDestroy(e.s));
	if (failed) {
		printf("gpu-lifetime: FAIL (%d of 3 legs)\n", failed);
		return 1;
	}
	printf("gpu-lifetime: PASS\n");
	return 0;
}
