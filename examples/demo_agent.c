/*
 * demo_agent.c - an example inference agent on the simulator.
 *
 * Captures three graphs (batch sizes 1, 8, 32) of 32 layers, each layer a
 * compute kernel plus producers for three hook types, then runs a step loop
 * that replays them.  Every step it drains what the producers wrote and
 * checks it against the set the gate reported; it exits 1 on any mismatch.
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

#include "toggle.h"
#include "toggle_sim.h"

#define N_TYPES  3
#define N_LAYERS 32
#define N_GRAPHS 3
#define N_STEPS  12

static const char *const type_names[N_TYPES] = {"resid_post", "attn_out", "mlp_out"};
static const int batch_sizes[N_GRAPHS] = {1, 8, 32};

struct producer {
	struct toggle_set *drain; /* the "monitor buffer": hooks written this replay */
	struct toggle_hook hook;
};

struct demo {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	struct toggle_set drained;
	struct producer prod[N_GRAPHS][N_TYPES * N_LAYERS];
	CUgraph graph[N_GRAPHS];
	CUgraphExec exec[N_GRAPHS];
};

static void producer_kernel(void *arg)
{
	const struct producer *p = arg;
	toggle_set_add(p->drain, p->hook);
}

static void compute_kernel(void *arg)
{
	(void)arg;
}

#define CHECK_TG(call)                                                                  \
	do {                                                                            \
		int rc_ = (call);                                                       \
		if (rc_) {                                                              \
			fprintf(stderr, "demo: %s: %s (%s)\n", #call, toggle_strerror(rc_), \
				toggle_last_error(d->agent));                           \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

#define CHECK_CU(call)                                                          \
	do {                                                                    \
		if ((call) != CUDA_SUCCESS) {                                   \
			fprintf(stderr, "demo: %s failed\n", #call);            \
			exit(1);                                                \
		}                                                               \
	} while (0)

static void capture_graph(struct demo *d, int g)
{
	CHECK_TG(toggle_capture_begin(d->agent));
	CHECK_CU(toggle_sim_stream_begin_capture(d->stream));
	for (uint16_t l = 0; l < N_LAYERS; l++) {
		CHECK_CU(toggle_sim_launch_kernel(d->stream, compute_kernel, NULL));
		for (uint16_t t = 0; t < N_TYPES; t++) {
			struct producer *p = &d->prod[g][t * N_LAYERS + l];
			*p = (struct producer){.drain = &d->drained, .hook = {t, l}};
			CHECK_CU(toggle_sim_launch_kernel(d->stream, producer_kernel, p));
			CHECK_TG(toggle_record_producer(d->agent, d->stream, p->hook));
		}
	}
	CHECK_CU(toggle_sim_stream_end_capture(d->stream, &d->graph[g]));
	CHECK_TG(toggle_capture_end(d->agent));
	CHECK_CU(toggle_sim_graph_instantiate(&d->exec[g], d->graph[g]));
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
		CHECK_CU(toggle_sim_graph_instantiate(&d->exec[1], d->graph[1]));
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

static int run_step(struct demo *d, int step, bool scripted)
{
	struct toggle_set gate;
	struct toggle_stats before, after;
	if (scripted)
		operate(d, step);
	toggle_stats_get(d->agent, &before);
	CHECK_TG(toggle_step_begin(d->agent, step, &gate));
	int mismatches = 0;
	for (int g = 0; g < N_GRAPHS; g++) {
		toggle_set_clear(&d->drained);
		CHECK_TG(toggle_graph_launch(d->agent, d->graph[g], d->exec[g], d->stream));
		mismatches += !toggle_set_equal(&d->drained, &gate);
	}
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

struct demo_opts {
	const char *socket;
	long steps;     /* 0: until SIGTERM (daemon mode) */
	long period_ms;
	bool print_all;
	const char *name, *group;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: demo_agent [--socket PATH [--steps N] [--period-ms MS] [--print changes|all]\n"
		   "                   [--name NAME] [--group GROUP]]\n");
}

static int parse_opts(int argc, char **argv, struct demo_opts *o)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'}, {"steps", required_argument, NULL, 'n'},
		{"period-ms", required_argument, NULL, 'p'}, {"print", required_argument, NULL, 'P'},
		{"name", required_argument, NULL, 'N'}, {"group", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
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

/* Daemon mode: step until told to stop, print when the gate's set changes. */
static int run_daemon_loop(struct demo *d, const struct demo_opts *o)
{
	struct toggle_set last;
	toggle_set_clear(&last);
	int mismatches = 0;
	struct timespec period = {.tv_sec = o->period_ms / 1000, .tv_nsec = o->period_ms % 1000 * 1000000};
	for (long step = 0; !demo_stop && (o->steps == 0 || step < o->steps); step++) {
		struct toggle_set gate;
		CHECK_TG(toggle_step_begin(d->agent, step, &gate));
		int bad = 0;
		for (int g = 0; g < N_GRAPHS; g++) {
			toggle_set_clear(&d->drained);
			CHECK_TG(toggle_graph_launch(d->agent, d->graph[g], d->exec[g], d->stream));
			bad += !toggle_set_equal(&d->drained, &gate);
		}
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
	printf("demo: no GPU used: libtoggle runs on its CUDA simulator (backend sim)\n");
	if (toggle_sim_create(&d->sim) || toggle_sim_stream_create(d->sim, &d->stream)) {
		fprintf(stderr, "demo: cannot create the simulator\n");
		return 1;
	}
	struct toggle_config cfg = {
		.name = o.name,
		.group = o.group,
		.catalog = {.type_names = type_names, .n_types = N_TYPES, .n_layers = N_LAYERS},
		.mode = TOGGLE_MODE_LAZY,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = d->sim,
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
		refused = toggle_graph_launch(d->agent, d->graph[2], d->exec[2], d->stream);
		printf("demo: launch of a forgotten graph: %s\n", toggle_strerror(refused));
	}

	struct toggle_stats st;
	toggle_stats_get(d->agent, &st);
	printf("demo: %lld steps, %llu replays, %llu refused, %llu node-set calls, %d mismatches\n",
	       (long long)st.step + 1, (unsigned long long)st.launches,
	       (unsigned long long)st.launches_refused, (unsigned long long)st.node_set_calls,
	       mismatches);
	toggle_agent_close(d->agent);
	toggle_sim_destroy(d->sim);
	return (mismatches == 0 && refused == TOGGLE_ESTALE) ? 0 : 1;
}
