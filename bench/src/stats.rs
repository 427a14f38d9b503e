//! Small statistics: medians of repeated runs, percentiles and fairness.

use serde::{Deserialize, Serialize};

/// The median of `values` (the mean of the middle two for an even count);
/// `None` when empty. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let sorted = sorted(values);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// The nearest-rank percentile of `values` (`q` in 0..=1: the smallest value
/// with at least `q` of the values at or below it); `None` when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    (!values.is_empty()).then(|| nearest_rank(&sorted(values), q))
}

/// `steps + 1` nearest-rank percentiles of `values`, at `q` = 0, 1/`steps`,
/// … 1: the distribution, from the smallest value to the largest, in as many
/// points whatever the count (empty when `values` is).
pub fn quantiles(values: &[f64], steps: usize) -> Vec<f64> {
    if values.is_empty() {
        return Vec::new();
    }
    let sorted = sorted(values);
    let steps = steps.max(1);
    (0..=steps)
        .map(|i| nearest_rank(&sorted, i as f64 / steps as f64))
        .collect()
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted
}

/// The percentile `q` of non-empty `sorted` values.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    // (Less a hair, so that 0.99 × 100 is rank 99 whatever the rounding.)
    let rank =
        ((q.clamp(0.0, 1.0) * sorted.len() as f64 - 1e-9).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The arithmetic mean; `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Percentiles of some samples, µs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Spread {
    pub count: usize,
    pub p50_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    pub mean_us: Option<f64>,
}

impl Spread {
    pub fn of(samples: &[f64]) -> Spread {
        Spread {
            count: samples.len(),
            p50_us: percentile(samples, 0.50),
            p90_us: percentile(samples, 0.90),
            p99_us: percentile(samples, 0.99),
            max_us: percentile(samples, 1.0),
            mean_us: mean(samples),
        }
    }
}

/// Jain's fairness index of per-client counts: 1 when every client got the
/// same share, 1/n when one client got everything. `None` when nobody got
/// anything.
pub fn jain_index(counts: &[u64]) -> Option<f64> {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let sum_sq: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    (sum_sq > 0.0).then(|| sum * sum / (counts.len() as f64 * sum_sq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(100.0));
        assert_eq!(percentile(&values, 0.99), Some(198.0));
        assert_eq!(percentile(&values, 1.0), Some(200.0));
        assert_eq!(percentile(&values, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        assert_eq!(mean(&[]), None);
        assert_eq!(
            quantiles(&[3.0, 1.0, 2.0, 4.0], 4),
            [1.0, 1.0, 2.0, 3.0, 4.0]
        );
        assert!(quantiles(&[], 4).is_empty());
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(jain_index(&[8, 0, 0, 0]), Some(0.25));
        assert_eq!(jain_index(&[0, 0]), None);
    }
}
