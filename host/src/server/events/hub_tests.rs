//! The hub's numbering, resumes, terms, its cap on streams and the
//! dropping of streams that read nothing.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::server::events::EventKind;

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
    assert_eq!(refused, Some(TooManyStreams { max: 2 }));
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
