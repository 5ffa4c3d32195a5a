/*
 * bench_host.c - libtoggle's host-side costs, measured (never asserted).
 *
 *   hotpath: what toggle_graph_launch() adds to a launch when nothing
 *            changed, against calling the same launch entry point directly;
 *            and toggle_graph_prepare() followed by that direct launch.
 *            The driver's launch is replaced by an empty function so only
 *            libtoggle's work is left in the difference.
 *   apply:   changing k hooks on a graph of n producers: driver calls made
 *            (must be k) and host time per launch that applies them.
 *   switch:  steps alternating between the empty set and one hook: host time
 *            of the launch that switches between the producer-free exec and
 *            the main one, against the same steps with that exec turned off.
 *   step:    a step on an unchanged set (toggle_step_begin + one launch or
 *            prepare per graph), lazy against device mode, at a mixed set,
 *            all off and all on (the execs each mode picks there).
 *   idle:    a step among N bound graphs of which one is launched (graphs
 *            per batch size), lazy against device mode, N = 1 to 512.
 *
 * Usage: bench_host hotpath|apply|switch|step|idle [--reps R] [--iters N] [--mode M]
 *   hotpath --mode agent|direct|prepare; step --mode MODE-VIA-SET
 *   (lazy|device, launch|prepare, mixed|off|on: one variant, for callgrind);
 *   idle --mode lazy-N|device-N
 * Prints a table of medians over R repetitions (see bench/run.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_impl.h"
#include "toggle.h"
#include "toggle_sim.h"

static CUresult empty_launch(CUgraphExec exec, CUstream stream)
{
	(void)exec;
	(void)stream;
	__asm__ volatile("" ::: "memory");
	return CUDA_SUCCESS;
}

static CUresult empty_set_enabled(CUgraphExec exec, CUgraphNode node, unsigned on)
{
	(void)exec;
	(void)node;
	(void)on;
	__asm__ volatile("" ::: "memory");
	return CUDA_SUCCESS;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void nop_kernel(void *arg)
{
	(void)arg;
}

struct rig {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	CUgraph graph;
	CUgraphExec exec;
	const char *names[TOGGLE_MAX_HOOK_TYPES];
	char name_buf[TOGGLE_MAX_HOOK_TYPES][16];
};

/*
 * The simulator, its stream and an agent "bench" on it, whose catalog is
 * types hook types (h0, h1, ...) of layers layers; the rest of the agent's
 * configuration (its mode, its options) is cfg's.  r is zeroed already.
 */
static void rig_agent_open(struct rig *r, uint16_t types, uint16_t layers, struct toggle_config cfg)
{
	for (uint16_t t = 0; t < types; t++) {
		snprintf(r->name_buf[t], sizeof(r->name_buf[t]), "h%u", t);
		r->names[t] = r->name_buf[t];
	}
	if (toggle_sim_create(&r->sim) || toggle_sim_stream_create(r->sim, &r->stream))
		exit(1);
	cfg.name = "bench";
	cfg.catalog = (struct toggle_catalog){.type_names = r->names, .n_types = types,
					      .n_layers = layers};
	cfg.backend = TOGGLE_BACKEND_SIM;
	cfg.sim = r->sim;
	if (toggle_agent_open(&cfg, &r->agent))
		exit(1);
}

/* An agent on the simulator with one graph of types x layers producers. */
static void rig_open_cfg(struct rig *r, uint16_t types, uint16_t layers, bool no_bare)
{
	memset(r, 0, sizeof(*r));
	rig_agent_open(r, types, layers, (struct toggle_config){.no_bare_exec = no_bare});
	toggle_capture_begin(r->agent);
	toggle_sim_stream_begin_capture(r->stream);
	for (uint16_t t = 0; t < types; t++)
		for (uint16_t l = 0; l < layers; l++) {
			toggle_sim_launch_kernel(r->stream, nop_kernel, NULL);
			if (toggle_record_producer(r->agent, r->stream, (struct toggle_hook){t, l}))
				exit(1);
		}
	toggle_sim_stream_end_capture(r->stream, &r->graph);
	toggle_capture_end(r->agent);
	toggle_sim_graph_instantiate(&r->exec, r->graph);
	toggle_graph_bind(r->agent, r->graph, r->exec);
}

static void rig_open(struct rig *r, uint16_t types, uint16_t layers)
{
	rig_open_cfg(r, types, layers, false);
}

/* Device mode's producers: simulator kernels launched through toggle_launch_producer. */
static void sim_produce(void **params)
{
	(void)params;
	__asm__ volatile("" ::: "memory");
}

static const struct toggle_sim_function dev_functions[] = {
	{.name = "produce", .fn = sim_produce, .n_params = 1, .param_size = {sizeof(int)}},
};

static const struct toggle_sim_image dev_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC, .n_functions = 1, .functions = dev_functions};

/*
 * An agent on the simulator (lazy or device mode) with n_graphs graphs of
 * types x layers producers each (device mode: a planner at the head and
 * device-updatable producers), instantiated and bound; graph[i], exec[i].
 */
struct step_rig {
	struct rig r;
	CUmodule mod;
	CUfunction produce;
	CUgraph *graph;
	CUgraphExec *exec;
	unsigned n;
};

static void step_rig_open(struct step_rig *sr, bool device, unsigned n_graphs, uint16_t types,
			  uint16_t layers)
{
	struct rig *r = &sr->r;
	memset(sr, 0, sizeof(*sr));
	enum toggle_mode mode = device ? TOGGLE_MODE_DEVICE : TOGGLE_MODE_LAZY;
	rig_agent_open(r, types, layers, (struct toggle_config){.mode = mode});
	/* The mode asked for, not a fallback: the numbers are that mode's. */
	if (toggle_agent_mode(r->agent) != mode)
		exit(1);
	if (device && (toggle_sim_module_load(r->sim, &sr->mod, &dev_image) ||
		       toggle_sim_module_get_function(&sr->produce, sr->mod, "produce")))
		exit(1);
	sr->n = n_graphs;
	sr->graph = calloc(n_graphs, sizeof(*sr->graph));
	sr->exec = calloc(n_graphs, sizeof(*sr->exec));
	if (!sr->graph || !sr->exec)
		exit(1);
	for (unsigned g = 0; g < n_graphs; g++) {
		toggle_capture_begin(r->agent);
		toggle_sim_stream_begin_capture(r->stream);
		if (device && toggle_capture_planner(r->agent, r->stream))
			exit(1);
		for (uint16_t t = 0; t < types; t++)
			for (uint16_t l = 0; l < layers; l++) {
				toggle_sim_launch_kernel(r->stream, nop_kernel, NULL);
				struct toggle_hook h = {t, l};
				if (!device) {
					if (toggle_record_producer(r->agent, r->stream, h))
						exit(1);
					continue;
				}
				int arg = 0;
				void *params[] = {&arg};
				CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
						    .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1,
						    .hStream = r->stream};
				if (toggle_launch_producer(r->agent, &c, sr->produce, params, h))
					exit(1);
			}
		toggle_sim_stream_end_capture(r->stream, &sr->graph[g]);
		toggle_capture_end(r->agent);
		if (toggle_graph_instantiate(r->agent, sr->graph[g], &sr->exec[g]))
			exit(1);
	}
}

static void step_rig_close(struct step_rig *sr)
{
	toggle_sim_synchronize(sr->r.sim);
	toggle_agent_close(sr->r.agent);
	for (unsigned g = 0; g < sr->n; g++) {
		toggle_sim_exec_destroy(sr->exec[g]);
		toggle_sim_graph_destroy(sr->graph[g]);
	}
	if (sr->mod)
		toggle_sim_module_unload(sr->mod);
	toggle_sim_destroy(sr->r.sim);
	free(sr->graph);
	free(sr->exec);
}

static void rig_close(struct rig *r)
{
	toggle_agent_close(r->agent);
	toggle_sim_destroy(r->sim);
}

/* The direct call goes through a volatile pointer, as the agent's table does. */
static CUresult (*volatile direct_launch)(CUgraphExec, CUstream) = empty_launch;

enum hot_how { HOT_AGENT, HOT_DIRECT, HOT_PREPARE };

static double run_hotpath(struct rig *r, enum hot_how how, long iters)
{
	double t0 = now_ns();
	if (how == HOT_DIRECT) {
		for (long i = 0; i < iters; i++)
			direct_launch(r->exec, r->stream);
	} else if (how == HOT_PREPARE) {
		/* the caller's own launch after toggle_graph_prepare (torch's replay) */
		for (long i = 0; i < iters; i++)
			if (toggle_graph_prepare(r->agent, r->graph, r->exec, r->stream) == 0)
				direct_launch(r->exec, r->stream);
	} else {
		for (long i = 0; i < iters; i++)
			toggle_graph_launch(r->agent, r->graph, r->exec, r->stream);
	}
	return (now_ns() - t0) / (double)iters;
}

static int bench_hotpath(int reps, long iters, const char *mode)
{
	struct rig r;
	rig_open(&r, 3, 32);
	struct toggle_set s;
	toggle_set_clear(&s);
	toggle_set_add(&s, (struct toggle_hook){0, 3});
	toggle_set_enabled(r.agent, &s);
	toggle_step_begin(r.agent, 0, NULL);
	toggle_graph_launch(r.agent, r.graph, r.exec, r.stream); /* sync once on the sim */
	r.agent->cu.graph_launch = empty_launch;                   /* then time only libtoggle */
	if (mode) { /* one variant only: for instruction counts under callgrind */
		run_hotpath(&r, !strcmp(mode, "direct") ? HOT_DIRECT :
				!strcmp(mode, "prepare") ? HOT_PREPARE : HOT_AGENT, iters);
		rig_close(&r);
		return 0;
	}
	double *agent = calloc((size_t)reps, sizeof(double)), *direct = calloc((size_t)reps, sizeof(double));
	double *prep = calloc((size_t)reps, sizeof(double));
	for (int i = 0; i < reps; i++) {
		direct[i] = run_hotpath(&r, HOT_DIRECT, iters);
		agent[i] = run_hotpath(&r, HOT_AGENT, iters);
		prep[i] = run_hotpath(&r, HOT_PREPARE, iters);
	}
	double ma = median(agent, reps), md = median(direct, reps), mp = median(prep, reps);
	printf("hotpath: %d reps x %ld launches, graph of 96 producers, nothing changed\n", reps, iters);
	printf("  %-34s %8.2f ns/launch\n", "direct launch (baseline)", md);
	printf("  %-34s %8.2f ns/launch\n", "toggle_graph_launch", ma);
	printf("  %-34s %8.2f ns/launch\n", "added by libtoggle (median diff)", ma - md);
	printf("  %-34s %8.2f ns/launch\n", "toggle_graph_prepare + launch", mp);
	printf("  %-34s %8.2f ns/launch\n", "added by prepare (median diff)", mp - md);
	free(agent);
	free(direct);
	free(prep);
	rig_close(&r);
	return 0;
}

/* Flip k hooks (the first k of the graph), launch once; time and calls. */
static void apply_point(uint16_t types, uint16_t layers, unsigned k, int reps, double *ns,
			double *calls_per_change)
{
	struct rig r;
	/* The main exec's sync is what is measured: no producer-free exec (at
	 * the empty set it would run instead, with no node to set). */
	rig_open_cfg(&r, types, layers, true);
	struct toggle_set off, on;
	toggle_set_clear(&off);
	toggle_set_clear(&on);
	for (unsigned i = 0; i < k; i++)
		toggle_set_add(&on, (struct toggle_hook){(uint16_t)(i / layers), (uint16_t)(i % layers)});
	toggle_set_enabled(r.agent, &off);
	toggle_step_begin(r.agent, 0, NULL);
	toggle_graph_launch(r.agent, r.graph, r.exec, r.stream);
	r.agent->cu.graph_launch = empty_launch;
	double *t = calloc((size_t)reps, sizeof(double));
	uint64_t calls = 0, changes = 0;
	for (int i = 0; i < reps; i++) {
		toggle_set_enabled(r.agent, i % 2 ? &off : &on);
		toggle_step_begin(r.agent, i + 1, NULL);
		struct toggle_stats before, after;
		toggle_stats_get(r.agent, &before);
		double t0 = now_ns();
		toggle_graph_launch(r.agent, r.graph, r.exec, r.stream);
		t[i] = now_ns() - t0;
		toggle_stats_get(r.agent, &after);
		calls += after.node_set_calls - before.node_set_calls;
		changes += k;
	}
	*ns = median(t, reps);
	*calls_per_change = changes ? (double)calls / (double)changes : 0;
	free(t);
	rig_close(&r);
}

static int bench_apply(int reps)
{
	static const struct {
		uint16_t types, layers;
	} shapes[] = {{1, 32}, {3, 32}, {4, 128}, {16, 256}};
	static const unsigned ks[] = {1, 8, 64, 512, 4096};
	printf("apply: change k hooks on a graph of n producers, simulator driver, %d reps\n", reps);
	printf("  %6s %6s %14s %14s %16s\n", "n", "k", "calls/change", "launch ns", "ns per changed");
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		unsigned n = (unsigned)shapes[s].types * shapes[s].layers;
		for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
			if (ks[j] > n)
				continue;
			double ns, cpc;
			apply_point(shapes[s].types, shapes[s].layers, ks[j], reps, &ns, &cpc);
			printf("  %6u %6u %14.3f %14.0f %16.1f\n", n, ks[j], cpc, ns, ns / ks[j]);
		}
	}
	return 0;
}

/*
 * Host time of a step (set_enabled + step_begin + the launch), over steps
 * that alternate between the empty set and {0:3}: with the producer-free
 * exec each launch switches exec (back to the main one it also syncs the
 * one changed node); without it each syncs one node.  Medians over reps of
 * iters steps (single steps are below the clock's resolution).
 */
static double switch_point(bool no_bare, int reps, long iters)
{
	struct rig r;
	rig_open_cfg(&r, 3, 32, no_bare);
	struct toggle_set none, one;
	toggle_set_clear(&none);
	toggle_set_clear(&one);
	toggle_set_add(&one, (struct toggle_hook){0, 3});
	toggle_set_enabled(r.agent, &one);
	toggle_step_begin(r.agent, 0, NULL);
	toggle_graph_launch(r.agent, r.graph, r.exec, r.stream); /* first sync on the sim */
	r.agent->cu.graph_launch = empty_launch;
	r.agent->cu.graph_node_set_enabled = empty_set_enabled;
	double *t = calloc((size_t)reps, sizeof(double));
	int64_t stepno = 1;
	for (int i = 0; i < reps; i++) {
		double t0 = now_ns();
		for (long k = 0; k < iters; k++, stepno++) {
			toggle_set_enabled(r.agent, stepno % 2 ? &none : &one);
			toggle_step_begin(r.agent, stepno, NULL);
			toggle_graph_launch(r.agent, r.graph, r.exec, r.stream);
		}
		t[i] = (now_ns() - t0) / (double)iters;
	}
	struct toggle_graph_status gs;
	toggle_graph_status(r.agent, r.graph, &gs);
	if (!no_bare && gs.bare_replays == 0)
		fprintf(stderr, "bench_host switch: the producer-free exec never ran\n");
	double m = median(t, reps);
	free(t);
	rig_close(&r);
	return m;
}

static int bench_switch(int reps, long iters)
{
	double on = switch_point(false, reps, iters), off = switch_point(true, reps, iters);
	printf("switch: steps alternating none / {0:3}, graph of 96 producers, driver calls "
	       "replaced by empty functions, %d reps x %ld steps\n", reps, iters);
	printf("  %-48s %8.1f ns/step\n", "producer-free exec on (each launch switches)", on);
	printf("  %-48s %8.1f ns/step\n", "producer-free exec off (each launch sets 1 node)", off);
	printf("  %-48s %8.1f ns/step\n", "added by switching (median diff)", on - off);
	return 0;
}

/* iters steps of an unchanged set: step_begin, then each graph launched or prepared. */
static double run_steps(struct step_rig *sr, bool prepare, int64_t *stepno, long iters)
{
	struct toggle_agent *a = sr->r.agent;
	double t0 = now_ns();
	for (long i = 0; i < iters; i++) {
		toggle_step_begin(a, (*stepno)++, NULL);
		for (unsigned g = 0; g < sr->n; g++) {
			if (prepare) {
				if (toggle_graph_prepare(a, sr->graph[g], sr->exec[g], sr->r.stream) == 0)
					direct_launch(sr->exec[g], sr->r.stream);
			} else {
				toggle_graph_launch(a, sr->graph[g], sr->exec[g], sr->r.stream);
			}
		}
	}
	return (now_ns() - t0) / (double)iters;
}

/* "lazy-launch-mixed" ...: false on a name it does not know. */
static bool step_parse(const char *mode, bool *device, bool *prepare, int *set)
{
	static const char *sets[] = {"mixed", "off", "on"};
	char m[16], v[16], st[16];
	if (!mode || sscanf(mode, "%15[a-z]-%15[a-z]-%15[a-z]", m, v, st) != 3)
		return false;
	*device = !strcmp(m, "device");
	*prepare = !strcmp(v, "prepare");
	*set = -1;
	for (int i = 0; i < 3; i++)
		if (!strcmp(st, sets[i]))
			*set = i;
	return (*device || !strcmp(m, "lazy")) && (*prepare || !strcmp(v, "launch")) && *set >= 0;
}

static double step_point(bool device, bool prepare, int set, int reps, long iters)
{
	struct step_rig sr;
	step_rig_open(&sr, device, 2, 3, 32);
	struct toggle_set s;
	toggle_set_clear(&s);
	if (set == 0)
		toggle_set_add(&s, (struct toggle_hook){0, 3});
	for (uint16_t t = 0; set == 2 && t < 3; t++)
		for (uint16_t l = 0; l < 32; l++)
			toggle_set_add(&s, (struct toggle_hook){t, l});
	toggle_set_enabled(sr.r.agent, &s);
	int64_t stepno = 0;
	run_steps(&sr, prepare, &stepno, 2); /* the set applied (and the exec picked) on the sim */
	toggle_sim_synchronize(sr.r.sim);
	sr.r.agent->cu.graph_launch = empty_launch; /* then time only libtoggle */
	double *t = calloc((size_t)reps, sizeof(double)), m;
	for (int i = 0; i < reps; i++)
		t[i] = run_steps(&sr, prepare, &stepno, iters);
	m = median(t, reps);
	free(t);
	step_rig_close(&sr);
	return m;
}

static int bench_step(int reps, long iters, const char *mode)
{
	bool device, prepare;
	int set;
	if (mode) { /* one variant only: for instruction counts under callgrind */
		if (!step_parse(mode, &device, &prepare, &set)) {
			fprintf(stderr, "bench_host step: --mode MODE-VIA-SET (lazy or device, "
				"launch or prepare, mixed, off or on: device-launch-on)\n");
			return 2;
		}
		step_point(device, prepare, set, 1, iters);
		return 0;
	}
	static const char *sets[] = {"mixed {0:3}", "all off", "all on"};
	printf("step: step_begin + 2 graphs of 96 producers launched (or prepared + launched), "
	       "set unchanged, driver launch replaced by an empty function, %d reps x %ld steps\n",
	       reps, iters);
	printf("  %-12s %-8s %12s %12s %12s\n", "set", "via", "lazy ns", "device ns", "device-lazy");
	for (int st = 0; st < 3; st++)
		for (int pv = 0; pv < 2; pv++) {
			double l = step_point(false, pv, st, reps, iters);
			double d = step_point(true, pv, st, reps, iters);
			printf("  %-12s %-8s %12.1f %12.1f %12.1f\n", sets[st], pv ? "prepare" : "launch",
			       l, d, d - l);
		}
	return 0;
}

/*
 * A step among many bound graphs (an engine's graphs per batch size, or its
 * piece graphs): n graphs of 96 producers bound, the set unchanged and all
 * off, one graph launched per step (the batch size that ran).  What
 * step_begin costs per graph the step does not launch is the slope.
 */
static double idle_point(bool device, unsigned n, int reps, long iters)
{
	struct step_rig sr;
	step_rig_open(&sr, device, n, 3, 32);
	struct toggle_set none;
	toggle_set_clear(&none);
	toggle_set_enabled(sr.r.agent, &none);
	int64_t stepno = 0;
	run_steps(&sr, false, &stepno, 2); /* every exec picked (its producer-free one) once */
	toggle_sim_synchronize(sr.r.sim);
	sr.r.agent->cu.graph_launch = empty_launch;
	unsigned all = sr.n;
	sr.n = 1; /* then each step launches the first graph only */
	double *t = calloc((size_t)reps, sizeof(double)), m;
	for (int i = 0; i < reps; i++)
		t[i] = run_steps(&sr, false, &stepno, iters);
	m = median(t, reps);
	free(t);
	sr.n = all;
	step_rig_close(&sr);
	return m;
}

static int bench_idle(int reps, long iters, const char *mode)
{
	static const unsigned ns[] = {1, 16, 128, 512};
	if (mode) { /* "lazy-N" or "device-N": one point, for instruction counts */
		char m[16];
		unsigned n = 0;
		if (sscanf(mode, "%15[a-z]-%u", m, &n) != 2 || n < 1 || n > 4096 ||
		    (strcmp(m, "lazy") && strcmp(m, "device"))) {
			fprintf(stderr, "bench_host idle: --mode lazy-N or device-N (N graphs)\n");
			return 2;
		}
		idle_point(!strcmp(m, "device"), n, 1, iters);
		return 0;
	}
	printf("idle: step_begin + one launch, N graphs of 96 producers bound, set unchanged "
	       "(all off), driver launch replaced by an empty function, %d reps x %ld steps\n",
	       reps, iters);
	printf("  %8s %12s %12s %12s\n", "graphs", "lazy ns", "device ns", "device-lazy");
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		double l = idle_point(false, ns[i], reps, iters);
		double d = idle_point(true, ns[i], reps, iters);
		printf("  %8u %12.1f %12.1f %12.1f\n", ns[i], l, d, d - l);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int reps = 15;
	long iters = 2000000;
	const char *mode = NULL;
	if (argc < 2) {
		fprintf(stderr, "usage: bench_host hotpath|apply|switch|step|idle [--reps R] [--iters N] "
			"[--mode M]\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--iters"))
			iters = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--mode"))
			mode = argv[i + 1];
	}
	if (reps < 1 || iters < 1)
		return 2;
	if (!strcmp(argv[1], "hotpath"))
		return bench_hotpath(reps, iters, mode);
	if (!strcmp(argv[1], "apply"))
		return bench_apply(reps);
	if (!strcmp(argv[1], "switch"))
		return bench_switch(reps, iters);
	if (!strcmp(argv[1], "step"))
		return bench_step(reps, iters, mode);
	if (!strcmp(argv[1], "idle"))
		return bench_idle(reps, iters, mode);
	fprintf(stderr, "bench_host: unknown benchmark '%s'\n", argv[1]);
	return 2;
}
