// The shardalloc client for Node: what a service needs, exported here —
// the region (`Region`: the WebSocket session, timers and the
// application's shard workers), its transports and errors, the admin REST
// client with its event stream and `PlacementsView`, and the external
// allocation feature request's API. The parts underneath have subpaths of
// their own: `@shardalloc/client/wire` (the region protocol's frames and
// their encoding), `@shardalloc/client/peer` (the inter-region wire) and
// `@shardalloc/client/core` (the region's sans-I/O core, its actions, the
// load meter and the SSE framing), for those who build a driver of their
// own.

export type { Update } from './region/actions.js';
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
export type { Application } from './region/application.js';
export {
  DEFAULT_ASK_TIMEOUT_MS,
  Region,
  type RegionConfig,
  type RegionEvents,
  type WaitOptions,
} from './region/region.js';
export { Replier, Request, type Answer } from './region/ask.js';
export { InMemoryTransport, TransportError, type Inbox, type Transport } from './region/transport.js';
export { PeerTransport, type PeerTransportOptions } from './region/peer-transport.js';
export {
  AdminClient,
  AdminError,
  EventStream,
  REQUEST_TIMEOUT_MS,
  type AdminClientOptions,
  type CallOptions,
} from './admin/client.js';
export { PlacementsView, type PlacementsViewEvents, type PlacementsViewOptions } from './admin/placements-view.js';
export type * from './admin/types.js';
export { ExternalAllocationController, PlacementMap, type ShardIdLike } from './external/controller.js';
export { leastShard, leastShardStrategy, type LeastShardOptions } from './external/least-shard.js';
export {
  externalAllocationStrategy,
  type AllocationStrategy,
  type ExternalAllocationState,
  type PlacementWarning,
} from './external/strategy.js';
