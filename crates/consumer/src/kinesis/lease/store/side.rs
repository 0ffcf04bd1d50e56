//! Reading the KCL 3.0 to 3.4 side tables (coordinator state, worker
//! metrics) beside a lease table: what they hold, or why they could not be
//! read (absent, denied, not the KCL's).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::kinesis::lease::kcl::{
    CoordinatorItems, MIGRATION_KEY, Side, SideTableNames, SideTables, TABLE_MIGRATION_KEY,
};

use super::DynamoStore;

/// What a read of a KCL side table ended in, besides its items.
enum SideRead {
    Absent,
    Denied(String),
    NotKcl(String),
}

impl DynamoStore {
    /// `name` exists with hash key `hash` (S) alone; else why not.
    async fn side_table(
        &self,
        name: &str,
        hash: &str,
    ) -> Result<Result<(), SideRead>, ConsumerError> {
        match self.client.describe_table().table_name(name).send().await {
            Ok(out) => {
                let Some(t) = out.table() else {
                    return Ok(Err(SideRead::Absent));
                };
                let spec =
                    crate::keyschema::KeySpec::hash_only(crate::keyschema::KeyAttr::string(hash));
                Ok(match spec.check(name, "KCL table", t) {
                    Ok(()) => Ok(()),
                    Err(m) => Err(SideRead::NotKcl(m.to_string())),
                })
            }
            Err(e) => {
                let err = AwsError::new("DescribeTable", &e);
                if err.class == ErrorClass::NotFound {
                    Ok(Err(SideRead::Absent))
                } else if denied(&err) {
                    Ok(Err(SideRead::Denied(format!(
                        "dynamodb:DescribeTable on {name}"
                    ))))
                } else {
                    Err(err.into())
                }
            }
        }
    }

    async fn coordinator_state(&self, name: &str) -> Result<Side<CoordinatorItems>, ConsumerError> {
        if let Err(r) = self.side_table(name, "key").await? {
            return Ok(r.into());
        }
        let mut found = CoordinatorItems::default();
        for (key, slot) in [
            (MIGRATION_KEY, &mut found.migration),
            (TABLE_MIGRATION_KEY, &mut found.table_migration),
        ] {
            match self
                .client
                .get_item()
                .table_name(name)
                .key("key", AttributeValue::S(key.to_string()))
                .consistent_read(true)
                .send()
                .await
            {
                Ok(out) => *slot = out.item().cloned(),
                Err(e) => {
                    let err = AwsError::new("GetItem", &e);
                    if denied(&err) {
                        return Ok(Side::Denied(format!("dynamodb:GetItem on {name}")));
                    }
                    return Err(err.into());
                }
            }
        }
        Ok(Side::Found(found))
    }

    async fn worker_metrics(
        &self,
        name: &str,
    ) -> Result<Side<Vec<HashMap<String, AttributeValue>>>, ConsumerError> {
        if let Err(r) = self.side_table(name, "wid").await? {
            return Ok(r.into());
        }
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = match self
                .client
                .scan()
                .table_name(name)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    let err = AwsError::new("Scan", &e);
                    if denied(&err) {
                        return Ok(Side::Denied(format!("dynamodb:Scan on {name}")));
                    }
                    return Err(err.into());
                }
            };
            items.extend(page.items().iter().cloned());
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(Side::Found(items)),
            }
        }
    }

    pub(super) async fn side_tables(
        &self,
        names: &SideTableNames,
    ) -> Result<SideTables, ConsumerError> {
        let mut out = SideTables::default();
        if let Some(name) = &names.coordinator {
            out.coordinator = self.coordinator_state(name).await?;
        }
        if let Some(name) = &names.metrics {
            out.metrics = self.worker_metrics(name).await?;
        }
        Ok(out)
    }
}

impl<T> From<SideRead> for Side<T> {
    fn from(r: SideRead) -> Self {
        match r {
            SideRead::Absent => Side::Absent,
            SideRead::Denied(p) => Side::Denied(p),
            SideRead::NotKcl(why) => Side::NotKcl(why),
        }
    }
}

/// The caller's role may not make the call.
fn denied(err: &AwsError) -> bool {
    tidemark_aws_errors::is_access_denied(err.message.split(':').next())
}
