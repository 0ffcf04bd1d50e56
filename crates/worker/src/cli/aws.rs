//! The command line's side of AWS: what a person needs when a call fails.
//!
//! - [`Journal`](super::journal::Journal) (in `journal.rs`): every AWS
//!   attempt of a command, from which [`explain`] names the failed call.
//! - [`Origins`]: where the endpoint, region and profile came from (flag,
//!   variable, profile, default), for messages.
//! - [`check_setup`]: a missing region, missing credentials or an unknown
//!   profile, found before any call: [`Setup`] (exit 78) with the fix.
//! - [`explain`]: a failed command's exit status and its message: one line
//!   naming the operation, the endpoint and its origin, and a hint; the
//!   error chain only under `-v`.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_smithy_runtime_api::client::result::ConnectorError;

use crate::config::LoadError;
use crate::tools::verify::VerifyError;

use super::exit::{EXIT_CONFIG, EXIT_UNAVAILABLE, EXIT_USAGE, Exit, Failed, Unavailable, Usage};
use super::journal::{Call, Journal, Problem, secs};

/// Exit status when AWS refused the caller's identity (EX_NOPERM).
pub(crate) const EXIT_DENIED: u8 = 77;

/// Where the endpoint, region and profile came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    /// `--endpoint-url`.
    pub(crate) endpoint_flag: Option<String>,
    /// The region and where it came from.
    pub(crate) region: Option<(String, String)>,
    /// The profile and where it came from.
    pub(crate) profile: Option<(String, String)>,
    /// `AWS_ENDPOINT_URL*` variables set.
    pub(crate) endpoint_vars: BTreeMap<String, String>,
}

impl Origins {
    /// Where `call`'s endpoint came from, in words.
    pub(crate) fn endpoint_origin(&self, call: &Call) -> String {
        if self.endpoint_flag.is_some() {
            return "--endpoint-url".into();
        }
        let service_var = format!("AWS_ENDPOINT_URL_{}", call.service.to_ascii_uppercase());
        for var in [service_var.as_str(), "AWS_ENDPOINT_URL"] {
            if self.endpoint_vars.contains_key(var) {
                return var.into();
            }
        }
        match &self.region {
            Some((region, from)) => format!("the {region} endpoint; region from {from}"),
            None => "the default endpoint".into(),
        }
    }

    /// `DynamoDB DescribeTable at http://127.0.0.1:9 (from --endpoint-url)`.
    pub(crate) fn at(&self, call: &Call) -> String {
        if call.endpoint.is_empty() {
            return call.name();
        }
        format!(
            "{} at {} (from {})",
            call.name(),
            call.endpoint,
            self.endpoint_origin(call)
        )
    }

    /// What to check when nothing answered at `call`'s endpoint.
    fn unreachable_hint(&self, call: &Call) -> String {
        let origin = self.endpoint_origin(call);
        if origin == "--endpoint-url" || origin.starts_with("AWS_ENDPOINT_URL") {
            format!(
                "is something listening at {}? Check {origin}, or drop it to use AWS",
                call.endpoint
            )
        } else {
            "check the network, the region (--region, AWS_REGION) and any proxy (HTTPS_PROXY)"
                .into()
        }
    }
}

/// A local AWS setup that cannot work: no call is made (exit 78).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Setup {
    pub(crate) message: String,
    pub(crate) hint: String,
}

/// The profile's name and where it was chosen, when one was chosen.
fn chosen_profile(flag: Option<&str>) -> Option<(String, String)> {
    if let Some(p) = flag {
        return Some((p.to_string(), "--profile".into()));
    }
    std::env::var("AWS_PROFILE")
        .ok()
        .filter(|p| !p.is_empty())
        .map(|p| (p, "AWS_PROFILE".into()))
}

/// The region's source: flag, variable, or the profile.
fn region_origin(
    flag: Option<&str>,
    sdk: &aws_config::SdkConfig,
    profile: &str,
) -> Option<(String, String)> {
    let region = sdk.region()?.to_string();
    let from = if flag.is_some() {
        "--region".to_string()
    } else if std::env::var("AWS_REGION").is_ok_and(|r| r == region) {
        "AWS_REGION".into()
    } else if std::env::var("AWS_DEFAULT_REGION").is_ok_and(|r| r == region) {
        "AWS_DEFAULT_REGION".into()
    } else {
        format!("profile {profile}")
    };
    Some((region, from))
}

/// Checks what the SDK needs before any call: the chosen profile exists, a
/// region is set, credentials load. Returns where things came from.
pub(crate) async fn check_setup(
    sdk: &aws_config::SdkConfig,
    profile_flag: Option<&str>,
    region_flag: Option<&str>,
    endpoint_flag: Option<&str>,
) -> Result<Origins, Setup> {
    use aws_config::profile::parser::load;
    use aws_types::os_shim_internal::{Env, Fs};
    let chosen = chosen_profile(profile_flag);
    // The SDK's own files and rules (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE).
    let files = load(&Fs::real(), &Env::real(), &Default::default(), None).await;
    let known: Vec<String> = files
        .as_ref()
        .map(|f| f.profiles().map(str::to_string).collect())
        .unwrap_or_default();
    if let Some((name, from)) = &chosen
        && !known.iter().any(|k| k == name)
    {
        return Err(Setup {
            message: format!(
                "AWS profile `{name}` (from {from}) is not in the shared config or credentials files"
            ),
            hint: if known.is_empty() {
                "there are no profiles: create it with `aws configure --profile NAME`, or use the default credential chain".into()
            } else {
                format!(
                    "profiles there: {}; or create it with `aws configure --profile {name}`",
                    known.join(", ")
                )
            },
        });
    }
    let profile = chosen
        .clone()
        .map_or_else(|| "default".to_string(), |(n, _)| n);
    let mut origins = Origins {
        endpoint_flag: endpoint_flag.map(str::to_string),
        region: region_origin(region_flag, sdk, &profile),
        profile: chosen,
        endpoint_vars: std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_ENDPOINT_URL"))
            .collect(),
    };
    if origins.region.is_none() {
        return Err(Setup {
            message: "no AWS region".into(),
            hint: format!(
                "give --region, set AWS_REGION, or set `region` in profile {profile} (`aws configure`)"
            ),
        });
    }
    let Some(provider) = sdk.credentials_provider() else {
        return Err(no_credentials(&profile, "no credential provider"));
    };
    use aws_credential_types::provider::ProvideCredentials as _;
    use aws_credential_types::provider::error::CredentialsError;
    match tokio::time::timeout(Duration::from_secs(20), provider.provide_credentials()).await {
        Ok(Ok(_)) => {}
        Ok(Err(CredentialsError::CredentialsNotLoaded(_))) => {
            return Err(no_credentials(&profile, "no provider of the chain had any"));
        }
        Ok(Err(e)) => {
            let detail = aws_smithy_types::error::display::DisplayErrorContext(&e).to_string();
            return Err(Setup {
                message: format!("AWS credentials of profile {profile} could not be loaded: {}", readable(&detail)),
                hint: "if the profile uses AWS SSO, run `aws sso login`; otherwise check AWS_PROFILE and the profile's settings".into(),
            });
        }
        Err(_) => {
            return Err(Setup {
                message: "AWS credentials did not load within 20s".into(),
                hint: "the credential provider (SSO, STS, instance metadata) does not answer: check the network, or set AWS_PROFILE to a profile with keys".into(),
            });
        }
    }
    origins.endpoint_vars.retain(|_, v| !v.is_empty());
    Ok(origins)
}

fn no_credentials(profile: &str, why: &str) -> Setup {
    Setup {
        message: format!("unable to locate AWS credentials ({why})"),
        hint: format!(
            "set AWS_PROFILE to a profile with credentials (now {profile}), run `aws sso login`, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// The first line of `s`, without a Rust `Debug` dump some providers'
/// errors append (` (Name(Name { ... }))`).
fn readable(s: &str) -> &str {
    let line = first_line(s);
    // A dump opens as ` (` then a type name then `(` or ` {`.
    let dump = line.match_indices(" (").find(|(i, _)| {
        let rest = &line[i + 2..];
        let name = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .map_or(rest, |end| &rest[..end]);
        name.starts_with(|c: char| c.is_ascii_uppercase())
            && (rest[name.len()..].starts_with('(') || rest[name.len()..].starts_with(" {"))
    });
    match dump {
        Some((i, _)) => line[..i].trim_end(),
        None => line,
    }
}

/// Codes meaning the credentials themselves are wrong.
const BAD_CREDENTIAL_CODES: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "ExpiredTokenException",
    "ExpiredToken",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "IncompleteSignature",
];

/// A failed command's exit status and what to print: the error line, the
/// hint, and (under `-v`) the chain.
pub(crate) struct Explained {
    pub(crate) code: u8,
    pub(crate) lines: Vec<String>,
}

/// The exit status and message of `e`, with what `journal` saw.
pub(crate) fn explain(
    e: &anyhow::Error,
    journal: Option<&Journal>,
    origins: Option<&Origins>,
    verbose: bool,
) -> Explained {
    let mut lines = Vec::new();
    let chain = || format!("{e:#}");
    let done = |code: u8, mut lines: Vec<String>| {
        // The whole chain, when it says more than the first line did.
        if verbose && e.chain().count() > 1 {
            lines.push(format!("caused by: {}", chain()));
        }
        Explained { code, lines }
    };
    if e.downcast_ref::<Usage>().is_some() {
        return Explained {
            code: EXIT_USAGE,
            lines: vec![format!("error: {e}")],
        };
    }
    if e.downcast_ref::<Failed>().is_some() {
        return done(1, vec![format!("error: {e}")]);
    }
    if let Some(x) = e.downcast_ref::<Exit>() {
        return done(x.code, vec![format!("error: {e}")]);
    }
    if e.downcast_ref::<LoadError>().is_some() {
        return Explained {
            code: EXIT_CONFIG,
            lines: vec![format!("error: {e}")],
        };
    }
    if let Some(s) = e.downcast_ref::<Setup>() {
        lines.push(format!("error: {}", s.message));
        lines.push(format!("hint: {}", s.hint));
        return done(EXIT_CONFIG, lines);
    }
    let default_origins = Origins::default();
    let origins = origins.unwrap_or(&default_origins);
    let context = own_context(e);
    let prefix = context
        .as_deref()
        .map_or(String::new(), |c| format!("{c}: "));
    // Our own "no answer" verdicts carry the call already.
    if let Some(u) = e.downcast_ref::<Unavailable>() {
        lines.push(format!("error: {u}"));
        if let Some(Problem::NoAnswer { call, .. }) = journal.and_then(Journal::last_problem) {
            lines.push(format!("hint: {}", origins.unreachable_hint(&call)));
        }
        return done(EXIT_UNAVAILABLE, lines);
    }
    let unreachable_marker = matches!(
        e.downcast_ref::<VerifyError>(),
        Some(VerifyError::Unavailable { .. })
    ) || e.chain().any(|c| {
        c.is::<ConnectorError>()
            || c.downcast_ref::<crate::maintenance::TablesError>()
                .is_some_and(crate::maintenance::TablesError::is_unreachable)
    });
    match journal.and_then(Journal::last_problem) {
        Some(Problem::NoAnswer {
            call,
            why,
            attempts,
            for_,
        }) => {
            lines.push(format!(
                "error: {prefix}{}: {why} ({attempts} attempt{}{})",
                origins.at(&call),
                if attempts == 1 { "" } else { "s" },
                for_.map_or(String::new(), |d| format!(" in {}", secs(d)))
            ));
            lines.push(format!("hint: {}", origins.unreachable_hint(&call)));
            done(EXIT_UNAVAILABLE, lines)
        }
        Some(Problem::Refused(answer)) => {
            let code = answer.code.as_deref();
            let what = format!(
                "error: {prefix}{}: {}{}",
                origins.at(&answer.call),
                code.unwrap_or("HTTP error"),
                answer
                    .message
                    .as_deref()
                    .map_or(String::new(), |m| format!(": {}", first_line(m)))
            );
            lines.push(what);
            let class = tidemark_aws_errors::classify_error(
                code,
                answer.message.as_deref(),
                Some(answer.status),
            );
            let (exit, hint) = if tidemark_aws_errors::is_access_denied(code) {
                (
                    EXIT_DENIED,
                    format!(
                        "the identity ({}) lacks a permission for {}: see the IAM policy in docs/operations.md",
                        origins
                            .profile
                            .as_ref()
                            .map_or("the default credential chain".into(), |(p, from)| format!(
                                "profile {p} from {from}"
                            )),
                        answer.call.name()
                    ),
                )
            } else if code.is_some_and(|c| BAD_CREDENTIAL_CODES.contains(&c))
                && !tidemark_aws_errors::is_stale_signature(code, answer.message.as_deref())
            {
                (
                    EXIT_CONFIG,
                    "the credentials are not valid here: check AWS_PROFILE or AWS_ACCESS_KEY_ID, or run `aws sso login`".into(),
                )
            } else if class.is_retryable() {
                (
                    EXIT_UNAVAILABLE,
                    "AWS kept failing or throttling this call: try again later".into(),
                )
            } else if class == tidemark_aws_errors::ErrorClass::NotFound {
                (
                    1,
                    format!(
                        "check the name in the config and the region ({})",
                        origins
                            .region
                            .as_ref()
                            .map_or("none".into(), |(r, from)| format!("{r} from {from}"))
                    ),
                )
            } else {
                (1, String::new())
            };
            if !hint.is_empty() {
                lines.push(format!("hint: {hint}"));
            }
            done(exit, lines)
        }
        None if unreachable_marker => {
            lines.push(format!(
                "error: {}",
                context.as_deref().unwrap_or("AWS did not answer")
            ));
            done(EXIT_UNAVAILABLE, lines)
        }
        None => Explained {
            code: 1,
            lines: vec![format!("error: {}", chain())],
        },
    }
}

/// The outermost message of `e` when it is the command's own words (not
/// the SDK's generic "dispatch failure", "service error", ...), cut before
/// any SDK text glued on.
fn own_context(e: &anyhow::Error) -> Option<String> {
    let top = e.to_string();
    let generic = [
        "dispatch failure",
        "service error",
        "unhandled error",
        "response error",
        "failed to construct request",
        "timeout",
        "io error",
    ];
    if generic.iter().any(|g| top.starts_with(g)) {
        return None;
    }
    let top = first_line(&top);
    let cut = [
        ": dispatch failure",
        ": service error",
        ": unhandled error",
        " : ",
    ]
    .iter()
    .filter_map(|m| top.find(m))
    .min()
    .map_or(top, |i| &top[..i])
    .trim_end_matches(':')
    .trim();
    (!cut.is_empty()).then(|| cut.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A credential provider's error whose text embeds a Rust `Debug` dump
    /// (the instance-metadata provider's, refused by a proxy or a hop
    /// limit) gives one readable line: the words before the dump.
    #[test]
    fn a_credentials_error_is_told_without_its_debug_dump() {
        let detail = "an error occurred while loading credentials: failed to load IMDS session token: service error: request forbidden: IMDS is disabled or the caller has insufficient permissions. (ProviderError(ProviderError { source: FailedToLoadToken(FailedToLoadToken { source: ServiceError(ServiceError { source: TokenError { kind: Forbidden } }) }) }))";
        assert_eq!(
            readable(detail),
            "an error occurred while loading credentials: failed to load IMDS session token: service error: request forbidden: IMDS is disabled or the caller has insufficient permissions."
        );
        let plain = "the SSO session has expired (run aws sso login)";
        assert_eq!(
            readable(plain),
            plain,
            "plain words in parentheses are kept"
        );
        assert_eq!(readable("first\nsecond"), "first");
    }
    use crate::cli::journal::{ErrorAnswer, NoAnswer, parse_error};

    fn call() -> Call {
        Call {
            service: "DynamoDB".into(),
            operation: "DescribeTable".into(),
            endpoint: "http://127.0.0.1:9".into(),
        }
    }

    #[test]
    fn error_bodies_give_code_and_message() {
        let (c, m) = parse_error(
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#,
        );
        assert_eq!(c.as_deref(), Some("ResourceNotFoundException"));
        assert_eq!(m.as_deref(), Some("Requested resource not found"));
        let (c, m) = parse_error(
            b"<ErrorResponse><Error><Code>AccessDenied</Code><Message>no</Message></Error></ErrorResponse>",
        );
        assert_eq!(c.as_deref(), Some("AccessDenied"));
        assert_eq!(m.as_deref(), Some("no"));
    }

    #[test]
    fn refused_attempts_give_up_after_a_quarter_of_the_limit() {
        let j = Journal::new();
        let origins = Origins {
            endpoint_flag: Some("http://127.0.0.1:9".into()),
            ..Origins::default()
        };
        let (id, started) = j.begin(&call());
        j.failed(
            id,
            started - Duration::from_secs(3),
            call(),
            NoAnswer::Refused,
        );
        assert!(
            j.given_up(Duration::from_secs(20), &|c| origins.at(c))
                .is_none()
        );
        let (id, started) = j.begin(&call());
        j.failed(id, started, call(), NoAnswer::Refused);
        // The first unanswered attempt started 3 s ago; a quarter of 12 s is 3 s.
        let m = j
            .given_up(Duration::from_secs(12), &|c| origins.at(c))
            .unwrap();
        assert!(
            m.starts_with("DynamoDB DescribeTable at http://127.0.0.1:9 (from --endpoint-url): no answer for 3."),
            "{m}"
        );
        assert!(m.contains("2 attempts: connection refused"), "{m}");
        // An answer resets it.
        let (id, _) = j.begin(&call());
        j.answered(id, None);
        assert!(j.given_up(Duration::ZERO, &|c| origins.at(c)).is_none());
    }

    /// A run of error answers is explained by its first: at start-up the
    /// AccessDenied of the call that failed (ListTables), not that of the
    /// clean-up calls after it (DeleteItem of a heartbeat), which would name
    /// the wrong permission.
    #[test]
    fn the_first_error_answer_since_a_success_is_the_one_explained() {
        let j = Journal::new();
        let denied = |op: &str| ErrorAnswer {
            call: Call {
                operation: op.into(),
                ..call()
            },
            status: 400,
            code: Some("AccessDeniedException".into()),
            message: Some("not authorized".into()),
        };
        let explained = |j: &Journal| match j.last_problem() {
            Some(Problem::Refused(a)) => a.call.operation,
            other => panic!("{other:?}"),
        };
        for op in ["ListTables", "DescribeTable", "DeleteItem"] {
            let (id, _) = j.begin(&call());
            j.answered(id, Some(denied(op)));
        }
        assert_eq!(explained(&j), "ListTables");
        // A success, then a new refusal: that one.
        let (id, _) = j.begin(&call());
        j.answered(id, None);
        assert!(j.last_problem().is_none());
        let (id, _) = j.begin(&call());
        j.answered(id, Some(denied("PutItem")));
        assert_eq!(explained(&j), "PutItem");
    }

    #[test]
    fn a_pending_attempt_counts_from_its_start() {
        let j = Journal::new();
        let (_id, _) = j.begin(&call());
        assert!(
            j.given_up(Duration::from_secs(60), &|c| Origins::default().at(c))
                .is_none()
        );
        let m = j
            .given_up(Duration::ZERO, &|c| Origins::default().at(c))
            .unwrap();
        assert!(
            m.starts_with("DynamoDB DescribeTable at http://127.0.0.1:9"),
            "{m}"
        );
        assert!(m.ends_with("(1 attempt: no answer in time)"), "{m}");
    }

    #[test]
    fn messages_name_the_call_and_where_the_endpoint_came_from() {
        let o = Origins {
            region: Some(("eu-west-1".into(), "AWS_REGION".into())),
            endpoint_vars: [("AWS_ENDPOINT_URL_DYNAMODB".to_string(), "x".to_string())]
                .into_iter()
                .collect(),
            ..Origins::default()
        };
        assert_eq!(
            o.at(&call()),
            "DynamoDB DescribeTable at http://127.0.0.1:9 (from AWS_ENDPOINT_URL_DYNAMODB)"
        );
        let plain = Origins {
            region: Some(("eu-west-1".into(), "AWS_REGION".into())),
            ..Origins::default()
        };
        assert!(
            plain
                .at(&call())
                .ends_with("(from the eu-west-1 endpoint; region from AWS_REGION)")
        );
    }

    #[test]
    fn an_error_answer_decides_the_exit_status() {
        let o = Origins::default();
        for (code, exit) in [
            ("AccessDeniedException", EXIT_DENIED),
            ("UnrecognizedClientException", EXIT_CONFIG),
            ("ProvisionedThroughputExceededException", EXIT_UNAVAILABLE),
            ("ResourceNotFoundException", 1),
        ] {
            let j = Journal::new();
            let (id, _) = j.begin(&call());
            j.answered(
                id,
                Some(ErrorAnswer {
                    call: call(),
                    status: 400,
                    code: Some(code.into()),
                    message: Some("m".into()),
                }),
            );
            let e = anyhow::anyhow!("describing table t");
            let x = explain(&e, Some(&j), Some(&o), false);
            assert_eq!(x.code, exit, "{code}");
            assert!(x.lines[0].contains(code), "{:?}", x.lines);
            assert!(
                x.lines[0].starts_with("error: describing table t: DynamoDB DescribeTable"),
                "{:?}",
                x.lines
            );
        }
    }
}
