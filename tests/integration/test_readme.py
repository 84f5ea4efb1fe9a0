"""test_readme.py — the README's first command, as written.

  test_readme_opens_with_the_two_commands   the README's first code block is the
                                            demo and the test suite, in that order
  test_demo_end_to_end                      tests/tools/demo.sh (the README's first
                                            command) runs for a few seconds and exits
                                            0: every committed order arrived in the
                                            broker, no rolled-back one did, and it left
                                            no process behind; also with
                                            DEMO_PLUGIN=pgoutput
"""
import os
import re
import subprocess

import pytest

from kafka_fixtures import _unavailable

from harness import REPO_ROOT, build_dir


def readme_commands():
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_readme_opens_with_the_two_commands():
    assert readme_commands()[:2] == ["bash tests/tools/demo.sh", "bash tests/run.sh"]


def demo_processes(work_dir):
    """pids of processes running from this demo's work dir (the other
    parametrisation may be running its own demo at the same time)."""
    p = subprocess.run(["pgrep", "-f", re.escape(work_dir) + "(/|$)"], stdout=subprocess.PIPE)
    return set(p.stdout.split())


@pytest.mark.parametrize("demo_plugin", ["default", "pgoutput", "server-defaults", "real-kafka"])
def test_demo_end_to_end(demo_plugin):
    # The setup step (apt-get + build) is what tests/run.sh has just done;
    # skip it here so that the test runs against the build under test.
    env = dict(os.environ, DEMO_SECONDS="6", DEMO_INTERVAL="0.5", OUTBOX_SKIP_SETUP="1",
               OUTBOX_RELAY_BUILD=build_dir())
    if demo_plugin == "pgoutput":
        env["DEMO_PLUGIN"] = "pgoutput"
    if demo_plugin == "server-defaults":
        # A server nobody configured: output_plugin_libraries refuses
        # wal2json, and the relayer's default still relays (pgoutput).
        env["DEMO_SERVER_DEFAULTS"] = "1"
    if demo_plugin == "real-kafka":
        if os.environ.get("OUTBOX_TEST_KAFKA_UNAVAILABLE"):
            _unavailable(os.environ["OUTBOX_TEST_KAFKA_UNAVAILABLE"])
        env["DEMO_KAFKA"] = "real"
    cmd = readme_commands()[0].split()
    p = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=180)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out[-3000:]
    assert "OK: every committed order arrived, no rolled-back order did" in out, out[-3000:]
    m = re.search(r"(\d+) orders committed, (\d+) rolled back", out)
    assert m and int(m.group(1)) >= 3 and int(m.group(2)) >= 1, out[-3000:]
    assert re.search(r"committed orders missing: 0; rolled-back orders present: 0", out)
    if demo_plugin == "real-kafka":
        assert re.search(r"Apache Kafka broker at 127\.0\.0\.1:\d+, topic 'order'", out), out[-3000:]
        assert "% ERROR" not in out, out[-3000:]
    if demo_plugin == "server-defaults":
        assert "does not name wal2json, so the new slot uses PostgreSQL's built-in pgoutput" \
            in out, out[-3000:]
    # Nothing left running from the demo's work dir (its PostgreSQL, kcat).
    work = re.search(r" in (/tmp/outbox-demo\.[A-Za-z0-9]+)/pg\b", out)
    assert work, "the demo did not name its work dir:\n" + out[-3000:]
    assert not demo_processes(work.group(1)), "left running from %s" % work.group(1)
