//! The formats kbq ingests, and which one an upload is in.
//!
//! The upload's content type decides when it names a format; a generic one
//! (`application/octet-stream`, or none) leaves the decision to the file name's extension.
//! `text/plain` is generic too when the extension names a richer text format: browsers and
//! many tools label every text file `text/plain`, and a `.md` file sent that way is still
//! Markdown. Both tables are public so that the API reference lists what the code accepts.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A document format kbq can parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// UTF-8 text; paragraphs are separated by blank lines.
    Text,
    /// CommonMark with tables, footnotes and front matter.
    Markdown,
    /// HTML; only the text a reader sees is kept.
    Html,
    /// PDF with a text layer (scans without one are refused: kbq does no OCR).
    Pdf,
    /// Word (Office Open XML) documents.
    Docx,
}

impl Format {
    /// The content type kbq names this format by.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain",
            Format::Markdown => "text/markdown",
            Format::Html => "text/html",
            Format::Pdf => "application/pdf",
            Format::Docx => DOCX_CONTENT_TYPE,
        }
    }

    /// The format's name as the API writes it (`"markdown"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Docx => "docx",
        }
    }

    /// Whether a document of this format is best parsed in a process of its own: the PDF and
    /// DOCX readers are large third-party parsers of binary input, where a crafted file may
    /// exhaust a thread's stack (which aborts the process) or its memory. The text formats'
    /// readers are kbq's own, bounded in depth.
    pub fn parsed_apart(self) -> bool {
        matches!(self, Format::Pdf | Format::Docx)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const DOCX_CONTENT_TYPE: &str =
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document";

/// Every content type kbq accepts (parameters such as `charset` aside), with its format.
pub const CONTENT_TYPES: &[(&str, Format)] = &[
    ("text/plain", Format::Text),
    ("text/markdown", Format::Markdown),
    ("text/x-markdown", Format::Markdown),
    ("text/html", Format::Html),
    ("application/xhtml+xml", Format::Html),
    ("application/pdf", Format::Pdf),
    (DOCX_CONTENT_TYPE, Format::Docx),
];

/// Every file name extension kbq accepts (without the dot, matched case-insensitively), with
/// its format.
pub const EXTENSIONS: &[(&str, Format)] = &[
    ("txt", Format::Text),
    ("text", Format::Text),
    ("md", Format::Markdown),
    ("markdown", Format::Markdown),
    ("html", Format::Html),
    ("htm", Format::Html),
    ("pdf", Format::Pdf),
    ("docx", Format::Docx),
];

/// The accepted content types alone, for the API reference and for error messages.
pub const ACCEPTED_CONTENT_TYPES: [&str; CONTENT_TYPES.len()] = first_of(CONTENT_TYPES);

/// The accepted extensions alone, for the API reference and for error messages.
pub const ACCEPTED_EXTENSIONS: [&str; EXTENSIONS.len()] = first_of(EXTENSIONS);

/// The content type that says nothing about the format.
const GENERIC_CONTENT_TYPE: &str = "application/octet-stream";

const fn first_of<const N: usize>(table: &[(&'static str, Format)]) -> [&'static str; N] {
    let mut names = [""; N];
    let mut i = 0;
    while i < N {
        names[i] = table[i].0;
        i += 1;
    }
    names
}

/// The upload is in no format kbq accepts. The HTTP edge answers 415 with this message, which
/// lists what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedFormat {
    /// The content type as sent, when one was sent.
    pub content_type: Option<String>,
    /// The file name's extension, when the name has one.
    pub extension: Option<String>,
}

impl fmt::Display for UnsupportedFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.content_type, &self.extension) {
            (Some(ct), Some(ext)) => write!(
                f,
                "unsupported content type {ct:?} (file extension {ext:?})"
            )?,
            (Some(ct), None) => write!(f, "unsupported content type {ct:?}")?,
            (None, Some(ext)) => write!(f, "unsupported file extension {ext:?}")?,
            (None, None) => f.write_str("no content type and no file extension to go by")?,
        }
        write!(
            f,
            "; accepted content types: {}; accepted extensions: {}",
            ACCEPTED_CONTENT_TYPES.join(", "),
            ACCEPTED_EXTENSIONS
                .iter()
                .map(|ext| format!(".{ext}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl std::error::Error for UnsupportedFormat {}

/// The format of an upload, from its content type and its file name (either may be absent).
///
/// A specific content type wins over the extension, and an unsupported one is refused even
/// when the extension is supported: the sender said what the bytes are. `text/plain` yields
/// to an extension of another text format (Markdown, HTML).
pub fn detect(
    content_type: Option<&str>,
    file_name: Option<&str>,
) -> Result<Format, UnsupportedFormat> {
    let media_type = content_type.map(media_type).filter(|m| !m.is_empty());
    let extension = file_name.and_then(extension);
    let by_extension = extension.as_deref().and_then(|ext| lookup(EXTENSIONS, ext));
    let by_content_type = match media_type.as_deref() {
        None | Some(GENERIC_CONTENT_TYPE) => None,
        Some(media) => match lookup(CONTENT_TYPES, media) {
            Some(Format::Text) => Some(match by_extension {
                Some(format @ (Format::Markdown | Format::Html)) => format,
                _ => Format::Text,
            }),
            Some(format) => Some(format),
            None => return Err(unsupported(content_type, extension)),
        },
    };
    by_content_type
        .or(by_extension)
        .ok_or_else(|| unsupported(content_type, extension))
}

fn unsupported(content_type: Option<&str>, extension: Option<String>) -> UnsupportedFormat {
    UnsupportedFormat {
        content_type: content_type.map(str::to_owned),
        extension,
    }
}

fn lookup(table: &[(&str, Format)], key: &str) -> Option<Format> {
    table
        .iter()
        .find(|(name, _)| *name == key)
        .map(|&(_, format)| format)
}

/// `Text/HTML; charset=utf-8` -> `text/html`.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The lowercased extension of the last path segment (`/` or `\`), if it has one; a leading
/// dot (`.md`) marks a hidden file, not an extension.
fn extension(file_name: &str) -> Option<String> {
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    let (stem, ext) = base.rsplit_once('.')?;
    (!stem.is_empty() && !ext.is_empty()).then(|| ext.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_name_their_format() {
        for &(content_type, format) in CONTENT_TYPES {
            assert_eq!(
                detect(Some(content_type), None),
                Ok(format),
                "{content_type}"
            );
        }
        assert_eq!(
            detect(Some("text/html; charset=utf-8"), None),
            Ok(Format::Html)
        );
        assert_eq!(
            detect(Some("  Text/Markdown ;charset=UTF-8"), None),
            Ok(Format::Markdown)
        );
        assert_eq!(detect(Some("APPLICATION/PDF"), None), Ok(Format::Pdf));
    }

    #[test]
    fn extensions_name_their_format() {
        for &(ext, format) in EXTENSIONS {
            let name = format!("notes.{ext}");
            assert_eq!(detect(None, Some(&name)), Ok(format), "{name}");
        }
        assert_eq!(detect(None, Some("dir.v2/README.MD")), Ok(Format::Markdown));
        assert_eq!(
            detect(None, Some(r"C:\docs\report.final.PDF")),
            Ok(Format::Pdf)
        );
        assert_eq!(detect(None, Some("archive.tar.html")), Ok(Format::Html));
    }

    #[test]
    fn a_specific_content_type_wins_over_the_extension() {
        assert_eq!(
            detect(Some("application/pdf"), Some("x.md")),
            Ok(Format::Pdf)
        );
        assert_eq!(detect(Some("text/html"), Some("x.txt")), Ok(Format::Html));
        assert_eq!(
            detect(Some("text/markdown"), Some("x.html")),
            Ok(Format::Markdown)
        );
    }

    #[test]
    fn a_generic_content_type_falls_back_to_the_extension() {
        assert_eq!(
            detect(Some("application/octet-stream"), Some("a.pdf")),
            Ok(Format::Pdf)
        );
        assert_eq!(detect(Some(""), Some("a.htm")), Ok(Format::Html));
        assert_eq!(
            detect(Some("application/octet-stream"), Some("a.docx")),
            Ok(Format::Docx)
        );
    }

    #[test]
    fn text_plain_yields_to_a_richer_text_extension_only() {
        assert_eq!(
            detect(Some("text/plain"), Some("a.md")),
            Ok(Format::Markdown)
        );
        assert_eq!(
            detect(Some("text/plain; charset=utf-8"), Some("a.html")),
            Ok(Format::Html)
        );
        assert_eq!(detect(Some("text/plain"), Some("a.pdf")), Ok(Format::Text));
        assert_eq!(detect(Some("text/plain"), Some("a.exe")), Ok(Format::Text));
        assert_eq!(detect(Some("text/plain"), None), Ok(Format::Text));
    }

    #[test]
    fn unsupported_uploads_list_what_is_accepted() {
        let err = detect(Some("image/png"), Some("a.md")).unwrap_err();
        assert_eq!(err.content_type.as_deref(), Some("image/png"));
        assert_eq!(err.extension.as_deref(), Some("md"));
        let message = err.to_string();
        for content_type in ACCEPTED_CONTENT_TYPES {
            assert!(message.contains(content_type), "{message}");
        }
        for ext in ACCEPTED_EXTENSIONS {
            assert!(message.contains(&format!(".{ext}")), "{message}");
        }

        let err = detect(Some("application/octet-stream"), Some("a.exe")).unwrap_err();
        assert!(
            err.to_string().starts_with("unsupported content type"),
            "{err}"
        );
        let err = detect(None, Some("photo.jpeg")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unsupported file extension \"jpeg\""),
            "{err}"
        );
        assert!(detect(None, None).is_err());
        // Neither a hidden file nor a name without a dot has an extension.
        assert_eq!(detect(None, Some(".md")).unwrap_err().extension, None);
        assert_eq!(detect(None, Some("README")).unwrap_err().extension, None);
        assert_eq!(
            detect(None, Some("dir.md/README")).unwrap_err().extension,
            None
        );
    }

    #[test]
    fn accepted_lists_follow_the_tables() {
        assert_eq!(ACCEPTED_CONTENT_TYPES.len(), CONTENT_TYPES.len());
        assert_eq!(ACCEPTED_CONTENT_TYPES[0], "text/plain");
        assert_eq!(ACCEPTED_EXTENSIONS[ACCEPTED_EXTENSIONS.len() - 1], "docx");
        for format in [
            Format::Text,
            Format::Markdown,
            Format::Html,
            Format::Pdf,
            Format::Docx,
        ] {
            assert_eq!(lookup(CONTENT_TYPES, format.content_type()), Some(format));
            assert_eq!(
                serde_json::to_value(format).unwrap(),
                serde_json::Value::from(format.name())
            );
        }
    }
}
