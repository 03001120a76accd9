'use strict';
/*
 * check_console: herald's admin console (/console on the admin port) in headless Chromium,
 * against a real herald under a real herald-loadgen run (tests/integration/test_console.sh
 * starts both).
 *
 * Two subscribers of its own come first, with the JavaScript client (clients/js, TCP): a
 * probe on console:probe, and a slow consumer on console:slow that stops reading, behind a
 * burst of large publishes, so herald holds output for it past the high-water mark (the
 * queue figures then have something to show). Then, in one browser:
 *   - a page given a wrong key shows the refusal and asks again, keeps no key, and logged
 *     nothing but the 401s of its key check;
 *   - a page given the right key goes live; the figures it shows (tiles, per-loop rows, read
 *     back from their data- attributes) match /metrics fetched right after, within what the
 *     traffic moves in the time between the two (counters) or exactly (gauges that hold
 *     still); the rates match loadgen's pace and /metrics' own; every chart has points; a
 *     presence lookup and an online lookup show the probe; a test publish reaches the probe;
 *     every API call carried the key, the key sits in sessionStorage only, nothing was
 *     fetched from elsewhere, and the page logged no error. A screenshot is kept.
 * With --cluster the herald is one of two nodes on Redis (the probe on the other): the page
 * lists both nodes with their connections and the Redis server with its pending commands,
 * and the lookups and the publish cross the nodes.
 *
 * Usage: node check_console.js --admin-port N --port N --key K --clients N --rate R
 *          --clients-js DIR --screenshot OUT.png [--cluster --peer-port N --peer-admin-port N
 *          --peer-node ID]
 * Prints "ok N - what" per check and exits 1 at the first failure.
 */
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const { launch, openPage } = require('./lib/browser');

const WAIT_MS = 20000;

function parseArgs(argv) {
    const args = { cluster: false };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === '--cluster') {
            args.cluster = true;
            continue;
        }
        if (!a.startsWith('--') || argv[i + 1] === undefined) throw new Error(`bad argument ${a}`);
        args[a.slice(2)] = argv[++i];
    }
    const need = ['admin-port', 'port', 'key', 'clients', 'rate', 'clients-js', 'screenshot'];
    if (args.cluster) need.push('peer-port', 'peer-admin-port', 'peer-node');
    for (const n of need) if (!args[n]) throw new Error(`missing --${n}`);
    return args;
}

let passed = 0;
function check(cond, what, detail) {
    if (!cond) {
        const extra =
            detail === undefined
                ? ''
                : `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`;
        throw new Error(`not ok ${passed + 1} - ${what}${extra}`);
    }
    passed += 1;
    console.log(`ok ${passed} - ${what}`);
}

/* Polls fn until it returns a truthy value (resolved to it) or the time is up (rejects). */
async function waitFor(what, fn, timeoutMs = WAIT_MS) {
    const end = Date.now() + timeoutMs;
    let last;
    for (;;) {
        last = await fn();
        if (last) return last;
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 100));
    }
}

/* --- herald's own view ------------------------------------------------------------------ */

/* /metrics as {family: [{labels, value}]}. */
async function scrape(adminPort, key) {
    const res = await fetch(`http://127.0.0.1:${adminPort}/metrics`, {
        headers: { 'X-Api-Key': key },
    });
    if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
    const out = {};
    for (const line of (await res.text()).split('\n')) {
        const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/);
        if (!m) continue;
        const labels = {};
        for (const l of (m[2] || '').slice(1, -1).split(',').filter(Boolean)) {
            const [k, v] = l.split('=');
            labels[k] = v.replace(/^"|"$/g, '');
        }
        (out[m[1]] = out[m[1]] || []).push({ labels, value: Number(m[3]) });
    }
    return out;
}

function sum(metrics, family) {
    if (!metrics[family]) throw new Error(`/metrics has no ${family}`);
    return metrics[family].reduce((a, s) => a + s.value, 0);
}

function perLoop(metrics, family) {
    const out = [];
    for (const s of metrics[family] || []) out[Number(s.labels.loop)] = s.value;
    return out;
}

async function publish(adminPort, key, channel, body) {
    const res = await fetch(
        `http://127.0.0.1:${adminPort}/api/publish?channel=${encodeURIComponent(channel)}`,
        {
            method: 'POST',
            headers: { 'X-Api-Key': key },
            body,
        },
    );
    const j = await res.json();
    if (res.status !== 200)
        throw new Error(`publish to ${channel}: ${res.status} ${JSON.stringify(j)}`);
    return j;
}

/* --- subscribers of our own (clients/js) ------------------------------------------------- */

async function subscriber(clientsJs, port, user, channel) {
    const { Client } = await import(pathToFileURL(path.join(clientsJs, 'src', 'index.js')).href);
    const { TcpTransport } = await import(
        pathToFileURL(path.join(clientsJs, 'src', 'tcp.js')).href
    );
    /* The transport keeps its connection, so the slow consumer can stop reading. */
    class KeptTcp extends TcpTransport {
        open(handlers) {
            this.conn = super.open(handlers);
            return this.conn;
        }
    }
    const transport = new KeptTcp({ host: '127.0.0.1', port });
    /* With --insecure, herald takes a token that is not a JWT as the user id itself. */
    const client = new Client({ transport, token: user });
    const pushes = [];
    const sub = client.subscribe(channel);
    sub.on('push', (p) => pushes.push(p));
    client.connect();
    await sub.ready;
    return { client, transport, pushes };
}

/* --- the page ---------------------------------------------------------------------------- */

/* What the page shows, from its data- attributes. */
function readPage() {
    const num = (v) => (v === '' || v === undefined || v === null ? null : Number(v));
    const tiles = {};
    for (const t of document.querySelectorAll('.tile[data-figure]')) {
        tiles[t.dataset.figure] = {
            value: num(t.dataset.value),
            total: num(t.dataset.total),
            hidden: t.hidden,
        };
    }
    const loops = [...document.querySelectorAll('#loops tbody tr')].map((tr) => ({
        connections: num(tr.dataset.connections),
        queueDepth: num(tr.dataset.queueDepth),
        outputQueuedBytes: num(tr.dataset.outputQueuedBytes),
        slowConsumers: num(tr.dataset.slowConsumers),
    }));
    const charts = [...document.querySelectorAll('svg[data-chart]')].map((svg) => {
        const box = svg.getBoundingClientRect();
        return {
            name: svg.dataset.chart,
            visible: !svg.closest('figure').hidden,
            points: num(svg.dataset.points),
            width: box.width,
            height: box.height,
            series: [...svg.querySelectorAll('polyline[data-series]')].map((p) => ({
                name: p.dataset.series,
                points: num(p.dataset.points),
                last: num(p.dataset.last),
            })),
        };
    });
    const nodes = [...document.querySelectorAll('#nodes tbody tr[data-node]')].map((tr) => ({
        node: tr.dataset.node,
        connections: num(tr.dataset.connections),
        self: tr.classList.contains('self'),
    }));
    const servers = [...document.querySelectorAll('#servers tbody tr[data-server]')].map((tr) => ({
        server: tr.dataset.server,
        pending: num(tr.dataset.pendingCommands),
        up: tr.dataset.up,
    }));
    return {
        state: document.body.dataset.state,
        samples: num(document.body.dataset.samples),
        uptimeMs: num(document.body.dataset.uptimeMs),
        node: document.querySelector('#node').textContent,
        engine: document.querySelector('#engine').textContent,
        status: document.querySelector('#status').dataset.status,
        clusterShown: !document.querySelector('#cluster').hidden,
        tiles,
        loops,
        charts,
        nodes,
        servers,
    };
}

async function enterKey(page, key) {
    await page.waitForSelector('#key-input', { visible: true, timeout: WAIT_MS });
    await page.type('#key-input', key);
    await page.click('#key-form button[type="submit"]');
}

/* Fills a tool's form, submits it and waits for its answer. Returns the result's dataset. */
async function useTool(page, form, fields, result) {
    for (const [sel, value] of Object.entries(fields)) {
        await page.$eval(sel, (e) => {
            e.value = '';
        });
        await page.type(sel, value);
    }
    await page.$eval(result, (e) => {
        e.dataset.state = '';
    });
    await page.click(`${form} button[type="submit"]`);
    await page.waitForSelector(`${result}[data-state="done"]`, { timeout: WAIT_MS });
    return page.$eval(result, (e) => ({
        ...e.dataset,
        text: e.textContent,
        users: [...e.querySelectorAll('[data-user]')].map((li) => li.dataset.user),
    }));
}

/* A wrong key: refused, asked again, kept nowhere; the page's only errors are that 401. */
async function checkWrongKey(browser, url) {
    const { page, errors } = await openPage(browser, url);
    await enterKey(page, 'not-the-key');
    await page.waitForSelector('body[data-state="refused"]', { timeout: WAIT_MS });
    const d = await page.evaluate(() => ({
        auth: document.querySelector('#key-error').dataset.auth,
        message: document.querySelector('#key-error').textContent,
        loginShown: !document.querySelector('#login').hidden,
        boardShown: !document.querySelector('#board').hidden,
        stored: sessionStorage.length + localStorage.length,
    }));
    check(
        d.auth === 'refused' && /refused/.test(d.message),
        'a wrong key is refused, and the page says so',
        d,
    );
    check(d.loginShown && !d.boardShown, 'the page asks for the key again and shows no figures', d);
    check(d.stored === 0, 'a refused key is kept nowhere', d);
    const others = errors.filter((e) => !/401/.test(e));
    check(
        errors.length > 0 && others.length === 0,
        'the wrong-key page logged nothing but the 401',
        errors,
    );
    await page.close();
}

/* The page's figures against /metrics scraped right after. */
function compare(p, m, pace) {
    const gauge = (name, want, what) =>
        check(
            p.tiles[name].value === want,
            `${what}: the page shows /metrics' ${want}`,
            p.tiles[name],
        );
    gauge('connections', sum(m, 'herald_connections'), 'connections');
    gauge('users_online', sum(m, 'herald_users_online'), 'users online');
    gauge('channels', sum(m, 'herald_channels'), 'channels');
    gauge('subscriptions', sum(m, 'herald_subscriptions'), 'subscriptions');
    gauge('slow_consumers', sum(m, 'herald_slow_consumers'), 'slow consumers');
    gauge('pool_queue_depth', sum(m, 'herald_pool_queue_depth'), 'worker queue');
    const near = (a, b, slack) => Math.abs(a - b) <= slack;
    const mq = sum(m, 'herald_output_queued_bytes');
    check(
        near(p.tiles.output_queued_bytes.value, mq, Math.max(16384, mq * 0.1)),
        `output queued ${p.tiles.output_queued_bytes.value} B: /metrics' ${mq} B`,
        p.tiles.output_queued_bytes,
    );
    const md = sum(m, 'herald_loop_queue_depth');
    check(
        near(p.tiles.queue_depth.value, md, 64),
        `IO mailboxes ${p.tiles.queue_depth.value}: /metrics' ${md}`,
    );
    /* Counters move between the page's sample and the scrape: by at most their pace over the
     * uptime between the two, plus a second of slack. */
    const dt = sum(m, 'herald_uptime_seconds') - p.uptimeMs / 1000;
    check(dt >= 0 && dt < 5, `the scrape follows the page's sample by ${dt.toFixed(3)} s`);
    for (const [tileName, family, rate] of [
        ['publish_rate', 'herald_publishes_total', pace.publishes],
        ['delivery_rate', 'herald_deliveries_total', pace.deliveries],
    ]) {
        const moved = sum(m, family) - p.tiles[tileName].total;
        const most = (rate * (dt + 1)).toFixed(0);
        check(
            moved >= 0 && moved <= rate * 1.5 * (dt + 1) + 10,
            `${family}: the page's ${p.tiles[tileName].total}, /metrics ${moved} later (${most})`,
        );
    }
    const loops = perLoop(m, 'herald_connections');
    check(
        p.loops.length === loops.length && p.loops.every((l, i) => l.connections === loops[i]),
        'connections per IO loop match /metrics',
        [p.loops, loops],
    );
    const slow = perLoop(m, 'herald_slow_consumers');
    check(
        p.loops.every((l, i) => l.slowConsumers === slow[i]),
        'slow consumers per IO loop match /metrics',
        [p.loops, slow],
    );
    const outq = perLoop(m, 'herald_output_queued_bytes');
    check(
        p.loops.every((l, i) => near(l.outputQueuedBytes, outq[i], Math.max(16384, outq[i] * 0.1))),
        'output queued per IO loop matches /metrics',
        [p.loops, outq],
    );
}

/* Our subscribers: the probe (on the peer with --cluster) and the slow consumer, which stops
 * reading behind a burst of 60 KB publishes so that herald holds its output past the mark.
 * Waits until herald counts every connection and that one slow consumer. */
async function addSubscribers(args, key, clients, held) {
    const adminPort = Number(args['admin-port']);
    const probePort = Number(args.cluster ? args['peer-port'] : args.port);
    const probe = await subscriber(args['clients-js'], probePort, 'console-probe', 'console:probe');
    held.push(probe.client);
    const slow = await subscriber(
        args['clients-js'],
        Number(args.port),
        'console-slow',
        'console:slow',
    );
    held.push(slow.client);
    slow.transport.conn.socket.pause();
    const big = Buffer.alloc(60000, 0x61);
    for (let i = 0; i < 120; i++) await publish(adminPort, key, 'console:slow', big);
    const ours = clients + (args.cluster ? 1 : 2);
    await waitFor(`${ours} connections and one slow consumer`, async () => {
        const m = await scrape(adminPort, key);
        return (
            sum(m, 'herald_connections') === ours &&
            sum(m, 'herald_slow_consumers') === 1 &&
            sum(m, 'herald_output_queued_bytes') >= 65536
        );
    });
    check(true, `herald holds ${ours} connections, one of them a slow consumer past the mark`);
    return probe;
}

/* herald's own pace, from /metrics over three seconds. */
async function measurePace(adminPort, key, rate) {
    const m1 = await scrape(adminPort, key);
    await new Promise((r) => setTimeout(r, 3000));
    const m2 = await scrape(adminPort, key);
    const span = sum(m2, 'herald_uptime_seconds') - sum(m1, 'herald_uptime_seconds');
    const moved = (family) => (sum(m2, family) - sum(m1, family)) / span;
    const pace = {
        publishes: moved('herald_publishes_total'),
        deliveries: moved('herald_deliveries_total'),
    };
    check(
        Math.abs(pace.publishes - rate) <= rate * 0.35,
        `herald sees loadgen's ${rate} publishes/s (${pace.publishes.toFixed(1)})`,
    );
    return pace;
}

/* Three rounds, a second apart: the page's figures, then /metrics at once. A rate on the page
 * spans one second, the pace three: half of it either way is allowed for a busy machine. */
async function checkFigures(page, adminPort, key, pace) {
    for (let round = 0; round < 3; round++) {
        const p = await page.evaluate(readPage);
        const m = await scrape(adminPort, key);
        compare(p, m, pace);
        for (const [tile, rate, what] of [
            ['publish_rate', pace.publishes, 'publishes'],
            ['delivery_rate', pace.deliveries, 'deliveries'],
        ]) {
            const v = p.tiles[tile].value;
            check(
                Math.abs(v - rate) <= rate * 0.5 + 2,
                `the page's ${v.toFixed(1)} ${what}/s: /metrics' pace ${rate.toFixed(1)}`,
            );
        }
        await new Promise((r) => setTimeout(r, 1100));
    }
}

const PER_LOOP_CHARTS = [
    'delivery-rate',
    'loop-queue-depth',
    'output-queued-bytes',
    'slow-consumers',
];

async function checkCharts(page, isCluster) {
    const p = await page.evaluate(readPage);
    check(
        p.tiles.slow_consumers.value === 1 && p.tiles.output_queued_bytes.value >= 65536,
        'the slow consumer shows: one, with its backlog past the mark',
        p.tiles,
    );
    const visible = p.charts.filter((c) => c.visible);
    const want = ['connections', 'channels', 'publish-rate', 'delivery-rate', 'loop-queue-depth'];
    want.push('pool-queue-depth', 'output-queued-bytes', 'slow-consumers');
    if (isCluster) want.push('redis-pending');
    const names = visible.map((c) => c.name);
    check(JSON.stringify(names) === JSON.stringify(want), 'the charts shown', names);
    check(
        visible.every((c) => c.points >= 5 && c.width > 200 && c.height > 100 && c.series.length),
        'every chart has points and a real size',
        visible,
    );
    const perLoop = visible.filter((c) => PER_LOOP_CHARTS.includes(c.name));
    check(
        perLoop.every((c) => c.series.length === p.loops.length && p.loops.length >= 2),
        'the per-loop charts have a line per IO loop',
        perLoop.map((c) => c.series.length),
    );
    const slowChart = visible.find((c) => c.name === 'slow-consumers');
    const ends = slowChart.series.reduce((a, sr) => a + sr.last, 0);
    check(ends === 1, 'the slow-consumer chart ends at one', slowChart);
}

/* The cluster view: both nodes (the peer's connections seen through Redis) and the server. */
async function checkCluster(page, args, key) {
    await page.waitForFunction(
        () => document.querySelectorAll('#nodes tbody tr[data-node]').length >= 2,
        { timeout: WAIT_MS },
    );
    const c = await page.evaluate(readPage);
    const peerUrl = `http://127.0.0.1:${args['peer-admin-port']}/api/console`;
    const peers = await (await fetch(peerUrl, { headers: { 'X-Api-Key': key } })).json();
    const self = c.nodes.find((n) => n.self);
    const peer = c.nodes.find((n) => n.node === args['peer-node']);
    check(
        c.clusterShown && c.nodes.length === 2 && self && self.node === c.node && peer,
        'the cluster view lists both nodes, this one marked',
        c.nodes,
    );
    check(
        peer.connections === peers.connections,
        `the peer's ${peers.connections} connection(s), seen through Redis`,
        [peer, peers.connections],
    );
    const m = await scrape(Number(args['admin-port']), key);
    const pend = m.herald_redis_pending_commands || [];
    check(
        c.servers.length === pend.length &&
            c.servers.length >= 1 &&
            c.servers.every((s) => s.up === 'true'),
        'the Redis server is listed, up',
        c.servers,
    );
    const want = sum(m, 'herald_redis_pending_commands');
    check(
        Math.abs(c.tiles.redis_pending.value - want) <= 16,
        `Redis pending commands ${c.tiles.redis_pending.value}: /metrics' ${want}`,
    );
}

/* Presence and online lookups find the probe; a test publish reaches it. */
async function checkTools(page, probe) {
    const pres = await useTool(
        page,
        '#presence-form',
        { '#presence-channel': 'console:probe' },
        '#presence-result',
    );
    check(
        pres.numClients === '1' && pres.numUsers === '1' && pres.users.join() === 'console-probe',
        'presence of console:probe: the probe',
        pres,
    );
    const onl = await useTool(
        page,
        '#online-form',
        { '#online-user': 'console-probe' },
        '#online-result',
    );
    check(
        onl.online === 'true' && onl.connections === '1',
        'the probe is online, one connection',
        onl,
    );
    const text = `console test ${Date.now()}`;
    const pub = await useTool(
        page,
        '#publish-form',
        { '#publish-channel': 'console:probe', '#publish-message': text },
        '#publish-result',
    );
    check(Number(pub.offset) >= 1, `the test publish got offset ${pub.offset}`, pub);
    await waitFor('the probe to receive the test publish', () =>
        probe.pushes.some((x) => x.text === text),
    );
    const push = probe.pushes.find((x) => x.text === text);
    check(
        push.offset === Number(pub.offset),
        'the probe received the test message, at that offset',
        push.offset,
    );
}

/* The key in sessionStorage only and on every API call; nothing from elsewhere; no error. */
async function checkHygiene(ctx, apiCalls, key, adminPort) {
    const storage = await ctx.page.evaluate(() => ({
        session: Object.keys(sessionStorage).map((k) => [k, sessionStorage.getItem(k)]),
        local: localStorage.length,
        cookie: document.cookie,
    }));
    check(
        storage.session.length === 1 &&
            storage.session[0][1] === key &&
            storage.local === 0 &&
            storage.cookie === '',
        'the key is in sessionStorage only',
        storage.session.map(([k]) => k),
    );
    check(
        apiCalls.length > 10 && apiCalls.every((c) => c.key === key),
        `all ${apiCalls.length} API calls carried the key`,
        apiCalls.filter((c) => c.key !== key),
    );
    const origin = `http://127.0.0.1:${adminPort}/`;
    check(
        ctx.requests.every((r) => r.startsWith(origin)),
        'nothing was fetched from anywhere else',
        ctx.requests.filter((r) => !r.startsWith(origin)),
    );
    check(ctx.errors.length === 0, 'no console error, page error or failed request', ctx.errors);
}

/* Opens the console with the right key and waits for six samples. Returns the page's context
 * and the list of API calls it makes (with the key each carried). */
async function openLive(browser, url, key) {
    const ctx = await openPage(browser, url);
    const apiCalls = [];
    ctx.page.on('request', (req) => {
        if (new URL(req.url()).pathname.startsWith('/api/'))
            apiCalls.push({ url: req.url(), key: req.headers()['x-api-key'] });
    });
    check(await ctx.page.$eval('#login', (e) => !e.hidden), 'the page asks for the key first');
    await enterKey(ctx.page, key);
    await ctx.page.waitForSelector('body[data-state="live"]', { timeout: WAIT_MS });
    await ctx.page.waitForFunction(() => Number(document.body.dataset.samples) >= 6, {
        timeout: WAIT_MS,
    });
    check(true, 'with the key the console goes live and samples once a second');
    return { ctx, apiCalls };
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const adminPort = Number(args['admin-port']);
    const key = args.key;
    const url = `http://127.0.0.1:${adminPort}/console`;
    const held = [];
    let browser = null;
    let live = null;
    try {
        const probe = await addSubscribers(args, key, Number(args.clients), held);
        browser = await launch();
        await checkWrongKey(browser.browser, url);
        live = await openLive(browser.browser, url, key);
        const pace = await measurePace(adminPort, key, Number(args.rate));
        await checkFigures(live.ctx.page, adminPort, key, pace);
        await checkCharts(live.ctx.page, args.cluster);
        if (args.cluster) await checkCluster(live.ctx.page, args, key);
        await checkTools(live.ctx.page, probe);
        await checkHygiene(live.ctx, live.apiCalls, key, adminPort);
    } finally {
        if (live) {
            fs.mkdirSync(path.dirname(path.resolve(args.screenshot)), { recursive: true });
            await live.ctx.page
                .screenshot({ path: args.screenshot, fullPage: true })
                .catch(() => {});
        }
        if (browser) await browser.close();
        for (const c of held) c.close();
    }
    const size = fs.statSync(args.screenshot).size;
    check(size > 20000, `screenshot kept at ${args.screenshot}`, size);
    console.log(`${passed} passed, 0 failed`);
}

main().catch((err) => {
    console.error(err.message || err);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
});
