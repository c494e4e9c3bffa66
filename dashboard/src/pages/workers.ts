// The registered workers: host, slots, GPUs, labels, running trials, last
// heartbeat.
import { Worker, call } from '../api';
import { ago, h, trialLink } from '../dom';

export async function renderWorkers(root: HTMLElement): Promise<() => void> {
  const table = h('tbody');
  const draw = (workers: Worker[]) =>
    table.replaceChildren(...workers.map((w) =>
      h('tr', { 'data-testid': 'worker-row', 'data-worker': w.id },
        h('td', {}, w.id),
        h('td', {}, w.host),
        h('td', { class: 'num' }, w.resources.slots),
        h('td', {}, w.resources.gpus.length ? w.resources.gpus.map((g) => g.model || g.id).join(', ') : '–'),
        h('td', { 'data-testid': 'worker-labels' },
          Object.entries(w.resources.labels ?? {}).sort(([a], [b]) => a.localeCompare(b))
            .map(([k, v]) => `${k}=${v}`).join(', ') || '–'),
        h('td', { 'data-testid': 'worker-running' }, ...w.running.flatMap((t, i) => [
          i ? ', ' : '', h('a', { href: trialLink(t.study, t.number) }, `${t.study}/${t.number}`)])),
        h('td', { title: w.lastSeen ?? '' }, ago(w.lastSeen)),
        h('td', {}, w.principal || '–'))));
  const load = async () => draw((await call<{ workers: Worker[] }>('ListWorkers')).workers);
  await load();
  root.append(
    h('h1', {}, 'Workers'),
    h('table', { class: 'grid', 'data-testid': 'workers' },
      h('thead', {}, h('tr', {}, ...['Worker', 'Host', 'Slots', 'GPUs', 'Labels', 'Running', 'Last heartbeat', 'Principal'].map((t) => h('th', {}, t)))),
      table));
  const timer = window.setInterval(() => load().catch(() => undefined), 5000);
  return () => clearInterval(timer);
}
