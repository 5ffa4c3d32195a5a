"""A Llama-shaped model on the fake torch: LlamaForCausalLM.model.layers[i].self_attn and
.mlp, as vLLM's; each "linear" is a simulator kernel; attention is
unified_attention_with_output writing into a tensor the layer allocates.  The compiled
forward (vLLM's @support_torch_compile: traced at the first call) is a PiecewiseBackend
when the cudagraph mode has piecewise graphs."""

import torch
from torch import nn

from vllm.attention import unified_attention_with_output
from vllm.config import CompilationMode


def _linear(x, k, b):
    out = torch.Tensor(x.shape)

    def kernel():
        out.data[:] = [k * v + b for v in x.data]
    torch.cuda.sim().kernel(torch.cuda.current_stream().cuda_stream, kernel)
    return out


def _add(x, y):
    out = torch.Tensor(x.shape)

    def kernel():
        out.data[:] = [a + b for a, b in zip(x.data, y.data)]
    torch.cuda.sim().kernel(torch.cuda.current_stream().cuda_stream, kernel)
    return out


class LlamaAttention(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.i = i

    def forward(self, x):
        q = _linear(x, 0.5, 0.01 * self.i)
        out = torch.Tensor(q.shape)  # allocated by the piece before the op
        unified_attention_with_output(q, out)
        return _linear(out, 0.9, 0.0)


class LlamaMLP(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.i = i

    def forward(self, x):
        return _linear(x, 0.25, 0.1)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.self_attn = LlamaAttention(i)
        self.mlp = LlamaMLP(i)

    def forward(self, x):
        h = _add(x, self.self_attn(x))
        return _add(h, self.mlp(h))


class PPMissingLayer(nn.Module):
    """A layer another pipeline stage holds (never called on this rank)."""

    def forward(self, x):
        raise AssertionError("PPMissingLayer called")


class LlamaModel(nn.Module):
    def __init__(self, vllm_config, start_layer=0, end_layer=None):
        super().__init__()
        n = vllm_config.model_config.hf_config.num_hidden_layers
        end = n if end_layer is None else end_layer
        self.start_layer, self.end_layer = start_layer, end
        self.layers = nn.ModuleList(LlamaDecoderLayer(i) if start_layer <= i < end
                                    else PPMissingLayer() for i in range(n))
        self.vllm_config = vllm_config
        self._compiled = None
        self.first_forward_hooks = None  # test aid: the forward hooks present when compiled

    def _forward(self, x):
        for layer in self.layers[self.start_layer:self.end_layer]:
            x = layer(x)
        return x

    def __call__(self, x):
        cc = self.vllm_config.compilation_config
        if cc.mode != CompilationMode.VLLM_COMPILE:
            return self._forward(x)
        if self._compiled is None:
            # torch.compile traces here, at the first forward: what it sees is compiled
            self.first_forward_hooks = sum(
                len(m._forward_hooks) for l in self.layers
                for m in (l, getattr(l, "self_attn", None), getattr(l, "mlp", None))
                if m is not None)
            from vllm.compilation.breakable_cudagraph import is_breakable_cudagraph_enabled
            if cc.cudagraph_mode.has_piecewise_cudagraphs() and \
                    not is_breakable_cudagraph_enabled():
                from vllm.compilation.piecewise_backend import PiecewiseBackend
                self._compiled = PiecewiseBackend(self._forward, self.vllm_config)
            else:
                self._compiled = self._forward
        return self._compiled(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, vllm_config):
        super().__init__()
        self.model = LlamaModel(vllm_config)

    def forward(self, x):
        return self.model(x)
