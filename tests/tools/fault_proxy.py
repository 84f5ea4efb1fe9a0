#!/usr/bin/env python3
"""fault_proxy.py — a loopback TCP proxy that breaks connections on command,
for the integration tests (tests/integration/harness.py FaultProxy).

Usage: fault_proxy.py --target 127.0.0.1:PORT [--listen 127.0.0.1:PORT]
                      [--max-seconds N] [--max-conns N]

It forwards every connection accepted on --listen (default: a free port) to
--target. Both must be loopback addresses: this is a test tool, it never
reaches another host. On start it prints one line, "LISTEN 127.0.0.1:<port>".
Then every line on stdin is one command, answered with one line, "ok ..."
or "err <message>". Directions: "up" is client -> target, "down" is
target -> client, "both" (the default) is both. WHICH is "existing" (the
connections open now, the default), "new" (connections accepted from now
on), "all" (both), or a connection id from "conns".

  stall [DIR] [WHICH]   stop forwarding: nothing is read from the source nor
                        written to the destination; sockets stay open, so
                        the peers see a silent path (a stalled middlebox, NAT
                        or load balancer). A source's EOF is not seen either.
  resume [DIR] [WHICH]  forward again what was held back and what comes
  delay MS [DIR] [WHICH] hold every chunk MS milliseconds before forwarding
                        it (0 = no delay)
  cut [DIR] [WHICH]     half-close: the destination of DIR gets EOF (FIN)
                        after what was already forwarded; "both" closes the
                        connection on both sides (existing connections only)
  reset [WHICH]         close both sides with RST (existing connections only)
  refuse on|off         close new connections at once (RST) instead of
                        forwarding them
  conns                 "ok N id:up_bytes:down_bytes:flags:port ..." of the open
                        connections (flags: U/D stalled up/down, u/d EOF
                        seen from the client/target; port: the local port
                        of the proxy's connection to the target, which the
                        target sees as the client's, e.g. PostgreSQL's
                        pg_stat_activity.client_port)
  stats                 "ok accepted=N up=BYTES down=BYTES" since start, closed
                        connections included
  quit                  answer ok and exit

Bounded: it exits by itself at EOF on stdin (its controller went away),
after --max-seconds (default 1800), and accepts at most --max-conns
(default 256) connections at a time (more are refused). Each connection
buffers at most 4 MiB per direction before it stops reading.
"""

import argparse
import errno
import os
import select
import socket
import struct
import sys
import time

BUF_LIMIT = 4 << 20
CHUNK = 65536
CONNECT_TIMEOUT = 3.0


def loopback(addr, what):
    host, _, port = addr.rpartition(":")
    host = host or "127.0.0.1"
    try:
        packed = socket.inet_aton(host)
    except OSError:
        sys.exit("fault_proxy: %s %r is not an IPv4 address" % (what, addr))
    if packed[0] != 127:
        sys.exit("fault_proxy: %s %s is not a loopback address (loopback only)" % (what, host))
    return host, int(port)


class Direction:
    """One way of a connection: reads src, writes dst."""

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.stalled = False
        self.delay = 0.0
        self.queue = []          # [(due, bytes)] read but held by the delay
        self.out = bytearray()   # due, not yet written
        self.eof = False         # EOF read from src
        self.shut = False        # dst got shutdown(SHUT_WR)
        self.bytes = 0

    def buffered(self):
        return len(self.out) + sum(len(b) for _, b in self.queue)

    def wants_read(self):
        return not self.stalled and not self.eof and self.buffered() < BUF_LIMIT

    def release(self, now):
        while self.queue and self.queue[0][0] <= now:
            self.out += self.queue.pop(0)[1]

    def wants_write(self):
        return not self.stalled and len(self.out) > 0

    def done(self):
        return self.eof and not self.queue and not self.out


class Conn:
    def __init__(self, cid, client, server, new_flags):
        self.id = cid
        self.client, self.server = client, server
        self.up = Direction(client, server)
        self.down = Direction(server, client)
        for d, (stalled, delay) in zip((self.up, self.down), new_flags):
            d.stalled, d.delay = stalled, delay

    def dirs(self, which):
        return {"up": [self.up], "down": [self.down], "both": [self.up, self.down]}[which]

    def close(self, rst=False):
        for s in (self.client, self.server):
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass


class Proxy:
    def __init__(self, listen, target, max_conns):
        self.target = target
        self.max_conns = max_conns
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(listen)
        self.lsock.listen(64)
        self.lsock.setblocking(False)
        self.conns = {}
        self.next_id = 1
        self.refuse = False
        # What a new connection gets, per direction: [stalled, delay].
        self.new = {"up": [False, 0.0], "down": [False, 0.0]}
        self.stdin_buf = b""
        self.accepted = 0
        self.closed_bytes = [0, 0]  # up, down of connections already dropped

    # -- connections ---------------------------------------------------------

    def accept(self):
        try:
            client, _ = self.lsock.accept()
        except (BlockingIOError, InterruptedError):
            return
        if self.refuse or len(self.conns) >= self.max_conns:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            return
        try:
            server = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT)
        except OSError:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            return
        for s in (client, server):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        flags = [tuple(self.new["up"]), tuple(self.new["down"])]
        self.accepted += 1
        c = Conn(self.next_id, client, server, flags)
        self.conns[c.id] = c
        self.next_id += 1

    def drop(self, c, rst=False):
        c.close(rst)
        if self.conns.pop(c.id, None) is not None:
            self.closed_bytes[0] += c.up.bytes
            self.closed_bytes[1] += c.down.bytes

    def pump(self, now, readable, writable):
        for c in list(self.conns.values()):
            alive = True
            for d in (c.up, c.down):
                if not alive:
                    break
                if d.src in readable and d.wants_read():
                    try:
                        data = d.src.recv(CHUNK)
                    except (BlockingIOError, InterruptedError):
                        data = None
                    except OSError:
                        self.drop(c, rst=True)
                        alive = False
                        break
                    if data == b"":
                        d.eof = True
                    elif data:
                        d.bytes += len(data)
                        d.queue.append((now + d.delay, data))
                d.release(now)
                if d.dst in writable and d.wants_write():
                    try:
                        n = d.dst.send(d.out)
                        del d.out[:n]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        self.drop(c, rst=True)
                        alive = False
                        break
                if not d.stalled and d.done() and not d.shut:
                    try:
                        d.dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    d.shut = True
            if alive and c.up.shut and c.down.shut:
                self.drop(c)

    def next_due(self):
        dues = [d.queue[0][0] for c in self.conns.values() for d in (c.up, c.down)
                if d.queue and not d.stalled]
        return min(dues) if dues else None

    # -- commands --------------------------------------------------------------

    def targets(self, which):
        if which in ("existing", "all"):
            return list(self.conns.values())
        if which == "new":
            return []
        if which.isdigit():
            c = self.conns.get(int(which))
            if c is None:
                raise ValueError("no connection %s" % which)
            return [c]
        raise ValueError("WHICH is existing|new|all|<id>, not %r" % which)

    def command(self, line):
        words = line.split()
        if not words:
            return "err empty command"
        op, args = words[0], words[1:]
        if op == "quit":
            return "quit"
        if op == "conns":
            parts = []
            for c in self.conns.values():
                flags = ("U" if c.up.stalled else "") + ("D" if c.down.stalled else "") + \
                        ("u" if c.up.eof else "") + ("d" if c.down.eof else "")
                try:
                    lport = c.server.getsockname()[1]
                except OSError:
                    lport = 0
                parts.append("%d:%d:%d:%s:%d" % (c.id, c.up.bytes, c.down.bytes, flags or "-",
                                                 lport))
            return "ok %d %s" % (len(parts), " ".join(parts))
        if op == "stats":
            up = self.closed_bytes[0] + sum(c.up.bytes for c in self.conns.values())
            down = self.closed_bytes[1] + sum(c.down.bytes for c in self.conns.values())
            return "ok accepted=%d up=%d down=%d" % (self.accepted, up, down)
        if op == "refuse":
            if args not in (["on"], ["off"]):
                return "err usage: refuse on|off"
            self.refuse = args[0] == "on"
            return "ok"
        if op == "reset":
            which = args[0] if args else "existing"
            for c in self.targets(which):
                self.drop(c, rst=True)
            return "ok"
        if op in ("stall", "resume", "delay", "cut"):
            delay = 0.0
            if op == "delay":
                if not args:
                    return "err usage: delay MS [DIR] [WHICH]"
                delay = float(args[0]) / 1000.0
                args = args[1:]
            direction = args[0] if args else "both"
            which = args[1] if len(args) > 1 else "existing"
            if direction not in ("up", "down", "both") or len(args) > 2:
                return "err usage: %s [up|down|both] [existing|new|all|<id>]" % op
            names = ["up", "down"] if direction == "both" else [direction]
            if which in ("new", "all") and op != "cut":
                for n in names:
                    if op == "delay":
                        self.new[n][1] = delay
                    else:
                        self.new[n][0] = op == "stall"
            for c in self.targets(which):
                if op == "cut" and direction == "both":
                    self.drop(c)
                    continue
                for d in c.dirs(direction):
                    if op == "stall":
                        d.stalled = True
                    elif op == "resume":
                        d.stalled = False
                    elif op == "delay":
                        d.delay = delay
                    else:  # cut one way: no more reading, EOF to its destination
                        d.eof = True
                        d.stalled = False
            return "ok"
        return "err unknown command %r" % op

    # -- loop --------------------------------------------------------------------

    def run(self, max_seconds):
        end = time.monotonic() + max_seconds
        stdin = sys.stdin.fileno()
        while True:
            now = time.monotonic()
            if now >= end:
                return 0
            rl, wl = [self.lsock, stdin], []
            for c in self.conns.values():
                for d in (c.up, c.down):
                    if d.wants_read():
                        rl.append(d.src)
                    if d.wants_write():
                        wl.append(d.dst)
            timeout = min(1.0, end - now)
            due = self.next_due()
            if due is not None:
                timeout = max(0.0, min(timeout, due - now))
            try:
                r, w, _ = select.select(rl, wl, [], timeout)
            except InterruptedError:
                continue
            if stdin in r:
                chunk = os.read(stdin, 4096)
                if not chunk:
                    return 0  # the controller went away
                self.stdin_buf += chunk
                while b"\n" in self.stdin_buf:
                    line, self.stdin_buf = self.stdin_buf.split(b"\n", 1)
                    try:
                        answer = self.command(line.decode("utf-8", "replace"))
                    except (ValueError, IndexError) as e:
                        answer = "err %s" % e
                    if answer == "quit":
                        print("ok", flush=True)
                        return 0
                    print(answer, flush=True)
            if self.lsock in r:
                self.accept()
            self.pump(time.monotonic(), set(r), set(w))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--max-seconds", type=float, default=1800)
    ap.add_argument("--max-conns", type=int, default=256)
    a = ap.parse_args()
    proxy = Proxy(loopback(a.listen, "--listen"), loopback(a.target, "--target"), a.max_conns)
    print("LISTEN %s:%d" % proxy.lsock.getsockname(), flush=True)
    return proxy.run(a.max_seconds)


if __name__ == "__main__":
    sys.exit(main())
