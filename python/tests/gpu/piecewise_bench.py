"""piecewise_bench.py - issue 23's piecewise target on a real GPU: what graphtoggle adds to a
step of a torch.compile'd model captured piecewise (graphtoggle.piecewise: L+1 piece graphs
per step, the attention ops eager between them, vLLM's PIECEWISE mode), against the same
model compiled and captured the same way without graphtoggle.  Run by
scripts/gpu-check.sh (leg piecewise_bench).

The model (pw_model.py) by default: 8 layers, hidden 8192, MLP 28672, bf16, random weights
made here (1.2 GB a layer, so that a step's GPU time exceeds the host time to issue it and
the CUDA events time the GPU, not the host), attention over a fixed 256-token context;
producers at three points per layer (attn_out, mlp_out, resid_post).  Legs, timed interleaved in one process:
  floor   the model without producers, compiled and captured piecewise, no agent, no patch
  off     with producers, captured under graphtoggle.torch.patch(agent), every producer off:
          agent.step() and the forward (every piece's guarded replay)
  on      the same graphs, every producer on
Producers through attach() where graphtoggle.torch registered its producer op, else the
stand-in op (--producers; the header line says which).
Figures per batch size, medians over --reps:
  GPU ms per step over --n back-to-back steps (CUDA events), as x floor;
  host us per call, in alternating bursts: torch's own replay of a floor piece graph
  against the guarded replay of the same piece with producers (off, on), agent.step(),
  and the host time graphtoggle adds to a step: step() + (graphs with producers) x (guarded
  - bare replay); the whole step's host time too (bursts of --burst steps; noisier, since
  it includes the eager attention ops and the split graph's Python).
One line "piecewise-bench: table: ..." per (mode, batch size); "piecewise-bench: PASS" judges
correctness only (which producers wrote at off and on steps; outputs against floor), never
speed.  Exit 0 on PASS and on SKIPPED (no torch or no GPU), 1 on FAIL.
"""

import argparse
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

P = "piecewise-bench: "

try:
    import torch
except ImportError:
    print(P + "SKIPPED: python3 cannot import torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print(P + "SKIPPED: torch sees no CUDA device")
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402
from graphtoggle import Agent  # noqa: E402

from pw_model import TYPES, Engine, Model, StandIn, Taps, has_tap_op  # noqa: E402

FAILS = []
SENT = 1.0e30

torch._dynamo.config.cache_size_limit = 64
if hasattr(torch._dynamo.config, "recompile_limit"):
    torch._dynamo.config.recompile_limit = 64


def fail(msg):
    FAILS.append(msg)
    print(P + "FAIL: " + msg, flush=True)


def gpu_ms(step, n):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(n):
        step()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def host_us(step, burst, bursts=4):
    res = []
    for _ in range(bursts):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(burst):
            step()
        res.append((time.perf_counter() - t) / burst * 1e6)
    torch.cuda.synchronize()
    return statistics.median(res)


def host_us_pair(fa, fb, n=16, rounds=60):
    """Host us per call of fa and fb, in alternating bursts of n calls synchronised between
    bursts (short enough that the GPU never makes the host wait), medians."""
    ra, rb = [], []
    for _ in range(rounds):
        for fn, res in ((fa, ra), (fb, rb)):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            res.append((time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(ra), statistics.median(rb)


def make_model(args, dtype, taps):
    m = Model(args.layers, args.hidden, inter=args.inter, ctx=args.ctx, seed=args.seed,
              dtype=dtype)
    if taps is not None:
        m.set_taps(taps)
    return m


def bench(args):
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    sizes = [int(s) for s in args.sizes.split(",")]
    L = args.layers
    t0 = time.perf_counter()
    floor = Engine(make_model(args, dtype, None), sizes)
    floor.build()
    print(P + "floor built in %.1f s: %s" % (time.perf_counter() - t0, floor.backend.stats()),
          flush=True)
    rows = []
    for mode in args.modes.split(","):
        agent = Agent("pw-bench-" + mode, hooks={t: L for t in TYPES}, mode=mode,
                      strict=(mode == "device"))
        kw = {} if args.random_ops == "default" else {"random_ops": False}
        owner = gtt.patch(agent, **kw)
        taps = None
        if args.producers == "standin":
            taps = Taps(L, args.hidden, sizes, dtype, SENT)
            StandIn.agent = agent
            StandIn.method = "copy_out" if mode == "device" else "mul"
            StandIn.hooks = [(t, l) for t in TYPES for l in range(L)]
            StandIn.current = frozenset()
        model = make_model(args, dtype, taps)
        att = (gtt.attach(agent, model.hook_modules(), max_tokens=max(sizes),
                          width=args.hidden, dtype=dtype)  # declared: compiled first
               if args.producers == "attach" else None)
        t0 = time.perf_counter()
        eng = Engine(model, sizes)
        eng.build()
        per_step = len(eng.backend.pieces) // len(sizes)
        print(P + "%s built in %.1f s: %s; %d graphs per step" % (
            mode, time.perf_counter() - t0, eng.backend.stats(), per_step), flush=True)
        bufs = (list(att.buffers.values()) if att is not None else list(taps.bufs.values()))

        for bs in sizes:
            # correctness: which producers wrote at an off step and an on step; outputs
            for setting, want_all in (("none", False), ("all", True)):
                agent.set_enabled(setting)
                agent.step()
                StandIn.current = frozenset(range(len(TYPES) * L)) if want_all else frozenset()
                eng.run(bs, "piecewise")  # the set change lands
                for buf in bufs:
                    buf.fill_(SENT)
                agent.step()
                out = eng.run(bs, "piecewise")
                torch.cuda.synchronize()
                wrote = sum(bool((b != SENT).any()) for b in bufs if b.shape[0] == bs)
                n = sum(1 for b in bufs if b.shape[0] == bs)
                if wrote != (n if want_all else 0):
                    fail("%s bs %d, all %s: %d of %d producers wrote" % (
                        mode, bs, "on" if want_all else "off", wrote, n))
            ref = floor.run(bs, "piecewise")
            if not torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-2):
                fail("%s bs %d: output differs from floor by %.3g"
                     % (mode, bs, (out.float() - ref.float()).abs().max()))

            def f_floor():
                floor.run(bs, "piecewise")

            def f_gt():
                agent.step()
                eng.run(bs, "piecewise")

            legs = {"floor": [], "off": [], "on": []}
            hosts = {"floor": [], "off": [], "on": []}
            for _ in range(args.reps):
                for leg in ("floor", "off", "on"):
                    if leg != "floor":
                        agent.set_enabled("all" if leg == "on" else "none")
                        for _ in range(3):
                            f_gt()
                    fn = f_floor if leg == "floor" else f_gt
                    legs[leg].append(gpu_ms(fn, args.n))
                    hosts[leg].append(host_us(fn, args.burst))
            step_us = host_us(agent.step, 256)
            # per call, alternating: torch's own replay of a floor piece graph against the
            # guarded replay of the same piece with producers, off and on; the Piece wrapper
            fp = floor.pieces_by_bs[bs][1]
            gp = eng.pieces_by_bs[bs][1]
            fg, gg = fp.entries[()].graph, gp.entries[()].graph
            micro = {}
            for setting in ("none", "all"):
                agent.set_enabled(setting)
                agent.step()
                gg.replay()
                micro[setting] = host_us_pair(fg.replay, gg.replay)
            gargs = gp.entries[()].static
            micro["piece"] = host_us_pair(gg.replay, lambda: gp(*gargs))
            n_prod = sum(1 for p in eng.pieces_by_bs[bs]
                         if agent.has_producers(p.entries[()].graph.raw_cuda_graph()))
            g = {k: statistics.median(v) for k, v in legs.items()}
            h = {k: statistics.median(v) for k, v in hosts.items()}
            added = h["off"] - h["floor"]
            per_replay = (added - step_us) / per_step
            rows.append((mode, bs, g, h, step_us, added, per_replay, per_step, micro, n_prod))
            print(P + "%s bs %d: host us per call: torch's replay of a piece graph %.2f, guarded "
                  "replay off %.2f (+%.2f), on %.2f (+%.2f); the Piece wrapper around a replay "
                  "+%.2f; agent.step() %.2f; per step: %d graphs with producers -> +%.2f us "
                  "(step() + guarded replays)" % (
                      mode, bs, micro["none"][0], micro["none"][1],
                      micro["none"][1] - micro["none"][0], micro["all"][1],
                      micro["all"][1] - micro["all"][0], micro["piece"][1] - micro["piece"][0],
                      step_us, n_prod, step_us + n_prod * (micro["none"][1] - micro["none"][0])),
                  flush=True)
            print(P + "%s bs %d: GPU ms/step floor %.4f off %.4f (%.4fx) on %.4f (%.4fx); host "
                  "us/step floor %.1f off %.1f on %.1f; added %.1f (step() %.2f, per guarded "
                  "replay %.2f, %d graphs)" % (
                      mode, bs, g["floor"], g["off"], g["off"] / g["floor"], g["on"],
                      g["on"] / g["floor"], h["floor"], h["off"], h["on"], added, step_us,
                      per_replay, per_step), flush=True)
        del eng
        owner.end()
        torch.cuda.synchronize()
        agent.close()
    for mode, bs, g, h, step_us, added, per_replay, per_step, micro, n_prod in rows:
        off_add = micro["none"][1] - micro["none"][0]
        print(P + "table: %s bs %d | GPU off %.4fx on %.4fx | host per step: +%.2f us = step() "
              "%.2f + %d guarded replays x %.2f (on: x %.2f), bare replay %.2f us | whole step "
              "host us floor %.0f off %.0f on %.0f | random_ops %s"
              % (mode, bs, g["off"] / g["floor"], g["on"] / g["floor"],
                 step_us + n_prod * off_add, step_us, n_prod, off_add,
                 micro["all"][1] - micro["all"][0], micro["none"][0], h["floor"], h["off"],
                 h["on"], args.random_ops))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--inter", type=int, default=28672)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--sizes", default="1,8")
    ap.add_argument("--modes", default="lazy,device")
    ap.add_argument("--producers", choices=("auto", "attach", "standin"), default="auto",
                    help="auto: attach() where graphtoggle.torch registered its producer op "
                    "(torch.ops.graphtoggle.tap), else the stand-in op")
    ap.add_argument("--random-ops", choices=("default", "false"), default="default",
                    help="patch(agent) as is, or patch(agent, random_ops=False)")
    ap.add_argument("--n", type=int, default=30, help="steps per GPU timing")
    ap.add_argument("--burst", type=int, default=8, help="steps per host-time burst")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.producers == "auto":
        import graphtoggle.torch  # noqa: F401  (registers the op where it has one)
        args.producers = "attach" if has_tap_op() else "standin"
    print(P + "torch %s, %s, graphtoggle %s, producers %s, %d layers, hidden %d, %s" % (
        torch.__version__, torch.cuda.get_device_name(), graphtoggle.__version__,
        args.producers, args.layers, args.hidden, args.dtype), flush=True)
    try:
        bench(args)
    except Exception:
        traceback.print_exc()
        print(P + "FAIL (exception)")
        return 1
    if FAILS:
        print(P + "FAIL (%d failures)" % len(FAILS))
        return 1
    print(P + "PASS (correctness only: producers off wrote nothing, on wrote all, outputs "
          "equal floor's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
