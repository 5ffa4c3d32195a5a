/*
 * check_bare_sim.c - the producer-free ("bare") exec on the simulator: the
 * simulator's model of clones and graph edits that the bare exec is built
 * with.
 * The simulator, the agent, kernels that record themselves and the launch
 * check are the bare suites' fixture (tests/fixture_bare.h).  Split out of
 * check_bare.c (issue 29).
 */
#include "fixture_bare.h"

/* ---- the simulator's model of clones and graph edits ------------------------------ */

struct chain {
	struct bfx f;
	struct kern k[4];
	CUgraphNode node[4];
	CUgraph graph;
};

/* A -> B -> C -> D, captured. */
static void chain_capture(struct chain *c)
{
	memset(c, 0, sizeof(*c));
	ck_assert_int_eq(toggle_sim_create(&c->f.sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(c->f.sim, &c->f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(c->f.stream), CUDA_SUCCESS);
	for (int i = 0; i < 4; i++) {
		c->k[i] = (struct kern){.f = &c->f, .id = i};
		ck_assert_int_eq(toggle_sim_launch_kernel(c->f.stream, k_run, &c->k[i]), CUDA_SUCCESS);
		CUstreamCaptureStatus st;
		const CUgraphNode *deps;
		size_t n;
		ck_assert_int_eq(toggle_sim_stream_get_capture_info(c->f.stream, &st, NULL, NULL, &deps,
								    NULL, &n),
				 CUDA_SUCCESS);
		ck_assert_uint_eq(n, 1);
		c->node[i] = deps[0];
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(c->f.stream, &c->graph), CUDA_SUCCESS);
}

/* Run an exec of g and compare the kernels it ran with want (n of them). */
static void chain_run(struct chain *c, CUgraph g, const int *want, int n)
{
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	c->f.nlog = 0;
	ck_assert_int_eq(toggle_sim_graph_launch(e, c->f.stream), CUDA_SUCCESS);
	ck_assert_int_eq(c->f.nlog, n);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(c->f.log[i], want[i]);
	ck_assert_int_eq(toggle_sim_exec_destroy(e), CUDA_SUCCESS);
}

START_TEST(test_sim_clone_and_edits)
{
	struct chain c;
	chain_capture(&c);
	CUgraph k1, k2;
	CUgraphNode b, b2, a2, c2, x[4];
	size_t n;

	/* Captured graphs are not edited in the model. */
	ck_assert_int_eq(toggle_sim_graph_destroy_node(c.node[1]), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_graph_clone(&k1, c.graph), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k1), 4);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&b, c.node[1], k1), CUDA_SUCCESS);
	ck_assert_ptr_ne(b, c.node[1]);
	/* The clone has the original's edges. */
	n = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependencies(b, x, NULL, &n), CUDA_SUCCESS);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&a2, c.node[0], k1), CUDA_SUCCESS);
	ck_assert_ptr_eq(x[0], a2);
	n = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependent_nodes(b, x, NULL, &n), CUDA_SUCCESS);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&c2, c.node[2], k1), CUDA_SUCCESS);
	ck_assert_ptr_eq(x[0], c2);

	/* B destroyed without reconnecting: A and C are unordered, and the later runs first. */
	ck_assert_int_eq(toggle_sim_graph_destroy_node(b), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k1), 3);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&b2, c.node[1], k1),
			 CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(b), CUDA_ERROR_INVALID_VALUE);
	n = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependencies(c2, x, NULL, &n), CUDA_SUCCESS);
	ck_assert_uint_eq(n, 0);
	chain_run(&c, k1, (const int[]){2, 3, 0}, 3);

	/* Reconnected: capture order again.  An existing edge and a live exec are refused. */
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k1, &a2, &c2, NULL, 1), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k1, &a2, &c2, NULL, 1),
			 CUDA_ERROR_INVALID_VALUE);
	chain_run(&c, k1, (const int[]){0, 2, 3}, 3);
	CUgraphExec live;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&live, k1), CUDA_SUCCESS);
	CUgraphNode d2;
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&d2, c.node[3], k1), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(d2), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k1, &a2, &d2, NULL, 1),
			 CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_int_eq(toggle_sim_exec_destroy(live), CUDA_SUCCESS);

	/* A clone of a clone; a cycle fails instantiation. */
	ck_assert_int_eq(toggle_sim_graph_clone(&k2, k1), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k2), 3);
	CUgraphNode a3, d3;
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&a3, a2, k2), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_graph_node_find_in_clone(&d3, d2, k2), CUDA_SUCCESS);
	chain_run(&c, k2, (const int[]){0, 2, 3}, 3);
	ck_assert_int_eq(toggle_sim_graph_add_dependencies(k2, &d3, &a3, NULL, 1), CUDA_SUCCESS);
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, k2), CUDA_ERROR_INVALID_VALUE);

	/* Failure injection: a failed call changes nothing. */
	toggle_sim_fail(c.f.sim, TOGGLE_SIM_OP_DESTROY_NODE, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(a2), CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_uint_eq(toggle_sim_graph_node_count(k1), 3);
	toggle_sim_fail(c.f.sim, TOGGLE_SIM_OP_GRAPH_CLONE, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_int_eq(toggle_sim_graph_clone(&k2, c.graph), CUDA_ERROR_OUT_OF_MEMORY);
	ck_assert_uint_eq(toggle_sim_graph_count(c.f.sim), 3);

	/* The original is untouched. */
	chain_run(&c, c.graph, (const int[]){0, 1, 2, 3}, 4);
	toggle_sim_destroy(c.f.sim);
}
END_TEST

/* Driver rules: a device-updatable node cannot be destroyed, and a graph
 * holding one cannot be cloned (cudaErrorNotSupported, gpu_bare on the H200). */
START_TEST(test_sim_devupd_node_not_destroyed)
{
	struct bfx *f = bfx_open_cfg(TOGGLE_MODE_LAZY, false);
	CUmodule mod;
	CUfunction produce;
	ck_assert_int_eq(toggle_sim_module_load(f->sim, &mod, &dev_image), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_module_get_function(&produce, mod, "produce"), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	struct kern k = {.f = f, .id = 7};
	void *kp = &k;
	void *params[] = {&kp};
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof(attr));
	attr.id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
	attr.value.deviceUpdatableKernelNode.deviceUpdatable = 1;
	CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
			    .blockDimY = 1, .blockDimZ = 1, .hStream = f->stream, .attrs = &attr,
			    .numAttrs = 1};
	ck_assert_int_eq(toggle_sim_launch_kernel_ex(&c, produce, params, NULL), CUDA_SUCCESS);
	CUstreamCaptureStatus st;
	const CUgraphNode *deps;
	size_t n;
	ck_assert_int_eq(toggle_sim_stream_get_capture_info(f->stream, &st, NULL, NULL, &deps, NULL,
							    &n),
			 CUDA_SUCCESS);
	CUgraphNode node = deps[0];
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph), CUDA_SUCCESS);
	CUgraph clone = NULL;
	ck_assert_int_eq(toggle_sim_graph_clone(&clone, f->graph), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_ptr_null(clone);
	ck_assert_int_eq(toggle_sim_graph_destroy_node(node), CUDA_ERROR_INVALID_VALUE);
	bfx_close(f);
}
END_TEST

static Suite *bare_sim_suite(void)
{
	Suite *s = suite_create("bare_sim");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_sim_clone_and_edits);
	tcase_add_test(tc, test_sim_devupd_node_not_destroyed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(bare_sim_suite());
}
