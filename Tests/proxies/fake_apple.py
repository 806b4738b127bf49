"""Sign in with Apple's side of the web flow, on loopback: the authorization page, the token
endpoint, the key set. Python standard library and the openssl command line only.

What it does as Apple does (Apple's "Request an authorization to the Sign in with Apple server",
"Generate and validate tokens" and TN3107, the client secret):

- GET /auth/authorize checks client_id, redirect_uri (exactly the one registered for that client),
  response_type `code id_token`, response_mode `form_post` (required when scope is asked) and scope,
  and shows a sign-in page: a form the user fills with an Apple ID and sends with Continue or Cancel.
- POST /auth/authorize/consent answers a page whose form posts back to the redirect URI, from
  Apple's origin, with code, id_token (its nonce the one the site asked for), state, and, the first
  time an Apple ID authorizes a client only, `user`: a JSON string with name and email. Cancel
  posts `error=user_cancelled_authorize` and the state.
- POST /auth/token takes an authorization_code grant with a client secret that verifies (ES256 with
  the team's key, checked by `openssl dgst -verify`: not by the code under test) and claims Apple
  would accept; a code is single use, lives 300 s, and belongs to one client id and redirect URI.
  refresh_token grants are answered for the refresh tokens it issued; /auth/revoke ends one.
- GET /auth/keys is the JWKS of the RSA key that signs identity tokens (RS256, `openssl dgst -sign`).

Its clock is the caller's (`now`): the tests run keyholed on a clock they move, and move this one
with it. `unreachable()` closes its port (connections refused) until `reachable()`.
"""

import base64
import hashlib
import html
import http.server
import json
import os
import secrets
import subprocess
import threading
import urllib.parse

ISSUER = "https://appleid.apple.com"
CODE_LIFETIME = 300
TOKEN_LIFETIME = 600
KEY_ID = "FAKEAPPLE1"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def openssl(*args, data=None):
    done = subprocess.run(["openssl", *args], input=data, capture_output=True)
    return done


def der_integer(value):
    body = value.lstrip(b"\x00") or b"\x00"
    if body[0] & 0x80:
        body = b"\x00" + body
    return b"\x02" + bytes([len(body)]) + body


def der_signature(raw):
    """ES256's r || s (64 bytes) as the DER SEQUENCE openssl verifies."""
    body = der_integer(raw[:32]) + der_integer(raw[32:])
    return b"\x30" + bytes([len(body)]) + body


class FakeApple:
    """Apple's endpoints for `clients` ({client_id: registered redirect URI}), team `team_id`."""

    def __init__(self, workdir, clients, now, team_id="FAKETEAM01", key_id="FAKEKEY001"):
        self.dir = workdir
        self.clients = dict(clients)
        self.now = now
        self.team_id = team_id
        self.key_id = key_id
        self.lock = threading.Lock()
        self.transactions = {}  # id -> what the authorize request asked
        self.codes = {}  # code -> {sub, client_id, redirect_uri, issued_at, used}
        self.grants = {}  # refresh token -> {sub, client_id, valid}
        self.authorized = set()  # (apple id, client id) that have seen the consent once
        self.verified_secrets = set()
        self.refusals = []  # why a request was refused, for a failing test's message
        self.token_requests = 0
        self.refuse_codes = False
        self.team_key = os.path.join(workdir, "AuthKey_fake.p8")
        self.team_public = os.path.join(workdir, "team.pub")
        self.signing_key = os.path.join(workdir, "signing.pem")
        self.make_keys()
        self.server = None
        self.port = 0
        self.reachable()

    # Keys

    def make_keys(self):
        for args in (["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.team_key],
                     ["pkey", "-in", self.team_key, "-pubout", "-out", self.team_public],
                     ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", self.signing_key]):
            done = openssl(*args)
            if done.returncode != 0:
                raise RuntimeError(f"openssl {' '.join(args)}: {done.stderr.decode(errors='replace')}")
        os.chmod(self.team_key, 0o600)
        modulus = openssl("rsa", "-in", self.signing_key, "-noout", "-modulus").stdout.decode().strip()
        n = bytes.fromhex(modulus.split("=", 1)[1])
        self.jwks = {"keys": [{"kty": "RSA", "kid": KEY_ID, "use": "sig", "alg": "RS256",
                               "n": b64url(n), "e": b64url((65537).to_bytes(3, "big"))}]}

    def sign(self, claims):
        header = b64url(json.dumps({"kid": KEY_ID, "alg": "RS256"}).encode())
        payload = b64url(json.dumps(claims).encode())
        signing_input = f"{header}.{payload}".encode("ascii")
        done = openssl("dgst", "-sha256", "-sign", self.signing_key, data=signing_input)
        if done.returncode != 0:
            raise RuntimeError(f"openssl dgst -sign: {done.stderr.decode(errors='replace')}")
        return f"{header}.{payload}.{b64url(done.stdout)}"

    def identity_token(self, sub, audience, nonce=None, email=None, code=None):
        now = int(self.now())
        claims = {"iss": ISSUER, "aud": audience, "sub": sub, "iat": now, "exp": now + TOKEN_LIFETIME,
                  "auth_time": now, "nonce_supported": True}
        if nonce is not None:
            claims["nonce"] = nonce
        if email is not None:
            claims.update(email=email, email_verified="true", is_private_email="true")
        if code is not None:
            digest = hashlib.sha256(code.encode("ascii")).digest()
            claims["c_hash"] = b64url(digest[:16])
        return self.sign(claims)

    @staticmethod
    def sub_of(apple_id):
        """The stable sub Apple gives an Apple ID (here: derived from it, one per team)."""
        return "001234." + hashlib.sha256(apple_id.encode()).hexdigest()[:32] + ".0042"

    def issue_code(self, sub, client_id, redirect_uri):
        code = "c" + secrets.token_hex(16) + ".0.fake"
        with self.lock:
            self.codes[code] = {"sub": sub, "client_id": client_id, "redirect_uri": redirect_uri,
                                "issued_at": self.now(), "used": False}
        return code

    # The client secret (TN3107)

    def client_secret_problem(self, secret, client_id):
        parts = secret.split(".")
        if len(parts) != 3:
            return "client secret is not a compact JWS"
        try:
            header = json.loads(unb64url(parts[0]))
            claims = json.loads(unb64url(parts[1]))
            raw = unb64url(parts[2])
        except ValueError as error:
            return f"client secret does not decode: {error}"
        if header.get("alg") != "ES256" or header.get("kid") != self.key_id:
            return f"client secret header {header}: not ES256 with kid {self.key_id}"
        if len(raw) != 64:
            return f"client secret signature is {len(raw)} bytes, not 64"
        if secret not in self.verified_secrets:
            signature = os.path.join(self.dir, f"sig-{secrets.token_hex(4)}.der")
            with open(signature, "wb") as f:
                f.write(der_signature(raw))
            try:
                done = openssl("dgst", "-sha256", "-verify", self.team_public, "-signature", signature,
                               data=f"{parts[0]}.{parts[1]}".encode("ascii"))
            finally:
                os.unlink(signature)
            if done.returncode != 0 or b"Verified OK" not in done.stdout:
                return "client secret signature does not verify with the team's key"
            self.verified_secrets.add(secret)
        now = self.now()
        if claims.get("iss") != self.team_id or claims.get("sub") != client_id or claims.get("aud") != ISSUER:
            return f"client secret claims iss/sub/aud {claims.get('iss')}/{claims.get('sub')}/{claims.get('aud')}"
        iat, exp = claims.get("iat"), claims.get("exp")
        if type(iat) is not int or type(exp) is not int:
            return "client secret iat or exp is not an integer"
        if iat > now + 60 or exp <= now or exp - iat > 15_777_000:
            return f"client secret iat {iat} exp {exp} at {now}: not valid now, or longer than six months"
        return None

    # HTTP

    def reachable(self):
        """Listen (again, on the same port once it had one)."""
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                fake.handle(self, "GET")

            def do_POST(self):
                fake.handle(self, "POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def unreachable(self):
        """Stop listening: a connection to Apple is refused until reachable()."""
        self.server.shutdown()
        self.server.server_close()

    def close(self):
        self.unreachable()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def handle(self, request, method):
        target = urllib.parse.urlsplit(request.path)
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        query = dict(urllib.parse.parse_qsl(target.query, keep_blank_values=True))
        routes = {("GET", "/auth/authorize"): lambda: self.authorize(query),
                  ("POST", "/auth/authorize/consent"): lambda: self.consent(form),
                  ("POST", "/auth/token"): lambda: self.token(request.headers, form),
                  ("POST", "/auth/revoke"): lambda: self.revoke(form),
                  ("GET", "/auth/keys"): lambda: (200, "application/json", json.dumps(self.jwks))}
        route = routes.get((method, target.path))
        status, content_type, text = route() if route else (404, "text/plain", "not found")
        data = text.encode("utf-8")
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(data)))
        request.send_header("Cache-Control", "no-store")
        # No connection outlives its request: unreachable() must refuse keyholed's next one, which a
        # kept-alive connection in its HTTP client's pool would bypass.
        request.send_header("Connection", "close")
        request.close_connection = True
        request.end_headers()
        request.wfile.write(data)

    def refuse(self, status, error, reason):
        with self.lock:
            self.refusals.append(f"{error}: {reason}")
        return status, "application/json", json.dumps({"error": error})

    def authorize(self, query):
        client_id = query.get("client_id", "")
        if client_id not in self.clients:
            return self.refuse(400, "invalid_client", f"client_id {client_id!r}")
        if query.get("redirect_uri") != self.clients[client_id]:
            return self.refuse(400, "invalid_request", f"redirect_uri {query.get('redirect_uri')!r}")
        if query.get("response_type") != "code id_token":
            return self.refuse(400, "unsupported_response_type", query.get("response_type", ""))
        scope = query.get("scope", "").split()
        if not set(scope) <= {"name", "email"}:
            return self.refuse(400, "invalid_scope", " ".join(scope))
        if scope and query.get("response_mode") != "form_post":
            return self.refuse(400, "invalid_request", "a scope needs response_mode form_post")
        if not query.get("state") or not query.get("nonce"):
            return self.refuse(400, "invalid_request", "state or nonce missing")
        transaction = secrets.token_hex(16)
        with self.lock:
            self.transactions[transaction] = dict(query)
        return 200, "text/html; charset=utf-8", f"""<!doctype html>
<title>Sign in with Apple ID</title>
<form method="post" action="/auth/authorize/consent">
<input type="hidden" name="transaction" value="{transaction}">
<label>Apple ID <input type="email" name="apple_id" value=""></label>
<button type="submit" name="decision" value="continue">Continue</button>
<button type="submit" name="decision" value="cancel">Cancel</button>
</form>
"""

    def consent(self, form):
        with self.lock:
            asked = self.transactions.pop(form.get("transaction", ""), None)
        if asked is None:
            return self.refuse(400, "invalid_request", "unknown or used transaction")
        fields = {"state": asked["state"]}
        if form.get("decision") != "continue":
            fields["error"] = "user_cancelled_authorize"
        else:
            apple_id = form.get("apple_id", "")
            if "@" not in apple_id:
                return self.refuse(400, "invalid_request", "no Apple ID")
            client_id, redirect_uri = asked["client_id"], asked["redirect_uri"]
            sub = self.sub_of(apple_id)
            code = self.issue_code(sub, client_id, redirect_uri)
            email = apple_id if "email" in asked.get("scope", "").split() else None
            fields["code"] = code
            fields["id_token"] = self.identity_token(sub, client_id, nonce=asked["nonce"], email=email, code=code)
            with self.lock:
                first = (apple_id, client_id) not in self.authorized
                self.authorized.add((apple_id, client_id))
            if first and asked.get("scope"):
                local = apple_id.split("@", 1)[0]
                user = {"email": apple_id} if email else {}
                if "name" in asked["scope"].split():
                    user["name"] = {"firstName": local.capitalize(), "lastName": "Appleseed"}
                fields["user"] = json.dumps(user)
        inputs = "\n".join(f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}">'
                           for name, value in fields.items())
        return 200, "text/html; charset=utf-8", f"""<!doctype html>
<body onload="document.forms[0].submit()">
<form method="post" action="{html.escape(asked['redirect_uri'])}">
{inputs}
</form>
</body>
"""

    def token(self, headers, form):
        with self.lock:
            self.token_requests += 1
        if not (headers.get("Content-Type") or "").startswith("application/x-www-form-urlencoded"):
            return self.refuse(400, "invalid_request", "not a form")
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if not client_id or not secret:
            return self.refuse(400, "invalid_request", "client_id or client_secret missing")
        problem = self.client_secret_problem(secret, client_id)
        if problem:
            return self.refuse(400, "invalid_client", problem)
        if self.refuse_codes:
            return self.refuse(400, "invalid_grant", "refused on demand")
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            with self.lock:
                code = self.codes.get(form.get("code", ""))
                if code is None or code["used"]:
                    problem = "unknown or used code"
                else:
                    code["used"] = True
                    if self.now() - code["issued_at"] > CODE_LIFETIME:
                        problem = "code expired"
                    elif code["client_id"] != client_id or code["redirect_uri"] != form.get("redirect_uri"):
                        problem = "code of another client id or redirect_uri"
            if problem:
                return self.refuse(400, "invalid_grant", problem)
            refresh = "r" + secrets.token_hex(16) + ".0.fake"
            with self.lock:
                self.grants[refresh] = {"sub": code["sub"], "client_id": client_id, "valid": True}
            return 200, "application/json", json.dumps({
                "access_token": "a" + secrets.token_hex(16), "token_type": "Bearer", "expires_in": 3600,
                "refresh_token": refresh, "id_token": self.identity_token(code["sub"], client_id)})
        if grant_type == "refresh_token":
            with self.lock:
                grant = self.grants.get(form.get("refresh_token", ""))
            if grant is None or not grant["valid"] or grant["client_id"] != client_id:
                return self.refuse(400, "invalid_grant", "refresh token unknown, revoked or of another client")
            return 200, "application/json", json.dumps({
                "access_token": "a" + secrets.token_hex(16), "token_type": "Bearer", "expires_in": 3600,
                "id_token": self.identity_token(grant["sub"], client_id)})
        return self.refuse(400, "unsupported_grant_type", str(grant_type))

    def revoke(self, form):
        problem = self.client_secret_problem(form.get("client_secret", ""), form.get("client_id", ""))
        if problem:
            return self.refuse(400, "invalid_client", problem)
        with self.lock:
            grant = self.grants.get(form.get("token", ""))
            if grant is not None and grant["client_id"] == form.get("client_id"):
                grant["valid"] = False
        return 200, "text/plain", ""
