//! What a run asks about: entity names sampled by degree, and RAG and chat queries made from
//! the knowledge base's own documents, each distinct (docs/operations.md, "kbq load").
//!
//! Real users neither ask only about hubs or only about leaves, nor repeat a handful of
//! questions: a benchmark that does either measures caches and one kind of walk.

use std::collections::BTreeMap;
use std::io::BufRead;

use kbq_store::generate::Rng;
use serde_json::Value;
use std::collections::HashMap;

pub use kbq_store::generate::{QUERY_WORDS, queries_from};

/// `names` sampled from `degrees` (each name's relationships, in and out) by degree: the names
/// fall in classes by the bit length of their degree (0, 1, 2-3, 4-7, ...), and each class
/// gives an equal share, drawn at random; a class with fewer names than its share gives them
/// all, and the others make up the rest. So hubs and leaves are asked about alike, whatever
/// their numbers. Sorted, for a stable order.
pub fn by_degree(degrees: &HashMap<String, u32>, names: usize, rng: &mut Rng) -> Vec<String> {
    let mut classes: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (name, degree) in degrees {
        classes
            .entry(u32::BITS - degree.leading_zeros())
            .or_default()
            .push(name);
    }
    let mut classes: Vec<Vec<&str>> = classes.into_values().collect();
    for class in &mut classes {
        class.sort_unstable();
        for i in (1..class.len()).rev() {
            class.swap(i, rng.below(i + 1));
        }
    }
    let mut out = Vec::with_capacity(names);
    while out.len() < names && classes.iter().any(|c| !c.is_empty()) {
        for class in &mut classes {
            if out.len() == names {
                break;
            }
            if let Some(name) = class.pop() {
                out.push(name.to_string());
            }
        }
    }
    out.sort_unstable();
    out
}

/// Reads an import file (docs/import-format.md): every entity's degree and every document's
/// content. Lines that are not records are skipped: the file was imported, and the server
/// holds what it took.
pub fn read_data(input: impl BufRead) -> Result<(HashMap<String, u32>, Vec<String>), String> {
    let mut degrees: HashMap<String, u32> = HashMap::new();
    let mut texts = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        let Ok(record) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let text = |f: &str| record[f].as_str().map(str::to_string);
        match record["kind"].as_str() {
            Some("entity") => {
                if let Some(name) = text("name") {
                    degrees.entry(name).or_default();
                }
            }
            Some("relationship") => {
                for end in ["source_name", "target_name"] {
                    if let Some(name) = text(end) {
                        *degrees.entry(name).or_default() += 1;
                    }
                }
            }
            Some("document") => texts.extend(text("content")),
            _ => {}
        }
    }
    if degrees.is_empty() {
        return Err("it holds no entity".into());
    }
    Ok((degrees, texts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_degree_class_gives_an_equal_share() {
        // 1,000 leaves (degree 1), 100 of degree 5, 3 hubs of degree 5,000.
        let mut degrees = HashMap::new();
        for i in 0..1000 {
            degrees.insert(format!("leaf{i}"), 1);
        }
        for i in 0..100 {
            degrees.insert(format!("mid{i}"), 5);
        }
        for i in 0..3 {
            degrees.insert(format!("hub{i}"), 5000);
        }
        let names = by_degree(&degrees, 60, &mut Rng::new(7));
        let count = |p: &str| names.iter().filter(|n| n.starts_with(p)).count();
        // The hubs' class has 3: the other two classes share the rest.
        assert_eq!((count("hub"), count("mid"), count("leaf")), (3, 28, 29));
        assert_eq!(
            names.iter().collect::<std::collections::HashSet<_>>().len(),
            60,
            "no name twice"
        );
        assert_eq!(names, by_degree(&degrees, 60, &mut Rng::new(7)), "seeded");
        assert_eq!(by_degree(&degrees, 5000, &mut Rng::new(7)).len(), 1103);
    }

    #[test]
    fn queries_are_distinct_runs_of_six_words() {
        let texts = vec![
            "one two three four five six seven eight nine ten".to_string(),
            "short text".to_string(),
            "   ".to_string(),
        ];
        let queries = queries_from(&texts, 100, &mut Rng::new(1));
        // Five runs of six words in the first text, and the second whole.
        assert_eq!(queries.len(), 6, "{queries:?}");
        assert!(queries.contains(&"short text".to_string()));
        assert!(queries.contains(&"five six seven eight nine ten".to_string()));
        assert!(queries_from(&[], 10, &mut Rng::new(1)).is_empty());
    }

    #[test]
    fn the_data_file_gives_degrees_and_texts() {
        let file = concat!(
            "{\"kind\":\"entity\",\"name\":\"a\",\"entity_type\":\"t\"}\n",
            "{\"kind\":\"entity\",\"name\":\"lonely\",\"entity_type\":\"t\"}\n",
            "not json\n",
            "{\"kind\":\"relationship\",\"source_name\":\"a\",\"target_name\":\"b\",\"relationship_type\":\"r\"}\n",
            "{\"kind\":\"document\",\"title\":\"t\",\"content\":\"some words\"}\n",
        );
        let (degrees, texts) = read_data(file.as_bytes()).unwrap();
        assert_eq!(degrees["a"], 1);
        assert_eq!(degrees["b"], 1);
        assert_eq!(degrees["lonely"], 0);
        assert_eq!(texts, ["some words"]);
        assert!(read_data("".as_bytes()).is_err());
    }
}
