"""piecewise_cases.py - graphtoggle.piecewise on real torch, on the CPU (no GPU needed), run by
test_piecewise.py in a python that has torch (the test suite itself runs on the fake torch).

torch.compile with the piecewise backend on a stack of layers whose attention is a
registered op that writes its output into a tensor the piece before it allocates (as
vLLM's unified_attention_with_output does), with a stand-in producer op (a registered op
mutating a monitor buffer, the shape of graphtoggle's tap op) inside the pieces.  CUDA
graphs are replaced by CpuRuntime: a "graph" remembers the piece's call and its output
tensors, and a replay runs the call again and writes the results into those tensors, so
the addresses the next piece reads are the captured ones, as on a GPU.

Prints one JSON line per case: {"case": name, "ok": bool, "detail": text}.
Usage: python piecewise_cases.py [case ...]
"""

import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

assert not getattr(torch, "FAKE", False), "piecewise_cases.py needs the real torch"

import graphtoggle  # noqa: E402,F401
from graphtoggle import piecewise  # noqa: E402
from graphtoggle.errors import InvalidArgumentError  # noqa: E402

torch._dynamo.config.cache_size_limit = 64
torch._dynamo.config.recompile_limit = 64 if hasattr(
    torch._dynamo.config, "recompile_limit") else 64

CALLS = {"attention": 0, "tap": []}


class CpuRuntime:
    """CUDA graphs' semantics for the tests, on the CPU (see the module docstring)."""

    def __init__(self):
        self.cap = None  # the label of the capture in progress
        self.pools = []
        self.outer = False  # an engine's FULL capture around the forward

    def pool_handle(self):
        return ("pool", len(self.pools))

    def capturing(self):
        return self.cap is not None or self.outer

    def capture(self, pool, run):
        self.pools.append(pool)
        self.cap = len(self.pools)
        try:
            out = run()
        finally:
            self.cap = None
        return CpuGraph(run, out), out

    def replay(self, graph):
        graph.replay()


class CpuGraph:
    def __init__(self, run, out):
        self.run, self.out = run, out

    def replay(self):
        new = self.run()
        for o, n in zip(torch.utils._pytree.tree_leaves(self.out),
                        torch.utils._pytree.tree_leaves(new)):
            if isinstance(o, torch.Tensor) and o is not n:
                o.copy_(n)


RT = CpuRuntime()


@torch.library.custom_op("gtpw_test::attention", mutates_args=("out",))
def attention(q: torch.Tensor, kv: torch.Tensor, out: torch.Tensor) -> None:
    CALLS["attention"] += 1
    out.copy_(torch.tanh(q + kv))


@attention.register_fake
def _(q, kv, out):
    return None


@torch.library.custom_op("gtpw_test::tap", mutates_args=("buf",))
def tap(x: torch.Tensor, buf: torch.Tensor, hook: int) -> None:
    CALLS["tap"].append((hook, RT.cap))
    buf.copy_(x)


@tap.register_fake
def _(x, buf, hook):
    return None


@torch.library.custom_op("gtpw_test::attention_new", mutates_args=())
def attention_new(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """A splitting op that returns a new tensor (not vLLM's way): the next piece's input is
    at a new address at every step."""
    CALLS["attention"] += 1
    return torch.tanh(q + kv)


@attention_new.register_fake
def _(q, kv):
    return torch.empty_like(q)


SIZES = (4, 2, 1)
H = 16


class Layer(torch.nn.Module):
    def __init__(self, i, new_tensor_attention=False):
        super().__init__()
        self.i = i
        self.q = torch.nn.Linear(H, H)
        self.mlp = torch.nn.Linear(H, H)
        self.new = new_tensor_attention

    def forward(self, x, mon):
        q = self.q(x)
        if self.new:
            a = torch.ops.gtpw_test.attention_new(q, x)
        else:
            a = torch.empty_like(q)
            torch.ops.gtpw_test.attention(q, x, a)
        if mon is not None:
            torch.ops.gtpw_test.tap(a, mon[2 * self.i], 2 * self.i)
        h = x + a
        y = torch.tanh(self.mlp(h))
        if mon is not None:
            torch.ops.gtpw_test.tap(y, mon[2 * self.i + 1], 2 * self.i + 1)
        return h + y


class Model(torch.nn.Module):
    def __init__(self, layers=3, taps=True, new_tensor_attention=False, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = torch.nn.ModuleList(Layer(i, new_tensor_attention) for i in range(layers))
        self.taps = taps
        # one monitor buffer per hook and batch size, made before any compile or capture
        self.mon = {bs: torch.zeros(2 * layers, bs, H) for bs in SIZES}

    def forward(self, x):
        mon = self.mon[x.shape[0]] if self.taps else None
        for layer in self.layers:
            x = layer(x, mon)
        return x


def compiled(model, dynamic=False, **kw):
    kw.setdefault("runtime", RT)
    kw.setdefault("compiler", "eager")
    b = piecewise.Backend(splitting_ops=kw.pop("ops", ["gtpw_test::attention"]), **kw)
    torch._dynamo.reset()
    return b, torch.compile(model, backend=b, fullgraph=True, dynamic=dynamic)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def close(a, b):
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


# ---- cases ------------------------------------------------------------------------------------


def case_split_at_the_op():
    """Every attention call is a split submodule of its own; the taps stay in the pieces."""
    L = 3
    b, fwd = compiled(Model(L))
    with torch.inference_mode(), b.forward_mode("none"):
        fwd(torch.randn(4, H))
    check(b.graphs_compiled == 1, "one dynamo graph")
    check(len(b.splits) == L and len(b.pieces) == L + 1,
          "%d splits, %d pieces for %d layers" % (len(b.splits), len(b.pieces), L))
    for item in b.splits:
        targets = [n.target for n in item.module.graph.nodes if n.op == "call_function"]
        check(len(targets) == 1 and "attention" in str(targets[0]), "split holds %s" % targets)
    taps = sum(1 for p in b.pieces for n in p.fn.graph.nodes
               if n.op == "call_function" and "tap" in str(n.target))
    check(taps == 2 * L, "the pieces hold %d taps" % taps)
    check([p.position for p in b.pieces] == list(range(L + 1)), "positions")
    # the monitor buffer the taps write is an input each piece with a tap writes to
    check(all(p.mutated for p in b.pieces[1:]) and not b.pieces[0].mutated,
          "written inputs: %s" % [sorted(p.mutated) for p in b.pieces])


def case_inductor_pieces_match_eager():
    """Pieces compiled by inductor (dynamic=False: one dynamo graph per batch size) compute
    what the eager model computes, taps included."""
    m = Model(2)
    ref = Model(2)
    b, fwd = compiled(m, compiler="inductor")
    with torch.inference_mode():
        for bs in SIZES:
            x = torch.randn(bs, H)
            with b.forward_mode("none"):
                got = fwd(x)
            want = ref(x)
            check(close(got, want), "bs %d: output differs from eager" % bs)
            check(close(m.mon[bs], ref.mon[bs]), "bs %d: taps wrote other values" % bs)
    check(b.graphs_compiled == len(SIZES), "%d dynamo graphs" % b.graphs_compiled)
    check(len(b.pieces) == 3 * len(SIZES), "%d pieces" % len(b.pieces))
    check(b.captures == 0, "mode none captured")


def case_capture_each_piece_per_size_then_replay():
    L = 3
    m = Model(L)
    ref = Model(L)
    b, fwd = compiled(m)
    xbuf = torch.zeros(max(SIZES), H)  # the engine's static input
    with torch.inference_mode():
        for bs in SIZES:
            with b.forward_mode("none"):
                fwd(xbuf[:bs])  # warm-up
        pools0 = len(RT.pools)
        for bs in SIZES:  # largest first, as engines capture
            fwd(xbuf[:bs])
        check(b.captures == (L + 1) * len(SIZES), "%d captures" % b.captures)
        check(len(set(RT.pools[pools0:])) == 1, "pieces captured into %d pools"
              % len(set(RT.pools[pools0:])))
        check(len(b.graphs()) == (L + 1) * len(SIZES), "graphs()")
        taps = [c for c in CALLS["tap"] if c[1] is not None]
        check(len(taps) >= 2 * L * len(SIZES), "taps ran inside the captures")
        for step in range(12):
            bs = SIZES[step % len(SIZES)]
            x = torch.randn(bs, H)
            xbuf[:bs].copy_(x)
            n_attn = CALLS["attention"]
            replays = b.replays()
            out = fwd(xbuf[:bs])
            check(b.replays() - replays == L + 1, "step %d: %d replays" % (step, b.replays() - replays))
            check(CALLS["attention"] - n_attn == L, "attention ran eagerly %d times"
                  % (CALLS["attention"] - n_attn))
            check(close(out, ref(x)), "step %d bs %d: output differs" % (step, bs))
            check(close(m.mon[bs], ref.mon[bs]), "step %d: monitor buffers differ" % step)
        check(b.captures == (L + 1) * len(SIZES), "replays captured again")
        check(b.input_copies == 0, "static inputs were copied")


def case_changed_input_is_copied_or_refused():
    m = Model(2)
    ref = Model(2)
    b, fwd = compiled(m)
    with torch.inference_mode():
        xbuf = torch.zeros(2, H)
        with b.forward_mode("none"):
            fwd(xbuf)
        fwd(xbuf)  # capture
        x = torch.randn(2, H)  # not the captured tensor
        out = fwd(x)
        check(b.input_copies >= 1, "no input copy")
        check(close(out, ref(x)), "output after the copy differs")
        b.check_inputs = "raise"
        try:
            fwd(torch.randn(2, H))
        except InvalidArgumentError as e:
            check("not the tensor it was captured with" in str(e), str(e))
        else:
            raise AssertionError("check_inputs='raise' accepted a new input")
        b.check_inputs = "copy"
        # an input the piece writes to (a monitor buffer) at another address: a copy would
        # lose the writes (dynamo recompiles when the model's own buffer is replaced, so the
        # piece is called directly, as a caller passing other tensors would)
        p = next(p for p in b.pieces if p.mutated and () in p.entries)
        args = list(p.entries[()].static)
        i = min(p.mutated)
        args[i] = args[i].clone()
        try:
            p(*args)
        except InvalidArgumentError as e:
            check("writes to it" in str(e), str(e))
        else:
            raise AssertionError("a changed written-to input was accepted")


def case_new_tensor_splitting_op_is_copied():
    """A splitting op that returns a new tensor: the next piece's input is copied into the
    captured one at each replay, so the output is still right."""
    m = Model(2, new_tensor_attention=True)
    ref = Model(2, new_tensor_attention=True)
    b, fwd = compiled(m, ops=["gtpw_test::attention_new"])
    with torch.inference_mode():
        xbuf = torch.zeros(4, H)
        with b.forward_mode("none"):
            fwd(xbuf)
        fwd(xbuf)
        copies = b.input_copies
        for _ in range(3):
            x = torch.randn(4, H)
            xbuf.copy_(x)
            check(close(fwd(xbuf), ref(x)), "output differs")
        check(b.input_copies - copies >= 3 * 2, "%d copies" % (b.input_copies - copies))


def case_full_and_none_modes_run_pieces_directly():
    m = Model(2)
    b, fwd = compiled(m)
    with torch.inference_mode():
        x = torch.zeros(4, H)
        with b.forward_mode("none"):
            fwd(x)
        for mode in ("none", "full"):
            with b.forward_mode(mode):
                fwd(x)
        check(b.captures == 0, "mode none/full captured")
        RT.outer = True  # an engine's FULL capture around the forward
        try:
            fwd(x)
        finally:
            RT.outer = False
        check(b.captures == 0, "captured inside an outer capture")
        fwd(x)
        check(b.captures == 3, "piecewise after: %d captures" % b.captures)
        check(b.mode == "piecewise", "mode not restored")
    try:
        b.set_mode("bogus")
    except InvalidArgumentError:
        pass
    else:
        raise AssertionError("a bad mode was accepted")


def case_capture_closed_raises():
    m = Model(1)
    b, fwd = compiled(m)
    with torch.inference_mode():
        with b.forward_mode("none"):
            fwd(torch.zeros(4, H))
        b.capture_enabled = False
        try:
            fwd(torch.zeros(4, H))
        except InvalidArgumentError as e:
            check("capture is closed" in str(e), str(e))
        else:
            raise AssertionError("captured with capture_enabled=False")


def case_dynamic_shapes_one_compile_graphs_per_size():
    L = 2
    m = Model(L, taps=False)
    ref = Model(L, taps=False)
    b, fwd = compiled(m, dynamic=True, compiler="inductor")
    xbuf = torch.zeros(9, H)  # every call a proper slice (a whole-buffer view guards apart)
    with torch.inference_mode():
        for bs in (8, 5, 3):
            with b.forward_mode("none"):
                fwd(xbuf[:bs])
        check(b.graphs_compiled == 1, "%d dynamo graphs under dynamic shapes" % b.graphs_compiled)
        check(all(p.sym_idx for p in b.pieces), "pieces without a size argument")
        for bs in (8, 5, 3):
            fwd(xbuf[:bs])
        check(b.captures == (L + 1) * 3, "%d captures" % b.captures)
        for bs in (3, 8, 5):
            x = torch.randn(bs, H)
            xbuf[:bs].copy_(x)
            check(close(fwd(xbuf[:bs]), ref(x)), "bs %d differs" % bs)
        check(b.captures == (L + 1) * 3, "captured again")


def case_no_splitting_ops_one_piece():
    b, fwd = compiled(Model(2), ops=[])
    with torch.inference_mode(), b.forward_mode("none"):
        fwd(torch.zeros(1, H))
    check(len(b.pieces) == 1 and not b.splits, "pieces %d splits %d" % (len(b.pieces),
                                                                       len(b.splits)))


def case_bad_splitting_ops_are_named():
    for bad, want in (("gtpw_test::nosuch", "not registered"), ("attention", "namespace::name"),
                      (42, "an op, an op packet")):
        try:
            piecewise.Backend(splitting_ops=[bad], runtime=RT)
        except InvalidArgumentError as e:
            check(want in str(e), "%r: %s" % (bad, e))
        else:
            raise AssertionError("%r accepted" % (bad,))
    ops = piecewise.resolve_ops(["gtpw_test::attention", torch.ops.gtpw_test.tap,
                                 torch.ops.gtpw_test.attention_new.default])
    check(torch.ops.gtpw_test.attention.default in ops and torch.ops.gtpw_test.tap.default in ops,
          "resolve_ops: %s" % ops)
    for kw, want in ((dict(check_inputs="maybe"), "check_inputs"),
                     (dict(compiler="tvm"), "compiler")):
        try:
            piecewise.Backend(runtime=RT, **kw)
        except InvalidArgumentError as e:
            check(want in str(e), str(e))
        else:
            raise AssertionError("%r accepted" % (kw,))


def case_reset_captures_again():
    b, fwd = compiled(Model(1))
    with torch.inference_mode():
        x = torch.zeros(2, H)
        with b.forward_mode("none"):
            fwd(x)
        fwd(x)
        b.reset()
        check(not b.graphs(), "graphs after reset")
        fwd(x)
        check(b.captures == 4, "%d captures" % b.captures)


CASES = {k[len("case_"):]: v for k, v in sorted(globals().items()) if k.startswith("case_")}


def main(argv):
    names = argv or list(CASES)
    for name in names:
        try:
            CASES[name]()
            rec = {"case": name, "ok": True, "detail": ""}
        except Exception:
            rec = {"case": name, "ok": False, "detail": traceback.format_exc()[-3000:]}
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
