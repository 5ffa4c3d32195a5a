"""vllm.compilation.breakable_cudagraph: one capture context drives the whole forward and
ends the current graph at each attention op, runs it eagerly and starts a new graph; the
artifact is a list of zero-argument callables, the *bound* CUDAGraph.replay of each graph
segment (taken at capture end) and the eager ops, replayed in order."""

import torch

import vllm.envs as envs
from vllm.attention import current_breaker, set_breaker
from vllm.config import CUDAGraphMode
from vllm.forward_context import get_forward_context, is_forward_context_available
from vllm.platforms import current_platform


def is_breakable_cudagraph_enabled():
    return bool(envs.VLLM_USE_BREAKABLE_CUDAGRAPH)


class BreakableCUDAGraphCapture:
    def __init__(self, pool=None):
        self.pool = pool
        self.segments = []
        self._current_graph = None
        self.capturing = False
        self.graphs = []

    def __enter__(self):
        assert current_breaker() is None, "nested capture"
        set_breaker(self)
        self._begin_segment()
        return self

    def __exit__(self, *exc):
        try:
            self._end_segment()
        finally:
            set_breaker(None)

    def _begin_segment(self):
        g = torch.cuda.CUDAGraph()
        g.capture_begin(pool=self.pool)
        self._current_graph = g
        self.capturing = True

    def _end_segment(self):
        if not self.capturing:
            return
        self._current_graph.capture_end()
        self.segments.append(self._current_graph.replay)  # bound now
        self.graphs.append(self._current_graph)
        self._current_graph = None
        self.capturing = False

    def add_eager(self, fn):
        self._end_segment()
        result = fn()
        self.segments.append(fn)
        self._begin_segment()
        return result

    def replay(self):
        for r in self.segments:
            r()


class BreakableCUDAGraphWrapper:
    def __init__(self, runnable, vllm_config):
        self.runnable = runnable
        self.vllm_config = vllm_config
        self.graph_pool = current_platform.get_global_graph_pool()
        self.entries = {}

    def __getattr__(self, key):
        runnable = self.__dict__.get("runnable")
        if runnable is not None and hasattr(runnable, key):
            return getattr(runnable, key)
        raise AttributeError(key)

    def unwrap(self):
        return self.runnable

    def __call__(self, *args):
        if not is_forward_context_available():
            return self.runnable(*args)
        ctx = get_forward_context()
        if ctx.cudagraph_runtime_mode == CUDAGraphMode.NONE:
            return self.runnable(*args)
        entry = self.entries.get(ctx.batch_descriptor)
        if entry is None:
            cap = BreakableCUDAGraphCapture(pool=self.graph_pool)
            with cap:
                out = self.runnable(*args)
            self.entries[ctx.batch_descriptor] = (cap, out)
            return out
        cap, out = entry
        cap.replay()
        return out
