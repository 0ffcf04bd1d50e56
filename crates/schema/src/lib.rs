//! Tidemark's shared, pure logic: no network I/O.
//!
//! Modules:
//! - [`origin`]: a record's source position, and stable event ids derived from it.
//! - [`key`]: an item's primary key values.
//! - [`reason`]: the closed list of dead-letter reasons.
//! - [`size`]: DynamoDB item size and WCU cost, and the service's hard limits.

pub mod key;
pub mod origin;
pub mod reason;
pub mod size;

pub use key::ItemKey;
pub use origin::Origin;
pub use reason::Reason;
pub use size::Item;
