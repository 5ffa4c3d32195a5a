/*
 * demo_agent.c - an example inference agent, on a real GPU or on the simulator.
 *
 * Captures three graphs (batch sizes 1, 8, 32) of 32 layers, each layer a
 * compute kernel plus producers for three hook types, then runs a step loop
 * that replays them.  Every step it drains what the producers wrote and
 * checks it against the set the gate reported; it exits 1 on any mismatch.
 *
 * Backends (--backend, default auto): with a GPU the graphs are real CUDA
 * graphs of real kernels (demo_cuda.c) and every producer appends {graph,
 * hook, step} to a device ring that is read back after each step; without
 * one (or with --backend sim) libtoggle's simulator runs them (below).  The
 * first line printed says which.  Both sit behind struct demo_backend.
 *
 * Standalone (no --socket): a scripted operator changes the enabled hooks
 * through the API (a standing set, a per-step plan, a late plan, a
 * re-instantiated graph).  With --socket PATH: the agent registers with
 * toggled and whatever togglectl says takes effect; it steps every
 * --period-ms until --steps (0: until SIGTERM) and prints a line whenever
 * the set changes (every step with --print all).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demo_backend.h"
#include "demo_cuda.h"
#include "toggle.h"
#include "toggle_sim.h"

#define N_TYPES  DEMO_TYPES
#define N_LAYERS DEMO_LAYERS
#define N_GRAPHS DEMO_GRAPHS
#define N_STEPS  12

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out", "mlp_out"};
static const int batch_sizes[N_GRAPHS] = {1, 8, 32};

/* ---- the simulator backend -------------------------------------------------- */

struct sim_producer {
	struct demo_sim *s;
	int graph;
	struct toggle_hook hook;
};

struct demo_sim {
	struct toggle_sim *sim;
	struct toggle_set drained[N_GRAPHS]; /* the "monitor buffers": hooks written this step */
	unsigned duplicates;
	struct sim_producer prod[N_GRAPHS][N_TYPES * N_LAYERS];
};

/* The simulator runs a node's host function when the node executes. */
static void sim_producer_kernel(void *arg)
{
	const struct sim_producer *p = arg;
	struct toggle_set *drained = &p->s->drained[p->graph];
	if (toggle_set_contains(drained, p->hook))
		p->s->duplicates++;
	else
		toggle_set_add(drained, p->hook);
}

static void sim_compute_kernel(void *arg)
{
	(void)arg;
}

static int sim_check(struct demo_backend *be, CUresult r, const char *what)
{
	const char *s = NULL;
	if (r == CUDA_SUCCESS)
		return 0;
	toggle_sim_get_error_string(r, &s);
	snprintf(be->err, sizeof(be->err), "%s: CUDA error %d (%s)", what, (int)r, s ? s : "?");
	return -1;
}

static int sim_begin_capture(struct demo_backend *be, int g, int batch)
{
	(void)g;
	(void)batch;
	return sim_check(be, toggle_sim_stream_begin_capture(be->stream),
			 "toggle_sim_stream_begin_capture");
}

static int sim_launch_compute(struct demo_backend *be, int g, int layer)
{
	(void)g;
	(void)layer;
	return sim_check(be, toggle_sim_launch_kernel(be->stream, sim_compute_kernel, NULL),
			 "toggle_sim_launch_kernel(compute)");
}

static int sim_launch_producer(struct demo_backend *be, int g, struct toggle_hook hook)
{
	struct demo_sim *s = be->impl;
	struct sim_producer *p = &s->prod[g][hook.type * N_LAYERS + hook.layer];
	*p = (struct sim_producer){.s = s, .graph = g, .hook = hook};
	return sim_check(be, toggle_sim_launch_kernel(be->stream, sim_producer_kernel, p),
			 "toggle_sim_launch_kernel(producer)");
}

static int sim_end_capture(struct demo_backend *be, CUgraph *graph)
{
	return sim_check(be, toggle_sim_stream_end_capture(be->stream, graph),
			 "toggle_sim_stream_end_capture");
}

static int sim_instantiate(struct demo_backend *be, CUgraph graph, CUgraphExec *exec)
{
	return sim_check(be, toggle_sim_graph_instantiate(exec, graph),
			 "toggle_sim_graph_instantiate");
}

static int sim_begin_step(struct demo_backend *be, int64_t step)
{
	struct demo_sim *s = be->impl;
	(void)step;
	for (int g = 0; g < N_GRAPHS; g++)
		toggle_set_clear(&s->drained[g]);
	s->duplicates = 0;
	return 0;
}

/* Simulated launches run synchronously: everything is drained already. */
static int sim_drain(struct demo_backend *be, int64_t step, struct toggle_set got[N_GRAPHS],
		     unsigned *stray)
{
	const struct demo_sim *s = be->impl;
	(void)step;
	for (int g = 0; g < N_GRAPHS; g++)
		got[g] = s->drained[g];
	*stray = s->duplicates;
	return 0;
}

static void sim_exec_destroy(struct demo_backend *be, CUgraphExec exec)
{
	(void)be;
	if (exec)
		toggle_sim_exec_destroy(exec);
}

static void sim_graph_destroy(struct demo_backend *be, CUgraph graph)
{
	(void)be;
	if (graph)
		toggle_sim_graph_destroy(graph);
}

static void sim_close(struct demo_backend *be)
{
	struct demo_sim *s = be->impl;
	toggle_sim_destroy(s->sim);
	free(s);
	be->impl = NULL;
}

static int sim_open(struct demo_backend *be)
{
	memset(be, 0, sizeof(*be));
	be->name = "sim";
	be->kind = TOGGLE_BACKEND_SIM;
	struct demo_sim *s = calloc(1, sizeof(*s));
	int rc = s ? toggle_sim_create(&s->sim) : TOGGLE_ENOMEM;
	if (rc) {
		snprintf(be->err, sizeof(be->err), "toggle_sim_create: %s", toggle_strerror(rc));
		free(s);
		return -1;
	}
	be->impl = s;
	be->sim = s->sim;
	if (sim_check(be, toggle_sim_stream_create(s->sim, &be->stream), "toggle_sim_stream_create")) {
		sim_close(be);
		return -1;
	}
	be->begin_capture = sim_begin_capture;
	be->launch_compute = sim_launch_compute;
	be->launch_producer = sim_launch_producer;
	be->end_capture = sim_end_capture;
	be->instantiate = sim_instantiate;
	be->begin_step = sim_begin_step;
	be->drain = sim_drain;
	be->exec_destroy = sim_exec_destroy;
	be->graph_destroy = sim_graph_destroy;
	be->close = sim_close;
	return 0;
}

/* ---- the agent ------------------------------------------------------------- */

struct demo {
	struct demo_backend be;
	struct toggle_agent *agent;
	CUgraph graph[N_GRAPHS];
	CUgraphExec exec[N_GRAPHS];
	CUgraphExec retired; /* replaced by a new exec: destroyed once its graph rebound */
};

#define CHECK_TG(call)                                                                  \
	do {                                                                            \
		int rc_ = (call);                                                       \
		if (rc_) {                                                              \
			fprintf(stderr, "demo: %s: %s (%s)\n", #call, toggle_strerror(rc_), \
				toggle_last_error(d->agent));                           \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

#define CHECK_BE(call)                                                          \
	do {                                                                    \
		if ((call) != 0) {                                              \
			fprintf(stderr, "demo: %s backend: %s\n", d->be.name,   \
				d->be.err);                                     \
			exit(1);                                                \
		}                                                               \
	} while (0)

static void capture_graph(struct demo *d, int g)
{
	struct demo_backend *be = &d->be;
	CHECK_TG(toggle_capture_begin(d->agent));
	CHECK_BE(be->begin_capture(be, g, batch_sizes[g]));
	for (uint16_t l = 0; l < N_LAYERS; l++) {
		CHECK_BE(be->launch_compute(be, g, l));
		for (uint16_t t = 0; t < N_TYPES; t++) {
			struct toggle_hook hook = {t, l};
			CHECK_BE(be->launch_producer(be, g, hook));
			CHECK_TG(toggle_record_producer(d->agent, be->stream, hook));
		}
	}
	CHECK_BE(be->end_capture(be, &d->graph[g]));
	CHECK_TG(toggle_capture_end(d->agent));
	CHECK_BE(be->instantiate(be, d->graph[g], &d->exec[g]));
	CHECK_TG(toggle_graph_bind(d->agent, d->graph[g], d->exec[g]));
}

static struct toggle_set parse(struct demo *d, const char *spec)
{
	struct toggle_set s;
	char err[256];
	if (toggle_set_parse(toggle_agent_catalog(d->agent), spec, &s, err, sizeof(err))) {
		fprintf(stderr, "demo: bad spec: %s\n", err);
		exit(1);
	}
	return s;
}

static const char *fmt(struct demo *d, const struct toggle_set *s)
{
	static char buf[1024];
	toggle_set_format(toggle_agent_catalog(d->agent), s, buf, sizeof(buf));
	return buf;
}

/* The operator's script: what changes before which step. */
static void operate(struct demo *d, int step)
{
	struct toggle_set s;
	switch (step) {
	case 2:
		s = parse(d, "resid_post:0-7");
		printf("  operator: enable resid_post:0-7 (standing)\n");
		CHECK_TG(toggle_set_enabled(d->agent, &s));
		s = parse(d, "attn_out:*,mlp_out:31");
		printf("  operator: plan step 5 -> attn_out:*,mlp_out:31\n");
		CHECK_TG(toggle_plan_step(d->agent, 5, &s));
		break;
	case 6: {
		s = parse(d, "all");
		int rc = toggle_plan_step(d->agent, 5, &s);
		printf("  operator: plan step 5 -> all (late): %s\n", toggle_strerror(rc));
		if (rc != TOGGLE_ELATE)
			exit(1);
		break;
	}
	case 8:
		printf("  engine: re-instantiates graph bs=%d (no recapture, no bind)\n",
		       batch_sizes[1]);
		/* the old exec stays bound until the next launch rebinds: keep it till then */
		d->retired = d->exec[1];
		CHECK_BE(d->be.instantiate(&d->be, d->graph[1], &d->exec[1]));
		s = parse(d, "*:30-31");
		printf("  operator: set *:30-31\n");
		CHECK_TG(toggle_set_enabled(d->agent, &s));
		break;
	case 10:
		s = parse(d, "none");
		printf("  operator: set none\n");
		CHECK_TG(toggle_set_enabled(d->agent, &s));
		break;
	default:
		break;
	}
}

/* Says on stderr how the producers that ran differ from the gate's set. */
static void report_mismatch(struct demo *d, long long step, int g, const struct toggle_set *got,
			    const struct toggle_set *gate)
{
	struct toggle_set missing = *gate, extra = *got;
	toggle_set_subtract(&missing, got);
	toggle_set_subtract(&extra, gate);
	fprintf(stderr, "demo: step %lld graph bs=%d: producers missing: %s", step, batch_sizes[g],
		fmt(d, &missing));
	fprintf(stderr, "; extra: %s\n", fmt(d, &extra));
}

/*
 * One step: begin it (the gate's set), put it in stream order, replay every
 * graph, then drain what the producers wrote and compare it with the gate,
 * graph by graph.  Returns the number of disagreements (0: all agreed).
 */
static int replay_step(struct demo *d, int64_t step, struct toggle_set *gate)
{
	struct demo_backend *be = &d->be;
	struct toggle_set got[N_GRAPHS];
	unsigned stray = 0;
	int bad = 0;

	CHECK_TG(toggle_step_begin(d->agent, step, gate));
	CHECK_BE(be->begin_step(be, step));
	for (int g = 0; g < N_GRAPHS; g++)
		CHECK_TG(toggle_graph_launch(d->agent, d->graph[g], d->exec[g], be->stream));
	CHECK_BE(be->drain(be, step, got, &stray));
	if (d->retired) { /* the launch above rebound its graph to the new exec */
		be->exec_destroy(be, d->retired);
		d->retired = NULL;
	}
	for (int g = 0; g < N_GRAPHS; g++) {
		if (!toggle_set_equal(&got[g], gate)) {
			report_mismatch(d, (long long)step, g, &got[g], gate);
			bad++;
		}
	}
	if (stray) {
		fprintf(stderr, "demo: step %lld: %u stray producer records (duplicate, wrong step or "
			"overflow)\n", (long long)step, stray);
		bad++;
	}
	return bad;
}

static int run_step(struct demo *d, int step, bool scripted)
{
	struct toggle_set gate;
	struct toggle_stats before, after;
	if (scripted)
		operate(d, step);
	toggle_stats_get(d->agent, &before);
	int mismatches = replay_step(d, step, &gate);
	toggle_stats_get(d->agent, &after);
	printf("step %2d  gate=%-28s producers=%3zu  node-set-calls=%3llu  %s\n", step,
	       fmt(d, &gate), toggle_set_count(&gate),
	       (unsigned long long)(after.node_set_calls - before.node_set_calls),
	       mismatches ? "MISMATCH" : "ok");
	return mismatches;
}

static volatile sig_atomic_t demo_stop;

static void on_signal(int sig)
{
	(void)sig;
	demo_stop = 1;
}

enum backend_choice { BACKEND_AUTO, BACKEND_CUDA, BACKEND_SIM };

struct demo_opts {
	enum backend_choice backend;
	const char *socket;
	long steps;     /* 0: until SIGTERM (daemon mode) */
	long period_ms;
	bool print_all;
	const char *name, *group;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: demo_agent [--backend auto|cuda|sim] [--steps N]\n"
		   "                  [--socket PATH [--period-ms MS] [--print changes|all]\n"
		   "                   [--name NAME] [--group GROUP]]\n"
		   "  --backend  auto (default): real CUDA on GPU 0 when there is one, else the\n"
		   "             simulator; cuda: real CUDA or exit 1; sim: the simulator\n"
		   "  --steps    steps to run (standalone: default %d; with --socket: default 0,\n"
		   "             until SIGTERM)\n", N_STEPS);
}

static int parse_opts(int argc, char **argv, struct demo_opts *o)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'}, {"steps", required_argument, NULL, 'n'},
		{"period-ms", required_argument, NULL, 'p'}, {"print", required_argument, NULL, 'P'},
		{"name", required_argument, NULL, 'N'}, {"group", required_argument, NULL, 'g'},
		{"backend", required_argument, NULL, 'b'}, {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	*o = (struct demo_opts){.steps = -1, .period_ms = 10, .name = "demo-engine", .group = "demo"};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'n':
			o->steps = strtol(optarg, &end, 10);
			if (*end || o->steps < 0)
				return -1;
			break;
		case 'p':
			o->period_ms = strtol(optarg, &end, 10);
			if (*end || o->period_ms < 0 || o->period_ms > 60000)
				return -1;
			break;
		case 'P':
			if (strcmp(optarg, "all") && strcmp(optarg, "changes"))
				return -1;
			o->print_all = !strcmp(optarg, "all");
			break;
		case 'N': o->name = optarg; break;
		case 'g': o->group = optarg; break;
		case 'b':
			if (!strcmp(optarg, "auto"))
				o->backend = BACKEND_AUTO;
			else if (!strcmp(optarg, "cuda"))
				o->backend = BACKEND_CUDA;
			else if (!strcmp(optarg, "sim"))
				o->backend = BACKEND_SIM;
			else
				return -1;
			break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	if (optind != argc)
		return -1;
	if (o->steps < 0)
		o->steps = o->socket ? 0 : N_STEPS;
	return 0;
}

/*
 * Real CUDA unless told otherwise or impossible here; the first line says
 * which.  -1 (after saying why on stderr) when no backend can be used.
 */
static int open_backend(struct demo_backend *be, enum backend_choice choice)
{
	char why[sizeof(be->err)] = "";
	if (choice != BACKEND_SIM) {
		if (dc_open(be) == 0) {
			printf("demo: GPU: %s (driver %d.%d): libtoggle drives real CUDA graphs\n",
			       be->device, be->driver_version / 1000, be->driver_version % 1000 / 10);
			return 0;
		}
		if (choice == BACKEND_CUDA) {
			fprintf(stderr, "demo: --backend cuda: cannot use CUDA: %s\n", be->err);
			return -1;
		}
		memcpy(why, be->err, sizeof(why));
	}
	if (sim_open(be) != 0) {
		fprintf(stderr, "demo: cannot create the simulator: %s\n", be->err);
		return -1;
	}
	printf("demo: no GPU used: libtoggle runs on its CUDA simulator (backend sim)\n");
	if (why[0])
		printf("demo: CUDA not used: %s\n", why);
	return 0;
}

/* Daemon mode: step until told to stop, print when the gate's set changes. */
static int run_daemon_loop(struct demo *d, const struct demo_opts *o)
{
	struct toggle_set last;
	toggle_set_clear(&last);
	int mismatches = 0;
	struct timespec period = {.tv_sec = o->period_ms / 1000, .tv_nsec = o->period_ms % 1000 * 1000000};
	for (long step = 0; !demo_stop && (o->steps == 0 || step < o->steps); step++) {
		struct toggle_set gate;
		int bad = replay_step(d, step, &gate);
		mismatches += bad;
		if (o->print_all || bad || step == 0 || !toggle_set_equal(&gate, &last)) {
			printf("step %ld gate=%s producers=%zu %s\n", step, fmt(d, &gate),
			       toggle_set_count(&gate), bad ? "MISMATCH" : "ok");
			fflush(stdout);
		}
		last = gate;
		if (o->period_ms)
			nanosleep(&period, NULL);
	}
	return mismatches;
}

int main(int argc, char **argv)
{
	struct demo_opts o;
	if (parse_opts(argc, argv, &o) != 0) {
		usage(stderr);
		return 2;
	}
	struct demo demo, *d = &demo;
	memset(d, 0, sizeof(*d));
	if (open_backend(&d->be, o.backend) != 0)
		return 1;
	fflush(stdout);
	struct toggle_config cfg = {
		.name = o.name,
		.group = o.group,
		.catalog = {.type_names = type_names, .n_types = N_TYPES, .n_layers = N_LAYERS},
		.mode = TOGGLE_MODE_LAZY,
		.backend = d->be.kind,
		.sim = d->be.sim,
		.socket_path = o.socket,
	};
	CHECK_TG(toggle_agent_open(&cfg, &d->agent));
	for (int g = 0; g < N_GRAPHS; g++)
		capture_graph(d, g);
	struct toggle_registry_check rc;
	toggle_registry_check(d->agent, &rc);
	printf("demo: captured %u graphs (batch 1, 8, 32) x %d layers x %d hook types; "
	       "complete=%s uniform=%s\n", rc.graphs, N_LAYERS, N_TYPES,
	       rc.complete ? "yes" : "no", rc.uniform ? "yes" : "no");
	fflush(stdout);

	int mismatches = 0, refused = TOGGLE_ESTALE;
	if (o.socket) {
		signal(SIGTERM, on_signal);
		signal(SIGINT, on_signal);
		printf("demo: agent '%s' (group '%s', pid %d) follows toggled at %s\n", o.name, o.group,
		       (int)getpid(), o.socket);
		fflush(stdout);
		mismatches = run_daemon_loop(d, &o);
	} else {
		for (int step = 0; step < o.steps; step++)
			mismatches += run_step(d, step, step < N_STEPS);
		/* Fail closed: a graph the agent forgot is refused. */
		CHECK_TG(toggle_graph_forget(d->agent, d->graph[2]));
		refused = toggle_graph_launch(d->agent, d->graph[2], d->exec[2], d->be.stream);
		printf("demo: launch of a forgotten graph: %s\n", toggle_strerror(refused));
	}

	struct toggle_stats st;
	toggle_stats_get(d->agent, &st);
	printf("demo: %lld steps, %llu replays, %llu refused, %llu node-set calls, %d mismatches\n",
	       (long long)st.step + 1, (unsigned long long)st.launches,
	       (unsigned long long)st.launches_refused, (unsigned long long)st.node_set_calls,
	       mismatches);
	toggle_agent_close(d->agent);
	for (int g = 0; g < N_GRAPHS; g++) {
		d->be.exec_destroy(&d->be, d->exec[g]);
		d->be.graph_destroy(&d->be, d->graph[g]);
	}
	d->be.close(&d->be);
	return (mismatches == 0 && refused == TOGGLE_ESTALE) ? 0 : 1;
}
