/*
 * fixture_device.c - the device suites' fixture (check_device_*.c): the
 * simulated kernels (a producer per hook that logs what ran, a mark per
 * launch), an agent in device mode on the simulator, graphs captured the
 * ways enum how names, launches and the check of what ran against the set
 * each launch was submitted with.  Moved out of check_device.c (issue 29).
 */
#include "fixture_device.h"

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

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

void k_compute(void *arg)
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

struct toggle_config dfx_config(struct dfx *f, enum toggle_mode mode, bool strict)
{
	return (struct toggle_config){
		.name = "device-test",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.strict = strict,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
		/* These suites test the device exec and its planner at every launch
		 * (planner runs, device calls, uploads, instantiations counted); the
		 * bare exec that all-off steps switch to is check_device_bare.c's. */
		.no_bare_exec = true,
	};
}

struct dfx *dfx_new(void)
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

struct dfx *dfx_open(enum toggle_mode mode, bool strict)
{
	struct dfx *f = dfx_new();
	struct toggle_config cfg = dfx_config(f, mode, strict);
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	return f;
}

void dfx_close(struct dfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0); /* the agent freed its device memory */
	toggle_sim_destroy(f->sim);
	free(f);
}

CUlaunchConfig launch_cfg(CUstream s)
{
	return (CUlaunchConfig){.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
				.blockDimY = 1, .blockDimZ = 1, .hStream = s};
}

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
void dfx_capture(struct dfx *f, int gi, enum how how)
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

uint32_t set_bits(const struct toggle_set *s)
{
	uint32_t m = 0;
	for (int h = 0; h < NH; h++)
		if (toggle_set_contains(s, (struct toggle_hook){(uint16_t)(h / NL), (uint16_t)(h % NL)}))
			m |= 1u << h;
	return m;
}

struct toggle_set set_of(uint32_t m)
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
int dfx_launch(struct dfx *f, int gi, int si)
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
uint64_t dfx_check(struct dfx *f)
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

uint64_t sim_calls(struct dfx *f, enum toggle_sim_op op)
{
	return toggle_sim_calls(f->sim, op);
}

struct toggle_stats stats(struct dfx *f)
{
	struct toggle_stats st;
	toggle_stats_get(f->agent, &st);
	return st;
}

struct toggle_graph_status gstatus(struct dfx *f, int gi)
{
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph[gi], &gs), 0);
	return gs;
}

struct toggle_device_counters dcount(struct dfx *f, int gi)
{
	struct toggle_device_counters dc;
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(toggle_graph_device_counters(f->agent, f->graph[gi], &dc), 0);
	return dc;
}
