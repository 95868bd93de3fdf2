#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from the good and bad inputs of
Leasehold's tests: push/src/envelope.rs, push/tests/requests.rs, push/src/auth/tests.rs,
service/src/config.rs and service/src/config/push.rs, service/leasehold.example.toml. Run from
the repository's root: python3 fuzz/seeds/make.py. Each seed is named by what it is; the inputs
named by their SHA-1 beside them are what a long run found (the fewest that cover every edge it
reached, -set_cover_merge=1), and an input that found a fault is named regression-*."""

import base64, json, pathlib, re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus"
SUB = "projects/p/subscriptions/orders"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def b64url(obj):
    raw = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# --- envelope: first byte 0 = wrapped body, 1 = unwrapped (headers, empty line, body) ---
def envelope(sub, mid, data, attempt=None):
    d = base64.b64encode(data).decode()
    a = "" if attempt is None else f', "deliveryAttempt": {attempt}'
    return (f'{{"message": {{"data": "{d}", "messageId": "{mid}", "publishTime": '
            f'"2026-12-01T10:00:00.000Z", "attributes": {{"kind": "test"}}}}, '
            f'"subscription": "{sub}"{a}}}')

wrapped = {
    "documented": f'''{{"message": {{"attributes": {{"kind": "order"}}, "data": "aGVsbG8=",
        "messageId": "2070443601311540", "publishTime": "2021-02-26T19:13:55.749Z",
        "orderingKey": "customer-1"}}, "subscription": "{SUB}", "deliveryAttempt": 3}}''',
    "emulator-snake-case": f'''{{"message": {{"data": "", "message_id": "7", "messageId": "7",
        "publish_time": "2026-12-01T10:00:00.123456Z"}}, "subscription": "{SUB}"}}''',
    "benchmark": envelope(SUB, "1000000000000001", b"x" * 200).replace(
        ', "attributes": {"kind": "test"}', ', "message_id": "1000000000000001"'),
    "tests-support": envelope(SUB, "1", b"payload", 5),
    "not-json": "secret-body-1 is no envelope",
    "not-the-envelope": '{"message": "secret-payload"}',
    "no-message": f'{{"subscription": "{SUB}"}}',
    "no-message-id": f'{{"message": {{"data": "aGk="}}, "subscription": "{SUB}"}}',
    "bad-base64": f'{{"message": {{"messageId": "1", "data": "not base64!"}}, "subscription": "{SUB}"}}',
    "bad-publish-time": f'{{"message": {{"messageId": "1", "publishTime": "yesterday"}}, "subscription": "{SUB}"}}',
    "attempt-zero": f'{{"message": {{"messageId": "1"}}, "subscription": "{SUB}", "deliveryAttempt": 0}}',
    "no-subscription": '{"message": {"messageId": "1"}}',
    "another-subscription": '{"message": {"messageId": "1"}, "subscription": "projects/p/subscriptions/x"}',
    "another-subscription-escaped": envelope("projects/p/subscriptions/secret-name\\nFAKE LOG LINE", "1", b"x"),
    "attributes-many": json.dumps({"message": {"messageId": "9", "data": "",
        "attributes": {f"k{i}": "v" * i for i in range(20)}}, "subscription": SUB}),
    "unicode-escapes": f'{{"message": {{"messageId": "\\u00e9\\ud83d\\ude00", "orderingKey": "\\u0000"}}, "subscription": "{SUB}"}}',
}
for name, body in wrapped.items():
    write("envelope", f"wrapped-{name}", b"\x00" + body.encode())

unwrapped = {
    "documented": [("x-goog-pubsub-message-id", "42"), ("x-goog-pubsub-subscription-name", SUB),
                   ("x-goog-pubsub-publish-time", "2021-02-26T19:13:55.749Z"),
                   ("x-goog-pubsub-delivery-attempt", "2"), ("authorization", "Bearer t"),
                   ("content-type", "application/octet-stream"), ("x-forwarded-for", "10.0.0.1"),
                   ("kind", "order")],
    "no-write-metadata": [("content-type", "text/plain")],
    "no-message-id": [("x-goog-pubsub-subscription-name", SUB)],
    "bad-attempt": [("x-goog-pubsub-message-id", "1"), ("x-goog-pubsub-subscription-name", SUB),
                    ("x-goog-pubsub-delivery-attempt", "-3")],
    "ordering-key": [("x-goog-pubsub-message-id", "1"), ("x-goog-pubsub-subscription-name", SUB),
                     ("x-goog-pubsub-ordering-key", "customer-1"), ("traceparent", "00-abc")],
}
for name, headers in unwrapped.items():
    text = "\n".join(f"{k}: {v}" for k, v in headers) + "\n\nraw payload"
    write("envelope", f"unwrapped-{name}", b"\x01" + text.encode())
write("envelope", "unwrapped-binary-header", b"\x01x-goog-pubsub-message-id: 1\nx-goog-pubsub-subscription-name: "
      + SUB.encode() + b"\nx-proxy-binary: \xff\xfe\n\nraw")

# --- token: the Authorization header; a trailing .SIGN is replaced by the test key's signature ---
AUD = "https://orders-push.example.test/push/orders"
EMAIL = "pusher@leasehold-test.iam.gserviceaccount.com"
KID = "leasehold-test-key-1"
HEADER = {"alg": "RS256", "kid": KID, "typ": "JWT"}
CLAIMS = {"aud": AUD, "azp": "107391093645612345678", "email": EMAIL, "email_verified": True,
          "exp": 4102444800, "iat": 1700000000, "iss": "https://accounts.google.com",
          "sub": "107391093645612345678"}


def with_(**changes):
    c = dict(CLAIMS)
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return c


def bearer(header, claims, signature="SIGN", scheme="Bearer"):
    return f"{scheme} {b64url(header)}.{b64url(claims)}.{signature}"

tokens = {
    "good": bearer(HEADER, CLAIMS),
    "good-lower-case-scheme": bearer(HEADER, CLAIMS, scheme="bearer"),
    "good-issuer-without-https": bearer(HEADER, with_(iss="accounts.google.com")),
    "good-nbf": bearer(HEADER, with_(nbf=1700000000)),
    "iap-issuer": bearer(HEADER, with_(iss="https://cloud.google.com/iap")),
    "other-issuer": bearer(HEADER, with_(iss="https://evil.example.test")),
    "issuer-array": bearer(HEADER, with_(iss=["accounts.google.com"])),
    "no-issuer": bearer(HEADER, with_(iss=None)),
    "other-audience": bearer(HEADER, with_(aud="https://elsewhere.example.test/push")),
    "audience-array": bearer(HEADER, with_(aud=[AUD, "https://other.example.test"])),
    "no-audience": bearer(HEADER, with_(aud=None)),
    "other-email": bearer(HEADER, with_(email="someone-else@leasehold-test.iam.gserviceaccount.com")),
    "email-upper-case": bearer(HEADER, with_(email=EMAIL.upper())),
    "no-email": bearer(HEADER, with_(email=None)),
    "email-not-verified": bearer(HEADER, with_(email_verified=False)),
    "email-verified-text": bearer(HEADER, with_(email_verified="true")),
    "no-email-verified": bearer(HEADER, with_(email_verified=None)),
    "expired": bearer(HEADER, with_(exp=1700003600, iat=1700000000)),
    "exp-text": bearer(HEADER, with_(exp="tomorrow")),
    "no-exp": bearer(HEADER, with_(exp=None)),
    "nbf-later": bearer(HEADER, with_(nbf=4102444000)),
    "iat-later": bearer(HEADER, with_(iat=4102444000)),
    "iat-text": bearer(HEADER, with_(iat="soon")),
    "alg-none": f"Bearer {b64url({'alg': 'none', 'kid': KID})}.{b64url(CLAIMS)}.",
    "hs256": bearer({"alg": "HS256", "kid": KID}, CLAIMS),
    "es256": bearer({"alg": "ES256", "kid": KID}, CLAIMS),
    "rs256-lower-case": bearer({"alg": "rs256", "kid": KID}, CLAIMS),
    "no-alg": bearer({"kid": KID}, CLAIMS),
    "unknown-kid": bearer({"alg": "RS256", "kid": "made-up-1"}, CLAIMS),
    "no-kid": bearer({"alg": "RS256"}, CLAIMS),
    "garbage-signature": bearer(HEADER, CLAIMS, signature=b64url(bytes(range(255, -1, -1)))),
    "signature-removed": bearer(HEADER, CLAIMS, signature="SIGNATURE_REMOVED_BY_GOOGLE"),
    "basic": "Basic dXNlcjpwYXNz",
    "bearer-alone": "Bearer",
    "bearer-spaces": "Bearer    ",
    "one-segment": "Bearer one-segment",
    "two-segments": f"Bearer {b64url(HEADER)}.{b64url(CLAIMS)}",
    "four-segments": bearer(HEADER, CLAIMS) + ".extra",
    "not-base64": f"Bearer {b64url(HEADER)}.{b64url(CLAIMS)}.not*base64",
    "padded-signature": f"Bearer {b64url(HEADER)}.{b64url(CLAIMS)}.c2ln=",
    "header-not-json": f"Bearer {b64url(b'not json')}.{b64url(CLAIMS)}.SIGN",
    "header-an-array": f"Bearer {b64url(b'[1,2]')}.{b64url(CLAIMS)}.SIGN",
    "not-text": b"Bearer \xff\xfe",
    "accents": "Bearer \u00e9t\u00e9",
}
for name, value in tokens.items():
    write("token", name, value)

# --- subscription_path: a subscription a push names, and a push path ---
paths = {
    "the-subscription": SUB,
    "another-subscription": "projects/p/subscriptions/other",
    "subscription-with-newline": "projects/p/subscriptions/secret-name\nFAKE LOG LINE",
    "subscription-and-nul": SUB + "\x00",
    "empty": "",
    "path-push-orders": "/push/orders",
    "path-root": "/",
    "path-metrics": "/metrics",
    "path-readyz": "/readyz",
    "path-pattern": "/push/{key}",
    "path-space": "/push/a b",
    "path-relative": "push",
    "path-tail-pattern": "/push/{tail}*",
    "path-regex": "/push/{id:\\d+}",
    "path-unicode": "/push/\u00e9",
    "path-dots": "/push/../orders/.~-_",
    "path-number": "1",
}
for name, value in paths.items():
    write("subscription_path", name, value)

# --- service_config: the TOML file, then after a NUL byte one LEASEHOLD__ variable a line ---
def rust_string(name):
    """The raw string constant `name` of service/src/config.rs's tests."""
    source = (ROOT / "service" / "src" / "config.rs").read_text()
    found = re.search(r'const ' + name + r': &str = r#"(.*?)"#;', source, re.S)
    assert found, f"no {name} in service/src/config.rs"
    return found.group(1)


ORDERS = f'[subscriptions.orders]\nname = "{SUB}"\n'
configs = {
    "example": (ROOT / "service" / "leasehold.example.toml").read_text(),
    # The configurations service/src/config.rs's tests read, taken from its source.
    "tests-file": rust_string("FILE"),
    "every-option": rust_string("EVERY_OPTION"),
    "breaker-from-the-environment": ORDERS + "\x00LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__CONSECUTIVE_FAILURES=0\nLEASEHOLD__SUBSCRIPTIONS__ORDERS__WORKERS=32\nLEASEHOLD__HTTP__ADDRESS=0.0.0.0:8080\n",
    "breaker-boolean": ORDERS + "breaker = { consecutive_failures = true }\n",
    "breaker-negative": ORDERS + "breaker = { consecutive_failures = -1 }\n",
    "breaker-fraction": ORDERS + "breaker = { consecutive_failures = 2.5 }\n",
    "breaker-bad-duration": ORDERS + 'breaker = { cooldown = "soon" }\n',
    "breaker-unknown-key": ORDERS + 'breaker = { cooldwn = "1s" }\n',
    "breaker-not-a-table": ORDERS + "breaker = true\n",
    "unknown-key-top": "shadow = 1\n",
    "unknown-key-http": '[http]\nadress = "x"\n',
    "unknown-key-memory": ORDERS + 'progress_store = { kind = "memory", shadow = 1 }\n',
    "unknown-key-none": ORDERS + 'progress_store = { kind = "none", shadow = 1 }\n',
    "progress-redb": ORDERS + 'progress_store = { kind = "redb", path = "/tmp/x.redb", ttl = "15m" }\n',
    "progress-spanner": ORDERS + 'progress_store = { kind = "spanner", database = "projects/P/instances/I/databases/D", lookup_timeout = "2s", connect_timeout = "30s", emulator_host = "localhost:9010" }\n',
    "progress-unknown-kind": ORDERS + 'progress_store = { kind = "disk" }\n',
    "push-authenticated": ORDERS + 'delivery = "push"\n[subscriptions.orders.push]\npath = "/push/orders"\naudience = "https://x.run.app/push/orders"\nservice_account = "push@p.iam.gserviceaccount.com"\nverified_by_cloud_run = true\nunwrapped = true\nmax_body = 1024\ndeadline = "10s"\n',
    "push-unauthenticated": ORDERS + f'delivery = "push"\npush = {{ path = "/push/orders", allow_unauthenticated = true, unauthenticated_outside_emulator = "anyone who can reach this endpoint can ack and nack its messages" }}\n',
    "push-half": ORDERS + 'delivery = "push"\npush = { path = "/push/orders", audience = "https://x" }\n',
    "push-contradiction": ORDERS + 'delivery = "push"\npush = { path = "/push/orders", allow_unauthenticated = true, audience = "https://x" }\n',
    "push-on-pull": ORDERS + 'push = { path = "/push/orders", allow_unauthenticated = true }\n',
    "push-bad-path": ORDERS + 'delivery = "push"\npush = { path = "/push/{key}", allow_unauthenticated = true }\n',
    "subscription-from-the-environment": "\x00LEASEHOLD__SUBSCRIPTIONS__ORDERS__NAME=projects/p/subscriptions/orders\nLEASEHOLD__SUBSCRIPTIONS__ORDERS__PROGRESS_STORE__KIND=memory\n",
    "telemetry": '[telemetry]\nlog_filter = "debug,leasehold=trace"\notlp_endpoint = "http://otel-collector:4317"\nservice_name = "x"\ntrace_sample_ratio = 1.5\n',
    "not-toml": "[subscriptions.orders\nname = ",
    "wrong-types": ORDERS + 'workers = "many"\nmax_lease = 30\nfailure_policy = "ignore"\n',
}
for name, text in configs.items():
    write("service_config", name, text)
print("seeds written to", CORPUS)
