//! A table's capacity: DescribeTable, read again every `capacity_refresh`,
//! gives the rate controller the table's provisioned or on-demand write
//! capacity.

use aws_sdk_dynamodb::types::{BillingMode, TableDescription};
use futures::FutureExt;
use tidemark_governor::{Outcome, Permit};
use tokio::time::Instant;

use super::{Answer, DescribeResult, TableTask};
use crate::error::{Failure, WriterError, classify_describe};
use crate::rate::WriteCapacity;

impl TableTask {
    pub(super) fn start_describe(&mut self, now: Instant) {
        let permit = match self.gov.poll_admit() {
            Ok(p) => p,
            Err(wait) => {
                self.next_describe = now + wait;
                return;
            }
        };
        self.describe_pending = true;
        let call = self
            .client
            .describe_table()
            .table_name(self.table.clone())
            .send();
        let timeout = self.cfg.call_timeout;
        self.answers.push(
            async move {
                Answer::Described(Box::new(tokio::time::timeout(timeout, call).await), permit)
            }
            .boxed(),
        );
    }

    pub(super) fn on_described(
        &mut self,
        result: DescribeResult,
        permit: Permit,
    ) -> Result<(), WriterError> {
        let now = Instant::now();
        self.describe_pending = false;
        self.capacity_known = true;
        // A late table with items waiting is read again sooner: maintenance
        // may lift its capacity for the backlog, and the writer should
        // pace to the lift at once.
        let refresh = if self.is_late && self.pending_tokens > 0 {
            self.cfg.capacity_refresh.min(LATE_REFRESH)
        } else {
            self.cfg.capacity_refresh
        };
        self.next_describe = now + refresh;
        match result {
            Ok(Ok(out)) => {
                permit.finish(Outcome::Answered);
                if let Some(cap) = out.table().and_then(capacity_of) {
                    self.ctl.on_capacity(cap, now.into_std());
                    self.stats.rate(self.ctl.rate());
                }
            }
            Ok(Err(e)) => {
                let failure = classify_describe(&e);
                permit.finish(failure.outcome());
                match failure {
                    Failure::Fatal { code, message } => {
                        return Err(WriterError::Fatal {
                            table: self.table.clone(),
                            code,
                            message,
                        });
                    }
                    // Writes will meet it and ask the handler.
                    Failure::TableMissing(_) => self.next_describe = now + self.cfg.backoff_cap,
                    other => {
                        tracing::warn!(table = %self.table, error = ?other, "DescribeTable failed; pacing at the initial rate");
                        self.next_describe = now + self.cfg.backoff_cap;
                    }
                }
            }
            Err(_) => {
                permit.finish(Outcome::Congested);
                tracing::warn!(table = %self.table, "DescribeTable timed out");
                self.next_describe = now + self.cfg.backoff_cap;
            }
        }
        Ok(())
    }
}

/// How often a late table with items waiting reads its capacity again.
const LATE_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// The write capacity DescribeTable reports; `None` if it says nothing usable.
fn capacity_of(t: &TableDescription) -> Option<WriteCapacity> {
    let on_demand = t
        .billing_mode_summary()
        .and_then(|b| b.billing_mode())
        .is_some_and(|m| *m == BillingMode::PayPerRequest);
    let table_wcu = t
        .provisioned_throughput()
        .and_then(|p| p.write_capacity_units())
        .filter(|w| *w > 0);
    match (on_demand, table_wcu) {
        (false, Some(wcu)) => {
            // A GSI with less write capacity throttles the table's writes.
            let gsi_min = t
                .global_secondary_indexes()
                .iter()
                .filter_map(|g| {
                    g.provisioned_throughput()
                        .and_then(|p| p.write_capacity_units())
                })
                .filter(|w| *w > 0)
                .min();
            let wcu = gsi_min.map_or(wcu, |g| g.min(wcu));
            Some(WriteCapacity::Provisioned { wcu: wcu as f64 })
        }
        _ => Some(WriteCapacity::OnDemand {
            max_wcu: t
                .on_demand_throughput()
                .and_then(|o| o.max_write_request_units())
                .filter(|w| *w > 0)
                .map(|w| w as f64),
            warm_wcu: t
                .warm_throughput()
                .and_then(|w| w.write_units_per_second())
                .filter(|w| *w > 0)
                .map(|w| w as f64),
        }),
    }
}
