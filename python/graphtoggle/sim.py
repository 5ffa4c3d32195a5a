"""The in-tree CUDA simulator (toggle_sim.h) from Python: streams, capture, kernels that
are Python callables, instantiate, launch, device memory.  For tests and GPU-less demos
with backend="sim"; handles are plain ints, used only with this simulator."""

import ctypes

from . import _lib
from .errors import CudaError


def _check(res, what):
    if res != 0:
        raise CudaError("simulator: %s failed (CUresult %d)" % (what, res))


class Sim:
    def __init__(self):
        self._lib = _lib.lib()
        h = _lib.P()
        rc = self._lib.toggle_sim_create(ctypes.byref(h))
        if rc:
            raise CudaError("toggle_sim_create failed (%d)" % rc)
        self.handle = h.value
        self._kernels = []  # callbacks must outlive the graphs that hold them

    def close(self):
        if self.handle:
            self._lib.toggle_sim_destroy(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stream(self):
        s = _lib.P()
        _check(self._lib.toggle_sim_stream_create(self.handle, ctypes.byref(s)), "stream_create")
        return s.value

    def begin_capture(self, stream):
        _check(self._lib.toggle_sim_stream_begin_capture(stream), "begin_capture")

    def end_capture(self, stream):
        g = _lib.P()
        _check(self._lib.toggle_sim_stream_end_capture(stream, ctypes.byref(g)), "end_capture")
        return g.value

    def kernel(self, stream, fn):
        """Launch fn() as a kernel: a node when capturing, run now otherwise."""
        cb = _lib.SIM_KERNEL(lambda _arg: fn())
        self._kernels.append(cb)
        _check(self._lib.toggle_sim_launch_kernel(stream, cb, None), "launch_kernel")

    def memset(self, stream):
        """A non-kernel node (memset) when capturing."""
        _check(self._lib.toggle_sim_memset(stream), "memset")

    def memcpy(self, stream):
        """A memcpy node when capturing (what torch's copy_ captures)."""
        _check(self._lib.toggle_sim_memcpy(stream), "memcpy")

    def instantiate(self, graph):
        e = _lib.P()
        _check(self._lib.toggle_sim_graph_instantiate(ctypes.byref(e), graph), "instantiate")
        return e.value

    def launch(self, exec_, stream):
        """cuGraphLaunch without libtoggle (what torch's own replay does)."""
        _check(self._lib.toggle_sim_graph_launch(exec_, stream), "graph_launch")

    def destroy_graph(self, graph):
        _check(self._lib.toggle_sim_graph_destroy(graph), "graph_destroy")

    def destroy_exec(self, exec_):
        _check(self._lib.toggle_sim_exec_destroy(exec_), "exec_destroy")

    def node_count(self, graph):
        return self._lib.toggle_sim_graph_node_count(graph)

    def alloc(self, nbytes):
        p = ctypes.c_uint64()
        _check(self._lib.toggle_sim_mem_alloc(self.handle, ctypes.byref(p), nbytes), "mem_alloc")
        return p.value

    def free(self, ptr):
        _check(self._lib.toggle_sim_mem_free(self.handle, ptr), "mem_free")

    def read(self, ptr, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        _check(self._lib.toggle_sim_memcpy_dtoh(self.handle, buf, ptr, nbytes), "memcpy_dtoh")
        return buf.raw

    def write(self, ptr, data, stream):
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        _check(self._lib.toggle_sim_memcpy_htod_async(ptr, buf, len(data), stream), "memcpy_htod")
