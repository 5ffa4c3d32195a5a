/*
 * cu_driver.c - fill the driver table from libcuda.so.1 at run time.
 *
 * libcuda is never linked at build time: machines without a GPU build and
 * test everything, and the library finds the driver the process already uses.
 * Entry points are resolved with cuGetProcAddress at a fixed ABI version, so
 * cuStreamGetCaptureInfo is the CUDA 12.3 form that returns the graph and
 * the dependency a launch just added.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cu.h"
#include "toggle.h"

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

static int tg_resolve(const struct tg_resolver *rs, const char *name, void **out)
{
	CUresult r;
	*out = NULL;
	if (rs->gpa2) {
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		r = rs->gpa2(name, out, TG_CU_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st);
		if (st != CU_GET_PROC_ADDRESS_SUCCESS)
			r = CUDA_ERROR_NOT_FOUND;
	} else {
		r = rs->gpa1(name, out, TG_CU_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
	}
	return (r == CUDA_SUCCESS && *out) ? 0 : -1;
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
	return 0;
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
