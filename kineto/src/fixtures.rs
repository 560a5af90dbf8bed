//! The vendored Kineto traces (`cli/tests/fixtures/kineto`), for unit tests.

use std::io::Read;
use std::path::PathBuf;

/// The decompressed bytes of fixture `rel` (a `.json.gz` path under the
/// fixtures directory).
pub(crate) fn fixture(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto")
        .join(rel);
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(&gz[..])
        .read_to_end(&mut out)
        .expect("gunzip");
    out
}
