"""Session 13 experiment: what does a producer cost as a kernel node (torch.mul(x, 1,
out=)) against a memcpy node (Tensor.copy_ of the same dtype: cudaMemcpyAsync D2D)?
A decode-like chain of L layers (bs tokens, hidden H, bf16: x = tanh(x @ W)), two taps a
layer, captured once per variant; GPU us a replay by CUDA events, medians of rounds,
variants interleaved."""
import ctypes
import statistics
import sys

import torch

L, H = 16, 2048
torch.manual_seed(0)
Ws = [torch.randn(H, H, device="cuda", dtype=torch.bfloat16) / H ** 0.5 for _ in range(L)]


def make(bs, kind):
    x0 = torch.randn(bs, H, device="cuda", dtype=torch.bfloat16)
    bufs = [torch.empty(bs, H, device="cuda", dtype=torch.bfloat16) for _ in range(2 * L)]

    def fwd():
        x = x0
        for i, W in enumerate(Ws):
            h = x @ W
            if kind == "mul":
                torch.mul(h, 1, out=bufs[2 * i])
            elif kind == "memcpy":
                bufs[2 * i].copy_(h)
            x = torch.tanh(h)
            if kind == "mul":
                torch.mul(x, 1, out=bufs[2 * i + 1])
            elif kind == "memcpy":
                bufs[2 * i + 1].copy_(x)
        return x

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        fwd()
    g.instantiate()
    return g, bufs


cu = ctypes.CDLL("libcuda.so.1")
P = ctypes.c_void_p


def nodes_of(g):
    graph = P(g.raw_cuda_graph())
    n = ctypes.c_size_t(0)
    assert cu.cuGraphGetNodes(graph, None, ctypes.byref(n)) == 0
    arr = (P * n.value)()
    assert cu.cuGraphGetNodes(graph, arr, ctypes.byref(n)) == 0
    out = []
    for h in arr:
        t = ctypes.c_int(-1)
        assert cu.cuGraphNodeGetType(P(h), ctypes.byref(t)) == 0
        out.append((h, t.value))
    return out


def set_memcpy(g, on):
    ex = P(g.raw_cuda_graph_exec())
    k = 0
    for h, t in nodes_of(g):
        if t == 1:  # CU_GRAPH_NODE_TYPE_MEMCPY
            r = cu.cuGraphNodeSetEnabled(ex, P(h), ctypes.c_uint(1 if on else 0))
            assert r == 0, r
            k += 1
    return k


def gpu_us(g, n=200):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    a.record()
    for _ in range(n):
        g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1000 / n


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    for bs in (1, 8, 32):
        gs = {k: make(bs, k) for k in ("floor", "mul", "memcpy")}
        for k, (g, bufs) in gs.items():
            if k != "floor":
                for b in bufs:
                    b.fill_(float("nan"))
                g.replay()
                torch.cuda.synchronize()
                assert all(not b.isnan().any() for b in bufs), k
        for k, (g, _) in gs.items():
            types = {}
            for _, ty in nodes_of(g):
                types[ty] = types.get(ty, 0) + 1
            print("copy-nodes: bs %d %s: node types %s" % (bs, k, types))
        t = {k: [] for k in list(gs) + ["memcpy_off"]}
        for _ in range(rounds):
            for k, (g, _) in gs.items():
                t[k].append(gpu_us(g))
            g = gs["memcpy"][0]
            set_memcpy(g, False)
            t["memcpy_off"].append(gpu_us(g))
            set_memcpy(g, True)
        med = {k: statistics.median(v) for k, v in t.items()}
        f = med["floor"]
        print("copy-nodes: bs %d: memcpy nodes disabled: %.2f us (+%.2f, %.3f us a node)"
              % (bs, med["memcpy_off"], med["memcpy_off"] - f, (med["memcpy_off"] - f) / (2 * L)))
        print("copy-nodes: bs %d (%d KiB a copy): floor %.2f us; mul %.2f (+%.2f, %.3f us a "
              "producer, %.4fx); memcpy %.2f (+%.2f, %.3f us a producer, %.4fx)"
              % (bs, bs * H * 2 // 1024, f, med["mul"], med["mul"] - f,
                 (med["mul"] - f) / (2 * L), med["mul"] / f, med["memcpy"], med["memcpy"] - f,
                 (med["memcpy"] - f) / (2 * L), med["memcpy"] / f), flush=True)


if __name__ == "__main__":
    main()
