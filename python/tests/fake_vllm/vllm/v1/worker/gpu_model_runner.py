"""vllm.v1.worker.gpu_model_runner.GPUModelRunner: loads the model (and wraps it in a FULL
CUDAGraphWrapper, or a BreakableCUDAGraphWrapper, at the end of load_model), profiles it,
captures its graphs per batch size (largest first; warm-ups with runtime mode NONE before
each capture) and runs one forward per engine step, dispatched to FULL, PIECEWISE or NONE
by batch shape.  Inputs are copied into static per-size buffers, as vLLM's are."""

import os

import torch

from vllm.compilation.breakable_cudagraph import (BreakableCUDAGraphWrapper,
                                                  is_breakable_cudagraph_enabled)
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.config import CUDAGraphMode
from vllm.forward_context import BatchDescriptor, set_forward_context
from vllm.model_executor.models.llama import LlamaForCausalLM


class SchedulerOutput:
    def __init__(self, num_tokens, uniform_decode=True, values=None):
        self.total_num_scheduled_tokens = num_tokens
        self.uniform_decode = uniform_decode
        self.values = values


class ModelRunnerOutput:
    def __init__(self, num_tokens, padded, runtime_mode, output):
        self.num_tokens = num_tokens
        self.padded = padded
        self.runtime_mode = runtime_mode
        self.output = output


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.compilation_config = vllm_config.compilation_config
        self.model_config = vllm_config.model_config
        self.model = None
        H = self.model_config.hf_config.hidden_size
        self.max_num_tokens = self.model_config.max_num_batched_tokens
        self.inputs = {}
        self.H = H
        self.captured = set()  # (mode, BatchDescriptor)
        self.last = None

    def load_model(self):
        self.model = LlamaForCausalLM(self.vllm_config)
        mode = self.compilation_config.cudagraph_mode
        if is_breakable_cudagraph_enabled() and mode != CUDAGraphMode.NONE:
            self.model = BreakableCUDAGraphWrapper(self.model, self.vllm_config)
        elif mode.has_full_cudagraphs():
            self.model = CUDAGraphWrapper(self.model, self.vllm_config,
                                          runtime_mode=CUDAGraphMode.FULL)

    def get_model(self):
        return self.model

    def initialize_kv_cache(self, kv_cache_config):
        self.kv_cache_config = kv_cache_config

    def _input(self, n):
        if n not in self.inputs:
            self.inputs[n] = torch.Tensor((n, self.H), data=[0.0] * (n * self.H))
        return self.inputs[n]

    def _dummy_run(self, num_tokens, cudagraph_runtime_mode=CUDAGraphMode.NONE,
                   uniform_decode=False):
        desc = BatchDescriptor(num_tokens, uniform_decode)
        with set_forward_context(self.vllm_config, cudagraph_runtime_mode, desc):
            return self.model(self._input(num_tokens))

    def profile_run(self):
        self._dummy_run(self.max_num_tokens)

    def capture_model(self):
        if os.environ.get("FAKE_VLLM_CAPTURE_WITHOUT_HOOKS") == "1":
            # test aid: what a compiled artifact built without the hooks does (vLLM's
            # compile cache, say): the captured code runs none of the modules' hooks
            return self._capture_without_hooks()
        self._capture_all()

    def _capture_all(self):
        cc = self.compilation_config
        mode = cc.cudagraph_mode
        breakable = is_breakable_cudagraph_enabled()
        for n in cc.cudagraph_capture_sizes:  # largest first
            todo = []
            if breakable:
                todo.append((CUDAGraphMode.PIECEWISE, False))
            else:
                if mode.mixed_mode() == CUDAGraphMode.PIECEWISE:
                    todo.append((CUDAGraphMode.PIECEWISE, False))
                if mode.decode_mode() == CUDAGraphMode.FULL:
                    todo.append((CUDAGraphMode.FULL, mode.separate_routine()))
            for rt, uniform in todo:
                for _ in range(cc.cudagraph_num_of_warmups):
                    self._dummy_run(n, CUDAGraphMode.NONE, uniform)
                self._dummy_run(n, rt, uniform)
                self.captured.add((rt, BatchDescriptor(n, uniform)))

    def _capture_without_hooks(self):
        mods, seen = [], set()

        def walk(m):
            if id(m) in seen or not isinstance(m, torch.nn.Module):
                return
            seen.add(id(m))
            mods.append(m)
            for v in list(vars(m).values()) + (list(m) if isinstance(m, list) else []):
                walk(v)
        m = self.model
        while hasattr(type(m), "unwrap"):  # CUDAGraphWrapper, BreakableCUDAGraphWrapper
            m = m.unwrap()
        walk(m)
        saved = [(m, dict(m._forward_hooks)) for m in mods]
        for m, _ in saved:
            m._forward_hooks.clear()
        try:
            self._capture_all()
        finally:
            for m, hooks in saved:
                m._forward_hooks.update(hooks)

    def dispatch(self, num_tokens, uniform_decode):
        """(runtime mode, padded size): the smallest captured size that fits, FULL for a
        uniform decode batch where there is one, else PIECEWISE, else NONE."""
        for n in sorted(self.compilation_config.cudagraph_capture_sizes):
            if n < num_tokens:
                continue
            for rt, uniform in ((CUDAGraphMode.FULL, True), (CUDAGraphMode.FULL, False),
                                (CUDAGraphMode.PIECEWISE, False)):
                if uniform and not uniform_decode:
                    continue
                if (rt, BatchDescriptor(n, uniform)) in self.captured:
                    return rt, n, uniform
        return CUDAGraphMode.NONE, num_tokens, False

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        n = scheduler_output.total_num_scheduled_tokens
        rt, padded, uniform = self.dispatch(n, scheduler_output.uniform_decode)
        x = self._input(padded)
        vals = scheduler_output.values or [0.1 * (i % 7) for i in range(padded * self.H)]
        x.data[:] = (list(vals) + [0.0] * (padded * self.H))[:padded * self.H]
        desc = BatchDescriptor(padded, uniform)
        with set_forward_context(self.vllm_config, rt, desc):
            out = self.model(x)
        self.last = ModelRunnerOutput(n, padded, rt.name, list(out.data))
        return self.last
