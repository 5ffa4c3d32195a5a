"""A client of toggled from nothing but protoc's output of the public contract
(tests/proto/run.sh): no graphtoggle package, no protobuf-c.  It follows
docs/protocol.md: frames, hello, list agents, a set with a wait, status.

    client.py SOCKET DIR   (DIR holds graphtoggle/v1/toggle_pb2.py)
"""
import socket
import struct
import sys

sys.path.insert(0, sys.argv[2])
from graphtoggle.v1 import toggle_pb2 as pb  # noqa: E402

HEADER = struct.Struct("!I")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
sock.connect(sys.argv[1])
buf = b""
next_id = 0


def call(**body):
    global buf, next_id
    next_id += 1
    env = pb.Envelope(id=next_id, **body)
    data = env.SerializeToString()
    sock.sendall(HEADER.pack(len(data)) + data)
    while True:
        if len(buf) >= 4:
            (n,) = HEADER.unpack_from(buf)
            if len(buf) >= 4 + n:
                rep = pb.Envelope()
                rep.ParseFromString(buf[4:4 + n])
                buf = buf[4 + n:]
                if rep.id != next_id:
                    continue  # an event (id 0)
                if rep.WhichOneof("body") == "error":
                    sys.exit("client.py: error %s: %s" % (pb.ErrorCode.Name(rep.error.code),
                                                          rep.error.message))
                return rep
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit("client.py: toggled closed the connection")
        buf += chunk


hello = call(hello=pb.HelloRequest(protocol_version=2, client="tests/proto/client.py"))
assert hello.hello_reply.protocol_version == 2, hello
agents = call(list_agents=pb.ListAgentsRequest()).agents.agents
assert len(agents) == 1 and agents[0].name == "proto-engine", agents
rep = call(set_enabled=pb.SetEnabledRequest(op=pb.SET_OP_REPLACE, spec="resid_post:0-3",
                                            wait_ms=10000))
assert len(rep.set_enabled_reply.versions) == 1, rep
agents = call(list_agents=pb.ListAgentsRequest()).agents.agents
assert agents[0].enabled == "resid_post:0-3", agents[0].enabled
assert agents[0].applied_version == rep.set_enabled_reply.versions[0].version, agents[0]
status = call(status=pb.StatusRequest()).status_reply
assert status.protocol_version == 2 and status.agents == 1, status
print("client.py: hello v2 (daemon %s), 1 agent, set applied at version %d" % (
    status.daemon_version, agents[0].applied_version))
