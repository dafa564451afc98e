// `npm pack` builds dist/ with the TypeScript this package pins: without
// `npm ci` first there is no compiler, and `tsc` would fail with a bare
// "not found". Say what to do instead.
import { existsSync } from 'node:fs';

if (!existsSync(new URL('../node_modules/typescript/package.json', import.meta.url))) {
  console.error('@shardalloc/client: run `npm ci` first: packing compiles src/ with the pinned TypeScript, which is not installed');
  process.exit(1);
}
