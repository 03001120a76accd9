'use strict';
/*
 * check_js_client: clients/js in Debian's headless Chromium against real herald nodes, over
 * ws:// and then wss:// (issue 23's browser test). For each scheme:
 *
 *   1. redis-server (started once) and herald #1: Redis engine, [history] rules from a --config
 *      file (hist:* keeps 1000 for 5 min), a WebSocket listener whose allowed_origins is the
 *      test page's origin, for wss a certificate signed by the test CA (the caller made it and
 *      put it in the NSS database of the HOME the browser runs with), --drain 1s.
 *   2. tests/browser/pages/js_client.html, served with clients/js by a static server on
 *      127.0.0.1, connects with a token from `herald token`, subscribes to hist:<scheme> with
 *      recovery, and receives m1..m3 published through the admin API.
 *   3. SIGTERM: herald #1 drains; the page's client gets Disconnect{SHUTDOWN} with reconnect
 *      advice; herald #1 exits 0. While no node runs, m4..m6 go straight into Redis
 *      (FCALL herald_publish, as a backend may publish: README, "Publishing through Redis").
 *   4. herald #2 on the same ports (client, WebSocket and admin): the page reconnects and
 *      resubscribes with recover; m4..m6 come as recovered pushes, then m7, m8 published
 *      through herald #2's admin API live.
 *   5. The page's report must show: offsets 1..8 each once and in order with their texts, one
 *      epoch, the resubscribe recovered: true, the SHUTDOWN with reconnect advice, no resync,
 *      no gap, no error; no page error but the refused reconnect attempts while no node ran.
 *      For wss, herald #2 counted the page's TLS handshake on its WebSocket listener, and the
 *      same page in a browser whose HOME trusts no test CA never connects (herald counts the
 *      failed TLS handshakes): the certificate is checked for real.
 *
 * A full-page screenshot per scheme is kept (js_client_ws.png, js_client_wss.png).
 * Usage: node check_js_client.js --herald BIN --ca DIR --home DIR --repo ROOT --artifacts DIR
 * Prints "ok N - what" per check; exits 1 at the first failure.
 */
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn, execFileSync } = require('node:child_process');
const { launch, openPage } = require('./lib/browser');

const SECRET = 'browser-test-secret-0123456789abcdef';
const API_KEY = 'browser-test-api-key';
const WAIT_MS = 30000;

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || argv[i + 1] === undefined) throw new Error(`bad argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  for (const need of ['herald', 'ca', 'home', 'repo', 'artifacts']) {
    if (!args[need]) throw new Error(`missing --${need}`);
  }
  return args;
}

let passed = 0;
function check(cond, what, detail) {
  if (!cond) {
    const extra = detail === undefined ? '' : `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`;
    throw new Error(`not ok ${passed + 1} - ${what}${extra}`);
  }
  passed += 1;
  console.log(`ok ${passed} - ${what}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/* Resolves with the first match of re in child's stderr (or stdout); rejects if it exits. */
function waitForOutput(child, stream, re, what) {
  return new Promise((resolve, reject) => {
    let text = '';
    const timer = setTimeout(() => done(new Error(`${what}: no ${re} within ${WAIT_MS} ms:\n${text}`)), WAIT_MS);
    const onData = (chunk) => {
      text += chunk;
      const m = text.match(re);
      if (m) done(null, m);
    };
    const onExit = (code) => done(new Error(`${what} exited (${code}) before ${re}:\n${text}`));
    function done(err, m) {
      clearTimeout(timer);
      child[stream].off('data', onData);
      child.off('exit', onExit);
      if (err) reject(err);
      else resolve(m);
    }
    child[stream].setEncoding('utf8');
    child[stream].on('data', onData);
    child.on('exit', onExit);
  });
}

async function startRedis(tmp) {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(tmp, 'redis-'));
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no', '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  await waitForOutput(child, 'stdout', /Ready to accept connections/, 'redis-server');
  child.stdout.resume();
  return {
    port,
    cli: (...args) => execFileSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).trim(),
    async stop() {
      if (child.exitCode === null) process.kill(child.pid, 'SIGTERM');
      await exited;
    },
  };
}

/* Starts herald; resolves with { pid, port, wsPort, adminPort, isTls, log(), publish(), stop() }. */
async function startHerald(bin, args) {
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  let m;
  try {
    m = await waitForOutput(child, 'stderr',
      /ev=listening port=(\d+) admin_port=(\d+) ws_port=(\d+) .*tls=(on|off)/, 'herald');
  } catch (err) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    throw err;
  }
  child.stderr.on('data', (c) => (log += c));
  const h = {
    pid: child.pid,
    port: Number(m[1]),
    adminPort: Number(m[2]),
    wsPort: Number(m[3]),
    isTls: m[4] === 'on',
    exited,
    log: () => log,
    async publish(channel, text) {
      const res = await fetch(`http://127.0.0.1:${h.adminPort}/api/publish?channel=${encodeURIComponent(channel)}`,
        { method: 'POST', headers: { 'X-Api-Key': API_KEY }, body: text });
      const body = await res.json();
      if (!res.ok) throw new Error(`publish ${channel}: ${res.status} ${JSON.stringify(body)}`);
      return body;
    },
    async metric(name) {
      const res = await fetch(`http://127.0.0.1:${h.adminPort}/metrics`, { headers: { 'X-Api-Key': API_KEY } });
      const text = await res.text();
      const line = text.split('\n').find((l) => l.startsWith(`${name} `));
      return line ? Number(line.split(' ')[1]) : NaN;
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, signal);
      return exited;
    },
  };
  return h;
}

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.json': 'application/json', '.map': 'application/json' };

/* Serves clients/js at /clients/js/ and tests/browser/pages at /pages/, read-only. */
function startStatic(repo) {
  const mounts = [
    ['/clients/js/', path.join(repo, 'clients', 'js')],
    ['/pages/', path.join(repo, 'tests', 'browser', 'pages')],
  ];
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const mount = mounts.find(([prefix]) => url.startsWith(prefix));
    const file = mount && path.normalize(path.join(mount[1], url.slice(mount[0].length)));
    if (!file || !file.startsWith(mount[1] + path.sep)) {
      res.writeHead(404).end();
      return;
    }
    fs.readFile(file, (err, data) => {
      if (err) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream' }).end(data);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function token(bin, user) {
  return execFileSync(bin, ['token', '--secret', SECRET, '--user', user, '--channels', 'hist:*', '--ttl', '1h'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
}

/* Waits until pred(report) holds in the page; resolves with the report. */
async function until(page, what, pred, arg) {
  try {
    await page.waitForFunction(pred, { timeout: WAIT_MS, polling: 50 }, arg);
  } catch (err) {
    const r = await page.evaluate(() => window.heraldReport);
    throw new Error(`the page did not get to "${what}" within ${WAIT_MS} ms: ${JSON.stringify(r)}`);
  }
  return page.evaluate(() => window.heraldReport);
}

async function runScheme(ctx, scheme) {
  const { args, browser, redis, origin, config } = ctx;
  const channel = `hist:${scheme}`;
  const isTls = scheme === 'wss';
  const tlsArgs = isTls ? ['--tls-cert', path.join(args.ca, 'server.pem'), '--tls-key', path.join(args.ca, 'server.key')] : [];
  const heraldArgs = (listen, ws, admin, node) => ['--config', config, '--listen', listen, '--ws-listen', ws,
    '--admin', admin, '--ws-allowed-origins', origin, '--secret', SECRET, '--api-key', API_KEY,
    '--engine', 'redis', '--redis', `127.0.0.1:${redis.port}`, '--node-id', node, '--drain', '1s',
    '--io-threads', '1', ...tlsArgs];

  const h1 = await startHerald(args.herald, heraldArgs('127.0.0.1:0', '127.0.0.1:0', '127.0.0.1:0', `${scheme}-1`));
  let h2 = null;
  check(h1.isTls === isTls, `${scheme}: herald #1 listening (ws port ${h1.wsPort}, tls=${h1.isTls ? 'on' : 'off'})`);
  const url = `${scheme}://127.0.0.1:${h1.wsPort}/connection`;
  const query = new URLSearchParams({ url, token: token(args.herald, `browser-${scheme}`), channel });
  const { page, errors } = await openPage(browser, `${origin}/pages/js_client.html?${query}`, { width: 900, height: 700 });
  const shot = path.join(args.artifacts, `js_client_${scheme}.png`);
  try {
    await until(page, 'subscribed', () => window.heraldReport && window.heraldReport.subscribed.length === 1);
    for (const m of ['m1', 'm2', 'm3']) await h1.publish(channel, m);
    await until(page, '3 pushes', () => window.heraldReport.pushes.length >= 3);
    check(true, `${scheme}: the page connected through ${url}, subscribed, got m1..m3 from the admin API`);

    // The drain: SIGTERM, the page's client is told SHUTDOWN, herald #1 exits 0.
    const stopped = h1.stop('SIGTERM');
    let r = await until(page, 'Disconnect{SHUTDOWN}', () => window.heraldReport.disconnects.some((d) => d.codeName === 'SHUTDOWN'));
    const st = await stopped;
    check(st.code === 0, `${scheme}: herald #1 drained and exited 0`, st);
    const told = r.disconnects.find((d) => d.codeName === 'SHUTDOWN');
    check(told.wasConnected && told.reconnect && told.advisedDelayMs > 0,
      `${scheme}: Disconnect{SHUTDOWN} with reconnect advice (${told.advisedDelayMs} ms)`, told);

    // While no node runs, a backend publishes into Redis; then herald #2 on the same ports.
    for (const m of ['m4', 'm5', 'm6']) {
      redis.cli('FCALL', 'herald_publish', '2', `herald:m:${channel}`, `herald:h:${channel}`, channel, m, '1000', '300000');
    }
    h2 = await startHerald(args.herald, heraldArgs(`127.0.0.1:${h1.port}`, `127.0.0.1:${h1.wsPort}`,
      `127.0.0.1:${h1.adminPort}`, `${scheme}-2`));
    r = await until(page, 'resubscribed, 6 pushes', () => window.heraldReport.subscribed.length >= 2 && window.heraldReport.pushes.length >= 6);
    for (const m of ['m7', 'm8']) await h2.publish(channel, m);
    r = await until(page, '8 pushes', () => window.heraldReport.pushes.length >= 8);

    const offsets = r.pushes.map((p) => p.offset);
    check(JSON.stringify(offsets) === '[1,2,3,4,5,6,7,8]', `${scheme}: offsets 1..8, each once, in order`, offsets);
    check(r.pushes.every((p, i) => p.text === `m${i + 1}`), `${scheme}: the texts m1..m8`, r.pushes);
    check(new Set(r.pushes.map((p) => p.epoch)).size === 1, `${scheme}: one epoch across the restart (Redis keeps it)`, r.pushes);
    const re = r.subscribed[1];
    check(r.subscribed.length === 2 && re.isResubscribe && re.recovered === true,
      `${scheme}: the resubscribe on herald #2 recovered: true`, r.subscribed);
    check(r.resyncs.length === 0 && r.gaps.length === 0 && r.errors.length === 0,
      `${scheme}: no resync, no gap, no error`, { resyncs: r.resyncs, gaps: r.gaps, errors: r.errors });
    check(r.connects === 2, `${scheme}: two sessions, one per node`, r.connects);
    // The attempts while no node listened fail in the browser's console; nothing else may.
    const other = errors.filter((e) => !/WebSocket connection to .* failed|ERR_CONNECTION_REFUSED/.test(e));
    check(other.length === 0, `${scheme}: no page error besides the refused reconnects`, other);
    if (isTls) {
      const n = await h2.metric('herald_transport_handshakes_total{listener="ws"}');
      check(n >= 1, `wss: herald #2 completed the browser's TLS + WebSocket handshake (${n})`, n);
      await checkUntrusted(ctx, h2, query);
    }
  } finally {
    fs.mkdirSync(args.artifacts, { recursive: true });
    await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
    await page.close().catch(() => {});
    if (h2) {
      const st2 = await h2.stop('SIGTERM');
      if (st2.code !== 0) throw new Error(`${scheme}: herald #2 exited ${JSON.stringify(st2)}:\n${h2.log()}`);
    }
    await h1.stop('SIGKILL');
  }
  console.log(`screenshot: ${shot}`);
}

/* The same page in a browser whose HOME trusts no test CA must not get through: the
 * certificate is really checked (no flag turns verification off). */
async function checkUntrusted(ctx, h, query) {
  const failures = 'herald_transport_handshake_failures_total{listener="ws",reason="tls_error"}';
  const before = await h.metric(failures);
  const home = fs.mkdtempSync(path.join(ctx.tmp, 'home-untrusted-'));
  const { browser, close } = await launch({ env: { ...process.env, HOME: home } });
  try {
    const { page, errors } = await openPage(browser, `${ctx.origin}/pages/js_client.html?${query}`);
    const r = await until(page, 'two failed attempts', () => window.heraldReport.disconnects.length >= 2);
    check(r.connects === 0 && r.subscribed.length === 0 && r.disconnects.every((d) => !d.wasConnected),
      'wss: a browser that does not trust the test CA never connects', r);
    const after = await h.metric(failures);
    check(after > before, `wss: herald counted its failed TLS handshakes (${before} -> ${after})`);
    check(errors.some((e) => /WebSocket connection to .* failed/.test(e)),
      'wss: the untrusting browser logged the failed WebSocket connection', errors);
  } finally {
    await close();
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-browser-'));
  const config = path.join(tmp, 'herald.conf');
  fs.writeFileSync(config, '[history]\nrules = hist:*=1000/5m\n');
  const cleanups = [() => fs.rmSync(tmp, { recursive: true, force: true })];
  try {
    const redis = await startRedis(tmp);
    cleanups.push(() => redis.stop());
    const server = await startStatic(args.repo);
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const origin = `http://127.0.0.1:${server.address().port}`;
    // Chromium on Linux trusts what the NSS database of $HOME trusts: the caller put the test
    // CA there. No --ignore-certificate-errors: the certificate is checked for real.
    const { browser, close } = await launch({ env: { ...process.env, HOME: args.home } });
    cleanups.push(close);
    const ctx = { args, browser, redis, origin, config, tmp };
    for (const scheme of ['ws', 'wss']) await runScheme(ctx, scheme);
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
