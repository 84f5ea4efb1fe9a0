"""test_security.py — the relayer's security promises, against a real
PostgreSQL, the mock broker and the built binary.

  test_tls_verify_full[right-ca]         sslmode=verify-full with the test CA and
                                         host=localhost: events flow, and pg_stat_ssl
                                         shows the walsender's connection encrypted
                                         (pg_hba is hostssl-only, plaintext refused)
  test_tls_verify_full[wrong-ca|wrong-host]
                                         another CA / a name the certificate does not
                                         carry: a certificate error, no slot, nothing
                                         streamed
  test_secrets_not_logged_under_stress   awkward passwords (quotes, spaces, %, @,
                                         backslash) in key=value and URI DSNs, a
                                         wrong password, SASL over plaintext against a
                                         broker without SASL, librdkafka debug output,
                                         JSON log format, a PostgreSQL restart and a
                                         broker outage: no secret, raw or URI-encoded,
                                         in any line
  test_kafka_tls_misconfiguration_is_reported
                                         missing CA file: exit 2; TLS to a plaintext
                                         broker: handshake error, nothing confirmed
  test_usage_errors_do_not_echo_secrets  --help, bad flags, bad DSNs, bad -X, a bad config
                                         line, secrets in the environment: no secret on
                                         stdout or stderr
  test_mistyped_arguments_do_not_echo_secrets
                                         the same for the DSN given without --dsn and
                                         -X with ':' for '='
  test_config_file_permissions_warning   a config file holding a password and readable
                                         by others: a warning; 0600 / 0640: none
  test_config_file_permissions_warning_in_a_real_run
  test_hostile_names_rejected            --slot/--table/--topic/--message-prefix/
                                         --dead-letter-topic with quotes, semicolons,
                                         backslashes, unicode: exit 2 with a message,
                                         whatever the source (flag, env, file), and
                                         nothing runs on the server
  test_rejection_messages_are_valid_utf8 a refused non-ASCII value leaves the message
                                         valid UTF-8
  test_message_prefix_with_punctuation_is_quoted
                                         allowed punctuation (; $ : / .) reaches wal2json
                                         intact and matches exactly
  test_message_prefix_accepted_is_relayed
                                         a prefix with '"' or spaces is refused at
                                         startup or works; never accepted and then
                                         silently skipped
  test_hostile_event_types               types with quotes, newlines and unicode go to
                                         the dead-letter topic unchanged and cannot
                                         forge log lines
  test_least_privilege_role              the role of sql/003_relay_role.sql with a
                                         password and one documented pg_hba line: it
                                         streams, reaps, heartbeats and answers
                                         `status`, and cannot write (or read) business
                                         tables, forge events, escalate or replicate
                                         physically
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import uuid

import psycopg2
import pytest

import harness
from harness import wait_until
from core_helpers import wait_streaming

# once per output plugin (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.real_kafka]

STATUS = "0.5"
REAP_INTERVAL = 60      # s, --reap-interval's default
SLOT = "outbox_relay"


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

@pytest.fixture
def cluster_factory():
    """Like pg_factory, for PgCluster subclasses with their own pg_hba."""
    made = []

    def make(cls, **kw):
        c = cls(**kw)
        made.append(c)
        return c

    yield make
    for c in reversed(made):
        c.cleanup()


def run_binary(args, env=None, timeout=15):
    """Runs build/outbox-relay to completion; (rc, stdout, stderr)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    full.update(env or {})
    res = subprocess.run([os.path.join(harness.build_dir(), "outbox-relay")] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full,
                         timeout=timeout)
    return (res.returncode, res.stdout.decode("utf-8", "replace"),
            res.stderr.decode("utf-8", "replace"))


def insert_events(pg, typ, n=1, **conn_kw):
    """Inserts n outbox rows of type typ in one transaction; returns ids."""
    conn = pg.connect(autocommit=False, **conn_kw)
    cur = conn.cursor()
    ids = []
    for i in range(n):
        cur.execute("INSERT INTO public.events_outbox (aggregate_id, type, payload) "
                    "VALUES (%s, %s, %s::jsonb) RETURNING id",
                    (str(uuid.uuid4()), typ, json.dumps({"i": i})))
        ids.append(cur.fetchone()[0])
    conn.commit()
    conn.close()
    return ids


def event_ids(msgs):
    return sorted(int(m.headers["event_id"]) for m in msgs)


def lines_with(text, secret):
    return "\n".join(l for l in text.splitlines() if secret in l)[:2000]


# --------------------------------------------------------------------------
# TLS to PostgreSQL
# --------------------------------------------------------------------------

def _openssl(*args, cwd):
    res = subprocess.run(["openssl"] + list(args), cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60)
    assert res.returncode == 0, "openssl %s:\n%s" % (" ".join(args), res.stdout)


def _make_ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-days", "3",
             "-subj", "/CN=outbox-relay test %s" % name, cwd=d)


@pytest.fixture(scope="module")
def tls_files():
    """A test CA, a server certificate it signed for localhost / 127.0.0.1,
    and an unrelated CA; in a dir everyone can read (the postgres user
    copies from it). Removed at the end of the module."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (tests/tools/setup.sh installs it)")
    d = tempfile.mkdtemp(prefix="outbox-tls-")
    os.chmod(d, 0o755)
    try:
        _make_ca(d, "ca")
        _make_ca(d, "other-ca")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
        with open(os.path.join(d, "server.ext"), "w") as f:
            f.write("subjectAltName = DNS:localhost, IP:127.0.0.1\n"
                    "basicConstraints = CA:FALSE\n"
                    "keyUsage = digitalSignature, keyEncipherment\n"
                    "extendedKeyUsage = serverAuth\n")
        _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", "server.crt", "-days", "3", "-extfile", "server.ext",
                 cwd=d)
        for f in os.listdir(d):
            os.chmod(os.path.join(d, f), 0o644)
        yield {k: os.path.join(d, k + ".crt") for k in ("ca", "other-ca", "server")} | \
            {"server.key": os.path.join(d, "server.key")}
    finally:
        shutil.rmtree(d, ignore_errors=True)


class TlsCluster(harness.PgCluster):
    """ssl=on with the test server certificate (owned by postgres, key
    0600, in the data dir) and a pg_hba where every TCP line is hostssl:
    a plaintext TCP connection has no entry and is refused."""

    def __init__(self, tls, **kw):
        self.tls = tls
        settings = {"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key",
                    "ssl_min_protocol_version": "TLSv1.2"}
        super().__init__(settings=settings, name="tls", **kw)

    def _write_hba(self):
        for src, dst, mode in ((self.tls["server"], "server.crt", 0o644),
                               (self.tls["server.key"], "server.key", 0o600)):
            path = os.path.join(self.datadir, dst)
            shutil.copy(src, path)
            os.chmod(path, mode)
            shutil.chown(path, "postgres", "postgres")
        lines = ["local all all trust",
                 "local replication all trust",
                 "hostssl all all 127.0.0.1/32 trust",
                 "hostssl all all ::1/128 trust"]
        path = os.path.join(self.datadir, "pg_hba.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        shutil.chown(path, "postgres", "postgres")


@pytest.mark.parametrize("case", ["right-ca", "wrong-ca", "wrong-host"])
def test_tls_verify_full(cluster_factory, tls_files, broker, kafka, relayer, case):
    pg = cluster_factory(TlsCluster, tls=tls_files)
    # The server refuses plaintext, so whatever connects below used TLS.
    with pytest.raises(psycopg2.OperationalError, match="no encryption"):
        psycopg2.connect(pg.dsn(sslmode="disable"), connect_timeout=5)

    ca = tls_files["other-ca" if case == "wrong-ca" else "ca"]
    host = "host=localhost"
    if case == "wrong-host":
        # Reaches 127.0.0.1 but expects a name the certificate does not carry.
        host = "host=db.outbox-test.invalid hostaddr=127.0.0.1"
    dsn = "%s port=%d dbname=postgres user=postgres sslmode=verify-full sslrootcert=%s" % (
        host, pg.port, ca)
    r = relayer("--dsn", dsn, "--brokers", broker.bootstrap, "--status-interval", STATUS,
                "--reconnect-max", "1")
    if case == "right-ca":
        wait_streaming(pg, r)
        pid = pg.slot_info()["active_pid"]
        ssl = pg.query("SELECT ssl, version FROM pg_stat_ssl WHERE pid = %s", (pid,))
        assert ssl and ssl[0][0] is True, "walsender %s not on TLS: %r" % (pid, ssl)
        ids = insert_events(pg, "tls.event", 3)
        assert event_ids(kafka.read("tls", expected=3, timeout=60)) == ids
        assert r.terminate() == 0
        return

    want = r"certificate verify failed" if case == "wrong-ca" else \
        r"does not match host name|certificate.*db\.outbox-test\.invalid"
    r.wait_for_log(want, timeout=30)
    time.sleep(2)  # a couple of reconnect attempts
    log = r.log_text()
    assert re.search(r"\b(warn|error)\b", log), log
    assert pg.slot_info() is None, "a slot was created over an unverified connection"
    assert pg.scalar("SELECT count(*) FROM pg_stat_replication") == 0
    assert "streaming" not in log.lower(), log
    if r.running():
        r.terminate()


# --------------------------------------------------------------------------
# secrets
# --------------------------------------------------------------------------

# Distinctive and awkward: a quote, a space, a backslash, '@', '%' and '#'.
PG_SECRET = "Zq7#pw'Sp ace@x%41\\Tail"
PG_WRONG = "Wr0ng#pw'Sp ace@x%41\\Tail"
KAFKA_SECRET = "Kx9-sasl'Sec ret%2F@Tail"
CORE_TOKENS = ("Zq7#pw", "Wr0ng#pw", "Kx9-sasl")  # any partial leak shows one of these


def kv_quote(v):
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


def secret_forms(secret):
    """The ways a secret could show up: raw, URI-encoded, conninfo-quoted,
    JSON-escaped, and its distinctive start."""
    return {secret, urllib.parse.quote(secret, safe=""), kv_quote(secret),
            json.dumps(secret)[1:-1], secret.split("'")[0]}


def assert_no_secret(text, secrets, where):
    assert text.strip(), "%s is empty" % where
    for s in secrets:
        for form in secret_forms(s):
            assert form not in text, "%s leaks %r:\n%s" % (where, form, lines_with(text, form))
    for tok in CORE_TOKENS:
        assert tok not in text, "%s leaks %r:\n%s" % (where, tok, lines_with(text, tok))


@pytest.mark.parametrize("variant", [
    pytest.param("keyword-sasl-plaintext", marks=pytest.mark.mock_kafka(
        "every broker down while deliveries wait: the mock's \"down\"")),
    "uri-sasl-failing", "wrong-password-json"])
def test_secrets_not_logged_under_stress(pg_factory, broker, kafka, relayer, variant):
    pg = pg_factory(password_auth="scram-sha-256", name="secrets")
    pg.query("CREATE ROLE relay_pw LOGIN REPLICATION PASSWORD %s", (PG_SECRET,))
    pg.query("GRANT SELECT, DELETE ON public.events_outbox TO relay_pw")
    pg.prepare_for_unprivileged_relayer()
    password = PG_WRONG if variant.startswith("wrong") else PG_SECRET
    if variant.startswith("uri"):
        dsn = "postgresql://relay_pw:%s@127.0.0.1:%d/postgres?application_name=x" % (
            urllib.parse.quote(password, safe=""), pg.port)
    else:
        dsn = "host=127.0.0.1 port=%d dbname=postgres user=relay_pw password=%s" % (
            pg.port, kv_quote(password))
    kafka_args = ["-X", "sasl.username=u", "-X", "sasl.password=" + KAFKA_SECRET,
                  "-X", "debug=broker,security,conf"]
    if variant == "uri-sasl-failing":
        # The mock broker has no SASL: every connection fails authentication.
        kafka_args += ["-X", "security.protocol=sasl_plaintext", "-X", "sasl.mechanisms=PLAIN"]
    else:
        kafka_args += ["-X", "security.protocol=plaintext"]
    extra = ["--log-format", "json"] if variant.endswith("json") else []
    r = relayer("--dsn", dsn, "--brokers", broker.bootstrap, "--status-interval", STATUS,
                "--log-level", "debug", "--reconnect-max", "1", "--shutdown-timeout", "2",
                *kafka_args, *extra)

    if variant.startswith("wrong"):
        r.wait_for_log(r"password authentication failed", timeout=30)
        time.sleep(2)  # a few more attempts, each logged
    else:
        wait_streaming(pg, r)
        if variant == "uri-sasl-failing":
            # Restart while nothing is in flight: with deliveries stuck, a
            # fast shutdown waits for the relayer to confirm them (the
            # walsender exits only once its client flushed what it sent).
            pg.restart()                # PostgreSQL errors and a reconnect
            wait_streaming(pg, r, timeout=90)
        ids = insert_events(pg, "sec.one", 2)
        if variant == "keyword-sasl-plaintext":
            assert event_ids(kafka.read("sec", expected=2, timeout=60)) == ids
            r.mark()
            broker.cmd("down")          # broker errors while deliveries wait
            more = insert_events(pg, "sec.two", 1)
            r.wait_for_log(r"brokers are down|refused|disconnected", timeout=30, since_mark=True)
            time.sleep(1)
            broker.cmd("up")
            assert len(kafka.read("sec", expected=3, timeout=60)) >= 3, more
            pg.restart()                # PostgreSQL errors and a reconnect
            wait_streaming(pg, r, timeout=90)
        else:
            r.wait_for_log(r"SASL authentication|_AUTHENTICATION", timeout=30)
            time.sleep(2)
    if r.running():
        r.terminate()
    log = r.log_text()
    assert_no_secret(log, [PG_SECRET, PG_WRONG, KAFKA_SECRET], "the log (%s)" % variant)
    assert len(log.splitlines()) > 20, "suspiciously little logged at debug:\n" + log
    if variant.endswith("json"):
        for line in log.splitlines():
            if line.startswith("{"):
                json.loads(line)


def test_kafka_tls_misconfiguration_is_reported(pg, broker, kafka, relayer):
    """The mock broker speaks neither TLS nor SASL, so what can be tested of
    Kafka TLS is its failures: a CA file that does not exist stops the
    relayer at start (exit 2, naming the property, no slot); TLS towards a
    plaintext broker logs the handshake failure, delivers nothing and
    confirms nothing past the undelivered event."""
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap,
                "-X", "security.protocol=ssl", "-X", "ssl.ca.location=/nonexistent/ca.pem")
    assert r.wait_exit(20) == 2, r.log_tail()
    assert "ssl.ca.location" in r.log_text(), r.log_tail()
    assert pg.slot_info() is None

    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", STATUS,
                "--shutdown-timeout", "1", "-X", "security.protocol=ssl")
    wait_streaming(pg, r)
    insert_events(pg, "tlsk.event", 1)
    after = harness.lsn_to_int(pg.scalar("SELECT pg_current_wal_insert_lsn()"))
    r.wait_for_log(r"SSL handshake failed|ssl.*(handshake|record|wrong version)", timeout=30)
    time.sleep(2)
    assert pg.confirmed_flush_lsn() < after, "confirmed past an undelivered event"
    assert kafka.read("tlsk", timeout=3, wait_topic=False) == []
    r.terminate()


@pytest.mark.plugins("wal2json")  # refused before any connection: no plugin involved
def test_usage_errors_do_not_echo_secrets(tmp_path):
    """Nothing the binary prints before it runs — help, version, a bad flag,
    a bad value, a bad DSN, a bad -X, a bad config line — contains a
    secret given in the DSN, in -X, in the environment or in a config file."""
    kv_dsn = "host=127.0.0.1 port=1 dbname=app user=u password=%s" % kv_quote(PG_SECRET)
    uri_dsn = "postgresql://u:%s@127.0.0.1:1/app" % urllib.parse.quote(PG_SECRET, safe="")
    secrets = ["-X", "sasl.password=" + KAFKA_SECRET]
    conf = tmp_path / "bad.conf"
    conf.write_text("dsn = %s\nkafka.sasl.password = %s\nmax-inflight = lots\n"
                    % (kv_dsn, KAFKA_SECRET))
    os.chmod(conf, 0o600)
    cases = {
        "help": ["--dsn", kv_dsn, *secrets, "--help"],
        "version": ["--dsn", uri_dsn, *secrets, "--version"],
        "bogus-flag": ["--dsn", kv_dsn, "--brokers", "k:9", *secrets, "--bogus"],
        "bad-value": ["--dsn", uri_dsn, "--brokers", "k:9", *secrets, "--max-inflight", "x"],
        "bad-dsn-syntax": ["--dsn", kv_dsn + " 'unterminated", "--brokers", "k:9", *secrets],
        "bad-dsn-keyword": ["--dsn", kv_dsn + " bogus_keyword=1", "--brokers", "k:9"],
        "bad-uri-escape": ["--dsn", uri_dsn.replace("@127", "%zz@127"), "--brokers", "k:9"],
        "bad-slot": ["--dsn", uri_dsn, "--brokers", "k:9", *secrets, "--slot", "Bad-Slot"],
        "bad-kafka-value": ["--dsn", kv_dsn, "--brokers", "k:9", *secrets,
                            "-X", "security.protocol=nonsense", "--reconnect-max", "0.1"],
        "config-file": ["--config", str(conf), "--brokers", "k:9"],
        "missing-brokers": ["--dsn", uri_dsn, *secrets],
    }
    leaks = _usage_leaks(cases)
    # The environment and the DSN-in-env forms.
    rc, out, err = run_binary(["--bogus"], env={"OUTBOX_RELAY_DSN": kv_dsn,
                                                "OUTBOX_RELAY_KAFKA_SASL_PASSWORD": KAFKA_SECRET})
    assert rc == 2
    for s in (PG_SECRET, KAFKA_SECRET):
        if any(f in out + err for f in secret_forms(s)):
            leaks.append("env: " + err)
    assert not leaks, "secrets echoed by usage errors:\n" + "\n".join(sorted(set(leaks)))


@pytest.mark.plugins("wal2json")  # refused before any connection: no plugin involved
def test_mistyped_arguments_do_not_echo_secrets():
    """Mistakes users make with secrets in hand: the DSN given without
    --dsn (as the command, or as a stray argument), -X with ':' for '='.
    The error must say what is wrong without repeating the argument, which
    here holds the password (stderr ends up in journald, CI logs, tickets)."""
    kv_dsn = "host=127.0.0.1 port=1 dbname=app user=u password=%s" % kv_quote(PG_SECRET)
    uri_dsn = "postgresql://u:%s@127.0.0.1:1/app" % urllib.parse.quote(PG_SECRET, safe="")
    cases = {
        "dsn-without-flag": [uri_dsn, "--brokers", "k:9"],
        "dsn-as-extra-argument": ["run", "--brokers", "k:9", kv_dsn],
        "x-with-colon": ["--dsn", kv_dsn, "--brokers", "k:9", "-X", "sasl.password:" + KAFKA_SECRET],
    }
    leaks = _usage_leaks(cases)
    assert not leaks, "secrets echoed by usage errors:\n" + "\n".join(sorted(set(leaks)))


def _usage_leaks(cases):
    """Runs each argv; returns "case (stream): line" for every secret seen.
    Every case but help/version must fail with a message."""
    leaks = []
    for name, args in cases.items():
        rc, out, err = run_binary(args, timeout=20)
        assert rc in (0, 1, 2), (name, rc, err)
        if name not in ("help", "version"):
            assert rc != 0 and err.strip(), "%s: rc=%s, nothing said" % (name, rc)
        for text, where in ((out, "stdout"), (err, "stderr")):
            for s in (PG_SECRET, KAFKA_SECRET):
                for form in secret_forms(s):
                    if form in text:
                        leaks.append("%s (%s): %s" % (name, where, lines_with(text, form)))
    return leaks


@pytest.mark.parametrize("content,mode,warn", [
    ("dsn", 0o644, True),
    ("uri", 0o604, True),
    ("kafka", 0o644, True),
    ("dsn", 0o600, False),
    ("dsn", 0o640, False),
    ("none", 0o644, False),
], ids=["dsn-644", "uri-604", "sasl-644", "dsn-600", "dsn-640", "no-secret-644"])
@pytest.mark.plugins("wal2json")  # the config file's check, before any connection
def test_config_file_permissions_warning(tmp_path, content, mode, warn):
    """The warning comes from reading the file, before anything else: one
    --help run per case shows it (or its absence) without a server."""
    path = tmp_path / "relay.conf"
    lines = ["brokers = 127.0.0.1:9"]
    if content == "dsn":
        lines.append("dsn = host=db dbname=app user=outbox_relay password=%s" % kv_quote(PG_SECRET))
    elif content == "uri":
        lines.append("dsn = postgresql://outbox_relay:%s@db/app"
                     % urllib.parse.quote(PG_SECRET, safe=""))
    elif content == "kafka":
        lines += ["dsn = host=db dbname=app user=outbox_relay",
                  "kafka.sasl.password = " + KAFKA_SECRET]
    else:
        lines.append("dsn = host=db dbname=app user=outbox_relay passfile=/etc/outbox-relay/pgpass")
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, mode)
    rc, out, err = run_binary(["--config", str(path), "--help"])
    assert rc == 0, err
    said = re.search(r"warn.*%s.*readable by other" % re.escape(str(path)), err)
    assert bool(said) == warn, "mode %o, %s: stderr=%r" % (mode, content, err)
    if warn:
        assert "chmod 600" in err, err
    for s in (PG_SECRET, KAFKA_SECRET):
        assert not any(f in err + out for f in secret_forms(s)), err


def test_config_file_permissions_warning_in_a_real_run(pg_factory, broker, kafka, relayer,
                                                        tmp_path):
    """The same with the relayer running from the file: a world-readable
    file with the DSN password warns once and still works; after chmod 600
    the next start says nothing about it. The secret is not in either log."""
    pg = pg_factory(password_auth="scram-sha-256", name="conf")
    pg.query("CREATE ROLE relay_conf LOGIN REPLICATION PASSWORD %s", (PG_SECRET,))
    pg.query("GRANT SELECT, DELETE ON public.events_outbox TO relay_conf")
    pg.prepare_for_unprivileged_relayer()
    path = tmp_path / "relay.conf"
    path.write_text("dsn = host=127.0.0.1 port=%d dbname=postgres user=relay_conf password=%s\n"
                    "brokers = %s\nstatus-interval = %s\n"
                    % (pg.port, kv_quote(PG_SECRET), broker.bootstrap, STATUS))
    os.chmod(path, 0o644)
    r = relayer("--config", str(path))
    wait_streaming(pg, r)
    ids = insert_events(pg, "conf.a", 1)
    assert event_ids(kafka.read("conf", expected=1, timeout=60)) == ids
    assert r.terminate() == 0
    log1 = r.log_text()
    assert len(re.findall(r"readable by other users", log1)) == 1, log1

    os.chmod(path, 0o600)
    r = relayer("--config", str(path))
    wait_streaming(pg, r)
    assert r.terminate() == 0
    log2 = r.log_text()
    assert "readable by other" not in log2, log2
    assert_no_secret(log1 + log2, [PG_SECRET], "the logs")


# --------------------------------------------------------------------------
# hostile names
# --------------------------------------------------------------------------

HOSTILE = {
    "slot": ["x'; DROP TABLE victim; --", 'x"y', "x;y", "x\\y", "slöt", "Upper", "a b",
             "x" * 64, ""],
    "table": ["public.victim; DROP TABLE victim; --", 'public."victim"', "public.vic'tim",
              "public.victim\\", "public.tëst", "public.a b", "pub;lic.victim", "a.b.c",
              "public.", ".victim", "public.*", "public.victim,public.orders"],
    "topic": ["{prefix};rm", "t'q", 't"q', "t\\q", "tö", "{prefix}/x", "{un'known}", "t q",
              "{type", ""],
    "dead-letter-topic": ["dl'x", "dl;x", "dlé", "{type}"],
    "message-prefix": ["out'box", "out\\box", "a,b", "out\nbox", "préfix", "tab\there"],
}


def _hostile_cases():
    for opt, values in HOSTILE.items():
        for i, v in enumerate(values):
            yield pytest.param(opt, v, id="%s-%d" % (opt, i))


@pytest.mark.plugins("wal2json")  # refused before any connection: no plugin involved
@pytest.mark.parametrize("opt,value", list(_hostile_cases()))
def test_hostile_names_rejected(hostile_pg, opt, value):
    """Exit 2 within seconds with a message naming the option, for the
    command line, the environment and a config file alike; PostgreSQL is
    reachable, yet no slot is created and the victim table survives."""
    pg = hostile_pg
    base = ["--dsn", pg.dsn(), "--brokers", "127.0.0.1:9"]
    rc, out, err = run_binary(base + ["--%s=%s" % (opt, value)])
    assert rc == 2, "--%s=%r: rc=%s\n%s" % (opt, value, rc, err)
    label = opt.split("-")[0] if opt != "dead-letter-topic" else "dead-letter-topic"
    assert label in err.lower(), "message does not name --%s: %r" % (opt, err)
    assert err.count("\n") <= 2, "a multi-line message: %r" % err

    env_name = "OUTBOX_RELAY_" + opt.upper().replace("-", "_")
    if "\n" not in value and value:
        rc, _, err = run_binary(base, env={env_name: value})
        assert rc == 2, "%s=%r: rc=%s\n%s" % (env_name, value, rc, err)
    if "\n" not in value and value.strip() == value and value:
        conf = os.path.join(hostile_pg.dir, "hostile.conf")
        with open(conf, "w") as f:
            f.write("%s = %s\n" % (opt, value))
        rc, _, err = run_binary(base + ["--config", conf])
        assert rc == 2, "config %s = %r: rc=%s\n%s" % (opt, value, rc, err)
    assert pg.scalar("SELECT count(*) FROM pg_replication_slots") == 0
    assert pg.scalar("SELECT to_regclass('public.victim') IS NOT NULL") is True


@pytest.fixture(scope="module")
def hostile_pg():
    """One cluster for all hostile-name cases (none of them may touch it)."""
    pg = harness.PgCluster(name="hostile")
    pg.query("CREATE TABLE public.victim (id int); INSERT INTO public.victim VALUES (1)")
    yield pg
    pg.cleanup()


def _emit(pg, prefix, typ):
    env = json.dumps({"aggregate_id": str(uuid.uuid4()), "type": typ, "payload": {"k": 1}})
    pg.query("SELECT pg_logical_emit_message(true, %s, %s)", (prefix, env))


@pytest.mark.plugins("wal2json")  # refused before any connection: no plugin involved
def test_rejection_messages_are_valid_utf8(hostile_pg):
    """A refused non-ASCII value is quoted whole or not at all: the message
    stays valid UTF-8 (journald, JSON log shippers and terminals need it)."""
    bad = []
    for opt, value in (("slot", "slöt"), ("table", "public.tëst"), ("topic", "tö"),
                       ("topic", "{prefix}.ü"), ("dead-letter-topic", "dlé"),
                       ("message-prefix", "préfix")):
        full = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
        res = subprocess.run([os.path.join(harness.build_dir(), "outbox-relay"),
                              "--dsn", hostile_pg.dsn(), "--brokers", "127.0.0.1:9",
                              "--%s=%s" % (opt, value)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=full, timeout=15)
        assert res.returncode == 2, (opt, value, res.stderr)
        try:
            res.stderr.decode("utf-8")
        except UnicodeDecodeError:
            bad.append("--%s=%s: %r" % (opt, value, res.stderr))
    assert not bad, "error messages with broken UTF-8:\n" + "\n".join(bad)


def test_message_prefix_with_punctuation_is_quoted(pg, broker, kafka, relayer):
    """Punctuation the prefix may contain (; $ : / .) goes into the
    START_REPLICATION options inside a quoted literal: the relayer starts and
    relays messages with exactly that prefix, and no others."""
    prefix = "ev;x$y:z/w.v"
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", STATUS,
                "--message-prefix", prefix, "--topic", "msgs")
    wait_streaming(pg, r)
    _emit(pg, prefix, "m.one")
    _emit(pg, "ev", "m.other")
    _emit(pg, "outbox", "m.default")
    insert_events(pg, "marker", 1)
    kafka.read("msgs", expected=2, timeout=60)
    time.sleep(1)
    types = sorted(m.headers.get("event_type") for m in kafka.read("msgs", timeout=3))
    assert types == ["m.one", "marker"], types
    assert r.terminate() == 0


@pytest.mark.parametrize("prefix", ['ev"q', "ev q", "outbox "], ids=["dquote", "space", "trailing-space"])
def test_message_prefix_accepted_is_relayed(pg, broker, kafka, relayer, prefix):
    """A --message-prefix the relayer accepts must work: either it is
    refused at startup (exit 2, before a slot exists), or messages with
    exactly that prefix are relayed. Accepting it and then skipping every
    such message — while confirming the slot past them — loses events."""
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", STATUS,
                "--message-prefix", prefix, "--topic", "msgs")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and r.running() and not (pg.slot_info() or {}).get("active"):
        time.sleep(0.1)
    if not r.running():
        assert r.returncode == 2, "--message-prefix %r accepted, then rc=%s:\n%s" % (
            prefix, r.returncode, r.log_tail())
        assert pg.slot_info() is None, "slot created before the prefix was refused"
        return
    wait_streaming(pg, r)
    _emit(pg, prefix, "m.exact")
    marker = insert_events(pg, "marker", 1)
    msgs = kafka.read("msgs", expected=2, timeout=30)
    types = sorted(m.headers.get("event_type") for m in msgs)
    assert "m.exact" in types, ("--message-prefix %r was accepted, but a message with exactly "
                                "that prefix was not relayed (got %r); log:\n%s"
                                % (prefix, types, r.log_tail(15)))
    assert marker


def test_hostile_event_types(pg, broker, kafka, relayer):
    """Event types are data from the outbox: ones that make no valid topic
    (quotes, semicolons, newlines, unicode) go to the dead-letter topic with
    their type header unchanged, the relay goes on, and no type can forge a
    log line (a newline in a type must not start a new line in the log)."""
    hostile = ["order'; DROP TABLE victim; --", 'or"der', "ünïcödé.placed",
               "order\n2026-01-01T00:00:00.000Z info  forged line", "a/b", "x" * 250]
    pg.query("CREATE TABLE public.victim (id int)")
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", STATUS,
                "--on-poison", "dead-letter")
    wait_streaming(pg, r)
    bad_ids = []
    for t in hostile:
        bad_ids += insert_events(pg, t, 1)
    good = insert_events(pg, "fine.event", 1)
    assert event_ids(kafka.read("fine", expected=1, timeout=60)) == good
    dl = kafka.read("outbox.dead-letter", expected=len(hostile), timeout=60)
    assert event_ids(dl) == bad_ids, dl
    assert sorted(m.headers["event_type"] for m in dl) == sorted(hostile)
    assert r.running(), r.log_tail()
    assert r.terminate() == 0
    assert pg.scalar("SELECT to_regclass('public.victim') IS NOT NULL") is True
    forged = [l for l in r.log_text().splitlines() if "forged line" in l and
              re.match(r"^\d{4}-\d\d-\d\dT[\d:.]+Z\s+info\s+forged line", l)]
    assert not forged, "an event type forged a log line:\n%s\nfull log:\n%s" % (
        "\n".join(forged), r.log_tail(30))


# --------------------------------------------------------------------------
# least privilege
# --------------------------------------------------------------------------

RELAY_PASSWORD = "Lp-9vTq2-relay"


class LeastPrivilegeCluster(harness.PgCluster):
    """pg_hba as docs/deploy.md prescribes for the relayer: one line for the
    outbox's database, password (scram) required, no "replication" line.
    The harness's own postgres user stays trusted."""

    def _write_hba(self):
        lines = ["local all all trust",
                 "local replication all trust",
                 "host all postgres 127.0.0.1/32 trust",
                 "host replication postgres 127.0.0.1/32 trust",
                 "host postgres outbox_relay 127.0.0.1/32 scram-sha-256"]
        path = os.path.join(self.datadir, "pg_hba.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        shutil.chown(path, "postgres", "postgres")


@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_least_privilege_role(cluster_factory, broker, kafka, relayer, tuning):
    """The relayer, its reaper and `status` as the role sql/003 makes, and
    nothing more. "defaults": no tuning flag (only --retention, the policy
    under test): the reaper's first run is after the default 60 s
    --reap-interval."""
    pg = cluster_factory(LeastPrivilegeCluster, settings={"password_encryption": "scram-sha-256"},
                         name="leastpriv")
    # The role exactly as sql/003_relay_role.sql makes it (the harness loaded
    # sql/*.sql), plus the password the docs tell you to set.
    attrs = pg.query("SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, "
                     "rolcanlogin FROM pg_roles WHERE rolname = 'outbox_relay'")
    assert attrs == [(False, False, False, True, False, True)], attrs
    pg.query("ALTER ROLE outbox_relay PASSWORD %s", (RELAY_PASSWORD,))
    pg.query("CREATE TABLE public.orders (id serial PRIMARY KEY, amount int);"
             "INSERT INTO public.orders (amount) VALUES (100)")
    with open(os.path.join(harness.REPO_ROOT, "sql", "003_relay_role.sql")) as f:
        pg.query(f.read())  # idempotent: loading it again changes nothing
    pg.prepare_for_unprivileged_relayer()  # pgoutput: the owner creates the publication

    dsn = pg.dsn(user="outbox_relay", password=RELAY_PASSWORD)
    r = relayer("--dsn", dsn, "--brokers", broker.bootstrap, "--retention", "1 second",
                "--metrics-addr", "127.0.0.1:%d" % harness.free_port(),
                *harness.tuned(tuning, "--status-interval", STATUS, "--reap-interval", "0.5",
                               "--heartbeat-interval", "1"))
    wait_streaming(pg, r)
    holder = wait_until(lambda: pg.slot_holder_role(), 30, message="a walsender to hold the slot")
    assert holder == "outbox_relay", (holder, r.log_tail())
    ids = insert_events(pg, "lp.event", 3)
    assert event_ids(kafka.read("lp", expected=3, timeout=60)) == ids
    # The reaper, as outbox_relay, deletes the delivered rows.
    wait_until(lambda: pg.scalar("SELECT count(*) FROM public.events_outbox WHERE id = ANY(%s)",
                                 (ids,)) == 0,
               harness.confirm_timeout(tuning, 60) + (0 if tuning == "tuned" else REAP_INTERVAL),
               message="the reaper to delete delivered rows")
    # `status` as the same role.
    rc, out, err = run_binary(["status", "--dsn", dsn], timeout=30)
    assert rc == 0, out + err
    log = r.log_text()
    assert not re.search(r"permission denied|must be superuser|insufficient privilege", log,
                         re.I), log

    # What the role must not be able to do.
    conn = psycopg2.connect(dsn, connect_timeout=10)
    conn.autocommit = True
    denied = [
        "INSERT INTO public.orders (amount) VALUES (1)",
        "UPDATE public.orders SET amount = 0",
        "DELETE FROM public.orders",
        "TRUNCATE public.orders",
        "SELECT * FROM public.orders",
        "INSERT INTO public.events_outbox (aggregate_id, type, payload) "
        "VALUES (gen_random_uuid(), 'forged.event', '{}')",
        "UPDATE public.events_outbox SET payload = '{}'",
        "TRUNCATE public.events_outbox",
        "DROP TABLE public.events_outbox",
        "ALTER TABLE public.events_outbox ADD COLUMN x int",
        "CREATE TABLE public.mine (x int)",
        "SELECT * FROM public.processed_events",
        "ALTER ROLE outbox_relay SUPERUSER",
        "ALTER ROLE outbox_relay BYPASSRLS",
        "CREATE ROLE sneaky LOGIN",
        "COPY public.orders TO STDOUT",
        "SELECT pg_read_file('pg_hba.conf')",
    ]
    allowed = []
    for stmt in denied:
        try:
            with conn.cursor() as cur:
                cur.execute(stmt)
            allowed.append(stmt)
        except (psycopg2.errors.InsufficientPrivilege, psycopg2.errors.UndefinedFunction):
            pass
        except psycopg2.Error as e:
            if e.pgcode not in ("42501",):
                allowed.append("%s -> unexpected %s %s" % (stmt, e.pgcode, e))
    conn.close()
    assert not allowed, "the relay role may:\n" + "\n".join(allowed)
    assert pg.scalar("SELECT amount FROM public.orders") == 100
    assert pg.scalar("SELECT has_table_privilege('outbox_relay', 'public.orders', "
                     "'INSERT, UPDATE, DELETE, SELECT')") is False

    # Physical replication (a base backup, all WAL) is refused: REPLICATION
    # plus a "replication" pg_hba line would hand over every table.
    with pytest.raises(psycopg2.OperationalError, match="no pg_hba.conf entry for replication"):
        psycopg2.connect(dsn + " replication=true", connect_timeout=10)
    # Other databases are refused too.
    with pytest.raises(psycopg2.OperationalError, match="no pg_hba.conf entry"):
        psycopg2.connect(pg.dsn(user="outbox_relay", password=RELAY_PASSWORD, dbname="template1"),
                         connect_timeout=10)
    assert r.terminate() == 0
