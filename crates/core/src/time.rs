//! Time on the core's terms: instants in milliseconds on whatever clock drives a machine (the
//! controller's wall clock or the simulator's virtual one), and how they read to a human. The core
//! reads no clock: callers hand it `now`.

/// Milliseconds since the Unix epoch, on whatever clock drives the machine (real or virtual).
pub type Millis = i64;

/// `HH:MM:SS` of a time in ms: the time of day (UTC) of a wall-clock time, the elapsed time of
/// a virtual one under a day (the core reads no clock and takes either).
pub fn time_of_day(ms: Millis) -> String {
    let seconds = ms.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

/// An instant in seconds (a report's unit), or None.
pub fn seconds(ms: Option<Millis>) -> Option<f64> {
    ms.map(|m| m as f64 / 1000.0)
}
