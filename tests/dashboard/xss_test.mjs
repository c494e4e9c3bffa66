// Security round two, H4: a user's study whose categorical value is HTML
// (an <img onerror=...>) must not run script in an admin's browser when
// the admin hovers over the contour chart. Two controls are checked: the
// tooltip shows the value as text (formatters escape it), and the page is
// served with a Content-Security-Policy that forbids inline script. Also:
// nosniff and frame-ancestors, and a path with a NUL byte is refused
// rather than served as JavaScript. Ask/tell only (no worker).
//
// usage: node xss_test.mjs --scheduler=BIN --dashboard=DIR
//          --node-modules=DIR --out=DIR [--chromium=PATH]
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Harness, check, checkEq, parseArgs } from './harness.mjs';

const args = parseArgs(process.argv.slice(2), ['scheduler', 'dashboard', 'node-modules', 'out']);
mkdirSync(args.out, { recursive: true });

const EVIL = '<img src=x onerror="window.__pwned=1">';
const SPEC = {
  name: 'alice-xss',
  objective: { metric: 'loss', goal: 'MINIMIZE' },
  searchSpace: [
    { name: 'c', categorical: { values: [EVIL, 'plain'] } },
    { name: 'x', float: { min: 0, max: 1 } },
  ],
  searcher: { random: { seed: 1 } },
  budget: { maxTrials: 8, maxParallelTrials: 8 },
};

const h = new Harness();
const t0 = Date.now();
let page;
let ok = false;
try {
  const auth = h.writeTokens([['admin', 'admin'], ['user', 'alice']]);
  const base = await h.startScheduler(args.scheduler, [`--auth-tokens=${auth}`, `--dashboard-dir=${args.dashboard}`]);

  const root = await fetch(`${base}/`);
  const csp = root.headers.get('content-security-policy') ?? '';
  check(/script-src 'self'(;|$)/.test(csp) && !/script-src[^;]*unsafe-inline/.test(csp), `CSP allows scripts from the origin only: ${csp}`);
  check(/frame-ancestors 'none'/.test(csp), 'CSP forbids framing');
  checkEq(root.headers.get('x-content-type-options'), 'nosniff', 'nosniff');
  const nul = await fetch(`${base}/index.html%00.js`);
  check(!(nul.headers.get('content-type') ?? '').includes('javascript'), `/index.html%00.js is not served as JavaScript (${nul.status} ${nul.headers.get('content-type')})`);

  // Alice's study, evaluated by ask/tell.
  await h.api('CreateStudy', { spec: SPEC }, 'alice');
  const asked = await h.api('SuggestTrials', { study: SPEC.name, count: 8, clientId: 'a' }, 'alice');
  for (const t of asked.trials) {
    await h.api('CompleteTrial', { study: SPEC.name, trial: t.number, finalMetrics: { loss: Number(t.params.x.doubleValue ?? 0.5) } }, 'alice');
  }
  check(asked.trials.some((t) => t.params.c.stringValue === EVIL), 'a trial has the HTML value');

  // The admin looks at it and hovers over every contour cell.
  const context = await h.browser(args['node-modules'], args.chromium);
  page = context.pages()[0] ?? await context.newPage();
  const violations = [];
  page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) violations.push(m.text()); });
  await page.goto(base + '/');
  await page.getByTestId('login-token').fill(h.tokens.admin);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('whoami').filter({ hasText: 'admin (admin)' }).waitFor({ timeout: 15000 });
  await page.goto(`${base}/#/study/${SPEC.name}`);
  await page.waitForFunction(() => window.__dial.loaded === true, null, { timeout: 30000 });
  // The contour of the categorical parameter against x.
  await page.getByTestId('contour-x').selectOption('c');
  await page.getByTestId('contour-y').selectOption('x');
  const cells = await page.evaluate(() => window.__dial.charts.contour.getOption().series[0].data.length);
  check(cells > 0, `the contour has ${cells} cells`);
  const tips = [];
  for (let k = 0; k < cells; k++) {
    await page.evaluate((i) => window.__dial.charts.contour.dispatchAction({ type: 'showTip', seriesIndex: 0, dataIndex: i }), k);
    tips.push(await page.evaluate(() => [...document.querySelectorAll('div')].filter((d) => /mean/.test(d.textContent) && d.style.position === 'absolute').map((d) => d.textContent).join('|')));
  }
  // Give any injected handler the chance to run: an image error fires
  // within a task or two; the page's own next frame is after it.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))));
  await page.screenshot({ path: join(args.out, 'xss-contour.png'), fullPage: true });
  check(tips.some((t) => t.includes(EVIL)), `the tooltip shows the value as text (${JSON.stringify(tips).slice(0, 400)})`);
  check((await page.evaluate(() => window.__pwned)) === undefined, 'the study\'s HTML ran no script');
  checkEq(await page.evaluate(() => document.querySelectorAll('img[src="x"]').length), 0, 'no element was made from the value');
  checkEq(violations, [], 'no CSP violation by the dashboard itself');
  ok = true;
} catch (e) {
  console.error(e.stack ?? e);
  if (page) await page.screenshot({ path: join(args.out, 'xss-failure.png'), fullPage: true }).catch(() => undefined);
  console.error(`--- scheduler log (tail)\n${h.log('scheduler')}`);
} finally {
  await h.close();
}
console.log(`${ok ? 'PASS' : 'FAIL'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(ok ? 0 : 1);
