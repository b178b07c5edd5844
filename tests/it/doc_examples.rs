//! Runs the examples of docs/api.md against a server with the demo knowledge base and the key
//! `devkey`, in the order the page gives them, and checks every endpoint of the page's table
//! has one.
//!
//! An example is a `curl` command in a `sh` block (`-X`, `-H`, `-d`; the host is replaced by
//! the test server's). Its expected answer is the `# ` comment that follows it (a first line
//! `# HTTP 404` sets the status; otherwise any 2xx), or else the `json` block right after the
//! `sh` block. Answers are compared by shape and value: objects by the fields shown, arrays by
//! the elements shown (a prefix), strings up to an ellipsis (`...` or `…`), floats to 2%,
//! `created` timestamps by type only.
//! An example without an expected answer must still answer 2xx.

use std::sync::Arc;

use kbq::auth::KeyEntry;
use kbq::versions::SystemClock;
use reqwest::Method;
use serde_json::Value;

use crate::support::{TestServer, test_config};

const PAGE: &str = include_str!("../../docs/api.md");

#[derive(Debug)]
struct Example {
    line: usize,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    status: Option<u16>,
    expected: Option<String>,
}

/// Splits a shell command into words: single quotes (literal), double quotes (with `\"`),
/// and backslash-newline continuations.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            '\\' if chars.peek() == Some(&'\n') => {
                chars.next();
            }
            c if c.is_whitespace() => out.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

/// True while `text` has an unclosed single quote (a body spanning lines).
fn open_quote(text: &str) -> bool {
    text.chars().filter(|c| *c == '\'').count() % 2 == 1
}

fn parse_curl(line: usize, command: &str) -> Example {
    let words = words(command);
    assert_eq!(words[0], "curl", "line {line}: {command}");
    let (mut method, mut path, mut headers, mut body) = (None, None, Vec::new(), None);
    let mut i = 1;
    while i < words.len() {
        match words[i].as_str() {
            "-s" | "-sS" => {}
            "-X" => {
                i += 1;
                method = Some(Method::from_bytes(words[i].as_bytes()).unwrap());
            }
            "-H" => {
                i += 1;
                let (k, v) = words[i].split_once(':').unwrap();
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
            "-d" | "--data-binary" => {
                i += 1;
                body = Some(words[i].clone());
            }
            w if w.starts_with('-') => panic!("line {line}: unsupported curl option {w}"),
            url => {
                let rest = url
                    .trim_start_matches("http://")
                    .trim_start_matches("https://");
                path = Some(rest[rest.find('/').unwrap()..].to_string());
            }
        }
        i += 1;
    }
    Example {
        line,
        method: method.unwrap_or(if body.is_some() {
            Method::POST
        } else {
            Method::GET
        }),
        path: path.unwrap_or_else(|| panic!("line {line}: no URL")),
        headers,
        body,
        status: None,
        expected: None,
    }
}

fn examples(page: &str) -> Vec<Example> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out: Vec<Example> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "```sh" {
            i += 1;
            continue;
        }
        i += 1;
        let first_in_block = out.len();
        while i < lines.len() && lines[i].trim() != "```" {
            if !lines[i].starts_with("curl ") {
                i += 1;
                continue;
            }
            let start = i + 1;
            let mut command = lines[i].to_string();
            while command.ends_with('\\') || open_quote(&command) {
                i += 1;
                command.push('\n');
                command.push_str(lines[i]);
            }
            i += 1;
            let mut example = parse_curl(start, &command);
            let mut comment = Vec::new();
            while i < lines.len() && lines[i].starts_with('#') {
                comment.push(lines[i].trim_start_matches('#').trim());
                i += 1;
            }
            if let Some(status) = comment.first().and_then(|c| c.strip_prefix("HTTP ")) {
                example.status = Some(status.trim().parse().unwrap());
                comment.remove(0);
            }
            if !comment.is_empty() {
                example.expected = Some(comment.join("\n"));
            }
            out.push(example);
        }
        i += 1;
        // A `json` block right after a block of one command is that command's answer.
        while i < lines.len() && lines[i].trim().is_empty() {
            i += 1;
        }
        if i < lines.len() && lines[i].trim() == "```json" && out.len() == first_in_block + 1 {
            let end = i
                + 1
                + lines[i + 1..]
                    .iter()
                    .position(|l| l.trim() == "```")
                    .unwrap();
            let last = out.last_mut().unwrap();
            if last.expected.is_none() {
                last.expected = Some(lines[i + 1..end].join("\n"));
            }
            i = end + 1;
        }
    }
    out
}

/// The expected text as JSON, with elided array elements (`, ...]`, `[…]`) dropped.
fn expected_json(text: &str) -> Value {
    let mut t = text.to_string();
    for (from, to) in [
        (",...]", "]"),
        (", ...]", "]"),
        (",…]", "]"),
        (", …]", "]"),
        ("[...]", "[]"),
        ("[…]", "[]"),
    ] {
        t = t.replace(from, to);
    }
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("expected answer is not JSON ({e}): {t}"))
}

/// Whether `actual` shows what `expected` shows; the path names the first difference.
fn matches(expected: &Value, actual: &Value, at: &str) -> Result<(), String> {
    let differ = || Err(format!("at {at}: expected {expected}, got {actual}"));
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                let Some(av) = a.get(k) else {
                    return Err(format!("at {at}: no field `{k}` in {actual}"));
                };
                // A timestamp shows its type, not its value.
                if k == "created" && v.is_u64() && av.is_u64() {
                    continue;
                }
                matches(v, av, &format!("{at}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() > a.len() {
                return differ();
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                matches(ev, av, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        (Value::String(e), Value::String(a)) => {
            let cut = [e.find("..."), e.find('…')].into_iter().flatten().min();
            let ok = match cut {
                Some(i) => a.starts_with(&e[..i]),
                None => e == a,
            };
            if ok { Ok(()) } else { differ() }
        }
        (Value::Number(e), Value::Number(a)) if e.is_f64() || a.is_f64() => {
            let (e, a) = (e.as_f64().unwrap(), a.as_f64().unwrap());
            if (e - a).abs() <= 0.02 * e.abs().max(a.abs()) {
                Ok(())
            } else {
                differ()
            }
        }
        (e, a) if e == a => Ok(()),
        _ => differ(),
    }
}

/// The endpoint table: (method, path) of each row.
fn endpoints(page: &str) -> Vec<(String, String)> {
    page.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let method = *cells.get(1)?;
            let path = cells.get(2)?.trim_matches('`');
            ["GET", "POST", "PUT", "DELETE"]
                .contains(&method)
                .then(|| (method.to_string(), path.to_string()))
        })
        .collect()
}

/// Whether `path` fits `pattern`, where `{name}` stands for one or more characters.
fn fits(pattern: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap();
    match pattern.find('{') {
        None => pattern == path,
        Some(i) => {
            let rest = &pattern[pattern.find('}').unwrap() + 1..];
            path.starts_with(&pattern[..i]) && path.len() > i + rest.len() && path.ends_with(rest)
        }
    }
}

#[test]
fn the_example_parser_reads_what_the_page_writes() {
    let page = "```sh\ncurl -s localhost:8080/a/b -H 'X-API-Key: k' \\\n  -d '{\"x\": 1}'\n# HTTP 404\n# {\"y\":\n#  [1, ...]}\n\ncurl -s -X DELETE http://h/c%20d\n```\n\n```sh\ncurl -s h/e -d 'l1\nl2'\n```\n\n```json\n{\"z\": \"ab…\"}\n```\n";
    let ex = examples(page);
    assert_eq!(ex.len(), 3);
    assert_eq!(
        (ex[0].method.as_str(), ex[0].path.as_str()),
        ("POST", "/a/b")
    );
    assert_eq!(ex[0].headers, vec![("X-API-Key".into(), "k".into())]);
    assert_eq!(ex[0].body.as_deref(), Some("{\"x\": 1}"));
    assert_eq!(ex[0].status, Some(404));
    assert_eq!(
        expected_json(ex[0].expected.as_ref().unwrap()),
        serde_json::json!({"y": [1]})
    );
    assert_eq!(
        (ex[1].method.as_str(), ex[1].path.as_str()),
        ("DELETE", "/c%20d")
    );
    assert_eq!(ex[1].expected, None);
    assert_eq!(ex[2].body.as_deref(), Some("l1\nl2"));
    assert_eq!(ex[2].expected.as_deref(), Some("{\"z\": \"ab…\"}"));
    assert!(
        matches(
            &serde_json::json!({"z": "ab…"}),
            &serde_json::json!({"z": "abc", "w": 1}),
            "$"
        )
        .is_ok()
    );
    assert!(
        matches(
            &serde_json::json!({"z": "ab…"}),
            &serde_json::json!({"z": "xbc"}),
            "$"
        )
        .is_err()
    );
    assert!(
        matches(
            &serde_json::json!([1, 2]),
            &serde_json::json!([1, 2, 3]),
            "$"
        )
        .is_ok()
    );
    assert!(matches(&serde_json::json!([1, 2]), &serde_json::json!([2, 1]), "$").is_err());
    assert!(
        matches(
            &serde_json::json!({"s": 0.50}),
            &serde_json::json!({"s": 0.505}),
            "$"
        )
        .is_ok()
    );
    assert!(
        matches(
            &serde_json::json!({"s": 0.50}),
            &serde_json::json!({"s": 0.6}),
            "$"
        )
        .is_err()
    );
    assert!(
        matches(
            &serde_json::json!({"n": 3}),
            &serde_json::json!({"n": 4}),
            "$"
        )
        .is_err()
    );
    assert!(matches(&serde_json::json!({"n": null}), &serde_json::json!({}), "$").is_err());
    assert!(fits("/x/{name}", "/x/a%20b") && !fits("/x/{name}", "/x/"));
}

#[tokio::test]
async fn every_example_in_the_api_reference_answers_as_shown() {
    let mut config = test_config();
    config.store.load_demo = true;
    config.auth.keys.push(KeyEntry {
        name: "docs".into(),
        sha256: hex::encode(kbq::auth::hash("devkey")),
        scopes: None,
    });
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let examples = examples(PAGE);
    for (method, pattern) in endpoints(PAGE) {
        assert!(
            examples
                .iter()
                .any(|e| e.method.as_str() == method && fits(&pattern, &e.path)),
            "docs/api.md has no example of {method} {pattern}"
        );
    }
    for ex in &examples {
        let mut req = t.http.request(ex.method.clone(), t.url(&ex.path));
        for (k, v) in &ex.headers {
            req = req.header(k, v);
        }
        if let Some(b) = &ex.body {
            req = req.body(b.clone());
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        let what = format!("docs/api.md line {}: {} {}", ex.line, ex.method, ex.path);
        match ex.status {
            Some(s) => assert_eq!(status, s, "{what}: {text}"),
            None => assert!((200..300).contains(&status), "{what}: {status} {text}"),
        }
        if let Some(expected) = &ex.expected {
            let actual: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{what}: the answer is not JSON ({e}): {text}"));
            if let Err(diff) = matches(&expected_json(expected), &actual, "$") {
                panic!("{what}: {diff}\nfull answer: {actual}");
            }
        }
    }
    t.stop().await;
}
