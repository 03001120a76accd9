// The package in a real browser, with no bundler: headless Chromium (Debian's) opens
// examples/browser.html (the README's page) through test/browser/harness.html, served from
// this folder by a static HTTP server, and talks to a scripted herald peer over WebSocket.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFile, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeFrame, CLIENT_VERSION } from '../src/index.js';
import { startWsPeer, PEER_EPOCH } from './helpers/ws-peer.js';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const types = {
    '.html': 'text/html',
    '.js': 'text/javascript',
    '.json': 'application/json',
    '.map': 'application/json',
};

// Serves pkgDir read-only; POST /result hands its body to onResult.
function startStatic(onResult) {
    const server = createServer((req, res) => {
        const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
        if (req.method === 'POST' && path === '/result') {
            let body = '';
            req.on('data', (c) => (body += c));
            req.on('end', () => {
                res.end('ok');
                onResult(JSON.parse(body));
            });
            return;
        }
        const file = normalize(join(pkgDir, path));
        if (!file.startsWith(pkgDir + sep)) {
            res.writeHead(403).end();
            return;
        }
        readFile(file, (err, data) => {
            if (err) {
                res.writeHead(404).end();
                return;
            }
            res.writeHead(200, {
                'Content-Type': types[extname(file)] ?? 'application/octet-stream',
            }).end(data);
        });
    });
    return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

test('examples/browser.html imports the package through its import map and receives a push', async () => {
    const peer = await startWsPeer({
        respond(conn, frame) {
            if (frame.body !== 'subscribe') return false;
            conn.send(frame.id, 'subscribeOk', { offset: 0, epoch: PEER_EPOCH, recoverable: true });
            conn.send(0, 'push', {
                channel: 'news',
                offset: 1,
                epoch: PEER_EPOCH,
                payload: Buffer.from('hello from herald'),
            });
            return true;
        },
    });
    let onResult;
    const result = new Promise((resolve, reject) => {
        onResult = resolve;
        setTimeout(
            () => reject(new Error('no result from the browser within 60 s')),
            60000,
        ).unref();
    });
    const http = await startStatic(onResult);
    const profile = mkdtempSync(join(tmpdir(), 'herald-js-chromium-'));
    const query = new URLSearchParams({
        url: peer.url,
        token: 'browser-token',
        channel: 'news',
        expect: 'news #1: hello from herald',
    });
    const page = `http://127.0.0.1:${http.address().port}/test/browser/harness.html?${query}`;
    const chromium = spawn(
        process.env.CHROMIUM || 'chromium',
        [
            '--headless',
            '--no-sandbox',
            '--disable-gpu',
            '--disable-background-networking',
            '--disable-component-update',
            '--disable-sync',
            '--no-first-run',
            `--user-data-dir=${profile}`,
            page,
        ],
        { stdio: 'ignore', detached: true },
    );
    const exited = new Promise((resolve) => chromium.on('exit', resolve));
    const failed = new Promise((_, reject) =>
        chromium.on('error', (err) =>
            reject(
                new Error(
                    `cannot run chromium (scripts/install-deps.sh installs it): ${err.message}`,
                ),
            ),
        ),
    );
    try {
        const r = await Promise.race([result, failed]);
        assert.equal(r.error, undefined, r.error);
        assert.deepEqual(r.log, [
            'state: connecting',
            'state: connected',
            'news #1: hello from herald',
        ]);
        const conn = peer.connections[0];
        assert.equal(conn.path, '/connection');
        assert.equal(conn.protocol, 'herald.v1');
        assert.ok(conn.messages.every((m) => m.isBinary));
        const want = encodeFrame(1, 'connect', {
            token: 'browser-token',
            clientName: 'herald-js',
            clientVersion: CLIENT_VERSION,
        });
        assert.deepEqual([...conn.messages[0].bytes], [...want]);
        assert.deepEqual(conn.messages[1].frame.subscribe.channel, 'news');
    } finally {
        // Chromium's own helper processes share its process group: end the group it leads.
        if (chromium.pid && chromium.exitCode === null) {
            try {
                process.kill(-chromium.pid, 'SIGTERM');
            } catch {
                // Already gone.
            }
            await exited;
        }
        rmSync(profile, { recursive: true, force: true });
        await new Promise((resolve) => http.close(resolve));
        await peer.close();
    }
});
