//! [`DriverHandle`]: how the async side (REST handlers, region sessions)
//! reaches the driver thread: a bounded tokio channel of [`Input`]s, typed
//! requests with typed replies ([`DriverHandle::ask`]), and the driver's end
//! as a signal ([`DriverHandle::stopped`]) rather than a flag to poll.

use std::sync::Arc;

use arc_swap::ArcSwap;
use shardalloc_proto::protocol::{NodeMessage, RegionMessage};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::progress::Progress;
use super::request::{AdminRequest, Reply};
use super::sessions::SessionId;

/// Most region-session inputs queued for the driver; beyond it sessions wait.
pub const INPUT_QUEUE: usize = 65_536;

/// Most requests (`Input::Request`) one region session may have queued for
/// the driver at once; its reader waits for the driver beyond it.
pub const REQUESTS_IN_FLIGHT: usize = 256;

/// Most admin requests queued for the driver; beyond it REST answers 503.
pub const ADMIN_QUEUE: usize = 1_024;

/// What the driver is fed.
pub enum Input {
    /// A region session passed its handshake.
    SessionOpened {
        /// Its id.
        session: SessionId,
        /// The type it serves.
        entity_type: String,
        /// Where its messages go.
        outbox: mpsc::Sender<NodeMessage>,
    },
    /// A region session's message.
    Region {
        /// From which session.
        session: SessionId,
        /// The message.
        message: RegionMessage,
    },
    /// A region's request that asks for an answer and that one region may
    /// send by the thousand (`GetShardHome`): handled after the turn's
    /// other region messages (heartbeats first), and holding one of its
    /// session's [`REQUESTS_IN_FLIGHT`] permits until the driver has
    /// handled it, so no session fills the driver's queue.
    Request {
        /// From which session.
        session: SessionId,
        /// The message.
        message: RegionMessage,
        /// Released when the driver has handled it.
        permit: tokio::sync::OwnedSemaphorePermit,
    },
    /// A region session ended.
    SessionClosed {
        /// Its id.
        session: SessionId,
    },
    /// An admin request.
    Admin(AdminRequest),
    /// Stop after this turn, telling every session.
    Shutdown,
}

/// The driver is gone (shutting down or failed) or too busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The driver stopped.
    #[error("the node is shutting down")]
    Stopped,
    /// Its input queue is full.
    #[error("the node is overloaded; retry")]
    Busy,
}

/// One driver's channels and its end.
struct Channels {
    tx: mpsc::Sender<Input>,
    admin: mpsc::Sender<AdminRequest>,
    stopped: CancellationToken,
    /// The driver thread's heartbeat (`None` for a detached handle).
    progress: Option<Arc<Progress>>,
}

/// The handle REST handlers and sessions use. Cheap to clone; clones share
/// which driver they reach, and [`DriverHandle::replace`] changes it for
/// all of them (a node that wins a leadership starts a driver, one that
/// loses it is left [`detached`](DriverHandle::detached)).
#[derive(Clone)]
pub struct DriverHandle {
    current: Arc<ArcSwap<Channels>>,
}

impl DriverHandle {
    /// A handle over the session inputs `tx` and the admin requests `admin`,
    /// whose driver cancels `stopped` when it ends and stamps `progress` at
    /// every turn of its loop (`None`: no driver thread).
    pub(super) fn new(
        tx: mpsc::Sender<Input>,
        admin: mpsc::Sender<AdminRequest>,
        stopped: CancellationToken,
        progress: Option<Arc<Progress>>,
    ) -> Self {
        DriverHandle { current: Arc::new(ArcSwap::from_pointee(Channels { tx, admin, stopped, progress })) }
    }

    /// A handle that reaches no driver: every call answers
    /// [`Unavailable::Stopped`] (a follower, or a leader between drivers).
    pub fn detached() -> Self {
        let (tx, _) = mpsc::channel(1);
        let (admin, _) = mpsc::channel(1);
        let stopped = CancellationToken::new();
        stopped.cancel();
        Self::new(tx, admin, stopped, None)
    }

    /// From now on this handle and its clones reach `other`'s driver.
    pub fn replace(&self, other: &DriverHandle) {
        self.current.store(other.current.load_full());
    }

    /// A handle that keeps reaching the driver this one reaches now, even
    /// after a [`replace`](DriverHandle::replace) (a region session belongs
    /// to the driver it was opened with).
    pub fn pinned(&self) -> DriverHandle {
        DriverHandle { current: Arc::new(ArcSwap::new(self.current.load_full())) }
    }

    /// Queues an input without waiting.
    pub fn try_send(&self, input: Input) -> Result<(), Unavailable> {
        self.current.load().tx.try_send(input).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Unavailable::Busy,
            mpsc::error::TrySendError::Closed(_) => Unavailable::Stopped,
        })
    }

    /// Queues an input, waiting while the queue is full.
    pub async fn send(&self, input: Input) -> Result<(), Unavailable> {
        let tx = self.current.load().tx.clone();
        tx.send(input).await.map_err(|_| Unavailable::Stopped)
    }

    /// Asks the driver `request` (made around its reply channel) and waits
    /// for the answer, released once the turn that handled it is committed.
    /// Admin requests have their own queue, behind the regions' messages; a
    /// full one answers [`Unavailable::Busy`] at once.
    pub async fn ask<T>(&self, request: impl FnOnce(Reply<T>) -> AdminRequest) -> Result<T, Unavailable> {
        let (reply, answer) = oneshot::channel();
        self.current.load().admin.try_send(request(reply)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Unavailable::Busy,
            mpsc::error::TrySendError::Closed(_) => Unavailable::Stopped,
        })?;
        answer.await.map_err(|_| Unavailable::Stopped)
    }

    /// Completes when the driver this handle reaches now has ended (shut
    /// down or failed).
    pub async fn stopped(&self) {
        let stopped = self.current.load().stopped.clone();
        stopped.cancelled().await
    }

    /// True once the driver this handle reaches has ended.
    pub fn is_stopped(&self) -> bool {
        self.current.load().stopped.is_cancelled()
    }

    /// The heartbeat of the driver thread this handle reaches now; `None`
    /// when it reaches none ([`detached`](DriverHandle::detached)).
    pub fn progress(&self) -> Option<Arc<Progress>> {
        self.current.load().progress.clone()
    }
}
