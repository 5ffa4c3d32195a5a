// Session 13 experiment: can a producer's cost hide behind the next kernel with
// programmatic dependent launch (PDL, sm_90)?  A decode-like chain of L layer
// kernels (each reads a weight slab and x, writes y), a producer copy after each;
// variants captured into graphs, GPU us a replay by events, medians of rounds:
//   floor   the layers alone
//   plain   layer, copy, layer... (full edges: the next layer waits for the copy)
//   pdl     the copy triggers its dependents once every block has loaded its
//           input (griddepcontrol.launch_dependents); the next layer is launched
//           with programmatic stream serialization (a programmatic edge in the
//           graph) and does not wait: it may overwrite the copy's input only
//           after every block of the copy has read it
//   pdl0    the same launch attribute, no trigger in the copy (implicit at exit)
// and a check that every variant's buffers hold what the layers wrote.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                  \
	do {                                                                   \
		cudaError_t e_ = (x);                                          \
		if (e_ != cudaSuccess) {                                       \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__,  \
				#x, cudaGetErrorString(e_));                   \
			exit(1);                                               \
		}                                                              \
	} while (0)

static const int L = 32;

__global__ void layer(const float *__restrict__ x, const float4 *__restrict__ w,
		      size_t w4, float *__restrict__ y, int n)
{
	// every block reads its share of the weight slab (memory-bound, as a decode
	// GEMV is), then block 0.. write y = tanh(x + partial)
	float acc = 0.f;
	for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < w4;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 v = w[i];
		acc += v.x + v.y + v.z + v.w;
	}
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j < n)
		y[j] = tanhf(x[j] + acc * 1e-9f);
}

template <bool trigger>
__global__ void copy(const float *__restrict__ src, float *__restrict__ dst, int n)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	float v = j < n ? src[j] : 0.f;
	if (trigger)
		asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	if (j < n)
		dst[j] = v;
}

struct rig {
	float *xs[L + 1];
	float *bufs[L];
	float4 *w;
	size_t w4;
	int n;
};

static void launch_layer(const rig &r, int i, cudaStream_t s, bool pdl)
{
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3(132);
	cfg.blockDim = dim3(256);
	cfg.stream = s;
	cudaLaunchAttribute at[1];
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at;
	cfg.numAttrs = pdl ? 1 : 0;
	CK(cudaLaunchKernelEx(&cfg, layer, (const float *)r.xs[i], (const float4 *)r.w, r.w4,
			      r.xs[i + 1], r.n));
}

static cudaGraphExec_t capture(const rig &r, int variant, cudaStream_t s)
{
	cudaGraph_t g;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	for (int i = 0; i < L; i++) {
		launch_layer(r, i, s, i > 0 && variant >= 2);
		if (variant == 0)
			continue;
		int blocks = (r.n + 255) / 256;
		if (variant == 2)
			copy<true><<<blocks, 256, 0, s>>>(r.xs[i + 1], r.bufs[i], r.n);
		else
			copy<false><<<blocks, 256, 0, s>>>(r.xs[i + 1], r.bufs[i], r.n);
	}
	CK(cudaStreamEndCapture(s, &g));
	cudaGraphExec_t e;
	CK(cudaGraphInstantiate(&e, g, 0));
	CK(cudaGraphDestroy(g));
	return e;
}

static double us_per_replay(cudaGraphExec_t e, cudaStream_t s, int n)
{
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaGraphLaunch(e, s));
	CK(cudaEventRecord(a, s));
	for (int i = 0; i < n; i++)
		CK(cudaGraphLaunch(e, s));
	CK(cudaEventRecord(b, s));
	CK(cudaEventSynchronize(b));
	float ms;
	CK(cudaEventElapsedTime(&ms, a, b));
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return ms * 1000.0 / n;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 9;
	const char *names[] = {"floor", "plain", "pdl", "pdl0"};
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	for (int n : {2048, 16384}) {
		for (size_t wmb : {2, 8}) {
			rig r;
			r.n = n;
			r.w4 = wmb * (1u << 20) / sizeof(float4);
			CK(cudaMalloc(&r.w, r.w4 * sizeof(float4)));
			CK(cudaMemset(r.w, 0, r.w4 * sizeof(float4)));
			for (int i = 0; i <= L; i++) {
				CK(cudaMalloc(&r.xs[i], n * sizeof(float)));
				CK(cudaMemset(r.xs[i], 0, n * sizeof(float)));
			}
			std::vector<float> x0(n);
			for (int j = 0; j < n; j++)
				x0[j] = (float)(j % 97) / 97.f;
			CK(cudaMemcpy(r.xs[0], x0.data(), n * sizeof(float), cudaMemcpyHostToDevice));
			for (int i = 0; i < L; i++)
				CK(cudaMalloc(&r.bufs[i], n * sizeof(float)));
			cudaGraphExec_t e[4];
			for (int v = 0; v < 4; v++)
				e[v] = capture(r, v, s);
			// check: each variant's buffers equal the layers' outputs
			std::vector<float> want(n), got(n);
			for (int v = 1; v < 4; v++) {
				for (int i = 0; i < L; i++)
					CK(cudaMemset(r.bufs[i], 0xff, n * sizeof(float)));
				CK(cudaGraphLaunch(e[v], s));
				CK(cudaStreamSynchronize(s));
				for (int i = 0; i < L; i++) {
					CK(cudaMemcpy(want.data(), r.xs[i + 1], n * sizeof(float),
						      cudaMemcpyDeviceToHost));
					CK(cudaMemcpy(got.data(), r.bufs[i], n * sizeof(float),
						      cudaMemcpyDeviceToHost));
					if (want != got) {
						printf("pdl-producer: FAIL: %s: buffer %d differs\n",
						       names[v], i);
						return 1;
					}
				}
			}
			std::vector<double> t[4];
			for (int k = 0; k < rounds; k++)
				for (int v = 0; v < 4; v++)
					t[v].push_back(us_per_replay(e[v], s, 200));
			double med[4];
			for (int v = 0; v < 4; v++) {
				std::sort(t[v].begin(), t[v].end());
				med[v] = t[v][t[v].size() / 2];
			}
			printf("pdl-producer: n %d (%d KiB a copy), weights %zu MiB a layer: floor %.2f us; "
			       "plain +%.3f us a producer; pdl +%.3f; pdl0 +%.3f\n",
			       n, (int)(n * sizeof(float) / 1024), wmb, med[0],
			       (med[1] - med[0]) / L, (med[2] - med[0]) / L, (med[3] - med[0]) / L);
			for (int v = 0; v < 4; v++)
				CK(cudaGraphExecDestroy(e[v]));
			for (int i = 0; i <= L; i++)
				CK(cudaFree(r.xs[i]));
			for (int i = 0; i < L; i++)
				CK(cudaFree(r.bufs[i]));
			CK(cudaFree(r.w));
		}
	}
	return 0;
}
