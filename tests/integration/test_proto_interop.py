#!/usr/bin/python3
"""Interoperability of herald's frame codec with a stock protobuf runtime (Python's).

Frames written by Python (delimited exactly as _VarintBytes(len) + SerializeToString, the
way every protobuf runtime's delimited-stream helpers write them) must decode in herald's
codec, and frames herald encodes must parse in Python, byte for byte.

Usage: test_proto_interop.py --tool PATH/proto_tool --pydir DIR_WITH_herald_pb2
Run by ctest as test_proto_interop (label integration). Uses /usr/bin/python3: Debian's
python3-protobuf provides google.protobuf.
"""
import argparse
import subprocess
import sys

TOOL = None
pb = None
_VarintBytes = None
_DecodeVarint32 = None


def canon(msg):
    """The canonical line proto_tool prints: every field in number order, a oneof's set
    member only, ints decimal, bools true/false, strings and bytes as x+hex."""
    parts = []
    for f in sorted(msg.DESCRIPTOR.fields, key=lambda f: f.number):
        oneof = f.containing_oneof
        if oneof is not None and msg.WhichOneof(oneof.name) != f.name:
            continue
        v = getattr(msg, f.name)
        if f.label == f.LABEL_REPEATED:
            parts.append("%s=[%s]" % (f.name, ",".join(canon_value(f, x) for x in v)))
        else:
            parts.append("%s=%s" % (f.name, canon_value(f, v)))
    return "{" + " ".join(parts) + "}"


def canon_value(f, v):
    if f.type == f.TYPE_MESSAGE:
        return canon(v)
    if f.type == f.TYPE_STRING:
        return "x" + v.encode("utf-8").hex()
    if f.type == f.TYPE_BYTES:
        return "x" + bytes(v).hex()
    if f.type == f.TYPE_BOOL:
        return "true" if v else "false"
    return str(int(v))


def delimited(frames):
    out = b""
    for f in frames:
        body = f.SerializeToString()
        out += _VarintBytes(len(body)) + body
    return out


def split_delimited(data):
    """Splits a delimited stream with Python's own varint reader; returns the bodies."""
    bodies, pos = [], 0
    while pos < len(data):
        n, pos = _DecodeVarint32(data, pos)
        assert pos + n <= len(data), "frame runs past the end of the stream"
        bodies.append(data[pos:pos + n])
        pos += n
    return bodies


def run(args, data):
    p = subprocess.run([TOOL] + args, input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    if p.stderr:
        sys.stderr.write(p.stderr.decode(errors="replace"))
    return p.returncode, p.stdout


def python_frames():
    """One frame of every kind, with values that stress the encoding: multi-byte UTF-8,
    64-bit extremes, empty and large payloads, an enum value newer than the schema."""
    F = pb.Frame
    frames = [
        F(id=1, connect=pb.Connect(token="eyJ.eyJ.sig", client_name="py", client_version="3")),
        F(id=1, connect_ok=pb.ConnectOk(client_id="n1-1", node_id="n1", ping_interval_ms=25000,
                                        idle_timeout_ms=60000, user_id="ü",
                                        max_frame_bytes=65536)),
        F(id=2, subscribe=pb.Subscribe(channel="chat:日本", recover=True, offset=2**64 - 1,
                                       epoch="e", join_leave=True)),
        F(id=2, subscribe_ok=pb.SubscribeOk(
            recovered=True, offset=9, epoch="e", recoverable=True,
            publications=[pb.Push(channel="c", offset=i, epoch="e", payload=bytes([i]) * i,
                                  publish_time_ms=1735700000000 + i) for i in range(5)])),
        F(id=3, unsubscribe=pb.Unsubscribe(channel="c")),
        F(id=3, unsubscribe_ok=pb.UnsubscribeOk()),
        F(id=4, publish=pb.Publish(channel="news", payload=bytes(range(256)) * 120)),
        F(id=4, publish=pb.Publish(channel="news", payload=b"")),
        F(id=4, publish_ok=pb.PublishOk(offset=2**63, epoch="e")),
        F(push=pb.Push(channel="news", offset=1, epoch="e", payload=b"\x00\xff",
                       publish_time_ms=1)),
        F(id=2**64 - 1, ping=pb.Ping()),
        F(id=2**64 - 1, pong=pb.Pong()),
        F(id=5, presence_request=pb.PresenceRequest(channel="c")),
        F(id=5, presence_response=pb.PresenceResponse(
            channel="c", num_clients=2, num_users=1, truncated=False,
            clients=[pb.ClientInfo(user_id="u", client_id="a"),
                     pb.ClientInfo(user_id="u", client_id="b", connected_at_ms=2**63)])),
        F(id=6, error=pb.Error(code=pb.Error.TOO_MANY_SUBSCRIPTIONS, text="limit 100")),
        F(id=6, error=pb.Error(code=77, retry_after_ms=5)),
        F(disconnect=pb.Disconnect(code=pb.Disconnect.IDLE_TIMEOUT, reason="idle")),
        F(presence_event=pb.PresenceEvent(
            channel="c", joined=[pb.ClientInfo(user_id="u", client_id="a", connected_at_ms=1)],
            left=[pb.ClientInfo(user_id="v", client_id="b")])),
        F(),
    ]
    kinds = {f.WhichOneof("body") for f in frames}
    assert len(kinds - {None}) == 16, "python_frames misses a kind: %s" % kinds
    return frames


def check_python_to_c():
    frames = python_frames()
    stream = delimited(frames)
    want = "".join(canon(f) + "\n" for f in frames).encode()
    for chunk in ("0", "1", "7", "4096"):
        rc, out = run(["decode", "--chunk", chunk], stream)
        assert rc == 0, "decode --chunk %s exited %d: %r" % (chunk, rc, out[-200:])
        if out != want:
            got = out.decode().splitlines()
            for i, (g, w) in enumerate(zip(got, want.decode().splitlines())):
                if g != w:
                    raise AssertionError("frame %d differs:\n  C:  %s\n  py: %s" % (i, g, w))
            raise AssertionError("C decoded %d frames, python wrote %d" % (len(got), len(frames)))
    # herald re-encodes what it decoded to exactly the bytes Python wrote.
    rc, out = run(["reencode"], stream)
    assert rc == 0 and out == stream, "reencode differs (rc %d)" % rc
    # A field from a newer schema (number 100) is skipped by herald, not fatal.
    body = frames[10].SerializeToString() + b"\xa2\x06\x01A"
    rc, out = run(["decode"], _VarintBytes(len(body)) + body)
    assert rc == 0 and out == (canon(frames[10]) + "\n").encode(), out
    print("python -> herald: %d frames, %d bytes, chunked 1/7/4096/all: ok"
          % (len(frames), len(stream)))


def check_c_to_python():
    rc, stream = run(["encode"], b"")
    assert rc == 0, "encode exited %d" % rc
    bodies = split_delimited(stream)
    parsed = []
    for i, body in enumerate(bodies):
        m = pb.Frame()
        m.ParseFromString(body)
        # Both runtimes serialize fields in number order: the bytes must match exactly.
        assert m.SerializeToString() == body, "frame %d re-serializes differently" % i
        parsed.append(m)
    kinds = {m.WhichOneof("body") for m in parsed}
    assert len(kinds) == 15, "herald's encode misses a kind: %s" % sorted(kinds)
    # herald's own reading of its bytes equals Python's reading of them.
    rc, out = run(["decode"], stream)
    assert rc == 0, "decode of herald's own frames exited %d" % rc
    want = "".join(canon(m) + "\n" for m in parsed).encode()
    assert out == want, "herald and python read herald's frames differently"
    last = parsed[-1]
    assert last.id == 0 and last.WhichOneof("body") == "push" and last.push.offset == 7
    assert parsed[13].error.code == 99, "an unknown enum value must survive"
    print("herald -> python: %d frames, %d bytes: ok" % (len(parsed), len(stream)))


def check_errors():
    ok = pb.Frame(id=1, ping=pb.Ping()).SerializeToString()
    big = pb.Frame(id=1, publish=pb.Publish(channel="c", payload=b"x" * 200)).SerializeToString()
    cases = [
        # (what, input, extra args, expected rc, expected last line)
        ("over the limit", _VarintBytes(len(big)) + big, ["--max", "100"], 2,
         b"error PROTO_ERR_TOO_LARGE"),
        ("over the limit, prefix only", _VarintBytes(1 << 30), [], 2,
         b"error PROTO_ERR_TOO_LARGE"),
        ("11-byte prefix", b"\x80" * 10 + b"\x00", [], 2, b"error PROTO_ERR_BAD_VARINT"),
        ("prefix over 32 bits", b"\xff\xff\xff\xff\x7f", ["--max", str(2**40)], 2,
         b"error PROTO_ERR_BAD_VARINT"),
        ("garbage body", b"\x04\xff\xff\xff\xff", [], 2, b"error PROTO_ERR_UNDECODABLE"),
        ("non-UTF-8 channel", b"\x05\x22\x03\x0a\x01\xc3", [], 2,
         b"error PROTO_ERR_UNDECODABLE"),
        ("truncated", (_VarintBytes(len(ok)) + ok)[:-1], [], 3,
         b"incomplete %d" % (len(ok))),
    ]
    for what, data, extra, want_rc, want_line in cases:
        rc, out = run(["decode"] + extra, data)
        lines = out.splitlines()
        assert rc == want_rc and lines and lines[-1] == want_line, \
            "%s: rc %d, output %r" % (what, rc, out)
    print("errors: %d cases: ok" % len(cases))


def main():
    global TOOL, pb, _VarintBytes, _DecodeVarint32
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--pydir", required=True)
    a = ap.parse_args()
    TOOL = a.tool
    sys.path.insert(0, a.pydir)
    import herald_pb2
    from google.protobuf.internal.decoder import _DecodeVarint32 as dv
    from google.protobuf.internal.encoder import _VarintBytes as vb
    pb, _VarintBytes, _DecodeVarint32 = herald_pb2, vb, dv
    check_python_to_c()
    check_c_to_python()
    check_errors()
    return 0


if __name__ == "__main__":
    sys.exit(main())
