/*
 * demo_backend.h - what demo_agent needs from the machine it runs on.
 *
 * demo_agent captures the same graphs and runs the same step loop on the
 * simulator (demo_agent.c) and on real CUDA (demo_cuda.c); this table is
 * the whole difference between the two.  Every operation returns 0, or -1
 * with be->err saying what failed.
 */
#ifndef DEMO_BACKEND_H
#define DEMO_BACKEND_H

#include <stdint.h>

#include "toggle.h"

/* The shape of the demo's workload. */
#define DEMO_TYPES  3  /* hook types: resid_post, attn_out, mlp_out */
#define DEMO_LAYERS 32
#define DEMO_GRAPHS 3  /* batch sizes 1, 8, 32 */

struct demo_backend {
	const char *name;          /* "sim" or "cuda" */
	enum toggle_backend kind;  /* toggle_config.backend */
	struct toggle_sim *sim;    /* toggle_config.sim (sim only) */
	CUstream stream;           /* capture and replay run on it */
	char device[128];          /* cuda: the GPU's name */
	int driver_version;        /* cuda: e.g. 13000 */
	char err[512];             /* what the last failing operation says */
	void *impl;

	/*
	 * Capture of graph g: begin_capture, then per layer launch_compute and
	 * per hook launch_producer (the caller records each producer with
	 * toggle_record_producer right after), then end_capture.
	 */
	int (*begin_capture)(struct demo_backend *be, int g, int batch);
	int (*launch_compute)(struct demo_backend *be, int g, int layer);
	int (*launch_producer)(struct demo_backend *be, int g, struct toggle_hook hook);
	int (*end_capture)(struct demo_backend *be, CUgraph *graph);
	/* A new exec of a captured graph (also used to re-instantiate). */
	int (*instantiate)(struct demo_backend *be, CUgraph graph, CUgraphExec *exec);

	/*
	 * A step: begin_step before the step's replays (puts the step in stream
	 * order, ahead of the producers), drain after them: waits for the
	 * replays, then returns per graph the hooks whose producers ran in this
	 * step, and in *stray the records that fit nowhere (a wrong step, a
	 * duplicate, an unknown graph or hook, an overflowing ring).
	 */
	int (*begin_step)(struct demo_backend *be, int64_t step);
	int (*drain)(struct demo_backend *be, int64_t step, struct toggle_set got[DEMO_GRAPHS],
		     unsigned *stray);

	void (*exec_destroy)(struct demo_backend *be, CUgraphExec exec);
	void (*graph_destroy)(struct demo_backend *be, CUgraph graph);
	/* Waits for the stream and frees everything; the agent is closed first. */
	void (*close)(struct demo_backend *be);
};

#endif /* DEMO_BACKEND_H */
