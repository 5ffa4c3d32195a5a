"""graphtoggle.piecewise: a torch.compile backend that compiles and captures a model piecewise,
the way vLLM's VLLM_COMPILE mode does for its PIECEWISE and FULL_AND_PIECEWISE cudagraph
modes.  It is graphtoggle's own code, not vLLM's. It was written after reading vLLM's
split_graph, PiecewiseCompileInterpreter, PiecewiseBackend and CUDAGraphWrapper
(docs/python.md, "torch.compile piecewise and vLLM", says which commits).

    backend = graphtoggle.piecewise.Backend(splitting_ops=["mylib::attention"])
    fwd = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
    with backend.forward_mode("none"):
        fwd(x[:bs])                 # warm-up: compiled pieces, no graphs
    fwd(x[:bs])                     # "piecewise" (the default): captures each piece for
    fwd(x[:bs])                     # this shape on first use, replays them afterwards

What it does:
 * splits the FX graph that dynamo gives the backend at every call of a splitting op
   (each splitting op becomes a submodule of its own, run eagerly between the pieces),
   keeping the original node order (the graph has mutations);
 * compiles every other piece with inductor (or `compiler=`), with the fake inputs that
   dynamo traced, once per backend call: with dynamic=False dynamo calls the backend once
   per batch size, with dynamic shapes once for all sizes;
 * at run time, in mode "piecewise", captures each piece the first time it meets a shape
   (one torch.cuda.CUDAGraph per piece and shape, created through torch.cuda.CUDAGraph,
   which graphtoggle.torch.patch covers, captured with torch.cuda.graph on the current
   stream into one memory pool that all pieces and shapes share) and replays it after
   that; the splitting ops run eagerly between the replays;
 * in mode "none" or "full" (an engine's FULL graph around the whole forward) it runs the
   compiled pieces directly; a piece with no graph for the shape yet also runs directly,
   instead of capturing, when the current stream is already capturing.  Set mode "full"
   around a FULL capture: a piece that has a graph would replay it inside the capture.

The splitting ops must write their results into tensors the pieces allocate, as vLLM's
unified_attention_with_output does: a piece's outputs stay at their captured addresses,
but a tensor the splitting op returns is new at every step. Inputs whose address
changed since the capture are copied into the captured tensor before the replay
(`check_inputs="copy"`). An input the piece writes to is refused with a clear error,
because a copy would lose the writes. Parameters are never checked.
"""

import contextlib

from .errors import InvalidArgumentError

MODES = ("none", "piecewise", "full")
_CHECKS = ("copy", "raise", "off")


def _torch():
    import torch
    return torch


# ---- splitting ------------------------------------------------------------------------


def resolve_ops(ops):
    """The OpOverloads that ops names: each an OpOverload, an OpOverloadPacket (all its
    overloads), or a string "namespace::name" or "namespace::name.overload" (vLLM's
    splitting_ops spelling).  An op that is not registered raises, naming it."""
    torch = _torch()
    out = set()
    for op in ops or ():
        if isinstance(op, str):
            if "::" not in op:
                raise InvalidArgumentError(
                    "splitting op %r: write it as 'namespace::name' (e.g. 'vllm::"
                    "unified_attention_with_output')" % (op,))
            ns, name = op.split("::", 1)
            name, _, overload = name.partition(".")
            try:
                packet = getattr(getattr(torch.ops, ns), name)
            except (AttributeError, RuntimeError):
                raise InvalidArgumentError(
                    "splitting op %r is not registered with torch (import the module that "
                    "defines it before compiling)" % (op,)) from None
            if overload:
                out.add(getattr(packet, overload))
            else:
                out.update(getattr(packet, o) for o in packet.overloads())
        elif isinstance(op, torch._ops.OpOverloadPacket):
            out.update(getattr(op, o) for o in op.overloads())
        elif isinstance(op, torch._ops.OpOverload):
            out.add(op)
        else:
            raise InvalidArgumentError("splitting op %r: an op, an op packet or a "
                                       "'namespace::name' string" % (op,))
    return frozenset(out)


def _is_split(node, ops):
    if node.op != "call_function":
        return False
    t = node.target
    if t in ops:
        return True
    # dynamo's graphs call the packet (torch.ops.ns.name); its default overload is what
    # was resolved
    d = getattr(t, "default", None)
    return d is not None and d in ops


class Item:
    """One submodule of the split graph: name (submod_N), index N, whether it is a
    splitting op's, and the FX GraphModule."""
    __slots__ = ("name", "index", "is_split", "module")

    def __init__(self, name, index, is_split, module):
        self.name, self.index, self.is_split, self.module = name, index, is_split, module

    def __repr__(self):
        return "Item(%s, %s)" % (self.name, "split" if self.is_split else "piece")


def split(gm, ops):
    """Split GraphModule gm at every call of ops (resolve_ops()).  Returns (split_gm,
    items sorted by index): a new GraphModule whose forward calls submod_0, submod_1, ...;
    each call of a splitting op is a submodule of its own between the pieces."""
    torch = _torch()
    from torch.fx.passes.split_module import split_module
    part = {}
    n = 0
    splits = set()
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if _is_split(node, ops):
            n += 1
            part[node] = n
            splits.add(n)
            n += 1
        else:
            part[node] = n
    # keep_original_order: without it nodes may be reordered, which changes what a graph
    # with mutations computes
    sgm = split_module(gm, None, lambda node: part[node], keep_original_order=True)
    items = []
    for name, mod in sgm.named_children():
        index = int(name[len("submod_"):])
        items.append(Item(name, index, index in splits, mod))
    items.sort(key=lambda i: i.index)
    del torch
    return sgm, items


_VIEWS = frozenset(("getitem", "__getitem__", "view", "view_as", "reshape", "select", "slice",
                    "narrow", "as_strided", "expand", "unsqueeze", "squeeze", "transpose",
                    "permute", "flatten", "unflatten", "t", "split", "chunk", "unbind",
                    "diagonal", "alias"))


def _op_name(target):
    name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _base(node):
    """The node a chain of views and indexing starts from (a write to mon[3] writes mon)."""
    seen = 0
    while (node.op in ("call_function", "call_method") and node.args and seen < 64
           and _op_name(node.target) in _VIEWS and hasattr(node.args[0], "op")):
        node = node.args[0]
        seen += 1
    return node


def _mutated_inputs(gm):
    """Indices of gm's placeholders that an op in gm writes to, directly or through a view
    (an alias_info with is_write in the op's schema, or an in-place method or aten op)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    out = set()
    for node in gm.graph.nodes:
        written = []
        if node.op == "call_function":
            schema = getattr(node.target, "_schema", None)
            if schema is None and hasattr(node.target, "default"):
                schema = getattr(node.target.default, "_schema", None)
            if schema is not None:
                for i, a in enumerate(schema.arguments):
                    if a.alias_info is not None and a.alias_info.is_write:
                        if i < len(node.args):
                            written.append(node.args[i])
                        elif a.name in node.kwargs:
                            written.append(node.kwargs[a.name])
            name = _op_name(node.target)
            if name.endswith("_") and not name.startswith("_") and node.args:
                written.append(node.args[0])
        elif node.op == "call_method" and node.target.endswith("_") and node.args:
            written.append(node.args[0])
        for w in written:
            w = _base(w) if hasattr(w, "op") else w
            if w in index:
                out.add(index[w])
    return out


# ---- the runtime: CUDA graphs (or a stand-in for tests without a GPU) ---------------------


class CudaRuntime:
    """How pieces are captured and replayed: torch.cuda.CUDAGraph, torch.cuda.graph on the
    current stream, one pool handle.  Tests without a GPU pass another object with the
    same four methods."""

    def __init__(self):
        self.torch = _torch()

    def pool_handle(self):
        return self.torch.cuda.graph_pool_handle()

    def capturing(self):
        return self.torch.cuda.is_current_stream_capturing()

    def capture(self, pool, run):
        """Capture run() into a new graph from pool; returns (graph, run's output).  On the
        current stream, as vLLM's CUDAGraphWrapper does, unless that is the default stream,
        which cannot be captured: then on torch.cuda.graph's own capture stream (the graph
        replays on whichever stream is current at replay)."""
        torch = self.torch
        g = torch.cuda.CUDAGraph()  # the class graphtoggle.torch.patch covers
        s = torch.cuda.current_stream()
        kw = {} if s == torch.cuda.default_stream() else {"stream": s}
        with torch.cuda.graph(g, pool=pool, **kw):
            out = run()
        return g, out

    def replay(self, graph):
        graph.replay()


# ---- the backend ----------------------------------------------------------------------------


class _Entry:
    """One captured graph of one piece for one shape."""
    __slots__ = ("graph", "output", "static", "check", "replays")

    def __init__(self, graph, output, static, check):
        self.graph, self.output, self.static, self.check = graph, output, static, check
        self.replays = 0


class Piece:
    """A compiled piece: runs its compiled callable, or captures and replays it per shape.
    Installed in the split graph in place of the piece's submodule."""

    def __init__(self, backend, name, index, position, count, fn, sym_idx, mutated):
        self.backend = backend
        self.name = name
        self.index = index          # N of submod_N
        self.position = position    # 0 .. count-1 among the compiled pieces of its graph
        self.count = count
        self.fn = fn
        self.sym_idx = tuple(sym_idx)   # arguments that are symbolic sizes (dynamic shapes)
        self.mutated = frozenset(mutated)
        self.entries = {}           # shape key -> _Entry

    def __repr__(self):
        return "Piece(%s, %d graphs)" % (self.name, len(self.entries))

    def __call__(self, *args):
        b = self.backend
        if b._mode != "piecewise":
            return self.fn(*args)
        e = self.entries.get(tuple([args[i] for i in self.sym_idx]) if self.sym_idx else ())
        if e is None:
            return self._capture(args)
        if e.check:
            self._check(e, args)
        b.runtime.replay(e.graph)
        e.replays += 1
        return e.output

    def _check(self, e, args):
        for i, ptr in e.check:
            a = args[i]
            if a.data_ptr() == ptr:
                continue
            if self.backend.check_inputs == "raise" or i in self.mutated:
                raise InvalidArgumentError(
                    "piece %s: input %d is not the tensor it was captured with (data_ptr %#x, "
                    "captured %#x)%s; pass the captured tensor (engines copy their inputs "
                    "into static buffers) or capture again (backend.reset())"
                    % (self.name, i, a.data_ptr(), ptr,
                       ", and the piece writes to it, so a copy would lose the writes"
                       if i in self.mutated else ""))
            e.static[i].copy_(a)
            self.backend.input_copies += 1

    def _capture(self, args):
        b = self.backend
        rt = b.runtime
        if rt.capturing():
            # an engine's FULL graph is being captured around the whole forward: the piece
            # is part of it (vLLM's FULL runtime mode)
            return self.fn(*args)
        key = tuple([args[i] for i in self.sym_idx]) if self.sym_idx else ()
        if not b.capture_enabled:
            raise InvalidArgumentError(
                "piece %s has no graph for shape %s and capture is closed "
                "(backend.capture_enabled=False): run this shape in mode 'none'"
                % (self.name, key or "(static)"))
        if b.pool is None:
            b.pool = rt.pool_handle()
        torch = b.torch
        check = []
        if b.check_inputs != "off":
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Parameter):
                    check.append((i, a.data_ptr()))
        fn = self.fn
        g, out = rt.capture(b.pool, lambda: fn(*args))
        self.entries[key] = _Entry(g, out, tuple(args), tuple(check))
        b.captures += 1
        return out


class Backend:
    """The torch.compile backend (torch.compile(model, backend=Backend(...))).

    splitting_ops: the ops to split at (resolve_ops(): "ns::name" strings, ops or op
        packets); the graph is compiled in one piece when there are none.
    compiler: "inductor" (torch._inductor.compile_fx, default), "eager" (the FX pieces as
        they are), or a callable (gm, example_inputs) -> callable.
    pool: the graph memory pool every piece is captured into (default: one
        torch.cuda.graph_pool_handle() made at the first capture; pass an engine's pool to
        share it with its FULL graphs).
    check_inputs: "copy" (default): an input whose address changed since the capture is
        copied into the captured tensor before the replay (an input the piece writes to is
        refused); "raise": any changed input is refused; "off": no check.
    runtime: how graphs are captured and replayed (default CudaRuntime()).

    mode (set with forward_mode() or set_mode(); one engine thread drives it, as vLLM's
    forward context): "piecewise" (default):
    capture each piece on its first call for a shape, replay after; "none": run the
    compiled pieces without graphs (warm-up, profiling, shapes without graphs);
    "full": the same as "none", for an engine that captures the whole forward in one
    graph (FULL; set it around that capture).  A piece without a graph for the shape
    also runs directly, instead of capturing, when the current stream is capturing.

    capture_enabled: set it to False once the engine has captured its shapes; a piece
    that then meets a shape without a graph in mode "piecewise" raises instead of
    capturing.
    """

    def __init__(self, splitting_ops=(), compiler="inductor", pool=None, check_inputs="copy",
                 runtime=None):
        if check_inputs not in _CHECKS:
            raise InvalidArgumentError("check_inputs must be one of %s, got %r"
                                       % (", ".join(_CHECKS), check_inputs))
        if not (compiler in ("inductor", "eager") or callable(compiler)):
            raise InvalidArgumentError("compiler must be 'inductor', 'eager' or a callable, "
                                       "got %r" % (compiler,))
        self.torch = _torch()
        self.ops = resolve_ops(splitting_ops)
        self.compiler = compiler
        self.pool = pool
        self.check_inputs = check_inputs
        self.runtime = runtime if runtime is not None else CudaRuntime()
        self.capture_enabled = True
        self.graphs_compiled = 0    # backend calls (dynamo graphs)
        self.pieces = []            # every compiled Piece, all backend calls
        self.splits = []            # every splitting-op submodule, all backend calls
        self.captures = 0
        self.input_copies = 0
        self._mode = "piecewise"

    # ---- modes -------------------------------------------------------------------------
    @property
    def mode(self):
        return self._mode

    def set_mode(self, mode):
        if mode not in MODES:
            raise InvalidArgumentError("mode must be one of %s, got %r" % (", ".join(MODES), mode))
        self._mode = mode

    @contextlib.contextmanager
    def forward_mode(self, mode):
        """with backend.forward_mode("none"): ... (restored after)."""
        old = self.mode
        self.set_mode(mode)
        try:
            yield self
        finally:
            self._mode = old

    # ---- what it made ------------------------------------------------------------------
    def graphs(self):
        """Every captured graph: [(piece, shape key, torch.cuda.CUDAGraph)]."""
        return [(p, k, e.graph) for p in self.pieces for k, e in p.entries.items()]

    def replays(self):
        return sum(e.replays for p in self.pieces for e in p.entries.values())

    def reset(self):
        """Drop every captured graph (vLLM's clear_graphs); pieces capture again on their
        next call in mode "piecewise"."""
        for p in self.pieces:
            p.entries.clear()

    def stats(self):
        return {"graphs_compiled": self.graphs_compiled, "pieces": len(self.pieces),
                "splits": len(self.splits), "graphs": sum(len(p.entries) for p in self.pieces),
                "captures": self.captures, "replays": self.replays(),
                "input_copies": self.input_copies}

    # ---- torch.compile's call ----------------------------------------------------------
    def __call__(self, gm, example_inputs):
        torch = self.torch
        sgm, items = split(gm, self.ops)
        names = [i.name for i in items if not i.is_split]
        mode, fake = _fake_inputs(torch, gm, example_inputs)
        made = {}
        backend = self

        class _Compile(torch.fx.Interpreter):
            # runs the split graph on the fake inputs: each piece is compiled with the
            # (fake, possibly symbolic) arguments it receives
            def call_module(self, target, args, kwargs):
                out = super().call_module(target, args, kwargs)
                if target in names and target not in made:
                    sub = self.fetch_attr(target)
                    fn = backend._compile(sub, list(args))
                    sym = [i for i, a in enumerate(args) if isinstance(a, torch.SymInt)]
                    made[target] = Piece(backend, target, int(target[len("submod_"):]),
                                         names.index(target), len(names), fn, sym,
                                         _mutated_inputs(sub))
                return out

        with mode:
            _Compile(sgm).run(*fake)
        for item in items:
            if item.is_split:
                self.splits.append(item)
                continue
            p = made[item.name]
            # as vLLM does: the instance attribute shadows the registered submodule, so the
            # split graph's forward calls the Piece
            sgm.__dict__[item.name] = p
            self.pieces.append(p)
        self.graphs_compiled += 1
        return sgm

    def _compile(self, sub, args):
        if self.compiler == "eager":
            return sub
        if self.compiler == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(sub, args)
        return self.compiler(sub, args)


def _fake_inputs(torch, gm, example_inputs):
    """The inputs dynamo traced with, as fake tensors of its fake mode (vLLM's way: the
    tracing context's mode has memoized every real input it fakified, so from_tensor gives
    back the fake dynamo traced with, symbolic under dynamic shapes); example_inputs made
    fake by a new mode when there is no tracing context (a direct call)."""
    from torch._guards import detect_fake_mode
    mode = detect_fake_mode() or detect_fake_mode(example_inputs)
    if mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = FakeTensorMode()
    return mode, [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
                  for t in example_inputs]


__all__ = ["Backend", "CudaRuntime", "Piece", "Item", "MODES", "resolve_ops", "split"]
