// The event stream's framing, fed in pieces as a socket delivers them.

import assert from 'node:assert/strict';
import { it } from 'node:test';

import { MAX_EVENT_BYTES, SseParser } from '../src/admin/sse.js';

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

it('frames events at blank lines, with their ids, across any split', () => {
  const text = ': live\n\nid: 1-1\ndata: {"a":1}\n\n: keep-alive\nid: 1-2\r\ndata: x\ndata: y\r\n\r\ndata:no-space\n\n';
  const want = [
    { id: '1-1', data: '{"a":1}' },
    { id: '1-2', data: 'x\ny' },
    { id: null, data: 'no-space' },
  ];
  for (let split = 0; split <= text.length; split++) {
    const parser = new SseParser();
    const got = [...parser.feed(bytes(text.slice(0, split))), ...parser.feed(bytes(text.slice(split)))];
    assert.deepEqual(got, want, `split at ${split}`);
  }
});

it('an id without data makes no event and does not stick to the next', () => {
  const parser = new SseParser();
  assert.deepEqual(parser.feed(bytes('id: 9-9\n\ndata: z\n\n')), [{ id: null, data: 'z' }]);
});

it('refuses a line past the limit and one that is not UTF-8, by name', () => {
  assert.throws(() => new SseParser().feed(new Uint8Array(MAX_EVENT_BYTES + 1).fill(0x61)), /longer than 1048576 bytes/);
  assert.throws(() => new SseParser().feed(Uint8Array.of(0x64, 0xff, 0x0a)), /not UTF-8/);
});
