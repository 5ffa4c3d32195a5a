/*
 * fixture_region.h - the shared fixture of the region suites
 * (tests/check_region_*.c, check_copy_out.c): an agent on the simulator
 * (struct rfx), kernels that set a bit per kernel id when they run, capture,
 * region and launch helpers, and the check that a graph failed closed late
 * and captures again.  Moved out of check_region.c (issue 29).  Static
 * inline, in the header: the helpers are small and some names (begin, end,
 * kernel) would be poor global symbols.
 */
#ifndef FIXTURE_REGION_H
#define FIXTURE_REGION_H

#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

#define NT 3
#define NL 8
#define NS 3
#define NK 64 /* kernel ids */

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

#define B(i) (1ull << (i))

static const char *const type_names[NT] = {"resid_post", "attn_out", "mlp_out"};

static inline void kern_fn(void *arg)
{
	struct kern *k = arg;
	k->f->ran |= 1ull << k->id;
}

static inline void rfx_open(struct rfx *f, enum toggle_mode mode, bool strict)
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

static inline void rfx_close(struct rfx *f)
{
	toggle_sim_synchronize(f->sim);
	toggle_agent_close(f->agent);
	ck_assert_uint_eq(toggle_sim_mem_in_use(f->sim), 0);
	toggle_sim_destroy(f->sim);
}

static inline void kernel(struct rfx *f, int si, int id)
{
	ck_assert_int_eq(toggle_sim_launch_kernel(f->s[si], kern_fn, &f->k[id]), CUDA_SUCCESS);
}

/* Fork stream `to` from `from` (or join `from` into `to`): record on from, wait on to. */
static inline void edge(struct rfx *f, int from, int to, int ev)
{
	ck_assert_int_eq(toggle_sim_event_record(f->ev[ev], f->s[from]), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_stream_wait_event(f->s[to], f->ev[ev], 0), CUDA_SUCCESS);
}

static inline void begin(struct rfx *f)
{
	ck_assert_int_eq(toggle_capture_begin(f->agent), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->s[0]), CUDA_SUCCESS);
}

static inline void end(struct rfx *f)
{
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->s[0], &f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->agent), 0);
}

static inline struct toggle_hook hk(int type, int layer)
{
	return (struct toggle_hook){(uint16_t)type, (uint16_t)layer};
}

static inline size_t region_end(struct rfx *f, int si, struct toggle_hook h)
{
	size_t n = 99;
	int rc = toggle_producer_end(f->agent, f->s[si], h, &n);
	ck_assert_msg(rc == 0, "toggle_producer_end: %d (%s)", rc, toggle_last_error(f->agent));
	return n;
}

/* Set the standing set to the hooks of `on` (NULL-terminated list), launch, return what ran. */
static inline uint64_t run_with(struct rfx *f, const struct toggle_hook *on, size_t n_on)
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

static inline void instantiate(struct rfx *f)
{
	int rc = toggle_graph_instantiate(f->agent, f->graph, &f->exec);
	ck_assert_msg(rc == 0, "instantiate: %d (%s)", rc, toggle_last_error(f->agent));
}

static inline uint32_t recorded(struct rfx *f)
{
	struct toggle_graph_status gs;
	if (toggle_graph_status(f->agent, f->graph, &gs) != 0)
		return 0;
	return gs.nodes;
}

static inline struct toggle_anomalies anomalies(struct rfx *f)
{
	struct toggle_anomalies an;
	toggle_anomalies_get(f->agent, &an);
	return an;
}

/*
 * A refused region left kernels in f->graph unrecorded: the graph is late.
 * Its note names the region's hook; bind, instantiate's bind and launch are
 * refused with TOGGLE_ECAPTURE and nothing runs, whatever the set.
 */
static inline void assert_late(struct rfx *f, const char *note_has)
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
static inline void recapture_works(struct rfx *f)
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

#endif
