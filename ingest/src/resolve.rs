//! When two names are one entity: the name key, a name similarity, and the decision that
//! combines it with the similarity of what the text says about each.
//!
//! Three outcomes, not two: [`Decision::Doubtful`] marks pairs a cheap rule should not merge
//! on its own ("Apple" and "Apple Inc.", "IBM" and "International Business Machines") but
//! a second look (a model, or a person) might; the pipeline decides what to do with them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// The key under which two names are the same entity under case, spacing and punctuation
/// variants: "New-York", "new york" and "New  York." all give `new york`.
///
/// The name is NFKC-normalised (full-width "ＩＢＭ" is "IBM", the "ﬁ" ligature is "fi"),
/// lowercased, its apostrophes dropped ("McDonald's" is "mcdonalds"), and every run of other
/// characters that are not letters, digits or combining marks (Devanagari vowel signs and
/// viramas are marks) becomes one space. Runs of single letters are initials and are joined:
/// "J. R. R. Tolkien", "J.R.R. Tolkien" and "JRR Tolkien" all give `jrr tolkien`, and
/// "U.S.A." gives `usa`. Accents are kept: "Zürich" and "Zurich" differ here, and are left to
/// [`similarity`].
pub fn name_key(name: &str) -> String {
    let mut tokens: Vec<String> = Vec::new();
    let mut token = String::new();
    for c in name.nfkc().flat_map(char::to_lowercase) {
        if matches!(c, '\'' | '\u{2019}' | '\u{2018}' | '\u{02bc}' | '`') {
            continue;
        }
        if c.is_alphanumeric() || is_combining_mark(c) {
            token.push(c);
        } else if !token.is_empty() {
            tokens.push(std::mem::take(&mut token));
        }
    }
    if !token.is_empty() {
        tokens.push(token);
    }
    join_initials(tokens).join(" ")
}

fn join_initials(tokens: Vec<String>) -> Vec<String> {
    let is_initial = |t: &str| {
        let mut chars = t.chars();
        matches!((chars.next(), chars.next()), (Some(c), None) if c.is_alphabetic())
    };
    let mut out: Vec<String> = Vec::with_capacity(tokens.len());
    let mut run = 0;
    for token in tokens {
        if is_initial(&token) {
            run += 1;
            if run > 1 {
                out.last_mut()
                    .expect("a run has a first initial")
                    .push_str(&token);
                continue;
            }
        } else {
            run = 0;
        }
        out.push(token);
    }
    out
}

/// How alike two names are, from 0 to 1; exactly 1 only when their [`name_key`]s are equal.
///
/// On the keys, the score is the mean of Jaro-Winkler and normalised Levenshtein similarity:
/// Jaro-Winkler alone rates a name and any longer name it begins ("Paris" and "Paris Texas")
/// highly, and Levenshtein pulls such pairs down by their difference in length, so the mean
/// is high only for near-identical spellings ("Massachusets" for "Massachusetts"). The best
/// of three readings counts: the keys as they are, with their words sorted ("Tolkien, J. R.
/// R." is "J. R. R. Tolkien"), and with their spaces removed ("Post Gres" is "Postgres").
/// Names that only the last two readings equate score 0.99, not 1.
pub fn similarity(a: &str, b: &str) -> f64 {
    similarity_of_keys(&name_key(a), &name_key(b))
}

/// [`similarity`] of two names' keys ([`name_key`]).
pub fn similarity_of_keys(a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let score = |x: &str, y: &str| {
        (strsim::jaro_winkler(x, y) + strsim::normalized_levenshtein(x, y)) / 2.0
    };
    let sorted = |key: &str| {
        let mut words: Vec<&str> = key.split(' ').collect();
        words.sort_unstable();
        words.join(" ")
    };
    let compact = |key: &str| key.replace(' ', "");
    score(a, b)
        .max(score(&sorted(a), &sorted(b)))
        .max(score(&compact(a), &compact(b)))
        .min(0.99)
}

/// Whether two names are one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Different entities.
    Different,
    /// Perhaps one entity: worth a second look, not an automatic merge.
    Doubtful,
    /// One entity.
    Same,
}

/// The thresholds [`decide`] applies. Cosines are of the two descriptions' embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResolveConfig {
    /// Name similarity from which two names are the same entity (default 0.95: a typo in a
    /// long name, not a different word).
    pub same_name: f64,
    /// Name similarity from which two names are doubtful (default 0.80).
    pub doubtful_name: f64,
    /// Description cosine a `Same` by name needs, when both descriptions are known
    /// (default 0.80); below it the pair is only doubtful.
    pub same_description: f32,
    /// Description cosine below which a doubtful pair is different (default 0.50): the texts
    /// describe unrelated things.
    pub different_description: f32,
}

impl Default for ResolveConfig {
    fn default() -> Self {
        ResolveConfig {
            same_name: 0.95,
            doubtful_name: 0.80,
            same_description: 0.80,
            different_description: 0.50,
        }
    }
}

/// A [`ResolveConfig`] whose thresholds are out of order or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resolve thresholds must satisfy {0}")]
pub struct ResolveConfigError(&'static str);

impl ResolveConfig {
    /// Checks that `0 <= doubtful_name <= same_name <= 1` and
    /// `-1 <= different_description <= same_description <= 1`.
    pub fn validate(&self) -> Result<(), ResolveConfigError> {
        if !(0.0 <= self.doubtful_name
            && self.doubtful_name <= self.same_name
            && self.same_name <= 1.0)
        {
            return Err(ResolveConfigError("0 <= doubtful_name <= same_name <= 1"));
        }
        if !(-1.0 <= self.different_description
            && self.different_description <= self.same_description
            && self.same_description <= 1.0)
        {
            return Err(ResolveConfigError(
                "-1 <= different_description <= same_description <= 1",
            ));
        }
        Ok(())
    }
}

/// The decision for a name similarity ([`similarity`]) and, when both entities have
/// descriptions, the cosine of their embeddings:
///
/// - `name_sim` 1 (equal name keys): `Same`. The store knows an entity by its name, so two
///   entities with one key cannot both be kept; descriptions are not consulted.
/// - `name_sim >= same_name`: `Same`, unless the cosine is below `same_description`, then
///   `Doubtful`.
/// - `name_sim >= doubtful_name`: `Doubtful`, unless the cosine is below
///   `different_description`, then `Different`.
/// - below: `Different`.
///
/// Descriptions only ever lower a decision: two unrelated names are not one entity because
/// their texts are alike (two people described as "a British mathematician").
pub fn decide(name_sim: f64, description_cosine: Option<f32>, config: &ResolveConfig) -> Decision {
    if name_sim >= 1.0 {
        return Decision::Same;
    }
    let by_name = if name_sim >= config.same_name {
        Decision::Same
    } else if name_sim >= config.doubtful_name {
        Decision::Doubtful
    } else {
        Decision::Different
    };
    lower_by_description(by_name, description_cosine, config)
}

fn lower_by_description(
    decision: Decision,
    description_cosine: Option<f32>,
    config: &ResolveConfig,
) -> Decision {
    match (decision, description_cosine) {
        (Decision::Same, Some(cos)) if cos < config.same_description => Decision::Doubtful,
        (Decision::Doubtful, Some(cos)) if cos < config.different_description => {
            Decision::Different
        }
        (decision, _) => decision,
    }
}

/// The decision for two names, with what [`similarity`] cannot see: one name being the
/// other's acronym ("IBM", "International Business Machines") or the other's words plus
/// more ("Apple" and "Apple Inc.", "Paris" and "Paris, Texas", "New York" and "New York
/// City"). Such pairs are `Doubtful` however alike they look, never `Same` (a suffix may
/// name a different thing), and `Different` only if their descriptions say so.
pub fn compare(
    a: &str,
    b: &str,
    description_cosine: Option<f32>,
    config: &ResolveConfig,
) -> Decision {
    compare_keys(&name_key(a), &name_key(b), description_cosine, config)
}

/// [`compare`] of two names' keys ([`name_key`]): for a name compared with many, its key made
/// once.
pub fn compare_keys(
    key_a: &str,
    key_b: &str,
    description_cosine: Option<f32>,
    config: &ResolveConfig,
) -> Decision {
    if key_a == key_b {
        return Decision::Same;
    }
    if numbers(key_a) != numbers(key_b) {
        // "Apollo 11" and "Apollo 13", "Z1" and "Z2", "Windows 10" and "Windows 11": names
        // that differ in a number name different things, however alike they look.
        return Decision::Different;
    }
    if is_acronym_of(key_a, key_b)
        || is_acronym_of(key_b, key_a)
        || words_within(key_a, key_b)
        || words_within(key_b, key_a)
    {
        return lower_by_description(Decision::Doubtful, description_cosine, config);
    }
    decide(similarity_of_keys(key_a, key_b), description_cosine, config)
}

/// The runs of digits in a name key, in order.
fn numbers(key: &str) -> Vec<&str> {
    key.split(|c: char| !c.is_ascii_digit())
        .filter(|run| !run.is_empty())
        .collect()
}

/// Words an acronym usually skips.
const ACRONYM_SKIPS: &[&str] = &[
    "a", "an", "and", "at", "for", "in", "of", "on", "the", "to", "de", "der", "des", "du", "la",
    "le", "und", "y",
];

/// The acronyms a name key (of two or more words, each starting with a letter) may go by: its
/// words' initials, with and without the small words an acronym skips, of two or more
/// letters each. Empty for any other key.
pub fn acronyms(key: &str) -> Vec<String> {
    let words: Vec<&str> = key.split(' ').filter(|w| !w.is_empty()).collect();
    if words.len() < 2
        || !words
            .iter()
            .all(|w| w.chars().next().is_some_and(char::is_alphabetic))
    {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    for skip in [false, true] {
        let initials = initials(&words, skip);
        if initials.chars().count() >= 2 && !out.contains(&initials) {
            out.push(initials);
        }
    }
    out
}

/// Whether a name key may be an acronym of another name's (see [`acronyms`]): one word of
/// two or more letters, and no other characters.
pub fn may_be_acronym(key: &str) -> bool {
    key.chars().count() >= 2 && key.chars().all(char::is_alphabetic)
}

/// `short` is one word of two or more letters, the initials of `long`'s words, with or
/// without the small words an acronym skips.
fn is_acronym_of(short: &str, long: &str) -> bool {
    let words: Vec<&str> = long.split(' ').collect();
    if short.contains(' ') || short.chars().count() < 2 || words.len() < 2 {
        return false;
    }
    short == initials(&words, false) || short == initials(&words, true)
}

/// The first letters of `words`, without the small words an acronym skips when `skip`.
fn initials(words: &[&str], skip: bool) -> String {
    words
        .iter()
        .filter(|w| !(skip && ACRONYM_SKIPS.contains(w)))
        .filter_map(|w| w.chars().next())
        .collect()
}

/// Every word of `short` is a word of `long`, which has more.
fn words_within(short: &str, long: &str) -> bool {
    let long_words: BTreeSet<&str> = long.split(' ').collect();
    let short_words: BTreeSet<&str> = short.split(' ').collect();
    !short.is_empty() && short_words.len() < long_words.len() && short_words.is_subset(&long_words)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn same_key(a: &str, b: &str) -> bool {
        name_key(a) == name_key(b)
    }

    #[test]
    fn names_that_differ_in_a_number_are_different() {
        let config = ResolveConfig::default();
        for (a, b) in [
            ("Apollo 11", "Apollo 13"),
            ("Z1", "Z2"),
            ("Person 1", "Person 12"),
            ("Windows 10", "Windows"),
        ] {
            assert_eq!(
                compare(a, b, None, &config),
                Decision::Different,
                "{a} / {b}"
            );
        }
        assert_eq!(compare("F-16", "F16", None, &config), Decision::Same);
        assert_eq!(
            compare("Apollo 11", "Apollo 11 mission", None, &config),
            Decision::Doubtful
        );
    }

    #[test]
    fn keys_fold_case_spacing_and_punctuation() {
        assert_eq!(name_key("New-York"), "new york");
        assert!(same_key("New-York", "new york"));
        assert!(same_key("new york", "New  York."));
        assert!(same_key("  NEW_york!! ", "New York"));
        assert_eq!(name_key("J. R. R. Tolkien"), "jrr tolkien");
        assert!(same_key("J.R.R. Tolkien", "JRR Tolkien"));
        assert!(same_key("U.S.A.", "USA"));
        assert!(same_key("McDonald's", "McDonalds"));
        assert!(same_key("O\u{2019}Brien", "OBrien"));
        assert!(same_key("ＩＢＭ", "IBM"));
        assert_eq!(name_key("C++"), "c");
        assert_eq!(name_key("Windows 3.1"), "windows 3 1");
        assert!(
            !same_key("Windows 3.1", "Windows 31"),
            "digits are not initials"
        );
        assert_eq!(name_key("  --  "), "");
    }

    #[test]
    fn keys_keep_letters_and_digits_of_every_script() {
        assert_eq!(name_key("Москва"), name_key("МОСКВА"));
        assert_eq!(name_key("Москва"), "москва");
        assert_eq!(name_key("東京・大阪"), "東京 大阪");
        assert_eq!(name_key("हिन्दी"), "हिन्दी");
        assert_eq!(name_key("Zürich"), "zürich");
        assert_ne!(name_key("Zürich"), name_key("Zurich"));
        assert_eq!(name_key("Zu\u{308}rich"), "zürich", "NFKC composes");
        assert_eq!(name_key("Ελληνικά ΑΒΓ"), "ελληνικά αβγ");
        assert_eq!(name_key("٣ أبريل"), "٣ أبريل");
    }

    #[test]
    fn similarity_is_one_only_for_equal_keys() {
        assert_eq!(similarity("New-York", "new york"), 1.0);
        assert!(similarity("Tolkien, J. R. R.", "J. R. R. Tolkien") == 0.99);
        assert!(similarity("Post Gres", "Postgres") == 0.99);
        assert!(similarity("Alan Turing", "Alonzo Church") < 0.6);
        assert_eq!(similarity("", "x"), 0.0);
        let s = similarity(
            "Massachusetts Institute of Technology",
            "Massachusets Institute of Technology",
        );
        assert!(s > 0.95 && s < 1.0, "{s}");
    }

    fn decision(a: &str, b: &str) -> Decision {
        compare(a, b, None, &ResolveConfig::default())
    }

    #[test]
    fn real_aliases() {
        assert_eq!(decision("J. R. R. Tolkien", "JRR Tolkien"), Decision::Same);
        assert_eq!(decision("New-York", "New  York."), Decision::Same);
        assert_eq!(
            decision("Tolkien, J.R.R.", "J. R. R. Tolkien"),
            Decision::Same
        );
        assert_eq!(
            decision(
                "Massachusetts Institute of Technology",
                "Massachusets Institute of Technology"
            ),
            Decision::Same
        );
        assert_eq!(decision("Apple Inc.", "Apple"), Decision::Doubtful);
        assert_eq!(decision("PostgreSQL", "Postgres"), Decision::Doubtful);
        assert_eq!(
            decision("IBM", "International Business Machines"),
            Decision::Doubtful
        );
        assert_eq!(
            decision("MIT", "Massachusetts Institute of Technology"),
            Decision::Doubtful
        );
        assert_eq!(
            decision("N.A.S.A.", "National Aeronautics and Space Administration"),
            Decision::Doubtful
        );
        assert_eq!(decision("The Beatles", "Beatles"), Decision::Doubtful);
        assert!(decision("Barack Obama", "Barak Obama") >= Decision::Doubtful);
    }

    #[test]
    fn look_alikes_that_are_not_the_same() {
        assert_ne!(decision("New York", "New York City"), Decision::Same);
        assert_ne!(decision("Paris", "Paris, Texas"), Decision::Same);
        assert_ne!(decision("Java", "JavaScript"), Decision::Same);
        assert_ne!(decision("Austria", "Australia"), Decision::Same);
        assert_ne!(decision("Mark Smith", "Mark Smyth"), Decision::Same);
        assert_eq!(
            decision("Alan Turing", "Alonzo Church"),
            Decision::Different
        );
        assert_eq!(decision("Java", "JavaScript"), Decision::Different);
        assert_eq!(decision("IBM", "Intel"), Decision::Different);
    }

    #[test]
    fn descriptions_only_lower_a_decision() {
        let config = ResolveConfig::default();
        // Near-identical names, unrelated descriptions: a closer look, not a merge.
        let near = "Massachusets Institute of Technology";
        let mit = "Massachusetts Institute of Technology";
        assert_eq!(compare(mit, near, Some(0.95), &config), Decision::Same);
        assert_eq!(compare(mit, near, Some(0.3), &config), Decision::Doubtful);
        // A city and a town of the same name, described differently.
        assert_eq!(
            compare("Paris", "Paris, Texas", Some(0.2), &config),
            Decision::Different
        );
        assert_eq!(
            compare("Paris", "Paris, Texas", Some(0.7), &config),
            Decision::Doubtful
        );
        // Alike descriptions do not make unlike names one entity.
        assert_eq!(
            compare("Alan Turing", "Alonzo Church", Some(0.99), &config),
            Decision::Different
        );
        // Equal keys are one entity whatever the descriptions say.
        assert_eq!(
            compare("paris", "Paris", Some(0.0), &config),
            Decision::Same
        );
    }

    #[test]
    fn decide_applies_the_documented_thresholds() {
        let config = ResolveConfig::default();
        assert_eq!(decide(1.0, Some(-1.0), &config), Decision::Same);
        assert_eq!(decide(0.96, None, &config), Decision::Same);
        assert_eq!(decide(0.96, Some(0.8), &config), Decision::Same);
        assert_eq!(decide(0.96, Some(0.79), &config), Decision::Doubtful);
        assert_eq!(decide(0.96, Some(0.1), &config), Decision::Doubtful);
        assert_eq!(decide(0.9, None, &config), Decision::Doubtful);
        assert_eq!(decide(0.9, Some(0.99), &config), Decision::Doubtful);
        assert_eq!(decide(0.9, Some(0.49), &config), Decision::Different);
        assert_eq!(decide(0.79, None, &config), Decision::Different);
    }

    #[test]
    fn config_validation_and_serde() {
        assert_eq!(ResolveConfig::default().validate(), Ok(()));
        let bad = ResolveConfig {
            doubtful_name: 0.97,
            ..ResolveConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("doubtful_name <= same_name")
        );
        let bad = ResolveConfig {
            same_description: 1.5,
            ..ResolveConfig::default()
        };
        assert!(bad.validate().is_err());
        let config: ResolveConfig = serde_json::from_str(r#"{"same_name": 0.9}"#).unwrap();
        assert_eq!(config.same_name, 0.9);
        assert_eq!(config.doubtful_name, 0.80);
    }

    proptest! {
        #[test]
        fn keys_ignore_case_and_separators(words in prop::collection::vec("[a-zA-Zé0-9]{2,8}", 1..5), seps in prop::collection::vec("[ \\-_.,;:/()]{1,3}", 4)) {
            let spaced = words.join(" ");
            let mut odd = String::new();
            for (i, w) in words.iter().enumerate() {
                if i > 0 { odd.push_str(&seps[i - 1]); }
                odd.push_str(&w.to_uppercase());
            }
            prop_assert_eq!(name_key(&spaced), name_key(&odd));
            let key = name_key(&odd);
            prop_assert_eq!(name_key(&key), key.clone(), "keys are fixed points");
        }

        #[test]
        fn similarity_is_symmetric_and_bounded(a in "\\PC{0,20}", b in "\\PC{0,20}") {
            let s = similarity(&a, &b);
            prop_assert!((0.0..=1.0).contains(&s));
            prop_assert_eq!(s, similarity(&b, &a));
            prop_assert_eq!(s == 1.0, name_key(&a) == name_key(&b));
        }
    }

    #[test]
    fn only_one_word_of_letters_may_be_an_acronym() {
        for key in ["ibm", "nasa", "ünb"] {
            assert!(may_be_acronym(key), "{key}");
        }
        for key in ["i", "ibm corp", "z1", "", "x-y"] {
            assert!(!may_be_acronym(key), "{key}");
        }
        // What `acronyms` gives may be one.
        for a in acronyms("bank of america") {
            assert!(may_be_acronym(&a), "{a}");
        }
    }

    #[test]
    fn a_name_of_words_has_its_acronyms() {
        assert_eq!(acronyms("international business machines"), ["ibm"]);
        assert_eq!(
            acronyms("massachusetts institute of technology"),
            ["miot", "mit"]
        );
        assert!(acronyms("ibm").is_empty());
        assert!(acronyms("person 500").is_empty(), "digits are not initials");
        for short in acronyms("bank of america") {
            assert!(is_acronym_of(&short, "bank of america"), "{short}");
        }
    }
}
