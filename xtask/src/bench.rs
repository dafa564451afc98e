//! `cargo xtask bench`: every benchmark in one run, then one table of
//! ratios read from criterion's results, followed by the figures the
//! benchmarks print themselves (memory, latencies, propagation). The whole
//! report is also written to `target/bench-report.md`.
//!
//! Their measurements are not part of `cargo xtask test`: they take long
//! and prove nothing on a noisy machine except ratios within one run. What
//! `test` does run is [`smoke`]: every benchmark built in a debug build and
//! run once at a tiny size (`SHARDALLOC_BENCH_SMOKE=1`, described in
//! `host/benches/common/mod.rs`), so a benchmark that panics or no longer
//! speaks the protocol fails CI instead of rotting until the next
//! measurement. `cargo xtask bench --smoke` runs that step alone (it does
//! not build the example strategies: without them the `examples` benchmark
//! says so and skips).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};

use crate::tests::Tally;

/// Every benchmark of the host crate, in the order they run.
const BENCHES: [&str; 8] =
    ["strategies", "examples", "node", "propagation", "placements", "stores", "restart", "message_path"];

/// The environment variable that puts the benchmarks in smoke mode.
const SMOKE: &str = "SHARDALLOC_BENCH_SMOKE";

/// Longest a benchmark may take in smoke mode before it is killed and
/// counted as failed (each takes seconds; a hang must not stall CI).
const SMOKE_TIMEOUT: Duration = Duration::from_secs(300);

/// Functions that are the baseline of their group's ratios, by preference.
const BASELINES: [&str; 3] = ["native", "least-shard", "redb"];

/// The function that measures the floor of one crossing (an empty
/// component call, `empty-call`): listed under its group's table, with how
/// far `engine` is above the baseline plus that floor.
const FLOOR: &str = "floor";

/// One criterion result.
#[derive(Debug)]
struct Measured {
    group: String,
    function: String,
    parameter: String,
    /// Median time per iteration, nanoseconds.
    median_ns: f64,
    /// Elements per iteration, when the benchmark declared a throughput.
    elements: Option<f64>,
}

pub fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    if args.iter().any(|a| a == "--smoke") {
        if args.len() > 1 {
            bail!("`cargo xtask bench --smoke` runs every benchmark: it takes no names");
        }
        let tally = smoke(root)?;
        eprintln!("xtask: benchmarks in smoke mode: {}", tally.summary());
        if tally.failed > 0 {
            bail!("benchmarks failed in smoke mode ({})", tally.summary());
        }
        return Ok(());
    }
    let only: Vec<&str> = args.iter().map(String::as_str).collect();
    for name in &only {
        if !BENCHES.contains(name) {
            bail!("unknown benchmark {name:?}; the benchmarks are: {}", BENCHES.join(", "));
        }
    }
    let selected: Vec<&str> = BENCHES.iter().copied().filter(|b| only.is_empty() || only.contains(b)).collect();
    if selected.contains(&"examples") {
        // The examples bench calls the four example components.
        crate::packages::ensure("bench")?;
        crate::examples::ensure_built(root)?;
    }
    let started = SystemTime::now();
    let mut command = Command::new(crate::cargo());
    command.args(["bench", "-p", "shardalloc"]).current_dir(root).stdout(Stdio::piped());
    for bench in &selected {
        command.args(["--bench", bench]);
    }
    eprintln!("xtask: {command:?}");
    let mut child = command.spawn().context("could not run cargo bench")?;
    let mut printed = Vec::new();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        if is_report_line(&line) {
            printed.push(line);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    let results = read_results(&crate::target_dir(root).join("criterion"), started)?;
    let ids: std::collections::HashSet<String> = results.iter().flat_map(ids_of).collect();
    printed.retain(|line| !ids.contains(line.trim()));
    let mut report = String::from("# Benchmarks: one run\n\n");
    report.push_str(&table(&results));
    if !printed.is_empty() {
        report.push_str("\n## Figures the benchmarks print\n\n");
        for line in &printed {
            report.push_str(line);
            report.push('\n');
        }
    }
    println!("\n{report}");
    let path = crate::target_dir(root).join("bench-report.md");
    std::fs::File::create(&path)?.write_all(report.as_bytes())?;
    eprintln!("xtask: the report is in {}", path.display());
    Ok(())
}

/// `cargo xtask test`'s benchmark step: builds every benchmark of the host
/// crate as `cargo test` does (`cargo test --workspace --bench '*'
/// --no-run`: a debug build with the tests' features, so only the
/// benchmarks' own binaries compile), then runs each once in smoke mode,
/// in [`BENCHES`]' order, as `cargo test` would (no arguments: criterion's
/// test mode runs each of its benchmarks once; in the crate's directory).
/// Each benchmark counts as one test: passed when it exits with success.
/// A benchmark built but missing from [`BENCHES`] (so `cargo xtask bench`
/// would never run it) fails too. The `examples` benchmark needs the
/// example components: `test` runs this after its example strategies step
/// has built them (without them it prints why and skips).
pub fn smoke(root: &Path) -> anyhow::Result<Tally> {
    let mut command = Command::new(crate::cargo());
    command
        .args(["test", "--locked", "--workspace", "--bench", "*", "--no-run"])
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(root)
        .stdout(Stdio::piped());
    eprintln!("xtask: {command:?}");
    let output = command.spawn().context("could not run cargo test")?.wait_with_output()?;
    if !output.status.success() {
        bail!("building the benchmarks failed ({})", output.status);
    }
    let built = executables(&String::from_utf8_lossy(&output.stdout));
    let mut tally = Tally::default();
    for (name, _) in built.iter().filter(|(name, _)| !BENCHES.contains(&name.as_str())) {
        tally.failed += 1;
        eprintln!("xtask: benchmark {name} is not in xtask/src/bench.rs's BENCHES: `cargo xtask bench` never runs it");
    }
    for name in BENCHES {
        let Some((_, executable)) = built.iter().find(|(built, _)| built == name) else {
            tally.failed += 1;
            eprintln!("xtask: benchmark {name} was not built");
            continue;
        };
        eprintln!("xtask: benchmark {name}, smoke mode: {}", executable.display());
        let started = Instant::now();
        match run_once(executable, &root.join("host")) {
            Ok(()) => {
                tally.passed += 1;
                eprintln!("xtask: benchmark {name}, smoke mode: ok in {:.1?}", started.elapsed());
            }
            Err(error) => {
                tally.failed += 1;
                eprintln!("xtask: benchmark {name}, smoke mode: FAILED after {:.1?}: {error:#}", started.elapsed());
            }
        }
    }
    Ok(tally)
}

/// The benchmarks' executables in `cargo --message-format json`'s output:
/// (name, path).
fn executables(messages: &str) -> Vec<(String, PathBuf)> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| message["target"]["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "bench")))
        .filter_map(|message| {
            let name = message["target"]["name"].as_str()?.to_owned();
            Some((name, PathBuf::from(message["executable"].as_str()?)))
        })
        .collect()
}

/// Runs one benchmark's executable in smoke mode in `dir`; fails when it
/// fails or outlasts [`SMOKE_TIMEOUT`] (then it is killed).
fn run_once(executable: &Path, dir: &Path) -> anyhow::Result<()> {
    let mut child = Command::new(executable)
        .env(SMOKE, "1")
        .current_dir(dir)
        .spawn()
        .with_context(|| format!("could not run {}", executable.display()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("it exited with {status}");
            }
            return Ok(());
        }
        if started.elapsed() > SMOKE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("it did not finish in {SMOKE_TIMEOUT:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Lines a benchmark printed itself (not criterion's own output). A line
/// naming a benchmark alone (criterion's header for a long id) is dropped
/// later, when the ids are known.
fn is_report_line(line: &str) -> bool {
    const CRITERION: [&str; 12] = [
        "time:   [",
        "thrpt:  [",
        "change: [",
        "(p = ",
        "high mild",
        "high severe",
        "low mild",
        "low severe",
        "Performance has",
        "No change in performance",
        "Change within noise",
        "outliers among",
    ];
    let criterion = line.starts_with("Benchmarking")
        || line.trim_start().starts_with("change:")
        || line.starts_with("Running ")
        || line.starts_with("Gnuplot")
        || line.trim().is_empty()
        || CRITERION.iter().any(|c| line.contains(c));
    !criterion
}

/// The ways criterion names a result on a line of its own.
fn ids_of(r: &Measured) -> Vec<String> {
    let parts: Vec<&str> =
        [r.group.as_str(), r.function.as_str(), r.parameter.as_str()].into_iter().filter(|p| !p.is_empty()).collect();
    vec![parts.join("/")]
}

/// Every result criterion wrote since `since` under `dir`.
fn read_results(dir: &Path, since: SystemTime) -> anyhow::Result<Vec<Measured>> {
    let mut found = Vec::new();
    collect(dir, &mut found)?;
    let mut results = Vec::new();
    for new in found {
        let estimates = new.join("estimates.json");
        let fresh = std::fs::metadata(&estimates).and_then(|m| m.modified()).is_ok_and(|t| t >= since);
        if !fresh {
            continue;
        }
        let estimates: serde_json::Value = serde_json::from_slice(&std::fs::read(&estimates)?)?;
        let benchmark: serde_json::Value = serde_json::from_slice(&std::fs::read(new.join("benchmark.json"))?)?;
        let text = |key: &str| benchmark[key].as_str().unwrap_or_default().to_owned();
        results.push(Measured {
            group: text("group_id"),
            function: text("function_id"),
            parameter: text("value_str"),
            median_ns: estimates["median"]["point_estimate"].as_f64().context("a median")?,
            elements: benchmark["throughput"]["Elements"].as_f64(),
        });
    }
    Ok(results)
}

/// The `new` result directories under `dir`.
fn collect(dir: &Path, found: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "new") && path.join("estimates.json").exists() {
                found.push(path);
            } else if path.file_name().is_some_and(|n| n != "report" && n != "base") {
                collect(&path, found)?;
            }
        }
    }
    Ok(())
}

/// One markdown table per group: a row per input, a column per function,
/// and each function's ratio to the group's baseline.
fn table(results: &[Measured]) -> String {
    let mut groups: BTreeMap<&str, Vec<&Measured>> = BTreeMap::new();
    for r in results {
        groups.entry(&r.group).or_default().push(r);
    }
    let mut out = String::new();
    for (group, results) in groups {
        let (floors, results): (Vec<&Measured>, Vec<&Measured>) = results.iter().partition(|r| r.function == FLOOR);
        if results.is_empty() {
            continue;
        }
        let mut functions: Vec<&str> = results.iter().map(|r| r.function.as_str()).collect();
        functions.sort();
        functions.dedup();
        let known = BASELINES.iter().copied().find(|b| functions.contains(b));
        let baseline = known.unwrap_or(functions[0]);
        functions.retain(|f| *f != baseline);
        functions.insert(0, baseline);
        // Ratios only against a baseline that means something (native,
        // least-shard, redb); other groups list their times.
        let ratios = if known.is_some() { functions.len() - 1 } else { 0 };
        let mut parameters: Vec<&str> = results.iter().map(|r| r.parameter.as_str()).collect();
        parameters.sort_by_key(|p| natural_key(p));
        parameters.dedup();
        out.push_str(&format!("## {group}\n\n| input |"));
        for f in &functions {
            out.push_str(&format!(" {} |", display_function(f)));
        }
        for f in functions.iter().skip(1).take(ratios) {
            out.push_str(&format!(" {} / {} |", display_function(f), display_function(baseline)));
        }
        out.push_str("\n| --- |");
        out.push_str(&" ---: |".repeat(functions.len() + ratios));
        out.push('\n');
        let first = results.iter().find(|r| r.function == baseline && r.parameter == parameters[0]);
        for p in &parameters {
            let cell = |f: &str| results.iter().find(|r| r.function == f && r.parameter == *p);
            out.push_str(&format!("| {} |", if p.is_empty() { "—" } else { p }));
            for f in &functions {
                out.push_str(&format!(" {} |", cell(f).map(describe).unwrap_or_else(|| "—".into())));
            }
            let base = cell(baseline);
            for f in functions.iter().skip(1).take(ratios) {
                let ratio = match (cell(f), base) {
                    (Some(x), Some(b)) => format!("{:.2}×", x.median_ns / b.median_ns),
                    _ => "—".into(),
                };
                out.push_str(&format!(" {ratio} |"));
            }
            out.push('\n');
        }
        // A single function over several inputs (sessions, stores): each
        // input's throughput against the first input's.
        if functions.len() == 1 && parameters.len() > 1 {
            let rates: Vec<String> = parameters
                .iter()
                .filter_map(|p| {
                    let r = results.iter().find(|r| r.parameter == *p)?;
                    let first = first?;
                    Some(match (r.elements, first.elements) {
                        (Some(e), Some(e0)) => {
                            format!("{p}: {:.2}×", (e / r.median_ns) / (e0 / first.median_ns))
                        }
                        _ => format!("{p}: {:.2}× the time", r.median_ns / first.median_ns),
                    })
                })
                .collect();
            out.push_str(&format!("\nthroughput against {}: {}\n", parameters[0], rates.join(", ")));
        }
        if !floors.is_empty() {
            let listed: Vec<String> = floors.iter().map(|f| format!("{} {}", f.parameter, describe(f))).collect();
            out.push_str(&format!("\none crossing ({FLOOR}): {}\n", listed.join(", ")));
            let empty = floors.iter().find(|f| f.parameter == "empty-call");
            if let (Some(empty), Some(baseline)) = (empty, known) {
                let over: Vec<String> = parameters
                    .iter()
                    .filter_map(|p| {
                        let cell = |f: &str| results.iter().find(|r| r.function == f && r.parameter == *p);
                        let extra = cell("engine")?.median_ns - cell(baseline)?.median_ns - empty.median_ns;
                        Some(format!("{p}: {}{}", if extra < 0.0 { "−" } else { "+" }, format_ns(extra.abs())))
                    })
                    .collect();
                if !over.is_empty() {
                    out.push_str(&format!("engine over {baseline} + one empty call: {}\n", over.join(", ")));
                }
            }
        }
        out.push('\n');
    }
    out
}

fn display_function(function: &str) -> &str {
    if function.is_empty() { "time" } else { function }
}

/// Median time, and the rate when the benchmark declared a throughput.
fn describe(r: &&Measured) -> String {
    let time = format_ns(r.median_ns);
    match r.elements {
        Some(elements) => format!("{time} ({:.0}/s)", elements / (r.median_ns / 1e9)),
        None => time,
    }
}

fn format_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Sorts `10r-100000s` after `1r…` and `16` after `4`: digits by value.
fn natural_key(text: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut number = String::new();
    let mut rest = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !rest.is_empty() {
                key.push((u64::MAX, std::mem::take(&mut rest)));
            }
            number.push(c);
        } else {
            if !number.is_empty() {
                key.push((number.parse().unwrap_or(u64::MAX), String::new()));
                number.clear();
            }
            rest.push(c);
        }
    }
    if !number.is_empty() {
        key.push((number.parse().unwrap_or(u64::MAX), String::new()));
    }
    if !rest.is_empty() {
        key.push((u64::MAX, rest));
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(group: &str, function: &str, parameter: &str, median_ns: f64) -> Measured {
        Measured {
            group: group.into(),
            function: function.into(),
            parameter: parameter.into(),
            median_ns,
            elements: None,
        }
    }

    #[test]
    fn ratios_are_against_the_native_baseline_with_inputs_in_numeric_order() {
        let results = vec![
            measured("allocate", "engine", "100r", 400.0),
            measured("allocate", "native", "100r", 200.0),
            measured("allocate", "native", "10r", 50.0),
            measured("allocate", "engine", "10r", 150.0),
        ];
        let table = table(&results);
        assert_eq!(
            table,
            "## allocate\n\n| input | native | engine | engine / native |\n| --- | ---: | ---: | ---: |\n\
             | 10r | 50 ns | 150 ns | 3.00× |\n| 100r | 200 ns | 400.00 ns | 2.00× |\n\n"
                .replace("400.00 ns", "400 ns")
        );
    }

    #[test]
    fn the_floor_is_listed_with_the_engine_above_native_plus_one_crossing() {
        let results = vec![
            measured("allocate", "floor", "empty-call", 300.0),
            measured("allocate", "floor", "scalar-call", 320.0),
            measured("allocate", "native", "10r", 100.0),
            measured("allocate", "engine", "10r", 1_500.0),
            measured("allocate", "native", "100r", 200.0),
            measured("allocate", "engine", "100r", 450.0),
        ];
        let table = table(&results);
        assert!(table.starts_with("## allocate\n\n| input | native | engine | engine / native |\n"), "{table}");
        assert!(!table.contains("| empty-call |"), "the floor is not a row: {table}");
        assert!(table.contains("\none crossing (floor): empty-call 300 ns, scalar-call 320 ns\n"), "{table}");
        assert!(table.contains("engine over native + one empty call: 10r: +1.10 µs, 100r: −50 ns\n"), "{table}");
    }

    #[test]
    fn one_function_over_inputs_compares_throughput() {
        let mut one = measured("home_requests", "sessions", "1", 10e6);
        one.elements = Some(1_000.0);
        let mut four = measured("home_requests", "sessions", "4", 20e6);
        four.elements = Some(4_000.0);
        let table = table(&[four, one]);
        assert!(table.contains("| 1 | 10.00 ms (100000/s) |"), "{table}");
        assert!(table.contains("throughput against 1: 1: 1.00×, 4: 2.00×"), "{table}");
    }

    #[test]
    fn groups_without_a_baseline_list_times_only() {
        let table = table(&[measured("swap", "activate", "", 2_000.0), measured("swap", "allocate", "", 1_000.0)]);
        assert_eq!(
            table,
            "## swap\n\n| input | activate | allocate |\n| --- | ---: | ---: |\n| — | 2.00 µs | 1.00 µs |\n\n"
        );
        assert_eq!(ids_of(&measured("allocate", "native", "10r", 1.0)), ["allocate/native/10r"]);
    }

    #[test]
    fn the_benchmarks_executables_are_read_from_cargos_messages() {
        let messages = [
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"shardalloc"},"executable":null}"#,
            r#"{"reason":"compiler-artifact","target":{"kind":["bench"],"name":"node"},"executable":"/t/node-1"}"#,
            r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"shardalloc"},"executable":"/t/s"}"#,
            "not JSON",
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(executables(&messages), [("node".to_owned(), PathBuf::from("/t/node-1"))]);
    }

    #[test]
    fn criterion_lines_are_not_report_lines() {
        assert!(!is_report_line("Benchmarking allocate/native/10r: Warming up for 500.00 ms"));
        assert!(!is_report_line("allocate/native/10r      time:   [1.0 µs 1.1 µs 1.2 µs]"));
        assert!(is_report_line("node memory (RSS): empty 36 MiB"));
        assert!(is_report_line("| 1 | homed | 2000 | 40 µs | 90 µs |"));
        assert!(is_report_line("                0 |   5003 (1.00×) |    1.4 ms |"));
        assert!(!is_report_line("Found 2 outliers among 10 measurements (20.00%)"));
        assert!(!is_report_line("  1 (10.00%) high mild"));
        assert!(!is_report_line("                        change:"));
    }
}
