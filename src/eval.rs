//! `kbq eval`: retrieval quality over a file of labelled queries (docs/eval.md). Each query
//! runs through semantic, keyword and hybrid search as `POST /v1/rag/...` would run it, and
//! each method gets recall at 1, 5 and 10, the mean reciprocal rank and nDCG at 10, with the
//! time each query took (first-time cost: every query is asked once per method; the entity
//! automaton hybrid search uses is built before the first).

use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kbq_store::{Document, DocumentFilter, KnowledgeBase};
use kbq_tools::EntityExtractor;
use kbq_tools::rag::{self, FusionWeights, Method, RagQuery};
use serde::{Deserialize, Serialize};

/// Results asked of each method: the metrics look no further than 10.
pub const DEPTH: usize = 10;

/// One line of the queries file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Labelled {
    /// A name for the query in the report (its line number when absent).
    #[serde(default)]
    pub id: Option<String>,
    pub query: String,
    /// The relevant documents: each a document's `id` (with or without `document:`), its
    /// `source_id` or its `entity_name`.
    pub relevant: Vec<String>,
}

/// Reads the queries file: one JSON object per line, blank lines skipped. The first bad line
/// stops it, named by its number.
pub fn read_queries(input: impl BufRead) -> Result<Vec<Labelled>, String> {
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| format!("line {n}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let mut q: Labelled = serde_json::from_str(&line).map_err(|e| format!("line {n}: {e}"))?;
        if q.query.trim().is_empty() {
            return Err(format!("line {n}: `query` is empty"));
        }
        q.relevant.retain(|r| !r.trim().is_empty());
        if q.relevant.is_empty() {
            return Err(format!("line {n}: `relevant` names no document"));
        }
        q.id.get_or_insert_with(|| format!("line {n}"));
        out.push(q);
    }
    if out.is_empty() {
        return Err("the file holds no query".into());
    }
    Ok(out)
}

/// Which of `relevant` the document answers to, if any: its id, its source id or its entity.
fn label_of(doc: &Document, relevant: &[String]) -> Option<usize> {
    let bare = doc.id.strip_prefix("document:").unwrap_or(&doc.id);
    relevant.iter().position(|r| {
        r == &doc.id
            || r == bare
            || r == &doc.source_id
            || doc.entity_name.as_deref() == Some(r.as_str())
    })
}

/// One query's scores. A label counts once, at the first result that answers to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Scores {
    pub recall_1: f64,
    pub recall_5: f64,
    pub recall_10: f64,
    pub reciprocal_rank: f64,
    pub ndcg_10: f64,
}

/// Scores a ranked list: `labels[i]` is the label the result at rank i + 1 answers to.
pub fn score(labels: &[Option<usize>], relevant: usize) -> Scores {
    let mut found = vec![false; relevant];
    let (mut dcg, mut first, mut hits) = (0.0, None, 0);
    // recall_at[k]: the labels found in the first k results.
    let mut recall_at = [0usize; DEPTH + 1];
    for i in 0..DEPTH {
        if let Some(Some(l)) = labels.get(i).copied()
            && !found[l]
        {
            found[l] = true;
            hits += 1;
            first.get_or_insert(i + 1);
            dcg += 1.0 / ((i + 2) as f64).log2();
        }
        recall_at[i + 1] = hits;
    }
    let ideal: f64 = (0..relevant.min(DEPTH))
        .map(|i| 1.0 / ((i + 2) as f64).log2())
        .sum();
    let recall = |k: usize| recall_at[k] as f64 / relevant as f64;
    Scores {
        recall_1: recall(1),
        recall_5: recall(5),
        recall_10: recall(10),
        reciprocal_rank: first.map_or(0.0, |r| 1.0 / r as f64),
        ndcg_10: if ideal > 0.0 { dcg / ideal } else { 0.0 },
    }
}

/// One method's report.
#[derive(Debug, Clone, Serialize)]
pub struct MethodReport {
    pub method: Method,
    pub queries: usize,
    pub recall_1: f64,
    pub recall_5: f64,
    pub recall_10: f64,
    pub mrr: f64,
    pub ndcg_10: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The slowest query's id.
    pub slowest: String,
    /// Queries whose relevant documents none of the 10 results answered to.
    pub missed: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub queries: usize,
    pub documents: u64,
    pub embedder: String,
    pub graph_depth: u32,
    /// Hybrid search's fusion weights (`[rag]`).
    pub weights: FusionWeights,
    pub methods: Vec<MethodReport>,
}

impl Report {
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} queries over {} documents, embedder {}, hybrid graph_depth {} and weights semantic {}, keyword {}, graph {}\n\n",
            self.queries,
            self.documents,
            self.embedder,
            self.graph_depth,
            self.weights.semantic,
            self.weights.keyword,
            self.weights.graph
        );
        out.push_str(
            "method    recall@1  recall@5  recall@10  MRR    nDCG@10  missed  p50 ms  p99 ms  max ms  slowest\n",
        );
        for m in &self.methods {
            let name = serde_json::to_value(m.method).expect("a method serializes");
            out.push_str(&format!(
                "{:<9} {:<9.3} {:<9.3} {:<10.3} {:<6.3} {:<8.3} {:<7} {:<7.2} {:<7.2} {:<7.1} {}\n",
                name.as_str().unwrap_or_default(),
                m.recall_1,
                m.recall_5,
                m.recall_10,
                m.mrr,
                m.ndcg_10,
                m.missed,
                m.p50_ms,
                m.p99_ms,
                m.max_ms,
                m.slowest
            ));
        }
        out
    }
}

/// The value at quantile `q` (0 to 1) of sorted `values`.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Runs every query through `methods` against `kb`; `tick` is called after each search.
pub async fn run(
    kb: Arc<KnowledgeBase>,
    queries: &[Labelled],
    methods: &[Method],
    graph_depth: u32,
    weights: FusionWeights,
    tick: impl Fn(),
) -> Result<Report, String> {
    let extractor = EntityExtractor::new(kb.clone());
    // Built before the clock starts, as a server builds it once ready: the entity automaton
    // is the knowledge base's cost, not the first hybrid query's.
    extractor.extract("").await.map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    for &method in methods {
        let mut sums = Scores::default();
        let mut times = Vec::with_capacity(queries.len());
        let (mut slowest, mut slowest_time, mut missed) = (String::new(), Duration::ZERO, 0);
        for q in queries {
            let ask = RagQuery {
                query: q.query.clone(),
                limit: DEPTH,
                filter: DocumentFilter::default(),
                graph_depth: if method == Method::Hybrid {
                    graph_depth
                } else {
                    0
                },
                weights,
            };
            let started = Instant::now();
            let answer = rag::search(&kb, &extractor, method, &ask)
                .await
                .map_err(|e| format!("{}: {e}", q.id.as_deref().unwrap_or_default()))?;
            let took = started.elapsed();
            tick();
            if took > slowest_time {
                (slowest_time, slowest) = (took, q.id.clone().unwrap_or_default());
            }
            times.push(took);
            let labels: Vec<Option<usize>> = (answer.results.iter())
                .map(|r| label_of(&r.document, &q.relevant))
                .collect();
            let s = score(&labels, q.relevant.len());
            missed += usize::from(s.recall_10 == 0.0);
            sums.recall_1 += s.recall_1;
            sums.recall_5 += s.recall_5;
            sums.recall_10 += s.recall_10;
            sums.reciprocal_rank += s.reciprocal_rank;
            sums.ndcg_10 += s.ndcg_10;
        }
        times.sort_unstable();
        let n = queries.len() as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        reports.push(MethodReport {
            method,
            queries: queries.len(),
            recall_1: sums.recall_1 / n,
            recall_5: sums.recall_5 / n,
            recall_10: sums.recall_10 / n,
            mrr: sums.reciprocal_rank / n,
            ndcg_10: sums.ndcg_10 / n,
            p50_ms: ms(quantile(&times, 0.5)),
            p99_ms: ms(quantile(&times, 0.99)),
            max_ms: ms(slowest_time),
            slowest,
            missed,
        });
    }
    let documents = kb.counts().await.map_err(|e| e.to_string())?.documents;
    Ok(Report {
        queries: queries.len(),
        documents,
        embedder: kb.embedder().name().to_string(),
        graph_depth,
        weights,
        methods: reports,
    })
}

/// Every `len / n`-th query, so that a sample spreads over the whole file (all when `n` is 0
/// or at least their number).
pub fn spread(queries: Vec<Labelled>, n: usize) -> Vec<Labelled> {
    if n == 0 || n >= queries.len() {
        return queries;
    }
    let len = queries.len();
    (queries.into_iter().enumerate())
        .filter(|(i, _)| (i * n) / len != ((i + 1) * n) / len)
        .map(|(_, q)| q)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_first_hit_scores_one_everywhere() {
        let s = score(&[Some(0), None, None], 1);
        assert_eq!(
            s,
            Scores {
                recall_1: 1.0,
                recall_5: 1.0,
                recall_10: 1.0,
                reciprocal_rank: 1.0,
                ndcg_10: 1.0
            }
        );
    }

    #[test]
    fn a_third_place_hit_counts_from_five_on() {
        let s = score(&[None, None, Some(0)], 1);
        assert_eq!((s.recall_1, s.recall_5, s.recall_10), (0.0, 1.0, 1.0));
        assert!(close(s.reciprocal_rank, 1.0 / 3.0));
        assert!(close(s.ndcg_10, 1.0 / 4f64.log2()), "{}", s.ndcg_10);
    }

    #[test]
    fn a_label_counts_once_and_two_labels_share_the_ideal() {
        // Label 0 twice (the second adds nothing), label 1 at rank 4, of 2 relevant.
        let s = score(&[Some(0), Some(0), None, Some(1)], 2);
        assert_eq!((s.recall_1, s.recall_5), (0.5, 1.0));
        let ideal = 1.0 + 1.0 / 3f64.log2();
        assert!(close(s.ndcg_10, (1.0 + 1.0 / 5f64.log2()) / ideal));
        assert_eq!(s.reciprocal_rank, 1.0);
    }

    #[test]
    fn no_hit_scores_zero_and_results_past_ten_do_not_count() {
        let mut labels = vec![None; 10];
        labels.push(Some(0));
        assert_eq!(score(&labels, 1), Scores::default());
        assert_eq!(score(&[], 1), Scores::default());
    }

    #[test]
    fn labels_answer_to_ids_source_ids_and_entities() {
        let doc = Document {
            id: "document:abc".into(),
            title: "t".into(),
            content: "c".into(),
            source: "s".into(),
            source_id: "pkg/one".into(),
            content_type: "text/plain".into(),
            url: None,
            entity_name: Some("One".into()),
            mentions: Vec::new(),
        };
        for label in ["document:abc", "abc", "pkg/one", "One"] {
            assert_eq!(
                label_of(&doc, &["x".into(), label.into()]),
                Some(1),
                "{label}"
            );
        }
        assert_eq!(label_of(&doc, &["one".into(), "document:ab".into()]), None);
    }

    #[test]
    fn the_file_is_read_strictly_with_line_numbers() {
        let ok = read_queries(
            "{\"query\": \"q\", \"relevant\": [\"a\"]}\n\n{\"id\": \"b\", \"query\": \"r\", \"relevant\": [\"b\", \"\"]}\n"
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(ok[0].id.as_deref(), Some("line 1"));
        assert_eq!(ok[1].relevant, ["b"]);
        for (text, error) in [
            ("{\"query\": \"q\"}", "line 1: missing field `relevant`"),
            (
                "\n{\"query\": \" \", \"relevant\": [\"a\"]}",
                "line 2: `query` is empty",
            ),
            (
                "{\"query\": \"q\", \"relevant\": []}",
                "line 1: `relevant` names no document",
            ),
            (
                "{\"query\": \"q\", \"relevant\": [\"a\"], \"k\": 1}",
                "line 1: unknown field `k`",
            ),
            ("", "the file holds no query"),
        ] {
            let e = read_queries(text.as_bytes()).unwrap_err();
            assert!(e.starts_with(error), "{e}");
        }
    }

    #[test]
    fn a_spread_sample_takes_n_across_the_file() {
        let qs: Vec<Labelled> = (0..10)
            .map(|i| Labelled {
                id: Some(i.to_string()),
                query: "q".into(),
                relevant: vec!["a".into()],
            })
            .collect();
        let ids = |v: Vec<Labelled>| v.into_iter().map(|q| q.id.unwrap()).collect::<Vec<_>>();
        assert_eq!(ids(spread(qs.clone(), 3)), ["3", "6", "9"]);
        assert_eq!(spread(qs.clone(), 0).len(), 10);
        assert_eq!(spread(qs, 20).len(), 10);
    }
}
