"""graphtoggle: runtime on/off switches for producer kernels inside captured CUDA graphs,
from Python.  A thin ctypes layer over libtoggle.so (see docs/python.md).

    import graphtoggle
    agent = graphtoggle.Agent("engine-0", hooks={"resid_post": 32, "mlp_out": 32})
    with agent.capture(g):                 # g = torch.cuda.CUDAGraph(keep_graph=True)
        ...
        with agent.producer(("resid_post", 3)):
            torch.mul(x, 1, out=buf)
    effective = agent.step()               # the set this step's replays run with
    agent.replay(g)

graphtoggle.torch (the PyTorch integration) and graphtoggle.ops (the registered op
torch.ops.graphtoggle.tap) are loaded on first access: `import graphtoggle` imports no
torch, and graphtoggle.torch imports torch only when it is used.
"""

from . import _lib, errors
from .agent import Agent
from .errors import *  # noqa: F401,F403  (one class per TOGGLE_E* code)
from .errors import GraphToggleError, error_for
from .hookset import HookSet

__version__ = "%d.%d.0" % (_lib.API_MAJOR, _lib.API_MINOR)


def library_path():
    """The libtoggle.so in use (loading and checking it on first use)."""
    return _lib.path()


def __getattr__(name):
    # graphtoggle.torch and graphtoggle.ops without importing them first (PEP 562); the
    # import binds the attribute, so this runs once per name
    if name in ("torch", "ops", "recording"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def strerror(code):
    s = _lib.lib().toggle_strerror(code)
    return s.decode() if s else ""

__all__ = ["Agent", "HookSet", "GraphToggleError", "error_for", "library_path", "strerror"] + [
    c.__name__ for c in errors.BY_CODE.values()]
