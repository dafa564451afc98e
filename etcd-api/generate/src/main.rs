//! Generates the etcd API's Rust code (`etcd-api/src/generated/`) from the
//! trimmed protocol files in `etcd-api/proto/`: protox parses them (no
//! system protoc or include files), tonic-prost-build writes the messages
//! and the client stubs. The output is committed; the node's build only
//! compiles it.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("no parent")?;
    let proto = crate_dir.join("proto");
    let out = crate_dir.join("src/generated");
    std::fs::create_dir_all(&out)?;
    let files = ["etcd/api/mvccpb/kv.proto", "etcd/api/etcdserverpb/rpc.proto"];
    let descriptors = protox::compile(files, [&proto])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .out_dir(&out)
        .compile_fds(descriptors)?;
    for entry in std::fs::read_dir(&out)? {
        println!("{}", entry?.path().display());
    }
    Ok(())
}
