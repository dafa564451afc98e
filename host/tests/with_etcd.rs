//! The host's integration tests that start a real etcd on 127.0.0.1 (and
//! most of them our node beside it): the store format's fixtures, the etcd
//! store, the nodes' failover and trust, the Kubernetes manifests and the
//! soak. One test binary (see `in_process.rs`);
//! `cargo test -p shardalloc --test with_etcd -- node_ha::` runs one
//! file's tests.

mod bless;
mod etcd;
mod node;

mod contract_store;
mod kubernetes;
mod node_ha;
mod node_ha_trust;
mod soak;
mod store_etcd;
mod store_etcd_secured;
