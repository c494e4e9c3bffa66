// The Pareto view of a study with several objectives: a scatter of two
// chosen objectives with the front highlighted, dominated trials faded and
// infeasible ones marked; with 3 or 4 objectives a matrix of every pair;
// and the hypervolume of the front after each trial. From TrialTable's
// per-objective columns; the reference point is GetBestTrials's.
import { TrialTable } from '../api';
import { Chart, draw } from '../charts';
import { esc, fmt, h, trialLink } from '../dom';

// Points of the hypervolume chart at most (evenly spaced over the trials).
export const HV_POINTS = 200;

type Point = number[];  // minimised: maximised objectives negated

const dominates = (a: Point, b: Point) => {
  let better = false;
  for (let k = 0; k < a.length; k++) {
    if (a[k] > b[k]) return false;
    if (a[k] < b[k]) better = true;
  }
  return better;
};
const same = (a: Point, b: Point) => a.every((v, k) => v === b[k]);

// The volume `points` dominate up to `ref` (minimising; points not better
// than ref in every coordinate add nothing): a sweep in 2-D, slices above.
export function hypervolume(points: Point[], ref: Point): number {
  const inside = points.filter((p) => p.every((v, k) => v < ref[k]));
  const hv = (pts: Point[], d: number): number => {
    if (!pts.length) return 0;
    if (d === 1) return ref[0] - Math.min(...pts.map((p) => p[0]));
    const sorted = [...pts].sort((a, b) => a[d - 1] - b[d - 1]);
    if (d === 2) {
      let area = 0, floor = ref[1];
      for (const p of [...pts].sort((a, b) => a[0] - b[0] || a[1] - b[1])) {
        if (p[1] < floor) {
          area += (ref[0] - p[0]) * (floor - p[1]);
          floor = p[1];
        }
      }
      return area;
    }
    let volume = 0;
    for (let i = 0; i < sorted.length; i++) {
      const next = i + 1 < sorted.length ? sorted[i + 1][d - 1] : ref[d - 1];
      if (next > sorted[i][d - 1]) volume += (next - sorted[i][d - 1]) * hv(sorted.slice(0, i + 1), d - 1);
    }
    return volume;
  };
  return hv(inside, ref.length);
}

// Rows of the table that can be on the front: COMPLETED, every objective
// known, not infeasible; in trial-number order.
function candidates(t: TrialTable): number[] {
  const out: number[] = [];
  const metrics = t.objectives!.map((o) => o.metric);
  for (let i = 0; i < t.number.length; i++) {
    if (t.state[i] !== 'COMPLETED' || t.feasible?.[i] === false) continue;
    if (metrics.every((m) => t.values![m][i] !== null)) out.push(i);
  }
  return out.sort((a, b) => t.number[a] - t.number[b]);
}

function pointOf(t: TrialTable, i: number): Point {
  return t.objectives!.map((o) => (o.goal === 'MAXIMIZE' ? -1 : 1) * t.values![o.metric][i]!);
}

// Rows on the Pareto front of `rows` (a duplicate of a member stays off).
export function frontRows(t: TrialTable, rows: number[]): number[] {
  const pts = rows.map((i) => pointOf(t, i));
  const out: number[] = [];
  for (let a = 0; a < rows.length; a++) {
    let on = true;
    for (let b = 0; b < rows.length && on; b++) {
      if (dominates(pts[b], pts[a]) || (b < a && same(pts[b], pts[a]))) on = false;
    }
    if (on) out.push(rows[a]);
  }
  return out;
}

// The front's hypervolume after each trial (in number order), at most
// HV_POINTS points; `ref` in the objectives' own units.
export function hypervolumeHistory(t: TrialTable, refUnits: number[]): [number, number][] {
  const ref = t.objectives!.map((o, k) => (o.goal === 'MAXIMIZE' ? -1 : 1) * refUnits[k]);
  const rows = candidates(t);
  const every = Math.max(1, Math.ceil(rows.length / HV_POINTS));
  let front: Point[] = [];
  let changed = false, last = 0;
  const out: [number, number][] = [];
  rows.forEach((i, k) => {
    const p = pointOf(t, i);
    if (!front.some((q) => dominates(q, p) || same(q, p))) {
      front = front.filter((q) => !dominates(p, q));
      front.push(p);
      changed = true;
    }
    if (k % every === every - 1 || k === rows.length - 1) {
      if (changed) last = hypervolume(front, ref);
      changed = false;
      out.push([t.number[i], last]);
    }
  });
  return out;
}

export interface ParetoView {
  section: HTMLElement;
  redraw(table: TrialTable): void;
  setReference(ref: number[]): void;
}

export function paretoView(study: string, first: TrialTable): ParetoView {
  let table = first;
  let reference: number[] | undefined;
  const metrics = table.objectives!.map((o) => o.metric);
  const pick = (testid: string, value: string) => h('select', { 'data-testid': testid, onchange: () => redraw(table) },
    ...metrics.map((m) => h('option', { value: m, selected: m === value }, m))) as HTMLSelectElement;
  const xSel = pick('pareto-x', metrics[0]);
  const ySel = pick('pareto-y', metrics[1]);
  const note = h('small', { 'data-testid': 'pareto-note' });
  const scatterEl = h('div', { class: 'chart tall', 'data-testid': 'chart-pareto' });
  const matrixEl = h('div', { class: 'chart tall', 'data-testid': 'chart-pareto-matrix' });
  const hvNote = h('small', { 'data-testid': 'hypervolume-note' });
  const hvEl = h('div', { class: 'chart', 'data-testid': 'chart-hypervolume' });
  const section = h('section', { class: 'panel' },
    h('h2', {}, 'Pareto front'), h('div', {}, 'x ', xSel, ' y ', ySel, ' '), note, scatterEl,
    metrics.length > 2 ? matrixEl : null,
    h('h2', {}, 'Hypervolume'), hvNote, hvEl);

  const open = (c: Chart) => {
    c.off('click');
    c.on('click', (p) => {
      const v = (p as unknown as { value: number[] }).value;
      if (v && v[2] !== undefined) location.hash = trialLink(study, v[2]);
    });
  };
  const tooltip = {
    trigger: 'item',
    formatter: (p: { seriesName: string; value: number[] }) =>
      `trial ${esc(p.value[2])} (${esc(p.seriesName)})<br>${metrics.map((m) => `${esc(m)} ${esc(fmt(table.values![m][rowOf.get(p.value[2])!]))}`).join('<br>')}`,
  };
  let rowOf = new Map<number, number>();

  // Series of one pair of objectives: front, dominated, infeasible.
  const pairSeries = (x: string, y: string, front: Set<number>, grid?: number) => {
    const at = (i: number) => [table.values![x][i], table.values![y][i], table.number[i]];
    const rows = table.number.map((_, i) => i).filter((i) => table.values![x][i] !== null && table.values![y][i] !== null && table.state[i] === 'COMPLETED');
    const axes = grid === undefined ? {} : { xAxisIndex: grid, yAxisIndex: grid };
    return [
      { name: 'dominated', type: 'scatter', symbolSize: 6, itemStyle: { color: '#4575b4', opacity: 0.25 }, ...axes,
        data: rows.filter((i) => !front.has(i) && table.feasible?.[i] !== false).map(at) },
      { name: 'infeasible', type: 'scatter', symbol: 'triangle', symbolSize: 7, itemStyle: { color: '#999', opacity: 0.6 }, ...axes,
        data: rows.filter((i) => table.feasible?.[i] === false).map(at) },
      { name: 'Pareto front', type: 'scatter', symbolSize: 10, itemStyle: { color: '#d73027' }, z: 3, ...axes,
        data: [...front].map(at) },
    ];
  };

  function redraw(t: TrialTable): void {
    table = t;
    rowOf = new Map(table.number.map((n, i) => [n, i]));
    const rows = candidates(table);
    const front = new Set(frontRows(table, rows));
    const x = xSel.value, y = ySel.value;
    const goal = (m: string) => table.objectives!.find((o) => o.metric === m)!.goal === 'MAXIMIZE' ? 'max' : 'min';
    note.textContent = `${front.size} trials on the front of ${rows.length} completed feasible ones` +
      (table.feasible ? `, ${table.feasible.filter((f) => f === false).length} infeasible (▲)` : '') +
      `. Front in red, dominated faded; click a point to open the trial.`;
    const series: object[] = pairSeries(x, y, front);
    if (metrics.length === 2) {
      const line = [...front].map((i) => [table.values![x][i]!, table.values![y][i]!]).sort((a, b) => a[0] - b[0]);
      series.push({ name: 'front line', type: 'line', data: line, showSymbol: false, silent: true, lineStyle: { color: '#d73027', width: 1 } });
    }
    open(draw('pareto', scatterEl, {
      tooltip, legend: { top: 0, data: ['Pareto front', 'dominated', 'infeasible'] },
      grid: { left: 70, right: 20, top: 30, bottom: 50 },
      xAxis: { type: 'value', scale: true, name: `${x} (${goal(x)})`, nameLocation: 'middle', nameGap: 28 },
      yAxis: { type: 'value', scale: true, name: `${y} (${goal(y)})` },
      series,
    }));
    if (metrics.length > 2) {
      const pairs: [string, string][] = [];
      metrics.forEach((a, i) => metrics.slice(i + 1).forEach((b) => pairs.push([a, b])));
      const cols = 3, rowsN = Math.ceil(pairs.length / cols);
      const grids = pairs.map((_, k) => ({
        left: `${4 + (k % cols) * 33}%`, width: '26%',
        top: `${6 + Math.floor(k / cols) * (90 / rowsN)}%`, height: `${90 / rowsN - 14}%`,
      }));
      open(draw('pareto-matrix', matrixEl, {
        tooltip, grid: grids,
        xAxis: pairs.map(([a], k) => ({ gridIndex: k, type: 'value', scale: true, name: a, nameLocation: 'middle', nameGap: 22 })),
        yAxis: pairs.map(([, b], k) => ({ gridIndex: k, type: 'value', scale: true, name: b })),
        series: pairs.flatMap(([a, b], k) => pairSeries(a, b, front, k)),
      }));
    }
    drawHypervolume();
  }

  function drawHypervolume(): void {
    if (!reference) {
      hvNote.textContent = 'waiting for the reference point';
      return;
    }
    const data = hypervolumeHistory(table, reference);
    hvNote.textContent = `Volume the front dominates up to the reference point (${reference.map((v) => fmt(v)).join(', ')}), after each trial.`;
    draw('hypervolume', hvEl, {
      tooltip: { trigger: 'item', formatter: (p: { value: number[] }) => `after trial ${esc(p.value[0])}: ${esc(fmt(p.value[1]))}` },
      grid: { left: 70, right: 20, top: 20, bottom: 50 },
      xAxis: { type: 'value', name: 'trial', nameLocation: 'middle', nameGap: 28 },
      yAxis: { type: 'value', scale: true, name: 'hypervolume' },
      series: [{ name: 'hypervolume', type: 'line', step: 'end', showSymbol: data.length < 60, data }],
    });
  }

  return {
    section,
    redraw,
    setReference(ref: number[]) {
      reference = ref;
      drawHypervolume();
    },
  };
}
