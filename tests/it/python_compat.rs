//! The official `openai` Python client against kbq: tests/compat/setup.sh makes a virtual
//! environment with the pinned client (PyPI must be reachable the first time), and
//! tests/compat/openai_client.py runs chat, streaming, tool calls, embeddings and errors.

use std::sync::Arc;

use kbq::versions::SystemClock;

use crate::support::{KEY, TestServer, test_config};

#[tokio::test]
async fn the_official_python_client_works_against_kbq() {
    let venv = crate::support::python_venv("tests/compat/setup.sh", "compat-venv").await;

    let mut config = test_config();
    config.store.load_demo = true;
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    crate::support::python_checks(
        &venv,
        "tests/compat/openai_client.py",
        [t.url("/v1").as_str(), KEY],
    )
    .await;
    t.stop().await;
}
