'use strict';
/*
 * check_loadgen_report: renders a herald-loadgen --report page in headless Chromium and checks
 * that it shows the run loadgen measured: the numbers in the charts' data attributes equal
 * those of loadgen's own text summary and --json document, there is one point per second of
 * the measured phase, the page is self-contained (no script, nothing fetched but the file
 * itself) and logs no error. Keeps a full-page screenshot.
 *
 * Usage: node check_loadgen_report.js --report R.html --summary SUMMARY.txt --json RUN.json
 *                                     --duration SECONDS --screenshot OUT.png
 * Prints "ok N - what" per check and exits 1 at the first failure.
 */
const fs = require('node:fs');
const { withPage } = require('./lib/browser');

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || argv[i + 1] === undefined) {
      throw new Error(`bad argument ${argv[i]}`);
    }
    args[argv[i].slice(2)] = argv[i + 1];
  }
  for (const need of ['report', 'summary', 'json', 'duration', 'screenshot']) {
    if (!args[need]) throw new Error(`missing --${need}`);
  }
  return args;
}

/* The figures of loadgen's text summary (lg_report_summary), as printed. */
function parseSummary(text) {
  const grab = (re, what) => {
    const m = text.match(re);
    if (!m) throw new Error(`summary has no ${what}:\n${text}`);
    return m;
  };
  const dl = grab(/^ {2}deliveries +(\d+) of (\d+) expected/m, 'deliveries line');
  const pub = grab(/^ {2}publishes +(\d+) sent, (\d+) ok/m, 'publishes line');
  const lat = grab(
    /^ {2}latency processed +p50 ([\d.]+) +p90 ([\d.]+) +p99 ([\d.]+) +p999 ([\d.]+) +max ([\d.]+) ms +\((\d+) samples\)/m,
    'latency processed line');
  return {
    deliveries: Number(dl[1]),
    publishes: Number(pub[1]),
    p50: lat[1], p90: lat[2], p99: lat[3], p999: lat[4], max: lat[5],
    latencySamples: Number(lat[6]),
  };
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

/* Everything the checks need, read from the rendered page in one go. */
function readPage() {
  const num = (el, name) => Number(el.getAttribute(name));
  const points = (series) => [...document.querySelectorAll(`[data-series="${series}"]`)].map((el) => ({
    tag: el.tagName.toLowerCase(),
    chart: el.closest('svg').getAttribute('data-chart'),
    phase: el.getAttribute('data-phase'),
    t0: num(el, 'data-t0'),
    t1: num(el, 'data-t1'),
    value: num(el, 'data-value'),
    text: el.getAttribute('data-value'),
  }));
  const hist = document.querySelector('svg[data-chart="latency-histogram"]');
  const figures = {};
  for (const tr of document.querySelectorAll('tr[data-figure]')) {
    figures[tr.getAttribute('data-figure')] = tr.getAttribute('data-value');
  }
  return {
    charts: [...document.querySelectorAll('svg[data-chart]')].map((svg) => {
      const box = svg.getBoundingClientRect();
      return { name: svg.getAttribute('data-chart'), width: box.width, height: box.height };
    }),
    scripts: document.querySelectorAll('script').length,
    external: [...document.querySelectorAll('[src], link[href], [href^="http"]')].map((el) => el.outerHTML.slice(0, 120)),
    status: document.querySelector('[data-status]') && document.querySelector('[data-status]').getAttribute('data-status'),
    deliveries: points('deliveries'),
    publishes: points('publishes'),
    connects: points('connects'),
    ready: points('ready'),
    failures: points('connect_failures'),
    disconnects: points('disconnects'),
    errors: points('errors'),
    p50: points('p50'),
    p90: points('p90'),
    p99: points('p99'),
    histogram: points('histogram'),
    hist: hist && {
      count: hist.getAttribute('data-count'),
      p50: hist.getAttribute('data-p50-ms'),
      p90: hist.getAttribute('data-p90-ms'),
      p99: hist.getAttribute('data-p99-ms'),
      max: hist.getAttribute('data-max-ms'),
    },
    figures,
  };
}

const sum = (list) => list.reduce((a, p) => a + p.value, 0);
/* A page latency (six decimals, exact for whole nanoseconds) as the summary's printf("%.3f")
 * prints the same double: toFixed, except at an exact tie, which glibc rounds to even and
 * toFixed rounds up. */
function ms3(text) {
  const x = Number(text);
  const halves = x * 2000;
  if (Number.isInteger(halves) && halves % 2 === 1) {
    const below = (halves - 1) / 2;
    return ((below % 2 === 0 ? below : below + 1) / 1000).toFixed(3);
  }
  return x.toFixed(3);
}

function checkPage(d, summary, json, duration) {
  const want = ['latency', 'deliveries', 'publishes', 'connections', 'errors', 'latency-histogram'];
  check(JSON.stringify(d.charts.map((c) => c.name)) === JSON.stringify(want), 'the six charts, in order', d.charts);
  check(d.charts.every((c) => c.width > 300 && c.height > 80), 'every chart is rendered with a real size', d.charts);
  check(d.scripts === 0 && d.external.length === 0, 'no script and no external resource in the page', d.external);
  check(d.status === 'ok', 'the verdict says ok', d.status);

  // Intervals: contiguous from 0, one per second of the measured phase.
  const iv = d.deliveries;
  check(iv.length > 0 && iv[0].t0 === 0 && iv.every((p, i) => i === 0 || p.t0 === iv[i - 1].t1),
    'intervals run contiguously from 0 s', iv.map((p) => [p.t0, p.t1]));
  const measure = iv.filter((p) => p.phase === 'measure');
  check(measure.length === duration, `${duration} measured intervals for --duration ${duration}`, measure.length);
  check(measure.every((p) => p.t1 - p.t0 > 0.9 && p.t1 - p.t0 < 1.6), 'each measured interval is about a second',
    measure.map((p) => p.t1 - p.t0));
  for (const s of ['publishes', 'connects', 'ready', 'failures', 'disconnects', 'errors']) {
    check(d[s].length === iv.length, `series ${s} has a point for every interval`, [d[s].length, iv.length]);
  }
  const p99m = d.p99.filter((p) => p.phase === 'measure');
  check(p99m.length === duration, 'a p99 point for every measured second', p99m.length);

  // The totals of the charts are loadgen's own totals.
  check(sum(iv) === summary.deliveries, `deliveries in the chart add up to the summary's ${summary.deliveries}`, sum(iv));
  check(String(summary.deliveries) === d.figures.deliveries, 'the results table shows the same deliveries', d.figures.deliveries);
  check(sum(d.publishes) === summary.publishes, `publishes add up to the summary's ${summary.publishes}`, sum(d.publishes));
  check(sum(d.connects) === json.connect.handshakes, `connects add up to the JSON's ${json.connect.handshakes} handshakes`, sum(d.connects));
  check(sum(d.errors) === json.errors.total && sum(d.disconnects) === json.disconnects.total &&
    sum(d.failures) === json.connect.failures, 'errors, disconnects and connect failures add up to the JSON');
  const clients = json.clients.total;
  check(measure.every((p) => d.ready[iv.indexOf(p)].value === clients),
    `all ${clients} clients ready at the end of every measured interval`, d.ready.map((p) => p.value));

  // Latency: the histogram and the table carry the summary's figures.
  check(d.hist && Number(d.hist.count) === summary.latencySamples, `histogram count = the summary's ${summary.latencySamples} samples`, d.hist);
  check(sum(d.histogram) === summary.latencySamples, 'histogram bars add up to every sample', sum(d.histogram));
  check(ms3(d.hist.p99) === summary.p99, `histogram p99 ${d.hist.p99} ms prints as the summary's ${summary.p99}`);
  check(ms3(d.hist.p50) === summary.p50 && ms3(d.hist.p90) === summary.p90 && ms3(d.hist.max) === summary.max,
    'histogram p50, p90 and max match the summary', [d.hist, summary]);
  check(ms3(d.figures.latency_p99_ms) === summary.p99, 'the results table shows the same p99', d.figures.latency_p99_ms);
  check(Math.abs(Number(d.hist.p99) - json.latency_ms.p99) < 1e-6, 'histogram p99 = the JSON p99', [d.hist.p99, json.latency_ms.p99]);
  const maxMs = Number(d.hist.max);
  check(d.p99.every((p, i) => d.p50[i].value <= d.p90[i].value && d.p90[i].value <= p.value && p.value <= maxMs && p.value > 0),
    'per-interval p50 <= p90 <= p99 <= the run max', d.p99.map((p) => p.value));
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const summary = parseSummary(fs.readFileSync(args.summary, 'utf8'));
  const json = JSON.parse(fs.readFileSync(args.json, 'utf8'));
  const duration = Number(args.duration);
  await withPage(args.report, async ({ page, url, errors, requests }) => {
    const d = await page.evaluate(readPage);
    checkPage(d, summary, json, duration);
    check(requests.every((r) => r === url), 'the page fetched nothing but itself', requests);
    check(errors.length === 0, 'no console error, page error or failed request', errors);
  }, { screenshot: args.screenshot });
  const size = fs.statSync(args.screenshot).size;
  check(size > 20000, `screenshot kept at ${args.screenshot}`, size);
  console.log(`${passed} passed, 0 failed`);
}

main().catch((err) => {
  console.error(err.message || err);
  console.log(`${passed} passed, 1 failed`);
  process.exit(1);
});
