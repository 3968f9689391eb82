//! The daemon's HTTP listener: each connection served by hyper's HTTP/1 with a deadline on a
//! request's head (which also closes a kept-alive connection left idle that long) and a bound
//! on the connections served at once, so that clients that connect and send nothing (or a
//! byte at a time) cannot hold the daemon's open files, which it needs for its own clusters,
//! hub and Git. `axum::serve` sets neither: hyper's head timeout needs a timer it is not given.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long a client has to send a request's head, from when its connection is ready for one.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; the next waits in the kernel's backlog until one ends.
pub const MAX_CONNECTIONS: usize = 1024;

/// Serves `app` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, app: axum::Router) {
    serve_with(listener, app, HEAD_TIMEOUT, MAX_CONNECTIONS).await;
}

async fn serve_with(
    listener: TcpListener,
    app: axum::Router,
    head_timeout: Duration,
    max_connections: usize,
) {
    let permits = Arc::new(Semaphore::new(max_connections));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(head_timeout);
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of files, most likely: wait for connections to end rather than spin.
                tracing::warn!(error = %e, "the API could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// Reads until the server closes the connection (at most 10 s); what it sent.
    async fn until_closed(stream: &mut TcpStream) -> String {
        let mut text = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut text))
            .await
            .expect("the server closes the connection")
            .ok();
        String::from_utf8_lossy(&text).into_owned()
    }

    /// A connection that never finishes its head is closed after the head timeout, and while
    /// it holds the only place another connection waits; a whole request is answered.
    #[tokio::test]
    async fn a_silent_connection_is_closed_and_connections_are_bounded() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        let head_timeout = Duration::from_millis(300);
        tokio::spawn(serve_with(listener, app, head_timeout, 1));

        let started = Instant::now();
        let mut silent = TcpStream::connect(address).await.unwrap();
        silent
            .write_all(b"GET /healthz HTTP/1.1\r\nHo")
            .await
            .unwrap();
        // Accepted second, it is served only once the first has gone.
        let mut waiting = TcpStream::connect(address).await.unwrap();
        waiting
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        assert!(
            !until_closed(&mut silent).await.contains("200 OK"),
            "the unfinished head is not answered"
        );
        let answer = until_closed(&mut waiting).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
        assert!(
            started.elapsed() >= head_timeout,
            "the second waited for the first's place ({:?})",
            started.elapsed()
        );
    }
}
