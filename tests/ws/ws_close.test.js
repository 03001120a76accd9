// WebSocket close codes against a real herald: a client's close frame answered with its code, a
// Disconnect followed by the close frame 4000 + its code (and its reason), and each protocol
// error RFC 6455 names closed with its code and counted on /metrics
// (herald_ws_protocol_errors_total{listener="ws",error}).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHerald, token } from './lib/herald.js';
import { DisconnectCode, encode } from './lib/frames.js';
import { closePayload, frameOf, RawWs, wsClient, wsFrame } from './lib/clients.js';

const MAX_FRAME = 1024;
const wsErr = (error) => ['herald_ws_protocol_errors_total', { listener: 'ws', error }];

let h;
before(async () => {
    h = await startHerald({ args: ['--max-frame', String(MAX_FRAME)] });
});
after(async () => {
    assert.deepEqual(await h.stop(), { code: 0, signal: null });
});

/** A raw client past ConnectOk. */
async function rawSession(user = 'raw') {
    const c = new RawWs(h.wsPort);
    assert.equal((await c.connect()).status, 101);
    await c.send(1, 'connect', { token: token(user) });
    assert.equal((await c.inbox.next(frameOf('connectOk'))).body, 'connectOk');
    return c;
}

/** Sends bytes, then expects a close frame with code and the socket closed; returns the close. */
async function expectClose(c, bytes, code) {
    await c.write(bytes);
    const close = await c.inbox.next((x) => x.close);
    assert.equal(close.close.code, code, JSON.stringify(close));
    await c.ended;
    return close.close;
}

describe('the client closes', () => {
    test('a close frame is answered with the same code', async () => {
        for (const code of [1000, 1001, 3000, 4321]) {
            const c = await wsClient(h.wsPort);
            c.ws.close(code, 'bye');
            assert.equal((await c.closed).code, code);
        }
    });

    test('a close frame without a code is answered with 1000; one of one byte is a 1002', async () => {
        const c = await rawSession();
        await expectClose(c, wsFrame({ opcode: 8 }), 1000);
        const d = await rawSession();
        await expectClose(d, wsFrame({ opcode: 8, payload: Buffer.from([3]) }), 1002);
    });
});

describe('a Disconnect is followed by close 4000 + its code', () => {
    test('bad token: Disconnect AUTH_FAILED, close 4006 with its reason', async () => {
        const c = new RawWs(h.wsPort);
        await c.connect();
        await c.send(1, 'connect', {
            token: token('x', '*', '1h', 'another-secret-0123456789abcdef'),
        });
        const disc = await c.inbox.next(frameOf('disconnect'));
        assert.equal(disc.disconnect.code, DisconnectCode.AUTH_FAILED);
        const close = await c.inbox.next((x) => x.close);
        assert.equal(close.close.code, 4006);
        assert.equal(close.close.reason, disc.disconnect.reason);
        await c.ended;
    });

    test('a frame before Connect: PROTOCOL_ERROR, close 4007', async () => {
        const c = await wsClient(h.wsPort);
        c.send(1, 'ping', {});
        assert.equal(
            (await c.inbox.next(frameOf('disconnect'))).disconnect.code,
            DisconnectCode.PROTOCOL_ERROR,
        );
        assert.equal((await c.closed).code, 4007);
    });
});

describe('protocol errors close with RFC 6455 codes, counted', () => {
    test('a message over --max-frame: 1009, decided on the header', async () => {
        const before = await h.metric(...wsErr('too_big'));
        const c = await rawSession();
        await expectClose(c, wsFrame({ payload: Buffer.alloc(MAX_FRAME + 1) }), 1009);
        // A header announcing 1 TiB and one byte of it: closed at once, nothing buffered.
        // (libwslay reports a frame with its first payload byte, so a header alone waits.)
        const d = await rawSession();
        const header = wsFrame({ length: 2 ** 40 }).subarray(0, 14);
        const close = await expectClose(d, Buffer.concat([header, Buffer.from([0])]), 1009);
        assert.match(close.reason, /limit/);
        assert.equal(await h.metric(...wsErr('too_big')), before + 2);
    });

    test('a message of exactly --max-frame is taken', async () => {
        const c = await rawSession();
        const empty = encode(5, 'publish', { channel: 'edge', payload: Buffer.alloc(0) });
        // Grow the payload until the Frame is exactly MAX_FRAME bytes.
        let n = MAX_FRAME - empty.length - 8;
        let bytes = encode(5, 'publish', { channel: 'edge', payload: Buffer.alloc(n) });
        while (bytes.length < MAX_FRAME)
            bytes = encode(5, 'publish', { channel: 'edge', payload: Buffer.alloc(++n) });
        assert.equal(bytes.length, MAX_FRAME);
        await c.write(wsFrame({ payload: bytes }));
        assert.equal((await c.inbox.next((x) => x.id === 5)).body, 'publishOk');
        c.close();
    });

    test('a fragmented message over --max-frame: 1009 at the fragment that passes it', async () => {
        const before = await h.metric(...wsErr('too_big'));
        const c = await rawSession();
        const piece = Buffer.alloc(400);
        await c.write(wsFrame({ fin: false, opcode: 2, payload: piece }));
        await c.write(wsFrame({ fin: false, opcode: 0, payload: piece }));
        await c.write(
            wsFrame({ fin: false, opcode: 0, payload: piece.subarray(0, MAX_FRAME - 800) }),
        );
        await expectClose(c, wsFrame({ fin: true, opcode: 0, payload: Buffer.alloc(1) }), 1009);
        assert.equal(await h.metric(...wsErr('too_big')), before + 1);
    });

    test('an unmasked client frame: 1002', async () => {
        const before = await h.metric(...wsErr('protocol_error'));
        const c = await rawSession();
        await expectClose(c, wsFrame({ mask: false, payload: encode(2, 'ping', {}) }), 1002);
        assert.equal(await h.metric(...wsErr('protocol_error')), before + 1);
    });

    test('a text message: 1003', async () => {
        const before = await h.metric(...wsErr('text_message'));
        const c = await wsClient(h.wsPort);
        c.ws.send('{"connect":{}}');
        assert.equal((await c.closed).code, 1003);
        const d = await rawSession();
        await expectClose(d, wsFrame({ opcode: 1, payload: Buffer.from('hi') }), 1003);
        assert.equal(await h.metric(...wsErr('text_message')), before + 2);
    });

    test('reserved bits, reserved opcodes, out-of-place frames: 1002', async () => {
        const before = await h.metric(...wsErr('protocol_error'));
        const cases = {
            rsv1: wsFrame({ rsv: 4, payload: encode(2, 'ping', {}) }),
            rsv3: wsFrame({ rsv: 1, payload: encode(2, 'ping', {}) }),
            'opcode 3': wsFrame({ opcode: 3, payload: Buffer.from('x') }),
            'opcode 0xb': wsFrame({ opcode: 0xb }),
            'continuation first': wsFrame({ opcode: 0, payload: Buffer.from('x') }),
            'binary inside a fragmented message': Buffer.concat([
                wsFrame({ fin: false, opcode: 2, payload: Buffer.from('ab') }),
                wsFrame({ opcode: 2, payload: Buffer.from('cd') }),
            ]),
            'fragmented ping': wsFrame({ fin: false, opcode: 9, payload: Buffer.from('x') }),
            'ping over 125 bytes': wsFrame({ opcode: 9, payload: Buffer.alloc(126) }),
        };
        for (const [what, bytes] of Object.entries(cases)) {
            const c = await rawSession();
            const close = await expectClose(c, bytes, 1002).catch((e) => {
                throw new Error(`${what}: ${e.message}`);
            });
            assert.ok(close.code === 1002, what);
        }
        assert.equal(
            await h.metric(...wsErr('protocol_error')),
            before + Object.keys(cases).length,
        );
    });

    test('after a close frame, nothing more is read', async () => {
        const c = await rawSession();
        await c.write(
            Buffer.concat([
                wsFrame({ opcode: 8, payload: closePayload(1000) }),
                wsFrame({ payload: encode(7, 'ping', {}) }),
            ]),
        );
        assert.equal((await c.inbox.next((x) => x.close)).close.code, 1000);
        await c.ended;
        assert.equal(c.inbox.items.filter(frameOf('pong')).length, 0);
    });
});

describe('session ends', () => {
    test('idle timeout: Disconnect IDLE_TIMEOUT, close 4002', async () => {
        const d = await startHerald({ args: ['--ping-interval', '1s', '--idle-timeout', '2s'] });
        try {
            const c = await wsClient(d.wsPort);
            assert.equal(
                (await c.request(1, 'connect', { token: token('idle') })).body,
                'connectOk',
            );
            // WebSocket pings are the transport's, not herald's heartbeats: they keep nothing alive.
            c.ws.ping();
            const disc = await c.inbox.next(frameOf('disconnect'));
            assert.equal(disc.disconnect.code, DisconnectCode.IDLE_TIMEOUT);
            assert.equal((await c.closed).code, 4000 + DisconnectCode.IDLE_TIMEOUT);
        } finally {
            assert.deepEqual(await d.stop(), { code: 0, signal: null });
        }
    });

    test('token expiry: Disconnect TOKEN_EXPIRED, close 4009', async () => {
        const c = await wsClient(h.wsPort);
        assert.equal(
            (await c.request(1, 'connect', { token: token('exp', '*', '2s') })).body,
            'connectOk',
        );
        const disc = await c.inbox.next(frameOf('disconnect'), 5000);
        assert.equal(disc.disconnect.code, DisconnectCode.TOKEN_EXPIRED);
        assert.equal((await c.closed).code, 4000 + DisconnectCode.TOKEN_EXPIRED);
    });
});

describe('drain', () => {
    test('SIGTERM with --drain 0 (a stop at once): Disconnect SHUTDOWN, then close 4005', async () => {
        const d = await startHerald({ args: ['--drain', '0'] });
        const c = await wsClient(d.wsPort);
        assert.equal((await c.request(1, 'connect', { token: token('now') })).body, 'connectOk');
        const exited = d.stop('SIGTERM');
        const disc = await c.inbox.next(frameOf('disconnect'));
        assert.equal(disc.disconnect.code, DisconnectCode.SHUTDOWN);
        const closed = await c.closed;
        assert.equal(closed.code, 4000 + DisconnectCode.SHUTDOWN);
        assert.equal(closed.reason, disc.disconnect.reason);
        assert.deepEqual(await exited, { code: 0, signal: null });
    });

    test('SIGTERM: Disconnect SHUTDOWN, then close 4005 with its reason', async () => {
        const d = await startHerald({ args: ['--drain', '1s'] });
        const clients = [];
        for (let i = 0; i < 3; i++) {
            const c = await wsClient(d.wsPort);
            assert.equal(
                (await c.request(1, 'connect', { token: token(`d${i}`) })).body,
                'connectOk',
            );
            clients.push(c);
        }
        const exited = d.stop('SIGTERM');
        for (const c of clients) {
            const disc = await c.inbox.next(frameOf('disconnect'));
            assert.equal(disc.disconnect.code, DisconnectCode.SHUTDOWN);
            assert.equal(disc.disconnect.reconnect, true);
            const closed = await c.closed;
            assert.equal(closed.code, 4000 + DisconnectCode.SHUTDOWN);
            assert.equal(closed.reason, disc.disconnect.reason);
        }
        assert.deepEqual(await exited, { code: 0, signal: null });
    });
});

describe('reload', () => {
    test('SIGHUP raising max_frame: open connections go on at their limit, new ones get the new', async () => {
        const dir = mkdtempSync(join(tmpdir(), 'herald-ws-reload-'));
        const conf = join(dir, 'herald.conf');
        writeFileSync(conf, '[limits]\nmax_frame = 1KiB\n');
        const d = await startHerald({ args: ['--config', conf] });
        try {
            const old = [];
            for (let i = 0; i < 2; i++) {
                const c = await wsClient(d.wsPort);
                const ok = await c.request(1, 'connect', { token: token(`old${i}`) });
                assert.equal(ok.connectOk.maxFrameBytes, 1024);
                old.push(c);
            }
            writeFileSync(conf, '[limits]\nmax_frame = 64KiB\n');
            const from = d.log().length;
            d.signal('SIGHUP');
            await d.waitLog(/ev=reload_done/, { from });
            // Before the fix no connection open at the reload read another message.
            assert.equal((await old[0].request(2, 'ping', {})).body, 'pong');
            const small = Buffer.alloc(900);
            const ok = await old[0].request(3, 'publish', { channel: 'r', payload: small });
            assert.equal(ok.body, 'publishOk');
            // What it was told still holds for it: a 2 KB message is over its limit.
            old[1].send(2, 'publish', { channel: 'r', payload: Buffer.alloc(2000) });
            assert.equal((await old[1].closed).code, 1009);
            const c = await wsClient(d.wsPort);
            const fresh = await c.request(1, 'connect', { token: token('new') });
            assert.equal(fresh.connectOk.maxFrameBytes, 65536);
            const big = await c.request(2, 'publish', {
                channel: 'r',
                payload: Buffer.alloc(30000),
            });
            assert.equal(big.body, 'publishOk');
            old[0].ws.close();
            c.ws.close();
            await Promise.all([old[0].closed, c.closed]);
        } finally {
            assert.deepEqual(await d.stop(), { code: 0, signal: null });
            rmSync(dir, { recursive: true, force: true });
        }
    });
});
