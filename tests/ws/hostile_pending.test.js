// Hostile clients against the handshakes: connections that open and then send nothing, or only
// a part of what the handshake needs (a TLS record header and a few bytes of a ClientHello; the
// first line of an upgrade request), as many as an attacker can hold. Each costs herald what
// its handshake state holds until the connect timeout, so each case opens N of them against a
// herald with one IO loop and a 10-minute connect timeout and asserts herald's resident memory
// per connection (VmRSS growth over the second half, after a probe session on the same
// listener has been served: its accept follows theirs through the one accept path, so by then
// the loop has taken every one of them into its handshake).
//
// Before the fixes: 42.7 KB per silent TLS connection (the SSL and its first SSL_accept were
// made at accept), 46.7 KB for one that sent a part of a record, 51.7 KB per silent wss
// connection, 8.7 KB per silent WebSocket connection (the 8 KiB upgrade buffer came with the
// connection). Then the clients half-close and wait for herald to close: each is counted as a
// handshake that failed because the peer left.
//
// N stays under 1,000 so that a default descriptor limit (1,024) is enough.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { startHerald, token, sample } from './lib/herald.js';
import { streamClient, wsClient } from './lib/clients.js';
import { makePki } from './lib/tls.js';

const N = 800;
let pki;
let trust;
let server;

before(() => {
    pki = makePki();
    server = pki.issue('hostile', '7007');
    trust = { ca: readFileSync(pki.ca), servername: 'localhost' };
});
after(() => pki.cleanup());

/** n sockets to port, each having sent bytes (if any) once it resolves. */
async function openMany(port, n, bytes) {
    const socks = [];
    for (let i = 0; i < n; i++) {
        socks.push(
            await new Promise((resolve, reject) => {
                const s = net.connect({ host: '127.0.0.1', port }, () => {
                    if (bytes) s.write(bytes, () => resolve(s));
                    else resolve(s);
                });
                s.once('error', reject);
            }),
        );
    }
    return socks;
}

/** A whole session on the listener (handshakes, Connect, ConnectOk), then closed. */
async function probe(h, kind) {
    const isWs = kind === 'ws' || kind === 'wss';
    const opts = kind === 'tls' || kind === 'wss' ? { tls: trust } : {};
    const c = isWs ? await wsClient(h.wsPort, opts) : await streamClient(h.port, opts);
    assert.equal((await c.request(1, 'connect', { token: token('probe') })).body, 'connectOk');
    if (isWs) {
        c.ws.close();
        await c.closed;
    } else {
        c.close();
        await c.ended;
    }
}

/** Half-closes every socket and resolves once herald has closed each. */
function leaveAll(socks) {
    return Promise.all(
        socks.map(
            (s) =>
                new Promise((resolve) => {
                    s.on('error', () => {});
                    s.on('close', resolve);
                    s.resume();
                    s.end();
                }),
        ),
    );
}

/**
 * N connections of kind that send bytes (or nothing): herald's bytes per connection, checked
 * against maxBytes; then they leave and each is counted as closed.
 */
async function pendingCost(kind, bytes, maxBytes) {
    const isTls = kind === 'tls' || kind === 'wss';
    const listener = kind === 'ws' || kind === 'wss' ? 'ws' : 'tcp';
    const h = await startHerald({
        tls: isTls ? server : null,
        ioThreads: 1,
        args: ['--connect-timeout', '10m'],
    });
    try {
        const port = listener === 'ws' ? h.wsPort : h.port;
        await probe(h, kind); // the first session's one-off costs (contexts, tables)
        const first = await openMany(port, N / 2, bytes);
        await probe(h, kind);
        const rss1 = h.rss();
        const second = await openMany(port, N / 2, bytes);
        await probe(h, kind);
        const rss2 = h.rss();
        const m = await h.metrics();
        assert.equal(sample(m, 'herald_transport_handshaking', { listener }), N);
        const each = (rss2 - rss1) / (N / 2);
        console.log(`${kind} ${bytes ? `${bytes.length} bytes sent` : 'silent'}: ${each} B each`);
        assert.ok(each < maxBytes, `${kind}: ${each.toFixed(0)} B per pending connection`);
        const fail = ['herald_transport_handshake_failures_total', { listener, reason: 'closed' }];
        const closed0 = sample(m, ...fail);
        await leaveAll([...first, ...second]);
        assert.equal(await h.metric(...fail), closed0 + N);
        assert.equal(await h.metric('herald_transport_handshaking', { listener }), 0);
    } finally {
        await h.stop('SIGINT');
    }
}

// A TLS record header (handshake, TLS 1.0 on the record, 512 bytes) and the first bytes of a
// ClientHello: a record herald must wait for the rest of.
const partialRecord = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03]);

describe('connections that never finish their handshake cost little until the deadline', () => {
    test('tls: silent', () => pendingCost('tls', null, 4096));
    test('tls: a record header and a few bytes', () => pendingCost('tls', partialRecord, 4096));
    test('wss: silent', () => pendingCost('wss', null, 4096));
    test('ws: silent', () => pendingCost('ws', null, 3072));
    test('ws: the first line of the upgrade request', () =>
        pendingCost('ws', Buffer.from('GET /connection HTTP/1.1\r\nHost: 127.0.0.1\r\n'), 3072));
});
