"""pytest setup: the package from this checkout (python/), libtoggle from build/ (or
$GRAPHTOGGLE_LIB), and the fake torch (tests/fake_torch) in place of torch, which CI
does not have and must not download.

GRAPHTOGGLE_TEST_TORCH=real: the real torch instead (a python that has it, e.g.
GRAPHTOGGLE_TEST_TORCH=real /path/to/venv/bin/python -m pytest tests): the tests that
need real torch run (torch.compile, dynamo, inductor on the CPU: test_torch_compile.py),
those written for the fake skip."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
REAL_TORCH = os.environ.get("GRAPHTOGGLE_TEST_TORCH") == "real"
if not REAL_TORCH:
    sys.path.insert(0, os.path.join(HERE, "fake_torch"))

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("B", os.path.join(REPO, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(REPO, BUILD)
os.environ.setdefault("GRAPHTOGGLE_LIB", os.path.join(BUILD, "libtoggle.so"))
