//! The shell's clocks. Laws never read a clock; their callers pass these in.

/// Monotonic milliseconds (CLOCK_MONOTONIC: comparable between processes
/// of one boot, never stepped).
pub fn mono_ms() -> u64 {
    mono_us() / 1000
}

/// Monotonic microseconds (the run core's clock).
pub fn mono_us() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux; zero if it ever did, as the
    // unchecked call before it read.
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .unwrap_or_else(|_| nix::sys::time::TimeSpec::new(0, 0));
    ts.tv_sec() as u64 * 1_000_000 + ts.tv_nsec() as u64 / 1_000
}

/// Wall-clock milliseconds since the Unix epoch (busy evidence, transcript).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
