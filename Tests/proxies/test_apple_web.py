"""Sign in with Apple on the web, with no application code: a scripted browser (browser.py) goes from
a site's sign-in link through Apple's pages (fake_apple.py) and back, behind the shipped nginx and
Caddy snippets, to keyholed's pages (HTTP.md, "Sign in with Apple").

keyholed runs on a clock the tests move (--fixed-clock and debug.advance_clock), and the fake Apple
reads the same one, so a state can expire without a wait. The site is https://app.example.com to
the browser, reached at the proxy's loopback port: a TLS terminator in front would be no different
to keyholed, and the browser keeps the Secure, __Host- and SameSite rules a real one keeps.
"""

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.parse

import browser
import fake_apple
import rig

SITE = "https://app.example.com"
WEB = "com.example.web"  # the Services ID
APP = "com.example.app"  # the app's bundle ID, also an audience of the issuer
REDIRECT = SITE + "/apple/callback"
BINDING = "__Host-kh_apple"
SESSION = "kh_session"
ERROR_PATH = "/signin"
STATE_LIFETIME = 600

CLOCK = [0.0]  # set by setUpModule
APPLE = None
KEYHOLED = None
UPSTREAM = None
WORKDIR = None


class Keyholed:
    """keyholed with [apple] for the fake Apple and [http] web = true, on a clock the tests move."""

    def __init__(self, workdir, apple):
        self.dir = workdir
        self.socket = os.path.join(workdir, "k.sock")
        self.http_socket = os.path.join(workdir, "h.sock")
        self.log_path = os.path.join(workdir, "keyholed.log")
        store_key = os.path.join(workdir, "store.key")
        with open(store_key, "wb") as f:
            f.write(secrets.token_bytes(32))
        os.chmod(store_key, 0o600)
        config = os.path.join(workdir, "keyholed.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f"""[[issuer]]
name = "apple"
preset = "apple"
jwks_uri = "{apple.url}/auth/keys"
audiences = ["{WEB}", "{APP}"]

[apple]
team_id = "{apple.team_id}"
key_id = "{apple.key_id}"
private_key_file = "{apple.team_key}"
store_key_file = "{store_key}"
redirect_uris = {{ "{WEB}" = "{REDIRECT}" }}
endpoint = "{apple.url}"
web_client_id = "{WEB}"

[http]
socket = "{self.http_socket}"
web = true
web_error_path = "{ERROR_PATH}"
""")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [rig.KEYHOLED, "--config", config, "--socket", self.socket, "--state-dir", os.path.join(workdir, "state"),
             "--log-level", "info", "--enable-debug-ops", "--fixed-clock", str(int(CLOCK[0]))],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        rig.wait_until(rig.connect_unix(self.socket), self.proc, "keyholed", self.log_path)
        rig.wait_until(rig.connect_unix(self.http_socket), self.proc, "keyholed's HTTP socket", self.log_path)
        self.client = rig.keyhole.Client(self.socket)

    def advance(self, seconds):
        """keyholed's clock and the fake Apple's, forward together."""
        CLOCK[0] = float(self.client.call("debug.advance_clock", {"s": seconds})["now"])

    def authz(self, token):
        return rig.unix_request(self.http_socket, "/authz", headers=[("Cookie", f"{SESSION}={token}")])[0]

    def counts(self):
        store = self.client.call("stats")["store"]
        return store["users"], store["sessions"]

    def user(self, sub):
        try:
            return self.client.call("user.get", {"sub": sub})
        except rig.keyhole.KeyholeError as error:
            return error.code

    def stop(self):
        self.client.close()
        status = rig.stop_process(self.proc)
        self.log.close()
        return status

    def text(self):
        return rig.read_text(self.log_path)


def setUpModule():
    global APPLE, KEYHOLED, UPSTREAM, WORKDIR
    # An hour behind the real clock: everything Apple sees from keyholed (tokens' times, client
    # secrets) must come from keyholed's fixed clock, never from the real one.
    CLOCK[0] = float(int(time.time()) - 3600)
    WORKDIR = tempfile.mkdtemp(prefix="khw", dir="/tmp")
    try:
        APPLE = fake_apple.FakeApple(WORKDIR, {WEB: REDIRECT, APP: REDIRECT}, now=lambda: CLOCK[0])
        UPSTREAM = rig.Upstream(WORKDIR)
        KEYHOLED = Keyholed(WORKDIR, APPLE)
    except Exception:
        tearDownModule()
        raise


def tearDownModule():
    status = KEYHOLED.stop() if KEYHOLED is not None else None
    if UPSTREAM is not None:
        UPSTREAM.stop()
    if APPLE is not None:
        APPLE.close()
    if status not in (0, None):
        raise rig.RigError(f"keyholed exited {status} after SIGTERM:\n{KEYHOLED.text()}")
    shutil.rmtree(WORKDIR, ignore_errors=True)


def new_apple_id():
    return f"user{secrets.token_hex(4)}@example.net"


class WebFlowContract:
    """The web flow through one proxy's shipped snippet; a subclass names the proxy."""

    proxy = None
    secrets_seen = []  # every state, nonce, cookie, code and token: none may show in a log

    @classmethod
    def setUpClass(cls):
        cls.proxy = cls.make_proxy(KEYHOLED.http_socket, UPSTREAM.port)
        cls.proxy.start()

    @classmethod
    def tearDownClass(cls):
        if cls.proxy is not None:
            logs = cls.proxy.logs()
            cls.proxy.stop()
            text = KEYHOLED.text() + logs
            leaked = [s for s in cls.secrets_seen if s in text]
            if leaked:
                raise AssertionError(f"{len(leaked)} secrets in keyholed's or {cls.proxy.name}'s logs, e.g. {leaked[0][:12]}...")

    def browser(self):
        return browser.Browser({SITE: self.proxy.port})

    def keep(self, *values):
        self.secrets_seen.extend(v for v in values if v)

    def start(self, b, return_to="/account"):
        """The site's sign-in link, followed to Apple's sign-in page."""
        page = b.go(f"{SITE}/apple/start?return_to={urllib.parse.quote(return_to, safe='')}", initiator=SITE + "/")
        self.assertEqual(len(page.history), 1, page)
        self.assertEqual(page.history[0].status, 302, page.history[0])
        self.assertEqual(page.status, 200, f"{page}\n{APPLE.refusals}")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(page.url).query))
        self.keep(query.get("state"), query.get("nonce"), b.cookie(BINDING))
        return page, query

    def consent(self, b, page, apple_id, decision="continue"):
        """At Apple: the Apple ID typed in and Continue (or Cancel); Apple's form_post page back."""
        posted = b.submit(page, fields={"apple_id": apple_id}, button=("decision", decision))
        self.assertEqual(posted.status, 200, f"{posted}\n{APPLE.refusals}")
        form = posted.forms()[0]
        self.assertEqual((form["method"], form["action"]), ("POST", REDIRECT))
        self.keep(form["fields"].get("code"), form["fields"].get("id_token"))
        return posted

    def callback(self, b, posted, **changes):
        """Apple's page's form posted to the site (as its onload script does), with `changes`; the
        callback's answer and where it led."""
        self.token_requests = APPLE.token_requests
        page = b.submit(posted, fields=changes.get("fields"), drop=changes.get("drop", ()))
        answer = page.history[0] if page.history else page
        self.assertEqual(answer.url, REDIRECT)
        self.keep(b.cookie(SESSION))
        return answer, page

    def refused(self, answer, code, exchanges=0):
        """The last callback's answer is a refusal with `code`, and it asked Apple's token endpoint
        `exchanges` times (0: keyholed refused before exchanging the code)."""
        self.assertEqual(APPLE.token_requests - self.token_requests, exchanges, f"{code}: {APPLE.refusals}")
        self.assertEqual(answer.status, 303, answer)
        self.assertEqual(answer.header("Location"), f"{ERROR_PATH}?keyhole_error={code}", f"{answer}\n{APPLE.refusals}")
        self.assertFalse([c for c in answer.set_cookies() if c.startswith(SESSION + "=")], answer)
        cleared = [c for c in answer.set_cookies() if c.startswith(BINDING + "=")]
        self.assertEqual(len(cleared), 1, answer)
        self.assertIn("Max-Age=0", cleared[0])

    def sign_in(self, b, apple_id, return_to="/account"):
        page, query = self.start(b, return_to)
        posted = self.consent(b, page, apple_id)
        answer, landed = self.callback(b, posted)
        self.assertEqual(answer.status, 303, f"{answer}\n{APPLE.refusals}")
        return query, posted, answer, landed

    # The whole flow

    def test_start_apple_consent_callback_signed_in_then_logout(self):
        b = self.browser()
        apple_id = new_apple_id()
        sub = APPLE.sub_of(apple_id)
        refused_before = len(APPLE.refusals)
        self.assertEqual(b.go(SITE + "/account").status, 401, "no session yet: the proxy asks keyholed, which says 401")

        page, query = self.start(b, "/account?tab=1")
        start = page.history[0]
        self.assertTrue(start.header("Location").startswith(APPLE.url + "/auth/authorize?"), start)
        self.assertEqual((query["client_id"], query["redirect_uri"], query["response_type"], query["response_mode"]),
                         (WEB, REDIRECT, "code id_token", "form_post"))
        self.assertEqual(query["scope"].split(), ["name", "email"])
        [binding] = b.cookie_attributes(BINDING)
        self.assertEqual((binding["secure"], binding["httponly"], binding["samesite"], binding["path"]),
                         (True, True, "none", "/"))

        posted = self.consent(b, page, apple_id)
        self.assertIn("user", posted.forms()[0]["fields"], "Apple sends the user's name the first time only")
        answer, landed = self.callback(b, posted)
        # Apple's POST is cross-site: the browser sent the binding cookie because it is SameSite=None.
        self.assertIn(f"{BINDING}=", dict(b.sent)[REDIRECT] or "")
        self.assertEqual(answer.status, 303, f"{answer}\n{APPLE.refusals}")
        self.assertEqual(answer.header("Location"), "/account?tab=1")
        self.assertIsNone(b.cookie(BINDING), "the binding cookie is cleared")
        [session] = b.cookie_attributes(SESSION)
        self.assertEqual((session["secure"], session["httponly"], session["samesite"], session["path"]),
                         (True, True, "lax", "/"))
        token = session["value"]

        # Signed in: the page behind forward-auth reaches the application as this user.
        self.assertEqual(landed.url, SITE + "/account?tab=1")
        self.assertEqual(landed.status, 200, landed)
        seen = json.loads(landed.body)
        self.assertEqual(seen["target"], "/account?tab=1")
        self.assertIn(["X-Auth-Request-User", sub], seen["headers"])
        self.assertIn(["X-Auth-Request-Email", apple_id], seen["headers"])
        self.assertEqual(KEYHOLED.authz(token), 200)
        user = KEYHOLED.user(sub)
        self.assertEqual(user["name"], {"given": apple_id.split("@")[0].capitalize(), "family": "Appleseed"})
        self.assertEqual(user["email"], apple_id)

        # Signed in again later: Apple sends no user field; the name stays.
        _, again, answer, _ = self.sign_in(b, apple_id, "/")
        self.assertNotIn("user", again.forms()[0]["fields"])
        self.assertEqual(answer.header("Location"), "/")
        second = b.cookie(SESSION)
        self.assertNotEqual(second, token)
        self.assertEqual(KEYHOLED.user(sub)["name"]["family"], "Appleseed")

        self.assertEqual(APPLE.refusals[refused_before:], [], "Apple took every exchange and client secret")
        # A logout form on another site, even with the session cookie (a browser without SameSite
        # support would send it): refused, still signed in.
        forged = b.go(SITE + "/logout", "POST", {}, initiator="https://evil.example/",
                      headers=[("Cookie", f"{SESSION}={second}")])
        self.assertEqual(forged.status, 403, forged)
        self.assertEqual(KEYHOLED.authz(second), 200)
        # The site's own logout: the session ends, its cookie is cleared, the next page is refused.
        out = b.go(SITE + "/logout", "POST", {}, initiator=SITE + "/account")
        self.assertEqual(out.history[0].status, 303, out.history[0])
        self.assertEqual(out.history[0].header("Location"), "/")
        self.assertIsNone(b.cookie(SESSION))
        self.assertEqual(out.status, 401, "signed out: / is refused")
        self.assertEqual(KEYHOLED.authz(second), 401)
        self.assertEqual(KEYHOLED.authz(token), 200, "logout ends this browser's session only")
        # The old cookie, sent again by hand, gets nowhere.
        self.assertEqual(b.fetch("GET", SITE + "/account", headers=[("Cookie", f"{SESSION}={second}")])[0], 401)

    # Every way it must fail

    def test_state_of_another_browser_or_none_is_refused_and_spent(self):
        before = KEYHOLED.counts()
        victim, attacker = self.browser(), self.browser()
        apple_id = new_apple_id()
        # The attacker's own authorization, posted by the victim's browser (login CSRF): the victim's
        # binding cookie is for another state.
        self.start(victim)
        page, _ = self.start(attacker)
        posted = self.consent(attacker, page, apple_id)
        answer, _ = self.callback(victim, posted)
        self.refused(answer, "state_invalid")
        # Spent: the attacker's own browser cannot use it either.
        self.refused(self.callback(attacker, posted)[0], "state_invalid")
        # A browser with no binding cookie at all.
        page, _ = self.start(attacker)
        posted = self.consent(attacker, page, apple_id)
        self.refused(self.callback(self.browser(), posted)[0], "state_invalid")
        self.assertEqual(KEYHOLED.counts(), before)
        self.assertEqual(KEYHOLED.user(APPLE.sub_of(apple_id)), "user_not_found")

    def test_replayed_callback_is_refused(self):
        b = self.browser()
        _, posted, answer, _ = self.sign_in(b, new_apple_id())
        before = KEYHOLED.counts()
        first = b.cookie(SESSION)
        replay, _ = self.callback(b, posted)
        self.refused(replay, "state_invalid")
        self.assertEqual(b.cookie(SESSION), first)
        self.assertEqual(KEYHOLED.counts(), before)

    def test_expired_state_is_refused(self):
        b = self.browser()
        apple_id = new_apple_id()
        before = KEYHOLED.counts()
        page, _ = self.start(b)
        # The user comes back from Apple after the state's ten minutes (Apple's page is fresh).
        KEYHOLED.advance(STATE_LIFETIME + 1)
        posted = self.consent(b, page, apple_id)
        self.refused(self.callback(b, posted)[0], "state_invalid")
        self.assertEqual(KEYHOLED.counts(), before)
        # Within its lifetime it works.
        page, _ = self.start(b)
        KEYHOLED.advance(STATE_LIFETIME - 60)
        posted = self.consent(b, page, apple_id)
        self.assertEqual(self.callback(b, posted)[0].status, 303)
        self.assertIsNotNone(b.cookie(SESSION))
        self.assertNotEqual(KEYHOLED.user(APPLE.sub_of(apple_id)), "user_not_found")

    def test_token_with_another_nonce_or_for_another_client_is_refused(self):
        b = self.browser()
        apple_id = new_apple_id()
        sub = APPLE.sub_of(apple_id)
        before = KEYHOLED.counts()
        page, _ = self.start(b)
        posted = self.consent(b, page, apple_id)
        forged = APPLE.identity_token(sub, WEB, nonce=secrets.token_urlsafe(16))
        self.keep(forged)
        self.refused(self.callback(b, posted, fields={"id_token": forged})[0], "token_nonce_mismatch")
        page, query = self.start(b)
        posted = self.consent(b, page, apple_id)
        for_app = APPLE.identity_token(sub, APP, nonce=query["nonce"])
        self.keep(for_app)
        self.refused(self.callback(b, posted, fields={"id_token": for_app})[0], "token_audience_invalid")
        self.assertEqual(KEYHOLED.counts(), before)
        self.assertEqual(KEYHOLED.user(sub), "user_not_found")

    def test_return_to_off_site_is_refused_before_apple(self):
        b = self.browser()
        for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"):
            page = b.go(f"{SITE}/apple/start?return_to={urllib.parse.quote(target, safe='')}", initiator=SITE + "/")
            self.assertEqual(page.status, 400, f"{target}: {page}")
            self.assertIsNone(b.cookie(BINDING), target)

    def test_user_field_not_json_or_huge_is_ignored_and_the_sign_in_works(self):
        marker = "NOTJSON-" + secrets.token_hex(8)
        warned = KEYHOLED.text().count("apple.user_field_ignored")
        for user in ("{" + marker, json.dumps({"name": {"firstName": "J" * 9000}})):
            b = self.browser()
            apple_id = new_apple_id()
            page, _ = self.start(b)
            posted = self.consent(b, page, apple_id)
            answer, landed = self.callback(b, posted, fields={"user": user})
            self.assertEqual(answer.status, 303, f"{answer}\n{APPLE.refusals}")
            self.assertEqual(landed.status, 200, landed)
            user = KEYHOLED.user(APPLE.sub_of(apple_id))
            self.assertIsInstance(user, dict, "signed in: the user exists")
            self.assertNotIn("name", user)
        text = KEYHOLED.text()
        self.assertEqual(text.count("apple.user_field_ignored") - warned, 2, "one warning per ignored field")
        self.assertNotIn(marker, text)

    def test_user_cancelling_at_apple_is_refused(self):
        b = self.browser()
        before = KEYHOLED.counts()
        page, _ = self.start(b)
        posted = self.consent(b, page, new_apple_id(), decision="cancel")
        self.assertEqual(posted.forms()[0]["fields"].get("error"), "user_cancelled_authorize")
        self.refused(self.callback(b, posted)[0], "apple_authorization_refused")
        self.assertEqual(KEYHOLED.counts(), before)

    def test_apple_refusing_the_code_or_unreachable_stores_nothing(self):
        b = self.browser()
        apple_id = new_apple_id()
        before = KEYHOLED.counts()
        page, _ = self.start(b)
        posted = self.consent(b, page, apple_id)
        APPLE.refuse_codes = True
        try:
            self.refused(self.callback(b, posted)[0], "upstream_rejected", exchanges=1)
            self.assertTrue(APPLE.refusals[-1].startswith("invalid_grant: refused on demand"), APPLE.refusals)
        finally:
            APPLE.refuse_codes = False
        page, _ = self.start(b)
        posted = self.consent(b, page, apple_id)
        APPLE.unreachable()
        try:
            self.refused(self.callback(b, posted)[0], "upstream_unavailable")  # refused: never reached the fake
        finally:
            APPLE.reachable()
        self.assertEqual(KEYHOLED.counts(), before)
        self.assertEqual(KEYHOLED.user(APPLE.sub_of(apple_id)), "user_not_found")
        # Back: the next sign-in works.
        self.sign_in(b, apple_id)
        self.assertIsNotNone(b.cookie(SESSION))


class NginxWebTests(WebFlowContract, unittest.TestCase):
    secrets_seen = []

    @staticmethod
    def make_proxy(socket, upstream):
        # The shipped 30 sign-ins a minute per address, with a burst of 20, would refuse this test's
        # own browsers, all on 127.0.0.1: the rate is raised, the rule kept.
        return rig.Nginx(socket, upstream, replacements=[("rate=30r/m", "rate=100r/s")])


class CaddyWebTests(WebFlowContract, unittest.TestCase):
    secrets_seen = []

    @staticmethod
    def make_proxy(socket, upstream):
        return rig.Caddy(socket, upstream, host="app.example.com")


if __name__ == "__main__":
    unittest.main()
