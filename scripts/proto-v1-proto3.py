#!/usr/bin/env python3
"""proto-v1-proto3.py - the other mechanical half of wire contract v1 (issue
#13): what proto3 changes in the C that protoc-c generates, for code written
against the proto2 schema.  In every tracked .c/.h file:

  - scalar fields have no has_<field>; for every scalar field F of
    proto/toggle.proto:
        x.has_F = anything;      ->  (line removed: presence is "non-zero")
        a->b[i].has_F            ->  (a->b[i].F != 0)
        a->has_step              ->  (a->step >= 0)       (-1 is "no step yet")
  - Error.code is the ErrorCode enum, no longer an int32: gcc's
    -Wenum-conversion and -Wenum-compare flag the toggle_error.h constants
        x.code = TOGGLE_EIO      ->  x.code = (Toggle__ErrorCode)TOGGLE_EIO
        e->error->code == TOGGLE_EX  ->  (int)e->error->code == TOGGLE_EX

Not rewritten (read the merge for these): optional strings, which proto3
decodes as "" where proto2 gave NULL (`if (m->s)` becomes `if (m->s[0])`).

Presence and non-zero agree for every such field of the contract (wait_ms 0
means "do not wait", version 0 is "none", PlanEntry.after is 1..N when set);
read each rewritten line in the diff all the same.  Idempotent; run it from
the repository root after merging a branch that used has_ fields, with
scripts/proto-v1-rename.sh.
"""

import os
import re
import subprocess
import sys

root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                      check=True).stdout.strip()
os.chdir(root)

proto = open("proto/toggle.proto").read()
SCALARS = ("int32", "int64", "uint32", "uint64", "bool", "double", "float", "sint32", "sint64",
           "fixed32", "fixed64", "sfixed32", "sfixed64")
fields = set()
for m in re.finditer(r"^\s*(?:optional\s+)?(\w+)\s+(\w+)\s*=\s*\d+\s*;", proto, re.M):
    typ, name = m.groups()
    if typ in SCALARS or re.search(r"^enum\s+%s\b" % typ, proto, re.M):
        fields.add(name)
if not fields:
    sys.exit("proto-v1-proto3: no scalar fields found in proto/toggle.proto")
names = "|".join(sorted(fields, key=len, reverse=True))

assign = re.compile(r"^[ \t]*[\w\[\]\.>-]*(?:->|\.)has_(?:%s)\s*=(?!=)[^;]*;[ \t]*\n" % names, re.M)
use = re.compile(r"((?:\w+(?:\[[^\]]*\])?(?:->|\.))+)has_(%s)\b" % names)
code_assign = re.compile(r"((?:->|\.)code\s*=\s*)(TOGGLE_E[A-Z]+)\b")
code_compare = re.compile(r"(?<!\(int\))\b(\w+(?:->|\.)error(?:->|\.)code)\s*(==|!=)\s*(TOGGLE_E[A-Z]+)\b")


def rewrite(m):
    prefix, field = m.groups()
    return "(%s%s %s)" % (prefix, field, ">= 0" if field == "step" else "!= 0")


files = subprocess.run(["git", "ls-files", "*.c", "*.h"], capture_output=True, text=True,
                       check=True).stdout.split()
changed = 0
for f in files:
    s = open(f).read()
    t = use.sub(rewrite, assign.sub("", s))
    t = code_assign.sub(r"\1(Toggle__ErrorCode)\2", t)
    t = code_compare.sub(r"(int)\1 \2 \3", t)
    if t != s:
        open(f, "w").write(t)
        changed += 1
        print("proto-v1-proto3: %s" % f)
print("proto-v1-proto3: %d files rewritten (fields: %d scalars of toggle.proto)" % (changed, len(fields)))
