#!/usr/bin/env python3
"""Makes the seed corpus under Tests/Fuzz/<target>/ (README.md says what each holds).

    Tests/Fuzz/make-seeds.py [--keyholed PATH]

frame, request, jws and jwk seeds come from the protocol's test vectors, the JOSE test fixtures and
tokens signed here with the fuzz key set (Tests/Fuzz/keys/, test keys made once by this script; the
jws target verifies against their public halves, which keyhole-fuzz has built in). With --keyholed,
the wal-record and snapshot seeds are written by a real keyholed: it is started on a temporary state
directory, changed through the Python client, asked for a snapshot, and stopped; its log segments and
its snapshot are copied (without the zeros the writer fills ahead). Needs Python's `cryptography`.
"""
import argparse, base64, json, os, pathlib, shutil, signal, subprocess, sys, tempfile, time

ROOT = pathlib.Path(__file__).resolve().parents[2]
FUZZ = ROOT / "Tests" / "Fuzz"
KEYS = FUZZ / "keys"


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def write(target, name, data):
    directory = FUZZ / target
    directory.mkdir(exist_ok=True)
    (directory / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def frame_and_request_seeds():
    framing = json.loads((ROOT / "Protocol/vectors/framing.json").read_text())
    for index, case in enumerate(framing["cases"]):
        # Control bytes: maxFrameBytes - 1 (big-endian), a read-size seed; then the stream.
        control = (case["max_frame_bytes"] - 1).to_bytes(2, "big") + bytes([index])
        write("frame", f"vector-{index:02d}", control + bytes.fromhex(case["input_hex"]))
    requests = json.loads((ROOT / "Protocol/vectors/requests.json").read_text())
    for index, case in enumerate(requests["cases"]):
        body = bytes.fromhex(case["request_hex"]) if "request_hex" in case else case["request"].encode()
        write("request", f"vector-{index:02d}", body)


def load_keys():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    makers = {
        "rsa2048": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "p256": lambda: ec.generate_private_key(ec.SECP256R1()),
        "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
        "ed25519": ed25519.Ed25519PrivateKey.generate,
    }
    KEYS.mkdir(exist_ok=True)
    keys = {}
    for name, make in makers.items():
        path = KEYS / f"{name}.pem"
        if not path.exists():
            pem = make().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
            path.write_bytes(pem)
        keys[name] = serialization.load_pem_private_key(path.read_bytes(), password=None)
    return keys


def public_jwks(keys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    rsa_numbers = keys["rsa2048"].public_key().public_numbers()
    n = rsa_numbers.n.to_bytes((rsa_numbers.n.bit_length() + 7) // 8, "big")
    jwks = [{"kty": "RSA", "kid": "rsa", "use": "sig", "n": b64(n), "e": b64(rsa_numbers.e.to_bytes(3, "big"))}]
    for name, curve, width in (("p256", "P-256", 32), ("p384", "P-384", 48)):
        numbers = keys[name].public_key().public_numbers()
        jwks.append({"kty": "EC", "kid": name, "crv": curve,
                     "x": b64(numbers.x.to_bytes(width, "big")), "y": b64(numbers.y.to_bytes(width, "big"))})
    raw = keys["ed25519"].public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    jwks.append({"kty": "OKP", "kid": "ed25519", "crv": "Ed25519", "x": b64(raw)})
    return {"keys": jwks}


def sign(keys, alg, kid, claims):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    header = b64(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}, separators=(",", ":")).encode())
    payload = b64(json.dumps(claims, separators=(",", ":")).encode())
    message = f"{header}.{payload}".encode()
    if alg == "RS256":
        signature = keys["rsa2048"].sign(message, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "PS256":
        signature = keys["rsa2048"].sign(message, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32),
                                         hashes.SHA256())
    elif alg == "EdDSA":
        signature = keys["ed25519"].sign(message)
    else:
        key, hash_, width = (keys["p256"], hashes.SHA256(), 32) if alg == "ES256" else (keys["p384"], hashes.SHA384(), 48)
        r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hash_)))
        signature = r.to_bytes(width, "big") + s.to_bytes(width, "big")
    return f"{header}.{payload}.{b64(signature)}"


def jose_seeds():
    keys = load_keys()
    jwks = public_jwks(keys)
    write("jwk", "fuzz-keyset.json", json.dumps(jwks, separators=(",", ":")))
    apple = json.loads((ROOT / "Tests/KeyholeJOSETests/Fixtures/apple/apple_jwks_go-pkgz-auth.json").read_text())
    write("jwk", "apple.json", json.dumps(apple, separators=(",", ":")))
    write("jwk", "skipped-and-ops.json", json.dumps({"keys": [
        {"kty": "oct", "k": "AAAA"},
        dict(jwks["keys"][1], kid="ops", key_ops=["verify"], alg="ES256"),
        dict(jwks["keys"][3], use="enc")]}, separators=(",", ":")))
    claims = {"iss": "https://fuzz.example", "aud": "fuzz-app", "sub": "user-1", "iat": 1700000000,
              "exp": 4102444800, "nonce": "n-0S6_WzA2Mj", "email": "a@example.com", "email_verified": "true"}
    for alg, kid in (("RS256", "rsa"), ("PS256", "rsa"), ("ES256", "p256"), ("ES384", "p384"), ("EdDSA", "ed25519")):
        write("jws", f"{alg.lower()}.jwt", sign(keys, alg, kid, claims))
    write("jws", "apple.jwt", (ROOT / "Tests/KeyholeJOSETests/Fixtures/apple/apple_token_1.jwt").read_text().strip())
    return jwks


def records_end(segment):
    """Where the records of a segment end: the writer fills the space ahead of them with zeros."""
    offset = 32
    while offset + 8 <= len(segment):
        length = int.from_bytes(segment[offset:offset + 4], "big")
        if length == 0 or offset + 8 + length > len(segment):
            break
        offset += 8 + length
    return offset


def store_seeds(keyholed):
    sys.path.insert(0, str(ROOT / "Protocol/clients/python"))
    import keyhole
    work = pathlib.Path(tempfile.mkdtemp(prefix="keyhole-seeds."))
    state, socket = work / "state", work / "k.sock"
    (work / "k.toml").write_text('[server]\nsocket_mode = "0600"\n[storage]\nfsync = "always"\n')
    daemon = subprocess.Popen([keyholed, "--config", str(work / "k.toml"), "--socket", str(socket),
                               "--state-dir", str(state), "--log-level", "warning"])
    try:
        for _ in range(100):
            if socket.exists():
                break
            time.sleep(0.1)
        client = keyhole.Client(str(socket))
        made = [client.call("session.create", {"sub": f"user-{i}", "ttl_s": 3600, "data": {"n": i}}) for i in range(3)]
        client.call("session.create", {"sub": "user-\u00e9", "idle_s": 60})
        client.call("user.update", {"sub": "user-0", "email": "zero@example.com", "name": {"given": "Z"}})
        client.call("user.update", {"sub": "user-9", "email": "nine@example.com"})
        client.call("session.get", {"session": made[0]["session"]})
        client.call("session.revoke", {"session": made[1]["session"]})
        client.call("user.delete", {"sub": "user-2"})
        before = sorted((state / "wal").glob("*.wal"))
        copies = {path.name: path.read_bytes() for path in before}
        client.call("admin.snapshot")
        client.call("session.create", {"sub": "user-0", "ttl_s": 60})
        client.call("session.revoke_all", {"sub": "user-0"})
        client.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    for path in sorted((state / "wal").glob("*.wal")):
        copies[path.name] = path.read_bytes()
    for index, (name, data) in enumerate(sorted(copies.items())):
        data = data[:records_end(data)]
        # Control bytes (Sources/keyhole-fuzz/StoreTargets.swift): mode, snapshot LSN; then the segment.
        write("wal-record", f"segment-{index}-fixed", bytes([0x03, 0]) + data)
        write("wal-record", f"segment-{index}-raw", bytes([0x00, 0]) + data)
    for index, path in enumerate(sorted((state / "snapshots").iterdir())):
        data = path.read_bytes()
        write("snapshot", f"snapshot-{index}-fixed", bytes([0x07, 0]) + data)
        write("snapshot", f"snapshot-{index}-raw", bytes([0x00, 0]) + data)
        write("snapshot", f"snapshot-{index}-small-blocks", bytes([0x0F, 13]) + data)
    shutil.rmtree(work)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keyholed", help="a keyholed binary, to make the wal-record and snapshot seeds")
    arguments = parser.parse_args()
    frame_and_request_seeds()
    jwks = jose_seeds()
    if arguments.keyholed:
        store_seeds(arguments.keyholed)
    print(json.dumps(jwks, separators=(",", ":")))


if __name__ == "__main__":
    main()
