"""pytest setup: the package from this checkout (python/), libtoggle from build/ (or
$GRAPHTOGGLE_LIB), and the fake torch (tests/fake_torch) in place of torch, which CI
does not have and must not download."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "fake_torch"))

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("B", os.path.join(REPO, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(REPO, BUILD)
os.environ.setdefault("GRAPHTOGGLE_LIB", os.path.join(BUILD, "libtoggle.so"))
