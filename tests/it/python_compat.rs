//! The official `openai` Python client against kbq: tests/compat/setup.sh makes a virtual
//! environment with the pinned client (PyPI must be reachable the first time), and
//! tests/compat/openai_client.py runs chat, streaming, tool calls, embeddings and errors.

use std::path::Path;
use std::sync::Arc;

use kbq::versions::SystemClock;

use crate::support::{KEY, TestServer, test_config};

#[tokio::test]
async fn the_official_python_client_works_against_kbq() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = crate::support::python_venv("tests/compat/setup.sh", "compat-venv").await;

    let mut config = test_config();
    config.store.load_demo = true;
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let out = tokio::process::Command::new(venv.join("bin/python"))
        .arg(root.join("tests/compat/openai_client.py"))
        .arg(t.url("/v1"))
        .arg(KEY)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "the Python client failed:\n{stdout}\n{stderr}"
    );
    t.stop().await;
}
