//! TLS on the node's one port: `--tls-cert` and `--tls-key` serve HTTPS (and
//! so WSS); a plain-HTTP client gets nothing; bad files stop the start with
//! a message naming them. Certificates come from the `openssl` command.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn certificate(dir: &Path) {
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stderr(Stdio::null())
        .status()
        .expect("the openssl command (Debian package openssl) makes the test certificate");
    assert!(status.success(), "openssl could not make a certificate");
}

fn serve(dir: &Path, key: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardalloc"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        .arg("--tls-cert")
        .arg(dir.join("cert.pem"))
        .arg("--tls-key")
        .arg(dir.join(key))
        .env_remove("SHARDALLOC_ADMIN_TOKEN");
    command
}

async fn exchange(stream: &mut (impl AsyncReadExt + AsyncWriteExt + Unpin), host: SocketAddr) -> String {
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_serves_https_and_refuses_plain_http_and_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    certificate(dir.path());
    let mut child = serve(dir.path(), "key.pem").stdout(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let _node = Running(child);
    let line = tokio::task::spawn_blocking(move || BufReader::new(stdout).lines().next())
        .await
        .unwrap()
        .expect("the node prints its address")
        .unwrap();
    let address: SocketAddr = line
        .strip_prefix("shardalloc listening on https://")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("an https address in {line:?}"))
        .parse()
        .unwrap();

    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(dir.path().join("cert.pem")).unwrap()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(address).await.unwrap();
    let server = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let mut tls = TlsConnector::from(Arc::new(config)).connect(server, tcp).await.expect("a TLS handshake");
    let answer = exchange(&mut tls, address).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("ok\n"), "{answer}");

    let mut plain = TcpStream::connect(address).await.unwrap();
    let answer = exchange(&mut plain, address).await;
    assert!(!answer.contains("200 OK"), "plain HTTP must not be served on a TLS port: {answer}");

    // A key file that holds no key: the node says which file and exits.
    let failed = serve(dir.path(), "cert.pem").output().unwrap();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(stderr.contains("cannot use the TLS key") && stderr.contains("cert.pem"), "{stderr}");
}

/// Starts `serve` over TLS with `extra` arguments; returns the child and its
/// `https://ADDR`.
async fn serve_tls(dir: &Path, extra: &[&str]) -> (Running, String) {
    let mut child = serve(dir, "key.pem").args(extra).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next();
        // Keep reading so the node never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        first
    })
    .await
    .unwrap()
    .expect("the node prints its address")
    .unwrap();
    let address = line
        .strip_prefix("shardalloc listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("an address in {line:?}"))
        .to_owned();
    assert!(address.starts_with("https://"), "{line}");
    (Running(child), address)
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardalloc"))
        .args(args)
        .env_remove("SHARDALLOC_CA_CERT")
        .env_remove("SHARDALLOC_ADMIN_TOKEN")
        .env_remove("SHARDALLOC_NODE")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_and_the_region_client_speak_tls_to_a_self_signed_node() {
    let dir = tempfile::tempdir().unwrap();
    certificate(dir.path());
    let (_node, url) = serve_tls(dir.path(), &["--admin-token", "T", "--type", "cart"]).await;
    let ca = dir.path().join("cert.pem");
    let ca = ca.to_str().unwrap();

    let set = cli(&["placements", "set", "--node", &url, "--admin-token", "T", "--ca-cert", ca, "cart", "b", "42"]);
    assert!(set.status.success(), "placements set over https: {}", String::from_utf8_lossy(&set.stderr));
    let ls = cli(&["placements", "ls", "--node", &url, "--admin-token", "T", "--ca-cert", ca, "cart"]);
    assert!(ls.status.success(), "placements ls over https: {}", String::from_utf8_lossy(&ls.stderr));
    assert_eq!(String::from_utf8_lossy(&ls.stdout), "42\tb\n");

    // Without the CA the certificate is refused, and the error says so.
    let untrusted = cli(&["placements", "ls", "--node", &url, "--admin-token", "T", "cart"]);
    assert!(!untrusted.status.success(), "a self-signed certificate was trusted without --ca-cert");
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(stderr.contains(&url) && stderr.contains("--ca-cert"), "the error names no URL or remedy: {stderr}");

    // The region simulator registers over wss:// with the same CA.
    let mut regions = Command::new(env!("CARGO_BIN_EXE_shardalloc"))
        .args(["regions", "--node", &url, "--ca-cert", ca, "--type", "cart", "--count", "2", "--interval-ms", "0"])
        .env_remove("SHARDALLOC_REGION_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = regions.stdout.take().unwrap();
    let regions = Running(regions);
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).find(|line| line.starts_with("ready"))
    });
    let ready = tokio::time::timeout(Duration::from_secs(60), ready).await.expect("ready within 60 s").unwrap();
    assert_eq!(ready.as_deref(), Some("ready 2"));
    drop(regions);
}

/// The commands of docs/operations.md's TLS recipe, as written there.
fn documented_recipe() -> String {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md")).unwrap();
    let (_, after) = docs.split_once("<!-- the TLS recipe").expect("docs/operations.md has the TLS recipe");
    let block = after.split_once("```sh\n").expect("a sh block after the marker").1;
    block.split_once("```").expect("the block ends").0.to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_documented_recipe_makes_a_certificate_the_node_and_its_clients_accept() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = documented_recipe();
    let made = Command::new("sh").args(["-e", "-c", &recipe]).current_dir(dir.path()).output().unwrap();
    assert!(made.status.success(), "the documented recipe failed: {}", String::from_utf8_lossy(&made.stderr));
    let (_node, url) = serve_tls(dir.path(), &["--admin-token", "T", "--type", "cart"]).await;
    let ca = dir.path().join("ca.pem");
    let ls =
        cli(&["placements", "ls", "--node", &url, "--admin-token", "T", "--ca-cert", ca.to_str().unwrap(), "cart"]);
    assert!(ls.status.success(), "a client with the recipe's CA: {}", String::from_utf8_lossy(&ls.stderr));
}

/// What `openssl req -x509` makes by default: a CA certificate
/// (`cert.pem`, `key.pem` in `dir`).
fn ca_certificate(dir: &Path) {
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_ca_certificate_as_the_nodes_own_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    ca_certificate(dir.path());
    let mut child = serve(dir.path(), "key.pem").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let node = Running(child);
    let first = BufReader::new(stdout).lines().next();
    assert!(first.is_none(), "a CA certificate was served: {first:?}");
    drop(node);
    let mut stderr_text = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut stderr_text).unwrap();
    let stderr = stderr_text;
    assert!(
        stderr.contains("is a CA certificate") && stderr.contains("leaf certificate signed by a CA"),
        "the error does not say what to do: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_shown_a_ca_certificate_by_a_server_says_what_to_do() {
    // Not our node (it refuses to serve one), but a proxy in front of it.
    let dir = tempfile::tempdir().unwrap();
    ca_certificate(dir.path());
    let chain = vec![CertificateDer::from_pem_file(dir.path().join("cert.pem")).unwrap()];
    let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::from_pem_file(dir.path().join("key.pem")).unwrap();
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = acceptor.accept(stream).await;
        }
    });
    let ca = dir.path().join("cert.pem");
    let ca = ca.to_str().unwrap().to_owned();
    let refused =
        tokio::task::spawn_blocking(move || cli(&["placements", "ls", "--node", &url, "--ca-cert", &ca, "cart"]))
            .await
            .unwrap();
    assert!(!refused.status.success(), "a CA certificate was accepted as the server's own");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("is a CA certificate") && stderr.contains("leaf certificate signed by a CA"),
        "the error does not say what to do: {stderr}"
    );
}

/// Issue 41: 520 TCP connections that never sent a ClientHello held every
/// handshake slot and real HTTPS calls were refused. Now the oldest
/// pending handshake makes room: with 600 idle connections held open, real
/// calls are served.
#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_that_never_say_hello_cannot_keep_a_real_client_out() {
    let dir = tempfile::tempdir().unwrap();
    certificate(dir.path());
    let (_node, base) = serve_tls(dir.path(), &[]).await;
    let address: SocketAddr = base.strip_prefix("https://").unwrap().parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..600 {
        match TcpStream::connect(address).await {
            Ok(stream) => idle.push(stream),
            Err(error) => panic!("connection {} refused: {error}", idle.len()),
        }
    }
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(dir.path().join("cert.pem")).unwrap()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = Arc::new(
        tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    for n in 0..10 {
        let tcp = TcpStream::connect(address).await.unwrap();
        let server = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let mut tls =
            tokio::time::timeout(Duration::from_secs(30), TlsConnector::from(config.clone()).connect(server, tcp))
                .await
                .unwrap_or_else(|_| panic!("call {n}: no handshake in 30 s"))
                .unwrap_or_else(|e| panic!("call {n}: the handshake failed behind 600 idle connections: {e}"));
        let answer = exchange(&mut tls, address).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "call {n}: {answer}");
    }
    drop(idle);
}
