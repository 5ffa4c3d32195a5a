"""attach()'s hooks keep dynamo's guards cheap (issue 23, mode c): the compiled code's guard
tree marks each hooked layer as a tag-safe root, as it does for the same model without
hooks, so a call checks one dict tag per layer instead of every guard of its hooks (the
hook's code, each closure cell, the hook dict's keys: +120 to +180 us of host time per
call on the H200 when a closure cell held the op object).  Structural, not timed: the
cost is bench/torch_compile_host.py's.

Needs the real torch with the recursive dict-tag guards (torch 2.11:
GRAPHTOGGLE_TEST_TORCH=real python -m pytest tests/test_compile_guards.py); skipped
otherwise, e.g. in make check with the fake torch."""

import copy
import re
import warnings

import pytest

torch = pytest.importorskip("torch", reason="needs torch")
if getattr(torch, "FAKE", False) or not hasattr(torch, "compile"):
    pytest.skip("needs the real torch: GRAPHTOGGLE_TEST_TORCH=real python -m pytest "
                "tests/test_compile_guards.py, with a python that has torch",
                allow_module_level=True)

from torch import nn  # noqa: E402

from graphtoggle import Agent  # noqa: E402

H = 8
L = 4


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(H, H)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(H, H)
        self.mlp = Mlp()

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(L))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch._dynamo.reset()


def _guards(fn, x):
    """The text of the guard tree of fn's compiled code (torch.compile, backend eager)."""
    c = torch.compile(fn, fullgraph=True, dynamic=False, backend="eager")
    c(x)
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__)
    assert len(entries) == 1
    text = str(entries[0].guard_manager)
    if "tag_safe=" not in text:
        pytest.skip("this torch prints no tag-safe roots (no recursive dict-tag guards)")
    return text


def _tag_safe_layers(text):
    """Which layers (model.layers[i]) are tag-safe roots of the guard tree."""
    pat = r"source=[^,]*\._modules\['layers'\]\._modules\['(\d+)'\], [^\n]*tag_safe=\(True, True\)"
    return sorted(int(m) for m in re.findall(pat, text))


def test_hooked_layers_are_tag_safe_roots_like_the_floor():
    torch.manual_seed(0)
    floor = Model().eval()
    hooked = copy.deepcopy(floor)
    x = torch.randn(4, H)

    def fwd_floor(x):
        return floor(x)

    def fwd_hooked(x):
        return hooked(x)

    with Agent("guards-test", hooks={"resid_post": L, "mlp_out": L, "attn_out": L},
               backend="sim") as agent:
        att = agent.attach({"resid_post": hooked.layers,
                            "mlp_out": [l.mlp for l in hooked.layers],
                            "attn_out": [l.attn for l in hooked.layers]},
                           max_tokens=4, width=H, device="cpu")
        agent.set_enabled("all")
        agent.step()
        want = _tag_safe_layers(_guards(fwd_floor, x))
        assert want == list(range(L))
        text = _guards(fwd_hooked, x)
        # the hooks were traced (their op is in the guarded code) ...
        assert "_forward_hooks" in text
        # ... and leave every hooked layer a tag-safe root, as without hooks
        assert _tag_safe_layers(text) == want, text
        att.detach()


def test_legacy_buffers_keep_layers_tag_safe():
    """Buffers made by the first eager forward (no max_tokens): the hooks read a dict of
    buffers by shape while traced; the layers stay tag-safe roots."""
    torch.manual_seed(0)
    hooked = Model().eval()
    x = torch.randn(4, H)

    def fwd_legacy(x):
        return hooked(x)

    with Agent("guards-legacy", hooks={"resid_post": L}, backend="sim") as agent:
        att = agent.attach({"resid_post": hooked.layers})
        agent.set_enabled("all")
        agent.step()
        hooked(x)  # the eager run that makes the buffers
        assert _tag_safe_layers(_guards(fwd_legacy, x)) == list(range(L))
        att.detach()


def test_detach_and_reattach_after_compile_are_seen():
    """The fast path skips a layer's guards only while its dicts are unchanged: removing
    the hooks (detach) changes _forward_hooks, so the compiled code is not reused with
    the hooks gone; attached again, after the torch.compiler.reset() attach() asks for,
    they run again and follow the step's set."""
    torch.manual_seed(0)
    m = Model().eval()
    x = torch.randn(4, H)
    c = torch.compile(m, fullgraph=True, dynamic=False, backend="eager")
    with Agent("guards-detach", hooks={"resid_post": L}, backend="sim") as agent:
        def written(att):
            return sum(not bool(torch.isnan(b).all()) for b in att.buffers.values())

        def run(att):
            for b in att.buffers.values():
                b.fill_(float("nan"))
            out = c(x)
            n = written(att)  # by the compiled code alone, before the eager reference
            assert torch.allclose(out, m(x))
            return n
        agent.set_enabled("all")
        agent.step()
        att = agent.attach({"resid_post": m.layers}, max_tokens=4, width=H, device="cpu")
        assert run(att) == L
        att.detach()
        assert run(att) == 0  # the same buffers: nothing wrote them without the hooks
        # attaching to a model compiled without hooks is not seen by dynamo (torch's
        # skip_nnmodule_hook_guards, as before the guard fix): attach() warns and names
        # the remedy, torch.compiler.reset()
        with pytest.warns(UserWarning, match="torch.compiler.reset"):
            att2 = agent.attach({"resid_post": m.layers}, max_tokens=4, width=H,
                                device="cpu")
        torch.compiler.reset()
        assert run(att2) == L
        agent.set_enabled("none")
        agent.step()
        assert run(att2) == 0
        att2.detach()


def _hook_cells(text):
    """{a hook's source: {closure cell index: the type dynamo guarded}}: the cells of
    attach()'s hooks that the traced code read."""
    pat = (r"source=(\S*\._forward_hooks\[[^\n]*?\])\.__closure__\[(\d+)\]\.cell_contents, "
           r"accessed_by=GetAttrGuardAccessor\(cell_contents\), type=<class '(\w+)'>")
    out = {}
    for hook, i, t in re.findall(pat, text):
        out.setdefault(hook, {})[int(i)] = t
    return out


def test_a_traced_hook_reads_one_int_cell():
    """Each guard of a hook's closure is evaluated at every call where the layers above it
    are not tag-safe roots (transformers 5.17's Llama layers are not, hooks or no hooks):
    a traced hook without a select reads its buffer's key, one int that also gives its
    hook id, nothing else (before session 23: five cells, the is_compiling function, a
    bool, the hook id and a (serial, hook id) tuple among them; session 23: the key and
    select, None; bench/results/h100-2026-12-07-session23/guards.py).  With a select, the
    select too."""
    torch.manual_seed(0)
    hooked = Model().eval()
    x = torch.randn(4, H)

    def fwd(x):
        return hooked(x)

    def compiled_writes_every_buffer(att):
        for b in att.buffers.values():
            b.fill_(float("nan"))
        torch.compile(fwd, fullgraph=True, dynamic=False, backend="eager")(x)
        assert all(not bool(torch.isnan(b).all()) for b in att.buffers.values())

    with Agent("guards-cells", hooks={"resid_post": L, "mlp_out": L},
               backend="sim") as agent:
        att = agent.attach({"resid_post": hooked.layers,
                            "mlp_out": [l.mlp for l in hooked.layers]},
                           max_tokens=4, width=H, device="cpu")
        agent.set_enabled("all")
        agent.step()
        cells = _hook_cells(_guards(fwd, x))
        assert len(cells) == 2 * L, sorted(cells)
        for hook, read in cells.items():
            assert sorted(read.values()) == ["int"], (hook, read)
        compiled_writes_every_buffer(att)
        att.detach()
        torch._dynamo.reset()

        def first(out):
            return out[0] if isinstance(out, (tuple, list)) else out
        att = agent.attach({"resid_post": hooked.layers}, max_tokens=4, width=H,
                           device="cpu", select=first)
        cells = _hook_cells(_guards(fwd, x))
        assert len(cells) == L, sorted(cells)
        for hook, read in cells.items():
            assert sorted(read.values()) == ["function", "int"], (hook, read)
        compiled_writes_every_buffer(att)
        att.detach()
