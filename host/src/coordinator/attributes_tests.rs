//! Shard attributes, step by step (`attributes.rs`).

use shardalloc_proto::attributes::ShardAttributes;

use super::tests::{get, least_shard, register, settle, stopped};
use super::*;

fn attributes(pairs: &[(&str, &str)]) -> ShardAttributes {
    ShardAttributes::new(pairs.iter().copied()).unwrap()
}

fn write(now: Millis, writes: &[(&str, ShardAttributes)]) -> Event {
    let writes = writes.iter().map(|(shard, a)| (shard.to_string(), a.clone())).collect();
    Event::Operator { now, request: now, op: OperatorRequest::SetAttributes { writes } }
}

fn one_region(config: Config) -> Coordinator {
    let mut c = Coordinator::new(config, least_shard()).unwrap();
    settle(&mut c, register(0, "a", 1));
    settle(&mut c, get(1, "a", "s"));
    c
}

#[test]
fn a_write_is_persisted_before_it_is_answered_and_changes_only_what_differs() {
    let mut c = one_region(Config::default());
    let acme = attributes(&[("tenant", "acme")]);
    let out = c.handle(write(10, &[("s", acme.clone()), ("new", ShardAttributes::default())]));
    let set = Change::AttributesSet { shard: "s".into(), attributes: acme.clone() };
    assert_eq!(out, [Command::Persist { batch: 3, changes: vec![set] }]);
    let reply = Reply::AttributesWritten { changed: vec!["s".into()] };
    assert_eq!(c.handle(Event::Persisted { now: 11, batch: 3 }), [Command::Reply { request: 10, reply }]);
    assert_eq!(c.attributes_of("s"), &acme);
    assert!(c.attributes_of("new").is_empty(), "clearing what has none keeps nothing");
    // The same again changes nothing and is answered at once.
    let reply = Reply::AttributesWritten { changed: vec![] };
    assert_eq!(c.handle(write(12, &[("s", acme)])), [Command::Reply { request: 12, reply }]);
    // The empty map clears.
    settle(&mut c, write(13, &[("s", ShardAttributes::default())]));
    assert!(c.durable().attributes.is_empty(), "{:?}", c.durable().attributes);
}

#[test]
fn a_bad_write_is_refused_whole_naming_the_problem() {
    let config = Config { max_shards: 2, ..Config::default() };
    let mut c = one_region(config);
    settle(&mut c, write(5, &[("s", attributes(&[("tenant", "acme")]))]));
    let acme = attributes(&[("tenant", "acme")]);
    let many: Vec<(String, ShardAttributes)> =
        (0..=MAX_ATTRIBUTE_WRITES).map(|i| (format!("s{i}"), acme.clone())).collect();
    let long = "x".repeat(257);
    let cases: Vec<(Vec<(&str, ShardAttributes)>, &str)> = vec![
        (vec![], "no shards named"),
        (vec![("", acme.clone())], "shard 0: a shard id is empty"),
        (vec![(long.as_str(), acme.clone())], "shard 0: a shard id of 257 bytes"),
        (vec![("t", acme.clone()), ("t", acme.clone())], r#"shard 1: "t" is named twice"#),
        (vec![("t", acme.clone()), ("u", acme.clone())], "the type keeps attributes for at most 2 shards (max_shards)"),
    ];
    for (writes, expected) in cases {
        let out = c.handle(write(10, &writes));
        match out.as_slice() {
            [Command::Reply { reply: Reply::AttributesRefused(message), .. }] => {
                assert!(message.contains(expected), "{writes:?}: {message}")
            }
            other => panic!("{writes:?} was not refused: {other:#?}"),
        }
        assert_eq!(c.durable().attributes.len(), 1, "{writes:?} wrote something");
    }
    let op = OperatorRequest::SetAttributes { writes: many };
    let out = c.handle(Event::Operator { now: 11, request: 11, op });
    assert!(
        matches!(&out[..], [Command::Reply { reply: Reply::AttributesRefused(m), .. }] if m.contains("10001 shards named")),
        "{out:#?}"
    );
    // Clearing one and setting another stays within the limit: one shard
    // kept, one new.
    let out = settle(&mut c, write(12, &[("t", acme.clone()), ("s", acme)]));
    assert!(out.iter().any(|c| matches!(c, Command::Reply { reply: Reply::AttributesWritten { .. }, .. })));
}

#[test]
fn attributes_follow_a_shard_through_its_hand_off_and_outlive_its_region() {
    let mut c = one_region(Config::default());
    let acme = attributes(&[("tenant", "acme")]);
    settle(&mut c, write(5, &[("s", acme.clone())]));
    settle(&mut c, register(6, "b", 1));
    settle(&mut c, super::tests::rebalance_now(7, &["s"]));
    settle(&mut c, super::tests::ack(8, "a", "s"));
    settle(&mut c, super::tests::ack(8, "b", "s"));
    settle(&mut c, stopped(9, "a", "s"));
    assert_eq!(c.durable().homes["s"].epoch, 2, "the shard was homed again: {:?}", c.durable().homes);
    assert_eq!(c.attributes_of("s"), &acme);
    let home = c.durable().homes["s"].region.to_string();
    settle(&mut c, Event::Leave { now: 10, address: home.clone(), incarnation: 1 });
    settle(&mut c, super::tests::ack(11, "a", "s"));
    settle(&mut c, super::tests::ack(11, "b", "s"));
    settle(&mut c, stopped(12, &home, "s"));
    assert!(!c.durable().regions.contains_key(&home), "{:?}", c.durable());
    assert_eq!(c.durable().homes["s"].epoch, 3, "{:?}", c.durable().homes);
    assert_eq!(c.attributes_of("s"), &acme, "{:?}", c.durable());
    let (recovered, _) = Coordinator::recover(Config::default(), least_shard(), c.durable().clone(), 13).unwrap();
    assert_eq!(recovered.attributes_of("s"), &acme);
}

#[test]
fn a_regions_offer_is_kept_only_for_a_shard_without_attributes() {
    let mut c = one_region(Config::default());
    let offer = |now, incarnation, shard: &str, pairs: &[(&str, &str)]| Event::ShardAttributesOffered {
        now,
        region: "a".into(),
        incarnation,
        shard: shard.into(),
        attributes: attributes(pairs),
    };
    let acme = attributes(&[("tenant", "acme")]);
    let set = Change::AttributesSet { shard: "s".into(), attributes: acme.clone() };
    assert_eq!(c.handle(offer(5, 1, "s", &[("tenant", "acme")])), [Command::Persist { batch: 3, changes: vec![set] }]);
    settle(&mut c, Event::Persisted { now: 6, batch: 3 });
    // A second offer, another region's or a later one, changes nothing; nor
    // does one of an old incarnation, or an empty one.
    assert_eq!(c.handle(offer(7, 1, "s", &[("tenant", "globex")])), []);
    assert_eq!(c.handle(offer(8, 0, "t", &[("tenant", "globex")])), []);
    assert_eq!(c.handle(offer(9, 1, "t", &[])), []);
    assert_eq!(c.attributes_of("s"), &acme);
    assert!(c.attributes_of("t").is_empty());
    // Past the type's limit the offer is passed over, and said so.
    let mut full = one_region(Config { max_shards: 1, ..Config::default() });
    settle(&mut full, offer(5, 1, "s", &[("tenant", "acme")]));
    let out = full.handle(offer(6, 1, "t", &[("tenant", "acme")]));
    assert!(
        matches!(&out[..], [Command::Observe(Observation::Ignored { what })] if what.contains("at most 1 shards")),
        "{out:#?}"
    );
}
