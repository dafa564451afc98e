//! The etcd store over TLS with a client certificate, and with user and
//! password authentication, against real etcd servers on 127.0.0.1 set up
//! that way (certificates made with openssl, authentication turned on
//! through etcd's own JSON gateway).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shardalloc::coordinator::{Change, PlacementEntry, Stamp};
use shardalloc::store::{EtcdConfig, EtcdStore, Store, Turn, TypeRecord};
use shardalloc::strategy::StrategySource;

/// How long an etcd member may take to start answering.
const START: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl").args(args).current_dir(dir).stderr(Stdio::null()).status().unwrap();
    assert!(status.success(), "openssl {args:?} failed");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`.
fn certificates(dir: &Path) {
    const KEY: [&str; 6] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days"];
    let ca = ["req", "-x509", KEY[0], KEY[1], KEY[2], KEY[3], KEY[4], KEY[5], "1", "-subj", "/CN=test etcd CA"];
    openssl(dir, &[&ca[..], &["-keyout", "ca.key", "-out", "ca.crt"]].concat());
    for (name, usage, san) in [("server", "serverAuth", "IP:127.0.0.1"), ("client", "clientAuth", "DNS:client")] {
        let (key, csr, crt, ext) =
            (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
        let subject = format!("/CN={name}");
        let request = ["req", "-new", KEY[0], KEY[1], KEY[2], KEY[3], KEY[4], "-subj", &subject];
        openssl(dir, &[&request[..], &["-keyout", &key, "-out", &csr]].concat());
        let extensions =
            format!("basicConstraints=critical,CA:FALSE\nextendedKeyUsage={usage}\nsubjectAltName={san}\n");
        std::fs::write(dir.join(&ext), extensions).unwrap();
        let sign = ["x509", "-req", "-in", &csr, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1"];
        openssl(dir, &[&sign[..], &["-extfile", &ext, "-out", &crt]].concat());
    }
}

/// One etcd member, killed when dropped.
struct Member {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Member {
    /// etcd with `client_args` on a client URL of `scheme`.
    fn start(scheme: &str, client_args: &[String]) -> Member {
        let dir = tempfile::tempdir().unwrap();
        let (client, peer) = (free_port(), free_port());
        let url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", "m0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("m0={peer_url}")])
            .args(client_args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd (Debian package etcd-server, installed by `cargo xtask test`)");
        Member { child, url, _dir: dir }
    }
}

fn path(dir: &Path, file: &str) -> PathBuf {
    dir.join(file)
}

fn turn() -> Turn {
    let record = TypeRecord { strategy: StrategySource::Builtin("hash".into()), config: String::new() };
    let placement = Change::PlacementWritten {
        shard: "42".into(),
        entry: PlacementEntry { target: Some("a".into()), stamp: Stamp::new(1, "test"), written_at: 1 },
    };
    Turn {
        types: [("cart".to_owned(), record)].into(),
        changes: [("cart".to_owned(), vec![placement])].into(),
        ..Turn::default()
    }
}

/// Opens the store with `config`, again while etcd is still starting.
fn open_when_up(config: &EtcdConfig) -> EtcdStore {
    let started = Instant::now();
    loop {
        match EtcdStore::open(config) {
            Ok(store) => return store,
            Err(error) if started.elapsed() < START => {
                let _ = error;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("etcd never answered: {error}"),
        }
    }
}

fn commits_and_loads(store: &EtcdStore) {
    store.load().unwrap();
    let revision = store.commit(0, &turn()).unwrap();
    let loaded = store.load().unwrap();
    assert_eq!(loaded.revision, revision);
    assert_eq!(loaded.types["cart"].durable.placements["42"].target.as_deref(), Some("a"));
}

#[test]
fn the_store_works_over_tls_with_a_client_certificate_and_names_a_missing_one() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    certificates(dir);
    let file = |f: &str| path(dir, f).display().to_string();
    let args: Vec<String> = vec![
        "--cert-file".into(),
        file("server.crt"),
        "--key-file".into(),
        file("server.key"),
        "--trusted-ca-file".into(),
        file("ca.crt"),
        "--client-cert-auth".into(),
    ];
    let etcd = Member::start("https", &args);
    let config = EtcdConfig {
        ca_cert: Some(path(dir, "ca.crt")),
        client_cert: Some((path(dir, "client.crt"), path(dir, "client.key"))),
        ..EtcdConfig::new(vec![etcd.url.clone()])
    };
    commits_and_loads(&open_when_up(&config));

    // Without the client certificate etcd refuses the connection: an error, not a hang.
    let started = Instant::now();
    let without = EtcdConfig { client_cert: None, ..config.clone() };
    let error = EtcdStore::open(&without).err().expect("etcd accepted a client without a certificate");
    assert!(started.elapsed() < Duration::from_secs(30), "the refusal took {:?}", started.elapsed());
    assert!(error.to_string().contains("etcd"), "{error}");
}

/// etcd's JSON gateway: `POST {url}/v3/{path}` with `body`.
fn gateway(url: &str, path: &str, body: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let answer = runtime.block_on(async {
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            match client.post(format!("{url}/v3/{path}")).body(body.to_owned()).send().await {
                Ok(answer) => return answer,
                Err(_) if started.elapsed() < START => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(error) => panic!("etcd never answered: {error}"),
            }
        }
    });
    assert!(answer.status().is_success(), "{path}: {}", answer.status());
}

#[test]
fn the_store_works_with_a_user_and_password_and_names_a_wrong_one() {
    let etcd = Member::start("http", &[]);
    gateway(&etcd.url, "auth/user/add", r#"{"name":"root","password":"s3cret-pw"}"#);
    gateway(&etcd.url, "auth/role/add", r#"{"name":"root"}"#);
    gateway(&etcd.url, "auth/user/grant", r#"{"user":"root","role":"root"}"#);
    gateway(&etcd.url, "auth/enable", "{}");

    let config = |password: &str| EtcdConfig {
        user: Some(("root".into(), password.into())),
        ..EtcdConfig::new(vec![etcd.url.clone()])
    };
    commits_and_loads(&open_when_up(&config("s3cret-pw")));

    let error = EtcdStore::open(&config("wrong")).err().expect("etcd accepted a wrong password");
    assert!(error.to_string().contains("refused the user \"root\""), "{error}");
    // Without any user, etcd refuses every request.
    let error = EtcdStore::open(&EtcdConfig::new(vec![etcd.url.clone()])).err().expect("etcd accepted no user");
    assert!(error.to_string().contains("etcd"), "{error}");
}
