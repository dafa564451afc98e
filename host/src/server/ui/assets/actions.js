// Operator actions, each behind a confirmation that says what will happen;
// the outcome (or the node's error, in its own words) is shown in #notice.

import * as api from './api.js';

const notice = () => document.getElementById('notice');

export function tell(message, ok = false) {
  const box = notice();
  box.textContent = message;
  box.classList.toggle('ok', ok);
  box.hidden = false;
}

export function confirmAction(text) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.returnValue = '';
    dialog.showModal();
  });
}

// Asks, then runs `work`; tells `done` or the error. Returns whether it ran.
export async function act(question, work, done) {
  if (!(await confirmAction(question))) return false;
  try {
    const answer = await work();
    tell(typeof done === 'function' ? done(answer) : done, true);
    return true;
  } catch (error) {
    tell(`${error.message}${error.code ? ` (${error.code})` : ''}`);
    return false;
  }
}

const typePath = (type) => `/v1/cluster/shards/${api.segment(type)}`;

export function pin(type, shard, target) {
  return act(
    `Pin shard ${shard} of ${type} to ${target}? It is handed off there now.`,
    () => api.call('POST', `${typePath(type)}/placements`, { shardId: shard, target }),
    `Shard ${shard} is pinned to ${target}.`,
  );
}

export function unpin(type, shard) {
  return act(
    `Remove the placement of shard ${shard}? The strategy decides its home at the next rebalance.`,
    () => api.call('DELETE', `${typePath(type)}/placements/${api.segment(shard)}`),
    `The placement of ${shard} is removed.`,
  );
}

export function rebalance(type, shards, immediate) {
  return act(
    `Move ${shards.length} shard(s) (${shards.slice(0, 10).join(', ')}${shards.length > 10 ? '…' : ''}) ${immediate ? 'now' : 'at the next rebalance'}?`,
    () => api.call('POST', `${typePath(type)}/rebalance`, { shardIds: shards, immediate }),
    (answer) => {
      const rejected = (answer.rejected || []).map((r) => `${r.shardId}: ${r.reason}`);
      return `${answer.accepted.length} shard(s) accepted${rejected.length ? `; refused: ${rejected.join(', ')}` : ''}.`;
    },
  );
}

export function drain(address, draining) {
  const path = `/v1/cluster/regions/${api.segment(address)}/drain`;
  return draining
    ? act(`Drain ${address}? Its shards are handed off to other regions and it gets no new ones.`,
      () => api.call('POST', path), `${address} is draining.`)
    : act(`Undrain ${address}? It can get shards again.`, () => api.call('DELETE', path), `${address} takes shards again.`);
}
