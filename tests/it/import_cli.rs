//! `kbq import`: progress, line-numbered failures, exit codes, idempotency.

use std::process::Command;

fn kbq(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(args)
        .env_remove("KBQ_CONFIG")
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
