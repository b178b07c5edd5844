//! Embeddings: the `Embedder` trait and the built-in offline embedder.

use async_trait::async_trait;

use crate::error::Result;

/// Turns texts into vectors of a fixed dimension. Vectors are L2-normalised so that the
/// dot product is the cosine similarity.
#[async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// A stable name, stored beside the vectors so that two models' vectors never mix.
    fn name(&self) -> &str;
    fn dimension(&self) -> usize;
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
    /// Queries' vectors. Some models embed a query and the passage it looks for differently
    /// (e5's `query: ` and `passage: `); [`embed`](Self::embed) is for what is stored
    /// (documents, memories), this for what is searched with. By default they are the same.
    async fn embed_queries(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.embed(texts).await
    }
    /// Whether [`embed`](Self::embed) computes its answer in this process without waiting on
    /// anything (no network, no lock held across an await), so that its future is ready at
    /// its first poll. The graph-documents path runs beside the HTTP workers only then
    /// (`KnowledgeBase::answers_documents_in_memory`).
    fn is_local(&self) -> bool {
        false
    }
    /// Whether [`embed_shortened`](Self::embed_shortened) works: models such as OpenAI's
    /// text-embedding-3 can return fewer dimensions on request.
    fn can_shorten(&self) -> bool {
        false
    }
    /// Vectors of `dimensions` components, for the embeddings API only (the store keeps
    /// [`dimension`](Self::dimension)).
    async fn embed_shortened(&self, texts: &[String], dimensions: usize) -> Result<Vec<Vec<f32>>> {
        let _ = (texts, dimensions);
        Err(crate::StoreError::Invalid {
            field: "dimensions".into(),
            reason: format!("{} cannot change its dimension", self.name()),
        })
    }
}

/// A deterministic, offline embedder: signed feature hashing of lower-cased words (weight 1)
/// and of each word's character trigrams (weight 0.5), L2-normalised. It needs no model and
/// gives the same vector for the same text on every machine and in every release, so search
/// works on a fresh machine. It captures shared vocabulary, not meaning.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dimension: usize,
}

impl HashingEmbedder {
    pub const DEFAULT_DIMENSION: usize = 256;

    pub fn new(dimension: usize) -> Self {
        assert!(dimension > 0, "embedding dimension must be positive");
        HashingEmbedder { dimension }
    }

    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dimension];
        let mut add = |feature: &[u8], weight: f32| {
            let h = fnv1a(feature);
            let slot = (h % self.dimension as u64) as usize;
            let sign = if (h >> 63) & 1 == 1 { -1.0 } else { 1.0 };
            v[slot] += sign * weight;
        };
        // One buffer for every word: "^word$", lower-cased, and where each character starts.
        let mut padded = String::new();
        let mut starts: Vec<usize> = Vec::new();
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            padded.clear();
            padded.push('^');
            if word.is_ascii() {
                padded.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
            } else {
                // `str::to_lowercase` knows context (a final sigma), which a character at a
                // time does not.
                padded.push_str(&word.to_lowercase());
            }
            padded.push('$');
            add(&padded.as_bytes()[1..padded.len() - 1], 1.0);
            // Each trigram is three characters: the bytes from one character's start to the
            // fourth's.
            starts.clear();
            starts.extend(padded.char_indices().map(|(i, _)| i));
            starts.push(padded.len());
            for w in starts.windows(4) {
                add(&padded.as_bytes()[w[0]..w[3]], 0.5);
            }
        }
        normalize(&mut v);
        v
    }
}

impl Default for HashingEmbedder {
    fn default() -> Self {
        HashingEmbedder::new(Self::DEFAULT_DIMENSION)
    }
}

#[async_trait]
impl Embedder for HashingEmbedder {
    fn name(&self) -> &str {
        "kbq-hashing-v1"
    }
    fn dimension(&self) -> usize {
        self.dimension
    }
    fn is_local(&self) -> bool {
        true
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// 64-bit FNV-1a: stable across platforms and releases, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine similarity of two vectors (0 when either is zero); any embedder's, normalised or
/// not.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let n = norm(a) * norm(b);
    if n == 0.0 { 0.0 } else { dot / n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_same_vector_and_unit_length() {
        let e = HashingEmbedder::default();
        let a = e.embed_one("Alan Turing designed the ACE");
        assert_eq!(a, e.embed_one("Alan Turing designed the ACE"));
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn shared_words_are_closer_than_unrelated_text() {
        let e = HashingEmbedder::default();
        let q = e.embed_one("Turing machine");
        let near = e.embed_one("The Turing machine is a model of computation");
        let far = e.embed_one("Grace Hopper wrote the first compiler for COBOL");
        assert!(cosine(&q, &near) > cosine(&q, &far));
    }

    /// The embedder as first written (a `String` per word and per trigram): the vectors are
    /// part of the stored data, so every later version must give exactly these.
    fn reference(dimension: usize, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; dimension];
        let mut add = |feature: &[u8], weight: f32| {
            let h = fnv1a(feature);
            let slot = (h % dimension as u64) as usize;
            let sign = if (h >> 63) & 1 == 1 { -1.0 } else { 1.0 };
            v[slot] += sign * weight;
        };
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let word = word.to_lowercase();
            add(word.as_bytes(), 1.0);
            let padded: Vec<char> = format!("^{word}$").chars().collect();
            for tri in padded.windows(3) {
                let s: String = tri.iter().collect();
                add(s.as_bytes(), 0.5);
            }
        }
        normalize(&mut v);
        v
    }

    #[test]
    fn vectors_are_those_of_the_first_version() {
        let e = HashingEmbedder::default();
        let fixed = [
            "",
            "a",
            "Alan Turing designed the ACE",
            "ΟΔΟΣ Σ σ ΣΑΣ İstanbul straße ǅemal",
            "日本語のテキスト and 中文 mixed, with émigré café-au-lait",
            "x y z 1 22 333 4444 Entity 000001 Person",
        ];
        for text in fixed {
            assert_eq!(e.embed_one(text), reference(256, text), "{text:?}");
        }
        // Generated texts over a mixed alphabet (ASCII, Greek capitals, accents, CJK,
        // separators), seeded.
        let alphabet: Vec<char> = "aZ9 _-.ΣσςΑİıßÉé日本ǅ\u{301}\t,".chars().collect();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut text = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            for _ in 0..(state % 40) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                text.push(alphabet[(state % alphabet.len() as u64) as usize]);
            }
            assert_eq!(e.embed_one(&text), reference(256, &text), "{text:?}");
        }
    }

    #[test]
    fn empty_text_is_the_zero_vector() {
        let e = HashingEmbedder::new(8);
        assert_eq!(e.embed_one(" ,. "), vec![0.0; 8]);
    }
}
