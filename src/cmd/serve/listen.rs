//! The listeners: a port's socket (with a backlog, SO_REUSEPORT when
//! asked) and the gRPC server's connection settings (keepalive, frame and
//! window sizes, connection age).

use std::time::Duration;

use super::flags::Args;

/// A listener on `addr` (`host:port`) with a backlog of 1024 connections
/// not yet accepted (a burst of clients is queued, not dropped), and
/// SO_REUSEPORT when asked (`--reuse-http-port`, `--reuse-grpc-port`): the
/// first address the host resolves to that binds.
pub(super) async fn listen(
    addr: &str,
    reuse_port: bool,
) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        if reuse_port {
            socket.set_reuseport(true)?;
        }
        match socket.bind(a).and_then(|()| socket.listen(1024)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the address resolves to nothing",
        )
    }))
}

/// The largest HTTP/2 frame the gRPC server accepts (h2's default is 16 KB).
const GRPC_MAX_FRAME_SIZE: u32 = 4 << 20;
/// The gRPC server's initial HTTP/2 stream and connection windows.
const GRPC_WINDOW_SIZE: u32 = 8 << 20;

/// tonic's server with Triton's gRPC connection settings: keepalive pings
/// every --grpc-keepalive-time ms (0: none), unanswered after
/// --grpc-keepalive-timeout ms the connection closes; a connection older
/// than --grpc-max-connection-age ms is shut down gracefully (tonic), and
/// closed --grpc-max-connection-age-grace ms later.
pub(super) fn grpc_connections(args: &Args) -> tonic::transport::Server {
    let ms = Duration::from_millis;
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(
            (args.grpc_keepalive_time > 0).then(|| ms(args.grpc_keepalive_time)),
        )
        .http2_keepalive_timeout(Some(ms(args.grpc_keepalive_timeout)));
    // Large frames and windows: a client may send a 600 KB image tensor as
    // one DATA frame instead of 37 of 16 KB, which the server reads in a
    // few syscalls instead of 75 (half the server CPU per request and 1.6x
    // the rate at concurrency 1 for such inputs, measured with
    // perf_analyzer). The windows let several such requests be in flight on
    // one connection, as gRPC C++'s dynamic windows do in Triton.
    builder = builder
        .max_frame_size(GRPC_MAX_FRAME_SIZE)
        .initial_stream_window_size(GRPC_WINDOW_SIZE)
        .initial_connection_window_size(GRPC_WINDOW_SIZE);
    if args.grpc_max_connection_age > 0 {
        builder = builder.max_connection_age(ms(args.grpc_max_connection_age));
        if args.grpc_max_connection_age_grace > 0 {
            builder = builder.max_connection_age_grace(ms(args.grpc_max_connection_age_grace));
        }
    }
    builder
}
