'use strict';
/*
 * herald's browser-test helper: Debian's headless Chromium driven by puppeteer-core (which
 * downloads no browser of its own). A test opens a file or a URL, gets the page plus every
 * console error, page error, failed request and error status the page produced, and keeps a
 * PNG screenshot as its artifact:
 *
 *   const { withPage } = require('./lib/browser');
 *   await withPage('report.html', async ({ page, errors, requests }) => { ... },
 *                  { screenshot: 'out/report.png' });
 *
 * Each browser gets a fresh --user-data-dir, removed when it closes. HERALD_CHROMIUM overrides
 * the executable (default /usr/bin/chromium, from Debian's chromium package, which
 * scripts/install-deps.sh installs).
 */
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const puppeteer = require('puppeteer-core');

const CHROMIUM = process.env.HERALD_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
const TIMEOUT_MS = 30000;

/* Starts Chromium with a fresh profile. Resolves to { browser, close }: close() ends the
 * browser and removes the profile, and is safe to call twice. opts.env replaces the browser's
 * environment (e.g. a HOME whose ~/.pki/nssdb trusts a test CA: Chromium on Linux takes
 * certificate trust from the user's NSS database). */
async function launch(opts = {}) {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: run scripts/install-deps.sh (Debian package chromium)`);
  }
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-chromium-'));
  let browser;
  try {
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [...CHROMIUM_ARGS, `--user-data-dir=${profile}`],
      timeout: TIMEOUT_MS,
      ...(opts.env ? { env: opts.env } : {}),
    });
  } catch (err) {
    fs.rmSync(profile, { recursive: true, force: true });
    throw err;
  }
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      await browser.close();
    } finally {
      fs.rmSync(profile, { recursive: true, force: true });
    }
  };
  return { browser, close };
}

/* A file path becomes a file:// URL; anything with a scheme is used as is. */
function toUrl(target) {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) ? target : pathToFileURL(path.resolve(target)).href;
}

/* Opens target in a new page of browser and waits for its load event. Resolves to
 * { page, url, errors, requests }: errors collects console errors, uncaught page errors,
 * failed requests and HTTP error statuses (from before the navigation on, and for as long as
 * the page lives); requests lists every URL the page asked for. */
async function openPage(browser, target, { width = 1100, height = 900 } = {}) {
  const page = await browser.newPage();
  await page.setViewport({ width, height });
  const errors = [];
  const requests = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(`console error: ${msg.text()}`);
  });
  page.on('pageerror', (err) => errors.push(`page error: ${err.message}`));
  page.on('requestfailed', (req) => {
    const why = req.failure() ? req.failure().errorText : 'failed';
    errors.push(`request failed: ${req.url()} (${why})`);
  });
  page.on('response', (res) => {
    if (res.status() >= 400) errors.push(`HTTP ${res.status()}: ${res.url()}`);
  });
  page.on('request', (req) => requests.push(req.url()));
  const url = toUrl(target);
  await page.goto(url, { waitUntil: 'load', timeout: TIMEOUT_MS });
  return { page, url, errors, requests };
}

/* Launches Chromium, opens target, runs fn({ page, url, errors, requests }) and resolves to
 * its result. With opts.screenshot, a full-page PNG is written there after fn, whether fn
 * passed or threw, so a failure leaves a picture too. The browser is always closed. */
async function withPage(target, fn, opts = {}) {
  const { browser, close } = await launch();
  try {
    const ctx = await openPage(browser, target, opts);
    try {
      return await fn(ctx);
    } finally {
      if (opts.screenshot) {
        fs.mkdirSync(path.dirname(path.resolve(opts.screenshot)), { recursive: true });
        await ctx.page.screenshot({ path: opts.screenshot, fullPage: true });
      }
    }
  } finally {
    await close();
  }
}

module.exports = { CHROMIUM, CHROMIUM_ARGS, launch, openPage, withPage, toUrl };
