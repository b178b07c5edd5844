//! Reading requests: [`ValidJson`], a JSON body extractor whose errors name the field at
//! fault, and the field checks that several resource groups share (`ranged`, `name`,
//! `name_in_path`, `relationship_types`), so that a rule reads the same on every route.

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures::future::LocalBoxFuture;
use kbq_store::model::check_name;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A request body parsed as JSON into `T`. Bodies over `server.max_body_bytes` get 413; bodies
/// that are not JSON, or do not fit `T`, get 400 `invalid_request` naming the field.
pub struct ValidJson<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for ValidJson<T> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let bytes = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let bytes = bytes.await?;
            parse(&bytes).map(ValidJson).map_err(Into::into)
        })
    }
}

/// Parses JSON into `T`, naming the field at fault on failure.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde would also read a struct from a JSON array; kbq's requests are objects only.
    parse_shaped(bytes, b'{', "the request body must be a JSON object")
}

/// Parses a JSON array of `T`s, naming the element and field at fault on failure
/// (`[3].name`).
pub fn parse_array<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<Vec<T>, ApiError> {
    parse_shaped(
        bytes,
        b'[',
        &format!("the body must be a JSON array of {what}"),
    )
}

/// Parses JSON that opens with `open` into `T`; other JSON is refused with `shape`.
fn parse_shaped<T: DeserializeOwned>(bytes: &[u8], open: u8, shape: &str) -> Result<T, ApiError> {
    if bytes.trim_ascii_start().first() != Some(&open) {
        let not_json = serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err();
        if !not_json || bytes.trim_ascii().is_empty() {
            return Err(ApiError::invalid("body", shape));
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(describe)?;
    de.end().map_err(|e| {
        ApiError::invalid(
            "body",
            format!("the request body is not valid JSON: {}", plain(&e)),
        )
    })?;
    Ok(value)
}

fn describe(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let message = plain(&inner);
    if matches!(
        inner.classify(),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof
    ) {
        return ApiError::invalid(
            "body",
            format!("the request body is not valid JSON: {message}"),
        );
    }
    let named = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').nth(1))
            .map(str::to_owned)
    };
    let root = path == "." || path.is_empty();
    // A missing field is reported at its parent's path; an unknown one at its own.
    let field = match (named("missing field "), named("unknown field ")) {
        (Some(name), _) if !root => format!("{path}.{name}"),
        (Some(name), _) | (None, Some(name)) if root => name,
        _ if root => "body".into(),
        _ => path,
    };
    let message = if message.starts_with("missing field") {
        format!("{field} is required")
    } else if message.starts_with("unknown field") {
        format!(
            "{field} is not a field of this request: {}",
            message.split_once(", ").map_or("", |(_, rest)| rest)
        )
    } else {
        format!("{field}: {}", friendly(&message))
    };
    ApiError::invalid(field, message)
}

/// serde_json's message without its " at line L column C" tail.
fn plain(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn friendly(message: &str) -> String {
    message
        .replace("expected i64", "expected an integer")
        .replace("expected u64", "expected a non-negative integer")
        .replace("expected f64", "expected a number")
        .replace("a sequence", "an array")
        .replace("expected a map", "expected an object")
}

// ---- field checks shared by the routes -----------------------------------------------------

/// Reads an optional integer field as JSON Schema's `integer` does, which the document states:
/// a number with no fraction, written `6` or `6.0` or `6e0`. serde alone refuses `6.0`.
/// Used as `#[serde(default, deserialize_with = "crate::extract::integer")]`.
pub fn integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    d.deserialize_option(Integer)
}

/// The visitor of [`integer`]: absent or null is `None`; any other value must be an integer.
struct Integer;

impl<'de> serde::de::Visitor<'de> for Integer {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an integer")
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Integer)
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        i64::try_from(v)
            .map(Some)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // Below 2^63 in size, where every float with no fraction is an i64.
        if v.fract() == 0.0 && v.abs() < 9_223_372_036_854_775_808.0 {
            Ok(Some(v as i64))
        } else {
            Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
        }
    }
}

/// An integer field's rule: an inclusive range, and the value an absent field takes. The
/// handler checks the field with it, and the OpenAPI document states the same value as the
/// property's `minimum`, `maximum` and `default` (a request type lists its ranges in
/// [`Rules`]; `crate::openapi` writes them), so the two cannot differ.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub field: &'static str,
    pub min: i64,
    pub max: i64,
    pub default: i64,
}

impl Range {
    pub const fn new(field: &'static str, min: i64, max: i64, default: i64) -> Range {
        Range {
            field,
            min,
            max,
            default,
        }
    }

    /// The value, or the default when absent; 400 naming the field when out of range.
    pub fn check(self, value: Option<i64>) -> Result<i64, ApiError> {
        let Range {
            field, min, max, ..
        } = self;
        match value {
            None => Ok(self.default),
            Some(v) if (min..=max).contains(&v) => Ok(v),
            Some(_) => Err(ApiError::invalid(
                field,
                format!("{field} must be between {min} and {max}"),
            )),
        }
    }
}

/// An array field's rule: how many items it may hold.
#[derive(Debug, Clone, Copy)]
pub struct Items {
    pub field: &'static str,
    pub min: usize,
    pub max: usize,
}

/// The rules a request type's fields have beyond their types, each checked by its handler
/// with the value listed here, and stated on the type's schema from the same value
/// (`crate::openapi`): integer ranges, fields (or arrays of them) by the knowledge base's
/// name rule ([`kbq_store::model::NAME_PATTERN`] and [`kbq_store::model::MAX_NAME_CHARS`]),
/// text that must not be blank ([`kbq_store::model::NOT_BLANK_PATTERN`]), text's most
/// characters ([`kbq_store::model::longer_than`]), and arrays' sizes. Rules that come from
/// the config or the served models are stated when the server builds its document
/// (`crate::openapi::Live`), from the same values the handlers read.
pub trait Rules: utoipa::ToSchema {
    const RANGES: &'static [Range] = &[];
    const NAMES: &'static [&'static str] = &[];
    const NOT_BLANK: &'static [&'static str] = &[];
    const LENGTHS: &'static [(&'static str, usize)] = &[];
    const LISTS: &'static [Items] = &[];
}

/// A name (entity, type, source, ...) by the knowledge base's name rules, as `field`.
pub(crate) fn name(field: &str, value: &str) -> Result<(), ApiError> {
    check_name(field, value).map_err(ApiError::from)
}

/// `relationship_types`: 1 to 64 types, each a name.
pub const RELATIONSHIP_TYPES: Items = Items {
    field: "relationship_types",
    min: 1,
    max: 64,
};

/// `relationship_types`: absent (every type), or [`RELATIONSHIP_TYPES`] names.
pub(crate) fn relationship_types(
    value: Option<Vec<String>>,
) -> Result<Option<Vec<String>>, ApiError> {
    let Some(types) = value else { return Ok(None) };
    let Items { field, min, max } = RELATIONSHIP_TYPES;
    if types.len() < min {
        return Err(ApiError::invalid(
            field,
            "relationship_types must not be empty; omit it to follow every type",
        ));
    }
    if types.len() > max {
        return Err(ApiError::invalid(
            field,
            format!("relationship_types may name at most {max} types"),
        ));
    }
    for t in &types {
        name(field, t)?;
    }
    Ok(Some(types))
}

/// The name in the rest of the path after `mark`, percent-decoded in full (so `%2F` is a
/// slash in the name, not a separator; spaces and unicode too) and checked by the name rules
/// as `field`.
pub(crate) fn name_in_path(req: &HttpRequest, mark: &str, field: &str) -> Result<String, ApiError> {
    let path = req.uri().path();
    let raw = path.find(mark).map_or("", |i| &path[i + mark.len()..]);
    let decoded = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| ApiError::invalid(field, format!("{field} must be percent-encoded UTF-8")))?;
    name(field, &decoded)?;
    Ok(decoded.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct WithInteger {
        #[serde(default, deserialize_with = "integer")]
        n: Option<i64>,
    }

    /// JSON Schema's `integer`: a number with no fraction, however written; the rest refused
    /// with "expected an integer".
    #[test]
    fn an_integer_may_be_written_with_a_zero_fraction() {
        let read = |json: &str| serde_json::from_str::<WithInteger>(json).map(|w| w.n);
        for (json, n) in [
            ("{}", None),
            (r#"{"n": null}"#, None),
            (r#"{"n": 6}"#, Some(6)),
            (r#"{"n": -6}"#, Some(-6)),
            (r#"{"n": 6.0}"#, Some(6)),
            (r#"{"n": 6e0}"#, Some(6)),
            (r#"{"n": 1e2}"#, Some(100)),
        ] {
            assert_eq!(read(json).unwrap(), n, "{json}");
        }
        for json in [
            r#"{"n": 6.5}"#,
            r#"{"n": "6"}"#,
            r#"{"n": 1e19}"#,
            r#"{"n": 18446744073709551615}"#,
            r#"{"n": true}"#,
        ] {
            let e = read(json).unwrap_err().to_string();
            assert!(e.contains("expected an integer"), "{json}: {e}");
        }
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct R {
        name: String,
        depth: Option<i64>,
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse::<R>(br#"{"name":"a","depth":"x"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("depth"));
        assert!(e.message.contains("expected an integer"), "{}", e.message);
        let e = parse::<R>(br#"{"depth":1}"#).unwrap_err();
        assert_eq!(
            (e.field.as_deref(), e.message.as_str()),
            (Some("name"), "name is required")
        );
        let e = parse::<R>(br#"{"name":"a","dpeth":1}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("dpeth"));
        let e = parse::<R>(br#"{"name":"a""#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("body"));
        let e = parse::<R>(b"").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("body"));
        let e = parse::<R>(br#"{"name":"a"} x"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("body"));
    }
}
