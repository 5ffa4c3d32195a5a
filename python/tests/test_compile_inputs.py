"""Compiled code fetches attach()'s monitor buffers cheaply (issue 23, mode c): a buffer is a
graph input that the compiled code loads at every call from where dynamo found it.  Read
from a hook's closure, that was one Python helper call per hook (torch._dynamo.utils.
dict_keys_getitem on the module's _forward_hooks, 24 a call on the 8-layer bench model:
the larger part of what mode c's calls still added on the H200 after the guard fix); from
graphtoggle.torch's global table it is a subscript.  Counted, not timed, on the CPU; the
buffers the compiled code writes are still attach()'s own, and detach() still makes the
compiled code fail its guards.

Needs the real torch (GRAPHTOGGLE_TEST_TORCH=real python -m pytest
tests/test_compile_inputs.py); skipped otherwise, e.g. in make check with the fake torch."""

import warnings

import pytest

torch = pytest.importorskip("torch", reason="needs torch")
if getattr(torch, "FAKE", False) or not hasattr(torch, "compile"):
    pytest.skip("needs the real torch: GRAPHTOGGLE_TEST_TORCH=real python -m pytest "
                "tests/test_compile_inputs.py, with a python that has torch",
                allow_module_level=True)

import torch._dynamo.utils as dynamo_utils  # noqa: E402
from torch import nn  # noqa: E402

from graphtoggle import Agent  # noqa: E402

H = 8
L = 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(H, H) for _ in range(L))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch._dynamo.reset()


@pytest.fixture
def helper_calls(monkeypatch):
    """How many times compiled code calls dynamo's dict_keys_getitem helper."""
    n = [0]
    orig = dynamo_utils.dict_keys_getitem

    def counted(*a):
        n[0] += 1
        return orig(*a)

    monkeypatch.setattr(dynamo_utils, "dict_keys_getitem", counted)
    return n


@pytest.mark.parametrize("declared", [True, False], ids=["max_tokens", "made_by_shape"])
def test_buffers_fetched_without_a_helper_call_per_hook(helper_calls, declared):
    torch.manual_seed(0)
    m = Model().eval()
    x = torch.randn(4, H)
    with Agent("inputs-test", hooks={"resid_post": L}, backend="sim") as agent:
        if declared:
            att = agent.attach({"resid_post": m.layers}, max_tokens=4, width=H, device="cpu")
        else:
            att = agent.attach({"resid_post": m.layers})
            agent.set_enabled("all")
            agent.step()
            m(x)  # the eager run that makes the buffers, outside the compile
        c = torch.compile(lambda x: m(x), fullgraph=True, dynamic=False, backend="eager")
        agent.set_enabled("all")
        agent.step()
        c(x)
        c(x)
        helper_calls[0] = 0
        for _ in range(5):
            c(x)
        assert helper_calls[0] == 0, "%d helper calls in 5 calls" % helper_calls[0]
        # the compiled code still writes attach()'s buffers: the step's set, every layer
        for b in att.buffers.values():
            b.zero_()
        y = c(x)
        h = x
        for layer, b in zip(m.layers, [att.buffer("resid_post", i) for i in range(L)]):
            out = layer(h)  # what the layer's hook saw
            assert torch.allclose(b[: out.shape[0]], out)
            h = torch.tanh(out)
        assert torch.allclose(y, h)
        # off: no buffer written
        agent.set_enabled("none")
        agent.step()
        for b in att.buffers.values():
            b.fill_(7.0)
        c(x)
        assert all(bool((b == 7.0).all()) for b in att.buffers.values())
        att.detach()
