"""PyTorch integration: capture into torch.cuda.CUDAGraph with producers, guarded replay,
nn.Module forward-hook producers, and the torch.cuda.CUDAGraph class patch for engines
that create and replay their graphs themselves (the vLLM / SGLang pattern).

torch is imported lazily: importing graphtoggle needs no torch.
"""

import threading
import weakref
from contextlib import contextmanager

from .errors import GraphToggleError, InvalidArgumentError, NotSupportedError

# ---- tensors --------------------------------------------------------------------


def copy_geometry(src, dst):
    """(row_bytes, rows, src_pitch) for copying tensor src into contiguous tensor dst with
    libtoggle's copy producer.  src: contiguous, or strided rows (2-D after flattening the
    leading dims, unit stride inside a row, rows evenly spaced)."""
    es = src.element_size()
    if dst.element_size() * dst.numel() != es * src.numel():
        raise InvalidArgumentError(
            "copy_out: dst holds %d bytes, src %d: allocate dst like src (torch.empty_like(src))"
            % (dst.element_size() * dst.numel(), es * src.numel()))
    if not dst.is_contiguous():
        raise InvalidArgumentError("copy_out: dst must be contiguous (a monitor buffer)")
    if src.device != dst.device:
        raise InvalidArgumentError("copy_out: src on %s, dst on %s: both must be on the same GPU"
                                   % (src.device, dst.device))
    if src.numel() == 0:
        raise InvalidArgumentError("copy_out: src is empty")
    if src.is_contiguous():
        return es * src.numel(), 1, es * src.numel()
    shape, stride = list(src.shape), list(src.stride())
    # drop size-1 dims (their stride is meaningless)
    dims = [(n, s) for n, s in zip(shape, stride) if n != 1]
    if len(dims) >= 2 and dims[-1][1] == 1:
        row = dims[-1][0]
        # the leading dims must collapse into one evenly spaced row index
        outer = dims[:-1]
        ok = all(outer[i][1] == outer[i + 1][1] * outer[i + 1][0] for i in range(len(outer) - 1))
        if ok:
            rows = 1
            for n, _ in outer:
                rows *= n
            return row * es, rows, outer[-1][1] * es
    raise InvalidArgumentError(
        "copy_out: src with shape %s and strides %s is neither contiguous nor evenly strided "
        "rows; copy a contiguous view (src.contiguous() outside the capture) or select rows "
        "of a contiguous tensor" % (tuple(shape), tuple(stride)))


def _torch():
    import torch
    return torch


_raw_stream = None


def _current_stream(device=None):
    """torch's current stream as a raw handle.  torch.cuda.current_stream().cuda_stream costs
    4.6 us on the H200 machine (torch 2.11), torch._C._cuda_getCurrentRawStream 0.08 us:
    the replay path uses the latter where it exists."""
    if device is None:
        device = _torch().cuda.current_device()
    return (_raw_stream or _stream_fn())(device)


def _stream_fn():
    global _raw_stream
    torch = _torch()
    f = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _raw_stream = f if f is not None else (lambda _d: torch.cuda.current_stream().cuda_stream)
    return _raw_stream


# ---- capture without the patch -----------------------------------------------------


def _kept(g):
    """Whether g keeps its template (keep_graph=True).  torch 2.11 has no attribute for it:
    raw_cuda_graph() refuses, naming keep_graph, when it was not asked."""
    k = getattr(g, "_keep_graph", None)
    if k is not None:
        return bool(k)
    try:
        g.raw_cuda_graph()
    except RuntimeError as e:
        return "keep_graph" not in str(e)
    return True


def _check_random_ops(random_ops):
    if not isinstance(random_ops, bool):
        raise InvalidArgumentError("random_ops must be True or False, got %r" % (random_ops,))
    return random_ops


@contextmanager
def capture(agent, g, pool=None, stream=None, capture_error_mode="global", random_ops=True):
    """Drop-in for torch.cuda.graph(g, ...): opens the agent's capture window (the planner
    first in device mode), and after capture instantiates g and binds it when producers
    were recorded.  g must be torch.cuda.CUDAGraph(keep_graph=True): libtoggle toggles
    nodes of the template graph, which torch otherwise destroys after instantiation.

    random_ops=False: the caller says g has no random ops (torch.rand, dropout, sampling:
    nothing that reads torch's CUDA generator).  Its replays (agent.replay) are then
    toggle_graph_launch on torch's current stream, which runs the producer-free exec at
    steps that enable none of g's hooks, instead of torch's own replay.  The first such
    replay checks the promise (see replay())."""
    _check_random_ops(random_ops)
    torch = _torch()
    st = _owner_of(g)
    if st is not None and st.session is _state.session:
        # a graph of the active patch: the patched methods do everything
        with torch.cuda.graph(g, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
            yield g
        st.random_ops = random_ops and st.random_ops
        if not st.random_ops and st.graph is not None:
            _want_bare(st)
        return
    if not _kept(g):
        raise InvalidArgumentError(
            "agent.capture(g) needs torch.cuda.CUDAGraph(keep_graph=True): libtoggle toggles "
            "the template graph, which torch destroys after instantiation otherwise")
    agent.capture_begin()
    try:
        with torch.cuda.graph(g, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
            agent.capture_planner(torch.cuda.current_stream().cuda_stream)
            yield g
    finally:
        agent.capture_end()
    graph = g.raw_cuda_graph()
    if agent.has_producers(graph):
        st = _GraphState(agent, None, graph)
        st.random_ops = random_ops
        _want_bare(st)  # before the bind: decided once, kept through rebinds
        g.instantiate()
        agent.bind(graph, g.raw_cuda_graph_exec())
        st.exec = g.raw_cuda_graph_exec()
        g._graphtoggle = st
        st.device = torch.cuda.current_device()
        st.finalizer = weakref.finalize(g, _forget, weakref.ref(agent), graph)
        _wrap_instance(g, st)


def _wrap_instance(g, st):
    """Rebind at every g.instantiate() and forget at g.reset(), per instance.  A handle
    compare at replay is not enough: a new exec can get the old one's address (seen with
    the simulator's allocator), and the agent would trust the old exec's node states."""
    cls = type(g)
    ref = weakref.ref(g)

    def instantiate():
        o = ref()
        _unbind(st)
        cls.instantiate(o)
        st.exec = o.raw_cuda_graph_exec()
        st.agent.bind(st.graph, st.exec)

    def reset():
        if st.finalizer is not None:
            st.finalizer()
        st.graph = st.exec = None
        cls.reset(ref())

    g.instantiate = instantiate
    g.reset = reset


def replay(agent, g, stream=None, random_ops=None):
    """Guarded replay of a graph captured with agent.capture(g) (no patch needed), on
    torch's current stream (or stream, made current for the replay).  Unrelated graphs
    replay untouched.

    random_ops (default: what capture or patch said for g, True unless told otherwise):
    True: toggle_graph_prepare, then torch's own replay, whose generator prologue gives
    random ops new numbers at each replay.  False: the caller says g has no random ops:
    toggle_graph_launch, which runs the producer-free exec at steps that enable none of
    g's hooks.  The first replay with False is torch's own (prepare + torch's replay) and
    checks the promise: if torch's default generator advanced, g has random ops and
    InvalidArgumentError is raised after that (correct) replay; later replays of g with
    False are refused before anything runs."""
    st = _owner_of(g)
    if st is None or st.agent is not agent or st.graph is None:
        g.replay()
        return
    ro = st.random_ops if random_ops is None else _check_random_ops(random_ops)
    if stream is None:
        _replay(st, g, ro)
        return
    torch = _torch()
    s = stream if hasattr(stream, "cuda_stream") else torch.cuda.ExternalStream(stream)
    with torch.cuda.stream(s):  # torch's replay launches on the current stream
        _replay(st, g, ro)


def _torch_replay(st, g):
    """torch's own replay of g: its class's, or the one the patch saved for its graphs."""
    if st.session is not None and st.session is _state.session:
        return _state.o_replay(g)
    return g.replay()


def _replay(st, g, random_ops):
    if st.exec is None:
        g.instantiate()  # the patch's: binds
    a = st.agent
    stream = (_raw_stream or _stream_fn())(st.device)
    if random_ops:
        rc = a._prepare(a._h or a._agent(), st.graph, st.exec, stream)
        if rc:
            a._raise(rc, "prepare")
        return _torch_replay(st, g)
    if st.no_random:
        rc = a._launch(a._h or a._agent(), st.graph, st.exec, stream)
        if rc:
            a._raise(rc, "launch")
        return None
    return _probe(st, lambda: _torch_replay(st, g), stream)


def _gen_offset(device):
    """The Philox offset of device's default CUDA generator (torch.cuda.default_generators),
    None where this torch has no way to read it."""
    try:
        return _torch().cuda.default_generators[device].get_offset()
    except (AttributeError, IndexError, RuntimeError, TypeError):
        return None


def _probe(st, torch_replay, stream):
    """The first replay of a graph with random_ops=False: torch's own (correct whatever the
    graph holds), checking that torch's default generator did not advance.  torch 2.11
    registers that generator with every capture and advances it at each replay by the
    graph's whole increment, which is 0 exactly when no random op read it (CUDAGraph::
    replay's generator prologue); nothing else in torch's Python API says whether a graph
    drew random numbers.  A generator the caller registered (register_generator_state) is
    not seen: for those, random_ops=False stays the caller's promise."""
    a = st.agent
    if st.random_used:
        raise InvalidArgumentError(
            "replay(random_ops=False) refused: this graph has random ops (torch's generator "
            "advanced at its first such replay); replay it with random_ops=True (the default)")
    before = _gen_offset(st.device)
    rc = a._prepare(a._h or a._agent(), st.graph, st.exec, stream)
    if rc:
        a._raise(rc, "prepare")
    torch_replay()
    after = _gen_offset(st.device)
    if before is not None and after != before:
        st.random_used = True
        _want_bare(st)  # it will never run: drop it
        raise InvalidArgumentError(
            "random_ops=False, but this graph has random ops: torch's default generator "
            "advanced by %d at this replay, which ran through torch's own replay (correct, new "
            "random numbers); later replays with random_ops=False are refused: replay it with "
            "random_ops=True (the default), or capture the random ops outside the graph"
            % (after - before))
    st.no_random = True
    _want_bare(st)  # built now if it was not at the bind (random_ops=False given at replay)
    return None


def _want_bare(st):
    """Decide st's producer-free exec (toggle_graph_set_bare): only where a replay can run
    it, i.e. graphs replayed through toggle_graph_launch (random_ops=False, not found to
    draw random numbers), unless the agent was opened with bare_exec=True (every graph)
    or False (none: libtoggle builds none whatever the graph says)."""
    a = st.agent
    if a.bare_exec is False:
        return
    a.set_bare(st.graph, a.bare_exec is True or
               ((not st.random_ops or st.no_random) and not st.random_used))


# ---- the class patch ------------------------------------------------------------------


class _GraphState:
    """What graphtoggle knows about one CUDAGraph object (attribute _graphtoggle)."""
    __slots__ = ("agent", "session", "graph", "exec", "want_keep", "finalizer", "device",
                 "random_ops", "no_random", "random_used", "__weakref__")

    def __init__(self, agent, session, graph=None, exec_=None, want_keep=True):
        self.agent = agent
        self.session = session
        self.graph = graph
        self.exec = exec_
        self.want_keep = want_keep
        self.finalizer = None
        self.device = None
        self.random_ops = True    # replays: prepare + torch's replay (False: launch)
        self.no_random = False    # a replay with random_ops=False checked: none drawn
        self.random_used = False  # ... found the generator advanced: False refused


def _owner_of(g):
    try:
        return g.__dict__.get("_graphtoggle")
    except AttributeError:
        return None


class _Session:
    """One patched period: from the first owner's patch() to the last owner's end."""
    __slots__ = ("agent", "owners", "random_ops", "__weakref__")

    def __init__(self, agent, random_ops=True):
        self.agent = agent
        self.owners = 0
        self.random_ops = random_ops


class _PatchState:
    def __init__(self):
        self.lock = threading.Lock()
        self.session = None
        self.cls = None
        self.saved = {}
        self.o_replay = None  # torch's replay while patched


_state = _PatchState()
_MISSING = object()
_METHODS = ("__init__", "capture_begin", "capture_end", "instantiate", "replay", "reset")


class Patch:
    """An owner of the torch.cuda.CUDAGraph patch (returned by patch(agent)).  end() (or
    leaving the with block) releases it; the class is restored when the last owner ends."""

    def __init__(self, session):
        self._session = session
        self.active = True

    @property
    def agent(self):
        return self._session.agent

    def end(self):
        unpatch(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.active:
            self.end()


def patch(agent, random_ops=True):
    """Make torch.cuda.CUDAGraph toggleable for agent until the returned owner ends.

    While patched, graphs created through torch.cuda.CUDAGraph keep their template,
    capture inside the agent's capture window (planner first in device mode), are bound
    at instantiate, replay through the guard when they have producers (untouched
    otherwise), and are forgotten when reset or destroyed.  Several owners may hold the
    patch for the same agent; it is restored exactly when the last one ends.

    random_ops=False: the caller says the graphs captured while patched have no random
    ops (decode graphs of engines that sample outside the graph: vLLM, SGLang).  Their
    replays are then toggle_graph_launch on torch's current stream, which runs each
    graph's producer-free exec at steps that enable none of its hooks; the default
    (True) is prepare + torch's own replay, right for graphs with random ops.  The first
    replay of each graph checks the promise (graphtoggle.torch.replay says how)."""
    _check_random_ops(random_ops)
    torch = _torch()
    with _state.lock:
        s = _state.session
        if s is not None:
            if s.agent is not agent:
                raise InvalidArgumentError(
                    "torch.cuda.CUDAGraph is already patched for agent %r; end its owners "
                    "(graphtoggle.torch.unpatch) before patching for agent %r"
                    % (s.agent.name, agent.name))
            if s.random_ops != random_ops:
                raise InvalidArgumentError(
                    "torch.cuda.CUDAGraph is already patched for agent %r with random_ops=%r; "
                    "its owners must agree (end them first)" % (agent.name, s.random_ops))
            s.owners += 1
            return Patch(s)
        if agent.closed:
            raise InvalidArgumentError("patch(agent): the agent is closed")
        cls = torch.cuda.graphs.CUDAGraph
        names = _METHODS
        saved = {name: cls.__dict__.get(name, _MISSING) for name in names}
        orig = {name: getattr(cls, name) for name in names}
        for name, fn in _make_methods(orig).items():
            setattr(cls, name, fn)
        s = _Session(agent, random_ops)
        s.owners = 1
        _state.session, _state.cls, _state.saved = s, cls, saved
        _state.o_replay = orig["replay"]
        return Patch(s)


def unpatch(owner=None):
    """End one owner (or, with no argument, every owner); restore the class after the last."""
    with _state.lock:
        s = _state.session
        if owner is not None:
            if not owner.active or owner._session is not s:
                raise InvalidArgumentError("this patch owner has already ended")
            owner.active = False
            s.owners -= 1
            if s.owners > 0:
                return
        elif s is None:
            return
        cls = _state.cls
        for name, v in _state.saved.items():
            if v is _MISSING:
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                setattr(cls, name, v)
        _state.session, _state.cls, _state.saved = None, None, {}
        _state.o_replay = None


def patched():
    """The agent the class is patched for, or None."""
    s = _state.session
    return s.agent if s is not None else None


def _unbind(st):
    """Unbind before torch's instantiate destroys the bound exec (libtoggle's rule: never
    destroy a bound exec).  It matters beyond eager mode: the new exec can get the old one's
    handle value, and a device-mode bind skips the upload for the exec it last uploaded
    (seen on the H200: launches of the new, never uploaded exec ran wrong producers)."""
    if st.exec is not None:
        st.agent.bind(st.graph, None)
        st.exec = None


def _forget(agent_ref, graph):
    a = agent_ref()
    if a is not None and not a.closed:
        try:
            a.forget(graph)
        except GraphToggleError:
            pass


def _make_methods(orig):
    o_begin, o_end = orig["capture_begin"], orig["capture_end"]
    o_inst, o_replay, o_reset = orig["instantiate"], orig["replay"], orig["reset"]

    def _adopt(self, s, keep_graph):
        # libtoggle needs the template alive: kept whatever was asked; remembered so that a
        # graph asked without it is instantiated at capture end, as torch would
        self.__dict__["_graphtoggle"] = _GraphState(s.agent, s, want_keep=bool(keep_graph))
        if "_keep_graph" in self.__dict__:
            self._keep_graph = True

    methods = {}
    o_init = orig["__init__"]

    # torch 2.11: CUDAGraph.__new__(cls, keep_graph) only passes keep_graph to pybind's
    # __new__, which ignores it; the C++ object is built by _CUDAGraph.__init__ with the
    # caller's arguments.  So keep_graph is forced in __init__ (measured on the H200: a
    # patched __new__ alone left raw_cuda_graph() refusing).
    def __init__(self, keep_graph=False, *args, **kwargs):
        s = _state.session
        if s is None:
            return o_init(self, keep_graph, *args, **kwargs)
        o_init(self, True, *args, **kwargs)
        _adopt(self, s, keep_graph)
    methods["__init__"] = __init__

    def capture_begin(self, *args, **kwargs):
        st = _owner_of(self)
        s = _state.session
        if st is None or s is None or st.session is not s:
            return o_begin(self, *args, **kwargs)  # not ours: torch's own capture
        agent = s.agent
        agent.capture_begin()
        try:
            o_begin(self, *args, **kwargs)
            agent.capture_planner(_current_stream())
        except BaseException:
            agent.capture_end()
            raise

    def capture_end(self):
        st = _owner_of(self)
        s = _state.session
        if st is None or s is None or st.session is not s:
            return o_end(self)
        agent = s.agent
        try:
            o_end(self)
        finally:
            agent.capture_end()
        graph = self.raw_cuda_graph()
        if agent.has_producers(graph):
            st.graph = graph
            st.device = _torch().cuda.current_device()
            st.random_ops = s.random_ops
            _want_bare(st)  # before the bind: decided once, kept through rebinds
            st.finalizer = weakref.finalize(self, _forget, weakref.ref(agent), graph)
            self.instantiate()  # binds (patched instantiate)
        elif not st.want_keep:
            self.instantiate()  # what torch does for keep_graph=False

    def instantiate(self):
        st = _owner_of(self)
        ours = st is not None and st.graph is not None and st.session is _state.session
        if ours:
            _unbind(st)
        o_inst(self)
        if ours:
            exec_ = self.raw_cuda_graph_exec()
            st.agent.bind(st.graph, exec_)
            st.exec = exec_

    def replay(self):
        # Graphs with producers: toggle_graph_prepare on torch's current stream (the guard,
        # the step's set, the accounting), then torch's own replay, which runs its
        # generators' replay prologue (Philox seed/offset: random ops get new numbers at
        # each replay) and launches this exec on that same stream.  Refused: raises, and
        # torch's replay is not called.  Patched with random_ops=False: toggle_graph_launch
        # instead (_replay), after the first replay's check.
        st = self.__dict__.get("_graphtoggle")
        if st is None or st.graph is None or st.session is not _state.session:
            return o_replay(self)  # unrelated, or of an ended session: torch's own
        if not st.random_ops:
            return _replay(st, self, False)  # launch (the bare exec can run), or the check
        if st.exec is None:
            self.instantiate()
        a = st.agent
        # the agent's prepare inlined (one Python frame less on the hot path)
        rc = a._prepare(a._h or a._agent(), st.graph, st.exec,
                        (_raw_stream or _stream_fn())(st.device))
        if rc:
            a._raise(rc, "prepare")
        return o_replay(self)

    def reset(self):
        st = _owner_of(self)
        if st is not None and st.graph is not None:
            if st.finalizer is not None:
                st.finalizer()  # forgets now, once
            st.graph = st.exec = None
        return o_reset(self)

    methods.update(capture_begin=capture_begin, capture_end=capture_end,
                   instantiate=instantiate, replay=replay, reset=reset)
    return methods


# ---- nn.Module forward hooks ---------------------------------------------------------------


class Attachment:
    """Producers attached to modules' forward hooks (graphtoggle.torch.attach).
    buffers: {(hook type, layer, shape, dtype): tensor} filled as graphs are captured."""

    def __init__(self, agent):
        self.agent = agent
        self.buffers = {}
        self._handles = []

    def buffer(self, hook_type, layer, shape=None):
        """The monitor buffer of (type, layer) (for one shape when several were captured)."""
        found = [b for (t, l, s, _), b in self.buffers.items()
                 if t == hook_type and l == layer and (shape is None or tuple(shape) == s)]
        if len(found) != 1:
            raise KeyError("%d buffers for (%s, %d%s)" % (len(found), hook_type, layer,
                                                           ", %s" % (shape,) if shape else ""))
        return found[0]

    def detach(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()


def attach(agent, modules, buffers=None, select=None, method=None):
    """Attach producers to nn.Module forward hooks.

    modules: {hook type: [module for layer 0, 1, ...]} (the layer is the list index), e.g.
        {"resid_post": model.layers, "mlp_out": [l.mlp for l in model.layers]}.
    buffers: optional callable (hook type, layer, output tensor) -> monitor buffer, or a
        dict {(hook type, layer): tensor}, made outside any capture; default: a buffer per
        (hook, shape, dtype), made by the first forward outside a capture that sees the
        shape (torch's warm-up before capture; a capture without it is refused).
    select: output -> tensor (default: the output, or its first element for tuples).
    method: "mul" (torch.mul(x, 1, out=buf), any mode but device) or "copy_out" (libtoggle's
        built-in copy kernel, needed for device mode); default by the agent's mode.

    Inside a capture on a capturing stream the hook records a producer; outside it does
    nothing.  Returns an Attachment; detach() removes every hook."""
    torch = _torch()
    if method is None:
        method = "copy_out" if agent.mode == "device" else "mul"
    if method not in ("mul", "copy_out"):
        raise InvalidArgumentError("method must be 'mul' or 'copy_out', got %r" % (method,))
    if method == "mul" and agent.mode == "device":
        raise NotSupportedError("device mode needs method='copy_out' (torch ops cannot carry "
                                "the device-updatable launch attribute)")
    att = Attachment(agent)
    for hook_type, mods in modules.items():
        agent.catalog.type_index(hook_type)  # unknown names fail now, with the known ones
        mods = list(mods)
        if len(mods) > agent.catalog.n_layers:
            raise InvalidArgumentError("%d modules for %s, the catalog has %d layers"
                                       % (len(mods), hook_type, agent.catalog.n_layers))
        for layer, mod in enumerate(mods):
            att._handles.append(mod.register_forward_hook(
                _forward_hook(att, torch, hook_type, layer, buffers, select, method)))
    return att


def _forward_hook(att, torch, hook_type, layer, buffers, select, method):
    agent = att.agent
    hook = (hook_type, layer)

    def fn(module, args, output):
        x = select(output) if select else (output[0] if isinstance(output, (tuple, list))
                                           else output)
        key = (hook_type, layer, tuple(x.shape), x.dtype)
        if not torch.cuda.is_current_stream_capturing():
            # outside a capture (torch's warm-up runs): make the buffer for this shape here.
            # A buffer made inside the capture comes from the graph's private pool and can
            # reuse a block an earlier kernel of the same graph writes (seen on the H200:
            # every "disabled" producer's buffer changed at each replay).
            if buffers is None and key not in att.buffers:
                att.buffers[key] = torch.empty_like(x, memory_format=torch.contiguous_format)
            return None
        if buffers is None:
            buf = att.buffers.get(key)
            if buf is None:
                raise InvalidArgumentError(
                    "no monitor buffer for %s:%d with shape %s: run the model once outside the "
                    "capture with this batch size first (torch's warm-up before capture), or "
                    "pass buffers= to attach()" % (hook_type, layer, tuple(x.shape)))
        else:
            buf = buffers(hook_type, layer, x) if callable(buffers) else buffers[hook]
            att.buffers[key] = buf
        if method == "copy_out":
            agent.copy_out(x, buf, hook)
        else:
            with agent.producer(hook):
                torch.mul(x, 1, out=buf.view(x.shape))
        return None

    return fn


__all__ = ["capture", "replay", "patch", "unpatch", "patched", "Patch", "attach", "Attachment",
           "copy_geometry"]
