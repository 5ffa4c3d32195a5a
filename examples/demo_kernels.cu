/*
 * demo_kernels.cu - the kernels of demo_agent's CUDA backend.
 *
 * Compiled to PTX by examples/examples.mk (nvcc -ptx) and embedded into
 * demo_agent as a C string; demo_cuda.c loads it with cuModuleLoadDataEx
 * (the driver JIT-compiles it for the GPU it finds) and launches the
 * kernels with cuLaunchKernel.  extern "C": cuModuleGetFunction finds them
 * by these names.  Keep struct demo_rec and the parameter lists in step
 * with demo_cuda.c.
 */

/* One ring record: which producer ran, in which graph, at which step. */
struct demo_rec {
	int graph;
	int hook; /* type * layers + layer */
	long long step;
};

/* The step in stream order: every producer launched after it reads it. */
extern "C" __global__ void demo_set_step(long long *d_step, long long step)
{
	*d_step = step;
}

/* A "layer": x = x*a + b a few times per element. */
extern "C" __global__ void demo_compute(float *x, unsigned n, float a, float b)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		float v = x[i];
		for (int k = 0; k < 8; k++)
			v = v * a + b;
		x[i] = v;
	}
}

/*
 * A producer: copy a slice of the activation out for the monitor, then
 * append {graph, hook, step} to the ring.  *count keeps counting past cap,
 * so the host sees an overflow.
 */
extern "C" __global__ void demo_produce(const float *x, float *out, unsigned n,
					const long long *d_step, struct demo_rec *ring,
					unsigned *count, unsigned cap, int graph, int hook)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		out[i] = x[i];
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		unsigned slot = atomicAdd(count, 1u);
		if (slot < cap) {
			ring[slot].graph = graph;
			ring[slot].hook = hook;
			ring[slot].step = *d_step;
		}
	}
}
