// Every herald Frame both ways over WebSocket, against a real herald, with Node's `ws` package
// and a raw socket: each binary message carries exactly one Frame with no varint prefix, in
// either direction; fragmented messages arrive whole; pings are answered with the same payload;
// pipelined requests (even in the upgrade request's own TCP write) are answered, Connect first.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHerald, token } from './lib/herald.js';
import { DisconnectCode, encode, ErrorCode } from './lib/frames.js';
import { frameOf, RawWs, streamClient, upgradeRequest, wsClient, wsFrame } from './lib/clients.js';

let h;
before(async () => {
    h = await startHerald({ args: ['--max-frame', '64KiB'] });
});
after(async () => {
    assert.deepEqual(await h.stop(), { code: 0, signal: null });
});

/** A `ws` client past ConnectOk as user (token for channels). */
async function connected(user, channels = '*') {
    const c = await wsClient(h.wsPort);
    const ok = await c.request(
        1,
        'connect',
        { token: token(user, channels), clientName: 'ws-test' },
        'connectOk',
    );
    assert.equal(ok.body, 'connectOk', JSON.stringify(ok));
    return { c, ok: ok.connectOk };
}

describe('every Frame type over ws', () => {
    test('Connect / ConnectOk', async () => {
        const { c, ok } = await connected('alice');
        assert.equal(ok.userId, 'alice');
        assert.equal(ok.maxFrameBytes, 65536);
        assert.ok(ok.clientId.length > 0);
        assert.ok(ok.pingIntervalMs > 0 && ok.idleTimeoutMs > ok.pingIntervalMs);
        c.ws.close();
        await c.closed;
    });

    test('Subscribe / SubscribeOk, Publish / PublishOk, Push to ws and tcp subscribers alike', async () => {
        const { c: sub } = await connected('sub');
        const { c: pub } = await connected('pub');
        const tcp = await streamClient(h.port);
        assert.equal((await tcp.request(1, 'connect', { token: token('tcp') })).body, 'connectOk');
        for (const s of [sub, tcp]) {
            const ok = await s.request(2, 'subscribe', { channel: 'news' });
            assert.equal(ok.body, 'subscribeOk');
            assert.equal(ok.subscribeOk.epoch.length, 16);
        }
        const payload = Buffer.from('hello over websocket');
        const pok = await pub.request(7, 'publish', { channel: 'news', payload }, 'publishOk');
        assert.equal(pok.body, 'publishOk');
        assert.equal(pok.publishOk.offset, 1);
        for (const s of [sub, tcp]) {
            const push = await s.inbox.next(frameOf('push'));
            assert.equal(push.id, 0);
            assert.equal(push.push.channel, 'news');
            assert.equal(push.push.offset, 1);
            assert.equal(push.push.epoch, pok.publishOk.epoch);
            assert.deepEqual(Buffer.from(push.push.payload), payload);
            assert.ok(Math.abs(push.push.publishTimeMs - Date.now()) < 60000);
        }
        // Through the admin API too, and one over 64 KiB (a 64-bit WebSocket length).
        const big = Buffer.alloc(100 * 1024, 0x5a);
        await h.publish('news', big);
        for (const s of [sub, tcp]) {
            const push = await s.inbox.next(frameOf('push'));
            assert.equal(push.push.offset, 2);
            assert.deepEqual(Buffer.from(push.push.payload), big);
        }
        sub.ws.close();
        pub.ws.close();
        tcp.close();
        await Promise.all([sub.closed, pub.closed]);
    });

    test('Unsubscribe / UnsubscribeOk: no Push of the channel after it', async () => {
        const { c } = await connected('unsub');
        assert.equal((await c.request(2, 'subscribe', { channel: 'u1' })).body, 'subscribeOk');
        assert.equal((await c.request(3, 'subscribe', { channel: 'u2' })).body, 'subscribeOk');
        const ok = await c.request(4, 'unsubscribe', { channel: 'u1' });
        assert.equal(ok.body, 'unsubscribeOk');
        await h.publish('u1', 'not for me');
        await h.publish('u2', 'marker');
        const push = await c.inbox.next(frameOf('push'));
        assert.equal(push.push.channel, 'u2');
        assert.equal(c.inbox.items.filter(frameOf('push')).length, 0);
        c.ws.close();
        await c.closed;
    });

    test('Ping / Pong (herald heartbeats)', async () => {
        const { c } = await connected('pinger');
        for (let id = 10; id < 13; id++) {
            const pong = await c.request(id, 'ping', {});
            assert.equal(pong.body, 'pong');
            assert.equal(pong.id, id);
        }
        c.ws.close();
        await c.closed;
    });

    test('PresenceRequest / PresenceResponse, PresenceEvent (join_leave)', async () => {
        const { c: watcher } = await connected('watcher');
        const ok = await watcher.request(2, 'subscribe', { channel: 'room', joinLeave: true });
        assert.equal(ok.body, 'subscribeOk');
        const { c: bob, ok: bobOk } = await connected('bob');
        assert.equal((await bob.request(2, 'subscribe', { channel: 'room' })).body, 'subscribeOk');
        const joined = await watcher.inbox.next(frameOf('presenceEvent'));
        assert.equal(joined.id, 0);
        assert.equal(joined.presenceEvent.channel, 'room');
        assert.deepEqual(
            joined.presenceEvent.joined.map((x) => [x.userId, x.clientId]),
            [['bob', bobOk.clientId]],
        );
        const pr = await bob.request(3, 'presenceRequest', { channel: 'room' });
        assert.equal(pr.body, 'presenceResponse');
        assert.equal(pr.presenceResponse.numClients, 2);
        assert.equal(pr.presenceResponse.numUsers, 2);
        assert.deepEqual(pr.presenceResponse.clients.map((x) => x.userId).sort(), [
            'bob',
            'watcher',
        ]);
        assert.equal(
            (await bob.request(4, 'unsubscribe', { channel: 'room' })).body,
            'unsubscribeOk',
        );
        const left = await watcher.inbox.next(frameOf('presenceEvent'));
        assert.deepEqual(
            left.presenceEvent.left.map((x) => x.userId),
            ['bob'],
        );
        bob.ws.close();
        watcher.ws.close();
        await Promise.all([bob.closed, watcher.closed]);
    });

    test('Error: FORBIDDEN and NOT_SUBSCRIBED carry the request id, the session goes on', async () => {
        const { c } = await connected('limited', 'news');
        const e1 = await c.request(5, 'subscribe', { channel: 'admin' });
        assert.equal(e1.body, 'error');
        assert.equal(e1.error.code, ErrorCode.FORBIDDEN);
        const e2 = await c.request(6, 'unsubscribe', { channel: 'news' });
        assert.equal(e2.body, 'error');
        assert.equal(e2.error.code, ErrorCode.NOT_SUBSCRIBED);
        assert.equal((await c.request(7, 'ping', {})).body, 'pong');
        c.ws.close();
        await c.closed;
    });

    test('Error + Disconnect: a bad token, then the close frame 4000 + AUTH_FAILED', async () => {
        const c = await wsClient(h.wsPort);
        c.send(1, 'connect', { token: 'not.a.token' });
        const err = await c.inbox.next(frameOf('error'));
        assert.equal(err.id, 1);
        assert.equal(err.error.code, ErrorCode.UNAUTHORIZED);
        const disc = await c.inbox.next(frameOf('disconnect'));
        assert.equal(disc.disconnect.code, DisconnectCode.AUTH_FAILED);
        assert.equal(disc.disconnect.reconnect, false);
        const closed = await c.closed;
        assert.equal(closed.code, 4000 + DisconnectCode.AUTH_FAILED);
        assert.equal(closed.reason, disc.disconnect.reason);
    });
});

describe('framing', () => {
    test('each binary message from herald is exactly one Frame, no varint prefix', async () => {
        const c = new RawWs(h.wsPort);
        assert.equal((await c.connect()).status, 101);
        await c.send(1, 'connect', { token: token('raw') });
        await c.send(2, 'subscribe', { channel: 'raw' });
        await c.send(3, 'publish', { channel: 'raw', payload: Buffer.from('x') });
        await c.send(4, 'ping', {});
        const seen = [];
        for (const body of ['connectOk', 'subscribeOk', 'publishOk', 'push', 'pong'])
            seen.push(await c.inbox.next(frameOf(body)));
        for (const f of seen) {
            // Re-encoding the decoded Frame gives the message's length: nothing before or after.
            assert.ok(f.exact, `${f.body}: the message holds more than one Frame`);
            assert.notEqual(f.firstByte, f.length - 1, `${f.body} starts with its length`);
        }
        assert.equal(c.inbox.items.filter((x) => x.frame).length, 0, 'only final binary frames');
        c.close();
    });

    test('a client message with a varint prefix is not a Frame: PROTOCOL_ERROR, close 4007', async () => {
        const c = new RawWs(h.wsPort);
        await c.connect();
        const ping = encode(1, 'ping', {});
        await c.write(wsFrame({ payload: Buffer.concat([Buffer.from([ping.length]), ping]) }));
        const err = await c.inbox.next(frameOf('error'));
        assert.equal(err.error.code, ErrorCode.BAD_REQUEST);
        const disc = await c.inbox.next(frameOf('disconnect'));
        assert.equal(disc.disconnect.code, DisconnectCode.PROTOCOL_ERROR);
        const close = await c.inbox.next((x) => x.close);
        assert.equal(close.close.code, 4000 + DisconnectCode.PROTOCOL_ERROR);
        await c.ended;
    });

    test('a Frame split over 3 fragments arrives whole (ws package)', async () => {
        const { c } = await connected('frag');
        const bytes = encode(9, 'publish', { channel: 'frag', payload: Buffer.alloc(3000, 7) });
        assert.equal((await c.request(2, 'subscribe', { channel: 'frag' })).body, 'subscribeOk');
        const third = Math.ceil(bytes.length / 3);
        c.ws.send(bytes.subarray(0, third), { fin: false, binary: true });
        c.ws.send(bytes.subarray(third, 2 * third), { fin: false, binary: true });
        c.ws.send(bytes.subarray(2 * third), { fin: true, binary: true });
        assert.equal((await c.inbox.next(frameOf('publishOk', 9))).body, 'publishOk');
        const push = await c.inbox.next(frameOf('push'));
        assert.equal(push.push.payload.length, 3000);
        c.ws.close();
        await c.closed;
    });

    test('fragments with a ping between them, each in its own write: one message, one pong', async () => {
        const c = new RawWs(h.wsPort);
        await c.connect();
        const bytes = encode(1, 'connect', { token: token('frag2') });
        const parts = [bytes.subarray(0, 5), bytes.subarray(5, 40), bytes.subarray(40)];
        await c.write(wsFrame({ fin: false, opcode: 2, payload: parts[0] }));
        await c.write(wsFrame({ opcode: 9, payload: Buffer.from('mid') }));
        await c.write(wsFrame({ fin: false, opcode: 0, payload: parts[1] }));
        await c.write(wsFrame({ fin: true, opcode: 0, payload: parts[2] }));
        assert.deepEqual((await c.inbox.next((x) => x.pong)).pong, Buffer.from('mid'));
        assert.equal((await c.inbox.next(frameOf('connectOk', 1))).body, 'connectOk');
        c.close();
    });

    test('a ping is answered by a pong with the same payload, counted', async () => {
        const before = await h.metric('herald_ws_pings_total', { listener: 'ws' });
        const { c } = await connected('wsping');
        const payloads = [Buffer.alloc(0), Buffer.from('abc'), Buffer.alloc(125, 0xee)];
        for (const p of payloads) {
            c.ws.ping(p);
            assert.deepEqual((await c.inbox.next((x) => x.pong)).pong, p);
        }
        c.ws.pong(Buffer.from('unsolicited')); // ignored, as RFC 6455 allows
        assert.equal((await c.request(2, 'ping', {})).body, 'pong');
        assert.equal(
            await h.metric('herald_ws_pings_total', { listener: 'ws' }),
            before + payloads.length,
        );
        c.ws.close();
        await c.closed;
    });

    test("Connect, Subscribe, Ping in the upgrade request's TCP write: all answered", async () => {
        const c = new RawWs(h.wsPort);
        const extra = Buffer.concat([
            wsFrame({ payload: encode(1, 'connect', { token: token('pipe') }) }),
            wsFrame({ payload: encode(2, 'subscribe', { channel: 'pipe' }) }),
            wsFrame({ payload: encode(3, 'ping', {}) }),
        ]);
        assert.equal((await c.connect({ request: upgradeRequest(), extra })).status, 101);
        // Connect first; the answers behind it in any order (PROTOCOL.md section 2).
        assert.equal((await c.inbox.next()).body, 'connectOk');
        const rest = [await c.inbox.next(), await c.inbox.next()].map((f) => `${f.id}:${f.body}`);
        assert.deepEqual(rest.sort(), ['2:subscribeOk', '3:pong']);
        await h.publish('pipe', 'p');
        assert.equal((await c.inbox.next(frameOf('push'))).push.channel, 'pipe');
        c.close();
    });

    test('Connect and 20 Subscribes in one TCP write after the 101: Connect first, each answered', async () => {
        const c = new RawWs(h.wsPort);
        await c.connect();
        const frames = [];
        frames.push(wsFrame({ payload: encode(1, 'connect', { token: token('pipe2') }) }));
        for (let i = 0; i < 20; i++)
            frames.push(wsFrame({ payload: encode(2 + i, 'subscribe', { channel: `p${i}` }) }));
        await c.write(Buffer.concat(frames));
        // Connect is answered first (requests behind it wait for it); the Subscribes' answers
        // may come in any order (PROTOCOL.md section 2), each exactly once.
        assert.equal((await c.inbox.next()).body, 'connectOk');
        const ids = [];
        for (let i = 0; i < 20; i++) {
            const ok = await c.inbox.next();
            assert.equal(ok.body, 'subscribeOk');
            ids.push(ok.id);
        }
        assert.deepEqual(
            ids.sort((x, y) => x - y),
            Array.from({ length: 20 }, (_, i) => 2 + i),
        );
        c.close();
    });

    test('an upgrade request written a few bytes at a time', async () => {
        const req = upgradeRequest();
        const c = new RawWs(h.wsPort);
        const text = req.text;
        const head = c.connect({ request: { text: text.slice(0, 7), key: req.key } });
        await new Promise((r) => c.sock.once('connect', r));
        c.sock.setNoDelay(true);
        for (let i = 7; i < text.length; i += 13) await c.write(Buffer.from(text.slice(i, i + 13)));
        assert.equal((await head).status, 101);
        await c.send(1, 'connect', { token: token('slowreq') });
        assert.equal((await c.inbox.next()).body, 'connectOk');
        c.close();
    });
});
