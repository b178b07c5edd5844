//! `kbq load`: drives a running kbq on loopback with a weighted mix of requests at a set
//! concurrency, bounded in requests and in seconds, and reports throughput, latency
//! percentiles and errors per route (a table, or JSON for docs).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use kbq_store::generate::Rng;
use serde::Serialize;
use serde_json::{Value, json};

/// The routes a load run can exercise, by the name used in `--mix`.
pub const ROUTES: [&str; 8] = [
    "traverse",
    "search",
    "entity",
    "documents",
    "rag",
    "chat",
    "health",
    "livez",
];

/// The default mix: mostly graph reads, some retrieval and chat, and probes.
pub const DEFAULT_MIX: &str =
    "traverse=30,search=20,entity=20,documents=10,rag=10,chat=5,health=3,livez=2";

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub url: String,
    pub key: String,
    pub concurrency: usize,
    pub duration: Duration,
    pub max_requests: Option<u64>,
    /// (route, weight)
    pub mix: Vec<(String, u32)>,
    pub seed: u64,
}

/// Parses `route=weight,...`; every route must be one of [`ROUTES`], weights positive.
pub fn parse_mix(text: &str) -> Result<Vec<(String, u32)>, String> {
    let mut mix = Vec::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (route, weight) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}` is not route=weight"))?;
        let route = route.trim();
        if !ROUTES.contains(&route) {
            return Err(format!(
                "unknown route `{route}`; routes are {}",
                ROUTES.join(", ")
            ));
        }
        let weight: u32 = weight
            .trim()
            .parse()
            .map_err(|_| format!("the weight of `{route}` must be a whole number"))?;
        if weight > 0 {
            mix.push((route.to_string(), weight));
        }
    }
    if mix.is_empty() {
        return Err("the mix has no route with a positive weight".into());
    }
    Ok(mix)
}

/// Only loopback targets: a load test must not be pointed at someone else's server.
pub fn check_loopback(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("the URL must start with http://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(format!(
            "`{host}` is not a loopback address: kbq load only drives a server on this machine"
        ))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RouteReport {
    pub route: String,
    pub requests: u64,
    pub errors: u64,
    /// Responses per status code ("transport" for failures without one).
    pub statuses: BTreeMap<String, u64>,
    pub throughput_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub url: String,
    pub concurrency: usize,
    pub elapsed_s: f64,
    pub requests: u64,
    pub errors: u64,
    pub throughput_per_s: f64,
    pub routes: Vec<RouteReport>,
}

impl LoadReport {
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} requests in {:.1} s at concurrency {} ({:.0} req/s), {} errors\n\n| route | requests | errors | req/s | p50 ms | p90 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|---|\n",
            self.requests, self.elapsed_s, self.concurrency, self.throughput_per_s, self.errors
        );
        for r in &self.routes {
            out.push_str(&format!(
                "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                r.route,
                r.requests,
                r.errors,
                r.throughput_per_s,
                r.p50_ms,
                r.p90_ms,
                r.p99_ms,
                r.max_ms
            ));
        }
        out
    }
}

struct Sample {
    route: usize,
    status: Option<u16>,
    latency: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
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

fn request(
    http: &reqwest::Client,
    o: &LoadOptions,
    route: &str,
    entity: &str,
) -> reqwest::RequestBuilder {
    let post = |path: &str, body: Value| {
        http.post(format!("{}{path}", o.url))
            .bearer_auth(&o.key)
            .header("content-type", "application/json")
            .body(body.to_string())
    };
    let encoded = percent_encoding::utf8_percent_encode(entity, percent_encoding::NON_ALPHANUMERIC);
    match route {
        "traverse" => post(
            "/data/v1/query/graph",
            json!({"entity_name": entity, "depth": 2, "limit": 50}),
        ),
        "search" => post(
            "/data/v1/query/graph/search",
            json!({"query": entity.chars().take(4).collect::<String>(), "limit": 10}),
        ),
        "entity" => http
            .get(format!("{}/data/v1/query/graph/entity/{encoded}", o.url))
            .bearer_auth(&o.key),
        "documents" => post(
            "/data/v1/query/graph/documents",
            json!({"entity_name": entity, "max_depth": 1, "limit": 10}),
        ),
        "rag" => post(
            "/v1/rag/hybrid",
            json!({"query": format!("What is {entity}?"), "limit": 5}),
        ),
        "chat" => post(
            "/v1/agent/chat",
            json!({"message": format!("Tell me about {entity}")}),
        ),
        "health" => http
            .get(format!("{}/v1/agent/health", o.url))
            .bearer_auth(&o.key),
        _ => http.get(format!("{}/livez", o.url)),
    }
}

/// Runs the load and reports it.
pub async fn run(o: LoadOptions) -> Result<LoadReport, String> {
    check_loopback(&o.url)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(o.concurrency)
        .build()
        .map_err(|e| e.to_string())?;
    let names = std::sync::Arc::new(entity_names(&http, &o).await?);
    let total_weight: u32 = o.mix.iter().map(|(_, w)| w).sum();
    let issued = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + o.duration;
    let mut tasks = Vec::new();
    for worker in 0..o.concurrency.max(1) {
        let (http, o, names, issued) = (http.clone(), o.clone(), names.clone(), issued.clone());
        tasks.push(tokio::spawn(async move {
            // The generator of `kbq gen`: a seed gives the same routes and arguments.
            let mut rng = Rng::new(o.seed ^ (worker as u64 + 1));
            let mut samples = Vec::new();
            while Instant::now() < deadline {
                let n = issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if o.max_requests.is_some_and(|max| n >= max) {
                    break;
                }
                let mut pick = (rng.next_u64() % u64::from(total_weight)) as u32;
                let route = o
                    .mix
                    .iter()
                    .position(|(_, w)| {
                        if pick < *w {
                            true
                        } else {
                            pick -= w;
                            false
                        }
                    })
                    .unwrap_or(0);
                let entity = &names[rng.below(names.len())];
                let sent = Instant::now();
                let status = request(&http, &o, &o.mix[route].0, entity)
                    .send()
                    .await
                    .ok()
                    .map(|r| r.status().as_u16());
                samples.push(Sample {
                    route,
                    status,
                    latency: sent.elapsed(),
                });
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.map_err(|e| e.to_string())?);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut routes = Vec::new();
    for (i, (route, _)) in o.mix.iter().enumerate() {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.route == i).collect();
        let mut latencies: Vec<Duration> = mine.iter().map(|s| s.latency).collect();
        latencies.sort();
        let mut statuses = BTreeMap::new();
        for s in &mine {
            let key = s.status.map_or("transport".to_string(), |c| c.to_string());
            *statuses.entry(key).or_insert(0) += 1;
        }
        let errors = mine
            .iter()
            .filter(|s| !s.status.is_some_and(|c| (200..300).contains(&c)))
            .count() as u64;
        routes.push(RouteReport {
            route: route.clone(),
            requests: mine.len() as u64,
            errors,
            statuses,
            throughput_per_s: mine.len() as f64 / elapsed,
            p50_ms: percentile(&latencies, 0.50),
            p90_ms: percentile(&latencies, 0.90),
            p99_ms: percentile(&latencies, 0.99),
            max_ms: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        });
    }
    let requests = samples.len() as u64;
    Ok(LoadReport {
        url: o.url,
        concurrency: o.concurrency,
        elapsed_s: elapsed,
        requests,
        errors: routes.iter().map(|r| r.errors).sum(),
        throughput_per_s: requests as f64 / elapsed,
        routes,
    })
}

#[cfg(test)]
mod tests {
    use super::{check_loopback, parse_mix};

    #[test]
    fn only_loopback_targets_are_driven() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://localhost:1",
            "http://[::1]:8080/",
            "http://127.3.2.1",
        ] {
            assert!(check_loopback(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.1:8080",
            "http://example.com",
            "https://127.0.0.1",
            "http://[2001:db8::1]:80",
        ] {
            assert!(check_loopback(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mixes_name_known_routes_with_whole_weights() {
        assert_eq!(
            parse_mix("traverse=3, livez=1,chat=0").unwrap(),
            vec![("traverse".to_string(), 3), ("livez".to_string(), 1)]
        );
        assert!(parse_mix("nope=1").unwrap_err().contains("unknown route"));
        assert!(parse_mix("traverse=x").is_err());
        assert!(parse_mix("chat=0").is_err());
    }
}
