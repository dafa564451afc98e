//! [`ExpensiveReads`]: how many reads that grow with a type's shards and
//! placements (its snapshot, `GET …/snapshot`) may run at once. Each runs
//! on a blocking thread and copies everything the type holds; eight at once
//! at 1,000,000 placements once starved a two-core node into dropping
//! regions. So: at most [`MAX_EXPENSIVE_READS`] at once; beyond, `429
//! reads-busy` (with `Retry-After`, as every 429). A type's state (`GET
//! /v1/cluster/shards/{type}`) is not one of them: it comes a page of
//! shards at a time, its regions and hand-offs from the live coordinator.
//!
//! A permitted read runs on a thread of its own at the lowest scheduling
//! priority ([`super::low_priority::run`]), reading the store, building the
//! answer and serialising it there: on a busy host (one core for
//! everything) the driver thread and the region sessions get the CPU first,
//! and the tokio workers that serve sessions only copy bytes out.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::api_error::{ApiError, ErrorCode};

/// Most expensive reads at once, over all types.
pub const MAX_EXPENSIVE_READS: usize = 2;

/// The expensive reads under way. See the module documentation.
pub struct ExpensiveReads {
    permits: Arc<Semaphore>,
}

impl Default for ExpensiveReads {
    fn default() -> Self {
        ExpensiveReads { permits: Arc::new(Semaphore::new(MAX_EXPENSIVE_READS)) }
    }
}

impl ExpensiveReads {
    /// A permit for one read of `what`, held while it runs; or 429.
    pub fn start(&self, what: &str) -> Result<OwnedSemaphorePermit, ApiError> {
        self.permits.clone().try_acquire_owned().map_err(|_| {
            ApiError::busy(
                ErrorCode::ReadsBusy,
                format!(
                    "{MAX_EXPENSIVE_READS} reads of a whole type (snapshots) are under way; reading {what} \
                     must wait: retry after the time Retry-After gives"
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;

    use super::*;

    #[test]
    fn reads_past_the_limit_are_refused_until_one_ends() {
        let reads = ExpensiveReads::default();
        let held: Vec<_> = (0..MAX_EXPENSIVE_READS).map(|_| reads.start("cart").unwrap()).collect();
        let refused = reads.start("cart").unwrap_err().into_response();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(refused.headers().contains_key(header::RETRY_AFTER));
        drop(held);
        assert!(reads.start("cart").is_ok());
    }
}
