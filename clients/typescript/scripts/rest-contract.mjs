// Writes test/rest-contract.ts: every REST body of the node's contract
// (contracts/rest/, written by the node from its OpenAPI schemas, every
// field filled) that this client has a type of the same name for, as an
// object literal of that type. tsc's checks on object literals then fail
// the build when the node has a field the client does not declare, or the
// client requires one the node does not send: the client's hand-written
// types cannot drift from the node's unseen. Run by `npm test` before tsc.

import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const contracts = join(here, '..', '..', '..', 'contracts', 'rest');
const types = readFileSync(join(here, '..', 'src', 'admin', 'types.ts'), 'utf8');
const declared = new Set([...types.matchAll(/^export (?:interface|type) (\w+)/gm)].map((m) => m[1]));

const checked = [];
for (const file of readdirSync(contracts).sort()) {
  const name = file.split('.')[0];
  if (!file.endsWith('.json') || !declared.has(name)) continue;
  const body = JSON.parse(readFileSync(join(contracts, file), 'utf8'));
  if (body === null || typeof body !== 'object' || Array.isArray(body)) continue;
  const constant = `node_${file.replace(/\.json$/, '').replace(/\W/g, '_')}`;
  checked.push({ name, constant, body });
}
if (checked.length === 0) {
  throw new Error(`no body of ${contracts} has a type in src/admin/types.ts: the check would prove nothing`);
}
const names = [...new Set(checked.map((c) => c.name))].sort();
const lines = [
  '// Written by scripts/rest-contract.mjs from contracts/rest/ (do not edit): each',
  "// node body as a literal of this client's type of the same name.",
  '',
  `import type { ${names.join(', ')} } from '../src/admin/types.js';`,
  '',
  ...checked.map(({ name, constant, body }) => `export const ${constant}: ${name} = ${JSON.stringify(body)};`),
  '',
];
writeFileSync(join(here, '..', 'test', 'rest-contract.ts'), lines.join('\n'));
console.log(`rest-contract: ${checked.length} bodies checked against ${names.length} types`);
