"""record_proof.py - issue 24's GPU proof of the recorder (the agent side): the example
engine (examples/torch_engine.py: its model, graphs per batch size captured by its own
code under graphtoggle.torch.patch, producers on forward hooks through the registered
op) recorded into the agent's data ring, read back by a local consumer.

Ground truth is the monitor buffers themselves: right after each replay (and each eager
forward) the enabled hooks' buffers are cloned on the same stream (the reference), and
every buffer is filled with a sentinel before the replay (the engine's check: the
producers that overwrote theirs are exactly the step's set).  Proves, per mode:

 1. every record equals the reference of its step and hook, byte for byte, carries the
    graph of its batch size (or graph 0 and the eager flag for an eager forward), and
    is for a hook its step enabled; with the ring read every step nothing is dropped and
    every enabled hook of every replay has its record;
 2. the ring forced full (the consumer stops reading for --full-steps steps): drops are
    counted, records + drops = the hooks asked, every record published is still exact;
    reading again, recording goes on without drops; the recorder runs staged
    (docs/recording.md, *Staging*: one gather kernel per launch into device staging on
    the replay's stream, the host copies on its own stream) and the ring wraps, so
    staging is reused lap after lap;
 3. the replays stay exact throughout: the sentinel check at every step, in lazy and
    device mode; each graph's first replay is torch's own after toggle_graph_prepare
    (the patch's random-ops probe: recorded by toggle_record_after), the later ones go
    through toggle_graph_launch, which records by itself.

Prints "record-proof: PASS" or "record-proof: FAIL (...)"; exit 0 on PASS and on SKIPPED
(no torch or no GPU), 1 on FAIL.

    python3 python/tests/gpu/record_proof.py --steps 600 --modes lazy,device
"""

import argparse
import importlib.util
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

try:
    import torch
except ImportError:
    print("record-proof: SKIPPED: python3 cannot import torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("record-proof: SKIPPED: torch sees no CUDA device")
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402
from graphtoggle.record import REC_EAGER  # noqa: E402


def _engine():
    """examples/torch_engine.py as a module (its model and constants)."""
    spec = importlib.util.spec_from_file_location(
        "torch_engine", os.path.join(REPO, "examples", "torch_engine.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


class Proof:
    def __init__(self, mode, args, eng):
        self.mode, self.args, self.eng = mode, args, eng
        self.fail = []
        self.rng = random.Random(args.seed)
        torch.manual_seed(args.seed)
        self.model = eng.Model(args.layers, args.hidden).cuda().eval()
        self.agent = graphtoggle.Agent("record-proof-" + mode,
                                       hooks={t: args.layers for t in eng.TYPES}, mode=mode)
        self.att = self.agent.attach({
            "resid_post": self.model.layers,
            "attn_out": [l.attn for l in self.model.layers],
            "mlp_out": [l.mlp for l in self.model.layers],
        })
        self.static_in = torch.zeros(max(eng.SIZES), args.hidden, device="cuda")
        self.graphs = {}
        self.refs = {}      # (step, hook, eager) -> reference tensor (GPU clone)
        self.asked = 0      # records the recording asked for (enabled hooks of each run)
        self.matched = 0
        self.eager_matched = 0
        self.sets = {}      # step -> (effective set, batch size)

    def note(self, msg):
        if len(self.fail) < 20:
            print("record-proof: [%s] %s" % (self.mode, msg), flush=True)
        self.fail.append(msg)

    def capture(self):
        with torch.no_grad():
            for bs in self.eng.SIZES:
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
        self.graph_of = {g.raw_cuda_graph(): bs for bs, g in self.graphs.items()}

    def buffers_of(self, bs):
        return {(t, l): b for (t, l, shape, _), b in self.att.buffers.items() if shape[0] == bs}

    def name_of(self, hook):
        return (self.agent.catalog.names[hook[0]], hook[1])

    def drain(self, rd):
        """Read what is published; check each record against its reference."""
        n = 0
        for r in rd:
            n += 1
            h = self.name_of(r.hook)
            eager = bool(r.flags & REC_EAGER)
            key = (r.step, h, eager)
            ref = self.refs.pop(key, None)
            if ref is None:
                self.note("record step %d hook %s%s: no reference (not enabled, or twice)"
                          % (r.step, h, " eager" if eager else ""))
                continue
            eff, bs = self.sets.get(r.step, (None, None))
            if eff is None or h not in eff:
                self.note("record step %d hook %s: its step did not enable it" % (r.step, h))
            if eager:
                if r.graph != 0:
                    self.note("eager record step %d hook %s has graph %#x" % (r.step, h, r.graph))
            elif self.graph_of.get(r.graph) != bs:
                self.note("record step %d hook %s: graph %#x, not batch %s's"
                          % (r.step, h, r.graph, bs))
            want = ref.detach().contiguous().cpu().numpy().tobytes()
            if r.payload != want or list(r.shape) != list(ref.shape) or r.dtype != "F32":
                self.note("record step %d hook %s%s: %d bytes %s %s differ from the buffer "
                          "(%d bytes %s)" % (r.step, h, " eager" if eager else "",
                                             len(r.payload), r.dtype, list(r.shape), len(want),
                                             list(ref.shape)))
            else:
                self.matched += 1
                self.eager_matched += eager
        return n

    def step(self, eff_change, eager):
        a, eng = self.agent, self.eng
        if eff_change:
            everything = sorted(a.hookset("all"))
            a.set_enabled(self.rng.sample(everything, self.rng.randrange(len(everything) + 1)))
        eff = a.step()
        step = a.current_step
        effset = eff.to_set()
        bs = self.rng.choice(eng.SIZES)
        self.sets[step] = (effset, bs)
        self.static_in[:bs].uniform_(-1, 1)
        bufs = self.buffers_of(bs)
        for b in bufs.values():
            b.fill_(eng.SENTINEL)
        self.graphs[bs].replay()
        # the reference: the enabled buffers right after the replay, on its stream
        for h in effset:
            self.refs[(step, h, False)] = bufs[h].clone()
        self.asked += len(effset)
        ran = {h for h, b in bufs.items() if bool((b != eng.SENTINEL).any())}
        if ran != effset:
            self.note("MISMATCH step %d bs %d: ran %s, step set %s" % (step, bs, sorted(ran),
                                                                       sorted(effset)))
        if eager and effset:
            with torch.no_grad():
                self.model(self.static_in[:bs])  # the op's eager body: copies and records
            for h in effset:
                self.refs[(step, h, True)] = bufs[h].clone()
            self.asked += len(effset)

    def run(self):
        with torch.no_grad(), gtt.patch(self.agent):
            ok = self._run()
        self.att.detach()
        self.agent.close()
        return ok

    def _run(self):
        args = self.args
        self.capture()
        rec = self.agent.recorder(args.capacity << 20)
        rd = rec.reader()
        rec.request(1)
        t0 = time.monotonic()
        # phase 1: read every step, nothing may be dropped
        for i in range(args.steps):
            self.step(i % args.change_every == 0, eager=(i % 50 == 7))
            self.drain(rd)
        rec.flush()
        self.drain(rd)
        st = rec.stats()
        if not st["staged"]:
            self.note("the recorder copied record by record: no gather kernel or staging")
        if st["dropped"] or st["errors"]:
            self.note("phase 1 dropped %d, errors %d (the ring was read every step)"
                      % (st["dropped"], st["errors"]))
        if self.refs:
            self.note("phase 1: %d enabled hooks have no record, e.g. %s"
                      % (len(self.refs), sorted(self.refs)[:3]))
        if self.matched != self.asked:
            self.note("phase 1: %d records matched, %d asked" % (self.matched, self.asked))
        p1 = (self.matched, self.eager_matched, st["bytes"])
        # phase 2: nobody reads: the ring fills, records are dropped and counted
        self.refs.clear()
        asked0, matched0, dropped0 = self.asked, self.matched, st["dropped"]
        self.agent.set_enabled("all")
        for i in range(args.full_steps):
            self.step(False, eager=False)
        rec.flush()
        self.drain(rd)
        st = rec.stats()
        dropped = st["dropped"] - dropped0
        asked = self.asked - asked0
        got = self.matched - matched0
        if dropped == 0:
            self.note("phase 2: the ring never filled (capacity %d MiB, %d steps)"
                      % (args.capacity, args.full_steps))
        if got + dropped != asked:
            self.note("phase 2: %d records + %d dropped != %d asked" % (got, dropped, asked))
        p2 = (got, dropped, asked)
        # phase 3: read again: room again, nothing dropped
        self.refs.clear()
        dropped1 = st["dropped"]
        for i in range(args.after_steps):
            self.step(i % 10 == 0, eager=False)
            self.drain(rd)
        rec.flush()
        self.drain(rd)
        st = rec.stats()
        if st["dropped"] != dropped1 or self.refs:
            self.note("phase 3: %d more dropped, %d unmatched after reading resumed"
                      % (st["dropped"] - dropped1, len(self.refs)))
        dt = time.monotonic() - t0
        rd.close()
        print("record-proof: [%s] phase 1: %d records exact (%d of eager forwards), %.1f MiB, "
              "0 dropped; phase 2 (ring of %d MiB unread): %d exact + %d dropped = %d asked; "
              "phase 3: %d steps read again, 0 dropped; %.1f s"
              % (self.mode, p1[0], p1[1], p1[2] / 2**20, args.capacity, p2[0], p2[1], p2[2],
                 args.after_steps, dt), flush=True)
        return not self.fail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="lazy,device")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--full-steps", type=int, default=120)
    ap.add_argument("--after-steps", type=int, default=60)
    ap.add_argument("--change-every", type=int, default=25)
    ap.add_argument("--capacity", type=int, default=16, help="ring MiB (a power of two)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    eng = _engine()
    ok = True
    for mode in args.modes.split(","):
        try:
            ok &= Proof(mode, args, eng).run()
        except Exception as e:  # a crash is a failure, with its reason
            import traceback
            traceback.print_exc()
            print("record-proof: [%s] FAIL: %s" % (mode, e))
            ok = False
    print("record-proof: PASS" if ok else "record-proof: FAIL (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
