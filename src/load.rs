//! `kbq load`: drives a running kbq on loopback and reports throughput, latency percentiles,
//! errors and shed requests per route (a table, or JSON that scripts/bench-load turns into the
//! tables of docs/benchmarks.md).
//!
//! A run has two kinds of client, measured in the same window: `--concurrency` clients that
//! draw each request's route from a weighted mix, and `--route-concurrency` clients dedicated
//! to one route each (a probe measured while the mix saturates the server). A warm-up runs the
//! same load first and drops its samples. Bounded in seconds and in requests.
//!
//! The dedicated clients run on a thread and a runtime of their own, with connections of
//! their own, as a load balancer's probes come from another process: on the mix's runtime a
//! probe's response waited behind the mix's responses for the client to read it, and that
//! wait was measured as the server's (see docs/benchmarks.md).
//!
//! # Layout
//!
//! - `load.rs` (this file): the run: entity names from the server, the clients, the window.
//! - `route`: `Route`, the requests a run can send.
//! - `options`: [`LoadOptions`] and the parsing and checks of the command line's forms.
//! - `requests`: `Requests`, every URL, header and body built before the run.
//! - `report`: [`LoadReport`] and [`RouteReport`], the statistics of the measured window.
//! - `turns`: [`Turns`], the mix's routes measured alone but interleaved (`--turns-ms`).

mod options;
mod report;
mod requests;
mod route;
pub mod sample;
mod turns;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kbq_store::generate::Rng;
use serde_json::{Value, json};

pub use options::{DEFAULT_MIX, LoadOptions, check_loopback, parse_mix, parse_route_concurrency};
pub use report::{Clients, LoadReport, Outcome, RouteReport, Tally};
pub use route::Route;
pub use turns::Turns;

use requests::Requests;

/// The longest `kbq load` waits for a starting server to be ready.
const READY_WAIT: Duration = Duration::from_secs(300);

/// Waits until the server's `/readyz` answers 200, so that a load started beside the server
/// (as scripts/bench-load does) does not fail on its 503s while the indexes are built; says
/// once on standard error why it waits. A server with no `/readyz` is taken as ready.
async fn wait_until_ready(http: &reqwest::Client, o: &LoadOptions) -> Result<(), String> {
    let started = Instant::now();
    let mut said = false;
    loop {
        let res = http
            .get(format!("{}/readyz", o.url))
            .send()
            .await
            .map_err(|e| format!("cannot reach {}: {e}", o.url))?;
        let status = res.status();
        if status != reqwest::StatusCode::SERVICE_UNAVAILABLE {
            return Ok(());
        }
        if started.elapsed() >= READY_WAIT {
            return Err(format!(
                "{} was not ready after {} s",
                o.url,
                READY_WAIT.as_secs()
            ));
        }
        if !said {
            let body: Value = res.json().await.unwrap_or(Value::Null);
            let why = body["error"]["message"].as_str().unwrap_or("not ready");
            eprintln!("kbq load: waiting for {} ({why})", o.url);
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The entity names and the queries of a run: from `--data` when given, else from the
/// server's answers (names from its name search; queries from the documents a keyword search
/// for those names finds).
async fn names_and_queries(
    http: &reqwest::Client,
    o: &LoadOptions,
) -> Result<(Vec<String>, Vec<String>), String> {
    let mut rng = Rng::new(o.seed ^ 0x5a5a_5a5a);
    if let Some(path) = &o.data {
        let file =
            std::fs::File::open(path).map_err(|e| format!("--data {}: {e}", path.display()))?;
        let (degrees, texts) = sample::read_data(std::io::BufReader::new(file))
            .map_err(|e| format!("--data {}: {e}", path.display()))?;
        let names = sample::by_degree(&degrees, o.names, &mut rng);
        return Ok((names, sample::queries_from(&texts, o.queries, &mut rng)));
    }
    let names = entity_names(http, o).await?;
    let mut texts = Vec::new();
    for name in names.iter().take(200) {
        let res = http
            .post(format!("{}/v1/rag/keyword", o.url))
            .bearer_auth(&o.key)
            .header("content-type", "application/json")
            .body(json!({"query": name, "limit": 10}).to_string())
            .send()
            .await
            .map_err(|e| format!("cannot reach {}: {e}", o.url))?;
        let body: Value = res.json().await.unwrap_or(Value::Null);
        texts.extend(
            (body["results"].as_array().into_iter().flatten())
                .filter_map(|d| d["content"].as_str().map(str::to_string)),
        );
    }
    texts.sort_unstable();
    texts.dedup();
    Ok((names, sample::queries_from(&texts, o.queries, &mut rng)))
}

/// Entity names to query: a sample from the server's own search.
async fn entity_names(http: &reqwest::Client, o: &LoadOptions) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for q in ["a", "e", "o", "i"] {
        let res = http
            .post(format!("{}/data/v1/query/graph/search", o.url))
            .bearer_auth(&o.key)
            .header("content-type", "application/json")
            .body(json!({"query": q, "limit": 100}).to_string())
            .send()
            .await
            .map_err(|e| format!("cannot reach {}: {e}", o.url))?;
        let status = res.status();
        let body: Value = res
            .json()
            .await
            .map_err(|e| format!("search answered {status} with no JSON: {e}"))?;
        if !status.is_success() {
            return Err(format!("search answered {status}: {body}"));
        }
        names.extend(
            body["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["name"].as_str().map(str::to_string)),
        );
    }
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Err("the knowledge base has no entities to query".into());
    }
    Ok(names)
}

/// What every client of a run shares.
struct Shared {
    requests: Requests,
    /// The dedicated clients' requests: `requests` unless they send elsewhere
    /// (`LoadOptions::dedicated_url`).
    dedicated_requests: Option<Requests>,
    mix: Vec<(Route, u32)>,
    total_weight: u32,
    /// When the mix's routes take turns instead of being drawn by weight.
    turns: Option<Turns>,
    /// The start of the run (of the warm-up): where the turns start.
    start: Instant,
    /// The end of the warm-up: the latencies of requests sent from then on are measured, and
    /// responses from then on counted.
    measured_from: Instant,
    /// The end of the window: no request is sent, and no response counted, from then on.
    until: Instant,
    max_requests: Option<u64>,
    /// The least time between a dedicated client's requests.
    route_interval: Duration,
    /// Measured requests sent so far (counted only when `max_requests` bounds them).
    issued: AtomicU64,
}

impl Shared {
    /// The index in the mix of a route drawn by weight.
    fn pick(&self, rng: &mut Rng) -> usize {
        let mut pick = (rng.next_u64() % u64::from(self.total_weight)) as u32;
        self.mix
            .iter()
            .position(|(_, w)| {
                if pick < *w {
                    true
                } else {
                    pick -= w;
                    false
                }
            })
            .unwrap_or(0)
    }

    /// Whether a response that arrived at `answered` counts towards throughput: in the
    /// measured window, and for a mix client's request of `mix_slot` (`None`: a dedicated
    /// client's) when the routes take turns, in its route's own turn after it settled.
    fn counts(&self, mix_slot: Option<usize>, answered: Instant) -> bool {
        let in_turn = || match (&self.turns, mix_slot) {
            (Some(t), Some(slot)) => t.at(answered - self.start) == (slot, true),
            _ => true,
        };
        self.measured_from < answered && answered <= self.until && in_turn()
    }
}

/// Sends `request` and reads its body to the end (as a real client must, to reuse the
/// connection); `None` when either fails.
async fn send(request: reqwest::RequestBuilder) -> Option<u16> {
    let mut response = request.send().await.ok()?;
    while response.chunk().await.ok()?.is_some() {}
    Some(response.status().as_u16())
}

/// One client: sends a request at a time until the window closes, each of `only`'s route
/// (a dedicated client, paced by `route_interval`), or the mix's: the route whose turn it is
/// (`--turns-ms`), else one drawn by weight. Returns its tallies by report slot: the mix's
/// routes by their index in the mix, a dedicated client's in slot `only.0`.
async fn client(
    shared: Arc<Shared>,
    http: reqwest::Client,
    only: Option<(usize, Route)>,
    mut rng: Rng,
    slots: usize,
) -> Vec<Tally> {
    let mut tallies = vec![Tally::default(); slots];
    let mut pace = (only.is_some() && !shared.route_interval.is_zero()).then(|| {
        let mut pace = tokio::time::interval(shared.route_interval);
        // A late response delays the next request rather than sending a burst to catch up.
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        pace
    });
    // A dedicated client sends where the dedicated clients do; the mix's, to `--url`.
    let requests = match (only, &shared.dedicated_requests) {
        (Some(_), Some(dedicated)) => dedicated,
        _ => &shared.requests,
    };
    loop {
        if let Some(pace) = &mut pace {
            pace.tick().await;
        }
        let sent = Instant::now();
        if sent >= shared.until {
            break;
        }
        // A dedicated client's route, the route whose turn it is, or one drawn by weight; and
        // whether its turn has settled (always, without turns).
        let (slot, route, settled) = match (only, &shared.turns) {
            (Some((slot, route)), _) => (slot, route, true),
            (None, Some(turns)) => {
                let (i, settled) = turns.at(sent - shared.start);
                (i, shared.mix[i].0, settled)
            }
            (None, None) => {
                let i = shared.pick(&mut rng);
                (i, shared.mix[i].0, true)
            }
        };
        let measured = sent >= shared.measured_from && settled;
        if measured
            && shared
                .max_requests
                .is_some_and(|max| shared.issued.fetch_add(1, Ordering::Relaxed) >= max)
        {
            break;
        }
        let (request, drawn) = requests.request(&http, route, &mut rng);
        let status = send(request).await;
        let answered = Instant::now();
        let tally = &mut tallies[slot];
        if measured {
            tally.outcomes.push(Outcome {
                status,
                latency: answered - sent,
                drawn,
            });
        }
        if shared.counts(only.is_none().then_some(slot), answered) {
            tally.completed += 1;
        }
    }
    tallies
}

/// An HTTP client with room for `clients` idle connections.
fn http_client(clients: usize) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(clients)
        .build()
        .map_err(|e| e.to_string())
}

/// Starts `clients` (each its generator, report slot and route) on a thread of their own,
/// with a single-threaded runtime and connections of their own; their tallies come back on
/// the receiver.
fn dedicated(
    shared: &Arc<Shared>,
    clients: Vec<(Rng, usize, Route)>,
    slots: usize,
) -> Result<tokio::sync::oneshot::Receiver<Vec<Vec<Tally>>>, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let shared = shared.clone();
    let http = http_client(clients.len())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the dedicated clients' runtime: {e}"))?;
    std::thread::Builder::new()
        .name("kbq-load-dedicated".into())
        .spawn(move || {
            let tallies = runtime.block_on(futures::future::join_all(clients.into_iter().map(
                |(rng, slot, route)| {
                    client(
                        shared.clone(),
                        http.clone(),
                        Some((slot, route)),
                        rng,
                        slots,
                    )
                },
            )));
            // The run stops listening only on an error of its own.
            let _ = tx.send(tallies);
        })
        .map_err(|e| format!("cannot start the dedicated clients' thread: {e}"))?;
    Ok(rx)
}

/// Runs the load and reports its measured window.
pub async fn run(o: LoadOptions) -> Result<LoadReport, String> {
    o.check()?;
    check_loopback(&o.url)?;
    let http = http_client(o.concurrency)?;
    wait_until_ready(&http, &o).await?;
    let (names, queries) = names_and_queries(&http, &o).await?;
    // Without queries, each name gives one (`What is NAME?`).
    let asked = (
        names.len(),
        if queries.is_empty() {
            names.len()
        } else {
            queries.len()
        },
    );
    let requests = Requests::new(&o.url, &o.key, &names, &queries, o.search_len)?;
    let dedicated_requests = match &o.dedicated_url {
        Some(url) => {
            check_loopback(url)?;
            Some(Requests::new(url, &o.key, &names, &queries, o.search_len)?)
        }
        None => None,
    };
    let start = Instant::now();
    let measured_from = start + o.warmup;
    let shared = Arc::new(Shared {
        requests,
        dedicated_requests,
        mix: o.mix.clone(),
        total_weight: o.mix.iter().map(|(_, w)| w).sum(),
        turns: o.turns.and_then(|unit| Turns::new(unit, &o.mix)),
        start,
        measured_from,
        until: measured_from + o.duration,
        max_requests: o.max_requests,
        route_interval: o.route_interval,
        issued: AtomicU64::new(0),
    });
    // Report slots: the mix's routes, then each dedicated route. Client `i` (the mix's
    // first, then the dedicated ones) draws from the seed's `i`-th generator (`kbq gen`'s):
    // a seed gives the same routes and arguments.
    let slots = o.mix.len() + o.route_concurrency.len();
    let rng = |i: usize| Rng::new(o.seed ^ (i as u64 + 1));
    let own: Vec<(Rng, usize, Route)> = (o.route_concurrency.iter().enumerate())
        .flat_map(|(j, &(route, n))| std::iter::repeat_n((o.mix.len() + j, route), n))
        .enumerate()
        .map(|(k, (slot, route))| (rng(o.concurrency + k), slot, route))
        .collect();
    let own = if own.is_empty() {
        None
    } else {
        Some(dedicated(&shared, own, slots)?)
    };
    let tasks: Vec<_> = (0..o.concurrency)
        .map(|i| tokio::spawn(client(shared.clone(), http.clone(), None, rng(i), slots)))
        .collect();
    let mut tallies = vec![Tally::default(); slots];
    let mut add = |client: Vec<Tally>| {
        for (all, mine) in tallies.iter_mut().zip(client) {
            all.outcomes.extend(mine.outcomes);
            all.completed += mine.completed;
        }
    };
    for t in tasks {
        add(t.await.map_err(|e| e.to_string())?);
    }
    if let Some(own) = own {
        let own = own
            .await
            .map_err(|_| "the dedicated clients' thread stopped before it answered".to_string())?;
        own.into_iter().for_each(&mut add);
    }
    // The window closes at its planned end, or when the last response came if that was
    // first (`max_requests` sent).
    let end = Instant::now().min(shared.until);
    let elapsed = end.saturating_duration_since(measured_from).as_secs_f64();
    // The seconds each report slot's throughput is over: with turns, a mix route's own.
    let measured_s = |slot: usize| match &shared.turns {
        Some(turns) if slot < o.mix.len() => turns
            .measured(slot, measured_from - start, end.max(measured_from) - start)
            .as_secs_f64(),
        _ => elapsed,
    };
    let mix = o
        .mix
        .iter()
        .map(|&(route, _)| (route, Clients::Mix, o.concurrency));
    let own = (o.route_concurrency.iter()).map(|&(route, n)| (route, Clients::Dedicated, n));
    let routes = mix
        .chain(own)
        .zip(tallies.iter_mut())
        .enumerate()
        .filter(|(_, ((_, _, clients), _))| *clients > 0)
        .map(|(slot, ((route, kind, clients), mine))| {
            // A dedicated client's requests are its own `Requests`' (`--dedicated-url`).
            let requests = match (kind, &shared.dedicated_requests) {
                (Clients::Dedicated, Some(r)) => r,
                _ => &shared.requests,
            };
            RouteReport::summarize(route, kind, clients, mine, measured_s(slot), |d| {
                requests.describe(route, d)
            })
        })
        .collect();
    Ok(LoadReport::new(&o, asked, elapsed, routes))
}

/// [`run`] on a runtime of its own with `o.client_threads` threads (one: a single-threaded
/// runtime), so that the client takes no more of the machine than that from the server it
/// measures.
pub fn run_blocking(o: LoadOptions) -> Result<LoadReport, String> {
    o.check()?;
    let runtime = match o.client_threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
    .map_err(|e| format!("cannot start the client's runtime: {e}"))?;
    runtime.block_on(run(o))
}
