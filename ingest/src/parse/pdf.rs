//! The text layer of a PDF through `pdf-extract` (on `lopdf`).
//!
//! `pdf-extract` panics on much malformed or merely unusual input (fonts, encodings, colour
//! spaces it does not know), so extraction runs inside `catch_unwind` and a panic becomes a
//! [`ParseError::Pdf`]. The process's panic hook still runs and prints the panic to standard
//! error; a library should not replace a hook that the program owns.
//!
//! What `catch_unwind` cannot catch is a stack overflow, which aborts the process.
//! `pdf-extract` recurses along `/Parent` links and into form XObjects without noticing a
//! cycle, so a small crafted file (a form that draws itself) would take the server down:
//! [`check_recursion`] refuses page trees that loop and forms that draw themselves or nest
//! deeper than [`MAX_FORM_DEPTH`] before extraction starts.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use lopdf::content::Content;
use lopdf::{Dictionary, Document, Object, ObjectId};

use super::{Builder, ParseError, Parsed};

pub(super) fn parse(bytes: &[u8]) -> Result<Parsed, ParseError> {
    // Nothing outside the closure is touched after a panic but the bytes, which are only read.
    let (title, text) = catch_unwind(AssertUnwindSafe(|| extract(bytes))).map_err(|panic| {
        let message = crate::panic_message(&*panic).unwrap_or_else(|| "unknown failure".to_owned());
        ParseError::Pdf {
            reason: format!("the PDF reader failed: {message}"),
        }
    })??;
    let mut b = Builder::default();
    if let Some(title) = title {
        b.declare_title(&title);
    }
    b.preformatted(&text);
    Ok(b.finish())
}

fn extract(bytes: &[u8]) -> Result<(Option<String>, String), ParseError> {
    let pdf_error = |err: &dyn std::fmt::Display| ParseError::Pdf {
        reason: err.to_string(),
    };
    let mut doc = Document::load_mem(bytes).map_err(|err| pdf_error(&err))?;
    if doc.is_encrypted() {
        // Many PDFs are encrypted with an empty user password only to restrict printing or
        // copying; those open. Others need a password kbq does not have.
        doc.decrypt("").map_err(|_| ParseError::Pdf {
            reason: "the PDF is encrypted with a password".to_owned(),
        })?;
    }
    if doc.get_pages().is_empty() {
        return Err(ParseError::Pdf {
            reason: "the PDF has no pages".to_owned(),
        });
    }
    check_recursion(&doc)?;
    let title = info_title(&doc);
    let mut text = String::new();
    for page in doc.get_pages().into_keys() {
        let mut output = pdf_extract::PlainTextOutput::new(&mut text);
        pdf_extract::output_doc_page(&doc, &mut output, page).map_err(|err| pdf_error(&err))?;
        // A form feed: the builder makes it a paragraph break, so no paragraph runs on from
        // one page into the next (pdf-extract writes nothing between pages).
        text.push('\u{c}');
    }
    Ok((title, text))
}

/// How deep forms may draw forms; real documents nest a few levels.
const MAX_FORM_DEPTH: usize = 32;

/// Resources as `pdf-extract` finds them: the dictionary, and the object that holds it (so
/// that a form drawn with two different inherited resources is checked with each).
#[derive(Clone, Copy)]
struct Resources<'a> {
    owner: ObjectId,
    dict: &'a Dictionary,
}

/// Refuses what would make `pdf-extract` recurse without end (see the module).
fn check_recursion(doc: &Document) -> Result<(), ParseError> {
    let mut checked = HashSet::new();
    for (number, page_id) in doc.get_pages() {
        let resources = page_resources(doc, page_id).map_err(|reason| ParseError::Pdf {
            reason: format!("page {number}: {reason}"),
        })?;
        let content = doc.get_page_content(page_id).unwrap_or_default();
        let mut path = Vec::new();
        check_forms(doc, &content, resources, &mut path, &mut checked).map_err(|reason| {
            ParseError::Pdf {
                reason: format!("page {number}: {reason}"),
            }
        })?;
    }
    Ok(())
}

/// The page's resources, inherited along `/Parent` links as `pdf-extract` looks them up,
/// or an error if those links loop before reaching the root.
fn page_resources(doc: &Document, page_id: ObjectId) -> Result<Option<Resources<'_>>, String> {
    let mut seen = HashSet::new();
    let mut resources = None;
    let mut node = Some(page_id);
    while let Some(id) = node {
        if !seen.insert(id) {
            return Err("the page tree's /Parent links form a loop".to_owned());
        }
        let Ok(dict) = doc.get_dictionary(id) else {
            break;
        };
        if resources.is_none()
            && let Some(found) = dict
                .get(b"Resources")
                .ok()
                .and_then(|o| deref(doc, o).as_dict().ok())
        {
            resources = Some(Resources {
                owner: id,
                dict: found,
            });
        }
        node = dict.get(b"Parent").and_then(Object::as_reference).ok();
    }
    Ok(resources)
}

/// Follows the forms a content stream draws (`/Name Do`), depth first.
fn check_forms<'a>(
    doc: &'a Document,
    content: &[u8],
    resources: Option<Resources<'a>>,
    path: &mut Vec<ObjectId>,
    checked: &mut HashSet<(ObjectId, Option<ObjectId>)>,
) -> Result<(), String> {
    // Content that does not decode is left to pdf-extract to fail on (it panics, caught).
    let Ok(content) = Content::decode(content) else {
        return Ok(());
    };
    for operation in content.operations.iter().filter(|op| op.operator == "Do") {
        let Some(id) = operation
            .operands
            .first()
            .and_then(|name| name.as_name().ok())
            .and_then(|name| xobject(doc, resources?.dict, name))
        else {
            continue;
        };
        if path.contains(&id) {
            return Err(format!("form XObject {} {} draws itself", id.0, id.1));
        }
        if path.len() >= MAX_FORM_DEPTH {
            return Err(format!("form XObjects nest deeper than {MAX_FORM_DEPTH}"));
        }
        let Ok(form) = doc.get_object(id).and_then(Object::as_stream) else {
            continue;
        };
        // A form without resources of its own draws with its caller's.
        let form_resources = form
            .dict
            .get(b"Resources")
            .ok()
            .and_then(|o| deref(doc, o).as_dict().ok())
            .map(|dict| Resources { owner: id, dict })
            .or(resources);
        if !checked.insert((id, form_resources.map(|r| r.owner))) {
            continue;
        }
        let form_content = form
            .decompressed_content()
            .unwrap_or_else(|_| form.content.clone());
        path.push(id);
        check_forms(doc, &form_content, form_resources, path, checked)?;
        path.pop();
    }
    Ok(())
}

/// The object id of the XObject `name` in `resources`.
fn xobject(doc: &Document, resources: &Dictionary, name: &[u8]) -> Option<ObjectId> {
    let xobjects = deref(doc, resources.get(b"XObject").ok()?).as_dict().ok()?;
    xobjects.get(name).ok()?.as_reference().ok()
}

fn deref<'a>(doc: &'a Document, object: &'a Object) -> &'a Object {
    match object {
        Object::Reference(id) => doc.get_object(*id).unwrap_or(object),
        _ => object,
    }
}

/// The `/Title` of the document information dictionary.
fn info_title(doc: &Document) -> Option<String> {
    let info = match doc.trailer.get(b"Info").ok()? {
        Object::Reference(id) => doc.get_dictionary(*id).ok()?,
        Object::Dictionary(dict) => dict,
        _ => return None,
    };
    lopdf::decode_text_string(info.get(b"Title").ok()?).ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use lopdf::content::{Content, Operation};
    use lopdf::{Document, Object, Stream, dictionary};

    use crate::format::Format;
    use crate::parse::tests::check_invariants;
    use crate::parse::{ParseError, parse};

    /// A PDF with one page per entry of `pages`, each line drawn in Helvetica (one of the
    /// fourteen standard Type 1 fonts, which need no embedding), and an optional title.
    pub(crate) fn pdf(pages: &[&[&str]], title: Option<&str>) -> Vec<u8> {
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let font_id = doc.add_object(dictionary! {
            "Type" => "Font",
            "Subtype" => "Type1",
            "BaseFont" => "Helvetica",
            "Encoding" => "WinAnsiEncoding",
        });
        let resources_id = doc.add_object(dictionary! {
            "Font" => dictionary! { "F1" => font_id },
        });
        let mut kids = Vec::new();
        for lines in pages {
            let mut operations = vec![
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), 12.into()]),
                Operation::new("TL", vec![16.into()]),
                Operation::new("Td", vec![72.into(), 720.into()]),
            ];
            for line in *lines {
                operations.push(Operation::new("Tj", vec![Object::string_literal(*line)]));
                operations.push(Operation::new("T*", vec![]));
            }
            operations.push(Operation::new("ET", vec![]));
            let content = Content { operations };
            let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
            let page_id = doc.add_object(dictionary! {
                "Type" => "Page",
                "Parent" => pages_id,
                "Contents" => content_id,
            });
            kids.push(page_id.into());
        }
        let count = kids.len() as i64;
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! {
                "Type" => "Pages",
                "Kids" => kids,
                "Count" => count,
                "Resources" => resources_id,
                "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
            }),
        );
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        if let Some(title) = title {
            let info_id = doc.add_object(dictionary! { "Title" => lopdf::text_string(title) });
            doc.trailer.set("Info", info_id);
        }
        doc.compress();
        let mut bytes = Vec::new();
        doc.save_to(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn reads_the_text_layer_and_the_title() {
        let bytes = pdf(
            &[
                &[
                    "Alan Turing worked at Bletchley Park.",
                    "He designed the ACE.",
                ],
                &["Page two: Alonzo Church."],
            ],
            Some("Turing Notes"),
        );
        let parsed = parse(&bytes, Format::Pdf).unwrap();
        check_invariants(&parsed);
        assert_eq!(parsed.title.as_deref(), Some("Turing Notes"));
        // Lines stay lines; pages are paragraphs.
        assert_eq!(
            parsed.text,
            "Alan Turing worked at Bletchley Park.\nHe designed the ACE.\n\nPage two: Alonzo Church."
        );
        assert_eq!(parsed.sections.len(), 1);
    }

    #[test]
    fn a_pdf_without_a_text_layer_is_refused() {
        let bytes = pdf(&[&[]], None);
        assert_eq!(parse(&bytes, Format::Pdf), Err(ParseError::NoTextLayer));
    }

    #[test]
    fn garbage_and_truncated_pdfs_fail_with_a_reason_and_no_panic() {
        let good = pdf(&[&["Some text that will be cut off."]], None);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("garbage", b"this is not a PDF at all".to_vec()),
            ("empty", Vec::new()),
            ("header only", b"%PDF-1.7\n".to_vec()),
            ("truncated", good[..good.len() / 2].to_vec()),
            ("no trailer", good[..good.len() - 40].to_vec()),
        ];
        for (name, bytes) in cases {
            match parse(&bytes, Format::Pdf) {
                Err(ParseError::Pdf { reason }) => assert!(!reason.is_empty(), "{name}"),
                other => panic!("{name}: expected a PDF error, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_pdf_reader_panic_becomes_an_error() {
        // A page without a MediaBox anywhere in its tree makes pdf-extract panic
        // ("MediaBox"); the parser must turn that into an error.
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let content_id = doc.add_object(Stream::new(dictionary! {}, b"BT ET".to_vec()));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
        });
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! {
                "Type" => "Pages", "Kids" => vec![page_id.into()], "Count" => 1,
            }),
        );
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        let mut bytes = Vec::new();
        doc.save_to(&mut bytes).unwrap();
        match parse(&bytes, Format::Pdf) {
            Err(ParseError::Pdf { reason }) => {
                assert!(reason.contains("MediaBox"), "{reason}")
            }
            other => panic!("expected a PDF error, got {other:?}"),
        }
    }

    /// A one-page PDF whose page draws `page_draws` (names of forms), with forms
    /// `(name, content, own resources?)`: each form's resources, when it has them, name
    /// every form and the font. Returns the bytes.
    fn pdf_with_forms(page_draws: &str, forms: &[(&str, &str, bool)]) -> Vec<u8> {
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let font_id = doc.add_object(dictionary! {
            "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
        });
        let form_ids: Vec<_> = forms.iter().map(|_| doc.new_object_id()).collect();
        let mut xobjects = lopdf::Dictionary::new();
        for ((name, _, _), id) in forms.iter().zip(&form_ids) {
            xobjects.set(*name, *id);
        }
        let resources_id = doc.add_object(dictionary! {
            "Font" => dictionary! { "F1" => font_id },
            "XObject" => xobjects,
        });
        for ((_, content, own_resources), id) in forms.iter().zip(&form_ids) {
            let mut dict = dictionary! {
                "Type" => "XObject", "Subtype" => "Form",
                "BBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
            };
            if *own_resources {
                dict.set("Resources", resources_id);
            }
            doc.objects.insert(
                *id,
                Object::Stream(Stream::new(dict, content.as_bytes().to_vec())),
            );
        }
        let content_id =
            doc.add_object(Stream::new(dictionary! {}, page_draws.as_bytes().to_vec()));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
            "Resources" => resources_id,
        });
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! {
                "Type" => "Pages", "Kids" => vec![page_id.into()], "Count" => 1,
                "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
            }),
        );
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        let mut bytes = Vec::new();
        doc.save_to(&mut bytes).unwrap();
        bytes
    }

    fn pdf_error(bytes: &[u8]) -> String {
        match parse(bytes, Format::Pdf) {
            Err(ParseError::Pdf { reason }) => reason,
            other => panic!("expected a PDF error, got {other:?}"),
        }
    }

    const TEXT: &str = "BT /F1 12 Tf 72 700 Td (Drawn by a form.) Tj ET";

    #[test]
    fn forms_are_read_where_they_are_drawn() {
        let bytes = pdf_with_forms(
            "/Fm0 Do /Fm1 Do",
            &[("Fm0", TEXT, true), ("Fm1", "/Fm0 Do", false)],
        );
        let parsed = parse(&bytes, Format::Pdf).unwrap();
        assert_eq!(
            parsed.text.matches("Drawn by a form.").count(),
            2,
            "{:?}",
            parsed.text
        );
    }

    #[test]
    fn forms_that_draw_themselves_are_refused_before_they_overflow_the_stack() {
        // Each of these would make pdf-extract recurse until the process aborts.
        let bytes = pdf_with_forms("/Fm0 Do", &[("Fm0", "/Fm0 Do", true)]);
        assert!(pdf_error(&bytes).contains("draws itself"));
        let bytes = pdf_with_forms("/Fm0 Do", &[("Fm0", "/Fm0 Do", false)]);
        assert!(pdf_error(&bytes).contains("draws itself"));
        let bytes = pdf_with_forms("/A Do", &[("A", "/B Do", true), ("B", "/A Do", true)]);
        assert!(pdf_error(&bytes).contains("draws itself"));
    }

    #[test]
    fn forms_nested_too_deep_are_refused() {
        let names: Vec<String> = (0..40).map(|i| format!("F{i}")).collect();
        let contents: Vec<String> = (0..40)
            .map(|i| {
                if i + 1 < 40 {
                    format!("/F{} Do", i + 1)
                } else {
                    TEXT.to_owned()
                }
            })
            .collect();
        let forms: Vec<(&str, &str, bool)> = names
            .iter()
            .zip(&contents)
            .map(|(n, c)| (n.as_str(), c.as_str(), true))
            .collect();
        assert!(pdf_error(&pdf_with_forms("/F0 Do", &forms)).contains("nest deeper than 32"));
        // Nesting within the limit is read.
        let parsed = parse(&pdf_with_forms("/F30 Do", &forms), Format::Pdf).unwrap();
        assert_eq!(parsed.text, "Drawn by a form.");
    }

    #[test]
    fn a_page_tree_that_loops_is_refused() {
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let page_id = doc.new_object_id();
        let content_id = doc.add_object(Stream::new(dictionary! {}, TEXT.as_bytes().to_vec()));
        // Neither node has a MediaBox, so pdf-extract would climb /Parent forever.
        doc.objects.insert(
            page_id,
            Object::Dictionary(dictionary! {
                "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
            }),
        );
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! {
                "Type" => "Pages", "Kids" => vec![page_id.into()], "Count" => 1,
                "Parent" => page_id,
            }),
        );
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        let mut bytes = Vec::new();
        doc.save_to(&mut bytes).unwrap();
        assert!(pdf_error(&bytes).contains("/Parent links form a loop"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Damaged PDFs fail or parse; none panics through, none aborts.
        #[test]
        fn damaged_pdfs_never_panic(
            flips in proptest::collection::vec((0.0..1.0f64, proptest::num::u8::ANY), 1..8),
            cut in 0.5..1.0f64,
        ) {
            let mut bytes = pdf(&[&["Some text on a page."], &["More text."]], Some("Title"));
            for (at, byte) in flips {
                let i = (at * bytes.len() as f64) as usize;
                bytes[i] = byte;
            }
            bytes.truncate((cut * bytes.len() as f64) as usize);
            match parse(&bytes, Format::Pdf) {
                Ok(parsed) => check_invariants(&parsed),
                Err(ParseError::Pdf { reason }) => proptest::prop_assert!(!reason.is_empty()),
                Err(ParseError::NoTextLayer) => {}
                Err(other) => proptest::prop_assert!(false, "unexpected {other:?}"),
            }
        }
    }
}
