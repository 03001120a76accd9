// Clients that send and never read, over WebSocket, against a real herald: a ping flood's pongs
// and a request flood's answers pile up in herald's output for the connection until its hard
// cap (twice --output-high-water), and then the connection is closed as a slow consumer
// (herald_closed_total{reason="slow_consumer"}), so herald's memory stays bounded.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHerald, token } from './lib/herald.js';
import { encode } from './lib/frames.js';
import { frameOf, RawWs, wsFrame } from './lib/clients.js';

const HIGH_WATER = 256 * 1024;
const MIB = 1024 * 1024;

let h;
before(async () => {
    h = await startHerald({ args: ['--output-high-water', String(HIGH_WATER)] });
});
after(async () => {
    assert.deepEqual(await h.stop(), { code: 0, signal: null });
});

/**
 * Connects, authenticates, stops reading, then writes frame (many to a write) until herald
 * closes the connection: at most 20 s and 400 MB. Resolves with the bytes written.
 */
async function flood(frame) {
    const c = new RawWs(h.wsPort);
    assert.equal((await c.connect()).status, 101);
    await c.send(1, 'connect', { token: token('flood') });
    assert.equal((await c.inbox.next(frameOf('connectOk'))).body, 'connectOk');
    c.sock.pause(); // reads nothing from here on
    let isClosed = false;
    c.ended.then(() => (isClosed = true));
    const batch = Buffer.concat(Array(256).fill(frame));
    const t0 = Date.now();
    let sent = 0;
    while (!isClosed && Date.now() - t0 < 20000 && sent < 400 * MIB) {
        sent += batch.length;
        if (!c.sock.write(batch))
            await Promise.race([new Promise((r) => c.sock.once('drain', r)), c.ended]);
    }
    assert.ok(isClosed, `herald still took the flood after ${sent} bytes in ${Date.now() - t0} ms`);
    return sent;
}

test('a ping flood from a client that never reads: closed as a slow consumer, memory bounded', async () => {
    const m0 = await h.metrics();
    const rss0 = h.rss();
    const ping = wsFrame({ opcode: 9, payload: Buffer.alloc(125, 0x70) });
    for (let round = 0; round < 3; round++) {
        const sent = await flood(ping);
        // The pongs herald could queue: its hard cap plus the sockets' buffers, not the flood.
        assert.ok(sent < 64 * MIB, `${sent} bytes of pings taken before the close`);
    }
    const m1 = await h.metrics();
    const closes = (m) => m.get('herald_closed_total{reason="slow_consumer"}') ?? 0;
    assert.equal(closes(m1) - closes(m0), 3);
    const pings = (m) => m.get('herald_ws_pings_total{listener="ws"}') ?? 0;
    assert.ok(pings(m1) - pings(m0) > (3 * (2 * HIGH_WATER)) / 127, 'the pings were answered');
    const grown = h.rss() - rss0;
    assert.ok(grown < 16 * MIB, `herald's RSS grew by ${grown} bytes over three floods`);
});

test('a request flood (Ping frames) that never reads the Pongs: the same', async () => {
    const before = await h.metric('herald_closed_total', { reason: 'slow_consumer' });
    const rss0 = h.rss();
    await flood(wsFrame({ payload: encode(7, 'ping', {}) }));
    assert.equal(await h.metric('herald_closed_total', { reason: 'slow_consumer' }), before + 1);
    const grown = h.rss() - rss0;
    assert.ok(grown < 16 * MIB, `herald's RSS grew by ${grown} bytes`);
});
