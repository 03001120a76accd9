#!/usr/bin/python3
"""Writes the seed corpora of fuzz_gw_channel_name, fuzz_gw_token, fuzz_gw_config and
fuzz_lg_wire into tests/fuzz/corpus_<target>/ (each target's .c file says how it reads an
input). The lg_wire seeds are the proto_frame seeds with lg_wire's one-byte header, so run
make_corpus_proto_frame.py first after changing herald.proto.
Usage: tests/fuzz/make_corpus_seeds.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(target, seeds):
    out = os.path.join(HERE, "corpus_" + target)
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        os.remove(os.path.join(out, name))
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


def channel_name():
    def seed(max_bytes, pattern, name):
        return bytes([max_bytes, len(pattern)]) + pattern + name
    return {
        "prefix": seed(0, b"chat:*", b"chat:room1"),
        "exact": seed(0, b"user:42", b"user:42"),
        "star": seed(0, b"*", b"news"),
        "mismatch": seed(0, b"chat:*", b"cha"),
        "bad_star": seed(0, b"a*b", b"a-b"),
        "bad_char": seed(0, b"chat room", b"chat\x00room"),
        "limit": seed(8, b"abcdefgh*", b"abcdefghi"),
        "every_class": seed(0, b"Az09_-:.@/=", b"Az09_-:.@/="),
    }


def token():
    def signed(header, claims, max_bytes=0):
        h = json.dumps(header, separators=(",", ":")).encode() if header is not None else b""
        c = json.dumps(claims, separators=(",", ":")).encode()
        return bytes([max_bytes << 1 | 1, len(h)]) + h + c

    def raw(text):
        return bytes([0, 0]) + text
    exp = 2000000000
    return {
        "raw_shape": raw(b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhIn0."
                         b"e-DhLfSGNJKXwvrP2IIIIwgsMniOlrb0rofH76z_w00"),
        "raw_alg_none": raw(b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.x"),
        "raw_dots": raw(b"a..b"),
        # Not a JWT: insecure mode takes its first 128 bytes as the user id.
        "raw_opaque": raw(b"opaque-" * 19 + "\u00e9t\u00e9".encode()),
        # fuzz_gw_token's finding: insecure mode cut a character at byte 128 of the token.
        "repro_insecure_user_cut": (b'"scc","ssc",malformsc","U","c","U","s","s;sissc","ss"c",'
                                    b'"U","s","s;sissc","ss\xf0\x9f\x98\x80c",","*","7ss:*",'
                                    b'"U:*"]},"U","s","s;sissc","ss\xf0\x9f\x98\x80,'),
        "signed_channels": signed(None, {"sub": "alice", "exp": exp,
                                         "channels": ["news", "chat:*", "*"]}),
        "signed_header": signed({"alg": "HS256", "typ": "JWT", "kid": "k1"},
                                {"sub": "bob", "exp": exp, "nbf": 1600000000}),
        "signed_unicode": signed(None, {"sub": "\u00e9l\u00e8ve", "exp": exp, "iat": 1}),
        "signed_expired": signed(None, {"sub": "c", "exp": 1}),
        # json.dumps would write the control byte as \u0001 too; spelled out to be sure.
        "signed_escaped_sub": bytes([1, 0]) + b'{"sub":"a\\u0001b","exp":2000000000}',
        "signed_limit": signed(None, {"sub": "d", "exp": exp, "channels": ["abcdef*"]}, 6),
        "signed_bad_claims": signed(None, {"sub": "e", "exp": exp, "channels": [1, "a*b"]}),
    }


def config():
    with open(os.path.join(ROOT, "gateway", "herald.example.conf"), "rb") as f:
        example = f.read()
    env = [b"HERALD_NODE_ID=n1", b"HERALD_TOKEN_SECRET=0123456789abcdef",
           b"HERALD_LISTEN=[::1]:7400", b"HERALD_PING_INTERVAL=10s", b"HERALD_MAX_FRAME=128KiB",
           b"HERALD_INSECURE=yes", b"HERALD_SLOW_CONSUMER=disconnect", b"HERALD_LOG_LEVEL=debug",
           b"HERALD_TOKEN_PREVIOUS_SECRETS=old-secret-0123456789, older-secret-0123456",
           b"HERALD_PRESENCE_REFRESH_INTERVAL=2s", b"HERALD_PRESENCE_LAST_SEEN_MAX=0"]
    seeds = {
        "value_duration": b"\x00" + b"25s",
        "value_size": b"\x00" + b"64KiB",
        "value_hostport": b"\x00" + b"[::1]:7400",
        "value_bool": b"\x00" + b"yes",
        "value_big": b"\x00" + b"18446744073709551615",
        "file_small": b"\x01" + b"[server]\nlisten = 127.0.0.1:9000\nnode_id = n-1\n"
                      b"[auth]\nsecret = 0123456789abcdef ; comment\n"
                      b"previous_secrets = fedcba9876543210,  0123456789abcdeX\n"
                      b"[limits]\nping_interval = 5s\nmax_frame = 1m\n"
                      b"[presence]\nmax_clients = 0\nlast_seen_ttl = 30d\n",
        "file_errors": b"\x01" + b"orphan = 1\n[server]\nport = 70000\nport = 1\njust words\n"
                       b"[limits\n[nosuch]\na = 1\n",
        "env": b"\x02" + b"\x00".join(env),
        # fuzz_gw_config's first finding: a node id the config file cannot hold.
        "repro_env_newline": b"\x02" + b"HERALD_NODE_ID=\n",
    }
    if len(example) < 8191:
        seeds["file_example"] = b"\x01" + example
    return seeds


def lg_wire():
    src = os.path.join(HERE, "corpus_proto_frame")
    return {name: b"\x10" + open(os.path.join(src, name), "rb").read()[2:]
            for name in sorted(os.listdir(src))}


def main():
    write("gw_channel_name", channel_name())
    write("gw_token", token())
    write("gw_config", config())
    write("lg_wire", lg_wire())


if __name__ == "__main__":
    main()
