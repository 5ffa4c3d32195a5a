"""Client: one connection to toggled, every request of the protocol as a method
(docs/protocol.md), watch as an iterator, plan helpers.

One request at a time per Client (a lock makes concurrent calls wait); use one
Client per thread for parallel requests.  Replies are matched by id; events
that arrive on a watching connection are handed to its Watch.
"""

import os
import socket
import struct
import threading
import time

from . import errors
from ._wire import MAX_FRAME, PROTOCOL_VERSION, Reader, encode, pb

MAX_PLAN_ENTRIES = 64  # TGP_MAX_PLAN_ENTRIES: entries of one SubmitPlanRequest
MAX_WAIT_MS = 600000   # TGP_MAX_WAIT_MS
MAX_ALIGN_MARGIN = 1000000  # TGP_MAX_ALIGN_MARGIN
ALIGN_ACK_S = 5         # TD_ALIGN_ACK_MS: how long an aligned reply waits without wait
MAX_PLAN_AFTER = 1 << 40  # TGP_MAX_PLAN_AFTER: the largest relative step "+N"

# Who may listen at the socket: peer_trust.h's rule, variable and messages
# (togglectl and libtoggle apply the same before sending a byte).
TRUST_ENV = "TOGGLE_DAEMON_UID"  # TGP_TRUST_ENV
TRUST_ENV_MAX = 255              # TGP_TRUST_ENV_MAX: bytes of its value
TRUST_MAX_UIDS = 16              # TGP_TRUST_MAX_UIDS
_UCRED = struct.Struct("iII")    # struct ucred: pid_t pid, uid_t uid, gid_t gid

# Requests that change state: a reply that never came leaves unknown
# whether toggled applied them.
_MUTATING = ("set_enabled", "submit_plan", "clear_plan", "record")
MAX_RECORD_STEPS = 1000000000  # TGP_MAX_RECORD_STEPS
RECORD_CHUNK = 256 << 10       # TGP_RECORD_CHUNK: RecordData.data bytes at most
MAX_RECORD = 1 << 32           # bytes of one record this client reassembles (togglectl's bound)

_OPS = {"replace": pb.SET_OP_REPLACE, "add": pb.SET_OP_ADD, "remove": pb.SET_OP_REMOVE}

EVENT_NAMES = {
    pb.EVENT_KIND_AGENT_JOINED: "joined",
    pb.EVENT_KIND_AGENT_LEFT: "left",
    pb.EVENT_KIND_SET_APPLIED: "set_applied",
    pb.EVENT_KIND_PLAN_REJECTED: "plan_rejected",
    pb.EVENT_KIND_ANOMALY: "anomaly",
}


def default_socket_path():
    """Where toggled listens by default (tgp_default_socket_path's rule)."""
    env = os.environ.get("TOGGLE_SOCKET")
    if env:
        return env
    if os.geteuid() == 0:
        return "/run/toggle/toggled.sock"
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run:
        return os.path.join(run, "toggle", "toggled.sock")
    return "/tmp/toggle-%d/toggled.sock" % os.geteuid()


def selector(target=None, *, agent_id=None, pid=None, group=None):
    """A Selector: None (all agents), an int (agent id), a dict with one of
    agent_id / pid / group, a Selector, or the keyword arguments."""
    if isinstance(target, pb.Selector):
        return target
    if isinstance(target, dict):
        return selector(**target)
    if isinstance(target, bool):
        raise TypeError("target: an agent id, a dict or a Selector, not a bool")
    if isinstance(target, int):
        agent_id = target
    elif target is not None:
        raise TypeError("target: an agent id, a dict or a Selector, not %r" % (target,))
    given = [k for k, v in (("agent_id", agent_id), ("pid", pid), ("group", group)) if v is not None]
    if len(given) > 1:
        raise ValueError("a selector names agents one way: got %s" % ", ".join(given))
    s = pb.Selector()
    if agent_id is not None:
        s.agent_id = agent_id
    elif pid is not None:
        s.pid = pid
    elif group is not None:
        s.group = group
    else:
        s.all = True
    return s


def trust_listed(value, uid):
    """Is uid in value ("uid[,uid...]", at most 16 decimal uids, no blanks,
    4294967295 excluded)?  1 listed, 0 not (an empty value is an unset one),
    -1 malformed (a malformed list trusts nobody).  tgp_trust_listed's rule."""
    if value is None:
        return 0
    raw = value.encode("utf-8", "surrogateescape")
    if not raw:
        return 0
    if len(raw) > TRUST_ENV_MAX:
        return -1
    parts = raw.split(b",")
    if len(parts) > TRUST_MAX_UIDS:
        return -1
    found = 0
    for part in parts:
        if not part or len(part) > 10 or any(ch not in b"0123456789" for ch in part):
            return -1
        v = int(part)
        if v >= 0xFFFFFFFF:
            return -1
        if v == uid:
            found = 1
    return found


def peer_check(sock, path):
    """Refuse a listener at path that is not root, our effective uid or a uid in
    $TOGGLE_DAEMON_UID (tgp_peer_trusted: the same rule and messages), before a
    byte is sent: another local user's listener (a pre-created /tmp/toggle-UID,
    a mistyped path) would otherwise answer for toggled.  PermissionDeniedError
    when refused, IOFailureError without credentials."""
    try:
        pid, uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                       _UCRED.size))
    except (OSError, struct.error) as e:
        raise errors._errors.error_for(
            -23, "cannot read the credentials of the listener at %s: %s" % (path, e)) from None
    me = os.geteuid()
    if uid == 0 or uid == me:
        return
    listed = trust_listed(os.environ.get(TRUST_ENV), uid)
    if listed == 1:
        return
    if listed < 0:
        why = ("%s is served by uid %u (pid %d), not root or uid %u, and %s is malformed "
               "(want uid[,uid], at most %d): refused" % (path, uid, pid, me, TRUST_ENV,
                                                           TRUST_MAX_UIDS))
    else:
        why = ("%s is served by uid %u (pid %d), not root, uid %u or %s: refused; if it is "
               "your daemon, set %s=%u" % (path, uid, pid, me, TRUST_ENV, TRUST_ENV, uid))
    raise errors._errors.error_for(-16, why)


def parse_step(step):
    """A plan step: an absolute step (int >= 0) -> (step, 0), or "+N" (1 <= N <=
    2**40, N steps after each target's current step) -> (-1, N); ValueError
    otherwise, with togglectl's words."""
    if isinstance(step, str):
        digits = step[1:]
        if not step.startswith("+") or not digits or any(ch not in "0123456789" for ch in digits) \
                or not 1 <= int(digits) <= MAX_PLAN_AFTER:
            raise ValueError('relative step %r must be "+N" with N from 1 to %d'
                             % (step[:32], MAX_PLAN_AFTER))
        return -1, int(digits)
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step, 0
    raise ValueError("plan step: an int >= 0 or '+N', not %r" % (step,))


class SetResult(dict):
    """What set_enabled() returns: {agent_id: control version} of every agent
    changed, and .skipped: the agents of a default (all-agents) target whose
    catalog refused the spec and that were left as they were, as toggled names
    them ("name (id N): reason")."""

    def __init__(self, versions, skipped, aligned_step=None):
        super().__init__(versions)
        self.skipped = list(skipped)
        # aligned=True: the step from which every target runs the set.
        self.aligned_step = aligned_step


class Event:
    """An Event from a watch: kind (a name, or "unknown(N)" for a kind newer than
    this schema), kind_number, agent_id, agent_name, version, step, message, unix_ms."""

    __slots__ = ("kind", "kind_number", "agent_id", "agent_name", "version", "step", "message",
                 "unix_ms")

    def __init__(self, ev):
        self.kind_number = int(ev.kind)
        self.kind = EVENT_NAMES.get(ev.kind, "unknown(%d)" % ev.kind)
        self.agent_id = ev.agent_id
        self.agent_name = ev.agent_name
        self.version = ev.version
        self.step = ev.step
        self.message = ev.message
        self.unix_ms = ev.unix_ms

    def __repr__(self):
        return "Event(%s agent=%d %s version=%d step=%d%s)" % (
            self.kind, self.agent_id, self.agent_name, self.version, self.step,
            " " + self.message if self.message else "")


class Client:
    """A connection to toggled.  Client(socket=None, timeout=10.0): connects and
    says hello (raises ConnectError, VersionMismatchError).  Use as a context
    manager or call close()."""

    def __init__(self, socket_path=None, timeout=10.0, name="graphtoggle.client"):
        self.path = socket_path or default_socket_path()
        self.timeout = timeout
        self._lock = threading.Lock()
        self._next_id = 0
        self._events = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(self.path)
        except OSError as e:
            self._sock.close()
            raise errors._errors.error_for(
                -22, "cannot connect to toggled at %s: %s (is it running? --socket, $TOGGLE_SOCKET)"
                % (self.path, e.strerror or e)) from None
        try:
            peer_check(self._sock, self.path)
        except BaseException:
            self._sock.close()
            self._sock = None
            raise
        self._reader = Reader(self._sock)
        try:
            rep = self._call("hello", pb.HelloRequest(protocol_version=PROTOCOL_VERSION,
                                                      min_protocol_version=PROTOCOL_VERSION,
                                                      client=name), "hello_reply")
        except BaseException:
            self.close()
            raise
        self.protocol_version = rep.protocol_version
        self.daemon_version = rep.daemon_version
        self.may_write = rep.may_write

    # ---- plumbing ----

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def fileno(self):
        return self._sock.fileno()

    def _broken(self, why):
        self.close()
        return errors.ClientProtocolError(why)

    def _call(self, field, msg, want, timeout=None):
        """Send Envelope{field: msg}; the reply's `want` message, or raise its Error."""
        with self._lock:
            if self._sock is None:
                raise errors._errors.error_for(-23, "the connection is closed")
            self._next_id += 1
            rid = self._next_id
            env = pb.Envelope(id=rid)
            getattr(env, field).CopyFrom(msg)
            try:
                self._sock.settimeout(self.timeout)
                self._sock.sendall(encode(env))
            except OSError as e:
                raise self._broken("sending to toggled: %s" % e) from None
            limit = self.timeout if timeout is None else timeout
            deadline = time.monotonic() + limit
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    if field in _MUTATING:
                        e = errors._errors.error_for(
                            -19, "no reply to %s within %.1f s: whether toggled accepted it is "
                            "unknown (list_agents() or togglectl agents shows what is in force)"
                            % (field, limit))
                        e.accepted = None
                    else:
                        e = errors._errors.error_for(
                            -19, "no reply to %s within %.1f s" % (field, limit))
                    raise e
                try:
                    rep = self._reader.next(left)
                except ConnectionError as e:
                    raise self._broken(str(e)) from None
                if rep is None:
                    continue
                body = rep.WhichOneof("body")
                if body == "event":
                    self._events.append(rep.event)
                    continue
                if rep.id != rid and not (rep.id == 0 and body == "error"):
                    continue  # a late reply to a request that timed out
                if body == "error":
                    e = errors.from_reply(rep.error)
                    if (field == "set_enabled" and (msg.wait_ms or msg.aligned)
                            and rep.error.code == pb.ERROR_CODE_TIMEDOUT):
                        # toggled answers a wait with TIMEDOUT only after it
                        # changed, saved and wrote the set (togglectl: exit 3)
                        e = errors._errors.error_for(
                            -19, "set accepted and saved, but not yet applied everywhere: %s; "
                            "it takes effect at their next step" % rep.error.message)
                        e.message, e.agents = e.detail, list(rep.error.agents)
                        e.agent_ids = list(rep.error.agent_ids)
                        e.accepted = True
                    raise e
                if body != want:
                    raise self._broken("toggled answered %s with %s, not %s"
                                       % (field, body or "an unknown message", want))
                return getattr(rep, want)

    def call(self, field, msg, want, timeout=None):
        """Any request: Envelope field name, message, the reply's field name.
        For requests this module has no method for (a newer daemon's)."""
        return self._call(field, msg, want, timeout)

    # ---- read-only requests ----

    def status(self):
        """The daemon's StatusReply."""
        return self._call("status", pb.StatusRequest(), "status_reply")

    def list_agents(self, target=None):
        """[AgentInfo] of the agents the target names (all by default)."""
        return list(self._call("list_agents", pb.ListAgentsRequest(target=selector(target)),
                               "agents").agents)

    def agent(self, name):
        """The AgentInfo of the agent called name; NoAgentError if none."""
        for a in self.list_agents():
            if a.name == name:
                return a
        raise errors._errors.error_for(-20, "no agent called %r" % name)

    def list_graphs(self, target=None):
        """ListGraphsReply: .graphs [GraphInfo], .truncated_agents [agent id]."""
        return self._call("list_graphs", pb.ListGraphsRequest(target=selector(target)), "graphs")

    def hooks(self, target=None):
        """[AgentHooks]: catalog, standing set and the current step's set."""
        return list(self._call("hooks", pb.HooksRequest(target=selector(target)),
                               "hooks_reply").agents)

    def show_plan(self, target=None):
        """{agent_id: [(step, spec)]} of plan entries not yet begun (absolute steps)."""
        rep = self._call("show_plan", pb.ShowPlanRequest(target=selector(target)), "plan")
        return {p.agent_id: [(e.step, e.spec) for e in p.entries] for p in rep.plans}

    # ---- changes ----

    def set_enabled(self, spec, op="replace", target=None, wait=None, aligned=False,
                    margin=None):
        """Change the standing set: op "replace", "add" or "remove".  aligned:
        every target switches at one step none has begun (the highest step
        their status lanes report plus margin steps, toggled's own margin when
        None), all targets or none; the result's .aligned_step names it, and
        the reply waits (5 s, or wait) until every target took it; a target
        that had begun that step refuses it: LateError naming it.  wait: seconds
        to wait until every target ran a replay with it; if one did not in time,
        TimedOutError with .accepted True (the set is saved and in force; the
        late agents, in .agents, run it from their next step).  A reply that
        never came: TimedOutError with .accepted None (unknown).  Returns a
        SetResult: {agent_id: control version}, and .skipped, the agents of the
        default target whose catalog refused the spec."""
        if op not in _OPS:
            raise ValueError("op: one of %s, not %r" % (", ".join(_OPS), op))
        req = pb.SetEnabledRequest(target=selector(target), op=_OPS[op], spec=spec)
        timeout = None
        if margin is not None and not aligned:
            raise ValueError("margin: only with aligned=True")
        if aligned:
            req.aligned = True
            if margin is not None:
                if (not isinstance(margin, int) or isinstance(margin, bool)
                        or not 1 <= margin <= MAX_ALIGN_MARGIN):
                    raise ValueError("margin: 1 to %d steps, not %r" % (MAX_ALIGN_MARGIN, margin))
                req.aligned_margin = margin
            timeout = self.timeout + (wait or ALIGN_ACK_S)
        if wait:
            ms = int(wait * 1000)
            if not 0 < ms <= MAX_WAIT_MS:
                raise ValueError("wait: up to %d s" % (MAX_WAIT_MS // 1000))
            req.wait_ms = ms
            timeout = self.timeout + wait
        rep = self._call("set_enabled", req, "set_enabled_reply", timeout)
        return SetResult({v.agent_id: v.version for v in rep.versions}, rep.skipped,
                         rep.aligned_step if aligned else None)

    def enable(self, spec, target=None, wait=None, aligned=False, margin=None):
        return self.set_enabled(spec, "add", target, wait, aligned, margin)

    def disable(self, spec, target=None, wait=None, aligned=False, margin=None):
        return self.set_enabled(spec, "remove", target, wait, aligned, margin)

    def set(self, spec, target=None, wait=None, aligned=False, margin=None):
        return self.set_enabled(spec, "replace", target, wait, aligned, margin)

    def submit_plan(self, entries, target=None):
        """One plan request, all or nothing (1 to 64 entries).  entries: a dict
        {step: spec} or (step, spec) pairs; step is an absolute step (int >= 0)
        or "+N", N steps after each target's current step, resolved by the
        daemon per agent (PlanEntry.after; NotSupportedError if this schema
        lacks it).  A plan has absolute steps or relative ones, not both, and
        names each step once (ValueError, as togglectl refuses them).  Returns
        the agents of the default target left out (their catalog refused a
        spec), as toggled names them."""
        items = list(entries.items()) if isinstance(entries, dict) else list(entries)
        if not 1 <= len(items) <= MAX_PLAN_ENTRIES:
            raise ValueError("a plan has 1 to %d entries, not %d" % (MAX_PLAN_ENTRIES, len(items)))
        req = pb.SubmitPlanRequest(target=selector(target))
        seen = {}
        for i, (step, spec) in enumerate(items):
            st, after = parse_step(step)
            if i > 0 and (after != 0) != (req.entries[0].after != 0):
                raise ValueError('plan entry %d: a plan has absolute steps (N) or relative ones '
                                 '("+N"), not both' % i)
            key = (st, after)
            if key in seen:
                raise ValueError("plan entry %d: step %s is already planned by entry %d"
                                 % (i, "+%d" % after if after else st, seen[key]))
            seen[key] = i
            if after and "after" not in pb.PlanEntry.DESCRIPTOR.fields_by_name:
                raise errors._errors.error_for(
                    -13, "relative step %r: this schema has no PlanEntry.after "
                    "(the daemon does not resolve relative steps)" % step)
            e = req.entries.add(spec=spec, step=st)
            if after:
                e.after = after
        return list(self._call("submit_plan", req, "ack").skipped)

    def plan(self, first, count, spec, target=None, relative=False, busy_timeout=None):
        """A plan for `count` consecutive steps from `first` (absolute), or from
        "+first" (relative=True).  spec: a spec for every step, or a function
        step -> spec (given the absolute step, or the offset when relative).
        Sent in requests of 64 entries (the agent's plan ring); a request the
        ring has no room for yet (BusyError) is retried until busy_timeout
        (default: the client's timeout).  Only each request is all or nothing.
        Returns the agents left out (submit_plan), each named once."""
        if count < 1:
            raise ValueError("count must be >= 1")
        spec_of = spec if callable(spec) else (lambda _s: spec)
        steps = [first + i for i in range(count)]
        limit = self.timeout if busy_timeout is None else busy_timeout
        skipped = []
        for k in range(0, count, MAX_PLAN_ENTRIES):
            chunk = steps[k:k + MAX_PLAN_ENTRIES]
            entries = [("+%d" % s if relative else s, spec_of(s)) for s in chunk]
            deadline = time.monotonic() + limit
            while True:
                try:
                    skipped += [a for a in self.submit_plan(entries, target) if a not in skipped]
                    break
                except errors._errors.BY_CODE[-21]:  # BusyError: ring full for now
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.005)
        return skipped

    def clear_plan(self, target=None):
        """Forget the plan entries not yet begun."""
        self._call("clear_plan", pb.ClearPlanRequest(target=selector(target)), "ack")

    # ---- events ----

    def watch(self, target=None):
        """A Watch on a connection of its own: iterate it for Events."""
        return Watch(self.path, target, self.timeout)

    # ---- recordings ----

    def record(self, spec, target=None, steps=None, as_=None):
        """A Subscription to the activations of the hooks of spec (docs/recording.md),
        on a connection of its own: iterate it for graphtoggle.recording.Record
        objects, (step, hook, tensor) with .agent, .graph, .batch, ...  toggled adds
        spec to the targets' standing sets for the recording and removes what it
        added when the subscription is closed (or steps steps of each agent were
        recorded).  as_: "numpy", "torch" or "bytes" (the default: numpy if there)."""
        return Subscription(self.path, spec, target, steps, as_, self.timeout)


class Watch:
    """Events of the agents a target names, from their own connection.

        with client.watch({"group": "decode"}) as w:
            for ev in w:                    # blocks; ev.kind == "set_applied", ...
                ...
            w.next(timeout=0.5)             # None on timeout

    A second watch on one connection would replace the first (protocol), so
    each Watch has its own.  close() ends it."""

    def __init__(self, socket_path, target=None, timeout=10.0):
        self._client = Client(socket_path, timeout, name="graphtoggle.client watch")
        try:
            self._client._call("watch", pb.WatchRequest(target=selector(target)), "ack")
        except BaseException:
            self._client.close()
            raise

    def next(self, timeout=None):
        """The next Event, or None after timeout seconds (None: wait for ever)."""
        c = self._client
        if c._events:
            return Event(c._events.pop(0))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                env = c._reader.next(left)
            except ConnectionError as e:
                raise c._broken(str(e)) from None
            if env is None:
                if deadline is not None:
                    return None
                continue
            if env.WhichOneof("body") == "event":
                return Event(env.event)
            # anything else (an unknown message of a newer daemon): skipped

    def __iter__(self):
        return self

    def __next__(self):
        return self.next(None)

    def close(self):
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Subscription:
    """The records of a recording, live (Client.record).

        with client.record("resid_post:12", target={"group": "decode"}) as sub:
            for r in sub:                     # blocks; ends when every agent's part did
                probe(r.step, r.tensor)
            sub.next(timeout=0.5)             # None on timeout

    .agents: {agent_id: RecordAgent} of the reply; .skipped: agents left out;
    .ended: {agent_id: (code, message)} of the parts that ended (code 0: steps done);
    .records, .bytes, .dropped (what the agents dropped, their ring full).  Every
    chunk is checked (order, size, dtype, shape) before it is kept: a bad one raises
    ClientProtocolError.  close() ends the recording."""

    def __init__(self, socket_path, spec, target=None, steps=None, as_=None, timeout=10.0):
        from .. import recording as _rec
        self._rec = _rec
        if steps is not None and not 0 < int(steps) <= MAX_RECORD_STEPS:
            raise errors._errors.error_for(-1, "steps must be 1 to %d" % MAX_RECORD_STEPS)
        self.as_ = as_
        self._client = Client(socket_path, timeout, name="graphtoggle.client record")
        try:
            rep = self._client._call("record", pb.RecordRequest(
                target=selector(target), spec=spec, steps=int(steps or 0)), "record_reply")
        except BaseException:
            self._client.close()
            raise
        self._id = self._client._next_id
        self.agents = {a.agent_id: a for a in rep.agents}
        self.skipped = list(rep.skipped)
        self.ended = {}
        self.records = self.bytes = self.dropped = 0
        self._open = {}   # agent_id -> [header message, bytearray]
        self._done = False

    def _bad(self, why):
        raise self._client._broken("recording: " + why)

    def _data(self, m):
        if m.agent_id not in self.agents or m.agent_id in self.ended:
            self._bad("a record of agent %d, not recorded" % m.agent_id)
        cur = self._open.get(m.agent_id)
        if m.offset == 0 and cur is None:
            if m.dtype not in self._rec.DTYPES or len(m.shape) > 8 or m.size > MAX_RECORD:
                self._bad("a record of dtype %r, %d dims, %d bytes" % (m.dtype, len(m.shape), m.size))
            n = self._rec.DTYPES[m.dtype][0]
            for d in m.shape:
                n *= d
            if n != m.size:
                self._bad("a record of %d bytes for shape %s of %s" % (m.size, list(m.shape), m.dtype))
            cur = self._open[m.agent_id] = [m, bytearray()]
        elif cur is None or m.offset != len(cur[1]) or m.seq != cur[0].seq or m.size != cur[0].size:
            self._bad("a chunk of agent %d out of order" % m.agent_id)
        if len(m.data) > RECORD_CHUNK or len(cur[1]) + len(m.data) > m.size or (
                not m.data and m.size):
            self._bad("a chunk of %d bytes where %d were left" % (len(m.data), m.size - len(cur[1])))
        cur[1] += m.data
        self.bytes += len(m.data)
        self.dropped = m.dropped
        if len(cur[1]) < m.size:
            return None
        del self._open[m.agent_id]
        h = cur[0]
        self.records += 1
        a = self.agents[h.agent_id]
        return self._rec._make(h.step, h.hook, self._rec.tensor_from_bytes(
            bytes(cur[1]), h.dtype, list(h.shape), self.as_), agent=a.name,
            agent_id=h.agent_id, graph=h.graph, name=h.hook, dtype=h.dtype,
            shape=tuple(h.shape), batch=h.shape[0] if h.shape else 1, seq=h.seq, file=None)

    def next(self, timeout=None):
        """The next Record, None after timeout seconds (None: wait), StopIteration
        once every agent's part ended."""
        if self._done:
            raise StopIteration
        c = self._client
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                env = c._reader.next(left)
            except ConnectionError as e:
                raise c._broken(str(e)) from None
            if env is None:
                if deadline is not None:
                    return None
                continue
            body = env.WhichOneof("body")
            if env.id != self._id:
                continue  # an event, a late reply
            if body == "record_data":
                r = self._data(env.record_data)
                if r is not None:
                    return r
            elif body == "record_end":
                m = env.record_end
                if m.agent_id == 0:
                    self._done = True
                    raise StopIteration
                self._open.pop(m.agent_id, None)
                self.ended[m.agent_id] = (m.code, m.message)
            elif body == "error":
                raise errors.from_reply(env.error)

    def __iter__(self):
        return self

    def __next__(self):
        return self.next(None)

    def close(self):
        """End the recording: toggled removes the hooks it added."""
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["Client", "Watch", "Subscription", "Event", "SetResult", "selector", "default_socket_path",
           "peer_check", "trust_listed", "MAX_PLAN_ENTRIES", "MAX_FRAME"]
