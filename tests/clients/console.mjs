// The web console in a real browser: headless Chromium driven by
// Playwright (playwright-core, with the system's Chromium at CHROMIUM_PATH).
// Usage: node console.mjs BASE_URL PASSWORD SCREENSHOT_DIR SESSION_ID
// Opens the console without logging in (sent to the login page), logs in,
// reads the overview's figures, opens the conversation SESSION_ID and a
// tool call in it, approves the waiting pairing request, downloads the
// usage CSV and logs out, with a screenshot of each page. Prints what it
// saw as JSON for tests/gateway/console.rs to check.

import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

const [base, password, shots, sessionId] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  // Containers run as root, where Chromium's sandbox cannot start.
  args: ['--no-sandbox'],
});
const seen = {};
try {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 860 },
    acceptDownloads: true,
  });
  const page = await context.newPage();
  const path = () => new URL(page.url()).pathname;
  const figure = async (key) => (await page.locator(`[data-k="${key}"]`).first().textContent()).trim();
  const shoot = (name) => page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });

  await page.goto(`${base}/console`);
  seen.unauthenticated = path();
  await shoot('login');

  await page.fill('#password', password);
  await Promise.all([page.waitForURL(`${base}/console`), page.click('button[type=submit]')]);
  seen.afterLogin = path();
  seen.overview = {};
  for (const key of ['turns-24h', 'latency-p50', 'latency-p95', 'tokens-in-today', 'tokens-out-today',
    'cost-today', 'cache-share-today', 'outbox-backlog', 'queue-depth']) {
    seen.overview[key] = await figure(key);
  }
  await shoot('overview');

  await page.click('header >> text=Conversations');
  await page.waitForURL(`${base}/console/conversations`);
  await shoot('conversations');
  await Promise.all([
    page.waitForURL(`${base}/console/conversations/${sessionId}`),
    page.click(`a[href="/console/conversations/${sessionId}"]`),
  ]);
  const call = page.locator('details', { hasText: 'tool call: calculator' }).first();
  await call.locator('summary').click();
  seen.conversation = {
    sessionId: await figure('session-id'),
    turns: await page.locator('section.turn').count(),
    toolCall: (await call.locator('pre').textContent()).trim(),
  };
  await page.locator('details', { hasText: 'tool result' }).first().locator('summary').click();
  await shoot('conversation');

  await page.click('header >> text=People');
  await page.waitForURL(`${base}/console/people`);
  const codes = await page.locator('tr[data-pairing]').evaluateAll(
    (rows) => rows.map((row) => row.dataset.pairing));
  await shoot('people');
  await Promise.all([
    page.waitForURL(/notice=/),
    page.locator('tr[data-pairing] button', { hasText: 'Approve' }).first().click(),
  ]);
  seen.pairing = { codes, notice: await figure('notice') };

  await page.click('header >> text=Usage');
  await page.waitForURL(`${base}/console/usage`);
  await shoot('usage');
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.click('a[href="/console/usage.csv"]'),
  ]);
  seen.csvHeader = readFileSync(await download.path(), 'utf8').split('\r\n')[0];

  await Promise.all([page.waitForURL(`${base}/console/login`), page.click('header >> text=Log out')]);
  await page.goto(`${base}/console`);
  seen.loggedOut = path();
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
