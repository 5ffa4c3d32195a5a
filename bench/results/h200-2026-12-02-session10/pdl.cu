// Scratch experiment (not in the tree): the GPU cost of a small copy kernel between two
// dependent compute kernels in a CUDA graph, plain and with programmatic dependent launch
// (the copy launched with programmatic stream serialization, waiting in-kernel with
// griddepcontrol.wait).  L layers of [work kernel, copy kernel]; GPU us per replay.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1);} } while (0)

__global__ void work(float *buf, int n, int iters)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	float v = buf[i];
	for (int k = 0; k < iters; k++) v = v * 1.0000001f + 0.0000001f;
	buf[i] = v;
}

__global__ void copy_plain(uint4 *d, const uint4 *s, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) d[i] = s[i];
}

__global__ void copy_pdl(uint4 *d, const uint4 *s, unsigned n)
{
	asm volatile("griddepcontrol.wait;" ::: "memory");
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) d[i] = s[i];
}

__global__ void copy_pdl_trig(uint4 *d, const uint4 *s, unsigned n)
{
	asm volatile("griddepcontrol.wait;" ::: "memory");
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) d[i] = s[i];
	asm volatile("griddepcontrol.launch_dependents;");
}

enum { FLOOR, PLAIN, PDL, PDL_TRIG, NV };
static const char *names[NV] = {"floor", "plain", "pdl", "pdl+trigger"};

int main(int argc, char **argv)
{
	int L = 24, n = 8 * 2048, iters = argc > 1 ? atoi(argv[1]) : 200;
	unsigned bytes = argc > 2 ? (unsigned)atoi(argv[2]) : 32768;
	unsigned nel = bytes / 16;
	float *act; uint4 *mon;
	CK(cudaMalloc(&act, (size_t)L * n * sizeof(float)));
	CK(cudaMalloc(&mon, (size_t)L * bytes));
	CK(cudaMemset(act, 0, (size_t)L * n * sizeof(float)));
	cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaGraphExec_t ex[NV]; cudaGraph_t gr[NV];
	std::vector<cudaGraphNode_t> copies[NV];
	for (int v = 0; v < NV; v++) {
		CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
		for (int l = 0; l < L; l++) {
			float *a = act + (size_t)l * n;
			work<<<(n + 255) / 256, 256, 0, s>>>(a, n, iters);
			if (v == FLOOR) continue;
			uint4 *d = (uint4 *)((char *)mon + (size_t)l * bytes);
			const uint4 *src = (const uint4 *)a;
			cudaLaunchConfig_t cfg = {};
			cfg.gridDim = dim3((nel + 255) / 256); cfg.blockDim = dim3(256); cfg.stream = s;
			cudaLaunchAttribute at[1];
			at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
			at[0].val.programmaticStreamSerializationAllowed = 1;
			if (v != PLAIN) { cfg.attrs = at; cfg.numAttrs = 1; }
			void (*k)(uint4 *, const uint4 *, unsigned) = v == PLAIN ? copy_plain : v == PDL ? copy_pdl : copy_pdl_trig;
			CK(cudaLaunchKernelEx(&cfg, k, d, src, nel));
		}
		CK(cudaStreamEndCapture(s, &gr[v]));
		size_t nn = 0; CK(cudaGraphGetNodes(gr[v], NULL, &nn));
		std::vector<cudaGraphNode_t> nodes(nn); CK(cudaGraphGetNodes(gr[v], nodes.data(), &nn));
		for (size_t i = 0; i < nn; i++) {
			cudaKernelNodeParams p; cudaGraphNodeType t; CK(cudaGraphNodeGetType(nodes[i], &t));
			if (t != cudaGraphNodeTypeKernel) continue;
			CK(cudaGraphKernelNodeGetParams(nodes[i], &p));
			if (p.func != (void *)work) copies[v].push_back(nodes[i]);
		}
		CK(cudaGraphInstantiate(&ex[v], gr[v], 0));
		CK(cudaGraphUpload(ex[v], s));
	}
	// edge types of the pdl graph
	{
		size_t ne = 0; CK(cudaGraphGetEdges(gr[PDL], NULL, NULL, NULL, &ne));
		std::vector<cudaGraphNode_t> f(ne), t(ne); std::vector<cudaGraphEdgeData> ed(ne);
		CK(cudaGraphGetEdges(gr[PDL], f.data(), t.data(), ed.data(), &ne));
		int prog = 0; for (auto &e : ed) prog += e.type == cudaGraphDependencyTypeProgrammatic;
		printf("pdl: edges %zu, programmatic %d, copy nodes %zu\n", ne, prog, copies[PDL].size());
	}
	cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
	const int R = 200, ROUNDS = 9;
	for (int phase = 0; phase < 2; phase++) {  // 0: copies enabled, 1: disabled (cudaGraphNodeSetEnabled)
		if (phase == 1)
			for (int v = PLAIN; v < NV; v++)
				for (auto nd : copies[v]) CK(cudaGraphNodeSetEnabled(ex[v], nd, 0));
		std::vector<float> t[NV];
		for (int r = 0; r < ROUNDS; r++)
			for (int v = 0; v < NV; v++) {
				for (int i = 0; i < 20; i++) CK(cudaGraphLaunch(ex[v], s));
				CK(cudaEventRecord(e0, s));
				for (int i = 0; i < R; i++) CK(cudaGraphLaunch(ex[v], s));
				CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
				float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t[v].push_back(ms * 1000 / R);
			}
		float med[NV];
		for (int v = 0; v < NV; v++) { std::sort(t[v].begin(), t[v].end()); med[v] = t[v][ROUNDS / 2]; }
		printf("pdl-exp iters=%d bytes=%u copies %s:", iters, bytes, phase ? "disabled" : "enabled");
		for (int v = 0; v < NV; v++) printf("  %s %.2f us (%+.3f us/copy)", names[v], med[v], (med[v] - med[FLOOR]) / L);
		printf("\n");
	}
	// correctness: re-enable, run pdl graph once, compare monitor with act
	for (int v = PLAIN; v < NV; v++) for (auto nd : copies[v]) CK(cudaGraphNodeSetEnabled(ex[v], nd, 1));
	CK(cudaMemset(mon, 0, (size_t)L * bytes));
	CK(cudaGraphLaunch(ex[PDL_TRIG], s)); CK(cudaStreamSynchronize(s));
	std::vector<char> h1((size_t)L * bytes), h2(bytes);
	CK(cudaMemcpy(h1.data(), mon, h1.size(), cudaMemcpyDeviceToHost));
	int bad = 0;
	for (int l = 0; l < L; l++) {
		CK(cudaMemcpy(h2.data(), act + (size_t)l * n, bytes, cudaMemcpyDeviceToHost));
		for (unsigned i = 0; i < bytes; i++) bad += h1[(size_t)l * bytes + i] != h2[i];
	}
	printf("pdl-exp: correctness after pdl+trigger replay: %d bytes differ\n", bad);
	return 0;
}
