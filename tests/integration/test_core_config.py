"""test_core_config.py — configuration: bad flags exit 2, options from
the environment and a config file, secrets never logged.

Like every test_core_*.py (end-to-end tests of the core relay: the real
build/outbox-relay between a throwaway PostgreSQL and the mock Kafka
cluster, once with each output plugin, conftest.py's `plugin`), each test
states the guarantee it checks and is built so that it fails when that
guarantee breaks: absence is only asserted after a later marker event has
arrived, LSN checks use the exact end of the commit record (found with
pg_walinspect), and waits are bounded. Shared helpers: core_helpers.py.
"""

import re
import time

import pytest

import harness
from harness import wait_until
from core_helpers import STATUS, Outbox, wait_streaming

# per plugin and major, on the shared real Kafka (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin", "pg_major"), pytest.mark.real_kafka]


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------

BAD = [
    (["--bogus-flag"], {}, None, r"bogus-flag"),
    (["--max-inflight", "abc"], {}, None, r"max.inflight"),
    (["--max-inflight-bytes", "lots"], {}, None, r"max.inflight.bytes"),
    (["--slot", "bad-name!"], {}, None, r"slot"),
    (["--status-interval", "soon"], {}, None, r"status.interval"),
    (["--log-level", "loud"], {}, None, r"log.level"),
    (["--log-format", "xml"], {}, None, r"log.format"),
    (["--table", "no_schema_or_too.many.parts"], {}, None, r"table"),
    ([], {"OUTBOX_RELAY_MAX_INFLIGHT": "abc"}, None, r"max.inflight"),
    ([], {}, "max-inflight = abc\n", r"max.inflight"),
    (["--config", "/nonexistent/outbox-relay.conf"], {}, None, r"nonexistent|config"),
    # settings that void the guarantee (issue 11): refused, naming the property
    (["-X", "enable.idempotence=false", "-X", "acks=1"], {}, None,
     r"enable\.idempotence=false is refused"),
    (["-X", "acks=1"], {}, None, r"-X acks=1 is refused"),
    ([], {"OUTBOX_RELAY_KAFKA_ENABLE_IDEMPOTENCE": "false"}, None,
     r"enable\.idempotence=false is refused"),
    ([], {"OUTBOX_RELAY_KAFKA_ACKS": "1"}, None, r"acks=1 is refused"),
    ([], {}, "kafka.request.required.acks = 0\n", r"request\.required\.acks=0 is refused"),
    (["-X", "max.in.flight.requests.per.connection=10"], {}, None,
     r"max\.in\.flight\.requests\.per\.connection=10 is refused"),
    (["-X", "message.timeout.ms=2000"], {}, None, r"message\.timeout\.ms=2000 is refused"),
    (["--max-inflight", "200000"], {}, None, r"queue\.buffering\.max\.messages"),
]


@pytest.mark.parametrize("args,env,config,msg", BAD,
                         ids=["unknown", "inflight", "inflight-bytes", "slot", "status", "loglevel",
                              "logformat", "table", "env", "config-file", "config-missing",
                              "no-idempotence", "acks-1", "env-idempotence", "env-acks",
                              "file-acks", "max-in-flight", "message-timeout",
                              "inflight-over-queue"])
def test_bad_flags_exit_2(relayer, tmp_path, args, env, config, msg):
    """Bad flags and values: exit 2 quickly, saying what was wrong. The DSN
    points at a closed port, so a relayer that ignored the error would sit
    retrying instead of exiting."""
    dsn = "host=127.0.0.1 port=%d dbname=postgres user=postgres" % harness.free_port()
    extra = []
    if config is not None:
        path = tmp_path / "relay.conf"
        path.write_text(config)
        extra = ["--config", str(path)]
    r = relayer("--dsn", dsn, "--brokers", "127.0.0.1:9", *(extra + args), env=env)
    rc = r.wait_exit(10)
    log = r.log_text()
    assert rc == 2, "rc=%s\n%s" % (rc, log)
    assert re.search(msg, log, re.IGNORECASE), log


def test_missing_required_options_exit_2(relayer):
    r = relayer("--brokers", "127.0.0.1:9")
    assert r.wait_exit(10) == 2
    assert "dsn" in r.log_text().lower()


def test_options_from_env_and_config_file(pg, broker, kafka, relayer, tmp_path):
    """Every option also comes from OUTBOX_RELAY_<NAME> and from --config."""
    r = relayer(env={"OUTBOX_RELAY_DSN": pg.dsn(), "OUTBOX_RELAY_BROKERS": broker.bootstrap,
                     "OUTBOX_RELAY_TOPIC": "from-env", "OUTBOX_RELAY_STATUS_INTERVAL": STATUS,
                     "OUTBOX_RELAY_MAX_INFLIGHT": "100"})
    wait_streaming(pg, r)
    ob = Outbox(pg)
    a = ob.one("x.env")
    got = kafka.read("from-env", expected=1, timeout=60)
    assert [int(m.headers["event_id"]) for m in got] == a.ids
    assert r.terminate() == 0

    conf = tmp_path / "relay.conf"
    conf.write_text("# outbox-relay test config\n"
                    "dsn = %s\n"
                    "brokers = %s\n"
                    "topic = from-config\n"
                    "status-interval = %s\n"
                    "slot = cfg_slot\n" % (pg.dsn(), broker.bootstrap, STATUS))
    r = relayer("--config", str(conf))
    wait_streaming(pg, r, slot="cfg_slot")
    b = ob.one("x.config")
    got = kafka.read("from-config", expected=1, timeout=60)
    assert [int(m.headers["event_id"]) for m in got] == b.ids
    assert r.terminate() == 0


PG_PASSWORD = "Pg-S3cret-7f4Qz9"
KAFKA_PASSWORD = "Kafka-S3cret-81mWp2"


@pytest.mark.parametrize("dsn_form", ["keyword", "uri", "wrong-password"])
def test_secrets_never_logged(pg_factory, broker, kafka, relayer, dsn_form):
    """Passwords from the DSN (keyword or URI form, right or wrong) and
    from -X sasl.password never appear in the log, at debug level, across
    a start, a PostgreSQL restart and a stop."""
    pg = pg_factory(password_auth="scram-sha-256", name="pw")
    pg.create_role("relay_pw", replication=True, password=PG_PASSWORD)
    password = PG_PASSWORD if dsn_form != "wrong-password" else "Wrong-Pw-55xYq3"
    if dsn_form == "uri":
        dsn = "postgresql://relay_pw:%s@127.0.0.1:%d/postgres" % (password, pg.port)
    else:
        dsn = pg.dsn(user="relay_pw", password=password)
    r = relayer("--dsn", dsn, "--brokers", broker.bootstrap, "--status-interval", STATUS,
                "--log-level", "debug", "-X", "security.protocol=plaintext",
                "-X", "sasl.username=relay", "-X", "sasl.password=" + KAFKA_PASSWORD)
    if dsn_form == "wrong-password":
        wait_until(lambda: "password" in r.log_text().lower() or not r.running(), 30,
                   message="the authentication failure to be logged")
        time.sleep(1)
    else:
        wait_streaming(pg, r)
        ob = Outbox(pg)
        ob.one("pw.one")
        assert len(kafka.read("pw", expected=1, timeout=60)) == 1
        pg.restart()
        wait_streaming(pg, r, timeout=90)
        ob = Outbox(pg)
        ob.one("pw.two")
        assert len(kafka.read("pw", expected=2, timeout=60)) == 2
    if r.running():
        r.terminate()
    log = r.log_text()
    assert log.strip(), "empty log"
    for secret in (password, KAFKA_PASSWORD):
        assert secret not in log, "secret %r found in the log:\n%s" % (
            secret, "\n".join(l for l in log.splitlines() if secret in l)[:2000])
