// The web chat page served at / by `infera serve`, driven in Debian's
// headless Chromium (/usr/bin/chromium) with playwright-core; started by
// tests/e2e/test_web_chat.py, which passes INFERA_URL, INFERA_KEY,
// INFERA_MODEL and INFERA_ARTIFACTS (where the screenshot goes).
// Run: node --test web_chat.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import path from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.INFERA_URL;
const artifacts = process.env.INFERA_ARTIFACTS;

test('type a prompt, watch it stream, stop it, keep the conversation', async () => {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    const problems = [];
    page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    page.on('request', (r) => { if (!r.url().startsWith(base)) problems.push('off-origin request: ' + r.url()); });

    await page.goto(base + '/');
    await page.waitForFunction((m) => document.getElementById('model').textContent.startsWith(m),
                               process.env.INFERA_MODEL);
    await page.fill('#api_key', process.env.INFERA_KEY);
    await page.fill('#system', 'You answer in the words of the King James Bible.');
    await page.fill('#temperature', '0.8');
    // Long enough to be stopped by hand: no end-of-text, 20000 tokens (the
    // server shifts the context).
    await page.fill('#max_tokens', '20000');
    await page.fill('#extra', '{"ignore_eos": true, "seed": 7}');

    // Turn 1: stream, then stop. The page keeps what it received, and turn 2
    // sends it back as history, which must fit the model's 1,024-token context.
    // The server streams thousands of tokens a second, and on a busy machine
    // the stop can land a second or more after the text first grows (in a
    // full suite run the reply outgrew the context and turn 2 got a 400). So
    // the browser's downloads are throttled while turn 1 streams (DevTools'
    // network emulation, 2 kB/s: about 10 SSE chunks a second). The server
    // generates ahead of it; the stop cancels that.
    const cdp = await page.context().newCDPSession(page);
    const throttle = (bytesPerSecond) => cdp.send('Network.emulateNetworkConditions', {
      offline: false, latency: 0, downloadThroughput: bytesPerSecond, uploadThroughput: -1,
    });
    await throttle(2000);
    await page.fill('#prompt', 'In the beginning');
    await page.press('#prompt', 'Enter');
    const first = page.locator('.msg.assistant').nth(0);
    await page.waitForFunction(() => {
      const b = document.querySelectorAll('.msg.assistant')[0];
      return b && b.dataset.state === 'streaming' && b.querySelector('.text').textContent.length > 0;
    });
    assert.equal(await page.locator('#send').isDisabled(), true);
    const early = (await first.locator('.text').textContent()).length;
    // Tokens keep arriving while it streams.
    await page.waitForFunction((n) => {
      const b = document.querySelectorAll('.msg.assistant')[0];
      return b.querySelector('.text').textContent.length > n;
    }, early);
    assert.equal(await first.getAttribute('data-state'), 'streaming');
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelectorAll('.msg.assistant')[0].dataset.state === 'stopped');
    await throttle(-1);
    const stoppedText = await first.locator('.text').textContent();
    assert.ok(stoppedText.length > early, 'the reply grew before the stop');
    assert.equal(await first.locator('.note').textContent(), '(stopped)');
    assert.equal(await page.locator('#send').isDisabled(), false);
    assert.equal(await page.locator('#stop').isDisabled(), true);
    const stats = await page.locator('#stats').textContent();
    assert.match(stats, /TTFT \d+ ms/);
    assert.match(stats, /[\d.]+ tokens\/s/);
    assert.match(stats, /stopped/);
    await page.screenshot({ path: path.join(artifacts, 'web_chat.png'), fullPage: true });

    // Turn 2: a short reply that ends by itself; the usage chunk gives the count.
    await page.fill('#max_tokens', '8');
    await page.fill('#extra', '{"ignore_eos": true}');
    await page.fill('#prompt', 'And God said');
    await page.click('#send');
    // (The fourth bubble: user, assistant, user, then this reply, which turns
    // into an error bubble if the request fails; its text says why.)
    await page.waitForFunction(() => {
      const b = document.querySelectorAll('.msg')[3];
      return b && b.dataset.state && b.dataset.state !== 'streaming';
    });
    const second = page.locator('.msg').nth(3);
    assert.match(await second.getAttribute('data-state'), /^finished: (length|stop)$/, await second.textContent());
    assert.match(await page.locator('#stats').textContent(), /\b[1-8] tokens\b(?! \(so far\))/);
    const secondText = await second.locator('.text').textContent();
    assert.ok(secondText.length > 0);

    // The conversation and the settings survive a reload.
    await page.reload();
    await page.waitForSelector('.msg');
    const roles = await page.locator('.msg').evaluateAll((els) => els.map((e) => e.dataset.role));
    assert.deepEqual(roles, ['user', 'assistant', 'user', 'assistant']);
    assert.equal(await page.locator('.msg.assistant .text').nth(0).textContent(), stoppedText);
    assert.equal(await page.locator('.msg.assistant .text').nth(1).textContent(), secondText);
    assert.equal(await page.locator('#max_tokens').inputValue(), '8');
    assert.equal(await page.locator('#system').inputValue(), 'You answer in the words of the King James Bible.');

    // A bad setting is shown, not sent.
    await page.fill('#extra', '{"max_token": 3}');
    await page.fill('#prompt', 'Amen');
    await page.click('#send');
    await page.waitForSelector('.msg.error');
    assert.match(await page.locator('.msg.error').textContent(), /Unrecognized request argument supplied: max_token/);

    // New chat empties it, for good.
    await page.click('#new-chat');
    assert.equal(await page.locator('.msg').count(), 0);
    await page.reload();
    await page.waitForFunction(() => document.getElementById('model').textContent !== 'connecting…');
    assert.equal(await page.locator('.msg').count(), 0);

    assert.deepEqual(problems.filter((p) => !p.includes('400')), []);
  } finally {
    await browser.close();
  }
});
