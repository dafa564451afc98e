//! The system packages xtask installs, read from the one list in
//! `docs/development.md` (embedded at compile time): each package with the
//! program it brings and the commands that need it. [`ensure`] installs,
//! before a command runs, what that command needs and the machine lacks.

use std::process::Command;

use anyhow::{Context, bail};

/// The document that holds the list.
const DOCUMENT: &str = include_str!("../../docs/development.md");

/// The commands (and the one situation) the list may name.
pub const COMMANDS: [&str; 12] = [
    "test",
    "clients",
    "demo --ha",
    "ha-faults",
    "soak --etcd",
    "screenshots",
    "examples",
    "c-example",
    "bench",
    "image",
    "kubernetes",
    "wasm-fallback",
];

/// One row of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// The Debian package.
    pub name: String,
    /// A program it puts on the PATH, when it has one worth checking.
    pub program: Option<String>,
    /// The commands that need it.
    pub needed_by: Vec<String>,
}

/// Every package in the list, in its order.
pub fn list() -> anyhow::Result<Vec<Package>> {
    parse(DOCUMENT)
}

fn parse(document: &str) -> anyhow::Result<Vec<Package>> {
    let begin = document.find("<!-- packages:begin -->").context("docs/development.md has no packages:begin marker")?;
    let end = document.find("<!-- packages:end -->").context("docs/development.md has no packages:end marker")?;
    let unquote = |cell: &str| cell.trim().trim_matches('`').to_owned();
    let mut packages = Vec::new();
    for (number, line) in document[begin..end].lines().enumerate().skip(1) {
        let line = line.trim();
        if line.is_empty() || line.starts_with("| package") || line.starts_with("| ---") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        if cells.len() != 4 {
            bail!("docs/development.md, package table line {number}: {line:?} has {} cells, not 4", cells.len());
        }
        let program = unquote(cells[1]);
        let needed_by: Vec<String> = cells[2].split(',').map(unquote).filter(|c| !c.is_empty()).collect();
        if let Some(unknown) = needed_by.iter().find(|c| !COMMANDS.contains(&c.as_str())) {
            bail!("docs/development.md: package {} is needed by {unknown:?}, which is no xtask command", cells[0]);
        }
        packages.push(Package {
            name: unquote(cells[0]),
            program: (program != "—" && !program.is_empty()).then_some(program),
            needed_by,
        });
    }
    if packages.is_empty() {
        bail!("docs/development.md: the package table is empty");
    }
    Ok(packages)
}

/// The packages `command` needs.
pub fn needed_by(command: &str) -> anyhow::Result<Vec<Package>> {
    Ok(list()?.into_iter().filter(|p| p.needed_by.iter().any(|c| c == command)).collect())
}

/// True when dpkg knows `package` as installed (or there is no dpkg to ask).
fn installed(package: &str) -> bool {
    match Command::new("dpkg-query").args(["-W", "-f=${Status}", package]).output() {
        Ok(output) => String::from_utf8_lossy(&output.stdout).contains("install ok installed"),
        Err(_) => true,
    }
}

/// True when `program` is on the PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Installs what `command` needs from the list and the machine lacks, with
/// `apt-get`; fails naming the packages it could not install.
pub fn ensure(command: &str) -> anyhow::Result<()> {
    let missing: Vec<String> = needed_by(command)?
        .into_iter()
        .filter(|p| !installed(&p.name) || p.program.as_deref().is_some_and(|program| !on_path(program)))
        .map(|p| p.name)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    install(&missing).with_context(|| format!("`cargo xtask {command}` needs them (docs/development.md)"))
}

/// `apt-get install`s `packages`.
pub fn install(packages: &[String]) -> anyhow::Result<()> {
    eprintln!("xtask: installing Debian's {}", packages.join(", "));
    let _ = Command::new("apt-get").arg("update").env("DEBIAN_FRONTEND", "noninteractive").status();
    let status = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("run apt-get")?;
    if !status.success() {
        bail!(
            "could not install Debian's {}: apt-get install {} failed ({status})",
            packages.join(", "),
            packages.join(" ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_in_development_md_parses_and_names_only_real_commands() {
        let packages = list().unwrap();
        assert!(packages.iter().any(|p| p.name == "etcd-server" && p.program.as_deref() == Some("etcd")));
        assert!(packages.iter().all(|p| !p.needed_by.is_empty()), "every package is needed by something");
    }

    #[test]
    fn the_demo_of_one_node_needs_nothing_and_ha_needs_etcd_only() {
        assert!(needed_by("demo").unwrap().is_empty());
        let ha: Vec<String> = needed_by("demo --ha").unwrap().into_iter().map(|p| p.name).collect();
        assert_eq!(ha, ["etcd-server"]);
    }

    #[test]
    fn a_row_naming_an_unknown_command_is_refused() {
        let document = "<!-- packages:begin -->\n| package | program | needed by | why |\n| --- | --- | --- | --- |\n\
                        | `x` | — | `tset` | typo |\n<!-- packages:end -->";
        let error = parse(document).unwrap_err().to_string();
        assert!(error.contains("\"tset\""), "{error}");
    }
}
