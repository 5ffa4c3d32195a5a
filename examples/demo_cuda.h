/*
 * demo_cuda.h - demo_agent's real-CUDA backend (demo_cuda.c).
 *
 * The driver is loaded at run time (dlopen libcuda.so.1, entry points by
 * cuGetProcAddress), never linked; the kernels (demo_kernels.cu) are PTX
 * embedded at build time and JIT-compiled by the driver for the GPU found.
 */
#ifndef DEMO_CUDA_H
#define DEMO_CUDA_H

#include "demo_backend.h"

/*
 * Fill *be with the CUDA backend on device 0: driver, primary context,
 * module, stream and device buffers.  0, or -1 with be->err saying why CUDA
 * cannot be used here (no driver, no device, a driver too old for libtoggle,
 * a program built without nvcc, ...); nothing is left allocated then.
 */
int dc_open(struct demo_backend *be);

#endif /* DEMO_CUDA_H */
