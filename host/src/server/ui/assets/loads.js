// Shard loads, read from the node's hottest-first list
// (GET /v1/cluster/shards/{type}/shards?sort=load): the hottest shards'
// list, and every shard's load while the map draws shards one by one (one
// page of them). app.js reads them again every SAMPLE_MS.

import * as api from './api.js';

// The shards the hottest-shards list shows.
export const HOT_SHARDS = 10;

// Reads the loads of `model`'s `limit` hottest shards (at least
// HOT_SHARDS) into `model.loads`; returns the hottest HOT_SHARDS.
export async function readLoads(model, limit) {
  limit = Math.max(limit, HOT_SHARDS);
  const page = await api.get(`/v1/cluster/shards/${api.segment(model.name)}/shards?sort=load&limit=${limit}`);
  model.loads = new Map(page.shards.map((s) => [s.shardId, s.load]));
  return page.shards.slice(0, HOT_SHARDS);
}

// A load as the page writes it: three significant digits.
export function shownLoad(load) {
  if (load >= 1000) return Math.round(load).toLocaleString('en');
  return Number(load.toPrecision(3)).toString();
}

// The heat level of `load` against the hottest shard's `max`: 0 for no
// load, then 1 to 4 by quarters of `max`, so a few hot shards stand out.
export function heat(load, max) {
  if (!(load > 0) || !(max > 0)) return 0;
  return Math.max(1, Math.min(4, Math.ceil((4 * load) / max)));
}

// Draws the hottest shards into `list` (an <ol>): each a button that opens
// its story, with its load and home as DOM text.
export function drawHotShards(list, shards) {
  const items = shards.map((shard) => {
    const item = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'link';
    button.dataset.shard = shard.shardId;
    button.textContent = shard.shardId;
    const detail = document.createElement('span');
    detail.className = 'meta';
    detail.textContent = ` ${shownLoad(shard.load)}/s on ${shard.home || 'no home'}`;
    item.append(button, detail);
    return item;
  });
  if (!items.length) {
    const none = document.createElement('li');
    none.className = 'hint';
    none.textContent = 'No shard has reported load yet.';
    items.push(none);
  }
  list.replaceChildren(...items);
}
