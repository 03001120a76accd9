#!/usr/bin/python3
"""Writes the seed corpus of fuzz_proto_frame into tests/fuzz/corpus_proto_frame/.

Each seed is 2 header bytes (frame limit selector, feeding step; see fuzz_proto_frame.c)
followed by a delimited stream written with Python's stock protobuf runtime. Run it again
after changing herald.proto; it needs Debian's protoc and python3-protobuf.
Usage: tests/fuzz/make_corpus_proto_frame.py
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus_proto_frame")

LIMIT_64K = 16  # 1 << (16 % 17)
LIMIT_256 = 8


def main():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.check_call(["protoc", "--python_out=" + tmp,
                               "--proto_path=" + os.path.join(ROOT, "proto"),
                               os.path.join(ROOT, "proto", "herald.proto")])
        sys.path.insert(0, tmp)
        import herald_pb2 as pb
        from google.protobuf.internal.encoder import _VarintBytes

        def delim(*frames):
            out = b""
            for f in frames:
                body = f.SerializeToString()
                out += _VarintBytes(len(body)) + body
            return out

        F = pb.Frame
        push = pb.Push(channel="chat:lobby", offset=42, epoch="e1", payload=b"hello",
                       publish_time_ms=1735700000000)
        seeds = {
            "connect": delim(F(id=1, connect=pb.Connect(token="a.b.c", client_name="fz",
                                                        client_version="1"))),
            "connect_ok": delim(F(id=1, connect_ok=pb.ConnectOk(
                client_id="n1-1", node_id="n1", ping_interval_ms=25000,
                idle_timeout_ms=60000, user_id="u", max_frame_bytes=65536))),
            "subscribe": delim(F(id=2, subscribe=pb.Subscribe(channel="chat:lobby",
                                                              recover=True, offset=41,
                                                              epoch="e1"))),
            "subscribe_ok": delim(F(id=2, subscribe_ok=pb.SubscribeOk(
                recovered=True, publications=[push, push], offset=42, epoch="e1",
                recoverable=True))),
            "unsubscribe": delim(F(id=3, unsubscribe=pb.Unsubscribe(channel="c"))),
            "unsubscribe_ok": delim(F(id=3, unsubscribe_ok=pb.UnsubscribeOk())),
            "publish": delim(F(id=4, publish=pb.Publish(channel="news", payload=b"\x00" * 40))),
            "publish_ok": delim(F(id=4, publish_ok=pb.PublishOk(offset=7, epoch="e1"))),
            "push": delim(F(push=push)),
            "ping_pong": delim(F(id=5, ping=pb.Ping()), F(id=5, pong=pb.Pong())),
            "presence": delim(F(id=6, presence_request=pb.PresenceRequest(channel="c")),
                              F(id=6, presence_response=pb.PresenceResponse(
                                  channel="c", clients=[pb.ClientInfo(user_id="u",
                                                                      client_id="n1-1")],
                                  num_clients=1, num_users=1))),
            "error": delim(F(id=7, error=pb.Error(code=pb.Error.FORBIDDEN, text="no"))),
            "disconnect": delim(F(disconnect=pb.Disconnect(code=pb.Disconnect.SHUTDOWN,
                                                           reason="drain", reconnect=True,
                                                           reconnect_delay_ms=1000))),
            "empty_frame": b"\x00",
            "unknown_field": b"\x06\x08\x01\xa2\x06\x01\x41",
            "bad_utf8": b"\x05\x22\x03\x0a\x01\xff",
            "long_prefix": b"\x80" * 9 + b"\x00",
            "huge_prefix": b"\xff\xff\xff\xff\x0f",
        }
        os.makedirs(OUT, exist_ok=True)
        for name, stream in sorted(seeds.items()):
            step = 0 if len(name) % 2 else 3  # half fed at once, half 3 bytes at a time
            limit = LIMIT_256 if name == "publish" else LIMIT_64K
            with open(os.path.join(OUT, name), "wb") as f:
                f.write(bytes([limit, step]) + stream)
        print("wrote %d seeds to %s" % (len(seeds), OUT))


if __name__ == "__main__":
    main()
