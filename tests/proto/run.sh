#!/bin/bash
# run.sh - the public contract (proto/graphtoggle/v1/toggle.proto) compiles
# with plain protoc and is buf-lint clean, as docs/protocol.md (Generating a
# client) says:
#   1. protoc --python_out of the file as installed, and tests/proto/client.py,
#      which uses nothing else, against a real toggled and a simulator agent;
#   2. protoc --cpp_out, the output compiled with libprotobuf's flags;
#   3. protoc-gen-go with the M mapping the page gives, where it exists;
#   4. buf lint with proto/buf.yaml, where buf exists.
# 3 and 4 skip (listed by make check) without their tool.
set -u
TL_NAME=proto/run.sh
# shellcheck source=tests/lib.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
DAEMON=${TOGGLED:-$B/toggled-san}
AGENT=$B/examples/demo_agent
tl_need "$DAEMON" "$AGENT"
PROTO=${PROTO:-$TOP/proto/graphtoggle/v1/toggle.proto}
tl_tmpdir tgproto
PIDS=
cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	tl_rm_tmpdir
}
trap cleanup EXIT
ok() { CHECKS=$((CHECKS + 1)); echo "ok: $*"; }
bad() { CHECKS=$((CHECKS + 1)); fail "$*"; }
# The file alone, away from the tree: nothing else on protoc's path.
mkdir -p "$T/src/graphtoggle/v1"
cp "$PROTO" "$T/src/graphtoggle/v1/"

# ---- 1. Python ----------------------------------------------------------------
py=""
for p in python3 /usr/bin/python3; do
	command -v "$p" >/dev/null 2>&1 && "$p" -c 'import google.protobuf' 2>/dev/null && { py=$p; break; }
done
[ -n "$py" ] || { echo "$TL_NAME: FAIL: no python3 with protobuf (scripts/deps.sh installs python3-protobuf)" >&2; exit 1; }
mkdir -p "$T/py"
if protoc -I"$T/src" --python_out="$T/py" "$T/src/graphtoggle/v1/toggle.proto" 2>"$T/protoc.log"; then
	ok "protoc --python_out"
	export ASAN_OPTIONS=detect_leaks=1
	"$DAEMON" --socket "$T/sock" --state-dir "$T/state" >"$T/toggled.log" 2>&1 &
	PIDS="$PIDS $!"
	"$AGENT" --backend sim --socket "$T/sock" --period-ms 5 --name proto-engine >"$T/agent.log" 2>&1 &
	PIDS="$PIDS $!"
	listed() { [ -S "$T/sock" ] && "$B/togglectl" -s "$T/sock" --json agents 2>/dev/null | grep -q proto-engine; }
	if wait_for 10 "the agent is listed" listed; then
		if "$py" "$TOP/tests/proto/client.py" "$T/sock" "$T/py" >"$T/client.log" 2>&1; then
			ok "$(cat "$T/client.log")"
		else
			bad "the client from protoc's Python output: $(cat "$T/client.log")"
		fi
	fi
else
	bad "protoc --python_out: $(cat "$T/protoc.log")"
fi

# ---- 2. C++ ---------------------------------------------------------------------
mkdir -p "$T/cpp"
if ! protoc -I"$T/src" --cpp_out="$T/cpp" "$T/src/graphtoggle/v1/toggle.proto" 2>"$T/protoc.log"; then
	bad "protoc --cpp_out: $(cat "$T/protoc.log")"
elif ! command -v g++ >/dev/null 2>&1 || ! pkg-config --exists protobuf; then
	bad "protoc --cpp_out: no g++ or libprotobuf-dev to compile it (scripts/deps.sh installs both)"
elif g++ -std=c++17 -c -I"$T/cpp" $(pkg-config --cflags protobuf) "$T/cpp/graphtoggle/v1/toggle.pb.cc" \
	-o "$T/cpp/toggle.pb.o" 2>"$T/cpp.log"; then
	ok "protoc --cpp_out, compiled against libprotobuf"
else
	bad "the C++ output does not compile: $(head -n 5 "$T/cpp.log")"
fi

# ---- 3. Go ------------------------------------------------------------------------
if ! command -v protoc-gen-go >/dev/null 2>&1; then
	skip "proto/run.sh 3 (protoc --go_out): no protoc-gen-go here (Debian: golang-goprotobuf-dev)"
else
	mkdir -p "$T/go"
	if protoc -I"$T/src" --go_out="$T/go" --go_opt=paths=source_relative \
		--go_opt=Mgraphtoggle/v1/toggle.proto=example.com/graphtoggle/v1 \
		"$T/src/graphtoggle/v1/toggle.proto" 2>"$T/protoc.log"; then
		ok "protoc --go_out with the M mapping"
	else
		bad "protoc --go_out: $(cat "$T/protoc.log")"
	fi
fi

# ---- 4. buf lint ------------------------------------------------------------------
BUF=${BUF:-buf}
if ! command -v "$BUF" >/dev/null 2>&1; then
	skip "proto/run.sh 4 (buf lint): no buf here (pip install buf-bin, or BUF=PATH)"
elif (cd "$TOP/proto" && "$BUF" lint) >"$T/buf.log" 2>&1; then
	ok "buf lint (proto/buf.yaml: STANDARD)"
else
	bad "buf lint: $(cat "$T/buf.log")"
fi

[ "$FAILS" -eq 0 ] || { echo "$TL_NAME: $FAILS failure(s) in $CHECKS checks"; exit 1; }
echo "$TL_NAME: $CHECKS checks passed"
