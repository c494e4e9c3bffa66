// The scheduler's JSON API (/api/v1, docs/http-api.md): StudyService in the
// proto3 JSON mapping (int64 as strings, enums as names), plus the columnar
// TrialTable, the WatchStudy event stream, exports and the login session.
// URLs are relative so the dashboard also works under a proxy's prefix.

export type ParamValue = { doubleValue?: number; intValue?: string; stringValue?: string };

export interface ParameterSpec {
  name: string;
  float?: { min: number; max: number; scale: string };
  int?: { min: string; max: string; scale: string };
  categorical?: { values: string[] };
  discrete?: { values: number[] };
}

export interface RungSchedule {
  minSteps: string;
  maxSteps: string;
  reductionFactor: number;
  promotion?: boolean;
}

export interface StudySpec {
  name: string;
  objective: { metric: string; goal: 'MAXIMIZE' | 'MINIMIZE' | 'GOAL_UNSPECIFIED' };
  searchSpace: ParameterSpec[];
  searcher?: Record<string, unknown>;
  scheduler?: { asha?: RungSchedule; hyperband?: RungSchedule; pbt?: object; [k: string]: unknown };
  budget: { maxTrials: number; maxParallelTrials: number };
  constraints?: { metric: string; max?: number; min?: number }[];
  priority?: number;
  trial?: { resources?: { gpus?: number; selector?: Record<string, string[]> } };
}

export interface Study {
  name: string;
  spec: StudySpec;
  state: string;
  createTime?: string;
  updateTime?: string;
  trialCounts: Record<string, number>;
  trialsCreated: number;
  owner: string;
  waiting?: string;  // why its ready trials wait, when not for a free slot
  note?: string;
}

export interface LineageEntry {
  step: string;
  sourceTrial: string;
  sourceStep: string;
  oldParams: Record<string, ParamValue>;
  newParams: Record<string, ParamValue>;
}

export interface MetricPoint {
  step: string;
  metrics: Record<string, number>;
  time?: string;
}

export interface Trial {
  study: string;
  number: string;
  state: string;
  params: Record<string, ParamValue>;
  clientId: string;
  finalMetrics: Record<string, number>;
  objectiveValue?: number;
  objectiveValues?: number[];  // several objectives, in the spec's order
  error: string;
  lastStep: string;
  createTime?: string;
  startTime?: string;
  endTime?: string;
  metricHistory: MetricPoint[];
  lineage: LineageEntry[];
  checkpoint: string;
  checkpointStep: string;
  attempt: number;
  failures: number;
  workerId: string;
  note?: string;
}

export interface Worker {
  id: string;
  host: string;
  resources: { gpus: { id: string; model: string }[]; cpus: number; memoryBytes: string; slots: number; labels: Record<string, string> };
  lastSeen?: string;
  principal: string;
  running: { study: string; number: string }[];
}

export interface Whoami {
  name: string;
  role: string;
  anonymous: boolean;
}

export type Cell = number | string | null;

// GET /api/v1/TrialTable: one array per column, one entry per trial.
export interface TrialTable {
  params: { name: string; type: 'float' | 'int' | 'categorical' | 'discrete'; log: boolean }[];
  number: number[];
  state: string[];
  value: (number | null)[];
  lastStep: number[];
  param: Record<string, Cell[]>;
  // Several objectives: each one's final values, by metric.
  objectives?: { metric: string; goal: 'MAXIMIZE' | 'MINIMIZE' }[];
  values?: Record<string, (number | null)[]>;
  // Studies with constraints: null until a trial has final metrics.
  feasible?: (boolean | null)[];
}

export interface StudyEvent {
  kind: string;
  study?: Study;
  trial?: Trial;
  bestTrial?: Trial;
}

export class ApiError extends Error {
  constructor(readonly httpStatus: number, readonly status: string, message: string) {
    super(message);
  }
}

async function check(response: Response): Promise<Response> {
  if (response.ok) return response;
  let status = String(response.status);
  let message = response.statusText;
  try {
    const body = await response.json();
    status = body.status ?? status;
    message = body.message ?? message;
  } catch {
    // not JSON: keep the HTTP status line
  }
  throw new ApiError(response.status, status, message);
}

// The login session's key. The session cookie is HttpOnly but reaches
// every port of this host; the key lives in this origin's storage (which
// other ports cannot read) and goes with every call (docs/security.md).
const SESSION_KEY = 'dial.sessionKey';
export function setSessionKey(key: string | undefined): void {
  if (key) localStorage.setItem(SESSION_KEY, key);
  else localStorage.removeItem(SESSION_KEY);
}
function sessionHeaders(): Record<string, string> {
  const key = localStorage.getItem(SESSION_KEY);
  return key ? { 'X-Dial-Session': key } : {};
}

export function apiUrl(path: string, query?: Record<string, string>): string {
  const q = query ? '?' + new URLSearchParams(query).toString() : '';
  return `api/v1/${path}${q}`;
}

// A GET URL that carries the session key itself, for what cannot send a
// header: EventSource and download links.
export function sessionUrl(path: string, query: Record<string, string> = {}): string {
  const key = localStorage.getItem(SESSION_KEY);
  return apiUrl(path, key ? { ...query, session_key: key } : query);
}

// POST /api/v1/<method> with a JSON request; the JSON answer.
export async function call<T>(method: string, request: object = {}): Promise<T> {
  const response = await fetch(apiUrl(method), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...sessionHeaders() },
    body: JSON.stringify(request),
    credentials: 'same-origin',
  });
  return (await check(response)).json();
}

export async function get<T>(path: string, query?: Record<string, string>): Promise<T> {
  const response = await fetch(apiUrl(path, query), { credentials: 'same-origin', headers: sessionHeaders() });
  return (await check(response)).json();
}

export function paramValue(v: ParamValue | undefined): Cell {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  return v.doubleValue ?? null;
}

export async function listStudies(): Promise<Study[]> {
  const out: Study[] = [];
  let pageToken = '';
  for (let i = 0; i < 100; i++) {
    const r = await call<{ studies: Study[]; nextPageToken: string }>('ListStudies', { pageSize: 1000, pageToken });
    out.push(...r.studies);
    pageToken = r.nextPageToken;
    if (!pageToken) break;
  }
  return out;
}

// A trial with its whole metric history (at most `maxPages` pages of 10,000).
export async function getTrial(study: string, number: number, maxPages = 10): Promise<Trial> {
  let trial: Trial | undefined;
  let historyPageToken = '';
  for (let i = 0; i < maxPages; i++) {
    const r = await call<{ trial: Trial; nextHistoryPageToken: string }>('GetTrial', {
      study, trial: String(number), historyPageSize: 10000, historyPageToken,
    });
    if (!trial) trial = r.trial;
    else trial.metricHistory.push(...r.trial.metricHistory);
    historyPageToken = r.nextHistoryPageToken;
    if (!historyPageToken) break;
  }
  return trial!;
}

// Runs `fn` over `items` with at most `limit` calls in flight.
export async function pool<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
