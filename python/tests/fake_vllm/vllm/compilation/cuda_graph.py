"""vllm.compilation.cuda_graph.CUDAGraphWrapper: per batch descriptor, capture the runnable
into a torch.cuda.CUDAGraph from the global pool on first use, replay it after; a forward
whose runtime mode is NONE or another wrapper's runs the runnable directly."""

import torch

from vllm.config import CUDAGraphMode
from vllm.forward_context import get_forward_context
from vllm.platforms import current_platform

CAPTURED = []  # test aid: (runtime mode, batch descriptor) of every capture


class CUDAGraphEntry:
    def __init__(self, batch_descriptor):
        self.batch_descriptor = batch_descriptor
        self.cudagraph = None
        self.output = None


class CUDAGraphWrapper:
    def __init__(self, runnable, vllm_config, runtime_mode):
        assert runtime_mode != CUDAGraphMode.NONE
        self.runnable = runnable
        self.vllm_config = vllm_config
        self.runtime_mode = runtime_mode
        self.graph_pool = current_platform.get_global_graph_pool()
        self.concrete_cudagraph_entries = {}

    def __getattr__(self, key):
        runnable = self.__dict__.get("runnable")
        if runnable is not None and hasattr(runnable, key):
            return getattr(runnable, key)
        raise AttributeError(key)

    def unwrap(self):
        return self.runnable

    def __call__(self, *args):
        ctx = get_forward_context()
        mode = ctx.cudagraph_runtime_mode
        if mode == CUDAGraphMode.NONE or mode != self.runtime_mode:
            return self.runnable(*args)
        desc = ctx.batch_descriptor
        entry = self.concrete_cudagraph_entries.setdefault(desc, CUDAGraphEntry(desc))
        if entry.cudagraph is None:
            cudagraph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cudagraph, pool=self.graph_pool,
                                  stream=torch.cuda.current_stream()):
                output = self.runnable(*args)
            entry.output = output
            entry.cudagraph = cudagraph
            CAPTURED.append((self.runtime_mode.name, desc))
            return output
        entry.cudagraph.replay()
        return entry.output
