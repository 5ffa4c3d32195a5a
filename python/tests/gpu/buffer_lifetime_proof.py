"""buffer_lifetime_proof.py - a leg of `make gpu-check`: a graph keeps the monitor buffers
its producers write, on a real GPU with torch's caching allocator.

A CUDA graph holds no reference to the memory its kernels write.  An attachment detached
(att.detach()) and dropped while a graph captured with its hooks lives would give its
monitor buffers back to torch's allocator; the next tensors of that size get the same
memory, and a replay whose step enables those hooks writes activations into them.

Per mode (lazy: torch.mul producers; device: copy_out), a stack of Linear layers with
attach()'s declared buffers is captured under the patch, then detached and dropped.
Then 2L new tensors of the buffers' size are made (zeros), every hook is enabled and the
graph replays.  Ground truth is the new tensors' contents:

* as shipped: no new tensor got a buffer's address, every new tensor is still zero, and
  the replay wrote the activations (the graph's own buffers, read back by address through
  the graph state's kept references);
* control (the graph's kept references dropped by hand, what graphtoggle did before):
  new tensors get the buffers' addresses and the replay writes into them.  The control
  shows the check above can fail on this machine.

Prints "buffer-lifetime: PASS" or "buffer-lifetime: FAIL (...)"; exit 0 on PASS and on
SKIPPED (no torch or no GPU), 1 on FAIL.
"""

import gc
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

try:
    import torch
except ImportError:
    print("buffer-lifetime: SKIPPED: python3 cannot import torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("buffer-lifetime: SKIPPED: torch sees no CUDA device")
    sys.exit(0)

import graphtoggle.torch as gtt  # noqa: E402
from graphtoggle import Agent  # noqa: E402

L, T, H = 6, 64, 1024


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(H, H) for _ in range(L))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def trial(mode, control):
    """(new tensors at a buffer's address, new tensors written, buffers the replay
    wrote (None in the control))."""
    agent = Agent("buflife-%s" % mode, hooks={"mlp_out": L}, mode=mode)
    net = Net().cuda()
    x = torch.randn(T, H, device="cuda")
    att = agent.attach({"mlp_out": list(net.layers)}, max_tokens=T, width=H,
                       dtype=torch.float32)
    owner = gtt.patch(agent, random_ops=False)
    try:
        net(x)  # warm-up (cuBLAS), eager: no hook enabled, nothing copied
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            net(x)
        st = gtt._owner_of(g)
        old = {b.data_ptr() for b in att.buffers.values()}
        if len(old) != L or len(st.keep) != L:
            raise AssertionError("%d buffers, %d kept by the graph (want %d each)"
                                 % (len(old), len(st.keep), L))
        kept = list(st.keep)
        if control:
            st.keep = ()
            kept = []
        att.detach()
        del att
        gc.collect()
        fresh = [torch.zeros(T, H, device="cuda") for _ in range(2 * L)]
        reused = sum(t.data_ptr() in old for t in fresh)
        agent.set_enabled("all")
        agent.step(1)
        for b in kept:
            b.zero_()
        g.replay()
        torch.cuda.synchronize()
        dirty = sum(bool(t.any()) for t in fresh)
        wrote = None if control else sum(bool(b.any()) for b in kept)
        del g, st, kept
        gc.collect()
        return reused, dirty, wrote
    finally:
        owner.end()
        agent.close()


def main():
    errors = []
    for mode in ("lazy", "device"):
        reused, dirty, wrote = trial(mode, control=False)
        c_reused, c_dirty, _ = trial(mode, control=True)
        print("buffer-lifetime: %s: kept: %d of %d new tensors at a buffer's address, %d "
              "written, the replay wrote %d of %d buffers; control (not kept): %d at a "
              "buffer's address, %d written" % (mode, reused, 2 * L, dirty, wrote, L,
                                               c_reused, c_dirty))
        if reused or dirty:
            errors.append("%s: a replay wrote into %d new tensors" % (mode, dirty))
        if wrote != L:
            errors.append("%s: the replay wrote %d of %d kept buffers" % (mode, wrote, L))
        if not c_dirty:
            errors.append("%s: the control wrote no new tensor (the check proves nothing "
                          "here)" % mode)
    if errors:
        print("buffer-lifetime: FAIL (%s)" % "; ".join(errors))
        return 1
    print("buffer-lifetime: PASS (lazy, device: detached buffers stay with their graph)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
