/*
 * gpu_record.cu - issue 24's staged recorder on the GPU (libtoggle/src/record.c,
 * gather.cu): records gathered on the replay's stream into device staging, copied
 * to the ring on the recorder's own stream, checked byte for byte against what the
 * producers wrote.  Ground truth is the producers' formula, not libtoggle's counters.
 *
 *   exact   48 hooks whose buffers have sizes from 1 byte to 64 KiB + 1 and start
 *           0 to 12 bytes off a 16-byte boundary (every access width of the gather
 *           and its tail), random sets, a 1 MiB ring that wraps every few steps.
 *           After every replay a kernel on the same stream overwrites every buffer
 *           (0xee): a record copied from the buffer rather than from what the gather
 *           took at the replay's point shows it.  Every record equals its step's
 *           producer output, none for a hook its step did not enable, records +
 *           drops = asked, no error; the recorder runs staged (else FAIL).
 *   faults  the agent's driver table wrapped: one host copy refused, one gather
 *           refused, one wait refused: each launch's records voided whole (no
 *           record of those steps published, errors counted), the next exact.
 *
 * Prints "gpu-record: leg=NAME PASS ..." or "... FAIL (...)", then
 * "gpu-record: PASS" or "gpu-record: FAIL".  --steps N (default 400), --seed S.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "toggle.h"
#include "toggle_record.h"
#include "toggle_ring.h"

#define GPU_TAG "gpu-record"
#include "gpu_common.h"

#include "agent_impl.h" /* the agent's driver table: wrapped by the faults leg */

#define N_LAYERS 48
#define N_HOOKS  48
#define SLOT     (80u << 10) /* bytes of the pool per hook */
#define RING     (1u << 20)
#define MAX_STEPS 4096

struct env {
	char why[512];
	struct toggle_catalog cat;
	cudaStream_t s;
	unsigned char *pool; /* N_HOOKS slots */
	unsigned *run;       /* replays so far (the head kernel) */
	uint64_t bytes[N_HOOKS];
	unsigned off[N_HOOKS];
};

#include "gpu_legs.h"

static const uint64_t sizes[] = {1, 3, 15, 16, 17, 100, 1000, 4095, 4096, 20000, 65537};
static const unsigned offs[] = {0, 1, 2, 3, 4, 8, 12};

static __host__ __device__ unsigned char pattern(unsigned run, int h, uint64_t i)
{
	return (unsigned char)(run * 131u + (unsigned)h * 7u + (unsigned)(i * 13u) + 1u);
}

__global__ void head_kernel(unsigned *run)
{
	*run += 1;
}

__global__ void produce_kernel(unsigned char *buf, uint64_t bytes, int h, const unsigned *run)
{
	unsigned r = *run - 1;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < bytes;
	     i += (uint64_t)gridDim.x * blockDim.x)
		buf[i] = pattern(r, h, i);
}

__global__ void clobber_kernel(unsigned char *pool, uint64_t n)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		pool[i] = 0xee;
}

static unsigned char *buf_of(struct env *e, int h)
{
	return e->pool + (size_t)h * SLOT + e->off[h];
}

struct rig {
	struct toggle_agent *a;
	cudaGraph_t g;
	cudaGraphExec_t x;
	struct toggle_ring_map m;
	struct toggle_ring_reader rd;
	int64_t step;
	uint64_t sets[MAX_STEPS + 1]; /* bits of each step's set */
	uint64_t asked, got, bad_steps;
	bool voided[MAX_STEPS + 1];   /* steps whose records must not appear */
};

static void rig_open(struct env *e, struct rig *r, const char *name)
{
	memset(r, 0, sizeof *r);
	r->m.fd = -1;
	r->a = agent_open(e, name, TOGGLE_MODE_LAZY);
	TG_CHECK(r->a, toggle_capture_begin(r->a));
	CUDA_CHECK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
	head_kernel<<<1, 1, 0, e->s>>>(e->run);
	for (int h = 0; h < N_HOOKS; h++) {
		produce_kernel<<<32, 256, 0, e->s>>>(buf_of(e, h), e->bytes[h], h, e->run);
		TG_CHECK(r->a, toggle_record_producer(r->a, (CUstream)e->s, hook_of(h)));
	}
	CUDA_CHECK(cudaStreamEndCapture(e->s, &r->g));
	TG_CHECK(r->a, toggle_capture_end(r->a));
	CUDA_CHECK(cudaGraphInstantiate(&r->x, r->g, 0));
	TG_CHECK(r->a, toggle_graph_bind(r->a, (CUgraph)r->g, (CUgraphExec)r->x));
	for (int h = 0; h < N_HOOKS; h++) {
		struct toggle_record_buffer b;
		memset(&b, 0, sizeof b);
		b.ptr = (CUdeviceptr)(uintptr_t)buf_of(e, h);
		b.bytes = e->bytes[h];
		b.dtype = TOGGLE_DTYPE_U8;
		b.ndim = 1;
		b.shape[0] = e->bytes[h];
		TG_CHECK(r->a, toggle_record_buffer(r->a, NULL, hook_of(h), &b));
	}
	int fd = -1;
	TG_CHECK(r->a, toggle_record_open(r->a, RING, &fd));
	char err[256];
	if (toggle_ring_attach(fd, 0, &r->m, err, sizeof err) != 0)
		die("toggle_ring_attach: %s", err);
	toggle_ring_reader_open(&r->rd, &r->m);
	TG_CHECK(r->a, toggle_record_set(r->a, 1, NULL));
	struct toggle_record_stats st;
	toggle_record_stats_get(r->a, &st);
	if (!st.staged)
		fail_leg(e, "the recorder copies record by record (no gather kernel or staging): "
			    "the staged path is what this leg proves");
}

static void rig_close(struct rig *r)
{
	toggle_ring_unmap(&r->m);
	toggle_agent_close(r->a);
	CUDA_CHECK(cudaGraphExecDestroy(r->x));
	CUDA_CHECK(cudaGraphDestroy(r->g));
}

/* One decode step: the set, the replay, the buffers overwritten, the engine's synchronize. */
static void rig_step(struct env *e, struct rig *r, uint64_t bits)
{
	if (r->step >= MAX_STEPS)
		die("more than %d steps", MAX_STEPS);
	struct toggle_set set = set_of(bits), got;
	TG_CHECK(r->a, toggle_set_enabled(r->a, &set));
	TG_CHECK(r->a, toggle_step_begin(r->a, ++r->step, &got));
	r->sets[r->step] = bits;
	TG_CHECK(r->a, toggle_graph_launch(r->a, (CUgraph)r->g, (CUgraphExec)r->x, (CUstream)e->s));
	clobber_kernel<<<64, 256, 0, e->s>>>(e->pool, (uint64_t)N_HOOKS * SLOT);
	CUDA_LAUNCHED();
	CUDA_CHECK(cudaStreamSynchronize(e->s));
	r->asked += (uint64_t)__builtin_popcountll(bits);
}

/* Every published record against the formula of its step's run (run = step - 1). */
static void rig_drain(struct env *e, struct rig *r)
{
	struct toggle_ring_record rec;
	const void *pl;
	int rc;

	while ((rc = toggle_ring_reader_next(&r->rd, &rec, &pl)) == 1) {
		int h = rec.layer;
		int64_t st = rec.step;
		if (rec.hook_type != 0 || h >= N_HOOKS || st < 1 || st > r->step) {
			fail_leg(e, "record of hook %u:%u at step %" PRId64, rec.hook_type, rec.layer, st);
		} else if (!(r->sets[st] >> h & 1u)) {
			fail_leg(e, "hook %d recorded at step %" PRId64 ", which did not enable it", h, st);
		} else if (r->voided[st]) {
			fail_leg(e, "hook %d of step %" PRId64 " published, its launch's copies failed",
				 h, st);
		} else if (rec.payload_len != e->bytes[h]) {
			fail_leg(e, "hook %d: %" PRIu64 " bytes, its buffer has %" PRIu64, h,
				 rec.payload_len, e->bytes[h]);
		} else {
			const unsigned char *p = (const unsigned char *)pl;
			for (uint64_t i = 0; i < rec.payload_len; i++)
				if (p[i] != pattern((unsigned)(st - 1), h, i)) {
					fail_leg(e, "step %" PRId64 " hook %d byte %" PRIu64 " of %" PRIu64
						    ": %#x, the producer wrote %#x", st, h, i,
						 rec.payload_len, p[i], pattern((unsigned)(st - 1), h, i));
					r->bad_steps++;
					break;
				}
		}
		toggle_ring_reader_release(&r->rd, &rec);
		r->got++;
	}
	if (rc != 0)
		fail_leg(e, "ring fault: %s", toggle_ring_fault_str(r->rd.fault));
}

static bool leg_exact(struct env *e, int steps, uint64_t seed)
{
	struct rig *r = (struct rig *)calloc(1, sizeof *r);
	if (!r)
		die("out of memory");
	e->why[0] = 0;
	rig_open(e, r, "gpu_record_exact");
	uint64_t rng = seed;
	for (int i = 0; i < steps; i++) {
		uint64_t bits = gpu_rng_next(&rng) & ((1ull << N_HOOKS) - 1);
		if (i % 7 == 0)
			bits = (1ull << N_HOOKS) - 1; /* all 48: two gathers (40 + 8) */
		rig_step(e, r, bits);
		if (gpu_rng_next(&rng) % 4 == 0)
			TG_CHECK(r->a, toggle_record_flush(r->a));
		else
			(void)toggle_record_poll(r->a);
		rig_drain(e, r);
	}
	TG_CHECK(r->a, toggle_record_flush(r->a));
	rig_drain(e, r);
	struct toggle_record_stats st;
	toggle_record_stats_get(r->a, &st);
	if (r->got + st.dropped != r->asked)
		fail_leg(e, "%" PRIu64 " records + %" PRIu64 " dropped != %" PRIu64 " asked", r->got,
			 st.dropped, r->asked);
	if (st.errors)
		fail_leg(e, "%" PRIu64 " records voided with no failure injected", st.errors);
	if (r->got < r->asked / 2)
		fail_leg(e, "only %" PRIu64 " of %" PRIu64 " records published", r->got, r->asked);
	uint64_t laps = (r->m.prod->head) / RING;
	char fig[256];
	snprintf(fig, sizeof fig, "%" PRIu64 " records exact of %" PRIu64 " asked (%" PRIu64
		 " dropped: ring full), %d steps, ring of %u KiB wrapped %" PRIu64 " times",
		 r->got, r->asked, st.dropped, steps, RING >> 10, laps);
	leg_report(e, "exact", fig);
	bool ok = !e->why[0];
	rig_close(r);
	free(r);
	return ok;
}

/* ---- faults: the driver table wrapped, one call refused at a time ---------------- */

static int fail_dtoh, fail_launch, fail_wait;
static CUresult (*real_dtoh)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*real_launch)(const CUlaunchConfig *, CUfunction, void **, void **);
static CUresult (*real_wait)(CUstream, CUevent, unsigned);

static CUresult wrapped_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	if (fail_dtoh && --fail_dtoh == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return real_dtoh(d, s, n, st);
}

static CUresult wrapped_launch(const CUlaunchConfig *c, CUfunction f, void **p, void **x)
{
	if (fail_launch && --fail_launch == 0)
		return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
	return real_launch(c, f, p, x);
}

static CUresult wrapped_wait(CUstream s, CUevent ev, unsigned fl)
{
	if (fail_wait && --fail_wait == 0)
		return CUDA_ERROR_INVALID_HANDLE;
	return real_wait(s, ev, fl);
}

static bool leg_faults(struct env *e)
{
	struct rig *r = (struct rig *)calloc(1, sizeof *r);
	if (!r)
		die("out of memory");
	e->why[0] = 0;
	rig_open(e, r, "gpu_record_faults");
	real_dtoh = r->a->cu.memcpy_dtoh_async;
	real_launch = r->a->cu.launch_kernel_ex;
	real_wait = r->a->cu.stream_wait_event;
	r->a->cu.memcpy_dtoh_async = wrapped_dtoh;
	r->a->cu.launch_kernel_ex = wrapped_launch;
	r->a->cu.stream_wait_event = wrapped_wait;
	const uint64_t all = (1ull << N_HOOKS) - 1;
	int *which[] = {&fail_dtoh, &fail_launch, &fail_launch, &fail_wait};
	int nth[] = {1, 1, 2, 1}; /* the 2nd gather: the first one ran */
	uint64_t voided = 0;
	for (int k = 0; k < 4; k++) {
		rig_step(e, r, all); /* a clean one first */
		TG_CHECK(r->a, toggle_record_flush(r->a));
		rig_drain(e, r);
		*which[k] = nth[k];
		rig_step(e, r, all);
		r->voided[r->step] = true;
		voided += N_HOOKS;
		TG_CHECK(r->a, toggle_record_flush(r->a));
		rig_drain(e, r);
		if (*which[k])
			fail_leg(e, "fault %d was never reached", k);
	}
	rig_step(e, r, all);
	TG_CHECK(r->a, toggle_record_flush(r->a));
	rig_drain(e, r);
	struct toggle_record_stats st;
	toggle_record_stats_get(r->a, &st);
	if (st.errors != voided)
		fail_leg(e, "%" PRIu64 " records voided, %" PRIu64 " expected", st.errors, voided);
	if (r->got != r->asked - voided - st.dropped)
		fail_leg(e, "%" PRIu64 " records published, %" PRIu64 " expected", r->got,
			 r->asked - voided - st.dropped);
	char fig[256];
	snprintf(fig, sizeof fig, "4 refused calls (host copy, first and second gather, wait): "
		 "%" PRIu64 " records voided, none published; %" PRIu64 " exact", voided, r->got);
	leg_report(e, "faults", fig);
	bool ok = !e->why[0];
	r->a->cu.memcpy_dtoh_async = real_dtoh;
	r->a->cu.launch_kernel_ex = real_launch;
	r->a->cu.stream_wait_event = real_wait;
	rig_close(r);
	free(r);
	return ok;
}

int main(int argc, char **argv)
{
	static const char *const types[] = {"h"};
	static struct env e;
	int steps = 400;
	uint64_t seed = 24;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else
			die("usage: gpu_record [--steps N] [--seed S]");
	}
	if (steps < 1 || steps > MAX_STEPS - 64)
		die("--steps: 1 to %d", MAX_STEPS - 64);
	gpu_device_or_skip();
	CUDA_CHECK(cudaFree(0)); /* the primary context, current for libtoggle's driver calls */
	e.cat.type_names = types;
	e.cat.n_types = 1;
	e.cat.n_layers = N_LAYERS;
	CUDA_CHECK(cudaStreamCreateWithFlags(&e.s, cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc((void **)&e.pool, (size_t)N_HOOKS * SLOT));
	CUDA_CHECK(cudaMalloc((void **)&e.run, sizeof(unsigned)));
	CUDA_CHECK(cudaMemset(e.run, 0, sizeof(unsigned)));
	for (int h = 0; h < N_HOOKS; h++) {
		e.bytes[h] = sizes[h % (sizeof sizes / sizeof sizes[0])];
		e.off[h] = offs[h % (sizeof offs / sizeof offs[0])];
	}
	bool ok = leg_exact(&e, steps, seed);
	/* The head kernel counts every replay: a new rig starts its steps at 1 again. */
	CUDA_CHECK(cudaMemset(e.run, 0, sizeof(unsigned)));
	ok &= leg_faults(&e);
	printf(GPU_TAG ": %s\n", ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}
