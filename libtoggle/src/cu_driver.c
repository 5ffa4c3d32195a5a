/*
 * cu_driver.c - fill the driver table from libcuda.so.1 at run time, and the
 * handle-less helpers that reach either the driver or the simulator.
 *
 * libcuda is never linked at build time: machines without a GPU build and
 * test everything, and the library finds the driver the process already uses.
 * Entry points are resolved with cuGetProcAddress at a fixed ABI version, so
 * cuStreamGetCaptureInfo is the CUDA 12.3 form that returns the graph and
 * the dependency a launch just added, cuGraphNodeGetDependentNodes and
 * cuGraphNodeGetDependencies the 12.3 forms with edge data,
 * cuStreamBatchMemOp the _v2 form and cuMemAlloc, cuMemFree, cuMemcpy* and
 * cuStreamDestroy / cuEventDestroy their _v2 forms: each the one the CUDA
 * 12.3+ headers' prototypes describe.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cu.h"
#include "toggle.h"
#include "toggle_sim.h"

/* ABI version the table's signatures follow (cuStreamGetCaptureInfo v3). */
#define TG_CU_ABI_VERSION 12030

typedef CUresult (*tg_init_fn)(unsigned);
typedef CUresult (*tg_version_fn)(int *);
typedef CUresult (*tg_gpa2_fn)(const char *, void **, int, cuuint64_t,
			       CUdriverProcAddressQueryResult *);
typedef CUresult (*tg_gpa1_fn)(const char *, void **, int, cuuint64_t);

struct tg_resolver {
	tg_gpa2_fn gpa2;
	tg_gpa1_fn gpa1;
};

/* Entry point `name` in the form of CUDA `version`. */
static int tg_resolve_at(const struct tg_resolver *rs, const char *name, int version, void **out)
{
	CUresult r;
	*out = NULL;
	if (rs->gpa2) {
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		r = rs->gpa2(name, out, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
		if (st != CU_GET_PROC_ADDRESS_SUCCESS)
			r = CUDA_ERROR_NOT_FOUND;
	} else {
		r = rs->gpa1(name, out, version, CU_GET_PROC_ADDRESS_DEFAULT);
	}
	if (r != CUDA_SUCCESS)
		*out = NULL;
	return *out ? 0 : -1;
}

static int tg_resolve(const struct tg_resolver *rs, const char *name, void **out)
{
	return tg_resolve_at(rs, name, TG_CU_ABI_VERSION, out);
}

static int tg_load_fail(struct tg_cu *cu, char *err, size_t errlen, const char *what)
{
	if (errlen)
		snprintf(err, errlen, "%s", what);
	tg_cu_unload(cu);
	return TOGGLE_ENODRIVER;
}

/* dlsym returns void *; converting it to a function pointer is what POSIX specifies. */
#define TG_DLSYM(dl, T, name) ((T)(uintptr_t)dlsym((dl), (name)))

int tg_cu_load_driver(struct tg_cu *cu, char *err, size_t errlen)
{
	char msg[256];
	memset(cu, 0, sizeof(*cu));
	cu->dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu->dl) {
		snprintf(msg, sizeof(msg),
			 "cannot load libcuda.so.1 (%s): no NVIDIA driver here; use the sim backend "
			 "to run without a GPU", dlerror());
		return tg_load_fail(cu, err, errlen, msg);
	}
	tg_init_fn init = TG_DLSYM(cu->dl, tg_init_fn, "cuInit");
	tg_version_fn version = TG_DLSYM(cu->dl, tg_version_fn, "cuDriverGetVersion");
	struct tg_resolver rs = {
		.gpa2 = TG_DLSYM(cu->dl, tg_gpa2_fn, "cuGetProcAddress_v2"),
		.gpa1 = TG_DLSYM(cu->dl, tg_gpa1_fn, "cuGetProcAddress"),
	};
	if (!init || !version || (!rs.gpa2 && !rs.gpa1))
		return tg_load_fail(cu, err, errlen, "libcuda.so.1 lacks cuInit/cuGetProcAddress");
	CUresult r = init(0);
	if (r != CUDA_SUCCESS) {
		snprintf(msg, sizeof(msg), "cuInit failed with CUDA error %d (no usable device?)",
			 (int)r);
		return tg_load_fail(cu, err, errlen, msg);
	}
	if (version(&cu->driver_version) != CUDA_SUCCESS || cu->driver_version < TG_CU_ABI_VERSION) {
		snprintf(msg, sizeof(msg), "CUDA driver %d.%d is too old: libtoggle needs 12.3 or newer",
			 cu->driver_version / 1000, cu->driver_version % 1000 / 10);
		return tg_load_fail(cu, err, errlen, msg);
	}
	struct {
		const char *name;
		void **slot;
	} want[] = {
		{"cuStreamGetCaptureInfo", (void **)&cu->stream_get_capture_info},
		{"cuGraphNodeGetType", (void **)&cu->graph_node_get_type},
		{"cuGraphNodeSetEnabled", (void **)&cu->graph_node_set_enabled},
		{"cuGraphNodeGetEnabled", (void **)&cu->graph_node_get_enabled},
		{"cuGraphLaunch", (void **)&cu->graph_launch},
		{"cuGraphUpload", (void **)&cu->graph_upload},
		{"cuGetErrorString", (void **)&cu->get_error_string},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (tg_resolve(&rs, want[i].name, want[i].slot) != 0) {
			snprintf(msg, sizeof(msg), "driver entry point %s not found", want[i].name);
			return tg_load_fail(cu, err, errlen, msg);
		}
	}
	/* Device mode's: a missing one only makes device mode unavailable. */
	struct {
		const char *name;
		void **slot;
	} opt[] = {
		{"cuLaunchKernelEx", (void **)&cu->launch_kernel_ex},
		{"cuStreamBatchMemOp", (void **)&cu->stream_batch_mem_op},
		{"cuMemcpyHtoDAsync", (void **)&cu->memcpy_htod_async},
		{"cuStreamSynchronize", (void **)&cu->stream_synchronize},
		{"cuEventRecord", (void **)&cu->event_record},
		{"cuStreamWaitEvent", (void **)&cu->stream_wait_event},
		{"cuGraphInstantiateWithFlags", (void **)&cu->graph_instantiate},
		{"cuGraphNodeGetDependentNodes", (void **)&cu->graph_node_get_dependent_nodes},
		{"cuGraphNodeGetDependencies", (void **)&cu->graph_node_get_dependencies},
		{"cuGraphGetNodes", (void **)&cu->graph_get_nodes},
		{"cuThreadExchangeStreamCaptureMode", (void **)&cu->thread_exchange_capture_mode},
		{"cuModuleGetFunction", (void **)&cu->module_get_function},
		{"cuMemAlloc", (void **)&cu->mem_alloc},
		{"cuMemFree", (void **)&cu->mem_free},
		{"cuMemcpyDtoH", (void **)&cu->memcpy_dtoh},
		{"cuModuleLoadData", (void **)&cu->module_load_data},
		{"cuModuleUnload", (void **)&cu->module_unload},
		{"cuEventCreate", (void **)&cu->event_create},
		{"cuEventDestroy", (void **)&cu->event_destroy},
		{"cuStreamCreate", (void **)&cu->stream_create},
		{"cuStreamDestroy", (void **)&cu->stream_destroy},
		{"cuCtxGetDevice", (void **)&cu->ctx_get_device},
		{"cuDeviceGetAttribute", (void **)&cu->device_get_attribute},
		{"cuMemHostAlloc", (void **)&cu->mem_host_alloc},
		{"cuMemFreeHost", (void **)&cu->mem_free_host},
		{"cuMemHostGetDevicePointer", (void **)&cu->mem_host_get_device_pointer},
		{"cuCtxSynchronize", (void **)&cu->ctx_synchronize},
		/* The producer-free exec's (12.3 forms with edge data). */
		{"cuGraphClone", (void **)&cu->graph_clone},
		{"cuGraphNodeFindInClone", (void **)&cu->graph_node_find_in_clone},
		{"cuGraphDestroyNode", (void **)&cu->graph_destroy_node},
		{"cuGraphAddDependencies", (void **)&cu->graph_add_dependencies},
		{"cuGraphDestroy", (void **)&cu->graph_destroy},
		{"cuGraphExecDestroy", (void **)&cu->graph_exec_destroy},
		/* The device-mode bare exec (bare.c): a graph assembled node by node. */
		{"cuGraphCreate", (void **)&cu->graph_create},
		{"cuGraphKernelNodeGetParams", (void **)&cu->kernel_node_get_params},
		{"cuGraphAddKernelNode", (void **)&cu->add_kernel_node},
		{"cuGraphKernelNodeCopyAttributes", (void **)&cu->kernel_node_copy_attributes},
		{"cuGraphMemsetNodeGetParams", (void **)&cu->memset_node_get_params},
		{"cuGraphAddMemsetNode", (void **)&cu->add_memset_node},
		{"cuGraphMemcpyNodeGetParams", (void **)&cu->memcpy_node_get_params},
		{"cuGraphAddMemcpyNode", (void **)&cu->add_memcpy_node},
		{"cuGraphAddEmptyNode", (void **)&cu->add_empty_node},
		{"cuGraphEventRecordNodeGetEvent", (void **)&cu->event_record_node_get_event},
		{"cuGraphAddEventRecordNode", (void **)&cu->add_event_record_node},
		{"cuGraphEventWaitNodeGetEvent", (void **)&cu->event_wait_node_get_event},
		{"cuGraphAddEventWaitNode", (void **)&cu->add_event_wait_node},
		{"cuGraphHostNodeGetParams", (void **)&cu->host_node_get_params},
		{"cuGraphAddHostNode", (void **)&cu->add_host_node},
		{"cuGraphChildGraphNodeGetGraph", (void **)&cu->child_graph_node_get_graph},
		{"cuGraphAddChildGraphNode", (void **)&cu->add_child_graph_node},
		{"cuCtxGetCurrent", (void **)&cu->ctx_get_current},
		/* Lifetime (life.c): user objects, CUDA 11.3+. */
		{"cuUserObjectCreate", (void **)&cu->user_object_create},
		{"cuUserObjectRelease", (void **)&cu->user_object_release},
		{"cuGraphRetainUserObject", (void **)&cu->graph_retain_user_object},
		{"cuGraphReleaseUserObject", (void **)&cu->graph_release_user_object},
		/* The data ring (record.c); cuMemHostRegister the _v2 form. */
		{"cuMemcpyDtoHAsync", (void **)&cu->memcpy_dtoh_async},
		{"cuEventQuery", (void **)&cu->event_query},
		{"cuMemHostRegister", (void **)&cu->mem_host_register},
		{"cuMemHostUnregister", (void **)&cu->mem_host_unregister},
	};
	for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
		(void)tg_resolve(&rs, opt[i].name, opt[i].slot);
	/* Graph identity: the ids only from CUDA 13.1 (asked for in that
	 * version's form: an older driver has no such symbol). */
	if (cu->driver_version >= 13010) {
		(void)tg_resolve_at(&rs, "cuGraphGetId", 13010, (void **)&cu->graph_get_id);
		(void)tg_resolve_at(&rs, "cuGraphExecGetId", 13010, (void **)&cu->graph_exec_get_id);
	}
	cu->planner_image = tg_planner_fatbin();
	return 0;
}

struct tg_cu_need {
	const char *name;
	const void *fn;
};

static bool tg_cu_check(const struct tg_cu_need *need, size_t n, const char **missing)
{
	for (size_t i = 0; i < n; i++) {
		if (!need[i].fn) {
			if (missing)
				*missing = need[i].name;
			return false;
		}
	}
	return true;
}

#define TG_FN(f) ((const void *)(uintptr_t)(f))

bool tg_cu_device_ready(const struct tg_cu *cu, const char **missing)
{
	const struct tg_cu_need direct[] = {
		{"cuLaunchKernelEx", TG_FN(cu->launch_kernel_ex)},
		{"cuStreamBatchMemOp", TG_FN(cu->stream_batch_mem_op)},
		{"cuMemcpyHtoDAsync", TG_FN(cu->memcpy_htod_async)},
		{"cuStreamSynchronize", TG_FN(cu->stream_synchronize)},
		{"cuEventRecord", TG_FN(cu->event_record)},
		{"cuStreamWaitEvent", TG_FN(cu->stream_wait_event)},
		{"cuGraphInstantiateWithFlags", TG_FN(cu->graph_instantiate)},
		{"cuGraphNodeGetDependentNodes", TG_FN(cu->graph_node_get_dependent_nodes)},
		{"cuModuleGetFunction", TG_FN(cu->module_get_function)},
	};
	/* Reached through tg_cu_*: the simulator's need no slot. */
	const struct tg_cu_need helpers[] = {
		{"cuMemAlloc", TG_FN(cu->mem_alloc)},
		{"cuMemFree", TG_FN(cu->mem_free)},
		{"cuMemcpyDtoH", TG_FN(cu->memcpy_dtoh)},
		{"cuModuleLoadData", TG_FN(cu->module_load_data)},
		{"cuModuleUnload", TG_FN(cu->module_unload)},
		{"cuEventCreate", TG_FN(cu->event_create)},
		{"cuEventDestroy", TG_FN(cu->event_destroy)},
		{"cuStreamCreate", TG_FN(cu->stream_create)},
		{"cuStreamDestroy", TG_FN(cu->stream_destroy)},
		{"cuMemHostAlloc", TG_FN(cu->mem_host_alloc)},
		{"cuMemFreeHost", TG_FN(cu->mem_free_host)},
		{"cuMemHostGetDevicePointer", TG_FN(cu->mem_host_get_device_pointer)},
		{"cuCtxSynchronize", TG_FN(cu->ctx_synchronize)},
	};
	return tg_cu_check(direct, sizeof(direct) / sizeof(direct[0]), missing) &&
	       (cu->sim || tg_cu_check(helpers, sizeof(helpers) / sizeof(helpers[0]), missing));
}

bool tg_cu_bare_ready(const struct tg_cu *cu)
{
	const struct tg_cu_need need[] = {
		{"cuGraphClone", TG_FN(cu->graph_clone)},
		{"cuGraphNodeFindInClone", TG_FN(cu->graph_node_find_in_clone)},
		{"cuGraphNodeGetDependencies", TG_FN(cu->graph_node_get_dependencies)},
		{"cuGraphNodeGetDependentNodes", TG_FN(cu->graph_node_get_dependent_nodes)},
		{"cuGraphDestroyNode", TG_FN(cu->graph_destroy_node)},
		{"cuGraphAddDependencies", TG_FN(cu->graph_add_dependencies)},
		{"cuGraphInstantiateWithFlags", TG_FN(cu->graph_instantiate)},
		{"cuGraphDestroy", TG_FN(cu->graph_destroy)},
		{"cuGraphExecDestroy", TG_FN(cu->graph_exec_destroy)},
	};
	return tg_cu_check(need, sizeof(need) / sizeof(need[0]), NULL);
}

bool tg_cu_assemble_ready(const struct tg_cu *cu)
{
	const struct tg_cu_need need[] = {
		{"cuGraphGetNodes", TG_FN(cu->graph_get_nodes)},
		{"cuGraphNodeGetType", TG_FN(cu->graph_node_get_type)},
		{"cuGraphNodeGetDependencies", TG_FN(cu->graph_node_get_dependencies)},
		{"cuGraphAddDependencies", TG_FN(cu->graph_add_dependencies)},
		{"cuGraphKernelNodeGetParams", TG_FN(cu->kernel_node_get_params)},
		{"cuGraphAddKernelNode", TG_FN(cu->add_kernel_node)},
		{"cuGraphKernelNodeCopyAttributes", TG_FN(cu->kernel_node_copy_attributes)},
		{"cuGraphInstantiateWithFlags", TG_FN(cu->graph_instantiate)},
		{"cuGraphUpload", TG_FN(cu->graph_upload)},
		{"cuStreamSynchronize", TG_FN(cu->stream_synchronize)},
		{"cuGraphDestroy", TG_FN(cu->graph_destroy)},
		{"cuGraphExecDestroy", TG_FN(cu->graph_exec_destroy)},
	};
	return (cu->sim || cu->graph_create) && tg_cu_check(need, sizeof(need) / sizeof(need[0]), NULL);
}

bool tg_cu_has_user_objects(const struct tg_cu *cu)
{
	return cu->graph_retain_user_object && cu->graph_release_user_object &&
	       cu->user_object_release && (cu->sim || cu->user_object_create);
}

bool tg_cu_record_ready(const struct tg_cu *cu, const char **missing)
{
	const struct tg_cu_need direct[] = {
		{"cuMemcpyDtoHAsync", TG_FN(cu->memcpy_dtoh_async)},
		{"cuEventQuery", TG_FN(cu->event_query)},
		{"cuEventRecord", TG_FN(cu->event_record)},
	};
	const struct tg_cu_need helpers[] = {
		{"cuMemHostRegister", TG_FN(cu->mem_host_register)},
		{"cuMemHostUnregister", TG_FN(cu->mem_host_unregister)},
		{"cuEventCreate", TG_FN(cu->event_create)},
		{"cuEventDestroy", TG_FN(cu->event_destroy)},
		{"cuCtxSynchronize", TG_FN(cu->ctx_synchronize)},
	};
	return tg_cu_check(direct, sizeof(direct) / sizeof(direct[0]), missing) &&
	       (cu->sim || tg_cu_check(helpers, sizeof(helpers) / sizeof(helpers[0]), missing));
}

void tg_cu_unload(struct tg_cu *cu)
{
	/* libcuda stays loaded by the application; our reference is dropped. */
	if (cu->dl)
		dlclose(cu->dl);
	memset(cu, 0, sizeof(*cu));
}

const char *tg_cu_errstr(const struct tg_cu *cu, CUresult r)
{
	const char *s = NULL;
	if (cu->get_error_string && cu->get_error_string(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

/* ---- handle-less entry points ------------------------------------------- */

CUresult tg_cu_mem_alloc(const struct tg_cu *cu, CUdeviceptr *p, size_t n)
{
	return cu->sim ? toggle_sim_mem_alloc(cu->sim, p, n) : cu->mem_alloc(p, n);
}

CUresult tg_cu_mem_free(const struct tg_cu *cu, CUdeviceptr p)
{
	return cu->sim ? toggle_sim_mem_free(cu->sim, p) : cu->mem_free(p);
}

CUresult tg_cu_memcpy_dtoh(const struct tg_cu *cu, void *dst, CUdeviceptr src, size_t n)
{
	return cu->sim ? toggle_sim_memcpy_dtoh(cu->sim, dst, src, n) : cu->memcpy_dtoh(dst, src, n);
}

CUresult tg_cu_module_load(const struct tg_cu *cu, CUmodule *mod, const void *image)
{
	return cu->sim ? toggle_sim_module_load(cu->sim, mod, image) : cu->module_load_data(mod, image);
}

CUresult tg_cu_module_unload(const struct tg_cu *cu, CUmodule mod)
{
	return cu->sim ? toggle_sim_module_unload(mod) : cu->module_unload(mod);
}

CUresult tg_cu_event_create(const struct tg_cu *cu, CUevent *ev)
{
	return cu->sim ? toggle_sim_event_create(cu->sim, ev)
		       : cu->event_create(ev, CU_EVENT_DISABLE_TIMING);
}

CUresult tg_cu_graph_create(const struct tg_cu *cu, CUgraph *out)
{
	return cu->sim ? toggle_sim_graph_create(cu->sim, out, 0) : cu->graph_create(out, 0);
}

CUresult tg_cu_event_destroy(const struct tg_cu *cu, CUevent ev)
{
	return cu->sim ? toggle_sim_event_destroy(ev) : cu->event_destroy(ev);
}

CUresult tg_cu_stream_create(const struct tg_cu *cu, CUstream *s)
{
	return cu->sim ? toggle_sim_stream_create(cu->sim, s)
		       : cu->stream_create(s, CU_STREAM_NON_BLOCKING);
}

CUresult tg_cu_stream_destroy(const struct tg_cu *cu, CUstream s)
{
	return cu->sim ? toggle_sim_stream_destroy(s) : cu->stream_destroy(s);
}

CUresult tg_cu_user_object_create(const struct tg_cu *cu, CUuserObject *out, void *ptr,
				  CUhostFn destroy, unsigned refs)
{
	return cu->sim ? toggle_sim_user_object_create(cu->sim, out, ptr, destroy, refs,
						       CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		       : cu->user_object_create(out, ptr, destroy, refs,
						CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
}

/* The simulator's device memory is host memory: the same address serves both sides. */
CUresult tg_cu_mem_host_alloc(const struct tg_cu *cu, void **host, CUdeviceptr *dev, size_t n)
{
	*host = NULL;
	*dev = 0;
	if (cu->sim) {
		CUresult r = toggle_sim_mem_alloc(cu->sim, dev, n);
		if (r == CUDA_SUCCESS)
			*host = (void *)(uintptr_t)*dev;
		return r;
	}
	void *p = NULL;
	CUresult r = cu->mem_host_alloc(&p, n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
	if (r != CUDA_SUCCESS)
		return r;
	r = cu->mem_host_get_device_pointer(dev, p, 0);
	if (r != CUDA_SUCCESS) {
		/* A context made without CU_CTX_MAP_HOST: under unified addressing the
		 * host pointer is the device's too (the driver's Unified Addressing docs). */
		CUdevice d;
		int uva = 0;
		if (cu->ctx_get_device && cu->device_get_attribute &&
		    cu->ctx_get_device(&d) == CUDA_SUCCESS &&
		    cu->device_get_attribute(&uva, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, d) ==
			    CUDA_SUCCESS && uva) {
			*dev = (CUdeviceptr)(uintptr_t)p;
			r = CUDA_SUCCESS;
		}
	}
	if (r != CUDA_SUCCESS) {
		(void)cu->mem_free_host(p);
		*dev = 0;
		return r;
	}
	memset(p, 0, n);
	*host = p;
	return CUDA_SUCCESS;
}

CUresult tg_cu_mem_host_free(const struct tg_cu *cu, void *host)
{
	return cu->sim ? toggle_sim_mem_free(cu->sim, (CUdeviceptr)(uintptr_t)host)
		       : cu->mem_free_host(host);
}

CUresult tg_cu_mem_host_register(const struct tg_cu *cu, void *p, size_t n)
{
	return cu->sim ? toggle_sim_mem_host_register(cu->sim, p, n, CU_MEMHOSTREGISTER_PORTABLE)
		       : cu->mem_host_register(p, n, CU_MEMHOSTREGISTER_PORTABLE);
}

CUresult tg_cu_mem_host_unregister(const struct tg_cu *cu, void *p)
{
	return cu->sim ? toggle_sim_mem_host_unregister(cu->sim, p) : cu->mem_host_unregister(p);
}

CUresult tg_cu_ctx_synchronize(const struct tg_cu *cu)
{
	if (cu->sim) {
		toggle_sim_synchronize(cu->sim);
		return CUDA_SUCCESS;
	}
	return cu->ctx_synchronize();
}

bool tg_cu_has_64bit_memops(const struct tg_cu *cu)
{
	if (cu->sim)
		return true;
	CUdevice dev;
	int v = 0;
	if (!cu->ctx_get_device || !cu->device_get_attribute || cu->ctx_get_device(&dev) != CUDA_SUCCESS)
		return false;
	return cu->device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
					dev) == CUDA_SUCCESS && v;
}
