"""Experiment (session 22): do 32 producer copies cost less on a side stream of the graph
(forked after their input, joined at the graph's end) than inline on the main stream?
Plain torch, no graphtoggle: transformers' Llama (16 layers, hidden 2048, bf16, random
weights, no KV cache), one torch.cuda.CUDAGraph per variant and batch size in one pool;
GPU time of 20 back-to-back replays (CUDA events), variants interleaved, medians."""
import statistics, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
dt = torch.bfloat16
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                  num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
cfg._attn_implementation = "sdpa"
model = LlamaForCausalLM(cfg).to(device="cuda", dtype=dt).eval()
layers = model.model.layers
mods = list(layers) + [l.mlp for l in layers]
MAXB = 32
bufs = [torch.zeros(MAXB, 2048, device="cuda", dtype=dt) for _ in mods]
side = torch.cuda.Stream()
state = {"mode": "floor"}
MODES = ("floor", "inline", "side")


def mk(i):
    def hook(m, inp, out):
        x = out[0] if isinstance(out, tuple) else out
        x2 = x.reshape(-1, x.shape[-1])
        dst = bufs[i][: x2.shape[0]]
        if state["mode"] == "inline":
            torch.mul(x2, 1, out=dst)
        elif state["mode"] == "side":
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.mul(x2, 1, out=dst)
            x.record_stream(side)
    return hook


for i, m in enumerate(mods):
    m.register_forward_hook(mk(i))

pool = torch.cuda.graph_pool_handle()
graphs = {}
with torch.no_grad():
    for bs in (32, 8, 1):
        ids = torch.randint(0, 32000, (bs, 1), device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for mode in MODES:
                state["mode"] = mode
                for _ in range(3):
                    model(ids, use_cache=False)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        for mode in MODES:
            state["mode"] = mode
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                out = model(ids, use_cache=False).logits
                if mode == "side":
                    torch.cuda.current_stream().wait_stream(side)
            graphs[(bs, mode)] = (g, out, ids)
        state["mode"] = "floor"

for bs in (32, 8, 1):
    for b in bufs:
        b.fill_(7)
    graphs[(bs, "inline")][0].replay(); torch.cuda.synchronize()
    ref = [b[:bs].clone() for b in bufs]
    for b in bufs:
        b.fill_(7)
    graphs[(bs, "side")][0].replay(); torch.cuda.synchronize()
    bad = sum(not torch.equal(a, b[:bs]) for a, b in zip(ref, bufs))
    unwritten = sum(bool((a == 7).all()) for a in ref)
    graphs[(bs, "floor")][0].replay(); torch.cuda.synchronize()
    lo = graphs[(bs, "floor")][1].clone()
    print("bs %d: side buffers differing from inline's: %d of %d (inline unwritten %d); "
          "logits side==floor %s inline==floor %s" % (
              bs, bad, len(bufs), unwritten, torch.equal(graphs[(bs, "side")][1], lo),
              torch.equal(graphs[(bs, "inline")][1], lo)), flush=True)


def gpu_us(g, n=20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        g.replay()
    b.record(); b.synchronize()
    return a.elapsed_time(b) * 1000 / n


REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
for bs in (32, 8, 1):
    t = {m: [] for m in MODES}
    for m in MODES:
        gpu_us(graphs[(bs, m)][0])
    for _ in range(REPS):
        for m in MODES:
            t[m].append(gpu_us(graphs[(bs, m)][0]))
    f = statistics.median(t["floor"])
    print("side2: bs %2d: floor %.1f us; inline %.4fx; side %.4fx (medians of %d)" % (
        bs, f, statistics.median(t["inline"]) / f, statistics.median(t["side"]) / f, REPS),
        flush=True)
