// TLS on herald's TCP and WebSocket listeners, against a real herald with a certificate from a
// test CA made here: `openssl s_client` with TLS 1.2 and 1.3, herald sessions over node:tls
// (varint frames) and over wss (Node's `ws`), and bad input with its cost bounded and counted on
// /metrics: plain text on the TLS port, a stalled handshake, a TLS 1.2 renegotiation, an
// untrusted certificate, a TLS version herald does not speak.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { readFileSync } from 'node:fs';
import { startHerald, token, sample } from './lib/herald.js';
import { delimited, encode } from './lib/frames.js';
import { frameOf, RawWs, streamClient, upgradeRequest, wsClient, wsFrame } from './lib/clients.js';
import { makePki, peerCert, sClient } from './lib/tls.js';

let pki;
let h;
let trust; // node:tls options that trust the test CA
const hsFail = (listener, reason) => [
    'herald_transport_handshake_failures_total',
    { listener, reason },
];
const handshakes = (listener) => ['herald_transport_handshakes_total', { listener }];

before(async () => {
    pki = makePki();
    const server = pki.issue('herald-server', '1001');
    trust = { ca: readFileSync(pki.ca), servername: 'localhost' };
    h = await startHerald({ tls: server, args: ['--connect-timeout', '3s'] });
    assert.match(h.log(), /ev=listening .*tls=on/);
});
after(async () => {
    assert.deepEqual(await h.stop(), { code: 0, signal: null });
    pki.cleanup();
});

describe('openssl s_client', () => {
    for (const version of ['-tls1_3', '-tls1_2']) {
        for (const listener of ['tcp', 'ws']) {
            test(`${version} on the ${listener} listener: verified, the version asked for`, async () => {
                // On the ws listener the handshake is done after the upgrade, which s_client
                // does not send: it leaves after TLS, counted as closed.
                const counter = listener === 'tcp' ? handshakes('tcp') : hsFail('ws', 'closed');
                const before = await h.metric(...counter);
                const port = listener === 'tcp' ? h.port : h.wsPort;
                const r = await sClient(port, [
                    version,
                    '-CAfile',
                    pki.ca,
                    '-verify_return_error',
                    '-servername',
                    'localhost',
                ]);
                assert.match(r.out, /Verify return code: 0 \(ok\)/, r.out);
                const want = version === '-tls1_3' ? 'TLSv1.3' : 'TLSv1.2';
                // The handshake's summary line (the SSL-Session block comes with TLS 1.3's
                // tickets, which s_client may leave before it reads).
                assert.match(
                    r.out,
                    new RegExp(`New, ${want.replace('.', '\\.')}, Cipher is`),
                    r.out,
                );
                assert.deepEqual(peerCert(r.out), {
                    serial: '1001',
                    subject: 'CN = herald-server',
                });
                assert.equal(r.code, 0);
                assert.equal(await h.metric(...counter), before + 1);
            });
        }
    }

    test('TLS 1.1 is refused (1.2 is the least), counted as a TLS error', async () => {
        const before = await h.metric(...hsFail('tcp', 'tls_error'));
        const r = await sClient(h.port, [
            '-tls1_1',
            '-cipher',
            'DEFAULT@SECLEVEL=0',
            '-CAfile',
            pki.ca,
        ]);
        assert.notEqual(r.code, 0, r.out);
        assert.match(r.out, /alert protocol version/);
        assert.equal(await h.metric(...hsFail('tcp', 'tls_error')), before + 1);
    });

    test('a client that does not trust the certificate fails: verify error', async () => {
        const before = await h.metric(...hsFail('tcp', 'tls_error'));
        const r = await sClient(h.port, [
            '-CAfile',
            pki.other,
            '-verify_return_error',
            '-servername',
            'localhost',
        ]);
        assert.notEqual(r.code, 0);
        assert.match(
            r.out,
            /verify error:num=(20|21):unable to (get local issuer|verify the first) certificate/,
        );
        assert.equal(await h.metric(...hsFail('tcp', 'tls_error')), before + 1); // its alert
        await assert.rejects(
            streamClient(h.port, { tls: { ca: readFileSync(pki.other), servername: 'localhost' } }),
            (e) => /UNABLE_TO_(GET_ISSUER_CERT_LOCALLY|VERIFY_LEAF_SIGNATURE)/.test(e.code),
        );
    });

    test('TLS 1.2 renegotiation (s_client R): refused, the connection closed, counted', async () => {
        const before = await h.metric('herald_tls_renegotiations_total', { listener: 'tcp' });
        const r = await sClient(h.port, ['-tls1_2', '-CAfile', pki.ca], {
            // R asks for a renegotiation; stdin stays open, so s_client ends only when it or
            // herald gives up on the connection.
            input: (child) => child.stdin.write('R\n'),
        });
        assert.match(r.out, /RENEGOTIATING/);
        assert.match(r.out, /no renegotiation/);
        assert.equal(r.signal, null, 'the connection ended by itself');
        assert.equal(
            await h.metric('herald_tls_renegotiations_total', { listener: 'tcp' }),
            before + 1,
        );
    });

    for (const cmd of ['k', 'K']) {
        test(`TLS 1.3 key update mid-session (s_client ${cmd}): the session goes on`, async () => {
            // A herald session typed into s_client: Connect, then the key update command on a
            // line of its own (K also asks herald to update its keys), then a Ping.
            const connect = delimited(encode(1, 'connect', { token: token('ku-user-8') }));
            const ping = delimited(encode(7, 'ping', {}));
            const pong = delimited(encode(7, 'pong', {})).toString('latin1');
            const r = await sClient(h.port, ['-tls1_3', '-CAfile', pki.ca], {
                input: (child) => {
                    child.stdin.write(connect);
                    let out = '';
                    let step = 0;
                    const onData = (d) => {
                        out += d;
                        if (step === 0 && out.includes('ku-user-8')) {
                            step = 1; // ConnectOk (it names the user)
                            child.stdin.write(`${cmd}\n`);
                        } else if (step === 1 && out.includes('KEYUPDATE')) {
                            step = 2;
                            child.stdin.write(ping);
                        } else if (step === 2 && out.includes(pong)) {
                            step = 3;
                            child.stdin.end();
                        }
                    };
                    // Frames come on stdout, s_client's KEYUPDATE on stderr.
                    child.stdout.on('data', onData);
                    child.stderr.on('data', onData);
                },
            });
            assert.match(r.out, /KEYUPDATE/);
            assert.ok(r.out.includes(pong), 'the Ping after the key update is answered');
            assert.equal(r.code, 0);
        });
    }

    test('renegotiation on the wss listener too', async () => {
        const before = await h.metric('herald_tls_renegotiations_total', { listener: 'ws' });
        const r = await sClient(h.wsPort, ['-tls1_2', '-CAfile', pki.ca], {
            input: (child) => child.stdin.write('R\n'),
        });
        assert.match(r.out, /no renegotiation/);
        assert.equal(
            await h.metric('herald_tls_renegotiations_total', { listener: 'ws' }),
            before + 1,
        );
    });
});

test('/metrics: herald_tls_* for both TLS listeners, herald_ws_* for the ws one only', async () => {
    const keys = [...(await h.metrics()).keys()];
    const has = (prefix) => keys.some((k) => k.startsWith(prefix));
    for (const listener of ['tcp', 'ws']) {
        assert.ok(has(`herald_tls_renegotiations_total{listener="${listener}"}`), listener);
        assert.ok(has(`herald_tls_ktls_connections_total{listener="${listener}"}`), listener);
        assert.ok(has(`herald_transport_handshaking{listener="${listener}"}`), listener);
    }
    assert.ok(has('herald_ws_pings_total{listener="ws"}'));
    assert.equal(has('herald_ws_pings_total{listener="tcp"}'), false);
    const tcpFail = 'herald_transport_handshake_failures_total{listener="tcp"';
    assert.equal(has(`${tcpFail},reason="origin"}`), false);
    assert.ok(has(`${tcpFail},reason="plaintext"}`));
});

describe('herald sessions over TLS', () => {
    test('varint frames over node:tls and a wss client: connect, subscribe, publish, push', async () => {
        const t = await streamClient(h.port, { tls: trust });
        assert.equal(t.sock.getPeerCertificate().serialNumber, '1001');
        const ok = await t.request(1, 'connect', { token: token('tls-user') });
        assert.equal(ok.body, 'connectOk');
        assert.equal(ok.connectOk.userId, 'tls-user');
        const w = await wsClient(h.wsPort, { tls: trust });
        assert.equal(w.upgrade.headers['sec-websocket-protocol'], 'herald.v1');
        assert.equal(
            (await w.request(1, 'connect', { token: token('wss-user') })).body,
            'connectOk',
        );
        for (const c of [t, w])
            assert.equal(
                (await c.request(2, 'subscribe', { channel: 'secure' })).body,
                'subscribeOk',
            );
        // Large enough for several TLS records (16 KiB each) and a 64-bit WebSocket length.
        const payload = Buffer.alloc(70 * 1024, 0x42);
        await h.publish('secure', payload);
        const pub = await w.request(3, 'publish', {
            channel: 'secure',
            payload: Buffer.from('from wss'),
        });
        assert.equal(pub.body, 'publishOk');
        for (const c of [t, w]) {
            const a = await c.inbox.next(frameOf('push'));
            assert.deepEqual(Buffer.from(a.push.payload), payload);
            const b = await c.inbox.next(frameOf('push'));
            assert.equal(Buffer.from(b.push.payload).toString(), 'from wss');
        }
        assert.equal((await t.request(4, 'ping', {})).body, 'pong');
        t.close();
        w.ws.close(1000);
        assert.equal((await w.closed).code, 1000);
    });

    test('many frames in one TLS write, answered in order', async () => {
        const t = await streamClient(h.port, { tls: trust });
        const frames = [delimited(encode(1, 'connect', { token: token('pipelined') }))];
        for (let i = 0; i < 50; i++) frames.push(delimited(encode(2 + i, 'ping', {})));
        t.sock.write(Buffer.concat(frames));
        assert.equal((await t.inbox.next()).body, 'connectOk');
        for (let i = 0; i < 50; i++) assert.equal((await t.inbox.next()).id, 2 + i);
        t.close();
    });

    test("wss: frames in the upgrade request's TLS write, then 150 KB of Publishes in one", async () => {
        const c = new RawWs(h.wsPort, { tls: trust });
        const extra = Buffer.concat([
            wsFrame({ payload: encode(1, 'connect', { token: token('burst') }) }),
            wsFrame({ payload: encode(2, 'subscribe', { channel: 'burst' }) }),
        ]);
        assert.equal((await c.connect({ request: upgradeRequest(), extra })).status, 101);
        assert.equal((await c.inbox.next()).body, 'connectOk');
        assert.equal((await c.inbox.next()).body, 'subscribeOk');
        // Many TLS records, more than the session's input holds at once (64 KiB + a little):
        // parsing stops for room and goes on as the session takes the frames.
        const frames = [];
        for (let i = 0; i < 150; i++) {
            const payload = Buffer.alloc(1000, i);
            frames.push(
                wsFrame({ payload: encode(10 + i, 'publish', { channel: 'burst', payload }) }),
            );
        }
        await c.write(Buffer.concat(frames));
        const oks = new Set();
        const pushes = [];
        while (oks.size < 150 || pushes.length < 150) {
            const f = await c.inbox.next();
            if (f.body === 'publishOk') oks.add(f.id);
            else if (f.body === 'push') pushes.push(f.push.offset);
            else assert.fail(`unexpected ${f.body}: ${JSON.stringify(f)}`);
        }
        assert.equal(oks.size, 150);
        assert.deepEqual(
            pushes,
            Array.from({ length: 150 }, (_, i) => i + 1),
        );
        c.close();
    });

    test('wss: 100 pings in one TLS record are answered in one record', async () => {
        // A TCP relay between the client and herald reads the TLS record headers herald sends.
        // Before the pongs went with the iteration's flush, each was its own SSL_write: 100
        // records (and 100 system calls) for one read.
        let records = 0;
        let pending = Buffer.alloc(0);
        const relay = net.createServer((down) => {
            const up = net.connect({ host: '127.0.0.1', port: h.wsPort });
            down.pipe(up);
            up.on('data', (chunk) => {
                pending = Buffer.concat([pending, chunk]);
                while (pending.length >= 5 && pending.length >= 5 + pending.readUInt16BE(3)) {
                    records++;
                    pending = pending.subarray(5 + pending.readUInt16BE(3));
                }
                down.write(chunk);
            });
            for (const [a, b] of [
                [up, down],
                [down, up],
            ]) {
                a.on('error', () => b.destroy());
                a.on('close', () => b.destroy());
            }
        });
        await new Promise((resolve) => relay.listen(0, '127.0.0.1', resolve));
        try {
            const c = new RawWs(relay.address().port, { tls: trust });
            assert.equal((await c.connect()).status, 101);
            const burst = [];
            for (let i = 0; i < 100; i++)
                burst.push(wsFrame({ opcode: 9, payload: Buffer.from(`p${i}`) }));
            const before = records;
            await c.write(Buffer.concat(burst)); // 700 bytes: one record
            for (let i = 0; i < 100; i++)
                assert.equal((await c.inbox.next((x) => x.pong)).pong.toString(), `p${i}`);
            assert.equal(records - before, 1);
            c.close();
        } finally {
            relay.close();
        }
    });

    test('SIGTERM drain over wss: Disconnect SHUTDOWN, close 4005, close_notify', async () => {
        const d = await startHerald({ tls: pki.issue('drain', '3003'), args: ['--drain', '0'] });
        const w = await wsClient(d.wsPort, { tls: trust });
        assert.equal((await w.request(1, 'connect', { token: token('d') })).body, 'connectOk');
        const exited = d.stop();
        assert.equal((await w.inbox.next(frameOf('disconnect'))).disconnect.code, 5);
        assert.equal((await w.closed).code, 4005);
        assert.deepEqual(await exited, { code: 0, signal: null });
    });
});

describe('bad input: bounded, counted', () => {
    /**
     * Connects to port, writes bytes (then a FIN with isEnd), resolves with what came back once
     * herald closed.
     */
    function plain(port, bytes, isEnd = false) {
        return new Promise((resolve) => {
            const s = net.connect({ host: '127.0.0.1', port }, () =>
                isEnd ? s.end(bytes) : s.write(bytes),
            );
            let got = Buffer.alloc(0);
            s.on('data', (d) => (got = Buffer.concat([got, d])));
            s.on('error', () => {});
            s.on('close', () => resolve(got));
        });
    }

    test('plain text on the TLS ports: closed at once, counted as plaintext', async () => {
        const m0 = await h.metrics();
        const t0 = Date.now();
        await plain(h.port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n');
        await plain(h.wsPort, 'GET /connection HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n');
        // A herald Connect frame in the clear: a client that forgot TLS.
        await plain(h.port, delimited(encode(1, 'connect', { token: token('clear') })));
        assert.ok(Date.now() - t0 < 2500, 'closed before the handshake deadline (3 s)');
        const m1 = await h.metrics();
        const d = (l, r) => sample(m1, ...hsFail(l, r)) - sample(m0, ...hsFail(l, r));
        assert.equal(d('tcp', 'plaintext') + d('tcp', 'tls_error'), 2);
        assert.equal(d('tcp', 'plaintext') >= 1, true, 'the HTTP request is told apart');
        assert.equal(d('ws', 'plaintext'), 1);
        assert.equal(sample(m1, 'herald_transport_handshaking', { listener: 'tcp' }), 0);
    });

    test('a client that leaves during the TLS handshake: counted as closed, not as an error', async () => {
        const m0 = await h.metrics();
        const hello = Buffer.from([0x16, 0x03, 0x01, 0x00, 0x40, 0x01]); // part of a ClientHello
        const t0 = Date.now();
        await Promise.all([
            plain(h.port, '', true),
            plain(h.port, hello, true),
            plain(h.wsPort, hello, true),
        ]);
        assert.ok(Date.now() - t0 < 2500, 'closed at the FIN, not at the handshake deadline (3 s)');
        const m1 = await h.metrics();
        const d = (l, r) => sample(m1, ...hsFail(l, r)) - sample(m0, ...hsFail(l, r));
        assert.equal(d('tcp', 'closed'), 2);
        assert.equal(d('ws', 'closed'), 1);
        assert.equal(d('tcp', 'tls_error') + d('ws', 'tls_error'), 0);
    });

    test('a session that ends without close_notify is a peer close, not an I/O error', async () => {
        const m0 = await h.metrics();
        for (const how of ['fin', 'close_notify']) {
            // TLS over a socket of our own, so that a FIN can go without a close_notify.
            const raw = net.connect({ host: '127.0.0.1', port: h.port });
            const rawClosed = new Promise((r) => raw.on('close', r));
            const t = await streamClient(h.port, { tls: { ...trust, socket: raw } });
            assert.equal((await t.request(1, 'connect', { token: token(how) })).body, 'connectOk');
            if (how === 'fin') raw.end();
            else t.sock.end();
            // herald closes after it read the end, and counts the close before its FIN.
            await rawClosed;
        }
        const m1 = await h.metrics();
        const d = (r) =>
            sample(m1, 'herald_closed_total', { reason: r }) -
            sample(m0, 'herald_closed_total', { reason: r });
        assert.equal(d('peer'), 2);
        assert.equal(d('io_error'), 0);
    });

    test('a stalled TLS handshake is closed at the connect timeout, counted as timeout', async () => {
        const m0 = await h.metrics();
        const t0 = Date.now();
        // Nothing at all, and the first bytes of a ClientHello record.
        const partial = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01]);
        await Promise.all([plain(h.port, ''), plain(h.port, partial), plain(h.wsPort, partial)]);
        const elapsed = Date.now() - t0;
        assert.ok(elapsed >= 2900 && elapsed < 15000, `closed after ${elapsed} ms, timeout 3 s`);
        const m1 = await h.metrics();
        const d = (l) => sample(m1, ...hsFail(l, 'timeout')) - sample(m0, ...hsFail(l, 'timeout'));
        assert.equal(d('tcp'), 2);
        assert.equal(d('ws'), 1);
    });

    test('a TLS client that stalls after the handshake, before its upgrade request: timeout', async () => {
        const before = await h.metric(...hsFail('ws', 'timeout'));
        const s = tls.connect({ host: '127.0.0.1', port: h.wsPort, ...trust });
        await new Promise((r) => s.once('secureConnect', r));
        await new Promise((r) => s.on('close', r));
        assert.equal(await h.metric(...hsFail('ws', 'timeout')), before + 1);
    });
});

describe('output over TLS', () => {
    test('a subscriber that stops reading while small and large Pushes queue up gets every one', async () => {
        // Pushes of 900 bytes are written many to a TLS record (netlib copies small pieces
        // into one write); a 100 KB one is not. A write that meets a full socket leaves OpenSSL
        // holding a record, and the retry must offer at least its bytes whatever else was
        // queued meanwhile: before gw_tls took care of that, the connection hung within a few
        // rounds ("bad length"). No drops: the high-water mark is above everything queued.
        const d = await startHerald({
            tls: pki.issue('output', '4004'),
            ioThreads: 1,
            args: ['--output-high-water', '256MiB', '--publish-rate', '0', '--max-frame', '1MiB'],
        });
        try {
            const sub = await streamClient(d.port, { tls: trust });
            assert.equal(
                (await sub.request(1, 'connect', { token: token('sub') })).body,
                'connectOk',
            );
            assert.equal((await sub.request(2, 'subscribe', { channel: 'c' })).body, 'subscribeOk');
            const pub = await streamClient(d.port, { tls: trust });
            assert.equal(
                (await pub.request(1, 'connect', { token: token('pub') })).body,
                'connectOk',
            );
            // Count Pushes as they come rather than keeping them.
            let got = 0;
            let last = 0;
            let waiter = null;
            sub.inbox.push = (f) => {
                if (f.body !== 'push') return;
                assert.equal(f.push.offset, last + 1, 'no gap, no duplicate');
                last = f.push.offset;
                got++;
                if (waiter && got >= waiter.n) waiter.resolve();
            };
            const small = Buffer.alloc(900, 1);
            const big = Buffer.alloc(100000, 2);
            let id = 10;
            let expected = 0;
            for (let round = 0; round < 8; round++) {
                sub.sock.pause();
                for (let k = 0; k < 60; k++) {
                    for (let i = 0; i < 40; i++)
                        pub.send(id++, 'publish', { channel: 'c', payload: small });
                    assert.equal((await pub.inbox.next((x) => x.id === id - 1)).body, 'publishOk');
                    pub.send(id++, 'publish', { channel: 'c', payload: big });
                    assert.equal((await pub.inbox.next((x) => x.id === id - 1)).body, 'publishOk');
                    expected += 41;
                }
                sub.sock.resume();
                await new Promise((resolve, reject) => {
                    const timer = setTimeout(
                        () => reject(new Error(`round ${round}: ${got} of ${expected} Pushes`)),
                        10000,
                    );
                    waiter = { n: expected, resolve: () => (clearTimeout(timer), resolve()) };
                    if (got >= expected) waiter.resolve();
                });
                pub.inbox.items.length = 0; // the PublishOks, read
            }
            assert.equal(await d.metric('herald_closed_total', { reason: 'io_error' }), 0);
            sub.close();
            pub.close();
        } finally {
            assert.deepEqual(await d.stop(), { code: 0, signal: null });
        }
    });
});
