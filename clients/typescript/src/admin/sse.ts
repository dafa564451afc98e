// The Server-Sent Events framing the decision stream uses: lines of `id:`
// and `data:`, an event at each blank line, comments (`: live`,
// `: keep-alive`) ignored. Fed bytes as they come; a line longer than
// 1 MiB, or one that is not UTF-8, is an error naming the problem.

/** Most bytes one line may take before the stream is refused as broken. */
export const MAX_EVENT_BYTES = 1 << 20;

/** One framed event: its `id` (null when it had none) and its `data` text. */
export interface SseEvent {
  id: string | null;
  data: string;
}

/** The SSE framing: feed it bytes, take whole events out. */
export class SseParser {
  private buffer = Buffer.alloc(0);
  private id: string | null = null;
  private data: string | null = null;
  private readonly utf8 = new TextDecoder('utf-8', { fatal: true });

  /** Adds `bytes`; answers the events they complete, in order. */
  feed(bytes: Uint8Array): SseEvent[] {
    this.buffer = Buffer.concat([this.buffer, bytes]);
    const events: SseEvent[] = [];
    for (let end = this.buffer.indexOf(10); end >= 0; end = this.buffer.indexOf(10)) {
      const raw = this.buffer.subarray(0, end);
      this.buffer = this.buffer.subarray(end + 1);
      let line: string;
      try {
        line = this.utf8.decode(raw).replace(/\r$/, '');
      } catch {
        throw new Error('the stream sent a line that is not UTF-8');
      }
      if (line === '') {
        if (this.data !== null) {
          events.push({ id: this.id, data: this.data });
        }
        this.id = null;
        this.data = null;
        continue;
      }
      if (line.startsWith(':')) {
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) {
        value = value.slice(1);
      }
      if (field === 'id') {
        this.id = value;
      } else if (field === 'data') {
        this.data = this.data === null ? value : `${this.data}\n${value}`;
      }
    }
    if (this.buffer.length > MAX_EVENT_BYTES) {
      throw new Error(`the stream sent a line longer than ${MAX_EVENT_BYTES} bytes`);
    }
    return events;
  }
}
