// The check: a shardalloc node, three region processes of the counter, and
// 3,000 increments with unique ids spread over 30 counters, sent round-robin
// to the three processes; midway a forced rebalance of every counter, a
// restart of one region (SIGTERM, wait for it to exit, start it again on
// the same ports) and a SIGKILL of another (started again on the same ports
// at once). Then every increment must be counted exactly once: the
// counters' files must hold each id once, in its counter, and nothing else.
//
//   npm run check      # the node: $SHARDALLOC_BIN, else <repo>/target/debug/shardalloc
//
// Exits 0 with a one-line summary, or nonzero naming what went wrong (a lost
// or doubled increment by its id), keeping its temporary directory (the
// node's data, the counters, every process's log) for a look (kept after a
// success too when CHECK_KEEP is set). Every child
// process is killed when it exits, whatever the outcome.

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { Stored } from './region.js';

const INCREMENTS = 3_000;
const COUNTERS = 30;
const REGIONS = 3;
/** Increments in flight at once. */
const CONCURRENCY = 8;
/** The increment after which every counter is rebalanced, the one after which a region restarts, the one after which one is killed. */
const REBALANCE_AT = 1_000;
const RESTART_AT = 1_500;
const KILL_AT = 2_200;
/** Bounds: each wait takes a few seconds at most when things work. */
const START_MS = 30_000;
const REGISTER_MS = 30_000;
const EXIT_MS = 60_000;
const INCREMENT_MS = 60_000;
const COUNTED_MS = 60_000;

/** The node's fast timings, as the client's node tests use them. */
const FAST = [
  '--rebalance-interval-ms', '500',
  '--heartbeat-interval-ms', '200',
  '--unreachable-after-ms', '1500',
  '--remove-after-ms', '3000',
  '--lease-ms', '2000',
  '--handoff-timeout-ms', '10000',
];

const here = dirname(fileURLToPath(import.meta.url)); // dist/src
const example = resolve(here, '..', '..');
const repo = resolve(example, '..', '..', '..');
const regionScript = join(example, 'dist', 'src', 'region.js');

class Failure extends Error {}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const started = Date.now();
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
const say = (line: string) => console.log(`check ${elapsed().padStart(7)}: ${line}`);

/** Waits until `probe` answers something other than undefined, up to `ms`; fails naming `what`. */
async function waitFor<T>(what: string, ms: number, probe: () => Promise<T | undefined> | T | undefined): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Failure(`waited ${ms / 1000} s for ${what}`);
    await sleep(100);
  }
}

// ---- processes ----

const work = mkdtempSync(join(tmpdir(), 'shardalloc-counter-'));
const logs = join(work, 'logs');
const counters = join(work, 'counters');
mkdirSync(logs);
mkdirSync(counters);

/** Every child started, killed on exit. */
const children = new Set<ChildProcess>();
/** The children whose exit is expected (the restarted region). */
const expectedExits = new Set<ChildProcess>();
let unexpectedExit: string | undefined;

function killAll(): void {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}
process.on('exit', killAll);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    killAll();
    process.exit(130);
  });
}

function track(child: ChildProcess, name: string): ChildProcess {
  children.add(child);
  child.on('exit', (code, signal) => {
    if (!expectedExits.has(child) && unexpectedExit === undefined) {
      unexpectedExit = `${name} exited unexpectedly (${signal ?? `code ${code}`})`;
    }
  });
  return child;
}

function nodeBinary(): string {
  const bin = process.env['SHARDALLOC_BIN'] || join(repo, 'target', 'debug', 'shardalloc');
  if (!existsSync(bin)) {
    throw new Failure(`no node binary at ${bin}: set SHARDALLOC_BIN or run \`cargo build -p shardalloc\` in ${repo}`);
  }
  return bin;
}

/** Starts `shardalloc serve` on 127.0.0.1 and reads its URL from its first line. */
async function startNode(): Promise<string> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('SHARDALLOC_')));
  const child = track(
    spawn(
      nodeBinary(),
      ['serve', '--listen', '127.0.0.1:0', '--data', join(work, 'node-data'), '--type', 'counter', ...FAST],
      { env: { ...env, SHARDALLOC_LOG: 'info,tower_http=warn' }, stdio: ['ignore', 'pipe', openSync(join(logs, 'node.log'), 'a')] },
    ),
    'the node',
  );
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Failure(`the node printed no address within ${START_MS / 1000} s`)), START_MS);
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const found = /shardalloc listening on (https?:\/\/\S+)/.exec(out);
      if (found?.[1]) {
        clearTimeout(timer);
        resolve(found[1]);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Failure(`the node exited (code ${code}) before it listened; see ${join(logs, 'node.log')}`));
    });
  });
}

/** A port nothing listens on now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** A region's two ports: its region address (the inter-region wire) and its HTTP. */
interface Ports {
  port: number;
  http: number;
}

function startRegion(node: string, { port, http }: Ports): ChildProcess {
  const log = openSync(join(logs, `region-${port}.log`), 'a');
  return track(
    spawn(process.execPath, [regionScript, node, String(port), '--http', String(http), '--data', counters], { stdio: ['ignore', log, log] }),
    `region 127.0.0.1:${port}`,
  );
}

// ---- the node's REST API ----

async function request(node: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${node}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  return { status: response.status, body: text ? (JSON.parse(text) as unknown) : null };
}

/** The regions up for `counter`. */
async function upRegions(node: string): Promise<Set<string>> {
  const { status, body } = await request(node, 'GET', '/v1/cluster/regions');
  if (status !== 200) throw new Failure(`GET /v1/cluster/regions answered ${status}: ${JSON.stringify(body)}`);
  const { regions } = body as { regions: { address: string; types: Record<string, string> }[] };
  return new Set(regions.filter((region) => region.types['counter'] === 'up').map((region) => region.address));
}

async function waitRegistered(node: string, addresses: string[]): Promise<void> {
  await waitFor(`${addresses.join(', ')} to be up for counter`, REGISTER_MS, async () => {
    const up = await upRegions(node);
    return addresses.every((address) => up.has(address)) ? true : undefined;
  });
}

// ---- the counters' files ----

interface Tally {
  /** The sum of every counter's count. */
  total: number;
  /** Ids never counted. */
  missing: string[];
  /** Problems that no wait can mend: an id counted twice, in the wrong counter, unknown; a count that is not its ids. */
  wrong: string[];
}

const counterOf = (i: number) => `counter-${i % COUNTERS}`;
const idOf = (i: number) => `inc-${String(i).padStart(5, '0')}`;

function tally(): Tally {
  const seen = new Map<string, string[]>();
  const wrong: string[] = [];
  let total = 0;
  for (const name of readdirSync(counters)) {
    if (!name.endsWith('.json')) continue;
    const shard = decodeURIComponent(name.slice(0, -'.json'.length));
    const stored = JSON.parse(readFileSync(join(counters, name), 'utf8')) as Stored;
    total += stored.count;
    if (stored.count !== stored.ids.length) wrong.push(`${shard} counts ${stored.count} but holds ${stored.ids.length} ids`);
    for (const id of stored.ids) seen.set(id, [...(seen.get(id) ?? []), shard]);
  }
  const expected = new Map<string, string>();
  for (let i = 0; i < INCREMENTS; i++) expected.set(idOf(i), counterOf(i));
  const missing: string[] = [];
  for (const [id, counter] of expected) {
    const where = seen.get(id) ?? [];
    if (where.length === 0) missing.push(id);
    else if (where.length > 1) wrong.push(`${id} was counted ${where.length} times (${where.join(', ')})`);
    else if (where[0] !== counter) wrong.push(`${id} was counted in ${where[0]}, not ${counter}`);
  }
  for (const id of seen.keys()) if (!expected.has(id)) wrong.push(`${id} was counted but never sent`);
  return { total, missing, wrong };
}

const list = (ids: string[]) => (ids.length > 20 ? `${ids.slice(0, 20).join(', ')} … (${ids.length})` : ids.join(', '));

// ---- the run ----

async function main(): Promise<string> {
  if (!existsSync(regionScript)) throw new Failure(`no ${regionScript}: run \`npm run build\` first`);
  const node = await startNode();
  say(`node at ${node}`);

  const taken: number[] = [];
  while (taken.length < 2 * REGIONS) {
    const port = await freePort();
    if (!taken.includes(port)) taken.push(port);
  }
  const ports: Ports[] = Array.from({ length: REGIONS }, (_, i) => ({ port: taken[2 * i]!, http: taken[2 * i + 1]! }));
  const addresses = ports.map(({ port }) => `127.0.0.1:${port}`);
  const regions = ports.map((port) => startRegion(node, port));
  await waitRegistered(node, addresses);
  say(`regions ${addresses.join(', ')} up`);

  // Midway: every counter rebalanced now, and one region restarted.
  let rebalance: Promise<string> | undefined;
  let restart: Promise<string> | undefined;
  let kill: Promise<string> | undefined;
  const restartIndex = 1;
  const killIndex = 2;
  const forceRebalance = async (): Promise<string> => {
    const shardIds = Array.from({ length: COUNTERS }, (_, i) => `counter-${i}`);
    const { status, body } = await request(node, 'POST', '/v1/cluster/shards/counter/rebalance', { shardIds, immediate: true });
    if (status !== 200 && status !== 202) throw new Failure(`the rebalance answered ${status}: ${JSON.stringify(body)}`);
    const { accepted, rejected } = body as { accepted: string[]; rejected: unknown[] };
    say(`rebalance: ${accepted.length} counters accepted, ${rejected.length} rejected`);
    return `${accepted.length} accepted`;
  };
  const restartRegion = async (): Promise<string> => {
    const old = regions[restartIndex]!;
    const { port } = ports[restartIndex]!;
    expectedExits.add(old);
    const exited = new Promise<number | null>((resolve) => {
      if (old.exitCode !== null) resolve(old.exitCode);
      else old.once('exit', (code) => resolve(code));
    });
    say(`SIGTERM to region 127.0.0.1:${port}`);
    old.kill('SIGTERM');
    const code = await Promise.race([exited, sleep(EXIT_MS).then(() => 'timeout' as const)]);
    if (code === 'timeout') throw new Failure(`region 127.0.0.1:${port} did not exit within ${EXIT_MS / 1000} s of SIGTERM`);
    if (code !== 0) throw new Failure(`region 127.0.0.1:${port} exited with code ${code} after SIGTERM (see ${join(logs, `region-${port}.log`)})`);
    const farewell = readFileSync(join(logs, `region-${port}.log`), 'utf8').split('\n').filter((line) => line.includes('] exiting: ')).pop();
    say(`region 127.0.0.1:${port} drained, left and exited 0 (${farewell?.split('] exiting: ')[1] ?? 'no farewell line'}); starting it again`);
    regions[restartIndex] = startRegion(node, ports[restartIndex]!);
    await waitRegistered(node, [`127.0.0.1:${port}`]);
    say(`region 127.0.0.1:${port} up again`);
    return `127.0.0.1:${port}`;
  };
  // A crash: no drain, no leave. The increments it was asked for fail at
  // their clients, which send them again elsewhere; the asks other
  // regions sent to its counters wait for the node to home them anew.
  const killRegion = async (): Promise<string> => {
    const victim = regions[killIndex]!;
    const { port } = ports[killIndex]!;
    expectedExits.add(victim);
    say(`SIGKILL to region 127.0.0.1:${port} under traffic; starting it again at once`);
    victim.kill('SIGKILL');
    await new Promise<void>((resolve) => (victim.exitCode !== null || victim.signalCode !== null ? resolve() : victim.once('exit', () => resolve())));
    regions[killIndex] = startRegion(node, ports[killIndex]!);
    await waitRegistered(node, [`127.0.0.1:${port}`]);
    say(`region 127.0.0.1:${port} up again after its SIGKILL`);
    return `127.0.0.1:${port}`;
  };

  let next = 0;
  let accepted = 0;
  let retries = 0;
  const sendOne = async (i: number): Promise<void> => {
    const body = JSON.stringify({ id: idOf(i), counter: counterOf(i) });
    const deadline = Date.now() + INCREMENT_MS;
    let problem = '';
    for (let attempt = 0; Date.now() < deadline; attempt++) {
      if (unexpectedExit) throw new Failure(unexpectedExit);
      const { http } = ports[(i + attempt) % REGIONS]!;
      try {
        const response = await fetch(`http://127.0.0.1:${http}/increment`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          signal: AbortSignal.timeout(10_000),
        });
        const text = await response.text();
        if (response.ok) return;
        problem = `${response.status} ${text}`;
      } catch (error) {
        problem = (error as Error).message;
      }
      // Not taken: the same id again, to the next region (safe: it is counted once).
      retries += 1;
      await sleep(attempt < REGIONS ? 10 : 200);
    }
    throw new Failure(`increment ${idOf(i)} was not accepted within ${INCREMENT_MS / 1000} s: ${problem}`);
  };
  const sender = async (): Promise<void> => {
    while (next < INCREMENTS) {
      const i = next++;
      await sendOne(i);
      accepted += 1;
      // Awaited after the sends; a rejection is handled there, not lost meanwhile.
      if (accepted === REBALANCE_AT) (rebalance = forceRebalance()).catch(() => undefined);
      if (accepted === RESTART_AT) (restart = restartRegion()).catch(() => undefined);
      if (accepted === KILL_AT) (kill = killRegion()).catch(() => undefined);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, sender));
  say(`${INCREMENTS} increments accepted (${retries} sends retried elsewhere)`);
  if (rebalance === undefined || restart === undefined || kill === undefined) throw new Failure('the rebalance, the restart or the kill never ran');
  await rebalance;
  const restarted = await restart;
  const killed = await kill;

  // Every increment counted exactly once, within the bound.
  const counted = await waitFor(`${INCREMENTS} increments to be counted`, COUNTED_MS, () => {
    if (unexpectedExit) throw new Failure(unexpectedExit);
    const now = tally();
    if (now.wrong.length > 0) throw new Failure(`counted wrongly:\n  ${now.wrong.slice(0, 20).join('\n  ')}`);
    if (now.total > INCREMENTS) throw new Failure(`the counters hold ${now.total} > ${INCREMENTS}`);
    return now.missing.length === 0 && now.total === INCREMENTS ? now : undefined;
  }).catch((error: unknown) => {
    if (error instanceof Failure && error.message.startsWith('waited')) {
      const now = tally();
      throw new Failure(`${error.message}: ${now.total} counted; lost: ${list(now.missing)}`);
    }
    throw error;
  });

  const fenced = readdirSync(logs)
    .filter((name) => name.startsWith('region-'))
    .map((name) => readFileSync(join(logs, name), 'utf8').split('\n').filter((line) => line.includes('FENCED:')).length)
    .reduce((a, b) => a + b, 0);
  return (
    `ok: ${counted.total} increments over ${COUNTERS} counters counted exactly once by ${REGIONS} regions ` +
    `across a rebalance of every counter, a restart of ${restarted} and a SIGKILL of ${killed} ` +
    `(${retries} sends retried, ${fenced} fenced writes refused) in ${elapsed()}`
  );
}

function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

try {
  const summary = await main();
  killAll();
  console.log(summary);
  if (process.env['CHECK_KEEP']) console.log(`kept ${work} (CHECK_KEEP is set)`);
  else rmSync(work, { recursive: true, force: true });
  process.exit(0);
} catch (error) {
  killAll();
  const message = error instanceof Failure ? error.message : (error as Error).stack ?? String(error);
  console.error(`FAILED: ${message}`);
  for (const name of readdirSync(logs).sort()) {
    console.error(`\n--- the last lines of ${name} ---\n${tail(join(logs, name), 15)}`);
  }
  console.error(`\nthe node's data, the counters and every log are kept in ${work}`);
  process.exit(1);
}
