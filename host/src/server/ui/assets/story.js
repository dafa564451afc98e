// A shard's story: where it is, why, its placement, its load, its attributes, and the last events
// the page has seen about it; pin it or remove its placement from here.

import * as api from './api.js';
import { pin, unpin, tell } from './actions.js';
import { shownLoad } from './loads.js';

function row(list, term, value) {
  const dt = document.createElement('dt');
  dt.textContent = term;
  const dd = document.createElement('dd');
  dd.textContent = value;
  list.append(dt, dd);
}

export function describe(event) {
  const time = new Date(event.atMs).toLocaleTimeString();
  const parts = [time, event.kind];
  if (event.region) parts.push(event.kind === 'shard-homed' ? `→ ${event.region}` : `region ${event.region}`);
  if (event.target) parts.push(`→ ${event.target}`);
  const why = [event.reason, event.strategy, event.cause, event.by && `by ${event.by}`, event.detail].filter(Boolean);
  if (why.length) parts.push(`(${why.join('; ')})`);
  return parts.join(' ');
}

// Shows the story of `shard` of `type` in #story; `events` are the last
// events seen about it, `regions` the addresses it can be pinned to.
export async function showStory(type, shard, events, regions) {
  const box = document.getElementById('story');
  const heading = document.createElement('h2');
  heading.textContent = `Shard ${shard}`;
  let state;
  try {
    state = await api.get(`/v1/cluster/shards/${api.segment(type)}/shards/${api.segment(shard)}`);
  } catch (error) {
    const message = document.createElement('p');
    message.className = 'error';
    message.textContent = error.message;
    box.replaceChildren(heading, message);
    return;
  }
  const list = document.createElement('dl');
  row(list, 'home', state.home || 'none');
  row(list, 'why', [state.reason, state.detail].filter(Boolean).join(': ') || '—');
  row(list, 'since', state.sinceMs ? new Date(state.sinceMs).toLocaleString() : '—');
  row(list, 'epoch', state.epoch == null ? '—' : String(state.epoch));
  row(list, 'placement', state.placement || 'none');
  row(list, 'moving', state.moving ? 'yes, a hand-off is in flight' : 'no');
  row(list, 'load', `${shownLoad(state.load || 0)}/s (smoothed)`);
  row(list, 'last moved', state.movedMs ? new Date(state.movedMs).toLocaleString() : 'never');
  const attributes = Object.entries(state.attributes || {}).map(([key, value]) => `${key}=${value}`);
  row(list, 'attributes', attributes.length ? attributes.join(', ') : 'none');

  const actions = document.createElement('div');
  actions.className = 'buttons';
  const label = document.createElement('label');
  label.textContent = 'Pin to ';
  const select = document.createElement('select');
  select.id = 'pin-target';
  for (const address of regions) {
    const option = document.createElement('option');
    option.value = address;
    option.textContent = address;
    if (address === state.placement || (!state.placement && address === state.home)) option.selected = true;
    select.append(option);
  }
  label.append(select);
  const pinButton = document.createElement('button');
  pinButton.type = 'button';
  pinButton.id = 'pin';
  pinButton.textContent = 'Pin';
  pinButton.addEventListener('click', async () => {
    if (await pin(type, shard, select.value)) showStory(type, shard, events, regions);
  });
  actions.append(label, pinButton);
  if (state.placement) {
    const unpinButton = document.createElement('button');
    unpinButton.type = 'button';
    unpinButton.id = 'unpin';
    unpinButton.textContent = 'Remove placement';
    unpinButton.addEventListener('click', async () => {
      if (await unpin(type, shard)) showStory(type, shard, events, regions);
    });
    actions.append(unpinButton);
  }

  const history = document.createElement('ol');
  history.reversed = true;
  for (const event of [...events].reverse()) {
    const item = document.createElement('li');
    item.textContent = describe(event);
    history.append(item);
  }
  const title = document.createElement('h3');
  title.textContent = events.length ? 'Last events' : 'No event about it since the node started leading';
  box.replaceChildren(heading, list, actions, title, history);
  if (!regions.length) tell('No region to pin it to.');
}
