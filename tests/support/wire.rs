//! The wire, spoken by hand: tests that send what no client of this build
//! would (garbage, another protocol, another client's hello).

/// `payload` as one frame: its 4-byte big-endian length, then it.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut bytes = (payload.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}
