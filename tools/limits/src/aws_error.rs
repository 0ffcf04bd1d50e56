//! Error responses exactly as the AWS services send them, so SDKs parse and
//! retry them as they would against AWS.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use serde_json::json;

/// Content type of DynamoDB (JSON 1.0) responses.
pub const DYNAMODB_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// Content type of Kinesis (JSON 1.1) responses.
pub const KINESIS_CONTENT_TYPE: &str = "application/x-amz-json-1.1";

/// DynamoDB's message for a throttled provisioned table.
pub const DDB_THROTTLE_MESSAGE: &str = "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.";
/// DynamoDB's message for a throttled on-demand table or hot key.
pub const DDB_ON_DEMAND_THROTTLE_MESSAGE: &str = "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly. If exceptions persist, check if you have a hot key: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html.";
/// More than 25 requests in one BatchWriteItem.
pub const DDB_TOO_MANY_ITEMS: &str = "Too many items requested for the BatchWriteItem call";
/// The same key twice in one BatchWriteItem.
pub const DDB_DUPLICATE_KEYS: &str = "Provided list of item keys contains duplicates";
/// An item over 400 KB.
pub const DDB_ITEM_TOO_LARGE: &str = "Item size has exceeded the maximum allowed size";
/// A request body over 16 MB. (Wording not confirmed against AWS.)
pub const DDB_REQUEST_TOO_LARGE: &str =
    "Request size has exceeded the maximum allowed size of 16777216 bytes";

/// A JSON response with a status, content type and body.
pub fn json_response(
    status: StatusCode,
    content_type: &str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

/// A DynamoDB error: HTTP 400 (or `status`) with `__type` in the service's namespace.
pub fn dynamodb_error(status: StatusCode, type_name: &str, message: &str) -> Response<Full<Bytes>> {
    let body = json!({ "__type": type_name, "message": message }).to_string();
    json_response(status, DYNAMODB_CONTENT_TYPE, body)
}

/// `com.amazon.coral.validate#ValidationException` with `message`.
pub fn dynamodb_validation(message: &str) -> Response<Full<Bytes>> {
    dynamodb_error(
        StatusCode::BAD_REQUEST,
        "com.amazon.coral.validate#ValidationException",
        message,
    )
}

/// ProvisionedThroughputExceededException, naming the table and which
/// limit was hit in `ThrottlingReasons` (as AWS has sent since 2025).
pub fn dynamodb_throttle(table: &str, reason: &str, on_demand: bool) -> Response<Full<Bytes>> {
    let message = if on_demand {
        DDB_ON_DEMAND_THROTTLE_MESSAGE
    } else {
        DDB_THROTTLE_MESSAGE
    };
    let body = json!({
        "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message": message,
        "ThrottlingReasons": [{
            "reason": reason,
            "resource": format!("arn:aws:dynamodb:us-east-1:000000000000:table/{table}"),
        }],
    })
    .to_string();
    json_response(StatusCode::BAD_REQUEST, DYNAMODB_CONTENT_TYPE, body)
}

/// ResourceNotFoundException for a table the upstream does not have.
pub fn dynamodb_not_found() -> Response<Full<Bytes>> {
    dynamodb_error(
        StatusCode::BAD_REQUEST,
        "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException",
        "Requested resource not found",
    )
}

/// Kinesis's per-shard throttle message.
pub fn kinesis_throttle_message(stream: &str, shard: &str) -> String {
    format!("Rate exceeded for shard {shard} in stream {stream} under account 000000000000.")
}

/// Kinesis ProvisionedThroughputExceededException (HTTP 400, JSON 1.1).
pub fn kinesis_throttle(stream: &str, shard: &str) -> Response<Full<Bytes>> {
    let body = json!({
        "__type": "ProvisionedThroughputExceededException",
        "message": kinesis_throttle_message(stream, shard),
    })
    .to_string();
    json_response(StatusCode::BAD_REQUEST, KINESIS_CONTENT_TYPE, body)
}
