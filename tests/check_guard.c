/*
 * check_guard.c - the guard fails closed and never blocks graphs it does not
 * own (issue #10), on the simulator:
 *
 *  1. a failed cuGraphUpload after a set change (device-mode agent, host
 *     fallback graph) leaves the graph out of date: the next launch uploads
 *     again and runs the current set;
 *  2. a producer launched into a capture but refused at record time makes
 *     that graph fail closed (bind and launch) until it is captured again;
 *  3. a new graph or exec that gets a dead one's handle is not blocked, and
 *     does not inherit the dead one's state, with and without the CUDA 13.1
 *     id entry points;
 *     none of which is checked on the replay of an unchanged set;
 *  4. NULL agent and NULL output pointers return TOGGLE_EINVAL (the getters
 *     report zeros, or nothing), NULL sets do not crash the set helpers.
 */
#include <stdio.h>
#include <string.h>

#include "agent_impl.h" /* white-box: count the identity calls the agent makes */
#include "fixture_catalog.h" /* the test catalog: NT x NL hooks, hook_of, set_of */
#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

struct gfx;

struct producer {
	struct gfx *f;
	int hook;
};

struct gfx {
	struct toggle_sim *sim;
	CUstream s;
	struct toggle_agent *agent;
	CUmodule mod;
	CUfunction produce;
	struct producer prod[NH];
	uint32_t ran;        /* bit per hook: producers run since the last reset */
	unsigned other_runs; /* kernels of graphs the agent does not know */
};

/* ---- kernels --------------------------------------------------------------- */

static void k_host_produce(void *arg)
{
	struct producer *p = arg;
	p->f->ran |= 1u << p->hook;
}

static void k_other(void *arg)
{
	((struct gfx *)arg)->other_runs++;
}

static void k_produce(void **p)
{
	struct gfx *f;
	int hook;
	memcpy(&f, p[0], sizeof(f));
	memcpy(&hook, p[1], sizeof(hook));
	f->ran |= 1u << hook;
}

static const struct toggle_sim_function functions[] = {
	{.name = "produce", .fn = k_produce, .n_params = 2, .param_size = {sizeof(void *), sizeof(int)}},
};
static const struct toggle_sim_image image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC, .n_functions = 1, .functions = functions};

/* ---- fixture ----------------------------------------------------------------- */

static void gfx_open(struct gfx *f, enum toggle_mode mode, int driver_version)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	if (driver_version)
		toggle_sim_set_driver_version(f->sim, driver_version);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_load(f->sim, &f->mod, &image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&f->produce, f->mod, "produce"), CUDA_SUCCESS);
	for (int h = 0; h < NH; h++)
		f->prod[h] = (struct producer){f, h};
	struct toggle_config cfg = {
		.name = "guard-test",
		.catalog = catalog,
		.mode = mode,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	ck_assert_int_eq(toggle_agent_mode(f->agent), mode);
}

static void gfx_close(struct gfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	toggle_sim_destroy(f->sim);
}

static uint32_t bits_of(const struct toggle_set *s)
{
	uint32_t b = 0;
	for (int h = 0; h < NH; h++)
		b |= toggle_set_contains(s, hook_of(h)) ? 1u << h : 0;
	return b;
}

/* Host producers (toggle_record_producer), every hook; the window stays open. */
static CUgraph capture_host(struct gfx *f)
{
	CUgraph g;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s), CUDA_SUCCESS);
	for (int h = 0; h < NH; h++) {
		ck_assert_int_eq(toggle_sim_launch_kernel(f->s, k_host_produce, &f->prod[h]),
				 CUDA_SUCCESS);
		ck_assert_int_eq(toggle_record_producer(f->agent, f->s, hook_of(h)), 0);
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s, &g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	return g;
}

/* A graph the agent never hears of: n plain kernels. */
static CUgraph capture_other(struct gfx *f, int n)
{
	CUgraph g;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s), CUDA_SUCCESS);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(toggle_sim_launch_kernel(f->s, k_other, f), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s, &g), CUDA_SUCCESS);
	return g;
}

/* Device-updatable producers (toggle_launch_producer), with or without a planner. */
static CUgraph capture_device(struct gfx *f, bool planner)
{
	CUgraph g;
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s), CUDA_SUCCESS);
	if (planner)
		ck_assert_int_eq(toggle_capture_planner(f->agent, f->s), 0);
	for (int h = 0; h < NH; h++) {
		void *fp = f;
		int hk = h;
		void *params[] = {&fp, &hk};
		CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
				    .blockDimY = 1, .blockDimZ = 1, .hStream = f->s};
		ck_assert_int_eq(toggle_launch_producer(f->agent, &c, f->produce, params, hook_of(h)), 0);
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s, &g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	return g;
}

/* Begin step `step` with set `bits` as the standing set; the gate must report it. */
static void step(struct gfx *f, int64_t s, uint32_t bits)
{
	struct toggle_set want = set_of(bits), gate;
	ck_assert_int_eq(toggle_set_enabled(f->agent, &want), 0);
	ck_assert_int_eq(toggle_step_begin(f->agent, s, &gate), 0);
	ck_assert_uint_eq(bits_of(&gate), bits);
}

static int launch(struct gfx *f, CUgraph g, CUgraphExec e)
{
	f->ran = 0;
	int rc = toggle_graph_launch(f->agent, g, e, f->s);
	toggle_sim_synchronize(f->sim);
	return rc;
}

/* ---- 1. fail open after a failed upload ------------------------------------------- */

/*
 * A device-mode agent's graph without a planner runs on the host fallback:
 * host toggles of its device-updatable producers reach launches only through
 * an upload.  When that upload fails, the launch is refused, and the next
 * launch must upload again and run the current set (it ran the previous
 * step's set).  _i: 0 the set changes at the launch, 1 toggle_apply_all
 * applies it first (as eager step_begin does), 2 the refused launch is
 * followed by a new step with the same set.
 */
START_TEST(test_failed_upload_leaves_graph_out_of_date)
{
	struct gfx f;
	gfx_open(&f, TOGGLE_MODE_DEVICE, 0);
	CUgraph g = capture_device(&f, false);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert(gs.device_fallback);

	const uint32_t s1 = 0x0f, s2 = 0xf0;
	step(&f, 0, s1);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, s1);

	step(&f, 1, s2);
	if (_i == 1)
		ck_assert_int_eq(toggle_apply_all(f.agent), 0);
	struct toggle_stats st0, st1;
	toggle_stats_get(f.agent, &st0);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD, 0, 1, CUDA_ERROR_LAUNCH_FAILED);
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	ck_assert_int_eq(launch(&f, g, e), TOGGLE_ECUDA);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	ck_assert_uint_eq(f.ran, 0);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "cuGraphUpload"));
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert_uint_eq(gs.applied_version, 0);

	if (_i == 2)
		step(&f, 2, s2);
	/* The retry uploads (no node changes: the nodes hold s2) and runs s2. */
	uint64_t uploads = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, s2);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD), uploads + 1);
	toggle_stats_get(f.agent, &st1);
	ck_assert_uint_eq(st1.uploads, st0.uploads + 1);
	ck_assert_uint_eq(st1.launches_refused, st0.launches_refused + 1);
	/* And it stays right. */
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, s2);

	ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/*
 * The audit of item 1 as a property: in lazy, eager, device (planner) and
 * device fallback mode, with launches on two streams, any one call of every
 * driver operation on the apply and launch paths is made to fail at random
 * points (before step_begin, so eager's apply meets it, or before a
 * launch).  Every launch must either run exactly the step's set or be
 * refused and run nothing, and a refusal must never leave the graph
 * looking current: the launches after it run the step's set again.
 */
static const enum toggle_sim_op fail_ops[] = {
	TOGGLE_SIM_OP_NODE_SET_ENABLED, TOGGLE_SIM_OP_GRAPH_UPLOAD, TOGGLE_SIM_OP_GRAPH_LAUNCH,
	TOGGLE_SIM_OP_BATCH_MEM_OP,     TOGGLE_SIM_OP_EVENT_RECORD, TOGGLE_SIM_OP_STREAM_WAIT_EVENT,
};
#define N_FAIL_OPS (sizeof(fail_ops) / sizeof(fail_ops[0]))

static void fail_some(struct gfx *f, uint64_t *rng)
{
	enum toggle_sim_op op = fail_ops[tu_rng_next(rng) % N_FAIL_OPS];
	toggle_sim_fail(f->sim, op, tu_rng_next(rng) % 3, 1, CUDA_ERROR_LAUNCH_FAILED);
}

static void fail_none(struct gfx *f)
{
	for (size_t i = 0; i < N_FAIL_OPS; i++)
		toggle_sim_fail(f->sim, fail_ops[i], 0, 0, CUDA_SUCCESS);
}

START_TEST(test_every_failure_leaves_graph_out_of_date)
{
	static const enum toggle_mode modes[4] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
						  TOGGLE_MODE_DEVICE, TOGGLE_MODE_DEVICE};
	struct gfx f;
	gfx_open(&f, modes[_i], 0);
	CUstream s2;
	ck_assert_int_eq(toggle_sim_stream_create(f.sim, &s2), CUDA_SUCCESS);
	CUgraph g = _i < 2 ? capture_host(&f) : capture_device(&f, _i == 2);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert(gs.bound);
	ck_assert_int_eq(gs.mode == TOGGLE_MODE_DEVICE, _i == 2);

	uint64_t rng = 0x6a7d + (uint64_t)_i, refused = 0, ran_ok = 0;
	for (int64_t st = 0; st < 600; st++) {
		uint32_t bits = (uint32_t)(tu_rng_next(&rng) & ((1u << NH) - 1));
		if (tu_rng_next(&rng) % 4 == 0)
			fail_some(&f, &rng); /* meets eager's apply at step_begin, or the launch */
		step(&f, st, bits);
		for (int k = 0; k < 3; k++) {
			if (tu_rng_next(&rng) % 4 == 0)
				fail_some(&f, &rng);
			CUstream s = tu_rng_next(&rng) % 2 ? f.s : s2;
			f.ran = 0;
			int rc = toggle_graph_launch(f.agent, g, e, s);
			toggle_sim_synchronize(f.sim);
			fail_none(&f);
			if (rc == 0) {
				ck_assert_msg(f.ran == bits, "mode %d step %lld launch %d: ran 0x%02x, set 0x%02x",
					      _i, (long long)st, k, f.ran, bits);
				ran_ok++;
			} else {
				ck_assert_int_eq(rc, TOGGLE_ECUDA);
				ck_assert_uint_eq(f.ran, 0);
				refused++;
			}
		}
	}
	ck_assert_uint_gt(refused, 20); /* the failures did reach the paths */
	ck_assert_uint_gt(ran_ok, 1200);
	if (_i == 2) {
		struct toggle_device_counters dc;
		ck_assert_int_eq(toggle_graph_device_counters(f.agent, g, &dc), 0);
		ck_assert_uint_eq(dc.device_failures, 0);
	}
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/* ---- 2. late producers ---------------------------------------------------------------- */

/*
 * How the unrecorded producer got into the capture.  _i % 4: 0 recorded
 * with the window closed, 1 hook outside the catalog, 2 a node that is not
 * a kernel (a memset recorded as a producer), 3 the window closed and no
 * producer recorded at all (the graph looked unrelated).  _i / 4: lazy, eager.
 */
START_TEST(test_late_producer_fails_closed)
{
	struct gfx f;
	int how = _i % 4;
	gfx_open(&f, _i / 4 ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY, 0);
	toggle_sim_set_handle_reuse(f.sim, true);
	struct toggle_anomalies an0, an1;
	toggle_anomalies_get(f.agent, &an0);

	CUgraph g;
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s), CUDA_SUCCESS);
	int first = how == 3 ? NH : 0; /* producers recorded before the late one */
	for (int h = 0; h < NH - 1 && how != 3; h++) {
		ck_assert_int_eq(toggle_sim_launch_kernel(f.s, k_host_produce, &f.prod[h]), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_record_producer(f.agent, f.s, hook_of(h)), 0);
	}
	(void)first;
	int late = NH - 1;
	if (how == 0 || how == 3)
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	if (how == 2) {
		ck_assert_int_eq(toggle_sim_memset(f.s), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_record_producer(f.agent, f.s, hook_of(late)), TOGGLE_ENOTKERNEL);
	}
	ck_assert_int_eq(toggle_sim_launch_kernel(f.s, k_host_produce, &f.prod[late]), CUDA_SUCCESS);
	if (how == 1)
		ck_assert_int_eq(toggle_record_producer(f.agent, f.s, (struct toggle_hook){NT, 0}),
				 TOGGLE_ERANGE);
	else if (how != 2)
		ck_assert_int_eq(toggle_record_producer(f.agent, f.s, hook_of(late)), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s, &g), CUDA_SUCCESS);
	if (how == 1 || how == 2)
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);

	/* The graph is known, fails closed, and says why. */
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
	ck_assert(!gs.bound);
	ck_assert_ptr_nonnull(strstr(gs.note, "not recorded"));
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, e), TOGGLE_ECAPTURE);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "capture it again"));
	/* toggle_graph_instantiate binds a graph with producers: refused too. */
	CUgraphExec e3;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e3), how == 3 ? 0 : TOGGLE_ECAPTURE);
	ck_assert_ptr_nonnull(e3);
	ck_assert_int_eq(launch(&f, g, e3), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(f.ran, 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e3), CUDA_SUCCESS);
	toggle_anomalies_get(f.agent, &an0); /* the counts below start here */
	uint32_t none_of_late = ((1u << NH) - 1) & ~(1u << late);
	step(&f, 0, none_of_late); /* the set excludes the late producer */
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
	ck_assert_int_eq(launch(&f, g, e), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
	ck_assert_uint_eq(f.ran, 0);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "refused"));
	toggle_anomalies_get(f.agent, &an1);
	ck_assert_uint_eq(an1.launch_unbound, an0.launch_unbound + 1);
	/* Still refused at the next step, whatever the set. */
	step(&f, 1, (1u << NH) - 1);
	ck_assert_int_eq(launch(&f, g, e), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(f.ran, 0);

	/* Captured again properly (the simulator hands out the same handle): it runs. */
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	CUgraph g2 = capture_host(&f);
	ck_assert_ptr_eq(g2, g);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g2, e), 0);
	ck_assert_int_eq(toggle_graph_status(f.agent, g2, &gs), 0);
	ck_assert_str_eq(gs.note, "");
	step(&f, 2, none_of_late);
	ck_assert_int_eq(launch(&f, g2, e), 0);
	ck_assert_uint_eq(f.ran, none_of_late);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g2, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g2), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/* Device mode: a device-updatable producer recorded without its device handle. */
START_TEST(test_late_device_producer_fails_closed)
{
	struct gfx f;
	gfx_open(&f, TOGGLE_MODE_DEVICE, 0);
	CUgraph g;
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_planner(f.agent, f.s), 0);
	void *fp = &f;
	int hk = 0;
	void *params[] = {&fp, &hk};
	CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
			    .blockDimY = 1, .blockDimZ = 1, .hStream = f.s};
	ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, f.produce, params, NULL), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_device_producer(f.agent, f.s, hook_of(0), NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s, &g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	/* Only a planner and an unrecorded producer: it used to pass as unrelated. */
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, 0);
	ck_assert_int_eq(launch(&f, g, e), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(f.ran, 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/* ---- 3. handle reuse ------------------------------------------------------------------- */

/*
 * A graph with producers is forgotten (how 0), unbound (1) or left bound
 * (2: against the documented rule), then destroyed with its exec; an
 * unrelated graph captured next gets the same handles.  It must launch
 * untouched in every case, the stale record must go, and the agent must
 * still record the handle properly later.  _i 0-1: driver 13.0 (no ids:
 * the recorded nodes are looked for in the graph), _i 2-4: driver 13.1
 * (cuGraphGetId, cuGraphExecGetId).  A bound graph destroyed with its exec
 * is only recognised with the exec id: without it the agent would hand the
 * dead nodes to the driver (which refuses them; the simulator cannot, as
 * their memory is gone), so that case is 13.1 only.
 */
START_TEST(test_reused_graph_handle_not_blocked)
{
	struct gfx f;
	int how = _i < 2 ? _i : _i - 2;
	gfx_open(&f, TOGGLE_MODE_LAZY, _i < 2 ? 13000 : 13010);
	toggle_sim_set_handle_reuse(f.sim, true);
	CUgraph g = capture_host(&f);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, e), 0);
	step(&f, 0, 0x3);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x3);

	if (how == 0)
		ck_assert_int_eq(toggle_graph_forget(f.agent, g), 0);
	else if (how == 1)
		ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	/* While the graph lives, its launches stay refused: no false match. */
	if (how != 2)
		ck_assert_int_eq(launch(&f, g, e), how == 0 ? TOGGLE_ESTALE : TOGGLE_EUNBOUND);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);

	CUgraph u = capture_other(&f, 3);
	CUgraphExec ue;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&ue, u), CUDA_SUCCESS);
	ck_assert_ptr_eq(u, g);  /* the test needs the reuse */
	ck_assert_ptr_eq(ue, e);
	step(&f, 1, 0x5); /* a set change: a bound record would sync */
	struct toggle_stats st0, st1;
	toggle_stats_get(f.agent, &st0);
	f.other_runs = 0;
	ck_assert_int_eq(launch(&f, u, ue), 0);
	ck_assert_uint_eq(f.other_runs, 3);
	ck_assert_uint_eq(f.ran, 0);
	toggle_stats_get(f.agent, &st1);
	ck_assert_uint_eq(st1.launches_unrelated, st0.launches_unrelated + 1);
	ck_assert_uint_eq(st1.launches_refused, st0.launches_refused);
	/* The record is empty now: later launches take the unrelated path too. */
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, u, &gs), 0);
	ck_assert_uint_eq(gs.nodes, 0);
	ck_assert(!gs.stale && !gs.bound);
	ck_assert_int_eq(launch(&f, u, ue), 0);
	ck_assert_uint_eq(f.other_runs, 6);
	ck_assert_int_eq(toggle_graph_bind(f.agent, u, ue), TOGGLE_ENOENT);
	struct toggle_registry_check rc;
	toggle_registry_check(f.agent, &rc);
	ck_assert_uint_eq(rc.graphs, 0);

	/* The agent records the handle again when a capture reuses it once more. */
	ck_assert_int_eq(toggle_sim_exec_destroy(ue), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(u), CUDA_SUCCESS);
	CUgraph g3 = capture_host(&f);
	ck_assert_ptr_eq(g3, g);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g3), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g3, e), 0);
	ck_assert_int_eq(launch(&f, g3, e), 0);
	ck_assert_uint_eq(f.ran, 0x5);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g3, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g3), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/* The reused handle passed to bind or to toggle_graph_instantiate: a new graph, not ours. */
START_TEST(test_reused_graph_handle_bind_and_instantiate)
{
	struct gfx f;
	gfx_open(&f, TOGGLE_MODE_LAZY, _i ? 13010 : 13000);
	toggle_sim_set_handle_reuse(f.sim, true);
	CUgraph g = capture_host(&f);
	ck_assert_int_eq(toggle_graph_forget(f.agent, g), 0);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	CUgraph u = capture_other(&f, 1);
	ck_assert_ptr_eq(u, g);
	CUgraphExec ue;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, u, &ue), 0);
	ck_assert_int_eq(toggle_graph_bind(f.agent, u, ue), TOGGLE_ENOENT);
	step(&f, 0, 0xff);
	ck_assert_int_eq(launch(&f, u, ue), 0);
	ck_assert_uint_eq(f.other_runs, 1);
	ck_assert_int_eq(toggle_sim_exec_destroy(ue), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(u), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/*
 * A bound exec destroyed (against the documented rule) and the graph
 * instantiated again into the same handle.  With cuGraphExecGetId (driver
 * 13.1) the agent sees a new exec where it would sync or bind: a set change
 * (lazy, _i 0; eager, _i 1) sets every node of it, and device mode's bind
 * uploads it (_i 2).  Before, the cached node states of the dead exec were
 * trusted (lazy: only changed hooks were set on an exec whose nodes were all
 * enabled) and device mode skipped the upload of "the same" exec.
 */
START_TEST(test_reused_exec_handle_is_a_new_exec)
{
	struct gfx f;
	enum toggle_mode mode = _i == 2 ? TOGGLE_MODE_DEVICE : _i ? TOGGLE_MODE_EAGER : TOGGLE_MODE_LAZY;
	gfx_open(&f, mode, 13010);
	toggle_sim_set_handle_reuse(f.sim, true);
	CUgraph g = _i == 2 ? capture_device(&f, true) : capture_host(&f);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, e), 0);
	step(&f, 0, 0x01);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x01);

	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	CUgraphExec e2;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e2, g), CUDA_SUCCESS);
	ck_assert_ptr_eq(e2, e); /* the test needs the reuse */
	if (_i == 2) {
		uint64_t uploads = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD);
		ck_assert_int_eq(toggle_graph_bind(f.agent, g, e2), 0);
		/* The new exec, and its producer-free and full execs if they were
		 * assembled (issue 31). */
		struct toggle_graph_status gs;
		ck_assert_int_eq(toggle_graph_status(f.agent, g, &gs), 0);
		ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD),
				  uploads + 1 + (gs.bare_exec ? 1 : 0) + (gs.full_exec ? 1 : 0));
	}
	step(&f, 1, 0x03);
	ck_assert_int_eq(launch(&f, g, e2), 0);
	ck_assert_uint_eq(f.ran, 0x03);
	if (_i == 2) {
		struct toggle_device_counters dc;
		ck_assert_int_eq(toggle_graph_device_counters(f.agent, g, &dc), 0);
		ck_assert_uint_eq(dc.device_failures, 0);
	}
	ck_assert_int_eq(toggle_graph_bind(f.agent, g, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/* Identity calls through the agent's driver table, counted (one test at a time: Check forks). */
static unsigned long id_calls;

static CUresult count_get_nodes(CUgraph g, CUgraphNode *nodes, size_t *n)
{
	id_calls++;
	return toggle_sim_graph_get_nodes(g, nodes, n);
}

static CUresult count_get_id(CUgraph g, unsigned *id)
{
	id_calls++;
	return toggle_sim_graph_get_id(g, id);
}

static CUresult count_exec_get_id(CUgraphExec e, unsigned *id)
{
	id_calls++;
	return toggle_sim_graph_exec_get_id(e, id);
}

/*
 * No identity call on the replay of an unchanged set, in any mode, with or
 * without the 13.1 ids; refused launches and set changes are where they go.
 * _i: lazy, eager, device; _i / 3: driver 13.0, 13.1.
 */
START_TEST(test_identity_checks_off_the_hot_path)
{
	static const enum toggle_mode modes[3] = {TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER,
						  TOGGLE_MODE_DEVICE};
	struct gfx f;
	enum toggle_mode mode = modes[_i % 3];
	gfx_open(&f, mode, _i / 3 ? 13010 : 13000);
	f.agent->cu.graph_get_nodes = count_get_nodes;
	if (_i / 3) {
		f.agent->cu.graph_get_id = count_get_id;
		f.agent->cu.graph_exec_get_id = count_exec_get_id;
	}
	CUgraph g = mode == TOGGLE_MODE_DEVICE ? capture_device(&f, true) : capture_host(&f);
	CUgraphExec e;
	ck_assert_int_eq(toggle_graph_instantiate(f.agent, g, &e), 0);
	step(&f, 0, 0x5a);
	ck_assert_int_eq(launch(&f, g, e), 0);
	ck_assert_uint_eq(f.ran, 0x5a);
	/* Host modes: the set holds, so its set exec is built and switched to, which one
	 * launch's slow path orders (libtoggle.md, *The set exec*): done before counting. */
	for (int64_t st = 1; st <= 12; st++) {
		step(&f, st, 0x5a);
		ck_assert_int_eq(launch(&f, g, e), 0);
		ck_assert_uint_eq(f.ran, 0x5a);
	}
	id_calls = 0;
	for (int64_t st = 13; st <= 62; st++) {
		step(&f, st, 0x5a); /* the same set: the version does not move */
		for (int k = 0; k < 20; k++)
			ck_assert_int_eq(toggle_graph_launch(f.agent, g, e, f.s), 0);
	}
	toggle_sim_synchronize(f.sim);
	ck_assert_uint_eq(id_calls, 0);
	/* A forgotten graph's refused launch checks it (13.0: the nodes; 13.1: the id). */
	ck_assert_int_eq(toggle_graph_forget(f.agent, g), 0);
	ck_assert_int_eq(launch(&f, g, e), TOGGLE_ESTALE);
	ck_assert_uint_gt(id_calls, 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy(g), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

/* ---- 4. NULL pointers ------------------------------------------------------------------ */

START_TEST(test_null_agent_and_outputs)
{
	struct toggle_agent *n = NULL;
	struct toggle_set s;
	toggle_set_clear(&s);
	struct toggle_plan_entry pe = {.step = 1, .set = s};
	CUlaunchConfig lc = {.gridDimX = 1};
	CUgraphExec ex = NULL;
	struct toggle_device_counters dc;
	struct toggle_graph_status gs;
	struct toggle_hook h = {0, 0};
	CUstream st = NULL;
	CUgraph g = NULL;

	ck_assert_int_eq(toggle_capture_begin(n), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_capture_end(n), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_record_producer(n, st, h), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_bind(n, g, ex), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_forget(n, g), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_instantiate(n, g, &ex), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_capture_planner(n, st), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_launch_producer(n, &lc, (CUfunction)&lc, NULL, h), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_record_device_producer(n, st, h, (CUgraphDeviceNode)&lc),
			 TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_device_counters(n, g, &dc), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_enabled(n, &s), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_plan_step(n, 1, &s), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_plan_submit(n, &pe, 1), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_step_begin(n, 0, &s), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_launch(n, g, ex, st), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_apply_all(n), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_status(n, g, &gs), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_hooks(n, g, &s), TOGGLE_EINVAL);
	/* The others do nothing, or report nothing. */
	toggle_plan_clear(n);
	ck_assert_uint_eq(toggle_graph_count(n), 0);
	ck_assert_uint_eq(toggle_graph_list(n, &gs, 1), 0);
	/* The getters report zeros for a NULL agent (issue #28: toggle_taint_get crashed). */
	struct toggle_taint tt;
	memset(&tt, 0xee, sizeof(tt));
	toggle_taint_get(n, &tt);
	ck_assert(tt.launches == 0 && tt.lost == 0 && tt.calls_failed == 0 && tt.last_step == -1 &&
		  tt.last_graph == NULL);
	toggle_taint_get(n, NULL);
	/* The set helpers take NULL (issue #28: they crashed), as toggle_hooks.h says. */
	struct toggle_catalog cat0 = catalog;
	toggle_set_clear(NULL);
	ck_assert_int_eq(toggle_set_add(NULL, h), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_remove(NULL, h), TOGGLE_EINVAL);
	ck_assert(!toggle_set_contains(NULL, h));
	ck_assert_uint_eq(toggle_set_count(NULL), 0);
	ck_assert(!toggle_set_equal(NULL, &s) && !toggle_set_equal(&s, NULL));
	ck_assert(!toggle_set_equal(NULL, NULL));
	toggle_set_union(NULL, &s);
	toggle_set_union(&s, NULL);
	toggle_set_subtract(NULL, &s);
	toggle_set_subtract(&s, NULL);
	toggle_set_fill(NULL, &cat0);
	toggle_set_add(&s, h);
	toggle_set_fill(&s, NULL); /* no catalog, no hook */
	ck_assert_uint_eq(toggle_set_count(&s), 0);
	ck_assert_int_eq(toggle_catalog_check_set(NULL, &s), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_catalog_check_set(&cat0, NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_catalog_validate(NULL, NULL, 16), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_parse(NULL, "all", &s, NULL, 0), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_parse(&cat0, NULL, &s, NULL, 0), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_parse(&cat0, "all", NULL, NULL, 0), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_format(NULL, &s, NULL, 0), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_set_format(&cat0, NULL, NULL, 0), TOGGLE_EINVAL);
	ck_assert_ptr_null(toggle_agent_catalog(n));
	ck_assert_ptr_nonnull(toggle_last_error(n));

	/* A real agent: NULL outputs. */
	struct gfx f;
	gfx_open(&f, TOGGLE_MODE_LAZY, 0);
	CUgraph cg = capture_host(&f);
	ck_assert_int_eq(toggle_graph_status(f.agent, cg, NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_hooks(f.agent, cg, NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_graph_status(f.agent, cg, &gs), 0); /* still there */
	ck_assert_uint_eq(gs.nodes, NH);
	ck_assert_uint_eq(toggle_graph_list(f.agent, NULL, 4), 1);
	toggle_current_set(f.agent, NULL);
	toggle_taint_get(f.agent, NULL);
	toggle_stats_get(f.agent, NULL);
	toggle_anomalies_get(f.agent, NULL);
	toggle_registry_check(f.agent, NULL);
	ck_assert_int_eq(toggle_sim_graph_destroy(cg), CUDA_SUCCESS);
	gfx_close(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("guard");
	TCase *tc = tcase_create("guard");
	tcase_add_loop_test(tc, test_failed_upload_leaves_graph_out_of_date, 0, 3);
	tcase_add_loop_test(tc, test_every_failure_leaves_graph_out_of_date, 0, 4);
	tcase_add_loop_test(tc, test_late_producer_fails_closed, 0, 8);
	tcase_add_test(tc, test_late_device_producer_fails_closed);
	tcase_add_loop_test(tc, test_reused_graph_handle_not_blocked, 0, 5);
	tcase_add_loop_test(tc, test_reused_graph_handle_bind_and_instantiate, 0, 2);
	tcase_add_loop_test(tc, test_reused_exec_handle_is_a_new_exec, 0, 3);
	tcase_add_loop_test(tc, test_identity_checks_off_the_hot_path, 0, 6);
	tcase_add_test(tc, test_null_agent_and_outputs);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
