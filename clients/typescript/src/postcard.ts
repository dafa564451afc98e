// postcard's encoding of serde's data model, the part the region protocol
// uses (docs/protocol.md, "Encoding"): unsigned varints (LEB128) for u32,
// u64, lengths and enum variant indices; strings as a length and UTF-8;
// bools as one byte 0 or 1; options as 0, or 1 and the value; f64 as eight
// little-endian bytes; sequences and maps as a length and their items.
//
// Numbers are JavaScript numbers: a u64 above Number.MAX_SAFE_INTEGER
// (2^53 - 1) cannot be held exactly, so it is refused both ways. The node
// sends none (incarnations are milliseconds, sequences and epochs counters).

/** A frame that cannot be encoded or decoded; the message names the problem. */
export class FrameError extends Error {
  override name = 'FrameError';
}

const U32_MAX = 0xffff_ffff;

/** Writes postcard values into a growing buffer. */
export class Writer {
  private bytes: number[] = [];

  /** The bytes written so far. */
  finish(): Uint8Array {
    return Uint8Array.from(this.bytes);
  }

  /** An unsigned varint of at most `max`; `what` names it in errors. */
  varint(value: number, max: number, what: string): void {
    if (!Number.isSafeInteger(value) || value < 0 || value > max) {
      throw new FrameError(`${what} must be an integer from 0 to ${max}, not ${value}`);
    }
    let rest = value;
    while (rest >= 0x80) {
      this.bytes.push((rest % 0x80) | 0x80);
      rest = Math.floor(rest / 0x80);
    }
    this.bytes.push(rest);
  }

  u32(value: number, what: string): void {
    this.varint(value, U32_MAX, what);
  }

  u64(value: number, what: string): void {
    this.varint(value, Number.MAX_SAFE_INTEGER, what);
  }

  bool(value: boolean): void {
    this.bytes.push(value ? 1 : 0);
  }

  f64(value: number): void {
    const buffer = new DataView(new ArrayBuffer(8));
    buffer.setFloat64(0, value, true);
    for (let i = 0; i < 8; i++) {
      this.bytes.push(buffer.getUint8(i));
    }
  }

  string(value: string): void {
    const encoded = new TextEncoder().encode(value);
    this.varint(encoded.length, Number.MAX_SAFE_INTEGER, 'a string length');
    for (const byte of encoded) {
      this.bytes.push(byte);
    }
  }

  /** Bytes as serde writes a `Vec<u8>`: the length, then the bytes themselves. */
  bytesOf(value: Uint8Array): void {
    this.varint(value.length, Number.MAX_SAFE_INTEGER, 'a byte string length');
    for (const byte of value) {
      this.bytes.push(byte);
    }
  }

  option<T>(value: T | null, write: (value: T) => void): void {
    if (value === null) {
      this.bytes.push(0);
    } else {
      this.bytes.push(1);
      write(value);
    }
  }

  seq<T>(items: readonly T[], write: (item: T) => void): void {
    this.varint(items.length, Number.MAX_SAFE_INTEGER, 'a sequence length');
    for (const item of items) {
      write(item);
    }
  }

  /** A map, in key order (as Rust's BTreeMap writes it: by the keys' UTF-8 bytes). */
  map<V>(entries: Readonly<Record<string, V>>, write: (value: V) => void): void {
    const keys = Object.keys(entries).sort(compareUtf8);
    this.varint(keys.length, Number.MAX_SAFE_INTEGER, 'a map length');
    for (const key of keys) {
      this.string(key);
      write(entries[key] as V);
    }
  }
}

/** `bytes`, once they are within `max` bytes, a whole number of MiB (a `FrameError` naming the limit otherwise). */
export function withinFrame(bytes: Uint8Array, max: number): Uint8Array {
  if (bytes.length > max) {
    throw new FrameError(`a frame of ${bytes.length} bytes is over the ${max >> 20} MiB limit`);
  }
  return bytes;
}

/** Orders strings by their UTF-8 bytes, as Rust orders `String`s. */
export function compareUtf8(a: string, b: string): number {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) {
      return (x[i] as number) - (y[i] as number);
    }
  }
  return x.length - y.length;
}

/** Reads postcard values from a frame, front to back. */
export class Reader {
  private at = 0;
  private readonly utf8 = new TextDecoder('utf-8', { fatal: true });

  constructor(private readonly bytes: Uint8Array) {}

  /** Refuses bytes left after the message. */
  end(what: string): void {
    const left = this.bytes.length - this.at;
    if (left > 0) {
      throw new FrameError(`${left} byte(s) left after the ${what}`);
    }
  }

  private take(count: number, what: string): Uint8Array {
    const left = this.bytes.length - this.at;
    if (count > left) {
      throw new FrameError(`truncated frame: ${what} needs ${count - left} more byte(s)`);
    }
    const slice = this.bytes.subarray(this.at, this.at + count);
    this.at += count;
    return slice;
  }

  /** An unsigned varint of at most `max`: 5 bytes at most for a u32, 10 for a u64 (as postcard reads them). */
  varint(max: number, what: string): number {
    const longest = max <= U32_MAX ? 5 : 10;
    let value = 0;
    let scale = 1;
    for (let i = 0; ; i++) {
      if (i >= longest) {
        throw new FrameError(`${what}: a varint longer than ${longest} bytes`);
      }
      const byte = this.take(1, what)[0] as number;
      value += (byte & 0x7f) * scale;
      if (value > max) {
        throw new FrameError(`${what}: ${value} is over ${max}, the largest it may be here`);
      }
      if ((byte & 0x80) === 0) {
        return value;
      }
      scale *= 0x80;
    }
  }

  u32(what: string): number {
    return this.varint(U32_MAX, what);
  }

  u64(what: string): number {
    return this.varint(Number.MAX_SAFE_INTEGER, what);
  }

  bool(what: string): boolean {
    const byte = this.take(1, what)[0] as number;
    if (byte > 1) {
      throw new FrameError(`${what}: a bool byte must be 0 or 1, not ${byte}`);
    }
    return byte === 1;
  }

  f64(what: string): number {
    const bytes = this.take(8, what);
    return new DataView(bytes.buffer, bytes.byteOffset, 8).getFloat64(0, true);
  }

  /** Bytes as serde writes a `Vec<u8>` (a copy). */
  bytesOf(what: string): Uint8Array {
    const length = this.varint(Number.MAX_SAFE_INTEGER, what);
    return Uint8Array.from(this.take(length, `${what} (${length} bytes)`));
  }

  string(what: string): string {
    const length = this.varint(Number.MAX_SAFE_INTEGER, `${what}'s length`);
    const bytes = this.take(length, `${what} (a string of ${length} bytes)`);
    try {
      return this.utf8.decode(bytes);
    } catch {
      throw new FrameError(`${what}: invalid UTF-8 in a string`);
    }
  }

  option<T>(what: string, read: () => T): T | null {
    const tag = this.take(1, what)[0] as number;
    if (tag > 1) {
      throw new FrameError(`${what}: an option tag must be 0 or 1, not ${tag}`);
    }
    return tag === 1 ? read() : null;
  }

  seq<T>(what: string, read: () => T): T[] {
    const length = this.varint(Number.MAX_SAFE_INTEGER, `${what}'s length`);
    // Every item takes a byte at least: a longer claim is a truncated frame.
    if (length > this.bytes.length - this.at) {
      throw new FrameError(`truncated frame: ${what} claims ${length} items in ${this.bytes.length - this.at} bytes`);
    }
    const items: T[] = [];
    for (let i = 0; i < length; i++) {
      items.push(read());
    }
    return items;
  }

  map<V>(what: string, read: () => V): Record<string, V> {
    const length = this.varint(Number.MAX_SAFE_INTEGER, `${what}'s length`);
    if (length > this.bytes.length - this.at) {
      throw new FrameError(`truncated frame: ${what} claims ${length} entries in ${this.bytes.length - this.at} bytes`);
    }
    const entries: Record<string, V> = {};
    for (let i = 0; i < length; i++) {
      const key = this.string(`a key of ${what}`);
      // Defined, not assigned: a key `__proto__` stays a key.
      Object.defineProperty(entries, key, { value: read(), enumerable: true, writable: true, configurable: true });
    }
    return entries;
  }
}
