"""The shared vectors (clients/testdata/vectors.json): the suite every SDK passes."""
import json
import os

import pytest

import keyhouse

V = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "vectors.json"), encoding="utf-8"))


def test_instance_ids_derive_from_the_most_stable_component():
    assert V["components"]["instance_ids"]
    for c in V["components"]["instance_ids"]:
        assert keyhouse.instance_id(c["components"]) == c["instance_id"], c["components"]


def test_components_hash_with_the_product_id():
    for name, raw in V["components"]["raw"].items():
        assert keyhouse.hash_component(V["components"]["product_id"], raw) == V["components"]["hashed"][name]


@pytest.mark.parametrize("e", V["exports"], ids=lambda e: e["name"])
def test_offline_export(e):
    if e["ok"]:
        lic = keyhouse.verify_offline_export(e["json"], V["rsa_public_key_pem"], V["now"])
        assert (lic["key"], lic["tier"]) == (e["key"], e["tier"])
    else:
        with pytest.raises(keyhouse.KeyhouseError) as err:
            keyhouse.verify_offline_export(e["json"], V["rsa_public_key_pem"], V["now"])
        assert err.value.code == e["error"]


@pytest.mark.parametrize("n", V["numbers"], ids=lambda n: n["name"])
def test_numbers_written_as_json_stringify_writes_them(n):
    # verify_offline_export re-serializes the parsed license: its numbers must come out as
    # the server signed them (JSON.stringify's form), not as json.dumps writes them.
    assert keyhouse.core._stringify({"n": json.loads(n["in"])}) == ('{"n":' + n["json"] + "}").encode()


@pytest.mark.parametrize("m", V["manifests"], ids=lambda m: m["name"])
def test_manifest(m):
    if m["ok"]:
        keyhouse.verify_manifest(m["release"], m["request"], V["rsa_public_key_pem"], V["now"], m["max_age"])
    else:
        with pytest.raises(keyhouse.KeyhouseError) as err:
            keyhouse.verify_manifest(m["release"], m["request"], V["rsa_public_key_pem"], V["now"], m["max_age"])
        assert err.value.code == m["error"]


@pytest.mark.parametrize("lease", V["leases"], ids=lambda lease: lease["name"])
def test_lease(lease):
    try:
        keyhouse.verify_lease(lease["lease"], V["lease_keys"][lease["keys"]], V["product_id"], V["now"], lease["components"],
                              license_key=V["license_key"], newest_iat_seen=lease["newest_iat_seen"])
        got = "licensed"
    except keyhouse.LeaseError as e:
        got = e.code
    assert got == lease["verdict"]


def test_error_codes():
    for e in V["errors"]:
        assert keyhouse.error_code(e["status"], e["error"]) == e["code"], e["error"]


# A planned key rotation: an app that ships the current and the next key verifies what
# either signed, the same as with one key; with the current key alone, what the next key
# signed is invalid_signature.
BOTH_KEYS = [V["rsa_public_key_pem"], V["rotation"]["rsa_next_public_key_pem"]]


def _expect_export(e, keys, ok, error):
    if ok:
        lic = keyhouse.verify_offline_export(e["json"], keys, V["now"])
        assert (lic["key"], lic["tier"]) == (e["key"], e["tier"])
    else:
        with pytest.raises(keyhouse.KeyhouseError) as err:
            keyhouse.verify_offline_export(e["json"], keys, V["now"])
        assert err.value.code == error


def _expect_manifest(m, keys, ok, error):
    if ok:
        keyhouse.verify_manifest(m["release"], m["request"], keys, V["now"], m["max_age"])
    else:
        with pytest.raises(keyhouse.KeyhouseError) as err:
            keyhouse.verify_manifest(m["release"], m["request"], keys, V["now"], m["max_age"])
        assert err.value.code == error


@pytest.mark.parametrize("e", V["exports"], ids=lambda e: e["name"])
def test_offline_export_with_both_keys(e):
    _expect_export(e, BOTH_KEYS, e["ok"], e.get("error"))


@pytest.mark.parametrize("m", V["manifests"], ids=lambda m: m["name"])
def test_manifest_with_both_keys(m):
    _expect_manifest(m, BOTH_KEYS, m["ok"], m.get("error"))


def test_rotation_vectors_are_present():
    assert V["rotation"]["exports"] and V["rotation"]["manifests"]


@pytest.mark.parametrize("e", V["rotation"]["exports"], ids=lambda e: e["name"])
def test_rotation_offline_export(e):
    _expect_export(e, BOTH_KEYS, e["ok"], e.get("error"))
    _expect_export(e, list(reversed(BOTH_KEYS)), e["ok"], e.get("error"))
    _expect_export(e, V["rsa_public_key_pem"], False, "invalid_signature")


@pytest.mark.parametrize("m", V["rotation"]["manifests"], ids=lambda m: m["name"])
def test_rotation_manifest(m):
    _expect_manifest(m, BOTH_KEYS, m["ok"], m.get("error"))
    _expect_manifest(m, list(reversed(BOTH_KEYS)), m["ok"], m.get("error"))
    _expect_manifest(m, V["rsa_public_key_pem"], False, "invalid_signature")


def test_a_lease_error_prints_without_the_license_key_its_claims_hold():
    # The claims' sub is the license key: code reads e.claims, a printed error shows none.
    import traceback
    lease = next(x for x in V["leases"] if x["verdict"] == "expired")
    with pytest.raises(keyhouse.LeaseError) as err:
        keyhouse.verify_lease(lease["lease"], V["lease_keys"][lease["keys"]], V["product_id"], V["now"], lease["components"],
                              license_key=V["license_key"], newest_iat_seen=lease["newest_iat_seen"])
    assert err.value.claims["sub"] == V["license_key"]
    for shown in (str(err.value), repr(err.value), "".join(traceback.format_exception(err.value))):
        assert V["license_key"] not in shown, shown
