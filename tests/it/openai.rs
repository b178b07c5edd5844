//! The OpenAI-compatible models and embeddings endpoints.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{TestServer, assert_error, read};

const MODEL: &str = "kbq-hashing-v1";

fn vector(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[tokio::test]
async fn models_lists_the_providers_and_the_embedder() {
    let t = TestServer::start().await;
    let (status, body) = t.get("/v1/models").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["object"], "model");
            assert!(m["created"].is_u64() && m["owned_by"].is_string(), "{m}");
            m["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids, vec!["kbq", "builtin", MODEL]);
    let (status, _, body) = read(t.http.get(t.url("/v1/models")).send().await.unwrap()).await;
    assert_eq!(status, 401);
    assert_error(&body, "INVALID_API_KEY", None);
    t.stop().await;
}

#[tokio::test]
async fn embeddings_answer_in_openai_shape_as_floats_or_base64() {
    let t = TestServer::start().await;
    let (status, body) = t
        .post(
            "/v1/embeddings",
            json!({"model": MODEL, "input": ["the analytical engine", "Ada Lovelace"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], MODEL);
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 5, "total_tokens": 5})
    );
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        let v = vector(&d["embedding"]);
        assert_eq!(v.len(), 256);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
    // The same text gives the same vector, whether alone or in a list, as floats or base64.
    let first = vector(&data[0]["embedding"]);
    let (_, single) = t
        .post(
            "/v1/embeddings",
            json!({"model": MODEL, "input": "the analytical engine", "dimensions": 256}),
        )
        .await;
    assert_eq!(vector(&single["data"][0]["embedding"]), first);
    let (_, encoded) = t
        .post(
            "/v1/embeddings",
            json!({"model": MODEL, "input": "the analytical engine", "encoding_format": "base64"}),
        )
        .await;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(decoded, first);
    // A different text, a different vector.
    assert_ne!(vector(&data[1]["embedding"]), first);
    t.stop().await;
}

#[tokio::test]
async fn embeddings_requests_are_checked_field_by_field() {
    let t = TestServer::start().await;
    let many: Vec<String> = (0..257).map(|i| format!("text {i}")).collect();
    let cases: Vec<(Value, &str)> = vec![
        (json!({"input": "x"}), "model"),
        (
            json!({"model": "text-embedding-3-small", "input": "x"}),
            "model",
        ),
        (json!({"model": MODEL}), "input"),
        (json!({"model": MODEL, "input": ""}), "input"),
        (json!({"model": MODEL, "input": []}), "input"),
        (json!({"model": MODEL, "input": [1, 2, 3]}), "input"),
        (json!({"model": MODEL, "input": ["ok", ""]}), "input"),
        (json!({"model": MODEL, "input": many}), "input"),
        (
            json!({"model": MODEL, "input": "x".repeat(32 * 1024 + 1)}),
            "input",
        ),
        (
            json!({"model": MODEL, "input": "x", "dimensions": 64}),
            "dimensions",
        ),
        (
            json!({"model": MODEL, "input": "x", "encoding_format": "hex"}),
            "encoding_format",
        ),
        (
            json!({"model": MODEL, "input": "x", "temperature": 1}),
            "temperature",
        ),
    ];
    for (body, field) in cases {
        let (status, err) = t.post("/v1/embeddings", body.clone()).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_error(&err, "invalid_request", Some(field));
    }
    t.stop().await;
}
