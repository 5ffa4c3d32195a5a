"""The binding itself: library lookup, version and layout checks, the error table."""

import ctypes
import os
import subprocess
import sys

import pytest

import graphtoggle
from graphtoggle import _lib, errors

from conftest import REPO


def test_layout_matches_library():
    n = _lib.check_layout(_lib.lib())
    # one entry per struct plus one per field of every mirror
    want = sum(1 + len(m._fields_) for m in _lib.MIRRORS.values())
    assert n >= want


def test_layout_mismatch_is_refused(monkeypatch):
    class WrongStats(ctypes.Structure):  # 'step' dropped: the kind of drift to catch
        _fields_ = [f for f in _lib.Stats._fields_ if f[0] != "step"]
    monkeypatch.setitem(_lib.MIRRORS, "toggle_stats", WrongStats)
    with pytest.raises(_lib.LibraryError) as e:
        _lib.check_layout(_lib.lib())
    assert "toggle_stats.step: in C, missing in Python" in str(e.value)
    assert "sizeof" in str(e.value)


def test_limit_mismatch_is_refused(monkeypatch):
    monkeypatch.setitem(_lib.LIMITS, "TOGGLE_MAX_NAME", _lib.MAX_NAME - 1)
    with pytest.raises(_lib.LibraryError, match=r"TOGGLE_MAX_NAME: %d in C, %d in Python"
                       % (_lib.MAX_NAME, _lib.MAX_NAME - 1)):
        _lib.check_layout(_lib.lib())


def test_client_constants_match_library():
    # graphtoggle.client runs without libtoggle, so its copies of the wire
    # limits are checked here, against the values the C library was built with.
    from graphtoggle.client import _wire, client
    limits = _lib.library_limits(_lib.lib())
    assert _wire.MAX_FRAME == limits["TGP_MAX_FRAME"]
    assert _wire.PROTOCOL_VERSION == limits["TGP_PROTOCOL_VERSION"]
    assert client.MAX_PLAN_ENTRIES == limits["TGP_MAX_PLAN_ENTRIES"]


def test_layout_offset_mismatch_is_refused(monkeypatch):
    class WrongHook(ctypes.Structure):
        _fields_ = [("layer", ctypes.c_uint16), ("type", ctypes.c_uint16)]
    monkeypatch.setitem(_lib.MIRRORS, "toggle_hook", WrongHook)
    with pytest.raises(_lib.LibraryError, match=r"toggle_hook.type: size/offset 2/0 in C, 2/2"):
        _lib.check_layout(_lib.lib())


def _fresh_import(env, code="import graphtoggle; graphtoggle.library_path()"):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          cwd=os.path.join(REPO, "python"))


def test_missing_library_names_the_fix():
    r = _fresh_import({"GRAPHTOGGLE_LIB": "/nonexistent/libtoggle.so"})
    assert r.returncode != 0
    assert "libtoggle.so not found" in r.stderr and "make python" in r.stderr
    assert "GRAPHTOGGLE_LIB" in r.stderr


def test_unrelated_library_is_named_not_old():
    """GRAPHTOGGLE_LIB at a shared library that is not libtoggle (libz here, any will do):
    said so, not 'older than this package' with a list of every function (issue 25)."""
    import ctypes.util
    other = ctypes.util.find_library("z") or ctypes.util.find_library("m")
    if other is None:
        pytest.skip("no libz or libm to stand for an unrelated library")
    path = None
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
              "/lib", "/usr/lib", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"):
        if os.path.exists(os.path.join(d, other)):
            path = os.path.join(d, other)
            break
    if path is None:
        pytest.skip("%s not found in the usual library folders" % other)
    r = _fresh_import({"GRAPHTOGGLE_LIB": path})
    assert r.returncode != 0
    assert "is not libtoggle" in r.stderr, r.stderr[-400:]
    assert "older than this package" not in r.stderr
    assert "toggle_graph_launch" not in r.stderr  # no list of the functions it lacks


def test_unloadable_library_names_the_fix(tmp_path):
    """A file that exists but cannot be loaded (not an ELF of this machine): the loader's
    text, then what to do about it."""
    bad = tmp_path / "libtoggle.so"
    bad.write_bytes(b"\x7fELF" + b"\x00" * 60)
    r = _fresh_import({"GRAPHTOGGLE_LIB": str(bad)})
    assert r.returncode != 0
    assert "cannot load" in r.stderr and "build libtoggle on this machine" in r.stderr, \
        r.stderr[-400:]


def test_wrong_library_version_names_the_fix():
    code = ("import graphtoggle._lib as L; L.API_MAJOR = 7\n"
            "try:\n    L.lib()\nexcept L.LibraryError as e:\n    print('ERR', e)\n")
    r = _fresh_import({}, code)
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "this package needs 7.1" in r.stdout
    assert "make python" in r.stdout


def test_version():
    v = _lib.lib().toggle_version()
    assert (v >> 16, v & 0xFFFF) == (_lib.API_MAJOR, _lib.API_MINOR)


def _c_error_list(lib):
    """{name: code} of toggle_error.h's TOGGLE_ERROR_MAP, as the loaded library's
    toggle_err_name() (generated from that list) names the codes.  Scans far past the
    list's end, so that a stray code would show too."""
    found = {}
    for code in range(-1, -1025, -1):
        name = lib.toggle_err_name(code)
        if name is not None:
            found[name.decode()] = code
    return found


def test_error_table_equals_the_c_list():
    lib = _lib.lib()
    in_c = _c_error_list(lib)
    python = {name: code for code, name, _, _ in errors._CODES}
    assert python == in_c, "errors._CODES and toggle_error.h's TOGGLE_ERROR_MAP differ"
    assert sorted(in_c.values()) == list(range(-len(in_c), 0))  # -1 .. TOGGLE_ERROR_MIN, no gap
    for code, name, cls, _ in errors._CODES:
        klass = getattr(errors, cls)
        assert klass.code == code and klass.code_name == name
        assert issubclass(klass, graphtoggle.GraphToggleError)
        assert lib.toggle_strerror(code).decode() != "unknown error"
    assert lib.toggle_err_name(0).decode() == "TOGGLE_OK"
    assert lib.toggle_err_name(1) is None
    assert lib.toggle_strerror(min(python.values()) - 1).decode() == "unknown error"


def test_docs_error_table_equals_the_list():
    """docs/python.md's table of codes and classes says what errors._CODES does."""
    import re
    text = open(os.path.join(REPO, "docs", "python.md"), encoding="utf-8").read()
    pairs = dict(re.findall(r"`(TOGGLE_E[A-Z]+)` \| `([A-Za-z]+Error)`", text))
    want = {name: cls for _, name, cls, _ in errors._CODES}
    assert pairs == want, "docs/python.md's error table differs from errors._CODES"


def test_error_for():
    e = graphtoggle.error_for(-5, "no window")
    assert isinstance(e, graphtoggle.CaptureError)
    assert e.code == -5 and e.code_name == "TOGGLE_ECAPTURE" and e.detail == "no window"
    assert str(e) == "TOGGLE_ECAPTURE: no window"
    unknown = graphtoggle.error_for(-99, "x")
    assert type(unknown) is graphtoggle.GraphToggleError and unknown.code == -99
    assert isinstance(graphtoggle.error_for(-10, ""), ValueError)
