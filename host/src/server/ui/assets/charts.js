// Small live charts (SVG): shards per region, moves per minute, fallbacks
// per minute, and strategy call latency, over the last WINDOW_MS.

import { metrics } from './api.js';

const SVG = 'http://www.w3.org/2000/svg';
export const SAMPLE_MS = 5000;
export const WINDOW_MS = 10 * 60 * 1000;
const MAX_LINES = 8;
const COLOURS = ['#3b7dd8', '#8e44ad', '#d35400', '#16a085', '#c0392b', '#2c3e50', '#f39c12', '#7f8c8d'];

function chart(container, id, title) {
  const heading = document.createElement('h3');
  heading.textContent = title;
  const svg = document.createElementNS(SVG, 'svg');
  svg.id = id;
  svg.setAttribute('viewBox', '0 0 300 80');
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', title);
  const legend = document.createElement('p');
  legend.className = 'chart-legend';
  container.append(heading, svg, legend);
  return { svg, legend };
}

function shown(value) {
  return Number.isInteger(value) ? String(value) : value.toFixed(3);
}

// Draws `series` ({label, points: [[t, v]]}) over the window ending `now`;
// the legend (DOM text) names each line with its latest value.
function draw({ svg, legend }, series, now, unit = '') {
  const max = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const x = (t) => 300 - ((now - t) / WINDOW_MS) * 300;
  const y = (v) => 78 - (v / max) * 74;
  const lines = [];
  const entries = [];
  series.slice(0, MAX_LINES).forEach((s, index) => {
    const colour = COLOURS[index % COLOURS.length];
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' '));
    line.setAttribute('stroke', colour);
    line.setAttribute('vector-effect', 'non-scaling-stroke');
    lines.push(line);
    const last = s.points[s.points.length - 1];
    const entry = document.createElement('span');
    entry.className = `series series-${index}`;
    entry.textContent = `${s.label}: ${last ? shown(last[1]) : '—'}${unit}`;
    entries.push(entry);
  });
  const top = document.createElement('span');
  top.className = 'scale';
  top.textContent = `top of chart ${shown(max)}${unit}`;
  entries.push(top);
  svg.replaceChildren(...lines);
  legend.replaceChildren(...entries);
}

// The strategy call latency's sum and count for `type` in Prometheus text.
function latencyTotals(text, type) {
  let sum = 0;
  let count = 0;
  const needle = `type="${type}"`;
  for (const line of text.split('\n')) {
    if (!line.startsWith('shardalloc_strategy_call_seconds_') || !line.includes(needle)) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith('shardalloc_strategy_call_seconds_sum')) sum += value;
    if (line.startsWith('shardalloc_strategy_call_seconds_count')) count += value;
  }
  return { sum, count };
}

export class Charts {
  constructor(container, type) {
    this.type = type;
    this.shards = chart(container, 'chart-shards', 'Shards per region');
    this.moves = chart(container, 'chart-moves', 'Moves per minute');
    this.fallbacks = chart(container, 'chart-fallbacks', 'Fallbacks per minute');
    this.latency = chart(container, 'chart-latency', 'Strategy call latency (mean, ms)');
    this.perRegion = new Map();
    this.moveTimes = [];
    this.fallbackTimes = [];
    this.latencyPoints = [];
    this.lastTotals = null;
  }

  // Counts what the charts count from one event.
  onEvent(event) {
    if (event.kind === 'hand-off-completed') this.moveTimes.push(Date.now());
    if (event.kind === 'fallback' || (event.kind === 'shard-homed' && event.reason === 'fallback')) {
      this.fallbackTimes.push(Date.now());
    }
  }

  // Samples the model and the node's metrics, then redraws.
  async sample(model) {
    const now = Date.now();
    const since = now - WINDOW_MS;
    for (const [address, region] of model.regions) {
      if (!this.perRegion.has(address)) this.perRegion.set(address, []);
      this.perRegion.get(address).push([now, region.shards.size]);
    }
    for (const [address, points] of this.perRegion) {
      while (points.length && points[0][0] < since) points.shift();
      if (!points.length || !model.regions.has(address)) this.perRegion.delete(address);
    }
    this.moveTimes = this.moveTimes.filter((t) => t >= since);
    this.fallbackTimes = this.fallbackTimes.filter((t) => t >= since);
    const perMinute = (times) => {
      const points = [];
      for (let t = now - WINDOW_MS + 60000; t <= now; t += SAMPLE_MS * 6) {
        points.push([t, times.filter((x) => x > t - 60000 && x <= t).length]);
      }
      return points;
    };
    try {
      const totals = latencyTotals(await metrics(), this.type);
      if (this.lastTotals && totals.count > this.lastTotals.count) {
        const mean = (totals.sum - this.lastTotals.sum) / (totals.count - this.lastTotals.count);
        this.latencyPoints.push([now, mean * 1000]);
      } else {
        this.latencyPoints.push([now, 0]);
      }
      this.lastTotals = totals;
    } catch (_) {
      // The metrics are not reachable: the chart keeps its last points.
    }
    this.latencyPoints = this.latencyPoints.filter(([t]) => t >= since);
    const regions = [...this.perRegion].sort((a, b) => b[1][b[1].length - 1][1] - a[1][a[1].length - 1][1]);
    draw(this.shards, regions.map(([label, points]) => ({ label, points })), now);
    draw(this.moves, [{ label: 'moves', points: perMinute(this.moveTimes) }], now);
    draw(this.fallbacks, [{ label: 'fallbacks', points: perMinute(this.fallbackTimes) }], now);
    draw(this.latency, [{ label: 'mean', points: this.latencyPoints }], now, ' ms');
  }
}
