// TLS with a private CA: a node serving HTTPS and WSS with a certificate
// made here by `openssl`; the region client and the admin client trust it
// when given it as `ca`, and name the problem when they are not.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { AdminClient, AdminError, Region, type Update } from '../src/index.js';
import { FAST, Node, waitFor } from './node.js';

describe('TLS with a private CA', () => {
  const dir = mkdtempSync(join(tmpdir(), 'shardalloc-ts-tls-'));
  let node: Node;
  let ca: Buffer;
  before(async () => {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1',
      '-addext', 'basicConstraints=critical,CA:FALSE', '-addext', 'extendedKeyUsage=serverAuth',
      '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'),
    ], { stdio: 'ignore' });
    ca = readFileSync(join(dir, 'cert.pem'));
    node = await Node.start([
      '--type', 'cart', '--tls-cert', join(dir, 'cert.pem'), '--tls-key', join(dir, 'key.pem'), ...FAST,
    ]);
    assert.match(node.base, /^https:\/\//);
  });
  after(() => {
    node.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the region client registers over wss:// and the admin client calls over https:// with the CA', async () => {
    const region = Region.start<number>(
      { node: node.base, entityType: 'cart', address: 'ts-tls', ca, reconnectMinMs: 50, reconnectMaxMs: 500 },
      { startShard: () => {}, stopShard: () => {}, deliver: () => {} },
    );
    try {
      await region.waitRegistered();
      assert.equal(await region.homeOf('secure'), 'ts-tls');
      const admin = new AdminClient(node.base, { ca });
      assert.equal((await admin.shard('cart', 'secure')).home, 'ts-tls');
    } finally {
      await region.shutdown();
    }
  });

  it('without the CA, both name the certificate problem', async () => {
    await assert.rejects(new AdminClient(node.base).regions(), (error: unknown) => {
      assert.ok(error instanceof AdminError, String(error));
      assert.match(error.message, /presented a certificate this client does not trust/);
      return true;
    });
    const updates: Update[] = [];
    const region = Region.start<number>(
      { node: node.base, entityType: 'cart', address: 'ts-untrusting', reconnectMinMs: 50, reconnectMaxMs: 500 },
      { startShard: () => {}, stopShard: () => {}, deliver: () => {} },
    );
    region.on('update', (update) => updates.push(update));
    const down = await waitFor('the session to fail', () =>
      updates.find((u): u is Extract<Update, { type: 'Disconnected' }> => u.type === 'Disconnected'),
    );
    assert.match(down.reason, /cannot connect to wss:\/\/127\.0\.0\.1:\d+\/v1\/regions\/connect: .*certificate/);
    assert.equal(region.isRegistered(), false);
    await region.shutdown();
  });
});
