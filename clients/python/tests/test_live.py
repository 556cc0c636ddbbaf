"""The live scenario list, run against the real stack by stack/e2e (TestSDKScenarios),
which sets KEYHOUSE_E2E; skipped without it."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

import keyhouse
from keyhouse import KeyhouseError, MAX_BACKOFF_SECONDS

F = json.loads(os.environ["KEYHOUSE_E2E"]) if os.environ.get("KEYHOUSE_E2E") else None
pytestmark = pytest.mark.skipif(F is None, reason="KEYHOUSE_E2E not set: stack/e2e TestSDKScenarios runs this suite against the stack")


def control(what, base=None):
    with urllib.request.urlopen(urllib.request.Request(f"{base or F['control']}/{what}", method="POST", data=b"")) as resp:
        return json.load(resp)["count"]


def lease_requests(base=None):
    """How many POST /v1/leases the proxy saw since its last reset."""
    with urllib.request.urlopen(urllib.request.Request(f"{base or F['control']}/count", method="POST", data=b"")) as resp:
        return sum(1 for r in json.load(resp)["routes"] if r == "POST /v1/leases")


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
    # An app configured with another product takes no seat of the license.
    misconfigured = keyhouse.Client(F["url"], "another-" + F["product_id"], F["keys"]["capped"],
                                    store_path=os.path.join(w.dir, "wrong.json"), now=lambda: w.now)
    raises("wrong_product", misconfigured.activate, "one")
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


def test_scenario_an_increment_whose_answer_was_lost_counts_once(w):
    control("reset")
    control("mode?m=lose-answer")
    assert w.c.track_usage("users", 2) == 5
    # The app's own key: the same increment sent twice counts once. (Keys are per tenant:
    # each suite's product makes it its own.)
    own = "usage-" + F["product_id"]
    for _ in range(2):
        assert w.c.track_usage("users", 1, idempotency_key=own) == 6
    with urllib.request.urlopen(urllib.request.Request(f"{F['control']}/count", method="POST", data=b"")) as resp:
        keys = json.load(resp)["idempotency_keys"]
    assert len(keys) == 4 and keys[0] and keys[0] == keys[1] and keys[2:] == [own] * 2, keys
    assert w.c.usage_report()["metrics"][0]["used"] == 6


def test_scenario_signed_update_check(w):
    rel = w.c.check_update("1.0.0", F["release"]["channel"], F["release"]["platform"])
    assert rel["version"] == F["release"]["version"]
    assert w.c.check_update(F["release"]["version"], F["release"]["channel"], F["release"]["platform"]) is None
    # "" is the stable channel (the fixture's release is on stable), in every SDK.
    from_empty = w.c.check_update("1.0.0", channel="", platform=F["release"]["platform"])
    assert (from_empty["channel"], from_empty["version"]) == ("stable", F["release"]["version"])


def test_scenario_offline_export(w):
    assert w.c.verify_offline_export(F["export_json"])["key"] == F["keys"]["main"]
    raises("invalid_signature", w.c.verify_offline_export, F["export_json"].replace('"tier":"pro"', '"tier":"enterprise"', 1))
    # Limits of small fractions, signed as JSON.stringify writes them (0.00001, 1e-7).
    assert w.c.verify_offline_export(F["export_fractions_json"])["limits"]["admins"] == 1e-7


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


# The lease scenarios. Each client has a clock of its own, starting at the real time (the server's).
class Clock:
    def __init__(self):
        self.now = time.time()

    def __call__(self):
        return self.now


@pytest.fixture(scope="module")
def lw(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("keyhouse-lease"))

    class LW:
        dir = d
        here = {"machine_id": keyhouse.hash_component(F["product_id"], "sdk-e2e-machine-1")}
        elsewhere = {"machine_id": keyhouse.hash_component(F["product_id"], "sdk-e2e-machine-2")}

        @staticmethod
        def client(key, store, components, **extra):
            clock = Clock()
            c = keyhouse.Client(F["url"], F["product_id"], key, lease_keys=F["lease_keys"], store_path=os.path.join(d, store),
                                components=components, now=clock, **extra)
            return c, clock

        @staticmethod
        def copy(src, dst):
            shutil.copyfile(os.path.join(d, src), os.path.join(d, dst))

    LW.c, _ = LW.client(F["keys"]["lease"], "lease.json", LW.here)
    return LW


def test_scenario_activate_and_check_online(lw):
    lw.c.activate("desk-1")
    v = lw.c.check()
    assert (v.licensed, v.offline, v.tier, v.entitlements) == (True, False, "pro", ["sync"])
    before = control("count")
    again = lw.c.check()
    assert again.licensed and again.offline, "a second check answers from the stored lease"
    assert control("count") == before


def test_scenario_two_machines_and_a_reinstall_recovers_its_seat(lw):
    a, _ = lw.client(F["keys"]["twoseats"], "machine-a.json", lw.here)
    b, _ = lw.client(F["keys"]["twoseats"], "machine-b.json", lw.elsewhere)
    assert a.instance_id() != b.instance_id()
    assert a.instance_id() == keyhouse.instance_id(lw.here)
    for m in (a, b):
        m.activate(m.instance_id())
        assert m.check().licensed, m.instance_id()
    # Machine a reinstalled: its store is gone, the seat bound to it is still there.
    again, _ = lw.client(F["keys"]["twoseats"], "machine-a-reinstalled.json", lw.here)
    assert again.activate(again.instance_id())["already_activated"] is True
    v = again.check()
    assert v.licensed, v
    # A seat not bound to a machine cannot be proven by one: a clear refusal.
    u, _ = lw.client(F["keys"]["unbound"], "unbound.json", lw.here)
    u.activate(u.instance_id())
    lost, _ = lw.client(F["keys"]["unbound"], "unbound-reinstalled.json", lw.here)
    raises("invalid_activation_token", lost.activate, lost.instance_id())


def test_scenario_gateway_stopped_licensed_from_the_lease_then_clock_past_exp(lw):
    control("mode?m=down")
    try:
        lw.copy("lease.json", "offline.json")
        app, clock = lw.client(F["keys"]["lease"], "offline.json", lw.here)
        clock.now += 601  # past renew_after: the background renewal fails
        v = app.check()
        assert v.licensed and v.offline, v
        app.wait_renewal()
        assert app.check().licensed
        clock.now += 3600
        v = app.check()
        assert (v.licensed, v.reason) == (False, "expired")
    finally:
        control("mode?m=pass")


def test_scenario_revoked_while_offline_refused_at_the_first_renewal(lw):
    r, clock = lw.client(F["keys"]["revoke"], "revoke.json", lw.here)
    r.activate("desk-2")
    assert r.check().licensed
    control("mode?m=down")
    control(f"revoke?key={F['keys']['revoke']}")
    v = r.check()
    assert v.licensed and v.offline, "offline, before a renewal"
    # The server's caches may answer for up to 1 s after a change (its bound); an app
    # offline for longer than that reconnects.
    time.sleep(1.5)
    control("mode?m=pass")
    clock.now += 601
    assert r.check().licensed, "the check that starts the renewal answers from the lease"
    r.wait_renewal()
    asked = lease_requests()

    def refused(what, requests):
        v = r.check()
        assert (v.licensed, v.reason) == (False, "license_not_active"), what
        assert lease_requests() - asked == requests, f"{what}: lease requests since the refusal"

    refused("after the renewal reached the server", 0)

    # Refused: the server is asked again at most once a minute.
    refused("a check right after the refusal", 0)
    clock.now += 59
    refused("59 s after the refusal", 0)
    clock.now += 1
    refused("a minute after the refusal, asked again", 1)
    refused("right after that ask", 1)
    clock.now -= 5 * 60
    refused("the clock moved back below the last ask, asked at once", 2)

    # Reinstated: licensed again at the first check online a minute after the last ask.
    control("mode?m=down")
    control(f"reinstate?key={F['keys']['revoke']}")
    clock.now += 60
    refused("offline, asked and the refusal stands", 3)
    # The server's caches may answer for up to 1 s after a change (its bound).
    time.sleep(1.5)
    control("mode?m=pass")
    clock.now += 59
    refused("online, 59 s after the last ask", 3)
    clock.now += 1
    v = r.check()
    assert (v.licensed, v.offline) == (True, False), "online a minute after the last ask"
    assert lease_requests() - asked == 4


def test_scenario_lease_copied_to_another_machine(lw):
    lw.copy("lease.json", "copied.json")
    other, _ = lw.client(F["keys"]["lease"], "copied.json", lw.elsewhere)
    assert other.check().reason == "machine_mismatch"
    v = other.renew()
    assert (v.licensed, v.reason) == (False, "machine_mismatch")


def test_scenario_floating_seat_freed_by_close(lw):
    a, _ = lw.client(F["keys"]["floating"], "float-a.json", {})
    b, _ = lw.client(F["keys"]["floating"], "float-b.json", {})
    a.activate("a")
    v = a.check()
    assert v.licensed and v.floating
    raises("activation_limit_exceeded", b.activate, "b")
    a.close()
    b.activate("b")
    assert b.check().licensed


CHILD = """
import sys, time
sys.path.insert(0, {root!r})
import keyhouse
c = keyhouse.Client({url!r}, {product!r}, {key!r}, store_path={store!r}, components={{}})
c.activate("child")
v = c.check()
assert v.licensed, v.reason
print("leased", flush=True)
c.start_heartbeat()
while True:
    time.sleep(1)
"""


def test_scenario_floating_seat_freed_after_a_killed_process(lw):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = CHILD.format(root=root, url=F["url"], product=F["product_id"], key=F["keys"]["killed"], store=os.path.join(lw.dir, "child.json"))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "leased\n"
        other, _ = lw.client(F["keys"]["killed"], "after-kill.json", {})
        raises("activation_limit_exceeded", other.activate, "other")
    finally:
        child.kill()
        child.wait()
    killed = time.time()
    deadline = killed + F["floating_ttl"] + 15
    while True:
        try:
            other.activate("other")
            print(f"seat free {time.time() - killed:.1f}s after the kill")
            break
        except KeyhouseError as e:
            if e.code != "activation_limit_exceeded" or time.time() > deadline:
                raise
        time.sleep(1)


def test_scenario_floating_lease_ran_out_offline_reported_once_as_check_says_it(lw):
    lapsed = []
    s, clock = lw.client(F["keys"]["offlapse"], "offlapse.json", {}, on_lapsed=lapsed.append)
    s.activate("roamer")
    v = s.check()
    assert v.licensed and v.floating
    control("mode?m=down")
    try:
        clock.now += F["floating_ttl"] + 1
        for i in range(3):
            after = s.check()
            assert (after.licensed, after.reason) == (False, "seat_lapsed"), i
    finally:
        control("mode?m=pass")
    assert [x.reason for x in lapsed] == ["seat_lapsed"]


def test_scenario_lapsed_floating_seat_reported(lw):
    lapsed = []
    s, clock = lw.client(F["keys"]["lapsed"], "lapsed.json", {}, on_lapsed=lapsed.append)
    s.activate("sleeper")
    assert s.check().licensed
    # The app slept through its lease (no heartbeat): the server has let the seat go.
    time.sleep(F["floating_ttl"] + 1)
    clock.now += F["floating_ttl"] + 1
    v = s.check()
    assert (v.licensed, v.reason) == (False, "seat_lapsed")
    assert [x.reason for x in lapsed] == ["seat_lapsed"]


def test_scenario_clock_15_minutes_ahead_floating_renewals_at_renew_after_not_every_tick(lw):
    s, clock = lw.client(F["keys"]["skewfloat"], "skewfloat.json", {})
    clock.now += 15 * 60
    s.activate("skewed")
    control("reset")
    # The heartbeat's waits pass on the client's clock, not the test's: a fixed number of
    # ticks, whatever they wait, then the lease requests are counted.
    ticks, start, n = 6, clock.now, [0]

    def tick(wait):
        clock.now += wait
        n[0] += 1
        if n[0] == ticks:
            s._stop.set()

    s._heartbeat_wait = tick
    s.start_heartbeat()
    s._heartbeat.join()
    s.wait_renewal()
    # The manners: a renewal at each lease's renew_after, so over the ticks' time the first
    # lease, one renewal per renew_after elapsed, and one due as the window ends.
    elapsed = clock.now - start
    limit = 2 + int(elapsed // F["floating_hour_renew_after"])
    got = lease_requests()
    assert 2 <= got <= limit, f"{got} lease requests in {ticks} heartbeat ticks ({elapsed:.0f} s on the client's clock), want 2 to {limit}"
    v = s.check()
    assert v.licensed and v.offline, v
    s.close()


def test_scenario_clock_2_hours_ahead_licensed_online(lw):
    s, clock = lw.client(F["keys"]["ahead"], "ahead.json", lw.here)
    clock.now += 2 * 3600
    s.activate("ahead")
    control("reset")
    v = s.check()
    assert v.licensed and not v.offline, v
    assert v.lease_expires_at - clock.now > 50 * 60, f"the lease's end on this clock: {v.lease_expires_at}"
    again = s.check()
    assert again.licensed and again.offline, again
    s.wait_renewal()
    assert lease_requests() == 1
    # Offline, the clock put back to the server's time: the lease's clock moves back with
    # it, so the offset does not lengthen the lease.
    control("mode?m=down")
    try:
        clock.now -= 2 * 3600
        back = s.check()
        assert (back.licensed, back.reason) == (False, "clock_tampered")
    finally:
        control("mode?m=pass")


def test_scenario_clock_10_minutes_behind_clock_tampered_asked_once(lw):
    s, clock = lw.client(F["keys"]["behind"], "behind.json", lw.here)
    clock.now -= 10 * 60
    s.activate("behind")
    control("reset")
    for i in range(3):
        v = s.check()
        assert (v.licensed, v.reason) == (False, "clock_tampered"), i
    assert lease_requests() == 1
    clock.now += 10 * 60
    assert s.check().licensed, "the clock set right"
    s.wait_renewal()


def test_scenario_two_copies_share_a_store_and_a_floating_seat_closing_one_is_a_lapse_for_the_other(lw):
    lapsed = []
    a, _ = lw.client(F["keys"]["shared"], "shared.json", {})
    a.activate("one-machine")
    assert a.check().licensed
    # The second copy starts once the first has activated: it reads the token from the store.
    b, _ = lw.client(F["keys"]["shared"], "shared.json", {}, on_lapsed=lapsed.append)
    assert b.activate("one-machine")["already_activated"] is True
    assert b.check().licensed
    # Any renewal check() still in the background ends before the first copy closes:
    # otherwise it, not the renew below, meets the released seat, and the renew finds no
    # seat to ask about.
    b.wait_renewal()
    a.close()
    v = b.renew()
    assert (v.licensed, v.reason) == (False, "seat_lapsed")
    assert [x.reason for x in lapsed] == ["seat_lapsed"]
    # As after any lapse, activate takes the seat again.
    b.activate("one-machine")
    assert b.check().licensed
    b.close()


# Against a tenant of a hosted stack, behind a proxy whose control also suspends and resumes
# the tenant through the operator API.
def test_scenario_hosted_the_tenant_suspended_licensed_from_the_lease_paced_licensed_again_once_resumed(tmp_path):
    h = F["hosted"]

    def hosted(what):
        return control(what, h["control"])

    clock = Clock()
    c = keyhouse.Client(h["url"], h["product_id"], h["keys"]["suspended"], store_path=os.path.join(str(tmp_path), "suspended.json"),
                        components={}, now=clock)
    c.activate("hosted-desk")
    v = c.check()
    assert (v.licensed, v.offline) == (True, False), v
    # The operator suspends the tenant (an unpaid bill). This server keeps the apps' public
    # checks working (docs/operations.md, "Suspend"): the renewal past renew_after brings a
    # lease, and the checks after it send nothing.
    hosted(f"suspend?tenant={h['tenant_id']}")
    try:
        hosted("reset")
        clock.now += h["renew_after"] + 1
        for i in range(120):
            v = c.check()
            assert v.licensed, f"check {i}, suspended: {v}"
            c.wait_renewal()
            clock.now += 1
        v = c.check()
        assert v.licensed and v.renew_after > clock.now, f"the renewal while suspended brought no lease: {v}"
        assert lease_requests(h["control"]) == 1, "lease requests in 120 checks"

        # A server that refuses a suspended vendor's apps answers the renewal 403 Tenant is
        # suspended (the proxy answers so): the lease and token are kept, the app licensed
        # from the lease until its exp, and the server asked at most once a minute.
        hosted("mode?m=suspended")
        hosted("reset")
        clock.now += h["renew_after"] + 1
        minutes = 10
        for i in range(minutes * 60):
            v = c.check()
            assert (v.licensed, v.offline) == (True, True), f"check {i}, renewals refused: {v}"
            c.wait_renewal()
            clock.now += 1
        n = lease_requests(h["control"])
        assert 2 <= n <= minutes, f"{n} lease requests in {minutes} minutes of checks every second, want one a minute"
        clock.now += 60
        raises("tenant_suspended", c.verify)
        # Past the lease's exp: tenant_suspended, not expired.
        clock.now += h["lease_ttl"]
        for i in range(3):
            v = c.check()
            assert (v.licensed, v.reason) == (False, "tenant_suspended"), f"check {i} past exp: {v}"

        # The operator lifts the suspension: the renewal a minute after the last ask is
        # licensed, with the token kept all along.
        hosted(f"resume?tenant={h['tenant_id']}")
        hosted("mode?m=pass")
        clock.now += 60
        v = c.renew()
        assert (v.licensed, v.offline) == (True, False), f"resumed: {v}"
    finally:
        hosted("mode?m=pass")
        hosted(f"resume?tenant={h['tenant_id']}")
