// The plan form: what the active strategy (or the candidate chosen in the
// strategy panel) would do with regions drained, removed or added
// (POST …/plan). Nothing changes; the answer is listed per round under the
// map, every region's shards before and after, and the shards it would move
// are outlined on the map.

import * as api from './api.js';
import { tell } from './actions.js';

const $ = (id) => document.getElementById(id);

// "a:1, b:2" → ["a:1", "b:2"].
const addresses = (text) => text.split(/[\s,]+/).map((a) => a.trim()).filter(Boolean);

// One line per region to add: `ADDRESS[,KEY=VALUE…]`, `capacity=N` its capacity.
export function parseAdded(text) {
  return text.split('\n').map((line) => line.trim()).filter(Boolean).map((line) => {
    const [address, ...pairs] = line.split(',').map((p) => p.trim());
    if (!address) throw new Error(`"${line}": the address comes first`);
    const region = { address, labels: {} };
    for (const pair of pairs) {
      const at = pair.indexOf('=');
      if (at < 1) throw new Error(`"${pair}" is not KEY=VALUE`);
      const [key, value] = [pair.slice(0, at), pair.slice(at + 1)];
      if (key === 'capacity') {
        region.capacity = Number(value);
        if (value === '' || !Number.isFinite(region.capacity)) throw new Error(`capacity "${value}" is not a number`);
      } else {
        region.labels[key] = value;
      }
    }
    return region;
  });
}

// "a → b: 3, a → c: 1", most first.
function flows(moves) {
  const counts = new Map();
  for (const move of moves) {
    const key = `${move.from} → ${move.to || 'nowhere'}`;
    counts.set(key, (counts.get(key) || 0) + 1);
  }
  return [...counts].sort((x, y) => y[1] - x[1]).map(([key, n]) => `${key}: ${n}`).join(', ');
}

export class PlanPanel {
  // `candidate()` is the strategy panel's choice; `onPlan(shards)` marks the
  // shards the plan would move on the map; `counts()` is each region's
  // shard count now.
  constructor(type, { candidate, onPlan, counts }) {
    this.path = `/v1/cluster/shards/${api.segment(type)}/plan`;
    this.candidate = candidate;
    this.onPlan = onPlan;
    this.counts = counts;
    $('plan-form').onsubmit = (submit) => {
      submit.preventDefault();
      this.plan();
    };
  }

  request() {
    const body = {
      drain: addresses($('plan-drain').value),
      removeRegions: addresses($('plan-remove').value),
      addRegions: parseAdded($('plan-add').value),
      rounds: Number($('plan-rounds').value) || 0,
    };
    if ($('plan-candidate').checked) Object.assign(body, this.candidate());
    if (!body.drain.length && !body.removeRegions.length && !body.addRegions.length && !body.strategy) {
      throw new Error('nothing to plan: name regions to drain, remove or add, or plan with the candidate');
    }
    return body;
  }

  async plan() {
    let body;
    try {
      body = this.request();
    } catch (error) {
      return tell(error.message);
    }
    $('plan-submit').disabled = true;
    try {
      const answer = await api.call('POST', this.path, body);
      this.draw(answer);
      const moves = answer.displaced.length + answer.rounds.reduce((n, r) => n + r.moves.length, 0);
      tell(`Plan with ${answer.strategy}: ${moves} move(s); nothing changed.`, true);
    } catch (error) {
      tell(`${error.message}${error.code ? ` (${error.code})` : ''}`);
    } finally {
      $('plan-submit').disabled = false;
    }
  }

  draw(answer) {
    const box = $('plan-result');
    const title = document.createElement('h2');
    title.textContent = `Plan: ${answer.strategy} (nothing changed)`;
    const rounds = document.createElement('ol');
    rounds.className = 'rounds';
    rounds.start = 0;
    const moved = new Set();
    const line = (text, moves) => {
      const item = document.createElement('li');
      item.className = 'round';
      item.textContent = moves.length ? `${text}: ${flows(moves)}` : `${text}: nothing`;
      for (const move of moves) moved.add(move.shardId);
      rounds.append(item);
    };
    line(`${answer.displaced.length} shard(s) displaced`, answer.displaced);
    for (const round of answer.rounds) {
      const clipped = round.clipped.length ? `, ${round.clipped.length} clipped` : '';
      line(`${round.moves.length} move(s)${clipped}`, round.moves);
    }
    // Every region: its shards now and at the end, and their load.
    const now = this.counts();
    const table = document.createElement('table');
    table.className = 'plan-regions';
    const head = table.createTHead().insertRow();
    for (const label of ['region', 'now', 'after', 'load']) {
      const cell = document.createElement('th');
      cell.textContent = label;
      head.append(cell);
    }
    const rows = table.createTBody();
    for (const region of answer.regions) {
      const row = rows.insertRow();
      row.dataset.address = region.address;
      const before = now.get(region.address);
      const cells = [region.address, before === undefined ? 'new' : before, region.shards, region.load === undefined ? '–' : region.load.toFixed(1)];
      for (const text of cells) row.insertCell().textContent = text;
      if (before !== undefined && before !== region.shards) row.className = region.shards > before ? 'gains' : 'loses';
      if (before === undefined) row.className = 'gains';
    }
    box.replaceChildren(title, rounds, table);
    box.hidden = false;
    this.onPlan(moved);
  }
}
