/*
 * planner.h - device mode's planner: the layout of its per-graph descriptor
 * in device memory and the per-node step, shared by the CUDA kernel
 * (planner.cu), its CPU model for the simulator (planner_sim.c) and the host
 * side that fills the descriptor (device.c).  Plain C that nvcc also
 * compiles; the includer defines TG_PLAN_QUAL (function qualifiers) and
 * TG_PLAN_SET_ENABLED(node, on) (the device-side set-enabled call, 0 on
 * success) before including it for tg_plan_node().
 *
 * One descriptor per graph, at a fixed device address that the planner node
 * was captured with (with a tag naming that capture).  The host writes it
 * whole once, at the graph's first bind in device mode, before any launch of
 * the exec; after that the host writes only the mask words and the epoch,
 * and only in stream order (stream memory operations on the launch stream
 * before cuGraphLaunch), so each launch's planner reads what the host
 * enqueued for it.  Everything else in it is the planner's own.
 *
 * The report (struct tg_plan_report) lives in host memory mapped for the
 * device, so that the host reads what launches did with plain loads, never
 * waiting for the GPU.  The planner numbers its launches (runs, from 1 at
 * the descriptor's write) and writes there only when it matters: a launch in
 * which a set-enabled call failed (that launch ran with some producer in its
 * old state: it is "tainted") and the first launch after such a one in which
 * every call succeeded (from then on the exec holds its mask again).  The
 * includer defines TG_PLAN_FENCE_SYSTEM() (orders the record before the
 * count that publishes it, for a reader on the host).
 */
#ifndef TG_PLANNER_H
#define TG_PLANNER_H

#include <stdint.h>

#define TG_PLAN_THREADS 256 /* one block */

enum { TG_PLAN_OFF = 0, TG_PLAN_ON = 1, TG_PLAN_UNKNOWN = 2 };

struct tg_plan_desc {
	/* Host, at the first bind. */
	uint64_t tag;   /* the planner acts only when this equals its own tag */
	uint64_t nodes; /* device address: uint64_t[n], the CUgraphDeviceNode of node i */
	uint64_t mask;  /* device address: uint64_t[words], bit i = node i enabled */
	uint64_t state; /* device address: uint8_t[n], TG_PLAN_* as the planner left node i */
	uint32_t n;
	uint32_t words;
	/* Host, in stream order: != seen_epoch makes every node's state unknown. */
	uint64_t epoch;
	/* The planner's own. */
	uint64_t seen_epoch;
	uint64_t runs;     /* launches whose planner acted */
	uint64_t calls;    /* device-side set-enabled calls */
	uint64_t failures; /* of which failed (that node's state becomes unknown) */
	/* Host, at the first bind: device address of struct tg_plan_report. */
	uint64_t report;
	/* The planner's own. */
	uint64_t bad;      /* launches with a failed call: the report's count */
	uint64_t dirty;    /* the last launch that acted had a failed call */
	/* Host, at the first bind: device address of the agent's signal word
	 * (0: none), set to 1 after each write to the report, so that the host
	 * reads reports only when some planner wrote one (device.c). */
	uint64_t signal;
	uint64_t reserved[2];
};

#define TG_PLAN_DESC_SIZE 128

/* Tainted launches the report keeps (a power of two); older ones are counted only. */
#define TG_PLAN_REPORT_RING 8

struct tg_plan_report_rec {
	uint64_t run;      /* the launch (runs after it) */
	uint64_t failures; /* its failed set-enabled calls */
};

/* Host-mapped; the planner is the only writer, the host reads it with plain loads. */
struct tg_plan_report {
	uint64_t bad;       /* tainted launches so far; record i is ring[i % RING] */
	uint64_t clean_run; /* the last launch without failure that followed a tainted one */
	uint64_t reserved[2];
	struct tg_plan_report_rec ring[TG_PLAN_REPORT_RING];
};

#define TG_PLAN_REPORT_SIZE (4 * 8 + TG_PLAN_REPORT_RING * 16)

#ifdef TG_PLAN_QUAL
/*
 * Bring node i to its mask bit if the planner's record says it differs (or
 * force).  0: nothing called, 1: called and done, 2: called and failed.
 */
TG_PLAN_QUAL unsigned tg_plan_node(const uint64_t *mask, uint8_t *state, const uint64_t *nodes,
				   uint32_t i, int force)
{
	unsigned on = (unsigned)(mask[i / 64] >> (i % 64)) & 1u;

	if (!force && state[i] == on)
		return 0;
	if (TG_PLAN_SET_ENABLED(nodes[i], on) == 0) {
		state[i] = (uint8_t)on;
		return 1;
	}
	state[i] = TG_PLAN_UNKNOWN;
	return 2;
}

/*
 * After a launch's calls (one thread): count the run and report it to the
 * host if it failed, or if it is the first clean one after a failure.  Every
 * node a failed call left unknown is called again at the next launch, so a
 * launch without failure holds exactly its mask.
 */
TG_PLAN_QUAL void tg_plan_finish(struct tg_plan_desc *d, uint64_t calls, uint64_t failures)
{
	uint64_t run = ++d->runs;
	volatile struct tg_plan_report *rep = (volatile struct tg_plan_report *)(uintptr_t)d->report;

	d->calls += calls;
	d->failures += failures;
	if (!rep)
		return; /* no report to write (never so once the host set the descriptor up) */
	if (failures) {
		volatile struct tg_plan_report_rec *r = &rep->ring[d->bad % TG_PLAN_REPORT_RING];
		r->run = run;
		r->failures = failures;
		TG_PLAN_FENCE_SYSTEM(); /* the record before the count that publishes it */
		rep->bad = ++d->bad;
		d->dirty = 1;
	} else if (d->dirty) {
		rep->clean_run = run;
		d->dirty = 0;
	} else {
		return; /* nothing written: no signal */
	}
	if (d->signal) {
		TG_PLAN_FENCE_SYSTEM(); /* the report before the signal that announces it */
		*(volatile uint64_t *)(uintptr_t)d->signal = 1;
	}
}
#endif

#endif /* TG_PLANNER_H */
