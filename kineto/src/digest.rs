//! A fast, stable 64-bit digest of a file's bytes, computed while the scan
//! reads them ([`Chunk::file_digest`](crate::Chunk::file_digest)): `rankscope
//! import` derives its session id from it (a pure function of the input, so
//! a re-import is recognised) without reading the file a second time.
//!
//! Not cryptographic: it tells different traces apart by accident, not
//! against an adversary (who could only make their own import be taken for
//! a duplicate of another one of theirs). Construction: four independent
//! lanes over 64-byte blocks, each step a folded 64x64->128-bit multiply of
//! two words, one of them mixed with the lane (the wyhash / rapidhash
//! step: 16 bytes per multiply), then the zero-padded tail and the length
//! folded in. Stable across builds and
//! platforms (little-endian words, fixed constants); several GB/s (the
//! byte-at-a-time FNV-1a it replaced ran at about 1.3 GB/s and took a
//! quarter of the importer's CPU time).

/// Odd 64-bit constants (the fractional digits of pi, as in wyhash).
const K: [u64; 5] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
];

/// Bytes per block: two words per lane.
const BLOCK: usize = 64;

fn fold(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// The digest being computed; [`Digest::write`] any split of the bytes
/// gives the same [`Digest::finish`].
#[derive(Debug, Clone)]
pub struct Digest {
    lanes: [u64; 4],
    tail: [u8; BLOCK],
    tail_len: usize,
    len: u64,
}

impl Default for Digest {
    fn default() -> Self {
        Self {
            // Not the constants the words are mixed with: a lane's first
            // step would be symmetric in its two words.
            lanes: [K[1], K[2], K[3], K[4]],
            tail: [0; BLOCK],
            tail_len: 0,
            len: 0,
        }
    }
}

impl Digest {
    fn block(&mut self, block: &[u8; BLOCK]) {
        let word = |j: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&block[8 * j..8 * j + 8]);
            u64::from_le_bytes(w)
        };
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            *lane = fold(word(2 * i) ^ K[i], word(2 * i + 1) ^ *lane);
        }
    }

    pub fn write(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.tail_len > 0 {
            let take = (BLOCK - self.tail_len).min(bytes.len());
            self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&bytes[..take]);
            self.tail_len += take;
            bytes = &bytes[take..];
            if self.tail_len < BLOCK {
                return;
            }
            let block = self.tail;
            self.block(&block);
            self.tail_len = 0;
        }
        let mut blocks = bytes.chunks_exact(BLOCK);
        for b in &mut blocks {
            let mut block = [0u8; BLOCK];
            block.copy_from_slice(b);
            self.block(&block);
        }
        let rest = blocks.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    pub fn finish(&self) -> u64 {
        let mut d = self.clone();
        // The tail, zero-padded: the length below tells "ab" from "ab\0".
        let mut block = [0u8; BLOCK];
        block[..d.tail_len].copy_from_slice(&d.tail[..d.tail_len]);
        if d.tail_len > 0 {
            d.block(&block);
        }
        let [a, b, c, e] = d.lanes;
        fold(fold(a, b ^ K[4]) ^ d.len, fold(c, e ^ K[4]) ^ K[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(bytes: &[u8]) -> u64 {
        let mut d = Digest::default();
        d.write(bytes);
        d.finish()
    }

    #[test]
    fn any_split_gives_the_same_digest() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let whole = digest(&data);
        for split in [1, 5, 31, 32, 33, 63, 64, 65, 128, 999] {
            let mut d = Digest::default();
            for part in data.chunks(split) {
                d.write(part);
            }
            assert_eq!(d.finish(), whole, "parts of {split}");
        }
    }

    #[test]
    fn pinned_values_and_near_inputs_differ() {
        // Pinned: a change here would make re-imports look new.
        let pinned = [digest(b""), digest(b"a"), digest(&[7u8; 100])];
        assert_eq!(
            pinned,
            [
                0x3cc3_f303_5992_cf15,
                0x9087_dda6_e299_40bd,
                0xe1c0_5f19_e7b1_cfd0
            ],
            "{pinned:#x?}"
        );
        let mut seen = std::collections::HashSet::new();
        let base = vec![0u8; 100];
        assert!(seen.insert(digest(&base)));
        assert!(seen.insert(digest(&base[..99])), "length counts");
        for i in 0..100 {
            for bit in 0..8 {
                let mut v = base.clone();
                v[i] ^= 1 << bit;
                assert!(seen.insert(digest(&v)), "byte {i} bit {bit}");
            }
        }
    }
}
