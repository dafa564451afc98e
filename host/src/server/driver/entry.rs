//! [`TypeEntry`]: one entity type the node serves, its coordinator, its
//! strategy slot and its activation history, with what is asked of one
//! type alone (a region's status, an activation warmed on its view).

use std::sync::Arc;

use shardalloc_proto::api::RegionStatus;

use super::request::Refusal;
use crate::coordinator::Coordinator;
use crate::engine::component::Compiled;
use crate::engine::limits::Limits;
use crate::engine::slot::Slot;
use crate::store::{ActivationRecord, TypeRecord};
use crate::strategy::ActivationCause;

/// One entity type.
pub struct TypeEntry {
    /// Its coordinator.
    pub coordinator: Coordinator,
    /// Its strategy slot.
    pub slot: Arc<Slot>,
    /// Its declared (active) strategy.
    pub record: TypeRecord,
    /// Its activation history, oldest first (persisted).
    pub activations: Vec<ActivationRecord>,
}

impl TypeEntry {
    /// A registered region's status: the coordinator's rule ([`Coordinator::region_status`]) in the REST
    /// API's words; a region the type does not know is unreachable.
    pub fn region_status(&self, address: &str) -> RegionStatus {
        use shardalloc_guest::RegionStatus as Topology;
        let region = self.coordinator.durable().regions.get(address);
        match region.map(|region| self.coordinator.region_status(region)) {
            Some(Topology::Up | Topology::Joining) => RegionStatus::Up,
            Some(Topology::Leaving) => RegionStatus::Leaving,
            Some(Topology::Unreachable) | None => RegionStatus::Unreachable,
        }
    }

    /// Activates a strategy in the slot, warmed on the coordinator's
    /// current view (`Slot::activate_on`); the view is dropped before the
    /// coordinator changes again, which would otherwise copy its table.
    pub(super) fn activate(
        &mut self,
        compiled: Arc<Compiled>,
        config: &str,
        limits: Limits,
        cause: ActivationCause,
    ) -> Result<(), Refusal> {
        let view = self.coordinator.allocation_view();
        let activated = self.slot.activate_on(compiled, config, limits, cause, Some(&view));
        activated.map(drop).map_err(|e| Refusal::StrategyRefused(e.to_string()))
    }
}
