//! Small statistics: medians of repeated runs and fairness.

/// The median of `values` (the mean of the middle two for an even count);
/// `None` when empty. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
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
    fn jain_index_bounds() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(jain_index(&[8, 0, 0, 0]), Some(0.25));
        assert_eq!(jain_index(&[0, 0]), None);
    }
}
