//! The Kubernetes manifests in `deploy/kubernetes/` cannot drift from the
//! binary. Each overlay (`single`, `ha`) is rendered with `kubectl
//! kustomize`; then:
//!
//! - every argument and `SHARDALLOC_*` variable of every shardalloc
//!   container is one of `shardalloc serve`'s real flags and variables (read
//!   from the built binary's `serve --help`), with a value exactly when the
//!   flag takes one;
//! - the container port, the `--listen` port, the probes' ports and the
//!   Prometheus annotation agree, and the probes speak HTTPS exactly when
//!   the node is given `--tls-cert`;
//! - a real node is started with the manifest's arguments and environment
//!   (mounted files written to a temporary directory, the listen address on
//!   127.0.0.1 and a free port, `ha` on a real etcd) and every probe's path,
//!   and `/metrics`, answers 200 on it with no region registered;
//! - the overlay's shape: one node on a claim, or three on etcd with a
//!   disruption budget and zone spreading; the pod's security context.
//!
//! The example region (`examples/region.yaml`) is checked against
//! `shardalloc regions` and its preStop hook against `shardalloc drain`.

use crate::etcd;
use crate::node;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

/// How long a node may take to print its address (built-ins compile).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the startup probe's path may take to answer 200.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Runs kubectl, failing with how to get it when it is missing.
fn kubectl(args: &[&str]) -> String {
    let output = Command::new("kubectl").args(args).current_dir(root()).output().unwrap_or_else(|e| {
        panic!(
            "cannot run kubectl ({e}). It renders deploy/kubernetes (its built-in kustomize) and comes with \
             this project's machine image; it is not a Debian package here. Install kubectl 1.27 or later \
             from the Kubernetes project's release binaries (see its documentation, \"Install Tools\") onto \
             PATH, then run again."
        )
    });
    assert!(output.status.success(), "kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// Every YAML document of `text`, as JSON values.
fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|document| Value::deserialize(document).expect("YAML that reads as JSON"))
        .filter(|document| !document.is_null())
        .collect()
}

fn render(overlay: &str) -> Vec<Value> {
    documents(&kubectl(&["kustomize", &format!("deploy/kubernetes/overlays/{overlay}")]))
}

/// A subcommand's real flags (long names, and whether each takes a value)
/// and environment variables, from the built binary's `--help`.
struct Flags {
    command: String,
    takes_value: BTreeMap<String, bool>,
    env: BTreeSet<String>,
}

impl Flags {
    fn of(command: &str) -> Flags {
        let output = node::command().args([command, "--help"]).output().expect("run shardalloc --help");
        assert!(output.status.success(), "shardalloc {command} --help failed");
        let help = String::from_utf8(output.stdout).unwrap();
        let mut takes_value = BTreeMap::new();
        let mut env = BTreeSet::new();
        for line in help.lines() {
            // An option's line is indented by at most 6 (`  -h, --help`,
            // `      --listen <LISTEN>`); its description by more.
            let indent = line.len() - line.trim_start().len();
            let option = line.trim_start();
            let option = match option.as_bytes() {
                [b'-', short, b',', b' ', ..] if *short != b'-' => &option[4..],
                _ => option,
            };
            if let Some(rest) = option.strip_prefix("--").filter(|_| indent <= 6) {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                takes_value.insert(name.clone(), rest[name.len()..].trim_start().starts_with('<'));
            }
            let mut rest = line;
            while let Some(at) = rest.find("[env: ") {
                let name: String = rest[at + 6..].chars().take_while(|c| *c != '=' && *c != ']').collect();
                env.insert(name);
                rest = &rest[at + 6..];
            }
        }
        assert!(takes_value.len() > 3 && !env.is_empty(), "no flags read from `shardalloc {command} --help`:\n{help}");
        Flags { command: command.to_owned(), takes_value, env }
    }

    /// Checks `args` (after the subcommand): every flag exists and has a
    /// value exactly when it takes one; answers the `--flag` → value map.
    #[track_caller]
    fn check(&self, what: &str, args: &[String]) -> Vec<(String, Option<String>)> {
        let mut parsed = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let Some(flag) = arg.strip_prefix("--") else {
                panic!("{what}: {arg:?} is not a flag of `shardalloc {}`", self.command)
            };
            let (name, inline) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (flag, None),
            };
            let Some(&takes) = self.takes_value.get(name) else {
                panic!(
                    "{what}: --{name} is not a flag of `shardalloc {}` (it has: {:?})",
                    self.command,
                    self.takes_value.keys()
                )
            };
            let value = match (takes, inline) {
                (true, Some(value)) => Some(value),
                (true, None) => Some(args.next().unwrap_or_else(|| panic!("{what}: --{name} needs a value")).clone()),
                (false, None) => None,
                (false, Some(value)) => panic!("{what}: --{name} takes no value, given {value:?}"),
            };
            parsed.push((name.to_owned(), value));
        }
        parsed
    }
}

/// Variables the binary reads for every command rather than through a
/// flag (`SHARDALLOC_LOG`: the log filter), found in its `main.rs`.
fn process_variable(name: &str) -> bool {
    let main = std::fs::read_to_string(root().join("host/src/main.rs")).unwrap();
    name == "SHARDALLOC_LOG" && main.contains("\"SHARDALLOC_LOG\"")
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().map(|v| v.as_str().expect("a string").to_owned()).collect()).unwrap_or_default()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

/// The shardalloc containers of every workload: (pod spec, container).
fn shardalloc_containers(documents: &[Value]) -> Vec<(&Value, &Value)> {
    let mut found = Vec::new();
    for document in documents {
        let pod = &document["spec"]["template"]["spec"];
        for container in pod["containers"].as_array().into_iter().flatten() {
            let image = container["image"].as_str().unwrap_or_default();
            if image.split(':').next().is_some_and(|name| name.rsplit('/').next() == Some("shardalloc")) {
                found.push((pod, container));
            }
        }
    }
    found
}

/// Expands `$(NAME)` as the kubelet does, from `values`.
fn expand(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = text.to_owned();
    for (name, value) in values {
        out = out.replace(&format!("$({name})"), value);
    }
    assert!(!out.contains("$("), "{text:?} references a variable the container does not define");
    out
}

/// Files the test gives for each Secret the manifests mount or read.
struct Material {
    dir: tempfile::TempDir,
}

impl Material {
    fn new() -> Material {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-days", "1", "-subj", "/CN=shardalloc", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
            .args(["-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth"])
            .arg("-keyout")
            .arg(dir.path().join("tls.key"))
            .arg("-out")
            .arg(dir.path().join("tls.crt"))
            .stderr(Stdio::null())
            .status()
            .expect("the openssl command (Debian package openssl, installed by `cargo xtask test`)");
        assert!(status.success(), "openssl could not make a certificate");
        Material { dir }
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    /// A Secret's data, as the test makes it.
    fn secret(&self, name: &str) -> BTreeMap<String, Vec<u8>> {
        let read = |file: &str| std::fs::read(self.dir.path().join(file)).unwrap();
        match name {
            "shardalloc-tokens" => BTreeMap::from([
                ("admin-token".into(), b"test-admin-token-0123456789abcdef\n".to_vec()),
                ("region-token".into(), b"test-region-token-0123456789abcdef\n".to_vec()),
                ("cluster-secret".into(), b"test-cluster-secret-0123456789abcdef\n".to_vec()),
            ]),
            "shardalloc-tls" => BTreeMap::from([
                ("tls.crt".into(), read("tls.crt")),
                ("tls.key".into(), read("tls.key")),
                ("ca.crt".into(), read("tls.crt")),
            ]),
            other => panic!("the manifests use a Secret {other:?} this test does not know; teach Material::secret"),
        }
    }
}

/// A node started from a manifest's container; killed when dropped.
struct Started {
    child: Child,
    base: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- node output ----\n{}\n----", self.log.lock().unwrap().join("\n"));
        }
    }
}

/// What the checks of one overlay found and need.
struct Container<'a> {
    what: String,
    documents: &'a [Value],
    pod: &'a Value,
    container: &'a Value,
    serve: Vec<(String, Option<String>)>,
}

impl Container<'_> {
    fn flag(&self, name: &str) -> Option<&str> {
        self.serve.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_deref())
    }

    fn config_map(&self, name: &str) -> &serde_json::Map<String, Value> {
        self.documents
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
            .and_then(|d| d["data"].as_object())
            .unwrap_or_else(|| panic!("{}: no ConfigMap {name} in the rendered overlay", self.what))
    }

    /// The container's environment, resolved as the kubelet would, with
    /// the pod's fields given test values.
    fn environment(&self, material: &Material) -> BTreeMap<String, String> {
        let mut values = BTreeMap::new();
        for variable in self.container["env"].as_array().into_iter().flatten() {
            let name = variable["name"].as_str().unwrap().to_owned();
            let value = if let Some(value) = variable["value"].as_str() {
                expand(value, &values)
            } else if let Some(field) = variable["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                match field {
                    "metadata.name" => "shardalloc-0".to_owned(),
                    "metadata.namespace" => "default".to_owned(),
                    "status.podIP" => "127.0.0.1".to_owned(),
                    other => panic!("{}: env {name} from field {other}, unknown to this test", self.what),
                }
            } else if let Some(reference) = variable["valueFrom"]["configMapKeyRef"].as_object() {
                let map = self.config_map(reference["name"].as_str().unwrap());
                map[reference["key"].as_str().unwrap()].as_str().unwrap().to_owned()
            } else if let Some(reference) = variable["valueFrom"]["secretKeyRef"].as_object() {
                let data = material.secret(reference["name"].as_str().unwrap());
                String::from_utf8(data[reference["key"].as_str().unwrap()].clone()).unwrap()
            } else {
                panic!("{}: env {name} has a source this test does not know: {variable}", self.what)
            };
            values.insert(name, value);
        }
        values
    }

    /// Writes every mounted volume under `dir`: (mount path, local path).
    fn mounts(&self, dir: &Path, material: &Material) -> Vec<(String, PathBuf)> {
        let volumes: BTreeMap<&str, &Value> =
            self.pod["volumes"].as_array().into_iter().flatten().map(|v| (v["name"].as_str().unwrap(), v)).collect();
        let claims: BTreeSet<&str> = of_kind(self.documents, "StatefulSet")
            .iter()
            .flat_map(|s| s["spec"]["volumeClaimTemplates"].as_array().into_iter().flatten())
            .map(|c| c["metadata"]["name"].as_str().unwrap())
            .collect();
        let mut mounts = Vec::new();
        for mount in self.container["volumeMounts"].as_array().into_iter().flatten() {
            let name = mount["name"].as_str().unwrap();
            let local = dir.join(name);
            std::fs::create_dir_all(&local).unwrap();
            let files: BTreeMap<String, Vec<u8>> = match volumes.get(name) {
                Some(volume) if volume["configMap"].is_object() => self
                    .config_map(volume["configMap"]["name"].as_str().unwrap())
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().as_bytes().to_vec()))
                    .collect(),
                Some(volume) if volume["secret"].is_object() => {
                    material.secret(volume["secret"]["secretName"].as_str().unwrap())
                }
                Some(volume) if volume["emptyDir"].is_object() => BTreeMap::new(),
                None if claims.contains(name) => BTreeMap::new(),
                _ => panic!("{}: the volume {name} is mounted but neither defined nor claimed", self.what),
            };
            for (file, bytes) in files {
                std::fs::write(local.join(file), bytes).unwrap();
            }
            mounts.push((mount["mountPath"].as_str().unwrap().to_owned(), local));
        }
        mounts
    }

    /// Starts the node with the manifest's arguments: mounted paths point
    /// into `dir`, `--listen` to 127.0.0.1 and a free port, `--advertise`
    /// there, `--etcd` to `etcd`.
    fn start(&self, dir: &Path, material: &Material, etcd: Option<&str>) -> Started {
        let mounts = self.mounts(dir, material);
        let local = |value: &str| {
            for (mount, path) in &mounts {
                if let Some(rest) = value.strip_prefix(mount.as_str()) {
                    return format!("{}{rest}", path.display());
                }
            }
            value.to_owned()
        };
        let environment = self.environment(material);
        let port = node::free_port();
        let scheme = if self.flag("tls-cert").is_some() { "https" } else { "http" };
        let mut args = vec!["serve".to_owned()];
        for (name, value) in &self.serve {
            let value = value.as_deref().map(|v| match name.as_str() {
                "listen" => format!("127.0.0.1:{port}"),
                "advertise" => format!("{scheme}://127.0.0.1:{port}"),
                "etcd" => etcd.expect("--etcd in an overlay without etcd").to_owned(),
                _ => local(&expand(v, &environment)),
            });
            args.push(match value {
                Some(value) => format!("--{name}={value}"),
                None => format!("--{name}"),
            });
        }
        let mut command = node::command();
        command.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (name, value) in &environment {
            command.env(name, local(value));
        }
        let mut child = command.spawn().expect("spawn shardalloc serve");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let stderr = BufReader::new(child.stderr.take().unwrap());
        for (reader, tx) in [(Box::new(stdout) as Box<dyn BufRead + Send>, Some(tx)), (Box::new(stderr), None)] {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in reader.lines().map_while(Result::ok) {
                    if line.starts_with("shardalloc listening on")
                        && let Some(tx) = &tx
                    {
                        let _ = tx.send(line.clone());
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let started = Started { child, base: format!("{scheme}://127.0.0.1:{port}"), log };
        let line = rx
            .recv_timeout(START_TIMEOUT)
            .unwrap_or_else(|_| panic!("{}: the node started with {args:?} did not print its address", self.what));
        assert!(line.contains(&format!("{scheme}://127.0.0.1:{port}")), "{}: {line}", self.what);
        started
    }
}

/// The probes' ports and paths agree with the node's port; answers the
/// paths to ask the running node.
fn check_ports(c: &Container) -> Vec<String> {
    let listen = c.flag("listen").unwrap_or_else(|| panic!("{}: no --listen", c.what));
    let port: u64 = listen.rsplit(':').next().unwrap().parse().unwrap();
    let ports = c.container["ports"].as_array().expect("container ports");
    let named: BTreeMap<&str, u64> =
        ports.iter().map(|p| (p["name"].as_str().unwrap_or_default(), p["containerPort"].as_u64().unwrap())).collect();
    assert_eq!(named.get("http"), Some(&port), "{}: containerPort `http` is not --listen's port {port}", c.what);
    let scheme = if c.flag("tls-cert").is_some() { "HTTPS" } else { "HTTP" };
    let mut paths = Vec::new();
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let get = &c.container[probe]["httpGet"];
        assert!(get.is_object(), "{}: no {probe} with httpGet", c.what);
        let probe_port = match &get["port"] {
            Value::String(name) => {
                *named.get(name.as_str()).unwrap_or_else(|| panic!("{}: {probe} port {name}", c.what))
            }
            Value::Number(n) => n.as_u64().unwrap(),
            other => panic!("{}: {probe} port {other}", c.what),
        };
        assert_eq!(probe_port, port, "{}: {probe} is not on the node's port", c.what);
        assert_eq!(get["scheme"].as_str().unwrap_or("HTTP"), scheme, "{}: {probe}'s scheme", c.what);
        paths.push(get["path"].as_str().unwrap().to_owned());
    }
    assert_eq!(c.container["livenessProbe"]["httpGet"]["path"], "/livez", "{}: liveness is /livez", c.what);
    let annotations = &c.documents.iter().find(|d| d["kind"] == "StatefulSet").unwrap()["spec"]["template"]["metadata"]
        ["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true", "{}", c.what);
    assert_eq!(annotations["prometheus.io/port"], port.to_string(), "{}: the scrape port", c.what);
    paths.push(annotations["prometheus.io/path"].as_str().unwrap().to_owned());
    paths
}

fn check_security(c: &Container) {
    let pod = &c.pod["securityContext"];
    let container = &c.container["securityContext"];
    let either = |key: &str| if container[key].is_null() { &pod[key] } else { &container[key] };
    assert_eq!(either("runAsNonRoot"), true, "{}", c.what);
    assert_eq!(either("runAsUser"), 10001, "{}", c.what);
    assert_eq!(either("runAsGroup"), 10001, "{}", c.what);
    assert_eq!(either("seccompProfile")["type"], "RuntimeDefault", "{}", c.what);
    assert_eq!(container["readOnlyRootFilesystem"], true, "{}", c.what);
    assert_eq!(container["allowPrivilegeEscalation"], false, "{}", c.what);
    assert_eq!(container["capabilities"]["drop"], serde_json::json!(["ALL"]), "{}", c.what);
    for key in ["requests", "limits"] {
        assert!(c.container["resources"][key]["memory"].is_string(), "{}: no memory {key}", c.what);
    }
}

/// Polls `url` until it answers 200, within `timeout`.
async fn answers_200(client: &reqwest::Client, url: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let answer = client.get(url).send().await;
        let last = match answer {
            Ok(response) if response.status() == 200 => return Ok(()),
            Ok(response) => format!("{}: {}", response.status(), response.text().await.unwrap_or_default()),
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every check of one overlay; `etcd` for an overlay on etcd.
async fn check_overlay(overlay: &str, etcd: Option<&str>) -> Vec<Value> {
    let documents = render(overlay);
    let flags = Flags::of("serve");
    let containers = shardalloc_containers(&documents);
    assert!(!containers.is_empty(), "{overlay}: no shardalloc container");
    let material = Material::new();
    let tls = shardalloc_client::tls::client_config(Some(&material.cert())).unwrap();
    let client = reqwest::Client::builder()
        .use_preconfigured_tls((*tls).clone())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for (pod, container) in containers {
        let what = format!("{overlay}: container {}", container["name"]);
        assert_eq!(strings(&container["command"]), ["shardalloc"], "{what}: the command");
        let args = strings(&container["args"]);
        assert_eq!(args.first().map(String::as_str), Some("serve"), "{what}: the subcommand");
        let serve = flags.check(&what, &args[1..]);
        for variable in container["env"].as_array().into_iter().flatten() {
            let name = variable["name"].as_str().unwrap();
            if name.starts_with("SHARDALLOC_") {
                assert!(
                    flags.env.contains(name) || process_variable(name),
                    "{what}: {name} is not a variable `shardalloc serve` reads"
                );
            }
        }
        let c = Container { what, documents: &documents, pod, container, serve };
        check_security(&c);
        let paths = check_ports(&c);
        let dir = tempfile::tempdir().unwrap();
        let node = c.start(dir.path(), &material, etcd);
        for path in &paths {
            let url = format!("{}{path}", node.base);
            if let Err(last) = answers_200(&client, &url, PROBE_TIMEOUT).await {
                panic!("{}: {path} does not answer 200 on a fresh node: {last}", c.what);
            }
        }
    }
    documents
}

#[tokio::test(flavor = "multi_thread")]
async fn the_single_overlay_runs_one_node_on_a_claim_and_its_probes_answer() {
    let documents = check_overlay("single", None).await;
    let sets = of_kind(&documents, "StatefulSet");
    assert_eq!(sets.len(), 1);
    let set = sets[0];
    assert_eq!(set["spec"]["replicas"], 1);
    let claims = &set["spec"]["volumeClaimTemplates"];
    assert_eq!(claims[0]["metadata"]["name"], "data", "the redb store's claim");
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    assert!(strings(&container["args"]).iter().all(|a| !a.starts_with("--etcd")), "single is not on etcd");
    assert!(!of_kind(&documents, "Service").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ha_overlay_runs_three_nodes_on_etcd_and_their_probes_answer() {
    let etcd = tokio::task::spawn_blocking(etcd::Etcd::start).await.unwrap();
    let documents = check_overlay("ha", Some(&etcd.url)).await;
    let set = of_kind(&documents, "StatefulSet")[0];
    assert_eq!(set["spec"]["replicas"], 3);
    let pod = &set["spec"]["template"]["spec"];
    let args = strings(&pod["containers"][0]["args"]);
    for flag in ["--etcd=", "--advertise=", "--node-name="] {
        assert!(args.iter().any(|a| a.starts_with(flag)), "ha: no {flag}…: {args:?}");
    }
    let zones = pod["topologySpreadConstraints"].as_array().expect("topologySpreadConstraints");
    assert!(zones.iter().any(|t| t["topologyKey"] == "topology.kubernetes.io/zone"), "ha: no spread across zones");
    let budgets = of_kind(&documents, "PodDisruptionBudget");
    assert_eq!(budgets.len(), 1, "ha: one PodDisruptionBudget");
    assert_eq!(budgets[0]["spec"]["maxUnavailable"], 1);
    assert_eq!(
        budgets[0]["spec"]["selector"]["matchLabels"], set["spec"]["selector"]["matchLabels"],
        "ha: the budget selects the nodes"
    );
    let headless = of_kind(&documents, "Service").into_iter().find(|s| s["spec"]["clusterIP"] == "None");
    assert_eq!(headless.expect("a headless Service")["metadata"]["name"], set["spec"]["serviceName"]);
}

#[test]
fn the_example_region_uses_real_flags_and_drains_in_its_pre_stop_hook() {
    let text = std::fs::read_to_string(root().join("deploy/kubernetes/examples/region.yaml")).unwrap();
    let documents = documents(&text);
    let (regions, drain) = (Flags::of("regions"), Flags::of("drain"));
    let containers = shardalloc_containers(&documents);
    assert_eq!(containers.len(), 1, "one region container");
    let (pod, container) = containers[0];
    assert_eq!(strings(&container["command"]), ["shardalloc"]);
    let args = strings(&container["args"]);
    assert_eq!(args[0], "regions");
    regions.check("region", &args[1..]);
    let hook = strings(&container["lifecycle"]["preStop"]["exec"]["command"]);
    assert_eq!(hook[..2], ["shardalloc", "drain"], "the preStop hook drains");
    let hook_flags = drain.check("preStop", &hook[2..]);
    let wait: u64 =
        hook_flags.iter().find(|(n, _)| n == "wait").and_then(|(_, v)| v.as_ref()).expect("--wait").parse().unwrap();
    let grace = pod["terminationGracePeriodSeconds"].as_u64().expect("terminationGracePeriodSeconds");
    assert!(grace > wait, "the grace period ({grace} s) must outlast the drain's wait ({wait} s)");
    let env: Vec<&str> = container["env"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    for name in env.iter().filter(|n| n.starts_with("SHARDALLOC_")) {
        assert!(
            regions.env.contains(*name) || drain.env.contains(*name),
            "{name} is read by neither `shardalloc regions` nor `shardalloc drain`"
        );
    }
    assert!(env.contains(&"SHARDALLOC_REGION") && drain.env.contains("SHARDALLOC_REGION"), "the hook names its region");
}
