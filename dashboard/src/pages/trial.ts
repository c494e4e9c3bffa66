// One trial: its note, params, final metrics, its metric history, attempts and
// failures, worker, checkpoint, error (with the stderr tail) and lineage.
import { Study, call, getTrial, paramValue } from '../api';
import { draw } from '../charts';
import { append, fmt, h, studyLink, time, trialLink } from '../dom';
import { noteView } from '../note';
import { rungs } from './study';

function kv(rows: [string, unknown][], testid: string): HTMLElement {
  return h('table', { class: 'kv', 'data-testid': testid },
    ...rows.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v instanceof Node ? v : fmt(v as number | string)))));
}

export async function renderTrial(root: HTMLElement, study: string, number: number): Promise<() => void> {
  const [trial, { study: s }] = await Promise.all([
    getTrial(study, number),
    call<{ study: Study }>('GetStudy', { study }),
  ]);
  const metric = s.spec.objective.metric;
  append(root,
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Studies'), ' / ', h('a', { href: studyLink(study) }, study), ` / trial ${number}`),
    h('h1', {}, `${study} / trial ${number} `, h('span', { class: `state ${trial.state}`, 'data-testid': 'trial-state' }, trial.state)),
    noteView('trial-note', trial.note ?? '', async (text) =>
      (await call<{ trial: { note?: string } }>('SetNote', { study, trial: String(number), note: text })).trial.note ?? '').el,
    h('div', { class: 'cols' },
      h('section', {}, h('h2', {}, 'Params'),
        kv(Object.entries(trial.params).map(([k, v]) => [k, paramValue(v)]), 'trial-params')),
      h('section', {}, h('h2', {}, 'Final metrics'),
        kv(Object.entries(trial.finalMetrics).map(([k, v]) => [k, v]), 'trial-metrics')),
      h('section', {}, h('h2', {}, 'Run'), kv([
        ['objective', trial.objectiveValue ?? null],
        ['last step', Number(trial.lastStep)],
        ['attempt', trial.attempt],
        ['failures', trial.failures],
        ['worker', trial.workerId || null],
        ['client', trial.clientId || null],
        ['checkpoint', trial.checkpoint ? `${trial.checkpoint} (step ${trial.checkpointStep})` : null],
        ['created', time(trial.createTime)],
        ['started', time(trial.startTime)],
        ['ended', time(trial.endTime)],
      ], 'trial-run'))),
    trial.error ? h('section', {}, h('h2', {}, 'Error'), h('pre', { class: 'error', 'data-testid': 'trial-error' }, trial.error)) : null);

  // Every reported metric, one line each, with the ASHA rungs.
  const names = [...new Set(trial.metricHistory.flatMap((p) => Object.keys(p.metrics)))].sort((a, b) =>
    a === metric ? -1 : b === metric ? 1 : a.localeCompare(b));
  const el = h('div', { class: 'chart', 'data-testid': 'chart-trial-history' });
  root.append(h('section', {}, h('h2', {}, 'Metric history'), el));
  const marks = rungs(s.spec).map((x) => ({ xAxis: x, name: 'rung' }));
  draw('trial-history', el, {
    tooltip: { trigger: 'axis' },
    legend: { type: 'scroll', selected: Object.fromEntries(names.map((n, i) => [n, i < 4])) },
    grid: { left: 60, right: 20, top: 40, bottom: 50 },
    xAxis: { type: 'value', name: 'step', nameLocation: 'middle', nameGap: 28 },
    yAxis: { type: 'value', scale: true },
    dataZoom: [{ type: 'inside' }],
    series: names.map((n, i) => ({
      name: n, type: 'line', showSymbol: false,
      data: trial.metricHistory.filter((p) => n in p.metrics).map((p) => [Number(p.step), p.metrics[n]]),
      markLine: i === 0 && marks.length ? { symbol: 'none', silent: true, lineStyle: { type: 'dashed', color: '#999' }, data: marks } : undefined,
    })),
  });

  root.append(h('section', {}, h('h2', {}, 'Lineage'),
    trial.lineage.length === 0 ? h('p', {}, 'No exploits.') :
      h('table', { class: 'grid', 'data-testid': 'trial-lineage' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Step'), h('th', {}, 'Source'), h('th', {}, 'Changed params'))),
        h('tbody', {}, ...trial.lineage.map((l) => h('tr', {},
          h('td', {}, l.step),
          h('td', {}, h('a', { href: trialLink(study, l.sourceTrial) }, `trial ${l.sourceTrial}`), ` at step ${l.sourceStep}`),
          h('td', {}, changes(l.oldParams, l.newParams))))))));
  return () => undefined;
}

export function changes(before: Record<string, import('../api').ParamValue>, after: Record<string, import('../api').ParamValue>): string {
  return Object.keys(after).map((k) => `${k} ${fmt(paramValue(before[k]))}→${fmt(paramValue(after[k]))}`).join(', ');
}
