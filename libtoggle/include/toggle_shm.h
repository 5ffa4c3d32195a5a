/*
 * toggle_shm.h - the shared-memory region between one agent and toggled.
 *
 * The agent creates the region (memfd, sealed against resizing), writes the
 * header once, and hands the fd to the daemon with SCM_RIGHTS.  Two lanes,
 * each with exactly one writer:
 *   control (daemon writes): the control version, the standing set, and a
 *     ring of per-step plan slots;
 *   status (agent writes): current step, versions seen and applied, the set
 *     of the current step, anomaly counters, per-graph records.
 * The bulk of each lane sits behind a seqlock (C11 acquire/release; readers
 * copy and re-check).  Plan slots are written before plan_head publishes
 * them and are reused only after the agent reported them consumed, so they
 * need no seqlock.  Every count is bounded and checked by the reader.
 * Every field of the lanes is a 64-bit word, so lanes are copied word by
 * word with atomic accesses.  Layout documented in docs/shm.md.
 */
#ifndef TOGGLE_SHM_H
#define TOGGLE_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "toggle_error.h"
#include "toggle_hooks.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOGGLE_SHM_MAGIC          0x314d48534c474754ull /* "TGGLSHM1" */
#define TOGGLE_SHM_LAYOUT_VERSION 1
/* A set in the lanes is a struct toggle_set's bitmap, word for word (128
 * words in layout 1: libtoggle/src/shm.c asserts both). */
#define TOGGLE_SHM_SET_WORDS      (TOGGLE_MAX_HOOKS / 64)
#define TOGGLE_SHM_PLAN_RING      64  /* plan slots; also the entries of one plan batch */
#define TOGGLE_SHM_MAX_GRAPHS     64  /* per-graph records in the status lane */
/* Unused by the layout; kept as names for code built against older headers. */
#define TOGGLE_SHM_MAX_TYPES      TOGGLE_MAX_HOOK_TYPES
#define TOGGLE_SHM_NAME           TOGGLE_MAX_NAME
#define TOGGLE_SHM_READ_TRIES     1000 /* seqlock retries before a reader gives up */

/* Written once by the agent before the fd is handed over; read-only after. */
struct toggle_shm_header {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t header_size;
	uint64_t total_size;
	uint32_t set_words;
	uint32_t plan_ring;
	uint32_t max_graphs;
	uint32_t reserved0;
	uint64_t control_offset, control_size;
	uint64_t status_offset, status_size;
	uint8_t reserved[64];
};

struct toggle_shm_plan_slot {
	uint64_t batch;       /* one SubmitPlan: all its entries, or none of them */
	uint64_t batch_len;   /* entries in the batch */
	uint64_t batch_index; /* 0 .. batch_len-1 */
	int64_t step;
	uint64_t set[TOGGLE_SHM_SET_WORDS];
};

/* Control lane: the daemon is the only writer. */
struct toggle_shm_control {
	uint64_t seq;           /* seqlock (odd: write in progress) */
	uint64_t version;       /* control version, bumped by each command */
	uint64_t plan_head;     /* slots ever published; slot i at i % plan_ring */
	uint64_t plan_clear;    /* plan_head at the last clear: slots below are void */
	uint64_t plan_clears;   /* clears so far: a change drops every pending entry */
	uint64_t standing[TOGGLE_SHM_SET_WORDS];
	/* An aligned change (togglectl set --aligned): with TOGGLE_SHM_STANDING_ALIGNED
	 * in standing_flags, the standing set above applies from step
	 * standing_step on, and the agent runs its previous one until then; an
	 * agent that has begun that step already refuses it (status lane:
	 * aligned_rejected).  Taken from the start of layout 1's reserved space:
	 * a daemon that predates them leaves zero there, "at the next step". */
	int64_t standing_step;
	uint64_t standing_flags;
	uint8_t reserved[256 - 16];
	struct toggle_shm_plan_slot plan[TOGGLE_SHM_PLAN_RING];
};
#define TOGGLE_SHM_STANDING_ALIGNED 1u

struct toggle_shm_graph {
	uint64_t graph, exec;
	uint64_t nodes, hooks_covered;
	uint64_t applied_version;
	uint64_t replays;
	int64_t last_step;
	uint64_t flags; /* TOGGLE_SHM_GRAPH_* */
};
#define TOGGLE_SHM_FEAT_ALIGNED 1u /* takes standing_step (aligned changes) */
#define TOGGLE_SHM_GRAPH_BOUND 1u
#define TOGGLE_SHM_GRAPH_STALE 2u
#define TOGGLE_SHM_GRAPH_DEVICE 4u   /* toggled by its planner (device mode) */
#define TOGGLE_SHM_GRAPH_FALLBACK 8u /* a device-mode agent toggles it on the host */
#define TOGGLE_SHM_GRAPH_TAINTED 16u /* its latest tainted launch not yet followed by a clean one */
#define TOGGLE_SHM_GRAPH_BLOCKED 32u /* strict agent: its launches are refused until then */
#define TOGGLE_SHM_GRAPH_BARE 64u    /* has a producer-free exec */
#define TOGGLE_SHM_GRAPH_BARE_RUNNING 128u /* its launches run the producer-free exec */
#define TOGGLE_SHM_GRAPH_FULL 256u   /* has a full exec (toggle_graph_status.full_exec) */
#define TOGGLE_SHM_GRAPH_FULL_RUNNING 512u /* its launches run the full exec, or (host
					      * modes) its set exec */

/*
 * The status lane's anomaly counters, XX(NAME, name) each: it generates enum
 * toggle_shm_anomaly (TOGGLE_SHM_AN_<NAME>, the index into
 * toggle_shm_status.anomalies, and TOGGLE_SHM_AN_COUNT) and the kind label
 * the daemon exports (graphtoggle_agent_anomalies_total, docs/metrics.md).
 * Part of layout 1 (shm.c asserts its offsets).  The agent fills them from
 * struct toggle_anomalies (control.c): the same names, except that
 * driver_errors adds device_tainted and control_errors is the lane's own.
 */
#define TOGGLE_SHM_ANOMALY_MAP(XX)                                                   \
	XX(RECORD_OUTSIDE_WINDOW, record_outside_window)                              \
	XX(RECORD_NOT_CAPTURING, record_not_capturing)                                \
	XX(RECORD_NOT_KERNEL, record_not_kernel)                                      \
	XX(LAUNCH_UNBOUND, launch_unbound)                                            \
	XX(LAUNCH_STALE, launch_stale)                                                \
	/* failed driver calls, and tainted launches (device mode) */                \
	XX(DRIVER_ERRORS, driver_errors)                                              \
	XX(LATE_PLANS, late_plans)                                                    \
	/* malformed control-lane content ignored */                                 \
	XX(CONTROL_ERRORS, control_errors)

#define TOGGLE_SHM_AN_ENUM_(NAME, name) TOGGLE_SHM_AN_##NAME,
enum toggle_shm_anomaly {
	TOGGLE_SHM_ANOMALY_MAP(TOGGLE_SHM_AN_ENUM_)
	TOGGLE_SHM_AN_COUNT
};
#undef TOGGLE_SHM_AN_ENUM_

/*
 * The agent's connection to the daemon (toggle_conn_get()), published with
 * the rest of the status: the last 32 bytes of what layout 1 first left
 * reserved (zero from agents that predate it).  Documented in docs/shm.md.
 */
#define TOGGLE_SHM_CONN_CONNECTING   1 /* enum toggle_conn_state takes these values */
#define TOGGLE_SHM_CONN_CONNECTED    2
#define TOGGLE_SHM_CONN_RECONNECTING 3
struct toggle_shm_conn {
	uint64_t state;         /* TOGGLE_SHM_CONN_*: enum toggle_conn_state */
	uint64_t sessions;      /* registrations so far: > 1 after a reconnect */
	uint64_t failures;      /* failed connection or registration attempts so far */
	uint64_t since_unix_ms; /* when state last changed */
};

/* Status lane: the agent is the only writer. */
struct toggle_shm_status {
	uint64_t seq;                /* seqlock over the fields below */
	int64_t step;                /* current step, -1 before the first */
	uint64_t version_seen;       /* last control version the agent read */
	uint64_t version_applied;    /* control version in effect at the last replay */
	uint64_t plan_consumed;      /* plan slots below this index were consumed */
	uint64_t plan_rejected;      /* batches rejected as late */
	uint64_t plan_rejected_batch; /* the last one */
	int64_t plan_rejected_step;  /* its first late step */
	uint64_t replays;
	uint64_t anomalies[TOGGLE_SHM_AN_COUNT];
	uint64_t n_graphs;           /* records filled, <= max_graphs */
	uint64_t total_graphs;       /* graphs the agent has (may exceed n_graphs) */
	uint64_t current[TOGGLE_SHM_SET_WORDS];
	/* Device mode's tainted launches (toggle_taint): taken from the reserved
	 * space of layout 1, so offsets and size are unchanged and a region of an
	 * older agent reads as zero here. */
	uint64_t tainted_launches;   /* launches that ran another set than their step's */
	int64_t tainted_step;        /* step of the latest (-1: unknown); 0 with no launch */
	uint64_t tainted_graph;      /* its graph handle, for display */
	uint64_t tainted_lost;       /* of the launches, those whose step is unknown */
	/* Aligned changes (control lane standing_step), from reserved space too:
	 * an older agent leaves features 0, and the daemon refuses to align it. */
	uint64_t features;           /* TOGGLE_SHM_FEAT_* */
	uint64_t aligned_rejected;   /* aligned changes refused: their step had begun */
	uint64_t aligned_rejected_version; /* the control version of the last one */
	int64_t aligned_rejected_step;     /* the agent's step when it refused it */
	uint8_t reserved[224 - 32 - sizeof(struct toggle_shm_conn)];
	struct toggle_shm_conn conn; /* under the seqlock like the fields above */
	struct toggle_shm_graph graphs[TOGGLE_SHM_MAX_GRAPHS];
};

/*
 * A mapping of the region, on either side.  size, ctl and st come from a
 * layout this library built or validated from a private copy; hdr points at
 * the mapped header, which the agent can rewrite at any moment: the daemon
 * never reads it (nor anything else of the mapping except through the lane
 * readers below, which copy once and bound every count).
 */
struct toggle_shm {
	int fd;
	size_t size;
	void *base;
	struct toggle_shm_header *hdr;
	struct toggle_shm_control *ctl;
	struct toggle_shm_status *st;
};

/* Agent: create, size, fill the header, seal against resizing, map. */
int toggle_shm_create(struct toggle_shm *shm, char *err, size_t errlen);
/* Daemon: check seals, size and header of an untrusted fd, then map it (fd is dup'ed). */
int toggle_shm_attach(int fd, struct toggle_shm *shm, char *err, size_t errlen);
void toggle_shm_unmap(struct toggle_shm *shm); /* also closes the fd */

/* ---- control lane ---- */

/* The seqlocked part of the control lane. */
struct toggle_shm_control_view {
	uint64_t version;
	uint64_t plan_head;
	uint64_t plan_clear;
	uint64_t plan_clears;
	uint64_t standing[TOGGLE_SHM_SET_WORDS];
	int64_t standing_step;   /* with TOGGLE_SHM_STANDING_ALIGNED: from this step on */
	uint64_t standing_flags;
};

/* Daemon: publish version, standing set and plan indexes in one seqlock write. */
void toggle_shm_control_write(struct toggle_shm_control *ctl, const struct toggle_shm_control_view *v);
/* Daemon: fill slot index i (before publishing it through plan_head). */
void toggle_shm_plan_slot_write(struct toggle_shm_control *ctl, uint64_t i,
				const struct toggle_shm_plan_slot *slot);
/* Agent: copy the view; TOGGLE_EBUSY if the writer never settles. */
int toggle_shm_control_read(const struct toggle_shm_control *ctl, struct toggle_shm_control_view *v);
/* Agent: copy slot i (published and not yet consumed by contract). */
void toggle_shm_plan_slot_read(const struct toggle_shm_control *ctl, uint64_t i,
			       struct toggle_shm_plan_slot *slot);
/* The sequence number: one acquire load, the agent's hot-path check. */
uint64_t toggle_shm_control_seq(const struct toggle_shm_control *ctl);

/* ---- status lane ---- */

/* Agent: publish a whole status record in one seqlock write. */
void toggle_shm_status_write(struct toggle_shm_status *st, const struct toggle_shm_status *src);
/* Daemon: copy it; checks counts (n_graphs) and returns TOGGLE_ESHM if out of bounds. */
int toggle_shm_status_read(const struct toggle_shm_status *st, struct toggle_shm_status *out);
/* Daemon: copy only the counters, step .. total_graphs (about 20 words, not
 * the set and the graph records): what its status timer needs for events. */
int toggle_shm_status_read_head(const struct toggle_shm_status *st, struct toggle_shm_status *out);

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_SHM_H */
