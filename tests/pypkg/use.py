"""What a user of the installed package does (tests/pypkg/run.sh), run by a venv's
python with nothing of the checkout on its path:

    use.py SOCKET TOGGLECTL agent    an Agent on the simulator, driven by togglectl
    use.py SOCKET TOGGLECTL client   the same, driven by graphtoggle.client

Prints where graphtoggle and its libtoggle.so were loaded from.
"""
import json
import subprocess
import sys
import time

import graphtoggle
from graphtoggle import Agent, _lib

sock, ctl, how = sys.argv[1], sys.argv[2], sys.argv[3]


def ctl_json(*args):
    r = subprocess.run([ctl, "-s", sock, "--json"] + list(args), capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_for(pred, what, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    sys.exit("use.py: timed out waiting for " + what)


with Agent("pkg-engine", hooks={"resid_post": 4, "mlp_out": 4}, backend="sim",
           socket=sock) as a:
    wait_for(lambda: [x["name"] for x in ctl_json("agents")["agents"]] == ["pkg-engine"],
             "the agent's registration")
    if how == "client":
        from graphtoggle.client import Client
        with Client(sock) as c:
            (info,) = c.list_agents()
            assert info.name == "pkg-engine", info
            res = c.set("resid_post:1-2,mlp_out:0")
            assert list(res) == [info.agent_id] and res.skipped == [], res
    else:
        ctl_json("set", "resid_post:1-2,mlp_out:0")
    want = a.hookset("resid_post:1-2,mlp_out:0")
    steps = iter(range(10 ** 6))
    wait_for(lambda: a.step(next(steps)) == want, "the set at a step")
print("use.py: %s: the agent (simulator) ran the set at a step; graphtoggle from %s, "
      "libtoggle from %s" % (how, graphtoggle.__file__, _lib.path()))
