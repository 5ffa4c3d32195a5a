#!/bin/sh
# demo-torch.sh - the GPU leg of `make demo`: examples/torch_engine.py (a PyTorch
# engine with one CUDA graph per batch size, producers on module forward hooks)
# connected to toggled, and togglectl changing its hooks while it runs.  The
# engine checks every 10th replay against its monitor buffers itself.
# Skips (exit 0) without a python3 that has torch and sees a GPU.
set -eu
cd "$(dirname "$0")/.."
B=${B:-build}
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
	>/dev/null 2>&1; then
	echo "demo-torch: SKIPPED: no $PYTHON with torch and a CUDA device"
	exit 0
fi
D=$(mktemp -d /tmp/graphtoggle-torch-demo.XXXXXX)
SOCK=$D/toggled.sock
DAEMON_PID="" ENGINE_PID=""
cleanup() {
	[ -n "$ENGINE_PID" ] && kill "$ENGINE_PID" 2>/dev/null || true
	[ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$D"
}
trap cleanup EXIT INT TERM
ctl() {
	printf '$ togglectl %s\n' "$*"
	"$B/togglectl" --socket "$SOCK" "$@"
}

echo "== toggled on $SOCK"
"$B/toggled" --socket "$SOCK" --state-dir "$D/state" 2>"$D/toggled.log" &
DAEMON_PID=$!
i=0
until "$B/togglectl" --socket "$SOCK" status >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 200 ] || { cat "$D/toggled.log"; exit 1; }; sleep 0.05
done

echo "== examples/torch_engine.py: graphs for batch 1..32, 3 hook types x 8 layers"
GRAPHTOGGLE_LIB=${GRAPHTOGGLE_LIB:-$PWD/$B/libtoggle.so} PYTHONUNBUFFERED=1 \
	"$PYTHON" examples/torch_engine.py --socket "$SOCK" --steps 0 --period-ms 1 \
	>"$D/engine.log" 2>&1 &
ENGINE_PID=$!
i=0
until "$B/togglectl" --socket "$SOCK" agents 2>/dev/null | grep -q torch-engine; do
	i=$((i + 1))
	if [ $i -ge 600 ] || ! kill -0 "$ENGINE_PID" 2>/dev/null; then cat "$D/engine.log"; exit 1; fi
	sleep 0.05
done
ctl agents
ctl set 'resid_post:0-3' --wait
ctl enable 'mlp_out:*' --wait
ctl disable 'resid_post:1' --wait
ctl set none --wait
ctl set all --wait
ctl graphs
sleep 0.5
kill -TERM "$ENGINE_PID"
status=0
wait "$ENGINE_PID" || status=$?
ENGINE_PID=""
sed 's/^/   engine | /' "$D/engine.log"
[ $status -eq 0 ] && echo "demo-torch: PASS" || echo "demo-torch: FAIL (engine exit $status)"
exit $status
