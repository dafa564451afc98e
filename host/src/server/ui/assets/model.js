// One entity type's state as the page knows it: drawn from REST (every
// page of GET /v1/cluster/shards/{type} and of its placements), then kept
// from the event stream; shard loads come from loads.js. Where each region
// stands against the band around the mean is worked out here.

// The band's half-width over the mean when the active strategy's
// configuration names no `tolerance`: load-balance's default.
export const DEFAULT_TOLERANCE = 0.1;

// Ids and addresses in order: numbers numerically, others as text.
export function compareIds(a, b) {
  const x = Number(a);
  const y = Number(b);
  if (a !== '' && b !== '' && Number.isFinite(x) && Number.isFinite(y)) return x - y;
  return a < b ? -1 : a > b ? 1 : 0;
}

// A region's measure: its load (0 before its first report), or its shard count.
export function measure(region, by) {
  return by === 'load' ? region.load || 0 : region.shards.size;
}

export class TypeModel {
  // `state` is the type's state with the shards of all its pages;
  // `placements` every live placement.
  constructor(state, placements) {
    this.name = state.name;
    this.strategy = state.strategy;
    this.regions = new Map();
    this.homes = new Map();
    this.moving = new Map();
    this.placements = new Map();
    // Shard → smoothed load, for the shards loads.js last read.
    this.loads = new Map();
    for (const region of state.regions) {
      this.regions.set(region.address, { ...region, shards: new Set() });
    }
    for (const { shardId, region, reason } of state.shards) {
      this.homes.set(shardId, { region, reason });
      const home = this.regions.get(region);
      if (home) home.shards.add(shardId);
    }
    for (const handOff of state.handOffs) this.moving.set(handOff.shardId, handOff.from);
    for (const placement of placements) this.placements.set(placement.shardId, placement.target);
  }

  shardCount() {
    return this.homes.size;
  }

  // True once any region reported load.
  hasLoad() {
    for (const region of this.regions.values()) if (region.load != null) return true;
    return false;
  }

  // The band's half-width: the active strategy's `tolerance` (a number in
  // (0, 1]) when its configuration has one, else DEFAULT_TOLERANCE.
  tolerance() {
    const t = this.strategy && this.strategy.config && this.strategy.config.tolerance;
    return typeof t === 'number' && t > 0 && t <= 1 ? t : DEFAULT_TOLERANCE;
  }

  // The mean of `by` ('load' or 'shards') over the regions that take
  // shards (up, not draining, not proxy-only), and the band around it.
  band(by) {
    let sum = 0;
    let count = 0;
    for (const region of this.regions.values()) {
      if (region.status !== 'up' || region.draining || region.proxyOnly) continue;
      sum += measure(region, by);
      count += 1;
    }
    const mean = count ? sum / count : 0;
    const tolerance = this.tolerance();
    return { by, mean, low: mean * (1 - tolerance), high: mean * (1 + tolerance), tolerance };
  }

  // Where `region` stands against `band`: 'above', 'within' or 'below';
  // 'unreported' for a region that sent no load while the band is of load.
  standing(region, band) {
    if (band.by === 'load' && region.load == null) return 'unreported';
    const value = measure(region, band.by);
    if (value > band.high) return 'above';
    if (value < band.low) return 'below';
    return 'within';
  }

  region(address) {
    return this.regions.get(address);
  }

  unhome(shard) {
    const home = this.homes.get(shard);
    if (!home) return;
    const region = this.regions.get(home.region);
    if (region) region.shards.delete(shard);
    this.homes.delete(shard);
  }

  // Applies one event; returns 'shards' when only shards changed, 'regions'
  // when a region appeared (its labels come from REST), null for nothing.
  apply(event) {
    const shard = event.shardId;
    switch (event.kind) {
      case 'shard-homed': {
        this.unhome(shard);
        const region = this.regions.get(event.region);
        this.homes.set(shard, { region: event.region, reason: event.reason, strategy: event.strategy, cause: event.cause });
        this.moving.delete(shard);
        if (!region) return 'regions';
        region.shards.add(shard);
        return 'shards';
      }
      case 'hand-off-begun':
        this.moving.set(shard, event.region);
        return 'shards';
      case 'hand-off-completed':
        this.unhome(shard);
        return 'shards';
      case 'hand-off-timed-out':
      case 'hand-off-abandoned':
        if (event.region || event.kind === 'hand-off-abandoned') this.moving.delete(shard);
        return 'shards';
      case 'placement-set':
        this.placements.set(shard, event.target);
        return 'shards';
      case 'placement-removed':
        this.placements.delete(shard);
        return 'shards';
      case 'region-registered':
        return 'regions';
      case 'region-unreachable':
      case 'region-reachable': {
        const region = this.regions.get(event.region);
        if (region) region.status = event.kind === 'region-unreachable' ? 'unreachable' : 'up';
        return 'shards';
      }
      case 'region-drained':
      case 'region-undrained': {
        const region = this.regions.get(event.region);
        if (region) region.draining = event.kind === 'region-drained';
        return 'shards';
      }
      case 'region-load': {
        const region = this.regions.get(event.region);
        if (region) region.load = event.load;
        return 'load';
      }
      case 'region-gone': {
        const region = this.regions.get(event.region);
        if (region) for (const s of region.shards) this.homes.delete(s);
        this.regions.delete(event.region);
        return 'shards';
      }
      case 'strategy-activated':
      case 'strategy-rolled-back':
      case 'strategy-shadowed':
        return 'strategy';
      default:
        return null;
    }
  }
}
