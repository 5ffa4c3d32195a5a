/*
 * check_device_bare.c - device mode's producer-free ("bare") exec (issue 31):
 * the driver refuses cuGraphClone of a graph with a device-updatable node, so
 * libtoggle assembles it node by node (bare.c, bare_assemble).  Ground truth
 * is the simulator's kernel log: every kernel of the graph appends what it
 * is (a compute kernel its id, a producer its hook) when it runs, so each
 * launch shows which kernels ran, how often and in which order.
 *
 * The graph (capture order, one stream unless forked): the planner, then per
 * layer l: compute 2l, the producer of hook l, compute 2l+1; a memset and a
 * memcpy node after layer 0; a last compute.  Computes are the simulator's
 * plain kernels (toggle_sim_launch_kernel), producers the device-updatable
 * kernel nodes of toggle_launch_producer.
 */
#include "fixture_device.h"
#include "toggle_shm.h"

#define BL 8                 /* producers (hooks 0:0 .. 0:7) */
#define BC (2 * BL + 1)      /* compute kernels */
#define LOG_MAX (1 << 16)

/* What ran, in order: compute id >= 0, producer of hook h: -1 - h. */
static int klog[LOG_MAX];
static size_t nklog;

static void k_log_compute(void *arg)
{
	ck_assert_uint_lt(nklog, LOG_MAX);
	klog[nklog++] = (int)(intptr_t)arg;
}

static void k_log_produce(void **p)
{
	int hook;
	memcpy(&hook, p[0], sizeof(hook));
	ck_assert_uint_lt(nklog, LOG_MAX);
	klog[nklog++] = -1 - hook;
}

static const struct toggle_sim_function bare_functions[] = {
	{.name = "produce", .fn = k_log_produce, .n_params = 1, .param_size = {sizeof(int)}},
};

static const struct toggle_sim_image bare_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC, .n_functions = 1, .functions = bare_functions};

/* The producer of this hook is launched with a launch attribute of its own (-1: none). */
static int attr_hook = -1;

struct bx {
	struct dfx *f; /* simulator, streams, agent */
	CUmodule mod;
	CUfunction produce;
	CUgraph graph;
	CUgraphExec exec;
};

/* Open agents without the bare and full execs (the device exec alone). */
static bool bx_no_second;

/* An agent in device mode with bare execs on (the fixture's default is off). */
static struct bx *bx_open(bool strict)
{
	struct bx *b = calloc(1, sizeof(*b));
	ck_assert_ptr_nonnull(b);
	b->f = dfx_new();
	struct toggle_config cfg = dfx_config(b->f, TOGGLE_MODE_DEVICE, strict);
	cfg.no_bare_exec = bx_no_second;
	ck_assert_int_eq(toggle_agent_open(&cfg, &b->f->agent), 0);
	ck_assert_int_eq(toggle_agent_mode(b->f->agent), TOGGLE_MODE_DEVICE);
	ck_assert_int_eq(toggle_sim_module_load(b->f->sim, &b->mod, &bare_image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&b->produce, b->mod, "produce"),
			 CUDA_SUCCESS);
	nklog = 0;
	attr_hook = -1;
	return b;
}

static void bx_close(struct bx *b)
{
	toggle_sim_synchronize(b->f->sim);
	toggle_agent_close(b->f->agent);
	b->f->agent = NULL;
	/* Nothing of the agent's left: no assembled graph, no bare exec. */
	unsigned graphs = b->graph ? 1 : 0, execs = b->exec ? 1 : 0;
	ck_assert_uint_eq(toggle_sim_graph_count(b->f->sim), graphs);
	ck_assert_uint_eq(toggle_sim_exec_count(b->f->sim), execs);
	ck_assert_uint_eq(toggle_sim_mem_in_use(b->f->sim), 0);
	toggle_sim_destroy(b->f->sim);
	free(b->f);
	free(b);
}

static void compute(struct bx *b, CUstream s, int id)
{
	(void)b; /* the same shape as producer() */
	ck_assert_int_eq(toggle_sim_launch_kernel(s, k_log_compute, (void *)(intptr_t)id),
			 CUDA_SUCCESS);
}

static void producer(struct bx *b, CUstream s, int h)
{
	int hook = h;
	void *params[] = {&hook};
	CUlaunchConfig c = launch_cfg(s);
	CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_PRIORITY};
	at.value.priority = 1;
	if (h == attr_hook) {
		c.attrs = &at;
		c.numAttrs = 1;
	}
	ck_assert_int_eq(toggle_launch_producer(b->f->agent, &c, b->produce, params,
						(struct toggle_hook){0, (uint16_t)h}),
			 0);
}

/* extra: a node of this type after the memset (CU_GRAPH_NODE_TYPE_KERNEL: none). */
static void bx_capture(struct bx *b, CUgraphNodeType extra)
{
	struct toggle_agent *a = b->f->agent;
	CUstream s = b->f->s[0];
	ck_assert_int_eq(toggle_capture_begin(a), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(a, s), 0);
	for (int l = 0; l < BL; l++) {
		compute(b, s, 2 * l);
		producer(b, s, l);
		compute(b, s, 2 * l + 1);
		if (l == 0) {
			ck_assert_int_eq(toggle_sim_memset(s), CUDA_SUCCESS);
			if (extra != CU_GRAPH_NODE_TYPE_KERNEL)
				ck_assert_int_eq(toggle_sim_capture_node(s, extra), CUDA_SUCCESS);
			ck_assert_int_eq(toggle_sim_memcpy(s), CUDA_SUCCESS);
		}
	}
	compute(b, s, 2 * BL);
	ck_assert_int_eq(toggle_sim_stream_end_capture(s, &b->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(a), 0);
}

/* Most cases start from the same point: an agent with the plain graph
 * (no extra node) captured and instantiated, so bound with its device exec
 * and, unless bx_no_second, its bare and full execs. */
static struct bx *bx_bound(bool strict)
{
	struct bx *b = bx_open(strict);
	bx_capture(b, CU_GRAPH_NODE_TYPE_KERNEL);
	ck_assert_int_eq(toggle_graph_instantiate(b->f->agent, b->graph, &b->exec), 0);
	return b;
}

static void bx_set(struct bx *b, int64_t step, uint32_t m)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	for (int h = 0; h < BL; h++)
		if (m >> h & 1)
			ck_assert_int_eq(toggle_set_add(&s, (struct toggle_hook){0, (uint16_t)h}), 0);
	ck_assert_int_eq(toggle_set_enabled(b->f->agent, &s), 0);
	ck_assert_int_eq(toggle_step_begin(b->f->agent, step, NULL), 0);
}

/* What one launch with set m must log, into out; returns its length. */
static size_t expect_of(uint32_t m, int *out)
{
	size_t n = 0;
	for (int l = 0; l < BL; l++) {
		out[n++] = 2 * l;
		if (m >> l & 1)
			out[n++] = -1 - l;
		out[n++] = 2 * l + 1;
	}
	out[n++] = 2 * BL;
	return n;
}

/* Check the log from *at on holds exactly one launch with set m; move *at past it. */
static void check_launch(size_t *at, uint32_t m, unsigned k)
{
	int want[3 * BL + 1];
	size_t n = expect_of(m, want);
	ck_assert_msg(*at + n <= nklog, "launch %u: the log ends after %zu of %zu kernels", k,
		      nklog - *at, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(klog[*at + i] == want[i],
			      "launch %u (set 0x%02x): kernel %zu is %d, must be %d", k, m, i,
			      klog[*at + i], want[i]);
	*at += n;
}

static void launch(struct bx *b, int si)
{
	ck_assert_int_eq(toggle_graph_launch(b->f->agent, b->graph, b->exec, b->f->s[si]), 0);
}

static struct toggle_graph_status bstatus(struct bx *b)
{
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(b->f->agent, b->graph, &gs), 0);
	return gs;
}

/* Check the whole log holds exactly n launches, each with set m. */
static void check_log_all(uint32_t m, unsigned n)
{
	size_t at = 0;
	for (unsigned k = 0; k < n; k++)
		check_launch(&at, m, k);
	ck_assert_uint_eq(at, nklog);
}

/* Check the whole log holds exactly these n launches, in this order. */
static void check_log(const uint32_t *sets, unsigned n)
{
	size_t at = 0;
	for (unsigned k = 0; k < n; k++)
		check_launch(&at, sets[k], k);
	ck_assert_uint_eq(at, nklog);
}

/*
 * Rounds of steps through sets, each odd entry's step launched twice (a
 * replay at an unchanged set as well as switches); rotate: the launches go
 * round the streams, else all on stream 0.  Each launch's set goes to
 * expect; returns how many launches.
 */
static unsigned launch_rounds(struct bx *b, const uint32_t *sets, unsigned nsets, unsigned rounds,
			      bool rotate, uint32_t *expect)
{
	unsigned n = 0;
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned k = 0; k < nsets; k++) {
			bx_set(b, (int64_t)(r * nsets + k), sets[k]);
			for (unsigned rep = 0; rep < 1 + (k % 2); rep++) {
				launch(b, rotate ? (int)((n + r) % NS) : 0);
				expect[n++] = sets[k];
			}
		}
	}
	return n;
}

/* A launch whose planner's device-side calls all fail: the launch is tainted
 * (a strict agent blocks the graph at the next step_begin). */
static void launch_tainted(struct bx *b, int si)
{
	struct toggle_sim *sim = b->f->sim;
	toggle_sim_fail(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 0, 1u << 30, CUDA_ERROR_INVALID_VALUE);
	launch(b, si);
	toggle_sim_synchronize(sim);
	toggle_sim_fail(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED, 0, 0, CUDA_SUCCESS);
}

/*
 * A strict agent's graph blocked, then bound again: a tainted launch at a
 * mixed step; at the next step (set m) step_begin reads the report and the
 * launch on stream si is refused, nothing of it run; a new bind clears the
 * block and the same launch runs again, exactly set m.  Returns the graph's
 * status while it was blocked, for the caller to check which exec ran.
 */
static struct toggle_graph_status block_then_rebind(struct bx *b, uint32_t m, int si)
{
	bx_set(b, 0, 0x0f);
	launch_tainted(b, 0);
	bx_set(b, 1, m); /* step_begin reads the report: blocked */
	size_t before = nklog;
	ck_assert_int_lt(toggle_graph_launch(b->f->agent, b->graph, b->exec, b->f->s[si]), 0);
	toggle_sim_synchronize(b->f->sim);
	ck_assert_uint_eq(nklog, before); /* nothing ran */
	struct toggle_graph_status blocked = bstatus(b);
	ck_assert_int_eq(toggle_graph_bind(b->f->agent, b->graph, b->exec), 0);
	launch(b, si);
	toggle_sim_synchronize(b->f->sim);
	size_t at = before;
	check_launch(&at, m, 1);
	return blocked;
}

/* ---- the build and all-off steps ---------------------------------------------- */

/* All-off steps run the assembled exec: no producer, every other kernel once, in order. */
START_TEST(all_off_runs_no_producer)
{
	struct bx *b = bx_bound(false);
	struct toggle_graph_status gs = bstatus(b);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_DEVICE);
	ck_assert(gs.bare_exec);
	ck_assert(gs.full_exec);
	ck_assert_uint_eq(toggle_sim_calls(b->f->sim, TOGGLE_SIM_OP_GRAPH_CLONE), 0);
	/* The device exec, the bare and the full one; the assembled graphs are gone. */
	ck_assert_uint_eq(toggle_sim_exec_count(b->f->sim), 3);
	ck_assert_uint_eq(toggle_sim_graph_count(b->f->sim), 1);
	/* Uploaded once each, at the bind. */
	ck_assert_uint_eq(toggle_sim_calls(b->f->sim, TOGGLE_SIM_OP_GRAPH_UPLOAD), 3);

	bx_set(b, 0, 0);
	uint64_t calls = toggle_sim_calls(b->f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED);
	for (int k = 0; k < 5; k++)
		launch(b, 0);
	toggle_sim_synchronize(b->f->sim);
	check_log_all(0, 5);
	ck_assert(bstatus(b).bare_running);
	ck_assert_uint_eq(bstatus(b).bare_replays, 5);
	/* No planner ran: no device-side call, no upload more. */
	ck_assert_uint_eq(toggle_sim_calls(b->f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), calls);
	ck_assert_uint_eq(toggle_sim_calls(b->f->sim, TOGGLE_SIM_OP_GRAPH_UPLOAD), 3);
	bx_close(b);
}
END_TEST

/* A step with one producer on runs the device exec: exactly that producer. */
START_TEST(one_producer_on)
{
	struct bx *b = bx_bound(false);
	bx_set(b, 0, 1u << 3);
	launch(b, 0);
	launch(b, 0);
	toggle_sim_synchronize(b->f->sim);
	ck_assert(!bstatus(b).bare_running);
	size_t at = 0;
	check_launch(&at, 1u << 3, 0);
	check_launch(&at, 1u << 3, 1);
	ck_assert_uint_eq(at, nklog);
	bx_close(b);
}
END_TEST

/*
 * Issue 31 item 1: the planner calls set-enabled only for producers whose
 * state changes, not for every producer at every launch (simulator's count
 * of device-side calls).
 */
START_TEST(planner_calls_only_changed)
{
	struct bx *b = bx_bound(false);
	struct toggle_sim *sim = b->f->sim;
	bx_set(b, 0, 0x0f);
	launch(b, 0); /* the first launch after a bind sets every producer */
	toggle_sim_synchronize(sim);
	uint64_t c0 = toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED);
	ck_assert_uint_eq(c0, BL);
	for (int k = 0; k < 4; k++)
		launch(b, 0);
	toggle_sim_synchronize(sim);
	ck_assert_uint_eq(toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), c0);
	bx_set(b, 1, 0x1e); /* 0 off, 4 on: two changes */
	launch(b, 0);
	launch(b, 0);
	toggle_sim_synchronize(sim);
	ck_assert_uint_eq(toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), c0 + 2);
	size_t at = 0;
	for (unsigned k = 0; k < 5; k++)
		check_launch(&at, 0x0f, k);
	check_launch(&at, 0x1e, 5);
	check_launch(&at, 0x1e, 6);
	ck_assert_uint_eq(at, nklog);
	bx_close(b);
}
END_TEST

/*
 * All-off / on / all-off ..., every launch exact: switching back from the
 * bare exec, the planner gets the mask of that launch.  _i: 0 synchronous,
 * 1..3 deferred with a seed (pipelined launches, the host ahead of the
 * device) and launches rotating over three streams: the first launch after
 * a switch between the two execs on another stream must wait for the last
 * (the driver serialises launches of one exec only).
 */
START_TEST(alternating_exact)
{
	static const uint32_t sets[] = {0, 1u << 3, 0, 0xff, 0, 0, 0x81, 0x81, 0, 0x3c, 0x01, 0};
	enum { NSETS = sizeof(sets) / sizeof(sets[0]), ROUNDS = 6 };
	struct bx *b = bx_bound(false);
	if (_i)
		toggle_sim_set_deferred(b->f->sim, true, 0x5eed0000u + (uint64_t)_i);
	uint32_t expect[NSETS * ROUNDS * 2];
	unsigned n = launch_rounds(b, sets, NSETS, ROUNDS, _i != 0, expect);
	toggle_sim_synchronize(b->f->sim);
	check_log(expect, n);
	ck_assert_uint_gt(stats(b->f).bare_switches, 0);
	bx_close(b);
}
END_TEST

/*
 * A producer between a fork and a join: its dependencies become its
 * dependents' (bypassed, never dropped).  The simulator runs an assembled
 * graph's ready nodes latest first, so a missing edge shows as an order.
 */
START_TEST(fork_join_edges_bypassed)
{
	struct bx *b = bx_open(false);
	struct toggle_agent *a = b->f->agent;
	CUstream s0 = b->f->s[0], s1 = b->f->s[1];
	CUevent fork, join;
	ck_assert_int_eq(toggle_sim_event_create(b->f->sim, &fork), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_event_create(b->f->sim, &join), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_begin(a), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(s0), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(a, s0), 0);
	compute(b, s0, 0);                        /* A */
	ck_assert_int_eq(toggle_sim_event_record(fork, s0), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_wait_event(s1, fork, 0), CUDA_SUCCESS);
	producer(b, s1, 0);                       /* P after A */
	compute(b, s1, 1);                        /* B after P */
	compute(b, s0, 2);                        /* C after A */
	ck_assert_int_eq(toggle_sim_event_record(join, s1), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_wait_event(s0, join, 0), CUDA_SUCCESS);
	compute(b, s0, 3);                        /* D after B and C */
	ck_assert_int_eq(toggle_sim_stream_end_capture(s0, &b->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(a), 0);
	ck_assert_int_eq(toggle_graph_instantiate(a, b->graph, &b->exec), 0);
	ck_assert(bstatus(b).bare_exec);
	bx_set(b, 0, 0);
	launch(b, 0);
	toggle_sim_synchronize(b->f->sim);
	ck_assert(bstatus(b).bare_running);
	/* Four computes once each, no producer; A first (B and C wait for it
	 * through the bypassed producer and directly), D last. */
	ck_assert_uint_eq(nklog, 4);
	int pos[4] = {-1, -1, -1, -1};
	for (size_t i = 0; i < nklog; i++) {
		ck_assert_int_ge(klog[i], 0);
		ck_assert_int_lt(klog[i], 4);
		ck_assert_int_eq(pos[klog[i]], -1);
		pos[klog[i]] = (int)i;
	}
	ck_assert_int_eq(pos[0], 0);
	ck_assert_int_eq(pos[3], 3);
	ck_assert_uint_eq(toggle_sim_event_destroy(fork), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_event_destroy(join), CUDA_SUCCESS);
	bx_close(b);
}
END_TEST

/* toggle_graph_set_bare on a device-mode graph: off destroys it (all off runs
 * the device exec and its planner), on assembles it again. */
START_TEST(set_bare_off_and_on)
{
	struct bx *b = bx_bound(false);
	struct toggle_sim *sim = b->f->sim;
	bx_set(b, 0, 0);
	launch(b, 0);
	ck_assert_int_eq(toggle_graph_set_bare(b->f->agent, b->graph, false), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(sim), 1); /* the full exec goes too */
	uint64_t c0 = toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED);
	launch(b, 1);
	toggle_sim_synchronize(sim);
	ck_assert(!bstatus(b).bare_running);
	/* The device exec's first launch: its planner disables every producer. */
	ck_assert_uint_eq(toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), c0 + BL);
	ck_assert_int_eq(toggle_graph_set_bare(b->f->agent, b->graph, true), 0);
	ck_assert_uint_eq(toggle_sim_exec_count(sim), 3);
	launch(b, 0);
	toggle_sim_synchronize(sim);
	ck_assert(bstatus(b).bare_running);
	ck_assert_uint_eq(toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), c0 + BL);
	check_log_all(0, 3);
	bx_close(b);
}
END_TEST

/* ---- no bare exec: the device path as before ------------------------------------ */

/* A node no getter reads back (a memory allocation node): no bare exec, never a wrong one. */
START_TEST(uncopyable_node_no_bare_exec)
{
	struct bx *b = bx_open(false);
	bx_capture(b, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	ck_assert_int_eq(toggle_graph_instantiate(b->f->agent, b->graph, &b->exec), 0);
	struct toggle_graph_status gs = bstatus(b);
	ck_assert_int_eq(gs.mode, TOGGLE_MODE_DEVICE);
	ck_assert(!gs.bare_exec && !gs.full_exec);
	struct toggle_stats st = stats(b->f);
	ck_assert_uint_eq(st.bare_build_failures, 1);
	ck_assert_uint_eq(st.bare_builds, 0);
	ck_assert_uint_eq(st.full_build_failures, 1);
	ck_assert_uint_eq(st.full_builds, 0);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(b->f->agent), "cannot be copied"));
	/* Nothing half-built left: the captured graph and the device exec only. */
	ck_assert_uint_eq(toggle_sim_graph_count(b->f->sim), 1);
	ck_assert_uint_eq(toggle_sim_exec_count(b->f->sim), 1);
	uint32_t sets[] = {0, 1u << 2, 0xff, 0};
	size_t at = 0;
	for (unsigned k = 0; k < 4; k++) {
		bx_set(b, k, sets[k]);
		launch(b, 0);
		toggle_sim_synchronize(b->f->sim);
		check_launch(&at, sets[k], k);
		ck_assert(!bstatus(b).bare_running);
	}
	bx_close(b);
}
END_TEST

/*
 * Errors injected in the assembly's calls: no bare (or, full: no full) exec,
 * nothing half-built (no graph or exec of the agent's left), the device
 * exec runs those steps exactly, the other second exec is built and runs
 * its steps; the next bind, without the error, builds it.  The bare exec is
 * assembled first (BC + 2 nodes: BC computes, a memset, a memcpy), then the
 * full one (BC + BL + 2).
 */
static const struct {
	enum toggle_sim_op op;
	uint64_t skip;
	bool full;
} faults[] = {
	{TOGGLE_SIM_OP_GRAPH_CREATE, 0, false},
	{TOGGLE_SIM_OP_ADD_NODE, 0, false},      /* the first copy */
	{TOGGLE_SIM_OP_ADD_NODE, 5, false},      /* one in the middle (after the memset) */
	{TOGGLE_SIM_OP_ADD_NODE, BC + 1, false}, /* the last */
	{TOGGLE_SIM_OP_NODE_GET_PARAMS, 3, false},
	{TOGGLE_SIM_OP_ADD_DEPENDENCIES, 0, false},
	{TOGGLE_SIM_OP_INSTANTIATE, 1, false},   /* the device exec's is the first */
	{TOGGLE_SIM_OP_GRAPH_UPLOAD, 1, false},  /* the device exec's is the first */
	{TOGGLE_SIM_OP_GRAPH_CREATE, 1, true},
	{TOGGLE_SIM_OP_ADD_NODE, BC + 2, true},  /* the full exec's first copy */
	{TOGGLE_SIM_OP_ADD_NODE, BC + 2 + 1, true}, /* its first producer (a plain copy) */
	{TOGGLE_SIM_OP_ADD_NODE, 2 * BC + BL + 3, true}, /* its last */
	{TOGGLE_SIM_OP_ADD_DEPENDENCIES, 1, true},
	{TOGGLE_SIM_OP_INSTANTIATE, 2, true},
	{TOGGLE_SIM_OP_GRAPH_UPLOAD, 2, true},
};

START_TEST(faults_leave_nothing)
{
	struct bx *b = bx_open(false);
	struct toggle_sim *sim = b->f->sim;
	bx_capture(b, CU_GRAPH_NODE_TYPE_KERNEL);
	toggle_sim_reset_counters(sim);
	toggle_sim_fail(sim, faults[_i].op, faults[_i].skip, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_graph_instantiate(b->f->agent, b->graph, &b->exec), 0);
	ck_assert_msg(toggle_sim_calls(sim, faults[_i].op) > faults[_i].skip,
		      "fault %d: the call was never made", _i);
	toggle_sim_fail(sim, faults[_i].op, 0, 0, CUDA_SUCCESS);
	bool full = faults[_i].full;
	ck_assert(bstatus(b).bare_exec == full);
	ck_assert(bstatus(b).full_exec == !full);
	struct toggle_stats st = stats(b->f);
	ck_assert_uint_eq(st.bare_build_failures, full ? 0 : 1);
	ck_assert_uint_eq(st.full_build_failures, full ? 1 : 0);
	ck_assert_uint_eq(toggle_sim_graph_count(sim), 1);
	ck_assert_uint_eq(toggle_sim_exec_count(sim), 2);
	size_t at = 0;
	struct toggle_device_counters dc;
	bx_set(b, 0, full ? 0xff : 0);
	launch(b, 0); /* the device exec: its planner runs */
	toggle_sim_synchronize(sim);
	ck_assert_int_eq(toggle_graph_device_counters(b->f->agent, b->graph, &dc), 0);
	ck_assert_uint_eq(dc.planner_runs, 1);
	bx_set(b, 1, 1u << 5);
	launch(b, 0);
	bx_set(b, 2, full ? 0 : 0xff);
	launch(b, 0); /* the other second exec: no planner */
	toggle_sim_synchronize(sim);
	ck_assert_int_eq(toggle_graph_device_counters(b->f->agent, b->graph, &dc), 0);
	ck_assert_uint_eq(dc.planner_runs, 2);
	check_launch(&at, full ? 0xff : 0, 0);
	check_launch(&at, 1u << 5, 1);
	check_launch(&at, full ? 0 : 0xff, 2);
	/* A rebind builds it. */
	ck_assert_int_eq(toggle_graph_bind(b->f->agent, b->graph, b->exec), 0);
	ck_assert(bstatus(b).bare_exec && bstatus(b).full_exec);
	ck_assert_uint_eq(toggle_sim_exec_count(sim), 3);
	bx_set(b, 3, full ? 0xff : 0);
	launch(b, 0);
	toggle_sim_synchronize(sim);
	check_launch(&at, full ? 0xff : 0, 3);
	ck_assert(full ? bstatus(b).full_running : bstatus(b).bare_running);
	ck_assert_int_eq(toggle_graph_device_counters(b->f->agent, b->graph, &dc), 0);
	ck_assert_uint_eq(dc.planner_runs, 2);
	ck_assert_uint_eq(at, nklog);
	bx_close(b);
}
END_TEST

/* ---- lifetime (issue 28): the bare exec dies with its record --------------------- */

/*
 * _i 0: the graph destroyed, its exec alive: the record stays for that exec
 * (docs/libtoggle.md, "Lifetime") and all-off steps still run its bare exec;
 * then the exec destroyed too: both go.  1: the exec destroyed: its bare
 * exec goes with it.  2: toggle_graph_forget: the bare exec goes.
 */
START_TEST(lifetime_drops_bare_exec)
{
	struct bx *b = bx_bound(false);
	struct toggle_sim *sim = b->f->sim;
	bx_set(b, 0, 0);
	launch(b, 0);
	toggle_sim_synchronize(sim);
	ck_assert_uint_eq(toggle_sim_exec_count(sim), 3);
	size_t at = 0;
	check_launch(&at, 0, 0);
	if (_i == 0) {
		CUgraph dead = b->graph;
		ck_assert_int_eq(toggle_sim_graph_destroy(b->graph), CUDA_SUCCESS);
		b->graph = NULL;
		bx_set(b, 1, 0);
		ck_assert_int_eq(toggle_graph_launch(b->f->agent, dead, b->exec, b->f->s[0]), 0);
		toggle_sim_synchronize(sim);
		check_launch(&at, 0, 1);
		ck_assert_uint_eq(toggle_sim_exec_count(sim), 3);
		ck_assert_int_eq(toggle_sim_exec_destroy(b->exec), CUDA_SUCCESS);
		b->exec = NULL;
	} else if (_i == 1) {
		ck_assert_int_eq(toggle_sim_exec_destroy(b->exec), CUDA_SUCCESS);
		b->exec = NULL;
	} else {
		ck_assert_int_eq(toggle_graph_forget(b->f->agent, b->graph), 0);
	}
	toggle_sim_synchronize(sim);
	(void)toggle_apply_all(b->f->agent); /* a slow path: what died is swept */
	unsigned left = b->exec ? 1 : 0;     /* the application's exec, never the bare one */
	ck_assert_uint_eq(toggle_sim_exec_count(sim), left);
	ck_assert_uint_eq(at, nklog);
	bx_close(b);
}
END_TEST

/* A strict agent refuses a blocked graph's launches, all-off ones (the bare exec's) too. */
START_TEST(strict_blocked_refuses_bare_too)
{
	struct bx *b = bx_bound(true);
	ck_assert(!block_then_rebind(b, 0, 0).bare_running);
	/* The new bind cleared it: all-off runs the bare exec again. */
	ck_assert(bstatus(b).bare_running);
	bx_close(b);
}
END_TEST

/*
 * Tainted launches are still reported with their step after bare and full
 * launches: the planner numbers its own runs, which their launches are not.
 */
START_TEST(taint_step_after_bare_launches)
{
	struct bx *b = bx_bound(false);
	bx_set(b, 0, 0);
	for (int k = 0; k < 3; k++)
		launch(b, 0); /* bare */
	bx_set(b, 1, 0x0f);
	launch(b, 0); /* clean */
	bx_set(b, 2, 0xff);
	launch(b, 0); /* full */
	launch(b, 0);
	bx_set(b, 3, 0);
	launch(b, 0); /* bare */
	bx_set(b, 4, 0xf0);
	launch_tainted(b, 0); /* in step 4 */
	bx_set(b, 5, 0xff);
	launch(b, 0); /* full: a planner-less launch between the taint and its report */
	bx_set(b, 6, 0xf0);
	struct toggle_taint t;
	toggle_taint_get(b->f->agent, &t);
	ck_assert_uint_eq(t.launches, 1);
	ck_assert_int_eq(t.last_step, 4);
	bx_close(b);
}
END_TEST

/* ---- the full exec: all-on steps (issue 31) --------------------------------------- */

/* Planner runs so far: the planner counts its own runs in its descriptor. */
static uint64_t planner_runs(struct bx *b)
{
	toggle_sim_synchronize(b->f->sim);
	struct toggle_device_counters dc;
	ck_assert_int_eq(toggle_graph_device_counters(b->f->agent, b->graph, &dc), 0);
	return dc.planner_runs;
}

/* All-on steps run the full exec: every producer once, in order, and no planner. */
START_TEST(full_all_on_runs_no_planner)
{
	struct bx *b = bx_bound(false);
	ck_assert(bstatus(b).full_exec);
	struct toggle_stats st = stats(b->f);
	ck_assert_uint_eq(st.full_builds, 1);
	bx_set(b, 0, 0xff);
	for (int k = 0; k < 5; k++)
		launch(b, k % NS);
	ck_assert_uint_eq(planner_runs(b), 0);
	ck_assert_uint_eq(toggle_sim_calls(b->f->sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED), 0);
	check_log_all(0xff, 5);
	ck_assert(bstatus(b).full_running);
	ck_assert_uint_eq(bstatus(b).full_replays, 5);
	ck_assert_uint_eq(bstatus(b).bare_replays, 0);
	bx_close(b);
}
END_TEST

/*
 * Which exec ran at each step (all on: full, no planner; all off: bare, no
 * producer; else the device exec, one planner run), every launch exact, and
 * the planner's record of node states what the device exec last left: its
 * first launch after a bind sets every producer, later ones only those
 * whose state differs from the device exec's last launch, whatever ran in
 * between.
 */
START_TEST(full_steps_planner_state)
{
	static const struct {
		uint32_t set;
		int runs;     /* planner runs after the step's launch */
		int calls;    /* device-side set-enabled calls after it */
	} steps[] = {
		{0xff, 0, 0}, {0, 0, 0},
		{0x0f, 1, BL},     /* the first device launch: every producer */
		{0xff, 1, BL},
		{0x0f, 2, BL},     /* as it left them */
		{0xff, 2, BL}, {0, 2, BL},
		{0x81, 3, BL + 4}, /* 0x0f -> 0x81: hooks 1, 2, 3, 7 */
		{0xff, 3, BL + 4},
		{0x7f, 4, BL + 11}, /* 0x81 -> 0x7f: all but 0 */
	};
	struct bx *b = bx_bound(false);
	struct toggle_sim *sim = b->f->sim;
	size_t at = 0;
	for (unsigned k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
		bx_set(b, k, steps[k].set);
		launch(b, (int)(k % NS));
		ck_assert_msg(planner_runs(b) == (uint64_t)steps[k].runs,
			      "step %u (set 0x%02x): %llu planner runs, want %d", k, steps[k].set,
			      (unsigned long long)planner_runs(b), steps[k].runs);
		ck_assert_msg(toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED) ==
				      (uint64_t)steps[k].calls,
			      "step %u: %llu device calls, want %d", k,
			      (unsigned long long)toggle_sim_calls(sim, TOGGLE_SIM_OP_DEVICE_SET_ENABLED),
			      steps[k].calls);
		check_launch(&at, steps[k].set, k);
		ck_assert(bstatus(b).full_running == (steps[k].set == 0xff));
		ck_assert(bstatus(b).bare_running == (steps[k].set == 0));
	}
	ck_assert_uint_eq(at, nklog);
	ck_assert_uint_gt(stats(b->f).full_switches, 0);
	bx_close(b);
}
END_TEST

/*
 * All on, all off and mixed steps, launches rotating over three streams,
 * pipelined (deferred with a seed; 0: synchronous): the first launch after
 * a switch between any two of the three execs on another stream waits for
 * the last; every launch's producers exactly its step's set.
 */
START_TEST(full_streams_exact)
{
	static const uint32_t sets[] = {0xff, 0x0f, 0xff, 0, 0xff, 0xff, 0x81, 0xff, 0, 0x01, 0xff, 0x7f};
	enum { NSETS = sizeof(sets) / sizeof(sets[0]), ROUNDS = 6 };
	struct bx *b = bx_bound(false);
	if (_i)
		toggle_sim_set_deferred(b->f->sim, true, 0xf0110000u + (uint64_t)_i);
	uint32_t expect[NSETS * ROUNDS * 2];
	unsigned n = launch_rounds(b, sets, NSETS, ROUNDS, true, expect);
	toggle_sim_synchronize(b->f->sim);
	check_log(expect, n);
	/* Only mixed steps run the device exec and its planner. */
	unsigned mixed = 0;
	for (unsigned k = 0; k < n; k++)
		mixed += expect[k] != 0 && expect[k] != 0xff;
	ck_assert_uint_eq(planner_runs(b), mixed);
	bx_close(b);
}
END_TEST

/*
 * Random steps over all-on, all-off and mixed sets, each launch through
 * toggle_graph_launch, toggle_graph_prepare + the caller's own launch, or
 * a prepare left without its launch, on random streams, pipelined (seeded
 * deferred order, _i % 8; _i >= 8: the device exec alone): every launch
 * runs exactly its step's set.  Failed before two fixes (replay.c): a
 * bare or full launch cleared an unlaunched prepare's 'unordered' mark, so
 * the device exec's next launch skipped its wait for that prepare's mask
 * words; and a prepare at an unchanged set on another stream took the fast
 * path, moving the stream the next mask write waits for to one that holds
 * no launch (the device exec alone failed too: launches read later words).
 */
START_TEST(full_random_prepares_exact)
{
	static const uint32_t sets[] = {0, 0xff, 0x0f, 0xf0, 0x81};
	bx_no_second = _i >= 8; /* the device exec alone */
	struct bx *b = bx_bound(false);
	bx_no_second = false;
	struct toggle_agent *a = b->f->agent;
	uint64_t rng = 0xfa11u + (uint64_t)(_i % 8) * 7919u;
	toggle_sim_set_deferred(b->f->sim, true, rng);
	enum { STEPS = 300 };
	static uint32_t expect[STEPS * 4];
	unsigned n = 0;
	for (int64_t st = 0; st < STEPS; st++) {
		uint32_t m = sets[tu_rng_next(&rng) % 5];
		bx_set(b, st, m);
		for (int k = 1 + (int)(tu_rng_next(&rng) % 3); k > 0; k--) {
			CUstream s = b->f->s[tu_rng_next(&rng) % NS];
			switch (tu_rng_next(&rng) % 3) {
			case 0:
				ck_assert_int_eq(toggle_graph_launch(a, b->graph, b->exec, s), 0);
				break;
			case 1:
				ck_assert_int_eq(toggle_graph_prepare(a, b->graph, b->exec, s), 0);
				ck_assert_int_eq(toggle_sim_graph_launch(b->exec, s), CUDA_SUCCESS);
				break;
			default:
				ck_assert_int_eq(toggle_graph_prepare(a, b->graph, b->exec, s), 0);
				continue; /* not launched */
			}
			expect[n++] = m;
		}
		if (st % 50 == 49)
			toggle_sim_synchronize(b->f->sim);
	}
	toggle_sim_synchronize(b->f->sim);
	check_log(expect, n);
	bx_close(b);
}
END_TEST

/* A strict agent refuses a blocked graph's all-on launches (the full exec's) too. */
START_TEST(full_strict_blocked_refused)
{
	struct bx *b = bx_bound(true);
	ck_assert(!block_then_rebind(b, 0xff, 1).full_running);
	ck_assert(bstatus(b).full_running);
	ck_assert_uint_eq(planner_runs(b), 1);
	bx_close(b);
}
END_TEST

/* toggle_graph_prepare at an all-on step: the caller launches the device
 * exec itself, which must hold the set; launches after it stay exact. */
START_TEST(full_prepare_runs_device_exec)
{
	struct bx *b = bx_bound(false);
	struct toggle_agent *a = b->f->agent;
	bx_set(b, 0, 0xff);
	launch(b, 0); /* full */
	ck_assert_int_eq(toggle_graph_prepare(a, b->graph, b->exec, b->f->s[1]), 0);
	ck_assert_int_eq(toggle_sim_graph_launch(b->exec, b->f->s[1]), CUDA_SUCCESS);
	ck_assert_uint_eq(planner_runs(b), 1);
	launch(b, 2); /* either exec: the prepare left the device exec at the set */
	uint64_t runs = planner_runs(b);
	bx_set(b, 1, 0x03);
	launch(b, 0);
	bx_set(b, 2, 0xff);
	launch(b, 1); /* full again */
	ck_assert_uint_eq(planner_runs(b), runs + 1);
	size_t at = 0;
	check_launch(&at, 0xff, 0);
	check_launch(&at, 0xff, 1);
	check_launch(&at, 0xff, 2);
	check_launch(&at, 0x03, 3);
	check_launch(&at, 0xff, 4);
	ck_assert_uint_eq(at, nklog);
	ck_assert(bstatus(b).full_running);
	bx_close(b);
}
END_TEST

/* A producer launched with a launch attribute of the caller's: the driver
 * copies none from a device-updatable node, so no full exec (never one that
 * loses it); the bare exec is built; all-on steps run the device exec. */
START_TEST(full_none_with_producer_attributes)
{
	struct bx *b = bx_open(false);
	attr_hook = 3;
	bx_capture(b, CU_GRAPH_NODE_TYPE_KERNEL);
	ck_assert_int_eq(toggle_graph_instantiate(b->f->agent, b->graph, &b->exec), 0);
	struct toggle_graph_status gs = bstatus(b);
	ck_assert(gs.bare_exec && !gs.full_exec);
	struct toggle_stats st = stats(b->f);
	ck_assert_uint_eq(st.full_build_failures, 1);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(b->f->agent), "launch attributes"));
	ck_assert_uint_eq(toggle_sim_exec_count(b->f->sim), 2);
	bx_set(b, 0, 0xff);
	launch(b, 0);
	launch(b, 1);
	ck_assert_uint_eq(planner_runs(b), 2);
	size_t at = 0;
	check_launch(&at, 0xff, 0);
	check_launch(&at, 0xff, 1);
	ck_assert_uint_eq(at, nklog);
	bx_close(b);
}
END_TEST

/* The status lane (what toggled and `togglectl graphs` show): FULL while the
 * graph has a full exec, FULL_RUNNING while its launches run it. */
START_TEST(full_status_lane_flags)
{
	struct bx *b = bx_open(false);
	struct toggle_agent *a = b->f->agent;
	char err[128];
	/* White-box: the region a daemon connection would have made. */
	ck_assert_int_eq(toggle_shm_create(&a->shm, err, sizeof(err)), 0);
	a->status_buf = calloc(1, sizeof(*a->status_buf));
	ck_assert_ptr_nonnull(a->status_buf);
	bx_capture(b, CU_GRAPH_NODE_TYPE_KERNEL);
	ck_assert_int_eq(toggle_graph_instantiate(a, b->graph, &b->exec), 0);
	const uint64_t base = TOGGLE_SHM_GRAPH_BOUND | TOGGLE_SHM_GRAPH_DEVICE |
			      TOGGLE_SHM_GRAPH_BARE | TOGGLE_SHM_GRAPH_FULL;
	struct toggle_shm_status st;
	bx_set(b, 0, 0xff);
	launch(b, 0);
	bx_set(b, 1, 0xff); /* publishes */
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.n_graphs, 1);
	ck_assert_uint_eq(st.graphs[0].flags, base | TOGGLE_SHM_GRAPH_FULL_RUNNING);
	bx_set(b, 2, 0x0f);
	launch(b, 0);
	bx_set(b, 3, 0x0f);
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.graphs[0].flags, base);
	bx_set(b, 4, 0);
	launch(b, 0);
	bx_set(b, 5, 0);
	ck_assert_int_eq(toggle_shm_status_read(a->shm.st, &st), 0);
	ck_assert_uint_eq(st.graphs[0].flags, base | TOGGLE_SHM_GRAPH_BARE_RUNNING);
	/* Bits of their own. */
	ck_assert_uint_eq((TOGGLE_SHM_GRAPH_FULL | TOGGLE_SHM_GRAPH_FULL_RUNNING) &
				  (TOGGLE_SHM_GRAPH_BOUND | TOGGLE_SHM_GRAPH_STALE |
				   TOGGLE_SHM_GRAPH_DEVICE | TOGGLE_SHM_GRAPH_FALLBACK |
				   TOGGLE_SHM_GRAPH_TAINTED | TOGGLE_SHM_GRAPH_BLOCKED |
				   TOGGLE_SHM_GRAPH_BARE | TOGGLE_SHM_GRAPH_BARE_RUNNING),
			  0);
	ck_assert_uint_ne(TOGGLE_SHM_GRAPH_FULL, TOGGLE_SHM_GRAPH_FULL_RUNNING);
	bx_close(b);
}
END_TEST

/* ---- the simulator's model of the calls the assembly uses ------------------------- */

START_TEST(sim_node_getters_and_adds)
{
	struct bx *b = bx_open(false);
	struct toggle_sim *sim = b->f->sim;
	CUstream s = b->f->s[0];
	CUgraph g = NULL, n = NULL;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(s), CUDA_SUCCESS);
	compute(b, s, 7);
	ck_assert_int_eq(toggle_sim_memset(s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_capture_node(s, CU_GRAPH_NODE_TYPE_KERNEL), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_stream_end_capture(s, &g), CUDA_SUCCESS);
	CUgraphNode v[2];
	size_t nv = 2;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(g, v, &nv), CUDA_SUCCESS);
	ck_assert_uint_eq(nv, 2);
	CUDA_KERNEL_NODE_PARAMS kp;
	CUDA_MEMSET_NODE_PARAMS mp;
	ck_assert_int_eq(toggle_sim_graph_kernel_node_get_params(v[1], &kp), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_memset_node_get_params(v[0], &mp), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_kernel_node_get_params(v[0], &kp), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_memset_node_get_params(v[1], &mp), CUDA_SUCCESS);
	/* Adding to a captured graph is outside the model; to a created one works. */
	CUgraphNode c = NULL, e = NULL;
	ck_assert_int_eq(toggle_sim_graph_add_kernel_node(&c, g, NULL, 0, &kp), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_graph_create(sim, &n, 1), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_create(sim, &n, 0), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_add_empty_node(&e, n, NULL, 0), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_add_kernel_node(&c, n, &e, 1, &kp), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_add_kernel_node(&c, n, v, 1, &kp), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_kernel_node_copy_attributes(c, v[0]), CUDA_SUCCESS);
	CUgraphExec x;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&x, n), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_add_empty_node(&e, n, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_graph_launch(x, s), CUDA_SUCCESS);
	toggle_sim_synchronize(sim);
	ck_assert_uint_eq(nklog, 1);
	ck_assert_int_eq(klog[0], 7); /* the copy ran the same kernel with the same argument */
	ck_assert_int_eq(toggle_sim_exec_destroy(x), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(n), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	bx_close(b);
}
END_TEST

static Suite *device_bare_suite(void)
{
	Suite *s = suite_create("device_bare");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, all_off_runs_no_producer);
	tcase_add_test(tc, one_producer_on);
	tcase_add_test(tc, planner_calls_only_changed);
	tcase_add_loop_test(tc, alternating_exact, 0, 4);
	tcase_add_test(tc, fork_join_edges_bypassed);
	tcase_add_test(tc, set_bare_off_and_on);
	tcase_add_test(tc, uncopyable_node_no_bare_exec);
	tcase_add_loop_test(tc, faults_leave_nothing, 0, (int)(sizeof(faults) / sizeof(faults[0])));
	tcase_add_loop_test(tc, lifetime_drops_bare_exec, 0, 3);
	tcase_add_test(tc, strict_blocked_refuses_bare_too);
	tcase_add_test(tc, taint_step_after_bare_launches);
	tcase_add_test(tc, sim_node_getters_and_adds);
	suite_add_tcase(s, tc);
	TCase *full = tcase_create("full");
	tcase_set_timeout(full, 120);
	tcase_add_test(full, full_all_on_runs_no_planner);
	tcase_add_test(full, full_steps_planner_state);
	tcase_add_loop_test(full, full_streams_exact, 0, 4);
	tcase_add_loop_test(full, full_random_prepares_exact, 0, 12);
	tcase_add_test(full, full_strict_blocked_refused);
	tcase_add_test(full, full_prepare_runs_device_exec);
	tcase_add_test(full, full_none_with_producer_attributes);
	tcase_add_test(full, full_status_lane_flags);
	suite_add_tcase(s, full);
	return s;
}

int main(void)
{
	return tu_run_suite(device_bare_suite());
}
