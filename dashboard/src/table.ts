// The trial table: sort by any column, filter by state and by param ranges,
// and a virtual scroll over every row (only the visible ones are in the
// DOM), all on TrialTable's columns in the browser, so 100,000 trials page
// as fast as 100.
import { Cell, TrialTable } from './api';
import { STATES, fmt, h, trialLink } from './dom';

export const ROW_HEIGHT = 24;
export const PAGE_ROWS = 25;

type Key = 'number' | 'state' | 'value' | 'lastStep' | `param:${string}` | `obj:${string}`;

export class TrialTableView {
  readonly el: HTMLElement;
  private data!: TrialTable;
  private rows = new Int32Array(0);
  private first = 0;
  private sortKey: Key = 'number';
  private sortDesc = false;
  private states = new Set(STATES);
  private ranges = new Map<string, { min?: number; max?: number; value?: string }>();
  private readonly scroller: HTMLElement;
  private readonly spacer: HTMLElement;
  private readonly body: HTMLElement;
  private readonly head: HTMLElement;
  private readonly count: HTMLElement;
  private readonly filters: HTMLElement;
  private filterTimer?: number;

  constructor(private readonly study: string, data: TrialTable) {
    this.head = h('tr');
    this.body = h('tbody');
    this.spacer = h('div', { class: 'spacer' });
    this.scroller = h('div', { class: 'vscroll', 'data-testid': 'table-scroll' },
      h('table', { class: 'grid vtable' }, h('thead', {}, this.head), this.body), this.spacer);
    this.scroller.addEventListener('scroll', () => this.showFrom(Math.floor(this.scroller.scrollTop / ROW_HEIGHT)));
    this.count = h('span', { 'data-testid': 'table-count' });
    this.filters = h('div', { class: 'filters' });
    const pager = h('span', { class: 'pager' },
      h('button', { 'data-testid': 'page-prev', onclick: () => this.page(-1) }, '‹ Prev'),
      h('button', { 'data-testid': 'page-next', onclick: () => this.page(1) }, 'Next ›'));
    this.el = h('div', { class: 'trial-table' }, this.filters, h('div', { class: 'table-bar' }, this.count, pager), this.scroller);
    this.setData(data, true);
  }

  // New or updated columns (a live update): keeps sort, filters and place.
  setData(data: TrialTable, rebuild = false): void {
    const paramsChanged = !this.data || this.data.params.map((p) => p.name).join() !== data.params.map((p) => p.name).join();
    this.data = data;
    if (rebuild || paramsChanged) this.buildControls();
    this.apply();
  }

  // Numbers of the rows that pass the filters, in display order.
  rowNumbers(): number[] {
    return Array.from(this.rows, (i) => this.data.number[i]);
  }

  firstRow(): number {
    return this.first;
  }

  page(delta: number): void {
    this.showFrom(this.first + delta * PAGE_ROWS);
    this.scroller.scrollTop = this.first * ROW_HEIGHT;
  }

  private buildControls(): void {
    // Several objectives: a column each instead of the first one's value.
    const values: [Key, string][] = this.data.objectives
      ? this.data.objectives.map((o): [Key, string] => [`obj:${o.metric}`, o.metric])
      : [['value', 'Value']];
    const columns: [Key, string][] = [['number', '#'], ['state', 'State'], ...values, ['lastStep', 'Step'],
      ...this.data.params.map((p): [Key, string] => [`param:${p.name}`, p.name])];
    this.head.replaceChildren(...columns.map(([key, title]) => h('th', {
      'data-testid': `sort-${key}`, class: 'sortable',
      onclick: () => {
        this.sortDesc = this.sortKey === key ? !this.sortDesc : key === 'value' || key === 'lastStep' || key.startsWith('obj:');
        this.sortKey = key;
        this.apply();
      },
    }, title)));
    const onInput = () => {
      clearTimeout(this.filterTimer);
      this.filterTimer = window.setTimeout(() => this.apply(), 150);
    };
    const stateBoxes = STATES.map((s) => h('label', {}, h('input', {
      type: 'checkbox', checked: this.states.has(s), 'data-testid': `filter-state-${s}`,
      onchange: (ev: Event) => {
        if ((ev.target as HTMLInputElement).checked) this.states.add(s);
        else this.states.delete(s);
        this.apply();
      },
    }), s.toLowerCase()));
    const paramFilters = this.data.params.map((p) => {
      const r = this.ranges.get(p.name) ?? {};
      this.ranges.set(p.name, r);
      if (p.type === 'categorical') {
        const values = [...new Set(this.data.param[p.name].filter((v) => v !== null))].map(String).sort();
        return h('label', {}, `${p.name} `, h('select', {
          'data-testid': `filter-cat-${p.name}`,
          onchange: (ev: Event) => {
            r.value = (ev.target as HTMLSelectElement).value || undefined;
            this.apply();
          },
        }, h('option', { value: '' }, 'any'), ...values.map((v) => h('option', { value: v, selected: r.value === v }, v))));
      }
      const num = (which: 'min' | 'max') => h('input', {
        type: 'number', step: 'any', placeholder: which, value: r[which] ?? '', 'data-testid': `filter-${which}-${p.name}`,
        oninput: (ev: Event) => {
          const v = (ev.target as HTMLInputElement).value;
          r[which] = v === '' ? undefined : Number(v);
          onInput();
        },
      });
      return h('label', {}, `${p.name} `, num('min'), ' – ', num('max'));
    });
    this.filters.replaceChildren(h('div', {}, ...stateBoxes), h('div', {}, ...paramFilters));
  }

  // Filters, sorts, and redraws from the current first row.
  private apply(): void {
    const d = this.data;
    const n = d.number.length;
    const keep = new Int32Array(n);
    let m = 0;
    const checks = [...this.ranges.entries()]
      .filter(([, r]) => r.min !== undefined || r.max !== undefined || r.value !== undefined)
      .map(([name, r]) => ({ col: d.param[name] ?? [], ...r }));
    for (let i = 0; i < n; i++) {
      if (!this.states.has(d.state[i])) continue;
      let ok = true;
      for (const c of checks) {
        const v = c.col[i];
        if (v === null || v === undefined) { ok = false; break; }
        if (c.value !== undefined && String(v) !== c.value) { ok = false; break; }
        if (c.min !== undefined && !(typeof v === 'number' && v >= c.min)) { ok = false; break; }
        if (c.max !== undefined && !(typeof v === 'number' && v <= c.max)) { ok = false; break; }
      }
      if (ok) keep[m++] = i;
    }
    const rows = keep.slice(0, m);
    const col = this.column(this.sortKey);
    const sign = this.sortDesc ? -1 : 1;
    // Nulls last whatever the direction; ties by trial number.
    const cmp = (a: number, b: number) => {
      const x = col[a], y = col[b];
      if (x === y) return d.number[a] - d.number[b];
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * sign;
    };
    if (!(this.sortKey === 'number' && !this.sortDesc)) rows.sort(cmp);
    this.rows = rows;
    this.count.textContent = `${m} of ${n} trials`;
    this.count.dataset.rows = String(m);
    for (const th of this.head.children) {
      const key = (th as HTMLElement).dataset.testid?.slice(5);
      th.classList.toggle('asc', key === this.sortKey && !this.sortDesc);
      th.classList.toggle('desc', key === this.sortKey && this.sortDesc);
    }
    // The table stays in view (sticky); the spacer makes the scroll range.
    this.spacer.style.height = `${Math.max(0, m - PAGE_ROWS) * ROW_HEIGHT}px`;
    this.scroller.style.height = `${ROW_HEIGHT * (Math.min(m, PAGE_ROWS) + 1) + 2}px`;
    this.showFrom(this.first, true);
  }

  private column(key: Key): Cell[] {
    if (key.startsWith('param:')) return this.data.param[key.slice(6)] ?? [];
    if (key.startsWith('obj:')) return this.data.values?.[key.slice(4)] ?? [];
    return this.data[key as 'number' | 'state' | 'value' | 'lastStep'];
  }

  // Draws the rows from `first` on (only those that fit in the view).
  private showFrom(first: number, force = false): void {
    first = Math.max(0, Math.min(first, this.rows.length - PAGE_ROWS));
    if (first === this.first && !force) return;
    this.first = first;
    const d = this.data;
    const out: HTMLElement[] = [];
    const end = Math.min(this.rows.length, first + PAGE_ROWS);
    for (let r = first; r < end; r++) {
      const i = this.rows[r];
      const number = d.number[i];
      out.push(h('tr', { 'data-testid': 'trial-row', 'data-number': number },
        h('td', { class: 'num' }, h('a', { href: trialLink(this.study, number) }, number)),
        h('td', { class: `state ${d.state[i]}` }, d.state[i]),
        ...(d.objectives && d.values
          ? d.objectives.map((o) => h('td', { class: 'num', 'data-objective': o.metric }, fmt(d.values![o.metric][i])))
          : [h('td', { class: 'num' }, fmt(d.value[i]))]),
        h('td', { class: 'num' }, d.lastStep[i] < 0 ? '–' : d.lastStep[i]),
        ...d.params.map((p) => h('td', { class: 'num' }, fmt(d.param[p.name][i])))));
    }
    this.body.replaceChildren(...out);
    this.el.dataset.firstRow = String(first);
  }
}
