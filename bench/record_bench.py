"""record_bench.py - issue 24's targets (docs/benchmarks.md, "Recording"): 32 hooks of 4 MiB
per step in total (32 x 128 KiB) recorded at the engine's full decode rate.

The engine: examples/torch_engine.py's model (--layers 32, --hidden 4096, one CUDA graph of
batch --batch 8 captured under graphtoggle.torch.patch; resid_post:0-31 is 32 hooks of
8 x 4096 F32 = 128 KiB), its agent connected to a private toggled (--engine sim: the
simulator instead, 32 producers of 128 KiB, for a smoke test without a GPU).  Each step is
a decode step: toggle_step_begin, the replay, a synchronize (the sampled token read back).
The producers are on in every phase (the standing set resid_post:*); what differs:
  on      nothing recorded (no recording runs: the ring's request is off);
  disk    `togglectl record resid_post:* -o DIR` (until interrupted) runs;
  python  a Python subscriber (graphtoggle.client Client.record iterator, its own
          process, payloads as bytes) reads the records.
The phases are interleaved: --rounds rounds, each running the three in a rotated order,
each phase --block-seconds of steps back to back.  The D2H bandwidth is measured in the
same run: pinned cudaMemcpy (torch copy_ into pin_memory, CUDA events) of 256 MiB, 4 MiB and
128 KiB, medians.  Printed, one line per figure:

  record-bench: d2h ...          the measured device-to-host bandwidth
  record-bench: step ...         median step time per phase, ratios to "on" (target <= 1.01)
  record-bench: disk ...         sustained bytes/s togglectl wrote (its progress lines, the
                                 phase's steady part), against the D2H bandwidth; drops
  record-bench: python ...       the same for the subscriber

toggled and togglectl as record_daemon_proof.py finds them ($TOGGLED/$TOGGLECTL,
scripts/bench-daemon-bundle.sh's .gpu/benchd, build/).  The subscriber needs
graphtoggle.client's toggle_pb2.py (`make python-client`; an ignored file: carry it) and
Python's protobuf; without them its lines say "not measured" and why.  DIR is under --out
(default .gpu/recbench, on the machine's disk; its file system is printed), removed after
each phase.

    python3 bench/record_bench.py                     # on the H200 (~1-2 min)
    python3 bench/record_bench.py --engine sim --rounds 1 --block-seconds 1   # smoke test
"""

import argparse
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
TAG = "record-bench"
SPEC = "resid_post:*"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, path))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


proof = load("python/tests/gpu/record_daemon_proof.py", "record_daemon_proof")

# The subscriber, in a process of its own (the engine's GIL is not its): one JSON line a
# second {"t", "records", "bytes", "dropped"} and a last one at SIGTERM.
SUBSCRIBER = r"""
import json, signal, sys, time
sys.path.insert(0, sys.argv[2])
from graphtoggle.client import Client
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
sub = Client(sys.argv[1]).record(sys.argv[3], as_="bytes")
t0 = time.monotonic(); last = 0.0; n = b = 0
def line():
    print(json.dumps({"t": time.monotonic() - t0, "records": n, "bytes": b,
                      "dropped": sub.dropped}), flush=True)
print(json.dumps({"started": True}), flush=True)
while not stop:
    r = sub.next(timeout=0.2)
    if r is not None:
        n += 1; b += len(r.tensor)
    if time.monotonic() - last >= 0.5:
        last = time.monotonic(); line()
line()
sub.close()
"""


class CudaEngine:
    def __init__(self, name, sock, args):
        import torch
        import graphtoggle
        import graphtoggle.torch as gtt
        self.torch = torch
        eng = load("examples/torch_engine.py", "torch_engine")
        torch.manual_seed(0)
        self.model = eng.Model(args.layers, args.hidden).cuda().eval()
        self.agent = a = graphtoggle.Agent(name, hooks={t: args.layers for t in eng.TYPES},
                                           mode=args.mode, socket=sock)
        self.att = a.attach({
            "resid_post": self.model.layers,
            "attn_out": [l.attn for l in self.model.layers],
            "mlp_out": [l.mlp for l in self.model.layers],
        })
        self.nograd = torch.no_grad()
        self.nograd.__enter__()
        self.patch = gtt.patch(a)
        self.patch.__enter__()
        x = torch.rand(args.batch, args.hidden, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.model(x)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.model(x)
        self.rec = a.recorder(args.capacity << 20)
        self.step_bytes = args.layers * args.batch * args.hidden * 4

    def step(self):
        self.agent.step()
        self.graph.replay()
        self.torch.cuda.current_stream().synchronize()

    def d2h(self, reps):
        """{bytes: median GB/s} of pinned device-to-host copies (cudaMemcpyAsync)."""
        torch = self.torch
        out = {}
        for n in (256 << 20, 4 << 20, 128 << 10):
            dev = torch.empty(n, dtype=torch.uint8, device="cuda")
            host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            host.copy_(dev, non_blocking=True)
            torch.cuda.synchronize()
            ts = []
            for _ in range(reps):
                a.record()
                host.copy_(dev, non_blocking=True)
                b.record()
                b.synchronize()
                ts.append(a.elapsed_time(b) / 1e3)
            out[n] = n / statistics.median(ts) / 1e9
            del dev, host
        return out

    def close(self):
        self.patch.__exit__(None, None, None)
        self.nograd.__exit__(None, None, None)
        self.att.detach()
        self.agent.close()


class SimEngine:
    """32 producers of --batch x --hidden F32 on the simulator (no GPU): the daemon, the
    files and the subscriber run as on the H200; the figures mean nothing."""

    def __init__(self, name, sock, args):
        import graphtoggle
        self.agent = a = graphtoggle.Agent(name, hooks={"resid_post": args.layers},
                                           backend="sim", socket=sock)
        sim = self.sim = a.sim
        self.stream = sim.stream()
        n = args.batch * args.hidden * 4
        self.bufs = [sim.alloc(n) for _ in range(args.layers)]
        pattern = struct.pack("<f", 1.5) * (n // 4)
        with a.capture():
            sim.begin_capture(self.stream)
            for l in range(args.layers):
                with a.producer(("resid_post", l), stream=self.stream):
                    sim.kernel(self.stream, lambda p=self.bufs[l]: ctypes.memmove(p, pattern, n))
            self.graph = sim.end_capture(self.stream)
        self.exec = a.instantiate(self.graph)
        self.rec = a.recorder(args.capacity << 20)
        for l in range(args.layers):
            self.rec.buffer(("resid_post", l), ptr=self.bufs[l], nbytes=n, dtype="F32",
                            shape=(args.batch, args.hidden))
        self.step_bytes = args.layers * n

    def step(self):
        self.agent.step()
        self.agent.launch(self.graph, self.exec, self.stream)

    def d2h(self, reps):
        return None

    def close(self):
        self.agent.close()


def records_of(line, key):
    """The records a JSON progress line counts (key: its object's name; None: the line
    itself), 0 for any other line."""
    try:
        o = json.loads(line)
    except ValueError:
        return 0
    o = o.get(key) if key else o
    return o.get("records", 0) if isinstance(o, dict) else 0


def median_ms(ts):
    return statistics.median(ts) * 1e3 if ts else float("nan")


def steady_rate(points):
    """Bytes/s between the first and the last (t, bytes) points after the first second of
    the phase (the start-up of the consumer left out); None with fewer than two."""
    pts = [p for p in points if p[0] >= points[0][0] + 1.0] if points else []
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


class Bench:
    def __init__(self, args, found):
        self.args = args
        self.d = proof.Daemon(*found)
        self.name = "recbench"
        self.out = os.path.abspath(args.out)
        os.makedirs(self.out, exist_ok=True)
        self.times = {"on": [], "disk": [], "python": []}
        self.rates = {"disk": [], "python": []}
        self.produced = {"disk": [], "python": []}
        self.drops = {"disk": [0, 0], "python": [0, 0]}  # dropped, asked
        self.python_error = None

    def ring(self):
        return self.d.agent(self.name)["ring"] or {}

    def run_block(self, phase, e, secs):
        """Steps back to back for secs: their times; (steps, seconds)."""
        ts = []
        end = time.perf_counter() + secs
        t0 = time.perf_counter()
        while True:
            a = time.perf_counter()
            e.step()
            b = time.perf_counter()
            ts.append(b - a)
            if b >= end:
                break
        self.times[phase] += ts
        return len(ts), time.perf_counter() - t0

    def keep_stepping(self, e, cond, secs=30):
        """Step (not timed) until cond(): a consumer that must see records first."""
        end = time.monotonic() + secs
        while not cond():
            if time.monotonic() > end:
                raise RuntimeError("the consumer saw no record within %d s" % secs)
            e.step()

    def phase_on(self, e):
        self.run_block("on", e, self.args.block_seconds)

    def phase_disk(self, e, r):
        d = os.path.join(self.out, "rec-%d" % r)
        shutil.rmtree(d, ignore_errors=True)
        p = subprocess.Popen([self.d.ctl_bin, "--socket", self.d.sock, "--json", "record", SPEC,
                              "-o", d], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=self.d.env)
        lines = []
        th = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
        th.start()
        self.keep_stepping(e, lambda: p.poll() is not None or
                           any(records_of(l, "progress") for l in lines))
        r0 = self.ring()
        steps, secs = self.run_block("disk", e, self.args.block_seconds)
        r1 = self.ring()
        p.send_signal(signal.SIGINT)
        p.wait(60)
        th.join(10)
        err = p.stderr.read()
        shutil.rmtree(d, ignore_errors=True)
        if p.returncode != 0:
            raise RuntimeError("togglectl record exited %d: %s" % (p.returncode, err[-400:]))
        pts = []
        for l in lines:
            o = json.loads(l)
            pr = o.get("progress") or o.get("recorded")
            if pr:
                pts.append((pr["elapsed_ms"] / 1e3, pr["bytes"]))
        rate = steady_rate(pts)
        if rate is not None:
            self.rates["disk"].append(rate)
        self.produced["disk"].append(steps * e.step_bytes / secs)
        self.drops["disk"][0] += r1["dropped"] - r0["dropped"]
        self.drops["disk"][1] += steps * self.args.layers

    def phase_python(self, e, r):
        env = dict(self.d.env)
        p = subprocess.Popen([self.args.subscriber_python, "-c", SUBSCRIBER, self.d.sock,
                              os.path.join(REPO, "python"), SPEC],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        lines = []
        th = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
        th.start()
        try:
            self.keep_stepping(e, lambda: p.poll() is not None or
                               any(records_of(l, None) for l in lines))
        except RuntimeError:
            p.kill()
            raise
        if p.poll() is not None:
            self.python_error = (p.stderr.read().strip().splitlines() or ["exited"])[-1]
            return
        r0 = self.ring()
        steps, secs = self.run_block("python", e, self.args.block_seconds)
        r1 = self.ring()
        p.send_signal(signal.SIGTERM)
        p.wait(60)
        th.join(10)
        pts = [(o["t"], o["bytes"]) for o in map(json.loads, lines) if "t" in o]
        rate = steady_rate(pts)
        if rate is not None:
            self.rates["python"].append(rate)
        self.produced["python"].append(steps * e.step_bytes / secs)
        self.drops["python"][0] += r1["dropped"] - r0["dropped"]
        self.drops["python"][1] += steps * self.args.layers

    def run(self, e):
        a = self.args
        self.d.wait(lambda: (self.d.agent(self.name) or {}).get("ring") is not None,
                    "the agent's data ring")
        self.d.ctl("set", SPEC)
        for _ in range(a.warmup):
            e.step()
        bw = e.d2h(a.d2h_reps)
        if bw:
            print("%s: d2h: pinned cudaMemcpy device to host: %.1f GB/s (256 MiB), %.1f GB/s "
                  "(4 MiB), %.1f GB/s (128 KiB); medians of %d"
                  % (TAG, bw[256 << 20], bw[4 << 20], bw[128 << 10], a.d2h_reps), flush=True)
        order = ["on", "disk", "python"]
        for r in range(a.rounds):
            for ph in order[r % 3:] + order[:r % 3]:
                if ph == "on":
                    self.phase_on(e)
                elif ph == "disk":
                    self.phase_disk(e, r)
                elif self.python_error is None:
                    self.phase_python(e, r)
        self.report(e, bw)

    def report(self, e, bw):
        a = self.args
        on = median_ms(self.times["on"])
        line = "%s: step (%d hooks, %.1f MiB a step, %s): producers on, nothing recorded %.3f ms" \
            % (TAG, a.layers, e.step_bytes / 2**20, a.engine, on)
        for ph, what in (("disk", "recording to disk"), ("python", "to a Python subscriber")):
            if self.times[ph]:
                m = median_ms(self.times[ph])
                line += "; %s %.3f ms (ratio %.4f)" % (what, m, m / on)
        line += "; medians of %s steps, %d interleaved rounds; target ratio <= 1.01" % (
            "/".join(str(len(self.times[p])) for p in ("on", "disk", "python")), a.rounds)
        print(line, flush=True)
        ref = bw[256 << 20] * 1e9 if bw else None
        for ph, what in (("disk", "disk (togglectl record -o %s)" % self.out),
                         ("python", "python (Client.record iterator)")):
            if ph == "python" and self.python_error:
                print("%s: %s: not measured: %s" % (TAG, what, self.python_error), flush=True)
                continue
            if not self.rates[ph]:
                print("%s: %s: not measured (no steady part: longer --block-seconds)"
                      % (TAG, what), flush=True)
                continue
            rate = statistics.median(self.rates[ph])
            prod = statistics.median(self.produced[ph])
            dr, asked = self.drops[ph]
            print("%s: %s: %.2f GB/s sustained (median of %d phases)%s; the engine produced "
                  "%.2f GB/s; dropped %d of %d records (%.1f%%)"
                  % (TAG, what, rate / 1e9, len(self.rates[ph]),
                     ", %.1f%% of the D2H bandwidth" % (100 * rate / ref) if ref else "",
                     prod / 1e9, dr, asked, 100.0 * dr / max(asked, 1)), flush=True)

    def close(self):
        return self.d.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("cuda", "sim"), default="cuda")
    ap.add_argument("--mode", default="lazy")
    ap.add_argument("--layers", type=int, default=32, help="hooks (resid_post of each layer)")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=512, help="ring MiB (a power of two)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=4.0)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--d2h-reps", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(REPO, ".gpu", "recbench"))
    ap.add_argument("--subscriber-python", default=sys.executable,
                    help="the python that runs the subscriber (needs protobuf)")
    args = ap.parse_args()
    found = proof.find_daemon()
    if not found:
        print("%s: SKIPPED: no toggled and togglectl" % TAG)
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
        print("%s: torch %s on %s" % (TAG, torch.__version__, torch.cuda.get_device_name()))
    os.makedirs(args.out, exist_ok=True)
    fs = subprocess.run(["df", "-PT", args.out], capture_output=True, text=True).stdout
    fs = fs.splitlines()[-1].split() if fs else ["?", "?"]
    print("%s: toggled %s; recordings under %s (%s on %s); %d cores"
          % (TAG, found[0], args.out, fs[1], fs[0], os.cpu_count()), flush=True)
    b = Bench(args, found)
    e = None
    try:
        e = (CudaEngine if args.engine == "cuda" else SimEngine)(b.name, b.d.sock, args)
        b.run(e)
    finally:
        if e is not None:
            e.close()
        rc = b.close()
    if rc:
        print("%s: FAIL: toggled exited %d" % (TAG, rc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
