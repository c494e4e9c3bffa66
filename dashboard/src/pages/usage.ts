// Usage: slot-, GPU- and CPU-hours of worker trials' ended attempts, by
// owner or study, over a window (GetUsage; docs/scheduling.md#usage), with
// a CSV download of what is shown.
import { call } from '../api';
import { h } from '../dom';

interface UsageTotal {
  key: string;
  owner?: string;
  slotSeconds?: number;
  gpuSeconds?: number;
  cpuSeconds?: number;
  attempts?: string;
}

const WINDOWS: [string, number][] = [['all time', 0], ['last 24 hours', 24], ['last 7 days', 24 * 7], ['last 30 days', 24 * 30]];

const hours = (s?: number) => ((s ?? 0) / 3600).toFixed(2);

export async function renderUsage(root: HTMLElement): Promise<() => void> {
  const by = h('select', { 'data-testid': 'usage-by' },
    h('option', { value: 'owner' }, 'by owner'), h('option', { value: 'study' }, 'by study')) as HTMLSelectElement;
  const since = h('select', { 'data-testid': 'usage-since' },
    ...WINDOWS.map(([label, n]) => h('option', { value: String(n) }, label))) as HTMLSelectElement;
  const body = h('tbody');
  const head = h('thead');
  const csv = h('a', { 'data-testid': 'usage-csv', download: 'usage.csv' }, 'CSV');
  const load = async () => {
    const windowHours = Number(since.value);
    const request: Record<string, string> = { by: by.value };
    if (windowHours > 0) request.since = new Date(Date.now() - windowHours * 3600e3).toISOString();
    const totals = (await call<{ totals?: UsageTotal[] }>('GetUsage', request)).totals ?? [];
    const byStudy = by.value === 'study';
    const columns = [byStudy ? 'Study' : 'Owner', ...(byStudy ? ['Owner'] : []), 'Slot-hours', 'GPU-hours', 'CPU-hours', 'Attempts'];
    head.replaceChildren(h('tr', {}, ...columns.map((c) => h('th', {}, c))));
    body.replaceChildren(...totals.map((t) => h('tr', { 'data-testid': 'usage-row' },
      h('td', {}, t.key || '–'), ...(byStudy ? [h('td', {}, t.owner || '–')] : []),
      h('td', { class: 'num' }, hours(t.slotSeconds)), h('td', { class: 'num' }, hours(t.gpuSeconds)),
      h('td', { class: 'num' }, hours(t.cpuSeconds)), h('td', { class: 'num' }, t.attempts ?? '0'))));
    const quote = (s: string) => (/[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
    const lines = [[byStudy ? 'study' : 'owner', ...(byStudy ? ['owner'] : []), 'slot_seconds', 'gpu_seconds', 'cpu_seconds', 'attempts'].join(',')];
    for (const t of totals) {
      lines.push([quote(t.key), ...(byStudy ? [quote(t.owner ?? '')] : []), t.slotSeconds ?? 0, t.gpuSeconds ?? 0,
        t.cpuSeconds ?? 0, t.attempts ?? '0'].join(','));
    }
    URL.revokeObjectURL(csv.getAttribute('href') ?? '');
    csv.setAttribute('href', URL.createObjectURL(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' })));
  };
  by.addEventListener('change', () => { load().catch(() => undefined); });
  since.addEventListener('change', () => { load().catch(() => undefined); });
  await load();
  root.append(h('h1', {}, 'Usage'), h('p', {}, by, ' ', since, ' ', csv),
    h('table', { class: 'grid', 'data-testid': 'usage' }, head, body));
  return () => URL.revokeObjectURL(csv.getAttribute('href') ?? '');
}
