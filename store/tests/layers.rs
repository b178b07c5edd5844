//! The files of `store/src` import one another one way only: no file reaches, through its
//! `use crate::...` lines and `crate::...` paths, back to itself. A child module (a file under
//! a folder named after its parent, `vectors/ivf.rs`) belongs to its parent and is read with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every top-level module of the crate, with the modules its code names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut code: BTreeMap<String, String> = BTreeMap::new();
    for entry in walk(&src) {
        let relative = entry.strip_prefix(&src).unwrap();
        let module = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&entry).unwrap();
        // Comments name modules in links and prose; only code imports.
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        code.entry(module).or_default().push_str(&lines.join("\n"));
    }
    let modules: BTreeSet<String> = code.keys().cloned().collect();
    code.iter()
        .map(|(module, text)| {
            let named = named_modules(text)
                .into_iter()
                .filter(|m| m != module && modules.contains(m))
                .collect();
            (module.clone(), named)
        })
        .collect()
}

/// The modules `text` names after `crate::`, in paths and in `use crate::{a, b::c}` groups.
fn named_modules(text: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find(';').unwrap_or(group.len())];
            // Top-level names of the group: those after `{` or a `,` at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        named.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            named.insert(ident(rest));
        }
    }
    named
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// A path from `from` back to itself through `imports`, if there is one.
fn circle_through(from: &str, imports: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in imports.get(last).into_iter().flatten() {
            if next == from {
                let mut circle = path.clone();
                circle.push(from.to_string());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_file_of_the_store_imports_its_way_back_to_itself() {
    let imports = imports();
    assert!(imports.contains_key("kb") && imports["write"].contains("kb"));
    let circles: Vec<String> = imports
        .keys()
        .filter_map(|m| circle_through(m, &imports))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

#[test]
fn the_reader_finds_names_in_paths_and_groups() {
    let named = named_modules(
        "use crate::a::X;\nuse crate::{b::{Y, Z}, c, d::e::f};\nlet _ = crate::g::h();",
    );
    let expected: BTreeSet<String> = ["a", "b", "c", "d", "g"].map(String::from).into();
    assert_eq!(named, expected);
    let imports = BTreeMap::from([
        ("x".to_string(), BTreeSet::from(["y".to_string()])),
        ("y".to_string(), BTreeSet::from(["x".to_string()])),
    ]);
    assert_eq!(
        circle_through("x", &imports),
        Some(vec!["x".into(), "y".into(), "x".into()])
    );
}
