// The regions' overview, readable at 1,000 regions: every region as one
// cell, sorted by load, shard count or address and coloured by where it
// stands against the band around the mean, over a profile of the sorted
// values with the band drawn; filtered by zone (the `zone` label), status
// and a search of addresses. A click on a cell opens the region on the map.

import { compareIds, measure } from './model.js';
import { shownLoad } from './loads.js';

const SVG = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);
// The profile's drawing box (viewBox units).
const WIDTH = 1000;
const HEIGHT = 60;

function option(value, text) {
  const node = document.createElement('option');
  node.value = value;
  node.textContent = text;
  return node;
}

function statusOf(region) {
  return region.draining ? 'draining' : region.status;
}

function shown(value, by) {
  return by === 'load' ? shownLoad(value) : String(Math.round(value));
}

export class RegionOverview {
  // `onOpen(address)` opens a region.
  constructor(onOpen) {
    this.sort = $('regions-sort');
    this.zone = $('regions-zone');
    this.status = $('regions-status');
    this.search = $('regions-search');
    this.cells = $('regions-cells');
    this.profile = $('regions-profile');
    this.summary = $('regions-summary');
    this.changed = () => {};
    for (const control of [this.sort, this.zone, this.status]) control.addEventListener('change', () => this.changed());
    this.search.addEventListener('input', () => this.changed());
    this.cells.addEventListener('click', (click) => {
      const cell = click.target.closest('button[data-region]');
      if (cell) onOpen(cell.dataset.region);
    });
  }

  // What the band measures: load once any region reported one, unless the
  // operator sorts by shard count.
  measuredBy(model) {
    return this.sort.value !== 'shards' && model.hasLoad() ? 'load' : 'shards';
  }

  // The regions the filters let through, in the chosen order.
  regions(model) {
    const zone = this.zone.value;
    const status = this.status.value;
    const needle = this.search.value.trim().toLowerCase();
    const by = this.measuredBy(model);
    const shown = [...model.regions.values()].filter(
      (region) =>
        (!zone || (region.labels || {}).zone === zone) &&
        (!status || statusOf(region) === status) &&
        (!needle || region.address.toLowerCase().includes(needle)),
    );
    if (this.sort.value === 'address') return shown.sort((a, b) => compareIds(a.address, b.address));
    return shown.sort((a, b) => measure(b, by) - measure(a, by) || compareIds(a.address, b.address));
  }

  // The zone filter's choices: every zone a region names.
  zones(model) {
    const zones = new Set();
    for (const region of model.regions.values()) if ((region.labels || {}).zone) zones.add(region.labels.zone);
    const wanted = [...zones].sort();
    const have = [...this.zone.options].slice(1).map((o) => o.value);
    if (wanted.join('\n') === have.join('\n')) return;
    const chosen = this.zone.value;
    this.zone.replaceChildren(option('', 'every zone'), ...wanted.map((z) => option(z, z)));
    this.zone.value = wanted.includes(chosen) ? chosen : '';
  }

  // Draws `regions` (this.regions(model)) against `model`'s band; the
  // cell of `open`, the region open on the map, is outlined.
  draw(model, regions, open) {
    this.zones(model);
    const by = this.measuredBy(model);
    const band = model.band(by);
    const counts = { above: 0, within: 0, below: 0, unreported: 0 };
    const cells = regions.map((region) => {
      const standing = model.standing(region, band);
      counts[standing] += 1;
      const value = measure(region, by);
      const ratio = band.mean > 0 ? ` (${(value / band.mean).toFixed(2)}× mean)` : '';
      const what = by === 'load' ? (region.load == null ? 'no load reported' : `load ${shownLoad(value)}/s${ratio}`) : `${value} shards${ratio}`;
      const classes = ['cell', standing, `status-${statusOf(region)}`];
      if (region.address === open) classes.push('open');
      const cell = document.createElement('button');
      cell.type = 'button';
      cell.className = classes.join(' ');
      cell.dataset.region = region.address;
      cell.dataset.value = String(value);
      cell.title = `${region.address}: ${what}, ${region.shards.size} shards, ${statusOf(region)}`;
      cell.setAttribute('aria-label', cell.title);
      return cell;
    });
    this.cells.replaceChildren(...cells);
    this.drawProfile(model, regions, band);
    const unit = by === 'load' ? '/s' : ' shards';
    const parts = [
      `${regions.length} of ${model.regions.size} regions`,
      `mean ${shown(band.mean, by)}${unit}`,
      `band ${shown(band.low, by)}–${shown(band.high, by)} (±${Math.round(band.tolerance * 100)}%)`,
      `${counts.above} above`,
      `${counts.within} within`,
      `${counts.below} below`,
    ];
    if (counts.unreported) parts.push(`${counts.unreported} without a load report`);
    this.summary.textContent = parts.join(' · ');
  }

  // The sorted values as bars coloured by standing, the band's edges
  // dashed and the mean a line.
  drawProfile(model, regions, band) {
    const values = regions.map((r) => measure(r, band.by));
    const top = Math.max(band.high, ...values) || 1;
    const y = (v) => HEIGHT - (v / top) * (HEIGHT - 2);
    const shapes = [];
    const rect = (x, top, width, height, kind) => {
      const node = document.createElementNS(SVG, 'rect');
      node.setAttribute('x', x);
      node.setAttribute('y', top);
      node.setAttribute('width', width);
      node.setAttribute('height', Math.max(0, height));
      node.setAttribute('class', kind);
      shapes.push(node);
    };
    const width = WIDTH / Math.max(1, values.length);
    regions.forEach((region, i) => {
      const v = values[i];
      rect(i * width, y(v), Math.max(width - 0.5, 0.5), HEIGHT - y(v), `bar ${model.standing(region, band)}`);
    });
    rect(0, y(band.high), WIDTH, y(band.low) - y(band.high), 'band');
    rect(0, y(band.mean) - 0.5, WIDTH, 1, 'mean');
    this.profile.replaceChildren(...shapes);
  }
}
