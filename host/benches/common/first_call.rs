//! Whether the first call after a swap is as fast as the hundredth: a slot
//! warms each new activation on the latest view before it takes calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardalloc::engine::Engine;
use shardalloc::engine::component::Compiled;
use shardalloc::engine::limits::Limits;
use shardalloc::engine::slot::{ActivationCause, AutoRollback, Slot};
use shardalloc::strategy::{AllocationStrategy, ClusterView};

/// Swaps measured per strategy (2 in smoke mode).
const SWAPS: usize = 20;

fn median(mut took: Vec<Duration>) -> Duration {
    took.sort();
    took[took.len() / 2]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Prints, per strategy, the median of: the first allocation after each of
/// [`SWAPS`] activations (warmed by the slot), a steady allocation, and a
/// cold first allocation (a new caller that instantiates for itself).
pub fn print_first_calls(
    engine: &Arc<Engine>,
    strategies: &[(&str, Arc<Compiled>)],
    view: &ClusterView,
    limits: Limits,
) {
    let swaps = super::sized(SWAPS, 2);
    println!("first allocation after a swap ({} regions, median of {swaps}):", view.regions().len());
    println!("| strategy | first after activate (warmed) | steady | first / steady | cold first (no warm-up) |");
    for (name, compiled) in strategies {
        let slot = Slot::new("first-call", engine.clone(), AutoRollback::default(), compiled.clone(), "", limits)
            .expect("a slot");
        let mut handle = slot.handle();
        handle.allocate(view, "seen", None).expect("an answer");
        let (mut first, mut steady, mut cold) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..swaps {
            // As the node's driver activates: warmed on the caller's view.
            slot.activate_on(compiled.clone(), "", limits, ActivationCause::Operator, Some(view)).expect("activated");
            let started = Instant::now();
            handle.allocate(view, &format!("first-{i}"), None).expect("an answer");
            first.push(started.elapsed());
            for n in 0..10 {
                let started = Instant::now();
                handle.allocate(view, &format!("steady-{i}-{n}"), None).expect("an answer");
                steady.push(started.elapsed());
            }
            // A second caller finds no warmed instance: what every first call cost before.
            let mut other = slot.handle();
            let started = Instant::now();
            other.allocate(view, &format!("cold-{i}"), None).expect("an answer");
            cold.push(started.elapsed());
        }
        let (first, steady, cold) = (median(first), median(steady), median(cold));
        println!(
            "| {name} | {} | {} | {:.2}× | {} |",
            micros(first),
            micros(steady),
            first.as_secs_f64() / steady.as_secs_f64(),
            micros(cold)
        );
    }
}
