// `LoadMeter` (the Rust client's `region/load.rs`): the load a region's
// shards carry, gathered between two heartbeats and turned into one
// `LoadReport` (protocol version 2).
//
// Two forms, which add up:
// - work done, `record`: units (requests weighted by their cost, bytes, CPU
//   milliseconds) summed over the window and reported as units per second;
// - a gauge, `set`: a rate the application measures itself, reported as it
//   stands until it is set again or cleared.
//
// A report names the `top` most loaded shards running here, most loaded
// first, and sums the others into `rest`. Shards that no longer run here
// are dropped at each report, so the meter holds at most the shards
// recorded in one window (and at most `MAX_METERED_SHARDS`; more go into
// the rest). Sans-I/O: the time (milliseconds) is given.

import { compareUtf8 } from '../postcard.js';
import { MAX_LOAD_WINDOW_MS, MIN_LOAD_WINDOW_MS, type LoadReport } from '../wire.js';

/**
 * Most shards the meter keeps apart in one window; the units of further
 * shards are counted in the report's `rest`.
 */
export const MAX_METERED_SHARDS = 100_000;

/** Gathers a region's shard loads between reports. See the file's comment. */
export class LoadMeter {
  /** Units of work per shard in this window. */
  private work = new Map<string, number>();
  /** Gauges per shard (units per second). */
  private readonly gauges = new Map<string, number>();
  /** Units of shards past `MAX_METERED_SHARDS` in this window. */
  private overflow = 0;
  /** When the window began; undefined until the meter is first used. */
  private since: number | undefined;

  /** Adds `units` of work done by `shard` (ignored unless finite and positive). */
  record(shard: string, units: number, now: number): void {
    if (!(Number.isFinite(units) && units > 0)) {
      return;
    }
    this.since ??= now;
    const sum = this.work.get(shard);
    if (sum !== undefined) {
      this.work.set(shard, sum + units);
    } else if (this.work.size < MAX_METERED_SHARDS) {
      this.work.set(shard, units);
    } else {
      this.overflow += units;
    }
  }

  /** Sets `shard`'s gauge to `rate` units per second (0, or a value that is not finite and positive, clears it). */
  set(shard: string, rate: number, now: number): void {
    this.since ??= now;
    if (!(Number.isFinite(rate) && rate > 0)) {
      this.gauges.delete(shard);
    } else if (this.gauges.size < MAX_METERED_SHARDS || this.gauges.has(shard)) {
      this.gauges.set(shard, rate);
    }
  }

  /**
   * The report of the window ending `now`, over the shards `runs` says run
   * here, naming at most `top`; the window starts again. Undefined when the
   * meter was never used, or the window is shorter than
   * `MIN_LOAD_WINDOW_MS` (it goes on). A window longer than
   * `MAX_LOAD_WINDOW_MS` (the region was cut off or paused) is dropped
   * unreported: its work describes a placement that may be gone.
   */
  report(now: number, runs: (shard: string) => boolean, top: number): LoadReport | undefined {
    if (this.since === undefined) {
      return undefined;
    }
    const windowMs = Math.max(0, now - this.since);
    if (windowMs < MIN_LOAD_WINDOW_MS) {
      return undefined;
    }
    const work = this.work;
    const overflow = this.overflow;
    this.work = new Map();
    this.overflow = 0;
    this.since = now;
    for (const shard of [...this.gauges.keys()]) {
      if (!runs(shard)) {
        this.gauges.delete(shard);
      }
    }
    if (windowMs > MAX_LOAD_WINDOW_MS) {
      return undefined;
    }
    const seconds = windowMs / 1000;
    const rates = new Map(this.gauges);
    for (const [shard, units] of work) {
      if (runs(shard)) {
        rates.set(shard, (rates.get(shard) ?? 0) + units / seconds);
      }
    }
    // Most loaded first; ties by id, so a report is a function of its input.
    const sorted = [...rates].sort((a, b) => b[1] - a[1] || compareUtf8(a[0], b[0]));
    const named = Math.min(sorted.length, top);
    let rest = 0;
    for (const [, rate] of sorted.slice(named)) {
      rest += rate;
    }
    rest += overflow / seconds;
    const shards = sorted.slice(0, named).map(([shard, load]) => ({ shard, load }));
    return { windowMs, shards, rest };
  }
}
