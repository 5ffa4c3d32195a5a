/*
 * copyout.c - the built-in copy producer (toggle_copy_out): one kernel that
 * copies contiguous or strided rows into a monitor buffer, launched through
 * toggle_launch_producer so it is recorded like any producer and, in device
 * mode, device-updatable.  It exists because code that cannot set launch
 * attributes (a torch op) cannot make a device-updatable producer.
 *
 * The kernel (copyout.cu) comes from the fatbin embedded at build time
 * (copyout_image.c) on the cuda backend, from the host model below on the
 * simulator; its module is loaded at the first call, per agent.
 */
#include <stdint.h>
#include <string.h>

#include "agent_impl.h"
#include "copyout.h"
#include "toggle_sim.h"

/* ---- the kernel on the simulator ------------------------------------------------ */

/* tg_copy_out as copyout.cu runs it: device memory is host memory there. */
static void tg_copy_out_sim(void **params)
{
	unsigned long long v[TG_COPY_PARAMS - 1];
	for (unsigned i = 0; i < TG_COPY_PARAMS - 1; i++)
		memcpy(&v[i], params[i], sizeof(v[i]));
	unsigned long long dst = v[0], src = v[1], row_bytes = v[2], rows = v[3];
	unsigned long long dst_pitch = v[4], src_pitch = v[5];
	for (unsigned long long r = 0; r < rows; r++)
		memcpy((unsigned char *)(uintptr_t)(dst + r * dst_pitch),
		       (const unsigned char *)(uintptr_t)(src + r * src_pitch), row_bytes);
}

/* Both kernels copy as this model does (the row16 one only one row of 16-byte accesses). */
static const struct toggle_sim_function tg_copyout_functions[] = {
	{.name = TG_COPY_KERNEL,
	 .fn = tg_copy_out_sim,
	 .n_params = TG_COPY_PARAMS,
	 .param_size = {8, 8, 8, 8, 8, 8, sizeof(unsigned)}},
	{.name = TG_COPY_KERNEL_ROW16,
	 .fn = tg_copy_out_sim,
	 .n_params = TG_COPY_PARAMS,
	 .param_size = {8, 8, 8, 8, 8, 8, sizeof(unsigned)}},
};

static const struct toggle_sim_image tg_copyout_image = {
	.magic = TOGGLE_SIM_IMAGE_MAGIC,
	.n_functions = 2,
	.functions = tg_copyout_functions,
};

const void *tg_copyout_sim_image(void)
{
	return &tg_copyout_image;
}

/* ---- the module, per agent ------------------------------------------------------ */

void tg_copyout_close(struct toggle_agent *a)
{
	if (a->copy.module)
		(void)tg_cu_module_unload(&a->cu, a->copy.module);
	memset(&a->copy, 0, sizeof(a->copy));
}

/*
 * Load the kernel once.  The call may come while a capture is open on this
 * thread, where the driver refuses calls unsafe during capture unless the
 * thread's capture mode is relaxed: relax it for the load, then restore.
 */
static int copyout_load(struct toggle_agent *a)
{
	if (a->copy.fn)
		return 0;
	const void *image = a->cu.sim ? tg_copyout_sim_image() : tg_copyout_fatbin();
	if (!image)
		return tg_fail(a, TOGGLE_ENOTSUP, "toggle_copy_out: this libtoggle was built without "
			       "nvcc, it holds no copy kernel");
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	bool relaxed = a->cu.thread_exchange_capture_mode &&
		       a->cu.thread_exchange_capture_mode(&mode) == CUDA_SUCCESS;
	CUmodule mod = NULL;
	CUresult r = tg_cu_module_load(&a->cu, &mod, image);
	if (relaxed)
		(void)a->cu.thread_exchange_capture_mode(&mode);
	if (r != CUDA_SUCCESS)
		return tg_fail(a, TOGGLE_ENOTSUP, "toggle_copy_out: cannot load the copy kernel "
			       "(cuModuleLoadData: %s): it needs a current CUDA context on an sm_90 "
			       "or newer device", tg_cu_errstr(&a->cu, r));
	const char *missing = TG_COPY_KERNEL;
	if (!a->cu.module_get_function ||
	    (r = a->cu.module_get_function(&a->copy.fn, mod, TG_COPY_KERNEL)) != CUDA_SUCCESS ||
	    (missing = TG_COPY_KERNEL_ROW16,
	     r = a->cu.module_get_function(&a->copy.fn_row16, mod, TG_COPY_KERNEL_ROW16)) !=
		    CUDA_SUCCESS) {
		(void)tg_cu_module_unload(&a->cu, mod);
		a->copy.fn = a->copy.fn_row16 = NULL;
		return tg_fail(a, TOGGLE_ENOTSUP, "toggle_copy_out: the copy kernel %s is not in its "
			       "module (%s)", missing, a->cu.module_get_function ?
			       tg_cu_errstr(&a->cu, r) : "no cuModuleGetFunction");
	}
	a->copy.module = mod;
	return 0;
}

/* ---- toggle_copy_out -------------------------------------------------------------- */

/* Bytes from the first row's start to the last row's end; false on overflow. */
static bool copy_span(size_t rows, size_t pitch, size_t row_bytes, uint64_t *span)
{
	uint64_t r = (uint64_t)rows - 1;
	if (r && pitch > (UINT64_MAX - row_bytes) / r)
		return false;
	*span = r * pitch + row_bytes;
	return true;
}

/* The widest access (16, 8, 4 bytes, else 1) every address, length and pitch allows. */
static unsigned copy_width(uint64_t dst, uint64_t src, uint64_t row_bytes, uint64_t dst_pitch,
			   uint64_t src_pitch)
{
	uint64_t all = dst | src | row_bytes | dst_pitch | src_pitch;
	for (unsigned w = 16; w >= 4; w /= 2)
		if (all % w == 0)
			return w;
	return 1;
}

int toggle_copy_out(struct toggle_agent *a, CUstream stream, struct toggle_hook hook,
		    const struct toggle_copy *copy)
{
	if (!a)
		return TOGGLE_EINVAL;
	if (!copy)
		return tg_fail(a, TOGGLE_EINVAL, "toggle_copy_out: copy is NULL");
	if (hook.type >= a->catalog.n_types || hook.layer >= a->catalog.n_layers)
		return tg_fail(a, TOGGLE_ERANGE, "hook %u:%u outside the catalog (%u types, %u layers)",
			       hook.type, hook.layer, a->catalog.n_types, a->catalog.n_layers);
	const struct toggle_copy c = *copy;
	if (!c.dst || !c.src || !c.row_bytes || !c.rows)
		return tg_fail(a, TOGGLE_EINVAL, "toggle_copy_out, hook %u:%u: dst, src, row_bytes and "
			       "rows must not be 0", hook.type, hook.layer);
	bool contiguous = c.rows == 1 || (c.dst_pitch == c.row_bytes && c.src_pitch == c.row_bytes);
	if (!contiguous && (c.dst_pitch < c.row_bytes || c.src_pitch < c.row_bytes))
		return tg_fail(a, TOGGLE_EINVAL, "toggle_copy_out, hook %u:%u: pitches (dst %zu, src "
			       "%zu) shorter than a row (%zu bytes)", hook.type, hook.layer,
			       c.dst_pitch, c.src_pitch, c.row_bytes);
	uint64_t dspan = 0, sspan = 0;
	if (!copy_span(c.rows, contiguous ? c.row_bytes : c.dst_pitch, c.row_bytes, &dspan) ||
	    !copy_span(c.rows, contiguous ? c.row_bytes : c.src_pitch, c.row_bytes, &sspan) ||
	    c.dst > UINT64_MAX - dspan || c.src > UINT64_MAX - sspan)
		return tg_fail(a, TOGGLE_EINVAL, "toggle_copy_out, hook %u:%u: %zu rows of %zu bytes "
			       "overflow the address space", hook.type, hook.layer, c.rows,
			       c.row_bytes);
	if (c.dst < c.src + sspan && c.src < c.dst + dspan)
		return tg_fail(a, TOGGLE_EINVAL, "toggle_copy_out, hook %u:%u: source and destination "
			       "overlap", hook.type, hook.layer);
	int rc = copyout_load(a);
	if (rc)
		return rc;

	/* A contiguous copy is one row: the widest accesses, no division per row. */
	unsigned long long dst = c.dst, src = c.src;
	unsigned long long rows = contiguous ? 1 : c.rows;
	unsigned long long row_bytes = contiguous ? dspan : c.row_bytes;
	unsigned long long dst_pitch = contiguous ? row_bytes : c.dst_pitch;
	unsigned long long src_pitch = contiguous ? row_bytes : c.src_pitch;
	unsigned width = copy_width(dst, src, row_bytes, rows > 1 ? dst_pitch : 0,
				    rows > 1 ? src_pitch : 0);
	unsigned long long elems = row_bytes / width * rows;
	unsigned long long blocks = (elems + TG_COPY_THREADS - 1) / TG_COPY_THREADS;
	if (blocks > TG_COPY_MAX_BLOCKS)
		blocks = TG_COPY_MAX_BLOCKS;
	void *params[TG_COPY_PARAMS] = {&dst, &src, &row_bytes, &rows, &dst_pitch, &src_pitch,
					&width};
	CUlaunchConfig cfg = {
		.gridDimX = (unsigned)blocks, .gridDimY = 1, .gridDimZ = 1,
		.blockDimX = TG_COPY_THREADS, .blockDimY = 1, .blockDimZ = 1,
		.hStream = stream,
	};
	CUfunction fn = rows == 1 && width == 16 ? a->copy.fn_row16 : a->copy.fn;
	return tg_launch_producer(a, &cfg, fn, params, hook);
}
