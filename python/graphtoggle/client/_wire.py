"""Framing and the generated messages (docs/protocol.md).

toggle_pb2 is generated from proto/graphtoggle/v1/toggle.proto at build time (`make
python-client`, protoc from Debian's protobuf-compiler): it then always
matches the schema of this checkout and the protobuf runtime installed with
that protoc (python3-protobuf), which a committed copy would not.
"""

import socket
import struct

try:
    from . import toggle_pb2 as pb
except ImportError as e:  # pragma: no cover - a build step was skipped
    raise ImportError(
        "graphtoggle.client: toggle_pb2 is missing or does not load (%s); run `make python-client` "
        "(protoc from protobuf-compiler, python3-protobuf)" % e) from None

PROTOCOL_VERSION = 2          # TGP_PROTOCOL_VERSION of this schema
MAX_FRAME = 1 << 20           # TGP_MAX_FRAME
HEADER = struct.Struct("!I")


def encode(env):
    body = env.SerializeToString()
    if len(body) > MAX_FRAME:
        raise ValueError("request of %d bytes is over the frame limit of %d" % (len(body), MAX_FRAME))
    return HEADER.pack(len(body)) + body


class Reader:
    """Frames from a stream socket; bounded like the daemon's reader."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def next(self, timeout):
        """The next Envelope, or None on timeout; ConnectionError when closed or malformed."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= HEADER.size:
                (n,) = HEADER.unpack_from(self.buf)
                if n == 0 or n > MAX_FRAME:
                    raise ConnectionError("toggled sent a frame of %d bytes" % n)
                if len(self.buf) >= HEADER.size + n:
                    data = bytes(self.buf[HEADER.size:HEADER.size + n])
                    del self.buf[:HEADER.size + n]
                    env = pb.Envelope()
                    try:
                        env.ParseFromString(data)
                    except Exception as e:  # google.protobuf.message.DecodeError
                        raise ConnectionError("toggled sent a frame that does not decode: %s" % e)
                    return env
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                raise ConnectionError("toggled closed the connection")
            self.buf += chunk
