"""torch_compile_host.py - issue 23's host-side costs under torch.compile, on any machine
with torch (the CPU is enough: no graph is captured).

  guards  dynamo's guard check of the compiled code (the cache entry's guard_manager.check,
          what every call of compiled code runs first, CUDA Graph Trees' calls included)
          and one call of the compiled model, for three copies of one model:
            floor    no hooks;
            closure  the hooks of graphtoggle before issue 23's guard fix, rebuilt here:
                     the op object held in the hook's closure (every hooked module then
                     falls off dynamo's recursive dict-tag fast path);
            attach   graphtoggle.torch.attach() as it is (the op through a module global).
  op      the eager cost of one call of the producer op, its hook disabled and enabled:
            direct     graphtoggle.ops.tap (attach()'s hooks outside torch.compile);
            dispatch   torch.ops.graphtoggle.tap.default (compiled code run without a
                       graph: inductor's and aot's code call the op through the dispatcher);
            noop       an op of the same schema whose Python kernel does nothing,
                       registered the same way: the dispatcher's own floor.

Every figure is the median of --reps rounds, the legs interleaved in each round (A B C A B
C ...), so a drift of the machine's speed lands on every leg alike; compare legs within one
run.  Usage: python bench/torch_compile_host.py [--backend eager|aot_eager|inductor]
[--legs guards,op] (GRAPHTOGGLE_LIB: the libtoggle to load; default build/libtoggle.so).
"""

import argparse
import copy
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
os.environ.setdefault("GRAPHTOGGLE_LIB", os.path.join(HERE, "..", "build", "libtoggle.so"))

try:
    import torch
except ImportError:
    print("torch_compile_host: SKIPPED: python3 cannot import torch")
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402

TYPES = ("resid_post", "attn_out", "mlp_out")
warnings.filterwarnings("ignore")


sys.path.insert(0, os.path.join(HERE, "..", "python", "tests", "gpu"))
from tc_model import Model, modules_of  # noqa: E402  (torch_compile_bench.py's model)


def closure_hooks(att, model):
    """Replace att's hooks by the pre-fix form (the op object in the closure), same
    buffers and ids."""
    att.detach()
    op = torch.ops.graphtoggle.tap
    tap = gtt._ops().tap
    compiling = torch.compiler.is_compiling
    handles = []
    for t, mods in modules_of(model).items():
        for layer, mod in enumerate(mods):
            fn = _closed(op, tap, compiling, att.buffer(t, layer), att.hook_ids[(t, layer)])
            handles.append(mod.register_forward_hook(fn))
    return handles


def _closed(op, tap, compiling, buf, hid):
    """The hook as attach() made it before the fix: op, buf, hid, compiling and select
    in closure cells."""
    select = None

    def fn(module, args, output):
        x = select(output) if select is not None else (
            output[0] if isinstance(output, (tuple, list)) else output)
        if compiling():
            op(x, buf, hid)
            return None
        tap(x, buf, hid)
        return None
    return fn


def sample_us(fn, n, reps_out, key):
    """One round: the mean us per call of n calls, appended to reps_out[key]."""
    t = time.perf_counter()
    for _ in range(n):
        fn()
    reps_out[key].append((time.perf_counter() - t) / n * 1e6)


# one function (one code object) per model, the model a module global: dynamo keeps compiled
# code per code object, and guards on globals need no frame to check them (guard_manager.check
# is given the locals {"x": x})
FLOOR = CLOSURE = ATTACH = None


def fwd_floor(x):
    return FLOOR(x)


def fwd_closure(x):
    return CLOSURE(x)


def fwd_attach(x):
    return ATTACH(x)


def bench_guards(args, agent):
    torch.manual_seed(0)
    floor = Model(args.layers, args.hidden, args.inter).eval()
    closure, attach = copy.deepcopy(floor), copy.deepcopy(floor)
    att_c = agent.attach(modules_of(closure), max_tokens=args.tokens, width=args.hidden,
                         device="cpu")
    closure_hooks(att_c, closure)
    att_a = agent.attach(modules_of(attach), max_tokens=args.tokens, width=args.hidden,
                         device="cpu")
    agent.set_enabled("none")
    agent.step()
    x = torch.randn(args.tokens, args.hidden)

    global FLOOR, CLOSURE, ATTACH
    FLOOR, CLOSURE, ATTACH = floor, closure, attach
    legs = {}
    for name, f in (("floor", fwd_floor), ("closure", fwd_closure), ("attach", fwd_attach)):
        c = torch.compile(f, fullgraph=True, dynamic=False, backend=args.backend)
        c(x)
        c(x)
        entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(f.__code__)
        if len(entries) != 1:
            raise SystemExit("%s: %d compiled entries, expected 1" % (name, len(entries)))
        gm = entries[0].guard_manager
        text = str(gm)
        legs[name] = (c, gm, text.count("\n"), text.count("tag_safe=(True, True)"))
    loc = {"x": x}
    for name, (_, gm, _, _) in legs.items():
        if not gm.check(loc):
            raise SystemExit("%s: the guards fail on the input they were made for" % name)
    g, call = {k: [] for k in legs}, {k: [] for k in legs}
    for _ in range(args.reps):
        for name, (c, gm, _, _) in legs.items():
            sample_us(lambda: gm.check(loc), 500, g, name)
            sample_us(lambda: c(x), 50, call, name)
    st = torch._dynamo.utils.counters["stats"]
    print("guards: backend %s, %d layers, hidden %d, %d hooks, %d tokens; medians of %d rounds"
          % (args.backend, args.layers, args.hidden, 3 * args.layers, args.tokens, args.reps))
    fg, fc = statistics.median(g["floor"]), statistics.median(call["floor"])
    for name, (_, _, lines, roots) in legs.items():
        mg, mc = statistics.median(g[name]), statistics.median(call[name])
        print("guards: %-8s guard check %7.2f us (%.2fx floor, +%.2f)  compiled call %8.1f us "
              "(+%.1f)  guard tree %d lines, %d tag-safe roots"
              % (name, mg, mg / fg, mg - fg, mc, mc - fc, lines, roots))
    print("guards: recompiles: %d unique graphs for 3 models" % st["unique_graphs"])
    att_a.detach()


def bench_op(args, agent):
    lib = torch.library.Library("graphtoggle_bench", "DEF")
    lib.define("noop(Tensor x, Tensor(a!) buf, int hook) -> ()")
    lib.impl("noop", lambda x, buf, hook: None, "CompositeExplicitAutograd")
    noop = torch.ops.graphtoggle_bench.noop.default
    ops = gtt._ops()
    op = torch.ops.graphtoggle.tap.default
    hid = gtt.hook_id(agent, ("mlp_out", 0))
    x = torch.randn(args.tokens, args.hidden)
    buf = torch.empty(args.tokens, args.hidden)
    print("op: per call, medians of %d rounds of 5000 calls, x %s float32 on the CPU"
          % (args.reps, tuple(x.shape)))
    for spec, what in (("none", "disabled"), ("mlp_out:0", "enabled")):
        agent.set_enabled(spec)
        agent.step()
        r = {k: [] for k in ("direct", "dispatch", "noop")}
        for _ in range(args.reps):
            sample_us(lambda: ops.tap(x, buf, hid), 5000, r, "direct")
            sample_us(lambda: op(x, buf, hid), 5000, r, "dispatch")
            sample_us(lambda: noop(x, buf, hid), 5000, r, "noop")
        m = {k: statistics.median(v) for k, v in r.items()}
        print("op: hook %-8s direct %.2f us, through the dispatcher %.2f us (the dispatcher's "
              "floor, a no-op kernel: %.2f us)" % (what, m["direct"], m["dispatch"], m["noop"]))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="eager")
    ap.add_argument("--legs", default="guards,op")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--inter", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    print("torch_compile_host: torch %s, graphtoggle %s, python %s"
          % (torch.__version__, graphtoggle.__version__, sys.version.split()[0]))
    with torch.no_grad(), graphtoggle.Agent(
            "compile-host", hooks={t: args.layers for t in TYPES}, backend="sim") as agent:
        if "guards" in args.legs:
            bench_guards(args, agent)
        if "op" in args.legs:
            bench_op(args, agent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
