#!/usr/bin/env python3
"""Makes an issuer for keyhole-bench: a key set and COUNT distinct identity tokens, RS256 (RSA-2048) or ES256 (P-256).

Writes DIR/jwks.json (the public key set), DIR/tokens.txt (one token per line), DIR/issuer.toml (an
[[issuer]] table for them) and DIR/keyholed.toml (that table, with the verified-token cache smaller
than COUNT, so that a cycle through the tokens never hits the cache). The claims mimic a Sign in with Apple token's. Needs the
`cryptography` package. Benchmarks only: the private key is thrown away.
"""
import argparse
import base64
import json
import os
import time
import uuid

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


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
    parser.add_argument("--alg", choices=["RS256", "ES256"], default="RS256")
    parser.add_argument("--name", default="bench", help="the issuer's name in keyholed.toml")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    kid = f"{args.name}-1"
    if args.alg == "RS256":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = key.public_key().public_numbers()
        jwk = {"kty": "RSA", "n": number(public.n), "e": number(public.e)}

        def sign(data: bytes) -> bytes:
            return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key().public_numbers()
        jwk = {"kty": "EC", "crv": "P-256", "x": b64(public.x.to_bytes(32, "big")), "y": b64(public.y.to_bytes(32, "big"))}

        def sign(data: bytes) -> bytes:
            # JWS wants r and s as two 32-byte numbers, not DER (RFC 7518, 3.4).
            r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    jwks = {"keys": [dict(jwk, kid=kid, use="sig", alg=args.alg)]}
    with open(os.path.join(args.out, "jwks.json"), "w") as f:
        json.dump(jwks, f)

    header = b64(compact({"kid": kid, "alg": args.alg}))
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
            f.write(signing_input + "." + b64(sign(signing_input.encode())) + "\n")

    issuer = f"""[[issuer]]
name = "{args.name}"
iss = "{args.issuer}"
jwks_uri = "{os.path.abspath(os.path.join(args.out, "jwks.json"))}"
audiences = ["{args.audience}"]
algorithms = ["{args.alg}"]
"""
    with open(os.path.join(args.out, "issuer.toml"), "w") as f:
        f.write(issuer)
    with open(os.path.join(args.out, "keyholed.toml"), "w") as f:
        f.write(f"[tokens]\ncache_entries = {max(1, args.count // 4)}\n\n" + issuer)


if __name__ == "__main__":
    main()
