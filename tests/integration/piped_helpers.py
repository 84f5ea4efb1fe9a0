"""piped_helpers.py — the tests' helper programs, driven by one-line
commands over a pipe.

  MockBroker     build/mock-broker (librdkafka's mock cluster) with its
                 stdin control channel.
  FaultProxy     tests/tools/fault_proxy.py in front of any TCP server
                 (PostgreSQL, a broker): stall, delay, cut, reset, refuse.
  ProxiedBroker  a MockBroker whose every connection goes through a
                 FaultProxy per broker.

Each dies with the test process (its stdin pipe closes) and is registered
for cleanup at exit. harness.py re-exports every name.
"""

import os
import select
import subprocess
import time
import uuid

from harness_base import REPO_ROOT, _die_with_parent, _register, _unregister, free_port, tools_dir

# --------------------------------------------------------------------------
# Line-oriented pipes with deadlines
# --------------------------------------------------------------------------

class _LineReader:
    """Reads whole lines from a pipe fd with a deadline (no stdio buffering
    to hide data from select)."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def readline(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete line within %.1fs (have %r)" % (timeout, self.buf))
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("pipe closed (have %r)" % self.buf)
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")

# --------------------------------------------------------------------------
# Helper programs driven over a pipe (mock broker, fault proxy)
# --------------------------------------------------------------------------

class _PipedHelper:
    """A helper program of the tests driven by one-line commands on its
    stdin (answers on stdout, stderr to <log_dir>/<name>-<id>.log). It dies
    with the test process (its stdin pipe closes) and is stopped by quit +
    EOF, SIGKILLed if it does not exit in time. Subclasses call _spawn()."""

    def _spawn(self, argv, log_dir, name, first, env=None):
        """Starts argv; returns its first stdout line, which must start
        with `first` (else the helper is cleaned up and this raises)."""
        self.logfile = os.path.join(log_dir, "%s-%s.log" % (name, uuid.uuid4().hex[:6]))
        self._log = open(self.logfile, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env, preexec_fn=_die_with_parent)
        _register(self)
        self._reader = _LineReader(self.proc.stdout.fileno())
        return self._expect_line(first, name)

    def _expect_line(self, first, name):
        try:
            line = self._reader.readline(15)
        except Exception:
            self.cleanup()
            raise
        if not line.startswith(first):
            self.cleanup()
            raise RuntimeError("%s said %r" % (name, line))
        return line

    def _send(self, line, timeout):
        """Writes one command line; returns the answer line."""
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()
        return self._reader.readline(timeout)

    def stop(self, timeout=10):
        """quit + EOF; SIGKILL if it does not exit in time. Returns rc."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def cleanup(self):
        try:
            self.stop()
        finally:
            for f in (self.proc.stdout, self._log):
                try:
                    f.close()
                except Exception:
                    pass
            _unregister(self)


# --------------------------------------------------------------------------
# Mock broker
# --------------------------------------------------------------------------

class MockBroker(_PipedHelper):
    """build/mock-broker as a subprocess: .bootstrap and .cmd(line)."""

    def __init__(self, log_dir, brokers=1, partitions=4, binary=None, extra_args=()):
        binary = binary or os.path.join(tools_dir(), "mock-broker")
        if not os.access(binary, os.X_OK):
            raise FileNotFoundError("%s not built (cmake --build build --target mock-broker)" % binary)
        # TCP_NODELAY on the broker's connections, as a real broker has them
        # (tests/tools/nodelay_preload.c): without it a pipelined response
        # waits up to 40 ms for the client's delayed ACK, and read-backs of
        # big topics fall behind the mock's 5 MiB per-partition log.
        preload = os.path.join(tools_dir(), "libnodelay.so")
        if not os.access(preload, os.R_OK):
            raise FileNotFoundError("%s not built (cmake --build build --target nodelay)" % preload)
        line = self._spawn([binary, "--brokers", str(brokers), "--partitions", str(partitions)]
                           + list(extra_args), log_dir, "mock-broker", "BOOTSTRAP ",
                           env=dict(os.environ, LD_PRELOAD=preload))
        self.bootstrap = line.split(" ", 1)[1].strip()
        self.brokers = brokers

    def cmd(self, line, timeout=30, check=True):
        """Sends one command and returns the answer ('ok' or 'err ...');
        with check, an 'err' answer raises."""
        answer = self._send(line, timeout)
        if check and answer != "ok":
            raise RuntimeError("mock-broker %r -> %r" % (line, answer))
        return answer

    def down(self):
        """Every broker down: connections closed, new ones refused."""
        self.cmd("down")

    def up(self, check=True):
        self.cmd("up", check=check)

    def create_topic(self, name, partitions=None):
        """Creates `name` with `partitions` (the broker's --partitions when
        None), as real_broker.RealBroker.create_topic does on a cluster."""
        self.cmd("topic %s" % name + (" %d" % partitions if partitions else ""))
        return name

# --------------------------------------------------------------------------
# Fault proxy (tests/tools/fault_proxy.py)
# --------------------------------------------------------------------------

class FaultProxy(_PipedHelper):
    """tests/tools/fault_proxy.py in front of 127.0.0.1:target_port: point a
    client at .port, then break its path with .stall(), .resume(), .delay(),
    .cut(), .reset(), .refuse(). direction: "up" (client -> target), "down"
    (target -> client) or "both"; which: "existing" (the connections open
    now), "new", "all" or a connection id (see .conns()).

    The proxy exits when this object's stdin pipe closes (the test process
    died), after max_seconds, or on .stop()."""

    def __init__(self, target_port, log_dir, listen_port=0, max_seconds=1800):
        script = os.path.join(REPO_ROOT, "tests", "tools", "fault_proxy.py")
        self.target_port = target_port
        line = self._spawn(["python3", script, "--target", "127.0.0.1:%d" % target_port,
                            "--listen", "127.0.0.1:%d" % listen_port,
                            "--max-seconds", str(max_seconds)],
                           log_dir, "fault-proxy", "LISTEN ")
        self.port = int(line.rsplit(":", 1)[1])
        self.address = "127.0.0.1:%d" % self.port

    def cmd(self, line, timeout=10):
        """One command; returns the answer after "ok" ('' if none); an
        "err" answer raises."""
        answer = self._send(line, timeout)
        if not answer.startswith("ok"):
            raise RuntimeError("fault_proxy %r -> %r" % (line, answer))
        return answer[2:].strip()

    def stall(self, direction="both", which="existing"):
        self.cmd("stall %s %s" % (direction, which))

    def resume(self, direction="both", which="all"):
        self.cmd("resume %s %s" % (direction, which))

    def delay(self, ms, direction="both", which="all"):
        self.cmd("delay %d %s %s" % (ms, direction, which))

    def cut(self, direction="both", which="existing"):
        self.cmd("cut %s %s" % (direction, which))

    def reset(self, which="existing"):
        self.cmd("reset %s" % which)

    def refuse(self, on=True):
        self.cmd("refuse %s" % ("on" if on else "off"))

    def conns(self):
        """The open connections: [{"id", "up", "down", "flags", "port"}]
        (bytes forwarded each way; flags U/D stalled up/down, u/d EOF seen;
        port: the proxy's local port towards the target, PostgreSQL's
        pg_stat_activity.client_port)."""
        words = self.cmd("conns").split()
        out = []
        for w in words[1:]:
            cid, up, down, flags, port = w.split(":")
            out.append({"id": int(cid), "up": int(up), "down": int(down),
                        "flags": "" if flags == "-" else flags, "port": int(port)})
        return out

    def conn_for_port(self, port):
        """The id of the connection whose target side uses local port
        `port` (pg_stat_activity.client_port), or None."""
        for c in self.conns():
            if c["port"] == port:
                return c["id"]
        return None

    def stats(self):
        """Since start: {"accepted": connections, "up": bytes, "down": bytes}."""
        return {k: int(v) for k, v in (w.split("=") for w in self.cmd("stats").split())}


class ProxiedBroker(MockBroker):
    """A MockBroker whose every client connection goes through a FaultProxy
    per broker: the brokers advertise the proxies' ports (mock-broker
    --advertise), so .bootstrap and the Metadata both name the proxies.
    .proxies[i] is broker i+1's proxy; .stall()/.resume() act on all."""

    def __init__(self, log_dir, brokers=1, partitions=4):
        ports = [free_port() for _ in range(brokers)]
        super().__init__(log_dir, brokers=brokers, partitions=partitions,
                         extra_args=["--advertise", ",".join(map(str, ports))])
        self.proxies = []
        line = self._expect_line("LISTEN ", "mock-broker")
        try:
            real = [int(a.rsplit(":", 1)[1]) for a in line.split(" ", 1)[1].split(",")]
            for adv, port in zip(ports, real):
                self.proxies.append(FaultProxy(port, log_dir, listen_port=adv))
        except Exception:
            self.cleanup()
            raise

    def stall(self, direction="both", which="existing"):
        for p in self.proxies:
            p.stall(direction, which)

    def resume(self, direction="both", which="all"):
        for p in self.proxies:
            p.resume(direction, which)

    def cleanup(self):
        for p in getattr(self, "proxies", []):
            p.cleanup()
        super().cleanup()
