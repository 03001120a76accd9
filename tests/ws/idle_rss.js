// idle_rss.js: herald's resident memory per idle connection over each transport: tcp, ws, tls
// and wss. Not a test: it prints figures (STYLE.md section 9).
//
// For each transport it starts a fresh herald (one IO loop, TLS with a P-256 certificate from
// a test CA, long idle and connect timeouts), opens one connection and reads VmRSS, then opens
// --conns more, each authenticated with its own HS256 token (signed here with node:crypto) and
// subscribed to its own channel and to one shared channel, as bench/bench_gw_idle.c does over
// TCP. With every SubscribeOk in, it reads VmRSS again: the growth divided by --conns is the
// figure, and the growth over the second half alone (what herald's fixed costs, and the
// handshakes' passing memory, do not blur). Connections are opened 100 at a time; --conns is
// rounded to a multiple of 200.
//
// Then the same for connections that send nothing at all (a handshake never begun): herald's
// cost for each until its connect timeout.
//
// Usage: node idle_rss.js [--conns N] [--transports tcp,ws,tls,wss] [--herald PATH]
import crypto from 'node:crypto';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { startHerald, SECRET } from './lib/herald.js';
import { RawWs, streamClient } from './lib/clients.js';
import { makePki } from './lib/tls.js';

const args = process.argv.slice(2);
const opt = (name, def) => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 ? args[i + 1] : def;
};
const conns = Math.max(200, Math.round(Number(opt('conns', 2000)) / 200) * 200);
const transports = opt('transports', 'tcp,ws,tls,wss').split(',');
const BATCH = 100; /* connections opened at once */
if (opt('herald')) process.env.HERALD_BIN = opt('herald');

const b64url = (b) => Buffer.from(b).toString('base64url');

/** An HS256 JWT for user, as herald verifies it (PROTOCOL.md section 8). */
function sign(user, channels) {
    const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
    const exp = Math.floor(Date.now() / 1000) + 3600;
    const body = b64url(JSON.stringify({ sub: user, exp, channels }));
    const mac = crypto.createHmac('sha256', SECRET).update(`${head}.${body}`).digest();
    return `${head}.${body}.${b64url(mac)}`;
}

/** One idle client: connected, authenticated, subscribed to user:<i> and shared. */
async function open(kind, h, trust, i) {
    const user = `u${i}`;
    const t = sign(user, [`user:${i}`, 'shared']);
    let c;
    if (kind === 'ws' || kind === 'wss') {
        c = new RawWs(h.wsPort, kind === 'wss' ? { tls: trust } : {});
        const head = await c.connect();
        if (head.status !== 101) throw new Error(`upgrade: ${head.status}`);
    } else {
        c = await streamClient(h.port, kind === 'tls' ? { tls: trust } : {});
    }
    await c.send(1, 'connect', { token: t });
    await c.send(2, 'subscribe', { channel: `user:${i}` });
    await c.send(3, 'subscribe', { channel: 'shared' });
    for (const body of ['connectOk', 'subscribeOk', 'subscribeOk']) {
        const f = await c.inbox.next(() => true, 60000);
        if (f.body !== body) throw new Error(`${kind} ${i}: ${f.body}, not ${body}`);
    }
    c.inbox.items.length = 0;
    return c;
}

const pki = makePki();
const trust = { ca: readFileSync(pki.ca), servername: 'localhost' };
const server = pki.issue('idle', '5005');
console.log(`conns=${conns} per transport, herald --io-threads 1`);
for (const kind of transports) {
    const isTls = kind === 'tls' || kind === 'wss';
    const h = await startHerald({
        tls: isTls ? server : null,
        ioThreads: 1,
        args: ['--idle-timeout', '1h', '--connect-timeout', '10m'],
    });
    const held = [await open(kind, h, trust, 1000000)];
    const before = h.rss();
    let half = 0;
    for (let i = 0; i < conns; i += BATCH) {
        if (i === conns / 2) half = h.rss();
        const batch = [];
        for (let k = i; k < Math.min(conns, i + BATCH); k++) batch.push(open(kind, h, trust, k));
        held.push(...(await Promise.all(batch)));
    }
    const after = h.rss();
    const m = await h.metrics();
    const n = [...m]
        .filter(([k]) => k.startsWith('herald_connections{'))
        .reduce((a, [, v]) => a + v, 0);
    console.log(
        `${kind.padEnd(4)} rss before ${(before / 1048576).toFixed(1)} MiB, after ` +
            `${(after / 1048576).toFixed(1)} MiB, connections ${n}: ` +
            `${((after - before) / conns).toFixed(0)} B per idle connection; the second half ` +
            `${((after - half) / (conns / 2)).toFixed(0)} B each`,
    );
    for (const c of held) c.close ? c.close() : c.sock.destroy();
    await h.stop('SIGINT');
}

// Connections that opened and sent nothing (a handshake not begun, or a stalled one): what
// each costs herald until the connect timeout closes it.
console.log(`pending: ${conns} connections that send nothing, herald --connect-timeout 10m`);
for (const kind of transports) {
    const isTls = kind === 'tls' || kind === 'wss';
    const h = await startHerald({
        tls: isTls ? server : null,
        ioThreads: 1,
        args: ['--connect-timeout', '10m'],
    });
    const port = kind === 'ws' || kind === 'wss' ? h.wsPort : h.port;
    const before = h.rss();
    const socks = [];
    for (let i = 0; i < conns; i++) {
        socks.push(
            await new Promise((resolve, reject) => {
                const s = net.connect({ host: '127.0.0.1', port }, () => resolve(s));
                s.on('error', reject);
            }),
        );
    }
    await h.metrics(); // herald accepted them all by the time it answers (one accept loop)
    const after = h.rss();
    console.log(
        `${kind.padEnd(4)} ${((after - before) / conns).toFixed(0)} B per pending connection`,
    );
    for (const s of socks) s.destroy();
    await h.stop('SIGINT');
}
pki.cleanup();
