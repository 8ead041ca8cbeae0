#!/usr/bin/env python3
"""kv.py: examples/kv's key-value server rebuilt in Python on leasehold agent.

    python3 kv.py --listen 127.0.0.1:8001 --socket /tmp/kv-1/agent.sock [--id kv-1]
                  [--certs-dir DIR] [--serve-log FILE] [--drain-timeout S] [--ignore-deadline]

It keeps examples/kv's promise with the agent holding its leases: a key is
served by at most one server at any instant (the local deadline check,
before and after each operation); values move with a range on a planned
move (the handover); what is lost is reported lost (a fresh lease number
without the migrated mark, which the agent's Manager announces to Lookups).

HTTP, as examples/kv (so the gateway and its clients need no change):
    PUT /kv/{key}   body: the value (at most MAX_VALUE bytes) -> 204
    GET /kv/{key}   -> 200 with the value, or 404 "not found"
    GET /healthz    -> 200 "ok"
    POST /internal/migrate   values handed over by another server -> 204
A key this server does not hold is refused 421 with Leasehold-Refused:
not-owner; a key whose range is moving, 503 with Leasehold-Refused: moving.

On SIGTERM the server asks its agent to drain: every range moves to the
other servers with its values; then it exits.

--certs-dir DIR serves HTTPS with the Owner certificate of --id
(DIR/owner.ID.crt and .key, as leasehold cert makes them) and takes only
clients with a certificate of the group's CA (DIR/ca.crt), the gateway's
and the other servers'; handovers are sent the same way. Without it the
server speaks plaintext HTTP, for a gateway run with --insecure.

--serve-log appends one JSON line per request served, with the two
CLOCK_MONOTONIC readings between which the server believed it held the key
(the scenario's single-copy checker, internal/e2e, compares them across
servers). --ignore-deadline breaks the lease check on purpose.
"""

import argparse
import base64
import json
import os
import signal
import ssl
import sys
import threading
import time
import http.client
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from leasehold_agent import Lease, LeaseTable, Session, key_of

MAX_VALUE = 1 << 20  # bytes in one value
MAX_MIGRATE = 64 << 20  # bytes in one /internal/migrate body
MAX_KEY = 4096  # bytes in one key


class Store:
    """Values with the lease they were stored under; values handed to this
    server wait in pending until the range is granted to it migrated."""

    def __init__(self):
        # Reentrant: the session holds it while an event is applied (the
        # table replaced, migrated values taken up), and the hooks take it.
        self.lock = threading.RLock()
        self.items = {}  # name -> (value bytes, (epoch, lgn))
        self.pending = []  # (start, end, expires_mono_ns, {name: value})
        # Ranges being handed over: (start, end, epoch, lgn) -> "copying"
        # (writes refused) or "handed" (nothing served). A handover may be
        # of a piece of a held lease.
        self.moving = {}

    def drop_outside(self, leases):
        """Drops values no held lease covers under their own number: soft
        state that is lost when its lease is (C§3.2 step 2, done eagerly)."""
        with self.lock:
            keep = {}
            for name, (v, num) in self.items.items():
                k = key_of(name)
                if any(l.contains(k) and l.num() == num for l in leases):
                    keep[name] = (v, num)
            self.items = keep
            self.moving = {m: st for m, st in self.moving.items()
                           if any(l.num() == m[2:] and l.start <= m[0] and m[1] <= l.end for l in leases)}

    def take_up(self, lease):
        """A grant marked migrated: the values handed over for its range
        become this server's, under the new lease. The grant may be a piece
        of the range handed over; the rest waits for its own grant."""
        now = time.monotonic_ns()
        taken = 0
        with self.lock:
            rest = []
            for start, end, expires, values in self.pending:
                if expires < now:
                    continue
                if start < lease.end and lease.start < end:
                    for name in [n for n in values if lease.contains(key_of(n))]:
                        self.items[name] = (values.pop(name), lease.num())
                        taken += 1
                if values:
                    rest.append((start, end, expires, values))
            self.pending = rest
        return taken

    def moving_locked(self, k, lease):
        """The handover state of key k under lease, or None; with lock held."""
        for (start, end, epoch, lgn), st in self.moving.items():
            if start <= k < end and (epoch, lgn) == lease.num():
                return st
        return None

    def moving_state(self, k, lease):
        with self.lock:
            return self.moving_locked(k, lease)


class KV:
    def __init__(self, args):
        self.args = args
        self.table = LeaseTable(ignore_deadline=args.ignore_deadline)
        self.store = Store()
        self.session = Session(args.socket, self.table, on_event=self.on_event, apply_lock=self.store.lock)
        self.log_lock = threading.Lock()
        self.log = open(args.serve_log, "a", buffering=1) if args.serve_log else None
        self.id = args.id
        self.handover_timeout = 5.0
        self.server_tls = self.client_tls = None
        if args.certs_dir:
            crt = os.path.join(args.certs_dir, "owner.%s.crt" % args.id)
            key = os.path.join(args.certs_dir, "owner.%s.key" % args.id)
            ca = os.path.join(args.certs_dir, "ca.crt")
            self.server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.server_tls.minimum_version = ssl.TLSVersion.TLSv1_2
            self.server_tls.load_cert_chain(crt, key)
            self.server_tls.load_verify_locations(ca)
            self.server_tls.verify_mode = ssl.CERT_REQUIRED
            self.client_tls = ssl.create_default_context(cafile=ca)
            self.client_tls.load_cert_chain(crt, key)

    # The agent's events. Runs before the event is acknowledged.
    def on_event(self, ev, session):
        if ev.get("owner"):
            self.id = ev["owner"]
        for g in ev.get("granted", []):
            if g.get("migrated"):
                piece = Lease(g)
                n = self.store.take_up(piece)
                print("kv: took up %d values handed over for [%x, %x)" % (n, piece.start, piece.end), flush=True)
        self.store.drop_outside(self.table.leases())
        by_target = {}
        for h in ev.get("handovers", []):
            by_target.setdefault((h.get("to", ""), h.get("addr", "")), []).append(h)
        for (to, addr), hs in by_target.items():
            threading.Thread(target=self.hand_over, args=(to, addr, hs), daemon=True).start()
        if ev.get("drained"):
            print("kv: drained", flush=True)

    def hand_over(self, to, addr, hs):
        """Hands ranges over to one next holder: refuses writes on them, copies
        their values in one request, then tells the agent; it serves them no
        more once the copy is accepted before their deadline."""
        moves = []
        for h in hs:
            r = h.get("range", {})
            start, end = int(r.get("start", 0)), int(r.get("end", 0)) or (1 << 64)
            moves.append((start, end, int(h.get("epoch", 0)), int(h.get("lgn", 0))))
        deadline = min(int(h.get("deadline_ns", 0)) for h in hs)
        ranges = []
        with self.store.lock:
            for m in moves:
                self.store.moving[m] = "copying"
                ranges.append({"start": m[0], "end": m[1] % (1 << 64), "epoch": m[2], "lgn": m[3],
                               "entries": [{"key": n, "value": base64.b64encode(v).decode()}
                                           for n, (v, num) in self.store.items.items()
                                           if m[0] <= key_of(n) < m[1] and num == m[2:]]})
        left = (deadline - time.monotonic_ns()) / 1e9
        body = json.dumps({"from": self.id, "to": to, "within_ms": max(int(left * 1000), 0), "ranges": ranges}).encode()
        ok, why = False, ""
        try:
            host, port = addr.rsplit(":", 1)
            timeout = max(min(left, self.handover_timeout), 0.1)
            if self.client_tls is not None:
                c = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=self.client_tls)
            else:
                c = http.client.HTTPConnection(host, int(port), timeout=timeout)
            c.request("POST", "/internal/migrate", body, {"Content-Type": "application/json"})
            resp = c.getresponse()
            ok = resp.status == 204
            why = "" if ok else "%d %s" % (resp.status, resp.read(512).decode(errors="replace").strip())
            c.close()
        except (OSError, ValueError, http.client.HTTPException) as e:
            ok, why = False, str(e)
        with self.store.lock:
            if ok and time.monotonic_ns() < deadline:
                for m in moves:
                    self.store.moving[m] = "handed"  # served no more, from now
            else:
                why = why or "past the deadline"
                ok = False
                for m in moves:
                    self.store.moving.pop(m, None)
        try:
            self.session.handovers_done([(h.get("id", "0"), ok) for h in hs])
        except (OSError, http.client.HTTPException, RuntimeError) as e:
            ok = False  # the session ended: the agent hands nothing over for it
            print("kv: reporting the handover: %s" % e, file=sys.stderr, flush=True)
        print("kv: handover of %d ranges to %s: %s" % (len(hs), to, "done" if ok else "failed: " + why), flush=True)

    def served(self, op, name, lease, t0, t1, value):
        if self.log is None:
            return
        line = json.dumps({"op": op, "k": name, "s": self.id, "p": os.getpid(), "t0": t0, "t1": t1,
                           "e": lease.epoch, "l": lease.lgn, "v": value})
        with self.log_lock:
            self.log.write(line + "\n")


class TLSServer(ThreadingHTTPServer):
    """Accepts at once and shakes hands in the request's own thread, so a
    slow client does not hold the others up."""

    tls = None
    request_queue_size = 128  # the listen backlog: handovers arrive in bursts

    def get_request(self):
        sock, addr = self.socket.accept()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr


def make_handler(kv):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def setup(self):
            if isinstance(self.request, ssl.SSLSocket):
                self.request.settimeout(10)
                self.request.do_handshake()
            super().setup()

        def log_message(self, *a):
            pass

        def reply(self, code, body=b"", headers=None):
            if isinstance(body, str):
                body = body.encode()
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def refuse(self, why, msg):
            if why == "moving":
                self.reply(503, msg + "\n", {"Leasehold-Refused": "moving", "Retry-After": "1"})
            else:
                self.reply(421, msg + "\n", {"Leasehold-Refused": "not-owner"})

        def body(self, limit):
            n = int(self.headers.get("Content-Length", "0") or "0")
            if n < 0 or n > limit:
                self.reply(413, "body over %d bytes\n" % limit)
                self.close_connection = True
                return None
            return self.rfile.read(n)

        def name(self):
            if not self.path.startswith("/kv/"):
                return None
            name = urllib.parse.unquote(self.path[len("/kv/"):].split("?", 1)[0])
            if not name or "/" in name or len(name) > MAX_KEY:
                return None
            return name

        def do_GET(self):
            if self.path == "/healthz":
                return self.reply(200, "ok\n")
            name = self.name()
            if name is None:
                return self.reply(404, "no such path\n")
            k = key_of(name)
            t0 = time.monotonic_ns()
            lease = kv.table.check(k)  # (1)
            if lease is None:
                return self.refuse("not-owner", "not the owner")
            if kv.store.moving_state(k, lease) == "handed":
                return self.refuse("moving", "moving")
            with kv.store.lock:  # (2) a value stored under another lease is stale
                v, num = kv.store.items.get(name, (None, None))
            if num != lease.num():
                v = None
            if not kv.table.continuous(k, lease) or kv.store.moving_state(k, lease) == "handed":  # (4)
                return self.refuse("not-owner", "lease lost")
            t1 = time.monotonic_ns()
            kv.session.count(k)
            kv.served("get", name, lease, t0, t1, None if v is None else v.decode(errors="replace"))
            if v is None:
                return self.reply(404, "not found\n")
            self.reply(200, v)

        def do_PUT(self):
            name = self.name()
            if name is None:
                return self.reply(404, "no such path\n")
            value = self.body(MAX_VALUE)
            if value is None:
                return
            k = key_of(name)
            t0 = time.monotonic_ns()
            lease = kv.table.check(k)
            if lease is None:
                return self.refuse("not-owner", "not the owner")
            with kv.store.lock:  # (3) operate, with the lease number
                # Under the lock a handover copies the range under: a
                # write either is in the copy or is refused.
                if kv.store.moving_locked(k, lease) is not None:
                    moving = True
                else:
                    moving = False
                    kv.store.items[name] = (value, lease.num())
            if moving:
                return self.refuse("moving", "moving")
            if not kv.table.continuous(k, lease) or kv.store.moving_state(k, lease) == "handed":
                return self.refuse("not-owner", "lease lost")
            t1 = time.monotonic_ns()
            kv.session.count(k)
            kv.served("put", name, lease, t0, t1, value.decode(errors="replace"))
            self.reply(204)  # (5)

        def do_POST(self):
            if self.path != "/internal/migrate":
                return self.reply(404, "no such path\n")
            raw = self.body(MAX_MIGRATE)
            if raw is None:
                return
            try:
                m = json.loads(raw)
                if m.get("to") != kv.id:
                    return self.reply(409, "migrate: this server is %r\n" % kv.id)
                within = int(m.get("within_ms", 0))
                if within < 0 or within > 3600 * 1000:
                    return self.reply(400, "migrate: within_ms out of range\n")
                got = []
                for r in m["ranges"]:
                    start, end = int(r["start"]), int(r["end"]) or (1 << 64)
                    values = {}
                    for e in r.get("entries", []):
                        if not start <= key_of(e["key"]) < end:
                            return self.reply(400, "migrate: a key outside its range\n")
                        values[e["key"]] = base64.b64decode(e["value"], validate=True)
                    got.append((start, end, time.monotonic_ns() + (within + 60000) * 1000000, values))
            except (ValueError, KeyError, TypeError) as e:
                return self.reply(400, "migrate: malformed body: %s\n" % e)
            with kv.store.lock:
                kv.store.pending.extend(got)
            self.reply(204)

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", required=True, help="host:port to serve HTTP on (port 0: any)")
    p.add_argument("--socket", required=True, help="the agent's Unix socket")
    p.add_argument("--id", default="", help="the Owner ID (the agent's; for the logs)")
    p.add_argument("--certs-dir", default="", help="serve HTTPS with the Owner certificate of --id from DIR")
    p.add_argument("--serve-log", default="", help="append a line per request served to this file")
    p.add_argument("--drain-timeout", type=float, default=30.0, help="on SIGTERM, how long to wait for the drain (seconds)")
    p.add_argument("--ignore-deadline", action="store_true", help="break the lease check (tests only)")
    args = p.parse_args()
    if args.certs_dir and not args.id:
        p.error("--certs-dir needs --id: the certificate is the Owner's")
    kv = KV(args)
    host, port = args.listen.rsplit(":", 1)
    srv = TLSServer((host, int(port)), make_handler(kv))
    srv.tls = kv.server_tls
    srv.daemon_threads = True
    print("kv serving on %s:%d (%s)" % (srv.server_address[0], srv.server_address[1],
                                       "HTTPS, mutual TLS" if kv.server_tls else "plaintext HTTP"), flush=True)
    threading.Thread(target=kv.session.run_forever, daemon=True).start()

    def drain_and_exit():
        # A planned stop: the agent moves every range away and this server
        # hands each over with its values; then it exits.
        try:
            kv.session.drain()
            kv.session.drained.wait(args.drain_timeout)
        except (OSError, http.client.HTTPException, RuntimeError) as e:
            print("kv: drain: %s" % e, file=sys.stderr, flush=True)
        print("kv: stopped", flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=drain_and_exit, daemon=True).start())
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
