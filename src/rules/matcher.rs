//! Matching a request descriptor's ordered entries against a domain's tree.
//!
//! Per level: an exact `key`+`value` node wins, then the first wildcard pattern of that key in
//! config order, then the key-only default. A limit applies only when it sits on the node of
//! the request's last entry: a shorter request gets the limit of the node it ends on, a longer
//! one gets none. Allocation-free.

use super::{Domain, Limit, Node};

impl Domain {
    /// The limit for a descriptor with these entries, if any.
    pub fn lookup<'a, 'e, I>(&'a self, entries: I) -> Option<&'a Limit>
    where
        I: ExactSizeIterator<Item = (&'e str, &'e str)>,
    {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        for (index, (key, value)) in entries.enumerate() {
            let node = level.by_key.get(key).and_then(|nodes| {
                nodes
                    .exact
                    .get(value)
                    .or_else(|| {
                        nodes
                            .wildcards
                            .iter()
                            .find(|(pattern, _)| pattern.matches(value))
                            .map(|(_, node)| node)
                    })
                    .or(nodes.default.as_ref())
            })?;
            if index == last {
                return node.limit.as_ref();
            }
            level = Node::children_if_any(node)?;
        }
        None
    }
}

impl Node {
    fn children_if_any(node: &Node) -> Option<&super::Level> {
        (!node.children.by_key.is_empty()).then_some(&node.children)
    }
}
