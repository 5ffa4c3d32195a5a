/*
 * check_sim.c - tests of the in-tree CUDA simulator (toggle_sim.h) and of
 * the driver table it fills (tg_cu_load_sim).  Run under ASan with leak
 * detection, so a simulator that leaks fails here too.
 */
#include <stdint.h>
#include <string.h>

#include "cu.h"
#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

#define CK_CU(call, want) ck_assert_int_eq((int)(call), (int)(want))
#define CK_OK(call)       CK_CU(call, CUDA_SUCCESS)

#define MAX_REC 64

/* The order in which simulated kernels ran. */
struct rec {
	int ids[MAX_REC];
	unsigned n;
};

struct karg {
	struct rec *rec;
	int id;
};

static void rec_kernel(void *p)
{
	struct karg *a = p;

	ck_assert_uint_lt(a->rec->n, MAX_REC);
	a->rec->ids[a->rec->n++] = a->id;
}

/* Checks that the recorded kernel ids are exactly want[0..n) and clears the record. */
static void rec_expect(struct rec *r, const int *want, unsigned n)
{
	ck_assert_uint_eq(r->n, n);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(r->ids[i], want[i]);
	r->n = 0;
}

/* A simulator with one stream, and per-node kernel arguments whose id is the node index. */
struct fx {
	struct toggle_sim *sim;
	CUstream s;
	struct rec rec;
	struct karg args[16];
	CUgraphNode nodes[16];
};

static void fx_open(struct fx *f)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	ck_assert_ptr_nonnull(f->sim);
	CK_OK(toggle_sim_stream_create(f->sim, &f->s));
	for (int i = 0; i < 16; i++)
		f->args[i] = (struct karg){ .rec = &f->rec, .id = i };
}

/* The node just added to a capturing stream, as libtoggle finds it. */
static CUgraphNode last_node(CUstream s)
{
	CUstreamCaptureStatus st;
	const CUgraphNode *deps = NULL;
	size_t n = 0;

	CK_OK(toggle_sim_stream_get_capture_info(s, &st, NULL, NULL, &deps, NULL, &n));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	ck_assert_uint_eq(n, 1);
	return deps[0];
}

/* Capture pattern ('K' kernel, 'M' memset) into a new graph; node i goes to f->nodes[i]. */
static CUgraph fx_capture(struct fx *f, const char *pattern)
{
	CUgraph g = NULL;

	CK_OK(toggle_sim_stream_begin_capture(f->s));
	for (unsigned i = 0; pattern[i] != '\0'; i++) {
		if (pattern[i] == 'K')
			CK_OK(toggle_sim_launch_kernel(f->s, rec_kernel, &f->args[i]));
		else
			CK_OK(toggle_sim_memset(f->s));
		f->nodes[i] = last_node(f->s);
	}
	CK_OK(toggle_sim_stream_end_capture(f->s, &g));
	ck_assert_ptr_nonnull(g);
	return g;
}

static CUgraphExec instantiate(CUgraph g)
{
	CUgraphExec ex = NULL;

	CK_OK(toggle_sim_graph_instantiate(&ex, g));
	ck_assert_ptr_nonnull(ex);
	return ex;
}

static unsigned enabled(CUgraphExec ex, CUgraphNode node)
{
	unsigned on = 42;

	CK_OK(toggle_sim_graph_node_get_enabled(ex, node, &on));
	return on;
}

/* ---- simulator and streams ------------------------------------------------ */

START_TEST(create_destroy)
{
	struct toggle_sim *sim = NULL;
	CUstream s = NULL;

	toggle_sim_destroy(NULL);
	ck_assert_int_eq(toggle_sim_create(NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_sim_create(&sim), 0);
	CK_CU(toggle_sim_stream_create(NULL, &s), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_stream_create(sim, NULL), CUDA_ERROR_INVALID_VALUE);
	CK_OK(toggle_sim_stream_create(sim, &s));
	CK_OK(toggle_sim_stream_destroy(s));
	CK_CU(toggle_sim_stream_destroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	toggle_sim_destroy(sim);
}
END_TEST

START_TEST(null_handles_refused)
{
	CUgraph g = NULL;
	CUgraphExec ex = NULL;
	CUstreamCaptureStatus st;
	CUgraphNodeType type;
	unsigned on;

	CK_CU(toggle_sim_stream_begin_capture(NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_stream_end_capture(NULL, &g), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_launch_kernel(NULL, rec_kernel, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_memset(NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_stream_get_capture_info(NULL, &st, NULL, NULL, NULL, NULL, NULL),
	      CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_instantiate(&ex, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_destroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_exec_destroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	ck_assert_uint_eq(toggle_sim_graph_node_count(NULL), 0);
	CK_CU(toggle_sim_graph_node_get_type(NULL, &type), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_set_enabled(NULL, NULL, 1), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_get_enabled(NULL, NULL, &on), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_launch(NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_upload(NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	ck_assert_uint_eq(toggle_sim_calls(NULL, TOGGLE_SIM_OP_GRAPH_LAUNCH), 0);
	toggle_sim_fail(NULL, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, CUDA_ERROR_UNKNOWN);
	toggle_sim_reset_counters(NULL);
}
END_TEST

/* Handles are checked for their kind: one kind passed as another is refused. */
START_TEST(wrong_kind_refused)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "K");
	CUgraphExec ex = instantiate(g);
	CUgraphNodeType type;

	CK_CU(toggle_sim_graph_launch((CUgraphExec)(void *)g, f.s), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_launch(ex, (CUstream)(void *)ex), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_stream_begin_capture((CUstream)(void *)g), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_destroy((CUgraph)(void *)ex), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_exec_destroy((CUgraphExec)(void *)f.s), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_get_type((CUgraphNode)(void *)g, &type),
	      CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_set_enabled(ex, (CUgraphNode)(void *)g, 0),
	      CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(toggle_sim_graph_node_count((CUgraph)(void *)f.s), 0);
	ck_assert_uint_eq(enabled(ex, f.nodes[0]), 1);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(launch_without_capture_runs_now)
{
	struct fx f;
	fx_open(&f);

	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[3]));
	CK_OK(toggle_sim_memset(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[5]));
	rec_expect(&f.rec, (const int[]){ 3, 5 }, 2);
	CK_CU(toggle_sim_launch_kernel(f.s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* ---- capture ---------------------------------------------------------------- */

START_TEST(capture_records_nodes)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KMK");
	CUgraphNodeType type;

	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 3);
	ck_assert_uint_eq(f.rec.n, 0); /* captured, not run */
	ck_assert_ptr_ne(f.nodes[0], f.nodes[1]);
	ck_assert_ptr_ne(f.nodes[1], f.nodes[2]);
	CK_OK(toggle_sim_graph_node_get_type(f.nodes[0], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_KERNEL);
	CK_OK(toggle_sim_graph_node_get_type(f.nodes[1], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_MEMSET);
	CK_OK(toggle_sim_graph_node_get_type(f.nodes[2], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_KERNEL);
	CK_CU(toggle_sim_graph_node_get_type(f.nodes[0], NULL), CUDA_ERROR_INVALID_VALUE);
	/* The stream no longer captures: a launch runs at once. */
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[7]));
	rec_expect(&f.rec, (const int[]){ 7 }, 1);
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 3);
	CK_OK(toggle_sim_graph_destroy(g));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(capture_state_errors)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = NULL;
	CUstreamCaptureStatus st;

	CK_CU(toggle_sim_stream_end_capture(f.s, &g), CUDA_ERROR_ILLEGAL_STATE);
	ck_assert_ptr_null(g);
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_CU(toggle_sim_stream_begin_capture(f.s), CUDA_ERROR_ILLEGAL_STATE);
	CK_CU(toggle_sim_stream_end_capture(f.s, NULL), CUDA_ERROR_INVALID_VALUE);
	/* Neither failure ended the capture. */
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, &g, NULL, NULL, NULL));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	/* A graph being captured into cannot be destroyed. */
	CK_CU(toggle_sim_graph_destroy(g), CUDA_ERROR_ILLEGAL_STATE);
	CUgraph ended = NULL;
	CK_OK(toggle_sim_stream_end_capture(f.s, &ended));
	ck_assert_ptr_eq(ended, g);
	CK_CU(toggle_sim_stream_end_capture(f.s, &ended), CUDA_ERROR_ILLEGAL_STATE);
	CK_OK(toggle_sim_graph_destroy(g));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(capture_info_fields)
{
	struct fx f;
	fx_open(&f);
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	cuuint64_t id = 99;
	CUgraph g = (CUgraph)(void *)&f, g2 = NULL;
	const CUgraphNode *deps = (const CUgraphNode *)(void *)&f;
	const CUgraphEdgeData *edges = NULL;
	size_t n = 99;

	/* Not capturing: status NONE, success, the rest zeroed. */
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id, &g, &deps, &edges, &n));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
	ck_assert_ptr_null(g);
	ck_assert_uint_eq(n, 0);

	/* Right after begin: active, an id, the graph, no dependency yet. */
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id, &g, &deps, &edges, &n));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	ck_assert_uint_ne(id, 0);
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 0);

	/* After each node: the only dependency is that node, with a default edge. */
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	cuuint64_t id2 = 0;
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id2, &g2, &deps, &edges, &n));
	ck_assert_uint_eq(id2, id);
	ck_assert_ptr_eq(g2, g);
	ck_assert_uint_eq(n, 1);
	CUgraphNode k = deps[0];
	CUgraphNodeType type;
	CK_OK(toggle_sim_graph_node_get_type(k, &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_KERNEL);
	static const CUgraphEdgeData zero_edge;
	if (edges != NULL)
		ck_assert_int_eq(memcmp(&edges[0], &zero_edge, sizeof(zero_edge)), 0);

	CK_OK(toggle_sim_memset(f.s));
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, &deps, NULL, &n));
	ck_assert_uint_eq(n, 1);
	ck_assert_ptr_ne(deps[0], k);
	CK_OK(toggle_sim_graph_node_get_type(deps[0], &type));
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_MEMSET);
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), 2);

	/* Argument rules of the driver. */
	CK_CU(toggle_sim_stream_get_capture_info(f.s, NULL, &id, NULL, NULL, NULL, NULL),
	      CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, NULL, &edges, &n),
	      CUDA_ERROR_INVALID_VALUE);
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, NULL, NULL, NULL));

	CK_OK(toggle_sim_stream_end_capture(f.s, &g2));
	ck_assert_ptr_eq(g2, g);
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, &id, &g2, &deps, &edges, &n));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
	ck_assert_uint_eq(n, 0);
	toggle_sim_destroy(f.sim);
}
END_TEST

static cuuint64_t capture_id(CUstream s)
{
	CUstreamCaptureStatus st;
	cuuint64_t id = 0;

	CK_OK(toggle_sim_stream_get_capture_info(s, &st, &id, NULL, NULL, NULL, NULL));
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	return id;
}

START_TEST(capture_ids_unique)
{
	struct fx f;
	fx_open(&f);
	CUstream s2;
	cuuint64_t ids[6];
	CUgraph g;

	CK_OK(toggle_sim_stream_create(f.sim, &s2));
	for (int i = 0; i < 3; i++) {
		CK_OK(toggle_sim_stream_begin_capture(f.s));
		CK_OK(toggle_sim_stream_begin_capture(s2));
		ids[2 * i] = capture_id(f.s);
		ids[2 * i + 1] = capture_id(s2);
		CK_OK(toggle_sim_stream_end_capture(f.s, &g));
		CK_OK(toggle_sim_stream_end_capture(s2, &g));
	}
	for (int i = 0; i < 6; i++) {
		ck_assert_uint_ne(ids[i], 0);
		for (int j = 0; j < i; j++)
			ck_assert_uint_ne(ids[i], ids[j]);
	}
	toggle_sim_destroy(f.sim); /* also frees the six empty graphs */
}
END_TEST

/* Node handles handed out early stay valid while later nodes are added. */
START_TEST(many_nodes_keep_handles)
{
	struct fx f;
	fx_open(&f);
	enum { N = 1000 };
	CUgraphNode *nodes = calloc(N, sizeof(*nodes));
	CUgraph g;

	ck_assert_ptr_nonnull(nodes);
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	for (int i = 0; i < N; i++) {
		if (i % 3 == 0)
			CK_OK(toggle_sim_memset(f.s));
		else
			CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
		nodes[i] = last_node(f.s);
	}
	CK_OK(toggle_sim_stream_end_capture(f.s, &g));
	ck_assert_uint_eq(toggle_sim_graph_node_count(g), N);
	CUgraphExec ex = instantiate(g);
	for (int i = 0; i < N; i++) {
		CUgraphNodeType type;
		CK_OK(toggle_sim_graph_node_get_type(nodes[i], &type));
		ck_assert_int_eq(type, i % 3 == 0 ? CU_GRAPH_NODE_TYPE_MEMSET
						  : CU_GRAPH_NODE_TYPE_KERNEL);
		CK_OK(toggle_sim_graph_node_set_enabled(ex, nodes[i], 0));
	}
	/* All disabled: a launch runs nothing (and would overflow the record otherwise). */
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	ck_assert_uint_eq(f.rec.n, 0);
	free(nodes);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* ---- execs ------------------------------------------------------------------ */

START_TEST(launch_runs_in_order)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKMKK");
	CUgraphExec ex = instantiate(g);

	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 3, 4 }, 4);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 3, 4, 0, 1, 3, 4 }, 8);
	for (int i = 0; i < 5; i++)
		ck_assert_uint_eq(enabled(ex, f.nodes[i]), 1);
	CK_OK(toggle_sim_exec_destroy(ex));
	CK_OK(toggle_sim_graph_destroy(g));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(disabled_nodes_skipped)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKMKK");
	CUgraphExec ex = instantiate(g);

	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[1], 0));
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[4], 0));
	ck_assert_uint_eq(enabled(ex, f.nodes[1]), 0);
	ck_assert_uint_eq(enabled(ex, f.nodes[0]), 1);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 3 }, 2);

	/* Memset nodes can be toggled too; any non-zero value enables. */
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[2], 0));
	ck_assert_uint_eq(enabled(ex, f.nodes[2]), 0);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[1], 7));
	ck_assert_uint_eq(enabled(ex, f.nodes[1]), 1);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 3 }, 3);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(execs_are_independent)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKK");
	CUgraphExec a = instantiate(g), b = instantiate(g);

	ck_assert_ptr_ne(a, b);
	CK_OK(toggle_sim_graph_node_set_enabled(a, f.nodes[0], 0));
	CK_OK(toggle_sim_graph_node_set_enabled(b, f.nodes[2], 0));
	ck_assert_uint_eq(enabled(a, f.nodes[0]), 0);
	ck_assert_uint_eq(enabled(b, f.nodes[0]), 1);
	CK_OK(toggle_sim_graph_launch(a, f.s));
	rec_expect(&f.rec, (const int[]){ 1, 2 }, 2);
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	/* A new exec starts all enabled, whatever the others hold. */
	CUgraphExec c = instantiate(g);
	CK_OK(toggle_sim_exec_destroy(a));
	CK_OK(toggle_sim_graph_launch(c, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1, 2 }, 3);
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(foreign_node_refused)
{
	struct fx f;
	fx_open(&f);
	CUgraph g1 = fx_capture(&f, "KK");
	CUgraphNode n1[2] = { f.nodes[0], f.nodes[1] };
	CUgraph g2 = fx_capture(&f, "KK");
	CUgraphExec ex = instantiate(g1);
	unsigned on = 5;

	/* g2's first node has the same position as g1's: identity decides. */
	CK_CU(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_get_enabled(ex, f.nodes[1], &on), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(on, 5);
	CK_CU(toggle_sim_graph_node_set_enabled(ex, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_get_enabled(ex, n1[0], NULL), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(enabled(ex, n1[0]), 1);
	ck_assert_uint_eq(enabled(ex, n1[1]), 1);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	CK_OK(toggle_sim_graph_destroy(g2));
	toggle_sim_destroy(f.sim);
}
END_TEST

/* An exec is a snapshot: nodes captured after instantiation are not in it. */
START_TEST(instantiate_mid_capture_snapshots)
{
	struct fx f;
	fx_open(&f);
	CUstreamCaptureStatus st;
	CUgraph g = NULL, ended = NULL;

	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	CUgraphNode first = last_node(f.s);
	CK_OK(toggle_sim_stream_get_capture_info(f.s, &st, NULL, &g, NULL, NULL, NULL));
	CUgraphExec ex = instantiate(g);
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[1]));
	CUgraphNode second = last_node(f.s);
	CK_OK(toggle_sim_stream_end_capture(f.s, &ended));

	CK_CU(toggle_sim_graph_node_set_enabled(ex, second, 0), CUDA_ERROR_INVALID_VALUE);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, first, 1));
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0 }, 1);
	CUgraphExec full = instantiate(ended);
	CK_OK(toggle_sim_graph_launch(full, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 1 }, 2);
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(launch_and_upload_errors)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "K");
	CUgraphExec ex = instantiate(g);
	struct toggle_sim *other;
	CUstream foreign;

	ck_assert_int_eq(toggle_sim_create(&other), 0);
	CK_OK(toggle_sim_stream_create(other, &foreign));
	CK_CU(toggle_sim_graph_launch(ex, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_launch(ex, foreign), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_upload(ex, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_upload(ex, foreign), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_instantiate(NULL, g), CUDA_ERROR_INVALID_VALUE);

	/* Launching into a capturing stream is refused and runs nothing. */
	CUgraph g2;
	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_CU(toggle_sim_graph_launch(ex, f.s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CK_CU(toggle_sim_graph_upload(ex, f.s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CK_OK(toggle_sim_stream_end_capture(f.s, &g2));
	ck_assert_uint_eq(toggle_sim_graph_node_count(g2), 0);
	ck_assert_uint_eq(f.rec.n, 0);

	CK_OK(toggle_sim_graph_upload(ex, f.s));
	ck_assert_uint_eq(f.rec.n, 0); /* upload runs nothing */
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0 }, 1);
	toggle_sim_destroy(other);
	toggle_sim_destroy(f.sim);
}
END_TEST

/*
 * As measured on the H200 (driver 580): the graph may go before its execs,
 * which still launch with the state they had; its node handles die with it,
 * so set/get_enabled with them fail with CUDA_ERROR_INVALID_VALUE.
 */
START_TEST(graph_destroyed_before_exec)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KMK");
	CUgraphExec a = instantiate(g), b = instantiate(g);
	CUgraphNodeType type;
	unsigned on = 5;

	CK_OK(toggle_sim_graph_node_set_enabled(a, f.nodes[0], 0));
	CK_OK(toggle_sim_graph_destroy(g));
	CK_OK(toggle_sim_graph_launch(a, f.s));
	rec_expect(&f.rec, (const int[]){ 2 }, 1);
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 2 }, 2);

	/* The simulator keeps the nodes' memory while an exec lives: refused, not crashed. */
	CK_CU(toggle_sim_graph_node_set_enabled(a, f.nodes[2], 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_get_enabled(a, f.nodes[0], &on), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(on, 5);
	CK_CU(toggle_sim_graph_node_get_type(f.nodes[1], &type), CUDA_ERROR_INVALID_HANDLE);
	CK_OK(toggle_sim_graph_launch(a, f.s));
	rec_expect(&f.rec, (const int[]){ 2 }, 1);
	CK_OK(toggle_sim_exec_destroy(a));
	CK_OK(toggle_sim_graph_launch(b, f.s));
	rec_expect(&f.rec, (const int[]){ 0, 2 }, 2);
	CK_OK(toggle_sim_exec_destroy(b));
	toggle_sim_destroy(f.sim);
}
END_TEST

/* ---- failure injection and counters ------------------------------------------- */

START_TEST(fail_skip_times)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KKK");
	CUgraphExec ex = instantiate(g);
	const enum toggle_sim_op op = TOGGLE_SIM_OP_NODE_SET_ENABLED;

	toggle_sim_fail(f.sim, op, 1, 2, CUDA_ERROR_NOT_SUPPORTED);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 0)); /* skipped */
	CK_CU(toggle_sim_graph_node_set_enabled(ex, f.nodes[1], 0), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_uint_eq(enabled(ex, f.nodes[1]), 1); /* changed nothing */
	/* A call with a bad argument fails as such and does not use up the injection. */
	CK_CU(toggle_sim_graph_node_set_enabled(ex, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CK_CU(toggle_sim_graph_node_set_enabled(ex, f.nodes[2], 0), CUDA_ERROR_NOT_SUPPORTED);
	ck_assert_uint_eq(enabled(ex, f.nodes[2]), 1);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[2], 0)); /* injection spent */
	ck_assert_uint_eq(toggle_sim_calls(f.sim, op), 5);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_NODE_GET_ENABLED), 2);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 1 }, 1);

	/* times = 0 cancels; so does injecting CUDA_SUCCESS. */
	toggle_sim_fail(f.sim, op, 0, 3, CUDA_ERROR_UNKNOWN);
	toggle_sim_fail(f.sim, op, 0, 0, CUDA_ERROR_UNKNOWN);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 1));
	toggle_sim_fail(f.sim, op, 0, 3, CUDA_SUCCESS);
	CK_OK(toggle_sim_graph_node_set_enabled(ex, f.nodes[0], 1));
	toggle_sim_destroy(f.sim);
}
END_TEST

START_TEST(fail_changes_nothing)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KM");
	CUgraphExec ex = instantiate(g), ex2 = (CUgraphExec)(void *)&f;
	const CUresult err = CUDA_ERROR_LAUNCH_FAILED;

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 1, err);
	CK_CU(toggle_sim_graph_launch(ex, f.s), err);
	ck_assert_uint_eq(f.rec.n, 0);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 0 }, 1);

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_INSTANTIATE, 0, 1, err);
	CK_CU(toggle_sim_graph_instantiate(&ex2, g), err);
	ck_assert_ptr_eq(ex2, (CUgraphExec)(void *)&f);

	CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_GET_TYPE, 0, 1, err);
	CK_CU(toggle_sim_graph_node_get_type(f.nodes[0], &type), err);
	ck_assert_int_eq(type, CU_GRAPH_NODE_TYPE_EMPTY);

	unsigned on = 9;
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_GET_ENABLED, 0, 1, err);
	CK_CU(toggle_sim_graph_node_get_enabled(ex, f.nodes[0], &on), err);
	ck_assert_uint_eq(on, 9);

	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	size_t n = 77;
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO, 0, 1, err);
	CK_CU(toggle_sim_stream_get_capture_info(f.s, &st, NULL, NULL, NULL, NULL, &n), err);
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	ck_assert_uint_eq(n, 77);
	(void)last_node(f.s); /* next call succeeds */
	CUgraph g2;
	CK_OK(toggle_sim_stream_end_capture(f.s, &g2));

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD, 0, 1, err);
	CK_CU(toggle_sim_graph_upload(ex, f.s), err);
	CK_OK(toggle_sim_graph_upload(ex, f.s));

	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 2);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_INSTANTIATE), 2);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_UPLOAD), 2);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* Every op is counted once per call, failed calls included; reset keeps injections. */
START_TEST(counters_count_every_call)
{
	struct fx f;
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KM");
	CUgraphExec ex = NULL;
	CUstreamCaptureStatus st;
	CUgraphNodeType type;
	unsigned on;

	toggle_sim_reset_counters(f.sim);
	for (int op = 0; op < TOGGLE_SIM_OP_COUNT; op++)
		ck_assert_uint_eq(toggle_sim_calls(f.sim, (enum toggle_sim_op)op), 0);
	for (int round = 0; round < 2; round++) {
		/* Round 0 with valid arguments, round 1 with a bad one each. */
		bool bad = round == 1;
		CK_CU(toggle_sim_graph_instantiate(bad ? NULL : &ex, g),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_stream_get_capture_info(f.s, bad ? NULL : &st, NULL, NULL, NULL,
							 NULL, NULL),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_node_get_type(f.nodes[0], bad ? NULL : &type),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_node_set_enabled(ex, bad ? NULL : f.nodes[0], 1),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_node_get_enabled(ex, f.nodes[0], bad ? NULL : &on),
		      bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_launch(ex, bad ? NULL : f.s),
		      bad ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS);
		CK_CU(toggle_sim_graph_upload(ex, bad ? NULL : f.s),
		      bad ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS);
		for (int op = 0; op <= TOGGLE_SIM_OP_INSTANTIATE; op++)
			ck_assert_uint_eq(toggle_sim_calls(f.sim, (enum toggle_sim_op)op),
					  (uint64_t)round + 1);
	}
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_COUNT), 0);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, (enum toggle_sim_op)-1), 0);
	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_COUNT, 0, 1, CUDA_ERROR_UNKNOWN); /* ignored */

	toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 1, 1, CUDA_ERROR_UNKNOWN);
	toggle_sim_reset_counters(f.sim);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 0);
	CK_OK(toggle_sim_graph_launch(ex, f.s));
	CK_CU(toggle_sim_graph_launch(ex, f.s), CUDA_ERROR_UNKNOWN);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 2);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_NODE_GET_TYPE), 0);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* ---- two simulators, teardown --------------------------------------------------- */

START_TEST(two_sims_independent)
{
	struct fx a, b;
	fx_open(&a);
	fx_open(&b);
	CUgraph ga = fx_capture(&a, "KK"), gb = fx_capture(&b, "KK");
	CUgraphExec ea = instantiate(ga), eb = instantiate(gb);

	toggle_sim_fail(a.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH, 0, 5, CUDA_ERROR_UNKNOWN);
	CK_CU(toggle_sim_graph_launch(ea, a.s), CUDA_ERROR_UNKNOWN);
	CK_OK(toggle_sim_graph_launch(eb, b.s));
	rec_expect(&b.rec, (const int[]){ 0, 1 }, 2);
	ck_assert_uint_eq(toggle_sim_calls(a.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 1);
	ck_assert_uint_eq(toggle_sim_calls(b.sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), 1);
	ck_assert_uint_eq(toggle_sim_calls(b.sim, TOGGLE_SIM_OP_INSTANTIATE), 1);

	/* Handles of one simulator are refused by the other. */
	CK_CU(toggle_sim_graph_launch(eb, a.s), CUDA_ERROR_INVALID_HANDLE);
	CK_CU(toggle_sim_graph_node_set_enabled(eb, a.nodes[0], 0), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(enabled(eb, b.nodes[0]), 1);

	CK_OK(toggle_sim_graph_node_set_enabled(eb, b.nodes[1], 0));
	toggle_sim_destroy(a.sim);
	CK_OK(toggle_sim_graph_launch(eb, b.s));
	rec_expect(&b.rec, (const int[]){ 0 }, 1);
	ck_assert_uint_eq(a.rec.n, 0);
	toggle_sim_destroy(b.sim);
}
END_TEST

/* A capture in progress ends with its stream; its graph goes too. */
START_TEST(stream_destroyed_mid_capture)
{
	struct fx f;
	fx_open(&f);
	CUstream s2;

	CK_OK(toggle_sim_stream_begin_capture(f.s));
	CK_OK(toggle_sim_launch_kernel(f.s, rec_kernel, &f.args[0]));
	CK_OK(toggle_sim_stream_destroy(f.s));
	CK_OK(toggle_sim_stream_create(f.sim, &s2));
	CK_OK(toggle_sim_launch_kernel(s2, rec_kernel, &f.args[1]));
	rec_expect(&f.rec, (const int[]){ 1 }, 1);
	toggle_sim_destroy(f.sim);
}
END_TEST

/* Leaves every kind of object alive; LeakSanitizer fails the test if destroy misses one. */
START_TEST(destroy_frees_everything)
{
	struct fx f;
	fx_open(&f);
	CUstream s2, s3;

	CK_OK(toggle_sim_stream_create(f.sim, &s2));
	CK_OK(toggle_sim_stream_create(f.sim, &s3));
	CUgraph g1 = fx_capture(&f, "KMK");
	(void)instantiate(g1);
	(void)instantiate(g1);
	CUgraph g2 = fx_capture(&f, "KK");
	(void)instantiate(g2);
	CK_OK(toggle_sim_graph_destroy(g2)); /* nodes held by its exec alone */
	(void)fx_capture(&f, "M");           /* a graph with no exec */
	CK_OK(toggle_sim_stream_begin_capture(s2));
	CK_OK(toggle_sim_launch_kernel(s2, rec_kernel, &f.args[0]));
	CK_OK(toggle_sim_memset(s2));
	CK_OK(toggle_sim_stream_begin_capture(f.s)); /* an empty capture */
	toggle_sim_destroy(f.sim);
}
END_TEST

/* ---- error strings, driver table ----------------------------------------------------- */

START_TEST(error_strings)
{
	static const CUresult known[] = {
		CUDA_SUCCESS,
		CUDA_ERROR_INVALID_VALUE,
		CUDA_ERROR_OUT_OF_MEMORY,
		CUDA_ERROR_INVALID_HANDLE,
		CUDA_ERROR_ILLEGAL_STATE,
		CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
	};
	const char *s = NULL;

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		s = NULL;
		CK_OK(toggle_sim_get_error_string(known[i], &s));
		ck_assert_ptr_nonnull(s);
		ck_assert_str_ne(s, "unknown error");
	}
	CK_OK(toggle_sim_get_error_string(CUDA_ERROR_INVALID_VALUE, &s));
	ck_assert_str_eq(s, "invalid argument");
	CK_OK(toggle_sim_get_error_string((CUresult)123456, &s));
	ck_assert_str_eq(s, "unknown error");
	CK_CU(toggle_sim_get_error_string(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

START_TEST(cu_table_is_the_sim)
{
	struct tg_cu cu;
	struct fx f;

	struct toggle_sim *owner;
	ck_assert_int_eq(toggle_sim_create(&owner), 0);
	toggle_sim_set_driver_version(owner, 12080);
	memset(&cu, 0xa5, sizeof(cu));
	tg_cu_load_sim(&cu, owner);
	ck_assert_ptr_eq(cu.sim, owner);
	ck_assert_int_eq(cu.driver_version, 12080);
	ck_assert_ptr_nonnull(cu.planner_image);
	ck_assert(cu.launch_kernel_ex == toggle_sim_launch_kernel_ex);
	ck_assert(cu.stream_batch_mem_op == toggle_sim_stream_batch_mem_op);
	ck_assert(tg_cu_device_ready(&cu, NULL));
	ck_assert(tg_cu_has_64bit_memops(&cu));
	toggle_sim_destroy(owner);
	tg_cu_load_sim(&cu, NULL); /* a NULL simulator reports driver version 0 */
	ck_assert_int_eq(cu.driver_version, 0);
	cu.driver_version = 13000;
	ck_assert(cu.stream_get_capture_info == toggle_sim_stream_get_capture_info);
	ck_assert(cu.graph_node_get_type == toggle_sim_graph_node_get_type);
	ck_assert(cu.graph_node_set_enabled == toggle_sim_graph_node_set_enabled);
	ck_assert(cu.graph_node_get_enabled == toggle_sim_graph_node_get_enabled);
	ck_assert(cu.graph_launch == toggle_sim_graph_launch);
	ck_assert(cu.graph_upload == toggle_sim_graph_upload);
	ck_assert(cu.get_error_string == toggle_sim_get_error_string);
	ck_assert_int_eq(cu.driver_version, 13000);
	ck_assert_ptr_null(cu.dl);

	/* Through the table, as libtoggle calls it. */
	fx_open(&f);
	CUgraph g = fx_capture(&f, "KK");
	CUgraphExec ex = instantiate(g);
	CK_OK(cu.graph_node_set_enabled(ex, f.nodes[0], 0));
	CK_OK(cu.graph_launch(ex, f.s));
	rec_expect(&f.rec, (const int[]){ 1 }, 1);
	toggle_sim_destroy(f.sim);
}
END_TEST

static Suite *sim_suite(void)
{
	Suite *s = suite_create("sim");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, create_destroy);
	tcase_add_test(tc, null_handles_refused);
	tcase_add_test(tc, wrong_kind_refused);
	tcase_add_test(tc, launch_without_capture_runs_now);
	tcase_add_test(tc, capture_records_nodes);
	tcase_add_test(tc, capture_state_errors);
	tcase_add_test(tc, capture_info_fields);
	tcase_add_test(tc, capture_ids_unique);
	tcase_add_test(tc, many_nodes_keep_handles);
	tcase_add_test(tc, launch_runs_in_order);
	tcase_add_test(tc, disabled_nodes_skipped);
	tcase_add_test(tc, execs_are_independent);
	tcase_add_test(tc, foreign_node_refused);
	tcase_add_test(tc, instantiate_mid_capture_snapshots);
	tcase_add_test(tc, launch_and_upload_errors);
	tcase_add_test(tc, graph_destroyed_before_exec);
	tcase_add_test(tc, fail_skip_times);
	tcase_add_test(tc, fail_changes_nothing);
	tcase_add_test(tc, counters_count_every_call);
	tcase_add_test(tc, two_sims_independent);
	tcase_add_test(tc, stream_destroyed_mid_capture);
	tcase_add_test(tc, destroy_frees_everything);
	tcase_add_test(tc, error_strings);
	tcase_add_test(tc, cu_table_is_the_sim);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(sim_suite());
}
