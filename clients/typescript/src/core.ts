// `@shardalloc/client/core`: the parts under `Region`, for those who build
// a driver of their own — the region's deterministic, sans-I/O core
// (`RegionCore`: events in with the time as a value, actions out), the
// actions and updates it returns, the load meter its heartbeats report
// from, the node's URL of a session, and the SSE framing of the event
// stream. Applications use the package's main entry instead.

export * from './region/actions.js';
export * from './region/core.js';
export * from './region/load.js';
export { connectUrlOf } from './region/session.js';
export { SseParser, MAX_EVENT_BYTES, type SseEvent } from './admin/sse.js';
