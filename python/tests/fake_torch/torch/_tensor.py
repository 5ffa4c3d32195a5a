"""Just enough of torch.Tensor, torch.empty_like, torch.mul and torch.nn for the forward-hook
producers (graphtoggle.torch.attach): host-side data, and torch.mul(out=) captured as one
simulator kernel (a kernel node in a capture, run at once otherwise)."""

import math

float32 = "float32"
contiguous_format = "contiguous_format"


class Tensor:
    """Host data in a list (the storage), a shape and an offset into the storage: views
    (view(), 1-D slices) share the storage."""

    is_cuda = True
    device = "cuda:0"

    def __init__(self, shape, dtype=float32, data=None, _store=None, _off=0):
        self.shape = tuple(shape)
        self.dtype = dtype
        if _store is not None:
            self._store, self._off = _store, _off
        else:
            self._store = data if data is not None else [0.0] * math.prod(self.shape)
            self._off = 0

    @property
    def data(self):
        """The elements: the storage itself for a whole tensor (writable in place), a copy
        for a view of part of it."""
        n = self.numel()
        if self._off == 0 and n == len(self._store):
            return self._store
        return self._store[self._off:self._off + n]

    def _set(self, values):
        values = list(values)
        assert len(values) == self.numel()
        self._store[self._off:self._off + len(values)] = values

    def view(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        n = math.prod(self.shape)
        shape = tuple(n // -math.prod(shape) if d == -1 else d for d in shape) \
            if -1 in shape else tuple(shape)
        assert math.prod(shape) == n
        return Tensor(shape, self.dtype, _store=self._store, _off=self._off)  # shares data

    def __getitem__(self, key):
        assert isinstance(key, slice) and len(self.shape) >= 1 and key.step is None
        row = math.prod(self.shape[1:])
        start, stop, _ = key.indices(self.shape[0])
        return Tensor((max(stop - start, 0),) + self.shape[1:], self.dtype,
                      _store=self._store, _off=self._off + start * row)

    def fill_(self, v):
        self._set([v] * self.numel())
        return self

    def copy_(self, src):
        self._set(src.data)
        return self

    def element_size(self):
        return 4

    def data_ptr(self):
        """An address-like int: views of one storage at one offset share it (the storage
        is a Python list here, never a device address)."""
        return id(self._store) * 64 + self._off * self.element_size()

    def numel(self):
        return math.prod(self.shape)

    def is_contiguous(self):
        return True

    def contiguous(self):
        return self


def empty_like(x, memory_format=None):
    from . import cuda
    t = Tensor(x.shape, x.dtype)
    t.fill_(float("nan"))
    t.made_capturing = cuda.is_current_stream_capturing()
    return t


def empty(*shape, dtype=float32, device=None):
    from . import cuda
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
    t = Tensor(shape, dtype)
    t.fill_(float("nan"))
    t.made_capturing = cuda.is_current_stream_capturing()
    return t


def get_default_dtype():
    return float32


def mul(x, k, out):
    from . import _C, cuda

    def kernel():
        out._set([v * k for v in x.data])
    _C.sim().kernel(cuda.current_stream().cuda_stream, kernel)
    return out


def _philox(seed, offset, n):
    """n floats in [0, 1) from (seed, offset): a stand-in for Philox, same inputs, same
    numbers (splitmix64 of seed and counter)."""
    out = []
    for i in range(n):
        z = (seed * 0x9E3779B97F4A7C15 + offset + i) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        out.append(((z ^ (z >> 31)) >> 11) / float(1 << 53))
    return out


def _increment(n):
    # torch rounds a kernel's Philox offset increment up to a multiple of 4
    return (n + 3) // 4 * 4


def rand(*shape):
    """torch.rand on the fake device.  Eager: numbers from the default generator, whose
    offset advances.  Captured: a kernel reading the graph's generator state when it runs
    (the seed and base offset each replay's prologue writes) at this op's offset inside the
    graph, so each replay draws new numbers only if the prologue ran."""
    from . import _C, cuda
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
    out = Tensor(shape)
    n = out.numel()
    s = cuda.current_stream()
    rng = getattr(s, "_rng", None) if s._capturing else None
    if rng is None:
        g = _C.default_generator
        out._set(_philox(g.seed, g.offset, n))
        g.offset += _increment(n)
        return out
    intra = rng.increment
    rng.increment += _increment(n)

    def kernel():
        out._set(_philox(rng.seed, rng.base + intra, n))
    _C.sim().kernel(s.cuda_stream, kernel)
    return out


class _Handle:
    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)


class Module:
    def __init__(self):
        self._forward_hooks = {}
        self._n = 0

    def register_forward_hook(self, fn):
        self._n += 1
        self._forward_hooks[self._n] = fn
        return _Handle(self._forward_hooks, self._n)

    def __call__(self, *args):
        out = self.forward(*args)
        for fn in list(self._forward_hooks.values()):
            r = fn(self, args, out)
            if r is not None:
                out = r
        return out


class ModuleList(Module, list):
    def __init__(self, mods=()):
        Module.__init__(self)
        list.__init__(self, mods)
