"""Session 23: dynamo's per-call host work, hooked Llama against the floor, on a device
(argv: device [hidden] [backend]): a backend returning the recorded outputs ("null") leaves
only dynamo's work (guards, the transformed frame, the wrapper); the number of guard lines
per cache entry, and each entry's guard check timed alone."""
import copy, os, sys, time, warnings, statistics
import torch
from transformers import LlamaConfig, LlamaForCausalLM
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
from graphtoggle import Agent
warnings.simplefilter("ignore")
torch.manual_seed(0)
dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
H = int(sys.argv[2]) if len(sys.argv) > 2 else 64
bk = sys.argv[3] if len(sys.argv) > 3 else "null"
L = 16
dt = torch.bfloat16 if dev == "cuda" else torch.float32
cfg = LlamaConfig(hidden_size=H, intermediate_size=2 * H, num_hidden_layers=L, num_attention_heads=4,
                  num_key_value_heads=4, vocab_size=256, max_position_embeddings=2048)
cfg._attn_implementation = "sdpa"
floor = LlamaForCausalLM(cfg).to(device=dev, dtype=dt).eval()
hooked = copy.deepcopy(floor)
def own(model):
    ns = {"model": model}
    exec("def decode_%d(ids, pos):\n    return model(input_ids=ids, position_ids=pos, use_cache=False).logits\n" % id(model), ns)
    return ns["decode_%d" % id(model)]
inputs = {bs: (torch.randint(0, 256, (bs, 1), device=dev), torch.full((bs, 1), 5, device=dev)) for bs in (8, 1)}
def per_call(fn, n=300, reps=7):
    fn(); res = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n): fn()
        res.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(res)
backend = bk
if bk == "null":
    def backend(gm, ex):
        outs = gm(*ex)
        return lambda *a: outs
from torch._dynamo.external_utils import wrap_inline
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
with torch.no_grad(), Agent("g", hooks={"resid_post": L, "mlp_out": L}, backend="sim" if dev == "cpu" else None) as agent:
    layers = hooked.model.layers
    att = agent.attach({"resid_post": layers, "mlp_out": [l.mlp for l in layers]}, max_tokens=8, width=H, dtype=dt, device=dev)
    f0, h0 = own(floor), own(hooked)
    cf_ = torch.compile(f0, fullgraph=True, dynamic=False, backend=backend)
    ch_ = torch.compile(h0, fullgraph=True, dynamic=False, backend=backend)
    agent.set_enabled("none"); agent.step()
    for a in inputs.values():
        for _ in range(3):
            cf_(*a); agent.step(); ch_(*a)
    import torch._dynamo.convert_frame as cvf
    for c in [r() for r in cvf.input_codes.seen]:
        if c is None: continue
        for i, e in enumerate(_debug_get_cache_entry_list(c)):
            s = str(e.guard_manager)
            print("guards: %s entry %d: %d lines, %d TENSOR_MATCH, %d ID_MATCH, %d lambda/python" % (
                c.co_name, i, len(s.splitlines()), s.count("TENSOR_MATCH"), s.count("ID_MATCH"),
                s.count("LAMBDA_GUARD") + s.count("PythonLambda")))
    for bs, a in inputs.items():
        def fstep(a=a): return cf_(*a)
        def hstep(a=a):
            agent.step(); return ch_(*a)
        def hcall(a=a): return ch_(*a)
        def step_only(): agent.step()
        for r in range(2):
            print("%s H %d bs %d: floor %.1f us/call, hooked %.1f (with step), hooked %.1f (no step), step %.1f" % (
                dev, H, bs, per_call(fstep), per_call(hstep), per_call(hcall), per_call(step_only)), flush=True)
