//! Word documents (Office Open XML): the paragraphs of `word/document.xml`, with headings
//! known by their paragraph style, and the title from `docProps/core.xml`.
//!
//! Heading styles are found by the style's name in `word/styles.xml` ("heading 1", ...),
//! not by its id: Word writes localised ids ("berschrift1" in German) but English names
//! for built-in styles. Footnotes, comments, headers and footers live in other parts and
//! are not read; neither is deleted text of tracked changes.

use std::collections::HashMap;
use std::io::{Cursor, Read};

use quick_xml::Reader;
use quick_xml::events::{BytesRef, BytesStart, Event};

use super::{Builder, ParseError, Parsed};

// The parts read: the body, the style definitions, the core properties (title, author).
const DOCUMENT: &str = "word/document.xml";
const STYLES: &str = "word/styles.xml";
const CORE: &str = "docProps/core.xml";

/// The most a single XML part may hold once inflated: a few kilobytes of ZIP can inflate to
/// gigabytes, and the upload limit bounds only the compressed size.
const MAX_PART_BYTES: u64 = 64 * 1024 * 1024;

/// The level [`Builder::start_heading`] gets for a paragraph in the Title style: above
/// every heading, so that chapters nest under it.
const TITLE_LEVEL: u8 = 0;

pub(super) fn parse(bytes: &[u8]) -> Result<Parsed, ParseError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|err| ParseError::Docx {
        reason: format!("not a ZIP archive: {err}"),
    })?;
    let document = read_part(&mut archive, DOCUMENT)?.ok_or_else(|| ParseError::Docx {
        reason: format!("the archive has no {DOCUMENT}"),
    })?;
    let styles = match read_part(&mut archive, STYLES)? {
        Some(xml) => heading_styles(&xml)?,
        None => HashMap::new(),
    };
    let mut b = Builder::default();
    if let Some(core) = read_part(&mut archive, CORE)?
        && let Some(title) = core_title(&core)?
    {
        b.declare_title(&title);
    }
    body(&mut b, &document, &styles)?;
    Ok(b.finish())
}

fn read_part(
    archive: &mut zip::ZipArchive<Cursor<&[u8]>>,
    name: &str,
) -> Result<Option<String>, ParseError> {
    let file = match archive.by_name(name) {
        Ok(file) => file,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(err) => return Err(docx_error(name, err)),
    };
    let mut xml = String::new();
    file.take(MAX_PART_BYTES + 1)
        .read_to_string(&mut xml)
        .map_err(|err| docx_error(name, err))?;
    if xml.len() as u64 > MAX_PART_BYTES {
        return Err(docx_error(
            name,
            format!("larger than {MAX_PART_BYTES} bytes inflated"),
        ));
    }
    Ok(Some(xml))
}

fn docx_error(part: &str, err: impl std::fmt::Display) -> ParseError {
    ParseError::Docx {
        reason: format!("{part}: {err}"),
    }
}

fn xml_error(part: &'static str) -> impl Fn(quick_xml::Error) -> ParseError {
    move |err| docx_error(part, err)
}

/// The value of an element's `w:val` (any prefix) attribute.
fn val(element: &BytesStart<'_>) -> Option<String> {
    attribute(element, b"val")
}

/// The value of an element's attribute of this local name, whatever its prefix.
fn attribute(element: &BytesStart<'_>, local_name: &[u8]) -> Option<String> {
    element
        .attributes()
        .flatten()
        .find(|attr| attr.key.local_name().as_ref() == local_name)
        .and_then(|attr| attr.unescape_value().ok())
        .map(|value| value.into_owned())
}

/// The heading level of each paragraph style that is a heading, by style id.
fn heading_styles(xml: &str) -> Result<HashMap<String, u8>, ParseError> {
    let mut levels = HashMap::new();
    let mut reader = Reader::from_str(xml);
    let mut style: Option<(String, Option<u8>)> = None;
    loop {
        match reader.read_event().map_err(xml_error(STYLES))? {
            Event::Start(e) | Event::Empty(e) => match e.local_name().as_ref() {
                b"style" => {
                    style = attribute(&e, b"styleId").map(|id| (id, None));
                }
                b"name" => {
                    if let (Some((_, level)), Some(name)) = (style.as_mut(), val(&e)) {
                        *level = level.or(level_of_style_name(&name));
                    }
                }
                b"outlineLvl" => {
                    if let (Some((_, level)), Some(outline)) = (style.as_mut(), val(&e)) {
                        *level = level.or(level_of_outline(&outline));
                    }
                }
                _ => {}
            },
            Event::End(e) if e.local_name().as_ref() == b"style" => {
                if let Some((id, Some(level))) = style.take() {
                    levels.insert(id, level);
                }
            }
            Event::Eof => return Ok(levels),
            _ => {}
        }
    }
}

/// "heading 2" -> 2, "Title" -> the title level.
fn level_of_style_name(name: &str) -> Option<u8> {
    let name = name.trim().to_ascii_lowercase();
    if name == "title" {
        return Some(TITLE_LEVEL);
    }
    let level: u8 = name.strip_prefix("heading")?.trim().parse().ok()?;
    (1..=9).contains(&level).then_some(level)
}

/// `w:outlineLvl` counts from 0; 9 means body text.
fn level_of_outline(outline: &str) -> Option<u8> {
    let level: u8 = outline.trim().parse().ok()?;
    (level < 9).then_some(level + 1)
}

/// A style id that names its level without a styles part: "Heading2", "Title".
fn level_of_style_id(id: &str) -> Option<u8> {
    level_of_style_name(&id.replace("Heading", "heading "))
}

/// `dc:title` of the core properties.
fn core_title(xml: &str) -> Result<Option<String>, ParseError> {
    let mut reader = Reader::from_str(xml);
    let mut in_title = false;
    let mut title = String::new();
    loop {
        match reader.read_event().map_err(xml_error(CORE))? {
            Event::Start(e) if e.local_name().as_ref() == b"title" => in_title = true,
            Event::End(e) if e.local_name().as_ref() == b"title" => in_title = false,
            Event::Text(text) if in_title => {
                title.push_str(&text.decode().map_err(|err| docx_error(CORE, err))?)
            }
            Event::GeneralRef(reference) if in_title => {
                title.push_str(&resolve_reference(&reference, CORE)?)
            }
            Event::Eof => return Ok(Some(title).filter(|t| !t.trim().is_empty())),
            _ => {}
        }
    }
}

/// The text of `&name;` or `&#n;`; entities XML does not predefine have none (a Word part
/// declares no others).
fn resolve_reference(reference: &BytesRef<'_>, part: &'static str) -> Result<String, ParseError> {
    if let Some(c) = reference.resolve_char_ref().map_err(xml_error(part))? {
        return Ok(c.to_string());
    }
    let name = reference.decode().map_err(|err| docx_error(part, err))?;
    Ok(quick_xml::escape::resolve_predefined_entity(&name)
        .unwrap_or_default()
        .to_owned())
}

/// Paragraph state while reading `word/document.xml`.
#[derive(Default)]
struct Paragraph {
    /// The heading level its properties give, once they have been read.
    level: Option<u8>,
    heading_open: bool,
}

fn body(b: &mut Builder, xml: &str, styles: &HashMap<String, u8>) -> Result<(), ParseError> {
    let mut reader = Reader::from_str(xml);
    // Paragraphs nest (a text box's paragraphs sit inside the anchoring paragraph); only an
    // outermost paragraph may be a heading.
    let mut paragraphs: Vec<Paragraph> = Vec::new();
    let mut in_properties = false;
    let mut in_run = false;
    let mut in_text = false;
    // `mc:Fallback` repeats what its `mc:Choice` says for older readers; read it once.
    let mut fallback_depth = 0usize;
    loop {
        let event = reader.read_event().map_err(xml_error(DOCUMENT))?;
        if fallback_depth > 0 {
            match event {
                Event::Start(e) if e.local_name().as_ref() == b"Fallback" => fallback_depth += 1,
                Event::End(e) if e.local_name().as_ref() == b"Fallback" => fallback_depth -= 1,
                Event::Eof => return Ok(()),
                _ => {}
            }
            continue;
        }
        match event {
            Event::Start(e) => match e.local_name().as_ref() {
                b"p" => {
                    b.paragraph_break();
                    paragraphs.push(Paragraph::default());
                }
                b"pPr" => in_properties = true,
                b"r" => in_run = true,
                b"t" => in_text = true,
                b"Fallback" => fallback_depth = 1,
                _ => {}
            },
            Event::Empty(e) => match e.local_name().as_ref() {
                b"p" => b.paragraph_break(),
                b"pStyle" if in_properties && paragraphs.len() == 1 => {
                    if let (Some(paragraph), Some(id)) = (paragraphs.last_mut(), val(&e)) {
                        let level = styles.get(&id).copied().or_else(|| level_of_style_id(&id));
                        paragraph.level = paragraph.level.or(level);
                    }
                }
                b"outlineLvl" if in_properties && paragraphs.len() == 1 => {
                    if let (Some(paragraph), Some(outline)) = (paragraphs.last_mut(), val(&e)) {
                        paragraph.level = level_of_outline(&outline).or(paragraph.level);
                    }
                }
                b"tab" if in_run => b.space(),
                b"br" | b"cr" if in_run => {
                    if attribute(&e, b"type").as_deref() == Some("page") {
                        b.paragraph_break();
                    } else {
                        b.line_break();
                    }
                }
                b"noBreakHyphen" if in_run => b.text("-"),
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                b"p" => {
                    if paragraphs.pop().is_some_and(|p| p.heading_open) {
                        b.end_heading();
                    }
                    b.paragraph_break();
                }
                b"pPr" => {
                    in_properties = false;
                    if paragraphs.len() == 1
                        && let Some(paragraph) = paragraphs.last_mut()
                        && let Some(level) = paragraph.level
                    {
                        b.start_heading(level);
                        paragraph.heading_open = true;
                    }
                }
                b"r" => in_run = false,
                b"t" => in_text = false,
                _ => {}
            },
            Event::Text(text) if in_text => {
                b.text(&text.decode().map_err(|err| docx_error(DOCUMENT, err))?)
            }
            Event::CData(text) if in_text => {
                b.text(&text.decode().map_err(|err| docx_error(DOCUMENT, err))?)
            }
            Event::GeneralRef(reference) if in_text => {
                b.text(&resolve_reference(&reference, DOCUMENT)?)
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Write};

    use zip::write::SimpleFileOptions;

    use crate::format::Format;
    use crate::parse::tests::{check_invariants, sections};
    use crate::parse::{ParseError, parse};

    fn docx(parts: &[(&str, &str)]) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, content) in parts {
            zip.start_file(*name, SimpleFileOptions::default()).unwrap();
            zip.write_all(content.as_bytes()).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    const W: &str = r#"xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006""#;

    fn paragraph(style: Option<&str>, runs: &str) -> String {
        let properties = style
            .map(|s| format!(r#"<w:pPr><w:pStyle w:val="{s}"/><w:spacing w:after="0"/></w:pPr>"#))
            .unwrap_or_default();
        format!("<w:p>{properties}{runs}</w:p>")
    }

    fn document(paragraphs: &[String]) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {W}><w:body>{}<w:sectPr/></w:body></w:document>"#,
            paragraphs.concat()
        )
    }

    const STYLES: &str = r#"<?xml version="1.0"?>
<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
  <w:style w:type="paragraph" w:styleId="Standard"><w:name w:val="Normal"/></w:style>
  <w:style w:type="paragraph" w:styleId="Titel"><w:name w:val="Title"/></w:style>
  <w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/>
    <w:pPr><w:outlineLvl w:val="0"/></w:pPr></w:style>
  <w:style w:type="paragraph" w:styleId="berschrift2"><w:name w:val="heading 2"/></w:style>
  <w:style w:type="paragraph" w:styleId="Custom"><w:name w:val="My Section"/>
    <w:pPr><w:outlineLvl w:val="2"/></w:pPr></w:style>
</w:styles>"#;

    #[test]
    fn paragraphs_headings_and_the_title() {
        let body = document(&[
            paragraph(Some("Titel"), "<w:r><w:t>Engine Report</w:t></w:r>"),
            paragraph(
                Some("Standard"),
                r#"<w:r><w:t xml:space="preserve">Hel</w:t></w:r><w:r><w:rPr><w:b/></w:rPr><w:t>lo, </w:t></w:r><w:r><w:t>Ada &amp; Charles</w:t><w:tab/><w:t>tabbed</w:t><w:br/><w:t>next line</w:t></w:r>"#,
            ),
            paragraph(Some("berschrift1"), "<w:r><w:t>History</w:t></w:r>"),
            paragraph(None, "<w:r><w:t>Designed in 1837.</w:t></w:r><w:r><w:delText>removed</w:delText></w:r>"),
            paragraph(Some("berschrift2"), "<w:r><w:t>Details</w:t></w:r>"),
            r#"<w:tbl><w:tr><w:tc><w:p><w:r><w:t>Cell A</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>Cell B</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"#.to_owned(),
            paragraph(Some("Custom"), "<w:r><w:t>Deeper</w:t></w:r>"),
            paragraph(
                None,
                r#"<w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:t>boxed</w:t></mc:Choice><mc:Fallback><w:t>boxed again</w:t></mc:Fallback></mc:AlternateContent></w:r>"#,
            ),
            paragraph(Some("Heading1"), "<w:r><w:t>By id</w:t></w:r>"),
        ]);
        let bytes = docx(&[("word/document.xml", &body), ("word/styles.xml", STYLES)]);
        let parsed = parse(&bytes, Format::Docx).unwrap();
        check_invariants(&parsed);
        assert_eq!(parsed.title.as_deref(), Some("Engine Report"));
        assert_eq!(
            sections(&parsed),
            [
                (
                    vec!["Engine Report"],
                    "Engine Report\n\nHello, Ada & Charles tabbed\nnext line"
                ),
                (
                    vec!["Engine Report", "History"],
                    "History\n\nDesigned in 1837."
                ),
                (
                    vec!["Engine Report", "History", "Details"],
                    "Details\n\nCell A\n\nCell B"
                ),
                (
                    vec!["Engine Report", "History", "Details", "Deeper"],
                    "Deeper\n\nboxed"
                ),
                (vec!["Engine Report", "By id"], "By id"),
            ]
        );
    }

    #[test]
    fn core_properties_give_the_title() {
        let body = document(&[paragraph(None, "<w:r><w:t>Body text.</w:t></w:r>")]);
        let core = r#"<cp:coreProperties xmlns:cp="x" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Minutes &#8212; May</dc:title></cp:coreProperties>"#;
        let bytes = docx(&[("word/document.xml", &body), ("docProps/core.xml", core)]);
        let parsed = parse(&bytes, Format::Docx).unwrap();
        assert_eq!(parsed.title.as_deref(), Some("Minutes \u{2014} May"));
        assert_eq!(parsed.text, "Body text.");
    }

    #[test]
    fn broken_files_fail_with_a_reason() {
        let err = parse(b"PK\x03\x04 not really", Format::Docx).unwrap_err();
        assert!(
            matches!(&err, ParseError::Docx { reason } if reason.contains("ZIP")),
            "{err}"
        );
        let bytes = docx(&[("word/other.xml", "<x/>")]);
        let err = parse(&bytes, Format::Docx).unwrap_err();
        assert!(err.to_string().contains("no word/document.xml"), "{err}");
        let bytes = docx(&[("word/document.xml", "<w:document><w:body><w:p></w:body>")]);
        let err = parse(&bytes, Format::Docx).unwrap_err();
        assert!(err.to_string().contains("word/document.xml"), "{err}");
        let bytes = docx(&[("word/document.xml", &document(&[]))]);
        assert_eq!(parse(&bytes, Format::Docx), Err(ParseError::Empty));
    }
}
