//! Request and reply between regions: [`Parcel`] (what the region routes:
//! a message, or a request with its [`Replier`]), [`Replier`] (answers a
//! request once) and [`AskError`] (why an ask got no answer).
//!
//! ```text
//!  handle.ask(shard, m) ──Parcel::Ask(m, replier)──▶ core (routes it like a send) ──▶ home's Application::answer
//!        ▲                                                                                       │
//!        └──────────────── replier.reply(answer) (in process, or a Reply frame back) ◀───────────┘
//! ```
//!
//! An ask is routed exactly as a send to the same shard (ordered with the
//! sends, buffered across hand-offs, retried after a lost home). Its
//! [`Replier`] answers once: a second answer, or one after the asker gave
//! up, is dropped. A replier dropped unanswered answers
//! [`AskError::Failed`] by itself, so no ask waits for nothing.

use std::fmt;
use std::time::{Duration, Instant};

use super::error::{DeliveryError, SendError};

/// What a region routes to a shard: a message, or a request that wants a reply.
pub enum Parcel<M, R> {
    /// A message ([`RegionHandle::send`](super::RegionHandle::send)).
    Tell(M),
    /// A request ([`RegionHandle::ask`](super::RegionHandle::ask)) and where its answer goes.
    Ask(M, Replier<R>),
}

impl<M, R> Parcel<M, R> {
    /// The message or request.
    pub fn message(&self) -> &M {
        match self {
            Parcel::Tell(message) | Parcel::Ask(message, _) => message,
        }
    }
}

impl<M: fmt::Debug, R> fmt::Debug for Parcel<M, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parcel::Tell(message) => f.debug_tuple("Tell").field(message).finish(),
            Parcel::Ask(message, _) => f.debug_tuple("Ask").field(message).finish_non_exhaustive(),
        }
    }
}

type Answer<R> = Box<dyn FnOnce(Result<R, AskError>) + Send>;

/// The deadline of a request whose timeout the clock cannot add.
const A_YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// Answers one request, once: in process to the asker's waiting call, or
/// over the inter-region wire to the region that carried it here. Dropped
/// unanswered, it answers [`AskError::Failed`].
pub struct Replier<R> {
    shard: String,
    deadline: Instant,
    answer: Option<Answer<R>>,
}

impl<R> Replier<R> {
    /// A replier for a request to `shard` that its asker waits `timeout`
    /// for; `answer` is called once with the outcome.
    pub fn new(shard: &str, timeout: Duration, answer: impl FnOnce(Result<R, AskError>) + Send + 'static) -> Self {
        // A timeout too long for the clock (a peer's u64::MAX) waits a year.
        let now = Instant::now();
        let deadline = now.checked_add(timeout).or_else(|| now.checked_add(A_YEAR)).unwrap_or(now);
        Replier { shard: shard.to_owned(), deadline, answer: Some(Box::new(answer)) }
    }

    /// The shard asked.
    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// How long the asker still waits (zero once it gave up).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Answers the request.
    pub fn reply(mut self, reply: R) {
        if let Some(answer) = self.answer.take() {
            answer(Ok(reply));
        }
    }

    /// Drops the replier without answering (a transport handing the request
    /// back to the peer, which sends it again).
    pub(crate) fn disarm(mut self) {
        self.answer = None;
    }

    /// Answers the request with why it cannot be answered.
    pub fn fail(mut self, error: AskError) {
        if let Some(answer) = self.answer.take() {
            answer(Err(error));
        }
    }
}

impl<R> Drop for Replier<R> {
    fn drop(&mut self) {
        if let Some(answer) = self.answer.take() {
            answer(Err(AskError::Failed {
                shard: self.shard.clone(),
                reason: "the request was dropped unanswered".to_owned(),
            }));
        }
    }
}

impl<R> fmt::Debug for Replier<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replier").field("shard", &self.shard).field("remaining", &self.remaining()).finish()
    }
}

/// Why an [`ask`](super::RegionHandle::ask) got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// The region did not take the request (see [`SendError`]).
    #[error(transparent)]
    Send(#[from] SendError),
    /// No answer came within the timeout. The request may still run at the
    /// home; its answer, if any, is dropped.
    #[error("no answer from shard {shard} within {timeout:?}")]
    Timeout {
        /// The shard asked.
        shard: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The request never reached the shard's home (its forwards kept
    /// failing, the shard was refused, the region stopped).
    #[error(transparent)]
    NotDelivered(#[from] DeliveryError),
    /// The request will not be answered: the shard's home failed it (its
    /// handler returned an error, the shard stopped), or the connection to
    /// the home was lost after the home took it.
    #[error("shard {shard} did not answer: {reason}")]
    Failed {
        /// The shard asked.
        shard: String,
        /// Why.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    type Answers = Arc<Mutex<Vec<Result<u32, AskError>>>>;

    fn recorder() -> (Answers, Replier<u32>) {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let sink = answers.clone();
        let replier = Replier::new("s", Duration::from_secs(5), move |a| sink.lock().unwrap().push(a));
        (answers, replier)
    }

    #[test]
    fn a_timeout_past_the_clocks_range_is_not_a_panic() {
        let replier = Replier::<u32>::new("s", Duration::MAX, |_| {});
        assert!(replier.remaining() > Duration::from_secs(3600));
        replier.disarm();
    }

    #[test]
    fn a_replier_answers_once() {
        let (answers, replier) = recorder();
        replier.reply(7);
        assert_eq!(*answers.lock().unwrap(), [Ok(7)]);
    }

    #[test]
    fn a_replier_dropped_unanswered_fails_the_ask_by_name() {
        let (answers, replier) = recorder();
        drop(replier);
        assert_eq!(
            *answers.lock().unwrap(),
            [Err(AskError::Failed { shard: "s".into(), reason: "the request was dropped unanswered".into() })]
        );
    }

    #[test]
    fn a_failed_replier_answers_its_error_only() {
        let (answers, replier) = recorder();
        replier.fail(AskError::Timeout { shard: "s".into(), timeout: Duration::from_secs(1) });
        assert_eq!(answers.lock().unwrap().len(), 1);
        assert_eq!(answers.lock().unwrap()[0].as_ref().unwrap_err().to_string(), "no answer from shard s within 1s");
    }
}
