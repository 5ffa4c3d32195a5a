"""graphtoggle.recording: what `togglectl record SPEC -o DIR` wrote (docs/recording.md).

    import graphtoggle.recording as rec
    for step, hook, t in rec.open("/tmp/rec"):            # numpy arrays (if numpy is there)
        ...
    for r in rec.open("/tmp/rec", as_="torch", hooks=["resid_post:12"]):
        r.step, r.hook, r.tensor, r.agent, r.graph, r.batch

A recording is DIR/index.json plus one safetensors file per agent and step
(DIR/<agent>-<id>/step-<step>.safetensors).  The files are parsed with the
standard library only; numpy and torch are optional (as_="bytes" needs
neither).  Every length, offset and dtype of a file is checked before it is
used: a damaged file raises RecordingError naming it.
"""

import collections
import io
import json
import math
import os
import struct

FORMAT = "graphtoggle-recording"
MAX_HEADER = 100 << 20  # the safetensors reference reader's limit on the JSON header

# safetensors dtype -> (bytes per element, numpy dtype name or None, torch dtype name)
DTYPES = {
    "BOOL": (1, "bool", "bool"), "U8": (1, "uint8", "uint8"), "I8": (1, "int8", "int8"),
    "F8_E5M2": (1, None, "float8_e5m2"), "F8_E4M3": (1, None, "float8_e4m3fn"),
    "I16": (2, "int16", "int16"), "U16": (2, "uint16", "uint16"),
    "F16": (2, "float16", "float16"), "BF16": (2, None, "bfloat16"),
    "I32": (4, "int32", "int32"), "U32": (4, "uint32", "uint32"),
    "F32": (4, "float32", "float32"),
    "I64": (8, "int64", "int64"), "U64": (8, "uint64", "uint64"),
    "F64": (8, "float64", "float64"),
}


class RecordingError(ValueError):
    """A recording directory or file that is not what togglectl writes."""


class Record(collections.namedtuple("_Record", "step hook tensor")):
    """(step, hook, tensor), plus agent, agent_id, graph, name (the tensor's name in
    its file: the hook, or HOOK#N for the same hook again in a step), dtype, shape,
    batch (the first dimension), seq (its number in the agent's ring) and file."""

    def __repr__(self):
        return "Record(step=%d hook=%s agent=%s dtype=%s shape=%s)" % (
            self.step, self.hook, getattr(self, "agent", "?"), getattr(self, "dtype", "?"),
            tuple(getattr(self, "shape", ())))


def _make(step, hook, tensor, **kw):
    r = Record(step, hook, tensor)
    r.__dict__.update(kw)
    return r


def tensor_from_bytes(data, dtype, shape, as_=None):
    """bytes of a tensor as numpy (the default when numpy is installed: BF16 widened
    to float32, FP8 as uint8), torch (as_="torch", every dtype native) or the bytes
    themselves (as_="bytes")."""
    if dtype not in DTYPES:
        raise RecordingError("unknown dtype %r" % dtype)
    size, np_name, torch_name = DTYPES[dtype]
    if len(data) != size * math.prod(shape):
        raise RecordingError("%d bytes for a %s tensor of shape %s" % (len(data), dtype, shape))
    if as_ is None:
        try:
            import numpy  # noqa: F401
            as_ = "numpy"
        except ImportError:
            as_ = "bytes"
    if as_ == "bytes":
        return bytes(data)
    if as_ == "numpy":
        import numpy as np
        if dtype == "BF16":
            u = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
            return u.view(np.float32).reshape(shape)
        if np_name is None:
            return np.frombuffer(data, dtype=np.uint8).reshape(tuple(shape) or (1,))
        return np.frombuffer(data, dtype=np.dtype(np_name).newbyteorder("<")).reshape(shape)
    if as_ == "torch":
        import torch
        td = getattr(torch, torch_name)
        if not data:
            return torch.empty(tuple(shape), dtype=td)
        return torch.frombuffer(bytearray(data), dtype=td).reshape(tuple(shape))
    raise ValueError("as_ must be 'numpy', 'torch' or 'bytes', not %r" % (as_,))


def read_header(f, path, file_size):
    """The JSON header of a safetensors file (dict) and where its data begins."""
    head = f.read(8)
    if len(head) != 8:
        raise RecordingError("%s: shorter than a safetensors header" % path)
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER or 8 + n > file_size:
        raise RecordingError("%s: header of %d bytes in a file of %d" % (path, n, file_size))
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RecordingError("%s: header is not JSON: %s" % (path, e)) from None
    if not isinstance(header, dict):
        raise RecordingError("%s: header is not an object" % path)
    return header, 8 + n


def _entries(header, path, data_size):
    """The tensors of a header in order, checked: (name, dtype, shape, begin, end)."""
    out = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict):
            raise RecordingError("%s: tensor %r is not an object" % (path, name))
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in DTYPES:
            raise RecordingError("%s: tensor %r has unknown dtype %r" % (path, name, dtype))
        if (not isinstance(shape, list) or len(shape) > 8 or
                not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise RecordingError("%s: tensor %r has a bad shape" % (path, name))
        if (not isinstance(offs, list) or len(offs) != 2 or
                not all(isinstance(o, int) for o in offs) or not 0 <= offs[0] <= offs[1] <= data_size):
            raise RecordingError("%s: tensor %r has bad data_offsets" % (path, name))
        if offs[1] - offs[0] != DTYPES[dtype][0] * math.prod(shape):
            raise RecordingError("%s: tensor %r: %d bytes for shape %s of %s"
                                 % (path, name, offs[1] - offs[0], shape, dtype))
        out.append((name, dtype, shape, offs[0], offs[1]))
    return out


def load_file(path, as_=None):
    """(metadata dict, {name: tensor}) of one safetensors file."""
    with io.open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header, base = read_header(f, path, size)
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict):
            raise RecordingError("%s: __metadata__ is not an object" % path)
        tensors = {}
        for name, dtype, shape, b, e in _entries(header, path, size - base):
            f.seek(base + b)
            tensors[name] = tensor_from_bytes(f.read(e - b), dtype, shape, as_)
        return meta, tensors


def _records_of_file(path, rel, as_, hooks):
    with io.open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header, base = read_header(f, path, size)
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise RecordingError("%s: not a file of togglectl record (metadata format %r)"
                                 % (path, meta.get("format") if isinstance(meta, dict) else None))
        try:
            step = int(meta["step"])
            agent_id = int(meta["agent_id"])
        except (KeyError, ValueError):
            raise RecordingError("%s: metadata without a step or agent_id" % path) from None
        for name, dtype, shape, b, e in _entries(header, path, size - base):
            hook = meta.get(name + ".hook", name.split("#")[0])
            if hooks is not None and hook not in hooks:
                continue
            f.seek(base + b)
            graph = meta.get(name + ".graph", "0x0")
            yield _make(step, hook, tensor_from_bytes(f.read(e - b), dtype, shape, as_),
                        agent=meta.get("agent", ""), agent_id=agent_id,
                        graph=int(graph, 16) if graph.startswith("0x") else int(graph),
                        name=name, dtype=dtype, shape=tuple(shape),
                        batch=int(meta.get(name + ".batch", shape[0] if shape else 1)),
                        seq=int(meta.get(name + ".seq", 0)), file=rel)


class Recording:
    """A recording directory: .index (index.json, or None when the recording was cut
    before it was written: then the files are found by name), .agents, .files;
    iterate it for Records in step order (then agent, then file order)."""

    def __init__(self, directory, as_=None, hooks=None, agents=None):
        self.dir = os.fspath(directory)
        self.as_ = as_
        self.hooks = None if hooks is None else set([hooks] if isinstance(hooks, str) else hooks)
        self.index = None
        ipath = os.path.join(self.dir, "index.json")
        if os.path.exists(ipath):
            with io.open(ipath, "rb") as f:
                try:
                    self.index = json.load(f)
                except ValueError as e:
                    raise RecordingError("%s: %s" % (ipath, e)) from None
            if not isinstance(self.index, dict) or self.index.get("format") != FORMAT:
                raise RecordingError("%s: not an index of togglectl record" % ipath)
            files = self.index.get("files", [])
        elif os.path.isdir(self.dir):
            files = []
            for sub in sorted(os.listdir(self.dir)):
                d = os.path.join(self.dir, sub)
                if not os.path.isdir(d):
                    continue
                for fn in sorted(os.listdir(d)):
                    if fn.startswith("step-") and fn.endswith(".safetensors"):
                        files.append({"file": sub + "/" + fn,
                                      "step": int(fn[5:-len(".safetensors")]),
                                      "agent": sub.rsplit("-", 1)[0],
                                      "agent_id": int(sub.rsplit("-", 1)[1])
                                      if sub.rsplit("-", 1)[-1].isdigit() else 0})
        else:
            raise RecordingError("%s: no such recording directory" % self.dir)
        self.agents = self.index.get("agents", []) if self.index else []
        if agents is not None:
            want = set([agents] if isinstance(agents, (str, int)) else agents)
            files = [e for e in files if e.get("agent") in want or e.get("agent_id") in want]
        for e in files:
            rel = e.get("file", "")
            if (not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/")):
                raise RecordingError("%s: index names a file outside the recording: %r"
                                     % (self.dir, rel))
        self.files = sorted(files, key=lambda e: (e.get("step", 0), e.get("agent_id", 0)))

    @property
    def complete(self):
        """Whether every agent's part ended as asked (False for an interrupted one)."""
        return bool(self.index and self.index.get("complete"))

    def __iter__(self):
        for e in self.files:
            yield from _records_of_file(os.path.join(self.dir, e["file"]), e["file"],
                                        self.as_, self.hooks)

    def steps(self):
        """The steps recorded, ascending."""
        return sorted(set(e.get("step") for e in self.files))


def open(directory, as_=None, hooks=None, agents=None):  # noqa: A001 (the module's verb)
    """The recording in directory, to iterate for (step, hook, tensor) Records.
    as_: "numpy" (the default with numpy), "torch" or "bytes"; hooks: only these
    ("resid_post:12", ...); agents: only these names or ids."""
    return Recording(directory, as_=as_, hooks=hooks, agents=agents)


__all__ = ["open", "load_file", "Recording", "Record", "RecordingError", "tensor_from_bytes",
           "DTYPES", "FORMAT"]
