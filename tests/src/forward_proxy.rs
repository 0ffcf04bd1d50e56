//! A small HTTP forward proxy on 127.0.0.1 for tests of `HTTP_PROXY` /
//! `NO_PROXY`: it forwards absolute-form requests to their host and counts
//! them by AWS operation (`X-Amz-Target`, e.g. `BatchWriteItem`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// A running forward proxy; it stops when dropped.
#[derive(Debug)]
pub struct ForwardProxy {
    /// `http://127.0.0.1:PORT`, the value for `HTTP_PROXY`.
    pub url: String,
    counts: Arc<Mutex<HashMap<String, u64>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may have ended already.
            let _ = stop.send(());
        }
    }
}

impl ForwardProxy {
    /// Requests forwarded for `operation` (the part of `X-Amz-Target` after
    /// the dot; `other` for requests without one).
    pub fn count(&self, operation: &str) -> u64 {
        self.counts
            .lock()
            .map_or(0, |c| c.get(operation).copied().unwrap_or(0))
    }

    /// Every request forwarded.
    pub fn total(&self) -> u64 {
        self.counts.lock().map_or(0, |c| c.values().sum())
    }
}

/// Starts a forward proxy on an ephemeral loopback port.
pub async fn start_forward_proxy() -> ForwardProxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let url = format!("http://{}", listener.local_addr().expect("bound address"));
    let counts = Arc::new(Mutex::new(HashMap::new()));
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task_counts = counts.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = &mut stopped => return,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => return,
                },
            };
            let client = client.clone();
            let counts = task_counts.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    forward(req, client.clone(), counts.clone())
                });
                // A client closing its connection ends this; nothing to report.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    ForwardProxy {
        url,
        counts,
        stop: Some(stop),
    }
}

async fn forward(
    req: Request<Incoming>,
    client: Client<HttpConnector, Full<Bytes>>,
    counts: Arc<Mutex<HashMap<String, u64>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, text: String| {
        let mut r = Response::new(Full::new(Bytes::from(text)));
        *r.status_mut() = status;
        Ok(r)
    };
    // A forward proxy gets the absolute URI; anything else was not meant for it.
    if req.uri().scheme_str() != Some("http") {
        return reply(
            StatusCode::BAD_REQUEST,
            format!("not a proxy request: {}", req.uri()),
        );
    }
    let op = req
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split_once('.'))
        .map_or("other", |(_, op)| op)
        .to_owned();
    if let Ok(mut c) = counts.lock() {
        *c.entry(op).or_default() += 1;
    }
    let (mut parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, e.to_string()),
    };
    for hop in ["proxy-connection", "proxy-authorization", "connection"] {
        parts.headers.remove(hop);
    }
    let upstream = Request::from_parts(parts, Full::new(body));
    match client.request(upstream).await {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            match body.collect().await {
                Ok(b) => Ok(Response::from_parts(parts, Full::new(b.to_bytes()))),
                Err(e) => reply(StatusCode::BAD_GATEWAY, e.to_string()),
            }
        }
        Err(e) => reply(StatusCode::BAD_GATEWAY, e.to_string()),
    }
}
