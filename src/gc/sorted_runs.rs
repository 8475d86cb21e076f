//! Sorting a slice made of a few runs already in order, by merging the runs: what the
//! predictive order's sessions sort (an image's open uses, closed uses and pulls, each by
//! start, and its last use), where a sort from scratch cost a twentieth of `predictive` in
//! `simulate` (issue 53). The result is the slice sorted, the same as `sort_unstable`'s (a
//! total order: equal elements are equal values); more than [`MAX_RUNS`] runs are sorted
//! with `sort_unstable`, so the merge never costs more than a few passes.

/// The most runs merged; a slice of more is sorted with `sort_unstable`.
pub(crate) const MAX_RUNS: usize = 8;

/// Sorts `items`, merging its ascending runs through `buffer` when it has at most
/// [`MAX_RUNS`] of them (each merge one pass over the part sorted so far).
pub(crate) fn sort_runs<T: Ord + Copy>(items: &mut [T], buffer: &mut Vec<T>) {
    let runs = 1 + items.windows(2).filter(|w| w[0] > w[1]).count();
    if runs > MAX_RUNS {
        items.sort_unstable();
        return;
    }
    let mut sorted = run_end(items, 0);
    while sorted < items.len() {
        let end = run_end(items, sorted);
        buffer.clear();
        let (mut a, mut b) = (0, sorted);
        while a < sorted && b < end {
            if items[b] < items[a] {
                buffer.push(items[b]);
                b += 1;
            } else {
                buffer.push(items[a]);
                a += 1;
            }
        }
        buffer.extend_from_slice(&items[a..sorted]);
        buffer.extend_from_slice(&items[b..end]);
        items[..end].copy_from_slice(buffer);
        sorted = end;
    }
}

/// The end (exclusive) of the ascending run of `items` starting at `start`.
fn run_end<T: Ord>(items: &[T], start: usize) -> usize {
    items[start..]
        .windows(2)
        .position(|w| w[0] > w[1])
        .map_or(items.len(), |i| start + i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random slices of a few runs (and of many, the fallback), with repeated values: the
    /// merge gives exactly `sort_unstable`'s result.
    #[test]
    fn sorting_by_runs_equals_sorting_from_scratch() {
        let mut rng = fastrand::Rng::with_seed(53);
        let mut buffer = Vec::new();
        for _ in 0..5_000 {
            let runs = rng.usize(0..=MAX_RUNS + 3);
            let mut items: Vec<(i64, i64)> = Vec::new();
            for _ in 0..runs {
                let mut run: Vec<(i64, i64)> = (0..rng.usize(0..40))
                    .map(|_| (rng.i64(0..30), rng.i64(0..3)))
                    .collect();
                run.sort_unstable();
                items.extend(run);
            }
            if rng.bool() {
                // Sometimes no order at all.
                rng.shuffle(&mut items);
            }
            let mut want = items.clone();
            want.sort_unstable();
            sort_runs(&mut items, &mut buffer);
            assert_eq!(items, want);
        }
    }

    #[test]
    fn an_empty_or_sorted_slice_is_left_as_it_is() {
        let mut buffer = Vec::new();
        let mut empty: Vec<i64> = Vec::new();
        sort_runs(&mut empty, &mut buffer);
        assert!(empty.is_empty());
        let mut sorted = vec![1, 2, 2, 3];
        sort_runs(&mut sorted, &mut buffer);
        assert_eq!(sorted, vec![1, 2, 2, 3]);
    }
}
