"""test_deploy_compose.py — docker/compose.yaml: parsed, interpolated, wired
together.

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
  test_compose_interpolation_rules       compose's $ syntax, as interpolate() reads it
  test_compose_kafka_is_the_tested_version
                                         the apache/kafka image of the kafka and
                                         kafka-topics services is the version
                                         tests/tools/kafka.sh resolves for the tests
  test_compose_kafka_settings            the kafka service's KAFKA_* variables read
                                         with the image's name rule; the ones the
                                         test broker does not take are only its
                                         identity, listeners, quorum and log dir;
                                         auto-creation off, the one-shot's topics
                                         fit one node (test_deploy_stack.py runs a
                                         real broker with these settings)

What CI can check of docker/ without a Docker engine (the other parts:
test_deploy_*.py; shared helpers: deploy_helpers.py).
"""

import os
import re

import pytest

from deploy_helpers import (HARNESS_KAFKA_PROPERTIES, check_env_names, compose_broker_settings,
                            compose_kafka_images, compose_topic_specs, compose_topics, dsn_params,
                            help_options, interpolate, kafka_image_properties,
                            kafka_image_property, kafka_sh_default_version, load_compose)


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


def test_compose_kafka_is_the_tested_version():
    """The demo runs the Kafka the tests prove: every apache/kafka service
    of compose.yaml has kafka.sh's default version as its tag (the image
    is published per release under its version)."""
    model, how = load_compose()
    images = compose_kafka_images(model["services"])
    assert set(images) == {"kafka", "kafka-topics"}, images
    want = kafka_sh_default_version()
    wrong = {svc: tag for svc, tag in images.items() if tag != want}
    assert not wrong, ("docker/compose.yaml runs apache/kafka %s, the tests prove %s "
                       "(tests/tools/kafka.sh): use apache/kafka:%s" % (wrong, want, want))


def test_compose_kafka_settings():
    """The kafka service's server.properties as the apache/kafka image
    writes them from KAFKA_* (KAFKA_FOO_BAR -> foo.bar, '__' -> '_',
    '___' -> '-'); what test_deploy_stack.py leaves to KafkaCluster is
    only what names the container's node, ports and directory."""
    assert kafka_image_property("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "auto.create.topics.enable"
    assert kafka_image_property("KAFKA_LISTENER_NAME_SASL__SSL_FOO") == "listener.name.sasl_ssl.foo"
    assert kafka_image_property("KAFKA_SASL_MECHANISM___X") == "sasl.mechanism-x"
    assert kafka_image_properties({"KAFKA_HEAP_OPTS": "-Xmx1g", "KAFKA_OPTS": "-Dx",
                                   "KAFKA_NUM_PARTITIONS": "3", "CLUSTER_ID": "c"}) \
        == {"num.partitions": "3"}
    with pytest.raises(AssertionError):
        kafka_image_properties({"KAFKA_SASL_JAAS_CONFIG": "a=b"})

    model, how = load_compose()
    s = model["services"]
    settings, skipped = compose_broker_settings(s)
    assert set(skipped) <= HARNESS_KAFKA_PROPERTIES, skipped
    # The node the compose file describes is the kind the test starts.
    assert skipped["process.roles"].replace(" ", "") in ("broker,controller", "controller,broker")
    assert settings.get("auto.create.topics.enable") == "false", settings
    # One node holds one replica: the topics and Kafka's internal ones
    # (which default to 3) must ask for no more.
    for name, partitions, rf in compose_topic_specs(s):
        assert partitions >= 1 and rf == 1, (name, partitions, rf)
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr",
                "share.coordinator.state.topic.replication.factor",
                "share.coordinator.state.topic.min.isr"):
        assert settings.get(key) == "1", (key, settings.get(key))
