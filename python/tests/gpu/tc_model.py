"""tc_model.py - the model of issue 23's benches (python/tests/gpu/torch_compile_bench.py on
the GPU, bench/torch_compile_host.py on any machine): decoder-like layers (an attention
block of two Linears, a gated MLP, residual adds), and the modules attach() hooks on it
(resid_post: each layer, attn_out: its attention block, mlp_out: its MLP).  Written once
so that both benches time the same model."""

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
    def __init__(self, h, inter):
        super().__init__()
        self.attn, self.mlp = Attention(h), MLP(h, inter)

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self, layers, h, inter):
        super().__init__()
        self.layers = nn.ModuleList(Layer(h, inter) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def modules_of(model):
    return {"resid_post": model.layers, "attn_out": [l.attn for l in model.layers],
            "mlp_out": [l.mlp for l in model.layers]}
