//! Matching a request descriptor's ordered entries against a domain's tree, and an unordered
//! set of pairs (an RLQS bucket id) against the same tree.
//!
//! Per level: an exact `key`+`value` node wins, then the first wildcard pattern of that key in
//! config order, then the key-only default. A limit applies only when it sits on the node of
//! the request's last entry: a shorter request gets the limit of the node it ends on, a longer
//! one gets none. Allocation-free for ordered entries.
//!
//! Unordered pairs match the path that uses every pair exactly once, the tree choosing the
//! order: at each level the pairs not yet used are tried in ascending key order, and the first
//! complete path whose last node carries a limit wins. The search visits at most
//! [`MAX_UNORDERED_STEPS`] candidate nodes, so a hostile bucket id cannot make it expensive.

use super::{Domain, KeyNodes, Level, Limit, Node};

/// The most candidate nodes one unordered lookup visits before it gives up (no match).
pub const MAX_UNORDERED_STEPS: u32 = 4_096;

impl Domain {
    /// The limit for a descriptor with these entries, if any.
    pub fn lookup<'a, 'e, I>(&'a self, entries: I) -> Option<&'a Limit>
    where
        I: ExactSizeIterator<Item = (&'e str, &'e str)>,
    {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        for (index, (key, value)) in entries.enumerate() {
            let node = level.by_key.get(key).and_then(|nodes| nodes.pick(value))?;
            if index == last {
                return node.limit.as_ref();
            }
            level = Node::children_if_any(node)?;
        }
        None
    }

    /// The limit for an unordered set of `pairs` (keys distinct, sorted ascending) and the
    /// order, as indexes into `pairs`, of the path it sits on.
    pub fn lookup_unordered<'a>(
        &'a self,
        pairs: &[(&str, &str)],
    ) -> Option<(&'a Limit, Vec<usize>)> {
        if pairs.is_empty() {
            return None;
        }
        let mut search = Search {
            pairs,
            used: vec![false; pairs.len()],
            order: Vec::with_capacity(pairs.len()),
            steps: MAX_UNORDERED_STEPS,
        };
        let limit = search.level(&self.root)?;
        Some((limit, search.order))
    }
}

/// The state of one unordered lookup.
struct Search<'p> {
    pairs: &'p [(&'p str, &'p str)],
    used: Vec<bool>,
    order: Vec<usize>,
    steps: u32,
}

impl Search<'_> {
    fn level<'a>(&mut self, level: &'a Level) -> Option<&'a Limit> {
        for index in 0..self.pairs.len() {
            if self.used[index] {
                continue;
            }
            self.steps = self.steps.checked_sub(1)?;
            let (key, value) = self.pairs[index];
            let Some(node) = level.by_key.get(key).and_then(|nodes| nodes.pick(value)) else {
                continue;
            };
            self.used[index] = true;
            self.order.push(index);
            let found = if self.order.len() == self.pairs.len() {
                node.limit.as_ref()
            } else {
                Node::children_if_any(node).and_then(|children| self.level(children))
            };
            if found.is_some() {
                return found;
            }
            if self.steps == 0 {
                return None;
            }
            self.used[index] = false;
            self.order.pop();
        }
        None
    }
}

impl KeyNodes {
    /// The node for `value`: exact, else the first matching wildcard, else the default.
    fn pick(&self, value: &str) -> Option<&Node> {
        self.exact
            .get(value)
            .or_else(|| {
                self.wildcards
                    .iter()
                    .find(|(pattern, _)| pattern.matches(value))
                    .map(|(_, node)| node)
            })
            .or(self.default.as_ref())
    }
}

impl Node {
    fn children_if_any(node: &Node) -> Option<&Level> {
        (!node.children.by_key.is_empty()).then_some(&node.children)
    }
}
