//! [`Bridge`]: the etcd client is async and the [`Store`](super::Store)
//! trait is not (the driver thread commits synchronously). The bridge owns
//! a one-thread tokio runtime for the client's connections and runs each
//! request there, the caller waiting on a channel: it works from the driver
//! thread, from blocking threads and from inside the node's own runtime.
//! Every request has the client's timeout, so no call waits forever.

use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};

/// The etcd client's own runtime. See the module documentation.
pub struct Bridge {
    runtime: Option<Runtime>,
}

impl Bridge {
    /// Starts the runtime's one worker thread.
    pub fn new() -> std::io::Result<Bridge> {
        let runtime = Builder::new_multi_thread().worker_threads(1).thread_name("etcd-client").enable_all().build()?;
        Ok(Bridge { runtime: Some(runtime) })
    }

    /// The runtime's handle (the election's tasks run there too).
    pub fn handle(&self) -> &Handle {
        self.runtime.as_ref().expect("the runtime lives as long as the bridge").handle()
    }

    /// Runs `future` on the runtime and waits for its output.
    pub fn run<T: Send + 'static>(&self, future: impl Future<Output = T> + Send + 'static) -> T {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let _ = sender.send(future.await);
        });
        receiver.recv().expect("the etcd client's runtime stopped while a request was waiting")
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // Dropping a runtime inside another one panics; this never does.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
