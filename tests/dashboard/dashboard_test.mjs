// The dashboard in headless Chromium against a real dial-scheduler (tokens:
// an admin and a viewer) with an ASHA study and a PBT study run by a real
// dial-worker and dial-train on the synthetic dataset. Checks what each page
// draws against what the JSON API says, the table's filters, live updates,
// PBT over time, and that a viewer cannot stop a study. Screenshots
// of each page go to --out.
//
// usage: node dashboard_test.mjs --scheduler=BIN --worker=BIN --trainer=BIN
//          --dashboard=DIR --node-modules=DIR --out=DIR [--chromium=PATH]
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Harness, check, checkEq, parseArgs, seriesLengths, waitFor } from './harness.mjs';

const args = parseArgs(process.argv.slice(2), ['scheduler', 'worker', 'trainer', 'dashboard', 'node-modules', 'out']);
mkdirSync(args.out, { recursive: true });

const trainer = (steps, extra = {}) => ({ dataset: 'synthetic', steps, eval_every: 50, batch_size: 512, threads: 1, ...extra });
const ASHA = {
  name: 'dash-asha',
  objective: { metric: 'val_accuracy', goal: 'MAXIMIZE' },
  searchSpace: [
    { name: 'lr', float: { min: 1e-3, max: 0.3, scale: 'LOG' } },
    { name: 'units', int: { min: 16, max: 256, scale: 'LOG' } },
  ],
  searcher: { random: { seed: 5 } },
  scheduler: { asha: { minSteps: 100, maxSteps: 400, reductionFactor: 2, promotion: true } },
  budget: { maxTrials: 30, maxParallelTrials: 2 },
  trial: { trainer: trainer(400) },
};
const PBT = {
  name: 'dash-pbt',
  objective: { metric: 'val_accuracy', goal: 'MAXIMIZE' },
  searchSpace: [
    { name: 'lr', float: { min: 1e-3, max: 0.3, scale: 'LOG' } },
    { name: 'momentum', float: { min: 0.5, max: 0.99 } },
  ],
  searcher: { random: { seed: 3 } },
  scheduler: { pbt: { perturbationInterval: 100, quantile: 0.25, seed: 3 } },
  budget: { maxTrials: 4, maxParallelTrials: 4 },
  trial: { trainer: trainer(800, { optimizer: 'sgd', units: 64 }) },
};
// A trial that fails at once, for the trial page's error and stderr tail.
const FAIL = {
  name: 'dash-fail',
  objective: { metric: 'loss', goal: 'MINIMIZE' },
  searchSpace: [{ name: 'x', float: { min: 0, max: 1 } }],
  budget: { maxTrials: 1, maxParallelTrials: 1, maxFailuresPerTrial: 0 },
  trial: { command: { argv: ['/bin/sh', '-c', 'echo boom-from-stderr >&2; exit 3'] } },
};
const RUNGS = [100, 200];

const h = new Harness();
const t0 = Date.now();
let page;
let ok = false;
try {
  const auth = h.writeTokens([['admin', 'admin'], ['viewer', 'viewer'], ['worker', 'worker']]);
  const base = await h.startScheduler(args.scheduler, [`--auth-tokens=${auth}`, `--dashboard-dir=${args.dashboard}`]);
  console.log(`scheduler at ${base} (${h.dir})`);

  // No token, no API; the dashboard itself is public.
  checkEq((await fetch(`${base}/api/v1/whoami`)).status, 401, 'whoami without a session is 401');
  checkEq((await fetch(`${base}/`)).status, 200, 'the dashboard is served at /');

  await h.api('CreateStudy', { spec: ASHA }, 'admin');
  await h.api('CreateStudy', { spec: PBT }, 'admin');
  await h.api('CreateStudy', { spec: FAIL }, 'admin');
  h.startWorker('worker', args.worker, ['--slots=4', '--cpus=2', `--trainer=${args.trainer}`, '--acquire-wait-ms=1000',
    '--allow-command=/bin/sh', '--label=pool=dash'], h.tokens.worker);

  const context = await h.browser(args['node-modules'], args.chromium);
  page = context.pages()[0] ?? await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const shot = (name) => page.screenshot({ path: join(args.out, `${name}.png`), fullPage: true });
  const login = async (who) => {
    await page.goto(base + '/');
    await page.getByTestId('login-token').fill(h.tokens[who]);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('whoami').filter({ hasText: `${who} (${who})` }).waitFor({ timeout: 15000 });
  };
  const openStudy = async (name) => {
    await page.goto(`${base}/#/study/${name}`);
    await page.waitForFunction(() => window.__dial.interactive === true, null, { timeout: 30000 });
  };

  // ---- login page; a viewer watches the running ASHA study and may not stop it ----
  await page.goto(base + '/');
  await page.getByTestId('login').waitFor({ timeout: 15000 });
  await page.getByTestId('login-token').fill('not-a-token');
  await page.getByTestId('login-submit').click();
  await page.getByTestId('login-error').filter({ hasText: /UNAUTHENTICATED|401/ }).waitFor({ timeout: 15000 });
  await shot('login');
  check(true, 'a wrong token is refused on the login form');
  await login('viewer');

  await waitFor(async () => (await h.api('GetStudy', { study: 'dash-asha' }, 'admin')).study.trialCounts.RUNNING > 0, 60000, 'ASHA trials to run');
  await openStudy('dash-asha');
  await page.evaluate(() => { window.__marker = 'no reload'; });
  const events0 = Number(await page.getByTestId('live-events').textContent());
  const history0 = (await seriesLengths(page, 'history'))[0];
  const rows0 = Number(await page.getByTestId('table-count').getAttribute('data-rows'));
  await page.waitForFunction(([e, n, r]) => {
    const events = Number(document.querySelector('[data-testid=live-events]').textContent);
    const points = window.__dial.charts.history?.getOption().series[0].data.length / 2;
    const rows = Number(document.querySelector('[data-testid=table-count]').dataset.rows);
    return events > e + 2 && (points > n || rows > r);
  }, [events0, history0, rows0], { timeout: 90000 });
  const events1 = Number(await page.getByTestId('live-events').textContent());
  checkEq(await page.evaluate(() => window.__marker), 'no reload', 'live updates arrive without a reload');
  check(events1 > events0, `events counted live (${events0} -> ${events1}); points or rows grew`);
  checkEq(await page.getByTestId('live-status').textContent(), 'live', 'the event stream is open');

  page.once('dialog', (d) => d.accept());
  await page.getByTestId('stop-study').click();
  await page.getByTestId('stop-error').filter({ hasText: '403' }).waitFor({ timeout: 15000 });
  const stopText = await page.getByTestId('stop-error').textContent();
  check(/PERMISSION_DENIED/.test(stopText), `the viewer sees the API's refusal: "${stopText}"`);
  await shot('study-viewer-stop-403');
  checkEq((await h.api('GetStudy', { study: 'dash-asha' }, 'admin')).study.state, 'STUDY_ACTIVE', 'the study still runs after the viewer\'s Stop');

  // ---- the admin, once both studies are done ----
  await page.getByTestId('logout').click();
  await page.getByTestId('login').waitFor({ timeout: 15000 });
  check(true, 'logout shows the login form');
  await login('admin');

  for (const s of ['dash-asha', 'dash-pbt', 'dash-fail']) {
    await waitFor(async () => (await h.api('GetStudy', { study: s }, 'admin')).study.state === 'STUDY_COMPLETED', 180000, `${s} to complete`);
  }
  console.log(`studies completed after ${((Date.now() - t0) / 1000).toFixed(0)} s`);

  // Studies page.
  await page.goto(base + '/#/');
  await page.getByTestId('study-row').first().waitFor({ timeout: 15000 });
  checkEq(await page.getByTestId('study-row').count(), (await h.api('ListStudies', {}, 'admin')).studies.length, 'one row per study');
  const bestAsha = (await h.api('GetBestTrials', { study: 'dash-asha', count: 1 }, 'admin')).trials[0];
  const bestCell = await page.locator('[data-study=dash-asha] [data-testid=best-value]').textContent();
  check(Math.abs(Number(bestCell) - bestAsha.objectiveValue) < 1e-3, `best value shown (${bestCell})`);
  await shot('studies');

  // ASHA study page: every chart against TrialTable.
  await openStudy('dash-asha');
  await page.waitForFunction(() => window.__dial.loaded === true, null, { timeout: 30000 });
  const table = await h.getJson('TrialTable?study=dash-asha', 'admin');
  const n = table.number.length;
  const withValue = table.value.map((v, i) => (v === null ? -1 : i)).filter((i) => i >= 0);
  checkEq((await seriesLengths(page, 'history'))[0], withValue.length, 'history: one point per trial with a value');
  for (const p of table.params) {
    const expected = withValue.filter((i) => table.param[p.name][i] !== null).length;
    checkEq((await seriesLengths(page, `slice:${p.name}`))[0], expected, `slice ${p.name}: one point per trial with a value`);
  }
  checkEq((await seriesLengths(page, 'parallel'))[0], Math.min(2000, withValue.length), 'parallel coordinates: one line per trial with a value');
  const contourCount = await page.evaluate(() => window.__dial.charts.contour.getOption().series[0].data.reduce((a, d) => a + d[3], 0));
  checkEq(contourCount, withValue.length, 'contour: the bins hold every trial with a value');
  const importance = await h.api('GetParameterImportance', { study: 'dash-asha' }, 'admin');
  checkEq((await seriesLengths(page, 'importance'))[0], importance.params.length, 'importance: one bar per parameter');
  checkEq(await page.evaluate(() => window.__dial.charts.importance.getOption().series[0].data), [...importance.params].reverse().map((p) => p.importance), 'importance: the API\'s values');
  // Learning curves: each shown trial's reports of the objective metric.
  const curves = await page.evaluate(() => window.__dial.charts.curves.getOption().series.map((s) => ({
    name: s.name, points: s.data.length, rungs: s.markLine?.data?.length ?? 0, mark: s.markPoint?.data?.length ?? 0 })));
  let expectedPoints = 0, expectedMarks = 0;
  for (const c of curves) {
    const t = (await h.api('GetTrial', { study: 'dash-asha', trial: c.name.slice(1), historyPageSize: 10000 }, 'admin')).trial;
    expectedPoints += t.metricHistory.filter((p) => 'val_accuracy' in p.metrics).length;
    if ((t.state === 'STOPPED' || t.state === 'PAUSED') && t.metricHistory.length) expectedMarks++;
  }
  checkEq(curves.reduce((a, c) => a + c.points, 0), expectedPoints, `learning curves: every report of ${curves.length} trials`);
  checkEq(curves.reduce((a, c) => a + c.mark, 0), expectedMarks, 'learning curves: stopped and paused trials marked');
  checkEq(curves[0].rungs, RUNGS.length, 'learning curves: the ASHA rungs drawn');
  checkEq(Number(await page.getByTestId('table-count').getAttribute('data-rows')), n, 'table: every trial');
  await shot('study-asha');
  // The export links download with the session cookie.
  const exported = (testid) => page.evaluate(async (t) => {
    const r = await fetch(document.querySelector(`[data-testid=${t}]`).href);
    return [r.status, (await r.text()).trim().split('\n').length];
  }, testid);
  checkEq(await exported('export-csv'), [200, n + 1], 'CSV export link: a header and a row per trial');
  checkEq(await exported('export-jsonl'), [200, n], 'JSON lines export link: a line per trial');

  // Table filters and sort, against the API's data filtered the same way.
  const rowNumbers = () => page.evaluate(() => window.__dial.table.rowNumbers());
  for (const s of ['PENDING', 'RUNNING', 'STOPPED', 'PAUSED', 'FAILED']) await page.getByTestId(`filter-state-${s}`).uncheck();
  const lrs = withValue.map((i) => table.param.lr[i]).sort((a, b) => a - b);
  const lo = lrs[Math.floor(lrs.length / 4)], hi = lrs[Math.floor((3 * lrs.length) / 4)];
  await page.getByTestId('filter-min-lr').fill(String(lo));
  await page.getByTestId('filter-max-lr').fill(String(hi));
  const want = table.number.filter((_, i) => table.state[i] === 'COMPLETED' && table.param.lr[i] >= lo && table.param.lr[i] <= hi);
  await page.waitForFunction((m) => document.querySelector('[data-testid=table-count]').dataset.rows === String(m), want.length, { timeout: 10000 });
  checkEq(await rowNumbers(), want, `filter COMPLETED and ${lo.toFixed(4)} <= lr <= ${hi.toFixed(4)}`);
  checkEq(await page.getByTestId('trial-row').count(), Math.min(25, want.length), 'the first page of filtered rows is drawn');
  await page.getByTestId('sort-value').click();
  const byValue = [...want].sort((a, b) => {
    const va = table.value[table.number.indexOf(a)], vb = table.value[table.number.indexOf(b)];
    return va === vb ? a - b : vb - va;
  });
  checkEq(await rowNumbers(), byValue, 'sorted by value, best first');
  await page.getByTestId('filter-state-STOPPED').check();
  await page.getByTestId('filter-min-lr').fill('');
  await page.getByTestId('filter-max-lr').fill('');
  await page.getByTestId('filter-min-units').fill('64');
  const want2 = table.number.filter((_, i) => ['COMPLETED', 'STOPPED'].includes(table.state[i]) && table.param.units[i] >= 64);
  await page.waitForFunction((m) => document.querySelector('[data-testid=table-count]').dataset.rows === String(m), want2.length, { timeout: 10000 });
  checkEq([...(await rowNumbers())].sort((a, b) => a - b), want2, 'filter COMPLETED or STOPPED with units >= 64');

  // PBT over time: every exploit of GetTrial's lineage is an arrow.
  await openStudy('dash-pbt');
  await page.waitForFunction(() => window.__dial.loaded === true, null, { timeout: 30000 });
  const pbtTable = await h.getJson('TrialTable?study=dash-pbt', 'admin');
  let exploits = 0;
  for (const num of pbtTable.number) {
    exploits += (await h.api('GetTrial', { study: 'dash-pbt', trial: String(num) }, 'admin')).trial.lineage.length;
  }
  check(exploits > 0, `PBT exploited (${exploits} lineage entries)`);
  const graph = await page.evaluate(() => {
    const series = window.__dial.charts.population.getOption().series;
    return { lines: series.filter((s) => s.type === 'line').length, arrows: series.find((s) => s.name === 'exploits').data.length };
  });
  checkEq(graph.arrows, exploits, 'PBT over time: one arrow per exploit');
  checkEq(graph.lines, pbtTable.number.length, 'PBT over time: a line per member');
  await shot('study-pbt');

  // Trial page of the best ASHA trial.
  const best = (await h.api('GetTrial', { study: 'dash-asha', trial: bestAsha.number, historyPageSize: 10000 }, 'admin')).trial;
  await page.goto(`${base}/#/study/dash-asha/trial/${best.number}`);
  await page.getByTestId('chart-trial-history').waitFor({ timeout: 15000 });
  await page.waitForFunction(() => !!window.__dial.charts['trial-history'], null, { timeout: 15000 });
  const metrics = new Set(best.metricHistory.flatMap((p) => Object.keys(p.metrics)));
  const lens = await seriesLengths(page, 'trial-history');
  checkEq(lens.length, metrics.size, 'trial page: one line per metric');
  checkEq(lens[0], best.metricHistory.filter((p) => 'val_accuracy' in p.metrics).length, 'trial page: every report of the objective');
  checkEq(await page.getByTestId('trial-state').textContent(), best.state, 'trial page: state');
  await shot('trial');

  // A failed trial shows its error with the stderr tail.
  const failed = (await h.api('GetTrial', { study: 'dash-fail', trial: '0' }, 'admin')).trial;
  checkEq(failed.state, 'FAILED', 'the failing command trial failed');
  await page.goto(`${base}/#/study/dash-fail/trial/0`);
  await page.getByTestId('trial-error').waitFor({ timeout: 15000 });
  const errorText = await page.getByTestId('trial-error').textContent();
  check(errorText === failed.error && errorText.includes('boom-from-stderr'), `trial page: the error with the stderr tail (${JSON.stringify(errorText.slice(0, 80))})`);
  await shot('trial-failed');

  // A study no worker matches: its page says why it waits, with its
  // priority and selector (docs/scheduling.md).
  await h.api('CreateStudy', { spec: { ...FAIL, name: 'dash-waits', priority: 3,
    trial: { ...FAIL.trial, resources: { selector: { 'gpu.model': ['A100'] } } } } }, 'admin');
  await page.goto(`${base}/#/study/dash-waits`);
  await page.getByTestId('study-waiting').filter({ hasText: 'waiting' }).waitFor({ timeout: 15000 });
  checkEq(await page.getByTestId('study-waiting').textContent(), 'waiting: no worker matches gpu.model in [A100]',
    'study page: why its trials wait');
  checkEq(await page.getByTestId('study-priority').textContent(), '3', 'study page: its priority');
  checkEq(await page.getByTestId('study-selector').textContent(), 'gpu.model in [A100]', 'study page: its selector');
  await shot('study-waiting');

  // Workers page.
  await page.goto(`${base}/#/workers`);
  await page.getByTestId('worker-row').first().waitFor({ timeout: 15000 });
  checkEq(await page.getByTestId('worker-row').count(), (await h.api('ListWorkers', {}, 'admin')).workers.length, 'workers page: one row per worker');
  const labels = await page.getByTestId('worker-labels').first().textContent();
  check(labels.includes('pool=dash') && labels.includes('host='), `workers page: labels (${labels})`);
  await shot('workers');

  // Usage page: every owner's ended attempts (here the admin's studies),
  // the same totals as GetUsage.
  await page.goto(`${base}/#/usage`);
  await page.getByTestId('usage-row').first().waitFor({ timeout: 15000 });
  const usage = (await h.api('GetUsage', {}, 'admin')).totals;
  checkEq(await page.getByTestId('usage-row').count(), usage.length, 'usage page: one row per owner');
  check(Number(usage[0].attempts) > 0, `usage: attempts recorded (${JSON.stringify(usage[0])})`);
  await page.getByTestId('usage-by').selectOption('study');
  await page.getByTestId('usage-row').filter({ hasText: 'dash-asha' }).waitFor({ timeout: 15000 });
  await shot('usage');

  checkEq(errors, [], 'no script errors in the page');
  ok = true;
} catch (e) {
  console.error(e.stack ?? e);
  if (page) await page.screenshot({ path: join(args.out, 'failure.png'), fullPage: true }).catch(() => undefined);
  for (const p of ['scheduler', 'worker']) console.error(`--- ${p} log (tail)\n${h.log(p)}`);
} finally {
  await h.close();
}
console.log(`${ok ? 'PASS' : 'FAIL'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(ok ? 0 : 1);
