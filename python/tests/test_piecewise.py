"""graphtoggle.piecewise (the torch.compile backend that splits at the attention op, compiles
each piece with inductor and captures each piece per shape into one pool) on real torch, on
the CPU: piecewise_cases.py, run in a python that has torch, with CUDA graphs replaced by
a CPU stand-in that keeps their memory semantics.  The suite itself runs on the fake torch
(conftest.py), so the cases run in a child process with a clean path; they skip, with the
reason, where no python here has torch (CI).  The GPU side (real CUDA graphs, the patch,
producers): python/tests/gpu/piecewise_proof.py in make gpu-check."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "piecewise_cases.py")
NAMES = ["bad_splitting_ops_are_named", "capture_closed_raises",
         "capture_each_piece_per_size_then_replay", "changed_input_is_copied_or_refused",
         "dynamic_shapes_one_compile_graphs_per_size", "full_and_none_modes_run_pieces_directly",
         "inductor_pieces_match_eager", "new_tensor_splitting_op_is_copied",
         "no_splitting_ops_one_piece", "reset_captures_again", "split_at_the_op"]


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}
    env["PYTHONPATH"] = os.path.dirname(HERE)
    return env


def _python_with_torch():
    """$GRAPHTOGGLE_TORCH_PYTHON, else this python, if it imports the real torch (>= 2.6,
    with torch.fx and torch.library.custom_op) outside the fake torch's path."""
    for py in (os.environ.get("GRAPHTOGGLE_TORCH_PYTHON"), sys.executable):
        if not py:
            continue
        try:
            r = subprocess.run([py, "-c", "import torch, torch.fx, sys; "
                                "sys.exit(3 if getattr(torch, 'FAKE', False) or "
                                "not hasattr(torch.library, 'custom_op') else 0)"],
                               capture_output=True, env=_env(), timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return py
    return None


@pytest.fixture(scope="module")
def results():
    py = _python_with_torch()
    if py is None:
        pytest.skip("no python here imports the real torch (set GRAPHTOGGLE_TORCH_PYTHON to "
                    "one that does); the fake torch cannot compile")
    r = subprocess.run([py, CASES], capture_output=True, text=True, env=_env(), timeout=900)
    got = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            got[rec["case"]] = rec
    if not got:
        pytest.fail("piecewise_cases.py printed no result (rc %d): %s"
                    % (r.returncode, r.stderr[-3000:]))
    return got


def test_case_list_is_complete(results):
    assert sorted(results) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_piecewise(results, name):
    rec = results.get(name)
    assert rec is not None, "case %s did not run" % name
    assert rec["ok"], rec["detail"]
