"""pw_model.py - the model and the engine that piecewise_proof.py and piecewise_bench.py
share (python/tests/gpu): a stack of decoder-like layers whose attention is a registered op
(gtpw_gpu::attention, mutating an output tensor the piece before it allocates, as vLLM's
unified_attention_with_output does), compiled with graphtoggle.piecewise.Backend, which
splits the FX graph at that op, compiles every piece with inductor and captures each piece
per batch size into one shared pool; FULL graphs of the whole forward for the decode sizes
(vLLM's FULL_AND_PIECEWISE); sizes without graphs run the compiled pieces eagerly.

Producers, two ways:
  attach    graphtoggle.torch.attach() on the modules (attn_out: each layer's attention
            block, mlp_out: its MLP, resid_post: the layer), what an engine does; needs the
            registered producer op (torch.ops.graphtoggle.tap, issue 23 item 1) for
            torch.compile to trace the hooks.
  standin   a stand-in registered op (gtpw_gpu::tap, shaped like graphtoggle's) called at the
            same three points of the forward, its eager body a producer region
            (agent.producer + torch.mul, or agent.copy_out in device mode) while a capture
            runs and, outside one, a copy exactly when the hook is in the step's set.
"""

import torch

TYPES = ("resid_post", "attn_out", "mlp_out")
ATTN_OP = "gtpw_gpu::attention"


@torch.library.custom_op("gtpw_gpu::attention", mutates_args=("out",))
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
    """Attention of the batch's queries over a fixed context (k, v: [ctx, H]), written into
    out (allocated by the piece before: a static address in the graphs)."""
    s = torch.softmax(q @ k.t() * (q.shape[-1] ** -0.5), dim=-1)
    torch.matmul(s, v, out=out)


@attention.register_fake
def _(q, k, v, out):
    return None


def has_tap_op():
    """Whether graphtoggle.torch registered its producer op (torch.ops.graphtoggle.tap, issue
    23 item 1), which attach()'s hooks need under torch.compile."""
    try:
        torch.ops.graphtoggle.tap.default
    except (AttributeError, RuntimeError):
        return False
    return True


class StandIn:
    """What gtpw_gpu::tap's eager body uses: the agent, how it records, the step's set."""
    agent = None
    method = "mul"
    current = frozenset()  # hook ids (type index * L + layer) of the step's effective set
    hooks = ()             # hook id -> (type, layer)


@torch.library.custom_op("gtpw_gpu::tap", mutates_args=("buf",))
def tap(x: torch.Tensor, buf: torch.Tensor, hook: int) -> None:
    if torch.cuda.is_current_stream_capturing():
        a = StandIn.agent
        h = StandIn.hooks[hook]
        if StandIn.method == "copy_out":
            a.copy_out(x, buf, h)
        else:
            with a.producer(h):
                torch.mul(x, 1, out=buf)
    elif hook in StandIn.current:
        buf.copy_(x)


@tap.register_fake
def _(x, buf, hook):
    return None


class Taps:
    """Stand-in monitor buffers: one per (hook, batch size), made before compile and
    capture."""

    def __init__(self, layers, hidden, sizes, dtype, sentinel):
        self.L = layers
        self.bufs = {}
        for t in range(len(TYPES)):
            for l in range(layers):
                for bs in sizes:
                    self.bufs[(t, l, bs)] = torch.full((bs, hidden), sentinel, device="cuda",
                                                       dtype=dtype)

    def __call__(self, t, l, x):
        torch.ops.gtpw_gpu.tap(x, self.bufs[(t, l, x.shape[0])], t * self.L + l)

    def by_hook(self):
        out = {}
        for (t, l, _), b in self.bufs.items():
            out.setdefault((TYPES[t], l), []).append(b)
        return out


class Attn(torch.nn.Module):
    def __init__(self, H, ctx, g, dtype):
        super().__init__()
        self.wq = torch.nn.Parameter(torch.randn(H, H, device="cuda", generator=g, dtype=dtype)
                                     * H ** -0.5, requires_grad=False)
        self.wo = torch.nn.Parameter(torch.randn(H, H, device="cuda", generator=g, dtype=dtype)
                                     * H ** -0.5, requires_grad=False)
        self.register_buffer("k", torch.randn(ctx, H, device="cuda", generator=g, dtype=dtype))
        self.register_buffer("v", torch.randn(ctx, H, device="cuda", generator=g, dtype=dtype))

    def forward(self, x):
        q = x @ self.wq
        a = torch.empty_like(q)
        torch.ops.gtpw_gpu.attention(q, self.k, self.v, a)
        return torch.tanh(a @ self.wo)


class MLP(torch.nn.Module):
    def __init__(self, H, I, g, dtype):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(H, I, device="cuda", generator=g, dtype=dtype)
                                     * H ** -0.5, requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.randn(I, H, device="cuda", generator=g, dtype=dtype)
                                     * I ** -0.5, requires_grad=False)

    def forward(self, x):
        return torch.tanh(torch.nn.functional.silu(x @ self.w1) @ self.w2)


class Layer(torch.nn.Module):
    def __init__(self, i, H, I, ctx, g, dtype):
        super().__init__()
        self.i = i
        self.attn = Attn(H, ctx, g, dtype)
        self.mlp = MLP(H, I, g, dtype)
        self.taps = None

    def forward(self, x):
        a = self.attn(x)
        if self.taps is not None:
            self.taps(1, self.i, a)
        h = x + a
        m = self.mlp(h)
        if self.taps is not None:
            self.taps(2, self.i, m)
        y = torch.tanh(h + m)
        if self.taps is not None:
            self.taps(0, self.i, y)
        return y


class Model(torch.nn.Module):
    """Activations are bounded by tanh: never equal to the sentinel."""

    def __init__(self, layers, hidden, inter=None, ctx=64, seed=0, dtype=torch.float32):
        super().__init__()
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.layers = torch.nn.ModuleList(
            Layer(i, hidden, inter or 2 * hidden, ctx, g, dtype) for i in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def set_taps(self, taps):
        for layer in self.layers:
            layer.taps = taps

    def hook_modules(self):
        """attach()'s modules: the same three points the stand-in taps sit at."""
        return {"resid_post": list(self.layers),
                "attn_out": [l.attn for l in self.layers],
                "mlp_out": [l.mlp for l in self.layers]}


class Engine:
    """The engine in miniature, vLLM's order: compile (torch.compile with the piecewise
    backend), warm up every size outside graphs, capture the piecewise graphs largest size
    first (every piece of a size into the backend's one pool), then FULL graphs of the whole
    forward for the full sizes in the same pool; run(bs, kind) is one step's forward."""

    def __init__(self, model, pw_sizes, full_sizes=(), eager_sizes=(), warmups=2):
        from graphtoggle import piecewise
        self.model = model
        self.backend = piecewise.Backend(splitting_ops=[ATTN_OP])
        self.pw_sizes = sorted(pw_sizes, reverse=True)
        self.full_sizes = sorted(full_sizes, reverse=True)
        self.eager_sizes = sorted(eager_sizes, reverse=True)
        sizes = set(pw_sizes) | set(full_sizes) | set(eager_sizes)
        H = model.layers[0].attn.wq.shape[0]
        dtype = model.layers[0].attn.wq.dtype
        g = torch.Generator(device="cuda").manual_seed(1234)
        # the static input (engines copy each step's input into it) and fixed step inputs
        self.xs = torch.zeros(max(sizes) + 1, H, device="cuda", dtype=dtype)
        self.inputs = {bs: torch.rand(bs, H, device="cuda", generator=g, dtype=dtype) * 2 - 1
                       for bs in sizes}
        self.fwd = torch.compile(model, backend=self.backend, fullgraph=True, dynamic=False)
        self.warmups = warmups
        self.full = {}
        self.full_out = {}
        self.pieces_by_bs = {}
        self.sizes = sorted(sizes, reverse=True)

    def build(self):
        b = self.backend
        with torch.inference_mode():
            with b.forward_mode("none"):
                for bs in self.sizes:
                    n0 = len(b.pieces)
                    for _ in range(self.warmups):
                        self.fwd(self.xs[:bs])
                    # dynamic=False: dynamo gave the backend one graph for this size
                    self.pieces_by_bs[bs] = b.pieces[n0:]
            torch.cuda.synchronize()
            for bs in self.pw_sizes:
                self.fwd(self.xs[:bs])  # mode "piecewise": captures every piece
            for bs in self.full_sizes:
                g = torch.cuda.CUDAGraph()
                with b.forward_mode("full"):
                    with torch.cuda.graph(g, pool=b.pool):
                        self.full_out[bs] = self.fwd(self.xs[:bs])
                self.full[bs] = g
            torch.cuda.synchronize()
        b.capture_enabled = False

    def kinds(self):
        """The (batch size, kind) pairs a step can run."""
        return ([(bs, "piecewise") for bs in self.pw_sizes]
                + [(bs, "full") for bs in self.full_sizes]
                + [(bs, "eager") for bs in self.eager_sizes])

    def run(self, bs, kind):
        self.xs[:bs].copy_(self.inputs[bs])
        with torch.inference_mode():
            if kind == "full":
                self.full[bs].replay()
                return self.full_out[bs]
            if kind == "eager":
                with self.backend.forward_mode("none"):
                    return self.fwd(self.xs[:bs])
            return self.fwd(self.xs[:bs])

    def graphs(self):
        """Every graph: the pieces' and the FULL ones, as (label, torch.cuda.CUDAGraph)."""
        out = [("bs %d %s" % (bs, p.name), e.graph)
               for bs, ps in self.pieces_by_bs.items() for p in ps for e in p.entries.values()]
        out += [("full bs %d" % bs, g) for bs, g in self.full.items()]
        return out
