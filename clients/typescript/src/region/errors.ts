// The region client's errors (the Rust client's `region/error.rs`):
// `RegionError` for lifecycle and home look-ups, `SendError` for messages
// the region cannot take, and `checkShard`, the shard id rule both use.
// Each error has a `kind` naming the Rust variant, its fields in `detail`,
// and a message worded like the Rust `Display` text.

import { MAX_SHARD_ID_BYTES } from '../wire.js';

/** What a {@link RegionError} is, with its fields; `kind` names the Rust variant. */
export type RegionErrorDetail =
  /** The region's configuration cannot work. */
  | { kind: 'Config'; problem: string }
  /** The shard id is empty or too long. */
  | { kind: 'InvalidShard'; shard: string; reason: string }
  /** The node would not give the shard a home (a limit). */
  | { kind: 'ShardRefused'; shard: string; reason: string }
  /**
   * The node refused the session or the registration (version, entity type,
   * token, a stale incarnation, too many regions); the region keeps retrying.
   */
  | { kind: 'Refused'; reason: string }
  /** The region left the cluster. */
  | { kind: 'Left' }
  /** The region was shut down. */
  | { kind: 'ShutDown' }
  /** The node did not confirm the leave within `timeoutMs`; the region stopped its shards and closed anyway. */
  | { kind: 'LeaveTimedOut'; timeoutMs: number }
  /**
   * A drain-and-leave ran out of its bound: `shards` still ran here (they
   * were stopped then), or none did but the node had not let the region go;
   * `leaveAsked` tells whether the region had sent `Leave`.
   */
  | { kind: 'DrainAndLeaveTimedOut'; boundMs: number; shards: string[]; leaveAsked: boolean };

/** Why a region operation failed. */
export class RegionError extends Error {
  override name = 'RegionError';
  /** The Rust variant this error is. */
  readonly kind: RegionErrorDetail['kind'];
  /** The variant with its fields. */
  readonly detail: RegionErrorDetail;

  /** An error of this kind, its message worded like the Rust client's. */
  constructor(detail: RegionErrorDetail) {
    super(regionMessage(detail));
    this.kind = detail.kind;
    this.detail = detail;
  }
}

function regionMessage(detail: RegionErrorDetail): string {
  switch (detail.kind) {
    case 'Config':
      return `invalid region configuration: ${detail.problem}`;
    case 'InvalidShard':
      return `invalid shard id ${debugString(detail.shard)}: ${detail.reason}`;
    case 'ShardRefused':
      return `the node refused shard ${detail.shard}: ${detail.reason}`;
    case 'Refused':
      return `the node refused the region: ${detail.reason}`;
    case 'Left':
      return 'the region has left the cluster';
    case 'ShutDown':
      return 'the region has shut down';
    case 'LeaveTimedOut':
      return (
        `the node did not confirm the leave within ${debugDuration(detail.timeoutMs)}; ` +
        'the region stopped its shards and closed anyway'
      );
    case 'DrainAndLeaveTimedOut':
      return (
        `the region did not drain and leave within ${debugDuration(detail.boundMs)}: ` +
        leftBehind(detail.shards, detail.leaveAsked)
      );
  }
}

/** What a drain-and-leave left behind, in words: at most ten shards named, the rest counted. */
function leftBehind(shards: readonly string[], leaveAsked: boolean): string {
  const shown = 10;
  const waiting = leaveAsked
    ? 'the node had not confirmed its leave'
    : 'it had not reached the node to ask to leave';
  if (shards.length === 0) {
    return `it ran no shard any more, but ${waiting}`;
  }
  let names = shards.slice(0, shown).join(', ');
  if (shards.length > shown) {
    names += ` and ${shards.length - shown} more`;
  }
  const count = shards.length === 1 ? '1 shard' : `${shards.length} shards`;
  return `it still ran ${count} (${names}), stopped there and then, and ${waiting}`;
}

/** What a {@link SendError} is, with its fields; `kind` names the Rust variant. */
export type SendErrorDetail =
  /** The shard already has `limit` messages waiting (for its home, or for the application). */
  | { kind: 'BufferFull'; shard: string; limit: number }
  /** The region holds `limit` buffered messages over all shards. */
  | { kind: 'TotalBufferFull'; limit: number }
  /** The shard id is empty or too long. */
  | { kind: 'InvalidShard'; shard: string; reason: string }
  /** The region has left or shut down. */
  | { kind: 'Stopped' };

/** Why a send did not take a message. */
export class SendError extends Error {
  override name = 'SendError';
  /** The Rust variant this error is. */
  readonly kind: SendErrorDetail['kind'];
  /** The variant with its fields. */
  readonly detail: SendErrorDetail;

  /** An error of this kind, its message worded like the Rust client's. */
  constructor(detail: SendErrorDetail) {
    super(sendMessage(detail));
    this.kind = detail.kind;
    this.detail = detail;
  }
}

function sendMessage(detail: SendErrorDetail): string {
  switch (detail.kind) {
    case 'BufferFull':
      return `the buffer of shard ${detail.shard} is full (${detail.limit} messages)`;
    case 'TotalBufferFull':
      return `the region's buffers are full (${detail.limit} messages over all shards)`;
    case 'InvalidShard':
      return `invalid shard id ${debugString(detail.shard)}: ${detail.reason}`;
    case 'Stopped':
      return 'the region has stopped; it takes no more messages';
  }
}

/**
 * Checks a shard id: 1 to {@link MAX_SHARD_ID_BYTES} UTF-8 bytes. Returns
 * what is wrong with it, or `undefined` when it is fine.
 */
export function checkShard(shard: string): string | undefined {
  const length = new TextEncoder().encode(shard).length;
  if (length === 0) {
    return 'a shard id is empty';
  }
  if (length > MAX_SHARD_ID_BYTES) {
    return `a shard id of ${length} bytes is longer than ${MAX_SHARD_ID_BYTES} bytes`;
  }
  return undefined;
}

/** A string quoted as Rust's `{:?}` shows it (quotes, backslash escapes, `\u{…}` for control characters). */
function debugString(value: string): string {
  let quoted = '"';
  for (const char of value) {
    const code = char.codePointAt(0) ?? 0;
    if (char === '"' || char === '\\') {
      quoted += `\\${char}`;
    } else if (char === '\n') {
      quoted += '\\n';
    } else if (char === '\r') {
      quoted += '\\r';
    } else if (char === '\t') {
      quoted += '\\t';
    } else if (char === '\0') {
      quoted += '\\0';
    } else if (code < 0x20 || code === 0x7f) {
      quoted += `\\u{${code.toString(16)}}`;
    } else {
      quoted += char;
    }
  }
  return `${quoted}"`;
}

/** Milliseconds as Rust's `{:?}` shows a `Duration` of them: `380ms`, `20s`, `1.5s`, `0ns`. */
function debugDuration(ms: number): string {
  if (ms === 0) {
    return '0ns';
  }
  if (ms < 1000) {
    return `${ms}ms`;
  }
  const seconds = Math.floor(ms / 1000);
  const fraction = String(ms % 1000).padStart(3, '0').replace(/0+$/, '');
  return fraction === '' ? `${seconds}s` : `${seconds}.${fraction}s`;
}

/** What a {@link DeliveryError} is, with its fields; `kind` names the Rust variant. */
export type DeliveryErrorDetail =
  /** The shard's forwards failed `attempts` times in a row (`forwardAttempts`). */
  | { kind: 'AttemptsExhausted'; shard: string; to: string; attempts: number; reason: string }
  /** The shard's forwards kept failing for longer than `forwardDeadlineMs`. */
  | { kind: 'DeadlinePassed'; shard: string; to: string; waitedMs: number; reason: string }
  /** The node refused the shard a home: its waiting messages have nowhere to go. */
  | { kind: 'ShardRefused'; shard: string; reason: string }
  /** The region left or shut down while the message waited for the shard's home. */
  | { kind: 'RegionStopped'; shard: string };

/**
 * Why a message the region took was never delivered: its forwards kept
 * failing, the node refused its shard, or the region stopped while it
 * waited for a home. Handed to the application with the message
 * (`Application.undelivered`).
 */
export class DeliveryError extends Error {
  override name = 'DeliveryError';
  /** The Rust variant this error is. */
  readonly kind: DeliveryErrorDetail['kind'];
  /** The variant with its fields. */
  readonly detail: DeliveryErrorDetail;

  /** An error of this kind, its message worded like the Rust client's. */
  constructor(detail: DeliveryErrorDetail) {
    super(deliveryMessage(detail));
    this.kind = detail.kind;
    this.detail = detail;
  }
}

function deliveryMessage(detail: DeliveryErrorDetail): string {
  const start = `a message for shard ${detail.shard} was not delivered`;
  switch (detail.kind) {
    case 'AttemptsExhausted':
      return `${start}: ${detail.attempts} forwards in a row failed (the last to ${detail.to}: ${detail.reason})`;
    case 'DeadlinePassed':
      return `${start}: its forwards kept failing for ${detail.waitedMs} ms (the last to ${detail.to}: ${detail.reason})`;
    case 'ShardRefused':
      return `${start}: the node refused the shard (${detail.reason})`;
    case 'RegionStopped':
      return `${start}: the region stopped while it waited for the shard's home`;
  }
}

/** What an {@link AskError} is, with its fields; `kind` names the Rust variant. */
export type AskErrorDetail =
  /** The region did not take the request. */
  | { kind: 'Send'; error: SendError }
  /** No answer came within the timeout; the request may still run at the home. */
  | { kind: 'Timeout'; shard: string; timeoutMs: number }
  /** The request never reached the shard's home. */
  | { kind: 'NotDelivered'; error: DeliveryError }
  /** The home failed the request, or the connection to it was lost after it took it. */
  | { kind: 'Failed'; shard: string; reason: string };

/** Why an `ask` got no answer (`Region.ask`). */
export class AskError extends Error {
  override name = 'AskError';
  /** The Rust variant this error is. */
  readonly kind: AskErrorDetail['kind'];
  /** The variant with its fields. */
  readonly detail: AskErrorDetail;

  /** An error of this kind, its message worded like the Rust client's. */
  constructor(detail: AskErrorDetail) {
    super(askMessage(detail));
    this.kind = detail.kind;
    this.detail = detail;
  }
}

function askMessage(detail: AskErrorDetail): string {
  switch (detail.kind) {
    case 'Send':
    case 'NotDelivered':
      return detail.error.message;
    case 'Timeout':
      return `no answer from shard ${detail.shard} within ${debugDuration(detail.timeoutMs)}`;
    case 'Failed':
      return `shard ${detail.shard} did not answer: ${detail.reason}`;
  }
}
