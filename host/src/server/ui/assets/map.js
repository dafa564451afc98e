// The shard map: one card per region (its address, labels, declared capacity, status, lease,
// draining, shard count, load against the band as DOM text) with its shards
// coloured by why they are there or by their load. Past AGGREGATE_ABOVE
// shards, each region shows its counts per reason instead of one button per
// shard, so 100 regions × 10,000 shards stay readable and fast. The cards
// are the overview's regions, in its order, at most MAX_CARDS of them.

import { heat, shownLoad } from './loads.js';
import { compareIds } from './model.js';

export const AGGREGATE_ABOVE = 2000;
export const MAX_CARDS = 100;
const SVG = 'http://www.w3.org/2000/svg';

function element(tag, attributes = {}, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function lease(status) {
  if (status === 'unreachable') return 'lease lapsing';
  if (status === 'leaving') return 'leaving';
  return 'lease held';
}

function aggregate(model, region) {
  const counts = { strategy: 0, placement: 0, fallback: 0 };
  let moving = 0;
  for (const shard of region.shards) {
    counts[(model.homes.get(shard) || {}).reason || 'strategy'] += 1;
    if (model.moving.has(shard)) moving += 1;
  }
  const total = region.shards.size || 1;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', '0 0 200 20');
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  let x = 0;
  for (const reason of ['strategy', 'placement', 'fallback']) {
    if (!counts[reason]) continue;
    const width = (counts[reason] / total) * 200;
    const rect = document.createElementNS(SVG, 'rect');
    rect.setAttribute('x', x);
    rect.setAttribute('width', width);
    rect.setAttribute('height', 20);
    rect.setAttribute('class', `bar ${reason}`);
    rect.setAttribute('fill', `var(--${reason})`);
    svg.append(rect);
    const label = document.createElementNS(SVG, 'text');
    label.setAttribute('x', x + 3);
    label.setAttribute('y', 14);
    label.textContent = `${counts[reason]} ${reason}`;
    svg.append(label);
    x += width;
  }
  const box = element('div', { class: 'aggregate' });
  box.append(svg);
  if (moving) box.append(element('p', { class: 'meta' }, `${moving} moving`));
  return box;
}

// The region's load against the load band, as DOM text.
function loadLine(model, region, band) {
  const line = element('p', { class: 'load' });
  if (region.load == null) {
    line.append('no load reported');
    return line;
  }
  const ratio = band.mean > 0 ? ` · ${(region.load / band.mean).toFixed(2)}× mean` : '';
  line.append(`load ${shownLoad(region.load)}/s${ratio} `);
  const standing = model.standing(region, band);
  line.append(element('span', { class: `state ${standing}` }, standing === 'within' ? 'within band' : `${standing} band`));
  return line;
}

// Draws `view.regions` of `model` into `container` (in that order, at most
// MAX_CARDS), shards coloured by `view.colour` ('reason' or 'load').
// `marks` holds the selected shards, the shards a dry run would move and
// the shard whose story is open.
export function drawMap(container, model, marks, view) {
  const fragment = document.createDocumentFragment();
  const perShard = model.shardCount() <= AGGREGATE_ABOVE;
  const regions = view.regions.slice(0, MAX_CARDS);
  const band = model.band('load');
  const hottest = Math.max(0, ...model.loads.values());
  for (const region of regions) {
    const classes = ['region', `status-${region.status}`];
    if (region.draining) classes.push('draining');
    const card = element('article', { class: classes.join(' '), 'data-address': region.address });
    const head = element('header');
    head.append(element('h3', { class: 'address' }, region.address));
    head.append(element('span', { class: 'count' }, `${region.shards.size} shards`));
    card.append(head);
    const labels = Object.entries(region.labels || {}).map(([k, v]) => `${k}=${v}`);
    const meta = element('p', { class: 'meta' });
    meta.append(element('span', { class: `state ${region.status}` }, region.status));
    meta.append(' ');
    meta.append(element('span', { class: 'state' }, lease(region.status)));
    if (region.draining) {
      meta.append(' ');
      meta.append(element('span', { class: 'state draining' }, 'draining'));
    }
    if (region.proxyOnly) meta.append(' proxy only');
    if (labels.length) meta.append(` · ${labels.join(' ')}`);
    const capacity = Object.entries(region.capacity || {}).map(([name, amount]) => `${name}=${amount}`);
    if (capacity.length) meta.append(` · capacity ${capacity.join(' ')}`);
    card.append(meta);
    if (model.hasLoad()) card.append(loadLine(model, region, band));
    if (perShard) {
      const shards = element('div', { class: 'shards' });
      for (const shard of [...region.shards].sort(compareIds)) {
        const home = model.homes.get(shard) || {};
        const load = model.loads.get(shard) || 0;
        const colour = view.colour === 'load' ? `heat-${heat(load, hottest)}` : home.reason || 'strategy';
        const shardClasses = ['shard', colour];
        if (model.moving.has(shard)) shardClasses.push('moving');
        if (marks.selected.has(shard)) shardClasses.push('selected');
        if (marks.dryRun.has(shard)) shardClasses.push('dry-run');
        if (marks.chosen === shard) shardClasses.push('chosen');
        const pinned = model.placements.has(shard) ? `, pinned to ${model.placements.get(shard)}` : '';
        const title = `${shard}: ${home.reason || 'strategy'}${pinned}, load ${shownLoad(load)}/s`;
        const button = element('button', { type: 'button', class: shardClasses.join(' '), 'data-shard': shard, title }, shard);
        shards.append(button);
      }
      card.append(shards);
    } else {
      card.append(aggregate(model, region));
    }
    const actions = element('div', { class: 'buttons' });
    actions.append(
      element('button', { type: 'button', 'data-action': region.draining ? 'undrain' : 'drain', 'data-address': region.address },
        region.draining ? 'Undrain' : 'Drain'),
    );
    card.append(actions);
    fragment.append(card);
  }
  if (!model.regions.size) fragment.append(element('p', { class: 'hint' }, 'No region has registered for this type yet.'));
  container.replaceChildren(fragment);
}
