//! The order in which Triton visits a request's inputs. Triton keeps them
//! in a `std::unordered_map<std::string, Input>` (libstdc++), so its checks
//! walk the inputs, and its messages list them, in that map's iteration
//! order: a function of the names' hashes and of the order they were added
//! in. This module computes that order, so that a request with two faulty
//! inputs is refused naming the same one Triton names.
//!
//! The model is libstdc++'s (GCC 5 and later, 64-bit): `std::hash<string>`
//! is `_Hash_bytes` (a MurmurHash2 variant, seed `0xc70f6907`); the table
//! starts with one bucket and grows by `_Prime_rehash_policy` (11 at the
//! first insertion, then at least twice the count, a prime of its list); a
//! node going to an empty bucket goes to the front of the table's single
//! list, one going to a bucket that has nodes goes just before that
//! bucket's first node, and a rehash re-inserts the nodes in list order by
//! the same rule. The tests compare it with orders printed by a g++ 12
//! program.

const SEED: u64 = 0xc70f_6907;
const MUL: u64 = (0xc6a4_a793_u64 << 32) + 0x5bd1_e995;

/// `_Prime_rehash_policy`'s bucket counts (libstdc++'s `__prime_list`,
/// from 2 up to the first past 5000 inputs).
const PRIMES: &[usize] = &[
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97,
    103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313,
    337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109,
    1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739,
    4027, 4349, 4703, 5087,
];

/// The small counts' table of `_Prime_rehash_policy::_M_next_bkt`.
const FAST: [usize; 14] = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13];

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// `std::hash<std::string>` of libstdc++ on a 64-bit target.
pub(crate) fn string_hash(bytes: &[u8]) -> u64 {
    let aligned = bytes.len() & !7;
    let mut hash = SEED ^ (bytes.len() as u64).wrapping_mul(MUL);
    for chunk in bytes[..aligned].chunks_exact(8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        hash ^= shift_mix(word.wrapping_mul(MUL)).wrapping_mul(MUL);
        hash = hash.wrapping_mul(MUL);
    }
    let tail = &bytes[aligned..];
    if !tail.is_empty() {
        let word = tail
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) + u64::from(b));
        hash ^= word;
        hash = hash.wrapping_mul(MUL);
    }
    shift_mix(shift_mix(hash).wrapping_mul(MUL))
}

/// A libstdc++ unordered set of (hash, position) as far as its iteration
/// order goes.
struct Table {
    buckets: usize,
    next_resize: usize,
    /// The single list, in iteration order: (hash, position in the request).
    list: Vec<(u64, usize)>,
}

impl Table {
    fn next_bucket_count(&mut self, n: usize) -> usize {
        if n < FAST.len() {
            self.next_resize = FAST[n];
            return FAST[n];
        }
        let count = PRIMES[6..].iter().copied().find(|&p| p >= n).unwrap_or(n);
        self.next_resize = count;
        count
    }

    /// `_M_need_rehash` for one more element (max load factor 1).
    fn rehash_to(&mut self) -> Option<usize> {
        let elements = self.list.len() + 1;
        if elements <= self.next_resize {
            return None;
        }
        let min = elements.max(if self.next_resize == 0 { 11 } else { 0 });
        if min >= self.buckets {
            Some(self.next_bucket_count((min + 1).max(self.buckets * 2)))
        } else {
            self.next_resize = self.buckets;
            None
        }
    }

    fn place(&mut self, node: (u64, usize)) {
        let bucket = node.0 % self.buckets as u64;
        let at = self
            .list
            .iter()
            .position(|(h, _)| h % self.buckets as u64 == bucket)
            .unwrap_or(0);
        self.list.insert(at, node);
    }

    fn insert(&mut self, node: (u64, usize)) {
        if let Some(buckets) = self.rehash_to() {
            self.buckets = buckets;
            for old in std::mem::take(&mut self.list) {
                self.place(old);
            }
        }
        self.place(node);
    }
}

/// The positions of `names` (distinct, in the order the request gave them)
/// in the order Triton's input map iterates them.
pub(crate) fn triton_order<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<usize> {
    let mut table = Table {
        buckets: 1,
        next_resize: 0,
        list: Vec::new(),
    };
    for (i, name) in names.into_iter().enumerate() {
        table.insert((string_hash(name.as_bytes()), i));
    }
    table.list.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order of `given` as Triton iterates it.
    fn ordered<'a>(given: &[&'a str]) -> Vec<&'a str> {
        triton_order(given.iter().copied())
            .into_iter()
            .map(|i| given[i])
            .collect()
    }

    #[test]
    fn hashes_as_libstdcxx() {
        assert_eq!(string_hash(b"INPUT0"), 2526639154658133543);
    }

    /// Each expected order was printed by iterating a
    /// `std::unordered_map<std::string, int>` built with g++ 12.
    #[test]
    fn iterates_as_libstdcxx_unordered_map() {
        assert_eq!(ordered(&["INPUT0", "INPUT1"]), ["INPUT1", "INPUT0"]);
        assert_eq!(ordered(&["INPUT1", "INPUT0"]), ["INPUT0", "INPUT1"]);
        assert_eq!(
            ordered(&["INPUT0", "INPUT1", "INPUT2", "INPUT3"]),
            ["INPUT3", "INPUT2", "INPUT1", "INPUT0"]
        );
        assert_eq!(
            ordered(&["DUMMY_INPUT0", "INPUT0"]),
            ["INPUT0", "DUMMY_INPUT0"]
        );
        // A shared bucket, and a name past 16 bytes.
        assert_eq!(
            ordered(&[
                "x_very_long_input_name_beyond_16_bytes",
                "y",
                "START",
                "END",
                "READY",
                "CORRID"
            ]),
            [
                "CORRID",
                "END",
                "START",
                "READY",
                "y",
                "x_very_long_input_name_beyond_16_bytes"
            ]
        );
        // Past 13 names: rehashes.
        let letters: Vec<String> = ('a'..='t').map(String::from).collect();
        let letters: Vec<&str> = letters.iter().map(String::as_str).collect();
        assert_eq!(ordered(&letters).concat(), "tsrqoabphndkcifgejlm");
        let many: Vec<String> = (0..40).map(|i| format!("input_{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let expected = [
            39, 38, 37, 33, 31, 30, 12, 35, 28, 11, 14, 19, 36, 24, 6, 3, 5, 20, 8, 32, 15, 9, 2,
            27, 13, 16, 34, 1, 4, 7, 10, 0, 25, 21, 17, 29, 22, 18, 23, 26,
        ];
        let expected: Vec<String> = expected.iter().map(|i| format!("input_{i}")).collect();
        assert_eq!(ordered(&many), expected);
    }
}
