/*
 * device.c - device mode: a planner kernel at the head of each graph toggles
 * the graph's device-updatable producers on the device, from a mask that
 * the host enqueues on the launch stream.
 *
 * Per graph record there is one planner descriptor (planner.h) at a fixed
 * device address (slot = the record's index), which the planner node is
 * captured with, plus one allocation holding the device node handles, the
 * mask words and the planner's record of each node's state.
 *
 * Stream order is what makes pipelined launches safe.  The host never
 * writes the mask or the epoch with a plain copy once the exec may run:
 * before a launch whose exec does not hold the current set it enqueues
 * 64-bit writes (cuStreamBatchMemOp) of only the mask words that differ from
 * what its earlier writes leave there, on the launch stream, then the launch.
 * A launch's planner therefore reads exactly the words enqueued before it
 * and after the previous launch on that stream: launch k-1 has finished
 * (its planner has read its mask) before the writes for launch k run, and
 * those run before launch k starts.  Launches of one exec are serialised by
 * the driver whatever their streams, so the planner's own state has one
 * writer at a time; the one hazard left, a write on stream B while the
 * exec's previous launch on stream A has not run yet, is closed by recording
 * an event on A and making B wait for it before the writes (a "join"),
 * whenever the stream changes between two launches and there is something
 * to write.
 *
 * Binding resets like the host modes: the epoch moves, so the next launch's
 * planner sets every producer.  The first bind of a capture writes the
 * descriptor and arrays with copies on the agent's own stream, uploads the
 * exec there (the driver requires it before the first launch of a graph
 * whose nodes are updated from the device) and waits for that stream only.
 * A record reused by a new capture (the driver gave a destroyed graph's
 * handle to a new one) still serves the old graph's exec, whose launches may
 * be queued and whose mask writes target the same descriptor and arrays:
 * before writing them for the new capture, the bind waits for all the
 * context's work (cuCtxSynchronize), so no old launch or write can land
 * after it.
 *
 * Tainted launches: each planner reports a launch in which a set-enabled call
 * failed, and the first clean one after it, in host-mapped memory (one
 * struct tg_plan_report per record), then sets the agent's signal word.
 * The host reads the reports with loads at each launch that writes a
 * graph's mask and, at step_begin, when the signal was set (one exchange:
 * a step costs the same however many graphs are bound, as in the host
 * modes); it finds the step of a run from the launch indexes noted at each
 * graph's first launch of a step (replay.c, tg_dev_note_step) and at bind.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"
#include "planner.h"

#define TG_DEV_MIN_DRIVER 12040 /* device-updatable kernel nodes */
#define TG_BATCH_MAX 255        /* cuStreamBatchMemOp: count < 256 */
#define TG_DESCS_BYTES ((size_t)TOGGLE_MAX_GRAPHS * TG_PLAN_DESC_SIZE)

_Static_assert(sizeof(struct tg_plan_desc) == TG_PLAN_DESC_SIZE, "descriptor layout");
_Static_assert(sizeof(struct tg_plan_report) == TG_PLAN_REPORT_SIZE, "report layout");
_Static_assert((TG_PLAN_REPORT_RING & (TG_PLAN_REPORT_RING - 1)) == 0, "report ring");

/* The signal word, after the reports: planners set it, tg_device_step clears it. */
#define TG_SIGNAL_OFFSET ((size_t)TOGGLE_MAX_GRAPHS * TG_PLAN_REPORT_SIZE)
#define TG_REPORTS_BYTES (TG_SIGNAL_OFFSET + TG_PLAN_REPORT_SIZE)

static uint64_t *dev_signal(const struct toggle_agent *a)
{
	return (uint64_t *)((char *)a->dev.reports + TG_SIGNAL_OFFSET);
}

static CUdeviceptr desc_addr(const struct toggle_agent *a, const struct tg_graph *g)
{
	return a->dev.descs + (CUdeviceptr)g->slot * TG_PLAN_DESC_SIZE;
}

static struct tg_plan_report *dev_report(const struct toggle_agent *a, const struct tg_graph *g)
{
	return (struct tg_plan_report *)((char *)a->dev.reports + (size_t)g->slot * TG_PLAN_REPORT_SIZE);
}

static int dev_cuda_fail(struct toggle_agent *a, CUresult r, const char *what, CUgraph graph)
{
	a->anomalies.driver_errors++;
	return tg_fail(a, TOGGLE_ECUDA, "device mode, graph %p: %s: %s", (void *)graph, what,
		       tg_cu_errstr(&a->cu, r));
}

/* ---- agent --------------------------------------------------------------- */

int tg_device_open(struct toggle_agent *a)
{
#if !TG_HAVE_DEVICE_MODE
	return tg_fail(a, TOGGLE_ENOTSUP, "libtoggle was built with CUDA headers older than 12.4");
#else
	struct tg_device *d = &a->dev;
	const char *missing = "?";
	CUresult r;
	int v = a->cu.driver_version;

	if (v < TG_DEV_MIN_DRIVER)
		return tg_fail(a, TOGGLE_ENOTSUP,
			       "CUDA driver %d.%d is too old: device mode needs 12.4 or newer", v / 1000,
			       v % 1000 / 10);
	if (!tg_cu_device_ready(&a->cu, &missing))
		return tg_fail(a, TOGGLE_ENOTSUP, "the CUDA driver lacks %s", missing);
	if (!a->cu.planner_image)
		return tg_fail(a, TOGGLE_ENOTSUP,
			       "this libtoggle was built without nvcc: it holds no planner kernel");
	if (!tg_cu_has_64bit_memops(&a->cu))
		return tg_fail(a, TOGGLE_ENOTSUP,
			       "no current CUDA context, or its device lacks 64-bit stream memory "
			       "operations");
	r = tg_cu_module_load(&a->cu, &d->module, a->cu.planner_image);
	if (r != CUDA_SUCCESS) {
		d->module = NULL;
		tg_fail(a, TOGGLE_ENOTSUP,
			"cannot load the planner kernel (cuModuleLoadData: %s): it needs a current "
			"CUDA context on an sm_90 or newer device", tg_cu_errstr(&a->cu, r));
		goto fail;
	}
	r = a->cu.module_get_function(&d->planner, d->module, "tg_planner");
	if (r == CUDA_SUCCESS)
		r = tg_cu_stream_create(&a->cu, &d->setup);
	if (r == CUDA_SUCCESS)
		r = tg_cu_mem_alloc(&a->cu, &d->descs, TG_DESCS_BYTES);
	if (r != CUDA_SUCCESS) {
		tg_fail(a, TOGGLE_ENOTSUP, "cannot set up the planner: %s", tg_cu_errstr(&a->cu, r));
		goto fail;
	}
	r = tg_cu_mem_host_alloc(&a->cu, &d->reports, &d->reports_dev, TG_REPORTS_BYTES);
	if (r != CUDA_SUCCESS) {
		tg_fail(a, TOGGLE_ENOTSUP, "cannot allocate the planners' reports (host memory "
			"mapped for the device): %s", tg_cu_errstr(&a->cu, r));
		goto fail;
	}
	memset(d->reports, 0, TG_REPORTS_BYTES); /* the signal clear; each report again at setup */
	/* Descriptors start zeroed: tag 0 matches no planner, so all are idle. */
	void *zero = calloc(1, TG_DESCS_BYTES);
	d->want = calloc(TOGGLE_MAX_NODES / 64, sizeof(*d->want));
	d->ops = calloc(TG_BATCH_MAX, sizeof(*d->ops));
	if (!zero || !d->want || !d->ops) {
		free(zero);
		tg_fail(a, TOGGLE_ENOMEM, "out of memory setting up device mode");
		goto fail;
	}
	r = a->cu.memcpy_htod_async(d->descs, zero, TG_DESCS_BYTES, d->setup);
	if (r == CUDA_SUCCESS)
		r = a->cu.stream_synchronize(d->setup);
	free(zero);
	if (r != CUDA_SUCCESS) {
		tg_fail(a, TOGGLE_ENOTSUP, "cannot clear the planner descriptors: %s",
			tg_cu_errstr(&a->cu, r));
		goto fail;
	}
	d->on = true;
	return 0;
fail:
	tg_device_close(a);
	return TOGGLE_ENOTSUP;
#endif
}

void tg_device_graph_free(struct toggle_agent *a, struct tg_graph *g)
{
	if (g->dev_mem)
		(void)tg_cu_mem_free(&a->cu, g->dev_mem);
	if (g->join)
		(void)tg_cu_event_destroy(&a->cu, g->join);
	free(g->shadow);
	g->dev_mem = 0;
	g->dev_mem_size = 0;
	g->join = NULL;
	g->shadow = NULL;
	g->cap_words = 0;
}

void tg_device_close(struct toggle_agent *a)
{
	struct tg_device *d = &a->dev;

	for (size_t i = 0; a->graphs && i < a->n_graphs; i++)
		tg_device_graph_free(a, a->graphs[i]);
	if (d->descs)
		(void)tg_cu_mem_free(&a->cu, d->descs);
	if (d->reports)
		(void)tg_cu_mem_host_free(&a->cu, d->reports);
	if (d->setup)
		(void)tg_cu_stream_destroy(&a->cu, d->setup);
	if (d->module)
		(void)tg_cu_module_unload(&a->cu, d->module);
	free(d->want);
	free(d->ops);
	memset(d, 0, sizeof(*d));
}

/* ---- capture ------------------------------------------------------------- */

/* Capture status of stream, and the one node the last launch added (if asked). */
static int dev_capture_info(struct toggle_agent *a, CUstream stream, const char *what,
			    CUstreamCaptureStatus *st, uint64_t *id, CUgraph *graph,
			    CUgraphNode *last)
{
	cuuint64_t cid = 0;
	const CUgraphNode *deps = NULL;
	size_t ndeps = 0;
	CUresult r = a->cu.stream_get_capture_info(stream, st, &cid, graph, &deps, NULL, &ndeps);
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "%s: cuStreamGetCaptureInfo: %s", what,
			       tg_cu_errstr(&a->cu, r));
	}
	*id = cid;
	if (last)
		*last = (*st == CU_STREAM_CAPTURE_STATUS_ACTIVE && ndeps == 1 && deps) ? deps[0] : NULL;
	return 0;
}

int toggle_capture_planner(struct toggle_agent *a, CUstream stream)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (a->capture_depth == 0) {
		a->anomalies.record_outside_window++;
		return tg_fail(a, TOGGLE_ECAPTURE, "capturing the planner: no capture window is open");
	}
	if (!a->dev.on)
		return 0; /* host modes: no planner */
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	uint64_t id = 0;
	CUgraph graph = NULL;
	int rc = dev_capture_info(a, stream, "capturing the planner", &st, &id, &graph, NULL);
	if (rc)
		return rc;
	if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
		a->anomalies.record_not_capturing++;
		return tg_fail(a, TOGGLE_ECAPTURE, "capturing the planner: stream %p is not capturing",
			       (void *)stream);
	}
	struct tg_graph *g = tg_graph_for_capture(a, graph, id);
	if (!g)
		return tg_fail(a, a->n_graphs >= TOGGLE_MAX_GRAPHS ? TOGGLE_ELIMIT : TOGGLE_ENOMEM,
			       "capturing the planner: cannot add graph %p (%zu graphs)",
			       (void *)graph, a->n_graphs);
	if (g->planner_tag)
		return tg_fail(a, TOGGLE_EINVAL, "graph %p already has a planner", (void *)graph);

	uint64_t tag = ++a->dev.next_tag;
	CUdeviceptr desc = desc_addr(a, g);
	unsigned long long tag_param = tag;
	void *params[] = {&desc, &tag_param};
	CUlaunchConfig cfg = {
		.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
		.blockDimX = TG_PLAN_THREADS, .blockDimY = 1, .blockDimZ = 1,
		.hStream = stream,
	};
	CUresult r = a->cu.launch_kernel_ex(&cfg, a->dev.planner, params, NULL);
	if (r != CUDA_SUCCESS)
		return dev_cuda_fail(a, r, "capturing the planner (cuLaunchKernelEx)", graph);
	CUgraphNode node = NULL;
	rc = dev_capture_info(a, stream, "capturing the planner", &st, &id, &graph, &node);
	if (rc)
		return rc;
	if (!node)
		return tg_fail(a, TOGGLE_ECAPTURE,
			       "capturing the planner: the capture of graph %p does not end in it",
			       (void *)graph);
	g->planner_tag = tag;
	g->planner_node = node;
	return 0;
}

int toggle_launch_producer(struct toggle_agent *a, const CUlaunchConfig *config, CUfunction fn,
			   void **params, struct toggle_hook hook)
{
	if (!a)
		return TOGGLE_EINVAL;
	return tg_launch_producer(a, config, fn, params, hook);
}

int tg_launch_producer(struct toggle_agent *a, const CUlaunchConfig *config, CUfunction fn,
		       void **params, struct toggle_hook hook)
{
	if (!config || !fn)
		return tg_fail(a, TOGGLE_EINVAL, "launching hook %u:%u: config or function is NULL",
			       hook.type, hook.layer);
	if (hook.type >= a->catalog.n_types || hook.layer >= a->catalog.n_layers)
		return tg_fail(a, TOGGLE_ERANGE, "hook %u:%u outside the catalog (%u types, %u layers)",
			       hook.type, hook.layer, a->catalog.n_types, a->catalog.n_layers);
	if (!a->cu.launch_kernel_ex)
		return tg_fail(a, TOGGLE_ENOTSUP, "the CUDA driver lacks cuLaunchKernelEx");
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	uint64_t id = 0;
	CUgraph graph = NULL;
	int rc = dev_capture_info(a, config->hStream, "launching a producer", &st, &id, &graph, NULL);
	if (rc)
		return rc;
	bool capturing = st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
	if (capturing && a->capture_depth == 0) {
		/* Refused before the launch: no unrecorded producer in the graph. */
		a->anomalies.record_outside_window++;
		return tg_fail(a, TOGGLE_ECAPTURE, "launching hook %u:%u: no capture window is open",
			       hook.type, hook.layer);
	}

	CUlaunchConfig cfg = *config;
	uint64_t devnode = 0;
#if TG_HAVE_DEVICE_MODE
	enum { MAX_ATTRS = 16 };
	CUlaunchAttribute attrs[MAX_ATTRS];
	if (a->dev.on && capturing) {
		if (config->numAttrs >= MAX_ATTRS || (config->numAttrs && !config->attrs))
			return tg_fail(a, TOGGLE_EINVAL, "launching hook %u:%u: %u launch attributes "
				       "(at most %d)", hook.type, hook.layer, config->numAttrs,
				       MAX_ATTRS - 1);
		if (config->numAttrs)
			memcpy(attrs, config->attrs, config->numAttrs * sizeof(attrs[0]));
		memset(&attrs[config->numAttrs], 0, sizeof(attrs[0]));
		attrs[config->numAttrs].id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
		attrs[config->numAttrs].value.deviceUpdatableKernelNode.deviceUpdatable = 1;
		cfg.attrs = attrs;
		cfg.numAttrs = config->numAttrs + 1;
	}
#endif
	CUresult r = a->cu.launch_kernel_ex(&cfg, fn, params, NULL);
	if (r != CUDA_SUCCESS) {
		a->anomalies.driver_errors++;
		return tg_fail(a, TOGGLE_ECUDA, "launching hook %u:%u: cuLaunchKernelEx: %s", hook.type,
			       hook.layer, tg_cu_errstr(&a->cu, r));
	}
	if (!capturing)
		return 0; /* run eagerly, outside any graph: nothing to record */
#if TG_HAVE_DEVICE_MODE
	if (a->dev.on)
		devnode = (uint64_t)(uintptr_t)attrs[cfg.numAttrs - 1].value.deviceUpdatableKernelNode.devNode;
#endif
	/* Attributes of the caller's: a plain copy of this producer would lose them. */
	rc = tg_record(a, config->hStream, hook, devnode, config->numAttrs != 0);
	if (rc) /* the kernel is in this capture whatever tg_record could find out: fail closed */
		tg_record_refused_in(a, graph, id, hook, rc);
	return rc;
}

#if CUDA_VERSION >= 12040
int toggle_record_device_producer(struct toggle_agent *a, CUstream stream, struct toggle_hook hook,
				  CUgraphDeviceNode node)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (!node) {
		int rc = tg_fail(a, TOGGLE_EINVAL, "recording hook %u:%u: the device node is NULL",
				 hook.type, hook.layer);
		tg_record_refused(a, stream, hook, rc); /* the producer is in the capture */
		return rc;
	}
	return tg_record(a, stream, hook, (uint64_t)(uintptr_t)node, true); /* launched by the caller */
}
#endif

/* ---- bind: decide, set up, upload ---------------------------------------- */

/* A set of node handles (open addressing), for the walk from the planner. */
struct node_set {
	CUgraphNode *slot;
	size_t cap, n; /* cap: a power of two */
};

static bool node_set_has(const struct node_set *s, CUgraphNode n)
{
	for (size_t i = tg_node_hash(n) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		if (s->slot[i] == n)
			return true;
		if (!s->slot[i])
			return false;
	}
}

/* 1: added, 0: was there, <0: out of memory. */
static int node_set_add(struct node_set *s, CUgraphNode n)
{
	if (2 * (s->n + 1) > s->cap) {
		struct node_set t = {.cap = s->cap ? 2 * s->cap : 256};
		if (!(t.slot = calloc(t.cap, sizeof(*t.slot))))
			return -1;
		for (size_t i = 0; i < s->cap; i++)
			if (s->slot[i])
				(void)node_set_add(&t, s->slot[i]);
		free(s->slot);
		*s = t;
	}
	size_t i = tg_node_hash(n) & (s->cap - 1);
	for (; s->slot[i]; i = (i + 1) & (s->cap - 1))
		if (s->slot[i] == n)
			return 0;
	s->slot[i] = n;
	s->n++;
	return 1;
}

/*
 * Whether every producer is ordered after the planner: a walk over the
 * dependents of the planner node.  0 yes, 1 no (why filled), <0 an error.
 */
static int dev_check_order(struct toggle_agent *a, struct tg_graph *g, char *why, size_t len)
{
	struct node_set seen = {0};
	CUgraphNode *queue = NULL, *deps = NULL;
	CUgraphEdgeData *edges = NULL;
	size_t qn = 0, qcap = 0, dcap = 0;
	int rc = TOGGLE_ENOMEM;

	if (node_set_add(&seen, g->planner_node) < 0)
		goto out;
	if (!(queue = malloc(64 * sizeof(*queue))))
		goto out;
	qcap = 64;
	queue[qn++] = g->planner_node;
	for (size_t qi = 0; qi < qn; qi++) {
		size_t nd = 0;
		CUresult r = a->cu.graph_node_get_dependent_nodes(queue[qi], NULL, NULL, &nd);
		if (r == CUDA_SUCCESS && nd > dcap) {
			free(deps);
			free(edges);
			deps = malloc(nd * sizeof(*deps));
			edges = malloc(nd * sizeof(*edges));
			dcap = nd;
			if (!deps || !edges) {
				dcap = 0;
				goto out;
			}
		}
		if (r == CUDA_SUCCESS && nd)
			r = a->cu.graph_node_get_dependent_nodes(queue[qi], deps, edges, &nd);
		if (r != CUDA_SUCCESS) {
			rc = dev_cuda_fail(a, r, "walking the graph from its planner "
					   "(cuGraphNodeGetDependentNodes)", g->graph);
			goto out;
		}
		for (size_t k = 0; k < nd; k++) {
			int added = node_set_add(&seen, deps[k]);
			if (added < 0)
				goto out;
			if (!added)
				continue;
			if (qn == qcap) {
				CUgraphNode *q = realloc(queue, 2 * qcap * sizeof(*q));
				if (!q)
					goto out;
				queue = q;
				qcap *= 2;
			}
			queue[qn++] = deps[k];
		}
	}
	rc = 0;
	for (uint32_t i = 0; i < g->n_nodes; i++) {
		if (!node_set_has(&seen, g->nodes[i].node)) {
			uint32_t h = g->nodes[i].hook;
			snprintf(why, len, "producer hook %u:%u is not ordered after the planner",
				 h / TOGGLE_MAX_LAYERS, h % TOGGLE_MAX_LAYERS);
			rc = 1;
			break;
		}
	}
out:
	if (rc == TOGGLE_ENOMEM)
		tg_fail(a, rc, "out of memory walking graph %p", (void *)g->graph);
	free(seen.slot);
	free(queue);
	free(deps);
	free(edges);
	return rc;
}

/* Decide how g runs: the planner toggles it, or the host (with a note why). */
static int dev_decide(struct toggle_agent *a, struct tg_graph *g)
{
	char why[sizeof(g->note)] = "";

	if (!g->planner_tag) {
		snprintf(why, sizeof(why), "no planner was captured into it (toggle_capture_planner)");
	} else if (g->n_devnodes != g->n_nodes) {
		for (uint32_t i = 0; i < g->n_nodes; i++) {
			if (g->nodes[i].devnode)
				continue;
			uint32_t h = g->nodes[i].hook;
			snprintf(why, sizeof(why),
				 "producer hook %u:%u is not device-updatable (launch it with "
				 "toggle_launch_producer)", h / TOGGLE_MAX_LAYERS, h % TOGGLE_MAX_LAYERS);
			break;
		}
	} else {
		int rc = dev_check_order(a, g, why, sizeof(why));
		if (rc < 0)
			return rc;
	}
	memcpy(g->note, why, sizeof(g->note));
	if (!why[0])
		g->dev = TG_DEV_ACTIVE;
	else if (a->strict)
		g->dev = TG_DEV_REFUSED;
	else {
		g->dev = TG_DEV_FALLBACK;
		a->anomalies.device_fallbacks++;
	}
	return 0;
}

/* First bind of a capture: arrays and descriptor, enqueued on the agent's stream. */
static int dev_setup(struct toggle_agent *a, struct tg_graph *g, void **staging)
{
	uint32_t n = g->n_nodes, words = (n + 63) / 64;
	size_t off_mask = (size_t)n * 8, off_state = off_mask + (size_t)words * 8;
	size_t size = (off_state + n + 7) & ~(size_t)7;
	CUresult r;

	if (g->dev_mem) {
		/* An earlier capture of this record was set up: its exec may still have
		 * launches and mask writes queued on this descriptor and these arrays. */
		r = tg_cu_ctx_synchronize(&a->cu);
		if (r != CUDA_SUCCESS)
			return dev_cuda_fail(a, r, "waiting for the earlier exec of this record "
					     "(cuCtxSynchronize)", g->graph);
		a->stats.reuse_fences++;
	}
	if (size > g->dev_mem_size) {
		if (g->dev_mem)
			(void)tg_cu_mem_free(&a->cu, g->dev_mem);
		g->dev_mem = 0;
		g->dev_mem_size = 0;
		r = tg_cu_mem_alloc(&a->cu, &g->dev_mem, size);
		if (r != CUDA_SUCCESS)
			return dev_cuda_fail(a, r, "allocating the planner's arrays (cuMemAlloc)",
					     g->graph);
		g->dev_mem_size = size;
	}
	if (words > g->cap_words) {
		uint64_t *sh = realloc(g->shadow, words * sizeof(*sh));
		if (!sh)
			return tg_fail(a, TOGGLE_ENOMEM, "out of memory binding graph %p", (void *)g->graph);
		g->shadow = sh;
		g->cap_words = words;
	}
	unsigned char *buf = calloc(1, size + TG_PLAN_DESC_SIZE);
	if (!buf)
		return tg_fail(a, TOGGLE_ENOMEM, "out of memory binding graph %p", (void *)g->graph);
	*staging = buf; /* freed after the agent's stream was synchronised */
	for (uint32_t i = 0; i < n; i++)
		memcpy(buf + (size_t)i * 8, &g->nodes[i].devnode, 8);
	memset(buf + off_state, TG_PLAN_UNKNOWN, n);
	struct tg_plan_desc desc = {
		.tag = g->planner_tag,
		.nodes = g->dev_mem,
		.mask = g->dev_mem + off_mask,
		.state = g->dev_mem + off_state,
		.n = n,
		.words = words,
		.epoch = ++g->epoch, /* seen_epoch 0: the first planner sets every node */
		.report = a->dev.reports_dev + (CUdeviceptr)g->slot * TG_PLAN_REPORT_SIZE,
		.signal = a->dev.reports_dev + (CUdeviceptr)TG_SIGNAL_OFFSET,
	};
	memcpy(buf + size, &desc, sizeof(desc));
	r = a->cu.memcpy_htod_async(g->dev_mem, buf, size, a->dev.setup);
	if (r == CUDA_SUCCESS)
		r = a->cu.memcpy_htod_async(desc_addr(a, g), buf + size, sizeof(desc), a->dev.setup);
	if (r != CUDA_SUCCESS)
		return dev_cuda_fail(a, r, "writing the planner's descriptor (cuMemcpyHtoDAsync)",
				     g->graph);
	g->words = words;
	/* No planner of this record runs now (first setup, or fenced above). */
	memset(dev_report(a, g), 0, TG_PLAN_REPORT_SIZE);
	g->run_base = tg_dev_runs(g);
	g->rep_seen = 0;
	g->last_bad_run = 0;
	g->unclean = false;
	memset(g->shadow, 0, words * sizeof(*g->shadow)); /* the mask words just written */
	g->shadow_valid = true;
	g->epoch_pending = false;
	g->dev_setup = true;
	return 0;
}

int tg_device_bind(struct toggle_agent *a, struct tg_graph *g, CUgraphExec exec)
{
	if (g->dev == TG_DEV_UNDECIDED) {
		int rc = dev_decide(a, g);
		if (rc)
			return rc;
	}
	if (g->dev == TG_DEV_REFUSED) {
		a->anomalies.device_refused++;
		return tg_fail(a, TOGGLE_ENOTSUP, "graph %p cannot run in device mode: %s (strict agent)",
			       (void *)g->graph, g->note);
	}
	if (g->dev != TG_DEV_ACTIVE)
		return 0; /* the host toggles it */

	void *staging = NULL;
	bool fresh = !g->dev_setup;
	int rc = fresh ? dev_setup(a, g, &staging) : 0;
	CUresult r = CUDA_SUCCESS;
	bool upload = rc == 0 && exec != g->uploaded_exec;
	if (upload) {
		r = a->cu.graph_upload(exec, a->dev.setup);
		if (r != CUDA_SUCCESS)
			rc = dev_cuda_fail(a, r, "cuGraphUpload", g->graph);
	}
	if (fresh || upload) {
		/* Copies and upload complete before bind returns: no launch can precede them. */
		r = a->cu.stream_synchronize(a->dev.setup);
		if (r != CUDA_SUCCESS && rc == 0)
			rc = dev_cuda_fail(a, r, "synchronizing the agent's stream", g->graph);
	}
	free(staging);
	if (rc) {
		if (fresh)
			g->dev_setup = false; /* written or not: written again at the next bind */
		g->uploaded_exec = NULL;
		return rc;
	}
	if (upload) {
		g->uploaded_exec = exec;
		a->stats.uploads++;
	}
	if (!fresh) {
		/* Rebind: the planner sets every node at the next launch. */
		g->epoch++;
		g->epoch_pending = true;
	}
	/* A new exec (or a new start of this one): what was tainted before is history. */
	g->exec_first = tg_dev_runs(g);
	g->blocked = false;
	tg_dev_note_step(g, a->step);
	return 0;
}

/* ---- tainted launches ------------------------------------------------------ */

/* The step launch index i was made in; -1 when it is older than what is kept. */
static int64_t dev_step_of(const struct tg_graph *g, uint64_t i)
{
	uint32_t kept = g->n_bounds < TG_STEP_BOUNDS ? g->n_bounds : TG_STEP_BOUNDS;
	for (uint32_t k = 0; k < kept; k++) {
		uint32_t at = (g->n_bounds - 1 - k) % TG_STEP_BOUNDS;
		if (g->bounds[at].first <= i)
			return g->bounds[at].step;
	}
	return -1;
}

static void dev_taint(struct toggle_agent *a, struct tg_graph *g, const struct tg_plan_report_rec *rec)
{
	uint64_t launch = g->run_base + rec->run - 1;
	int64_t step = dev_step_of(g, launch);

	g->tainted++;
	g->tainted_step = step;
	if (rec->run > g->last_bad_run)
		g->last_bad_run = rec->run;
	g->unclean = true;
	a->anomalies.device_tainted++;
	a->taint.launches++;
	a->taint.calls_failed += rec->failures;
	a->taint.last_step = step;
	a->taint.last_graph = g->graph;
	if (a->strict && launch >= g->exec_first && g->bound) {
		g->blocked = true;
		g->applied_version = 0; /* off the fast path: its next launch is refused */
		g->prep_version = 0;    /* and its next prepare */
	}
}

/*
 * Take what g's planner reported since the last look: plain loads of host
 * memory, no driver call, no wait.  A record the planner may be rewriting
 * (more than the ring behind) is counted as lost, never used.
 */
void tg_device_poll(struct toggle_agent *a, struct tg_graph *g)
{
	if (g->dev != TG_DEV_ACTIVE || !g->dev_setup)
		return;
	const struct tg_plan_report *rep = dev_report(a, g);
	uint64_t bad = __atomic_load_n(&rep->bad, __ATOMIC_ACQUIRE);
	if (bad != g->rep_seen) {
		uint64_t from = g->rep_seen;
		if (bad < from) /* the planner only counts up: not a report of ours */
			from = bad;
		struct tg_plan_report_rec rec[TG_PLAN_REPORT_RING];
		uint64_t first = bad - from > TG_PLAN_REPORT_RING ? bad - TG_PLAN_REPORT_RING : from;
		for (uint64_t k = first; k < bad; k++) {
			const struct tg_plan_report_rec *src = &rep->ring[k % TG_PLAN_REPORT_RING];
			rec[k - first].run = __atomic_load_n(&src->run, __ATOMIC_RELAXED);
			rec[k - first].failures = __atomic_load_n(&src->failures, __ATOMIC_RELAXED);
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		uint64_t now = __atomic_load_n(&rep->bad, __ATOMIC_RELAXED);
		uint64_t lost = first - from;
		for (uint64_t k = first; k < bad; k++)
			if (now - k >= TG_PLAN_REPORT_RING || rec[k - first].run == 0)
				lost++; /* its slot may be in rewrite */
		if (lost) {
			/* Older than the records kept: counted first, with the step unknown. */
			g->tainted += lost;
			g->tainted_step = -1;
			g->unclean = true;
			a->anomalies.device_tainted += lost;
			a->taint.launches += lost;
			a->taint.lost += lost;
			a->taint.last_step = -1;
			a->taint.last_graph = g->graph;
			if (a->strict && g->bound) {
				g->blocked = true;
				g->applied_version = 0;
				g->prep_version = 0;
			}
			/* Their runs are unknown but not later than the last launch made:
			 * only a clean launch after that one clears the taint. */
			if (tg_dev_runs(g) - g->run_base > g->last_bad_run)
				g->last_bad_run = tg_dev_runs(g) - g->run_base;
		}
		for (uint64_t k = first; k < bad; k++)
			if (now - k < TG_PLAN_REPORT_RING && rec[k - first].run != 0)
				dev_taint(a, g, &rec[k - first]);
		g->rep_seen = bad;
	}
	if (g->unclean && __atomic_load_n(&rep->clean_run, __ATOMIC_ACQUIRE) > g->last_bad_run) {
		/* A later launch called every failed node again and succeeded. */
		g->unclean = false;
		g->blocked = false;
	}
}

/* Nothing new in g's report and nothing to clear: what a poll finds at almost every step. */
static inline bool dev_quiet(const struct toggle_agent *a, const struct tg_graph *g)
{
	return !g->unclean && __atomic_load_n(&dev_report(a, g)->bad, __ATOMIC_ACQUIRE) == g->rep_seen;
}

/*
 * step_begin: take the planners' reports if any planner wrote one since the
 * last look.  A planner sets the signal word after its report (a system
 * fence between), so the exchange that reads it as 1 makes that report
 * visible; one set after the exchange is seen at the next step.  Graphs a
 * step launches note their launch indexes at the launch instead (replay.c),
 * so a step reads no graph unless one was signalled.
 */
void tg_device_step(struct toggle_agent *a)
{
	uint64_t *signal = dev_signal(a);
	/* A plain load first: the exchange (a locked instruction) only when set. */
	if (__atomic_load_n(signal, __ATOMIC_RELAXED) == 0 ||
	    __atomic_exchange_n(signal, 0, __ATOMIC_ACQ_REL) == 0)
		return;
	for (size_t i = 0; i < a->n_graphs; i++) {
		struct tg_graph *g = a->graphs[i];
		if (g->dev != TG_DEV_ACTIVE || !g->dev_setup || g->stale)
			continue;
		if (!dev_quiet(a, g))
			tg_device_poll(a, g);
	}
}

/* Like the other getters: nothing with a NULL output, zeros (no step, no graph) for a NULL agent. */
void toggle_taint_get(const struct toggle_agent *a, struct toggle_taint *out)
{
	if (out)
		*out = a ? a->taint : (struct toggle_taint){.last_step = -1};
}

/* ---- launch: the mask in stream order ------------------------------------ */

/* Make stream wait for the work of the graph's last launch stream (a new stream). */
static int dev_join(struct toggle_agent *a, struct tg_graph *g, CUstream stream)
{
	if (!g->last_stream || g->last_stream == stream)
		return 0;
	return tg_device_order(a, g, g->last_stream, stream);
}

int tg_device_order(struct toggle_agent *a, struct tg_graph *g, CUstream from, CUstream to)
{
	CUresult r = CUDA_SUCCESS;
	if (!g->join)
		r = tg_cu_event_create(&a->cu, &g->join);
	if (r == CUDA_SUCCESS)
		r = a->cu.event_record(g->join, from);
	if (r == CUDA_SUCCESS)
		r = a->cu.stream_wait_event(to, g->join, 0);
	if (r != CUDA_SUCCESS)
		return dev_cuda_fail(a, r, "ordering the launch after the previous launch's stream "
				     "(cuEventRecord / cuStreamWaitEvent; is that stream still alive?)",
				     g->graph);
	a->stats.stream_joins++;
	return 0;
}

static int dev_flush(struct toggle_agent *a, struct tg_graph *g, CUstream stream, unsigned *nops,
		     bool *joined)
{
	if (*nops == 0)
		return 0;
	if (!*joined) {
		int rc = dev_join(a, g, stream);
		if (rc)
			return rc;
		*joined = true;
	}
	CUresult r = a->cu.stream_batch_mem_op(stream, *nops, a->dev.ops, 0);
	if (r != CUDA_SUCCESS)
		return dev_cuda_fail(a, r, "writing the mask in stream order (cuStreamBatchMemOp)",
				     g->graph);
	a->stats.mask_words += *nops;
	*nops = 0;
	return 0;
}

static void dev_op(struct toggle_agent *a, unsigned *nops, CUdeviceptr addr, uint64_t value)
{
	CUstreamBatchMemOpParams *op = &a->dev.ops[(*nops)++];
	memset(op, 0, sizeof(*op));
	op->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	op->writeValue.address = addr;
	op->writeValue.value64 = value;
	op->writeValue.flags = 0;
}

int tg_device_sync(struct toggle_agent *a, struct tg_graph *g, CUstream stream)
{
	uint64_t *want = a->dev.want;
	uint32_t n = g->n_nodes;
	CUdeviceptr mask = g->dev_mem + (CUdeviceptr)n * 8;
	unsigned nops = 0;
	bool joined = false;
	int rc = 0;

	tg_device_poll(a, g);
	if (g->blocked)
		return tg_fail(a, TOGGLE_ECUDA,
			       "launch of graph %p refused: its exec %p ran a launch of step %lld with "
			       "another set than that step's (a device-side set-enabled call failed); "
			       "a strict agent launches it again after a clean launch or a new bind "
			       "(toggle_graph_bind)", (void *)g->graph, (void *)g->exec,
			       (long long)g->tainted_step);

	memset(want, 0, g->words * sizeof(*want));
	for (uint32_t i = 0; i < n; i++)
		if (tg_set_has(&a->current, g->nodes[i].hook))
			want[i / 64] |= 1ull << (i % 64);
	bool any = g->epoch_pending;
	for (uint32_t w = 0; w < g->words && rc == 0; w++) {
		if (g->shadow_valid && want[w] == g->shadow[w])
			continue;
		any = true;
		dev_op(a, &nops, mask + (CUdeviceptr)w * 8, want[w]);
		if (nops == TG_BATCH_MAX)
			rc = dev_flush(a, g, stream, &nops, &joined);
	}
	if (rc == 0 && g->epoch_pending) {
		dev_op(a, &nops, desc_addr(a, g) + offsetof(struct tg_plan_desc, epoch), g->epoch);
		if (nops == TG_BATCH_MAX)
			rc = dev_flush(a, g, stream, &nops, &joined);
	}
	if (rc == 0 && g->prep_unordered && !joined) {
		/* A prepare's mask work with maybe no launch after it: a launch on
		 * another stream is ordered after it even with nothing to write. */
		rc = dev_join(a, g, stream);
		joined = true;
	}
	if (rc == 0)
		rc = dev_flush(a, g, stream, &nops, &joined);
	if (rc) {
		/* Some words may be enqueued: write them all next time. */
		g->shadow_valid = false;
		g->applied_version = 0;
		g->prep_version = 0;
		return rc;
	}
	if (any) {
		memcpy(g->shadow, want, g->words * sizeof(*want));
		g->shadow_valid = true;
		g->epoch_pending = false;
		a->stats.mask_writes++;
	}
	g->applied_version = a->version;
	a->stats.syncs++;
	return 0;
}

/* ---- counters ------------------------------------------------------------ */

int toggle_graph_device_counters(const struct toggle_agent *a, CUgraph graph,
				 struct toggle_device_counters *out)
{
	if (!a)
		return TOGGLE_EINVAL;
	const struct tg_graph *g = tg_graph_find(a, graph);
	if (!g || g->stale)
		return TOGGLE_ENOENT;
	if (!out)
		return TOGGLE_EINVAL;
	if (g->dev != TG_DEV_ACTIVE || !g->dev_setup)
		return TOGGLE_ENOTSUP;
	struct tg_plan_desc d;
	if (tg_cu_memcpy_dtoh(&a->cu, &d, desc_addr(a, g), sizeof(d)) != CUDA_SUCCESS)
		return TOGGLE_ECUDA;
	*out = (struct toggle_device_counters){
		.planner_runs = d.runs,
		.device_calls = d.calls,
		.device_failures = d.failures,
	};
	return 0;
}
