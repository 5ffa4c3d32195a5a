/*
 * fixture_record_sim.h - what the recorder's simulator suites share
 * (tests/check_record.c, tests/check_record_staged.c): their ground truth.
 * A head kernel, first in each graph, counts the runs (run k is the k-th
 * launch submitted, one stream); each producer writes a pattern of (run,
 * hook) into its monitor buffer when it runs, so a record's payload names
 * the run that wrote it.  The suites had each a copy; the rest of their
 * fixtures (struct fx) differ.  Static inline, as fixture_lifetime.h: each
 * suite is one translation unit.
 */
#ifndef FIXTURE_RECORD_SIM_H
#define FIXTURE_RECORD_SIM_H

#include <stdint.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

/* A producer kernel's argument: its hook, and the suite's run count and
 * monitor buffers (indexed by hook), read when it runs. */
struct prod {
	const uint32_t *runs;
	const CUdeviceptr *buf;
	unsigned elems; /* floats per monitor buffer */
	uint32_t hook;
};

/* Word i of hook's buffer after run: word 0 / 1000 gives the run back. */
static inline float pattern(uint32_t run, uint32_t hook, unsigned i)
{
	return (float)(run * 1000u + hook * 20u + i);
}

/* The head kernel: arg is the suite's run count. */
static inline void head_fn(void *arg)
{
	(*(uint32_t *)arg)++;
}

static inline void producer_fn(void *arg)
{
	const struct prod *p = arg;
	float *b = (float *)(uintptr_t)p->buf[p->hook];
	/* The run that is executing: head_fn already counted it. */
	for (unsigned i = 0; i < p->elems; i++)
		b[i] = pattern(*p->runs - 1, p->hook, i);
}

/* A simulator with one stream and a lazy agent (name, catalog) on it: the
 * one stream is what makes run k the k-th launch submitted. */
static inline void record_sim_open(const char *name, struct toggle_catalog catalog,
				   struct toggle_sim **sim, CUstream *stream,
				   struct toggle_agent **agent)
{
	ck_assert_int_eq(toggle_sim_create(sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(*sim, stream), CUDA_SUCCESS);
	struct toggle_config cfg = {
		.name = name,
		.catalog = catalog,
		.mode = TOGGLE_MODE_LAZY,
		.backend = TOGGLE_BACKEND_SIM,
		.sim = *sim,
	};
	ck_assert_int_eq(toggle_agent_open(&cfg, agent), 0);
}

#endif
