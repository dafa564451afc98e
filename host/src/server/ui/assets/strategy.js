// The strategy panel: the active strategy and the shadow with its
// disagreements; upload a component, dry-run a candidate against the live
// view (its moves per round drawn, and marked on the map), activate,
// shadow, stop the shadow, roll back.

import * as api from './api.js';
import { act, tell } from './actions.js';

const SVG = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);

function describe(info) {
  return info ? `${info.name}@${info.version}` : 'none';
}

export class StrategyPanel {
  // `onDryRun(shards)` marks the shards a dry run would move on the map.
  constructor(type, onDryRun) {
    this.type = type;
    this.onDryRun = onDryRun;
    this.path = `/v1/cluster/shards/${api.segment(type)}/strategy`;
    $('dry-run').addEventListener('click', () => this.dryRun());
    $('activate').addEventListener('click', () => this.change('PUT', '', 'Activate'));
    $('shadow').addEventListener('click', () => this.change('PUT', '/shadow', 'Shadow'));
    $('clear-shadow').addEventListener('click', () => this.clearShadow());
    $('rollback').addEventListener('click', () => this.rollback());
    $('upload').addEventListener('change', () => this.upload());
  }

  candidate() {
    const text = $('candidate-config').value.trim();
    let config = null;
    if (text) {
      try {
        config = JSON.parse(text);
      } catch (error) {
        throw new Error(`the configuration is not JSON: ${error.message}`);
      }
    }
    const strategy = $('candidate').value;
    if (!strategy) throw new Error('choose a candidate strategy first');
    return { strategy, config };
  }

  async refresh() {
    const [state, list] = await Promise.all([api.get(this.path), api.get('/v1/strategies?limit=1000')]);
    $('active-strategy').textContent = `Active: ${describe(state.active)} (${state.active.cause})`;
    $('shadow-state').textContent = state.shadow
      ? `Shadow: ${describe(state.shadow)}, ${state.shadowDisagreements} disagreement(s) in ${state.shadowCalls} decision(s)`
      : 'No shadow.';
    const select = $('candidate');
    const chosen = select.value;
    select.replaceChildren();
    for (const strategy of list.strategies) {
      const option = document.createElement('option');
      option.value = strategy.digest;
      option.textContent = `${strategy.name}@${strategy.version}${strategy.size ? ` (${strategy.digest.slice(0, 15)}…)` : ''}`;
      select.append(option);
    }
    if (chosen) select.value = chosen;
    this.state = state;
  }

  async dryRun() {
    let body;
    try {
      body = { ...this.candidate(), rounds: Number($('rounds').value) || 3 };
    } catch (error) {
      return tell(error.message);
    }
    $('dry-run').disabled = true;
    try {
      const answer = await api.call('POST', `${this.path}/dry-run`, body);
      this.drawDryRun(answer);
      tell(`Dry run of ${answer.strategy}: ${answer.rounds.reduce((n, r) => n + r.moved.length, 0)} move(s) in ${answer.rounds.length} round(s).`, true);
    } catch (error) {
      tell(error.message);
    } finally {
      $('dry-run').disabled = false;
    }
  }

  drawDryRun(answer) {
    const box = $('dry-run-result');
    const title = document.createElement('h2');
    title.textContent = `Dry run: ${answer.strategy}`;
    const rounds = document.createElement('ol');
    rounds.className = 'rounds';
    const moved = new Set();
    for (const round of answer.rounds) {
      const item = document.createElement('li');
      item.className = 'round';
      item.textContent = round.moved.length
        ? `round ${rounds.children.length + 1} moves ${round.moved.length}: ${round.moved.join(', ')}`
        : `round ${rounds.children.length + 1} moves nothing`;
      for (const shard of round.moved) moved.add(shard);
      rounds.append(item);
    }
    // Shards per region after each round, one bar group per region.
    const regions = answer.rounds.length ? Object.keys(answer.rounds[answer.rounds.length - 1].counts) : [];
    const max = Math.max(1, ...answer.rounds.flatMap((r) => Object.values(r.counts)));
    const svg = document.createElementNS(SVG, 'svg');
    const rowHeight = 14;
    svg.setAttribute('viewBox', `0 0 300 ${Math.max(1, regions.length) * rowHeight * (answer.rounds.length + 1)}`);
    svg.setAttribute('class', 'dry-run-chart');
    let y = 0;
    for (const region of regions) {
      const label = document.createElementNS(SVG, 'text');
      label.setAttribute('x', 0);
      label.setAttribute('y', y + 10);
      label.textContent = region;
      svg.append(label);
      y += rowHeight;
      answer.rounds.forEach((round, index) => {
        const count = round.counts[region] || 0;
        const bar = document.createElementNS(SVG, 'rect');
        bar.setAttribute('x', 60);
        bar.setAttribute('y', y + 2);
        bar.setAttribute('height', rowHeight - 4);
        bar.setAttribute('width', (count / max) * 150);
        bar.setAttribute('fill', 'var(--dry-run)');
        const text = document.createElementNS(SVG, 'text');
        text.setAttribute('x', 64 + (count / max) * 150);
        text.setAttribute('y', y + 10);
        text.textContent = `round ${index + 1}: ${count}`;
        svg.append(bar, text);
        y += rowHeight;
      });
    }
    box.replaceChildren(title, rounds, svg);
    this.onDryRun(moved);
  }

  async change(method, suffix, verb) {
    let body;
    try {
      body = this.candidate();
    } catch (error) {
      return tell(error.message);
    }
    const name = $('candidate').selectedOptions[0]?.textContent || body.strategy;
    const question = suffix
      ? `Shadow ${name} in ${this.type}? It is asked every decision alongside the active strategy; its answers are only counted.`
      : `Activate ${name} in ${this.type}? It decides every allocation and rebalance from now on (it must have passed a dry run).`;
    const ran = await act(question, () => api.call(method, `${this.path}${suffix}`, body), `${verb}: ${name} in ${this.type}.`);
    if (ran) this.refresh().catch((error) => tell(error.message));
  }

  async clearShadow() {
    const ran = await act(`Stop shadowing in ${this.type}?`, () => api.call('DELETE', `${this.path}/shadow`), 'The shadow is stopped.');
    if (ran) this.refresh().catch((error) => tell(error.message));
  }

  async rollback() {
    const ran = await act(
      `Roll ${this.type} back to the strategy active before ${describe(this.state && this.state.active)}?`,
      () => api.call('POST', `${this.path}/rollback`),
      (state) => `Rolled back: ${describe(state.active)} is active.`,
    );
    if (ran) this.refresh().catch((error) => tell(error.message));
  }

  async upload() {
    const file = $('upload').files[0];
    if (!file) return;
    const bytes = await file.arrayBuffer();
    const ran = await act(
      `Upload ${file.name} (${bytes.byteLength} bytes)? The node compiles and checks it; nothing changes until you activate it.`,
      () => api.call('POST', '/v1/strategies', bytes, 'application/wasm'),
      (stored) => {
        this.uploaded = stored.digest;
        return `Uploaded ${stored.name}@${stored.version} as ${stored.digest}.`;
      },
    );
    $('upload').value = '';
    if (ran) {
      await this.refresh().catch((error) => tell(error.message));
      if (this.uploaded) $('candidate').value = this.uploaded;
    }
  }
}
