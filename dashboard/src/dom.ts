// A small DOM builder and formatters shared by the pages.

type Attrs = Record<string, string | number | boolean | EventListener | undefined>;
type Child = Node | string | number | null | undefined | false;

export function h(tag: string, attrs: Attrs = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else if (k === 'class') el.className = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, ...children);
  return el;
}

export function append(el: HTMLElement, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === 'number' ? String(c) : c);
  }
}

// Text for an ECharts tooltip formatter, which renders its string as HTML:
// every user-controlled string (categorical values, names, lineage
// changes) goes through this.
export function esc(v: unknown): string {
  return String(v ?? '').replace(/[&<>"'`]/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function fmt(v: number | string | null | undefined): string {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'string') return v;
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(4) : v.toPrecision(5).replace(/\.?0+$/, '');
}

export function time(ts: string | undefined): string {
  if (!ts || ts.startsWith('1970-01-01')) return '–';
  return new Date(ts).toLocaleString();
}

export function ago(ts: string | undefined): string {
  if (!ts) return '–';
  const s = Math.round((Date.now() - new Date(ts).getTime()) / 1000);
  return s < 120 ? `${s} s ago` : s < 7200 ? `${Math.round(s / 60)} min ago` : time(ts);
}

export function studyLink(study: string): string {
  return `#/study/${encodeURIComponent(study)}`;
}

export function trialLink(study: string, number: number | string): string {
  return `${studyLink(study)}/trial/${number}`;
}

// Runs `fn` at most once per `ms` (trailing call kept), for live re-renders.
export function throttle(fn: () => void, ms: () => number): { (): void; cancel(): void } {
  let timer: number | undefined;
  let last = 0;
  const run = () => {
    timer = undefined;
    last = performance.now();
    fn();
  };
  const wrapped = () => {
    if (timer !== undefined) return;
    timer = window.setTimeout(run, Math.max(0, last + ms() - performance.now()));
  };
  wrapped.cancel = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
  return wrapped;
}

export const STATES = ['PENDING', 'RUNNING', 'COMPLETED', 'STOPPED', 'PAUSED', 'FAILED'];
export const STATE_COLORS: Record<string, string> = {
  PENDING: '#9e9e9e', RUNNING: '#1e88e5', COMPLETED: '#43a047',
  STOPPED: '#fb8c00', PAUSED: '#8e24aa', FAILED: '#e53935',
};
