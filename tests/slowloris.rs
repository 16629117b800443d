//! Slowloris bounds on the HTTP port of a real `trtis serve`
//! (`--http-header-timeout-secs`, `--http-idle-timeout-secs`): a header
//! that trickles in or stalls is cut at its bound while other clients are
//! served; an idle keep-alive connection (or one that sends nothing) is
//! closed at the idle bound, and the header bound does not count idle time;
//! hundreds of half-open connections all go, and the server's descriptors
//! with them; keep-alive, pipelining and a slowly arriving body (its header
//! complete) still work; a stop closes idle connections at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::http::get;
use crate::util::{write_model, Serve};

fn repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    write_model(
        repo.path(),
        "echo",
        "backend: \"identity\"\nmax_batch_size: 1\n\
         input [ { name: \"IN\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n\
         output [ { name: \"OUT\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n",
    );
    repo
}

/// A server with the given bounds, in seconds.
fn serve(repo: &tempfile::TempDir, header: u64, idle: u64) -> Serve {
    let (header, idle) = (header.to_string(), idle.to_string());
    Serve::start(
        repo.path(),
        &[
            "--http-header-timeout-secs",
            &header,
            "--http-idle-timeout-secs",
            &idle,
            "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        &[],
    )
}

fn connect(server: &Serve) -> TcpStream {
    let tcp = TcpStream::connect(server.addr()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp
}

/// Waits (up to the socket's read timeout) for the server to close `tcp`;
/// how long that took from `since`. Panics if data arrives instead.
fn closed_after(tcp: &mut TcpStream, since: Instant) -> Duration {
    let mut buf = [0u8; 256];
    match tcp.read(&mut buf) {
        Ok(0) => since.elapsed(),
        Ok(n) => panic!(
            "expected the connection closed, got {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => since.elapsed(),
        Err(e) => panic!("expected the connection closed, got {e}"),
    }
}

/// Whether the server has left `tcp` open for `wait` (no data, no close).
fn open_for(tcp: &TcpStream, wait: Duration) -> bool {
    tcp.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 1];
    let open = matches!(
        (&*tcp).read(&mut buf),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    );
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    open
}

/// Reads one HTTP/1.1 response with a Content-Length: status and body.
fn read_response(r: &mut BufReader<TcpStream>) -> (u16, String) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {line:?}"));
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0u8; length];
    r.read_exact(&mut body).unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

const BODY: &str = r#"{"inputs":[{"name":"IN","datatype":"INT32","shape":[1,1],"data":[7]}]}"#;

#[test]
fn a_trickling_header_is_cut_at_the_bound_while_others_are_served() {
    let repo = repo();
    let server = serve(&repo, 1, 30);
    let mut tcp = connect(&server);
    let start = Instant::now();
    // One byte every 150 ms: the header never completes, the connection
    // is never silent.
    let mut writer = tcp.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for b in b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 70\r\nX-Slow: "
            .iter()
            .cycle()
        {
            if writer.write_all(&[*b]).is_err() || start.elapsed() > Duration::from_secs(8) {
                return;
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    // Others are served meanwhile.
    std::thread::sleep(Duration::from_millis(300));
    let (status, body) = get(server.addr(), "/v2/health/ready");
    assert_eq!(status, 200, "{body}");
    let took = closed_after(&mut tcp, start);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "closed after {took:?}"
    );
    trickle.join().unwrap();
    // A stalled partial header too.
    let mut tcp = connect(&server);
    tcp.write_all(b"GET /v2/health/live HTTP/1.1\r\nHo")
        .unwrap();
    let start = Instant::now();
    let took = closed_after(&mut tcp, start);
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
    let (status, _) = get(server.addr(), "/v2/health/live");
    assert_eq!(status, 200);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_at_the_idle_bound() {
    let repo = repo();
    // The header bound (1 s) does not count idle time: an idle keep-alive
    // connection lasts the idle bound (3 s).
    let server = serve(&repo, 1, 3);
    let tcp = connect(&server);
    let mut reader = BufReader::new(tcp.try_clone().unwrap());
    (&tcp)
        .write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader).0, 200);
    let answered = Instant::now();
    assert!(
        open_for(&tcp, Duration::from_millis(1800)),
        "closed before the idle bound"
    );
    // Still usable, and the idle clock restarts after this answer.
    (&tcp)
        .write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader).0, 200);
    let answered_again = Instant::now();
    let took = closed_after(reader.get_mut(), answered_again);
    assert!(
        took >= Duration::from_millis(2800) && took < Duration::from_secs(5),
        "closed {took:?} after the second answer ({:?} after the first)",
        answered.elapsed()
    );
    // A connection that sends nothing goes at the idle bound too.
    let mut silent = connect(&server);
    let start = Instant::now();
    let took = closed_after(&mut silent, start);
    assert!(
        took >= Duration::from_millis(2800) && took < Duration::from_secs(5),
        "closed after {took:?}"
    );
}

#[test]
fn hundreds_of_half_open_connections_are_all_closed_and_their_descriptors_freed() {
    const N: usize = 200;
    let repo = repo();
    let server = serve(&repo, 2, 2);
    let pid = server.pid();
    let before = open_fds(pid);
    let start = Instant::now();
    let mut conns = Vec::with_capacity(N);
    for i in 0..N {
        let mut tcp = connect(&server);
        // Half send a partial header, half nothing at all.
        if i % 2 == 0 {
            tcp.write_all(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost:")
                .unwrap();
        }
        conns.push(tcp);
        if conns.len() % 50 == 0 {
            // In batches the server's accept queue holds (a listen backlog
            // of 128: a burst past it has its SYNs retried a second later).
            let deadline = Instant::now() + Duration::from_millis(500);
            while open_fds(pid) < before + conns.len() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    // The server holds them all...
    let peak = open_fds(pid);
    assert!(
        peak >= before + N * 9 / 10,
        "{peak} descriptors open (from {before}) after {:?}",
        start.elapsed()
    );
    // ...and closes every one within the bound.
    for tcp in &mut conns {
        let took = closed_after(tcp, start);
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut now = open_fds(pid);
    while now > before + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        now = open_fds(pid);
    }
    assert!(
        now <= before + 2,
        "{now} descriptors open (from {before}, peak {peak})"
    );
    let (status, _) = get(server.addr(), "/v2/health/ready");
    assert_eq!(status, 200);
}

#[test]
fn keep_alive_pipelining_and_a_slow_body_still_work() {
    let repo = repo();
    let server = serve(&repo, 1, 1);
    let tcp = connect(&server);
    let mut reader = BufReader::new(tcp.try_clone().unwrap());
    // Several requests one after the other on one connection...
    for _ in 0..3 {
        (&tcp)
            .write_all(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut reader).0, 200);
    }
    // ...and pipelined, in one write.
    let infer = format!(
        "POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let pipelined = format!("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n{infer}{infer}");
    (&tcp).write_all(pipelined.as_bytes()).unwrap();
    assert_eq!(read_response(&mut reader).0, 200);
    for _ in 0..2 {
        let (status, body) = read_response(&mut reader);
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"data\":[7]"), "{body}");
    }
    // A body that arrives in pieces, with pauses past both bounds: its
    // header was whole, so neither bound applies.
    let head = format!(
        "POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    );
    (&tcp).write_all(head.as_bytes()).unwrap();
    let start = Instant::now();
    for piece in BODY.as_bytes().chunks(BODY.len() / 2 + 1) {
        std::thread::sleep(Duration::from_millis(1300));
        (&tcp).write_all(piece).unwrap();
    }
    let (status, body) = read_response(&mut reader);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"data\":[7]"), "{body}");
    assert!(start.elapsed() >= Duration::from_millis(2600));
}

#[test]
fn a_stop_closes_idle_keep_alive_connections_at_once() {
    let repo = repo();
    let server = serve(&repo, 30, 120);
    let tcp = connect(&server);
    let mut reader = BufReader::new(tcp.try_clone().unwrap());
    (&tcp)
        .write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader).0, 200);
    let start = Instant::now();
    server.interrupt();
    let took = closed_after(reader.get_mut(), start);
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}
