//! [`DriverHandle`]: how the async side (REST handlers, region sessions)
//! reaches the driver thread: a bounded tokio channel of [`Input`]s, typed
//! requests with typed replies ([`DriverHandle::ask`]), and the driver's end
//! as a signal ([`DriverHandle::stopped`]) rather than a flag to poll.

use shardalloc_client::protocol::{NodeMessage, RegionMessage};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::request::{AdminRequest, Reply};
use super::sessions::SessionId;

/// Most region-session inputs queued for the driver; beyond it sessions wait.
pub const INPUT_QUEUE: usize = 65_536;

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

/// The handle REST handlers and sessions use. Cheap to clone.
#[derive(Clone)]
pub struct DriverHandle {
    tx: mpsc::Sender<Input>,
    admin: mpsc::Sender<AdminRequest>,
    stopped: CancellationToken,
}

impl DriverHandle {
    /// A handle over the session inputs `tx` and the admin requests `admin`,
    /// whose driver cancels `stopped` when it ends.
    pub(super) fn new(tx: mpsc::Sender<Input>, admin: mpsc::Sender<AdminRequest>, stopped: CancellationToken) -> Self {
        DriverHandle { tx, admin, stopped }
    }

    /// Queues an input without waiting.
    pub fn try_send(&self, input: Input) -> Result<(), Unavailable> {
        self.tx.try_send(input).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Unavailable::Busy,
            mpsc::error::TrySendError::Closed(_) => Unavailable::Stopped,
        })
    }

    /// Queues an input, waiting while the queue is full.
    pub async fn send(&self, input: Input) -> Result<(), Unavailable> {
        self.tx.send(input).await.map_err(|_| Unavailable::Stopped)
    }

    /// Asks the driver `request` (made around its reply channel) and waits
    /// for the answer, released once the turn that handled it is committed.
    /// Admin requests have their own queue, behind the regions' messages; a
    /// full one answers [`Unavailable::Busy`] at once.
    pub async fn ask<T>(&self, request: impl FnOnce(Reply<T>) -> AdminRequest) -> Result<T, Unavailable> {
        let (reply, answer) = oneshot::channel();
        self.admin.try_send(request(reply)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Unavailable::Busy,
            mpsc::error::TrySendError::Closed(_) => Unavailable::Stopped,
        })?;
        answer.await.map_err(|_| Unavailable::Stopped)
    }

    /// Completes when the driver thread has ended (shut down or failed).
    pub async fn stopped(&self) {
        self.stopped.cancelled().await
    }

    /// True once the driver thread has ended.
    pub fn is_stopped(&self) -> bool {
        self.stopped.is_cancelled()
    }
}
