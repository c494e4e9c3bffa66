// What the dashboard's browser test and speed bench share: tokens, a real
// dial-scheduler serving the dashboard, workers, JSON API calls, headless
// Chromium through playwright-core, and bounded waits on conditions.
// Every process started here is killed on close() and on exit.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// --name=value arguments.
export function parseArgs(argv, required) {
  const out = {};
  for (const a of argv) {
    const m = /^--([^=]+)=(.*)$/.exec(a);
    if (!m) throw new Error(`bad argument '${a}' (want --name=value)`);
    out[m[1]] = m[2];
  }
  for (const r of required) if (!out[r]) throw new Error(`missing --${r}=...`);
  return out;
}

export function check(ok, what) {
  if (!ok) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

export function checkEq(actual, expected, what) {
  const a = JSON.stringify(actual), e = JSON.stringify(expected);
  if (a !== e) throw new Error(`check failed: ${what}: got ${a.slice(0, 400)}, want ${e.slice(0, 400)}`);
  console.log(`ok: ${what} (${a.length > 60 ? a.slice(0, 60) + '…' : a})`);
}

// Polls `fn` until it returns a truthy value; throws after `ms`.
export async function waitFor(fn, ms, what) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export class Harness {
  constructor() {
    this.dir = mkdtempSync(join(tmpdir(), 'dial-dashboard-'));
    this.procs = [];
    this.tokens = {};
    this.onExit = () => this.killAll('SIGKILL');
    process.on('exit', this.onExit);
    for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => process.exit(130));
  }

  // Random tokens for `principals` ([role, name]); the --auth-tokens file.
  writeTokens(principals) {
    const lines = principals.map(([role, name]) => {
      const token = randomBytes(32).toString('hex');
      this.tokens[name] = token;
      writeFileSync(join(this.dir, `${name}.token`), token, { mode: 0o600 });
      return `${role} ${name} ${createHash('sha256').update(token).digest('hex')}`;
    });
    const file = join(this.dir, 'auth-tokens');
    writeFileSync(file, lines.join('\n') + '\n', { mode: 0o600 });
    return file;
  }

  spawn(name, bin, args, env = {}) {
    const log = openSync(join(this.dir, `${name}.log`), 'w');
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', log], env: { ...process.env, ...env } });
    p.name = name;
    this.procs.push(p);
    return p;
  }

  // dial-scheduler on free loopback ports; resolves when both its gRPC and
  // HTTP readiness lines are out.
  async startScheduler(bin, args) {
    const p = this.spawn('scheduler', bin, [
      `--db=${join(this.dir, 'dial.db')}`, `--checkpoint-root=${join(this.dir, 'ckpt')}`,
      '--listen=127.0.0.1:0', '--http-listen=127.0.0.1:0', ...args]);
    let out = '';
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`scheduler not ready in 30 s: ${this.log('scheduler')}`)), 30000);
      p.on('exit', (code) => reject(new Error(`scheduler exited (${code}): ${this.log('scheduler')}`)));
      p.stdout.on('data', (d) => {
        out += d;
        const grpc = /dial-scheduler listening on (\S+)/.exec(out);
        const http = /dial-scheduler http on port (\d+)/.exec(out);
        if (grpc && http) {
          clearTimeout(timer);
          this.grpc = grpc[1];
          this.base = `http://127.0.0.1:${http[1]}`;
          resolve();
        }
      });
    });
    p.stdout.resume();
    return this.base;
  }

  startWorker(name, bin, args, token) {
    return this.spawn(name, bin, [`--scheduler=${this.grpc}`, `--checkpoint-root=${join(this.dir, 'ckpt')}`,
      `--work-dir=${join(this.dir, name)}`, ...args], token ? { DIAL_TOKEN: token } : {});
  }

  log(name) {
    try {
      return readFileSync(join(this.dir, `${name}.log`), 'utf8').slice(-3000);
    } catch {
      return '';
    }
  }

  // POST /api/v1/<method> as `who` (a principal of writeTokens, or none).
  async api(method, body = {}, who) {
    const r = await fetch(`${this.base}/api/v1/${method}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(who ? { Authorization: `Bearer ${this.tokens[who]}` } : {}) },
      body: JSON.stringify(body),
    });
    const json = await r.json();
    if (!r.ok) throw Object.assign(new Error(`${method}: ${r.status} ${json.status}: ${json.message}`), { httpStatus: r.status });
    return json;
  }

  async getJson(path, who) {
    const r = await fetch(`${this.base}/api/v1/${path}`, who ? { headers: { Authorization: `Bearer ${this.tokens[who]}` } } : {});
    if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
    return r.json();
  }

  // Headless Chromium with a fresh profile.
  async browser(nodeModules, chromium = '/usr/bin/chromium') {
    const { chromium: pw } = await import(pathToFileURL(join(nodeModules, 'playwright-core', 'index.mjs')).href);
    const profile = join(this.dir, 'chromium-profile');
    mkdirSync(profile, { recursive: true });
    this.context = await pw.launchPersistentContext(profile, {
      executablePath: chromium, headless: true, viewport: { width: 1400, height: 1000 },
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
        '--disable-sync', '--no-first-run', '--disable-quic'],
    });
    return this.context;
  }

  killAll(signal) {
    for (const p of this.procs) if (p.exitCode === null && p.signalCode === null) p.kill(signal);
  }

  async close(keep = false) {
    try {
      await this.context?.close();
    } catch {
      // already gone
    }
    this.killAll('SIGTERM');
    await Promise.all(this.procs.map((p) => p.exitCode !== null || p.signalCode !== null ? null : new Promise((resolve) => {
      const timer = setTimeout(() => { p.kill('SIGKILL'); }, 15000);
      p.on('exit', () => { clearTimeout(timer); resolve(); });
    })));
    process.off('exit', this.onExit);
    if (!keep) rmSync(this.dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  }
}

// Series data lengths of chart `name` in the page (null: no such chart).
export function seriesLengths(page, name) {
  return page.evaluate((n) => {
    const c = window.__dial.charts[n];
    // Large scatters hold a flat typed array [x0, y0, x1, y1, ...].
    const count = (d) => (Array.isArray(d) ? d.length : ArrayBuffer.isView(d) ? d.length / 2 : Object.keys(d ?? {}).length);
    return c ? c.getOption().series.map((s) => count(s.data ?? s.links)) : null;
  }, name);
}
