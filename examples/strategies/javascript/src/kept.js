// latency-aware-js: the strategy's copy of the view (contract 0.3), kept
// from the host's `load-view` and `apply` calls, with no generated bindings
// so that `node --test` can test it.
//
// The copy holds, by shard handle, each shard's home, flags, hash, load and
// when it was homed (a region's shards in allocation order), each region's
// count, and the view checksum the WIT defines, kept term by term: a
// shard's term is taken out before it changes and put back after.
//
// It asks for no ids and no attributes (`describe`), so `named` and
// `attributes` come empty and are not read; `since` and the smoothed
// metrics are kept but this strategy decides without them.
//
// Values arrive as componentize-js passes them: u64 as BigInt, list<u32> as
// Uint32Array, list<u64> as BigUint64Array, list<f64> as Float64Array, an
// absent option as undefined, record fields in camelCase.

/**
 * A batch that does not fit the copy (a handle not in it, a generation out
 * of turn). app.js lets it trap: the host falls back for that call and
 * sends a new instance the whole view.
 */
export class ViewError extends Error {}

const PINNED = 1;
const MOVING = 2;
const MASK = (1n << 64n) - 1n;

/** The contract's mixing function: splitmix64's finalizer, on BigInt. */
export function mix(z) {
  z ^= z >> 30n;
  z = (z * 0xbf58476d1ce4e5b9n) & MASK;
  z ^= z >> 27n;
  z = (z * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}

const bits = new DataView(new ArrayBuffer(8));

/** One shard's part of the view checksum, as wit/0.3/strategy.wit defines it (the same as 0.2's). */
export function term(handle, shard) {
  bits.setFloat64(0, shard.load);
  const h = BigInt(handle);
  const place = mix(shard.hash ^ (h << 32n) ^ (BigInt(shard.home) << 2n) ^ BigInt(shard.flags));
  return (place + mix(bits.getBigUint64(0) ^ h)) & MASK;
}

/** The copy of the view. */
export class KeptView {
  constructor() {
    this.generation = undefined;
    this.regions = [];
    this.metricNames = [];
    this.metrics = new Float64Array(0);
    this.smoothedMetrics = new Float64Array(0);
    this.counts = [];
    this.shards = new Map();
    this.moving = 0;
    this.checksum = 0n;
    this.nextOrder = 0;
  }

  /** Replaces the copy with a whole view; returns the checksum. */
  load(view) {
    Object.assign(this, new KeptView());
    this.#setTopology(view.topology);
    this.metrics = view.metrics;
    this.smoothedMetrics = view.smoothedMetrics ?? view.metrics;
    this.#homeAll(view.homed);
    this.#arriveAll(view.homeless, view.homelessHashes);
    for (const h of view.moving) this.#flag(h, MOVING, true);
    for (const h of view.pinned) this.#flag(h, PINNED, true);
    this.#loadAll(view.loads);
    this.generation = view.generation;
    return this.checksum;
  }

  /** Applies a batch in the contract's field order; returns the checksum. */
  apply(c) {
    if (this.generation === undefined || c.generation !== this.generation + 1n) {
      throw new ViewError(`a batch for generation ${c.generation} reached a copy at generation ${this.generation}`);
    }
    for (const h of c.retired) {
      const s = this.#present(h);
      this.checksum = (this.checksum - term(h, s) + (1n << 64n)) & MASK;
      this.#unhome(s);
      if (s.flags & MOVING) this.moving -= 1;
      this.shards.delete(h);
    }
    for (const h of c.unhomed) this.#change(h, (s) => this.#unhome(s));
    this.#arriveAll(c.arrivedHomeless, c.arrivedHashes);
    if (c.topology !== undefined) {
      if (c.metrics === undefined) throw new ViewError('a new topology came without its metric matrix');
      this.#setTopology(c.topology);
    }
    if (c.metrics !== undefined) {
      this.metrics = c.metrics;
      this.smoothedMetrics = c.smoothedMetrics ?? c.metrics;
    }
    this.#homeAll(c.homed);
    for (const h of c.moving) this.#flag(h, MOVING, true);
    for (const h of c.settled) this.#flag(h, MOVING, false);
    for (const h of c.pinned) this.#flag(h, PINNED, true);
    for (const h of c.unpinned) this.#flag(h, PINNED, false);
    this.#loadAll(c.loads);
    this.generation = c.generation;
    return this.checksum;
  }

  /** A region's shards that are not pinned, oldest first, as handles. */
  unpinnedShards(region) {
    const found = [];
    for (const [h, s] of this.shards) {
      if (s.home === region + 1 && !(s.flags & PINNED)) found.push([s.order, h]);
    }
    return found.sort((a, b) => a[0] - b[0]).map(([, h]) => h);
  }

  #present(h) {
    const s = this.shards.get(h);
    if (s === undefined) throw new ViewError(`shard handle ${h} is not in the view`);
    return s;
  }

  #change(h, f) {
    const s = this.#present(h);
    this.checksum = (this.checksum - term(h, s) + (1n << 64n)) & MASK;
    f(s);
    this.checksum = (this.checksum + term(h, s)) & MASK;
  }

  #unhome(s) {
    if (s.home !== 0) this.counts[s.home - 1] -= 1;
    s.home = 0;
  }

  #arrive(h, hash) {
    if (this.shards.has(h)) throw new ViewError(`shard handle ${h} is already in the view`);
    const s = { hash, home: 0, flags: 0, load: 0, order: 0 };
    this.shards.set(h, s);
    this.checksum = (this.checksum + term(h, s)) & MASK;
  }

  #arriveAll(handles, hashes) {
    if (handles.length !== hashes.length) throw new ViewError('shards and hashes differ in length');
    handles.forEach((h, i) => this.#arrive(h, hashes[i]));
  }

  #homeAll(homed) {
    const { shards, hashes, regions, since } = homed;
    if (hashes.length !== shards.length || regions.length !== shards.length) {
      throw new ViewError('homed columns differ in length');
    }
    if (since !== undefined && since.length !== shards.length) throw new ViewError('homed columns differ in length');
    shards.forEach((h, i) => {
      const region = regions[i];
      if (region >= this.regions.length) throw new ViewError(`region index ${region} out of range`);
      if (!this.shards.has(h)) this.#arrive(h, hashes[i]);
      this.#change(h, (s) => {
        this.#unhome(s);
        s.hash = hashes[i];
        s.home = region + 1;
        s.order = this.nextOrder++;
        s.since = since === undefined ? 0n : since[i];
        this.counts[region] += 1;
      });
    });
  }

  #flag(h, which, on) {
    const s = this.#present(h);
    if (Boolean(s.flags & which) === on) return;
    this.#change(h, (s) => {
      s.flags = on ? s.flags | which : s.flags & ~which;
    });
    if (which === MOVING) this.moving += on ? 1 : -1;
  }

  #loadAll({ shards, loads }) {
    if (shards.length !== loads.length) throw new ViewError('loads columns differ in length');
    shards.forEach((h, i) =>
      this.#change(h, (s) => {
        s.load = loads[i];
      }),
    );
  }

  /** Takes a topology: regions matched by address keep their shards. */
  #setTopology(topology) {
    const next = topology.regions.map((r) => ({
      address: r.address,
      allocatable: r.status === 'up' && !r.proxyOnly && !r.draining,
      labels: new Map(r.labels.map((l) => [l.key, l.value])),
    }));
    const index = new Map(next.map((r, i) => [r.address, i + 1]));
    const moved = this.regions.map((r) => index.get(r.address) ?? 0);
    this.counts = next.map(() => 0);
    this.checksum = 0n;
    for (const [h, s] of this.shards) {
      if (s.home !== 0) {
        s.home = moved[s.home - 1];
        if (s.home === 0) throw new ViewError(`shard handle ${h} is on a region that left`);
        this.counts[s.home - 1] += 1;
      }
      this.checksum = (this.checksum + term(h, s)) & MASK;
    }
    this.regions = next;
    this.metricNames = Array.from(topology.metricNames);
  }
}
