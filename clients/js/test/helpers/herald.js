// Real processes for the integration tests: herald (and redis-server for the Redis engine) on
// loopback ports they pick, stopped by PID; a TCP proxy that can cut or stall connections;
// and a few ways to wait for an event instead of sleeping.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..', '..', '..');

export const SECRET = 'js-client-test-secret-0123456789';
export const API_KEY = 'js-client-test-admin-key';

/** The herald binary: $HERALD_BIN (ctest sets it), else the release build in this checkout. */
export function heraldBin() {
    const bin = process.env.HERALD_BIN || join(repoRoot, 'build', 'release', 'gateway', 'herald');
    if (!existsSync(bin)) {
        throw new Error(
            `no herald at ${bin}: build it (cmake --build build/release) or set HERALD_BIN`,
        );
    }
    return bin;
}

/** Mints a client token with `herald token`. */
export function token(user, channels, ttl = '1h') {
    return execFileSync(
        heraldBin(),
        ['token', '--secret', SECRET, '--user', user, '--channels', channels, '--ttl', ttl],
        {
            encoding: 'utf8',
            stdio: ['ignore', 'pipe', 'ignore'],
        },
    ).trim();
}

/** Resolves with the first match of re in the process's stderr; rejects if it exits first. */
function waitForLine(child, re, what, timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
        let text = '';
        const timer = setTimeout(
            () => done(new Error(`${what}: no ${re} within ${timeoutMs} ms:\n${text}`)),
            timeoutMs,
        );
        const onData = (chunk) => {
            text += chunk;
            const m = text.match(re);
            if (m) done(null, m);
        };
        const onExit = (code) => done(new Error(`${what} exited (${code}) before ${re}:\n${text}`));
        const done = (err, m) => {
            clearTimeout(timer);
            child.stderr.off('data', onData);
            child.off('exit', onExit);
            if (err) reject(err);
            else resolve(m);
        };
        child.stderr.setEncoding('utf8');
        child.stderr.on('data', onData);
        child.on('exit', onExit);
    });
}

/**
 * Starts herald on 127.0.0.1 (port 0: any free port) with the test secret and API key, plus
 * extra flags. Resolves with {pid, port, adminPort, log(), publish(), stop(), exited}.
 */
export async function startHerald({ port = 0, args = [] } = {}) {
    const child = spawn(
        heraldBin(),
        [
            '--listen',
            `127.0.0.1:${port}`,
            '--admin',
            '127.0.0.1:0',
            '--secret',
            SECRET,
            '--api-key',
            API_KEY,
            '--io-threads',
            '2',
            '--worker-threads',
            '1',
            ...args,
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let log = '';
    const exited = new Promise((resolve) =>
        child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    const m = await waitForLine(child, /ev=listening port=(\d+) admin_port=(\d+)/, 'herald');
    child.stderr.on('data', (c) => (log += c));
    const h = {
        pid: child.pid,
        port: Number(m[1]),
        adminPort: Number(m[2]),
        exited,
        log: () => log,
        /** POST /api/publish?channel=C; resolves with {offset, epoch}. */
        async publish(channel, payload) {
            const res = await fetch(
                `http://127.0.0.1:${h.adminPort}/api/publish?channel=${encodeURIComponent(channel)}`,
                {
                    method: 'POST',
                    headers: { 'X-Api-Key': API_KEY },
                    body: payload,
                },
            );
            const body = await res.json();
            if (!res.ok)
                throw new Error(`publish ${channel}: ${res.status} ${JSON.stringify(body)}`);
            return body;
        },
        /** Sends signal (SIGTERM: drain) and resolves when herald has exited. */
        async stop(signal = 'SIGTERM') {
            if (child.exitCode === null && child.signalCode === null)
                process.kill(child.pid, signal);
            return exited;
        },
    };
    return h;
}

/** Starts redis-server on a free port, without persistence. Resolves with {port, stop()}. */
export async function startRedis() {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'herald-js-redis-'));
    const child = spawn(
        'redis-server',
        [
            '--port',
            String(port),
            '--bind',
            '127.0.0.1',
            '--save',
            '',
            '--appendonly',
            'no',
            '--dir',
            dir,
        ],
        {
            stdio: ['ignore', 'pipe', 'pipe'],
        },
    );
    const exited = new Promise((resolve) => child.on('exit', resolve));
    await new Promise((resolve, reject) => {
        let text = '';
        child.stdout.setEncoding('utf8');
        child.stdout.on('data', (c) => {
            text += c;
            if (/Ready to accept connections/.test(text)) resolve();
        });
        child.on('exit', (code) => reject(new Error(`redis-server exited (${code}):\n${text}`)));
    });
    return {
        port,
        /** Runs one command with redis-cli and returns its output. */
        cli(...args) {
            return execFileSync('redis-cli', ['-p', String(port), ...args], {
                encoding: 'utf8',
            }).trim();
        },
        async stop() {
            if (child.exitCode === null) process.kill(child.pid, 'SIGTERM');
            await exited;
            rmSync(dir, { recursive: true, force: true });
        },
    };
}

/** A free TCP port on 127.0.0.1 (bound and released; fine for a server started next). */
export function freePort() {
    return new Promise((resolve, reject) => {
        const s = net.createServer();
        s.on('error', reject);
        s.listen(0, '127.0.0.1', () => {
            const { port } = s.address();
            s.close(() => resolve(port));
        });
    });
}

/**
 * A TCP proxy in front of herald, to break connections the way a network does. cut() resets
 * every proxied connection; block() makes it refuse new ones (accepted, then reset) until
 * unblock(); stall() stops forwarding in both directions without closing anything.
 */
export async function startProxy(targetPort) {
    const pairs = new Set();
    let isBlocked = false;
    let isStalled = false;
    const server = net.createServer((client) => {
        if (isBlocked) {
            client.resetAndDestroy();
            return;
        }
        const upstream = net.connect({ host: '127.0.0.1', port: targetPort });
        const pair = { client, upstream };
        pairs.add(pair);
        const forward = (from, to) =>
            from.on('data', (chunk) => {
                if (!isStalled) to.write(chunk);
            });
        forward(client, upstream);
        forward(upstream, client);
        const end = () => {
            pairs.delete(pair);
            client.destroy();
            upstream.destroy();
        };
        for (const s of [client, upstream]) {
            s.on('error', end);
            s.on('close', end);
        }
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
        port: server.address().port,
        get connections() {
            return pairs.size;
        },
        cut() {
            for (const { client, upstream } of pairs) {
                client.resetAndDestroy();
                upstream.destroy();
            }
            pairs.clear();
        },
        block() {
            isBlocked = true;
        },
        unblock() {
            isBlocked = false;
        },
        stall() {
            isStalled = true;
        },
        resume() {
            isStalled = false;
        },
        close() {
            this.cut();
            return new Promise((resolve) => server.close(resolve));
        },
    };
}

/** Resolves with the arguments of the next emit of event on emitter (rejects on timeout). */
export function nextEvent(emitter, event, { timeoutMs = 10000, filter = () => true } = {}) {
    return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
            off();
            reject(new Error(`no ${event} event within ${timeoutMs} ms`));
        }, timeoutMs);
        const off = emitter.on(event, (...args) => {
            if (!filter(...args)) return;
            clearTimeout(timer);
            off();
            resolve(args.length > 1 ? args : args[0]);
        });
    });
}

/** Collects the pushes of a subscription (or client) as they arrive; waitFor(n) awaits n. */
export function collectPushes(emitter) {
    const pushes = [];
    const waiters = [];
    emitter.on('push', (p) => {
        pushes.push(p);
        for (const w of [...waiters]) {
            if (pushes.length >= w.n) {
                waiters.splice(waiters.indexOf(w), 1);
                clearTimeout(w.timer);
                w.resolve(pushes);
            }
        }
    });
    return {
        pushes,
        waitFor(n, timeoutMs = 10000) {
            if (pushes.length >= n) return Promise.resolve(pushes);
            return new Promise((resolve, reject) => {
                const w = { n, resolve };
                w.timer = setTimeout(() => {
                    waiters.splice(waiters.indexOf(w), 1);
                    reject(
                        new Error(`got ${pushes.length} pushes, not ${n}, within ${timeoutMs} ms`),
                    );
                }, timeoutMs);
                waiters.push(w);
            });
        },
    };
}

/** Awaits cond() to become true, checking after each event on emitter (no polling loop). */
export function until(emitter, events, cond, timeoutMs = 10000) {
    if (cond()) return Promise.resolve();
    return new Promise((resolve, reject) => {
        const offs = [];
        const timer = setTimeout(() => {
            offs.forEach((o) => o());
            reject(new Error(`condition not met within ${timeoutMs} ms`));
        }, timeoutMs);
        for (const e of events) {
            offs.push(
                emitter.on(e, () => {
                    if (!cond()) return;
                    clearTimeout(timer);
                    offs.forEach((o) => o());
                    resolve();
                }),
            );
        }
    });
}
