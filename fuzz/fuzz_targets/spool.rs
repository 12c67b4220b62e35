//! A job's spool file of arbitrary bytes (a record cut by a crash, a bad
//! stream byte, a length past the end): read in small steps, the records
//! come back whole, in order, inside the file (a run of zeros as the zeros
//! it stands for), and reading it all at once gives the same records;
//! never a panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use eukhe::session::spool::Spool;
use libfuzzer_sys::fuzz_target;

fn spool_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let session = std::env::temp_dir().join(format!("eukhe-fuzz-spool-{}", std::process::id()));
        std::fs::create_dir_all(&session).unwrap();
        session.join("spool")
    })
}

fuzz_target!(|data: &[u8]| {
    let spool = Spool::open(spool_dir()).unwrap();
    std::fs::write(spool_dir().join("r1.out"), data).unwrap();
    let len = data.len() as u64;
    let mut stepped = Vec::new();
    let mut offset = 0;
    loop {
        match spool.read("r1", offset, len, 7) {
            Ok(chunk) => {
                if chunk.records.is_empty() {
                    assert_eq!(chunk.next, offset);
                    break;
                }
                for (_, bytes, next) in &chunk.records {
                    assert!(*next > offset && *next <= len);
                    // A record holds its bytes, or stands for a run of zeros.
                    let stored = *next - offset - 5;
                    assert!(
                        stored == bytes.len() as u64
                            || (stored == 0 && bytes.iter().all(|&b| b == 0))
                    );
                    offset = *next;
                }
                assert_eq!(chunk.next, offset);
                stepped.extend(chunk.records);
            }
            Err(_) => break,
        }
    }
    if let Ok(all) = spool.read("r1", 0, len, usize::MAX) {
        assert!(all.records.len() >= stepped.len());
        assert_eq!(&all.records[..stepped.len()], &stepped[..]);
    }
});
