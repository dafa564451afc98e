//! [`DryRuns`]: how many dry runs may run at once. A dry run compiles
//! nothing but calls a candidate up to thousands of times on a blocking
//! thread; sixteen at once once starved the node's two cores. So: one at a
//! time per type, [`MAX_DRY_RUNS`] in all (beyond: 429), each within
//! [`DRY_RUN_DEADLINE`]. What-if plans (`rest/plan.rs`) run under the
//! same limits, counted with the dry runs.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::api_error::{ApiError, ErrorCode};

/// Most dry runs at once, over all types.
pub const MAX_DRY_RUNS: usize = 2;
/// How long one dry run may take.
pub const DRY_RUN_DEADLINE: Duration = Duration::from_secs(30);

/// The dry runs under way. See the module documentation.
pub struct DryRuns {
    all: Arc<Semaphore>,
    types: Arc<Mutex<BTreeSet<String>>>,
}

impl Default for DryRuns {
    fn default() -> Self {
        DryRuns { all: Arc::new(Semaphore::new(MAX_DRY_RUNS)), types: Arc::default() }
    }
}

/// Held while a dry run runs.
pub struct DryRunSlot {
    _permit: OwnedSemaphorePermit,
    types: Arc<Mutex<BTreeSet<String>>>,
    entity_type: String,
}

impl Drop for DryRunSlot {
    fn drop(&mut self) {
        self.types.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.entity_type);
    }
}

impl DryRuns {
    /// A slot for a dry run on `entity_type`, or 429 naming why not.
    pub fn start(&self, entity_type: &str) -> Result<DryRunSlot, ApiError> {
        let mut types = self.types.lock().unwrap_or_else(PoisonError::into_inner);
        if types.contains(entity_type) {
            return Err(ApiError::busy(
                ErrorCode::DryRunBusy,
                format!("a dry run or plan of {entity_type} is under way; one at a time per type"),
            ));
        }
        let permit = self.all.clone().try_acquire_owned().map_err(|_| {
            ApiError::busy(
                ErrorCode::DryRunBusy,
                format!("{MAX_DRY_RUNS} dry runs and plans are under way, the most at once; retry when one ends"),
            )
        })?;
        types.insert(entity_type.to_owned());
        Ok(DryRunSlot { _permit: permit, types: self.types.clone(), entity_type: entity_type.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn one_per_type_and_a_bounded_number_in_all() {
        let runs = DryRuns::default();
        let a = runs.start("a").unwrap();
        assert_eq!(runs.start("a").err().unwrap().status, StatusCode::TOO_MANY_REQUESTS);
        let b = runs.start("b").unwrap();
        assert_eq!(runs.start("c").err().unwrap().code, ErrorCode::DryRunBusy);
        drop(a);
        let _again = runs.start("a").unwrap();
        drop(b);
        let _c = runs.start("c").unwrap();
    }
}
