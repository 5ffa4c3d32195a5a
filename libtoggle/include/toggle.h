/*
 * toggle.h - public API of libtoggle, the graphtoggle in-process agent.
 *
 * libtoggle records the "producer" kernel nodes of CUDA graphs while they are
 * captured, binds each graph to the exec it was instantiated into, and turns
 * producers on and off per step with cuGraphNodeSetEnabled, without
 * recapture (or, in device mode, has a planner kernel at the head of each
 * graph do it on the device).  It fails closed: a replay whose producers
 * would disagree with the set reported by toggle_step_begin() is refused,
 * never run.
 *
 * Threading: one agent is used from one thread at a time.  Two agents share
 * nothing.  All functions return 0 or a negative TOGGLE_E* code; the agent
 * keeps a last-error text with context (toggle_last_error()).
 */
#ifndef TOGGLE_H
#define TOGGLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "toggle_error.h"
#include "toggle_hooks.h"
#include "toggle_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TOGGLE_VERSION_MAJOR, _MINOR (the API version toggle_version() reports), _PATCH */
#include "toggle_version.h"

/* TOGGLE_MAX_PLAN (pending per-step plan entries per agent), TOGGLE_MAX_NAME
 * and the hook space: toggle_hooks.h, which toggled shares without CUDA. */
#define TOGGLE_MAX_GRAPHS     4096 /* graphs with producers per agent */
#define TOGGLE_MAX_NODES      16384 /* producer nodes per graph */

/* Error codes (negative) and toggle_strerror(): toggle_error.h. */

/* ---- agent -------------------------------------------------------------- */

enum toggle_mode {
	TOGGLE_MODE_LAZY = 0,   /* nodes are set at each graph's next replay */
	TOGGLE_MODE_EAGER = 1,  /* nodes are set at step_begin / apply_all */
	TOGGLE_MODE_DEVICE = 2, /* planner kernel on the device (CUDA 12.4+): see below */
};

enum toggle_backend {
	TOGGLE_BACKEND_CUDA = 0, /* libcuda.so.1, loaded at run time */
	TOGGLE_BACKEND_SIM = 1,  /* the in-tree simulator (toggle_sim.h) */
};

struct toggle_sim;

struct toggle_config {
	const char *name;       /* agent name, < TOGGLE_MAX_NAME */
	const char *group;      /* group name, may be NULL */
	struct toggle_catalog catalog;
	enum toggle_mode mode;
	bool strict;            /* refuse instead of falling back to another mode */
	enum toggle_backend backend;
	struct toggle_sim *sim; /* required with TOGGLE_BACKEND_SIM */
	const char *socket_path; /* daemon socket; NULL or "" = standalone */
	/* No producer-free exec per bound graph (saves its device and host
	 * memory; see toggle_graph_status.bare_exec).  Default: built. */
	bool no_bare_exec;
	/* No full exec per bound graph (the steps it would run then run the
	 * graph's main exec: all on, and in host modes every set in between;
	 * toggle_graph_status.full_exec).  no_bare_exec turns both off.
	 * Default: built. */
	bool no_full_exec;
	/* No set execs (host modes: a set in between that has held for 8 steps
	 * gets, one graph a step at toggle_step_begin, an exec of each graph
	 * without the producers it leaves off; and a graph whose full exec ran
	 * all on after a set in between had set it, whose node sets leave it
	 * slower all on, an all-on exec at the next toggle_step_begin, kept;
	 * toggle_graph_status.set_exec).
	 * no_full_exec and no_bare_exec turn it off too.  Default: built. */
	bool no_set_exec;
	/* Host modes: clone the captured graph for the producer-free and full
	 * execs instead of assembling them node by node as device mode does (a
	 * new graph of copies of the captured nodes, without the producers or
	 * with them).  Default: assembled, which ran the compiled Llama up to
	 * 0.7 point of the floor faster all on (docs/benchmarks.md section 11, session 20);
	 * a graph with a node the assembly cannot copy is cloned either way.
	 * The set execs are clones of the full exec's graph either way. */
	bool clone_execs;
};

struct toggle_agent;

int toggle_agent_open(const struct toggle_config *cfg, struct toggle_agent **out);
void toggle_agent_close(struct toggle_agent *agent);

/* Last error of this agent, with context (which graph, which hook). */
const char *toggle_last_error(const struct toggle_agent *agent);
/*
 * The mode the agent actually runs in (after any fallback).  A device-mode
 * agent that could not start device mode (driver older than 12.4, no planner
 * in this build, no CUDA context current, ...) runs lazy unless strict; its
 * toggle_last_error() then says why.
 */
enum toggle_mode toggle_agent_mode(const struct toggle_agent *agent);

/*
 * The agent's connection to toggled, as its connection thread last saw it.
 * Reading it takes a lock the replay path never takes; call it from a
 * health check, not per launch.  Whatever the state, the agent keeps running
 * with the last state the daemon wrote (docs/libtoggle.md, With the daemon).
 */
enum toggle_conn_state {
	TOGGLE_CONN_STANDALONE = 0,   /* opened without socket_path: no daemon */
	/* The status lane carries these to toggled: its numbers, one definition. */
	TOGGLE_CONN_CONNECTING = TOGGLE_SHM_CONN_CONNECTING,     /* never registered yet; retrying with backoff */
	TOGGLE_CONN_CONNECTED = TOGGLE_SHM_CONN_CONNECTED,       /* registered with toggled */
	TOGGLE_CONN_RECONNECTING = TOGGLE_SHM_CONN_RECONNECTING, /* was registered, the connection ended; retrying */
};

struct toggle_conn_info {
	enum toggle_conn_state state;
	uint64_t agent_id;     /* the daemon's id at the last registration; 0 before one */
	uint64_t sessions;     /* registrations so far (> 1: it reconnected) */
	uint64_t failures;     /* failed connection or registration attempts so far */
	int64_t since_unix_ms; /* when state last changed (CLOCK_REALTIME); 0 if standalone */
	char last_error[256];  /* why the connection last failed or ended, "" if it never did */
};

/* Fill *out; TOGGLE_EINVAL for NULL arguments. */
int toggle_conn_get(const struct toggle_agent *agent, struct toggle_conn_info *out);
/* "standalone", "connecting", "connected", "reconnecting" ("?" for others). */
const char *toggle_conn_state_name(enum toggle_conn_state state);
const struct toggle_catalog *toggle_agent_catalog(const struct toggle_agent *agent);

/* ---- capture and registry ---------------------------------------------- */

/* Open / close a capture window; windows nest (counted). */
int toggle_capture_begin(struct toggle_agent *agent);
int toggle_capture_end(struct toggle_agent *agent);

/*
 * Call right after launching a producer kernel into a capturing stream: the
 * node the launch added is found with cuStreamGetCaptureInfo, checked to be a
 * kernel node and filed under hook.  Refused (and counted as an anomaly)
 * outside a capture window, on a stream that is not capturing, or when the
 * node is not a kernel node.  A refusal on a capturing stream marks the
 * graph being captured "late": its bind and launches are refused with
 * TOGGLE_ECAPTURE until it is captured again.
 */
int toggle_record_producer(struct toggle_agent *agent, CUstream stream, struct toggle_hook hook);

/*
 * Bind a graph to the exec it was instantiated into (resets per-exec state).
 * The CUgraph must stay alive while its execs are toggled: the driver
 * refuses node handles of a destroyed graph (measured on an H200, CUDA 13.0).
 * PyTorch users: capture with keep_graph=True.  An exec must not be
 * destroyed while bound (eager mode sets its nodes at every step_begin):
 * bind the new exec first, or unbind with exec = NULL.
 *
 * Lifetime (docs/libtoggle.md, Lifetime): libtoggle gives every graph it
 * records a CUDA user object (CUDA 11.3+), and a new one at each bind, whose
 * destructor tells it that the graph, or the bound exec, was destroyed.  At
 * the next slow-path look (a launch that is not a plain replay, a bind,
 * toggle_step_begin) a destroyed graph's record goes, so that a new graph
 * behind its handle is a stranger: launched untouched, never refused, never
 * toggled.  A graph destroyed while its bound exec lives keeps its record for
 * that exec alone: at the set it holds it runs as before, at another set a
 * host-mode agent refuses it (TOGGLE_ESTALE), device mode's planner still
 * sets it; another exec launched with that handle is a stranger's.  A bound
 * exec destroyed is never touched again; the next launch rebinds.  Without
 * user objects, the checks are the recorded nodes (and CUDA 13.1's ids).
 * The hot path (an unchanged launch) does no extra work for any of this.
 */
int toggle_graph_bind(struct toggle_agent *agent, CUgraph graph, CUgraphExec exec);
/*
 * Whether this graph gets a producer-free exec (docs/libtoggle.md) and a
 * full exec (every producer on; in device mode a plain node, no planner), for
 * callers that know how its exec will be launched: off for a graph only ever
 * launched by the caller after toggle_graph_prepare (the bare exec would
 * never run: PyTorch's own replay), on again for one launched through
 * toggle_graph_launch.  Default: on (when the agent builds them at all,
 * toggle_config.no_bare_exec).  Takes effect now for a bound graph (off
 * destroys its bare exec, on builds one: an instantiation, not for the
 * replay path) and stays through rebinds until the graph is captured again.
 * On (also when it already was) makes the next toggle_graph_launch pick the
 * exec again: after a toggle_graph_prepare, launches at an unchanged set keep
 * running the main exec (the prepare brought it to the set) until the set
 * changes.
 */
int toggle_graph_set_bare(struct toggle_agent *agent, CUgraph graph, bool on);
/* Drop a graph; later launches of it through this agent fail closed (ESTALE),
 * until it is destroyed: a new graph behind its handle then runs untouched. */
int toggle_graph_forget(struct toggle_agent *agent, CUgraph graph);

/*
 * cuGraphInstantiate (flags 0), then toggle_graph_bind for a graph with
 * producers (in device mode: set up and upload the exec).  A graph with
 * device-updatable producers has one exec at a time (a driver rule, measured
 * on an H200 with CUDA 13.0): while its exec exists, another instantiation
 * is refused with TOGGLE_ENOTSUP and a message saying so; unbind and destroy
 * the exec first, or capture the graph again.  If the bind fails, *exec
 * still holds the new exec.
 */
int toggle_graph_instantiate(struct toggle_agent *agent, CUgraph graph, CUgraphExec *exec);

/* ---- device mode ---------------------------------------------------------- */

/*
 * In device mode (TOGGLE_MODE_DEVICE) the host makes no per-node driver call
 * when the set changes.  Producers are captured as device-updatable kernel
 * nodes, and a planner kernel, captured first, reads at each launch the
 * graph's mask from device memory and enables or disables each producer with
 * the device-side cudaGraphKernelNodeSetEnabled.  toggle_graph_launch()
 * enqueues the mask on the launch stream (stream memory operations, only the
 * 64-bit words that changed, only when the set changed) before the launch, so
 * pipelined launches each run the set of their own step.  Launches of one
 * exec on several streams are supported: a launch on another stream than the
 * previous one first waits (an event) for the previous stream's work before
 * the mask words are written.  Each exec is uploaded once, at bind (the
 * driver requires it before the first launch).  Such a graph has one exec
 * at a time.
 *
 * Capture, per graph:
 *
 *	toggle_capture_begin(agent);
 *	cuStreamBeginCapture(stream, ...);
 *	toggle_capture_planner(agent, stream);       // first
 *	... layer kernels ...
 *	toggle_launch_producer(agent, &cfg, fn, params, hook);
 *	cuStreamEndCapture(stream, &graph);
 *	toggle_capture_end(agent);
 *	toggle_graph_instantiate(agent, graph, &exec); // instantiates, binds, uploads
 *
 * Every producer must be ordered after the planner: launched into the stream
 * the planner was captured into, or into a stream that forked from it after
 * the planner.  A graph that cannot run in device mode (no planner, a
 * producer recorded without a device handle, a producer not after the
 * planner) is refused at bind with TOGGLE_ENOTSUP when the agent is strict,
 * else runs in lazy mode on the host; its status says which and why.  The
 * same integration code runs in every mode: outside device mode
 * toggle_capture_planner does nothing and toggle_launch_producer launches a
 * plain kernel node.
 *
 * Requirements: a CUDA 12.4+ driver, a library built where nvcc exists (the
 * planner is embedded at build time), a device with 64-bit stream memory
 * operations, and a current CUDA context when the agent is opened (the
 * planner module is loaded then).  Keep the graph alive while its exec is
 * used, and close the agent only after the launches made through it have
 * completed (it frees the planner's device memory).
 */

/*
 * Capture the planner into a capturing stream, before any producer of that
 * graph.  Outside device mode: does nothing (0).  TOGGLE_ECAPTURE outside a
 * capture window or on a stream that is not capturing.
 */
int toggle_capture_planner(struct toggle_agent *agent, CUstream stream);

/*
 * Launch a producer into the capturing stream config->hStream with
 * cuLaunchKernelEx (params as for cuLaunchKernelEx; extra is not taken) and
 * record it like toggle_record_producer.  In device mode the launch carries
 * CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE (appended to config's
 * attributes, which are not changed) and the node's device handle is
 * recorded.  Runtime API users get a CUfunction from a __global__ function
 * with cudaGetFuncBySymbol().  On a stream that is not capturing the kernel
 * just runs (eager execution: nothing to record); into a capture outside a
 * capture window it is refused before the launch (TOGGLE_ECAPTURE).  A
 * record that fails after the launch (a driver query failed, no room)
 * marks the graph late, as toggle_record_producer does.
 */
int toggle_launch_producer(struct toggle_agent *agent, const CUlaunchConfig *config,
			   CUfunction fn, void **params, struct toggle_hook hook);

#if CUDA_VERSION >= 12040
/*
 * For integrations that launch producers themselves with the
 * device-updatable attribute (cudaLaunchKernelEx with
 * cudaLaunchAttributeDeviceUpdatableKernelNode): record the node the launch
 * added, with the device handle the attribute returned.
 */
int toggle_record_device_producer(struct toggle_agent *agent, CUstream stream,
				  struct toggle_hook hook, CUgraphDeviceNode node);
#endif

/* What a graph's planner did, read from device memory (a synchronous copy:
 * synchronize the streams it was launched on first for exact numbers). */
struct toggle_device_counters {
	uint64_t planner_runs;    /* launches whose planner acted */
	uint64_t device_calls;    /* device-side set-enabled calls */
	uint64_t device_failures; /* of which failed (the planner retries them) */
};

/* TOGGLE_ENOENT for an unknown graph, TOGGLE_ENOTSUP for one not in device mode. */
int toggle_graph_device_counters(const struct toggle_agent *agent, CUgraph graph,
				 struct toggle_device_counters *out);

/*
 * Tainted launches.  A launch cannot be cancelled from the device: when a
 * planner's device-side set-enabled call fails, that launch runs with the
 * producer in its old state, i.e. not with the set of its step.  The planner
 * reports every such launch (and the first clean launch after it) in host
 * memory mapped for the device; libtoggle reads the reports without waiting
 * for the GPU at every toggle_step_begin() and at every launch of the graph
 * that writes its mask, maps each tainted launch to the step it was made in,
 * and reports it here, in toggle_graph_status() (tainted, tainted_step), in
 * the anomalies (device_tainted) and in the status lane the daemon reads.
 * The planner calls the failed nodes again at the next launch, so a launch
 * without failure holds exactly its set again.  A strict agent refuses every
 * further launch of a tainted exec (TOGGLE_ECUDA) until a clean launch was
 * reported or the graph is bound again (toggle_graph_bind, which makes the
 * next planner set every producer).
 */
struct toggle_taint {
	uint64_t launches;     /* tainted launches reported */
	uint64_t lost;         /* of which details were lost (more than the report holds:
				* the 7 latest of a graph between two looks) */
	uint64_t calls_failed; /* device-side set-enabled calls that failed in them */
	int64_t last_step;     /* step of the latest, -1 = none (or made before any step) */
	CUgraph last_graph;    /* its graph, NULL = none */
};

/* Nothing with a NULL out; zeros (last_step -1, last_graph NULL) for a NULL agent. */
void toggle_taint_get(const struct toggle_agent *agent, struct toggle_taint *out);

/* ---- desired state ------------------------------------------------------ */

struct toggle_plan_entry {
	int64_t step;
	struct toggle_set set;
};

/* Replace the standing set (used by steps without a plan entry). */
int toggle_set_enabled(struct toggle_agent *agent, const struct toggle_set *set);
/* The set for one future step; TOGGLE_ELATE if that step already began. */
int toggle_plan_step(struct toggle_agent *agent, int64_t step, const struct toggle_set *set);
/* Several entries, all or nothing. */
int toggle_plan_submit(struct toggle_agent *agent, const struct toggle_plan_entry *entries,
		       size_t n);
/* Drop every pending plan entry. */
void toggle_plan_clear(struct toggle_agent *agent);

/*
 * Begin a step (steps strictly increase): resolve its set (its plan entry,
 * else the standing set), make it the set every replay of this step runs
 * with, and return it in *effective (may be NULL) for the metadata gate.
 * In eager mode, also applies it to every bound exec.
 */
int toggle_step_begin(struct toggle_agent *agent, int64_t step, struct toggle_set *effective);

/* ---- replay ------------------------------------------------------------- */

/*
 * The replay.  Unrelated graphs (no producers recorded) are launched as they
 * are, also when they got the handle of a destroyed graph the agent knew
 * (and its node handles: the driver says when a graph is destroyed).
 * A graph with producers must be bound (a different exec rebinds it);
 * nodes whose state differs from the step's set are set, then the exec is
 * launched.  Any failure refuses the launch: nothing is launched.
 */
int toggle_graph_launch(struct toggle_agent *agent, CUgraph graph, CUgraphExec exec,
			CUstream stream);

/*
 * toggle_graph_launch() without its cuGraphLaunch, for a caller that must
 * launch the exec itself (torch's CUDAGraph::replay runs its generators'
 * replay prologue, then launches its own exec).  Same guard (same refusals,
 * errors and counters), exec brought to the step's set exactly as a launch
 * on stream would (host modes: node sets; device mode: the mask words
 * enqueued on stream, after a join when the previous launch was on another
 * stream), and the launch accounted (replays, last step, the launch index
 * device mode's taint report uses) as if it had happened.  Unrelated graphs:
 * 0, nothing done.  Never the producer-free exec (the caller launches exec):
 * a graph running it is switched back to exec, brought to the set.
 *
 * The promise: after a 0 the caller launches exactly exec on exactly stream,
 * once, right after, before any other toggle_graph_prepare/launch of that
 * graph.  A prepare not followed by its launch must be followed by another
 * toggle_graph_prepare() or toggle_graph_launch() of that graph before the
 * exec is launched: that call is exact again, on any stream (device mode:
 * after a prepare that wrote mask words or waited for another stream, the
 * graph's next launch, and a prepare on another stream, first wait for the
 * prepare's stream when theirs differs), but the unlaunched prepare stays counted as a
 * replay, and in device mode the taint report's launch-to-step map is off
 * by one launch for that graph.  Otherwise (the exec launched again without
 * a prepare, or on another stream than the prepare's) the launch runs
 * whatever set the exec last held, and in device mode is not ordered after
 * the mask words: the three lanes may disagree.  Refused (< 0): do not
 * launch; nothing was accounted.
 */
int toggle_graph_prepare(struct toggle_agent *agent, CUgraph graph, CUgraphExec exec,
			 CUstream stream);

/* Bring every bound exec to the current set now (a quiescent point). */
int toggle_apply_all(struct toggle_agent *agent);

/* ---- status ------------------------------------------------------------- */

struct toggle_graph_status {
	CUgraph graph;
	CUgraphExec exec;        /* NULL when not bound */
	uint32_t nodes;          /* producer nodes recorded */
	uint32_t hooks_covered;  /* distinct hooks among them */
	uint64_t applied_version; /* version of the set its exec holds, 0 = none */
	uint64_t replays;        /* launches of this graph through this agent, across execs */
	int64_t last_step;       /* step of the last replay, -1 = none */
	bool bound;
	bool stale;              /* forgotten */
	enum toggle_mode mode;   /* how its producers are toggled: DEVICE or the host mode */
	bool device_fallback;    /* a device-mode agent toggles it on the host: see note */
	bool uploaded;           /* device mode: its exec was uploaded at bind */
	char note[128];          /* why it is not in device mode, why it is late, or "" */
	/* Device mode: launches that ran another set than their step's (see toggle_taint). */
	uint64_t tainted_launches; /* reported for this capture */
	int64_t tainted_step;      /* step of the latest, -1 = none or unknown */
	bool tainted;              /* the latest tainted launch was not yet followed by a clean one */
	bool blocked;              /* strict agent: launches refused until a clean apply or a bind */
	/* The producer-free exec: a second exec of the graph without its
	 * producers, built at bind, launched at steps whose set enables none of
	 * the graph's hooks (host modes; not for a graph in device mode). */
	bool bare_exec;          /* it has one */
	bool bare_running;       /* its launches run it (the current set fits) */
	uint64_t bare_replays;   /* launches that ran it, across execs */
	/* The full exec: another exec of the graph, holding no lifetime
	 * object, built at bind next to the producer-free one
	 * (toggle_graph_set_bare switches both).  Host modes: a clone of the
	 * graph, launched at every step the producer-free exec does not fit,
	 * its producers set from node states of its own (the main exec then
	 * holds the set it was last synced to).  Device mode: without its
	 * planner, every producer a plain kernel node, launched at steps whose
	 * set enables every hook of the graph. */
	bool full_exec;          /* it has one */
	bool full_running;       /* its launches run it */
	uint64_t full_replays;   /* launches that ran it, across execs */
	/* The set exec (host modes): the graph without the producers of one
	 * set in between leaves off, built at a step_begin once that set has
	 * held for some steps (docs/libtoggle.md, *The set exec*), launched
	 * while the set agrees with it on the graph's hooks; and the all-on
	 * exec, the full exec's graph instantiated again, launched at all on
	 * once sets in between have set the full exec.  Both count here. */
	bool set_exec;           /* it has one, or both */
	bool set_running;        /* its launches run one */
	uint64_t set_replays;    /* launches that ran one, across execs */
};

/*
 * The agent's anomaly counters, XX(field) each: one uint64_t field of struct
 * toggle_anomalies, in this order.  The struct stays written out (it is ABI
 * and what readers look at); layout.c asserts that it has exactly these
 * fields at these offsets and reports them in toggle_layout().  The status
 * lane publishes them as TOGGLE_SHM_ANOMALY_MAP (toggle_shm.h).
 */
#define TOGGLE_ANOMALY_MAP(XX)  \
	XX(record_outside_window) \
	XX(record_not_capturing)  \
	XX(record_not_kernel)     \
	XX(launch_unbound)        \
	XX(launch_stale)          \
	XX(driver_errors)         \
	XX(late_plans)            \
	XX(device_fallbacks)      \
	XX(device_refused)        \
	XX(host_on_device_node)   \
	XX(device_tainted)

struct toggle_anomalies {
	uint64_t record_outside_window;
	uint64_t record_not_capturing;
	uint64_t record_not_kernel;
	uint64_t launch_unbound;
	uint64_t launch_stale;
	uint64_t driver_errors;
	uint64_t late_plans;
	uint64_t device_fallbacks;    /* graphs a device-mode agent runs on the host */
	uint64_t device_refused;      /* binds refused: strict, graph cannot run in device mode */
	uint64_t host_on_device_node; /* host toggles refused: they would mix with the planner's */
	uint64_t device_tainted;      /* launches whose planner failed a call (toggle_taint) */
};

struct toggle_stats {
	uint64_t launches;           /* toggle_graph_launch calls that launched, and
				      * toggle_graph_prepare calls that prepared */
	uint64_t launches_unrelated; /* of which graphs without producers */
	uint64_t launches_refused;
	uint64_t node_set_calls;     /* cuGraphNodeSetEnabled calls made */
	uint64_t syncs;              /* exec brought to a new set (host or device) */
	uint64_t rebinds;
	uint64_t uploads;            /* device mode: cuGraphUpload at bind */
	uint64_t mask_writes;        /* device mode: launches preceded by mask words */
	uint64_t mask_words;         /* device mode: 64-bit words written in stream order */
	uint64_t stream_joins;       /* device mode: waits for another stream before a write */
	uint64_t reuse_fences;       /* device mode: binds that waited for the earlier exec of
				      * a record reused by a new capture */
	uint64_t version;            /* version of the current set */
	int64_t step;                /* current step, -1 before the first */
	uint64_t bare_builds;        /* producer-free execs built (at bind) */
	uint64_t bare_build_failures; /* builds that failed: the main exec runs every step */
	uint64_t bare_switches;      /* picks of the bare exec or back from it */
	uint64_t full_builds;        /* full execs built (at bind) */
	uint64_t full_build_failures; /* builds that failed: the main exec runs all-on steps */
	uint64_t full_switches;      /* picks of the full exec or back from it */
	uint64_t set_builds;         /* set and all-on execs built (at step_begin) */
	uint64_t set_build_failures; /* builds that failed: the full exec runs that set */
	uint64_t set_switches;       /* picks of a set exec or back from it */
	/* Host modes (unless toggle_config.clone_execs): producer-free and full
	 * execs assembled, and those cloned because the assembly failed (a node
	 * it cannot copy; the reason was the last error until the clone). */
	uint64_t assembled_builds;
	uint64_t assemble_fallbacks;
};

struct toggle_registry_check {
	uint32_t graphs;          /* graphs with producers, not forgotten */
	uint32_t unbound;
	bool complete;            /* every graph covers every catalog hook */
	bool uniform;             /* every graph covers the same hooks */
	uint32_t hooks_uncovered; /* catalog hooks missing from some graph */
};

size_t toggle_graph_count(const struct toggle_agent *agent);
/* Fills up to cap records; returns the number of graphs (may exceed cap). */
size_t toggle_graph_list(const struct toggle_agent *agent, struct toggle_graph_status *out,
			 size_t cap);
int toggle_graph_status(const struct toggle_agent *agent, CUgraph graph,
			struct toggle_graph_status *out); /* TOGGLE_ENOENT */
/* Hooks covered by a graph's recorded producers. */
int toggle_graph_hooks(const struct toggle_agent *agent, CUgraph graph, struct toggle_set *out);
void toggle_registry_check(const struct toggle_agent *agent, struct toggle_registry_check *out);
void toggle_anomalies_get(const struct toggle_agent *agent, struct toggle_anomalies *out);
void toggle_stats_get(const struct toggle_agent *agent, struct toggle_stats *out);
/* The set replays currently run with. */
void toggle_current_set(const struct toggle_agent *agent, struct toggle_set *out);

/* ---- producer regions, built-in copy producer --------------------------- */

/*
 * Producer regions: record every kernel node that the capture of `stream`
 * gains between begin and end (walk from the capture's dependency frontier
 * after, back via cuStreamGetCaptureInfo and cuGraphNodeGetDependencies,
 * stopping at every node the graph had at begin (cuGraphGetNodes); streams
 * forked and joined inside the region count, a side stream's link to its
 * own older work does not), filed under hook.  One open region per stream;
 * nested regions on one stream are refused (TOGGLE_EINVAL) and the open one
 * stays.  A memcpy/memset node in the region refuses the whole region
 * (TOGGLE_ENOTKERNEL; last_error says how to make the copy a kernel, e.g.
 * torch.mul(x, 1, out=buf) or toggle_copy_out); no kernel node at all:
 * TOGGLE_ENOTKERNEL too.  Work the capture gained that is not ordered
 * before the region's end on `stream` (a stream forked in the region and
 * not joined back, another stream capturing into the graph meanwhile), or a
 * node recorded already: TOGGLE_EINVAL.  Refused outside a capture window or
 * on a stream that is not capturing (TOGGLE_ECAPTURE), counted as anomalies
 * like toggle_record_producer (record_outside_window, record_not_capturing,
 * record_not_kernel).  On refusal nothing of the region is recorded, but
 * what the capture gained since begin stays in the graph and would run
 * whatever the set: when the capture is still the region's and gained nodes
 * (or a driver query failed, so that it cannot tell), the graph is marked
 * "late" like after a refused toggle_record_producer (note names the hook;
 * bind and launches refused with TOGGLE_ECAPTURE until captured again).  A
 * region that gained nothing leaves the graph alone.  End closes the region
 * whether it records or refuses.  A region still open when its capture ends
 * marks its graph late the same way (found at toggle_capture_end, at a bind,
 * toggle_graph_instantiate or launch of the graph, or at a later
 * toggle_producer_end, TOGGLE_ECAPTURE), unless it captured nothing or the
 * graph was destroyed meanwhile; the region is closed then.
 */
int toggle_producer_begin(struct toggle_agent *agent, CUstream stream);
int toggle_producer_end(struct toggle_agent *agent, CUstream stream, struct toggle_hook hook,
			size_t *n_recorded /* may be NULL */);
/*
 * Drop an open region of stream without recording anything.  If its capture
 * gained nodes, they are in the graph unrecorded: the graph is marked late
 * (fails closed until captured again), as for a refused region.
 */
void toggle_producer_abort(struct toggle_agent *agent, CUstream stream);

/*
 * Built-in producer: copy rows x row_bytes from src (pitch src_pitch) to dst
 * (pitch dst_pitch) as ONE kernel launched through toggle_launch_producer
 * (device-updatable in device mode), recorded under hook.  Contiguous = rows 1
 * or pitches equal to row_bytes.  Same capture rules as toggle_launch_producer.
 * TOGGLE_ENOTSUP when the library was built without nvcc (no kernel image).
 */
struct toggle_copy {
	CUdeviceptr dst;
	CUdeviceptr src;
	size_t row_bytes;
	size_t rows;
	size_t dst_pitch;
	size_t src_pitch;
};
int toggle_copy_out(struct toggle_agent *agent, CUstream stream, struct toggle_hook hook,
		    const struct toggle_copy *copy);

/* ---- bindings ------------------------------------------------------------ */

/*
 * Struct layout self-description for bindings: every public struct that a
 * binding mirrors (toggle_config, toggle_hook, toggle_set, toggle_catalog,
 * toggle_plan_entry, toggle_graph_status, toggle_anomalies, toggle_stats,
 * toggle_copy, toggle_device_counters, toggle_registry_check, toggle_limit), one entry for
 * the struct (field NULL, size = sizeof, offset 0) and one per field.
 */
struct toggle_layout_entry {
	const char *type;
	const char *field;
	uint32_t size;
	uint32_t offset;
};
const struct toggle_layout_entry *toggle_layout(size_t *count);
/*
 * The limits a binding mirrors as constants, by C name, as this library was
 * built: TOGGLE_MAX_HOOK_TYPES, TOGGLE_MAX_LAYERS, TOGGLE_MAX_NAME,
 * TOGGLE_MAX_PLAN and the wire's TGP_PROTOCOL_VERSION, TGP_MAX_FRAME,
 * TGP_MAX_PLAN_ENTRIES (a client in another language checks its copies).
 */
struct toggle_limit {
	const char *name;
	uint64_t value;
};
const struct toggle_limit *toggle_limits(size_t *count);
/* Library version for bindings: (TOGGLE_VERSION_MAJOR << 16) | MINOR. */
unsigned toggle_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_H */
