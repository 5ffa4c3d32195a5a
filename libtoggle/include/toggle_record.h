/*
 * toggle_record.h - the recorder: after a replay, the monitor buffers of
 * the hooks its step enabled go to the host, into the agent's data ring
 * (toggle_ring.h), without the engine ever waiting.
 *
 * The integration declares what a hook's monitor buffer is (device
 * pointer, bytes, dtype, shape; per graph or for every graph) and opens a
 * ring.  Then, while a recording is requested (the ring's request area:
 * a daemon's `togglectl record`, or toggle_record_set() without one),
 * each toggle_graph_launch() of a graph whose step enables some of its
 * hooks copies, for every hook that is enabled this step, in the graph, in
 * the request's set and declared, its buffer into ring space it reserved
 * (the ring is page-locked: cuMemHostRegister).  Staged (the default where
 * the gather kernel and capacity bytes of device memory can be had at
 * toggle_record_open): right after cuGraphLaunch and on the same stream,
 * one gather kernel per 40 records into a device mirror of the ring, an
 * event; on the recorder's own stream, after that event, one
 * cuMemcpyDtoHAsync per contiguous ring range, then the launch's event.
 * Otherwise one cuMemcpyDtoHAsync per record on the launch's stream, then
 * the event (docs/recording.md, "Staging").  The records are
 * published (the ring's head moves past them) once that event has
 * completed, found with cuEventQuery at a later launch, at
 * toggle_step_begin() or at toggle_record_poll(): never waited for.  A
 * full ring, or TOGGLE_RECORD_MAX_PENDING launches in flight, drops the
 * record and counts it.  A copy or gather the driver refuses, or an event
 * that reports an error, turns its records (staged: the launch's) into PAD
 * records (counted as errors): nothing wrong is ever published.
 *
 * Without a ring (toggle_record_open never called) the launch path pays
 * one predictable branch; with a ring and no recording requested, one call
 * and one load of the request's sequence word.
 *
 * A caller that launches the exec itself (toggle_graph_prepare, then its
 * own cuGraphLaunch: torch's CUDAGraph.replay) calls toggle_record_after()
 * right after its launch, on the same stream.  An eager run of a producer
 * (the registered op outside any capture) calls toggle_record_eager() after
 * its copy into the monitor buffer.
 *
 * Not thread-safe, like the rest of the agent: one application thread.
 */
#ifndef TOGGLE_RECORD_H
#define TOGGLE_RECORD_H

#include <stdint.h>

#include "toggle.h"
#include "toggle_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOGGLE_RECORD_MAX_BUFFERS 1024 /* declared buffers per agent */
#define TOGGLE_RECORD_MAX_PENDING 64   /* launches whose copies are in flight */

/* A hook's monitor buffer: what one record's payload holds. */
struct toggle_record_buffer {
	CUdeviceptr ptr;
	uint64_t bytes;                       /* = product of shape * the dtype's size */
	uint32_t dtype;                       /* enum toggle_dtype */
	uint32_t ndim;                        /* 0..TOGGLE_RING_MAX_DIMS */
	uint64_t shape[TOGGLE_RING_MAX_DIMS]; /* dims beyond ndim: 0 */
};

/*
 * Create the agent's ring: capacity data bytes (a power of two,
 * TOGGLE_RING_MIN_CAPACITY..TOGGLE_RING_MAX_CAPACITY), page-locked with
 * the driver, and as many bytes of device memory for staging (on the
 * current context; refused: record by record, stats.staged 0).  With a daemon (toggle_config.socket_path) it is offered to
 * toggled at once and after every reconnect (RegisterRingRequest).  *fd,
 * if not NULL, gets the ring's memfd (the agent keeps owning it: a local
 * consumer may toggle_ring_attach it).  One ring per agent: TOGGLE_EINVAL
 * the second time; TOGGLE_ENOTSUP without the driver's entry points.
 */
int toggle_record_open(struct toggle_agent *agent, uint64_t capacity, int *fd);

/*
 * Declare (or with buf NULL remove) the monitor buffer of hook, in graph
 * (NULL: in every graph that has none of its own).  Checked: a hook of the
 * catalog, a known dtype, bytes equal to the shape's and at most the
 * ring's largest payload (capacity - 128); TOGGLE_ELIMIT when the table is
 * full.  May be called before toggle_record_open.
 */
int toggle_record_buffer(struct toggle_agent *agent, CUgraph graph, struct toggle_hook hook,
			 const struct toggle_record_buffer *buf);

/*
 * The same for the graph being captured on stream, for this capture only
 * (the buffer its producer of hook writes, declared while it is recorded):
 * a new capture that gets the graph's handle later does not inherit it.
 * TOGGLE_ECAPTURE when stream is not capturing.
 */
int toggle_record_buffer_in_capture(struct toggle_agent *agent, CUstream stream,
				    struct toggle_hook hook, const struct toggle_record_buffer *buf);

/*
 * Ask for a recording without a daemon: what toggled writes into the
 * ring's request area.  session 0 stops; set NULL: every hook.  With a
 * daemon the request area is the daemon's (it is its only writer): this
 * call then returns TOGGLE_EBUSY.
 */
int toggle_record_set(struct toggle_agent *agent, uint64_t session, const struct toggle_set *set);

/* Record graph's hooks after the caller's own launch of its exec on stream
 * (after toggle_graph_prepare).  0 also when nothing was to be recorded. */
int toggle_record_after(struct toggle_agent *agent, CUgraph graph, CUstream stream);

/* Record buf as hook's eager run on stream (graph 0, TOGGLE_RING_REC_EAGER),
 * if the current step enables hook and the request asks for it. */
int toggle_record_eager(struct toggle_agent *agent, struct toggle_hook hook,
			const struct toggle_record_buffer *buf, CUstream stream);

/* Publish what completed; never waits.  Returns the launches still in flight. */
int toggle_record_poll(struct toggle_agent *agent);

/*
 * Wait for every copy in flight and publish it: a quiescent point, the one
 * call of the recorder that waits (cuCtxSynchronize: the whole context, the
 * driver having no narrower wait for a set of events).  Before a shutdown
 * and in tests; toggle_agent_close does the same.
 */
int toggle_record_flush(struct toggle_agent *agent);

struct toggle_record_stats {
	uint64_t records;       /* DATA records published */
	uint64_t bytes;         /* their payload bytes */
	uint64_t dropped;       /* records dropped: ring full or too many in flight */
	uint64_t errors;        /* records voided: a copy or its event failed */
	uint64_t pending;       /* launches whose copies are in flight */
	uint64_t session;       /* the request being served (0: none) */
	uint64_t capacity;      /* the ring's data bytes (0: no ring) */
	uint64_t staged;        /* 1: replays' records go through the device staging area */
};
void toggle_record_stats_get(const struct toggle_agent *agent, struct toggle_record_stats *out);

/* The layout of toggle_record_buffer and toggle_record_stats, as
 * toggle_layout() describes the other public structs (a binding checks its
 * mirrors against both tables). */
const struct toggle_layout_entry *toggle_record_layout(size_t *count);

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_RECORD_H */
