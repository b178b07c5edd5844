//! Bytes in a [`Format`] to [`Parsed`]: the document's plain text, normalised, and the
//! sections its headings make of it.
//!
//! Every format reader feeds one `Builder`, so every format comes out normalised the same
//! way: runs of spaces and tabs become one space, a paragraph break is `"\n\n"`, a line break
//! inside a block (a list item, a table row, a line of code) is `"\n"`, and the text neither
//! starts nor ends with whitespace. Control characters and byte order marks are dropped.
//! Offsets into [`Parsed::text`] are bytes, and always fall on character boundaries.

mod docx;
mod html;
mod markdown;
mod pdf;

use serde::{Deserialize, Serialize};

use crate::format::Format;

/// A parsed document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parsed {
    /// The document's own title (HTML `<title>`, Markdown front matter `title:`, PDF and DOCX
    /// metadata), else its first top-level heading, else none.
    pub title: Option<String>,
    /// The normalised plain text of the whole document.
    pub text: String,
    /// The text under each heading, in order. Sections do not overlap, and together they hold
    /// every non-whitespace character of `text`; what lies between two sections is whitespace.
    pub sections: Vec<Section>,
}

/// A byte range of [`Parsed::text`] and the headings it sits under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// The headings from the outermost in, e.g. `["Install", "On Debian"]`; empty for text
    /// before the first heading and for documents without headings. A section starts with its
    /// own heading's text.
    pub heading_path: Vec<String>,
    /// The first byte of the section in `text`.
    pub start: usize,
    /// One past the last byte of the section in `text`.
    pub end: usize,
}

/// Why a document could not be parsed. Every message names the problem in terms its sender
/// can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Text formats must be UTF-8; guessing a legacy encoding would put wrong characters, and
    /// so wrong names, into the graph.
    #[error("the document is not valid UTF-8: invalid byte at offset {offset}")]
    InvalidUtf8 {
        /// The offset of the first byte that is not UTF-8.
        offset: usize,
    },
    /// The PDF could not be read (malformed, truncated, encrypted, or beyond what the PDF
    /// reader understands).
    #[error("the PDF could not be read: {reason}")]
    Pdf {
        /// What the PDF reader reported.
        reason: String,
    },
    /// The PDF has pages but no text on them: a scan, which would need OCR.
    #[error("the PDF has no text layer (scanned pages need OCR, which kbq does not do)")]
    NoTextLayer,
    /// The DOCX file could not be read.
    #[error("the DOCX file could not be read: {reason}")]
    Docx {
        /// What went wrong.
        reason: String,
    },
    /// The document was read but holds no text.
    #[error("the document has no text")]
    Empty,
}

/// What a parser process (`kbq parse-document`) writes on its standard output: one JSON
/// object, the document parsed or the reason it could not be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParseAnswer {
    /// The document, parsed.
    Parsed(Parsed),
    /// Why it could not be parsed ([`ParseError`]'s message).
    Failed(String),
}

impl From<Result<Parsed, ParseError>> for ParseAnswer {
    fn from(result: Result<Parsed, ParseError>) -> Self {
        match result {
            Ok(parsed) => ParseAnswer::Parsed(parsed),
            Err(e) => ParseAnswer::Failed(e.to_string()),
        }
    }
}

/// Parses a document. PDF and DOCX parsing can take a while on large files: call this from
/// a thread that may block.
pub fn parse(bytes: &[u8], format: Format) -> Result<Parsed, ParseError> {
    let parsed = match format {
        Format::Text => {
            let mut builder = Builder::default();
            builder.preformatted(utf8(bytes)?);
            builder.finish()
        }
        Format::Markdown => markdown::parse(utf8(bytes)?),
        Format::Html => html::parse(utf8(bytes)?),
        Format::Pdf => pdf::parse(bytes)?,
        Format::Docx => docx::parse(bytes)?,
    };
    if parsed.text.is_empty() {
        return Err(match format {
            Format::Pdf => ParseError::NoTextLayer,
            _ => ParseError::Empty,
        });
    }
    Ok(parsed)
}

/// The text of a text format, without its byte order mark.
fn utf8(bytes: &[u8]) -> Result<&str, ParseError> {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let (skipped, body) = match bytes.strip_prefix(BOM) {
        Some(body) => (BOM.len(), body),
        None => (0, bytes),
    };
    std::str::from_utf8(body).map_err(|err| ParseError::InvalidUtf8 {
        // Counted from the first byte sent, BOM included, so the sender can find it.
        offset: skipped + err.valid_up_to(),
    })
}

/// The separator owed before the next character: the strongest one asked for since the
/// last character was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
enum Break {
    #[default]
    None,
    Space,
    Line,
    Paragraph,
}

/// Writes normalised text and its sections. Separators are owed rather than written, so
/// that runs of them collapse into the strongest and none is left at either end.
#[derive(Debug, Default)]
struct Builder {
    text: String,
    sections: Vec<Section>,
    owed: Break,
    /// The open headings, outermost first, with their levels.
    headings: Vec<(u8, String)>,
    /// Where the current section starts, once it has a character.
    section_start: Option<usize>,
    /// The heading being read: its level and its text so far.
    heading: Option<(u8, String)>,
    /// A title the document declares; the first level-1 heading otherwise.
    title: Option<String>,
    /// The first heading of level 1 (or 0).
    first_h1: Option<String>,
}

impl Builder {
    /// Inline text: every whitespace character is a space.
    fn text(&mut self, s: &str) {
        for c in s.chars() {
            if c.is_whitespace() {
                self.owe(Break::Space);
            } else {
                self.push(c);
            }
        }
    }

    /// Text whose line breaks count: one newline is a line break, a blank line (or a form
    /// feed, which PDF text uses between pages) a paragraph break.
    fn preformatted(&mut self, s: &str) {
        let mut newlines = 0;
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' if chars.peek() == Some(&'\n') => {}
                '\n' | '\r' => newlines += 1,
                '\u{c}' => newlines += 2,
                c if c.is_whitespace() => self.owe(Break::Space),
                c => {
                    self.owe_newlines(newlines);
                    newlines = 0;
                    self.push(c);
                }
            }
        }
        self.owe_newlines(newlines);
    }

    fn owe_newlines(&mut self, newlines: usize) {
        match newlines {
            0 => {}
            1 => self.owe(Break::Line),
            _ => self.owe(Break::Paragraph),
        }
    }

    fn space(&mut self) {
        self.owe(Break::Space);
    }

    fn line_break(&mut self) {
        self.owe(Break::Line);
    }

    fn paragraph_break(&mut self) {
        self.owe(Break::Paragraph);
    }

    fn owe(&mut self, brk: Break) {
        // A heading is one line, whatever its markup says.
        let brk = if self.heading.is_some() {
            brk.min(Break::Space)
        } else {
            brk
        };
        self.owed = self.owed.max(brk);
    }

    fn push(&mut self, c: char) {
        if c.is_control() || c == '\u{feff}' {
            return;
        }
        if let Some((_, heading)) = &self.heading
            && heading.is_empty()
        {
            // The heading's first character opens its section.
            self.owed = Break::Paragraph;
            self.close_section();
        }
        if let Some((_, heading)) = &mut self.heading {
            if !heading.is_empty() && self.owed > Break::None {
                heading.push(' ');
            }
            heading.push(c);
        }
        if !self.text.is_empty() {
            self.text.push_str(match self.owed {
                Break::None => "",
                Break::Space => " ",
                Break::Line => "\n",
                Break::Paragraph => "\n\n",
            });
        }
        self.owed = Break::None;
        if self.section_start.is_none() {
            self.section_start = Some(self.text.len());
        }
        self.text.push(c);
    }

    /// Starts reading a heading of `level`: 1 to 6 (or 9) as in HTML, and 0 for a paragraph
    /// that titles the whole document (DOCX's Title style). Its text, once it has some,
    /// starts a new section.
    fn start_heading(&mut self, level: u8) {
        self.paragraph_break();
        self.heading = Some((level, String::new()));
    }

    fn end_heading(&mut self) {
        let Some((level, heading)) = self.heading.take() else {
            return;
        };
        if heading.is_empty() {
            // An empty heading names nothing and opened no section.
            return;
        }
        if level <= 1 && self.first_h1.is_none() {
            self.first_h1 = Some(heading.clone());
        }
        while self.headings.last().is_some_and(|(open, _)| *open >= level) {
            self.headings.pop();
        }
        self.headings.push((level, heading));
        self.paragraph_break();
    }

    /// The title the document declares about itself, if it is not blank.
    fn declare_title(&mut self, title: &str) {
        let title = collapse_whitespace(title);
        if self.title.is_none() && !title.is_empty() {
            self.title = Some(title);
        }
    }

    fn close_section(&mut self) {
        if let Some(start) = self.section_start.take() {
            self.sections.push(Section {
                heading_path: self.current_path(),
                start,
                end: self.text.len(),
            });
        }
    }

    fn current_path(&self) -> Vec<String> {
        self.headings.iter().map(|(_, name)| name.clone()).collect()
    }

    fn finish(mut self) -> Parsed {
        self.end_heading();
        self.close_section();
        Parsed {
            title: self.title.or(self.first_h1),
            text: self.text,
            sections: self.sections,
        }
    }
}

/// `s` with every run of whitespace made one space, and trimmed.
pub(crate) fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The invariants every parsed document keeps, whatever its format.
    pub(crate) fn check_invariants(parsed: &Parsed) {
        let text = &parsed.text;
        assert_eq!(text.trim(), text, "text is trimmed");
        assert!(!text.contains("\n\n\n"), "at most one blank line: {text:?}");
        assert!(!text.contains("  "), "no double spaces: {text:?}");
        assert!(
            !text.contains(" \n") && !text.contains("\n "),
            "no space at line ends: {text:?}"
        );
        let mut covered = 0;
        for section in &parsed.sections {
            assert!(section.start < section.end, "{section:?} is not empty");
            assert!(
                covered <= section.start,
                "{section:?} starts after the one before"
            );
            let slice = &text[section.start..section.end];
            assert_eq!(slice.trim(), slice, "{section:?} is trimmed");
            assert!(
                text[covered..section.start].trim().is_empty(),
                "gap before {section:?}"
            );
            covered = section.end;
        }
        assert!(
            text[covered..].trim().is_empty(),
            "text after the last section"
        );
        if parsed.sections.is_empty() {
            assert!(text.is_empty());
        }
    }

    /// Each section's heading path and text.
    pub(crate) fn sections(parsed: &Parsed) -> Vec<(Vec<&str>, &str)> {
        parsed
            .sections
            .iter()
            .map(|s| {
                (
                    s.heading_path.iter().map(String::as_str).collect(),
                    &parsed.text[s.start..s.end],
                )
            })
            .collect()
    }

    fn text(s: &str) -> Parsed {
        let parsed = parse(s.as_bytes(), Format::Text).unwrap();
        check_invariants(&parsed);
        parsed
    }

    #[test]
    fn plain_text_keeps_paragraphs_and_lines_and_collapses_spaces() {
        let parsed = text("  First   paragraph,\tstill\r\nfirst.\n \n\n\nSecond\u{a0}one.  \n");
        assert_eq!(parsed.text, "First paragraph, still\nfirst.\n\nSecond one.");
        assert_eq!(parsed.title, None);
        assert_eq!(sections(&parsed), [(vec![], parsed.text.as_str())]);
    }

    #[test]
    fn plain_text_is_not_read_as_markdown() {
        let parsed = text("# Not a heading\n\n* not a list");
        assert_eq!(parsed.text, "# Not a heading\n\n* not a list");
        assert_eq!(parsed.sections.len(), 1);
        assert!(parsed.sections[0].heading_path.is_empty());
    }

    #[test]
    fn byte_order_marks_and_control_characters_are_dropped() {
        let parsed = text("\u{feff}Caf\u{e9}\u{0}\u{7} au lait\u{feff}\u{c}page two");
        assert_eq!(parsed.text, "Caf\u{e9} au lait\n\npage two");
    }

    #[test]
    fn invalid_utf8_names_the_offset() {
        let err = parse(b"valid \xff\xfe then not", Format::Text).unwrap_err();
        assert_eq!(err, ParseError::InvalidUtf8 { offset: 6 });
        assert!(err.to_string().contains("offset 6"), "{err}");
        // With a BOM the offset still counts from the first byte sent.
        let err = parse(b"\xEF\xBB\xBFab\xc3", Format::Markdown).unwrap_err();
        assert_eq!(err, ParseError::InvalidUtf8 { offset: 5 });
    }

    #[test]
    fn a_document_without_text_is_an_error() {
        assert_eq!(parse(b" \n\t\n", Format::Text), Err(ParseError::Empty));
        assert_eq!(parse(b"", Format::Markdown), Err(ParseError::Empty));
        assert_eq!(parse(b"<p> </p>", Format::Html), Err(ParseError::Empty));
    }

    #[test]
    fn headings_nest_by_level_and_start_sections() {
        let mut b = Builder::default();
        b.text("Intro");
        for (level, name, body) in [
            (1, "Guide", "welcome"),
            (2, "Install", "steps"),
            (3, "On Debian", "apt"),
            (2, "Use", "run it"),
            (4, "Deep", "skipped a level"),
            (1, "Appendix", "more"),
        ] {
            b.start_heading(level);
            b.text(name);
            b.end_heading();
            b.text(body);
        }
        let parsed = b.finish();
        check_invariants(&parsed);
        assert_eq!(parsed.title.as_deref(), Some("Guide"));
        assert_eq!(
            sections(&parsed),
            [
                (vec![], "Intro"),
                (vec!["Guide"], "Guide\n\nwelcome"),
                (vec!["Guide", "Install"], "Install\n\nsteps"),
                (vec!["Guide", "Install", "On Debian"], "On Debian\n\napt"),
                (vec!["Guide", "Use"], "Use\n\nrun it"),
                (vec!["Guide", "Use", "Deep"], "Deep\n\nskipped a level"),
                (vec!["Appendix"], "Appendix\n\nmore"),
            ]
        );
    }

    #[test]
    fn an_empty_heading_opens_no_section_and_a_heading_is_one_line() {
        let mut b = Builder::default();
        b.text("before");
        b.start_heading(2);
        b.text("  ");
        b.end_heading();
        b.text("after");
        b.start_heading(2);
        b.text("Two");
        b.line_break();
        b.text("lines");
        b.end_heading();
        let parsed = b.finish();
        check_invariants(&parsed);
        assert_eq!(
            sections(&parsed),
            [
                (vec![], "before\n\nafter"),
                (vec!["Two lines"], "Two lines")
            ]
        );
        assert_eq!(parsed.title, None);
    }

    #[test]
    fn a_declared_title_wins_over_the_first_h1() {
        let mut b = Builder::default();
        b.start_heading(1);
        b.text("Heading");
        b.end_heading();
        b.declare_title("  Declared \n title ");
        assert_eq!(b.finish().title.as_deref(), Some("Declared title"));
    }

    /// Text made of markup fragments of every text format, so that generated documents hit
    /// headings, lists, code, tables and broken tags.
    fn markup() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            "[a-zA-Zé漢 ]{1,12}",
            Just("\n".to_owned()),
            Just("\n\n".to_owned()),
            Just("# ".to_owned()),
            Just("\n## ".to_owned()),
            Just("- ".to_owned()),
            Just("```\n".to_owned()),
            Just("| a | b |\n|---|---|\n".to_owned()),
            Just("<h2>".to_owned()),
            Just("</h2>".to_owned()),
            Just("<p>".to_owned()),
            Just("<script>x</script>".to_owned()),
            Just("<pre>".to_owned()),
            Just("<br>".to_owned()),
            Just("<title>T</title>".to_owned()),
            Just("&amp;".to_owned()),
            Just("\t\u{a0}\u{feff}\r".to_owned()),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    proptest::proptest! {
        #[test]
        fn every_text_format_keeps_the_invariants(source in markup()) {
            for format in [Format::Text, Format::Markdown, Format::Html] {
                match parse(source.as_bytes(), format) {
                    Ok(parsed) => check_invariants(&parsed),
                    Err(err) => proptest::prop_assert_eq!(err, ParseError::Empty),
                }
            }
        }
    }
}
