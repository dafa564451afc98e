// A real etcd member for the HA tests: on 127.0.0.1, free ports, its data
// on tmpfs, the election timing the node's own HA tests use. Debian's
// `etcd-server` (`cargo xtask test` installs it).

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { PATIENCE_MS, waitFor } from './node.js';

/** A port free on 127.0.0.1 now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** One etcd member, a cluster of its own. */
export class Etcd {
  private constructor(
    private readonly child: ChildProcess,
    private readonly dir: string,
    /** Its client URL. */
    readonly url: string,
  ) {}

  static async start(): Promise<Etcd> {
    const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'shardalloc-ts-etcd-'));
    const [client, peer] = [await freePort(), await freePort()];
    const url = `http://127.0.0.1:${client}`;
    const peerUrl = `http://127.0.0.1:${peer}`;
    const child = spawn(
      'etcd',
      [
        '--name', 'm0', '--data-dir', join(dir, 'data'),
        '--listen-client-urls', url, '--advertise-client-urls', url,
        '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
        '--initial-cluster', `m0=${peerUrl}`, '--initial-cluster-state', 'new',
        '--heartbeat-interval', '250', '--election-timeout', '2500',
      ],
      { stdio: 'ignore' },
    );
    child.on('error', (error) => {
      throw new Error(`cannot start etcd (${error.message}): install Debian's etcd-server (cargo xtask test does)`);
    });
    const etcd = new Etcd(child, dir, url);
    await waitFor('etcd to be healthy', async () => {
      try {
        const health = (await (await fetch(`${url}/health`)).json()) as { health?: string };
        return health.health === 'true' ? true : undefined;
      } catch {
        return undefined;
      }
    }, PATIENCE_MS * 2);
    return etcd;
  }

  stop(): void {
    this.child.kill('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  }
}
