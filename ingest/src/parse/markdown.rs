//! Markdown (CommonMark with tables, footnotes, task lists and front matter) through
//! `pulldown-cmark`'s event stream.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::{Builder, Parsed, html};

pub(super) fn parse(source: &str) -> Parsed {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
        | Options::ENABLE_PLUSES_DELIMITED_METADATA_BLOCKS;
    let mut b = Builder::default();
    // Raw HTML blocks and front matter arrive in pieces; they are read once whole.
    let mut html_block: Option<String> = None;
    let mut front_matter: Option<String> = None;
    let mut in_code_block = false;
    // A list inside a list item starts on the item's next line; an outermost list is a block.
    let mut list_depth = 0usize;
    for event in Parser::new_ext(source, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Heading { level, .. } => b.start_heading(level as u8),
                Tag::CodeBlock(_) => {
                    b.paragraph_break();
                    in_code_block = true;
                }
                Tag::HtmlBlock => html_block = Some(String::new()),
                Tag::MetadataBlock(_) => front_matter = Some(String::new()),
                Tag::List(_) => {
                    list_depth += 1;
                    if list_depth == 1 {
                        b.paragraph_break();
                    } else {
                        b.line_break();
                    }
                }
                Tag::Item | Tag::TableRow | Tag::TableHead => b.line_break(),
                Tag::TableCell => b.space(),
                Tag::Paragraph
                | Tag::BlockQuote(_)
                | Tag::FootnoteDefinition(_)
                | Tag::Table(_)
                | Tag::DefinitionList
                | Tag::DefinitionListTitle
                | Tag::DefinitionListDefinition => b.paragraph_break(),
                Tag::Emphasis
                | Tag::Strong
                | Tag::Strikethrough
                | Tag::Superscript
                | Tag::Subscript
                | Tag::Link { .. }
                | Tag::Image { .. } => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Heading(_) => b.end_heading(),
                TagEnd::CodeBlock => {
                    in_code_block = false;
                    b.paragraph_break();
                }
                TagEnd::HtmlBlock => {
                    if let Some(fragment) = html_block.take() {
                        b.paragraph_break();
                        html::fragment(&mut b, &fragment);
                        b.paragraph_break();
                    }
                }
                TagEnd::MetadataBlock(_) => {
                    if let Some(title) = front_matter.take().as_deref().and_then(front_matter_title)
                    {
                        b.declare_title(&title);
                    }
                }
                TagEnd::List(_) => {
                    list_depth = list_depth.saturating_sub(1);
                    if list_depth == 0 {
                        b.paragraph_break();
                    } else {
                        b.line_break();
                    }
                }
                TagEnd::Item | TagEnd::TableRow | TagEnd::TableHead => b.line_break(),
                TagEnd::TableCell => b.space(),
                TagEnd::Paragraph
                | TagEnd::BlockQuote(_)
                | TagEnd::FootnoteDefinition
                | TagEnd::Table
                | TagEnd::DefinitionList
                | TagEnd::DefinitionListTitle
                | TagEnd::DefinitionListDefinition => b.paragraph_break(),
                TagEnd::Emphasis
                | TagEnd::Strong
                | TagEnd::Strikethrough
                | TagEnd::Superscript
                | TagEnd::Subscript
                | TagEnd::Link
                | TagEnd::Image => {}
            },
            Event::Text(text) => {
                if let Some(buffer) = front_matter.as_mut() {
                    buffer.push_str(&text);
                } else if in_code_block {
                    b.preformatted(&text);
                } else {
                    b.text(&text);
                }
            }
            Event::Code(text) | Event::InlineMath(text) | Event::DisplayMath(text) => b.text(&text),
            Event::Html(markup) => match html_block.as_mut() {
                Some(buffer) => buffer.push_str(&markup),
                None => html::fragment(&mut b, &markup),
            },
            Event::InlineHtml(markup) => {
                if is_line_break_tag(&markup) {
                    b.line_break();
                }
            }
            Event::SoftBreak => b.space(),
            Event::HardBreak => b.line_break(),
            Event::Rule => b.paragraph_break(),
            Event::FootnoteReference(_) | Event::TaskListMarker(_) => {}
        }
    }
    b.finish()
}

/// `<br>`, `<br/>`, `<BR />`: the inline tags that break a line. Other inline HTML (an
/// opening `<kbd>`, say) carries no text of its own.
fn is_line_break_tag(markup: &str) -> bool {
    let tag = markup
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim_end_matches('/');
    tag.trim().eq_ignore_ascii_case("br")
}

/// The `title:` of YAML (or TOML, `title =`) front matter, unquoted.
fn front_matter_title(front_matter: &str) -> Option<String> {
    front_matter.lines().find_map(|line| {
        let rest = line.strip_prefix("title")?.trim_start();
        let value = rest
            .strip_prefix(':')
            .or_else(|| rest.strip_prefix('='))?
            .trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        (!unquoted.trim().is_empty()).then(|| unquoted.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use crate::format::Format;
    use crate::parse::tests::{check_invariants, sections};
    use crate::parse::{Parsed, parse};

    fn md(source: &str) -> Parsed {
        let parsed = parse(source.as_bytes(), Format::Markdown).unwrap();
        check_invariants(&parsed);
        parsed
    }

    #[test]
    fn headings_make_sections_and_the_first_h1_is_the_title() {
        let parsed = md("Preface text.\n\n\
             # Guide\n\nWelcome to *the* guide.\n\n\
             ## Install\n\nRun the **installer**.\n\n\
             ### On Debian\n\nUse `apt`.\n\n\
             ## Use\n\nJust run it.\n");
        assert_eq!(parsed.title.as_deref(), Some("Guide"));
        assert_eq!(
            sections(&parsed),
            [
                (vec![], "Preface text."),
                (vec!["Guide"], "Guide\n\nWelcome to the guide."),
                (vec!["Guide", "Install"], "Install\n\nRun the installer."),
                (
                    vec!["Guide", "Install", "On Debian"],
                    "On Debian\n\nUse apt."
                ),
                (vec!["Guide", "Use"], "Use\n\nJust run it."),
            ]
        );
    }

    #[test]
    fn setext_headings_and_inline_markup_in_headings() {
        let parsed =
            md("The *Big* `Title`\n=================\n\nBody\nwraps here.\n\nSub\n---\n\nMore.");
        assert_eq!(parsed.title.as_deref(), Some("The Big Title"));
        assert_eq!(
            sections(&parsed),
            [
                (vec!["The Big Title"], "The Big Title\n\nBody wraps here."),
                (vec!["The Big Title", "Sub"], "Sub\n\nMore."),
            ]
        );
    }

    #[test]
    fn lists_code_quotes_and_tables_keep_their_lines() {
        let parsed = md("Intro:\n\n\
             - one\n- two\n  - nested\n\n\
             1. first\n2. second\n\n\
             > quoted\n> text\n\n\
             ```rust\nfn main() {\n    println!(\"hi\");\n}\n\n// after a blank line\n```\n\n\
             | Name | Born |\n|------|------|\n| Ada  | 1815 |\n| Alan | 1912 |\n\n\
             ---\n\nEnd.");
        assert_eq!(
            parsed.text,
            "Intro:\n\none\ntwo\nnested\n\nfirst\nsecond\n\nquoted text\n\n\
             fn main() {\nprintln!(\"hi\");\n}\n\n// after a blank line\n\n\
             Name Born\nAda 1815\nAlan 1912\n\nEnd."
        );
        assert_eq!(parsed.title, None);
    }

    #[test]
    fn links_images_and_html_keep_only_their_text() {
        let parsed = md(
            "See [the docs](https://example.com/docs \"t\") and ![a diagram](d.png).\
             <br>Next line <kbd>Ctrl</kbd>.\n\n\
             <div align=\"center\">\n<b>Centered</b> words<script>alert(1)</script>\n</div>\n\n\
             <!-- a comment -->\n\nDone.",
        );
        assert_eq!(
            parsed.text,
            "See the docs and a diagram.\nNext line Ctrl.\n\nCentered words\n\nDone."
        );
    }

    #[test]
    fn front_matter_gives_the_title_and_no_text() {
        let parsed =
            md("---\nauthor: Ada\ntitle: \"Notes on the Engine\"\n---\n\n# Heading\n\nBody.");
        assert_eq!(parsed.title.as_deref(), Some("Notes on the Engine"));
        assert_eq!(parsed.text, "Heading\n\nBody.");
        let parsed = md("+++\ntitle = 'TOML title'\n+++\n\nBody.");
        assert_eq!(parsed.title.as_deref(), Some("TOML title"));
        assert_eq!(parsed.text, "Body.");
    }

    #[test]
    fn footnotes_and_task_lists() {
        let parsed = md("Claim.[^1]\n\n- [x] done\n- [ ] todo\n\n[^1]: The source.");
        assert_eq!(parsed.text, "Claim.\n\ndone\ntodo\n\nThe source.");
    }

    #[test]
    fn unicode_survives() {
        let parsed = md("# Ünïcödé 标题\n\nΚείμενο — テキスト 🚀.");
        assert_eq!(parsed.title.as_deref(), Some("Ünïcödé 标题"));
        assert_eq!(parsed.text, "Ünïcödé 标题\n\nΚείμενο — テキスト 🚀.");
    }
}
