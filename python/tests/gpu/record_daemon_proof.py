"""record_daemon_proof.py - issue 24's proof of the whole recording path through toggled:
an engine with an agent connected to a real toggled, `togglectl record SPEC --steps N -o
DIR` records it, and `graphtoggle.recording.open(DIR)` is checked against ground truth.

The engine (--engine):
  cuda  examples/torch_engine.py's model (graphs per batch size captured by its own code
        under graphtoggle.torch.patch, producers on forward hooks through the registered
        op, eager forwards now and then), as python/tests/gpu/record_proof.py runs it;
  sim   libtoggle's simulator (no GPU, no torch): one graph whose producer kernels stamp
        the run and the hook into each hook's buffer (python/tests/test_record_sim.py's).

Ground truth is the monitor buffers themselves: every buffer is filled with a sentinel
before the replay; right after it the buffers of the step's hooks are copied (the
reference: a clone on the replay's stream, or the simulator's bytes).  The hooks are
driven by toggled only: a standing set (`togglectl set`), the recording's SPEC (which
adds to it), and plans (`togglectl plan submit`, absolute steps a few ahead, submitted
while the engine waits) that give some steps another set than the standing one, so that
SPEC hooks are off at some steps.  Proves:

 1. every record in DIR equals the reference of its step and hook byte for byte (shape,
    dtype, the graph of its replay: the batch size's graph, 0 for an eager forward);
 2. no record exists for a hook its step did not enable, nor for a hook outside SPEC;
 3. nothing is lost: from the recording's first step to its last, every hook of SPEC
    that a step enabled has its record (the first step may be partial: the agent reads
    the recording's request at each launch), the recording holds exactly N steps and
    says complete, the agent dropped nothing, and `togglectl --json agents` counts as
    forwarded exactly the records in DIR;
 4. the replays stayed exact: at every step the producers that ran are exactly the
    step's set (the sentinel check), the engine's set is toggled's;
 5. the hooks the recording added are gone from the standing set after it.

toggled and togglectl: $TOGGLED and $TOGGLECTL, else scripts/bench-daemon-bundle.sh's
bundle (.gpu/benchd/new/, its libraries in .gpu/benchd/lib: the GPU machine has none of
the -dev packages), else build/.  Prints "record-daemon-proof: PASS" or
"record-daemon-proof: FAIL (...)"; exit 0 on PASS and on SKIPPED (no toggled, or for
--engine cuda no torch or no GPU), 1 on FAIL.

    python3 python/tests/gpu/record_daemon_proof.py --engine cuda --modes lazy,device
    python3 python/tests/gpu/record_daemon_proof.py --engine sim        (no GPU)
"""

import argparse
import ctypes
import importlib.util
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

TAG = "record-daemon-proof"


def find_daemon():
    """(toggled, togglectl, environment for both), or None.  The engine's process may
    run with sanitizer runtimes preloaded (make check's pytest.sh): the tools get none."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if os.environ.get("TOGGLED") and os.environ.get("TOGGLECTL"):
        return os.environ["TOGGLED"], os.environ["TOGGLECTL"], env
    bundle = os.path.join(REPO, ".gpu", "benchd")
    for base, lib in ((os.path.join(bundle, "new"), os.path.join(bundle, "lib")),
                      (os.path.join(REPO, "build"), None)):
        d, c = os.path.join(base, "toggled"), os.path.join(base, "togglectl")
        if os.access(d, os.X_OK) and os.access(c, os.X_OK):
            if lib:
                env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"]
                                                if env.get("LD_LIBRARY_PATH") else "")
            return d, c, env
    return None


class Daemon:
    """A private toggled and the togglectl that talks to it."""

    def __init__(self, toggled, togglectl, env):
        self.ctl_bin, self.env = togglectl, env
        self.dir = tempfile.mkdtemp(prefix="gt-recd.")
        self.sock = os.path.join(self.dir, "t.sock")
        self.logpath = os.path.join(self.dir, "toggled.log")
        log = open(self.logpath, "w")
        self.proc = subprocess.Popen([toggled, "--socket", self.sock, "--state-dir",
                                      os.path.join(self.dir, "state")],
                                     stdout=log, stderr=log, env=env)
        log.close()
        self.wait(lambda: self.ctl("status", check=False).returncode == 0, "toggled to start")

    def wait(self, cond, what, secs=20):
        end = time.monotonic() + secs
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.02)
        raise RuntimeError("timed out waiting for %s; toggled's log:\n%s"
                           % (what, open(self.logpath).read()[-4000:]))

    def ctl(self, *args, check=True):
        r = subprocess.run([self.ctl_bin, "--socket", self.sock] + list(args),
                           capture_output=True, text=True, timeout=60, env=self.env)
        if check and r.returncode:
            raise RuntimeError("togglectl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                             r.stderr.strip()))
        return r

    def agent(self, name):
        for a in json.loads(self.ctl("--json", "agents").stdout)["agents"]:
            if a["name"] == name:
                return a
        return None

    def record(self, name, spec, steps, out):
        return subprocess.Popen([self.ctl_bin, "--socket", self.sock, "--json", "--agents",
                                 "name:" + name, "record", spec, "--steps", str(steps),
                                 "-o", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env)

    def close(self):
        self.proc.terminate()
        rc = self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def hook_of(text):
    t, l = text.rsplit(":", 1)
    return (t, int(l))


# ---- the engines ------------------------------------------------------------------
# Each: .agent; .hooks (every (type, layer)); .step(eager) -> (step, effective set, refs)
# where refs maps (hook, eager) -> (payload bytes, shape, graph); .mismatches (steps whose
# producers that ran were not the step's set); .close().

class SimEngine:
    """The simulator: one graph; per hook a producer region whose kernel stamps (run,
    hook, i) as floats into the hook's buffer (simulator memory, read back as bytes)."""
    ELEMS = 8
    SENTINEL = struct.pack("<f", -7.0) * ELEMS

    def __init__(self, name, mode, sock, capacity):
        import graphtoggle
        self.agent = a = graphtoggle.Agent(name, hooks={"resid_post": 4, "mlp_out": 4},
                                           mode=mode,
                                           backend="sim", socket=sock)
        self.sim = sim = a.sim
        self.stream = sim.stream()
        self.runs = 0
        self.hooks = [(t, l) for t in a.catalog.names for l in range(a.catalog.n_layers)]
        self.buf = {h: sim.alloc(4 * self.ELEMS) for h in self.hooks}
        with a.capture():
            sim.begin_capture(self.stream)
            sim.kernel(self.stream, self._head)
            for i, h in enumerate(self.hooks):
                with a.producer(h, stream=self.stream):
                    sim.kernel(self.stream, lambda i=i, h=h: self._write(i, h))
            self.graph = sim.end_capture(self.stream)
        self.exec = a.instantiate(self.graph)
        self.rec = a.recorder(capacity << 20)
        for h in self.hooks:
            self.rec.buffer(h, ptr=self.buf[h], nbytes=4 * self.ELEMS, dtype="F32",
                            shape=(2, self.ELEMS // 2))
        self.mismatches = []

    def _head(self):
        self.runs += 1

    def _write(self, i, h):
        vals = [float(self.runs * 1000 + i * 10 + k) for k in range(self.ELEMS)]
        data = struct.pack("<%df" % self.ELEMS, *vals)
        ctypes.memmove(self.buf[h], data, len(data))

    def step(self, eager):
        a = self.agent
        eff = a.step().to_set()
        step = a.current_step
        for h in self.hooks:
            ctypes.memmove(self.buf[h], self.SENTINEL, len(self.SENTINEL))
        a.launch(self.graph, self.exec, self.stream)
        got = {h: self.sim.read(self.buf[h], 4 * self.ELEMS) for h in self.hooks}
        ran = {h for h, b in got.items() if b != self.SENTINEL}
        if ran != eff:
            self.mismatches.append((step, sorted(ran), sorted(eff)))
        refs = {(h, False): (got[h], (2, self.ELEMS // 2), self.graph) for h in eff}
        return step, eff, refs

    def close(self):
        self.agent.close()


class TorchEngine:
    """examples/torch_engine.py's model as record_proof.py runs it (graphs per batch
    size under the patch, forward-hook producers through the op, eager forwards)."""

    def __init__(self, name, mode, sock, capacity, args):
        import graphtoggle
        import graphtoggle.torch as gtt
        import torch
        self.torch = torch
        spec = importlib.util.spec_from_file_location(
            "torch_engine", os.path.join(REPO, "examples", "torch_engine.py"))
        eng = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(eng)
        self.eng = eng
        torch.manual_seed(args.seed)
        self.rng = random.Random(args.seed)
        self.model = eng.Model(args.layers, args.hidden).cuda().eval()
        self.agent = a = graphtoggle.Agent(name, hooks={t: args.layers for t in eng.TYPES},
                                           mode=mode, socket=sock)
        self.hooks = [(t, l) for t in eng.TYPES for l in range(args.layers)]
        self.att = a.attach({
            "resid_post": self.model.layers,
            "attn_out": [l.attn for l in self.model.layers],
            "mlp_out": [l.mlp for l in self.model.layers],
        })
        self.static_in = torch.zeros(max(eng.SIZES), args.hidden, device="cuda")
        self.nograd = torch.no_grad()
        self.nograd.__enter__()
        self.patch = gtt.patch(a)
        self.patch.__enter__()
        self.graphs = {}
        for bs in eng.SIZES:
            x = self.static_in[:bs]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.model(x)  # warm-up: makes the per-shape buffers
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.model(x)
            self.graphs[bs] = g
        self.rec = a.recorder(capacity << 20)
        self.mismatches = []

    def step(self, eager):
        torch, eng, a = self.torch, self.eng, self.agent
        eff = a.step().to_set()
        step = a.current_step
        bs = self.rng.choice(eng.SIZES)
        self.static_in[:bs].uniform_(-1, 1)
        bufs = {(t, l): b for (t, l, shape, _), b in self.att.buffers.items()
                if shape[0] == bs}
        for b in bufs.values():
            b.fill_(eng.SENTINEL)
        g = self.graphs[bs]
        g.replay()
        clones = {(h, False): bufs[h].clone() for h in eff}
        ran = {h for h, b in bufs.items() if bool((b != eng.SENTINEL).any())}
        if ran != eff:
            self.mismatches.append((step, sorted(ran), sorted(eff)))
        if eager and eff:
            self.model(self.static_in[:bs])  # the op's eager body: copies and records
            clones.update({(h, True): bufs[h].clone() for h in eff})
        torch.cuda.current_stream().synchronize()
        graph = g.raw_cuda_graph()
        refs = {k: (t.contiguous().cpu().numpy().tobytes(), tuple(t.shape),
                    0 if k[1] else graph) for k, t in clones.items()}
        return step, eff, refs

    def close(self):
        self.patch.__exit__(None, None, None)
        self.nograd.__exit__(None, None, None)
        self.att.detach()
        self.agent.close()


# ---- the proof --------------------------------------------------------------------

def spec_hooks(spec, hooks):
    """The (type, layer) hooks of a spec such as "resid_post:1-2,mlp_out:0" ('*': all)."""
    out = set()
    for part in spec.split(","):
        t, ls = part.split(":")
        for r in ls.split(";"):
            if r == "*":
                out |= {h for h in hooks if h[0] == t}
            elif "-" in r:
                a, b = r.split("-")
                out |= {(t, l) for l in range(int(a), int(b) + 1)}
            else:
                out.add((t, int(r)))
    return out


def prove(d, engine, name, args, note):
    import graphtoggle.recording as recording
    hooks = engine.hooks
    types = sorted({t for t, _ in hooks})
    t0, t1 = types[0], types[-1]
    standing = "%s:0-1,%s:0" % (t0, t1)
    spec = "%s:1-2,%s:0-1" % (t0, t1)
    want = spec_hooks(spec, hooks)
    # the agent and its ring reach toggled (the ring is offered by libtoggle's thread)
    d.wait(lambda: (d.agent(name) or {}).get("ring") is not None, "the agent's data ring")
    d.ctl("--agents", "name:" + name, "set", standing)
    before = d.agent(name)["enabled"]
    out = os.path.join(d.dir, "rec-" + name)
    rp = d.record(name, spec, args.record_steps, out)
    rng = random.Random(args.seed)
    truth = {}   # step -> (effective set, refs)
    steps = 0
    plan_choices = ["none", "%s:1" % t0, "%s:0,%s:1" % (t1, t1), spec, "all"]
    while rp.poll() is None and steps < args.max_steps:
        if steps % args.plan_every == args.plan_every // 2:
            # a plan for the next steps: the engine waits, so they have not begun
            cur = engine.agent.current_step
            entries = [{"step": cur + 2 + k, "hooks": rng.choice(plan_choices)}
                       for k in range(3)]
            pf = os.path.join(d.dir, "plan.json")
            with open(pf, "w") as f:
                json.dump(entries, f)
            d.ctl("--agents", "name:" + name, "plan", "submit", pf)
        step, eff, refs = engine.step(eager=(steps % 23 == 11))
        truth[step] = (eff, refs)
        steps += 1
    if rp.poll() is None:
        rp.kill()
        note("togglectl record did not end within %d engine steps" % args.max_steps)
    so, se = rp.communicate(timeout=60)
    if rp.returncode != 0:
        note("togglectl record exited %d: %s" % (rp.returncode, se.strip()[-500:]))
        return None
    engine.rec.flush()
    last = json.loads(so.strip().splitlines()[-1])
    r = recording.open(out, as_="bytes")
    if not r.complete:
        note("the recording is not complete: %s" % r.index.get("stopped"))
    got = {}    # step -> {(hook, eager)}
    n = exact = eager_n = 0
    for x in r:
        n += 1
        h = hook_of(x.hook)
        eager = x.graph == 0
        key = (h, eager)
        eff, refs = truth.get(x.step, (None, {}))
        if eff is None:
            note("record step %d hook %s: a step the engine never ran" % (x.step, x.hook))
            continue
        if h not in want:
            note("record step %d hook %s: not in the recording's spec %s" % (x.step, x.hook, spec))
        if h not in eff:
            note("record step %d hook %s: its step did not enable it (set %s)"
                 % (x.step, x.hook, sorted(eff)))
            continue
        if key not in refs:
            note("record step %d hook %s%s: no such run" % (x.step, x.hook,
                                                             " eager" if eager else ""))
            continue
        if key in got.setdefault(x.step, set()):
            note("record step %d hook %s%s twice" % (x.step, x.hook, " eager" if eager else ""))
        got[x.step].add(key)
        data, shape, graph = refs[key]
        if x.tensor != data or tuple(x.shape) != shape or x.dtype != "F32" or x.graph != graph:
            note("record step %d hook %s%s: %d bytes %s %s graph %#x differ from the buffer "
                 "(%d bytes %s graph %#x)" % (x.step, x.hook, " eager" if eager else "",
                                              len(x.tensor), x.dtype, list(x.shape), x.graph,
                                              len(data), list(shape), graph))
        else:
            exact += 1
            eager_n += eager
    if not got:
        note("no records")
        return None
    first, final = min(got), max(got)
    if len(got) != args.record_steps:
        note("%d steps recorded, --steps %d" % (len(got), args.record_steps))
    missing = []
    for s in range(first, final + 1):
        eff, refs = truth[s]
        expect = {k for k in refs if k[0] in want}
        have = got.get(s, set())
        lost = expect - have
        if lost and s != first:  # the first step may begin before the agent saw the request
            missing.append((s, sorted(lost)))
    if missing:
        note("%d steps lack records, e.g. %s" % (len(missing), missing[:3]))
    st = engine.rec.stats()
    if not st["staged"]:
        note("the recorder copied record by record: no gather kernel or staging")
    a = d.agent(name)
    ring = a["ring"] or {}
    if st["dropped"] or ring.get("dropped"):
        note("dropped: the agent says %d, toggled shows %s" % (st["dropped"], ring.get("dropped")))
    if ring.get("forwarded_records") != n:
        note("toggled forwarded %s records, DIR holds %d" % (ring.get("forwarded_records"), n))
    if last.get("recorded", {}).get("records") != n:
        note("togglectl's summary says %s records, DIR holds %d"
             % (last.get("recorded", {}).get("records"), n))
    d.wait(lambda: d.agent(name)["enabled"] == before, "the recording's hooks to be removed")
    if engine.mismatches:
        note("%d replays ran another set than their step's, e.g. %s"
             % (len(engine.mismatches), engine.mismatches[:2]))
    offs = sum(1 for s in range(first, final + 1) if not (truth[s][0] & want))
    return ("%d records exact (%d of eager forwards), steps %d to %d (%d recorded, %d with "
            "no hook of the spec on), %d engine steps, 0 dropped, forwarded %d"
            % (exact, eager_n, first, final, len(got), offs, steps, ring.get("forwarded_records")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("cuda", "sim"), default="cuda")
    ap.add_argument("--modes", default="lazy,device")
    ap.add_argument("--record-steps", type=int, default=200)
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--plan-every", type=int, default=15)
    ap.add_argument("--capacity", type=int, default=16, help="ring MiB (a power of two)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    found = find_daemon()
    if not found:
        print("%s: SKIPPED: no toggled and togglectl ($TOGGLED/$TOGGLECTL, "
              "scripts/bench-daemon-bundle.sh's .gpu/benchd/new, or build/)" % TAG)
        return 0
    if args.engine == "cuda":
        try:
            import torch
        except ImportError:
            print("%s: SKIPPED: python3 cannot import torch" % TAG)
            return 0
        if not torch.cuda.is_available():
            print("%s: SKIPPED: torch sees no CUDA device" % TAG)
            return 0
    print("%s: toggled %s, togglectl %s" % (TAG, found[0], found[1]), flush=True)
    ok = True
    for mode in args.modes.split(","):
        fails = []

        def note(msg, mode=mode, fails=fails):
            if len(fails) < 20:
                print("%s: [%s] %s" % (TAG, mode, msg), flush=True)
            fails.append(msg)
        d = Daemon(*found)
        engine = None
        name = "recd-" + mode
        try:
            t = time.monotonic()
            if args.engine == "sim":
                engine = SimEngine(name, mode, d.sock, args.capacity)
            else:
                engine = TorchEngine(name, mode, d.sock, args.capacity, args)
            summary = prove(d, engine, name, args, note)
            if summary:
                print("%s: [%s] %s; %.1f s" % (TAG, mode, summary, time.monotonic() - t),
                      flush=True)
        except Exception as e:  # a crash is a failure, with its reason
            import traceback
            traceback.print_exc()
            note("FAIL: %s" % e)
        finally:
            if engine is not None:
                engine.close()
            rc = d.close()
            if rc:
                note("toggled exited %d" % rc)
        ok &= not fails
    print("%s: PASS" % TAG if ok else "%s: FAIL (see above)" % TAG)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
