"""Tests of the typed helpers for token.verify, jwks.*, sessions, users and Sign in with Apple on the
web, against a real keyholed.

Run as test_keyhole.py is (it has the keyholed fixture these use):

    KEYHOLED=.build/debug/keyholed python3 -m unittest discover -s Protocol/clients/python -v
"""

import base64
import json
import os
import sys
import types
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import jsonschema  # noqa: E402
import keyhole  # noqa: E402
from test_conformance import Harness  # noqa: E402
from test_keyhole import REPO_ROOT, VALIDATORS, ServerTestCase  # noqa: E402


# --- token.verify and jwks.* ---------------------------------------------------------------------

APPLE_FIXTURES = os.path.join(REPO_ROOT, "Tests", "KeyholeJOSETests", "Fixtures", "apple")


def _apple_token(name):
    with open(os.path.join(APPLE_FIXTURES, name)) as f:
        return "".join(f.read().split())


def _claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


class TokenTests(ServerTestCase):
    """A real Sign in with Apple token, verified at the moment it was valid (--fixed-clock)."""
    token = _apple_token("apple_token_4.jwt")
    debug_ops = True
    args = ("--fixed-clock", str(_claims(token)["iat"] + 60))
    config = f"""
[[issuer]]
name = "apple"
preset = "apple"
jwks_uri = "{os.path.join(APPLE_FIXTURES, "apple_jwks_panva-wellknown-20241001.json")}"
audiences = ["dev.timc.siwa-demo.TILiOS"]
"""

    def test_verify_token(self):
        with keyhole.Client(self.server.socket_path) as client:
            result = client.verify_token(self.token)
            VALIDATORS["token.verify.result"].validate(result)
            self.assertEqual(result["issuer"], "apple")
            self.assertEqual(result["sub"], _claims(self.token)["sub"])
            self.assertEqual(result["aud"], ["dev.timc.siwa-demo.TILiOS"])
            # A repeat is answered from the verified-token cache, with the same result.
            self.assertEqual(client.verify_token(self.token, issuer="apple"), result)
            with self.assertRaises(keyhole.KeyholeError) as caught:
                client.verify_token(self.token, audience="com.example.other")
            self.assertEqual(caught.exception.code, "token_audience_invalid")
            with self.assertRaises(keyhole.KeyholeError) as caught:
                client.verify_token(self.token, nonce="not the nonce")
            self.assertEqual(caught.exception.code, "token_nonce_mismatch")
            forged = self.token[:-8] + ("AAAAAAAA" if not self.token.endswith("AAAAAAAA") else "BBBBBBBB")
            with self.assertRaises(keyhole.KeyholeError) as caught:
                client.verify_token(forged)
            self.assertEqual(caught.exception.code, "token_signature_invalid")

    def test_jwks_status_and_refresh(self):
        with keyhole.Client(self.server.socket_path) as client:
            client.verify_token(self.token)
            status = client.jwks_status()
            VALIDATORS["jwks.status.result"].validate(status)
            (apple,) = status["issuers"]
            self.assertEqual(apple["kids"], ["FftONTxoEg", "T8tIJ1zSrO", "pggnQeNCOU"])
            self.assertFalse(apple["remote"])
            self.assertTrue(apple["usable"])
            self.assertGreaterEqual(status["verified_cache"]["entries"], 1)
            refreshed = client.jwks_refresh("apple")
            VALIDATORS["jwks.refresh.result"].validate(refreshed)
            self.assertEqual(refreshed["issuers"][0]["outcome"], "not_remote")
            with self.assertRaises(keyhole.KeyholeError) as caught:
                client.jwks_status("nobody")
            self.assertEqual(caught.exception.code, "bad_request")

    def test_schemas_hold_their_ground(self):
        bad_status = {"issuers": [{"issuer": "a"}]}
        with self.assertRaises(jsonschema.ValidationError):
            VALIDATORS["jwks.status.result"].validate(bad_status)
        with self.assertRaises(jsonschema.ValidationError):
            VALIDATORS["token.verify.result"].validate({"issuer": "a", "sub": "", "aud": [], "exp": 1, "claims": {}})


class SessionTests(ServerTestCase):
    """Sessions and users through the client, results checked against the schemas."""

    def test_session_lifecycle(self):
        with keyhole.Client(self.server.socket_path) as client:
            created = client.create_session("py-user", ttl_s=3600, data={"cart": [1, 2]})
            VALIDATORS["session.create.result"].validate(created)
            session = client.get_session(created["session"])
            VALIDATORS["session.get.result"].validate(session)
            self.assertEqual(session["id"], created["id"])
            self.assertEqual(session["issuer"], "local")
            self.assertEqual(session["data"], {"cart": [1, 2]})
            self.assertEqual(session["expires_at"], session["created_at"] + 3600)
            self.assertEqual([s["id"] for s in client.list_sessions("py-user")], [created["id"]])
            self.assertTrue(client.revoke_session(id=created["id"]))
            self.assertFalse(client.revoke_session(session=created["session"]))
            with self.assertRaises(keyhole.KeyholeError) as caught:
                client.get_session(created["session"])
            self.assertEqual(caught.exception.code, "session_not_found")

    def test_users(self):
        with keyhole.Client(self.server.socket_path) as client:
            client.create_session("py-user-2")
            updated = client.update_user("py-user-2", email="p@example.com", name={"given": "Py"})
            self.assertFalse(updated["created"])
            user = client.get_user("py-user-2")
            VALIDATORS["user.get.result"].validate(user)
            self.assertEqual(user["email"], "p@example.com")
            self.assertEqual(client.revoke_all_sessions("py-user-2"), 1)
            self.assertEqual(client.delete_user("py-user-2"), {"deleted": True, "sessions_revoked": 0})
            with self.assertRaises(keyhole.KeyholeError) as caught:
                client.get_user("py-user-2")
            self.assertEqual(caught.exception.code, "user_not_found")

    def test_bad_arguments(self):
        with keyhole.Client(self.server.socket_path) as client:
            for args, code in [({"sub": "x", "ttl": 60}, "bad_request"),
                               ({"sub": "x", "data": {"b": "x" * 5000}}, "data_too_large"),
                               ({"sub": "x", "issuer": "apple"}, "bad_request")]:
                with self.assertRaises(keyhole.KeyholeError) as caught:
                    client.call("session.create", args)
                self.assertEqual(caught.exception.code, code)


    def test_admin_snapshot(self):
        with keyhole.Client(self.server.socket_path) as client:
            for n in range(3):
                client.create_session(f"py-snap-{n}")
            before_stats = client.stats()
            VALIDATORS["stats.result"].validate(before_stats)
            before = before_stats["store"]
            snapshot = client.admin_snapshot()
            VALIDATORS["admin.snapshot.result"].validate(snapshot)
            self.assertGreaterEqual(snapshot["sessions"], 3)
            self.assertGreaterEqual(snapshot["users"], 3)
            self.assertGreater(snapshot["bytes"], 0)
            self.assertGreater(snapshot["start_lsn"], 0)
            stats = client.stats()
            VALIDATORS["stats.result"].validate(stats)
            self.assertEqual(stats["store"]["snapshots"], before["snapshots"] + 1)
            self.assertEqual(stats["store"]["last_snapshot"], snapshot)
            self.assertEqual(stats["requests"]["admin.snapshot"],
                             before_stats["requests"].get("admin.snapshot", 0) + 1)
            # Sessions created before the snapshot are still there, and changes go on after it.
            self.assertEqual(len(client.list_sessions("py-snap-0")), 1)
            client.create_session("py-snap-0")
            with self.assertRaises(keyhole.KeyholeError) as caught:
                client.call("admin.snapshot", {"now": True})
            self.assertEqual(caught.exception.code, "bad_request")
            self.assertIn("now", caught.exception.message)
            self.assertEqual(client.stats()["store"]["snapshots"], before["snapshots"] + 1)

    def test_snapshot_schemas_hold_their_ground(self):
        good = {"start_lsn": 12, "sessions": 3, "users": 3, "bytes": 400, "wal_bytes_removed": 900,
                "created_at": 1767225600, "ms": 2, "longest_pause_us": 300}
        VALIDATORS["admin.snapshot.result"].validate(good)
        for bad in ({k: v for k, v in good.items() if k != "ms"}, dict(good, extra=1), dict(good, start_lsn=0),
                    dict(good, bytes=-1), dict(good, created_at=1.5)):
            with self.assertRaises(jsonschema.ValidationError, msg=repr(bad)):
                VALIDATORS["admin.snapshot.result"].validate(bad)
        store = {"sessions": 0, "users": 0, "wal_bytes": 0, "records": 0, "syncs": 0, "records_per_sync": 0,
                 "inline_syncs": 0, "inline_pauses": 0,
                 "failing": False, "failures": 0, "snapshots": 1, "outbox": 0, "last_snapshot": good}
        stats = {"uptime_ms": 0, "connections": {"open": 0, "total": 0, "rejected": 0, "slow_readers": 0}, "requests": {},
                 "in_flight": 0, "errors": {}, "bytes": {"in": 0, "out": 0}, "store": store}
        VALIDATORS["stats.result"].validate(stats)
        for bad_store in ({k: v for k, v in store.items() if k != "snapshots"},
                          dict(store, last_snapshot={"start_lsn": 1})):
            with self.assertRaises(jsonschema.ValidationError, msg=repr(bad_store)):
                VALIDATORS["stats.result"].validate(dict(stats, store=bad_store))


# --- Sign in with Apple on the web ---------------------------------------------------------------

REDIRECT_URI = "https://example.com/apple/callback"


class AppleWebTests(unittest.TestCase):
    """apple.authorize and apple.callback through the helpers, against the harness's keyholed with its
    Apple audience made a web client (a redirect URI). No Apple is reachable: every callback here is
    refused before a code exchange, each for its own reason."""

    @classmethod
    def setUpClass(cls):
        # The harness configures the fixture token's audience; the redirect URI must name it.
        cls.audience = _claims(_apple_token("apple_token_4.jwt"))["aud"]
        cls.harness = Harness(f'[apple]\nredirect_uris = {{ "{cls.audience}" = "{REDIRECT_URI}" }}\n')
        cls.client = keyhole.Client(cls.harness.info["socket"])

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.harness.stop()

    def authorize(self, **args):
        """apple_authorize, with its result's shape checked."""
        result = self.client.apple_authorize(**args)
        self.assertEqual(set(result), {"url", "state", "expires_at", "cookie"}, result)
        self.assertIsInstance(result["url"], str)
        self.assertIsInstance(result["state"], str)
        self.assertGreaterEqual(len(result["state"]), 43)  # 32 random bytes, base64url
        self.assertIs(type(result["expires_at"]), int)
        cookie = result["cookie"]
        self.assertEqual(set(cookie), {"name", "value", "max_age", "set_cookie"}, cookie)
        for name in ("name", "value", "set_cookie"):
            self.assertIsInstance(cookie[name], str, name)
        self.assertIs(type(cookie["max_age"]), int)
        self.assertNotEqual(cookie["value"], result["state"])
        return result

    def assert_refused(self, code, call, *args, **kwargs):
        with self.assertRaises(keyhole.KeyholeError) as caught:
            call(*args, **kwargs)
        self.assertNotIsInstance(caught.exception, keyhole.KeyholeConnectionError)
        self.assertEqual(caught.exception.code, code, str(caught.exception))
        return caught.exception

    def test_harness_audience_is_the_configured_client(self):
        self.assertEqual(self.harness.info["audience"], self.audience)

    def test_vectors(self):
        """Every case of vectors/apple_web.json, through client.call."""
        with open(os.path.join(REPO_ROOT, "Protocol", "vectors", "apple_web.json"), encoding="utf-8") as f:
            cases = json.load(f)["cases"]
        for case in cases:
            with self.subTest(case["name"]):
                args = json.loads(json.dumps(case["args"]))
                if case.get("fresh"):
                    fresh = self.client.apple_authorize()
                    if "state" in args["form"]:
                        args["form"]["state"] = fresh["state"]
                    if args.get("cookie") == "FRESH":
                        args["cookie"] = fresh["cookie"]["value"]
                expect = case["expect"]
                if expect["ok"]:
                    self.assertEqual(sorted(self.client.call(case["op"], args)), expect["result_keys"])
                else:
                    self.assert_refused(expect["code"], self.client.call, case["op"], args)

    def test_authorize_with_defaults(self):
        result = self.authorize()
        url, state, cookie = result["url"], result["state"], result["cookie"]
        self.assertTrue(url.startswith("http://127.0.0.1:9/auth/authorize?"), url)
        self.assertIn(f"state={state}", url)
        self.assertIn("response_mode=form_post", url)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query, strict_parsing=True)
        self.assertEqual(query["state"], [state])
        self.assertEqual(query["client_id"], [self.audience])
        self.assertEqual(query["redirect_uri"], [REDIRECT_URI])
        self.assertEqual(query["response_mode"], ["form_post"])
        self.assertEqual(query["scope"], ["name email"])
        self.assertEqual(len(query["nonce"]), 1)
        self.assertEqual(cookie["name"], "__Host-kh_apple")
        self.assertTrue(cookie["set_cookie"].startswith(f"__Host-kh_apple={cookie['value']};"), cookie["set_cookie"])
        attributes = [a.strip() for a in cookie["set_cookie"].split(";")[1:]]
        for attribute in ("Secure", "HttpOnly", "SameSite=None"):
            self.assertIn(attribute, attributes)
        self.assertEqual(cookie["max_age"], 600)
        VALIDATORS["apple.authorize.result"].validate(result)
        for bad in ({**result, "nonce": "x"}, {**result, "cookie": {**cookie, "set_cookie": "__Host-kh_apple=x; SameSite=Lax"}},
                    {**result, "state": "short"}):
            with self.assertRaises(jsonschema.ValidationError):
                VALIDATORS["apple.authorize.result"].validate(bad)
        # Each authorization draws its own state, nonce and cookie.
        again = self.authorize()
        self.assertNotEqual(again["state"], state)
        self.assertNotEqual(again["cookie"]["value"], cookie["value"])

    def test_authorize_sends_the_arguments_given(self):
        named = self.authorize(client_id=self.audience, redirect_uri=REDIRECT_URI, scope="name",
                               return_to="/account")
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(named["url"]).query)
        self.assertEqual(query["scope"], ["name"])
        self.assertEqual(query["client_id"], [self.audience])
        self.assert_refused("bad_request", self.client.apple_authorize, return_to="//evil.example")
        self.assert_refused("bad_request", self.client.apple_authorize,
                            redirect_uri="https://example.com/elsewhere")

    def test_callback_state_is_bound_to_the_cookie_and_used_once(self):
        started = self.authorize()
        state, cookie = started["state"], started["cookie"]["value"]
        form = {"state": state, "code": "c", "id_token": "x"}
        wrong = cookie[:-4] + ("AAAA" if not cookie.endswith("AAAA") else "BBBB")
        self.assert_refused("state_invalid", self.client.apple_callback, form, wrong)
        # The first callback used the state up, though its cookie was not the browser's.
        self.assert_refused("state_invalid", self.client.apple_callback, form, cookie)

    def test_callback_without_a_state(self):
        # form is sent as an (empty) object: keyholed reads it, and finds neither a code nor an error
        # in it (a form that is not an object would be refused as such).
        error = self.assert_refused("bad_request", self.client.apple_callback, {}, "no-cookie")
        self.assertIn("id_token", error.message)
        self.assert_refused("state_invalid", self.client.apple_callback,
                            {"state": "unknown", "code": "c", "id_token": "x"}, "no-cookie")

    def test_callback_with_apples_error(self):
        started = self.authorize()
        # A framework's form (a mapping, not a dict) is sent as its fields.
        form = types.MappingProxyType({"state": started["state"], "error": "user_cancelled_authorize"})
        error = self.assert_refused("apple_authorization_refused", self.client.apple_callback, form,
                                    started["cookie"]["value"])
        self.assertIn("user_cancelled_authorize", error.message)

    def test_callback_checks_the_token_once_state_and_cookie_hold(self):
        started = self.authorize(return_to="/account")
        form = {"state": started["state"], "code": "c", "id_token": "not-a-token"}
        self.assert_refused("token_malformed", self.client.apple_callback, form, started["cookie"]["value"],
                            session={"ttl_s": 3600})
        # Used up by that callback too.
        self.assert_refused("state_invalid", self.client.apple_callback, form, started["cookie"]["value"])
        # session is sent: keyholed reads it.
        started = self.authorize()
        form = {"state": started["state"], "code": "c", "id_token": "not-a-token"}
        error = self.assert_refused("bad_request", self.client.apple_callback, form, started["cookie"]["value"],
                                    session={"ttl_s": "an hour"})
        self.assertIn("ttl_s", error.message)


if __name__ == "__main__":
    unittest.main()
