//! The wall clock: the runtime's one reading of the time the core is handed as `now`.

use flotilla_core::analysis::Millis;

/// The wall clock, in milliseconds since the Unix epoch.
pub fn wall_clock() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}
