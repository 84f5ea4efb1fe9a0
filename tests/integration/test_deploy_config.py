"""test_deploy_config.py — the example config, the systemd unit, docs/deploy.md.

  test_example_config_is_valid           every setting (commented ones too) is
                                         accepted by the binary / librdkafka
  test_systemd_unit                      systemd-analyze verify and offline security
  test_deploy_doc_names_exist            options and variables in docs/deploy.md exist

What CI can check of docker/ without a Docker engine (the other parts:
test_deploy_*.py; shared helpers: deploy_helpers.py).
"""

import os
import re
import shlex
import shutil
import subprocess

import pytest

from deploy_helpers import (DEPLOY_DOC, EXAMPLE_CONF, REPO, UNIT, _binary, check_env_names,
                            help_options, kafka_properties)


# --------------------------------------------------------------------------
# example config, systemd unit, docs
# --------------------------------------------------------------------------

SETTING = re.compile(r"^\s*#?\s*([a-z][a-z0-9_.-]*)\s*=\s*(.*?)\s*$")


def example_settings(commented=True):
    """(name, value) of every setting line of the example config, including
    the commented-out alternatives when commented=True."""
    out = []
    with open(EXAMPLE_CONF) as f:
        for line in f:
            if line.lstrip().startswith("#") and not commented:
                continue
            m = SETTING.match(line)
            if m:
                out.append((m.group(1), m.group(2)))
    return out


def test_example_config_is_valid(tmp_path):
    """Every setting of docker/outbox-relay.conf.example, the commented
    alternatives included, is an option the binary accepts with a valid
    value (loaded by `--config FILE --help`, which reads the file and stops)
    or a librdkafka property; as shipped it holds no password, so it loads
    without the readable-secrets warning."""
    binary = _binary("outbox-relay")
    opts = help_options("outbox-relay")
    settings = example_settings()
    names = {n for n, _ in settings}
    assert {"dsn", "brokers", "kafka.security.protocol", "kafka.sasl.mechanisms",
            "kafka.ssl.ca.location"} <= names, names
    bad = []
    for n, v in settings:
        if n.startswith("kafka."):
            if n[6:] not in kafka_properties():
                bad.append("%s: librdkafka has no such property" % n)
        elif n not in opts or n == "config":
            bad.append("%s: not an option" % n)
    assert not bad, "\n".join(bad)

    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    res = subprocess.run([binary, "--config", EXAMPLE_CONF, "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=10, env=env)
    assert res.returncode == 0, res.stderr
    assert "readable" not in res.stderr, res.stderr
    # Uncommented, one alternative at a time wins; every value must load.
    full = tmp_path / "all.conf"
    full.write_text("".join("%s = %s\n" % (n, v) for n, v in settings))
    os.chmod(full, 0o600)
    res = subprocess.run([binary, "--config", str(full), "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=10, env=env)
    assert res.returncode == 0, res.stderr
    # The DSNs in it ask for verified TLS.
    for n, v in settings:
        if n == "dsn":
            assert "sslmode=verify-full" in v, v
            assert "password=" not in v and not re.search(r"://[^/@]*:[^/@]*@", v), v


def test_systemd_unit(tmp_path):
    """systemd-analyze verify finds nothing to say about the unit (it
    exits 0 even on unknown keys, so any output fails), the unit is
    hardened (offline `security` exposure), and its names agree with the
    example config and the binary's options."""
    with open(UNIT) as f:
        unit = f.read()
    keys = dict(re.findall(r"^([A-Za-z]+)=(.*)$", unit, re.M))
    for k, v in (("Restart", "on-failure"), ("NoNewPrivileges", "yes"),
                 ("ProtectSystem", "strict")):
        assert keys.get(k) == v, (k, keys.get(k))
    assert keys.get("User") and keys["User"] != "root"
    assert "EnvironmentFile" in keys and "RestartPreventExitStatus" in keys
    execstart = shlex.split(keys["ExecStart"])
    assert os.path.basename(execstart[0]) == "outbox-relay"
    opts = help_options("outbox-relay")
    for a in execstart[1:]:
        if a.startswith("--"):
            assert a[2:].split("=")[0] in opts, a
    env_lines = re.findall(r"^Environment=(.*)$", unit, re.M)
    env = dict(kv.split("=", 1) for line in env_lines for kv in shlex.split(line))
    assert not check_env_names(env, "OUTBOX_RELAY_", opts)
    stop = keys.get("TimeoutStopSec", "90s").rstrip("s")
    assert float(stop) > 30, "TimeoutStopSec must exceed --shutdown-timeout"

    sa = shutil.which("systemd-analyze")
    if sa is None:
        pytest.skip("systemd-analyze not installed; unit checked by hand only")
    copy = tmp_path / "outbox-relay.service"
    copy.write_text(unit.replace(execstart[0], _binary("outbox-relay")))
    res = subprocess.run([sa, "verify", str(copy)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "", res.stdout
    res = subprocess.run([sa, "security", "--offline=yes", str(copy)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", res.stdout)
    if m is None:
        pytest.skip("systemd-analyze security --offline unavailable: %s" % res.stdout[-300:])
    assert float(m.group(1)) <= 2.5, res.stdout[-3000:]


def test_deploy_doc_names_exist():
    """Every outbox-relay option and OUTBOX_RELAY_* variable docs/deploy.md
    uses exists, and the files it tells people to use are there."""
    with open(DEPLOY_DOC) as f:
        doc = f.read()
    opts = help_options("outbox-relay")
    consume_opts = help_options("outbox-consume")
    # Names, not placeholders such as OUTBOX_RELAY_KAFKA_<PROPERTY> or OUTBOX_CONSUME_KAFKA_*.
    env = {m: "" for m in re.findall(r"\b(OUTBOX_(?:RELAY|CONSUME)_[A-Z0-9_]*[A-Z0-9])(?![<*A-Z0-9_])",
                                     doc)}
    bad = check_env_names(env, "OUTBOX_RELAY_", opts)
    bad += check_env_names(env, "OUTBOX_CONSUME_", consume_opts)
    # Command lines of outbox-relay (with continuation lines).
    lines, cur = [], ""
    for line in doc.splitlines():
        cur += line.rstrip("\\") + " "
        if not line.endswith("\\"):
            lines.append(cur)
            cur = ""
    for line in lines:
        m = re.search(r"(?:^|[\s/`])outbox-relay(?:\s+(?:run|status|reap))?\s+(--.*)", line)
        if not m or "outbox-relay.service" in line:
            continue
        for o in re.findall(r"(?:^|\s)--([a-z][a-z0-9-]*)", m.group(1)):
            if o not in opts and o not in ("help", "version"):
                bad.append("docs: outbox-relay --%s is no option" % o)
    for path in re.findall(r"\b(docker/[A-Za-z0-9_./-]+|sql/[A-Za-z0-9_./-]+\.sql)", doc):
        path = path.rstrip(".")
        if "*" in path or path.endswith(".env"):  # files the reader creates
            continue
        if not os.path.exists(os.path.join(REPO, path)):
            bad.append("docs: %s does not exist" % path)
    assert not bad, "\n".join(bad)
    for must in ("docker compose", "systemctl", "wal_level", "max_slot_wal_keep_size",
                 "sslmode=verify-full", "sslrootcert", "pg_hba", "security.protocol",
                 "readyz"):
        assert must in doc, must
