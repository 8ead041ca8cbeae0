"""A client of leasehold agent (docs/agent.md), standard library only.

The agent holds leases for this process and sends, at every change, the
complete held set with a deadline per range on the host's CLOCK_MONOTONIC.
check() compares time.monotonic_ns() with that deadline: no round trip.
On Linux time.monotonic_ns() is clock_gettime(CLOCK_MONOTONIC), the clock
the agent reads (time.get_clock_info("monotonic").implementation says so;
Session refuses to start on any other).

    table = LeaseTable()
    session = Session("/run/user/1000/leasehold/agent-kv-1.sock", table,
                      on_event=my_hook)
    threading.Thread(target=session.run_forever, daemon=True).start()
    ...
    lease = table.check(key_of(name))      # before serving (step 1)
    if lease is None: refuse
    ... operate, storing lease with the state ...
    if not table.continuous(key_of(name), lease): refuse  # step 4
"""

import bisect
import http.client
import json
import socket
import sys
import threading
import time

KEY_SPACE = 1 << 64
MASK = KEY_SPACE - 1

# Bounds on what the agent may send: the same bounds the agent puts on the
# application (agent.MaxMessageBytes for a line), and one event's ranges.
MAX_EVENT_BYTES = 16 << 20
MAX_RANGES = 1 << 16

_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK


def _round(acc, lane):
    acc = (acc + lane * _P2) & MASK
    return (_rotl(acc, 31) * _P1) & MASK


def _merge(acc, v):
    acc ^= _round(0, v)
    return (acc * _P1 + _P4) & MASK


def xxh64(data, seed=0):
    """xxHash64 of bytes: keyspace.KeyOf's hash, so that a key maps to the
    range the Manager, the gateway and the Go libraries agree on."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & MASK
        v2 = (seed + _P2) & MASK
        v3 = seed
        v4 = (seed - _P1) & MASK
        while i + 32 <= n:
            v1 = _round(v1, int.from_bytes(data[i:i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8:i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16:i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24:i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & MASK
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i:i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * _P1) & MASK
        h = (_rotl(h, 23) * _P2 + _P3) & MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & MASK
        h = (_rotl(h, 11) * _P1) & MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & MASK
    h ^= h >> 29
    h = (h * _P3) & MASK
    h ^= h >> 32
    return h


def key_of(name):
    """The key of an application name, as keyspace.KeyOf computes it."""
    return xxh64(name.encode("utf-8"))


class Lease:
    """One held range: [start, end) (end 2**64 for the end of the key space),
    its lease number (epoch, lgn) and its CLOCK_MONOTONIC deadline in ns."""

    __slots__ = ("start", "end", "epoch", "lgn", "deadline_ns", "migrated")

    def __init__(self, d):
        r = d.get("range", {})
        self.start = int(r.get("start", 0))
        end = int(r.get("end", 0))
        self.end = end if end != 0 else KEY_SPACE
        self.epoch = int(d.get("epoch", 0))
        self.lgn = int(d.get("lgn", 0))
        self.deadline_ns = int(d.get("deadline_ns", 0))
        self.migrated = bool(d.get("migrated", False))
        if not (0 <= self.start < self.end <= KEY_SPACE):
            raise ValueError("agent sent an empty or reversed range")

    def num(self):
        return (self.epoch, self.lgn)

    def contains(self, key):
        return self.start <= key < self.end


class LeaseTable:
    """The held set as the agent last sent it. check() is the local lease
    check; ignore_deadline=True breaks it on purpose (the scenario's
    checker must catch an application that does that)."""

    def __init__(self, ignore_deadline=False):
        self._lock = threading.Lock()
        self._starts = []
        self._leases = []
        self.version = 0
        self.ignore_deadline = ignore_deadline

    def replace(self, leases, version):
        leases = sorted(leases, key=lambda l: l.start)
        with self._lock:
            self._leases = leases
            self._starts = [l.start for l in leases]
            self.version = version

    def clear(self):
        self.replace([], self.version)

    def check(self, key):
        """The lease covering key now, or None: a monotonic read and a
        binary search, no message (C§3.2 step 1)."""
        now = time.monotonic_ns()
        with self._lock:
            i = bisect.bisect_right(self._starts, key) - 1
            if i < 0:
                return None
            l = self._leases[i]
        if not l.contains(key):
            return None
        if now >= l.deadline_ns and not self.ignore_deadline:
            return None
        return l

    def continuous(self, key, lease):
        """Whether key is still covered by the same lease (step 4)."""
        cur = self.check(key)
        return cur is not None and cur.num() == lease.num()

    def leases(self):
        with self._lock:
            return list(self._leases)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("agent", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Session:
    """One session with the agent. run() reads events until the stream
    ends; each event replaces the table, then on_event(event, session) runs
    (to drop revoked state, take up migrated values, start handovers), and
    only then is the event acknowledged: the agent frees a revoked range at
    the Manager once an event built after the revocation is acknowledged.

    socket_path, or tcp=("127.0.0.1", port) with token for loopback TCP.
    apply_lock, if given, is held while the table is replaced and on_event
    runs: an application whose requests take it before touching their state
    then never sees a new lease before on_event has set its state up (the
    values a migrated grant brings)."""

    def __init__(self, socket_path=None, table=None, on_event=None, tcp=None, token=None, timeout=10.0,
                 apply_lock=None):
        if time.get_clock_info("monotonic").implementation != "clock_gettime(CLOCK_MONOTONIC)":
            raise RuntimeError("time.monotonic is not CLOCK_MONOTONIC here: the agent's deadlines do not apply")
        self.socket_path = socket_path
        self.tcp = tcp
        self.token = token
        self.table = table if table is not None else LeaseTable()
        self.on_event = on_event
        self.apply_lock = apply_lock if apply_lock is not None else threading.RLock()
        self.timeout = timeout
        self.session = ""
        self.owner = ""
        self._post_lock = threading.Lock()
        self._post_conn = None
        self._results = []
        self._load = {}
        self._out_lock = threading.Lock()
        self.closed = threading.Event()
        # drained is set once an event saying drained is acknowledged: the
        # agent then leaves, and the process may exit.
        self.drained = threading.Event()

    def _conn(self, timeout):
        if self.tcp:
            return http.client.HTTPConnection(self.tcp[0], self.tcp[1], timeout=timeout)
        return _UnixConnection(self.socket_path, timeout)

    def _headers(self):
        h = {"Content-Type": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h

    def post(self, path, body):
        data = json.dumps(body).encode()
        with self._post_lock:
            for attempt in (0, 1):
                if self._post_conn is None:
                    self._post_conn = self._conn(self.timeout)
                try:
                    self._post_conn.request("POST", path, data, self._headers())
                    resp = self._post_conn.getresponse()
                    out = resp.read(MAX_EVENT_BYTES)
                    if resp.status >= 300:
                        raise RuntimeError("agent: POST %s: %d %s" % (path, resp.status, out.decode(errors="replace").strip()))
                    return out
                except (OSError, http.client.HTTPException):
                    self._post_conn.close()
                    self._post_conn = None
                    if attempt:
                        raise

    def check_remote(self, key):
        """The agent's Check(key): one round trip. Returns the lease or None;
        the answer holds while the deadline has not passed and no later event
        was applied (docs/agent.md)."""
        r = json.loads(self.post("/v1/check", {"key": str(key)}))
        if not r.get("held"):
            return None
        l = Lease(r["lease"])
        if int(r.get("version", 0)) < self.table.version or time.monotonic_ns() >= l.deadline_ns:
            return None
        return l

    def handover_done(self, hid, ok):
        """Ends a handover: ok says the state reached the next holder and
        this process serves the range no more."""
        self.handovers_done([(hid, ok)])

    def handovers_done(self, results):
        with self._out_lock:
            self._results.extend({"id": str(hid), "ok": bool(ok)} for hid, ok in results)
        self._flush()

    def count(self, key, n=1):
        """Counts requests on key for the load reports (sent with acks)."""
        with self._out_lock:
            if len(self._load) < 1024 or key in self._load:
                self._load[key] = self._load.get(key, 0) + n

    def drain(self):
        self.post("/v1/session/" + self.session, {"drain": True})

    def _flush(self, applied=None):
        with self._out_lock:
            msg = {}
            if applied is not None:
                msg["applied"] = str(applied)
            if self._results:
                msg["handovers"], self._results = self._results, []
            if self._load:
                msg["load"] = [{"key": str(k), "count": str(n)} for k, n in self._load.items()]
                self._load = {}
        if msg and self.session:
            self.post("/v1/session/" + self.session, msg)

    def run(self):
        """Runs one session until its stream ends. The table keeps the last
        deadlines: they still hold until they pass, and then nothing does."""
        conn = self._conn(None)
        headers = self._headers()
        conn.request("GET", "/v1/session", headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            msg = resp.read(4096).decode(errors="replace").strip()
            conn.close()
            raise RuntimeError("agent: session refused: %d %s" % (resp.status, msg))
        try:
            while True:
                line = resp.readline(MAX_EVENT_BYTES + 1)
                if not line:
                    return
                if len(line) > MAX_EVENT_BYTES:
                    raise RuntimeError("agent: an event over %d bytes" % MAX_EVENT_BYTES)
                ev = json.loads(line)
                if ev.get("session"):
                    self.session, self.owner = ev["session"], ev.get("owner", "")
                held = ev.get("held", [])
                if len(held) > MAX_RANGES:
                    raise RuntimeError("agent: an event with %d ranges" % len(held))
                version = int(ev.get("version", 0))
                leases = [Lease(d) for d in held]
                with self.apply_lock:
                    self.table.replace(leases, version)
                    if self.on_event:
                        self.on_event(ev, self)
                self._flush(applied=version)
                if ev.get("drained"):
                    self.drained.set()
        finally:
            conn.close()
            self.closed.set()

    def run_forever(self, stop=None, retry=0.2):
        """Runs sessions one after another until stop is set: a new session
        is a new start (its grants carry new lease numbers)."""
        said = ""
        while stop is None or not stop.is_set():
            try:
                self.run()
                why = "the session's stream ended"
            except (OSError, http.client.HTTPException, RuntimeError, ValueError) as e:
                why = "session: %s" % e
            if why != said:  # once, not at every retry
                print("leasehold_agent: " + why, file=sys.stderr, flush=True)
                said = why
            self.session = ""
            time.sleep(retry)
