"""torch.cuda of the fake: streams over the simulator, CUDAGraph, graph."""

from .. import _C


class Stream:
    def __init__(self, device=None, priority=0):
        self.cuda_stream = _C.sim().stream()
        self._capturing = False
        self._rng = None  # the capturing graph's generator state (torch._C._CaptureRng)

    def __eq__(self, other):
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)

    def synchronize(self):
        pass


class ExternalStream(Stream):
    """A stream made elsewhere, by its raw handle."""

    def __init__(self, stream_ptr, device=None):
        self.cuda_stream = stream_ptr
        self._capturing = False
        self._rng = None


class Event:
    """torch.cuda.Event(enable_timing=True): the simulator runs each launch when it is
    made, so the time between two records is host time."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self.t = None

    def record(self, stream=None):
        import time
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'")
        if self.t is None or end.t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end.t - self.t) * 1e3


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


# torch.cuda.default_generators: one per device (the fake has device 0)
default_generators = (_C.default_generator,)


def manual_seed(seed):
    _C.default_generator.manual_seed(seed)


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
