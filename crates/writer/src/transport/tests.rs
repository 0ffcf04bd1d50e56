#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

use aws_sdk_dynamodb::config::endpoint::{Params, ResolveEndpoint};
use aws_sdk_dynamodb::config::{Credentials, Region, SharedCredentialsProvider};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};

fn creds() -> Credentials {
    Credentials::new("AKIDEXAMPLE", "secret", Some("token".into()), None, "test")
}

fn local(url: &str) -> SdkTransport {
    let sdk = SdkConfig::builder()
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(creds()))
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .build();
    SdkTransport::from_conf(aws_sdk_dynamodb::config::Builder::from(&sdk).endpoint_url(url))
}

/// One request on a loopback listener: answers `status` with `answer`
/// and returns what it received.
async fn one_exchange(
    status: &'static str,
    answer: &'static str,
) -> (String, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = conn.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
        }
        conn.write_all(
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{answer}",
                answer.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        String::from_utf8(buf).unwrap()
    });
    (url, server)
}

/// The pre-encoded body goes out unchanged, with its own length, the
/// BatchWriteItem target, a SigV4 authorization for `dynamodb` in the
/// region and the session token; an error answer comes back as sent.
#[tokio::test]
async fn the_pre_encoded_body_is_sent_signed_and_the_answer_returned() {
    let (url, server) = one_exchange(
        "400 Bad Request",
        r#"{"__type":"x#ThrottlingException","message":"m"}"#,
    )
    .await;
    let body = r#"{"RequestItems":{"t":[{"PutRequest":{"Item":{"pk":{"S":"a"}}}}]}}"#;
    let resp = local(&url)
        .batch_write_item(Bytes::from_static(body.as_bytes()))
        .await
        .unwrap();
    assert_eq!(resp.status, 400);
    assert_eq!(
        &resp.body[..],
        br#"{"__type":"x#ThrottlingException","message":"m"}"#
    );
    let req = server.await.unwrap();
    let lower = req.to_lowercase();
    assert!(lower.starts_with("post / http/1.1"), "{req}");
    assert!(lower.contains("x-amz-target: dynamodb_20120810.batchwriteitem"));
    assert!(lower.contains("x-amz-security-token: token"));
    assert!(lower.contains("authorization: aws4-hmac-sha256 credential=akidexample/"));
    assert!(lower.contains("/us-east-1/dynamodb/aws4_request"));
    assert!(lower.contains(&format!("content-length: {}\r\n", body.len())));
    assert!(req.ends_with(body), "{req}");
}

#[tokio::test]
async fn a_success_answer_is_returned_as_sent() {
    let answer =
        r#"{"UnprocessedItems":{},"ConsumedCapacity":[{"TableName":"t","CapacityUnits":1.0}]}"#;
    let (url, server) = one_exchange("200 OK", answer).await;
    let resp = local(&url)
        .batch_write_item(Bytes::from_static(b"{}"))
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(&resp.body[..], answer.as_bytes());
    server.await.unwrap();
}

#[tokio::test]
async fn nothing_listening_is_unavailable_not_invalid() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = local(&url)
        .batch_write_item(Bytes::from_static(b"{}"))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Unavailable(_)), "{err:?}");
}

#[test]
fn a_config_without_region_or_credentials_is_refused() {
    let no_region = SdkConfig::builder()
        .credentials_provider(SharedCredentialsProvider::new(creds()))
        .build();
    assert!(SdkTransport::new(&no_region).is_err());
    let no_creds = SdkConfig::builder()
        .region(Region::new("us-east-1"))
        .build();
    assert!(SdkTransport::new(&no_creds).is_err());
}

/// Records the URI of each request and answers 200.
#[derive(Debug, Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

impl HttpConnector for Capture {
    fn call(&self, request: aws_smithy_runtime_api::http::Request) -> HttpConnectorFuture {
        self.0.lock().unwrap().push(request.uri().to_owned());
        HttpConnectorFuture::ready(Ok(aws_smithy_runtime_api::http::Response::new(
            200.try_into().unwrap(),
            SdkBody::from("{}"),
        )))
    }
}

impl HttpClient for Capture {
    fn http_connector(
        &self,
        _settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

/// The issue's endpoint test: for each region and flag set, the URL a
/// write really goes to equals what `aws_sdk_dynamodb`'s resolver gives
/// for that configuration, and is pinned here (the SDK's rules, not
/// ours; a change in them shows up as a failure of this table).
#[tokio::test]
async fn writes_go_where_the_sdk_resolver_says() {
    let cases: &[(&str, bool, bool, &str)] = &[
        (
            "eu-west-1",
            false,
            false,
            "https://dynamodb.eu-west-1.amazonaws.com",
        ),
        (
            "us-east-1",
            true,
            false,
            "https://dynamodb-fips.us-east-1.amazonaws.com",
        ),
        (
            "cn-north-1",
            false,
            false,
            "https://dynamodb.cn-north-1.amazonaws.com.cn",
        ),
        (
            "us-gov-west-1",
            false,
            false,
            "https://dynamodb.us-gov-west-1.amazonaws.com",
        ),
        (
            "us-gov-west-1",
            true,
            false,
            "https://dynamodb.us-gov-west-1.amazonaws.com",
        ),
        (
            "us-iso-east-1",
            false,
            false,
            "https://dynamodb.us-iso-east-1.c2s.ic.gov",
        ),
        (
            "us-isob-east-1",
            false,
            false,
            "https://dynamodb.us-isob-east-1.sc2s.sgov.gov",
        ),
        (
            "eu-west-1",
            false,
            true,
            "https://dynamodb.eu-west-1.api.aws",
        ),
        (
            "cn-north-1",
            false,
            true,
            "https://dynamodb.cn-north-1.api.amazonwebservices.com.cn",
        ),
        (
            "us-east-1",
            true,
            true,
            "https://dynamodb-fips.us-east-1.api.aws",
        ),
        ("local", false, false, "http://localhost:8000"),
    ];
    for &(region, fips, dual_stack, want) in cases {
        let http = Capture::default();
        let sdk = SdkConfig::builder()
            .region(Region::new(region))
            .use_fips(fips)
            .use_dual_stack(dual_stack)
            .credentials_provider(SharedCredentialsProvider::new(creds()))
            .http_client(http.clone())
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let t = SdkTransport::new(&sdk).unwrap();
        let resp = t.batch_write_item(Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(resp.status, 200);
        let sent = http.0.lock().unwrap().pop().unwrap();
        let params = Params::builder()
            .region(region)
            .use_fips(fips)
            .use_dual_stack(dual_stack)
            .build()
            .unwrap();
        let resolved = aws_sdk_dynamodb::config::endpoint::DefaultResolver::new()
            .resolve_endpoint(&params)
            .await
            .unwrap();
        let case = format!("{region} fips={fips} dual_stack={dual_stack}");
        assert_eq!(sent.trim_end_matches('/'), resolved.url(), "{case}");
        assert_eq!(resolved.url(), want, "{case}");
    }
}

/// Credentials that carry an account ID get DynamoDB's account-based
/// endpoint, as the SDK's own client does.
#[tokio::test]
async fn account_id_credentials_get_the_account_endpoint() {
    let http = Capture::default();
    let with_account = Credentials::builder()
        .access_key_id("AKID")
        .secret_access_key("secret")
        .account_id("111122223333")
        .provider_name("test")
        .build();
    let sdk = SdkConfig::builder()
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(with_account))
        .http_client(http.clone())
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .build();
    SdkTransport::new(&sdk)
        .unwrap()
        .batch_write_item(Bytes::from_static(b"{}"))
        .await
        .unwrap();
    let sent = http.0.lock().unwrap().pop().unwrap();
    assert_eq!(sent, "https://111122223333.ddb.us-east-1.amazonaws.com/");
}

/// Other calls on the writer's client (the readiness probe) are not
/// touched by the body swap: ListTables goes out with its own body.
#[tokio::test]
async fn the_probe_is_sent_as_the_sdk_builds_it() {
    let (url, server) = one_exchange("200 OK", r#"{"TableNames":[]}"#).await;
    local(&url).probe().await.unwrap();
    let req = server.await.unwrap();
    assert!(
        req.to_lowercase()
            .contains("x-amz-target: dynamodb_20120810.listtables"),
        "{req}"
    );
    assert!(req.ends_with(r#"{"Limit":1}"#), "{req}");
}
