// One study: its header (state, counts, best, Stop, exports), the charts of
// TrialTable's columns (optimisation history, parallel coordinates, slices,
// contour), parameter importance, learning curves with the ASHA rungs, the
// Pareto view (several objectives), members over time (PBT exploits, ASHA
// pauses) and the trial table; live through WatchStudy.
import {
  ApiError, Cell, Study, StudyEvent, StudySpec, Trial, TrialTable, call, get, getTrial, sessionUrl, paramValue, pool,
} from '../api';
import { Chart, draw } from '../charts';
import { STATES, STATE_COLORS, append, esc, fmt, h, throttle, trialLink } from '../dom';
import { TrialTableView } from '../table';
import { kindOf, progress } from './studies';
import { compareLink } from './compare';
import { noteView } from '../note';
import { paretoView } from './pareto';
import { drawPopulation } from './population';

// Lines in the parallel coordinates at most: the best, then an even sample.
export const PARALLEL_MAX = 2000;
// Trials whose histories the learning curves show at most.
export const CURVES_BEST = 50;
export const CURVES_MAX = 150;
// PBT members drawn over time at most.
export const LINEAGE_MAX = 300;
const CONTOUR_BINS = 16;
const COLORS = ['#313695', '#4575b4', '#74add1', '#abd9e9', '#fee090', '#fdae61', '#f46d43', '#d73027'];

// The rungs of an ASHA or Hyperband schedule: min_steps × rf^k below max_steps.
export function rungs(spec: StudySpec): number[] {
  const r = spec.scheduler?.asha ?? spec.scheduler?.hyperband;
  if (!r) return [];
  const min = Number(r.minSteps), max = Number(r.maxSteps), f = r.reductionFactor;
  const out: number[] = [];
  if (!(min > 0) || !(f > 1)) return out;
  for (let s = min; s < max && out.length < 64; s *= f) out.push(Math.round(s));
  return out;
}

// As the scheduler decides it: null until the trial has final metrics.
function feasible(spec: StudySpec, t: Trial): boolean | null {
  const finished = t.state === 'COMPLETED' || (t.state === 'STOPPED' && Object.keys(t.finalMetrics ?? {}).length > 0);
  if (!finished) return null;
  return (spec.constraints ?? []).every((c) => {
    const v = t.finalMetrics?.[c.metric];
    return v !== undefined && Number.isFinite(v) && (c.max === undefined || v <= c.max) && (c.min === undefined || v >= c.min);
  });
}

function cellOf(t: Trial, name: string): Cell {
  return paramValue(t.params[name]);
}

export async function renderStudy(root: HTMLElement, name: string): Promise<() => void> {
  const [{ study: first }, table0] = await Promise.all([
    call<{ study: Study }>('GetStudy', { study: name }),
    get<TrialTable>('TrialTable', { study: name }),
  ]);
  performance.mark('dial-data');
  let study = first;
  let table = table0;
  const spec = study.spec;
  const maximize = spec.objective.goal !== 'MINIMIZE';
  const metric = spec.objective.metric;
  const isPbt = !!spec.scheduler?.pbt;
  const isPromotion = !!spec.scheduler?.asha?.promotion;
  const rowOf = new Map<number, number>();
  table.number.forEach((n, i) => rowOf.set(n, i));
  let best: Trial | undefined;
  let events = 0;
  let closed = false;

  // ---- header ----
  const stateEl = h('span', { 'data-testid': 'study-state' });
  const waitingEl = h('div', { class: 'waiting', 'data-testid': 'study-waiting' });
  const countsEl = h('span', { class: 'counts', 'data-testid': 'study-counts' });
  const progressEl = h('div');
  const bestEl = h('span', { 'data-testid': 'study-best' });
  const liveEl = h('span', { class: 'live', 'data-testid': 'live-status' }, 'connecting');
  const eventsEl = h('span', { 'data-testid': 'live-events' }, '0');
  const stopError = h('p', { class: 'error', 'data-testid': 'stop-error' });
  const stopButton = h('button', {
    'data-testid': 'stop-study', class: 'danger',
    onclick: async () => {
      if (!confirm(`Stop study ${name}? Running trials are stopped; no new ones start.`)) return;
      stopError.textContent = '';
      try {
        study = (await call<{ study: Study }>('StopStudy', { study: name })).study;
        drawHeader();
      } catch (e) {
        stopError.textContent = e instanceof ApiError ? `${e.httpStatus} ${e.status}: ${e.message}` : String(e);
      }
    },
  }, 'Stop study');
  const exportLink = (label: string, format: string, history: string) =>
    h('a', { href: sessionUrl('ExportStudy', { study: name, format, history }), download: '', 'data-testid': `export-${format}${history === '1' ? '-history' : ''}` }, label);
  const note = noteView('study-note', study.note ?? '', async (text) =>
    (await call<{ study: Study }>('SetNote', { study: name, note: text })).study.note ?? '');
  const drawHeader = () => {
    note.update(study.note ?? '');
    stateEl.textContent = study.state.replace('STUDY_', '');
    stateEl.className = `state ${study.state}`;
    countsEl.replaceChildren(...STATES.filter((s) => study.trialCounts[s]).map((s) =>
      h('span', { 'data-testid': `count-${s}`, style: `color:${STATE_COLORS[s]}` }, `${s.toLowerCase()} ${study.trialCounts[s]}`)));
    progressEl.replaceChildren(progress(study));
    bestEl.replaceChildren(best ? h('a', { href: trialLink(name, best.number) }, `${fmt(best.objectiveValue)} (trial ${best.number})`) : '–');
    stopButton.toggleAttribute('disabled', study.state !== 'STUDY_ACTIVE');
  };
  root.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Studies'), ` / ${name}`),
    h('h1', {}, name, ' ', stateEl),
    h('div', { class: 'study-head' },
      h('div', {}, h('b', {}, 'Objective '), `${maximize ? 'maximize' : 'minimize'} ${metric}`),
      h('div', {}, h('b', {}, 'Best '), bestEl),
      h('div', {}, h('b', {}, 'Searcher '), kindOf(spec.searcher), h('b', {}, ' Scheduler '), kindOf(spec.scheduler)),
      h('div', {}, h('b', {}, 'Owner '), study.owner || '–', h('b', {}, ' Priority '),
        h('span', { 'data-testid': 'study-priority' }, String(spec.priority ?? 0))),
      h('div', {}, h('b', {}, 'Selector '), h('span', { 'data-testid': 'study-selector' },
        Object.entries(spec.trial?.resources?.selector ?? {}).sort(([a], [b]) => a.localeCompare(b))
          .map(([k, vs]) => `${k} in [${vs.join(', ')}]`).join(', ') || 'any worker')),
      waitingEl,
      h('div', {}, h('b', {}, 'Live '), liveEl, ' events ', eventsEl),
      h('div', {}, h('b', {}, 'Export '), exportLink('CSV', 'csv', '0'), ' · ', exportLink('JSON lines', 'jsonl', '0'), ' · ',
        exportLink('CSV with history', 'csv', '1'), ' · ', h('a', { href: compareLink([name]), 'data-testid': 'compare-link' }, 'compare with…'))),
    note.el, progressEl, countsEl, h('div', {}, stopButton), stopError);

  // ---- chart containers ----
  const box = (title: string, testid: string, cls = 'chart', ...extra: (HTMLElement | null)[]) => {
    const el = h('div', { class: cls, 'data-testid': `chart-${testid}` });
    return { el, section: h('section', { class: 'panel' }, h('h2', {}, title), ...extra, el) };
  };
  const history = box('Optimisation history', 'history');
  const importance = box('Parameter importance', 'importance');
  const parallelNote = h('small', { 'data-testid': 'parallel-note' });
  const parallel = box('Parallel coordinates', 'parallel', 'chart tall', parallelNote);
  const slices = h('div', { class: 'slices' });
  const numericParams = table.params.filter((p) => p.type !== 'categorical').map((p) => p.name);
  const allParams = table.params.map((p) => p.name);
  const pick = (testid: string, value: string | undefined) => h('select', { 'data-testid': testid, onchange: () => drawContour() },
    ...allParams.map((p) => h('option', { value: p, selected: p === value }, p))) as HTMLSelectElement;
  const contourX = pick('contour-x', numericParams[0] ?? allParams[0]);
  const contourY = pick('contour-y', numericParams[1] ?? allParams[1] ?? allParams[0]);
  const contour = box('Contour', 'contour', 'chart', h('div', {}, 'x ', contourX, ' y ', contourY));
  const curvesNote = h('small', { 'data-testid': 'curves-note' });
  const curves = box('Intermediate values', 'curves', 'chart tall', curvesNote);
  const populationNote = h('small', { 'data-testid': 'population-note' });
  const population = box(isPbt ? 'Population over time' : 'Paused and resumed', 'population', 'chart tall', populationNote);
  const pareto = table.objectives ? paretoView(name, table) : undefined;
  const tableView = new TrialTableView(name, table);
  window.__dial.table = tableView;
  append(root,
    pareto?.section,
    h('div', { class: 'cols2' }, history.section, importance.section),
    parallel.section,
    h('section', { class: 'panel' }, h('h2', {}, 'Slices'), slices),
    contour.section, curves.section,
    isPbt || isPromotion ? population.section : null,
    h('section', { class: 'panel' }, h('h2', {}, 'Trials'), tableView.el));

  const goTo = (c: Chart, numberOf: (p: { value: unknown; dataIndex: number; data: unknown }) => number | undefined) => {
    c.off('click');
    c.on('click', (p) => {
      const n = numberOf(p as never);
      if (n !== undefined && !Number.isNaN(n)) location.hash = trialLink(name, n);
    });
  };

  // ---- charts from the columns ----
  const valueRange = () => {
    let lo = Infinity, hi = -Infinity;
    for (const v of table.value) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    return lo <= hi ? [lo, hi] : [0, 1];
  };
  const axisFor = (p: TrialTable['params'][number]) =>
    p.type === 'categorical' ? { type: 'category' as const } : { type: p.log ? 'log' as const : 'value' as const, scale: true };

  // Scatter points as one flat Float64Array [x0, y0, x1, y1, ...] (what
  // ECharts draws fastest: 100,000 points in tens of ms) and the trial
  // number of each, for clicks.
  function scatterData(x: (i: number) => number | null): { data: Float64Array; numbers: Int32Array } {
    const data = new Float64Array(2 * table.value.length);
    const numbers = new Int32Array(table.value.length);
    let m = 0;
    for (let i = 0; i < table.value.length; i++) {
      const v = table.value[i];
      const xi = v === null ? null : x(i);
      if (xi === null) continue;
      data[2 * m] = xi;
      data[2 * m + 1] = v!;
      numbers[m++] = table.number[i];
    }
    return { data: data.slice(0, 2 * m), numbers: numbers.slice(0, m) };
  }
  const scatter = (data: Float64Array, extra: object = {}) => ({
    type: 'scatter', symbolSize: data.length > 4000 ? 3 : 6, large: true, largeThreshold: 2000, progressive: 0,
    dimensions: ['x', 'y'], encode: { x: 0, y: 1 }, data, ...extra,
  });

  function drawHistory(): void {
    const { data, numbers } = scatterData((i) => table.number[i]);
    const bestLine: number[][] = [];
    let b: number | undefined;
    for (let k = 0; k < numbers.length; k++) {
      const v = data[2 * k + 1];
      if (b === undefined || (maximize ? v > b : v < b)) {
        b = v;
        bestLine.push([numbers[k], v]);
      }
    }
    if (b !== undefined) bestLine.push([numbers[numbers.length - 1], b]);
    const c = draw('history', history.el, {
      tooltip: { trigger: 'item' },
      legend: { top: 0 },
      grid: { left: 60, right: 20, top: 30, bottom: 50 },
      xAxis: { type: 'value', name: 'trial', nameLocation: 'middle', nameGap: 28 },
      yAxis: { type: 'value', scale: true, name: metric },
      dataZoom: [{ type: 'inside' }],
      series: [
        scatter(data, { name: 'objective' }),
        { name: 'best so far', type: 'line', step: 'end', showSymbol: false, data: bestLine, color: '#d73027' },
      ],
    });
    goTo(c, (p) => (p.dataIndex < numbers.length ? numbers[p.dataIndex] : undefined));
  }

  function drawParallel(): void {
    const idx: number[] = [];
    for (let i = 0; i < table.value.length; i++) if (table.value[i] !== null) idx.push(i);
    let shown = idx;
    if (idx.length > PARALLEL_MAX) {
      const sorted = [...idx].sort((a, b) => (table.value[b]! - table.value[a]!) * (maximize ? 1 : -1));
      const head = sorted.slice(0, PARALLEL_MAX / 2);
      const rest = sorted.slice(PARALLEL_MAX / 2);
      const step = rest.length / (PARALLEL_MAX - head.length);
      shown = head.concat(Array.from({ length: PARALLEL_MAX - head.length }, (_, k) => rest[Math.floor(k * step)]));
    }
    parallelNote.textContent = shown.length < idx.length
      ? `${shown.length} of ${idx.length} trials with a value: the best ${PARALLEL_MAX / 2} and an even sample of the rest. Drag along an axis to brush.`
      : `${shown.length} trials with a value. Drag along an axis to brush.`;
    const [lo, hi] = valueRange();
    const params = table.params;
    // Every objective gets an axis (the first one colours the lines).
    const objectives = table.objectives ? table.objectives.map((o) => o.metric) : [metric];
    const objective = (m: string, i: number) => (table.values ? table.values[m][i] : table.value[i]);
    const c = draw('parallel', parallel.el, {
      parallelAxis: [
        ...params.map((p, k) => ({ dim: k, name: p.name, ...axisFor(p),
          ...(p.type === 'categorical' ? { data: [...new Set(table.param[p.name].filter((v) => v !== null))].map(String).sort() } : {}) })),
        ...objectives.map((m, k) => ({ dim: params.length + k, name: m, type: 'value', scale: true })),
      ],
      parallel: { left: 60, right: 120, top: 40, bottom: 30 },
      visualMap: { type: 'continuous', dimension: params.length, min: lo, max: hi, calculable: true, formatter: (v: number) => fmt(v), right: 10, top: 'middle', inRange: { color: maximize ? COLORS : [...COLORS].reverse() } },
      series: [{
        name: 'trials', type: 'parallel', lineStyle: { width: 1, opacity: 0.5 }, progressive: 0, smooth: false,
        data: shown.map((i) => [...params.map((p) => table.param[p.name][i] ?? '-'), ...objectives.map((m) => objective(m, i)), table.number[i]]),
      }],
    });
    goTo(c, (p) => (p.value as number[])[params.length + objectives.length]);
  }

  function drawSlices(): void {
    const have = new Set<string>();
    for (const p of table.params) {
      have.add(p.name);
      let holder = slices.querySelector<HTMLElement>(`[data-param="${CSS.escape(p.name)}"]`);
      if (!holder) {
        holder = h('div', { class: 'chart small', 'data-param': p.name, 'data-testid': `chart-slice-${p.name}` });
        slices.append(holder);
      }
      const col = table.param[p.name];
      // Categories are drawn at their index among the sorted values.
      const labels = p.type === 'categorical' ? [...new Set(col.filter((v) => v !== null))].map(String).sort() : [];
      const at = new Map(labels.map((l, k) => [l, k]));
      const { data, numbers } = scatterData((i) => (col[i] === null ? null : p.type === 'categorical' ? at.get(String(col[i]))! : (col[i] as number)));
      const c = draw(`slice:${p.name}`, holder, {
        title: { text: p.name, left: 'center', textStyle: { fontSize: 12 } },
        tooltip: { trigger: 'item' },
        grid: { left: 55, right: 15, top: 30, bottom: 30 },
        xAxis: p.type === 'categorical' ? { type: 'category', data: labels } : axisFor(p),
        yAxis: { type: 'value', scale: true },
        series: [scatter(data)],
      });
      goTo(c, (q) => numbers[q.dataIndex]);
    }
    for (const el of [...slices.children]) if (!have.has((el as HTMLElement).dataset.param!)) el.remove();
  }

  // The mean objective over a grid of the two params' values (equal bins,
  // in log space for log params; one bin per category).
  function binner(name: string): { index: (v: Cell) => number; labels: string[] } {
    const p = table.params.find((q) => q.name === name)!;
    const col = table.param[name];
    if (p.type === 'categorical') {
      const labels = [...new Set(col.filter((v) => v !== null))].map(String).sort();
      const at = new Map(labels.map((l, i) => [l, i]));
      return { index: (v) => at.get(String(v)) ?? -1, labels };
    }
    const t = (v: number) => (p.log ? Math.log(v) : v);
    let lo = Infinity, hi = -Infinity;
    for (const v of col) if (typeof v === 'number') { lo = Math.min(lo, t(v)); hi = Math.max(hi, t(v)); }
    const distinct = p.type === 'int' || p.type === 'discrete' ? new Set(col).size : Infinity;
    const bins = Math.max(1, Math.min(CONTOUR_BINS, distinct));
    const width = (hi - lo) / bins || 1;
    const labels = Array.from({ length: bins }, (_, k) => {
      const mid = lo + (k + 0.5) * width;
      return fmt(p.log ? Math.exp(mid) : mid);
    });
    return { index: (v) => (typeof v === 'number' ? Math.min(bins - 1, Math.floor((t(v) - lo) / width)) : -1), labels };
  }

  function drawContour(): void {
    const xs = contourX.value, ys = contourY.value;
    if (!xs || !ys) return;
    const bx = binner(xs), by = binner(ys);
    const sum = new Map<number, [number, number]>();
    const cx = table.param[xs], cy = table.param[ys];
    for (let i = 0; i < table.value.length; i++) {
      const v = table.value[i];
      if (v === null) continue;
      const a = bx.index(cx[i]), b = by.index(cy[i]);
      if (a < 0 || b < 0) continue;
      const key = a * 4096 + b;
      const s = sum.get(key) ?? [0, 0];
      s[0] += v;
      s[1] += 1;
      sum.set(key, s);
    }
    const data = [...sum.entries()].map(([key, [s, n]]) => [Math.floor(key / 4096), key % 4096, s / n, n]);
    const [lo, hi] = valueRange();
    draw('contour', contour.el, {
      tooltip: { formatter: (p: { value: number[] }) => `${esc(xs)} ${esc(bx.labels[p.value[0]])}, ${esc(ys)} ${esc(by.labels[p.value[1]])}<br>mean ${esc(fmt(p.value[2]))} over ${esc(p.value[3])} trials` },
      grid: { left: 70, right: 100, top: 20, bottom: 50 },
      xAxis: { type: 'category', data: bx.labels, name: xs, nameLocation: 'middle', nameGap: 30 },
      yAxis: { type: 'category', data: by.labels, name: ys },
      visualMap: { type: 'continuous', dimension: 2, min: lo, max: hi, calculable: true, formatter: (v: number) => fmt(v), right: 10, top: 'middle', inRange: { color: maximize ? COLORS : [...COLORS].reverse() } },
      series: [{ type: 'heatmap', data }],
    });
  }

  // ---- charts from GetTrial: learning curves and lineage ----
  const details = new Map<number, Trial>();
  const stale = new Set<number>();
  const rungLines = rungs(spec);

  function curveSet(bestNumbers: number[]): number[] {
    if (isPbt) return table.number.slice(0, LINEAGE_MAX);
    const set = new Set(bestNumbers.slice(0, CURVES_BEST));
    const byState = (s: string) => table.number.filter((_, i) => table.state[i] === s).reverse();
    for (const n of [...byState('RUNNING'), ...byState('PAUSED'), ...byState('STOPPED')]) {
      if (set.size >= CURVES_MAX) break;
      set.add(n);
    }
    return [...set];
  }

  function drawCurves(): void {
    const trials = [...details.values()].sort((a, b) => Number(a.number) - Number(b.number));
    let points = 0;
    const series = trials.map((t, k) => {
      const data = t.metricHistory.filter((p) => metric in p.metrics).map((p) => [Number(p.step), p.metrics[metric]]);
      points += data.length;
      const last = data[data.length - 1];
      const mark = last && (t.state === 'STOPPED' || t.state === 'PAUSED')
        ? { symbol: t.state === 'STOPPED' ? 'triangle' : 'diamond', symbolSize: 9, itemStyle: { color: STATE_COLORS[t.state] }, label: { show: false }, data: [{ coord: last, name: t.state.toLowerCase() }] }
        : undefined;
      return {
        name: `#${t.number}`, type: 'line', showSymbol: false, data, markPoint: mark,
        lineStyle: { width: 1.2 }, emphasis: { focus: 'series' },
        markLine: k === 0 && rungLines.length ? { symbol: 'none', silent: true, label: { formatter: 'rung {c}' }, lineStyle: { type: 'dashed', color: '#888' }, data: rungLines.map((x) => ({ xAxis: x })) } : undefined,
      };
    });
    curvesNote.textContent = `${trials.length} trials (${isPbt ? 'the population' : `the best ${CURVES_BEST}, then running, paused and stopped ones`}), ${points} reports of ${metric}` +
      (rungLines.length ? `; dashed: rungs at ${rungLines.join(', ')}` : '') + '; ▲ stopped, ◆ paused.';
    const c = draw('curves', curves.el, {
      tooltip: { trigger: 'item', formatter: (p: { seriesName: string; value: number[] }) => `${esc(p.seriesName)} step ${esc(p.value?.[0])}: ${esc(fmt(p.value?.[1]))}` },
      grid: { left: 60, right: 20, top: 20, bottom: 50 },
      xAxis: { type: 'value', name: 'step', nameLocation: 'middle', nameGap: 28 },
      yAxis: { type: 'value', scale: true, name: metric },
      dataZoom: [{ type: 'inside' }],
      series,
    });
    goTo(c, (p) => Number((p as unknown as { seriesName: string }).seriesName?.slice(1)));
  }

  function drawMembers(): void {
    if (!isPbt && !isPromotion) return;
    const trials = [...details.values()];
    const exploits = trials.reduce((a, t) => a + t.lineage.length, 0);
    populationNote.textContent = isPbt
      ? `${trials.length} members, ${exploits} exploits: each arrow runs from the donor at the step of its checkpoint to the member that took it (hover: the parameters before and after).`
      : `${trials.length} trials: a line breaks where the trial paused at a rung and goes on where it resumed (◆ a pause, hover for the wait; ▲ stopped).`;
    drawPopulation(population.el, trials, metric, {
      rungs: isPromotion ? rungLines : [],
      onClick: (n) => (location.hash = trialLink(name, n)),
    });
  }

  const fetchDetails = async (numbers: number[]) => {
    const got = await pool(numbers, 6, (n) => getTrial(name, n).catch(() => undefined));
    for (const t of got) if (t) details.set(Number(t.number), t);
  };

  async function drawImportance(): Promise<void> {
    try {
      const r = await call<{ params: { name: string; importance: number }[]; trials: string; topTrials: string; method: string }>(
        'GetParameterImportance', { study: name });
      const params = [...r.params].reverse();
      draw('importance', importance.el, {
        title: { text: `${r.method}, ${r.trials} trials (top ${r.topTrials})`, textStyle: { fontSize: 11, fontWeight: 'normal' }, right: 10, top: 0 },
        tooltip: { trigger: 'item' },
        grid: { left: 100, right: 30, top: 30, bottom: 30 },
        xAxis: { type: 'value', max: 1 },
        yAxis: { type: 'category', data: params.map((p) => p.name) },
        series: [{ type: 'bar', data: params.map((p) => p.importance), label: { show: true, position: 'right', formatter: (p: { value: number }) => fmt(p.value) } }],
      });
    } catch (e) {
      importance.el.replaceChildren(h('p', { class: 'error' }, e instanceof ApiError ? e.message : String(e)));
    }
  }

  // ---- first draw ----
  // Each step's time goes to window.__dial.timings (the bench reads it).
  const timings: Record<string, number> = (window.__dial.timings = {});
  const timed = (label: string, fn: () => void) => {
    const t0 = performance.now();
    fn();
    timings[label] = performance.now() - t0;
  };
  const drawColumns = () => {
    timed('history', drawHistory);
    timed('parallel', drawParallel);
    timed('slices', drawSlices);
    timed('contour', drawContour);
    timed('table', () => tableView.setData(table));
    if (pareto) timed('pareto', () => pareto.redraw(table));
  };
  drawHeader();
  drawColumns();
  // Drawn (progressive rendering is off) and painted at the next frame.
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  performance.mark('dial-interactive');
  window.__dial.interactive = true;

  const loadRest = async () => {
    const bestTrials = await call<{ trials: Trial[]; referencePoint?: number[] }>('GetBestTrials', { study: name, count: CURVES_BEST });
    best = bestTrials.trials[0];
    if (bestTrials.referencePoint?.length) pareto?.setReference(bestTrials.referencePoint);
    drawHeader();
    await Promise.all([drawImportance(), fetchDetails(curveSet(bestTrials.trials.map((t) => Number(t.number))))]);
    if (closed) return;
    drawCurves();
    drawMembers();
    performance.mark('dial-loaded');
    window.__dial.loaded = true;
  };
  const loaded = loadRest().catch((e) => curves.el.replaceChildren(h('p', { class: 'error' }, String(e))));

  // ---- live updates ----
  const upsert = (t: Trial) => {
    const n = Number(t.number);
    let i = rowOf.get(n);
    if (i === undefined) {
      i = table.number.length;
      rowOf.set(n, i);
      table.number.push(n);
      table.state.push(t.state);
      table.value.push(null);
      table.lastStep.push(-1);
      for (const p of table.params) table.param[p.name].push(null);
      for (const col of Object.values(table.values ?? {})) col.push(null);
      table.feasible?.push(null);
    }
    table.state[i] = t.state;
    table.value[i] = t.objectiveValue ?? null;
    table.objectives?.forEach((o, k) => (table.values![o.metric][i] = t.objectiveValues?.[k] ?? null));
    if (table.feasible) table.feasible[i] = feasible(spec, t);
    table.lastStep[i] = Number(t.lastStep);
    for (const p of table.params) table.param[p.name][i] = cellOf(t, p.name);
  };
  const redraw = throttle(() => {
    if (!closed) drawColumns();
  }, () => Math.max(1000, table.number.length / 25));
  let importanceDue = 0;
  const refreshDetails = throttle(async () => {
    await loaded;
    const numbers = [...stale];
    stale.clear();
    await fetchDetails(numbers);
    if (closed) return;
    drawCurves();
    drawMembers();
    if (performance.now() > importanceDue) {
      importanceDue = performance.now() + 10000;
      void drawImportance();
    }
    // The reference point moves with the trials when the spec sets none.
    if (pareto) {
      void call<{ referencePoint?: number[] }>('GetBestTrials', { study: name, count: 1 })
        .then((r) => r.referencePoint?.length && !closed && pareto.setReference(r.referencePoint)).catch(() => undefined);
    }
  }, () => 2500);
  let snapshots = 0;
  const onEvent = (ev: StudyEvent) => {
    events++;
    eventsEl.textContent = String(events);
    if (ev.study) study = ev.study;
    if (ev.bestTrial) best = ev.bestTrial;
    drawHeader();
    if (ev.kind === 'SNAPSHOT' && snapshots++ > 0) {
      // A reconnect: whatever happened meanwhile comes with the table.
      void get<TrialTable>('TrialTable', { study: name }).then((t) => {
        table = t;
        rowOf.clear();
        table.number.forEach((n, i) => rowOf.set(n, i));
        redraw();
      });
    }
    if (ev.trial) {
      upsert(ev.trial);
      const n = Number(ev.trial.number);
      if (details.has(n) || (ev.trial.state === 'RUNNING' && details.size < (isPbt ? LINEAGE_MAX : CURVES_MAX))) {
        stale.add(n);
        refreshDetails();
      }
      redraw();
    }
    if (ev.kind === 'STUDY_FINISHED') {
      source.close();
      liveEl.textContent = 'finished';
    }
    if (ev.kind === 'TRIAL_FINISHED' && ev.trial) {
      stale.add(Number(ev.trial.number));
      refreshDetails();
    }
  };
  const source = new EventSource(sessionUrl('WatchStudy', { study: name }));
  source.onopen = () => (liveEl.textContent = 'live');
  source.onmessage = (m) => onEvent(JSON.parse(m.data).event as StudyEvent);
  source.addEventListener('end', () => {
    if (study.state !== 'STUDY_ACTIVE') {
      source.close();
      liveEl.textContent = 'finished';
    } else {
      liveEl.textContent = 'reconnecting';
    }
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) liveEl.textContent = study.state === 'STUDY_ACTIVE' ? 'off (refresh to retry)' : 'finished';
    else if (liveEl.textContent !== 'finished') liveEl.textContent = 'reconnecting';
  };

  // Why ready trials wait is worked out by GetStudy only (events leave it
  // out): asked again every 5 s while the study is active.
  const showWaiting = (s: Study) => { waitingEl.textContent = s.waiting ?? ''; };
  showWaiting(first);
  const waitingTimer = window.setInterval(() => {
    if (study.state !== 'STUDY_ACTIVE') { waitingEl.textContent = ''; return; }
    call<{ study: Study }>('GetStudy', { study: name }).then((r) => showWaiting(r.study)).catch(() => undefined);
  }, 5000);

  return () => {
    closed = true;
    clearInterval(waitingTimer);
    source.close();
    redraw.cancel();
    refreshDetails.cancel();
    delete window.__dial.table;
  };
}

