"""Framing and the generated messages (docs/protocol.md).

toggle_pb2 is generated from proto/graphtoggle/v1/toggle.proto at build
time, never committed: by the wheel's build (python/setup.py, which also
writes _build.py: the protoc used and the oldest protobuf runtime its code
loads with) or, in a source checkout, by `make python-client`.  It then
always matches the schema it was built from and the runtime declared by the
"client" extra (pip install 'graphtoggle[client]').  Each way it can fail
to load says what to do.
"""

import importlib.util
import re
import socket
import struct

try:
    from . import _build
except ImportError:  # a source checkout (PYTHONPATH=python): no wheel build ran
    _build = None

_FIX = "pip install 'graphtoggle[client]' (Debian: apt-get install python3-protobuf)"


def _version(text):
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


try:
    import google.protobuf as _protobuf
except ImportError:
    raise ImportError("graphtoggle.client needs the protobuf runtime, which is not installed: "
                      + _FIX) from None
if _build is not None and _version(_protobuf.__version__) < _version(_build.PROTOBUF_MIN):
    raise ImportError(
        "graphtoggle.client: protobuf %s is older than %s, the oldest runtime that loads the "
        "messages %s generated: pip install -U 'protobuf>=%s'"
        % (_protobuf.__version__, _build.PROTOBUF_MIN, _build.PROTOC, _build.PROTOBUF_MIN))
if importlib.util.find_spec(__package__ + ".toggle_pb2") is None:
    raise ImportError(
        "graphtoggle.client: its messages (toggle_pb2.py) were not built: in a source "
        "checkout run `make python-client` (protoc from protobuf-compiler); an installed "
        "package has them (pip builds them), reinstall it")
try:
    from . import toggle_pb2 as pb
except Exception as e:  # a runtime that cannot load this generated code
    raise ImportError(
        "graphtoggle.client: its messages do not load with protobuf %s (%s: %s): install "
        "the runtime of the protoc that generated them (%s), e.g. pip install -U protobuf"
        % (_protobuf.__version__, type(e).__name__, e,
           _build.PROTOC if _build else "make python-client's")) from None

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
