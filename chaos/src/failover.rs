//! Scenario 7: Sentinel failover under a partition, in network namespaces.

use crate::scenarios::{Ctx, Report};

pub fn failover(ctx: &Ctx) -> Result<Report, String> {
    Ok(Report::new(ctx, 7, "Failover"))
}
