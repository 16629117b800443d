//! The HTTP service's own serving loop (in place of `axum::serve`, which
//! exposes no connection settings): connections are accepted from any axum
//! `Listener` (plain TCP, or `tls::TlsListener`) and each is served by
//! hyper-util's auto connection (HTTP/1.1 with keep-alive and pipelining,
//! and HTTP/2 with prior knowledge, as `axum::serve` served them), under two
//! bounds against slowloris clients:
//!
//! * header: a request's whole header must arrive within
//!   `--http-header-timeout-secs`, counted from its first byte (or, for a
//!   request whose bytes came while the previous one was being answered,
//!   from the end of that answer);
//! * idle: a connection with no request in flight that sends nothing (after
//!   connecting, or after its last answer) for `--http-idle-timeout-secs` is
//!   closed.
//!
//! A connection past either bound is closed. While a request is in flight
//! (its header read, its answer not yet handed to the connection) neither
//! bound runs: a body may trickle in, and a long inference may take its
//! time.
//!
//! hyper's own `header_read_timeout` is not used: it runs from the moment
//! the connection waits for a header, idle time included, so it would close
//! an idle keep-alive connection after the header bound instead of the idle
//! one. Instead the connection's I/O, the requests and their bodies report
//! to a per-connection `Clock`, and the connection's task closes it when the
//! clock's deadline passes. Reporting never wakes that task (a request costs
//! a few uncontended locks and clock reads, no wake-up or timer): the task
//! checks the clock at the earliest moment a bound could pass, which is
//! never sooner than the shorter bound from now, and sleeps again if none
//! did.
//!
//! On shutdown (the future given to `serve`), as with axum's
//! `with_graceful_shutdown`: no connection is accepted any more, the
//! listener closes, every connection is asked to shut down gracefully (an
//! idle one closes at once, one in the middle of a request answers it and
//! then closes), and `serve` returns when all are closed.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::serve::Listener;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::Instant;

use super::forward::HeaderForward;
use super::raw_heads::{Heads, Recorder};

/// The two bounds of an HTTP connection (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnLimits {
    /// Time for a request's whole header.
    pub header: Option<Duration>,
    /// Time a connection with no request in flight may send nothing.
    pub idle: Option<Duration>,
}

impl ConnLimits {
    /// From the flags' seconds, 0 meaning no limit.
    pub fn from_secs(header: u64, idle: u64) -> ConnLimits {
        let secs = |s: u64| (s > 0).then(|| Duration::from_secs(s));
        ConnLimits {
            header: secs(header),
            idle: secs(idle),
        }
    }
}

/// Serves `app` on the connections `listener` accepts until `shutdown`
/// completes, then shuts down gracefully (module doc); returns when every
/// connection is closed. `forward`: the header forward pattern, whose
/// headers keep their trailing blanks (`raw_heads`).
pub async fn serve<L>(
    mut listener: L,
    app: Router,
    limits: ConnLimits,
    forward: Option<Arc<HeaderForward>>,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener,
{
    let mut shutdown = std::pin::pin!(shutdown);
    // `stop` tells the connections to shut down; each holds a receiver of
    // `closed`, whose sender learns when the last of them is gone.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (closed_tx, closed_rx) = watch::channel(());
    loop {
        let io = tokio::select! {
            (io, _addr) = listener.accept() => io,
            () = &mut shutdown => break,
        };
        tokio::spawn(connection(
            io,
            app.clone(),
            limits,
            forward.clone(),
            stop_rx.clone(),
            closed_rx.clone(),
        ));
    }
    drop(listener);
    drop(closed_rx);
    let _ = stop_tx.send(true);
    closed_tx.closed().await;
}

/// Serves one connection until it ends, passes a bound, or (after `stop`)
/// has shut down gracefully.
async fn connection<I>(
    io: I,
    app: Router,
    limits: ConnLimits,
    forward: Option<Arc<HeaderForward>>,
    mut stop: watch::Receiver<bool>,
    _closed: watch::Receiver<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let clock = Arc::new(Clock::new());
    let (recorder, heads) = match forward {
        Some(f) => {
            let (r, h) = Recorder::new(f);
            (Some(r), Some(h))
        }
        None => (None, None),
    };
    let io = TokioIo::new(Watched {
        io,
        clock: clock.clone(),
        recorder,
    });
    let service = Service {
        app,
        clock: clock.clone(),
        heads,
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The header bound is ours (module doc).
    builder.http1().header_read_timeout(None);
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    loop {
        let check = clock.next_check(&limits);
        tokio::select! {
            _ = conn.as_mut() => break,
            _ = stop.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            () = sleep_until(check) => {
                if clock.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    // Dropping the connection closes it.
                    break;
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// What a connection's bounds are measured from.
struct Clock {
    state: Mutex<ClockState>,
}

struct ClockState {
    /// Requests in flight: header read, answer not yet all handed over.
    active: usize,
    /// Of those, the requests whose body is still arriving.
    bodies: usize,
    /// When the connection last had no request in flight: accepted, or its
    /// last answer handed over.
    since: Instant,
    /// The last byte read or written.
    last_io: Instant,
    /// When the header now arriving began (`None`: none is arriving).
    header_from: Option<Instant>,
    /// Bytes were read after every request in flight had its whole body:
    /// the start of the next request, whose header clock starts when the
    /// requests in flight are answered.
    early: bool,
}

impl Clock {
    fn new() -> Clock {
        let now = Instant::now();
        Clock {
            state: Mutex::new(ClockState {
                active: 0,
                bodies: 0,
                since: now,
                last_io: now,
                header_from: None,
                early: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ClockState> {
        // The state stays consistent whatever panicked while holding it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) {
        let now = Instant::now();
        let mut s = self.lock();
        s.last_io = now;
        if s.active == 0 {
            if s.header_from.is_none() {
                s.header_from = Some(now);
            }
        } else if s.bodies == 0 {
            s.early = true;
        }
    }

    fn wrote(&self) {
        self.lock().last_io = Instant::now();
    }

    /// A request's header was read (`body`: its body is still to come).
    fn begin(&self, body: bool) {
        let mut s = self.lock();
        s.active += 1;
        s.bodies += usize::from(body);
        s.header_from = None;
        s.early = false;
    }

    fn body_done(&self) {
        let mut s = self.lock();
        s.bodies = s.bodies.saturating_sub(1);
    }

    /// A request's answer was handed over (or the request dropped).
    fn end(&self) {
        let now = Instant::now();
        let mut s = self.lock();
        s.active = s.active.saturating_sub(1);
        if s.active == 0 {
            s.since = now;
            s.header_from = s.early.then_some(now);
            s.early = false;
        }
    }

    /// When the connection's task should look at the clock next: the
    /// deadline if it is due within the shorter bound, else one shorter
    /// bound from now (a header that begins later, or a request in flight
    /// that ends later, cannot pass a bound sooner than that). `None`: no
    /// bound is set.
    fn next_check(&self, limits: &ConnLimits) -> Option<Instant> {
        let step = match (limits.header, limits.idle) {
            (Some(h), Some(i)) => h.min(i),
            (h, i) => h.or(i)?,
        };
        let soonest = Instant::now() + step;
        Some(self.deadline(limits).map_or(soonest, |d| d.min(soonest)))
    }

    /// When the connection passes a bound, if it can now.
    fn deadline(&self, limits: &ConnLimits) -> Option<Instant> {
        let s = self.lock();
        if s.active > 0 {
            return None;
        }
        let idle = limits.idle.map(|d| s.since.max(s.last_io) + d);
        let header = limits.header.zip(s.header_from).map(|(d, t)| t + d);
        match (idle, header) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The connection's I/O, reporting every read and write to the clock (and
/// the bytes read to the recorder, when there is one).
struct Watched<I> {
    io: I,
    clock: Arc<Clock>,
    recorder: Option<Recorder>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.clock.read();
            if let Some(recorder) = &mut this.recorder {
                recorder.read(&buf.filled()[before..]);
            }
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.clock.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.clock.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The router as one connection's hyper service: each request counts as in
/// flight from its header to the end of its answer.
#[derive(Clone)]
struct Service {
    app: Router,
    clock: Arc<Clock>,
    heads: Option<Heads>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = hyper::Response<Answer>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut req: hyper::Request<Incoming>) -> Self::Future {
        // HTTP/1 requests come in the order they were read (raw_heads).
        if req.version() < hyper::Version::HTTP_2 {
            if let Some(head) = self.heads.as_ref().and_then(Heads::next) {
                head.restore(req.headers_mut());
            }
        }
        let arriving = !req.body().is_end_stream();
        self.clock.begin(arriving);
        let busy = Busy(self.clock.clone());
        let clock = self.clock.clone();
        let req: Request = req.map(|body| {
            Body::new(Arriving {
                body,
                clock: arriving.then_some(clock),
            })
        });
        let mut app = self.app.clone();
        Box::pin(async move {
            use tower::Service as _;
            // A router is always ready and never fails.
            let ready =
                std::future::poll_fn(|cx| tower::Service::<Request>::poll_ready(&mut app, cx))
                    .await;
            let response: Response = match ready {
                Ok(()) => match app.call(req).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                },
                Err(never) => match never {},
            };
            Ok(response.map(|body| Answer { body, _busy: busy }))
        })
    }
}

/// A request in flight; dropped with its answer (or with the request).
struct Busy(Arc<Clock>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// An answer's body, keeping its request in flight until it is all handed
/// to the connection.
struct Answer {
    body: Body,
    _busy: Busy,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request's body, telling the clock when it has all arrived (`clock`:
/// until then).
struct Arriving {
    body: Incoming,
    clock: Option<Arc<Clock>>,
}

impl Arriving {
    fn done(&mut self) {
        if let Some(clock) = self.clock.take() {
            clock.body_done();
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.done();
    }
}

impl HttpBody for Arriving {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.done(),
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.done(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
