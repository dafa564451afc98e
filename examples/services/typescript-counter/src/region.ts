// One region of the sharded counter: a process that serves the `counter`
// shards shardalloc homes on it, and takes increments over HTTP.
//
//   node dist/src/region.js NODE_URL PORT --data DIR
//
// Its region address is `127.0.0.1:PORT`, and on that port it serves:
//
//   POST /increment {"id": "...", "counter": "..."}
//       an increment from a client: `region.send(counter, {id})`, which
//       delivers it here or forwards it to the counter's home. 200 once the
//       region took it (from then on this process answers for it: see the
//       outbox below), 503 when it cannot (leaving, buffers full): the
//       client sends it again, here or elsewhere, with the same id.
//   POST /deliver {"shard": "...", "message": {"id": "..."}}
//       a message another region forwarded: handed to
//       `region.inbox().deliver(shard, message)`. 200 once it is written
//       (or was already), here or where this region routed it; 503 when
//       the region cannot take it (or 409 for a fenced write): the sender's
//       transport then routes it again.
//
// Counters live in a directory every region shares (`--data`): one JSON file
// per shard, `{count, ids, epoch}`, read when the shard starts and written
// (a temporary file, then a rename) at every delivery. See README.md for the
// design; the comments below say why each part never loses an increment and
// never counts one twice.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { Region, SendError, TransportError, type Application, type Transport } from '@shardalloc/client';

/** The entity type the counters are. */
export const ENTITY_TYPE = 'counter';

/** An increment: its id is unique, so a retried one is counted once. */
export interface Increment {
  id: string;
}

/** A counter's file. */
export interface Stored {
  count: number;
  /** The increments counted, by id. */
  ids: string[];
  /** The epoch of the run that wrote the file last. */
  epoch: number;
}

/** How a delivery ended. */
type Outcome = 'counted' | 'duplicate' | 'forwarded' | 'refused' | 'not-running' | 'timeout';

/** How long a peer's `/deliver` may take (it waits for the write). */
const POST_TIMEOUT_MS = 15_000;
/** How long `/deliver` waits for the application to write the increment. */
const ACK_TIMEOUT_MS = 10_000;
/** After a failed forward, how long the transport refuses that (region, shard) at once. */
const DOWN_MS = 1_000;
/** After a failed forward, when the message goes back into the region. */
const RETRY_MS = 250;
/** An increment taken but not confirmed for this long is sent again (it is idempotent). */
const RESEND_AFTER_MS = 10_000;
/** How long, when exiting, the leftovers may take to reach their homes. */
const FLUSH_MS = 30_000;

// ---- arguments ----

function usage(problem: string): never {
  console.error(`region: ${problem}\nusage: node dist/src/region.js NODE_URL PORT --data DIR`);
  process.exit(2);
}

const positional: string[] = [];
let dataDir: string | undefined;
for (let i = 2; i < process.argv.length; i++) {
  const arg = process.argv[i]!;
  if (arg === '--data') {
    dataDir = process.argv[++i] ?? usage('--data needs a directory');
  } else {
    positional.push(arg);
  }
}
const [nodeUrl, portText] = positional;
if (nodeUrl === undefined || portText === undefined || positional.length !== 2) usage('name the node URL and the port');
if (dataDir === undefined) usage('name the shared data directory with --data');
const port = Number(portText);
if (!Number.isInteger(port) || port < 1 || port > 65_535) usage(`not a port: ${portText}`);
const address = `127.0.0.1:${port}`;
const dir: string = dataDir;
mkdirSync(dir, { recursive: true });

function log(...parts: unknown[]): void {
  console.log(`${new Date().toISOString()} [region ${address} pid ${process.pid}]`, ...parts);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- the application's storage: one file per counter, fenced by epoch ----

function fileOf(shard: string): string {
  return join(dir, `${encodeURIComponent(shard)}.json`);
}

function readStored(shard: string): Stored | undefined {
  try {
    return JSON.parse(readFileSync(fileOf(shard), 'utf8')) as Stored;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

function writeStored(shard: string, stored: Stored): void {
  const file = fileOf(shard);
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, JSON.stringify(stored));
  renameSync(temporary, file); // atomic: a reader sees the old file or the new one
}

/** The epoch each running shard started at here. */
const epochs = new Map<string, number>();
/** `/deliver` requests waiting for the outcome of an increment, by id. */
const waiters = new Map<string, ((outcome: Outcome) => void)[]>();
let fencedWrites = 0;

/**
 * Counts the increment: a conditional read-modify-write. Refused when a
 * greater epoch wrote the file (this run is stale: docs/operations.md,
 * "Fencing writes with shard epochs"); a no-op when the id is counted
 * already (a forward retried after its answer was lost, an increment the
 * client sent twice). Read and write are not one atomic step across
 * processes here, as they are in a database's `UPDATE … WHERE epoch <= $2`;
 * hand-offs keep one run per shard, and the epoch check catches the stale
 * run that did not notice it lost the shard.
 */
function count(shard: string, id: string): Outcome {
  const epoch = epochs.get(shard);
  if (epoch === undefined) return 'not-running';
  const stored = readStored(shard) ?? { count: 0, ids: [], epoch: 0 };
  if (stored.epoch > epoch) {
    fencedWrites += 1;
    log(`FENCED: the write of ${id} to ${shard} at epoch ${epoch} was refused: epoch ${stored.epoch} wrote already`);
    return 'refused';
  }
  if (stored.ids.includes(id)) return 'duplicate';
  writeStored(shard, { count: stored.count + 1, ids: [...stored.ids, id], epoch });
  return 'counted';
}

/**
 * The outcome of an increment here: counted or found counted, or forwarded
 * to a region that wrote it (its `/deliver` said so). `/deliver` answers
 * with it; the outbox lets the increment go or sends it again.
 */
function settle(id: string, outcome: Outcome): void {
  for (const resolve of waiters.get(id) ?? []) resolve(outcome);
  waiters.delete(id);
  if (outcome === 'counted' || outcome === 'duplicate' || outcome === 'forwarded') {
    outbox.confirm(id);
  } else {
    // Refused (a stale run) or not running: not counted. If this process
    // took it, route it again (to the counter's current home) shortly.
    outbox.retrySoon(id);
  }
}

const application: Application<Increment> = {
  startShard(shard, epoch) {
    const stored = readStored(shard);
    epochs.set(shard, epoch);
    log(`started ${shard} at epoch ${epoch} (count ${stored?.count ?? 0}, file epoch ${stored?.epoch ?? 0})`);
  },
  stopShard(shard) {
    epochs.delete(shard);
    log(`stopped ${shard}`);
  },
  deliver(shard, message) {
    settle(message.id, count(shard, message.id));
  },
};

// ---- the outbox: every increment this process took, until it is counted ----

/**
 * The increments `/increment` took, until one is counted (here, or by the
 * region a forward reached: its `/deliver` answers only once written). A
 * message the region buffers when it exits, a forward that failed after
 * the region stopped, a delivery a stale run's fence refused: each is
 * still here, and sent again. Resending is safe because counting is
 * idempotent by id.
 */
class Outbox {
  private readonly entries = new Map<string, { shard: string; message: Increment; since: number }>();
  private readonly watchdog = setInterval(() => this.resendStale(), 1_000);
  resent = 0;

  add(shard: string, message: Increment): void {
    this.entries.set(message.id, { shard, message, since: Date.now() });
  }

  confirm(id: string): void {
    this.entries.delete(id);
  }

  has(id: string): boolean {
    return this.entries.has(id);
  }

  get size(): number {
    return this.entries.size;
  }

  retrySoon(id: string): void {
    const entry = this.entries.get(id);
    if (entry) setTimeout(() => reinject(entry.shard, entry.message), RETRY_MS * 2);
  }

  private resendStale(): void {
    const now = Date.now();
    for (const entry of this.entries.values()) {
      if (now - entry.since >= RESEND_AFTER_MS) {
        entry.since = now;
        this.resent += 1;
        log(`resending ${entry.message.id} to ${entry.shard}: not confirmed for ${RESEND_AFTER_MS} ms`);
        reinject(entry.shard, entry.message);
      }
    }
  }

  stop(): void {
    clearInterval(this.watchdog);
  }

  /**
   * Once the region has left: every increment still here goes straight to
   * its counter's home, asked of the node's REST API, until written.
   */
  async flush(deadline: number): Promise<number> {
    await Promise.all(
      [...this.entries.values()].map(async ({ shard, message }) => {
        while (this.entries.has(message.id) && Date.now() < deadline) {
          try {
            const state = await fetch(`${nodeUrl}/v1/cluster/shards/${ENTITY_TYPE}/shards/${encodeURIComponent(shard)}`, {
              signal: AbortSignal.timeout(5_000),
            });
            const home = state.ok ? ((await state.json()) as { home: string | null }).home : null;
            if (home !== null && home !== address && (await post(home, shard, message))) {
              this.confirm(message.id);
              break;
            }
          } catch (error) {
            log(`flushing ${message.id}: ${(error as Error).message}`);
          }
          await sleep(200);
        }
      }),
    );
    return this.entries.size;
  }
}
const outbox = new Outbox();

// ---- the transport: forwards over HTTP ----

/** POSTs a forward to `to`'s `/deliver`: true once the home wrote it. */
async function post(to: string, shard: string, message: Increment): Promise<boolean> {
  try {
    const response = await fetch(`http://${to}/deliver`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ shard, message }),
      signal: AbortSignal.timeout(POST_TIMEOUT_MS),
    });
    const text = await response.text();
    if (response.ok) return true;
    log(`forward of ${message.id} for ${shard} to ${to}: ${response.status} ${text}`);
  } catch (error) {
    log(`forward of ${message.id} for ${shard} to ${to}: ${(error as Error).message}`);
  }
  return false;
}

/**
 * `Transport.send` is synchronous: the region calls it while performing
 * its core's actions, and a `TransportError` thrown there makes the region
 * keep the message (`forwardFailed`: back to the front of the shard's
 * buffer, the cached home dropped, the home asked again). An HTTP call
 * cannot fail synchronously, so:
 *
 * - `send` starts the POST and returns. When the POST fails (connection
 *   refused, a 503 from a region that has left, a timeout),
 *   the (region, shard) pair is marked down for a second and the message
 *   goes back in through this region's own `send` after a short delay.
 * - While a pair is marked down, `send` throws `unreachable` at once: the
 *   region buffers the message, forgets the stale home and asks the node
 *   again, so the retry waits for the hand-off instead of looping.
 * - Every increment stays in this process's outbox until a home wrote it,
 *   so one the region still held when it stopped is not lost either.
 *
 * A POST that succeeded but whose answer was lost is sent again: counting
 * is idempotent by id.
 */
class HttpTransport implements Transport<Increment> {
  private readonly down = new Map<string, number>();
  inFlight = 0;
  failures = 0;

  send(to: string, shard: string, message: Increment): void {
    const key = `${to} ${shard}`;
    const until = this.down.get(key);
    if (until !== undefined) {
      if (Date.now() < until) {
        throw new TransportError('unreachable', `the last forward of ${shard} to ${to} failed`);
      }
      this.down.delete(key);
    }
    this.inFlight += 1;
    void post(to, shard, message).then((ok) => {
      this.inFlight -= 1;
      if (ok) {
        settle(message.id, 'forwarded');
        return;
      }
      this.failures += 1;
      this.down.set(key, Date.now() + DOWN_MS);
      setTimeout(() => reinject(shard, message), RETRY_MS);
    });
  }

  /** Resolves once no POST is in flight, or at `deadline`. */
  async settled(deadline: number): Promise<void> {
    while (this.inFlight > 0 && Date.now() < deadline) await sleep(50);
  }
}

/** Hands an increment back to the region to route again; once it has left, the outbox's flush takes it. */
function reinject(shard: string, message: Increment): void {
  if (regionEnded) return;
  try {
    region.send(shard, message);
  } catch (error) {
    if (!(error instanceof SendError)) throw error;
    if (error.kind !== 'Stopped') setTimeout(() => reinject(shard, message), 1_000);
  }
}

// ---- the region ----

const transport = new HttpTransport();
let leaving = false;
let regionEnded = false;

const region: Region<Increment> = Region.start(
  {
    node: nodeUrl,
    entityType: ENTITY_TYPE,
    address,
    reconnectMinMs: 50,
    reconnectMaxMs: 1_000,
    homeRetryMs: 300,
    stopDeadlineMs: 10_000,
    drainAndLeaveTimeoutMs: 30_000,
  },
  application,
  transport,
);
region.on('update', (update) => {
  if (update.type === 'Registered' || update.type === 'Refused' || update.type === 'Disconnected' || update.type === 'Left') {
    log('update', JSON.stringify(update));
  }
});

// ---- HTTP ----

async function body(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
}

function answer(response: ServerResponse, status: number, value: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
}

const isText = (value: unknown): value is string => typeof value === 'string' && value.length > 0;

async function onIncrement(request: IncomingMessage, response: ServerResponse): Promise<void> {
  const { id, counter } = (await body(request)) as { id?: unknown; counter?: unknown };
  if (!isText(id) || !isText(counter)) return answer(response, 400, { error: 'the body is {"id": "...", "counter": "..."}' });
  if (leaving) return answer(response, 503, { error: `region ${address} is leaving` });
  const message: Increment = { id };
  try {
    region.send(counter, message);
  } catch (error) {
    return answer(response, 503, { error: (error as Error).message });
  }
  outbox.add(counter, message);
  answer(response, 200, { accepted: id });
}

async function onDeliver(request: IncomingMessage, response: ServerResponse): Promise<void> {
  const { shard, message } = (await body(request)) as { shard?: unknown; message?: { id?: unknown } };
  const id = message?.id;
  if (!isText(shard) || !isText(id)) return answer(response, 400, { error: 'the body is {"shard": "...", "message": {"id": "..."}}' });
  // Handed to the region, which delivers it to the shard when it runs
  // here, starts the shard when this region is its home (shards start on
  // demand: a message arriving for a shard homed here is what starts it),
  // or routes it on. The answer waits until the increment is written, here
  // or by the region it was routed to: until then the sender keeps it.
  const outcome = new Promise<Outcome>((resolve) => {
    const timer = setTimeout(() => resolve('timeout'), ACK_TIMEOUT_MS);
    waiters.set(id, [
      ...(waiters.get(id) ?? []),
      (outcome) => {
        clearTimeout(timer);
        resolve(outcome);
      },
    ]);
  });
  try {
    region.inbox().deliver(shard, { id });
  } catch (error) {
    // A TransportError (`closed`, `inbox-full`) or a SendError: not taken.
    waiters.delete(id);
    return answer(response, 503, { error: (error as Error).message });
  }
  const result = await outcome;
  if (result === 'counted' || result === 'duplicate' || result === 'forwarded') return answer(response, 200, { outcome: result });
  answer(response, result === 'refused' ? 409 : 503, { error: `${id} for ${shard} on ${address}: ${result}` });
}

const server = createServer((request, response) => {
  const route =
    request.method === 'POST' && request.url === '/increment' ? onIncrement : request.method === 'POST' && request.url === '/deliver' ? onDeliver : undefined;
  if (route === undefined) return answer(response, 404, { error: `no ${request.method} ${request.url}` });
  route(request, response).catch((error: unknown) => {
    if (!response.headersSent) answer(response, 400, { error: (error as Error).message });
  });
});
server.keepAliveTimeout = 1_000;
server.listen(port, '127.0.0.1', () => log(`listening; node ${nodeUrl}; data ${dir}`));

// ---- SIGTERM: drain, leave, hand over what is left, exit ----

process.once('SIGTERM', () => {
  void (async () => {
    leaving = true; // new increments go to another region
    log('SIGTERM: draining and leaving');
    try {
      await region.drainAndLeave();
      log('left the cluster');
    } catch (error) {
      log(`drain and leave failed: ${(error as Error).message}`);
      await region.shutdown();
    }
    regionEnded = true;
    outbox.stop();
    const deadline = Date.now() + FLUSH_MS;
    await transport.settled(deadline);
    const held = outbox.size;
    const left = await outbox.flush(deadline);
    log(
      `exiting: ${held} increment(s) handed straight to their homes, ${left} not delivered; ` +
        `${transport.failures} forward(s) failed and were routed again, ${outbox.resent} resent, ${fencedWrites} fenced write(s)`,
    );
    server.close();
    server.closeAllConnections();
    process.exit(left === 0 ? 0 : 1);
  })();
});
