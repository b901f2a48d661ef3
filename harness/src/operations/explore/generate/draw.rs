//! The random draws a generated case is made of: one ChaCha stream per case, so a case is the
//! same bytes whatever was generated before it, on any machine.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The draws of one case.
pub struct Draw {
    rng: ChaCha8Rng,
}

impl Draw {
    /// Case `case` of `seed`: the seed picks the key, the case the stream.
    pub fn new(seed: u64, case: u64) -> Draw {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(case);
        Draw { rng }
    }

    /// A number in `0..n` (0 for `n` = 0). Multiply-shift: the bias for the small `n` drawn here
    /// is below 2^-50, and the mapping is kpct's own, so it cannot change under it.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.rng.next_u64()) * n as u128) >> 64) as usize
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    /// True with `percent` % probability.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent as usize
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// One of `choices` in proportion to its weight; the first when every weight is 0.
    pub fn weighted<T: Copy>(&mut self, choices: &[(T, u32)]) -> T {
        let total: u32 = choices.iter().map(|(_, w)| w).sum();
        if total == 0 {
            return choices[0].0;
        }
        let mut at = self.below(total as usize) as u32;
        for (choice, weight) in choices {
            if at < *weight {
                return *choice;
            }
            at -= weight;
        }
        choices[choices.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::Draw;

    #[test]
    fn a_case_is_the_same_draws_for_the_same_seed_and_case_only() {
        let draws = |seed, case| {
            let mut d = Draw::new(seed, case);
            (0..32).map(|_| d.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draws(7, 3), draws(7, 3));
        assert_ne!(draws(7, 3), draws(7, 4));
        assert_ne!(draws(7, 3), draws(8, 3));
    }

    #[test]
    fn weighted_choices_follow_their_weights() {
        let mut d = Draw::new(1, 1);
        let mut counts = [0usize; 3];
        for _ in 0..30_000 {
            counts[d.weighted(&[(0, 1), (1, 2), (2, 0)])] += 1;
        }
        assert_eq!(counts[2], 0, "a weight of 0 is never drawn");
        assert!((9_000..11_000).contains(&counts[0]), "{counts:?}");
        assert_eq!(d.weighted(&[(5, 0), (6, 0)]), 5);
        assert!((0..100).all(|_| d.between(3, 5) >= 3 && d.between(3, 5) <= 5));
    }
}
