// Table-driven tests of `RegionCore`, one for each test of the Rust
// client's `region/core_tests.rs`, with the same names (as sentences) and
// the same literal action lists: each step is [time, event, the exact
// actions expected].

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  LoadMeter,
  RegionCore,
  RegionError,
  SendError,
  type Action,
  type CoreConfig,
  type NodeMessage,
  type RegionMessage,
  type SendErrorDetail,
  type Update,
} from '../src/index.js';

type Msg = string;
type A = Action<Msg>;

/** Region "a", incarnation 7; small limits so they are easy to reach. */
function config(): CoreConfig {
  return {
    registration: {
      address: 'a',
      incarnation: 7,
      roles: [],
      appVersion: '1.0',
      labels: {},
      proxyOnly: false,
    },
    shardBufferLimit: 3,
    totalBufferLimit: 5,
    stopDeadlineMs: 500,
    homeRetryMs: 1_000,
    responseTimeoutMs: 10_000,
  };
}

type Ev =
  | { ev: 'Connected' }
  | { ev: 'Disconnected' }
  | { ev: 'Node'; message: NodeMessage }
  | { ev: 'Tick' }
  | { ev: 'Send'; shard: string; message: Msg }
  | { ev: 'SendFails'; shard: string; message: Msg; error: SendErrorDetail }
  | { ev: 'Inbound'; shard: string; message: Msg }
  | { ev: 'StopFinished'; shard: string }
  | { ev: 'ForwardFailed'; shard: string; to: string; messages: Msg[] }
  | { ev: 'RequestHome'; shard: string }
  | { ev: 'Leave' }
  | { ev: 'Shutdown' }
  /** `drainAndLeave` with this bound, in ms. */
  | { ev: 'DrainAndLeave'; bound: number };

const Connected: Ev = { ev: 'Connected' };
const Disconnected: Ev = { ev: 'Disconnected' };
const Tick: Ev = { ev: 'Tick' };
const Leave: Ev = { ev: 'Leave' };
const Shutdown: Ev = { ev: 'Shutdown' };
const Node = (message: NodeMessage): Ev => ({ ev: 'Node', message });
const Send = (shard: string, message: Msg): Ev => ({ ev: 'Send', shard, message });
const SendFails = (shard: string, message: Msg, error: SendErrorDetail): Ev => ({
  ev: 'SendFails',
  shard,
  message,
  error,
});
const Inbound = (shard: string, message: Msg): Ev => ({ ev: 'Inbound', shard, message });
const StopFinished = (shard: string): Ev => ({ ev: 'StopFinished', shard });
const ForwardFailed = (shard: string, to: string, messages: Msg[]): Ev => ({ ev: 'ForwardFailed', shard, to, messages });
const RequestHome = (shard: string): Ev => ({ ev: 'RequestHome', shard });
const DrainAndLeave = (bound: number): Ev => ({ ev: 'DrainAndLeave', bound });

const metrics = (): Record<string, number> => ({ cpu: 0.5 });

function run(core: RegionCore<Msg>, steps: [number, Ev, A[]][]): void {
  steps.forEach(([now, event, expected], index) => {
    let got: A[];
    switch (event.ev) {
      case 'Connected':
        got = core.connected(now);
        break;
      case 'Disconnected':
        got = core.disconnected(now, 'connection reset');
        break;
      case 'Node':
        got = core.onMessage(event.message, now);
        break;
      case 'Tick':
        got = core.tick(now, metrics);
        break;
      case 'Send':
        got = core.send(event.shard, event.message, now);
        break;
      case 'SendFails':
        assert.throws(
          () => core.send(event.shard, event.message, now),
          (error: unknown) => {
            assert.ok(error instanceof SendError, `step ${index} at ${now} ms: ${String(error)}`);
            assert.deepEqual(error.detail, event.error, `step ${index} at ${now} ms`);
            assert.equal(error.kind, event.error.kind);
            return true;
          },
        );
        got = [];
        break;
      case 'Inbound':
        got = core.inbound(event.shard, event.message, now);
        break;
      case 'StopFinished':
        got = core.stopFinished(event.shard, now);
        break;
      case 'ForwardFailed':
        got = core.forwardFailed(event.shard, event.to, event.messages, now);
        break;
      case 'RequestHome': {
        const lookup = core.requestHome(event.shard, now);
        got =
          lookup.type === 'Known'
            ? [{ type: 'Publish', update: { type: 'HomeChanged', shard: event.shard, home: lookup.home } }]
            : lookup.actions;
        break;
      }
      case 'Leave':
        got = core.leave(now);
        break;
      case 'Shutdown':
        got = core.shutdown(now);
        break;
      case 'DrainAndLeave':
        got = core.drainAndLeave(event.bound, now);
        break;
    }
    assert.deepEqual(got, expected, `step ${index} at ${now} ms`);
  });
}

const sendToNode = (message: RegionMessage): A => ({ type: 'Send', message });

function register(sequence: number): A {
  return sendToNode({ type: 'Register', ...config().registration, sequence });
}

/** `Registered` with a lease of 1,000 ms and heartbeats every 400 ms. */
function registered(sequence: number): Ev {
  return Node({ type: 'Registered', incarnation: 7, sequence, leaseMs: 1_000, heartbeatIntervalMs: 400 });
}

function ack(sequence: number): Ev {
  return Node({ type: 'HeartbeatAck', incarnation: 7, sequence, leaseMs: 1_000 });
}

function heartbeat(sequence: number): A {
  return sendToNode({ type: 'Heartbeat', sequence, metrics: { cpu: 0.5 } });
}

function getHome(shard: string): A {
  return sendToNode({ type: 'GetShardHome', shard });
}

function home(shard: string, home: string): Ev {
  return Node({ type: 'ShardHome', shard, home });
}

function homeAt(shard: string, home: string, epoch: number): Ev {
  return Node({ type: 'ShardHomeEpoch', shard, home, epoch });
}

function stop(shard: string): A {
  return { type: 'Stop', shard };
}

function deliver(shard: string, message: Msg): A {
  return { type: 'Deliver', shard, message };
}

function forward(to: string, shard: string, message: Msg): A {
  return { type: 'Forward', to, shard, message };
}

function publish(update: Update): A {
  return { type: 'Publish', update };
}

function started(shard: string): A[] {
  return startedAt(shard, 0);
}

function startedAt(shard: string, epoch: number): A[] {
  return [
    { type: 'Start', shard, epoch },
    publish({ type: 'ShardStarted', shard, epoch }),
    publish({ type: 'HomeChanged', shard, home: 'a' }),
  ];
}

function changed(shard: string, home: string): A {
  return publish({ type: 'HomeChanged', shard, home });
}

function stopped(shard: string): A {
  return publish({ type: 'ShardStopped', shard });
}

function drain(draining: boolean): A {
  return sendToNode({ type: 'Drain', draining });
}

function handOff(shard: string): Ev {
  return Node({ type: 'HandOff', shard });
}

function shardStopped(shard: string): A {
  return sendToNode({ type: 'ShardStopped', shard });
}

const leaveMessage: A = sendToNode({ type: 'Leave' });

/** Connected at 0, registered at 5: lease until 1,000, heartbeats due from 405. */
function registeredCore(): RegionCore<Msg> {
  const core = new RegionCore<Msg>(config());
  run(core, [
    [0, Connected, [register(1)]],
    [5, registered(1), [publish({ type: 'Registered', incarnation: 7 })]],
  ]);
  assert.equal(core.leaseUntil(), 1_000);
  return core;
}

function withMore(actions: A[], more: A[]): A[] {
  return [...actions, ...more];
}

/** The error a drain-and-leave ended with (fails when it did not end in one). */
function departureError(core: RegionCore<Msg>): RegionError {
  const outcome = core.departure();
  assert.ok(outcome !== undefined && !outcome.ok, `no error outcome: ${JSON.stringify(outcome)}`);
  return outcome.error;
}

test('registration heartbeats and renewal', () => {
  const core = new RegionCore<Msg>(config());
  run(core, [
    [0, Tick, []],
    [0, Connected, [register(1)]],
    [3, Tick, []],
    [5, registered(1), [publish({ type: 'Registered', incarnation: 7 })]],
    [404, Tick, []],
    [405, Tick, [heartbeat(2)]],
    [500, ack(2), []],
    [804, Tick, []],
    [805, Tick, [heartbeat(3)]],
  ]);
  assert.ok(core.isRegistered());
  assert.equal(core.leaseUntil(), 1_405, 'the ack of heartbeat 2 counts from its send at 405');
});

test('the lease counts from the acknowledged heartbeats send after lost acks', () => {
  const core = registeredCore();
  run(core, [
    [405, Tick, [heartbeat(2)]],
    [805, Tick, [heartbeat(3)]],
    // The acks of 2 arrive late, after 3's: 3 renews from 805; 2 is older
    // than 3 and renews nothing.
    [990, ack(3), []],
    [995, ack(2), []],
  ]);
  assert.equal(core.leaseUntil(), 1_805, "from heartbeat 3's send, not from the ack's arrival at 990");
  // An unknown sequence renews nothing either.
  run(core, [[996, ack(99), []]]);
  assert.equal(core.leaseUntil(), 1_805);
});

test('a region fences when its lease runs out and not before', () => {
  const core = registeredCore();
  run(core, [
    [10, Send('s1', 'm1'), [getHome('s1')]],
    [20, home('s1', 'a'), withMore(started('s1'), [deliver('s1', 'm1')])],
    [30, Send('s2', 'x'), [getHome('s2')]],
    [40, home('s2', 'b'), [changed('s2', 'b'), forward('b', 's2', 'x')]],
    // Every ack is lost from here on.
    [405, Tick, [heartbeat(2)]],
    [805, Tick, [heartbeat(3)]],
    [999, Tick, []],
    [999, Send('s1', 'm2'), [deliver('s1', 'm2')]],
    [1_000, Tick, [stop('s1'), publish({ type: 'Fenced' })]],
    // Cached homes are forgotten: both shards buffer, nothing is asked while fenced.
    [1_001, Send('s1', 'm3'), []],
    [1_002, Send('s2', 'y'), []],
    [1_010, StopFinished('s1'), [stopped('s1')]],
  ]);
  assert.ok(core.isFenced());
  assert.deepEqual(core.running(), []);
  assert.equal(core.buffered(), 2);
  run(core, [
    // A renewal that still ends in the past (405 + 1,000) does not lift the fence.
    [1_410, ack(2), []],
    [1_420, ack(3), [publish({ type: 'LeaseRegained' }), getHome('s1'), getHome('s2')]],
    [1_430, home('s1', 'a'), withMore(started('s1'), [deliver('s1', 'm3')])],
    [1_440, home('s2', 'b'), [changed('s2', 'b'), forward('b', 's2', 'y')]],
  ]);
  assert.ok(!core.isFenced());
  assert.equal(core.leaseUntil(), 1_805);
});

test('a lease running out while disconnected fences at the next event', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [20, Disconnected, [publish({ type: 'Disconnected', reason: 'connection reset' })]],
    [500, Inbound('s1', 'm'), [deliver('s1', 'm')]],
    [1_000, Inbound('s1', 'n'), [stop('s1'), publish({ type: 'Fenced' })]],
    // ShardHome naming this region while fenced starts nothing.
    [1_001, Connected, [register(2)]],
    [1_002, home('s1', 'a'), []],
  ]);
  assert.equal(core.buffered(), 1);
});

test('messages buffer until the home is known and flush in order', () => {
  const core = new RegionCore<Msg>(config());
  run(core, [
    // Not connected: buffered, asked once registered.
    [0, Send('s1', '1'), []],
    [1, Send('s1', '2'), []],
    [2, Connected, [register(1)]],
    [3, Send('s1', '3'), []],
    [5, registered(1), [publish({ type: 'Registered', incarnation: 7 }), getHome('s1')]],
    [
      6,
      home('s1', 'b'),
      [changed('s1', 'b'), forward('b', 's1', '1'), forward('b', 's1', '2'), forward('b', 's1', '3')],
    ],
    [7, Send('s1', '4'), [forward('b', 's1', '4')]],
  ]);
  assert.equal(core.buffered(), 0);
});

test('a fence found by a refused send stops the shards at the next call', () => {
  const core = registeredCore();
  run(core, [
    [10, homeAt('s1', 'a', 3), startedAt('s1', 3)],
    [20, Send('s2', '1'), [getHome('s2')]],
    [20, Send('s2', '2'), []],
    [20, Send('s2', '3'), []],
    // The lease ran out at 1,000: this send finds it, and is refused.
    [1_000, SendFails('s2', '4', { kind: 'BufferFull', shard: 's2', limit: 3 }), []],
  ]);
  assert.ok(core.isFenced());
  // The fence's stop was not lost with the refusal: the next call does it first.
  assert.deepEqual(core.stopFinished('none', 1_001), [stop('s1'), publish({ type: 'Fenced' })]);
  assert.deepEqual(core.stopFinished('none', 1_002), [], 'done once');
});

test('buffers are bounded per shard and in total', () => {
  const core = new RegionCore<Msg>(config());
  run(core, [
    [0, Send('s1', '1'), []],
    [0, Send('s1', '2'), []],
    [0, Send('s1', '3'), []],
    [0, SendFails('s1', '4', { kind: 'BufferFull', shard: 's1', limit: 3 }), []],
    [0, Send('s2', '1'), []],
    [0, Send('s2', '2'), []],
    [0, SendFails('s3', '1', { kind: 'TotalBufferFull', limit: 5 }), []],
    [0, SendFails('', '1', { kind: 'InvalidShard', shard: '', reason: 'a shard id is empty' }), []],
  ]);
  assert.equal(core.buffered(), 5);
  const long = 'x'.repeat(257);
  assert.throws(
    () => core.send(long, '1', 0),
    (error: unknown) => {
      assert.ok(error instanceof SendError);
      assert.ok(error.message.includes('257 bytes is longer than 256 bytes'), error.message);
      return true;
    },
  );
});

test('hand off of a running shard stops it before reporting shard stopped', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [20, Node({ type: 'BeginHandOff', shard: 's1' }), [sendToNode({ type: 'BeginHandOffAck', shard: 's1' })]],
    // From now on local sends wait; the home request is answered when the hand-off ends.
    [21, Send('s1', 'late-1'), [getHome('s1')]],
    [22, Send('s1', 'late-2'), []],
    // A message another region sent before acknowledging is still delivered here.
    [23, Inbound('s1', 'early'), [deliver('s1', 'early')]],
    [30, Node({ type: 'HandOff', shard: 's1' }), [stop('s1')]],
    [40, StopFinished('s1'), [sendToNode({ type: 'ShardStopped', shard: 's1' }), stopped('s1')]],
    [50, home('s1', 'b'), [changed('s1', 'b'), forward('b', 's1', 'late-1'), forward('b', 's1', 'late-2')]],
  ]);
  assert.deepEqual(core.running(), []);
});

test('hand off of a shard not running here is reported at once', () => {
  const core = registeredCore();
  run(core, [[10, Node({ type: 'HandOff', shard: 's9' }), [sendToNode({ type: 'ShardStopped', shard: 's9' })]]]);
});

test('a stop past its deadline is abandoned and reported', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [100, Node({ type: 'HandOff', shard: 's1' }), [stop('s1')]],
    [399, Tick, []],
    [
      600,
      Tick,
      [
        { type: 'AbandonStop', shard: 's1' },
        sendToNode({ type: 'ShardStopped', shard: 's1' }),
        stopped('s1'),
        heartbeat(2),
      ],
    ],
    // The late report of the abandoned stop changes nothing.
    [700, StopFinished('s1'), []],
  ]);
});

test('a hand off stop finishing while disconnected is reported after reregistering', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [20, Send('s2', 'm'), [getHome('s2')]],
    [30, Node({ type: 'HandOff', shard: 's1' }), [stop('s1')]],
    [40, Disconnected, [publish({ type: 'Disconnected', reason: 'connection reset' })]],
    [50, StopFinished('s1'), [stopped('s1')]],
    // Same incarnation, new sequence; the lost home request is asked again.
    [60, Connected, [register(2)]],
    [
      70,
      registered(2),
      [
        publish({ type: 'Registered', incarnation: 7 }),
        sendToNode({ type: 'ShardStopped', shard: 's1' }),
        getHome('s2'),
      ],
    ],
  ]);
  assert.equal(core.leaseUntil(), 1_060, "renewed from the second registration's send at 60");
});

test('not registered registers again once with the same incarnation', () => {
  const core = registeredCore();
  run(core, [
    [10, Send('s1', 'm'), [getHome('s1')]],
    [20, Node({ type: 'NotRegistered' }), [register(2)]],
    [21, Node({ type: 'NotRegistered' }), []],
    // An answer to an older registration is not this one's.
    [25, registered(1), []],
    [30, registered(2), [publish({ type: 'Registered', incarnation: 7 }), getHome('s1')]],
  ]);
});

test('refusals and silence hang up', () => {
  const first = new RegionCore<Msg>(config());
  run(first, [
    [0, Connected, [register(1)]],
    [
      5,
      Node({ type: 'RegisterRefused', reason: 'incarnation 7 is older' }),
      [
        publish({ type: 'Refused', reason: 'incarnation 7 is older' }),
        { type: 'Reconnect', reason: 'the node refused the registration: incarnation 7 is older' },
      ],
    ],
    [6, Disconnected, [publish({ type: 'Disconnected', reason: 'connection reset' })]],
    [100, Connected, [register(2)]],
    [10_099, Tick, []],
    [10_100, Tick, [{ type: 'Reconnect', reason: 'the node has been silent for 10000 ms' }]],
  ]);
  const core = registeredCore();
  run(core, [[50, Node({ type: 'ShuttingDown' }), [{ type: 'Reconnect', reason: 'the node is shutting down' }]]]);
});

test('unanswered home requests are repeated', () => {
  const core = registeredCore();
  run(core, [
    [10, Send('s1', 'm'), [getHome('s1')]],
    [11, Send('s1', 'n'), []],
    [405, Tick, [heartbeat(2)]],
    [406, ack(2), []],
    [1_009, Tick, [heartbeat(3)]],
    [1_010, Tick, [getHome('s1')]],
  ]);
});

test('refused shards drop their buffer', () => {
  const core = registeredCore();
  run(core, [
    [10, Send('s1', 'm'), [getHome('s1')]],
    [11, Send('s1', 'n'), []],
    [
      20,
      Node({ type: 'ShardRefused', shard: 's1', reason: 'too many shards' }),
      [publish({ type: 'ShardRefused', shard: 's1', reason: 'too many shards', dropped: 2 })],
    ],
  ]);
  assert.equal(core.buffered(), 0);
});

test('home requests answer from the cache or ask once', () => {
  const core = registeredCore();
  run(core, [
    [10, RequestHome('s1'), [getHome('s1')]],
    [11, RequestHome('s1'), []],
    [20, home('s1', 'b'), [changed('s1', 'b')]],
    // Known: answered from the cache (shown as a HomeChanged by the table runner).
    [30, RequestHome('s1'), [changed('s1', 'b')]],
  ]);
  assert.equal(core.cachedHome('s1'), 'b');
});

test('messages from other regions for shards not running here are routed again', () => {
  const core = registeredCore();
  run(core, [
    [10, Inbound('s1', 'm'), [getHome('s1')]],
    [20, home('s1', 'c'), [changed('s1', 'c'), forward('c', 's1', 'm')]],
    [30, Inbound('s1', 'n'), [forward('c', 's1', 'n')]],
  ]);
});

test('a running shard homed elsewhere is stopped without a report', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [20, home('s1', 'b'), [stop('s1'), changed('s1', 'b')]],
    [30, Send('s1', 'm'), [forward('b', 's1', 'm')]],
    [40, StopFinished('s1'), [stopped('s1')]],
  ]);
});

test('a shard starts at the epoch the node names and a greater one stops the stale run', () => {
  const core = registeredCore();
  run(core, [
    [10, homeAt('s1', 'a', 7), startedAt('s1', 7)],
    [15, homeAt('s1', 'a', 7), []],
    [20, homeAt('s1', 'a', 9), [stop('s1')]],
    [40, StopFinished('s1'), [stopped('s1')]],
    // The home did not change: the stale run is replaced, not moved.
    [50, homeAt('s1', 'a', 9), startedAt('s1', 9).slice(0, 2)],
  ]);
  assert.equal(core.epochOf('s1'), 9);
  assert.equal(core.epochOf('s2'), undefined);
  run(core, [[60, homeAt('s1', 'b', 10), [stop('s1'), changed('s1', 'b')]]]);
  assert.equal(core.epochOf('s1'), undefined, 'a stopping run has no epoch to write with');
});

test('failed forwards go back to the front of the buffer and the home is asked again later', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'b'), [changed('s1', 'b')]],
    [20, Send('s1', '1'), [forward('b', 's1', '1')]],
    [20, Send('s1', '2'), [forward('b', 's1', '2')]],
    [20, ForwardFailed('s1', 'b', ['1', '2']), []],
    [30, Send('s1', '3'), []],
    [405, Tick, [heartbeat(2)]],
    [406, ack(2), []],
    [1_019, Tick, [heartbeat(3)]],
    [1_020, Tick, [getHome('s1')]],
    [
      1_030,
      home('s1', 'c'),
      [changed('s1', 'c'), forward('c', 's1', '1'), forward('c', 's1', '2'), forward('c', 's1', '3')],
    ],
  ]);
});

test('leaving sends leave then stops everything at leave done', () => {
  const core = new RegionCore<Msg>(config());
  run(core, [
    // Asked before registering: sent after.
    [0, Leave, []],
    [1, Connected, [register(1)]],
    [5, registered(1), [publish({ type: 'Registered', incarnation: 7 }), leaveMessage]],
    [6, Leave, []],
    [10, home('s1', 'a'), started('s1')],
    [20, Node({ type: 'LeaveDone' }), [stop('s1'), publish({ type: 'Left' })]],
    [30, Node({ type: 'NotRegistered' }), []],
    [40, StopFinished('s1'), [stopped('s1')]],
  ]);
  assert.ok(core.hasLeft() && core.isIdle());
});

test('a not registered overtaking leave done ends the leave too', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [20, Leave, [leaveMessage]],
    [30, Node({ type: 'NotRegistered' }), [stop('s1'), publish({ type: 'Left' })]],
    [40, Node({ type: 'LeaveDone' }), []],
  ]);
  assert.ok(core.hasLeft());
});

test('shutting down stops every shard and starts none', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [11, home('s2', 'a'), started('s2')],
    [20, Shutdown, [stop('s1'), stop('s2')]],
    [30, home('s3', 'a'), []],
    [40, StopFinished('s1'), [stopped('s1')]],
  ]);
  assert.deepEqual(core.running(), ['s2']);
  run(core, [[50, StopFinished('s2'), [stopped('s2')]]]);
  assert.ok(core.isIdle());
});

test('a drain request is sent once now or after registering', () => {
  const core = new RegionCore<Msg>(config());
  assert.deepEqual(core.requestDrain(true, 0), []);
  run(core, [
    [1, Connected, [register(1)]],
    [5, registered(1), [publish({ type: 'Registered', incarnation: 7 }), drain(true)]],
  ]);
  assert.deepEqual(core.requestDrain(false, 6), [drain(false)]);
});

test('drain and leave drains hands off then leaves once no shard runs here', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [11, home('s2', 'a'), started('s2')],
    [20, DrainAndLeave(300), [drain(true)]],
    // Asked twice: nothing more.
    [21, DrainAndLeave(300), []],
    [30, handOff('s1'), [stop('s1')]],
    [40, StopFinished('s1'), [shardStopped('s1'), stopped('s1')]],
    // s2 still runs: no leave yet.
    [50, Tick, []],
    [60, handOff('s2'), [stop('s2')]],
    // The last shard stopped: leave at once.
    [70, StopFinished('s2'), [shardStopped('s2'), stopped('s2'), leaveMessage]],
    [80, Tick, []],
  ]);
  assert.equal(core.departure(), undefined, 'not done before the node lets the region go');
  run(core, [[90, Node({ type: 'LeaveDone' }), [publish({ type: 'Left' })]]]);
  assert.deepEqual(core.departure(), { ok: true });
  assert.ok(core.hasLeft() && core.isIdle());
  // Nothing happens past the bound once done.
  run(core, [[390, Tick, []]]);
  assert.deepEqual(core.departure(), { ok: true });
});

test('drain and leave asked before registering drains and leaves after', () => {
  const core = new RegionCore<Msg>(config());
  run(core, [
    [0, DrainAndLeave(900), []],
    [1, Connected, [register(1)]],
    // Nothing runs here: the drain and the leave go out together.
    [5, registered(1), [publish({ type: 'Registered', incarnation: 7 }), drain(true), leaveMessage]],
    // The node removes the region before LeaveDone is on disk.
    [10, Node({ type: 'NotRegistered' }), [publish({ type: 'Left' })]],
  ]);
  assert.deepEqual(core.departure(), { ok: true });
});

test('a stalled drain leaves at half the bound', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [20, DrainAndLeave(380), [drain(true)]],
    // No other region takes s1: nothing moves.
    [209, Tick, []],
    [210, Tick, [leaveMessage]],
    // The node lets the region go (no region can take s1).
    [220, Node({ type: 'LeaveDone' }), [stop('s1'), publish({ type: 'Left' })]],
  ]);
  assert.deepEqual(core.departure(), { ok: true });
  assert.ok(!core.isIdle(), 's1 is still stopping');
  run(core, [[230, StopFinished('s1'), [stopped('s1')]]]);
  assert.ok(core.isIdle());
});

test('past its bound drain and leave stops what runs undrains and names what was left', () => {
  const core = registeredCore();
  run(core, [
    [10, home('s1', 'a'), started('s1')],
    [11, home('s2', 'a'), started('s2')],
    [20, DrainAndLeave(380), [drain(true)]],
    [210, Tick, [leaveMessage]],
    [399, Tick, []],
    // No LeaveDone by the bound: give up.
    [400, Tick, [drain(false), stop('s1'), stop('s2')]],
    // Nothing starts any more.
    [410, home('s3', 'a'), []],
  ]);
  const error = departureError(core);
  assert.equal(error.kind, 'DrainAndLeaveTimedOut');
  assert.deepEqual(error.detail, {
    kind: 'DrainAndLeaveTimedOut',
    boundMs: 380,
    shards: ['s1', 's2'],
    leaveAsked: true,
  });
  const text = error.message;
  assert.ok(text.includes('within 380ms') && text.includes('2 shards (s1, s2)'), text);
  assert.ok(text.includes('the node had not confirmed its leave'), text);
  run(core, [
    [420, StopFinished('s1'), [stopped('s1')]],
    [430, StopFinished('s2'), [stopped('s2')]],
  ]);
  assert.ok(core.isIdle() && !core.hasLeft());
});

test('a drain and leave that never reaches the node says so', () => {
  const core = new RegionCore<Msg>(config());
  run(core, [
    [0, DrainAndLeave(100), []],
    [50, Tick, []],
    [100, Tick, []],
  ]);
  const error = departureError(core);
  const text = error.message;
  assert.ok(text.includes('it ran no shard any more, but it had not reached the node to ask to leave'), text);
  assert.ok(error.detail.kind === 'DrainAndLeaveTimedOut' && !error.detail.leaveAsked);
});

/**
 * Three regions' cores, a scripted coordinator and an in-order network:
 * region "a" sends to shard "s" while it moves from "b" to "c".
 */
describe('hand off ordering', () => {
  const REGIONS = ['a', 'b', 'c'] as const;
  type Region = (typeof REGIONS)[number];

  class Sim {
    readonly cores = new Map<Region, RegionCore<Msg>>();
    /** Per receiver: [shard, message] in arrival order. */
    private readonly inboxes = new Map<Region, [string, Msg][]>();
    /** Node → region, in order. */
    private readonly toRegion = new Map<Region, NodeMessage[]>();
    /** Region → node, in order. */
    private readonly toNode: [Region, RegionMessage][] = [];
    private home: Region | undefined = 'b';
    private moving = false;
    private acks = 0;
    private parked: Region[] = [];
    /** Stops the application has not finished yet. */
    private stopping: [Region, string][] = [];
    /** What the applications saw: [region, event]. */
    readonly log: [Region, string][] = [];
    private now = 0;

    constructor() {
      for (const address of REGIONS) {
        const c = config();
        c.registration.address = address;
        c.shardBufferLimit = 100;
        c.totalBufferLimit = 100;
        const core = new RegionCore<Msg>(c);
        const actions = core.connected(0);
        this.cores.set(address, core);
        this.perform(address, actions);
      }
      this.settle();
    }

    private core(region: Region): RegionCore<Msg> {
      const core = this.cores.get(region);
      assert.ok(core !== undefined);
      return core;
    }

    private queue<T>(map: Map<Region, T[]>, region: Region): T[] {
      let queue = map.get(region);
      if (queue === undefined) {
        queue = [];
        map.set(region, queue);
      }
      return queue;
    }

    private perform(region: Region, actions: A[]): void {
      for (const action of actions) {
        switch (action.type) {
          case 'Send':
            this.toNode.push([region, action.message]);
            break;
          case 'Start':
            this.log.push([region, `start ${action.shard}`]);
            break;
          case 'Stop':
            this.stopping.push([region, action.shard]);
            break;
          case 'Deliver':
            this.log.push([region, action.message]);
            break;
          case 'Forward': {
            const to = REGIONS.find((r) => r === action.to);
            assert.ok(to !== undefined, 'a known region');
            this.queue(this.inboxes, to).push([action.shard, action.message]);
            break;
          }
          case 'AbandonStop':
          case 'Reconnect':
            assert.fail(`unexpected ${JSON.stringify(action)}`);
            break;
          case 'Publish':
            break;
        }
      }
    }

    /** The coordinator's side of the protocol, reduced to one shard. */
    private node(from: Region, message: RegionMessage): void {
      const reply = (to: Region, m: NodeMessage): void => {
        this.queue(this.toRegion, to).push(m);
      };
      switch (message.type) {
        case 'Register':
          reply(from, {
            type: 'Registered',
            incarnation: message.incarnation,
            sequence: message.sequence,
            leaseMs: 60_000,
            heartbeatIntervalMs: 10_000,
          });
          break;
        case 'GetShardHome':
          if (this.home !== undefined && !this.moving) {
            reply(from, { type: 'ShardHome', shard: message.shard, home: this.home });
          } else {
            this.parked.push(from);
          }
          break;
        case 'BeginHandOffAck':
          this.acks += 1;
          if (this.acks === REGIONS.length) {
            const owner = this.home;
            assert.ok(owner !== undefined, 'a home');
            reply(owner, { type: 'HandOff', shard: message.shard });
          }
          break;
        case 'ShardStopped': {
          this.home = 'c';
          this.moving = false;
          const parked = this.parked;
          this.parked = [];
          for (const waiting of parked) {
            reply(waiting, { type: 'ShardHome', shard: message.shard, home: 'c' });
          }
          break;
        }
        default:
          assert.fail(`unexpected ${JSON.stringify(message)}`);
      }
    }

    beginHandOff(): void {
      this.moving = true;
      this.acks = 0;
      for (const region of REGIONS) {
        this.queue(this.toRegion, region).push({ type: 'BeginHandOff', shard: 's' });
      }
    }

    /**
     * One step of one region: its inbox first (as the driver drains it
     * before any node message), then one node message.
     */
    stepRegion(region: Region): boolean {
      const inbox = this.queue(this.inboxes, region);
      const inbound = inbox.splice(0, inbox.length);
      let progressed = inbound.length > 0;
      for (const [shard, message] of inbound) {
        this.perform(region, this.core(region).inbound(shard, message, this.now));
      }
      const message = this.queue(this.toRegion, region).shift();
      if (message !== undefined) {
        this.perform(region, this.core(region).onMessage(message, this.now));
        progressed = true;
      }
      return progressed;
    }

    /** The node handles everything sent to it so far. */
    nodeStep(): boolean {
      let progressed = false;
      for (let next = this.toNode.shift(); next !== undefined; next = this.toNode.shift()) {
        this.node(next[0], next[1]);
        progressed = true;
      }
      return progressed;
    }

    /** Runs until nothing moves: node messages, then regions, then stops. */
    settle(): void {
      for (;;) {
        this.now += 1;
        let progressed = this.nodeStep();
        for (const region of REGIONS) {
          progressed = this.stepRegion(region) || progressed;
        }
        const stopping = this.stopping;
        this.stopping = [];
        for (const [region, shard] of stopping) {
          this.log.push([region, `stop ${shard}`]);
          this.perform(region, this.core(region).stopFinished(shard, this.now));
          progressed = true;
        }
        if (!progressed) {
          return;
        }
      }
    }

    send(message: Msg): void {
      this.perform('a', this.core('a').send('s', message, this.now));
    }
  }

  test('one senders messages arrive in order across a hand off', () => {
    const sim = new Sim();
    sim.send('1');
    sim.settle();
    sim.send('2');
    // "3" is in b's inbox when the hand-off begins; "4".."6" are sent after
    // a acknowledged, while the shard stops and moves.
    sim.send('3');
    sim.beginHandOff();
    sim.stepRegion('a');
    sim.send('4');
    sim.settle();
    sim.send('5');
    sim.send('6');
    sim.settle();
    assert.deepEqual(sim.log, [
      ['b', 'start s'],
      ['b', '1'],
      ['b', '2'],
      ['b', '3'],
      ['b', 'stop s'],
      ['c', 'start s'],
      ['c', '4'],
      ['c', '5'],
      ['c', '6'],
    ]);
    assert.deepEqual(sim.cores.get('b')?.running(), []);
    assert.deepEqual(sim.cores.get('c')?.running(), ['s']);
  });

  test('messages sent while the new home does not know it yet keep their order', () => {
    const sim = new Sim();
    sim.send('1');
    sim.settle();
    sim.beginHandOff();
    sim.settle();
    sim.send('2'); // a: buffered, asked
    sim.nodeStep(); // the node answers "c"
    sim.stepRegion('a'); // a forwards "2" to c, which does not know it is the home yet
    sim.send('3'); // straight to c
    sim.stepRegion('c'); // c buffers "2" and "3" and asks
    sim.send('4');
    sim.settle();
    sim.send('5');
    sim.settle();
    assert.deepEqual(sim.log, [
      ['b', 'start s'],
      ['b', '1'],
      ['b', 'stop s'],
      ['c', 'start s'],
      ['c', '2'],
      ['c', '3'],
      ['c', '4'],
      ['c', '5'],
    ]);
  });
});

test('a registered region leaves a node silent for three heartbeats', () => {
  // Registered at 5 ms with heartbeats every 400 ms: 1,200 ms of silence
  // end the session, long before the response timeout (10 s) would.
  const reconnects = (actions: A[]): A[] => actions.filter((a) => a.type === 'Reconnect');
  const core = registeredCore();
  assert.deepEqual(reconnects(core.tick(1_204, () => ({}))), []);
  assert.deepEqual(reconnects(core.tick(1_205, () => ({}))), [
    { type: 'Reconnect', reason: 'the node has been silent for 1200 ms' },
  ]);
});

test('a load report follows each heartbeat and names only shards running here', () => {
  const core = registeredCore();
  run(core, [
    [10, RequestHome('s'), [getHome('s')]],
    [20, home('s', 'a'), started('s')],
    [30, RequestHome('t'), [getHome('t')]],
    [40, home('t', 'b'), [changed('t', 'b')]],
  ]);
  const meter = new LoadMeter();
  meter.record('s', 12.0, 0);
  meter.record('t', 99.0, 0);
  meter.set('u', 5.0, 0);
  const tick = (now: number): A[] => core.tickWithLoad(now, metrics, (runs) => meter.report(now, runs, 10));
  assert.deepEqual(tick(100), [], 'no heartbeat due: the meter is not asked');
  assert.deepEqual(
    tick(405),
    [heartbeat(2)],
    "a window shorter than the protocol's shortest goes on: { windowMs: 405 } is not sent",
  );
  run(core, [[450, ack(2), []]]);
  meter.record('s', 3.0, 500);
  assert.deepEqual(
    tick(1_000),
    [heartbeat(3), sendToNode({ type: 'Load', windowMs: 1_000, shards: [{ shard: 's', load: 15.0 }], rest: 0 })],
    't runs on b and u nowhere: only s is reported',
  );
});

test('shards are taken in the UTF-8 byte order of their ids, as the Rust client takes them', () => {
  // Not a port: UTF-16 order would put "\u{10000}" before "\u{ffff}".
  const core = registeredCore();
  run(core, [
    [10, home('\u{10000}', 'a'), started('\u{10000}')],
    [11, home('\u{ffff}', 'a'), started('\u{ffff}')],
    [12, home('b', 'a'), started('b')],
    [20, Shutdown, [stop('b'), stop('\u{ffff}'), stop('\u{10000}')]],
  ]);
  assert.deepEqual(core.running(), ['b', '\u{ffff}', '\u{10000}']);
});

test('a request home with an invalid shard id throws a RegionError', () => {
  // Not a port: the Rust runner unwraps it; here the error's shape is checked.
  const core = registeredCore();
  assert.throws(
    () => core.requestHome('', 0),
    (error: unknown) => {
      assert.ok(error instanceof RegionError);
      assert.deepEqual(error.detail, { kind: 'InvalidShard', shard: '', reason: 'a shard id is empty' });
      assert.equal(error.message, 'invalid shard id "": a shard id is empty');
      return true;
    },
  );
});
