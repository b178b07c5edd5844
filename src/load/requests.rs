//! [`Requests`]: every URL, header and body a run sends, built once before the clients start,
//! so that a request costs the client a table lookup and a few reference-count increments
//! rather than formatting JSON and parsing URLs: the client shares the machine with the server
//! it measures, and its own work must stay small.

use bytes::Bytes;
use kbq_store::generate::Rng;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Client, RequestBuilder, Url};
use serde_json::json;

use super::Route;

/// What the requests about one entity send.
struct Target {
    entity_url: Url,
    traverse: Bytes,
    documents: Bytes,
    /// One body per search query this name gives (see [`search_queries`]).
    searches: Vec<Bytes>,
}

/// What the requests of one query send: RAG and chat ask in words, not about a name.
struct Asked {
    rag: Bytes,
    chat: Bytes,
}

/// Which of a run's requests was sent: the entity, query and search drawn, so that the
/// slowest one can be named after the run ([`Requests::describe`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drawn {
    target: u32,
    asked: u32,
    search: u32,
}

/// The requests of a run, about the entities it samples.
pub struct Requests {
    auth: HeaderValue,
    traverse_url: Url,
    search_url: Url,
    documents_url: Url,
    rag_url: Url,
    chat_url: Url,
    health_url: Url,
    livez_url: Url,
    targets: Vec<Target>,
    asked: Vec<Asked>,
}

const JSON: HeaderValue = HeaderValue::from_static("application/json");

impl Requests {
    /// The requests to `base` (no trailing `/`) with `key`, about `names` (not empty), with
    /// search queries of `search_len` characters (`None`: each name's first four), and RAG
    /// and chat requests asking `queries` (`What is NAME?` of each name when empty).
    pub fn new(
        base: &str,
        key: &str,
        names: &[String],
        queries: &[String],
        search_len: Option<usize>,
    ) -> Result<Requests, String> {
        let url = |path: &str| {
            Url::parse(&format!("{base}{path}")).map_err(|e| format!("`{base}{path}`: {e}"))
        };
        let body = |v: serde_json::Value| Bytes::from(v.to_string());
        let targets = names
            .iter()
            .map(|name| {
                let encoded =
                    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
                Ok(Target {
                    entity_url: url(&format!("/data/v1/query/graph/entity/{encoded}"))?,
                    traverse: body(json!({"entity_name": name, "depth": 2, "limit": 50})),
                    documents: body(json!({"entity_name": name, "max_depth": 1, "limit": 10})),
                    searches: search_queries(name, search_len)
                        .into_iter()
                        .map(|q| body(json!({"query": q, "limit": 10})))
                        .collect(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if targets.is_empty() {
            return Err("no entity names to query".into());
        }
        let asked = if queries.is_empty() {
            names.iter().map(|n| format!("What is {n}?")).collect()
        } else {
            queries.to_vec()
        };
        let asked = (asked.into_iter())
            .map(|q| Asked {
                rag: body(json!({"query": q, "limit": 5})),
                chat: body(json!({"message": q})),
            })
            .collect();
        Ok(Requests {
            auth: HeaderValue::try_from(format!("Bearer {key}"))
                .map_err(|_| "the key is not a valid header value".to_string())?,
            traverse_url: url("/data/v1/query/graph")?,
            search_url: url("/data/v1/query/graph/search")?,
            documents_url: url("/data/v1/query/graph/documents")?,
            rag_url: url("/v1/rag/hybrid")?,
            chat_url: url("/v1/agent/chat")?,
            health_url: url("/v1/agent/health")?,
            livez_url: url("/livez")?,
            targets,
            asked,
        })
    }

    /// A request of `route` about an entity and a query drawn from `rng` (both drawn for
    /// every route, so that a seed gives the same sequence whatever the mix).
    pub fn request(&self, http: &Client, route: Route, rng: &mut Rng) -> (RequestBuilder, Drawn) {
        let target = rng.below(self.targets.len());
        let asked = rng.below(self.asked.len());
        // Drawn for the search route only, so that the other routes' sequence is the same.
        let search = match route {
            Route::Search => rng.below(self.targets[target].searches.len()),
            _ => 0,
        };
        let drawn = Drawn {
            target: target as u32,
            asked: asked as u32,
            search: search as u32,
        };
        let sent = self.sent(route, drawn);
        let request = match sent.body {
            Some(body) => http
                .post(sent.url.clone())
                .header(CONTENT_TYPE, JSON)
                .body(body.clone()),
            None => http.get(sent.url.clone()),
        };
        let request = match sent.keyed {
            true => request.header(AUTHORIZATION, self.auth.clone()),
            false => request,
        };
        (request, drawn)
    }

    /// The request `drawn` of `route`, as a person would retype it: the method and path, and
    /// the body of a POST.
    pub fn describe(&self, route: Route, drawn: Drawn) -> String {
        let sent = self.sent(route, drawn);
        match sent.body {
            Some(body) => format!("POST {} {}", sent.url.path(), String::from_utf8_lossy(body)),
            None => format!("GET {}", sent.url.path()),
        }
    }

    /// What the request `drawn` of `route` sends: the one table of the routes' requests,
    /// which [`request`](Self::request) sends and [`describe`](Self::describe) names.
    fn sent(&self, route: Route, drawn: Drawn) -> Sent<'_> {
        let t = &self.targets[drawn.target as usize];
        let asked = &self.asked[drawn.asked as usize];
        let post = |url, body| Sent {
            url,
            body: Some(body),
            keyed: true,
        };
        let get = |url| Sent {
            url,
            body: None,
            keyed: true,
        };
        match route {
            Route::Traverse => post(&self.traverse_url, &t.traverse),
            Route::Search => post(&self.search_url, &t.searches[drawn.search as usize]),
            Route::Entity => get(&t.entity_url),
            Route::Documents => post(&self.documents_url, &t.documents),
            Route::Rag => post(&self.rag_url, &asked.rag),
            Route::Chat => post(&self.chat_url, &asked.chat),
            Route::Health => get(&self.health_url),
            // The probe as an orchestrator sends it: no key.
            Route::Livez => Sent {
                url: &self.livez_url,
                body: None,
                keyed: false,
            },
        }
    }
}

/// What one request sends: a GET, or a POST of `body` (JSON); with the run's key or without.
struct Sent<'a> {
    url: &'a Url,
    body: Option<&'a Bytes>,
    keyed: bool,
}

/// The search queries a name gives: its first four characters (`len` `None`), or every run of
/// `len` characters in it (the whole name if it is shorter) except those of only whitespace,
/// which the server refuses as empty.
fn search_queries(name: &str, len: Option<usize>) -> Vec<String> {
    let Some(len) = len else {
        return vec![name.chars().take(4).collect()];
    };
    let chars: Vec<char> = name.chars().collect();
    let queries: Vec<String> = chars
        .windows(len.min(chars.len()).max(1))
        .map(|w| w.iter().collect::<String>())
        .filter(|q| !q.trim().is_empty())
        .collect();
    if queries.is_empty() {
        vec![name.to_string()]
    } else {
        queries
    }
}

#[cfg(test)]
mod tests {
    use super::search_queries;

    #[test]
    fn search_queries_are_the_first_four_characters_by_default() {
        assert_eq!(search_queries("Entity 000042", None), ["Enti"]);
        assert_eq!(search_queries("Ab", None), ["Ab"]);
        assert_eq!(search_queries("Ünïcødé", None), ["Ünïc"]);
    }

    #[test]
    fn search_queries_of_a_length_are_every_run_of_it_but_blank_ones() {
        assert_eq!(search_queries("Ab c", Some(1)), ["A", "b", "c"]);
        assert_eq!(search_queries("Ab c", Some(2)), ["Ab", "b ", " c"]);
        assert_eq!(search_queries("Ünï", Some(2)), ["Ün", "nï"]);
        assert_eq!(search_queries("Ab", Some(3)), ["Ab"]);
        assert_eq!(search_queries("Entity 000042", Some(3)).len(), 11);
    }
}
