//! A parsed document cut into chunks the size a model reads at once.
//!
//! Chunks follow the document's structure: none crosses a section boundary, and within a
//! section `text-splitter` cuts at the largest unit that fits (paragraph breaks, then line
//! breaks, then sentences, then words, then characters as a last resort), counting size in
//! characters. Neighbouring chunks of a section may share up to `overlap_chars` characters,
//! so that a fact stated across a cut is still read whole once.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use text_splitter::TextSplitter;

use crate::parse::Parsed;

/// How large chunks are. Build it with [`ChunkConfig::new`] (or deserialize it), which
/// checks the rules; the fields are private so that a config in hand is a valid one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawChunkConfig")]
pub struct ChunkConfig {
    max_chars: usize,
    overlap_chars: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChunkConfig {
    #[serde(default = "default_max_chars")]
    max_chars: usize,
    #[serde(default = "default_overlap_chars")]
    overlap_chars: usize,
}

impl TryFrom<RawChunkConfig> for ChunkConfig {
    type Error = ChunkConfigError;

    fn try_from(raw: RawChunkConfig) -> Result<Self, Self::Error> {
        ChunkConfig::new(raw.max_chars, raw.overlap_chars)
    }
}

impl ChunkConfig {
    /// The default largest chunk: about 300 tokens of English, small enough that a model
    /// extracting from it misses little, large enough to hold a paragraph with its context.
    pub const DEFAULT_MAX_CHARS: usize = 1200;
    /// The default overlap: about two sentences.
    pub const DEFAULT_OVERLAP_CHARS: usize = 150;
    /// The smallest `max_chars` allowed: below it a chunk is a sentence fragment, with too
    /// little context to extract anything from.
    pub const MIN_MAX_CHARS: usize = 100;
    /// The largest `max_chars` allowed, to keep one chunk well inside any model's context.
    pub const MAX_MAX_CHARS: usize = 100_000;

    /// A config, if `overlap_chars < max_chars` and `max_chars` is within
    /// [`MIN_MAX_CHARS`](Self::MIN_MAX_CHARS)..=[`MAX_MAX_CHARS`](Self::MAX_MAX_CHARS).
    pub fn new(max_chars: usize, overlap_chars: usize) -> Result<Self, ChunkConfigError> {
        if !(Self::MIN_MAX_CHARS..=Self::MAX_MAX_CHARS).contains(&max_chars) {
            return Err(ChunkConfigError::MaxChars { max_chars });
        }
        if overlap_chars >= max_chars {
            return Err(ChunkConfigError::Overlap {
                max_chars,
                overlap_chars,
            });
        }
        Ok(ChunkConfig {
            max_chars,
            overlap_chars,
        })
    }

    /// The most characters a chunk holds.
    pub fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// The most characters two neighbouring chunks of a section share.
    pub fn overlap_chars(&self) -> usize {
        self.overlap_chars
    }
}

fn default_max_chars() -> usize {
    ChunkConfig::DEFAULT_MAX_CHARS
}

fn default_overlap_chars() -> usize {
    ChunkConfig::DEFAULT_OVERLAP_CHARS
}

impl Default for ChunkConfig {
    /// 1200 characters with 150 of overlap.
    fn default() -> Self {
        ChunkConfig {
            max_chars: Self::DEFAULT_MAX_CHARS,
            overlap_chars: Self::DEFAULT_OVERLAP_CHARS,
        }
    }
}

/// A chunk config that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkConfigError {
    /// `max_chars` is out of range.
    #[error(
        "max_chars must be between {} and {}, not {max_chars}",
        ChunkConfig::MIN_MAX_CHARS,
        ChunkConfig::MAX_MAX_CHARS
    )]
    MaxChars {
        /// The value given.
        max_chars: usize,
    },
    /// The overlap is not smaller than the chunk.
    #[error("overlap_chars ({overlap_chars}) must be smaller than max_chars ({max_chars})")]
    Overlap {
        /// The value given for `max_chars`.
        max_chars: usize,
        /// The value given for `overlap_chars`.
        overlap_chars: usize,
    },
}

/// A piece of a document, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// The chunk's place in the document, from 0.
    pub index: u32,
    /// The chunk's text: `&parsed.text[start..end]`, neither starting nor ending with
    /// whitespace.
    pub text: String,
    /// The first byte of the chunk in [`Parsed::text`].
    pub start: usize,
    /// One past the last byte of the chunk in [`Parsed::text`].
    pub end: usize,
    /// The headings of the section the chunk is in.
    pub heading_path: Vec<String>,
    /// [`hash`] of `text`.
    pub hash: String,
}

/// The SHA-256 of a chunk's text, in lowercase hex: the key, with the model and
/// [`PROMPT_VERSION`](crate::extraction::PROMPT_VERSION), under which its extraction is
/// cached. Only the text is hashed: the same paragraph under another heading or in another
/// document reuses its extraction, though the heading path and title were in its prompt —
/// they are context that rarely changes what a paragraph says.
pub fn hash(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// Cuts a parsed document into chunks, section by section, in document order.
pub fn chunk(parsed: &Parsed, config: &ChunkConfig) -> Vec<Chunk> {
    let splitter = TextSplitter::new(
        text_splitter::ChunkConfig::new(config.max_chars)
            .with_overlap(config.overlap_chars)
            .expect("ChunkConfig::new keeps the overlap below the maximum"),
    );
    let mut chunks = Vec::new();
    for section in &parsed.sections {
        let body = &parsed.text[section.start..section.end];
        for (offset, text) in splitter.chunk_indices(body) {
            let start = section.start + offset;
            chunks.push(Chunk {
                // Four billion chunks would be terabytes of text, far past any upload limit.
                index: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
                text: text.to_owned(),
                start,
                end: start + text.len(),
                heading_path: section.heading_path.clone(),
                hash: hash(text),
            });
        }
    }
    chunks
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::format::Format;
    use crate::parse::{Section, parse};

    fn chars(s: &str) -> usize {
        s.chars().count()
    }

    /// Every property a chunking must have, whatever the document.
    fn check(parsed: &Parsed, config: &ChunkConfig, chunks: &[Chunk]) {
        let text = &parsed.text;
        let mut covered = vec![false; text.len()];
        for (i, chunk) in chunks.iter().enumerate() {
            assert_eq!(chunk.index as usize, i);
            assert_eq!(
                chunk.text,
                text[chunk.start..chunk.end],
                "offsets are exact"
            );
            assert!(!chunk.text.is_empty());
            assert_eq!(chunk.text.trim(), chunk.text);
            assert!(
                chars(&chunk.text) <= config.max_chars(),
                "{} chars",
                chars(&chunk.text)
            );
            assert_eq!(chunk.hash, hash(&chunk.text));
            let section = parsed
                .sections
                .iter()
                .find(|s| s.start <= chunk.start && chunk.end <= s.end)
                .expect("a chunk lies within one section");
            assert_eq!(chunk.heading_path, section.heading_path);
            covered[chunk.start..chunk.end]
                .iter_mut()
                .for_each(|c| *c = true);
        }
        for (i, c) in text.char_indices() {
            if !c.is_whitespace() {
                assert!(covered[i], "byte {i} ({c:?}) is in no chunk");
            }
        }
        for pair in chunks.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(a.start < b.start && a.end < b.end, "chunks move forward");
            if b.start < a.end {
                let shared = chars(&text[b.start..a.end]);
                assert!(shared <= config.overlap_chars(), "{shared} chars shared");
                assert_eq!(a.heading_path, b.heading_path, "no overlap across sections");
            }
        }
    }

    fn paragraph(n: usize) -> String {
        (0..n)
            .map(|i| format!("Sentence {i} says something about the engine."))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn config_rules_and_defaults() {
        let config = ChunkConfig::default();
        assert_eq!((config.max_chars(), config.overlap_chars()), (1200, 150));
        assert_eq!(ChunkConfig::new(1200, 150), Ok(config));
        assert!(ChunkConfig::new(100, 0).is_ok());
        assert_eq!(
            ChunkConfig::new(99, 0),
            Err(ChunkConfigError::MaxChars { max_chars: 99 })
        );
        assert!(ChunkConfig::new(100_001, 0).is_err());
        let err = ChunkConfig::new(500, 500).unwrap_err();
        assert_eq!(
            err.to_string(),
            "overlap_chars (500) must be smaller than max_chars (500)"
        );

        let config: ChunkConfig = serde_json::from_str(r#"{"max_chars": 800}"#).unwrap();
        assert_eq!((config.max_chars(), config.overlap_chars()), (800, 150));
        let err = serde_json::from_str::<ChunkConfig>(r#"{"max_chars": 120}"#).unwrap_err();
        assert!(err.to_string().contains("must be smaller"), "{err}");
        assert!(serde_json::from_str::<ChunkConfig>(r#"{"max": 800}"#).is_err());
    }

    #[test]
    fn a_short_section_is_one_chunk() {
        let parsed = parse(b"# Title\n\nShort body.", Format::Markdown).unwrap();
        let chunks = chunk(&parsed, &ChunkConfig::default());
        check(&parsed, &ChunkConfig::default(), &chunks);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, "Title\n\nShort body.");
        assert_eq!(chunks[0].heading_path, ["Title"]);
        assert_eq!(chunks[0].hash, hash("Title\n\nShort body."));
    }

    #[test]
    fn chunks_never_cross_sections_and_carry_their_heading_path() {
        let source = format!(
            "# Engine\n\n{}\n\n## Design\n\n{}\n\n{}\n\n## Legacy\n\nShort.",
            paragraph(3),
            paragraph(12),
            paragraph(12)
        );
        let parsed = parse(source.as_bytes(), Format::Markdown).unwrap();
        let config = ChunkConfig::new(300, 60).unwrap();
        let chunks = chunk(&parsed, &config);
        check(&parsed, &config, &chunks);
        let paths: Vec<Vec<String>> = chunks.iter().map(|c| c.heading_path.clone()).collect();
        assert_eq!(paths.first().unwrap(), &["Engine"]);
        assert_eq!(paths.last().unwrap(), &["Engine", "Legacy"]);
        assert_eq!(chunks.last().unwrap().text, "Legacy\n\nShort.");
        assert!(
            paths
                .iter()
                .filter(|p| p.len() == 2 && p[1] == "Design")
                .count()
                > 2
        );
    }

    #[test]
    fn cuts_prefer_paragraphs_then_sentences() {
        let first = paragraph(4);
        let second = paragraph(4);
        let text = format!("{first}\n\n{second}");
        let parsed = parse(text.as_bytes(), Format::Text).unwrap();
        let config = ChunkConfig::new(chars(&first) + 10, 0).unwrap();
        let chunks = chunk(&parsed, &config);
        check(&parsed, &config, &chunks);
        assert_eq!(
            chunks.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(),
            [first.as_str(), second.as_str()]
        );

        let config = ChunkConfig::new(100, 0).unwrap();
        let chunks = chunk(&parsed, &config);
        check(&parsed, &config, &chunks);
        for c in &chunks {
            assert!(c.text.ends_with('.'), "cut at a sentence end: {:?}", c.text);
        }
    }

    #[test]
    fn overlap_repeats_the_end_of_the_previous_chunk() {
        let parsed = parse(paragraph(30).as_bytes(), Format::Text).unwrap();
        let config = ChunkConfig::new(200, 80).unwrap();
        let chunks = chunk(&parsed, &config);
        check(&parsed, &config, &chunks);
        assert!(chunks.len() > 5);
        assert!(
            chunks.windows(2).all(|w| w[1].start < w[0].end),
            "neighbours overlap"
        );

        let config = ChunkConfig::new(200, 0).unwrap();
        let chunks = chunk(&parsed, &config);
        check(&parsed, &config, &chunks);
        assert!(
            chunks.windows(2).all(|w| w[1].start >= w[0].end),
            "no overlap asked"
        );
    }

    #[test]
    fn long_words_and_scripts_without_spaces_are_cut_within_max() {
        let text = format!("{} {}", "x".repeat(450), "漢字かな交じり文。".repeat(40));
        let parsed = parse(text.as_bytes(), Format::Text).unwrap();
        let config = ChunkConfig::new(100, 10).unwrap();
        let chunks = chunk(&parsed, &config);
        check(&parsed, &config, &chunks);
    }

    #[test]
    fn output_is_deterministic_and_hashes_identify_text() {
        let source = format!("# A\n\n{}\n\n# B\n\n{}", paragraph(10), paragraph(10));
        let parsed = parse(source.as_bytes(), Format::Markdown).unwrap();
        let config = ChunkConfig::new(250, 50).unwrap();
        let first = chunk(&parsed, &config);
        assert_eq!(first, chunk(&parsed, &config));
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn an_empty_document_has_no_chunks() {
        let parsed = Parsed {
            title: None,
            text: String::new(),
            sections: Vec::new(),
        };
        assert!(chunk(&parsed, &ChunkConfig::default()).is_empty());
    }

    /// A document as the builder writes it: sections of paragraphs of lines of words.
    fn document() -> impl Strategy<Value = Parsed> {
        let word = prop_oneof![
            "[a-z]{1,12}",
            "[A-Z][a-z]{0,8}[.,;]?",
            "[0-9]{1,4}",
            "[а-яé漢字ü]{1,6}",
            Just("x".repeat(130)),
        ];
        let line = prop::collection::vec(word, 1..25).prop_map(|w| w.join(" "));
        let paragraph = prop::collection::vec(line, 1..4).prop_map(|l| l.join("\n"));
        let section = (
            prop::collection::vec("[A-Z][a-z]{2,8}", 0..3),
            prop::collection::vec(paragraph, 1..5),
        );
        prop::collection::vec(section, 1..5).prop_map(|sections| {
            let mut text = String::new();
            let mut out = Vec::new();
            for (heading_path, paragraphs) in sections {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                let start = text.len();
                text.push_str(&paragraphs.join("\n\n"));
                out.push(Section {
                    heading_path,
                    start,
                    end: text.len(),
                });
            }
            Parsed {
                title: None,
                text,
                sections: out,
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_document_chunks_exactly(
            parsed in document(),
            max in 100usize..400,
            overlap_percent in 0usize..60,
        ) {
            let config = ChunkConfig::new(max, max * overlap_percent / 100).unwrap();
            let chunks = chunk(&parsed, &config);
            check(&parsed, &config, &chunks);
            prop_assert_eq!(chunks, chunk(&parsed, &config));
        }
    }
}
