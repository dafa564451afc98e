//! Table-driven tests of [`RegionCore`]: each step is (time, event, the
//! exact actions expected).

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::*;

type Msg = &'static str;
type A = Action<Msg>;

/// Region "a", incarnation 7; small limits so they are easy to reach.
fn config() -> CoreConfig {
    CoreConfig {
        registration: Register {
            address: "a".into(),
            incarnation: 7,
            app_version: "1.0".into(),
            ..Register::default()
        },
        shard_buffer_limit: 3,
        total_buffer_limit: 5,
        stop_deadline_ms: 500,
        home_retry_ms: 1_000,
        response_timeout_ms: 10_000,
    }
}

enum Ev {
    Connected,
    Disconnected,
    Node(NodeMessage),
    Tick,
    Send(&'static str, Msg),
    SendFails(&'static str, Msg, SendError),
    Inbound(&'static str, Msg),
    StopFinished(&'static str),
    ForwardFailed(&'static str, &'static str, Vec<Msg>),
    RequestHome(&'static str),
    Leave,
    Shutdown,
    /// `drain_and_leave` with this bound, in ms.
    DrainAndLeave(Millis),
}

use Ev::*;

fn run(core: &mut RegionCore<Msg>, steps: Vec<(Millis, Ev, Vec<A>)>) {
    for (index, (now, event, expected)) in steps.into_iter().enumerate() {
        let got = match event {
            Connected => core.connected(now),
            Disconnected => core.disconnected(now, "connection reset"),
            Node(message) => core.on_message(message, now),
            Tick => core.tick(now, || BTreeMap::from([("cpu".to_owned(), 0.5)])),
            Send(shard, message) => core.send(shard, message, now).unwrap(),
            SendFails(shard, message, error) => {
                assert_eq!(core.send(shard, message, now).unwrap_err(), error, "step {index} at {now} ms");
                Vec::new()
            }
            Inbound(shard, message) => core.inbound(shard, message, now).unwrap(),
            StopFinished(shard) => core.stop_finished(shard, now),
            ForwardFailed(shard, to, messages) => core.forward_failed(shard, to, messages, now),
            RequestHome(shard) => match core.request_home(shard, now).unwrap() {
                HomeLookup::Known(home) => vec![Action::Publish(Update::HomeChanged { shard: shard.into(), home })],
                HomeLookup::Asked(actions) => actions,
            },
            Leave => core.leave(now),
            Shutdown => core.shutdown(now),
            DrainAndLeave(bound) => core.drain_and_leave(bound, now),
        };
        assert_eq!(got, expected, "step {index} at {now} ms");
    }
}

fn register(sequence: u64) -> A {
    Action::Send(RegionMessage::Register(Register { sequence, ..config().registration }))
}

/// `Registered` with a lease of 1,000 ms and heartbeats every 400 ms.
fn registered(sequence: u64) -> Ev {
    Node(NodeMessage::Registered { incarnation: 7, sequence, lease_ms: 1_000, heartbeat_interval_ms: 400 })
}

fn ack(sequence: u64) -> Ev {
    Node(NodeMessage::HeartbeatAck { incarnation: 7, sequence, lease_ms: 1_000 })
}

fn heartbeat(sequence: u64) -> A {
    Action::Send(RegionMessage::Heartbeat { sequence, metrics: BTreeMap::from([("cpu".to_owned(), 0.5)]) })
}

fn get_home(shard: &str) -> A {
    Action::Send(RegionMessage::GetShardHome { shard: shard.into() })
}

fn home(shard: &str, home: &str) -> Ev {
    Node(NodeMessage::ShardHome { shard: shard.into(), home: home.into() })
}

fn home_at(shard: &str, home: &str, epoch: u64) -> Ev {
    Node(NodeMessage::ShardHomeEpoch { shard: shard.into(), home: home.into(), epoch })
}

fn stop(shard: &str) -> A {
    Action::Stop { shard: shard.into() }
}

fn deliver(shard: &str, message: Msg) -> A {
    Action::Deliver { shard: shard.into(), message }
}

fn forward(to: &str, shard: &str, message: Msg) -> A {
    Action::Forward { to: to.into(), shard: shard.into(), message }
}

fn publish(update: Update) -> A {
    Action::Publish(update)
}

fn started(shard: &str) -> Vec<A> {
    started_at(shard, 0)
}

fn started_at(shard: &str, epoch: u64) -> Vec<A> {
    vec![
        Action::Start { shard: shard.into(), epoch },
        publish(Update::ShardStarted { shard: shard.into(), epoch }),
        publish(Update::HomeChanged { shard: shard.into(), home: "a".into() }),
    ]
}

fn changed(shard: &str, home: &str) -> A {
    publish(Update::HomeChanged { shard: shard.into(), home: home.into() })
}

fn stopped(shard: &str) -> A {
    publish(Update::ShardStopped { shard: shard.into() })
}

/// Connected at 0, registered at 5: lease until 1,000, heartbeats due from 405.
fn registered_core() -> RegionCore<Msg> {
    let mut core = RegionCore::new(config());
    run(
        &mut core,
        vec![
            (0, Connected, vec![register(1)]),
            (5, registered(1), vec![publish(Update::Registered { incarnation: 7 })]),
        ],
    );
    assert_eq!(core.lease_until(), Some(1_000));
    core
}

fn with(mut actions: Vec<A>, more: impl IntoIterator<Item = A>) -> Vec<A> {
    actions.extend(more);
    actions
}

#[test]
fn registration_heartbeats_and_renewal() {
    let mut core = RegionCore::new(config());
    run(
        &mut core,
        vec![
            (0, Tick, vec![]),
            (0, Connected, vec![register(1)]),
            (3, Tick, vec![]),
            (5, registered(1), vec![publish(Update::Registered { incarnation: 7 })]),
            (404, Tick, vec![]),
            (405, Tick, vec![heartbeat(2)]),
            (500, ack(2), vec![]),
            (804, Tick, vec![]),
            (805, Tick, vec![heartbeat(3)]),
        ],
    );
    assert!(core.is_registered());
    assert_eq!(core.lease_until(), Some(1_405), "the ack of heartbeat 2 counts from its send at 405");
}

#[test]
fn the_lease_counts_from_the_acknowledged_heartbeats_send_after_lost_acks() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (405, Tick, vec![heartbeat(2)]),
            (805, Tick, vec![heartbeat(3)]),
            // The acks of 2 arrive late, after 3's: 3 renews from 805;
            // 2 is older than 3 and renews nothing.
            (990, ack(3), vec![]),
            (995, ack(2), vec![]),
        ],
    );
    assert_eq!(core.lease_until(), Some(1_805), "from heartbeat 3's send, not from the ack's arrival at 990");
    // An unknown sequence renews nothing either.
    run(&mut core, vec![(996, ack(99), vec![])]);
    assert_eq!(core.lease_until(), Some(1_805));
}

#[test]
fn a_region_fences_when_its_lease_runs_out_and_not_before() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, Send("s1", "m1"), vec![get_home("s1")]),
            (20, home("s1", "a"), with(started("s1"), [deliver("s1", "m1")])),
            (30, Send("s2", "x"), vec![get_home("s2")]),
            (40, home("s2", "b"), vec![changed("s2", "b"), forward("b", "s2", "x")]),
            // Every ack is lost from here on.
            (405, Tick, vec![heartbeat(2)]),
            (805, Tick, vec![heartbeat(3)]),
            (999, Tick, vec![]),
            (999, Send("s1", "m2"), vec![deliver("s1", "m2")]),
            (1_000, Tick, vec![stop("s1"), publish(Update::Fenced)]),
            // Cached homes are forgotten: both shards buffer, nothing is asked while fenced.
            (1_001, Send("s1", "m3"), vec![]),
            (1_002, Send("s2", "y"), vec![]),
            (1_010, StopFinished("s1"), vec![stopped("s1")]),
        ],
    );
    assert!(core.is_fenced());
    assert_eq!(core.running(), Vec::<String>::new());
    assert_eq!(core.buffered(), 2);
    run(
        &mut core,
        vec![
            // A renewal that still ends in the past (405 + 1,000) does not lift the fence.
            (1_410, ack(2), vec![]),
            (1_420, ack(3), vec![publish(Update::LeaseRegained), get_home("s1"), get_home("s2")]),
            (1_430, home("s1", "a"), with(started("s1"), [deliver("s1", "m3")])),
            (1_440, home("s2", "b"), vec![changed("s2", "b"), forward("b", "s2", "y")]),
        ],
    );
    assert!(!core.is_fenced());
    assert_eq!(core.lease_until(), Some(1_805));
}

#[test]
fn a_lease_running_out_while_disconnected_fences_at_the_next_event() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (20, Disconnected, vec![publish(Update::Disconnected { reason: "connection reset".into() })]),
            (500, Inbound("s1", "m"), vec![deliver("s1", "m")]),
            (1_000, Inbound("s1", "n"), vec![stop("s1"), publish(Update::Fenced)]),
            // ShardHome naming this region while fenced starts nothing.
            (1_001, Connected, vec![register(2)]),
            (1_002, home("s1", "a"), vec![]),
        ],
    );
    assert_eq!(core.buffered(), 1);
}

#[test]
fn messages_buffer_until_the_home_is_known_and_flush_in_order() {
    let mut core = RegionCore::new(config());
    run(
        &mut core,
        vec![
            // Not connected: buffered, asked once registered.
            (0, Send("s1", "1"), vec![]),
            (1, Send("s1", "2"), vec![]),
            (2, Connected, vec![register(1)]),
            (3, Send("s1", "3"), vec![]),
            (5, registered(1), vec![publish(Update::Registered { incarnation: 7 }), get_home("s1")]),
            (
                6,
                home("s1", "b"),
                vec![changed("s1", "b"), forward("b", "s1", "1"), forward("b", "s1", "2"), forward("b", "s1", "3")],
            ),
            (7, Send("s1", "4"), vec![forward("b", "s1", "4")]),
        ],
    );
    assert_eq!(core.buffered(), 0);
}

#[test]
fn a_fence_found_by_a_refused_send_stops_the_shards_at_the_next_call() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home_at("s1", "a", 3), started_at("s1", 3)),
            (20, Send("s2", "1"), vec![get_home("s2")]),
            (20, Send("s2", "2"), vec![]),
            (20, Send("s2", "3"), vec![]),
            // The lease ran out at 1,000: this send finds it, and is refused.
            (1_000, SendFails("s2", "4", SendError::BufferFull { shard: "s2".into(), limit: 3 }), vec![]),
        ],
    );
    assert!(core.is_fenced());
    // The fence's stop was not lost with the refusal: the next call does it first.
    let next = core.stop_finished("none", 1_001);
    assert_eq!(next, vec![stop("s1"), publish(Update::Fenced)]);
    assert!(core.stop_finished("none", 1_002).is_empty(), "done once");
}

#[test]
fn buffers_are_bounded_per_shard_and_in_total() {
    let mut core = RegionCore::new(config());
    run(
        &mut core,
        vec![
            (0, Send("s1", "1"), vec![]),
            (0, Send("s1", "2"), vec![]),
            (0, Send("s1", "3"), vec![]),
            (0, SendFails("s1", "4", SendError::BufferFull { shard: "s1".into(), limit: 3 }), vec![]),
            (0, Send("s2", "1"), vec![]),
            (0, Send("s2", "2"), vec![]),
            (0, SendFails("s3", "1", SendError::TotalBufferFull { limit: 5 }), vec![]),
            (
                0,
                SendFails("", "1", SendError::InvalidShard { shard: "".into(), reason: "a shard id is empty".into() }),
                vec![],
            ),
        ],
    );
    assert_eq!(core.buffered(), 5);
    let long = "x".repeat(257);
    let error = core.send(&long, "1", 0).unwrap_err();
    assert!(error.to_string().contains("257 bytes is longer than 256 bytes"), "{error}");
}

#[test]
fn hand_off_of_a_running_shard_stops_it_before_reporting_shard_stopped() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (
                20,
                Node(NodeMessage::BeginHandOff { shard: "s1".into() }),
                vec![Action::Send(RegionMessage::BeginHandOffAck { shard: "s1".into() })],
            ),
            // From now on local sends wait; the home request is answered when the hand-off ends.
            (21, Send("s1", "late-1"), vec![get_home("s1")]),
            (22, Send("s1", "late-2"), vec![]),
            // A message another region sent before acknowledging is still delivered here.
            (23, Inbound("s1", "early"), vec![deliver("s1", "early")]),
            (30, Node(NodeMessage::HandOff { shard: "s1".into() }), vec![stop("s1")]),
            (
                40,
                StopFinished("s1"),
                vec![Action::Send(RegionMessage::ShardStopped { shard: "s1".into() }), stopped("s1")],
            ),
            (50, home("s1", "b"), vec![changed("s1", "b"), forward("b", "s1", "late-1"), forward("b", "s1", "late-2")]),
        ],
    );
    assert!(core.running().is_empty());
}

#[test]
fn hand_off_of_a_shard_not_running_here_is_reported_at_once() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![(
            10,
            Node(NodeMessage::HandOff { shard: "s9".into() }),
            vec![Action::Send(RegionMessage::ShardStopped { shard: "s9".into() })],
        )],
    );
}

#[test]
fn a_stop_past_its_deadline_is_abandoned_and_reported() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (100, Node(NodeMessage::HandOff { shard: "s1".into() }), vec![stop("s1")]),
            (399, Tick, vec![]),
            (
                600,
                Tick,
                vec![
                    Action::AbandonStop { shard: "s1".into() },
                    Action::Send(RegionMessage::ShardStopped { shard: "s1".into() }),
                    stopped("s1"),
                    heartbeat(2),
                ],
            ),
            // The late report of the abandoned stop changes nothing.
            (700, StopFinished("s1"), vec![]),
        ],
    );
}

#[test]
fn a_hand_off_stop_finishing_while_disconnected_is_reported_after_reregistering() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (20, Send("s2", "m"), vec![get_home("s2")]),
            (30, Node(NodeMessage::HandOff { shard: "s1".into() }), vec![stop("s1")]),
            (40, Disconnected, vec![publish(Update::Disconnected { reason: "connection reset".into() })]),
            (50, StopFinished("s1"), vec![stopped("s1")]),
            // Same incarnation, new sequence; the lost home request is asked again.
            (60, Connected, vec![register(2)]),
            (
                70,
                registered(2),
                vec![
                    publish(Update::Registered { incarnation: 7 }),
                    Action::Send(RegionMessage::ShardStopped { shard: "s1".into() }),
                    get_home("s2"),
                ],
            ),
        ],
    );
    assert_eq!(core.lease_until(), Some(1_060), "renewed from the second registration's send at 60");
}

#[test]
fn not_registered_registers_again_once_with_the_same_incarnation() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, Send("s1", "m"), vec![get_home("s1")]),
            (20, Node(NodeMessage::NotRegistered), vec![register(2)]),
            (21, Node(NodeMessage::NotRegistered), vec![]),
            // An answer to an older registration is not this one's.
            (25, registered(1), vec![]),
            (30, registered(2), vec![publish(Update::Registered { incarnation: 7 }), get_home("s1")]),
        ],
    );
}

#[test]
fn refusals_and_silence_hang_up() {
    let mut core = RegionCore::new(config());
    run(
        &mut core,
        vec![
            (0, Connected, vec![register(1)]),
            (
                5,
                Node(NodeMessage::RegisterRefused { reason: "incarnation 7 is older".into() }),
                vec![
                    publish(Update::Refused { reason: "incarnation 7 is older".into() }),
                    Action::Reconnect { reason: "the node refused the registration: incarnation 7 is older".into() },
                ],
            ),
            (6, Disconnected, vec![publish(Update::Disconnected { reason: "connection reset".into() })]),
            (100, Connected, vec![register(2)]),
            (10_099, Tick, vec![]),
            (10_100, Tick, vec![Action::Reconnect { reason: "the node has been silent for 10000 ms".into() }]),
        ],
    );
    let mut core = registered_core();
    run(
        &mut core,
        vec![(
            50,
            Node(NodeMessage::ShuttingDown),
            vec![Action::Reconnect { reason: "the node is shutting down".into() }],
        )],
    );
}

#[test]
fn unanswered_home_requests_are_repeated() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, Send("s1", "m"), vec![get_home("s1")]),
            (11, Send("s1", "n"), vec![]),
            (405, Tick, vec![heartbeat(2)]),
            (406, ack(2), vec![]),
            (1_009, Tick, vec![heartbeat(3)]),
            (1_010, Tick, vec![get_home("s1")]),
        ],
    );
}

#[test]
fn refused_shards_drop_their_buffer() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, Send("s1", "m"), vec![get_home("s1")]),
            (11, Send("s1", "n"), vec![]),
            (
                20,
                Node(NodeMessage::ShardRefused { shard: "s1".into(), reason: "too many shards".into() }),
                vec![publish(Update::ShardRefused {
                    shard: "s1".into(),
                    reason: "too many shards".into(),
                    dropped: 2,
                })],
            ),
        ],
    );
    assert_eq!(core.buffered(), 0);
}

#[test]
fn home_requests_answer_from_the_cache_or_ask_once() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, RequestHome("s1"), vec![get_home("s1")]),
            (11, RequestHome("s1"), vec![]),
            (20, home("s1", "b"), vec![changed("s1", "b")]),
            // Known: answered from the cache (shown as a HomeChanged by the table runner).
            (30, RequestHome("s1"), vec![changed("s1", "b")]),
        ],
    );
    assert_eq!(core.cached_home("s1"), Some("b"));
}

#[test]
fn messages_from_other_regions_for_shards_not_running_here_are_routed_again() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, Inbound("s1", "m"), vec![get_home("s1")]),
            (20, home("s1", "c"), vec![changed("s1", "c"), forward("c", "s1", "m")]),
            (30, Inbound("s1", "n"), vec![forward("c", "s1", "n")]),
        ],
    );
}

#[test]
fn a_running_shard_homed_elsewhere_is_stopped_without_a_report() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (20, home("s1", "b"), vec![stop("s1"), changed("s1", "b")]),
            (30, Send("s1", "m"), vec![forward("b", "s1", "m")]),
            (40, StopFinished("s1"), vec![stopped("s1")]),
        ],
    );
}

#[test]
fn a_shard_starts_at_the_epoch_the_node_names_and_a_greater_one_stops_the_stale_run() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home_at("s1", "a", 7), started_at("s1", 7)),
            (15, home_at("s1", "a", 7), vec![]),
            (20, home_at("s1", "a", 9), vec![stop("s1")]),
            (40, StopFinished("s1"), vec![stopped("s1")]),
            // The home did not change: the stale run is replaced, not moved.
            (50, home_at("s1", "a", 9), started_at("s1", 9)[..2].to_vec()),
        ],
    );
    assert_eq!(core.epoch_of("s1"), Some(9));
    assert_eq!(core.epoch_of("s2"), None);
    run(&mut core, vec![(60, home_at("s1", "b", 10), vec![stop("s1"), changed("s1", "b")])]);
    assert_eq!(core.epoch_of("s1"), None, "a stopping run has no epoch to write with");
}

#[test]
fn failed_forwards_go_back_to_the_front_of_the_buffer_and_the_home_is_asked_again_later() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "b"), vec![changed("s1", "b")]),
            (20, Send("s1", "1"), vec![forward("b", "s1", "1")]),
            (20, Send("s1", "2"), vec![forward("b", "s1", "2")]),
            (20, ForwardFailed("s1", "b", vec!["1", "2"]), vec![]),
            (30, Send("s1", "3"), vec![]),
            (405, Tick, vec![heartbeat(2)]),
            (406, ack(2), vec![]),
            (1_019, Tick, vec![heartbeat(3)]),
            (1_020, Tick, vec![get_home("s1")]),
            (
                1_030,
                home("s1", "c"),
                vec![changed("s1", "c"), forward("c", "s1", "1"), forward("c", "s1", "2"), forward("c", "s1", "3")],
            ),
        ],
    );
}

#[test]
fn leaving_sends_leave_then_stops_everything_at_leave_done() {
    let mut core = RegionCore::new(config());
    run(
        &mut core,
        vec![
            // Asked before registering: sent after.
            (0, Leave, vec![]),
            (1, Connected, vec![register(1)]),
            (
                5,
                registered(1),
                vec![publish(Update::Registered { incarnation: 7 }), Action::Send(RegionMessage::Leave)],
            ),
            (6, Leave, vec![]),
            (10, home("s1", "a"), started("s1")),
            (20, Node(NodeMessage::LeaveDone), vec![stop("s1"), publish(Update::Left)]),
            (30, Node(NodeMessage::NotRegistered), vec![]),
            (40, StopFinished("s1"), vec![stopped("s1")]),
        ],
    );
    assert!(core.has_left() && core.is_idle());
}

#[test]
fn a_not_registered_overtaking_leave_done_ends_the_leave_too() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (20, Leave, vec![Action::Send(RegionMessage::Leave)]),
            (30, Node(NodeMessage::NotRegistered), vec![stop("s1"), publish(Update::Left)]),
            (40, Node(NodeMessage::LeaveDone), vec![]),
        ],
    );
    assert!(core.has_left());
}

#[test]
fn shutting_down_stops_every_shard_and_starts_none() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (11, home("s2", "a"), started("s2")),
            (20, Shutdown, vec![stop("s1"), stop("s2")]),
            (30, home("s3", "a"), vec![]),
            (40, StopFinished("s1"), vec![stopped("s1")]),
        ],
    );
    assert_eq!(core.running(), ["s2"]);
    run(&mut core, vec![(50, StopFinished("s2"), vec![stopped("s2")])]);
    assert!(core.is_idle());
}

#[test]
fn a_drain_request_is_sent_once_now_or_after_registering() {
    let mut core = RegionCore::new(config());
    assert_eq!(core.request_drain(true, 0), vec![]);
    run(
        &mut core,
        vec![
            (1, Connected, vec![register(1)]),
            (
                5,
                registered(1),
                vec![
                    publish(Update::Registered { incarnation: 7 }),
                    Action::Send(RegionMessage::Drain { draining: true }),
                ],
            ),
        ],
    );
    assert_eq!(core.request_drain(false, 6), vec![Action::Send(RegionMessage::Drain { draining: false })]);
}

fn drain(draining: bool) -> A {
    Action::Send(RegionMessage::Drain { draining })
}

fn hand_off(shard: &str) -> Ev {
    Node(NodeMessage::HandOff { shard: shard.into() })
}

fn shard_stopped(shard: &str) -> A {
    Action::Send(RegionMessage::ShardStopped { shard: shard.into() })
}

#[test]
fn drain_and_leave_drains_hands_off_then_leaves_once_no_shard_runs_here() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (11, home("s2", "a"), started("s2")),
            (20, DrainAndLeave(300), vec![drain(true)]),
            // Asked twice: nothing more.
            (21, DrainAndLeave(300), vec![]),
            (30, hand_off("s1"), vec![stop("s1")]),
            (40, StopFinished("s1"), vec![shard_stopped("s1"), stopped("s1")]),
            // s2 still runs: no leave yet.
            (50, Tick, vec![]),
            (60, hand_off("s2"), vec![stop("s2")]),
            // The last shard stopped: leave at once.
            (70, StopFinished("s2"), vec![shard_stopped("s2"), stopped("s2"), Action::Send(RegionMessage::Leave)]),
            (80, Tick, vec![]),
        ],
    );
    assert_eq!(core.departure(), None, "not done before the node lets the region go");
    run(&mut core, vec![(90, Node(NodeMessage::LeaveDone), vec![publish(Update::Left)])]);
    assert_eq!(core.departure(), Some(&Ok(())));
    assert!(core.has_left() && core.is_idle());
    // Nothing happens past the bound once done.
    run(&mut core, vec![(390, Tick, vec![])]);
    assert_eq!(core.departure(), Some(&Ok(())));
}

#[test]
fn drain_and_leave_asked_before_registering_drains_and_leaves_after() {
    let mut core = RegionCore::new(config());
    run(
        &mut core,
        vec![
            (0, DrainAndLeave(900), vec![]),
            (1, Connected, vec![register(1)]),
            // Nothing runs here: the drain and the leave go out together.
            (
                5,
                registered(1),
                vec![publish(Update::Registered { incarnation: 7 }), drain(true), Action::Send(RegionMessage::Leave)],
            ),
            // The node removes the region before LeaveDone is on disk.
            (10, Node(NodeMessage::NotRegistered), vec![publish(Update::Left)]),
        ],
    );
    assert_eq!(core.departure(), Some(&Ok(())));
}

#[test]
fn a_stalled_drain_leaves_at_half_the_bound() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (20, DrainAndLeave(380), vec![drain(true)]),
            // No other region takes s1: nothing moves.
            (209, Tick, vec![]),
            (210, Tick, vec![Action::Send(RegionMessage::Leave)]),
            // The node lets the region go (no region can take s1).
            (220, Node(NodeMessage::LeaveDone), vec![stop("s1"), publish(Update::Left)]),
        ],
    );
    assert_eq!(core.departure(), Some(&Ok(())));
    assert!(!core.is_idle(), "s1 is still stopping");
    run(&mut core, vec![(230, StopFinished("s1"), vec![stopped("s1")])]);
    assert!(core.is_idle());
}

#[test]
fn past_its_bound_drain_and_leave_stops_what_runs_undrains_and_names_what_was_left() {
    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, home("s1", "a"), started("s1")),
            (11, home("s2", "a"), started("s2")),
            (20, DrainAndLeave(380), vec![drain(true)]),
            (210, Tick, vec![Action::Send(RegionMessage::Leave)]),
            (399, Tick, vec![]),
            // No LeaveDone by the bound: give up.
            (400, Tick, vec![drain(false), stop("s1"), stop("s2")]),
            // Nothing starts any more.
            (410, home("s3", "a"), vec![]),
        ],
    );
    let Some(Err(error)) = core.departure() else { panic!("no outcome: {:?}", core.departure()) };
    assert_eq!(
        *error,
        RegionError::DrainAndLeaveTimedOut {
            bound: std::time::Duration::from_millis(380),
            shards: vec!["s1".into(), "s2".into()],
            leave_asked: true,
        }
    );
    let text = error.to_string();
    assert!(text.contains("within 380ms") && text.contains("2 shards (s1, s2)"), "{text}");
    assert!(text.contains("the node had not confirmed its leave"), "{text}");
    run(
        &mut core,
        vec![(420, StopFinished("s1"), vec![stopped("s1")]), (430, StopFinished("s2"), vec![stopped("s2")])],
    );
    assert!(core.is_idle() && !core.has_left());
}

#[test]
fn a_drain_and_leave_that_never_reaches_the_node_says_so() {
    let mut core = RegionCore::new(config());
    run(&mut core, vec![(0, DrainAndLeave(100), vec![]), (50, Tick, vec![]), (100, Tick, vec![])]);
    let Some(Err(error)) = core.departure() else { panic!("no outcome: {:?}", core.departure()) };
    let text = error.to_string();
    assert!(text.contains("it ran no shard any more, but it had not reached the node to ask to leave"), "{text}");
    assert!(matches!(error, RegionError::DrainAndLeaveTimedOut { leave_asked: false, .. }));
}

/// Three regions' cores, a scripted coordinator and an in-order network:
/// region "a" sends to shard "s" while it moves from "b" to "c".
mod hand_off_ordering {
    use super::*;

    struct Sim {
        cores: BTreeMap<&'static str, RegionCore<Msg>>,
        /// Per receiver: (shard, message) in arrival order.
        inboxes: HashMap<&'static str, VecDeque<(String, Msg)>>,
        /// Node → region, in order.
        to_region: HashMap<&'static str, VecDeque<NodeMessage>>,
        /// Region → node, in order.
        to_node: VecDeque<(&'static str, RegionMessage)>,
        home: Option<&'static str>,
        moving: bool,
        acks: usize,
        parked: Vec<&'static str>,
        /// Stops the application has not finished yet.
        stopping: Vec<(&'static str, String)>,
        /// What the applications saw: (region, event).
        log: Vec<(&'static str, String)>,
        now: Millis,
    }

    const REGIONS: [&str; 3] = ["a", "b", "c"];

    impl Sim {
        fn new() -> Self {
            let mut sim = Sim {
                cores: BTreeMap::new(),
                inboxes: HashMap::new(),
                to_region: HashMap::new(),
                to_node: VecDeque::new(),
                home: Some("b"),
                moving: false,
                acks: 0,
                parked: Vec::new(),
                stopping: Vec::new(),
                log: Vec::new(),
                now: 0,
            };
            for address in REGIONS {
                let mut config = config();
                config.registration.address = address.into();
                config.shard_buffer_limit = 100;
                config.total_buffer_limit = 100;
                let mut core = RegionCore::new(config);
                let actions = core.connected(0);
                sim.cores.insert(address, core);
                sim.perform(address, actions);
            }
            sim.settle();
            sim
        }

        fn perform(&mut self, region: &'static str, actions: Vec<A>) {
            for action in actions {
                match action {
                    Action::Send(message) => self.to_node.push_back((region, message)),
                    Action::Start { shard, .. } => self.log.push((region, format!("start {shard}"))),
                    Action::Stop { shard } => self.stopping.push((region, shard)),
                    Action::Deliver { message, .. } => self.log.push((region, message.to_owned())),
                    Action::Forward { to, shard, message } => {
                        let to = REGIONS.into_iter().find(|r| *r == to).expect("a known region");
                        self.inboxes.entry(to).or_default().push_back((shard, message));
                    }
                    Action::AbandonStop { .. } | Action::Reconnect { .. } => panic!("unexpected {action:?}"),
                    Action::Publish(_) => {}
                }
            }
        }

        /// The coordinator's side of the protocol, reduced to one shard.
        fn node(&mut self, from: &'static str, message: RegionMessage) {
            let mut reply = |to: &'static str, m: NodeMessage| self.to_region.entry(to).or_default().push_back(m);
            match message {
                RegionMessage::Register(r) => reply(
                    from,
                    NodeMessage::Registered {
                        incarnation: r.incarnation,
                        sequence: r.sequence,
                        lease_ms: 60_000,
                        heartbeat_interval_ms: 10_000,
                    },
                ),
                RegionMessage::GetShardHome { shard } => match self.home {
                    Some(home) if !self.moving => reply(from, NodeMessage::ShardHome { shard, home: home.into() }),
                    _ => self.parked.push(from),
                },
                RegionMessage::BeginHandOffAck { shard } => {
                    self.acks += 1;
                    if self.acks == REGIONS.len() {
                        let owner = self.home.expect("a home");
                        reply(owner, NodeMessage::HandOff { shard });
                    }
                }
                RegionMessage::ShardStopped { shard } => {
                    self.home = Some("c");
                    self.moving = false;
                    for waiting in std::mem::take(&mut self.parked) {
                        reply(waiting, NodeMessage::ShardHome { shard: shard.clone(), home: "c".into() });
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }

        fn begin_hand_off(&mut self) {
            self.moving = true;
            self.acks = 0;
            for region in REGIONS {
                self.to_region.entry(region).or_default().push_back(NodeMessage::BeginHandOff { shard: "s".into() });
            }
        }

        /// One step of one region: its inbox first (as the driver drains it
        /// before any node message), then one node message.
        fn step_region(&mut self, region: &'static str) -> bool {
            let inbound: Vec<(String, Msg)> = self.inboxes.entry(region).or_default().drain(..).collect();
            let mut progressed = !inbound.is_empty();
            for (shard, message) in inbound {
                let actions = self.cores.get_mut(region).unwrap().inbound(&shard, message, self.now).unwrap();
                self.perform(region, actions);
            }
            if let Some(message) = self.to_region.entry(region).or_default().pop_front() {
                let actions = self.cores.get_mut(region).unwrap().on_message(message, self.now);
                self.perform(region, actions);
                progressed = true;
            }
            progressed
        }

        /// The node handles everything sent to it so far.
        fn node_step(&mut self) -> bool {
            let mut progressed = false;
            while let Some((from, message)) = self.to_node.pop_front() {
                self.node(from, message);
                progressed = true;
            }
            progressed
        }

        /// Runs until nothing moves: node messages, then regions, then stops.
        fn settle(&mut self) {
            loop {
                self.now += 1;
                let mut progressed = self.node_step();
                for region in REGIONS {
                    progressed |= self.step_region(region);
                }
                for (region, shard) in std::mem::take(&mut self.stopping) {
                    self.log.push((region, format!("stop {shard}")));
                    let actions = self.cores.get_mut(region).unwrap().stop_finished(&shard, self.now);
                    self.perform(region, actions);
                    progressed = true;
                }
                if !progressed {
                    return;
                }
            }
        }

        fn send(&mut self, message: Msg) {
            let actions = self.cores.get_mut("a").unwrap().send("s", message, self.now).unwrap();
            self.perform("a", actions);
        }
    }

    #[test]
    fn one_senders_messages_arrive_in_order_across_a_hand_off() {
        let mut sim = Sim::new();
        sim.send("1");
        sim.settle();
        sim.send("2");
        // "3" is in b's inbox when the hand-off begins; "4".."6" are sent
        // after a acknowledged, while the shard stops and moves.
        sim.send("3");
        sim.begin_hand_off();
        sim.step_region("a");
        sim.send("4");
        sim.settle();
        sim.send("5");
        sim.send("6");
        sim.settle();
        let expected = [
            ("b", "start s"),
            ("b", "1"),
            ("b", "2"),
            ("b", "3"),
            ("b", "stop s"),
            ("c", "start s"),
            ("c", "4"),
            ("c", "5"),
            ("c", "6"),
        ];
        let log: Vec<(&str, &str)> = sim.log.iter().map(|(r, e)| (*r, e.as_str())).collect();
        assert_eq!(log, expected);
        assert_eq!(sim.cores["b"].running(), Vec::<String>::new());
        assert_eq!(sim.cores["c"].running(), ["s"]);
    }

    #[test]
    fn messages_sent_while_the_new_home_does_not_know_it_yet_keep_their_order() {
        let mut sim = Sim::new();
        sim.send("1");
        sim.settle();
        sim.begin_hand_off();
        sim.settle();
        sim.send("2"); // a: buffered, asked
        sim.node_step(); // the node answers "c"
        sim.step_region("a"); // a forwards "2" to c, which does not know it is the home yet
        sim.send("3"); // straight to c
        sim.step_region("c"); // c buffers "2" and "3" and asks
        sim.send("4");
        sim.settle();
        sim.send("5");
        sim.settle();
        let log: Vec<(&str, &str)> = sim.log.iter().map(|(r, e)| (*r, e.as_str())).collect();
        assert_eq!(
            log,
            [
                ("b", "start s"),
                ("b", "1"),
                ("b", "stop s"),
                ("c", "start s"),
                ("c", "2"),
                ("c", "3"),
                ("c", "4"),
                ("c", "5")
            ]
        );
    }
}

#[test]
fn a_registered_region_leaves_a_node_silent_for_three_heartbeats() {
    // Registered at 5 ms with heartbeats every 400 ms: 1,200 ms of silence
    // end the session, long before the response timeout (10 s) would.
    let reconnects =
        |actions: Vec<A>| actions.into_iter().filter(|a| matches!(a, Action::Reconnect { .. })).collect::<Vec<_>>();
    let mut core = registered_core();
    assert_eq!(reconnects(core.tick(1_204, BTreeMap::new)), vec![]);
    assert_eq!(
        reconnects(core.tick(1_205, BTreeMap::new)),
        vec![Action::Reconnect { reason: "the node has been silent for 1200 ms".into() }]
    );
}

#[test]
fn a_load_report_follows_each_heartbeat_and_names_only_shards_running_here() {
    use crate::protocol::{LoadReport, ShardLoad};
    use crate::region::load::LoadMeter;

    let mut core = registered_core();
    run(
        &mut core,
        vec![
            (10, RequestHome("s"), vec![get_home("s")]),
            (20, home("s", "a"), started("s")),
            (30, RequestHome("t"), vec![get_home("t")]),
            (40, home("t", "b"), vec![changed("t", "b")]),
        ],
    );
    let mut meter = LoadMeter::default();
    meter.record("s", 12.0, 0);
    meter.record("t", 99.0, 0);
    meter.set("u", 5.0, 0);
    let metrics = || BTreeMap::from([("cpu".to_owned(), 0.5)]);
    let tick = |core: &mut RegionCore<Msg>, now, meter: &mut LoadMeter| {
        core.tick_with_load(now, metrics, |runs| meter.report(now, runs, 10))
    };
    assert_eq!(tick(&mut core, 100, &mut meter), vec![], "no heartbeat due: the meter is not asked");
    let report = LoadReport { window_ms: 405, shards: vec![], rest: 0.0 };
    assert_eq!(
        tick(&mut core, 405, &mut meter),
        vec![heartbeat(2)],
        "a window shorter than the protocol's shortest goes on: {report:?} is not sent"
    );
    run(&mut core, vec![(450, ack(2), vec![])]);
    meter.record("s", 3.0, 500);
    assert_eq!(
        tick(&mut core, 1_000, &mut meter),
        vec![
            heartbeat(3),
            Action::Send(RegionMessage::Load(LoadReport {
                window_ms: 1_000,
                shards: vec![ShardLoad { shard: "s".into(), load: 15.0 }],
                rest: 0.0,
            })),
        ],
        "t runs on b and u nowhere: only s is reported"
    );
}
