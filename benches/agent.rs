//! Agent runtime benchmarks, each against a baseline measured in the same run:
//!
//! 1. Orchestration overhead per turn: a chat turn through the agent runtime (session actor,
//!    provider actor, tool actor) against a scripted provider that answers at once, paired
//!    with the same provider requests made by a plain HTTP client.
//! 2. Many concurrent sessions: `POST /v1/agent/chat` from N concurrent clients against a
//!    provider that takes 50 ms, against the ideal N / 50 ms, and against the same load with a
//!    provider that answers at once (what the machine can do at all).
//! 3. `GET /v1/agent/health` requests per second against `GET /livez` on the same server.
//!
//! `cargo bench --workspace --bench agent` (release). Scale with BENCH_TURNS (default 3000),
//! BENCH_SESSIONS (500), BENCH_SECONDS (10). Prints a Markdown report.

#[allow(dead_code)]
#[path = "../tests/it/scripted.rs"]
mod scripted;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kbq::auth::KeyEntry;
use kbq::config::{Config, ProviderKindName, ProviderSection};
use kbq::server::{self, Options, Server};
use kbq::versions::SystemClock;
use kbq_actors::{Agent, AgentReply, AgentRequest};
use serde_json::{Value, json};

use scripted::{MODEL_ID, ScriptedLlm, Step};

const KEY: &str = "bench-key";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(llm: &ScriptedLlm) -> Config {
    let mut c = Config::default();
    c.server.listen = "127.0.0.1:0".into();
    c.server.workers = 2;
    c.store.url = "mem://".into();
    c.store.load_demo = false;
    c.data_dir = std::env::temp_dir().join("kbq-bench-unused");
    // Rate limits would measure the limiter, not the runtime.
    c.limits.graph_per_minute = 0;
    c.limits.agent_per_minute = 0;
    c.auth.keys = vec![KeyEntry {
        name: "bench".into(),
        sha256: hex::encode(kbq::auth::hash(KEY)),
        scopes: None,
    }];
    c.providers = vec![ProviderSection {
        name: "scripted".into(),
        kind: ProviderKindName::Openai,
        base_url: Some(llm.base_url()),
        model: Some(MODEL_ID.into()),
        api_key_env: None,
        timeout_ms: 30_000,
        max_retries: 0,
    }];
    c.health.probe_interval_ms = 1_000;
    c.agent.max_wall_ms = 60_000;
    c
}

async fn start(llm: &ScriptedLlm) -> Server {
    let config = config(llm);
    config.validate().expect("bench config is valid");
    let server = server::start(
        config,
        Options {
            clock: Arc::new(SystemClock),
            ..Options::default()
        },
    )
    .await
    .expect("server starts");
    assert!(
        server.wait_ready(Duration::from_secs(60)).await,
        "start-up did not finish"
    );
    server
}

fn request(message: &str) -> AgentRequest {
    AgentRequest {
        message: message.into(),
        system_prompt: None,
        history: Vec::new(),
        temperature: 0.0,
        max_tokens: 256,
    }
}

struct Stats {
    n: usize,
    mean: Duration,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut s = samples.to_vec();
    s.sort();
    let n = s.len().max(1);
    let at = |q: f64| s[((n as f64 * q) as usize).min(n - 1)];
    Stats {
        n: s.len(),
        mean: s.iter().sum::<Duration>() / n as u32,
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: *s.last().unwrap_or(&Duration::ZERO),
    }
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn row(name: &str, s: &Stats) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} |\n",
        s.n,
        us(s.mean),
        us(s.p50),
        us(s.p90),
        us(s.p99),
        us(s.max)
    )
}

/// Posts `body` to the scripted provider as a plain client would and reads the answer.
async fn direct(http: &reqwest::Client, llm: &ScriptedLlm, body: &Value) -> Value {
    http.post(format!("{}/chat/completions", llm.base_url()))
        .json(body)
        .send()
        .await
        .expect("provider answers")
        .json()
        .await
        .expect("provider answers JSON")
}

/// Part 1: one turn through the runtime vs the same provider requests made directly.
async fn overhead(turns: u64) -> String {
    let llm = ScriptedLlm::start().await;
    let server = start(&llm).await;
    let agent = server.agent.clone();
    let workspace = kbq_tools::Workspace::new("default", server.kb.clone());
    let agent = (&agent, &workspace);
    let http = reqwest::Client::new();
    let answer = || Step::Answer("The answer.".into());
    let tool_step = || Step::ToolCalls(vec![("MemoryStatsTool".into(), json!({}))]);

    // The bodies kbq sends for an answer-only turn and for a turn with one tool call: the
    // baseline replays exactly these.
    llm.push(answer());
    run_turn(agent).await;
    llm.push(tool_step());
    llm.push(answer());
    run_turn(agent).await;
    let bodies = llm.requests();
    let (plain_body, tool_first, tool_second) =
        (bodies[0].clone(), bodies[1].clone(), bodies[2].clone());

    let mut plain = (Vec::new(), Vec::new(), Vec::new());
    let mut tool = (Vec::new(), Vec::new(), Vec::new());
    let warmup = turns / 10;
    for i in 0..warmup + turns {
        // Answer-only turn: one provider request.
        llm.push(answer());
        let t = Instant::now();
        direct(&http, &llm, &plain_body).await;
        let base = t.elapsed();
        llm.push(answer());
        let t = Instant::now();
        run_turn(agent).await;
        let kbq = t.elapsed();
        if i >= warmup {
            plain.0.push(base);
            plain.1.push(kbq);
            plain.2.push(kbq.saturating_sub(base));
        }
        // Turn with one tool call: two provider requests and the tool's own work.
        llm.push(tool_step());
        llm.push(answer());
        let t = Instant::now();
        direct(&http, &llm, &tool_first).await;
        server.kb.memory_stats("bench").await.expect("stats");
        server.kb.counts().await.expect("counts");
        direct(&http, &llm, &tool_second).await;
        let base = t.elapsed();
        llm.push(tool_step());
        llm.push(answer());
        let t = Instant::now();
        let reply = run_turn(agent).await;
        let kbq = t.elapsed();
        assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
        if i >= warmup {
            tool.0.push(base);
            tool.1.push(kbq);
            tool.2.push(kbq.saturating_sub(base));
        }
    }
    server.stop(true).await;
    llm.stop().await;

    let mut out = String::new();
    out.push_str(
        "| measurement | turns | mean | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n",
    );
    out.push_str(&row(
        "answer-only: provider request alone (baseline)",
        &stats(&plain.0),
    ));
    out.push_str(&row(
        "answer-only: turn through the runtime",
        &stats(&plain.1),
    ));
    out.push_str(&row(
        "answer-only: **overhead** (turn - baseline, paired)",
        &stats(&plain.2),
    ));
    out.push_str(&row(
        "one tool call: two provider requests + the tool's query (baseline)",
        &stats(&tool.0),
    ));
    out.push_str(&row(
        "one tool call: turn through the runtime",
        &stats(&tool.1),
    ));
    out.push_str(&row(
        "one tool call: **overhead** (turn - baseline, paired)",
        &stats(&tool.2),
    ));
    out
}

async fn run_turn((agent, workspace): (&Agent, &kbq_tools::Workspace)) -> AgentReply {
    let reply = agent
        .chat(
            workspace,
            request("How many memories are there?"),
            "bench".into(),
        )
        .await
        .expect("turn runs");
    assert!(reply.success, "{reply:?}");
    reply
}

/// Part 2: `sessions` concurrent HTTP clients for `seconds`, with a provider that waits
/// `delay` before answering. Returns (turns per second, latency stats, errors).
async fn concurrent(sessions: u64, seconds: u64, delay: Duration) -> (f64, Stats, u64) {
    let llm = Arc::new(ScriptedLlm::start().await);
    let server = start(&llm).await;
    let url = format!("http://{}/v1/agent/chat", server.addr);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(sessions as usize)
        .build()
        .unwrap();
    let step = move || {
        if delay.is_zero() {
            Step::Answer("ok".into())
        } else {
            Step::Delay(delay, Box::new(Step::Answer("ok".into())))
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let (http, url, llm, stop, errors, measuring) = (
            http.clone(),
            url.clone(),
            llm.clone(),
            stop.clone(),
            errors.clone(),
            measuring.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                llm.push(step());
                let t = Instant::now();
                let res = http
                    .post(&url)
                    .bearer_auth(KEY)
                    .json(&json!({"message": "Say ok."}))
                    .send()
                    .await;
                let ok = match res {
                    Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                if measuring.load(Ordering::Relaxed) {
                    if ok {
                        samples.push(t.elapsed());
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            samples
        }));
    }
    // Two seconds to warm up (connections, actors), then measure.
    tokio::time::sleep(Duration::from_secs(2)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    server.stop(true).await;
    if let Ok(llm) = Arc::try_unwrap(llm) {
        llm.stop().await;
    }
    let rate = samples.len() as f64 / elapsed.as_secs_f64();
    (rate, stats(&samples), errors.load(Ordering::Relaxed))
}

/// Part 3: requests per second on `path` from `clients` keep-alive clients for `seconds`.
async fn throughput(
    base: &str,
    path: &str,
    auth: bool,
    clients: usize,
    seconds: u64,
) -> (f64, Stats) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let http = http.clone();
        let url = format!("{base}{path}");
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while Instant::now() < deadline {
                let mut req = http.get(&url);
                if auth {
                    req = req.bearer_auth(KEY);
                }
                let t = Instant::now();
                let res = req.send().await.expect("request sent");
                assert!(res.status().is_success(), "{url}: {}", res.status());
                res.bytes().await.expect("body");
                samples.push(t.elapsed());
            }
            samples
        }));
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    let rate = samples.len() as f64 / started.elapsed().as_secs_f64();
    (rate, stats(&samples))
}

async fn health_vs_livez(seconds: u64) -> String {
    let llm = ScriptedLlm::start().await;
    let server = start(&llm).await;
    let base = format!("http://{}", server.addr);
    let clients = 32;
    // Warm up both, then alternate so that drift on a shared machine hits both alike.
    throughput(&base, "/livez", false, clients, 1).await;
    throughput(&base, "/v1/agent/health", true, clients, 1).await;
    let mut livez = (0.0, Vec::new());
    let mut health = (0.0, Vec::new());
    for _ in 0..2 {
        let (r, s) = throughput(&base, "/livez", false, clients, seconds / 2).await;
        livez.0 += r / 2.0;
        livez.1.push(s);
        let (r, s) = throughput(&base, "/v1/agent/health", true, clients, seconds / 2).await;
        health.0 += r / 2.0;
        health.1.push(s);
    }
    server.stop(true).await;
    llm.stop().await;
    let p99 = |v: &[Stats]| us(v.iter().map(|s| s.p99).max().unwrap_or_default());
    let p50 = |v: &[Stats]| us(v.iter().map(|s| s.p50).max().unwrap_or_default());
    format!(
        "| endpoint | requests/s | p50 | p99 |\n|---|---|---|---|\n\
         | `GET /livez` (baseline) | {:.0} | {} | {} |\n\
         | `GET /v1/agent/health` | {:.0} | {} | {} |\n\n\
         Ratio health / livez: **{:.2}x** ({clients} keep-alive clients, {} s per endpoint in two alternating halves).\n",
        livez.0,
        p50(&livez.1),
        p99(&livez.1),
        health.0,
        p50(&health.1),
        p99(&health.1),
        health.0 / livez.0,
        seconds
    )
}

#[tokio::main]
async fn main() {
    let turns = env("BENCH_TURNS", 3000);
    let sessions = env("BENCH_SESSIONS", 500);
    let seconds = env("BENCH_SECONDS", 10);

    println!("## 1. Orchestration overhead per turn\n");
    println!(
        "{turns} turns of each kind, one at a time, each paired with its baseline; scripted provider answering at once.\n"
    );
    println!("{}", overhead(turns).await);

    println!("## 2. {sessions} concurrent sessions\n");
    let delay = Duration::from_millis(50);
    let (rate, s, errors) = concurrent(sessions, seconds, delay).await;
    let (ceiling, cs, cerrors) = concurrent(sessions, seconds, Duration::ZERO).await;
    let ideal = sessions as f64 / delay.as_secs_f64();
    println!(
        "| provider | turns/s | mean | p50 | p90 | p99 | max | errors |\n|---|---|---|---|---|---|---|---|"
    );
    for (name, r, s, e) in [
        ("50 ms", rate, &s, errors),
        ("answers at once (ceiling)", ceiling, &cs, cerrors),
    ] {
        println!(
            "| {name} | {r:.0} | {} | {} | {} | {} | {} | {e} |",
            us(s.mean),
            us(s.p50),
            us(s.p90),
            us(s.p99),
            us(s.max)
        );
    }
    println!(
        "\nIdeal with a 50 ms provider: {sessions} / 50 ms = {ideal:.0} turns/s. Measured: {rate:.0} turns/s = **{:.2}x of ideal**, {:.2}x of the machine's ceiling measured with a provider that answers at once ({ceiling:.0} turns/s).\n",
        rate / ideal,
        rate / ceiling.min(ideal).max(f64::MIN_POSITIVE)
    );

    println!("## 3. Health endpoint throughput\n");
    println!("{}", health_vs_livez(seconds).await);
}
