"""A faithful fake of the parts of torch 2.11 that graphtoggle.torch patches and calls:
torch.cuda.CUDAGraph (a Python class over torch._C._CUDAGraph whose __new__ passes
keep_graph to a pybind11 __new__ that ignores it: the C++ object is built by
_CUDAGraph.__init__), torch.cuda.graph, streams, is_current_stream_capturing, and
torch._C._cuda_getCurrentRawStream, and the default generator's replay prologue
(torch.manual_seed, torch.rand: captured random ops draw new numbers at each replay
only because CUDAGraph::replay advances the generator's offset before it launches).
The "device" is graphtoggle's CUDA simulator (torch.cuda.sim), so CI exercises the
patch lifecycle without torch or a GPU: a kernel is
sim.kernel(torch.cuda.current_stream().cuda_stream, fn).

torch.library (Library.define/impl, register_fake) and torch.ops hold registered ops
(torch.ops.graphtoggle.tap: the eager body runs through it; no compiler here).

The Python layer (torch/cuda/graphs.py) copies the structure of torch 2.11's; the C++
layer (_CUDAGraph here) follows its documented behaviour: keep_graph=False destroys the
template at capture end after instantiating; keep_graph=True instantiates on demand;
raw_cuda_graph() raises unless keep_graph; re-instantiation destroys the old exec.
"""

__version__ = "2.11.0+fake"
FAKE = True

from . import _C  # noqa: E402
from ._C import Generator  # noqa: E402,F401
from . import cuda  # noqa: E402
from . import library  # noqa: E402
from . import nn  # noqa: E402
from ._tensor import (Tensor, contiguous_format, empty, empty_like, float32,  # noqa: E402,F401
                      get_default_dtype, mul, rand)
from .library import ops  # noqa: E402,F401


def is_grad_enabled():
    return False  # the fake has no autograd


class no_grad:  # noqa: N801  (the fake has no autograd: a no-op context manager)
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def manual_seed(seed):
    """Seeds the (one) default CUDA generator, offset back to 0."""
    return _C.default_generator.manual_seed(seed)


class _CompilerConfig:
    force_cudagraph_gc = False


class compiler:  # noqa: N801  (torch.compiler.config.force_cudagraph_gc)
    config = _CompilerConfig()

    @staticmethod
    def is_compiling():
        return False  # the fake has no torch.compile
