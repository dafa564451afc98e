//! Keeping the leader lease alive: renewals on etcd's keep-alive stream,
//! each answer moving the [`LeaseClock`] from the renewal's send time.

use std::time::Duration;

use shardalloc_etcd::Client;
use tokio_util::sync::CancellationToken;

use crate::server::driver::lease::LeaseClock;

/// Renews `lease` every third of its TTL, moving `clock` on each answer.
/// A stream that fails or ends (an etcd member died under it) is opened
/// again while the clock still holds; `lost` is cancelled when etcd answers
/// TTL 0 (the lease is gone) or the clock runs out first.
pub async fn keep_alive(client: Client, lease: i64, ttl: Duration, clock: LeaseClock, lost: CancellationToken) {
    let reason = loop {
        let trouble = match client.lease_keep_alive(lease).await {
            Err(error) => format!("cannot open the keep-alive stream: {error}"),
            Ok((mut keeper, mut stream)) => loop {
                let sent = match keeper.keep_alive().await {
                    Ok(sent) => sent,
                    Err(error) => break format!("renewal failed: {error}"),
                };
                match tokio::time::timeout(ttl, stream.message()).await {
                    Err(_) => break "no renewal answer within the TTL".to_owned(),
                    Ok(Err(error)) => break format!("renewal failed: {error}"),
                    Ok(Ok(None)) => break "the keep-alive stream ended".to_owned(),
                    Ok(Ok(Some(answer))) if answer.ttl <= 0 => {
                        tracing::warn!(lease, "etcd answered TTL 0: the leader lease expired");
                        clock.expire();
                        lost.cancel();
                        return;
                    }
                    Ok(Ok(Some(answer))) => clock.extend_to(sent + Duration::from_secs(answer.ttl as u64).min(ttl)),
                }
                tokio::time::sleep(ttl / 3).await;
            },
        };
        if !clock.valid() {
            break trouble;
        }
        tracing::info!(lease, %trouble, "renewing the leader lease on a new stream");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tracing::warn!(lease, %reason, "the leader lease is lost");
    clock.expire();
    lost.cancel();
}
