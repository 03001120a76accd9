// A real herald for the WebSocket and TLS tests: started on loopback ports it picks (port 0;
// its ev=listening line names them), stopped by PID, its log kept and awaitable, its /metrics
// read and parsed. Tokens come from `herald token`, so they are exactly what herald verifies.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..', '..');

export const SECRET = 'ws-tls-test-secret-0123456789abcdef';
export const API_KEY = 'ws-tls-test-admin-key';

/** The herald binary: $HERALD_BIN (ctest sets it), else the release build of this checkout. */
export function heraldBin() {
    const bin = process.env.HERALD_BIN || join(repoRoot, 'build', 'release', 'gateway', 'herald');
    if (!existsSync(bin))
        throw new Error(
            `no herald at ${bin}: build it (cmake --build build/release) or set HERALD_BIN`,
        );
    return bin;
}

/** A client token for user on channels (comma-separated patterns), minted by `herald token`. */
export function token(user, channels = '*', ttl = '1h', secret = SECRET) {
    return execFileSync(
        heraldBin(),
        ['token', '--secret', secret, '--user', user, '--channels', channels, '--ttl', ttl],
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] },
    ).trim();
}

/**
 * Starts herald: the TCP listener, a WebSocket listener (ws: false for none) and the admin
 * port on 127.0.0.1, two IO loops, the test secret and API key, then args. tls: {cert, key}
 * turns TLS on for both listeners. Resolves with an object: pid, port, wsPort, adminPort,
 * log(), waitLog(re), metrics(), metric(name, labels), rss(), publish(), signal(), stop().
 */
export async function startHerald({ args = [], ws = true, tls = null, ioThreads = 2 } = {}) {
    const argv = [
        '--listen',
        '127.0.0.1:0',
        '--admin',
        '127.0.0.1:0',
        '--secret',
        SECRET,
        '--api-key',
        API_KEY,
        '--io-threads',
        String(ioThreads),
        '--worker-threads',
        '1',
    ];
    if (ws) argv.push('--ws-listen', '127.0.0.1:0');
    if (tls) argv.push('--tls-cert', tls.cert, '--tls-key', tls.key);
    argv.push(...args);
    // HERALD_* variables are herald's settings: the tests' own (HERALD_BIN) stays out.
    const env = { ...process.env };
    delete env.HERALD_BIN;
    const child = spawn(heraldBin(), argv, { stdio: ['ignore', 'ignore', 'pipe'], env });
    let log = '';
    const watchers = new Set();
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
        log += chunk;
        for (const w of [...watchers]) w();
    });
    const exited = new Promise((res) => child.on('exit', (code, signal) => res({ code, signal })));

    /** Resolves with the first match of re in the log from offset on (rejects on timeout/exit). */
    function waitLog(re, { from = 0, timeoutMs = 10000 } = {}) {
        return new Promise((res, rej) => {
            const check = () => {
                const m = log.slice(from).match(re);
                if (m) {
                    done();
                    res(m);
                }
            };
            const timer = setTimeout(() => {
                done();
                rej(new Error(`herald: no ${re} in its log within ${timeoutMs} ms:\n${log}`));
            }, timeoutMs);
            const onExit = () => {
                done();
                rej(new Error(`herald exited before ${re}:\n${log}`));
            };
            const done = () => {
                clearTimeout(timer);
                watchers.delete(check);
                child.off('exit', onExit);
            };
            watchers.add(check);
            child.on('exit', onExit);
            check();
        });
    }

    const m = await waitLog(/ev=listening port=(\d+) admin_port=(\d+)(?: ws_port=(\d+))?/);
    const h = {
        pid: child.pid,
        port: Number(m[1]),
        wsPort: m[3] ? Number(m[3]) : 0,
        adminPort: Number(m[2]),
        exited,
        log: () => log,
        waitLog,
        /** /metrics as a Map from 'name{labels}' (labels as herald prints them) to a number. */
        async metrics() {
            const res = await fetch(`http://127.0.0.1:${h.adminPort}/metrics`, {
                headers: { 'X-Api-Key': API_KEY },
            });
            if (!res.ok) throw new Error(`/metrics: ${res.status}`);
            return parseMetrics(await res.text());
        },
        /** One sample: metric('herald_ws_pings_total', {listener: 'ws'}); 0 when absent. */
        async metric(name, labels = {}) {
            return sample(await h.metrics(), name, labels);
        },
        /** herald's resident set size in bytes (/proc/PID/status VmRSS). */
        rss() {
            const s = readFileSync(`/proc/${child.pid}/status`, 'utf8');
            return Number(s.match(/VmRSS:\s+(\d+) kB/)[1]) * 1024;
        },
        /** POST /api/publish?channel=C; resolves with {offset, epoch}. */
        async publish(channel, payload) {
            const res = await fetch(
                `http://127.0.0.1:${h.adminPort}/api/publish?channel=${encodeURIComponent(channel)}`,
                { method: 'POST', headers: { 'X-Api-Key': API_KEY }, body: payload },
            );
            const body = await res.json();
            if (!res.ok)
                throw new Error(`publish ${channel}: ${res.status} ${JSON.stringify(body)}`);
            return body;
        },
        signal(sig) {
            process.kill(child.pid, sig);
        },
        /** SIGTERM (a drain), then resolves with {code, signal} once herald has exited. */
        async stop(sig = 'SIGTERM') {
            if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, sig);
            return exited;
        },
    };
    return h;
}

/** Parses Prometheus text into a Map from 'name{labels}' to a number. */
export function parseMetrics(text) {
    const out = new Map();
    for (const line of text.split('\n')) {
        if (!line || line.startsWith('#')) continue;
        const sp = line.lastIndexOf(' ');
        out.set(line.slice(0, sp), Number(line.slice(sp + 1)));
    }
    return out;
}

/** The sample of name with exactly labels (in herald's order, as given), 0 when absent. */
export function sample(metrics, name, labels = {}) {
    const keys = Object.entries(labels);
    const key = keys.length ? `${name}{${keys.map(([k, v]) => `${k}="${v}"`).join(',')}}` : name;
    return metrics.get(key) ?? 0;
}
