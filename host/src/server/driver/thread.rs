//! The driver's thread: it waits for inputs or the next tick and calls
//! [`Driver::step`] with the coordinators' time (`clock::coordinator_time`:
//! the monotonic clock), until a shutdown or a store failure.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::handle::ADMIN_QUEUE;
use super::progress::Progress;
use super::request::AdminRequest;
use super::{
    Driver, DriverError, DriverHandle, DriverSettings, Flow, INPUT_QUEUE, Input, MAX_ADMIN_PER_TURN,
    MAX_INPUTS_PER_TURN,
};
use crate::clock::{Clocks, coordinator_time};
use crate::engine::Engine;
use crate::server::metrics::Metrics;
use crate::store::Store;

impl Driver {
    /// Waits for inputs or the next tick, then steps with a batch: every
    /// region input waiting (up to [`MAX_INPUTS_PER_TURN`]) first, then at
    /// most [`MAX_ADMIN_PER_TURN`] admin requests, so operators never delay
    /// heartbeats and home answers by more than a bounded amount of work.
    /// Stamps `progress` at every turn of the loop, idle tick wake-ups
    /// included, for `/livez`.
    fn run(
        mut self,
        mut rx: mpsc::Receiver<Input>,
        mut admin: mpsc::Receiver<AdminRequest>,
        progress: &Progress,
        clocks: &dyn Clocks,
    ) -> Result<(), DriverError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime for the driver's waits");
        loop {
            progress.stamp();
            let wait = self.until_tick(coordinator_time(clocks));
            let mut inputs = Vec::new();
            let first = runtime.block_on(async {
                tokio::select! {
                    biased;
                    input = rx.recv() => Some(input),
                    request = admin.recv(), if !admin.is_closed() => request.map(|r| Some(Input::Admin(r))),
                    _ = tokio::time::sleep(wait) => None,
                }
            });
            match first {
                Some(Some(input)) => inputs.push(input),
                Some(None) => return self.shut_down(),
                None => {}
            }
            while inputs.len() < MAX_INPUTS_PER_TURN {
                match rx.try_recv() {
                    Ok(input) => inputs.push(input),
                    Err(_) => break,
                }
            }
            let mut taken = inputs.iter().filter(|i| matches!(i, Input::Admin(_))).count();
            while taken < MAX_ADMIN_PER_TURN {
                match admin.try_recv() {
                    Ok(request) => inputs.push(Input::Admin(request)),
                    Err(_) => break,
                }
                taken += 1;
            }
            heartbeats_first(&mut inputs);
            let started = std::time::Instant::now();
            let flow = self.step(inputs, coordinator_time(clocks))?;
            self.pace_slices(started.elapsed());
            if flow == Flow::Stop {
                return self.shut_down();
            }
        }
    }
}

/// Orders a turn's inputs so that every region's other messages
/// (heartbeats, registrations, hand-off steps) come before the requests
/// one region may send by the thousand, each group in arrival order: a
/// burst of home lookups delays no other region's lease.
pub fn heartbeats_first(inputs: &mut [Input]) {
    inputs.sort_by_key(|input| matches!(input, Input::Request { .. }));
}

/// Loads the driver over `store` and starts its thread. Returns its handle
/// and the thread, which ends after [`Input::Shutdown`] (or a store
/// failure, returned); either way [`DriverHandle::stopped`] completes.
pub fn start(
    store: Arc<dyn Store>,
    engine: Arc<Engine>,
    settings: DriverSettings,
    metrics: Arc<Metrics>,
) -> Result<(DriverHandle, std::thread::JoinHandle<Result<(), DriverError>>), DriverError> {
    let clocks = settings.clocks.clone();
    let driver = Driver::load(store, engine, settings, metrics, coordinator_time(&*clocks))?;
    let (tx, rx) = mpsc::channel(INPUT_QUEUE);
    let (admin_tx, admin) = mpsc::channel(ADMIN_QUEUE);
    let stopped = CancellationToken::new();
    let progress = Arc::new(Progress::new());
    let handle = DriverHandle::new(tx, admin_tx, stopped.clone(), Some(progress.clone()));
    let thread = std::thread::Builder::new()
        .name("shardalloc-driver".into())
        .spawn(move || {
            // Cancelled however the thread ends, a panic included.
            let _stopped = stopped.drop_guard();
            let result = driver.run(rx, admin, &progress, &*clocks);
            if let Err(error) = &result {
                tracing::error!(%error, "the coordinator driver stopped");
            }
            result
        })
        .expect("spawn the driver thread");
    Ok((handle, thread))
}
