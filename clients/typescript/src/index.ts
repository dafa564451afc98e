// The shardalloc client for Node. So far: the region protocol's frames and
// their encoding (`wire.ts`), tested against the golden frames the node is
// pinned to.

export * from './wire.js';
