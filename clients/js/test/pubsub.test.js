// Integration: the client against a real herald over TCP. Connect, subscribe, pushes from the
// admin API, publish, presence with join/leave, errors, heartbeats.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, HeraldError, ErrorCode, DisconnectCode } from '../src/index.js';
import { TcpTransport } from '../src/tcp.js';
import {
    startHerald,
    startProxy,
    token,
    nextEvent,
    collectPushes,
    until,
} from './helpers/herald.js';

let herald;
const clients = [];

before(async () => {
    herald = await startHerald({ args: ['--publish-rate', '5', '--publish-burst', '5'] });
});

after(async () => {
    for (const c of clients) c.close();
    const { code } = await herald.stop();
    assert.equal(code, 0, herald.log());
});

function newClient(user, channels, opts = {}) {
    const c = new Client({
        transport: new TcpTransport({ port: opts.port ?? herald.port }),
        token: token(user, channels),
        backoff: { minMs: 50, maxMs: 500 },
        ...opts,
    });
    clients.push(c);
    return c;
}

async function connected(c) {
    const ev = nextEvent(c, 'connected');
    c.connect();
    return ev;
}

test('connect: ConnectOk fills info and state goes connecting -> connected', async () => {
    const c = newClient('alice', 'news');
    const states = [];
    c.on('state', (s, prev) => states.push(`${prev}->${s}`));
    const info = await connected(c);
    assert.equal(info.userId, 'alice');
    assert.match(info.clientId, /\S/);
    assert.equal(info.pingIntervalMs, 25000);
    assert.equal(info.maxFrameBytes, 65536);
    assert.deepEqual(states, ['disconnected->connecting', 'connecting->connected']);
    assert.equal(c.state, 'connected');
    c.close();
    assert.equal(c.state, 'disconnected');
});

test('subscribe, then pushes published through the admin API arrive in order', async () => {
    const c = newClient('bob', 'news:*');
    await connected(c);
    const sub = c.subscribe('news:a');
    const got = collectPushes(sub);
    const ok = await sub.ready;
    assert.equal(ok.recovered, false);
    assert.equal(ok.offset, 0);
    assert.match(ok.epoch, /^[0-9a-f]{16}$/);
    assert.equal(sub.state, 'subscribed');
    for (let i = 1; i <= 5; i++) await herald.publish('news:a', `m${i}`);
    await got.waitFor(5);
    assert.deepEqual(
        got.pushes.map((p) => [p.channel, p.offset, p.text]),
        [1, 2, 3, 4, 5].map((i) => ['news:a', i, `m${i}`]),
    );
    assert.ok(got.pushes.every((p) => p.epoch === ok.epoch && p.payload instanceof Uint8Array));
    assert.ok(Math.abs(got.pushes[0].publishTimeMs - Date.now()) < 60000);
    assert.equal(sub.offset, 5);
    c.close();
});

test('publish from the client: PublishOk offset, and subscribers (the publisher too) get it', async () => {
    const pub = newClient('carol', 'room:*');
    const other = newClient('dave', 'room:*');
    await Promise.all([connected(pub), connected(other)]);
    const s1 = pub.subscribe('room:1');
    const s2 = other.subscribe('room:1');
    const g1 = collectPushes(s1);
    const g2 = collectPushes(s2);
    await Promise.all([s1.ready, s2.ready]);
    const r1 = await pub.publish('room:1', 'hello');
    const r2 = await pub.publish('room:1', new Uint8Array([0, 1, 2, 255]));
    assert.equal(r1.offset, 1);
    assert.equal(r2.offset, 2);
    assert.match(r1.epoch, /^[0-9a-f]{16}$/);
    for (const g of [g1, g2]) {
        await g.waitFor(2);
        assert.equal(g.pushes[0].text, 'hello');
        assert.deepEqual([...g.pushes[1].payload], [0, 1, 2, 255]);
        assert.deepEqual(
            g.pushes.map((p) => p.offset),
            [1, 2],
        );
    }
    pub.close();
    other.close();
});

test('a publish retried with its idempotencyKey is answered, not published twice', async () => {
    const pub = newClient('kim', 'room:*');
    await connected(pub);
    const s = pub.subscribe('room:idem');
    const g = collectPushes(s);
    await s.ready;
    const r1 = await pub.publish('room:idem', 'once', { idempotencyKey: 'order-1' });
    const r2 = await pub.publish('room:idem', 'once', { idempotencyKey: 'order-1' });
    assert.equal(r1.duplicate, false);
    assert.equal(r2.duplicate, true);
    assert.equal(r2.offset, r1.offset);
    assert.equal(r2.epoch, r1.epoch);
    const r3 = await pub.publish('room:idem', 'next', { idempotencyKey: 'order-2' });
    assert.equal(r3.offset, r1.offset + 1);
    await g.waitFor(2);
    assert.deepEqual(
        g.pushes.map((p) => p.text),
        ['once', 'next'],
    );
    assert.throws(() => pub.publish('room:idem', 'x', { idempotencyKey: 'k'.repeat(65) }), TypeError);
    pub.close();
});

test('a publish made before the connection is up waits for it', async () => {
    const c = newClient('erin', 'q');
    c.connect();
    assert.equal(c.state, 'connecting');
    const r = await c.publish('q', 'early');
    assert.equal(r.offset, 1);
    c.close();
});

test('presence lists subscribers; join and leave events reach a join_leave subscriber', async () => {
    const watcher = newClient('watcher', 'lobby');
    const guest = newClient('guest', 'lobby');
    await Promise.all([connected(watcher), connected(guest)]);
    const ws = watcher.subscribe('lobby', { joinLeave: true });
    await ws.ready;
    const joined = nextEvent(ws, 'join');
    const gs = guest.subscribe('lobby');
    await gs.ready;
    const j = await joined;
    assert.equal(j.channel, 'lobby');
    assert.equal(j.client.userId, 'guest');
    assert.equal(j.client.clientId, guest.info.clientId);

    const p = await guest.presence('lobby');
    assert.equal(p.channel, 'lobby');
    assert.equal(p.numClients, 2);
    assert.equal(p.numUsers, 2);
    assert.equal(p.truncated, false);
    assert.deepEqual(p.clients.map((x) => x.userId).sort(), ['guest', 'watcher']);
    assert.ok(p.clients.every((x) => x.connectedAtMs > 0));

    const left = nextEvent(watcher, 'leave'); // the client re-emits subscription events
    await gs.unsubscribe();
    assert.equal(gs.state, 'unsubscribed');
    const l = await left;
    assert.equal(l.client.clientId, guest.info.clientId);
    const p2 = await watcher.presence('lobby');
    assert.equal(p2.numClients, 1);
    watcher.close();
    guest.close();
});

test('unsubscribe right after subscribe: nothing of the channel is delivered; resubscribe works', async () => {
    const c = newClient('kim', 'u:*');
    await connected(c);
    const sub = c.subscribe('u:1');
    const got = collectPushes(c);
    await sub.unsubscribe(); // the server may answer the Subscribe with CANCELLED: both are fine
    await assert.rejects(sub.ready, /unsubscribed/);
    assert.equal(sub.state, 'unsubscribed');
    await herald.publish('u:1', 'not for us');
    const marker = c.subscribe('u:2');
    await marker.ready;
    await herald.publish('u:2', 'mark');
    await got.waitFor(1);
    assert.deepEqual(got.pushes.map((p) => p.channel), ['u:2']);
    const again = c.subscribe('u:1');
    await again.ready;
    await herald.publish('u:1', 'for us');
    await got.waitFor(2);
    assert.equal(got.pushes[1].text, 'for us');
    c.close();
});

test('errors: a channel the token does not allow is refused, and the session goes on', async () => {
    const c = newClient('frank', 'mine');
    await connected(c);
    const onError = nextEvent(c, 'error');
    const sub = c.subscribe('secret');
    await assert.rejects(sub.ready, (err) => {
        assert.ok(err instanceof HeraldError);
        assert.equal(err.code, ErrorCode.FORBIDDEN);
        assert.equal(err.codeName, 'FORBIDDEN');
        assert.equal(err.channel, 'secret');
        return true;
    });
    assert.equal((await onError).code, ErrorCode.FORBIDDEN);
    assert.equal(sub.state, 'failed');
    assert.equal(c.getSubscription('secret'), undefined);
    await assert.rejects(c.publish('secret', 'x'), {
        name: 'HeraldError',
        code: ErrorCode.FORBIDDEN,
    });
    await assert.rejects(c.presence('secret'), { code: ErrorCode.FORBIDDEN });
    await assert.rejects(c.publish('bad channel!', 'x'), { code: ErrorCode.BAD_CHANNEL });
    assert.equal(await c.unsubscribe('mine'), undefined); // never subscribed: nothing to do
    // Still connected, still serving.
    assert.equal(c.state, 'connected');
    assert.equal((await c.publish('mine', 'ok')).offset, 1);
    c.close();
});

test('publish over max_frame_bytes is refused locally, without losing the connection', async () => {
    const c = newClient('gina', 'big');
    await connected(c);
    await assert.rejects(c.publish('big', new Uint8Array(70000)), (err) => {
        assert.equal(err.code, ErrorCode.FRAME_TOO_LARGE);
        assert.equal(err.isLocal, true);
        return true;
    });
    assert.equal((await c.publish('big', 'small')).offset, 1);
    c.close();
});

test('RATE_LIMITED rejects with retryAfterMs', async () => {
    const c = newClient('hank', 'rl');
    await connected(c);
    const results = await Promise.allSettled(
        Array.from({ length: 12 }, (_, i) => c.publish('rl', `p${i}`)),
    );
    const limited = results.filter((r) => r.status === 'rejected');
    assert.ok(limited.length > 0, 'a burst over publish_burst must be limited');
    for (const r of limited) {
        assert.ok(r.reason instanceof HeraldError);
        assert.equal(r.reason.code, ErrorCode.RATE_LIMITED);
        assert.ok(r.reason.retryAfterMs > 0);
        assert.equal(r.reason.isRetryable, true);
    }
    assert.ok(results.filter((r) => r.status === 'fulfilled').length >= 5);
    c.close();
});

test('a bad token: the Error, then Disconnect{AUTH_FAILED, reconnect false}: no retry', async () => {
    const c = new Client({
        transport: new TcpTransport({ port: herald.port }),
        token: 'not.a.token',
    });
    clients.push(c);
    const err = nextEvent(c, 'error');
    const disc = nextEvent(c, 'disconnected');
    c.connect();
    assert.equal((await err).code, ErrorCode.UNAUTHORIZED);
    const d = await disc;
    assert.equal(d.wasConnected, false);
    assert.equal(d.disconnect.code, DisconnectCode.AUTH_FAILED);
    assert.equal(d.reconnect, false);
    assert.equal(c.state, 'disconnected');
    assert.equal(c.stats.attempts, 1);
    await assert.rejects(c.publish('x', 'y'), { name: 'ConnectionLostError' });
});

test('heartbeats: the client pings at the announced interval and stays connected', async () => {
    const h = await startHerald({ args: ['--ping-interval', '1s', '--idle-timeout', '2500ms'] });
    try {
        const c = newClient('ivy', 'hb', { port: h.port });
        const info = await connected(c);
        assert.equal(info.pingIntervalMs, 1000);
        let drops = 0;
        c.on('disconnected', () => drops++);
        // Three intervals without anything else sent: past the server's 2.5 s idle timeout,
        // which would have closed the connection had the pings not come.
        const t0 = performance.now();
        await until(c, ['pong'], () => c.stats.pongsReceived >= 3, 6000);
        assert.ok(performance.now() - t0 >= 2500);
        assert.equal(drops, 0);
        assert.equal(c.state, 'connected');
        assert.equal(c.stats.connects, 1);
        c.close();
    } finally {
        await h.stop();
    }
});

test('heartbeats: a connection whose Pongs stop is given up and replaced', async () => {
    const h = await startHerald({ args: ['--ping-interval', '1s', '--idle-timeout', '10s'] });
    const proxy = await startProxy(h.port);
    try {
        const c = newClient('jack', 'hb', { port: proxy.port });
        await connected(c);
        const disc = nextEvent(c, 'disconnected');
        const t0 = performance.now();
        proxy.stall();
        const d = await disc;
        const waited = performance.now() - t0;
        assert.match(d.reason, /no Pong within 1000 ms/);
        assert.equal(d.reconnect, true);
        // The Ping goes at most one interval after the stall, its deadline one interval later.
        assert.ok(waited >= 1000 && waited < 2500, `gave up after ${waited} ms`);
        proxy.resume();
        await nextEvent(c, 'connected');
        assert.equal(c.stats.connects, 2);
        c.close();
    } finally {
        await proxy.close();
        await h.stop();
    }
});
