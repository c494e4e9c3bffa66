// Dashboard speed on a large ask/tell study (bench/README.md, "Dashboard"):
//  (a) navigation to the study page being interactive (the charts of every
//      trial drawn and the table's first page shown: the app's
//      `dial-interactive` mark), against the data floor measured in the same
//      page (TrialTable fetched and parsed, nothing drawn);
//  (b) the table's response to a page turn (the Next button, and a scroll by
//      one page) and to a sort, until the next frame.
// Targets: (a) <= 3 s at 100,000 trials, (b) <= 200 ms per page.
//
// usage: node bench.mjs --scheduler=BIN --dashboard=DIR --node-modules=DIR
//          [--trials=100000] [--db=PATH (kept: a second run skips the fill)]
//          [--loads=3] [--pages=20] [--chromium=PATH] [--screenshot=PNG]
import { existsSync } from 'node:fs';
import { cpus } from 'node:os';
import { Harness, check, parseArgs } from '../../tests/dashboard/harness.mjs';

const args = parseArgs(process.argv.slice(2), ['scheduler', 'dashboard', 'node-modules']);
const N = Number(args.trials ?? 100000);
const LOADS = Number(args.loads ?? 3);
const PAGES = Number(args.pages ?? 20);
const STUDY = 'bench';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (x) => `${x.toFixed(0)} ms`;

// A synthetic objective over four params, one categorical.
function objective(p) {
  const lr = p.lr.doubleValue, units = Number(p.units.intValue), drop = p.dropout.doubleValue;
  const opt = { adam: 0, sgd: 0.03, rmsprop: 0.015 }[p.optimizer.stringValue];
  return 0.9 - 0.02 * (Math.log10(lr) + 2.5) ** 2 - 0.01 * Math.abs(Math.log2(units) - 7) - 0.05 * drop * drop - opt;
}

async function fill(h) {
  await h.api('CreateStudy', { spec: {
    name: STUDY,
    objective: { metric: 'val_accuracy', goal: 'MAXIMIZE' },
    searchSpace: [
      { name: 'lr', float: { min: 1e-4, max: 0.3, scale: 'LOG' } },
      { name: 'units', int: { min: 16, max: 1024, scale: 'LOG' } },
      { name: 'dropout', float: { min: 0, max: 0.5 } },
      { name: 'optimizer', categorical: { values: ['adam', 'sgd', 'rmsprop'] } },
    ],
    searcher: { random: { seed: 1 } },
    budget: { maxTrials: N, maxParallelTrials: 1000 },
  } });
  const t0 = performance.now();
  for (let done = 0; done < N;) {
    const r = await h.api('SuggestTrials', { study: STUDY, count: 1000, clientId: 'bench' });
    if (r.done || r.trials.length === 0) break;
    const queue = [...r.trials];
    await Promise.all(Array.from({ length: 8 }, async () => {
      for (let t; (t = queue.pop());) {
        // A few trials report a short learning curve (for the curves chart).
        if (Number(t.number) % 500 === 0) {
          for (const step of [100, 200, 300]) {
            await h.api('ReportIntermediate', { study: STUDY, trial: t.number, step, metrics: { val_accuracy: objective(t.params) * (0.7 + step / 1000) } });
          }
        }
        await h.api('CompleteTrial', { study: STUDY, trial: t.number, finalMetrics: { val_accuracy: objective(t.params) } });
      }
    }));
    done += r.trials.length;
    if (done % 10000 === 0) console.log(`filled ${done} trials (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  }
  console.log(`fill: ${N} trials in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}

const h = new Harness();
let ok = false;
try {
  const db = args.db;
  const reuse = db && existsSync(db);
  await h.startScheduler(args.scheduler, [`--dashboard-dir=${args.dashboard}`, ...(db ? [`--db=${db}`] : [])]);
  if (!reuse) await fill(h);
  const study = (await h.api('GetStudy', { study: STUDY })).study;
  check(study.trialsCreated === N, `the study holds ${N} trials`);

  const context = await h.browser(args['node-modules'], args.chromium);
  const page = context.pages()[0] ?? await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));

  // (a) navigation -> interactive, LOADS times (a fresh document each time),
  // as a browser asks (Accept-Encoding with br) and with gzip only: Debian's
  // cpp-httplib answers br with Brotli at quality 11, slow for large answers.
  const variants = {};
  for (const variant of ['br', 'gzip']) {
  if (variant === 'gzip') await page.setExtraHTTPHeaders({ 'Accept-Encoding': 'gzip, deflate' });
  const loads = variants[variant] = [];
  for (let k = 0; k < LOADS; k++) {
    await page.goto('about:blank');
    await page.goto(`${h.base}/#/study/${STUDY}`);
    await page.waitForFunction(() => window.__dial?.loaded === true, null, { timeout: 120000, polling: 100 });
    loads.push(await page.evaluate(async () => {
      const at = (name) => performance.getEntriesByName(name)[0]?.startTime;
      // The data floor: TrialTable fetched and parsed in this page.
      const t0 = performance.now();
      const r = await fetch('api/v1/TrialTable?study=bench');
      const text = await r.text();
      const t1 = performance.now();
      JSON.parse(text);
      const t2 = performance.now();
      return { interactive: at('dial-interactive'), loaded: at('dial-loaded'), data: at('dial-data'), draw: window.__dial.timings,
        fetch: t1 - t0, parse: t2 - t1, bytes: text.length };
    }));
    const l = loads[k];
    const draws = Object.entries(l.draw).map(([name, t]) => `${name} ${ms(t)}`).join(', ');
    console.log(`${variant} load ${k + 1}: interactive ${ms(l.interactive)} (data in at ${ms(l.data)}; ${draws}), all charts ${ms(l.loaded)}; floor: TrialTable ${(l.bytes / 1e6).toFixed(1)} MB fetched in ${ms(l.fetch)}, parsed in ${ms(l.parse)}`);
  }
  }
  if (args.screenshot) await page.screenshot({ path: args.screenshot, fullPage: true });
  check((await page.getByTestId('table-count').getAttribute('data-rows')) === String(N), 'the table holds every trial');

  // (b) page turns and sorts, each timed to the next frame.
  const timings = await page.evaluate(async (pages) => {
    const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    const time = async (action) => {
      const t0 = performance.now();
      action();
      await frame();
      return performance.now() - t0;
    };
    const next = document.querySelector('[data-testid=page-next]');
    const scroller = document.querySelector('[data-testid=table-scroll]');
    const table = document.querySelector('.trial-table');
    const out = { next: [], scroll: [], sort: [] };
    for (let i = 0; i < pages; i++) out.next.push(await time(() => next.click()));
    for (let i = 0; i < pages; i++) {
      out.scroll.push(await time(() => { scroller.scrollTop += scroller.clientHeight - 24; }));
    }
    for (const key of ['value', 'param:lr', 'state', 'number']) {
      out.sort.push(await time(() => document.querySelector(`[data-testid="sort-${key}"]`).click()));
    }
    out.firstRow = Number(table.dataset.firstRow);
    return out;
  }, PAGES);
  check(timings.firstRow > 0, `the table moved (first row ${timings.firstRow})`);
  check(errors.length === 0, `no script errors (${errors.join('; ')})`);

  const summary = { machine: `${cpus().length} × ${cpus()[0].model}`, trials: N };
  for (const [variant, loads] of Object.entries(variants)) {
    const ia = loads.map((l) => l.interactive), floor = loads.map((l) => l.fetch + l.parse);
    summary[variant] = {
      interactive_ms: { median: median(ia), max: Math.max(...ia), runs: ia.map(Math.round) },
      all_charts_ms: median(loads.map((l) => l.loaded)),
      floor_ms: median(floor),
      ratio_to_floor: median(ia) / median(floor),
    };
  }
  Object.assign(summary, {
    page_next_ms: { median: median(timings.next), max: Math.max(...timings.next) },
    page_scroll_ms: { median: median(timings.scroll), max: Math.max(...timings.scroll) },
    sort_ms: { median: median(timings.sort), max: Math.max(...timings.sort) },
  });
  console.log(JSON.stringify(summary, (k, v) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v), 2));
  console.log(`interactive ${ms(summary.br.interactive_ms.median)} (br), ${ms(summary.gzip.interactive_ms.median)} (gzip) (target <= 3000), page ${ms(summary.page_next_ms.median)} median / ${ms(Math.max(summary.page_next_ms.max, summary.page_scroll_ms.max))} max (target <= 200)`);
  ok = true;
} catch (e) {
  console.error(e.stack ?? e);
  console.error(`--- scheduler log (tail)\n${h.log('scheduler')}`);
} finally {
  await h.close();
}
process.exit(ok ? 0 : 1);
