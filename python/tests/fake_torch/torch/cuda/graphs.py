"""torch/cuda/graphs.py of torch 2.11, its structure: a Python CUDAGraph over
torch._C._CUDAGraph whose __new__ takes keep_graph, thin methods calling super(), and
the graph context manager."""

import gc

import torch
from torch._C import _CUDAGraph


class CUDAGraph(_CUDAGraph):
    def __new__(cls, keep_graph=False):
        return super().__new__(cls, keep_graph)

    def capture_begin(self, pool=None, capture_error_mode="global"):
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self):
        super().capture_end()

    def instantiate(self):
        super().instantiate()

    def replay(self):
        super().replay()

    def reset(self):
        super().reset()

    def pool(self):
        return super().pool()

    def enable_debug_mode(self):
        return super().enable_debug_mode()

    def raw_cuda_graph(self):
        return super().raw_cuda_graph()

    def raw_cuda_graph_exec(self):
        return super().raw_cuda_graph_exec()


class graph:  # noqa: N801
    default_capture_stream = None

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        if stream is None and self.__class__.default_capture_stream is None:
            self.__class__.default_capture_stream = torch.cuda.Stream()
        self.pool = () if pool is None else (pool,)
        self.capture_stream = (stream if stream is not None
                               else self.__class__.default_capture_stream)
        self.stream_ctx = torch.cuda.stream(self.capture_stream)
        self.cuda_graph = cuda_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        torch.cuda.synchronize()
        if torch.compiler.config.force_cudagraph_gc:
            gc.collect()
        torch.cuda.empty_cache()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *args):
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(*args)
