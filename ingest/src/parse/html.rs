//! HTML through `scraper` (html5ever's tree, as a browser builds it): the text a reader sees,
//! with `h1`..`h6` as headings and block elements as paragraphs.
//!
//! Cost: html5ever checks the stack of open elements at each tag, so building the tree takes
//! time quadratic in nesting depth: 8,000 nested `div`s (40 KB) take about 0.2 s in a release
//! build, 8,000 `div`+`span` pairs 0.7 s. Real pages nest a few dozen deep; a hostile upload
//! is bounded only by the upload size limit, so the caller runs parsing off the async
//! runtime and under its job's time budget.

use ego_tree::iter::Edge;
use scraper::{Html, Node};

use super::{Builder, Parsed};

pub(super) fn parse(source: &str) -> Parsed {
    let mut b = Builder::default();
    walk(&mut b, &Html::parse_document(source));
    b.finish()
}

/// A piece of HTML inside another document (a Markdown HTML block), written into its builder.
pub(super) fn fragment(b: &mut Builder, source: &str) {
    walk(b, &Html::parse_fragment(source));
}

/// What an element means for the text.
enum Role {
    /// Not shown to a reader (scripts, styles, templates, hidden elements), or not prose
    /// (SVG and MathML markup, form controls' option lists): skipped with all it contains.
    Skip,
    /// The document's title: read, then skipped, because it is not part of the body.
    Title,
    Heading(u8),
    /// Separates paragraphs.
    Block,
    /// Ends a line within a block (`br`, list items, table rows).
    Line,
    /// Separates words (table cells).
    Cell,
    /// Keeps its line breaks.
    Pre,
    Inline,
}

fn role(name: &str) -> Role {
    match name {
        "script" | "style" | "noscript" | "template" | "svg" | "math" | "iframe" | "object"
        | "embed" | "canvas" | "select" | "datalist" => Role::Skip,
        "title" => Role::Title,
        "h1" => Role::Heading(1),
        "h2" => Role::Heading(2),
        "h3" => Role::Heading(3),
        "h4" => Role::Heading(4),
        "h5" => Role::Heading(5),
        "h6" => Role::Heading(6),
        "br" | "li" | "tr" | "dt" | "dd" => Role::Line,
        "td" | "th" => Role::Cell,
        "pre" | "listing" | "xmp" | "plaintext" => Role::Pre,
        "html" | "body" | "p" | "div" | "section" | "article" | "header" | "footer" | "nav"
        | "aside" | "main" | "blockquote" | "ul" | "ol" | "dl" | "menu" | "table" | "thead"
        | "tbody" | "tfoot" | "caption" | "figure" | "figcaption" | "form" | "fieldset"
        | "legend" | "address" | "details" | "summary" | "hr" | "center" | "hgroup" | "dialog"
        | "search" | "textarea" | "option" | "optgroup" | "label" => Role::Block,
        _ => Role::Inline,
    }
}

fn walk(b: &mut Builder, html: &Html) {
    // The tree is walked as a sequence of open and close edges, not recursively: nesting
    // depth is the document's choice, the stack is not.
    let mut skipping = None;
    let mut pre_depth = 0usize;
    for edge in html.tree.root().traverse() {
        match edge {
            Edge::Open(node) => {
                if skipping.is_some() {
                    continue;
                }
                match node.value() {
                    Node::Text(text) if pre_depth > 0 => b.preformatted(text),
                    Node::Text(text) => b.text(text),
                    Node::Element(element) => {
                        if element.attr("hidden").is_some() {
                            skipping = Some(node.id());
                            continue;
                        }
                        match role(element.name()) {
                            Role::Skip => skipping = Some(node.id()),
                            Role::Title => {
                                let title: String = node
                                    .descendants()
                                    .filter_map(|n| n.value().as_text().map(|t| &**t))
                                    .collect();
                                b.declare_title(&title);
                                skipping = Some(node.id());
                            }
                            Role::Heading(level) => b.start_heading(level),
                            Role::Block => b.paragraph_break(),
                            Role::Line => b.line_break(),
                            Role::Cell => b.space(),
                            Role::Pre => {
                                b.paragraph_break();
                                pre_depth += 1;
                            }
                            Role::Inline => {}
                        }
                    }
                    _ => {}
                }
            }
            Edge::Close(node) => {
                if skipping.is_some() {
                    if skipping == Some(node.id()) {
                        skipping = None;
                    }
                    continue;
                }
                if let Node::Element(element) = node.value() {
                    match role(element.name()) {
                        Role::Heading(_) => b.end_heading(),
                        Role::Block => b.paragraph_break(),
                        Role::Line => b.line_break(),
                        Role::Cell => b.space(),
                        Role::Pre => {
                            pre_depth -= 1;
                            b.paragraph_break();
                        }
                        Role::Skip | Role::Title | Role::Inline => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::format::Format;
    use crate::parse::tests::{check_invariants, sections};
    use crate::parse::{Parsed, parse};

    fn html(source: &str) -> Parsed {
        let parsed = parse(source.as_bytes(), Format::Html).unwrap();
        check_invariants(&parsed);
        parsed
    }

    const PAGE: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>  The Analytical
     Engine &amp; its Notes </title>
  <style>body { color: red; } .secret { display: none }</style>
  <script>var leaked = "SCRIPT TEXT";</script>
  <link rel="stylesheet" href="x.css">
</head>
<body>
  <nav><a href="/">Home</a> | <a href="/about">About</a></nav>
  <h1>Charles <em>Babbage</em></h1>
  <p>Babbage designed the
     <b>Analytical Engine</b>.<br>It was never built.</p>
  <script type="module">import("x"); document.write("MODULE TEXT")</script>
  <noscript>Enable JavaScript NOSCRIPT TEXT</noscript>
  <template><p>TEMPLATE TEXT</p></template>
  <div hidden>HIDDEN TEXT</div>
  <svg><title>SVG TITLE</title><text>SVG TEXT</text></svg>
  <h2>Notes</h2>
  <ul><li>Ada Lovelace wrote <i>Note G</i>.</li><li>It computed Bernoulli numbers.</li></ul>
  <h3>Table</h3>
  <table><tr><th>Name</th><th>Born</th></tr><tr><td>Ada</td><td>1815</td></tr></table>
  <pre>  let x = 1;
  let y = 2;</pre>
  <h2>Legacy</h2>
  <div><div>Nested <span>inline</span> text&nbsp;with&#x20;entities &lt;ok&gt;.</div></div>
  <style>p { margin: 0 }</style>
</body>
</html>"#;

    #[test]
    fn keeps_the_visible_text_with_headings_and_title() {
        let parsed = html(PAGE);
        assert_eq!(
            parsed.title.as_deref(),
            Some("The Analytical Engine & its Notes")
        );
        assert_eq!(
            sections(&parsed),
            [
                (vec![], "Home | About"),
                (
                    vec!["Charles Babbage"],
                    "Charles Babbage\n\nBabbage designed the Analytical Engine.\nIt was never built."
                ),
                (
                    vec!["Charles Babbage", "Notes"],
                    "Notes\n\nAda Lovelace wrote Note G.\nIt computed Bernoulli numbers."
                ),
                (
                    vec!["Charles Babbage", "Notes", "Table"],
                    "Table\n\nName Born\nAda 1815\n\nlet x = 1;\nlet y = 2;"
                ),
                (
                    vec!["Charles Babbage", "Legacy"],
                    "Legacy\n\nNested inline text with entities <ok>."
                ),
            ]
        );
    }

    #[test]
    fn scripts_styles_and_hidden_content_never_appear() {
        let parsed = html(PAGE);
        for leaked in [
            "SCRIPT",
            "MODULE",
            "NOSCRIPT",
            "TEMPLATE",
            "HIDDEN",
            "SVG",
            "color",
            "margin",
            "leaked",
            "stylesheet",
        ] {
            assert!(
                !parsed.text.contains(leaked),
                "{leaked} leaked into {:?}",
                parsed.text
            );
        }
    }

    #[test]
    fn without_a_title_element_the_first_h1_is_the_title() {
        let parsed = html("<h2>Before</h2><p>x</p><h1>Main</h1><p>y</p><h1>Second</h1>");
        assert_eq!(parsed.title.as_deref(), Some("Main"));
        let parsed = html("<title> </title><p>Only text</p>");
        assert_eq!(parsed.title, None);
    }

    #[test]
    fn broken_html_is_read_as_a_browser_would() {
        // A `p` opened inside an unclosed `h2` is part of the heading, as a browser shows it.
        let parsed = html("<p>One<p>Two<div>Three<h2>Head<p>more</b></i></div><p>after");
        assert_eq!(
            sections(&parsed),
            [
                (vec![], "One\n\nTwo\n\nThree"),
                (vec!["Head more"], "Head more\n\nafter")
            ]
        );
        // An unclosed script swallows the rest, as in a browser.
        let parsed = html("<p>Seen</p><script>never shown");
        assert_eq!(parsed.text, "Seen");
    }

    #[test]
    fn deep_nesting_does_not_overflow_the_stack() {
        // Deep enough to overflow a recursive walk on a test thread's 2 MiB stack; not
        // deeper, because html5ever's tree building is quadratic in depth (see the module).
        let depth = 3_000;
        let source = format!(
            "{}deep{}",
            "<div><span>".repeat(depth),
            "</span></div>".repeat(depth)
        );
        assert_eq!(html(&source).text, "deep");
    }
}
