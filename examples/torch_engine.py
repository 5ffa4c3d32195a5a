#!/usr/bin/env python3
"""torch_engine.py - a small PyTorch inference "engine" made toggleable with graphtoggle.

A transformer-like model with random weights made here (nothing downloaded), one
torch.cuda.CUDAGraph per batch size (1, 2, 4, 8, 16, 32) captured by the engine itself
(the vLLM / SGLang pattern) while graphtoggle.torch.patch is active, producers attached to
the modules' forward hooks at 3 hook types x L layers, a random batch size per step.
Connected to toggled (--socket), togglectl changes the hooks while it runs; without a
socket it changes them itself every --change-every steps.

Every --check-every steps it proves the three lanes agree: each monitor buffer is filled
with a sentinel before the replay, and the producers that overwrote theirs must be exactly
the step's effective set (agent.step()'s return).

    python3 examples/torch_engine.py --socket /tmp/t.sock --steps 2000
    build/togglectl -s /tmp/t.sock set 'resid_post:0-3,mlp_out:*'

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
    print("torch_engine: SKIPPED: python3 cannot import torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("torch_engine: SKIPPED: torch sees no CUDA device")
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402

SIZES = (1, 2, 4, 8, 16, 32)
TYPES = ("resid_post", "attn_out", "mlp_out")
SENTINEL = 1.0e30  # activations are bounded by tanh: never equal to it


class Attention(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.qkv = nn.Linear(h, 2 * h)
        self.h = h

    def forward(self, x):
        return torch.tanh(self.qkv(x))[:, : self.h]  # a strided view, like a fused output


class MLP(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.up, self.down = nn.Linear(h, 2 * h), nn.Linear(2 * h, h)

    def forward(self, x):
        return torch.tanh(self.down(torch.relu(self.up(x))))


class Layer(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.attn, self.mlp = Attention(h), MLP(h)

    def forward(self, x):
        x = x + self.attn(x)
        return torch.tanh(x + self.mlp(x))


class Model(nn.Module):
    def __init__(self, layers, h):
        super().__init__()
        self.layers = nn.ModuleList(Layer(h) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="toggled's socket (default: standalone)")
    ap.add_argument("--name", default="torch-engine")
    ap.add_argument("--group", default="decode")
    ap.add_argument("--mode", default="lazy", choices=("lazy", "eager", "device"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--steps", type=int, default=2000,
                    help="0: run until SIGINT or SIGTERM (then print the summary)")
    ap.add_argument("--period-ms", type=float, default=0.0, help="sleep between steps")
    ap.add_argument("--check-every", type=int, default=10)
    ap.add_argument("--change-every", type=int, default=250,
                    help="standalone: a new random set every N steps")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)

    model = Model(args.layers, args.hidden).cuda().eval()
    agent = graphtoggle.Agent(args.name, hooks={t: args.layers for t in TYPES}, mode=args.mode,
                              socket=args.socket, group=args.group)
    print("torch_engine: agent %r (%s mode%s), %d layers x %s, torch %s on %s"
          % (args.name, agent.mode, ", socket " + args.socket if args.socket else ", standalone",
             args.layers, "/".join(TYPES), torch.__version__, torch.cuda.get_device_name()),
          flush=True)

    # producers on the modules' forward hooks: they record only inside a capture
    att = agent.attach({
        "resid_post": model.layers,
        "attn_out": [l.attn for l in model.layers],
        "mlp_out": [l.mlp for l in model.layers],
    })
    static_in = torch.zeros(max(SIZES), args.hidden, device="cuda")
    graphs = {}
    with torch.no_grad(), gtt.patch(agent):
        # the engine's own capture code, unchanged: one graph per batch size
        for bs in SIZES:
            x = static_in[:bs]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                model(x)  # warm-up outside the capture: the hooks do nothing
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                model(x)
            graphs[bs] = g
        print("torch_engine: captured %d graphs (batch %s), %d producers each, %d monitor "
              "buffers" % (len(graphs), ",".join(map(str, SIZES)), 3 * args.layers,
                           len(att.buffers)), flush=True)
        for st in agent.graphs():
            assert st["bound"], st

        def buffers_of(bs):
            return {(t, l): b for (t, l, shape, _), b in att.buffers.items() if shape[0] == bs}

        everything = sorted(agent.hookset("all"))
        checked = mism = 0
        last = None
        step = 0
        t0 = time.monotonic()
        stop = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.append(1))
        while (args.steps == 0 or step < args.steps) and not stop:
            if not args.socket and step % args.change_every == 0:
                agent.set_enabled(rng.sample(everything, rng.randrange(len(everything) + 1)))
            eff = agent.step()
            bs = rng.choice(SIZES)
            static_in[:bs].uniform_(-1, 1)
            check = step % args.check_every == 0
            if check:
                bufs = buffers_of(bs)
                for b in bufs.values():
                    b.fill_(SENTINEL)
            graphs[bs].replay()
            if check:
                torch.cuda.synchronize()
                ran = {h for h, b in bufs.items() if bool((b != SENTINEL).any())}
                checked += 1
                if ran != eff.to_set():
                    mism += 1
                    print("torch_engine: MISMATCH step %d bs %d: ran %s, step set %s"
                          % (agent.current_step, bs, sorted(ran), eff), flush=True)
            if eff != last:
                print("torch_engine: step %d: hooks %s (%d producers per replay)"
                      % (agent.current_step, eff, len(eff)), flush=True)
                last = eff
            step += 1
            if args.period_ms:
                time.sleep(args.period_ms / 1000)
        torch.cuda.synchronize()
        dt = time.monotonic() - t0
    att.detach()
    st = agent.stats()
    print("torch_engine: %d steps in %.1f s, %d checked, %d mismatches; launches %d, "
          "node_set_calls %d" % (step, dt, checked, mism, st["launches"], st["node_set_calls"]))
    agent.close()
    return 1 if mism else 0


if __name__ == "__main__":
    sys.exit(main())
