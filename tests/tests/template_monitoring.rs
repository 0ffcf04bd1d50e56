//! The dashboard and alarms of `deploy/cloudformation/tidemark.yaml` read
//! the metrics the worker writes, and the dashboard's body is valid JSON.
//! cfn-lint sees the body only as a string, and no emulator creates alarms,
//! so nothing else checks these. No network.
//!
//! The template is read with line scanners (the tests crate has no YAML
//! parser, and CloudFormation's tags defeat a plain one).

// Helpers outside #[test] fns panic on purpose: this whole file is a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use serde_json::Value;
use tidemark_tests::{EMF_METRICS, repo_root};

fn template() -> String {
    std::fs::read_to_string(repo_root().join("deploy/cloudformation/tidemark.yaml")).unwrap()
}

/// The lines of the top-level resource `name` (under `Resources:`).
fn resource<'a>(template: &'a str, name: &str) -> Vec<&'a str> {
    let head = format!("  {name}:");
    template
        .lines()
        .skip_while(|l| *l != head)
        .skip(1)
        .take_while(|l| l.trim().is_empty() || l.starts_with("   "))
        .collect()
}

/// Logical ids of every resource of `kind`.
fn resources_of(template: &str, kind: &str) -> Vec<String> {
    let lines: Vec<&str> = template.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[1].trim() == format!("Type: {kind}") && w[0].starts_with("  "))
        .filter_map(|w| {
            let name = w[0].trim().strip_suffix(':')?;
            (!w[0].starts_with("   ")).then(|| name.to_string())
        })
        .collect()
}

/// The dashboard body with every `${...}` of its `!Sub` replaced by a sample
/// value (parameters), a fake ARN (`${X.Arn}`) or the sub-variable's text.
fn dashboard_body(template: &str) -> (String, BTreeSet<String>) {
    let lines = resource(template, "Dashboard");
    let start = lines
        .iter()
        .position(|l| l.trim() == "DashboardBody: !Sub")
        .expect("DashboardBody: !Sub")
        + 2;
    assert_eq!(lines[start - 1].trim(), "- |", "the body is a block scalar");
    let body: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| !l.trim_start().starts_with("- SourceBacklogMetric:"))
        .map(|l| l.get(10..).unwrap_or(""))
        .collect();
    let mut text = body.join("\n");
    let mut arns = BTreeSet::new();
    while let Some(at) = text.find("${") {
        let end = at + text[at..].find('}').expect("closing brace");
        let name = text[at + 2..end].to_string();
        let value = match name.as_str() {
            "TablePrefix" => "events".to_string(),
            "MetricsNamespace" => "Tidemark".to_string(),
            "AWS::Region" => "us-east-1".to_string(),
            "LagAlarmSeconds" | "MaintenanceStaleSeconds" | "CheckpointLagAlarmSeconds" => {
                "300".to_string()
            }
            "SourceBacklogMetric" => {
                r#"["AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds", "StreamName", "s"]"#
                    .to_string()
            }
            other => {
                let alarm = other
                    .strip_suffix(".Arn")
                    .unwrap_or_else(|| panic!("unexpected ${{{other}}} in the dashboard body"));
                arns.insert(alarm.to_string());
                format!("arn:aws:cloudwatch:us-east-1:123456789012:alarm:{alarm}")
            }
        };
        text.replace_range(at..=end, &value);
    }
    (text, arns)
}

/// Metric names of the namespace `Tidemark` in a widget's `metrics`: plain
/// entries `["Tidemark", "Name", ...]` and `MetricName="Name"` in SEARCH
/// expressions.
fn widget_metrics(widget: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in widget["properties"]["metrics"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let m = m.as_array().expect("a metric entry is an array");
        if m.first().and_then(Value::as_str) == Some("Tidemark") {
            out.insert(m[1].as_str().unwrap().to_string());
        }
        for part in m.iter().filter_map(|p| p["expression"].as_str()) {
            assert!(
                part.contains("{Tidemark,"),
                "SEARCH outside the namespace: {part}"
            );
            let name = part
                .split("MetricName=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .expect("SEARCH names its metric");
            out.insert(name.to_string());
        }
    }
    out
}

#[test]
fn dashboard_is_valid_json_and_shows_every_metric_and_alarm() {
    let template = template();
    let (body, arns) = dashboard_body(&template);
    let dashboard: Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("the dashboard body is not JSON ({e}):\n{body}"));
    let widgets = dashboard["widgets"].as_array().expect("widgets");
    let mut shown = BTreeSet::new();
    for w in widgets {
        for key in ["x", "y", "width", "height"] {
            assert!(w[key].is_u64(), "widget without {key}: {w}");
        }
        let x = w["x"].as_u64().unwrap();
        let width = w["width"].as_u64().unwrap();
        assert!(x + width <= 24, "widget past the 24-column grid: {w}");
        shown.extend(widget_metrics(w));
    }
    let contract: BTreeSet<String> = EMF_METRICS.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        shown, contract,
        "the dashboard's metrics and the worker's EMF metrics differ"
    );

    // Every alarm but the scale-in one is on the alarm widget, and every ARN
    // there names an alarm of the template.
    let alarms: BTreeSet<String> = resources_of(&template, "AWS::CloudWatch::Alarm")
        .into_iter()
        .collect();
    assert!(alarms.len() >= 7, "found too few alarms: {alarms:?}");
    let expected: BTreeSet<String> = alarms
        .iter()
        .filter(|a| *a != "BacklogLowAlarm")
        .cloned()
        .collect();
    assert_eq!(arns, expected, "alarms on the dashboard's alarm widget");
}

#[test]
fn alarms_read_the_workers_metrics_with_the_prefix_dimension() {
    let template = template();
    let contract: BTreeSet<&str> = EMF_METRICS.iter().copied().collect();
    let mut alarmed = BTreeSet::new();
    for alarm in resources_of(&template, "AWS::CloudWatch::Alarm") {
        let lines = resource(&template, &alarm);
        let text = lines.join("\n");
        assert!(
            text.contains("TreatMissingData:"),
            "{alarm} does not say how missing data counts"
        );
        if !text.contains("Namespace: !Ref MetricsNamespace") {
            continue;
        }
        // The worker's metrics exist only while tasks run.
        assert!(
            text.contains("Condition: WithCompute"),
            "{alarm} reads the tasks' metrics but exists without them"
        );
        assert!(
            text.contains("AlarmDescription:") && text.contains("docs/operations.md#alarms"),
            "{alarm}'s description must point to what to do"
        );
        for (i, l) in lines.iter().enumerate() {
            let Some(name) = l.trim().strip_prefix("MetricName: ") else {
                continue;
            };
            assert!(
                contract.contains(name),
                "{alarm} reads {name}, which the worker does not write"
            );
            // The dimension block follows the metric name.
            let dims = lines[i + 1..]
                .iter()
                .take(2)
                .copied()
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                dims.contains("{ Name: TablePrefix, Value: !Ref TablePrefix }"),
                "{alarm}: {name} without the TablePrefix dimension:\n{dims}"
            );
            alarmed.insert(name.to_string());
        }
        // Missing data is breaching only where silence itself is the fault.
        let breaching = text.contains("TreatMissingData: breaching");
        assert_eq!(
            breaching,
            alarm == "MaintenanceStaleAlarm",
            "{alarm}: TreatMissingData"
        );
    }
    for needed in [
        "LagSeconds",
        "DeadLetters",
        "DeadLetterFallbacks",
        "CheckpointLagSeconds",
        "ItemsThrottled",
        "NextTableReady",
        "SecondsToNextPeriod",
        "SecondsSinceMaintenance",
        "MaintenanceQuotaErrors",
    ] {
        assert!(alarmed.contains(needed), "no alarm on {needed}");
    }
    // The account-wide throttle query is gone: only this stack's tables count.
    assert!(
        !template.contains("SCHEMA(\"AWS/DynamoDB\""),
        "an alarm still sums over every table of the account"
    );
    let next = resource(&template, "NextTableNotReadyAlarm").join("\n");
    assert!(
        next.contains("Expression: IF(secs < 300 AND ready < 1, 1, 0)"),
        "NextTableNotReadyAlarm's expression:\n{next}"
    );
}

#[test]
fn scanners_read_a_small_template() {
    let t = "\
Resources:
  A:
    Type: AWS::CloudWatch::Alarm
    Properties:
      Nested:
        Type: AWS::CloudWatch::Alarm
  B:
    Type: AWS::SQS::Queue
";
    assert_eq!(resources_of(t, "AWS::CloudWatch::Alarm"), ["A"]);
    assert_eq!(resource(t, "B"), ["    Type: AWS::SQS::Queue"]);
    let w: Value = serde_json::from_str(
        r#"{"properties": {"metrics": [
            ["Tidemark", "LagSeconds", "TablePrefix", "p"],
            ["AWS/SQS", "X"],
            [{"expression": "SEARCH('{Tidemark,Table} MetricName=\"ItemsStored\"', 'Sum', 60)", "id": "e"}]
        ]}}"#,
    )
    .unwrap();
    assert_eq!(
        widget_metrics(&w).into_iter().collect::<Vec<_>>(),
        ["ItemsStored", "LagSeconds"]
    );
}
