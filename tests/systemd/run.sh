#!/bin/bash
# run.sh - the installed systemd units allow what each documented mode needs
# and nothing more: make install into a staging directory, then
#   1. systemd-analyze verify of the units, alone and with each drop-in
#      (where systemd-analyze exists; skipped, listed, where not);
#   2. toggled run as the unit runs it (its ExecStart, the effective
#      RestrictAddressFamilies= of the unit and its drop-ins, applied by
#      restrict_af, a seccomp stand-in for systemd, which does not run here):
#      the plain socket and --metrics /path under the unit alone;
#      --metrics HOST:PORT and --etcd refused at start under the unit alone,
#      with the drop-in to install named; both served under their drop-in.
set -u
TL_NAME=systemd/run.sh
# shellcheck source=tests/lib.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
MAKE=${MAKE:-make}
RAF=$B/tests/restrict_af
CTL=$B/togglectl
tl_need "$RAF" "$CTL"
for t in etcd etcdctl python3; do
	command -v "$t" >/dev/null 2>&1 ||
		{ echo "$TL_NAME: FAIL: $t is not installed (scripts/deps.sh installs it)" >&2; exit 1; }
done
tl_tmpdir tgsd
PIDS=
EPID=
export ETCDCTL_API=3
cleanup() {
	for p in $PIDS $EPID; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	tl_rm_tmpdir
}
trap cleanup EXIT
ok() { CHECKS=$((CHECKS + 1)); echo "ok: $*"; }
bad() { CHECKS=$((CHECKS + 1)); fail "$*"; }

S=$T/stage
(cd "$TOP" && "$MAKE" --no-print-directory install B="$B" DESTDIR="$S" PREFIX=/usr) >"$T/install.log" 2>&1 ||
	{ cat "$T/install.log"; echo "FAIL: make install" >&2; exit 1; }
UNIT=$S/usr/lib/systemd/system/toggled.service
DROPINS=$S/usr/share/graphtoggle/systemd/toggled.service.d
for f in "$UNIT" "$DROPINS/metrics.conf" "$DROPINS/cluster.conf"; do
	[ -s "$f" ] || { echo "FAIL: make install did not install $f" >&2; exit 1; }
done

# ---- 1. systemd-analyze verify ---------------------------------------------
# Copies of the staged units naming the staged toggled (ExecStart= must
# exist; ExecReload='s /bin/kill is procps, in scripts/deps.sh), each drop-in
# in the toggled.service.d/ beside them; a warning (an unknown key, a family
# systemd does not know) fails as an error does.  Documentation='s man pages
# are looked up in the staged tree where man exists.
if ! command -v systemd-analyze >/dev/null 2>&1; then
	skip "systemd/run.sh 1 (systemd-analyze verify): no systemd-analyze here"
else
	man=--man=no
	command -v man >/dev/null 2>&1 && man=--man=yes
	V=$T/verify
	for d in "" metrics.conf cluster.conf; do
		rm -rf "$V" && mkdir -p "$V/toggled.service.d"
		for f in toggled.service toggled.socket ${d:+toggled.service.d/$d}; do
			src=$S/usr/lib/systemd/system/$f
			[ -n "$d" ] && [ "$f" = "toggled.service.d/$d" ] && src=$DROPINS/$d
			sed "s|/usr/bin/toggled|$S/usr/bin/toggled|" "$src" >"$V/$f"
		done
		if MANPATH=$S/usr/share/man systemd-analyze verify $man "$V/toggled.socket" \
			"$V/toggled.service" >"$T/verify.log" 2>&1 && [ ! -s "$T/verify.log" ]; then
			ok "systemd-analyze verify toggled.socket toggled.service${d:+ + $d}"
		else
			bad "systemd-analyze verify${d:+ with $d}: $(cat "$T/verify.log")"
		fi
	done
fi

# ---- 2. the unit's restrictions, mode by mode --------------------------------
# families FILE...: the RestrictAddressFamilies= in effect after FILEs, in
# order (systemd.exec(5): lists merge, "~" inverts, empty resets): "allow
# F..." or "deny F..." ("deny" alone: no restriction).
families() {
	awk '
	/^\[/ { svc = ($0 == "[Service]"); next }
	svc && /^RestrictAddressFamilies=/ {
		v = substr($0, index($0, "=") + 1)
		if (v == "") { mode = ""; delete set; next }
		inv = substr(v, 1, 1) == "~"; if (inv) v = substr(v, 2)
		n = split(v, f, /[ \t]+/)
		if (mode == "") { mode = inv ? "deny" : "allow"; for (i = 1; i <= n; i++) if (f[i] != "") set[f[i]] = 1; next }
		add = (mode == "allow") != inv
		for (i = 1; i <= n; i++) if (f[i] != "") { if (add) set[f[i]] = 1; else delete set[f[i]] }
	}
	END {
		if (mode == "") mode = "deny"
		s = mode; for (k in set) s = s " " k; print s
	}' "$@"
}
# execstart FILE...: the last ExecStart= in effect (an empty one resets).
execstart() {
	awk '/^ExecStart=/ { v = substr($0, 11) } END { print v }' "$@"
}
# run_unit NAME FILES -- EXTRA ARGS: toggled as that unit runs it, in the
# background (pid in UPID, log in $T/NAME.log), on a socket and state
# directory of its own, with the staged configuration file.
run_unit() {
	local name=$1; shift
	local files=()
	while [ "$1" != -- ]; do files+=("$1"); shift; done
	shift
	local fam cmd
	fam=$(families "${files[@]}")
	cmd=$(execstart "${files[@]}")
	cmd=${cmd//\/usr\/bin\/toggled/$S/usr/bin/toggled}
	cmd=${cmd//\/etc\/toggle\/toggled.conf/$T/toggled.conf}
	mkdir -p "$T/$name"
	echo "$name: RestrictAddressFamilies: $fam; $cmd $*" >"$T/$name.log"
	# shellcheck disable=SC2086
	"$RAF" $fam -- $cmd --socket "$T/$name/sock" --state-dir "$T/$name/state" "$@" \
		>>"$T/$name.log" 2>&1 &
	UPID=$!
	PIDS="$PIDS $UPID"
}
serving() { [ -S "$T/$1/sock" ] && "$CTL" -s "$T/$1/sock" status >/dev/null 2>&1; }
# refused NAME WHAT: toggled exited non-zero within 5 s, its log naming the fix.
refused() {
	local i
	for i in $(seq 100); do kill -0 "$UPID" 2>/dev/null || break; sleep 0.05; done
	if kill -0 "$UPID" 2>/dev/null; then
		bad "$2: toggled still running 5 s after start ($(tail -n 2 "$T/$1.log"))"
		kill "$UPID"
		return
	fi
	wait "$UPID"; local rc=$?
	if [ "$rc" -ne 0 ] && grep -q "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" "$T/$1.log" &&
		grep -q "$3" "$T/$1.log"; then
		ok "$2: refused at start, naming the fix ($(grep -o "needs AF_[A-Z0-9_ or]* sockets" "$T/$1.log"))"
	else
		bad "$2: exit $rc without the fix: $(tail -n 3 "$T/$1.log")"
	fi
}
stop_unit() { kill "$UPID" 2>/dev/null; wait "$UPID" 2>/dev/null; }
scrape_unix() {
	python3 - "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])
s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n"); d = b""
while (c := s.recv(65536)): d += c
sys.exit(0 if b" 200 " in d.split(b"\r\n")[0] and b"\ngraphtoggle_up 1" in d else 1)
PY
}
scrape_tcp() {
	python3 -c 'import sys, urllib.request as u
d = u.urlopen("http://%s/metrics" % sys.argv[1], timeout=5).read()
sys.exit(0 if b"\ngraphtoggle_up 1" in d else 1)' "$1"
}

if ! "$RAF" allow AF_UNIX -- true 2>"$T/raf.log"; then
	skip "systemd/run.sh 2 (the unit's restrictions): no seccomp filter here: $(cat "$T/raf.log")"
	[ "$FAILS" -eq 0 ] || exit 1
	exit 0
fi
cp "$S/etc/toggle/toggled.conf" "$T/toggled.conf"
echo "unit: RestrictAddressFamilies: $(families "$UNIT")"

run_unit plain "$UNIT" --
if wait_for 5 "toggled under the unit alone serves its socket" serving plain; then
	ok "the unit alone: the socket is served"
fi
stop_unit

run_unit munix "$UNIT" -- --metrics "$T/munix/metrics.sock"
wait_for 5 "toggled --metrics /path under the unit alone" serving munix &&
	if scrape_unix "$T/munix/metrics.sock"; then ok "the unit alone: --metrics /path is scraped"
	else bad "the unit alone: --metrics /path does not answer"; fi
stop_unit

run_unit mtcp0 "$UNIT" -- --metrics 127.0.0.1:0
refused mtcp0 "the unit alone, --metrics 127.0.0.1:0" "metrics.conf"

run_unit mtcp "$UNIT" "$DROPINS/metrics.conf" -- --metrics 127.0.0.1:0
if wait_for 5 "toggled --metrics TCP under the unit + metrics.conf" serving mtcp; then
	addr=$(sed -n 's/.*metrics on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$T/mtcp.log" | head -n 1)
	if [ -n "$addr" ] && scrape_tcp "$addr"; then ok "unit + metrics.conf: --metrics $addr is scraped"
	else bad "unit + metrics.conf: no scrape (address '$addr'): $(tail -n 3 "$T/mtcp.log")"; fi
fi
stop_unit

read -r CPORT PPORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
EURL=http://127.0.0.1:$CPORT
etcd --name t --data-dir "$T/etcd" --listen-client-urls "$EURL" --advertise-client-urls "$EURL" \
	--listen-peer-urls "http://127.0.0.1:$PPORT" --initial-advertise-peer-urls "http://127.0.0.1:$PPORT" \
	--initial-cluster "t=http://127.0.0.1:$PPORT" >>"$T/etcd.log" 2>&1 &
EPID=$!
etcd_up() { etcdctl --endpoints "$EURL" --command-timeout=1s endpoint health; }
wait_for 10 "etcd healthy" etcd_up || exit 1
# The cluster's settings in the configuration file, as cluster.conf's comment says.
printf 'etcd = %s\ncluster = tsd\nhost_id = h1\n' "$EURL" >>"$T/toggled.conf"

run_unit etcd0 "$UNIT" --
refused etcd0 "the unit alone, etcd in toggled.conf" "cluster.conf"

run_unit etcd1 "$UNIT" "$DROPINS/cluster.conf" --
published() { etcdctl --endpoints "$EURL" get --prefix /graphtoggle/tsd/status/h1 --keys-only | grep -q h1; }
if wait_for 10 "toggled under the unit + cluster.conf publishes its status in etcd" published; then
	ok "unit + cluster.conf: toggled reached etcd (its host status is published)"
fi
stop_unit

[ "$FAILS" -eq 0 ] || { echo "$TL_NAME: $FAILS failure(s) in $CHECKS checks"; exit 1; }
echo "$TL_NAME: $CHECKS checks passed"
