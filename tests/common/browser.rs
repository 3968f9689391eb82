//! Headless Chromium for the dashboard's browser test and benchmark: Debian's `chromedriver` on
//! a free loopback port, and a WebDriver session (`fantoccini`) of Debian's `chromium` with the
//! flags this machine needs (no sandbox as root, no background networking) and a fresh profile.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};

/// A browser session and its driver, stopped when dropped.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Starts chromedriver and a headless Chromium session (1280×1400).
pub async fn start() -> Browser {
    for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            std::path::Path::new(program).exists(),
            "{program} is missing: install Debian's chromium and chromium-driver (.ci/run does)"
        );
    }
    // The WebDriver client's TLS provider (it speaks plain HTTP to chromedriver here).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let driver = Command::new("/usr/bin/chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let profile = tempfile::tempdir().unwrap();
    let capabilities: serde_json::Map<String, serde_json::Value> =
        serde_json::from_value(serde_json::json!({
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-quic",
                    "--window-size=1280,1400",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        }))
        .unwrap();
    // The driver listens once it has started: connect until it answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        match ClientBuilder::rustls()
            .unwrap()
            .capabilities(capabilities.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < deadline, "no Chromium session: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    Browser {
        client,
        driver,
        _profile: profile,
    }
}
