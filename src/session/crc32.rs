//! CRC-32 (IEEE), to tell a torn or corrupt transcript record from a good one.

/// The CRC-32 of `bytes` (crc32fast: carry-less multiplication where the
/// CPU has it; the byte-at-a-time table took 14% of a worker streaming
/// output).
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_value() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
    }
}
