// The dashboard's start: the login when the node asks for a token, the
// type chosen by ?type= (the first when none), its first view from REST,
// then kept live from the event stream (the freeze banner read again at
// every freeze event), its shard loads read every SAMPLE_MS.

import * as api from './api.js';
import { openStream } from './stream.js';
import { TypeModel } from './model.js';
import { AGGREGATE_ABOVE, MAX_CARDS, drawMap } from './map.js';
import { RegionOverview } from './overview.js';
import { HOT_SHARDS, drawHotShards, readLoads } from './loads.js';
import { showStory } from './story.js';
import { drain, rebalance, tell } from './actions.js';
import { StrategyPanel } from './strategy.js';
import { Charts, SAMPLE_MS } from './charts.js';
import { FreezeBanner } from './freeze.js';
import { PlanPanel } from './plan.js';

const $ = (id) => document.getElementById(id);
const STORY_EVENTS = 20;
const MAX_STORIES = 20000;
const REFRESH_AFTER_MS = 500;
const FREEZE_EVENTS = new Set(['frozen', 'freeze-lifted', 'freeze-expired']);

const page = {
  type: null,
  model: null,
  marks: { selected: new Set(), dryRun: new Set(), chosen: null },
  stories: new Map(),
  queued: null,
  drawing: false,
  refreshTimer: null,
  storyTimer: null,
  closeStream: null,
  strategy: null,
  charts: null,
  overview: null,
  freeze: null,
  plan: null,
  // The region opened from the overview: the map shows it alone.
  focus: null,
  // What colours the shards: 'reason' or 'load'.
  colour: 'reason',
};

function remember(event) {
  if (!event.shardId) return;
  let story = page.stories.get(event.shardId);
  if (!story) {
    if (page.stories.size >= MAX_STORIES) page.stories.delete(page.stories.keys().next().value);
    story = [];
    page.stories.set(event.shardId, story);
  }
  story.push(event);
  if (story.length > STORY_EVENTS) story.shift();
}

// The type's model from REST: every page of its shards and of its
// placements, the pages read one after another.
async function loadType(type) {
  const path = `/v1/cluster/shards/${api.segment(type)}`;
  const state = await api.allPages(path, 'shards');
  const { placements } = await api.allPages(`${path}/placements`, 'placements');
  const model = new TypeModel(state, placements);
  if (page.model) model.loads = page.model.loads;
  return model;
}

function summarize() {
  const model = page.model;
  const strategy = model.strategy ? `${model.strategy.name}@${model.strategy.version}` : '';
  $('summary').textContent =
    `${model.regions.size} regions · ${model.shardCount()} shards · ${model.moving.size} moving · ` +
    `${model.placements.size} placements · strategy ${strategy}`;
  const selected = [...page.marks.selected];
  $('selected').textContent = selected.length ? `Selected: ${selected.join(', ')}` : 'No shard selected.';
  $('rebalance').disabled = selected.length === 0;
}

function draw() {
  if (page.drawing) return;
  page.drawing = true;
  requestAnimationFrame(() => {
    page.drawing = false;
    const model = page.model;
    const listed = page.overview.regions(model);
    page.overview.draw(model, listed, page.focus);
    const focused = page.focus && model.region(page.focus);
    const regions = focused ? [focused] : listed;
    drawMap($('map'), model, page.marks, { regions, colour: page.colour });
    $('map-all').hidden = !focused;
    $('map-note').textContent = focused
      ? `Region ${focused.address}, opened from the overview.`
      : listed.length > MAX_CARDS
        ? `The first ${MAX_CARDS} of the ${listed.length} regions the overview shows, in its order: filter, search or click a region to see others.`
        : '';
    summarize();
  });
}

// Draws the type from REST again; events that arrive meanwhile wait.
async function refresh() {
  page.queued = page.queued || [];
  try {
    page.model = await loadType(page.type);
  } catch (error) {
    return failed(error);
  } finally {
    const queued = page.queued || [];
    page.queued = null;
    for (const event of queued) apply(event);
  }
  draw();
}

function scheduleRefresh() {
  clearTimeout(page.refreshTimer);
  page.refreshTimer = setTimeout(refresh, REFRESH_AFTER_MS);
}

function apply(event) {
  if (page.queued) return page.queued.push(event);
  const changed = page.model.apply(event);
  if (changed === 'regions') scheduleRefresh();
  if (changed === 'strategy') {
    scheduleRefresh();
    page.strategy.refresh().catch((error) => tell(error.message));
  }
  if (changed) draw();
}

function onEvent(event) {
  if (event.kind === 'missed') {
    tell(event.missed ? `${event.missed} events were missed; redrawing from the node.` : 'The leader changed; redrawing from the node.');
    return refresh();
  }
  remember(event);
  page.charts.onEvent(event);
  if (FREEZE_EVENTS.has(event.kind)) page.freeze.refresh().catch((error) => tell(error.message));
  apply(event);
  if (event.shardId && event.shardId === page.marks.chosen) {
    clearTimeout(page.storyTimer);
    page.storyTimer = setTimeout(() => story(event.shardId), REFRESH_AFTER_MS);
  }
}

function showLogin(message) {
  $('dashboard').hidden = true;
  $('login').hidden = false;
  const error = $('login-error');
  error.textContent = message || '';
  error.hidden = !message;
  $('token').focus();
}

function failed(error) {
  if (error.status === 401) {
    if (page.closeStream) page.closeStream();
    page.closeStream = null;
    const message = api.token()
      ? `The node refused this token: ${error.message}. Check the token and try again.`
      : '';
    api.setToken(null);
    return showLogin(message);
  }
  tell(error.message);
}

// Opens `address` on the map, alone, and brings the map into view.
function openRegion(address) {
  page.focus = address;
  draw();
  requestAnimationFrame(() => $('map-head').scrollIntoView({ block: 'start' }));
}

// Reads the shards' loads (all of them while the map draws shards one by
// one) and shows the hottest.
async function sampleLoads() {
  const model = page.model;
  const limit = model.shardCount() <= AGGREGATE_ABOVE ? AGGREGATE_ABOVE : HOT_SHARDS;
  drawHotShards($('hot-shards'), await readLoads(model, limit));
  draw();
}

function regionAddresses() {
  return [...page.model.regions.keys()];
}

function story(shard) {
  page.marks.chosen = shard;
  draw();
  return showStory(page.type, shard, page.stories.get(shard) || [], regionAddresses());
}

function wire() {
  page.overview = new RegionOverview(openRegion);
  page.overview.changed = () => {
    page.focus = null;
    draw();
  };
  $('map').addEventListener('click', (click) => {
    const target = click.target.closest('button');
    if (!target) return;
    if (target.dataset.shard !== undefined) {
      const shard = target.dataset.shard;
      if ($('select-mode').checked) {
        if (page.marks.selected.has(shard)) page.marks.selected.delete(shard);
        else page.marks.selected.add(shard);
        draw();
      } else {
        story(shard);
      }
    } else if (target.dataset.action) {
      drain(target.dataset.address, target.dataset.action === 'drain');
    }
  });
  $('hot-shards').addEventListener('click', (click) => {
    const target = click.target.closest('button[data-shard]');
    if (target) story(target.dataset.shard);
  });
  $('map-all').addEventListener('click', () => {
    page.focus = null;
    draw();
  });
  $('colour-by').addEventListener('change', () => {
    page.colour = $('colour-by').value;
    $('legend-reason').hidden = page.colour !== 'reason';
    $('legend-load').hidden = page.colour !== 'load';
    draw();
  });
  $('find').addEventListener('submit', (submit) => {
    submit.preventDefault();
    const shard = $('find-shard').value.trim();
    if (shard) story(shard);
  });
  $('rebalance').addEventListener('click', async () => {
    const shards = [...page.marks.selected];
    if (await rebalance(page.type, shards, $('immediate').checked)) {
      page.marks.selected.clear();
      draw();
    }
  });
}

async function open() {
  $('login').hidden = true;
  const { types } = await api.get('/v1/cluster/shards');
  const wanted = new URLSearchParams(location.search).get('type');
  page.type = wanted || (types[0] && types[0].name);
  const nav = $('types');
  nav.replaceChildren();
  for (const t of types) {
    const link = document.createElement('a');
    link.href = `?type=${encodeURIComponent(t.name)}`;
    link.textContent = t.name;
    if (t.name === page.type) link.className = 'current';
    nav.append(link);
  }
  $('logout').hidden = !api.token();
  if (!page.type) return tell('This node has no entity type yet: declare one with --type, or let a region register one.');
  if (!types.some((t) => t.name === page.type)) return tell(`This node has no entity type ${page.type}.`);
  page.model = await loadType(page.type);
  $('dashboard').hidden = false;
  draw();
  page.strategy = new StrategyPanel(page.type, (moved) => {
    page.marks.dryRun = moved;
    draw();
  });
  page.strategy.refresh().catch((error) => tell(error.message));
  page.charts = new Charts($('charts'), page.type);
  page.plan = new PlanPanel(page.type, {
    candidate: () => page.strategy.candidate(),
    onPlan: (moved) => {
      page.marks.dryRun = moved;
      draw();
    },
    counts: () => new Map([...page.model.regions].map(([address, region]) => [address, region.shards.size])),
  });
  page.freeze = new FreezeBanner(page.type);
  page.freeze.refresh().catch((error) => tell(error.message));
  const sample = () => {
    page.charts.sample(page.model).catch(() => {});
    // A node that cannot answer now is shown by the stream's status.
    sampleLoads().catch((error) => error.status === 401 && failed(error));
  };
  sample();
  setInterval(sample, SAMPLE_MS);
  page.closeStream = openStream(page.type, {
    replayed: remember,
    live: refresh,
    event: onEvent,
    status: (on, why) => {
      $('live').className = `live ${on ? 'on' : 'off'}`;
      $('live').textContent = on ? 'live' : why;
    },
    failed,
  });
}

function start() {
  wire();
  $('login').addEventListener('submit', (submit) => {
    submit.preventDefault();
    api.setToken($('token').value.trim());
    $('token').value = '';
    open().catch(failed);
  });
  $('logout').addEventListener('click', () => {
    api.setToken(null);
    location.reload();
  });
  open().catch(failed);
}

start();
