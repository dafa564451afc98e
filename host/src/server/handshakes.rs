//! The TLS handshakes under way, bounded in all and per source address: a
//! new connection past a bound evicts the oldest handshake (the source's
//! own when it is that source's bound), so connections that never send a
//! ClientHello cannot keep real clients out, as they could when a
//! connection past the bound was refused instead. Each handshake also has
//! its deadline ([`super::tls::HANDSHAKE_TIMEOUT`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// Most handshakes under way at once.
pub const MAX_HANDSHAKES: usize = 512;

/// Most handshakes under way from one source address: a quarter of all, so
/// one source cannot hold every slot for long.
pub const MAX_HANDSHAKES_PER_SOURCE: usize = MAX_HANDSHAKES / 4;

/// One handshake under way.
struct Pending {
    source: IpAddr,
    task: Option<AbortHandle>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// By when they started (ids grow): the first is the oldest.
    pending: BTreeMap<u64, Pending>,
}

/// The handshakes under way, shared by the accept loop and each handshake's
/// task (which leaves it when done: [`Admitted`]'s drop).
#[derive(Clone)]
pub struct Handshakes {
    inner: Arc<Mutex<Inner>>,
    max: usize,
    per_source: usize,
}

impl Default for Handshakes {
    fn default() -> Self {
        Handshakes::with_bounds(MAX_HANDSHAKES, MAX_HANDSHAKES_PER_SOURCE)
    }
}

/// A handshake's place among those under way; leaving it when dropped.
pub struct Admitted {
    handshakes: Handshakes,
    id: u64,
}

/// Names an [`Admitted`] place after it moved into its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place(u64);

impl Admitted {
    /// Its name, to give it its task with [`Handshakes::started`].
    pub fn place(&self) -> Place {
        Place(self.id)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.handshakes.lock().pending.remove(&self.id);
    }
}

impl Handshakes {
    /// With other bounds (tests).
    pub fn with_bounds(max: usize, per_source: usize) -> Self {
        Handshakes { inner: Arc::default(), max: max.max(1), per_source: per_source.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes room for a handshake from `source`, evicting (aborting) the
    /// oldest of that source's when it is at its bound, else the oldest of
    /// all when every slot is taken; returns its place and how many were
    /// evicted. Give the place its task with [`Handshakes::started`].
    pub fn admit(&self, source: IpAddr) -> (Admitted, usize) {
        let mut inner = self.lock();
        let mut evicted = 0;
        let from_source = inner.pending.values().filter(|p| p.source == source).count();
        if from_source >= self.per_source {
            let oldest = inner.pending.iter().find(|(_, p)| p.source == source).map(|(id, _)| *id);
            evicted += usize::from(oldest.and_then(|id| inner.pending.remove(&id)).map(abort).is_some());
        }
        while inner.pending.len() >= self.max {
            let Some((_, oldest)) = inner.pending.pop_first() else { break };
            abort(oldest);
            evicted += 1;
        }
        let id = inner.next;
        inner.next += 1;
        inner.pending.insert(id, Pending { source, task: None });
        drop(inner);
        (Admitted { handshakes: self.clone(), id }, evicted)
    }

    /// Records the task of an admitted handshake, so an eviction can stop it.
    pub fn started(&self, place: Place, task: AbortHandle) {
        match self.lock().pending.get_mut(&place.0) {
            Some(pending) => pending.task = Some(task),
            // Evicted before it started.
            None => task.abort(),
        }
    }

    /// How many are under way.
    pub fn len(&self) -> usize {
        self.lock().pending.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn abort(pending: Pending) {
    if let Some(task) = pending.task {
        task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test]
    async fn the_oldest_handshake_makes_room_and_its_task_is_stopped() {
        let handshakes = Handshakes::with_bounds(3, 3);
        let mut held = Vec::new();
        let mut tasks = Vec::new();
        for n in 0..3 {
            let (admitted, evicted) = handshakes.admit(ip(n));
            assert_eq!(evicted, 0);
            let task = tokio::spawn(std::future::pending::<()>());
            handshakes.started(admitted.place(), task.abort_handle());
            held.push(admitted);
            tasks.push(task);
        }
        // A fourth evicts the first: its task ends, aborted.
        let (_fourth, evicted) = handshakes.admit(ip(9));
        assert_eq!(evicted, 1);
        assert!(tasks.remove(0).await.unwrap_err().is_cancelled());
        assert_eq!(handshakes.len(), 3);
        // A finished handshake leaves its slot.
        drop(held.pop());
        assert_eq!(handshakes.len(), 2);
    }

    #[tokio::test]
    async fn one_source_is_bounded_apart_from_the_others() {
        let handshakes = Handshakes::with_bounds(10, 2);
        let (_a, _) = handshakes.admit(ip(1));
        let (_other, _) = handshakes.admit(ip(2));
        let (_b, _) = handshakes.admit(ip(1));
        // The source's third evicts its own oldest, not the other source's.
        let (_c, evicted) = handshakes.admit(ip(1));
        assert_eq!(evicted, 1);
        let sources: Vec<IpAddr> = handshakes.lock().pending.values().map(|p| p.source).collect();
        assert_eq!(sources, [ip(2), ip(1), ip(1)]);
    }

    #[tokio::test]
    async fn a_handshake_evicted_before_its_task_started_stops_the_task_at_once() {
        let handshakes = Handshakes::with_bounds(1, 1);
        let (first, _) = handshakes.admit(ip(1));
        let (_second, evicted) = handshakes.admit(ip(2));
        assert_eq!(evicted, 1);
        let task = tokio::spawn(std::future::pending::<()>());
        handshakes.started(first.place(), task.abort_handle());
        assert!(task.await.unwrap_err().is_cancelled());
    }
}
