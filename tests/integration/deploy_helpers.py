"""deploy_helpers.py — what the test_deploy_*.py suites share: the paths
of docker/, the options and librdkafka properties the binaries accept,
compose files loaded with compose's own interpolation rules, the compose
Kafka's image version, broker settings and topics as the tests start them,
and Dockerfiles parsed into stages.
"""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest

import harness

REPO = harness.REPO_ROOT
DOCKER = os.path.join(REPO, "docker")
COMPOSE = os.path.join(DOCKER, "compose.yaml")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
PG_DOCKERFILE = os.path.join(DOCKER, "postgres", "Dockerfile")
UNIT = os.path.join(DOCKER, "outbox-relay.service")
EXAMPLE_CONF = os.path.join(DOCKER, "outbox-relay.conf.example")
HEALTHCHECK = os.path.join(DOCKER, "healthcheck.sh")
KAFKA_SH = os.path.join(REPO, "tests", "tools", "kafka.sh")
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


def compose_topics(services):
    """Topics the kafka-topics one-shot creates."""
    return [name for name, _, _ in compose_topic_specs(services)]


def compose_topic_specs(services):
    """[(topic, partitions, replication factor)] as the kafka-topics one-shot
    creates them: its `for t in A B; do kafka-topics.sh --create ...
    --topic "$t" --partitions N --replication-factor M` loop, the flags read
    from its one kafka-topics.sh call."""
    cmd = " ".join(str(c) for c in (services["kafka-topics"].get("command") or []))
    m = re.search(r"for t in ([^;]+);", cmd)
    assert m, cmd
    calls = re.findall(r"kafka-topics\.sh\s((?:[^\n\\]|\\\n)*)", cmd)
    assert len(calls) == 1, "expected one kafka-topics.sh call in: %s" % cmd
    argv = shlex.split(calls[0].replace("\\\n", " "))
    assert "--create" in argv, argv

    def flag(name):
        assert argv.count(name) == 1, "%s not given once: %s" % (name, argv)
        return int(argv[argv.index(name) + 1])
    partitions, rf = flag("--partitions"), flag("--replication-factor")
    return [(t, partitions, rf) for t in m.group(1).split()]


# --------------------------------------------------------------------------
# the compose Kafka as the tests run it
# --------------------------------------------------------------------------

def kafka_sh_default_version():
    """The Kafka version tests/tools/kafka.sh resolves when
    $OUTBOX_KAFKA_VERSION is unset: the one the real-Kafka tests prove."""
    with open(KAFKA_SH) as f:
        m = re.search(r"^version=\$\{OUTBOX_KAFKA_VERSION:-([0-9][0-9A-Za-z.-]*)\}$", f.read(), re.M)
    assert m, "no version=${OUTBOX_KAFKA_VERSION:-...} line in %s" % KAFKA_SH
    return m.group(1)


def compose_kafka_images(services):
    """{service: image version} of every service running apache/kafka."""
    out = {}
    for name, svc in services.items():
        image = str(svc.get("image") or "")
        repo, _, tag = image.partition(":")
        if repo in ("apache/kafka", "docker.io/apache/kafka"):
            out[name] = tag or "latest"
    return out


# Variables the apache/kafka image's launcher reads itself (the image's
# kafka-propertiesSpec.json "excludes", which spells KAFKA_HEAP_OPTS
# without its S; both here): not broker properties.
KAFKA_IMAGE_NOT_PROPERTIES = {
    "KAFKA_VERSION", "KAFKA_HEAP_OPT", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS",
    "KAFKA_JMX_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL"}

# server.properties entries KafkaCluster (kafka_cluster.py) writes itself,
# because they name this machine's node, ports and directories: the node's
# identity (node.id, process.roles), its listeners (listeners,
# advertised.listeners, listener.security.protocol.map,
# inter.broker.listener.name, controller.listener.names), the quorum
# (controller.quorum.voters; CLUSTER_ID, no KAFKA_ variable, is the
# harness's own at format time) and log.dirs. Everything else of the
# compose kafka service goes to the test's broker unchanged.
HARNESS_KAFKA_PROPERTIES = {
    "node.id", "process.roles", "controller.quorum.voters", "controller.listener.names",
    "listeners", "advertised.listeners", "listener.security.protocol.map",
    "inter.broker.listener.name", "log.dirs"}


def kafka_image_property(var):
    """The apache/kafka image's name rule (its utility's ConvertKey) for a
    KAFKA_ variable: the prefix dropped, a single '_' between two other
    characters becomes '.', '___' '-', '__' '_', all lower case
    (KAFKA_AUTO_CREATE_TOPICS_ENABLE -> auto.create.topics.enable)."""
    assert var.startswith("KAFKA_"), var
    key = re.sub(r"[^_]_[^_]", lambda m: m.group(0).replace("_", "."), var[len("KAFKA_"):])
    return key.replace("___", "-").replace("__", "_").lower()


def kafka_image_properties(env):
    """{property: value} the apache/kafka image writes to server.properties
    for a container environment: every KAFKA_ variable but the launcher's.
    The image splits each NAME=value at '=' and drops an entry with a
    second '=' silently; such a value is an error here."""
    props = {}
    for var, value in env.items():
        if not var.startswith("KAFKA_") or var in KAFKA_IMAGE_NOT_PROPERTIES:
            continue
        assert "=" not in str(value), \
            "%s: the apache/kafka image drops a value containing '=' without a word" % var
        props[kafka_image_property(var)] = str(value)
    return props


def compose_broker_settings(services):
    """(settings, skipped): the compose kafka service's server.properties
    (kafka_image_properties), split into what a test broker gets as
    KafkaCluster(broker_settings=settings) and the entries KafkaCluster
    sets for 127.0.0.1 itself (HARNESS_KAFKA_PROPERTIES)."""
    props = kafka_image_properties(services["kafka"]["environment"])
    settings = {k: v for k, v in props.items() if k not in HARNESS_KAFKA_PROPERTIES}
    skipped = {k: v for k, v in props.items() if k in HARNESS_KAFKA_PROPERTIES}
    return settings, skipped


# --------------------------------------------------------------------------
# Dockerfiles and the postgres image
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


def _fail(what, proc):
    raise AssertionError("%s exited (rc=%s):\n%s" % (what, proc.returncode, proc.log_tail()))
