/*
 * fixture_sim.h - the shared fixture of the simulator suites
 * (tests/check_sim_*.c): CK_CU/CK_OK, kernels that record the order they ran
 * in (struct rec), a simulator with one stream and per-node kernel
 * arguments (struct fx), capture, instantiate and node-state helpers.
 * Moved out of check_sim.c (issue 29); static inline, as the helpers are
 * small and names like instantiate and enabled would be poor globals.
 */
#ifndef FIXTURE_SIM_H
#define FIXTURE_SIM_H

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

/* A simulator with one stream, and per-node kernel arguments whose id is the node index. */
struct fx {
	struct toggle_sim *sim;
	CUstream s;
	struct rec rec;
	struct karg args[16];
	CUgraphNode nodes[16];
};

static inline void rec_kernel(void *p)
{
	struct karg *a = p;

	ck_assert_uint_lt(a->rec->n, MAX_REC);
	a->rec->ids[a->rec->n++] = a->id;
}

/* Checks that the recorded kernel ids are exactly want[0..n) and clears the record. */
static inline void rec_expect(struct rec *r, const int *want, unsigned n)
{
	ck_assert_uint_eq(r->n, n);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(r->ids[i], want[i]);
	r->n = 0;
}

static inline void fx_open(struct fx *f)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	ck_assert_ptr_nonnull(f->sim);
	CK_OK(toggle_sim_stream_create(f->sim, &f->s));
	for (int i = 0; i < 16; i++)
		f->args[i] = (struct karg){ .rec = &f->rec, .id = i };
}

/* The node just added to a capturing stream, as libtoggle finds it. */
static inline CUgraphNode last_node(CUstream s)
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
static inline CUgraph fx_capture(struct fx *f, const char *pattern)
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

static inline CUgraphExec instantiate(CUgraph g)
{
	CUgraphExec ex = NULL;

	CK_OK(toggle_sim_graph_instantiate(&ex, g));
	ck_assert_ptr_nonnull(ex);
	return ex;
}

static inline unsigned enabled(CUgraphExec ex, CUgraphNode node)
{
	unsigned on = 42;

	CK_OK(toggle_sim_graph_node_get_enabled(ex, node, &on));
	return on;
}

#endif
