"""test_deploy_healthcheck.py — docker/healthcheck.sh.

  test_healthcheck_script                /healthz 200 -> 0, 503 / closed port -> 1

What CI can check of docker/ without a Docker engine (the other parts:
test_deploy_*.py; shared helpers: deploy_helpers.py).
"""

import http.server
import os
import socket
import subprocess
import threading

import pytest

import harness
from harness import wait_until
from deploy_helpers import HEALTHCHECK, _fail


# --------------------------------------------------------------------------
# healthcheck
# --------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    codes = {}

    def do_GET(self):
        code = self.codes.get(self.path, 404)
        body = b"ok\n" if code == 200 else b"no\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:  # the healthcheck hangs up after the status line
            pass

    def log_message(self, *a):
        pass


def _run_healthcheck(addr, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    env["OUTBOX_RELAY_METRICS_ADDR"] = addr
    return subprocess.run(["bash", HEALTHCHECK] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=15)


def test_healthcheck_script(relayer, pg, broker):
    _Handler.codes = {"/healthz": 200, "/readyz": 503}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        port = srv.server_address[1]
        for addr in ("0.0.0.0:%d" % port, "127.0.0.1:%d" % port, ":%d" % port):
            res = _run_healthcheck(addr)
            assert res.returncode == 0, (addr, res.stdout)
        res = _run_healthcheck("0.0.0.0:%d" % port, "/readyz")
        assert res.returncode == 1 and "503" in res.stdout, res.stdout
    finally:
        srv.shutdown()
        srv.server_close()
    res = _run_healthcheck("127.0.0.1:%d" % harness.free_port())
    assert res.returncode == 1 and "nothing listens" in res.stdout, res.stdout

    # Against the real relayer, when it serves its HTTP endpoint.
    port = harness.free_port()
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap,
                "--metrics-addr", "0.0.0.0:%d" % port)

    def listening():
        if not r.running():
            _fail("relayer", r)
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    try:
        wait_until(listening, 15, message="the relayer's --metrics-addr")
    except AssertionError:
        pytest.skip("outbox-relay accepts --metrics-addr but serves nothing on it yet "
                    "(the HTTP endpoint is not started by main.c in this build)")
    res = _run_healthcheck("0.0.0.0:%d" % port)
    assert res.returncode == 0, res.stdout
    assert r.terminate() == 0
