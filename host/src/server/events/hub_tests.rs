//! The hub's numbering, resumes, terms, its cap on streams, its replay
//! permits and their deadline, the frames it keeps and the dropping of
//! streams that read nothing.

use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::server::events::{Delivery, EventKind};

fn homed(shard: &str) -> DecisionEvent {
    DecisionEvent { shard_id: Some(shard.into()), ..DecisionEvent::new(EventKind::ShardHomed, "cart", 1) }
}

fn shard(delivery: Option<Delivery>) -> String {
    match delivery {
        Some(Delivery::Event(event)) => format!("{}:{}", event.seq, event.shard_id.as_deref().unwrap()),
        other => format!("{other:?}"),
    }
}

fn subscribe(hub: &Arc<EventHub>, start: Start) -> Subscription {
    hub.subscribe(start, usize::MAX, CancellationToken::new()).expect("no cap")
}

async fn next(subscription: &mut Subscription) -> Option<Delivery> {
    tokio::time::timeout(Duration::from_secs(30), subscription.next()).await.expect("a delivery in time")
}

#[tokio::test]
async fn events_are_numbered_in_order_and_streams_start_where_asked() {
    let hub = Arc::new(EventHub::new(10));
    hub.begin_term(3);
    hub.publish(vec![homed("a"), homed("b")]);
    let mut now = subscribe(&hub, Start::Now);
    let mut oldest = subscribe(&hub, Start::Oldest);
    let mut resumed = subscribe(&hub, Start::After { term: 3, seq: 1 });
    assert!(now.caught_up() && !oldest.caught_up() && !resumed.caught_up());
    hub.publish(vec![homed("c")]);
    assert_eq!(shard(next(&mut now).await), "3:c");
    assert_eq!(shard(next(&mut oldest).await), "1:a");
    assert_eq!(shard(next(&mut oldest).await), "2:b");
    assert_eq!(shard(next(&mut oldest).await), "3:c");
    assert_eq!(shard(next(&mut resumed).await), "2:b");
    assert_eq!(now.term(), 3);
}

#[tokio::test]
async fn a_stream_that_falls_behind_the_backlog_is_told_what_it_missed() {
    let hub = Arc::new(EventHub::new(4));
    hub.begin_term(1);
    let mut slow = subscribe(&hub, Start::Now);
    hub.publish((0..10).map(|i| homed(&i.to_string())).collect());
    assert_eq!(next(&mut slow).await, Some(Delivery::Missed(6)));
    assert_eq!(shard(next(&mut slow).await), "7:6");
    let mut old = subscribe(&hub, Start::After { term: 1, seq: 2 });
    assert_eq!(next(&mut old).await, Some(Delivery::Missed(4)), "events 3 to 6 are gone");
}

#[tokio::test]
async fn another_terms_resume_is_a_loss_of_unknown_size_and_a_new_term_ends_streams() {
    let hub = Arc::new(EventHub::new(4));
    hub.begin_term(7);
    hub.publish(vec![homed("a")]);
    let mut stale = subscribe(&hub, Start::After { term: 5, seq: 99 });
    assert_eq!(next(&mut stale).await, Some(Delivery::Missed(0)));
    assert_eq!(shard(next(&mut stale).await), "1:a");
    let mut live = subscribe(&hub, Start::Now);
    hub.end_term(6);
    hub.publish(vec![homed("b")]);
    assert_eq!(shard(next(&mut live).await), "2:b", "ending another term changes nothing");
    hub.end_term(7);
    assert_eq!(next(&mut live).await, None);
    let mut before = subscribe(&hub, Start::Now);
    hub.begin_term(8);
    assert_eq!(next(&mut before).await, None, "a new term ends the old term's streams");
}

#[tokio::test]
async fn streams_past_the_cap_are_refused_until_one_ends() {
    let hub = Arc::new(EventHub::new(4));
    hub.begin_term(1);
    let first = hub.subscribe(Start::Now, 2, CancellationToken::new()).expect("one");
    let _second = hub.subscribe(Start::Oldest, 2, CancellationToken::new()).expect("two");
    let refused = hub.subscribe(Start::Now, 2, CancellationToken::new()).err();
    assert_eq!(refused, Some(Refused::TooManyStreams { max: 2 }));
    drop(first);
    assert!(hub.subscribe(Start::Now, 2, CancellationToken::new()).is_ok(), "an ended stream frees its place");
}

#[tokio::test]
async fn a_stream_that_takes_nothing_while_a_backlog_is_published_is_dropped() {
    let hub = Arc::new(EventHub::new(4));
    hub.begin_term(1);
    let (close, reading_close) = (CancellationToken::new(), CancellationToken::new());
    let mut idle = hub.subscribe(Start::Now, 8, close.clone()).unwrap();
    let mut reading = hub.subscribe(Start::Now, 8, reading_close.clone()).unwrap();
    // A burst bigger than the backlog, to a stream that was caught up, is
    // not held against it: it gets the chance to read.
    hub.publish((0..6).map(|i| homed(&i.to_string())).collect());
    assert!(!close.is_cancelled());
    for round in 0..4 {
        assert!(next(&mut reading).await.is_some(), "round {round}");
        while !reading.caught_up() {
            next(&mut reading).await;
        }
        hub.publish(vec![homed(&format!("r{round}"))]);
        assert!(!reading_close.is_cancelled(), "a stream that reads is kept");
    }
    assert!(close.is_cancelled(), "four events published while the idle stream took none of those waiting");
    assert_eq!(next(&mut idle).await, None, "a dropped stream ends");
    assert!(hub.subscribe(Start::Now, 1, CancellationToken::new()).is_err(), "the reading stream still counts");
}

#[tokio::test]
async fn streams_that_start_far_behind_need_a_replay_permit_until_they_reach_the_newest() {
    let hub = Arc::new(EventHub::with_replays(100, 2, 5, REPLAY_DEADLINE));
    hub.begin_term(1);
    hub.publish((0..20).map(|i| homed(&i.to_string())).collect());
    let mut first = subscribe(&hub, Start::Oldest);
    let second = subscribe(&hub, Start::After { term: 1, seq: 3 });
    assert!(first.replaying() && second.replaying());
    let busy = Refused::ReplaysBusy { max: 2, behind: 20, free: 5 };
    assert_eq!(hub.subscribe(Start::Oldest, usize::MAX, CancellationToken::new()).err(), Some(busy));
    assert_eq!(
        hub.subscribe(Start::After { term: 9, seq: 1 }, usize::MAX, CancellationToken::new()).err(),
        Some(busy),
        "another term's resume replays everything kept"
    );
    assert!(busy.to_string().contains("2 event streams are replaying"), "{busy}");
    // Near the newest, or from now: no permit needed.
    let near = subscribe(&hub, Start::After { term: 1, seq: 15 });
    let now = subscribe(&hub, Start::Now);
    assert!(!near.replaying() && !now.replaying());
    // The permit is held until the newest is read, then given back.
    for _ in 0..19 {
        next(&mut first).await;
    }
    assert!(first.replaying());
    next(&mut first).await;
    assert!(first.caught_up() && !first.replaying());
    let third = subscribe(&hub, Start::Oldest);
    assert!(third.replaying());
    // An ended stream gives its permit back too.
    drop(second);
    assert!(subscribe(&hub, Start::Oldest).replaying());
}

#[tokio::test]
async fn frames_come_many_at_once_within_the_budget_and_filtered() {
    let hub = Arc::new(EventHub::new(4));
    hub.begin_term(2);
    let mut other = DecisionEvent::new(EventKind::ShardHomed, "user", 1);
    other.shard_id = Some("u".into());
    hub.publish(vec![homed("a"), homed("b"), homed("c"), other, homed("d"), homed("e")]);
    let mut all = subscribe(&hub, Start::After { term: 2, seq: 0 });
    let text = |bytes: Bytes| String::from_utf8(bytes.to_vec()).unwrap();
    let missed = text(all.next_frames(None, usize::MAX).await.unwrap());
    assert!(missed.starts_with("data: {") && missed.contains(r#""missed":2"#), "{missed}");
    let ids: Vec<&str> = missed.lines().filter_map(|line| line.strip_prefix("id: ")).collect();
    assert_eq!(ids, ["2-3", "2-4", "2-5", "2-6"], "the loss, then every event kept in one chunk");
    assert!(all.caught_up());

    let mut one_by_one = subscribe(&hub, Start::Oldest);
    let first = text(one_by_one.next_frames(None, 1).await.unwrap());
    assert!(first.starts_with("id: 2-3\ndata: {") && first.ends_with("}\n\n"), "at least one event: {first}");
    let mut carts = subscribe(&hub, Start::Oldest);
    let cart = text(carts.next_frames(Some("cart"), usize::MAX).await.unwrap());
    assert_eq!(cart.matches("id: ").count(), 3, "the user event is skipped: {cart}");
    assert!(carts.caught_up());
}

#[tokio::test]
async fn replays_unread_past_their_deadline_are_ended_and_their_permits_given_to_new_ones() {
    // A quiet node: nothing is published after the replays start. What
    // must happen before the deadline happens within milliseconds; 2 s
    // leaves a busy machine room to be slow.
    let deadline = Duration::from_secs(2);
    let hub = Arc::new(EventHub::with_replays(100, 2, 5, deadline));
    hub.begin_term(1);
    hub.publish((0..20).map(|i| homed(&i.to_string())).collect());
    let replay = |close: &CancellationToken| hub.subscribe(Start::Oldest, usize::MAX, close.clone());
    let closes = [CancellationToken::new(), CancellationToken::new()];
    let mut held: Vec<Subscription> = closes.iter().map(|close| replay(close).expect("a permit")).collect();
    let busy = Refused::ReplaysBusy { max: 2, behind: 20, free: 5 };
    assert_eq!(replay(&CancellationToken::new()).err(), Some(busy), "both permits are held, unread");
    assert!(!closes[0].is_cancelled() && held[0].replaying(), "a refusal ends no replay before its deadline");

    tokio::time::sleep(deadline + Duration::from_millis(50)).await;
    let mut late = replay(&CancellationToken::new()).expect("the replays past their deadline are ended for it");
    assert!(closes.iter().all(CancellationToken::is_cancelled), "their connections are closed");
    for held in &mut held {
        assert!(!held.replaying());
        assert_eq!(next(held).await, None, "an ended replay ends");
    }
    let read = replay(&CancellationToken::new()).expect("every overdue permit was given back");
    assert_eq!(replay(&CancellationToken::new()).err(), Some(busy));

    // Past the deadline again: a publish ends a replay still unread, and a
    // stream polled past it ends itself; one read to the newest is kept.
    drop(read);
    let mut reading = replay(&CancellationToken::new()).expect("an ended stream gives its permit back");
    while !reading.caught_up() {
        next(&mut reading).await;
    }
    let unread = CancellationToken::new();
    let _unread = replay(&unread).expect("a stream at the newest gives its permit back");
    tokio::time::sleep(deadline + Duration::from_millis(50)).await;
    assert_eq!(next(&mut late).await, None, "a replay polled past its deadline ends");
    assert!(!late.replaying());
    hub.publish(vec![homed("news")]);
    assert!(unread.is_cancelled(), "a publish ends an unread replay past its deadline");
    assert_eq!(shard(next(&mut reading).await), "21:news", "a stream that reached the newest is no replay");
}
