//! ClickHouse's compressed framing of an INSERT body (`decompress=1`),
//! written by the collector instead of the clickhouse crate.
//!
//! In: the bytes of one Native block. Out: those bytes as a sequence of LZ4
//! frames of at most [`FRAME_INPUT`] input bytes each, in the format
//! ClickHouse reads with `decompress=1` (the Native format spec's
//! "compression framing"): a CityHash128 (v1.0.2) checksum of the rest, the
//! method byte `0x82`, the frame's compressed size (header included) and its
//! uncompressed size, both `u32` little-endian, then the LZ4 block.
//!
//! Why not the crate's: it compresses each sent chunk whole into a new
//! buffer of the worst-case size, zeroed first (`BytesMut::resize`), which
//! for a 65,536-row block is ~5.5 MB of `memset` and fresh pages per block
//! (3-5 % of the collector's CPU at full ingest, bench/RESULTS-alternations.md,
//! session 28). Here one scratch buffer of one frame's worst case is reused
//! for every frame of an INSERT, and only the compressed bytes are copied
//! out. Same compressor (lz4_flex, as in the crate), same bytes on the wire
//! as the crate writes for the same frame input.

use clickhouse::error::Error;

/// Input bytes per frame: ClickHouse's own `max_compress_block_size`.
pub(crate) const FRAME_INPUT: usize = 1 << 20;
const CHECKSUM: usize = 16;
const HEADER: usize = 9;
/// ClickHouse's method byte of LZ4.
const LZ4: u8 = 0x82;

/// Frames blocks, reusing its scratch buffer (one per INSERT).
#[derive(Debug, Default)]
pub(crate) struct Framer {
    scratch: Vec<u8>,
}

impl Framer {
    /// `data` as LZ4 frames.
    pub(crate) fn frame(&mut self, data: &[u8]) -> Result<Vec<u8>, Error> {
        let frames = data.len().div_ceil(FRAME_INPUT);
        let mut out = Vec::with_capacity(data.len() / 2 + frames * (CHECKSUM + HEADER));
        for piece in data.chunks(FRAME_INPUT) {
            let bound = lz4_flex::block::get_maximum_output_size(piece.len());
            if self.scratch.len() < HEADER + bound {
                self.scratch.resize(HEADER + bound, 0);
            }
            let n =
                lz4_flex::block::compress_into(piece, &mut self.scratch[HEADER..HEADER + bound])
                    .map_err(|e| Error::Compression(e.into()))?;
            let (Ok(compressed), Ok(uncompressed)) =
                (u32::try_from(HEADER + n), u32::try_from(piece.len()))
            else {
                return Err(Error::Compression("a frame over 4 GiB".into()));
            };
            let body = &mut self.scratch[..HEADER + n];
            body[0] = LZ4;
            body[1..5].copy_from_slice(&compressed.to_le_bytes());
            body[5..9].copy_from_slice(&uncompressed.to_le_bytes());
            let checksum = cityhash_rs::cityhash_102_128(body).rotate_right(64);
            out.extend_from_slice(&checksum.to_le_bytes());
            out.extend_from_slice(body);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames of `framed`, each checked (checksum, sizes) and
    /// decompressed.
    fn unframe(mut framed: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while !framed.is_empty() {
            let sum = u128::from_le_bytes(framed[..CHECKSUM].try_into().unwrap());
            let rest = &framed[CHECKSUM..];
            assert_eq!(rest[0], LZ4);
            let compressed = u32::from_le_bytes(rest[1..5].try_into().unwrap()) as usize;
            let uncompressed = u32::from_le_bytes(rest[5..9].try_into().unwrap()) as usize;
            let body = &rest[..compressed];
            assert_eq!(cityhash_rs::cityhash_102_128(body).rotate_right(64), sum);
            assert!(uncompressed <= FRAME_INPUT);
            let data = lz4_flex::block::decompress(&body[HEADER..], uncompressed).unwrap();
            out.extend(data);
            framed = &rest[compressed..];
        }
        out
    }

    #[test]
    fn frames_hold_the_data_in_pieces_a_server_can_check() {
        let mut framer = Framer::default();
        // Compressible, incompressible, empty, and several frames long.
        let mut noise = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..3 * FRAME_INPUT + 17)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
                noise as u8
            })
            .collect();
        let runs: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i / 1000).to_le_bytes())
            .collect();
        for data in [&runs[..], &random[..], &[][..], &random[..10]] {
            let framed = framer.frame(data).unwrap();
            assert_eq!(framed.is_empty(), data.is_empty());
            assert_eq!(unframe(&framed), data);
        }
        let framed = framer.frame(&random).unwrap();
        // Four frames: three full, one of 17 bytes.
        let mut at = 0;
        let mut sizes = Vec::new();
        while at < framed.len() {
            let rest = &framed[at + CHECKSUM..];
            sizes.push(u32::from_le_bytes(rest[5..9].try_into().unwrap()));
            at += CHECKSUM + u32::from_le_bytes(rest[1..5].try_into().unwrap()) as usize;
        }
        let full = FRAME_INPUT as u32;
        assert_eq!(sizes, [full, full, full, 17]);
        // A corrupted byte fails the checksum a server checks.
        let mut bad = framer.frame(&runs).unwrap();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let body = &bad[CHECKSUM..];
        let sum = u128::from_le_bytes(bad[..CHECKSUM].try_into().unwrap());
        assert_ne!(cityhash_rs::cityhash_102_128(body).rotate_right(64), sum);
    }
}
