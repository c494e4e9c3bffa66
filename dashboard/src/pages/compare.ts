// Study comparison: 2-5 studies with the same objective metric and goal.
// Best-so-far overlaid against trial number, consumed steps or wall time;
// each study's parameter importance side by side; each study's best trial.
// The state lives in the URL (#/compare?studies=a,b&x=steps), so a link
// shows the same comparison.
import { Study, Trial, TrialTable, call, get, listStudies, paramValue, pool } from '../api';
import { draw } from '../charts';
import { append, esc, fmt, h, studyLink, trialLink } from '../dom';

export const COMPARE_MAX = 5;
const AXES = { trials: 'trial number', steps: 'steps consumed', time: 'wall time (s)' } as const;
type Axis = keyof typeof AXES;

export function compareLink(studies: string[], x: Axis = 'trials'): string {
  return `#/compare?studies=${studies.map(encodeURIComponent).join(',')}&x=${x}`;
}

// [x, best so far] each time the best improves, and at the end.
export function bestSoFar(points: [number, number][], maximize: boolean): [number, number][] {
  const out: [number, number][] = [];
  let best: number | undefined;
  for (const [x, v] of points) {
    if (best === undefined || (maximize ? v > best : v < best)) {
      best = v;
      out.push([x, v]);
    }
  }
  if (best !== undefined && points.length) out.push([points[points.length - 1][0], best]);
  return out;
}

// (x, value) of each trial with a value, in the order the x axis runs.
async function progressOf(study: Study, table: TrialTable, x: Axis): Promise<[number, number][]> {
  const rows = table.number.map((_, i) => i).filter((i) => table.value[i] !== null)
    .sort((a, b) => table.number[a] - table.number[b]);
  if (x === 'trials') return rows.map((i) => [table.number[i], table.value[i]!]);
  if (x === 'steps') {
    // Steps run by all trials created up to each one (a trial's last step).
    let consumed = 0;
    const byNumber = new Map<number, number>();
    table.number.map((n, i) => [n, i]).sort((a, b) => a[0] - b[0]).forEach(([n, i]) => {
      consumed += Math.max(0, table.lastStep[i]);
      byNumber.set(n, consumed);
    });
    return rows.map((i) => [byNumber.get(table.number[i])!, table.value[i]!]);
  }
  const start = Date.parse(study.createTime ?? '');
  const ended: [number, number][] = [];
  let pageToken = '';
  for (let page = 0; page < 100; page++) {
    const r = await call<{ trials: Trial[]; nextPageToken: string }>('ListTrials', { study: study.name, pageSize: 1000, pageToken });
    for (const t of r.trials) {
      if (t.objectiveValue === undefined || !t.endTime) continue;
      ended.push([(Date.parse(t.endTime) - start) / 1000, t.objectiveValue]);
    }
    pageToken = r.nextPageToken;
    if (!pageToken) break;
  }
  return ended.sort((a, b) => a[0] - b[0]);
}

export async function renderCompare(root: HTMLElement, query: URLSearchParams): Promise<() => void> {
  const chosen = (query.get('studies') ?? '').split(',').filter(Boolean).slice(0, COMPARE_MAX);
  const x: Axis = (query.get('x') as Axis) in AXES ? (query.get('x') as Axis) : 'trials';
  const studies = await listStudies();
  const byName = new Map(studies.map((s) => [s.name, s]));
  const objectiveOf = (s: Study) => `${s.spec.objective.goal === 'MINIMIZE' ? 'min' : 'max'} ${s.spec.objective.metric}`;
  const first = byName.get(chosen[0] ?? '');
  const go = (names: string[], axis: Axis = x) => (location.hash = compareLink(names, axis));

  // The picker: studies with the first one's objective; at most five.
  const picker = h('div', { class: 'compare-picker', 'data-testid': 'compare-picker' },
    ...studies.map((s) => {
      const on = chosen.includes(s.name);
      const fits = !first || objectiveOf(s) === objectiveOf(first);
      return h('label', { title: fits ? '' : `objective ${objectiveOf(s)} differs from ${objectiveOf(first!)}` },
        h('input', {
          type: 'checkbox', checked: on, disabled: !on && (!fits || chosen.length >= COMPARE_MAX),
          'data-testid': `compare-pick-${s.name}`,
          onchange: () => go(on ? chosen.filter((n) => n !== s.name) : [...chosen, s.name]),
        }), ` ${s.name} `, h('small', {}, `(${objectiveOf(s)})`));
    }));
  const axis = h('select', { 'data-testid': 'compare-x', onchange: (ev: Event) => go(chosen, (ev.target as HTMLSelectElement).value as Axis) },
    ...Object.entries(AXES).map(([k, label]) => h('option', { value: k, selected: k === x }, label)));
  append(root, h('h1', {}, 'Compare studies'),
    h('p', {}, `Pick 2 to ${COMPARE_MAX} studies with the same objective; the link in the address bar shows this comparison.`),
    picker, h('div', {}, 'x axis ', axis));

  const missing = chosen.filter((n) => !byName.has(n));
  const mixed = chosen.filter((n) => byName.has(n) && objectiveOf(byName.get(n)!) !== objectiveOf(first!));
  if (missing.length || mixed.length) {
    root.append(h('p', { class: 'error', 'data-testid': 'compare-error' },
      missing.length ? `no such study: ${missing.join(', ')}` : `not the same objective as ${chosen[0]}: ${mixed.join(', ')}`));
    return () => undefined;
  }
  if (chosen.length < 2) {
    root.append(h('p', { 'data-testid': 'compare-hint' }, 'Pick at least two studies.'));
    return () => undefined;
  }

  const picked = chosen.map((n) => byName.get(n)!);
  const maximize = first!.spec.objective.goal !== 'MINIMIZE';
  const metric = first!.spec.objective.metric;
  const tables = await pool(picked, 4, (s) => get<TrialTable>('TrialTable', { study: s.name }));
  const [progress, importance, bests] = await Promise.all([
    pool(picked, 4, (s) => progressOf(s, tables[picked.indexOf(s)], x)),
    pool(picked, 4, (s) => call<{ params: { name: string; importance: number }[] }>('GetParameterImportance', { study: s.name })
      .then((r) => r.params, () => [])),
    pool(picked, 4, (s) => call<{ trials: Trial[] }>('GetBestTrials', { study: s.name, count: 1 }).then((r) => r.trials[0], () => undefined)),
  ]);

  const bestEl = h('div', { class: 'chart tall', 'data-testid': 'chart-compare-best' });
  const importanceEl = h('div', { class: 'chart tall', 'data-testid': 'chart-compare-importance' });
  const params = [...new Set(importance.flatMap((p) => p.map((q) => q.name)))].sort();
  const allParams = [...new Set(picked.flatMap((s) => s.spec.searchSpace.map((p) => p.name)))].sort();
  append(root,
    h('section', { class: 'panel' }, h('h2', {}, `Best ${metric} so far`), bestEl),
    h('section', { class: 'panel' }, h('h2', {}, 'Parameter importance'), importanceEl),
    h('section', { class: 'panel' }, h('h2', {}, 'Best trials'),
      h('table', { class: 'grid', 'data-testid': 'compare-best-table' },
        h('thead', {}, h('tr', {}, ...['Study', 'Trials', 'Best', 'Trial', ...allParams].map((t) => h('th', {}, t)))),
        h('tbody', {}, ...picked.map((s, k) => {
          const b = bests[k];
          return h('tr', { 'data-testid': 'compare-best-row', 'data-study': s.name },
            h('td', {}, h('a', { href: studyLink(s.name) }, s.name)),
            h('td', { class: 'num' }, tables[k].number.length),
            h('td', { class: 'num', 'data-testid': 'compare-best-value' }, fmt(b?.objectiveValue)),
            h('td', { class: 'num' }, b ? h('a', { href: trialLink(s.name, b.number) }, b.number) : '–'),
            ...allParams.map((p) => h('td', { class: 'num' }, fmt(b ? paramValue(b.params[p]) : null))));
        })))));

  draw('compare-best', bestEl, {
    tooltip: { trigger: 'item', formatter: (p: { seriesName: string; value: number[] }) => `${esc(p.seriesName)}: ${esc(fmt(p.value[1]))} at ${esc(fmt(p.value[0]))}` },
    legend: { top: 0, type: 'scroll' },
    grid: { left: 70, right: 30, top: 40, bottom: 50 },
    xAxis: { type: 'value', name: AXES[x], nameLocation: 'middle', nameGap: 28 },
    yAxis: { type: 'value', scale: true, name: metric },
    series: picked.map((s, k) => ({ name: s.name, type: 'line', step: 'end', showSymbol: false, data: bestSoFar(progress[k], maximize) })),
  });
  draw('compare-importance', importanceEl, {
    tooltip: { trigger: 'item' },
    legend: { top: 0, type: 'scroll' },
    grid: { left: 110, right: 30, top: 40, bottom: 30 },
    xAxis: { type: 'value', max: 1 },
    yAxis: { type: 'category', data: params },
    series: picked.map((s, k) => ({
      name: s.name, type: 'bar',
      data: params.map((p) => importance[k].find((q) => q.name === p)?.importance ?? null),
    })),
  });
  return () => undefined;
}
