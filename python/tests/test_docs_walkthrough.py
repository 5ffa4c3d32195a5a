"""docs/python.md's walk-through on the simulator runs as printed and prints what the
page says it prints."""

import os
import re
import subprocess
import sys

from conftest import REPO

PAGE = os.path.join(REPO, "docs", "python.md")


def test_simulator_walkthrough_runs_as_documented():
    text = open(PAGE, encoding="utf-8").read()
    section = text[text.index("### A walk-through on the simulator"):]
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[:2]
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == printed, "the page says:\n%s\nit printed:\n%s" % (printed, r.stdout)
