// The REST API's bodies the admin client reads and writes, as TypeScript
// types: the same JSON the node serves (its OpenAPI document at
// `/v1/openapi.json`; golden bodies in `contracts/rest/`).

/** One placement: `shardId` pinned to the region `target`. */
export interface Placement {
  shardId: string;
  target: string;
}

/** A page of placements; `next` is the cursor of the next page, null on the last. */
export interface Placements {
  placements: Placement[];
  next?: string | null;
}

/** What a placement write stored, and the type's placement count after it. */
export interface PlacementsWritten {
  written: Placement[];
  total: number;
}

/** The answer to a rebalance request. */
export interface RebalanceResponse {
  accepted: string[];
  rejected: { shardId: string; reason: string }[];
}

/** Where a shard is and why. */
export interface ShardState {
  shardId: string;
  home: string | null;
  reason: 'placement' | 'strategy' | 'fallback' | null;
  detail: string | null;
  sinceMs: number | null;
  moving: boolean;
  placement: string | null;
  load: number;
  movedMs: number | null;
  /** The home's epoch (rises at every change of home); null without a home. */
  epoch: number | null;
  /** Its attributes (`tenant`, `tier`, …): what operators wrote; `{}` when none. */
  attributes: Record<string, string>;
}

/** The answer to an attribute write: the shards whose attributes changed. */
export interface AttributesWritten {
  changed: string[];
}

/** A region in brief: its status per type, its shard count, whether it drains. */
export interface RegionSummary {
  address: string;
  types: Record<string, string>;
  shards: number;
  draining: boolean;
}

/** A page of regions. */
export interface Regions {
  regions: RegionSummary[];
  next?: string | null;
}

/** A drain's progress. */
export interface DrainState {
  address: string;
  draining: boolean;
  shardsLeft: number;
  handOffsInFlight: number;
  startedAtMs: number | null;
  types: { type: string; draining: boolean; shardsLeft: number; handOffsInFlight: number; startedAtMs: number | null }[];
}

/** An uploaded strategy component. */
export interface StoredStrategy {
  digest: string;
  name: string;
  version: string;
  size: number;
  activeIn: string[];
  contract: string;
}

/** A page of uploaded strategies. */
export interface Strategies {
  strategies: StoredStrategy[];
  next?: string | null;
}

/** What to activate: a built-in's name or an upload's digest, its configuration. */
export interface ActivateRequest {
  strategy: string;
  config?: unknown;
  force?: boolean;
}

/** One activation of a strategy. */
export interface Activation {
  name: string;
  version: string;
  digest?: string | null;
  config?: unknown;
  cause: string;
  atMs: number;
}

/** A type's strategy: the active one and its history. */
export interface StrategyState {
  active: Activation;
  history: Activation[];
  [more: string]: unknown;
}

/** One decision on the event stream (`GET /v1/events`). */
export interface DecisionEvent {
  seq: number;
  kind: string;
  atMs: number;
  type: string;
  shardId?: string;
  region?: string;
  reason?: string;
  strategy?: string;
  target?: string;
  cause?: string;
  by?: string;
  detail?: string;
  missed?: number;
  load?: number;
  untilMs?: number;
}

/** An event as the stream framed it: its id (`<term>-<seq>`, null for `missed`) and the decision. */
export interface StreamedEvent {
  id: string | null;
  event: DecisionEvent;
}
