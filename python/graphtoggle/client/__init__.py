"""graphtoggle.client: a client of toggled for orchestrators (docs/protocol.md).

    from graphtoggle.client import Client
    with Client("/run/toggle/toggled.sock") as c:
        for a in c.list_agents():
            print(a.agent_id, a.name, a.step, a.enabled)
        c.set("resid_post:0-7", target={"group": "decode"}, wait=5)
        c.plan(a.step + 10, 100, "attn_out:*", target=a.agent_id)
        with c.watch() as w:
            for ev in w:
                print(ev)
        with c.record("resid_post:12", steps=100) as sub:   # the activations, live
            for r in sub:
                print(r.step, r.hook, r.tensor.shape)

Messages are the classes generated from proto/graphtoggle/v1/toggle.proto (graphtoggle.client.pb);
errors are graphtoggle's exception classes, one per error code (SpecError,
NoAgentError, LatePlanError, ...), with .agents and .agent_ids.  Needs no
libtoggle, only the protobuf runtime.
"""

from ._wire import PROTOCOL_VERSION, pb
from .client import (MAX_PLAN_ENTRIES, Client, Event, SetResult, Subscription, Watch,
                     default_socket_path, selector)
from .errors import ClientProtocolError, UnimplementedError

__all__ = ["Client", "Watch", "Subscription", "Event", "SetResult", "selector", "default_socket_path", "pb",
           "PROTOCOL_VERSION", "MAX_PLAN_ENTRIES", "UnimplementedError", "ClientProtocolError"]
