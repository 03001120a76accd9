// The WebSocket opening handshake (RFC 6455 section 4.2) against a real herald: the 101 and its
// headers as Node's `ws` package and a raw socket see them, each refusal with its HTTP status,
// the Origin allow-list, the header cap and the handshake deadline, each counted on /metrics
// (herald_transport_handshake_failures_total{listener="ws",reason}).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHerald, sample } from './lib/herald.js';
import { acceptFor, RawWs, upgradeRequest, wsClient } from './lib/clients.js';

const fail = (reason) => ['herald_transport_handshake_failures_total', { listener: 'ws', reason }];

/** Sends a hand-made upgrade request; resolves with the answer once herald closed the socket. */
async function refused(h, request) {
    const c = new RawWs(h.wsPort);
    const head = await c.connect({ request });
    await c.ended; // herald closes after the answer: the failure is counted by then
    return head;
}

describe('handshake, default origins (none)', () => {
    let h;
    before(async () => {
        h = await startHerald({ args: ['--connect-timeout', '1s'] });
    });
    after(async () => {
        assert.deepEqual(await h.stop(), { code: 0, signal: null });
    });

    test('/metrics: herald_ws_* for the ws listener only, no herald_tls_* without TLS', async () => {
        const keys = [...(await h.metrics()).keys()];
        const has = (prefix) => keys.some((k) => k.startsWith(prefix));
        assert.ok(has('herald_ws_pings_total{listener="ws"}'));
        assert.ok(has('herald_ws_protocol_errors_total{listener="ws"'));
        assert.ok(has('herald_transport_handshake_failures_total{listener="ws",reason="origin"}'));
        assert.equal(has('herald_ws_pings_total{listener="tcp"}'), false);
        assert.equal(has('herald_ws_protocol_errors_total{listener="tcp"'), false);
        assert.equal(has('herald_tls_'), false);
        // The plain TCP listener has no handshake; the plain ws listener no TLS handshake.
        assert.equal(has('herald_transport_handshaking{listener="tcp"}'), false);
        assert.equal(has('herald_transport_handshake_failures_total{listener="tcp"'), false);
        const wsFail = 'herald_transport_handshake_failures_total{listener="ws"';
        assert.equal(has(`${wsFail},reason="tls`), false);
    });

    test('ws: 101, Sec-WebSocket-Accept, herald.v1 echoed', async () => {
        const before = await h.metric('herald_transport_handshakes_total', { listener: 'ws' });
        const c = await wsClient(h.wsPort);
        assert.equal(c.upgrade.statusCode, 101);
        assert.equal(c.upgrade.headers['sec-websocket-protocol'], 'herald.v1');
        assert.equal(c.ws.protocol, 'herald.v1');
        c.ws.close(1000);
        assert.equal((await c.closed).code, 1000);
        const now = await h.metric('herald_transport_handshakes_total', { listener: 'ws' });
        assert.equal(now, before + 1);
    });

    test('raw: the accept key is SHA-1 of key + GUID; herald.v1 picked from a list', async () => {
        const req = upgradeRequest({
            headers: { 'Sec-WebSocket-Protocol': 'chat, herald.v1, mqtt' },
        });
        const c = new RawWs(h.wsPort);
        const head = await c.connect({ request: req });
        assert.equal(head.status, 101);
        assert.equal(head.headers.upgrade.toLowerCase(), 'websocket');
        assert.equal(head.headers.connection.toLowerCase(), 'upgrade');
        assert.equal(head.headers['sec-websocket-accept'], acceptFor(req.key));
        assert.equal(head.headers['sec-websocket-protocol'], 'herald.v1');
        c.close();
    });

    test('no subprotocol offered: 101 without Sec-WebSocket-Protocol', async () => {
        const c = await wsClient(h.wsPort, { protocols: null });
        assert.equal(c.upgrade.statusCode, 101);
        assert.equal(c.upgrade.headers['sec-websocket-protocol'], undefined);
        c.ws.terminate();
    });

    test('subprotocols offered without herald.v1: 400, counted', async () => {
        const before = await h.metric(...fail('subprotocol'));
        await assert.rejects(wsClient(h.wsPort, { protocols: ['chat', 'mqtt'] }), (e) => {
            assert.equal(e.statusCode, 400);
            return true;
        });
        const head = await refused(
            h,
            upgradeRequest({ headers: { 'Sec-WebSocket-Protocol': 'herald.v2' } }),
        );
        assert.equal(head.status, 400);
        assert.equal(head.headers['sec-websocket-protocol'], 'herald.v1'); // what it would take
        const now = await h.metric(...fail('subprotocol'));
        assert.equal(now, before + 2);
    });

    test('wrong path: 404, counted; a query string after /connection is fine', async () => {
        const before = await h.metric(...fail('not_found'));
        await assert.rejects(wsClient(h.wsPort, { path: '/' }), (e) => e.statusCode === 404);
        const head = await refused(h, upgradeRequest({ path: '/connection/x' }));
        assert.equal(head.status, 404);
        assert.equal(await h.metric(...fail('not_found')), before + 2);
        const c = await wsClient(h.wsPort, { path: '/connection?v=1' });
        assert.equal(c.upgrade.statusCode, 101);
        c.ws.terminate();
    });

    test('bad version: 426 naming version 13, counted', async () => {
        const before = await h.metric(...fail('version'));
        const head = await refused(
            h,
            upgradeRequest({ headers: { 'Sec-WebSocket-Version': '8' } }),
        );
        assert.equal(head.status, 426);
        assert.equal(head.headers['sec-websocket-version'], '13');
        const none = await refused(
            h,
            upgradeRequest({ headers: { 'Sec-WebSocket-Version': null } }),
        );
        assert.equal(none.status, 426);
        assert.equal(await h.metric(...fail('version')), before + 2);
    });

    test('not an upgrade (no key, POST, no Upgrade header): 400, counted', async () => {
        const before = await h.metric(...fail('bad_request'));
        const cases = [
            upgradeRequest({ headers: { 'Sec-WebSocket-Key': null } }),
            upgradeRequest({ headers: { 'Sec-WebSocket-Key': 'c2hvcnQ=' } }),
            upgradeRequest({ headers: { Upgrade: null } }),
            { text: upgradeRequest().text.replace(/^GET/, 'POST') },
            { text: 'not http at all\r\n\r\n' },
        ];
        for (const req of cases) assert.equal((await refused(h, req)).status, 400, req.text);
        assert.equal(await h.metric(...fail('bad_request')), before + cases.length);
    });

    test('an Origin when none is allowed: 403, counted; no Origin: accepted', async () => {
        const before = await h.metric(...fail('origin'));
        await assert.rejects(
            wsClient(h.wsPort, { headers: { Origin: 'https://app.example' } }),
            (e) => e.statusCode === 403,
        );
        assert.equal(await h.metric(...fail('origin')), before + 1);
    });

    test('a header over 8 KiB: 431, counted; 7 KiB is fine', async () => {
        const before = await h.metric(...fail('too_large'));
        const big = upgradeRequest({ headers: { 'X-Padding': 'p'.repeat(8200) } });
        const c = new RawWs(h.wsPort);
        const head = await c.connect({ request: big });
        assert.equal(head.status, 431);
        await c.ended;
        assert.equal(await h.metric(...fail('too_large')), before + 1);
        const ok = await wsClient(h.wsPort, { headers: { 'X-Padding': 'p'.repeat(7 * 1024) } });
        assert.equal(ok.upgrade.statusCode, 101);
        ok.ws.terminate();
    });

    test('a stalled handshake is closed at the connect timeout, counted as timeout', async () => {
        const m0 = await h.metrics();
        const t0 = Date.now();
        // Half a request, then nothing; and a connection that sends nothing at all.
        const half = new RawWs(h.wsPort);
        half.connect({
            request: { text: 'GET /connection HTTP/1.1\r\nHost: x\r\n' },
            expectHead: false,
        }).catch(() => {});
        const mute = new RawWs(h.wsPort);
        mute.connect({ request: { text: '' }, expectHead: false }).catch(() => {});
        await Promise.all([half.ended, mute.ended]);
        const elapsed = Date.now() - t0;
        assert.ok(elapsed >= 900 && elapsed < 5000, `closed after ${elapsed} ms, timeout 1 s`);
        assert.equal(half.bytesIn + mute.bytesIn, 0, 'nothing is answered to a stalled request');
        const m1 = await h.metrics();
        assert.equal(sample(m1, ...fail('timeout')) - sample(m0, ...fail('timeout')), 2);
        assert.equal(sample(m1, 'herald_transport_handshaking', { listener: 'ws' }), 0);
    });
});

describe('handshake, allowed_origins', () => {
    test('"*": any Origin is accepted', async () => {
        const h = await startHerald({ args: ['--ws-allowed-origins', '*'] });
        try {
            for (const origin of ['https://a.example', 'http://localhost:3000', 'null']) {
                const c = await wsClient(h.wsPort, { headers: { Origin: origin } });
                assert.equal(c.upgrade.statusCode, 101, origin);
                c.ws.terminate();
            }
            assert.equal(await h.metric(...fail('origin')), 0);
        } finally {
            assert.deepEqual(await h.stop(), { code: 0, signal: null });
        }
    });

    test('a list: its origins are accepted (case-insensitive), others get 403', async () => {
        const h = await startHerald({
            args: ['--ws-allowed-origins', 'https://a.example, https://b.example:8443'],
        });
        try {
            for (const origin of [
                'https://a.example',
                'https://b.example:8443',
                'HTTPS://A.EXAMPLE',
            ]) {
                const c = await wsClient(h.wsPort, { headers: { Origin: origin } });
                assert.equal(c.upgrade.statusCode, 101, origin);
                c.ws.terminate();
            }
            const refusedOrigins = [
                'https://c.example',
                'https://b.example', // the port is part of the origin
                'http://a.example', // and so is the scheme
                'https://a.example.evil',
                '',
            ];
            for (const origin of refusedOrigins) {
                const head = await refused(h, upgradeRequest({ headers: { Origin: origin } }));
                assert.equal(head.status, 403, `Origin: ${origin}`);
            }
            assert.equal(await h.metric(...fail('origin')), refusedOrigins.length);
            const c = await wsClient(h.wsPort); // no Origin: not a browser
            c.ws.terminate();
        } finally {
            assert.deepEqual(await h.stop(), { code: 0, signal: null });
        }
    });
});
