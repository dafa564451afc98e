// One region of the sharded counter: a process that serves the `counter`
// shards shardalloc homes on it, and takes increments over HTTP.
//
//   node dist/src/region.js NODE_URL PORT --http HTTP_PORT --data DIR
//
// Its region address is `127.0.0.1:PORT`, where the client's built-in
// transport (`PeerTransport`) listens for the other regions: messages and
// asks for counters homed elsewhere travel there on the inter-region wire,
// with no forwarding of the service's own. On HTTP_PORT it serves:
//
//   POST /increment {"id": "...", "counter": "..."}
//       an increment from a client: `region.ask(counter, {id})`, answered by
//       the counter's home once the increment is written (or found written:
//       ids are counted once). 200 {outcome, by} then; 503 naming the
//       AskError when there is no answer (leaving, a timeout, the home lost
//       before it answered): the client sends it again, here or elsewhere,
//       with the same id.
//
// Counters live in a directory every region shares (`--data`): one JSON file
// per shard, `{count, ids, epoch}`, read when the shard starts and written
// (a temporary file, then a rename) at every increment. See README.md for
// the design.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { AskError, PeerTransport, Region, type Application } from '@shardalloc/client';

/** The entity type the counters are. */
export const ENTITY_TYPE = 'counter';

/** An increment: its id is unique, so a retried one is counted once. */
export interface Increment {
  id: string;
}

/** The home's answer to an increment. */
export interface Counted {
  /** `counted`, or `duplicate` for an id counted before. */
  outcome: 'counted' | 'duplicate';
  /** The region that wrote it. */
  by: string;
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
type Outcome = 'counted' | 'duplicate' | 'refused' | 'not-running';

/** How long `/increment` waits for the home's answer. */
const ASK_TIMEOUT_MS = 10_000;

// ---- arguments ----

function usage(problem: string): never {
  console.error(`region: ${problem}\nusage: node dist/src/region.js NODE_URL PORT --http HTTP_PORT --data DIR`);
  process.exit(2);
}

const positional: string[] = [];
let dataDir: string | undefined;
let httpText: string | undefined;
for (let i = 2; i < process.argv.length; i++) {
  const arg = process.argv[i]!;
  if (arg === '--data') {
    dataDir = process.argv[++i] ?? usage('--data needs a directory');
  } else if (arg === '--http') {
    httpText = process.argv[++i] ?? usage('--http needs a port');
  } else {
    positional.push(arg);
  }
}
const [nodeUrl, portText] = positional;
if (nodeUrl === undefined || portText === undefined || positional.length !== 2) usage('name the node URL and the port');
if (dataDir === undefined) usage('name the shared data directory with --data');
if (httpText === undefined) usage('name the HTTP port with --http');
const portOf = (text: string): number => {
  const port = Number(text);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) usage(`not a port: ${text}`);
  return port;
};
const port = portOf(portText);
const httpPort = portOf(httpText);
const address = `127.0.0.1:${port}`;
const dir: string = dataDir;
mkdirSync(dir, { recursive: true });

function log(...parts: unknown[]): void {
  console.log(`${new Date().toISOString()} [region ${address} pid ${process.pid}]`, ...parts);
}

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
 * Answers an increment: counted (or found counted) here, by the counter's
 * home. A fenced write (a stale run) or a shard that no longer runs here
 * fails the ask by name; the process that asked answers 503 and the
 * client sends the increment again.
 */
const application: Application<Increment, Counted> = {
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
    count(shard, message.id);
  },
  answer(shard, message) {
    const outcome = count(shard, message.id);
    if (outcome === 'refused' || outcome === 'not-running') {
      throw new Error(`${message.id} for ${shard} on ${address}: ${outcome}`);
    }
    return { outcome, by: address };
  },
};

// ---- the region, on the built-in transport ----

const incarnation = Date.now();
const transport = await PeerTransport.bind<Increment, Counted>({ entityType: ENTITY_TYPE, incarnation, port });
let leaving = false;
let asked = 0;
let failed = 0;

const region: Region<Increment, Counted> = Region.start(
  {
    node: nodeUrl,
    entityType: ENTITY_TYPE,
    address,
    incarnation,
    reconnectMinMs: 50,
    reconnectMaxMs: 1_000,
    homeRetryMs: 300,
    // Rounds of failed forwards outlast the node's removal of a dead region (4.5 s in the check).
    forwardAttempts: 30,
    stopDeadlineMs: 10_000,
    drainAndLeaveTimeoutMs: 30_000,
  },
  application,
  transport,
);
region.on('update', (update) => {
  if (['Registered', 'Refused', 'Disconnected', 'Left', 'RegionRemoved'].includes(update.type)) {
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
  asked += 1;
  try {
    const counted = await region.ask(counter, { id }, { timeoutMs: ASK_TIMEOUT_MS });
    answer(response, 200, counted);
  } catch (error) {
    if (!(error instanceof AskError)) throw error;
    failed += 1;
    answer(response, 503, { error: error.message, kind: error.kind });
  }
}

const server = createServer((request, response) => {
  if (request.method !== 'POST' || request.url !== '/increment') return answer(response, 404, { error: `no ${request.method} ${request.url}` });
  onIncrement(request, response).catch((error: unknown) => {
    if (!response.headersSent) answer(response, 400, { error: (error as Error).message });
  });
});
server.keepAliveTimeout = 1_000;
server.listen(httpPort, '127.0.0.1', () => log(`listening on 127.0.0.1:${httpPort}; node ${nodeUrl}; data ${dir}`));

// ---- SIGTERM: drain, leave, exit ----

process.once('SIGTERM', () => {
  void (async () => {
    leaving = true; // new increments go to another region
    log('SIGTERM: draining and leaving');
    let code = 0;
    try {
      await region.drainAndLeave();
      log('left the cluster');
    } catch (error) {
      log(`drain and leave failed: ${(error as Error).message}`);
      await region.shutdown();
      code = 1;
    }
    transport.close();
    log(`exiting: ${asked} increment(s) asked, ${failed} answered 503, ${fencedWrites} fenced write(s)`);
    server.close();
    server.closeAllConnections();
    process.exit(code);
  })();
});
