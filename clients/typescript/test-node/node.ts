// A real `shardalloc serve` for the tests that need a node: started on
// 127.0.0.1 with a fresh data directory and short timings, its address read
// from its first line, its output kept for a failing test's report, killed
// when the test ends. The binary is $SHARDALLOC_BIN, else the workspace's
// debug build (`cargo build -p shardalloc`; `cargo xtask test` builds it).

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Heartbeats every 200 ms, a 2 s lease, removal after 4.5 s of silence. */
export const FAST = [
  '--rebalance-interval-ms', '500',
  '--heartbeat-interval-ms', '200',
  '--unreachable-after-ms', '1500',
  '--remove-after-ms', '3000',
  '--lease-ms', '2000',
  '--handoff-timeout-ms', '10000',
];

/** Generous: every wait here takes milliseconds when things work. */
export const PATIENCE_MS = 30_000;

function binary(): string {
  const fromEnv = process.env['SHARDALLOC_BIN'];
  if (fromEnv) {
    return fromEnv;
  }
  const built = fileURLToPath(new URL('../../../../target/debug/shardalloc', import.meta.url));
  if (!existsSync(built)) {
    throw new Error(`no node binary at ${built}: run \`cargo build -p shardalloc\` or set SHARDALLOC_BIN`);
  }
  return built;
}

/** A running node. */
export class Node {
  private constructor(
    private readonly child: ChildProcess,
    private readonly data: string,
    /** `http://127.0.0.1:PORT`. */
    readonly base: string,
    private readonly log: string[],
    private readonly args: string[],
  ) {}

  /** Starts a node with `args` after `serve --listen 127.0.0.1:0 --data …`. */
  static async start(args: string[]): Promise<Node> {
    return Node.spawn(args, mkdtempSync(join(tmpdir(), 'shardalloc-ts-')), '127.0.0.1:0');
  }

  /** Starts a node listening on `listen` (a fixed port, for a node that must know its URL before it starts). */
  static async startOn(listen: string, args: string[]): Promise<Node> {
    return Node.spawn(args, mkdtempSync(join(tmpdir(), 'shardalloc-ts-')), listen);
  }

  /** True until the node's process has exited. */
  running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Kills the node at once (SIGKILL), keeping its data. */
  kill(): void {
    this.child.kill('SIGKILL');
  }

  /** Stops the node (SIGTERM, then waits for it) and starts it again on the same address and data. */
  async restart(): Promise<Node> {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill('SIGTERM');
    await exited;
    const next = await Node.spawn(this.args, this.data, new URL(this.base).host);
    next.log.unshift(...this.log);
    return next;
  }

  private static async spawn(args: string[], data: string, listen: string): Promise<Node> {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SHARDALLOC_')));
    const child = spawn(binary(), ['serve', '--listen', listen, '--data', data, ...args], {
      env: { ...env, SHARDALLOC_LOG: 'info,tower_http=warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const log: string[] = [];
    const keep = (prefix: string) => (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
        log.push(`${prefix}${line}`);
        if (log.length > 400) log.shift();
      }
    };
    child.stderr?.on('data', keep(''));
    const base = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the node printed no address within ${PATIENCE_MS} ms:\n${log.join('\n')}`)), PATIENCE_MS);
      child.stdout?.on('data', (chunk: Buffer) => {
        keep('[stdout] ')(chunk);
        const found = /shardalloc listening on (https?:\/\/\S+)/.exec(chunk.toString('utf8'));
        if (found?.[1]) {
          clearTimeout(timer);
          resolve(found[1]);
        }
      });
      child.on('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the node exited (${code}) before it listened:\n${log.join('\n')}`));
      });
    });
    return new Node(child, data, base, log, args);
  }

  /** The node's last output lines. */
  output(): string {
    return this.log.join('\n');
  }

  /** A REST call: its status and JSON body. */
  async request(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
    const response = await fetch(`${this.base}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    return { status: response.status, body: text ? (JSON.parse(text) as unknown) : null };
  }

  /** Kills the node and removes its data. */
  stop(): void {
    this.child.kill('SIGKILL');
    rmSync(this.data, { recursive: true, force: true });
  }
}

/** Waits until `probe` answers something other than undefined, up to `timeoutMs`. */
export async function waitFor<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs = PATIENCE_MS): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`waited ${timeoutMs} ms for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
