"""toggled --metrics under hostile clients and hostile paths (issue 30 items 4
and 5): the slow clients that took /metrics away (16 connections trickling
bytes, 2,000 idle connections, a scrape flood), each asserting that scrapes
are still answered within SCRAPE_BOUND_S, over TCP and the Unix socket; and
every refusal of --metrics PATH (not a socket of ours, a world-writable
directory, the RPC socket's path), each a clear message and a non-zero exit
at start with whatever was at PATH left in place."""

import errno
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from test_metrics import CACHE_S, TOGGLECTL, TOGGLED, Env

# What a scrape may take while the clients below do their worst.  A quiet
# scrape takes milliseconds (ASan build); the old code served none of them.
SCRAPE_BOUND_S = 2.0
IDLE_CONNECTIONS = 2000
SLOWLORIS = 16
LIMIT = 32  # metrics.c METRICS_CONNECTIONS
RATE, BURST = 10, 10  # metrics.c METRICS_RATE, METRICS_BURST: answers a second


def connect(address, timeout):
    """A connection within timeout, as a blocking client gets one: a Unix
    socket's full backlog (EAGAIN to a socket with a timeout) is waited out."""
    end = time.monotonic() + timeout
    if address.startswith("/"):
        fam, target = socket.AF_UNIX, address
    else:
        host, port = address.rsplit(":", 1)
        fam, target = socket.AF_INET, (host, int(port))
    while True:
        s = socket.socket(fam)
        s.settimeout(max(0.001, end - time.monotonic()))
        try:
            s.connect(target)
            return s
        except BlockingIOError:
            s.close()
            if time.monotonic() >= end:
                raise TimeoutError("the backlog stayed full for %.1f s" % timeout)
            time.sleep(0.001)
        except OSError:
            s.close()
            raise


def scrape(address, timeout=SCRAPE_BOUND_S):
    """One GET /metrics on a connection of its own, all of it within timeout:
    (status, body); raises on a timeout or a closed connection."""
    end = time.monotonic() + timeout
    s = connect(address, timeout)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete answer within %.1f s" % timeout)
            s.settimeout(left)
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head:
        raise ConnectionError("closed without an answer")
    return int(head.split(b" ", 2)[1]), body


def scrapes_answered(address, n, gap=0.05):
    """n scrapes in a row, each bounded; the failures as text (empty: all 200)."""
    bad = []
    for i in range(n):
        t0 = time.monotonic()
        try:
            status, _ = scrape(address)
            if status != 200:
                bad.append("scrape %d: status %d" % (i, status))
        except (OSError, ValueError) as e:
            bad.append("scrape %d: %s after %.2f s" % (i, type(e).__name__ + " " + str(e),
                                                       time.monotonic() - t0))
        time.sleep(gap)
    return bad


def rpc_answers(sock):
    r = subprocess.run([TOGGLECTL, "-s", sock, "status"], capture_output=True, timeout=30)
    return r.returncode == 0


@pytest.fixture(params=["127.0.0.1:0", "DIR/metrics.sock"], ids=["tcp", "unix"])
def env(request):
    e = Env(request.param)
    try:
        yield e
    finally:
        e.stop()


class Trickler:
    """Connections that send a request one byte at a time, never finishing it
    (slowloris): a byte per connection every `every` seconds, which keeps an
    inactivity timeout from ever firing.  reconnect: open a new one when the
    daemon closes one (an attacker that does not give up)."""

    REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 4096

    def __init__(self, address, n, every=0.2, reconnect=False):
        self.address, self.every, self.reconnect = address, every, reconnect
        self.stop = threading.Event()
        self.conns = []
        self.cut = 0  # connections the daemon closed on us
        for i in range(n):
            try:
                self.conns.append([connect(self.address, 2), 0])
            except OSError as e:
                self.close()
                raise AssertionError("trickler %d of %d could not connect: %s" % (i, n, e))
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            for c in self.conns:
                try:
                    c[0].send(self.REQUEST[c[1] % len(self.REQUEST):][:1])
                    c[1] += 1
                except OSError:
                    self.cut += 1
                    c[0].close()
                    c[0], c[1] = None, 0
                    if self.reconnect:
                        try:
                            c[0] = connect(self.address, 2)
                        except OSError:
                            pass
            self.conns = [c for c in self.conns if c[0] is not None]
            self.stop.wait(self.every)

    def close(self):
        self.stop.set()
        if hasattr(self, "thread"):
            self.thread.join(10)
        for c in self.conns:
            if c[0] is not None:
                c[0].close()


def test_slowloris(env):
    """Issue 30: 16 connections trickling bytes served 0 of 10 scrapes."""
    t = Trickler(env.address, SLOWLORIS)
    try:
        time.sleep(0.5)  # every trickler connected and sending
        bad = scrapes_answered(env.address, 10)
    finally:
        t.close()
    assert not bad, "scrapes under %d tricklers: %s" % (SLOWLORIS, bad)


def test_slowloris_more_than_the_limit(env):
    """Any number of tricklers that reconnect when cut: the oldest give way."""
    t = Trickler(env.address, 100, reconnect=True)
    try:
        time.sleep(0.5)
        bad = scrapes_answered(env.address, 10)
    finally:
        t.close()
    assert not bad, "scrapes under 100 reconnecting tricklers: %s" % bad
    m = env.scrape()
    assert m[("graphtoggle_metrics_connections_dropped_total", (("reason", "evicted"),))] >= 100 - LIMIT


def open_idle(address, n, within_s=5):
    """n connections that send nothing, opened as fast as the daemon takes
    them (non-blocking connects, retried while a Unix socket's backlog is
    full; TCP's left to complete): (sockets, how many completed)."""
    if address.startswith("/"):
        fam, target = socket.AF_UNIX, address
    else:
        host, port = address.rsplit(":", 1)
        fam, target = socket.AF_INET, (host, int(port))
    socks, end = [], time.monotonic() + within_s
    while len(socks) < n and time.monotonic() < end:
        s = socket.socket(fam)
        s.setblocking(False)
        rc = s.connect_ex(target)
        if rc in (0, errno.EINPROGRESS):
            socks.append(s)
        else:  # EAGAIN: a Unix socket's backlog is full
            s.close()
            time.sleep(0.001)
    # Wait for the connects in progress (TCP) to complete, or the deadline.
    poll = select.poll()
    pending = {s.fileno(): s for s in socks}
    for fd in pending:
        poll.register(fd, select.POLLOUT)
    while pending and time.monotonic() < end:
        for fd, _ in poll.poll(max(1, int((end - time.monotonic()) * 1e3))):
            poll.unregister(fd)
            del pending[fd]
    return socks, len(socks) - len(pending)


def test_idle_connections(env):
    """Issue 30: 2,000 idle connections served 0 of 5 scrapes while held and
    for 10 s after."""
    socks, connected = open_idle(env.address, IDLE_CONNECTIONS)
    try:
        held = scrapes_answered(env.address, 5)
    finally:
        for s in socks:
            s.close()
    after = scrapes_answered(env.address, 5)
    assert not held and not after, "%d of %d idle connections made; while held: %s; after: %s" % (
        connected, IDLE_CONNECTIONS, held, after)
    assert connected == IDLE_CONNECTIONS, "only %d idle connections made" % connected


def test_scrape_flood(env):
    """Issue 30: a scrape flood halved the daemon's write throughput.  Every
    scrape of a flood is answered, at the pace (the flood waits instead of
    spinning), the text rendered at most once per cache interval, and the
    RPC socket answers meanwhile."""
    stop = threading.Event()
    bodies, errors = [], []

    def flood():
        while not stop.is_set():
            try:
                status, body = scrape(env.address, 10)
                bodies.append(body) if status == 200 else errors.append(status)
            except OSError as e:
                errors.append(str(e))

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        bad = scrapes_answered(env.address, 5, gap=0.2)
        rpc = rpc_answers(env.sock)
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    seconds = time.monotonic() - t0
    assert not bad, "scrapes during the flood: %s" % bad
    assert rpc, "the RPC socket did not answer during the flood"
    assert not errors, "flood scrapes refused: %s" % errors[:5]
    answered = len(bodies) + 5
    assert BURST < answered <= RATE * seconds + BURST + 2, \
        "%d scrapes answered in %.1f s: the pace is %d a second" % (answered, seconds, RATE)
    renders = len(set(bodies))
    assert renders <= seconds / CACHE_S + 5, \
        "%d scrapes in %.1f s rendered %d times (cache %.0f ms)" % (
            len(bodies), seconds, renders, CACHE_S * 1e3)


class Flood:
    """n threads scraping back to back, each on a new connection."""

    def __init__(self, address, n):
        self.address = address
        self.stop = threading.Event()
        self.answered = self.failed = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                ok = scrape(self.address, 10)[0] == 200
            except OSError:
                ok = False
            with self.lock:
                if ok:
                    self.answered += 1
                else:
                    self.failed += 1

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(15)


def test_flood_past_the_limit(env):
    """More back-to-back scrapers than places (48 for 32), each trying again
    at once: answered at the pace, newcomers refused rather than each one
    closing a scrape about to be answered (which would answer none); the RPC
    socket answers; /metrics answers as soon as the flood stops; and toggled
    stops cleanly under the flood (the scrapes waiting their turn are resumed
    to be closed: libmicrohttpd stops no daemon with suspended connections)."""
    f = Flood(env.address, 48)
    try:
        time.sleep(1.0)
        a0, t0 = f.answered, time.monotonic()
        time.sleep(2.0)
        rate = (f.answered - a0) / (time.monotonic() - t0)
        rpc = rpc_answers(env.sock)
    finally:
        f.close()
    assert rpc, "the RPC socket did not answer during the flood"
    assert RATE / 2 <= rate <= RATE * 1.5, "answered %.1f a second under the flood" % rate
    assert f.failed > 0, "48 scrapers, none refused: the limit did not hold"
    bad = scrapes_answered(env.address, 5)
    assert not bad, "after the flood: %s" % bad
    m = env.scrape()
    assert m[("graphtoggle_metrics_connections_dropped_total", (("reason", "refused"),))] > 0
    # Stopped under the flood, scrapes waiting their turn.
    f = Flood(env.address, 48)
    try:
        time.sleep(1.0)
        env.proc.send_signal(signal.SIGTERM)
        rc = env.proc.wait(30)
    finally:
        f.close()
    assert rc == 0, "toggled exited %d under the flood:\n%s" % (rc, open(env.logpath).read())
    env.start()  # for the fixture's stop


def test_cached_between_scrapes(env):
    """Two scrapes within the cache interval get the same text; one after it
    a new one (uptime_seconds moved)."""
    _, a = scrape(env.address)
    _, b = scrape(env.address)
    time.sleep(CACHE_S + 0.02)
    _, c = scrape(env.address)
    assert a == b
    assert c != a


# ---- --metrics PATH refusals ----


class Dirs:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="graphtoggle-metrics.")
        os.chmod(self.dir, 0o700)
        self.sock = os.path.join(self.dir, "toggled.sock")
        self.state = os.path.join(self.dir, "state")

    def start(self, metrics, *extra):
        return subprocess.Popen([TOGGLED, "--socket", self.sock, "--state-dir", self.state,
                                 "--metrics", metrics] + list(extra),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def refused(self, metrics, *extra):
        """toggled must exit non-zero at start: its output."""
        p = self.start(metrics, *extra)
        end = time.monotonic() + 15
        while p.poll() is None and time.monotonic() < end:
            if os.path.exists(self.sock) and rpc_answers(self.sock):
                time.sleep(0.5)  # up: the metrics start right after the RPC socket
                if p.poll() is None:
                    break
            time.sleep(0.05)
        if p.poll() is None:
            alive = rpc_answers(self.sock)
            p.terminate()
            out, _ = p.communicate(timeout=15)
            raise AssertionError("toggled started with --metrics %s (RPC socket answering: %s):\n%s"
                                 % (metrics, alive, out))
        out, _ = p.communicate(timeout=15)
        assert p.returncode != 0, out
        assert not os.path.exists(self.sock) or not rpc_answers(self.sock)
        return out

    def served(self, metrics):
        """toggled starts and serves /metrics on metrics: stopped again."""
        p = self.start(metrics)
        try:
            end = time.monotonic() + 15
            while time.monotonic() < end:
                if p.poll() is not None:
                    raise AssertionError("toggled exited: " + p.stdout.read())
                if os.path.exists(metrics) and rpc_answers(self.sock):
                    break
                time.sleep(0.05)
            status, _ = scrape(metrics)
            assert status == 200
        finally:
            p.terminate()
            out, _ = p.communicate(timeout=30)
        assert p.returncode == 0, out
        return out


@pytest.fixture
def dirs():
    d = Dirs()
    yield d
    shutil.rmtree(d.dir, ignore_errors=True)


def test_path_regular_file_kept(dirs):
    """Issue 30: --metrics PATH deleted whatever file was at PATH."""
    path = os.path.join(dirs.dir, "precious")
    with open(path, "w") as f:
        f.write("keep me\n")
    out = dirs.refused(path)
    assert "not a socket" in out, out
    assert open(path).read() == "keep me\n"


def test_path_symlink_kept(dirs):
    target = os.path.join(dirs.dir, "target")
    open(target, "w").close()
    path = os.path.join(dirs.dir, "link.sock")
    os.symlink(target, path)
    out = dirs.refused(path)
    assert "symbolic link" in out, out
    assert os.path.islink(path) and os.path.exists(target)


def test_path_directory_kept(dirs):
    path = os.path.join(dirs.dir, "adir")
    os.mkdir(path)
    out = dirs.refused(path)
    assert "not a socket" in out, out
    assert os.path.isdir(path)


def stale_socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()  # the file stays, nobody listens


def test_path_live_socket_kept(dirs):
    """A socket something listens on (another daemon's metrics, any program's)."""
    path = os.path.join(dirs.dir, "busy.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(4)
    try:
        out = dirs.refused(path)
        assert "listening" in out, out
        c = socket.socket(socket.AF_UNIX)
        c.connect(path)  # still that program's
        c.close()
    finally:
        s.close()


def test_path_stale_socket_of_ours_replaced(dirs):
    path = os.path.join(dirs.dir, "metrics.sock")
    stale_socket(path)
    out = dirs.served(path)
    assert "stale" in out, out


def skip_unless_root(what):
    if os.geteuid() == 0:
        return
    if os.environ.get("TG_REQUIRE_ROOT_TESTS") == "1":
        pytest.fail("not skipped (TG_REQUIRE_ROOT_TESTS=1): " + what)
    log = os.environ.get("TG_SKIP_LOG")
    if log:
        with open(log, "a") as f:
            f.write("tests/metrics %s: needs root\n" % what)
    pytest.skip(what + ": needs root")


def test_path_socket_of_another_user_kept(dirs):
    skip_unless_root("a socket of another uid")
    path = os.path.join(dirs.dir, "theirs.sock")
    stale_socket(path)
    os.chown(path, 65534, 65534)
    out = dirs.refused(path)
    assert "uid 65534" in out, out
    assert os.path.exists(path)


def test_path_world_writable_directory(dirs):
    """Issue 30: --metrics accepted a world-writable directory (anyone could
    have replaced the socket)."""
    d = os.path.join(dirs.dir, "open")
    os.mkdir(d)
    os.chmod(d, 0o777)
    out = dirs.refused(os.path.join(d, "metrics.sock"))
    assert "writable by others" in out, out
    assert os.listdir(d) == []


def test_path_group_writable_directory(dirs):
    d = os.path.join(dirs.dir, "grp")
    os.mkdir(d)
    os.chmod(d, 0o770)
    out = dirs.refused(os.path.join(d, "metrics.sock"))
    assert "writable by its group" in out, out


def test_path_sticky_directory_served(dirs):
    """A sticky world-writable directory (/tmp) is one the RPC socket accepts too."""
    d = os.path.join(dirs.dir, "tmp")
    os.mkdir(d)
    os.chmod(d, 0o1777)
    dirs.served(os.path.join(d, "metrics.sock"))


def test_path_is_the_rpc_socket(dirs):
    """Issue 30: --metrics PATH equal to --socket: the RPC socket stopped
    answering without an error."""
    out = dirs.refused(dirs.sock)
    assert "RPC socket" in out, out


def test_path_is_the_rpc_socket_spelled_otherwise(dirs):
    other = os.path.join(dirs.dir, ".", "toggled.sock")
    out = dirs.refused(other)
    assert "RPC socket" in out, out


ACTIVATE = r"""
import os, socket, sys
path, binary, state, nominal = sys.argv[1:5]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(16)
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execve(binary, [binary, "--socket", nominal, "--state-dir", state, "--metrics", path], env)
"""


def test_path_is_the_activated_socket(dirs):
    """Socket activation: the RPC socket is the one systemd bound, wherever
    --socket points; --metrics on its path is refused too."""
    act = os.path.join(dirs.dir, "activated.sock")
    p = subprocess.Popen([sys.executable, "-c", ACTIVATE, act, TOGGLED, dirs.state, dirs.sock],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.terminate()
        out, _ = p.communicate(timeout=15)
        raise AssertionError("toggled started with --metrics on its activated socket:\n" + out)
    assert p.returncode != 0 and "RPC socket" in out, out
    assert os.path.exists(act)
