// The TypeScript runner of the region core's specification: every scenario
// in `contracts/region-core/*.txt` (the format is in that folder's
// README), run against `RegionCore` with the literal actions compared. The
// Rust and Python clients run the same files, so a rule of the core is
// written once.

import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { describe, test } from 'node:test';

import { LoadMeter, RegionCore, type Action, type CoreConfig } from '../src/core.js';
import { RegionError, SendError } from '../src/index.js';
import type { NodeMessage } from '../src/wire.js';

import { fromSerde, toSerde, type Json } from './serde-json.js';

const SCENARIOS = new URL('../../../../contracts/region-core/', import.meta.url);

type Outcome = [string, Json];

function render(action: Action<string>): Outcome {
  switch (action.type) {
    case 'Send':
      return ['send', toSerde(action.message)];
    case 'Start':
      return ['start', { shard: action.shard, epoch: action.epoch }];
    case 'Stop':
      return ['stop', action.shard];
    case 'AbandonStop':
      return ['abandon-stop', action.shard];
    case 'Deliver':
      return ['deliver', { shard: action.shard, message: action.message }];
    case 'Forward':
      return ['forward', { to: action.to, shard: action.shard, message: action.message }];
    case 'Undelivered':
      return [
        'undelivered',
        { shard: action.shard, message: action.message, error: toSerde(action.error.detail, 'kind') },
      ];
    case 'Publish':
      return ['publish', toSerde(action.update)];
    case 'Reconnect':
      return ['reconnect', action.reason];
  }
}

/** The scenarios' default configuration, changed by a `config` line. */
function configure(changes: Record<string, Json>, address?: string): { config: CoreConfig; top: number } {
  const c: Record<string, Json> = {
    address: 'a',
    incarnation: 7,
    roles: [],
    app_version: '1.0',
    labels: {},
    proxy_only: false,
    shard_buffer_limit: 3,
    total_buffer_limit: 5,
    stop_deadline_ms: 500,
    home_retry_ms: 1000,
    response_timeout_ms: 10000,
    load_report_top: 10,
    forward_attempts: 3,
    forward_deadline_ms: 5000,
    max_lookups_in_flight: 256,
  };
  for (const [key, value] of Object.entries(changes)) {
    assert.ok(key in c, `no config field ${key}`);
    c[key] = value;
  }
  if (address !== undefined) {
    c['address'] = address;
  }
  const config: CoreConfig = {
    registration: {
      address: c['address'] as string,
      incarnation: c['incarnation'] as number,
      roles: c['roles'] as string[],
      appVersion: c['app_version'] as string,
      labels: c['labels'] as Record<string, string>,
      proxyOnly: c['proxy_only'] as boolean,
    },
    shardBufferLimit: c['shard_buffer_limit'] as number,
    totalBufferLimit: c['total_buffer_limit'] as number,
    stopDeadlineMs: c['stop_deadline_ms'] as number,
    homeRetryMs: c['home_retry_ms'] as number,
    responseTimeoutMs: c['response_timeout_ms'] as number,
    forwardAttempts: c['forward_attempts'] as number,
    forwardDeadlineMs: c['forward_deadline_ms'] as number,
    maxLookupsInFlight: c['max_lookups_in_flight'] as number,
  };
  return { config, top: c['load_report_top'] as number };
}

interface Subject {
  core: RegionCore<string>;
  meter: LoadMeter;
  top: number;
}

/** A step or query of a scenario, with what is written under it. */
type Line =
  | { kind: 'config'; changes: Record<string, Json> }
  | { kind: 'regions'; names: string[] }
  | { kind: 'step'; line: number; text: string; expected: Outcome[] }
  | { kind: 'query'; line: number; text: string; expected?: Json };

interface Scenario {
  file: string;
  name: string;
  lines: Line[];
}

/** Splits `verb [json]` into the verb and the parsed JSON (null when absent). */
function verbAndValue(text: string): [string, Json] {
  const trimmed = text.trim();
  const space = trimmed.indexOf(' ');
  if (space < 0) {
    return [trimmed, null];
  }
  return [trimmed.slice(0, space), JSON.parse(trimmed.slice(space + 1)) as Json];
}

function parse(file: string, text: string): Scenario[] {
  const scenarios: Scenario[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = index + 1;
    const where = `${file}:${line}`;
    if (raw.trim() === '' || raw.startsWith('#')) {
      return;
    }
    if (raw.startsWith('scenario ')) {
      scenarios.push({ file, name: raw.slice('scenario '.length).trim(), lines: [] });
      return;
    }
    const scenario = scenarios.at(-1);
    assert.ok(scenario, `${where}: a line before the first scenario`);
    const last = scenario.lines.at(-1);
    if (raw.startsWith('  ')) {
      if (last?.kind === 'step') {
        last.expected.push(verbAndValue(raw));
      } else if (last?.kind === 'query') {
        const [equals, value] = verbAndValue(raw);
        assert.equal(equals, '=', `${where}: \`= VALUE\` expected`);
        last.expected = value;
      } else {
        assert.fail(`${where}: an outcome without a step`);
      }
    } else if (raw.startsWith('config ')) {
      scenario.lines.push({ kind: 'config', changes: JSON.parse(raw.slice('config '.length)) as Record<string, Json> });
    } else if (raw.startsWith('regions ')) {
      scenario.lines.push({ kind: 'regions', names: raw.slice('regions '.length).trim().split(/\s+/) });
    } else if (raw.startsWith('?')) {
      scenario.lines.push({ kind: 'query', line, text: raw.slice(1) });
    } else if (/^\d/.test(raw)) {
      scenario.lines.push({ kind: 'step', line, text: raw, expected: [] });
    } else {
      assert.fail(`${where}: not a line of the format: ${raw}`);
    }
  });
  return scenarios;
}

class World {
  changes: Record<string, Json> = {};
  regions = new Map<string, Subject>();
  first: string | undefined;

  add(address?: string): void {
    const { config, top } = configure(this.changes, address);
    const name = config.registration.address;
    this.first ??= name;
    this.regions.set(name, { core: new RegionCore<string>(config), meter: new LoadMeter(), top });
  }

  /** The region a line names (`@b`), or the first; the rest of the text. */
  subject(text: string, where: string): [Subject, string] {
    if (this.regions.size === 0) {
      this.add();
    }
    let rest = text.trimStart();
    let name = this.first as string;
    if (rest.startsWith('@')) {
      const space = rest.indexOf(' ');
      name = rest.slice(1, space < 0 ? undefined : space);
      rest = space < 0 ? '' : rest.slice(space + 1);
    }
    const subject = this.regions.get(name);
    assert.ok(subject, `${where}: no region ${name}`);
    return [subject, rest];
  }
}

function field(value: Json, key: string): Json {
  const object = value as Record<string, Json>;
  assert.ok(object !== null && typeof object === 'object' && key in object, `the event needs ${key}`);
  return object[key] as Json;
}

function step(world: World, text: string, where: string): Outcome[] {
  const space = text.indexOf(' ');
  const now = Number(text.slice(0, space < 0 ? undefined : space));
  assert.ok(Number.isInteger(now), `${where}: a time in ms expected`);
  const [subject, rest] = world.subject(space < 0 ? '' : text.slice(space + 1), where);
  const [event, value] = verbAndValue(rest);
  const core = subject.core;
  const actions = (list: Action<string>[]): Outcome[] => list.map(render);
  const sent = (call: () => Action<string>[]): Outcome[] => {
    try {
      return actions(call());
    } catch (error) {
      if (error instanceof SendError) {
        return [['error', toSerde(error.detail, 'kind')]];
      }
      throw error;
    }
  };
  switch (event) {
    case 'connected':
      return actions(core.connected(now));
    case 'disconnected':
      return actions(core.disconnected(now, value as string));
    case 'node':
      return actions(core.onMessage(fromSerde(value) as NodeMessage, now));
    case 'tick': {
      const metrics = (value ?? {}) as Record<string, number>;
      return actions(core.tickWithLoad(now, () => metrics, (runs) => subject.meter.report(now, runs, subject.top)));
    }
    case 'send':
      return sent(() => core.send(field(value, 'shard') as string, field(value, 'message') as string, now));
    case 'inbound':
      return sent(() => core.inbound(field(value, 'shard') as string, field(value, 'message') as string, now));
    case 'stop-finished':
      return actions(core.stopFinished(value as string, now));
    case 'forward-failed':
      return actions(
        core.forwardFailed(
          field(value, 'shard') as string,
          field(value, 'to') as string,
          field(value, 'messages') as string[],
          field(value, 'reason') as string,
          now,
        ),
      );
    case 'request-home': {
      try {
        const lookup = core.requestHome(value as string, now);
        return lookup.type === 'Known' ? [['known', lookup.home]] : actions(lookup.actions);
      } catch (error) {
        if (error instanceof RegionError) {
          return [['error', toSerde(error.detail, 'kind')]];
        }
        throw error;
      }
    }
    case 'leave':
      return actions(core.leave(now));
    case 'shutdown':
      return actions(core.shutdown(now));
    case 'drain-and-leave':
      return actions(core.drainAndLeave(value as number, now));
    case 'request-drain':
      return actions(core.requestDrain(value as boolean, now));
    case 'record-load':
      subject.meter.record(field(value, 'shard') as string, field(value, 'units') as number, now);
      return [];
    case 'set-load':
      subject.meter.set(field(value, 'shard') as string, field(value, 'rate') as number, now);
      return [];
    default:
      assert.fail(`${where}: no event ${event}`);
  }
}

function query(world: World, text: string, where: string): Json {
  const [subject, rest] = world.subject(text, where);
  const [name, argument] = verbAndValue(rest);
  const core = subject.core;
  switch (name) {
    case 'registered':
      return core.isRegistered();
    case 'fenced':
      return core.isFenced();
    case 'lease-until':
      return core.leaseUntil() ?? null;
    case 'left':
      return core.hasLeft();
    case 'idle':
      return core.isIdle();
    case 'running':
      return core.running();
    case 'epoch-of':
      return core.epochOf(argument as string) ?? null;
    case 'buffered':
      return core.buffered();
    case 'cached-home':
      return core.cachedHome(argument as string) ?? null;
    case 'delivers-locally':
      return core.deliversLocally(argument as string);
    case 'departure': {
      const outcome = core.departure();
      if (outcome === undefined) {
        return null;
      }
      return outcome.ok ? 'Ok' : toSerde(outcome.error.detail, 'kind');
    }
    default:
      assert.fail(`${where}: no query ${name}`);
  }
}

function show(outcomes: Outcome[]): string {
  return outcomes.map(([kind, value]) => (value === null ? `  ${kind}` : `  ${kind} ${JSON.stringify(value)}`)).join('\n');
}

const files = readdirSync(SCENARIOS)
  .filter((name) => name.endsWith('.txt'))
  .sort();

describe('the region core specification', () => {
  test('has scenario files', () => {
    assert.ok(files.length > 0, `no scenario files in ${SCENARIOS.pathname}`);
  });
  for (const file of files) {
    for (const scenario of parse(file, readFileSync(new URL(file, SCENARIOS), 'utf8'))) {
      test(`${file}: ${scenario.name}`, () => {
        const world = new World();
        for (const line of scenario.lines) {
          if (line.kind === 'config') {
            world.changes = line.changes;
          } else if (line.kind === 'regions') {
            line.names.forEach((name) => world.add(name));
          } else if (line.kind === 'step') {
            const where = `${file}:${line.line}`;
            const got = step(world, line.text, where);
            assert.deepEqual(got, line.expected, `${where}: ${line.text}\nexpected:\n${show(line.expected)}\ngot:\n${show(got)}`);
          } else {
            const where = `${file}:${line.line}`;
            assert.deepEqual(query(world, line.text, where), line.expected, `${where}: ?${line.text}`);
          }
        }
      });
    }
  }
});
