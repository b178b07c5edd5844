//! The NDJSON import format: parsing with line-numbered failures, and an idempotent batch
//! import that writes every valid record even when others fail. A file an export wrote
//! holds records of its own too ([`Kept`]), restored after the graph and documents.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use crate::error::Result;
use crate::export::{ExportCounts, KEPT_KINDS, Kept};
use crate::kb::{KnowledgeBase, WRITE_BATCH};
use crate::model::{NewDocument, NewEntity, NewRelationship, Record, check_name};
// Where callers have always found them: `kbq_store::import::{Phase, Progress, Silent}`.
pub use crate::progress::{Phase, Progress, Silent};

/// A record that was not written, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LineError {
    pub line: usize,
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImportReport {
    /// Non-blank lines read.
    pub records: usize,
    pub entities: usize,
    pub relationships: usize,
    pub documents: usize,
    /// What it restored of an export's own records (all zero for a file no export wrote).
    pub restored: ExportCounts,
    pub failures: Vec<LineError>,
}

/// One line of an import file.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// An entity, relationship or document.
    Record(Record),
    /// A record only an export writes.
    Kept(Kept),
}

/// A file's lines, parsed.
#[derive(Debug, Default)]
pub struct Parsed {
    pub records: Vec<(usize, Record)>,
    pub kept: Vec<(usize, Kept)>,
    pub failures: Vec<LineError>,
}

/// Parses NDJSON. Blank lines are skipped; each bad line becomes a [`LineError`].
pub fn parse(reader: impl BufRead) -> Parsed {
    let mut parsed = Parsed::default();
    let mut reader = reader;
    let mut buf = Vec::new();
    let mut line = 0;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                parsed.failures.push(LineError {
                    line: line + 1,
                    reason: format!("read error: {e}"),
                });
                break;
            }
        }
        line += 1;
        let Ok(text) = std::str::from_utf8(&buf) else {
            parsed.failures.push(LineError {
                line,
                reason: "not valid UTF-8".into(),
            });
            continue;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match parse_line(text) {
            Ok(Line::Record(r)) => parsed.records.push((line, r)),
            Ok(Line::Kept(k)) => parsed.kept.push((line, k)),
            Err(reason) => parsed.failures.push(LineError { line, reason }),
        }
    }
    parsed
}

/// Parses and validates one entity, relationship or document.
pub fn parse_record(text: &str) -> std::result::Result<Record, String> {
    match parse_line(text)? {
        Line::Record(r) => Ok(r),
        Line::Kept(_) => Err("expected an entity, relationship or document".into()),
    }
}

/// Parses and validates one line of any kind.
pub fn parse_line(text: &str) -> std::result::Result<Line, String> {
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .map(str::to_owned);
    if let Some(k) = kind.as_deref()
        && KEPT_KINDS.contains(&k)
    {
        let kept: Kept = serde_json::from_value(value).map_err(|e| format!("invalid {k}: {e}"))?;
        kept.validate().map_err(|e| e.to_string())?;
        return Ok(Line::Kept(kept));
    }
    // A document's `mentions` (the entities an ingested chunk is linked to) are written by
    // an export only: a client's document has none.
    let mentions = match (kind.as_deref(), value.as_object_mut()) {
        (Some("document"), Some(o)) => match o.remove("mentions") {
            None => Vec::new(),
            Some(m) => serde_json::from_value::<Vec<String>>(m)
                .map_err(|e| format!("invalid document: mentions: {e}"))?,
        },
        _ => Vec::new(),
    };
    let mut record: Record = serde_json::from_value(value).map_err(|e| match &kind {
        None => "missing field `kind` (one of entity, relationship, document)".to_string(),
        Some(k) if !matches!(k.as_str(), "entity" | "relationship" | "document") => {
            format!(
                "unknown kind `{k}` (expected entity, relationship or document, or an export's {})",
                KEPT_KINDS.join(", ")
            )
        }
        Some(k) => format!("invalid {k}: {e}"),
    })?;
    record.validate().map_err(|e| e.to_string())?;
    if let Record::Document(d) = &mut record {
        for m in &mentions {
            check_name("mentions", m).map_err(|e| e.to_string())?;
        }
        d.mentions = mentions;
    }
    Ok(Line::Record(record))
}

/// Writes records: entities first, then relationships whose ends exist in the records or the
/// store, then documents whose entity exists. A later record with the same identity replaces
/// an earlier one, so importing the same records twice changes nothing.
pub async fn import_records(
    kb: &KnowledgeBase,
    records: Vec<(usize, Record)>,
    progress: &dyn Progress,
) -> Result<ImportReport> {
    let mut report = ImportReport {
        records: records.len(),
        ..Default::default()
    };
    let mut entities: Vec<(usize, NewEntity)> = Vec::new();
    let mut rels: Vec<(usize, NewRelationship)> = Vec::new();
    let mut docs: Vec<(usize, NewDocument)> = Vec::new();
    for (line, r) in records {
        match r {
            Record::Entity(e) => entities.push((line, e)),
            Record::Relationship(r) => rels.push((line, r)),
            Record::Document(d) => docs.push((line, d)),
        }
    }
    let entities = last_wins(entities, |e| e.name.clone());
    let rels = last_wins(rels, |r| {
        (
            r.source_name.clone(),
            r.target_name.clone(),
            r.relationship_type.clone(),
        )
    });
    let docs = last_wins(docs, |d| (d.source.clone(), d.source_id.clone()));

    progress.start(Phase::Entities, entities.len() as u64);
    for chunk in entities.chunks(WRITE_BATCH) {
        let batch: Vec<NewEntity> = chunk.iter().map(|(_, e)| e.clone()).collect();
        kb.upsert_entities(&batch).await?;
        report.entities += batch.len();
        progress.advance(batch.len() as u64);
    }
    let in_file: HashSet<&str> = entities.iter().map(|(_, e)| e.name.as_str()).collect();

    // Ends that are neither in this file nor already stored.
    let mut wanted: Vec<String> = rels
        .iter()
        .flat_map(|(_, r)| [r.source_name.as_str(), r.target_name.as_str()])
        .chain(docs.iter().filter_map(|(_, d)| d.entity_name.as_deref()))
        .filter(|n| !in_file.contains(n))
        .map(str::to_owned)
        .collect();
    wanted.sort();
    wanted.dedup();
    let missing: HashSet<String> = kb.missing_entities(&wanted).await?.into_iter().collect();

    let mut good_rels = Vec::with_capacity(rels.len());
    for (line, r) in rels {
        if let Some(end) = [&r.source_name, &r.target_name]
            .into_iter()
            .find(|n| missing.contains(*n))
        {
            report.failures.push(LineError {
                line,
                reason: format!(
                    "relationship end `{end}` is not an entity in the file or the store"
                ),
            });
        } else {
            good_rels.push(r);
        }
    }
    progress.start(Phase::Relationships, good_rels.len() as u64);
    for chunk in good_rels.chunks(WRITE_BATCH) {
        kb.upsert_relationships(chunk).await?;
        report.relationships += chunk.len();
        progress.advance(chunk.len() as u64);
    }

    let mut good_docs = Vec::with_capacity(docs.len());
    for (line, d) in docs {
        match &d.entity_name {
            Some(n) if missing.contains(n) => report.failures.push(LineError {
                line,
                reason: format!("entity_name `{n}` is not an entity in the file or the store"),
            }),
            _ => good_docs.push(d),
        }
    }
    progress.start(Phase::Documents, good_docs.len() as u64);
    for chunk in good_docs.chunks(WRITE_BATCH / 4) {
        kb.upsert_documents(chunk).await?;
        report.documents += chunk.len();
        progress.advance(chunk.len() as u64);
    }
    report.failures.sort_by_key(|f| f.line);
    Ok(report)
}

/// Parses NDJSON and imports it: the graph and documents, then what an export kept beside
/// them. Parse failures and write failures are reported together.
pub async fn import(
    kb: &KnowledgeBase,
    reader: impl BufRead,
    progress: &dyn Progress,
) -> Result<ImportReport> {
    let Parsed {
        records,
        kept,
        failures,
    } = parse(reader);
    let parsed = records.len() + kept.len() + failures.len();
    let mut report = import_records(kb, records, progress).await?;
    if !kept.is_empty() {
        progress.start(Phase::Kept, kept.len() as u64);
        let n = kept.len() as u64;
        report.restored = kb
            .restore(kept.into_iter().map(|(_, k)| k).collect())
            .await?;
        progress.advance(n);
    }
    report.records = parsed;
    report.failures.extend(failures);
    report.failures.sort_by_key(|f| f.line);
    Ok(report)
}

fn last_wins<T, K: std::hash::Hash + Eq>(
    items: Vec<(usize, T)>,
    key: impl Fn(&T) -> K,
) -> Vec<(usize, T)> {
    let mut at: HashMap<K, usize> = HashMap::with_capacity(items.len());
    let mut out: Vec<Option<(usize, T)>> = Vec::with_capacity(items.len());
    for (line, item) in items {
        let k = key(&item);
        if let Some(&i) = at.get(&k) {
            out[i] = None;
        }
        at.insert(k, out.len());
        out.push(Some((line, item)));
    }
    out.into_iter().flatten().collect()
}
