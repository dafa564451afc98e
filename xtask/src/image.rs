//! `cargo xtask image`: builds the node's OCI image `shardalloc:latest` from
//! the repository's `Containerfile` with podman, then runs it the way the
//! Kubernetes manifests do and checks that the node answers its probes.
//!
//! 1. The base images the Containerfile names (its `ARG RUST_IMAGE` and
//!    `ARG DEBIAN_IMAGE`) are made locally when podman lacks them, because
//!    no image registry can be reached here, and imported under their
//!    usual public names, so the same Containerfile builds here and on
//!    anyone's CI:
//!    - `debian:<release>-slim`: `mmdebstrap --variant=minbase` of that
//!      Debian release (merged /usr, no documentation, manuals or locales,
//!      like Debian's own slim image), piped into `podman import`;
//!    - `rust:<version>-slim-<release>`: that Debian image plus `gcc`,
//!      `libc6-dev` and `ca-certificates` from Debian, plus this machine's
//!      own rustup toolchain (the one cargo runs, with the wasm32 target)
//!      and `rustup` copied in where Rust's official images keep them
//!      (`/usr/local/rustup`, `/usr/local/cargo/bin`). Debian's own rustc
//!      is older than the workspace's `rust-version`.
//! 2. `podman build`, nice'd; the Containerfile's cache mounts keep the
//!    cargo registry and the target directory between builds.
//! 3. The test: the image run with a read-only root filesystem, every
//!    capability dropped, as uid/gid 10001, a named volume on
//!    `/var/lib/shardalloc`, published on a free loopback port; `/livez`
//!    (the manifests' liveness probe), `/healthz` (their startup and
//!    readiness probe) and `/readyz` (200 on a fresh node with no declared
//!    type) must answer 200. The container and the volume are removed
//!    whatever happens.
//!
//! What this machine needs, found by trying (docs/deployment.md, "The
//! container image"): the OCI runtime `runc`, because Debian 12's `crun`
//! refuses the hybrid cgroup v1/v2 layout of this VM; and explicit
//! `--ulimit`s, because podman's defaults (1048576 open files) exceed the
//! hard limits here and root lacks `CAP_SYS_RESOURCE` to raise them. The
//! build borrows this machine's CA bundle for its `RUN` steps only (a
//! TLS-inspecting proxy stands between this machine and crates.io); the
//! image keeps Debian's bundle.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The image `cargo xtask image` builds.
pub const IMAGE: &str = "shardalloc:latest";

/// The user the image runs as (and the Kubernetes manifests).
const USER: &str = "10001:10001";

/// The OCI runtime podman uses here (see the module's documentation).
const RUNTIME: &str = "runc";

/// How long the node in the container has to answer `/livez`.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Builds, then tests, the image.
pub fn image(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let test = match args.first().map(String::as_str) {
        None => true,
        Some("--no-test") if args.len() == 1 => false,
        Some(_) => bail!("usage: cargo xtask image [--no-test]"),
    };
    let started = Instant::now();
    crate::setup()?;
    crate::packages::ensure("image")?;
    let containerfile = root.join("Containerfile");
    let recipe =
        std::fs::read_to_string(&containerfile).with_context(|| format!("read {}", containerfile.display()))?;
    let debian_image = arg_default(&recipe, "DEBIAN_IMAGE")?;
    let release = debian_release(&debian_image)?;
    let rust = HostRust::find(root)?;
    // The Containerfile names the workspace's Rust; this machine's may be newer.
    let wanted_rust = arg_default(&recipe, "RUST_IMAGE")?;
    let rust_image = rust_image_name(&wanted_rust, &rust.version, &release)?;

    if !image_exists(&debian_image)? {
        make_debian_image(&debian_image, &release)?;
    }
    if !image_exists(&rust_image)? {
        make_rust_image(&rust_image, &debian_image, &rust)?;
    }
    build(root, &rust_image, &debian_image)?;
    let size = image_size(IMAGE)?;
    if test {
        test_image()?;
    }
    eprintln!(
        "xtask: {IMAGE} built{} in {:.0?}: {:.1} MB ({size} bytes)",
        if test { " and its probes answer" } else { "" },
        started.elapsed(),
        size as f64 / 1e6
    );
    Ok(())
}

/// podman's global flags this machine needs.
const PODMAN_FLAGS: [&str; 6] = ["--runtime", RUNTIME, "--cgroup-manager", "cgroupfs", "--events-backend", "file"];

/// A podman command with the settings this machine needs.
fn podman() -> Command {
    let mut command = Command::new("podman");
    command.args(PODMAN_FLAGS);
    command
}

/// `--ulimit` flags within this process's hard limits: podman's defaults
/// exceed them here, and raising a hard limit needs `CAP_SYS_RESOURCE`.
fn ulimits() -> Vec<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard = |name: &str| -> Option<u64> {
        let line = limits.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().nth(1)?.parse().ok()
    };
    let files = hard("Max open files").unwrap_or(1024).min(1 << 20);
    vec!["--ulimit".into(), format!("nofile={files}:{files}"), "--ulimit".into(), "nproc=4096:4096".into()]
}

/// The default of `ARG NAME=...` in the Containerfile.
fn arg_default(recipe: &str, name: &str) -> anyhow::Result<String> {
    let prefix = format!("ARG {name}=");
    recipe
        .lines()
        .find_map(|line| line.trim().strip_prefix(&prefix))
        .map(|value| value.trim().trim_matches('"').to_owned())
        .with_context(|| format!("the Containerfile has no `ARG {name}=...` line"))
}

/// `docker.io/library/debian:bookworm-slim` → `bookworm`.
fn debian_release(image: &str) -> anyhow::Result<String> {
    let tag = image.rsplit_once(':').map(|(_, tag)| tag).context("the Debian image has no tag")?;
    let release = tag.strip_suffix("-slim").unwrap_or(tag);
    if release.is_empty() || !release.chars().all(|c| c.is_ascii_lowercase()) {
        bail!("cannot tell the Debian release from {image:?}: expected a tag like `bookworm-slim`");
    }
    Ok(release.to_owned())
}

/// The Rust image to use: the Containerfile's when this machine's toolchain
/// has its version, else the same name with this machine's version (passed
/// to the build as `RUST_IMAGE`).
fn rust_image_name(wanted: &str, version: &str, release: &str) -> anyhow::Result<String> {
    let (repository, tag) = wanted.rsplit_once(':').context("the Rust image has no tag")?;
    let minor: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
    if tag.starts_with(&format!("{minor}-")) {
        return Ok(wanted.to_owned());
    }
    Ok(format!("{repository}:{minor}-slim-{release}"))
}

fn image_exists(name: &str) -> anyhow::Result<bool> {
    let status =
        podman().args(["image", "exists", name]).status().context("run podman (is the `podman` package installed?)")?;
    Ok(status.success())
}

/// Runs a command and returns its trimmed stdout, failing with its stderr.
fn output(command: &mut Command) -> anyhow::Result<String> {
    let out = command.output().with_context(|| format!("could not run {:?}", command.get_program()))?;
    if !out.status.success() {
        bail!("{command:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `mmdebstrap` of `release` piped into `podman import` as `name`.
fn make_debian_image(name: &str, release: &str) -> anyhow::Result<()> {
    eprintln!("xtask: making {name} from Debian's packages (mmdebstrap {release}, minbase; about a minute)");
    let at = Instant::now();
    let hooks = Path::new("/usr/share/mmdebstrap/hooks/merged-usr");
    let mut mmdebstrap = Command::new("mmdebstrap");
    mmdebstrap.args(["--variant=minbase", "--quiet"]);
    if hooks.is_dir() {
        // Merged /usr without the usrmerge package (and the perl it pulls in).
        mmdebstrap.arg(format!("--hook-dir={}", hooks.display()));
    }
    for option in [
        "path-exclude=/usr/share/doc/*",
        "path-include=/usr/share/doc/*/copyright",
        "path-exclude=/usr/share/man/*",
        "path-exclude=/usr/share/info/*",
        "path-exclude=/usr/share/locale/*",
        "path-exclude=/usr/share/lintian/*",
    ] {
        mmdebstrap.arg(format!("--dpkgopt={option}"));
    }
    mmdebstrap
        .arg(r#"--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log "$1"/var/log/apt/*"#)
        .args([release, "-"])
        .arg(format!("deb http://deb.debian.org/debian {release} main"))
        .arg(format!("deb http://deb.debian.org/debian {release}-updates main"))
        .arg(format!("deb http://deb.debian.org/debian-security {release}-security main"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut producer = mmdebstrap.spawn().context("run mmdebstrap (is the `mmdebstrap` package installed?)")?;
    let tarball = producer.stdout.take().context("mmdebstrap's stdout")?;
    let imported = podman()
        .args(["import", "--change", r#"CMD ["bash"]"#, "-", name])
        .stdin(tarball)
        .stdout(Stdio::null())
        .status()
        .context("run podman import");
    let made = producer.wait().context("wait for mmdebstrap")?;
    if !made.success() {
        let _ = podman().args(["rmi", "--force", name]).output();
        bail!("mmdebstrap {release} failed ({made})");
    }
    let imported = imported?;
    if !imported.success() {
        bail!("podman import of the {release} tarball failed ({imported})");
    }
    eprintln!("xtask: {name} made in {:.0?}", at.elapsed());
    Ok(())
}

/// This machine's Rust toolchain: the one cargo runs in the workspace.
struct HostRust {
    /// `1.95.0`.
    version: String,
    /// `x86_64-unknown-linux-gnu`.
    host: String,
    /// The toolchain's directory (`rustc --print sysroot`).
    sysroot: PathBuf,
    /// The `rustup` binary.
    rustup: PathBuf,
}

impl HostRust {
    fn find(root: &Path) -> anyhow::Result<HostRust> {
        let verbose = output(Command::new("rustc").arg("-vV").current_dir(root))?;
        let field = |name: &str| {
            verbose
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|value| value.trim().to_owned())
                .with_context(|| format!("`rustc -vV` printed no {name:?} line"))
        };
        let version = field("release:")?;
        let host = field("host:")?;
        let sysroot = PathBuf::from(output(Command::new("rustc").args(["--print", "sysroot"]).current_dir(root))?);
        if !sysroot.join("lib/rustlib/wasm32-unknown-unknown").is_dir() {
            bail!(
                "the toolchain in {} has no wasm32-unknown-unknown target: the Rust build image is made from \
                 this machine's rustup toolchain; run `rustup target add wasm32-unknown-unknown`",
                sysroot.display()
            );
        }
        let rustup = std::env::var_os("PATH")
            .and_then(|path| std::env::split_paths(&path).map(|dir| dir.join("rustup")).find(|p| p.is_file()))
            .context("no `rustup` on PATH: the Rust build image is made from this machine's rustup toolchain")?;
        Ok(HostRust { version, host, sysroot, rustup })
    }
}

/// The Debian image plus a C compiler and the CA bundle from Debian, and
/// this machine's toolchain and rustup where Rust's official images have them.
fn make_rust_image(name: &str, debian_image: &str, rust: &HostRust) -> anyhow::Result<()> {
    eprintln!(
        "xtask: making {name} from {debian_image} and this machine's Rust {} ({})",
        rust.version,
        rust.sysroot.display()
    );
    let at = Instant::now();
    let container = output(Command::new("buildah").args(["from", "--pull=never", debian_image]))?;
    let result = fill_rust_image(&container, name, rust);
    if result.is_err() {
        let _ = Command::new("buildah").args(["rm", &container]).output();
    }
    result?;
    eprintln!("xtask: {name} made in {:.0?}", at.elapsed());
    Ok(())
}

fn fill_rust_image(container: &str, name: &str, rust: &HostRust) -> anyhow::Result<()> {
    crate::checked(Command::new("buildah").args(["run", "--isolation", "chroot", container, "--", "sh", "-c"]).arg(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
         ca-certificates gcc libc6-dev >/dev/null && rm -rf /var/lib/apt/lists/*",
    ))?;
    let mount = PathBuf::from(output(Command::new("buildah").args(["mount", container]))?);
    let toolchain_name = format!("{}-{}", rust.version, rust.host);
    let rustup_home = mount.join("usr/local/rustup");
    let toolchain = rustup_home.join("toolchains").join(&toolchain_name);
    let cargo_bin = mount.join("usr/local/cargo/bin");
    let copied = (|| -> anyhow::Result<()> {
        std::fs::create_dir_all(&toolchain)?;
        std::fs::create_dir_all(&cargo_bin)?;
        // The toolchain without its documentation (share/).
        for part in ["bin", "lib", "libexec", "etc"] {
            let from = rust.sysroot.join(part);
            if from.exists() {
                crate::checked(Command::new("cp").arg("-a").arg(&from).arg(&toolchain))?;
            }
        }
        std::fs::write(
            rustup_home.join("settings.toml"),
            format!(
                "version = \"12\"\ndefault_toolchain = \"{toolchain_name}\"\nprofile = \"minimal\"\n\
                 auto_self_update = \"disable\"\n\n[overrides]\n"
            ),
        )?;
        std::fs::copy(&rust.rustup, cargo_bin.join("rustup"))?;
        for proxy in ["cargo", "rustc", "rustdoc", "cargo-clippy", "clippy-driver", "cargo-fmt", "rustfmt"] {
            std::os::unix::fs::symlink("rustup", cargo_bin.join(proxy))?;
        }
        Ok(())
    })();
    let unmounted = output(Command::new("buildah").args(["umount", container]));
    copied.context("copy the toolchain into the Rust image")?;
    unmounted?;
    crate::checked(Command::new("buildah").args([
        "config",
        "--env",
        "RUSTUP_HOME=/usr/local/rustup",
        "--env",
        "CARGO_HOME=/usr/local/cargo",
        "--env",
        "PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env",
        &format!("RUST_VERSION={}", rust.version),
        "--cmd",
        "bash",
        container,
    ]))?;
    output(Command::new("buildah").args(["commit", "--rm", "--quiet", container, name]))?;
    Ok(())
}

/// `podman build` of the Containerfile into [`IMAGE`].
fn build(root: &Path, rust_image: &str, debian_image: &str) -> anyhow::Result<()> {
    eprintln!(
        "xtask: building {IMAGE} (a release build inside the container, nice'd: 15-25 minutes on 2 cores the \
         first time; later builds reuse the cached target directory)"
    );
    let at = Instant::now();
    let revision = output(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root)).unwrap_or_default();
    let mut command = Command::new("nice");
    command.args(["-n", "10", "podman"]).args(PODMAN_FLAGS);
    command.args(["build", "--pull=never", "--runtime", RUNTIME, "--file", "Containerfile", "--tag", IMAGE]);
    command.args(ulimits());
    command.args(["--build-arg", &format!("RUST_IMAGE={rust_image}")]);
    command.args(["--build-arg", &format!("DEBIAN_IMAGE={debian_image}")]);
    command.args(["--build-arg", &format!("VERSION={}", env!("CARGO_PKG_VERSION"))]);
    if !revision.is_empty() {
        command.args(["--build-arg", &format!("REVISION={revision}")]);
    }
    // This machine reaches crates.io through a TLS-inspecting proxy whose CA
    // only its own bundle has: lend the bundle to the RUN steps (a build
    // volume is not part of any layer; the image keeps Debian's bundle).
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if bundle.is_file() {
        command.args(["--volume", &format!("{0}:{0}:ro", bundle.display())]);
    }
    command.arg(".").current_dir(root);
    crate::checked(&mut command)?;
    eprintln!("xtask: {IMAGE} built in {:.0?}", at.elapsed());
    Ok(())
}

fn image_size(name: &str) -> anyhow::Result<u64> {
    let size = output(podman().args(["image", "inspect", "--format", "{{.Size}}", name]))?;
    size.parse().with_context(|| format!("podman printed the size {size:?}"))
}

/// The container and the volume of one test run, removed when dropped.
struct TestRun {
    name: String,
}

impl Drop for TestRun {
    fn drop(&mut self) {
        let _ = podman().args(["rm", "--force", "--time", "5", &self.name]).output();
        let _ = podman().args(["volume", "rm", "--force", &self.name]).output();
    }
}

/// Runs the image as the Kubernetes manifests do and checks its probes.
fn test_image() -> anyhow::Result<()> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    let token = format!("xtask-image-{nanos:x}-{}", std::process::id());
    let run = TestRun { name: format!("shardalloc-image-test-{}", std::process::id()) };
    eprintln!("xtask: running {IMAGE} read-only as {USER} on 127.0.0.1:{port}");
    output(podman().args(["volume", "create", &run.name]))?;
    let mut command = podman();
    command.args(["run", "--detach", "--name", &run.name, "--read-only", "--cap-drop", "ALL"]);
    command.args(["--security-opt", "no-new-privileges", "--user", USER]);
    command.args(ulimits());
    command.args(["--volume", &format!("{}:/var/lib/shardalloc", run.name)]);
    command.args(["--publish", &format!("127.0.0.1:{port}:7878")]);
    // The token in the environment: only in this test, never logged.
    command.args(["--env", "SHARDALLOC_ADMIN_TOKEN"]).env("SHARDALLOC_ADMIN_TOKEN", &token);
    command.arg(IMAGE);
    output(&mut command)?;
    let checked = check_probes(&run.name, port, &token);
    if checked.is_err() {
        let logs = podman().args(["logs", &run.name]).output();
        if let Ok(logs) = logs {
            eprintln!(
                "xtask: the container's output:\n{}{}",
                String::from_utf8_lossy(&logs.stdout),
                String::from_utf8_lossy(&logs.stderr)
            );
        }
    }
    checked?;
    let at = Instant::now();
    output(podman().args(["stop", "--time", "20", &run.name]))?;
    let code = output(podman().args(["inspect", "--format", "{{.State.ExitCode}}", &run.name]))?;
    eprintln!("xtask: podman stop (SIGTERM): the node exited with status {code} after {:.1?}", at.elapsed());
    if code != "0" {
        bail!("the node in the container exited with status {code} on SIGTERM, not 0");
    }
    Ok(())
}

fn check_probes(name: &str, port: u16, token: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if let Ok((200, _)) = get(port, "/livez", None) {
            break;
        }
        let running = output(podman().args(["inspect", "--format", "{{.State.Running}}", name]))?;
        if running != "true" {
            bail!("the node's container stopped before answering /livez");
        }
        if started.elapsed() > START_LIMIT {
            bail!("the node in the container did not answer /livez with 200 within {START_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("xtask: the node answered /livez after {:.1?}", started.elapsed());
    // /livez: the liveness probe; /healthz: the startup and readiness probe
    // of deploy/kubernetes; /readyz: 200 on a node with no declared type.
    for path in ["/livez", "/healthz", "/readyz"] {
        let (status, body) = get(port, path, None)?;
        eprintln!("xtask: GET {path} → {status} {}", body.trim());
        if status != 200 {
            bail!("GET {path} answered {status}, not 200: {}", body.trim());
        }
    }
    // The admin API, with the token from the environment: the node runs.
    let (status, _) = get(port, "/v1/cluster/shards", Some(token))?;
    let (refused, _) = get(port, "/v1/cluster/shards", None)?;
    eprintln!("xtask: GET /v1/cluster/shards → {status} with the admin token, {refused} without");
    if status != 200 || refused != 401 {
        bail!("GET /v1/cluster/shards answered {status} with the token and {refused} without, not 200 and 401");
    }
    // Its state went to the volume (the root filesystem is read-only).
    let listing = output(podman().args(["exec", name, "ls", "-a", "/var/lib/shardalloc"]))?;
    let user = output(podman().args(["exec", name, "id", "-u"]))?;
    eprintln!(
        "xtask: /var/lib/shardalloc holds {}; the node runs as uid {user}",
        listing.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    if !listing.lines().any(|entry| entry == "shardalloc.redb") {
        bail!("the node wrote no shardalloc.redb into its volume /var/lib/shardalloc");
    }
    if user != "10001" {
        bail!("the node runs as uid {user}, not 10001");
    }
    Ok(())
}

/// A plain HTTP/1.1 GET on 127.0.0.1:`port`: the status and the body.
fn get(port: u16, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let authorization = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{authorization}Connection: close\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("GET {path}: not an HTTP answer: {response:?}"))?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_containerfile_names_both_base_images_and_the_user() {
        let recipe = include_str!("../../Containerfile");
        let debian = arg_default(recipe, "DEBIAN_IMAGE").unwrap();
        assert_eq!(debian_release(&debian).unwrap(), "bookworm");
        let rust = arg_default(recipe, "RUST_IMAGE").unwrap();
        assert!(rust.starts_with("docker.io/library/rust:"), "{rust}");
        assert!(recipe.contains(&format!("USER {USER}")), "the Containerfile runs as {USER}");
    }

    #[test]
    fn a_newer_host_toolchain_names_its_own_rust_image() {
        let wanted = "docker.io/library/rust:1.95-slim-bookworm";
        assert_eq!(rust_image_name(wanted, "1.95.0", "bookworm").unwrap(), wanted);
        assert_eq!(rust_image_name(wanted, "1.96.1", "bookworm").unwrap(), "docker.io/library/rust:1.96-slim-bookworm");
    }
}
