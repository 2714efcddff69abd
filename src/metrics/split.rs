//! The reference's split of a request's hits into the within / near / over limit stats.

/// How a request's hits split between the within/near/over stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Split {
    pub(crate) within: u64,
    pub(crate) near: u64,
    pub(crate) over: u64,
}

/// The reference's split: over the limit, all hits count as over if the counter already was,
/// otherwise only the part beyond the limit (and the part between the near threshold and the
/// limit counts as near); within the limit, all hits count as within, and those beyond the
/// near threshold also as near.
pub(crate) fn split_hits(limit: u64, ratio: f64, after: u64, hits: u64) -> Split {
    let before = after.saturating_sub(hits);
    // Truncation is the reference's floor(limit × ratio).
    let threshold = (limit as f64 * ratio).floor() as u64;
    if after > limit {
        let (over, near) = if before >= limit {
            (hits, 0)
        } else {
            (after - limit, limit - threshold.max(before))
        };
        Split {
            within: 0,
            near,
            over,
        }
    } else {
        let near = if after > threshold {
            if before >= threshold {
                hits
            } else {
                after - threshold
            }
        } else {
            0
        };
        Split {
            within: hits,
            near,
            over: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Split, split_hits};

    #[test]
    fn reference_split() {
        // limit 20, threshold 16.
        assert_eq!(
            split_hits(20, 0.8, 5, 5),
            Split {
                within: 5,
                near: 0,
                over: 0
            }
        );
        assert_eq!(
            split_hits(20, 0.8, 18, 3),
            Split {
                within: 3,
                near: 2,
                over: 0
            }
        );
        assert_eq!(
            split_hits(20, 0.8, 20, 2),
            Split {
                within: 2,
                near: 2,
                over: 0
            }
        );
        assert_eq!(
            split_hits(20, 0.8, 23, 7),
            Split {
                within: 0,
                near: 4,
                over: 3
            }
        );
        assert_eq!(
            split_hits(20, 0.8, 25, 3),
            Split {
                within: 0,
                near: 0,
                over: 3
            }
        );
        assert_eq!(
            split_hits(20, 0.8, 21, 3),
            Split {
                within: 0,
                near: 2,
                over: 1
            }
        );
        // requests_per_unit 0 blocks: everything is over.
        assert_eq!(
            split_hits(0, 0.8, 1, 1),
            Split {
                within: 0,
                near: 0,
                over: 1
            }
        );
    }
}
