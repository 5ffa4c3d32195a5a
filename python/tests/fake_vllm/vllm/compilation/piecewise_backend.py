"""vLLM's piecewise graphs, as the fake makes them: real vLLM splits the traced FX graph at
every splitting op (unified_attention_with_output), compiles each piece and wraps it in a
CUDAGraphWrapper(runtime_mode=PIECEWISE), all made at the model's first forward (where
torch.compile traces it).  The fake keeps the runtime shape of that: per batch descriptor
one torch.cuda.CUDAGraph per piece between two attention ops, each captured with
torch.cuda.graph(g, pool=the global pool) on the current stream, the attention ops eager
between them, and at each replay every piece's graph replayed in order."""

import torch

from vllm.attention import current_breaker, set_breaker
from vllm.config import CUDAGraphMode
from vllm.forward_context import get_forward_context
from vllm.platforms import current_platform

MADE = []  # test aid: the backends made (one per compiled model)


class _PieceCapture:
    """Captures the pieces of one forward: a new graph after each attention op."""

    def __init__(self, pool):
        self.pool = pool
        self.segments = []  # ("graph", CUDAGraph) or ("eager", fn)
        self.capturing = False
        self._g = self._cm = None

    def begin(self):
        self._g = torch.cuda.CUDAGraph()
        self._cm = torch.cuda.graph(self._g, pool=self.pool, stream=torch.cuda.current_stream())
        self._cm.__enter__()
        self.capturing = True

    def end(self):
        if self.capturing:
            self._cm.__exit__(None, None, None)
            self.segments.append(("graph", self._g))
            self.capturing = False

    def add_eager(self, fn):
        self.end()
        out = fn()
        self.segments.append(("eager", fn))
        self.begin()
        return out


class PiecewiseBackend:
    """What the compiled model's forward becomes (made at its first call)."""

    def __init__(self, forward, vllm_config):
        self.forward = forward
        self.vllm_config = vllm_config
        self.graph_pool = current_platform.get_global_graph_pool()
        self.entries = {}
        MADE.append(self)

    def graphs(self):
        return [g for segs, _ in self.entries.values() for k, g in segs if k == "graph"]

    def __call__(self, *args):
        ctx = get_forward_context()
        if ctx is None or ctx.cudagraph_runtime_mode != CUDAGraphMode.PIECEWISE:
            return self.forward(*args)  # NONE, or inside a FULL graph's capture
        entry = self.entries.get(ctx.batch_descriptor)
        if entry is None:
            cap = _PieceCapture(self.graph_pool)
            assert current_breaker() is None
            set_breaker(cap)
            try:
                cap.begin()
                out = self.forward(*args)
                cap.end()
            finally:
                set_breaker(None)
            self.entries[ctx.batch_descriptor] = (cap.segments, out)
            return out
        segments, out = entry
        for kind, obj in segments:
            if kind == "graph":
                obj.replay()
            else:
                obj()
        return out
