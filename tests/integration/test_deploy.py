"""test_deploy.py — what CI can check of docker/ without a Docker engine.

  test_compose_file_parses               `docker compose config` when the plugin is
                                         there, else PyYAML plus compose's
                                         interpolation rules; every build context,
                                         Dockerfile and depends_on target exists
  test_compose_env_names_are_options     every OUTBOX_RELAY_* / OUTBOX_CONSUME_*
                                         variable is an option of the binary's
                                         --help (or a librdkafka property), since
                                         the binaries ignore unknown ones silently
  test_compose_wiring                    DSN hosts, broker addresses, topics,
                                         passwords and ports agree across services
  test_compose_stack_without_engine      the stack run as processes: the postgres
                                         image's init files on a fresh cluster, the
                                         relayer and consumer with the compose
                                         environment; an order placed in psql ends
                                         up as loyalty points
  test_dockerfile_stages                 build stage runs tests/tools/setup.sh (as CI
                                         does), slim runtime, non-root, healthcheck
  test_dockerfile_build_stage_emulated   the build stage's COPY/ENV/RUN replayed in
                                         a temp dir: the binaries it installs exist
  test_runtime_packages_cover_libraries  every shared library of the binaries comes
                                         from the runtime stage's packages
  test_postgres_image                    wal2json, wal_level=logical, init files
  test_healthcheck_script                /healthz 200 -> 0, 503 / closed port -> 1
  test_example_config_is_valid           every setting (commented ones too) is
                                         accepted by the binary / librdkafka
  test_systemd_unit                      systemd-analyze verify and offline security
  test_deploy_doc_names_exist            options and variables in docs/deploy.md exist
"""

import glob
import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

import harness
from harness import wait_until

REPO = harness.REPO_ROOT
DOCKER = os.path.join(REPO, "docker")
COMPOSE = os.path.join(DOCKER, "compose.yaml")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
PG_DOCKERFILE = os.path.join(DOCKER, "postgres", "Dockerfile")
UNIT = os.path.join(DOCKER, "outbox-relay.service")
EXAMPLE_CONF = os.path.join(DOCKER, "outbox-relay.conf.example")
HEALTHCHECK = os.path.join(DOCKER, "healthcheck.sh")
DEPLOY_DOC = os.path.join(REPO, "docs", "deploy.md")
RUNTIME_PACKAGES = {"libpq5", "librdkafka1", "libmicrohttpd12"}


# --------------------------------------------------------------------------
# what the binaries accept
# --------------------------------------------------------------------------

def _binary(name):
    path = os.path.join(harness.build_dir(), name)
    if not os.access(path, os.X_OK):
        pytest.fail("%s does not exist: cmake --build build first" % path)
    return path


def help_options(name):
    """Long option names listed by `<binary> --help`."""
    res = subprocess.run([_binary(name), "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=10)
    assert res.returncode == 0, res.stdout
    opts = set(re.findall(r"^\s+--([a-z][a-z0-9-]*)", res.stdout, re.M))
    assert len(opts) > 5, res.stdout
    return opts


_kafka_props = None


def kafka_properties():
    """librdkafka's property names, from `kcat -X list` (same librdkafka as
    the binaries: Debian's)."""
    global _kafka_props
    if _kafka_props is None:
        kcat = shutil.which("kcat") or shutil.which("kafkacat")
        if kcat is None:
            pytest.skip("kcat not installed (tests/tools/setup.sh installs it)")
        out = subprocess.run([kcat, "-X", "list"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=10).stdout
        _kafka_props = set(re.findall(r"^([a-z][a-z0-9._]*)\s+\|", out, re.M))
        assert "bootstrap.servers" in _kafka_props and "sasl.password" in _kafka_props, out[:500]
    return _kafka_props


def check_env_names(env, prefix, options):
    """Problems with env names: not an option of the binary, or a
    <prefix>KAFKA_ name that is no librdkafka property."""
    bad = []
    for name in env:
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        if rest.startswith("KAFKA_"):
            prop = rest[len("KAFKA_"):].lower().replace("_", ".")
            if prop not in kafka_properties():
                bad.append("%s: librdkafka has no property %r" % (name, prop))
        elif rest.lower().replace("_", "-") not in options:
            bad.append("%s: no --%s option" % (name, rest.lower().replace("_", "-")))
    return bad


# --------------------------------------------------------------------------
# compose file
# --------------------------------------------------------------------------

_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate(text, env):
    """Compose's variable interpolation: $$ is a literal $, ${VAR},
    ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err},
    ${VAR:+alt}, ${VAR+alt} and $VAR; anything else after a $ is an error
    (as `docker compose config` reports it)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1:i + 2]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt == "{":
            j = text.find("}", i)
            if j < 0:
                raise ValueError("unterminated ${ in %r" % text)
            expr = text[i + 2:j]
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?", expr, re.S)
            if m is None:
                raise ValueError("invalid interpolation ${%s} in %r" % (expr, text))
            name, op, arg = m.group(1), m.group(2), m.group(3) or ""
            val = env.get(name)
            unset_or_empty = val is None or (op and op.startswith(":") and val == "")
            if op in (":-", "-"):
                out.append(arg if unset_or_empty else val)
            elif op in (":?", "?"):
                if unset_or_empty:
                    raise ValueError("required variable %s is missing: %s" % (name, arg))
                out.append(val)
            elif op in (":+", "+"):
                out.append("" if unset_or_empty else arg)
            else:
                out.append(val or "")
            i = j + 1
            continue
        m = _VAR.match(text, i + 1)
        if m is None:
            raise ValueError("invalid interpolation at %r in %r (write $$ for a literal $)"
                             % (text[i:i + 6], text))
        out.append(env.get(m.group(0), ""))
        i = m.end()
    return "".join(out)


def _interpolate_tree(node, env):
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_interpolate_tree(x, env) for x in node]
    if isinstance(node, dict):
        return {k: _interpolate_tree(v, env) for k, v in node.items()}
    return node


def _normalise(model):
    """The parts of `docker compose config`'s normal form the checks use:
    environment as a dict, depends_on as {service: {condition: ...}},
    build as a dict."""
    for svc in model.get("services", {}).values():
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
        svc["environment"] = {k: "" if v is None else str(v) for k, v in env.items()}
        dep = svc.get("depends_on") or {}
        if isinstance(dep, list):
            dep = {d: {"condition": "service_started"} for d in dep}
        svc["depends_on"] = dep
        if isinstance(svc.get("build"), str):
            svc["build"] = {"context": svc["build"]}
    return model


def docker_compose_cli():
    """argv prefix of a working `docker compose` / `docker-compose`, or None."""
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        try:
            res = subprocess.run(argv + ["version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if res.returncode == 0:
            return argv
    return None


def load_compose(env=None):
    """(model, how): the compose file in normal form, from `docker compose
    config` when available, else PyYAML plus interpolation. env defaults to
    an environment without any of the file's variables, so defaults apply."""
    env = dict(env or {})
    cli = docker_compose_cli()
    if cli is not None:
        clean = {k: v for k, v in os.environ.items()
                 if k in ("PATH", "HOME", "DOCKER_CONFIG", "DOCKER_HOST")}
        clean.update(env)
        res = subprocess.run(cli + ["-f", COMPOSE, "config", "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=60, env=clean)
        assert res.returncode == 0, "%s config failed:\n%s" % (" ".join(cli), res.stderr)
        return _normalise(json.loads(res.stdout)), " ".join(cli) + " config"
    yaml = pytest.importorskip("yaml", reason="neither docker compose nor python3-yaml")
    with open(COMPOSE) as f:
        raw = yaml.safe_load(f)
    model = _interpolate_tree(raw, env)
    for k in list(model):
        if k.startswith("x-"):
            del model[k]
    for name, svc in model.get("services", {}).items():
        if "build" in svc and isinstance(svc["build"], dict) and "context" in svc["build"]:
            svc["build"]["context"] = os.path.normpath(
                os.path.join(os.path.dirname(COMPOSE), svc["build"]["context"]))
    return _normalise(model), "PyYAML"


def dsn_params(dsn):
    """key=value connection string -> dict (values without spaces/quotes)."""
    return dict(kv.split("=", 1) for kv in dsn.split())


def test_compose_file_parses():
    model, how = load_compose()
    services = model.get("services")
    assert services, "no services (%s)" % how
    for want in ("postgres", "kafka", "relayer", "consumer"):
        assert want in services, "service %s missing (%s)" % (want, how)
    assert services["kafka"]["image"].startswith("apache/kafka:"), services["kafka"]["image"]
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), "%s: neither image nor build" % name
        build = svc.get("build")
        if build:
            ctx = build["context"]
            assert os.path.isdir(ctx), "%s: build context %s missing" % (name, ctx)
            df = os.path.join(ctx, build.get("dockerfile", "Dockerfile"))
            assert os.path.isfile(df), "%s: Dockerfile %s missing" % (name, df)
        for dep, spec in svc["depends_on"].items():
            assert dep in services, "%s depends on unknown service %s" % (name, dep)
            cond = spec.get("condition", "service_started")
            assert cond in ("service_started", "service_healthy",
                            "service_completed_successfully"), (name, dep, cond)
            if cond == "service_healthy":
                hc = services[dep].get("healthcheck") or {}
                assert hc.get("test") and not hc.get("disable"), \
                    "%s waits for %s to be healthy, which has no healthcheck" % (name, dep)
    # The long-running services say when they are up.
    for name in ("postgres", "kafka", "relayer"):
        hc = services[name].get("healthcheck") or {}
        assert hc.get("test") and not hc.get("disable"), "%s has no healthcheck" % name
    # Nothing in the file needs a variable to be set.
    for name, svc in services.items():
        for k, v in svc["environment"].items():
            assert v != "", "%s: %s is empty without a .env file" % (name, k)


def test_compose_interpolation_rules():
    """The fallback interpolation agrees with compose on the cases the file uses."""
    env = {"A": "x", "E": ""}
    assert interpolate("a $$4 b", env) == "a $4 b"
    assert interpolate("${A:-d} ${B:-d} ${E:-d} ${E-d}", env) == "x d d "
    assert interpolate("$A-${A}", env) == "x-x"
    with pytest.raises(ValueError):
        interpolate("($4->>'x')", env)
    with pytest.raises(ValueError):
        interpolate("${B:?needed}", env)


def test_compose_env_names_are_options():
    model, how = load_compose()
    services = model["services"]
    relay_opts = help_options("outbox-relay")
    consume_opts = help_options("outbox-consume")
    bad = []
    seen_relay = seen_consume = 0
    for name, svc in services.items():
        env = svc["environment"]
        bad += ["%s: %s" % (name, b) for b in check_env_names(env, "OUTBOX_RELAY_", relay_opts)]
        bad += ["%s: %s" % (name, b) for b in check_env_names(env, "OUTBOX_CONSUME_", consume_opts)]
        seen_relay += sum(k.startswith("OUTBOX_RELAY_") for k in env)
        seen_consume += sum(k.startswith("OUTBOX_CONSUME_") for k in env)
    assert not bad, "\n".join(bad)
    assert seen_relay >= 3 and seen_consume >= 5, (seen_relay, seen_consume)
    # The required options are all there.
    renv = services["relayer"]["environment"]
    for req in ("OUTBOX_RELAY_DSN", "OUTBOX_RELAY_BROKERS", "OUTBOX_RELAY_METRICS_ADDR"):
        assert req in renv, req
    cenv = services["consumer"]["environment"]
    for req in ("BROKERS", "GROUP", "TOPICS", "DSN", "CONSUMER", "APPLY"):
        assert "OUTBOX_CONSUME_" + req in cenv, req
    # The relayer gets the relayer's binary, the consumer the consumer's.
    assert not services["relayer"].get("entrypoint"), services["relayer"].get("entrypoint")
    ep = services["consumer"].get("entrypoint") or []
    assert any(str(e).endswith("outbox-consume") for e in ep), ep


def _advertised(kafka_env):
    """{listener name: (host, port)} of KAFKA_ADVERTISED_LISTENERS."""
    out = {}
    for item in kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(","):
        m = re.fullmatch(r"([A-Z_]+)://([^:]+):(\d+)", item.strip())
        assert m, item
        out[m.group(1)] = (m.group(2), int(m.group(3)))
    return out


def compose_topics(services):
    """Topics the kafka-topics one-shot creates."""
    cmd = " ".join(str(c) for c in (services["kafka-topics"].get("command") or []))
    m = re.search(r"for t in ([^;]+);", cmd)
    assert m, cmd
    return m.group(1).split()


def test_compose_wiring():
    """The services agree with each other: the relayer and consumer reach
    PostgreSQL by its service name and the broker by an advertised listener
    whose host is the kafka service; passwords match the ones the postgres
    init script sets; the consumer's topics are created; the healthcheck
    port is the metrics port."""
    model, how = load_compose(env={"RELAY_DB_PASSWORD": "p1",
                                   "CONSUMER_DB_PASSWORD": "p2"})
    s = model["services"]
    kafka_env = s["kafka"]["environment"]
    adv = _advertised(kafka_env)
    kafka_names = {"kafka", s["kafka"].get("hostname", "kafka")}
    internal = [(h, p) for h, p in adv.values() if h in kafka_names]
    assert internal, "no advertised listener the other containers can reach: %s" % adv
    listeners = kafka_env["KAFKA_LISTENERS"]
    protomap = dict(x.split(":") for x in kafka_env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    for name in adv:
        assert name + "://" in listeners, (name, listeners)
        assert name in protomap, (name, protomap)
    assert kafka_env["KAFKA_PROCESS_ROLES"].replace(" ", "") in ("broker,controller",
                                                                "controller,broker")
    assert kafka_env["KAFKA_CONTROLLER_LISTENER_NAMES"] in protomap

    renv, cenv = s["relayer"]["environment"], s["consumer"]["environment"]
    for brokers in (renv["OUTBOX_RELAY_BROKERS"], cenv["OUTBOX_CONSUME_BROKERS"]):
        for b in brokers.split(","):
            host, port = b.rsplit(":", 1)
            assert (host, int(port)) in internal, "%s is not an advertised listener %s" % (b, adv)

    pg_env = s["postgres"]["environment"]
    for dsn, user, pw_var in ((renv["OUTBOX_RELAY_DSN"], "outbox_relay", "RELAY_DB_PASSWORD"),
                              (cenv["OUTBOX_CONSUME_DSN"], "outbox_consume",
                               "CONSUMER_DB_PASSWORD")):
        p = dsn_params(dsn)
        assert p["host"] == "postgres", dsn
        assert p["dbname"] == pg_env["POSTGRES_DB"], dsn
        assert p["user"] == user, dsn
        assert p["password"] == pg_env[pw_var], (dsn, pw_var)
    assert dsn_params(renv["OUTBOX_RELAY_DSN"])["user"] != "postgres"

    topics = compose_topics(s)
    for t in cenv["OUTBOX_CONSUME_TOPICS"].split(","):
        assert t in topics, (t, topics)
    # sql/examples/orders.sql emits order.placed; the relayer's topic template
    # ({prefix} by default) must route it to a created topic.
    tmpl = renv.get("OUTBOX_RELAY_TOPIC", "{prefix}")
    routed = tmpl.replace("{type}", "order.placed").replace("{prefix}", "order")
    assert routed in topics, (routed, topics)

    port = renv["OUTBOX_RELAY_METRICS_ADDR"].rsplit(":", 1)[1]
    published = [str(p) for p in s["relayer"].get("ports", [])]
    assert any(port in p for p in published), (port, published)
    hc = s["relayer"]["healthcheck"]["test"]
    assert any("healthcheck" in str(t) or "healthz" in str(t) for t in hc), hc
    # Graceful stop needs longer than the relayer's --shutdown-timeout (30 s).
    grace = str(s["relayer"].get("stop_grace_period", "10s"))
    m = re.fullmatch(r"(\d+)s", grace) or re.fullmatch(r"(\d+)m(\d+)?s?", grace)
    assert m and int(m.group(1)) > 30, grace


# --------------------------------------------------------------------------
# the stack as plain processes
# --------------------------------------------------------------------------

def parse_dockerfile(path):
    """[(stage_name_or_None, base, [(instruction, args_text)])] with line
    continuations joined and comments dropped."""
    stages = []
    logical, buf = [], ""
    with open(path) as f:
        for line in f:
            s = line.rstrip("\n")
            if not buf and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if buf and s.lstrip().startswith("#"):
                continue
            if s.endswith("\\"):
                buf += s[:-1] + " "
                continue
            logical.append(buf + s)
            buf = ""
    for line in logical:
        instr, _, rest = line.strip().partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
            assert m, line
            stages.append((m.group(2), m.group(1), []))
        else:
            assert stages, "instruction before FROM: %s" % line
            stages[-1][2].append((instr, rest.strip()))
    return stages


def exec_form(args):
    """["a", "b"] JSON exec form -> list, or None for the shell form."""
    args = args.strip()
    if args.startswith("["):
        return json.loads(args)
    return None


class _BaseImageCluster(harness.PgCluster):
    """A cluster whose pg_hba is what the official postgres image ends up
    with for clients on other hosts (here: every TCP client except the
    harness's own postgres user): the base image's catch-all
    `host all all all scram-sha-256` and no "replication" line, which a
    logical replication connection does not need (pg_hba matches it by its
    database)."""

    def _write_hba(self):
        lines = ["local all all trust",
                 "local replication all trust",
                 "host all postgres 127.0.0.1/32 trust",
                 "host replication postgres 127.0.0.1/32 trust",
                 "host all all all scram-sha-256"]
        path = os.path.join(self.datadir, "pg_hba.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        shutil.chown(path, "postgres", "postgres")


def postgres_image_cmd_settings():
    """-c name=value pairs of docker/postgres/Dockerfile's CMD."""
    stages = parse_dockerfile(PG_DOCKERFILE)
    cmd = [a for i, a in stages[-1][2] if i == "CMD"]
    assert cmd, "docker/postgres/Dockerfile has no CMD"
    argv = exec_form(cmd[-1])
    assert argv and argv[0] == "postgres", argv
    settings = {}
    for i, a in enumerate(argv):
        if a == "-c":
            k, v = argv[i + 1].split("=", 1)
            settings[k] = v
    return settings


def postgres_init_files():
    """What /docker-entrypoint-initdb.d holds after docker/postgres/Dockerfile's
    COPY lines: [(name in the dir, source path)], in the order the entrypoint
    runs them (name order)."""
    stages = parse_dockerfile(PG_DOCKERFILE)
    files = {}
    for instr, args in stages[-1][2]:
        if instr != "COPY":
            continue
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        srcs, dest = parts[:-1], parts[-1]
        if not dest.startswith("/docker-entrypoint-initdb.d"):
            continue
        for src in srcs:
            matches = sorted(glob.glob(os.path.join(REPO, src)))
            assert matches, "COPY source %s matches nothing" % src
            for m in matches:
                if os.path.isdir(m):
                    for f in sorted(os.listdir(m)):
                        files[f] = os.path.join(m, f)
                elif dest.endswith("/"):
                    files[os.path.basename(m)] = m
                else:
                    files[os.path.basename(dest)] = m
    return sorted(files.items())


def run_postgres_init(pg, pg_env):
    """Runs the init files as the official image's entrypoint does on an
    empty data dir: creates POSTGRES_DB, then *.sql with psql
    ON_ERROR_STOP as POSTGRES_USER into POSTGRES_DB, *.sh executed (they are
    executable) with the container's environment; then reloads pg_hba."""
    db = pg_env.get("POSTGRES_DB", "postgres")
    if db != "postgres":
        pg.connect().cursor().execute('CREATE DATABASE "%s"' % db)
    env = dict(os.environ)
    env.update(pg_env)
    env.update({"POSTGRES_USER": "postgres", "PGDATA": pg.datadir, "PGHOST": pg.dir,
                "PGPORT": str(pg.port)})
    ran = []
    for name, src in postgres_init_files():
        if name.endswith(".sql"):
            argv = ["psql", "-v", "ON_ERROR_STOP=1", "--no-psqlrc", "-q", "--username", "postgres",
                    "--dbname", db, "-f", src]
        elif name.endswith(".sh"):
            argv = ["bash", src]
        else:
            continue
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, timeout=60)
        assert res.returncode == 0, "init file %s failed:\n%s" % (name, res.stdout)
        ran.append(name)
    pg.query("SELECT pg_reload_conf()")
    time.sleep(0.5)
    return ran


def test_compose_stack_without_engine(broker, kafka, tmp_path):
    """The compose stack with processes instead of containers: a cluster
    started with the postgres image's settings and initialised by its init
    files, the mock broker with the topics kafka-topics creates, and the
    relayer and consumer binaries with exactly the compose environment
    (only host names and ports swapped). An order placed as in
    docs/deploy.md becomes an event on "order" and loyalty points."""
    model, how = load_compose()
    s = model["services"]
    pg = _BaseImageCluster(settings=postgres_image_cmd_settings(), load_schema=False,
                           name="compose-pg")
    try:
        ran = run_postgres_init(pg, s["postgres"]["environment"])
        assert any(n.endswith(".sh") for n in ran), ran
        assert ran[:3] == ["001_outbox.sql", "002_processed_events.sql", "003_relay_role.sql"], ran
        db = s["postgres"]["environment"]["POSTGRES_DB"]
        assert pg.scalar("SELECT rolsuper OR NOT rolreplication FROM pg_roles "
                         "WHERE rolname = 'outbox_relay'") is False

        for t in compose_topics(s):
            broker.cmd("topic %s 3" % t)

        def swap(value):
            value = value.replace("host=postgres port=5432", "host=127.0.0.1 port=%d" % pg.port)
            return value.replace("kafka:9092", broker.bootstrap)

        metrics_port = harness.free_port()
        renv = {k: swap(v) for k, v in s["relayer"]["environment"].items()}
        renv["OUTBOX_RELAY_METRICS_ADDR"] = "127.0.0.1:%d" % metrics_port
        renv["OUTBOX_RELAY_STATUS_INTERVAL"] = "0.5"
        relay_argv = [_binary("outbox-relay")] + [str(a) for a in s["relayer"].get("command") or []]
        relay = harness.Process(relay_argv, str(tmp_path / "relayer.log"), env=renv)

        cenv = {k: swap(v) for k, v in s["consumer"]["environment"].items()}
        consume_argv = [_binary("outbox-consume")] + [str(a) for a in s["consumer"].get("command") or []]
        consumer = harness.Process(consume_argv, str(tmp_path / "consumer.log"), env=cenv)
        try:
            wait_until(lambda: (relay.running() or _fail("relayer", relay)) and
                       (pg.slot_info("outbox_relay") or {}).get("active"), 60,
                       message="the relayer to stream as outbox_relay")
            assert pg.scalar("SELECT usename FROM pg_stat_replication") == "outbox_relay"
            customer = str(uuid.uuid4())
            conn = pg.connect(dbname=db)
            cur = conn.cursor()
            for amount in (2500, 1000, 199):
                cur.execute("SELECT place_order(%s, %s)", (customer, amount))
            msgs = kafka.read("order", expected=3, timeout=60)
            assert len(msgs) == 3, msgs
            assert {m.headers["event_type"] for m in msgs} == {"order.placed"}

            def points():
                if not consumer.running():
                    _fail("consumer", consumer)
                cur.execute("SELECT points FROM loyalty_points WHERE customer_id = %s", (customer,))
                row = cur.fetchone()
                return row and row[0] == 25 + 10 + 1
            wait_until(points, 60, message="loyalty points from the consumer")
            assert relay.terminate() == 0
            assert consumer.terminate() == 0
        finally:
            relay.cleanup()
            consumer.cleanup()
    finally:
        pg.cleanup()


def _fail(what, proc):
    raise AssertionError("%s exited (rc=%s):\n%s" % (what, proc.returncode, proc.log_tail()))


# --------------------------------------------------------------------------
# Dockerfiles
# --------------------------------------------------------------------------

def test_dockerfile_stages():
    stages = parse_dockerfile(DOCKERFILE)
    assert len(stages) >= 2, stages
    build_name, build_base, build = stages[0]
    assert build_base.startswith("debian:bookworm"), build_base
    runs = [a for i, a in build if i == "RUN"]
    # The build is CI's script, not a copy of its steps.
    assert any(re.search(r"\bbash tests/tools/setup\.sh\b", r) for r in runs), runs
    with open(os.path.join(REPO, "tests", "run.sh")) as f:
        assert "bash tests/tools/setup.sh" in f.read(), "CI no longer runs tests/tools/setup.sh"
    # ...with only the build packages: no PostgreSQL server or test tools in the stage.
    envs = " ".join(a for i, a in build if i in ("ENV", "ARG")) + " ".join(runs)
    assert "OUTBOX_BUILD_ONLY=1" in envs, envs
    assert "OUTBOX_SKIP_APT" not in envs

    run_name, run_base, runtime = stages[-1]
    assert run_base == "debian:bookworm-slim", run_base
    installs = " ".join(a for i, a in runtime if i == "RUN")
    m = re.search(r"apt-get install ([^&;]+)", installs)
    assert m, installs
    pkgs = {p for p in m.group(1).split() if not p.startswith("-")}
    assert RUNTIME_PACKAGES <= pkgs, pkgs
    assert not {p for p in pkgs if p.endswith("-dev") or p in ("curl", "build-essential")}, pkgs
    assert "rm -rf /var/lib/apt/lists" in installs
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    ep = exec_form([a for i, a in runtime if i == "ENTRYPOINT"][-1])
    assert ep and os.path.basename(ep[0]) == "outbox-relay", ep
    hc = [a for i, a in runtime if i == "HEALTHCHECK"]
    assert hc and ("healthcheck" in hc[-1] or "healthz" in hc[-1] or " status" in hc[-1]), hc
    copies = [a for i, a in runtime if i == "COPY"]
    assert any("--from=" + (build_name or "0") in c for c in copies), copies
    # Files copied from the context exist.
    for instr_args in [a for i, a in runtime + build if i == "COPY"]:
        parts = shlex.split(instr_args)
        if any(p.startswith("--from=") for p in parts):
            continue
        for src in [p for p in parts if not p.startswith("--")][:-1]:
            assert glob.glob(os.path.join(REPO, src)), "COPY source %s missing" % src
    ignore = DOCKERFILE + ".dockerignore"
    assert os.path.isfile(ignore)
    with open(ignore) as f:
        text = f.read()
    assert not re.search(r"^!build", text, re.M), "the build dir must stay out of the context"


def test_dockerfile_build_stage_emulated(tmp_path):
    """Replays the build stage without an engine: its COPY lines into a
    temp dir standing for the image root, its ENV, its RUN lines with bash
    (apt skipped: the packages are installed here). The binaries it
    installs for the runtime stage come out and run."""
    stages = parse_dockerfile(DOCKERFILE)
    name, base, build = stages[0]
    root = str(tmp_path / "root")
    os.makedirs(root)

    def in_root(path):
        return os.path.join(root, path.lstrip("/"))

    workdir = "/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_SKIP_APT"] = "1"
    for instr, args in build:
        if instr == "WORKDIR":
            workdir = os.path.join(workdir, args)
            os.makedirs(in_root(workdir), exist_ok=True)
        elif instr == "COPY":
            parts = [p for p in shlex.split(args) if not p.startswith("--")]
            srcs, dest = parts[:-1], parts[-1]
            dest = dest if dest.startswith("/") else os.path.join(workdir, dest)
            for src in srcs:
                for m in glob.glob(os.path.join(REPO, src)):
                    target = in_root(dest)
                    if os.path.isdir(m):
                        shutil.copytree(m, target, dirs_exist_ok=True,
                                        ignore=shutil.ignore_patterns("__pycache__"))
                    else:
                        if dest.endswith("/") or dest in (".", "./"):
                            os.makedirs(target, exist_ok=True)
                        shutil.copy2(m, target)
        elif instr == "ENV":
            for kv in shlex.split(args):
                k, v = kv.split("=", 1)
                env[k] = v
        elif instr == "RUN":
            cmd = re.sub(r"(?<![\w.])/out/", root + "/out/", args)
            res = subprocess.run(["bash", "-ec", cmd], cwd=in_root(workdir), env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=900)
            assert res.returncode == 0, "RUN %s failed:\n%s" % (args, res.stdout[-4000:])
    # What the runtime stage takes from this one exists, and works.
    runtime = stages[-1][2]
    for instr, args in runtime:
        if instr == "COPY" and "--from=" in args:
            src = [p for p in shlex.split(args) if not p.startswith("--")][0]
            assert os.path.exists(in_root(src)), "runtime stage copies %s, not built" % src
    for b in ("outbox-relay", "outbox-consume"):
        path = in_root("/out/usr/local/bin/" + b)
        res = subprocess.run([path, "--version"], stdout=subprocess.PIPE, text=True, timeout=10)
        assert res.returncode == 0 and b in res.stdout, res.stdout
        # stripped: no symbol table left
        out = subprocess.run(["file", path], stdout=subprocess.PIPE, text=True).stdout \
            if shutil.which("file") else "stripped"
        assert "not stripped" not in out, out


def packages_of(paths):
    """{path: package} for files dpkg knows, trying each path as given, its
    real path and its /usr-merged twin; one dpkg -S call."""
    candidates = {}
    for p in paths:
        real = os.path.realpath(p)
        for c in (p, real, real[4:] if real.startswith("/usr/") else "/usr" + real):
            candidates.setdefault(c, p)
    res = subprocess.run(["dpkg", "-S"] + sorted(candidates), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, timeout=60)
    out = {}
    for line in res.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path.strip() in candidates:
            out[candidates[path.strip()]] = pkg.split(",")[0].split(":")[0].strip()
    return out


def installed_closure(pkgs):
    """pkgs and everything they Depend / Pre-Depend on, recursively, as
    installed here (dpkg-query: fast, and the libraries are installed since
    the binaries were linked against them). For an alternative "a | b" every
    installed one counts."""
    closure, todo = set(), list(pkgs)
    while todo:
        batch = sorted({p for p in todo if p not in closure})
        todo = []
        if not batch:
            break
        closure.update(batch)
        res = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Depends}, ${Pre-Depends}\n"]
                             + batch, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=60)
        for line in res.stdout.splitlines():
            deps = line.split("\t", 1)[1]
            for dep in deps.split(","):
                for alt in dep.split("|"):
                    name = alt.strip().split(" ")[0].split(":")[0]
                    if name:
                        todo.append(name)
    return closure


def test_runtime_packages_cover_libraries():
    """Every shared library the two binaries load belongs to a package the
    runtime stage installs or one they depend on, so the slim image needs
    nothing more."""
    if shutil.which("dpkg-query") is None:
        pytest.skip("not a Debian system")
    stages = parse_dockerfile(DOCKERFILE)
    installs = " ".join(a for i, a in stages[-1][2] if i == "RUN")
    m = re.search(r"apt-get install ([^&;]+)", installs)
    pkgs = [p for p in m.group(1).split() if not p.startswith("-")]
    closure = installed_closure(pkgs)
    # What every Debian image has.
    closure |= {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
    missing = []
    for b in ("outbox-relay", "outbox-consume"):
        out = subprocess.run(["ldd", _binary(b)], stdout=subprocess.PIPE, text=True).stdout
        libs = re.findall(r"=>\s+(/\S+)", out)
        owners = packages_of(libs)
        for lib in libs:
            pkg = owners.get(lib)
            if pkg is None:
                missing.append("%s: %s belongs to no package" % (b, lib))
            elif pkg not in closure:
                missing.append("%s: %s from %s" % (b, lib, pkg))
    assert not missing, "not in the runtime image:\n" + "\n".join(missing)


def test_postgres_image():
    stages = parse_dockerfile(PG_DOCKERFILE)
    name, base, instrs = stages[-1]
    assert base == "postgres:15-bookworm", base
    runs = " ".join(a for i, a in instrs if i == "RUN")
    assert re.search(r"postgresql-(\$PG_MAJOR|15)-wal2json", runs), runs
    settings = postgres_image_cmd_settings()
    assert settings.get("wal_level") == "logical", settings
    assert int(settings.get("max_replication_slots", "10")) >= 2
    assert int(settings.get("max_wal_senders", "10")) >= 2
    assert "max_slot_wal_keep_size" in settings, settings
    names = [n for n, _ in postgres_init_files()]
    for want in ("001_outbox.sql", "002_processed_events.sql", "003_relay_role.sql"):
        assert want in names, names
    scripts = [src for n, src in postgres_init_files() if n.endswith(".sh")]
    for src in scripts:
        assert os.access(src, os.X_OK), "%s is not executable (the entrypoint would source it)" % src
        res = subprocess.run(["bash", "-n", src], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert res.returncode == 0, res.stdout


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
