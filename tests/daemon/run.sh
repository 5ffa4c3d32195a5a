#!/bin/sh
# run.sh - toggled's process-level behaviour, end to end: systemd socket
# activation (LISTEN_FDS), SIGHUP reloading the configuration file while
# command-line options keep winning, a bad configuration kept out on reload,
# a bad configuration refused at start, and SIGTERM exiting cleanly.
set -eu
B=${B:-build}
T=$(mktemp -d /tmp/tgd-sig.XXXXXX)
PID=""
fails=0
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
wait_for() { # wait_for FILE PATTERN
	i=0
	until grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1)); [ $i -lt 100 ] || return 1; sleep 0.05
	done
}
ctl() { "$B/togglectl" --socket "$1" status >/dev/null 2>&1; }

# 1. Socket activation: a listening socket on fd 3, LISTEN_PID = the daemon's pid.
python3 - "$T/act.sock" "$B/toggled" "$T/state1" "$T/act.log" <<'PY' &
import os, socket, sys
path, binary, state, log = sys.argv[1:5]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(16)
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(fd, 2)
os.execve(binary, [binary, "--socket", path, "--state-dir", state], env)
PY
PID=$!
if wait_for "$T/act.log" "listening on" && ctl "$T/act.sock"; then
	ok "socket activation: serves on the inherited socket"
else
	fail "socket activation"; cat "$T/act.log"
fi
kill -TERM "$PID"
if wait "$PID"; then ok "SIGTERM: exit 0"; else fail "SIGTERM exit status $?"; fi
PID=""
[ -e "$T/act.sock" ] && ok "activated socket left to its owner" || fail "activated socket was unlinked"

# 2. SIGHUP reloads the file; -g on the command line keeps winning.
printf 'operator_group = fromfile\nverbose = 0\n' >"$T/conf"
"$B/toggled" --socket "$T/hup.sock" --state-dir "$T/state2" -c "$T/conf" -g fromcli 2>"$T/hup.log" &
PID=$!
wait_for "$T/hup.log" "listening on" || fail "daemon with config did not start"
grep -q "operator group 'fromcli'" "$T/hup.log" && ok "command line wins at start" ||
	fail "operator group at start: $(grep listening "$T/hup.log")"
printf 'operator_group = other\nverbose = 1\n' >"$T/conf"
kill -HUP "$PID"
if wait_for "$T/hup.log" "configuration reloaded"; then
	grep "configuration reloaded" "$T/hup.log" | grep -q "'fromcli'" &&
		ok "SIGHUP: reloaded, command line still wins" ||
		fail "SIGHUP lost the command-line group: $(grep reloaded "$T/hup.log")"
else
	fail "SIGHUP: no reload logged"
fi
ctl "$T/hup.sock" && grep -q "debug:" "$T/hup.log" && ok "SIGHUP: verbose from the file applies" ||
	fail "verbose = 1 not applied"
printf 'no_such_key = 1\n' >"$T/conf"
kill -HUP "$PID"
wait_for "$T/hup.log" "keeping the old configuration" && ok "SIGHUP: bad file refused, old kept" ||
	fail "bad configuration on SIGHUP"
ctl "$T/hup.sock" && ok "still serving after a bad reload" || fail "not serving after a bad reload"
kill -TERM "$PID"
wait "$PID" || fail "SIGTERM exit status $?"
PID=""
[ -e "$T/hup.sock" ] && fail "own socket not removed at exit" || ok "own socket removed at exit"

# 3. A bad configuration file refuses the start, naming file and line.
printf 'operator_group = ok\nbogus\n' >"$T/bad.conf"
if "$B/toggled" --socket "$T/bad.sock" --state-dir "$T/state3" -c "$T/bad.conf" 2>"$T/bad.log"; then
	fail "started with a bad configuration"
else
	grep -q "bad.conf:2" "$T/bad.log" && ok "bad configuration refused at start (file:line)" ||
		fail "bad configuration message: $(cat "$T/bad.log")"
fi

# 4. A peer that never reads its replies is dropped once its queue passes the
#    bound; the loop keeps serving everyone else.
printf 'max_queue_bytes = 65536\n' >"$T/q.conf"
"$B/toggled" --socket "$T/q.sock" --state-dir "$T/state4" -c "$T/q.conf" 2>"$T/q.log" &
PID=$!
wait_for "$T/q.log" "listening on" || fail "daemon for the queue test did not start"
python3 - "$T/q.sock" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
def frame(body):
    return struct.pack(">I", len(body)) + body
hello = frame(bytes([0x08, 0x01, 0x52, 0x02, 0x08, 0x02]))      # id 1, HelloRequest{version 2}
status = frame(bytes([0x08, 0x02, 0x92, 0x02, 0x00]))            # id 2, StatusRequest{}
s.sendall(hello)
try:
    for _ in range(50):                                          # ~10 MB of replies, never read
        s.sendall(status * 2000)
except (BrokenPipeError, ConnectionResetError):
    pass                                                         # dropped: what we want
PY
wait_for "$T/q.log" "over its bound" && ok "a peer that never reads is dropped at its bound" ||
	fail "slow peer not dropped: $(tail -n 3 "$T/q.log")"
ctl "$T/q.sock" && ok "the loop still serves others" || fail "not serving after dropping a slow peer"
kill -TERM "$PID"
wait "$PID" || fail "SIGTERM exit status $?"
PID=""

[ "$fails" -eq 0 ] || { echo "run.sh: $fails failures"; exit 1; }
echo "run.sh: daemon process tests passed"
