"""A Llama-shaped model on the fake torch: LlamaForCausalLM.model.layers[i].input_layernorm,
.self_attn, .post_attention_layernorm and .mlp, and model.norm, as vLLM's, with vLLM's
residual convention: a decoder layer returns (its MLP's output, the residual before it),
and the residual stream after layer i exists only inside the next fused add+norm
(layers[i + 1].input_layernorm, model.norm after the last layer), as the second element
of its output (vllm/model_executor/models/llama.py, LlamaDecoderLayer.forward and
LlamaModel.forward; vllm/model_executor/layers/layernorm.py, RMSNorm).  Each "linear" is
a simulator kernel; attention is unified_attention_with_output writing into a tensor the
layer allocates.  The compiled
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


class RMSNorm(nn.Module):
    """vLLM's RMSNorm: with a residual, the fused add+norm, returning (normed, x + residual);
    the "norm" here is an exact copy (1.0 * v + 0.0), so that the model's output is the
    residual stream after its last layer."""

    def forward(self, x, residual=None):
        if residual is not None:
            x = _add(x, residual)
            residual = x
        out = _linear(x, 1.0, 0.0)
        return out if residual is None else (out, residual)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.input_layernorm = RMSNorm()
        self.self_attn = LlamaAttention(i)
        self.post_attention_layernorm = RMSNorm()
        self.mlp = LlamaMLP(i)

    def forward(self, hidden_states, residual):
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(hidden_states)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual


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
        self.norm = RMSNorm()
        self.vllm_config = vllm_config
        self._compiled = None
        self.first_forward_hooks = None  # test aid: the forward hooks present when compiled

    def _forward(self, x):
        residual = None
        for layer in self.layers[self.start_layer:self.end_layer]:
            x, residual = layer(x, residual)
        x, _ = self.norm(x, residual)
        return x

    def __call__(self, x):
        cc = self.vllm_config.compilation_config
        if cc.mode != CompilationMode.VLLM_COMPILE:
            return self._forward(x)
        if self._compiled is None:
            # torch.compile traces here, at the first forward: what it sees is compiled
            self.first_forward_hooks = len(self.norm._forward_hooks) + sum(
                len(m._forward_hooks) for l in self.layers
                for m in (l, getattr(l, "input_layernorm", None), getattr(l, "self_attn", None),
                          getattr(l, "post_attention_layernorm", None), getattr(l, "mlp", None))
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
