#!/usr/bin/python3
"""herald_probe: a few herald clients that report what they see, one line per event.

The container tests (test_container.sh, test_compose_stack.sh) use it where herald-loadgen's
counters do not say enough: which node a client landed on, the Disconnect code a draining
node sends, the exact offsets of a broadcast. Python's stock protobuf runtime speaks the
protocol (proto/PROTOCOL.md); herald_pb2 comes from the build tree (tests/proto.cmake).

One client per ADDR (host:port), each with a token for user probe-<i> signed HS256 with the
secret read from --secret-file (as the image's entrypoint reads it: trailing newlines
dropped), subscribed to --channel. On stdout, flushed line by line:

  ready I node=NODE_ID        client I has its SubscribeOk
  all_ready                   every client has
  push I OFFSET PAYLOAD       a Push on the channel (payload as text)
  disconnect I CODE reconnect=true|false
  closed I                    the server closed client I's connection
  done                        the goal below was reached (exit 0)
  error TEXT                  anything else (exit 1): a refused Connect, an offset out of
                              order, the --timeout passing first

Goal: with --pushes N, every client has N Pushes whose offsets follow one another; with
--until-closed, the server has closed every client. Clients ping at half the announced
interval, so they stay connected however long a test waits.

Usage: herald_probe.py --pydir DIR --secret-file F --channel C [--timeout S]
                       (--pushes N | --until-closed) ADDR...
"""
import argparse
import base64
import hashlib
import hmac
import json
import select
import socket
import sys
import time

pb = None
_VarintBytes = None
_DecodeVarint32 = None


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(secret, user, channel):
    now = int(time.time())
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = b64url(json.dumps({"sub": user, "iat": now, "exp": now + 3600,
                                "channels": [channel]}, separators=(",", ":")).encode())
    signing_input = (header + "." + claims).encode()
    sig = hmac.new(secret, signing_input, hashlib.sha256).digest()
    return header + "." + claims + "." + b64url(sig)


class Client:
    def __init__(self, index, addr, secret, channel):
        host, _, port = addr.rpartition(":")
        self.index = index
        self.channel = channel
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.setblocking(False)
        self.inbuf = b""
        self.outbuf = b""
        self.next_id = 1
        self.ping_interval_s = None
        self.last_sent = time.monotonic()
        self.is_ready = False
        self.is_closed = False
        self.last_offset = None
        self.pushes = 0
        self.send(connect=pb.Connect(token=token(secret, "probe-%d" % index, channel),
                                     client_name="herald_probe", client_version="1"))

    def send(self, **body):
        frame = pb.Frame(id=self.next_id, **body)
        self.next_id += 1
        data = frame.SerializeToString()
        self.outbuf += _VarintBytes(len(data)) + data
        self.last_sent = time.monotonic()
        self.flush()

    def flush(self):
        while self.outbuf:
            try:
                n = self.sock.send(self.outbuf)
            except BlockingIOError:
                return
            except OSError:
                self.outbuf = b""  # the read side reports the close
                return
            self.outbuf = self.outbuf[n:]

    def on_readable(self):
        """Reads what is there; returns the frames that are whole."""
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return []
        except ConnectionResetError:
            data = b""
        if not data:
            self.is_closed = True
            self.sock.close()
            return []
        self.inbuf += data
        frames = []
        while self.inbuf:
            try:
                n, pos = _DecodeVarint32(self.inbuf, 0)
            except IndexError:
                break  # the prefix itself is incomplete
            if pos + n > len(self.inbuf):
                break
            frames.append(pb.Frame.FromString(self.inbuf[pos:pos + n]))
            self.inbuf = self.inbuf[pos + n:]
        return frames

    def handle(self, frame):
        """Reacts to one frame; returns an error text, or None."""
        kind = frame.WhichOneof("body")
        if kind == "connect_ok":
            self.ping_interval_s = frame.connect_ok.ping_interval_ms / 1000.0
            self.node = frame.connect_ok.node_id
            self.send(subscribe=pb.Subscribe(channel=self.channel))
        elif kind == "subscribe_ok":
            self.is_ready = True
            say("ready %d node=%s" % (self.index, self.node))
        elif kind == "push" and frame.push.channel == self.channel:
            offset = frame.push.offset
            if self.last_offset is not None and offset != self.last_offset + 1:
                return "client %d: offset %d after %d" % (self.index, offset, self.last_offset)
            self.last_offset = offset
            self.pushes += 1
            say("push %d %d %s" % (self.index, offset,
                                   frame.push.payload.decode("utf-8", "replace")))
        elif kind == "disconnect":
            code = pb.Disconnect.Code.Name(frame.disconnect.code)
            say("disconnect %d %s reconnect=%s" % (self.index, code,
                                                  str(frame.disconnect.reconnect).lower()))
        elif kind == "error":
            return "client %d: Error %s %s" % (self.index, pb.Error.Code.Name(frame.error.code),
                                               frame.error.text)
        return None

    def ping_due(self, now):
        if self.is_closed or self.ping_interval_s is None:
            return False
        return now - self.last_sent >= self.ping_interval_s / 2


def main():
    global pb, _VarintBytes, _DecodeVarint32
    ap = argparse.ArgumentParser()
    ap.add_argument("--pydir", required=True)
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--channel", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    goal = ap.add_mutually_exclusive_group(required=True)
    goal.add_argument("--pushes", type=int)
    goal.add_argument("--until-closed", action="store_true")
    ap.add_argument("addrs", nargs="+")
    a = ap.parse_args()
    sys.path.insert(0, a.pydir)
    import herald_pb2
    from google.protobuf.internal.decoder import _DecodeVarint32 as dec
    from google.protobuf.internal.encoder import _VarintBytes as enc
    pb, _VarintBytes, _DecodeVarint32 = herald_pb2, enc, dec

    with open(a.secret_file, "rb") as f:
        secret = f.read().rstrip(b"\n")
    deadline = time.monotonic() + a.timeout
    try:
        clients = [Client(i, addr, secret, a.channel) for i, addr in enumerate(a.addrs)]
    except OSError as e:
        say("error connect: %s" % e)
        return 1
    is_all_ready = False
    while True:
        now = time.monotonic()
        if now >= deadline:
            say("error timeout after %g s: ready %s, pushes %s, closed %s" % (
                a.timeout, [c.is_ready for c in clients], [c.pushes for c in clients],
                [c.is_closed for c in clients]))
            return 1
        if not is_all_ready and all(c.is_ready for c in clients):
            is_all_ready = True
            say("all_ready")
        if a.pushes is not None and all(c.pushes >= a.pushes for c in clients):
            say("done")
            return 0
        if a.until_closed and all(c.is_closed for c in clients):
            say("done")
            return 0
        for c in clients:
            if c.ping_due(now):
                c.send(ping=pb.Ping())
        is_open = [c for c in clients if not c.is_closed]
        if a.pushes is not None and len(is_open) < len(clients):
            closed = [c.index for c in clients if c.is_closed]
            say("error the server closed client(s) %s before their pushes" % closed)
            return 1
        readable, _, _ = select.select([c.sock for c in is_open], [], [], 0.5)
        for c in is_open:
            if c.sock not in readable:
                continue
            for frame in c.on_readable():
                err = c.handle(frame)
                if err:
                    say("error " + err)
                    return 1
            if c.is_closed:
                say("closed %d" % c.index)
            else:
                c.flush()


if __name__ == "__main__":
    sys.exit(main())
