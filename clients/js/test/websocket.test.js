// The WebSocket transport against a scripted peer (test/helpers/ws-peer.js): herald's own
// WebSocket endpoint does not exist yet. Checks the wire (one binary message per Frame, no
// prefix, path and subprotocol) and the client behaviours only a scripted server can provoke.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocket as WsWebSocket } from 'ws';
import {
    Client,
    WebSocketTransport,
    ErrorCode,
    DisconnectCode,
    encodeFrame,
    CLIENT_VERSION,
} from '../src/index.js';
import { startWsPeer, PEER_EPOCH } from './helpers/ws-peer.js';
import { nextEvent, collectPushes } from './helpers/herald.js';

const clients = [];
const peers = [];
after(async () => {
    for (const c of clients) c.close();
    for (const p of peers) await p.close();
});

async function peer(opts) {
    const p = await startWsPeer(opts);
    peers.push(p);
    return p;
}

function newClient(opts) {
    const c = new Client({ token: 'tok', backoff: { minMs: 20, maxMs: 100 }, ...opts });
    clients.push(c);
    return c;
}

test('one binary message per Frame, no length prefix, on /connection with herald.v1', async () => {
    const p = await peer();
    const c = newClient({ url: p.url });
    const connected = nextEvent(c, 'connected');
    c.connect();
    const info = await connected;
    assert.equal(info.clientId, 'ws-1');
    const conn = p.connections[0];
    assert.equal(conn.path, '/connection');
    assert.equal(conn.protocol, 'herald.v1');
    const first = conn.messages[0];
    assert.equal(first.isBinary, true);
    // Exactly the Frame: its first byte is Frame.id's key (08), not a varint length.
    const want = encodeFrame(1, 'connect', {
        token: 'tok',
        clientName: 'herald-js',
        clientVersion: CLIENT_VERSION,
    });
    assert.deepEqual([...first.bytes], [...want]);
    assert.equal(first.bytes[0], 0x08);

    const sub = c.subscribe('news');
    const got = collectPushes(sub);
    await sub.ready;
    conn.send(0, 'push', {
        channel: 'news',
        offset: 1,
        epoch: PEER_EPOCH,
        payload: Buffer.from('hello'),
        publishTimeMs: 1,
    });
    conn.send(0, 'push', {
        channel: 'news',
        offset: 2,
        epoch: PEER_EPOCH,
        payload: Buffer.from('again'),
        publishTimeMs: 2,
    });
    await got.waitFor(2);
    assert.deepEqual(
        got.pushes.map((x) => x.text),
        ['hello', 'again'],
    );
    assert.deepEqual(await c.publish('news', 'hi'), { offset: 1, epoch: PEER_EPOCH, duplicate: false });

    for (const m of conn.messages) {
        assert.equal(m.isBinary, true);
        assert.ok(m.frame, 'every message decodes as one Frame on its own');
    }
    assert.deepEqual(
        conn.messages.map((m) => m.frame.body),
        ['connect', 'subscribe', 'publish'],
    );
    assert.deepEqual([...conn.messages[2].frame.publish.payload], [...Buffer.from('hi')]);
    c.close();
});

test('an explicit WebSocket constructor (the ws package) is used when given', async () => {
    const p = await peer();
    let made = 0;
    class Counting extends WsWebSocket {
        constructor(...args) {
            super(...args);
            made++;
        }
    }
    const c = newClient({ transport: new WebSocketTransport({ url: p.url, WebSocket: Counting }) });
    const connected = nextEvent(c, 'connected');
    c.connect();
    await connected;
    assert.equal(made, 1);
    c.close();
});

test('Disconnect advice over WebSocket, then a resubscribe that recovers from the cursor', async () => {
    const p = await peer();
    const c = newClient({ url: p.url });
    const sub = c.subscribe('feed');
    const got = collectPushes(sub);
    const resyncs = [];
    sub.on('resync', (r) => resyncs.push(r));
    c.connect();
    await sub.ready;
    const conn = p.connections[0];
    for (let o = 1; o <= 3; o++)
        conn.send(0, 'push', {
            channel: 'feed',
            offset: o,
            epoch: PEER_EPOCH,
            payload: Buffer.from(`m${o}`),
        });
    await got.waitFor(3);

    const lost = nextEvent(c, 'disconnected');
    const second = nextEvent(p, 'message', {
        filter: (cn, f) => cn !== conn && f?.body === 'subscribe',
    });
    conn.send(0, 'disconnect', {
        code: DisconnectCode.SHUTDOWN,
        reason: 'draining',
        reconnect: true,
        reconnectDelayMs: 100,
    });
    const d = await lost;
    const t0 = performance.now();
    assert.deepEqual(d.disconnect, {
        code: 5,
        codeName: 'SHUTDOWN',
        reason: 'draining',
        reconnect: true,
        delayMs: 100,
    });
    assert.ok(d.delayMs >= 100 && d.delayMs <= 200);
    const [conn2, frame] = await second;
    assert.ok(performance.now() - t0 >= d.delayMs - 5, 'waited as advised');
    assert.equal(conn2.messages[0].frame.body, 'connect');
    assert.deepEqual(frame.subscribe, {
        channel: 'feed',
        recover: true,
        offset: 3,
        epoch: PEER_EPOCH,
        joinLeave: false,
    });
    const ok = await nextEvent(sub, 'subscribed');
    assert.equal(ok.recovered, true);
    conn2.send(0, 'push', {
        channel: 'feed',
        offset: 4,
        epoch: PEER_EPOCH,
        payload: Buffer.from('m4'),
    });
    await got.waitFor(4);
    assert.deepEqual(
        got.pushes.map((x) => x.offset),
        [1, 2, 3, 4],
    );
    assert.deepEqual(resyncs, []);
    c.close();
});

test('Disconnect with reconnect false: the client stops, and requests fail', async () => {
    const p = await peer();
    const c = newClient({ url: p.url });
    c.connect();
    await nextEvent(c, 'connected');
    const lost = nextEvent(c, 'disconnected');
    p.connections[0].send(0, 'disconnect', {
        code: DisconnectCode.NORMAL,
        reason: 'kicked',
        reconnect: false,
    });
    const d = await lost;
    assert.equal(d.reconnect, false);
    assert.equal(c.state, 'disconnected');
    assert.equal(c.reconnectTimer, null);
    await assert.rejects(c.publish('x', 'y'), { name: 'ConnectionLostError' });
});

test('Error BUSY on Connect: the same Connect again on the same connection after retry_after_ms', async () => {
    let refused = 0;
    const p = await peer({
        respond(conn, frame) {
            if (frame.body !== 'connect' || refused > 0) return false;
            refused++;
            conn.send(frame.id, 'error', { code: ErrorCode.BUSY, text: 'busy', retryAfterMs: 80 });
            return true;
        },
    });
    const c = newClient({ url: p.url });
    c.connect();
    await nextEvent(c, 'connected');
    assert.equal(p.connections.length, 1);
    const conn = p.connections[0];
    const connects = conn.messages.filter((m) => m.frame.body === 'connect');
    assert.equal(connects.length, 2);
    assert.deepEqual(connects[1].frame.connect, connects[0].frame.connect);
    assert.notEqual(connects[1].frame.id, connects[0].frame.id); // a new request, a new id
    assert.ok(
        connects[1].at - connects[0].at >= 75,
        `resent after ${connects[1].at - connects[0].at} ms`,
    );
    c.close();
});

test('a text message, or a frame that does not decode, ends the connection; the client reconnects', async () => {
    for (const bad of ['text', Buffer.from([0x0a, 0x05, 0x01])]) {
        const p = await peer();
        const c = newClient({ url: p.url });
        c.connect();
        await nextEvent(c, 'connected');
        const lost = nextEvent(c, 'disconnected');
        const back = nextEvent(c, 'connected');
        p.connections[0].socket.send(bad);
        const d = await lost;
        assert.match(d.reason, typeof bad === 'string' ? /text message/ : /undecodable/);
        assert.equal(d.reconnect, true);
        await back;
        assert.equal(p.connections.length, 2);
        c.close();
    }
});

test('no ConnectOk within connectTimeoutMs: the attempt is abandoned and retried', async () => {
    let answered = 0;
    const p = await peer({
        respond: (conn, frame) => frame.body === 'connect' && answered++ === 0,
    });
    const c = newClient({ url: p.url, connectTimeoutMs: 150 });
    const lost = nextEvent(c, 'disconnected');
    c.connect();
    const d = await lost;
    assert.equal(d.wasConnected, false);
    assert.match(d.reason, /no ConnectOk/);
    await nextEvent(c, 'connected');
    assert.equal(p.connections.length, 2);
    c.close();
});

test('nothing listening: failed attempts back off and the client keeps trying', async () => {
    const p = await peer();
    const url = p.url;
    await p.close();
    const c = newClient({ url, backoff: { minMs: 10, maxMs: 40, jitter: 0 } });
    const delays = [];
    c.on('disconnected', (d) => delays.push(d.delayMs));
    c.connect();
    await new Promise((resolve) => c.on('disconnected', () => delays.length >= 4 && resolve()));
    assert.deepEqual(delays.slice(0, 4), [10, 20, 40, 40]);
    assert.equal(c.state, 'connecting');
    c.close();
    assert.equal(c.state, 'disconnected');
});
