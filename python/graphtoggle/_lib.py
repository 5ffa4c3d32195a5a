"""ctypes binding over libtoggle.so: library lookup, struct mirrors, prototypes.

ctypes, not cffi or a C extension: it is in every CPython, needs no compiler
at install time (the GPU machines have gcc but no Python headers guarantee,
and cffi is not guaranteed there), and the library's C API is plain C with
small structs.  The struct mirrors below are checked against the layout the
library reports about itself (toggle_layout()) when the library is loaded,
so a header change that the mirrors miss fails at import, not at run time.
"""

import ctypes
import os
import threading
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_int, c_int64, c_size_t,
                    c_uint, c_uint16, c_uint32, c_uint64, c_void_p)

# The C API this package is written against (toggle.h's TOGGLE_VERSION_*).
API_MAJOR = 0
API_MINOR = 1

MAX_HOOK_TYPES = 32
MAX_LAYERS = 256
MAX_HOOKS = MAX_HOOK_TYPES * MAX_LAYERS
MAX_NAME = 64
MAX_PLAN = 256
# The C limits the constants above mirror; checked with the struct mirrors
# against the library's toggle_limits().
LIMITS = {"TOGGLE_MAX_HOOK_TYPES": MAX_HOOK_TYPES, "TOGGLE_MAX_LAYERS": MAX_LAYERS,
          "TOGGLE_MAX_NAME": MAX_NAME, "TOGGLE_MAX_PLAN": MAX_PLAN}

MODE_LAZY, MODE_EAGER, MODE_DEVICE = 0, 1, 2
BACKEND_CUDA, BACKEND_SIM = 0, 1

ENV_LIB = "GRAPHTOGGLE_LIB"


class Hook(Structure):
    _fields_ = [("type", c_uint16), ("layer", c_uint16)]


class Set(Structure):
    _fields_ = [("bits", c_uint64 * (MAX_HOOKS // 64))]


class Catalog(Structure):
    _fields_ = [("type_names", POINTER(c_char_p)), ("n_types", c_uint16), ("n_layers", c_uint16)]


class Config(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("group", c_char_p),
        ("catalog", Catalog),
        ("mode", c_int),
        ("strict", c_bool),
        ("backend", c_int),
        ("sim", c_void_p),
        ("socket_path", c_char_p),
        ("no_bare_exec", c_bool),
        ("no_full_exec", c_bool),
        ("no_set_exec", c_bool),
        ("clone_execs", c_bool),
    ]


class PlanEntry(Structure):
    _fields_ = [("step", c_int64), ("set", Set)]


class GraphStatus(Structure):
    _fields_ = [
        ("graph", c_void_p),
        ("exec", c_void_p),
        ("nodes", c_uint32),
        ("hooks_covered", c_uint32),
        ("applied_version", c_uint64),
        ("replays", c_uint64),
        ("last_step", c_int64),
        ("bound", c_bool),
        ("stale", c_bool),
        ("mode", c_int),
        ("device_fallback", c_bool),
        ("uploaded", c_bool),
        ("note", c_char * 128),
        ("tainted_launches", c_uint64),
        ("tainted_step", c_int64),
        ("tainted", c_bool),
        ("blocked", c_bool),
        ("bare_exec", c_bool),
        ("bare_running", c_bool),
        ("bare_replays", c_uint64),
        ("full_exec", c_bool),
        ("full_running", c_bool),
        ("full_replays", c_uint64),
        ("set_exec", c_bool),
        ("set_running", c_bool),
        ("set_replays", c_uint64),
    ]


class Anomalies(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "record_outside_window", "record_not_capturing", "record_not_kernel", "launch_unbound",
        "launch_stale", "driver_errors", "late_plans", "device_fallbacks", "device_refused",
        "host_on_device_node", "device_tainted")]


class Stats(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "launches", "launches_unrelated", "launches_refused", "node_set_calls", "syncs",
        "rebinds", "uploads", "mask_writes", "mask_words", "stream_joins", "reuse_fences", "version")] + [
        ("step", c_int64)] + [(n, c_uint64) for n in (
        "bare_builds", "bare_build_failures", "bare_switches", "full_builds",
        "full_build_failures", "full_switches", "set_builds", "set_build_failures",
        "set_switches", "assembled_builds", "assemble_fallbacks")]


class RegistryCheck(Structure):
    _fields_ = [
        ("graphs", c_uint32),
        ("unbound", c_uint32),
        ("complete", c_bool),
        ("uniform", c_bool),
        ("hooks_uncovered", c_uint32),
    ]


class Copy(Structure):
    _fields_ = [
        ("dst", c_uint64),
        ("src", c_uint64),
        ("row_bytes", c_size_t),
        ("rows", c_size_t),
        ("dst_pitch", c_size_t),
        ("src_pitch", c_size_t),
    ]


class DeviceCounters(Structure):
    _fields_ = [("planner_runs", c_uint64), ("device_calls", c_uint64),
                ("device_failures", c_uint64)]


class Taint(Structure):
    _fields_ = [("launches", c_uint64), ("lost", c_uint64), ("calls_failed", c_uint64),
                ("last_step", c_int64), ("last_graph", c_void_p)]


class ConnInfo(Structure):
    _fields_ = [("state", c_int), ("agent_id", c_uint64), ("sessions", c_uint64),
                ("failures", c_uint64), ("since_unix_ms", c_int64),
                ("last_error", c_char * 256)]


class RecordBuffer(Structure):
    """struct toggle_record_buffer (toggle_record.h): a hook's monitor buffer."""
    _fields_ = [("ptr", c_uint64), ("bytes", c_uint64), ("dtype", c_uint32), ("ndim", c_uint32),
                ("shape", c_uint64 * 4)]


class RecordStats(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "records", "bytes", "dropped", "errors", "pending", "session", "capacity", "staged")]


class LayoutEntry(Structure):
    _fields_ = [("type", c_char_p), ("field", c_char_p), ("size", c_uint32), ("offset", c_uint32)]


class Limit(Structure):
    _fields_ = [("name", c_char_p), ("value", c_uint64)]


# C struct name -> mirror.  Every struct a binding mirrors (toggle.h's toggle_layout list).
MIRRORS = {
    "toggle_config": Config,
    "toggle_hook": Hook,
    "toggle_set": Set,
    "toggle_catalog": Catalog,
    "toggle_plan_entry": PlanEntry,
    "toggle_graph_status": GraphStatus,
    "toggle_anomalies": Anomalies,
    "toggle_stats": Stats,
    "toggle_copy": Copy,
    "toggle_device_counters": DeviceCounters,
    "toggle_registry_check": RegistryCheck,
    "toggle_taint": Taint,
    "toggle_conn_info": ConnInfo,
    "toggle_limit": Limit,
    # described by toggle_record_layout() (toggle_record.h)
    "toggle_record_buffer": RecordBuffer,
    "toggle_record_stats": RecordStats,
}

SIM_KERNEL = ctypes.CFUNCTYPE(None, c_void_p)

P = c_void_p  # every opaque handle (agent, sim, CUstream, CUgraph, CUgraphExec)

# name: (restype, argtypes)
_PROTOS = {
    "toggle_version": (c_uint, []),
    "toggle_layout": (POINTER(LayoutEntry), [POINTER(c_size_t)]),
    "toggle_limits": (POINTER(Limit), [POINTER(c_size_t)]),
    "toggle_strerror": (c_char_p, [c_int]),
    "toggle_err_name": (c_char_p, [c_int]),
    "toggle_agent_open": (c_int, [POINTER(Config), POINTER(P)]),
    "toggle_agent_close": (None, [P]),
    "toggle_last_error": (c_char_p, [P]),
    "toggle_agent_mode": (c_int, [P]),
    "toggle_agent_catalog": (POINTER(Catalog), [P]),
    "toggle_capture_begin": (c_int, [P]),
    "toggle_capture_end": (c_int, [P]),
    "toggle_record_producer": (c_int, [P, P, Hook]),
    "toggle_graph_bind": (c_int, [P, P, P]),
    "toggle_graph_forget": (c_int, [P, P]),
    "toggle_graph_instantiate": (c_int, [P, P, POINTER(P)]),
    "toggle_capture_planner": (c_int, [P, P]),
    "toggle_graph_device_counters": (c_int, [P, P, POINTER(DeviceCounters)]),
    "toggle_set_enabled": (c_int, [P, POINTER(Set)]),
    "toggle_plan_step": (c_int, [P, c_int64, POINTER(Set)]),
    "toggle_plan_submit": (c_int, [P, POINTER(PlanEntry), c_size_t]),
    "toggle_plan_clear": (None, [P]),
    "toggle_step_begin": (c_int, [P, c_int64, POINTER(Set)]),
    "toggle_graph_launch": (c_int, [P, P, P, P]),
    "toggle_graph_prepare": (c_int, [P, P, P, P]),
    "toggle_graph_set_bare": (c_int, [P, P, c_bool]),
    "toggle_apply_all": (c_int, [P]),
    "toggle_graph_count": (c_size_t, [P]),
    "toggle_graph_list": (c_size_t, [P, POINTER(GraphStatus), c_size_t]),
    "toggle_graph_status": (c_int, [P, P, POINTER(GraphStatus)]),
    "toggle_graph_hooks": (c_int, [P, P, POINTER(Set)]),
    "toggle_registry_check": (None, [P, POINTER(RegistryCheck)]),
    "toggle_anomalies_get": (None, [P, POINTER(Anomalies)]),
    "toggle_stats_get": (None, [P, POINTER(Stats)]),
    "toggle_taint_get": (None, [P, POINTER(Taint)]),
    "toggle_conn_get": (c_int, [P, POINTER(ConnInfo)]),
    "toggle_conn_state_name": (c_char_p, [c_int]),
    "toggle_current_set": (None, [P, POINTER(Set)]),
    "toggle_set_parse": (c_int, [POINTER(Catalog), c_char_p, POINTER(Set), c_char_p, c_size_t]),
    "toggle_set_format": (c_int, [POINTER(Catalog), POINTER(Set), c_char_p, c_size_t]),
    "toggle_producer_begin": (c_int, [P, P]),
    "toggle_producer_end": (c_int, [P, P, Hook, POINTER(c_size_t)]),
    "toggle_producer_abort": (None, [P, P]),
    "toggle_copy_out": (c_int, [P, P, Hook, POINTER(Copy)]),
    # the recorder (toggle_record.h)
    "toggle_record_layout": (POINTER(LayoutEntry), [POINTER(c_size_t)]),
    "toggle_record_open": (c_int, [P, c_uint64, POINTER(c_int)]),
    "toggle_record_buffer": (c_int, [P, P, Hook, POINTER(RecordBuffer)]),
    "toggle_record_buffer_in_capture": (c_int, [P, P, Hook, POINTER(RecordBuffer)]),
    "toggle_record_set": (c_int, [P, c_uint64, POINTER(Set)]),
    "toggle_record_after": (c_int, [P, P, P]),
    "toggle_record_eager": (c_int, [P, Hook, POINTER(RecordBuffer), P]),
    "toggle_record_poll": (c_int, [P]),
    "toggle_record_flush": (c_int, [P]),
    "toggle_record_stats_get": (None, [P, POINTER(RecordStats)]),
    # the simulator (toggle_sim.h): CUresult returns
    "toggle_sim_create": (c_int, [POINTER(P)]),
    "toggle_sim_destroy": (None, [P]),
    "toggle_sim_stream_create": (c_int, [P, POINTER(P)]),
    "toggle_sim_stream_destroy": (c_int, [P]),
    "toggle_sim_stream_begin_capture": (c_int, [P]),
    "toggle_sim_stream_end_capture": (c_int, [P, POINTER(P)]),
    "toggle_sim_launch_kernel": (c_int, [P, SIM_KERNEL, c_void_p]),
    "toggle_sim_memset": (c_int, [P]),
    "toggle_sim_memcpy": (c_int, [P]),
    "toggle_sim_graph_instantiate": (c_int, [POINTER(P), P]),
    "toggle_sim_graph_destroy": (c_int, [P]),
    "toggle_sim_exec_destroy": (c_int, [P]),
    "toggle_sim_graph_node_count": (c_uint, [P]),
    "toggle_sim_graph_launch": (c_int, [P, P]),
    "toggle_sim_mem_alloc": (c_int, [P, POINTER(c_uint64), c_size_t]),
    "toggle_sim_mem_free": (c_int, [P, c_uint64]),
    "toggle_sim_memcpy_dtoh": (c_int, [P, c_void_p, c_uint64, c_size_t]),
    "toggle_sim_memcpy_htod_async": (c_int, [c_uint64, c_void_p, c_size_t, P]),
    "toggle_sim_mem_in_use": (c_size_t, [P]),
}


class LibraryError(ImportError):
    """libtoggle.so was not found, or is not the version or layout this package needs."""


def _candidates():
    env = os.environ.get(ENV_LIB)
    if env:
        yield env, "$" + ENV_LIB
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libtoggle.so"), "next to the package"
    # a source checkout: python/graphtoggle -> build/libtoggle.so
    yield os.path.join(here, "..", "..", "build", "libtoggle.so"), "the repository's build/"


def _open():
    tried = []
    for path, where in _candidates():
        if not os.path.exists(path):
            tried.append("%s (%s)" % (path, where))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            hint = _load_hint(e)
            raise LibraryError("cannot load %s (%s): %s%s" % (path, where, e, hint)) from None
    raise LibraryError(
        "libtoggle.so not found; tried: %s.  Build it with `make python` (copies it next to "
        "the package), or set %s to its path" % ("; ".join(tried), ENV_LIB))


def _load_hint(err):
    """What to do about the loader's refusal of a file that exists (the text is glibc's)."""
    text = str(err)
    if "GLIBC_" in text or "version `" in text:
        return (" (built against a newer C library than this system's: build it here, from "
                "the sdist or the checkout: `pip install ./python` or `make python`)")
    import platform
    return (" (another architecture, not a shared library, or a library it needs is missing "
            "(`ldd %s`): build libtoggle on this machine (`pip install ./python` or `make "
            "python`), or install the wheel made for %s %s)"
            % (getattr(err, "filename", None) or "FILE", platform.system(), platform.machine()))


def _missing_message(path, missing):
    """A library with some of libtoggle's functions is an older libtoggle; one with none of
    them (not even toggle_version) is another library altogether."""
    if len(missing) == len(_PROTOS):
        return ("%s is not libtoggle (it has none of its functions, not even toggle_version): "
                "point %s at a libtoggle.so (make python builds build/libtoggle.so), or unset "
                "it to use the package's own" % (path, ENV_LIB))
    shown = ", ".join(missing[:5])
    if len(missing) > 5:
        shown += " and %d more" % (len(missing) - 5)
    return ("%s lacks %s: the library is older than this package; rebuild it (make python)"
            % (path, shown))


def library_limits(lib):
    """toggle_limits() as {C name: value}: the limits the library was built with."""
    n = c_size_t(0)
    table = lib.toggle_limits(ctypes.byref(n))
    return {table[i].name.decode(): table[i].value for i in range(n.value)}


def check_layout(lib):
    """Compare every mirror with the library's own toggle_layout() and every mirrored limit
    with its toggle_limits(); raise LibraryError on a difference.  Returns the number of
    layout entries compared."""
    n = c_size_t(0)
    table = lib.toggle_layout(ctypes.byref(n))
    if not table or n.value == 0:
        raise LibraryError("libtoggle reports no struct layout (toggle_layout); the library "
                           "is too old for this package: rebuild it (make python)")
    seen = {}
    total = 0
    for fn in (lib.toggle_layout, lib.toggle_record_layout):
        table = fn(ctypes.byref(n))
        total += n.value
        for i in range(n.value):
            e = table[i]
            seen.setdefault(e.type.decode(), {})[e.field.decode() if e.field else None] = (
                e.size, e.offset)
    errs = []
    limits = library_limits(lib)
    for cname, value in LIMITS.items():
        if cname not in limits:
            errs.append("%s: not described by the library" % cname)
        elif limits[cname] != value:
            errs.append("%s: %d in C, %d in Python" % (cname, limits[cname], value))
    for cname, mirror in MIRRORS.items():
        fields = seen.get(cname)
        if fields is None:
            errs.append("%s: not described by the library" % cname)
            continue
        size = fields.pop(None, (None, None))[0]
        if size != ctypes.sizeof(mirror):
            errs.append("%s: sizeof %s in C, %d in Python" % (cname, size, ctypes.sizeof(mirror)))
        for fname, _ in mirror._fields_:
            desc = getattr(mirror, fname)
            c = fields.pop(fname, None)
            if c is None:
                errs.append("%s.%s: not in C" % (cname, fname))
            elif c != (desc.size, desc.offset):
                errs.append("%s.%s: size/offset %d/%d in C, %d/%d in Python"
                            % (cname, fname, c[0], c[1], desc.size, desc.offset))
        for fname in fields:
            errs.append("%s.%s: in C, missing in Python" % (cname, fname))
    if errs:
        raise LibraryError("libtoggle's struct layout differs from this package's mirrors: "
                           + "; ".join(errs) + " (rebuild the library and the package together)")
    return total


_lock = threading.Lock()
_lib = None
_path = None


def lib():
    """The loaded, checked library (loaded once, under a lock)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        handle, path = _open()
        missing = [name for name in _PROTOS if not hasattr(handle, name)]
        if missing:
            raise LibraryError(_missing_message(path, missing))
        for name, (res, args) in _PROTOS.items():
            fn = getattr(handle, name)
            fn.restype = res
            fn.argtypes = args
        v = handle.toggle_version()
        major, minor = v >> 16, v & 0xFFFF
        if major != API_MAJOR or minor < API_MINOR:
            raise LibraryError("%s is libtoggle %d.%d; this package needs %d.%d or a later %d.x: "
                               "install the matching library (make python)"
                               % (path, major, minor, API_MAJOR, API_MINOR, API_MAJOR))
        check_layout(handle)
        _lib, _path = handle, path
        return _lib


def path():
    lib()
    return _path
