/*
 * gpu_fail.h - failing loudly in the GPU programs (examples/gpu_check.cu,
 * bench/gpu_bench.cu): die() prints "<GPU_TAG>: FAIL (...)" and exits 1;
 * CUDA_CHECK and TG_CHECK name the call, file and line.  Define GPU_TAG
 * (a string literal) before including it.
 */
#ifndef GPU_FAIL_H
#define GPU_FAIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "toggle.h"

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	printf(GPU_TAG ": FAIL (%s)\n", msg);
	fflush(stdout);
	exit(1);
}

#define CUDA_CHECK(call)                                                              \
	do {                                                                          \
		cudaError_t e_ = (call);                                              \
		if (e_ != cudaSuccess)                                                \
			die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,          \
			    cudaGetErrorName(e_), cudaGetErrorString(e_));            \
	} while (0)

/* After kernel launches: launch configuration errors surface here. */
#define CUDA_LAUNCHED() CUDA_CHECK(cudaGetLastError())

#define TG_CHECK(agent, call)                                                         \
	do {                                                                          \
		int r_ = (call);                                                      \
		if (r_ != TOGGLE_OK)                                                  \
			die("%s:%d: %s returned %d (%s): %s", __FILE__, __LINE__,     \
			    #call, r_, toggle_strerror(r_), toggle_last_error(agent)); \
	} while (0)

#endif
