//! `kbq serve` runs its main runtime's threads at a lower priority than the HTTP workers and
//! the graph lookup lane (`server.main_runtime_nice`), and SurrealDB's storage threads with
//! it: read from the running process's threads.

use std::collections::BTreeMap;

/// Each thread's name (as the kernel keeps it, 15 bytes) and nice value.
#[cfg(target_os = "linux")]
fn threads(pid: u32) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let Ok(stat) = std::fs::read_to_string(task.unwrap().path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the name may hold spaces, so split after its ')'.
        let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // After the name: state is field 3 of stat(5), nice is field 19.
        out.push((name, fields[19 - 3].parse().unwrap()));
    }
    out
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_main_runtime_runs_below_the_http_workers_and_the_lookup_lane() {
    let mut serve = crate::support::ServeProcess::start(
        &[
            ("KBQ_SERVER__MAIN_RUNTIME_NICE", "7"),
            ("KBQ_SERVER__WORKERS", "2"),
            ("KBQ_GRAPH__LOOKUP_THREADS", "2"),
        ],
        std::process::Stdio::null(),
    )
    .await;
    let base = kbq::priority::current_nice();
    let lowered = (base + 7).min(19);
    let mut seen: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (name, nice) in threads(serve.child.id().unwrap()) {
        seen.entry(name).or_default().push(nice);
    }
    let of = |prefix: &str| -> Vec<i32> {
        seen.iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .flat_map(|(_, nices)| nices.clone())
            .collect()
    };
    let (runtime, storage, lookup, http_workers) = (
        of("tokio-rt-worker"),
        of("surrealdb-threa"),
        of("kbq-lookup"),
        of("actix-server wo"),
    );
    assert!(!runtime.is_empty() && !storage.is_empty(), "{seen:?}");
    assert_eq!(lookup.len(), 2, "{seen:?}");
    assert_eq!(http_workers.len(), 2, "{seen:?}");
    // SurrealDB's storage threads do the slow work too.
    assert!(
        runtime.iter().chain(&storage).all(|&n| n == lowered),
        "{seen:?}"
    );
    assert!(
        lookup.iter().chain(&http_workers).all(|&n| n == base),
        "{seen:?}"
    );
    serve.child.kill().await.unwrap();
}
