#!/usr/bin/env python3
"""Makes an issuer for keyhole-bench: an RSA-2048 key set and COUNT distinct RS256 identity tokens.

Writes DIR/jwks.json (the public key set), DIR/tokens.txt (one token per line) and DIR/keyholed.toml
(an [[issuer]] table for them, with the verified-token cache smaller than COUNT, so that a cycle
through the tokens never hits the cache). The claims mimic a Sign in with Apple token's. Needs the
`cryptography` package. Benchmarks only: the private key is thrown away.
"""
import argparse
import base64
import json
import os
import time
import uuid

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def number(value: int) -> str:
    return b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write to (created)")
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--issuer", default="https://bench.keyhole.invalid")
    parser.add_argument("--audience", default="dev.keyhole.bench")
    parser.add_argument("--lifetime", type=int, default=86400, help="seconds until the tokens expire")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_numbers()
    jwks = {"keys": [{"kty": "RSA", "kid": "bench-1", "use": "sig", "alg": "RS256",
                      "n": number(public.n), "e": number(public.e)}]}
    with open(os.path.join(args.out, "jwks.json"), "w") as f:
        json.dump(jwks, f)

    header = b64(compact({"kid": "bench-1", "alg": "RS256"}))
    now = int(time.time())
    with open(os.path.join(args.out, "tokens.txt"), "w") as f:
        for index in range(args.count):
            claims = {
                "iss": args.issuer, "aud": args.audience, "exp": now + args.lifetime, "iat": now,
                "sub": f"000{index:03d}.{uuid.uuid4().hex}.{index % 10000:04d}",
                "c_hash": b64(os.urandom(16)), "email": f"user{index}@privaterelay.appleid.com",
                "email_verified": True, "is_private_email": True, "auth_time": now, "nonce_supported": True,
            }
            signing_input = header + "." + b64(compact(claims))
            signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
            f.write(signing_input + "." + b64(signature) + "\n")

    with open(os.path.join(args.out, "keyholed.toml"), "w") as f:
        f.write(f"""[tokens]
cache_entries = {max(1, args.count // 4)}

[[issuer]]
name = "bench"
iss = "{args.issuer}"
jwks_uri = "{os.path.abspath(os.path.join(args.out, "jwks.json"))}"
audiences = ["{args.audience}"]
""")


if __name__ == "__main__":
    main()
