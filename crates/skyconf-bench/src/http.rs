//! The HTTP client the benchmarks read the server under test with: its admin API and `/metrics`.

use std::time::Duration;

use anyhow::{Context as _, ensure};

/// A client whose every request gives up after 10 s.
pub(crate) fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?)
}

/// `GET url`: its answer, which must be a success.
pub(crate) async fn get_ok(http: &reqwest::Client, url: &str) -> anyhow::Result<reqwest::Response> {
    let reply = http.get(url).send().await.with_context(|| format!("GET {url}"))?;
    ensure!(reply.status().is_success(), "GET {url}: {}", reply.status());
    Ok(reply)
}
