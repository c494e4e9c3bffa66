// The studies: state, progress by trial state, best value, searcher and
// scheduler, owner.
import { Study, Trial, call, listStudies, pool } from '../api';
import { STATES, STATE_COLORS, append, fmt, h, studyLink } from '../dom';

export function kindOf(section: object | undefined): string {
  return section ? Object.keys(section)[0] ?? '–' : '–';
}

// A bar of the trials by state over max trials.
export function progress(study: Study): HTMLElement {
  const max = Math.max(study.spec.budget.maxTrials, study.trialsCreated, 1);
  const bar = h('div', { class: 'progress', title: STATES.map((s) => `${s}: ${study.trialCounts[s] ?? 0}`).join(', ') });
  for (const s of STATES) {
    const n = study.trialCounts[s] ?? 0;
    if (n) bar.append(h('span', { style: `width:${(100 * n) / max}%;background:${STATE_COLORS[s]}` }));
  }
  const done = (study.trialCounts.COMPLETED ?? 0) + (study.trialCounts.STOPPED ?? 0) + (study.trialCounts.FAILED ?? 0);
  return h('div', { class: 'progress-cell' }, bar,
    h('small', { 'data-testid': 'progress-text' }, `${done} done, ${study.trialCounts.RUNNING ?? 0} running / ${study.spec.budget.maxTrials}`));
}

export async function renderStudies(root: HTMLElement): Promise<() => void> {
  const studies = await listStudies();
  const best = await pool(studies, 8, (s) =>
    call<{ trials: Trial[] }>('GetBestTrials', { study: s.name, count: 1 }).then((r) => r.trials[0], () => undefined));
  const rows = studies.map((s, i) =>
    h('tr', { 'data-testid': 'study-row', 'data-study': s.name },
      h('td', {}, h('a', { href: studyLink(s.name) }, s.name)),
      h('td', { class: `state ${s.state}` }, s.state.replace('STUDY_', '')),
      h('td', {}, progress(s)),
      h('td', { class: 'num', 'data-testid': 'best-value' }, fmt(best[i]?.objectiveValue)),
      h('td', {}, `${s.spec.objective.goal === 'MINIMIZE' ? 'min' : 'max'} ${s.spec.objective.metric}`),
      h('td', {}, kindOf(s.spec.searcher)),
      h('td', {}, kindOf(s.spec.scheduler)),
      h('td', {}, s.owner || '–')));
  append(root,
    h('h1', {}, 'Studies'),
    studies.length === 0 ? h('p', {}, 'No studies yet: create one with `dialctl study create -f SPEC.yaml`.') : null,
    h('table', { class: 'grid', 'data-testid': 'studies' },
      h('thead', {}, h('tr', {}, ...['Study', 'State', 'Progress', 'Best', 'Objective', 'Searcher', 'Scheduler', 'Owner'].map((t) => h('th', {}, t)))),
      h('tbody', {}, ...rows)));
  // Refresh while the page is open (counts move as trials run).
  const timer = window.setInterval(async () => {
    try {
      const fresh = await listStudies();
      for (const s of fresh) {
        const row = root.querySelector(`tr[data-study="${CSS.escape(s.name)}"]`);
        row?.children[1].replaceChildren(s.state.replace('STUDY_', ''));
        row?.children[2].replaceChildren(progress(s));
      }
    } catch {
      // keep the last view
    }
  }, 5000);
  return () => clearInterval(timer);
}
