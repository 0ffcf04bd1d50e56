//! A switchable TCP proxy on 127.0.0.1 between a worker and one emulator,
//! for tests of a backend that fails *while* the worker runs: it passes
//! bytes through, refuses connections, freezes (accepts and holds every
//! connection, forwarding nothing), or answers every HTTP request with an
//! AccessDeniedException.
//!
//! Why not stop the emulator: CI shares one moto among parallel tests, so a
//! test may only break its own path to it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward both ways.
    Pass,
    /// Nothing listens: connecting fails with "connection refused"; open
    /// connections are closed.
    Refuse,
    /// Frozen backend: connections are accepted and held, nothing is
    /// forwarded or answered (requests hang until the client gives up).
    Hang,
    /// Every HTTP request gets a 400 `AccessDeniedException` (the DynamoDB
    /// JSON protocol's shape); open connections are closed first.
    Deny,
}

/// The proxy; it stops (and closes every connection) when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT`, to use as the service's endpoint.
    pub url: String,
    mode: watch::Sender<Fault>,
    stop: CancellationToken,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (an `http://host:port` URL) in `Pass`.
    pub async fn start(upstream: &str) -> FaultProxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let (mode, rx) = watch::channel(Fault::Pass);
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, addr, upstream, rx, stop.clone()));
        FaultProxy {
            url: format!("http://{addr}"),
            mode,
            stop,
        }
    }

    /// Switches the fault; open connections follow at once.
    pub fn set(&self, fault: Fault) {
        self.mode.send_if_modified(|m| {
            let changed = *m != fault;
            *m = fault;
            changed
        });
    }
}

async fn serve(
    first: TcpListener,
    addr: SocketAddr,
    upstream: String,
    mut mode: watch::Receiver<Fault>,
    stop: CancellationToken,
) {
    let mut listener = Some(first);
    loop {
        let fault = *mode.borrow_and_update();
        if fault == Fault::Refuse {
            // Closing the listening socket is what makes connects fail.
            listener = None;
        } else if listener.is_none() {
            listener = Some(rebind(addr).await);
        }
        tokio::select! {
            () = stop.cancelled() => return,
            changed = mode.changed() => if changed.is_err() { return },
            accepted = accept(listener.as_ref()) => {
                if let Ok((conn, _)) = accepted {
                    tokio::spawn(connection(conn, upstream.clone(), mode.clone(), stop.clone()));
                }
            }
        }
    }
}

async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Binds `addr` again (the port the worker was given); tokio listeners
/// reuse addresses, so only a brief retry is needed.
async fn rebind(addr: SocketAddr) -> TcpListener {
    for _ in 0..50 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot bind {addr} again");
}

async fn connection(
    mut client: TcpStream,
    upstream: String,
    mut mode: watch::Receiver<Fault>,
    stop: CancellationToken,
) {
    let fault = *mode.borrow_and_update();
    match fault {
        Fault::Refuse => {}
        Fault::Hang => hold(&mut mode, &stop).await,
        Fault::Deny => {
            tokio::select! {
                () = deny(&mut client) => {}
                _ = mode.changed() => {}
                () = stop.cancelled() => {}
            }
        }
        Fault::Pass => {
            let Ok(mut server) = TcpStream::connect(&upstream).await else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                () = stop.cancelled() => {}
                () = left_pass(&mut mode) => {
                    if *mode.borrow() == Fault::Hang {
                        // Frozen mid-connection: keep both ends open, silent.
                        hold(&mut mode, &stop).await;
                    }
                }
            }
        }
    }
}

/// Completes when the mode is no longer `Pass`.
async fn left_pass(mode: &mut watch::Receiver<Fault>) {
    let _ = mode.wait_for(|m| *m != Fault::Pass).await;
}

/// Holds the connection (the caller's sockets stay open) while frozen.
async fn hold(mode: &mut watch::Receiver<Fault>, stop: &CancellationToken) {
    tokio::select! {
        _ = mode.wait_for(|m| *m != Fault::Hang) => {}
        () = stop.cancelled() => {}
    }
}

/// Answers each HTTP/1.1 request on `client` with AccessDeniedException.
async fn deny(client: &mut TcpStream) {
    let body = r#"{"__type":"com.amazon.coral.service#AccessDeniedException","message":"User: arn:aws:iam::000000000000:user/test is not authorized to perform this action (injected by the test proxy)"}"#;
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-RequestId: fault-proxy\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut buf = Vec::new();
    loop {
        // Read one request: headers, then Content-Length bytes of body.
        let header_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let headers = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
        let length: usize = headers
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < header_end + length {
            let mut chunk = [0u8; 8192];
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..header_end + length);
        if client.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that answers "pong" to every connection's first bytes.
    async fn pong_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = c.read(&mut b).await {
                        if n == 0 || c.write_all(b"pong").await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    async fn ping(addr: &str) -> std::io::Result<Vec<u8>> {
        let mut c = TcpStream::connect(addr).await?;
        c.write_all(b"ping").await?;
        let mut b = vec![0u8; 4];
        tokio::time::timeout(Duration::from_millis(500), c.read_exact(&mut b))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        Ok(b)
    }

    #[tokio::test]
    async fn each_fault_does_what_it_says() {
        let proxy = FaultProxy::start(&pong_server().await).await;
        let addr = proxy.url.trim_start_matches("http://").to_string();
        assert_eq!(ping(&addr).await.unwrap(), b"pong");

        proxy.set(Fault::Refuse);
        let mut refused = false;
        for _ in 0..50 {
            // The switch is asynchronous: connections may still be taken
            // (or reset) for a moment, then none is.
            if let Err(e) = TcpStream::connect(&addr).await
                && e.kind() == std::io::ErrorKind::ConnectionRefused
            {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(refused, "the port still accepts connections");

        proxy.set(Fault::Hang);
        let e = ping_frozen(&addr).await;
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");

        proxy.set(Fault::Deny);
        let mut c = TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
            .await
            .unwrap();
        let mut b = vec![0u8; 600];
        let n = c.read(&mut b).await.unwrap();
        let text = String::from_utf8_lossy(&b[..n]);
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        assert!(text.contains("AccessDeniedException"), "{text}");

        proxy.set(Fault::Pass);
        assert_eq!(ping(&addr).await.unwrap(), b"pong");
    }

    /// A ping through a frozen proxy: connects (after the rebind), then
    /// times out.
    async fn ping_frozen(addr: &str) -> std::io::Error {
        for _ in 0..50 {
            match ping(addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return e,
                Ok(b) => panic!("a frozen proxy answered {b:?}"),
            }
        }
        panic!("the proxy never listened again");
    }
}
