//! The shell's clocks. Laws never read a clock; their callers pass these in.

/// Monotonic milliseconds (CLOCK_MONOTONIC: comparable between processes
/// of one boot, never stepped).
pub fn mono_ms() -> u64 {
    mono_us() / 1000
}

/// Monotonic microseconds (the run core's clock).
pub fn mono_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Wall-clock milliseconds since the Unix epoch (busy evidence, transcript).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
