"""The live scenario list, run against the real stack by stack/e2e (TestSDKScenarios),
which sets KEYHOUSE_E2E; skipped without it."""
import json
import os
import time
import urllib.request

import pytest

import keyhouse
from keyhouse import KeyhouseError, MAX_BACKOFF_SECONDS

F = json.loads(os.environ["KEYHOUSE_E2E"]) if os.environ.get("KEYHOUSE_E2E") else None
pytestmark = pytest.mark.skipif(F is None, reason="KEYHOUSE_E2E not set: stack/e2e TestSDKScenarios runs this suite against the stack")


def control(what):
    with urllib.request.urlopen(urllib.request.Request(f"{F['control']}/{what}", method="POST", data=b"")) as resp:
        return json.load(resp)["count"]


class World:
    """The clock, the logs and the main client the scenarios share, in order."""

    def __init__(self, tmp):
        self.dir = tmp
        self.now = time.time()
        self.logs = []
        self.c = self.client(F["keys"]["main"], "main.json")

    def client(self, key, store):
        return keyhouse.Client(F["url"], F["product_id"], key, public_key_pem=F["public_key_pem"],
                               store_path=os.path.join(self.dir, store), logger=self.logs.append, now=lambda: self.now)


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    return World(str(tmp_path_factory.mktemp("keyhouse")))


def raises(code, fn, *args):
    with pytest.raises(KeyhouseError) as err:
        fn(*args)
    assert err.value.code == code, err.value
    return err.value


def test_scenario_activate(w):
    assert w.c.activate("laptop-1") == {"already_activated": False, "instance_id": "laptop-1"}
    assert w.client(F["keys"]["main"], "main.json").activate("laptop-1")["already_activated"] is True
    w.client(F["keys"]["capped"], "capped-1.json").activate("one")
    err = raises("activation_limit_exceeded", w.client(F["keys"]["capped"], "capped-2.json").activate, "two")
    assert (err.status, err.message) == (403, "Activation limit exceeded for this license key")


def test_scenario_verify_and_validate_online(w):
    lic = w.c.verify()
    assert (lic["valid"], lic["tier"], lic["product_id"]) == (True, "pro", F["product_id"])
    assert w.c.validate() is True
    raises("license_not_found", w.client("KH-NO-SUCH-KEY", "none.json").verify)


def test_scenario_usage(w):
    assert w.c.track_usage("users", 3) == 3
    raises("usage_limit_exceeded", w.c.track_usage, "users", 8)
    raises("metric_not_allowed", w.c.track_usage, "seats", 1)
    assert w.c.usage_report()["metrics"] == [{"metric": "users", "used": 3, "limit": 10, "remaining": 7, "exceeded": False}]


def test_scenario_signed_update_check(w):
    rel = w.c.check_update("1.0.0", F["release"]["channel"], F["release"]["platform"])
    assert rel["version"] == F["release"]["version"]
    assert w.c.check_update(F["release"]["version"], F["release"]["channel"], F["release"]["platform"]) is None


def test_scenario_offline_export(w):
    assert w.c.verify_offline_export(F["export_json"])["key"] == F["keys"]["main"]
    raises("invalid_signature", w.c.verify_offline_export, F["export_json"].replace('"tier":"pro"', '"tier":"enterprise"', 1))


def test_scenario_gateway_out_of_reach(w):
    control("mode?m=down")
    try:
        before = control("count")
        raises("unreachable", w.c.verify)
        raises("backing_off", w.c.verify)
        assert control("count") - before == 1
    finally:
        control("mode?m=pass")
    w.now += MAX_BACKOFF_SECONDS
    assert w.c.verify()["valid"] is True


def test_scenario_retry_storm(w):
    storm = w.client(F["keys"]["storm"], "storm.json")
    control("mode?m=503")
    try:
        control("reset")
        raises("unavailable", storm.verify)
        minutes = 10
        for _ in range(minutes * 60):
            w.now += 1
            try:
                storm.verify()
            except KeyhouseError:
                pass
        n = control("count")
        assert 2 <= n <= 1 + minutes, f"{n} requests in {minutes} minutes after the first failure"
        # Retry-After longer than the backoff is honoured.
        w.now += MAX_BACKOFF_SECONDS
        control("mode?m=503&retry_after=300")
        control("reset")
        for _ in range(300):
            try:
                storm.verify()
            except KeyhouseError:
                pass
            w.now += 1
        assert control("count") == 1
    finally:
        control("mode?m=pass")


def test_scenario_deactivate(w):
    w.token = json.load(open(os.path.join(w.dir, "main.json")))["token"]
    w.now += MAX_BACKOFF_SECONDS
    assert w.c.deactivate() is True
    raises("not_activated", w.c.validate)


def test_scenario_no_secret_in_a_log_line(w):
    text = "\n".join(w.logs)
    assert "keyhouse:" in text, "nothing was logged; the check would be vacuous"
    assert w.token and w.token not in text
    for key in F["keys"].values():
        assert key not in text
