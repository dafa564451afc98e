// The decision event stream over fetch (EventSource cannot send the token):
// Server-Sent Events framed by hand, resumed with Last-Event-ID after the
// node ends the stream (a restart, a new leader).

import { headers, url, errorOf } from './api.js';

function parseFrames(state, text, onFrame) {
  state.buffer += text;
  let end;
  while ((end = state.buffer.indexOf('\n')) >= 0) {
    const line = state.buffer.slice(0, end).replace(/\r$/, '');
    state.buffer = state.buffer.slice(end + 1);
    if (line === '') {
      if (state.data !== null) onFrame({ id: state.id, data: state.data });
      state.id = null;
      state.data = null;
    } else if (line.startsWith(':')) {
      onFrame({ comment: line.slice(1).trim() });
    } else {
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'id') state.id = value;
      if (field === 'data') state.data = state.data === null ? value : `${state.data}\n${value}`;
    }
  }
}

// Opens the stream of `type` from the oldest event kept. `handlers.replayed`
// gets each event sent before the `: live` comment, `handlers.live()` is
// called at the comment, `handlers.event` gets each event after it,
// `handlers.status(on, why)` the connection's state, `handlers.failed(error)`
// an error the stream cannot get past (a 401). Returns a function that
// closes the stream.
export function openStream(type, handlers) {
  let lastId = null;
  let closed = false;
  let controller = null;
  let retry = 1000;

  async function connect() {
    controller = new AbortController();
    const extra = { Accept: 'text/event-stream' };
    if (lastId) extra['Last-Event-ID'] = lastId;
    const query = `?type=${encodeURIComponent(type)}${lastId ? '' : '&from=oldest'}`;
    const response = await fetch(url(`/v1/events${query}`), {
      headers: headers(extra),
      signal: controller.signal,
      cache: 'no-store',
    });
    if (!response.ok) throw await errorOf(response);
    handlers.status(true, 'live');
    retry = 1000;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const state = { buffer: '', id: null, data: null };
    // A resumed stream sends what the page has not applied yet: news.
    let live = Boolean(extra['Last-Event-ID']);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parseFrames(state, decoder.decode(value, { stream: true }), (frame) => {
        if (frame.comment === 'live') {
          if (!live) {
            live = true;
            handlers.live();
          }
          return;
        }
        if (frame.comment !== undefined) return;
        const event = JSON.parse(frame.data);
        if (frame.id) lastId = frame.id;
        if (live || event.kind === 'missed') handlers.event(event);
        else handlers.replayed(event);
      });
    }
  }

  async function run() {
    while (!closed) {
      try {
        await connect();
        if (closed) return;
        handlers.status(false, 'the node ended the stream; reconnecting');
      } catch (error) {
        if (closed) return;
        if (error.status === 401 || error.status === 404) {
          handlers.failed(error);
          return;
        }
        handlers.status(false, `reconnecting: ${error.message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, retry));
      retry = Math.min(retry * 2, 15000);
    }
  }

  run();
  return () => {
    closed = true;
    if (controller) controller.abort();
  };
}
