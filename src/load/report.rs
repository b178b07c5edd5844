//! What a `kbq load` run reports: [`LoadReport`], with a [`RouteReport`] per route and kind of
//! client ([`Clients`]), summarized from the [`Tally`] of the measured window (its
//! [`Outcome`]s and its count of responses). The statistics are pure functions of the tallies,
//! apart from the driver so that they are tested on made-up samples.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::requests::Drawn;
use super::{LoadOptions, Route};

/// Which clients sent a route's requests: a probe's latency measured by its own client is
/// reported apart from the same route drawn by the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Clients {
    /// The `--concurrency` clients, each request's route drawn from `--mix`.
    Mix,
    /// The `--route-concurrency` clients of this one route.
    Dedicated,
}

impl Clients {
    /// Its name in the table, as the JSON names it.
    fn name(self) -> &'static str {
        match self {
            Clients::Mix => "mix",
            Clients::Dedicated => "dedicated",
        }
    }
}

/// One request of the measured window: its status (`None`: no response) and latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub status: Option<u16>,
    pub latency: Duration,
    /// Which request it was.
    pub drawn: Drawn,
}

/// The slowest request of a route in the measured window, named so that it can be sent again.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Slowest {
    pub ms: f64,
    /// Its status; `None`: no response (a transport failure).
    pub status: Option<u16>,
    /// The method, path and body ([`Requests::describe`](super::requests::Requests::describe)).
    pub request: String,
}

/// What the clients saw of one route in the measured window.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// The requests sent within the window, however late they were answered.
    pub outcomes: Vec<Outcome>,
    /// Responses that arrived within the window, whenever their request was sent: what
    /// throughput counts, so that neither the requests in flight when the window opens nor
    /// those in flight when it closes bias it.
    pub completed: u64,
}

/// HTTP 503: the server shed the request (its queue or lane was full).
const SHED: u16 = 503;

#[derive(Debug, Clone, Serialize)]
pub struct RouteReport {
    pub route: Route,
    pub clients: Clients,
    /// The clients that sent it: its dedicated ones, or all the mix's (shared with the mix's
    /// other routes).
    pub concurrency: usize,
    /// Requests sent within the measured window: the latencies and status counts are theirs.
    pub requests: u64,
    /// Responses that arrived within the measured window, whenever their request was sent.
    pub completed: u64,
    /// Responses other than 2xx, shed ones included, and transport failures.
    pub errors: u64,
    /// 503 responses: requests the server shed.
    pub shed: u64,
    /// Responses per status code ("transport" for failures without one).
    pub statuses: BTreeMap<String, u64>,
    /// The seconds `throughput_per_s` is over: the measured window, or with `--turns-ms` the
    /// route's own settled turns in it.
    pub measured_s: f64,
    /// `completed` per second of `measured_s`.
    pub throughput_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// The request that took `max_ms`; `None` when none was measured.
    pub slowest: Option<Slowest>,
}

impl RouteReport {
    /// Summarizes `tally` (its outcomes in any order; sorted here by latency) over `elapsed_s`
    /// measured seconds; `describe` names the slowest request.
    pub fn summarize(
        route: Route,
        clients: Clients,
        concurrency: usize,
        tally: &mut Tally,
        elapsed_s: f64,
        describe: impl Fn(Drawn) -> String,
    ) -> RouteReport {
        let outcomes = &mut tally.outcomes;
        outcomes.sort_unstable_by_key(|o| o.latency);
        let mut statuses = BTreeMap::new();
        for o in outcomes.iter() {
            let key = o.status.map_or("transport".to_string(), |c| c.to_string());
            *statuses.entry(key).or_insert(0) += 1;
        }
        let count = |keep: fn(Option<u16>) -> bool| {
            outcomes.iter().filter(|o| keep(o.status)).count() as u64
        };
        RouteReport {
            route,
            clients,
            concurrency,
            requests: outcomes.len() as u64,
            completed: tally.completed,
            errors: count(|s| !s.is_some_and(|c| (200..300).contains(&c))),
            shed: count(|s| s == Some(SHED)),
            statuses,
            measured_s: elapsed_s,
            throughput_per_s: per_second(tally.completed, elapsed_s),
            p50_ms: percentile_ms(outcomes, 0.50),
            p90_ms: percentile_ms(outcomes, 0.90),
            p99_ms: percentile_ms(outcomes, 0.99),
            p999_ms: percentile_ms(outcomes, 0.999),
            max_ms: outcomes
                .last()
                .map_or(0.0, |o| o.latency.as_secs_f64() * 1e3),
            slowest: outcomes.last().map(|o| Slowest {
                ms: o.latency.as_secs_f64() * 1e3,
                status: o.status,
                request: describe(o.drawn),
            }),
        }
    }
}

/// The nearest-rank percentile `p` (0 to 1) of outcomes sorted by latency, in milliseconds;
/// 0 when there are none.
fn percentile_ms(sorted: &[Outcome], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].latency.as_secs_f64() * 1e3
}

fn per_second(count: u64, elapsed_s: f64) -> f64 {
    if elapsed_s > 0.0 {
        count as f64 / elapsed_s
    } else {
        0.0
    }
}

/// A run: its options, its totals, and a report per route and kind of client (the mix's in
/// mix order, then the dedicated ones in `--route-concurrency` order).
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub url: String,
    /// Where the dedicated clients sent, when not to `url` (`--dedicated-url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedicated_url: Option<String>,
    /// The mix's clients.
    pub concurrency: usize,
    /// Dedicated clients per route.
    pub route_concurrency: BTreeMap<Route, usize>,
    /// The least time between a dedicated client's requests (0: back to back).
    pub route_interval_ms: f64,
    /// Weights per route of the mix.
    pub mix: BTreeMap<Route, u32>,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub max_requests: Option<u64>,
    pub seed: u64,
    /// Characters per search query (`None`: an entity name's first four).
    pub search_len: Option<usize>,
    pub client_threads: usize,
    /// The entity names asked about, and the distinct RAG and chat queries asked.
    pub names: usize,
    pub queries: usize,
    /// Where they came from: `data` (`--data`) or `server`.
    pub sampled_from: &'static str,
    /// The unit of the mix's turns (`--turns-ms`), when its routes took turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns_ms: Option<f64>,
    /// The measured window as it ran: from the end of the warm-up to its planned end, or to
    /// the last response if that came first (`max_requests` sent).
    pub elapsed_s: f64,
    pub requests: u64,
    pub completed: u64,
    pub errors: u64,
    pub shed: u64,
    pub throughput_per_s: f64,
    pub routes: Vec<RouteReport>,
}

impl LoadReport {
    /// The run's report from its routes' reports, with the totals summed from them.
    /// `asked`: the names and the queries the run drew from.
    pub fn new(
        o: &LoadOptions,
        asked: (usize, usize),
        elapsed_s: f64,
        routes: Vec<RouteReport>,
    ) -> LoadReport {
        let requests = routes.iter().map(|r| r.requests).sum();
        let completed = routes.iter().map(|r| r.completed).sum();
        LoadReport {
            url: o.url.clone(),
            dedicated_url: o.dedicated_url.clone(),
            concurrency: o.concurrency,
            route_concurrency: o.route_concurrency.iter().copied().collect(),
            route_interval_ms: o.route_interval.as_secs_f64() * 1e3,
            mix: o.mix.iter().copied().collect(),
            warmup_s: o.warmup.as_secs_f64(),
            duration_s: o.duration.as_secs_f64(),
            max_requests: o.max_requests,
            seed: o.seed,
            search_len: o.search_len,
            client_threads: o.client_threads,
            names: asked.0,
            queries: asked.1,
            sampled_from: if o.data.is_some() { "data" } else { "server" },
            turns_ms: o.turns.map(|t| t.as_secs_f64() * 1e3),
            elapsed_s,
            requests,
            completed,
            errors: routes.iter().map(|r| r.errors).sum(),
            shed: routes.iter().map(|r| r.shed).sum(),
            throughput_per_s: per_second(completed, elapsed_s),
            routes,
        }
    }

    /// The report as a line of totals and a Markdown table of routes.
    pub fn table(&self) -> String {
        let dedicated: Vec<String> = self
            .route_concurrency
            .iter()
            .map(|(r, n)| format!("{}={n}", r.name()))
            .collect();
        let mut out = format!(
            "{} requests in {:.1} s ({:.0} req/s) after a {:.0} s warm-up, {} errors of which {} shed (503); mix at concurrency {}{}, dedicated clients: {}\n\n| route | clients | requests | errors | shed | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
            self.requests,
            self.elapsed_s,
            self.throughput_per_s,
            self.warmup_s,
            self.errors,
            self.shed,
            self.concurrency,
            self.turns_ms.map_or(String::new(), |ms| format!(
                " in turns of {ms:.0} ms per weight (each route's req/s over its own turns)"
            )),
            if dedicated.is_empty() {
                "none".to_string()
            } else {
                dedicated.join(",")
            }
        );
        for r in &self.routes {
            let clients = r.clients.name();
            out.push_str(&format!(
                "| {} | {clients} ({}) | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                r.route.name(),
                r.concurrency,
                r.requests,
                r.errors,
                r.shed,
                r.throughput_per_s,
                r.p50_ms,
                r.p90_ms,
                r.p99_ms,
                r.p999_ms,
                r.max_ms
            ));
        }
        // Each route's slowest request, to send again by hand.
        let slowest: Vec<String> = (self.routes.iter())
            .filter_map(|r| {
                let s = r.slowest.as_ref()?;
                let status = s
                    .status
                    .map_or("no response".to_string(), |c| c.to_string());
                let clients = r.clients.name();
                Some(format!(
                    "- {} ({clients}): {:.2} ms, {status}: {}\n",
                    r.route.name(),
                    s.ms,
                    s.request
                ))
            })
            .collect();
        if !slowest.is_empty() {
            out.push_str("\nThe slowest request of each route:\n");
            out.extend(slowest);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Clients, Drawn, LoadReport, Outcome, Route, RouteReport, Tally};
    use crate::load::LoadOptions;

    fn outcome(status: Option<u16>, ms: u64) -> Outcome {
        Outcome {
            status,
            latency: Duration::from_millis(ms),
            drawn: Drawn::default(),
        }
    }

    /// Names every request by a fixed text: which one is the slowest is the tests' question.
    fn named(_: Drawn) -> String {
        "POST /data/v1/query/graph {}".to_string()
    }

    /// A tally whose every outcome was answered within the window.
    fn tally(outcomes: Vec<Outcome>) -> Tally {
        Tally {
            completed: outcomes.len() as u64,
            outcomes,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank_over_sorted_latencies() {
        // 1..=1000 ms, shuffled by a fixed stride.
        let mut t = tally(
            (0..1000u64)
                .map(|i| outcome(Some(200), (i * 7919) % 1000 + 1))
                .collect(),
        );
        let r = RouteReport::summarize(Route::Traverse, Clients::Mix, 4, &mut t, 2.0, named);
        assert_eq!(r.requests, 1000);
        assert_eq!((r.errors, r.shed), (0, 0));
        assert_eq!(r.throughput_per_s, 500.0);
        // Index round(999 * p): 500, 900, 990, 999 (0-based) of 1..=1000.
        assert_eq!(r.p50_ms, 501.0);
        assert_eq!(r.p90_ms, 900.0);
        assert_eq!(r.p99_ms, 990.0);
        assert_eq!(r.p999_ms, 999.0);
        assert_eq!(r.max_ms, 1000.0);
        assert!(r.p50_ms <= r.p90_ms && r.p90_ms <= r.p99_ms && r.p99_ms <= r.p999_ms);
    }

    #[test]
    fn errors_count_every_non_2xx_and_shed_counts_503s() {
        let mut t = tally(vec![
            outcome(Some(200), 1),
            outcome(Some(204), 1),
            outcome(Some(503), 2),
            outcome(Some(503), 3),
            outcome(Some(429), 1),
            outcome(None, 60_000),
        ]);
        let r = RouteReport::summarize(Route::Livez, Clients::Dedicated, 1, &mut t, 1.0, named);
        assert_eq!((r.requests, r.errors, r.shed), (6, 4, 2));
        // The slowest is the transport failure, named with no status.
        let slowest = r.slowest.as_ref().unwrap();
        assert_eq!((slowest.ms, slowest.status), (60_000.0, None));
        assert_eq!(slowest.request, named(Drawn::default()));
        let statuses: Vec<(&str, u64)> = r.statuses.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            statuses,
            [
                ("200", 1),
                ("204", 1),
                ("429", 1),
                ("503", 2),
                ("transport", 1)
            ]
        );
        assert_eq!(r.max_ms, 60_000.0);
    }

    #[test]
    fn no_outcomes_and_no_time_give_zeros_not_nan() {
        let r = RouteReport::summarize(
            Route::Chat,
            Clients::Mix,
            1,
            &mut Tally::default(),
            0.0,
            named,
        );
        assert_eq!(r.requests, 0);
        for v in [r.throughput_per_s, r.p50_ms, r.p999_ms, r.max_ms] {
            assert_eq!(v, 0.0);
        }
    }

    #[test]
    fn throughput_counts_responses_in_the_window_not_requests_sent_in_it() {
        // Two sent in the window, one of them answered after it; three answered in it that
        // were sent before it (in the warm-up).
        let mut t = Tally {
            outcomes: vec![outcome(Some(200), 1), outcome(Some(200), 900)],
            completed: 4,
        };
        let r = RouteReport::summarize(Route::Chat, Clients::Mix, 1, &mut t, 2.0, named);
        assert_eq!((r.requests, r.completed), (2, 4));
        assert_eq!(r.throughput_per_s, 2.0);
    }

    #[test]
    fn the_run_report_sums_its_routes_and_keeps_its_options() {
        let o = LoadOptions {
            url: "http://127.0.0.1:1".into(),
            key: "k".into(),
            concurrency: 2,
            route_concurrency: vec![(Route::Livez, 1)],
            dedicated_url: None,
            route_interval: Duration::from_millis(5),
            warmup: Duration::from_secs(3),
            duration: Duration::from_secs(10),
            max_requests: None,
            mix: vec![(Route::Traverse, 3), (Route::Livez, 1)],
            seed: 7,
            search_len: Some(2),
            client_threads: 1,
            turns: None,
            data: None,
            names: 2000,
            queries: 5000,
        };
        let mix_livez = RouteReport::summarize(
            Route::Livez,
            Clients::Mix,
            2,
            &mut tally(vec![outcome(Some(503), 1)]),
            2.0,
            named,
        );
        let probe = RouteReport::summarize(
            Route::Livez,
            Clients::Dedicated,
            1,
            &mut tally(vec![
                outcome(Some(200), 1),
                outcome(Some(200), 2),
                outcome(None, 3),
            ]),
            2.0,
            named,
        );
        let report = LoadReport::new(&o, (400, 5000), 2.0, vec![mix_livez, probe]);
        assert_eq!((report.requests, report.errors, report.shed), (4, 2, 1));
        assert_eq!(report.throughput_per_s, 2.0);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["route_concurrency"]["livez"], 1);
        assert_eq!(json["route_interval_ms"], 5.0);
        assert_eq!(json["mix"]["traverse"], 3);
        assert_eq!(json["warmup_s"], 3.0);
        assert_eq!(json["search_len"], 2);
        assert_eq!(
            (&json["names"], &json["queries"], &json["sampled_from"]),
            (&400.into(), &5000.into(), &"server".into())
        );
        assert_eq!(json["routes"][0]["route"], "livez");
        assert_eq!(json["routes"][0]["clients"], "mix");
        assert_eq!(json["routes"][1]["clients"], "dedicated");
        assert_eq!(json["routes"][1]["p999_ms"], 3.0);
        let table = report.table();
        assert!(
            table.contains("| livez | dedicated (1) | 3 | 1 | 0 |"),
            "{table}"
        );
        assert!(table.contains("dedicated clients: livez=1"), "{table}");
    }
}
