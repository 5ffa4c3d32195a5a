"""standin_kernels.py - what inductor (CPU backend) makes of torch_compile_bench's model
three ways: the floor (no hooks), the stand-in (hooks calling an op of the tap's kind that
does nothing: torch_compile_bench.standin_copy) and attach()'s hooks (graphtoggle's tap):
the kernel calls of each compiled forward, counted in inductor's generated code.  8 layers,
hidden 256, MLP 512, float32, 8 tokens.  Usage: python standin_kernels.py (a python with
torch; graphtoggle's build/libtoggle.so built)."""
import os
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
TCB = os.path.join(REPO, "python", "tests", "gpu", "torch_compile_bench.py")
import sys, types, os, re, warnings
warnings.filterwarnings("ignore")
sys.argv=["x"]
sys.path.insert(0,os.path.join(REPO, "python", "tests", "gpu")); sys.path.insert(0,os.path.join(REPO, "python"))
os.environ.setdefault("GRAPHTOGGLE_LIB", os.path.join(REPO, "build", "libtoggle.so"))
import torch, graphtoggle
src=open(TCB).read()
src=src.replace('if not torch.cuda.is_available():', 'if False:')
mod=types.ModuleType("tcb"); sys.modules["tcb"]=mod; mod.__file__=TCB
exec(compile(src.replace('if __name__ == "__main__":', 'if False:'), "tcb", "exec"), mod.__dict__)
from tc_model import Model, modules_of
from torch._inductor.utils import run_and_get_code
torch.manual_seed(0)
floor = Model(8, 256, 512).eval()
st = mod.standin_copy(floor, False, 8, 256, torch.float32)
hk = mod.hooked_copy(floor)
x = torch.randn(8, 256)
def count(code):
    c = "\n".join(code)
    calls = re.findall(r"^\s+(cpp_fused_\w+|extern_kernels\.\w+|torch\.ops\.\w+\.\w+\.default)\(", c, re.M)
    from collections import Counter
    return Counter(re.sub(r"_\d+$", "", k) if k.startswith("cpp_fused") else k for k in calls)
with torch.no_grad(), graphtoggle.Agent("x", hooks={"resid_post": 8, "attn_out": 8, "mlp_out": 8}, backend="sim") as agent:
    att = agent.attach(modules_of(hk), max_tokens=8, width=256, dtype=torch.float32, device="cpu")
    for name, m in (("floor", floor), ("standin", st), ("hooked", hk)):
        _, code = run_and_get_code(torch.compile(mod._own_forward(m), fullgraph=True, dynamic=False), x)
        c = count(code)
        k = {kk: v for kk, v in c.items() if not kk.startswith("cpp_fused")}
        print(name, "fused cpp kernels:", sum(v for kk, v in c.items() if kk.startswith("cpp_fused")), k)
