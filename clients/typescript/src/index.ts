// The shardalloc client for Node: the region protocol's frames and their
// encoding (`wire.ts`), tested against the golden frames the node is
// pinned to, and the region client's deterministic, sans-I/O core
// (`region/`): `RegionCore`, its actions and updates, its errors, and the
// load meter its heartbeats report from; and the region itself (`Region`:
// the WebSocket session, timers and the application's shard workers); the
// admin REST client, its event stream and `PlacementsView`.

export * from './wire.js';
export * from './peer.js';
export * from './region/actions.js';
export * from './region/core.js';
export {
  AskError,
  DeliveryError,
  RegionError,
  SendError,
  type AskErrorDetail,
  type DeliveryErrorDetail,
  type RegionErrorDetail,
  type SendErrorDetail,
} from './region/errors.js';
export * from './region/load.js';
export type { Application } from './region/application.js';
export { DEFAULT_ASK_TIMEOUT_MS, Region, type RegionConfig, type RegionEvents } from './region/region.js';
export { Replier, Request, type Answer } from './region/ask.js';
export { connectUrlOf } from './region/session.js';
export { InMemoryTransport, TransportError, type Inbox, type Transport } from './region/transport.js';
export { PeerTransport, type PeerTransportOptions } from './region/peer-transport.js';
export { AdminClient, AdminError, EventStream, REQUEST_TIMEOUT_MS } from './admin/client.js';
export { PlacementsView, type PlacementsViewEvents, type PlacementsViewOptions } from './admin/placements-view.js';
export { SseParser, MAX_EVENT_BYTES, type SseEvent } from './admin/sse.js';
export type * from './admin/types.js';
export { ExternalAllocationController, PlacementMap, type ShardIdLike } from './external/controller.js';
export { leastShard, leastShardStrategy, type LeastShardOptions } from './external/least-shard.js';
export {
  externalAllocationStrategy,
  type AllocationStrategy,
  type ExternalAllocationState,
  type PlacementWarning,
} from './external/strategy.js';
