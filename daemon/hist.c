/*
 * hist.c - the latency histograms and the monotonic nanosecond clock that
 * the store, the server and the metrics share.  A helper at the bottom of
 * the daemon's layers (docs/architecture.md): it calls nothing of theirs,
 * so the store can time its saves without reaching up into metrics.c.
 */
#include <time.h>

#include "toggled.h"

const double td_hist_le[TD_HIST_BUCKETS] = {25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
					    1e-3,  2.5e-3, 5e-3,  10e-3, 25e-3,
					    50e-3, 100e-3, 250e-3, 1.0};

uint64_t td_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void td_hist_add(struct td_hist *h, uint64_t ns)
{
	size_t i = 0;
	while (i < TD_HIST_BUCKETS && (double)ns > td_hist_le[i] * 1e9)
		i++;
	h->bucket[i]++;
	h->count++;
	h->sum_ns += ns;
}
