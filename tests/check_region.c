/*
 * check_region.c - producer regions and the built-in copy producer on the
 * simulator: a region records every kernel node its capture gained (one
 * kernel, several, streams forked and joined inside it) and nothing else;
 * memcpy/memset nodes, an empty region, unjoined or escaping forks, nesting
 * and use outside a capture are refused with nothing recorded; abort drops
 * a region.  A refused or aborted region whose capture gained nodes leaves
 * them in the graph unrecorded: that graph fails closed (late: bind and
 * launch refused, nothing runs) until captured again; one that gained
 * nothing leaves the graph alone.  The same holds for toggle_copy_out and
 * toggle_record_producer when the record fails after the launch.
 * toggle_copy_out copies contiguous and strided rows and is
 * toggled like any producer in lazy, eager and device mode (ground truth
 * from the destination buffers, a sentinel written before every replay).
 * Side streams reused by every region (PyTorch's pattern) stay exact.
 * toggle_layout equals the compiler's offsetof/sizeof.
 */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

#define NT 3
#define NL 8
#define NS 3
#define NK 64 /* kernel ids */

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

struct rfx;

struct kern {
	struct rfx *f;
	int id;
};

struct rfx {
	struct toggle_sim *sim;
	CUstream s[NS];
	CUevent ev[2];
	struct toggle_agent *agent;
	struct kern k[NK];
	uint64_t ran; /* bit per kernel id that ran since the last reset */
	CUgraph graph;
	CUgraphExec exec;
};

static void kern_fn(void *arg)
{
	struct kern *k = arg;
	k->f->ran |= 1ull << k->id;
}

static void rfx_open(struct rfx *f, enum toggle_mode mode, bool strict)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	for (int i = 0; i < NS; i++)
		ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->s[i]), CUDA_SUCCESS);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(toggle_sim_event_create(f->sim, &f->ev[i]), CUDA_SUCCESS);
	for (int i = 0; i < NK; i++)
		f->k[i] = (struct kern){f, i};
	struct toggle_config cfg = {
		.name = "region-test",
		.catalog = {.type_names = type_names, .n_types = NT, .n_layers = NL},
		.mode = mode,
		.strict = strict,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = f->sim,
	};
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->agent), 0);
	ck_assert_int_eq(toggle_agent_mode(f->agent), mode);
}

static void rfx_close(struct rfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0);
	toggle_sim_destroy(f->sim);
}

static void kernel(struct rfx *f, int si, int id)
{
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[si], kern_fn, &f->k[id]), CUDA_SUCCESS);
}

/* Fork stream `to` from `from` (or join `from` into `to`): record on from, wait on to. */
static void edge(struct rfx *f, int from, int to, int ev)
{
	ck_assert_int_eq(toggle_sim_event_record(f->ev[ev], f->s[from]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_wait_event(f->s[to], f->ev[ev], 0), CUDA_SUCCESS);
}

static void begin(struct rfx *f)
{
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
}

static void end(struct rfx *f)
{
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
}

static struct toggle_hook hk(int type, int layer)
{
	return (struct toggle_hook){(uint16_t)type, (uint16_t)layer};
}

static size_t region_end(struct rfx *f, int si, struct toggle_hook h)
{
	size_t n = 99;
	int rc = toggle_producer_end(f->agent, f->s[si], h, &n);
	ck_assert_msg(rc == 0, "toggle_producer_end: %d (%s)", rc, toggle_last_error(f->agent));
	return n;
}

/* Set the standing set to the hooks of `on` (NULL-terminated list), launch, return what ran. */
static uint64_t run_with(struct rfx *f, const struct toggle_hook *on, size_t n_on)
{
	struct toggle_set s;
	toggle_set_clear(&s);
	for (size_t i = 0; i < n_on; i++)
		ck_assert_int_eq(toggle_set_add(&s, on[i]), 0);
	ck_assert_int_eq(toggle_set_enabled(f->agent, &s), 0);
	if (toggle_agent_mode(f->agent) == TOGGLE_MODE_EAGER)
		ck_assert_int_eq(toggle_apply_all(f->agent), 0);
	f->ran = 0;
	int rc = toggle_graph_launch(f->agent, f->graph, f->exec, f->s[0]);
	ck_assert_msg(rc == 0, "launch: %d (%s)", rc, toggle_last_error(f->agent));
	toggle_sim_synchronize(f->sim);
	return f->ran;
}

static void instantiate(struct rfx *f)
{
	int rc = toggle_graph_instantiate(f->agent, f->graph, &f->exec);
	ck_assert_msg(rc == 0, "instantiate: %d (%s)", rc, toggle_last_error(f->agent));
}

static uint32_t recorded(struct rfx *f)
{
	struct toggle_graph_status gs;
	if (toggle_graph_status(f->agent, f->graph, &gs) != 0)
		return 0;
	return gs.nodes;
}

static struct toggle_anomalies anomalies(struct rfx *f)
{
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	return an;
}

#define B(i) (1ull << (i))

/*
 * A refused region left kernels in f->graph unrecorded: the graph is late.
 * Its note names the region's hook; bind, instantiate's bind and launch are
 * refused with TOGGLE_ECAPTURE and nothing runs, whatever the set.
 */
static void assert_late(struct rfx *f, const char *note_has)
{
	struct toggle_set all;
	toggle_set_fill(&all, toggle_agent_catalog(f->agent));
	for (int set = 0; set < 2; set++) {
		struct toggle_set none;
		toggle_set_clear(&none);
		ck_assert_int_eq(toggle_set_enabled(f->agent, set ? &all : &none), 0);
		CUgraphExec ex = NULL;
		ck_assert_int_eq(toggle_sim_graph_instantiate(&ex, f->graph), CUDA_SUCCESS);
		for (int bind = 0; bind < 2; bind++) {
			if (bind) {
				ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, ex),
						 TOGGLE_ECAPTURE);
				ck_assert_ptr_nonnull(strstr(toggle_last_error(f->agent),
							     "capture it again"));
			}
			uint64_t launches = toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH);
			f->ran = 0;
			int rc = toggle_graph_launch(f->agent, f->graph, ex, f->s[0]);
			toggle_sim_synchronize(f->sim);
			ck_assert_msg(rc == TOGGLE_ECAPTURE, "launch: %d, ran 0x%llx", rc,
				      (unsigned long long)f->ran);
			ck_assert_uint_eq(f->ran, 0);
			ck_assert_uint_eq(toggle_sim_calls(f->sim, TOGGLE_SIM_OP_GRAPH_LAUNCH), launches);
		}
		ck_assert_int_eq(toggle_sim_exec_destroy(ex), CUDA_SUCCESS);
	}
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph, &gs), 0);
	ck_assert_msg(strstr(gs.note, note_has) != NULL, "note '%s' lacks '%s'", gs.note, note_has);
	ck_assert(!gs.bound);
	/* toggle_graph_instantiate: a graph with producers recorded binds there, refused;
	 * without, its exec is unbound; its launch is refused either way. */
	CUgraphExec ex = NULL;
	int rc = toggle_graph_instantiate(f->agent, f->graph, &ex);
	ck_assert_msg(rc == (gs.nodes ? TOGGLE_ECAPTURE : 0), "instantiate: %d", rc);
	ck_assert_ptr_nonnull(ex);
	f->ran = 0;
	ck_assert_int_eq(toggle_graph_launch(f->agent, f->graph, ex, f->s[0]), TOGGLE_ECAPTURE);
	toggle_sim_synchronize(f->sim);
	ck_assert_uint_eq(f->ran, 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(ex), CUDA_SUCCESS);
}

/*
 * The late graph is destroyed and captured again properly, into the same
 * handle (the driver may reuse it): the new capture's record is clean, binds,
 * and toggles its region exactly.
 */
static void recapture_works(struct rfx *f)
{
	CUgraph late = f->graph;
	toggle_sim_set_handle_reuse(f->sim, true);
	ck_assert_int_eq(toggle_sim_graph_destroy(late), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], kern_fn, &f->k[30]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_producer_begin(f->agent, f->s[0]), 0);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], kern_fn, &f->k[31]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[0], kern_fn, &f->k[32]), CUDA_SUCCESS);
	size_t n = 0;
	ck_assert_int_eq(toggle_producer_end(f->agent, f->s[0], (struct toggle_hook){2, 3}, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
	toggle_sim_set_handle_reuse(f->sim, false);
	ck_assert_ptr_eq(f->graph, late);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f->agent, f->graph, &gs), 0);
	ck_assert_str_eq(gs.note, "");
	ck_assert_uint_eq(gs.nodes, 2);
	instantiate(f);
	ck_assert_uint_eq(run_with(f, NULL, 0), B(30));
	ck_assert_uint_eq(run_with(f, (struct toggle_hook[]){{2, 3}}, 1), B(30) | B(31) | B(32));
	ck_assert_uint_eq(run_with(f, NULL, 0), B(30));
	toggle_sim_synchronize(f->sim);
	ck_assert_int_eq(toggle_graph_bind(f->agent, f->graph, NULL), 0);
	ck_assert_int_eq(toggle_sim_exec_destroy(f->exec), CUDA_SUCCESS);
	f->exec = NULL;
}

/* ---- regions ------------------------------------------------------------------ */

START_TEST(region_one_kernel)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	kernel(&f, 0, 2);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), B(0) | B(1) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 2)}, 1), B(0) | B(2));
	rfx_close(&f);
}
END_TEST

/* Two regions of several kernels each, plus a kernel between them that no region has. */
START_TEST(region_several_kernels)
{
	struct rfx f;
	rfx_open(&f, (enum toggle_mode)_i, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	kernel(&f, 0, 3);
	ck_assert_uint_eq(region_end(&f, 0, hk(1, 4)), 3);
	kernel(&f, 0, 4);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 5);
	kernel(&f, 0, 6);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(2, 7), NULL), 0); /* n may be NULL */
	end(&f);
	ck_assert_uint_eq(recorded(&f), 5);
	instantiate(&f);
	uint64_t a = B(1) | B(2) | B(3), b = B(5) | B(6);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(4));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(1, 4)}, 1), a | B(4));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(2, 7)}, 1), b | B(4));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(1, 4), hk(2, 7)}, 2), a | b | B(4));
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(4));
	struct toggle_set hooks;
	ck_assert_int_eq(toggle_graph_hooks(f.agent, f.graph, &hooks), 0);
	ck_assert_uint_eq(toggle_set_count(&hooks), 2);
	rfx_close(&f);
}
END_TEST

/*
 * s0: k0 | region: k1, fork s1 (k2, k3 on s1), k4 on s0, join s1, k5 | k6.
 * The region holds k1..k5; k0 and k6 are outside it.
 */
START_TEST(region_forked_and_joined)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	edge(&f, 0, 1, 0); /* fork */
	kernel(&f, 1, 2);
	kernel(&f, 1, 3);
	kernel(&f, 0, 4);
	edge(&f, 1, 0, 1); /* join */
	kernel(&f, 0, 5);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 5);
	kernel(&f, 0, 6);
	end(&f);
	instantiate(&f);
	uint64_t region = B(1) | B(2) | B(3) | B(4) | B(5);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(6));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), region | B(0) | B(6));
	rfx_close(&f);
}
END_TEST

/* A region that ends with its fork as the frontier (joined into the end): still exact. */
START_TEST(region_join_at_the_end)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 1);
	kernel(&f, 0, 2);
	edge(&f, 1, 0, 1); /* s0's frontier is now {k2, k1} */
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 3)), 2);
	kernel(&f, 0, 3);
	end(&f);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(3));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 3)}, 1), B(0) | B(1) | B(2) | B(3));
	rfx_close(&f);
}
END_TEST

/*
 * The torch pattern: one side stream reused by every region.  At the second
 * fork the side stream still depends on its own last node (a wait adds to
 * a capturing stream's dependencies), which lies before the region: the
 * walk must stop there, not refuse or take older nodes in.
 */
START_TEST(region_side_stream_reused)
{
	struct rfx f;
	rfx_open(&f, (enum toggle_mode)_i, false);
	begin(&f);
	for (int r = 0; r < 3; r++) {
		kernel(&f, 0, 10 * r);
		ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
		kernel(&f, 0, 10 * r + 1);
		edge(&f, 0, 1, 0);
		kernel(&f, 1, 10 * r + 2);
		edge(&f, 1, 0, 1);
		ck_assert_uint_eq(region_end(&f, 0, hk(0, r)), 2);
	}
	kernel(&f, 0, 40);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 6);
	instantiate(&f);
	uint64_t always = B(0) | B(10) | B(20) | B(40);
	ck_assert_uint_eq(run_with(&f, NULL, 0), always);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), always | B(11) | B(12));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0), hk(0, 2)}, 2),
			  always | B(1) | B(2) | B(21) | B(22));
	rfx_close(&f);
}
END_TEST

/*
 * A fork inside the region not joined before its end: refused, nothing
 * recorded, and the graph, which holds the region's kernels unrecorded,
 * fails closed until it is captured again.
 */
START_TEST(region_unjoined_fork_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 2);
	kernel(&f, 0, 3);
	size_t n = 99;
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), &n), TOGGLE_EINVAL);
	ck_assert_uint_eq(n, 0);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "join every stream"));
	edge(&f, 1, 0, 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	assert_late(&f, "region of hook 0:0 (3 nodes)");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/* A stream forked before the region and joined inside it: its older kernel is not the region's. */
START_TEST(region_fork_from_before)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 1); /* before the region, on s1 */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 2);
	edge(&f, 1, 0, 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 1);
	kernel(&f, 0, 3);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(1) | B(3));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(0) | B(1) | B(2) | B(3));
	rfx_close(&f);
}
END_TEST

/*
 * Two regions open at once on two streams of one capture: each sees the
 * other's work.  The refused one leaves its kernel unrecorded at that point,
 * so the graph fails closed even though the other region takes it in later.
 */
START_TEST(region_two_streams_one_capture_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	edge(&f, 0, 1, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[1]), 0);
	kernel(&f, 1, 1);
	kernel(&f, 0, 2);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[1], hk(0, 1), NULL), TOGGLE_EINVAL);
	edge(&f, 1, 0, 1);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), 0); /* joined: k1, k2 */
	end(&f);
	ck_assert_uint_eq(recorded(&f), 2);
	assert_late(&f, "region of hook 0:1 (2 nodes)");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/*
 * memcpy and memset nodes refuse the whole region, with how to make the copy
 * a kernel; the region's kernels are in the graph unrecorded: it fails closed.
 */
START_TEST(region_copy_nodes_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	for (int memcpy_node = 0; memcpy_node < 2; memcpy_node++) {
		uint64_t nk = anomalies(&f).record_not_kernel;
		ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
		kernel(&f, 0, 1);
		if (memcpy_node)
			ck_assert_int_eq(toggle_sim_memcpy(f.s[0]), CUDA_SUCCESS);
		else
			ck_assert_int_eq(toggle_sim_memset(f.s[0]), CUDA_SUCCESS);
		kernel(&f, 0, 2);
		size_t n = 99;
		ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), &n), TOGGLE_ENOTKERNEL);
		ck_assert_uint_eq(n, 0);
		const char *e = toggle_last_error(f.agent);
		ck_assert_ptr_nonnull(strstr(e, memcpy_node ? "memcpy" : "memset"));
		ck_assert_ptr_nonnull(strstr(e, "torch.mul(x, 1, out=buf)"));
		ck_assert_ptr_nonnull(strstr(e, "toggle_copy_out"));
		ck_assert_uint_eq(anomalies(&f).record_not_kernel, nk + 1);
		ck_assert_uint_eq(recorded(&f), 0);
	}
	/* The region is closed: a later one on the same stream records normally... */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 3);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	/* ... but the refused regions' kernels 1 and 2 would run at every replay. */
	assert_late(&f, "region of hook 0:0 (3 nodes) was captured but not recorded: a node that "
		    "is not a kernel");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

START_TEST(region_without_kernel_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	uint64_t nk = anomalies(&f).record_not_kernel;
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ENOTKERNEL);
	ck_assert_uint_eq(anomalies(&f).record_not_kernel, nk + 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	/* Nothing was captured in the region: the graph is left alone (unrelated, runs). */
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &(struct toggle_graph_status){0}),
			 TOGGLE_ENOENT);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f.exec, f.graph), CUDA_SUCCESS);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0));
	rfx_close(&f);
}
END_TEST

/*
 * Refusals of regions that captured nothing (gained no node) leave the graph
 * alone: an empty region, one closed with a hook outside the catalog, after
 * the window closed, or aborted.  The graph's recorded producers toggle as
 * usual.
 */
START_TEST(region_refused_empty_leaves_graph_alone)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 2), NULL), TOGGLE_ENOTKERNEL);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(NT, 0), NULL), TOGGLE_ERANGE);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	toggle_producer_abort(f.agent, f.s[0]);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 3), NULL), TOGGLE_ECAPTURE);
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	kernel(&f, 0, 2);
	end(&f);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &gs), 0);
	ck_assert_str_eq(gs.note, "");
	ck_assert_uint_eq(gs.nodes, 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), B(0) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), B(0) | B(1) | B(2));
	rfx_close(&f);
}
END_TEST

START_TEST(region_outside_a_capture)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	/* No capture window. */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_outside_window, 1);
	/* A window, but the stream is not capturing. */
	ck_assert_int_eq(toggle_capture_begin(f.agent), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_not_capturing, 1);
	/* Nothing was opened: end has no region. */
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);

	/* The window closes between begin and end: refused, nothing recorded, and k1
	 * is in the graph unrecorded: it fails closed. */
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_capture_end(f.agent), 0);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_outside_window, 2);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &f.graph), CUDA_SUCCESS);
	ck_assert_uint_eq(recorded(&f), 0);
	assert_late(&f, "region of hook 0:0 (1 nodes) was captured but not recorded: no capture "
		    "window");

	/* The capture ends between begin and end: refused. */
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &f.graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ECAPTURE);
	ck_assert_uint_eq(anomalies(&f).record_not_capturing, 2);
	ck_assert_uint_eq(recorded(&f), 0);
	/* A hook outside the catalog: refused, and the graph fails closed. */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[0]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(NT, 0), NULL), TOGGLE_ERANGE);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	assert_late(&f, "region of hook 3:0 (1 nodes) was captured but not recorded: hook outside");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/*
 * A region still open when its capture ends (issue #28): its kernels are in
 * the graph unrecorded, and would run whatever the set: the graph fails
 * closed like every other refused record (late), found where it shows
 * first.  _i: 0 at toggle_capture_end; 1 the window stays open: at the
 * bind or launch; 2 at a toggle_producer_end made after the capture ended;
 * 3 the region captured nothing: the graph is left alone; 4 the graph is
 * destroyed and a stranger got its handle before the window closed: the
 * stranger is not touched.
 */
START_TEST(region_open_at_capture_end_fails_closed)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	if (_i != 3)
		kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &f.graph), CUDA_SUCCESS);
	if (_i == 4) {
		toggle_sim_set_handle_reuse(f.sim, true);
		CUgraph dead = f.graph;
		ck_assert_int_eq(toggle_sim_graph_destroy(dead), CUDA_SUCCESS);
		ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[1]), CUDA_SUCCESS);
		kernel(&f, 1, 5);
		ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[1], &f.graph), CUDA_SUCCESS);
		ck_assert_ptr_eq(f.graph, dead);
		toggle_sim_set_handle_reuse(f.sim, false);
	}
	if (_i == 2) {
		ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(1, 2), NULL), TOGGLE_ECAPTURE);
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
		assert_late(&f, "region of hook 1:2 was still open when its capture ended");
		recapture_works(&f);
	} else if (_i == 1) {
		assert_late(&f, "was still open when its capture ended");
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
		recapture_works(&f);
	} else {
		ck_assert_int_eq(toggle_capture_end(f.agent), 0);
		if (_i == 0) {
			assert_late(&f, "region on stream 0x");
			struct toggle_graph_status gs;
			ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &gs), 0);
			ck_assert_ptr_nonnull(strstr(gs.note, "was still open when its capture ended"));
			recapture_works(&f);
		} else {
			/* Left alone: it runs, untouched, whatever the set. */
			instantiate(&f);
			uint64_t all = _i == 3 ? B(0) : B(5); /* a plain kernel; the stranger's */
			ck_assert_uint_eq(run_with(&f, NULL, 0), all);
			ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), all);
		}
	}
	/* The region is closed: nothing is open on the stream any more. */
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	rfx_close(&f);
}
END_TEST

START_TEST(region_nested_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "do not nest"));
	kernel(&f, 0, 2);
	/* The outer region is still open and holds both kernels. */
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 2);
	/* Regions on two streams of two captures at once are independent. */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[2]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[2]), 0);
	kernel(&f, 2, 3);
	kernel(&f, 0, 4);
	ck_assert_uint_eq(region_end(&f, 2, hk(1, 0)), 1);
	ck_assert_uint_eq(region_end(&f, 0, hk(1, 1)), 1);
	CUgraph g2;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[2], &g2), CUDA_SUCCESS);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 3);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, g2, &gs), 0);
	ck_assert_uint_eq(gs.nodes, 1);
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(1) | B(2));
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(1, 1)}, 1), B(4));
	rfx_close(&f);
}
END_TEST

START_TEST(region_abort)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	toggle_producer_abort(f.agent, f.s[0]); /* nothing captured in it */
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	toggle_producer_abort(f.agent, f.s[0]); /* nothing open: nothing happens */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0); /* no longer "nested" */
	kernel(&f, 0, 2);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 1);
	/* A region left open when its capture ended is replaced by the next capture's. */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	end(&f);
	CUgraph first = f.graph;
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 4);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	CUgraph second = f.graph;
	f.graph = first;
	ck_assert_uint_eq(recorded(&f), 1); /* k2 */
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(2));
	f.graph = second;
	instantiate(&f);
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 1)}, 1), B(4));
	rfx_close(&f);
}
END_TEST

/*
 * Aborting a region whose capture gained kernels drops the region, but its
 * kernels are in the graph unrecorded: the graph fails closed (the
 * project's rule), until captured again.
 */
START_TEST(region_abort_with_kernels_fails_closed)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	kernel(&f, 0, 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	toggle_producer_abort(f.agent, f.s[0]);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_EINVAL);
	/* A later region of the same capture still records, the graph stays late. */
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 3);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 1)), 1);
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	assert_late(&f, "region (aborted) (2 nodes)");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/* A node of the region recorded already (toggle_record_producer): refused, the first stays. */
START_TEST(region_overlapping_record_refused)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	ck_assert_int_eq(toggle_record_producer(f.agent, f.s[0], hk(0, 0)), 0);
	kernel(&f, 0, 2);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 1), NULL), TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent), "already recorded"));
	end(&f);
	ck_assert_uint_eq(recorded(&f), 1);
	/* k2 is in the graph unrecorded. */
	assert_late(&f, "region of hook 0:1 (2 nodes) was captured but not recorded: a node "
		    "recorded already");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/* Device mode: a region's kernels are not device-updatable: that graph runs lazy on the host. */
START_TEST(region_in_device_mode_falls_back)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_DEVICE, false);
	begin(&f);
	ck_assert_int_eq(toggle_capture_planner(f.agent, f.s[0]), 0);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	ck_assert_uint_eq(region_end(&f, 0, hk(0, 0)), 2);
	end(&f);
	instantiate(&f);
	struct toggle_graph_status gs;
	ck_assert_int_eq(toggle_graph_status(f.agent, f.graph, &gs), 0);
	ck_assert(gs.device_fallback);
	ck_assert_ptr_nonnull(strstr(gs.note, "not device-updatable"));
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	ck_assert_uint_eq(run_with(&f, (struct toggle_hook[]){hk(0, 0)}, 1), B(1) | B(2));
	ck_assert_uint_eq(run_with(&f, NULL, 0), 0);
	rfx_close(&f);
}
END_TEST

/*
 * A failing driver call in the walk refuses the region and records nothing;
 * the region's kernels are in the graph: it fails closed.  _i: 0 the type
 * query fails, 1 the capture query at end fails (the graph is asked again),
 * 2 the capture query fails twice (cannot tell what the region gained:
 * fail closed all the same).
 */
START_TEST(region_driver_failure_records_nothing)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	begin(&f);
	ck_assert_int_eq(toggle_producer_begin(f.agent, f.s[0]), 0);
	kernel(&f, 0, 1);
	kernel(&f, 0, 2);
	if (_i == 0) /* the second node's type query fails */
		toggle_sim_fail(f.sim, TOGGLE_SIM_OP_NODE_GET_TYPE, 1, 1, CUDA_ERROR_INVALID_VALUE);
	else
		toggle_sim_fail(f.sim, TOGGLE_SIM_OP_GET_CAPTURE_INFO, 0, (uint64_t)_i,
				CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(toggle_producer_end(f.agent, f.s[0], hk(0, 0), NULL), TOGGLE_ECUDA);
	ck_assert_ptr_nonnull(strstr(toggle_last_error(f.agent),
				     _i ? "cuStreamGetCaptureInfo" : "cuGraphNodeGetType"));
	end(&f);
	ck_assert_uint_eq(recorded(&f), 0);
	ck_assert_uint_eq(anomalies(&f).driver_errors, 1);
	assert_late(&f, _i == 0   ? "region of hook 0:0 (2 nodes) was captured but not recorded"
			: _i == 1 ? "region of hook 0:0 (2 nodes) was captured but not recorded: "
				    "cuStreamGetCaptureInfo failed"
				  : "region of hook 0:0 may have captured nodes");
	recapture_works(&f);
	rfx_close(&f);
}
END_TEST

/* ---- the simulator's fork/join model ---------------------------------------------- */

START_TEST(sim_fork_join_rules)
{
	struct rfx f;
	rfx_open(&f, TOGGLE_MODE_LAZY, false);
	CUgraph g;
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[0]), CUDA_SUCCESS);
	kernel(&f, 0, 0);
	edge(&f, 0, 1, 0);
	kernel(&f, 1, 1);
	/* a forked stream cannot end the capture; an unjoined one keeps the origin from ending it */
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[1], &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
	/* another capture's event cannot be waited on */
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f.s[2]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_wait_event(f.s[2], f.ev[0], 0),
			 CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
	edge(&f, 1, 0, 1);
	kernel(&f, 0, 2);
	/* k2 depends on k0's chain end and k1 */
	CUstreamCaptureStatus st;
	const CUgraphNode *deps = NULL;
	size_t nd = 0;
	ck_assert_int_eq(toggle_sim_stream_get_capture_info(f.s[0], &st, NULL, NULL, &deps, NULL, &nd),
			 CUDA_SUCCESS);
	ck_assert_uint_eq(nd, 1);
	CUgraphNode k2 = deps[0], d2[4];
	size_t n2 = 4;
	ck_assert_int_eq(toggle_sim_graph_node_get_dependencies(k2, d2, NULL, &n2), CUDA_SUCCESS);
	ck_assert_uint_eq(n2, 2);
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[0], &g), CUDA_SUCCESS);
	/* the forked stream left the capture with it */
	ck_assert_int_eq(toggle_sim_stream_get_capture_info(f.s[1], &st, NULL, NULL, NULL, NULL, NULL),
			 CUDA_SUCCESS);
	ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
	size_t all = 0;
	ck_assert_int_eq(toggle_sim_graph_get_nodes(g, NULL, &all), CUDA_SUCCESS);
	ck_assert_uint_eq(all, 3);
	/* a capture event of an ended capture can no longer fork */
	ck_assert_int_eq(toggle_sim_stream_wait_event(f.s[1], f.ev[0], 0),
			 CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
	CUgraphExec ex;
	ck_assert_int_eq(toggle_sim_graph_instantiate(&ex, g), CUDA_SUCCESS);
	f.ran = 0;
	ck_assert_int_eq(toggle_sim_graph_launch(ex, f.s[0]), CUDA_SUCCESS);
	ck_assert_uint_eq(f.ran, B(0) | B(1) | B(2));
	CUgraph g2;
	ck_assert_int_eq(toggle_sim_stream_end_capture(f.s[2], &g2), CUDA_SUCCESS);
	rfx_close(&f);
}
END_TEST

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

/* ---- layout and version -------------------------------------------------------------- */

struct want {
	const char *type, *field;
	size_t size, offset;
};

#define W_T(T) { #T, NULL, sizeof(struct T), 0 }
#define W_F(T, f) { #T, #f, sizeof(((struct T *)0)->f), offsetof(struct T, f) }

static const struct want wants[] = {
	W_T(toggle_hook), W_F(toggle_hook, type), W_F(toggle_hook, layer),
	W_T(toggle_set), W_F(toggle_set, bits),
	W_T(toggle_catalog), W_F(toggle_catalog, type_names), W_F(toggle_catalog, n_types),
	W_F(toggle_catalog, n_layers),
	W_T(toggle_config), W_F(toggle_config, name), W_F(toggle_config, group),
	W_F(toggle_config, catalog), W_F(toggle_config, mode), W_F(toggle_config, strict),
	W_F(toggle_config, backend), W_F(toggle_config, sim), W_F(toggle_config, socket_path),
	W_T(toggle_plan_entry), W_F(toggle_plan_entry, step), W_F(toggle_plan_entry, set),
	W_T(toggle_graph_status), W_F(toggle_graph_status, graph), W_F(toggle_graph_status, exec),
	W_F(toggle_graph_status, nodes), W_F(toggle_graph_status, hooks_covered),
	W_F(toggle_graph_status, applied_version), W_F(toggle_graph_status, replays),
	W_F(toggle_graph_status, last_step), W_F(toggle_graph_status, bound),
	W_F(toggle_graph_status, stale), W_F(toggle_graph_status, mode),
	W_F(toggle_graph_status, device_fallback), W_F(toggle_graph_status, uploaded),
	W_F(toggle_graph_status, note),
	W_T(toggle_anomalies), W_F(toggle_anomalies, record_outside_window),
	W_F(toggle_anomalies, record_not_capturing), W_F(toggle_anomalies, record_not_kernel),
	W_F(toggle_anomalies, launch_unbound), W_F(toggle_anomalies, launch_stale),
	W_F(toggle_anomalies, driver_errors), W_F(toggle_anomalies, late_plans),
	W_F(toggle_anomalies, device_fallbacks), W_F(toggle_anomalies, device_refused),
	W_F(toggle_anomalies, host_on_device_node),
	W_T(toggle_stats), W_F(toggle_stats, launches), W_F(toggle_stats, launches_unrelated),
	W_F(toggle_stats, launches_refused), W_F(toggle_stats, node_set_calls),
	W_F(toggle_stats, syncs), W_F(toggle_stats, rebinds), W_F(toggle_stats, uploads),
	W_F(toggle_stats, mask_writes), W_F(toggle_stats, mask_words),
	W_F(toggle_stats, stream_joins), W_F(toggle_stats, version), W_F(toggle_stats, step),
	W_T(toggle_copy), W_F(toggle_copy, dst), W_F(toggle_copy, src), W_F(toggle_copy, row_bytes),
	W_F(toggle_copy, rows), W_F(toggle_copy, dst_pitch), W_F(toggle_copy, src_pitch),
	W_T(toggle_device_counters), W_F(toggle_device_counters, planner_runs),
	W_F(toggle_device_counters, device_calls), W_F(toggle_device_counters, device_failures),
	W_T(toggle_registry_check), W_F(toggle_registry_check, graphs),
	W_F(toggle_registry_check, unbound), W_F(toggle_registry_check, complete),
	W_F(toggle_registry_check, uniform), W_F(toggle_registry_check, hooks_uncovered),
	W_F(toggle_config, no_bare_exec),
	W_F(toggle_graph_status, tainted_launches), W_F(toggle_graph_status, tainted_step),
	W_F(toggle_graph_status, tainted), W_F(toggle_graph_status, blocked),
	W_F(toggle_graph_status, bare_exec), W_F(toggle_graph_status, bare_running),
	W_F(toggle_graph_status, bare_replays),
	W_F(toggle_anomalies, device_tainted),
	W_F(toggle_stats, reuse_fences), W_F(toggle_stats, bare_builds),
	W_F(toggle_stats, bare_build_failures), W_F(toggle_stats, bare_switches),
	W_T(toggle_taint), W_F(toggle_taint, launches), W_F(toggle_taint, lost),
	W_F(toggle_taint, calls_failed), W_F(toggle_taint, last_step), W_F(toggle_taint, last_graph),
	W_T(toggle_conn_info), W_F(toggle_conn_info, state), W_F(toggle_conn_info, agent_id),
	W_F(toggle_conn_info, sessions), W_F(toggle_conn_info, failures),
	W_F(toggle_conn_info, since_unix_ms), W_F(toggle_conn_info, last_error),
	W_F(toggle_layout_entry, type), W_F(toggle_layout_entry, field),
	W_F(toggle_layout_entry, size), W_F(toggle_layout_entry, offset),
	W_T(toggle_limit), W_F(toggle_limit, name), W_F(toggle_limit, value),
};

START_TEST(layout_matches_the_compiler)
{
	size_t n = 0;
	const struct toggle_layout_entry *e = toggle_layout(&n);
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_eq(toggle_layout(NULL), e);
	for (size_t w = 0; w < sizeof(wants) / sizeof(wants[0]); w++) {
		const struct want *x = &wants[w];
		size_t hits = 0;
		for (size_t i = 0; i < n; i++) {
			ck_assert_ptr_nonnull(e[i].type);
			if (strcmp(e[i].type, x->type) != 0 ||
			    (x->field ? !e[i].field || strcmp(e[i].field, x->field) != 0 : e[i].field != NULL))
				continue;
			hits++;
			ck_assert_msg(e[i].size == x->size && e[i].offset == x->offset,
				      "%s.%s: library says size %u offset %u, compiler %zu %zu", x->type,
				      x->field ? x->field : "", e[i].size, e[i].offset, x->size, x->offset);
		}
		ck_assert_msg(hits == 1, "%s.%s listed %zu times", x->type, x->field ? x->field : "",
			      hits);
	}
	/* And the other way: every entry the library lists is one of ours (a struct
	 * or field added to toggle_layout() must be added here too). */
	char missing[2048] = "";
	for (size_t i = 0; i < n; i++) {
		bool found = !e[i].field && strcmp(e[i].type, "toggle_layout_entry") == 0;
		for (size_t w = 0; !found && w < sizeof(wants) / sizeof(wants[0]); w++)
			found = strcmp(e[i].type, wants[w].type) == 0 &&
				(wants[w].field ? e[i].field && strcmp(e[i].field, wants[w].field) == 0
						: !e[i].field);
		if (!found) {
			size_t used = strlen(missing);
			snprintf(missing + used, sizeof(missing) - used, " %s.%s", e[i].type,
				 e[i].field ? e[i].field : "");
		}
	}
	ck_assert_msg(missing[0] == '\0', "toggle_layout() lists what this test does not check:%s",
		      missing);
	/* Every field of a struct lies inside it; a struct entry comes before its fields. */
	for (size_t i = 0; i < n; i++) {
		if (!e[i].field)
			continue;
		size_t t = i;
		while (t > 0 && e[t].field)
			t--;
		ck_assert_ptr_null(e[t].field);
		ck_assert_str_eq(e[t].type, e[i].type);
		ck_assert_uint_le((size_t)e[i].offset + e[i].size, e[t].size);
	}
	/* The layout entry describes itself too. */
	bool self = false;
	for (size_t i = 0; i < n; i++)
		self |= !e[i].field && strcmp(e[i].type, "toggle_layout_entry") == 0 &&
			e[i].size == sizeof(struct toggle_layout_entry);
	ck_assert(self);
}
END_TEST

START_TEST(version_is_the_header_s)
{
	ck_assert_uint_eq(toggle_version(), (TOGGLE_VERSION_MAJOR << 16) | TOGGLE_VERSION_MINOR);
	ck_assert_uint_eq(toggle_version() >> 16, TOGGLE_VERSION_MAJOR);
	ck_assert_uint_eq(toggle_version() & 0xffff, TOGGLE_VERSION_MINOR);
}
END_TEST

static Suite *region_suite(void)
{
	Suite *s = suite_create("region");
	TCase *tc = tcase_create("region");
	tcase_add_test(tc, region_one_kernel);
	tcase_add_loop_test(tc, region_several_kernels, TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER + 1);
	tcase_add_test(tc, region_forked_and_joined);
	tcase_add_test(tc, region_join_at_the_end);
	tcase_add_loop_test(tc, region_side_stream_reused, TOGGLE_MODE_LAZY, TOGGLE_MODE_EAGER + 1);
	tcase_add_test(tc, region_unjoined_fork_refused);
	tcase_add_test(tc, region_fork_from_before);
	tcase_add_test(tc, region_two_streams_one_capture_refused);
	tcase_add_test(tc, region_copy_nodes_refused);
	tcase_add_test(tc, region_without_kernel_refused);
	tcase_add_test(tc, region_refused_empty_leaves_graph_alone);
	tcase_add_test(tc, region_outside_a_capture);
	tcase_add_test(tc, region_nested_refused);
	tcase_add_loop_test(tc, region_open_at_capture_end_fails_closed, 0, 5);
	tcase_add_test(tc, region_abort);
	tcase_add_test(tc, region_abort_with_kernels_fails_closed);
	tcase_add_test(tc, region_overlapping_record_refused);
	tcase_add_test(tc, region_in_device_mode_falls_back);
	tcase_add_loop_test(tc, region_driver_failure_records_nothing, 0, 3);
	tcase_add_test(tc, region_null_agent);
	tcase_add_test(tc, sim_fork_join_rules);
	suite_add_tcase(s, tc);
	TCase *tc2 = tcase_create("copy_out");
	tcase_add_loop_test(tc2, copy_out_toggled, TOGGLE_MODE_LAZY, TOGGLE_MODE_DEVICE + 1);
	tcase_add_test(tc2, copy_out_outside_capture);
	tcase_add_test(tc2, copy_out_bad_input);
	tcase_add_loop_test(tc2, copy_out_record_failure_fails_closed, 0, 6);
	suite_add_tcase(s, tc2);
	TCase *tc3 = tcase_create("layout");
	tcase_add_test(tc3, layout_matches_the_compiler);
	tcase_add_test(tc3, version_is_the_header_s);
	suite_add_tcase(s, tc3);
	return s;
}

int main(void)
{
	return tu_run_suite(region_suite());
}
