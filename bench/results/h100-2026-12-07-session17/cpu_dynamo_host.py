"""Session 17: dynamo's host work per call, the compiled hooked Llama against the floor (CPU).
Argument: a torch.compile backend, or "null" (a backend returning the recorded outputs, so
only dynamo's per-call work is timed).  Run from the repository root."""
import copy, sys, time, warnings, statistics
import torch
from transformers import LlamaConfig, LlamaForCausalLM
sys.path.insert(0, "python")  # from the repository root
import graphtoggle
from graphtoggle import Agent
warnings.simplefilter("ignore")
torch.manual_seed(0)
L = 16
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=L, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=256)
cfg._attn_implementation = "sdpa"
floor = LlamaForCausalLM(cfg).eval()
hooked = copy.deepcopy(floor)
def own(model):
    ns = {"model": model}
    exec("def decode_%d(ids, pos):\n    return model(input_ids=ids, position_ids=pos, use_cache=False).logits\n" % id(model), ns)
    return ns["decode_%d" % id(model)]
ids = torch.randint(0, 256, (1, 1)); pos = torch.full((1, 1), 5)
def per_call(fn, n=300, reps=7):
    fn(); res = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n): fn()
        res.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(res)
def guard_time(code_fn):
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    import torch._dynamo.convert_frame as cf
    out = []
    for c in cf.input_codes.seen:
        for e in _debug_get_cache_entry_list(c):
            gm = e.guard_manager
            out.append(gm)
    return out
with torch.no_grad(), Agent("g", hooks={"resid_post": L, "mlp_out": L}, backend="sim") as agent:
    layers = hooked.model.layers
    att = agent.attach({"resid_post": layers, "mlp_out": [l.mlp for l in layers]}, max_tokens=1, width=64, device="cpu")
    backend = sys.argv[1] if len(sys.argv) > 1 else "eager"
    if backend == "null":
        def backend(gm, ex):
            outs = gm(*ex)
            return lambda *a: outs
    cf_ = torch.compile(own(floor), fullgraph=True, dynamic=False, backend=backend)
    ch_ = torch.compile(own(hooked), fullgraph=True, dynamic=False, backend=backend)
    agent.set_enabled("none"); agent.step()
    cf_(ids, pos); ch_(ids, pos)
    import torch._dynamo.convert_frame as cvf
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    for c in [r() for r in cvf.input_codes.seen]:
        if c is None: continue
        for e in _debug_get_cache_entry_list(c):
            gm = e.guard_manager
            print(c.co_name, "guard lines", len(str(gm).splitlines()) if hasattr(gm, "__str__") else "?")
    def fstep(): return cf_(ids, pos)
    def hstep():
        agent.step(); return ch_(ids, pos)
    def hstep_nostep(): return ch_(ids, pos)
    for r in range(3):
        print("floor %.1f us/call, hooked %.1f (with step), hooked %.1f (no step)" % (per_call(fstep), per_call(hstep), per_call(hstep_nostep)))
