//! The error codes are one enum, [`ErrorCode`]: the OpenAPI document lists
//! it, docs/operations.md describes every word, and no code is spelt out
//! anywhere else in the server.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::server::api_error::ErrorCode;
use crate::server::document;

fn words() -> BTreeSet<&'static str> {
    ErrorCode::ALL.iter().map(|code| code.as_str()).collect()
}

#[test]
fn the_document_lists_every_error_code_as_an_enum() {
    let document: Value = serde_json::from_str(document()).expect("the document is JSON");
    let schemas = &document["components"]["schemas"];
    let listed: Vec<&str> = schemas["ErrorCode"]["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("ErrorCode is not an enum: {}", schemas["ErrorCode"]))
        .iter()
        .map(|word| word.as_str().expect("a word"))
        .collect();
    let all: Vec<&str> = ErrorCode::ALL.iter().map(|code| code.as_str()).collect();
    assert_eq!(listed, all);
    assert_eq!(schemas["ErrorCode"]["type"], "string", "{}", schemas["ErrorCode"]);
    // An error's code is that enum.
    let code = &schemas["ErrorDetail"]["properties"]["code"];
    assert_eq!(code["$ref"], "#/components/schemas/ErrorCode", "{code}");
}

/// The rows of the table under docs/operations.md's "Error codes": each
/// row's code (its first cell, in backticks) and status (its second).
fn documented_codes() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
    let guide = std::fs::read_to_string(path).expect("docs/operations.md");
    let (_, section) = guide.split_once("\n## Error codes\n").expect("docs/operations.md has a section Error codes");
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut rows = Vec::new();
    for line in section.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        rows.push((cells[1].trim_matches('`').to_owned(), cells[2].to_owned()));
    }
    rows
}

#[test]
fn every_error_code_is_described_in_the_operations_guide() {
    let rows = documented_codes();
    let documented: BTreeSet<&str> = rows.iter().map(|(code, _)| code.as_str()).collect();
    let all = words();
    let missing: Vec<&&str> = all.iter().filter(|word| !documented.contains(**word)).collect();
    assert!(missing.is_empty(), "docs/operations.md, \"Error codes\", does not describe {missing:?}");
    let unknown: Vec<&&str> = documented.iter().filter(|code| !all.contains(**code)).collect();
    assert!(unknown.is_empty(), "docs/operations.md, \"Error codes\", describes codes that do not exist: {unknown:?}");
    assert_eq!(rows.len(), documented.len(), "a code is described twice");
    // Each row gives the status the code is answered with.
    for (code, status) in &rows {
        assert!(status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()), "{code}: status {status:?}");
    }
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "tests") {
                rust_files(&path, found);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && !path.file_stem().is_some_and(|stem| stem.to_string_lossy().ends_with("_tests"))
        {
            found.push(path);
        }
    }
}

/// Every code the server answers is an [`ErrorCode`] variant: none is
/// written as a string, outside comments and tests.
#[test]
fn no_error_code_is_spelt_out_in_the_server() {
    let mut files = Vec::new();
    rust_files(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src/server")), &mut files);
    assert!(files.len() > 30, "only {} files found", files.len());
    let quoted: Vec<(String, &str)> = words().into_iter().map(|word| (format!("\"{word}\""), word)).collect();
    let mut found = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a readable file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (spelt, word) in &quoted {
                if line.contains(spelt.as_str()) {
                    found.push(format!("{}:{}: {word}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "error codes spelt out instead of ErrorCode::…:\n{}", found.join("\n"));
}
