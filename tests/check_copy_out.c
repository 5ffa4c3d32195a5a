/*
 * check_copy_out.c - the built-in copy producer: toggle_copy_out copies
 * contiguous and strided rows and is toggled like any producer in lazy,
 * eager and device mode (ground truth from the destination buffers, a
 * sentinel written before every replay); outside a capture, a record that
 * fails after the launch (the graph fails closed), bad input, a NULL agent.
 * The simulator, the agent, its kernels and the capture helpers are the
 * region suites' fixture (tests/fixture_region.h).  Split out of
 * check_region.c (issue 29).
 */
#include "fixture_region.h"

/* ---- toggle_copy_out ---------------------------------------------------------------- */

#define ROWS 5
#define ROWB 12  /* bytes per row */
#define SPITCH 40
#define DPITCH 16
#define CONTIG 96 /* bytes of the contiguous copy */

struct cbuf {
	unsigned char *src, *dst_c, *dst_s; /* host views of device memory */
	CUdeviceptr d_src, d_dst_c, d_dst_s;
};

static void cbuf_alloc(struct rfx *f, struct cbuf *b)
{
	ck_assert_int_eq(toggle_sim_mem_alloc(f->sim, &b->d_src, ROWS * SPITCH), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_mem_alloc(f->sim, &b->d_dst_c, CONTIG), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_mem_alloc(f->sim, &b->d_dst_s, ROWS * DPITCH), CUDA_SUCCESS);
	b->src = (unsigned char *)(uintptr_t)b->d_src;
	b->dst_c = (unsigned char *)(uintptr_t)b->d_dst_c;
	b->dst_s = (unsigned char *)(uintptr_t)b->d_dst_s;
}

static void cbuf_free(struct rfx *f, struct cbuf *b)
{
	ck_assert_int_eq(toggle_sim_mem_free(f->sim, b->d_src), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_mem_free(f->sim, b->d_dst_c), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_mem_free(f->sim, b->d_dst_s), CUDA_SUCCESS);
}

static struct toggle_copy copy_contig(const struct cbuf *b)
{
	return (struct toggle_copy){.dst = b->d_dst_c, .src = b->d_src, .row_bytes = CONTIG,
				    .rows = 1};
}

static struct toggle_copy copy_strided(const struct cbuf *b)
{
	/* rows of 12 bytes, 40 apart in the source, 16 apart in the destination */
	return (struct toggle_copy){.dst = b->d_dst_s, .src = b->d_src + 4, .row_bytes = ROWB,
				    .rows = ROWS, .dst_pitch = DPITCH, .src_pitch = SPITCH};
}

/* Whether dst holds the copy (and the gaps still their sentinel), or only sentinel. */
static bool contig_is(const struct cbuf *b, bool copied)
{
	for (int i = 0; i < CONTIG; i++)
		if (b->dst_c[i] != (copied ? b->src[i] : 0xab))
			return false;
	return true;
}

static bool strided_is(const struct cbuf *b, bool copied)
{
	for (int r = 0; r < ROWS; r++)
		for (int c = 0; c < DPITCH; c++) {
			unsigned char want = copied && c < ROWB ? b->src[4 + r * SPITCH + c] : 0xab;
			if (b->dst_s[r * DPITCH + c] != want)
				return false;
		}
	return true;
}

/* copy_out in a capture with other kernels, toggled over random sets in mode _i. */
START_TEST(copy_out_toggled)
{
	struct rfx f;
	enum toggle_mode mode = (enum toggle_mode)_i;
	rfx_open(&f, mode, true);
	struct cbuf b;
	cbuf_alloc(&f, &b);
	struct toggle_copy cc = copy_contig(&b), cs = copy_strided(&b);
	begin(&f);
	ck_assert_int_eq(toggle_capture_planner(f.agent, f.s[0]), 0);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 2), &cc), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(2, 5), &cs), 0);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 2);
	instantiate(&f);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &gs), 0);
	ck_assert_int_eq(gs.mode, mode); /* strict: device mode really toggles on the device */
	struct toggle_stats st0;
	toggle_stats_get(f.agent, &st0);
	uint64_t rng = 0x1234 + (uint64_t)_i;
	for (int step = 0; step < 200; step++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		bool on_c = (rng >> 33) & 1, on_s = (rng >> 34) & 1;
		struct toggle_set s;
		toggle_set_clear(&s);
		if (on_c)
			ck_assert_int_eq(toggle_set_add(&s, hk(0, 2)), 0);
		if (on_s)
			ck_assert_int_eq(toggle_set_add(&s, hk(2, 5)), 0);
		ck_assert_int_eq(toggle_set_enabled(f.agent, &s), 0);
		struct toggle_set eff;
		ck_assert_int_eq(toggle_step_begin(f.agent, step, &eff), 0);
		ck_assert(toggle_set_equal(&eff, &s));
		/* fresh source, sentinel destinations */
		for (int i = 0; i < ROWS * SPITCH; i++)
			b.src[i] = (unsigned char)(step * 7 + i);
		memset(b.dst_c, 0xab, CONTIG);
		memset(b.dst_s, 0xab, ROWS * DPITCH);
		f.ran = 0;
		int rc = toggle_graph_launch(f.agent, f.graph, f.exec, f.s[0]);
		ck_assert_msg(rc == 0, "launch: %s", toggle_last_error(f.agent));
		toggle_sim_synchronize(f.sim);
		ck_assert_uint_eq(f.ran, B(0) | B(1));
		ck_assert_msg(contig_is(&b, on_c), "step %d: contiguous copy %s", step,
			      on_c ? "missing" : "ran while off");
		ck_assert_msg(strided_is(&b, on_s), "step %d: strided copy %s", step,
			      on_s ? "missing" : "ran while off");
	}
	struct toggle_stats st;
	toggle_stats_get(f.agent, &st);
	if (mode == TOGGLE_MODE_DEVICE)
		ck_assert_uint_eq(st.node_set_calls, st0.node_set_calls); /* all on the device */
	else
		ck_assert_uint_gt(st.node_set_calls, st0.node_set_calls);
	toggle_sim_synchronize(f.sim);
	CUgraphExec ex = f.exec;
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(ex), CUDA_SUCCESS);
	cbuf_free(&f, &b);
	rfx_close(&f);
}
END_TEST

/* The kernel a recorded copy_out node runs (the simulator's name of its function). */
static const char *node_kernel_of(CUgraph graph, CUdeviceptr dst)
{
	CUgraphNode nodes[16];
	size_t n = 16;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(graph, nodes, &n), CUDA_SUCCESS);
	for (size_t i = 0; i < n; i++) {
		CUgraphNodeType t;
		CUDA_KERNEL_NODE_PARAMS p;
		ck_assert_int_eq(toggle_sim_graph_node_get_type(nodes[i], &t), CUDA_SUCCESS);
		if (t != CU_GRAPH_NODE_TYPE_KERNEL ||
		    toggle_sim_graph_kernel_node_get_params(nodes[i], &p) != CUDA_SUCCESS)
			continue;
		const char *name = toggle_sim_function_name(p.func);
		CUdeviceptr d;
		if (name == NULL || strncmp(name, "tg_copy_out", 11) != 0)
			continue;
		memcpy(&d, p.kernelParams[0], sizeof d);
		if (d == dst)
			return name;
	}
	return NULL;
}

/*
 * One row of 16-byte accesses (a contiguous, 16-byte aligned copy, also one
 * given as rows whose pitches equal their length) runs tg_copy_out_row16,
 * the kernel without the other cases' code; any other shape tg_copy_out.
 * Both copy the right bytes at every replay.
 */
START_TEST(copy_out_kernel_by_shape)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	CUdeviceptr src, dst[4];
	ck_assert_int_eq(toggle_sim_mem_alloc(f.sim, &src, 256), CUDA_SUCCESS);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(toggle_sim_mem_alloc(f.sim, &dst[i], 256), CUDA_SUCCESS);
	ck_assert_uint_eq(src % 16, 0); /* calloc's alignment: the cases below depend on it */
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(dst[i] % 16, 0);
	const struct toggle_copy cases[4] = {
		{.dst = dst[0], .src = src, .row_bytes = 96, .rows = 1},      /* row16 */
		{.dst = dst[1], .src = src + 4, .row_bytes = 96, .rows = 1},  /* 4-byte accesses */
		{.dst = dst[2], .src = src, .row_bytes = 32, .rows = 3,       /* pitches = length: */
		 .dst_pitch = 32, .src_pitch = 32},                          /* one row, row16 */
		{.dst = dst[3], .src = src, .row_bytes = 16, .rows = 3,       /* strided rows */
		 .dst_pitch = 16, .src_pitch = 48},
	};
	static const char *const want[4] = {"tg_copy_out_row16", "tg_copy_out",
					    "tg_copy_out_row16", "tg_copy_out"};
	begin(&f);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, (uint16_t)i), &cases[i]), 0);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 4);
	for (int i = 0; i < 4; i++) {
		const char *got = node_kernel_of(f.graph, dst[i]);
		ck_assert_msg(got && strcmp(got, want[i]) == 0, "copy %d runs %s, not %s", i,
			      got ? got : "no copy kernel", want[i]);
	}
	instantiate(&f);
	struct toggle_set all;
	toggle_set_clear(&all);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(toggle_set_add(&all, hk(0, (uint16_t)i)), 0);
	ck_assert_int_eq(toggle_set_enabled(f.agent, &all), 0);
	ck_assert_int_eq(toggle_step_begin(f.agent, 0, NULL), 0);
	unsigned char *s = (unsigned char *)(uintptr_t)src;
	for (int i = 0; i < 256; i++)
		s[i] = (unsigned char)(i * 5 + 1);
	ck_assert_int_eq(toggle_graph_launch(f.agent, f.graph, f.exec, f.s[0]), 0);
	toggle_sim_synchronize(f.sim);
	for (int i = 0; i < 4; i++) {
		const struct toggle_copy *c = &cases[i];
		const unsigned char *d = (const unsigned char *)(uintptr_t)dst[i];
		const unsigned char *from = (const unsigned char *)(uintptr_t)c->src;
		for (size_t r = 0; r < c->rows; r++)
			for (size_t k = 0; k < c->row_bytes; k++) {
				size_t dp = c->rows > 1 ? c->dst_pitch : c->row_bytes;
				size_t sp = c->rows > 1 ? c->src_pitch : c->row_bytes;
				ck_assert_msg(d[r * dp + k] == from[r * sp + k],
					      "copy %d: byte %zu of row %zu", i, k, r);
			}
	}
	CUgraphExec ex = f.exec;
	ck_assert_int_eq(toggle_graph_bind(f.agent, f.graph, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(ex), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_mem_free(f.sim, src), CUDA_SUCCESS);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(toggle_sim_mem_free(f.sim, dst[i]), CUDA_SUCCESS);
	rfx_close(&f);
}
END_TEST

/* Outside a capture the copy just runs; into a capture outside a window it is refused. */
START_TEST(copy_out_outside_capture)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	struct cbuf b;
	cbuf_alloc(&f, &b);
	for (int i = 0; i < ROWS * SPITCH; i++)
		b.src[i] = (unsigned char)(i * 3 + 1);
	memset(b.dst_s, 0xab, ROWS * DPITCH);
	struct toggle_copy cs = copy_strided(&b);
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &cs), 0);
	toggle_sim_synchronize(f.sim);
	ck_assert(strided_is(&b, true));
	ck_assert_uint_eq(toggle_graph_count(f.agent), 0);

	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[0]), CUDA_SUCCESS);
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX);
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &cs), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX), launches);
	ck_assert_uint_eq(anomalies(&f).record_outside_window, 1);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &f.graph), CUDA_SUCCESS);
	ck_assert_uint_eq(toggle_sim_graph_node_count(f.graph), 0);
	cbuf_free(&f, &b);
	rfx_close(&f);
}
END_TEST

/*
 * A producer launched into a capture whose record then fails leaves its
 * kernel in the graph unrecorded: the graph fails closed like any late
 * producer.  _i % 3: 0 toggle_copy_out, the node's type query fails; 1
 * toggle_copy_out, the capture query after the launch fails (and when asked
 * again); 2 toggle_record_producer after a plain launch, the type query
 * fails.  _i / 3: lazy, device mode.
 */
START_TEST(copy_out_record_failure_fails_closed)
{
	struct rfx f;
	int how = _i % 3;
	enum toggle_mode mode = _i / 3 ? TOGGLE_MODE_DEVICE : TOGGLE_MODE_LAZY;
	rfx_open(&f, mode, false);
	struct cbuf b;
	cbuf_alloc(&f, &b);
	struct toggle_copy cc = copy_contig(&b);
	begin(&f);
	kernel(&f, 0, 0);
	if (how == 1)
		toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO, 1, 2, CUDA_ERROR_INVALID_VALUE);
	else
		toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_GET_TYPE, 0, 1, CUDA_ERROR_INVALID_VALUE);
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX);
	if (how == 2) {
		kernel(&f, 0, 1);
		ck_assert_int_eq(toggle_record_producer(f.agent, f.s[0], hk(0, 2)), TOGGLE_ECUDA);
	} else {
		ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 2), &cc), TOGGLE_ECUDA);
		/* the kernel was launched into the capture before the record failed */
		ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX),
				  launches + 1);
	}
	end(&f);
	ck_assert_uint_eq(toggle_sim_graph_node_count(f.graph), 2);
	ck_assert_uint_eq(recorded(&f), 0);
	memset(b.dst_c, 0xab, CONTIG);
	assert_late(&f, "producer hook 0:2 was launched into its capture but not recorded");
	ck_assert(contig_is(&b, false));
	if (mode == TOGGLE_MODE_LAZY)
		recapture_works(&f);
	cbuf_free(&f, &b);
	rfx_close(&f);
}
END_TEST

/* Bad copies are refused before anything is launched or recorded. */
START_TEST(copy_out_bad_input)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	struct cbuf b;
	cbuf_alloc(&f, &b);
	begin(&f);
	struct toggle_copy ok = copy_strided(&b), c;
	uint64_t launches = toggle_sim_calls(f.sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX);
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(NT, 0), &ok), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, NL), &ok), TOGGLE_ERANGE);
	c = ok, c.rows = 0;
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	c = ok, c.row_bytes = 0;
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	c = ok, c.dst = 0;
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	c = ok, c.dst_pitch = ROWB - 1;
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	c = ok, c.src_pitch = 1;
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	c = ok, c.rows = SIZE_MAX / 2, c.src_pitch = SIZE_MAX / 4;
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "overflow"));
	c = ok, c.dst = UINT64_MAX - 8;
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	c = ok, c.dst = ok.src + SPITCH; /* inside the source's rows */
	ck_assert_int_eq(toggle_copy_out(f.agent, f.s[0], hk(0, 0), &c), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "overlap"));
	ck_assert_uint_eq(toggle_sim_calls(f.sim, TOGGLE_SIM_OP_LAUNCH_KERNEL_EX), launches);
	end(&f);
	ck_assert_uint_eq(toggle_sim_graph_node_count(f.graph), 0);
	ck_assert_uint_eq(toggle_graph_count(f.agent), 0);
	cbuf_free(&f, &b);
	rfx_close(&f);
}
END_TEST

/* A NULL agent: TOGGLE_EINVAL (abort does nothing), as for every other call. */
START_TEST(region_null_agent)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	struct cbuf b;
	cbuf_alloc(&f, &b);
	struct toggle_copy cc = copy_contig(&b);
	size_t n = 99;
	ck_assert_int_eq(toggle_producer_begin(NULL, f.s[0]), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_producer_end(NULL, f.s[0], hk(0, 0), &n), TOGGLE_EINVAL);
	ck_assert_uint_eq(n, 0);
	toggle_producer_abort(NULL, f.s[0]);
	ck_assert_int_eq(toggle_copy_out(NULL, f.s[0], hk(0, 0), &cc), TOGGLE_EINVAL);
	cbuf_free(&f, &b);
	rfx_close(&f);
}
END_TEST

static Suite *copy_out_suite(void)
{
	Suite *s = suite_create("copy_out");
	TCase *tc2 = tcase_create("copy_out");
	tcase_add_loop_test(tc2, copy_out_toggled, TOGGLE_MODE_LAZY, TOGGLE_MODE_DEVICE + 1);
	tcase_add_test(tc2, copy_out_kernel_by_shape);
	tcase_add_test(tc2, copy_out_outside_capture);
	tcase_add_test(tc2, copy_out_bad_input);
	tcase_add_loop_test(tc2, copy_out_record_failure_fails_closed, 0, 6);
	suite_add_tcase(s, tc2);
	TCase *tc = tcase_create("region");
	tcase_add_test(tc, region_null_agent);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(copy_out_suite());
}
