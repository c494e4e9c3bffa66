// Members over time: one line per trial of the objective against the step.
//  - PBT: each exploit is an arrow from the donor at its source step to the
//    recipient at the step it took the donor's checkpoint; hovering one shows
//    the parameters before and after.
//  - ASHA with promotion: a trial's line breaks where it paused at a rung and
//    goes on where it was resumed; ◆ marks each pause (hover: how long it
//    waited), ▲ a stopped trial's end.
// Readable at 32 members and 50 exploits: thin lines in distinct hues, a
// scrolling legend, hovering one member fades the others.
import { LineageEntry, ParamValue, Trial, paramValue } from '../api';
import { Chart, draw } from '../charts';
import { STATE_COLORS, esc, fmt } from '../dom';

const hue = (k: number, n: number) => `hsl(${Math.round((360 * k) / Math.max(1, n))}, 65%, 45%)`;

function valueAt(t: Trial | undefined, metric: string, step: number): number | undefined {
  if (!t) return undefined;
  let v: number | undefined;
  for (const p of t.metricHistory) {
    if (Number(p.step) > step) break;
    if (metric in p.metrics) v = p.metrics[metric];
  }
  return v;
}

function paramText(params: Record<string, ParamValue>): string {
  return Object.keys(params).sort().map((k) => `${esc(k)}=${esc(fmt(paramValue(params[k])))}`).join(', ');
}

export interface Exploit {
  source: number;
  target: number;
  entry: LineageEntry;
}

// Every exploit of `trials`' lineages.
export function exploitsOf(trials: Trial[]): Exploit[] {
  return trials.flatMap((t) => t.lineage.map((entry) => ({ source: Number(entry.sourceTrial), target: Number(t.number), entry })));
}

// Splits a history at the rungs a trial paused at (its first report at or
// past each rung): [step, value] runs with a null between them, and the
// pauses as [step, value, seconds until the next report].
function segments(t: Trial, metric: string, rungs: number[]): { data: (number[] | null)[]; pauses: [number, number, number][] } {
  const points = t.metricHistory.filter((p) => metric in p.metrics);
  const data: (number[] | null)[] = [];
  const pauses: [number, number, number][] = [];
  let next = 0;
  points.forEach((p, i) => {
    const step = Number(p.step);
    data.push([step, p.metrics[metric]]);
    let paused = false;
    while (next < rungs.length && rungs[next] <= step) {
      paused = true;
      next++;
    }
    const after = points[i + 1];
    if (paused && (after || t.state === 'PAUSED')) {
      const waited = after?.time && p.time ? (Date.parse(after.time) - Date.parse(p.time)) / 1000 : NaN;
      pauses.push([step, p.metrics[metric], waited]);
      if (after) data.push(null);
    }
  });
  return { data, pauses };
}

export function drawPopulation(el: HTMLElement, trials: Trial[], metric: string,
  opts: { rungs?: number[]; onClick: (n: number) => void }): Chart {
  const members = [...trials].sort((a, b) => Number(a.number) - Number(b.number));
  const byNumber = new Map(members.map((t) => [Number(t.number), t]));
  const rungs = opts.rungs ?? [];
  const series: object[] = members.map((t, k) => {
    const { data, pauses } = rungs.length ? segments(t, metric, rungs) : {
      data: t.metricHistory.filter((p) => metric in p.metrics).map((p) => [Number(p.step), p.metrics[metric]]),
      pauses: [] as [number, number, number][],
    };
    const points: object[] = pauses.map(([s, v, waited]) => ({
      coord: [s, v], symbol: 'diamond', symbolSize: 9, itemStyle: { color: STATE_COLORS.PAUSED },
      name: Number.isNaN(waited) ? `paused at step ${s}` : `paused at step ${s}, resumed after ${fmt(waited)} s`,
    }));
    const last = data.filter((d) => d !== null).pop();
    if (t.state === 'STOPPED' && last) points.push({ coord: last, symbol: 'triangle', symbolSize: 9, itemStyle: { color: STATE_COLORS.STOPPED }, name: 'stopped' });
    return {
      name: `#${t.number}`, type: 'line', showSymbol: false, connectNulls: false, data,
      color: hue(k, members.length), lineStyle: { width: 1.2 }, emphasis: { focus: 'series', lineStyle: { width: 2.5 } },
      markPoint: points.length ? { label: { show: false }, data: points } : undefined,
    };
  });
  const exploits = exploitsOf(members);
  series.push({
    name: 'exploits', type: 'lines', coordinateSystem: 'cartesian2d', polyline: false, z: 5,
    symbol: ['circle', 'arrow'], symbolSize: [4, 9],
    lineStyle: { color: '#333', width: 1, opacity: 0.55, type: 'dashed' },
    emphasis: { lineStyle: { width: 2, opacity: 1 } },
    data: exploits.map(({ source, target, entry }) => {
      const from = Number(entry.sourceStep), to = Number(entry.step);
      const y0 = valueAt(byNumber.get(source), metric, from);
      const y1 = valueAt(byNumber.get(target), metric, to);
      return {
        coords: [[from, y0 ?? y1 ?? 0], [to, y1 ?? y0 ?? 0]],
        source, target,
        tip: `#${source} step ${from} → #${target} step ${to}<br>before: ${paramText(entry.oldParams)}<br>after: ${paramText(entry.newParams)}`,
      };
    }),
  });
  const c = draw('population', el, {
    tooltip: {
      trigger: 'item',
      formatter: (p: { seriesType: string; seriesName: string; value: number[]; data: { tip?: string; name?: string }; componentType: string; name: string }) => {
        if (p.seriesType === 'lines') return p.data.tip ?? '';
        if (p.componentType === 'markPoint') return `${esc(p.seriesName)}: ${esc(p.name)}`;
        return `${esc(p.seriesName)} step ${esc(p.value?.[0])}: ${esc(fmt(p.value?.[1]))}`;
      },
    },
    legend: { type: 'scroll', top: 0, data: members.map((t) => `#${t.number}`) },
    grid: { left: 60, right: 20, top: 40, bottom: 50 },
    xAxis: { type: 'value', name: 'step', nameLocation: 'middle', nameGap: 28 },
    yAxis: { type: 'value', scale: true, name: metric },
    dataZoom: [{ type: 'inside' }],
    series,
  });
  c.off('click');
  c.on('click', (p) => {
    const q = p as unknown as { seriesType: string; seriesName: string; data: { target?: number } };
    const n = q.seriesType === 'lines' ? q.data.target : Number(q.seriesName?.slice(1));
    if (n !== undefined && !Number.isNaN(n)) opts.onClick(n);
  });
  return c;
}
