//! [`LoadOptions`]: what a `kbq load` run does, and the parsing and checks of its command-line
//! forms (`--mix`, `--route-concurrency`, the loopback rule). Pure functions, apart from the
//! driver so that they are tested without a server.

use std::net::IpAddr;
use std::time::Duration;

use super::Route;

/// The default mix: mostly graph reads, some retrieval and chat, and probes.
pub const DEFAULT_MIX: &str =
    "traverse=30,search=20,entity=20,documents=10,rag=10,chat=5,health=3,livez=2";

/// The most clients of either kind (mix or dedicated) a run may have.
const MAX_CLIENTS: usize = 4096;
/// The longest run and the longest warm-up.
const MAX_SECONDS: u64 = 86_400;
/// The longest search query `--search-len` may ask for, in characters.
const MAX_SEARCH_LEN: usize = 256;
/// The most threads the client's own runtime may have.
const MAX_THREADS: usize = 64;
/// Most entity names and queries a run samples.
const MAX_NAMES: usize = 1_000_000;
const MAX_QUERIES: usize = 1_000_000;
/// The shortest and the longest turn unit (`--turns-ms`): a turn of 10 ms settles for 2.
const TURN_UNIT_MS: std::ops::RangeInclusive<u128> = 10..=3_600_000;

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub url: String,
    pub key: String,
    /// Clients that pick each request's route from `mix` (0: no mix, only dedicated clients).
    pub concurrency: usize,
    /// Clients beside the mix's that each send only one route: (route, clients).
    pub route_concurrency: Vec<(Route, usize)>,
    /// Where the dedicated clients send (e.g. a server's probe listener,
    /// `server.probe_listen`); `None`: `url`.
    pub dedicated_url: Option<String>,
    /// The least time between the starts of a dedicated client's requests (zero: back to
    /// back). A probe sent back to back is a load of its own, taking the machine from the
    /// mix it is meant to watch.
    pub route_interval: Duration,
    /// How long the load runs before the measured window; its samples are dropped.
    pub warmup: Duration,
    /// The measured window (shorter if `max_requests` are sent first).
    pub duration: Duration,
    /// Most requests in the measured window.
    pub max_requests: Option<u64>,
    /// (route, weight)
    pub mix: Vec<(Route, u32)>,
    pub seed: u64,
    /// Characters per search query, taken at a random offset in an entity's name; `None`: the
    /// name's first four.
    pub search_len: Option<usize>,
    /// Threads of the runtime of the mix's clients: it shares the machine with the server it
    /// measures. The dedicated clients have a thread and a runtime of their own.
    pub client_threads: usize,
    /// `--turns-ms`: the mix's routes take turns of weight × this, each measured over its own
    /// turns (see [`Turns`](super::Turns)), instead of each request's route drawn by weight.
    pub turns: Option<Duration>,
    /// `--data`: the import file the server's knowledge base was loaded from; names and
    /// queries are sampled from it (see [`sample`](super::sample)) rather than from the
    /// server's answers.
    pub data: Option<std::path::PathBuf>,
    /// Entity names to ask about, sampled by degree (with `data`).
    pub names: usize,
    /// Distinct RAG and chat queries, made from the documents.
    pub queries: usize,
}

impl LoadOptions {
    /// Holds the numbers to their ranges, and refuses a run with no client.
    pub fn check(&self) -> Result<(), String> {
        let dedicated: usize = self.route_concurrency.iter().map(|(_, n)| n).sum();
        if self.concurrency > MAX_CLIENTS || dedicated > MAX_CLIENTS {
            return Err(format!(
                "--concurrency and the sum of --route-concurrency must each be at most {MAX_CLIENTS}"
            ));
        }
        if self.concurrency + dedicated == 0 {
            return Err("no clients: --concurrency is 0 and --route-concurrency names none".into());
        }
        if self.concurrency > 0 && self.mix.iter().all(|&(_, w)| w == 0) {
            return Err("the mix's clients need a route with a positive weight".into());
        }
        if !(1..=MAX_SECONDS).contains(&self.duration.as_secs()) {
            return Err(format!("--duration must be 1 to {MAX_SECONDS} seconds"));
        }
        if self.route_interval.as_secs() > MAX_SECONDS {
            return Err(format!(
                "--route-interval-ms must be at most {MAX_SECONDS} s"
            ));
        }
        if self.warmup.as_secs() > MAX_SECONDS {
            return Err(format!("--warmup must be 0 to {MAX_SECONDS} seconds"));
        }
        if self
            .search_len
            .is_some_and(|n| !(1..=MAX_SEARCH_LEN).contains(&n))
        {
            return Err(format!("--search-len must be 1 to {MAX_SEARCH_LEN}"));
        }
        if !(1..=MAX_NAMES).contains(&self.names) {
            return Err(format!("--names must be 1 to {MAX_NAMES}"));
        }
        if !(1..=MAX_QUERIES).contains(&self.queries) {
            return Err(format!("--queries must be 1 to {MAX_QUERIES}"));
        }
        if !(1..=MAX_THREADS).contains(&self.client_threads) {
            return Err(format!("--threads must be 1 to {MAX_THREADS}"));
        }
        if let Some(unit) = self.turns {
            if !TURN_UNIT_MS.contains(&unit.as_millis()) {
                return Err(format!(
                    "--turns-ms must be {} to {}",
                    TURN_UNIT_MS.start(),
                    TURN_UNIT_MS.end()
                ));
            }
            // Every route then has all of its turn in the window, whatever the phase.
            let weights: u128 = self.mix.iter().map(|&(_, w)| u128::from(w)).sum();
            let cycle = unit.as_millis() * weights;
            if cycle > self.duration.as_millis() {
                return Err(format!(
                    "--turns-ms times the mix's weights ({cycle} ms a round) must be at most --duration"
                ));
            }
        }
        Ok(())
    }
}

/// Parses `route=weight,...`; weights are whole numbers, those of 0 dropped, and at least one
/// must be positive.
pub fn parse_mix(text: &str) -> Result<Vec<(Route, u32)>, String> {
    let mix = parse_route_numbers(text, "weight")?;
    if mix.is_empty() {
        return Err("the mix has no route with a positive weight".into());
    }
    Ok(mix)
}

/// Parses `route=clients,...` (may be empty); counts of 0 are dropped.
pub fn parse_route_concurrency(text: &str) -> Result<Vec<(Route, usize)>, String> {
    parse_route_numbers(text, "client count")
}

/// `route=number,...`: every route one of [`Route::ALL`] and named once, every number whole;
/// pairs with 0 are dropped.
fn parse_route_numbers<N>(text: &str, what: &str) -> Result<Vec<(Route, N)>, String>
where
    N: std::str::FromStr + Default + PartialEq,
{
    let mut pairs: Vec<(Route, N)> = Vec::new();
    let mut seen = Vec::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (route, number) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}` is not route={}", what.replace(' ', "_")))?;
        let route = Route::parse(route.trim())?;
        if seen.contains(&route) {
            return Err(format!("`{}` is named twice", route.name()));
        }
        seen.push(route);
        let number: N = number
            .trim()
            .parse()
            .map_err(|_| format!("the {what} of `{}` must be a whole number", route.name()))?;
        if number != N::default() {
            pairs.push((route, number));
        }
    }
    Ok(pairs)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{LoadOptions, Route, check_loopback, parse_mix, parse_route_concurrency};

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
            vec![(Route::Traverse, 3), (Route::Livez, 1)]
        );
        assert!(parse_mix("nope=1").unwrap_err().contains("unknown route"));
        assert!(parse_mix("traverse=x").is_err());
        assert!(parse_mix("traverse=-1").is_err());
        assert!(parse_mix("traverse").unwrap_err().contains("route=weight"));
        assert!(parse_mix("chat=0").is_err());
        assert!(parse_mix("").is_err());
        assert!(parse_mix("chat=1,chat=2").unwrap_err().contains("twice"));
    }

    #[test]
    fn route_concurrency_names_known_routes_once_and_may_be_empty() {
        assert_eq!(parse_route_concurrency("").unwrap(), vec![]);
        assert_eq!(
            parse_route_concurrency("livez=1, health=2,chat=0,").unwrap(),
            vec![(Route::Livez, 1), (Route::Health, 2)]
        );
        assert!(
            parse_route_concurrency("livez")
                .unwrap_err()
                .contains("route=client_count")
        );
        assert!(
            parse_route_concurrency("probe=1")
                .unwrap_err()
                .contains("unknown route `probe`")
        );
        assert!(parse_route_concurrency("livez=1.5").is_err());
        assert!(parse_route_concurrency("livez=1,livez=1").is_err());
    }

    fn options() -> LoadOptions {
        LoadOptions {
            url: "http://127.0.0.1:1".into(),
            key: "k".into(),
            concurrency: 8,
            route_concurrency: vec![],
            dedicated_url: None,
            route_interval: Duration::ZERO,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(10),
            max_requests: None,
            mix: vec![(Route::Livez, 1)],
            seed: 42,
            search_len: None,
            client_threads: 1,
            turns: None,
            data: None,
            names: 2000,
            queries: 5000,
        }
    }

    #[test]
    fn a_run_needs_a_client_and_numbers_in_range() {
        assert!(options().check().is_ok());
        let only_dedicated = LoadOptions {
            concurrency: 0,
            route_concurrency: vec![(Route::Livez, 1)],
            ..options()
        };
        assert!(only_dedicated.check().is_ok());
        let no_mix = LoadOptions {
            mix: vec![],
            ..only_dedicated
        };
        assert!(no_mix.check().is_ok());
        let turns = LoadOptions {
            mix: vec![(Route::Livez, 1), (Route::Health, 4)],
            turns: Some(Duration::from_secs(2)),
            ..options()
        };
        assert!(turns.check().is_ok());
        let bad = [
            LoadOptions {
                concurrency: 0,
                ..options()
            },
            LoadOptions {
                concurrency: 4097,
                ..options()
            },
            LoadOptions {
                route_concurrency: vec![(Route::Livez, 4000), (Route::Health, 97)],
                ..options()
            },
            LoadOptions {
                mix: vec![],
                ..options()
            },
            LoadOptions {
                duration: Duration::ZERO,
                ..options()
            },
            LoadOptions {
                route_interval: Duration::from_secs(86_401),
                ..options()
            },
            LoadOptions {
                warmup: Duration::from_secs(86_401),
                ..options()
            },
            LoadOptions {
                search_len: Some(0),
                ..options()
            },
            LoadOptions {
                client_threads: 0,
                ..options()
            },
            LoadOptions {
                turns: Some(Duration::from_millis(9)),
                ..options()
            },
            // A round of 11 s in a window of 10.
            LoadOptions {
                mix: vec![(Route::Livez, 1), (Route::Health, 10)],
                turns: Some(Duration::from_secs(1)),
                ..options()
            },
        ];
        for o in bad {
            assert!(o.check().is_err(), "{o:?}");
        }
    }
}
