//! The JSON-lines file destination (also the fallback of the others).

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use super::entry::DeadLetter;
use super::sink::{DeadLetterError, DeadLetterSink};

/// JSON-lines file destination.
#[derive(Debug)]
pub(crate) struct FileSink {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileSink {
    /// Appends to `path` (created when absent).
    pub(crate) fn new(path: PathBuf) -> Self {
        FileSink {
            path,
            lock: Mutex::new(()),
        }
    }

    /// The file written.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl DeadLetterSink for FileSink {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        Box::pin(async move {
            let _guard = self.lock.lock().await;
            // A file that cannot be written (no space, read-only, no
            // permission) is not going to heal by itself in time.
            let err = |e: std::io::Error| DeadLetterError::Destination {
                destination: self.path.display().to_string(),
                message: e.to_string(),
                permanent: true,
            };
            let mut text = String::new();
            for e in entries {
                text.push_str(&e.to_json());
                text.push('\n');
            }
            let mut f = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .await
                .map_err(err)?;
            f.write_all(text.as_bytes()).await.map_err(err)?;
            f.sync_data().await.map_err(err)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::entry::samples::origin;
    use super::*;
    use chrono::Utc;
    use tidemark_schema::Reason;

    #[tokio::test]
    async fn file_sink_appends_lines() {
        let dir = std::env::temp_dir().join(format!("tidemark-dl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dl.jsonl");
        let _ = std::fs::remove_file(&path);
        let sink = FileSink::new(path.clone());
        let a = DeadLetter::new(origin(), Reason::BadTimestamp, "a".into(), b"1", Utc::now());
        let b = DeadLetter::new(origin(), Reason::FutureEvent, "b".into(), b"2", Utc::now());
        sink.write(std::slice::from_ref(&a)).await.unwrap();
        sink.write(std::slice::from_ref(&b)).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<DeadLetter> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, vec![a, b]);
    }
}
