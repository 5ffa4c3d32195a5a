"""tc_model.py - the model of issue 23's benches (python/tests/gpu/torch_compile_bench.py on
the GPU, bench/torch_compile_host.py on any machine): decoder-like layers (an attention
block of two Linears, a gated MLP, residual adds), and the modules attach() hooks on it
(resid_post: each layer, attn_out: its attention block, mlp_out: its MLP).  Written once
so that both benches time the same model.

norm=False (the default, the benches' model since issue 23 began): the residual sum feeds
the next Linear directly, so inductor folds each residual add into that Linear's GEMM
(addmm) unless the added output has another user: an attn_out or mlp_out tap breaks 16 of
these fusions.  norm=True: Llama-shaped pre-norm layers (an RMSNorm before the attention
block and the MLP, as in Llama, Mistral, Qwen), where the residual add fuses with the
norm instead and a tap breaks none."""

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.qkv = nn.Linear(h, 2 * h, bias=False)
        self.o = nn.Linear(h, h, bias=False)
        self.h = h

    def forward(self, x):
        return self.o(torch.tanh(self.qkv(x))[:, : self.h])


class MLP(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gu = nn.Linear(h, 2 * inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        g, u = self.gu(x).chunk(2, dim=-1)
        return self.down(torch.nn.functional.silu(g) * u)


class Layer(nn.Module):
    def __init__(self, h, inter, norm=False):
        super().__init__()
        self.attn, self.mlp = Attention(h), MLP(h, inter)
        self.n1 = nn.RMSNorm(h) if norm else nn.Identity()
        self.n2 = nn.RMSNorm(h) if norm else nn.Identity()

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class Model(nn.Module):
    def __init__(self, layers, h, inter, norm=False):
        super().__init__()
        self.layers = nn.ModuleList(Layer(h, inter, norm) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def modules_of(model):
    return {"resid_post": model.layers, "attn_out": [l.attn for l in model.layers],
            "mlp_out": [l.mlp for l in model.layers]}
