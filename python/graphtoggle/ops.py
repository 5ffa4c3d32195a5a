"""torch.ops.graphtoggle.tap: a producer as one registered torch op (issue 23).

    graphtoggle::tap(Tensor x, Tensor(a!) buf, int hook) -> ()

Copies x into the first x.numel() elements of buf (contiguous, x's dtype, made outside
any compile and capture), as a producer of hook:

* inside a CUDA graph capture (the stream is capturing): records the copy as hook's
  producer in the capture (lazy and eager mode: torch.mul(x, 1, out=...) in a producer
  region; device mode: libtoggle's copy_out, device-updatable), which then runs at each
  replay exactly when the replay's step enables hook;
* anywhere else (eager forwards, compiled code run without a graph): copies now exactly
  when hook is in the current step's set (what agent.step() returned; before the first
  step, the set replays run now), so an eager forward follows the same set as a replay.

hook is an int made by hook_id(agent, (type, layer)): the agent (a process-wide slot),
the hook and how the capture copies.  The op mutates buf, so no compiler removes it; it
has a fake (meta) implementation, is not cudagraph_unsafe and never breaks a graph; its
layout is flexible (inductor passes x as it has it, no copy to other strides).  Importing
this module imports torch and registers the op (graphtoggle.torch.attach and hook_id do
it on first use).
"""

import weakref

import torch

from . import torch as _gtt
from .errors import CaptureError, GraphToggleError, InvalidArgumentError
from .record import declare_in_capture

# hook id layout: bits 0-12 the hook (type * 256 + layer, libtoggle's bit index), bit 13
# copy_out (else torch.mul in a producer region), bits 14 and up the agent's slot (>= 1)
HOOK_MASK = (1 << 13) - 1
COPY_OUT = 1 << 13
SLOT_SHIFT = 14
_LAYERS = 256  # toggle_hooks.h's TOGGLE_MAX_LAYERS: hook index = type * 256 + layer

_slots = {}       # slot -> weakref to its agent
_next_slot = [1]


def _slot(agent):
    s = agent.__dict__.get("_gt_slot")
    if s is None:
        s = _next_slot[0]
        _next_slot[0] += 1
        agent._gt_slot = s
        _slots[s] = weakref.ref(agent)
    return s


def hook_id(agent, hook, method=None):
    """The int torch.ops.graphtoggle.tap takes for hook ((type, layer) of agent's
    catalog) of agent.  method: "mul" (a torch op in a producer region; not in device
    mode) or "copy_out" (libtoggle's copy kernel; every mode); default by agent's mode."""
    if agent.closed:
        raise InvalidArgumentError("hook_id: agent %r is closed" % agent.name)
    t, layer = agent.catalog.hook(hook)  # SpecError / OutOfCatalogError name the catalog
    method = _gtt._method_for(agent, method)
    return (_slot(agent) << SLOT_SHIFT) | (COPY_OUT if method == "copy_out" else 0) | (
        t * _LAYERS + layer)


def _describe(hook):
    a = _agent_ref(hook)
    f = hook & HOOK_MASK
    if a is None:
        return "hook id %d" % hook
    t, layer = divmod(f, _LAYERS)
    name = a.catalog.names[t] if t < len(a.catalog.names) else "type %d" % t
    return "%s:%d of agent %r" % (name, layer, a.name)


def _agent_ref(hook):
    ref = _slots.get(hook >> SLOT_SHIFT) if isinstance(hook, int) else None
    return ref() if ref is not None else None


def _agent_of(hook):
    """The open agent hook belongs to, or a clear error (nothing run)."""
    a = _agent_ref(hook)
    if a is None:
        raise InvalidArgumentError(
            "graphtoggle::tap: hook %r is not an id of a live agent: make it with "
            "graphtoggle.torch.hook_id(agent, (type, layer)) (attach() does)" % (hook,))
    if not a._h:
        raise InvalidArgumentError(
            "graphtoggle::tap: %s: the agent is closed; detach its hooks (att.detach()) "
            "before closing it, or attach them to an open agent" % _describe(hook))
    f = hook & HOOK_MASK
    t, layer = divmod(f, _LAYERS)
    if t >= len(a.catalog.names) or layer >= a.catalog.n_layers:
        raise InvalidArgumentError(
            "graphtoggle::tap: hook id %d names type %d layer %d, outside agent %r's catalog "
            "(%d types, %d layers): make it with graphtoggle.torch.hook_id"
            % (hook, t, layer, a.name, len(a.catalog.names), a.catalog.n_layers))
    return a


def check(x, buf, hook):
    """Refuse, naming the fix, an x that buf cannot hold (no room, another dtype or device,
    buf not contiguous).  Shared by the fake implementation (trace time) and the eager
    body (before anything runs or is recorded)."""
    n = x.numel()
    if buf.numel() == 0 and n:
        raise InvalidArgumentError(
            "graphtoggle::tap: %s: torch.compile met an output of shape %s (%s) with no "
            "monitor buffer: declare buffers (attach(..., max_tokens=N, width=..., "
            "dtype=...)), pass buffers={(type, layer): tensor}, or run every shape eagerly "
            "before compiling (then torch.compiler.reset())"
            % (_describe(hook), tuple(x.shape), x.dtype))
    # a buffer of 2 or more dims holds rows (declared: (max_tokens, *width)): the output's
    # trailing dims must be its width, else its values would land across rows; a 1-D
    # buffer takes any shape
    k = len(buf.shape) - 1
    if k > 0 and n and (len(x.shape) < k or tuple(x.shape[len(x.shape) - k:]) != tuple(
            buf.shape[1:])):
        raise InvalidArgumentError(
            "graphtoggle::tap: %s: no monitor buffer for an output of shape %s: its buffer "
            "is %s, rows of width %s, and the output's trailing dims are not that width; "
            "declare the output's width (attach(..., width=...), a dict per hook type when "
            "they differ) or give a 1-D buffer (buffers=), which takes any shape"
            % (_describe(hook), tuple(x.shape), tuple(buf.shape), tuple(buf.shape[1:])))
    if n > buf.numel() or x.dtype != buf.dtype or not buf.is_contiguous() or (
            x.device != buf.device):
        raise InvalidArgumentError(
            "graphtoggle::tap: %s: no monitor buffer for an output of shape %s (%s, %s): "
            "its buffer is %s (%s, %s%s); declare buffers that hold every shape the model "
            "runs (attach(..., max_tokens=N) with N at least the largest token count, the "
            "width and dtype of the output), made before torch.compile and any capture"
            % (_describe(hook), tuple(x.shape), x.dtype, x.device, tuple(buf.shape),
               buf.dtype, buf.device, "" if buf.is_contiguous() else ", not contiguous"))


# hook id -> (buf, x's shape, dtype, device) that check() last passed in an eager call
_checked = {}
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or (lambda: False)
_ready = {}  # hook id -> its agent's weakref, once the id was checked against the catalog
_no_grad = torch.no_grad


def tap(x, buf, hook):
    """The eager body (what the op runs; attach()'s forward hooks call it directly when
    not compiling, which skips the dispatcher).  A disabled hook costs two dict lookups,
    a shape, dtype and device compare and a bit test (the per-call target: <= 5 us)."""
    ref = _ready.get(hook)
    a = ref() if ref is not None else None
    if a is None or not a._h:
        a = _agent_of(hook)  # raises, naming the fix, unless the id is good
        _ready[hook] = _slots[hook >> SLOT_SHIFT]
    if x.is_cuda and _capturing():
        try:
            return _record(a, x, buf, hook)
        except GraphToggleError as e:
            raise _gtt._refuse_in_capture(a, e)
    c = _checked.get(hook)
    if c is None or c[0] is not buf or c[1] != x.shape or c[2] != x.dtype or (
            c[3] != x.device):
        # every check, enabled or not (the same run would be refused at capture), once per
        # buffer, shape, dtype and device
        check(x, buf, hook)
        _checked[hook] = (buf, x.shape, x.dtype, x.device)
    f = hook & HOOK_MASK
    raw = a._last_raw if a._step >= 0 else a._current_raw()
    if raw[f >> 3] >> (f & 7) & 1:
        dst = _dst_of(x, buf, hook)
        if _grad_enabled():
            with _no_grad():  # a monitor buffer is never part of autograd's graph
                dst.copy_(x)
        else:
            dst.copy_(x)  # no_grad's context costs ~1 us a call: only where grad is on
        if a._rec is not None and dst.is_cuda:  # recording: the eager output, after the copy
            a._rec.eager(f, dst, _gtt._current_stream(dst.device.index))
    return None


# hook id -> (buf, its data pointer, x's shape, the view of buf's first x.numel() elements
# shaped as x): the last view an enabled eager call copied into.  Making the view costs
# three torch calls (~4 us on the CPU, most of an enabled call); it is reused while the
# same buffer (same object, same storage: a resized or re-set buffer misses) meets the
# same shape.  Holding buf keeps its id from being reused by another tensor.
_dsts = {}
_grad_enabled = torch.is_grad_enabled


def _dst_of(x, buf, hook):
    c = _dsts.get(hook)
    shape = x.shape
    # a hit is what check() would pass and the view the uncached path would make: the
    # same buffer at the same address, still contiguous (set_ can restride it in place),
    # x of the same shape on buf's device (sizes and dtype were checked by the caller)
    if c is not None and c[0] is buf and c[2] == shape and c[1] == buf.data_ptr() and (
            x.device == buf.device) and buf.is_contiguous():
        return c[3]
    check(x, buf, hook)  # contiguity and device too, before the copy
    dst = buf.view(-1)[: x.numel()].view(shape)
    _dsts[hook] = (buf, buf.data_ptr(), shape, dst)
    return dst


def forget(hooks):
    """Drop the cached views of these hook ids (Attachment.detach: its buffers go)."""
    for h in hooks:
        _dsts.pop(h, None)
        _checked.pop(h, None)


def _record(a, x, buf, hook):
    """Inside a capture: record the copy as the hook's producer (every check first:
    nothing is recorded for a buffer that cannot hold x)."""
    check(x, buf, hook)
    dst = buf.view(-1)[: x.numel()].view(x.shape)
    t, layer = divmod(hook & HOOK_MASK, _LAYERS)
    h = (a.catalog.names[t], layer)
    try:
        with _no_grad():  # torch.mul(out=) refuses inputs that require grad
            _record_copy(a, x, dst, h, hook)
        # what this graph's producer of the hook writes, for the recorder (its replays
        # copy it to the ring when their step enables the hook and a recording runs)
        declare_in_capture(a, _gtt._current_stream(dst.device.index), hook & HOOK_MASK, dst)
        a.keep_for_capture(buf)  # the graph holds buf while it can replay into it
    except CaptureError as e:
        other = _gtt.patched()
        if other is not None and other is not a:
            raise CaptureError(
                "graphtoggle::tap: %s was refused in this CUDA graph capture, nothing "
                "recorded (%s): graphtoggle.torch.patch is active for agent %r, not for this "
                "hook's agent %r, so the capture window open is the other agent's.  Attach "
                "the hooks to agent %r, or end that patch and patch agent %r"
                % (_describe(hook), e.detail or e, other.name, a.name, other.name, a.name)
            ) from None
        raise CaptureError(
            "graphtoggle::tap: %s was refused in this CUDA graph capture, nothing recorded "
            "(%s).  Usually the agent's capture window does not cover the capture: capture "
            "while graphtoggle.torch.patch(agent) is active (patch before the engine, "
            "torch.compile's CUDA Graph Trees or the piecewise backend create their graphs) "
            "or inside agent.capture(g)" % (_describe(hook), e.detail or e)) from None
    return None


def _record_copy(a, x, dst, h, hook):
    if hook & COPY_OUT:
        try:
            _gtt.copy_geometry(x, dst)
        except InvalidArgumentError:
            x = x.contiguous()  # neither contiguous nor evenly strided rows
        a.copy_out(x, dst, h)
    else:
        with a.producer(h):
            torch.mul(x, 1, out=dst)


def tap_fake(x, buf, hook):
    """The fake (meta) implementation: no data; the checks, at trace time."""
    _agent_of(hook)
    check(x, buf, hook)
    return None


def _register():
    ns = getattr(torch.ops, "graphtoggle", None)
    if ns is not None and hasattr(ns, "tap"):
        return None  # registered already (this module imported twice)
    lib = torch.library.Library("graphtoggle", "DEF")
    tags = (torch.Tag.flexible_layout,) if hasattr(torch, "Tag") else ()
    lib.define("tap(Tensor x, Tensor(a!) buf, int hook) -> ()", tags=tags)
    # torch.library.Library + impl, not torch.library.custom_op: the custom_op wrapper
    # costs ~20 us a call in eager torch 2.11, the plain dispatcher ~2 us (measured here)
    lib.impl("tap", tap, "CompositeExplicitAutograd")
    torch.library.register_fake("graphtoggle::tap")(tap_fake)
    return lib


_LIB = _register()
op = torch.ops.graphtoggle.tap.default

__all__ = ["hook_id", "tap", "op"]
