/*
 * check_device.c - device mode on the simulator: the planner captured at the
 * head of each graph, device-updatable producers, upload exactly once at
 * bind, pipelined replays (deferred execution, several streams) that each
 * run the set the gate reported with no host cuGraphNodeSetEnabled call,
 * rebind rules, the single-instantiation limit, strict refusal and lazy
 * fallback, a missing planner, the guard against mixing host and device
 * toggles, and the simulator's model of it all.  Issue 18: a new capture
 * reusing a destroyed graph's record, and tainted launches (a device-side
 * call failed) reported through the API, the status lane, the real daemon
 * (TOGGLED_BIN) and togglectl (TOGGLECTL_BIN).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_impl.h" /* white-box: the mixing guard */
#include "testutil.h"
#include "tgclient.h"
#include "toggle.h"
#include "toggle_sim.h"

#ifndef TOGGLED_BIN
#error "TOGGLED_BIN must name the daemon binary (libtoggle/libtoggle.mk passes it)"
#endif
#ifndef TOGGLECTL_BIN
#error "TOGGLECTL_BIN must name togglectl (libtoggle/libtoggle.mk passes it)"
#endif

#define NT 3
#define NL 8
#define NH (NT * NL) /* 24 hooks: a set fits a uint32_t */
#define G 4
#define NS 3
#define MAX_LAUNCHES 4096

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

/* What ran: one record per producer execution. */
struct rec {
	int graph, hook;
	uint64_t launch; /* index of the launch of that graph that ran it */
};

struct dfx {
	struct toggle_sim *sim;
	CUstream s[NS];
	struct toggle_agent *agent;
	CUmodule mod;
	CUfunction produce, mark;
	CUgraph graph[G];
	CUgraphExec exec[G];
	uint64_t runs[G];          /* launches of graph g that ran (counted by its mark kernel) */
	struct rec log[1 << 17];
	size_t nlog;
	uint32_t expect[G][MAX_LAUNCHES]; /* the set of each launch, when it was submitted */
	uint64_t launched[G];
	unsigned compute_runs;
};

/* ---- the simulated kernels ------------------------------------------------ */

static void k_produce(void **p)
{
	struct dfx *f;
	int graph, hook;
	memcpy(&f, p[0], sizeof(f));
	memcpy(&graph, p[1], sizeof(graph));
	memcpy(&hook, p[2], sizeof(hook));
	ck_assert_uint_lt(f->nlog, sizeof(f->log) / sizeof(f->log[0]));
	ck_assert_uint_gt(f->runs[graph], 0);
	f->log[f->nlog++] = (struct rec){graph, hook, f->runs[graph] - 1};
}

static void k_mark(void **p)
{
	struct dfx *f;
	int graph;
	memcpy(&f, p[0], sizeof(f));
	memcpy(&graph, p[1], sizeof(graph));
	f->runs[graph]++;
}

static void k_compute(void *arg)
{
	((struct dfx *)arg)->compute_runs++;
}

static const struct toggle_sim_function test_functions[] = {
	{.name = "produce", .fn = k_produce, .n_params = 3,
	 .param_size = {sizeof(void *), sizeof(int), sizeof(int)}},
	{.name = "mark", .fn = k_mark, .n_params = 2, .param_size = {sizeof(void *), sizeof(int)}},
};

static const struct toggle_sim_image test_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC, .n_functions = 2, .functions = test_functions};

/* ---- fixture ---------------------------------------------------------------- */

static struct toggle_config dfx_config(struct dfx *f, enum toggle_mode mode, bool strict)
{
	return (struct toggle_config){
		.name = "device-test",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.strict = strict,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
}

static struct dfx *dfx_new(void)
{
	struct dfx *f = calloc(1, sizeof(*f));
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	for (int i = 0; i < NS; i++)
		ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->s[i]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_load(f->sim, &f->mod, &test_image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&f->produce, f->mod, "produce"), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&f->mark, f->mod, "mark"), CUDA_SUCCESS);
	return f;
}

static struct dfx *dfx_open(enum toggle_mode mode, bool strict)
{
	struct dfx *f = dfx_new();
	struct toggle_config cfg = dfx_config(f, mode, strict);
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	return f;
}

static void dfx_close(struct dfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0); /* the agent freed its device memory */
	toggle_sim_destroy(f->sim);
	free(f);
}

static CUlaunchConfig launch_cfg(CUstream s)
{
	return (CUlaunchConfig){.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
				.blockDimY = 1, .blockDimZ = 1, .hStream = s};
}

/* How a graph's producers are captured. */
enum how {
	H_DEVICE,         /* planner first, producers through toggle_launch_producer */
	H_NO_PLANNER,     /* producers through toggle_launch_producer, no planner */
	H_ONE_PLAIN,      /* planner, but hook 0:3 recorded with toggle_record_producer */
	H_BEFORE_PLANNER, /* hook 0:0's producer captured before the planner */
	H_RECORD_DEVICE,  /* launch_kernel_ex with the attribute + toggle_record_device_producer */
};

static void launch_mark(struct dfx *f, int gi)
{
	void *fp = f;
	void *params[] = {&fp, &gi};
	CUlaunchConfig c = launch_cfg(f->s[0]);
	ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, f->mark, params, NULL), CUDA_SUCCESS);
}

static void launch_one_producer(struct dfx *f, int gi, int h, enum how how)
{
	struct toggle_agent *a = f->agent;
	struct toggle_hook hook = {(uint16_t)(h / NL), (uint16_t)(h % NL)};
	void *fp = f;
	int graph = gi, hk = h;
	void *params[] = {&fp, &graph, &hk};
	CUlaunchConfig c = launch_cfg(f->s[0]);

	if (how == H_ONE_PLAIN && h == 3) {
		ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, f->produce, params, NULL), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_record_producer(a, f->s[0], hook), 0);
	} else if (how == H_RECORD_DEVICE) {
		CUlaunchAttribute attr;
		memset(&attr, 0, sizeof(attr));
		attr.id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
		attr.value.deviceUpdatableKernelNode.deviceUpdatable = 1;
		c.attrs = &attr;
		c.numAttrs = 1;
		ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, f->produce, params, NULL), CUDA_SUCCESS);
		ck_assert_ptr_nonnull(attr.value.deviceUpdatableKernelNode.devNode);
		ck_assert_int_eq(toggle_record_device_producer(
					 a, f->s[0], hook, attr.value.deviceUpdatableKernelNode.devNode),
				 0);
	} else {
		ck_assert_int_eq(toggle_launch_producer(a, &c, f->produce, params, hook), 0);
	}
}

/* Capture graph gi: planner, a mark kernel, then per layer a compute kernel and NT producers. */
static void dfx_capture(struct dfx *f, int gi, enum how how)
{
	struct toggle_agent *a = f->agent;
	ck_assert_int_eq(toggle_capture_begin(a), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	if (how == H_BEFORE_PLANNER) {
		launch_mark(f, gi);
		launch_one_producer(f, gi, 0, H_DEVICE);
	}
	if (how != H_NO_PLANNER)
		ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), 0);
	if (how != H_BEFORE_PLANNER)
		launch_mark(f, gi);
	for (int l = 0; l < NL; l++) {
		ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_compute, f), CUDA_SUCCESS);
		for (int t = 0; t < NT; t++) {
			int h = t * NL + l;
			if (how == H_BEFORE_PLANNER && h == 0)
				continue;
			launch_one_producer(f, gi, h, how == H_BEFORE_PLANNER ? H_DEVICE : how);
		}
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph[gi]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(a), 0);
}

static uint32_t set_bits(const struct toggle_set *s)
{
	uint32_t m = 0;
	for (int h = 0; h < NH; h++)
		if (toggle_set_contains(s, (struct toggle_hook){(uint16_t)(h / NL), (uint16_t)(h % NL)}))
			m |= 1u << h;
	return m;
}

static struct toggle_set set_of(uint32_t m)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	for (int h = 0; h < NH; h++)
		if (m >> h & 1)
			ck_assert_int_eq(toggle_set_add(&s, (struct toggle_hook){(uint16_t)(h / NL),
									(uint16_t)(h % NL)}),
					 0);
	return s;
}

/* Launch graph gi on stream si through the agent and note the set it must run with. */
static int dfx_launch(struct dfx *f, int gi, int si)
{
	int rc = toggle_graph_launch(f->agent, f->graph[gi], f->exec[gi], f->s[si]);
	if (rc == 0) {
		struct toggle_set cur;
		toggle_current_set(f->agent, &cur);
		ck_assert_uint_lt(f->launched[gi], MAX_LAUNCHES);
		f->expect[gi][f->launched[gi]++] = set_bits(&cur);
	}
	return rc;
}

/* Run everything queued and check every launch ran exactly its set; returns launches checked. */
static uint64_t dfx_check(struct dfx *f)
{
	static uint32_t seen[G][MAX_LAUNCHES];
	uint64_t n = 0;
	toggle_sim_synchronize(f->sim);
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < f->nlog; i++) {
		const struct rec *r = &f->log[i];
		ck_assert_uint_lt(r->launch, f->launched[r->graph]);
		ck_assert_msg(!(seen[r->graph][r->launch] >> r->hook & 1),
			      "graph %d launch %llu: hook %d ran twice", r->graph,
			      (unsigned long long)r->launch, r->hook);
		seen[r->graph][r->launch] |= 1u << r->hook;
	}
	for (int g = 0; g < G; g++) {
		ck_assert_uint_eq(f->runs[g], f->launched[g]);
		for (uint64_t k = 0; k < f->launched[g]; k++, n++)
			ck_assert_msg(seen[g][k] == f->expect[g][k],
				      "graph %d launch %llu ran 0x%06x, the gate said 0x%06x", g,
				      (unsigned long long)k, seen[g][k], f->expect[g][k]);
	}
	return n;
}

static uint64_t sim_calls(struct dfx *f, enum toggle_sim_op op)
{
	return toggle_sim_calls(f->sim, op);
}

static struct toggle_stats stats(struct dfx *f)
{
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	return st;
}

static struct toggle_graph_status gstatus(struct dfx *f, int gi)
{
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph[gi], &gs), 0);
	return gs;
}

static struct toggle_device_counters dcount(struct dfx *f, int gi)
{
	struct toggle_device_counters dc;
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(toggle_graph_device_counters(f->agent, f->graph[gi], &dc), 0);
	return dc;
}


/* ---- capture and bind ------------------------------------------------------ */

START_TEST(capture_planner_and_device_producers)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	ck_assert_int_eq(toggle_agent_mode(f->agent), TOGGLE_MODE_DEVICE);
	dfx_capture(f, 0, H_DEVICE);
	/* planner + mark + NL compute + NH producers */
	ck_assert_uint_eq(toggle_sim_graph_node_count(f->graph[0]), 2 + NL + NH);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert_uint_eq(gs.nodes, NH);
	ck_assert(!gs.bound);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	gs = gstatus(f, 0);
	ck_assert(gs.bound && gs.uploaded && !gs.device_fallback);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_DEVICE);
	ck_assert_str_eq(gs.note, "");
	struct toggle_registry_check rc;
	toggle_registry_check(f->agent, &rc);
	ck_assert(rc.complete && rc.uniform);

	/* Every producer's first launch: the planner sets all of them. */
	struct toggle_set s = set_of(0x00f0f0);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	struct toggle_device_counters dc = dcount(f, 0);
	ck_assert_uint_eq(dc.planner_runs, 1);
	ck_assert_uint_eq(dc.device_calls, NH);
	ck_assert_uint_eq(dc.device_failures, 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	ck_assert_uint_eq(stats(f).node_set_calls, 0);
	/* The compute kernels ran; the planner touched only producers. */
	ck_assert_uint_eq(f->compute_runs, NL);

	/* The same set again: no write, no device call. */
	uint64_t writes = stats(f).mask_writes;
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_uint_eq(stats(f).mask_writes, writes);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH);
	/* One hook flipped: one word written, one device call. */
	s = set_of(0x00f0f1);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	uint64_t words = stats(f).mask_words;
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_uint_eq(stats(f).mask_words, words + 1);
	dfx_check(f);
	dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, NH + 1);
	ck_assert_uint_eq(dc.planner_runs, 3);
	dfx_close(f);
}
END_TEST

START_TEST(record_device_producer_and_eager_use)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_RECORD_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(gstatus(f, 0).mode, TOGGLE_MODE_DEVICE);
	struct toggle_set s = set_of(0x800001);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	/* A producer launched on a stream that is not capturing runs at once, unrecorded. */
	void *fp = f;
	int graph = 1, hook = 5;
	void *params[] = {&fp, &graph, &hook};
	CUlaunchConfig c = launch_cfg(f->s[1]);
	f->runs[1] = 1;
	size_t before = f->nlog;
	ck_assert_int_eq(toggle_launch_producer(f->agent, &c, f->produce, params,
						(struct toggle_hook){0, 5}),
			 0);
	ck_assert_uint_eq(f->nlog, before + 1);
	ck_assert_uint_eq(toggle_graph_count(f->agent), 1);
	f->nlog = before;
	f->runs[1] = 0;
	/* Bad arguments. */
	ck_assert_int_eq(toggle_launch_producer(f->agent, NULL, f->produce, params,
						(struct toggle_hook){0, 5}),
			 TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_launch_producer(f->agent, &c, f->produce, params,
						(struct toggle_hook){NT, 0}),
			 TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_record_device_producer(f->agent, f->s[0], (struct toggle_hook){0, 0},
						       NULL),
			 TOGGLE_EINVAL);
	dfx_close(f);
}
END_TEST

START_TEST(bind_uploads_exactly_once)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	for (int g = 0; g < 3; g++) {
		dfx_capture(f, g, H_DEVICE);
		ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[g], &f->exec[g]), 0);
	}
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 3);
	ck_assert_uint_eq(stats(f).uploads, 3);
	uint64_t rng = 7;
	uint32_t cur = 0;
	for (int64_t step = 0; step < 200; step++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		ck_assert_int_eq(toggle_step_begin(f->agent, step, NULL), 0);
		for (int g = 0; g < 3; g++)
			ck_assert_int_eq(dfx_launch(f, g, 0), 0);
	}
	dfx_check(f);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 3);
	ck_assert_uint_eq(stats(f).uploads, 3);
	/* An upload that fails: the bind fails, the graph stays unbound, nothing runs. */
	dfx_capture(f, 3, H_DEVICE);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_UPLOAD, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[3], &f->exec[3]), TOGGLE_ECUDA);
	ck_assert_ptr_nonnull(f->exec[3]);
	ck_assert(!gstatus(f, 3).bound);
	ck_assert_int_eq(dfx_launch(f, 3, 0), TOGGLE_EUNBOUND);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[3], f->exec[3]), 0);
	ck_assert_uint_eq(stats(f).uploads, 4);
	ck_assert_int_eq(dfx_launch(f, 3, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 3).device_failures, 0);
	dfx_close(f);
}
END_TEST

/* The driver's rule, modelled: device calls in a first launch that was not uploaded fail. */
START_TEST(sim_upload_requirement)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	/* Instantiated behind libtoggle's back, then bound: bind still uploads. */
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[0], f->graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 1);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_failures, 0);
	dfx_close(f);

	/* Without libtoggle's upload the planner's first calls fail, then it retries. */
	f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[0], f->graph[0]), CUDA_SUCCESS);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_GRAPH_UPLOAD, 0, 1, CUDA_ERROR_UNKNOWN);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), TOGGLE_ECUDA);
	/* Forced through by hand: the exec was never uploaded. */
	struct tg_graph *g = tg_graph_find(f->agent, f->graph[0]);
	ck_assert_ptr_nonnull(g);
	g->uploaded_exec = f->exec[0];
	g->dev_setup = true; /* the descriptor was written before the upload failed */
	tg_graph_reset_exec(g, f->exec[0]);
	struct toggle_set s = set_of(0x0000ff);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	struct toggle_device_counters dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, NH);
	ck_assert_uint_eq(dc.device_failures, NH);
	/* The first launch uploaded it: the next planner sets every (unknown) node. */
	f->nlog = 0;
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, 2 * NH);
	ck_assert_uint_eq(dc.device_failures, NH);
	ck_assert_uint_eq(f->nlog, 8);
	dfx_close(f);
}
END_TEST

/* ---- pipelined replays ------------------------------------------------------- */

/* Steps with random sets, plans, several graphs, no sync between steps; streams per launch. */
static void pipelined(uint64_t seed, int streams, int steps)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	for (int g = 0; g < 3; g++) {
		dfx_capture(f, g, H_DEVICE);
		ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[g], &f->exec[g]), 0);
	}
	toggle_sim_set_deferred(f->sim, true, seed);
	uint64_t rng = seed;
	uint32_t cur = 0;
	uint64_t checked = 0;
	for (int64_t step = 0; step < steps; step++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		if (tu_rng_next(&rng) % 5 == 0) {
			struct toggle_set p = set_of((uint32_t)tu_rng_next(&rng) & ((1u << NH) - 1));
			ck_assert_int_eq(toggle_plan_step(f->agent, step + 1, &p), 0);
		}
		struct toggle_set gate;
		ck_assert_int_eq(toggle_step_begin(f->agent, step, &gate), 0);
		int n = 1 + (int)(tu_rng_next(&rng) % 4);
		for (int i = 0; i < n; i++) {
			int g = (int)(tu_rng_next(&rng) % 3);
			int si = (int)(tu_rng_next(&rng) % (uint64_t)streams);
			ck_assert_int_eq(dfx_launch(f, g, si), 0);
			ck_assert_uint_eq(f->expect[g][f->launched[g] - 1], set_bits(&gate));
		}
		if (step == 0)
			ck_assert_uint_eq(f->nlog, 0); /* nothing ran yet: the host is ahead */
		if (step % 97 == 96)
			checked += dfx_check(f);
	}
	checked = dfx_check(f);
	ck_assert_uint_gt(checked, (uint64_t)steps);
	/* No host toggle at all; the planners did it. */
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	ck_assert_uint_eq(stats(f).node_set_calls, 0);
	ck_assert_uint_eq(stats(f).uploads, 3);
	if (streams > 1)
		ck_assert_uint_gt(stats(f).stream_joins, 0);
	else
		ck_assert_uint_eq(stats(f).stream_joins, 0);
	for (int g = 0; g < 3; g++) {
		struct toggle_device_counters dc = dcount(f, g);
		ck_assert_uint_eq(dc.planner_runs, f->launched[g]);
		ck_assert_uint_eq(dc.device_failures, 0);
		/* The model: all nodes at the first launch, then the hooks that changed. */
		uint64_t want = NH;
		for (uint64_t k = 1; k < f->launched[g]; k++)
			want += (uint64_t)__builtin_popcount(f->expect[g][k] ^ f->expect[g][k - 1]);
		ck_assert_uint_eq(dc.device_calls, want);
	}
	dfx_close(f);
}

START_TEST(pipelined_one_stream)
{
	pipelined(0x5eed + (uint64_t)_i, 1, 600);
}
END_TEST

START_TEST(pipelined_several_streams)
{
	pipelined(0xbeef + (uint64_t)_i, NS, 600);
}
END_TEST

/* The simulator's deferred mode does reorder: a write on a second stream can pass a launch. */
START_TEST(sim_deferred_reorders_streams)
{
	struct dfx *f = dfx_new();
	CUdeviceptr p;
	ck_assert_int_eq(toggle_sim_mem_alloc(f->sim, &p, 8), CUDA_SUCCESS);
	int passed = 0;
	for (uint64_t seed = 1; seed <= 64; seed++) {
		toggle_sim_set_deferred(f->sim, true, seed);
		uint64_t v = 0;
		CUstreamBatchMemOpParams op;
		memset(&op, 0, sizeof(op));
		op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
		op.writeValue.address = p;
		op.writeValue.value64 = 1;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_SUCCESS);
		op.writeValue.value64 = 2;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[1], 1, &op, 0), CUDA_SUCCESS);
		toggle_sim_synchronize(f->sim);
		ck_assert_int_eq(toggle_sim_memcpy_dtoh(f->sim, &v, p, 8), CUDA_SUCCESS);
		passed += v == 1; /* stream 1's write ran first */
		/* With an event, the order is fixed. */
		CUevent ev;
		ck_assert_int_eq(toggle_sim_event_create(f->sim, &ev), CUDA_SUCCESS);
		op.writeValue.value64 = 3;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_event_record(ev, f->s[0]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_stream_wait_event(f->s[1], ev, 0), CUDA_SUCCESS);
		op.writeValue.value64 = 4;
		ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[1], 1, &op, 0), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_stream_synchronize(f->s[1]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_memcpy_dtoh(f->sim, &v, p, 8), CUDA_SUCCESS);
		ck_assert_uint_eq(v, 4);
		ck_assert_int_eq(toggle_sim_event_destroy(ev), CUDA_SUCCESS);
	}
	ck_assert_int_gt(passed, 0);
	ck_assert_int_lt(passed, 64);
	toggle_sim_set_deferred(f->sim, false, 0);
	/* Bad batches. */
	CUstreamBatchMemOpParams op;
	memset(&op, 0, sizeof(op));
	op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	op.writeValue.address = p + 8; /* outside */
	ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_ERROR_INVALID_VALUE);
	op.writeValue.address = p;
	ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 256, &op, 0), CUDA_ERROR_INVALID_VALUE);
	op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	ck_assert_int_eq(toggle_sim_stream_batch_mem_op(f->s[0], 1, &op, 0), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_mem_free(f->sim, p + 1), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_mem_free(f->sim, p), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0);
	toggle_sim_destroy(f->sim);
	free(f);
}
END_TEST

/* ---- rebind, instantiation ------------------------------------------------------ */

START_TEST(rebind_rules)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	struct toggle_set s = set_of(0x0f0f0f);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH);

	/* Bind the same exec again: per-exec state resets, no new upload, the next
	 * planner sets every producer. */
	uint64_t rebinds = stats(f).rebinds;
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_uint_eq(stats(f).rebinds, rebinds + 1);
	ck_assert_uint_eq(gstatus(f, 0).applied_version, 0);
	ck_assert_uint_eq(stats(f).uploads, 1);
	toggle_sim_set_deferred(f->sim, true, 3);
	ck_assert_int_eq(dfx_launch(f, 0, 1), 0); /* another stream, too */
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, 2 * NH);

	/* Unbind: launches fail closed; bind again: uploaded again, all nodes set. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], NULL), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_EUNBOUND);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_uint_eq(stats(f).uploads, 2);
	s = set_of(0x000001);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 2), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, 3 * NH);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);

	/* Forget: refused; a new capture into the same record starts over. */
	ck_assert_int_eq(toggle_graph_forget(f->agent, f->graph[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ESTALE);
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(toggle_sim_exec_destroy(f->exec[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(f->graph[0]), CUDA_SUCCESS);
	memset(f->launched, 0, sizeof(f->launched));
	memset(f->runs, 0, sizeof(f->runs));
	f->nlog = 0;
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(gstatus(f, 0).mode, TOGGLE_MODE_DEVICE);
	dfx_close(f);
}
END_TEST

START_TEST(second_instantiation_refused)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	CUgraphExec again = (CUgraphExec)(uintptr_t)1;
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &again), TOGGLE_ENOTSUP);
	ck_assert_ptr_null(again);
	ck_assert_msg(strstr(toggle_last_error(f->agent), "once at a time"), "%s",
		      toggle_last_error(f->agent));
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_INSTANTIATE), 2);
	/* The first exec is still bound and works. */
	struct toggle_set s = set_of(0x0000f0);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH);

	/* Unbound and destroyed, the graph instantiates again: a new exec, uploaded,
	 * whose first planner sets every producer. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(f->exec[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_uint_eq(stats(f).uploads, 2);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_calls, 2 * NH);
	ck_assert_uint_eq(dcount(f, 0).device_failures, 0);

	/* A graph instantiated behind libtoggle's back: the driver refuses, with the same text. */
	ck_assert_int_eq(toggle_sim_graph_instantiate(&again, f->graph[0]), CUDA_ERROR_NOT_SUPPORTED);
	dfx_capture(f, 1, H_DEVICE);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec[1], f->graph[1]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[1], &again), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "operation not supported"));
	/* The device-updatable attribute outside a capture: refused like the driver does. */
	void *fp = f;
	int graph = 0, hook = 0;
	void *params[] = {&fp, &graph, &hook};
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof(attr));
	attr.id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
	attr.value.deviceUpdatableKernelNode.deviceUpdatable = 1;
	CUlaunchConfig c = launch_cfg(f->s[0]);
	c.attrs = &attr;
	c.numAttrs = 1;
	ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, f->produce, params, NULL),
			 CUDA_ERROR_NOT_SUPPORTED);
	/* Graphs without device-updatable nodes instantiate as often as wanted. */
	CUgraph plain;
	CUgraphExec e1, e2;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], k_compute, f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &plain), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, plain, &e1), 0);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, plain, &e2), 0);
	ck_assert_int_eq(toggle_graph_launch(f->agent, plain, e2, f->s[0]), 0);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, plain, NULL), TOGGLE_EINVAL);
	dfx_close(f);
}
END_TEST

/* ---- strict and fallback ---------------------------------------------------------- */

static void expect_refused(enum how how, const char *why)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, how);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(f->exec[0]);
	ck_assert_msg(strstr(toggle_last_error(f->agent), why), "%s", toggle_last_error(f->agent));
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(!gs.bound && !gs.device_fallback);
	ck_assert_ptr_nonnull(strstr(gs.note, why));
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), TOGGLE_ENOTSUP);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), why));
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	ck_assert_uint_eq(an.device_refused, 2);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->runs[0], 0); /* nothing ran */
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_GRAPH_UPLOAD), 0);
	dfx_close(f);
}

static void expect_fallback(enum how how, const char *why)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, false);
	dfx_capture(f, 0, how);
	dfx_capture(f, 1, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[1], &f->exec[1]), 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(gs.bound && gs.device_fallback && !gs.uploaded);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_LAZY);
	ck_assert_msg(strstr(gs.note, why), "%s", gs.note);
	ck_assert_int_eq(gstatus(f, 1).mode, TOGGLE_MODE_DEVICE);
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	ck_assert_uint_eq(an.device_fallbacks, 1);
	toggle_sim_set_deferred(f->sim, true, 11);
	uint64_t rng = 99;
	uint32_t cur = 0;
	for (int64_t step = 0; step < 100; step++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		ck_assert_int_eq(toggle_step_begin(f->agent, step, NULL), 0);
		ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
		ck_assert_int_eq(dfx_launch(f, 1, 0), 0);
	}
	dfx_check(f);
	/* The fallback graph took host calls; its planner (if any) never acted. */
	ck_assert_uint_gt(stats(f).node_set_calls, 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), stats(f).node_set_calls);
	struct toggle_device_counters dc;
	ck_assert_int_eq(toggle_graph_device_counters(f->agent, f->graph[0], &dc), TOGGLE_ENOTSUP);
	ck_assert_uint_eq(dcount(f, 1).planner_runs, 100);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), dcount(f, 1).device_calls);
	dfx_close(f);
}

START_TEST(strict_refuses_a_node_not_device_updatable)
{
	expect_refused(H_ONE_PLAIN, "producer hook 0:3 is not device-updatable");
}
END_TEST

START_TEST(fallback_for_a_node_not_device_updatable)
{
	expect_fallback(H_ONE_PLAIN, "producer hook 0:3 is not device-updatable");
}
END_TEST

START_TEST(missing_planner_refused)
{
	expect_refused(H_NO_PLANNER, "no planner");
}
END_TEST

START_TEST(missing_planner_fallback)
{
	expect_fallback(H_NO_PLANNER, "no planner");
}
END_TEST

START_TEST(producer_before_planner_refused)
{
	expect_refused(H_BEFORE_PLANNER, "producer hook 0:0 is not ordered after the planner");
}
END_TEST

START_TEST(mixing_refused)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	struct toggle_set s = set_of(0x000fff);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	/* The host path on a device-mode graph: refused before any driver call. */
	struct tg_graph *g = tg_graph_find(f->agent, f->graph[0]);
	ck_assert_int_eq(tg_graph_sync(f->agent, g), TOGGLE_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent), "never mix"));
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	ck_assert_uint_eq(an.host_on_device_node, 1);
	/* apply_all and eager-style calls leave device-mode graphs to their launch. */
	ck_assert_int_eq(toggle_apply_all(f->agent), 0);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(sim_calls(f, TOGGLE_SIM_OP_NODE_SET_ENABLED), 0);
	dfx_close(f);
}
END_TEST

/* ---- agent-level availability ---------------------------------------------------------- */

START_TEST(device_mode_unavailable)
{
	struct dfx *f = dfx_new();
	struct toggle_agent *a = NULL;
	struct toggle_config cfg = dfx_config(f, TOGGLE_MODE_DEVICE, true);

	toggle_sim_set_driver_version(f->sim, 12030);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	toggle_sim_set_driver_version(f->sim, 12040);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_MODULE_LOAD, 0, 1, CUDA_ERROR_NO_BINARY_FOR_GPU);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_MEM_ALLOC, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), TOGGLE_ENOTSUP);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0);

	/* Not strict: lazy, and the same integration code works. */
	cfg.strict = false;
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_MODULE_LOAD, 0, 1, CUDA_ERROR_NO_BINARY_FOR_GPU);
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	f->agent = a;
	ck_assert_int_eq(toggle_agent_mode(a), TOGGLE_MODE_LAZY);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(a), "planner"));
	dfx_capture(f, 0, H_DEVICE); /* toggle_capture_planner: nothing; producers: plain */
	ck_assert_uint_eq(toggle_sim_graph_node_count(f->graph[0]), 1 + NL + NH);
	ck_assert_int_eq(toggle_graph_instantiate(a, f->graph[0], &f->exec[0]), 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_LAZY);
	ck_assert(!gs.device_fallback);
	/* Plain nodes instantiate again. */
	CUgraphExec e2;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, f->graph[0]), CUDA_SUCCESS);
	struct toggle_set s = set_of(0x123456);
	ck_assert_int_eq(toggle_set_enabled(a, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(stats(f).node_set_calls, NH);
	dfx_close(f);
}
END_TEST

START_TEST(capture_planner_errors)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	struct toggle_agent *a = f->agent;
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), TOGGLE_ECAPTURE); /* no window */
	{
		/* A producer into a capture outside any window: refused before the launch. */
		void *fp0 = f;
		int g0 = 0, h0 = 0;
		void *p0[] = {&fp0, &g0, &h0};
		CUlaunchConfig c0 = launch_cfg(f->s[0]);
		CUgraph dropped;
		ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_launch_producer(a, &c0, f->produce, p0,
							(struct toggle_hook){0, 0}),
				 TOGGLE_ECAPTURE);
		ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &dropped), CUDA_SUCCESS);
		ck_assert_uint_eq(toggle_sim_graph_node_count(dropped), 0);
		ck_assert_int_eq(toggle_sim_graph_destroy(dropped), CUDA_SUCCESS);
	}
	ck_assert_int_eq(toggle_capture_begin(a), 0);
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), TOGGLE_ECAPTURE); /* not capturing */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), 0);
	ck_assert_int_eq(toggle_capture_planner(a, f->s[0]), TOGGLE_EINVAL); /* twice */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX, 0, 1, CUDA_ERROR_INVALID_VALUE);
	void *fp = f;
	int graph = 0, hook = 0;
	void *params[] = {&fp, &graph, &hook};
	CUlaunchConfig c = launch_cfg(f->s[0]);
	ck_assert_int_eq(toggle_launch_producer(a, &c, f->produce, params, (struct toggle_hook){0, 0}),
			 TOGGLE_ECUDA);
	/* A graph with a planner and no producers: launched as an unrelated graph. */
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(a), 0);
	ck_assert_int_eq(toggle_graph_instantiate(a, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(toggle_graph_bind(a, f->graph[0], f->exec[0]), TOGGLE_ENOENT);
	struct toggle_stats before = stats(f);
	ck_assert_int_eq(toggle_graph_launch(a, f->graph[0], f->exec[0], f->s[0]), 0);
	ck_assert_uint_eq(stats(f).launches_unrelated, before.launches_unrelated + 1);
	struct toggle_registry_check rc;
	toggle_registry_check(a, &rc);
	ck_assert_uint_eq(rc.graphs, 0);
	dfx_close(f);

	/* Outside device mode the planner call does nothing. */
	f = dfx_open(TOGGLE_MODE_LAZY, false);
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(f->agent, f->s[0]), 0);
	ck_assert_uint_eq(toggle_graph_count(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph[0]), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(f->graph[0]), 0);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	dfx_close(f);
}
END_TEST

/* Device-side failures are counted and retried: the next launch sets those nodes again. */
START_TEST(device_call_failures_retried)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	struct toggle_set s = set_of(0);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 1, 2, CUDA_ERROR_INVALID_VALUE);
	s = set_of(0x7);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	toggle_sim_synchronize(f->sim);
	struct toggle_device_counters dc = dcount(f, 0);
	ck_assert_uint_eq(dc.device_calls, NH + 3);
	ck_assert_uint_eq(dc.device_failures, 2);
	f->launched[0] = 1; /* that launch ran a partial set: not part of the check */
	f->runs[0] = 1;
	f->nlog = 0;
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(dcount(f, 0).device_calls, NH + 5);
	ck_assert_uint_eq(f->nlog, 3);
	dfx_close(f);
}
END_TEST

/* A mask write that fails refuses the launch; the next one writes every word. */
START_TEST(mask_write_failure_refuses)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	struct toggle_set s = set_of(0x00ff00);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_BATCH_MEM_OP, 0, 1, CUDA_ERROR_ILLEGAL_STATE);
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ECUDA);
	ck_assert_uint_eq(stats(f).launches_refused, 1);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	ck_assert_uint_eq(f->runs[0], 1);
	dfx_close(f);
}
END_TEST

/* ---- record reuse and tainted launches (issue 18) ----------------------------------- */

/*
 * A new capture reuses the record of a destroyed graph whose exec still has
 * launches (and their mask writes) queued: the bind of the new capture must
 * not write the record's descriptor and arrays under them.  Every launch of
 * the old exec and of the new one runs the set of its step.
 */
START_TEST(record_reuse_waits_for_old_exec)
{
	uint64_t seed = 0x18a + (uint64_t)_i;
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	toggle_sim_set_handle_reuse(f->sim, true);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	toggle_sim_set_deferred(f->sim, true, seed);
	uint64_t rng = seed;
	uint32_t cur = 0;
	int64_t step = 0;
	for (; step < 8; step++) {
		cur = (uint32_t)tu_rng_next(&rng) & ((1u << NH) - 1);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		ck_assert_int_eq(toggle_step_begin(f->agent, step, NULL), 0);
		ck_assert_int_eq(dfx_launch(f, 0, (int)(tu_rng_next(&rng) % NS)), 0);
	}
	/* The application drops the graph (its exec lives on, launches queued) and
	 * captures another one; the driver hands out the same handle. */
	ck_assert_int_eq(toggle_sim_graph_destroy(f->graph[0]), CUDA_SUCCESS);
	dfx_capture(f, 1, H_DEVICE);
	ck_assert_ptr_eq(f->graph[1], f->graph[0]);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[1], &f->exec[1]), 0);
	ck_assert_uint_eq(stats(f).reuse_fences, 1);
	for (; step < 16; step++) {
		cur = (uint32_t)tu_rng_next(&rng) & ((1u << NH) - 1);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		ck_assert_int_eq(toggle_step_begin(f->agent, step, NULL), 0);
		ck_assert_int_eq(dfx_launch(f, 1, (int)(tu_rng_next(&rng) % NS)), 0);
	}
	ck_assert_uint_eq(dfx_check(f), 16);
	ck_assert_uint_eq(dcount(f, 1).device_failures, 0);
	dfx_close(f);
}
END_TEST

/* The hooks of sets A and B below, in the order the planner calls their nodes. */
#define TAINT_A 0x0000ffu /* resid_post:0-7 */
#define TAINT_B 0x00ff00u /* attn_out:0-7 */
/* Calls of the launch that goes from A to B: h0, h8, h1, h9, h2, ...; the
 * 4th and 5th fail, so h9 stays off and h2 stays on in that launch. */
#define TAINT_RAN (TAINT_B ^ (1u << 9) ^ (1u << 2))

/* Steps 0 (A) and 1 (B, two device calls fail), everything run; then step 2 begins. */
static void taint_setup(struct dfx *f)
{
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	toggle_sim_set_deferred(f->sim, true, 7); /* the host runs ahead of the device */
	struct toggle_set s = set_of(TAINT_A);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 0, NULL), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	/* Counted when the planners run: skip step 0's NH calls and 3 of step 1's. */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, NH + 3, 2, CUDA_ERROR_INVALID_VALUE);
	s = set_of(TAINT_B);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 1, NULL), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 1), 0);
	/* Nothing ran yet: nothing to report. */
	struct toggle_taint t;
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, 0);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(dcount(f, 0).device_failures, 2);
	/* That launch really ran another set than its step's (what dfx_check holds it to). */
	f->expect[0][1] = TAINT_RAN;
	dfx_check(f);
	ck_assert_int_eq(toggle_step_begin(f->agent, 2, NULL), 0); /* reads the report */
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, 1);
	ck_assert_uint_eq(t.lost, 0);
	ck_assert_uint_eq(t.calls_failed, 2);
	ck_assert_int_eq(t.last_step, 1);
	ck_assert_ptr_eq(t.last_graph, f->graph[0]);
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	ck_assert_uint_eq(an.device_tainted, 1);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert_uint_eq(gs.tainted_launches, 1);
	ck_assert_int_eq(gs.tainted_step, 1);
	ck_assert(gs.tainted);
}

/* Strict: the tainted exec is refused until it is bound again; then all is clean. */
START_TEST(tainted_launch_strict_refuses)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	taint_setup(f);
	ck_assert(gstatus(f, 0).blocked);
	uint64_t refused = stats(f).launches_refused;
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ECUDA);
	ck_assert_msg(strstr(toggle_last_error(f->agent), "step 1"), "%s", toggle_last_error(f->agent));
	ck_assert_int_eq(dfx_launch(f, 0, 0), TOGGLE_ECUDA);
	ck_assert_uint_eq(stats(f).launches_refused, refused + 2);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->runs[0], 2); /* nothing more ran */
	/* A bind re-arms it: its planner sets every producer, and the launch is clean. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert(!gstatus(f, 0).blocked);
	ck_assert_int_eq(dfx_launch(f, 0, 2), 0);
	dfx_check(f);
	ck_assert_int_eq(toggle_step_begin(f->agent, 3, NULL), 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(!gs.tainted && !gs.blocked);
	ck_assert_uint_eq(gs.tainted_launches, 1);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	dfx_check(f);
	struct toggle_taint t;
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, 1);
	dfx_close(f);
}
END_TEST

/* Not strict: reported, the next launch retries the failed nodes and is clean. */
START_TEST(tainted_launch_reported_then_clean)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, false);
	taint_setup(f);
	ck_assert(!gstatus(f, 0).blocked);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0); /* step 2: set B, the two nodes called again */
	dfx_check(f);
	ck_assert_uint_eq(dcount(f, 0).device_failures, 2);
	ck_assert_int_eq(toggle_step_begin(f->agent, 3, NULL), 0);
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert(!gs.tainted);
	ck_assert_uint_eq(gs.tainted_launches, 1);
	ck_assert_int_eq(gs.tainted_step, 1);
	dfx_close(f);
}
END_TEST

/* The status lane carries the taint to the daemon: agent counters and graph flags. */
START_TEST(tainted_launch_in_status_lane)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, true);
	struct toggle_agent *a = f->agent;
	char err[128];
	/* White-box: the region a daemon connection would have made. */
	ck_assert_int_eq(toggle_shm_create(&a->shm, err, sizeof(err)), 0);
	a->status_buf = calloc(1, sizeof(*a->status_buf));
	ck_assert_ptr_nonnull(a->status_buf);
	taint_setup(f); /* step_begin publishes */
	struct toggle_shm_status st;
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.tainted_launches, 1);
	ck_assert_int_eq(st.tainted_step, 1);
	ck_assert_uint_eq(st.tainted_graph, (uint64_t)(uintptr_t)f->graph[0]);
	ck_assert_uint_eq(st.tainted_lost, 0);
	/* Counted among the driver errors too: the daemon's anomaly events tell watchers. */
	struct toggle_anomalies an;
	toggle_anomalies_get(a, &an);
	ck_assert_uint_eq(st.anomalies[TOGGLE_SHM_AN_DRIVER_ERRORS], an.driver_errors + 1);
	ck_assert_uint_eq(st.n_graphs, 1);
	ck_assert_uint_eq(st.graphs[0].flags & (TOGGLE_SHM_GRAPH_TAINTED | TOGGLE_SHM_GRAPH_BLOCKED),
			  TOGGLE_SHM_GRAPH_TAINTED | TOGGLE_SHM_GRAPH_BLOCKED);
	ck_assert_int_eq(toggle_graph_bind(a, f->graph[0], f->exec[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(toggle_step_begin(a, 3, NULL), 0);
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.graphs[0].flags & (TOGGLE_SHM_GRAPH_TAINTED | TOGGLE_SHM_GRAPH_BLOCKED), 0);
	ck_assert_uint_eq(st.tainted_launches, 1);
	dfx_close(f);
}
END_TEST

/*
 * Random failures over many steps (not strict): every launch in which a
 * device call failed is reported, at the next step, with its step; every
 * launch that did not run its set is among them; the others ran exactly.
 */
START_TEST(tainted_launches_random)
{
	static uint32_t seen[MAX_LAUNCHES];
	static bool failed[MAX_LAUNCHES];
	uint64_t rng = 0x7a1 + (uint64_t)_i;
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, false);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	toggle_sim_set_deferred(f->sim, true, rng);
	uint32_t cur = 0;
	uint64_t fails_before = 0, reported = 0, n_failed = 0;
	memset(failed, 0, sizeof(failed));
	for (int64_t step = 0; step < 300; step++) {
		cur = tu_pick_set(&rng, cur, NH);
		struct toggle_set s = set_of(cur);
		ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
		ck_assert_int_eq(toggle_step_begin(f->agent, step, NULL), 0);
		/* What the last step's launch did is known now (it ran before this begin). */
		struct toggle_taint t;
		toggle_taint_get(f->agent, &t);
		if (step > 0) {
			bool was = failed[step - 1];
			ck_assert_uint_eq(t.launches, reported + was);
			if (was)
				ck_assert_int_eq(t.last_step, step - 1);
			reported = t.launches;
		}
		if (tu_rng_next(&rng) % 4 == 0)
			toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, tu_rng_next(&rng) % 6,
					1 + tu_rng_next(&rng) % 3, CUDA_ERROR_INVALID_VALUE);
		ck_assert_int_eq(dfx_launch(f, 0, (int)(tu_rng_next(&rng) % NS)), 0);
		toggle_sim_synchronize(f->sim);
		uint64_t fails = dcount(f, 0).device_failures;
		failed[step] = fails > fails_before;
		n_failed += failed[step];
		fails_before = fails;
	}
	ck_assert_int_eq(toggle_step_begin(f->agent, 300, NULL), 0);
	struct toggle_taint t;
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, n_failed);
	ck_assert_uint_eq(t.lost, 0);
	ck_assert_uint_gt(n_failed, 10);
	/* What ran: a launch that ran another set than its step's was reported. */
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < f->nlog; i++)
		seen[f->log[i].launch] |= 1u << f->log[i].hook;
	uint64_t wrong = 0;
	for (uint64_t k = 0; k < f->launched[0]; k++) {
		if (seen[k] == f->expect[0][k])
			continue;
		wrong++;
		ck_assert_msg(failed[k], "launch %llu ran 0x%06x for 0x%06x and was not reported",
			      (unsigned long long)k, seen[k], f->expect[0][k]);
	}
	ck_assert_uint_gt(wrong, 0);
	ck_assert_uint_eq(f->runs[0], 300);
	dfx_close(f);
}
END_TEST

/* The real daemon and togglectl show it: agents and graphs. */
static void dd_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static Toggle__Envelope *dd_call(struct tgc *c, Toggle__Envelope__BodyCase body, void *msg)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT, *rep = NULL;
	char err[256];
	env.body_case = body;
	env.hello = msg; /* every body member is a pointer in one union */
	int rc = tgc_call(c, &env, &rep, 5000, err, sizeof(err));
	ck_assert_msg(rc == 0, "rpc %d: %d %s", (int)body, rc, err);
	return rep;
}

START_TEST(tainted_launch_shown_by_daemon)
{
	char dir[] = "/tmp/tg-devtaint-XXXXXX", sock[64], state[64], logp[64], cmd[256], out[4096];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/s", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(logp, sizeof(logp), "%s/toggled.log", dir);
	ck_assert_int_eq(mkdir(state, 0700), 0);
	pid_t parent = getpid();
	fflush(NULL);
	pid_t daemon = fork();
	ck_assert_int_ge(daemon, 0);
	if (daemon == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(99);
		int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		execl(TOGGLED_BIN, "toggled", "--socket", sock, "--state-dir", state, (char *)NULL);
		_exit(127);
	}
	struct tgc *c = NULL;
	char err[256];
	for (int i = 0; tgc_connect(sock, 1000, &c, err, sizeof(err)) != 0; i++) {
		ck_assert_msg(i < 1000, "toggled does not answer on %s: %s", sock, err);
		dd_sleep_ms(10);
	}

	struct dfx *f = dfx_new();
	struct toggle_config cfg = dfx_config(f, TOGGLE_MODE_DEVICE, true);
	cfg.socket_path = sock;
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	Toggle__ListAgentsRequest la = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	Toggle__Envelope *rep = NULL;
	for (int i = 0;; i++) {
		rep = dd_call(c, TOGGLE__ENVELOPE__BODY_LIST_AGENTS, &la);
		if (rep->agents && rep->agents->n_agents == 1)
			break;
		toggle__envelope__free_unpacked(rep, NULL);
		ck_assert_msg(i < 1000, "the agent did not register");
		dd_sleep_ms(10);
	}
	/* Clean so far: nothing tainted on the wire. */
	ck_assert(!(rep->agents->agents[0]->tainted_launches != 0));
	toggle__envelope__free_unpacked(rep, NULL);

	taint_setup(f); /* step 2 began: the status lane holds the taint */
	rep = dd_call(c, TOGGLE__ENVELOPE__BODY_LIST_AGENTS, &la);
	ck_assert_uint_eq(rep->agents->n_agents, 1);
	const Toggle__AgentInfo *ai = rep->agents->agents[0];
		ck_assert_uint_eq(ai->tainted_launches, 1);
	ck_assert_int_eq(ai->tainted_step, 1);
	ck_assert_uint_ge(ai->anomalies, 1); /* what watchers' anomaly events count */
	toggle__envelope__free_unpacked(rep, NULL);
	Toggle__ListGraphsRequest lg = TOGGLE__LIST_GRAPHS_REQUEST__INIT;
	rep = dd_call(c, TOGGLE__ENVELOPE__BODY_LIST_GRAPHS, &lg);
	ck_assert_uint_eq(rep->graphs->n_graphs, 1);
	ck_assert(rep->graphs->graphs[0]->tainted && rep->graphs->graphs[0]->blocked);
	toggle__envelope__free_unpacked(rep, NULL);

	/* togglectl, as an operator sees it. */
	snprintf(cmd, sizeof(cmd), "%s -s %s graphs; %s -s %s agents", TOGGLECTL_BIN, sock,
		 TOGGLECTL_BIN, sock);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(strstr(out, "bound,tainted,blocked"), "%s", out);
	ck_assert_msg(strstr(out, "(tainted 1, last step 1)"), "%s", out);

	/* Clean again after a bind and a clean launch. */
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph[0], f->exec[0]), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(toggle_step_begin(f->agent, 3, NULL), 0);
	rep = dd_call(c, TOGGLE__ENVELOPE__BODY_LIST_GRAPHS, &lg);
	ck_assert(!rep->graphs->graphs[0]->tainted && !rep->graphs->graphs[0]->blocked);
	toggle__envelope__free_unpacked(rep, NULL);

	tgc_close(c);
	dfx_close(f);
	int st = 0;
	kill(daemon, SIGTERM);
	ck_assert_int_eq(waitpid(daemon, &st, 0), daemon);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "toggled ended with status %d", st);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/*
 * What the report holds between two looks: 7 tainted launches, each with its
 * step (issue #28: docs/libtoggle.md said 8).  The ring has 8 slots, and the
 * eighth-latest record's slot is the one the planner writes next: a write in
 * progress there cannot be told from a finished one, so that record is
 * counted as lost.  _i: 7 launches (none lost), 8 (one lost).
 */
START_TEST(tainted_launches_report_holds_seven)
{
	unsigned n = _i ? 8 : 7;
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, false);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 0, NULL), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 0, 1u << 30, CUDA_ERROR_INVALID_VALUE);
	struct toggle_set s = set_of(0x0f0f0f);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 1, NULL), 0);
	for (unsigned k = 0; k < n; k++)
		ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 2, NULL), 0);
	struct toggle_taint t;
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, n);
	ck_assert_uint_eq(t.lost, n - 7);
	ck_assert_uint_eq(t.calls_failed, 7 * 12);
	ck_assert_int_eq(t.last_step, 1); /* the latest has its step */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 0, 0, CUDA_SUCCESS);
	dfx_close(f);
}
END_TEST

/* More tainted launches between two looks than the report holds: counted, steps unknown. */
START_TEST(tainted_launches_overrun_counted)
{
	struct dfx *f = dfx_open(TOGGLE_MODE_DEVICE, false);
	dfx_capture(f, 0, H_DEVICE);
	ck_assert_int_eq(toggle_graph_instantiate(f->agent, f->graph[0], &f->exec[0]), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 0, NULL), 0);
	ck_assert_int_eq(dfx_launch(f, 0, 0), 0);
	/* Every call fails from now on: each launch calls the 12 changed nodes again and fails. */
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 0, 1u << 30, CUDA_ERROR_INVALID_VALUE);
	struct toggle_set s = set_of(0x0f0f0f);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 1, NULL), 0);
	for (int k = 0; k < 11; k++)
		ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 2, NULL), 0);
	struct toggle_taint t;
	toggle_taint_get(f->agent, &t);
	ck_assert_uint_eq(t.launches, 11);
	ck_assert_uint_eq(t.lost, 4); /* 3 overwritten, 1 in the slot the next one takes */
	ck_assert_uint_eq(t.calls_failed, 7 * 12); /* those with a record */
	struct toggle_graph_status gs = gstatus(f, 0);
	ck_assert_uint_eq(gs.tainted_launches, 11);
	ck_assert(gs.tainted);
	toggle_sim_fail(f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 0, 0, CUDA_SUCCESS);
	/* Lost records are placed at the last launch made: the next clean launch clears it. */
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph[0], f->exec[0], f->s[0]), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, 3, NULL), 0);
	ck_assert(!gstatus(f, 0).tainted);
	ck_assert_uint_eq(dcount(f, 0).device_failures, 11 * 12);
	ck_assert_int_eq(t.last_step, 1);
	toggle_sim_synchronize(f->sim);
	dfx_close(f);
}
END_TEST

static Suite *device_suite(void)
{
	Suite *s = suite_create("device");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, capture_planner_and_device_producers);
	tcase_add_test(tc, record_device_producer_and_eager_use);
	tcase_add_test(tc, bind_uploads_exactly_once);
	tcase_add_test(tc, sim_upload_requirement);
	tcase_add_loop_test(tc, pipelined_one_stream, 0, 3);
	tcase_add_loop_test(tc, pipelined_several_streams, 0, 3);
	tcase_add_test(tc, sim_deferred_reorders_streams);
	tcase_add_test(tc, rebind_rules);
	tcase_add_test(tc, second_instantiation_refused);
	tcase_add_test(tc, strict_refuses_a_node_not_device_updatable);
	tcase_add_test(tc, fallback_for_a_node_not_device_updatable);
	tcase_add_test(tc, missing_planner_refused);
	tcase_add_test(tc, missing_planner_fallback);
	tcase_add_test(tc, producer_before_planner_refused);
	tcase_add_test(tc, mixing_refused);
	tcase_add_test(tc, device_mode_unavailable);
	tcase_add_test(tc, capture_planner_errors);
	tcase_add_test(tc, device_call_failures_retried);
	tcase_add_test(tc, mask_write_failure_refuses);
	tcase_add_loop_test(tc, record_reuse_waits_for_old_exec, 0, 4);
	tcase_add_test(tc, tainted_launch_strict_refuses);
	tcase_add_test(tc, tainted_launch_reported_then_clean);
	tcase_add_test(tc, tainted_launch_in_status_lane);
	tcase_add_loop_test(tc, tainted_launches_report_holds_seven, 0, 2);
	tcase_add_test(tc, tainted_launches_overrun_counted);
	tcase_add_loop_test(tc, tainted_launches_random, 0, 3);
	tcase_add_test(tc, tainted_launch_shown_by_daemon);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(device_suite());
}
