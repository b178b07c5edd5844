//! JSON written byte for byte as `serde_json` writes it (compact), for the answers whose time
//! goes into writing long strings: documents' contents, names, tools' results.
//!
//! `serde_json` looks at a string one byte at a time to find what to escape; [`write_str`]
//! looks at eight at a time and copies the runs between escapes whole. Unit tests hold both
//! to the same bytes, for every byte that needs an escape in every place in a word, and for
//! generated values.

use std::fmt::Write as _;

use serde_json::Value;

/// What a byte becomes in a JSON string: 0 for itself, else the letter after the backslash
/// (`u` for `\u00XX`).
const ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any of the eight bytes of `word` needs an escape: a control byte, `"` or `\`.
/// (The usual word-at-a-time tests, exact for "any": a byte under 0x20 sets its high bit in
/// `word - 0x20..`, and not in `word`; an equal byte is a zero byte of the XOR.)
fn needs_escape(word: u64) -> bool {
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    let quote = zero_byte(word ^ (ONES * u64::from(b'"')));
    let backslash = zero_byte(word ^ (ONES * u64::from(b'\\')));
    control | quote | backslash != 0
}

/// Asks the processor to fetch `s` (up to its first kilobyte) ahead of writing it. A held
/// document's fields are separate allocations scattered over the heap: written one after
/// another, each is a cache miss that the writing waits on. Asked for together first, the
/// misses overlap.
#[inline]
pub fn prefetch_str(s: &str) {
    crate::hint::prefetch_lines(&s.as_bytes()[..s.len().min(1024)]);
}

/// Appends `s` as a JSON string, quoted and escaped as `serde_json` does.
pub fn write_str(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    // `s[copied..]` is not written yet; escapes are ASCII, so every cut is a char boundary.
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(word) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        let end = (i + 8).min(bytes.len());
        for (j, &b) in bytes.iter().enumerate().take(end).skip(i) {
            let escape = ESCAPES[b as usize];
            if escape == 0 {
                continue;
            }
            out.push_str(&s[copied..j]);
            copied = j + 1;
            out.push('\\');
            out.push(char::from(escape));
            if escape == b'u' {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        i = end;
    }
    out.push_str(&s[copied..]);
    out.push('"');
}

/// Appends `items` as a JSON array of strings, each as [`write_str`] writes it.
pub fn write_str_array<'a>(out: &mut String, items: impl IntoIterator<Item = &'a str>) {
    out.push('[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, item);
    }
    out.push(']');
}

/// Appends `s` as [`write_str`] does, or `null` for `None`.
pub fn write_optional_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.push_str("null"),
    }
}

/// Appends `x` as [`write_f64`] does, or `null` for `None`.
pub fn write_optional_f64(out: &mut String, x: Option<f64>) {
    match x {
        Some(x) => write_f64(out, x),
        None => out.push_str("null"),
    }
}

/// Appends a float as `serde_json` writes an `f64`: the shortest form that reads back the
/// same, `null` when not finite.
pub fn write_f64(out: &mut String, x: f64) {
    match serde_json::Number::from_f64(x) {
        Some(n) => write_number(out, &n),
        None => out.push_str("null"),
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    // Writing to a `String` cannot fail.
    let _ = write!(out, "{n}");
}

/// Appends `value` as `serde_json::to_string` writes it.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => write_map(out, fields),
    }
}

/// Appends `fields` as `serde_json::to_string` writes a JSON object of them.
pub fn write_map(out: &mut String, fields: &serde_json::Map<String, Value>) {
    out.push('{');
    for (i, (key, item)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, key);
        out.push(':');
        write_value(out, item);
    }
    out.push('}');
}

/// Appends what `serde_json::to_string` writes for `value`, for the small parts of an
/// answer whose type always serializes (a plain struct, an enum, a number).
pub fn write_serialized<T: serde::Serialize + ?Sized>(out: &mut String, value: &T) {
    out.push_str(&serde_json::to_string(value).expect("a value that always serializes"));
}

/// `value` as `serde_json::to_string` writes it.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A prefetch is only a hint, with nothing to observe but that it does not panic: any
    /// string, of any length and with multi-byte characters cut anywhere by the kilobyte
    /// limit, is asked for, and still written as before.
    #[test]
    fn prefetch_str_takes_any_string() {
        for s in [String::new(), "a".into(), "é".repeat(700), "x".repeat(5000)] {
            prefetch_str(&s);
            assert_eq!(written(&s), serde_json::to_string(&s).unwrap());
        }
    }

    fn written(s: &str) -> String {
        let mut out = String::new();
        write_str(&mut out, s);
        out
    }

    /// Every ASCII byte, in each place of a word and in the short tail, between runs of
    /// text of every length up to two words: the same bytes as serde_json's.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for b in 0u8..0x80 {
            let c = char::from(b);
            for before in 0..17 {
                for after in [0, 1, 7, 8, 9] {
                    let s = format!("{}{c}{}", "a".repeat(before), "é".repeat(after));
                    assert_eq!(written(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
                }
            }
        }
        for s in [
            "",
            "\"\"\"\"\"\"\"\"\"",
            "\\",
            "\u{7f}\u{80}\u{2028}😀\n",
            "ab\u{1}cd\u{1f}",
        ] {
            assert_eq!(written(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    /// Generated strings from a pool weighted towards the characters that need escapes and
    /// the bytes next to them (0x1f, 0x20, 0x7f, multi-byte characters).
    #[test]
    fn generated_strings_are_escaped_as_serde_json_escapes_them() {
        let pool: Vec<char> =
            "\"\\\u{0}\u{8}\u{9}\u{a}\u{c}\u{d}\u{1f} !#[]^_`~\u{7f}\u{80}éß中😀abcXYZ019"
                .chars()
                .collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 40) as usize;
            let s: String = (0..len)
                .map(|k| pool[((state >> (k % 48)) as usize + k * 7) % pool.len()])
                .collect();
            assert_eq!(written(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn values_are_written_as_serde_json_writes_them() {
        let values = [
            json!(null),
            json!({}),
            json!([]),
            json!({"b": [1, -2, 3.5, 1e300, 0.1, 1.0, u64::MAX, i64::MIN], "a": {"x\n": null},
                   "t": true, "f": false, "s": "a \"quoted\" \\ line\n\ttab é 😀"}),
            json!([[[]], [{}], {"": ""}]),
        ];
        for v in values {
            assert_eq!(to_string(&v), serde_json::to_string(&v).unwrap(), "{v}");
        }
    }

    #[test]
    fn string_arrays_are_written_as_serde_json_writes_them() {
        for items in [vec![], vec!["a"], vec!["Bob", "C\"q\"\\", "中", ""]] {
            let mut out = String::new();
            write_str_array(&mut out, items.iter().copied());
            assert_eq!(out, serde_json::to_string(&items).unwrap());
        }
    }

    #[test]
    fn floats_are_written_as_serde_json_writes_them() {
        for x in [
            0.0,
            -0.0,
            0.796595,
            1.0,
            1e-7,
            123456789.125,
            f64::NAN,
            f64::INFINITY,
        ] {
            let mut out = String::new();
            write_f64(&mut out, x);
            assert_eq!(out, serde_json::to_string(&x).unwrap(), "{x}");
        }
    }
}
