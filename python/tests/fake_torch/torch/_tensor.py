"""Just enough of torch.Tensor, torch.empty_like, torch.mul and torch.nn for the forward-hook
producers (graphtoggle.torch.attach): host-side data, and torch.mul(out=) captured as one
simulator kernel (a kernel node in a capture, run at once otherwise)."""

import math

float32 = "float32"
contiguous_format = "contiguous_format"


class Tensor:
    def __init__(self, shape, dtype=float32, data=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.data = data if data is not None else [0.0] * math.prod(self.shape)

    def view(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        assert math.prod(shape) == len(self.data)
        return Tensor(shape, self.dtype, self.data)  # shares data

    def fill_(self, v):
        self.data[:] = [v] * len(self.data)
        return self

    def element_size(self):
        return 4

    def numel(self):
        return len(self.data)


def empty_like(x, memory_format=None):
    from . import cuda
    t = Tensor(x.shape, x.dtype)
    t.fill_(float("nan"))
    t.made_capturing = cuda.is_current_stream_capturing()
    return t


def mul(x, k, out):
    from . import _C, cuda

    def kernel():
        out.data[:] = [v * k for v in x.data]
    _C.sim().kernel(cuda.current_stream().cuda_stream, kernel)
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
