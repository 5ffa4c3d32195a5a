"""Session 17: dynamo's guard check for the compiled Llama (CPU; 16 layers, hidden 64) with 32
hooks made six ways: none (floor); graphtoggle's attach(); no-op forward hooks calling an op of
the tap's kind with a buffer from a global dict (noop_hook), from a module attribute
(noop_attr), or with no buffer (noop_nobuf); wrapped forward methods (wrapped).  Argument: the
rounds (default 9) of 1000 checks each, legs interleaved.  Run from the repository root."""
import copy, sys, time, warnings, statistics, functools
import torch
from transformers import LlamaConfig, LlamaForCausalLM
sys.path.insert(0, "python")
from graphtoggle import Agent
warnings.simplefilter("ignore")
torch.manual_seed(0)
L = 16
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=L, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=256)
cfg._attn_implementation = "sdpa"
M = {"floor": LlamaForCausalLM(cfg).eval()}
for k in ("attach", "noop_hook", "wrapped", "noop_attr", "noop_nobuf"):
    M[k] = copy.deepcopy(M["floor"])
lib = torch.library.Library("s17", "DEF")
lib.define("hold(Tensor x, Tensor(a!) buf) -> ()")
lib.impl("hold", lambda x, buf: None, "CompositeExplicitAutograd")
@torch.library.register_fake("s17::hold")
def _(x, buf): return None
BUF = {}
HOLD = torch.ops.s17.hold.default
def mods(m):
    return [l for l in m.model.layers] + [l.mlp for l in m.model.layers]
for i, mod in enumerate(mods(M["noop_hook"])):
    BUF[("n", i)] = torch.empty(1, 1, 64)
    def hook(mod, inp, out, i=i):
        o = out[0] if isinstance(out, tuple) else out
        HOLD(o, BUF[("n", i)])
    mod.register_forward_hook(hook)
for i, mod in enumerate(mods(M["wrapped"])):
    BUF[("w", i)] = torch.empty(1, 1, 64)
    orig = type(mod).forward
    def fwd(*a, _orig=orig, _mod=mod, i=i, **kw):
        out = _orig(_mod, *a, **kw)
        o = out[0] if isinstance(out, tuple) else out
        HOLD(o, BUF[("w", i)])
        return out
    mod.forward = fwd
def fwd_floor(ids, pos):
    return M["floor"](input_ids=ids, position_ids=pos, use_cache=False).logits
def fwd_attach(ids, pos):
    return M["attach"](input_ids=ids, position_ids=pos, use_cache=False).logits
def fwd_noop_hook(ids, pos):
    return M["noop_hook"](input_ids=ids, position_ids=pos, use_cache=False).logits
def fwd_wrapped(ids, pos):
    return M["wrapped"](input_ids=ids, position_ids=pos, use_cache=False).logits
for i, mod in enumerate(mods(M["noop_attr"])):
    mod._gt_buf = torch.empty(1, 1, 64)
    def hook(mod, inp, out):
        o = out[0] if isinstance(out, tuple) else out
        HOLD(o, mod._gt_buf)
    mod.register_forward_hook(hook)
lib.define("hold0(Tensor x) -> ()")
lib.impl("hold0", lambda x: None, "CompositeExplicitAutograd")
@torch.library.register_fake("s17::hold0")
def _(x): return None
HOLD0 = torch.ops.s17.hold0.default
for i, mod in enumerate(mods(M["noop_nobuf"])):
    def hook(mod, inp, out):
        o = out[0] if isinstance(out, tuple) else out
        HOLD0(o)
    mod.register_forward_hook(hook)
def fwd_noop_attr(ids, pos):
    return M["noop_attr"](input_ids=ids, position_ids=pos, use_cache=False).logits
def fwd_noop_nobuf(ids, pos):
    return M["noop_nobuf"](input_ids=ids, position_ids=pos, use_cache=False).logits
def make(name):
    return globals()["fwd_" + name]
def null(gm, ex):
    outs = gm(*ex)
    return lambda *a: outs
ids = torch.randint(0, 256, (1, 1)); pos = torch.full((1, 1), 5)
with torch.no_grad(), Agent("g", hooks={"resid_post": L, "mlp_out": L}, backend="sim") as agent:
    layers = M["attach"].model.layers
    att = agent.attach({"resid_post": layers, "mlp_out": [l.mlp for l in layers]}, max_tokens=1, width=64, device="cpu")
    agent.set_enabled("none"); agent.step()
    legs = {}
    for name in M:
        f = make(name)
        c = torch.compile(f, fullgraph=True, dynamic=False, backend=null)
        c(ids, pos); c(ids, pos)
        e = torch._dynamo.eval_frame._debug_get_cache_entry_list(f.__code__)
        if not e:
            print(name, "no cache entry"); continue
        gm = e[0].guard_manager
        text = str(gm)
        print(name, "entries", len(e), "guard lines", text.count("\n"), "DICT_CONTAINS", text.count("DICT_CONTAINS"))
        legs[name] = (c, gm)
    loc = {"ids": ids, "pos": pos}
    res = {k: [] for k in legs}
    for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 9):
        for name, (c, gm) in legs.items():
            assert gm.check(loc)
            t = time.perf_counter()
            for _ in range(1000): gm.check(loc)
            res[name].append((time.perf_counter() - t) / 1000 * 1e6)
    for k, v in res.items():
        print("%-10s guard check median %.2f us (min %.2f)" % (k, statistics.median(v), min(v)))
