"""Agent: one libtoggle agent (toggle_agent_open), with Python sets, exceptions and
context managers.  Every behaviour is libtoggle's; this file only converts."""

import ctypes
from contextlib import contextmanager

from . import _lib
from .errors import (CaptureError, GraphToggleError, InvalidArgumentError, error_for)
from .hookset import Catalog, HookSet

_MODES = {"lazy": _lib.MODE_LAZY, "eager": _lib.MODE_EAGER, "device": _lib.MODE_DEVICE}
_MODE_NAMES = {v: k for k, v in _MODES.items()}
_BACKENDS = {"cuda": _lib.BACKEND_CUDA, "sim": _lib.BACKEND_SIM}

_byref = ctypes.byref


def _handle(x, what):
    """A raw handle (int) from an int, None, or an object with .cuda_stream."""
    if x is None:
        return None
    if isinstance(x, int):
        return x
    s = getattr(x, "cuda_stream", None)
    if isinstance(s, int):
        return s
    raise InvalidArgumentError("%s must be a raw handle (int) or a stream object with "
                               ".cuda_stream; got %r" % (what, x))


class Agent:
    """A libtoggle agent.

    Agent(name, hooks={"resid_post": 32, "mlp_out": 32}, mode="lazy"|"eager"|"device",
          socket=None, group=None, strict=False, backend="cuda"|"sim", sim=None,
          bare_exec=None, full_exec=True, set_exec=True)

    hooks: hook type -> layer count (libtoggle's catalog has one layer count, so the
    counts must be equal), or a sequence of type names with layers=N.
    backend "sim" runs on the in-tree simulator (graphtoggle.sim.Sim; one is created
    when sim is None and closed with the agent).
    bare_exec: the producer-free exec per bound graph (graph_status()'s bare_exec /
    bare_running say which exec a graph's launches run).  None (default): only where a
    replay can run it: every graph bound through bind/instantiate (launched with
    launch()), and torch graphs replayed through toggle_graph_launch (random_ops=False);
    not for torch graphs replayed by prepare + torch's own replay (the default), which
    never run it.  True: every bound graph.  False: none (toggle_config.no_bare_exec).
    full_exec: the full exec (a clone of the graph, no lifetime reference), built with the
    producer-free one and run at the steps whose set enables every hook of the graph (and,
    lazy and eager, at every other step the producer-free one does not fit, its producers
    set to the step's set).  False: none (toggle_config.no_full_exec; those steps run the
    main exec, whose launches the driver paces), for engines that cannot spare one more
    exec per graph.
    set_exec: lazy and eager, a set in between that has held for 8 steps gets, one graph
    a step at step(), an exec of each graph it runs without the producers it leaves off
    (graph_status()'s set_exec / set_running); all on, once it ran on a full exec a set in
    between set (node sets leave it slower all on), an all-on exec of its own at the next
    step, kept (all on alternating with other sets runs it).  False: none
    (toggle_config.no_set_exec), for engines that cannot spare a build (about a bind's) in
    a step or the execs' memory.
    assemble_execs: lazy and eager, the producer-free and full execs are built node by
    node (as device mode does), which ran the compiled Llama faster than clones
    (docs/libtoggle.md); a graph the assembly cannot copy is cloned (stats()
    assembled_builds, assemble_fallbacks).  False: both are clones of the captured
    graph (toggle_config.clone_execs).
    """

    def __init__(self, name, hooks, mode="lazy", socket=None, group=None, strict=False,
                 backend="cuda", sim=None, layers=None, bare_exec=None, full_exec=True,
                 set_exec=True, assemble_execs=True):
        self._h = None
        self._lib = lib = _lib.lib()
        if not isinstance(name, str) or not name or len(name.encode()) >= _lib.MAX_NAME:
            raise InvalidArgumentError("agent name must be a non-empty str shorter than %d bytes"
                                       % _lib.MAX_NAME)
        if isinstance(hooks, dict):
            counts = set(hooks.values())
            if len(counts) != 1:
                raise InvalidArgumentError(
                    "every hook type needs the same layer count (libtoggle's catalog has one); "
                    "got %r" % (hooks,))
            n_layers = counts.pop() if layers is None else layers
            names = list(hooks)
        else:
            names = list(hooks)
            n_layers = layers
        if not isinstance(n_layers, int) or isinstance(n_layers, bool):
            raise InvalidArgumentError("layer count must be an int (hooks={'type': N} or layers=N)")
        if mode not in _MODES:
            raise InvalidArgumentError("mode must be one of %s, got %r" % (", ".join(_MODES), mode))
        if bare_exec is not None and not isinstance(bare_exec, bool):
            raise InvalidArgumentError("bare_exec must be None, True or False, got %r"
                                       % (bare_exec,))
        if not isinstance(full_exec, bool):
            raise InvalidArgumentError("full_exec must be True or False, got %r" % (full_exec,))
        if not isinstance(set_exec, bool):
            raise InvalidArgumentError("set_exec must be True or False, got %r" % (set_exec,))
        if not isinstance(assemble_execs, bool):
            raise InvalidArgumentError("assemble_execs must be True or False, got %r"
                                       % (assemble_execs,))
        if backend not in _BACKENDS:
            raise InvalidArgumentError("backend must be 'cuda' or 'sim', got %r" % (backend,))
        self.catalog = Catalog(names, n_layers)
        self._own_sim = None
        if backend == "sim" and sim is None:
            from .sim import Sim
            sim = self._own_sim = Sim()
        self.sim = sim
        cfg = _lib.Config(
            name=name.encode(), group=group.encode() if group else None,
            catalog=self.catalog._c, mode=_MODES[mode], strict=bool(strict),
            backend=_BACKENDS[backend], sim=sim.handle if sim is not None else None,
            socket_path=socket.encode() if socket else None, no_bare_exec=bare_exec is False,
            no_full_exec=not full_exec, no_set_exec=not set_exec,
            clone_execs=not assemble_execs)
        h = _lib.P()
        rc = lib.toggle_agent_open(_byref(cfg), _byref(h))
        if rc:
            if self._own_sim:
                self._own_sim.close()
            # no agent, hence no last-error text: the code's description and what we asked
            raise error_for(rc, "toggle_agent_open(name=%r, mode=%s, backend=%s%s): %s"
                            % (name, mode, backend, ", socket=%r" % socket if socket else "",
                               lib.toggle_strerror(rc).decode()))
        self._h = h.value
        self.name = name
        self.backend = backend
        self.requested_mode = mode
        self.bare_exec = bare_exec
        self._step = -1
        self._cset = _lib.Set()
        self._last_raw = None
        self._last_set = None
        # graphtoggle.torch: a check due at the next step (a capture under the patch while
        # hooks are attached recorded no producer: docs/python.md, Never a silent loss)
        self._gt_check = None
        # graphtoggle.record.Recorder once recorder() opened the ring: graphtoggle.torch
        # and the op test it (one attribute load) before recording behind torch's replay
        self._rec = None
        # objects a producer recorded in an open capture window writes into (the torch
        # op's monitor buffers): capture_end hands them to the graph's owner, which holds
        # them while the graph can replay (docs/python.md, Buffer lifetime)
        self._capture_keep = []
        self._capture_depth = 0
        self._capture_refusal = None  # the first producer refused in the open window
        # the per-step path: bound functions and a prebuilt reference, no lookups
        self._launch = lib.toggle_graph_launch
        self._prepare = lib.toggle_graph_prepare
        self._step_begin = lib.toggle_step_begin
        self._set_enabled = lib.toggle_set_enabled
        self._cset_ref = _byref(self._cset)

    # ---- lifecycle -------------------------------------------------------------
    def close(self):
        """Close the agent (after the launches made through it completed)."""
        if self._h:
            self._rec = None
            self._lib.toggle_agent_close(self._h)
            self._h = None
        if self._own_sim:
            self._own_sim.close()
            self._own_sim = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self):
        return self._h is None

    def _agent(self):
        if not self._h:
            raise InvalidArgumentError("agent %r is closed" % getattr(self, "name", "?"))
        return self._h

    def _raise(self, rc, what, hint=None):
        detail = "%s: %s" % (what, self.last_error or self._lib.toggle_strerror(rc).decode())
        if hint:
            detail += " (%s)" % hint
        raise error_for(rc, detail)

    @property
    def last_error(self):
        if not self._h:
            return ""
        s = self._lib.toggle_last_error(self._h)
        return s.decode(errors="replace") if s else ""

    @property
    def mode(self):
        """The mode the agent runs in after any fallback: 'lazy', 'eager' or 'device'."""
        return _MODE_NAMES[self._lib.toggle_agent_mode(self._agent())]

    # ---- hook sets ---------------------------------------------------------------
    def hookset(self, hooks):
        """A HookSet from a spec string, (type, layer) pairs, or a HookSet."""
        return HookSet(self.catalog, self.catalog.bits_of(hooks))

    def hook(self, hook):
        """(type name or index, layer) -> the C struct, checked against the catalog."""
        t, layer = self.catalog.hook(hook)
        return _lib.Hook(t, layer)

    def _cset_of(self, hooks):
        if isinstance(hooks, HookSet) and hooks.catalog is self.catalog:
            return hooks._cset()
        return self.catalog.to_c(self.catalog.bits_of(hooks))

    # ---- desired state -------------------------------------------------------------
    def set_enabled(self, hooks):
        """Replace the standing set (steps without a plan entry run it)."""
        if type(hooks) is HookSet and hooks.catalog is self.catalog:
            c = hooks._c or hooks._cset()  # a kept set: its C bitmap, no conversion
        else:
            c = self._cset_of(hooks)
        rc = self._set_enabled(self._h or self._agent(), _byref(c))
        if rc:
            self._raise(rc, "set_enabled")

    def plan(self, step, hooks):
        """The set for exactly one future step (LatePlanError if it began)."""
        c = self._cset_of(hooks)
        rc = self._lib.toggle_plan_step(self._agent(), int(step), _byref(c))
        if rc:
            self._raise(rc, "plan step %d" % step)

    def plan_submit(self, entries):
        """Several plan entries, all or nothing: a dict {step: hooks} or (step, hooks) pairs."""
        items = list(entries.items() if isinstance(entries, dict) else entries)
        if len(items) > _lib.MAX_PLAN:
            raise error_for(-12, "plan_submit: %d entries, at most %d pending"
                            % (len(items), _lib.MAX_PLAN))
        arr = (_lib.PlanEntry * max(len(items), 1))()
        for i, (step, hooks) in enumerate(items):
            arr[i].step = int(step)
            self.catalog.to_c(self.catalog.bits_of(hooks), arr[i].set)
        rc = self._lib.toggle_plan_submit(self._agent(), arr, len(items))
        if rc:
            self._raise(rc, "plan_submit")

    def plan_clear(self):
        self._lib.toggle_plan_clear(self._agent())

    def step(self, n=None):
        """Begin step n (default: the previous step + 1) and return its effective HookSet:
        the set every replay of this step runs with (the metadata gate's set)."""
        if self._gt_check is not None:
            self._gt_check()  # raises once, before the step begins
        if n is None:
            n = self._step + 1
        rc = self._step_begin(self._h or self._agent(), n, self._cset_ref)
        if rc:
            self._raise(rc, "step %d" % n)
        self._step = n
        raw = bytes(self._cset)
        if raw != self._last_raw:
            self._last_raw = raw
            self._last_set = HookSet(self.catalog, raw=raw)
        return self._last_set

    @property
    def current_step(self):
        return self._step

    def _current_raw(self):
        """The C bitmap (bytes) of the set replays run now (toggle_current_set): the
        torch op's set before the first step, when step() has returned none."""
        c = _lib.Set()
        self._lib.toggle_current_set(self._agent(), _byref(c))
        return bytes(c)

    def current_set(self):
        c = _lib.Set()
        self._lib.toggle_current_set(self._agent(), _byref(c))
        return HookSet._from_c(self.catalog, c)

    def apply_all(self):
        rc = self._lib.toggle_apply_all(self._agent())
        if rc:
            self._raise(rc, "apply_all")

    # ---- capture -------------------------------------------------------------------
    def capture_begin(self):
        rc = self._lib.toggle_capture_begin(self._agent())
        if rc:
            self._raise(rc, "capture_begin")
        self._capture_depth += 1

    def capture_end(self):
        """Close a capture window.  Returns the objects kept for producers recorded while
        any window was open (keep_for_capture): whoever owns the graph holds them for as
        long as the graph can replay.  Windows can nest (or overlap on several threads):
        each end returns all of them; the last end lets them go."""
        rc = self._lib.toggle_capture_end(self._agent())
        if rc:
            self._raise(rc, "capture_end")
        keep = tuple(self._capture_keep)
        self._capture_depth -= 1
        if self._capture_depth <= 0:
            self._capture_depth = 0
            self._capture_keep = []
            self._capture_refusal = None
        return keep

    def refuse_capture(self, why):
        """A producer was refused while a capture window is open (graphtoggle.ops: a shape
        without a buffer, say): the graph being captured holds only the producers recorded
        before it, so its owner must not bind it (capture_refusal() tells, until the last
        window ends)."""
        if self._capture_depth and self._capture_refusal is None:
            self._capture_refusal = str(why)

    def capture_refusal(self):
        """Why a producer was refused in the open capture window, or None."""
        return self._capture_refusal

    def keep_for_capture(self, obj):
        """Keep obj (what a producer recorded now writes into) alive with the graph being
        captured: capture_end returns it to the graph's owner.  A CUDA graph holds no
        reference to the memory its kernels write; without this, a monitor buffer dropped
        (Attachment.detach) while the graph lives would be reused, and a replay enabling
        its hook would write into someone else's tensor."""
        if self._capture_depth:
            self._capture_keep.append(obj)

    def capture(self, graph=None, **kwargs):
        """Context manager.  With a torch.cuda.CUDAGraph: graphtoggle.torch.capture (the
        torch.cuda.graph drop-in: keeps the template, planner first, binds after
        instantiate).  Without: just the capture window, for code that captures itself."""
        if graph is not None:
            from . import torch as gt_torch
            return gt_torch.capture(self, graph, **kwargs)
        if kwargs:
            raise InvalidArgumentError("capture() without a graph takes no arguments")
        return self._window()

    @contextmanager
    def _window(self):
        self.capture_begin()
        try:
            yield self
        finally:
            self.capture_end()

    def capture_planner(self, stream):
        """Device mode: capture the planner first in each graph (no-op in other modes)."""
        rc = self._lib.toggle_capture_planner(self._agent(), _handle(stream, "stream"))
        if rc:
            self._raise(rc, "capture_planner")

    def record_producer(self, stream, hook):
        """Record the node the last launch into stream added (toggle_record_producer)."""
        h = self.hook(hook)
        rc = self._lib.toggle_record_producer(self._agent(), _handle(stream, "stream"), h)
        if rc:
            self._raise(rc, "record_producer %s" % (hook,))

    def _stream_or_current(self, stream):
        if stream is None:
            try:
                from .torch import _current_stream
                return _current_stream()
            except ImportError:
                raise InvalidArgumentError("no stream given and no torch to ask for the current "
                                           "one: pass stream=") from None
        return _handle(stream, "stream")

    @contextmanager
    def producer(self, hook, stream=None):
        """Record every kernel node the body adds to the capture of stream (default: torch's
        current stream) under hook.  A memcpy/memset in the body refuses the whole region."""
        h = self.hook(hook)
        s = self._stream_or_current(stream)
        region = _Region()
        rc = self._lib.toggle_producer_begin(self._agent(), s)
        if rc:
            self._raise(rc, "producer %s" % (hook,),
                        "agent.producer() records inside a capture: use it within "
                        "agent.capture(g), or in a graph captured while graphtoggle.torch.patch "
                        "is active" if rc == CaptureError.code else None)
        try:
            yield region
        except BaseException:
            self._lib.toggle_producer_abort(self._h, s)
            raise
        n = ctypes.c_size_t(0)
        rc = self._lib.toggle_producer_end(self._agent(), s, h, _byref(n))
        if rc:
            self._raise(rc, "producer %s" % (hook,))
        region.recorded = n.value

    def copy_out_raw(self, stream, hook, dst, src, row_bytes, rows=1, dst_pitch=None,
                     src_pitch=None):
        """libtoggle's built-in copy producer (one kernel, device-updatable in device mode)."""
        h = self.hook(hook)
        c = _lib.Copy(dst, src, row_bytes, rows,
                      row_bytes if dst_pitch is None else dst_pitch,
                      row_bytes if src_pitch is None else src_pitch)
        rc = self._lib.toggle_copy_out(self._agent(), _handle(stream, "stream"), h, _byref(c))
        if rc:
            self._raise(rc, "copy_out %s" % (hook,))

    def copy_out(self, src, dst, hook, stream=None):
        """Copy tensor src into monitor buffer dst as one recorded producer kernel.
        src: contiguous, or 2-D rows with unit stride inside a row; dst: contiguous, same
        number of bytes."""
        from .torch import copy_geometry
        row_bytes, rows, src_pitch = copy_geometry(src, dst)
        self.copy_out_raw(self._stream_or_current(stream), hook, dst.data_ptr(), src.data_ptr(),
                          row_bytes, rows, row_bytes, src_pitch)

    # ---- graphs --------------------------------------------------------------------
    def bind(self, graph, exec_):
        rc = self._lib.toggle_graph_bind(self._agent(), graph, exec_)
        if rc:
            self._raise(rc, "bind")

    def set_bare(self, graph, on):
        """toggle_graph_set_bare: whether graph gets a producer-free exec (now if bound, and
        through rebinds).  Off for graphs only launched after prepare(), which never run it."""
        rc = self._lib.toggle_graph_set_bare(self._agent(), graph, bool(on))
        if rc:
            self._raise(rc, "set_bare")

    def forget(self, graph):
        rc = self._lib.toggle_graph_forget(self._agent(), graph)
        if rc:
            self._raise(rc, "forget")

    def instantiate(self, graph):
        """cuGraphInstantiate + bind (+ upload in device mode); returns the exec."""
        e = _lib.P()
        rc = self._lib.toggle_graph_instantiate(self._agent(), graph, _byref(e))
        if rc:
            self._raise(rc, "instantiate")
        return e.value

    def launch(self, graph, exec_, stream):
        """toggle_graph_launch: the guarded replay.  Nothing runs when it raises."""
        rc = self._launch(self._h, graph, exec_, stream)
        if rc:
            self._raise(rc, "launch")

    def prepare(self, graph, exec_, stream):
        """toggle_graph_prepare: launch's guard, set and accounting without the launch.  The
        caller then launches exactly exec_ on stream, once (torch's own replay does).  When
        it raises, nothing was prepared: launch nothing."""
        rc = self._prepare(self._h, graph, exec_, stream)
        if rc:
            self._raise(rc, "prepare")

    def replay(self, g, stream=None, random_ops=None):
        """Guarded replay of a torch.cuda.CUDAGraph captured with agent.capture(g)
        (graphtoggle.torch.replay: random_ops=False launches through toggle_graph_launch)."""
        from .torch import replay
        replay(self, g, stream, random_ops)

    def attach(self, modules, **kwargs):
        """Producers on nn.Module forward hooks: graphtoggle.torch.attach(self, ...)."""
        from .torch import attach
        return attach(self, modules, **kwargs)

    def recorder(self, capacity=64 << 20):
        """The agent's data ring (graphtoggle.record.Recorder; toggle_record_open the first
        time, with capacity data bytes, a power of two, and as many bytes of GPU memory
        for its staging: docs/recording.md, *Staging*): the enabled hooks' monitor buffers
        after each replay, for toggled's `togglectl record` or a local reader."""
        if self._rec is None:
            from .record import Recorder
            self._rec = Recorder(self, capacity)
        return self._rec

    def has_producers(self, graph):
        """True if this agent recorded producers for graph (and did not forget it)."""
        st = _lib.GraphStatus()
        rc = self._lib.toggle_graph_status(self._agent(), graph, _byref(st))
        return rc == 0 and st.nodes > 0 and not st.stale

    # ---- status --------------------------------------------------------------------
    @staticmethod
    def _dict(s):
        out = {}
        for f, _ in s._fields_:
            v = getattr(s, f)
            if isinstance(v, bytes):
                v = v.decode(errors="replace")
            out[f] = v
        if "mode" in out and isinstance(out["mode"], int):
            out["mode"] = _MODE_NAMES.get(out["mode"], out["mode"])
        return out

    def graph_status(self, graph):
        st = _lib.GraphStatus()
        rc = self._lib.toggle_graph_status(self._agent(), graph, _byref(st))
        if rc:
            self._raise(rc, "graph_status")
        return self._dict(st)

    def graphs(self):
        n = self._lib.toggle_graph_count(self._agent())
        arr = (_lib.GraphStatus * max(n, 1))()
        n = min(self._lib.toggle_graph_list(self._h, arr, n), n)
        return [self._dict(arr[i]) for i in range(n)]

    def graph_hooks(self, graph):
        c = _lib.Set()
        rc = self._lib.toggle_graph_hooks(self._agent(), graph, _byref(c))
        if rc:
            self._raise(rc, "graph_hooks")
        return HookSet._from_c(self.catalog, c)

    def registry_check(self):
        r = _lib.RegistryCheck()
        self._lib.toggle_registry_check(self._agent(), _byref(r))
        return self._dict(r)

    def anomalies(self):
        a = _lib.Anomalies()
        self._lib.toggle_anomalies_get(self._agent(), _byref(a))
        return self._dict(a)

    def stats(self):
        s = _lib.Stats()
        self._lib.toggle_stats_get(self._agent(), _byref(s))
        return self._dict(s)

    def taint(self):
        """Device mode's tainted launches (a device-side call failed): toggle_taint_get."""
        t = _lib.Taint()
        self._lib.toggle_taint_get(self._agent(), _byref(t))
        return self._dict(t)

    def connection(self):
        """The agent's connection to toggled (toggle_conn_get): state is one of
        'standalone', 'connecting', 'connected', 'reconnecting'."""
        c = _lib.ConnInfo()
        rc = self._lib.toggle_conn_get(self._agent(), _byref(c))
        if rc:
            self._raise(rc, "connection")
        out = self._dict(c)
        out["state"] = self._lib.toggle_conn_state_name(c.state).decode()
        return out

    def device_counters(self, graph):
        d = _lib.DeviceCounters()
        rc = self._lib.toggle_graph_device_counters(self._agent(), graph, _byref(d))
        if rc:
            self._raise(rc, "device_counters")
        return self._dict(d)

    def __repr__(self):
        return "<graphtoggle.Agent %r %s %s>" % (
            getattr(self, "name", "?"), "closed" if not self._h else self.mode,
            getattr(self, "backend", "?"))


class _Region:
    """What `with agent.producer(hook) as r:` yields: r.recorded after the block."""
    __slots__ = ("recorded",)

    def __init__(self):
        self.recorded = None


__all__ = ["Agent", "GraphToggleError"]
