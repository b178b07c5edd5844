//! `kbq import`: progress, line-numbered failures, exit codes, idempotency.

use std::ffi::OsStr;
use std::process::Command;

/// Runs `kbq` with `args`, without a `KBQ_CONFIG` from the environment.
pub(crate) fn kbq(args: &[&str]) -> std::process::Output {
    kbq_with::<&str, &str>(args, &[])
}

/// As [`kbq`], with `env` set for the process.
pub(crate) fn kbq_with<K: AsRef<OsStr>, V: AsRef<OsStr>>(
    args: &[&str],
    env: &[(K, V)],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(args)
        .env_remove("KBQ_CONFIG")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("kbq runs")
}

/// `kbq import --workspace NAME` writes into that workspace only; a workspace that does not
/// exist, or a name that breaks the rule, is exit status 2 and writes nothing.
#[test]
fn import_into_a_workspace_writes_there_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let file = dir.path().join("in.ndjson");
    std::fs::write(&file, crate::support::FIXTURE).unwrap();
    let path = file.to_str().unwrap();
    let missing = kbq(&["import", "--store", &store, "--workspace", "team", path]);
    assert_eq!(missing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("there is no workspace `team`"), "{stderr}");
    let bad = kbq(&["import", "--store", &store, "--workspace", "Team!", path]);
    assert_eq!(bad.status.code(), Some(2));
    let made = kbq(&["workspaces", "--store", &store, "create", "team"]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    // As the admin API answers: a WorkspaceView, every field of its schema.
    let made: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    let mut fields: Vec<&str> = made
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "counts",
            "created_at",
            "database",
            "index_bytes",
            "loaded",
            "name",
            "own_quota",
            "quota"
        ],
        "{made}"
    );
    assert_eq!(made["loaded"], false, "{made}");
    let done = kbq(&["import", "--store", &store, "--workspace", "team", path]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let list = kbq(&["workspaces", "--store", &store, "list"]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list["workspaces"][0]["counts"]["entities"], 0, "{list}");
    assert_eq!(list["workspaces"][1]["name"], "team", "{list}");
    assert_eq!(list["workspaces"][1]["counts"]["entities"], 10, "{list}");
    assert_eq!(list["workspaces"][1]["counts"]["documents"], 3, "{list}");
    // Its own quota, set as a whole: what it holds stays, and the view says what applies.
    let set = kbq_with(
        &[
            "workspaces",
            "--store",
            &store,
            "quota",
            "team",
            "--max-entities",
            "5",
            "--graph-per-minute",
            "30",
            "--graph-burst",
            "7",
        ],
        &[
            ("KBQ_WORKSPACES__MAX_DOCUMENTS", "7"),
            ("KBQ_LIMITS__WORKSPACE_AGENT_PER_MINUTE", "60"),
        ],
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let set: serde_json::Value = serde_json::from_slice(&set.stdout).unwrap();
    assert_eq!(
        set["quota"],
        serde_json::json!({
            "max_entities": 5, "max_documents": 7, "max_document_bytes": null,
            "graph_per_minute": 30, "graph_burst": 7, "agent_per_minute": 60, "agent_burst": 100,
        }),
        "{set}"
    );
    assert_eq!(set["own_quota"]["max_documents"], serde_json::Value::Null);
    assert_eq!(set["counts"]["entities"], 10, "{set}");
    let default = kbq(&["workspaces", "--store", &store, "quota", "default"]);
    assert_eq!(default.status.code(), Some(1));
    let missing = kbq(&["workspaces", "--store", &store, "quota", "nobody"]);
    assert_eq!(missing.status.code(), Some(1));
    let out_of_range = kbq(&[
        "workspaces",
        "--store",
        &store,
        "quota",
        "team",
        "--graph-burst",
        "0",
    ]);
    assert_eq!(out_of_range.status.code(), Some(2));
}

#[test]
fn import_reports_failed_lines_writes_the_rest_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let file = dir.path().join("in.ndjson");
    std::fs::write(&file, crate::support::FIXTURE).unwrap();
    let path = file.to_str().unwrap();

    let first = kbq(&["import", "--store", &store, path]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let out = String::from_utf8_lossy(&first.stdout);
    assert!(
        out.contains("imported 10 entities, 7 relationships, 3 documents from 20 records"),
        "{out}"
    );
    // The result, and nothing of the storage engine: no log line at all.
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(
        !["ERROR", "WARN", "INFO"].iter().any(|l| err.contains(l)),
        "a command prints its result, not logs: {err}"
    );
    let again = kbq(&["import", "--store", &store, path]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stdout)
            .contains("imported 10 entities, 7 relationships, 3 documents")
    );

    std::fs::write(
        &file,
        "{\"kind\":\"entity\",\"name\":\"New\",\"entity_type\":\"t\"}\n{broken\n{\"kind\":\"relationship\",\"source_name\":\"New\",\"target_name\":\"Nobody\",\"relationship_type\":\"r\"}\n{\"kind\":\"relationship\",\"source_name\":\"New\",\"target_name\":\"Ada\",\"relationship_type\":\"r\"}\n",
    )
    .unwrap();
    let bad = kbq(&["import", "--store", &store, path]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("line 2: invalid JSON"), "{err}");
    assert!(err.contains("line 3: relationship end `Nobody`"), "{err}");
    assert!(
        String::from_utf8_lossy(&bad.stdout)
            .contains("imported 1 entities, 1 relationships, 0 documents from 4 records in")
    );

    let missing = kbq(&["import", "--store", &store, "/no/such/file.ndjson"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn bad_configuration_stops_start_up_naming_the_key() {
    let out = Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(["serve", "--store", "mem://"])
        .env("KBQ_GRAPH__WORKERS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("graph.workers must be between 1 and 256")
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(["serve", "--config", "/no/such.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

#[test]
fn gen_writes_a_seeded_power_law_graph_that_imports() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let generate = |seed: &str, out: &str| {
        let o = kbq(&[
            "gen",
            "--entities",
            "400",
            "--relationships",
            "1200",
            "--documents",
            "0.5",
            "--seed",
            seed,
            "-o",
            out,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let summary = generate("7", &file("a.ndjson"));
    generate("7", &file("b.ndjson"));
    generate("8", &file("c.ndjson"));
    let a = std::fs::read_to_string(file("a.ndjson")).unwrap();
    assert_eq!(
        a,
        std::fs::read_to_string(file("b.ndjson")).unwrap(),
        "same seed, same file"
    );
    assert_ne!(a, std::fs::read_to_string(file("c.ndjson")).unwrap());

    // Counts as printed; degrees follow a power law: a few hubs, a long tail.
    let lines: Vec<serde_json::Value> = a
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let count = |kind: &str| lines.iter().filter(|l| l["kind"] == kind).count();
    let (e, r, d) = (count("entity"), count("relationship"), count("document"));
    assert_eq!((e, r), (400, 1200));
    assert!(
        (120..=280).contains(&d),
        "about half the entities have a document: {d}"
    );
    assert!(
        summary.contains(&format!(
            "generated {e} entities, {r} relationships, {d} documents (seed 7)"
        )),
        "{summary}"
    );
    let mut in_degree = std::collections::HashMap::new();
    for l in lines.iter().filter(|l| l["kind"] == "relationship") {
        *in_degree
            .entry(l["target_name"].as_str().unwrap().to_string())
            .or_insert(0usize) += 1;
    }
    let mut degrees: Vec<usize> = in_degree.into_values().collect();
    degrees.sort_unstable();
    let (max, median) = (degrees[degrees.len() - 1], degrees[degrees.len() / 2]);
    assert!(max >= 20 * median, "max in-degree {max}, median {median}");

    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let out = kbq(&["import", "--store", &store, &file("a.ndjson")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!(
        "imported {e} entities, {r} relationships, {d} documents"
    )));

    let bad = kbq(&["gen", "--entities", "1"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--entities"));
}

/// `scripts/debian-kb` turns a Packages file into the import format: packages, the names
/// they only mention (virtual when provided), a relationship per field and alternative, a
/// document per long description (from the Packages entry or a Translation-en file), and
/// labelled queries from the synopses; `kbq import` takes all of it.
#[test]
fn debian_kb_turns_a_packages_file_into_an_importable_graph() {
    let dir = tempfile::tempdir().unwrap();
    let packages = dir.path().join("Packages");
    std::fs::write(
        &packages,
        "Package: libc6\nVersion: 2.36-9\nArchitecture: amd64\nSection: libs\nProvides: libc6-amd64 (= 2.36)\nDescription: GNU C Library: Shared libraries\n Contains the standard libraries.\n .\n Second paragraph.\n\n\
Package: mawk\nVersion: 1.3.4\nPre-Depends: libc6 (>= 2.34)\nProvides: awk\nDescription: Pattern scanning\n\n\
Package: gawk\nVersion: 1:5.2.1\nDepends: libc6 (>= 2.34), libmpfr6:any | libgmp10\nBreaks: gawk-doc\nProvides: awk\nDescription: GNU awk\nDescription-md5: 0123\n",
    )
    .unwrap();
    let translations = dir.path().join("Translation-en");
    std::fs::write(
        &translations,
        "Package: gawk\nDescription-md5: 0123\nDescription-en: GNU awk\n The GNU implementation of awk.\n\n\
Package: gawk\nDescription-md5: 4567\nDescription-en: GNU awk\n An older description.\n\n\
Package: mawk\nDescription-md5: 89ab\nDescription-en: Pattern scanning and text processing\n Mawk.\n",
    )
    .unwrap();
    let out = dir.path().join("debian.ndjson");
    let eval = dir.path().join("eval.ndjson");
    let run = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/debian-kb"))
        .args([
            "--packages",
            packages.to_str().unwrap(),
            "--translations",
            translations.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--eval",
            eval.to_str().unwrap(),
        ])
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |kind: &str| {
        records
            .iter()
            .filter(|r| r["kind"] == kind)
            .collect::<Vec<_>>()
    };
    let types: Vec<(&str, &str)> = of("entity")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["entity_type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        types,
        [
            ("gawk", "package"),
            ("libc6", "package"),
            ("mawk", "package"),
            ("awk", "virtual"),
            ("gawk-doc", "missing"),
            ("libc6-amd64", "virtual"),
            ("libgmp10", "missing"),
            ("libmpfr6", "missing"),
        ]
    );
    let edge = |s: &str, t: &str, k: &str| {
        of("relationship")
            .into_iter()
            .find(|r| r["source_name"] == s && r["target_name"] == t && r["relationship_type"] == k)
            .unwrap_or_else(|| panic!("no {s} -{k}-> {t}"))
            .clone()
    };
    assert_eq!(
        edge("mawk", "libc6", "pre_depends")["properties"],
        serde_json::json!({"version": ">= 2.34"})
    );
    assert_eq!(
        edge("gawk", "libmpfr6", "depends")["properties"],
        serde_json::json!({"alternative": true})
    );
    edge("gawk", "libgmp10", "depends");
    edge("gawk", "gawk-doc", "breaks");
    edge("libc6", "libc6-amd64", "provides");
    assert_eq!(of("relationship").len(), 8);
    let doc = of("document")
        .into_iter()
        .find(|d| d["source_id"] == "libc6")
        .unwrap()
        .clone();
    assert_eq!(doc["title"], "libc6");
    assert_eq!(
        doc["content"],
        "Contains the standard libraries.\n\nSecond paragraph."
    );
    let libc6 = of("entity")
        .into_iter()
        .find(|e| e["name"] == "libc6")
        .unwrap();
    assert_eq!(
        libc6["properties"]["synopsis"],
        "GNU C Library: Shared libraries"
    );
    let content = |name: &str| {
        of("document")
            .into_iter()
            .find(|d| d["source_id"] == name)
            .unwrap()["content"]
            .clone()
    };
    // The translation whose checksum the entry names; none for mawk's (another checksum),
    // which keeps its synopsis.
    assert_eq!(content("gawk"), "The GNU implementation of awk.");
    assert_eq!(content("mawk"), "Pattern scanning");
    let queries: Vec<serde_json::Value> = std::fs::read_to_string(&eval)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        queries,
        [
            serde_json::json!({"id": "gawk", "query": "GNU awk", "relevant": ["gawk"]}),
            serde_json::json!({"id": "libc6", "query": "GNU C Library: Shared libraries", "relevant": ["libc6"]}),
        ]
    );

    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let import = kbq(&["import", "--store", &store, out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&import.stdout);
    assert!(
        import.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&import.stderr)
    );
    assert!(
        stdout.contains("imported 8 entities, 8 relationships, 3 documents"),
        "{stdout}"
    );
}
