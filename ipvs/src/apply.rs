//! Creating a whole table in one call.

use crate::error::Result;
use crate::handle::IpvsHandle;
use crate::types::{Destination, Service};

/// Adds every service and then its destinations, in order, as `ipvsadm -R` does with save
/// output. Stops at the first failure; what was created before it stays.
pub fn apply(handle: &mut IpvsHandle, table: &[(Service, Vec<Destination>)]) -> Result<()> {
    for (service, dests) in table {
        handle.add_service(service)?;
        for dest in dests {
            handle.add_destination(&service.key, dest)?;
        }
    }
    Ok(())
}
