/*
 * demo_cuda.c - demo_agent's real-CUDA backend.
 *
 * The driver API is reached like libtoggle reaches it (src/cu_driver.c):
 * dlopen("libcuda.so.1") at run time, entry points from cuGetProcAddress at
 * a fixed ABI version, so the signatures below hold on every driver from
 * 12.3 on and nothing is linked at build time.  The kernels come from
 * demo_kernels.cu as PTX embedded at build time (examples/examples.mk); the
 * driver JIT-compiles them for the GPU it finds.
 *
 * Device state: per graph an activation (batch rows of DC_CHUNK floats) and
 * a monitor buffer (one DC_CHUNK slice per hook); the step word that
 * demo_set_step writes in stream order; a ring of {graph, hook, step}
 * records every producer appends to.  drain() waits for the stream, reads
 * the ring back, sorts it into per-graph hook sets and empties it.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_cuda.h"

#ifdef DEMO_HAVE_PTX
#include "demo_kernels_ptx.h" /* generated: static const unsigned char demo_kernels_ptx[] */
static const void *dc_ptx(void)
{
	return demo_kernels_ptx;
}
#else
static const void *dc_ptx(void) /* built without nvcc: no kernels */
{
	return NULL;
}
#endif

#define DC_ABI_VERSION 12030 /* the signatures in struct dc_api; libtoggle needs 12.3 too */
#define DC_CHUNK       1024u /* floats per batch row; a producer copies one row */
#define DC_THREADS     256u
#define DC_HOOKS       (DEMO_TYPES * DEMO_LAYERS)
#define DC_RING_CAP    1024u /* records */

_Static_assert(DEMO_GRAPHS * DC_HOOKS <= DC_RING_CAP, "the ring holds a whole step");

/* One ring record: struct demo_rec of demo_kernels.cu. */
struct dc_rec {
	int32_t graph;
	int32_t hook; /* type * DEMO_LAYERS + layer */
	int64_t step;
};

_Static_assert(sizeof(struct dc_rec) == 16, "struct demo_rec layout");

/* The driver entry points the demo calls (libtoggle has its own table). */
struct dc_api {
	CUresult (*get_error_name)(CUresult, const char **);
	CUresult (*get_error_string)(CUresult, const char **);
	CUresult (*device_get_count)(int *);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*device_get_name)(char *, int, CUdevice);
	CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
	CUresult (*primary_ctx_release)(CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*module_load_data_ex)(CUmodule *, const void *, unsigned, CUjit_option *,
					void **);
	CUresult (*module_unload)(CUmodule);
	CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*stream_destroy)(CUstream);
	CUresult (*stream_begin_capture)(CUstream, CUstreamCaptureMode);
	CUresult (*stream_end_capture)(CUstream, CUgraph *);
	CUresult (*stream_synchronize)(CUstream);
	CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				  unsigned, unsigned, CUstream, void **, void **);
	CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*graph_destroy)(CUgraph);
	CUresult (*graph_exec_destroy)(CUgraphExec);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*memset_d32_async)(CUdeviceptr, unsigned, size_t, CUstream);
	CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t);
};

struct dc {
	struct dc_api cu;
	void *dl;
	CUdevice dev;
	CUcontext ctx; /* the primary context, NULL until retained */
	CUmodule mod;
	CUfunction k_set_step, k_compute, k_produce;
	CUstream stream;
	int batch[DEMO_GRAPHS];
	CUdeviceptr act[DEMO_GRAPHS];      /* batch * DC_CHUNK floats */
	CUdeviceptr hook_out[DEMO_GRAPHS]; /* DC_HOOKS * DC_CHUNK floats */
	CUdeviceptr step;                  /* long long, written by demo_set_step */
	CUdeviceptr ring;                  /* DC_RING_CAP records */
	CUdeviceptr count;                 /* unsigned: records appended */
	struct dc_rec host_ring[DC_RING_CAP];
};

/* ---- errors ------------------------------------------------------------------- */

static int dc_fail(struct demo_backend *be, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int dc_fail(struct demo_backend *be, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(be->err, sizeof(be->err), fmt, ap);
	va_end(ap);
	return -1;
}

static const char *dc_errname(const struct dc *c, CUresult r)
{
	const char *s = NULL;
	if (c->cu.get_error_name && c->cu.get_error_name(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

static const char *dc_errstr(const struct dc *c, CUresult r)
{
	const char *s = NULL;
	if (c->cu.get_error_string && c->cu.get_error_string(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "no description";
}

/* 0, or -1 with be->err = "what: CUDA_ERROR_X (text)". */
static int dc_check(struct demo_backend *be, CUresult r, const char *what)
{
	const struct dc *c = be->impl;
	if (r == CUDA_SUCCESS)
		return 0;
	return dc_fail(be, "%s: %s (%s)", what, dc_errname(c, r), dc_errstr(c, r));
}

/* ---- loading the driver ----------------------------------------------------------- */

typedef CUresult (*dc_init_fn)(unsigned);
typedef CUresult (*dc_version_fn)(int *);
typedef CUresult (*dc_errfn)(CUresult, const char **);
typedef CUresult (*dc_gpa2_fn)(const char *, void **, int, cuuint64_t,
			       CUdriverProcAddressQueryResult *);
typedef CUresult (*dc_gpa1_fn)(const char *, void **, int, cuuint64_t);

/* dlsym returns void *; converting it to a function pointer is what POSIX specifies. */
#define DC_DLSYM(dl, T, name) ((T)(uintptr_t)dlsym((dl), (name)))

static int dc_resolve(dc_gpa2_fn gpa2, dc_gpa1_fn gpa1, const char *name, void **out)
{
	CUresult r;
	*out = NULL;
	if (gpa2) {
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		r = gpa2(name, out, DC_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st);
		if (st != CU_GET_PROC_ADDRESS_SUCCESS)
			r = CUDA_ERROR_NOT_FOUND;
	} else {
		r = gpa1(name, out, DC_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
	}
	return (r == CUDA_SUCCESS && *out) ? 0 : -1;
}

static int dc_load_driver(struct demo_backend *be, struct dc *c)
{
	c->dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!c->dl)
		return dc_fail(be, "no NVIDIA driver (%s)", dlerror());
	dc_init_fn init = DC_DLSYM(c->dl, dc_init_fn, "cuInit");
	dc_version_fn version = DC_DLSYM(c->dl, dc_version_fn, "cuDriverGetVersion");
	dc_gpa2_fn gpa2 = DC_DLSYM(c->dl, dc_gpa2_fn, "cuGetProcAddress_v2");
	dc_gpa1_fn gpa1 = DC_DLSYM(c->dl, dc_gpa1_fn, "cuGetProcAddress");
	c->cu.get_error_name = DC_DLSYM(c->dl, dc_errfn, "cuGetErrorName");
	c->cu.get_error_string = DC_DLSYM(c->dl, dc_errfn, "cuGetErrorString");
	if (!init || !version || (!gpa2 && !gpa1))
		return dc_fail(be, "libcuda.so.1 lacks cuInit, cuDriverGetVersion or cuGetProcAddress");
	if (dc_check(be, init(0), "cuInit") != 0)
		return -1;
	if (dc_check(be, version(&be->driver_version), "cuDriverGetVersion") != 0)
		return -1;
	if (be->driver_version < DC_ABI_VERSION)
		return dc_fail(be, "CUDA driver %d.%d is too old: libtoggle needs 12.3 or newer",
			       be->driver_version / 1000, be->driver_version % 1000 / 10);

	/* Names without _v2 etc.: the ABI version picks the variant. */
	struct {
		const char *name;
		void **slot;
	} want[] = {
		{"cuDeviceGetCount", (void **)&c->cu.device_get_count},
		{"cuDeviceGet", (void **)&c->cu.device_get},
		{"cuDeviceGetName", (void **)&c->cu.device_get_name},
		{"cuDevicePrimaryCtxRetain", (void **)&c->cu.primary_ctx_retain},
		{"cuDevicePrimaryCtxRelease", (void **)&c->cu.primary_ctx_release},
		{"cuCtxSetCurrent", (void **)&c->cu.ctx_set_current},
		{"cuModuleLoadDataEx", (void **)&c->cu.module_load_data_ex},
		{"cuModuleUnload", (void **)&c->cu.module_unload},
		{"cuModuleGetFunction", (void **)&c->cu.module_get_function},
		{"cuStreamCreate", (void **)&c->cu.stream_create},
		{"cuStreamDestroy", (void **)&c->cu.stream_destroy},
		{"cuStreamBeginCapture", (void **)&c->cu.stream_begin_capture},
		{"cuStreamEndCapture", (void **)&c->cu.stream_end_capture},
		{"cuStreamSynchronize", (void **)&c->cu.stream_synchronize},
		{"cuLaunchKernel", (void **)&c->cu.launch_kernel},
		{"cuGraphInstantiateWithFlags", (void **)&c->cu.graph_instantiate},
		{"cuGraphDestroy", (void **)&c->cu.graph_destroy},
		{"cuGraphExecDestroy", (void **)&c->cu.graph_exec_destroy},
		{"cuMemAlloc", (void **)&c->cu.mem_alloc},
		{"cuMemFree", (void **)&c->cu.mem_free},
		{"cuMemsetD32Async", (void **)&c->cu.memset_d32_async},
		{"cuMemcpyDtoH", (void **)&c->cu.memcpy_dtoh},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (dc_resolve(gpa2, gpa1, want[i].name, want[i].slot) != 0)
			return dc_fail(be, "driver entry point %s not found", want[i].name);
	return 0;
}

/* Device 0, its primary context current on this thread. */
static int dc_open_device(struct demo_backend *be, struct dc *c)
{
	int n = 0;
	if (dc_check(be, c->cu.device_get_count(&n), "cuDeviceGetCount") != 0)
		return -1;
	if (n < 1)
		return dc_fail(be, "no CUDA device (cuDeviceGetCount: 0)");
	if (dc_check(be, c->cu.device_get(&c->dev, 0), "cuDeviceGet") != 0 ||
	    dc_check(be, c->cu.device_get_name(be->device, (int)sizeof(be->device), c->dev),
		     "cuDeviceGetName") != 0 ||
	    dc_check(be, c->cu.primary_ctx_retain(&c->ctx, c->dev), "cuDevicePrimaryCtxRetain") != 0)
		return -1;
	return dc_check(be, c->cu.ctx_set_current(c->ctx), "cuCtxSetCurrent");
}

/* The embedded PTX, JIT-compiled for this GPU, and its three kernels. */
static int dc_load_module(struct demo_backend *be, struct dc *c)
{
	char jitlog[2048] = "";
	CUjit_option opt[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *val[] = {jitlog, (void *)(uintptr_t)sizeof(jitlog)};
	CUresult r = c->cu.module_load_data_ex(&c->mod, dc_ptx(), 2, opt, val);
	if (r != CUDA_SUCCESS) {
		c->mod = NULL;
		return dc_fail(be, "cuModuleLoadDataEx (the embedded PTX of demo_kernels.cu): %s (%s)%s%s%s",
			       dc_errname(c, r), dc_errstr(c, r),
			       r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION
				       ? ": the PTX comes from an nvcc newer than this driver; build "
					 "with the nvcc of the driver's CUDA version"
				       : "",
			       jitlog[0] ? ": " : "", jitlog);
	}
	struct {
		const char *name;
		CUfunction *fn;
	} kernels[] = {
		{"demo_set_step", &c->k_set_step},
		{"demo_compute", &c->k_compute},
		{"demo_produce", &c->k_produce},
	};
	for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
		r = c->cu.module_get_function(kernels[i].fn, c->mod, kernels[i].name);
		if (r != CUDA_SUCCESS)
			return dc_fail(be, "cuModuleGetFunction(%s): %s (%s)", kernels[i].name,
				       dc_errname(c, r), dc_errstr(c, r));
	}
	return 0;
}

static int dc_alloc(struct demo_backend *be, CUdeviceptr *p, size_t bytes)
{
	const struct dc *c = be->impl;
	if (dc_check(be, c->cu.mem_alloc(p, bytes), "cuMemAlloc") != 0) {
		*p = 0;
		return -1;
	}
	/* every buffer starts zeroed (sizes are multiples of 4) */
	return dc_check(be, c->cu.memset_d32_async(*p, 0, bytes / 4, c->stream), "cuMemsetD32Async");
}

/* ---- the operations ----------------------------------------------------------------- */

/* A kernel into the stream (captured when the stream is capturing). */
static int dc_launch(struct demo_backend *be, CUfunction f, const char *name, unsigned blocks,
		     unsigned threads, void **params)
{
	struct dc *c = be->impl;
	CUresult r = c->cu.launch_kernel(f, blocks, 1, 1, threads, 1, 1, 0, c->stream, params, NULL);
	if (r != CUDA_SUCCESS)
		return dc_fail(be, "cuLaunchKernel(%s): %s (%s)", name, dc_errname(c, r),
			       dc_errstr(c, r));
	return 0;
}

static int dc_begin_capture(struct demo_backend *be, int g, int batch)
{
	struct dc *c = be->impl;
	if (g < 0 || g >= DEMO_GRAPHS || batch < 1 || c->act[g])
		return dc_fail(be, "graph %d (batch %d) cannot be captured", g, batch);
	c->batch[g] = batch;
	if (dc_alloc(be, &c->act[g], (size_t)batch * DC_CHUNK * sizeof(float)) != 0 ||
	    dc_alloc(be, &c->hook_out[g], (size_t)DC_HOOKS * DC_CHUNK * sizeof(float)) != 0)
		return -1;
	return dc_check(be, c->cu.stream_begin_capture(c->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
			"cuStreamBeginCapture");
}

static int dc_launch_compute(struct demo_backend *be, int g, int layer)
{
	struct dc *c = be->impl;
	CUdeviceptr x = c->act[g];
	unsigned n = (unsigned)c->batch[g] * DC_CHUNK;
	float a = 0.999f, b = 0.001f;
	void *params[] = {&x, &n, &a, &b};
	(void)layer;
	return dc_launch(be, c->k_compute, "demo_compute", (n + DC_THREADS - 1) / DC_THREADS,
			 DC_THREADS, params);
}

static int dc_launch_producer(struct demo_backend *be, int g, struct toggle_hook hook)
{
	struct dc *c = be->impl;
	int graph = g, h = hook.type * DEMO_LAYERS + hook.layer;
	/* each hook reads its own row of the batch when there are several */
	CUdeviceptr row = c->act[g] + (CUdeviceptr)(h % c->batch[g]) * DC_CHUNK * sizeof(float);
	CUdeviceptr out = c->hook_out[g] + (CUdeviceptr)h * DC_CHUNK * sizeof(float);
	unsigned n = DC_CHUNK, cap = DC_RING_CAP;
	void *params[] = {&row, &out, &n, &c->step, &c->ring, &c->count, &cap, &graph, &h};
	return dc_launch(be, c->k_produce, "demo_produce", DC_CHUNK / DC_THREADS, DC_THREADS,
			 params);
}

static int dc_end_capture(struct demo_backend *be, CUgraph *graph)
{
	struct dc *c = be->impl;
	return dc_check(be, c->cu.stream_end_capture(c->stream, graph), "cuStreamEndCapture");
}

static int dc_instantiate(struct demo_backend *be, CUgraph graph, CUgraphExec *exec)
{
	struct dc *c = be->impl;
	return dc_check(be, c->cu.graph_instantiate(exec, graph, 0), "cuGraphInstantiateWithFlags");
}

static int dc_begin_step(struct demo_backend *be, int64_t step)
{
	struct dc *c = be->impl;
	long long s = step;
	void *params[] = {&c->step, &s};
	return dc_launch(be, c->k_set_step, "demo_set_step", 1, 1, params);
}

static int dc_drain(struct demo_backend *be, int64_t step, struct toggle_set got[DEMO_GRAPHS],
		    unsigned *stray)
{
	struct dc *c = be->impl;
	unsigned count = 0;
	*stray = 0;
	for (int g = 0; g < DEMO_GRAPHS; g++)
		toggle_set_clear(&got[g]);
	if (dc_check(be, c->cu.stream_synchronize(c->stream), "cuStreamSynchronize") != 0 ||
	    dc_check(be, c->cu.memcpy_dtoh(&count, c->count, sizeof(count)), "cuMemcpyDtoH") != 0)
		return -1;
	if (count > DC_RING_CAP) {
		*stray += count - DC_RING_CAP; /* overflow: those records are lost */
		count = DC_RING_CAP;
	}
	if (count && dc_check(be, c->cu.memcpy_dtoh(c->host_ring, c->ring,
						    count * sizeof(struct dc_rec)), "cuMemcpyDtoH") != 0)
		return -1;
	/* empty the ring, in stream order before the next step's replays */
	if (dc_check(be, c->cu.memset_d32_async(c->count, 0, 1, c->stream), "cuMemsetD32Async") != 0)
		return -1;
	for (unsigned i = 0; i < count; i++) {
		const struct dc_rec *r = &c->host_ring[i];
		if (r->graph < 0 || r->graph >= DEMO_GRAPHS || r->hook < 0 || r->hook >= DC_HOOKS ||
		    r->step != step) {
			(*stray)++;
			continue;
		}
		struct toggle_hook h = {.type = (uint16_t)(r->hook / DEMO_LAYERS),
					.layer = (uint16_t)(r->hook % DEMO_LAYERS)};
		if (toggle_set_contains(&got[r->graph], h))
			(*stray)++; /* a producer ran twice */
		else
			toggle_set_add(&got[r->graph], h);
	}
	return 0;
}

static void dc_exec_destroy(struct demo_backend *be, CUgraphExec exec)
{
	struct dc *c = be->impl;
	if (exec)
		c->cu.graph_exec_destroy(exec);
}

static void dc_graph_destroy(struct demo_backend *be, CUgraph graph)
{
	struct dc *c = be->impl;
	if (graph)
		c->cu.graph_destroy(graph);
}

/* Frees whatever dc_open got to (every handle starts at 0). */
static void dc_close(struct demo_backend *be)
{
	struct dc *c = be->impl;
	if (!c)
		return;
	if (c->stream) {
		c->cu.stream_synchronize(c->stream);
		c->cu.stream_destroy(c->stream);
	}
	CUdeviceptr bufs[] = {c->step, c->ring, c->count};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i])
			c->cu.mem_free(bufs[i]);
	for (int g = 0; g < DEMO_GRAPHS; g++) {
		if (c->act[g])
			c->cu.mem_free(c->act[g]);
		if (c->hook_out[g])
			c->cu.mem_free(c->hook_out[g]);
	}
	if (c->mod)
		c->cu.module_unload(c->mod);
	if (c->ctx)
		c->cu.primary_ctx_release(c->dev);
	if (c->dl)
		dlclose(c->dl);
	free(c);
	be->impl = NULL;
}

/* ---- open ----------------------------------------------------------------------------- */

int dc_open(struct demo_backend *be)
{
	memset(be, 0, sizeof(*be));
	be->name = "cuda";
	be->kind = TOGGLE_BACKEND_CUDA;
	if (!dc_ptx())
		return dc_fail(be, "demo_agent was built without nvcc, so it has no CUDA kernels "
				   "(rebuild it where $CUDA_HOME/bin/nvcc exists)");
	struct dc *c = calloc(1, sizeof(*c));
	if (!c)
		return dc_fail(be, "out of memory");
	be->impl = c;
	if (dc_load_driver(be, c) != 0 || dc_open_device(be, c) != 0 ||
	    dc_load_module(be, c) != 0 ||
	    dc_check(be, c->cu.stream_create(&c->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") != 0)
		goto fail;
	if (dc_alloc(be, &c->step, sizeof(long long)) != 0 ||
	    dc_alloc(be, &c->ring, DC_RING_CAP * sizeof(struct dc_rec)) != 0 ||
	    dc_alloc(be, &c->count, sizeof(unsigned)) != 0 ||
	    /* the step word starts at -1: no step yet */
	    dc_check(be, c->cu.memset_d32_async(c->step, 0xffffffffu, 2, c->stream),
		     "cuMemsetD32Async") != 0 ||
	    dc_check(be, c->cu.stream_synchronize(c->stream), "cuStreamSynchronize") != 0)
		goto fail;

	be->stream = c->stream;
	be->begin_capture = dc_begin_capture;
	be->launch_compute = dc_launch_compute;
	be->launch_producer = dc_launch_producer;
	be->end_capture = dc_end_capture;
	be->instantiate = dc_instantiate;
	be->begin_step = dc_begin_step;
	be->drain = dc_drain;
	be->exec_destroy = dc_exec_destroy;
	be->graph_destroy = dc_graph_destroy;
	be->close = dc_close;
	return 0;

fail:
	dc_close(be); /* keeps be->err */
	return -1;
}
