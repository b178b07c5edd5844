//! The client libraries' own tests against real kbq servers (docs/clients.md):
//! tests/clients/setup-python.sh installs clients/python into a virtual environment, and its
//! pytest suite runs against the servers started here; tests/clients/setup-js.sh readies
//! clients/js (its npm packages, Debian's Chromium), and `npm test` starts servers of its own
//! from this build's binary.

use std::path::Path;
use std::sync::Arc;

use kbq::versions::SystemClock;

use crate::support::{KEY, TestServer, key_entry, test_config};

const READ_KEY: &str = "reader-key";

#[tokio::test]
async fn the_python_client_passes_its_tests_against_kbq() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv =
        crate::support::python_venv("tests/clients/setup-python.sh", "python-client-venv").await;

    // The demo knowledge base, the built-in provider, a full key and a read-only one.
    let mut config = test_config();
    config.store.load_demo = true;
    config
        .auth
        .keys
        .push(key_entry("reader", READ_KEY, Some(&["read"])));
    let main = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    // One graph request and one chat a second, no burst.
    let mut config = test_config();
    config.limits.graph_per_minute = 60;
    config.limits.graph_burst = 1;
    config.limits.agent_per_minute = 60;
    config.limits.agent_burst = 1;
    let limited = TestServer::with_fixture(config).await;
    // v1 deprecated, with a sunset far ahead.
    let mut config = test_config();
    let v1 = config.versions.get_mut("v1").unwrap();
    v1.deprecated_at = Some("2026-06-01".into());
    v1.sunset_at = Some("2099-01-01".into());
    let deprecated = TestServer::with_fixture(config).await;

    let out = tokio::process::Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .current_dir(root.join("clients/python"))
        .env("KBQ_TEST_URL", &main.base)
        .env("KBQ_TEST_KEY", KEY)
        .env("KBQ_TEST_READ_KEY", READ_KEY)
        .env("KBQ_TEST_LIMITED_URL", &limited.base)
        .env("KBQ_TEST_DEPRECATED_URL", &deprecated.base)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("KBQ_BASE_URL")
        .env_remove("KBQ_API_KEY")
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client's tests failed:\n{stdout}\n{stderr}"
    );
    for t in [main, limited, deprecated] {
        t.stop().await;
    }
}

#[tokio::test]
async fn the_js_client_passes_its_tests_against_kbq() {
    // The tests start their own servers from this build of kbq (test/support/servers.js).
    crate::support::npm_tests(
        "tests/clients/setup-js.sh",
        "clients/js",
        "the JavaScript client's tests",
        |npm| {
            npm.env_remove("KBQ_BASE_URL").env_remove("KBQ_API_KEY");
        },
    )
    .await;
}
