#!/usr/bin/env python3
"""torch_piecewise.py - a small torch.compile'd inference "engine" captured piecewise, the way
vLLM's default mode runs a model (cudagraph_mode PIECEWISE or FULL_AND_PIECEWISE), made
toggleable with graphtoggle.

The model: decoder-like layers with random weights made here (nothing downloaded), whose
attention is a registered op (example::attention) writing into a tensor the layer
allocates, as vLLM's unified_attention_with_output does.  The engine, in vLLM's order:

 1. graphtoggle.torch.patch(agent) before any graph exists;
 2. producers on the modules, agent.attach() (attn_out, mlp_out, resid_post x L layers)
    after the model is made and before it is compiled;
 3. torch.compile(model, backend=graphtoggle.piecewise.Backend(splitting_ops=
    ["example::attention"]), fullgraph=True, dynamic=False): the FX graph is split at
    every attention call, each piece compiled with inductor;
 4. a warm-up per batch size without graphs, then per batch size (largest first) every
    piece captured into one torch.cuda.CUDAGraph, all in one shared pool; with
    --cudagraph-mode full_and_piecewise also one FULL graph of the whole forward per
    decode size (--full-sizes) in the same pool;
 5. per step: agent.step(), then one forward at a random batch size (a FULL graph where
    there is one and the step is "decode", else every piece's graph replayed with the
    attention ops eager between them).

Connected to toggled (--socket), togglectl changes the hooks while it runs; without a
socket it changes them itself every --change-every steps.  Every --check-every steps it
proves the three lanes agree: each monitor buffer is filled with a sentinel before the
step, and the producers that wrote theirs must be exactly the step's effective set.

    python3 examples/torch_piecewise.py --socket /tmp/t.sock --steps 2000
    build/togglectl -s /tmp/t.sock set 'attn_out:0-1,mlp_out:*'

--producers op: instead of attach(), the layers call a registered op of the example's own
(example::tap) whose eager body is a producer region (agent.producer, or agent.copy_out in
device mode) while a capture runs; the pattern for an engine that writes its own
producer ops.  attach() needs graphtoggle.torch's registered op (torch.ops.graphtoggle.tap)
for torch.compile to trace its hooks.

Exit status: 0 when every checked step matched (or SKIPPED: no torch or no GPU), 1 else.
"""

import argparse
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
    from torch import nn
except ImportError:
    print("torch_piecewise: SKIPPED: python3 cannot import torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("torch_piecewise: SKIPPED: torch sees no CUDA device")
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402
from graphtoggle import piecewise  # noqa: E402

TYPES = ("resid_post", "attn_out", "mlp_out")
SENTINEL = 1.0e30  # activations are bounded by tanh: never equal to it
torch._dynamo.config.cache_size_limit = 64
if hasattr(torch._dynamo.config, "recompile_limit"):
    torch._dynamo.config.recompile_limit = 64


@torch.library.custom_op("example::attention", mutates_args=("out",))
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
    """The split point: attention of the batch over a fixed context, written into out."""
    torch.matmul(torch.softmax(q @ k.t() * q.shape[-1] ** -0.5, dim=-1), v, out=out)


@attention.register_fake
def _(q, k, v, out):
    return None


class Producer:
    """--producers op: what example::tap's eager body needs."""
    agent = None
    hooks = ()
    step_set = frozenset()


@torch.library.custom_op("example::tap", mutates_args=("buf",))
def tap(x: torch.Tensor, buf: torch.Tensor, hook: int) -> None:
    """A producer op: inside a capture a producer region copying x into buf; outside one
    (a size without graphs) the copy exactly when the hook is in the step's set."""
    a = Producer.agent
    if torch.cuda.is_current_stream_capturing():
        if a.mode == "device":
            a.copy_out(x, buf, Producer.hooks[hook])
        else:
            with a.producer(Producer.hooks[hook]):
                torch.mul(x, 1, out=buf)
    elif Producer.hooks[hook] in Producer.step_set:
        buf.copy_(x)


@tap.register_fake
def _(x, buf, hook):
    return None


class Attention(nn.Module):
    def __init__(self, h, ctx=32):
        super().__init__()
        self.q, self.o = nn.Linear(h, h), nn.Linear(h, h)
        self.register_buffer("k", torch.randn(ctx, h))
        self.register_buffer("v", torch.randn(ctx, h))

    def forward(self, x):
        q = self.q(x)
        a = torch.empty_like(q)  # allocated inside the piece: a static address in its graph
        torch.ops.example.attention(q, self.k, self.v, a)
        return torch.tanh(self.o(a))


class MLP(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.up, self.down = nn.Linear(h, 2 * h), nn.Linear(2 * h, h)

    def forward(self, x):
        return torch.tanh(self.down(torch.relu(self.up(x))))


class Layer(nn.Module):
    def __init__(self, i, h):
        super().__init__()
        self.i, self.attn, self.mlp = i, Attention(h), MLP(h)
        self.taps = None  # --producers op: {(type index, batch size): buffer}

    def tap(self, t, x):
        if self.taps is not None:
            torch.ops.example.tap(x, self.taps[(t, x.shape[0])], t * self.n + self.i)

    def forward(self, x):
        a = self.attn(x)
        self.tap(1, a)
        x = x + a
        m = self.mlp(x)
        self.tap(2, m)
        y = torch.tanh(x + m)
        self.tap(0, y)
        return y


class Model(nn.Module):
    def __init__(self, layers, h):
        super().__init__()
        self.layers = nn.ModuleList(Layer(i, h) for i in range(layers))
        for l in self.layers:
            l.n = layers

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("lazy", "eager", "device"), default="lazy")
    ap.add_argument("--cudagraph-mode", choices=("piecewise", "full_and_piecewise"),
                    default="full_and_piecewise")
    ap.add_argument("--sizes", default="16,8,4,2,1", help="batch sizes captured piecewise")
    ap.add_argument("--full-sizes", default="4,2,1", help="FULL graph sizes (decode)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2000, help="0: until interrupted")
    ap.add_argument("--socket", help="toggled's socket (togglectl drives the hooks)")
    ap.add_argument("--group", default="decode")
    ap.add_argument("--change-every", type=int, default=100,
                    help="without --socket: pick a new random set every N steps")
    ap.add_argument("--check-every", type=int, default=1, help="0: never check")
    ap.add_argument("--producers", choices=("attach", "op"), default="attach")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")}, reverse=True)
    full = (sorted({int(s) for s in args.full_sizes.split(",")}, reverse=True)
            if args.cudagraph_mode == "full_and_piecewise" else [])
    L, H = args.layers, args.hidden
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    model = Model(L, H).cuda()  # (the CUDA context exists before the agent opens)
    # 1. the agent and the patch, before any graph exists; device mode strict, so that
    # this example never runs lazy mode in its place
    agent = graphtoggle.Agent("torch-piecewise", hooks={t: L for t in TYPES}, mode=args.mode,
                              socket=args.socket, group=args.group,
                              strict=(args.mode == "device"))
    owner = gtt.patch(agent)
    hooks = [(t, l) for t in TYPES for l in range(L)]
    # 2. producers, after the model is made and before it is compiled
    if args.producers == "attach":
        att = agent.attach({"resid_post": list(model.layers),
                            "attn_out": [l.attn for l in model.layers],
                            "mlp_out": [l.mlp for l in model.layers]},
                           # declared buffers: torch.compile meets the shapes first
                           max_tokens=max(sizes + full), width=H, dtype=torch.float32)
    else:
        Producer.agent, Producer.hooks = agent, hooks
        for l in model.layers:
            l.taps = {(t, bs): torch.full((bs, H), SENTINEL, device="cuda")
                      for t in range(len(TYPES)) for bs in sorted(set(sizes) | set(full))}
    # 3. compile, split at the attention op
    backend = piecewise.Backend(splitting_ops=["example::attention"])
    fwd = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
    x = torch.zeros(max(sizes + full) + 1, H, device="cuda")  # the static input
    t0 = time.perf_counter()
    full_graphs, full_out = {}, {}
    with torch.inference_mode():
        # 4. warm-up without graphs (compiles), then
        # the piecewise graphs largest size first, then the FULL graphs, one pool
        with backend.forward_mode("none"):
            for bs in sorted(set(sizes) | set(full), reverse=True):
                fwd(x[:bs])
                fwd(x[:bs])
        for bs in sizes:
            fwd(x[:bs])
        for bs in full:
            g = torch.cuda.CUDAGraph()
            with backend.forward_mode("full"), torch.cuda.graph(g, pool=backend.pool):
                full_out[bs] = fwd(x[:bs])
            full_graphs[bs] = g
    backend.capture_enabled = False
    torch.cuda.synchronize()
    if args.producers == "attach":
        bufs = {h: [b for k, b in att.buffers.items() if (k[0], k[1]) == h] for h in hooks}
    else:
        bufs = {(TYPES[t], l.i): [b for (tt, _), b in l.taps.items() if tt == t]
                for l in model.layers for t in range(len(TYPES))}
    st = backend.stats()
    print("torch_piecewise: %s mode, %s: %d dynamo graphs split into %d pieces, %d piece graphs "
          "+ %d FULL graphs in one pool, captured in %.1f s"
          % (agent.mode, args.cudagraph_mode, st["graphs_compiled"], st["pieces"], st["graphs"],
             len(full_graphs), time.perf_counter() - t0), flush=True)

    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    checked = mism = 0
    counts = {"full": 0, "piecewise": 0}
    step = 0
    while not stop and (args.steps == 0 or step < args.steps):
        if not args.socket and args.change_every and step % args.change_every == 0:
            agent.set_enabled(rng.sample(hooks, rng.randrange(len(hooks) + 1)))
        check = args.check_every and step % args.check_every == 0
        if check:
            for bl in bufs.values():
                for b in bl:
                    b.fill_(SENTINEL)
        eff = agent.step()  # 5. once per engine iteration, before its replays
        Producer.step_set = eff
        bs = rng.choice(sorted(set(sizes) | set(full)))
        x[:bs].uniform_(-1, 1)
        if bs in full_graphs and (bs not in sizes or rng.random() < 0.5):
            full_graphs[bs].replay()  # a decode step: one graph
            counts["full"] += 1
        else:
            with torch.inference_mode():
                fwd(x[:bs])  # every piece's graph, the attention ops eager between them
            counts["piecewise"] += 1
        if check:
            checked += 1
            wrote = {h for h, bl in bufs.items()
                     if any(bool((b != SENTINEL).any()) for b in bl)}
            if wrote != set(eff):
                mism += 1
                if mism <= 5:
                    print("torch_piecewise: step %d bs %d: producers that wrote %s, step set %s"
                          % (agent.current_step, bs, sorted(wrote), eff), flush=True)
        step += 1
    torch.cuda.synchronize()
    print("torch_piecewise: %d steps (%d piecewise: %d graphs each, %d FULL), %d checked, "
          "%d mismatches; %d piece replays"
          % (step, counts["piecewise"], L + 1, counts["full"], checked, mism,
             backend.replays()), flush=True)
    owner.end()
    agent.close()
    print("torch_piecewise: %s" % ("PASS" if mism == 0 else "FAIL (%d mismatches)" % mism))
    return 1 if mism else 0


if __name__ == "__main__":
    sys.exit(main())
