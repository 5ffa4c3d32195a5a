"""The tap op's cached destination views (graphtoggle.ops._dst_of): an enabled eager call
reuses the view of its buffer it made last time only for the same buffer object, storage
and shape, and refuses what the uncached path refuses.  The real torch's cases (a buffer
whose storage was replaced, another device, grad mode) need GRAPHTOGGLE_TEST_TORCH=real;
the rest runs on the fake torch too (make check)."""

import pytest

torch = pytest.importorskip("torch", reason="needs torch")

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402
from graphtoggle import Agent  # noqa: E402

REAL = not getattr(torch, "FAKE", False) and hasattr(torch, "compile")
real_only = pytest.mark.skipif(not REAL, reason="needs the real torch "
                               "(GRAPHTOGGLE_TEST_TORCH=real)")
DEV = {"device": "cpu"} if REAL else {}


@pytest.fixture
def setup():
    ops = gtt._ops()
    with Agent("op-cache", hooks={"mlp_out": 2}, backend="sim") as a:
        hid = gtt.hook_id(a, ("mlp_out", 0))
        a.set_enabled("all")
        a.step()
        yield a, ops, hid
        ops.forget([hid])


def _vals(t):
    return list(t.reshape(-1).tolist()) if REAL else list(t.data)


def test_same_buffer_other_shapes_and_other_buffer(setup):
    a, ops, hid = setup
    buf = torch.empty(4, 2, **DEV).fill_(0.0)
    ops.tap(torch.empty(1, 2, **DEV).fill_(1.0), buf, hid)
    ops.tap(torch.empty(1, 2, **DEV).fill_(2.0), buf, hid)  # the cached view
    assert _vals(buf) == [2.0, 2.0] + [0.0] * 6
    ops.tap(torch.empty(3, 2, **DEV).fill_(3.0), buf, hid)  # another shape: a new view
    assert _vals(buf) == [3.0] * 6 + [0.0] * 2
    other = torch.empty(4, 2, **DEV).fill_(0.0)
    ops.tap(torch.empty(3, 2, **DEV).fill_(4.0), other, hid)  # another buffer, same shape
    assert _vals(other) == [4.0] * 6 + [0.0] * 2
    assert _vals(buf) == [3.0] * 6 + [0.0] * 2  # the cached view of buf was not used
    with pytest.raises(graphtoggle.InvalidArgumentError, match="no monitor buffer"):
        ops.tap(torch.empty(5, 2, **DEV), buf, hid)  # still refused: no room


def test_disabled_hook_writes_nothing_after_the_cache(setup):
    a, ops, hid = setup
    buf = torch.empty(2, 2, **DEV).fill_(0.0)
    ops.tap(torch.empty(2, 2, **DEV).fill_(1.0), buf, hid)
    a.set_enabled("none")
    a.step()
    ops.tap(torch.empty(2, 2, **DEV).fill_(5.0), buf, hid)
    assert _vals(buf) == [1.0] * 4


def test_detach_forgets_the_views(setup):
    a, ops, hid = setup

    class M(torch.nn.Module):
        def forward(self, x):
            return x

    m = M()
    att = a.attach({"mlp_out": [m]}, max_tokens=2, width=2, **DEV)
    m(torch.empty(2, 2, **DEV).fill_(1.0))
    ids = list(att.hook_ids.values())
    assert any(h in ops._dsts for h in ids)
    att.detach()
    assert not any(h in ops._dsts for h in ids)


@real_only
def test_a_buffer_with_new_storage_gets_a_new_view(setup):
    a, ops, hid = setup
    buf = torch.zeros(4, 2)
    ops.tap(torch.ones(2, 2), buf, hid)
    buf.set_(torch.zeros(4, 2))  # the same tensor object, another storage
    ops.tap(torch.full((2, 2), 7.0), buf, hid)
    assert buf[:2].eq(7.0).all() and buf[2:].eq(0.0).all()


@real_only
def test_x_on_another_device_is_refused_with_the_view_cached(setup):
    a, ops, hid = setup
    buf = torch.zeros(2, 2)
    ops.tap(torch.ones(2, 2), buf, hid)
    with pytest.raises(graphtoggle.InvalidArgumentError, match="meta"):
        ops.tap(torch.empty(2, 2, device="meta"), buf, hid)


@real_only
def test_grad_mode_keeps_the_buffer_out_of_autograd(setup):
    a, ops, hid = setup
    buf = torch.zeros(2, 2)
    x = torch.ones(2, 2, requires_grad=True) * 3
    with torch.enable_grad():
        ops.tap(x, buf, hid)
        ops.tap(x, buf, hid)
    assert buf.grad_fn is None and not buf.requires_grad
    assert buf.eq(3.0).all()
    with torch.no_grad():
        ops.tap(torch.full((2, 2), 4.0), buf, hid)
    assert buf.eq(4.0).all()


@real_only
def test_a_buffer_restrided_in_place_is_refused(setup):
    """set_ on the same storage and offset keeps the address; made non-contiguous the
    buffer is refused as the uncached path refuses it."""
    a, ops, hid = setup
    buf = torch.zeros(4, 2)
    ops.tap(torch.ones(2, 2), buf, hid)
    buf.set_(buf.untyped_storage(), 0, (2, 2), (1, 2))  # a transposed view of the start
    assert not buf.is_contiguous()
    with pytest.raises(graphtoggle.InvalidArgumentError, match="not contiguous"):
        ops.tap(torch.ones(2, 2), buf, hid)
