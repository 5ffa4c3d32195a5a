"""torch.cuda of the fake: streams over the simulator, CUDAGraph, graph."""

from .. import _C


class Stream:
    def __init__(self, device=None, priority=0):
        self.cuda_stream = _C.sim().stream()
        self._capturing = False

    def __eq__(self, other):
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)

    def synchronize(self):
        pass


_default = None


def current_stream(device=None):
    global _default
    if _C._current:
        return _C._current[-1]
    if _default is None:
        _default = Stream()
    return _default


class stream:  # noqa: N801  (torch.cuda.stream context manager)
    def __init__(self, s):
        self.s = s

    def __enter__(self):
        _C._current.append(self.s)

    def __exit__(self, *exc):
        _C._current.pop()


def current_device():
    return 0


def is_available():
    return True


def synchronize(device=None):
    pass


def empty_cache():
    pass


def is_current_stream_capturing():
    return _C._cuda_isCurrentStreamCapturing()


def sim():
    """The simulator behind this fake device."""
    return _C.sim()


from . import graphs  # noqa: E402
from .graphs import CUDAGraph, graph  # noqa: E402,F401
