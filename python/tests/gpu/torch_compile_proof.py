"""torch_compile_proof.py - a leg of `make gpu-check` (issue 23): graphtoggle's producer op
torch.ops.graphtoggle.tap under every way torch runs a model, on a real GPU, lazy and
device mode, with 0 mismatches.  Ground truth comes from the monitor buffers, never from
libtoggle's counters: every buffer is filled with NaN before each run; a producer that ran
wrote its first rows with activations (bounded by tanh, never NaN); the hooks whose
buffers were written (all of the run's rows, nothing past them) must be exactly the
step's effective set (agent.step()'s return).

The model (made here, random weights, nothing downloaded): a stack of L layers, each an
attention-like block (the first half of a [tokens, 2H] projection: a strided view), an
MLP and the residual stream; hooks resid_post (the layer), attn_out, mlp_out (its
modules), attached with graphtoggle.torch.attach(max_tokens=..., width=H): declared
buffers, made before torch.compile.

 (a) torch.compile(model.forward, fullgraph=True, dynamic=False) and the engine's own
     torch.cuda.CUDAGraph per batch size (largest first, one shared pool) captured under
     graphtoggle.torch.patch(agent) (default random_ops: automatic), as vLLM's FULL
     graphs: every graph bound with one producer per hook; random steps (standing sets,
     plans, a random batch size each), a random graph re-instantiated now and then;
     every replay checked; no recompile across steps and set changes.
 (d) in the same steps, eager runs: the compiled model at a batch size above the largest
     graph (compiled code run without a graph, as vLLM runs such batches) and the plain
     nn.Module (forward hooks in Python), each checked like a replay; now and then every
     hook on, and the buffers of a replay compared with an eager run's (the bytes
     copied are the activations).
 (s) never a silent loss beside graphs with producers: compiled at one size before
     attach(), captured at two: attach() warns, the next step() is refused once; after
     torch.compiler.reset() and a new capture, every graph has producers and every replay
     follows the step's set.
 (c) torch.compile(model.forward, mode="reduce-overhead", fullgraph=True, dynamic=False):
     CUDA Graph Trees record graphs while the program runs (warm-up, record, replay):
     each recorded graph bound when recorded (one producer per hook), every call checked
     (warm-up and recording runs included), the trees freed mid-run
     (torch._dynamo.reset(): every graph forgotten) and re-recorded, freed at the end.

With --dynamic, (a) and (c) compile with a dynamic token count, as vLLM does
(torch.compile(dynamic=None) and torch._dynamo.mark_dynamic(x, 0)): one compiled graph for
every size above 1, still captured (a) or recorded (c) once per size.

Prints one "torch-compile-proof: <mode> <leg>: PASS|FAIL ..." line per leg with its
counts, then "torch-compile-proof: PASS" or "torch-compile-proof: FAIL (...)"; exit 0 on
PASS and on SKIPPED (no torch, no torch.compile, no GPU), 1 on FAIL.  About 20-60 s on an
H200, most of it torch.compile.
"""

import argparse
import os
import random
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

PREFIX = "torch-compile-proof: "

try:
    import torch
    from torch import nn
except ImportError:
    print(PREFIX + "SKIPPED: python3 cannot import torch")
    sys.exit(0)
if getattr(torch, "FAKE", False) or not hasattr(torch, "compile"):
    print(PREFIX + "SKIPPED: this torch has no torch.compile")
    sys.exit(0)
if not torch.cuda.is_available():
    print(PREFIX + "SKIPPED: torch sees no CUDA device")
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402

TYPES = ("resid_post", "attn_out", "mlp_out")
# attach() warns when something was compiled before it (the lazy agent's models are, when
# the device agent attaches): this script attaches every model before compiling it
warnings.filterwarnings("ignore", message="graphtoggle.torch.attach")


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


def modules_of(model):
    return {"resid_post": model.layers, "attn_out": [l.attn for l in model.layers],
            "mlp_out": [l.mlp for l in model.layers]}


class Checker:
    """The monitor buffers of one attachment as one view per hook, and the check."""

    def __init__(self, name, agent, att, layers):
        self.name, self.agent, self.att = name, agent, att
        self.hooks = [(t, l) for t in TYPES for l in range(layers)]
        self.bufs = [att.buffer(t, l) for t, l in self.hooks]
        self.runs = 0
        self.mismatches = 0
        self.fails = []

    def reset(self):
        for b in self.bufs:
            b.fill_(float("nan"))

    def written(self, n):
        """(written hooks, partial hooks): written = its first n rows all finite and nothing
        after; partial = anything else that is not all NaN."""
        torch.cuda.synchronize()
        rows = torch.stack([~torch.isnan(b).any(dim=1) for b in self.bufs])  # [hooks, max]
        head = rows[:, :n].all(dim=1).cpu().tolist()
        none = (~rows).all(dim=1).cpu().tolist()
        tail_clean = (~rows[:, n:]).all(dim=1).cpu().tolist() if n < rows.shape[1] \
            else [True] * len(self.hooks)
        wrote, partial = set(), set()
        for h, hd, nn_, tc in zip(self.hooks, head, none, tail_clean):
            if hd and tc:
                wrote.add(h)
            elif not nn_:
                partial.add(h)
        return wrote, partial

    def check(self, what, n, eff):
        wrote, partial = self.written(n)
        self.runs += 1
        want = eff.to_set()
        if wrote != want or partial:
            self.mismatches += 1
            if self.mismatches <= 5:
                self.fail("%s: step %d, %d tokens: wrote %s, partial %s, step set %s" % (
                    what, self.agent.current_step, n, sorted(wrote), sorted(partial), eff))
            return False
        return True

    def fail(self, msg):
        self.fails.append(msg)
        print(PREFIX + "%s: mismatch: %s" % (self.name, msg), flush=True)


def random_set(rng, hooks):
    r = rng.random()
    if r < 0.15:
        return "none"
    if r < 0.25:
        return "all"
    return rng.sample(hooks, rng.randrange(1, len(hooks) + 1))


def dyn(args, x):
    """x, its token dimension marked dynamic under --dynamic (a size of 1 is specialised
    by dynamo, as it is for vLLM: it gets a compiled graph of its own)."""
    if args.dynamic and x.shape[0] > 1:
        torch._dynamo.mark_dynamic(x, 0)
    return x


def unique_graphs():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def leg_a_d(args, mode, agent, model, att, rng):
    """(a) compiled + engine-captured graphs per batch size in one pool, and (d) eager runs."""
    name = "%s a+d" % mode
    ck = Checker(name, agent, att, args.layers)
    sizes = sorted(args.sizes, reverse=True)
    big = args.eager_tokens
    H = args.hidden
    static_in = torch.rand(max(big, max(sizes)), H, device="cuda") * 2 - 1
    t0 = time.perf_counter()
    compiled = torch.compile(model.forward, fullgraph=True, dynamic=None if args.dynamic else False)
    graphs, outs = {}, {}
    pool = torch.cuda.graph_pool_handle()
    agent.set_enabled("none")
    with gtt.patch(agent):
        for bs in sizes:
            x = dyn(args, static_in[:bs])
            s = torch.cuda.Stream()  # torch's rule: warm up on a side stream
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    compiled(x)  # compiles for bs (or once, --dynamic), runs outside a graph
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()  # the engine's own, patched
            with torch.cuda.graph(g, pool=pool):
                outs[bs] = compiled(x)
            graphs[bs] = g
        compiled(dyn(args, static_in[:big]))  # compiles the eager size before the steps
        torch.cuda.synchronize()
        t_compile = time.perf_counter() - t0
        n_hooks = len(ck.hooks)
        for bs, g in graphs.items():
            st = agent.graph_status(g.raw_cuda_graph())
            if not st["bound"] or st["nodes"] != n_hooks or st["hooks_covered"] != n_hooks:
                ck.fail("graph bs %d: bound %s, %d producer nodes, %d hooks (want %d)"
                        % (bs, st["bound"], st["nodes"], st["hooks_covered"], n_hooks))
            if mode == "device" and st["mode"] != "device":
                ck.fail("graph bs %d runs in %s mode (%s)" % (bs, st["mode"], st["note"]))
        graphs_before = unique_graphs()
        replays = eager_c = eager_p = values = reinst = plans = 0
        for step in range(args.steps):
            if rng.random() < 0.2:
                agent.set_enabled(random_set(rng, ck.hooks))
            if rng.random() < 0.05:
                try:
                    agent.plan(agent.current_step + 1 + rng.randrange(3),
                               random_set(rng, ck.hooks))
                    plans += 1
                except graphtoggle.LimitError:
                    pass
            if step and step % 150 == 0:
                graphs[rng.choice(sizes)].instantiate()  # a new exec: the patch rebinds
                reinst += 1
            eff = agent.step()
            bs = rng.choice(sizes)
            static_in[:bs].uniform_(-1, 1)
            ck.reset()
            graphs[bs].replay()
            ck.check("replay bs %d" % bs, bs, eff)
            replays += 1
            if step % 7 == 3:  # (d) the compiled model outside a graph
                ck.reset()
                compiled(static_in[:big])
                ck.check("compiled eager %d tokens" % big, big, eff)
                eager_c += 1
            if step % 11 == 5:  # (d) the plain module
                n = rng.choice([big, rng.choice(sizes)])
                ck.reset()
                model(static_in[:n])
                ck.check("plain eager %d tokens" % n, n, eff)
                eager_p += 1
            if step % 97 == 50:  # the bytes: a replay's buffers against an eager run's
                agent.set_enabled("all")
                agent.step()
                ck.reset()
                graphs[bs].replay()
                torch.cuda.synchronize()
                got = [b[:bs].clone() for b in ck.bufs]
                ck.reset()
                model(static_in[:bs])
                torch.cuda.synchronize()
                for h, a, b in zip(ck.hooks, got, ck.bufs):
                    if not torch.allclose(a, b[:bs], rtol=1e-3, atol=1e-3):
                        ck.mismatches += 1
                        ck.fail("bs %d: %s:%d: the replay's buffer differs from the eager "
                                "run's by %g" % (bs, h[0], h[1], float((a - b[:bs]).abs().max())))
                        break
                values += 1
        recompiles = unique_graphs() - graphs_before
        if recompiles:
            ck.fail("%d recompiles across steps and set changes" % recompiles)
        bare = sum(agent.graph_status(g.raw_cuda_graph())["bare_replays"]
                   for g in graphs.values())
        an = agent.anomalies()
        if an["driver_errors"]:
            ck.fail("%d driver errors" % an["driver_errors"])
        torch.cuda.synchronize()
    ok = not ck.fails
    print(PREFIX + "%s a+d: %d graphs (bs %s, one pool), %d producers each, bound; %d steps: "
          "%d replays, %d compiled-eager runs (%d tokens), %d plain eager runs, %d value "
          "checks, %d plans, %d re-instantiations; %d checked, %d mismatches; %d recompiles "
          "after warm-up; %d bare-exec replays (automatic random_ops); compile+capture %.1f s"
          % (mode, len(graphs), ",".join(map(str, sizes)), n_hooks,
             args.steps, replays, eager_c, big, eager_p, values, plans, reinst, ck.runs,
             ck.mismatches, recompiles, bare, t_compile), flush=True)
    print(PREFIX + "%s a+d: %s" % (mode, "PASS" if ok else "FAIL (%d failures)" % len(ck.fails)),
          flush=True)
    for g in graphs.values():
        g.reset()
    del graphs, outs, compiled
    torch._dynamo.reset()
    return ck.fails


def _capture_sizes(fwd, xs, sizes, pool):
    """The engine's way: per size, warm-up on a side stream, then one patched
    torch.cuda.CUDAGraph captured into the shared pool."""
    graphs = {}
    for bs in sizes:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fwd(xs[bs])
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            fwd(xs[bs])
        graphs[bs] = g
    return graphs


def leg_s(args, mode, agent, rng):
    """(s) never a silent loss (issue 23 item 3) beside graphs with producers: the model
    compiled (fullgraph, static shapes) at the smallest size before attach(), then attached
    and captured at the largest (a recompile, with the hooks) and the smallest (the code
    compiled before attach(): no producer).  attach() warns, the next step() raises
    CaptureError once; after torch.compiler.reset() and a new capture every graph has
    producers, no step is refused, and the replays follow the step's set."""
    name = "%s s" % mode
    torch._dynamo.reset()
    model = Model(args.layers, args.hidden).cuda().eval()
    H, small, big = args.hidden, min(args.sizes), max(args.sizes)
    xs = {n: torch.rand(n, H, device="cuda") * 2 - 1 for n in (small, big)}
    fwd = torch.compile(model.forward, fullgraph=True, dynamic=False)
    fwd(xs[small])  # compiled before the hooks exist
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        att = agent.attach(modules_of(model), max_tokens=big, width=H, dtype=torch.float32)
    ck = Checker(name, agent, att, args.layers)
    if not any("already compiled code" in str(w.message) for w in caught):
        ck.fail("attach() did not warn about the code compiled before it")
    refused = steps = 0
    try:
        with gtt.patch(agent):
            graphs = _capture_sizes(fwd, xs, (big, small), torch.cuda.graph_pool_handle())
            have = {bs: agent.has_producers(g.raw_cuda_graph()) for bs, g in graphs.items()}
            if have != {big: True, small: False}:
                ck.fail("producers per graph %s, want bs %d with and bs %d without"
                        % (have, big, small))
            try:
                agent.step()
                ck.fail("step() ran although graph bs %d was captured without producers from "
                        "code compiled before attach()" % small)
            except graphtoggle.CaptureError as e:
                refused += 1
                if "compiled before hooks were attached" not in str(e):
                    ck.fail("step() refused with another reason: %s" % e)
            agent.step()  # once: the engine may go on
            for g in graphs.values():
                g.reset()
            del graphs
            torch._dynamo.reset()  # the fix the error names; the model compiled again
            fwd = torch.compile(model.forward, fullgraph=True, dynamic=False)
            # a new pool: the graphs that used the first are freed, and torch's allocator
            # refuses a pool handle whose last graph is gone (use_count assertion)
            graphs = _capture_sizes(fwd, xs, (big, small), torch.cuda.graph_pool_handle())
            for bs, g in graphs.items():
                st = agent.graph_status(g.raw_cuda_graph())
                if not st["bound"] or st["hooks_covered"] != len(ck.hooks):
                    ck.fail("after reset: graph bs %d bound %s, %d hooks" % (
                        bs, st["bound"], st["hooks_covered"]))
            for _ in range(40):
                agent.set_enabled(random_set(rng, ck.hooks))
                eff = agent.step()  # raises if anything is still armed
                bs = rng.choice((big, small))
                ck.reset()
                graphs[bs].replay()
                ck.check("replay bs %d after reset" % bs, bs, eff)
                steps += 1
            for g in graphs.values():
                g.reset()
            del graphs
    finally:
        att.detach()
        torch._dynamo.reset()
    print(PREFIX + "%s s: code compiled before attach(): warned, step refused %d time(s); after "
          "torch.compiler.reset(): %d steps, %d checked, %d mismatches"
          % (mode, refused, steps, ck.runs, ck.mismatches), flush=True)
    print(PREFIX + "%s s: %s" % (mode, "PASS" if not ck.fails else "FAIL (%d failures)"
                                 % len(ck.fails)), flush=True)
    return ck.fails


def _compile_c(args, fn):
    """Leg c's compile: torch.compile(mode=...) (reduce-overhead, max-autotune: both record
    CUDA Graph Trees), or backend="cudagraphs" (the trees without inductor)."""
    dynamic = None if args.dynamic else False
    if args.c_compile == "cudagraphs":
        return torch.compile(fn, backend="cudagraphs", fullgraph=True, dynamic=dynamic)
    return torch.compile(fn, mode=args.c_compile, fullgraph=True, dynamic=dynamic)


def leg_c(args, mode, agent, model, att, rng):
    """(c) torch.compile(mode="reduce-overhead") (or --c-compile's): CUDA Graph Trees under
    the patch."""
    name = "%s c" % mode
    ck = Checker(name, agent, att, args.layers)
    sizes = list(args.sizes)
    H = args.hidden
    n_hooks = len(ck.hooks)
    agent.set_enabled("none")
    rec0 = att.captures()["with_producers"]
    launches0 = agent.stats()["launches"]
    skips0 = dict(torch._dynamo.utils.counters["inductor"])
    frees = 0
    t0 = time.perf_counter()
    with gtt.patch(agent):
        cc = _compile_c(args, model.forward)
        calls = 0
        live_max = 0
        for step in range(args.steps_c):
            if step == args.steps_c // 2:
                # free every graph: the trees and dynamo's cache (the next calls recompile,
                # warm up and record again)
                live = [s["graph"] for s in agent.graphs() if not s["stale"]]
                torch._dynamo.reset()
                import gc
                gc.collect()
                still = [g for g in live if not agent.graph_status(g)["stale"]]
                if still:
                    ck.fail("%d of %d graphs not forgotten when CUDA Graph Trees freed them"
                            % (len(still), len(live)))
                frees += len(live)
                cc = _compile_c(args, model.forward)
            if rng.random() < 0.25:
                agent.set_enabled(random_set(rng, ck.hooks))
            eff = agent.step()
            bs = rng.choice(sizes)
            x = dyn(args, torch.rand(bs, H, device="cuda") * 2 - 1)
            ck.reset()
            torch.compiler.cudagraph_mark_step_begin()
            cc(x)
            ck.check("%s call bs %d" % (args.c_compile, bs), bs, eff)
            calls += 1
            # graphs with producers (device mode also registers, by its planner, graphs
            # without: CUDA Graph Trees' empty pool keeper)
            lst = [s for s in agent.graphs() if not s["stale"] and s["nodes"]]
            live_max = max(live_max, len(lst))
            for s in lst:
                if not s["bound"] or s["nodes"] != n_hooks:
                    ck.fail("a recorded graph: bound %s, %d producer nodes (want %d)"
                            % (s["bound"], s["nodes"], n_hooks))
                    break
                if mode == "device" and s["mode"] != "device":
                    ck.fail("a recorded graph runs in %s mode (%s)" % (s["mode"], s["note"]))
                    break
        recorded = att.captures()["with_producers"] - rec0
        replays = agent.stats()["launches"] - launches0
        live = [s["graph"] for s in agent.graphs() if not s["stale"]]
        torch._dynamo.reset()  # frees the trees: every graph forgotten
        import gc
        gc.collect()
        still = [g for g in live if not agent.graph_status(g)["stale"]]
        if still:
            ck.fail("%d graphs not forgotten at the end" % len(still))
        frees += len(live)
        if recorded < 2 * len(set(sizes)):
            skips = {k: v - skips0.get(k, 0) for k, v in
                     torch._dynamo.utils.counters["inductor"].items() if "skip" in k}
            ck.fail("%d graphs recorded, expected at least %d (each size, twice); inductor's "
                    "cudagraph skips: %s" % (recorded, 2 * len(set(sizes)), skips))
        if replays < args.steps_c // 2:
            ck.fail("only %d guarded replays in %d calls" % (replays, calls))
        an = agent.anomalies()
        if an["driver_errors"]:
            ck.fail("%d driver errors" % an["driver_errors"])
    ok = not ck.fails
    print(PREFIX + "%s c (%s): %d calls (bs %s): %d checked (warm-up, recording and replay runs), "
          "%d mismatches; %d graphs recorded and bound (up to %d live), %d guarded replays, "
          "%d forgotten when freed (mid-run and at the end), re-recorded after the free; "
          "%.1f s" % (mode, args.c_compile, calls, ",".join(map(str, sizes)), ck.runs,
                      ck.mismatches, recorded, live_max, replays, frees,
                      time.perf_counter() - t0), flush=True)
    print(PREFIX + "%s c: %s" % (mode, "PASS" if ok else "FAIL (%d failures)" % len(ck.fails)),
          flush=True)
    return ck.fails


def run_mode(args, mode, legs):
    rng = random.Random(args.seed + (mode == "device"))
    torch.manual_seed(args.seed)
    hooks = {t: args.layers for t in TYPES}
    agent = graphtoggle.Agent("compile-" + mode, hooks=hooks, mode=mode,
                              strict=(mode == "device"))
    fails = []
    try:
        if mode == "device" and agent.mode != "device":
            return ["device mode unavailable: the agent runs in %s" % agent.mode]
        with torch.no_grad():
            # one model per leg, hooks attached before it is compiled
            for leg in legs:
                if leg == "s":  # compiles before it attaches
                    try:
                        fails += leg_s(args, mode, agent, rng)
                    except Exception as e:
                        traceback.print_exc()
                        print(PREFIX + "%s s: FAIL (exception: %s)" % (mode, e), flush=True)
                        fails.append("%s s: %s" % (mode, e))
                        gtt.unpatch()
                    continue
                model = Model(args.layers, args.hidden).cuda().eval()
                att = agent.attach(modules_of(model), max_tokens=max(args.eager_tokens,
                                                                     max(args.sizes)),
                                   width=args.hidden, dtype=torch.float32)
                try:
                    fn = leg_a_d if leg == "a" else leg_c
                    fails += fn(args, mode, agent, model, att, rng)
                except Exception as e:
                    traceback.print_exc()
                    print(PREFIX + "%s %s: FAIL (exception: %s)" % (mode, leg, e), flush=True)
                    fails.append("%s %s: %s" % (mode, leg, e))
                    gtt.unpatch()
                    torch._dynamo.reset()
                finally:
                    att.detach()
        torch.cuda.synchronize()
    finally:
        agent.close()
    return fails


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="lazy,device")
    ap.add_argument("--legs", default="a,c,s", help="a (with d), c and s")
    ap.add_argument("--steps", type=int, default=600, help="steps of leg a+d per mode")
    ap.add_argument("--steps-c", type=int, default=300, help="calls of leg c per mode")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--sizes", default="1,8,32", help="batch sizes with graphs")
    ap.add_argument("--eager-tokens", type=int, default=48,
                    help="the compiled model's eager runs (above the largest graph)")
    ap.add_argument("--c-compile", default="reduce-overhead",
                    choices=("reduce-overhead", "max-autotune", "cudagraphs"),
                    help="leg c: torch.compile(mode=reduce-overhead or max-autotune), or "
                    "backend=cudagraphs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dynamic", action="store_true",
                    help="dynamic token count, as vLLM compiles: torch.compile(dynamic=None) "
                    "with torch._dynamo.mark_dynamic(x, 0) on every input of more than one "
                    "token (one compiled graph for those sizes; graphs still per size)")
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    legs = [l for l in args.legs.split(",") if l]
    d = torch._dynamo.config
    for k in ("recompile_limit", "cache_size_limit"):
        if hasattr(d, k):
            setattr(d, k, 64)
    print(PREFIX + "torch %s, %s, graphtoggle %s (%s); %d layers, hidden %d, %d hooks; graphs "
          "for bs %s, eager %d tokens; %s shapes" % (
              torch.__version__, torch.cuda.get_device_name(), graphtoggle.__version__,
              graphtoggle.library_path(), args.layers, args.hidden, 3 * args.layers,
              args.sizes, args.eager_tokens, "dynamic" if args.dynamic else "static"),
          flush=True)
    t0 = time.perf_counter()
    fails = []
    for mode in modes:
        try:
            fails += run_mode(args, mode, legs)
        except Exception as e:
            traceback.print_exc()
            fails.append("%s: %s" % (mode, e))
    if fails:
        print(PREFIX + "FAIL (%d failures: %s)" % (len(fails), "; ".join(fails[:3])))
        return 1
    print(PREFIX + "PASS (modes %s, legs %s: 0 mismatches; %.0f s)" % (
        ",".join(modes), ", ".join("a+d" if l == "a" else l for l in legs),
        time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
