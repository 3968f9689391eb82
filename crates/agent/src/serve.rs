//! Serving a hyper handler on a listener, HTTP/1.1 and HTTP/2 (h2c, prior knowledge) on the
//! same port, with graceful shutdown: stop accepting, let requests in flight finish. Either on
//! the caller's runtime ([`serve`]) or on threads of its own, one single-threaded runtime each
//! ([`Workers`], the router's: nginx's worker model, where a connection and everything it waits
//! on stay on one thread).

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, oneshot, watch};

/// Binds a listener with a deep accept queue (4096, the kernel caps it at somaxconn), so that a
/// burst of new connections under load waits instead of being reset.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// Accepts connections until `shutdown` turns true (or its sender goes), then waits up to
/// `grace` for the connections to finish their requests.
pub(crate) async fn serve<F, Fut, B>(
    listener: TcpListener,
    handler: F,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    accept_until(&listener, &mut shutdown, |stream| {
        serve_connection(&builder, &graceful, stream, handler.clone());
    })
    .await;
    drop(listener);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
}

/// Accepts connections (with `TCP_NODELAY`) and passes each to `on_stream` until `shutdown`
/// turns true or its sender goes.
async fn accept_until(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
    mut on_stream: impl FnMut(tokio::net::TcpStream),
) {
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    on_stream(stream);
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            changed = shutdown.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
}

/// Serves one connection with `handler` on the current runtime, watched by `graceful`.
fn serve_connection<F, Fut, B>(
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    stream: tokio::net::TcpStream,
    handler: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = service_fn(move |request| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler(request).await) }
    });
    let connection = graceful.watch(
        builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned(),
    );
    tokio::spawn(async move {
        let _ = connection.await;
    });
}

/// Threads that serve connections handed to them, each on a single-threaded runtime of its
/// own: everything a connection waits on (its requests, the upstream connections its handler
/// opens through a client made on that thread) is driven by one thread, with no cross-thread
/// wakeup per request. Connections are handed out round robin, so a few long keep-alive
/// connections spread evenly (kernel `SO_REUSEPORT` hashing would not).
pub(crate) struct Workers {
    senders: Vec<mpsc::UnboundedSender<std::net::TcpStream>>,
    done: Vec<oneshot::Receiver<()>>,
}

impl Workers {
    /// Starts `threads` threads named `{name}-{i}`. `make_handler` runs once on each thread
    /// and makes that thread's handler. Once [`Workers::accept`] stops, each thread waits up to
    /// `grace` for its connections to finish their requests, then ends.
    pub(crate) fn start<M, F, Fut, B>(
        threads: usize,
        name: &str,
        grace: Duration,
        make_handler: M,
    ) -> std::io::Result<Workers>
    where
        M: Fn() -> F + Clone + Send + 'static,
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<B>> + Send + 'static,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut workers = Workers {
            senders: Vec::new(),
            done: Vec::new(),
        };
        for i in 0..threads.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (sender, mut streams) = mpsc::unbounded_channel::<std::net::TcpStream>();
            let (finished, done) = oneshot::channel();
            let make_handler = make_handler.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        let handler = make_handler();
                        let mut builder = auto::Builder::new(TokioExecutor::new());
                        builder.http1().writev(false);
                        let graceful = GracefulShutdown::new();
                        while let Some(stream) = streams.recv().await {
                            if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                                serve_connection(&builder, &graceful, stream, handler.clone());
                            }
                        }
                        let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
                    });
                    let _ = finished.send(());
                })?;
            workers.senders.push(sender);
            workers.done.push(done);
        }
        Ok(workers)
    }

    /// Accepts connections on `listener` and hands them to the threads until `shutdown` turns
    /// true (or its sender goes); then returns once every thread has let its connections
    /// finish (or its grace ran out).
    pub(crate) async fn accept(self, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
        let mut next = 0usize;
        accept_until(&listener, &mut shutdown, |stream| {
            let Ok(stream) = stream.into_std() else {
                return;
            };
            // A thread that is gone (it panicked) is skipped; the others serve.
            let mut stream = Some(stream);
            for _ in 0..self.senders.len() {
                let sender = &self.senders[next % self.senders.len()];
                next = next.wrapping_add(1);
                match stream.take().map(|s| sender.send(s)) {
                    Some(Err(mpsc::error::SendError(back))) => stream = Some(back),
                    _ => break,
                }
            }
        })
        .await;
        drop(listener);
        drop(self.senders);
        for done in self.done {
            let _ = done.await;
        }
    }
}
