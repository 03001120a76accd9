// Integration: reconnects against real heralds over TCP. Recovery after the network cuts the
// connection, resync when a restarted herald lost the channel's history (a new epoch), a token
// that expires during the session, and a drain: Disconnect{SHUTDOWN} with its reconnect
// advice, then recovery on a herald restarted on the same port (Redis engine, so the history
// outlives the node).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, DisconnectCode } from '../src/index.js';
import { TcpTransport } from '../src/tcp.js';
import {
    startHerald,
    startRedis,
    startProxy,
    token,
    nextEvent,
    collectPushes,
} from './helpers/herald.js';

const HISTORY = ['--history-rules', 'hist:*=1000/5m'];
const clients = [];
const cleanups = [];
after(async () => {
    // Clients first: a herald stopped with a client still connected would drain it.
    for (const c of clients) c.close();
    for (const fn of cleanups.reverse()) await fn();
});

function newClient(port, channels = 'hist:*') {
    const c = new Client({
        transport: new TcpTransport({ port }),
        token: token('rita', channels),
        backoff: { minMs: 50, maxMs: 400 },
    });
    clients.push(c);
    return c;
}

async function subscribed(c, channel) {
    const ev = nextEvent(c, 'connected');
    c.connect();
    await ev;
    const sub = c.subscribe(channel);
    const got = collectPushes(sub);
    const resyncs = [];
    sub.on('resync', (r) => resyncs.push(r));
    await sub.ready;
    return { sub, got, resyncs };
}

function texts(pushes) {
    return pushes.map((p) => p.text);
}

function range(from, to, prefix = 'm') {
    return Array.from({ length: to - from + 1 }, (_, i) => `${prefix}${from + i}`);
}

test('recovery after the connection is cut: every missed message once, in order', async () => {
    const h = await startHerald({ args: HISTORY });
    cleanups.push(() => h.stop());
    const proxy = await startProxy(h.port);
    cleanups.push(() => proxy.close());
    const c = newClient(proxy.port);
    const { sub, got, resyncs } = await subscribed(c, 'hist:a');
    for (const m of range(1, 3)) await h.publish('hist:a', m);
    await got.waitFor(3);

    // The network fails: the connection is reset, and reconnects are refused for a while.
    proxy.block();
    const lost = nextEvent(c, 'disconnected', { filter: (d) => d.wasConnected });
    proxy.cut();
    const d = await lost;
    assert.equal(d.disconnect, null);
    assert.equal(d.reconnect, true);
    assert.equal(sub.state, 'subscribing');
    for (const m of range(4, 8)) await h.publish('hist:a', m);

    // The network comes back while messages keep being published: the resubscribe recovers
    // 4..8 and the live ones follow, with no gap and no duplicate whenever they land.
    const resubscribed = nextEvent(sub, 'subscribed');
    proxy.unblock();
    for (const m of range(9, 30)) await h.publish('hist:a', m);
    const ok = await resubscribed;
    assert.equal(ok.recovered, true);
    assert.equal(ok.isResubscribe, true);
    assert.equal(ok.offset, 3);
    await got.waitFor(30);
    await h.publish('hist:a', 'last');
    await got.waitFor(31);
    assert.deepEqual(texts(got.pushes), [...range(1, 30), 'last']);
    assert.deepEqual(
        got.pushes.map((p) => p.offset),
        range(1, 31, '').map(Number),
    );
    assert.deepEqual(resyncs, []);
    assert.equal(c.stats.connects, 2);
    assert.equal(sub.offset, 31);
});

test('since: a new client recovers from a position an earlier one saved', async () => {
    const h = await startHerald({ args: HISTORY });
    cleanups.push(() => h.stop());
    const first = newClient(h.port);
    const a = await subscribed(first, 'hist:s');
    for (const m of range(1, 2)) await h.publish('hist:s', m);
    await a.got.waitFor(2);
    const saved = a.sub.position; // e.g. kept in localStorage across a page reload
    first.close();
    for (const m of range(3, 5)) await h.publish('hist:s', m);

    const second = newClient(h.port);
    second.connect();
    const sub = second.subscribe('hist:s', { since: saved });
    const got = collectPushes(sub);
    const ok = await sub.ready;
    assert.equal(ok.recovered, true);
    assert.equal(ok.offset, 2);
    await got.waitFor(3);
    assert.deepEqual(texts(got.pushes), range(3, 5));
});

test('resync when herald restarts: the channel has a new epoch, the client is told', async () => {
    const h1 = await startHerald({ args: [...HISTORY, '--drain', '0'] });
    const c = newClient(h1.port);
    const { sub, got, resyncs } = await subscribed(c, 'hist:r');
    for (const m of range(1, 2)) await h1.publish('hist:r', m);
    await got.waitFor(2);
    const epoch1 = sub.epoch;

    const resynced = nextEvent(sub, 'resync');
    const resubscribed = nextEvent(sub, 'subscribed');
    assert.equal((await h1.stop()).code, 0);
    const h2 = await startHerald({ port: h1.port, args: HISTORY });
    cleanups.push(() => h2.stop());
    const r = await resynced;
    assert.equal(r.channel, 'hist:r');
    assert.equal(r.reason, 'epoch_changed');
    assert.deepEqual(r.from, { offset: 2, epoch: epoch1 });
    assert.notEqual(r.to.epoch, epoch1);
    assert.equal(r.to.offset, 0);
    const ok = await resubscribed;
    assert.equal(ok.recovered, false);
    assert.equal(ok.epoch, r.to.epoch);

    // The new epoch's numbering starts again at 1, and its messages are delivered.
    await h2.publish('hist:r', 'new1');
    await got.waitFor(3);
    assert.deepEqual(texts(got.pushes), ['m1', 'm2', 'new1']);
    assert.equal(got.pushes[2].offset, 1);
    assert.equal(got.pushes[2].epoch, r.to.epoch);
    assert.equal(resyncs.length, 1);
});

test('token expiry: Disconnect{TOKEN_EXPIRED}, a fresh token from the token function, recovery', async () => {
    const h = await startHerald({ args: HISTORY });
    cleanups.push(() => h.stop());
    let minted = 0;
    const c = new Client({
        transport: new TcpTransport({ port: h.port }),
        // The first token expires within two seconds; the ones after it last.
        token: async () => token('tess', 'hist:*', ++minted === 1 ? '2s' : '1h'),
        backoff: { minMs: 50, maxMs: 400 },
    });
    clients.push(c);
    const { sub, got, resyncs } = await subscribed(c, 'hist:t');
    await h.publish('hist:t', 'm1');
    await got.waitFor(1);
    const d = await nextEvent(c, 'disconnected');
    assert.equal(d.disconnect.code, DisconnectCode.TOKEN_EXPIRED);
    assert.equal(d.reconnect, true);
    await h.publish('hist:t', 'm2'); // missed: the client waits out the advised delay
    const ok = await nextEvent(sub, 'subscribed');
    assert.equal(ok.recovered, true);
    await got.waitFor(2);
    assert.deepEqual(texts(got.pushes), ['m1', 'm2']);
    assert.equal(minted, 2);
    assert.deepEqual(resyncs, []);
});

test('drain: Disconnect{SHUTDOWN} with reconnect advice, then recovery on a restarted node', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    const args = [
        '--engine',
        'redis',
        '--redis',
        `127.0.0.1:${redis.port}`,
        ...HISTORY,
        '--drain',
        '1s',
    ];
    const h1 = await startHerald({ args: [...args, '--node-id', 'n1'] });
    const c = newClient(h1.port);
    const { sub, got, resyncs } = await subscribed(c, 'hist:d');
    for (const m of range(1, 3)) await h1.publish('hist:d', m);
    await got.waitFor(3);

    const told = nextEvent(c, 'disconnected');
    const stopped = h1.stop('SIGTERM');
    const d = await told;
    const toldAt = performance.now();
    assert.equal(d.wasConnected, true);
    assert.equal(d.disconnect.code, DisconnectCode.SHUTDOWN);
    assert.equal(d.disconnect.codeName, 'SHUTDOWN');
    assert.equal(d.disconnect.reconnect, true);
    assert.ok(d.disconnect.delayMs > 0);
    // The advice: reconnect_delay_ms plus a jitter of up to as much.
    assert.equal(d.reconnect, true);
    assert.ok(
        d.delayMs >= d.disconnect.delayMs && d.delayMs <= 2 * d.disconnect.delayMs,
        `delay ${d.delayMs}`,
    );
    const nextTry = nextEvent(c, 'disconnected'); // the first attempt fails: no node yet
    assert.equal((await stopped).code, 0);

    // While no node runs, a backend publishes straight into Redis (README, "Publishing
    // through Redis"): the channel's next offsets, kept in its history.
    for (const m of range(4, 6)) {
        redis.cli(
            'FCALL',
            'herald_publish',
            '2',
            'herald:m:hist:d',
            'herald:h:hist:d',
            'hist:d',
            m,
            '1000',
            '300000',
        );
    }
    const failed = await nextTry;
    assert.equal(failed.wasConnected, false);
    assert.ok(performance.now() - toldAt >= d.delayMs - 20, 'the client waited as advised');

    const resubscribed = nextEvent(sub, 'subscribed');
    const h2 = await startHerald({ port: h1.port, args: [...args, '--node-id', 'n2'] });
    cleanups.push(() => h2.stop());
    const ok = await resubscribed;
    assert.equal(ok.recovered, true);
    await got.waitFor(6);
    await h2.publish('hist:d', 'm7');
    await got.waitFor(7);
    assert.deepEqual(texts(got.pushes), range(1, 7));
    assert.deepEqual(
        got.pushes.map((p) => p.offset),
        [1, 2, 3, 4, 5, 6, 7],
    );
    assert.deepEqual(resyncs, []);
});
