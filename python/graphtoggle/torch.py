"""PyTorch integration: capture into torch.cuda.CUDAGraph with producers, guarded replay,
nn.Module forward-hook producers (the registered op torch.ops.graphtoggle.tap, see
graphtoggle.ops: eager, torch.compile, CUDA Graph Trees), and the torch.cuda.CUDAGraph
class patch for engines that create and replay their graphs themselves (the vLLM /
SGLang pattern, torch.compile's mode="reduce-overhead").

torch is imported lazily: importing graphtoggle (or graphtoggle.torch) needs no torch.
"""

import ctypes
import itertools
import sys
import threading
import warnings
import weakref
from contextlib import contextmanager

from .errors import CaptureError, GraphToggleError, InvalidArgumentError, NotSupportedError

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
    if random_ops is not None and not isinstance(random_ops, bool):
        raise InvalidArgumentError("random_ops must be None (automatic), True or False, got %r"
                                   % (random_ops,))
    return random_ops


def _closed_refusal(agent, what):
    return InvalidArgumentError(
        "%s: agent %r is closed; nothing was captured.  %s" % (
            what, agent.name,
            "End the patch (owner.end() or graphtoggle.torch.unpatch()) before closing its "
            "agent, or patch an open one" if _state.session is not None and
            _state.session.agent is agent else "Capture with an open agent"))


@contextmanager
def capture(agent, g, pool=None, stream=None, capture_error_mode="global", random_ops=None):
    """Drop-in for torch.cuda.graph(g, ...): opens the agent's capture window (the planner
    first in device mode), and after capture instantiates g and binds it when producers
    were recorded.  g must be torch.cuda.CUDAGraph(keep_graph=True): libtoggle toggles
    nodes of the template graph, which torch otherwise destroys after instantiation.

    random_ops: how g's replays (agent.replay) run.  None (default, automatic): the first
    replay is torch's own (after toggle_graph_prepare) and sees whether torch's default
    generator advanced; a graph that drew no random numbers replays from then on through
    toggle_graph_launch (the producer-free exec at steps that enable none of its hooks),
    one that did keeps torch's own replay.  True: always torch's own replay (random ops).
    False: the caller says g has no random ops; the first replay checks the promise and
    refuses later replays when it was wrong (see replay())."""
    _check_random_ops(random_ops)
    torch = _torch()
    st = _owner_of(g)
    if st is not None and st.session is _state.session:
        # a graph of the active patch: the patched methods do everything
        with torch.cuda.graph(g, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
            yield g
        if random_ops is not None:
            st.random_ops = random_ops
        if st.graph is not None:
            _want_bare(st)
        return
    if not _kept(g):
        raise InvalidArgumentError(
            "agent.capture(g) needs torch.cuda.CUDAGraph(keep_graph=True): libtoggle toggles "
            "the template graph, which torch destroys after instantiation otherwise")
    if agent.closed:
        raise _closed_refusal(agent, "agent.capture(g)")
    agent.capture_begin()
    keep = ()
    refusal = "the capture raised"
    try:
        with torch.cuda.graph(g, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
            agent.capture_planner(torch.cuda.current_stream().cuda_stream)
            yield g
        refusal = agent.capture_refusal()  # a producer refused, its error caught inside
    except BaseException as e:
        refusal = agent.capture_refusal() or "%s: %s" % (type(e).__name__, e)
        raise
    finally:
        keep = agent.capture_end()
        if refusal is not None:
            # the graph holds only the producers recorded before the failure: never bound,
            # and agent.replay(g) refuses it (g.replay() is torch's own: not ours to stop)
            _forget(weakref.ref(agent), g.raw_cuda_graph())
            st = _GraphState(agent, None)
            st.refused = refusal
            g._graphtoggle = st
    if refusal is not None:
        raise _refused(refusal, "agent.capture(g)")
    graph = g.raw_cuda_graph()
    if agent.has_producers(graph):
        st = _GraphState(agent, None, graph)
        st.keep = keep
        st.random_ops = random_ops
        _want_bare(st)  # before the bind: decided once, kept through rebinds
        g.instantiate()
        agent.bind(graph, g.raw_cuda_graph_exec())
        st.exec = g.raw_cuda_graph_exec()
        g._graphtoggle = st
        st.device = torch.cuda.current_device()
        st.finalizer = weakref.finalize(g, _forget, weakref.ref(agent), graph)
        _wrap_instance(g, st)


def _refused(why, what="this CUDA graph"):
    """The error for a graph whose capture had a producer refused (never bound, never
    replayed: it holds only the producers recorded before the refusal)."""
    return CaptureError(
        "%s: the capture was refused (%s): the graph holds only some of its producers, so "
        "it is not bound and never replays; capture it again once the error is fixed"
        % (what, why))


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
        st.keep = ()  # the exec is gone: nothing replays into the buffers any more

    g.instantiate = instantiate
    g.reset = reset


def replay(agent, g, stream=None, random_ops=None):
    """Guarded replay of a graph captured with agent.capture(g) (no patch needed), on
    torch's current stream (or stream, made current for the replay).  Unrelated graphs
    replay untouched.

    random_ops (default: what capture or patch said for g, automatic unless told
    otherwise): True: toggle_graph_prepare, then torch's own replay, whose generator
    prologue gives random ops new numbers at each replay.  False: the caller says g has
    no random ops: toggle_graph_launch, which runs the producer-free exec at steps that
    enable none of g's hooks.  The first replay with False (or automatic) is torch's own
    (prepare + torch's replay) and checks: if torch's default generator advanced, g has
    random ops; with False InvalidArgumentError is raised after that (correct) replay and
    later replays of g with False are refused before anything runs; automatic keeps
    torch's own replay for g from then on, silently."""
    st = _owner_of(g)
    if st is not None and st.refused is not None:
        raise _refused(st.refused)
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
    """random_ops: True (torch's own replay), False (launch, after the check) or None
    (automatic: launch once the check found no random ops, torch's replay otherwise)."""
    if st.exec is None:
        g.instantiate()  # the patch's: binds
    a = st.agent
    stream = (_raw_stream or _stream_fn())(st.device)
    if st.no_random and random_ops is not True:
        rc = a._launch(a._h or a._agent(), st.graph, st.exec, stream)
        if rc:
            a._raise(rc, "launch")
        return None
    if random_ops or (random_ops is None and st.random_used):
        rc = a._prepare(a._h or a._agent(), st.graph, st.exec, stream)
        if rc:
            a._raise(rc, "prepare")
        _torch_replay(st, g)
        if a._rec is not None:
            a._rec.after(st.graph, stream)  # the monitor buffers after torch's own launch
        return None
    return _probe(st, lambda: _torch_replay(st, g), stream, strict=random_ops is False)


def _gen_offset(device):
    """The Philox offset of device's default CUDA generator (torch.cuda.default_generators),
    None where this torch has no way to read it."""
    try:
        return _torch().cuda.default_generators[device].get_offset()
    except (AttributeError, IndexError, RuntimeError, TypeError):
        return None


def _probe(st, torch_replay, stream, strict=True):
    """The first replay of a graph with random_ops=False or automatic: torch's own
    (correct whatever the graph holds), checking that torch's default generator did not
    advance (strict: raising when it did; automatic: noting it, torch's replay kept).
    torch 2.11 registers that generator with every capture and advances it at each replay by the
    graph's whole increment, which is 0 exactly when no random op read it (CUDAGraph::
    replay's generator prologue); nothing else in torch's Python API says whether a graph
    drew random numbers.  A generator the caller registered (register_generator_state) is
    not seen: for those, random_ops=False stays the caller's promise."""
    a = st.agent
    if st.random_used and strict:
        raise InvalidArgumentError(
            "replay(random_ops=False) refused: this graph has random ops (torch's generator "
            "advanced at its first such replay); replay it with random_ops=True or the "
            "default (automatic)")
    before = _gen_offset(st.device)
    rc = a._prepare(a._h or a._agent(), st.graph, st.exec, stream)
    if rc:
        a._raise(rc, "prepare")
    torch_replay()
    if a._rec is not None:
        a._rec.after(st.graph, stream)
    after = _gen_offset(st.device)
    if before is not None and after != before:
        st.random_used = True
        _want_bare(st)  # it will never run: drop it
        if not strict:
            return None  # automatic: torch's own replay from now on
        raise InvalidArgumentError(
            "random_ops=False, but this graph has random ops: torch's default generator "
            "advanced by %d at this replay, which ran through torch's own replay (correct, new "
            "random numbers); later replays with random_ops=False are refused: replay it with "
            "random_ops=True or the default (automatic), or capture the random ops outside "
            "the graph" % (after - before))
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
               ((st.random_ops is not True or st.no_random) and not st.random_used))


# ---- the class patch ------------------------------------------------------------------


class _GraphState:
    """What graphtoggle knows about one CUDAGraph object (attribute _graphtoggle)."""
    __slots__ = ("agent", "session", "graph", "exec", "want_keep", "finalizer", "device",
                 "random_ops", "no_random", "random_used", "rng_registered", "keep",
                 "refused", "exc_at_begin", "__weakref__")

    def __init__(self, agent, session, graph=None, exec_=None, want_keep=True):
        self.agent = agent
        self.session = session
        self.graph = graph
        self.exec = exec_
        self.want_keep = want_keep
        self.finalizer = None
        self.device = None
        self.random_ops = None    # None: automatic; True: prepare + torch's replay; False:
        #                           launch (the caller's promise, checked)
        self.no_random = False    # the check replay found no random numbers drawn
        self.random_used = False  # ... found the generator advanced: False refused
        self.rng_registered = False  # register_generator_state was called (patched)
        self.keep = ()  # what its producers write (the monitor buffers), held while it lives
        self.refused = None  # why its capture was refused (a producer in it was): never runs
        self.exc_at_begin = None  # the exception being handled when its capture began


def _owner_of(g):
    try:
        return g.__dict__.get("_graphtoggle")
    except AttributeError:
        return None


class _Session:
    """One patched period: from the first owner's patch() to the last owner's end."""
    __slots__ = ("agent", "owners", "random_ops", "states", "__weakref__")

    def __init__(self, agent, random_ops=None):
        self.agent = agent
        self.owners = 0
        self.random_ops = random_ops
        self.states = weakref.WeakSet()  # the _GraphState of each graph it adopted


def _settle_ended(s):
    """The session's last owner ended: its graphs replay as torch's own from now on, each
    launching the application's exec.  In host modes the steps that enabled some hooks ran
    libtoggle's full exec, so the application's exec may still hold an older set: each
    bound one is brought to the agent's current set (toggle_graph_prepare, on the current
    stream; nothing launched), so that an ended session's graph runs the set the agent
    reported last.  A graph the agent refuses (forgotten, destroyed) is left as it is."""
    a = s.agent
    if a.closed or a.mode == "device":  # device mode: the exec's planner reads the set
        return
    for st in list(s.states):
        if st.graph is None or st.exec is None:
            continue
        try:
            a.prepare(st.graph, st.exec, (_raw_stream or _stream_fn())(st.device))
        except GraphToggleError:
            pass


class _PatchState:
    def __init__(self):
        self.lock = threading.Lock()
        self.session = None
        self.cls = None
        self.saved = {}
        self.o_replay = None  # torch's replay while patched


_state = _PatchState()
_MISSING = object()
_METHODS = ("__init__", "capture_begin", "capture_end", "instantiate", "replay", "reset",
            "register_generator_state")


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


def patch(agent, random_ops=None):
    """Make torch.cuda.CUDAGraph toggleable for agent until the returned owner ends.

    While patched, graphs created through torch.cuda.CUDAGraph keep their template,
    capture inside the agent's capture window (planner first in device mode), are bound
    at instantiate, replay through the guard when they have producers (untouched
    otherwise), and are forgotten when reset or destroyed.  Several owners may hold the
    patch for the same agent; it is restored exactly when the last one ends.

    random_ops: None (default, automatic): the first replay of each graph is torch's own
    (after toggle_graph_prepare) and sees whether it drew random numbers (torch's default
    generator advanced, or the capture registered another generator); graphs that did not
    (decode graphs of engines that sample outside the graph: vLLM, SGLang) then replay
    through toggle_graph_launch on torch's current stream, which runs each graph's
    producer-free exec at steps that enable none of its hooks; the others keep prepare +
    torch's own replay.  True: torch's own replay for every graph.  False: the caller says
    the graphs have no random ops; the first replay checks the promise and refuses later
    replays of a graph that broke it (graphtoggle.torch.replay says how)."""
    _check_random_ops(random_ops)
    torch = _torch()
    with _state.lock:
        s = _state.session
        if s is not None:
            if s.agent is not agent:
                raise InvalidArgumentError(
                    "torch.cuda.CUDAGraph is already patched for agent %r; end its owners "
                    "(owner.end(), or graphtoggle.torch.unpatch() for all) before patching "
                    "for agent %r (one agent per process: share it)"
                    % (s.agent.name, agent.name))
            if s.random_ops != random_ops:
                raise InvalidArgumentError(
                    "torch.cuda.CUDAGraph is already patched for agent %r with random_ops=%r; "
                    "its owners must agree (end them first)" % (agent.name, s.random_ops))
            s.owners += 1
            return Patch(s)
        if agent.closed:
            raise InvalidArgumentError("patch(agent): agent %r is closed: patch an open agent"
                                       % agent.name)
        cls = torch.cuda.graphs.CUDAGraph
        names = [n for n in _METHODS if hasattr(cls, n)]
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
        _settle_ended(s)
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
        st = _GraphState(s.agent, s, want_keep=bool(keep_graph))
        self.__dict__["_graphtoggle"] = st
        s.states.add(st)
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
        if s.agent.closed:
            raise _closed_refusal(s.agent, "torch.cuda.CUDAGraph() under graphtoggle.torch.patch")
        o_init(self, True, *args, **kwargs)
        _adopt(self, s, keep_graph)
    methods["__init__"] = __init__

    def capture_begin(self, *args, **kwargs):
        st = _owner_of(self)
        s = _state.session
        if st is None or s is None or st.session is not s:
            return o_begin(self, *args, **kwargs)  # not ours: torch's own capture
        agent = s.agent
        if agent.closed:
            raise _closed_refusal(agent, "a CUDA graph capture under graphtoggle.torch.patch")
        agent.capture_begin()
        # capture_end tells an exception that ends the capture (torch.cuda.graph's __exit__
        # as it propagates) from one an enclosing except clause was already handling
        st.exc_at_begin = sys.exc_info()[1]
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
        keep = ()
        refusal = agent.capture_refusal()  # read before the window closes
        exc = sys.exc_info()[1]
        if refusal is None and exc is not None and exc is not st.exc_at_begin:
            # torch.cuda.graph's __exit__ as an exception from the captured code propagates
            refusal = "the captured code raised %s: %s" % (type(exc).__name__, exc)
        st.exc_at_begin = None
        try:
            o_end(self)
        finally:
            refusal = refusal or agent.capture_refusal()
            keep = agent.capture_end()
        graph = self.raw_cuda_graph()
        if refusal is not None:
            # a producer was refused in this capture, or the captured code raised: the
            # capture ended midway (torch.cuda.graph's __exit__ ends it as the error
            # propagates), so the graph holds only the producers recorded before; it is
            # never bound, and its replays are refused
            st.refused = refusal
            _forget(weakref.ref(agent), graph)  # its record (device mode: its registry slot)
            if not st.want_keep:
                self.instantiate()
            return None
        producers = agent.has_producers(graph)
        _watch_capture(agent, graph, producers)
        if producers:
            st.keep = keep
            st.graph = graph
            st.device = _torch().cuda.current_device()
            st.random_ops = s.random_ops
            if st.random_ops is None and st.rng_registered:
                st.random_used = True  # another generator: the offset check cannot see it
            _want_bare(st)  # before the bind: decided once, kept through rebinds
            st.finalizer = weakref.finalize(self, _forget, weakref.ref(agent), graph)
            self.instantiate()  # binds (patched instantiate)
        else:
            if agent.mode == "device":
                # the planner made the graph known to the agent (a registry slot): forget
                # it once torch destroys the graph, so that freed graphs (CUDA Graph
                # Trees, pieces without hooks) do not fill the registry
                st.finalizer = weakref.finalize(self, _forget, weakref.ref(agent), graph)
            if not st.want_keep:
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
            if st is not None and st.refused is not None:
                raise _refused(st.refused)
            return o_replay(self)  # unrelated, or of an ended session: torch's own
        if st.random_ops is not True:
            return _replay(st, self, st.random_ops)  # launch (the bare exec can run), or the check
        if st.exec is None:
            self.instantiate()
        a = st.agent
        # the agent's prepare inlined (one Python frame less on the hot path)
        stream = (_raw_stream or _stream_fn())(st.device)
        rc = a._prepare(a._h or a._agent(), st.graph, st.exec, stream)
        if rc:
            a._raise(rc, "prepare")
        r = o_replay(self)
        if a._rec is not None:
            a._rec.after(st.graph, stream)  # recording: after torch's launch, on its stream
        return r

    def reset(self):
        st = _owner_of(self)
        if st is not None:
            if st.finalizer is not None:
                st.finalizer()  # forgets now, once
            st.graph = st.exec = None
        r = o_reset(self)
        if st is not None:
            st.keep = ()  # the exec is gone: nothing replays into the buffers any more
        return r

    o_register = orig.get("register_generator_state")

    def register_generator_state(self, *args, **kwargs):
        # a generator registered with the capture (CUDA Graph Trees register the ones
        # compiled code passes in): its random ops are invisible to the default
        # generator's offset check, so automatic random_ops keeps torch's own replay
        st = _owner_of(self)
        if st is not None:
            st.rng_registered = True
        return o_register(self, *args, **kwargs)

    methods.update(capture_begin=capture_begin, capture_end=capture_end,
                   instantiate=instantiate, replay=replay, reset=reset)
    if o_register is not None:
        methods["register_generator_state"] = register_generator_state
    return methods


# ---- never a silent loss -----------------------------------------------------------------

_cu = None


def _graph_nodes(agent, graph):
    """The number of nodes of graph (cuGraphGetNodes; the simulator's count), None when it
    cannot be read."""
    global _cu
    if agent.backend == "sim":
        return agent.sim.node_count(graph) if agent.sim is not None else None
    try:
        if _cu is None:
            cu = ctypes.CDLL("libcuda.so.1")
            cu.cuGraphGetNodes.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.POINTER(ctypes.c_size_t)]
            cu.cuGraphGetNodes.restype = ctypes.c_int
            _cu = cu
        n = ctypes.c_size_t(0)
        if _cu.cuGraphGetNodes(graph, None, ctypes.byref(n)) == 0:
            return n.value
    except (OSError, AttributeError):
        pass
    return None


class _Watch:
    """Graphs captured under the patch while an attachment with check_captures=True is
    live on the agent (counted since the latest such attach())."""
    __slots__ = ("attached", "graphs", "with_producers", "silent", "agent_ref", "stale",
                 "stale_silent")

    def __init__(self, agent):
        self.agent_ref = weakref.ref(agent)
        self.attached = 0
        self.stale = {}  # attachment serial -> code torch.compile had compiled before it
        self.restart()

    def restart(self):
        self.graphs = self.with_producers = self.silent = 0
        self.stale_silent = 0  # silent graphs while such code is still compiled

    def stale_code(self):
        """True while code torch.compile compiled before a live attach() is still in its
        caches (torch.compiler.reset() drops it): graphs captured from it run no hooks."""
        return any(_still_compiled(snap) for snap in self.stale.values())

    def report(self):
        return {"graphs": self.graphs, "with_producers": self.with_producers,
                "silent": self.silent}

    def refuse(self, after=None):
        """Raise the CaptureError owed (once); after: what happens next, for the message
        (default: step()'s)."""
        a = self.agent_ref()
        if a is not None:
            a._gt_check = None  # once: the next step() begins
        if after is None:
            after = "this step did not begin; the next step() does"
        if self.stale_silent:
            n, self.stale_silent = self.stale_silent, 0
            raise CaptureError(
                "%d CUDA graph(s) captured under graphtoggle.torch.patch recorded no producer "
                "while torch.compile still holds code it compiled before hooks were attached "
                "to agent %r (attach() warned): graphs captured from that code run without "
                "the hooks (e.g. a batch size compiled before attach(); %d graph(s) with "
                "producers were captured since attach()).  Attach before the model is "
                "first compiled, or call torch.compiler.reset() after attach() and capture "
                "again; "
                "attach(..., check_captures=False) if these graphs are meant to have no "
                "producer (%s)"
                % (n, a.name if a is not None else "?", self.with_producers, after))
        raise CaptureError(
            "%d CUDA graph(s) captured under graphtoggle.torch.patch while hooks are attached "
            "to agent %r, and none recorded a producer: the code captured runs without the "
            "hooks (compiled before attach(), e.g. by torch.compile or an engine that skips "
            "dynamo's guards, or loaded from a compile cache built without them).  Attach "
            "the hooks before the model is first compiled and clear or disable that cache; "
            "attach(..., check_captures=False) if such graphs are meant to have no producer "
            "(%s)"
            % (self.silent, a.name if a is not None else "?", after))


def _watch_of(agent):
    w = agent.__dict__.get("_gt_watch")
    if w is None:
        w = agent._gt_watch = _Watch(agent)
    return w


def _watch_capture(agent, graph, producers):
    w = agent.__dict__.get("_gt_watch")
    if w is None or not w.attached:
        return
    w.graphs += 1
    if producers:
        w.with_producers += 1
        if not w.stale_silent:
            # the hooks ran in a capture: graphs without them are pieces without hooks
            agent._gt_check = None
        return
    n = _graph_nodes(agent, graph)
    # device mode captured the planner first in every graph: one kernel node of ours
    if n is not None and n <= (1 if agent.mode == "device" else 0):
        return  # an empty capture (CUDA Graph Trees' pool keeper): no hook could run
    w.silent += 1
    if w.stale and w.stale_code():
        # code compiled before attach() is still cached: this graph may be captured from
        # it, whatever other graphs recorded (pieces without hooks cannot be told apart)
        w.stale_silent += 1
        agent._gt_check = w.refuse
    elif w.with_producers == 0:
        agent._gt_check = w.refuse


def _compiled_snapshot():
    """What torch.compile has compiled, still holds and may run nn.Modules with: weak
    references to the code dynamo generated, one per entry of its caches
    (eval_frame._debug_get_cache_entry_list of each code object it converted,
    convert_frame.input_codes.seen) that _may_run_modules keeps; None when it holds none,
    True when it compiled something that cannot be listed."""
    d = sys.modules.get("torch._dynamo")
    utils = getattr(d, "utils", None) if d is not None else None
    try:
        if utils is None or not utils.counters["stats"]["unique_graphs"]:
            return None
    except (AttributeError, KeyError, TypeError):
        return None
    entries = _cache_entries()
    if entries is None:
        return True
    # inline_inbuilt_nn_modules=False (not torch 2.11's default) traces modules as constants
    # of the graph: then a guard filter can leave no trace of a module in the entry
    inline = getattr(getattr(d, "config", None), "inline_inbuilt_nn_modules", False) is True
    module = _torch().nn.Module
    # none kept: torch.compiler.reset() ran, or all that is cached reaches no nn.Module
    return [weakref.ref(e.code) for code, e in entries
            if not inline or _may_run_modules(module, code, e)] or None


def _cache_entries():
    """(the code object dynamo converted, one of its cache entries) for every entry in
    dynamo's caches now (a recompile makes new ones; reset drops them all), or None when
    dynamo's internals are not as read (torch 2.1 to 2.11)."""
    cf = sys.modules.get("torch._dynamo.convert_frame")
    ef = sys.modules.get("torch._dynamo.eval_frame")
    seen = getattr(getattr(cf, "input_codes", None), "seen", None)
    get = getattr(ef, "_debug_get_cache_entry_list", None)
    if not isinstance(seen, list) or get is None:
        return None
    out = []
    try:
        for r in seen:
            code = r()
            if code is not None:
                out.extend((code, e) for e in get(code))
    except (AttributeError, TypeError, RuntimeError):
        return None
    return out


# what nn.Module.__getattr__ reads: the code dynamo generates (entry.code) loads every
# parameter and buffer of the modules it traced from them, as inputs of its graph
_MODULE_STORES = frozenset(("_modules", "_parameters", "_buffers"))


def _may_run_modules(module, code, entry):
    """Whether the dynamo cache entry (of the converted code object code) may run an
    nn.Module (module: the class), hence attached modules traced without their hooks.
    Fail-closed: False only where the entry shows no way to one, that is (torch 2.11,
    with inline_inbuilt_nn_modules=True) when all of these hold, and its guards can be
    read:
    - the code it generated reads no _modules, _parameters or _buffers (it would load the
      parameters of any module it traced, whatever guards were filtered away);
    - code is no method (no argument named self) and has no free variables (a closure
      may hold a module), and no global it names is an nn.Module;
    - no node of its guard tree (entry.guard_manager.root) guards an nn.Module: dynamo
      guards the type of every module it traces.
    Which modules it traced cannot narrow this further: their guards are on types, not
    instances (a model's compiled forward serves another instance of its class), and
    guard filters (torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe) drop nodes of
    some modules but not of their parents."""
    try:
        if _MODULE_STORES.intersection(entry.code.co_names):
            return True
        if "self" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount] \
                or code.co_freevars:
            return True
        g = entry.guard_manager.global_scope.get("G") or {}
        if any(isinstance(g.get(n), module) for n in code.co_names):
            return True
        nodes = [entry.guard_manager.root]
        while nodes:
            m = nodes.pop()
            t = m.get_type_of_guarded_value()
            if isinstance(t, type) and issubclass(t, module):
                return True
            pairs = getattr(m, "get_key_value_managers", None)  # a DictGuardManager
            if pairs is not None:
                nodes.extend(x for kv in pairs().values() for x in kv if x is not None)
            nodes.extend(m.get_child_managers())
    except (AttributeError, TypeError, RuntimeError):
        return True
    return False


def _still_compiled(snap):
    """True while any code of snap is still in dynamo's caches."""
    if snap is True:
        return True
    now = _cache_entries()
    if now is None:
        return True
    ids = {id(e.code) for _, e in now}
    return any(r() is not None and id(r()) in ids for r in snap)


# ---- nn.Module forward hooks ---------------------------------------------------------------


class Attachment:
    """Producers attached to modules' forward hooks (graphtoggle.torch.attach).
    buffers: {(hook type, layer, shape, dtype): tensor}: the declared buffers (made by
    attach()), or, without declared buffers, those made as shapes are met.
    hook_ids: {(hook type, layer): the int torch.ops.graphtoggle.tap takes}."""

    def __init__(self, agent):
        self.agent = agent
        self.buffers = {}
        self.hook_ids = {}
        self._handles = []
        self._watched = False
        self._serial = next(_ATTACH_SERIAL)

    def buffer(self, hook_type, layer, shape=None):
        """The monitor buffer of (type, layer) (for one shape when several were made).
        With declared buffers (max_tokens): a forward of n tokens wrote its first n rows."""
        found = [b for (t, l, s, _), b in self.buffers.items()
                 if t == hook_type and l == layer and (shape is None or tuple(shape) == s)]
        if len(found) != 1:
            raise KeyError("%d buffers for (%s, %d%s)" % (len(found), hook_type, layer,
                                                           ", %s" % (shape,) if shape else ""))
        return found[0]

    def captures(self):
        """Graphs captured under the patch since this attach (check_captures=True):
        {"graphs", "with_producers", "silent": non-empty ones without a producer}."""
        return _watch_of(self.agent).report()

    def verify_captures(self):
        """Raises now the CaptureError that the next agent.step() would raise for the graphs
        captured so far (check_captures=True); returns captures() when none is owed.
        For an engine whose captures end at start-up: called then (graphtoggle.vllm calls
        it after Worker.compile_or_warm_up_model), a capture without producers fails the
        start-up instead of the first step of a serving engine.  The error is owed once,
        as step()'s: raised here, no step() raises it again."""
        check = self.agent._gt_check
        if check is not None:
            check(after="raised by Attachment.verify_captures(); step() will not raise it "
                        "again")
        return self.captures()

    def detach(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        for k in [k for k in _TAP_BUFS
                  if (k[0] if isinstance(k, tuple) else k >> _TAP_KEY_SHIFT) == self._serial]:
            del _TAP_BUFS[k]
        ops = sys.modules.get(__package__ + ".ops")
        if ops is not None:
            ops.forget(self.hook_ids.values())  # the op's cached views hold our buffers
        if self._watched:
            self._watched = False
            w = _watch_of(self.agent)
            w.attached -= 1
            w.stale.pop(self._serial, None)
            if not w.attached:
                self.agent._gt_check = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()


def _method_for(agent, method):
    """attach()'s and hook_id()'s method, checked; default by the agent's mode."""
    if method is None:
        return "copy_out" if agent.mode == "device" else "mul"
    if method not in ("mul", "copy_out"):
        raise InvalidArgumentError("method must be 'mul' or 'copy_out', got %r" % (method,))
    if method == "mul" and agent.mode == "device":
        raise NotSupportedError("device mode needs method='copy_out' (torch ops cannot carry "
                                "the device-updatable launch attribute)")
    return method


def _ops():
    """graphtoggle.ops: imports torch and registers torch.ops.graphtoggle.tap."""
    from . import ops
    return ops


def register_op():
    """Register torch.ops.graphtoggle.tap (imports torch) and return it (its default
    overload).  attach() and hook_id() do it on first use."""
    return _ops().op


def hook_id(agent, hook, method=None):
    """The int torch.ops.graphtoggle.tap(x, buf, hook_id) takes for hook ((type, layer))
    of agent (graphtoggle.ops.hook_id); registers the op."""
    return _ops().hook_id(agent, hook, method)


def _compiling(torch):
    c = getattr(torch, "compiler", None)
    f = getattr(c, "is_compiling", None)
    return f is not None and f()


def _capture_query(torch):
    try:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except RuntimeError:
        return False


def _mark_static(torch, t):
    """Mark a monitor buffer as a static address for torch.compile: CUDA Graph Trees only
    record graphs whose mutated inputs are static (else they skip cudagraphs for it)."""
    d = getattr(torch, "_dynamo", None)
    if d is None:
        try:
            import torch._dynamo as d  # noqa: F811
        except ImportError:
            return
    m = getattr(d, "mark_static_address", None)
    if m is not None:
        m(t)


def _widths(width, types):
    """{hook type: trailing shape tuple} from an int, a tuple or a dict per type."""
    def one(w, t):
        if isinstance(w, int) and not isinstance(w, bool):
            w = (w,)
        try:
            w = tuple(w)
        except TypeError:
            w = None
        if not w or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                            for n in w):
            raise InvalidArgumentError(
                "width for %s must be a positive int or a tuple of them (the output's "
                "trailing dims: hidden size), got %r" % (t, w))
        return w
    if isinstance(width, dict):
        missing = [t for t in types if t not in width]
        if missing:
            raise InvalidArgumentError("width has no entry for %s" % ", ".join(map(str, missing)))
        return {t: one(width[t], t) for t in types}
    return {t: one(width, t) for t in types}


def _selects(select, types):
    """{hook type: select callable or None} from attach()'s select=."""
    if isinstance(select, dict):
        extra = [t for t in select if t not in types]
        if extra:
            raise InvalidArgumentError("select= names %s, which modules= does not"
                                       % ", ".join(map(str, extra)))
        out = {t: select.get(t) for t in types}
    else:
        out = {t: select for t in types}
    bad = [t for t, f in out.items() if f is not None and not callable(f)]
    if bad:
        raise InvalidArgumentError("select for %s must be callable (output -> tensor), got %r"
                                   % (bad[0], out[bad[0]]))
    return out


def attach(agent, modules, buffers=None, select=None, method=None, *, max_tokens=None,
           width=None, dtype=None, device=None, check_captures=True):
    """Attach producers to nn.Module forward hooks: each hook calls the registered op
    torch.ops.graphtoggle.tap (graphtoggle.ops), which records a producer inside a
    capture and, outside, copies exactly when the current step enables the hook.  Eager,
    torch.compile(fullgraph=True) and CUDA Graph Trees alike: what the hook does under
    torch.compile is traceable (the op call; no allocation, ctypes or capture query).

    modules: {hook type: [module for layer 0, 1, ...]} (the layer is the list index), e.g.
        {"resid_post": model.layers, "mlp_out": [l.mlp for l in model.layers]}.
    max_tokens, width, dtype, device: declared monitor buffers, made now (outside any
        compile and capture): one per hook, shape (max_tokens, *width) (width: the
        output's trailing dims, an int, a tuple, or a dict per hook type), dtype (default
        torch's default dtype) on device (default the current CUDA device).  An output of
        n tokens (n = numel / prod(width), any leading dims) is copied into the first n
        rows.  Needed for models torch.compile traces before any eager run.
    buffers: a dict {(hook type, layer): tensor} (one buffer per hook, outputs copied into
        its first numel elements), or a callable (hook type, layer, output) -> buffer
        called the first time a shape is met outside compiled code; default (neither, nor
        max_tokens): a buffer per (hook, shape, dtype), made by the first eager forward
        outside a capture that meets the shape (torch's warm-up); compiled code and
        captures that meet a shape without a buffer are refused, naming the fix.
    select: output -> tensor (default: the output, or its first element for tuples), or a
        dict {hook type: that callable, or None for the default}.
    method: "mul" (torch.mul(x, 1, out=buf) in a producer region; not device mode) or
        "copy_out" (libtoggle's built-in copy kernel, needed for device mode); default by
        the agent's mode.
    check_captures: count graphs captured under the patch from now on; when some were and
        none recorded a producer, the next agent.step() raises CaptureError once (the
        compiled code runs without the hooks: docs/python.md, Never a silent loss).

    Everything is checked before anything is attached.  Returns an Attachment;
    detach() removes every hook."""
    torch = _torch()
    ops = _ops()
    if agent.closed:
        raise InvalidArgumentError("attach(): agent %r is closed" % agent.name)
    method = _method_for(agent, method)
    if _compiling(torch) or _capture_query(torch):
        raise InvalidArgumentError("attach() inside torch.compile or a CUDA graph capture: "
                                   "attach before (its buffers are made now)")
    plan = []
    for hook_type, mods in modules.items():
        agent.catalog.type_index(hook_type)  # unknown names fail now, with the known ones
        mods = list(mods)
        if len(mods) > agent.catalog.n_layers:
            raise InvalidArgumentError("%d modules for %s, the catalog has %d layers"
                                       % (len(mods), hook_type, agent.catalog.n_layers))
        for layer, mod in enumerate(mods):
            if not callable(getattr(mod, "register_forward_hook", None)):
                raise InvalidArgumentError("modules[%r][%d] is not an nn.Module: %r"
                                           % (hook_type, layer, mod))
            plan.append((hook_type, layer, mod))
    if max_tokens is not None:
        if buffers is not None:
            raise InvalidArgumentError("attach(): max_tokens= declares the buffers; "
                                       "buffers= cannot be given too")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidArgumentError("max_tokens must be a positive int, got %r"
                                       % (max_tokens,))
        if width is None:
            raise InvalidArgumentError("attach(max_tokens=N) needs width= (the output's "
                                       "trailing dims, e.g. the hidden size)")
        widths = _widths(width, list(modules))
    elif width is not None or dtype is not None or device is not None:
        raise InvalidArgumentError("width=, dtype= and device= declare buffers with "
                                   "max_tokens=N; give it too")
    elif isinstance(buffers, dict):
        missing = [(t, l) for t, l, _ in plan if (t, l) not in buffers]
        if missing:
            raise InvalidArgumentError("buffers= has no tensor for %s" % ", ".join(
                "%s:%d" % h for h in missing[:8]))
    elif buffers is not None and not callable(buffers):
        raise InvalidArgumentError("buffers must be a dict {(type, layer): tensor} or a "
                                   "callable, got %r" % (buffers,))
    selects = _selects(select, list(modules))
    ids = {(t, l): ops.hook_id(agent, (t, l), method) for t, l, _ in plan}
    big = [h for h in ids.values() if not 0 <= h <= _TAP_HID_MASK]
    if big:  # before any buffer or hook is made: nothing partly attached
        raise InvalidArgumentError(
            "hook id %d does not fit the buffer table's %d-bit key (this process made more "
            "agents than graphtoggle.torch can tell apart): nothing attached; close agents "
            "and reuse them instead of making new ones" % (big[0], _TAP_KEY_SHIFT))
    stale = _compiled_snapshot()
    if stale is not None:
        warnings.warn(
            "graphtoggle.torch.attach(): torch.compile has already compiled code in this "
            "process that may run nn.Modules; code compiled before the hooks were attached "
            "does not run them (dynamo does not recompile for them): attach before "
            "compiling the model, or call torch.compiler.reset() after attach()",
            stacklevel=2)

    att = Attachment(agent)
    att.hook_ids = ids
    fixed = {}
    if max_tokens is not None:
        if device is None:
            device = ("cuda:%d" % torch.cuda.current_device()) if torch.cuda.is_available() \
                else "cpu"
        dt = dtype if dtype is not None else torch.get_default_dtype()
        for t, l, _ in plan:
            fixed[(t, l)] = torch.empty((max_tokens,) + widths[t], dtype=dt, device=device)
    elif isinstance(buffers, dict):
        fixed = {(t, l): buffers[(t, l)] for t, l, _ in plan}
    for (t, l), b in fixed.items():
        _mark_static(torch, b)
        att.buffers[(t, l, tuple(b.shape), b.dtype)] = b
    for t, l, mod in plan:
        att._handles.append(mod.register_forward_hook(_forward_hook(
            att, torch, ops, t, l, ids[(t, l)], fixed.get((t, l)),
            buffers if callable(buffers) else None, selects[t])))
    if check_captures:
        w = _watch_of(agent)
        w.attached += 1
        w.restart()
        if stale is not None:
            w.stale[att._serial] = stale
        att._watched = True
    return att


# torch.ops.graphtoggle.tap.default, set by the first _forward_hook.  The hooks call the op
# through this module global, not a closure cell: dynamo guards every closure cell a traced
# hook reads, and an op object in a cell (neither immutable nor a dict, module or function)
# makes the hook, hence its module and every module above it, unsafe for dynamo's
# recursive dict-tag fast path: each call then ran all ~40 guards of every hooked module
# (the hook's code, each cell, the hook dict's keys) instead of one tag check per layer
# (issue 23, mode c: +120 to +180 us of host time per call on the H200).  A global is
# guarded once for all hooks, outside the modules' subtrees (bench/torch_compile_host.py).
_TAP_OP = None
# torch.compiler.is_compiling, set with _TAP_OP: a global for the same reason (a closure
# cell holding it is one guarded cell per hook; a global is guarded once)
_IS_COMPILING = None

# The monitor buffers as compiled code reads them: {serial << _TAP_KEY_SHIFT | hook id:
# buffer} for declared buffers, {(serial, hook id, shape, dtype): buffer} for those made
# as shapes are met.  A buffer is a graph input that compiled code fetches at every call
# from where dynamo found it: from a hook's closure cell that is a Python helper call per
# hook (dict_keys_getitem on the module's _forward_hooks, then the cell: 24 of them per
# call of the 8-layer bench model, about +45 us of host time per call of mode c on the
# H200); from a global dict it is one subscript.  Keys are constants in the hook's closure
# (ints, tuples: immutable, safe for the dict-tag fast path); detach() removes its
# entries, so code compiled with them fails its guards and is compiled again.
_TAP_BUFS = {}
# A declared buffer's key is one int, serial << _TAP_KEY_SHIFT | hook id, and the traced
# hook takes its hook id from it: the hook's closure then holds one int cell that compiled
# code reads, guarded once (the tuple (serial, hook id) and the id were four guards per
# hook, every one evaluated at every call where transformers' layers are not tag safe, as
# with transformers 5.17; bench/results/h100-2026-12-07-session23/guards.py)
_TAP_KEY_SHIFT = 32
_TAP_HID_MASK = (1 << _TAP_KEY_SHIFT) - 1
_ATTACH_SERIAL = itertools.count(1)


def _refuse_in_capture(agent, err):
    """err, after telling the agent whose hook it is, and the patched agent when that is
    another, that the open capture holds a refused producer: the graph holds only the
    producers before it, so whichever agent's window is open must not bind it."""
    agent.refuse_capture(err)
    p = patched()
    if p is not None and p is not agent:
        p.refuse_capture(err)
    return err


def _forward_hook(att, torch, ops, hook_type, layer, hid, buf, make, select):
    global _TAP_OP, _IS_COMPILING
    if _TAP_OP is None:
        _TAP_OP = torch.ops.graphtoggle.tap.default
        _IS_COMPILING = torch.compiler.is_compiling
    tap = ops.tap
    shapes = {}  # without a declared buffer: (shape, dtype) -> buffer
    missing = None if buf is not None else torch.empty(0)  # made now, outside compile
    serial = att._serial
    declared = buf is not None
    key = serial << _TAP_KEY_SHIFT | hid  # attach() checked that hid fits
    if declared:
        _TAP_BUFS[key] = buf

    def new_buffer(x):
        # outside a capture (torch's warm-up runs): make the buffer for this shape here.  A
        # buffer made inside the capture comes from the graph's private pool and can reuse
        # a block an earlier kernel of the same graph writes (seen on the H200: every
        # "disabled" producer's buffer changed at each replay).
        if _capture_query(torch) and make is None:
            raise _refuse_in_capture(att.agent, InvalidArgumentError(
                "no monitor buffer for %s:%d with shape %s: run the model once outside the "
                "capture with this batch size first (torch's warm-up before capture), or "
                "declare buffers (attach(..., max_tokens=N, width=...)) or pass buffers="
                % (hook_type, layer, tuple(x.shape))))
        b = make(hook_type, layer, x) if make is not None else \
            torch.empty_like(x, memory_format=torch.contiguous_format)
        _mark_static(torch, b)
        shapes[(tuple(x.shape), x.dtype)] = b
        _TAP_BUFS[(serial, hid, tuple(x.shape), x.dtype)] = b
        att.buffers[(hook_type, layer, tuple(x.shape), x.dtype)] = b
        return b

    if declared and select is None:
        # the default (no select): the traced hook reads one closure cell, key; a select
        # cell, even None, is three more guard lines per hook evaluated at every call
        def fn(module, args, output):
            x = output[0] if isinstance(output, (tuple, list)) else output
            if _IS_COMPILING():
                # traced by torch.compile: only the op call, its buffer and hook id from
                # one int cell (see _TAP_KEY_SHIFT)
                _TAP_OP(x, _TAP_BUFS[key], key & _TAP_HID_MASK)  # globals: see _TAP_OP
                return None
            tap(x, buf, hid)  # the op's eager body, without the dispatcher
            return None
        return fn

    if declared:
        def fn(module, args, output):
            x = select(output)
            if _IS_COMPILING():
                _TAP_OP(x, _TAP_BUFS[key], key & _TAP_HID_MASK)  # as above
                return None
            tap(x, buf, hid)
            return None
        return fn

    def fn(module, args, output):
        x = select(output) if select is not None else (
            output[0] if isinstance(output, (tuple, list)) else output)
        if _IS_COMPILING():
            # traced by torch.compile: only the op call (buffers are made outside).  A
            # shape without a buffer gets the empty placeholder, which the op's fake
            # implementation refuses at trace time, naming the fix (a raise here would
            # not trace)
            b = _TAP_BUFS.get((serial, hid, tuple(x.shape), x.dtype), missing)
            _TAP_OP(x, b, hid)  # a global: see _TAP_OP
            return None
        b = shapes.get((tuple(x.shape), x.dtype))
        if b is None:
            b = new_buffer(x)
        tap(x, b, hid)  # the op's eager body, without the dispatcher
        return None

    return fn


__all__ = ["capture", "replay", "patch", "unpatch", "patched", "Patch", "attach", "Attachment",
           "copy_geometry", "hook_id", "register_op"]
