//! Work that must yield to the driver and the region sessions: building and
//! serialising a whole type's snapshot, parsing a large request body. On a
//! busy host (one core for everything) such work, run on a tokio worker,
//! holds up every session that worker serves, and run at normal priority
//! takes the core from the driver. [`run`] does it on a thread of its own
//! at [`NICE`], the lowest priority, and waits for it; at most
//! [`AT_ONCE`] such threads run at once, later work waits its turn (the
//! callers bound how much can wait: two snapshot reads, the connection
//! limit's bodies).

use tokio::sync::Semaphore;

use super::api_error::ApiError;

/// The nice value of the threads: 19, the lowest priority (Linux keeps a
/// nice value per thread). Raising it needs no privilege.
pub const NICE: i32 = 19;

/// Most low-priority threads at once, over the node.
pub const AT_ONCE: usize = 4;

/// The permits of [`AT_ONCE`].
static RUNNING: Semaphore = Semaphore::const_new(AT_ONCE);

/// Runs `work` on a new thread at [`NICE`] once one of [`AT_ONCE`] permits
/// is free, and waits for it.
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    let permit = RUNNING.acquire().await.map_err(|e| ApiError::internal(format!("no low-priority thread: {e}")))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("shardalloc-low".into())
        .spawn(move || {
            // Held by the thread, not the caller: a caller that goes away
            // (its client left) does not free a place while its work runs.
            let _permit = permit;
            if let Err(error) = rustix::process::setpriority_process(None, NICE) {
                tracing::debug!(%error, "low-priority work runs at normal priority");
            }
            let _ = tx.send(work());
        })
        .map_err(|e| ApiError::internal(format!("no low-priority thread: {e}")))?;
    rx.await.map_err(|_| ApiError::internal("a low-priority thread panicked"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn work_runs_at_the_lowest_priority_on_its_own_thread() {
        let caller = std::thread::current().id();
        let before = rustix::process::getpriority_process(None).unwrap();
        let (nice, thread) =
            run(move || (rustix::process::getpriority_process(None), std::thread::current().id())).await.unwrap();
        assert_eq!(nice.unwrap(), NICE);
        assert_ne!(thread, caller);
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), before, "the caller's priority changed");
    }

    #[tokio::test]
    async fn at_most_at_once_threads_run_together() {
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let works = (0..3 * AT_ONCE).map(|_| {
            let (running, most) = (running.clone(), most.clone());
            run(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
                running.fetch_sub(1, Ordering::SeqCst);
            })
        });
        for done in futures_util::future::join_all(works).await {
            done.unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!((1..=AT_ONCE).contains(&most), "{most} low-priority threads ran at once");
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_keeps_its_place_until_its_work_ends() {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Arc::new(std::sync::Mutex::new(released));
        let started = Arc::new(AtomicUsize::new(0));
        for n in 1..=AT_ONCE {
            let (released, count) = (released.clone(), started.clone());
            let caller = tokio::spawn(run(move || {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = released.lock().unwrap().recv();
            }));
            while started.load(Ordering::SeqCst) < n {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            // Its client left: the work runs on, and holds its place.
            caller.abort();
        }
        let late = Arc::new(AtomicUsize::new(0));
        let flag = late.clone();
        let next = tokio::spawn(run(move || flag.fetch_add(1, Ordering::SeqCst)));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(late.load(Ordering::SeqCst), 0, "work began while AT_ONCE others still ran");
        for _ in 0..AT_ONCE {
            release.send(()).unwrap();
        }
        next.await.unwrap().unwrap();
        assert_eq!(late.load(Ordering::SeqCst), 1);
    }
}
