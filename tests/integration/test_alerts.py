"""test_alerts.py — the Prometheus alert rules in deploy/prometheus/.

  test_rules_check                       promtool check rules: valid rules file
  test_rules_unit_tests                  promtool test rules: every alert fires on
                                         the series meant to trigger it, stays
                                         silent on the near miss
  test_every_alert_has_both_cases        each alert has a firing and a silent test
  test_unit_tests_would_catch_a_broken_rule
                                         each alert made never-firing, then
                                         always-firing: promtool test must fail
  test_rule_metrics_exist_in_a_real_scrape
                                         every metric a rule names is served by a
                                         running relayer's /metrics
  test_docs_name_every_alert             docs/operations.md lists every alert

promtool comes with Debian's `prometheus` package (tests/tools/setup.sh
installs it). Without it the promtool tests fail in CI (CI=true) and skip
elsewhere.
"""

import copy
import os
import re
import shutil
import subprocess

import pytest
import yaml

import harness
from test_operations import scrape, start_with_metrics

RULES_DIR = os.path.join(harness.REPO_ROOT, "deploy", "prometheus")
RULES = os.path.join(RULES_DIR, "outbox-relay.rules.yml")
RULES_TEST = os.path.join(RULES_DIR, "outbox-relay.rules.test.yml")
OPERATIONS = os.path.join(harness.REPO_ROOT, "docs", "operations.md")


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if path is None:
        msg = "promtool not found (Debian package `prometheus`, in tests/tools/setup.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg + ": CI must run the alert rule tests")
        pytest.skip(msg)
    return path


def run(argv, cwd=None, timeout=120):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=cwd, timeout=timeout)


def load_rules():
    with open(RULES) as f:
        return yaml.safe_load(f)


def alerts(doc):
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


ONLY_ON_FAILOVER_SLOTS = {"outbox_relay_failover_protected"}


def rule_metric_names():
    names = set()
    for r in alerts(load_rules()):
        names.update(re.findall(r"\boutbox_relay_[a-z0-9_]+", r["expr"]))
    return names


def test_rules_check(promtool):
    res = run([promtool, "check", "rules", RULES])
    assert res.returncode == 0, res.stdout
    assert "SUCCESS: %d rules found" % len(alerts(load_rules())) in res.stdout, res.stdout


def test_rules_unit_tests(promtool):
    res = run([promtool, "test", "rules", RULES_TEST], cwd=RULES_DIR)
    assert res.returncode == 0, res.stdout
    assert "SUCCESS" in res.stdout, res.stdout


def test_every_alert_has_both_cases():
    with open(RULES_TEST) as f:
        tests = yaml.safe_load(f)
    assert tests["rule_files"] == [os.path.basename(RULES)]
    firing, silent = set(), set()
    for group in tests["tests"]:
        for t in group.get("alert_rule_test", []):
            (firing if t.get("exp_alerts") else silent).add(t["alertname"])
    names = [r["alert"] for r in alerts(load_rules())]
    assert len(names) == len(set(names)), "an alert name is used twice"
    assert set(names) - firing == set(), "alerts without a test where they fire"
    assert set(names) - silent == set(), "alerts without a test where they stay silent"
    assert (firing | silent) - set(names) == set(), "tests of alerts that do not exist"


@pytest.mark.parametrize("mutation", ["never", "always"])
def test_unit_tests_would_catch_a_broken_rule(promtool, tmp_path, mutation):
    """Replaces one alert's expression at a time by one that never fires
    (the firing test must fail) or always fires (the silent test must
    fail): proof that every test case looks at its alert."""
    doc = load_rules()
    with open(RULES_TEST) as f:
        tests = yaml.safe_load(f)
    tests["rule_files"] = ["mutant.rules.yml"]
    expr = "vector(1) < 0" if mutation == "never" else "vector(1)"
    survivors = []
    for i, name in enumerate(r["alert"] for r in alerts(doc)):
        # Only this alert's test groups (one promtool run of all of them
        # per mutant would take a second each).
        own = dict(tests, tests=[g for g in tests["tests"] if any(
            t["alertname"] == name for t in g.get("alert_rule_test", []))])
        with open(tmp_path / "mutant.test.yml", "w") as f:
            yaml.safe_dump(own, f)
        mutant = copy.deepcopy(doc)
        rule = alerts(mutant)[i]
        rule["expr"] = expr
        rule.pop("for", None)
        with open(tmp_path / "mutant.rules.yml", "w") as f:
            yaml.safe_dump(mutant, f)
        res = run([promtool, "test", "rules", "mutant.test.yml"], cwd=str(tmp_path))
        if res.returncode == 0:
            survivors.append(name)
        else:
            # The case that must catch it: the firing test of a rule that
            # never fires, the silent test of one that always does.
            case = "fires" if mutation == "never" else "stays silent"
            assert "name: %s %s" % (name, case) in res.stdout, res.stdout[-2000:]
    assert survivors == [], "%s-firing versions of these alerts pass the tests" % mutation


def test_rule_metrics_exist_in_a_real_scrape(pg_factory, broker, kafka, relayer):
    """Every outbox_relay_* name the rules use is in what a running relayer
    serves once each conditional series has a value: the slot polled with
    max_slot_wal_keep_size set (safe_wal_size), the table analysed (rows
    estimate), a reaper run done, a delivery made (latency buckets)."""
    # Served only for a failover slot on PostgreSQL 17+: test_pg_failover.py
    # reads it by this name from a relayer on such a slot (1, then 0).
    names = rule_metric_names() - ONLY_ON_FAILOVER_SLOTS
    assert len(names) >= 15, names
    pg = pg_factory(settings={"max_slot_wal_keep_size": "1GB"}, name="alerts")
    # pgoutput: its publication gauge is exported only with that plugin;
    # every other series is the same with either.
    p, port = start_with_metrics(relayer, ["--dsn", pg.dsn(), "--brokers", broker.bootstrap],
                                 "--retention", "1 hour", "--reap-interval", "1",
                                 "--plugin", "pgoutput")
    p.wait_for_log("streaming", timeout=30)  # rows committed before the slot are not relayed
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "SELECT gen_random_uuid(), 'order.created', jsonb_build_object('i', g) "
             "FROM generate_series(1, 5) g")
    kafka.read("order", expected=5, timeout=30)
    pg.query("ANALYZE events_outbox")
    seen = {}

    def all_served():
        seen["names"] = {name for name, _ in scrape(port)}
        return names <= seen["names"]

    try:
        harness.wait_until(all_served, 60, interval=0.5, message="every rule metric served")
    except AssertionError:
        raise AssertionError("rules name metrics the relayer does not serve: %s"
                             % sorted(names - seen.get("names", set())))
    assert p.running()


def test_docs_name_every_alert():
    with open(OPERATIONS) as f:
        doc = f.read()
    assert "deploy/prometheus/outbox-relay.rules.yml" in doc
    missing = [r["alert"] for r in alerts(load_rules()) if "**%s**" % r["alert"] not in doc
               or "`%s`" % r["alert"] not in doc]
    assert missing == [], "alerts docs/operations.md does not describe (table and section)"
