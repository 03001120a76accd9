/*
 * herald's admin console: asks for the API key once (kept in this tab's sessionStorage, sent
 * as X-Api-Key with every request), then reads GET /api/console once a second and draws the
 * last five minutes as SVG charts, with the current figures in tiles and a per-loop table.
 * With the Redis engine it also lists the nodes seen through Redis (GET /api/nodes). Three
 * tools: a channel's presence, a user's online status, a test publish.
 *
 * Every figure shown is also written into data- attributes (tiles: data-value, and
 * data-total for the rates' counters; charts: data-points and each series' data-last;
 * <body>: data-samples and the sample's data-uptime-ms), so tests read exactly what the page
 * shows. Rates come from two samples' counters and uptimes (server time, not the browser's).
 * No library: the charts are a few SVG elements redrawn per sample.
 */
(function () {
    'use strict';

    const KEY_STORE = 'herald.console.apiKey';
    const POLL_MS = 1000;
    const NODES_EVERY = 2; /* samples between two cluster reads */
    const WINDOW_MS = 5 * 60 * 1000;
    const SVG_NS = 'http://www.w3.org/2000/svg';
    const CHART_W = 480; /* until the chart is laid out; then its own width */
    const CHART_H = 150;
    const PAD_L = 60;
    const MIN_SPAN_MS = 30 * 1000; /* the shortest time axis, while the history is young */
    const PAD_R = 8;
    const PAD_T = 16;
    const PAD_B = 16;

    const $ = (sel) => document.querySelector(sel);
    let apiKey = null;
    let timer = null;
    let inFlight = false;
    let samples = []; /* {uptime, time, data, rates} oldest first, within WINDOW_MS */
    let nodesTick = 0;

    /* --- formatting -------------------------------------------------------------------- */

    const intFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
    const rateFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });

    function fmtInt(v) {
        return v === null || v === undefined ? '-' : intFmt.format(v);
    }

    function fmtRate(v) {
        return v === null || v === undefined ? '-' : rateFmt.format(v);
    }

    function fmtBytes(v) {
        if (v === null || v === undefined) return '-';
        const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
        let u = 0;
        let x = v;
        while (x >= 1024 && u < units.length - 1) {
            x /= 1024;
            u++;
        }
        return (u === 0 ? intFmt.format(x) : rateFmt.format(x)) + ' ' + units[u];
    }

    function fmtDuration(ms) {
        let s = Math.floor(ms / 1000);
        const d = Math.floor(s / 86400);
        s -= d * 86400;
        const h = Math.floor(s / 3600);
        s -= h * 3600;
        const m = Math.floor(s / 60);
        s -= m * 60;
        if (d > 0) return `${d}d ${h}h`;
        if (h > 0) return `${h}h ${m}m`;
        if (m > 0) return `${m}m ${s}s`;
        return `${s}s`;
    }

    function el(tag, attrs, text) {
        const e = document.createElement(tag);
        for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
        if (text !== undefined) e.textContent = text;
        return e;
    }

    function svgEl(tag, attrs, text) {
        const e = document.createElementNS(SVG_NS, tag);
        for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
        if (text !== undefined) e.textContent = text;
        return e;
    }

    /* --- the API ----------------------------------------------------------------------- */

    class KeyRefused extends Error {}

    /* One call with the key. Resolves to the JSON answer; rejects with KeyRefused on 401, or
     * an Error carrying the server's {"error"} text. */
    async function api(method, path, body) {
        const init = { method, headers: { 'X-Api-Key': apiKey }, cache: 'no-store' };
        if (body !== undefined) {
            init.body = body;
            init.headers['Content-Type'] = 'application/octet-stream';
        }
        const res = await fetch(path, init);
        if (res.status === 401) throw new KeyRefused('the API key was refused');
        let data = null;
        try {
            data = await res.json();
        } catch (err) {
            data = null;
        }
        if (!res.ok) throw new Error((data && data.error) || `HTTP ${res.status}`);
        return data;
    }

    /* --- key handling ------------------------------------------------------------------ */

    /* Back to the key prompt; a refused or forgotten key leaves the tab's storage. */
    function showLogin(message, auth) {
        stopPolling();
        apiKey = null;
        if (auth === 'refused' || auth === 'forgotten') sessionStorage.removeItem(KEY_STORE);
        document.body.dataset.state = auth === 'refused' ? 'refused' : 'login';
        $('#board').hidden = true;
        $('#forget').hidden = true;
        $('#login').hidden = false;
        const err = $('#key-error');
        err.textContent = message || '';
        err.dataset.auth = auth || '';
        setStatus(auth === 'refused' ? 'refused' : '-');
        const input = $('#key-input');
        input.value = '';
        input.focus();
    }

    function showBoard() {
        $('#login').hidden = true;
        $('#board').hidden = false;
        $('#forget').hidden = false;
        $('#key-error').textContent = '';
        $('#key-error').dataset.auth = 'accepted';
    }

    function setStatus(text) {
        const s = $('#status');
        s.textContent = text;
        s.dataset.status = text;
    }

    /* The first sample decides: a refused key goes back to the prompt, an accepted one is
     * kept for the tab's life and the console starts. */
    async function tryKey(key) {
        apiKey = key;
        try {
            const data = await api('GET', '/api/console');
            sessionStorage.setItem(KEY_STORE, key);
            samples = [];
            showBoard();
            document.body.dataset.state = 'live';
            addSample(data);
            startPolling();
        } catch (err) {
            if (err instanceof KeyRefused) {
                showLogin(
                    'The API key was refused (401). Enter the key of this herald ' +
                        '([admin] api_key).',
                    'refused',
                );
            } else {
                showLogin(`herald did not answer: ${err.message}`, 'unreachable');
            }
        }
    }

    /* --- polling ----------------------------------------------------------------------- */

    function startPolling() {
        stopPolling();
        timer = setInterval(poll, POLL_MS);
    }

    function stopPolling() {
        if (timer !== null) clearInterval(timer);
        timer = null;
    }

    async function poll() {
        if (inFlight || apiKey === null) return;
        inFlight = true;
        try {
            addSample(await api('GET', '/api/console'));
            if (
                samples.length &&
                samples[samples.length - 1].data.engine === 'redis' &&
                nodesTick++ % NODES_EVERY === 0
            ) {
                await pollNodes();
            }
        } catch (err) {
            if (err instanceof KeyRefused) {
                showLogin('The API key is no longer accepted (401). Enter it again.', 'refused');
            } else {
                setStatus('unreachable');
                document.body.dataset.state = 'unreachable';
            }
        } finally {
            inFlight = false;
        }
    }

    /* Rates from the previous sample's counters; null for the first one or after a restart. */
    function ratesFrom(prev, d) {
        if (!prev || d.uptime_ms <= prev.uptime) return null;
        const dt = (d.uptime_ms - prev.uptime) / 1000;
        const r = (now, before) => (now >= before ? (now - before) / dt : null);
        return {
            publishes: r(d.publishes_total, prev.data.publishes_total),
            deliveries: r(d.deliveries_total, prev.data.deliveries_total),
            loopDeliveries: d.loops.map((l, i) =>
                prev.data.loops[i]
                    ? r(l.deliveries_total, prev.data.loops[i].deliveries_total)
                    : null,
            ),
        };
    }

    function addSample(d) {
        let prev = samples.length ? samples[samples.length - 1] : null;
        if (
            prev &&
            (d.uptime_ms < prev.uptime ||
                d.node !== prev.data.node ||
                d.loops.length !== prev.data.loops.length)
        ) {
            samples = []; /* another process answers now: start over */
            prev = null;
        }
        const s = { uptime: d.uptime_ms, time: d.time_ms, data: d, rates: ratesFrom(prev, d) };
        samples.push(s);
        while (samples.length && samples[0].uptime < s.uptime - WINDOW_MS) samples.shift();
        document.body.dataset.samples = String(samples.length);
        document.body.dataset.uptimeMs = String(d.uptime_ms);
        document.body.dataset.timeMs = String(d.time_ms);
        document.body.dataset.state = 'live';
        render(s);
    }

    /* --- drawing ----------------------------------------------------------------------- */

    function tile(name, value, text, extra) {
        const t = document.querySelector(`.tile[data-figure="${name}"]`);
        if (!t) return;
        t.dataset.value = value === null || value === undefined ? '' : String(value);
        for (const [k, v] of Object.entries(extra || {})) t.dataset[k] = String(v);
        t.querySelector('.value').textContent = text;
    }

    function render(s) {
        const d = s.data;
        const r = s.rates;
        $('#node').textContent = d.node;
        $('#engine').textContent = d.engine;
        $('#uptime').textContent = fmtDuration(d.uptime_ms);
        setStatus(d.draining ? 'draining' : d.ready ? 'live' : 'not ready');

        tile('connections', d.connections, fmtInt(d.connections));
        tile('users_online', d.users_online, fmtInt(d.users_online));
        tile('channels', d.channels, fmtInt(d.channels));
        tile('subscriptions', d.subscriptions, fmtInt(d.subscriptions));
        tile('publish_rate', r ? r.publishes : null, fmtRate(r ? r.publishes : null), {
            total: d.publishes_total,
        });
        tile('delivery_rate', r ? r.deliveries : null, fmtRate(r ? r.deliveries : null), {
            total: d.deliveries_total,
        });
        tile('queue_depth', d.queue_depth, fmtInt(d.queue_depth));
        tile(
            'pool_queue_depth',
            d.pool.queue_depth,
            `${fmtInt(d.pool.queue_depth)} / ${fmtInt(d.pool.capacity)}`,
        );
        tile('output_queued_bytes', d.output_queued_bytes, fmtBytes(d.output_queued_bytes));
        tile('slow_consumers', d.slow_consumers, fmtInt(d.slow_consumers));
        const servers = d.engine_servers || [];
        const pending = servers.reduce((a, x) => a + x.pending_commands, 0);
        const redisTile = document.querySelector('.tile[data-figure="redis_pending"]');
        redisTile.hidden = servers.length === 0;
        tile('redis_pending', servers.length ? pending : null, fmtInt(pending));
        $('#redis-chart').hidden = servers.length === 0;
        $('#cluster').hidden = d.engine !== 'redis';

        renderLoops(d, r);
        renderServers(servers);
        renderCharts(d);
    }

    function renderLoops(d, r) {
        const body = $('#loops tbody');
        body.replaceChildren();
        d.loops.forEach((l, i) => {
            const rate = r ? r.loopDeliveries[i] : null;
            const tr = el('tr', {
                'data-loop': i,
                'data-connections': l.connections,
                'data-queue-depth': l.queue_depth,
                'data-output-queued-bytes': l.output_queued_bytes,
                'data-slow-consumers': l.slow_consumers,
                'data-delivery-rate': rate === null ? '' : rate,
            });
            tr.append(
                el('td', {}, String(i)),
                el('td', {}, fmtInt(l.connections)),
                el('td', {}, fmtInt(l.queue_depth)),
                el('td', {}, fmtBytes(l.output_queued_bytes)),
                el('td', {}, fmtInt(l.slow_consumers)),
                el('td', {}, fmtRate(rate)),
            );
            body.append(tr);
        });
    }

    function renderServers(servers) {
        const body = $('#servers tbody');
        body.replaceChildren();
        for (const sv of servers) {
            const tr = el('tr', {
                'data-server': sv.server,
                'data-up': sv.up,
                'data-pending-commands': sv.pending_commands,
            });
            tr.append(
                el('td', {}, sv.server),
                el('td', {}, sv.up ? 'yes' : 'no'),
                el('td', {}, fmtInt(sv.pending_commands)),
                el('td', {}, fmtInt(sv.max_pending)),
            );
            body.append(tr);
        }
    }

    /* The series of every chart, as [{name, label, value(sample) -> number|null}]. */
    function chartSeries(d) {
        const perLoop = (f) =>
            d.loops.map((_, i) => ({
                name: `loop${i}`,
                label: `loop ${i}`,
                value: (s) => (s.data.loops[i] ? f(s, i) : null),
            }));
        return {
            connections: [
                { name: 'connections', label: 'connections', value: (s) => s.data.connections },
                { name: 'users_online', label: 'users online', value: (s) => s.data.users_online },
            ],
            channels: [{ name: 'channels', label: 'channels', value: (s) => s.data.channels }],
            'publish-rate': [
                {
                    name: 'publishes',
                    label: 'publishes/s',
                    value: (s) => (s.rates ? s.rates.publishes : null),
                },
            ],
            'delivery-rate': perLoop((s, i) => (s.rates ? s.rates.loopDeliveries[i] : null)),
            'loop-queue-depth': perLoop((s, i) => s.data.loops[i].queue_depth),
            'pool-queue-depth': [
                { name: 'pool', label: 'worker queue', value: (s) => s.data.pool.queue_depth },
            ],
            'output-queued-bytes': perLoop((s, i) => s.data.loops[i].output_queued_bytes),
            'slow-consumers': perLoop((s, i) => s.data.loops[i].slow_consumers),
            'redis-pending': (d.engine_servers || []).map((sv, k) => ({
                name: `server${k}`,
                label: sv.server,
                value: (s) => {
                    const x = (s.data.engine_servers || []).find((y) => y.server === sv.server);
                    return x ? x.pending_commands : null;
                },
            })),
        };
    }

    /* A round top for the y axis, so that its half is round too: 2, 4 or 10 times a power of
     * ten, at least 2; for bytes a power of two, at least 1 KiB. */
    function niceMax(v, isBytes) {
        if (isBytes) {
            let top = 1024;
            while (top < v) top *= 2;
            return top;
        }
        if (!(v > 2)) return 2;
        const p = Math.pow(10, Math.floor(Math.log10(v)));
        for (const m of [1, 2, 4, 10]) if (v <= m * p && m * p >= 2) return m * p;
        return 10 * p;
    }

    function renderCharts(d) {
        const all = chartSeries(d);
        for (const svg of document.querySelectorAll('svg[data-chart]')) {
            const series = all[svg.dataset.chart] || [];
            drawChart(svg, series, svg.dataset.chart === 'output-queued-bytes');
        }
    }

    function drawChart(svg, series, isBytes) {
        const fmt = isBytes ? fmtBytes : fmtRate;
        /* One user unit per CSS pixel, so text is never stretched. */
        const w = Math.max(200, Math.round(svg.clientWidth || CHART_W));
        svg.setAttribute('viewBox', `0 0 ${w} ${CHART_H}`);
        svg.replaceChildren();
        /* The last five minutes, or what there is of them (at least MIN_SPAN_MS). */
        const t1 = samples[samples.length - 1].uptime;
        const t0 = Math.min(t1 - MIN_SPAN_MS, Math.max(t1 - WINDOW_MS, samples[0].uptime));
        const span = t1 - t0;
        let max = 0;
        const lines = series.map((sr) => {
            const pts = [];
            for (const s of samples) {
                const v = sr.value(s);
                if (v === null || v === undefined || !Number.isFinite(v)) continue;
                pts.push([s.uptime, v]);
                if (v > max) max = v;
            }
            return { sr, pts };
        });
        const top = niceMax(max, isBytes);
        const plotW = w - PAD_L - PAD_R;
        const plotH = CHART_H - PAD_T - PAD_B;
        const x = (t) => PAD_L + ((t - t0) / span) * plotW;
        const y = (v) => PAD_T + plotH - (v / top) * plotH;
        for (const frac of [0, 0.5, 1]) {
            const gy = PAD_T + plotH - frac * plotH;
            svg.append(svgEl('line', { class: 'grid', x1: PAD_L, x2: w - PAD_R, y1: gy, y2: gy }));
            svg.append(
                svgEl(
                    'text',
                    { class: 'axis', x: PAD_L - 4, y: gy + 3, 'text-anchor': 'end' },
                    fmt(top * frac),
                ),
            );
        }
        const ago = Math.round(span / 1000);
        svg.append(
            svgEl(
                'text',
                { class: 'axis', x: PAD_L, y: CHART_H - 3 },
                ago >= 60 ? `-${Math.round(ago / 60)} min` : `-${ago} s`,
            ),
        );
        svg.append(
            svgEl(
                'text',
                { class: 'axis', x: w - PAD_R, y: CHART_H - 3, 'text-anchor': 'end' },
                'now',
            ),
        );
        let points = 0;
        let legendX = PAD_L;
        lines.forEach(({ sr, pts }, k) => {
            const cls = `s${k % 8}`;
            const lastV = pts.length ? pts[pts.length - 1][1] : null;
            const pl = svgEl('polyline', {
                class: cls,
                points: pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' '),
                'data-series': sr.name,
                'data-points': pts.length,
                'data-last': lastV === null ? '' : lastV,
            });
            svg.append(pl);
            points = Math.max(points, pts.length);
            if (series.length > 1 || sr.label) {
                const label = `${sr.label} ${lastV === null ? '-' : fmt(lastV)}`;
                svg.append(svgEl('rect', { class: cls, x: legendX, y: 3, width: 8, height: 8 }));
                svg.append(svgEl('text', { class: 'legend', x: legendX + 11, y: 10.5 }, label));
                legendX += 20 + label.length * 5.6;
            }
        });
        svg.dataset.points = String(points);
        svg.dataset.max = String(max);
    }

    /* --- the cluster ------------------------------------------------------------------- */

    async function pollNodes() {
        const body = $('#nodes tbody');
        try {
            const n = await api('GET', '/api/nodes');
            const now = Date.now();
            body.replaceChildren();
            for (const node of n.nodes) {
                const tr = el('tr', {
                    'data-node': node.node,
                    'data-connections': node.connections,
                    class: node.node === n.node ? 'self' : '',
                });
                tr.append(
                    el('td', {}, node.node),
                    el('td', {}, fmtInt(node.connections)),
                    el('td', {}, fmtDuration(Math.max(0, node.expires_ms - now))),
                );
                body.append(tr);
            }
            $('#nodes').dataset.nodes = String(n.nodes.length);
        } catch (err) {
            if (err instanceof KeyRefused) throw err;
            $('#nodes').dataset.nodes = '';
            body.replaceChildren(el('tr', {}, ''));
            body.firstChild.append(el('td', { colspan: 3, class: 'error' }, err.message));
        }
    }

    /* --- tools ------------------------------------------------------------------------- */

    function showError(box, err) {
        if (err instanceof KeyRefused) {
            showLogin('The API key is no longer accepted (401). Enter it again.', 'refused');
            return;
        }
        box.dataset.error = err.message;
        box.replaceChildren(el('p', { class: 'error' }, err.message));
    }

    function time(ms) {
        return ms ? new Date(ms).toLocaleString() : '-';
    }

    async function lookUpPresence(ev) {
        ev.preventDefault();
        const box = $('#presence-result');
        const channel = $('#presence-channel').value.trim();
        box.dataset.state = 'asking';
        try {
            const p = await api('GET', `/api/presence?channel=${encodeURIComponent(channel)}`);
            box.replaceChildren();
            box.dataset.channel = p.channel;
            box.dataset.numClients = String(p.num_clients);
            box.dataset.numUsers = String(p.num_users);
            delete box.dataset.error;
            box.append(
                el(
                    'p',
                    {},
                    `${p.channel}: ${fmtInt(p.num_clients)} client(s), ` +
                        `${fmtInt(p.num_users)} user(s)${p.truncated ? ' (list cut short)' : ''}`,
                ),
            );
            const ul = el('ul');
            for (const c of p.clients) {
                ul.append(
                    el(
                        'li',
                        { 'data-user': c.user, 'data-client-id': c.client_id },
                        `${c.user} (${c.client_id}) since ${time(c.connected_at_ms)}`,
                    ),
                );
            }
            box.append(ul);
        } catch (err) {
            showError(box, err);
        }
        box.dataset.state = 'done';
    }

    async function lookUpOnline(ev) {
        ev.preventDefault();
        const box = $('#online-result');
        const user = $('#online-user').value.trim();
        box.dataset.state = 'asking';
        try {
            const o = await api('GET', `/api/online?user=${encodeURIComponent(user)}`);
            box.replaceChildren();
            box.dataset.user = o.user;
            box.dataset.online = String(o.online);
            box.dataset.connections = String(o.connections);
            delete box.dataset.error;
            const on = `${fmtInt(o.connections)} connection(s) on ${o.nodes.join(', ')}`;
            const what = o.online
                ? `online: ${on}, since ${time(o.since_ms)}`
                : `offline; last seen ${time(o.last_seen_ms)}`;
            box.append(el('p', {}, `${o.user} is ${what}`));
        } catch (err) {
            showError(box, err);
        }
        box.dataset.state = 'done';
    }

    async function publish(ev) {
        ev.preventDefault();
        const box = $('#publish-result');
        const channel = $('#publish-channel').value.trim();
        const message = $('#publish-message').value;
        box.dataset.state = 'asking';
        try {
            const p = await api(
                'POST',
                `/api/publish?channel=${encodeURIComponent(channel)}`,
                new TextEncoder().encode(message),
            );
            box.replaceChildren(
                el('p', {}, `published to ${channel}: offset ${p.offset}, epoch ${p.epoch}`),
            );
            box.dataset.channel = channel;
            box.dataset.offset = String(p.offset);
            box.dataset.epoch = p.epoch;
            delete box.dataset.error;
        } catch (err) {
            showError(box, err);
        }
        box.dataset.state = 'done';
    }

    /* --- start ------------------------------------------------------------------------- */

    function start() {
        $('#key-form').addEventListener('submit', (ev) => {
            ev.preventDefault();
            const key = $('#key-input').value.trim();
            if (key) tryKey(key);
        });
        $('#forget').addEventListener('click', () => showLogin('Key forgotten.', 'forgotten'));
        $('#presence-form').addEventListener('submit', lookUpPresence);
        $('#online-form').addEventListener('submit', lookUpOnline);
        $('#publish-form').addEventListener('submit', publish);
        const saved = sessionStorage.getItem(KEY_STORE);
        if (saved) {
            tryKey(saved);
        } else {
            showLogin('', '');
        }
    }

    start();
})();
