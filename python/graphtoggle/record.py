"""Recording from Python: the agent's data ring (toggle_record.h, toggle_ring.h).

    rec = agent.recorder(capacity=64 << 20)    # toggle_record_open: a page-locked ring
    rec.request(1, ["resid_post:12"])          # without a daemon: what `togglectl record` asks
    ...                                         # steps and replays as usual
    for r in rec.reader():                     # a local consumer (toggled is the usual one)
        r.step, r.hook, r.dtype, r.shape, r.payload

After each replay whose step enables hooks of the graph, libtoggle copies their monitor
buffers into the ring on the replay's stream and publishes them once the copies'
event has completed (never waiting).  The buffers are declared by the registered op
while it is captured (toggle_record_buffer_in_capture: the slice this graph's producer
writes) or by hand (buffer()).  graphtoggle.torch calls after() behind torch's own
replays (toggle_graph_launch records by itself) and the op's eager body calls eager():
every behaviour is libtoggle's, this module converts.
"""

import ctypes
import mmap
import os
import struct

from . import _lib
from .errors import InvalidArgumentError

# TOGGLE_DTYPE_MAP (toggle_ring.h): safetensors name -> (code, bytes)
DTYPES = {
    "U8": (1, 1), "I8": (2, 1), "I16": (3, 2), "I32": (4, 4), "I64": (5, 8), "F16": (6, 2),
    "BF16": (7, 2), "F32": (8, 4), "F64": (9, 8), "BOOL": (10, 1), "U16": (11, 2),
    "U32": (12, 4), "U64": (13, 8), "F8_E4M3": (14, 1), "F8_E5M2": (15, 1),
}
DTYPE_NAMES = {code: name for name, (code, _) in DTYPES.items()}
# torch dtype names (str(dtype) without "torch.") -> the ring's
_TORCH = {"uint8": "U8", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64",
          "float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64",
          "bool": "BOOL", "uint16": "U16", "uint32": "U32", "uint64": "U64",
          "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}
MAX_DIMS = 4
RING_ALIGN = 128
RING_DATA_OFFSET = 4096
RING_MAGIC = 0x31474E524C474754
REC_MAGIC = 0x43524754
REC_DATA, REC_PAD = 1, 2
REC_EAGER = 1


def dtype_code(dtype):
    """The ring's code of a dtype: a safetensors name ("F32"), a code, or a torch dtype."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype in DTYPE_NAMES:
            return dtype
    elif isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype][0]
    else:
        name = _TORCH.get(str(dtype).rsplit(".", 1)[-1])
        if name is not None:
            return DTYPES[name][0]
    raise InvalidArgumentError("dtype %r has no code in the data ring (toggle_ring.h's "
                               "TOGGLE_DTYPE_MAP: %s)" % (dtype, ", ".join(DTYPES)))


def _shape4(shape):
    """At most 4 dims: leading ones folded into the first (the bytes are the same)."""
    shape = [int(n) for n in shape]
    while len(shape) > MAX_DIMS:
        shape[0:2] = [shape[0] * shape[1]]
    return shape


def buffer_of(ptr, nbytes, dtype, shape):
    """struct toggle_record_buffer from its parts."""
    shape = _shape4(shape)
    b = _lib.RecordBuffer(ptr=ptr, bytes=nbytes, dtype=dtype_code(dtype), ndim=len(shape))
    for i, n in enumerate(shape):
        b.shape[i] = n
    return b


def tensor_buffer(t):
    """struct toggle_record_buffer of a contiguous tensor (torch or anything with
    data_ptr(), numel(), element_size(), shape and dtype)."""
    return buffer_of(t.data_ptr(), t.numel() * t.element_size(), t.dtype, tuple(t.shape))


class Recorder:
    """The agent's ring and its recording requests (agent.recorder() makes it once)."""

    def __init__(self, agent, capacity):
        self.agent = agent
        self._lib = agent._lib
        fd = ctypes.c_int(-1)
        rc = self._lib.toggle_record_open(agent._agent(), capacity, ctypes.byref(fd))
        if rc:
            agent._raise(rc, "record_open")
        self.fd = fd.value  # the agent's: closed with it
        self.capacity = capacity
        self._after = self._lib.toggle_record_after
        self._eager = self._lib.toggle_record_eager

    def buffer(self, hook, tensor=None, graph=None, ptr=None, nbytes=None, dtype=None,
               shape=None):
        """Declare hook's monitor buffer (toggle_record_buffer), in graph (a raw CUgraph
        handle; None: every graph without its own): a tensor, or ptr, nbytes, dtype, shape.
        tensor=None and ptr=None removes it."""
        t, layer = self.agent.catalog.hook(hook)
        if tensor is not None:
            b = tensor_buffer(tensor)
        elif ptr is not None:
            b = buffer_of(ptr, nbytes, dtype, shape)
        else:
            b = None
        rc = self._lib.toggle_record_buffer(self.agent._agent(), graph, _lib.Hook(t, layer),
                                            ctypes.byref(b) if b is not None else None)
        if rc:
            self.agent._raise(rc, "record_buffer")

    def request(self, session, hooks=None):
        """toggle_record_set: record session's hooks (None: every hook), 0 stops.  Only
        without a daemon (toggled owns the request otherwise)."""
        c = self.agent._cset_of(hooks) if hooks is not None else None
        rc = self._lib.toggle_record_set(self.agent._agent(), session,
                                         ctypes.byref(c) if c is not None else None)
        if rc:
            self.agent._raise(rc, "record_set")

    def after(self, graph, stream):
        """Record graph's hooks after the caller's own launch on stream (torch's replay)."""
        self._after(self.agent._h, graph, stream)

    def eager(self, hook_index, tensor, stream):
        """An eager run of the op wrote tensor as hook_index's output (type * 256 + layer)."""
        b = tensor_buffer(tensor)
        self._eager(self.agent._h, _lib.Hook(hook_index >> 8, hook_index & 255),
                    ctypes.byref(b), stream)

    def poll(self):
        """Publish what completed; the launches still in flight."""
        return self._lib.toggle_record_poll(self.agent._agent())

    def flush(self):
        """Wait for the copies in flight (cuCtxSynchronize) and publish them."""
        self._lib.toggle_record_flush(self.agent._agent())

    def stats(self):
        s = _lib.RecordStats()
        self._lib.toggle_record_stats_get(self.agent._agent(), ctypes.byref(s))
        return {f: getattr(s, f) for f, _ in s._fields_}

    def reader(self):
        """A local consumer of the ring (RingReader), from the current head on."""
        return RingReader(self.fd)


def declare_in_capture(agent, stream, hook_index, tensor):
    """The registered op, capturing: tensor is what hook_index's producer in this
    capture writes (toggle_record_buffer_in_capture).  A tensor the ring cannot describe
    (a dtype without a code) is left undeclared: the hook is then not recorded for this
    graph, the capture goes on."""
    try:
        b = tensor_buffer(tensor)
    except (InvalidArgumentError, AttributeError, TypeError):
        return False  # not describable (no code for its dtype, not a tensor with memory)
    rc = agent._lib.toggle_record_buffer_in_capture(
        agent._agent(), stream, _lib.Hook(hook_index >> 8, hook_index & 255), ctypes.byref(b))
    return rc == 0


def _fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class RingFault(InvalidArgumentError):
    """The ring holds what its writer would never publish (toggle_ring.h's faults)."""


class Record:
    __slots__ = ("seq", "session", "step", "graph", "launch", "hook", "dtype", "shape",
                 "flags", "dropped", "payload")

    def __repr__(self):
        return "<Record step %d hook %s:%d graph %#x %s %s>" % (
            self.step, self.hook[0], self.hook[1], self.graph, self.dtype, list(self.shape))


# struct toggle_ring_record (toggle_ring.h), 128 bytes
_REC = struct.Struct("<IHHQQQqQQHHBBH4QQQQQ")
assert _REC.size == 128


class RingReader:
    """A consumer of a ring in this process (a test, a tool without toggled): the checks
    of toggle_ring_reader_next on every header, reading from the head at open."""

    def __init__(self, fd):
        fd = os.dup(fd)
        try:
            hdr = os.pread(fd, 128, 0)
            magic, version, hsize, total, data_off, cap = struct.unpack_from("<QIIQQQ", hdr)
            if magic != RING_MAGIC or version != 1 or data_off != RING_DATA_OFFSET:
                raise RingFault("not a data ring (magic %#x, layout %d)" % (magic, version))
            self._mm = mmap.mmap(fd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.capacity = cap
        self.head = self.tail = self._load(128)  # producer.head
        self._store(256, self.tail)              # consumer.tail
        self.seq = None

    def _load(self, off):
        return struct.unpack_from("<Q", self._mm, off)[0]

    def _store(self, off, v):
        struct.pack_into("<Q", self._mm, off, v)

    def counters(self):
        """The producer area: head, records, dropped, dropped_bytes, errors,
        consumer_errors, session, seq."""
        names = ("head", "records", "dropped", "dropped_bytes", "errors", "consumer_errors",
                 "session", "seq")
        return dict(zip(names, struct.unpack_from("<8Q", self._mm, 128)))

    def close(self):
        self._mm.close()

    def __iter__(self):
        while True:
            r = self.next()
            if r is None:
                return
            yield r

    def next(self):
        """The next DATA record, None when nothing more is published; RingFault."""
        while True:
            if self.tail == self.head:
                h = self._load(128)
                if h < self.head or h % RING_ALIGN or h - self.tail > self.capacity:
                    raise RingFault("bad head %d (tail %d)" % (h, self.tail))
                self.head = h
                if self.tail == self.head:
                    return None
            off = self.tail & (self.capacity - 1)
            base = RING_DATA_OFFSET + off
            raw = bytes(self._mm[base:base + 128])
            f = _REC.unpack(raw)
            (magic, kind, hsize, length, seq, session, step, graph, launch, htype, layer,
             dtype, ndim, flags, s0, s1, s2, s3, plen, dropped, _res, csum) = f
            avail = self.head - self.tail
            if magic != REC_MAGIC or hsize != 128 or csum != _fnv1a(raw[:120]):
                raise RingFault("bad record header at %d" % self.tail)
            if kind not in (REC_DATA, REC_PAD) or length < 128 or length % RING_ALIGN or \
                    length > avail or length > self.capacity - off:
                raise RingFault("bad record length %d at %d" % (length, self.tail))
            if self.seq is not None and seq != self.seq:
                raise RingFault("record %d out of sequence (wanted %d)" % (seq, self.seq))
            self.seq = seq + 1
            self.tail += length
            if kind == REC_PAD:
                self._store(256, self.tail)
                continue
            name = DTYPE_NAMES.get(dtype)
            shape = (s0, s1, s2, s3)[:ndim]
            n = DTYPES[name][1] if name else 0
            for d in shape:
                n *= d
            if name is None or ndim > MAX_DIMS or n != plen or plen > length - 128:
                raise RingFault("record %d: dtype %d, shape %s, %d bytes disagree"
                                % (seq, dtype, shape, plen))
            r = Record()
            r.seq, r.session, r.step, r.graph, r.launch = seq, session, step, graph, launch
            r.hook, r.dtype, r.shape, r.flags, r.dropped = (htype, layer), name, shape, flags, dropped
            r.payload = bytes(self._mm[base + 128:base + 128 + plen])
            self._store(256, self.tail)  # released: the payload is copied
            return r


__all__ = ["Recorder", "RingReader", "Record", "RingFault", "DTYPES", "dtype_code",
           "tensor_buffer", "buffer_of", "declare_in_capture"]
