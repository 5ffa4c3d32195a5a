/*
 * gpu_common.h - what every GPU program (examples/gpu_*.cu,
 * bench/gpu_bench.cu) needs, written once: failing loudly (die() prints
 * "<GPU_TAG>: FAIL (...)" and exits 1; CUDA_CHECK and TG_CHECK name the
 * call, file and line), skipping without a device, the splitmix64 random
 * sequence, the clocks and the small statistics helpers.  Define GPU_TAG
 * (a string literal) before including it.  The helpers are static inline:
 * a program that does not use one gets no unused-function warning.
 */
#ifndef GPU_COMMON_H
#define GPU_COMMON_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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

/*
 * No device is not a failure: print "<GPU_TAG>: SKIPPED: no CUDA device
 * (why)" and leave with 0.  Otherwise device 0 is made current and the
 * number of devices returned.
 */
static inline int gpu_device_or_skip(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n == 0) {
		printf(GPU_TAG ": SKIPPED: no CUDA device (%s)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		exit(0);
	}
	CUDA_CHECK(cudaSetDevice(0));
	return n;
}

/* splitmix64: the programs' random sets and orders (a --seed replays them). */
static inline uint64_t gpu_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* CLOCK_MONOTONIC in milliseconds and in microseconds. */
static inline double gpu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline double gpu_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* qsort's comparison of doubles, ascending. */
static inline int gpu_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Resident host memory in KiB (/proc/self/statm), 0 where unknown. */
static inline double gpu_rss_kib(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (double)res * (double)sysconf(_SC_PAGESIZE) / 1024.0;
}

#endif
