//! What one turn of the driver handles, fairly: every region's other
//! messages first (heartbeats, registrations, hand-off steps), then the
//! home lookups round-robin between the sessions that sent them, at most
//! [`REQUESTS_PER_SESSION_PER_TURN`] of one session when several ask; a
//! session's others wait in arrival order for the next turns. A session
//! asking alone is not capped: its lookups share a commit.
//!
//! A turn commits once and releases every answer after that commit, so a
//! lookup's answer waits for the whole turn: a region asking homes by the
//! thousand made every other region's lookup wait for its hundreds of
//! allocations (the third attack: a 60,000-lookup burst held another
//! region's home answer 1.2 s). With the cap, a turn holds at most a few
//! dozen of one session's lookups, whoever else asks. What waits is
//! bounded: each session has at most `REQUESTS_IN_FLIGHT` lookups queued
//! (their permits are held until handled).

use std::collections::{HashMap, VecDeque};

use super::Input;
use super::sessions::SessionId;

/// Most lookups of one session a turn handles.
pub const REQUESTS_PER_SESSION_PER_TURN: usize = 32;

/// The lookups that wait for a later turn.
#[derive(Default)]
pub struct Deferred {
    waiting: VecDeque<Input>,
}

impl Deferred {
    /// True when lookups wait: the next turn is due at once.
    pub fn any(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The turn's inputs from those that `arrived` (in arrival order) and
    /// those that waited (before them): the other messages first, then
    /// the lookups round-robin by session, at most
    /// [`REQUESTS_PER_SESSION_PER_TURN`] of each; the rest wait.
    pub fn turn(&mut self, arrived: Vec<Input>) -> Vec<Input> {
        let inputs: Vec<Input> = self.waiting.drain(..).chain(arrived).collect();
        // One session alone asking is served as fast as it asks: the cap
        // is for sharing a turn.
        let mut asking = inputs.iter().filter_map(|input| match input {
            Input::Request { session, .. } => Some(*session),
            _ => None,
        });
        let first = asking.next();
        let cap = if asking.all(|session| Some(session) == first) { usize::MAX } else { REQUESTS_PER_SESSION_PER_TURN };
        let mut others = Vec::new();
        let mut taken: HashMap<SessionId, usize> = HashMap::new();
        let mut requests: Vec<(usize, Input)> = Vec::new();
        let mut later = VecDeque::new();
        for input in inputs {
            let Input::Request { session, .. } = &input else {
                others.push(input);
                continue;
            };
            let count = taken.entry(*session).or_default();
            if *count < cap {
                requests.push((*count, input));
                *count += 1;
            } else {
                later.push_back(input);
            }
        }
        self.waiting = later;
        // Stable: each round in arrival order.
        requests.sort_by_key(|(round, _)| *round);
        others.extend(requests.into_iter().map(|(_, input)| input));
        others
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shardalloc_proto::protocol::RegionMessage;
    use tokio::sync::Semaphore;

    use super::*;

    fn lookup(session: SessionId, n: usize) -> Input {
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        Input::Request { session, message: RegionMessage::GetShardHome { shard: format!("{session}-{n}") }, permit }
    }

    fn heartbeat(session: SessionId) -> Input {
        Input::Region { session, message: RegionMessage::Heartbeat { sequence: 1, metrics: Default::default() } }
    }

    /// Each input as (session, what): a lookup's shard, or "heartbeat".
    fn shown(inputs: &[Input]) -> Vec<(SessionId, String)> {
        inputs
            .iter()
            .map(|input| match input {
                Input::Request { session, message: RegionMessage::GetShardHome { shard }, .. } => {
                    (*session, shard.clone())
                }
                Input::Region { session, .. } => (*session, "heartbeat".to_owned()),
                _ => unreachable!("only lookups and heartbeats here"),
            })
            .collect()
    }

    #[test]
    fn a_burst_waits_its_turns_and_a_quiet_regions_lookup_goes_in_the_first() {
        let mut deferred = Deferred::default();
        // Session 1 sends 100 lookups, then session 2 one lookup and a heartbeat.
        let mut arrived: Vec<Input> = (0..100).map(|n| lookup(1, n)).collect();
        arrived.push(lookup(2, 0));
        arrived.push(heartbeat(2));
        let turn = shown(&deferred.turn(arrived));
        let cap = REQUESTS_PER_SESSION_PER_TURN;
        assert_eq!(turn.len(), 2 + cap);
        assert_eq!(turn[0], (2, "heartbeat".into()), "the other messages first");
        assert_eq!(turn[1..3], [(1, "1-0".into()), (2, "2-0".into())], "then one lookup of each session");
        assert!(turn[3..].iter().all(|(session, _)| *session == 1));
        assert!(deferred.any());
        // The burst's others come in later turns, in order, before what arrives then,
        // all at once when no other session asks.
        let turn = shown(&deferred.turn(vec![lookup(2, 1)]));
        assert_eq!(turn[0], (1, format!("1-{cap}")));
        assert_eq!(turn[1], (2, "2-1".into()), "a later lookup of another session waits one round, not a burst");
        let rest = shown(&deferred.turn(Vec::new()));
        let expected: Vec<(SessionId, String)> = (2 * cap..100).map(|n| (1, format!("1-{n}"))).collect();
        assert_eq!(rest, expected);
        assert!(!deferred.any());
    }

    #[test]
    fn a_session_asking_alone_is_served_in_one_turn() {
        let mut deferred = Deferred::default();
        let mut arrived: Vec<Input> = (0..100).map(|n| lookup(1, n)).collect();
        arrived.push(heartbeat(2));
        let turn = shown(&deferred.turn(arrived));
        assert_eq!(turn.len(), 101);
        assert_eq!(turn[0], (2, "heartbeat".into()));
        assert!(!deferred.any());
    }
}
