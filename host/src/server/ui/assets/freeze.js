// The freeze banner: while the type is frozen (its own freeze, the
// cluster-wide one, or the maintenance mode's), a banner under the header
// says who froze it, why, since when and until when, with a button that
// lifts it; and the form in the side bar that freezes it.

import * as api from './api.js';
import { act } from './actions.js';

const $ = (id) => document.getElementById(id);

const WHOSE = {
  type: 'frozen by an operator',
  cluster: 'frozen with every type by an operator (cluster-wide)',
  maintenance: 'frozen by the node itself: maintenance mode',
};

const time = (ms) => new Date(ms).toLocaleString();

// One freeze in words: "deploy 42 — frozen by an operator since …, until … (strict)".
export function describe(freeze) {
  const until = freeze.untilMs ? `, until ${time(freeze.untilMs)}` : ', until lifted';
  const strict = freeze.strict ? ' Strict: placements, rebalance-now and drains wait too.' : '';
  return `${freeze.reason} — ${WHOSE[freeze.scope] || freeze.scope} since ${time(freeze.sinceMs)}${until}.${strict}`;
}

export class FreezeBanner {
  constructor(type) {
    this.type = type;
    this.path = `/v1/cluster/shards/${api.segment(type)}/freeze`;
    this.state = null;
    $('freeze-lift').onclick = () => this.lift();
    $('freeze-form').onsubmit = (submit) => {
      submit.preventDefault();
      this.freeze();
    };
  }

  async refresh() {
    this.state = await api.get(this.path);
    this.draw();
  }

  draw() {
    const state = this.state;
    const banner = $('freeze');
    banner.hidden = !state || !state.frozen;
    if (banner.hidden) return;
    banner.classList.toggle('strict', state.strict);
    const list = $('freeze-list');
    list.replaceChildren(...state.freezes.map((freeze) => {
      const item = document.createElement('li');
      item.dataset.scope = freeze.scope;
      item.textContent = describe(freeze);
      return item;
    }));
    // The cluster-wide freeze is lifted for every type at once, elsewhere.
    $('freeze-lift').hidden = !state.freezes.some((f) => f.scope !== 'cluster');
  }

  lift() {
    return act(
      `Lift the freeze of ${this.type}? Its strategy rebalances again at the next round.`,
      async () => {
        this.state = await api.call('DELETE', `${this.path}?reason=${encodeURIComponent('lifted from the dashboard')}`);
        this.draw();
      },
      `${this.type} is no longer frozen by its own freeze.`,
    );
  }

  freeze() {
    const minutes = Number($('freeze-minutes').value);
    const reason = $('freeze-reason').value.trim();
    const strict = $('freeze-strict').checked;
    return act(
      `Freeze ${this.type} for ${minutes} minute(s)? Its strategy moves no shard until then${strict ? '; nor do placements, rebalance-now and drains' : ''}.`,
      async () => {
        this.state = await api.call('PUT', this.path, { forSeconds: Math.round(minutes * 60), reason, strict });
        this.draw();
      },
      `${this.type} is frozen for ${minutes} minute(s).`,
    );
  }
}
