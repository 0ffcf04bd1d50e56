//! SigV4 for the one request [`HttpTransport`](crate::HttpTransport) sends:
//! `POST /` with a fixed set of headers.
//!
//! `aws-sigv4` handles any request, and pays for it on every call: header
//! maps, a canonical-request string built by formatting, and the four-HMAC
//! signing-key derivation (about 0.35 CPU-µs per record in `bench/pipeline-cpu`,
//! besides the body hash every signature needs). Here the canonical request is
//! written straight into one buffer and the signing key is cached per day and
//! credentials. Endpoints with a path other than `/` fall back to `aws-sigv4`
//! (the transport checks [`FastSigner::applies`]); a test compares both
//! signers' headers byte for byte.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The headers every call carries, with the values signed.
pub(crate) const CONTENT_TYPE: &str = "application/x-amz-json-1.0";
pub(crate) const TARGET: &str = "DynamoDB_20120810.BatchWriteItem";

/// Headers to add to a request: `x-amz-date`, `authorization`, and the
/// session token when the credentials have one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signed {
    pub(crate) amz_date: String,
    pub(crate) authorization: String,
    pub(crate) token: Option<String>,
}

/// The signing key of one day and one set of credentials.
struct DayKey {
    date: String,
    access_key: String,
    secret: String,
    key: [u8; 32],
}

/// Signs `POST /` requests for one host and region.
pub(crate) struct FastSigner {
    /// The `host` header value: host, and the port unless it is the
    /// scheme's default (what hyper sends, and what `aws-sigv4` signs).
    host: String,
    region: String,
    key: Mutex<Option<DayKey>>,
}

impl std::fmt::Debug for FastSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastSigner")
            .field("host", &self.host)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl FastSigner {
    /// A signer for `uri`, if its path is `/` with no query (every DynamoDB
    /// endpoint); `None` sends the caller to `aws-sigv4`.
    pub(crate) fn applies(uri: &http::Uri, region: &str) -> Option<FastSigner> {
        if uri.path() != "/" || uri.query().is_some() {
            return None;
        }
        let host = uri.host()?;
        let default_port = match uri.scheme_str() {
            Some("https") => 443,
            Some("http") => 80,
            _ => return None,
        };
        let host = match uri.port_u16() {
            Some(p) if p != default_port => format!("{host}:{p}"),
            _ => host.to_owned(),
        };
        Some(FastSigner {
            host,
            region: region.to_owned(),
            key: Mutex::new(None),
        })
    }

    /// The signature headers for a call with `body` at `now`.
    pub(crate) fn sign(&self, creds: &Credentials, body: &[u8], now: SystemTime) -> Signed {
        let t = chrono::DateTime::<chrono::Utc>::from(now);
        let amz_date = t.format("%Y%m%dT%H%M%SZ").to_string();
        let date = &amz_date[..8];
        let token = creds.session_token();

        let mut signed_headers = String::from("content-type;host;x-amz-date;");
        if token.is_some() {
            signed_headers.push_str("x-amz-security-token;");
        }
        signed_headers.push_str("x-amz-target");

        let mut canonical = String::with_capacity(512);
        canonical.push_str("POST\n/\n\ncontent-type:");
        canonical.push_str(CONTENT_TYPE);
        canonical.push_str("\nhost:");
        canonical.push_str(&self.host);
        canonical.push_str("\nx-amz-date:");
        canonical.push_str(&amz_date);
        if let Some(tok) = token {
            canonical.push_str("\nx-amz-security-token:");
            canonical.push_str(tok.trim());
        }
        canonical.push_str("\nx-amz-target:");
        canonical.push_str(TARGET);
        canonical.push_str("\n\n");
        canonical.push_str(&signed_headers);
        canonical.push('\n');
        push_hex(&mut canonical, &Sha256::digest(body));

        let scope = format!("{date}/{}/dynamodb/aws4_request", self.region);
        let mut to_sign = String::with_capacity(160);
        to_sign.push_str("AWS4-HMAC-SHA256\n");
        to_sign.push_str(&amz_date);
        to_sign.push('\n');
        to_sign.push_str(&scope);
        to_sign.push('\n');
        push_hex(&mut to_sign, &Sha256::digest(canonical.as_bytes()));

        let key = self.day_key(creds, date);
        let mut sig = String::with_capacity(64);
        push_hex(&mut sig, &hmac(&key, to_sign.as_bytes()));
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={sig}",
            creds.access_key_id()
        );
        Signed {
            amz_date,
            authorization,
            token: token.map(str::to_owned),
        }
    }

    /// The day's signing key, derived once per day and credentials.
    fn day_key(&self, creds: &Credentials, date: &str) -> [u8; 32] {
        let mut cached = self.key.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = cached.as_ref()
            && k.date == date
            && k.access_key == creds.access_key_id()
            && k.secret == creds.secret_access_key()
        {
            return k.key;
        }
        let secret = format!("AWS4{}", creds.secret_access_key());
        let k_date = hmac(secret.as_bytes(), date.as_bytes());
        let k_region = hmac(&k_date, self.region.as_bytes());
        let k_service = hmac(&k_region, b"dynamodb");
        let key = hmac(&k_service, b"aws4_request");
        *cached = Some(DayKey {
            date: date.to_owned(),
            access_key: creds.access_key_id().to_owned(),
            secret: creds.secret_access_key().to_owned(),
            key,
        });
        key
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length, so this never falls back; the zero key
    // would only make signatures DynamoDB rejects, never a silent success.
    let mut m = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => HmacSha256::new(&Default::default()),
    };
    m.update(data);
    m.finalize().into_bytes().into()
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
}
