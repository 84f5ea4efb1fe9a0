"""test_fault_proxy.py — proves tests/tools/fault_proxy.py (harness.FaultProxy)
and mock-broker --advertise (harness.ProxiedBroker) do what the stall tests
rely on, against a tiny echo server, so a red stall test means the relayer."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import harness
from harness import wait_until


class Echo(threading.Thread):
    """Echoes every byte back; counts what it received."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.eofs = 0
        self.stop = threading.Event()
        self.start()

    def run(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        c.settimeout(0.2)
        deadline = time.monotonic() + 60
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                data = c.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                self.eofs += 1
                break
            self.received += len(data)
            try:
                c.sendall(data)
            except OSError:
                break
        c.close()


@pytest.fixture
def echo():
    e = Echo()
    yield e
    e.stop.set()
    e.sock.close()


@pytest.fixture
def proxy(echo, tmp_path):
    p = harness.FaultProxy(echo.port, str(tmp_path))
    yield p
    p.cleanup()


def client(proxy):
    c = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    c.settimeout(5)
    return c


def roundtrip(c, data=b"ping"):
    c.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = c.recv(65536)
        if not chunk:
            raise EOFError
        got += chunk
    return got


def test_forwards_and_counts(proxy):
    c = client(proxy)
    assert roundtrip(c, b"hello") == b"hello"
    conns = proxy.conns()
    assert len(conns) == 1 and conns[0]["up"] == 5 and conns[0]["down"] == 5
    c.close()
    wait_until(lambda: proxy.conns() == [], 5, message="connection gone after close")


@pytest.mark.parametrize("direction", ["up", "down", "both"])
def test_stall_existing_holds_data_new_pass(proxy, echo, direction):
    c = client(proxy)
    assert roundtrip(c) == b"ping"
    proxy.stall(direction)
    before = echo.received
    c.settimeout(1.0)
    c.sendall(b"held")
    with pytest.raises(socket.timeout):
        c.recv(10)
    if direction in ("up", "both"):
        assert echo.received == before, "the target got data through a stalled up path"
    else:
        assert echo.received == before + 4
    # The client's EOF is not seen through a stalled up path either.
    flags = proxy.conns()[0]["flags"]
    assert ("U" in flags) == (direction != "down") and ("D" in flags) == (direction != "up")
    # A new connection passes.
    c2 = client(proxy)
    assert roundtrip(c2, b"new") == b"new"
    c2.close()
    proxy.resume(direction)
    c.settimeout(5)
    assert c.recv(10) == b"held"
    c.close()


def test_stall_new_connections(proxy):
    c = client(proxy)
    wait_until(lambda: len(proxy.conns()) == 1, 5, message="accepted")  # else it is "new"
    proxy.stall("both", "new")
    assert roundtrip(c) == b"ping", "an existing connection must keep working"
    c2 = client(proxy)
    c2.settimeout(1.0)
    c2.sendall(b"x")
    with pytest.raises(socket.timeout):
        c2.recv(1)
    proxy.resume("both", "all")
    c2.settimeout(5)
    assert c2.recv(1) == b"x"


def test_stalled_client_close_keeps_target_open(proxy, echo):
    c = client(proxy)
    roundtrip(c)
    proxy.stall("up")
    c.close()
    time.sleep(1.0)
    assert echo.eofs == 0, "a stalled path must not pass the client's FIN"
    assert len(proxy.conns()) == 1
    proxy.resume("up")
    wait_until(lambda: echo.eofs == 1, 5, message="FIN forwarded after resume")


def test_reset_and_cut(proxy, echo):
    c = client(proxy)
    roundtrip(c)
    proxy.reset()
    with pytest.raises((ConnectionResetError, EOFError)):
        if c.recv(10) == b"":
            raise EOFError
    c2 = client(proxy)
    roundtrip(c2)
    proxy.cut("down")
    assert c2.recv(10) == b"", "cut down: the client gets EOF"
    c3 = client(proxy)
    roundtrip(c3)
    proxy.cut("up")
    wait_until(lambda: echo.eofs >= 1, 5, message="cut up: the target gets EOF")
    proxy.refuse(True)
    # The reset can come before connect() returns (the kernel had already
    # accepted it) or on the first read: either way the client is refused.
    with pytest.raises((ConnectionResetError, EOFError)):
        c4 = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        if c4.recv(10) == b"":
            raise EOFError
    proxy.refuse(False)
    assert roundtrip(client(proxy)) == b"ping"


def test_delay(proxy):
    c = client(proxy)
    proxy.delay(300, "down")
    t0 = time.monotonic()
    roundtrip(c)
    assert time.monotonic() - t0 >= 0.3
    proxy.delay(0, "down")
    t0 = time.monotonic()
    roundtrip(c)
    assert time.monotonic() - t0 < 0.3


def test_exits_with_its_controller_and_refuses_other_hosts(echo):
    script = os.path.join(harness.REPO_ROOT, "tests", "tools", "fault_proxy.py")
    p = subprocess.Popen([sys.executable, script, "--target", "127.0.0.1:%d" % echo.port],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline().startswith(b"LISTEN 127.0.0.1:")
    p.stdin.close()
    assert p.wait(10) == 0
    p.stdout.close()
    res = subprocess.run([sys.executable, script, "--target", "10.1.2.3:5432"],
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    assert res.returncode != 0 and b"loopback" in res.stderr
    res = subprocess.run([sys.executable, script, "--target", "127.0.0.1:1", "--max-seconds",
                          "0.5"], stdin=subprocess.PIPE, capture_output=True, timeout=10)
    assert res.returncode == 0


def test_proxied_broker_routes_every_connection(tmp_path):
    b = harness.ProxiedBroker(str(tmp_path), brokers=2)
    try:
        ports = [int(a.rsplit(":", 1)[1]) for a in b.bootstrap.split(",")]
        assert ports == [p.port for p in b.proxies]
        b.cmd("topic proxied 4")
        assert harness.produce(b.bootstrap, "proxied", [(b"k%d" % i, b"v%d" % i, None) for i in range(20)]) == []
        msgs = harness.read_messages(b.bootstrap, "proxied", expected=20, timeout=30)
        assert len(msgs) == 20
        # Both brokers lead partitions, so both proxies carried traffic.
        for p in b.proxies:
            st = p.stats()
            assert st["accepted"] > 0 and st["down"] > 0, st
    finally:
        b.cleanup()
