// Drives Debian's chromium through playwright-core and asserts on the rendered status page.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { chromium } = require(process.env.PW_DIR + '/node_modules/playwright-core');

(async () => {
  const api = JSON.parse(fs.readFileSync(process.env.CHECKS_JSON, 'utf8'));
  const failing = api.checks.filter((c) => c.status === 'FAIL');
  assert.ok(failing.length > 0, 'this host should have at least one failing check (no vmx/svm)');

  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    const origin = new URL(process.env.PAGE_URL).origin;
    const foreign = [];
    page.on('request', (r) => { if (!r.url().startsWith(origin)) foreign.push(r.url()); });
    const resp = await page.goto(process.env.PAGE_URL, { waitUntil: 'load' });
    assert.equal(resp.status(), 200);

    // The verdict is on top and says CLOSED, naming what blocks it.
    const verdict = page.locator('#verdict');
    await verdict.waitFor();
    const vtext = await verdict.innerText();
    assert.match(vtext, /VM gate CLOSED/);
    assert.equal(await verdict.getAttribute('data-open'), 'false');
    for (const b of api.gate.blockers) assert.ok(vtext.includes(b), `verdict names blocker ${b}`);
    const vbox = await verdict.boundingBox();
    assert.ok(vbox.y < 120, 'verdict is at the top of the page');

    // Failing checks come first, each with its hint visible.
    const first = page.locator('article.check').first();
    assert.equal(await first.getAttribute('data-status'), 'FAIL');
    for (const c of failing) {
      const card = page.locator(`article.check[data-check="${c.check}"]`);
      assert.equal(await card.getAttribute('data-status'), 'FAIL');
      const hint = card.locator('.hint-text');
      assert.ok(await hint.isVisible(), `hint of ${c.check} is visible`);
      assert.equal((await hint.innerText()).trim(), c.hint);
      assert.match(await card.locator('.times').innerText(), /status since \d{4}-\d\d-\d\d/);
    }
    // Auto-refresh without JavaScript, no external assets.
    assert.equal(await page.locator('meta[http-equiv="refresh"]').count(), 1);
    assert.equal(await page.locator('script').count(), 0);
    assert.deepEqual(foreign, []);

    await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
    console.log(`page ok: ${failing.length} failing check(s), screenshot ${process.env.SCREENSHOT}`);
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
