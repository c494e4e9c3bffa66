// The dashboard's views for several objectives, populations and comparisons,
// in headless Chromium against a real dial-scheduler and dial-worker:
//  - Pareto view: the front drawn equals GetBestTrials's front, infeasible
//    trials are marked, the hypervolume chart ends at GetBestTrials's
//    hypervolume; every objective is a table column and a parallel axis;
//    3 objectives get a matrix of pairs; clicking a point opens its trial.
//  - PBT over time (32 members): one line per member, one arrow per lineage
//    entry, starting at its source step.
//  - ASHA with promotion: each trial's line breaks once per pause.
//  - Comparison: overlays exactly the chosen studies, its state in the URL.
//  - Notes: edited on the study page, shown as text: a <script> runs nothing.
// Screenshots go to --out.
//
// usage: node views_test.mjs --scheduler=BIN --worker=BIN --python=PATH
//          --dashboard=DIR --node-modules=DIR --out=DIR [--chromium=PATH]
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Harness, check, checkEq, parseArgs, waitFor } from './harness.mjs';

const args = parseArgs(process.argv.slice(2), ['scheduler', 'worker', 'python', 'dashboard', 'node-modules', 'out']);
mkdirSync(args.out, { recursive: true });
const MEMBER = join(dirname(fileURLToPath(import.meta.url)), 'pbt_member.py');

const floatParam = (name, min, max, scale) => ({ name, float: { min, max, ...(scale ? { scale } : {}) } });
const PARETO = {
  name: 'views-pareto',
  objectives: [{ metric: 'error', goal: 'MINIMIZE' }, { metric: 'speed', goal: 'MAXIMIZE' }],
  constraints: [{ metric: 'cost', max: 0.8 }],
  searchSpace: [floatParam('x', 0, 1), floatParam('y', 0, 1)],
  searcher: { random: { seed: 4 } },
  budget: { maxTrials: 40, maxParallelTrials: 1 },
};
const PARETO3 = {
  name: 'views-pareto3',
  objectives: [{ metric: 'a', goal: 'MINIMIZE' }, { metric: 'b', goal: 'MINIMIZE' }, { metric: 'c', goal: 'MINIMIZE' }],
  searchSpace: [floatParam('x', 0, 1), floatParam('y', 0, 1)],
  searcher: { random: { seed: 6 } },
  budget: { maxTrials: 30, maxParallelTrials: 1 },
};
const member = (steps, every) => ({ command: { argv: [args.python, MEMBER, String(steps), String(every)] } });
const PBT = {
  name: 'views-pbt',
  objective: { metric: 'score', goal: 'MAXIMIZE' },
  searchSpace: [floatParam('lr', 0.001, 0.5, 'LOG')],
  searcher: { random: { seed: 9 } },
  scheduler: { pbt: { perturbationInterval: 5, quantile: 0.25, seed: 9 } },
  budget: { maxTrials: 32, maxParallelTrials: 32 },
  trial: member(40, 5),
};
const ASHA = {
  name: 'views-asha',
  objective: { metric: 'score', goal: 'MAXIMIZE' },
  searchSpace: [floatParam('lr', 0.001, 0.5, 'LOG')],
  searcher: { random: { seed: 2 } },
  scheduler: { asha: { minSteps: 4, maxSteps: 16, reductionFactor: 2, promotion: true } },
  budget: { maxTrials: 12, maxParallelTrials: 4 },
  trial: member(16, 1),
};
const quad = (name, goal, seed, offset) => ({
  name, objective: { metric: 'loss', goal }, searchSpace: [floatParam('x', -2, 2), floatParam('z', -2, 2)],
  searcher: { random: { seed } }, budget: { maxTrials: 15, maxParallelTrials: 1 },
  _f: (p) => (p.x.doubleValue - offset) ** 2 + 0.1 * p.z.doubleValue ** 2,
});
const ROUNDS = [quad('views-round1', 'MINIMIZE', 1, 0.5), quad('views-round2', 'MINIMIZE', 2, 0.2),
  quad('views-round3', 'MINIMIZE', 3, -0.4), { ...quad('views-other', 'MAXIMIZE', 4, 0), name: 'views-other' }];

const h = new Harness();
const t0 = Date.now();
let page;
let ok = false;
try {
  const auth = h.writeTokens([['admin', 'admin'], ['worker', 'worker']]);
  const base = await h.startScheduler(args.scheduler, [`--auth-tokens=${auth}`, `--dashboard-dir=${args.dashboard}`]);
  console.log(`scheduler at ${base} (${h.dir})`);

  // Ask/tell studies, evaluated here through the JSON API.
  const evaluate = async (spec, fn) => {
    const { _f, ...clean } = spec;
    await h.api('CreateStudy', { spec: clean }, 'admin');
    for (let i = 0; i < spec.budget.maxTrials; i++) {
      const [t] = (await h.api('SuggestTrials', { study: spec.name, count: 1, clientId: 'views' }, 'admin')).trials;
      if (!t) break;
      await h.api('CompleteTrial', { study: spec.name, trial: t.number, finalMetrics: fn(t.params) }, 'admin');
    }
  };
  await evaluate(PARETO, (p) => {
    const x = p.x.doubleValue, y = p.y.doubleValue;
    return { error: x, speed: -(1 - Math.sqrt(x) + y), cost: (x + y) / 1.5 };
  });
  await evaluate(PARETO3, (p) => {
    const x = p.x.doubleValue, y = p.y.doubleValue;
    return { a: x, b: y, c: (1 - x) * (1 - y) + 0.1 * x * y };
  });
  for (const r of ROUNDS) await evaluate(r, (p) => ({ loss: r._f(p) }));
  await h.api('CreateStudy', { spec: PBT }, 'admin');
  await h.api('CreateStudy', { spec: ASHA }, 'admin');
  h.startWorker('worker', args.worker, ['--slots=32', '--acquire-wait-ms=500', `--allow-command=${args.python}`], h.tokens.worker);

  const context = await h.browser(args['node-modules'], args.chromium);
  page = context.pages()[0] ?? await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const shot = (name) => page.screenshot({ path: join(args.out, `${name}.png`), fullPage: true });
  await page.goto(base + '/');
  await page.getByTestId('login-token').fill(h.tokens.admin);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('whoami').filter({ hasText: 'admin (admin)' }).waitFor({ timeout: 15000 });
  const openStudy = async (name) => {
    await page.goto(`${base}/#/study/${name}`);
    await page.waitForFunction(() => window.__dial.loaded === true, null, { timeout: 30000 });
  };
  const series = (chart) => page.evaluate((c) => window.__dial.charts[c].getOption().series.map((s) => ({
    name: s.name, type: s.type, data: s.data, markPoint: s.markPoint?.data ?? [] })), chart);

  // ---- Pareto view, 2 objectives with a constraint ----
  await openStudy('views-pareto');
  const best = await h.api('GetBestTrials', { study: 'views-pareto', count: 1000 }, 'admin');
  const table = await h.getJson('TrialTable?study=views-pareto', 'admin');
  await page.waitForFunction(() => !!window.__dial.charts.hypervolume, null, { timeout: 15000 });
  const pareto = await series('pareto');
  const drawn = (name) => pareto.find((s) => s.name === name).data.map((d) => d[2]).sort((a, b) => a - b);
  const front = best.trials.map((t) => Number(t.number)).sort((a, b) => a - b);
  check(front.length >= 3, `a front of ${front.length} trials (front_size ${best.frontSize})`);
  checkEq(drawn('Pareto front'), front, 'Pareto view: the front drawn is GetBestTrials\'s front');
  const infeasible = table.number.filter((_, i) => table.feasible[i] === false).sort((a, b) => a - b);
  check(infeasible.length > 0, `some trials broke the constraint (${infeasible.length})`);
  checkEq(drawn('infeasible'), infeasible, 'Pareto view: infeasible trials marked');
  checkEq(drawn('dominated').length + front.length + infeasible.length, table.number.length, 'Pareto view: every trial drawn once');
  const hv = await series('hypervolume');
  const lastHv = hv[0].data[hv[0].data.length - 1][1];
  check(Math.abs(lastHv - best.hypervolume) <= 1e-9 * Math.max(1, best.hypervolume),
    `hypervolume chart ends at GetBestTrials's ${best.hypervolume} (${lastHv})`);
  check(hv[0].data.every((d, k) => k === 0 || d[1] >= hv[0].data[k - 1][1]), 'hypervolume never falls');
  for (const m of ['error', 'speed']) await page.getByTestId(`sort-obj:${m}`).waitFor({ timeout: 5000 });
  check(true, 'trial table: a column per objective');
  const axes = await page.evaluate(() => window.__dial.charts.parallel.getOption().parallelAxis.map((a) => a.name));
  checkEq(axes, ['x', 'y', 'error', 'speed'], 'parallel coordinates: every objective an axis');
  await shot('pareto');
  await page.getByTestId('chart-pareto').screenshot({ path: join(args.out, 'pareto-chart.png') });
  // Clicking a front point opens its trial.
  const target = front[0];
  const pixel = await page.evaluate((n) => {
    const c = window.__dial.charts.pareto;
    const s = c.getOption().series.findIndex((x) => x.name === 'Pareto front');
    const d = c.getOption().series[s].data.find((p) => p[2] === n);
    return c.convertToPixel({ seriesIndex: s }, [d[0], d[1]]);
  }, target);
  const box = await page.getByTestId('chart-pareto').boundingBox();
  await page.mouse.click(box.x + pixel[0], box.y + pixel[1]);
  await page.waitForFunction((n) => location.hash.endsWith(`/trial/${n}`), target, { timeout: 10000 });
  check(true, `clicking front trial ${target} opens its page`);

  // ---- 3 objectives: a matrix of the 3 pairs ----
  await openStudy('views-pareto3');
  await page.waitForFunction(() => !!window.__dial.charts['pareto-matrix'], null, { timeout: 15000 });
  const matrix = await series('pareto-matrix');
  const front3 = (await h.api('GetBestTrials', { study: 'views-pareto3', count: 1000 }, 'admin')).trials.length;
  checkEq(matrix.filter((s) => s.name === 'Pareto front').map((s) => s.data.length), [front3, front3, front3],
    'three objectives: three pairs, each with the whole front');
  await shot('pareto-3');

  // ---- PBT over time ----
  for (const s of ['views-pbt', 'views-asha']) {
    await waitFor(async () => (await h.api('GetStudy', { study: s }, 'admin')).study.state === 'STUDY_COMPLETED', 240000, `${s} to complete`);
  }
  await openStudy('views-pbt');
  const lineage = [];
  const members = (await h.getJson('TrialTable?study=views-pbt', 'admin')).number;
  for (const n of members) {
    for (const l of (await h.api('GetTrial', { study: 'views-pbt', trial: String(n) }, 'admin')).trial.lineage) {
      lineage.push([Number(l.sourceTrial), n, Number(l.sourceStep), Number(l.step)]);
    }
  }
  check(lineage.length >= 20, `PBT exploited ${lineage.length} times over ${members.length} members`);
  const population = await series('population');
  checkEq(population.filter((s) => s.type === 'line').length, members.length, 'PBT view: one line per member');
  const arrows = population.find((s) => s.name === 'exploits').data
    .map((d) => [d.source, d.target, d.coords[0][0], d.coords[1][0]]);
  const order = (a, b) => a[1] - b[1] || a[3] - b[3] || a[0] - b[0];
  checkEq(arrows.sort(order), lineage.sort(order), 'PBT view: one arrow per lineage entry, from its source step to its step');
  await shot('pbt-over-time');
  await page.getByTestId('chart-population').screenshot({ path: join(args.out, 'pbt-over-time-chart.png') });

  // ---- ASHA with promotion: a break per pause ----
  await openStudy('views-asha');
  const asha = await series('population');
  let breaks = 0, pausedTrials = 0;
  for (const s of asha.filter((x) => x.type === 'line')) {
    const t = (await h.api('GetTrial', { study: 'views-asha', trial: s.name.slice(1), historyPageSize: 10000 }, 'admin')).trial;
    const last = Number(t.lastStep);
    const expected = [4, 8].filter((r) => last > r).length;  // rungs it went past
    checkEq(s.data.filter((d) => d === null).length, expected, `ASHA view: trial ${t.number} breaks at each rung it was resumed past`);
    breaks += expected;
    if (t.state === 'PAUSED') pausedTrials++;
  }
  check(breaks > 0, `ASHA view: ${breaks} resumptions drawn (${pausedTrials} trials still paused)`);
  await shot('asha-paused-resumed');
  await page.getByTestId('chart-population').screenshot({ path: join(args.out, 'asha-paused-resumed-chart.png') });

  // ---- comparison ----
  await page.goto(`${base}/#/compare`);
  await page.getByTestId('compare-picker').waitFor({ timeout: 15000 });
  await page.getByTestId('compare-pick-views-round1').check();
  await page.getByTestId('compare-pick-views-round3').check();
  check(await page.getByTestId('compare-pick-views-other').isDisabled(), 'comparison: a study with another objective cannot be picked');
  await page.getByTestId('compare-pick-views-round2').check();
  await page.waitForFunction(() => !!window.__dial.charts['compare-best'], null, { timeout: 15000 });
  const chosen = ['views-round1', 'views-round3', 'views-round2'];
  checkEq((await series('compare-best')).map((s) => s.name), chosen, 'comparison: overlays exactly the chosen studies');
  const url = page.url();
  check(url.includes('#/compare?studies=views-round1,views-round3,views-round2'), `comparison: its state is in the URL (${url})`);
  for (const [k, s] of chosen.entries()) {
    const b = (await h.api('GetBestTrials', { study: s, count: 1 }, 'admin')).trials[0];
    const lines = (await series('compare-best'))[k].data;
    check(Math.abs(lines[lines.length - 1][1] - b.objectiveValue) < 1e-12, `comparison: ${s} ends at its best ${b.objectiveValue}`);
  }
  checkEq(await page.getByTestId('compare-best-row').count(), 3, 'comparison: a best-trial row per study');
  checkEq((await series('compare-importance')).map((s) => s.name), chosen, 'comparison: importance side by side');
  await page.getByTestId('compare-x').selectOption('steps');
  await page.waitForFunction(() => location.hash.includes('x=steps'), null, { timeout: 10000 });
  await shot('compare');
  // The same URL in a fresh page shows the same comparison.
  const other = await context.newPage();
  await other.goto(page.url());
  await other.waitForFunction(() => !!window.__dial.charts['compare-best'], null, { timeout: 15000 });
  checkEq(await other.evaluate(() => window.__dial.charts['compare-best'].getOption().series.map((s) => s.name)), chosen,
    'comparison: a shared link shows the same studies');
  await other.close();

  // ---- notes: always text, never markup ----
  const payload = 'round 1 <script>window.__pwned = 1</script>\n<img src=x onerror="window.__pwned = 2"> & more';
  await page.goto(`${base}/#/study/views-round1`);
  await page.waitForFunction(() => window.__dial.interactive === true, null, { timeout: 30000 });
  await page.getByTestId('study-note-edit').click();
  await page.getByTestId('study-note-input').fill(payload);
  await page.getByTestId('study-note-save').click();
  await page.getByTestId('study-note').filter({ hasText: 'round 1' }).waitFor({ timeout: 10000 });
  checkEq((await h.api('GetStudy', { study: 'views-round1' }, 'admin')).study.note, payload, 'note: saved through SetNote');
  await page.reload();
  await page.waitForFunction(() => window.__dial.interactive === true, null, { timeout: 30000 });
  const shown = await page.evaluate(() => {
    const el = document.querySelector('[data-testid=study-note]');
    return { text: el.textContent, children: el.children.length, pwned: window.__pwned ?? null };
  });
  checkEq(shown, { text: payload, children: 0, pwned: null }, 'note: a <script> and an onerror are shown as text and run nothing');
  await shot('note-study');
  await h.api('SetNote', { study: 'views-round1', trial: '0', note: payload }, 'admin');
  await page.goto(`${base}/#/study/views-round1/trial/0`);
  await page.getByTestId('trial-note').filter({ hasText: 'round 1' }).waitFor({ timeout: 10000 });
  checkEq(await page.evaluate(() => [document.querySelector('[data-testid=trial-note]').textContent, window.__pwned ?? null]),
    [payload, null], 'trial note: text, nothing run');

  checkEq(errors, [], 'no script errors in the page');
  ok = true;
} catch (e) {
  console.error(e.stack ?? e);
  if (page) await page.screenshot({ path: join(args.out, 'views-failure.png'), fullPage: true }).catch(() => undefined);
  for (const p of ['scheduler', 'worker']) console.error(`--- ${p} log (tail)\n${h.log(p)}`);
} finally {
  await h.close();
}
console.log(`${ok ? 'PASS' : 'FAIL'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(ok ? 0 : 1);
