"""piecewise_proof.py - issue 23 item 2b on a real GPU: graphtoggle under torch.compile with
a piecewise backend of the project's own (graphtoggle.piecewise), vLLM's PIECEWISE and
FULL_AND_PIECEWISE cudagraph modes.  A leg of `make gpu-check`.

The model (pw_model.py): a stack of layers whose attention is a registered op, the split
point.  torch.compile(fullgraph=True, dynamic=False) with graphtoggle.piecewise.Backend:
the FX graph split at every attention call, each piece compiled with inductor; per batch
size every piece captured into one torch.cuda.CUDAGraph, all in one shared pool, under
graphtoggle.torch.patch(agent) (the engine creates the graphs itself, as vLLM's
CUDAGraphWrapper does); FULL graphs of the whole compiled forward for the decode sizes in
the same pool; one size without graphs (the compiled pieces run eagerly).  Producers on
the modules through graphtoggle.torch.attach() (default), or a stand-in registered op
(--producers standin) until attach()'s op exists.

For each agent mode (lazy, device: strict, copy_out producers) STEPS steps with random
standing sets and plans, each step one random (batch size, kind): piecewise (every piece's
graph replayed, the attention ops eager between them), full (one graph), eager (no graph).
Ground truth comes from the monitor buffers, never from libtoggle's counters: every
buffer is filled with a sentinel before the step, and the producers that wrote at that
step must be exactly the step's effective set; at check steps the buffers must hold the
activations and the output must equal the uncompiled model's.

Prints "piecewise-proof: PASS (...)" or "piecewise-proof: FAIL (...)"; exit 0 on PASS and
on SKIPPED (no torch, no GPU), 1 on FAIL.
"""

import argparse
import copy
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

P = "piecewise-proof: "

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

import pw_model  # noqa: E402
from pw_model import TYPES, Engine, Model, StandIn, Taps  # noqa: E402

SENT = 1.0e30
FAILS = []

torch._dynamo.config.cache_size_limit = 64
if hasattr(torch._dynamo.config, "recompile_limit"):
    torch._dynamo.config.recompile_limit = 64


def fail(msg):
    FAILS.append(msg)
    print(P + "mismatch: " + msg, flush=True)


class Monitor:
    """Every monitor buffer of every hook, reset to the sentinel and read back at once."""

    def __init__(self, by_hook, n_layers):
        self.hooks = [(t, l) for t in TYPES for l in range(n_layers)]
        self.bufs = [b for h in self.hooks for b in by_hook.get(h, [])]
        self.owner = [i for i, h in enumerate(self.hooks) for _ in by_hook.get(h, [])]
        self.missing = [h for h in self.hooks if not by_hook.get(h)]

    def reset(self):
        for b in self.bufs:
            b.fill_(SENT)

    def ran(self):
        wrote = torch.stack([(b != SENT).any() for b in self.bufs]).cpu().tolist()
        got = [False] * len(self.hooks)
        for i, w in zip(self.owner, wrote):
            got[i] = got[i] or w
        return got


def reference(model):
    """The uncompiled model, same weights, plain torch forward hooks recording each hook's
    activation (no graphtoggle)."""
    ref = copy.deepcopy(model)
    ref.set_taps(None)
    acts = {}
    for t, mods in ref.hook_modules().items():
        for l, m in enumerate(mods):
            m.register_forward_hook(lambda mod, a, out, k=(t, l): acts.__setitem__(k, out))
    return ref, acts


def prove_mode(mode, args, rng):
    L = args.layers
    hooks = {t: L for t in TYPES}
    agent = Agent("pw-" + mode, hooks=hooks, mode=mode, strict=(mode == "device"))
    owner = gtt.patch(agent)  # before any graph exists (vLLM: at plugin load)
    model = Model(L, args.hidden, seed=args.seed)
    ref, acts = reference(model)
    att = None
    if args.producers == "attach":
        # torch.compile meets every shape before any eager forward: declared buffers
        att = gtt.attach(agent, model.hook_modules(), max_tokens=max(PW + FULL + EAGER),
                         width=args.hidden, dtype=torch.float32)
    else:
        taps = Taps(L, args.hidden, PW + FULL + EAGER, torch.float32, SENT)
        model.set_taps(taps)
        StandIn.agent = agent
        StandIn.method = "copy_out" if mode == "device" else "mul"
        StandIn.hooks = [(t, l) for t in TYPES for l in range(L)]
        StandIn.current = frozenset()
    torch._dynamo.reset()
    eng = Engine(model, PW, FULL, EAGER)
    t0 = time.perf_counter()
    try:
        eng.build()
    except Exception as e:
        if args.producers == "attach" and not pw_model.has_tap_op():
            fail("%s: torch.compile of attach()'s hooks failed (%s: %s): graphtoggle.torch has "
                 "no registered producer op yet (torch.ops.graphtoggle.tap, issue 23 item 1); "
                 "--producers standin proves the piecewise backend meanwhile"
                 % (mode, type(e).__name__, str(e).splitlines()[0][:200]))
            owner.end()
            agent.close()
            return 0, 0
        raise
    build_s = time.perf_counter() - t0
    by_hook = ({(t, l): [b for k, b in att.buffers.items() if (k[0], k[1]) == (t, l)]
                for t in TYPES for l in range(L)} if att is not None else taps.by_hook())
    mon = Monitor(by_hook, L)
    if mon.missing:
        fail("%s: no monitor buffer for %s" % (mode, mon.missing[:4]))

    # what graphtoggle knows of the graphs: every graph with producers bound, in this mode
    graphs = eng.graphs()
    bound = unbound = 0
    for label, g in graphs:
        raw = g.raw_cuda_graph()
        st = agent.graph_status(raw) if agent.has_producers(raw) else {"bound": False}
        if st["bound"]:
            bound += 1
            if st["mode"] != mode:
                fail("%s: %s runs in %s" % (mode, label, st["mode"]))
        else:
            unbound += 1
    stats = eng.backend.stats()
    # piece 0 of each size holds no producer (the first layer's query projection)
    want_unbound = len(PW)
    if unbound != want_unbound:
        fail("%s: %d graphs without producers, expected %d (the first piece of each size)"
             % (mode, unbound, want_unbound))
    print(P + "%-6s built in %.1f s: %d dynamo graphs, %d pieces + %d splits, %d piece graphs "
          "(%d sizes x %d pieces, one pool) + %d FULL graphs; %d bound, %d without producers"
          % (mode, build_s, stats["graphs_compiled"], stats["pieces"], stats["splits"],
             stats["graphs"], len(PW), L + 1, len(eng.full), bound, unbound), flush=True)

    all_hooks = mon.hooks
    kinds = eng.kinds()
    counts = {"piecewise": 0, "full": 0, "eager": 0}
    mism = plans = checks = 0
    replays0 = eng.backend.replays()
    t0 = time.perf_counter()
    for step in range(args.steps):
        r = rng.random()
        if r < 0.3:
            agent.set_enabled(rng.sample(all_hooks, rng.randrange(0, len(all_hooks) + 1)))
        elif r < 0.36:
            agent.set_enabled(rng.choice(["all", "none", "attn_out:*", "*:0-1"]))
        if rng.random() < 0.08:
            try:
                agent.plan(agent.current_step + 1 + rng.randrange(3),
                           rng.sample(all_hooks, rng.randrange(0, 6)))
                plans += 1
            except graphtoggle.LimitError:
                pass
        mon.reset()
        eff = agent.step()
        want = [h in eff for h in all_hooks]
        StandIn.current = frozenset(i for i, w in enumerate(want) if w)
        bs, kind = rng.choice(kinds)
        out = eng.run(bs, kind)
        counts[kind] += 1
        got = mon.ran()
        if got != want:
            mism += 1
            if mism <= 5:
                fail("%s step %d (%s, bs %d): producers that wrote %s, step set %s"
                     % (mode, agent.current_step, kind, bs,
                        [all_hooks[i] for i, v in enumerate(got) if v], eff))
        if step % args.check_every == 0:
            checks += 1
            with torch.inference_mode():
                want_out = ref(eng.inputs[bs])
            if not torch.allclose(out, want_out, rtol=1e-2, atol=1e-2):
                mism += 1
                fail("%s step %d (%s, bs %d): output differs from the uncompiled model by %.3g"
                     % (mode, agent.current_step, kind, bs, (out - want_out).abs().max()))
            for (t, l) in eff:
                bufs = [b for b in by_hook[(t, l)] if b.shape[0] >= bs]
                wrote = [b for b in bufs if bool((b[:bs] != SENT).any())]
                if len(wrote) != 1 or not torch.allclose(wrote[0][:bs].view(bs, -1).float(),
                                                         acts[(t, l)].float(), rtol=1e-2,
                                                         atol=1e-2):
                    mism += 1
                    fail("%s step %d (%s, bs %d): the buffer of %s:%d does not hold the "
                         "activation" % (mode, agent.current_step, kind, bs, t, l))
                    break
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    an = agent.anomalies()
    st = agent.stats()
    replays = eng.backend.replays() - replays0
    print(P + "%-6s %d steps (%d piecewise, %d full, %d eager), %d piece replays, %d plans, "
          "%d checks, %d mismatches, %.1f s; launches %d, node_set_calls %d, driver_errors %d"
          % (mode, args.steps, counts["piecewise"], counts["full"], counts["eager"], replays,
             plans, checks, mism, dt, st["launches"], st["node_set_calls"],
             an["driver_errors"]), flush=True)
    if an["driver_errors"]:
        fail("%s: %d driver errors" % (mode, an["driver_errors"]))
    if mode == "device" and st["node_set_calls"]:
        fail("device: the host made %d cuGraphNodeSetEnabled calls" % st["node_set_calls"])
    if eng.backend.stats()["input_copies"]:
        fail("%s: %d input copies (the static inputs moved)"
             % (mode, eng.backend.stats()["input_copies"]))
    del eng
    owner.end()
    torch.cuda.synchronize()
    agent.close()
    return mism, args.steps


PW = [16, 4, 1]
FULL = [4, 1]
EAGER = [24]


def main():
    global PW, FULL, EAGER
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400, help="steps per agent mode")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", default="lazy,device")
    ap.add_argument("--producers", choices=("attach", "standin"), default="attach")
    ap.add_argument("--check-every", type=int, default=37)
    ap.add_argument("--sizes", default="16,4,1", help="piecewise batch sizes")
    ap.add_argument("--full-sizes", default="4,1", help="FULL graph batch sizes")
    ap.add_argument("--eager-sizes", default="24", help="sizes without graphs")
    args = ap.parse_args()
    PW = [int(s) for s in args.sizes.split(",") if s]
    FULL = [int(s) for s in args.full_sizes.split(",") if s]
    EAGER = [int(s) for s in args.eager_sizes.split(",") if s]
    print(P + "torch %s, %s, graphtoggle %s (%s), producers %s" % (
        torch.__version__, torch.cuda.get_device_name(), graphtoggle.__version__,
        graphtoggle.library_path(), args.producers), flush=True)
    rng = random.Random(args.seed)
    total = 0
    mism = 0
    t0 = time.perf_counter()
    try:
        for mode in args.modes.split(","):
            m, n = prove_mode(mode, args, rng)
            mism += m
            total += n
    except Exception:
        traceback.print_exc()
        print(P + "FAIL (exception)")
        return 1
    if FAILS or mism:
        print(P + "FAIL (%d mismatches, %d failures)" % (mism, len(FAILS)))
        return 1
    print(P + "PASS (%s: %d steps, 0 mismatches, %.0f s)" % (args.modes, total,
                                                             time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
