//! Fault injection: server errors, added latency, dropped connections.

use std::time::Duration;

use clap::Args;

/// Which service a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// DynamoDB (JSON 1.0).
    DynamoDb,
    /// Kinesis (JSON 1.1).
    Kinesis,
    /// SQS (JSON 1.0 or the query protocol).
    Sqs,
}

/// Fault probabilities and delays. All zero (off) by default.
#[derive(Debug, Clone, Default, Args)]
pub struct FaultConfig {
    /// Probability (0..1) that a DynamoDB request gets HTTP 500 or 503.
    #[arg(
        long,
        env = "TIDEMARK_LIMITS_FAULT_DYNAMODB_ERRORS",
        default_value_t = 0.0
    )]
    pub fault_dynamodb_errors: f64,
    /// Probability (0..1) that a Kinesis request gets HTTP 500 or 503.
    #[arg(
        long,
        env = "TIDEMARK_LIMITS_FAULT_KINESIS_ERRORS",
        default_value_t = 0.0
    )]
    pub fault_kinesis_errors: f64,
    /// Probability (0..1) that an SQS request gets HTTP 500 or 503.
    #[arg(long, env = "TIDEMARK_LIMITS_FAULT_SQS_ERRORS", default_value_t = 0.0)]
    pub fault_sqs_errors: f64,
    /// Probability (0..1) that a request's connection is closed with no response.
    #[arg(long, env = "TIDEMARK_LIMITS_FAULT_DROP", default_value_t = 0.0)]
    pub fault_drop: f64,
    /// Latency added to every request, milliseconds.
    #[arg(long, env = "TIDEMARK_LIMITS_FAULT_LATENCY_MS", default_value_t = 0)]
    pub fault_latency_ms: u64,
    /// Extra latency drawn uniformly from 0..=this, milliseconds.
    #[arg(long, env = "TIDEMARK_LIMITS_FAULT_JITTER_MS", default_value_t = 0)]
    pub fault_jitter_ms: u64,
    /// Seed of the fault generator, for reproducible runs (random if unset).
    #[arg(long, env = "TIDEMARK_LIMITS_FAULT_SEED")]
    pub fault_seed: Option<u64>,
}

/// What to do to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Serve it normally.
    None,
    /// Answer with this 5xx status.
    Error(u16),
    /// Close the connection without answering.
    Drop,
}

impl FaultConfig {
    /// Checks that probabilities are in 0..=1.
    pub fn validate(&self) -> Result<(), String> {
        for (flag, p) in [
            ("--fault-dynamodb-errors", self.fault_dynamodb_errors),
            ("--fault-kinesis-errors", self.fault_kinesis_errors),
            ("--fault-sqs-errors", self.fault_sqs_errors),
            ("--fault-drop", self.fault_drop),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{flag} is a probability between 0 and 1, got {p}"));
            }
        }
        Ok(())
    }

    /// Latency to add before serving a request.
    pub fn delay(&self, rng: &mut fastrand::Rng) -> Duration {
        let jitter = if self.fault_jitter_ms > 0 {
            rng.u64(0..=self.fault_jitter_ms)
        } else {
            0
        };
        Duration::from_millis(self.fault_latency_ms + jitter)
    }

    /// Draws the fault for one request to `service`.
    pub fn draw(&self, service: Service, rng: &mut fastrand::Rng) -> Fault {
        if self.fault_drop > 0.0 && rng.f64() < self.fault_drop {
            return Fault::Drop;
        }
        let p = match service {
            Service::DynamoDb => self.fault_dynamodb_errors,
            Service::Kinesis => self.fault_kinesis_errors,
            Service::Sqs => self.fault_sqs_errors,
        };
        if p > 0.0 && rng.f64() < p {
            return Fault::Error(if rng.bool() { 500 } else { 503 });
        }
        Fault::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default() {
        let f = FaultConfig::default();
        let mut rng = fastrand::Rng::with_seed(1);
        assert!((0..1000).all(|_| f.draw(Service::DynamoDb, &mut rng) == Fault::None));
        assert_eq!(f.delay(&mut rng), Duration::ZERO);
    }

    #[test]
    fn error_rate_matches_probability_per_service() {
        let f = FaultConfig {
            fault_kinesis_errors: 0.2,
            ..FaultConfig::default()
        };
        let mut rng = fastrand::Rng::with_seed(7);
        let errors = (0..10_000)
            .filter(|_| matches!(f.draw(Service::Kinesis, &mut rng), Fault::Error(500 | 503)))
            .count();
        assert!((1800..2200).contains(&errors), "{errors}");
        assert!((0..1000).all(|_| f.draw(Service::DynamoDb, &mut rng) == Fault::None));
    }

    #[test]
    fn jitter_stays_in_range() {
        let f = FaultConfig {
            fault_latency_ms: 10,
            fault_jitter_ms: 5,
            ..FaultConfig::default()
        };
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..1000 {
            let d = f.delay(&mut rng).as_millis();
            assert!((10..=15).contains(&d));
        }
        assert!(
            FaultConfig {
                fault_drop: 1.5,
                ..FaultConfig::default()
            }
            .validate()
            .is_err()
        );
    }
}
