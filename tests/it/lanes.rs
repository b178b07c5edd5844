//! Graph lanes: each class of graph request (lookups, search, documents) has a pool of its
//! own, so a burst of slow requests that fills its lane sheds with 503 in that lane while
//! entity lookups and traversals go on answering.

use std::time::Duration;

use kbq_actors::GraphLane;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::support::{TestServer, eventually, test_config};

/// One worker and one queued place per lane, so two held requests fill a lane.
/// `config` on an embedded in-memory store, also in a remote run (`scripts/test-remote`): graph
/// documents are answered on an HTTP worker's own thread only when an embedded store holds
/// the documents in memory; over a SurrealDB server they wait on it, in their lane.
fn embedded(mut config: kbq::config::Config) -> kbq::config::Config {
    let defaults = kbq::config::Config::default().store;
    config.store.url = "mem://".into();
    config.store.database = defaults.database;
    config.store.username = defaults.username;
    config.store.password = defaults.password;
    config
}

fn one_worker_lanes() -> kbq::config::Config {
    let mut config = test_config();
    config.graph.workers = 1;
    config.graph.max_workers = 1;
    config.graph.queue_capacity = 1;
    config
}

/// Holds `lane` full (one request running, one queued) until the senders are sent or dropped.
async fn fill(
    t: &TestServer,
    lane: GraphLane,
) -> (Vec<oneshot::Sender<()>>, tokio::task::JoinSet<bool>) {
    hold(t, lane, 2).await
}

/// Holds `n` requests in `lane` (each holds a worker, or waits for one) until the senders are
/// sent or dropped; each hold answers whether it was served.
async fn hold(
    t: &TestServer,
    lane: GraphLane,
    n: usize,
) -> (Vec<oneshot::Sender<()>>, tokio::task::JoinSet<bool>) {
    let pool = t.server().graph.clone();
    let mut releases = Vec::new();
    let mut holds = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (tx, rx) = oneshot::channel();
        releases.push(tx);
        let pool = pool.clone();
        holds.spawn(async move { pool.hold_in(lane, rx).await.is_ok() });
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            pool.in_flight_in(lane) == n
        })
        .await,
        "{lane:?} did not take {n} held requests"
    );
    (releases, holds)
}

/// `times` traversals and entity lookups over HTTP, each answered 200 with its entity.
async fn lookups_answer(t: &TestServer, times: usize) {
    for _ in 0..times {
        let (status, body) = t
            .post(
                "/data/v1/query/graph",
                json!({"entity_name": "Ada", "depth": 2}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["entities_found"][0]["name"], "Ada");
        let (status, body) = t.get("/data/v1/query/graph/entity/Babbage").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["name"], "Babbage");
    }
}

fn search_body() -> Value {
    json!({"query": "a"})
}

fn documents_body() -> Value {
    json!({"entity_name": "Ada", "max_depth": 1})
}

/// What [`documents_body`] asks, as the pool's query.
fn ada_documents() -> kbq_store::DocumentsQuery {
    kbq_store::DocumentsQuery {
        start: "Ada".into(),
        entity_type: None,
        relationship_types: None,
        max_depth: 1,
        limit: 10,
        resolve_documents: true,
    }
}

#[tokio::test]
async fn a_burst_that_fills_search_and_documents_holds_up_no_lookup() {
    let t = crate::agent::start(one_worker_lanes()).await;
    let (search_releases, search_holds) = fill(&t, GraphLane::Search).await;
    let (doc_releases, doc_holds) = fill(&t, GraphLane::Documents).await;
    let pool = t.server().graph.clone();
    assert_eq!(pool.in_flight_in(GraphLane::Lookup), 0);

    // A burst of slow-class requests: every one is shed at once by its own lane.
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..40 {
        let (http, base) = (t.http.clone(), t.base.clone());
        let (path, body) = if i % 2 == 0 {
            ("/data/v1/query/graph/search", search_body())
        } else {
            ("/data/v1/query/graph/documents", documents_body())
        };
        burst.spawn(async move {
            let res = http
                .post(format!("{base}{path}"))
                .bearer_auth(crate::support::KEY)
                .json(&body)
                .send()
                .await
                .unwrap();
            let retry_after = res.headers().get("retry-after").cloned();
            (res.status().as_u16(), retry_after)
        });
    }
    // Meanwhile every lookup answers, from its own lane.
    lookups_answer(&t, 10).await;
    while let Some(answer) = burst.join_next().await {
        let (status, retry_after) = answer.unwrap();
        assert_eq!(status, 503);
        assert_eq!(retry_after.unwrap(), "1");
    }
    // The full lanes held their places: nothing shed took one.
    assert_eq!(pool.in_flight_in(GraphLane::Search), 2);
    assert_eq!(pool.in_flight_in(GraphLane::Documents), 2);

    for tx in search_releases.into_iter().chain(doc_releases) {
        tx.send(()).unwrap();
    }
    for mut holds in [search_holds, doc_holds] {
        while let Some(ok) = holds.join_next().await {
            assert!(ok.unwrap());
        }
    }
    let (status, body) = t.post("/data/v1/query/graph/search", search_body()).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body["results"].as_array().unwrap().is_empty());
    let (status, body) = t
        .post("/data/v1/query/graph/documents", documents_body())
        .await;
    assert_eq!(status, 200, "{body}");
    t.stop().await;
}

#[tokio::test]
async fn a_full_lookup_lane_sheds_lookups_only() {
    let t = crate::agent::start(one_worker_lanes()).await;
    let (releases, mut holds) = fill(&t, GraphLane::Lookup).await;
    let (status, body) = t
        .post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
        .await;
    assert_eq!(status, 503, "{body}");
    let (status, _) = t.get("/data/v1/query/graph/entity/Ada").await;
    assert_eq!(status, 503);
    let (status, body) = t.post("/data/v1/query/graph/search", search_body()).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = t
        .post("/data/v1/query/graph/documents", documents_body())
        .await;
    assert_eq!(status, 200, "{body}");
    drop(releases);
    while let Some(ok) = holds.join_next().await {
        assert!(ok.unwrap());
    }
    t.stop().await;
}

#[tokio::test]
async fn each_lane_is_a_pool_in_metrics_and_is_restarted_on_its_own() {
    let t = crate::agent::start(test_config()).await;
    let res = t.http.get(t.url("/metrics")).send().await.unwrap();
    let metrics = res.text().await.unwrap();
    for lane in GraphLane::ALL {
        let line = format!("kbq_pool_workers{{pool=\"{}\"}} 4", lane.pool_name());
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    let pool = t.server().graph.clone();
    let lookup = pool.factory_in(GraphLane::Lookup).unwrap().get_id();
    let search = pool.factory_in(GraphLane::Search).unwrap().get_id();
    pool.factory_in(GraphLane::Search).unwrap().kill();
    let restarted = eventually(Duration::from_secs(10), || async {
        pool.factory_in(GraphLane::Search)
            .is_some_and(|f| f.get_id() != search)
            && t.post("/data/v1/query/graph/search", search_body()).await.0 == 200
    })
    .await;
    assert!(restarted);
    assert_eq!(pool.factory_in(GraphLane::Lookup).unwrap().get_id(), lookup);
    assert_eq!(t.server().runtime().restarts().await, 1);
    t.stop().await;
}

#[tokio::test]
async fn lookups_answer_on_the_main_runtime_when_the_lane_has_no_threads() {
    let mut config = test_config();
    config.graph.lookup_threads = 0;
    let t = crate::agent::start(config).await;
    let (status, body) = t
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": "Ada", "depth": 1}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["entities_found"][0]["name"], "Ada");
    t.stop().await;
}

/// An HTTP worker answers entity lookups and traversals with a graph actor of its own
/// (`kbq_actors::local`): with the lookup lane's only worker held they still answer, while a
/// lookup from a thread that is not an HTTP worker (this test's) waits in the lane.
#[tokio::test]
async fn lookups_over_http_are_answered_by_the_http_workers_own_actor() {
    let t = crate::agent::start(one_worker_lanes()).await;
    let (pool, kb) = (t.server().graph.clone(), t.server().kb.clone());
    let held = hold(&t, GraphLane::Lookup, 1).await;
    lookups_answer(&t, 5).await;
    // What the lane's handle admitted: the held request alone, the lookups having answered.
    assert_pool_in_flight(&t, "graph", 1).await;
    let off_thread = {
        let pool = pool.clone();
        async move { pool.entity(&kb, "Ada".into()).await }
    };
    let found = waits_behind(held, off_thread, "a lookup off the HTTP workers").await;
    assert_eq!(found.unwrap().expect("Ada").name, "Ada");
    assert_eq!(pool.in_flight_in(GraphLane::Lookup), 0);
    t.stop().await;
}

/// Graph documents answered from memory (the graph index, an embedded store, the built-in
/// embedder: the test server's) are answered on the HTTP worker's own thread too, by an actor
/// of the documents lane: with that lane's only worker held they still answer, within the
/// lane's bound, while a call from this test's thread waits in the lane.
#[tokio::test]
async fn graph_documents_over_http_are_answered_by_the_http_workers_own_actor() {
    let t = crate::agent::start(embedded(one_worker_lanes())).await;
    let (pool, kb) = (t.server().graph.clone(), t.server().kb.clone());
    let held = hold(&t, GraphLane::Documents, 1).await;
    for _ in 0..5 {
        let (status, body) = t
            .post("/data/v1/query/graph/documents", documents_body())
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["entity_name"], "Ada");
        assert!(!body["results"].as_array().unwrap().is_empty(), "{body}");
    }
    assert_pool_in_flight(&t, "graph:documents", 1).await;
    let off_thread = {
        let pool = pool.clone();
        async move { pool.documents(&kb, ada_documents()).await }
    };
    let found = waits_behind(held, off_thread, "graph documents off the HTTP workers").await;
    assert!(!found.unwrap().results.is_empty());
    assert_eq!(pool.in_flight_in(GraphLane::Documents), 0);
    t.stop().await;
}

/// Runs `call`, made from this test's thread (not an HTTP worker's), while `held` holds its
/// lane's only worker: `call` must wait in the lane's queue (`what` is it, for the failure),
/// and answers once the held request is released, which must have been served. Returns
/// `call`'s answer.
async fn waits_behind<T: Send + 'static>(
    (releases, mut holds): (Vec<oneshot::Sender<()>>, tokio::task::JoinSet<bool>),
    call: impl std::future::Future<Output = T> + Send + 'static,
    what: &str,
) -> T {
    let queued = tokio::spawn(call);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!queued.is_finished(), "{what} waits in the lane");
    for release in releases {
        release.send(()).unwrap();
    }
    while let Some(served) = holds.join_next().await {
        assert!(served.unwrap());
    }
    queued.await.unwrap()
}

/// `/metrics` says `pool` has `n` calls admitted and not yet answered.
async fn assert_pool_in_flight(t: &TestServer, pool: &str, n: usize) {
    let metrics = t.http.get(t.url("/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let line = format!("kbq_pool_in_flight{{pool=\"{pool}\"}} {n}\n");
    assert!(metrics.contains(&line), "{line}in {metrics}");
}

/// A local graph actor that fails is replaced by its thread at that thread's next request of
/// its lane, for each lane answered on the HTTP workers (lookups, graph documents).
#[tokio::test]
async fn a_failed_local_graph_actor_is_replaced_at_its_threads_next_request() {
    let t = crate::agent::start(embedded(test_config())).await;
    let (pool, kb) = (t.server().graph.clone(), t.server().kb.clone());
    let documents = || async {
        let found = pool.documents(&kb, ada_documents()).await.unwrap();
        assert!(!found.results.is_empty());
    };
    let entity = || async {
        let found = pool.entity(&kb, "Ada".into()).await.unwrap();
        assert_eq!(found.unwrap().name, "Ada");
    };
    for lane in [GraphLane::Lookup, GraphLane::Documents] {
        assert!(pool.local_actor_here(lane).is_none(), "not an HTTP worker");
    }
    // From now on this test's thread answers its own requests, as an HTTP worker's does.
    kbq_actors::local::serve_graph_on_this_thread();
    assert!(
        pool.local_actor_here(GraphLane::Search).is_none(),
        "the lane's"
    );
    for lane in [GraphLane::Lookup, GraphLane::Documents] {
        let first = pool
            .local_actor_here(lane)
            .expect("an actor on this thread");
        assert_eq!(
            pool.local_actor_here(lane).unwrap().get_id(),
            first.get_id()
        );
        entity().await;
        documents().await;
        first.send_message(kbq_actors::GraphRequest::Panic).unwrap();
        // Once it has stopped, the thread's next request of its lane starts another.
        assert!(
            eventually(Duration::from_secs(10), || async {
                pool.local_actor_here(lane).unwrap().get_id() != first.get_id()
            })
            .await,
            "{lane:?}"
        );
        entity().await;
        documents().await;
    }
    // The root restarted nothing: the edge supervisor does not restart a local graph actor.
    assert_eq!(t.server().runtime().restarts().await, 0);
    t.stop().await;
}
