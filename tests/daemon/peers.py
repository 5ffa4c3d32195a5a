#!/usr/bin/env python3
"""peers.py - hostile and ordinary peers of toggled for tests/daemon/run.sh.

  peers.py limits SOCK        uid 65534 against max_peers_per_uid and the
                              operator reserve (run as root; see run.sh)
  peers.py emfile SOCK PID N  N connections to a daemon short of fds: each
                              must be served or refused with an error, never
                              left hanging; prints the daemon's CPU seconds
                              while they were held
  peers.py closed SOCK MODE   a connection that never says hello (MODE
                              nohello) or goes quiet after it (MODE idle)
                              must be closed by the daemon within 5 s
  peers.py flood SOCK PID N UID SECONDS CMD
                              the figures of docs/reliability.md: as UID
                              (root: 0) open N hello'd connections, hold
                              them SECONDS, run CMD (an operator's command)
                              meanwhile; print served/refused, the daemon's
                              CPU, fds, RSS and log growth before, during,
                              after
"""
import os
import socket
import struct
import sys
import time

HELLO = struct.pack(">I", 6) + bytes([0x08, 0x01, 0x52, 0x02, 0x08, 0x02])  # id 1, Hello{version 2}
TAG_HELLO_REPLY, TAG_ERROR = 0x5A, 0x62


def read_frame(s, timeout):
    """(tag, body) of the next frame, or None at end of file / timeout."""
    s.settimeout(timeout)
    buf = b""
    try:
        while len(buf) < 4:
            chunk = s.recv(4 - len(buf))
            if not chunk:
                return None
            buf += chunk
        n = struct.unpack(">I", buf)[0]
        body = b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            if not chunk:
                return None
            body += chunk
    except (socket.timeout, ConnectionResetError):
        return None
    i = 1  # skip field 1 (id): tag 0x08 then a varint
    while body[i] & 0x80:
        i += 1
    return body[i + 1], body


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def hello(path, timeout=5):
    """'ok' with the socket, or ('refused', message) / ('closed', None)."""
    s = connect(path)
    try:
        s.sendall(HELLO)
    except (BrokenPipeError, ConnectionResetError):
        pass
    r = read_frame(s, timeout)
    if r is None:
        s.close()
        return "closed", None
    if r[0] == TAG_HELLO_REPLY:
        return "ok", s
    s.close()
    return "refused", r[1]


def limits(path):
    """Child as uid 65534: phase 1 opens 12 (10 allowed per uid); phase 2,
    after the parent lowered max_peers, one more (into the reserve)."""
    rd, wr = os.pipe()
    back_rd, back_wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        os.close(back_wr)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        held, out = [], []
        for _ in range(12):
            what, x = hello(path)
            if what == "ok":
                held.append(x)
            out.append(what if what != "refused" else "refused:" + x.decode("latin-1", "replace"))
        os.write(wr, ("\n".join(out) + "\n.\n").encode())
        os.read(back_rd, 1)                      # the parent lowered max_peers
        what, x = hello(path)
        os.write(wr, (("refused:" + x.decode("latin-1", "replace")) if what == "refused" else what).encode() + b"\n.\n")
        os.read(back_rd, 1)                      # the parent is done
        os._exit(0)
    os.close(wr)
    os.close(back_rd)
    f = os.fdopen(rd)

    def block():
        lines = []
        for line in f:
            if line.strip() == ".":
                return lines
            lines.append(line.rstrip("\n"))
        return lines
    return pid, f, back_wr, block


def main():
    cmd = sys.argv[1]
    if cmd == "limits":
        path, ctl = sys.argv[2], sys.argv[3]  # ctl: a script run between the phases
        pid, f, back, block = limits(path)
        first = block()
        ok = sum(1 for x in first if x == "ok")
        per_uid = [x for x in first if x.startswith("refused:") and "max_peers_per_uid" in x]
        print("phase1 ok=%d refused_per_uid=%d" % (ok, len(per_uid)))
        rc = os.system(ctl + " phase1")
        print("phase1 root ctl rc=%d" % rc)
        os.write(back, b"x")
        second = block()
        print("phase2 nobody=%s" % ("reserved" if second and second[0].startswith("refused:") and "reserved" in second[0] else second))
        rc = os.system(ctl + " phase2")
        print("phase2 root ctl rc=%d" % rc)
        os.write(back, b"x")
        os.waitpid(pid, 0)
    elif cmd == "emfile":
        path, dpid, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

        def cpu():
            with open("/proc/%d/stat" % dpid) as st:
                fields = st.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        held, counts = [], {"ok": 0, "refused": 0, "closed": 0}
        for _ in range(n):
            what, x = hello(path)
            counts[what] += 1
            if what == "ok":
                held.append(x)
        c0, t0 = cpu(), time.time()
        time.sleep(2)
        c1, t1 = cpu(), time.time()
        print("served=%d refused=%d closed=%d cpu_while_held=%.2f/%.2fs" %
              (counts["ok"], counts["refused"], counts["closed"], c1 - c0, t1 - t0))
        for s in held:
            s.close()
    elif cmd == "flood":
        path, dpid, n, uid, secs, ctl = (sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                         int(sys.argv[5]), float(sys.argv[6]), sys.argv[7])

        def proc():
            with open("/proc/%d/stat" % dpid) as st:
                f = st.read().rsplit(")", 1)[1].split()
            cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
            fds = len(os.listdir("/proc/%d/fd" % dpid))
            with open("/proc/%d/status" % dpid) as st:
                rss = [l.split()[1] for l in st if l.startswith("VmRSS:")][0]
            return cpu, fds, int(rss)
        before = proc()
        rd, wr = os.pipe()
        go_rd, go_wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rd)
            os.close(go_wr)
            if uid:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            held, counts = [], {"ok": 0, "refused": 0, "closed": 0}
            for _ in range(n):
                try:
                    what, x = hello(path, 1)             # 1 s: no answer counts as closed
                except OSError:
                    what = "closed"
                counts[what] += 1
                if what == "ok":
                    held.append(x)
            os.write(wr, ("%d %d %d\n" % (counts["ok"], counts["refused"], counts["closed"])).encode())
            os.read(go_rd, 1)
            os._exit(0)
        os.close(wr)
        os.close(go_rd)
        line = os.fdopen(rd).readline().split()
        c0, t0 = proc()[0], time.time()
        during = proc()
        rc = os.system(ctl + " >/dev/null 2>&1")
        time.sleep(secs)
        c1, t1 = proc()[0], time.time()
        during = proc()
        os.write(go_wr, b"x")
        os.waitpid(pid, 0)
        time.sleep(1)
        after = proc()
        print("uid %d: %d connections: served %s, refused %s, closed without a word %s; "
              "operator command exit %d while held; daemon CPU %.2f s in %.1f s held; "
              "fds %d -> %d -> %d; RSS %d -> %d -> %d kB" %
              (uid, n, line[0], line[1], line[2], os.WEXITSTATUS(rc), c1 - c0, t1 - t0,
               before[1], during[1], after[1], before[2], during[2], after[2]))
    elif cmd == "closed":
        path, mode = sys.argv[2], sys.argv[3]
        s = connect(path)
        if mode == "idle":
            s.sendall(HELLO)
            r = read_frame(s, 5)
            if r is None or r[0] != TAG_HELLO_REPLY:
                print("no hello reply")
                return 1
        t0 = time.time()
        s.settimeout(5)
        try:
            while s.recv(4096):                  # anything it says before closing is fine
                pass
            print("closed after %.1fs" % (time.time() - t0))
        except socket.timeout:
            print("still open after 5 s")
        except ConnectionResetError:
            print("closed after %.1fs" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
