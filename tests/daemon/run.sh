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
if timeout 10 "$B/toggled" --socket "$T/bad.sock" --state-dir "$T/state3" -c "$T/bad.conf" 2>"$T/bad.log"; then
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

# 5. Issue 11 item 3: one uid cannot lock the others out.  uid 65534 gets
#    max_peers_per_uid connections and no more; with max_peers lowered (SIGHUP)
#    the last reserved_peers slots stay for root; root's togglectl works
#    throughout.  Needs root (to become 65534).
if [ "$(id -u)" = 0 ]; then
	printf 'max_peers = 40\nreserved_peers = 8\nmax_peers_per_uid = 10\nhello_timeout_ms = 0\nidle_timeout_ms = 0\n' >"$T/lim.conf"
	chmod 755 "$T"
	"$B/toggled" --socket "$T/lim.sock" --state-dir "$T/state5" -c "$T/lim.conf" 2>"$T/lim.log" &
	PID=$!
	wait_for "$T/lim.log" "listening on" || fail "daemon for the limits test did not start"
	# Run by peers.py between its phases: root's view, then max_peers lowered to 16.
	cat >"$T/lim-ctl.sh" <<-CTL
	#!/bin/sh
	"$B/togglectl" --socket "$T/lim.sock" status >/dev/null || exit 1
	[ "\$1" = phase1 ] || exit 0
	printf 'max_peers = 16\\nreserved_peers = 8\\nmax_peers_per_uid = 0\\n' >"$T/lim.conf"
	kill -HUP $PID
	i=0
	until grep -q "configuration reloaded" "$T/lim.log"; do
		i=\$((i + 1)); [ \$i -lt 100 ] || exit 2; sleep 0.05
	done
	CTL
	chmod +x "$T/lim-ctl.sh"
	out=$(python3 tests/daemon/peers.py limits "$T/lim.sock" "$T/lim-ctl.sh")
	echo "$out" | grep -q "phase1 ok=10 refused_per_uid=2" &&
		ok "uid 65534: 10 connections, the next ones refused (max_peers_per_uid)" ||
		fail "per-uid limit: $out"
	echo "$out" | grep -q "phase1 root ctl rc=0" && ok "root's togglectl served while 65534 is at its limit" ||
		fail "root locked out: $out"
	echo "$out" | grep -q "phase2 nobody=reserved" && ok "uid 65534 kept out of the reserved slots" ||
		fail "reserve: $out"
	echo "$out" | grep -q "phase2 root ctl rc=0" && ok "root's togglectl served from the reserve" ||
		fail "root not served from the reserve: $out"
	kill -TERM "$PID"
	wait "$PID" || fail "SIGTERM exit status $?"
	PID=""
else
	echo "skip: connection limits per uid (needs root to become uid 65534)"
fi

# 6. Issue 11 item 3: a peer that never says hello, or goes quiet after it,
#    is dropped; a watcher is not.
printf 'hello_timeout_ms = 300\nidle_timeout_ms = 800\n' >"$T/idle.conf"
"$B/toggled" --socket "$T/idle.sock" --state-dir "$T/state6" -c "$T/idle.conf" 2>"$T/idle.log" &
PID=$!
wait_for "$T/idle.log" "listening on" || fail "daemon for the timeout test did not start"
"$B/togglectl" --socket "$T/idle.sock" watch >"$T/watch.out" 2>&1 &
WPID=$!
r=$(python3 tests/daemon/peers.py closed "$T/idle.sock" nohello)
case "$r" in "closed after"*) ok "no hello: $r" ;; *) fail "no hello: $r" ;; esac
r=$(python3 tests/daemon/peers.py closed "$T/idle.sock" idle)
case "$r" in "closed after"*) ok "idle client: $r" ;; *) fail "idle client: $r" ;; esac
sleep 1
kill -0 "$WPID" 2>/dev/null && ok "a watcher outlives idle_timeout_ms" || fail "watcher dropped: $(cat "$T/watch.out")"
kill "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null || true
ctl "$T/idle.sock" && ok "still serving after the timeouts" || fail "not serving after the timeouts"
kill -TERM "$PID"
wait "$PID" || fail "SIGTERM exit status $?"
PID=""

# 7. Issue 11 item 4: out of fds (ulimit -n 40), accept() must not spin or
#    flood the log: waiting connections are refused with an error, the
#    warning is rate-limited, and the daemon serves again once fds are free.
printf 'max_peers = 200\nreserved_peers = 0\nmax_peers_per_uid = 0\nhello_timeout_ms = 0\n' >"$T/fd.conf"
(ulimit -n 40 && exec "$B/toggled" --socket "$T/fd.sock" --state-dir "$T/state7" -c "$T/fd.conf") 2>"$T/fd.log" &
PID=$!
wait_for "$T/fd.log" "listening on" || fail "daemon for the fd test did not start"
out=$(python3 tests/daemon/peers.py emfile "$T/fd.sock" "$PID" 60)
echo "$out" | grep -q "closed=0" && ok "out of fds: every connection served or refused with an error ($out)" ||
	fail "out of fds: connections dropped without a word or left hanging: $out"
cpu=$(echo "$out" | sed -n 's/.*cpu_while_held=\([0-9.]*\)\/.*/\1/p')
if [ -n "$cpu" ] && awk -v c="$cpu" 'BEGIN { exit !(c < 0.5) }'; then
	ok "out of fds: no busy loop (${cpu} s of CPU in 2 s)"
else
	fail "out of fds: the daemon spins ($out)"
fi
n=$(grep -c "accept" "$T/fd.log" || true)
[ "$n" -le 2 ] && ok "out of fds: $n accept warning line(s), rate-limited" || fail "out of fds: $n accept log lines"
ctl "$T/fd.sock" && ok "serving again once fds are free" || fail "not serving after fd exhaustion"
kill -TERM "$PID"
wait "$PID" || fail "SIGTERM exit status $?"
PID=""

# 8. Issue 11 item 10: --socket PATH removes only a socket nobody listens on;
#    anything else at PATH is refused with a clear error and left alone.
#    (A daemon that wrongly starts in cases 8-10 is stopped by timeout.)
echo "precious" >"$T/reg.sock"
mkdir "$T/dir.sock"
ln -s "$T/reg.sock" "$T/link.sock"
for what in reg dir link; do
	if timeout 10 "$B/toggled" --socket "$T/$what.sock" --state-dir "$T/state8" 2>"$T/p-$what.log"; then
		fail "--socket on a $what: started"
	elif grep -q "not a socket; not removing it" "$T/p-$what.log"; then
		ok "--socket on a $what: refused, says why"
	else
		fail "--socket on a $what: $(cat "$T/p-$what.log")"
	fi
done
[ "$(cat "$T/reg.sock" 2>/dev/null)" = precious ] && [ -d "$T/dir.sock" ] && [ -L "$T/link.sock" ] &&
	ok "--socket: the file, directory and link are still there" || fail "--socket removed what was at PATH"

# 9. Issue 11 item 6: a socket or state directory another user made, or one
#    others may write, is refused (the /tmp fallbacks of a non-root daemon).
mkdir -m 0777 "$T/ww"
chmod 0777 "$T/ww"
if timeout 10 "$B/toggled" --socket "$T/ww/s.sock" --state-dir "$T/state9" 2>"$T/ww.log"; then
	fail "socket in a world-writable directory: started"
else
	grep -q "writable by others" "$T/ww.log" && ok "socket directory writable by others: refused" ||
		fail "world-writable socket directory: $(cat "$T/ww.log")"
fi
if timeout 10 "$B/toggled" --socket "$T/s9.sock" --state-dir "$T/ww" 2>"$T/ww2.log"; then
	fail "state in a world-writable directory: started"
else
	grep -q "writable by others" "$T/ww2.log" && ok "state directory writable by others: refused" ||
		fail "world-writable state directory: $(cat "$T/ww2.log")"
fi
if [ "$(id -u)" = 0 ]; then
	mkdir -m 0755 "$T/squat" "$T/squat-state"
	chown 65534:65534 "$T/squat" "$T/squat-state"
	if timeout 10 "$B/toggled" --socket "$T/squat/s.sock" --state-dir "$T/state9" 2>"$T/squat.log"; then
		fail "socket in a directory of uid 65534: started"
	else
		grep -q "belongs to uid 65534" "$T/squat.log" && ok "socket directory of another uid: refused" ||
			fail "squatted socket directory: $(cat "$T/squat.log")"
	fi
	if timeout 10 "$B/toggled" --socket "$T/s9.sock" --state-dir "$T/squat-state" 2>"$T/squat2.log"; then
		fail "state in a directory of uid 65534: started"
	else
		grep -q "belongs to uid 65534" "$T/squat2.log" && ok "state directory of another uid: refused" ||
			fail "squatted state directory: $(cat "$T/squat2.log")"
	fi
else
	echo "skip: directories of another uid (needs root to chown to 65534)"
fi

# 10. Issue 11 item 12: a reload refuses what the first load refuses: a
#     directory, a NUL byte in a line (the old configuration is kept).
printf 'verbose = 0\n' >"$T/r.conf"
"$B/toggled" --socket "$T/r.sock" --state-dir "$T/state10" -c "$T/r.conf" 2>"$T/r.log" &
PID=$!
wait_for "$T/r.log" "listening on" || fail "daemon for the reload test did not start"
rm "$T/r.conf"
mkdir "$T/r.conf"
kill -HUP "$PID"
wait_for "$T/r.log" "keeping the old configuration" && grep -q "not a regular file" "$T/r.log" &&
	ok "SIGHUP: a directory is refused" || fail "SIGHUP with a directory: $(tail -n 2 "$T/r.log")"
rmdir "$T/r.conf"
printf '\000max_peers = 0\nverbose = 0\n' >"$T/r.conf"
kill -HUP "$PID"
i=0
until [ "$(grep -c "keeping the old configuration" "$T/r.log")" -ge 2 ]; do
	i=$((i + 1)); [ $i -lt 100 ] || break; sleep 0.05
done
grep -q "NUL byte" "$T/r.log" && ok "SIGHUP: a NUL-led line is refused" ||
	fail "SIGHUP with a NUL-led line: $(tail -n 2 "$T/r.log")"
if timeout 10 "$B/toggled" --socket "$T/r2.sock" --state-dir "$T/state10b" -c "$T/r.conf" 2>"$T/r2.log"; then
	fail "started with a NUL-led line"
else
	grep -q "NUL byte" "$T/r2.log" && ok "start: a NUL-led line is refused" || fail "start with NUL: $(cat "$T/r2.log")"
fi
ctl "$T/r.sock" && ok "still serving after the refused reloads" || fail "not serving after refused reloads"
kill -TERM "$PID"
wait "$PID" || fail "SIGTERM exit status $?"
PID=""

[ "$fails" -eq 0 ] || { echo "run.sh: $fails failures"; exit 1; }
echo "run.sh: daemon process tests passed"
