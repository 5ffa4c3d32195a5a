#!/bin/sh
# fresh-check.sh - prove the README's first steps on a fresh machine: a
# minimal Debian 12 root made with debootstrap (no make, no compiler), the
# CUDA toolkit bind-mounted read-only at /usr/local/cuda as CI has it, the
# repository's HEAD copied in with git archive, then, inside the root, what
# the README says: scripts/deps.sh, make demo, make check.
#
# Usage (root: debootstrap, chroot and mount need it):
#   scripts/fresh-check.sh [--keep] [--plain-chroot]
# Environment:
#   MIRROR     Debian mirror (default http://deb.debian.org/debian)
#   CUDA_HOME  the toolkit to bind-mount (default /usr/local/cuda)
#   FRESH_DIR  where to make the root (default: a new /var/tmp/tg-fresh.XXXXXX)
#   FRESH_TARBALL  a debootstrap tarball: reused when it exists, else written
#              after the first debootstrap (saves the download on reruns)
# --keep leaves the root in place for a look afterwards (mounts are undone).
# --plain-chroot does not bind-mount the root onto itself: its / is then not
# a mount point, as in a chroot made by hand, and the tests that need a
# private mount namespace (check_daemon_durability's test_full_disk, cluster/run.sh 7)
# must skip, listed at the end of make check; the run fails if they do not.
set -eu
cd "$(dirname "$0")/.."
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
KEEP=0
PLAIN=0
for arg in "$@"; do
	case "$arg" in
	--keep) KEEP=1 ;;
	--plain-chroot) PLAIN=1 ;;
	*) echo "fresh-check: unknown option '$arg' (expected --keep, --plain-chroot)" >&2; exit 2 ;;
	esac
done

die() { echo "fresh-check: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null 2>&1 || die "needs debootstrap (apt-get install debootstrap)"
[ -x "$CUDA_HOME/bin/nvcc" ] || die "no CUDA toolkit at $CUDA_HOME (set CUDA_HOME)"
git rev-parse --verify -q HEAD >/dev/null || die "not in a git checkout"

ROOT=${FRESH_DIR:-$(mktemp -d /var/tmp/tg-fresh.XXXXXX)}
mkdir -p "$ROOT"
# mktemp made it 0700: the root's / must let the tests' other users in.
chmod 755 "$ROOT"
MOUNTS=""
cleanup() {
	# Undo the mounts, innermost last mounted first; remove the root only
	# when nothing is mounted under it any more.
	for m in $MOUNTS; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
	if [ "$KEEP" -eq 0 ]; then
		if grep -q " $ROOT/" /proc/mounts; then
			echo "fresh-check: something is still mounted under $ROOT; not removing it" >&2
		else
			rm -rf "$ROOT"
		fi
	fi
}
trap cleanup EXIT INT TERM
mnt() { # mnt TARGET MOUNT-ARGS...
	t=$1; shift
	mkdir -p "$t"
	mount "$@" "$t"
	MOUNTS="$t $MOUNTS"
}
now() { date +%s; }
t0=$(now)

echo "== debootstrap: Debian 12 (bookworm), minbase, from $MIRROR into $ROOT"
if [ -n "${FRESH_TARBALL:-}" ] && [ -s "$FRESH_TARBALL" ]; then
	debootstrap --variant=minbase --unpack-tarball="$(realpath "$FRESH_TARBALL")" \
		bookworm "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
		{ tail -n 20 "$ROOT.debootstrap.log"; die "debootstrap failed"; }
else
	if [ -n "${FRESH_TARBALL:-}" ]; then
		debootstrap --variant=minbase --make-tarball="$(realpath -m "$FRESH_TARBALL")" \
			bookworm "$ROOT.tarball-work" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
			{ tail -n 20 "$ROOT.debootstrap.log"; die "debootstrap --make-tarball failed"; }
		rm -rf "$ROOT.tarball-work"
		debootstrap --variant=minbase --unpack-tarball="$(realpath "$FRESH_TARBALL")" \
			bookworm "$ROOT" "$MIRROR" >>"$ROOT.debootstrap.log" 2>&1 ||
			{ tail -n 20 "$ROOT.debootstrap.log"; die "debootstrap failed"; }
	else
		debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
			{ tail -n 20 "$ROOT.debootstrap.log"; die "debootstrap failed"; }
	fi
fi
rm -f "$ROOT.debootstrap.log"
t1=$(now)
echo "debootstrap: $((t1 - t0)) s"

# Only the mirror is reachable: apt in the root uses the host's resolver.
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
echo "deb $MIRROR bookworm main" >"$ROOT/etc/apt/sources.list"
# A real machine's / is a mount point; the tests make it private in their
# own mount namespace (state on a small tmpfs), which needs that.  Without
# it (--plain-chroot) they skip.
[ "$PLAIN" -eq 1 ] || mnt "$ROOT" --bind "$ROOT"
mnt "$ROOT/proc" -t proc proc
mnt "$ROOT/dev/pts" -t devpts -o newinstance,ptmxmode=0666 devpts
mnt "$ROOT/dev/shm" -t tmpfs -o mode=1777 tmpfs
# The toolkit as CI has it: a directory at /usr/local/cuda, read-only here.
mnt "$ROOT/usr/local/cuda" --bind "$(realpath "$CUDA_HOME")"
mount -o remount,bind,ro "$ROOT/usr/local/cuda"

echo "== the repository: git archive of HEAD ($(git rev-parse --short HEAD))"
mkdir -p "$ROOT/src/graphtoggle"
git archive --format=tar HEAD | tar -x -C "$ROOT/src/graphtoggle"

# Inside the root: prove it is bare, then follow the README.
cat >"$ROOT/src/fresh.sh" <<'IN'
set -eu
cd /src/graphtoggle
for tool in make gcc g++ cc1plus pkg-config; do
	if command -v "$tool" >/dev/null 2>&1; then echo "fresh: $tool already here: not a fresh root"; exit 1; fi
done
echo "fresh: no make, gcc, g++, pkg-config; CUDA at /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | tail -n 1))"
step() {
	echo "== \$ $*"
	s=$(date +%s)
	"$@"
	echo "== $*: ok, $(( $(date +%s) - s )) s"
}
step scripts/deps.sh
step make demo
step make check
if [ "${FRESH_PLAIN:-0}" = 1 ]; then
	# / is not a mount point here: these must have skipped, visibly.
	for t in test_full_disk "cluster/run.sh 7"; do
		grep -q "^$t" build/check-skipped.log ||
			{ echo "fresh: $t did not skip where / is not a mount point"; exit 1; }
	done
	echo "fresh: test_full_disk and cluster/run.sh 7 skipped (/ is not a mount point)"
fi
IN
echo "== chroot: scripts/deps.sh, make demo, make check"
if chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/root LANG=C.UTF-8 FRESH_PLAIN="$PLAIN" /bin/sh /src/fresh.sh; then rc=0; else rc=$?; fi
t2=$(now)
echo "fresh-check: chroot steps $((t2 - t1)) s, total $((t2 - t0)) s"
if [ "$rc" -eq 0 ]; then
	echo "fresh-check: OK: the README's commands pass on a fresh Debian 12 root with only CUDA added$([ "$PLAIN" -eq 0 ] || echo ' (plain chroot)')"
else
	echo "fresh-check: FAILED (exit $rc)"
fi
exit "$rc"
