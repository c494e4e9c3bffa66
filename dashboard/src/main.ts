// Dial's dashboard: a hash router over six pages (docs/dashboard.md).
// Only `/` and `/assets/*` are ever fetched from the server besides the API:
//   #/                          studies
//   #/study/NAME                one study
//   #/study/NAME/trial/N        one trial
//   #/workers                   workers
//   #/usage                     usage by owner or study
//   #/compare?studies=A,B&x=X   studies side by side
import './style.css';
import { ApiError, Whoami, call, get, setSessionKey } from './api';
import { disposeAll } from './charts';
import { append, h } from './dom';
import { renderCompare } from './pages/compare';
import { renderStudies } from './pages/studies';
import { renderStudy } from './pages/study';
import { renderTrial } from './pages/trial';
import { renderUsage } from './pages/usage';
import { renderWorkers } from './pages/workers';

// A page draws into `root` and returns what to do when it is left.
export type Cleanup = () => void;

const top = document.getElementById('top')!;
const app = document.getElementById('app')!;
let cleanup: Cleanup | undefined;
let generation = 0;

function leave(): void {
  cleanup?.();
  cleanup = undefined;
  disposeAll();
  app.replaceChildren();
  // Readiness flags of the page being left (tests and the bench wait on them).
  window.__dial.interactive = window.__dial.loaded = false;
}

async function route(): Promise<void> {
  leave();
  const g = ++generation;
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?', 2);
  const parts = path.split('/').map(decodeURIComponent);
  const root = h('div', { class: 'page' });
  app.append(root);
  try {
    let done: Cleanup | undefined;
    if (parts[0] === 'study' && parts[1] && parts[2] === 'trial' && parts[3]) {
      done = await renderTrial(root, parts[1], Number(parts[3]));
    } else if (parts[0] === 'study' && parts[1]) {
      done = await renderStudy(root, parts[1]);
    } else if (parts[0] === 'workers') {
      done = await renderWorkers(root);
    } else if (parts[0] === 'usage') {
      done = await renderUsage(root);
    } else if (parts[0] === 'compare') {
      done = await renderCompare(root, new URLSearchParams(query ?? ''));
    } else {
      done = await renderStudies(root);
    }
    if (g !== generation) done?.();
    else cleanup = done;
  } catch (e) {
    if (g !== generation) return;
    if (e instanceof ApiError && e.httpStatus === 401) return start();
    root.append(h('p', { class: 'error', 'data-testid': 'page-error' }, errorText(e)));
  }
}

export function errorText(e: unknown): string {
  if (e instanceof ApiError) return `${e.status}: ${e.message}`;
  return String(e);
}

function header(me: Whoami): void {
  top.replaceChildren();
  append(top,
    h('a', { href: '#/', class: 'brand' }, 'Dial'),
    h('nav', {}, h('a', { href: '#/' }, 'Studies'), h('a', { href: '#/workers' }, 'Workers'),
      h('a', { href: '#/usage' }, 'Usage'), h('a', { href: '#/compare', 'data-testid': 'nav-compare' }, 'Compare')),
    h('span', { class: 'who', 'data-testid': 'whoami' },
      me.anonymous ? `anonymous (${me.role})` : `${me.name} (${me.role})`),
    me.anonymous ? null : h('a', {
      href: '#', 'data-testid': 'logout',
      onclick: async (ev: Event) => {
        ev.preventDefault();
        await call('logout').catch(() => undefined);
        setSessionKey(undefined);
        start();
      },
    }, 'Log out'),
  );
}

function loginForm(message = ''): void {
  leave();
  top.replaceChildren(h('span', { class: 'brand' }, 'Dial'));
  const token = h('input', { type: 'password', name: 'token', autocomplete: 'current-password', 'data-testid': 'login-token', placeholder: 'token' }) as HTMLInputElement;
  const error = h('p', { class: 'error', 'data-testid': 'login-error' }, message);
  const form = h('form', {
    class: 'login', 'data-testid': 'login',
    onsubmit: async (ev: Event) => {
      ev.preventDefault();
      try {
        const r = await call<{ sessionKey?: string }>('login', { token: token.value });
        setSessionKey(r.sessionKey);
        start();
      } catch (e) {
        error.textContent = errorText(e);
      }
    },
  }, h('h2', {}, 'Log in'), h('label', {}, 'Token ', token), h('button', { type: 'submit', 'data-testid': 'login-submit' }, 'Log in'), error);
  app.append(form);
  token.focus();
}

async function start(): Promise<void> {
  window.removeEventListener('hashchange', onHash);
  try {
    const me = await get<Whoami>('whoami');
    window.__dial.me = me;
    header(me);
    window.addEventListener('hashchange', onHash);
    await route();
  } catch (e) {
    if (e instanceof ApiError && e.httpStatus === 401) loginForm();
    else loginForm(errorText(e));
  }
}

function onHash(): void {
  void route();
}

void start();
