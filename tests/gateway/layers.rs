//! The layer rule of `docs/ARCHITECTURE.md`: every top-level module of
//! `src/` sits on a floor, and names (`crate::X`, in code or docs) only
//! modules on floors below its own. The floors are read from the table in
//! the architecture page, so the rule written down is the rule checked; a
//! new module must be given a floor there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The floors, from the fenced `layers` block of the architecture page:
/// `N  module module …` lines.
fn floors() -> BTreeMap<String, u32> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md");
    let text = std::fs::read_to_string(&page).expect("docs/ARCHITECTURE.md reads");
    let block = text
        .split("```layers\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```layers block in docs/ARCHITECTURE.md");
    let mut floors = BTreeMap::new();
    for line in block.lines().filter(|line| !line.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let floor: u32 = words
            .next()
            .and_then(|word| word.parse().ok())
            .unwrap_or_else(|| panic!("a floor number first: {line:?}"));
        for module in words {
            assert!(
                floors.insert(module.to_owned(), floor).is_none(),
                "{module} is on two floors"
            );
        }
    }
    floors
}

/// The top-level modules of `src/` and the files of each.
fn modules() -> BTreeMap<String, Vec<PathBuf>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("src reads").flatten() {
        let path = entry.path();
        let name = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .expect("a file name")
            .to_owned();
        if name == "lib" || name == "main" {
            continue;
        }
        let files = modules.entry(name).or_default();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    modules
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a folder reads").flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// The top-level modules `text` names as `crate::X` or `crate::{X, …}`.
fn named_modules(text: &str) -> Vec<String> {
    let mut named = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            named.extend(group.split(',').filter_map(first_word));
        } else if let Some(word) = first_word(rest) {
            named.push(word);
        }
    }
    named
}

fn first_word(text: &str) -> Option<String> {
    let word: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

#[test]
fn every_module_imports_only_modules_on_lower_floors() {
    let floors = floors();
    let modules = modules();
    let mut broken = Vec::new();
    for (module, files) in &modules {
        let Some(&floor) = floors.get(module) else {
            broken.push(format!("{module} has no floor in docs/ARCHITECTURE.md"));
            continue;
        };
        for file in files {
            let text = std::fs::read_to_string(file).expect("a source file reads");
            for named in named_modules(&text) {
                if named == *module || !modules.contains_key(&named) {
                    continue;
                }
                let other = floors.get(&named).copied().unwrap_or(u32::MAX);
                if other >= floor {
                    broken.push(format!(
                        "{} (floor {floor}) names {named} (floor {other})",
                        file.display()
                    ));
                }
            }
        }
    }
    broken.sort();
    broken.dedup();
    assert!(
        broken.is_empty(),
        "layer rule broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_store_names_nothing_but_the_domain() {
    let modules = modules();
    for file in &modules["store"] {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for named in named_modules(&text) {
            assert!(
                named == "domain" || named == "store" || !modules.contains_key(&named),
                "{} names {named}",
                file.display()
            );
        }
    }
}

#[test]
fn named_modules_are_found_in_paths_groups_and_docs() {
    let text =
        "use crate::store::Store;\nuse crate::{telemetry, terminal};\n/// [`x`](crate::agent::Y)";
    assert_eq!(
        named_modules(text),
        ["store", "telemetry", "terminal", "agent"]
    );
}
